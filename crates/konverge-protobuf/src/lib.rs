//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) both ways. Request bodies,
//! which client-go typed clients — and so kubectl, controller-runtime and most Go programs —
//! send for built-in types since Kubernetes 1.32, decode into the JSON the same client would
//! have sent as `application/json`: the JSON Go's `encoding/json` writes for the Go object
//! the body encodes, which is also what kube-apiserver works from. Answers encode the other
//! way, for the clients that prefer protobuf: objects byte for byte as Go's encoder writes
//! them, lists, `Status` errors and watch frames.
//!
//! # Where to start
//!
//! - [`encode()`], [`encode_list`], [`encode_status`], [`watch_frame`]: answers (the `k8s\0`
//!   prefix and `runtime.Unknown` envelope included); [`can_encode`]: whether a kind has an
//!   encoding. `src/encode.rs` walks the same table as the decoder, the other way.
//!   [`encode_item`], [`list_head`], [`list_item_prefix`], [`LIST_TAIL`]: the same list in
//!   pieces, for a server that keeps each object's message and writes a list as it is sent.
//! - [`decode()`] / [`decode_with_defaults`]: a whole body (the `k8s\0` prefix, the
//!   `runtime.Unknown` envelope and the object) → [`TypeMeta`] and the object's JSON,
//!   `apiVersion` and `kind` included. [`decode_object`]: the object's message alone.
//! - [`supports`] / [`kinds`]: which kinds there is a table for; [`is_protobuf`]: the prefix.
//! - [`DecodeError`]: what is wrong and at which field path; [`DecodeError::is_unsupported_kind`]
//!   separates 415 from 400 answers.
//!
//! # How it works
//!
//! - `src/table.rs` is generated (do not edit): for every protobuf message reachable from the
//!   supported kinds, its fields' numbers, protobuf types, JSON names and Go JSON semantics
//!   (the vocabulary is in `src/schema.rs`). The generator, `generator/mod.rs`, reads the
//!   prost sources of the `k8s-pb` crate (field numbers and types), the `k8s-openapi` JSON
//!   schemas (JSON names, matched to protobuf names ignoring case and punctuation) and
//!   `generator/go-fields.txt` (which Go fields are pointers, `omitempty` or inline,
//!   extracted from the Kubernetes Go sources). Run it with `cargo run -p konverge-protobuf
//!   --example generate`; `tests/table.rs` fails when the committed table is stale. The list
//!   of supported kinds is `ROOTS` in the generator.
//! - `src/wire.rs` reads the protobuf wire format; `src/decode.rs` walks a message with the
//!   table and builds JSON; `src/gotime.rs` formats times and durations as Go does.
//! - `examples/decode.rs` prints the JSON of a body saved to a file (debugging aid).
//! - Tests: `tests/kubectl.rs` (bodies captured from a real kubectl decode to exactly what
//!   `kubectl create … --dry-run=client -o json` prints), `tests/roundtrip.rs` (every kind,
//!   built with k8s-pb + prost, against k8s-openapi), `tests/malformed.rs` (errors, limits,
//!   a mutation fuzz loop), `tests/table.rs` (the committed table is current).
//!
//! # Fidelity
//!
//! Go's protobuf encoder writes every non-pointer field, zero or not, and the JSON encoder
//! then drops the zero ones tagged `omitempty`; the decoder mirrors both, so a body from
//! client-go decodes to exactly what `kubectl create … --dry-run=client -o json` prints (the
//! tests check this against kubectl). Fields the message lacks get what Go would write for
//! the zero value (`"metadata": {"creationTimestamp": null}`, `"status": {}`, `null` for nil
//! pointers and slices without `omitempty`). Known differences from kube-apiserver:
//!
//! - Quantities are passed through as sent (Go re-canonicalizes them; client-go already
//!   sends the canonical form).
//! - A `RawExtension` holding CBOR (rather than JSON) is rejected.
//! - Fields newer than the served API version (present in `k8s-pb`, absent from the
//!   `k8s-openapi` schemas) are skipped like unknown fields, as kube-apiserver of that
//!   version would skip them.
//! - Nesting is limited to [`MAX_DEPTH`] messages, and the output to [`VALUES_PER_BYTE`]
//!   JSON values per body byte (client-go bodies need at most one per two bytes).
//! - Go writes `null` for a nil slice or map without `omitempty`, and so does this decoder;
//!   the value of a field the body sets is never dropped unless Go's JSON would drop it.
//!
//! No input panics: every length is checked, recursion is bounded, and unknown fields are
//! skipped.

