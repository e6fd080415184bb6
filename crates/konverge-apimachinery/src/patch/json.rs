//! JSON patch (RFC 6902) with the behaviour kube-apiserver has through evanphx/json-patch v4:
//! negative array indexes count from the end, `replace` of a missing object member adds it,
//! `test` of an absent member against `null` holds, and the error messages are that
//! library's. The document changes themselves go through the `json-patch` crate.

use json_patch::jsonptr::{PointerBuf, Token};
use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

use super::PatchError;
use crate::gofmt;

/// The most operations kube-apiserver accepts in one JSON patch.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Applies a JSON patch (RFC 6902) to `original`, returning the patched document.
///
/// The patch must be a list of operation objects (`null` is an empty patch); the operations
/// apply in order and the first failure — including a `test` that does not hold — fails the
/// whole patch with [`PatchError::JsonPatchOperation`].
pub fn apply_json_patch(original: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops: &[Value] = match patch {
        Value::Array(ops) => ops,
        Value::Null => &[],
        other => return Err(decode_error(other, "jsonpatch.Patch")),
    };
    if let Some(bad) = ops.iter().find(|op| !op.is_object() && !op.is_null()) {
        return Err(decode_error(bad, "jsonpatch.Operation"));
    }
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyJsonPatchOperations {
            max: MAX_JSON_PATCH_OPERATIONS,
            count: ops.len(),
        });
    }
    let mut doc = original.clone();
    for (index, op) in ops.iter().enumerate() {
        let op = Operation(op.as_object());
        if let Err(failure) = op.apply(&mut doc) {
            return Err(PatchError::JsonPatchOperation {
                index,
                op: op.kind(),
                path: failure.path,
                message: failure.message,
            });
        }
    }
    Ok(doc)
}

fn decode_error(found: &Value, go_type: &str) -> PatchError {
    PatchError::JsonPatchDecode {
        message: format!(
            "json: cannot unmarshal {} into Go value of type {go_type}",
            gofmt::json_kind(found)
        ),
    }
}

/// Why one operation failed: the path involved and the message.
struct Failure {
    path: String,
    message: String,
}

fn fail<T>(path: &str, message: String) -> Result<T, Failure> {
    Err(Failure {
        path: path.to_string(),
        message,
    })
}

const MISSING: &str = "missing value";

/// One operation object of the patch (`None` for a `null` entry).
struct Operation<'a>(Option<&'a Map<String, Value>>);

