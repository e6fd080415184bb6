//! `/healthz`, `/livez` and `/readyz`, as kube-apiserver serves them: named checks, one path
//! each (`/readyz/etcd`), `?verbose` listing every check, `?exclude=` skipping some.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::ApiServer;
use crate::error::{ApiError, Result};

/// The start-up work the server has done once it serves: kube-apiserver's post-start hooks
/// that have a counterpart here, and its boot check `autoregister-completion`, named and
/// ordered as a kube-apiserver 1.33.1 lists them in `/readyz?verbose` (the aggregator's in
/// the order kube-aggregator adds them). Left out: the aggregator's OpenAPI controllers
/// (`apiservice-openapi-controller`, `apiservice-openapiv3-controller`): aggregated API
/// servers' OpenAPI is not merged into the server's.
const POST_START_HOOKS: [&str; 27] = [
    "poststarthook/start-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers",
    "poststarthook/priority-and-fairness-config-consumer",
    "poststarthook/priority-and-fairness-filter",
    "poststarthook/storage-object-count-tracker-hook",
    "poststarthook/start-apiextensions-informers",
    "poststarthook/start-apiextensions-controllers",
    "poststarthook/crd-informer-synced",
    "poststarthook/start-system-namespaces-controller",
    "poststarthook/start-cluster-authentication-info-controller",
    "poststarthook/start-kube-apiserver-identity-lease-controller",
    "poststarthook/start-kube-apiserver-identity-lease-garbage-collector",
    "poststarthook/start-legacy-token-tracking-controller",
    "poststarthook/start-service-ip-repair-controllers",
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/scheduling/bootstrap-system-priority-classes",
    "poststarthook/priority-and-fairness-config-producer",
    "poststarthook/bootstrap-controller",
    "poststarthook/start-kubernetes-service-cidr-controller",
    "poststarthook/aggregator-reload-proxy-client-cert",
    "poststarthook/start-kube-aggregator-informers",
    "poststarthook/apiservice-status-local-available-controller",
    "poststarthook/apiservice-status-remote-available-controller",
    "poststarthook/apiservice-registration-controller",
    "poststarthook/apiservice-discovery-controller",
    "poststarthook/kube-apiserver-autoregistration",
    "autoregister-completion",
];

/// The checks of an endpoint, in the order kube-apiserver lists them.
fn checks(endpoint: &str) -> Vec<&'static str> {
    let mut names = vec!["ping", "log", "etcd"];
    if endpoint == "readyz" {
        names.extend(["etcd-readiness", "informer-sync"]);
    }
    names.extend(POST_START_HOOKS);
    if endpoint == "readyz" {
        names.push("shutdown");
    }
    names
}

fn text(code: StatusCode, body: String) -> Response {
    let mut response = (code, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Answers `/{endpoint}` or `/{endpoint}/{check}`.
pub(crate) async fn answer(
    server: &ApiServer,
    endpoint: &str,
    check: Option<&str>,
    query: Option<&str>,
) -> Result<Response> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))?;
    let verbose = pairs.iter().any(|(k, _)| k == "verbose");
    let excluded: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.as_str())
        .collect();
    let store_ok = server.registry().store().current_revision().await.is_ok();
    let passes = |name: &str| !matches!(name, "etcd" | "etcd-readiness") || store_ok;
    let names = checks(endpoint);
    if let Some(check) = check {
        if !names.contains(&check) {
            return Err(ApiError::no_route());
        }
        return Ok(if passes(check) {
            text(StatusCode::OK, "ok".into())
        } else {
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error: the store does not answer\n".into(),
            )
        });
    }
    let mut lines = Vec::new();
    let mut failed = false;
    for name in names {
        if excluded.contains(&name) {
            lines.push(format!("[+]{name} excluded: ok"));
        } else if passes(name) {
            lines.push(format!("[+]{name} ok"));
        } else {
            failed = true;
            lines.push(format!("[-]{name} failed: reason withheld"));
        }
    }
    if failed {
        lines.push(format!("{endpoint} check failed"));
        return Ok(text(
            StatusCode::INTERNAL_SERVER_ERROR,
            lines.join("\n") + "\n",
        ));
    }
    if !verbose {
        return Ok(text(StatusCode::OK, "ok".into()));
    }
    lines.push(format!("{endpoint} check passed"));
    Ok(text(StatusCode::OK, lines.join("\n") + "\n"))
}
