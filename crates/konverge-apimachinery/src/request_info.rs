//! Which request this is — verb, API group and version, namespace, resource, subresource,
//! name — read from its method, path and query as kube-apiserver's `RequestInfoFactory`
//! reads them, before authentication, authorization, audit and routing look at it.
//!
//! The one reading of a request: the API server makes it once at its edge and hands it down
//! (authorization attributes, audit, routing), and the testkit's request log reads requests
//! the same way.

use crate::escape::{EscapeError, percent_decode};
use crate::selector::{FieldOperator, FieldSelector};

/// Why a request cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestInfoError {
    /// The path does not percent-decode (a bad escape, or bytes that are not UTF-8).
    #[error(transparent)]
    Escape(#[from] EscapeError),
    /// `/api/v1/watch` or `/api/v1/proxy` with nothing after the verb (kube's words, with
    /// the request's URL).
    #[error("unable to determine kind and namespace from url, {0}")]
    NoKind(String),
}

/// A request, as kube-apiserver's request info describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Whether the request is about a resource (`/api/v1/...`, `/apis/<group>/<version>/...`
    /// with at least a resource) rather than a path (discovery, `/version`, `/healthz`, ...).
    pub is_resource_request: bool,
    /// The path, decoded.
    pub path: String,
    /// For resource requests `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection` or `proxy`; for the others the HTTP method in lower case.
    pub verb: String,
    /// `api` or `apis` (resource requests only).
    pub api_prefix: String,
    /// The API group, empty for the core group.
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The namespace in the path (`/namespaces/<ns>/...`, and `/api/v1/namespaces/<ns>`
    /// itself), empty otherwise.
    pub namespace: String,
    /// The resource's plural name.
    pub resource: String,
    /// The subresource (`status`, `scale`, `log`), if any.
    pub subresource: String,
    /// The object's name: from the path, or for a list or watch from a `fieldSelector` that
    /// requires `metadata.name` to be one name.
    pub name: String,
    /// The path's segments from the resource on (`resource/name/subresource/...`).
    pub parts: Vec<String>,
    /// The deprecated `/watch/` path prefix was used (kube's routes then watch whatever the
    /// query says).
    pub watch_path: bool,
}

/// Verbs that come as the path's first segment after the version.
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];

/// The namespace's own subresources (`/api/v1/namespaces/x/status`).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl RequestInfo {
    /// Reads a request: `method` (`GET`), `path` as sent (percent-encoded), `query` without
    /// its `?`.
    pub fn parse(method: &str, path: &str, query: Option<&str>) -> Result<Self, RequestInfoError> {
        let decoded = percent_decode(path)?;
        let mut info = RequestInfo {
            path: decoded.clone(),
            verb: method.to_lowercase(),
            ..RequestInfo::default()
        };
        let trimmed = decoded.trim_matches('/');
        let all: Vec<&str> = if trimmed.is_empty() {
            Vec::new()
        } else {
            trimmed.split('/').collect()
        };
        // Resource paths have at least three segments: /api/v1/<resource>.
        if all.len() < 3 || !matches!(all[0], "api" | "apis") {
            return Ok(info);
        }
        let mut parts = &all[1..];
        if all[0] == "apis" {
            if all.len() < 4 {
                return Ok(info);
            }
            info.api_group = parts[0].to_string();
            parts = &parts[1..];
        }
        info.api_prefix = all[0].to_string();
        info.is_resource_request = true;
        info.api_version = parts[0].to_string();
        parts = &parts[1..];
        if SPECIAL_VERBS.contains(&parts[0]) {
            if parts.len() < 2 {
                let url = match query {
                    Some(query) => format!("{path}?{query}"),
                    None => path.to_string(),
                };
                return Err(RequestInfoError::NoKind(url));
            }
            info.verb = parts[0].to_string();
            info.watch_path = parts[0] == "watch";
            parts = &parts[1..];
        } else {
            info.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_string();
        }
        if parts[0] == "namespaces" && parts.len() > 1 {
            info.namespace = parts[1].to_string();
            // Anything after a namespace's name but its own subresources is a resource in it.
            if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
                parts = &parts[2..];
            }
        }
        info.parts = parts.iter().map(|p| p.to_string()).collect();
        if parts.len() >= 3 && info.verb != "proxy" {
            info.subresource = parts[2].to_string();
        }
        if parts.len() >= 2 {
            info.name = parts[1].to_string();
        }
        info.resource = parts[0].to_string();
        if info.name.is_empty() && info.verb == "get" {
            let (watch, name) = list_options(query);
            info.verb = if watch { "watch" } else { "list" }.to_string();
            if let Some(name) = name {
                info.name = name;
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".into();
        }
        Ok(info)
    }

    /// The resource as errors name it: `configmaps`, `deployments.apps`.
    pub fn qualified_resource(&self) -> String {
        if self.api_group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.api_group)
        }
    }
}

