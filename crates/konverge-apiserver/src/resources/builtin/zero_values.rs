//! The fields Go always writes: kube-apiserver encodes built-in objects from Go structs, and
//! `encoding/json` writes a struct field even when it is empty (`omitempty` does nothing for
//! structs) and a field without `omitempty` even at its zero value. So a Service always has
//! `"status": {"loadBalancer": {}}`, a Deployment `"status": {}`, a StatefulSet
//! `"status": {"replicas": 0, "availableReplicas": 0}`, a ClusterRole without rules
//! `"rules": null`. Clients read them (`resp.status.load_balancer`); konverge's objects carry
//! them too.
//!
//! The data (`zero_values.json`) is, per kind and version, what Go writes for an object
//! whose optional parts are all empty, read from the Kubernetes 1.33 API types.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use crate::resources::ResourceType;

/// Every kind's zero values, by `apiVersion/kind` (`apps/v1/Deployment`, `v1/Service`).
fn zero_values() -> &'static HashMap<String, Value> {
    static ZERO: OnceLock<HashMap<String, Value>> = OnceLock::new();
    ZERO.get_or_init(|| serde_json::from_str(include_str!("zero_values.json")).unwrap_or_default())
}

/// Adds to `obj` (an object of `rt`, in `rt`'s version) the fields Go would write that it
/// lacks; a `null` where Go has a struct becomes that struct. Nothing it has is changed.
pub(crate) fn fill(rt: &ResourceType, obj: &mut Value) {
    if rt.custom.is_some() {
        return;
    }
    let key = format!("{}/{}", rt.api_version(), rt.kind);
    if let Some(zero) = zero_values().get(&key) {
        merge_missing(obj, zero);
    }
}

fn merge_missing(obj: &mut Value, zero: &Value) {
    let (Some(target), Value::Object(fields)) = (obj.as_object_mut(), zero) else {
        return;
    };
    for (name, value) in fields {
        match target.get_mut(name) {
            None => {
                target.insert(name.clone(), value.clone());
            }
            Some(existing @ Value::Null) if value.is_object() => *existing = value.clone(),
            Some(existing) if existing.is_object() && value.is_object() => {
                merge_missing(existing, value);
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_go_writes_is_added_and_nothing_is_changed() {
        let mut zero = json!({"spec": {}, "status": {"loadBalancer": {}, "n": 0}, "rules": null});
        let mut obj = json!({"spec": {"type": "ClusterIP"}, "status": null});
        merge_missing(&mut obj, &zero);
        assert_eq!(
            obj,
            json!({"spec": {"type": "ClusterIP"}, "status": {"loadBalancer": {}, "n": 0}, "rules": null})
        );
        let mut kept = json!({"status": {"n": 3, "loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}, "rules": []});
        let before = kept.clone();
        merge_missing(&mut kept, &zero);
        assert_eq!(kept["status"], before["status"]);
        assert_eq!(kept["rules"], json!([]));
        zero = Value::Null;
        merge_missing(&mut kept, &zero);
    }

    #[test]
    fn every_kind_has_its_zero_values() {
        assert_eq!(
            zero_values()["v1/Service"],
            json!({"spec": {}, "status": {"loadBalancer": {}}})
        );
        assert!(zero_values().contains_key("apps/v1/StatefulSet"));
    }
}
