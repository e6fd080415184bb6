//! The README's 30-line controller run as the ServiceAccount it would ship with, under the
//! RBAC rules it would ship with: with its ClusterRole it converges and no request is denied;
//! with `create` forgotten, the permission report names the missing rule.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::apply::{ApplyError, ChildSet, owner_reference};
use konverge_runtime::{Action, Controller, Manager, RunningManager, watcher::Config};
use konverge_testkit::{Permissions, TestEnv};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

async fn reconcile(src: Arc<ConfigMap>, client: Arc<Client>) -> Result<Action, ApplyError> {
    let mirror = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}-mirror",
                src.metadata.name.as_deref().unwrap_or_default()
            )),
            namespace: src.metadata.namespace.clone(),
            labels: Some([("role".to_string(), "mirror".to_string())].into()),
            owner_references: Some(vec![owner_reference(src.as_ref())?]),
            ..ObjectMeta::default()
        },
        data: src.data.clone(),
        ..ConfigMap::default()
    };
    ChildSet::new()
        .server_side("mirror")
        .typed_child("mirror", &mirror)
        .apply(&client)
        .await?;
    Ok(Action::await_change())
}

fn run(client: Client) -> RunningManager {
    let controller = Controller::new(
        Api::<ConfigMap>::all(client.clone()),
        Config::default().labels("role=source"),
    )
    .owns(
        Api::<ConfigMap>::all(client.clone()),
        Config::default().labels("role=mirror"),
    );
    let mut manager = Manager::new(client.clone());
    manager.add(controller, reconcile, Arc::new(client));
    manager.spawn()
}

/// What the controller ships: its ServiceAccount, a ClusterRole and the binding.
fn manifests(verbs: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: ops}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: mirror, namespace: ops}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: mirror}}
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: {verbs}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: mirror}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: mirror}}
subjects: [{{kind: ServiceAccount, name: mirror, namespace: ops}}]
"#
    )
}

async fn source(env: &TestEnv) -> anyhow::Result<()> {
    let source = ConfigMap {
        metadata: ObjectMeta {
            name: Some("settings".into()),
            labels: Some([("role".to_string(), "source".to_string())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("a".to_string(), "1".to_string())].into()),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(env.direct_client(), "default")
        .create(&PostParams::default(), &source)
        .await?;
    Ok(())
}

/// Polls the report until `done` holds (or 5 s pass).
async fn report_when(env: &TestEnv, done: impl Fn(&Permissions) -> bool) -> Permissions {
    for _ in 0..250 {
        let report = env.permissions("ops", "mirror").await;
        if done(&report) {
            return report;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.permissions("ops", "mirror").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_controller_needs_no_more_than_it_ships_with() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    env.apply_manifests(&manifests(
        r#"["get", "list", "watch", "create", "patch", "delete"]"#,
    ))
    .await?;
    let _running = run(env.client_for("ops", "mirror").await?);
    source(&env).await?;
    let mirrors: Api<ConfigMap> = Api::namespaced(env.direct_client(), "default");
    for _ in 0..250 {
        if mirrors.get_opt("settings-mirror").await?.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        mirrors.get_opt("settings-mirror").await?.is_some(),
        "converged"
    );
    let report = report_when(&env, |r| r.used.iter().any(|u| u.rule.verbs == ["patch"])).await;
    report.assert_no_denials();
    let verbs = |rules: Vec<&[String]>| -> Vec<String> {
        rules.into_iter().map(|v| v[0].clone()).collect()
    };
    let used = verbs(report.used.iter().map(|u| &u.rule.verbs[..]).collect());
    for verb in ["list", "watch", "create", "patch"] {
        assert!(used.contains(&verb.to_string()), "{verb} used:\n{report}");
    }
    let unused = verbs(report.unused.iter().map(|u| &u.rule.verbs[..]).collect());
    assert!(
        unused.contains(&"delete".to_string()),
        "delete is never needed:\n{report}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_create_is_named_by_the_report() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    env.apply_manifests(&manifests(r#"["get", "list", "watch", "patch"]"#))
        .await?;
    let _running = run(env.client_for("ops", "mirror").await?);
    source(&env).await?;
    let report = report_when(&env, |r| !r.denied.is_empty()).await;
    let denial = report.denied.first().expect("a denial");
    assert_eq!(
        denial.request, r#"create configmaps "settings-mirror""#,
        "{report}"
    );
    assert_eq!(denial.namespace, "default");
    assert_eq!(
        denial.needs.compact(),
        r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["create"]}"#
    );
    Ok(())
}
