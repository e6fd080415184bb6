//! Built-in resources served in a form other than the stored one, converted as
//! kube-apiserver converts them through its internal types:
//!
//! - events.k8s.io/v1 Events are core v1 Events (one storage, two views; the fields are
//!   renamed: `regarding` is `involvedObject`, `note` is `message`, ...).
//! - autoscaling/v1 HorizontalPodAutoscalers are stored as autoscaling/v2. A v1 object carries
//!   the CPU target in `targetCPUUtilizationPercentage`, and the rest of what v2 says in
//!   `autoscaling.alpha.kubernetes.io/*` annotations, so that a v1 client's update keeps it.

use serde_json::{Map, Value, json};

/// events.k8s.io names and their core names.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(obj: &mut Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    for (from, to) in pairs {
        if let Some(value) = map.remove(from) {
            map.insert(to.into(), value);
        }
    }
}

/// An events.k8s.io/v1 Event as the core v1 Event it is stored as.
pub(crate) fn events_to_core(obj: &mut Value) {
    rename(obj, EVENT_FIELDS.into_iter());
    obj["apiVersion"] = json!("v1");
    obj["kind"] = json!("Event");
}

/// A stored core v1 Event as an events.k8s.io/v1 Event.
pub(super) fn events_from_core(obj: &mut Value) {
    rename(obj, EVENT_FIELDS.into_iter().map(|(a, b)| (b, a)));
    obj["apiVersion"] = json!("events.k8s.io/v1");
    obj["kind"] = json!("Event");
}

const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";

fn is_cpu_utilization(metric: &Value, side: &str) -> bool {
    metric["type"] == "Resource"
        && metric["resource"]["name"] == "cpu"
        && metric["resource"][side]["averageUtilization"].is_i64()
}

fn annotations(obj: &mut Value) -> &mut Map<String, Value> {
    let md = crate::resources::meta::metadata_mut(obj);
    let annotations = md
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    annotations.as_object_mut().expect("an object")
}

fn take_annotation(obj: &mut Value, key: &str) -> Option<Value> {
    let md = crate::resources::meta::metadata_mut(obj);
    let annotations = md.get_mut("annotations")?.as_object_mut()?;
    let text = annotations.remove(key)?;
    if annotations.is_empty() {
        md.remove("annotations");
    }
    serde_json::from_str(text.as_str()?).ok()
}

fn put_annotation(obj: &mut Value, key: &str, value: &Value) {
    if let Ok(text) = serde_json::to_string(value) {
        annotations(obj).insert(key.into(), json!(text));
    }
}

/// An autoscaling/v2 HorizontalPodAutoscaler (stored) as autoscaling/v1.
pub(super) fn hpa_to_v1(obj: &mut Value) {
    obj["apiVersion"] = json!("autoscaling/v1");
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let metrics = spec
            .remove("metrics")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        let behavior = spec.remove("behavior");
        let (cpu, other): (Vec<Value>, Vec<Value>) = metrics
            .into_iter()
            .partition(|m| is_cpu_utilization(m, "target"));
        if let Some(cpu) = cpu.first() {
            spec.insert(
                "targetCPUUtilizationPercentage".into(),
                cpu["resource"]["target"]["averageUtilization"].clone(),
            );
        }
        if !other.is_empty() {
            put_annotation(obj, METRICS, &json!(other));
        }
        if let Some(behavior) = behavior.filter(|b| !b.is_null()) {
            put_annotation(obj, BEHAVIOR, &behavior);
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        let current = status
            .remove("currentMetrics")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        let conditions = status.remove("conditions");
        let (cpu, other): (Vec<Value>, Vec<Value>) = current
            .into_iter()
            .partition(|m| is_cpu_utilization(m, "current"));
        if let Some(cpu) = cpu.first() {
            status.insert(
                "currentCPUUtilizationPercentage".into(),
                cpu["resource"]["current"]["averageUtilization"].clone(),
            );
        }
        if !other.is_empty() {
            put_annotation(obj, CURRENT_METRICS, &json!(other));
        }
        if let Some(conditions) = conditions.filter(|c| !c.is_null()) {
            put_annotation(obj, CONDITIONS, &conditions);
        }
    }
}

/// An autoscaling/v1 HorizontalPodAutoscaler as the autoscaling/v2 object it is stored as
/// (also used to print v1 objects, whose columns are v2's).
pub(crate) fn hpa_to_v2(obj: &mut Value) {
    obj["apiVersion"] = json!("autoscaling/v2");
    let mut metrics = Vec::new();
    if let Some(cpu) = obj
        .pointer_mut("/spec")
        .and_then(Value::as_object_mut)
        .and_then(|spec| spec.remove("targetCPUUtilizationPercentage"))
        .filter(|v| !v.is_null())
    {
        metrics.push(json!({
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}},
        }));
    }
    if let Some(Value::Array(other)) = take_annotation(obj, METRICS) {
        metrics.extend(other);
    }
    let behavior = take_annotation(obj, BEHAVIOR);
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        if !metrics.is_empty() {
            spec.insert("metrics".into(), json!(metrics));
        }
        if let Some(behavior) = behavior {
            spec.insert("behavior".into(), behavior);
        }
    }
    let mut current = Vec::new();
    if let Some(cpu) = obj
        .pointer_mut("/status")
        .and_then(Value::as_object_mut)
        .and_then(|status| status.remove("currentCPUUtilizationPercentage"))
        .filter(|v| !v.is_null())
    {
        current.push(json!({
            "type": "Resource",
            "resource": {"name": "cpu", "current": {"averageUtilization": cpu}},
        }));
    }
    if let Some(Value::Array(other)) = take_annotation(obj, CURRENT_METRICS) {
        current.extend(other);
    }
    let conditions = take_annotation(obj, CONDITIONS);
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        if !current.is_empty() {
            status.insert("currentMetrics".into(), json!(current));
        }
        if let Some(conditions) = conditions {
            status.insert("conditions".into(), conditions);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_convert_both_ways_without_loss() {
        let v1 = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "d"},
            "regarding": {"kind": "Pod", "name": "p"},
            "note": "pulled", "reason": "Pulled", "type": "Normal",
            "reportingController": "kubelet", "reportingInstance": "n1",
            "deprecatedCount": 3,
        });
        let mut core = v1.clone();
        events_to_core(&mut core);
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "pulled");
        assert_eq!(core["reportingComponent"], "kubelet");
        assert_eq!(core["count"], 3);
        assert_eq!(core["apiVersion"], "v1");
        events_from_core(&mut core);
        assert_eq!(core, v1);
    }

    #[test]
    fn hpa_v1_keeps_what_only_v2_can_say() {
        let v2 = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "web"},
                "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}
                ]
            },
            "status": {"currentReplicas": 1, "desiredReplicas": 1, "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 20}}}
            ]}
        });
        let mut v1 = v2.clone();
        hpa_to_v1(&mut v1);
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70);
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 20);
        assert!(v1["spec"].get("metrics").is_none());
        assert!(v1["metadata"]["annotations"][METRICS].is_string());
        let mut back = v1.clone();
        hpa_to_v2(&mut back);
        assert_eq!(back, v2);
    }
}
