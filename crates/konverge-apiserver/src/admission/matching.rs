//! Which requests an admission webhook or policy applies to: its rules (operations, groups,
//! versions, resources and subresources, scope, names), its match policy, and its namespace
//! and object selectors — kube-apiserver's admission rule, namespace and object matchers.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{NamedRuleWithOperations, RuleWithOperations};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as Selector;
use konverge_apimachinery::selector::LabelSelector;
use serde_json::Value;

use super::{Attributes, Operation};
use crate::error::{ApiError, Result};
use crate::lister::Lister;
use crate::resources::ResourceType;

/// The admissionregistration resources admission webhooks and policies never see, so that a
/// broken webhook or policy can always be removed.
pub fn exempt(rt: &ResourceType) -> bool {
    rt.group == "admissionregistration.k8s.io"
        && matches!(
            rt.plural.as_str(),
            "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// Where a rule applies (`scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    All,
    Cluster,
    Namespaced,
}

/// One rule: a request matches when every part of it does.
#[derive(Debug, Clone)]
pub struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    /// `(resource, subresource)`; `*` matches any, an empty subresource only the resource.
    resources: Vec<(String, String)>,
    scope: Scope,
    /// Only objects with one of these names (empty: any).
    names: Vec<String>,
}

impl Rule {
    /// A webhook's rule.
    pub fn new(rule: &RuleWithOperations) -> Rule {
        let strings = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
        Rule {
            operations: strings(&rule.operations),
            groups: strings(&rule.api_groups),
            versions: strings(&rule.api_versions),
            resources: strings(&rule.resources)
                .iter()
                .map(|r| match r.split_once('/') {
                    Some((res, sub)) => (res.to_string(), sub.to_string()),
                    None => (r.clone(), String::new()),
                })
                .collect(),
            scope: match rule.scope.as_deref() {
                Some("Cluster") => Scope::Cluster,
                Some("Namespaced") => Scope::Namespaced,
                _ => Scope::All,
            },
            names: Vec::new(),
        }
    }

    /// A policy's rule, with its resource names.
    pub fn named(rule: &NamedRuleWithOperations) -> Rule {
        let mut parsed = Rule::new(&RuleWithOperations {
            api_groups: rule.api_groups.clone(),
            api_versions: rule.api_versions.clone(),
            operations: rule.operations.clone(),
            resources: rule.resources.clone(),
            scope: rule.scope.clone(),
        });
        parsed.names = rule.resource_names.clone().unwrap_or_default();
        parsed
    }

    /// Whether the rule could match some request for `rt` (any operation, name or scope).
    pub fn may_match(&self, rt: &ResourceType) -> bool {
        any_or(&self.groups, &rt.group)
            && any_or(&self.versions, &rt.version)
            && self
                .resources
                .iter()
                .any(|(res, _)| res == "*" || *res == rt.plural)
    }

    /// Whether the request matches the rule as if it were for `rt` (the request's own
    /// resource, or an equivalent one).
    fn matches_as(&self, attributes: &Attributes<'_>, rt: &ResourceType) -> bool {
        let subresource = attributes.subresource.unwrap_or("");
        let namespace_object = is_namespaces(rt);
        any_or(&self.operations, attributes.operation.as_str())
            && any_or(&self.groups, &rt.group)
            && any_or(&self.versions, &rt.version)
            && self.resources.iter().any(|(res, sub)| {
                (res == "*" || *res == rt.plural) && (sub == "*" || sub == subresource)
            })
            && match self.scope {
                Scope::All => true,
                Scope::Cluster => namespace_object || attributes.namespace.is_empty(),
                Scope::Namespaced => !namespace_object && !attributes.namespace.is_empty(),
            }
            && (self.names.is_empty() || self.names.iter().any(|n| n == attributes.name))
    }
}

fn any_or(allowed: &[String], value: &str) -> bool {
    allowed.iter().any(|a| a == "*" || a == value)
}

fn is_namespaces(rt: &ResourceType) -> bool {
    rt.is(crate::resources::NAMESPACES)
}

/// How a request for another version of a resource than the rules name is matched
/// (`matchPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchPolicy {
    /// Only the versions the rules name.
    Exact,
    /// Any served version of the same resource, the request then converted to the version
    /// that matched (the default).
    #[default]
    Equivalent,
}

impl MatchPolicy {
    /// From the field's value (absent: `Equivalent`, as kube defaults it).
    pub fn parse(policy: Option<&str>) -> MatchPolicy {
        match policy {
            Some("Exact") => MatchPolicy::Exact,
            _ => MatchPolicy::Equivalent,
        }
    }
}

