//! ValidatingAdmissionPolicies and their bindings as the plugin keeps them: matchers parsed
//! and expressions compiled once, when the configuration changes (kube's `compilePolicy`
//! and the policy source).

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, ParamRef, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use konverge_apimachinery::cel::admission::{
    CompileError, Compiler, Composition, Expression, Options, Returns,
};
use serde_json::Value;

use super::super::Attributes;
use super::super::matching::{MatchPolicy, Rule, Selectors, matching_resource};
use super::conditions::{Conditions, FailurePolicy};
use crate::error::Result;
use crate::lister::Lister;
use crate::resources::ResourceType;

/// Rules, exclusions, selectors and match policy: a policy's `matchConstraints` or a
/// binding's `matchResources`.
#[derive(Debug)]
pub(crate) struct Matcher {
    rules: Vec<Rule>,
    /// The raw rules' groups, versions and resources, for telling which resources the
    /// rules may match without a request.
    raw: Vec<(Vec<String>, Vec<String>, Vec<String>)>,
    exclude: Vec<Rule>,
    policy: MatchPolicy,
    selectors: std::result::Result<Selectors, String>,
}

impl Matcher {
    pub(crate) fn new(resources: &MatchResources) -> Matcher {
        let rules = resources.resource_rules.clone().unwrap_or_default();
        Matcher {
            raw: rules
                .iter()
                .map(|r| {
                    (
                        r.api_groups.clone().unwrap_or_default(),
                        r.api_versions.clone().unwrap_or_default(),
                        r.resources.clone().unwrap_or_default(),
                    )
                })
                .collect(),
            rules: rules.iter().map(Rule::named).collect(),
            exclude: resources
                .exclude_resource_rules
                .iter()
                .flatten()
                .map(Rule::named)
                .collect(),
            policy: MatchPolicy::parse(resources.match_policy.as_deref()),
            selectors: Selectors::new(
                resources.namespace_selector.as_ref(),
                resources.object_selector.as_ref(),
            )
            .map_err(|e| e.message),
        }
    }

    /// Whether the rules may match some write of `rt` (of any operation, name or scope),
    /// in its version or, with `matchPolicy: Equivalent`, another served one.
    pub(crate) fn may_match(&self, rt: &ResourceType, registry: &dyn Lister) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        if self.rules.iter().any(|r| r.may_match(rt)) {
            return true;
        }
        if self.policy == MatchPolicy::Exact {
            return false;
        }
        self.raw.iter().any(|(_, versions, _)| {
            versions.iter().any(|v| {
                v != &rt.version
                    && registry
                        .catalog()
                        .get(&rt.group, v, &rt.plural)
                        .is_some_and(|other| self.rules.iter().any(|r| r.may_match(&other)))
            })
        })
    }

    /// kube's `Matcher.Matches`: the resource the request matches as, `None` when it does
    /// not match, or why matching failed (a selector that does not parse, a namespace that
    /// cannot be read) — reported only when the request would otherwise match.
    pub(crate) async fn matches(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> std::result::Result<Option<Arc<ResourceType>>, String> {
        let selectors = match &self.selectors {
            Ok(s) => s,
            Err(e) => return Err(e.clone()),
        };
        let namespace = selectors
            .namespace_matches(attributes, object, registry)
            .await;
        if matches!(namespace, Ok(false)) {
            return Ok(None);
        }
        if !selectors.object_matches(attributes, object) {
            return Ok(None);
        }
        if matching_resource(&self.exclude, self.policy, attributes, registry).is_some() {
            return Ok(None);
        }
        let matched = if self.rules.is_empty() {
            registry
                .catalog()
                .get(
                    &attributes.rt.group,
                    &attributes.rt.version,
                    &attributes.rt.plural,
                )
                .or_else(|| Some(Arc::new(attributes.rt.clone())))
        } else {
            matching_resource(&self.rules, self.policy, attributes, registry)
        };
        let Some(matched) = matched else {
            return Ok(None);
        };
        namespace.map_err(|e| e.message)?;
        Ok(Some(matched))
    }
}