mod decode;
mod encode;
mod error;
mod gotime;
mod schema;
#[allow(non_upper_case_globals)]
#[rustfmt::skip]
mod table;
mod wire;

use serde_json::{Map, Value};

pub use decode::{MAX_DEPTH, VALUES_BASE, VALUES_PER_BYTE};
pub use error::{DecodeError, EncodeError};

use decode::{Path, decode_message, wire_error};
use wire::{Reader, WireType};

/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The 4 bytes every Kubernetes protobuf body starts with.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// The `apiVersion` and `kind` a body claims.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TypeMeta {
    /// `v1`, `apps/v1`, …
    pub api_version: String,
    /// `Pod`, `Deployment`, …
    pub kind: String,
}

impl TypeMeta {
    /// Builds a `TypeMeta`.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }
}

/// Whether `body` starts with the Kubernetes protobuf prefix.
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(&MAGIC)
}

/// Decodes a protobuf body into its [`TypeMeta`] (from the envelope) and the object's JSON,
/// with `apiVersion` and `kind` set.
pub fn decode(body: &[u8]) -> Result<(TypeMeta, Value), DecodeError> {
    decode_with_defaults(body, None)
}

/// As [`decode()`], filling a kind or apiVersion the envelope lacks from `defaults` (what the
/// request URL implies), as kube-apiserver does.
pub fn decode_with_defaults(
    body: &[u8],
    defaults: Option<&TypeMeta>,
) -> Result<(TypeMeta, Value), DecodeError> {
    let data = match body.strip_prefix(&MAGIC) {
        _ if body.is_empty() => return Err(DecodeError::Empty),
        None => return Err(DecodeError::MissingMagic),
        Some([]) => return Err(DecodeError::Empty),
        Some(data) => data,
    };
    let (mut type_meta, raw) = envelope(data)?;
    if let Some(defaults) = defaults {
        copy_kind_defaults(&mut type_meta, defaults);
    }
    if type_meta.kind.is_empty() {
        return Err(DecodeError::MissingKind);
    }
    if version(&type_meta.api_version).is_empty() {
        return Err(DecodeError::MissingApiVersion);
    }
    let object = decode_object(&type_meta, raw)?;
    Ok((type_meta, object))
}

/// Decodes the protobuf message of an object of the given type (the `raw` field of the
/// envelope) into its JSON, with `apiVersion` and `kind` set from `type_meta`.
pub fn decode_object(type_meta: &TypeMeta, message: &[u8]) -> Result<Value, DecodeError> {
    let entry = lookup(&type_meta.api_version, &type_meta.kind).ok_or_else(|| {
        DecodeError::UnknownKind {
            api_version: type_meta.api_version.clone(),
            kind: type_meta.kind.clone(),
        }
    })?;
    let decoded = decode_message(entry.message, message, &Path::Root(""))?;
    let mut object = Map::new();
    if !type_meta.api_version.is_empty() {
        object.insert(
            "apiVersion".into(),
            Value::String(type_meta.api_version.clone()),
        );
    }
    if !type_meta.kind.is_empty() {
        object.insert("kind".into(), Value::String(type_meta.kind.clone()));
    }
    if let Value::Object(fields) = decoded {
        for (key, value) in fields {
            object.entry(key).or_insert(value);
        }
    }
    Ok(Value::Object(object))
}

