//! Requests under a remote group-version, passed to its server as kube-aggregator's proxy
//! handler passes them.

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::{Aggregator, Remote};
use crate::auth::user::UserInfo;
use crate::webhook::{CallError, ServiceReference, client_tls, connect};

/// Headers of one hop only, never passed on (Go's `httputil.ReverseProxy`).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Go's `http.Error`: the text and a newline, as plain text.
pub(crate) fn plain_error(code: StatusCode, text: &str) -> Response {
    let mut response = Response::new(Body::from(format!("{text}\n")));
    *response.status_mut() = code;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Sets the front proxy's user headers (client-go's `SetAuthProxyHeaders`), after removing
/// any a client sent.
pub(crate) fn set_user_headers(headers: &mut HeaderMap, user: &UserInfo) {
    let stale: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("x-remote-"))
        .cloned()
        .collect();
    for name in stale {
        headers.remove(name);
    }
    if let Ok(value) = HeaderValue::from_str(&user.name) {
        headers.insert("x-remote-user", value);
    }
    for group in &user.groups {
        if let Ok(value) = HeaderValue::from_str(group) {
            headers.append("x-remote-group", value);
        }
    }
    for (key, values) in &user.extra {
        let Ok(name) =
            HeaderName::from_bytes(format!("x-remote-extra-{}", escape_extra_key(key)).as_bytes())
        else {
            continue;
        };
        for value in values {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(name.clone(), value);
            }
        }
    }
}

/// An extra's key as a header name carries it: percent-encoded as Go's `url.PathEscape`
/// (what `SetAuthProxyHeaders` uses), so `/` and other bytes header names cannot hold survive.
fn escape_extra_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        let kept = byte.is_ascii_alphanumeric()
            || matches!(
                byte,
                b'-' | b'_' | b'.' | b'~' | b'$' | b'&' | b'+' | b'=' | b':' | b'@'
            );
        if kept {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl Aggregator {
    /// Passes `req`, made by `user`, to `remote`'s server and answers what it answers
    /// (streamed: a watch goes on as long as the server's does). Without an `Available`
    /// APIService, or an endpoint to send it to, 503 `service unavailable`.
    pub async fn proxy(&self, remote: &Remote, user: &UserInfo, req: Request) -> Response {
        if !remote.available {
            return plain_error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
        }
        let service = ServiceReference {
            namespace: remote.namespace.clone(),
            name: remote.service.clone(),
            path: None,
            port: remote.port,
        };
        let addr = match self.services.resolve(&service, self.lister.as_ref()).await {
            Ok(addr) => addr,
            Err(e) => {
                tracing::warn!(error = %e, api_service = %remote.name, "resolving an aggregated API server failed");
                return plain_error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
            }
        };
        let tls = match client_tls(
            remote.ca_bundle.as_deref(),
            remote.insecure,
            Some(self.front_proxy.identity()),
        ) {
            Ok(tls) => tls,
            Err(e) => return plain_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        };
        let mut send = match connect::<Body>(addr, &remote.server_name(), tls).await {
            Ok(send) => send,
            Err(e) => return unreachable_error(&e),
        };
        let (mut parts, body) = req.into_parts();
        let path_and_query = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        parts.uri = match path_and_query.parse() {
            Ok(uri) => uri,
            Err(_) => return plain_error(StatusCode::BAD_REQUEST, "bad request path"),
        };
        let headers = &mut parts.headers;
        for name in HOP_BY_HOP {
            headers.remove(name);
        }
        // Authentication and impersonation are done: what proves them goes no further.
        headers.remove(header::AUTHORIZATION);
        let impersonation: Vec<HeaderName> = headers
            .keys()
            .filter(|name| name.as_str().starts_with("impersonate-"))
            .cloned()
            .collect();
        for name in impersonation {
            headers.remove(name);
        }
        set_user_headers(headers, user);
        if let Ok(host) = HeaderValue::from_str(&addr.to_string()) {
            headers.insert(header::HOST, host);
        }
        parts.version = http::Version::HTTP_11;
        let answer = match send.send_request(Request::from_parts(parts, body)).await {
            Ok(answer) => answer,
            Err(e) => return unreachable_error(&CallError::Http(e.to_string())),
        };
        let (mut parts, incoming) = answer.into_parts();
        for name in HOP_BY_HOP {
            parts.headers.remove(name);
        }
        Response::from_parts(parts, Body::new(incoming))
    }
}

/// kube-aggregator's answer when its server cannot be reached: 503 with the error.
fn unreachable_error(error: &CallError) -> Response {
    plain_error(StatusCode::SERVICE_UNAVAILABLE, &error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_headers_are_client_gos() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", HeaderValue::from_static("mallory"));
        headers.insert("x-remote-extra-forged", HeaderValue::from_static("x"));
        let mut user = UserInfo::new("alice", &["devs", "system:authenticated"]);
        user.extra.insert(
            "authentication.kubernetes.io/credential-id".into(),
            vec!["X509SHA256=ab".into()],
        );
        set_user_headers(&mut headers, &user);
        assert_eq!(headers["x-remote-user"], "alice");
        let groups: Vec<&HeaderValue> = headers.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["devs", "system:authenticated"]);
        assert!(headers.get("x-remote-extra-forged").is_none());
        assert_eq!(
            headers["x-remote-extra-authentication.kubernetes.io%2Fcredential-id"],
            "X509SHA256=ab"
        );
    }

    #[test]
    fn errors_are_gos_plain_text() {
        let response = plain_error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }
}
