//! The review resources: questions clients ask the server by creating an object that is
//! answered and never stored (`TokenReview`, `SelfSubjectReview`, the `SubjectAccessReview`
//! family).
//!
//! Until the server enforces authorization, it behaves as kube-apiserver with
//! `--authorization-mode=AlwaysAllow`: every access review is allowed, and a rules review
//! lists everything. Token reviews accept exactly the token the server requires.

use serde_json::{Value, json};

use crate::error::{ApiError, Cause};
use crate::resources::Requester;

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

fn user_info(requester: &Requester) -> Value {
    json!({"username": requester.username, "groups": requester.groups})
}

/// `SelfSubjectReview`: who the requester is.
pub(crate) fn self_subject(
    requester: &Requester,
    _namespace: Option<&str>,
    body: Value,
) -> Result<Value, ApiError> {
    let mut answer = answered(body, json!({"userInfo": user_info(requester)}));
    crate::resources::meta::metadata_mut(&mut answer).insert(
        "creationTimestamp".into(),
        json!(crate::resources::meta::now()),
    );
    Ok(answer)
}

/// `TokenReview`: whether a bearer token is one the server accepts, and whose it is.
pub(crate) fn token(
    requester: &Requester,
    _namespace: Option<&str>,
    body: Value,
) -> Result<Value, ApiError> {
    let token = body
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or("");
    let audiences = crate::auth::tokens::audiences(&body);
    let admin = match &requester.server_token {
        Some(expected) => !token.is_empty() && token == expected,
        None => false,
    };
    let status = if admin {
        json!({
            "authenticated": true,
            "user": {"username": crate::ADMIN_USER, "groups": crate::ADMIN_GROUPS},
        })
    } else if let Some(claims) =
        requester
            .tokens
            .verify(token, &audiences, jiff::Timestamp::now().as_second())
    {
        let mut extra =
            json!({"authentication.kubernetes.io/credential-id": [format!("JTI={}", claims.id)]});
        if let Some((pod, pod_uid)) = &claims.pod {
            extra["authentication.kubernetes.io/pod-name"] = json!([pod]);
            extra["authentication.kubernetes.io/pod-uid"] = json!([pod_uid]);
        }
        json!({
            "authenticated": true,
            "user": {
                "username": format!("system:serviceaccount:{}:{}", claims.namespace, claims.name),
                "uid": claims.uid,
                "groups": [
                    "system:serviceaccounts",
                    format!("system:serviceaccounts:{}", claims.namespace),
                    "system:authenticated",
                ],
                "extra": extra,
            },
            "audiences": claims.audiences,
        })
    } else {
        json!({"user": {}})
    };
    Ok(answered(body, status))
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

/// `SubjectAccessReview` and `LocalSubjectAccessReview`: whether a user may do something.
pub(crate) fn subject_access(
    _requester: &Requester,
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
    Ok(answered(body, json!({"allowed": true})))
}

/// `SelfSubjectAccessReview`: whether the requester may do something.
pub(crate) fn self_subject_access(
    _requester: &Requester,
    _namespace: Option<&str>,
    body: Value,
) -> Result<Value, ApiError> {
    check_access_spec("SelfSubjectAccessReview", &body, false)?;
    Ok(answered(body, json!({"allowed": true})))
}

/// `SelfSubjectRulesReview`: everything the requester may do in a namespace.
pub(crate) fn self_subject_rules(
    _requester: &Requester,
    _namespace: Option<&str>,
    body: Value,
) -> Result<Value, ApiError> {
    if body
        .pointer("/spec/namespace")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    Ok(answered(
        body,
        json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin(token: Option<&str>) -> Requester {
        Requester {
            username: crate::ADMIN_USER.into(),
            groups: crate::ADMIN_GROUPS.iter().map(|g| g.to_string()).collect(),
            server_token: token.map(String::from),
            tokens: std::sync::Arc::new(crate::auth::tokens::ServiceAccountTokens::generate()),
        }
    }

    #[test]
    fn token_reviews_accept_only_the_servers_token() {
        let review = |t: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": t}});
        let yes = token(&admin(Some("s3cret")), None, review("s3cret")).unwrap();
        assert_eq!(yes["status"]["authenticated"], true);
        assert_eq!(yes["status"]["user"]["username"], crate::ADMIN_USER);
        let no = token(&admin(Some("s3cret")), None, review("guess")).unwrap();
        assert_eq!(no["status"], json!({"user": {}}));
        let open = token(&admin(None), None, review("")).unwrap();
        assert_eq!(open["status"], json!({"user": {}}));
    }

    #[test]
    fn access_reviews_check_their_spec() {
        let err = subject_access(
            &admin(None),
            None,
            json!({"kind": "SubjectAccessReview", "spec": {}}),
        )
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
            &admin(None),
            Some("d"),
            json!({"kind": "LocalSubjectAccessReview", "spec": {"user": "u", "resourceAttributes": {"namespace": "d", "verb": "get", "resource": "pods"}}}),
        )
        .unwrap();
        assert_eq!(ok["status"]["allowed"], true);
        let wrong_ns = subject_access(
            &admin(None),
            Some("d"),
            json!({"kind": "LocalSubjectAccessReview", "spec": {"user": "u", "resourceAttributes": {"namespace": "e"}}}),
        )
        .unwrap_err();
        assert_eq!(
            wrong_ns.message,
            "spec.resourceAttributes.namespace must match namespace: d"
        );
    }
}