/// Encodes an object (its JSON, with `apiVersion` and `kind`) as a Kubernetes protobuf body:
/// the `k8s\0` prefix, the `runtime.Unknown` envelope and the object's message, byte for
/// byte what kube-apiserver writes for the same object.
pub fn encode(object: &Value) -> Result<Vec<u8>, EncodeError> {
    let type_meta = type_meta_of(object);
    let entry = encodable(&type_meta)?;
    let raw = encode::encode_message(entry.message, object, "")?;
    Ok(envelope_bytes(&type_meta, &raw))
}

/// Encodes a list (`PodList` in `v1`: its `metadata`, and `items` of the list's kind without
/// `List`) as a protobuf body.
pub fn encode_list<'a>(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    items: impl IntoIterator<Item = &'a Value>,
) -> Result<Vec<u8>, EncodeError> {
    let item = TypeMeta::new(
        api_version,
        list_kind.strip_suffix("List").unwrap_or_default(),
    );
    let entry = encodable(&item)?;
    let messages = items
        .into_iter()
        .enumerate()
        .map(|(i, object)| encode::encode_message(entry.message, object, &format!("items[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = list_head(
        api_version,
        list_kind,
        metadata,
        messages.iter().map(Vec::len),
    );
    for message in &messages {
        list_item_prefix(message.len(), &mut out);
        out.extend_from_slice(message);
    }
    out.extend_from_slice(&LIST_TAIL);
    Ok(out)
}

/// The message of one object of a built-in kind (its JSON, with `apiVersion` and `kind`) as
/// a list holds it among its `items`: no envelope, no type.
pub fn encode_item(object: &Value) -> Result<Vec<u8>, EncodeError> {
    let entry = encodable(&type_meta_of(object))?;
    encode::encode_message(entry.message, object, "")
}

/// The start of a list body whose items' messages ([`encode_item`]) have the lengths
/// `item_lengths`: the `k8s\0` prefix, the envelope, and the list's `metadata`. Then come
/// each item's [`list_item_prefix`] and message, then [`LIST_TAIL`]; together, byte for
/// byte what [`encode_list`] writes, for a body written as it is sent.
pub fn list_head(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    item_lengths: impl IntoIterator<Item = usize>,
) -> Vec<u8> {
    let mut list = encode::Writer::default();
    list.bytes(1, &list_meta(metadata));
    let list = list.into_bytes();
    let raw_len = list.len()
        + item_lengths
            .into_iter()
            .map(|len| 1 + encode::varint_len(len as u64) + len)
            .sum::<usize>();
    let mut out = envelope_head(&TypeMeta::new(api_version, list_kind), raw_len);
    out.extend_from_slice(&list);
    out
}

/// What goes before an item's message of `len` bytes in a list body: field 2's tag and the
/// length.
pub fn list_item_prefix(len: usize, out: &mut Vec<u8>) {
    out.push(ITEMS_TAG);
    encode::put_varint(out, len as u64);
}

/// The end of a list body, after the last item: the envelope's empty `contentEncoding` and
/// `contentType`.
pub const LIST_TAIL: [u8; 4] = [0x1a, 0x00, 0x22, 0x00];

/// Field 2 (a list's `items`), length-delimited.
const ITEMS_TAG: u8 = (2 << 3) | 2;

/// Encodes a `meta/v1` `Status` (an error, or a delete's success) as a protobuf body.
pub fn encode_status(status: &Value) -> Vec<u8> {
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().as_bytes().to_vec();
    let mut out = encode::Writer::default();
    out.bytes(1, &list_meta(&status["metadata"]));
    out.bytes(2, &text(status, "status"));
    out.bytes(3, &text(status, "message"));
    out.bytes(4, &text(status, "reason"));
    if let Some(details) = status.get("details").filter(|d| d.is_object()) {
        let mut d = encode::Writer::default();
        d.bytes(1, &text(details, "name"));
        d.bytes(2, &text(details, "group"));
        d.bytes(3, &text(details, "kind"));
        for cause in details["causes"].as_array().into_iter().flatten() {
            let mut c = encode::Writer::default();
            c.bytes(1, &text(cause, "reason"));
            c.bytes(2, &text(cause, "message"));
            c.bytes(3, &text(cause, "field"));
            d.bytes(4, &c.into_bytes());
        }
        d.int(5, details["retryAfterSeconds"].as_i64().unwrap_or(0));
        d.bytes(6, &text(details, "uid"));
        out.bytes(5, &d.into_bytes());
    }
    out.int(6, status["code"].as_i64().unwrap_or(0));
    envelope_bytes(&TypeMeta::new("v1", "Status"), &out.into_bytes())
}

/// One frame of a protobuf watch stream (`application/vnd.kubernetes.protobuf;stream=watch`):
/// a 4-byte big-endian length, then a `meta/v1` `WatchEvent` whose object is `object`, a
/// whole protobuf body ([`encode`], or [`encode_status`] for `ERROR` events).
pub fn watch_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let mut raw = encode::Writer::default();
    raw.bytes(1, object);
    let mut event = encode::Writer::default();
    event.bytes(1, event_type.as_bytes());
    event.bytes(2, &raw.into_bytes());
    let event = event.into_bytes();
    let mut frame = (event.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&event);
    frame
}

/// Every `resource.Quantity` in an object of a built-in kind (`spec.containers[0].resources.
/// limits[cpu]` and its JSON value), found with the kind's table; empty for other kinds.
pub fn quantities(object: &Value) -> Vec<(String, &Value)> {
    let mut found = Vec::new();
    if let Ok(entry) = encodable(&type_meta_of(object)) {
        encode::quantities(entry.message, object, "", 0, &mut found);
    }
    found
}

/// Whether objects of this kind can be encoded ([`encode`]); lists of them too.
pub fn can_encode(api_version: &str, kind: &str) -> bool {
    lookup(api_version, kind).is_some_and(|entry| entry.api_version.is_some())
}

fn type_meta_of(object: &Value) -> TypeMeta {
    TypeMeta::new(
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default(),
    )
}

fn encodable(type_meta: &TypeMeta) -> Result<&'static schema::KindEntry, EncodeError> {
    lookup(&type_meta.api_version, &type_meta.kind).ok_or_else(|| EncodeError::UnknownKind {
        api_version: type_meta.api_version.clone(),
        kind: type_meta.kind.clone(),
    })
}