impl Operation<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.and_then(|m| m.get(name))
    }

    fn kind(&self) -> String {
        match self.get("op") {
            Some(Value::String(s)) => s.clone(),
            _ => "unknown".to_string(),
        }
    }

    fn string_field(&self, name: &str, missing: &str) -> Result<String, String> {
        match self.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            None | Some(Value::Null) => Err(missing.to_string()),
            Some(other) => Err(format!(
                "json: cannot unmarshal {} into Go value of type string",
                gofmt::json_kind(other)
            )),
        }
    }

    fn path(&self) -> Result<String, String> {
        self.string_field("path", "operation missing path field: missing value")
    }

    fn from(&self) -> Result<String, String> {
        self.string_field("from", "operation, missing from field: missing value")
    }

    /// The operation's value; an absent value reads as `null`, as it does in evanphx.
    fn value(&self) -> Value {
        self.get("value").cloned().unwrap_or(Value::Null)
    }

    fn apply(&self, doc: &mut Value) -> Result<(), Failure> {
        match self.kind().as_str() {
            "add" => self.add(doc),
            "remove" => self.remove(doc),
            "replace" => self.replace(doc),
            "move" => self.move_(doc),
            "copy" => self.copy(doc),
            "test" => self.test(doc),
            other => fail("", format!("Unexpected kind: {other}")),
        }
    }

    fn add(&self, doc: &mut Value) -> Result<(), Failure> {
        let Ok(path) = self.path() else {
            return fail(
                "",
                format!("add operation failed to decode path: {MISSING}"),
            );
        };
        let Some(target) = find_object(doc, &path) else {
            return fail(
                &path,
                format!("add operation does not apply: doc is missing path: \"{path}\": {MISSING}"),
            );
        };
        if let Err(e) = target.add(doc, self.value()) {
            return fail(&path, format!("error in add for path: '{path}': {e}"));
        }
        Ok(())
    }

    fn remove(&self, doc: &mut Value) -> Result<(), Failure> {
        let Ok(path) = self.path() else {
            return fail(
                "",
                format!("remove operation failed to decode path: {MISSING}"),
            );
        };
        let Some(target) = find_object(doc, &path) else {
            return fail(
                &path,
                format!(
                    "remove operation does not apply: doc is missing path: \"{path}\": {MISSING}"
                ),
            );
        };
        if let Err(e) = target.remove(doc) {
            return fail(&path, format!("error in remove for path: '{path}': {e}"));
        }
        Ok(())
    }

    fn replace(&self, doc: &mut Value) -> Result<(), Failure> {
        let path = match self.path() {
            Ok(path) => path,
            Err(e) => return fail("", format!("replace operation failed to decode path: {e}")),
        };
        if path.is_empty() {
            // evanphx v4 replaces the whole document with an object or a list, and silently
            // ignores any other value.
            let value = self.value();
            if value.is_object() || value.is_array() {
                *doc = value;
            }
            return Ok(());
        }
        let Some(target) = find_object(doc, &path) else {
            return fail(
                &path,
                format!("replace operation does not apply: doc is missing path: {path}: {MISSING}"),
            );
        };
        if target.get(doc).is_err() {
            return fail(
                &path,
                format!("replace operation does not apply: doc is missing key: {path}: {MISSING}"),
            );
        }
        if let Err(e) = target.set(doc, self.value()) {
            return fail(&path, format!("error in remove for path: '{path}': {e}"));
        }
        Ok(())
    }

    fn move_(&self, doc: &mut Value) -> Result<(), Failure> {
        let from = match self.from() {
            Ok(from) => from,
            Err(e) => return fail("", format!("move operation failed to decode from: {e}")),
        };
        let Some(source) = find_object(doc, &from) else {
            return fail(
                &from,
                format!(
                    "move operation does not apply: doc is missing from path: {from}: {MISSING}"
                ),
            );
        };
        let value = match source.get(doc) {
            Ok(value) => value.unwrap_or(Value::Null),
            Err(e) => {
                return fail(
                    &from,
                    format!("error in move for path: '{}': {e}", source.key),
                );
            }
        };
        if let Err(e) = source.remove(doc) {
            return fail(
                &from,
                format!("error in move for path: '{}': {e}", source.key),
            );
        }
        let path = match self.path() {
            Ok(path) => path,
            Err(e) => return fail("", format!("move operation failed to decode path: {e}")),
        };
        let Some(target) = find_object(doc, &path) else {
            return fail(
                &path,
                format!(
                    "move operation does not apply: doc is missing destination path: {path}: {MISSING}"
                ),
            );
        };
        if let Err(e) = target.add(doc, value) {
            return fail(&path, format!("error in move for path: '{path}': {e}"));
        }
        Ok(())
    }

    fn copy(&self, doc: &mut Value) -> Result<(), Failure> {
        let from = match self.from() {
            Ok(from) => from,
            Err(e) => return fail("", format!("copy operation failed to decode from: {e}")),
        };
        let Some(source) = find_object(doc, &from) else {
            return fail(
                &from,
                format!(
                    "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
                ),
            );
        };
        let value = match source.get(doc) {
            Ok(value) => value.unwrap_or(Value::Null),
            Err(e) => return fail(&from, format!("error in copy for from: '{from}': {e}")),
        };
        let Ok(path) = self.path() else {
            return fail(
                "",
                format!("copy operation failed to decode path: {MISSING}"),
            );
        };
        let Some(target) = find_object(doc, &path) else {
            return fail(
                &path,
                format!(
                    "copy operation does not apply: doc is missing destination path: {path}: {MISSING}"
                ),
            );
        };
        if let Err(e) = target.add(doc, value) {
            return fail(&path, format!("error while adding value during copy: {e}"));
        }
        Ok(())
    }

    fn test(&self, doc: &mut Value) -> Result<(), Failure> {
        let path = match self.path() {
            Ok(path) => path,
            Err(e) => return fail("", format!("test operation failed to decode path: {e}")),
        };
        let expected = self.value();
        let failed = || fail(&path, format!("testing value {path} failed: test failed"));
        if path.is_empty() {
            return if *doc == expected { Ok(()) } else { failed() };
        }
        let Some(target) = find_object(doc, &path) else {
            return fail(
                &path,
                format!("test operation does not apply: is missing path: {path}: {MISSING}"),
            );
        };
        let actual = match target.get(doc) {
            Ok(actual) => actual,
            Err(e) => return fail(&path, format!("error in test for path: '{path}': {e}")),
        };
        match actual {
            // An absent or null member only equals null.
            None | Some(Value::Null) if expected.is_null() => Ok(()),
            Some(actual) if !actual.is_null() && actual == expected => Ok(()),
            _ => failed(),
        }
    }
}

/// RFC 6901 unescaping, as evanphx does it.
fn decode_key(key: &str) -> String {
    key.replace("~1", "/").replace("~0", "~")
}

fn is_container(value: &Value) -> bool {
    value.is_object() || value.is_array()
}

/// `strconv.Atoi`, with Go's error text.
fn atoi(key: &str) -> Result<i64, String> {
    key.parse::<i64>().map_err(|e| {
        let reason = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("strconv.Atoi: parsing {}: {reason}", gofmt::quote(key))
    })
}

fn invalid_index(index: i64) -> String {
    format!("Unable to access invalid index: {index}: invalid index referenced")
}

