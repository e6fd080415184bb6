//! Authorization: what a request asks to do ([`Attributes`]), the [`Authorizer`] seam with
//! its implementations ([`AlwaysAllow`], RBAC), and the 403 kube-apiserver answers with.
//!
//! As in kube-apiserver, members of `system:masters` may do anything before any authorizer
//! is asked; after that the configured authorizer decides, and a request nobody allows is
//! forbidden.

use std::sync::Arc;

use konverge_apimachinery::request_info::RequestInfo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::user::{SYSTEM_MASTERS, UserInfo};
use crate::error::{ApiError, Target};

/// What a request asks to do, as kube-apiserver's `RequestInfo` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    /// Who asks.
    pub user: UserInfo,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `impersonate`, ...; for a request that is not about a resource, the HTTP method in
    /// lower case.
    pub verb: String,
    /// Whether the request is about a resource (else about a path).
    pub resource_request: bool,
    /// The namespace (a namespace object's own name for `namespaces/x`).
    pub namespace: String,
    /// The API group.
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource.
    pub subresource: String,
    /// The object's name (from the path, or a list's or watch's `metadata.name=` field
    /// selector).
    pub name: String,
    /// The path of a request not about a resource.
    pub path: String,
}

impl Attributes {
    /// A resource request by `user`.
    pub fn resource(
        user: &UserInfo,
        verb: &str,
        api_group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            user: user.clone(),
            verb: verb.into(),
            resource_request: true,
            namespace: namespace.into(),
            api_group: api_group.into(),
            resource: resource.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }
}

impl Attributes {
    /// What `request` asks `user` to do (kube's `RequestInfo` made into authorizer
    /// attributes).
    pub fn of_request(user: &UserInfo, request: &RequestInfo) -> Attributes {
        Attributes {
            user: user.clone(),
            verb: request.verb.clone(),
            resource_request: request.is_resource_request,
            namespace: request.namespace.clone(),
            api_group: request.api_group.clone(),
            api_version: request.api_version.clone(),
            resource: request.resource.clone(),
            subresource: request.subresource.clone(),
            name: request.name.clone(),
            path: request.path.clone(),
        }
    }
}

/// What an authorizer says about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, and why.
    Allow(String),
    /// Denied outright, and why.
    Deny(String),
    /// Neither: the next authorizer decides; the reason is reported if nobody allows.
    NoOpinion(String),
}

impl Decision {
    /// Whether it allows.
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    /// The reason given.
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow(r) | Decision::Deny(r) | Decision::NoOpinion(r) => r,
        }
    }
}

/// One rule of a Role or ClusterRole (`rbac.authorization.k8s.io/v1` `PolicyRule`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// `verbs`.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// `apiGroups`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// `resources`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// `resourceNames`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// `nonResourceURLs`.
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

/// The rules a user has in a namespace (a `SelfSubjectRulesReview`'s status).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleReview {
    /// Rules about resources.
    pub resource_rules: Vec<PolicyRule>,
    /// Rules about paths.
    pub non_resource_rules: Vec<PolicyRule>,
    /// Whether the list may be missing rules.
    pub incomplete: bool,
    /// Why, if it is incomplete.
    pub evaluation_error: String,
}

impl RuleReview {
    /// Rules split as the review lists them: a rule with resources is a resource rule, one
    /// with URLs a non-resource rule.
    pub fn from_rules(rules: Vec<PolicyRule>, errors: Vec<String>) -> RuleReview {
        let mut review = RuleReview::default();
        for rule in rules {
            if !rule.resources.is_empty() {
                review.resource_rules.push(PolicyRule {
                    non_resource_urls: Vec::new(),
                    ..rule.clone()
                });
            }
            if !rule.non_resource_urls.is_empty() {
                review.non_resource_rules.push(PolicyRule {
                    verbs: rule.verbs,
                    non_resource_urls: rule.non_resource_urls,
                    ..PolicyRule::default()
                });
            }
        }
        if !errors.is_empty() {
            review.evaluation_error = errors.join(", ");
        }
        review
    }

