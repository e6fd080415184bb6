//! Reading a request: query options, the `Accept` header, and the body.

use konverge_apimachinery::query::parse_bool;
use std::time::Duration;

use axum::extract::Request;
use bytes::Bytes;
use http::HeaderMap;
use konverge_apimachinery::decoding::{self, Decoded};
use konverge_apimachinery::selector::{FieldSelector, LabelSelector};
use serde_json::Value;

use crate::error::{ApiError, Result};
use crate::http::table::IncludeObject;
use crate::registry::{
    DeleteOptions, FieldValidation, ListOptions, Propagation, ResourceVersionMatch, WatchOptions,
    WriteOptions,
};
use crate::resources::ResourceType;

/// The largest request body read (kube-apiserver's limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// What the client accepts, beyond plain JSON.
#[derive(Debug, Clone, Default)]
pub(crate) struct Accept {
    /// `as=Table;g=meta.k8s.io;v=v1`.
    pub(crate) table: bool,
    /// `as=PartialObjectMetadata(List)`.
    pub(crate) metadata: bool,
    /// `as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=...`: the versions offered.
    discovery: Vec<String>,
    /// The `meta.k8s.io` version of the Table or partial metadata asked for (`v1`, or the
    /// older `v1beta1`).
    pub(crate) meta_version: &'static str,
    /// Whether the client named media types and none is one the server writes.
    pub(crate) unacceptable: bool,
    /// Whether the client prefers Kubernetes protobuf (its most preferred media type the
    /// server writes): built-in objects, lists, watch events and errors are answered in it.
    pub(crate) protobuf: bool,
    /// Whether JSON (or any type) is acceptable as well: what is answered for kinds without
    /// a protobuf encoding (custom resources) when protobuf is preferred.
    pub(crate) json_acceptable: bool,
    /// Whether the object itself is acceptable (a type without `as=`), for resources that
    /// cannot be answered as a Table.
    pub(crate) plain_acceptable: bool,
}

impl Accept {
    pub(crate) const TABLE: &'static str = "application/json;as=Table;v=v1;g=meta.k8s.io";
    pub(crate) const METADATA: &'static str =
        "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
    pub(crate) const METADATA_LIST: &'static str =
        "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

    pub(crate) fn parse(headers: &HeaderMap) -> Self {
        let mut accept = Accept {
            meta_version: "v1",
            ..Accept::default()
        };
        let mut named = false;
        let mut writable = false;
        // The client's preference among the types the server writes: the highest `q`, then
        // the more specific type, then the order given (as kube-apiserver's negotiation).
        let mut best: Option<(u32, u8, bool)> = None;
        for value in headers.get_all(http::header::ACCEPT) {
            let Ok(value) = value.to_str() else { continue };
            for entry in value.split(',') {
                let params: Vec<(&str, &str)> = entry
                    .split(';')
                    .skip(1)
                    .filter_map(|p| p.trim().split_once('='))
                    .collect();
                let get = |k: &str| params.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
                let media = entry.split(';').next().unwrap_or("").trim();
                if media.is_empty() {
                    continue;
                }
                named = true;
                // JSON is written for every request; clients that offer protobuf offer JSON
                // too, or take it.
                if matches!(
                    media,
                    "application/json"
                        | "*/*"
                        | "application/*"
                        | "application/vnd.kubernetes.protobuf"
                        | "application/yaml"
                        | "application/json-seq"
                        | "application/vnd.kubernetes.protobuf;stream=watch"
                ) {
                    writable = true;
                    let q = get("q")
                        .and_then(|q| q.trim().parse::<f32>().ok())
                        .map_or(1000, |q| (q.clamp(0.0, 1.0) * 1000.0) as u32);
                    if q > 0 {
                        accept.plain_acceptable |= get("as").is_none();
                        let protobuf = media == konverge_protobuf::CONTENT_TYPE;
                        if !protobuf {
                            accept.json_acceptable = true;
                        }
                        let specific = u8::from(!media.contains('*'));
                        if best.is_none_or(|(bq, bs, _)| (q, specific) > (bq, bs)) {
                            best = Some((q, specific, protobuf));
                        }
                    }
                }
                if media != "application/json" && media != "*/*" {
                    continue;
                }
                match (get("as"), get("g"), get("v")) {
                    (Some("Table"), Some("meta.k8s.io"), Some(v @ ("v1" | "v1beta1"))) => {
                        accept.table = true;
                        accept.meta_version = if v == "v1" { "v1" } else { "v1beta1" };
                    }
                    (
                        Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                        Some("meta.k8s.io"),
                        Some(v @ ("v1" | "v1beta1")),
                    ) => {
                        accept.metadata = true;
                        accept.meta_version = if v == "v1" { "v1" } else { "v1beta1" };
                    }
                    (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some(v)) => {
                        accept.discovery.push(v.to_string())
                    }
                    _ => {}
                }
            }
        }
        accept.unacceptable = named && !writable;
        accept.protobuf = best.is_some_and(|(_, _, protobuf)| protobuf);
        if !named {
            accept.json_acceptable = true;
            accept.plain_acceptable = true;
        }
        accept
    }

