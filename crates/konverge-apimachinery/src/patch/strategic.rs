//! Strategic merge patch, with the semantics of kube-apiserver
//! (`k8s.io/apimachinery/pkg/util/strategicpatch`, as the server applies it: parallel lists
//! merged, unmatched `null`s ignored).

use serde_json::{Map, Value};

use super::PatchError;
use super::schema::{FieldSchema, PatchSchema, PatchStrategy, TypeSchema, UNDESCRIBED_FIELD};
use crate::gofmt;

const DIRECTIVE_MARKER: &str = "$patch";
const DELETE_DIRECTIVE: &str = "delete";
const REPLACE_DIRECTIVE: &str = "replace";
const MERGE_DIRECTIVE: &str = "merge";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

/// Go's names for the types Kubernetes' errors mention.
const MAP_TYPE: &str = "map[string]interface {}";
const SLICE_TYPE: &str = "[]interface {}";

type Object = Map<String, Value>;
type Result<T> = std::result::Result<T, PatchError>;

/// Applies a strategic merge patch to an object of a built-in kind, looked up by API group
/// (`""` for the core group) and kind in [`PatchSchema::builtin`]. A kind without a
/// description (a custom resource) gives [`PatchError::StrategicMergePatchUnsupported`].
///
/// See [`apply_strategic_merge_patch_with_schema`] for the semantics.
pub fn apply_strategic_merge_patch(
    original: &Value,
    patch: &Value,
    group: &str,
    kind: &str,
) -> Result<Value> {
    apply_strategic_merge_patch_with_schema(
        original,
        patch,
        PatchSchema::builtin().lookup(group, kind),
    )
}

/// Applies a strategic merge patch to `original`, an object whose type `schema` describes
/// (`None`: no description, as for custom resources, which gives
/// [`PatchError::StrategicMergePatchUnsupported`]).
///
/// - Objects merge recursively; `null` deletes a member; scalars and lists without a strategy
///   replace.
/// - Lists with the `merge` strategy merge element by element: objects by their merge key
///   (patch elements update the matching element or are added), primitives as a set. As in
///   Kubernetes, the result interleaves the patch's elements (in the patch's order) with the
///   list's other elements (in their former order): an element the list already had goes back
///   near its former place, one it did not have goes before the remaining former elements
///   (`[a, b]` patched with `[c]` gives `[c, a, b]`).
/// - `$patch: replace` replaces the object (or, as a list element, the list) it appears in;
///   `$patch: delete` deletes the object (or the list element with the same merge key).
/// - `$retainKeys: [..]` drops every member of the object not listed.
/// - `$deleteFromPrimitiveList/<field>: [..]` removes those values from a list of primitives.
/// - `$setElementOrder/<field>: [..]` gives the order of the list's elements (kubectl sends it
///   with client-side apply).
///
/// Directives are never stored. A key starting with `$` that is not one of these directives
/// is refused with [`PatchError::UnknownDirective`].
pub fn apply_strategic_merge_patch_with_schema(
    original: &Value,
    patch: &Value,
    schema: Option<&TypeSchema>,
) -> Result<Value> {
    let Some(schema) = schema else {
        return Err(PatchError::StrategicMergePatchUnsupported);
    };
    let patch = match patch {
        Value::Object(map) => map.clone(),
        // Go decodes `null` into an empty patch.
        Value::Null => Object::new(),
        other => {
            return Err(PatchError::StrategicPatchDecode {
                message: format!(
                    "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                    gofmt::json_kind(other)
                ),
            });
        }
    };
    let Value::Object(original) = original else {
        return Err(PatchError::InvalidDocument);
    };
    check_directive_keys(&patch, &Path::ROOT)?;
    let merged = merge_map(original.clone(), patch, Some(schema), &Path::ROOT)?;
    let mut result = Value::Object(merged);
    strip_directives(&mut result);
    Ok(result)
}

// ---- locations, for errors ----

#[derive(Clone, Copy)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// A location in the object, built on the stack as the merge descends.
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    segment: Option<Segment<'a>>,
}

