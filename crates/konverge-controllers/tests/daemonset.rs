//! The daemonset controller against an in-process API server, in paused time. There is no
//! scheduler or kubelet: tests create the Nodes and play the kubelet with
//! `support::set_pod_running` and `support::finish_pod`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use konverge_controllers::controller_ref::controller_of;
use konverge_testkit::{FaultPlan, TestEnv, World};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const SELECTOR: &str = "app=agent";

/// A Ready node with allocatable resources, labelled and tainted as given.
async fn add_node(client: &Client, name: &str, labels: Value, taints: Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
    }))
    .expect("a node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("the node is created");
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the node's status is written");
}

fn daemon_set(name: &str, extra_spec: Value, pod_spec: Value) -> DaemonSet {
    let mut spec = json!({
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
        },
    });
    merge(&mut spec, extra_spec);
    merge(&mut spec["template"]["spec"], pod_spec);
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("a daemon set")
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

async fn create(client: &Client, ds: &DaemonSet) -> Api<DaemonSet> {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), ds)
        .await
        .expect("the daemon set is created");
    api
}

/// The node a daemon pod is pinned to by its required node affinity.
fn pinned_node(pod: &Pod) -> Option<String> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let [term] = terms.as_slice() else {
        return None;
    };
    let [field] = term.match_fields.as_deref()? else {
        return None;
    };
    if field.key != "metadata.name" || field.operator != "In" {
        return None;
    }
    match field.values.as_deref() {
        Some([node]) => Some(node.clone()),
        _ => None,
    }
}

fn live(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits until the live daemon pods are exactly one on each of `nodes`; returns them by
/// node.
async fn wait_for_nodes(pods: &Api<Pod>, nodes: &[&str]) -> BTreeMap<String, Pod> {
    let want: BTreeSet<String> = nodes.iter().map(|n| n.to_string()).collect();
    let list = support::wait_for_list(pods, SELECTOR, WAIT, |items| {
        let live = live(items);
        let on: BTreeSet<String> = live.iter().filter_map(|p| pinned_node(p)).collect();
        live.len() == want.len() && on == want
    })
    .await;
    list.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some((pinned_node(&p)?, p)))
        .collect()
}

async fn events(client: &Client, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default())
        .await
        .expect("events are listed")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

