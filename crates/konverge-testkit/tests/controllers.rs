//! kube-controller-manager's controllers in a TestEnv: on by default, as on a cluster, each
//! as its own ServiceAccount; off with `bare()`.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use konverge_controllers::Selection;
use konverge_testkit::TestEnv;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }))
    .expect("a Deployment")
}

async fn pods_of(client: &kube::Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("app=web"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_deployment_gets_a_replica_set_and_pods_by_default() {
    let env = TestEnv::builder().in_process().start().await;
    let client = env.client();
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment())
        .await
        .expect("created");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pods_of(&client).await.len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no pods in 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sets = Api::<ReplicaSet>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("listed")
        .items;
    assert_eq!(sets.len(), 1);
    let set = &sets[0];
    let owner = &set.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Deployment", "web")
    );
    for pod in pods_of(&client).await {
        let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(Some(&owner.name), set.metadata.name.as_ref());
    }
    // Each controller acts as kcm's ServiceAccount for it.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    for account in ["deployment-controller", "replicaset-controller"] {
        assert!(
            accounts.get_opt(account).await.expect("read").is_some(),
            "{account}"
        );
    }
    // Nothing the controllers did went through the faults into the request log.
    assert_eq!(
        env.requests().count(konverge_testkit::Verb::Create, "pods"),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn a_bare_environment_runs_no_controllers() {
    for env in [
        TestEnv::builder().in_process().bare().start().await,
        TestEnv::builder()
            .in_process()
            .controllers(
                "*,-deployment-controller"
                    .parse::<Selection>()
                    .expect("a selection"),
            )
            .start()
            .await,
    ] {
        let client = env.client();
        Api::<Deployment>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &deployment())
            .await
            .expect("created");
        tokio::time::sleep(Duration::from_secs(10)).await;
        let sets = Api::<ReplicaSet>::namespaced(client.clone(), "default")
            .list(&ListParams::default())
            .await
            .expect("listed")
            .items;
        assert!(sets.is_empty(), "no deployment controller, no ReplicaSet");
    }
}

/// A restart keeps the ServiceAccount signing key, as kube-apiserver keeps its key file: a
/// token issued before still authenticates after (the controllers' identities depend on it).
#[tokio::test(start_paused = true)]
async fn service_account_tokens_outlive_a_restart() {
    let env = TestEnv::builder().in_process().bare().start().await;
    let client = env.client_for("default", "app").await.expect("a client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let code = |result: Result<_, kube::Error>| match result {
        Err(kube::Error::Api(status)) => status.code,
        Ok(_) => 200,
        Err(other) => panic!("{other}"),
    };
    // Authenticated, not allowed: 403 (a token the server does not accept would be 401).
    assert_eq!(code(pods.list(&ListParams::default()).await), 403);
    env.restart(Duration::from_secs(1))
        .await
        .expect("restarted");
    assert_eq!(code(pods.list(&ListParams::default()).await), 403);
}
