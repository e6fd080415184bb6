//! AdmissionReview: the request kube-apiserver posts to a webhook, and how it reads the
//! answer — as its webhook client decodes it (any status but 2xx is an error, the body is
//! JSON whatever its type says) and as it then checks it, with the same words.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Map, Value, json};

use super::gojson;
use crate::admission::{Attributes, Operation};
use crate::error::{ApiError, Cause, Details, Reason};
use crate::resources::ResourceType;
use crate::webhook::Response;

/// The group of AdmissionReview.
const GROUP: &str = "admission.k8s.io";

/// The AdmissionReview versions kube-apiserver 1.33 speaks, in its order of preference.
pub(crate) const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Where kube-apiserver's webhook client creates its scheme, which Go names the scheme after
/// (`no kind "X" is registered for version "v1" in scheme "..."`).
const SCHEME: &str = "k8s.io/apiserver/pkg/util/webhook/client.go:71";

/// A group, version and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gvk {
    /// The group (empty for core).
    pub(crate) group: String,
    /// The version.
    pub(crate) version: String,
    /// The kind.
    pub(crate) kind: String,
}

impl Gvk {
    /// The kind a write of `rt` (or of its `subresource`) carries.
    pub(crate) fn of(rt: &ResourceType, subresource: Option<&str>) -> Gvk {
        if let Some((group, version, kind)) = subresource
            .and_then(|s| rt.subresource(s))
            .and_then(|s| s.kind)
        {
            return Gvk {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
            };
        }
        Gvk {
            group: rt.group.clone(),
            version: rt.version.clone(),
            kind: rt.kind.clone(),
        }
    }

    fn to_json(&self) -> Value {
        json!({"group": self.group, "version": self.version, "kind": self.kind})
    }
}

/// What one call sends.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    /// The request's UID, which the answer must repeat.
    pub(crate) uid: &'a str,
    /// The AdmissionReview version (`v1` or `v1beta1`).
    pub(crate) version: &'a str,
    /// The resource the webhook's rules matched (the request's own, or an equivalent version).
    pub(crate) resource: &'a ResourceType,
    /// The kind of that resource.
    pub(crate) kind: &'a Gvk,
    /// The request.
    pub(crate) attributes: &'a Attributes<'a>,
    /// The object in the matched version (null on a delete).
    pub(crate) object: &'a Value,
    /// The object before, in the matched version (null on a create).
    pub(crate) old: &'a Value,
}

impl Request<'_> {
    /// The AdmissionReview, as JSON.
    pub(crate) fn to_json(&self) -> Value {
        let attributes = self.attributes;
        let resource = |rt: &ResourceType| json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
        let mut request = Map::new();
        request.insert("uid".into(), json!(self.uid));
        request.insert("kind".into(), self.kind.to_json());
        request.insert("resource".into(), resource(self.resource));
        let subresource = attributes.subresource.unwrap_or("");
        if !subresource.is_empty() {
            request.insert("subResource".into(), json!(subresource));
        }
        request.insert(
            "requestKind".into(),
            Gvk::of(attributes.rt, attributes.subresource).to_json(),
        );
        request.insert("requestResource".into(), resource(attributes.rt));
        if !subresource.is_empty() {
            request.insert("requestSubResource".into(), json!(subresource));
        }
        if !attributes.name.is_empty() {
            request.insert("name".into(), json!(attributes.name));
        }
        if !attributes.namespace.is_empty() {
            request.insert("namespace".into(), json!(attributes.namespace));
        }
        request.insert("operation".into(), json!(attributes.operation.as_str()));
        request.insert(
            "userInfo".into(),
            crate::admission::user_info(
                &attributes
                    .user
                    .cloned()
                    .unwrap_or_else(crate::admission::server_user),
            ),
        );
        request.insert("object".into(), self.object.clone());
        request.insert("oldObject".into(), self.old.clone());
        request.insert("dryRun".into(), json!(attributes.dry_run));
        request.insert("options".into(), options(attributes));
        json!({
            "kind": "AdmissionReview",
            "apiVersion": format!("{GROUP}/{}", self.version),
            "request": request,
        })
    }
}

