//! kube-scheduler's InterPodAffinity and PodTopologySpread against an in-process API
//! server, in paused time. Tests create labelled Nodes (`kubernetes.io/hostname`, zones)
//! and Pods (or Deployments, with the deployment and replicaset controllers), and check
//! where the pods are bound and the exact `PodScheduled` messages of those left pending.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodCondition, ServiceAccount};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use konverge_controllers::{Clock, scheduler};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::TestEnv;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(30);
const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// An in-process cluster running `controllers` (kcm's names), and the scheduler in a
/// manager of its own.
async fn start(controllers: &str) -> (TestEnv, RunningManager, RunningManager) {
    let (env, kcm) = support::cluster(controllers).await;
    let mut manager = Manager::new(env.client());
    scheduler::add(&mut manager, env.client(), Clock::tokio());
    (env, kcm, manager.spawn())
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

/// A Ready node labelled with its hostname (and `zone`, if given), with `cpu` cores,
/// `memory` and room for 110 pods.
async fn node(client: &Client, name: &str, zone: Option<&str>, cpu: &str, memory: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = json!({HOSTNAME: name});
    if let Some(zone) = zone {
        labels[ZONE] = json!(zone);
    }
    let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels}}))
    .expect("a Node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("the node is created");
    let resources = json!({"cpu": cpu, "memory": memory, "pods": "110"});
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

/// Three 4-core nodes, `node-a`..`node-c`, in zones `zones` (none if empty).
async fn three_nodes(client: &Client, zones: [Option<&str>; 3]) {
    for (name, zone) in ["node-a", "node-b", "node-c"].into_iter().zip(zones) {
        node(client, name, zone, "4", "8Gi").await;
    }
}

/// The body of a pod in `ns` labelled `labels`, requesting 100m and 100Mi; `spec` is
/// merged into its spec.
fn pod_body(ns: &str, name: &str, labels: Value, spec: Value) -> Pod {
    let mut body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "nginx",
                 "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]},
    });
    merge(&mut body["spec"], spec);
    serde_json::from_value(body).expect("a Pod")
}

async fn pod_in(client: &Client, ns: &str, name: &str, labels: Value, spec: Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), &pod_body(ns, name, labels, spec))
        .await
        .expect("the pod is created");
}

async fn pod(client: &Client, name: &str, labels: Value, spec: Value) {
    pod_in(client, NS, name, labels, spec).await;
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

async fn bound_in(client: &Client, ns: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = support::wait_for(&pods, name, WAIT, |p| node_of(p).is_some()).await;
    node_of(&pod).unwrap_or_default()
}

/// Waits until the pod is bound and says where.
async fn bound(client: &Client, name: &str) -> String {
    bound_in(client, NS, name).await
}

fn scheduled_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
}

/// Waits until the pod's PodScheduled condition is False and returns (reason, message).
async fn not_scheduled(client: &Client, name: &str) -> (String, String) {
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

/// Required (anti-)affinity of one term: pods labelled `app` in the pod's namespace, over
/// `topology_key`.
fn required(kind: &str, app: &str, topology_key: &str) -> Value {
    json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": topology_key}]}}})
}

/// A Deployment of `replicas` pods labelled `app`, 100m and 100Mi each; `spec` is merged
/// into the pod template's spec.
async fn deployment(client: &Client, app: &str, replicas: i32, spec: Value) {
    let mut body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "image": "nginx",
                         "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]},
            },
        },
    });
    merge(&mut body["spec"]["template"]["spec"], spec);
    let deployment: Deployment = serde_json::from_value(body).expect("a Deployment");
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("the deployment is created");
}

