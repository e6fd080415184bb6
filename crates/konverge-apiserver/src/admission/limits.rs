//! `LimitRanger`: the LimitRanges of a namespace, as kube-apiserver's plugin applies them.
//!
//! A new pod's containers (init containers too) get the `default` limits and
//! `defaultRequest` requests of the `type: Container` items they lack; then every container
//! is held to the `min`, `max` and `maxLimitRequestRatio` of the `Container` items, and the
//! pod's total (app containers and sidecars summed, init containers at their peak) to those
//! of the `Pod` items. A PersistentVolumeClaim's requested storage, on create and update, is
//! held to the `min` and `max` of the `PersistentVolumeClaim` items. Each LimitRange is
//! applied in turn; the first one a write breaks refuses it, with all it found wrong.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::quota::{Amount, Resources, resources, stated_totals};
use super::{Attributes, Operation, Plugin};
use crate::error::Result;
use crate::lister::Lister;
use crate::resources::ResourceType;

/// The annotation that says what the plugin set.
const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Above this many units kube compares whole units rather than thousandths (its
/// `MaxMilliValue`, so thousandths fit in an int64).
const MAX_MILLI_VALUE: i128 = (i64::MAX / 1000) as i128;

/// `LimitRanger`.
#[derive(Debug, Clone, Copy)]
pub struct LimitRanger;

/// The namespace's LimitRanges, in list order.
async fn ranges(registry: &dyn Lister, namespace: &str) -> Result<Vec<Arc<Value>>> {
    let Some(rt) = registry.catalog().get("", "v1", "limitranges") else {
        return Ok(Vec::new());
    };
    registry.list(&rt, Some(namespace), None).await
}

/// A LimitRange's items of one `type`.
fn items<'a>(range: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> {
    range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(move |item| item["type"] == kind)
}

/// Sets the `defaults` a container lacks under `resources.<kind>`; the names set, sorted.
fn fill(container: &mut Value, kind: &str, defaults: &Map<String, Value>) -> Vec<String> {
    let missing: Vec<(&String, &Value)> = defaults
        .iter()
        .filter(|(name, _)| {
            container
                .get("resources")
                .and_then(|r| r.get(kind))
                .and_then(|stated| stated.get(name.as_str()))
                .is_none()
        })
        .collect();
    if missing.is_empty() {
        return Vec::new();
    }
    if !container.get("resources").is_some_and(Value::is_object) {
        container["resources"] = json!({});
    }
    let resources = &mut container["resources"];
    if !resources.get(kind).is_some_and(Value::is_object) {
        resources[kind] = json!({});
    }
    let mut set = Vec::new();
    for (name, value) in missing {
        resources[kind][name] = value.clone();
        set.push(name.clone());
    }
    set.sort();
    set
}

