//! Authentication and RBAC through real `kube::Client`s: a ServiceAccount's token can do
//! exactly what its bindings allow, in kube-apiserver's words when it cannot; every kind of
//! rule; escalation and binding checks; impersonation; bad tokens; and the permission report
//! of a controller that lacks one verb.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use konverge_testkit::TestEnv;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: apps
---
apiVersion: v1
kind: Namespace
metadata:
  name: other
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: config-reader
  namespace: apps
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: ["allowed"]
  verbs: ["get"]
- apiGroups: ["apps"]
  resources: ["deployments/status"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: robot-reads
  namespace: apps
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: config-reader
subjects:
- kind: ServiceAccount
  name: robot
  namespace: apps
"#;

fn forbidden_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if status.code == 403 && status.reason == "Forbidden" => {
            status.message.clone()
        }
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
}

fn unauthorized(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 && s.message == "Unauthorized")
}

async fn setup() -> anyhow::Result<(TestEnv, kube::Client)> {
    let env = TestEnv::start().await;
    env.apply_manifests(MANIFESTS).await?;
    let robot = env.client_for("apps", "robot").await?;
    Ok((env, robot))
}

fn named<K: Default + kube::Resource>(name: &str) -> K {
    let mut k = K::default();
    k.meta_mut().name = Some(name.into());
    k
}

#[tokio::test]
async fn a_service_account_can_do_exactly_what_its_bindings_allow() -> anyhow::Result<()> {
    let (env, robot) = setup().await?;
    let admin = env.client();
    let admin_cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "apps");
    admin_cms
        .create(&PostParams::default(), &named("x"))
        .await?;

    let cms: Api<ConfigMap> = Api::namespaced(robot.clone(), "apps");
    let listed = cms.list(&ListParams::default()).await?;
    assert!(
        listed
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("x"))
    );
    cms.get("x").await?;
    let e = cms
        .create(&PostParams::default(), &named("y"))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"configmaps is forbidden: User "system:serviceaccount:apps:robot" cannot create resource "configmaps" in API group "" in the namespace "apps""#
    );
    let elsewhere: Api<ConfigMap> = Api::namespaced(robot.clone(), "other");
    let e = elsewhere.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"configmaps is forbidden: User "system:serviceaccount:apps:robot" cannot list resource "configmaps" in API group "" in the namespace "other""#
    );
    let all: Api<ConfigMap> = Api::all(robot.clone());
    let e = all.list(&ListParams::default()).await.unwrap_err();
    assert!(forbidden_message(&e).ends_with(r#"in API group "" at the cluster scope"#));

    // resourceNames: only the secret named; a list has no name.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "apps");
    for name in ["allowed", "hidden"] {
        secrets.create(&PostParams::default(), &named(name)).await?;
    }
    let robot_secrets: Api<Secret> = Api::namespaced(robot.clone(), "apps");
    robot_secrets.get("allowed").await?;
    let e = robot_secrets.get("hidden").await.unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"secrets "hidden" is forbidden: User "system:serviceaccount:apps:robot" cannot get resource "secrets" in API group "" in the namespace "apps""#
    );
    assert!(robot_secrets.list(&ListParams::default()).await.is_err());

    // A subresource is its own resource.
    let deployments: Api<Deployment> = Api::namespaced(robot.clone(), "apps");
    let e = deployments.get("web").await.unwrap_err();
    assert!(
        forbidden_message(&e).contains(r#"cannot get resource "deployments" in API group "apps""#)
    );
    let e = deployments.get_status("web").await.unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 404),
        "allowed, then not found: {e:?}"
    );

    // Who am I, and what may I do: answered by the same authorizer.
    let reviews: Api<SelfSubjectAccessReview> = Api::all(robot.clone());
    let ask = |verb: &str, resource: &str, namespace: &str| SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                namespace: Some(namespace.into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let yes = reviews
        .create(&PostParams::default(), &ask("list", "configmaps", "apps"))
        .await?;
    let status = yes.status.unwrap();
    assert!(status.allowed);
    assert_eq!(
        status.reason.as_deref(),
        Some(
            r#"RBAC: allowed by RoleBinding "robot-reads/apps" of Role "config-reader" to ServiceAccount "robot/apps""#
        )
    );
    let no = reviews
        .create(&PostParams::default(), &ask("delete", "configmaps", "apps"))
        .await?;
    assert!(!no.status.unwrap().allowed);
    let rules: Api<SelfSubjectRulesReview> = Api::all(robot);
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some("apps".into()),
        },
        ..SelfSubjectRulesReview::default()
    };
    let answer = rules
        .create(&PostParams::default(), &review)
        .await?
        .status
        .unwrap();
    assert!(answer.resource_rules.iter().any(|r| r.resources.as_deref()
        == Some(&["configmaps".to_string()][..])
        && r.verbs == ["get", "list", "watch"]));
    Ok(())
}