    /// The content type of a `meta.k8s.io` answer (`Table`, `PartialObjectMetadata`...) in
    /// the version asked for.
    pub(crate) fn meta_type(&self, base: &'static str) -> String {
        base.replace(";v=v1;", &format!(";v={};", self.meta_version))
    }

    /// A `meta.k8s.io` answer in the version asked for.
    pub(crate) fn meta_body(&self, mut body: serde_json::Value) -> serde_json::Value {
        if self.meta_version != "v1" {
            body["apiVersion"] = serde_json::json!(format!("meta.k8s.io/{}", self.meta_version));
        }
        body
    }

    /// The aggregated discovery version to answer with, and its content type.
    pub(crate) fn aggregated_discovery(&self) -> Option<(&'static str, String)> {
        let version = ["v2", "v2beta1"]
            .into_iter()
            .find(|v| self.discovery.iter().any(|d| d == v))?;
        Some((
            version,
            format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"),
        ))
    }
}

/// The query parameters a resource request may carry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    pub(crate) watch: bool,
    pub(crate) resource_version: Option<String>,
    resource_version_match: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    limit: Option<String>,
    continue_token: Option<String>,
    allow_bookmarks: bool,
    send_initial_events: Option<bool>,
    timeout_seconds: Option<String>,
    timeout: Option<String>,
    dry_run: Vec<String>,
    field_validation: Option<String>,
    field_manager: Option<String>,
    pub(crate) force: Option<bool>,
    propagation_policy: Option<String>,
    grace_period_seconds: Option<String>,
    pub(crate) include_object: IncludeObject,
}

impl Query {
    /// The `timeout` a short request asks for: a Go duration, refused with kube-apiserver's
    /// words when it is none (long-running requests, watches, ignore it).
    pub(crate) fn request_timeout(&self) -> Result<Option<std::time::Duration>> {
        match &self.timeout {
            None => Ok(None),
            Some(text) => konverge_apimachinery::duration::parse_duration(text)
                .map(Some)
                .map_err(|e| {
                    ApiError::bad_request(format!(
                        "invalid timeout specified in the request URL - {e}"
                    ))
                }),
        }
    }

