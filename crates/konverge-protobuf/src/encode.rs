//! JSON → protobuf, the way back of [`crate::decode`]: what Go's protobuf encoder writes for
//! the Go object that a JSON document decodes into. Fields are written in number order;
//! every non-pointer field is written even when zero (Go's generated marshalers do), pointer
//! fields only when set; map entries are sorted by key; repeated scalars are not packed
//! (Kubernetes' messages are proto2).

use base64::Engine as _;
use serde_json::Value;

use crate::error::EncodeError;
use crate::schema::{Absent, Card, Field, Message, Repr, Ty};

/// Wire types, as the low three bits of a tag.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;

/// How deep messages may nest (a bound on recursion; Kubernetes objects nest far less).
const MAX_DEPTH: usize = 100;

/// Appends `value` as a base-128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// How many bytes [`put_varint`] writes for `value`.
pub(crate) fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// A protobuf message being written.
#[derive(Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    fn varint(&mut self, value: u64) {
        put_varint(&mut self.buf, value);
    }

    fn tag(&mut self, number: u32, wire_type: u64) {
        self.varint((u64::from(number) << 3) | wire_type);
    }

    /// A length-delimited field (string, bytes, embedded message).
    pub(crate) fn bytes(&mut self, number: u32, bytes: &[u8]) {
        self.tag(number, LEN);
        self.varint(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    /// An integer or boolean field (negative numbers sign-extended to ten bytes, as Go
    /// writes int32 and int64).
    pub(crate) fn int(&mut self, number: u32, value: i64) {
        self.tag(number, VARINT);
        self.varint(value as u64);
    }

    fn double(&mut self, number: u32, value: f64) {
        self.tag(number, FIXED64);
        self.buf.extend_from_slice(&value.to_bits().to_le_bytes());
    }
}

/// Encodes `value` (the JSON of a `message`) as the message's fields.
pub(crate) fn encode_message(
    message: &'static Message,
    value: &Value,
    path: &str,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = Writer::default();
    message_fields(&mut out, message, value, path, 0)?;
    Ok(out.into_bytes())
}

fn message_fields(
    out: &mut Writer,
    message: &'static Message,
    value: &Value,
    path: &str,
    depth: usize,
) -> Result<(), EncodeError> {
    if depth > MAX_DEPTH {
        return Err(EncodeError::TooDeep {
            path: path.to_string(),
        });
    }
    match message.repr {
        Repr::Object => {
            for field in message.fields {
                let (child, at) = if field.inline {
                    (Some(value), path.to_string())
                } else {
                    (
                        value.get(field.json).filter(|v| !v.is_null()),
                        join(path, field.json),
                    )
                };
                write_field(out, field, child, &at, depth)?;
            }
        }
        Repr::Time | Repr::MicroTime => {
            // Go's zero time (JSON null) is the empty message.
            if let Some(text) = value.as_str() {
                let t: jiff::Timestamp = text.parse().map_err(|_| EncodeError::Invalid {
                    path: path.to_string(),
                    expected: "an RFC 3339 time",
                })?;
                out.int(1, t.as_second());
                let nanos = if message.repr == Repr::MicroTime {
                    let n = i64::from(t.subsec_nanosecond());
                    n - n % 1000
                } else {
                    0
                };
                out.int(2, nanos);
            }
        }
        Repr::Duration => {
            let nanos = match value {
                Value::Null => 0,
                Value::String(text) => konverge_apimachinery::duration::parse_nanos(text)
                    .ok()
                    .ok_or_else(|| EncodeError::Invalid {
                        path: path.to_string(),
                        expected: "a Go duration",
                    })?,
                _ => {
                    return Err(EncodeError::Invalid {
                        path: path.to_string(),
                        expected: "a Go duration",
                    });
                }
            };
            out.int(1, nanos);
        }
        Repr::Quantity => {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Null => "0".to_string(),
                _ => {
                    return Err(EncodeError::Invalid {
                        path: path.to_string(),
                        expected: "a quantity",
                    });
                }
            };
            out.bytes(1, text.as_bytes());
        }
        Repr::IntOrString => match value {
            Value::String(s) => {
                out.int(1, 1);
                out.int(2, 0);
                out.bytes(3, s.as_bytes());
            }
            other => {
                out.int(1, 0);
                out.int(2, other.as_i64().unwrap_or(0));
                out.bytes(3, b"");
            }
        },
        Repr::RawExtension | Repr::FieldsV1 | Repr::Json => {
            if !value.is_null() {
                out.bytes(1, &json_bytes(value));
            }
        }
        Repr::JsonSchemaPropsOrArray | Repr::JsonSchemaPropsOrStringArray => {
            let (schema, items) = schema_fields(message, path)?;
            match value {
                Value::Array(list) => {
                    for (i, item) in list.iter().enumerate() {
                        let at = format!("{path}[{i}]");
                        write_value(out, items, Some(item), &at, depth)?;
                    }
                }
                Value::Null => {}
                object => write_value(out, schema, Some(object), path, depth)?,
            }
        }
        Repr::JsonSchemaPropsOrBool => {
            let (allows, schema) = schema_fields(message, path)?;
            match value {
                Value::Bool(b) => out.int(allows.number, i64::from(*b)),
                Value::Null => out.int(allows.number, 0),
                object => {
                    out.int(allows.number, 1);
                    write_value(out, schema, Some(object), path, depth)?;
                }
            }
        }
        Repr::StringList => {
            if let Some(list) = value.as_array() {
                for item in list {
                    out.bytes(1, item.as_str().unwrap_or_default().as_bytes());
                }
            }
        }
    }
    Ok(())
}

