//! `RuntimeClass`: a new pod that names a RuntimeClass runs as the class says, as
//! kube-apiserver's plugin makes it: the class's `overhead.podFixed` becomes the pod's
//! `spec.overhead`, its `scheduling.nodeSelector` is merged into the pod's and its
//! `scheduling.tolerations` added to the pod's. A class that does not exist, an overhead the
//! pod set that differs from the class's (or that no class defines), and a node selector that
//! contradicts the class's are refused.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::quota::{equals, resources};
use super::{Attributes, Operation, Plugin};
use crate::error::{Reason, Result};
use crate::lister::Lister;
use crate::resources::ResourceType;

/// `RuntimeClass`.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeClass;

/// The class a pod names, if it names one: `Ok(None)` when it names none, 403 when the class
/// does not exist.
async fn class_of(
    attributes: &Attributes<'_>,
    pod: &Value,
    registry: &dyn Lister,
) -> Result<Option<Value>> {
    let Some(name) = pod
        .pointer("/spec/runtimeClassName")
        .filter(|n| !n.is_null())
    else {
        return Ok(None);
    };
    let name = name.as_str().unwrap_or("");
    let not_found = || {
        super::plugins::forbidden(
            attributes,
            format!("pod rejected: RuntimeClass {name:?} not found"),
        )
    };
    let Some(rt) = registry
        .catalog()
        .get("node.k8s.io", "v1", "runtimeclasses")
    else {
        return Err(not_found());
    };
    match registry.get(&rt, None, name).await {
        Ok(class) => Ok(Some(class)),
        Err(e) if e.reason == Reason::NotFound => Err(not_found()),
        Err(e) => Err(e),
    }
}

/// Resource lists compared by value, an absent list equal to an empty one (kube's semantic
/// equality).
fn same_overhead(a: Option<&Value>, b: Option<&Value>) -> bool {
    equals(
        &resources(a.filter(|v| !v.is_null())),
        &resources(b.filter(|v| !v.is_null())),
    )
}

/// The class's `overhead`, if it defines one (`podFixed` may still be empty).
fn class_overhead(class: &Value) -> Option<&Value> {
    class.get("overhead").filter(|o| !o.is_null())
}

/// A toleration's fields, as kube compares them (absent and empty are the same).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Toleration {
    key: String,
    operator: String,
    value: String,
    effect: String,
    seconds: Option<i64>,
}

impl Toleration {
    fn of(value: &Value) -> Toleration {
        let text = |field: &str| value[field].as_str().unwrap_or("").to_string();
        Toleration {
            key: text("key"),
            operator: text("operator"),
            value: text("value"),
            effect: text("effect"),
            seconds: value["tolerationSeconds"].as_i64(),
        }
    }

    /// Whether this toleration tolerates every taint `other` does.
    fn covers(&self, other: &Toleration) -> bool {
        if self == other {
            return true;
        }
        // An empty key with `Exists` tolerates every key.
        if other.key != self.key && (!self.key.is_empty() || self.operator != "Exists") {
            return false;
        }
        // An empty effect tolerates every effect.
        if other.effect != self.effect && !self.effect.is_empty() {
            return false;
        }
        if self.effect == "NoExecute"
            && let Some(limit) = self.seconds
            && other.seconds.is_none_or(|s| s > limit)
        {
            return false;
        }
        match self.operator.as_str() {
            "Equal" | "" => other.operator == "Equal" && other.value == self.value,
            "Exists" => true,
            _ => false,
        }
    }
}

/// kube's `MergeTolerations`: both lists, leaving out any toleration another one covers
/// (of equal ones, the first is kept).
fn merge_tolerations(first: &[Value], second: &[Value]) -> Vec<Value> {
    let all: Vec<(Toleration, &Value)> = first
        .iter()
        .chain(second)
        .map(|v| (Toleration::of(v), v))
        .collect();
    let mut merged: Vec<(Toleration, &Value)> = Vec::new();
    for (i, (t, raw)) in all.iter().enumerate() {
        if merged.iter().any(|(m, _)| m.covers(t)) {
            continue;
        }
        if all[i + 1..]
            .iter()
            .any(|(later, _)| later != t && later.covers(t))
        {
            continue;
        }
        merged.push((t.clone(), raw));
    }
    merged.into_iter().map(|(_, raw)| raw.clone()).collect()
}