impl<'a> Path<'a> {
    const ROOT: Path<'static> = Path {
        parent: None,
        segment: None,
    };

    fn key<'b>(&'b self, key: &'b str) -> Path<'b> {
        Path {
            parent: Some(self),
            segment: Some(Segment::Key(key)),
        }
    }

    fn index(&self, index: usize) -> Path<'_> {
        Path {
            parent: Some(self),
            segment: Some(Segment::Index(index)),
        }
    }

    fn render(&self) -> String {
        let mut segments = Vec::new();
        let mut current = Some(self);
        while let Some(path) = current {
            if let Some(segment) = path.segment {
                segments.push(segment);
            }
            current = path.parent;
        }
        let mut out = String::new();
        for segment in segments.into_iter().rev() {
            match segment {
                Segment::Key(key) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(key);
                }
                Segment::Index(index) => out.push_str(&format!("[{index}]")),
            }
        }
        out
    }
}

fn invalid_type(path: &Path, expected: &str, actual: &Value) -> PatchError {
    PatchError::InvalidType {
        path: path.render(),
        expected: expected.to_string(),
        actual: gofmt::type_name(actual).to_string(),
    }
}

fn missing_merge_key(path: &Path, merge_key: &str, map: &Value) -> PatchError {
    PatchError::MissingMergeKey {
        path: path.render(),
        merge_key: merge_key.to_string(),
        map: gofmt::v(map),
    }
}

// ---- directives ----

fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE_MARKER
        || key == RETAIN_KEYS_DIRECTIVE
        || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

/// Refuses `$` keys that are not directives (`$ref` and `$schema` are fields of
/// CustomResourceDefinition schemas).
fn check_directive_keys(map: &Object, path: &Path) -> Result<()> {
    for (key, value) in map {
        let child = path.key(key);
        if key.starts_with('$') && !is_directive_key(key) && key != "$ref" && key != "$schema" {
            return Err(PatchError::UnknownDirective {
                path: child.render(),
            });
        }
        check_directive_keys_in(value, &child)?;
    }
    Ok(())
}