/// The options of the write (`CreateOptions`, `UpdateOptions`, `DeleteOptions`), as far as
/// admission knows them: whether it is a dry run.
fn options(attributes: &Attributes<'_>) -> Value {
    let kind = match attributes.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => return Value::Null,
    };
    let mut options = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if attributes.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    options
}

/// What a webhook answered, checked.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    /// Whether it allows the request.
    pub(crate) allowed: bool,
    /// `response.status`, when it refuses.
    pub(crate) status: Option<Value>,
    /// `response.patch`, decoded from base64 (empty: none).
    pub(crate) patch: Vec<u8>,
    /// `response.patchType` (v1beta1 answers imply `JSONPatch`).
    pub(crate) patch_type: String,
    /// `response.auditAnnotations`.
    pub(crate) audit_annotations: BTreeMap<String, String>,
    /// `response.warnings`.
    pub(crate) warnings: Vec<String>,
}

/// Why an answer could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// The client could not read it (`failed to call webhook: ...`).
    Client(String),
    /// It is not a valid response (`received invalid webhook response: ...`).
    Invalid(String),
}

/// Reads the answer to the request `uid` sent as AdmissionReview `version`.
pub(crate) fn read(
    response: &Response,
    content_type: Option<&str>,
    uid: &str,
    version: &str,
    mutating: bool,
) -> Result<Answer, ReadError> {
    let body = &response.body;
    if !(200..=206).contains(&response.status) {
        return Err(ReadError::Client(unexpected_status(
            response.status,
            body,
            content_type,
        )));
    }
    if body.is_empty() {
        return Err(ReadError::Client(format!(
            "0-length response with status code: {} and content type: ",
            response.status
        )));
    }
    let review = decode(body, version).map_err(ReadError::Client)?;
    verify(&review, uid, version, mutating).map_err(ReadError::Invalid)
}

/// The error Go's client makes of an answer with a status other than 2xx: the `Status` it
/// carries, or a generic one (`an error on the server ("...") has prevented ...`).
fn unexpected_status(code: u16, body: &[u8], content_type: Option<&str>) -> String {
    if let Ok(Value::Object(status)) = serde_json::from_slice::<Value>(body)
        && status.get("kind").and_then(Value::as_str) == Some("Status")
        && status.get("status").and_then(Value::as_str) == Some("Failure")
    {
        return status
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
    }
    let text = if content_type.is_some_and(|t| t.starts_with("text/")) {
        let shown = &body[..body.len().min(2048)];
        String::from_utf8_lossy(shown).trim().to_string()
    } else {
        "unknown".to_string()
    };
    match code {
        409 => "the server reported a conflict".into(),
        404 => "the server could not find the requested resource".into(),
        400 => "the server rejected our request for an unknown reason".into(),
        401 => "the server has asked for the client to provide credentials".into(),
        403 | 415 => text,
        406 if text.is_empty() || text == "unknown" => {
            "the server was unable to respond with a content type that the client supports".into()
        }
        406 => text,
        405 => "the server does not allow this method on the requested resource".into(),
        422 => "the server rejected our request due to an error in our request".into(),
        503 => "the server is currently unable to handle the request".into(),
        504 => "the server was unable to return a response in the time allotted, but may still be processing the request".into(),
        429 => "the server has received too many requests and has asked us to try again later".into(),
        500.. => format!(
            "an error on the server ({}) has prevented the request from succeeding",
            go_quote(&text)
        ),
        _ => format!("the server responded with the status code {code} but did not return more information"),
    }
}

