//! Least privilege: what a ServiceAccount did with the permissions it was given — which
//! granted rules its requests used, which requests were denied (and the rule that would
//! allow each), and which granted rules it never used.
//!
//! [`TestEnv`](crate::TestEnv) records every authorization decision of every user outside
//! `system:masters`; [`TestEnv::permissions`](crate::TestEnv::permissions) judges them
//! against the roles bound to the ServiceAccount by name.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use konverge_apiserver::auth::authz::{Attributes, Decision};
use konverge_apiserver::auth::rbac::{Grant, PolicyRule, breakdown_rule};

/// How many decisions are kept (the oldest are dropped beyond).
const MAX_RECORDS: usize = 200_000;

/// One authorization decision.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    attributes: Attributes,
    allowed: bool,
}

/// The decisions the server made, shared with its observer.
#[derive(Debug, Clone, Default)]
pub(crate) struct DecisionLog(Arc<Mutex<Vec<Record>>>);

impl DecisionLog {
    /// Records a decision about a user outside `system:masters`.
    pub(crate) fn observe(&self, attributes: &Attributes, decision: &Decision) {
        if attributes
            .user
            .in_group(konverge_apiserver::auth::user::SYSTEM_MASTERS)
        {
            return;
        }
        let mut records = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= MAX_RECORDS {
            records.remove(0);
        }
        records.push(Record {
            attributes: attributes.clone(),
            allowed: decision.allowed(),
        });
    }

    fn of(&self, user: &str) -> Vec<Record> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|r| r.attributes.user.name == user)
            .cloned()
            .collect()
    }
}

/// Where a rule applies.
fn scope(namespace: &str) -> String {
    if namespace.is_empty() {
        "cluster-wide".into()
    } else {
        format!("in namespace {namespace:?}")
    }
}

/// A granted permission (one verb, group, resource and name, or one verb and URL) the
/// ServiceAccount's requests used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Used {
    /// The permission.
    pub rule: PolicyRule,
    /// Where it applies (empty: cluster-wide).
    pub namespace: String,
    /// The binding that grants it.
    pub binding: String,
    /// How many requests it allowed.
    pub requests: usize,
}

/// A request kind that was denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// `list configmaps`, `patch deployments.apps/status`, `get path "/metrics"`.
    pub request: String,
    /// Where it was asked (empty: cluster-wide, or not about a resource).
    pub namespace: String,
    /// The rule that would allow it, in that namespace (or cluster-wide).
    pub needs: PolicyRule,
    /// How many requests of the kind were denied.
    pub requests: usize,
}

/// A granted permission no request used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unused {
    /// The permission.
    pub rule: PolicyRule,
    /// Where it applies (empty: cluster-wide).
    pub namespace: String,
    /// The binding that grants it.
    pub binding: String,
}

/// What one ServiceAccount did with its permissions; from
/// [`TestEnv::permissions`](crate::TestEnv::permissions). `Display` is a readable report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    /// The user name, `system:serviceaccount:<ns>:<name>`.
    pub user: String,
    /// Granted permissions that requests used.
    pub used: Vec<Used>,
    /// Requests that were denied.
    pub denied: Vec<Denial>,
    /// Granted permissions never used.
    pub unused: Vec<Unused>,
    /// Requests allowed by roles bound to its groups rather than to it by name (discovery,
    /// `system:basic-user`, ...).
    pub allowed_by_groups: usize,
}