/// The resource (the request's own, or an equivalent version of it) under which the request
/// matches one of `rules`, if any.
pub fn matching_resource(
    rules: &[Rule],
    policy: MatchPolicy,
    attributes: &Attributes<'_>,
    registry: &dyn Lister,
) -> Option<Arc<ResourceType>> {
    let own = attributes.rt;
    if rules.iter().any(|r| r.matches_as(attributes, own)) {
        return registry
            .catalog()
            .get(&own.group, &own.version, &own.plural)
            .or_else(|| Some(Arc::new(own.clone())));
    }
    if policy == MatchPolicy::Exact {
        return None;
    }
    equivalents(own, registry)
        .into_iter()
        .find(|rt| rules.iter().any(|r| r.matches_as(attributes, rt)))
}

/// The other served versions of `rt`'s resource.
fn equivalents(rt: &ResourceType, registry: &dyn Lister) -> Vec<Arc<ResourceType>> {
    let mut others: Vec<Arc<ResourceType>> = registry
        .catalog()
        .all()
        .into_iter()
        .filter(|o| o.group == rt.group && o.plural == rt.plural && o.version != rt.version)
        .collect();
    others.sort_by(|a, b| a.version.cmp(&b.version));
    others
}

/// A namespace selector and an object selector, parsed once.
#[derive(Debug, Clone)]
pub struct Selectors {
    namespace: Option<LabelSelector>,
    object: Option<LabelSelector>,
}

/// A selector that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SelectorError {
    /// Which selector.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl Selectors {
    /// From a webhook's or policy's `namespaceSelector` and `objectSelector` (absent or empty:
    /// everything).
    pub fn new(
        namespace: Option<&Selector>,
        object: Option<&Selector>,
    ) -> std::result::Result<Selectors, SelectorError> {
        let parse = |field: &'static str, selector: Option<&Selector>| {
            let Some(selector) = selector else {
                return Ok(None);
            };
            let json = serde_json::to_value(selector).map_err(|e| SelectorError {
                field,
                message: e.to_string(),
            })?;
            let parsed = LabelSelector::from_json(&json).map_err(|e| SelectorError {
                field,
                message: e.to_string(),
            })?;
            Ok(Some(parsed).filter(|s: &LabelSelector| !s.is_empty()))
        };
        Ok(Selectors {
            namespace: parse("namespaceSelector", namespace)?,
            object: parse("objectSelector", object)?,
        })
    }

    /// Whether the request's object (or, for updates and deletes, the object before) has
    /// labels the object selector selects.
    pub fn object_matches(&self, attributes: &Attributes<'_>, object: &Value) -> bool {
        let Some(selector) = &self.object else {
            return true;
        };
        [Some(object), attributes.old]
            .into_iter()
            .flatten()
            .filter(|o| !o.is_null())
            .any(|o| selector.matches(&labels(o)))
    }

    /// Whether the request's namespace has labels the namespace selector selects. Requests
    /// for cluster-scoped objects always match, except namespaces themselves, whose own
    /// labels are matched. Fails with NotFound when the namespace does not exist.
    pub async fn namespace_matches(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        let Some(selector) = &self.namespace else {
            return Ok(true);
        };
        let namespace_object = is_namespaces(attributes.rt);
        if attributes.namespace.is_empty() && !namespace_object {
            return Ok(true);
        }
        if namespace_object
            && attributes.subresource.is_none()
            && matches!(attributes.operation, Operation::Create | Operation::Update)
        {
            // The namespace being written is not stored yet: its own new labels count.
            return Ok(selector.matches(&labels(object)));
        }
        let name = if namespace_object {
            attributes.name
        } else {
            attributes.namespace
        };
        let Some(rt) = registry.catalog().get("", "v1", "namespaces") else {
            return Ok(true);
        };
        let namespace = registry
            .get(&rt, None, name)
            .await
            .map_err(|e| match e.reason {
                crate::error::Reason::NotFound => ApiError::not_found(crate::error::Target {
                    group: "",
                    resource: "namespaces",
                    name,
                }),
                _ => e,
            })?;
        Ok(selector.matches(&labels(&namespace)))
    }
}

