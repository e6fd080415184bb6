//! Custom resources converted by their definition's webhook (`spec.conversion.strategy:
//! Webhook`), as apiextensions-apiserver converts them.
//!
//! Objects are stored in the storage version (an object stored before the storage version
//! changed stays in the version it was stored in until it is written again). Whatever is read
//! — a get, a page of a list, a watch event, the current object a write starts from — is
//! converted to the version of the request; whatever is written is converted to the storage
//! version before it is stored, and the stored object back to the request's version for the
//! answer. Each conversion POSTs a `ConversionReview` to the webhook; objects already in the
//! wanted version are not sent, and the objects of one list page go in one review.
//!
//! The answer is checked as kube-apiserver checks it (the review's kind and uid, the result's
//! status, one object per object sent, each one's apiVersion, kind, name, namespace and uid)
//! and the metadata of each converted object is put back as it was but for labels and
//! annotations, which the webhook may change. Failures are kube-apiserver's errors word for
//! word (`conversion webhook for stable.example.com/v1, Kind=CronTab failed: Post
//! "https://...": ...`), answered as it answers errors that are not API statuses: 500 without
//! a reason.
//!
//! As kube-apiserver decodes from storage, an object read is first defaulted by the schema of
//! the version it is stored in; a converted object is pruned by the schema of the version it
//! was converted to.
//!
//! Resources without a webhook never come here: [`webhook`] is the one check on their path.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use konverge_apimachinery::field::{ErrorType, FieldError};
use serde_json::{Map, Value};

use super::Registry;
use crate::error::{ApiError, Reason, Result};
use crate::resources::ResourceType;
use crate::resources::crd::ConversionWebhook;

/// How long a conversion webhook has to answer (kube-apiserver's webhook client timeout).
const TIMEOUT: Duration = Duration::from_secs(30);

/// How much of an error body a message quotes (client-go's
/// `maxUnstructuredResponseTextBytes`).
const MAX_ERROR_TEXT: usize = 2048;

/// The most annotation bytes an object may carry (`TotalAnnotationSizeLimitB`).
const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// The scheme kube-apiserver decodes webhook answers with, as its errors name it.
const HOOK_SCHEME: &str = "k8s.io/apiserver/pkg/util/webhook/client.go:71";

/// The conversion webhook of `rt`'s definition: `None` for built-in resources and custom
/// resources converted by `None`.
pub(crate) fn webhook(rt: &ResourceType) -> Option<&Arc<ConversionWebhook>> {
    rt.custom.as_ref()?.webhook.as_ref()
}

/// Why a conversion failed, in kube-apiserver's words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConversionError {
    /// The webhook could not be called, or its answer is not a successful review.
    #[error("conversion webhook for {gvk} failed: {reason}")]
    Failed {
        /// The group, version and kind converted from (`stable.example.com/v1, Kind=CronTab`).
        gvk: String,
        /// Why.
        reason: String,
    },
    /// The review holds another number of objects than were sent.
    #[error("conversion webhook for {gvk} returned {got} objects, expected {expected}")]
    Count {
        /// Converted from.
        gvk: String,
        /// How many came back.
        got: usize,
        /// How many were sent.
        expected: usize,
    },
    /// One converted object of several is not what was asked for.
    #[error(
        "conversion webhook for {gvk} returned invalid converted object at index {index}: {reason}"
    )]
    InvalidAt {
        /// Converted from.
        gvk: String,
        /// Its index among the objects sent.
        index: usize,
        /// Why.
        reason: String,
    },
    /// One converted object of several has metadata that cannot be taken.
    #[error(
        "conversion webhook for {gvk} returned invalid metadata in object at index {index}: {reason}"
    )]
    MetadataAt {
        /// Converted from.
        gvk: String,
        /// Its index among the objects sent.
        index: usize,
        /// Why.
        reason: String,
    },
    /// The one converted object has another group, version or kind than asked for.
    #[error("conversion webhook for {gvk} returned invalid object at index 0: {reason}")]
    InvalidType {
        /// Converted from.
        gvk: String,
        /// Why.
        reason: String,
    },
    /// The one converted object is another object.
    #[error("conversion webhook for {gvk} returned invalid object: {reason}")]
    Invalid {
        /// Converted from.
        gvk: String,
        /// Why.
        reason: String,
    },
    /// The one converted object has metadata that cannot be taken.
    #[error("conversion webhook for {gvk} returned invalid metadata: {reason}")]
    Metadata {
        /// Converted from.
        gvk: String,
        /// Why.
        reason: String,
    },
    /// Said as it is: the one converted object is not an object at all, or the definition
    /// names no ConversionReview version the server speaks.
    #[error("{0}")]
    Plain(String),
}

