//! Whether a request matches a FlowSchema, as kube-apiserver's API Priority and Fairness
//! reads a schema's rules: a rule matches when one of its subjects is the requester and one
//! of its resource rules (for a resource request) or non-resource rules (for any other path)
//! covers what is asked.

use k8s_openapi::api::flowcontrol::v1::{
    FlowSchema, NonResourcePolicyRule, PolicyRulesWithSubjects, ResourcePolicyRule, Subject,
};
use konverge_apimachinery::request_info::RequestInfo;

use crate::auth::user::UserInfo;

/// The wildcard of verbs, groups, resources, namespaces, URLs and subject names.
const ALL: &str = "*";

/// The user name prefix of ServiceAccounts.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Whether `schema` takes the request of `user` described by `info`.
pub(crate) fn matches_schema(schema: &FlowSchema, user: &UserInfo, info: &RequestInfo) -> bool {
    schema
        .spec
        .as_ref()
        .and_then(|spec| spec.rules.as_ref())
        .is_some_and(|rules| rules.iter().any(|rule| matches_rule(rule, user, info)))
}

fn matches_rule(rule: &PolicyRulesWithSubjects, user: &UserInfo, info: &RequestInfo) -> bool {
    if !rule
        .subjects
        .iter()
        .any(|subject| is_subject(subject, user))
    {
        return false;
    }
    if info.is_resource_request {
        rule.resource_rules
            .iter()
            .flatten()
            .any(|r| covers_resource(r, info))
    } else {
        rule.non_resource_rules
            .iter()
            .flatten()
            .any(|r| covers_path(r, info))
    }
}

fn is_subject(subject: &Subject, user: &UserInfo) -> bool {
    match subject.kind.as_str() {
        "User" => subject
            .user
            .as_ref()
            .is_some_and(|u| u.name == ALL || u.name == user.name),
        "Group" => subject
            .group
            .as_ref()
            .is_some_and(|g| g.name == ALL || user.groups.contains(&g.name)),
        "ServiceAccount" => subject.service_account.as_ref().is_some_and(|sa| {
            let Some(rest) = user.name.strip_prefix(SERVICE_ACCOUNT_PREFIX) else {
                return false;
            };
            match rest.strip_prefix(sa.namespace.as_str()) {
                Some(name) if sa.name == ALL => name.starts_with(':'),
                Some(name) => name.strip_prefix(':') == Some(sa.name.as_str()),
                None => false,
            }
        }),
        _ => false,
    }
}

fn covers_resource(rule: &ResourcePolicyRule, info: &RequestInfo) -> bool {
    let resource = if info.subresource.is_empty() {
        info.resource.clone()
    } else {
        format!("{}/{}", info.resource, info.subresource)
    };
    if !contains(&rule.verbs, &info.verb)
        || !contains(&rule.resources, &resource)
        || !contains(&rule.api_groups, &info.api_group)
    {
        return false;
    }
    if info.namespace.is_empty() {
        return rule.cluster_scope.unwrap_or(false);
    }
    rule.namespaces
        .as_ref()
        .is_some_and(|namespaces| contains(namespaces, &info.namespace))
}

fn covers_path(rule: &NonResourcePolicyRule, info: &RequestInfo) -> bool {
    if !contains(&rule.verbs, &info.verb) {
        return false;
    }
    rule.non_resource_urls.iter().any(|url| {
        if url == ALL || *url == info.path {
            return true;
        }
        // `/apis/*` and `/apis` both cover everything under `/apis/`.
        let mut prefix = url.strip_suffix('*').unwrap_or(url).to_string();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        info.path.starts_with(&prefix)
    })
}