    /// The `status` of a `SelfSubjectRulesReview`.
    pub fn to_json(&self) -> Value {
        let resource_rules: Vec<Value> = self
            .resource_rules
            .iter()
            .map(|r| {
                let mut rule = json!({"verbs": r.verbs});
                if !r.api_groups.is_empty() {
                    rule["apiGroups"] = json!(r.api_groups);
                }
                if !r.resources.is_empty() {
                    rule["resources"] = json!(r.resources);
                }
                if !r.resource_names.is_empty() {
                    rule["resourceNames"] = json!(r.resource_names);
                }
                rule
            })
            .collect();
        let non_resource_rules: Vec<Value> = self
            .non_resource_rules
            .iter()
            .map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}))
            .collect();
        let mut status = json!({
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": self.incomplete,
        });
        if !self.evaluation_error.is_empty() {
            status["evaluationError"] = json!(self.evaluation_error);
        }
        status
    }
}

/// Decides whether requests may be done: the seam between the server and its authorization
/// mode, as the store is the seam below it.
#[async_trait::async_trait]
pub trait Authorizer: Send + Sync + std::fmt::Debug {
    /// Whether `request` may be done.
    async fn authorize(&self, request: &Attributes) -> Decision;

    /// The rules `user` has in `namespace`.
    async fn rules_for(&self, user: &UserInfo, namespace: &str) -> RuleReview;
}

/// Allows everything (`--authorization-mode=AlwaysAllow`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AlwaysAllow;

#[async_trait::async_trait]
impl Authorizer for AlwaysAllow {
    async fn authorize(&self, _request: &Attributes) -> Decision {
        Decision::Allow(String::new())
    }

    async fn rules_for(&self, _user: &UserInfo, _namespace: &str) -> RuleReview {
        RuleReview {
            resource_rules: vec![PolicyRule {
                verbs: vec!["*".into()],
                api_groups: vec!["*".into()],
                resources: vec!["*".into()],
                ..PolicyRule::default()
            }],
            non_resource_rules: vec![PolicyRule {
                verbs: vec!["*".into()],
                non_resource_urls: vec!["*".into()],
                ..PolicyRule::default()
            }],
            ..RuleReview::default()
        }
    }
}

/// Told of every request the server authorized and what was decided (see
/// [`ApiServerBuilder::observe_authorization`](crate::ApiServerBuilder::observe_authorization)).
pub type Observer = Arc<dyn Fn(&Attributes, &Decision) + Send + Sync>;

/// The server's authorization: `system:masters` first, then the configured authorizer.
#[derive(Clone)]
pub struct Authorization {
    authorizer: Arc<dyn Authorizer>,
    observer: Option<Observer>,
}

impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorization")
            .field("authorizer", &self.authorizer)
            .field("observed", &self.observer.is_some())
            .finish()
    }
}

impl Authorization {
    /// Authorization by `authorizer`, each decision on a request told to `observer`.
    pub fn new(authorizer: Arc<dyn Authorizer>, observer: Option<Observer>) -> Authorization {
        Authorization {
            authorizer,
            observer,
        }
    }

    /// What is said about `request`.
    pub async fn decide(&self, request: &Attributes) -> Decision {
        if request.user.in_group(SYSTEM_MASTERS) {
            return Decision::Allow(String::new());
        }
        self.authorizer.authorize(request).await
    }

    /// What is said about `request`, which a client is making: told to the observer
    /// (reviews that only ask, with [`decide`](Self::decide), are not).
    pub async fn decide_observed(&self, request: &Attributes) -> Decision {
        let decision = self.decide(request).await;
        self.observe(request, &decision);
        decision
    }

    /// Tells the observer what was decided about `request`.
    pub fn observe(&self, request: &Attributes, decision: &Decision) {
        if let Some(observer) = &self.observer {
            observer(request, decision);
        }
    }

    /// `Ok` if `request` is allowed, otherwise kube-apiserver's 403 (observed as
    /// [`decide_observed`](Self::decide_observed)).
    pub async fn check(&self, request: &Attributes) -> Result<(), ApiError> {
        match self.decide_observed(request).await {
            Decision::Allow(_) => Ok(()),
            Decision::Deny(reason) | Decision::NoOpinion(reason) => {
                Err(forbidden(request, &reason))
            }
        }
    }

    /// The rules `user` has in `namespace`.
    pub async fn rules_for(&self, user: &UserInfo, namespace: &str) -> RuleReview {
        self.authorizer.rules_for(user, namespace).await
    }
}

/// kube-apiserver's 403 for a request no authorizer allowed:
/// `configmaps is forbidden: User "x" cannot list resource "configmaps" in API group "" in the
/// namespace "y"`, the reason appended after a colon when there is one.
pub fn forbidden(request: &Attributes, reason: &str) -> ApiError {
    let mut message = forbidden_message(request)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    if !reason.is_empty() {
        message = format!("{message}: {reason}");
    }
    if !request.resource_request || request.resource.is_empty() {
        return ApiError::forbidden_plain(format!("forbidden: {message}"));
    }
    let target = Target {
        group: &request.api_group,
        resource: &request.resource,
        name: &request.name,
    };
    ApiError::forbidden(target, message)
}

