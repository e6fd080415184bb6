//! What a pod update may change (`ValidatePodUpdate`): images, a shrinking deadline, added
//! tolerations, removed scheduling gates and, while gated, added node constraints.

use serde_json::{Value, json};

use super::*;
use crate::error::Cause;

/// The fields a pod update may change, as kube-apiserver lists them.
const UPDATABLE_POD_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `ValidatePodUpdate`: a pod's spec is fixed but for images, its deadline, added
/// tolerations, removed scheduling gates, and (while gated) added node constraints.
pub(super) fn pod_update(obj: &Value, old: &Value, causes: &mut Vec<Cause>) {
    let null = Value::Null;
    let new_spec = obj.get("spec").unwrap_or(&null);
    let old_spec = old.get("spec").unwrap_or(&null);
    let len =
        |spec: &Value, list: &str| spec.get(list).and_then(Value::as_array).map_or(0, Vec::len);
    for list in ["containers", "initContainers"] {
        if len(new_spec, list) != len(old_spec, list) {
            causes.push(forbidden(
                format!("spec.{list}"),
                "pod updates may not add or remove containers",
            ));
            return;
        }
    }
    if !active_deadline_update(new_spec, old_spec, causes) {
        return;
    }
    tolerations_update(new_spec, old_spec, causes);
    scheduling_gates_update(new_spec, old_spec, causes);
    if same(Some(new_spec), Some(old_spec)) {
        return;
    }
    let mut munged = new_spec.clone();
    for list in ["containers", "initContainers"] {
        for (i, c) in old_spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(new) = munged.pointer_mut(&format!("/{list}/{i}")) {
                new["image"] = c.get("image").cloned().unwrap_or(Value::Null);
            }
        }
    }
    let old_field = |field: &str| old_spec.get(field).cloned().unwrap_or(Value::Null);
    for field in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        munged[field] = old_field(field);
    }
    if old_spec["terminationGracePeriodSeconds"]
        .as_i64()
        .is_some_and(|g| g < 0)
        && new_spec["terminationGracePeriodSeconds"].as_i64() == Some(1)
    {
        munged["terminationGracePeriodSeconds"] = old_field("terminationGracePeriodSeconds");
    }
    let gated = old_spec["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty());
    if gated {
        gated_node_constraints(new_spec, old_spec, &mut munged, causes);
    }
    if !same(Some(&munged), Some(old_spec)) {
        causes.push(forbidden(
            "spec",
            &format!(
                "pod updates may not change fields other than {UPDATABLE_POD_FIELDS}\n{}",
                spec_diff("core.PodSpec", old_spec, &munged)
            ),
        ));
    }
}

/// The deadline may only shrink; false when the update's other checks stop here.
fn active_deadline_update(new_spec: &Value, old_spec: &Value, causes: &mut Vec<Cause>) -> bool {
    const PATH: &str = "spec.activeDeadlineSeconds";
    let new = new_spec
        .get("activeDeadlineSeconds")
        .and_then(Value::as_i64);
    let old = old_spec
        .get("activeDeadlineSeconds")
        .and_then(Value::as_i64);
    if let Some(n) = new {
        if !(0..=i64::from(i32::MAX)).contains(&n) {
            causes.push(Cause::invalid(
                PATH,
                &json!(n),
                "must be between 0 and 2147483647, inclusive",
            ));
            return false;
        }
        if old.is_some_and(|o| o < n) {
            causes.push(Cause::invalid(
                PATH,
                &json!(n),
                "must be less than or equal to previous value",
            ));
            return false;
        }
    } else if old.is_some() {
        causes.push(Cause::invalid(
            PATH,
            &Value::Null,
            "must not update from a positive integer to nil value",
        ));
    }
    true
}

