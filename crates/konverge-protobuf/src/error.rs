//! [`DecodeError`]: why a body could not be decoded, and where.

/// Why a protobuf body could not be decoded. Variants with a `path` name the field, in
/// Kubernetes field-path notation (`spec.template.spec.containers[0].ports[1]`, map values as
/// `metadata.labels[app]`); paths inside the `runtime.Unknown` envelope start with
/// `envelope`, and an empty path is the object itself.
///
/// [`DecodeError::UnknownKind`] means the body is well-formed but of a kind this crate has no
/// table for (kube-apiserver answers such requests with 415 Unsupported Media Type); every
/// other variant is a malformed body (400 Bad Request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The body is empty, or only the 4-byte prefix.
    #[error("empty protobuf body")]
    Empty,
    /// The body does not start with the Kubernetes protobuf prefix `k8s\0`.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    MissingMagic,
    /// Neither the envelope nor the caller's defaults give a kind.
    #[error("Object 'Kind' is missing in protobuf body")]
    MissingKind,
    /// Neither the envelope nor the caller's defaults give an apiVersion.
    #[error("Object 'apiVersion' is missing in protobuf body")]
    MissingApiVersion,
    /// The kind is not one this crate can decode.
    #[error("no protobuf decoding for kind {kind:?} in {api_version:?}")]
    UnknownKind {
        /// The apiVersion the body claims.
        api_version: String,
        /// The kind the body claims.
        kind: String,
    },
    /// The input ends inside a field.
    #[error("{}: unexpected end of protobuf data", show(path))]
    Truncated {
        /// Where.
        path: String,
    },
    /// A varint is longer than 10 bytes.
    #[error("{}: protobuf varint overflows 64 bits", show(path))]
    VarintOverflow {
        /// Where.
        path: String,
    },
    /// A field tag has field number 0 or one above 2^29-1.
    #[error("{}: illegal protobuf field number {number}", show(path))]
    InvalidFieldNumber {
        /// Where (the message containing the tag).
        path: String,
        /// The field number read.
        number: u64,
    },
    /// A field tag has wire type 6 or 7, or an unmatched end-group.
    #[error("{}: illegal protobuf wire type {wire_type}", show(path))]
    InvalidWireType {
        /// Where.
        path: String,
        /// The wire type read.
        wire_type: u8,
    },
    /// A known field arrives with the wrong wire type (for example a string field encoded
    /// as a varint).
    #[error("{}: wrong wire type {found} for a {expected} field", show(path))]
    WrongWireType {
        /// The field.
        path: String,
        /// What the field's type needs (`varint`, `length-delimited`, `fixed64`).
        expected: &'static str,
        /// The wire type found.
        found: u8,
    },
    /// Messages (or groups of an unknown field) nested deeper than the limit.
    #[error("{}: protobuf messages nested deeper than {limit}", show(path))]
    TooDeep {
        /// Where the limit was reached.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// The object would expand to more JSON values than the body's size allows (see
    /// [`crate::VALUES_PER_BYTE`]): many empty messages, each standing for a Go zero value.
    #[error("{}: the decoded object would exceed {limit} JSON values", show(path))]
    TooLarge {
        /// Where the limit was reached.
        path: String,
        /// The limit for this body.
        limit: usize,
    },
    /// A `RawExtension`, `FieldsV1` or `JSON` field whose bytes are not JSON.
    #[error("{}: embedded data is not valid JSON: {message}", show(path))]
    InvalidEmbeddedJson {
        /// The field.
        path: String,
        /// The JSON parser's complaint.
        message: String,
    },
    /// An `IntOrString` whose type is neither 0 (int) nor 1 (string).
    #[error("{}: impossible IntOrString.Type {value}", show(path))]
    InvalidIntOrString {
        /// The field.
        path: String,
        /// The type found.
        value: i64,
    },
    /// A time outside the years 0000–9999, which RFC 3339 cannot express.
    #[error(
        "{}: time {seconds}s since the epoch is outside the years 0000-9999",
        show(path)
    )]
    InvalidTime {
        /// The field.
        path: String,
        /// The seconds since the epoch.
        seconds: i64,
    },
    /// A `double` that is NaN or infinite, which JSON cannot express.
    #[error(
        "{}: unsupported value {value} (JSON has no NaN or infinity)",
        show(path)
    )]
    NonFiniteNumber {
        /// The field.
        path: String,
        /// The value, as text.
        value: String,
    },
}

impl DecodeError {
    /// The field path the error is about, if it has one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Self::Truncated { path }
            | Self::VarintOverflow { path }
            | Self::InvalidFieldNumber { path, .. }
            | Self::InvalidWireType { path, .. }
            | Self::WrongWireType { path, .. }
            | Self::TooDeep { path, .. }
            | Self::TooLarge { path, .. }
            | Self::InvalidEmbeddedJson { path, .. }
            | Self::InvalidIntOrString { path, .. }
            | Self::InvalidTime { path, .. }
            | Self::NonFiniteNumber { path, .. } => Some(path),
            Self::Empty
            | Self::MissingMagic
            | Self::MissingKind
            | Self::MissingApiVersion
            | Self::UnknownKind { .. } => None,
        }
    }

    /// Whether the body is well-formed but of a kind there is no protobuf table for (HTTP
    /// 415); otherwise the body is malformed (HTTP 400).
    pub fn is_unsupported_kind(&self) -> bool {
        matches!(self, Self::UnknownKind { .. })
    }
}

/// Why a JSON object could not be encoded as protobuf.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// There is no table for the kind (protobuf is offered for built-in kinds only).
    #[error("no protobuf encoding for {kind:?} in {api_version:?}")]
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// A value does not have the type its field needs.
    #[error("{}: expected {expected}", show(path))]
    Invalid {
        /// The field path.
        path: String,
        /// What the field holds.
        expected: &'static str,
    },
    /// The object nests deeper than the encoder follows.
    #[error("{}: nested too deeply", show(path))]
    TooDeep {
        /// The field path.
        path: String,
    },
}

fn show(path: &str) -> &str {
    if path.is_empty() { "object" } else { path }
}
