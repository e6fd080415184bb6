//! Where a request goes: the [`Route`] its [`RequestInfo`] (made once, at the edge) names
//! among the served resources and the server's own paths.

use std::sync::Arc;

use konverge_apimachinery::request_info::RequestInfo;

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
    /// A path under a group-version an aggregated API server serves
    /// (`/apis/{group}/{version}...`), passed to it.
    Remote(Arc<crate::aggregator::Remote>),
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

/// The check a health path names (`poststarthook/rbac/bootstrap-roles` spans segments).
fn check(rest: &[&str]) -> Option<String> {
    (!rest.is_empty()).then(|| rest.join("/"))
}

/// The route of a request, from what its [`RequestInfo`] says and the served resources.
pub fn of_request(info: &RequestInfo, catalog: &Catalog) -> Result<Route> {
    if !info.is_resource_request {
        let parts: Vec<&str> = info.path.split('/').filter(|s| !s.is_empty()).collect();
        return match parts.as_slice() {
            ["version"] => Ok(Route::Version),
            ["healthz", rest @ ..] => Ok(Route::Health("healthz", check(rest))),
            ["livez", rest @ ..] => Ok(Route::Health("livez", check(rest))),
            ["readyz", rest @ ..] => Ok(Route::Health("readyz", check(rest))),
            ["api"] => Ok(Route::CoreVersions),
            ["apis"] => Ok(Route::Groups),
            ["apis", group] => Ok(Route::Group(group.to_string())),
            ["api", version] => Ok(Route::GroupVersion(String::new(), version.to_string())),
            ["apis", group, version] => {
                Ok(Route::GroupVersion(group.to_string(), version.to_string()))
            }
            ["openapi", "v3"] => Ok(Route::OpenApiV3(None)),
            ["openapi", "v3", rest @ ..] => Ok(Route::OpenApiV3(Some(rest.join("/")))),
            ["openapi", "v2"] => Ok(Route::OpenApiV2),
            ["metrics"] => Ok(Route::Metrics),
            [".well-known", "openid-configuration"] => Ok(Route::OpenIdConfiguration),
            ["openid", "v1", "jwks"] => Ok(Route::Jwks),
            _ => Err(ApiError::no_route()),
        };
    }
    // The deprecated `/proxy/` prefix is not served; paths below a subresource neither.
    if info.verb == "proxy" || info.parts.len() > 3 {
        return Err(ApiError::no_route());
    }
    let rt = catalog
        .get(&info.api_group, &info.api_version, &info.resource)
        .ok_or_else(ApiError::no_route)?;
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    // `/api/v1/namespaces/{name}`: the namespace segment names a cluster-scoped object.
    let namespace = if rt.namespaced {
        text(&info.namespace)
    } else {
        None
    };
    // The name comes from the path only (a list's field selector may name one too).
    let name = info.parts.get(1).cloned();
    let subresource = text(&info.subresource);
    if let Some(sub) = &subresource
        && rt.subresource(sub).is_none()
    {
        return Err(ApiError::no_route());
    }
    Ok(Route::Resource(ResourceRoute {
        rt,
        namespace,
        name,
        subresource,
        watch_path: info.watch_path,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(path: &str) -> Result<Route> {
        let info = RequestInfo::parse("GET", path, None).expect("parses");
        of_request(&info, &Catalog::builtin())
    }

    fn resource(path: &str) -> ResourceRoute {
        match parse(path) {
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
        assert!(matches!(parse("/api/v1/nope"), Err(e) if e.code == 404));
        assert!(
            matches!(parse("/api/v1/namespaces/d/configmaps/x/status"), Err(e) if e.code == 404)
        );
        assert!(
            matches!(parse("/apis/apps/v1"), Ok(Route::GroupVersion(g, v)) if g == "apps" && v == "v1")
        );
    }
}
