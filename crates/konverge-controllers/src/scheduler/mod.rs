//! kube-scheduler's default profile (`pkg/scheduler`), as a konverge-runtime controller of
//! Pods.
//!
//! A pod is ours when its `spec.schedulerName` is `default-scheduler` (or unset), it has no
//! `spec.nodeName` and it is not being deleted. Each reconcile is one scheduling cycle for
//! one pod, against the shared caches of Nodes and Pods:
//!
//! - **PreFilter**, once per cycle, what the pod-aware filters need: PodTopologySpread's
//!   matching pods per domain of each `DoNotSchedule` constraint (`spread.rs`), and
//!   InterPodAffinity's counts per topology domain of the placed pods that match the pod's
//!   required terms and of those whose required anti-affinity matches the pod (`affinity.rs`;
//!   the placed pods' terms are parsed once and kept by uid, `terms.rs`). A pod whose affinity
//!   selectors do not parse is turned down for every node (`0/3 nodes are available: parsing
//!   pod: requiredAffinityTerms: "Equals" is not a valid label selector operator. ...`); a
//!   spread selector that does not parse is kube's scheduler error (`PodScheduled` reason
//!   `SchedulerError`, `running PreFilter plugin "PodTopologySpread": ...`);
//! - **filters**, in the default profile's order, the first failing one deciding for a node:
//!   NodeUnschedulable (a cordoned node, unless the pod tolerates
//!   `node.kubernetes.io/unschedulable:NoSchedule`), TaintToleration (`NoSchedule` and
//!   `NoExecute` taints), NodeAffinity (`nodeSelector` and required node affinity, with
//!   `matchFields` on `metadata.name`), NodeResourcesFit (the pod's requests — init
//!   containers by kube's max rule, sidecars, overhead — against allocatable less what the
//!   node's pods request, and the pod count), PodTopologySpread (`maxSkew`, `minDomains`,
//!   `nodeAffinityPolicy`, `nodeTaintsPolicy`, `matchLabelKeys`), InterPodAffinity (the
//!   pod's required affinity and anti-affinity, with `namespaces` and `namespaceSelector`,
//!   the first pod of a self-affine group let in, and the placed pods' required
//!   anti-affinity). NodeName never fails here: a pod naming its node is not the
//!   scheduler's. Every plugin counts the pods assumed by earlier cycles;
//! - **scores**, weighted as the default profile: NodeResourcesFit least-allocated (cpu and
//!   memory) 1, NodeResourcesBalancedAllocation 1, TaintToleration (`PreferNoSchedule`) 3,
//!   NodeAffinity (preferred terms) 2, PodTopologySpread (`ScheduleAnyway` constraints, or
//!   kube's system defaults — `kubernetes.io/hostname` maxSkew 3, `topology.kubernetes.io/zone`
//!   maxSkew 5, selected by the pod's Services and its ReplicaSet, ReplicationController or
//!   StatefulSet — for a pod without constraints) 2, InterPodAffinity (preferred terms, the
//!   placed pods' preferred terms and their required affinity at `hardPodAffinityWeight` 1)
//!   2. kube-scheduler picks at random among the nodes with the top score; here the first by
//!   name wins, so placement is reproducible;
//! - **bind**: the pod is *assumed* on the node (counted on it until the cache shows it
//!   bound, as kube-scheduler's cache does, so the next cycle does not see a stale node),
//!   then bound by POSTing a `Binding` to `pods/<name>/binding`, and an Event `Scheduled`
//!   "Successfully assigned <ns>/<pod> to <node>" is recorded from `default-scheduler`;
//! - **failure**: the `PodScheduled` condition goes `False` with reason `Unschedulable` and
//!   kube-scheduler's `FitError` message (`0/3 nodes are available: 3 Insufficient cpu.
//!   preemption: ...`), with an Event `FailedScheduling` carrying the same message. The pod
//!   is tried again when a Node is added or changes (labels, taints, allocatable, cordon) or
//!   an assigned Pod goes away (or, for a pod turned down by PodTopologySpread or
//!   InterPodAffinity, a pod is placed or a placed pod relabelled), no sooner than its back-off (1 s doubling to 10 s,
//!   kube-scheduler's `podInitialBackoffSeconds`/`podMaxBackoffSeconds`), and at the latest
//!   after 5 minutes (`podMaxInUnschedulablePodsDuration`).
//!
//! A cycle reads the scheduler's own cache of nodes and the pods counted on them
//! (`cache.rs`, kube-scheduler's internal cache): each node's summed requests, its pods
//! and those with pod affinity (terms parsed once), and for the selectors PodTopologySpread
//! asks about, the matching pods per node. The informers' events keep it current, so a
//! cycle costs O(nodes), not O(pods), and an assumed pod counts from the moment it is
//! chosen until its Binding shows (or fails and it is forgotten).
//!
//! Cycles run one at a time (the choice and the assumption are made under one async lock,
//! as kube-scheduler's single scheduling loop makes them) while up to 32 pods' bindings are
//! in flight, as kube-scheduler binds asynchronously.
//!
//! - **preemption** (DefaultPreemption, without PodDisruptionBudgets): when no node fits and
//!   the pod may preempt (`preemptionPolicy` is not `Never`), the nodes turned down only for
//!   reasons removing pods may change (room, spread skew, anti-affinity) are tried: every
//!   lower-priority pod is taken off (the spread and affinity counts following), the most
//!   important put back while the pod still passes every filter, and the node whose victims
//!   matter least is picked (lowest top priority, then lowest priority sum, then fewest,
//!   then by name). A node where that fails says why in the preemption message (no
//!   lower-priority pod, or the filters' reasons with them all gone). The victims get
//!   the `DisruptionTarget` condition (`PreemptionByScheduler`), are deleted, and get an
//!   Event `Preempted`; the pod gets `status.nominatedNodeName` and is bound once the room
//!   shows in the cache. Unlike kube-scheduler, nominated pods do not hold their room
//!   against other pending pods.
//!
//! Where the pod-aware plugins differ from kube-scheduler 1.33: `matchLabelKeys` and
//! `mismatchLabelKeys` of pod affinity terms are merged into the selector by
//! kube-apiserver when the pod is created, not here (kube-scheduler does not read them
//! either); the nodes are not sampled (`percentageOfNodesToScore`): every node is filtered
//! and scored; and preemption, like kube's, never removes pods to satisfy the pod's own
//! required affinity (a node failing it is not a candidate).