fn check_directive_keys_in(value: &Value, path: &Path) -> Result<()> {
    match value {
        Value::Object(map) => check_directive_keys(map, path),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_directive_keys_in(item, &path.index(i))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Drops directive keys left in values Kubernetes copies from the patch as they are (it
/// would drop them when decoding the result into the typed object).
fn strip_directives(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| !is_directive_key(k));
            map.values_mut().for_each(strip_directives);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// Removes `null` members from objects, recursively.
fn discard_null_values(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(discard_null_values);
        }
        Value::Array(items) => items.iter_mut().for_each(discard_null_values),
        _ => {}
    }
}

/// Kubernetes' `removeDirectives`: an object carrying `$patch` disappears (from its parent
/// object or list); `None` when `value` itself does.
fn remove_directives(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) => {
            if map.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            Some(Value::Object(
                map.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

/// The field name after a `$deleteFromPrimitiveList/` or `$setElementOrder/` prefix.
fn extract_key(key: &str, prefix: &str, path: &Path) -> Result<String> {
    match key.split_once('/') {
        Some((head, rest)) if head == prefix => Ok(rest.to_string()),
        _ if prefix == DELETE_FROM_PRIMITIVE_LIST_PREFIX => {
            Err(PatchError::BadPatchFormatForPrimitiveList {
                path: path.render(),
            })
        }
        _ => Err(PatchError::BadPatchFormatForSetElementOrderList {
            path: path.render(),
        }),
    }
}

fn field_of<'s>(schema: Option<&'s TypeSchema>, key: &str) -> &'s FieldSchema {
    schema
        .and_then(|s| s.field(key))
        .unwrap_or(&UNDESCRIBED_FIELD)
}

// ---- maps ----

fn merge_map(
    mut original: Object,
    mut patch: Object,
    schema: Option<&TypeSchema>,
    path: &Path,
) -> Result<Object> {
    if let Some(directive) = patch.get(DIRECTIVE_MARKER) {
        return match directive.as_str() {
            Some(REPLACE_DIRECTIVE) => {
                patch.remove(DIRECTIVE_MARKER);
                Ok(patch)
            }
            Some(DELETE_DIRECTIVE) => Ok(Object::new()),
            _ => Err(PatchError::UnknownPatchType {
                path: path.render(),
                directive: gofmt::s(directive),
                map: gofmt::v(&Value::Object(patch.clone())),
            }),
        };
    }

    apply_retain_keys(&mut original, &mut patch, path)?;
    merge_set_element_order(&mut original, &mut patch, schema, path)?;

    let mut keys: Vec<String> = patch.keys().cloned().collect();
    keys.sort();
    for key in keys {
        let Some(patch_value) = patch.remove(&key) else {
            continue;
        };
        let (field_key, is_delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
            let stripped = extract_key(&key, DELETE_FROM_PRIMITIVE_LIST_PREFIX, path)?;
            (
                if stripped.is_empty() {
                    key.clone()
                } else {
                    stripped
                },
                true,
            )
        } else {
            (key.clone(), false)
        };

        if patch_value.is_null() {
            original.remove(&field_key);
            continue;
        }

        let same_type = original
            .get(&field_key)
            .map(|current| gofmt::type_name(current) == gofmt::type_name(&patch_value));
        if same_type != Some(true) {
            // Absent, or of another type: the patch's value is taken (but a deletion list
            // never lands in the object).
            if !is_delete_list {
                adopt(&mut original, field_key, patch_value);
            }
            continue;
        }

        let field = field_of(schema, &field_key);
        let child = path.key(&field_key);
        let Some(slot) = original.get_mut(&field_key) else {
            continue;
        };
        let current = std::mem::take(slot);
        *slot =
            match (current, patch_value) {
                (Value::Object(current), Value::Object(patch_map)) => {
                    if field.strategy() == PatchStrategy::Replace {
                        Value::Object(patch_map)
                    } else {
                        Value::Object(merge_map(current, patch_map, field.schema(), &child)?)
                    }
                }
                (Value::Array(current), Value::Array(patch_list)) => Value::Array(
                    merge_slice_handler(current, patch_list, field, is_delete_list, &child)?,
                ),
                (_, scalar) => scalar,
            };
    }
    Ok(original)
}

/// Takes a patch value where the object had nothing to merge it with.
fn adopt(original: &mut Object, key: String, mut value: Value) {
    discard_null_values(&mut value);
    match remove_directives(value) {
        Some(value) => {
            original.insert(key, value);
        }
        None => {
            original.remove(&key);
        }
    }
}

fn apply_retain_keys(original: &mut Object, patch: &mut Object, path: &Path) -> Result<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS_DIRECTIVE) else {
        return Ok(());
    };
    let Value::Array(list) = retain else {
        return Err(PatchError::BadPatchFormatForRetainKeys {
            path: path.render(),
        });
    };
    let retained = |key: &str| list.iter().any(|v| v.as_str() == Some(key));
    for (key, value) in patch.iter() {
        if value.is_null()
            || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
        {
            continue;
        }
        if !retained(key) {
            return Err(PatchError::BadPatchFormatForRetainKeys {
                path: path.render(),
            });
        }
    }
    original.retain(|key, _| retained(key));
    Ok(())
}

/// Merges each list that has a `$setElementOrder/<field>` directive and puts its elements in
/// that order; the list is then done (removed from the patch).
fn merge_set_element_order(
    original: &mut Object,
    patch: &mut Object,
    schema: Option<&TypeSchema>,
    path: &Path,
) -> Result<()> {
    let mut keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX))
        .cloned()
        .collect();
    keys.sort();
    for key in keys {
        let Some(order) = patch.remove(&key) else {
            continue;
        };
        let order = match order {
            Value::Array(order) => order,
            other => return Err(invalid_type(&path.key(&key), SLICE_TYPE, &other)),
        };
        let field_key = extract_key(&key, SET_ELEMENT_ORDER_PREFIX, path)?;
        let child = path.key(&field_key);
        let original_list = match original.get(&field_key) {
            None => None,
            Some(Value::Array(list)) => Some(list.clone()),
            Some(other) => return Err(invalid_type(&child, SLICE_TYPE, other)),
        };
        let patch_list = match patch.get(&field_key) {
            None => None,
            Some(Value::Array(list)) => Some(list.clone()),
            Some(other) => return Err(invalid_type(&child, SLICE_TYPE, other)),
        };
        let field = field_of(schema, &field_key);
        let merge_key = field.merge_key().unwrap_or("");
        validate_patch_with_set_order_list(
            patch_list.as_deref().unwrap_or(&[]),
            &order,
            merge_key,
            &child,
        )?;

        let merged = match (&original_list, &patch_list) {
            (Some(current), None) => current.clone(),
            (None, Some(list)) => match remove_directives(Value::Array(list.clone())) {
                Some(Value::Array(list)) => list,
                _ => continue,
            },
            (Some(current), Some(list)) => {
                merge_slice_handler(current.clone(), list.clone(), field, false, &child)?
            }
            (None, None) => continue,
        };

        let (patch_items, server_only) = if merge_key.is_empty() {
            partition_primitives(merged, &order)
        } else {
            partition_maps(merged, &order, merge_key, &child)?
        };
        let patch_list = patch_list.unwrap_or_default();
        let server_order = match original_list {
            Some(current) if field.strategy() == PatchStrategy::Merge && !merge_key.is_empty() => {
                order_seen_after_merge(current, &patch_list, merge_key)
            }
            other => other.unwrap_or_default(),
        };
        let kind = slice_element_type(&[&server_order, &patch_list], &child)?;
        let ordered = normalize_element_order(
            patch_items,
            server_only,
            &order,
            &server_order,
            merge_key,
            kind,
            &child,
        )?;
        original.insert(field_key.clone(), Value::Array(ordered));
        patch.remove(&field_key);
    }
    Ok(())
}