#[tokio::test]
async fn cluster_roles_bind_by_scope_and_aggregate() -> anyhow::Result<()> {
    let (env, robot) = setup().await?;
    env.apply_manifests(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
aggregationRule:
  clusterRoleSelectors:
  - matchLabels: {reader/part: "true"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader-namespaces
  labels: {reader/part: "true"}
rules:
- apiGroups: ["*"]
  resources: ["namespaces"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: metrics
rules:
- nonResourceURLs: ["/metrics", "/debug/*"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: robot-reader
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: ServiceAccount, name: robot, namespace: apps}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: robot-metrics
  namespace: other
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: ServiceAccount, name: robot, namespace: apps}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: robot-metrics
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: metrics}
subjects: [{kind: ServiceAccount, name: robot, namespace: apps}]
"#,
    )
    .await?;
    // The aggregated role gains its parts' rules (by the server's control loop).
    let namespaces: Api<Namespace> = Api::all(robot.clone());
    let mut listed = namespaces.list(&ListParams::default()).await;
    for _ in 0..100 {
        if listed.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        listed = namespaces.list(&ListParams::default()).await;
    }
    assert!(listed?.items.len() >= 4);
    // A ClusterRole bound by a RoleBinding applies in that namespace only.
    let cms: Api<ConfigMap> = Api::namespaced(robot.clone(), "other");
    cms.list(&ListParams::default()).await?;
    let secrets: Api<Secret> = Api::namespaced(robot.clone(), "other");
    assert!(
        secrets.list(&ListParams::default()).await.is_err(),
        "view shows no secrets"
    );
    let deployments: Api<Deployment> = Api::namespaced(robot.clone(), "default");
    assert!(deployments.list(&ListParams::default()).await.is_err());
    // Non-resource URLs, with a trailing star.
    let get = |path: &str| http::Request::get(path).body(Vec::new()).unwrap();
    robot.request_text(get("/metrics")).await?;
    let e = robot.request_text(get("/debug/pprof")).await.unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 404),
        "allowed, not served: {e:?}"
    );
    let e = robot.request_text(get("/logs")).await.unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"forbidden: User "system:serviceaccount:apps:robot" cannot get path "/logs""#
    );
    Ok(())
}

#[tokio::test]
async fn roles_and_bindings_grant_only_what_their_writer_holds() -> anyhow::Result<()> {
    let (env, robot) = setup().await?;
    env.apply_manifests(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: role-writer, namespace: apps}
rules:
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "update", "get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: robot-writes-roles, namespace: apps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: role-writer}
subjects: [{kind: ServiceAccount, name: robot}]
"#,
    )
    .await?;
    let roles: Api<Role> = Api::namespaced(robot.clone(), "apps");
    let role = |name: &str, resource: &str, verbs: &[&str]| -> Role {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": [resource], "verbs": verbs}],
        }))
        .unwrap()
    };
    // Within what it holds: fine.
    roles
        .create(
            &PostParams::default(),
            &role("cm-get", "configmaps", &["get"]),
        )
        .await?;
    // More than it holds: refused, naming what it lacks.
    let e = roles
        .create(
            &PostParams::default(),
            &role("secret-admin", "secrets", &["get", "delete"]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        "roles.rbac.authorization.k8s.io \"secret-admin\" is forbidden: user \"system:serviceaccount:apps:robot\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:apps\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}"
    );
    // Binding a role whose rules it does not hold: refused.
    let bindings: Api<RoleBinding> = Api::namespaced(robot.clone(), "apps");
    let binding = |name: &str, kind: &str, role: &str| -> RoleBinding {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"kind": "User", "name": "mallory"}],
        }))
        .unwrap()
    };
    bindings
        .create(&PostParams::default(), &binding("ok", "Role", "cm-get"))
        .await?;
    let e = bindings
        .create(
            &PostParams::default(),
            &binding("admin", "ClusterRole", "admin"),
        )
        .await
        .unwrap_err();
    assert!(
        forbidden_message(&e).starts_with(r#"rolebindings.rbac.authorization.k8s.io "admin" is forbidden: user "system:serviceaccount:apps:robot" (groups="#),
        "{e}"
    );
    let e = bindings
        .create(&PostParams::default(), &binding("ghost", "Role", "missing"))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"rolebindings.rbac.authorization.k8s.io "ghost" is forbidden: role.rbac.authorization.k8s.io "missing" not found"#
    );
    // With `escalate` and `bind`, it may.
    env.apply_manifests(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: escalator, namespace: apps}