/// One validation, compiled.
#[derive(Debug)]
pub(crate) struct Validation {
    /// `expression`, as written.
    pub(crate) source: String,
    pub(crate) expression: std::result::Result<Expression, CompileError>,
    /// `message`, as written.
    pub(crate) message: String,
    pub(crate) message_expression: Option<std::result::Result<Expression, CompileError>>,
    /// `reason`, as written.
    pub(crate) reason: Option<String>,
}

/// One audit annotation, compiled.
#[derive(Debug)]
pub(crate) struct AuditAnnotation {
    pub(crate) key: String,
    pub(crate) value: std::result::Result<Expression, CompileError>,
}

/// `paramKind`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamKind {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
}

impl std::fmt::Display for ParamKind {
    /// As Go prints a `schema.GroupVersionKind`: `example.com/v1, Kind=Limits`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

impl ParamKind {
    /// `group/version` and kind; `None` when the version does not parse (kube then skips
    /// the policy).
    fn parse(api_version: &str, kind: &str) -> Option<ParamKind> {
        let (group, version) = match api_version.matches('/').count() {
            0 => ("", api_version),
            1 => api_version.split_once('/')?,
            _ => return None,
        };
        Some(ParamKind {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        })
    }

    /// The served resource of this kind.
    pub(crate) fn resource(&self, registry: &dyn Lister) -> Option<Arc<ResourceType>> {
        registry
            .catalog()
            .all()
            .into_iter()
            .find(|rt| rt.group == self.group && rt.version == self.version && rt.kind == self.kind)
    }
}

/// A ValidatingAdmissionPolicy, compiled.
#[derive(Debug)]
pub(crate) struct Policy {
    pub(crate) name: String,
    /// The uid and generation it was compiled at.
    version: (String, i64),
    pub(crate) failure: FailurePolicy,
    pub(crate) param_kind: Option<ParamKind>,
    /// `None` when the policy has no `matchConstraints` (a configuration error).
    pub(crate) constraints: Option<Matcher>,
    pub(crate) conditions: Conditions,
    pub(crate) validations: Vec<Validation>,
    pub(crate) audit_annotations: Vec<AuditAnnotation>,
    pub(crate) composition: Option<Arc<Composition>>,
}

impl Policy {
    /// Compiles `policy`; `None` for a policy kube-apiserver would not load (its paramKind's
    /// apiVersion does not parse).
    pub(crate) fn compile(policy: &ValidatingAdmissionPolicy) -> Option<Policy> {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let spec = policy.spec.clone().unwrap_or_default();
        let param_kind = match &spec.param_kind {
            Some(pk) => Some(ParamKind::parse(
                pk.api_version.as_deref().unwrap_or(""),
                pk.kind.as_deref().unwrap_or(""),
            )?),
            None => None,
        };
        let with_authorizer = Options {
            params: param_kind.is_some(),
            authorizer: true,
        };
        let without_authorizer = Options {
            authorizer: false,
            ..with_authorizer
        };
        let mut compiler = Compiler::with_variables();
        for variable in spec.variables.iter().flatten() {
            // A variable that does not compile fails the expressions that read it.
            let _ = compiler.add_variable(&variable.name, &variable.expression, with_authorizer);
        }
        let compile = |source: &str, returns: Returns, options: Options| {
            compiler.compile(source, returns, options)
        };
        let validations = spec
            .validations
            .iter()
            .flatten()
            .map(|v| Validation {
                source: v.expression.clone(),
                expression: compile(&v.expression, Returns::Bool, with_authorizer),
                message: v.message.clone().unwrap_or_default(),
                message_expression: v
                    .message_expression
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map(|m| compile(m, Returns::String, without_authorizer)),
                reason: v.reason.clone(),
            })
            .collect();
        let audit_annotations = spec
            .audit_annotations
            .iter()
            .flatten()
            .map(|a| AuditAnnotation {
                key: a.key.clone(),
                value: compile(&a.value_expression, Returns::StringOrNull, with_authorizer),
            })
            .collect();
        let conditions = Conditions::compile_with(
            spec.match_conditions.as_deref().unwrap_or_default(),
            &compiler,
            with_authorizer,
        );
        let composition = compiler.composition();
        let policy = Policy {
            name,
            version: version(policy),
            failure: FailurePolicy::parse(spec.failure_policy.as_deref()),
            param_kind,
            constraints: spec.match_constraints.as_ref().map(Matcher::new),
            conditions: conditions.with_composition(composition.clone()),
            validations,
            audit_annotations,
            composition,
        };
        Some(policy)
    }
}

/// What a binding does with a failed validation (`validationActions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Deny,
    Warn,
    Audit,
}