mod affinity;
mod cache;
mod framework;
mod resources;
mod spread;
mod terms;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ReplicationController, Service};
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::clock::Clock;
use crate::error::Result;
use crate::events::Events;
use crate::informers;

/// The field manager of the scheduler's writes (kube-scheduler's user agent's first word).
const FIELD_MANAGER: &str = "kube-scheduler";

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}
use affinity::{AffinityFilter, AffinityScore, Incoming, Placed};
use cache::ClusterCache;
use framework::{NodeFilters, NodeInfo, Normalize, PodRequest, Rejection};
use spread::{Owners, SpreadFilter};
use terms::PodTerms;

/// The scheduler's name: pods naming it (or no scheduler) are scheduled here, and its
/// Events come from it.
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// kube-scheduler's `podInitialBackoffSeconds`.
const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// kube-scheduler's `podMaxBackoffSeconds`.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// kube-scheduler's `podMaxInUnschedulablePodsDuration`: an unschedulable pod is tried
/// again after this even if nothing it waits for changed.
const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);
/// How many pods the scheduler's workers hold at once: one of them is in a cycle, the
/// others wait for their turn or for their Binding to be answered (kube-scheduler binds
/// in goroutines of their own while its loop goes on). Under load a Binding is answered in
/// 10-20 ms; 32 in flight held a 10,000-pod scale-up under 1,000 bound per second.
const BINDINGS_IN_FLIGHT: usize = 128;

/// A pod's failed attempts and when it may be tried again.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    attempts: u32,
    until: Timestamp,
}

#[derive(Debug, Default)]
struct State {
    /// Back-off of pods that failed, by key.
    backoff: HashMap<ObjectKey, Backoff>,
    /// Pods turned down by InterPodAffinity or PodTopologySpread: a pod placed or
    /// relabelled may let them in (kube's queueing hints for Pod add and update).
    waiting_for_pods: HashSet<ObjectKey>,
}