rules:
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles"]
  verbs: ["escalate"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  resourceNames: ["admin"]
  verbs: ["bind"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: robot-escalates, namespace: apps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: escalator}
subjects: [{kind: ServiceAccount, name: robot}]
"#,
    )
    .await?;
    roles
        .create(
            &PostParams::default(),
            &role("secret-admin", "secrets", &["get", "delete"]),
        )
        .await?;
    bindings
        .create(
            &PostParams::default(),
            &binding("admin", "ClusterRole", "admin"),
        )
        .await?;
    // The admin (system:masters) may grant anything.
    let admin_roles: Api<ClusterRole> = Api::all(env.client());
    admin_roles
        .create(&PostParams::default(), &named("anything"))
        .await?;
    Ok(())
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb() -> anyhow::Result<()> {
    let (env, robot) = setup().await?;
    // The robot, with its own token, asking to act as alice: it may not impersonate.
    let _ = robot;
    let token = env.server().service_account_tokens().issue(
        "apps",
        "robot",
        &uid(&env, "apps", "robot").await?,
        &[konverge_apiserver::auth::tokens::ISSUER.to_string()],
        jiff_now(),
        600,
        None,
    );
    let mut config = kube::Config::new(env.url().parse()?);
    config.auth_info.token = Some(token.into());
    config.auth_info.impersonate = Some("alice".into());
    let impostor = kube::Client::try_from(config)?;
    let cms: Api<ConfigMap> = Api::namespaced(impostor.clone(), "apps");
    let e = cms.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"users "alice" is forbidden: User "system:serviceaccount:apps:robot" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    // Given the verb, it acts as alice (and alice may do nothing yet).
    env.apply_manifests(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: impersonate-alice}
rules:
- apiGroups: [""]
  resources: ["users"]
  resourceNames: ["alice"]
  verbs: ["impersonate"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: robot-is-alice}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: impersonate-alice}
subjects: [{kind: ServiceAccount, name: robot, namespace: apps}]
"#,
    )
    .await?;
    let e = cms.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "apps""#
    );
    Ok(())
}

fn jiff_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

async fn uid(env: &TestEnv, namespace: &str, name: &str) -> anyhow::Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client(), namespace);
    Ok(accounts.get(name).await?.metadata.uid.unwrap_or_default())
}

fn client_with_token(env: &TestEnv, token: &str) -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::new(env.url().parse()?);
    config.auth_info.token = Some(token.to_string().into());
    Ok(kube::Client::try_from(config)?)
}

