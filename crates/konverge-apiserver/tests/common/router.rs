//! Requests to a server's router in-process (no client in between, so nothing is retried):
//! as the server's admin, or as a user it impersonates.

use std::sync::Arc;

use konverge_apiserver::ApiServer;
use serde_json::Value;

/// A request to `server`'s router, as `user` when given (impersonated by the admin): status,
/// `Warning` headers, and the body (`null` when it is not JSON).
pub(crate) async fn send(
    server: &Arc<ApiServer>,
    method: &str,
    path: &str,
    user: Option<&str>,
    body: Option<Value>,
) -> (u16, Vec<String>, Value) {
    use tower::ServiceExt;
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    if let Some(user) = user {
        request = request.header("impersonate-user", user);
    }
    let body = body.map_or_else(Vec::new, |b| serde_json::to_vec(&b).expect("json"));
    let request = request.body(axum::body::Body::from(body)).expect("request");
    let response = server.router().oneshot(request).await.expect("infallible");
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .collect();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (
        code,
        warnings,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}
