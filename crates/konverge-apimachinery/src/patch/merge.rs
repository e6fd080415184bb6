//! JSON merge patch (RFC 7386) with the behaviour kube-apiserver has through
//! evanphx/json-patch v4.

use serde_json::{Map, Value};

use super::PatchError;

/// Applies a JSON merge patch (RFC 7386) to `original`, returning the patched document.
///
/// Objects merge recursively, `null` removes a member, anything else replaces. As in
/// kube-apiserver (evanphx/json-patch v4), a patch that is `null` or a scalar is refused with
/// [`PatchError::MergePatchInvalidPatch`] instead of replacing the document, a list patch
/// replaces it, and `null`s are pruned from values that land where there was nothing to
/// merge with (including inside lists).
pub fn apply_merge_patch(original: &Value, patch: &Value) -> Result<Value, PatchError> {
    match (original, patch) {
        (Value::Null, _) => Err(PatchError::MergePatchInvalidDocument),
        (_, Value::Null) => Err(PatchError::MergePatchInvalidPatch),
        (Value::Object(doc), Value::Object(patch)) => {
            let mut doc = doc.clone();
            merge_objects(&mut doc, patch);
            Ok(Value::Object(doc))
        }
        (_, Value::Object(_) | Value::Array(_)) => {
            let mut result = patch.clone();
            prune_nulls(&mut result);
            Ok(result)
        }
        _ => Err(PatchError::MergePatchInvalidPatch),
    }
}

fn merge_objects(doc: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        if value.is_null() {
            doc.remove(key);
            continue;
        }
        match doc.get_mut(key) {
            Some(current) if !current.is_null() => merge_value(current, value),
            _ => {
                let mut value = value.clone();
                prune_nulls(&mut value);
                doc.insert(key.clone(), value);
            }
        }
    }
}

fn merge_value(current: &mut Value, patch: &Value) {
    match (current, patch) {
        (Value::Object(current), Value::Object(patch)) => merge_objects(current, patch),
        (current @ Value::Object(_), patch) => *current = patch.clone(),
        (current, patch) => {
            let mut patch = patch.clone();
            prune_nulls(&mut patch);
            *current = patch;
        }
    }
}

/// Removes `null` members from objects, recursively (through lists too; `null` list elements
/// stay).
fn prune_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(prune_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}
