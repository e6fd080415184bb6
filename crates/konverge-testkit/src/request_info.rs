//! What a request asks for — verb, resource, namespace, name — read from its method, path
//! and query by the server's own reading ([`konverge_apimachinery::request_info`], kube's
//! `RequestInfoFactory`), with typed verbs for the testkit's request log and rules.

use std::fmt;

use http::{Method, Uri};
use konverge_apimachinery::request_info::RequestInfo as ServerRequestInfo;

/// A Kubernetes API verb, as kube-apiserver derives it from the HTTP method, the path and
/// the `watch` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// `GET` on one object (`.../configmaps/x`).
    Get,
    /// `GET` on a collection (`.../configmaps`).
    List,
    /// `GET` on a collection with `watch=true` (or `watch=1`), or under the legacy `/watch/`
    /// path prefix.
    Watch,
    /// `POST`.
    Create,
    /// `PUT`.
    Update,
    /// `PATCH`.
    Patch,
    /// `DELETE` on one object.
    Delete,
    /// `DELETE` on a collection.
    DeleteCollection,
}

impl Verb {
    /// Whether the verb changes state: create, update, patch, delete, deletecollection.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }

    /// The verb as kube-apiserver names it (`get`, `deletecollection`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one HTTP request asks for.
///
/// Requests for a resource (`/api/v1/...`, `/apis/<group>/<version>/...` below the
/// group-version) have a [`verb`](Self::verb) and a [`resource`](Self::resource); the rest
/// (discovery, `/version`, `/openapi/...`, health checks) have neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// The HTTP method.
    pub method: Method,
    /// The path, as sent (percent-encoded).
    pub path: String,
    /// The verb; `None` for a request that is not about a resource.
    pub verb: Option<Verb>,
    /// The API group, empty for the core group.
    pub group: String,
    /// The API version; empty for a request that is not about a resource.
    pub version: String,
    /// The resource's plural name (`configmaps`); `None` for a request that is not about a
    /// resource.
    pub resource: Option<String>,
    /// The subresource (`status`, `scale`, `finalize`), if any.
    pub subresource: Option<String>,
    /// The namespace in the path. `None` for cluster-scoped resources, for requests across
    /// all namespaces, and for namespaces themselves (`/api/v1/namespaces/x` names the
    /// namespace object `x`).
    pub namespace: Option<String>,
    /// The object's name: from the path, or — for a list or watch — from a `fieldSelector`
    /// of `metadata.name=<name>`, as kube-apiserver does it (so a watch of one object, as
    /// kube-rs sends it, carries the name).
    pub name: Option<String>,
}

impl RequestInfo {
    /// Reads a request's method and URI, as the server reads it
    /// ([`konverge_apimachinery::request_info`]). A request it cannot read (a bad escape:
    /// the server answers 400) is recorded with its path only.
    pub fn new(method: &Method, uri: &Uri) -> RequestInfo {
        let path = uri.path();
        let mut info = RequestInfo {
            method: method.clone(),
            path: path.to_string(),
            verb: None,
            group: String::new(),
            version: String::new(),
            resource: None,
            subresource: None,
            namespace: None,
            name: None,
        };
        let Ok(read) = ServerRequestInfo::parse(method.as_str(), path, uri.query()) else {
            return info;
        };
        let verb = match read.verb.as_str() {
            "get" => Verb::Get,
            "list" => Verb::List,
            "watch" => Verb::Watch,
            "create" => Verb::Create,
            "update" => Verb::Update,
            "patch" => Verb::Patch,
            "delete" => Verb::Delete,
            "deletecollection" => Verb::DeleteCollection,
            _ => return info,
        };
        if !read.is_resource_request {
            return info;
        }
        let text = |s: String| (!s.is_empty()).then_some(s);
        info.verb = Some(verb);
        info.group = read.api_group;
        info.version = read.api_version;
        // A namespace's own path names the object, not a namespace it is in.
        if read.resource != "namespaces" {
            info.namespace = text(read.namespace);
        }
        info.resource = text(read.resource);
        info.subresource = text(read.subresource);
        info.name = text(read.name);
        info
    }

    /// The resource as errors name it: `configmaps`, `deployments.apps`.
    pub fn qualified_resource(&self) -> String {
        let resource = self.resource.as_deref().unwrap_or("");
        if self.group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{}", self.group)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, uri: &str) -> RequestInfo {
        RequestInfo::new(&method, &uri.parse().expect("uri"))
    }

