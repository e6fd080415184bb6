//! The HTTP front: one [`tower::Service`] (an axum `Router`) that authenticates, parses the
//! path into a [`Route`], decodes the body, calls the registry and encodes the answer.
//!
//! Everything a response can be — an object, a list, a `Table`, a watch stream, a `Status`
//! failure — is produced here; the registry never sees HTTP.

mod audited;
pub mod discovery;
mod health;
mod list_body;
pub mod openapi;
pub mod patch;
mod request;
pub mod route;
pub mod scale;
pub mod table;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use konverge_apimachinery::escape::EscapeError;
use konverge_apimachinery::request_info::{RequestInfo, RequestInfoError};
use serde_json::{Value, json};

use crate::ApiServer;
use crate::error::{ApiError, Result};
use crate::json::{GoOrder, encode_watch_line};
use crate::registry::{Deleted, Sent, WatchEvent, Written};
use request::{Accept, Query};
use route::{ResourceRoute, Route};
use table::IncludeObject;

/// The router: every path goes through `dispatch`.
pub fn router(server: Arc<ApiServer>) -> axum::Router {
    axum::Router::new().fallback(dispatch).with_state(server)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.code, &self.to_status(), None)
    }
}

/// A response whose body is an API object, list or `Status`, keys in kube-apiserver's order
/// and ended by a newline, as its JSON serializer (Go's `json.Encoder`) writes them.
fn json_response(code: StatusCode, body: &Value, content_type: Option<&str>) -> Response {
    let mut bytes = serde_json::to_vec(&GoOrder(body)).unwrap_or_default();
    bytes.push(b'\n');
    bytes_response(code, bytes, content_type)
}

/// A JSON document kube-apiserver writes itself rather than through its serializer (the
/// ServiceAccount issuer's documents): compact, with no newline.
fn raw_json_response(body: &Value, content_type: &str) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    bytes_response(StatusCode::OK, bytes, Some(content_type))
}

fn bytes_response(code: StatusCode, bytes: Vec<u8>, content_type: Option<&str>) -> Response {
    let mut response = (code, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type.unwrap_or("application/json"))
            .unwrap_or(HeaderValue::from_static("application/json")),
    );
    response
}