impl From<ConversionError> for ApiError {
    fn from(err: ConversionError) -> Self {
        ApiError {
            code: http::StatusCode::INTERNAL_SERVER_ERROR,
            reason: Reason::Unknown,
            message: err.to_string(),
            details: None,
        }
    }
}

/// A conversion failure as a watch ends with it: an internal error (kube-apiserver's watch
/// sends what it cannot decode from storage so).
pub(crate) fn watch_error(err: &ApiError) -> ApiError {
    let mut internal = ApiError::internal(err.message.clone());
    internal.details = Some(Box::new(crate::error::Details {
        causes: vec![crate::error::Cause {
            reason: String::new(),
            message: err.message.clone(),
            field: String::new(),
        }],
        ..crate::error::Details::default()
    }));
    internal
}

/// The ConversionReview versions the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    fn name(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "v1",
            ReviewVersion::V1beta1 => "v1beta1",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "apiextensions.k8s.io/v1",
            ReviewVersion::V1beta1 => "apiextensions.k8s.io/v1beta1",
        }
    }

    /// The first of a definition's `conversionReviewVersions` the server speaks.
    fn choose(versions: &[String]) -> Option<ReviewVersion> {
        versions.iter().find_map(|v| match v.as_str() {
            "v1" => Some(ReviewVersion::V1),
            "v1beta1" => Some(ReviewVersion::V1beta1),
            _ => None,
        })
    }
}

/// The `version` of an `apiVersion` (`stable.example.com/v1` → `v1`).
fn version_of(api_version: &str) -> &str {
    api_version.rsplit('/').next().unwrap_or(api_version)
}

fn str_field<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

fn meta_field<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A group, version and kind as Go's `GroupVersionKind.String()` prints it.
fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    format!("{group}/{version}, Kind={kind}")
}

impl Registry {
    /// A stored object as `rt` serves it.
    pub(crate) async fn served_one(
        &self,
        rt: &ResourceType,
        hook: &ConversionWebhook,
        obj: Value,
    ) -> Result<Value> {
        let mut items = vec![Arc::new(obj)];
        self.served_many(rt, hook, &mut items).await?;
        let obj = items.pop().unwrap_or_default();
        Ok(Arc::try_unwrap(obj).unwrap_or_else(|shared| Value::clone(&shared)))
    }

    /// Stored objects as `rt` serves them: defaulted in the version they are stored in, and
    /// those not in `rt`'s version converted, in one review.
    pub(crate) async fn served_many(
        &self,
        rt: &ResourceType,
        hook: &ConversionWebhook,
        items: &mut [Arc<Value>],
    ) -> Result<()> {
        let desired = rt.api_version();
        let mut sent_at = Vec::new();
        let mut sent = Vec::new();
        for (i, item) in items.iter_mut().enumerate() {
            let stored_in = str_field(item, "apiVersion");
            let needs = stored_in != desired;
            let defaults = hook
                .schemas
                .get(version_of(stored_in))
                .filter(|s| s.has_defaults());
            if !needs && defaults.is_none() {
                continue;
            }
            let mut obj = Value::clone(item);
            if let Some(schema) = defaults {
                schema.default(&mut obj);
            }
            if needs {
                sent_at.push(i);
                sent.push(obj);
            } else {
                *item = Arc::new(obj);
            }
        }
        if sent.is_empty() {
            return Ok(());
        }
        let converted = self.review(hook, sent, &rt.version).await?;
        for (i, obj) in sent_at.into_iter().zip(converted) {
            items[i] = Arc::new(obj);
        }
        Ok(())
    }

    /// `obj`, which is in `rt`'s version, in the storage version.
    pub(crate) async fn to_storage(
        &self,
        rt: &ResourceType,
        hook: &ConversionWebhook,
        obj: Value,
    ) -> Result<Value> {
        if rt.version == hook.storage_version {
            return Ok(obj);
        }
        let mut converted = self.review(hook, vec![obj], &hook.storage_version).await?;
        Ok(converted.pop().unwrap_or_default())
    }

    /// Sends `objects` to the webhook to be converted to `version`, and checks and takes
    /// what it answers.
    ///
    /// Boxed: reaching a webhook behind a Service reads Services and EndpointSlices through
    /// this registry, so reads and reviews contain each other's futures.
    fn review<'a>(
        &'a self,
        hook: &'a ConversionWebhook,
        objects: Vec<Value>,
        version: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Value>, ConversionError>> {
        Box::pin(async move {
            let Some(first) = objects.first() else {
                return Ok(objects);
            };
            let gvk = gvk_string(str_field(first, "apiVersion"), str_field(first, "kind"));
            let desired = format!("{}/{version}", hook.group);
            let review_version = ReviewVersion::choose(&hook.review_versions).ok_or_else(|| {
                ConversionError::Plain("no supported conversion review versions".into())
            })?;
            let uid = uuid::Uuid::new_v4().to_string();
            let body = request_body(review_version, &uid, &desired, &objects);
            let failed = |reason: String| ConversionError::Failed {
                gvk: gvk.clone(),
                reason,
            };
            let answer = self
                .webhooks
                .call(&hook.client, None, Bytes::from(body), TIMEOUT, self)
                .await
                .map_err(|e| failed(format!("Post {:?}: {e}", hook.client.target(None))))?;
            let review =
                read_response(review_version, answer.status, &answer.body).map_err(failed)?;
            let returned = check_review(review_version, &uid, &review).map_err(failed)?;
            take_converted(&gvk, &desired, objects, returned, hook.schemas.get(version))
        })
    }
}