/// Fills in one LimitRange's container defaults; what it set, as the annotation says it.
fn default_containers(pod: &mut Value, range: &Value) -> Vec<String> {
    let (mut limits, mut requests) = (Map::new(), Map::new());
    for item in items(range, "Container") {
        if let Some(d) = item.get("default").and_then(Value::as_object) {
            limits.extend(d.clone());
        }
        if let Some(d) = item.get("defaultRequest").and_then(Value::as_object) {
            requests.extend(d.clone());
        }
    }
    let mut notes = Vec::new();
    if limits.is_empty() && requests.is_empty() {
        return notes;
    }
    for (field, label) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(list) = pod
            .pointer_mut(&format!("/spec/{field}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in list {
            let name = container["name"].as_str().unwrap_or("").to_string();
            let set_limits = fill(container, "limits", &limits);
            let set_requests = fill(container, "requests", &requests);
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
    }
    notes
}

/// Request, limit and bound as kube compares them: in thousandths (rounded up) when all
/// three allow it, else in whole units (rounded up).
fn comparable(request: Amount, limit: Amount, bound: Amount) -> (i128, i128, i128) {
    let whole = (request.value(), limit.value(), bound.value());
    if whole.0 <= MAX_MILLI_VALUE && whole.1 <= MAX_MILLI_VALUE && whole.2 <= MAX_MILLI_VALUE {
        (
            request.milli_value(),
            limit.milli_value(),
            bound.milli_value(),
        )
    } else {
        whole
    }
}

/// A `min`: a request is required, and neither it nor the limit may be below the bound.
fn min_constraint(
    kind: &str,
    resource: &str,
    bound: Amount,
    requests: &Resources,
    limits: &Resources,
) -> Option<String> {
    let (request, limit) = (requests.get(resource), limits.get(resource));
    let (r, l, b) = comparable(
        request.copied().unwrap_or_else(Amount::zero),
        limit.copied().unwrap_or_else(Amount::zero),
        bound,
    );
    let Some(request) = request else {
        return Some(format!(
            "minimum {resource} usage per {kind} is {bound}.  No request is specified"
        ));
    };
    if r < b {
        return Some(format!(
            "minimum {resource} usage per {kind} is {bound}, but request is {request}"
        ));
    }
    match limit {
        Some(limit) if l < b => Some(format!(
            "minimum {resource} usage per {kind} is {bound}, but limit is {limit}"
        )),
        _ => None,
    }
}

/// A `max`: a limit is required, and neither it nor the request may be above the bound.
fn max_constraint(
    kind: &str,
    resource: &str,
    bound: Amount,
    requests: &Resources,
    limits: &Resources,
) -> Option<String> {
    let (request, limit) = (requests.get(resource), limits.get(resource));
    let (r, l, b) = comparable(
        request.copied().unwrap_or_else(Amount::zero),
        limit.copied().unwrap_or_else(Amount::zero),
        bound,
    );
    let Some(limit) = limit else {
        return Some(format!(
            "maximum {resource} usage per {kind} is {bound}.  No limit is specified"
        ));
    };
    if l > b {
        return Some(format!(
            "maximum {resource} usage per {kind} is {bound}, but limit is {limit}"
        ));
    }
    match request {
        Some(request) if r > b => Some(format!(
            "maximum {resource} usage per {kind} is {bound}, but request is {request}"
        )),
        _ => None,
    }
}

/// A `max` on what is requested only (claims state no limits).
fn max_request_constraint(
    kind: &str,
    resource: &str,
    bound: Amount,
    requests: &Resources,
) -> Option<String> {
    let request = requests.get(resource);
    let (r, _, b) = comparable(
        request.copied().unwrap_or_else(Amount::zero),
        Amount::zero(),
        bound,
    );
    let Some(request) = request else {
        return Some(format!(
            "maximum {resource} usage per {kind} is {bound}.  No request is specified"
        ));
    };
    (r > b).then(|| {
        format!("maximum {resource} usage per {kind} is {bound}, but request is {request}")
    })
}

/// A `maxLimitRequestRatio`: both must be stated and non-zero, and the limit at most that
/// many times the request.
fn ratio_constraint(
    kind: &str,
    resource: &str,
    bound: Amount,
    requests: &Resources,
    limits: &Resources,
) -> Option<String> {
    let (request, limit) = (requests.get(resource), limits.get(resource));
    let (r, l, _) = comparable(
        request.copied().unwrap_or_else(Amount::zero),
        limit.copied().unwrap_or_else(Amount::zero),
        bound,
    );
    if request.is_none() || r == 0 {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {bound}, but no request is specified or request is 0"
        ));
    }
    if limit.is_none() || l == 0 {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {bound}, but no limit is specified or limit is 0"
        ));
    }
    let shown = l as f64 / r as f64;
    let (observed, allowed) = if bound.value() <= MAX_MILLI_VALUE {
        (shown * 1000.0, bound.milli_value() as f64)
    } else {
        (shown, bound.value() as f64)
    };
    (observed > allowed).then(|| {
        format!(
            "{resource} max limit to request ratio per {kind} is {bound}, but provided ratio is {shown:.6}"
        )
    })
}

/// Everything an item's `min`, `max` and `maxLimitRequestRatio` find wrong with one set of
/// requests and limits (a container's, or the pod's totals).
fn check_item(
    item: &Value,
    kind: &str,
    requests: &Resources,
    limits: &Resources,
    errors: &mut Vec<String>,
) {
    for (resource, bound) in resources(item.get("min")) {
        errors.extend(min_constraint(kind, &resource, bound, requests, limits));
    }
    for (resource, bound) in resources(item.get("max")) {
        errors.extend(max_constraint(kind, &resource, bound, requests, limits));
    }
    for (resource, bound) in resources(item.get("maxLimitRequestRatio")) {
        errors.extend(ratio_constraint(kind, &resource, bound, requests, limits));
    }
}

/// What one LimitRange finds wrong with a pod.
fn pod_errors(range: &Value, pod: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let items = range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for item in items {
        match item["type"].as_str() {
            Some("Container") => {
                for field in ["containers", "initContainers"] {
                    let list = pod
                        .pointer(&format!("/spec/{field}"))
                        .and_then(Value::as_array)
                        .map_or(&[][..], Vec::as_slice);
                    for container in list {
                        let requests = resources(container.pointer("/resources/requests"));
                        let limits = resources(container.pointer("/resources/limits"));
                        check_item(item, "Container", &requests, &limits, &mut errors);
                    }
                }
            }
            Some("Pod") => {
                let (requests, limits) = stated_totals(pod);
                check_item(item, "Pod", &requests, &limits, &mut errors);
            }
            _ => {}
        }
    }
    errors
}

