//! The review resources: questions clients ask the server by creating an object that is
//! answered and never stored (`TokenReview`, `SelfSubjectReview`, the `SubjectAccessReview`
//! family), answered by the server's own authenticator and authorizer — so `kubectl auth
//! can-i` and `kubectl auth whoami` say what the server will do.

use serde_json::{Value, json};

use crate::ApiServer;
use crate::auth::authz::{Attributes, Decision};
use crate::auth::user::UserInfo;
use crate::error::{ApiError, Cause};
use crate::resources::Review;

/// Answers a review created by `user` in `namespace` (the path's, for the local kinds).
pub(crate) async fn answer(
    server: &ApiServer,
    user: &UserInfo,
    review: Review,
    namespace: Option<&str>,
    body: Value,
) -> Result<Value, ApiError> {
    match review {
        Review::SelfSubject => Ok(self_subject(user, body)),
        Review::Token => Ok(token(server, body).await),
        Review::SubjectAccess => subject_access(server, namespace, body).await,
        Review::SelfSubjectAccess => self_subject_access(server, user, body).await,
        Review::SelfSubjectRules => self_subject_rules(server, user, body).await,
    }
}

/// What the review's body says about its metadata: kept, with the creation timestamp
/// kube-apiserver leaves unset.
fn answered(mut body: Value, status: Value) -> Value {
    if !body.get("metadata").is_some_and(Value::is_object) {
        body["metadata"] = json!({});
    }
    crate::resources::meta::metadata_mut(&mut body)
        .entry("creationTimestamp")
        .or_insert(Value::Null);
    body["status"] = status;
    body
}

/// `SelfSubjectReview`: who the requester is.
fn self_subject(user: &UserInfo, body: Value) -> Value {
    let mut answer = answered(body, json!({"userInfo": user.to_json()}));
    crate::resources::meta::metadata_mut(&mut answer).insert(
        "creationTimestamp".into(),
        json!(crate::resources::meta::now()),
    );
    answer
}

/// `TokenReview`: whether a bearer token is one the server accepts, and whose it is.
async fn token(server: &ApiServer, body: Value) -> Value {
    let token = body
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or("");
    let audiences = server.service_account_tokens().audiences(&body);
    let status = match server
        .authenticator()
        .token(server.registry(), token, &audiences)
        .await
    {
        Some((user, audiences)) => json!({
            "authenticated": true,
            "user": user.to_json(),
            "audiences": audiences,
        }),
        None => json!({"user": {}}),
    };
    answered(body, status)
}