/// The review kube-apiserver posts: the objects to convert, the version wanted, a new uid
/// (and an empty response, as it sends one).
fn request_body(version: ReviewVersion, uid: &str, desired: &str, objects: &[Value]) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Review<'a> {
        kind: &'static str,
        #[serde(rename = "apiVersion")]
        api_version: &'static str,
        request: Request<'a>,
        response: EmptyResponse,
    }
    #[derive(serde::Serialize)]
    struct Request<'a> {
        uid: &'a str,
        #[serde(rename = "desiredAPIVersion")]
        desired_api_version: &'a str,
        objects: &'a [Value],
    }
    #[derive(serde::Serialize)]
    struct EmptyResponse {
        uid: &'static str,
        #[serde(rename = "convertedObjects")]
        converted_objects: Option<()>,
        result: EmptyStatus,
    }
    #[derive(serde::Serialize)]
    struct EmptyStatus {
        metadata: Map<String, Value>,
    }
    serde_json::to_vec(&Review {
        kind: "ConversionReview",
        api_version: version.api_version(),
        request: Request {
            uid,
            desired_api_version: desired,
            objects,
        },
        response: EmptyResponse {
            uid: "",
            converted_objects: None,
            result: EmptyStatus {
                metadata: Map::new(),
            },
        },
    })
    .unwrap_or_default()
}

/// The message of a refusal without a `Status`, as client-go words it for each status code.
/// The body is quoted when it is text: a body that is not JSON (which is what Go's
/// `http.Error` sends) is taken as text.
fn unexpected_status(code: u16, body: &[u8]) -> String {
    let text = || {
        let capped = &body[..body.len().min(MAX_ERROR_TEXT)];
        match std::str::from_utf8(capped) {
            Ok(t) if serde_json::from_slice::<Value>(body).is_err() => t.trim().to_string(),
            _ => "unknown".to_string(),
        }
    };
    match code {
        409 => "the server reported a conflict".into(),
        404 => "the server could not find the requested resource".into(),
        400 => "the server rejected our request for an unknown reason".into(),
        401 => "the server has asked for the client to provide credentials".into(),
        403 | 415 => text(),
        406 => match text() {
            t if t.is_empty() || t == "unknown" => {
                "the server was unable to respond with a content type that the client supports"
                    .into()
            }
            t => t,
        },
        405 => "the server does not allow this method on the requested resource".into(),
        422 => "the server rejected our request due to an error in our request".into(),
        503 => "the server is currently unable to handle the request".into(),
        504 => "the server was unable to return a response in the time allotted, but may still be processing the request".into(),
        429 => "the server has received too many requests and has asked us to try again later".into(),
        c if c >= 500 => format!(
            "an error on the server ({:?}) has prevented the request from succeeding",
            text()
        ),
        c => format!("the server responded with the status code {c} but did not return more information"),
    }
}

/// A `Status` with `status: Failure` in a body: its message, as client-go prefers it to its
/// own words.
fn failure_status(body: &Value) -> Option<String> {
    let api_version = str_field(body, "apiVersion");
    (str_field(body, "kind") == "Status"
        && (api_version.is_empty() || api_version == "v1")
        && str_field(body, "status") == "Failure")
        .then(|| str_field(body, "message").to_string())
}

/// A body as Kubernetes' decoder reads it: JSON when it starts with `{`, otherwise YAML
/// (which JSON arrays and scalars also are). The error is the decoder's.
fn decode_body(body: &[u8]) -> Result<Value, String> {
    const FIND_KIND: &str = r#"struct { APIVersion string "json:\"apiVersion,omitempty\""; Kind string "json:\"kind,omitempty\"" }"#;
    let text = String::from_utf8_lossy(body);
    let value = if text.trim_start().starts_with('{') {
        serde_json::from_str::<Value>(&text).map_err(|e| {
            let why = if e.is_eof() {
                "unexpected end of JSON input".to_string()
            } else {
                e.to_string()
            };
            format!("couldn't get version/kind; json parse error: {why}")
        })?
    } else {
        serde_saphyr::from_str::<Value>(&text)
            .map_err(|e| format!("error converting YAML to JSON: yaml: {e}"))?
    };
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Map::new())),
        other => Err(format!(
            "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type {FIND_KIND}",
            konverge_apimachinery::gofmt::json_kind(&other)
        )),
    }
}