struct Ctx {
    client: kube::Client,
    clock: Clock,
    events: Events,
    caches: Caches,
    state: Mutex<State>,
    /// Nodes and the pods counted on them, kept current by the informers' events.
    cluster: Mutex<ClusterCache>,
    /// Held for a whole scheduling cycle: cycles run one at a time, as kube-scheduler's
    /// single loop runs them, while bindings proceed concurrently. An async lock, so
    /// workers waiting for their turn leave the runtime's threads free.
    cycle: tokio::sync::Mutex<()>,
}

/// The shared caches a scheduling cycle reads besides its own [`ClusterCache`].
struct Caches {
    nodes: Store<Node>,
    pods: Store<Pod>,
    namespaces: Store<Namespace>,
    owners: Owners,
}

impl Caches {
    /// Whether every cache the cycle reads has been listed.
    fn ready(&self) -> bool {
        self.nodes.is_ready()
            && self.pods.is_ready()
            && self.namespaces.is_ready()
            && self.owners.services.is_ready()
            && self.owners.replication_controllers.is_ready()
            && self.owners.replica_sets.is_ready()
            && self.owners.stateful_sets.is_ready()
    }
}

/// Adds kube-scheduler to `manager`: it reads Nodes and Pods from the manager's shared
/// caches and writes (bindings, pod status, Events) through `client`.
pub fn add(manager: &mut Manager, client: kube::Client, clock: Clock) {
    let ctx = Arc::new(Ctx {
        events: Events::new(client.clone(), SCHEDULER_NAME),
        client,
        clock,
        caches: Caches {
            nodes: informers::cache::<Node>(manager),
            pods: informers::cache::<Pod>(manager),
            namespaces: informers::cache::<Namespace>(manager),
            owners: Owners {
                services: informers::cache::<Service>(manager),
                replication_controllers: informers::cache::<ReplicationController>(manager),
                replica_sets: informers::cache::<ReplicaSet>(manager),
                stateful_sets: informers::cache::<StatefulSet>(manager),
            },
        },
        state: Mutex::new(State::default()),
        cluster: Mutex::new(ClusterCache::default()),
        cycle: tokio::sync::Mutex::new(()),
    });
    let on_node = {
        let ctx = ctx.clone();
        move |change: &Change<Node>| {
            let mut cluster = ctx.lock_cluster();
            cluster.apply_node(change);
            if node_change_may_help(change) {
                cluster.pending()
            } else {
                Vec::new()
            }
        }
    };
    let on_pod = {
        let ctx = ctx.clone();
        move |change: &Change<Pod>| {
            let (effect, pending) = {
                let mut cluster = ctx.lock_cluster();
                let effect = cluster.apply_pod(change);
                let pending = effect.freed_room.then(|| cluster.pending());
                (effect, pending)
            };
            if change.new.is_none() {
                ctx.forget(&change.key);
            }
            match pending {
                Some(pending) => pending,
                None if effect.may_match => ctx.lock().waiting_for_pods.drain().collect(),
                None => Vec::new(),
            }
        }
    };
    let controller = informers::controller::<Pod>(manager)
        .named("scheduler")
        .concurrency(BINDINGS_IN_FLIGHT)
        .with_predicate(|old: Option<&Pod>, new: &Pod| {
            old.is_none_or(|old| {
                old.spec != new.spec
                    || old.metadata.labels != new.metadata.labels
                    || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
            })
        })
        .watches_cached(
            informers::api::<Node>(manager),
            informers::config(),
            on_node,
        )
        .watches_cached(informers::api::<Pod>(manager), informers::config(), on_pod);
    manager.add(controller, reconcile, ctx);
}