/// A list's answer, sent as the connection takes it.
fn body_response(body: list_body::ListBody, content_type: &'static str) -> Response {
    let mut response = Response::new(Body::new(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An object, list or `Status` answer: Kubernetes protobuf when the client prefers it and the
/// kind has a protobuf encoding (built-in kinds), JSON otherwise.
fn respond(code: StatusCode, body: &Value, protobuf: bool) -> Response {
    if protobuf && let Some(bytes) = protobuf_body(body) {
        return bytes_response(code, bytes, Some(konverge_protobuf::CONTENT_TYPE));
    }
    json_response(code, body, None)
}

/// `body` as a Kubernetes protobuf body, if its kind has an encoding.
fn protobuf_body(body: &Value) -> Option<Vec<u8>> {
    let api_version = body["apiVersion"].as_str()?;
    let kind = body["kind"].as_str()?;
    if kind == "Status" {
        return Some(konverge_protobuf::encode_status(body));
    }
    if let Some(item) = kind.strip_suffix("List")
        && body.get("items").is_some()
    {
        if !konverge_protobuf::can_encode(api_version, item) {
            return None;
        }
        let items = body["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        return konverge_protobuf::encode_list(api_version, kind, &body["metadata"], items.iter())
            .ok();
    }
    if !konverge_protobuf::can_encode(api_version, kind) {
        return None;
    }
    konverge_protobuf::encode(body).ok()
}

fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - {:?}", warning);
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

async fn dispatch(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    let started = Instant::now();
    let received = jiff::Timestamp::now();
    // Which request this is, read once: authorization, audit, routing and metrics all take
    // it from here.
    let info = match RequestInfo::parse(req.method().as_str(), req.uri().path(), req.uri().query())
    {
        Ok(info) => info,
        Err(RequestInfoError::Escape(e)) => {
            let err = match e {
                EscapeError::NotUtf8(_) => ApiError::bad_request("path is not UTF-8"),
                other => ApiError::bad_request(other.to_string()),
            };
            return respond(err.code, &err.to_status(), false);
        }
        Err(e) => return request_info_error(&req, &e),
    };
    let route = match server.aggregator.remote_of_path(req.uri().path()).await {
        Some(remote) => Ok(Route::Remote(remote)),
        None => route::of_request(&info, server.registry.catalog()),
    };
    let accept = Accept::parse(req.headers());
    // Errors are written as the objects of the request would be: protobuf when the client
    // prefers it and the resource has an encoding; JSON otherwise (kube-apiserver writes
    // the errors of failed negotiations, 406 included, as JSON).
    let protobuf = accept.protobuf
        && matches!(
            &route,
            Ok(Route::Resource(r)) if konverge_protobuf::can_encode(&r.rt.api_version(), &r.rt.kind)
        );
    // kube-apiserver counts what reaches a handler: not requests refused by authentication or
    // authorization (below), nor paths that match nothing.
    let measured = request_info(&route, &req, &accept);
    let _inflight = match &measured {
        Some(info) if info.long_running => None,
        Some(info) => Some(server.metrics.enter(info.mutating())),
        None => Some(
            server
                .metrics
                .enter(!matches!(*req.method(), Method::GET | Method::HEAD)),
        ),
    };
    // Requests refused by authentication or authorization never reach a handler, and kube
    // does not count them.
    let (parts, body) = req.into_parts();
    let mut who = audited::Who::default();
    let mut classified = None;
    let admitted = admit(&server, &parts, &info, &mut who, &mut classified).await;
    let mut audited = server
        .audit()
        .and_then(|audit| audited::Audited::begin(audit, &parts, &info, &who, received));
    // What an aggregated API server answers is streamed, never held for the audit log.
    let long_running =
        measured.as_ref().is_some_and(|i| i.long_running) || matches!(&route, Ok(Route::Remote(_)));
    let user = match admitted {
        Ok(user) => user,
        Err(err) => {
            let mut response = respond(err.code, &err.to_status(), protobuf);
            if let Some(classified) = &classified {
                classified.set_headers(response.headers_mut());
            }
            return match audited {
                Some(audited) => audited.finish(response, false).await,
                None => response,
            };
        }
    };
    let mut req = Request::from_parts(parts, body);
    if let Some(audited) = audited.as_mut() {
        req = audited.keep_request_object(req).await;
    }
    // What kube-apiserver answers through its serializer (objects, lists, errors,
    // discovery) may be indented; documents it writes itself (OpenAPI, the issuer's) not.
    let serialized = matches!(
        &route,
        Ok(Route::Resource(_)
            | Route::CoreVersions
            | Route::Groups
            | Route::Group(_)
            | Route::GroupVersion(..))
            | Err(_)
    );
    let pretty = serialized && wants_pretty(&req);
    let mut response = match handle(&server, &user, route, accept, req).await {
        Ok(response) => response,
        Err(err) => respond(err.code, &err.to_status(), protobuf),
    };
    if let Some(classified) = &classified {
        classified.set_headers(response.headers_mut());
    }
    if pretty {
        response = prettified(response).await;
    }
    if let Some(audited) = audited {
        response = audited.finish(response, long_running).await;
    }
    match measured {
        Some(measured) => recorded(&server, measured, started, response),
        None => response,
    }
}

/// kube-apiserver's answer to a request its request info cannot read (`/api/v1/watch`): a
/// plain-text 500 naming the request, as its `WithRequestInfo` filter writes it.
fn request_info_error(req: &Request, error: &RequestInfoError) -> Response {
    let uri = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_string(), ToString::to_string);
    let text = format!(
        "Internal Server Error: {}: failed to create RequestInfo: {error}",
        konverge_apimachinery::gofmt::quote(&uri)
    )
    .replace('&', "&amp;")
    .replace('<', "&lt;")
    .replace('>', "&gt;");
    let mut response = Response::new(Body::from(text + "\n"));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Whether the answer is indented, as kube-apiserver decides (`isPrettyPrint`): `?pretty`
/// read as Go's `strconv.ParseBool` reads it (a bad value is false), otherwise when the
/// client is curl, Wget or a browser.
fn wants_pretty(req: &Request) -> bool {
    // Most requests name no `pretty`: their query is not parsed again for it.
    let query = req.uri().query().filter(|q| q.contains("pretty"));
    let pretty = query.and_then(|query| {
        serde_urlencoded::from_str::<Vec<(String, String)>>(query)
            .ok()?
            .into_iter()
            .find(|(key, value)| key == "pretty" && !value.is_empty())
            .map(|(_, value)| {
                konverge_apimachinery::query::strconv_parse_bool(&value).unwrap_or(false)
            })
    });
    if let Some(pretty) = pretty {
        return pretty;
    }
    req.headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|agent| {
            agent.starts_with("curl")
                || agent.starts_with("Wget")
                || agent.starts_with("Mozilla/5.0")
        })
}

/// A whole JSON answer indented as Go's `json.MarshalIndent(obj, "", "  ")` writes it (no
/// newline at the end); streams (watches) and other types are left as they are.
async fn prettified(response: Response) -> Response {
    use axum::body::HttpBody;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !json || response.body().size_hint().exact().is_none() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let indented = indent_json(&bytes);
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(indented))
}

/// Compact JSON indented by two spaces per level, `": "` after keys, `{}` and `[]` kept
/// together, as Go's `MarshalIndent` writes it.
fn indent_json(compact: &[u8]) -> Vec<u8> {
    let compact = compact.trim_ascii_end();
    let mut out = Vec::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        out.extend(std::iter::repeat_n(b' ', depth * 2));
    };
    let mut i = 0;
    while i < compact.len() {
        let c = compact[i];
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_string = true;
                out.push(c);
            }
            b'{' | b'[' => {
                let close = if c == b'{' { b'}' } else { b']' };
                if compact.get(i + 1) == Some(&close) {
                    out.extend([c, close]);
                    i += 2;
                    continue;
                }
                out.push(c);
                depth += 1;
                newline(&mut out, depth);
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            b',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            b':' => out.extend(b": "),
            other => out.push(other),
        }
        i += 1;
    }
    out
}

