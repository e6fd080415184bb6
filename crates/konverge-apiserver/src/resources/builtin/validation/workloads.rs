//! apps/v1 workloads and Jobs: selectors, templates, restart policies, StatefulSet updates.

use serde_json::{Value, json};

use super::pod::pod_spec;
use super::*;
use crate::error::Cause;

/// The selector and template of a workload, as apps/v1 checks them.
fn selector_and_template(obj: &Value, kind: &str, causes: &mut Vec<Cause>) {
    let selector = obj.pointer("/spec/selector").filter(|s| !s.is_null());
    match selector {
        None => {
            if kind != "daemonset" {
                causes.push(required("spec.selector"));
            }
        }
        Some(sel) => {
            let empty = sel
                .get("matchLabels")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty())
                && sel
                    .get("matchExpressions")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty);
            if empty {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.selector",
                    format!("Invalid value: v1.LabelSelector{{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}}: empty selector is invalid for {kind}"),
                ));
                return;
            }
        }
    }
    let labels = obj.pointer("/spec/template/metadata/labels");
    let matches = selector
        .and_then(|s| konverge_apimachinery::selector::LabelSelector::from_json(s).ok())
        .map(|s| {
            let set = labels
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            s.matches(&set)
        });
    if matches == Some(false) || (selector.is_none() && kind == "daemonset") {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.template.metadata.labels",
            format!(
                "Invalid value: {}: `selector` does not match template `labels`",
                go_string_map(labels)
            ),
        ));
    }
}

fn workload(obj: &Value, kind: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    non_negative(
        obj,
        "/spec",
        "spec",
        &[
            "replicas",
            "minReadySeconds",
            "revisionHistoryLimit",
            "progressDeadlineSeconds",
        ],
        &mut causes,
    );
    selector_and_template(obj, kind, &mut causes);
    let spec = obj
        .pointer("/spec/template/spec")
        .cloned()
        .unwrap_or(Value::Null);
    // kube-apiserver leaves a StatefulSet's pod template unchecked (its mounts may name
    // claim templates rather than volumes), but for the two rules below.
    if kind != "statefulset" {
        pod_spec(&spec, "spec.template.spec", &mut causes);
    }
    // After the pod spec's own check (Required for an empty one), apps/v1's.
    let owner = match kind {
        "daemonset" => "DaemonSet",
        "statefulset" => "StatefulSet",
        _ => "ReplicaSet",
    };
    always_running_template(&spec, owner, &mut causes);
    causes
}

/// The pod template of a controller whose pods run until replaced (`owner`: ReplicaSet,
/// DaemonSet, StatefulSet, ReplicationController): they always restart and have no deadline.
pub(super) fn always_running_template(spec: &Value, owner: &str, causes: &mut Vec<Cause>) {
    let restart = spec
        .get("restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("");
    if restart != "Always" {
        causes.push(not_supported(
            "spec.template.spec.restartPolicy",
            restart,
            &["Always"],
        ));
    }
    if spec
        .get("activeDeadlineSeconds")
        .is_some_and(|v| !v.is_null())
    {
        causes.push(forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {owner} is not Supported"),
        ));
    }
}

/// A workload and, on update, its selector, which apps/v1 keeps (the registry's strategy
/// checks it, after the spec).
fn workload_update(obj: &Value, old: Option<&Value>, kind: &str) -> Vec<Cause> {
    let mut causes = workload(obj, kind);
    if let Some(old) = old {
        immutable(
            obj,
            old,
            "/spec/selector",
            "spec.selector",
            go_label_selector,
            &mut causes,
        );
    }
    causes
}

pub(crate) fn deployment(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    workload_update(obj, old, "deployment")
}

/// ReplicaSets share Deployments' checks, and their wording.
pub(crate) fn replica_set(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    workload_update(obj, old, "deployment")
}

pub(crate) fn daemon_set(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    workload_update(obj, old, "daemonset")
}

