//! Status writes that happen only when the status changed.
//!
//! A reconciler that writes its status unconditionally changes the object's resourceVersion on
//! every pass; the watch delivers that change and the object is reconciled again, forever. Here
//! the desired status is compared with the one the object already has — as JSON values, so key
//! order and the field order of the Rust type do not matter — and the `/status` subresource is
//! patched only when they differ. A converged object costs no write.
//!
//! The desired status is the *whole* status: fields the object has and the desired status lacks
//! are removed (set to `null` in the merge patch), so a status computed from scratch each
//! reconcile never keeps stale fields. `observedGeneration` is set from `metadata.generation`,
//! the signal clients use to tell whether the status describes the current spec.
//!
//! The patch carries the object's `resourceVersion`, so a status computed from an object that
//! has since changed is refused with a conflict ([`StatusError::is_conflict`]) instead of
//! overwriting newer state; the caller requeues and recomputes.

use std::fmt::Debug;

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Errors from [`patch_status_if_changed`].
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The object has no `metadata.name`, so there is nothing to address the patch to.
    #[error("object has no metadata.name")]
    MissingName,
    /// The desired status, or the object, could not be turned into JSON.
    #[error("failed to serialize status: {0}")]
    Serialize(#[source] serde_json::Error),
    /// The API server refused or failed the patch of the `/status` subresource.
    #[error("failed to patch status of {name}: {source}")]
    Patch {
        /// Name of the object.
        name: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

impl StatusError {
    /// Whether the write lost a race (409 Conflict): the object changed since it was read. The
    /// caller should requeue at once and recompute from the newer object.
    pub fn is_conflict(&self) -> bool {
        self.api_status().is_some_and(|status| status.is_conflict())
    }

    /// Whether the object no longer exists (404): there is no status left to write.
    pub fn is_not_found(&self) -> bool {
        self.api_status()
            .is_some_and(|status| status.is_not_found())
    }

    fn api_status(&self) -> Option<&kube::core::Status> {
        match self {
            StatusError::Patch {
                source: kube::Error::Api(status),
                ..
            } => Some(status),
            _ => None,
        }
    }
}

/// `Result` with this module's error.
pub type Result<T, E = StatusError> = std::result::Result<T, E>;

/// What [`patch_status_if_changed`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusWrite<K> {
    /// The object already had this status: nothing was sent.
    Unchanged,
    /// The status differed and was written; this is the object the server returned.
    Written(K),
}

impl<K> StatusWrite<K> {
    /// Whether a write was sent.
    pub fn is_written(&self) -> bool {
        matches!(self, StatusWrite::Written(_))
    }
}

/// Writes `status` to `obj`'s `/status` subresource, unless `obj` already has it.
///
/// When `status` serializes to a JSON object and `obj` has a `metadata.generation`,
/// `observedGeneration` is set to that generation first. The comparison is against `obj`'s own
/// `status` (so pass the object as last read, e.g. from the cache), with JSON semantics: key order
/// is irrelevant, and `null` fields of `status` count as absent (a merge patch removes them).
///
/// The write is a JSON merge patch to `/status` that turns the current status into exactly the
/// desired one and is conditional on `obj`'s resourceVersion (see the module docs).
pub async fn patch_status_if_changed<K, S>(
    api: &Api<K>,
    obj: &K,
    status: &S,
) -> Result<StatusWrite<K>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + 'static,
    S: Serialize + ?Sized,
{
    let name = obj.meta().name.clone().ok_or(StatusError::MissingName)?;
    let desired = desired_status(status, obj.meta().generation)?;
    let current = current_status(obj)?;
    if desired == current {
        return Ok(StatusWrite::Unchanged);
    }
    let mut patch = Map::new();
    if let Some(resource_version) = &obj.meta().resource_version {
        patch.insert(
            "metadata".into(),
            serde_json::json!({ "resourceVersion": resource_version }),
        );
    }
    patch.insert("status".into(), merge_patch_to(&current, &desired));
    let written = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(Value::Object(patch)),
        )
        .await
        .map_err(|source| StatusError::Patch { name, source })?;
    crate::reconcile::wrote(&written);
    Ok(StatusWrite::Written(written))
}

