//! `LimitRanger`: the LimitRanges of a pod's namespace fill in its containers' missing
//! resource limits and requests (`default`, `defaultRequest`) and bound them (`min`, `max`),
//! as kube-apiserver's plugin does for `type: Container` limits on pod creation.

use std::collections::BTreeMap;
use std::sync::Arc;

use konverge_apimachinery::quantity;
use serde_json::{Map, Value, json};

use super::{Attributes, Operation, Plugin};
use crate::error::Result;
use crate::registry::{ListOptions, Registry};
use crate::resources::ResourceType;

/// The annotation that says what the plugin set.
const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// `LimitRanger`.
#[derive(Debug, Clone, Copy)]
pub struct LimitRanger;

/// The `type: Container` items of the namespace's LimitRanges, in list order.
async fn container_limits(registry: &Registry, namespace: &str) -> Result<Vec<Value>> {
    let Some(rt) = registry.catalog().get("", "v1", "limitranges") else {
        return Ok(Vec::new());
    };
    let ranges: Vec<Arc<Value>> = registry
        .list(&rt, Some(namespace), &ListOptions::default())
        .await?
        .items;
    Ok(ranges
        .iter()
        .flat_map(|range| {
            range
                .pointer("/spec/limits")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter(|limit| limit["type"] == "Container")
        .collect())
}

/// Every container of a pod with what kube calls it in messages.
fn containers(pod: &mut Value) -> Vec<(&'static str, &mut Value)> {
    let mut found = Vec::new();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return found;
    };
    // Containers before init containers, as kube goes through them (key order agrees).
    for (field, list) in spec.iter_mut() {
        let label = match field.as_str() {
            "containers" => "container",
            "initContainers" => "init container",
            _ => continue,
        };
        if let Some(list) = list.as_array_mut() {
            found.extend(list.iter_mut().map(|c| (label, c)));
        }
    }
    found
}

/// Sets the `defaults` a container lacks under `resources.<kind>`; the names set, sorted.
fn fill(container: &mut Value, kind: &str, defaults: &Map<String, Value>) -> Vec<String> {
    if !container.get("resources").is_some_and(Value::is_object) {
        container["resources"] = json!({});
    }
    let resources = &mut container["resources"];
    if !resources.get(kind).is_some_and(Value::is_object) {
        resources[kind] = json!({});
    }
    let mut set = Vec::new();
    for (name, value) in defaults {
        if resources[kind].get(name).is_none() {
            resources[kind][name] = value.clone();
            set.push(name.clone());
        }
    }
    set.sort();
    set
}

fn amount(value: &Value) -> Option<quantity::Quantity> {
    value.as_str().and_then(quantity::value)
}

#[async_trait::async_trait]
impl Plugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        rt.group.is_empty() && rt.plural == "pods"
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &Registry,
    ) -> Result<bool> {
        // Containers cannot change after creation: only creates are defaulted.
        if attributes.operation != Operation::Create || attributes.subresource.is_some() {
            return Ok(false);
        }
        let limits = container_limits(registry, attributes.namespace).await?;
        let (mut limit_defaults, mut request_defaults) = (Map::new(), Map::new());
        for limit in &limits {
            if let Some(d) = limit.get("default").and_then(Value::as_object) {
                limit_defaults.extend(d.clone());
            }
            if let Some(d) = limit.get("defaultRequest").and_then(Value::as_object) {
                request_defaults.extend(d.clone());
            }
        }
        if limit_defaults.is_empty() && request_defaults.is_empty() {
            return Ok(false);
        }
        let mut notes = Vec::new();
        for (label, container) in containers(object) {
            let name = container["name"].as_str().unwrap_or("").to_string();
            let set_limits = fill(container, "limits", &limit_defaults);
            let set_requests = fill(container, "requests", &request_defaults);
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {label} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!(
                    "{} limit for {label} {name}",
                    set_limits.join(", ")
                ));
            }
        }
        if notes.is_empty() {
            return Ok(false);
        }
        let md = crate::resources::meta::metadata_mut(object);
        let annotations = md.entry("annotations").or_insert_with(|| json!({}));
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations[ANNOTATION] = json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
        Ok(true)
    }

    async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &Registry,
    ) -> Result<()> {
        if attributes.operation != Operation::Create || attributes.subresource.is_some() {
            return Ok(());
        }
        let limits = container_limits(registry, attributes.namespace).await?;
        if limits.is_empty() {
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut pod = object.clone();
        for (_, container) in containers(&mut pod) {
            let resources = &container["resources"];
            for limit in &limits {
                let bounds = |key: &str| -> BTreeMap<String, Value> {
                    limit
                        .get(key)
                        .and_then(Value::as_object)
                        .map(|m| m.clone().into_iter().collect())
                        .unwrap_or_default()
                };
                for (resource, min) in bounds("min") {
                    let Some(min) = amount(&min) else { continue };
                    let request = resources["requests"].get(&resource).and_then(amount);
                    let limit = resources["limits"].get(&resource).and_then(amount);
                    let bound = min.canonical.as_str();
                    match (request, limit) {
                        (None, _) => errors.push(format!(
                            "minimum {resource} usage per Container is {bound}.  No request is specified"
                        )),
                        (Some(request), _) if request.nanos < min.nanos => errors.push(format!(
                            "minimum {resource} usage per Container is {bound}, but request is {}",
                            request.canonical
                        )),
                        (_, Some(limit)) if limit.nanos < min.nanos => errors.push(format!(
                            "minimum {resource} usage per Container is {bound}, but limit is {}",
                            limit.canonical
                        )),
                        _ => {}
                    }
                }
                for (resource, max) in bounds("max") {
                    let Some(max) = amount(&max) else { continue };
                    let request = resources["requests"].get(&resource).and_then(amount);
                    let limit = resources["limits"].get(&resource).and_then(amount);
                    let bound = max.canonical.as_str();
                    match (limit, request) {
                        (None, _) => errors.push(format!(
                            "maximum {resource} usage per Container is {bound}.  No limit is specified"
                        )),
                        (Some(limit), _) if limit.nanos > max.nanos => errors.push(format!(
                            "maximum {resource} usage per Container is {bound}, but limit is {}",
                            limit.canonical
                        )),
                        (_, Some(request)) if request.nanos > max.nanos => errors.push(format!(
                            "maximum {resource} usage per Container is {bound}, but request is {}",
                            request.canonical
                        )),
                        _ => {}
                    }
                }
            }
        }
        // kube's aggregate error drops repeated messages.
        let mut seen = std::collections::BTreeSet::new();
        errors.retain(|e| seen.insert(e.clone()));
        if errors.is_empty() {
            return Ok(());
        }
        let why = match errors.len() {
            1 => errors.remove(0),
            _ => format!("[{}]", errors.join(", ")),
        };
        Err(super::plugins::forbidden(attributes, why))
    }
}
