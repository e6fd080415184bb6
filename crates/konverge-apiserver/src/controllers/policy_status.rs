//! kube-controller-manager's `validatingadmissionpolicy-status` controller: a
//! ValidatingAdmissionPolicy whose generation its status has not observed yet is type
//! checked against the schemas of the kinds it matches, and its status gets
//! `observedGeneration` and `typeChecking.expressionWarnings` (the rest of the status is
//! left as it is).

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use serde_json::{Value, json};

use crate::admission::policy::typecheck;
use crate::error::Reason;
use crate::registry::{ListOptions, Registry, WriteOptions};

/// The controller's name, which its status writes are recorded under.
pub const CONTROLLER_NAME: &str = "validatingadmissionpolicy-status-controller";

/// One pass: every policy not observed at its generation gets its status.
pub async fn pass(registry: &Registry) {
    let Some(rt) = registry.catalog().get(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
    ) else {
        return;
    };
    let listed = match registry.list(&rt, None, &ListOptions::default()).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "listing ValidatingAdmissionPolicies failed");
            return;
        }
    };
    for item in listed.items {
        let generation = item
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let observed = item
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if generation <= observed {
            continue;
        }
        let Ok(policy) = serde_json::from_value::<ValidatingAdmissionPolicy>((*item).clone())
        else {
            continue;
        };
        let warnings: Vec<Value> = typecheck::check(&policy, registry.catalog())
            .iter()
            .map(typecheck::ExpressionWarning::to_json)
            .collect();
        let mut type_checking = json!({});
        if !warnings.is_empty() {
            type_checking["expressionWarnings"] = json!(warnings);
        }
        let mut updated = (*item).clone();
        if !updated.get("status").is_some_and(Value::is_object) {
            updated["status"] = json!({});
        }
        updated["status"]["observedGeneration"] = json!(generation);
        updated["status"]["typeChecking"] = type_checking;
        let name = policy.metadata.name.clone().unwrap_or_default();
        let options = WriteOptions {
            field_manager: Some(CONTROLLER_NAME.to_string()),
            ..WriteOptions::default()
        };
        match registry
            .update(&rt, None, &name, updated, Some("status"), &options)
            .await
        {
            Ok(_) => {}
            // Changed or deleted meanwhile: the next pass sees it as it is.
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {}
            Err(e) => {
                tracing::warn!(error = %e, policy = %name, "writing a policy's status failed")
            }
        }
    }
}