/// The live list as Kubernetes sees it once the merge is done: there the merge deletes and
/// appends elements in place in the live list's storage, so its former positions then hold
/// the shifted survivors and, after them, the appended elements. This view is what orders the
/// elements the patch does not mention, and Kubernetes' own tests pin the result.
fn order_seen_after_merge(mut storage: Vec<Value>, patch: &[Value], merge_key: &str) -> Vec<Value> {
    let capacity = storage.len();
    if !storage.iter().chain(patch).all(Value::is_object) {
        return storage;
    }
    let key_of = |v: &Value| v.get(merge_key).cloned();
    let mut len = capacity;
    let mut replaced = false;
    for item in patch {
        match item.get(DIRECTIVE_MARKER).and_then(Value::as_str) {
            Some(DELETE_DIRECTIVE) => {
                let Some(wanted) = item.get(merge_key) else {
                    continue;
                };
                while let Some(index) = storage[..len]
                    .iter()
                    .position(|v| v.get(merge_key) == Some(wanted))
                {
                    // Go's `append(s[:i], s[i+1:]...)`: the survivors shift left and the last
                    // slot keeps its old value.
                    for i in index..len - 1 {
                        storage.swap(i, i + 1);
                    }
                    if index + 1 < len {
                        storage[len - 1] = storage[len - 2].clone();
                    }
                    len -= 1;
                }
            }
            Some(REPLACE_DIRECTIVE) => replaced = true,
            _ => {}
        }
    }
    if replaced {
        return storage;
    }
    for item in patch.iter().filter(|v| !has_directive_marker(v)) {
        let wanted = key_of(item);
        if storage[..len].iter().any(|v| key_of(v) == wanted) {
            continue;
        }
        if len >= capacity {
            break;
        }
        storage[len] = item.clone();
        len += 1;
    }
    storage
}

/// Checks that the patch list's elements (deletions aside) appear in the `$setElementOrder`
/// list, in the same relative order.
fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    order: &[Value],
    merge_key: &str,
    path: &Path,
) -> Result<()> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let kept = if merge_key.is_empty() {
        patch_list.to_vec()
    } else {
        extract_to_delete_items(patch_list.to_vec(), path)?.0
    };
    let (mut patch_index, mut order_index) = (0, 0);
    while let (Some(item), Some(ordered)) = (kept.get(patch_index), order.get(order_index)) {
        if has_directive_marker(item) {
            patch_index += 1;
            continue;
        }
        if merge_key_value_equal(item, ordered, merge_key, path)? {
            patch_index += 1;
        }
        order_index += 1;
    }
    if patch_index < kept.len() && order_index >= order.len() {
        return Err(PatchError::SetElementOrderMismatch {
            path: path.render(),
            patch_list: gofmt::v(&Value::Array(patch_list.to_vec())),
            order_list: gofmt::v(&Value::Array(order.to_vec())),
        });
    }
    Ok(())
}

fn has_directive_marker(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
}

fn merge_key_value_equal(
    left: &Value,
    right: &Value,
    merge_key: &str,
    path: &Path,
) -> Result<bool> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let key_of = |value: &Value| -> Result<Value> {
        let Value::Object(map) = value else {
            return Err(invalid_type(path, MAP_TYPE, value));
        };
        map.get(merge_key)
            .cloned()
            .ok_or_else(|| missing_merge_key(path, merge_key, value))
    };
    Ok(key_of(left)? == key_of(right)?)
}

