//! The table-driven decoder: protobuf message bytes → the JSON Go's `encoding/json` writes for
//! the same Go object.
//!
//! Decoding is two-phase. [`merge`] reads a message's fields into a [`Partial`] (one slot per
//! known field; unknown fields are skipped; a non-repeated message field that occurs twice
//! is merged, as protobuf and Go do). [`finalize`] then turns the slots into JSON according to
//! the message's [`Repr`] and each field's Go semantics: pointer/omitempty rules for absent
//! and zero fields, inline embedding, and the special encodings of Time, Quantity, … Repeated
//! elements and map values are finalized as soon as they are read.
//!
//! Every nested message (including map entries) counts one level against [`MAX_DEPTH`]; the
//! recursion of both phases is bounded by it.

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::error::DecodeError;
use crate::gotime::Instant;
use crate::schema::{Absent, Card, Field, Message, Repr, Ty};
use crate::wire::{MAX_GROUP_DEPTH, Reader, WireError, WireType};
use konverge_apimachinery::duration::format_nanos;

/// How deep messages may nest (the object itself is level 1; map entries count). Kubernetes
/// objects rarely exceed 15; CRD schemas add two levels per schema level.
pub const MAX_DEPTH: usize = 100;

/// How many JSON values the output may have: [`VALUES_PER_BYTE`] per input byte plus
/// [`VALUES_BASE`]. A body from client-go yields at most one value per two bytes (every
/// field costs a tag and a value); the limit stops small bodies of empty repeated messages
/// from expanding into huge JSON through the Go zero values they stand for.
pub const VALUES_PER_BYTE: usize = 2;
/// See [`VALUES_PER_BYTE`].
pub const VALUES_BASE: usize = 1024;

/// Decoding state: the remaining value budget.
struct Cx {
    budget: usize,
    limit: usize,
}

impl Cx {
    /// Accounts for one more JSON value.
    fn spend(&mut self, path: &Path<'_>) -> Result<(), DecodeError> {
        match self.budget.checked_sub(1) {
            Some(left) => {
                self.budget = left;
                Ok(())
            }
            None => Err(DecodeError::TooLarge {
                path: path.render(),
                limit: self.limit,
            }),
        }
    }
}

/// A field path under construction, as a linked list on the stack; rendered only for errors.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Path<'p> {
    /// The start: `""` for the object, `"envelope"` for the `runtime.Unknown` wrapper.
    Root(&'static str),
    /// `.name` (inline fields have an empty name and add nothing).
    Field(&'p Path<'p>, &'static str),
    /// `[3]`.
    Index(&'p Path<'p>, usize),
    /// `[key]`.
    Key(&'p Path<'p>, &'p str),
}

impl Path<'_> {
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Path::Root(root) => out.push_str(root),
            Path::Field(parent, name) => {
                parent.write(out);
                if !name.is_empty() {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
            }
            Path::Index(parent, index) => {
                parent.write(out);
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
            Path::Key(parent, key) => {
                parent.write(out);
                out.push('[');
                out.push_str(key);
                out.push(']');
            }
        }
    }
}

/// Attaches the path to a wire-level error.
pub(crate) fn wire_error(error: WireError, path: &Path<'_>) -> DecodeError {
    let path = path.render();
    match error {
        WireError::Truncated => DecodeError::Truncated { path },
        WireError::VarintOverflow => DecodeError::VarintOverflow { path },
        WireError::InvalidFieldNumber(number) => DecodeError::InvalidFieldNumber { path, number },
        WireError::InvalidWireType(wire_type) => DecodeError::InvalidWireType { path, wire_type },
        WireError::GroupTooDeep => DecodeError::TooDeep {
            path,
            limit: MAX_GROUP_DEPTH,
        },
    }
}

fn too_deep(path: &Path<'_>) -> DecodeError {
    DecodeError::TooDeep {
        path: path.render(),
        limit: MAX_DEPTH,
    }
}

/// Decodes one message (`buf` holds its fields) as JSON.
pub(crate) fn decode_message(
    message: &'static Message,
    buf: &[u8],
    path: &Path<'_>,
) -> Result<Value, DecodeError> {
    let limit = buf
        .len()
        .saturating_mul(VALUES_PER_BYTE)
        .saturating_add(VALUES_BASE);
    let cx = &mut Cx {
        budget: limit,
        limit,
    };
    let mut partial = Partial::new(message);
    merge(cx, &mut partial, buf, 1, path)?;
    finalize(cx, partial, 1, path)
}

/// What has been read for one field.
enum Slot<'a> {
    Empty,
    /// A string, number or boolean, already JSON.
    Scalar(Value),
    /// A `bytes` field (base64 in JSON, or embedded JSON for the raw reprs).
    Bytes(&'a [u8]),
    /// A non-repeated message field, still open for merging.
    Message(Box<Partial<'a>>),
    /// A repeated field's finalized elements.
    List(Vec<Value>),
    /// A map field's finalized entries.
    Map(Map<String, Value>),
}

/// A message being read.
struct Partial<'a> {
    message: &'static Message,
    slots: Vec<Slot<'a>>,
    /// No occurrence of the message had any bytes (Go's zero Time is the empty message).
    empty: bool,
}

impl<'a> Partial<'a> {
    fn new(message: &'static Message) -> Self {
        Self {
            message,
            slots: message.fields.iter().map(|_| Slot::Empty).collect(),
            empty: true,
        }
    }

    /// Takes the slot of field `number` (for the special reprs, whose layout the generator
    /// checked).
    fn take(&mut self, number: u32) -> Slot<'a> {
        self.message
            .field_index(number)
            .and_then(|i| self.slots.get_mut(i))
            .map_or(Slot::Empty, |slot| std::mem::replace(slot, Slot::Empty))
    }
}