/// Waits until `count` pods labelled `app=<app>` exist and every one is either bound or
/// has been found unschedulable; returns how many each node got, and the messages of the
/// pending ones.
async fn placement(
    client: &Client,
    app: &str,
    count: usize,
) -> (BTreeMap<String, usize>, Vec<String>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let settled = support::wait_for_list(&pods, &format!("app={app}"), WAIT, |items| {
        items.len() == count
            && items.iter().all(|p| {
                node_of(p).is_some() || scheduled_condition(p).is_some_and(|c| c.status == "False")
            })
    })
    .await;
    let mut per_node = BTreeMap::new();
    let mut pending = Vec::new();
    for p in settled {
        match node_of(&p) {
            Some(node) => *per_node.entry(node).or_default() += 1,
            None => pending.push(
                scheduled_condition(&p)
                    .and_then(|c| c.message.clone())
                    .unwrap_or_default(),
            ),
        }
    }
    (per_node, pending)
}

#[tokio::test(start_paused = true)]
async fn required_affinity_waits_for_and_then_joins_the_matching_pod() {
    let (env, _kcm, _scheduler) = start("").await;
    let client = env.client();
    three_nodes(&client, [None, None, None]).await;
    // Nothing labelled app=db anywhere, and the pod is not one itself.
    pod(
        &client,
        "web",
        json!({"app": "web"}),
        required("podAffinity", "db", HOSTNAME),
    )
    .await;
    let (reason, message) = not_scheduled(&client, "web").await;
    assert_eq!(reason, "Unschedulable");
    assert_eq!(
        message,
        "0/3 nodes are available: 3 node(s) didn't match pod affinity rules. preemption: \
         0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
    // Once a db pod is placed (on node-b), the waiting pod is tried again and joins it.
    pod(
        &client,
        "db",
        json!({"app": "db"}),
        json!({"nodeSelector": {HOSTNAME: "node-b"}}),
    )
    .await;
    assert_eq!(bound(&client, "db").await, "node-b");
    assert_eq!(bound(&client, "web").await, "node-b");
    // The first pod of a group with affinity to itself goes anywhere; the next join it.
    let group = required("podAffinity", "cache", HOSTNAME);
    pod(&client, "cache-0", json!({"app": "cache"}), group.clone()).await;
    let first = bound(&client, "cache-0").await;
    pod(&client, "cache-1", json!({"app": "cache"}), group).await;
    assert_eq!(bound(&client, "cache-1").await, first);
}

#[tokio::test(start_paused = true)]
async fn anti_affinity_places_one_replica_per_node_and_reports_the_rest() {
    let (env, _kcm, _scheduler) = start("deployment,replicaset").await;
    let client = env.client();
    three_nodes(&client, [None, None, None]).await;
    deployment(
        &client,
        "web",
        6,
        required("podAntiAffinity", "web", HOSTNAME),
    )
    .await;
    let (per_node, pending) = placement(&client, "web", 6).await;
    assert_eq!(
        per_node,
        BTreeMap::from([
            ("node-a".to_string(), 1),
            ("node-b".to_string(), 1),
            ("node-c".to_string(), 1),
        ])
    );
    let expected = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. \
                    preemption: 0/3 nodes are available: 3 No preemption victims found for \
                    incoming pod..";
    assert_eq!(pending, vec![expected; 3]);
}

#[tokio::test(start_paused = true)]
async fn existing_pods_anti_affinity_keeps_matching_pods_out_of_its_zone() {
    let (env, _kcm, _scheduler) = start("").await;
    let client = env.client();
    three_nodes(&client, [Some("zone-1"), Some("zone-1"), Some("zone-2")]).await;
    // A pod on node-a that wants no app=web pod in its zone.
    let loner = required("podAntiAffinity", "web", ZONE);
    let mut spec = loner.clone();
    merge(&mut spec, json!({"nodeSelector": {HOSTNAME: "node-a"}}));
    pod(&client, "loner", json!({"app": "loner"}), spec).await;
    assert_eq!(bound(&client, "loner").await, "node-a");
    // A web pod (no affinity of its own) can only go to the other zone.
    pod(&client, "web-0", json!({"app": "web"}), json!({})).await;
    assert_eq!(bound(&client, "web-0").await, "node-c");
    // Pinned to node-b, it cannot go anywhere.
    pod(
        &client,
        "web-1",
        json!({"app": "web"}),
        json!({"nodeSelector": {HOSTNAME: "node-b"}}),
    )
    .await;
    let (_, message) = not_scheduled(&client, "web-1").await;
    assert_eq!(
        message,
        "0/3 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, \
         2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are \
         available: 1 No preemption victims found for incoming pod., 2 Preemption is not \
         helpful for scheduling."
    );
    // Other pods are not affected.
    pod(
        &client,
        "db",
        json!({"app": "db"}),
        json!({"nodeSelector": {HOSTNAME: "node-b"}}),
    )
    .await;
    assert_eq!(bound(&client, "db").await, "node-b");
}

#[tokio::test(start_paused = true)]
async fn a_higher_priority_pod_preempts_the_pod_its_anti_affinity_rejects() {
    let (env, _kcm, _scheduler) = start("").await;
    let client = env.client();
    node(&client, "node-a", None, "4", "8Gi").await;
    pod(&client, "low", json!({"app": "batch"}), json!({})).await;
    assert_eq!(bound(&client, "low").await, "node-a");
    let class: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "high"}, "value": 1000,
    }))
    .expect("a PriorityClass");
    Api::<PriorityClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("the class is created");
    let mut spec = required("podAntiAffinity", "batch", HOSTNAME);
    merge(&mut spec, json!({"priorityClassName": "high"}));
    pod(&client, "high", json!({"app": "api"}), spec).await;
    // Room is not the problem: the anti-affinity is, and taking `low` off solves it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let low = support::wait_for(&pods, "low", WAIT, |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await;
    let disruption = low
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
        .and_then(|c| c.reason.clone());
    assert_eq!(disruption.as_deref(), Some("PreemptionByScheduler"));
    // While the victim terminates it still counts, and the preemptor waits for it,
    // nominated (the message is the filters' alone: preemption succeeded).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, message) = not_scheduled(&client, "high").await;
    assert_eq!(
        message,
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
    );
    let high = pods.get("high").await.expect("high");
    let nominated = high
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref());
    assert_eq!(nominated, Some("node-a"));
    // The kubelet's part: the victim is gone, and the preemptor takes its place.
    pods.delete("low", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleted");
    assert_eq!(bound(&client, "high").await, "node-a");
}