/// Whether the pod is this scheduler's to place.
fn is_ours(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let scheduler = spec.and_then(|s| s.scheduler_name.as_deref()).unwrap_or("");
    (scheduler.is_empty() || scheduler == SCHEDULER_NAME)
        && spec
            .and_then(|s| s.node_name.as_deref())
            .is_none_or(str::is_empty)
        && pod.metadata.deletion_timestamp.is_none()
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// kube-scheduler's cache holds assigned pods that have not finished.
fn occupies_node(pod: &Pod) -> bool {
    node_name(pod).is_some()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// A node added, or changed in what the filters read (kube-scheduler's queueing hints for
/// Node add and update): heartbeats alone do not wake pending pods.
fn node_change_may_help(change: &Change<Node>) -> bool {
    match (&change.old, &change.new) {
        (None, Some(_)) => true,
        (Some(old), Some(new)) => {
            old.spec != new.spec
                || old.metadata.labels != new.metadata.labels
                || old.status.as_ref().and_then(|s| s.allocatable.as_ref())
                    != new.status.as_ref().and_then(|s| s.allocatable.as_ref())
        }
        _ => false,
    }
}

impl Ctx {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_cluster(&self) -> std::sync::MutexGuard<'_, ClusterCache> {
        self.cluster.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forget(&self, key: &ObjectKey) {
        let mut state = self.lock();
        state.backoff.remove(key);
        state.waiting_for_pods.remove(key);
    }
}

/// The outcome of one scheduling cycle.
enum Decision {
    /// Bind to this node (the pod is assumed there).
    Bind(String),
    /// No node fits: kube-scheduler's message, and whether a pod-affinity or spread
    /// filter was among the reasons.
    Unschedulable {
        message: String,
        waits_for_pods: bool,
    },
    /// A plugin failed on the pod itself (kube's `SchedulerError`): its message.
    Error(String),
    /// No node fits, but would once `victims` are gone from `node`: kube-scheduler's
    /// message (without a preemption part: preemption succeeded).
    Preempt {
        node: String,
        victims: Vec<Pod>,
        message: String,
    },
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action> {
    let Some(key) = ObjectKey::of(pod.as_ref()) else {
        return Ok(Action::await_change());
    };
    if !is_ours(&pod) {
        return Ok(Action::await_change());
    }
    if !ctx.caches.ready() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let now = ctx.clock.now();
    if let Some(wait) = ctx
        .lock()
        .backoff
        .get(&key)
        .and_then(|b| remaining(b.until, now))
    {
        return Ok(Action::requeue(wait));
    }
    let decision = {
        let _turn = ctx.cycle.lock().await;
        let mut cluster = ctx.lock_cluster();
        if cluster.is_placed(&uid) {
            // Bound (or being bound) already; the pod cache has not caught up.
            return Ok(Action::await_change());
        }
        cluster.next_cycle();
        let decision = schedule(&ctx.caches, &mut cluster, &pod);
        match &decision {
            Decision::Bind(node) => {
                cluster.assume(&key, &pod, node);
                drop(cluster);
                ctx.lock().waiting_for_pods.remove(&key);
            }
            Decision::Unschedulable {
                waits_for_pods: true,
                ..
            } => {
                drop(cluster);
                ctx.lock().waiting_for_pods.insert(key.clone());
            }
            _ => {}
        }
        decision
    };
    match decision {
        Decision::Bind(node) => bind(&ctx, &key, &pod, &node).await,
        Decision::Unschedulable { message, .. } => {
            let failure = Failure {
                reason: "Unschedulable",
                message,
                nominated: None,
            };
            unschedulable(&ctx, &key, &pod, failure, now).await
        }
        Decision::Error(message) => {
            let failure = Failure {
                reason: "SchedulerError",
                message,
                nominated: None,
            };
            unschedulable(&ctx, &key, &pod, failure, now).await
        }
        Decision::Preempt {
            node,
            victims,
            message,
        } => {
            preempt(&ctx, &pod, &node, &victims).await?;
            let failure = Failure {
                reason: "Unschedulable",
                message,
                nominated: Some(&node),
            };
            unschedulable(&ctx, &key, &pod, failure, now).await
        }
    }
}

fn remaining(until: Timestamp, now: Timestamp) -> Option<Duration> {
    let left = now.duration_until(until);
    Duration::try_from(left).ok().filter(|d| !d.is_zero())
}

/// The filters of one cycle, in the default profile's order: the node-local ones
/// ([`PodRequest::filter`]), then PodTopologySpread, then InterPodAffinity (each skipped when
/// its PreFilter found nothing to check). For preemption, `node` is the node being tried
/// and the plugins' counts follow the pods taken off and put back.
#[derive(Clone)]
struct Filters<'c, 'a> {
    request: &'c PodRequest<'a>,
    incoming: &'c Incoming<'a>,
    placed: &'c Placed<'a>,
    spread: Option<SpreadFilter<'a>>,
    affinity: Option<AffinityFilter<'a>>,
    node: Option<&'a Node>,
}

impl<'a> Filters<'_, 'a> {
    fn update(&mut self, pod: &Pod, delta: i64) {
        let Some(node) = self.node else {
            return;
        };
        if let Some(spread) = &mut self.spread {
            spread.update(pod, node, delta);
        }
        if let Some(affinity) = &mut self.affinity {
            affinity.update(self.incoming, self.placed, pod, node, delta);
        }
    }
}

impl NodeFilters for Filters<'_, '_> {
    fn filter(&self, node: &NodeInfo<'_>) -> std::result::Result<(), Rejection> {
        self.request.filter(node)?;
        if let Some(spread) = &self.spread {
            spread.filter(node.node)?;
        }
        if let Some(affinity) = &self.affinity {
            affinity.filter(self.incoming, node.node)?;
        }
        Ok(())
    }

    fn add(&mut self, pod: &Pod) {
        self.update(pod, 1);
    }

    fn remove(&mut self, pod: &Pod) {
        self.update(pod, -1);
    }
}

/// Whether a rejection came from a plugin that looks at other pods' labels.
fn rejected_for_pods(rejection: &Rejection) -> bool {
    rejection.reasons.iter().any(|r| {
        [
            affinity::REASON_AFFINITY,
            affinity::REASON_ANTI_AFFINITY,
            affinity::REASON_EXISTING_ANTI_AFFINITY,
            spread::REASON_SKEW,
        ]
        .contains(&r.as_str())
    })
}

/// The labels of the pod's namespace (none if it is not cached).
fn namespace_labels(caches: &Caches, pod: &Pod) -> BTreeMap<String, String> {
    let key = ObjectKey::cluster(terms::namespace(pod));
    caches
        .namespaces
        .get(&key)
        .and_then(|ns| ns.metadata.labels.clone())
        .unwrap_or_default()
}

/// One scheduling cycle: PreFilter and filter, then PreScore and score the nodes that pass.
fn schedule(caches: &Caches, cluster: &mut ClusterCache, pod: &Pod) -> Decision {
    let (nodes, matching) = cluster.parts();
    // Sorted by name: the cache keeps nodes in a BTreeMap.
    let infos: Vec<NodeInfo<'_>> = nodes.values().filter_map(|n| n.info()).collect();
    if infos.is_empty() {
        return Decision::Unschedulable {
            message: framework::NO_NODES_AVAILABLE.to_string(),
            waits_for_pods: false,
        };
    }
    let mut count = |info: &NodeInfo<'_>, selector: &_, ns: &str| {
        matching.count(nodes, ns, selector, &info.name)
    };
    let request = PodRequest::new(pod);
    // PreFilter, in the default profile's order.
    let spread = match spread::pre_filter(pod, &caches.owners, &infos, &mut count) {
        Ok(spread) => spread,
        Err(error) => {
            return Decision::Error(format!(
                "running PreFilter plugin \"PodTopologySpread\": {error}"
            ));
        }
    };
    let (mut terms, parse_error) = PodTerms::parse(pod);
    terms.merge_namespaces(&caches.namespaces);
    let incoming = Incoming {
        pod,
        terms,
        namespace_labels: namespace_labels(caches, pod),
    };
    let mut placed = Placed::default();
    for entry in nodes.values() {
        let Some(node) = entry.node() else {
            continue;
        };
        for (p, terms) in entry.with_affinity() {
            placed.insert(node, p, terms.clone());
        }
    }
    let filters = Filters {
        request: &request,
        incoming: &incoming,
        placed: &placed,
        spread,
        affinity: affinity::pre_filter(&incoming, &infos, &placed),
        node: None,
    };
    if let Some(error) = parse_error {
        // InterPodAffinity's PreFilter turns the pod down for every node.
        let rejection = Rejection {
            reasons: Vec::new(),
            resolvable: false,
        };
        let rejections = (0..infos.len()).map(|i| (i, rejection.clone())).collect();
        let pre_filter = format!("parsing pod: {error}");
        return no_fit(pod, &filters, &infos, rejections, Some(&pre_filter));
    }
    let mut feasible = Vec::new();
    let mut rejections: Vec<(usize, Rejection)> = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        match filters.filter(info) {
            Ok(()) => feasible.push(info),
            Err(rejection) => rejections.push((i, rejection)),
        }
    }
    if feasible.is_empty() {
        return no_fit(pod, &filters, &infos, rejections, None);
    }
    if let [only] = feasible.as_slice() {
        return Decision::Bind(only.name.clone());
    }
    let scored = scores(
        caches,
        &request,
        (&incoming, &placed),
        &infos,
        &feasible,
        &mut count,
    );
    match scored {
        Ok(scores) => {
            // The highest score wins; `feasible` is sorted by name and `max_by_key` keeps
            // the last of equals, so reverse it to keep the first name among equal scores.
            let best = feasible
                .iter()
                .zip(scores)
                .rev()
                .max_by_key(|(_, score)| *score)
                .map(|(n, _)| n.name.clone())
                .unwrap_or_default();
            Decision::Bind(best)
        }
        Err(error) => Decision::Error(error),
    }
}