/// Reads the fields in `buf` into `partial`.
fn merge<'a>(
    cx: &mut Cx,
    partial: &mut Partial<'a>,
    buf: &'a [u8],
    depth: usize,
    path: &Path<'_>,
) -> Result<(), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    if !buf.is_empty() {
        partial.empty = false;
    }
    let message = partial.message;
    let mut reader = Reader::new(buf);
    while !reader.is_empty() {
        let (number, wire_type) = reader.tag().map_err(|e| wire_error(e, path))?;
        let found = message
            .field_index(number)
            .and_then(|i| Some((message.fields.get(i)?, partial.slots.get_mut(i)?)));
        let Some((field, slot)) = found else {
            reader.skip(wire_type).map_err(|e| wire_error(e, path))?;
            continue;
        };
        let path = Path::Field(path, field.json);
        match field.card {
            Card::Single => single(cx, slot, field, wire_type, &mut reader, depth, &path)?,
            Card::Repeated => repeated(cx, slot, field, wire_type, &mut reader, depth, &path)?,
            Card::Map => map_entry(cx, slot, field, wire_type, &mut reader, depth, &path)?,
        }
    }
    Ok(())
}

fn single<'a>(
    cx: &mut Cx,
    slot: &mut Slot<'a>,
    field: &Field,
    wire_type: WireType,
    reader: &mut Reader<'a>,
    depth: usize,
    path: &Path<'_>,
) -> Result<(), DecodeError> {
    match field.ty {
        Ty::Message(message) => {
            let bytes = length_delimited(wire_type, reader, path)?;
            // Go's Time, MicroTime and Quantity unmarshalers replace the value; generated
            // unmarshalers merge into it.
            let resets = matches!(message.repr, Repr::Time | Repr::MicroTime | Repr::Quantity);
            match slot {
                Slot::Message(child) if !resets => merge(cx, child, bytes, depth + 1, path)?,
                _ => {
                    let mut child = Partial::new(message);
                    merge(cx, &mut child, bytes, depth + 1, path)?;
                    *slot = Slot::Message(Box::new(child));
                }
            }
        }
        Ty::Bytes => *slot = Slot::Bytes(length_delimited(wire_type, reader, path)?),
        ty => *slot = Slot::Scalar(scalar(cx, ty, wire_type, reader, path)?),
    }
    Ok(())
}

