//! `matchConditions`: CEL expressions that narrow which requests an admission webhook or a
//! ValidatingAdmissionPolicy applies to, with kube-apiserver's `matchconditions` semantics.
//!
//! ```text
//! let conditions = Conditions::compile(&webhook.match_conditions);   // once, when configured
//! let request = Request::new(&attributes, &object, &matched, &authorization);
//! match conditions.evaluate(&request, None, FailurePolicy::parse(webhook.failure_policy)).await {
//!     Ok(true) => { /* call the webhook */ }
//!     Ok(false) => { /* skip it */ }
//!     Err(e) => { /* refuse the request: e.to_string() is kube's message */ }
//! }
//! ```
//!
//! - every condition true: the request matches;
//! - any condition false: it does not (even when another failed to evaluate);
//! - otherwise, when some failed (an evaluation error, an expression that did not compile,
//!   or the conditions' cost budget ran out): with `failurePolicy: Fail` the error, worded as
//!   kube-apiserver words it (`expression 'object.x' resulted in error: no such key: x`; several
//!   are listed in brackets, `[e1, e2]`); with `Ignore`, no match.
//!
//! Webhooks' conditions see `object`, `oldObject`, `request` and `authorizer`; a policy's also
//! see `params` and its `variables`.

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::MatchCondition;
use konverge_apimachinery::cel::admission::{
    Activation, CompileError, Compiler, Composition, Evaluation, Expression,
    MATCH_CONDITIONS_BUDGET, Options, Output, Returns,
};
use serde_json::Value;

use super::request::Request;

/// What an admission does when its expressions fail (`failurePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Refuse the request (the default).
    #[default]
    Fail,
    /// Go on as if the admission did not apply.
    Ignore,
}

impl FailurePolicy {
    /// From the field's value (absent, or anything but `Ignore`: `Fail`).
    pub fn parse(policy: Option<&str>) -> FailurePolicy {
        match policy {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        }
    }
}

/// Why conditions could not decide, in kube-apiserver's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConditionError(pub String);

/// One condition, compiled.
#[derive(Debug)]
struct Condition {
    expression: Result<Expression, CompileError>,
}

/// A list of `matchConditions`, compiled once.
#[derive(Debug, Default)]
pub struct Conditions {
    conditions: Vec<Condition>,
    composition: Option<Arc<Composition>>,
}

impl Conditions {
    /// Compiles a webhook's conditions. A condition that does not compile (which the
    /// configuration's validation refuses when it is written) fails when evaluated, with
    /// `compilation error: ...`.
    pub fn compile(conditions: &[MatchCondition]) -> Conditions {
        let options = Options {
            params: false,
            authorizer: true,
        };
        Conditions::compile_with(conditions, &Compiler::new(), options)
    }

    /// Compiles conditions with `compiler` (a policy's, which holds its variables: hand
    /// them over with [`with_composition`](Self::with_composition)).
    pub(crate) fn compile_with(
        conditions: &[MatchCondition],
        compiler: &Compiler,
        options: Options,
    ) -> Conditions {
        Conditions {
            conditions: conditions
                .iter()
                .map(|c| Condition {
                    expression: compiler.compile(&c.expression, Returns::Bool, options),
                })
                .collect(),
            composition: None,
        }
    }

    /// The same conditions, reading the variables of `composition`.
    pub(crate) fn with_composition(mut self, composition: Option<Arc<Composition>>) -> Conditions {
        self.composition = composition;
        self
    }

    /// Whether there are none (then every request matches).
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// Why conditions do not compile, in order.
    pub fn compile_errors(&self) -> Vec<String> {
        self.conditions
            .iter()
            .filter_map(|c| c.expression.as_ref().err().map(|e| e.detail.clone()))
            .collect()
    }

