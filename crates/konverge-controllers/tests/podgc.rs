//! The pod garbage collector: orphans after the quarantine, terminated pods over the
//! threshold (oldest first), unscheduled terminating pods.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use konverge_controllers::podgc::{self, Config};
use konverge_controllers::{Clock, Setup};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{FaultPlan, TestEnv};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const NS: &str = "default";

async fn node(client: &Client, name: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("a node");
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("the node is created");
}

async fn pod(client: &Client, name: &str, node: Option<&str>, finalizer: bool) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "gc"},
                     "finalizers": if finalizer { json!(["example.com/hold"]) } else { json!([]) }},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .expect("a pod");
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
}

/// The collector alone, with `config`.
fn start(env: &TestEnv, config: Config) -> RunningManager {
    let mut manager = Manager::new(env.client());
    let setup = Setup {
        client: env.client(),
        clock: Clock::tokio(),
    };
    podgc::add_with(&mut manager, setup, config);
    manager.spawn()
}

async fn names(pods: &Api<Pod>) -> Vec<String> {
    let mut names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .expect("listed")
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    names.sort();
    names
}

#[tokio::test(start_paused = true)]
async fn orphans_go_after_the_quarantine_and_are_marked_first() {
    let (env, _running) = support::cluster("podgc").await;
    let client = env.client();
    node(&client, "alive").await;
    pod(&client, "home", Some("alive"), false).await;
    // A finalizer keeps the orphan readable after its deletion, to see what was written.
    pod(&client, "orphan", Some("gone"), true).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    support::set_pod_running(&pods, "orphan", true).await;

    tokio::time::sleep(Duration::from_secs(30)).await;
    let orphan = pods.get("orphan").await.expect("still there");
    assert!(
        orphan.metadata.deletion_timestamp.is_none(),
        "quarantined for 40 s"
    );

    let orphan = support::wait_for(&pods, "orphan", Duration::from_secs(40), |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await;
    let status = orphan.status.expect("a status");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let target = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("the DisruptionTarget condition");
    assert_eq!(target.status, "True");
    assert_eq!(target.reason.as_deref(), Some("DeletionByPodGC"));
    assert_eq!(
        target.message.as_deref(),
        Some("PodGC: node no longer exists")
    );
    assert!(
        pods.get_opt("home")
            .await
            .expect("read")
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
    );
}

#[tokio::test(start_paused = true)]
async fn terminated_pods_over_the_threshold_go_oldest_first() {
    let env = TestEnv::builder().in_process().bare().start().await;
    let client = env.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    node(&client, "n1").await;
    for i in 0..5 {
        pod(&client, &format!("done-{i}"), Some("n1"), false).await;
        support::finish_pod(&pods, &format!("done-{i}"), "Succeeded", 0).await;
        // Creation timestamps are whole seconds.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    pod(&client, "running", Some("n1"), false).await;
    support::set_pod_running(&pods, "running", true).await;
    let _running = start(
        &env,
        Config {
            terminated_pod_gc_threshold: 2,
            ..Config::default()
        },
    );
    support::wait_for_list(&pods, "app=gc", Duration::from_secs(30), |items| {
        items.len() == 3
    })
    .await;
    assert_eq!(names(&pods).await, ["done-3", "done-4", "running"]);
}

#[tokio::test(start_paused = true)]
async fn unscheduled_terminating_pods_are_deleted() {
    let (env, _running) = support::cluster("pod-garbage-collector-controller").await;
    let client = env.client();
    pod(&client, "pending", None, true).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.delete("pending", &DeleteParams::default())
        .await
        .expect("deleted");
    // The finalizer holds it; podgc marks it Failed (its phase was Pending) and force-deletes.
    let pod = support::wait_for(&pods, "pending", Duration::from_secs(30), |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    })
    .await;
    assert!(pod.metadata.deletion_timestamp.is_some());
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_a_hot_loop() {
    for seed in 1..=3 {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env.invariants().watch::<Pod>().start().await;
        let direct = env.direct_client();
        node(&direct, "n1").await;
        let _running = start(
            &env,
            Config {
                terminated_pod_gc_threshold: 1,
                ..Config::default()
            },
        );
        let pods: Api<Pod> = Api::namespaced(direct.clone(), NS);
        for i in 0..3 {
            pod(&direct, &format!("done-{i}"), Some("n1"), false).await;
            support::finish_pod(&pods, &format!("done-{i}"), "Failed", 1).await;
        }
        pod(&direct, "orphan", Some("gone"), false).await;
        let faults = plan.spawn(&env.faults());
        faults.await.expect("the plan ran");
        check
            .converges(Duration::from_secs(120), |world| {
                let left: Vec<String> = ["done-0", "done-1", "done-2", "orphan"]
                    .into_iter()
                    .filter(|n| world.get_as::<Pod>(NS, n).is_some())
                    .map(str::to_string)
                    .collect();
                if left.len() == 1 && left[0].starts_with("done-") {
                    Ok(())
                } else {
                    Err(format!("pods left: {left:?}"))
                }
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(4)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
