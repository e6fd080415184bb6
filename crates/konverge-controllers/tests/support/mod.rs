//! What the controllers' tests share: an in-process cluster running the controllers in
//! paused time, waiting for a condition, and standing in for kubelets until pods run.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use konverge_controllers::kubelet::{Kubelets, SimulatedNodes};
use konverge_controllers::{Clock, ControllerManager, Selection, scheduler};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::TestEnv;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// An in-process API server (no socket: works in paused time) with `selection`'s
/// controllers, on a clock that follows Tokio's. They reach the server through the
/// environment's faults and request log, each controller as its own ServiceAccount (bound
/// to kcm's `system:controller:*` role by the server's bootstrap RBAC), so a missing
/// permission fails a test as it would fail on a cluster.
pub async fn cluster(selection: &str) -> (TestEnv, RunningManager) {
    let env = TestEnv::builder().in_process().bare().start().await;
    let running = controllers(&env, selection).await;
    (env, running)
}

/// Starts `selection`'s controllers against `env`, through its faults.
pub async fn controllers(env: &TestEnv, selection: &str) -> RunningManager {
    let selection: Selection = selection.parse().expect("a valid --controllers list");
    let mut clients = BTreeMap::new();
    for descriptor in selection.enabled() {
        let client = env
            .client_for("kube-system", descriptor.service_account)
            .await
            .expect("a ServiceAccount client");
        clients.insert(descriptor.service_account.to_string(), client);
    }
    ControllerManager::new(env.client())
        .selection(selection)
        .credentials(clients)
        .clock(Clock::tokio())
        .spawn()
        .await
        .expect("the controllers start")
}

/// Polls `name` through `api` every 100 ms of (virtual) time until `done` holds; panics
/// after `within`, showing the object as last seen.
pub async fn wait_for<K>(api: &Api<K>, name: &str, within: Duration, done: impl Fn(&K) -> bool) -> K
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut last = None;
    loop {
        if let Ok(Some(obj)) = api.get_opt(name).await {
            if done(&obj) {
                return obj;
            }
            last = Some(obj);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} did not get there within {within:?}; last seen: {last:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls until `done` holds for the objects `api` lists under `selector`.
pub async fn wait_for_list<K>(
    api: &Api<K>,
    selector: &str,
    within: Duration,
    done: impl Fn(&[K]) -> bool,
) -> Vec<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let items = api
            .list(&ListParams::default().labels(selector))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        if done(&items) {
            return items;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{selector}: not there within {within:?}; last seen: {:?}",
            items.iter().map(|i| i.name_any()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes what a kubelet would for a started pod: Running, and Ready (or not).
pub async fn set_pod_running(pods: &Api<Pod>, name: &str, ready: bool) {
    let ready = if ready { "True" } else { "False" };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({
        "status": {
            "phase": "Running",
            "startTime": now,
            "podIP": "10.244.0.10",
            "podIPs": [{"ip": "10.244.0.10"}],
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                {"type": "Ready", "status": ready, "lastTransitionTime": now},
            ],
        }
    });
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the pod's status is written");
}

/// [`set_pod_running`] for every pod `selector` selects that is not running yet.
pub async fn run_pods(pods: &Api<Pod>, selector: &str, ready: bool) -> usize {
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .expect("pods are listed");
    let mut started = 0;
    for pod in list.items {
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if !running && pod.metadata.deletion_timestamp.is_none() {
            set_pod_running(pods, &pod.name_any(), ready).await;
            started += 1;
        }
    }
    started
}

/// Writes a terminal phase (`Succeeded` or `Failed`) for a pod, with its container's exit.
pub async fn finish_pod(pods: &Api<Pod>, name: &str, phase: &str, exit_code: i32) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let pod = pods.get(name).await.expect("the pod exists");
    let containers: Vec<_> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            json!({
                "name": c.name, "image": c.image, "imageID": "", "ready": false,
                "restartCount": 0, "started": false,
                "state": {"terminated": {"exitCode": exit_code, "reason": if exit_code == 0 { "Completed" } else { "Error" }, "startedAt": now, "finishedAt": now}},
            })
        })
        .collect();
    let status = json!({
        "status": {
            "phase": phase,
            "containerStatuses": containers,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
            ],
        }
    });
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the pod's status is written");
}

/// A cluster running `selection`'s controllers, and `nodes` (with the scheduler when
/// `schedule`) in a manager of their own; the nodes' kubelets' handle.
pub async fn with_nodes(
    selection: &str,
    nodes: SimulatedNodes,
    schedule: bool,
) -> (TestEnv, RunningManager, RunningManager, Kubelets) {
    let (env, kcm) = cluster(selection).await;
    let kubelets = nodes.kubelets();
    let mut manager = Manager::new(env.client());
    let clock = Clock::tokio();
    if schedule {
        scheduler::add(&mut manager, env.client(), clock.clone());
    }
    nodes.add(&mut manager, env.client(), clock);
    (env, kcm, manager.spawn(), kubelets)
}

/// Creates the pod `name` in `default`, bound to `node`: `meta` is its metadata (the name
/// added), `spec` its spec (one container `app` running nginx unless it names containers).
pub async fn create_bound_pod(
    env: &TestEnv,
    name: &str,
    node: &str,
    meta: Value,
    spec: Value,
) -> Api<Pod> {
    let mut spec = spec;
    spec["nodeName"] = json!(node);
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "app", "image": "nginx"}]);
    }
    let mut metadata = if meta.is_object() { meta } else { json!({}) };
    metadata["name"] = json!(name);
    let pod: Pod =
        serde_json::from_value(json!({"metadata": metadata, "spec": spec})).expect("a pod");
    let pods = Api::<Pod>::namespaced(env.client(), "default");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
    pods
}