/// Decodes the body as Go's client decodes it into an AdmissionReview of `version`.
fn decode(body: &[u8], version: &str) -> Result<Value, String> {
    if let Some(e) = gojson::syntax_error(body) {
        return Err(format!("couldn't get version/kind; json parse error: {e}"));
    }
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| format!("couldn't get version/kind; json parse error: {e}"))?;
    let (api_version, kind) = match &review {
        Value::Null => (String::new(), String::new()),
        Value::Object(map) => {
            let text = |field: &str| match map.get(field) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(format!(
                    "couldn't get version/kind; json parse error: {}",
                    gojson::field_type_error(other, "", field, "string")
                )),
            };
            (text("apiVersion")?, text("kind")?)
        }
        other => {
            return Err(format!(
                "couldn't get version/kind; json parse error: {}",
                gojson::value_type_error(
                    other,
                    r#"struct { APIVersion string "json:\"apiVersion,omitempty\""; Kind string "json:\"kind,omitempty\"" }"#
                )
            ));
        }
    };
    let (mut group, mut found_version) = parse_group_version(&api_version)?;
    let kind = if kind.is_empty() {
        "AdmissionReview".to_string()
    } else {
        kind
    };
    if found_version.is_empty() && group.is_empty() {
        group = GROUP.to_string();
        found_version = version.to_string();
    }
    if found_version.is_empty() && group == GROUP {
        found_version = version.to_string();
    }
    let registered = group == GROUP && kind == "AdmissionReview";
    if registered && found_version == version {
        check_types(&review)?;
        return Ok(review);
    }
    if registered && VERSIONS.contains(&found_version.as_str()) {
        return Err(format!(
            "converting ({found_version}.AdmissionReview) to ({version}.AdmissionReview): unknown conversion"
        ));
    }
    let group_version = if group.is_empty() {
        found_version
    } else {
        format!("{group}/{found_version}")
    };
    Err(format!(
        "no kind {} is registered for version {} in scheme {}",
        go_quote(&kind),
        go_quote(&group_version),
        go_quote(SCHEME)
    ))
}

/// Go's `schema.ParseGroupVersion`.
fn parse_group_version(text: &str) -> Result<(String, String), String> {
    if text.is_empty() || text == "/" {
        return Ok((String::new(), String::new()));
    }
    match text.matches('/').count() {
        0 => Ok((String::new(), text.to_string())),
        1 => {
            let (group, version) = text.split_once('/').unwrap_or(("", text));
            Ok((group.to_string(), version.to_string()))
        }
        _ => Err(format!("unexpected GroupVersion string: {text}")),
    }
}

/// The type errors Go's decoder meets decoding the fields kube-apiserver reads.
fn check_types(review: &Value) -> Result<(), String> {
    let response = match review.get("response") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(r)) => r,
        Some(other) => {
            return Err(gojson::field_type_error(
                other,
                "AdmissionReview",
                "response",
                "v1.AdmissionResponse",
            ));
        }
    };
    let owner = "AdmissionResponse";
    let check = |field: &str, go_type: &str, ok: fn(&Value) -> bool| match response.get(field) {
        Some(v) if !v.is_null() && !ok(v) => Err(gojson::field_type_error(
            v,
            owner,
            &format!("response.{field}"),
            go_type,
        )),
        _ => Ok(()),
    };
    check("uid", "types.UID", Value::is_string)?;
    check("allowed", "bool", Value::is_boolean)?;
    check("status", "v1.Status", Value::is_object)?;
    // Go decodes a []byte from base64 text, or from an array of numbers (what kube-rs's
    // AdmissionResponse sends).
    check("patch", "[]uint8", |v| v.is_string() || v.is_array())?;
    check("patchType", "v1.PatchType", Value::is_string)?;
    check("auditAnnotations", "map[string]string", Value::is_object)?;
    check("warnings", "[]string", Value::is_array)?;
    for (field, items) in [
        (
            "auditAnnotations",
            response
                .get("auditAnnotations")
                .and_then(Value::as_object)
                .map(|m| m.values().collect::<Vec<_>>()),
        ),
        (
            "warnings",
            response
                .get("warnings")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect::<Vec<_>>()),
        ),
    ] {
        if let Some(bad) = items
            .into_iter()
            .flatten()
            .find(|v| !v.is_null() && !v.is_string())
        {
            return Err(gojson::field_type_error(
                bad,
                owner,
                &format!("response.{field}"),
                "string",
            ));
        }
    }
    if let Some(status) = response.get("status").and_then(Value::as_object) {
        for (field, go_type, ok) in [
            ("status", "string", Value::is_string as fn(&Value) -> bool),
            ("message", "string", Value::is_string),
            ("reason", "v1.StatusReason", Value::is_string),
            ("code", "int32", |v: &Value| {
                v.as_i64().is_some_and(|n| i32::try_from(n).is_ok())
            }),
        ] {
            if let Some(v) = status.get(field).filter(|v| !v.is_null())
                && !ok(v)
            {
                let shown = if v.is_number() {
                    format!("number {v}")
                } else {
                    gojson::kind(v).to_string()
                };
                return Err(format!(
                    "json: cannot unmarshal {shown} into Go struct field Status.response.status.{field} of type {go_type}"
                ));
            }
        }
    }
    if let Some(patch) = response.get("patch").filter(|p| !p.is_null()) {
        patch_bytes(patch)?;
    }
    Ok(())
}

