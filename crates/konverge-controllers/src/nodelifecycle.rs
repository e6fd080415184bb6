//! kcm's node lifecycle controller (`pkg/controller/nodelifecycle`) and, in
//! [`taint_eviction`], its taint eviction controller (`pkg/controller/tainteviction`).
//!
//! The node lifecycle controller watches each node's health signals — its `Ready`
//! condition's `lastHeartbeatTime` and its Lease in `kube-node-lease` — and remembers, on its
//! own clock, when either last moved (so clock skew between kubelet and controller does not
//! matter, as in kcm). A node that sends neither for the grace period
//! (`--node-monitor-grace-period`, 50 s in 1.33; 60 s for a node that never posted a status)
//! gets its `Ready`, `MemoryPressure`, `DiskPressure` and `PIDPressure` conditions set to
//! `Unknown` (reason `NodeStatusUnknown`, message `Kubelet stopped posting node status.`),
//! and its pods are marked not Ready.
//!
//! Taints follow the conditions:
//! - `node.kubernetes.io/not-ready:NoExecute` while `Ready` is False and
//!   `node.kubernetes.io/unreachable:NoExecute` while it is Unknown (the two are swapped, never
//!   both), removed when the node is Ready again;
//! - the `NoSchedule` taints the scheduler reads (kcm's TaintNodesByCondition):
//!   `not-ready`, `unreachable`, `memory-pressure`, `disk-pressure`, `pid-pressure`,
//!   `network-unavailable` from the conditions, `unschedulable` from `spec.unschedulable`.
//!
//! kcm adds `NoExecute` taints through a rate-limited queue per zone (0.1 nodes a second, less
//! in a partially disrupted zone). Here they are added at once, and of kcm's zone states only
//! the one that matters most is kept: when every node is not Ready (the control plane, not the
//! nodes, is probably cut off), no `NoExecute` taint is added and those there are removed, and
//! when some node is Ready again every node's health clock restarts — so a controller that
//! lost sight of all its nodes never evicts everything.

pub mod taint_eviction;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, ObjectReference, Pod, PodCondition, Taint};
use konverge_runtime::cache::Change;
use konverge_runtime::predicate;
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use serde_json::json;

use crate::clock::Clock;
use crate::descriptor::{Descriptor, Setup};
use crate::error::Result;
use crate::events::Events;
use crate::informers;

/// kcm's node lifecycle controller.
pub const NODE_LIFECYCLE: Descriptor = Descriptor {
    name: "node-lifecycle-controller",
    aliases: &["nodelifecycle"],
    service_account: "node-controller",
    add,
};

pub use taint_eviction::TAINT_EVICTION;

/// The taint of a node whose `Ready` condition is False.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint of a node whose `Ready` condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a node with `spec.unschedulable`.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// The namespace of the nodes' Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The label that keeps a node out of kcm's disruption checks.
const EXCLUDE_DISRUPTION: &str = "node.kubernetes.io/exclude-disruption";

/// The node lifecycle controller's settings (kcm's flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a node may send no heartbeat before it is Unknown
    /// (`--node-monitor-grace-period`, 50 s since 1.32).
    pub node_monitor_grace_period: Duration,
    /// The same for a node that never posted a status (`--node-startup-grace-period`, 60 s).
    pub node_startup_grace_period: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_monitor_grace_period: Duration::from_secs(50),
            node_startup_grace_period: Duration::from_secs(60),
        }
    }
}

/// What was last observed of a node's health, on the controller's clock (kcm's
/// `nodeHealthData`).
#[derive(Clone, Debug)]
struct Health {
    probe: Timestamp,
    ready: Option<NodeCondition>,
    lease_renewed: Option<Timestamp>,
}

struct Ctx {
    client: kube::Client,
    clock: Clock,
    config: Config,
    events: Events,
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: Store<Pod>,
    health: Mutex<HashMap<String, Health>>,
    known: Mutex<BTreeSet<String>>,
    /// Nodes whose pods still have to be marked not Ready (kcm's `nodesToRetry`).
    retry: Mutex<BTreeSet<String>>,
    /// Whether every node was not Ready at the last look (kcm's full disruption).
    all_disrupted: Mutex<bool>,
}

fn add(manager: &mut Manager, setup: Setup) {
    add_with(manager, setup, Config::default());
}