impl Permissions {
    pub(crate) fn judge(user: &str, log: &DecisionLog, grants: &[Grant]) -> Permissions {
        // Every granted permission, one verb/group/resource/name each, in grant order.
        let mut granted: Vec<(usize, PolicyRule, usize)> = Vec::new();
        for (g, grant) in grants.iter().enumerate() {
            for rule in &grant.rules {
                for sub in breakdown_rule(rule) {
                    if !granted.iter().any(|(i, r, _)| *i == g && *r == sub) {
                        granted.push((g, sub, 0));
                    }
                }
            }
        }
        let mut denied: BTreeMap<(String, String), Denial> = BTreeMap::new();
        let mut allowed_by_groups = 0;
        for record in log.of(user) {
            let a = &record.attributes;
            if record.allowed {
                let found = granted.iter_mut().find(|(g, rule, _)| {
                    let namespace = &grants[*g].namespace;
                    (namespace.is_empty() || *namespace == a.namespace) && rule.allows(a)
                });
                match found {
                    Some((_, _, count)) => *count += 1,
                    None => allowed_by_groups += 1,
                }
                continue;
            }
            let (request, needs) = needed(a);
            let entry = denied
                .entry((a.namespace.clone(), request.clone()))
                .or_insert(Denial {
                    request,
                    namespace: a.namespace.clone(),
                    needs,
                    requests: 0,
                });
            entry.requests += 1;
        }
        let (mut used, mut unused) = (Vec::new(), Vec::new());
        for (g, rule, count) in granted {
            let grant = &grants[g];
            if count > 0 {
                used.push(Used {
                    rule,
                    namespace: grant.namespace.clone(),
                    binding: grant.binding.clone(),
                    requests: count,
                });
            } else {
                unused.push(Unused {
                    rule,
                    namespace: grant.namespace.clone(),
                    binding: grant.binding.clone(),
                });
            }
        }
        Permissions {
            user: user.to_string(),
            used,
            denied: denied.into_values().collect(),
            unused,
            allowed_by_groups,
        }
    }

    /// Panics with the report if any request was denied.
    #[track_caller]
    pub fn assert_no_denials(&self) {
        if !self.denied.is_empty() {
            panic!("requests were denied:\n{self}");
        }
    }
}

/// A denied request described, and the rule that would allow it.
fn needed(a: &Attributes) -> (String, PolicyRule) {
    if !a.resource_request {
        return (
            format!("{} path {:?}", a.verb, a.path),
            PolicyRule {
                verbs: vec![a.verb.clone()],
                non_resource_urls: vec![a.path.clone()],
                ..PolicyRule::default()
            },
        );
    }
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let qualified = if a.api_group.is_empty() {
        resource.clone()
    } else {
        format!("{}.{}/{}", a.resource, a.api_group, a.subresource)
            .trim_end_matches('/')
            .to_string()
    };
    let mut request = format!("{} {qualified}", a.verb);
    if !a.name.is_empty() {
        request.push_str(&format!(" {:?}", a.name));
    }
    (
        request,
        PolicyRule {
            verbs: vec![a.verb.clone()],
            api_groups: vec![a.api_group.clone()],
            resources: vec![resource],
            ..PolicyRule::default()
        },
    )
}

impl fmt::Display for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "permissions of {}", self.user)?;
        writeln!(f, "  denied ({}):", self.denied.len())?;
        for d in &self.denied {
            writeln!(
                f,
                "    {} ({} time{}): needs {} {}",
                d.request,
                d.requests,
                if d.requests == 1 { "" } else { "s" },
                d.needs.compact(),
                scope(&d.namespace),
            )?;
        }
        writeln!(f, "  used ({}):", self.used.len())?;
        for u in &self.used {
            writeln!(
                f,
                "    {} {}: {} request{} ({})",
                u.rule.compact(),
                scope(&u.namespace),
                u.requests,
                if u.requests == 1 { "" } else { "s" },
                u.binding
            )?;
        }
        writeln!(f, "  granted, never used ({}):", self.unused.len())?;
        for u in &self.unused {
            writeln!(
                f,
                "    {} {} ({})",
                u.rule.compact(),
                scope(&u.namespace),
                u.binding
            )?;
        }
        write!(
            f,
            "  allowed by roles bound to its groups: {} request{}",
            self.allowed_by_groups,
            if self.allowed_by_groups == 1 { "" } else { "s" }
        )
    }
}