// ---- lists ----

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: &FieldSchema,
    is_delete_list: bool,
    path: &Path,
) -> Result<Vec<Value>> {
    if field.strategy() == PatchStrategy::Merge || is_delete_list {
        merge_slice(original, patch, field, is_delete_list, path)
    } else {
        Ok(patch)
    }
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: &FieldSchema,
    is_delete_list: bool,
    path: &Path,
) -> Result<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = slice_element_type(&[&original, &patch], path)?;
    let merge_key = field.merge_key().unwrap_or("");

    let (merged, patch, original) = if kind != MAP_TYPE {
        if is_delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for value in original.iter().chain(patch.iter()) {
            if !merged.contains(value) {
                merged.push(value.clone());
            }
        }
        (merged, patch, original)
    } else {
        if merge_key.is_empty() {
            return Err(PatchError::MergeKeyRequired {
                path: path.render(),
                type_name: field.element_kind_name().to_string(),
            });
        }
        let (original, patch) =
            merge_slice_with_special_elements(original, patch, merge_key, path)?;
        let merged = merge_slice_without_special_elements(
            original.clone(),
            &patch,
            merge_key,
            field.schema(),
            path,
        )?;
        (merged, patch, original)
    };

    let (patch_items, server_only) = if merge_key.is_empty() {
        partition_primitives(merged, &patch)
    } else {
        partition_maps(merged, &patch, merge_key, path)?
    };
    normalize_element_order(
        patch_items,
        server_only,
        &patch,
        &original,
        merge_key,
        kind,
        path,
    )
}

/// The Go type shared by every element of the lists; lists of lists are not supported.
fn slice_element_type(lists: &[&[Value]], path: &Path) -> Result<&'static str> {
    let mut found: Option<&'static str> = None;
    for list in lists {
        for value in list.iter() {
            let current = gofmt::type_name(value);
            match found {
                None => {
                    if value.is_array() {
                        return Err(PatchError::NoListOfLists {
                            path: path.render(),
                        });
                    }
                    found = Some(current);
                }
                Some(previous) if previous != current => {
                    return Err(PatchError::ListElementTypesDiffer {
                        path: path.render(),
                        lists: gofmt::v_lists(lists),
                    });
                }
                Some(_) => {}
            }
        }
    }
    found.ok_or_else(|| PatchError::NoElements {
        path: path.render(),
    })
}

/// Applies the `$patch` elements of a patch list of objects: deletions remove the matching
/// elements, `replace` makes the rest of the patch list the whole list. Returns the updated
/// original and the patch's other elements.
fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
    path: &Path,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Value::Object(map) = &item else {
            return Err(invalid_type(path, MAP_TYPE, &item));
        };
        let Some(directive) = map.get(DIRECTIVE_MARKER) else {
            plain.push(item);
            continue;
        };
        match directive.as_str() {
            Some(DELETE_DIRECTIVE) => match map.get(merge_key) {
                Some(value) => {
                    while let Some(index) = find_map_in_slice(&original, merge_key, value, path)? {
                        original.remove(index);
                    }
                }
                None => return Err(missing_merge_key(path, merge_key, &item)),
            },
            Some(REPLACE_DIRECTIVE) => replace = true,
            Some(MERGE_DIRECTIVE) => {
                return Err(PatchError::MergeDirectiveInList {
                    path: path.render(),
                });
            }
            _ => {
                return Err(PatchError::UnknownPatchType {
                    path: path.render(),
                    directive: gofmt::s(directive),
                    map: gofmt::v(&item),
                });
            }
        }
    }
    Ok(if replace {
        (plain, Vec::new())
    } else {
        (original, plain)
    })
}

/// Merges each patch element into the original element with the same merge key, or appends
/// it.
fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    schema: Option<&TypeSchema>,
    path: &Path,
) -> Result<Vec<Value>> {
    for item in patch {
        let Value::Object(map) = item else {
            return Err(invalid_type(path, MAP_TYPE, item));
        };
        let Some(value) = map.get(merge_key) else {
            return Err(missing_merge_key(path, merge_key, item));
        };
        match find_map_in_slice(&original, merge_key, value, path)? {
            Some(index) => {
                let Some(slot) = original.get_mut(index) else {
                    continue;
                };
                if let Value::Object(current) = std::mem::take(slot) {
                    *slot =
                        Value::Object(merge_map(current, map.clone(), schema, &path.index(index))?);
                }
            }
            None => original.push(item.clone()),
        }
    }
    Ok(original)
}

