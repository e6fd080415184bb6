//! One policy evaluated for one binding and one param: match conditions, validations with
//! their messages, and audit annotations (kube's `validator.Validate`).

use konverge_apimachinery::cel::admission::{Activation, Evaluation, Output, RUNTIME_BUDGET};
use serde_json::Value;

use super::compile::Policy;
use super::conditions::FailurePolicy;
use super::request::Request;

/// The longest message a `messageExpression` may produce
/// (`MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// What one validation decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Whether it refuses (then the binding's actions apply).
    pub(crate) deny: bool,
    /// Whether it comes from an error rather than a false validation.
    pub(crate) error: bool,
    pub(crate) message: String,
    /// The status reason (`Invalid` unless the validation names another); none for errors.
    pub(crate) reason: Option<String>,
}

/// What one audit annotation gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Annotation {
    /// Publish `value` under `key`.
    Publish { key: String, value: String },
    /// The expression failed: refuse the request (`failurePolicy: Fail`).
    Error(String),
    /// Nothing to publish.
    Exclude,
}

/// What evaluating a policy for one binding and param gave.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) decisions: Vec<Decision>,
    pub(crate) annotations: Vec<Annotation>,
}

/// The decision of an error, by the failure policy.
fn error_decision(failure: FailurePolicy, message: String) -> Decision {
    Decision {
        deny: failure == FailurePolicy::Fail,
        error: true,
        message,
        reason: None,
    }
}

fn only(decision: Decision) -> Outcome {
    Outcome {
        decisions: vec![decision],
        annotations: Vec::new(),
    }
}

/// The result of one validation's expression.
type Result = std::result::Result<Output, String>;

/// Evaluates `policy` against `request` with `params` and `namespace` (the
/// `namespaceObject`).
pub(crate) async fn validate(
    policy: &Policy,
    request: &Request<'_>,
    params: Option<&Value>,
    namespace: Option<&Value>,
) -> Outcome {
    let failure = policy.failure;
    match policy.conditions.evaluate(request, params, failure).await {
        Err(e) => return only(error_decision(failure, e.to_string())),
        Ok(false) => return Outcome::default(),
        Ok(true) => {}
    }
    let composition = policy.composition.as_ref();
    let validated = request
        .run(|authorizer| {
            let activation = Activation::new(
                composition,
                &request.input(params, namespace, Some(authorizer)),
            );
            let mut budget = RUNTIME_BUDGET;
            let mut results: Vec<Result> = Vec::new();
            for validation in &policy.validations {
                let expression = match &validation.expression {
                    Ok(e) => e,
                    Err(e) => {
                        results.push(Err(format!("compilation error: {}", e.detail)));
                        continue;
                    }
                };
                match activation.evaluate(expression, &mut budget) {
                    Err(out) => return Err(out),
                    Ok(Evaluation::Error(e)) => results.push(Err(e)),
                    Ok(Evaluation::Value(v)) => results.push(Ok(v)),
                }
            }
            Ok((results, budget))
        })
        .await;
    let (results, remaining) = match validated {
        Ok(done) => done,
        Err(out) => return only(error_decision(failure, out.to_string())),
    };
    // Message expressions see no authorizer; they run on what the validations left.
    let activation = Activation::new(composition, &request.input(params, namespace, None));
    let mut budget = remaining;
    let mut messages: Vec<Option<Result>> = Vec::new();
    let mut messages_failed = None;
    for validation in &policy.validations {
        let message = match &validation.message_expression {
            None => None,
            Some(Err(e)) => Some(Err(e.detail.clone())),
            Some(Ok(expression)) => match activation.evaluate(expression, &mut budget) {
                Err(out) => {
                    messages_failed = Some(out);
                    break;
                }
                Ok(Evaluation::Error(e)) => Some(Err(e)),
                Ok(Evaluation::Value(v)) => Some(Ok(v)),
            },
        };
        messages.push(message);
    }
    let mut decisions = Vec::with_capacity(results.len());
    for (i, (validation, result)) in policy.validations.iter().zip(results).enumerate() {
        let decision = match (result, messages_failed) {
            (Err(e), _) => error_decision(failure, e),
            // Messages that ran out of budget fail every validation that did not fail itself.
            (Ok(_), Some(out)) => {
                error_decision(failure, format!("failed messageExpression: {out}"))
            }
            (Ok(Output::Bool(true)), None) => Decision {
                deny: false,
                error: false,
                message: String::new(),
                reason: None,
            },
            (Ok(_), None) => {
                let from_expression = match messages.get(i) {
                    Some(Some(Ok(Output::String(s)))) => {
                        let s = s.trim();
                        if s.len() > MAX_MESSAGE_BYTES || s.contains('\n') {
                            String::new()
                        } else {
                            s.to_string()
                        }
                    }
                    _ => String::new(),
                };
                let message = if !from_expression.is_empty() {
                    from_expression
                } else if !validation.message.trim().is_empty() {
                    validation.message.trim().to_string()
                } else {
                    format!("failed expression: {}", validation.source.trim())
                };
                Decision {
                    deny: true,
                    error: false,
                    message,
                    reason: Some(
                        validation
                            .reason
                            .clone()
                            .unwrap_or_else(|| "Invalid".to_string()),
                    ),
                }
            }
        };
        decisions.push(decision);
    }
    // Audit annotations see params, but no authorizer, with a budget of their own.
    let activation = Activation::new(composition, &request.input(params, namespace, None));
    let mut budget = RUNTIME_BUDGET;
    let mut annotations = Vec::new();
    for annotation in &policy.audit_annotations {
        let evaluated = match &annotation.value {
            Err(e) => Evaluation::Error(format!("compilation error: {}", e.detail)),
            Ok(expression) => match activation.evaluate(expression, &mut budget) {
                Err(out) => return only(error_decision(failure, out.to_string())),
                Ok(evaluated) => evaluated,
            },
        };
        let source = annotation
            .value
            .as_ref()
            .map(|e| e.source().to_string())
            .unwrap_or_default();
        annotations.push(match evaluated {
            Evaluation::Error(e) => match failure {
                FailurePolicy::Fail => Annotation::Error(e),
                FailurePolicy::Ignore => Annotation::Exclude,
            },
            Evaluation::Value(Output::String(s)) if !s.trim().is_empty() => Annotation::Publish {
                key: annotation.key.clone(),
                value: s.trim().to_string(),
            },
            Evaluation::Value(Output::String(_) | Output::Null) => Annotation::Exclude,
            Evaluation::Value(other) => {
                let type_name = match other {
                    Output::Bool(_) => "bool".to_string(),
                    Output::Other(t) => t,
                    _ => String::new(),
                };
                Annotation::Error(format!(
                    "valueExpression '{source}' resulted in unsupported return type: {type_name}. Return type must be either string or null."
                ))
            }
        });
    }
    Outcome {
        decisions,
        annotations,
    }
}