/// Whether `list` holds `value`, or is the wildcard alone (validation keeps the wildcard
/// alone in its list).
fn contains(list: &[String], value: &str) -> bool {
    (list.len() == 1 && list[0] == ALL) || list.iter().any(|item| item == value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(rule: serde_json::Value) -> FlowSchema {
        serde_json::from_value(json!({
            "metadata": {"name": "s"},
            "spec": {"priorityLevelConfiguration": {"name": "p"}, "rules": [rule]},
        }))
        .expect("a FlowSchema")
    }

    fn request(method: &str, path: &str) -> RequestInfo {
        RequestInfo::parse(method, path, None).expect("parses")
    }

    #[test]
    fn subjects_match_as_kube_matches_them() {
        let sa = UserInfo::service_account("kube-system", "endpoint-controller", "u");
        let rules = |subject: serde_json::Value| {
            schema(
                json!({"subjects": [subject], "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}),
            )
        };
        let version = request("GET", "/version");
        let cases = [
            (
                json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "*"}}),
                true,
            ),
            (
                json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "endpoint-controller"}}),
                true,
            ),
            (
                json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "endpoint"}}),
                false,
            ),
            (
                json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube", "name": "*"}}),
                false,
            ),
            (
                json!({"kind": "Group", "group": {"name": "system:serviceaccounts"}}),
                true,
            ),
            (json!({"kind": "Group", "group": {"name": "*"}}), true),
            (
                json!({"kind": "User", "user": {"name": "system:serviceaccount:kube-system:endpoint-controller"}}),
                true,
            ),
            (json!({"kind": "User", "user": {"name": "noxu"}}), false),
        ];
        for (subject, want) in cases {
            assert_eq!(
                matches_schema(&rules(subject.clone()), &sa, &version),
                want,
                "{subject}"
            );
        }
    }

    #[test]
    fn resource_rules_read_verb_resource_group_and_scope() {
        let user = UserInfo::new("noxu", &["system:authenticated"]);
        let leases = schema(json!({
            "subjects": [{"kind": "User", "user": {"name": "noxu"}}],
            "resourceRules": [{"verbs": ["get", "update"], "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"], "namespaces": ["kube-system"]}],
        }));
        let nodes = schema(json!({
            "subjects": [{"kind": "User", "user": {"name": "noxu"}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": [""], "resources": ["nodes/status"],
                "clusterScope": true, "namespaces": []}],
        }));
        let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x";
        assert!(matches_schema(&leases, &user, &request("GET", lease)));
        assert!(matches_schema(&leases, &user, &request("PUT", lease)));
        assert!(!matches_schema(&leases, &user, &request("DELETE", lease)));
        let elsewhere = "/apis/coordination.k8s.io/v1/namespaces/default/leases/x";
        assert!(!matches_schema(&leases, &user, &request("GET", elsewhere)));
        // Every namespace's leases, listed at once, are not in a namespace.
        let all = "/apis/coordination.k8s.io/v1/leases";
        assert!(!matches_schema(&leases, &user, &request("GET", all)));
        assert!(matches_schema(
            &nodes,
            &user,
            &request("PATCH", "/api/v1/nodes/n/status")
        ));
        assert!(!matches_schema(
            &nodes,
            &user,
            &request("PATCH", "/api/v1/nodes/n")
        ));
        // A non-resource request is matched by non-resource rules only.
        assert!(!matches_schema(&nodes, &user, &request("GET", "/healthz")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let user = UserInfo::new("noxu", &["system:authenticated"]);
        let urls = schema(json!({
            "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*", "/openapi"]}],
        }));
        for (path, want) in [
            ("/healthz", true),
            ("/healthz/etcd", true),
            ("/healthzz", false),
            ("/apis", false),
            ("/apis/apps", true),
            ("/openapi/v2", true),
            ("/version", false),
        ] {
            assert_eq!(
                matches_schema(&urls, &user, &request("GET", path)),
                want,
                "{path}"
            );
        }
        assert!(!matches_schema(&urls, &user, &request("POST", "/healthz")));
        let anonymous = UserInfo::anonymous();
        assert!(!matches_schema(
            &urls,
            &anonymous,
            &request("GET", "/healthz")
        ));
    }
}