fn repeated<'a>(
    cx: &mut Cx,
    slot: &mut Slot<'a>,
    field: &Field,
    wire_type: WireType,
    reader: &mut Reader<'a>,
    depth: usize,
    path: &Path<'_>,
) -> Result<(), DecodeError> {
    if !matches!(slot, Slot::List(_)) {
        *slot = Slot::List(Vec::new());
    }
    let Slot::List(items) = slot else {
        return Ok(());
    };
    match field.ty {
        Ty::Message(message) => {
            let bytes = length_delimited(wire_type, reader, path)?;
            let path = Path::Index(path, items.len());
            let mut child = Partial::new(message);
            merge(cx, &mut child, bytes, depth + 1, &path)?;
            items.push(finalize(cx, child, depth + 1, &path)?);
        }
        Ty::String | Ty::Bytes => {
            let path = Path::Index(path, items.len());
            items.push(scalar(cx, field.ty, wire_type, reader, &path)?);
        }
        ty @ (Ty::Bool | Ty::Int32 | Ty::Int64 | Ty::Double) => {
            if wire_type == WireType::Len {
                // Packed: a run of values without tags.
                let packed = reader.len_delimited().map_err(|e| wire_error(e, path))?;
                let mut inner = Reader::new(packed);
                let element = if ty == Ty::Double {
                    WireType::Fixed64
                } else {
                    WireType::Varint
                };
                while !inner.is_empty() {
                    let path = Path::Index(path, items.len());
                    items.push(scalar(cx, ty, element, &mut inner, &path)?);
                }
            } else {
                let path = Path::Index(path, items.len());
                items.push(scalar(cx, ty, wire_type, reader, &path)?);
            }
        }
    }
    Ok(())
}

fn map_entry<'a>(
    cx: &mut Cx,
    slot: &mut Slot<'a>,
    field: &Field,
    wire_type: WireType,
    reader: &mut Reader<'a>,
    depth: usize,
    path: &Path<'_>,
) -> Result<(), DecodeError> {
    if depth + 1 > MAX_DEPTH {
        return Err(too_deep(path));
    }
    let entry = length_delimited(wire_type, reader, path)?;
    // First pass: the key (which usually, but not necessarily, comes first) and the value's
    // occurrences.
    let mut key = String::new();
    let mut values: Vec<(WireType, Reader<'a>)> = Vec::new();
    let mut inner = Reader::new(entry);
    while !inner.is_empty() {
        let (number, wire_type) = inner.tag().map_err(|e| wire_error(e, path))?;
        match number {
            1 => {
                let bytes = length_delimited(wire_type, &mut inner, path)?;
                key = String::from_utf8_lossy(bytes).into_owned();
            }
            2 => {
                values.push((wire_type, inner.clone()));
                inner.skip(wire_type).map_err(|e| wire_error(e, path))?;
            }
            _ => inner.skip(wire_type).map_err(|e| wire_error(e, path))?,
        }
    }
    let path = Path::Key(path, &key);
    let value = match field.ty {
        Ty::Message(message) => {
            let mut child = Partial::new(message);
            for (wire_type, mut at) in values {
                let bytes = length_delimited(wire_type, &mut at, &path)?;
                if matches!(message.repr, Repr::Time | Repr::MicroTime | Repr::Quantity) {
                    child = Partial::new(message);
                }
                merge(cx, &mut child, bytes, depth + 2, &path)?;
            }
            finalize(cx, child, depth + 2, &path)?
        }
        ty => match values.pop() {
            Some((wire_type, mut at)) => scalar(cx, ty, wire_type, &mut at, &path)?,
            None => zero(cx, ty, depth + 2, &path)?,
        },
    };
    if !matches!(slot, Slot::Map(_)) {
        *slot = Slot::Map(Map::new());
    }
    if let Slot::Map(map) = slot {
        map.insert(key, value);
    }
    Ok(())
}

fn length_delimited<'a>(
    wire_type: WireType,
    reader: &mut Reader<'a>,
    path: &Path<'_>,
) -> Result<&'a [u8], DecodeError> {
    expect(wire_type, WireType::Len, path)?;
    reader.len_delimited().map_err(|e| wire_error(e, path))
}

fn expect(found: WireType, expected: WireType, path: &Path<'_>) -> Result<(), DecodeError> {
    if found == expected {
        return Ok(());
    }
    Err(DecodeError::WrongWireType {
        path: path.render(),
        expected: match expected {
            WireType::Varint => "varint",
            WireType::Fixed64 => "fixed64",
            WireType::Fixed32 => "fixed32",
            WireType::Len | WireType::StartGroup | WireType::EndGroup => "length-delimited",
        },
        found: found.number(),
    })
}