/// An index for reading an existing element (negative counts from the end).
fn existing_index(key: &str, len: usize) -> Result<usize, String> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let mut index = atoi(key)?;
    if index < 0 {
        if index < -len {
            return Err(invalid_index(index));
        }
        index += len;
    }
    if index >= len {
        return Err(invalid_index(index));
    }
    usize::try_from(index).map_err(|_| invalid_index(index))
}

/// The location of an operation's target: the container (by canonical tokens from the root)
/// and the last, still raw, key.
struct Target {
    container: Vec<String>,
    key: String,
}

/// evanphx's `findObject`: every segment but the last must name an existing object or list;
/// the first segment (before the leading `/`) is ignored.
fn find_object(doc: &Value, path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.split('/').collect();
    let (last, rest) = segments.split_last()?;
    let (_, middle) = rest.split_first()?;
    let mut current = doc;
    if !is_container(current) {
        return None;
    }
    let mut container = Vec::with_capacity(middle.len());
    for segment in middle {
        let segment = decode_key(segment);
        let (next, token) = match current {
            Value::Object(map) => (map.get(&segment)?, segment),
            Value::Array(items) => {
                let index = existing_index(&segment, items.len()).ok()?;
                (items.get(index)?, index.to_string())
            }
            _ => return None,
        };
        if !is_container(next) {
            return None;
        }
        container.push(token);
        current = next;
    }
    Some(Target {
        container,
        key: decode_key(last),
    })
}

impl Target {
    fn resolve<'d>(&self, doc: &'d Value) -> Option<&'d Value> {
        let mut current = doc;
        for token in &self.container {
            current = match current {
                Value::Object(map) => map.get(token)?,
                Value::Array(items) => items.get(token.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(current)
    }

    fn pointer(&self, last: &str) -> PointerBuf {
        PointerBuf::from_tokens(
            self.container
                .iter()
                .map(|t| Token::new(t.as_str()))
                .chain(std::iter::once(Token::new(last))),
        )
    }

    /// The target's value (`None` for an absent object member, which evanphx reads as nil).
    fn get(&self, doc: &Value) -> Result<Option<Value>, String> {
        match self.resolve(doc) {
            Some(Value::Object(map)) => Ok(map.get(&self.key).cloned()),
            Some(Value::Array(items)) => {
                let index = existing_index(&self.key, items.len())?;
                Ok(items.get(index).cloned())
            }
            _ => Err(invalid_index(0)),
        }
    }

    fn add(&self, doc: &mut Value, value: Value) -> Result<(), String> {
        let token = match self.resolve(doc) {
            Some(Value::Object(_)) => self.key.clone(),
            Some(Value::Array(items)) => {
                if self.key == "-" {
                    "-".to_string()
                } else {
                    let size = i64::try_from(items.len()).unwrap_or(i64::MAX) + 1;
                    let mut index = atoi(&self.key).map_err(|e| {
                        format!("value was not a proper array index: '{}': {e}", self.key)
                    })?;
                    if index >= size {
                        return Err(invalid_index(index));
                    }
                    if index < 0 {
                        if index < -size {
                            return Err(invalid_index(index));
                        }
                        index += size;
                    }
                    index.to_string()
                }
            }
            _ => return Err(invalid_index(0)),
        };
        let op = PatchOperation::Add(AddOperation {
            path: self.pointer(&token),
            value,
        });
        json_patch::patch_unsafe(doc, &[op]).map_err(|e| e.to_string())
    }

    fn remove(&self, doc: &mut Value) -> Result<(), String> {
        let token = match self.resolve(doc) {
            Some(Value::Object(map)) => {
                if !map.contains_key(&self.key) {
                    return Err(format!(
                        "Unable to remove nonexistent key: {}: {MISSING}",
                        self.key
                    ));
                }
                self.key.clone()
            }
            Some(Value::Array(items)) => {
                let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
                let mut index = atoi(&self.key)?;
                if index >= len {
                    return Err(invalid_index(index));
                }
                if index < 0 {
                    if index < -len {
                        return Err(invalid_index(index));
                    }
                    index += len;
                }
                index.to_string()
            }
            _ => return Err(invalid_index(0)),
        };
        let op = PatchOperation::Remove(RemoveOperation {
            path: self.pointer(&token),
        });
        json_patch::patch_unsafe(doc, &[op]).map_err(|e| e.to_string())
    }

    /// Replaces an existing element, or sets an object member whether or not it exists.
    fn set(&self, doc: &mut Value, value: Value) -> Result<(), String> {
        let op = match self.resolve(doc) {
            Some(Value::Object(_)) => PatchOperation::Add(AddOperation {
                path: self.pointer(&self.key),
                value,
            }),
            Some(Value::Array(items)) => {
                let index = existing_index(&self.key, items.len())?;
                PatchOperation::Replace(ReplaceOperation {
                    path: self.pointer(&index.to_string()),
                    value,
                })
            }
            _ => return Err(invalid_index(0)),
        };
        json_patch::patch_unsafe(doc, &[op]).map_err(|e| e.to_string())
    }
}
