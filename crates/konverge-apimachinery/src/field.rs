//! Field errors: one problem with one field of an object, worded as Kubernetes'
//! `k8s.io/apimachinery/pkg/util/validation/field` words it.
//!
//! The API server turns a list of them into a 422 `Invalid` status whose causes carry
//! [`FieldError::reason`], [`FieldError::field`] and [`FieldError::message`].

use serde_json::Value;

use crate::gofmt;

/// The kind of problem, as `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// `Not found`.
    NotFound,
    /// `Required value`.
    Required,
    /// `Duplicate value`.
    Duplicate,
    /// `Invalid value`.
    Invalid,
    /// `Unsupported value`.
    NotSupported,
    /// `Forbidden`.
    Forbidden,
    /// `Too long`.
    TooLong,
    /// `Too many`.
    TooMany,
    /// `Internal error`.
    Internal,
    /// `Invalid value` (a value of the wrong type).
    TypeInvalid,
}

impl ErrorType {
    /// The cause reason in a `Status` (`FieldValueInvalid`, ...).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Internal => "InternalError",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The words that open the message (`Invalid value`, ...).
    pub fn words(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Internal => "Internal error",
        }
    }
}

/// One problem with one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The kind of problem.
    pub kind: ErrorType,
    /// The field's path, `spec.containers[0].name` or `metadata.labels[app]`.
    pub field: String,
    /// The offending value, when the message shows it.
    pub bad_value: Option<Value>,
    /// What is wrong, after the value.
    pub detail: String,
}

impl FieldError {
    /// A problem of `kind` at `field`.
    pub fn new(
        kind: ErrorType,
        field: impl Into<String>,
        bad_value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind,
            field: field.into(),
            bad_value,
            detail: detail.into(),
        }
    }

    /// `Invalid value: <value>: <detail>`.
    pub fn invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, field, Some(value), detail)
    }

    /// `Required value[: <detail>]`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, field, None, detail)
    }

    /// `Forbidden[: <detail>]`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, field, None, detail)
    }

    /// `Unsupported value: <value>: supported values: "a", "b"`.
    pub fn not_supported(field: impl Into<String>, value: Value, supported: &[String]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| gofmt::quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, Some(value), detail)
    }

    /// The cause reason in a `Status`.
    pub fn reason(&self) -> &'static str {
        self.kind.reason()
    }

    /// The message without the field, as a `Status` cause carries it (`ErrorBody`).
    pub fn message(&self) -> String {
        let mut s = match (&self.bad_value, self.kind) {
            (
                _,
                ErrorType::Required
                | ErrorType::Forbidden
                | ErrorType::TooLong
                | ErrorType::Internal,
            )
            | (None, _) => self.kind.words().to_string(),
            (Some(value), kind) => format!("{}: {}", kind.words(), go_value(value)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message())
        } else {
            write!(f, "{}: {}", self.field, self.message())
        }
    }
}

/// A value as Go's `%v` (numbers, booleans), `%q` (strings) or `%#v` (anything else, as
/// decoded JSON) prints it inside a field error.
pub fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => gofmt::quote(s),
        Value::Number(_) | Value::Bool(_) => gofmt::v(value),
        Value::Null => "null".to_string(),
        Value::Array(_) => format!("[]interface {{}}{}", go_composite(value)),
        Value::Object(_) => format!("map[string]interface {{}}{}", go_composite(value)),
    }
}

/// The `{...}` part of Go's `%#v` of a decoded JSON value.
fn go_composite(value: &Value) -> String {
    match value {
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_element).collect();
            format!("{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", gofmt::quote(k), go_element(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
        other => go_value(other),
    }
}

fn go_element(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_string(),
        Value::String(s) => gofmt::quote(s),
        Value::Number(_) | Value::Bool(_) => gofmt::v(value),
        Value::Array(_) | Value::Object(_) => go_value(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_read_as_kubernetes_writes_them() {
        let e = FieldError::invalid(
            "spec.name",
            json!("ab"),
            "spec.name in body should be at least 3 chars long",
        );
        assert_eq!(
            e.to_string(),
            "spec.name: Invalid value: \"ab\": spec.name in body should be at least 3 chars long"
        );
        assert_eq!(e.reason(), "FieldValueInvalid");
        assert_eq!(
            FieldError::required("spec.x", "").to_string(),
            "spec.x: Required value"
        );
        let e = FieldError::not_supported("spec.mode", json!("c"), &["a".into(), "b".into()]);
        assert_eq!(
            e.message(),
            "Unsupported value: \"c\": supported values: \"a\", \"b\""
        );
        assert_eq!(go_value(&json!(3)), "3");
        assert_eq!(go_value(&json!(true)), "true");
    }
}