    pub(crate) fn parse(query: Option<&str>) -> Result<Self> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))?;
        let mut q = Query::default();
        let mut seen = std::collections::HashSet::new();
        for (key, value) in pairs {
            // The first value of a parameter counts, as kube's parameter codec reads it;
            // only `dryRun` is a list.
            if key != "dryRun" && !seen.insert(key.clone()) {
                continue;
            }
            match key.as_str() {
                "watch" => q.watch = parse_bool(&value),
                "resourceVersion" => q.resource_version = Some(value),
                "resourceVersionMatch" => q.resource_version_match = Some(value),
                "labelSelector" => q.label_selector = Some(value),
                "fieldSelector" => q.field_selector = Some(value),
                "limit" => q.limit = Some(value),
                "continue" => q.continue_token = Some(value).filter(|v| !v.is_empty()),
                "allowWatchBookmarks" => q.allow_bookmarks = parse_bool(&value),
                "sendInitialEvents" => q.send_initial_events = Some(parse_bool(&value)),
                "timeoutSeconds" => q.timeout_seconds = Some(value),
                "timeout" => q.timeout = Some(value).filter(|v| !v.is_empty()),
                "dryRun" => q.dry_run.push(value),
                "fieldValidation" => q.field_validation = Some(value),
                "fieldManager" => q.field_manager = Some(value),
                "force" => q.force = Some(parse_bool(&value)),
                "propagationPolicy" => q.propagation_policy = Some(value),
                "gracePeriodSeconds" => q.grace_period_seconds = Some(value),
                "includeObject" => {
                    q.include_object = match value.as_str() {
                        "None" => IncludeObject::None,
                        "Object" => IncludeObject::Object,
                        "Metadata" | "" => IncludeObject::Metadata,
                        other => {
                            return Err(ApiError::bad_request(format!(
                                "invalid includeObject: {other:?}"
                            )));
                        }
                    }
                }
                // Accepted and meaningless here: pretty-printing and the legacy
                // orphanDependents.
                _ => {}
            }
        }
        Ok(q)
    }

    pub(crate) fn list_options(&self, rt: &ResourceType) -> Result<ListOptions> {
        let label_selector =
            match self
                .label_selector
                .as_deref()
                .filter(|s| !s.trim().is_empty())
            {
                Some(s) => Some(LabelSelector::parse(s).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse requirement: {e}"))
                })?),
                None => None,
            };
        let field_selector = match self
            .field_selector
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(s) => {
                Some(FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
            None => None,
        };
        let limit = match self.limit.as_deref().filter(|l| !l.is_empty()) {
            Some(l) => Some(
                l.parse::<i64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?,
            )
            .filter(|l| *l > 0)
            .map(|l| l as u64),
            None => None,
        };
        let resource_version_match = match self.resource_version_match.as_deref() {
            None | Some("") => None,
            Some("NotOlderThan") => Some(ResourceVersionMatch::NotOlderThan),
            Some("Exact") => Some(ResourceVersionMatch::Exact),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "unsupported resourceVersionMatch {other:?}: supported values are \"Exact\" and \"NotOlderThan\""
                )));
            }
        };
        let _ = rt;
        Ok(ListOptions {
            label_selector,
            field_selector,
            limit,
            continue_token: self.continue_token.clone(),
            resource_version: self.resource_version.clone(),
            resource_version_match,
        })
    }

    pub(crate) fn watch_options(&self, rt: &ResourceType) -> Result<WatchOptions> {
        let list = self.list_options(rt)?;
        let timeout = match self.timeout_seconds.as_deref().filter(|t| !t.is_empty()) {
            Some(t) => Some(Duration::from_secs(t.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds: {t:?}"))
            })?)),
            None => None,
        };
        Ok(WatchOptions {
            list,
            allow_bookmarks: self.allow_bookmarks,
            send_initial_events: self.send_initial_events,
            timeout,
            ..WatchOptions::default()
        })
    }

    fn dry_run(&self) -> Result<bool> {
        match self.dry_run.as_slice() {
            [] => Ok(false),
            [v] if v == "All" => Ok(true),
            other => Err(ApiError::bad_request(format!(
                "invalid dry run value {other:?}: only \"All\" is supported"
            ))),
        }
    }

    pub(crate) fn write_options(&self) -> Result<WriteOptions> {
        let field_validation = match self.field_validation.as_deref() {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {other:?}"
                )));
            }
        };
        if let Some(manager) = &self.field_manager
            && manager.chars().count() > 128
        {
            return Err(ApiError::bad_request(
                "fieldManager must be 128 characters or fewer",
            ));
        }
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_validation,
            field_manager: self.field_manager.clone().filter(|m| !m.is_empty()),
            ..WriteOptions::default()
        })
    }

    /// Delete options from the query and from a `DeleteOptions` body (the body wins).
    pub(crate) fn delete_options(&self, body: &Body) -> Result<DeleteOptions> {
        let mut opts = DeleteOptions {
            dry_run: self.dry_run()?,
            propagation: parse_propagation(self.propagation_policy.as_deref())?,
            grace_period_seconds: match self.grace_period_seconds.as_deref() {
                None | Some("") => None,
                Some(text) => Some(text.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "strconv.ParseInt: parsing {text:?}: invalid syntax"
                    ))
                })?),
            },
            ..DeleteOptions::default()
        };
        if body.is_empty() {
            return Ok(opts);
        }
        apply_delete_options(&mut opts, &decode_object(body)?)?;
        Ok(opts)
    }
}