/// What the webhook answered, read as client-go's REST client reads it into a
/// `ConversionReview` of `version`: the review, or the error it reports.
fn read_response(version: ReviewVersion, status: u16, body: &[u8]) -> Result<Value, String> {
    if !(200..=206).contains(&status) {
        let status_message = serde_json::from_slice::<Value>(body)
            .ok()
            .as_ref()
            .and_then(failure_status);
        return Err(status_message.unwrap_or_else(|| unexpected_status(status, body)));
    }
    if body.is_empty() {
        return Err(format!(
            "0-length response with status code: {status} and content type: application/json"
        ));
    }
    let value = decode_body(body)?;
    let api_version = str_field(&value, "apiVersion");
    let (group, gv_version) = match api_version.matches('/').count() {
        0 => ("", api_version),
        1 => api_version.split_once('/').unwrap_or_default(),
        _ => return Err(format!("unexpected GroupVersion string: {api_version}")),
    };
    // Missing parts are taken from the type decoded into, as Kubernetes' decoder does.
    let mut kind = str_field(&value, "kind");
    if kind.is_empty() {
        kind = "ConversionReview";
    }
    let (group, gv_version) = if gv_version.is_empty() && group.is_empty() {
        ("apiextensions.k8s.io", version.name())
    } else if gv_version.is_empty() && group == "apiextensions.k8s.io" {
        (group, version.name())
    } else {
        (group, gv_version)
    };
    if group.is_empty() && gv_version == "v1" && kind == "Status" {
        // A Status in a successful answer: a failure is said with its message; a success
        // leaves the review empty.
        if str_field(&value, "status") != "Success" {
            return Err(str_field(&value, "message").to_string());
        }
        return Ok(Value::Object(Map::new()));
    }
    let qualified = if group.is_empty() {
        gv_version.to_string()
    } else {
        format!("{group}/{gv_version}")
    };
    if kind != "ConversionReview"
        || group != "apiextensions.k8s.io"
        || !matches!(gv_version, "v1" | "v1beta1")
    {
        return Err(format!(
            "no kind {kind:?} is registered for version {qualified:?} in scheme {HOOK_SCHEME:?}"
        ));
    }
    if gv_version != version.name() {
        return Err(format!(
            "converting ({gv_version}.ConversionReview) to ({}.ConversionReview): unknown conversion",
            version.name()
        ));
    }
    check_types(version, &value)?;
    Ok(value)
}

/// The fields of a review that must have their type, with Go's unmarshal error when one
/// has not.
fn check_types(version: ReviewVersion, review: &Value) -> Result<(), String> {
    let v = version.name();
    let wrong = |value: &Value, owner: &str, field: &str, go_type: &str| {
        format!(
            "json: cannot unmarshal {} into Go struct field {owner}.{field} of type {go_type}",
            konverge_apimachinery::gofmt::json_kind(value)
        )
    };
    let Some(response) = review.get("response").filter(|r| !r.is_null()) else {
        return Ok(());
    };
    if !response.is_object() {
        return Err(wrong(
            response,
            "ConversionReview",
            "response",
            &format!("{v}.ConversionResponse"),
        ));
    }
    let owner = "ConversionResponse";
    for (field, ok, go_type) in [
        ("uid", Value::is_string as fn(&Value) -> bool, "types.UID"),
        (
            "convertedObjects",
            Value::is_array,
            "[]runtime.RawExtension",
        ),
        ("result", Value::is_object, "v1.Status"),
    ] {
        if let Some(value) = response.get(field).filter(|f| !f.is_null())
            && !ok(value)
        {
            return Err(wrong(value, owner, &format!("response.{field}"), go_type));
        }
    }
    for field in ["status", "message"] {
        if let Some(value) = response
            .get("result")
            .and_then(|r| r.get(field))
            .filter(|f| !f.is_null() && !f.is_string())
        {
            return Err(wrong(
                value,
                "Status",
                &format!("response.result.{field}"),
                "string",
            ));
        }
    }
    Ok(())
}