/// Reads one non-message value as JSON (`bytes` as base64).
fn scalar(
    cx: &mut Cx,
    ty: Ty,
    wire_type: WireType,
    reader: &mut Reader<'_>,
    path: &Path<'_>,
) -> Result<Value, DecodeError> {
    cx.spend(path)?;
    let varint = |reader: &mut Reader<'_>| {
        expect(wire_type, WireType::Varint, path)?;
        reader.varint().map_err(|e| wire_error(e, path))
    };
    Ok(match ty {
        Ty::String => {
            let bytes = length_delimited(wire_type, reader, path)?;
            Value::String(String::from_utf8_lossy(bytes).into_owned())
        }
        Ty::Bytes => Value::String(base64(length_delimited(wire_type, reader, path)?)),
        Ty::Bool => Value::Bool(varint(reader)? != 0),
        // int32 travels sign-extended to 64 bits; the low 32 bits are the value.
        Ty::Int32 => Value::from(varint(reader)? as u32 as i32),
        Ty::Int64 => Value::from(varint(reader)? as i64),
        Ty::Double => {
            expect(wire_type, WireType::Fixed64, path)?;
            let bits = reader.fixed64().map_err(|e| wire_error(e, path))?;
            double(f64::from_bits(bits), path)?
        }
        // Messages are handled by the callers.
        Ty::Message(_) => Value::Null,
    })
}

/// A `double` as Go writes it: integral values without a fraction.
fn double(value: f64, path: &Path<'_>) -> Result<Value, DecodeError> {
    if value.fract() == 0.0 && value.abs() < 9_007_199_254_740_992.0 {
        return Ok(Value::from(value as i64));
    }
    serde_json::Number::from_f64(value)
        .map(Value::Number)
        .ok_or_else(|| DecodeError::NonFiniteNumber {
            path: path.render(),
            value: value.to_string(),
        })
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The JSON of a field's Go zero value.
fn zero(cx: &mut Cx, ty: Ty, depth: usize, path: &Path<'_>) -> Result<Value, DecodeError> {
    cx.spend(path)?;
    Ok(match ty {
        Ty::String | Ty::Bytes => Value::String(String::new()),
        Ty::Bool => Value::Bool(false),
        Ty::Int32 | Ty::Int64 | Ty::Double => Value::from(0),
        Ty::Message(message) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            match message.repr {
                Repr::Object => {
                    let mut object = Map::new();
                    let mut inlined = Vec::new();
                    for field in message.fields {
                        let path = Path::Field(path, field.json);
                        let value = match (field.absent, field.card) {
                            (Absent::Omit, _) => continue,
                            (Absent::Null, _) => Value::Null,
                            (Absent::Zero, Card::Single) => zero(cx, field.ty, depth + 1, &path)?,
                            (Absent::Zero, _) => Value::Null,
                        };
                        put(&mut object, &mut inlined, field, value);
                    }
                    inline(&mut object, inlined);
                    Value::Object(object)
                }
                Repr::Duration => Value::String("0s".to_owned()),
                Repr::Quantity => Value::String("0".to_owned()),
                Repr::IntOrString => Value::from(0),
                Repr::JsonSchemaPropsOrBool => Value::Bool(false),
                Repr::Time
                | Repr::MicroTime
                | Repr::RawExtension
                | Repr::FieldsV1
                | Repr::Json
                | Repr::JsonSchemaPropsOrArray
                | Repr::JsonSchemaPropsOrStringArray
                | Repr::StringList => Value::Null,
            }
        }
    })
}

fn put(object: &mut Map<String, Value>, inlined: &mut Vec<Value>, field: &Field, value: Value) {
    if field.inline {
        inlined.push(value);
    } else {
        object.insert(field.json.to_owned(), value);
    }
}

/// Go's inline embedding: the embedded struct's properties join the parent's (the parent's
/// own win on a clash, as the shallower field does in Go).
fn inline(object: &mut Map<String, Value>, inlined: Vec<Value>) {
    for value in inlined {
        if let Value::Object(properties) = value {
            for (key, value) in properties {
                object.entry(key).or_insert(value);
            }
        }
    }
}

