//! JSON as kube-apiserver writes it, for answers and for the watch cache alike: objects with
//! their keys in kube-apiserver's order ([`GoOrder`]), and watch lines around them.
//!
//! The order: Go's encoder follows
//! the field order of the Go structs (`kind`, `apiVersion`, `metadata`, `spec`, `status`;
//! `ObjectMeta` from `name` to `managedFields`), and clients notice (error messages that
//! quote a column, byte-for-byte comparisons, people reading `-o json`).
//!
//! The envelope and metadata types are ordered as Go orders them; fields of a kind's own
//! types follow in name order.

use bytes::Bytes;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// Where a JSON object sits, which decides its key order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// An API object, a list or a `Status`: `kind`, `apiVersion`, `metadata` first.
    Object,
    /// `ObjectMeta` / `ListMeta`.
    Meta,
    /// An `ownerReferences` entry.
    OwnerReference,
    /// A `managedFields` entry.
    ManagedFields,
    /// `Status.details`.
    StatusDetails,
    /// A `Status.details.causes` entry.
    Cause,
    /// Anything else: name order (inside, everything is in name order too, except the
    /// objects embedded in it).
    Other,
}

const OBJECT: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "spec",
    "status",
    "message",
    "reason",
    "details",
    "code",
    "items",
];
const META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "continue",
    "remainingItemCount",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];
const OWNER_REFERENCE: &[&str] = &[
    "apiVersion",
    "kind",
    "name",
    "uid",
    "controller",
    "blockOwnerDeletion",
];
const MANAGED_FIELDS: &[&str] = &[
    "manager",
    "operation",
    "apiVersion",
    "time",
    "fieldsType",
    "fieldsV1",
    "subresource",
];
const STATUS_DETAILS: &[&str] = &[
    "name",
    "group",
    "kind",
    "uid",
    "causes",
    "retryAfterSeconds",
];
const CAUSE: &[&str] = &["reason", "message", "field"];

impl Shape {
    fn order(self) -> &'static [&'static str] {
        match self {
            Shape::Object => OBJECT,
            Shape::Meta => META,
            Shape::OwnerReference => OWNER_REFERENCE,
            Shape::ManagedFields => MANAGED_FIELDS,
            Shape::StatusDetails => STATUS_DETAILS,
            Shape::Cause => CAUSE,
            Shape::Other => &[],
        }
    }

    /// The shape of the value under `key` of an object of this shape.
    fn child(self, key: &str, value: &Value) -> Shape {
        match (self, key) {
            (Shape::Object, "metadata") => Shape::Meta,
            (Shape::Object, "items") => Shape::Object,
            (Shape::Object, "details")
                if value.get("causes").is_some() || value.get("name").is_some() =>
            {
                Shape::StatusDetails
            }
            (Shape::Object, "object") => Shape::Object,
            (Shape::Meta, "ownerReferences") => Shape::OwnerReference,
            (Shape::Meta, "managedFields") => Shape::ManagedFields,
            (Shape::StatusDetails, "causes") => Shape::Cause,
            // Objects embedded in others (a Table row's object, a template's metadata).
            (_, "metadata") if value.get("name").is_some() || value.get("labels").is_some() => {
                Shape::Meta
            }
            (_, "object") if value.get("kind").is_some() => Shape::Object,
            _ => Shape::Other,
        }
    }
}

/// `value`, serialized as kube-apiserver orders an API object, list or `Status`.
pub(crate) struct GoOrder<'a>(pub(crate) &'a Value);

struct Shaped<'a> {
    value: &'a Value,
    shape: Shape,
}

impl Serialize for GoOrder<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Shaped {
            value: self.0,
            shape: Shape::Object,
        }
        .serialize(serializer)
    }
}

impl Serialize for Shaped<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.value {
            Value::Object(map) => {
                let order = self.shape.order();
                let mut keys: Vec<(&String, &Value)> = map.iter().collect();
                if !order.is_empty() {
                    // Known keys in Go's order, the others after them in name order (the map
                    // iterates in name order, and the sort is stable).
                    keys.sort_by_key(|(k, _)| {
                        order.iter().position(|o| o == k).unwrap_or(order.len())
                    });
                }
                let mut out = serializer.serialize_map(Some(keys.len()))?;
                for (key, value) in keys {
                    out.serialize_entry(
                        key,
                        &Shaped {
                            value,
                            shape: self.shape.child(key, value),
                        },
                    )?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Shaped {
                        value: item,
                        shape: self.shape,
                    })?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

/// `object` as JSON, keys in kube-apiserver's order, appended to `out`: what every answer
/// holding an API object writes, and what the watch cache keeps of each object.
pub(crate) fn write_object_json(out: &mut Vec<u8>, object: &Value) -> serde_json::Result<()> {
    serde_json::to_writer(out, &GoOrder(object))
}

/// The start of a JSON watch line, up to its object: `{"type":"ADDED","object":`.
fn watch_line_head(out: &mut Vec<u8>, kind: &str) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
}

/// How many bytes an object's JSON as served, framed as a watch line, takes beyond its
/// stored JSON: the line's frame and `,"resourceVersion":"…"`.
pub(crate) const ENCODING_SLACK: usize = 96;

/// The end of a JSON watch line, after its object.
const WATCH_LINE_TAIL: &[u8] = b"}\n";

/// A JSON watch line of type `kind` around `object`, and where the object's JSON lies in it
/// (the watch cache keeps the object as a slice of the line, so both share one buffer).
pub(crate) fn encode_watch_line(
    kind: &str,
    object: &Value,
    size_hint: usize,
) -> serde_json::Result<(Bytes, std::ops::Range<usize>)> {
    // Room for the line around the object and a resourceVersion the stored form lacks, so
    // the buffer (kept by the watch cache) is not reallocated to twice its size.
    let mut line = Vec::with_capacity(size_hint + ENCODING_SLACK);
    watch_line_head(&mut line, kind);
    let start = line.len();
    write_object_json(&mut line, object)?;
    let end = line.len();
    line.extend_from_slice(WATCH_LINE_TAIL);
    Ok((Bytes::from(line), start..end))
}

/// A JSON watch line of type `kind` around an object already written as JSON.
pub(crate) fn watch_line_around(kind: &str, object_json: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object_json.len() + 32);
    watch_line_head(&mut line, kind);
    line.extend_from_slice(object_json);
    line.extend_from_slice(WATCH_LINE_TAIL);
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_read_in_go_struct_order() {
        let service = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "status": {"loadBalancer": {}},
            "spec": {"type": "ClusterIP", "ports": [{"port": 443, "name": "https"}]},
            "metadata": {
                "uid": "u", "name": "kubernetes", "namespace": "default",
                "resourceVersion": "1", "creationTimestamp": "t",
                "labels": {"provider": "kubernetes", "component": "apiserver"},
                "ownerReferences": [{"uid": "o", "name": "n", "kind": "K", "apiVersion": "v1"}],
            },
        });
        let text = serde_json::to_string(&GoOrder(&service)).unwrap();
        assert!(text.starts_with(r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"kubernetes","namespace":"default","uid":"u","resourceVersion":"1","creationTimestamp":"t","labels":{"component":"apiserver","provider":"kubernetes"},"ownerReferences":[{"apiVersion":"v1","kind":"K","name":"n","uid":"o"}]},"spec":"#), "{text}");
        assert!(text.ends_with(r#""status":{"loadBalancer":{}}}"#), "{text}");
    }
}