/// The converted objects of a review, once the review is checked as kube-apiserver checks
/// it: its kind (v1), that it answers the request (its uid, v1) and that the conversion
/// succeeded.
fn check_review(version: ReviewVersion, uid: &str, review: &Value) -> Result<Vec<Value>, String> {
    if version == ReviewVersion::V1 {
        let got = gvk_string(str_field(review, "apiVersion"), str_field(review, "kind"));
        if got != "apiextensions.k8s.io/v1, Kind=ConversionReview" {
            return Err(format!(
                "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {got}"
            ));
        }
    }
    let Some(response) = review.get("response").filter(|r| r.is_object()) else {
        return Err("no response provided".into());
    };
    if version == ReviewVersion::V1 {
        let answered = str_field(response, "uid");
        if answered != uid {
            return Err(format!("expected response.uid={uid:?}, got {answered:?}"));
        }
    }
    let result = response.get("result").unwrap_or(&Value::Null);
    let status = str_field(result, "status");
    if status != "Success" {
        let message = str_field(result, "message");
        if !message.is_empty() {
            return Err(message.to_string());
        }
        return Err(format!(
            "response.result.status was '{status}', not 'Success'"
        ));
    }
    Ok(response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// A converted object as Kubernetes decodes an embedded raw object: a JSON object with a
/// kind.
fn decode_converted(raw: &Value) -> Result<(), String> {
    match raw {
        Value::Object(map) => {
            if map
                .get("kind")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(format!("Object 'Kind' is missing in '{raw}'"));
            }
            Ok(())
        }
        Value::Null => Err("unexpected end of JSON input".into()),
        other => Err(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            konverge_apimachinery::gofmt::json_kind(other)
        )),
    }
}

/// The group and version of an `apiVersion` as Go's `GroupVersion.String()` prints it
/// (empty when it does not parse).
fn group_version(api_version: &str) -> &str {
    if api_version.matches('/').count() > 1 {
        ""
    } else {
        api_version
    }
}

/// Checks each converted object against the object it was converted from (kube-apiserver's
/// `validateConvertedObject`, then `restoreObjectMeta`), prunes it by the schema of its new
/// version, and returns them in order. With one object sent, the messages are those of a
/// single object; with several, those of a list, with the object's index.
fn take_converted(
    gvk: &str,
    desired: &str,
    originals: Vec<Value>,
    returned: Vec<Value>,
    schema: Option<&konverge_apimachinery::schema::Structural>,
) -> Result<Vec<Value>, ConversionError> {
    if returned.len() != originals.len() {
        return Err(ConversionError::Count {
            gvk: gvk.to_string(),
            got: returned.len(),
            expected: originals.len(),
        });
    }
    let single = originals.len() == 1;
    let mut out = Vec::with_capacity(originals.len());
    for (index, (original, mut converted)) in originals.into_iter().zip(returned).enumerate() {
        let invalid_at = |reason: String| ConversionError::InvalidAt {
            gvk: gvk.to_string(),
            index,
            reason,
        };
        if let Err(reason) = decode_converted(&converted) {
            return Err(if single {
                ConversionError::Plain(reason)
            } else {
                invalid_at(reason)
            });
        }
        let got = group_version(str_field(&converted, "apiVersion"));
        if got != desired {
            let reason = format!("invalid groupVersion (expected {desired}, received {got})");
            return Err(if single {
                ConversionError::InvalidType {
                    gvk: gvk.to_string(),
                    reason,
                }
            } else {
                invalid_at(reason)
            });
        }
        let (expected_kind, got_kind) =
            (str_field(&original, "kind"), str_field(&converted, "kind"));
        if expected_kind != got_kind {
            let reason = format!("invalid kind (expected {expected_kind}, received {got_kind})");
            return Err(if single {
                ConversionError::InvalidType {
                    gvk: gvk.to_string(),
                    reason,
                }
            } else {
                invalid_at(reason)
            });
        }
        if let Err(reason) = same_object(&original, &converted) {
            return Err(if single {
                ConversionError::Invalid {
                    gvk: gvk.to_string(),
                    reason,
                }
            } else {
                invalid_at(reason)
            });
        }
        if let Err(reason) = restore_metadata(&original, &mut converted) {
            return Err(if single {
                ConversionError::Metadata {
                    gvk: gvk.to_string(),
                    reason,
                }
            } else {
                ConversionError::MetadataAt {
                    gvk: gvk.to_string(),
                    index,
                    reason,
                }
            });
        }
        if let Some(schema) = schema {
            schema.prune(&mut converted);
        }
        out.push(converted);
    }
    Ok(out)
}

/// A converted object must be the same object: kind, name, namespace and uid.
fn same_object(original: &Value, converted: &Value) -> Result<(), String> {
    let pairs = [
        (
            "kind",
            str_field(original, "kind"),
            str_field(converted, "kind"),
        ),
        (
            "name",
            meta_field(original, "name"),
            meta_field(converted, "name"),
        ),
        (
            "namespace",
            meta_field(original, "namespace"),
            meta_field(converted, "namespace"),
        ),
        (
            "UID",
            meta_field(original, "uid"),
            meta_field(converted, "uid"),
        ),
    ];
    for (what, expected, got) in pairs {
        if expected != got {
            return Err(format!("must have the same {what}: {expected} != {got}"));
        }
    }
    Ok(())
}