/// The two fields of the schema-or-something messages, in number order.
fn schema_fields(
    message: &'static Message,
    path: &str,
) -> Result<(&'static Field, &'static Field), EncodeError> {
    match message.fields {
        [first, second, ..] => Ok((first, second)),
        _ => Err(EncodeError::Invalid {
            path: path.to_string(),
            expected: "a schema",
        }),
    }
}

/// Writes one field of a message object; `value` is its JSON (`None`: absent or null).
fn write_field(
    out: &mut Writer,
    field: &'static Field,
    value: Option<&Value>,
    path: &str,
    depth: usize,
) -> Result<(), EncodeError> {
    // A non-pointer Go field is written even when zero.
    let always = field.absent == Absent::Zero || field.omit_zero;
    match field.card {
        Card::Single => match value {
            Some(v) => write_value(out, field, Some(v), path, depth),
            None if always => write_value(out, field, None, path, depth),
            None => Ok(()),
        },
        Card::Repeated => {
            let Some(value) = value else { return Ok(()) };
            let list = value.as_array().ok_or_else(|| EncodeError::Invalid {
                path: path.to_string(),
                expected: "an array",
            })?;
            for (i, item) in list.iter().enumerate() {
                write_value(out, field, Some(item), &format!("{path}[{i}]"), depth)?;
            }
            Ok(())
        }
        Card::Map => {
            let Some(value) = value else { return Ok(()) };
            let map = value.as_object().ok_or_else(|| EncodeError::Invalid {
                path: path.to_string(),
                expected: "an object",
            })?;
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                let at = format!("{path}[{key}]");
                let mut entry = Writer::default();
                entry.bytes(1, key.as_bytes());
                let entry_field =
                    Field::new(2, "", field.ty, Card::Single, Absent::Zero, false, false);
                write_value(&mut entry, &entry_field, Some(&map[key]), &at, depth + 1)?;
                out.bytes(field.number, &entry.into_bytes());
            }
            Ok(())
        }
    }
}

/// Writes one value of `field` (`None`: the Go zero value).
fn write_value(
    out: &mut Writer,
    field: &Field,
    value: Option<&Value>,
    path: &str,
    depth: usize,
) -> Result<(), EncodeError> {
    let null = Value::Null;
    let value = value.unwrap_or(&null);
    let invalid = |expected| EncodeError::Invalid {
        path: path.to_string(),
        expected,
    };
    match field.ty {
        Ty::String => match value {
            Value::String(s) => out.bytes(field.number, s.as_bytes()),
            Value::Null => out.bytes(field.number, b""),
            _ => return Err(invalid("a string")),
        },
        Ty::Bytes => match value {
            Value::String(s) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|_| invalid("base64 bytes"))?;
                out.bytes(field.number, &bytes);
            }
            Value::Null => out.bytes(field.number, b""),
            _ => return Err(invalid("base64 bytes")),
        },
        Ty::Bool => match value {
            Value::Bool(b) => out.int(field.number, i64::from(*b)),
            Value::Null => out.int(field.number, 0),
            _ => return Err(invalid("a boolean")),
        },
        Ty::Int32 | Ty::Int64 => match value {
            Value::Null => out.int(field.number, 0),
            Value::Number(n) => {
                let int = n
                    .as_i64()
                    .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                    .ok_or_else(|| invalid("an integer"))?;
                let int = if field.ty == Ty::Int32 {
                    i64::from(i32::try_from(int).map_err(|_| invalid("a 32-bit integer"))?)
                } else {
                    int
                };
                out.int(field.number, int);
            }
            _ => return Err(invalid("an integer")),
        },
        Ty::Double => match value {
            Value::Null => out.double(field.number, 0.0),
            Value::Number(n) => out.double(field.number, n.as_f64().unwrap_or(0.0)),
            _ => return Err(invalid("a number")),
        },
        Ty::Message(message) => {
            let mut child = Writer::default();
            message_fields(&mut child, message, value, path, depth + 1)?;
            out.bytes(field.number, &child.into_bytes());
        }
    }
    Ok(())
}

fn json_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Every `resource.Quantity` value in `value` (the JSON of a `message`), with its field path.
pub(crate) fn quantities<'a>(
    message: &'static Message,
    value: &'a Value,
    path: &str,
    depth: usize,
    out: &mut Vec<(String, &'a Value)>,
) {
    if depth > MAX_DEPTH || message.repr != Repr::Object {
        return;
    }
    for field in message.fields {
        let Ty::Message(child) = field.ty else {
            continue;
        };
        if !matches!(child.repr, Repr::Object | Repr::Quantity) {
            continue;
        }
        let (found, at) = if field.inline {
            (Some(value), path.to_string())
        } else {
            (
                value.get(field.json).filter(|v| !v.is_null()),
                join(path, field.json),
            )
        };
        let Some(found) = found else { continue };
        let mut visit = |v: &'a Value, at: String| {
            if child.repr == Repr::Quantity {
                out.push((at, v));
            } else {
                quantities(child, v, &at, depth + 1, out);
            }
        };
        match field.card {
            Card::Single => visit(found, at),
            Card::Repeated => {
                for (i, item) in found.as_array().into_iter().flatten().enumerate() {
                    visit(item, format!("{at}[{i}]"));
                }
            }
            Card::Map => {
                for (key, item) in found.as_object().into_iter().flatten() {
                    visit(item, format!("{at}[{key}]"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{put_varint, varint_len};

    #[test]
    fn varint_len_is_what_put_varint_writes() {
        for value in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            2_097_151,
            2_097_152,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(varint_len(value), out.len(), "{value}");
        }
    }
}
