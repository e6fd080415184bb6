//! Stale reads: answering a get or a list from an older revision, as a lagging watch cache
//! of kube-apiserver does — but only where the API allows it.
//!
//! A read may be answered from a cache that lags when it says so: `resourceVersion=0` (any
//! version), or `resourceVersion=X` with `resourceVersionMatch=NotOlderThan` (or, for a get,
//! no match at all), which is satisfied by anything from `X` on. A read without a
//! resourceVersion asks for the most recent state and always gets it from kube-apiserver
//! (a quorum read, or a cache that first catches up); so do exact reads and continued lists.
//! Those pass untouched: a controller that asks for consistency gets it.
//!
//! A stale list is the list at the older revision (`resourceVersionMatch=Exact`), so its
//! resourceVersion is that revision and a watch from it replays what came after; a stale get
//! is the object as it was at that revision, or 404 if it did not exist yet (or any more).
//! When that revision has been compacted away, the read is answered fresh.

use std::convert::Infallible;

use axum::body::Body;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use konverge_store::Revision;
use serde_json::Value;
use tower::{Service, ServiceExt};

use crate::request_info::{RequestInfo, Verb};
use crate::rule::Failure;

/// The largest list a stale get reads back (one object, at most the 3 MiB request limit).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Whether `request` lets the server answer from an older revision: a JSON get or list of a
/// resource (no subresource, no continue token) with `resourceVersion=0`, or a not-older-than
/// resourceVersion below `at`.
pub(crate) fn allows(request: &Request<Body>, info: &RequestInfo, at: Revision) -> bool {
    if request.method() != Method::GET
        || !matches!(info.verb, Some(Verb::Get | Verb::List))
        || info.subresource.is_some()
        || !wants_json(request)
    {
        return false;
    }
    let query = query_pairs(request.uri());
    let param = |key: &str| {
        query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    if param("continue").is_some_and(|c| !c.is_empty()) {
        return false;
    }
    let Some(rv) = param("resourceVersion").filter(|rv| !rv.is_empty()) else {
        // The most recent state: always fresh.
        return false;
    };
    if !matches!(
        param("resourceVersionMatch"),
        None | Some("" | "NotOlderThan")
    ) {
        return false;
    }
    match rv.parse::<Revision>() {
        Ok(0) => true,
        // Not older than `rv`: `at` is older still, so `rv` itself is the stalest answer
        // allowed; `rv` at or above `at` leaves nothing to be stale about.
        Ok(rv) => rv < at,
        Err(_) => false,
    }
}

/// Answers the read `parts` describes as of `at` (or as of the resourceVersion it asked for,
/// if that is newer), through `inner`.
pub(crate) async fn serve<S>(
    inner: S,
    parts: Parts,
    info: &RequestInfo,
    at: Revision,
) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
{
    let query = query_pairs(&parts.uri);
    let requested = query
        .iter()
        .find(|(k, _)| k == "resourceVersion")
        .and_then(|(_, v)| v.parse::<Revision>().ok())
        .unwrap_or(0);
    let at = at.max(requested);
    let answer = match info.verb {
        Some(Verb::List) => {
            let uri = with_query(&parts.uri, parts.uri.path(), exact(query, at, None));
            call(inner.clone(), &parts, uri).await
        }
        _ => {
            let name = info.name.clone().unwrap_or_default();
            let path = parts.uri.path();
            let collection = path.rsplit_once('/').map_or(path, |(c, _)| c);
            let uri = with_query(&parts.uri, collection, exact(query, at, Some(&name)));
            let list = call(inner.clone(), &parts, uri).await;
            if list.status() == StatusCode::OK {
                one_item(list, info, &name).await
            } else {
                list
            }
        }
    };
    if answer.status() == StatusCode::GONE {
        // Compacted away: nothing that old is left to serve.
        return call_request(inner, Request::from_parts(parts, Body::empty())).await;
    }
    answer
}

/// The query of a read at exactly `at`, for one object if `name` is given.
fn exact(
    mut query: Vec<(String, String)>,
    at: Revision,
    name: Option<&str>,
) -> Vec<(String, String)> {
    query.retain(|(k, _)| k != "resourceVersion" && k != "resourceVersionMatch");
    query.push(("resourceVersion".into(), at.to_string()));
    query.push(("resourceVersionMatch".into(), "Exact".into()));
    if let Some(name) = name {
        query.retain(|(k, _)| k != "fieldSelector");
        query.push(("fieldSelector".into(), format!("metadata.name={name}")));
    }
    query
}

/// The one object of a list answered for a get, with its kind, or 404 if there is none.
async fn one_item(list: Response<Body>, info: &RequestInfo, name: &str) -> Response<Body> {
    let (parts, body) = list.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return Failure::internal_error().response(info, name);
    };
    let Ok(list) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let Some(mut item) = list["items"]
        .as_array()
        .and_then(|items| items.first())
        .cloned()
    else {
        return Failure::from_code(StatusCode::NOT_FOUND).response(info, name);
    };
    // Items of a list may leave out their kind; a get never does.
    if let Some(object) = item.as_object_mut() {
        let kind = list["kind"].as_str().unwrap_or_default();
        let kind = kind.strip_suffix("List").unwrap_or(kind);
        object.insert("kind".into(), kind.into());
        object.insert("apiVersion".into(), list["apiVersion"].clone());
    }
    let mut response = Response::new(Body::from(serde_json::to_vec(&item).unwrap_or_default()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn call<S>(inner: S, parts: &Parts, uri: Uri) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let mut request = Request::from_parts(parts.clone(), Body::empty());
    *request.uri_mut() = uri;
    call_request(inner, request).await
}

async fn call_request<S>(inner: S, request: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    match inner.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    serde_urlencoded::from_str(uri.query().unwrap_or_default()).unwrap_or_default()
}

fn with_query(uri: &Uri, path: &str, query: Vec<(String, String)>) -> Uri {
    let query = serde_urlencoded::to_string(query).unwrap_or_default();
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = format!("{path}?{query}").parse().ok();
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// JSON is what the request accepts (no `Accept`, `*/*`, or `application/json` without the
/// `as=Table` or `as=PartialObjectMetadata` forms).
fn wants_json(request: &Request<Body>) -> bool {
    let Some(accept) = request.headers().get(header::ACCEPT) else {
        return true;
    };
    let accept = accept.to_str().unwrap_or_default();
    !accept.contains("as=") && (accept.contains("application/json") || accept.contains("*/*"))
}