/// Puts the original metadata back on a converted object, keeping the labels and
/// annotations the webhook answered with (checked, when it changed them).
fn restore_metadata(original: &Value, converted: &mut Value) -> Result<(), String> {
    let answered = match converted.get("metadata") {
        None => return Err("missing metadata in converted object".into()),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                konverge_apimachinery::gofmt::type_name(other)
            ));
        }
    };
    let mut restored = match original.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in input object",
                konverge_apimachinery::gofmt::type_name(other)
            ));
        }
        None => Map::new(),
    };
    for field in ["labels", "annotations"] {
        let given = match answered.get(field) {
            None | Some(Value::Null) => {
                restored.remove(field);
                continue;
            }
            Some(Value::Object(given)) => given,
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    konverge_apimachinery::gofmt::type_name(other)
                ));
            }
        };
        let before = match restored.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::Object(before)) => Some(before),
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in original object",
                    konverge_apimachinery::gofmt::type_name(other)
                ));
            }
        };
        let mut changed = before.map_or(0, Map::len) != given.len();
        for (key, value) in given {
            if !value.is_string() {
                return Err(format!(
                    "metadata.{field}[{key}] must be a string, but is {} in converted object",
                    konverge_apimachinery::gofmt::type_name(value)
                ));
            }
            changed |= before.and_then(|b| b.get(key)) != Some(value);
        }
        if changed {
            let errors = if field == "labels" {
                label_errors(given)
            } else {
                annotation_errors(given)
            };
            if !errors.is_empty() {
                return Err(aggregate(&errors));
            }
        }
        restored.insert(field.into(), Value::Object(given.clone()));
    }
    converted["metadata"] = Value::Object(restored);
    Ok(())
}

/// Labels as `ValidateLabels` checks them.
fn label_errors(labels: &Map<String, Value>) -> Vec<FieldError> {
    use konverge_apimachinery::selector::{label_key_errors, label_value_errors};
    let mut errors = Vec::new();
    for (key, value) in labels {
        for problem in label_key_errors(key) {
            errors.push(FieldError::invalid(
                "metadata.labels",
                Value::String(key.clone()),
                problem,
            ));
        }
        for problem in label_value_errors(value.as_str().unwrap_or("")) {
            errors.push(FieldError::invalid(
                "metadata.labels",
                value.clone(),
                problem,
            ));
        }
    }
    errors
}

/// Annotations as `ValidateAnnotations` checks them, under the path kube-apiserver gives
/// them here (`metadata.annotation`).
fn annotation_errors(annotations: &Map<String, Value>) -> Vec<FieldError> {
    const PATH: &str = "metadata.annotation";
    let mut errors = Vec::new();
    let mut size = 0;
    for (key, value) in annotations {
        for problem in konverge_apimachinery::selector::label_key_errors(&key.to_lowercase()) {
            errors.push(FieldError::invalid(
                PATH,
                Value::String(key.clone()),
                problem,
            ));
        }
        size += key.len() + value.as_str().map_or(0, str::len);
    }
    if size > MAX_ANNOTATION_BYTES {
        errors.push(FieldError::new(
            ErrorType::TooLong,
            PATH,
            None,
            format!("may not be more than {MAX_ANNOTATION_BYTES} bytes"),
        ));
    }
    errors
}