/// `meta/v1` `ListMeta`: `{1: selfLink, 2: resourceVersion, 3: continue, 4:
/// remainingItemCount}` (the last a pointer, written only when set).
fn list_meta(meta: &Value) -> Vec<u8> {
    let text = |key: &str| meta[key].as_str().unwrap_or_default().as_bytes().to_vec();
    let mut out = encode::Writer::default();
    out.bytes(1, &text("selfLink"));
    out.bytes(2, &text("resourceVersion"));
    out.bytes(3, &text("continue"));
    if let Some(remaining) = meta["remainingItemCount"].as_i64() {
        out.int(4, remaining);
    }
    out.into_bytes()
}

/// The `k8s\0` prefix and the `runtime.Unknown` envelope around a message: `{1: typeMeta
/// {1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding, 4: contentType}`.
fn envelope_bytes(type_meta: &TypeMeta, raw: &[u8]) -> Vec<u8> {
    let mut out = envelope_head(type_meta, raw.len());
    out.reserve(raw.len() + LIST_TAIL.len());
    out.extend_from_slice(raw);
    out.extend_from_slice(&LIST_TAIL);
    out
}

/// The `k8s\0` prefix and the envelope up to the first byte of a `raw` of `raw_len` bytes;
/// [`LIST_TAIL`] follows `raw`.
fn envelope_head(type_meta: &TypeMeta, raw_len: usize) -> Vec<u8> {
    let mut tm = encode::Writer::default();
    tm.bytes(1, type_meta.api_version.as_bytes());
    tm.bytes(2, type_meta.kind.as_bytes());
    let mut out = MAGIC.to_vec();
    let mut unknown = encode::Writer::default();
    unknown.bytes(1, &tm.into_bytes());
    out.extend_from_slice(&unknown.into_bytes());
    out.push(RAW_TAG);
    encode::put_varint(&mut out, raw_len as u64);
    out
}

