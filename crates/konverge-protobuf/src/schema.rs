//! The vocabulary of the generated table ([`crate::table`]): for each protobuf message the
//! decoder knows, how its fields are numbered and typed, what they are called in JSON, and
//! how the Go type behind them serializes to JSON (pointer or value, `omitempty`, inline).

/// How a message becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repr {
    /// A JSON object with one property per field (the usual case).
    Object,
    /// `meta/v1.Time`: `{1: seconds, 2: nanos}` → RFC 3339 with seconds precision; the empty
    /// message (Go's zero time) → `null`.
    Time,
    /// `meta/v1.MicroTime`: as [`Repr::Time`] with microseconds.
    MicroTime,
    /// `meta/v1.Duration`: `{1: nanoseconds}` → Go duration string (`"1m30s"`).
    #[allow(dead_code, reason = "no supported kind has one yet")]
    Duration,
    /// `api/resource.Quantity`: `{1: string}` → the string.
    Quantity,
    /// `util/intstr.IntOrString`: `{1: type, 2: intVal, 3: strVal}` → number or string.
    IntOrString,
    /// `runtime.RawExtension`: `{1: raw}` → the embedded JSON.
    RawExtension,
    /// `meta/v1.FieldsV1`: `{1: raw}` → the embedded JSON.
    FieldsV1,
    /// `apiextensions/v1.JSON`: `{1: raw}` → the embedded JSON.
    Json,
    /// `apiextensions/v1.JSONSchemaPropsOrArray`: `{1: schema, 2: jSONSchemas}` → an array
    /// when there are schemas, else the schema.
    JsonSchemaPropsOrArray,
    /// `apiextensions/v1.JSONSchemaPropsOrBool`: `{1: allows, 2: schema}` → the schema if
    /// set, else the boolean.
    JsonSchemaPropsOrBool,
    /// `apiextensions/v1.JSONSchemaPropsOrStringArray`: `{1: schema, 2: property}` → the
    /// string array if not empty, else the schema (or `null`).
    JsonSchemaPropsOrStringArray,
    /// A Go `[]string` type wrapped in a message for protobuf (`ExtraValue`, `Verbs`):
    /// `{1: items}` → a JSON array.
    #[allow(dead_code, reason = "no supported kind has one yet")]
    StringList,
}

/// A field's protobuf type (for a map field: the value type; keys are always strings).
#[derive(Clone, Copy)]
pub(crate) enum Ty {
    /// `string` (invalid UTF-8 is replaced, as Go's JSON encoder does).
    String,
    /// `bool`.
    Bool,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `double`.
    Double,
    /// `bytes` → base64 in JSON.
    Bytes,
    /// An embedded message.
    Message(&'static Message),
}

impl PartialEq for Ty {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Ty::Message(a), Ty::Message(b)) => std::ptr::eq(*a, *b),
            (Ty::Message(_), _) | (_, Ty::Message(_)) => false,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Eq for Ty {}

impl std::fmt::Debug for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ty::String => f.write_str("String"),
            Ty::Bool => f.write_str("Bool"),
            Ty::Int32 => f.write_str("Int32"),
            Ty::Int64 => f.write_str("Int64"),
            Ty::Double => f.write_str("Double"),
            Ty::Bytes => f.write_str("Bytes"),
            // Only the name: messages may refer to themselves.
            Ty::Message(m) => write!(f, "Message({})", m.name),
        }
    }
}

/// A field's cardinality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Card {
    /// One value (proto2 `optional`).
    Single,
    /// `repeated` (a JSON array).
    Repeated,
    /// `map<string, ty>` (a JSON object).
    Map,
}

/// What Go's JSON encoder writes for a field that the protobuf message does not carry
/// (the Go field keeps its zero value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Absent {
    /// Nothing (`omitempty` on a pointer, slice, map or scalar).
    Omit,
    /// `null` (a nil pointer, slice or map without `omitempty`).
    Null,
    /// The zero value of the type (a non-pointer scalar without `omitempty`, or any
    /// non-pointer struct: `omitempty` never drops structs).
    Zero,
}

/// One field of a message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    /// The protobuf field number.
    pub(crate) number: u32,
    /// The JSON property name (empty for inline fields, whose properties are merged into
    /// the parent object as Go's `json:",inline"` does).
    pub(crate) json: &'static str,
    /// The protobuf type.
    pub(crate) ty: Ty,
    /// Single, repeated or map.
    pub(crate) card: Card,
    /// What JSON has when the field is absent from the message.
    pub(crate) absent: Absent,
    /// A present scalar equal to its zero value is left out of the JSON (a non-pointer Go
    /// field with `omitempty`: Go's protobuf encoder writes such fields even when zero).
    pub(crate) omit_zero: bool,
    /// The field's message is embedded inline (`json:",inline"`).
    pub(crate) inline: bool,
}

impl Field {
    /// Builds a field (the generated table is a list of these calls).
    #[allow(clippy::too_many_arguments)]
    pub(crate) const fn new(
        number: u32,
        json: &'static str,
        ty: Ty,
        card: Card,
        absent: Absent,
        omit_zero: bool,
        inline: bool,
    ) -> Self {
        Self {
            number,
            json,
            ty,
            card,
            absent,
            omit_zero,
            inline,
        }
    }
}

/// One protobuf message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message {
    /// The full protobuf name (`k8s.io.api.core.v1.Pod`).
    pub(crate) name: &'static str,
    /// How it becomes JSON.
    pub(crate) repr: Repr,
    /// Its fields, sorted by number.
    pub(crate) fields: &'static [Field],
}

impl Message {
    /// The index in [`Message::fields`] of the field with `number`.
    pub(crate) fn field_index(&self, number: u32) -> Option<usize> {
        self.fields.binary_search_by_key(&number, |f| f.number).ok()
    }
}

/// A kind a request body may carry, and its message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KindEntry {
    /// `v1`, `apps/v1`, …; `None` for the `meta.k8s.io` kinds every group version accepts
    /// (`DeleteOptions`).
    pub(crate) api_version: Option<&'static str>,
    /// `Pod`, `Deployment`, …
    pub(crate) kind: &'static str,
    /// Its message.
    pub(crate) message: &'static Message,
}