/// Every toleration the pod had, it keeps (but for its `tolerationSeconds`).
fn tolerations_update(new_spec: &Value, old_spec: &Value, causes: &mut Vec<Cause>) {
    let without_seconds = |spec: &Value| -> Vec<Value> {
        spec.get("tolerations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|t| {
                let mut t = zeroless(t);
                if let Some(t) = t.as_object_mut() {
                    t.remove("tolerationSeconds");
                }
                t
            })
            .collect()
    };
    let new = without_seconds(new_spec);
    if without_seconds(old_spec).iter().any(|t| !new.contains(t)) {
        causes.push(forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    }
}

/// Scheduling gates can only be removed.
fn scheduling_gates_update(new_spec: &Value, old_spec: &Value, causes: &mut Vec<Cause>) {
    let names = |spec: &Value| -> Vec<String> {
        spec.get("schedulingGates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|g| g["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let old = names(old_spec);
    for (i, name) in names(new_spec).iter().enumerate() {
        if !old.contains(name) {
            causes.push(forbidden(
                format!("spec.schedulingGates[{i}].name"),
                &format!("only deletion is allowed, but found new scheduling gate '{name}'"),
            ));
        }
    }
}

/// While a pod is gated, its node selector and required node affinity may grow; what they
/// had stays.
fn gated_node_constraints(
    new_spec: &Value,
    old_spec: &Value,
    munged: &mut Value,
    causes: &mut Vec<Cause>,
) {
    let new_selector = new_spec.get("nodeSelector").and_then(Value::as_object);
    let kept = old_spec
        .get("nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| new_selector.and_then(|s| s.get(k)) == Some(v));
    if !kept {
        causes.push(invalid_shown(
            "spec.nodeSelector",
            &go_string_map(new_spec.get("nodeSelector")),
            "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
        ));
    }
    munged["nodeSelector"] = old_spec.get("nodeSelector").cloned().unwrap_or(Value::Null);
    const TERMS: &str =
        "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
    const PATH: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    let terms = |spec: &Value| {
        spec.pointer(TERMS)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (old_terms, new_terms) = (terms(old_spec), terms(new_spec));
    if !old_terms.is_empty() {
        if old_terms.len() != new_terms.len() {
            causes.push(invalid_shown(
                PATH,
                &go_node_selector_terms(&new_terms),
                "no additions/deletions to non-empty NodeSelectorTerms list are allowed",
            ));
        } else {
            for (i, (was, now)) in old_terms.iter().zip(&new_terms).enumerate() {
                let appended = ["matchExpressions", "matchFields"].iter().all(|list| {
                    let was = was
                        .get(*list)
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    let now = now
                        .get(*list)
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    now.len() >= was.len() && now[..was.len()] == was[..]
                });
                if !appended {
                    causes.push(invalid_shown(
                        format!("{PATH}[{i}]"),
                        &go_node_selector_term(now),
                        "only additions are allowed (no mutations or deletions)",
                    ));
                }
            }
        }
    }
    let old_node_affinity = old_spec.pointer("/affinity/nodeAffinity").cloned();
    if let Some(affinity) = munged.get_mut("affinity").and_then(Value::as_object_mut) {
        match old_node_affinity {
            Some(a) => affinity.insert("nodeAffinity".into(), a),
            None => affinity.remove("nodeAffinity"),
        };
    } else if let Some(a) = old_node_affinity {
        munged["affinity"] = json!({"nodeAffinity": a});
    }
}

fn go_node_selector_term(term: &Value) -> String {
    format!(
        "core.NodeSelectorTerm{{MatchExpressions:{}, MatchFields:{}}}",
        go_requirements("core.NodeSelectorRequirement", term.get("matchExpressions")),
        go_requirements("core.NodeSelectorRequirement", term.get("matchFields")),
    )
}

fn go_node_selector_terms(terms: &[Value]) -> String {
    if terms.is_empty() {
        return "[]core.NodeSelectorTerm(nil)".into();
    }
    let terms: Vec<String> = terms.iter().map(go_node_selector_term).collect();
    format!("[]core.NodeSelectorTerm{{{}}}", terms.join(", "))
}