#[tokio::test(start_paused = true)]
async fn namespace_selector_picks_the_namespaces_of_the_pods_that_count() {
    let (env, _kcm, _scheduler) = start("").await;
    let client = env.client();
    three_nodes(&client, [None, None, None]).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for (name, team) in [("team-a", "a"), ("team-b", "b")] {
        let ns: Namespace = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"team": team}}}))
        .expect("a Namespace");
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("the namespace is created");
        // What kcm's serviceaccount controller would add, for the pods' admission.
        let account: ServiceAccount = serde_json::from_value(json!({"apiVersion": "v1",
            "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}}))
        .expect("a ServiceAccount");
        Api::<ServiceAccount>::namespaced(client.clone(), name)
            .create(&PostParams::default(), &account)
            .await
            .expect("the account is created");
    }
    let on = |node: &str| json!({"nodeSelector": {HOSTNAME: node}});
    pod_in(&client, "team-a", "db", json!({"app": "db"}), on("node-c")).await;
    pod_in(&client, "team-b", "db", json!({"app": "db"}), on("node-b")).await;
    assert_eq!(bound_in(&client, "team-a", "db").await, "node-c");
    assert_eq!(bound_in(&client, "team-b", "db").await, "node-b");
    // With team b's db.
    let term = |kind: &str, namespace_selector: Value| {
        json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}},
             "namespaceSelector": namespace_selector, "topologyKey": HOSTNAME}]}}})
    };
    pod(
        &client,
        "with-b",
        json!({}),
        term("podAffinity", json!({"matchLabels": {"team": "b"}})),
    )
    .await;
    assert_eq!(bound(&client, "with-b").await, "node-b");
    // Away from every namespace's db: `{}` selects all namespaces.
    pod(
        &client,
        "away",
        json!({}),
        term("podAntiAffinity", json!({})),
    )
    .await;
    assert_eq!(bound(&client, "away").await, "node-a");
    // A selector no namespace matches: no pod counts, and the pod is no db itself.
    pod(
        &client,
        "nobody",
        json!({}),
        term("podAffinity", json!({"matchLabels": {"team": "z"}})),
    )
    .await;
    let (_, message) = not_scheduled(&client, "nobody").await;
    assert_eq!(
        message,
        "0/3 nodes are available: 3 node(s) didn't match pod affinity rules. preemption: \
         0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
}