impl Action {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "Deny",
            Action::Warn => "Warn",
            Action::Audit => "Audit",
        }
    }
}

/// A ValidatingAdmissionPolicyBinding, parsed.
#[derive(Debug)]
pub(crate) struct Binding {
    pub(crate) name: String,
    pub(crate) policy: String,
    pub(crate) param_ref: Option<ParamRef>,
    pub(crate) resources: Option<Matcher>,
    pub(crate) actions: Vec<Action>,
}

impl Binding {
    pub(crate) fn parse(binding: &ValidatingAdmissionPolicyBinding) -> Binding {
        let spec = binding.spec.clone().unwrap_or_default();
        Binding {
            name: binding.metadata.name.clone().unwrap_or_default(),
            policy: spec.policy_name.unwrap_or_default(),
            param_ref: spec.param_ref,
            resources: spec.match_resources.as_ref().map(Matcher::new),
            actions: spec
                .validation_actions
                .iter()
                .flatten()
                .filter_map(|a| match a.as_str() {
                    "Deny" => Some(Action::Deny),
                    "Warn" => Some(Action::Warn),
                    "Audit" => Some(Action::Audit),
                    _ => None,
                })
                .collect(),
        }
    }

    /// kube's `BindingMatches`: a binding without `matchResources` matches everything its
    /// policy does.
    pub(crate) async fn matches(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> std::result::Result<bool, String> {
        match &self.resources {
            None => Ok(true),
            Some(m) => Ok(m.matches(attributes, object, registry).await?.is_some()),
        }
    }
}

/// A bound policy: the policy, compiled, and its bindings.
pub(crate) type Hook = (Arc<Policy>, Vec<Binding>);

/// What a policy was compiled from: its uid and generation (its spec changes the generation).
fn version(policy: &ValidatingAdmissionPolicy) -> (String, i64) {
    (
        policy.metadata.uid.clone().unwrap_or_default(),
        policy.metadata.generation.unwrap_or_default(),
    )
}

/// Reads the stored policies and bindings: every policy that has bindings, with them, in
/// name order. A policy `previous` compiled at the same uid and generation is not compiled
/// again.
pub(crate) async fn load(registry: &dyn Lister, previous: &[Hook]) -> Result<Vec<Hook>> {
    let group = "admissionregistration.k8s.io";
    let (Some(policies), Some(bindings)) = (
        registry
            .catalog()
            .get(group, "v1", "validatingadmissionpolicies"),
        registry
            .catalog()
            .get(group, "v1", "validatingadmissionpolicybindings"),
    ) else {
        return Ok(Vec::new());
    };
    let mut by_policy: std::collections::BTreeMap<String, Vec<Binding>> =
        std::collections::BTreeMap::new();
    for item in registry.list(&bindings, None, None).await? {
        let Ok(binding) =
            serde_json::from_value::<ValidatingAdmissionPolicyBinding>((*item).clone())
        else {
            continue;
        };
        let binding = Binding::parse(&binding);
        by_policy
            .entry(binding.policy.clone())
            .or_default()
            .push(binding);
    }
    let mut hooks = Vec::new();
    for item in registry.list(&policies, None, None).await? {
        let Ok(policy) = serde_json::from_value::<ValidatingAdmissionPolicy>((*item).clone())
        else {
            continue;
        };
        let name = policy.metadata.name.clone().unwrap_or_default();
        let Some(bound) = by_policy.remove(&name) else {
            continue;
        };
        let version = version(&policy);
        let known = previous
            .iter()
            .find(|(p, _)| p.name == name && p.version == version)
            .map(|(p, _)| p.clone());
        if let Some(compiled) = known.or_else(|| Policy::compile(&policy).map(Arc::new)) {
            hooks.push((compiled, bound));
        }
    }
    Ok(hooks)
}
