//! `ValidatingAdmissionPolicy`: the admission plugin that validates writes with the CEL
//! expressions of ValidatingAdmissionPolicies, where ValidatingAdmissionPolicyBindings bind
//! them, as kube-apiserver 1.33's plugin does.
//!
//! For every write (create, update, delete, connect) of a resource that is not admission
//! configuration itself, each bound policy whose `matchConstraints` match is evaluated for
//! each of its bindings whose `matchResources` match, once per param the binding selects:
//! its `matchConditions`, then its `validations` (with `variables`, evaluated lazily), their
//! messages, and its `auditAnnotations`. A failed validation is handled as the binding's
//! `validationActions` say: `Deny` refuses the write (the first refusal is answered, with the
//! validation's `reason` and its HTTP code), `Warn` adds a warning, `Audit` an audit
//! annotation. Errors follow the policy's `failurePolicy`.
//!
//! - `compile`: policies and bindings compiled once per configuration change;
//! - `request`: the `request` variable, objects in the matched version, and authorization
//!   checks answered by the server's authorizer;
//! - `conditions`: `matchConditions`, public for admission webhooks;
//! - `validator`: one policy evaluated for one binding and param;
//! - `typecheck`: the policies' expressions checked against the types they match (what the
//!   `validatingadmissionpolicy-status` controller reports).
//!
//! The compiled configuration is rebuilt when the count of admission configuration
//! changes ([`Changes::Admission`](crate::lister::Changes::Admission)) moves;
//! until then [`Plugin::handles`] answers from it, so that writes no binding could match skip
//! the plugin.

mod compile;
pub mod conditions;
pub mod request;
pub mod typecheck;
mod validator;

use std::sync::Arc;

use serde_json::{Value, json};

use super::matching::exempt;
use super::{Attributes, Decision, Operation, Plugin};
use crate::auth::authz::Authorization;
use crate::error::{Cause, Reason, Result};
use crate::lister::{Lister, View};
use crate::resources::ResourceType;
use compile::{Action, Binding, Policy};
use validator::Annotation;

pub use conditions::{ConditionError, Conditions, FailurePolicy};
pub use request::Request;

/// The audit annotation of validation failures of bindings with the `Audit` action.
const VALIDATION_FAILURE: &str = "validation.policy.admission.k8s.io/validation_failure";
/// The longest audit annotation value published (`maxAuditAnnotationValueLength`).
const MAX_ANNOTATION_VALUE: usize = 10 * 1024;

/// The compiled configuration, as of one change of admission configuration.
#[derive(Debug, Default)]
struct State {
    /// Every policy that has bindings, with them, by name.
    hooks: Vec<compile::Hook>,
}

/// The `ValidatingAdmissionPolicy` admission plugin.
pub struct ValidatingAdmissionPolicy {
    /// For the admission generation and the catalog when telling which writes may match.
    registry: Arc<dyn Lister>,
    authorization: Authorization,
    state: View<State>,
}

impl std::fmt::Debug for ValidatingAdmissionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ValidatingAdmissionPolicy")
    }
}

impl ValidatingAdmissionPolicy {
    /// The plugin, reading the configuration, its changes and the served resources through
    /// `registry`, and answering `authorizer` checks with `authorization`.
    pub fn new(
        registry: Arc<dyn Lister>,
        authorization: Authorization,
    ) -> ValidatingAdmissionPolicy {
        ValidatingAdmissionPolicy {
            registry,
            authorization,
            state: View::new(crate::lister::Changes::Admission),
        }
    }

    /// The configuration as of the latest change of admission configuration.
    async fn state(&self, registry: &dyn Lister) -> Result<Arc<State>> {
        self.state
            .get(registry, |previous| async move {
                let previous = previous.as_ref().map_or(&[][..], |p| p.hooks.as_slice());
                Ok(State {
                    hooks: compile::load(registry, previous).await?,
                })
            })
            .await
    }
}

/// A refusal, or a configuration error, collected while the policies are evaluated.
#[derive(Debug)]
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: Option<String>,
}