/// One DoNotSchedule constraint over `key` for pods labelled `app=spread`; `extra` is
/// merged into it.
fn spread(key: &str, extra: Value) -> Value {
    let mut constraint = json!({"maxSkew": 1, "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}});
    merge(&mut constraint, extra);
    json!({"topologySpreadConstraints": [constraint]})
}

#[tokio::test(start_paused = true)]
async fn topology_spread_keeps_zones_within_max_skew() {
    let (env, _kcm, _scheduler) = start("").await;
    let client = env.client();
    three_nodes(&client, [Some("zone-1"), Some("zone-1"), Some("zone-2")]).await;
    node(&client, "node-d", None, "4", "8Gi").await;
    let labels = json!({"app": "spread"});
    // Zones 0/0: any (node-a first by name); then 1/0: only zone-2; then 1/1: any, the
    // emptiest node is node-b. node-d has no zone at all.
    let mut placed = Vec::new();
    for i in 0..3 {
        let name = format!("spread-{i}");
        pod(&client, &name, labels.clone(), spread(ZONE, json!({}))).await;
        placed.push(bound(&client, &name).await);
    }
    assert_eq!(placed, ["node-a", "node-c", "node-b"]);
    // One that must go to zone-1, zone-2 still counting as a domain (node affinity ignored
    // for the domains): 2 + 1 - 1 > 1.
    let mut pinned = spread(ZONE, json!({"nodeAffinityPolicy": "Ignore"}));
    merge(&mut pinned, json!({"nodeSelector": {ZONE: "zone-1"}}));
    pod(&client, "pinned", labels.clone(), pinned).await;
    let (reason, message) = not_scheduled(&client, "pinned").await;
    assert_eq!(reason, "Unschedulable");
    assert_eq!(
        message,
        "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 2 \
         node(s) didn't match pod topology spread constraints. preemption: 0/4 nodes are \
         available: 2 No preemption victims found for incoming pod., 2 Preemption is not \
         helpful for scheduling."
    );
    // A key no node has.
    pod(&client, "racked", labels, spread("rack", json!({}))).await;
    let (_, message) = not_scheduled(&client, "racked").await;
    assert_eq!(
        message,
        "0/4 nodes are available: 4 node(s) didn't match pod topology spread constraints \
         (missing required label). preemption: 0/4 nodes are available: 4 Preemption is not \
         helpful for scheduling."
    );
}

#[tokio::test(start_paused = true)]
async fn min_domains_counts_missing_zones_as_empty() {
    let (env, _kcm, _scheduler) = start("").await;
    let client = env.client();
    node(&client, "node-a", Some("zone-1"), "4", "8Gi").await;
    node(&client, "node-b", Some("zone-2"), "4", "8Gi").await;
    let constraint = spread(ZONE, json!({"minDomains": 3}));
    let labels = json!({"app": "spread"});
    pod(&client, "spread-0", labels.clone(), constraint.clone()).await;
    assert_eq!(bound(&client, "spread-0").await, "node-a");
    pod(&client, "spread-1", labels.clone(), constraint.clone()).await;
    assert_eq!(bound(&client, "spread-1").await, "node-b");
    // Two zones of the three wanted: the minimum is taken as 0, so 1 + 1 - 0 > 1 everywhere.
    pod(&client, "spread-2", labels, constraint).await;
    let (_, message) = not_scheduled(&client, "spread-2").await;
    assert_eq!(
        message,
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints. \
         preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
    );
    // A third zone lets it in there.
    node(&client, "node-c", Some("zone-3"), "4", "8Gi").await;
    assert_eq!(bound(&client, "spread-2").await, "node-c");
}

#[tokio::test(start_paused = true)]
async fn system_default_spreading_spreads_a_deployment_over_nodes() {
    let (env, _kcm, _scheduler) = start("deployment,replicaset").await;
    let client = env.client();
    // node-a is far bigger: by resources alone it would take every replica.
    node(&client, "node-a", None, "64", "64Gi").await;
    node(&client, "node-b", None, "4", "8Gi").await;
    node(&client, "node-c", None, "4", "8Gi").await;
    deployment(&client, "web", 6, json!({})).await;
    let (per_node, pending) = placement(&client, "web", 6).await;
    assert!(pending.is_empty(), "{pending:?}");
    assert_eq!(
        per_node,
        BTreeMap::from([
            ("node-a".to_string(), 2),
            ("node-b".to_string(), 2),
            ("node-c".to_string(), 2),
        ])
    );
    // A bare pod (no owner, no Service) gets no default spreading: node-a.
    pod(&client, "bare", json!({"app": "web"}), json!({})).await;
    assert_eq!(bound(&client, "bare").await, "node-a");
}

#[tokio::test(start_paused = true)]
async fn invalid_selectors_are_refused_or_reported_without_a_panic() {
    let (env, _kcm, _scheduler) = start("").await;
    let client = env.client();
    three_nodes(&client, [None, None, None]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let bad = json!({"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["db"]}]});
    // In pod affinity: the API server refuses the pod.
    let affinity = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": bad, "topologyKey": HOSTNAME}]}}});
    let refused = pods
        .create(
            &PostParams::default(),
            &pod_body(NS, "bad-affinity", json!({}), affinity),
        )
        .await
        .expect_err("an invalid selector is refused");
    let kube::Error::Api(status) = refused else {
        panic!("not a Status: {refused:?}");
    };
    assert_eq!(status.code, 422);
    assert_eq!(status.reason, "Invalid");
    assert_eq!(
        status.message,
        "Pod \"bad-affinity\" is invalid: spec.affinity.podAffinity.\
         requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].\
         operator: Invalid value: \"Equals\": not a valid selector operator"
    );
    // In a topology spread constraint: kube-apiserver refuses it too; if the pod gets in,
    // the scheduler reports kube-scheduler's PreFilter error and keeps going.
    let constraint = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": bad}]});
    match pods
        .create(
            &PostParams::default(),
            &pod_body(NS, "bad-spread", json!({}), constraint),
        )
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 422),
        Err(other) => panic!("not a Status: {other:?}"),
        Ok(_) => {
            let (reason, message) = not_scheduled(&client, "bad-spread").await;
            assert_eq!(reason, "SchedulerError");
            assert_eq!(
                message,
                "running PreFilter plugin \"PodTopologySpread\": get constraints from pod: \
                 obtaining pod's hard topology spread constraints: \"Equals\" is not a valid \
                 label selector operator"
            );
        }
    }
    // The scheduler is still at work.
    pod(&client, "fine", json!({"app": "fine"}), json!({})).await;
    assert_eq!(bound(&client, "fine").await, "node-a");
    let listed = pods.list(&ListParams::default()).await.expect("listed");
    assert!(listed.items.iter().all(|p| p.name_any() != "bad-affinity"));
}