/// PreScore and Score: each feasible node's total, as the default profile weighs its
/// plugins (the node-local ones in [`PodRequest::score`], PodTopologySpread 2,
/// InterPodAffinity 2). A PreScore plugin's failure is kube's error message.
fn scores(
    caches: &Caches,
    request: &PodRequest<'_>,
    (incoming, placed): (&Incoming<'_>, &Placed<'_>),
    infos: &[NodeInfo<'_>],
    feasible: &[&NodeInfo<'_>],
    count: &mut spread::Counter<'_>,
) -> std::result::Result<Vec<i64>, String> {
    let normalize = Normalize {
        max_taints: feasible
            .iter()
            .map(|n| request.intolerable_prefer_no_schedule(n.node))
            .max()
            .unwrap_or(0),
        max_affinity: feasible
            .iter()
            .map(|n| request.preferred_affinity(n.node))
            .max()
            .unwrap_or(0),
    };
    let mut totals: Vec<i64> = feasible
        .iter()
        .map(|n| request.score(n, &normalize))
        .collect();
    let spread = spread::pre_score(incoming.pod, &caches.owners, infos, feasible, count)
        .map_err(|e| format!("running PreScore plugin \"PodTopologySpread\": {e}"))?;
    if let Some(spread) = spread {
        let mut scores: Vec<i64> = feasible.iter().map(|n| spread.score(n)).collect();
        spread.normalize(feasible, &mut scores);
        for (total, score) in totals.iter_mut().zip(scores) {
            *total += 2 * score;
        }
    }
    if let Some(affinity) = affinity::pre_score(incoming, infos, placed) {
        let mut scores: Vec<i64> = feasible.iter().map(|n| affinity.score(n.node)).collect();
        AffinityScore::normalize(&mut scores);
        for (total, score) in totals.iter_mut().zip(scores) {
            *total += 2 * score;
        }
    }
    Ok(totals)
}

/// PostFilter: DefaultPreemption looks for a node where removing lower-priority pods lets
/// the pod pass every filter (kube's candidate order: the lowest most-important victim,
/// then the lowest sum of victim priorities, then the fewest victims; then the first by
/// name). `pre_filter` is the message of a PreFilter plugin that turned the pod down for
/// every node.
fn no_fit(
    pod: &Pod,
    filters: &Filters<'_, '_>,
    infos: &[NodeInfo<'_>],
    rejections: Vec<(usize, Rejection)>,
    pre_filter: Option<&str>,
) -> Decision {
    let nodes = infos.len();
    let waits_for_pods = rejections.iter().any(|(_, r)| rejected_for_pods(r));
    let fit_error = |post_filter: &str| {
        let all: Vec<Rejection> = rejections.iter().map(|(_, r)| r.clone()).collect();
        match pre_filter {
            Some(message) => framework::fit_error_pre_filter(nodes, message, post_filter),
            None => framework::fit_error(nodes, &all, post_filter),
        }
    };
    let unschedulable = |post_filter: &str| Decision::Unschedulable {
        message: fit_error(post_filter),
        waits_for_pods,
    };
    if !filters.request.may_preempt() {
        return unschedulable(framework::PREEMPTION_NEVER);
    }
    let priority = framework::priority(pod);
    if let Some(nominated) = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        let terminating = infos
            .iter()
            .filter(|info| info.name == nominated)
            .flat_map(|info| &info.pod_list)
            .any(|p| p.metadata.deletion_timestamp.is_some() && framework::priority(p) < priority);
        if terminating {
            return unschedulable(framework::PREEMPTION_TERMINATING);
        }
    }
    let mut tried: Vec<Vec<String>> = Vec::new();
    let mut candidates: Vec<(&str, Vec<&Pod>)> = Vec::new();
    for (i, rejection) in &rejections {
        if !rejection.resolvable {
            continue;
        }
        let info = &infos[*i];
        let mut trial = filters.clone();
        trial.node = Some(info.node);
        match framework::victims_on(info, &info.pod_list, priority, &mut trial) {
            Ok(victims) => candidates.push((info.name.as_str(), victims)),
            Err(reasons) => tried.push(reasons),
        }
    }
    let best = candidates.into_iter().min_by_key(|(_, victims)| {
        let priorities = victims.iter().map(|p| i64::from(framework::priority(p)));
        (
            priorities.clone().max().unwrap_or(i64::MIN),
            priorities.sum::<i64>(),
            victims.len(),
        )
    });
    match best {
        Some((node, victims)) => Decision::Preempt {
            node: node.to_string(),
            victims: victims.into_iter().cloned().collect(),
            message: fit_error(""),
        },
        None => unschedulable(&framework::preemption_message(nodes, &tried)),
    }
}

/// Evicts the victims as DefaultPreemption does: the `DisruptionTarget` condition, then a
/// delete, then an Event `Preempted` on each.
async fn preempt(ctx: &Ctx, preemptor: &Pod, node: &str, victims: &[Pod]) -> Result<()> {
    let uid = preemptor.metadata.uid.clone().unwrap_or_default();
    for victim in victims {
        let api: Api<Pod> =
            Api::namespaced(ctx.client.clone(), &victim.namespace().unwrap_or_default());
        let name = victim.name_any();
        let condition = json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": format!("{SCHEDULER_NAME}: preempting to accommodate a higher priority pod"),
            "lastTransitionTime": ctx.clock.now_time(),
        }]}});
        let patched = api
            .patch_status(&name, &patch_params(), &Patch::Strategic(condition))
            .await;
        match patched {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(error) => return Err(error.into()),
        }
        let preconditions = kube::api::Preconditions {
            uid: victim.metadata.uid.clone(),
            resource_version: None,
        };
        let params = kube::api::DeleteParams {
            preconditions: Some(preconditions),
            ..Default::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => continue,
            Err(error) => return Err(error.into()),
        }
        tracing::debug!(victim = %name, node, "preempted");
        ctx.events.normal(
            victim,
            "Preempted",
            format!("Preempted by pod {uid} on node {node}"),
        );
    }
    Ok(())
}