/// What kube-apiserver's metrics say about a request, for the requests kube instruments:
/// resources, the health checks, aggregated discovery.
fn request_info(
    route: &Result<Route>,
    req: &Request,
    accept: &Accept,
) -> Option<crate::metrics::RequestInfo> {
    use crate::metrics::{RequestInfo, RequestParts};
    let parts = RequestParts {
        method: req.method(),
        query: req.uri().query(),
        content_type: req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    };
    match route.as_ref().ok()? {
        // A namespaced object named without its namespace matches no route of kube's.
        Route::Resource(r) if r.rt.namespaced && r.namespace.is_none() && r.name.is_some() => None,
        Route::Resource(r) => Some(RequestInfo::resource(
            &r.rt,
            r.namespace.as_deref(),
            r.name.as_deref(),
            r.subresource.as_deref(),
            r.watch_path,
            &parts,
        )),
        // kube instruments the health endpoints' roots, without a component.
        Route::Health(endpoint, None) => Some(RequestInfo::non_resource(
            match *endpoint {
                "livez" => "/livez",
                "readyz" => "/readyz",
                _ => "/healthz",
            },
            "",
            &parts,
        )),
        Route::Groups if accept.aggregated_discovery().is_some() => {
            Some(RequestInfo::non_resource("apis", "apiserver", &parts))
        }
        Route::CoreVersions if accept.aggregated_discovery().is_some() => {
            Some(RequestInfo::non_resource("api", "apiserver", &parts))
        }
        _ => None,
    }
}

/// Records a request's answer; a long-running one (a watch) is counted as open until its
/// stream ends, then recorded, as kube records a watch when its handler returns.
fn recorded(
    server: &Arc<ApiServer>,
    info: crate::metrics::RequestInfo,
    started: Instant,
    response: Response,
) -> Response {
    use axum::body::HttpBody;
    use futures::StreamExt;
    let code = response.status();
    if info.long_running && code == StatusCode::OK {
        let open = Open {
            gauge: server.metrics.long_running(&info),
            metrics: server.metrics.clone(),
            info,
            started,
        };
        let (parts, body) = response.into_parts();
        let stream = body.into_data_stream().map(move |chunk| {
            // The stream owns the guard: dropping it (end, disconnect) ends the request.
            let _open = &open;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(stream));
    }
    if let Some(size) = response.body().size_hint().exact() {
        server.metrics.response_size(&info, size);
    }
    server.metrics.request(&info, code, started.elapsed());
    response
}

/// A long-running request being served.
struct Open {
    metrics: Arc<crate::metrics::Metrics>,
    info: crate::metrics::RequestInfo,
    started: Instant,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.dec();
        self.metrics
            .request(&self.info, StatusCode::OK, self.started.elapsed());
    }
}

/// Who asks, who they act as, which FlowSchema takes the request, and whether they may:
/// before routing, as in kube-apiserver (a request for a resource that does not exist is
/// forbidden before it is not found). `who` learns each as it is known, for the audit log;
/// `classified` the FlowSchema and priority level, for the response's headers.
async fn admit(
    server: &ApiServer,
    parts: &http::request::Parts,
    info: &RequestInfo,
    who: &mut audited::Who,
    classified: &mut Option<crate::flowcontrol::Classification>,
) -> Result<crate::auth::user::UserInfo> {
    let requester = server
        .authenticator()
        .authenticate(
            server.registry(),
            &parts.headers,
            parts
                .extensions
                .get::<crate::auth::authn::ClientCertificate>(),
        )
        .await?;
    who.requester = Some(requester.clone());
    let user =
        crate::auth::authn::impersonate(server.authorization(), requester, &parts.headers).await?;
    who.user = Some(user.clone());
    // kube's priority-and-fairness filter runs after impersonation, before authorization.
    *classified = server.flow_control.classify(&user, info).await;
    let attributes = crate::auth::authz::Attributes::of_request(&user, info);
    match server.authorization().decide_observed(&attributes).await {
        crate::auth::authz::Decision::Allow(reason) => {
            who.decision = Some((true, reason));
            Ok(user)
        }
        crate::auth::authz::Decision::Deny(reason)
        | crate::auth::authz::Decision::NoOpinion(reason) => {
            who.decision = Some((false, reason.clone()));
            Err(crate::auth::authz::forbidden(&attributes, &reason))
        }
    }
}

async fn handle(
    server: &Arc<ApiServer>,
    user: &crate::auth::user::UserInfo,
    route: Result<Route>,
    accept: Accept,
    req: Request,
) -> Result<Response> {
    let path = req.uri().path().to_string();
    let route = route?;
    // What an aggregated API server answers goes back as it is.
    if let Route::Remote(remote) = &route {
        return Ok(server.aggregator.proxy(remote, user, req).await);
    }
    let method = req.method().clone();
    let query = Query::parse(req.uri().query())?;
    let long_running = query.watch
        || matches!(&route, Route::Resource(r) if r.watch_path
            || r.subresource.as_deref().and_then(|s| r.rt.subresource(s)).is_some_and(|s| s.storage.connects()));
    if !long_running {
        query.request_timeout()?;
    }
    if method != Method::GET && !matches!(route, Route::Resource(_)) {
        return Err(ApiError::method_not_allowed(&method, &path));
    }
    match route {
        // Written as kube-apiserver writes it: indented by two spaces, with no newline.
        Route::Version => Ok(bytes_response(StatusCode::OK, server.version_body(), None)),
        Route::Health(endpoint, check) => {
            health::answer(server, endpoint, check.as_deref(), req.uri().query()).await
        }
        Route::CoreVersions => Ok(match accept.aggregated_discovery() {
            Some((version, ct)) => json_response(
                StatusCode::OK,
                &discovery::aggregated(server.registry.catalog(), true, version, Vec::new()),
                Some(&ct),
            ),
            None => json_response(
                StatusCode::OK,
                &crate::http::discovery::core_versions(&server.address()),
                None,
            ),
        }),
        Route::Groups => {
            let catalog = server.registry.catalog();
            let remotes = server.aggregator.remotes().await;
            Ok(match accept.aggregated_discovery() {
                Some((version, ct)) => {
                    let remote =
                        discovery::remote_aggregated(catalog, &remotes, &server.aggregator);
                    json_response(
                        StatusCode::OK,
                        &discovery::aggregated(catalog, false, version, remote),
                        Some(&ct),
                    )
                }
                None => json_response(
                    StatusCode::OK,
                    &discovery::group_list(catalog, &remotes),
                    None,
                ),
            })
        }
        Route::Group(group) => {
            let remotes = server.aggregator.remotes().await;
            discovery::group(server.registry.catalog(), &remotes, &group)
                .map(|g| json_response(StatusCode::OK, &g, None))
                .ok_or_else(ApiError::no_route)
        }
        Route::GroupVersion(group, version) => {
            crate::http::discovery::resource_list(server.registry.catalog(), &group, &version)
                .map(|l| json_response(StatusCode::OK, &l, None))
                .ok_or_else(ApiError::no_route)
        }
        Route::OpenApiV3(path) => Ok(crate::http::openapi::v3_response(
            server.registry.catalog(),
            path.as_deref(),
            req.uri().query(),
            req.headers(),
        )),
        Route::OpenApiV2 => Ok(crate::http::openapi::v2_response(
            server.registry.catalog(),
            req.headers(),
        )),
        Route::Metrics => {
            server.registry.update_object_counts().await;
            let mut response = (StatusCode::OK, server.metrics.encode()).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            );
            Ok(response)
        }
        Route::OpenIdConfiguration => Ok(raw_json_response(
            &server
                .service_account_tokens()
                .openid_configuration(&format!("https://{}/openid/v1/jwks", server.address())),
            "application/json",
        )),
        Route::Jwks => Ok(raw_json_response(
            &server.service_account_tokens().jwks(),
            "application/jwk-set+json",
        )),
        Route::Resource(route) => resource(server, user, route, method, accept, query, req).await,
        Route::Remote(_) => Err(ApiError::no_route()),
    }
}