fn forbidden_message(request: &Attributes) -> String {
    let user = &request.user.name;
    let verb = &request.verb;
    if !request.resource_request {
        return format!("User {user:?} cannot {verb} path {:?}", request.path);
    }
    let mut resource = request.resource.clone();
    if !request.subresource.is_empty() {
        resource = format!("{resource}/{}", request.subresource);
    }
    let group = &request.api_group;
    if request.namespace.is_empty() {
        format!(
            "User {user:?} cannot {verb} resource {resource:?} in API group {group:?} at the cluster scope"
        )
    } else {
        format!(
            "User {user:?} cannot {verb} resource {resource:?} in API group {group:?} in the namespace {:?}",
            request.namespace
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: http::Method, path: &str, query: Option<&str>) -> Attributes {
        let info = RequestInfo::parse(method.as_str(), path, query).expect("parses");
        Attributes::of_request(&UserInfo::anonymous(), &info)
    }

    #[test]
    fn requests_read_as_kube_reads_them() {
        use http::Method;
        let a = of(Method::GET, "/api/v1/namespaces/d/pods", Some("watch=true"));
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()),
            ("watch", "d", "pods")
        );
        assert!(a.resource_request);
        let a = of(
            Method::GET,
            "/api/v1/namespaces/d/configmaps",
            Some("fieldSelector=metadata.name%3Dx"),
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "x"));
        let a = of(
            Method::PUT,
            "/apis/apps/v1/namespaces/d/deployments/web/status",
            None,
        );
        assert_eq!(
            (
                a.verb.as_str(),
                a.api_group.as_str(),
                a.resource.as_str(),
                a.name.as_str(),
                a.subresource.as_str()
            ),
            ("update", "apps", "deployments", "web", "status")
        );
        let a = of(Method::GET, "/api/v1/namespaces/d", None);
        assert_eq!(
            (a.resource.as_str(), a.name.as_str(), a.namespace.as_str()),
            ("namespaces", "d", "d")
        );
        let a = of(Method::PUT, "/api/v1/namespaces/d/finalize", None);
        assert_eq!(
            (
                a.resource.as_str(),
                a.subresource.as_str(),
                a.namespace.as_str()
            ),
            ("namespaces", "finalize", "d")
        );
        let a = of(Method::DELETE, "/api/v1/namespaces/d/pods", None);
        assert_eq!(a.verb, "deletecollection");
        let a = of(Method::GET, "/api/v1/watch/namespaces/d/pods/x", None);
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "x"));
        for path in ["/api", "/api/v1", "/apis/apps/v1", "/healthz", "/version"] {
            let a = of(Method::GET, path, None);
            assert!(!a.resource_request, "{path}");
            assert_eq!(a.verb, "get");
            assert_eq!(a.path, path);
        }
    }

    #[test]
    fn forbidden_reads_as_kube_apiserver_writes_it() {
        let user = UserInfo::service_account("d", "builder", "u");
        let list = Attributes::resource(&user, "list", "", "configmaps", "d", "");
        let e = forbidden(&list, "");
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            r#"configmaps is forbidden: User "system:serviceaccount:d:builder" cannot list resource "configmaps" in API group "" in the namespace "d""#
        );
        let mut status = Attributes::resource(&user, "update", "apps", "deployments", "d", "web");
        status.subresource = "status".into();
        assert_eq!(
            forbidden(
                &status,
                "RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found"
            )
            .message,
            r#"deployments.apps "web" is forbidden: User "system:serviceaccount:d:builder" cannot update resource "deployments/status" in API group "apps" in the namespace "d": RBAC: clusterrole.rbac.authorization.k8s.io "x" not found"#
        );
        let nodes = Attributes::resource(&user, "watch", "", "nodes", "", "");
        assert!(
            forbidden(&nodes, "")
                .message
                .ends_with(r#"in API group "" at the cluster scope"#)
        );
        let path = Attributes {
            user: UserInfo::anonymous(),
            verb: "get".into(),
            path: "/api".into(),
            ..Attributes::default()
        };
        assert_eq!(
            forbidden(&path, "").message,
            r#"forbidden: User "system:anonymous" cannot get path "/api""#
        );
    }
}