/// The binding cycle: POST the Binding; on failure the pod is no longer assumed and is
/// retried (a stale cache may have let a pod bound by another cycle through: the server's
/// 409 then ends the reconcile and the cache catches up).
async fn bind(ctx: &Ctx, key: &ObjectKey, pod: &Pod, node: &str) -> Result<Action> {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await;
    match result {
        Ok(_) => {
            ctx.lock().backoff.remove(key);
            tracing::debug!(pod = %key, node, "bound");
            ctx.events.normal(
                pod,
                "Scheduled",
                format!("Successfully assigned {namespace}/{name} to {node}"),
            );
            Ok(Action::await_change())
        }
        Err(error) => {
            if let Some(uid) = pod.metadata.uid.as_deref() {
                ctx.lock_cluster().forget(uid);
            }
            Err(error.into())
        }
    }
}

/// Why a cycle did not bind: the `PodScheduled` reason (`Unschedulable`, or
/// `SchedulerError` when a plugin failed), the message, and the node nominated for the pod
/// after preemption.
struct Failure<'n> {
    reason: &'static str,
    message: String,
    nominated: Option<&'n str>,
}

/// A pod no node fits: its condition, an Event, and when to try again.
async fn unschedulable(
    ctx: &Ctx,
    key: &ObjectKey,
    pod: &Pod,
    failure: Failure<'_>,
    now: Timestamp,
) -> Result<Action> {
    let Failure {
        reason,
        message,
        nominated,
    } = failure;
    let backoff = {
        let mut state = ctx.lock();
        let entry = state.backoff.entry(key.clone()).or_insert(Backoff {
            attempts: 0,
            until: now,
        });
        entry.attempts = entry.attempts.saturating_add(1);
        let delay = backoff_for(entry.attempts);
        entry.until = now
            .checked_add(jiff::SignedDuration::try_from(delay).unwrap_or_default())
            .unwrap_or(now);
        delay
    };
    tracing::debug!(pod = %key, %message, ?backoff, "unschedulable");
    ctx.events.warning(pod, "FailedScheduling", message.clone());
    set_unschedulable(ctx, pod, reason, &message, nominated).await?;
    Ok(Action::requeue(MAX_UNSCHEDULABLE))
}