    type Summary<'a> = (
        Option<Verb>,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    );

    fn summary(i: &RequestInfo) -> Summary<'_> {
        (
            i.verb,
            i.group.as_str(),
            i.resource.as_deref(),
            i.subresource.as_deref(),
            i.namespace.as_deref(),
            i.name.as_deref(),
        )
    }

    #[test]
    fn verbs_come_from_method_path_and_watch_query() {
        use Verb::*;
        let cases: &[(Method, &str, Summary<'_>)] = &[
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps/x",
                (
                    Some(Get),
                    "",
                    Some("configmaps"),
                    None,
                    Some("default"),
                    Some("x"),
                ),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps?limit=10",
                (
                    Some(List),
                    "",
                    Some("configmaps"),
                    None,
                    Some("default"),
                    None,
                ),
            ),
            (
                Method::GET,
                "/api/v1/configmaps?watch=true&resourceVersion=5",
                (Some(Watch), "", Some("configmaps"), None, None, None),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/d/configmaps?watch=1&fieldSelector=metadata.name%3Dx",
                (
                    Some(Watch),
                    "",
                    Some("configmaps"),
                    None,
                    Some("d"),
                    Some("x"),
                ),
            ),
            (
                Method::GET,
                "/api/v1/configmaps?watch=false",
                (Some(List), "", Some("configmaps"), None, None, None),
            ),
            (
                Method::GET,
                "/api/v1/watch/namespaces/d/pods",
                (Some(Watch), "", Some("pods"), None, Some("d"), None),
            ),
            (
                Method::POST,
                "/apis/apps/v1/namespaces/d/deployments",
                (
                    Some(Create),
                    "apps",
                    Some("deployments"),
                    None,
                    Some("d"),
                    None,
                ),
            ),
            (
                Method::PUT,
                "/apis/apps/v1/namespaces/d/deployments/web/status",
                (
                    Some(Update),
                    "apps",
                    Some("deployments"),
                    Some("status"),
                    Some("d"),
                    Some("web"),
                ),
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/d/deployments/web/scale",
                (
                    Some(Patch),
                    "apps",
                    Some("deployments"),
                    Some("scale"),
                    Some("d"),
                    Some("web"),
                ),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/d/configmaps/x",
                (
                    Some(Delete),
                    "",
                    Some("configmaps"),
                    None,
                    Some("d"),
                    Some("x"),
                ),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/d/configmaps",
                (
                    Some(DeleteCollection),
                    "",
                    Some("configmaps"),
                    None,
                    Some("d"),
                    None,
                ),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/kube-system",
                (
                    Some(Get),
                    "",
                    Some("namespaces"),
                    None,
                    None,
                    Some("kube-system"),
                ),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/x/finalize",
                (
                    Some(Update),
                    "",
                    Some("namespaces"),
                    Some("finalize"),
                    None,
                    Some("x"),
                ),
            ),
            (
                Method::GET,
                "/api/v1/nodes/n%3A1",
                (Some(Get), "", Some("nodes"), None, None, Some("n:1")),
            ),
        ];
        for (method, uri, want) in cases {
            assert_eq!(summary(&info(method.clone(), uri)), *want, "{method} {uri}");
        }
    }

    #[test]
    fn discovery_and_other_paths_are_not_resource_requests() {
        for uri in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/openapi/v3/api/v1",
            "/healthz",
        ] {
            let i = info(Method::GET, uri);
            assert_eq!((i.verb, i.resource.as_deref()), (None, None), "{uri}");
            assert_eq!(i.path, uri.split('?').next().unwrap_or(uri));
        }
        assert_eq!(
            info(Method::OPTIONS, "/api/v1/configmaps").verb,
            None,
            "no verb for OPTIONS"
        );
    }

    #[test]
    fn qualified_resources_name_the_group() {
        assert_eq!(
            info(Method::GET, "/apis/apps/v1/namespaces/d/deployments/x").qualified_resource(),
            "deployments.apps"
        );
        assert_eq!(
            info(Method::GET, "/api/v1/namespaces/d/configmaps/x").qualified_resource(),
            "configmaps"
        );
    }
}
