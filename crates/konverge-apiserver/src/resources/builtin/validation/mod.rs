//! kube-apiserver 1.33's validation for the kinds operators write, with its field paths and
//! words. One file per family of kinds:
//!
//! - `config`: ConfigMap and Secret keys, sizes, types and immutability;
//! - `affinity`: node and pod affinity, label selectors and tolerations of pod specs;
//! - `pod`: pod specs wherever they appear (containers, ports, probes and lifecycle
//!   handlers, env vars, resources, security contexts, policies and names);
//! - `volumes`: pod volumes and volume mounts;
//! - `pod_update`: what a pod update may change;
//! - `workloads`: apps/v1 selectors and templates, StatefulSet and selector updates, Jobs
//!   and what their updates may change;
//! - `cron`: CronJob schedules as the `robfig/cron` parser reads them, and time zones;
//! - `quantity`: resource quantities' values and canonical form (`1000m` prints `1`);
//! - `quota`: ResourceQuota resource names, values and scopes;
//! - `service`: Service types and ports, and cluster IPs on update;
//! - `storage`: what updates of PersistentVolumeClaims, PersistentVolumes, StorageClasses
//!   and CSIDrivers may change;
//! - `cluster`: what updates of PriorityClasses, IngressClasses and role bindings may change;
//! - `admission_webhook`: the defaults and validation of webhook configurations.
//! - `admission_policy`: ValidatingAdmissionPolicies and their bindings (defaults too), their
//!   CEL expressions compiled as they are written.
//!
//! This file holds the words every family shares (`Required value`, `Unsupported value` ...).

use serde_json::{Value, json};

use crate::error::Cause;
use crate::resources::NameRule;
use crate::resources::meta::check_name;

/// ConfigMaps and Secrets hold at most 1 MiB of data.
const MAX_DATA_BYTES: usize = 1024 * 1024;

fn cause(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.into(),
        message: message.into(),
        field: field.into(),
    }
}

fn required(field: impl Into<String>) -> Cause {
    Cause::required(field)
}

fn required_because(field: impl Into<String>, detail: &str) -> Cause {
    Cause::required_because(field, detail)
}

fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Cause {
    Cause::not_supported(field, &Value::from(value), supported)
}

fn duplicate(field: impl Into<String>, value: &Value) -> Cause {
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    cause(
        "FieldValueDuplicate",
        field,
        format!("Duplicate value: {shown}"),
    )
}

fn too_long(field: impl Into<String>, max: usize) -> Cause {
    Cause::too_long(field, max)
}

fn not_found(field: impl Into<String>, value: &str) -> Cause {
    cause("FieldValueNotFound", field, format!("Not found: {value:?}"))
}

fn forbidden(field: impl Into<String>, detail: &str) -> Cause {
    Cause::forbidden(field, detail)
}

/// Each of `fields` under `at` (a JSON pointer, reported as the dotted `path`) that is set
/// must not be negative.
fn non_negative(obj: &Value, at: &str, path: &str, fields: &[&str], causes: &mut Vec<Cause>) {
    for field in fields {
        if let Some(n) = obj
            .pointer(&format!("{at}/{field}"))
            .and_then(Value::as_i64)
            && n < 0
        {
            causes.push(Cause::invalid(
                format!("{path}.{field}"),
                &json!(n),
                "must be greater than or equal to 0",
            ));
        }
    }
}

mod admission_policy;
mod admission_webhook;
mod affinity;
mod cluster;
mod config;
mod cron;
mod downward;
mod pod;
mod pod_update;
mod privileged;
mod quantity;
mod quota;
mod service;
mod storage;
mod volumes;
mod workloads;

pub(super) use admission_policy::{
    default_validating_admission_policy, default_validating_admission_policy_binding,
    validating_admission_policy, validating_admission_policy_binding,
};
pub(super) use admission_webhook::{
    default_mutating_webhook_configuration, default_validating_webhook_configuration,
    mutating_webhook_configuration, validating_webhook_configuration,
};
pub(super) use cluster::{ingress_class, priority_class, role_binding};
pub(super) use config::{config_map, secret};
pub(super) use cron::cron_job;
pub(super) use pod::pod;
pub(crate) use privileged::refuse_privileged;
pub(super) use quota::resource_quota;
pub(super) use service::service;
pub(super) use storage::{csi_driver, persistent_volume, persistent_volume_claim, storage_class};
pub(super) use workloads::{
    daemon_set, deployment, job, pod_template, replica_set, replication_controller, stateful_set,
};

/// A quantity's value (`1Gi`, `500m`, `1e3`), for comparing sizes.
fn quantity_value(q: Option<&Value>) -> Option<f64> {
    quantity::parse(q?).map(|q| q.nanos as f64 / 1e9)
}

/// An Invalid cause whose value is already printed as Go's `%#v` prints it.
fn invalid_shown(field: impl Into<String>, shown: &str, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {shown}: {detail}"),
    )
}

/// `obj` without Go's zero values (null, false, 0, "", empty lists and objects): decoded
/// into Go types, a field left out and a field set to its zero value are the same, and
/// `apiequality.Semantic.DeepEqual` takes nil and empty slices and maps as equal, and
/// quantities by their value (`1Gi` is `1024Mi`).
fn zeroless(obj: &Value) -> Value {
    match obj {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("limits" | "requests" | "capacity" | "overhead", Value::Object(list)) => {
                            Value::Object(
                                list.iter()
                                    .map(|(name, q)| (name.clone(), canonical_quantity(q)))
                                    .collect(),
                            )
                        }
                        ("sizeLimit", q) => canonical_quantity(q),
                        _ => v.clone(),
                    };
                    (k.clone(), zeroless(&v))
                })
                .filter(|(_, v)| !konverge_apimachinery::go_encoding::is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(zeroless).collect()),
        other => other.clone(),
    }
}

/// A quantity in its canonical form, or as it was when it is none.
fn canonical_quantity(q: &Value) -> Value {
    quantity::parse(q).map_or_else(|| q.clone(), |q| Value::String(q.canonical))
}

/// `apiequality.Semantic.DeepEqual` of two fields, as near as JSON gets.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    let null = Value::Null;
    zeroless(a.unwrap_or(&null)) == zeroless(b.unwrap_or(&null))
}

/// `ValidateImmutableField`: a changed field is Invalid, shown with its new value.
fn immutable(
    obj: &Value,
    old: &Value,
    at: &str,
    path: &str,
    shown: impl Fn(Option<&Value>) -> String,
    causes: &mut Vec<Cause>,
) {
    let (new, before) = (obj.pointer(at), old.pointer(at));
    if !same(new, before) {
        causes.push(invalid_shown(path, &shown(new), "field is immutable"));
    }
}

