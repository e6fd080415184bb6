//! The scheduler against an in-process API server, in paused time. Tests create the Nodes
//! (allocatable and a Ready condition, as a kubelet would report) and Pods, and check where
//! the pods are bound, their `PodScheduled` condition and the scheduler's Events.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use konverge_controllers::{Clock, scheduler};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{FaultPlan, TestEnv};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(30);

/// An in-process cluster with no kcm controllers, and the scheduler in a manager of its
/// own on the environment's (faulty) client.
async fn start() -> (TestEnv, RunningManager, RunningManager) {
    let (env, controllers) = support::cluster("").await;
    let scheduler = spawn_scheduler(&env);
    (env, controllers, scheduler)
}

fn spawn_scheduler(env: &TestEnv) -> RunningManager {
    let mut manager = Manager::new(env.client());
    scheduler::add(&mut manager, env.client(), Clock::tokio());
    manager.spawn()
}

/// A Ready node with `cpu` cores, 8Gi of memory and room for 110 pods; `extra` is merged
/// into the Node (labels, spec).
async fn node(client: &Client, name: &str, cpu: &str, extra: Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    merge(&mut body, extra);
    let node: Node = serde_json::from_value(body).expect("a Node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("the node is created");
    let resources = json!({"cpu": cpu, "memory": "8Gi", "pods": "110"});
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the node's status is written");
}

fn merge(into: &mut Value, extra: Value) {
    match (into, extra) {
        (Value::Object(into), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(into.entry(k).or_insert(Value::Null), v);
            }
        }
        (into, extra) => *into = extra,
    }
}

/// A pod requesting `cpu` and 100Mi of memory; `spec` is merged into its spec.
async fn pod(client: &Client, name: &str, cpu: &str, spec: Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx",
                 "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]},
    });
    merge(&mut body["spec"], spec);
    let pod: Pod = serde_json::from_value(body).expect("a Pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// Waits until the pod is bound and says where.
async fn bound(client: &Client, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = support::wait_for(&pods, name, WAIT, |p| node_of(p).is_some()).await;
    node_of(&pod).unwrap_or_default()
}

/// Waits until the pod's PodScheduled condition is False and returns (reason, message).
async fn unschedulable(client: &Client, name: &str) -> (String, String) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = support::wait_for(&pods, name, WAIT, |p| {
        scheduled_condition(p).is_some_and(|c| c.status == "False")
    })
    .await;
    let condition = scheduled_condition(&pod).expect("PodScheduled");
    assert_eq!(node_of(&pod), None);
    (
        condition.reason.clone().unwrap_or_default(),
        condition.message.clone().unwrap_or_default(),
    )
}

fn scheduled_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
}