/// Audit annotations of one policy, from all its bindings (kube's
/// `auditAnnotationCollector`).
#[derive(Default)]
struct Collector {
    annotations: Vec<(String, Vec<String>)>,
}

impl Collector {
    fn add(&mut self, key: &str, value: String) {
        match self.annotations.iter_mut().find(|(k, _)| k == key) {
            Some((_, values)) => {
                if !values.contains(&value) {
                    values.push(value);
                }
            }
            None => self.annotations.push((key.to_string(), vec![value])),
        }
    }

    fn publish(self, policy: &str, attributes: &Attributes<'_>) {
        for (key, values) in self.annotations {
            annotate(attributes, format!("{policy}/{key}"), values.join(", "));
        }
    }
}

/// Adds an audit annotation unless the request has one under `key` already (kube keeps the
/// first).
fn annotate(attributes: &Attributes<'_>, key: String, value: String) {
    if attributes
        .trace
        .annotations()
        .iter()
        .all(|(existing, _)| *existing != key)
    {
        attributes.trace.annotate(key, value);
    }
}

/// At most `max` bytes of `value`, cut at a character boundary.
fn truncated(mut value: String, max: usize) -> String {
    if value.len() > max {
        let mut end = max;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
    }
    value
}

/// JSON as Go's encoder writes it, which escapes `<`, `>` and `&`.
fn go_json(value: &Value) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The status of a refusal: the reason a validation names, and its HTTP code (kube's
/// `reasonToCode`; anything else is Invalid).
fn reason_and_code(reason: Option<&str>) -> (Reason, http::StatusCode) {
    match reason {
        Some("Forbidden") => (Reason::Forbidden, http::StatusCode::FORBIDDEN),
        Some("Unauthorized") => (Reason::Unauthorized, http::StatusCode::UNAUTHORIZED),
        Some("RequestEntityTooLarge") => (
            Reason::RequestEntityTooLarge,
            http::StatusCode::PAYLOAD_TOO_LARGE,
        ),
        _ => (Reason::Invalid, http::StatusCode::UNPROCESSABLE_ENTITY),
    }
}

/// The params a binding selects (kube's `CollectParams`): one `None` when the policy or the
/// binding has none; or why they cannot be had, in kube's words.
async fn collect_params(
    policy: &Policy,
    binding: &Binding,
    attributes: &Attributes<'_>,
    registry: &dyn Lister,
) -> std::result::Result<Vec<Option<Value>>, String> {
    let (Some(kind), Some(param_ref)) = (&policy.param_kind, &binding.param_ref) else {
        return Ok(vec![None]);
    };
    let Some(rt) = kind.resource(registry) else {
        return Err(format!("paramKind kind `{kind}` not known"));
    };
    let ref_namespace = param_ref.namespace.clone().unwrap_or_default();
    let namespace = if rt.namespaced {
        let namespace = if ref_namespace.is_empty() {
            attributes.namespace.to_string()
        } else {
            ref_namespace.clone()
        };
        if namespace.is_empty() {
            return Err(
                "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                    .to_string(),
            );
        }
        Some(namespace)
    } else {
        if !ref_namespace.is_empty() {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
                    .to_string(),
            );
        }
        None
    };
    let name = param_ref.name.clone().unwrap_or_default();
    let params: Vec<Value> = if !name.is_empty() {
        if param_ref.selector.is_some() {
            return Err("paramRef.name and paramRef.selector are mutually exclusive".to_string());
        }
        match registry.get(&rt, namespace.as_deref(), &name).await {
            Ok(param) => vec![param],
            Err(e) if e.reason == Reason::NotFound => Vec::new(),
            Err(e) => return Err(e.message),
        }
    } else if let Some(selector) = &param_ref.selector {
        let json = serde_json::to_value(selector).map_err(|e| e.to_string())?;
        let selector = konverge_apimachinery::selector::LabelSelector::from_json(&json)
            .map_err(|e| e.to_string())?;
        registry
            .list(&rt, namespace.as_deref(), Some(&selector))
            .await
            .map_err(|e| e.message)?
            .into_iter()
            .map(|p| (*p).clone())
            .collect()
    } else {
        return Err("one of name or selector must be provided".to_string());
    };
    if params.is_empty() && param_ref.parameter_not_found_action.as_deref() == Some("Deny") {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".to_string(),
        );
    }
    Ok(params.into_iter().map(Some).collect())
}

