//! The node lifecycle and taint eviction controllers: a node that stops heartbeating turns
//! Unknown and tainted, its pods are evicted after their 300 s tolerations, and the taints
//! go when it recovers.

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use konverge_testkit::{FaultPlan, TestEnv};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "default";
const CONTROLLERS: &str = "nodelifecycle,taint-eviction-controller";

async fn node(client: &Client, name: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("a node");
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("the node is created");
    heartbeat(client, name, "True").await;
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                 "renewTime": k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()},
    }))
    .expect("a lease");
    Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .create(&PostParams::default(), &lease)
        .await
        .expect("the lease is created");
}

/// What the kubelet posts: the Ready condition with a fresh heartbeat (virtual time moves
/// the controller's clock, so the heartbeat value only has to change).
async fn heartbeat(client: &Client, name: &str, ready: &str) {
    let now = (k8s_openapi::jiff::Timestamp::now() + tokio_elapsed()).to_string();
    let status = json!({"status": {"conditions": [
        {"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "kubelet is posting ready status",
         "lastHeartbeatTime": now, "lastTransitionTime": now},
    ]}});
    Api::<Node>::all(client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .expect("the status is posted");
}

fn tokio_elapsed() -> k8s_openapi::jiff::SignedDuration {
    static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(tokio::time::Instant::now);
    k8s_openapi::jiff::SignedDuration::try_from(start.elapsed()).unwrap_or_default()
}

/// The node's taints as `key:effect`.
fn taints(node: &Node) -> Vec<String> {
    let mut t: Vec<String> = node
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    t.sort();
    t
}

fn ready(node: &Node) -> Option<(String, Option<String>, Option<String>)> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn pod_on(client: &Client, name: &str, node: &str) {
    let pod: Pod = serde_json::from_value(json!({
        // A finalizer keeps the evicted pod readable.
        "metadata": {"name": name, "finalizers": ["example.com/hold"]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .expect("a pod");
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
}

#[tokio::test(start_paused = true)]
async fn a_silent_node_turns_unknown_its_pods_are_evicted_and_it_recovers() {
    let (env, _running) = support::cluster(CONTROLLERS).await;
    let client = env.client();
    node(&client, "healthy").await;
    node(&client, "silent").await;
    pod_on(&client, "web", "silent").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    support::set_pod_running(&pods, "web", true).await;
    // The healthy node keeps posting; the silent one never does again.
    let beat = {
        let client = client.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                heartbeat(&client, "healthy", "True").await;
            }
        })
    };
    let nodes: Api<Node> = Api::all(client.clone());
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(
        ready(&nodes.get("silent").await.expect("the node"))
            .map(|r| r.0)
            .as_deref(),
        Some("True")
    );

    let silent = support::wait_for(&nodes, "silent", Duration::from_secs(30), |n| {
        taints(n).contains(&"node.kubernetes.io/unreachable:NoExecute".to_string())
    })
    .await;
    assert_eq!(
        ready(&silent),
        Some((
            "Unknown".into(),
            Some("NodeStatusUnknown".into()),
            Some("Kubelet stopped posting node status.".into())
        ))
    );
    assert_eq!(
        taints(&silent),
        [
            "node.kubernetes.io/unreachable:NoExecute",
            "node.kubernetes.io/unreachable:NoSchedule"
        ]
    );
    assert!(taints(&nodes.get("healthy").await.expect("the node")).is_empty());
    let web = pods.get("web").await.expect("the pod");
    assert!(!support_ready(&web), "the pod is marked not Ready");

    // The pod tolerates unreachable for 300 s (the server's default tolerations).
    tokio::time::sleep(Duration::from_secs(280)).await;
    assert!(
        pods.get("web")
            .await
            .expect("the pod")
            .metadata
            .deletion_timestamp
            .is_none()
    );
    let web = support::wait_for(&pods, "web", Duration::from_secs(40), |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await;
    let target = web
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("the DisruptionTarget condition");
    assert_eq!(target.reason.as_deref(), Some("DeletionByTaintManager"));
    assert_eq!(
        target.message.as_deref(),
        Some("Taint manager: deleting due to NoExecute taint")
    );

    // The kubelet comes back: the taints go.
    heartbeat(&client, "silent", "True").await;
    support::wait_for(&nodes, "silent", Duration::from_secs(30), |n| {
        taints(n).is_empty()
    })
    .await;
    beat.abort();
}

fn support_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

#[tokio::test(start_paused = true)]
async fn conditions_and_unschedulable_become_no_schedule_taints() {
    let (env, _running) = support::cluster(CONTROLLERS).await;
    let client = env.client();
    node(&client, "a").await;
    node(&client, "b").await;
    heartbeat(&client, "a", "False").await;
    let nodes: Api<Node> = Api::all(client.clone());
    support::wait_for(&nodes, "a", Duration::from_secs(10), |n| {
        taints(n)
            == [
                "node.kubernetes.io/not-ready:NoExecute",
                "node.kubernetes.io/not-ready:NoSchedule",
            ]
    })
    .await;
    nodes
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordoned");
    support::wait_for(&nodes, "b", Duration::from_secs(10), |n| {
        taints(n) == ["node.kubernetes.io/unschedulable:NoSchedule"]
    })
    .await;
    // A pod that tolerates not-ready for 0 s goes at once.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "fragile"},
        "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "nginx"}],
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}]},
    }))
    .expect("a pod");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("created");
    // No kubelet runs node "a": the evicted pod stays Terminating, as on a cluster.
    support::wait_for(&pods, "fragile", Duration::from_secs(5), |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_a_hot_loop() {
    for seed in 1..=3 {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env.invariants().watch::<Node>().start().await;
        let direct = env.direct_client();
        node(&direct, "up").await;
        node(&direct, "down").await;
        let _running = support::controllers(&env, CONTROLLERS).await;
        let faults = plan.spawn(&env.faults());
        heartbeat(&direct, "down", "False").await;
        faults.await.expect("the plan ran");
        check
            .converges(Duration::from_secs(30), |world| {
                let down: Node = world.get_as("", "down").ok_or("no node")?;
                if taints(&down)
                    == [
                        "node.kubernetes.io/not-ready:NoExecute",
                        "node.kubernetes.io/not-ready:NoSchedule",
                    ]
                {
                    Ok(())
                } else {
                    Err(format!("taints {:?}", taints(&down)))
                }
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(6)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