/// The index of the first object whose merge key has `value`.
fn find_map_in_slice(
    list: &[Value],
    merge_key: &str,
    value: &Value,
    path: &Path,
) -> Result<Option<usize>> {
    for (index, item) in list.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(PatchError::ListElementNotAMap {
                path: path.render(),
                index,
            });
        };
        if map.get(merge_key) == Some(value) {
            return Ok(Some(index));
        }
    }
    Ok(None)
}

/// Splits `merged` into the elements present in `by` and the others.
fn partition_primitives(merged: Vec<Value>, by: &[Value]) -> (Vec<Value>, Vec<Value>) {
    merged.into_iter().partition(|v| by.contains(v))
}

/// Splits `merged` into the elements whose merge key appears in `by` and the others.
fn partition_maps(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
    path: &Path,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut present = Vec::with_capacity(merged.len());
    let mut absent = Vec::with_capacity(merged.len());
    for item in merged {
        let Value::Object(map) = &item else {
            return Err(invalid_type(path, MAP_TYPE, &item));
        };
        let Some(value) = map.get(merge_key) else {
            return Err(missing_merge_key(path, merge_key, &item));
        };
        if find_map_in_slice(by, merge_key, value, path)?.is_some() {
            present.push(item);
        } else {
            absent.push(item);
        }
    }
    Ok((present, absent))
}

/// Orders the patch's elements as `patch_order` and the others as `server_order`, then
/// interleaves them.
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: &str,
    path: &Path,
) -> Result<Vec<Value>> {
    let patch_items = normalize_slice_order(patch_items, patch_order, merge_key, kind, path)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind, path)?;
    Ok(merge_sorted_slice(
        server_only,
        patch_items,
        server_order,
        merge_key,
        kind,
    ))
}

fn normalize_slice_order(
    items: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: &str,
    path: &Path,
) -> Result<Vec<Value>> {
    let (mut items, deletions) = if kind == MAP_TYPE {
        validate_merge_key_in_lists(merge_key, &[&items, order], path)?;
        extract_to_delete_items(items, path)?
    } else {
        (items, Vec::new())
    };
    items.sort_by_key(|item| index_of(order, item, merge_key, kind).unwrap_or(usize::MAX));
    items.extend(deletions);
    Ok(items)
}

fn validate_merge_key_in_lists(merge_key: &str, lists: &[&[Value]], path: &Path) -> Result<()> {
    for item in lists.iter().flat_map(|list| list.iter()) {
        let Value::Object(map) = item else {
            return Err(invalid_type(path, MAP_TYPE, item));
        };
        if !map.contains_key(merge_key) {
            return Err(missing_merge_key(path, merge_key, item));
        }
    }
    Ok(())
}

/// Splits a list of objects into those without and those with `$patch: delete`.
fn extract_to_delete_items(list: Vec<Value>, path: &Path) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut kept = Vec::with_capacity(list.len());
    let mut deletions = Vec::new();
    for item in list {
        let Value::Object(map) = &item else {
            return Err(invalid_type(path, MAP_TYPE, &item));
        };
        if map.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some(DELETE_DIRECTIVE) {
            deletions.push(item);
        } else {
            kept.push(item);
        }
    }
    Ok((kept, deletions))
}

/// The position of `item` in `list`: by merge key for objects, by value otherwise.
fn index_of(list: &[Value], item: &Value, merge_key: &str, kind: &str) -> Option<usize> {
    if kind == MAP_TYPE {
        let key_of = |v: &Value| v.as_object().and_then(|m| m.get(merge_key)).cloned();
        let wanted = key_of(item);
        list.iter().position(|v| key_of(v) == wanted)
    } else {
        list.iter().position(|v| v == item)
    }
}

/// Interleaves two ordered lists: an element of `left` goes first when both elements appear
/// in `server_order` and it comes earlier there.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: &str,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (index_of(server_order, l, merge_key, kind), index_of(server_order, r, merge_key, kind)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}
