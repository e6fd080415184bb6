//! Cluster-wide classes and bindings: PriorityClasses, IngressClasses, role bindings, and
//! what their updates may change.

use serde_json::Value;

use super::*;
use crate::error::Cause;

/// A PriorityClass keeps its value and preemption policy.
pub(crate) fn priority_class(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(old) = old else { return causes };
    if !same(obj.get("value"), old.get("value")) {
        causes.push(forbidden("value", "may not be changed in an update."));
    }
    immutable(
        obj,
        old,
        "/preemptionPolicy",
        "preemptionPolicy",
        go_scalar,
        &mut causes,
    );
    causes
}

/// An IngressClass keeps its controller.
pub(crate) fn ingress_class(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(old) = old {
        immutable(
            obj,
            old,
            "/spec/controller",
            "spec.controller",
            go_scalar,
            &mut causes,
        );
    }
    causes
}

/// A RoleBinding or ClusterRoleBinding keeps the role it grants.
pub(crate) fn role_binding(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(old) = old else { return causes };
    let role_ref = |o: &Value, field: &str| {
        o.pointer(&format!("/roleRef/{field}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let fields = ["apiGroup", "kind", "name"];
    if fields.iter().any(|f| role_ref(obj, f) != role_ref(old, f)) {
        let shown = format!(
            "rbac.RoleRef{{APIGroup:{:?}, Kind:{:?}, Name:{:?}}}",
            role_ref(obj, "apiGroup"),
            role_ref(obj, "kind"),
            role_ref(obj, "name"),
        );
        causes.push(invalid_shown("roleRef", &shown, "cannot change roleRef"));
    }
    causes
}
