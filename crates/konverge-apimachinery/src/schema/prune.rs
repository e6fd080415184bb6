//! Pruning of unknown fields (`pruning.PruneWithOptions`), of non-nullable `null`s without a
//! default (`defaulting.PruneNonNullableNullsWithoutDefaults`) and defaulting
//! (`defaulting.Default`).

use serde_json::Value;

use super::Structural;

const MAX_DEPTH: usize = 10_000;

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Prunes a whole object: unknown fields (reported), then non-nullable nulls.
pub(super) fn prune_root(s: &Structural, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    let mut parent = String::new();
    let mut root = Some(s);
    let embedded;
    if !s.embedded_resource {
        let mut clone = s.clone();
        clone.embedded_resource = true;
        embedded = clone;
        root = Some(&embedded);
    }
    prune(obj, root, &mut parent, &mut unknown, 0);
    unknown.sort();
    prune_nulls(obj, Some(s), 0);
    unknown
}

/// Prunes unknown fields of `obj` (a default value) without reporting them.
pub(super) fn prune_unknown(s: &Structural, obj: &mut Value, is_resource_root: bool) {
    let mut unknown = Vec::new();
    let mut parent = String::new();
    let mut clone;
    let mut node = s;
    if is_resource_root && !s.embedded_resource {
        clone = s.clone();
        clone.embedded_resource = true;
        node = &clone;
    }
    prune(obj, Some(node), &mut parent, &mut unknown, 0);
}

fn append_key(parent: &mut String, k: &str) {
    if !parent.is_empty() {
        parent.push('.');
    }
    parent.push_str(k);
}

fn record(parent: &str, k: &str, unknown: &mut Vec<String>) {
    let mut p = parent.to_string();
    append_key(&mut p, k);
    unknown.push(p);
}

fn prune(
    x: &mut Value,
    s: Option<&Structural>,
    parent: &mut String,
    unknown: &mut Vec<String>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(s) = s
        && s.preserve_unknown_fields()
    {
        skip_prune(x, s, parent, unknown, depth);
        return;
    }
    let len = parent.len();
    match x {
        Value::Object(obj) => {
            let Some(s) = s else {
                for k in obj.keys() {
                    record(parent, k, unknown);
                }
                obj.clear();
                return;
            };
            let keys: Vec<String> = obj.keys().cloned().collect();
            for k in keys {
                if s.embedded_resource && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let sub = match s.properties.get(&k) {
                    Some(p) => Some(Some(p)),
                    None => match &s.additional_properties {
                        Some(super::AdditionalProperties::Schema(ap)) => Some(Some(&**ap)),
                        Some(super::AdditionalProperties::Bool(_)) => Some(None),
                        None => None,
                    },
                };
                match sub {
                    Some(sub) => {
                        append_key(parent, &k);
                        if let Some(v) = obj.get_mut(&k) {
                            prune(v, sub, parent, unknown, depth + 1);
                        }
                        parent.truncate(len);
                    }
                    None => {
                        if !META_FIELDS.contains(&k.as_str()) || !parent.is_empty() {
                            record(parent, &k, unknown);
                        }
                        obj.remove(&k);
                    }
                }
            }
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items());
            for (i, v) in items.iter_mut().enumerate() {
                parent.push_str(&format!("[{i}]"));
                prune(v, item_schema, parent, unknown, depth + 1);
                parent.truncate(len);
            }
        }
        _ => {}
    }
}

fn skip_prune(
    x: &mut Value,
    s: &Structural,
    parent: &mut String,
    unknown: &mut Vec<String>,
    depth: usize,
) {
    let len = parent.len();
    match x {
        Value::Object(obj) => {
            for (k, v) in obj.iter_mut() {
                if s.embedded_resource && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let sub = match s.properties.get(k) {
                    Some(p) => Some(Some(p)),
                    None => match &s.additional_properties {
                        Some(super::AdditionalProperties::Schema(ap)) => Some(Some(&**ap)),
                        Some(super::AdditionalProperties::Bool(_)) => Some(None),
                        None => None,
                    },
                };
                if let Some(sub) = sub {
                    append_key(parent, k);
                    prune(v, sub, parent, unknown, depth + 1);
                    parent.truncate(len);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items() {
                for (i, v) in items.iter_mut().enumerate() {
                    parent.push_str(&format!("[{i}]"));
                    skip_prune(v, is, parent, unknown, depth + 1);
                    parent.truncate(len);
                }
            }
        }
        _ => {}
    }
}

fn schema_for<'a>(s: Option<&'a Structural>, k: &str) -> Option<&'a Structural> {
    let s = s?;
    s.properties.get(k).or_else(|| s.additional_properties())
}

fn non_nullable_null_without_default(x: &Value, s: Option<&Structural>) -> bool {
    x.is_null() && s.is_some_and(|s| !s.nullable && s.default.is_none())
}

fn prune_nulls(x: &mut Value, s: Option<&Structural>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(obj) => {
            obj.retain(|k, v| !non_nullable_null_without_default(v, schema_for(s, k)));
            for (k, v) in obj.iter_mut() {
                prune_nulls(v, schema_for(s, k), depth + 1);
            }
        }
        Value::Array(items) => {
            let is = s.and_then(|s| s.items());
            for v in items {
                prune_nulls(v, is, depth + 1);
            }
        }
        _ => {}
    }
}

fn non_nullable_null(x: &Value, s: &Structural) -> bool {
    x.is_null() && !s.nullable
}

/// `defaulting.Default`.
pub(super) fn default(s: &Structural, x: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(obj) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else {
                    continue;
                };
                match obj.get(k) {
                    Some(v) if !non_nullable_null(v, prop) => {}
                    _ => {
                        obj.insert(k.clone(), d.clone());
                    }
                }
            }
            for (k, v) in obj.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    default(prop, v, depth + 1);
                } else if let Some(ap) = s.additional_properties() {
                    if non_nullable_null(v, ap)
                        && let Some(d) = &ap.default
                    {
                        *v = d.clone();
                    }
                    default(ap, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            let Some(is) = s.items() else {
                return;
            };
            for v in items.iter_mut() {
                if non_nullable_null(v, is)
                    && let Some(d) = &is.default
                {
                    *v = d.clone();
                }
                default(is, v, depth + 1);
            }
        }
        _ => {}
    }
}
