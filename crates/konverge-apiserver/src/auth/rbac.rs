//! The RBAC authorizer: Roles, ClusterRoles and their bindings, judged as kube-apiserver's
//! RBAC authorizer judges them.
//!
//! A request is allowed when some rule of some role bound to its user allows it: the
//! ClusterRoleBindings first, then the RoleBindings of the request's namespace (a RoleBinding
//! may reference a ClusterRole, whose rules then apply in that namespace only). A rule allows
//! a request when its verbs, API groups, resources (`pods/status`, `*/scale`, `*`) and
//! resource names all match, or for a request that is not about a resource, its verbs and
//! non-resource URLs (`/healthz`, `/api/*`). Nothing denies: rules only add. A binding whose
//! role is missing is skipped, and named in the reason of a denial.
//!
//! The objects are read through a [`Lister`] into a [`Snapshot`], rebuilt whenever its count
//! of RBAC writes ([`Changes::Policy`](crate::lister::Changes::Policy)) moves: so a
//! binding a client was told is created applies to its next request.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

pub use super::authz::PolicyRule;
use super::authz::{Attributes, Authorizer, Decision, RuleReview};
use super::user::{UserInfo, split_service_account_username};
use crate::lister::{Lister, View};

/// The RBAC API group.
pub const GROUP: &str = "rbac.authorization.k8s.io";

impl PolicyRule {
    /// Whether the rule allows the request (kube's `RuleAllows`).
    pub fn allows(&self, request: &Attributes) -> bool {
        if !self.verb_matches(&request.verb) {
            return false;
        }
        if !request.resource_request {
            return self.non_resource_url_matches(&request.path);
        }
        let combined = if request.subresource.is_empty() {
            request.resource.clone()
        } else {
            format!("{}/{}", request.resource, request.subresource)
        };
        self.api_group_matches(&request.api_group)
            && self.resource_matches(&combined, &request.subresource)
            && self.resource_name_matches(&request.name)
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    fn api_group_matches(&self, group: &str) -> bool {
        self.api_groups.iter().any(|g| g == "*" || g == group)
    }

    fn resource_matches(&self, combined: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            r == "*"
                || r == combined
                || (!subresource.is_empty()
                    && r.len() == subresource.len() + 2
                    && r.starts_with("*/")
                    && r.ends_with(subresource))
        })
    }

    fn resource_name_matches(&self, name: &str) -> bool {
        self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name)
    }

    fn non_resource_url_matches(&self, path: &str) -> bool {
        self.non_resource_urls.iter().any(|url| {
            url == "*"
                || url == path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
        })
    }

    /// The rule as kube writes it in escalation errors (`CompactString`):
    /// `{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`.
    pub fn compact(&self) -> String {
        let mut parts = Vec::new();
        for (name, values) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !values.is_empty() {
                parts.push(format!("{name}:{}", go_quoted(values)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// Whether `owner` rules cover every permission `servant` rules grant (kube's `Covers`), and
/// the permissions they do not cover, one verb, group, resource and name (or URL) each.
pub fn covers(owner: &[PolicyRule], servant: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let uncovered: Vec<PolicyRule> = servant
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect();
    (uncovered.is_empty(), uncovered)
}

/// A rule split into rules of one verb, group, resource and resource name, or one verb and
/// URL.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &String| vec![s.clone()];
    let mut subrules = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: one(verb),
                    ..PolicyRule::default()
                };
                if rule.resource_names.is_empty() {
                    subrules.push(base);
                } else {
                    subrules.extend(rule.resource_names.iter().map(|name| PolicyRule {
                        resource_names: one(name),
                        ..base.clone()
                    }));
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            subrules.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: one(verb),
                ..PolicyRule::default()
            });
        }
    }
    subrules
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| set.contains(w))
}

/// Whether `owner` covers the one-of-each `sub` rule (kube's `ruleCovers`).
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let star = |set: &[String]| set.iter().any(|s| s == "*");
    let verbs = star(&owner.verbs) || has_all(&owner.verbs, &sub.verbs);
    let groups = star(&owner.api_groups) || has_all(&owner.api_groups, &sub.api_groups);
    let resources = star(&owner.resources)
        || has_all(&owner.resources, &sub.resources)
        || sub.resources.iter().all(|path| {
            owner.resources.contains(path)
                || path
                    .split_once('/')
                    .is_some_and(|(_, sub)| owner.resources.contains(&format!("*/{sub}")))
        });
    let urls = sub.non_resource_urls.iter().all(|path| {
        owner.non_resource_urls.iter().any(|o| {
            o == path
                || o.strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
        })
    });
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && names && urls
}