#[tokio::test]
async fn bad_tokens_are_unauthorized() -> anyhow::Result<()> {
    let (env, robot) = setup().await?;
    let cms = |client: kube::Client| Api::<ConfigMap>::namespaced(client, "apps");
    cms(robot.clone()).list(&ListParams::default()).await?;
    let tokens = env.server().service_account_tokens().clone();
    let robot_uid = uid(&env, "apps", "robot").await?;
    let issuer = vec![konverge_apiserver::auth::tokens::ISSUER.to_string()];
    let now = jiff_now();
    let expired = tokens.issue("apps", "robot", &robot_uid, &issuer, now - 7200, 3600, None);
    let other_audience = tokens.issue(
        "apps",
        "robot",
        &robot_uid,
        &["vault".into()],
        now,
        3600,
        None,
    );
    let forged = konverge_apiserver::auth::tokens::ServiceAccountTokens::generate()
        .issue("apps", "robot", &robot_uid, &issuer, now, 3600, None);
    let good = tokens.issue("apps", "robot", &robot_uid, &issuer, now, 3600, None);
    let mut tampered = good.clone();
    tampered.pop();
    tampered.push(if good.ends_with('A') { 'B' } else { 'A' });
    for (what, token) in [
        ("expired", expired),
        ("for another audience", other_audience),
        ("signed by another key", forged),
        ("tampered", tampered),
        ("not a token", "s3cret".to_string()),
    ] {
        let e = cms(client_with_token(&env, &token)?)
            .list(&ListParams::default())
            .await
            .unwrap_err();
        assert!(unauthorized(&e), "{what}: {e:?}");
    }
    cms(client_with_token(&env, &good)?)
        .list(&ListParams::default())
        .await?;
    // Tokens die with their ServiceAccount, and do not come back with a new one of the name.
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client(), "apps");
    accounts.delete("robot", &Default::default()).await?;
    let e = cms(robot.clone())
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(unauthorized(&e), "deleted: {e:?}");
    accounts
        .create(&PostParams::default(), &named("robot"))
        .await?;
    let e = cms(robot).list(&ListParams::default()).await.unwrap_err();
    assert!(unauthorized(&e), "recreated with a new uid: {e:?}");
    // Anonymous requests are forbidden, not unauthorized.
    let anonymous = kube::Client::try_from(kube::Config::new(env.url().parse()?))?;
    let e = cms(anonymous)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"configmaps is forbidden: User "system:anonymous" cannot list resource "configmaps" in API group "" in the namespace "apps""#
    );
    Ok(())
}