/// How `%#v` prints a scalar field's value (a pointer is followed; nil is `null`).
fn go_scalar(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "null".into(),
        Some(Value::String(s)) => format!("{s:?}"),
        Some(other) => other.to_string(),
    }
}

/// How `%#v` prints a `[]string`, or a slice of a named string type `ty`.
fn go_strings(ty: &str, v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => format!("[]{ty}(nil)"),
        Some(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|i| format!("{:?}", i.as_str().unwrap_or_default()))
                .collect();
            format!("[]{ty}{{{}}}", items.join(", "))
        }
    }
}

/// How `%#v` prints a list of selector requirements of type `ty` (`v1.LabelSelectorRequirement`,
/// `core.NodeSelectorRequirement`).
fn go_requirements(ty: &str, v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => format!("[]{ty}(nil)"),
        Some(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|r| {
                    format!(
                        "{ty}{{Key:{:?}, Operator:{:?}, Values:{}}}",
                        r["key"].as_str().unwrap_or_default(),
                        r["operator"].as_str().unwrap_or_default(),
                        go_strings("string", r.get("values")),
                    )
                })
                .collect();
            format!("[]{ty}{{{}}}", items.join(", "))
        }
    }
}

/// How `%#v` prints a `metav1.LabelSelector` (a nil pointer is `null`).
fn go_label_selector(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "null".into(),
        Some(sel) => format!(
            "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{}}}",
            go_string_map(sel.get("matchLabels")),
            go_requirements("v1.LabelSelectorRequirement", sel.get("matchExpressions")),
        ),
    }
}

/// The diff kube-apiserver appends to some update refusals, as near as it goes. Theirs is
/// go-cmp's over the internal Go type, which go-cmp makes unstable on purpose (it indents
/// with spaces or non-breaking spaces at random, per process): no client can match it byte
/// for byte, so this one shows the changed fields, JSON valued, in go-cmp's layout.
fn spec_diff(type_name: &str, old: &Value, new: &Value) -> String {
    let (old, new) = (zeroless(old), zeroless(new));
    let empty = serde_json::Map::new();
    let (a, b) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut lines = vec![format!("  {type_name}{{")];
    for key in keys {
        if a.get(key) == b.get(key) {
            continue;
        }
        let field = go_field_name(key);
        if let Some(v) = a.get(key) {
            lines.push(format!("- \t{field}: {v},"));
        }
        if let Some(v) = b.get(key) {
            lines.push(format!("+ \t{field}: {v},"));
        }
    }
    lines.push("  }".into());
    lines.join("\n")
}