/// Merges rules of one group and one resource (and nothing else) that differ only in verbs
/// (kube's `CompactRules`, for readable escalation errors).
fn compact_rules(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut compacted = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let is_simple = rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            compacted.push(rule);
            continue;
        }
        match simple
            .iter_mut()
            .find(|s| s.api_groups == rule.api_groups && s.resources == rule.resources)
        {
            Some(existing) => existing.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    compacted.extend(simple);
    compacted
}

/// kube's `ConfirmNoEscalation`: `Ok` if `owner` (the rules `user` holds) covers `rules`,
/// otherwise the message kube-apiserver forbids the write with.
pub fn confirm_no_escalation(
    user: &UserInfo,
    owner: &[PolicyRule],
    resolution_errors: &[String],
    rules: &[PolicyRule],
) -> Result<(), String> {
    let (covered, missing) = covers(owner, rules);
    if covered {
        return Ok(());
    }
    let described: BTreeSet<String> = compact_rules(missing)
        .iter()
        .map(PolicyRule::compact)
        .collect();
    let mut message = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        go_quoted(&user.groups),
        described.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !resolution_errors.is_empty() {
        message.push_str(&format!(
            "; resolution errors: [{}]",
            resolution_errors.join(" ")
        ));
    }
    Err(message)
}

/// A role bound to a user by name (a `User` or `ServiceAccount` subject, not a group): what
/// it grants, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The binding, as "allowed by" reasons name it (`RoleBinding "x/ns" of ClusterRole "y"
    /// to ServiceAccount "sa/ns"`).
    pub binding: String,
    /// Where the rules apply: the RoleBinding's namespace, empty for a ClusterRoleBinding.
    pub namespace: String,
    /// The role's rules (empty if the role does not exist).
    pub rules: Vec<PolicyRule>,
}

/// A rule split into rules of one verb, group, resource and resource name, or of one verb and
/// one URL (kube's `BreakdownRule`).
pub fn breakdown_rule(rule: &PolicyRule) -> Vec<PolicyRule> {
    breakdown(rule)
}

/// A list of strings as Go's `%q` prints it: `["a" "b"]`.
pub fn go_quoted(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Who a binding grants its role to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct Subject {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

impl Subject {
    /// kube's `appliesToUser`; `namespace` is the binding's (empty for a ClusterRoleBinding).
    fn applies_to(&self, user: &UserInfo, namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.in_group(&self.name),
            "ServiceAccount" => {
                let namespace = if self.namespace.is_empty() {
                    namespace
                } else {
                    &self.namespace
                };
                !namespace.is_empty()
                    && split_service_account_username(&user.name) == Some((namespace, &self.name))
            }
            _ => false,
        }
    }

    /// As kube names a subject in "allowed by" reasons.
    fn describe(&self, binding_namespace: &str) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => {
                let namespace = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                format!("{} {:?}", self.kind, format!("{}/{namespace}", self.name))
            }
            _ => format!("{} {:?}", self.kind, self.name),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct RoleRef {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Binding {
    metadata: Metadata,
    role_ref: RoleRef,
    #[serde(default)]
    subjects: Vec<Subject>,
}

#[derive(Debug, Clone, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Debug, Clone, Deserialize)]
struct Role {
    metadata: Metadata,
    #[serde(default)]
    rules: Option<Vec<PolicyRule>>,
}

/// Where a rule came from: a binding, the role it references, and the subject that matched.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    binding: &'a Binding,
    subject: &'a Subject,
    cluster: bool,
}

impl fmt::Display for Source<'_> {
    /// `ClusterRoleBinding "x" of ClusterRole "y" to Group "z"`, or
    /// `RoleBinding "x/ns" of Role "y" to ServiceAccount "sa/ns"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let binding = self.binding;
        if self.cluster {
            write!(
                f,
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                binding.metadata.name,
                binding.role_ref.kind,
                binding.role_ref.name,
                self.subject.describe("")
            )
        } else {
            write!(
                f,
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{}", binding.metadata.name, binding.metadata.namespace),
                binding.role_ref.kind,
                binding.role_ref.name,
                self.subject.describe(&binding.metadata.namespace)
            )
        }
    }
}

