//! kube-scheduler's default profile (`pkg/scheduler`), as a konverge-runtime controller of
//! Pods.
//!
//! A pod is ours when its `spec.schedulerName` is `default-scheduler` (or unset), it has no
//! `spec.nodeName` and it is not being deleted. Each reconcile is one scheduling cycle for
//! one pod, against the shared caches of Nodes and Pods:
//!
//! - **filters**, in the default profile's order, the first failing one deciding for a node:
//!   NodeUnschedulable (a cordoned node, unless the pod tolerates
//!   `node.kubernetes.io/unschedulable:NoSchedule`), TaintToleration (`NoSchedule` and
//!   `NoExecute` taints), NodeAffinity (`nodeSelector` and required node affinity, with
//!   `matchFields` on `metadata.name`), NodeResourcesFit (the pod's requests — init
//!   containers by kube's max rule, sidecars, overhead — against allocatable less what the
//!   node's pods request, and the pod count). NodeName never fails here: a pod naming its
//!   node is not the scheduler's;
//! - **scores**, weighted as the default profile: NodeResourcesFit least-allocated (cpu and
//!   memory) 1, NodeResourcesBalancedAllocation 1, TaintToleration (`PreferNoSchedule`) 3,
//!   NodeAffinity (preferred terms) 2. kube-scheduler picks at random among the nodes with
//!   the top score; here the first by name wins, so placement is reproducible;
//! - **bind**: the pod is *assumed* on the node (counted on it until the cache shows it
//!   bound, as kube-scheduler's cache does, so the next cycle does not see a stale node),
//!   then bound by POSTing a `Binding` to `pods/<name>/binding`, and an Event `Scheduled`
//!   "Successfully assigned <ns>/<pod> to <node>" is recorded from `default-scheduler`;
//! - **failure**: the `PodScheduled` condition goes `False` with reason `Unschedulable` and
//!   kube-scheduler's `FitError` message (`0/3 nodes are available: 3 Insufficient cpu.
//!   preemption: ...`), with an Event `FailedScheduling` carrying the same message. The pod
//!   is tried again when a Node is added or changes (labels, taints, allocatable, cordon) or
//!   an assigned Pod goes away, no sooner than its back-off (1 s doubling to 10 s,
//!   kube-scheduler's `podInitialBackoffSeconds`/`podMaxBackoffSeconds`), and at the latest
//!   after 5 minutes (`podMaxInUnschedulablePodsDuration`).
//!
//! Cycles run one at a time (the choice and the assumption are made under one lock, as
//! kube-scheduler's single scheduling loop makes them) while up to four bindings are in
//! flight, as kube-scheduler binds asynchronously.
//!
//! - **preemption** (DefaultPreemption, without PodDisruptionBudgets): when no node fits and
//!   the pod may preempt (`preemptionPolicy` is not `Never`), the nodes turned down only for
//!   room are tried: every lower-priority pod is taken off, the most important put back
//!   while the pod still fits, and the node whose victims matter least is picked (lowest
//!   top priority, then lowest priority sum, then fewest, then by name). The victims get
//!   the `DisruptionTarget` condition (`PreemptionByScheduler`), are deleted, and get an
//!   Event `Preempted`; the pod gets `status.nominatedNodeName` and is bound once the room
//!   shows in the cache. Unlike kube-scheduler, nominated pods do not hold their room
//!   against other pending pods.

mod framework;
mod resources;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::clock::Clock;
use crate::error::Result;
use crate::events::Events;
use crate::informers;
use framework::{NodeInfo, Normalize, PodRequest, Rejection};

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

/// A pod bound (or being bound) whose binding the cache has not shown yet.
#[derive(Debug)]
struct Assumed {
    uid: String,
    node: String,
    pod: Arc<Pod>,
}

/// A pod's failed attempts and when it may be tried again.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    attempts: u32,
    until: Timestamp,
}

#[derive(Debug, Default)]
struct State {
    /// Assumed pods by key (kube-scheduler's assumed pods in its cache).
    assumed: HashMap<ObjectKey, Assumed>,
    /// Back-off of pods that failed, by key.
    backoff: HashMap<ObjectKey, Backoff>,
}

struct Ctx {
    client: kube::Client,
    clock: Clock,
    events: Events,
    nodes: Store<Node>,
    pods: Store<Pod>,
    state: Mutex<State>,
}

