//! Storage: what updates of PersistentVolumeClaims, PersistentVolumes, StorageClasses and
//! CSIDrivers may change.

use serde_json::{Value, json};

use super::*;
use crate::error::Cause;

const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// A claim's spec is fixed at creation, but for its volume name (set once, by the binder),
/// the storage class of a claim that had none, and a bound claim's size.
pub(crate) fn persistent_volume_claim(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(old) = old else { return causes };
    let mut new_spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut old_spec = old.get("spec").cloned().unwrap_or_else(|| json!({}));
    if old_spec
        .get("volumeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        old_spec["volumeName"] = new_spec.get("volumeName").cloned().unwrap_or(Value::Null);
    }
    let old_class = old
        .pointer("/spec/storageClassName")
        .and_then(Value::as_str);
    let new_class = obj
        .pointer("/spec/storageClassName")
        .and_then(Value::as_str);
    let (old_beta, new_beta) = (
        annotation(old, BETA_STORAGE_CLASS),
        annotation(obj, BETA_STORAGE_CLASS),
    );
    // The beta annotation may become the field, once; a claim without a class may get one
    // (the retroactive default class), unless its annotation names another.
    let from_annotation = old_beta.is_some()
        && old_class.is_none()
        && new_class.is_some()
        && new_class == new_beta
        && new_beta == old_beta;
    if from_annotation {
        new_spec["storageClassName"] = Value::Null;
    } else {
        if old_beta != new_beta {
            causes.push(Cause::invalid(
                format!("metadata.annotations.{BETA_STORAGE_CLASS}"),
                &json!(new_beta.unwrap_or_default()),
                "field is immutable",
            ));
        }
        if old_class.is_none()
            && new_class.is_some_and(|c| !c.is_empty())
            && old_beta.is_none_or(|b| Some(b) == new_class)
        {
            new_spec["storageClassName"] = Value::Null;
        }
    }
    let bound = obj.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    if bound {
        if let Some(requests) = new_spec
            .pointer_mut("/resources/requests")
            .and_then(Value::as_object_mut)
        {
            match old.pointer("/spec/resources/requests/storage") {
                Some(size) => requests.insert("storage".into(), size.clone()),
                None => requests.remove("storage"),
            };
        }
        new_spec["volumeAttributesClassName"] = old_spec
            .get("volumeAttributesClassName")
            .cloned()
            .unwrap_or(Value::Null);
    }
    if !same(Some(&new_spec), Some(&old_spec)) {
        causes.push(forbidden(
            "spec",
            &format!(
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n{}",
                spec_diff("core.PersistentVolumeClaimSpec", &old_spec, &new_spec)
            ),
        ));
    }
    let size = |o: &Value, at: &str| quantity_value(o.pointer(at)).unwrap_or(0.0);
    let new_size = size(obj, "/spec/resources/requests/storage");
    if new_size < size(old, "/spec/resources/requests/storage")
        && new_size <= size(old, "/status/capacity/storage")
    {
        // RecoverVolumeExpansionFailure (on in 1.33) lets a claim shrink back, down to
        // what its volume has.
        causes.push(forbidden(
            "spec.resources.requests.storage",
            "field can not be less than status.capacity",
        ));
    }
    // kube-apiserver names this field without its `spec.`.
    immutable(
        obj,
        old,
        "/spec/volumeMode",
        "volumeMode",
        go_scalar,
        &mut causes,
    );
    causes
}

/// The fields of a PersistentVolume's spec that are not its source.
const PV_SPEC_FIELDS: &[&str] = &[
    "accessModes",
    "capacity",
    "claimRef",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "mountOptions",
    "volumeMode",
    "nodeAffinity",
    "volumeAttributesClassName",
];

/// Node labels whose GA name may replace the beta one in a volume's node affinity.
const BETA_TO_GA_LABELS: &[(&str, &str)] = &[
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
    ("beta.kubernetes.io/os", "kubernetes.io/os"),
    ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
    (
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
    ),
];

/// A volume's node affinity with its beta label keys renamed to their GA names.
fn ga_labels(affinity: &Value) -> Value {
    match affinity {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let renamed = match (k.as_str(), v.as_str()) {
                        ("key", Some(key)) => BETA_TO_GA_LABELS
                            .iter()
                            .find(|(beta, _)| *beta == key)
                            .map(|(_, ga)| json!(ga)),
                        _ => None,
                    };
                    (k.clone(), renamed.unwrap_or_else(|| ga_labels(v)))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(ga_labels).collect()),
        other => other.clone(),
    }
}

/// A volume keeps its source and mode, and its node affinity once set (but for beta label
/// keys becoming GA ones).
pub(crate) fn persistent_volume(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(old) = old else { return causes };
    let source = |o: &Value| -> Value {
        let mut spec = o.get("spec").cloned().unwrap_or_else(|| json!({}));
        if let Some(s) = spec.as_object_mut() {
            s.retain(|k, _| !PV_SPEC_FIELDS.contains(&k.as_str()));
        }
        spec
    };
    let (mut before, after) = (source(old), source(obj));
    // A CSI volume may gain the secret for expanding it.
    if before.pointer("/csi/controllerExpandSecretRef").is_none()
        && let (Some(csi), Some(secret)) = (
            before.get_mut("csi").and_then(Value::as_object_mut),
            after.pointer("/csi/controllerExpandSecretRef"),
        )
    {
        csi.insert("controllerExpandSecretRef".into(), secret.clone());
    }
    if !same(Some(&before), Some(&after)) {
        causes.push(forbidden(
            "spec.persistentvolumesource",
            &format!(
                "spec.persistentvolumesource is immutable after creation\n{}",
                spec_diff("core.PersistentVolumeSource", &before, &after)
            ),
        ));
    }
    immutable(
        obj,
        old,
        "/spec/volumeMode",
        "volumeMode",
        go_scalar,
        &mut causes,
    );
    if let Some(was) = old.pointer("/spec/nodeAffinity").filter(|a| !a.is_null()) {
        let now = obj.pointer("/spec/nodeAffinity");
        if !same(now, Some(was)) && !same(now, Some(&ga_labels(was))) {
            // Go prints a *core.VolumeNodeAffinity with the address of its selector; the
            // JSON of the new affinity stands in for it.
            causes.push(Cause::invalid(
                "nodeAffinity",
                now.unwrap_or(&Value::Null),
                "field is immutable, except for updating from beta label to GA",
            ));
        }
    }
    causes
}

/// A StorageClass keeps its provisioner, parameters, reclaim policy and binding mode.
pub(crate) fn storage_class(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(old) = old else { return causes };
    for field in ["parameters", "provisioner", "reclaimPolicy"] {
        if !same(obj.get(field), old.get(field)) {
            causes.push(forbidden(
                field,
                &format!("updates to {field} are forbidden."),
            ));
        }
    }
    immutable(
        obj,
        old,
        "/volumeBindingMode",
        "volumeBindingMode",
        go_scalar,
        &mut causes,
    );
    causes
}

/// A CSIDriver keeps whether it attaches volumes and the lifecycles it supports.
pub(crate) fn csi_driver(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(old) = old else { return causes };
    // kube-apiserver misspells this path.
    immutable(
        obj,
        old,
        "/spec/attachRequired",
        "spec.attachedRequired",
        go_scalar,
        &mut causes,
    );
    immutable(
        obj,
        old,
        "/spec/volumeLifecycleModes",
        "spec.volumeLifecycleModes",
        |v| go_strings("storage.VolumeLifecycleMode", v),
        &mut causes,
    );
    causes
}