/// Every role and binding, as of one change of them.
#[derive(Debug, Default)]
pub struct Snapshot {
    cluster_roles: HashMap<String, Vec<PolicyRule>>,
    roles: HashMap<(String, String), Vec<PolicyRule>>,
    cluster_role_bindings: Vec<Binding>,
    role_bindings: HashMap<String, Vec<Binding>>,
}

/// The flow of a rule visit: whether to go on.
type Visit<'a> = &'a mut dyn FnMut(Option<Source<'_>>, Option<&PolicyRule>, Option<String>) -> bool;

impl Snapshot {
    /// kube's `VisitRulesFor`: each rule that applies to `user` in `namespace` with its
    /// source, and each role that could not be found, until `visit` says stop.
    fn visit_rules_for(&self, user: &UserInfo, namespace: &str, visit: Visit<'_>) {
        let cluster = self.cluster_role_bindings.iter().map(|b| (b, ""));
        let local = match namespace {
            "" => None,
            namespace => self.role_bindings.get(namespace),
        };
        let namespaced = local.into_iter().flatten().map(|b| (b, namespace));
        for (binding, scope) in cluster.chain(namespaced) {
            let Some(subject) = binding.subjects.iter().find(|s| s.applies_to(user, scope)) else {
                continue;
            };
            match self.role_rules(&binding.role_ref, scope) {
                Ok(rules) => {
                    let source = Source {
                        binding,
                        subject,
                        cluster: scope.is_empty(),
                    };
                    for rule in rules {
                        if !visit(Some(source), Some(rule), None) {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if !visit(None, None, Some(e)) {
                        return;
                    }
                }
            }
        }
    }

    /// The rules of a role reference, or the error kube's listers give for a missing role.
    fn role_rules(&self, role: &RoleRef, namespace: &str) -> Result<&[PolicyRule], String> {
        let found = match role.kind.as_str() {
            "ClusterRole" => self.cluster_roles.get(&role.name),
            "Role" => self.roles.get(&(namespace.to_string(), role.name.clone())),
            other => return Err(format!("unsupported role reference kind: {other:?}")),
        };
        found.map(Vec::as_slice).ok_or_else(|| {
            format!(
                "{}.{GROUP} {:?} not found",
                role.kind.to_lowercase(),
                role.name
            )
        })
    }

    /// The roles bound to `user` by name, in every namespace.
    pub fn grants_to(&self, user: &UserInfo) -> Vec<Grant> {
        let named =
            |s: &Subject, namespace: &str| s.kind != "Group" && s.applies_to(user, namespace);
        let mut grants = Vec::new();
        let cluster = self.cluster_role_bindings.iter().map(|b| (b, true));
        let namespaced = self.role_bindings.values().flatten().map(|b| (b, false));
        for (binding, is_cluster) in cluster.chain(namespaced) {
            let namespace = if is_cluster {
                ""
            } else {
                &binding.metadata.namespace
            };
            let Some(subject) = binding.subjects.iter().find(|s| named(s, namespace)) else {
                continue;
            };
            let source = Source {
                binding,
                subject,
                cluster: is_cluster,
            };
            grants.push(Grant {
                binding: source.to_string(),
                namespace: namespace.to_string(),
                rules: self
                    .role_rules(&binding.role_ref, namespace)
                    .map(<[PolicyRule]>::to_vec)
                    .unwrap_or_default(),
            });
        }
        grants.sort_by(|a, b| (&a.namespace, &a.binding).cmp(&(&b.namespace, &b.binding)));
        grants
    }

    /// Every rule that applies to `user` in `namespace`, and the errors met.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let (mut rules, mut errors) = (Vec::new(), Vec::new());
        self.visit_rules_for(user, namespace, &mut |_, rule, error| {
            rules.extend(rule.cloned());
            errors.extend(error);
            true
        });
        (rules, errors)
    }

    /// Whether RBAC allows the request; the reason names the binding that allowed it, or the
    /// roles that could not be found.
    pub fn authorize(&self, request: &Attributes) -> Decision {
        let mut allowed_by = None;
        let mut errors = Vec::new();
        self.visit_rules_for(
            &request.user,
            &request.namespace,
            &mut |source, rule, error| {
                if let (Some(source), Some(rule)) = (source, rule)
                    && rule.allows(request)
                {
                    allowed_by = Some(format!("RBAC: allowed by {source}"));
                    return false;
                }
                errors.extend(error);
                true
            },
        );
        match allowed_by {
            Some(reason) => Decision::Allow(reason),
            None => Decision::NoOpinion(aggregate_reason(errors)),
        }
    }
}

/// kube's aggregate of resolution errors: `RBAC: e`, or `RBAC: [e1, e2]`; empty without any.
fn aggregate_reason(errors: Vec<String>) -> String {
    let mut seen = BTreeSet::new();
    let unique: Vec<String> = errors
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    match unique.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", unique[0]),
        _ => format!("RBAC: [{}]", unique.join(", ")),
    }
}

/// The RBAC authorizer over a registry.
pub struct Rbac {
    registry: Arc<dyn Lister>,
    snapshot: View<Snapshot>,
}

impl fmt::Debug for Rbac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rbac").finish_non_exhaustive()
    }
}