/// Exactly one of resourceAttributes and nonResourceAttributes, and a user or a group.
fn check_access_spec(kind: &str, body: &Value, needs_subject: bool) -> Result<(), ApiError> {
    let spec = body.get("spec").cloned().unwrap_or(Value::Null);
    let mut causes = Vec::new();
    let resource = spec.get("resourceAttributes").is_some_and(Value::is_object);
    let non_resource = spec
        .get("nonResourceAttributes")
        .is_some_and(Value::is_object);
    if resource == non_resource {
        causes.push(Cause::invalid(
            "spec.resourceAttributes",
            &Value::String(if resource { "{...}" } else { "null" }.into()),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    if needs_subject {
        let user = spec.get("user").and_then(Value::as_str).unwrap_or("");
        let groups = spec
            .get("groups")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty());
        if user.is_empty() && !groups {
            causes.push(Cause::invalid(
                "spec.user",
                &json!(""),
                "at least one of user or group must be specified",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind, "authorization.k8s.io", "", causes))
    }
}

/// The attributes a review's `spec` asks about, for `user`.
fn asked(spec: &Value, user: UserInfo) -> Attributes {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    match spec.get("resourceAttributes").filter(|v| v.is_object()) {
        Some(r) => Attributes {
            user,
            verb: text(r, "verb"),
            resource_request: true,
            namespace: text(r, "namespace"),
            api_group: text(r, "group"),
            api_version: text(r, "version"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            name: text(r, "name"),
            path: String::new(),
        },
        None => {
            let n = spec
                .get("nonResourceAttributes")
                .cloned()
                .unwrap_or(Value::Null);
            Attributes {
                user,
                verb: text(&n, "verb"),
                path: text(&n, "path"),
                ..Attributes::default()
            }
        }
    }
}

/// A `SubjectAccessReviewStatus`.
fn access_status(decision: Decision) -> Value {
    let mut status = json!({"allowed": decision.allowed()});
    if matches!(decision, Decision::Deny(_)) {
        status["denied"] = json!(true);
    }
    if !decision.reason().is_empty() {
        status["reason"] = json!(decision.reason());
    }
    status
}

/// `SubjectAccessReview` and `LocalSubjectAccessReview`: whether a user may do something.
async fn subject_access(
    server: &ApiServer,
    namespace: Option<&str>,
    body: Value,
) -> Result<Value, ApiError> {
    let kind = body["kind"]
        .as_str()
        .unwrap_or("SubjectAccessReview")
        .to_string();
    check_access_spec(&kind, &body, true)?;
    if let Some(namespace) = namespace {
        let asked = body
            .pointer("/spec/resourceAttributes/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        if asked != namespace {
            return Err(ApiError::bad_request(format!(
                "spec.resourceAttributes.namespace must match namespace: {namespace}"
            )));
        }
    }
    let spec = &body["spec"];
    let strings = |key: &str| -> Vec<String> {
        spec.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let user = UserInfo {
        name: spec["user"].as_str().unwrap_or("").to_string(),
        uid: spec["uid"].as_str().unwrap_or("").to_string(),
        groups: strings("groups"),
        extra: spec
            .get("extra")
            .and_then(|e| serde_json::from_value(e.clone()).ok())
            .unwrap_or_default(),
    };
    let decision = server.authorization().decide(&asked(spec, user)).await;
    Ok(answered(body, access_status(decision)))
}

/// `SelfSubjectAccessReview`: whether the requester may do something.
async fn self_subject_access(
    server: &ApiServer,
    user: &UserInfo,
    body: Value,
) -> Result<Value, ApiError> {
    check_access_spec("SelfSubjectAccessReview", &body, false)?;
    let decision = server
        .authorization()
        .decide(&asked(&body["spec"], user.clone()))
        .await;
    Ok(answered(body, access_status(decision)))
}

/// `SelfSubjectRulesReview`: everything the requester may do in a namespace.
async fn self_subject_rules(
    server: &ApiServer,
    user: &UserInfo,
    body: Value,
) -> Result<Value, ApiError> {
    let Some(namespace) = body
        .pointer("/spec/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .map(String::from)
    else {
        return Err(ApiError::bad_request("no namespace on request"));
    };
    let rules = server.authorization().rules_for(user, &namespace).await;
    Ok(answered(body, rules.to_json()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use konverge_store::MemStore;

    use super::*;

    async fn server(token: Option<&str>) -> Arc<ApiServer> {
        let mut builder = ApiServer::builder(Arc::new(MemStore::new())).control_loops(false);
        if let Some(token) = token {
            builder = builder.bearer_token(token);
        }
        builder.build().await.unwrap()
    }

    #[tokio::test]
    async fn token_reviews_accept_only_the_servers_tokens() {
        let review = |t: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": t}});
        let secured = server(Some("s3cret")).await;
        let yes = token(&secured, review("s3cret")).await;
        assert_eq!(yes["status"]["authenticated"], true);
        assert_eq!(yes["status"]["user"]["username"], crate::ADMIN_USER);
        let no = token(&secured, review("guess")).await;
        assert_eq!(no["status"], json!({"user": {}}));
        let open = token(&*server(None).await, review("")).await;
        assert_eq!(open["status"], json!({"user": {}}));
    }

    #[tokio::test]
    async fn access_reviews_check_their_spec() {
        let server = server(None).await;
        let err = subject_access(
            &server,
            None,
            json!({"kind": "SubjectAccessReview", "spec": {}}),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains(
                "exactly one of nonResourceAttributes or resourceAttributes must be specified"
            ),
            "{}",
            err.message
        );
        assert!(
            err.message
                .contains("at least one of user or group must be specified")
        );
        let ok = subject_access(
            &server,
            Some("d"),
            json!({"kind": "LocalSubjectAccessReview", "spec": {"user": "u", "resourceAttributes": {"namespace": "d", "verb": "get", "resource": "pods"}}}),
        )
        .await
        .unwrap();
        assert_eq!(ok["status"]["allowed"], true);
        let wrong_ns = subject_access(
            &server,
            Some("d"),
            json!({"kind": "LocalSubjectAccessReview", "spec": {"user": "u", "resourceAttributes": {"namespace": "e"}}}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            wrong_ns.message,
            "spec.resourceAttributes.namespace must match namespace: d"
        );
    }
}