    /// Whether `request` matches (with `params`, for a policy's conditions); see the module
    /// documentation.
    pub async fn evaluate(
        &self,
        request: &Request<'_>,
        params: Option<&Value>,
        failure: FailurePolicy,
    ) -> Result<bool, ConditionError> {
        if self.conditions.is_empty() {
            return Ok(true);
        }
        let outcome = request
            .run(|authorizer| {
                let activation = Activation::new(
                    self.composition.as_ref(),
                    &request.input(params, None, Some(authorizer)),
                );
                let mut budget = MATCH_CONDITIONS_BUDGET;
                let mut errors: Vec<String> = Vec::new();
                for condition in &self.conditions {
                    let expression = match &condition.expression {
                        Ok(e) => e,
                        Err(e) => {
                            errors.push(format!("compilation error: {}", e.detail));
                            continue;
                        }
                    };
                    match activation.evaluate(expression, &mut budget) {
                        Err(out) => return Err(out.to_string()),
                        Ok(Evaluation::Error(e)) => errors.push(e),
                        Ok(Evaluation::Value(Output::Bool(false))) => return Ok(false),
                        Ok(Evaluation::Value(_)) => {}
                    }
                }
                if errors.is_empty() {
                    Ok(true)
                } else {
                    Err(aggregate(errors))
                }
            })
            .await;
        match (outcome, failure) {
            (Ok(matched), _) => Ok(matched),
            (Err(_), FailurePolicy::Ignore) => Ok(false),
            (Err(e), FailurePolicy::Fail) => Err(ConditionError(e)),
        }
    }
}

/// Go's `utilerrors.NewAggregate(...).Error()`: one message as it is, several (without
/// repeats) in brackets.
pub(crate) fn aggregate(errors: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::admission::{Attributes, Operation, Trace};
    use crate::auth::authz::{AlwaysAllow, Authorization};
    use crate::resources::Catalog;

    fn conditions(list: &[(&str, &str)]) -> Conditions {
        let list: Vec<MatchCondition> = list
            .iter()
            .map(|(name, expression)| MatchCondition {
                name: name.to_string(),
                expression: expression.to_string(),
            })
            .collect();
        Conditions::compile(&list)
    }

    #[tokio::test]
    async fn conditions_match_as_kube_matches_them() {
        let catalog = Catalog::builtin();
        let pods = catalog.get("", "v1", "pods").expect("pods");
        let trace = Trace::default();
        let attributes = Attributes {
            operation: Operation::Create,
            rt: &pods,
            namespace: "default",
            name: "web",
            subresource: None,
            old: None,
            user: None,
            dry_run: false,
            trace: &trace,
        };
        let authorization = Authorization::new(Arc::new(AlwaysAllow), None);
        let object = json!({"metadata": {"name": "web", "labels": {"app": "web"}}});
        let request = Request::new(&attributes, &object, &pods, &authorization);
        let fail = FailurePolicy::Fail;
        let evaluate = |c: Conditions, failure: FailurePolicy| {
            let request = &request;
            async move { c.evaluate(request, None, failure).await }
        };
        assert_eq!(evaluate(conditions(&[]), fail).await, Ok(true));
        let matching = conditions(&[
            ("web", "object.metadata.labels.app == 'web'"),
            (
                "create",
                "request.operation == 'CREATE' && request.kind.kind == 'Pod'",
            ),
            (
                "allowed",
                "authorizer.group('').resource('pods').check('get').allowed()",
            ),
        ]);
        assert_eq!(evaluate(matching, fail).await, Ok(true));
        // A false condition decides, even when another failed.
        let failing = || {
            conditions(&[
                ("missing", "object.spec.x == 1"),
                ("params", "params.x == 1"),
                ("other", "object.metadata.name == 'other'"),
            ])
        };
        assert_eq!(evaluate(failing(), fail).await, Ok(false));
        let errors = || {
            conditions(&[
                ("missing", "object.spec.x == 1"),
                ("also", "object.spec.y == 1"),
            ])
        };
        assert_eq!(
            evaluate(errors(), fail).await,
            Err(ConditionError(
                "[expression 'object.spec.x == 1' resulted in error: no such key: spec, expression 'object.spec.y == 1' resulted in error: no such key: spec]".into()
            ))
        );
        assert_eq!(evaluate(errors(), FailurePolicy::Ignore).await, Ok(false));
        let uncompiled = conditions(&[("params", "params.x == 1")]);
        assert_eq!(uncompiled.compile_errors().len(), 1);
        assert_eq!(
            evaluate(uncompiled, fail).await,
            Err(ConditionError(
                "compilation error: compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')\n | params.x == 1\n | ^".into()
            ))
        );
    }
}