/// Turns a read message into JSON.
fn finalize(
    cx: &mut Cx,
    mut partial: Partial<'_>,
    depth: usize,
    path: &Path<'_>,
) -> Result<Value, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    cx.spend(path)?;
    let message = partial.message;
    Ok(match message.repr {
        Repr::Object => {
            let mut object = Map::new();
            let mut inlined = Vec::new();
            let slots = std::mem::take(&mut partial.slots);
            for (field, slot) in message.fields.iter().zip(slots) {
                let path = Path::Field(path, field.json);
                let value = match slot {
                    Slot::Scalar(value)
                        if field.omit_zero
                            && konverge_apimachinery::go_encoding::is_empty(&value) =>
                    {
                        continue;
                    }
                    Slot::Scalar(value) => value,
                    Slot::Bytes(bytes) if field.omit_zero && bytes.is_empty() => continue,
                    Slot::Bytes(bytes) => {
                        cx.spend(&path)?;
                        Value::String(base64(bytes))
                    }
                    Slot::Message(child) => finalize(cx, *child, depth + 1, &path)?,
                    Slot::List(items) if !items.is_empty() => {
                        cx.spend(&path)?;
                        Value::Array(items)
                    }
                    Slot::Map(entries) if !entries.is_empty() => {
                        cx.spend(&path)?;
                        Value::Object(entries)
                    }
                    Slot::Empty | Slot::List(_) | Slot::Map(_) => {
                        match (field.absent, field.card) {
                            (Absent::Omit, _) => continue,
                            (Absent::Null, _) => Value::Null,
                            (Absent::Zero, Card::Single) => zero(cx, field.ty, depth + 1, &path)?,
                            (Absent::Zero, _) => Value::Null,
                        }
                    }
                };
                put(&mut object, &mut inlined, field, value);
            }
            inline(&mut object, inlined);
            Value::Object(object)
        }
        Repr::Time | Repr::MicroTime => {
            if partial.empty {
                return Ok(Value::Null);
            }
            let seconds = int(&partial.take(1));
            let nanos = if message.repr == Repr::MicroTime {
                // Truncated to microseconds (towards zero, as Go's Duration.Truncate).
                let nanos = int(&partial.take(2));
                nanos - nanos % 1000
            } else {
                // Go keeps only the seconds of a protobuf Time.
                0
            };
            let invalid = || DecodeError::InvalidTime {
                path: path.render(),
                seconds,
            };
            let instant = Instant::from_unix(seconds, nanos).ok_or_else(invalid)?;
            if instant.is_go_zero() {
                Value::Null
            } else {
                let text = instant.rfc3339(message.repr == Repr::MicroTime);
                Value::String(text.ok_or_else(|| DecodeError::InvalidTime {
                    path: path.render(),
                    seconds: instant.seconds(),
                })?)
            }
        }
        Repr::Duration => Value::String(format_nanos(int(&partial.take(1)))),
        Repr::Quantity => match partial.take(1) {
            Slot::Scalar(value) => value,
            _ => Value::String("0".to_owned()),
        },
        Repr::IntOrString => match int(&partial.take(1)) {
            0 => Value::from(int(&partial.take(2))),
            1 => match partial.take(3) {
                Slot::Scalar(value) => value,
                _ => Value::String(String::new()),
            },
            value => {
                return Err(DecodeError::InvalidIntOrString {
                    path: path.render(),
                    value,
                });
            }
        },
        Repr::RawExtension | Repr::FieldsV1 | Repr::Json => match partial.take(1) {
            Slot::Bytes(bytes) if !bytes.is_empty() => {
                serde_json::from_slice(bytes).map_err(|e| DecodeError::InvalidEmbeddedJson {
                    path: path.render(),
                    message: e.to_string(),
                })?
            }
            _ => Value::Null,
        },
        Repr::JsonSchemaPropsOrArray | Repr::JsonSchemaPropsOrStringArray => {
            match partial.take(2) {
                Slot::List(items) if !items.is_empty() => Value::Array(items),
                _ => match partial.take(1) {
                    Slot::Message(schema) => finalize(cx, *schema, depth + 1, path)?,
                    _ => Value::Null,
                },
            }
        }
        Repr::JsonSchemaPropsOrBool => match partial.take(2) {
            Slot::Message(schema) => finalize(cx, *schema, depth + 1, path)?,
            _ => match partial.take(1) {
                Slot::Scalar(Value::Bool(allows)) => Value::Bool(allows),
                _ => Value::Bool(false),
            },
        },
        Repr::StringList => match partial.take(1) {
            Slot::List(items) if !items.is_empty() => Value::Array(items),
            _ => Value::Null,
        },
    })
}

/// An integer slot's value (0 when absent).
fn int(slot: &Slot<'_>) -> i64 {
    match slot {
        Slot::Scalar(value) => value.as_i64().unwrap_or(0),
        _ => 0,
    }
}