/// What one LimitRange finds wrong with a claim's requested storage.
fn claim_errors(range: &Value, claim: &Value) -> Vec<String> {
    let requests = resources(claim.pointer("/spec/resources/requests"));
    let mut errors = Vec::new();
    for item in items(range, "PersistentVolumeClaim") {
        for (resource, bound) in resources(item.get("min")) {
            errors.extend(min_constraint(
                "PersistentVolumeClaim",
                &resource,
                bound,
                &requests,
                &Resources::new(),
            ));
        }
        for (resource, bound) in resources(item.get("max")) {
            errors.extend(max_request_constraint(
                "PersistentVolumeClaim",
                &resource,
                bound,
                &requests,
            ));
        }
    }
    errors
}

/// kube's aggregate error: one message as it is, several (repeats dropped) in brackets.
fn aggregate(errors: Vec<String>) -> String {
    if errors.len() == 1 {
        return errors.into_iter().collect();
    }
    let mut seen = BTreeSet::new();
    let unique: Vec<String> = errors
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    match unique.len() {
        1 => unique.into_iter().collect(),
        _ => format!("[{}]", unique.join(", ")),
    }
}

fn is_pods(rt: &ResourceType) -> bool {
    rt.is(crate::resources::PODS)
}

/// Whether the plugin looks at this write: pod creates (containers cannot change after),
/// claim creates and updates, never subresources or objects already being deleted.
fn applies(attributes: &Attributes<'_>) -> bool {
    if attributes.subresource.is_some()
        || attributes
            .old
            .and_then(|old| old.pointer("/metadata/deletionTimestamp"))
            .is_some_and(|t| !t.is_null())
    {
        return false;
    }
    !(is_pods(attributes.rt) && attributes.operation == Operation::Update)
}

#[async_trait::async_trait]
impl Plugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        rt.is(crate::resources::PODS) || rt.is(crate::resources::PERSISTENT_VOLUME_CLAIMS)
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        if !applies(attributes) || !is_pods(attributes.rt) {
            return Ok(false);
        }
        let mut changed = false;
        for range in ranges(registry, attributes.namespace).await? {
            let notes = default_containers(object, &range);
            if notes.is_empty() {
                continue;
            }
            // Each LimitRange that sets something rewrites the annotation, as in kube.
            let md = crate::resources::meta::metadata_mut(object);
            let annotations = md.entry("annotations").or_insert_with(|| json!({}));
            if !annotations.is_object() {
                *annotations = json!({});
            }
            annotations[ANNOTATION] =
                json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
            changed = true;
        }
        Ok(changed)
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
        for range in ranges(registry, attributes.namespace).await? {
            let errors = if is_pods(attributes.rt) {
                pod_errors(&range, object)
            } else {
                claim_errors(&range, object)
            };
            if !errors.is_empty() {
                return Err(super::plugins::forbidden(attributes, aggregate(errors)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(value: Value) -> Resources {
        resources(Some(&value))
    }

    #[test]
    fn ratios_are_checked_in_thousandths_and_printed_with_six_places() {
        let bound = Amount::from_value(&json!("2")).expect("a quantity");
        let requests = list(json!({"cpu": "100m"}));
        let limits = list(json!({"cpu": "250m"}));
        assert_eq!(
            ratio_constraint("Container", "cpu", bound, &requests, &limits).as_deref(),
            Some(
                "cpu max limit to request ratio per Container is 2, but provided ratio is 2.500000"
            )
        );
        let limits = list(json!({"cpu": "200m"}));
        assert_eq!(
            ratio_constraint("Container", "cpu", bound, &requests, &limits),
            None
        );
        assert_eq!(
            ratio_constraint("Pod", "cpu", bound, &Resources::new(), &limits).as_deref(),
            Some(
                "cpu max limit to request ratio per Pod is 2, but no request is specified or request is 0"
            )
        );
    }

    #[test]
    fn repeated_messages_are_given_once() {
        assert_eq!(aggregate(vec!["a".into(), "a".into()]), "a");
        assert_eq!(
            aggregate(vec!["a".into(), "b".into(), "a".into()]),
            "[a, b]"
        );
    }
}