/// The desired status as JSON, nulls dropped, with `observedGeneration` set.
fn desired_status<S: Serialize + ?Sized>(status: &S, generation: Option<i64>) -> Result<Value> {
    let mut desired = serde_json::to_value(status).map_err(StatusError::Serialize)?;
    strip_nulls(&mut desired);
    if let (Value::Object(fields), Some(generation)) = (&mut desired, generation) {
        fields.insert("observedGeneration".into(), generation.into());
    }
    Ok(desired)
}

/// The object's status as JSON (null when it has none), nulls dropped.
fn current_status<K: Serialize>(obj: &K) -> Result<Value> {
    let mut value = serde_json::to_value(obj).map_err(StatusError::Serialize)?;
    let mut status = value
        .get_mut("status")
        .map(Value::take)
        .unwrap_or(Value::Null);
    strip_nulls(&mut status);
    Ok(status)
}

/// Removes `null` members of objects, recursively: to a merge patch, null means absent.
pub(crate) fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|_, v| !v.is_null());
            fields.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// A merge patch (RFC 7386) that turns `current` into `desired`: the desired value, plus `null`
/// for every member of an object that `current` has and `desired` lacks.
fn merge_patch_to(current: &Value, desired: &Value) -> Value {
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => {
            let mut patch = Map::new();
            for (key, value) in desired {
                let value = match current.get(key) {
                    Some(old) => merge_patch_to(old, value),
                    None => value.clone(),
                };
                patch.insert(key.clone(), value);
            }
            for key in current.keys() {
                if !desired.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => desired.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// RFC 7386 merge, to check that the patches do what they claim.
    fn apply_merge_patch(target: &mut Value, patch: &Value) {
        let Value::Object(patch) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = Value::Object(Map::new());
        }
        let Value::Object(fields) = target else {
            unreachable!()
        };
        for (key, value) in patch {
            if value.is_null() {
                fields.remove(key);
            } else {
                apply_merge_patch(fields.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }

    #[test]
    fn observed_generation_is_set_on_object_statuses() {
        let desired =
            desired_status(&json!({"phase": "Ready", "observedGeneration": 1}), Some(7)).unwrap();
        assert_eq!(desired, json!({"phase": "Ready", "observedGeneration": 7}));
        let desired = desired_status(&json!({"phase": "Ready"}), None).unwrap();
        assert_eq!(desired, json!({"phase": "Ready"}));
        let desired = desired_status(&json!("not an object"), Some(7)).unwrap();
        assert_eq!(desired, json!("not an object"));
    }

    #[test]
    fn comparison_ignores_key_order_and_nulls() {
        #[derive(Serialize)]
        struct Status {
            ready: bool,
            message: Option<String>,
            nested: Value,
        }
        let desired = desired_status(
            &Status {
                ready: true,
                message: None,
                nested: json!({"b": 1, "a": [{"y": null, "x": 2}]}),
            },
            Some(2),
        )
        .unwrap();
        let obj: Value = serde_json::from_str(
            r#"{"metadata": {}, "status": {"observedGeneration": 2, "nested": {"a": [{"x": 2}], "b": 1}, "ready": true}}"#,
        )
        .unwrap();
        assert_eq!(current_status(&obj).unwrap(), desired);
    }

    #[test]
    fn merge_patch_turns_current_into_exactly_desired() {
        let current =
            json!({"a": 1, "stale": true, "nested": {"keep": 1, "drop": 2}, "list": [1, 2]});
        let desired = json!({"a": 2, "nested": {"keep": 1, "new": 3}, "list": [3]});
        let patch = merge_patch_to(&current, &desired);
        assert_eq!(patch["stale"], Value::Null);
        assert_eq!(patch["nested"]["drop"], Value::Null);
        let mut result = current.clone();
        apply_merge_patch(&mut result, &patch);
        assert_eq!(result, desired);

        let mut from_nothing = Value::Null;
        apply_merge_patch(&mut from_nothing, &merge_patch_to(&Value::Null, &desired));
        assert_eq!(from_nothing, desired);
    }
}