/// Adds the node lifecycle controller with `config` instead of kcm's defaults.
pub fn add_with(manager: &mut Manager, setup: Setup, config: Config) {
    let nodes = informers::cache::<Node>(manager);
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), "node-controller"),
        client: setup.client,
        clock: setup.clock,
        config,
        nodes: nodes.clone(),
        leases: informers::cache::<Lease>(manager),
        pods: informers::pods_by_node(manager),
        health: Mutex::new(HashMap::new()),
        known: Mutex::new(BTreeSet::new()),
        retry: Mutex::new(BTreeSet::new()),
        all_disrupted: Mutex::new(false),
    });
    let controller = informers::controller::<Node>(manager)
        .named("node-lifecycle")
        // Heartbeats are status writes: every change counts.
        .with_predicate(predicate::always())
        .watches_cached(
            informers::api::<Lease>(manager),
            informers::config(),
            |change: &Change<Lease>| {
                if change.key.namespace.as_deref() == Some(NODE_LEASE_NAMESPACE) {
                    vec![ObjectKey::cluster(change.key.name.clone())]
                } else {
                    Vec::new()
                }
            },
        )
        .watches_cached(
            informers::api::<Node>(manager),
            informers::config(),
            move |change: &Change<Node>| {
                // A node turning Ready or not may move the cluster in or out of full
                // disruption, which changes what every node should carry.
                let ready = |n: &Option<Arc<Node>>| n.as_deref().map(crate::podgc::node_is_ready);
                if ready(&change.old) == ready(&change.new) {
                    return Vec::new();
                }
                nodes.keys()
            },
        );
    manager.add(controller, reconcile, ctx);
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action> {
    let name = node.name_any();
    let newly_known = ctx
        .known
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.clone());
    if newly_known {
        record_node_event(
            &ctx,
            &node,
            EventType::Normal,
            "RegisteredNode",
            format!("Registered Node {name} in Controller"),
        );
    }
    let update = try_update_health(&ctx, &node).await?;
    let Some(current) = update.current.clone() else {
        return Ok(update.next);
    };
    let node = update.node;
    let all_disrupted = track_full_disruption(&ctx, &name, &current);
    let node = sync_taints(&ctx, &node, &update.observed, all_disrupted).await?;
    mark_pods_not_ready_if_needed(&ctx, &node, &update.observed, &current).await?;
    Ok(update.next)
}

struct HealthUpdate {
    node: Node,
    observed: NodeCondition,
    current: Option<NodeCondition>,
    next: Action,
}

fn condition<'n>(node: &'n Node, type_: &str) -> Option<&'n NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// kcm's `tryUpdateNodeHealth`: moves the probe time when a heartbeat arrived, and past the
/// grace period sets the kubelet's conditions to Unknown.
async fn try_update_health(ctx: &Ctx, node: &Node) -> Result<HealthUpdate> {
    let name = node.name_any();
    let now = ctx.clock.now();
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let current = condition(node, "Ready").cloned();
    let (observed, grace) = match &current {
        Some(c) => (c.clone(), ctx.config.node_monitor_grace_period),
        None => (
            NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                last_transition_time: node.metadata.creation_timestamp.clone(),
                ..NodeCondition::default()
            },
            ctx.config.node_startup_grace_period,
        ),
    };
    let lease_renewed = ctx
        .leases
        .get(&ObjectKey::namespaced(NODE_LEASE_NAMESPACE, &name))
        .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0));
    let health = {
        let mut map = ctx.health.lock().unwrap_or_else(|e| e.into_inner());
        let saved = map.get(&name).cloned();
        let mut health = match (&saved, &current) {
            (None, None) => Health {
                probe: created,
                ready: None,
                lease_renewed: None,
            },
            (None, Some(_)) => Health {
                probe: now,
                ready: current.clone(),
                lease_renewed: None,
            },
            (Some(saved), _) => {
                let saved_ready = saved.ready.as_ref();
                let heartbeat_moved = match (saved_ready, current.as_ref()) {
                    (None, Some(_)) | (Some(_), None) => true,
                    (Some(a), Some(b)) => a.last_heartbeat_time != b.last_heartbeat_time,
                    (None, None) => false,
                };
                if heartbeat_moved {
                    Health {
                        probe: now,
                        ready: current.clone(),
                        lease_renewed: saved.lease_renewed,
                    }
                } else {
                    saved.clone()
                }
            }
        };
        if let Some(renewed) = lease_renewed
            && health.lease_renewed.is_none_or(|seen| seen < renewed)
        {
            health.lease_renewed = Some(renewed);
            health.probe = now;
        }
        map.insert(name.clone(), health.clone());
        health
    };
    let deadline = health
        .probe
        .saturating_add(SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX);
    if now <= deadline {
        let wait = Duration::try_from(deadline.duration_since(now)).unwrap_or(Duration::ZERO);
        return Ok(HealthUpdate {
            node: node.clone(),
            observed,
            current,
            next: Action::requeue(wait + Duration::from_secs(1)),
        });
    }
    let mut updated = node.clone();
    mark_conditions_unknown(&mut updated, &ctx.clock);
    let new_ready = condition(&updated, "Ready").cloned();
    if new_ready.as_ref() == Some(&observed) && current.is_some() {
        return Ok(HealthUpdate {
            node: updated,
            observed,
            current,
            next: Action::await_change(),
        });
    }
    let api: Api<Node> = Api::all(ctx.client.clone());
    let written = api
        .replace_status(&name, &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    ctx.health.lock().unwrap_or_else(|e| e.into_inner()).insert(
        name,
        Health {
            probe: health.probe,
            ready: condition(&written, "Ready").cloned(),
            lease_renewed: lease_renewed.or(health.lease_renewed),
        },
    );
    let current = condition(&written, "Ready").cloned();
    Ok(HealthUpdate {
        node: written,
        observed,
        current,
        next: Action::await_change(),
    })
}

