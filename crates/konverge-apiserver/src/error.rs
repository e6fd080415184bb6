//! [`ApiError`]: a Kubernetes `Status` failure, and the one place where storage errors become
//! API errors.
//!
//! Every handler returns `Result<_, ApiError>`; the HTTP layer turns an `ApiError` into a
//! `Status` body with the matching HTTP code. Reasons, codes and message wording follow
//! kube-apiserver, because clients branch on them (kube-rs' `ErrorResponse.reason`,
//! client-go's `errors.IsConflict`, kubectl's messages).

use http::StatusCode;
use serde_json::{Value, json};

/// One cause of a failure: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The machine-readable kind of problem (`FieldValueInvalid`, `FieldValueRequired`, ...).
    pub reason: String,
    /// What is wrong, for people.
    pub message: String,
    /// The field path, for example `metadata.name`.
    pub field: String,
}

/// A bad value as kube's field errors print it: strings quoted, a `[]string` with Go's `%#v`,
/// other values as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) if items.iter().all(Value::is_string) => format!(
            "[]string{{{}}}",
            items
                .iter()
                .map(|i| format!("{:?}", i.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

impl Cause {
    /// A `FieldValueInvalid` cause: `field: Invalid value: "v": message`.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: impl AsRef<str>) -> Self {
        Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {}", shown(value), detail.as_ref()),
            field: field.into(),
        }
    }

    /// A `FieldValueNotSupported` cause:
    /// `field: Unsupported value: "v": supported values: "a", "b"`.
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                shown(value),
                list.join(", ")
            ),
            field: field.into(),
        }
    }

    /// A `FieldValueTooLong` cause: `field: Too long: may not be more than N bytes`.
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: may not be more than {max} bytes"),
            field: field.into(),
        }
    }

    /// A `FieldValueRequired` cause.
    pub fn required(field: impl Into<String>) -> Self {
        Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: field.into(),
        }
    }

    /// A `FieldValueRequired` cause that says why: `field: Required value: detail`.
    pub fn required_because(field: impl Into<String>, detail: &str) -> Self {
        Cause {
            reason: "FieldValueRequired".into(),
            message: format!("Required value: {detail}"),
            field: field.into(),
        }
    }

    /// A `FieldValueForbidden` cause.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Cause {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {}", detail.into()),
            field: field.into(),
        }
    }

    /// How kube-apiserver prints the cause inside an Invalid message.
    fn render(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// `Status.reason`: why a request failed, as kube-apiserver names it (`metav1.StatusReason`).
///
/// Control flow branches on these variants (`e.reason == Reason::Conflict`), never on strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// 400: the request is malformed.
    BadRequest,
    /// 401: no valid credentials.
    Unauthorized,
    /// 403: not allowed.
    Forbidden,
    /// 404: no such object or path.
    NotFound,
    /// 405: the verb is not served on this path.
    MethodNotAllowed,
    /// 406: none of the accepted media types can be produced.
    NotAcceptable,
    /// 409: the object to create exists already.
    AlreadyExists,
    /// 409: the write lost a race or a precondition failed.
    Conflict,
    /// 410: the resourceVersion is older than the retained history.
    Expired,
    /// 413: the body or object is too large.
    RequestEntityTooLarge,
    /// 415: the body's media type is not accepted.
    UnsupportedMediaType,
    /// 422: the object fails validation.
    Invalid,
    /// 429: slow down.
    TooManyRequests,
    /// 500: a server fault.
    InternalError,
    /// 504: the server could not answer in time.
    Timeout,
    /// 503: the server cannot serve now.
    ServiceUnavailable,
    /// No reason (`StatusReasonUnknown`, empty): what kube-apiserver answers for errors that
    /// are not API statuses, such as a failed CRD conversion webhook.
    Unknown,
    /// A reason kube-apiserver does not name but passes on, as a webhook's refusal gives it
    /// (see [`Reason::relayed`]).
    Relayed(&'static str),
}

/// How many distinct relayed reasons are kept (each is kept for the life of the process).
const RELAYED_REASONS: usize = 256;

impl Reason {
    /// The reason as `Status.reason` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::Unauthorized => "Unauthorized",
            Reason::Forbidden => "Forbidden",
            Reason::NotFound => "NotFound",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::NotAcceptable => "NotAcceptable",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Expired => "Expired",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::Invalid => "Invalid",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::InternalError => "InternalError",
            Reason::Timeout => "Timeout",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::Unknown => "",
            Reason::Relayed(reason) => reason,
        }
    }

    /// The reason a webhook or another outside party gave, as kube-apiserver passes it on:
    /// one of kube's own when it is one, none when empty, the text itself otherwise — up to
    /// a bound on distinct texts, past which `fallback` stands in.
    pub fn relayed(reason: &str, fallback: Reason) -> Reason {
        const NAMED: [Reason; 16] = [
            Reason::BadRequest,
            Reason::Unauthorized,
            Reason::Forbidden,
            Reason::NotFound,
            Reason::MethodNotAllowed,
            Reason::NotAcceptable,
            Reason::AlreadyExists,
            Reason::Conflict,
            Reason::Expired,
            Reason::RequestEntityTooLarge,
            Reason::UnsupportedMediaType,
            Reason::Invalid,
            Reason::TooManyRequests,
            Reason::InternalError,
            Reason::Timeout,
            Reason::ServiceUnavailable,
        ];
        if reason.is_empty() {
            return Reason::Unknown;
        }
        if let Some(named) = NAMED.iter().find(|r| r.as_str() == reason) {
            return *named;
        }
        static KEPT: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = kept.iter().find(|k| **k == reason) {
            return Reason::Relayed(known);
        }
        if kept.len() >= RELAYED_REASONS {
            return fallback;
        }
        let leaked: &'static str = Box::leak(reason.to_string().into_boxed_str());
        kept.push(leaked);
        Reason::Relayed(leaked)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What a failed request answers: a `Status` with `status: Failure`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub code: StatusCode,
    /// The `Status.reason`.
    pub reason: Reason,
    /// The `Status.message`.
    pub message: String,
    /// `Status.details`: the object named, when there is one (boxed: errors travel through
    /// every `Result` and should stay small).
    pub details: Option<Box<Details>>,
}