/// The notes of `reason` events about pod `name`, with their reporting controller.
async fn events(client: &Client, name: &str, reason: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .expect("events are listed")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.reporting_controller.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

async fn wait_for_event(client: &Client, name: &str, reason: &str) -> (String, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(event) = events(client, name, reason).await.into_iter().next() {
            return event;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {reason} event about {name}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn pods_spread_over_nodes_by_least_allocated_score() {
    let (env, _controllers, _scheduler) = start().await;
    let client = env.client();
    for name in ["node-a", "node-b", "node-c"] {
        node(&client, name, "4", json!({})).await;
    }
    // One at a time: each goes to the emptiest node (the first by name among equals).
    let mut placed = Vec::new();
    for i in 0..3 {
        let name = format!("web-{i}");
        pod(&client, &name, "1", json!({})).await;
        placed.push(bound(&client, &name).await);
    }
    assert_eq!(placed, ["node-a", "node-b", "node-c"]);
    // A fourth goes to a node with the least allocated: all equal again, so node-a.
    pod(&client, "web-3", "500m", json!({})).await;
    assert_eq!(bound(&client, "web-3").await, "node-a");
    // And a fifth avoids node-a, now the fullest.
    pod(&client, "web-4", "500m", json!({})).await;
    assert_eq!(bound(&client, "web-4").await, "node-b");
}

#[tokio::test(start_paused = true)]
async fn a_bound_pod_gets_kube_schedulers_scheduled_event() {
    let (env, _controllers, _scheduler) = start().await;
    let client = env.client();
    node(&client, "node-1", "4", json!({})).await;
    pod(&client, "web-0", "1", json!({})).await;
    assert_eq!(bound(&client, "web-0").await, "node-1");
    let (from, note) = wait_for_event(&client, "web-0", "Scheduled").await;
    assert_eq!(from, "default-scheduler");
    assert_eq!(note, "Successfully assigned default/web-0 to node-1");
    // A pod for another scheduler is left alone.
    pod(
        &client,
        "other",
        "1",
        json!({"schedulerName": "my-scheduler"}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let other = pods.get("other").await.expect("the pod");
    assert_eq!(node_of(&other), None);
    assert!(scheduled_condition(&other).is_none());
}

#[tokio::test(start_paused = true)]
async fn node_selector_and_required_node_affinity_pick_the_node() {
    let (env, _controllers, _scheduler) = start().await;
    let client = env.client();
    node(
        &client,
        "node-a",
        "4",
        json!({"metadata": {"labels": {"zone": "a", "gen": "3"}}}),
    )
    .await;
    node(
        &client,
        "node-b",
        "4",
        json!({"metadata": {"labels": {"zone": "b", "gen": "5", "ssd": "true"}}}),
    )
    .await;
    node(
        &client,
        "node-c",
        "4",
        json!({"metadata": {"labels": {"zone": "c", "gen": "7"}}}),
    )
    .await;

    pod(
        &client,
        "selector",
        "1",
        json!({"nodeSelector": {"zone": "c"}}),
    )
    .await;
    assert_eq!(bound(&client, "selector").await, "node-c");

    let affinity = |terms: Value| {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}})
    };
    // In and Gt together (one term): zone in {a, b} and gen > 4 is node-b only.
    pod(
        &client,
        "in-gt",
        "1",
        affinity(json!([{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]},
            {"key": "gen", "operator": "Gt", "values": ["4"]},
        ]}])),
    )
    .await;
    assert_eq!(bound(&client, "in-gt").await, "node-b");
    // NotIn, DoesNotExist and Lt: not c, no ssd, gen < 5 is node-a.
    pod(
        &client,
        "notin-lt",
        "1",
        affinity(json!([{"matchExpressions": [
            {"key": "zone", "operator": "NotIn", "values": ["c"]},
            {"key": "ssd", "operator": "DoesNotExist"},
            {"key": "gen", "operator": "Lt", "values": ["5"]},
        ]}])),
    )
    .await;
    assert_eq!(bound(&client, "notin-lt").await, "node-a");
    // Terms are ORed: the first matches nothing, the second (matchFields) node-c.
    pod(&client, "fields", "1", affinity(json!([
        {"matchExpressions": [{"key": "ssd", "operator": "Exists"}, {"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-c"]}]},
    ]))).await;
    assert_eq!(bound(&client, "fields").await, "node-c");
    // Nothing matches: every node fails NodeAffinity, which preemption cannot help.
    pod(
        &client,
        "nowhere",
        "1",
        json!({"nodeSelector": {"zone": "d"}}),
    )
    .await;
    let (reason, message) = unschedulable(&client, "nowhere").await;
    assert_eq!(reason, "Unschedulable");
    assert_eq!(
        message,
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
}