/// The conditions the kubelet owns become Unknown (kcm leaves `NetworkUnavailable` alone);
/// one never posted is added as `NodeStatusNeverUpdated`.
fn mark_conditions_unknown(node: &mut Node, clock: &Clock) {
    let now = clock.now_time();
    let created = node.metadata.creation_timestamp.clone();
    let conditions = node
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    for type_ in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            None => conditions.push(NodeCondition {
                type_: type_.into(),
                status: "Unknown".into(),
                reason: Some("NodeStatusNeverUpdated".into()),
                message: Some("Kubelet never posted node status.".into()),
                last_heartbeat_time: created.clone(),
                last_transition_time: Some(now.clone()),
            }),
            Some(c) if c.status != "Unknown" => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(now.clone());
            }
            Some(_) => {}
        }
    }
}

/// Whether every node (but those excluded from disruption checks) is not Ready, with `name`
/// counted as `current` says; on the way out of that state every node's health clock
/// restarts, as kcm does when it leaves full disruption.
fn track_full_disruption(ctx: &Ctx, name: &str, current: &NodeCondition) -> bool {
    let mut counted = 0;
    let mut ready = 0;
    for node in ctx.nodes.list() {
        if node.labels().contains_key(EXCLUDE_DISRUPTION) {
            continue;
        }
        counted += 1;
        let is_ready = if node.name_any() == name {
            current.status == "True"
        } else {
            crate::podgc::node_is_ready(&node)
        };
        if is_ready {
            ready += 1;
        }
    }
    let all = counted > 0 && ready == 0;
    let mut was = ctx.all_disrupted.lock().unwrap_or_else(|e| e.into_inner());
    if *was && !all {
        let now = ctx.clock.now();
        for health in ctx
            .health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values_mut()
        {
            health.probe = now;
        }
    }
    *was = all;
    all
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        ..Taint::default()
    }
}

/// The `NoSchedule` taint each condition status calls for (kcm's
/// `nodeConditionToTaintKeyStatusMap`).
fn condition_taint_key(type_: &str, status: &str) -> Option<&'static str> {
    match (type_, status) {
        ("Ready", "False") => Some(TAINT_NOT_READY),
        ("Ready", "Unknown") => Some(TAINT_UNREACHABLE),
        ("MemoryPressure", "True") => Some("node.kubernetes.io/memory-pressure"),
        ("DiskPressure", "True") => Some("node.kubernetes.io/disk-pressure"),
        ("NetworkUnavailable", "True") => Some("node.kubernetes.io/network-unavailable"),
        ("PIDPressure", "True") => Some("node.kubernetes.io/pid-pressure"),
        _ => None,
    }
}

/// Whether this controller owns `taint` (adds and removes it).
fn managed(taint: &Taint) -> bool {
    match taint.effect.as_str() {
        "NoSchedule" => {
            taint.key == TAINT_UNSCHEDULABLE
                || [
                    TAINT_NOT_READY,
                    TAINT_UNREACHABLE,
                    "node.kubernetes.io/memory-pressure",
                    "node.kubernetes.io/disk-pressure",
                    "node.kubernetes.io/network-unavailable",
                    "node.kubernetes.io/pid-pressure",
                ]
                .contains(&taint.key.as_str())
        }
        "NoExecute" => taint.key == TAINT_NOT_READY || taint.key == TAINT_UNREACHABLE,
        _ => false,
    }
}