/// Adds kube-scheduler to `manager`: it reads Nodes and Pods from the manager's shared
/// caches and writes (bindings, pod status, Events) through `client`.
pub fn add(manager: &mut Manager, client: kube::Client, clock: Clock) {
    let ctx = Arc::new(Ctx {
        events: Events::new(client.clone(), SCHEDULER_NAME),
        client,
        clock,
        nodes: informers::cache::<Node>(manager),
        pods: informers::cache::<Pod>(manager),
        state: Mutex::new(State::default()),
    });
    let on_node = {
        let pods = ctx.pods.clone();
        move |change: &Change<Node>| {
            if node_change_may_help(change) {
                pending_keys(&pods)
            } else {
                Vec::new()
            }
        }
    };
    let on_pod = {
        let ctx = ctx.clone();
        move |change: &Change<Pod>| {
            if change.new.is_none() {
                ctx.forget(&change.key);
            }
            if pod_change_frees_room(change) {
                pending_keys(&ctx.pods)
            } else {
                Vec::new()
            }
        }
    };
    let controller = informers::controller::<Pod>(manager)
        .named("scheduler")
        .concurrency(4)
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

/// The pods waiting for this scheduler.
fn pending_keys(pods: &Store<Pod>) -> Vec<ObjectKey> {
    pods.list()
        .iter()
        .filter(|p| is_ours(p))
        .filter_map(|p| ObjectKey::of(p.as_ref()))
        .collect()
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

/// An assigned pod deleted or finished: its node has room again.
fn pod_change_frees_room(change: &Change<Pod>) -> bool {
    let was = change.old.as_deref().is_some_and(occupies_node);
    let is = change.new.as_deref().is_some_and(occupies_node);
    was && !is
}

impl Ctx {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forget(&self, key: &ObjectKey) {
        let mut state = self.lock();
        state.assumed.remove(key);
        state.backoff.remove(key);
    }
}

/// The outcome of one scheduling cycle.
enum Decision {
    /// Bind to this node (the pod is assumed there).
    Bind(String),
    /// No node fits: kube-scheduler's message.
    Unschedulable(String),
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
        if node_name(&pod).is_some() {
            ctx.forget(&key);
        }
        return Ok(Action::await_change());
    }
    if !ctx.nodes.is_ready() || !ctx.pods.is_ready() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let now = ctx.clock.now();
    let decision = {
        let mut state = ctx.lock();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if state.assumed.get(&key).is_some_and(|a| a.uid == uid) {
            // Bound (or being bound) already; the cache has not caught up.
            return Ok(Action::await_change());
        }
        if let Some(wait) = state
            .backoff
            .get(&key)
            .and_then(|b| remaining(b.until, now))
        {
            return Ok(Action::requeue(wait));
        }
        let decision = schedule(&ctx, &state, &pod);
        if let Decision::Bind(node) = &decision {
            state.assumed.insert(
                key.clone(),
                Assumed {
                    uid,
                    node: node.clone(),
                    pod: pod.clone(),
                },
            );
        }
        decision
    };
    match decision {
        Decision::Bind(node) => bind(&ctx, &key, &pod, &node).await,
        Decision::Unschedulable(message) => {
            unschedulable(&ctx, &key, &pod, message, None, now).await
        }
        Decision::Preempt {
            node,
            victims,
            message,
        } => {
            preempt(&ctx, &pod, &node, &victims).await?;
            unschedulable(&ctx, &key, &pod, message, Some(&node), now).await
        }
    }
}

fn remaining(until: Timestamp, now: Timestamp) -> Option<Duration> {
    let left = now.duration_until(until);
    Duration::try_from(left).ok().filter(|d| !d.is_zero())
}

/// One scheduling cycle: filter, then score the nodes that pass.
fn schedule(ctx: &Ctx, state: &State, pod: &Pod) -> Decision {
    let nodes = ctx.nodes.list();
    if nodes.is_empty() {
        return Decision::Unschedulable(framework::NO_NODES_AVAILABLE.to_string());
    }
    let pods = ctx.pods.list();
    let on_nodes = pods_by_node(state, &pods, &ctx.pods);
    let mut infos: Vec<NodeInfo<'_>> = nodes.iter().map(|n| NodeInfo::new(n)).collect();
    infos.sort_by(|a, b| a.name.cmp(&b.name));
    for info in &mut infos {
        for p in on_nodes.get(info.name.as_str()).into_iter().flatten() {
            info.add_pod(p);
        }
    }
    let request = PodRequest::new(pod);
    let mut feasible = Vec::new();
    let mut rejections: Vec<(usize, Rejection)> = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        match request.filter(info) {
            Ok(()) => feasible.push(info),
            Err(rejection) => rejections.push((i, rejection)),
        }
    }
    if feasible.is_empty() {
        return no_fit(pod, &request, &infos, &on_nodes, rejections);
    }
    if let [only] = feasible.as_slice() {
        return Decision::Bind(only.name.clone());
    }
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
    // The highest score wins; `feasible` is sorted by name and `max_by_key` keeps the last
    // of equals, so reverse it to keep the first name among equal scores.
    let best = feasible
        .iter()
        .rev()
        .max_by_key(|n| request.score(n, &normalize))
        .map(|n| n.name.clone())
        .unwrap_or_default();
    Decision::Bind(best)
}