/// A JSON field's Go name: its first letter upper-cased.
fn go_field_name(key: &str) -> String {
    let mut chars = key.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The items of the list `field` of `value`, with their indexes (none when it is not a list).
fn items<'a>(value: &'a Value, field: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    value
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// Go's `%#v` of a `map[string]string` (keys sorted), or its nil.
fn go_string_map(map: Option<&Value>) -> String {
    match map.and_then(Value::as_object) {
        None => "map[string]string(nil)".into(),
        Some(m) => {
            let entries: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or_default()))
                .collect();
            format!("map[string]string{{{}}}", entries.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cron::cron_schedule;
    use super::*;

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn config_keys_and_sizes_are_checked_as_kube_apiserver_checks_them() {
        let cm = json!({"data": {"a b": "1", "..": "2", "ok": "3"}, "binaryData": {"ok": "MQ=="}});
        let got = messages(&config_map(&cm, None));
        assert!(got.contains(&r#"data[a b]: Invalid value: "a b": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#.to_string()), "{got:?}");
        assert!(got.contains(&r#"data[..]: Invalid value: "..": must not be '..'"#.to_string()));
        assert!(got.contains(
            &r#"data[ok]: Invalid value: "ok": duplicate of key present in binaryData"#.to_string()
        ));
        let big = json!({"data": {"a": "x".repeat(MAX_DATA_BYTES + 1)}});
        assert_eq!(
            messages(&config_map(&big, None)),
            ["[]: Too long: may not be more than 1048576 bytes"]
        );
        let tls = json!({"type": "kubernetes.io/tls", "data": {}});
        assert_eq!(
            messages(&secret(&tls, None)),
            [
                "data[tls.crt]: Required value",
                "data[tls.key]: Required value"
            ]
        );
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let changed = json!({"immutable": true, "data": {"a": "2"}});
        assert_eq!(
            messages(&config_map(&changed, Some(&old))),
            ["data: Forbidden: field is immutable when `immutable` is set"]
        );
    }

    #[test]
    fn workloads_and_jobs_are_checked_with_kube_apiserver_words() {
        let deploy = json!({"spec": {"selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
        assert_eq!(
            messages(&deployment(&deploy, None)),
            [
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"b\"}: `selector` does not match template `labels`",
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            ]
        );
        let job = json!({"spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "x"}, {"name": "c", "image": "y"}]}}}});
        assert_eq!(
            messages(&super::job(&job, None)),
            [
                "spec.template.spec.containers[1].name: Duplicate value: \"c\"",
                "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
            ]
        );
    }

    #[test]
    fn stateful_set_templates_are_left_unchecked_but_for_restarts() {
        let sts = json!({"spec": {"selector": {"matchLabels": {"app": "db"}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"restartPolicy": "OnFailure",
                "containers": [{"name": "db", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}});
        assert_eq!(
            messages(&stateful_set(&sts, None)),
            [
                "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\""
            ]
        );
    }

    #[test]
    fn workload_selectors_and_job_fields_are_immutable() {
        let deploy = |app: &str| {
            json!({"spec": {"selector": {"matchLabels": {"app": app}},
                "template": {"metadata": {"labels": {"app": app}}, "spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "x"}]}}}})
        };
        assert!(deployment(&deploy("a"), Some(&deploy("a"))).is_empty());
        let want = [
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"b\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable",
        ];
        assert_eq!(
            messages(&deployment(&deploy("b"), Some(&deploy("a")))),
            want
        );
        assert_eq!(
            messages(&replica_set(&deploy("b"), Some(&deploy("a")))),
            want
        );
        assert_eq!(
            messages(&daemon_set(&deploy("b"), Some(&deploy("a")))),
            want
        );
        let mut expr = deploy("a");
        expr["spec"]["selector"] =
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]});
        assert_eq!(
            messages(&deployment(&expr, Some(&deploy("a")))),
            [
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"In\", Values:[]string{\"a\"}}}}: field is immutable"
            ]
        );

        let job = |completions: i64, image: &str| {
            json!({"spec": {"completions": completions, "parallelism": 1,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
                "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": image}]}}}})
        };
        assert!(super::job(&job(1, "x"), Some(&job(1, "x"))).is_empty());
        let got = messages(&super::job(&job(2, "y"), Some(&job(1, "x"))));
        assert_eq!(
            got[0],
            "spec.completions: Invalid value: 2: field is immutable"
        );
        assert!(
            got[1].starts_with("spec.template: Invalid value: {"),
            "{got:?}"
        );
        assert!(got[1].ends_with("}: field is immutable"), "{got:?}");
        assert_eq!(got.len(), 2);
        // A suspended Job that never ran may move: node selector, tolerations, labels.
        let mut suspended = job(1, "x");
        suspended["spec"]["suspend"] = json!(true);
        let mut moved = suspended.clone();
        moved["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "b"});
        assert!(super::job(&moved, Some(&suspended)).is_empty());
        suspended["status"] = json!({"startTime": "2024-01-02T03:04:05Z"});
        assert_eq!(super::job(&moved, Some(&suspended)).len(), 1);
        let mut indexed = job(2, "x");
        indexed["spec"]["completionMode"] = json!("Indexed");
        let mut scaled = indexed.clone();
        scaled["spec"]["completions"] = json!(3);
        assert_eq!(
            messages(&super::job(&scaled, Some(&indexed))),
            [
                "spec.completions: Invalid value: 3: can only be modified in tandem with spec.parallelism"
            ]
        );
        scaled["spec"]["parallelism"] = json!(3);
        assert!(super::job(&scaled, Some(&indexed)).is_empty());
        let mut mode = job(1, "x");
        mode["spec"]["completionMode"] = json!("Indexed");
        assert_eq!(
            messages(&super::job(&mode, Some(&job(1, "x")))),
            ["spec.completionMode: Invalid value: \"Indexed\": field is immutable"]
        );
    }

    #[test]
    fn pod_updates_change_images_deadlines_and_tolerations_only() {
        let pod = json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "image": "x"}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]}});
        let update = |f: &dyn Fn(&mut Value)| {
            let mut new = pod.clone();
            f(&mut new);
            messages(&super::pod(&new, Some(&pod)))
        };
        assert!(update(&|p| p["spec"]["containers"][0]["image"] = json!("y")).is_empty());
        assert!(update(&|p| p["spec"]["activeDeadlineSeconds"] = json!(5)).is_empty());
        assert!(
            update(&|p| p["spec"]["tolerations"][0]["tolerationSeconds"] = json!(5)).is_empty()
        );
        assert!(
            update(&|p| p["spec"]["tolerations"]
                .as_array_mut()
                .unwrap()
                .push(json!({"operator": "Exists"})))
            .is_empty()
        );
        assert!(
            update(&|p| p["spec"]["hostNetwork"] = json!(false)).is_empty(),
            "a zero value is no change"
        );
        let mut sized = pod.clone();
        sized["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "1Gi"}});
        let mut same_size = sized.clone();
        same_size["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("1024Mi");
        assert!(
            super::pod(&same_size, Some(&sized)).is_empty(),
            "quantities compare by value"
        );
        let got = update(&|p| p["spec"]["hostname"] = json!("h"));
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n  core.PodSpec{\n"), "{got:?}");
        assert!(got[0].contains("+ \tHostname: \"h\","), "{got:?}");
        assert_eq!(
            update(&|p| p["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "d", "image": "x"}))),
            ["spec.containers: Forbidden: pod updates may not add or remove containers"]
        );
        assert_eq!(
            update(&|p| p["spec"]["tolerations"] = json!([])),
            [
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
            ]
        );
        let mut deadline = pod.clone();
        deadline["spec"]["activeDeadlineSeconds"] = json!(5);
        let mut later = deadline.clone();
        later["spec"]["activeDeadlineSeconds"] = json!(6);
        assert_eq!(
            messages(&super::pod(&later, Some(&deadline))),
            [
                "spec.activeDeadlineSeconds: Invalid value: 6: must be less than or equal to previous value"
            ]
        );
        assert_eq!(
            messages(&super::pod(&pod, Some(&deadline))),
            [
                "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"
            ]
        );
        // While gated: gates may go, node selectors may grow.
        let mut gated = pod.clone();
        gated["spec"]["schedulingGates"] = json!([{"name": "a"}]);
        gated["spec"]["nodeSelector"] = json!({"zone": "a"});
        let mut ungated = gated.clone();
        ungated["spec"]["schedulingGates"] = json!([{"name": "b"}]);
        ungated["spec"]["nodeSelector"] = json!({"zone": "a", "disk": "ssd"});
        assert_eq!(
            messages(&super::pod(&ungated, Some(&gated))),
            [
                "spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new scheduling gate 'b'"
            ]
        );
        ungated["spec"]["schedulingGates"] = json!([]);
        ungated["spec"]["nodeSelector"] = json!({"zone": "b"});
        assert_eq!(
            messages(&super::pod(&ungated, Some(&gated))),
            [
                "spec.nodeSelector: Invalid value: map[string]string{\"zone\":\"b\"}: only additions to spec.nodeSelector are allowed (no mutations or deletions)"
            ]
        );
    }

    #[test]
    fn storage_and_cluster_classes_keep_what_kube_apiserver_keeps() {
        let claim = json!({"spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": "1Gi"}}}, "status": {"phase": "Pending"}});
        let mut bound = claim.clone();
        bound["spec"]["volumeName"] = json!("pv-1");
        assert!(
            persistent_volume_claim(&bound, Some(&claim)).is_empty(),
            "the binder names the volume once"
        );
        let mut grown = claim.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        let got = messages(&persistent_volume_claim(&grown, Some(&claim)));
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n  core.PersistentVolumeClaimSpec{\n"), "{got:?}");
        let mut was_bound = claim.clone();
        was_bound["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}});
        grown["status"] = was_bound["status"].clone();
        assert!(persistent_volume_claim(&grown, Some(&was_bound)).is_empty());
        let mut shrunk = was_bound.clone();
        shrunk["spec"]["resources"]["requests"]["storage"] = json!("512Mi");
        assert_eq!(
            messages(&persistent_volume_claim(&shrunk, Some(&was_bound))),
            [
                "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
            ]
        );
        let mut block = claim.clone();
        block["spec"]["volumeMode"] = json!("Block");
        assert_eq!(
            messages(&persistent_volume_claim(&block, Some(&claim)))
                .last()
                .unwrap(),
            "volumeMode: Invalid value: \"Block\": field is immutable"
        );

        let pv = json!({"spec": {"hostPath": {"path": "/a", "type": ""}, "capacity": {"storage": "1Gi"}, "volumeMode": "Filesystem"}});
        let mut moved = pv.clone();
        moved["spec"]["hostPath"]["path"] = json!("/b");
        moved["spec"]["capacity"]["storage"] = json!("2Gi");
        let got = messages(&persistent_volume(&moved, Some(&pv)));
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation\n  core.PersistentVolumeSource{\n- \tHostPath: {\"path\":\"/a\"},\n+ \tHostPath: {\"path\":\"/b\"},"), "{got:?}");
        let zoned = |key: &str| {
            let mut v = pv.clone();
            v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": ["z"]}]}]}});
            v
        };
        let beta = zoned("failure-domain.beta.kubernetes.io/zone");
        assert!(persistent_volume(&zoned("topology.kubernetes.io/zone"), Some(&beta)).is_empty());
        assert_eq!(
            persistent_volume(&zoned("other"), Some(&beta))[0].field,
            "nodeAffinity"
        );

        let class = json!({"provisioner": "a", "parameters": {"x": "1"}, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"});
        let changed = json!({"provisioner": "b", "parameters": {"x": "2"}, "reclaimPolicy": "Retain", "volumeBindingMode": "WaitForFirstConsumer"});
        assert_eq!(
            messages(&storage_class(&changed, Some(&class))),
            [
                "parameters: Forbidden: updates to parameters are forbidden.",
                "provisioner: Forbidden: updates to provisioner are forbidden.",
                "reclaimPolicy: Forbidden: updates to reclaimPolicy are forbidden.",
                "volumeBindingMode: Invalid value: \"WaitForFirstConsumer\": field is immutable",
            ]
        );
        let driver =
            json!({"spec": {"attachRequired": true, "volumeLifecycleModes": ["Persistent"]}});
        let redriven =
            json!({"spec": {"attachRequired": false, "volumeLifecycleModes": ["Ephemeral"]}});
        assert_eq!(
            messages(&csi_driver(&redriven, Some(&driver))),
            [
                "spec.attachedRequired: Invalid value: false: field is immutable",
                "spec.volumeLifecycleModes: Invalid value: []storage.VolumeLifecycleMode{\"Ephemeral\"}: field is immutable",
            ]
        );
        let pc = json!({"value": 10, "preemptionPolicy": "PreemptLowerPriority"});
        assert_eq!(
            messages(&priority_class(
                &json!({"value": 11, "preemptionPolicy": "Never"}),
                Some(&pc)
            )),
            [
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"Never\": field is immutable",
            ]
        );
        let ic = |c: &str| json!({"spec": {"controller": c}});
        assert_eq!(
            messages(&ingress_class(&ic("b"), Some(&ic("a")))),
            ["spec.controller: Invalid value: \"b\": field is immutable"]
        );
        let rb = |name: &str| json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}});
        assert!(role_binding(&rb("view"), Some(&rb("view"))).is_empty());
        assert_eq!(
            messages(&role_binding(&rb("view"), Some(&rb("edit")))),
            [
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"view\"}: cannot change roleRef"
            ]
        );
    }

    #[test]
    fn service_cluster_ips_stay_once_set() {
        let svc = |ips: &[&str], policy: &str| {
            json!({"spec": {"type": "ClusterIP", "clusterIP": ips[0], "clusterIPs": ips,
                "ipFamilyPolicy": policy, "ports": [{"port": 80, "protocol": "TCP"}]}})
        };
        let single = svc(&["10.96.0.10"], "SingleStack");
        assert!(service(&single, Some(&single)).is_empty());
        assert_eq!(
            messages(&service(
                &svc(&["10.96.0.20"], "SingleStack"),
                Some(&single)
            )),
            [
                "spec.clusterIPs[0]: Invalid value: []string{\"10.96.0.20\"}: may not change once set"
            ]
        );
        // An old client changes clusterIP alone: clusterIPs follows it.
        let mut old_client = single.clone();
        old_client["spec"]["clusterIP"] = json!("10.96.0.30");
        assert_eq!(
            messages(&service(&old_client, Some(&single))),
            [
                "spec.clusterIPs[0]: Invalid value: []string{\"10.96.0.30\"}: may not change once set"
            ]
        );
        let dual = svc(&["10.96.0.10", "fd00::10"], "PreferDualStack");
        assert_eq!(
            messages(&service(
                &svc(&["10.96.0.10"], "PreferDualStack"),
                Some(&dual)
            )),
            [
                "spec.ipFamilyPolicy: Invalid value: \"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary clusterIP"
            ]
        );
        assert!(service(&single, Some(&dual)).is_empty());
        let mut v4 = single.clone();
        v4["spec"]["ipFamilies"] = json!(["IPv4"]);
        let mut v6 = v4.clone();
        v6["spec"]["ipFamilies"] = json!(["IPv6"]);
        assert_eq!(
            messages(&service(&v6, Some(&v4))),
            [
                "spec.ipFamilies[0]: Invalid value: []core.IPFamily{\"IPv6\"}: may not change once set"
            ]
        );
        let mut dual_families = dual.clone();
        dual_families["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
        let mut released = svc(&["10.96.0.10"], "PreferDualStack");
        released["spec"]["ipFamilies"] = json!(["IPv4"]);
        assert_eq!(
            messages(&service(&released, Some(&dual_families))),
            [
                "spec.ipFamilyPolicy: Invalid value: \"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary clusterIP",
                "spec.ipFamilyPolicy: Invalid value: \"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary ipFamily",
            ]
        );
        let lb = |class: &str| {
            json!({"spec": {"type": "LoadBalancer", "loadBalancerClass": class, "clusterIP": "10.96.0.10",
                "clusterIPs": ["10.96.0.10"], "ports": [{"port": 80, "protocol": "TCP"}]}})
        };
        assert_eq!(
            messages(&service(&lb("b"), Some(&lb("a")))),
            ["spec.loadBalancerClass: Invalid value: \"b\": may not change once set"]
        );
    }

    #[test]
    fn probes_and_lifecycle_handlers_are_checked_as_kube_apiserver_checks_them() {
        let pod_with = |container: Value| {
            let mut c = json!({"name": "c", "image": "x"});
            c.as_object_mut()
                .unwrap()
                .extend(container.as_object().unwrap().clone());
            json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "containers": [c]}})
        };
        let check = |container: Value| messages(&super::pod(&pod_with(container), None));
        let probe = |extra: Value| {
            let mut p = json!({"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3});
            p.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            p
        };
        assert!(
            check(json!({"livenessProbe": probe(json!({"exec": {"command": ["true"]}}))}))
                .is_empty()
        );
        assert_eq!(
            check(json!({"livenessProbe": probe(json!({}))})),
            ["spec.containers[0].livenessProbe: Required value: must specify a handler type"]
        );
        assert_eq!(
            check(
                json!({"readinessProbe": probe(json!({"exec": {"command": []}, "tcpSocket": {"port": 80}}))})
            ),
            [
                "spec.containers[0].readinessProbe.exec.command: Required value",
                "spec.containers[0].readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
            ]
        );
        assert_eq!(
            check(
                json!({"startupProbe": probe(json!({"httpGet": {"path": "/", "scheme": "FTP", "port": "8080",
                "httpHeaders": [{"name": "X_Bad", "value": "1"}]}, "successThreshold": -1, "initialDelaySeconds": -2}))})
            ),
            [
                "spec.containers[0].startupProbe.httpGet.port: Invalid value: \"8080\": must contain at least one letter (a-z)",
                "spec.containers[0].startupProbe.httpGet.scheme: Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\"",
                "spec.containers[0].startupProbe.httpGet.httpHeaders: Invalid value: \"X_Bad\": a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
                "spec.containers[0].startupProbe.initialDelaySeconds: Invalid value: -2: must be greater than or equal to 0",
                "spec.containers[0].startupProbe.successThreshold: Invalid value: -1: must be greater than or equal to 0",
                "spec.containers[0].startupProbe.successThreshold: Invalid value: -1: must be 1",
            ]
        );
        assert_eq!(
            check(
                json!({"livenessProbe": probe(json!({"grpc": {"port": 70000}, "successThreshold": 2}))})
            ),
            [
                "spec.containers[0].livenessProbe.grpc.port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
            ]
        );
        assert_eq!(
            check(
                json!({"readinessProbe": probe(json!({"tcpSocket": {"port": 0}, "terminationGracePeriodSeconds": 0}))})
            ),
            [
                "spec.containers[0].readinessProbe.tcpSocket.port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0",
                "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 0: must not be set for readinessProbes",
            ]
        );
        assert_eq!(
            check(json!({"lifecycle": {"postStart": {}, "preStop": {"sleep": {"seconds": 31}}}})),
            [
                "spec.containers[0].lifecycle.postStart: Required value: must specify a handler type",
                "spec.containers[0].lifecycle.preStop.sleep: Invalid value: 31: must be non-negative and less than terminationGracePeriodSeconds (30)",
            ]
        );
        assert!(check(json!({"lifecycle": {"preStop": {"sleep": {"seconds": 0}}}})).is_empty());
        // Init containers: only sidecars (restartPolicy Always) have probes and hooks.
        let init = |restart: Option<&str>| {
            let mut c = json!({"name": "i", "image": "x", "livenessProbe": probe(json!({})), "lifecycle": {"preStop": {"exec": {"command": ["x"]}}}});
            if let Some(r) = restart {
                c["restartPolicy"] = json!(r);
            }
            json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "c", "image": "x"}], "initContainers": [c]}})
        };
        assert_eq!(
            messages(&super::pod(&init(None), None)),
            [
                "spec.initContainers[0].lifecycle: Forbidden: may not be set for init containers without restartPolicy=Always",
                "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
            ]
        );
        assert_eq!(
            messages(&super::pod(&init(Some("Always")), None)),
            ["spec.initContainers[0].livenessProbe: Required value: must specify a handler type"]
        );
        assert_eq!(
            messages(&super::pod(&init(Some("Never")), None))[0],
            "spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
        );
    }

    #[test]
    fn volumes_and_mounts_are_checked_as_kube_apiserver_checks_them() {
        let pod = |volumes: Value, mounts: Value| {
            json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                "volumes": volumes,
                "containers": [{"name": "c", "image": "x", "volumeMounts": mounts}]}})
        };
        let check =
            |volumes: Value, mounts: Value| messages(&super::pod(&pod(volumes, mounts), None));
        assert!(check(
            json!([{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c", "items": [{"key": "a", "path": "a/b"}]}}]),
            json!([{"name": "data", "mountPath": "/data"}, {"name": "cfg", "mountPath": "/cfg", "subPath": "a"}])
        )
        .is_empty());
        assert_eq!(
            check(
                json!([{"name": "Data", "emptyDir": {}}, {"name": "two", "emptyDir": {}, "hostPath": {"path": "/x"}, "downwardAPI": {}},
                    {"name": "two", "emptyDir": {}}]),
                json!([])
            ),
            [
                "spec.volumes[0].name: Invalid value: \"Data\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.volumes[1].hostPath: Forbidden: may not specify more than 1 volume type",
                "spec.volumes[1].downwarAPI: Forbidden: may not specify more than 1 volume type",
            ]
        );
        assert_eq!(
            check(
                json!([{"name": "s", "secret": {"defaultMode": 1000, "items": [{"key": "", "path": "/abs"}, {"key": "k", "path": "..data", "mode": -1}]}},
                    {"name": "h", "hostPath": {"path": "/a/../b", "type": "Dir"}},
                    {"name": "p", "persistentVolumeClaim": {"claimName": ""}},
                    {"name": "n", "nfs": {"server": "", "path": "rel"}}]),
                json!([])
            ),
            [
                "spec.volumes[0].secret.secretName: Required value",
                "spec.volumes[0].secret.defaultMode: Invalid value: 1000: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[0].secret.items[0].key: Required value",
                "spec.volumes[0].secret.items[0].path: Invalid value: \"/abs\": must be a relative path",
                "spec.volumes[0].secret.items[1].path: Invalid value: \"..data\": must not start with '..'",
                "spec.volumes[0].secret.items[1].mode: Invalid value: -1: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[1].hostPath.path: Invalid value: \"/a/../b\": must not contain '..'",
                "spec.volumes[1].hostPath.type: Unsupported value: \"Dir\": supported values: \"\", \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\"",
                "spec.volumes[2].persistentVolumeClaim.claimName: Required value",
                "spec.volumes[3].nfs.server: Required value",
                "spec.volumes[3].nfs.path: Invalid value: \"rel\": must be an absolute path",
            ]
        );
        assert_eq!(
            check(
                json!([{"name": "data", "emptyDir": {}}]),
                json!([{"name": "", "mountPath": "/a"}, {"name": "data", "mountPath": "/a", "subPath": "../x", "mountPropagation": "Bidirectional"},
                    {"name": "logs", "mountPath": "/b", "readOnly": false, "recursiveReadOnly": "Enabled"}])
            ),
            [
                "spec.containers[0].volumeMounts[0].name: Required value",
                "spec.containers[0].volumeMounts[0].name: Not found: \"\"",
                "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/a\": must be unique",
                "spec.containers[0].volumeMounts.subPath: Invalid value: \"../x\": must not contain '..'",
                "spec.containers[0].volumeMounts.mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers",
                "spec.containers[0].volumeMounts[2].name: Not found: \"logs\"",
                "spec.containers[0].volumeMounts.recursiveReadOnly: Forbidden: may only be specified when readOnly is true",
            ]
        );
        // A volume with errors is not there for mounts.
        assert_eq!(
            check(
                json!([{"name": "cfg", "configMap": {}}]),
                json!([{"name": "cfg", "mountPath": "/cfg"}])
            ),
            [
                "spec.volumes[0].configMap.name: Required value",
                "spec.containers[0].volumeMounts[0].name: Not found: \"cfg\"",
            ]
        );
    }

    #[test]
    fn affinity_and_tolerations_are_checked_as_kube_apiserver_checks_them() {
        let pod = |extra: Value| {
            let mut p = json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "c", "image": "x"}]}});
            p["spec"]
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            messages(&super::pod(&p, None))
        };
        const NA: &str = "spec.affinity.nodeAffinity";
        assert!(pod(json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}},
            "tolerations": [{"operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 5}]}))
        .is_empty());
        assert_eq!(
            pod(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}})
            ),
            [format!(
                "{NA}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: Required value: must have at least one node selector term"
            )]
        );
        assert_eq!(
            pod(json!({"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                    "matchExpressions": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "Exists", "values": ["x"]},
                        {"key": "c", "operator": "Gt", "values": ["1", "2"]}, {"key": "d", "operator": "Foo"}, {"key": "e", "operator": "In", "values": ["a b"]}],
                    "matchFields": [{"key": "spec.nodeName", "operator": "In", "values": ["a", "b"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {"matchExpressions": [{"key": "f", "operator": "In", "values": ["a b"]}]}}]}}})),
            [
                format!(
                    "{NA}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
                ),
                format!(
                    "{NA}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                ),
                format!(
                    "{NA}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[2].values: Required value: must be specified single value when `operator` is 'Lt' or 'Gt'"
                ),
                format!(
                    "{NA}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[3].operator: Invalid value: \"Foo\": not a valid selector operator"
                ),
                format!(
                    "{NA}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[4].values[0]: Invalid value: \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                ),
                format!(
                    "{NA}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values: Required value: must be only one value when `operator` is 'In' or 'NotIn' for node field selector"
                ),
                format!(
                    "{NA}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key: Invalid value: \"spec.nodeName\": not a valid field selector key"
                ),
                format!(
                    "{NA}.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0: must be in the range 1-100"
                ),
            ]
        );
        const PA: &str = "spec.affinity.podAntiAffinity";
        assert_eq!(
            pod(json!({"affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "a b"},
                    "matchExpressions": [{"key": "x", "operator": "Gt", "values": ["1"]}]}, "namespaces": ["Bad"], "topologyKey": ""}],
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}})),
            [
                format!(
                    "{PA}.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchLabels: Invalid value: \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                ),
                format!(
                    "{PA}.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator: Invalid value: \"Gt\": not a valid selector operator"
                ),
                format!(
                    "{PA}.requiredDuringSchedulingIgnoredDuringExecution[0].namespace: Invalid value: \"Bad\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                ),
                format!(
                    "{PA}.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Required value: can not be empty"
                ),
                format!(
                    "{PA}.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Invalid value: \"\": name part must be non-empty"
                ),
                format!(
                    "{PA}.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Invalid value: \"\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
                ),
                format!(
                    "{PA}.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 101: must be in the range 1-100"
                ),
            ]
        );
        assert_eq!(
            pod(json!({"tolerations": [
                {"operator": "Equal", "value": "v"},
                {"key": "k", "operator": "Exists", "value": "v", "effect": "NoSchedule", "tolerationSeconds": 5},
                {"key": "k", "operator": "In", "effect": "Sometimes"}]})),
            [
                "spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
                "spec.tolerations[1].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set",
                "spec.tolerations[1].operator: Invalid value: core.Toleration{Key:\"k\", Operator:\"Exists\", Value:\"v\", Effect:\"NoSchedule\", TolerationSeconds:(*int64)(5)}: value must be empty when `operator` is 'Exists'",
                "spec.tolerations[2].operator: Unsupported value: \"In\": supported values: \"Equal\", \"Exists\"",
                "spec.tolerations[2].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
            ]
        );
        assert_eq!(
            pod(json!({"nodeSelector": {"disk": "a b"}})),
            [
                "spec.nodeSelector: Invalid value: \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ]
        );
    }

    #[test]
    fn env_policies_and_dns_are_checked_as_kube_apiserver_checks_them() {
        let pod = |container: Value, extra: Value| {
            let mut c = json!({"name": "c", "image": "x"});
            c.as_object_mut()
                .unwrap()
                .extend(container.as_object().unwrap().clone());
            let mut p = json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "containers": [c]}});
            p["spec"]
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            messages(&super::pod(&p, None))
        };
        assert!(
            pod(
                json!({"env": [{"name": "MY VAR.x-1", "value": "1"},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            "envFrom": [{"prefix": "P_", "configMapRef": {"name": "cm"}}]}),
                json!({})
            )
            .is_empty()
        );
        assert_eq!(
            pod(
                json!({"env": [{"name": ""}, {"name": "A=B"},
                {"name": "C", "value": "x", "valueFrom": {"configMapKeyRef": {"name": "", "key": "a b"}}},
                {"name": "D", "valueFrom": {}}],
                "envFrom": [{"configMapRef": {"name": "cm"}, "secretRef": {"name": "Bad"}}, {}]}),
                json!({})
            ),
            [
                "spec.containers[0].env[0].name: Required value",
                "spec.containers[0].env[1].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
                "spec.containers[0].env[2].valueFrom.configMapKeyRef.name: Invalid value: \"\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.containers[0].env[2].valueFrom.configMapKeyRef.key: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                "spec.containers[0].env[2].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
                "spec.containers[0].env[3].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                "spec.containers[0].envFrom[0].secretRef.name: Invalid value: \"Bad\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.containers[0].envFrom: Invalid value: \"\": may not have more than one field specified at a time",
                "spec.containers[0].envFrom: Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`",
            ]
        );
        assert_eq!(
            pod(
                json!({"imagePullPolicy": "Sometimes", "terminationMessagePolicy": "Never"}),
                json!({"dnsPolicy": "Cluster"})
            ),
            [
                "spec.containers[0].terminationMessagePolicy: Unsupported value: \"Never\": supported values: \"File\", \"FallbackToLogsOnError\"",
                "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
                "spec.dnsPolicy: Unsupported value: \"Cluster\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
            ]
        );
        assert_eq!(
            pod(json!({}), json!({"dnsPolicy": "None"})),
            ["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"]
        );
        assert_eq!(
            pod(
                json!({}),
                json!({"dnsPolicy": "None", "dnsConfig": {"options": [{"name": ""}]}})
            ),
            [
                "spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver when `dnsPolicy` is None"
            ]
        );
        assert_eq!(
            pod(
                json!({}),
                json!({"dnsConfig": {"nameservers": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"], "options": [{"name": ""}]}})
            ),
            [
                "spec.dnsConfig.nameservers: Invalid value: []string{\"1.1.1.1\", \"1.0.0.1\", \"8.8.8.8\", \"8.8.4.4\"}: must not have more than 3 nameservers",
                "spec.dnsConfig.options[0]: Required value: must not be empty",
            ]
        );
        assert_eq!(
            pod(
                json!({}),
                json!({"dnsConfig": {"nameservers": ["10.0.0.1", "fd00::1", "dns.example"],
                "searches": [".", "svc.cluster.local.", "_tcp.example.com", "Bad.example"]}})
            ),
            [
                "spec.dnsConfig.nameservers[2]: Invalid value: \"dns.example\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "spec.dnsConfig.searches[3]: Invalid value: \"Bad.example\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '_', '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ]
        );
    }

    #[test]
    fn container_requests_stay_within_limits() {
        let template = |resources: Value| {
            json!({"template": {"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "c", "image": "x", "resources": resources}]}}})
        };
        let check = |resources: Value| messages(&pod_template(&template(resources), None));
        assert!(
            check(
                json!({"limits": {"cpu": "1", "memory": "1Gi", "example.com/gpu": 1},
            "requests": {"cpu": "500m", "memory": "1024Mi", "example.com/gpu": "1"}})
            )
            .is_empty()
        );
        assert_eq!(
            check(json!({"limits": {"cpu": "1000m"}, "requests": {"cpu": 2}})),
            [
                "template.spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"
            ]
        );
        assert_eq!(
            check(
                json!({"limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"}, "requests": {"hugepages-2Mi": "2Mi", "example.com/gpu": "1"}})
            ),
            // Go walks the map in random order; konverge in key order.
            [
                "template.spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
                "template.spec.containers[0].resources.requests: Invalid value: \"2Mi\": must be equal to hugepages-2Mi limit of 4Mi",
            ]
        );
        assert_eq!(
            check(json!({"limits": {"memory": "-1Gi"}})),
            [
                "template.spec.containers[0].resources.limits[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0"
            ]
        );
        assert_eq!(
            check(
                json!({"limits": {"cpus": "1", "pods": "1", "example.com/a b": "1", "requests.example.com/x": "1", "hugepages-2Mi": "2Mi"}})
            ),
            [
                "template.spec.containers[0].resources.limits[cpus]: Invalid value: \"cpus\": must be a standard resource type or fully qualified",
                "template.spec.containers[0].resources.limits[cpus]: Invalid value: \"cpus\": must be a standard resource for containers",
                "template.spec.containers[0].resources.limits[example.com/a b]: Invalid value: \"example.com/a b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                "template.spec.containers[0].resources.limits[example.com/a b]: Invalid value: \"example.com/a b\": doesn't follow extended resource name standard",
                "template.spec.containers[0].resources.limits[pods]: Invalid value: \"pods\": must be a standard resource for containers",
                "template.spec.containers[0].resources.limits[requests.example.com/x]: Invalid value: \"requests.example.com/x\": doesn't follow extended resource name standard",
                "template.spec.containers[0].resources: Forbidden: HugePages require cpu or memory",
            ]
        );
    }

    #[test]
    fn pod_spec_names_ports_and_gates_are_checked_as_kube_apiserver_checks_them() {
        let pod = |extra: Value| {
            let mut p = json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]},
                    {"name": "d", "image": " y", "ports": [{"containerPort": 81, "hostPort": 8080, "protocol": "TCP"}]}],
                "initContainers": [{"name": "i", "image": "x", "ports": [{"containerPort": 1, "hostPort": 9, "protocol": "UDP"},
                    {"containerPort": 2, "hostPort": 9, "protocol": "UDP"}]}]}});
            p["spec"]
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            messages(&super::pod(&p, None))
        };
        assert_eq!(
            pod(
                json!({"hostNetwork": true, "hostname": "Host", "activeDeadlineSeconds": 0, "nodeName": "n_1",
                "schedulingGates": [{"name": "a"}, {"name": "a"}], "preemptionPolicy": "Always"})
            ),
            [
                "spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//8080\"",
                "spec.initContainers[0].ports[1].hostPort: Duplicate value: \"UDP//9\"",
                "spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true",
                "spec.containers[1].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true",
                "spec.schedulingGates[1]: Duplicate value: \"a\"",
                "spec.nodeName: Invalid value: \"n_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
                "spec.hostname: Invalid value: \"Host\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.preemptionPolicy: Unsupported value: \"Always\": supported values: \"PreemptLowerPriority\", \"Never\"",
                "spec.containers[1].image: Invalid value: \" y\": must not have leading or trailing whitespace",
            ]
        );
    }

    #[test]
    fn security_contexts_are_checked_as_kube_apiserver_checks_them() {
        let pod = json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "hostPID": true, "shareProcessNamespace": true,
            "securityContext": {"runAsUser": -1, "supplementalGroups": [1, 4294967296i64], "fsGroupChangePolicy": "Never",
                "seccompProfile": {"type": "Localhost"}},
            "containers": [{"name": "c", "image": "x", "securityContext": {"runAsGroup": -2,
                "seccompProfile": {"type": "Custom"}}}]}});
        assert_eq!(
            messages(&super::pod(&pod, None)),
            [
                "spec.containers[0].securityContext.runAsGroup: Invalid value: -2: must be between 0 and 2147483647, inclusive",
                "spec.containers[0].securityContext.seccompProfile.type: Unsupported value: \"Custom\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"",
                "spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive",
                "spec.securityContext.supplementalGroups[1]: Invalid value: 4294967296: must be between 0 and 2147483647, inclusive",
                "spec.securityContext.shareProcessNamespace: Invalid value: true: ShareProcessNamespace and HostPID cannot both be enabled",
                "spec.securityContext.fsGroupChangePolicy: Unsupported value: \"Never\": supported values: \"Always\", \"OnRootMismatch\"",
                "spec.securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost",
            ]
        );
    }

    #[test]
    fn downward_api_and_projected_volumes_are_checked_as_kube_apiserver_checks_them() {
        let pod = |volumes: Value, env: Value| {
            let p = json!({"spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                "volumes": volumes, "containers": [{"name": "c", "image": "x", "env": env}]}});
            messages(&super::pod(&p, None))
        };
        // What the service account admission projects is fine.
        assert!(pod(json!([{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]),
            json!([{"name": "N", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels['app']"}}}])).is_empty());
        assert_eq!(
            pod(
                json!([{"name": "d", "downwardAPI": {"items": [
                {"path": "", "fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
                {"path": "a", "fieldRef": {"apiVersion": "v1", "fieldPath": "bogus"}, "resourceFieldRef": {"resource": "limits.cpu"}},
                {"path": "b"}, {"path": "c", "resourceFieldRef": {"resource": "limits.cpu"}, "mode": 512}]}}]),
                json!([])
            ),
            [
                "spec.volumes[0].downwardAPI.path: Required value",
                "spec.volumes[0].downwardAPI.fieldRef.fieldPath: Unsupported value: \"spec.nodeName\": supported values: \"metadata.annotations\", \"metadata.labels\", \"metadata.name\", \"metadata.namespace\", \"metadata.uid\"",
                "spec.volumes[0].downwardAPI.fieldRef.fieldPath: Invalid value: \"bogus\": error converting fieldPath: field label not supported: bogus",
                "spec.volumes[0].downwardAPI: Invalid value: \"resource\": fieldRef and resourceFieldRef can not be specified simultaneously",
                "spec.volumes[0].downwardAPI: Required value: one of fieldRef and resourceFieldRef is required",
                "spec.volumes[0].downwardAPI.resourceFieldRef.containerName: Required value",
                "spec.volumes[0].downwardAPI.mode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive",
            ]
        );
        assert_eq!(
            pod(
                json!([{"name": "p", "projected": {"sources": [
                {"secret": {"name": "s", "items": [{"key": "a", "path": "x"}]}, "configMap": {"name": "c", "items": [{"key": "b", "path": "x"}]}},
                {"serviceAccountToken": {"expirationSeconds": 60, "path": ""}}]}}]),
                json!([])
            ),
            [
                "spec.volumes[0].projected: Invalid value: \"c\": conflicting duplicate paths",
                "spec.volumes[0].projected.sources[0]: Forbidden: may not specify more than 1 volume type per source",
                "spec.volumes[0].projected.sources[1].serviceAccountToken.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
                "spec.volumes[0].projected.path: Required value",
            ]
        );
        assert_eq!(
            pod(
                json!([]),
                json!([{"name": "A", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.phase"}}},
                {"name": "B", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec['x']"}}},
                {"name": "C", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}},
                {"name": "D", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1000m"}}},
                {"name": "E", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory", "divisor": "2Mi"}}},
                {"name": "F", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.annotations['Bad Key']"}}}])
            ),
            [
                "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: \"status.phase\": supported values: \"metadata.name\", \"metadata.namespace\", \"metadata.uid\", \"spec.nodeName\", \"spec.serviceAccountName\", \"status.hostIP\", \"status.hostIPs\", \"status.podIP\", \"status.podIPs\"",
                "spec.containers[0].env[1].valueFrom.fieldRef.fieldPath: Invalid value: \"spec['x']\": error converting fieldPath: field label does not support subscript: spec['x']",
                "spec.containers[0].env[2].valueFrom.resourceFieldRef.resource: Unsupported value: \"limits.gpu\": supported values: \"limits.cpu\", \"limits.ephemeral-storage\", \"limits.memory\", \"requests.cpu\", \"requests.ephemeral-storage\", \"requests.memory\"",
                "spec.containers[0].env[4].valueFrom.resourceFieldRef.divisor: Invalid value: \"requests.memory\": only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource",
                "spec.containers[0].env[5].valueFrom.fieldRef: Invalid value: \"Bad Key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ]
        );
    }

    #[test]
    fn cron_time_zones_are_iana_names() {
        let cron = |schedule: &str, zone: Option<&str>| {
            let mut obj = json!({"metadata": {"name": "c"}, "spec": {"schedule": schedule,
                "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x"}]}}}}}});
            if let Some(zone) = zone {
                obj["spec"]["timeZone"] = json!(zone);
            }
            obj
        };
        let zone_messages = |zone: &str| -> Vec<String> {
            messages(&cron_job(&cron("0 * * * *", Some(zone)), None))
                .into_iter()
                .filter(|m| m.starts_with("spec.timeZone"))
                .collect()
        };
        assert!(zone_messages("Europe/Berlin").is_empty());
        assert!(zone_messages("UTC").is_empty());
        assert_eq!(
            zone_messages("Local"),
            [
                "spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"
            ]
        );
        assert_eq!(
            zone_messages("../etc/passwd"),
            ["spec.timeZone: Invalid value: \"../etc/passwd\": unknown time zone ../etc/passwd"]
        );
        if !jiff::tz::db().is_definitively_empty() {
            assert_eq!(
                zone_messages("Amerrica/New_York"),
                [
                    "spec.timeZone: Invalid value: \"Amerrica/New_York\": unknown time zone Amerrica/New_York"
                ]
            );
        }
        // TZ in the schedule: refused on create, kept on update of a CronJob that had it.
        let tz = cron("TZ=UTC 0 * * * *", None);
        assert_eq!(
            messages(&cron_job(&tz, None)),
            [
                "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
            ]
        );
        assert!(messages(&cron_job(&tz, Some(&tz))).is_empty());
        let both = cron("TZ=UTC 0 * * * *", Some("UTC"));
        assert_eq!(
            messages(&cron_job(&both, Some(&tz))),
            [
                "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use both timeZone field and TZ or CRON_TZ in schedule"
            ]
        );
    }

    #[test]
    fn cron_schedules_parse_as_robfig_cron_parses_them() {
        for ok in [
            "*/5 * * * *",
            "0 0 * * MON-FRI",
            "@hourly",
            "15,45 8-18 1 JAN,jul *",
        ] {
            assert_eq!(cron_schedule(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            cron_schedule("bad").unwrap_err(),
            "expected exactly 5 fields, found 1: [bad]"
        );
        assert_eq!(
            cron_schedule("61 * * * *").unwrap_err(),
            "end of range (61) above maximum (59): 61"
        );
        assert_eq!(
            cron_schedule("x * * * *").unwrap_err(),
            r#"failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax"#
        );
    }
}