/// An object's labels.
pub fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Trace;
    use crate::resources::Catalog;

    fn rule(json: Value) -> Rule {
        Rule::new(&serde_json::from_value(json).expect("a rule"))
    }

    fn attributes<'a>(
        rt: &'a ResourceType,
        operation: Operation,
        namespace: &'a str,
        subresource: Option<&'a str>,
        trace: &'a Trace,
    ) -> Attributes<'a> {
        Attributes {
            operation,
            rt,
            namespace,
            name: "x",
            subresource,
            old: None,
            user: None,
            dry_run: false,
            trace,
        }
    }

    #[test]
    fn rules_match_as_kube_matches_them() {
        let catalog = Catalog::builtin();
        let pods = catalog.get("", "v1", "pods").expect("pods");
        let namespaces = catalog.get("", "v1", "namespaces").expect("namespaces");
        let trace = Trace::default();
        let create = attributes(&pods, Operation::Create, "default", None, &trace);
        let status = attributes(&pods, Operation::Update, "default", Some("status"), &trace);
        let ns = attributes(&namespaces, Operation::Create, "", None, &trace);
        let pods_rule = |ops: Value, resources: Value, scope: Value| {
            rule(serde_json::json!({
                "operations": ops, "apiGroups": [""], "apiVersions": ["v1"],
                "resources": resources, "scope": scope,
            }))
        };
        let any = serde_json::json!(["*"]);
        let create_only = serde_json::json!(["CREATE"]);
        let pods_only = serde_json::json!(["pods"]);
        assert!(
            pods_rule(create_only.clone(), pods_only.clone(), Value::Null)
                .matches_as(&create, &pods)
        );
        assert!(!pods_rule(create_only, pods_only.clone(), Value::Null).matches_as(&status, &pods));
        // A resource without a subresource matches only the resource itself.
        assert!(!pods_rule(any.clone(), pods_only, Value::Null).matches_as(&status, &pods));
        assert!(
            pods_rule(any.clone(), serde_json::json!(["pods/*"]), Value::Null)
                .matches_as(&status, &pods)
        );
        assert!(
            pods_rule(any.clone(), serde_json::json!(["*/status"]), Value::Null)
                .matches_as(&status, &pods)
        );
        assert!(
            !pods_rule(any.clone(), serde_json::json!(["*"]), Value::Null)
                .matches_as(&status, &pods)
        );
        assert!(
            pods_rule(any.clone(), serde_json::json!(["*/*"]), Value::Null)
                .matches_as(&status, &pods)
        );
        let cluster = serde_json::json!("Cluster");
        let namespaced = serde_json::json!("Namespaced");
        assert!(!pods_rule(any.clone(), any.clone(), cluster.clone()).matches_as(&create, &pods));
        assert!(pods_rule(any.clone(), any.clone(), namespaced.clone()).matches_as(&create, &pods));
        // A namespace is cluster-scoped, whatever namespace the request names.
        assert!(pods_rule(any.clone(), any.clone(), cluster).matches_as(&ns, &namespaces));
        assert!(!pods_rule(any.clone(), any, namespaced).matches_as(&ns, &namespaces));
    }

    #[test]
    fn named_rules_match_only_their_names() {
        let catalog = Catalog::builtin();
        let pods = catalog.get("", "v1", "pods").expect("pods");
        let trace = Trace::default();
        let create = attributes(&pods, Operation::Create, "default", None, &trace);
        let named = |names: Value| {
            Rule::named(
                &serde_json::from_value(serde_json::json!({
                    "operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
                    "resources": ["*"], "resourceNames": names,
                }))
                .expect("a rule"),
            )
        };
        assert!(named(serde_json::json!(["x"])).matches_as(&create, &pods));
        assert!(!named(serde_json::json!(["y"])).matches_as(&create, &pods));
        assert!(named(Value::Null).matches_as(&create, &pods));
    }

    #[test]
    fn object_selectors_match_the_new_or_the_old_object() {
        let catalog = Catalog::builtin();
        let pods = catalog.get("", "v1", "pods").expect("pods");
        let trace = Trace::default();
        let selector: Selector =
            serde_json::from_value(serde_json::json!({"matchLabels": {"app": "web"}}))
                .expect("a selector");
        let selectors = Selectors::new(None, Some(&selector)).expect("parses");
        let web = serde_json::json!({"metadata": {"labels": {"app": "web"}}});
        let db = serde_json::json!({"metadata": {"labels": {"app": "db"}}});
        let mut update = attributes(&pods, Operation::Update, "default", None, &trace);
        assert!(selectors.object_matches(&update, &web));
        assert!(!selectors.object_matches(&update, &db));
        update.old = Some(&web);
        assert!(selectors.object_matches(&update, &db));
        let everything = Selectors::new(None, None).expect("parses");
        assert!(everything.object_matches(&update, &db));
    }

    #[test]
    fn configuration_resources_are_exempt() {
        let catalog = Catalog::builtin();
        let exempt_rt = catalog
            .get(
                "admissionregistration.k8s.io",
                "v1",
                "validatingwebhookconfigurations",
            )
            .expect("served");
        assert!(exempt(&exempt_rt));
        assert!(!exempt(&catalog.get("", "v1", "pods").expect("pods")));
    }
}
