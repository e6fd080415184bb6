//! What is special about some built-in kinds on write: kube-apiserver's defaults and
//! validation for the kinds operators write, and their initial state on create.

use serde_json::{Value, json};

use crate::resources::ResourceType;
use crate::resources::subresource::{current_with, keep_managed_fields};

/// The label kube-apiserver puts on every Namespace: its own name, so that namespace
/// selectors can match one namespace by name.
pub(crate) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Every Namespace carries [`NAMESPACE_NAME_LABEL`] with its name, whatever the client sent
/// (set on create and update, and again after a mutating webhook). A namespace created with
/// `generateName` has no name yet here: [`prepare_namespace`] labels it once it has.
pub(super) fn default_namespace(obj: &mut Value) {
    let Some(name) = obj.pointer("/metadata/name").and_then(Value::as_str) else {
        return;
    };
    if name.is_empty() {
        return;
    }
    let name = json!(name);
    let Some(metadata) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if !metadata.get("labels").is_some_and(Value::is_object) {
        metadata.insert("labels".into(), json!({}));
    }
    if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
        labels.insert(NAMESPACE_NAME_LABEL.into(), name);
    }
}

/// Namespaces start Active, carry the namespace controller's finalizer and their name label.
pub(super) fn prepare_namespace(obj: &mut Value) {
    default_namespace(obj);
    if obj.pointer("/status/phase").is_none() {
        obj["status"] = json!({"phase": "Active"});
    }
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let finalizers = obj["spec"]
        .as_object_mut()
        .map(|spec| spec.entry("finalizers").or_insert_with(|| json!([])));
    if let Some(Value::Array(list)) = finalizers
        && !list.iter().any(|f| f == "kubernetes")
    {
        list.push(json!("kubernetes"));
    }
}

/// PersistentVolumes and claims start Pending.
pub(super) fn prepare_pending(obj: &mut Value) {
    obj["status"] = json!({"phase": "Pending"});
}

/// Secrets without a type are Opaque; `stringData` is written into `data` (base64), where
/// it wins over a key of the same name, and is not kept.
pub(super) fn default_secret(obj: &mut Value) {
    use base64::Engine;
    if obj.get("type").is_none_or(Value::is_null) {
        obj["type"] = json!("Opaque");
    }
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    if !map.get("data").is_some_and(Value::is_object) {
        map.insert("data".into(), json!({}));
    }
    if let Some(data) = map.get_mut("data").and_then(Value::as_object_mut) {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            data.insert(
                key,
                json!(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

/// Manually made PersistentVolumes are retained when released; volumes are filesystems.
pub(super) fn default_persistent_volume(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("persistentVolumeReclaimPolicy")
            .or_insert_with(|| json!("Retain"));
        spec.entry("volumeMode")
            .or_insert_with(|| json!("Filesystem"));
    }
}

/// Claims are for filesystems unless they say otherwise.
pub(super) fn default_persistent_volume_claim(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("volumeMode")
            .or_insert_with(|| json!("Filesystem"));
    }
}

/// A signing request records who asked (the only identity the server knows is the admin's)
/// and starts with no conditions.
pub(super) fn prepare_certificate_signing_request(obj: &mut Value) {
    obj["spec"]["username"] = json!(crate::ADMIN_USER);
    obj["spec"]["groups"] = json!(crate::ADMIN_GROUPS);
    if let Some(spec) = obj["spec"].as_object_mut() {
        spec.remove("uid");
        spec.remove("extra");
    }
    obj["status"] = json!({});
}

pub(super) fn default_service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("type").or_insert_with(|| json!("ClusterIP"));
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    let kind = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind != "ExternalName" {
        spec.entry("internalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        spec.entry("externalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        spec.entry("allocateLoadBalancerNodePorts")
            .or_insert_with(|| json!(true));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            let Some(port) = port.as_object_mut() else {
                continue;
            };
            port.entry("protocol").or_insert_with(|| json!("TCP"));
            let unset = match port.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            };
            if unset && let Some(number) = port.get("port").cloned() {
                port.insert("targetPort".into(), number);
            }
        }
    }
}

/// A local APIService's status: always available.
pub(super) fn prepare_api_service(obj: &mut Value) {
    if obj.pointer("/spec/service").is_none_or(Value::is_null) {
        obj["status"] = json!({"conditions": [{
            "type": "Available",
            "status": "True",
            "lastTransitionTime": crate::resources::meta::now(),
            "reason": "Local",
            "message": "Local APIServices are always available",
        }]});
    }
}

/// `namespaces/finalize` changes the namespace's `spec.finalizers` and nothing else.
pub(super) fn namespace_finalize(
    _: &ResourceType,
    current: &Value,
    new: Value,
) -> Result<Value, String> {
    let mut merged = current.clone();
    merged["spec"]["finalizers"] = new
        .pointer("/spec/finalizers")
        .cloned()
        .unwrap_or_else(|| json!([]));
    Ok(merged)
}

/// `pods/ephemeralcontainers` changes the pod's ephemeral containers only.
pub(super) fn pod_ephemeral_containers(
    _: &ResourceType,
    current: &Value,
    new: Value,
) -> Result<Value, String> {
    Ok(current_with(
        current,
        &new,
        "spec",
        "ephemeralContainers",
        json!([]),
    ))
}

/// `pods/resize` changes the containers' resources and resize policies only.
pub(super) fn pod_resize(_: &ResourceType, current: &Value, new: Value) -> Result<Value, String> {
    let mut merged = current.clone();
    for list in ["containers", "initContainers"] {
        let wanted = new
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array);
        let (Some(wanted), Some(have)) = (
            wanted,
            merged
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(Value::as_array_mut),
        ) else {
            continue;
        };
        for container in have.iter_mut() {
            let Some(update) = wanted.iter().find(|c| c["name"] == container["name"]) else {
                continue;
            };
            for field in ["resources", "resizePolicy"] {
                match update.get(field) {
                    Some(v) => container[field] = v.clone(),
                    None => {
                        if let Some(c) = container.as_object_mut() {
                            c.remove(field);
                        }
                    }
                }
            }
        }
    }
    keep_managed_fields(&mut merged, &new);
    Ok(merged)
}

/// `certificatesigningrequests/approval` changes the request's conditions, not its spec or
/// the rest of its status; the metadata is the request's, as kube's approval strategy keeps
/// it.
pub(super) fn certificate_approval(
    _: &ResourceType,
    current: &Value,
    new: Value,
) -> Result<Value, String> {
    let conditions = new.pointer("/status/conditions").cloned();
    let mut merged = new;
    match current.get("spec") {
        Some(spec) => merged["spec"] = spec.clone(),
        None => {
            if let Some(o) = merged.as_object_mut() {
                o.remove("spec");
            }
        }
    }
    merged["status"] = current.get("status").cloned().unwrap_or_else(|| json!({}));
    match conditions {
        Some(conditions) if !conditions.is_null() => {
            merged["status"]["conditions"] = conditions;
        }
        _ => {
            if let Some(status) = merged["status"].as_object_mut() {
                status.remove("conditions");
            }
        }
    }
    Ok(merged)
}