impl Rbac {
    /// An authorizer over `registry`'s roles and bindings.
    pub fn new(registry: Arc<dyn Lister>) -> Rbac {
        Rbac {
            registry,
            snapshot: View::new(crate::lister::Changes::Policy),
        }
    }

    /// The policy as of the latest change of roles and bindings, rebuilt if they changed.
    pub async fn snapshot(&self) -> Result<Arc<Snapshot>, crate::error::ApiError> {
        self.snapshot
            .get(self.registry.as_ref(), |_| self.build())
            .await
    }

    async fn build(&self) -> Result<Snapshot, crate::error::ApiError> {
        let list = |plural: &'static str| {
            let registry = self.registry.clone();
            async move {
                let rt = registry.catalog().get(GROUP, "v1", plural).ok_or_else(|| {
                    crate::error::ApiError::internal(format!("{plural} are not served"))
                })?;
                let listed = registry.list(&rt, None, None).await?;
                Ok::<Vec<Arc<Value>>, crate::error::ApiError>(listed)
            }
        };
        let mut snapshot = Snapshot::default();
        for item in list("clusterroles").await? {
            if let Ok(role) = Role::deserialize(item.as_ref()) {
                snapshot
                    .cluster_roles
                    .insert(role.metadata.name, role.rules.unwrap_or_default());
            }
        }
        for item in list("roles").await? {
            if let Ok(role) = Role::deserialize(item.as_ref()) {
                snapshot.roles.insert(
                    (role.metadata.namespace, role.metadata.name),
                    role.rules.unwrap_or_default(),
                );
            }
        }
        for item in list("clusterrolebindings").await? {
            if let Ok(binding) = Binding::deserialize(item.as_ref()) {
                snapshot.cluster_role_bindings.push(binding);
            }
        }
        for item in list("rolebindings").await? {
            if let Ok(binding) = Binding::deserialize(item.as_ref()) {
                snapshot
                    .role_bindings
                    .entry(binding.metadata.namespace.clone())
                    .or_default()
                    .push(binding);
            }
        }
        Ok(snapshot)
    }

    /// Whether RBAC allows the request.
    pub async fn authorize(&self, request: &Attributes) -> Decision {
        match self.snapshot().await {
            Ok(snapshot) => snapshot.authorize(request),
            Err(e) => Decision::NoOpinion(format!("RBAC: {}", e.message)),
        }
    }

    /// The rules that apply to `user` in `namespace` (what a `SelfSubjectRulesReview` lists).
    pub async fn rules_for(&self, user: &UserInfo, namespace: &str) -> RuleReview {
        match self.snapshot().await {
            Ok(snapshot) => {
                let (rules, errors) = snapshot.rules_for(user, namespace);
                RuleReview::from_rules(rules, errors)
            }
            Err(e) => RuleReview {
                incomplete: true,
                evaluation_error: e.message,
                ..RuleReview::default()
            },
        }
    }
}

#[async_trait::async_trait]
impl Authorizer for Rbac {
    async fn authorize(&self, request: &Attributes) -> Decision {
        Rbac::authorize(self, request).await
    }