fn string_map(value: Option<&Value>) -> Option<BTreeMap<String, Value>> {
    value
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Sets the pod's overhead from the class's (403 if the pod set another).
fn set_overhead(attributes: &Attributes<'_>, pod: &mut Value, class: &Value) -> Result<bool> {
    let Some(overhead) = class_overhead(class) else {
        return Ok(false);
    };
    let fixed = overhead.get("podFixed").filter(|f| !f.is_null()).cloned();
    let current = pod.pointer("/spec/overhead").filter(|o| !o.is_null());
    if current.is_some() && !same_overhead(fixed.as_ref(), current) {
        return Err(super::plugins::forbidden(
            attributes,
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into(),
        ));
    }
    let Some(spec) = spec_mut(pod) else {
        return Ok(false);
    };
    let before = spec.get("overhead").cloned();
    match fixed {
        Some(fixed) => {
            spec.insert("overhead".into(), fixed);
        }
        None => {
            spec.remove("overhead");
        }
    }
    Ok(spec.get("overhead") != before.as_ref())
}

fn spec_mut(pod: &mut Value) -> Option<&mut Map<String, Value>> {
    let pod = pod.as_object_mut()?;
    let spec = pod
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    if !spec.is_object() {
        *spec = Value::Object(Map::new());
    }
    spec.as_object_mut()
}

/// Merges the class's node selector and tolerations into the pod's (403 on a conflicting
/// node selector entry).
fn set_scheduling(attributes: &Attributes<'_>, pod: &mut Value, class: &Value) -> Result<bool> {
    let Some(scheduling) = class.get("scheduling").filter(|s| !s.is_null()) else {
        return Ok(false);
    };
    let class_selector = string_map(scheduling.get("nodeSelector"));
    let selector = match string_map(pod.pointer("/spec/nodeSelector")) {
        None => class_selector,
        Some(mut own) => {
            for (key, wanted) in class_selector.unwrap_or_default() {
                if let Some(have) = own.get(&key)
                    && *have != wanted
                {
                    return Err(super::plugins::forbidden(
                        attributes,
                        format!(
                            "conflict: runtimeClass.scheduling.nodeSelector[{key}] = {}; pod.spec.nodeSelector[{key}] = {}",
                            wanted.as_str().unwrap_or(""),
                            have.as_str().unwrap_or("")
                        ),
                    ));
                }
                own.insert(key, wanted);
            }
            Some(own)
        }
    };
    let own_tolerations = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let class_tolerations = scheduling["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let tolerations = merge_tolerations(&own_tolerations, &class_tolerations);
    let Some(spec) = spec_mut(pod) else {
        return Ok(false);
    };
    let before = (
        spec.get("nodeSelector").cloned(),
        spec.get("tolerations").cloned(),
    );
    match selector {
        Some(selector) => {
            spec.insert(
                "nodeSelector".into(),
                Value::Object(selector.into_iter().collect()),
            );
        }
        None => {
            spec.remove("nodeSelector");
        }
    }
    if tolerations.is_empty() {
        spec.remove("tolerations");
    } else {
        spec.insert("tolerations".into(), Value::Array(tolerations));
    }
    let after = (
        spec.get("nodeSelector").cloned(),
        spec.get("tolerations").cloned(),
    );
    Ok(before != after)
}

fn applies(attributes: &Attributes<'_>) -> bool {
    attributes.operation == Operation::Create && attributes.subresource.is_none()
}

#[async_trait::async_trait]
impl Plugin for RuntimeClass {
    fn name(&self) -> &'static str {
        "RuntimeClass"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        rt.is(crate::resources::PODS)
    }

    fn handles_operation(&self, operation: Operation) -> bool {
        operation == Operation::Create
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        if !applies(attributes) {
            return Ok(false);
        }
        let Some(class) = class_of(attributes, object, registry).await? else {
            return Ok(false);
        };
        let overhead = set_overhead(attributes, object, &class)?;
        let scheduling = set_scheduling(attributes, object, &class)?;
        Ok(overhead || scheduling)
    }

    async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<()> {
        if !applies(attributes) {
            return Ok(());
        }
        let class = class_of(attributes, object, registry).await?;
        let pod_overhead = object.pointer("/spec/overhead").filter(|o| !o.is_null());
        let fixed = class.as_ref().and_then(class_overhead);
        if let Some(overhead) = fixed
            && !same_overhead(overhead.get("podFixed"), pod_overhead)
        {
            return Err(super::plugins::forbidden(
                attributes,
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into(),
            ));
        }
        if fixed.is_none() && pod_overhead.is_some() {
            return Err(super::plugins::forbidden(
                attributes,
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merged_tolerations_leave_out_those_another_covers() {
        let own = [
            json!({"key": "a", "operator": "Equal", "value": "1", "effect": "NoSchedule"}),
            json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
        ];
        let class = [
            json!({"key": "a", "operator": "Exists"}),
            json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
            json!({"key": "b", "operator": "Exists", "effect": "NoSchedule"}),
        ];
        let merged = merge_tolerations(&own, &class);
        assert_eq!(
            merged,
            vec![own[1].clone(), class[0].clone(), class[2].clone()]
        );
    }
}