/// `response.patch` as Go decodes a `[]byte`: base64 text, or an array of numbers 0–255.
fn patch_bytes(patch: &Value) -> Result<Vec<u8>, String> {
    match patch {
        Value::String(text) => base64_decode(text),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| {
                        let shown = if item.is_number() {
                            format!("number {item}")
                        } else {
                            gojson::kind(item).to_string()
                        };
                        format!(
                            "json: cannot unmarshal {shown} into Go struct field AdmissionResponse.response.patch of type uint8"
                        )
                    })
            })
            .collect(),
        _ => Ok(Vec::new()),
    }
}

/// Go's `base64.StdEncoding` decoding, with its error.
fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    // Go skips newlines inside base64 text.
    let cleaned: String = text.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    base64::engine::general_purpose::STANDARD
        .decode(&cleaned)
        .map_err(|e| {
            let at = match e {
                base64::DecodeError::InvalidByte(at, _) => at,
                base64::DecodeError::InvalidLastSymbol(at, _) => at,
                base64::DecodeError::InvalidLength(len) => len,
                base64::DecodeError::InvalidPadding => cleaned.len(),
            };
            format!("illegal base64 data at input byte {at}")
        })
}

/// kube-apiserver's `VerifyAdmissionResponse`.
fn verify(review: &Value, uid: &str, version: &str, mutating: bool) -> Result<Answer, String> {
    let Some(response) = review.get("response").and_then(Value::as_object) else {
        return Err("webhook response was absent".into());
    };
    let text = |field: &str| response.get(field).and_then(Value::as_str);
    let patch = match response.get("patch").filter(|p| !p.is_null()) {
        Some(p) => patch_bytes(p)?,
        None => Vec::new(),
    };
    let patch_type = text("patchType").map(String::from);
    let mut answer = Answer {
        allowed: response.get("allowed").and_then(Value::as_bool) == Some(true),
        status: response.get("status").filter(|s| s.is_object()).cloned(),
        patch: Vec::new(),
        patch_type: String::new(),
        audit_annotations: response
            .get("auditAnnotations")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect(),
        warnings: response
            .get("warnings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|w| w.as_str().unwrap_or("").to_string())
            .collect(),
    };
    if version == "v1beta1" {
        if mutating && !patch.is_empty() {
            answer.patch = patch;
            answer.patch_type = "JSONPatch".into();
        }
        return Ok(answer);
    }
    let got_uid = text("uid").unwrap_or("");
    if got_uid != uid {
        return Err(format!(
            "expected response.uid={}, got {}",
            go_quote(uid),
            go_quote(got_uid)
        ));
    }
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = review.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, found) = parse_group_version(api_version).unwrap_or_default();
    if group != GROUP || found != "v1" || kind != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of {GROUP}/v1, Kind=AdmissionReview, got {group}/{found}, Kind={kind}"
        ));
    }
    if mutating {
        if !patch.is_empty() && patch_type.is_none() {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        if patch.is_empty() && patch_type.is_some() {
            return Err("webhook returned response.patchType but not response.patch".into());
        }
        if let Some(t) = &patch_type
            && t.is_empty()
        {
            return Err(format!(
                "webhook returned invalid response.patchType of {}",
                go_quote(t)
            ));
        }
        answer.patch = patch;
        answer.patch_type = patch_type.unwrap_or_default();
    } else {
        if !patch.is_empty() {
            return Err("validating webhook may not return response.patch".into());
        }
        if patch_type.is_some() {
            return Err("validating webhook may not return response.patchType".into());
        }
    }
    Ok(answer)
}