/// Polls until `reason` events include one whose note satisfies `want`.
async fn wait_for_event(client: &Client, reason: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(note) = events(client, reason).await.into_iter().find(|n| want(n)) {
            return note;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {reason} event; seen: {:?}",
            events(client, reason).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Counts = (i32, i32, i32, i32, i32, i32, i32);

/// (desired, current, misscheduled, ready, updated, available, unavailable).
fn counts(ds: &DaemonSet) -> Counts {
    let s = ds.status.clone().unwrap_or_default();
    (
        s.desired_number_scheduled,
        s.current_number_scheduled,
        s.number_misscheduled,
        s.number_ready,
        s.updated_number_scheduled.unwrap_or(0),
        s.number_available.unwrap_or(0),
        s.number_unavailable.unwrap_or(0),
    )
}

async fn wait_for_counts(api: &Api<DaemonSet>, name: &str, want: Counts) -> DaemonSet {
    support::wait_for(api, name, WAIT, |ds| {
        counts(ds) == want
            && ds.status.as_ref().and_then(|s| s.observed_generation) == ds.metadata.generation
    })
    .await
}

fn tolerations(pod: &Pod) -> BTreeSet<(String, String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| s.tolerations.iter().flatten())
        .map(|t| {
            (
                t.key.clone().unwrap_or_default(),
                t.operator.clone().unwrap_or_default(),
                t.effect.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn kcm_tolerations(host_network: bool) -> BTreeSet<(String, String, String)> {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    wanted
        .into_iter()
        .map(|(k, e)| (k.to_string(), "Exists".to_string(), e.to_string()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn every_node_gets_one_pinned_pod_and_status_follows_readiness() {
    let (env, _running) = support::cluster("daemonset-controller").await;
    let client = env.client();
    for name in ["n1", "n2", "n3"] {
        add_node(&client, name, json!({}), json!([])).await;
    }
    let api = create(&client, &daemon_set("agent", json!({}), json!({}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let by_node = wait_for_nodes(&pods, &["n1", "n2", "n3"]).await;

    let ds = api.get("agent").await.expect("the daemon set");
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    let revision = revisions
        .list(&ListParams::default())
        .await
        .expect("revisions")
        .items;
    let [revision] = revision.as_slice() else {
        panic!("one revision: {revision:?}");
    };
    let hash = revision.labels()["controller-revision-hash"].clone();
    assert_eq!(revision.name_any(), format!("agent-{hash}"));
    assert_eq!(revision.revision, 1);
    assert_eq!(
        controller_of(&revision.metadata).map(|r| r.uid.clone()),
        ds.uid()
    );
    let data = revision.data.as_ref().expect("the revision's data");
    assert_eq!(data.0["spec"]["template"]["$patch"], "replace");

    for (node, pod) in &by_node {
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("agent-"));
        assert!(pod.name_any().starts_with("agent-"));
        assert_eq!(pod.spec.as_ref().and_then(|s| s.node_name.clone()), None);
        assert_eq!(pinned_node(pod).as_deref(), Some(node.as_str()));
        assert_eq!(tolerations(pod), kcm_tolerations(false), "{node}");
        assert_eq!(pod.labels().get("controller-revision-hash"), Some(&hash));
        assert_eq!(
            pod.labels()
                .get("pod-template-generation")
                .map(String::as_str),
            Some("1")
        );
        let owner = controller_of(&pod.metadata).expect("a controller");
        assert_eq!(
            (owner.kind.as_str(), Some(owner.uid.clone())),
            ("DaemonSet", ds.uid())
        );
    }
    let created = wait_for_event(&client, "SuccessfulCreate", |n| {
        n.starts_with("Created pod: agent-")
    })
    .await;
    assert!(
        by_node
            .values()
            .any(|p| created == format!("Created pod: {}", p.name_any()))
    );

    wait_for_counts(&api, "agent", (3, 3, 0, 0, 3, 0, 3)).await;
    let n1 = by_node["n1"].name_any();
    support::set_pod_running(&pods, &n1, true).await;
    wait_for_counts(&api, "agent", (3, 3, 0, 1, 3, 1, 2)).await;
    support::run_pods(&pods, SELECTOR, true).await;
    let ds = wait_for_counts(&api, "agent", (3, 3, 0, 3, 3, 3, 0)).await;
    assert_eq!(ds.status.and_then(|s| s.collision_count), None);
    support::set_pod_running(&pods, &n1, false).await;
    wait_for_counts(&api, "agent", (3, 3, 0, 2, 3, 2, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn node_selectors_and_taints_choose_the_nodes() {
    let (env, _running) = support::cluster("daemonset").await;
    let client = env.client();
    add_node(&client, "edge-1", json!({"role": "edge"}), json!([])).await;
    add_node(&client, "core-1", json!({"role": "core"}), json!([])).await;
    add_node(
        &client,
        "edge-gpu",
        json!({"role": "edge"}),
        json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
    )
    .await;
    // kcm's own tolerations cover a cordoned node.
    add_node(
        &client,
        "edge-cordoned",
        json!({"role": "edge"}),
        json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
    )
    .await;
    let api = create(
        &client,
        &daemon_set(
            "agent",
            json!({}),
            json!({"nodeSelector": {"role": "edge"}, "hostNetwork": true}),
        ),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let by_node = wait_for_nodes(&pods, &["edge-1", "edge-cordoned"]).await;
    assert_eq!(tolerations(&by_node["edge-1"]), kcm_tolerations(true));
    wait_for_counts(&api, "agent", (2, 2, 0, 0, 2, 0, 2)).await;

    // Relabelled out of the selector: its pod goes.
    let nodes: Api<Node> = Api::all(client.clone());
    let relabel = json!({"metadata": {"labels": {"role": "core"}}});
    nodes
        .patch("edge-1", &PatchParams::default(), &Patch::Merge(relabel))
        .await
        .expect("relabelled");
    wait_for_nodes(&pods, &["edge-cordoned"]).await;
    wait_for_counts(&api, "agent", (1, 1, 0, 0, 1, 0, 1)).await;
    let deleted = by_node["edge-1"].name_any();
    wait_for_event(&client, "SuccessfulDelete", |n| {
        n == format!("Deleted pod: {deleted}")
    })
    .await;

    // A NoExecute taint the pods do not tolerate evicts; a toleration lets them back.
    let taint = json!({"spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}});
    nodes
        .patch(
            "edge-cordoned",
            &PatchParams::default(),
            &Patch::Merge(taint),
        )
        .await
        .expect("tainted");
    support::wait_for_list(&pods, SELECTOR, WAIT, |items| live(items).is_empty()).await;
    let tolerate = json!({"spec": {"template": {"spec": {"tolerations": [
        {"key": "gpu", "operator": "Exists"}, {"key": "maintenance", "operator": "Exists"}]}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Merge(tolerate))
        .await
        .expect("tolerations added");
    wait_for_nodes(&pods, &["edge-gpu", "edge-cordoned"]).await;
}

#[tokio::test(start_paused = true)]
async fn nodes_added_and_deleted_gain_and_lose_their_pod() {
    let (env, _running) = support::cluster("daemonset-controller").await;
    let client = env.client();
    add_node(&client, "n1", json!({}), json!([])).await;
    let api = create(&client, &daemon_set("agent", json!({}), json!({}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for_nodes(&pods, &["n1"]).await;

    add_node(&client, "n2", json!({}), json!([])).await;
    let by_node = wait_for_nodes(&pods, &["n1", "n2"]).await;
    wait_for_counts(&api, "agent", (2, 2, 0, 0, 2, 0, 2)).await;

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete("n1", &DeleteParams::default())
        .await
        .expect("the node is deleted");
    wait_for_nodes(&pods, &["n2"]).await;
    assert!(
        pods.get_opt(&by_node["n1"].name_any())
            .await
            .expect("read")
            .is_none()
    );
    wait_for_counts(&api, "agent", (1, 1, 0, 0, 1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_pod_is_replaced_with_kcm_event() {
    let (env, _running) = support::cluster("daemonset-controller").await;
    let client = env.client();
    add_node(&client, "n1", json!({}), json!([])).await;
    create(&client, &daemon_set("agent", json!({}), json!({}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let first = wait_for_nodes(&pods, &["n1"]).await["n1"].name_any();
    support::finish_pod(&pods, &first, "Failed", 1).await;
    let note = wait_for_event(&client, "FailedDaemonPod", |_| true).await;
    assert_eq!(
        note,
        format!("Found failed daemon pod default/{first} on node n1, will try to kill it")
    );
    let second = wait_for_nodes(&pods, &["n1"]).await["n1"].name_any();
    assert_ne!(first, second);
    assert!(pods.get_opt(&first).await.expect("read").is_none());

    // Failing again at once: kcm's back-off (1s, then 2s) holds the replacement back.
    let failed_at = tokio::time::Instant::now();
    support::finish_pod(&pods, &second, "Failed", 1).await;
    support::wait_for_list(&pods, SELECTOR, WAIT, |items| {
        let live = live(items);
        live.len() == 1 && live[0].name_any() != second
    })
    .await;
    assert!(
        failed_at.elapsed() >= Duration::from_millis(500),
        "replaced after {:?}, within the back-off",
        failed_at.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_rolling_update_stays_within_max_unavailable() {
    let (env, _running) = support::cluster("daemonset-controller").await;
    let client = env.client();
    for name in ["n1", "n2", "n3"] {
        add_node(&client, name, json!({}), json!([])).await;
    }
    let api = create(&client, &daemon_set("agent", json!({}), json!({}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for_nodes(&pods, &["n1", "n2", "n3"]).await;
    support::run_pods(&pods, SELECTOR, true).await;
    wait_for_counts(&api, "agent", (3, 3, 0, 3, 3, 3, 0)).await;
    let old_hash = pods.list(&ListParams::default()).await.expect("pods").items[0].labels()
        ["controller-revision-hash"]
        .clone();

    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Merge(image))
        .await
        .expect("the image is changed");
    // Replace pod by pod: never more than one node without a ready pod.
    let mut replaced = 0;
    while replaced < 3 {
        let items = support::wait_for_list(&pods, SELECTOR, WAIT, |items| {
            live(items)
                .iter()
                .filter(|p| p.labels()["controller-revision-hash"] != old_hash)
                .count()
                > replaced
        })
        .await;
        let live = live(&items);
        let ready = live
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        assert!(
            ready + 1 >= 3,
            "more than maxUnavailable (1) pods unavailable: {ready} running"
        );
        let new: Vec<&&Pod> = live
            .iter()
            .filter(|p| p.labels()["controller-revision-hash"] != old_hash)
            .collect();
        replaced = new.len();
        for pod in new {
            support::set_pod_running(&pods, &pod.name_any(), true).await;
        }
    }
    let ds = wait_for_counts(&api, "agent", (3, 3, 0, 3, 3, 3, 0)).await;
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    let mut numbers: Vec<i64> = revisions
        .list(&ListParams::default())
        .await
        .expect("revisions")
        .items
        .iter()
        .map(|r| r.revision)
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2]);
    assert_eq!(ds.status.and_then(|s| s.observed_generation), Some(2));
}

#[tokio::test(start_paused = true)]
async fn max_surge_starts_the_new_pod_before_deleting_the_old() {
    let (env, _running) = support::cluster("daemonset-controller").await;
    let client = env.client();
    add_node(&client, "n1", json!({}), json!([])).await;
    let strategy = json!({"updateStrategy": {"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}});
    create(&client, &daemon_set("agent", strategy, json!({}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let old = wait_for_nodes(&pods, &["n1"]).await["n1"].name_any();
    support::set_pod_running(&pods, &old, true).await;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    wait_for_counts(&api, "agent", (1, 1, 0, 1, 1, 1, 0)).await;

    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Merge(image))
        .await
        .expect("the image is changed");
    let both = support::wait_for_list(&pods, SELECTOR, WAIT, |items| live(items).len() == 2).await;
    let new = both
        .iter()
        .find(|p| p.name_any() != old)
        .expect("a new pod")
        .name_any();
    // The old pod stays while the new one is not ready.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(pods.get_opt(&old).await.expect("read").is_some());
    support::set_pod_running(&pods, &new, true).await;
    support::wait_for_list(&pods, SELECTOR, WAIT, |items| {
        live(items).iter().map(|p| p.name_any()).collect::<Vec<_>>() == [new.clone()]
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn on_delete_waits_for_pods_to_be_deleted() {
    let (env, _running) = support::cluster("daemonset-controller").await;
    let client = env.client();
    add_node(&client, "n1", json!({}), json!([])).await;
    let strategy = json!({"updateStrategy": {"type": "OnDelete"}});
    let api = create(&client, &daemon_set("agent", strategy, json!({}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let old = wait_for_nodes(&pods, &["n1"]).await["n1"].name_any();
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Merge(image))
        .await
        .expect("the image is changed");
    wait_for_counts(&api, "agent", (1, 1, 0, 0, 0, 0, 1)).await;
    assert!(pods.get_opt(&old).await.expect("read").is_some());
    pods.delete(&old, &DeleteParams::default())
        .await
        .expect("deleted");
    let new = wait_for_nodes(&pods, &["n1"]).await["n1"].clone();
    assert_ne!(new.name_any(), old);
    wait_for_counts(&api, "agent", (1, 1, 0, 0, 1, 0, 1)).await;
}

#[tokio::test(start_paused = true)]
async fn orphans_are_adopted_and_unselected_pods_released() {
    let (env, _running) = support::cluster("daemonset-controller").await;
    let client = env.client();
    add_node(&client, "n1", json!({}), json!([])).await;
    add_node(&client, "n2", json!({}), json!([])).await;
    // An orphan already pinned to n1: adopted instead of a new pod there.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "agent"}},
        "spec": {
            "containers": [{"name": "agent", "image": "agent:1"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}},
        }
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &orphan)
        .await
        .expect("the orphan is created");
    // Let the controller's cache see it first: otherwise n1 gets a pod of its own, and the
    // older of the two (by creation, then name) stays, as in kcm.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // OnDelete: the adopted pod, of no known revision, is not rolled.
    let on_delete = json!({"updateStrategy": {"type": "OnDelete"}});
    let api = create(&client, &daemon_set("agent", on_delete, json!({}))).await;
    let by_node = wait_for_nodes(&pods, &["n1", "n2"]).await;
    assert_eq!(by_node["n1"].name_any(), "orphan");
    let ds = api.get("agent").await.expect("the daemon set");
    let adopted = support::wait_for(&pods, "orphan", WAIT, |p| {
        controller_of(&p.metadata).is_some()
    })
    .await;
    assert_eq!(
        controller_of(&adopted.metadata).map(|r| r.uid.clone()),
        ds.uid()
    );

    // Relabelled out of the selector: released, and n2 gets a new pod.
    let n2 = by_node["n2"].name_any();
    let relabel = json!({"metadata": {"labels": {"app": "debug"}}});
    pods.patch(&n2, &PatchParams::default(), &Patch::Merge(relabel))
        .await
        .expect("relabelled");
    support::wait_for(&pods, &n2, WAIT, |p| controller_of(&p.metadata).is_none()).await;
    let again = wait_for_nodes(&pods, &["n1", "n2"]).await;
    assert_ne!(again["n2"].name_any(), n2);
}

fn converged(world: &World, nodes: usize) -> Result<(), String> {
    let ds: DaemonSet = world.get_as("default", "agent").ok_or("no daemon set")?;
    let uid = ds.uid().unwrap_or_default();
    let pods: Vec<Pod> = world
        .list("pods")
        .filter_map(|(_, v)| serde_json::from_value::<Pod>(v.clone()).ok())
        .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let on: BTreeSet<String> = pods.iter().filter_map(pinned_node).collect();
    if pods.len() != nodes || on.len() != nodes {
        return Err(format!(
            "{} pods on {} nodes, want {nodes}",
            pods.len(),
            on.len()
        ));
    }
    let n = i32::try_from(nodes).unwrap_or(0);
    let observed = ds.status.as_ref().and_then(|s| s.observed_generation) == ds.metadata.generation;
    if !observed || counts(&ds) != (n, n, 0, 0, n, 0, n) {
        return Err(format!("status {:?}", ds.status));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_a_hot_loop() {
    let plans = (1..=5).map(FaultPlan::random);
    for plan in plans {
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env
            .invariants()
            .watch::<DaemonSet>()
            .watch::<Pod>()
            .watch::<ControllerRevision>()
            .start()
            .await;
        let running = support::controllers(&env, "daemonset-controller").await;
        let direct = env.direct_client();
        for name in ["n1", "n2", "n3"] {
            add_node(&direct, name, json!({}), json!([])).await;
        }
        let faults = plan.spawn(&env.faults());
        create(&direct, &daemon_set("agent", json!({}), json!({}))).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        add_node(&direct, "n4", json!({}), json!([])).await;
        faults.await.expect("the plan ran");

        check
            .converges(Duration::from_secs(60), |world| converged(world, 4))
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(12)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .idempotent(Duration::from_secs(30), async {
                running.stop().await.expect("stopped");
                support::controllers(&env, "daemonset-controller").await
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
