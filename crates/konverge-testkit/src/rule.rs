//! What an injected fault applies to ([`Rule`]) and what it answers with ([`Failure`]): shared
//! by the fault layer, the request log (which counts what a rule matches) and stale reads.

use axum::body::Body;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::request_info::{RequestInfo, Verb};

/// Which requests a fault applies to. Every condition set must hold; an empty rule matches
/// every request for a resource (never discovery, `/version` and the like).
///
/// ```
/// use konverge_testkit::{Rule, Verb};
///
/// // Updates and patches of the ConfigMap `default/settings` (not of its subresources).
/// let rule = Rule::new()
///     .verb(Verb::Update)
///     .verb(Verb::Patch)
///     .resource("configmaps")
///     .namespace("default")
///     .name("settings");
/// // Status updates of any Deployment.
/// let status = Rule::new().verb(Verb::Update).resource("deployments/status");
/// # let _ = (rule, status);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    verbs: Vec<Verb>,
    group: Option<String>,
    /// The plural and the subresource (`None`: the resource itself).
    resource: Option<(String, Option<String>)>,
    namespace: Option<String>,
    name: Option<String>,
}

impl Rule {
    /// A rule that matches every request for a resource.
    pub fn new() -> Rule {
        Rule::default()
    }

    /// Only requests with this verb; called again, with any of the verbs given.
    pub fn verb(mut self, verb: Verb) -> Self {
        if !self.verbs.contains(&verb) {
            self.verbs.push(verb);
        }
        self
    }

    /// Only requests for this resource, by plural name, as RBAC names resources:
    /// `"configmaps"` is the resource itself (not its subresources), `"deployments/status"`
    /// its status subresource.
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(match resource.split_once('/') {
            Some((plural, sub)) => (plural.to_string(), Some(sub.to_string())),
            None => (resource.to_string(), None),
        });
        self
    }

    /// Only requests in this API group (`""` for the core group), for plurals two groups
    /// share (`events`).
    pub fn group(mut self, group: &str) -> Self {
        self.group = Some(group.to_string());
        self
    }

    /// Only requests in this namespace (not those across all namespaces).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// Only requests for the object with this name (including lists and watches whose
    /// `fieldSelector` pins `metadata.name` to it, as a watch of one object does).
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// Whether the rule applies to `request`.
    pub fn matches(&self, request: &RequestInfo) -> bool {
        let Some(verb) = request.verb else {
            return false;
        };
        if !self.verbs.is_empty() && !self.verbs.contains(&verb) {
            return false;
        }
        if self.group.as_ref().is_some_and(|g| *g != request.group) {
            return false;
        }
        if let Some((plural, sub)) = &self.resource
            && (request.resource.as_ref() != Some(plural) || request.subresource != *sub)
        {
            return false;
        }
        if self.namespace.is_some() && request.namespace != self.namespace {
            return false;
        }
        if self.name.is_some() && request.name != self.name {
            return false;
        }
        true
    }
}

/// The error an injected fault answers with: a Kubernetes `Status` (`status: Failure`) as
/// kube-apiserver writes it, with the request's resource and name filled into the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    code: StatusCode,
    pub(crate) reason: String,
    message: Option<String>,
    retry_after: Option<u32>,
}

impl Failure {
    /// A failure with any code and reason; the message defaults to one naming both.
    pub fn new(code: StatusCode, reason: impl Into<String>) -> Failure {
        Failure {
            code,
            reason: reason.into(),
            message: None,
            retry_after: None,
        }
    }

    /// The reason kube-apiserver gives a status code (`409` Conflict, `500` InternalError,
    /// `429` TooManyRequests, `503` ServiceUnavailable, `504` Timeout, `410` Expired, `404`
    /// NotFound, ...; an empty reason — Unknown — for codes it has no reason for).
    pub fn from_code(code: StatusCode) -> Failure {
        let reason = match code.as_u16() {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            406 => "NotAcceptable",
            409 => "Conflict",
            410 => "Expired",
            413 => "RequestEntityTooLarge",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "",
        };
        Failure::new(code, reason)
    }

    /// 409 Conflict: `Operation cannot be fulfilled on configmaps "x": the object has been
    /// modified; please apply your changes to the latest version and try again`.
    pub fn conflict() -> Failure {
        Failure::from_code(StatusCode::CONFLICT)
    }

    /// 500 InternalError.
    pub fn internal_error() -> Failure {
        Failure::from_code(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// 429 TooManyRequests. kube-rs clients retry these (and 503, 504) on their own, after a
    /// short backoff or the [`retry_after`](Self::retry_after) the server asks for.
    pub fn too_many_requests() -> Failure {
        Failure::from_code(StatusCode::TOO_MANY_REQUESTS)
    }

    /// 503 ServiceUnavailable.
    pub fn service_unavailable() -> Failure {
        Failure::from_code(StatusCode::SERVICE_UNAVAILABLE)
    }

    /// Replaces the default message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// Asks the client to wait this many seconds before it retries (`Retry-After` header and
    /// `details.retryAfterSeconds`, as kube-apiserver sends with its 429s). Off by default,
    /// so that retrying clients do not slow tests down.
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The HTTP status code.
    pub fn code(&self) -> StatusCode {
        self.code
    }

    /// The `Status` object answering `request` (`name`: the object's, if known).
    pub(crate) fn status(&self, request: &RequestInfo, name: &str) -> Value {
        let resource = request.qualified_resource();
        let message = match (&self.message, self.reason.as_str()) {
            (Some(message), _) => message.clone(),
            (None, "Conflict") => format!(
                "Operation cannot be fulfilled on {resource} {name:?}: the object has been modified; please apply your changes to the latest version and try again"
            ),
            (None, "AlreadyExists") => format!("{resource} {name:?} already exists"),
            (None, "NotFound") => format!("{resource} {name:?} not found"),
            (None, "InternalError") => {
                "Internal error occurred: injected by konverge-testkit".to_string()
            }
            (None, "TooManyRequests") => "Too many requests, please try again later.".into(),
            (None, "Timeout") => {
                "Timeout: request did not complete within the allowed duration".into()
            }
            (None, reason) => format!(
                "injected by konverge-testkit: {} {reason}",
                self.code.as_u16()
            ),
        };
        let mut details = serde_json::Map::new();
        if !name.is_empty() {
            details.insert("name".into(), name.into());
        }
        if !request.group.is_empty() {
            details.insert("group".into(), request.group.clone().into());
        }
        if let Some(plural) = &request.resource {
            details.insert("kind".into(), plural.clone().into());
        }
        if self.reason == "InternalError" {
            details.insert("causes".into(), json!([{"message": message}]));
        }
        if let Some(seconds) = self.retry_after {
            details.insert("retryAfterSeconds".into(), seconds.into());
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }

    pub(crate) fn response(&self, request: &RequestInfo, name: &str) -> Response<Body> {
        let body = serde_json::to_vec(&self.status(request, name)).unwrap_or_default();
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = self.code;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