    async fn rules_for(&self, user: &UserInfo, namespace: &str) -> RuleReview {
        Rbac::rules_for(self, user, namespace).await
    }
}

/// What kube-apiserver's RBAC storage checks of a client's write: a Role or ClusterRole may
/// only grant what its writer holds (or may `escalate`), a binding may only bind a role whose
/// permissions its writer holds (or may `bind`). `system:masters` may do anything. Writes that
/// only change what garbage collection changes (owner references, finalizers) pass.
#[derive(Debug)]
pub struct Escalation {
    rbac: Arc<Rbac>,
    authorization: super::authz::Authorization,
}

impl Escalation {
    /// The check, resolving rules with `rbac` and asking `authorization` about `escalate`
    /// and `bind`.
    pub fn new(rbac: Arc<Rbac>, authorization: super::authz::Authorization) -> Escalation {
        Escalation {
            rbac,
            authorization,
        }
    }

    async fn allowed(
        &self,
        user: &UserInfo,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> bool {
        let request = Attributes {
            api_version: "*".into(),
            ..Attributes::resource(user, verb, group, resource, namespace, name)
        };
        self.authorization.decide(&request).await.allowed()
    }
}

/// Whether `new` differs from `old` only in what garbage collection writes.
fn only_gc_fields(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "resourceVersion",
                "generation",
            ] {
                md.remove(key);
            }
        }
        v
    };
    strip(old) == strip(new)
}

#[async_trait::async_trait]
impl crate::lister::WriteCheck for Escalation {
    fn applies(&self, rt: &crate::resources::ResourceType) -> bool {
        rt.group == GROUP
    }