/// Field errors as one error (Go's `ToAggregate()`): one alone, several in brackets, each
/// message once.
fn aggregate(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for error in errors {
        let shown = error.to_string();
        if !seen.contains(&shown) {
            seen.push(shown);
        }
    }
    if seen.len() == 1 {
        return seen.remove(0);
    }
    format!("[{}]", seen.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UID: &str = "0b7a8e6c-1111-4222-8333-944445555666";

    fn crontab(version: &str, name: &str) -> Value {
        json!({
            "apiVersion": format!("stable.example.com/{version}"),
            "kind": "CronTab",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": format!("uid-{name}"),
                "resourceVersion": "7",
                "generation": 1,
                "labels": {"app": "cron"},
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": format!("stable.example.com/{version}")}],
            },
            "spec": {"schedule": "* * * * *"},
        })
    }

    fn review(converted: Vec<Value>) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "response": {"uid": UID, "result": {"status": "Success"}, "convertedObjects": converted},
        })
    }

    fn take(originals: Vec<Value>, returned: Vec<Value>) -> Result<Vec<Value>, ConversionError> {
        take_converted(
            "stable.example.com/v1, Kind=CronTab",
            "stable.example.com/v2",
            originals,
            returned,
            None,
        )
    }

    #[test]
    fn a_review_is_checked_as_kube_apiserver_checks_it() {
        let v1 = ReviewVersion::V1;
        let ok = review(vec![]);
        assert_eq!(check_review(v1, UID, &ok), Ok(vec![]));
        let mut wrong_kind = ok.clone();
        wrong_kind["kind"] = json!("AdmissionReview");
        assert_eq!(
            check_review(v1, UID, &wrong_kind).unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got apiextensions.k8s.io/v1, Kind=AdmissionReview"
        );
        assert_eq!(
            check_review(v1, UID, &json!({})).unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got /, Kind="
        );
        assert_eq!(
            check_review(
                v1,
                UID,
                &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"})
            )
            .unwrap_err(),
            "no response provided"
        );
        assert_eq!(
            check_review(v1, "other", &ok).unwrap_err(),
            format!("expected response.uid=\"other\", got \"{UID}\"")
        );
        // v1beta1 answers are not checked for their kind or uid.
        assert!(
            check_review(
                ReviewVersion::V1beta1,
                "other",
                &json!({"response": {"result": {"status": "Success"}}})
            )
            .is_ok()
        );
        let mut failed = ok.clone();
        failed["response"]["result"] = json!({"status": "Failure", "message": "cannot convert"});
        assert_eq!(
            check_review(v1, UID, &failed).unwrap_err(),
            "cannot convert"
        );
        failed["response"]["result"] = json!({"status": "Failure"});
        assert_eq!(
            check_review(v1, UID, &failed).unwrap_err(),
            "response.result.status was 'Failure', not 'Success'"
        );
        failed["response"]["result"] = json!({});
        assert_eq!(
            check_review(v1, UID, &failed).unwrap_err(),
            "response.result.status was '', not 'Success'"
        );
    }

    #[test]
    fn answers_are_read_as_client_go_reads_them() {
        let v1 = ReviewVersion::V1;
        assert_eq!(
            read_response(v1, 500, b"boom\n").unwrap_err(),
            "an error on the server (\"boom\") has prevented the request from succeeding"
        );
        assert_eq!(
            read_response(v1, 400, b"").unwrap_err(),
            "the server rejected our request for an unknown reason"
        );
        assert_eq!(
            read_response(v1, 500, br#"{"error": true}"#).unwrap_err(),
            "an error on the server (\"unknown\") has prevented the request from succeeding"
        );
        assert_eq!(
            read_response(
                v1,
                503,
                br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"overloaded"}"#
            )
            .unwrap_err(),
            "overloaded"
        );
        assert_eq!(
            read_response(v1, 200, b"").unwrap_err(),
            "0-length response with status code: 200 and content type: application/json"
        );
        assert_eq!(
            read_response(v1, 200, b"this is not json").unwrap_err(),
            r#"couldn't get version/kind; json parse error: json: cannot unmarshal string into Go value of type struct { APIVersion string "json:\"apiVersion,omitempty\""; Kind string "json:\"kind,omitempty\"" }"#
        );
        assert_eq!(
            read_response(v1, 200, b"{\"kind\": ").unwrap_err(),
            "couldn't get version/kind; json parse error: unexpected end of JSON input"
        );
        assert_eq!(
            read_response(
                v1,
                200,
                br#"{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"ConversionReview"}"#
            )
            .unwrap_err(),
            "converting (v1beta1.ConversionReview) to (v1.ConversionReview): unknown conversion"
        );
        assert_eq!(
            read_response(v1, 200, br#"{"apiVersion":"v1","kind":"Pod"}"#).unwrap_err(),
            format!("no kind \"Pod\" is registered for version \"v1\" in scheme {HOOK_SCHEME:?}")
        );
        assert_eq!(
            read_response(v1, 200, br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":"yes"}"#)
                .unwrap_err(),
            "json: cannot unmarshal string into Go struct field ConversionReview.response of type v1.ConversionResponse"
        );
        // Missing parts of the type are taken from the review asked for, but the check of
        // its kind sees what was sent.
        let bare = read_response(v1, 200, br#"{"response": {}}"#).expect("decodes");
        assert_eq!(
            check_review(v1, UID, &bare).unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got /, Kind="
        );
    }

    #[test]
    fn converted_objects_keep_their_metadata_but_labels_and_annotations() {
        let mut answer = crontab("v2", "a");
        answer["metadata"] = json!({
            "name": "a", "namespace": "default", "uid": "uid-a",
            "labels": {"app": "cron", "converted": "yes"},
            "annotations": {"note": "hi"},
            "generation": 42,
            "finalizers": ["sneaky"],
        });
        answer["spec"] = json!({"cron": "* * * * *"});
        let taken = take(vec![crontab("v1", "a")], vec![answer]).expect("taken");
        let md = &taken[0]["metadata"];
        assert_eq!(md["labels"], json!({"app": "cron", "converted": "yes"}));
        assert_eq!(md["annotations"], json!({"note": "hi"}));
        assert_eq!(md["generation"], 1);
        assert_eq!(md["resourceVersion"], "7");
        assert!(md.get("finalizers").is_none());
        assert_eq!(
            md["managedFields"][0]["apiVersion"],
            "stable.example.com/v1"
        );
        assert_eq!(taken[0]["spec"], json!({"cron": "* * * * *"}));
        // Labels the webhook drops are gone.
        let mut unlabelled = crontab("v2", "a");
        unlabelled["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        let taken = take(vec![crontab("v1", "a")], vec![unlabelled]).expect("taken");
        assert!(taken[0]["metadata"].get("labels").is_none());
    }

    #[test]
    fn converted_objects_are_refused_as_kube_apiserver_refuses_them() {
        let single = |answer: Value| {
            take(vec![crontab("v1", "a")], vec![answer])
                .unwrap_err()
                .to_string()
        };
        let prefix = "conversion webhook for stable.example.com/v1, Kind=CronTab";
        assert_eq!(
            take(vec![crontab("v1", "a")], vec![])
                .unwrap_err()
                .to_string(),
            format!("{prefix} returned 0 objects, expected 1")
        );
        assert_eq!(
            single(json!("x")),
            "json: cannot unmarshal string into Go value of type map[string]interface {}"
        );
        assert_eq!(
            single(json!({"apiVersion": "stable.example.com/v2"})),
            r#"Object 'Kind' is missing in '{"apiVersion":"stable.example.com/v2"}'"#
        );
        assert_eq!(
            single(crontab("v1", "a")),
            format!(
                "{prefix} returned invalid object at index 0: invalid groupVersion (expected stable.example.com/v2, received stable.example.com/v1)"
            )
        );
        let mut other_kind = crontab("v2", "a");
        other_kind["kind"] = json!("Job");
        assert_eq!(
            single(other_kind),
            format!(
                "{prefix} returned invalid object at index 0: invalid kind (expected CronTab, received Job)"
            )
        );
        assert_eq!(
            single(crontab("v2", "b")),
            format!("{prefix} returned invalid object: must have the same name: a != b")
        );
        let mut other_uid = crontab("v2", "a");
        other_uid["metadata"]["uid"] = json!("x");
        assert_eq!(
            single(other_uid),
            format!("{prefix} returned invalid object: must have the same UID: uid-a != x")
        );
        let mut bad_label = crontab("v2", "a");
        bad_label["metadata"]["labels"] = json!({"app": "no spaces allowed"});
        assert_eq!(
            single(bad_label),
            format!(
                "{prefix} returned invalid metadata: metadata.labels: Invalid value: \"no spaces allowed\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            )
        );
        let mut number_label = crontab("v2", "a");
        number_label["metadata"]["labels"] = json!({"app": 3});
        assert_eq!(
            single(number_label),
            format!(
                "{prefix} returned invalid metadata: metadata.labels[app] must be a string, but is int64 in converted object"
            )
        );
        let mut no_metadata = crontab("v2", "a");
        no_metadata.as_object_mut().unwrap().remove("metadata");
        // Without metadata the name differs first.
        assert_eq!(
            single(no_metadata),
            format!("{prefix} returned invalid object: must have the same name: a != ")
        );
        // Several objects: the list's messages, with the index among those sent.
        let err = take(
            vec![crontab("v1", "a"), crontab("v1", "b")],
            vec![crontab("v2", "a"), crontab("v2", "c")],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{prefix} returned invalid converted object at index 1: must have the same name: b != c"
            )
        );
        let mut bad_annotations = crontab("v2", "b");
        bad_annotations["metadata"]["annotations"] = json!("x");
        let err = take(
            vec![crontab("v1", "a"), crontab("v1", "b")],
            vec![crontab("v2", "a"), bad_annotations],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{prefix} returned invalid metadata in object at index 1: invalid metadata.annotations of type string in converted object"
            )
        );
        // As an API error: 500, no reason.
        let api: ApiError = err.into();
        assert_eq!(api.code, http::StatusCode::INTERNAL_SERVER_ERROR);
        assert!(api.to_status().get("reason").is_none());
    }

    #[test]
    fn the_request_is_a_conversion_review() {
        let body = request_body(
            ReviewVersion::V1,
            UID,
            "stable.example.com/v2",
            &[crontab("v1", "a")],
        );
        let sent: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(sent["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(sent["kind"], "ConversionReview");
        assert_eq!(sent["request"]["uid"], UID);
        assert_eq!(
            sent["request"]["desiredAPIVersion"],
            "stable.example.com/v2"
        );
        assert_eq!(sent["request"]["objects"][0]["metadata"]["name"], "a");
        assert_eq!(
            ReviewVersion::choose(&["v2".into(), "v1beta1".into(), "v1".into()]),
            Some(ReviewVersion::V1beta1)
        );
        assert_eq!(ReviewVersion::choose(&["v2".into()]), None);
    }
}