/// A controller that annotates ConfigMaps, run with a role that forgot `patch`: the report
/// names the missing rule, what it used, and what it was given for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_permission_report_names_the_missing_verb() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    env.apply_manifests(
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: ops}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: annotator}
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: annotator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: annotator}
subjects: [{kind: ServiceAccount, name: annotator, namespace: ops}]
"#,
    )
    .await?;
    let client = env.client_for("ops", "annotator").await?;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    cms.create(&PostParams::default(), &named("settings"))
        .await?;

    let controller = konverge_runtime::Controller::new(
        Api::<ConfigMap>::namespaced(client.clone(), "default"),
        konverge_runtime::watcher::Config::default(),
    );
    let mut manager = konverge_runtime::Manager::new(client.clone());
    manager.add(
        controller,
        |cm: Arc<ConfigMap>, client: Arc<kube::Client>| async move {
            let api: Api<ConfigMap> = Api::namespaced((*client).clone(), "default");
            let patch = serde_json::json!({"metadata": {"annotations": {"seen": "yes"}}});
            api.patch(
                &cm.metadata.name.clone().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(|_| konverge_runtime::Action::await_change())
        },
        Arc::new(client),
    );
    let _running = manager.spawn();
    let mut report = env.permissions("ops", "annotator").await;
    // The denied patch may come before the controller's watch has started: wait for both.
    for _ in 0..200 {
        let watching = report.used.iter().any(|u| u.rule.verbs[0] == "watch");
        if !report.denied.is_empty() && watching {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        report = env.permissions("ops", "annotator").await;
    }
    let text = report.to_string();
    assert_eq!(report.denied.len(), 1, "{text}");
    let denial = &report.denied[0];
    assert_eq!(denial.request, r#"patch configmaps "settings""#);
    assert_eq!(denial.namespace, "default");
    assert_eq!(
        denial.needs.compact(),
        r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["patch"]}"#
    );
    let used: Vec<String> = report
        .used
        .iter()
        .map(|u| u.rule.verbs[0].clone())
        .collect();
    assert!(
        used.contains(&"list".to_string()) && used.contains(&"watch".to_string()),
        "{text}"
    );
    let unused: Vec<String> = report
        .unused
        .iter()
        .map(|u| u.rule.verbs[0].clone())
        .collect();
    assert!(unused.contains(&"delete".to_string()), "{text}");
    assert!(
        text.contains(&format!(
            r#"patch configmaps "settings" ({} time{}): needs {{APIGroups:[""], Resources:["configmaps"], Verbs:["patch"]}} in namespace "default""#,
            denial.requests,
            if denial.requests == 1 { "" } else { "s" }
        )),
        "{text}"
    );
    let failed = std::panic::catch_unwind(|| report.assert_no_denials());
    assert!(failed.is_err());
    Ok(())
}

#[tokio::test]
async fn the_admin_and_always_allow_are_unaffected() -> anyhow::Result<()> {
    let env = TestEnv::builder()
        .authorization(konverge_apiserver::AuthorizationMode::AlwaysAllow)
        .start()
        .await;
    let robot = env.client_for("default", "robot").await?;
    let secrets: Api<Secret> = Api::namespaced(robot, "default");
    secrets.list(&ListParams::default()).await?;
    let report = env.permissions("default", "robot").await;
    assert!(report.denied.is_empty() && report.used.is_empty());
    Ok(())
}

/// ServiceAccounts find the issuer and its keys (and can check a token with them);
/// anonymous requests may not.
#[tokio::test]
async fn service_accounts_discover_the_token_issuer() -> anyhow::Result<()> {
    use base64::Engine as _;
    let (env, robot) = setup().await?;
    let get = |path: &str| http::Request::get(path).body(Vec::new()).unwrap();
    let config: serde_json::Value = serde_json::from_str(
        &robot
            .request_text(get("/.well-known/openid-configuration"))
            .await?,
    )?;
    assert_eq!(
        config["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert!(
        config["jwks_uri"]
            .as_str()
            .unwrap()
            .ends_with("/openid/v1/jwks")
    );
    assert_eq!(config["id_token_signing_alg_values_supported"][0], "ES256");
    let jwks: serde_json::Value =
        serde_json::from_str(&robot.request_text(get("/openid/v1/jwks")).await?)?;
    let key = &jwks["keys"][0];
    assert_eq!(
        (key["kty"].as_str(), key["crv"].as_str()),
        (Some("EC"), Some("P-256"))
    );
    // A token's signature checks out with the published key.
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let token = env.server().service_account_tokens().issue(
        "apps",
        "robot",
        &uid(&env, "apps", "robot").await?,
        &[konverge_apiserver::auth::tokens::ISSUER.to_string()],
        jiff_now(),
        600,
        None,
    );
    let (signed, signature) = token.rsplit_once('.').unwrap();
    let header: serde_json::Value =
        serde_json::from_slice(&b64.decode(signed.split('.').next().unwrap())?)?;
    assert_eq!(header["kid"], key["kid"]);
    let mut point = vec![4u8];
    point.extend(b64.decode(key["x"].as_str().unwrap())?);
    point.extend(b64.decode(key["y"].as_str().unwrap())?);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
        .verify(signed.as_bytes(), &b64.decode(signature)?)
        .map_err(|_| anyhow::anyhow!("the published key does not verify the token"))?;
    let anonymous = kube::Client::try_from(kube::Config::new(env.url().parse()?))?;
    let e = anonymous
        .request_text(get("/openid/v1/jwks"))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden_message(&e),
        r#"forbidden: User "system:anonymous" cannot get path "/openid/v1/jwks""#
    );
    Ok(())
}

/// A token bound to a Secret (or a Pod) lives only as long as that object.
#[tokio::test]
async fn bound_tokens_die_with_their_object() -> anyhow::Result<()> {
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    let (env, _robot) = setup().await?;
    let secrets: Api<Secret> = Api::namespaced(env.client(), "apps");
    secrets
        .create(&PostParams::default(), &named("keys"))
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client(), "apps");
    let request = |kind: &str, name: &str| TokenRequest {
        spec: TokenRequestSpec {
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
                name: Some(name.into()),
                uid: None,
            }),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request("robot", &PostParams::default(), &request("Secret", "keys"))
        .await?
        .status
        .unwrap()
        .token;
    let cms: Api<ConfigMap> = Api::namespaced(client_with_token(&env, &token)?, "apps");
    cms.list(&ListParams::default()).await?;
    secrets.delete("keys", &Default::default()).await?;
    let e = cms.list(&ListParams::default()).await.unwrap_err();
    assert!(unauthorized(&e), "{e:?}");
    let e = accounts
        .create_token_request("robot", &PostParams::default(), &request("ConfigMap", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 400 && s.message == "cannot bind token to object of type ConfigMap"),
        "{e:?}"
    );
    Ok(())
}