/// Go's `%q`.
pub(crate) use konverge_apimachinery::gofmt::quote as go_quote;

/// The refusal kube-apiserver makes of a webhook's `allowed: false` answer
/// (`admission webhook "x" denied the request: <message>`), with the webhook's code (at
/// least 400), reason and details.
pub(crate) fn denied(webhook: &str, status: Option<&Value>) -> ApiError {
    let empty = Value::Null;
    let status = status.unwrap_or(&empty);
    let text = |field: &str| status.get(field).and_then(Value::as_str).unwrap_or("");
    let code = status
        .get("code")
        .and_then(Value::as_i64)
        .filter(|c| *c >= 400)
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| http::StatusCode::from_u16(c).ok())
        .unwrap_or(http::StatusCode::BAD_REQUEST);
    let denied_by = format!("admission webhook {} denied the request", go_quote(webhook));
    let message = match (text("message"), text("reason")) {
        ("", "") => format!("{denied_by} without explanation"),
        ("", reason) => format!("{denied_by}: {reason}"),
        (message, _) => format!("{denied_by}: {message}"),
    };
    ApiError {
        code,
        reason: reason_of(text("reason"), code),
        message,
        details: status.get("details").filter(|d| d.is_object()).map(|d| {
            let text = |field: &str| d.get(field).and_then(Value::as_str).unwrap_or("");
            Box::new(Details {
                name: text("name").to_string(),
                group: text("group").to_string(),
                kind: text("kind").to_string(),
                causes: d
                    .get("causes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        let text = |field: &str| c.get(field).and_then(Value::as_str).unwrap_or("");
                        Cause {
                            reason: text("reason").to_string(),
                            message: text("message").to_string(),
                            field: text("field").to_string(),
                        }
                    })
                    .collect(),
                retry_after_seconds: d
                    .get("retryAfterSeconds")
                    .and_then(Value::as_u64)
                    .and_then(|s| u32::try_from(s).ok())
                    .filter(|s| *s > 0),
                list_continue: None,
            })
        }),
    }
}

