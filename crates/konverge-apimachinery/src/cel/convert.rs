//! Custom-object JSON as CEL values, typed by the schema as Kubernetes types them: objects with
//! properties become maps keyed by escaped property names, `additionalProperties` maps keep
//! their keys, integers are `int`, numbers `double`, int-or-string either, and strings of format
//! `date-time`/`date` are timestamps and of format `duration` durations.

use std::collections::HashMap;
use std::sync::Arc;

use cel::Value as CelValue;
use cel::objects::{Key, Map};
use serde_json::Value;

/// The CEL reserved words that are escaped as `__{word}__` when used as property names.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Whether `name` is a CEL identifier that is not a reserved word (`isCELIdentifier`: what a
/// policy's variable may be named).
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic());
    first_ok && chars.all(|c| c == '_' || c.is_ascii_alphanumeric()) && !RESERVED.contains(&name)
}

/// A property name as CEL sees it (`foo-bar` → `foo__dash__bar`), or `None` when it has
/// characters CEL cannot spell (such a property is left out).
pub(crate) fn escape(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

/// The property name an escaped CEL field name stands for (`foo__dash__bar` → `foo-bar`).
pub(crate) fn unescape(name: &str) -> String {
    if let Some(word) = name.strip_prefix("__").and_then(|n| n.strip_suffix("__"))
        && RESERVED.contains(&word)
    {
        return word.to_string();
    }
    name.replace("__underscores__", "__")
        .replace("__dot__", ".")
        .replace("__dash__", "-")
        .replace("__slash__", "/")
}

/// The schema's `type`, or `""` when it has none (int-or-string, preserved unknown fields).
pub(crate) fn schema_type(schema: &Value) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or("")
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// `value` as the CEL value a rule sees as `self`; `resource_root` when the value is a whole
/// object (or an embedded resource), whose `metadata` exposes only `name` and `generateName`.
pub(crate) fn to_cel(value: &Value, schema: &Value, resource_root: bool) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match schema_type(schema) {
            "number" => CelValue::Float(n.as_f64().unwrap_or(0.0)),
            _ => match n.as_i64() {
                Some(i) => CelValue::Int(i),
                None => match n.as_u64() {
                    Some(u) => CelValue::UInt(u),
                    None => CelValue::Float(n.as_f64().unwrap_or(0.0)),
                },
            },
        },
        Value::String(s) => string(s, schema),
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&Value::Null);
            let embedded = flag(item_schema, "x-kubernetes-embedded-resource");
            CelValue::List(Arc::new(
                items
                    .iter()
                    .map(|item| to_cel(item, item_schema, embedded))
                    .collect(),
            ))
        }
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let root = resource_root || flag(schema, "x-kubernetes-embedded-resource");
            let mut out: HashMap<Key, CelValue> = HashMap::with_capacity(map.len());
            if properties.is_some() || root {
                for (name, item) in map {
                    let Some(escaped) = escape(name) else {
                        continue;
                    };
                    let item_schema = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                    let embedded = flag(item_schema, "x-kubernetes-embedded-resource");
                    let converted = if root && name == "metadata" {
                        metadata(item)
                    } else {
                        to_cel(item, item_schema, embedded)
                    };
                    out.insert(Key::from(escaped), converted);
                }
            } else {
                let item_schema = additional.unwrap_or(&Value::Null);
                let embedded = flag(item_schema, "x-kubernetes-embedded-resource");
                for (name, item) in map {
                    out.insert(
                        Key::from(name.as_str()),
                        to_cel(item, item_schema, embedded),
                    );
                }
            }
            CelValue::Map(Map { map: Arc::new(out) })
        }
    }
}

/// The part of an object's `metadata` that rules see: `name` and `generateName`.
fn metadata(value: &Value) -> CelValue {
    let mut out: HashMap<Key, CelValue> = HashMap::new();
    if let Value::Object(map) = value {
        for name in ["name", "generateName"] {
            if let Some(Value::String(s)) = map.get(name) {
                out.insert(Key::from(name), CelValue::String(Arc::new(s.clone())));
            }
        }
    }
    CelValue::Map(Map { map: Arc::new(out) })
}

fn string(s: &str, schema: &Value) -> CelValue {
    if schema_type(schema) == "string" {
        match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => {
                if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
                    return CelValue::Timestamp(t);
                }
            }
            Some("date") => {
                if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                    && let Some(t) = d.and_hms_opt(0, 0, 0)
                {
                    return CelValue::Timestamp(t.and_utc().fixed_offset());
                }
            }
            Some("duration") => {
                if let Some(d) = parse_duration(s) {
                    return CelValue::Duration(d);
                }
            }
            _ => {}
        }
    }
    CelValue::String(Arc::new(s.to_string()))
}

/// A Go duration (`1h30m`, `-1.5s`, `300ms`).
fn parse_duration(s: &str) -> Option<chrono::Duration> {
    crate::duration::parse_nanos(s)
        .ok()
        .map(chrono::Duration::nanoseconds)
}