#[tokio::test(start_paused = true)]
async fn a_no_schedule_taint_keeps_out_pods_that_do_not_tolerate_it() {
    let (env, _controllers, _scheduler) = start().await;
    let client = env.client();
    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
                       "metadata": {"labels": {"pool": "gpu"}}});
    node(&client, "node-a", "8", taint).await;
    node(
        &client,
        "node-b",
        "4",
        json!({"metadata": {"labels": {"pool": "cpu"}}}),
    )
    .await;
    // node-a is emptier but tainted.
    pod(&client, "plain", "1", json!({})).await;
    assert_eq!(bound(&client, "plain").await, "node-b");
    // Tolerating it (Equal), the pod may go there.
    let tolerate = json!({"nodeSelector": {"pool": "gpu"}, "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]});
    pod(&client, "tolerant", "1", tolerate).await;
    assert_eq!(bound(&client, "tolerant").await, "node-a");
    // Exists with no key tolerates everything.
    let exists = json!({"nodeSelector": {"pool": "gpu"}, "tolerations": [{"operator": "Exists"}]});
    pod(&client, "exists", "1", exists).await;
    assert_eq!(bound(&client, "exists").await, "node-a");
    // A wrong value does not tolerate it: both nodes fail, each for its own reason.
    let wrong = json!({"nodeSelector": {"pool": "gpu"}, "tolerations": [
        {"key": "dedicated", "value": "tpu", "effect": "NoSchedule"}]});
    pod(&client, "wrong", "1", wrong).await;
    let (_, message) = unschedulable(&client, "wrong").await;
    assert_eq!(
        message,
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
         1 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/2 nodes are \
         available: 2 Preemption is not helpful for scheduling."
    );
}

#[tokio::test(start_paused = true)]
async fn an_unschedulable_node_takes_no_new_pods() {
    let (env, _controllers, _scheduler) = start().await;
    let client = env.client();
    node(
        &client,
        "node-a",
        "4",
        json!({"spec": {"unschedulable": true}}),
    )
    .await;
    pod(&client, "web-0", "1", json!({})).await;
    let (reason, message) = unschedulable(&client, "web-0").await;
    assert_eq!(reason, "Unschedulable");
    assert_eq!(
        message,
        "0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are \
         available: 1 Preemption is not helpful for scheduling."
    );
    // Uncordoned, the node takes it (a Node update wakes the pod).
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .expect("uncordoned");
    assert_eq!(bound(&client, "web-0").await, "node-a");
    // A pod tolerating the cordon's taint may go to a cordoned node.
    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordoned");
    let tolerate = json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable",
                                           "operator": "Exists", "effect": "NoSchedule"}]});
    pod(&client, "daemon", "1", tolerate).await;
    assert_eq!(bound(&client, "daemon").await, "node-a");
}

#[tokio::test(start_paused = true)]
async fn a_pod_too_big_waits_until_a_node_with_room_is_added() {
    let (env, _controllers, _scheduler) = start().await;
    let client = env.client();
    node(&client, "node-small", "2", json!({})).await;
    pod(&client, "big", "3", json!({})).await;
    let expected = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are \
                    available: 1 No preemption victims found for incoming pod..";
    let (reason, message) = unschedulable(&client, "big").await;
    assert_eq!(reason, "Unschedulable");
    assert_eq!(message, expected);
    let (from, note) = wait_for_event(&client, "big", "FailedScheduling").await;
    assert_eq!(from, "default-scheduler");
    assert_eq!(note, expected);
    node(&client, "node-big", "4", json!({})).await;
    assert_eq!(bound(&client, "big").await, "node-big");
}