/// kube-scheduler's back-off: 1 s doubling per failed attempt, at most 10 s.
fn backoff_for(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    INITIAL_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

/// Sets `PodScheduled` False with `reason` and `message`, unless it says that already
/// (kube's `UpdatePodCondition`: the transition time moves only when the status does).
async fn set_unschedulable(
    ctx: &Ctx,
    pod: &Pod,
    reason: &str,
    message: &str,
    nominated: Option<&str>,
) -> Result<()> {
    let current = crate::pods::condition(pod, "PodScheduled");
    let same = |c: &&k8s_openapi::api::core::v1::PodCondition| {
        c.status == "False"
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message)
    };
    let nominated_now = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref());
    let nominate = nominated.filter(|n| Some(*n) != nominated_now);
    if current.is_some_and(|c| same(&c)) && nominate.is_none() {
        return Ok(());
    }
    let transition = match current {
        Some(c) if c.status == "False" => c.last_transition_time.clone(),
        _ => None,
    }
    .unwrap_or_else(|| ctx.clock.now_time());
    let mut patch = json!({
        "status": {
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": transition,
            }],
        }
    });
    if let Some(node) = nominate {
        patch["status"]["nominatedNodeName"] = json!(node);
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    match api
        .patch_status(&pod.name_any(), &patch_params(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pre_filter_rejection_replaces_the_histogram() {
        let message = framework::fit_error_pre_filter(
            2,
            "parsing pod: requiredAffinityTerms: \"Equals\" is not a valid label selector operator",
            &framework::preemption_message(2, &[]),
        );
        assert_eq!(
            message,
            "0/2 nodes are available: parsing pod: requiredAffinityTerms: \"Equals\" is not a \
             valid label selector operator. preemption: 0/2 nodes are available: 2 Preemption \
             is not helpful for scheduling."
        );
    }

    #[test]
    fn back_off_doubles_from_one_second_to_ten() {
        let delays: Vec<u64> = (1..=6).map(|a| backoff_for(a).as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn fit_error_sorts_the_histogram_as_strings() {
        let taint = Rejection {
            reasons: vec![
                "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }".into(),
            ],
            resolvable: false,
        };
        let cpu = Rejection {
            reasons: vec!["Insufficient cpu".into()],
            resolvable: true,
        };
        let message = framework::fit_error(
            3,
            &[taint, cpu.clone(), cpu],
            &framework::preemption_message(
                3,
                &[
                    vec![framework::REASON_NO_VICTIMS.to_string()],
                    vec![framework::REASON_NO_VICTIMS.to_string()],
                ],
            ),
        );
        assert_eq!(
            message,
            "0/3 nodes are available: 1 node(s) had untolerated taint \
             {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. preemption: 0/3 \
             nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption \
             victims found for incoming pod.."
        );
    }
}
