//! Which request is this: parsing a URL path into a [`Route`], as kube-apiserver's request
//! info does.

use std::sync::Arc;

use crate::error::{ApiError, Result};
use crate::resources::{Catalog, ResourceType};

/// A parsed request path.
#[derive(Debug, Clone)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/livez`, `/readyz`, and one of their checks (`/readyz/etcd`).
    Health(&'static str, Option<String>),
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`.
    GroupVersion(String, String),
    /// `/openapi/v3` and `/openapi/v3/{path}`.
    OpenApiV3(Option<String>),
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/metrics`.
    Metrics,
    /// `/.well-known/openid-configuration`: ServiceAccount issuer discovery.
    OpenIdConfiguration,
    /// `/openid/v1/jwks`: the keys ServiceAccount tokens are signed with.
    Jwks,
    /// A resource path.
    Resource(ResourceRoute),
}

/// A request for a resource, a collection, or a subresource.
#[derive(Debug, Clone)]
pub struct ResourceRoute {
    /// The resource.
    pub rt: Arc<ResourceType>,
    /// The namespace in the path (for namespaced resources).
    pub namespace: Option<String>,
    /// The object name, for requests about one object.
    pub name: Option<String>,
    /// `status`, `scale`, `finalize`.
    pub subresource: Option<String>,
    /// The deprecated `/watch/` path prefix was used.
    pub watch_path: bool,
}

fn decode_segment(segment: &str) -> Result<String> {
    konverge_apimachinery::escape::percent_decode(segment).map_err(|e| match e {
        konverge_apimachinery::escape::EscapeError::NotUtf8(_) => {
            ApiError::bad_request("path is not UTF-8")
        }
        other => ApiError::bad_request(other.to_string()),
    })
}

/// The check a health path names (`poststarthook/rbac/bootstrap-roles` spans segments).
fn check(rest: &[&str]) -> Option<String> {
    (!rest.is_empty()).then(|| rest.join("/"))
}

/// Parses `path` against the served resources.
pub fn parse(path: &str, catalog: &Catalog) -> Result<Route> {
    let parts: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode_segment)
        .collect::<Result<_>>()?;
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["healthz", rest @ ..] => return Ok(Route::Health("healthz", check(rest))),
        ["livez", rest @ ..] => return Ok(Route::Health("livez", check(rest))),
        ["readyz", rest @ ..] => return Ok(Route::Health("readyz", check(rest))),
        ["api"] => return Ok(Route::CoreVersions),
        ["apis"] => return Ok(Route::Groups),
        ["apis", group] => return Ok(Route::Group(group.to_string())),
        ["api", version] => return Ok(Route::GroupVersion(String::new(), version.to_string())),
        ["apis", group, version] => {
            return Ok(Route::GroupVersion(group.to_string(), version.to_string()));
        }
        ["openapi", "v3"] => return Ok(Route::OpenApiV3(None)),
        ["openapi", "v3", rest @ ..] => return Ok(Route::OpenApiV3(Some(rest.join("/")))),
        ["openapi", "v2"] => return Ok(Route::OpenApiV2),
        ["metrics"] => return Ok(Route::Metrics),
        [".well-known", "openid-configuration"] => return Ok(Route::OpenIdConfiguration),
        ["openid", "v1", "jwks"] => return Ok(Route::Jwks),
        _ => {}
    }
    let (group, version, mut rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_route()),
    };
    let mut watch_path = false;
    if rest.first() == Some(&"watch") {
        watch_path = true;
        rest = &rest[1..];
    }
    let mut namespace = None;
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = Some(rest[1].to_string());
        if rest.len() > 2 && rest[2] != "status" && rest[2] != "finalize" {
            rest = &rest[2..];
        }
    }
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
        _ => return Err(ApiError::no_route()),
    };
    let rt = catalog
        .get(group, version, resource)
        .ok_or_else(ApiError::no_route)?;
    if !rt.namespaced {
        // `/api/v1/namespaces/{name}`: the namespace segment names the object itself.
        namespace = None;
    }
    if let Some(sub) = subresource
        && rt.subresource(sub).is_none()
    {
        return Err(ApiError::no_route());
    }
    Ok(Route::Resource(ResourceRoute {
        rt,
        namespace,
        name: name.map(String::from),
        subresource: subresource.map(String::from),
        watch_path,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(path: &str) -> ResourceRoute {
        match parse(path, &Catalog::builtin()) {
            Ok(Route::Resource(r)) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn paths_parse_like_kube_apiserver() {
        let r = resource("/api/v1/namespaces/default/configmaps/x");
        assert_eq!(
            (
                r.rt.plural.as_str(),
                r.namespace.as_deref(),
                r.name.as_deref()
            ),
            ("configmaps", Some("default"), Some("x"))
        );
        let r = resource("/api/v1/configmaps");
        assert_eq!((r.namespace.as_deref(), r.name.as_deref()), (None, None));
        let r = resource("/api/v1/namespaces/kube-system");
        assert_eq!(
            (
                r.rt.plural.as_str(),
                r.namespace.as_deref(),
                r.name.as_deref()
            ),
            ("namespaces", None, Some("kube-system"))
        );
        let r = resource("/api/v1/namespaces/x/status");
        assert_eq!(
            (
                r.rt.plural.as_str(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            ("namespaces", Some("x"), Some("status"))
        );
        let r = resource("/apis/apps/v1/namespaces/d/deployments/web/scale");
        assert_eq!(r.subresource.as_deref(), Some("scale"));
        let r = resource("/api/v1/watch/namespaces/d/pods");
        assert!(r.watch_path);
        let r = resource("/api/v1/nodes/n%3A1");
        assert_eq!(r.name.as_deref(), Some("n:1"));
        assert!(matches!(parse("/api/v1/nope", &Catalog::builtin()), Err(e) if e.code == 404));
        assert!(
            matches!(parse("/api/v1/namespaces/d/configmaps/x/status", &Catalog::builtin()), Err(e) if e.code == 404)
        );
        assert!(
            matches!(parse("/apis/apps/v1", &Catalog::builtin()), Ok(Route::GroupVersion(g, v)) if g == "apps" && v == "v1")
        );
    }
}