/// `Status.details`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Details {
    /// The object's name.
    pub name: String,
    /// The API group.
    pub group: String,
    /// The resource (plural) or kind the error is about.
    pub kind: String,
    /// Field-level causes.
    pub causes: Vec<Cause>,
    /// Seconds a client should wait before retrying.
    pub retry_after_seconds: Option<u32>,
    /// Not a detail: the `Status`'s own `metadata.continue`, the token an expired continue
    /// token is answered with.
    pub list_continue: Option<String>,
}

/// A resource and object name, as errors name them: `configmaps "x"`, `deployments.apps "y"`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Target<'a> {
    /// The API group, empty for core.
    pub group: &'a str,
    /// The resource plural.
    pub resource: &'a str,
    /// The object name, empty for collections.
    pub name: &'a str,
}

impl Target<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn details(&self) -> Details {
        Details {
            name: self.name.to_string(),
            group: self.group.to_string(),
            kind: self.resource.to_string(),
            ..Details::default()
        }
    }
}

impl ApiError {
    fn new(code: StatusCode, reason: Reason, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Details) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Reason::BadRequest, message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            Reason::Unauthorized,
            "Unauthorized",
        )
    }

    /// 403 Forbidden: `configmaps "x" is forbidden: why`, or `configmaps is forbidden: why`
    /// without a name.
    pub fn forbidden(target: Target<'_>, why: impl AsRef<str>) -> Self {
        let message = if target.name.is_empty() {
            format!("{} is forbidden: {}", target.qualified(), why.as_ref())
        } else {
            format!(
                "{} {:?} is forbidden: {}",
                target.qualified(),
                target.name,
                why.as_ref()
            )
        };
        Self::new(StatusCode::FORBIDDEN, Reason::Forbidden, message).with_details(target.details())
    }

    /// 403 Forbidden about no resource (a path): the message as given, empty details.
    pub fn forbidden_plain(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, Reason::Forbidden, message)
            .with_details(Details::default())
    }

    /// 404 NotFound for an object: `configmaps "x" not found`.
    pub fn not_found(target: Target<'_>) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            Reason::NotFound,
            format!("{} {:?} not found", target.qualified(), target.name),
        )
        .with_details(target.details())
    }

    /// 404 NotFound for a path the server does not serve.
    pub fn no_route() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            Reason::NotFound,
            "the server could not find the requested resource",
        )
        .with_details(Details::default())
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &http::Method, what: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            Reason::MethodNotAllowed,
            format!(
                "the server does not allow this method on the requested resource ({method} {what})"
            ),
        )
        .with_details(Details::default())
    }

    /// 409 AlreadyExists.
    pub fn already_exists(target: Target<'_>) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            Reason::AlreadyExists,
            format!("{} {:?} already exists", target.qualified(), target.name),
        )
        .with_details(target.details())
    }

    /// 409 Conflict: the object changed since the version the client sent.
    pub fn conflict(target: Target<'_>, why: impl AsRef<str>) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            Reason::Conflict,
            format!(
                "Operation cannot be fulfilled on {} {:?}: {}",
                target.qualified(),
                target.name,
                why.as_ref()
            ),
        )
        .with_details(target.details())
    }

    /// The standard optimistic-concurrency conflict message.
    pub fn modified(target: Target<'_>) -> Self {
        Self::conflict(
            target,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 410 Expired: a resourceVersion older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, Reason::Expired, message)
    }

    /// 406 NotAcceptable: none of the media types the client accepts can be written.
    pub fn not_acceptable(supported: &str) -> Self {
        Self::new(
            StatusCode::NOT_ACCEPTABLE,
            Reason::NotAcceptable,
            format!("only the following media types are accepted: {supported}"),
        )
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            Reason::RequestEntityTooLarge,
            message,
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Reason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type:?})"
            ),
        )
    }

    /// 422 Invalid with field causes: `Kind "name" is invalid: [causes]`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let rendered: Vec<String> = causes.iter().map(Cause::render).collect();
        let list = if rendered.len() == 1 {
            rendered[0].clone()
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            Reason::Invalid,
            format!("{qualified} {name:?} is invalid: {list}"),
        )
        .with_details(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes,
            ..Details::default()
        })
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            Reason::TooManyRequests,
            message,
        )
        .with_details(Details {
            retry_after_seconds: Some(retry_after_seconds),
            ..Details::default()
        })
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Reason::InternalError,
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// 504 Timeout.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, Reason::Timeout, message)
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Reason::ServiceUnavailable,
            message,
        )
    }

    /// Maps a storage error met while serving a request about `target`.
    ///
    /// This is the only translation of [`konverge_store::Error`] into API errors.
    pub fn from_store(err: konverge_store::Error, target: Target<'_>) -> Self {
        use konverge_store::Error as S;
        match err {
            S::NotFound { .. } => Self::not_found(target),
            S::AlreadyExists { .. } => Self::already_exists(target),
            S::Conflict { .. } => Self::modified(target),
            S::Compacted { compact_revision } => Self::expired(format!(
                "The resourceVersion for the provided list is too old (compacted at {compact_revision})."
            )),
            S::FutureRevision { requested, current } => Self::timeout(format!(
                "Too large resource version: {requested}, current: {current}"
            ))
            .with_details(Details {
                retry_after_seconds: Some(1),
                ..Details::default()
            }),
            S::InvalidRequest(message) => Self::bad_request(message),
            S::EmptyKey | S::InvalidRange { .. } | S::DuplicateKey(_) => {
                Self::internal(format!("storage rejected the request: {err}"))
            }
            S::Closed => Self::unavailable("storage is shutting down"),
            other => Self::internal(other.to_string()),
        }
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.code.as_u16(),
        });
        // `reason` is omitted when empty, as Go's `omitempty` leaves it out.
        if self.reason == Reason::Unknown
            && let Some(map) = status.as_object_mut()
        {
            map.remove("reason");
        }
        if let Some(token) = self.details.as_ref().and_then(|d| d.list_continue.as_ref()) {
            status["metadata"] = json!({"continue": token});
        }
        if let Some(d) = self.details.as_ref().filter(|d| d.list_continue.is_none()) {
            let mut details = serde_json::Map::new();
            if !d.name.is_empty() {
                details.insert("name".into(), d.name.clone().into());
            }
            if !d.group.is_empty() {
                details.insert("group".into(), d.group.clone().into());
            }
            if !d.kind.is_empty() {
                details.insert("kind".into(), d.kind.clone().into());
            }
            if !d.causes.is_empty() {
                details.insert(
                    "causes".into(),
                    d.causes
                        .iter()
                        .map(|c| {
                            // Go's `omitempty`: empty parts of a cause are left out.
                            let mut cause = serde_json::Map::new();
                            for (key, value) in [
                                ("reason", &c.reason),
                                ("message", &c.message),
                                ("field", &c.field),
                            ] {
                                if !value.is_empty() {
                                    cause.insert(key.into(), value.clone().into());
                                }
                            }
                            Value::Object(cause)
                        })
                        .collect(),
                );
            }
            if let Some(s) = d.retry_after_seconds {
                details.insert("retryAfterSeconds".into(), s.into());
            }
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// `Result` with [`ApiError`].
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    const CM: Target<'static> = Target {
        group: "",
        resource: "configmaps",
        name: "x",
    };
    const DEPLOY: Target<'static> = Target {
        group: "apps",
        resource: "deployments",
        name: "web",
    };

    /// Every storage error maps to the code and reason kube-apiserver answers with.
    #[test]
    fn store_errors_map_to_kubernetes_statuses() {
        use konverge_store::Error as S;
        let key = bytes::Bytes::from_static(b"/registry/configmaps/default/x");
        let table: Vec<(S, u16, &str)> = vec![
            (S::NotFound { key: key.clone() }, 404, "NotFound"),
            (S::AlreadyExists { key: key.clone() }, 409, "AlreadyExists"),
            (
                S::Conflict {
                    key: key.clone(),
                    expected: 1,
                    actual: 2,
                },
                409,
                "Conflict",
            ),
            (
                S::Compacted {
                    compact_revision: 7,
                },
                410,
                "Expired",
            ),
            (
                S::FutureRevision {
                    requested: 9,
                    current: 3,
                },
                504,
                "Timeout",
            ),
            (S::InvalidRequest("too many ops".into()), 400, "BadRequest"),
            (S::EmptyKey, 500, "InternalError"),
            (S::Closed, 503, "ServiceUnavailable"),
            (
                S::Backend {
                    message: "disk".into(),
                    source: None,
                },
                500,
                "InternalError",
            ),
        ];
        for (err, code, reason) in table {
            let shown = err.to_string();
            let api = ApiError::from_store(err, CM);
            assert_eq!(
                (api.code.as_u16(), api.reason.as_str()),
                (code, reason),
                "{shown}"
            );
            let status = api.to_status();
            assert_eq!(status["code"], code);
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["status"], "Failure");
        }
    }

    #[test]
    fn messages_match_kube_apiserver() {
        assert_eq!(
            ApiError::not_found(CM).message,
            r#"configmaps "x" not found"#
        );
        assert_eq!(
            ApiError::already_exists(DEPLOY).message,
            r#"deployments.apps "web" already exists"#
        );
        assert_eq!(
            ApiError::modified(CM).message,
            r#"Operation cannot be fulfilled on configmaps "x": the object has been modified; please apply your changes to the latest version and try again"#
        );
        let invalid = ApiError::invalid(
            "ConfigMap",
            "",
            "Bad_Name",
            vec![Cause::invalid(
                "metadata.name",
                &Value::from("Bad_Name"),
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
            )],
        );
        assert!(invalid.message.starts_with(
            r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123"#
        ));
        let status = invalid.to_status();
        assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueInvalid"
        );
    }
}