pub(crate) fn stateful_set(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = workload(obj, "statefulset");
    if let Some(old) = old {
        // Only these may change.
        let mut a = obj.get("spec").cloned().unwrap_or(Value::Null);
        let mut b = old.get("spec").cloned().unwrap_or(Value::Null);
        for field in [
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ] {
            for spec in [&mut a, &mut b] {
                if let Some(s) = spec.as_object_mut() {
                    s.remove(field);
                }
            }
        }
        if a != b {
            causes.push(forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }
    causes
}

pub(super) fn job_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    non_negative(
        spec,
        "",
        path,
        &[
            "parallelism",
            "completions",
            "activeDeadlineSeconds",
            "backoffLimit",
            "ttlSecondsAfterFinished",
        ],
        causes,
    );
    if spec.get("completionMode").and_then(Value::as_str) == Some("Indexed")
        && spec.get("completions").is_none_or(Value::is_null)
    {
        causes.push(required_because(
            format!("{path}.completions"),
            "when completion mode is Indexed",
        ));
    }
    let pod = spec
        .pointer("/template/spec")
        .cloned()
        .unwrap_or(Value::Null);
    let pod_path = format!("{path}.template.spec");
    pod_spec(&pod, &pod_path, causes);
    match pod.get("restartPolicy").and_then(Value::as_str) {
        Some("OnFailure" | "Never") => {}
        None | Some("" | "Always") => causes.push(required_because(
            format!("{pod_path}.restartPolicy"),
            "valid values: \"OnFailure\", \"Never\"",
        )),
        Some(other) => causes.push(not_supported(
            format!("{pod_path}.restartPolicy"),
            other,
            &["OnFailure", "Never"],
        )),
    }
}

pub(crate) fn job(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    job_spec(&spec, "spec", &mut causes);
    if let Some(old) = old {
        job_update(obj, old, &mut causes);
    }
    causes
}

/// `ValidateJobSpecUpdate`: what a Job keeps once created.
fn job_update(obj: &Value, old: &Value, causes: &mut Vec<Cause>) {
    let indexed = obj.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    let completions = obj.pointer("/spec/completions");
    if !indexed {
        immutable(
            obj,
            old,
            "/spec/completions",
            "spec.completions",
            go_scalar,
            causes,
        );
    } else if !same(completions, old.pointer("/spec/completions"))
        && completions.is_some_and(|c| !c.is_null())
        && completions != obj.pointer("/spec/parallelism")
    {
        // Indexed Jobs scale (ElasticIndexedJob), their completions with their parallelism;
        // dropping completions is the spec's error (Required), not this one.
        causes.push(invalid_shown(
            "spec.completions",
            &go_scalar(completions),
            "can only be modified in tandem with spec.parallelism",
        ));
    }
    immutable(
        obj,
        old,
        "/spec/selector",
        "spec.selector",
        go_label_selector,
        causes,
    );
    // A suspended Job that never started may still be placed elsewhere.
    let mut before = old
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    let after = obj
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    let mutable_scheduling = old.pointer("/spec/suspend") == Some(&json!(true))
        && old.pointer("/status/startTime").is_none_or(Value::is_null);
    if mutable_scheduling && before.is_object() {
        for at in [
            "/metadata/labels",
            "/metadata/annotations",
            "/spec/nodeSelector",
            "/spec/tolerations",
            "/spec/schedulingGates",
            "/spec/affinity/nodeAffinity",
        ] {
            let (parent, field) = at.rsplit_once('/').unwrap_or_default();
            let value = after.pointer(at).cloned();
            if let Some(p) = before.pointer_mut(parent).and_then(Value::as_object_mut) {
                match value {
                    Some(v) => p.insert(field.into(), v),
                    None => p.remove(field),
                };
            } else if let (Some(v), Some(spec)) = (value, before.get_mut("spec")) {
                spec["affinity"] = json!({ field: v });
            }
        }
    }
    if !same(Some(&after), Some(&before)) {
        // Go prints the whole core.PodTemplateSpec, pointer addresses and all; its JSON
        // stands in for it.
        causes.push(Cause::invalid(
            "spec.template",
            &after,
            "field is immutable",
        ));
    }
    immutable(
        obj,
        old,
        "/spec/completionMode",
        "spec.completionMode",
        go_scalar,
        causes,
    );
    for (at, path) in [
        ("/spec/podFailurePolicy", "spec.podFailurePolicy"),
        ("/spec/backoffLimitPerIndex", "spec.backoffLimitPerIndex"),
        ("/spec/managedBy", "spec.managedBy"),
        ("/spec/successPolicy", "spec.successPolicy"),
    ] {
        // Structs print as JSON here, where Go prints `batch.PodFailurePolicy{...}`.
        immutable(
            obj,
            old,
            at,
            path,
            |v| match v {
                Some(v @ Value::Object(_)) => v.to_string(),
                other => go_scalar(other),
            },
            causes,
        );
    }
}

/// A PodTemplate's pod spec.
pub(crate) fn pod_template(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj
        .pointer("/template/spec")
        .cloned()
        .unwrap_or(Value::Null);
    pod_spec(&spec, "template.spec", &mut causes);
    causes
}

/// A ReplicationController's pod template: its pods always restart.
pub(crate) fn replication_controller(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    non_negative(
        obj,
        "/spec",
        "spec",
        &["replicas", "minReadySeconds"],
        &mut causes,
    );
    let Some(spec) = obj.pointer("/spec/template/spec") else {
        return causes;
    };
    pod_spec(spec, "spec.template.spec", &mut causes);
    always_running_template(spec, "ReplicationController", &mut causes);
    causes
}