/// The reason a webhook gave, passed on as kube-apiserver passes it (none stays none, one
/// Kubernetes does not name is relayed as it is).
fn reason_of(reason: &str, code: http::StatusCode) -> Reason {
    let fallback = match code.as_u16() {
        401 => Reason::Unauthorized,
        403 => Reason::Forbidden,
        404 => Reason::NotFound,
        409 => Reason::Conflict,
        422 => Reason::Invalid,
        429 => Reason::TooManyRequests,
        500..=599 => Reason::InternalError,
        _ => Reason::BadRequest,
    };
    Reason::relayed(reason, fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Response {
        Response {
            status,
            body: bytes::Bytes::from(body.to_string()),
        }
    }

    fn read_v1(body: &str, mutating: bool) -> Result<Answer, ReadError> {
        read(&answer(200, body), None, "u-1", "v1", mutating)
    }

    #[test]
    fn answers_are_checked_with_kube_apiserver_words() {
        let client = |s: &str| Err(ReadError::Client(s.to_string()));
        let invalid = |s: &str| Err(ReadError::Invalid(s.to_string()));
        let cases: Vec<(&str, Result<(), ReadError>)> = vec![
            (
                "garbage",
                client(
                    "couldn't get version/kind; json parse error: invalid character 'g' looking for beginning of value",
                ),
            ),
            ("{}", invalid("webhook response was absent")),
            (
                r#"{"response": {"uid": "other", "allowed": true}}"#,
                invalid(r#"expected response.uid="u-1", got "other""#),
            ),
            (
                r#"{"response": {"uid": "u-1", "allowed": true}}"#,
                invalid(
                    "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /, Kind=",
                ),
            ),
            (
                r#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}"#,
                client(
                    "converting (v1beta1.AdmissionReview) to (v1.AdmissionReview): unknown conversion",
                ),
            ),
            (
                r#"{"apiVersion": "v1", "kind": "Pod"}"#,
                client(
                    r#"no kind "Pod" is registered for version "v1" in scheme "k8s.io/apiserver/pkg/util/webhook/client.go:71""#,
                ),
            ),
            (
                r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u-1", "allowed": "yes"}}"#,
                client(
                    "json: cannot unmarshal string into Go struct field AdmissionResponse.response.allowed of type bool",
                ),
            ),
            (
                r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u-1", "allowed": true, "patch": "W10="}}"#,
                invalid("validating webhook may not return response.patch"),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(read_v1(body, false).map(|_| ()), want, "{body}");
        }
        let ok = read_v1(
            r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u-1", "allowed": true, "patch": "W10=", "patchType": "JSONPatch", "warnings": ["w"]}}"#,
            true,
        )
        .expect("valid");
        assert_eq!(ok.patch, b"[]");
        // kube-rs sends the patch as an array of numbers; Go decodes that into []byte too.
        let array = verify(
            &serde_json::from_str(
                r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u-1", "allowed": true, "patch": [91, 93], "patchType": "JSONPatch"}}"#,
            )
            .expect("json"),
            "u-1",
            "admission.k8s.io/v1",
            true,
        )
        .expect("an answer");
        assert_eq!(array.patch, b"[]");
        assert_eq!(
            check_types(&serde_json::json!({"response": {"patch": [91, 300]}})),
            Err("json: cannot unmarshal number 300 into Go struct field AdmissionResponse.response.patch of type uint8".into())
        );
        assert_eq!(ok.warnings, ["w"]);
        assert_eq!(
            read_v1(
                r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u-1", "allowed": true, "patch": "W10="}}"#,
                true
            )
            .map(|_| ()),
            invalid("webhook returned response.patch but not response.patchType")
        );
    }

    #[test]
    fn error_statuses_are_the_client_errors_go_makes_of_them() {
        let text = read(
            &answer(500, "boom\n"),
            Some("text/plain; charset=utf-8"),
            "u",
            "v1",
            false,
        );
        assert_eq!(
            text.map(|_| ()),
            Err(ReadError::Client(
                r#"an error on the server ("boom") has prevented the request from succeeding"#
                    .into()
            ))
        );
        let status = read(
            &answer(
                403,
                r#"{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "go away"}"#,
            ),
            None,
            "u",
            "v1",
            false,
        );
        assert_eq!(status.map(|_| ()), Err(ReadError::Client("go away".into())));
        assert_eq!(
            read(&answer(200, ""), None, "u", "v1", false).map(|_| ()),
            Err(ReadError::Client(
                "0-length response with status code: 200 and content type: ".into()
            ))
        );
    }

    #[test]
    fn refusals_carry_the_webhooks_status() {
        let e = denied("v.example.com", None);
        assert_eq!(
            e.message,
            r#"admission webhook "v.example.com" denied the request without explanation"#
        );
        assert_eq!(e.code.as_u16(), 400);
        let e = denied(
            "v.example.com",
            Some(&json!({"code": 403, "message": "no", "reason": "Forbidden"})),
        );
        assert_eq!(
            (e.code.as_u16(), e.reason, e.message.as_str()),
            (
                403,
                Reason::Forbidden,
                r#"admission webhook "v.example.com" denied the request: no"#
            )
        );
        let e = denied(
            "v.example.com",
            Some(&json!({"code": 200, "reason": "Nope"})),
        );
        assert_eq!(e.code.as_u16(), 400);
        assert_eq!(
            e.message,
            r#"admission webhook "v.example.com" denied the request: Nope"#
        );
    }
}