impl ValidatingAdmissionPolicy {
    async fn dispatch(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<()> {
        let state = self.state(registry).await?;
        let mut denials: Vec<Denial> = Vec::new();
        let config_error = |denials: &mut Vec<Denial>,
                            policy: &Policy,
                            binding: Option<&Binding>,
                            error: String| {
            if policy.failure == FailurePolicy::Ignore {
                return;
            }
            let message = match binding {
                None => format!("failed to configure policy: {error}"),
                Some(_) => format!("failed to configure binding: {error}"),
            };
            denials.push(Denial {
                policy: policy.name.clone(),
                binding: binding.map(|b| b.name.clone()),
                message,
                reason: None,
            });
        };
        // The namespace, read once (none for cluster-scoped requests and namespaces).
        let mut namespace: Option<Option<Value>> = None;
        for (policy, bindings) in &state.hooks {
            let Some(constraints) = &policy.constraints else {
                config_error(
                    &mut denials,
                    policy,
                    None,
                    "policy contained no match constraints, a required field".to_string(),
                );
                continue;
            };
            let matched = match constraints.matches(attributes, object, registry).await {
                Err(e) => {
                    config_error(&mut denials, policy, None, e);
                    continue;
                }
                Ok(None) => continue,
                Ok(Some(matched)) => matched,
            };
            if let Some(kind) = &policy.param_kind
                && kind.resource(registry).is_none()
            {
                config_error(
                    &mut denials,
                    policy,
                    None,
                    format!("failed to find resource referenced by paramKind: '{kind}'"),
                );
                continue;
            }
            let request = Request::new(attributes, object, &matched, &self.authorization);
            let mut collector = Collector::default();
            for binding in bindings {
                match binding.matches(attributes, object, registry).await {
                    Err(e) => {
                        config_error(&mut denials, policy, Some(binding), e);
                        continue;
                    }
                    Ok(false) => continue,
                    Ok(true) => {}
                }
                let denied_before = denials.len();
                let params = match collect_params(policy, binding, attributes, registry).await {
                    Ok(params) => params,
                    Err(e) => {
                        config_error(&mut denials, policy, Some(binding), e);
                        if denials.len() > denied_before {
                            attributes.trace.ran(
                                format!(
                                    "ValidatingAdmissionPolicy/{}/{}",
                                    policy.name, binding.name
                                ),
                                Decision::Denied,
                            );
                        }
                        continue;
                    }
                };
                if params.is_empty() {
                    continue;
                }
                if namespace.is_none() {
                    namespace = Some(self.namespace(attributes, registry).await?);
                }
                let namespace_object = namespace.as_ref().and_then(Option::as_ref);
                let mut warned = false;
                for param in &params {
                    let outcome =
                        validator::validate(policy, &request, param.as_ref(), namespace_object)
                            .await;
                    for (i, decision) in outcome.decisions.iter().enumerate() {
                        if !decision.deny {
                            continue;
                        }
                        for action in &binding.actions {
                            match action {
                                Action::Deny => denials.push(Denial {
                                    policy: policy.name.clone(),
                                    binding: Some(binding.name.clone()),
                                    message: decision.message.clone(),
                                    reason: decision.reason.clone(),
                                }),
                                Action::Audit => {
                                    let actions: Vec<&str> =
                                        binding.actions.iter().map(|a| a.as_str()).collect();
                                    let value = json!([{
                                        "message": decision.message,
                                        "policy": policy.name,
                                        "binding": binding.name,
                                        "expressionIndex": i,
                                        "validationActions": actions,
                                    }]);
                                    annotate(
                                        attributes,
                                        VALIDATION_FAILURE.to_string(),
                                        go_json(&value),
                                    );
                                }
                                Action::Warn => {
                                    warned = true;
                                    attributes.trace.warn(format!(
                                        "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                                        policy.name, binding.name, decision.message
                                    ));
                                }
                            }
                        }
                    }
                    for annotation in outcome.annotations {
                        match annotation {
                            Annotation::Publish { key, value } => {
                                collector.add(&key, truncated(value, MAX_ANNOTATION_VALUE))
                            }
                            Annotation::Error(message) => denials.push(Denial {
                                policy: policy.name.clone(),
                                binding: Some(binding.name.clone()),
                                message,
                                reason: None,
                            }),
                            Annotation::Exclude => {}
                        }
                    }
                }
                let decision = if denials.len() > denied_before {
                    Decision::Denied
                } else if warned {
                    Decision::Warned
                } else {
                    Decision::Allowed
                };
                attributes.trace.ran(
                    format!("ValidatingAdmissionPolicy/{}/{}", policy.name, binding.name),
                    decision,
                );
            }
            collector.publish(&policy.name, attributes);
        }
        let Some(denial) = denials.into_iter().next() else {
            return Ok(());
        };
        let message = match &denial.binding {
            Some(binding) => format!(
                "ValidatingAdmissionPolicy '{}' with binding '{binding}' denied request: {}",
                denial.policy, denial.message
            ),
            None => format!(
                "ValidatingAdmissionPolicy '{}' denied request: {}",
                denial.policy, denial.message
            ),
        };
        let mut error = super::plugins::forbidden(attributes, message.clone());
        let (reason, code) = reason_and_code(denial.reason.as_deref());
        error.reason = reason;
        error.code = code;
        if let Some(details) = error.details.as_mut() {
            details.causes.push(Cause {
                reason: String::new(),
                message,
                field: String::new(),
            });
        }
        Err(error)
    }

    /// The `namespaceObject` of the request: none for cluster-scoped requests and for
    /// namespaces themselves.
    async fn namespace(
        &self,
        attributes: &Attributes<'_>,
        registry: &dyn Lister,
    ) -> Result<Option<Value>> {
        let rt = attributes.rt;
        if attributes.namespace.is_empty() || (rt.is(crate::resources::NAMESPACES)) {
            return Ok(None);
        }
        let Some(namespaces) = registry.catalog().get("", "v1", "namespaces") else {
            return Ok(None);
        };
        let namespace = registry
            .get(&namespaces, None, attributes.namespace)
            .await?;
        Ok(Some(request::namespace_object(&namespace)))
    }
}

#[async_trait::async_trait]
impl Plugin for ValidatingAdmissionPolicy {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        if exempt(rt) {
            return false;
        }
        let Some(state) = self.state.fresh(self.registry.as_ref()) else {
            // The configuration changed since it was read: the next request reads it again.
            return true;
        };
        state
            .hooks
            .iter()
            .any(|(policy, _)| match &policy.constraints {
                None => true,
                Some(constraints) => constraints.may_match(rt, self.registry.as_ref()),
            })
    }

    fn handles_operation(&self, operation: Operation) -> bool {
        matches!(
            operation,
            Operation::Create | Operation::Update | Operation::Delete | Operation::Connect
        )
    }

    async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<()> {
        if exempt(attributes.rt) {
            return Ok(());
        }
        self.dispatch(attributes, object, registry).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_map_to_their_codes() {
        assert_eq!(reason_and_code(None).1.as_u16(), 422);
        assert_eq!(reason_and_code(Some("Forbidden")).1.as_u16(), 403);
        assert_eq!(reason_and_code(Some("Unauthorized")).1.as_u16(), 401);
        assert_eq!(
            reason_and_code(Some("RequestEntityTooLarge")).1.as_u16(),
            413
        );
    }

    #[test]
    fn annotation_values_are_cut_at_a_character_boundary() {
        assert_eq!(truncated("héllo".to_string(), 2), "h");
        assert_eq!(
            go_json(&json!({"m": "a<b&c"})),
            r#"{"m":"a\u003cb\u0026c"}"#
        );
    }
}