/// PostFilter: DefaultPreemption looks for a node where removing lower-priority pods makes
/// room (kube's candidate order: the lowest most-important victim, then the lowest sum of
/// victim priorities, then the fewest victims; then the first by name).
fn no_fit(
    pod: &Pod,
    request: &PodRequest<'_>,
    infos: &[NodeInfo<'_>],
    on_nodes: &HashMap<&str, Vec<&Pod>>,
    rejections: Vec<(usize, Rejection)>,
) -> Decision {
    let nodes = infos.len();
    let unschedulable = |post_filter: &str| {
        let rejections: Vec<Rejection> = rejections.iter().map(|(_, r)| r.clone()).collect();
        Decision::Unschedulable(framework::fit_error(nodes, &rejections, post_filter))
    };
    if !request.may_preempt() {
        return unschedulable(framework::PREEMPTION_NEVER);
    }
    let priority = framework::priority(pod);
    if let Some(nominated) = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        let terminating =
            on_nodes.get(nominated).into_iter().flatten().any(|p| {
                p.metadata.deletion_timestamp.is_some() && framework::priority(p) < priority
            });
        if terminating {
            return unschedulable(framework::PREEMPTION_TERMINATING);
        }
    }
    let mut without_victims = 0;
    let mut candidates: Vec<(&str, Vec<&Pod>)> = Vec::new();
    for (i, rejection) in &rejections {
        if !rejection.resolvable {
            continue;
        }
        let info = &infos[*i];
        let on_node = on_nodes
            .get(info.name.as_str())
            .map_or(&[][..], Vec::as_slice);
        match request.victims_on(info, on_node, priority) {
            Some(victims) => candidates.push((info.name.as_str(), victims)),
            None => without_victims += 1,
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
        Some((node, victims)) => {
            let rejections: Vec<Rejection> = rejections.into_iter().map(|(_, r)| r).collect();
            Decision::Preempt {
                node: node.to_string(),
                victims: victims.into_iter().cloned().collect(),
                message: framework::fit_error(nodes, &rejections, ""),
            }
        }
        None => unschedulable(&framework::preemption_message(nodes, without_victims)),
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
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(condition))
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

/// The pods each node holds: those the cache shows assigned and not finished, and the
/// assumed ones the cache does not show assigned yet.
fn pods_by_node<'p>(
    state: &'p State,
    pods: &'p [Arc<Pod>],
    cache: &Store<Pod>,
) -> HashMap<&'p str, Vec<&'p Pod>> {
    let mut by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for pod in pods.iter().filter(|p| occupies_node(p)) {
        if let Some(node) = node_name(pod) {
            by_node.entry(node).or_default().push(pod);
        }
    }
    for (key, assumed) in &state.assumed {
        let seen_bound = cache.get(key).is_some_and(|p| {
            p.metadata.uid.as_deref() == Some(assumed.uid.as_str()) && node_name(&p).is_some()
        });
        if !seen_bound {
            by_node
                .entry(assumed.node.as_str())
                .or_default()
                .push(&assumed.pod);
        }
    }
    by_node
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
            ctx.lock().assumed.remove(key);
            Err(error.into())
        }
    }
}

/// A pod no node fits: its condition, an Event, and when to try again.
async fn unschedulable(
    ctx: &Ctx,
    key: &ObjectKey,
    pod: &Pod,
    message: String,
    nominated: Option<&str>,
    now: Timestamp,
) -> Result<Action> {
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
    set_unschedulable(ctx, pod, &message, nominated).await?;
    Ok(Action::requeue(MAX_UNSCHEDULABLE))
}

/// kube-scheduler's back-off: 1 s doubling per failed attempt, at most 10 s.
fn backoff_for(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    INITIAL_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

/// Sets `PodScheduled` False/Unschedulable with `message`, unless it says that already
/// (kube's `UpdatePodCondition`: the transition time moves only when the status does).
async fn set_unschedulable(
    ctx: &Ctx,
    pod: &Pod,
    message: &str,
    nominated: Option<&str>,
) -> Result<()> {
    let current = crate::pods::condition(pod, "PodScheduled");
    let same = |c: &&k8s_openapi::api::core::v1::PodCondition| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
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
                "reason": "Unschedulable",
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
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
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
            &framework::preemption_message(3, 2),
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
