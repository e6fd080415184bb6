//! Reading a request: query options, the `Accept` header, and the body.

use konverge_apimachinery::query::{parse_bool, strconv_parse_int};
use std::time::Duration;

use axum::extract::Request;
use bytes::Bytes;
use http::HeaderMap;
use konverge_apimachinery::decoding::{self, Decoded};
use konverge_apimachinery::selector::{FieldSelector, LabelSelector};
use serde_json::Value;

use crate::error::{ApiError, Cause, Result};
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
        // A limit of 0 or less is no limit; an empty one does not parse (`strconv.ParseInt`).
        let limit = match self.limit.as_deref() {
            Some(l) => Some(int_param(l)?).filter(|l| *l > 0).map(|l| l as u64),
            None => None,
        };
        let resource_version_match = match self.resource_version_match.as_deref() {
            None | Some("") => None,
            Some("NotOlderThan") => Some(ResourceVersionMatch::NotOlderThan),
            Some("Exact") => Some(ResourceVersionMatch::Exact),
            Some(_) => None,
        };
        if !self.watch {
            self.check_list_options()?;
        }
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

    /// kube's `ValidateListOptions` for a list: every problem, as a 422 `ListOptions`.
    fn check_list_options(&self) -> Result<()> {
        let mut causes = Vec::new();
        let rv = self.resource_version.as_deref().unwrap_or("");
        if let Some(m) = self
            .resource_version_match
            .as_deref()
            .filter(|m| !m.is_empty())
        {
            let field = "resourceVersionMatch";
            if rv.is_empty() {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if self.continue_token.is_some() {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                causes.push(Cause::not_supported(
                    field,
                    &Value::from(m),
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if m == "Exact" && rv == "0" {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events.is_some() {
            causes.push(Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", causes))
        }
    }

    /// kube's `ValidateListOptions` for a watch (as a 422 `ListOptions`): a
    /// `resourceVersionMatch` only with `sendInitialEvents`, and only `NotOlderThan`.
    fn check_watch_options(&self) -> Result<()> {
        let mut causes = Vec::new();
        let field = "resourceVersionMatch";
        let m = self.resource_version_match.as_deref().unwrap_or("");
        if self.send_initial_events.is_some() && m != "NotOlderThan" {
            causes.push(Cause::forbidden(
                field,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !m.is_empty() {
            if self.send_initial_events.is_none() {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != "NotOlderThan" {
                causes.push(Cause::not_supported(
                    field,
                    &Value::from(m),
                    &["NotOlderThan"],
                ));
            }
            if self.continue_token.is_some() {
                causes.push(Cause::forbidden(
                    field,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", causes))
        }
    }

    pub(crate) fn watch_options(&self, rt: &ResourceType) -> Result<WatchOptions> {
        self.check_watch_options()?;
        let list = self.list_options(rt)?;
        // A negative timeout ends the watch at once, as kube's timer does.
        let timeout = match self.timeout_seconds.as_deref() {
            Some(t) => Some(Duration::from_secs(int_param(t)?.max(0).unsigned_abs())),
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

    /// Whether the request is a dry run (every `dryRun` value `All`), and kube's
    /// `ValidateDryRun` causes when a value is not.
    fn dry_run(&self, causes: &mut Vec<Cause>) -> bool {
        if self.dry_run.iter().any(|v| v != "All") {
            causes.push(Cause::not_supported(
                "dryRun",
                &Value::from(self.dry_run.clone()),
                &["All"],
            ));
        }
        !self.dry_run.is_empty()
    }

    /// The options of a create (`CreateOptions`; also what the subresources that create
    /// read), validated as kube validates them.
    pub(crate) fn write_options(&self) -> Result<WriteOptions> {
        self.checked_write_options("CreateOptions", Vec::new())
    }

    /// The options of an update (`UpdateOptions`).
    pub(crate) fn update_options(&self) -> Result<WriteOptions> {
        self.checked_write_options("UpdateOptions", Vec::new())
    }

    /// The options of a patch (`PatchOptions`): `force` only for apply, which needs a
    /// `fieldManager`.
    pub(crate) fn patch_options(&self, apply: bool) -> Result<WriteOptions> {
        let mut causes = Vec::new();
        if !apply && self.force.is_some() {
            causes.push(Cause::forbidden(
                "force",
                "may not be specified for non-apply patch",
            ));
        }
        if apply && self.field_manager.as_deref().is_none_or(str::is_empty) {
            causes.push(Cause::required_because(
                "fieldManager",
                "is required for apply patch",
            ));
        }
        self.checked_write_options("PatchOptions", causes)
    }

    /// kube's validation of a write's options (`fieldManager`, `dryRun`,
    /// `fieldValidation`, after `first`), every problem at once in a 422 `kind`.
    fn checked_write_options(&self, kind: &str, mut causes: Vec<Cause>) -> Result<WriteOptions> {
        let manager = self.field_manager.as_deref().unwrap_or("");
        if manager.len() > 128 {
            causes.push(Cause::too_long("fieldManager", 128));
        }
        for (i, c) in manager.char_indices() {
            if !is_go_printable(c) {
                causes.push(Cause::invalid(
                    "fieldManager",
                    &Value::from(manager),
                    format!("invalid character {} (at position {i})", go_unicode(c)),
                ));
            }
        }
        let dry_run = self.dry_run(&mut causes);
        let field_validation = match self.field_validation.as_deref() {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            Some(other) => {
                causes.push(Cause::not_supported(
                    "fieldValidation",
                    &Value::from(other),
                    &["", "Ignore", "Strict", "Warn"],
                ));
                FieldValidation::Warn
            }
        };
        if !causes.is_empty() {
            return Err(ApiError::invalid(kind, "meta.k8s.io", "", causes));
        }
        Ok(WriteOptions {
            dry_run,
            field_validation,
            field_manager: self.field_manager.clone().filter(|m| !m.is_empty()),
            ..WriteOptions::default()
        })
    }

    /// Delete options: from a `DeleteOptions` body when there is one (the query is then not
    /// read, as kube-apiserver's delete handler reads one or the other), else from the
    /// query; validated as kube validates them (a 422 `DeleteOptions`).
    pub(crate) fn delete_options(&self, body: &Body) -> Result<DeleteOptions> {
        let mut opts = DeleteOptions::default();
        if !body.is_empty() {
            apply_delete_options(&mut opts, &decode_object(body)?)?;
            return Ok(opts);
        }
        let mut causes = Vec::new();
        opts.dry_run = self.dry_run(&mut causes);
        if let Some(text) = self.grace_period_seconds.as_deref() {
            opts.grace_period_seconds = Some(int_param(text)?);
        }
        match parse_propagation(self.propagation_policy.as_deref()) {
            Ok(policy) => opts.propagation = policy,
            Err(cause) => causes.insert(0, cause),
        }
        if causes.is_empty() {
            Ok(opts)
        } else {
            Err(ApiError::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                causes,
            ))
        }
    }
}

/// An integer query parameter, read as kube's parameter codec reads it.
fn int_param(text: &str) -> Result<i64> {
    strconv_parse_int(text).map_err(ApiError::bad_request)
}

/// Whether Go's `unicode.IsPrint` holds for `c`: letters, marks, numbers, punctuation,
/// symbols and the ASCII space (no other space, no control or format character).
fn is_go_printable(c: char) -> bool {
    c == ' ' || !(c.is_control() || c.is_whitespace() || is_format(c))
}

/// Unicode's format characters (category Cf) that can appear in text.
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}' | '\u{180e}'
            | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
            | '\u{e0001}' | '\u{e0020}'..='\u{e007f}'
    )
}

/// A character as Go's `%#U` prints it: `U+0009`, or `U+00E9 'é'` when printable.
fn go_unicode(c: char) -> String {
    let code = format!("U+{:04X}", u32::from(c));
    if is_go_printable(c) {
        format!("{code} '{c}'")
    } else {
        code
    }
}

/// Takes what a `DeleteOptions` object (a DELETE's body, an Eviction's `deleteOptions`) sets
/// into `opts`.
pub(crate) fn apply_delete_options(opts: &mut DeleteOptions, body: &Value) -> Result<()> {
    let invalid = |causes| ApiError::invalid("DeleteOptions", "meta.k8s.io", "", causes);
    if let Some(policy) = body.get("propagationPolicy").and_then(Value::as_str) {
        if body.get("orphanDependents").is_some_and(|o| !o.is_null()) {
            return Err(invalid(vec![Cause::invalid(
                "propagationPolicy",
                &Value::from(policy),
                "orphanDependents and deletionPropagation cannot be both set",
            )]));
        }
        opts.propagation = parse_propagation(Some(policy)).map_err(|c| invalid(vec![c]))?;
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

fn parse_propagation(policy: Option<&str>) -> std::result::Result<Option<Propagation>, Cause> {
    match policy {
        None => Ok(None),
        Some("Background") => Ok(Some(Propagation::Background)),
        Some("Foreground") => Ok(Some(Propagation::Foreground)),
        Some("Orphan") => Ok(Some(Propagation::Orphan)),
        Some(other) => Err(Cause::not_supported(
            "propagationPolicy",
            &Value::from(other),
            &["Foreground", "Background", "Orphan", "nil"],
        )),
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