/// Takes what a `DeleteOptions` object (a DELETE's body, an Eviction's `deleteOptions`) sets
/// into `opts`.
pub(crate) fn apply_delete_options(opts: &mut DeleteOptions, body: &Value) -> Result<()> {
    if let Some(policy) = body.get("propagationPolicy").and_then(Value::as_str) {
        opts.propagation = parse_propagation(Some(policy))?;
    }
    if body.get("orphanDependents") == Some(&Value::Bool(true)) && opts.propagation.is_none() {
        opts.propagation = Some(Propagation::Orphan);
    }
    if let Some(dry_run) = body.get("dryRun").and_then(Value::as_array) {
        opts.dry_run |= dry_run.iter().any(|v| v == "All");
    }
    match body.get("gracePeriodSeconds") {
        None | Some(Value::Null) => {}
        Some(grace) => {
            opts.grace_period_seconds = Some(grace.as_i64().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "json: cannot unmarshal {grace} into Go struct field DeleteOptions.gracePeriodSeconds of type int64"
                ))
            })?);
        }
    }
    if let Some(uid) = body.pointer("/preconditions/uid").and_then(Value::as_str) {
        opts.precondition_uid = Some(uid.to_string());
    }
    if let Some(rv) = body
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
    {
        opts.precondition_resource_version = Some(rv.to_string());
    }
    Ok(())
}

fn parse_propagation(policy: Option<&str>) -> Result<Option<Propagation>> {
    match policy {
        None | Some("") => Ok(None),
        Some("Background") => Ok(Some(Propagation::Background)),
        Some("Foreground") => Ok(Some(Propagation::Foreground)),
        Some("Orphan") => Ok(Some(Propagation::Orphan)),
        Some(other) => Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        ))),
    }
}

/// A request body and the media type it was sent as.
pub(crate) struct Body {
    pub(crate) bytes: Bytes,
    content_type: String,
}

impl Body {
    fn is_protobuf(&self) -> bool {
        self.content_type.split(';').next().map(str::trim) == Some(konverge_protobuf::CONTENT_TYPE)
    }

    /// Whether the body was sent as YAML (`application/yaml`).
    fn is_yaml(&self) -> bool {
        self.content_type
            .split(';')
            .next()
            .map(str::trim)
            .is_some_and(|media| media.eq_ignore_ascii_case("application/yaml"))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.iter().all(u8::is_ascii_whitespace)
    }
}

/// Reads the whole body, refusing more than kube-apiserver accepts.
pub(crate) async fn body(req: Request) -> Result<Body> {
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|_| {
            ApiError::too_large(format!("Request entity too large: limit is {MAX_BODY}"))
        })?;
    Ok(Body {
        bytes,
        content_type,
    })
}

/// Decodes an object body: JSON, YAML, or Kubernetes protobuf (what client-go's typed
/// clients send for built-in types since 1.32).
pub(crate) fn decode_object(body: &Body) -> Result<Value> {
    decode_object_strict(body).map(|decoded| decoded.value)
}

/// [`decode_object`], and what `fieldValidation=Strict` refuses in the body's text (duplicate
/// fields), as kube-apiserver words it.
pub(crate) fn decode_object_strict(body: &Body) -> Result<Decoded> {
    if body.is_protobuf() {
        return konverge_protobuf::decode(&body.bytes)
            .map(|(_, object)| Decoded {
                value: object,
                strict_errors: Vec::new(),
                order: None,
            })
            .map_err(|e| {
                if e.is_unsupported_kind() {
                    ApiError::unsupported_media_type(&body.content_type)
                        .with_message(format!("the protobuf body cannot be decoded: {e}"))
                } else {
                    ApiError::bad_request(format!("the protobuf body could not be decoded: {e}"))
                }
            });
    }
    decode_text(&body.bytes, body.is_yaml())
}

/// Decodes a JSON or YAML body into an object (YAML as sigs.k8s.io/yaml reads it). A body
/// sent as `application/yaml` is YAML even when it looks like JSON (`{a: 1, }` is YAML flow
/// syntax); one sent otherwise is JSON when it starts as JSON does.
fn decode_text(body: &Bytes, yaml: bool) -> Result<Decoded> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the request body is not valid UTF-8"))?;
    let trimmed = text.trim_start();
    let decoded = if !yaml && (trimmed.starts_with('{') || trimmed.starts_with('[')) {
        decoding::json(text).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request could not be decoded as JSON: {e}"
            ))
        })?
    } else {
        decoding::yaml(text).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request could not be decoded as YAML: {e}"
            ))
        })?
    };
    if !decoded.value.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be an object",
        ));
    }
    Ok(decoded)
}