/// What a list's query says of the verb and the name: whether it watches (the first `watch`
/// value, as kube's parameter codec reads booleans), and the name its `fieldSelector` requires
/// `metadata.name` to be, if that is a valid path segment. A field selector that does not
/// parse names nothing.
fn list_options(query: Option<&str>) -> (bool, Option<String>) {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.unwrap_or_default()).unwrap_or_default();
    let first = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let watch = first("watch").is_some_and(crate::query::parse_bool);
    let name = first("fieldSelector")
        .and_then(|selector| FieldSelector::parse(selector).ok())
        .and_then(|selector| {
            selector
                .requirements()
                .iter()
                .find(|r| r.field() == "metadata.name" && r.operator() == FieldOperator::Equals)
                .map(|r| r.value().to_string())
        })
        .filter(|name| crate::names::path_segment_name_errors(name).is_empty());
    (watch, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, uri: &str) -> RequestInfo {
        let (path, query) = match uri.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (uri, None),
        };
        RequestInfo::parse(method, path, query).expect("parses")
    }

    /// (verb, group, version, namespace, resource, subresource, name).
    fn summary(i: &RequestInfo) -> (&str, &str, &str, &str, &str, &str, &str) {
        (
            &i.verb,
            &i.api_group,
            &i.api_version,
            &i.namespace,
            &i.resource,
            &i.subresource,
            &i.name,
        )
    }

    #[test]
    fn requests_read_as_kubes_request_info_factory_reads_them() {
        // The cases of kube's request info tests, and the corners konverge's clients meet.
        let cases = [
            (
                "GET",
                "/api/v1/namespaces",
                ("list", "", "v1", "", "namespaces", "", ""),
            ),
            (
                "GET",
                "/api/v1/namespaces/other",
                ("get", "", "v1", "other", "namespaces", "", "other"),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/pods",
                ("list", "", "v1", "other", "pods", "", ""),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/pods/foo",
                ("get", "", "v1", "other", "pods", "", "foo"),
            ),
            (
                "HEAD",
                "/api/v1/namespaces/other/pods/foo",
                ("get", "", "v1", "other", "pods", "", "foo"),
            ),
            (
                "GET",
                "/api/v1/pods",
                ("list", "", "v1", "", "pods", "", ""),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/pods/foo/status",
                ("get", "", "v1", "other", "pods", "status", "foo"),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/status",
                ("get", "", "v1", "other", "namespaces", "status", "other"),
            ),
            (
                "PUT",
                "/api/v1/namespaces/other/finalize",
                (
                    "update",
                    "",
                    "v1",
                    "other",
                    "namespaces",
                    "finalize",
                    "other",
                ),
            ),
            (
                "GET",
                "/api/v1/watch/pods",
                ("watch", "", "v1", "", "pods", "", ""),
            ),
            (
                "GET",
                "/api/v1/pods?watch=true",
                ("watch", "", "v1", "", "pods", "", ""),
            ),
            (
                "GET",
                "/api/v1/pods?watch=True",
                ("watch", "", "v1", "", "pods", "", ""),
            ),
            (
                "GET",
                "/api/v1/pods?watch=false",
                ("list", "", "v1", "", "pods", "", ""),
            ),
            (
                "GET",
                "/api/v1/watch/namespaces/other/pods",
                ("watch", "", "v1", "other", "pods", "", ""),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3Dfoo",
                ("list", "", "v1", "other", "pods", "", "foo"),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/pods?watch=1&fieldSelector=metadata.name%3D%3Dfoo",
                ("watch", "", "v1", "other", "pods", "", "foo"),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%21%3Dfoo",
                ("list", "", "v1", "other", "pods", "", ""),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3D..",
                ("list", "", "v1", "other", "pods", "", ""),
            ),
            (
                "POST",
                "/api/v1/namespaces/other/pods",
                ("create", "", "v1", "other", "pods", "", ""),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/other/pods",
                ("deletecollection", "", "v1", "other", "pods", "", ""),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/other/pods/foo",
                ("delete", "", "v1", "other", "pods", "", "foo"),
            ),
            (
                "PATCH",
                "/apis/apps/v1/namespaces/other/deployments/web/scale",
                (
                    "patch",
                    "apps",
                    "v1",
                    "other",
                    "deployments",
                    "scale",
                    "web",
                ),
            ),
            (
                "GET",
                "/api/v1/proxy/namespaces/other/pods/foo/a/b",
                ("proxy", "", "v1", "other", "pods", "", "foo"),
            ),
            (
                "GET",
                "/api/v1/namespaces/other/pods/foo/proxy/a/b",
                ("get", "", "v1", "other", "pods", "proxy", "foo"),
            ),
            (
                "GET",
                "/apis/example.com/v1/widgets",
                ("list", "example.com", "v1", "", "widgets", "", ""),
            ),
            (
                "GET",
                "/api/v1/namespaces/caf%C3%A9/pods",
                ("list", "", "v1", "café", "pods", "", ""),
            ),
        ];
        for (method, uri, want) in cases {
            let got = info(method, uri);
            assert!(got.is_resource_request, "{method} {uri}");
            assert_eq!(summary(&got), want, "{method} {uri}");
        }
        assert!(info("GET", "/api/v1/watch/pods").watch_path);
        assert!(!info("GET", "/api/v1/pods?watch=1").watch_path);
        assert_eq!(
            info("GET", "/apis/apps/v1/deployments").qualified_resource(),
            "deployments.apps"
        );
    }

    #[test]
    fn paths_are_not_resources_below_a_resource() {
        for (method, path, verb) in [
            ("GET", "/version", "get"),
            ("GET", "/api", "get"),
            ("GET", "/api/v1", "get"),
            ("GET", "/apis/apps", "get"),
            ("GET", "/apis/apps/v1", "get"),
            ("POST", "/healthz", "post"),
            ("GET", "/openapi/v3/apis/apps/v1", "get"),
            ("GET", "/", "get"),
        ] {
            let got = info(method, path);
            assert!(!got.is_resource_request, "{path}");
            assert_eq!(got.verb, verb, "{path}");
            assert!(got.resource.is_empty(), "{path}");
        }
    }

    #[test]
    fn a_verb_with_nothing_after_it_is_kubes_error() {
        let err = RequestInfo::parse("GET", "/api/v1/watch", Some("x=1")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unable to determine kind and namespace from url, /api/v1/watch?x=1"
        );
        assert!(matches!(
            RequestInfo::parse("GET", "/api/v1/namespaces/%zz/pods", None),
            Err(RequestInfoError::Escape(_))
        ));
    }
}