async fn resource(
    server: &Arc<ApiServer>,
    user: &crate::auth::user::UserInfo,
    route: ResourceRoute,
    method: Method,
    accept: Accept,
    query: Query,
    req: Request,
) -> Result<Response> {
    if accept.unacceptable {
        return Err(ApiError::not_acceptable(
            "application/json, application/yaml, application/vnd.kubernetes.protobuf",
        ));
    }
    let rt = route.rt.clone();
    // What kube-apiserver serves without a table convertor (reviews, bindings, token
    // requests, evictions) cannot be answered as a Table: another acceptable type is
    // answered, or 406 when the client takes nothing else.
    let mut accept = accept;
    let subresource = match route.subresource.as_deref() {
        Some(sub) => Some(
            rt.subresource(sub)
                .ok_or_else(|| ApiError::method_not_allowed(&method, &rt.plural))?,
        ),
        None => None,
    };
    let tableless = matches!(
        rt.serving,
        crate::resources::Serving::Review(_) | crate::resources::Serving::Binding
    ) || subresource.is_some_and(|s| s.storage.tableless());
    if accept.table && tableless {
        if !accept.plain_acceptable {
            return Err(ApiError::not_acceptable(
                "application/json, application/yaml, application/vnd.kubernetes.protobuf",
            ));
        }
        accept.table = false;
    }
    if accept.protobuf
        && !accept.json_acceptable
        && !konverge_protobuf::can_encode(&rt.api_version(), &rt.kind)
    {
        return Err(ApiError::not_acceptable(
            "application/json, application/yaml",
        ));
    }
    let protobuf = accept.protobuf && !accept.table && !accept.metadata;
    let registry = &server.registry;
    if rt.namespaced && route.namespace.is_none() && route.name.is_some() {
        return Err(ApiError::no_route());
    }
    let ns = route.namespace.as_deref();
    let name = route.name.as_deref();
    let sub = route.subresource.as_deref();
    let verb = match (method.as_str(), name) {
        ("GET", None) if route.watch_path || query.watch => "watch",
        ("GET", None) => "list",
        ("GET", Some(_)) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Some(_)) => "delete",
        ("DELETE", None) => "deletecollection",
        _ => return Err(ApiError::method_not_allowed(&method, &rt.plural)),
    };
    let served = match &subresource {
        Some(sub) => sub.verbs.contains(&verb),
        None => rt.serves(verb),
    };
    if !served {
        return Err(ApiError::method_not_allowed(&method, &rt.plural));
    }
    use crate::resources::{Action, Serving, Storage};
    match (rt.serving, subresource.map(|s| s.storage)) {
        (Serving::Stored, None) => {}
        (Serving::Review(review), _) => {
            let body = request::body(req).await?;
            let decoded = request::decode_object_strict(&body)?;
            let mut opts = query.write_options()?;
            opts.body_strict_errors = decoded.strict_errors;
            opts.body_field_order = decoded.order;
            let obj = registry.decode_request(&rt, decoded.value, &opts)?;
            let answer = crate::resources::reviews::answer(server, user, review, ns, obj).await?;
            return Ok(respond(StatusCode::CREATED, &answer, protobuf));
        }
        (Serving::ComponentStatus, _) => {
            let statuses = crate::registry::subresources::component_statuses(server).await;
            return match name {
                Some(name) => statuses
                    .into_iter()
                    .find(|s| s["metadata"]["name"] == name)
                    .map(|s| object_response(StatusCode::OK, &rt, s, &accept, query.include_object))
                    .ok_or_else(|| {
                        ApiError::not_found(crate::error::Target {
                            group: "",
                            resource: "componentstatuses",
                            name,
                        })
                    }),
                None if accept.table => {
                    let table = table::table(&rt, &statuses, json!({}), query.include_object);
                    Ok(json_response(
                        StatusCode::OK,
                        &accept.meta_body(table),
                        Some(&accept.meta_type(Accept::TABLE)),
                    ))
                }
                None => Ok(json_response(
                    StatusCode::OK,
                    &json!({"kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {}, "items": statuses}),
                    None,
                )),
            };
        }
        (Serving::Binding, _) | (_, Some(Storage::Action(Action::Binding))) => {
            let body = request::body(req).await?;
            let obj = request::decode_object(&body)?;
            let answer = crate::registry::subresources::bind(
                registry,
                ns,
                name,
                obj,
                &query.write_options()?,
            )
            .await?;
            return Ok(respond(StatusCode::CREATED, &answer, protobuf));
        }
        (_, Some(Storage::Action(Action::Token))) => {
            let body = request::body(req).await?;
            let obj = request::decode_object(&body)?;
            let answer = crate::registry::subresources::token_request(
                registry,
                &server.service_account_tokens().clone(),
                ns,
                name.unwrap_or(""),
                obj,
            )
            .await?;
            return Ok(respond(StatusCode::CREATED, &answer, protobuf));
        }
        (_, Some(Storage::Action(Action::Eviction))) => {
            let body = request::body(req).await?;
            let obj = request::decode_object(&body)?;
            let mut opts = crate::registry::DeleteOptions {
                dry_run: query.write_options()?.dry_run,
                ..Default::default()
            };
            if let Some(delete) = obj.get("deleteOptions").filter(|d| d.is_object()) {
                request::apply_delete_options(&mut opts, delete)?;
            }
            let answer =
                crate::registry::subresources::evict(registry, ns, name.unwrap_or(""), obj, &opts)
                    .await?;
            return Ok(respond(StatusCode::CREATED, &answer, protobuf));
        }
        (_, Some(Storage::Log)) => {
            let name = name.unwrap_or("");
            let opts = crate::logs::LogOptions::parse(req.uri().query())?;
            opts.validate(name)?;
            let pod = crate::logs::read_pod(registry, ns, name).await?;
            let hook = server.pod_logs();
            let answer = crate::logs::answer(hook.as_deref(), &pod, &opts, jiff::Timestamp::now())?;
            return match answer {
                crate::logs::Answer::Log(text) => {
                    Ok(bytes_response(StatusCode::OK, text, Some("text/plain")))
                }
                crate::logs::Answer::NoNode => Ok(StatusCode::NO_CONTENT.into_response()),
                crate::logs::Answer::NoKubelet => Err(
                    crate::registry::subresources::needs_kubelet(registry, &rt, ns, name, "log")
                        .await,
                ),
            };
        }
        (_, Some(Storage::Connect)) => {
            let kubelet = sub.unwrap_or("");
            let options = crate::registry::subresources::connect_options(
                &rt,
                kubelet,
                req.uri().query().unwrap_or(""),
            )?;
            crate::registry::subresources::admit_connect(
                registry,
                &rt,
                ns,
                name.unwrap_or(""),
                kubelet,
                options,
                user,
            )
            .await?;
            return Err(crate::registry::subresources::needs_kubelet(
                registry,
                &rt,
                ns,
                name.unwrap_or(""),
                kubelet,
            )
            .await);
        }
        _ => {}
    }
    let scale = subresource.is_some_and(|s| matches!(s.storage, Storage::Scale));
    let user_agent_manager = crate::registry::manager_from_user_agent(
        req.headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok()),
    );
    let list_meta = |rv: i64, cont: Option<String>, remaining: Option<u64>| {
        let mut m = json!({"resourceVersion": rv.to_string()});
        if let Some(c) = cont {
            m["continue"] = json!(c);
        }
        if let Some(r) = remaining {
            m["remainingItemCount"] = json!(r);
        }
        m
    };
    match (method.as_str(), name) {
        ("GET", None) if route.watch_path || query.watch => {
            let opts = query.watch_options(&rt)?;
            let stream = registry
                .watch_sent(rt.clone(), route.namespace.clone(), opts)
                .await?;
            Ok(watch_response(
                stream,
                &rt,
                accept,
                server.metrics.watch_events(&rt),
            ))
        }
        ("GET", None) => {
            let opts = query.list_options(&rt)?;
            let page = registry.list_page(&rt, ns, &opts).await?;
            let meta = list_meta(page.resource_version, page.continue_token, page.remaining);
            if accept.table || accept.metadata {
                let items = page
                    .items
                    .iter()
                    .map(crate::registry::Item::value)
                    .collect::<Result<Vec<Value>>>()?;
                if accept.table {
                    let table = table::table(&rt, &items, meta, query.include_object);
                    return Ok(json_response(
                        StatusCode::OK,
                        &accept.meta_body(table),
                        Some(&accept.meta_type(Accept::TABLE)),
                    ));
                }
                let list = table::partial_metadata_list(&items, meta);
                return Ok(json_response(
                    StatusCode::OK,
                    &accept.meta_body(list),
                    Some(&accept.meta_type(Accept::METADATA_LIST)),
                ));
            }
            if protobuf
                && let Ok(body) =
                    list_body::protobuf(&rt.api_version(), &rt.list_kind(), &meta, &page.items)
            {
                return Ok(body_response(body, konverge_protobuf::CONTENT_TYPE));
            }
            let body = list_body::json(
                &rt.list_kind(),
                &rt.api_version(),
                &meta,
                &page.items,
                rt.custom.is_some(),
            )?;
            Ok(body_response(body, "application/json"))
        }
        ("GET", Some(name)) => {
            let obj = registry
                .get(&rt, ns, name, query.resource_version.as_deref())
                .await?;
            if scale {
                return Ok(json_response(
                    StatusCode::OK,
                    &crate::http::scale::to_scale(&rt, &obj)?,
                    None,
                ));
            }
            Ok(object_response(
                StatusCode::OK,
                &rt,
                obj,
                &accept,
                query.include_object,
            ))
        }
        // As kube-apiserver's handlers: the options are read and validated before the body
        // is decoded.
        ("POST", None) => {
            let body = request::body(req).await?;
            let mut opts = query.write_options()?;
            let decoded = request::decode_object_strict(&body)?;
            let obj = decoded.value;
            opts.body_strict_errors = decoded.strict_errors;
            opts.body_field_order = decoded.order;
            opts.field_manager.get_or_insert(user_agent_manager);
            opts.user = Some(user.clone());
            let written = registry.create(&rt, ns, obj, &opts).await?;
            Ok(written_response(&rt, written, &accept, &query))
        }
        ("PUT", Some(name)) => {
            let body = request::body(req).await?;
            let mut opts = query.update_options()?;
            let decoded = request::decode_object_strict(&body)?;
            let obj = decoded.value;
            opts.body_strict_errors = decoded.strict_errors;
            opts.body_field_order = decoded.order;
            opts.field_manager.get_or_insert(user_agent_manager);
            opts.user = Some(user.clone());
            if scale {
                let written =
                    crate::http::scale::update_scale(registry, &rt, ns, name, obj, &opts).await?;
                return Ok(respond(StatusCode::OK, &written, protobuf));
            }
            let written = registry.update(&rt, ns, name, obj, sub, &opts).await?;
            Ok(written_response(&rt, written, &accept, &query))
        }
        ("PATCH", Some(name)) => {
            let content_type = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            // The patch type is checked first (415), then the options, then the body.
            let media = crate::http::patch::Patch::media(&content_type, &rt)?;
            let body = request::body(req).await?;
            let mut opts = query.patch_options(media == crate::http::patch::APPLY)?;
            let patch = crate::http::patch::Patch::parse(media, &body.bytes, &rt)?;
            if opts.field_manager.is_none() {
                opts.field_manager = Some(user_agent_manager);
            }
            opts.user = Some(user.clone());
            if let crate::http::patch::Patch::Apply(config, duplicates) = &patch
                && !scale
            {
                let duplicate_warnings = crate::registry::apply::check_config_duplicates(
                    duplicates,
                    opts.field_validation,
                )?;
                // An apply that creates the object must be allowed to create it too, as
                // kube-apiserver's patch handler checks (with its terse message).
                let create = crate::auth::authz::Attributes {
                    api_version: rt.version.clone(),
                    subresource: sub.unwrap_or("").to_string(),
                    ..crate::auth::authz::Attributes::resource(
                        user,
                        "create",
                        &rt.group,
                        &rt.plural,
                        ns.unwrap_or(""),
                        name,
                    )
                };
                let decision = server.authorization().decide(&create).await;
                if !decision.allowed()
                    && matches!(registry.get(&rt, ns, name, None).await, Err(e) if e.code == StatusCode::NOT_FOUND)
                {
                    server.authorization().observe(&create, &decision);
                    return Err(ApiError::forbidden(
                        crate::error::Target {
                            group: &rt.group,
                            resource: &rt.plural,
                            name,
                        },
                        decision.reason(),
                    ));
                }
                let written = registry
                    .apply(
                        &rt,
                        ns,
                        name,
                        sub,
                        config.clone(),
                        &opts,
                        query.force.unwrap_or(false),
                    )
                    .await?;
                if written.created {
                    server.authorization().observe(&create, &decision);
                }
                let mut written = written;
                written.warnings.splice(0..0, duplicate_warnings);
                return Ok(written_response(&rt, written, &accept, &query));
            }
            if scale {
                let written =
                    crate::http::scale::patch_scale(registry, &rt, ns, name, &patch, &opts).await?;
                return Ok(respond(StatusCode::OK, &written, protobuf));
            }
            let apply = |current: &Value| patch.apply(current);
            let written = registry.patch(&rt, ns, name, sub, &opts, &apply).await?;
            Ok(written_response(&rt, written, &accept, &query))
        }
        ("DELETE", Some(name)) => {
            let body = request::body(req).await?;
            let mut opts = query.delete_options(&body)?;
            opts.user = Some(user.clone());
            let (deleted, warnings) = registry.delete_warned(&rt, ns, name, &opts).await?;
            let response = match deleted {
                Deleted::Pending(obj) => respond(StatusCode::OK, &obj, protobuf),
                // Pods answer with the pod as it was last (kube-apiserver's pod storage
                // returns deleted objects); other kinds with a Status.
                Deleted::Gone(obj) if rt.deletion == crate::resources::Deletion::Graceful => {
                    respond(StatusCode::OK, &obj, protobuf)
                }
                Deleted::Gone(obj) => {
                    let status = json!({
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": name,
                            "group": rt.group,
                            "kind": rt.plural,
                            "uid": obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
                        },
                    });
                    respond(StatusCode::OK, &status, protobuf)
                }
            };
            Ok(with_warnings(response, &warnings))
        }
        ("DELETE", None) => {
            let body = request::body(req).await?;
            let mut opts = query.delete_options(&body)?;
            opts.user = Some(user.clone());
            let list = query.list_options(&rt)?;
            let mut deleted = registry.delete_collection(&rt, ns, &list, &opts).await?;
            // Built-in kinds' items go without their type, as in a list (`list_body::json`).
            if rt.custom.is_none() {
                for item in &mut deleted {
                    if let Some(fields) = item.as_object_mut() {
                        fields.remove("kind");
                        fields.remove("apiVersion");
                    }
                }
            }
            let list = json!({
                "kind": rt.list_kind(),
                "apiVersion": rt.api_version(),
                "metadata": {},
                "items": deleted,
            });
            Ok(respond(StatusCode::OK, &list, protobuf))
        }
        _ => Err(ApiError::method_not_allowed(&method, &rt.plural)),
    }
}