    async fn check(
        &self,
        rt: &crate::resources::ResourceType,
        old: Option<&Value>,
        new: &Value,
        user: &UserInfo,
    ) -> Result<(), crate::error::ApiError> {
        if user.in_group(super::user::SYSTEM_MASTERS)
            || old.is_some_and(|old| only_gc_fields(old, new))
        {
            return Ok(());
        }
        let text = |pointer: &str| {
            new.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (name, namespace) = (text("/metadata/name"), text("/metadata/namespace"));
        let forbidden = |why: String| {
            crate::error::ApiError::forbidden(
                crate::error::Target {
                    group: GROUP,
                    resource: &rt.plural,
                    name: &name,
                },
                why,
            )
        };
        let rules: Vec<PolicyRule> = match rt.plural.as_str() {
            "roles" | "clusterroles" => {
                if self
                    .allowed(user, "escalate", GROUP, &rt.plural, &namespace, &name)
                    .await
                {
                    return Ok(());
                }
                new.get("rules")
                    .and_then(|r| serde_json::from_value(r.clone()).ok())
                    .unwrap_or_default()
            }
            "rolebindings" | "clusterrolebindings" => {
                let role: RoleRef = new
                    .get("roleRef")
                    .and_then(|r| serde_json::from_value(r.clone()).ok())
                    .unwrap_or(RoleRef {
                        kind: String::new(),
                        name: String::new(),
                    });
                let resource = match role.kind.as_str() {
                    "Role" => "roles",
                    _ => "clusterroles",
                };
                let group = new
                    .pointer("/roleRef/apiGroup")
                    .and_then(Value::as_str)
                    .unwrap_or(GROUP);
                if self
                    .allowed(user, "bind", group, resource, &namespace, &role.name)
                    .await
                {
                    return Ok(());
                }
                let snapshot = self.rbac.snapshot().await?;
                match snapshot.role_rules(&role, &namespace) {
                    Ok(rules) => rules.to_vec(),
                    Err(e) => return Err(forbidden(e)),
                }
            }
            _ => return Ok(()),
        };
        let snapshot = self.rbac.snapshot().await?;
        let (owner, errors) = snapshot.rules_for(user, &namespace);
        confirm_no_escalation(user, &owner, &errors, &rules).map_err(forbidden)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(value: Value) -> PolicyRule {
        serde_json::from_value(value).unwrap()
    }

    fn request(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            user: UserInfo::new("alice", &["devs"]),
            verb: verb.into(),
            resource_request: true,
            namespace: "d".into(),
            api_group: group.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    #[test]
    fn rules_match_as_kube_matches_them() {
        let pods =
            rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(pods.allows(&request("get", "", "pods", "", "x")));
        assert!(!pods.allows(&request("delete", "", "pods", "", "x")));
        assert!(!pods.allows(&request("get", "apps", "pods", "", "x")));
        assert!(
            !pods.allows(&request("get", "", "pods", "status", "x")),
            "a subresource is its own"
        );
        let status = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/status"]}));
        assert!(status.allows(&request("update", "apps", "deployments", "status", "x")));
        assert!(!status.allows(&request("update", "apps", "deployments", "scale", "x")));
        assert!(!status.allows(&request("update", "apps", "deployments", "", "x")));
        let named = rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}),
        );
        assert!(named.allows(&request("get", "", "configmaps", "", "a")));
        assert!(!named.allows(&request("get", "", "configmaps", "", "b")));
        assert!(
            !named.allows(&request("get", "", "configmaps", "", "")),
            "a list has no name"
        );
        let urls = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}));
        let path = |p: &str| Attributes {
            resource_request: false,
            path: p.into(),
            ..request("get", "", "", "", "")
        };
        assert!(urls.allows(&path("/healthz")));
        assert!(urls.allows(&path("/api/v1")));
        assert!(!urls.allows(&path("/apis")));
        assert!(!urls.allows(&path("/healthz/etcd")));
    }

    #[test]
    fn escalation_names_what_is_not_held() {
        let owner = vec![rule(
            json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps", "pods/*"]}),
        )];
        let wanted = vec![
            rule(
                json!({"verbs": ["get", "delete", "list"], "apiGroups": [""], "resources": ["configmaps", "secrets"]}),
            ),
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]})),
        ];
        let user = UserInfo::new("alice", &["devs", "system:authenticated"]);
        let e = confirm_no_escalation(&user, &owner, &[], &wanted).unwrap_err();
        assert_eq!(
            e,
            "user \"alice\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}\n{APIGroups:[\"\"], Resources:[\"pods/log\"], Verbs:[\"get\"]}\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\" \"list\"]}"
        );
        let star = vec![rule(
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        )];
        assert!(confirm_no_escalation(&user, &star, &[], &wanted).is_ok());
        let subresources = vec![rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}),
        )];
        assert!(covers(&subresources, &wanted[1..]).0);
    }

    #[test]
    fn compact_strings_read_as_kube_writes_them() {
        let r = rule(
            json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]}),
        );
        assert_eq!(
            r.compact(),
            r#"{APIGroups:[""], Resources:["secrets"], ResourceNames:["a"], Verbs:["get" "list"]}"#
        );
        let url = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}));
        assert_eq!(
            url.compact(),
            r#"{NonResourceURLs:["/healthz"], Verbs:["get"]}"#
        );
    }

    #[test]
    fn bindings_apply_to_their_subjects_and_name_missing_roles() {
        let binding = |v: Value| serde_json::from_value::<Binding>(v).unwrap();
        let mut snapshot = Snapshot::default();
        snapshot.cluster_roles.insert(
            "reader".into(),
            vec![rule(
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}),
            )],
        );
        snapshot.role_bindings.insert(
            "d".into(),
            vec![
                binding(json!({"metadata": {"name": "sa", "namespace": "d"}, "roleRef": {"kind": "ClusterRole", "name": "reader"}, "subjects": [{"kind": "ServiceAccount", "name": "builder"}]})),
                binding(json!({"metadata": {"name": "gone", "namespace": "d"}, "roleRef": {"kind": "Role", "name": "missing"}, "subjects": [{"kind": "Group", "name": "devs"}]})),
            ],
        );
        let mut get = request("get", "", "pods", "", "x");
        get.user = UserInfo::service_account("d", "builder", "u");
        assert_eq!(
            snapshot.authorize(&get),
            Decision::Allow(
                r#"RBAC: allowed by RoleBinding "sa/d" of ClusterRole "reader" to ServiceAccount "builder/d""#
                    .into()
            )
        );
        get.namespace = "e".into();
        assert_eq!(snapshot.authorize(&get), Decision::NoOpinion(String::new()));
        let alice = request("get", "", "pods", "", "x");
        assert_eq!(
            snapshot.authorize(&alice),
            Decision::NoOpinion(
                r#"RBAC: role.rbac.authorization.k8s.io "missing" not found"#.into()
            )
        );
    }
}