#[tokio::test(start_paused = true)]
async fn assumed_pods_count_so_three_big_pods_go_one_per_node() {
    let (env, _controllers, _scheduler) = start().await;
    let client = env.client();
    for name in ["node-a", "node-b", "node-c"] {
        node(&client, name, "4", json!({})).await;
    }
    // All at once: the cache does not see the first bindings before the next cycles run.
    for i in 0..3 {
        pod(&client, &format!("big-{i}"), "3", json!({})).await;
    }
    let mut placed = BTreeSet::new();
    for i in 0..3 {
        placed.insert(bound(&client, &format!("big-{i}")).await);
    }
    assert_eq!(placed.len(), 3, "{placed:?}");
    // A fourth has no room anywhere, and is placed once a pod is deleted.
    pod(&client, "big-3", "3", json!({})).await;
    let (_, message) = unschedulable(&client, "big-3").await;
    assert_eq!(
        message,
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: \
         3 No preemption victims found for incoming pod.."
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let freed = bound(&client, "big-1").await;
    pods.delete("big-1", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleted");
    assert_eq!(bound(&client, "big-3").await, freed);
}

#[tokio::test(start_paused = true)]
async fn binds_each_pod_once_under_fault_plans() {
    for seed in 1..=2 {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::builder().in_process().start().await;
        let check = env.invariants().watch::<Pod>().start().await;
        let direct = env.direct_client();
        for name in ["node-a", "node-b", "node-c"] {
            node(&direct, name, "4", json!({})).await;
        }
        let _scheduler = spawn_scheduler(&env);
        let names: Vec<String> = (0..6).map(|i| format!("web-{i}")).collect();
        for name in &names {
            pod(&direct, name, "1", json!({})).await;
        }
        let faults = plan.spawn(&env.faults());
        faults.await.expect("the plan ran");
        check
            .converges(Duration::from_secs(120), |world| {
                let unbound: Vec<&String> = names
                    .iter()
                    .filter(|n| {
                        world
                            .get_as::<Pod>(NS, n)
                            .and_then(|p| node_of(&p))
                            .is_none()
                    })
                    .collect();
                if unbound.is_empty() {
                    Ok(())
                } else {
                    Err(format!("not bound: {unbound:?}"))
                }
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        // Exactly one binding accepted per pod, two per node.
        let mut bindings: BTreeMap<String, usize> = BTreeMap::new();
        for record in env.requests().records() {
            let r = &record.request;
            if r.subresource.as_deref() == Some("binding") && record.status.is_success() {
                *bindings
                    .entry(r.name.clone().unwrap_or_default())
                    .or_default() += 1;
            }
        }
        let expected: BTreeMap<String, usize> = names.iter().map(|n| (n.clone(), 1)).collect();
        assert_eq!(bindings, expected, "{plan}");
        let pods: Api<Pod> = Api::namespaced(direct.clone(), NS);
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for name in &names {
            let p = pods.get(name).await.expect("the pod");
            *per_node.entry(node_of(&p).unwrap_or_default()).or_default() += 1;
        }
        assert_eq!(
            per_node.values().copied().collect::<Vec<_>>(),
            [2, 2, 2],
            "{plan}"
        );
        check
            .no_hot_loop(4)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_higher_priority_pod_preempts_the_fewest_lower_priority_pods() {
    let (env, _controllers, _scheduler) = start().await;
    let client = env.client();
    node(&client, "node-a", "4", json!({})).await;
    pod(&client, "low-0", "2", json!({})).await;
    assert_eq!(bound(&client, "low-0").await, "node-a");
    pod(&client, "low-1", "1", json!({})).await;
    assert_eq!(bound(&client, "low-1").await, "node-a");
    // An equal priority pod may not preempt.
    pod(&client, "peer", "3", json!({})).await;
    let (_, message) = unschedulable(&client, "peer").await;
    assert_eq!(
        message,
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: \
         1 No preemption victims found for incoming pod.."
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.delete("peer", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleted");

    // 3 cores need low-0 (2) gone; low-1 (1) can stay.
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let class: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "high"}, "value": 1000,
    }))
    .expect("a PriorityClass");
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("the class is created");
    pod(&client, "high", "3", json!({"priorityClassName": "high"})).await;
    // The victim terminates gracefully; the test plays its kubelet's final delete, and the
    // preemptor takes its place.
    support::wait_for(&pods, "low-0", Duration::from_secs(10), |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await;
    pods.delete("low-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("the kubelet's final delete");
    assert_eq!(bound(&client, "high").await, "node-a");
    let high = pods.get("high").await.expect("high");
    let nominated = high
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref());
    assert_eq!(nominated, Some("node-a"));
    let (_, note) = wait_for_event(&client, "high", "FailedScheduling").await;
    assert_eq!(note, "0/1 nodes are available: 1 Insufficient cpu.");
    assert!(pods.get_opt("low-0").await.expect("read").is_none());
    let survivor = pods.get("low-1").await.expect("low-1 stays");
    assert!(survivor.metadata.deletion_timestamp.is_none());
    let (from, note) = wait_for_event(&client, "low-0", "Preempted").await;
    assert_eq!(from, "default-scheduler");
    let uid = high.metadata.uid.clone().unwrap_or_default();
    assert_eq!(note, format!("Preempted by pod {uid} on node node-a"));
    // The victim got the DisruptionTarget condition, then was deleted.
    let writes: Vec<String> = env
        .requests()
        .records()
        .iter()
        .map(|r| r.to_string())
        .filter(|r| r.contains("default/low-0") && !r.starts_with("get"))
        .collect();
    let patch = writes
        .iter()
        .position(|w| w.starts_with("patch pods/status"));
    let delete = writes.iter().position(|w| w.starts_with("delete pods"));
    assert!(
        matches!((patch, delete), (Some(p), Some(d)) if p < d),
        "{writes:?}"
    );
}