/// Field 2 of `runtime.Unknown` (`raw`), length-delimited.
const RAW_TAG: u8 = (2 << 3) | 2;

/// Whether there is a table for this kind (`DeleteOptions` is accepted in every group
/// version, as Kubernetes registers it in each).
pub fn supports(api_version: &str, kind: &str) -> bool {
    lookup(api_version, kind).is_some()
}

/// The kinds there is a table for: `(apiVersion, kind)`, with `None` for kinds accepted
/// under any apiVersion.
pub fn kinds() -> impl Iterator<Item = (Option<&'static str>, &'static str)> {
    table::KINDS.iter().map(|k| (k.api_version, k.kind))
}

fn lookup(api_version: &str, kind: &str) -> Option<&'static schema::KindEntry> {
    table::KINDS
        .iter()
        .find(|k| k.kind == kind && k.api_version == Some(api_version))
        .or_else(|| {
            table::KINDS
                .iter()
                .find(|k| k.kind == kind && k.api_version.is_none())
        })
}

/// The version part of an apiVersion (`apps/v1` → `v1`).
fn version(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map_or(api_version, |(_, version)| version)
}

/// Go's `copyKindDefaults`: a missing kind, and a missing version (with its group), come
/// from the defaults.
fn copy_kind_defaults(actual: &mut TypeMeta, defaults: &TypeMeta) {
    if actual.kind.is_empty() {
        actual.kind.clone_from(&defaults.kind);
    }
    if version(&actual.api_version).is_empty() && !version(&defaults.api_version).is_empty() {
        actual.api_version.clone_from(&defaults.api_version);
    }
}

/// Reads the `runtime.Unknown` envelope: `{1: typeMeta {1: apiVersion, 2: kind}, 2: raw,
/// 3: contentEncoding, 4: contentType}` (the last two are ignored, as Go ignores them).
fn envelope(data: &[u8]) -> Result<(TypeMeta, &[u8]), DecodeError> {
    let root = Path::Root("envelope");
    let mut type_meta = TypeMeta::default();
    let mut raw: &[u8] = &[];
    let mut reader = Reader::new(data);
    while !reader.is_empty() {
        let (number, wire_type) = reader.tag().map_err(|e| wire_error(e, &root))?;
        let name = match number {
            1 => "typeMeta",
            2 => "raw",
            3 => "contentEncoding",
            4 => "contentType",
            _ => {
                reader.skip(wire_type).map_err(|e| wire_error(e, &root))?;
                continue;
            }
        };
        let path = Path::Field(&root, name);
        let bytes = len_field(wire_type, &mut reader, &path)?;
        match number {
            1 => {
                let mut inner = Reader::new(bytes);
                while !inner.is_empty() {
                    let (number, wire_type) = inner.tag().map_err(|e| wire_error(e, &path))?;
                    let (name, target) = match number {
                        1 => ("apiVersion", &mut type_meta.api_version),
                        2 => ("kind", &mut type_meta.kind),
                        _ => {
                            inner.skip(wire_type).map_err(|e| wire_error(e, &path))?;
                            continue;
                        }
                    };
                    let bytes = len_field(wire_type, &mut inner, &Path::Field(&path, name))?;
                    *target = String::from_utf8_lossy(bytes).into_owned();
                }
            }
            2 => raw = bytes,
            _ => {}
        }
    }
    Ok((type_meta, raw))
}

fn len_field<'a>(
    wire_type: WireType,
    reader: &mut Reader<'a>,
    path: &Path<'_>,
) -> Result<&'a [u8], DecodeError> {
    if wire_type != WireType::Len {
        return Err(DecodeError::WrongWireType {
            path: path.render(),
            expected: "length-delimited",
            found: wire_type.number(),
        });
    }
    reader.len_delimited().map_err(|e| wire_error(e, path))
}
