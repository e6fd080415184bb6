//! HTTP responses for the OpenAPI endpoints, with kube-apiserver's caching behaviour
//! (k8s.io/kube-openapi `pkg/handler3/handler.go`, `pkg/handler/handler.go`):
//!
//! - every response has an `ETag` (the quoted hash of the body) and honours `If-None-Match`
//!   with `304 Not Modified`;
//! - a group-version document requested with the `hash` of its current content
//!   (`/openapi/v3/apis/apps/v1?hash=...`, the URL the index gives) is
//!   `Cache-Control: public, immutable` with an `Expires` a year ahead; with any other hash it
//!   answers `301 Moved Permanently` to the current URL;
//! - the representation follows `Accept` (`Vary: Accept`): v3 documents are JSON; v2 is JSON
//!   or gnostic protobuf.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};

use super::{Served, snapshot};
use crate::error::ApiError;
use crate::resources::Catalog;

const JSON: &str = "application/json";
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const V2_PROTOBUF_DEPRECATED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The media ranges of an `Accept` header, in order (`*/*` when there is none).
fn accepted(headers: &HeaderMap) -> Vec<String> {
    let ranges: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter(|range| {
            !range
                .split(';')
                .skip(1)
                .any(|p| p.trim().replace(' ', "") == "q=0")
        })
        .map(|range| {
            range
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|range| !range.is_empty())
        .collect();
    if ranges.is_empty() {
        vec!["*/*".into()]
    } else {
        ranges
    }
}

fn matches_json(range: &str) -> bool {
    matches!(range, "application/json" | "application/*" | "*/*")
}

/// Whether `If-None-Match` names `hash`.
fn not_modified(headers: &HeaderMap, hash: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/").trim_matches('"'))
        .any(|tag| tag == "*" || tag == hash)
}

fn set(response: &mut Response, name: header::HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, value);
    }
}

/// `200` with `served`'s body (or `304` if the client has it), typed `content_type`.
fn ok(served: &Served, content_type: &str, headers: &HeaderMap) -> Response {
    let mut response = if not_modified(headers, &served.hash) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        Response::new(Body::from(served.body.clone()))
    };
    set(&mut response, header::CONTENT_TYPE, content_type);
    set(&mut response, header::ETAG, &format!("\"{}\"", served.hash));
    set(&mut response, header::VARY, "Accept");
    response
}

fn not_acceptable(supported: &str) -> Response {
    ApiError::not_acceptable(supported).into_response()
}

/// The value of the `hash` query parameter.
fn hash_parameter(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == "hash")
        .map(|(_, value)| value)
}

/// The response to `GET /openapi/v3` (`path` `None` or empty) or `GET /openapi/v3/{path}`,
/// given the request's query string and headers.
pub fn v3_response(
    catalog: &Catalog,
    path: Option<&str>,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Response {
    let snapshot = snapshot(catalog);
    let path = path.map(|p| p.trim_matches('/')).filter(|p| !p.is_empty());
    let Some(path) = path else {
        return ok(snapshot.index_served(), JSON, headers);
    };
    let Some(document) = snapshot.document(path) else {
        return ApiError::no_route().into_response();
    };
    if !accepted(headers).iter().any(|range| matches_json(range)) {
        return not_acceptable(JSON);
    }
    let served = Served {
        body: document.body.clone(),
        hash: document.hash.clone(),
    };
    match hash_parameter(query) {
        Some(hash) if hash != document.hash => {
            let mut response = StatusCode::MOVED_PERMANENTLY.into_response();
            set(
                &mut response,
                header::LOCATION,
                &format!("/openapi/v3/{path}?hash={}", document.hash),
            );
            response
        }
        Some(_) => {
            let mut response = ok(&served, JSON, headers);
            set(&mut response, header::CACHE_CONTROL, "public, immutable");
            let expires = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_hours(24 * 365))
                .ok()
                .and_then(|t| {
                    jiff::fmt::rfc2822::DateTimePrinter::new()
                        .timestamp_to_rfc9110_string(&t)
                        .ok()
                });
            if let Some(expires) = expires {
                set(&mut response, header::EXPIRES, &expires);
            }
            response
        }
        None => ok(&served, JSON, headers),
    }
}

/// The response to `GET /openapi/v2`, given the request's headers: protobuf if the client
/// asks for it (client-go does), JSON otherwise.
pub fn v2_response(catalog: &Catalog, headers: &HeaderMap) -> Response {
    let snapshot = snapshot(catalog);
    for range in accepted(headers) {
        if range == V2_PROTOBUF || range == V2_PROTOBUF_DEPRECATED {
            return ok(&snapshot.v2().protobuf, V2_PROTOBUF, headers);
        }
        if matches_json(&range) {
            return ok(&snapshot.v2().json, JSON, headers);
        }
    }
    not_acceptable(&format!("{JSON}, {V2_PROTOBUF}"))
}
