//! The `scale` subresource: an `autoscaling/v1` `Scale` view of a workload's replicas.

use serde_json::{Value, json};

use crate::error::{ApiError, Result};
use crate::http::patch::Patch;
use crate::registry::{Registry, WriteOptions};
use crate::resources::ResourceType;

fn pointer(path: &str) -> String {
    format!("/{}", path.replace('.', "/"))
}

/// Sets the field at a dotted path, creating the objects on the way.
fn set_path(obj: &mut Value, path: &str, value: Value) {
    let mut at = obj;
    let mut fields = path.split('.').peekable();
    while let Some(field) = fields.next() {
        if !at.is_object() {
            *at = json!({});
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        if fields.peek().is_none() {
            map.insert(field.to_string(), value);
            return;
        }
        at = map.entry(field.to_string()).or_insert_with(|| json!({}));
    }
}

/// The `Scale` of an object.
pub fn to_scale(rt: &ResourceType, obj: &Value) -> Result<Value> {
    let paths = rt.scale.as_ref().ok_or_else(ApiError::no_route)?;
    let md = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let selector = paths
        .selector
        .as_deref()
        .and_then(|path| obj.pointer(&pointer(path)))
        .filter(|s| !s.is_null())
        .map(|s| match (paths.selector_is_string, s) {
            // A custom resource keeps its selector serialized, as `Scale` reports it.
            (true, Value::String(text)) => Ok(text.clone()),
            (true, _) => Err(ApiError::internal("the label selector is not a string")),
            (false, s) => konverge_apimachinery::selector::LabelSelector::from_json(s)
                .map(|sel| sel.to_string())
                .map_err(|e| ApiError::internal(format!("stored selector is invalid: {e}"))),
        })
        .transpose()?;
    let mut status = json!({
        "replicas": obj.pointer(&pointer(&paths.status_replicas)).and_then(Value::as_i64).unwrap_or(0),
    });
    if let Some(selector) = selector {
        status["selector"] = json!(selector);
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": md["name"],
            "namespace": md["namespace"],
            "uid": md["uid"],
            "resourceVersion": md["resourceVersion"],
            "creationTimestamp": md["creationTimestamp"],
        },
        "spec": {
            "replicas": obj.pointer(&pointer(&paths.spec_replicas)).and_then(Value::as_i64).unwrap_or(0),
        },
        "status": status,
    }))
}

/// Writes the replica count of `scale` (a `Scale` object) into the object.
async fn write_replicas(
    registry: &Registry,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    opts: &WriteOptions,
    scale_of: &(dyn Fn(&Value) -> Result<Value> + Send + Sync),
) -> Result<Value> {
    let paths = rt.scale.as_ref().ok_or_else(ApiError::no_route)?;
    let apply = |current: &Value| -> Result<Value> {
        let scale = scale_of(&to_scale(rt, current)?)?;
        let replicas = match scale.pointer("/spec/replicas") {
            Some(Value::Number(n)) if n.as_i64().is_some_and(|r| r >= 0) => n.clone(),
            Some(other) => {
                return Err(ApiError::invalid(
                    "Scale",
                    "autoscaling",
                    name,
                    vec![crate::error::Cause::invalid(
                        "spec.replicas",
                        other,
                        "must be greater than or equal to 0",
                    )],
                ));
            }
            None => serde_json::Number::from(0),
        };
        let mut new = current.clone();
        set_path(&mut new, &paths.spec_replicas, Value::Number(replicas));
        // A resourceVersion in the Scale is a precondition on the object.
        match scale.pointer("/metadata/resourceVersion") {
            Some(rv @ Value::String(s)) if !s.is_empty() => {
                crate::resources::meta::metadata_mut(&mut new)
                    .insert("resourceVersion".into(), rv.clone());
            }
            _ => {
                crate::resources::meta::metadata_mut(&mut new).remove("resourceVersion");
            }
        }
        Ok(new)
    };
    let written = registry.patch(rt, ns, name, None, opts, &apply).await?;
    to_scale(rt, &written.object)
}

/// `PUT .../scale`.
pub async fn update_scale(
    registry: &Registry,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    body: Value,
    opts: &WriteOptions,
) -> Result<Value> {
    if body
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k != "Scale")
    {
        return Err(ApiError::bad_request(
            "the body of a scale update must be a Scale",
        ));
    }
    let replace = move |_: &Value| Ok(body.clone());
    write_replicas(registry, rt, ns, name, opts, &replace).await
}

/// `PATCH .../scale`.
pub async fn patch_scale(
    registry: &Registry,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    patch: &Patch,
    opts: &WriteOptions,
) -> Result<Value> {
    let apply = |scale: &Value| patch.apply_to_scale(scale);
    write_replicas(registry, rt, ns, name, opts, &apply).await
}