/// The taints this controller wants on `node` (kcm's `doNoScheduleTaintingPass` and the
/// `NoExecute` part of `processTaintBaseEviction`, which reads the Ready condition as the
/// kubelet left it, `observed`).
fn wanted_taints(node: &Node, observed: &NodeCondition, all_disrupted: bool) -> Vec<Taint> {
    let mut wanted: Vec<Taint> = node
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter_map(|c| condition_taint_key(&c.type_, &c.status))
        .map(|key| taint(key, "NoSchedule"))
        .collect();
    if node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
    {
        wanted.push(taint(TAINT_UNSCHEDULABLE, "NoSchedule"));
    }
    if !all_disrupted {
        match observed.status.as_str() {
            "False" => wanted.push(taint(TAINT_NOT_READY, "NoExecute")),
            "Unknown" => wanted.push(taint(TAINT_UNREACHABLE, "NoExecute")),
            _ => {}
        }
    }
    wanted
}

/// Swaps the controller's taints for the wanted ones in one write, keeping every other
/// taint and the `timeAdded` of those that stay (kcm's `SwapNodeControllerTaint`).
async fn sync_taints(
    ctx: &Ctx,
    node: &Node,
    observed: &NodeCondition,
    all_disrupted: bool,
) -> Result<Node> {
    let wanted = wanted_taints(node, observed, all_disrupted);
    let existing: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let same = |a: &Taint, b: &Taint| a.key == b.key && a.effect == b.effect;
    let mut taints: Vec<Taint> = existing
        .iter()
        .filter(|t| !managed(t) || wanted.iter().any(|w| same(w, t)))
        .cloned()
        .collect();
    let now = ctx.clock.now_time();
    for mut w in wanted {
        if !taints.iter().any(|t| same(t, &w)) {
            w.time_added = Some(now.clone());
            taints.push(w);
        }
    }
    if taints == existing {
        return Ok(node.clone());
    }
    let patch = json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": taints},
    });
    let api: Api<Node> = Api::all(ctx.client.clone());
    let written = api
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(written)
}

/// kcm marks a node's pods not Ready when the controller itself turned the node from Ready
/// to not Ready (the kubelet, which would, is gone), retrying until every pod is marked.
async fn mark_pods_not_ready_if_needed(
    ctx: &Ctx,
    node: &Node,
    observed: &NodeCondition,
    current: &NodeCondition,
) -> Result<()> {
    let name = node.name_any();
    let transition = current.status != "True" && observed.status == "True";
    if transition {
        record_node_event(
            ctx,
            node,
            EventType::Normal,
            "NodeNotReady",
            format!("Node {name} status is now: NodeNotReady"),
        );
    }
    let retry = ctx
        .retry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&name);
    if !(transition || (retry && observed.status != "True")) {
        ctx.retry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        return Ok(());
    }
    if let Err(error) = mark_pods_not_ready(ctx, &name).await {
        ctx.retry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name);
        return Err(error);
    }
    ctx.retry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&name);
    Ok(())
}

/// kcm's `MarkPodsNotReady`: each pod on the node gets `Ready` False, and a `NodeNotReady`
/// warning.
async fn mark_pods_not_ready(ctx: &Ctx, node: &str) -> Result<()> {
    for pod in informers::pods_on(&ctx.pods, node) {
        let Some(ready) = crate::pods::condition(&pod, "Ready") else {
            continue;
        };
        let mut updated = pod.as_ref().clone();
        let condition = PodCondition {
            status: "False".into(),
            ..ready.clone()
        };
        if !crate::podgc::update_pod_condition(&mut updated, condition, &ctx.clock) {
            continue;
        }
        let api: Api<Pod> =
            Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
        match api
            .replace_status(&pod.name_any(), &PostParams::default(), &updated)
            .await
        {
            Ok(_) => ctx.events.warning(
                pod.as_ref(),
                "NodeNotReady",
                "Node is not ready".to_string(),
            ),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// kcm's `RecordNodeEvent`: events about a node name it by name and uid.
fn record_node_event(ctx: &Ctx, node: &Node, type_: EventType, reason: &str, message: String) {
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.name_any()),
        uid: node.uid(),
        ..ObjectReference::default()
    };
    ctx.events.record(reference, type_, reason, message);
}