fn object_response(
    code: StatusCode,
    rt: &crate::resources::ResourceType,
    obj: Value,
    accept: &Accept,
    include: IncludeObject,
) -> Response {
    if accept.table {
        let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
        let table = table::table(rt, std::slice::from_ref(&obj), meta, include);
        return json_response(
            code,
            &accept.meta_body(table),
            Some(&accept.meta_type(Accept::TABLE)),
        );
    }
    if accept.metadata {
        return json_response(
            code,
            &accept.meta_body(table::partial_metadata(&obj)),
            Some(&accept.meta_type(Accept::METADATA)),
        );
    }
    respond(code, &obj, accept.protobuf)
}

fn written_response(
    rt: &crate::resources::ResourceType,
    written: Written,
    accept: &Accept,
    query: &Query,
) -> Response {
    let code = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    with_warnings(
        object_response(code, rt, written.object, accept, query.include_object),
        &written.warnings,
    )
}

/// One watch event as a line of JSON: `type`, then the object in kube-apiserver's order.
fn watch_line(event: &WatchEvent) -> Bytes {
    let (kind, object) = event.parts();
    encode_watch_line(kind, object, 0)
        .map(|(line, _)| line)
        .unwrap_or_default()
}

fn watch_response(
    stream: impl futures::Stream<Item = Sent> + Send + 'static,
    rt: &Arc<crate::resources::ResourceType>,
    accept: Accept,
    (events, event_sizes): (
        prometheus_client::metrics::counter::Counter,
        prometheus_client::metrics::histogram::Histogram,
    ),
) -> Response {
    use futures::StreamExt;
    let rt = rt.clone();
    let table = accept.table;
    let metadata = accept.metadata;
    let protobuf = accept.protobuf
        && !table
        && !metadata
        && konverge_protobuf::can_encode(&rt.api_version(), &rt.kind);
    let lines = stream.map(move |sent| {
        let bytes = match sent {
            // The cache's JSON of the object, its event's whole line when the watch sends
            // the event as the cache saw it: encoded once for every watcher.
            Sent::Cached(cached) if !table && !metadata && !protobuf => cached.json_line(),
            sent => {
                let event = sent.into_event();
                let event = match (&event, table, metadata) {
                    (WatchEvent::Error(_) | WatchEvent::Bookmark(_), _, _) => event,
                    (_, true, _) => {
                        let obj = event.object();
                        let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
                        let t = table::table(
                            &rt,
                            std::slice::from_ref(obj),
                            meta,
                            IncludeObject::Metadata,
                        );
                        event.with_object(t)
                    }
                    (_, false, true) => event.with_object(table::partial_metadata(event.object())),
                    _ => event,
                };
                if protobuf {
                    Bytes::from(protobuf_watch_frame(&event))
                } else {
                    watch_line(&event)
                }
            }
        };
        // Every event sent counts, bookmarks and errors too (kube counts what it encodes).
        events.inc();
        event_sizes.observe(bytes.len() as f64);
        Ok::<Bytes, std::convert::Infallible>(bytes)
    });
    let content_type = if table {
        Accept::TABLE
    } else if metadata {
        Accept::METADATA
    } else if protobuf {
        "application/vnd.kubernetes.protobuf;stream=watch"
    } else {
        "application/json"
    };
    let mut response = Response::new(Body::from_stream(lines));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// One watch event as a frame of a protobuf watch stream.
fn protobuf_watch_frame(event: &WatchEvent) -> Vec<u8> {
    let (kind, object) = event.parts();
    let encoded = match event {
        WatchEvent::Error(_) => Ok(konverge_protobuf::encode_status(object)),
        _ => konverge_protobuf::encode(object),
    };
    match encoded {
        Ok(body) => konverge_protobuf::watch_frame(kind, &body),
        Err(e) => konverge_protobuf::watch_frame(
            "ERROR",
            &konverge_protobuf::encode_status(
                &ApiError::internal(format!("encoding a watch event: {e}")).to_status(),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::{Stream, StreamExt};
    use konverge_store::{KvStore, MemStore};

    use super::*;

    #[test]
    fn json_is_indented_as_go_indents_it() {
        let compact = br#"{"kind":"Status","metadata":{},"details":{"causes":[{"field":"a,b","message":"x: \"y\" {z}"}]},"items":[]}"#;
        let expected = r#"{
  "kind": "Status",
  "metadata": {},
  "details": {
    "causes": [
      {
        "field": "a,b",
        "message": "x: \"y\" {z}"
      }
    ]
  },
  "items": []
}"#;
        assert_eq!(String::from_utf8(indent_json(compact)).unwrap(), expected);
        assert_eq!(indent_json(b"{}\n"), b"{}");
    }
    use crate::registry::{ListOptions, Registry, WatchOptions};
    use crate::resources::Catalog;

    /// A pod with everything whose order Go fixes: labels, annotations, owner references,
    /// managed fields, spec and status.
    fn pod(phase: &str) -> Value {
        json!({
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.7"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]},
            "metadata": {
                "uid": "8f1d", "name": "web-1", "namespace": "default",
                "creationTimestamp": "2026-11-27T17:00:00Z",
                "labels": {"pod-template-hash": "7d9", "app": "web"},
                "annotations": {"z/last": "1", "a/first": "\"quoted\" ünïcode"},
                "ownerReferences": [{"uid": "r1", "name": "web-7d9", "kind": "ReplicaSet", "apiVersion": "apps/v1", "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"time": "2026-11-27T17:00:00Z", "operation": "Update", "manager": "kubelet", "fieldsV1": {"f:status": {"f:phase": {}}}, "fieldsType": "FieldsV1", "apiVersion": "v1", "subresource": "status"}],
                "generateName": "web-7d9-",
            },
            "kind": "Pod",
            "apiVersion": "v1",
        })
    }

    /// A watch line as the server wrote each event before the cache kept JSON.
    fn go_order_line(kind: &str, object: &Value) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Line<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            object: GoOrder<'a>,
        }
        let mut line = serde_json::to_vec(&Line {
            kind,
            object: GoOrder(object),
        })
        .expect("json");
        line.push(b'\n');
        line
    }

    /// `object` as stored (no resourceVersion), then as served at `rv`.
    fn served(object: &Value, rv: i64) -> Value {
        let mut object = object.clone();
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        object
    }

    async fn next_line(stream: &mut (impl Stream<Item = Sent> + Unpin)) -> Vec<u8> {
        let sent = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event in time")
            .expect("an open watch");
        match sent {
            Sent::Cached(cached) => cached.json_line().to_vec(),
            Sent::Decoded(event) => panic!("a decoded event: {event:?}"),
        }
    }

    #[tokio::test]
    async fn cached_watch_lines_and_list_items_are_the_bytes_go_order_writes() {
        let store: Arc<dyn KvStore> = Arc::new(MemStore::new());
        let catalog = Arc::new(Catalog::builtin());
        let registry = Registry::new(store.clone(), catalog.clone());
        let pods = catalog.get("", "v1", "pods").expect("pods");
        let key = Bytes::from(format!("{}default/web-1", pods.storage_prefix()));
        let stored = |phase: &str| Bytes::from(serde_json::to_vec(&pod(phase)).expect("json"));
        let created = store
            .put(key.clone(), stored("Pending"))
            .await
            .expect("put");

        // A list item, and a whole list, from the cache.
        let page = registry
            .list_page(&pods, Some("default"), &ListOptions::default())
            .await
            .expect("list");
        let [item] = page.items.as_slice() else {
            panic!("one item: {:?}", page.items);
        };
        let expected = served(&pod("Pending"), created);
        assert_eq!(
            item.json().map(<[u8]>::to_vec),
            Some(serde_json::to_vec(&GoOrder(&expected)).expect("json"))
        );
        let meta = json!({"resourceVersion": page.resource_version.to_string()});
        let list = list_body::json("PodList", "v1", &meta, &page.items, true)
            .expect("list json")
            .concat();
        let old_list =
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": [expected]});
        assert_eq!(
            String::from_utf8(list).expect("utf-8"),
            serde_json::to_string(&GoOrder(&old_list)).expect("json") + "\n"
        );
        // A built-in kind's items go without their type, as kube-apiserver writes them.
        let untyped = list_body::json("PodList", "v1", &meta, &page.items, false)
            .expect("list json")
            .concat();
        let mut item = expected.clone();
        item.as_object_mut().expect("object").remove("kind");
        item.as_object_mut().expect("object").remove("apiVersion");
        let untyped_list =
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": [item]});
        assert_eq!(
            String::from_utf8(untyped).expect("utf-8"),
            serde_json::to_string(&GoOrder(&untyped_list)).expect("json") + "\n"
        );

        // Watch lines: initial ADDED, MODIFIED shared from the ring, DELETED at the
        // deletion's revision; and a selector watch that sees the change as DELETED.
        let mut all = Box::pin(
            registry
                .watch_sent(
                    pods.clone(),
                    Some("default".into()),
                    WatchOptions::default(),
                )
                .await
                .expect("watch"),
        );
        let by_phase = WatchOptions {
            list: ListOptions {
                field_selector: Some("status.phase=Pending".parse().expect("selector")),
                ..ListOptions::default()
            },
            ..WatchOptions::default()
        };
        let mut pending = Box::pin(
            registry
                .watch_sent(pods.clone(), None, by_phase)
                .await
                .expect("watch"),
        );
        assert_eq!(next_line(&mut all).await, go_order_line("ADDED", &expected));
        assert_eq!(
            next_line(&mut pending).await,
            go_order_line("ADDED", &expected)
        );
        let modified = store
            .put(key.clone(), stored("Running"))
            .await
            .expect("put");
        let running = served(&pod("Running"), modified);
        assert_eq!(
            next_line(&mut all).await,
            go_order_line("MODIFIED", &running)
        );
        assert_eq!(
            next_line(&mut pending).await,
            go_order_line("DELETED", &running)
        );
        store.delete(key).await.expect("delete");
        let deleted = store.current_revision().await.expect("revision");
        assert_eq!(
            next_line(&mut all).await,
            go_order_line("DELETED", &served(&pod("Running"), deleted))
        );
    }
}
