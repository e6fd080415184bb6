//! kcm's pod garbage collector (`pkg/controller/podgc`).
//!
//! Every 20 seconds (kcm's `gcCheckPeriod`) one pass over the cached pods and nodes:
//!
//! - terminated pods (any phase but Pending, Running and Unknown) beyond the threshold
//!   (`--terminated-pod-gc-threshold`, 12500 by default, 0 turns this off) are deleted,
//!   evicted ones first, then the oldest;
//! - terminating pods on a node that is not Ready and has the
//!   `node.kubernetes.io/out-of-service` taint are deleted;
//! - pods bound to a node that does not exist are deleted once the node has been missing
//!   from the cache for 40 seconds (kcm's quarantine) and a read from the API server
//!   confirms it is gone; they get the `DisruptionTarget` condition with reason
//!   `DeletionByPodGC` first;
//! - terminating pods that were never scheduled are deleted.
//!
//! A pod not finished yet is marked `Failed` before it is deleted (with no grace period), as
//! kcm does, since no kubelet will ever finish it.
//!
//! kcm runs the pass on a timer. Here the timer is a reconcile of the `kube-system`
//! Namespace that asks to run again after the period: a runtime controller needs an object
//! to key its work on, and every cluster has that one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodCondition};
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use crate::clock::Clock;
use crate::descriptor::{Descriptor, Setup};
use crate::error::Result;
use crate::informers;
use crate::pods;

/// kcm's pod garbage collector.
pub const PODGC: Descriptor = Descriptor {
    name: "pod-garbage-collector-controller",
    aliases: &["podgc"],
    service_account: "pod-garbage-collector",
    add,
};

/// kcm's default `--terminated-pod-gc-threshold`.
pub const DEFAULT_TERMINATED_POD_GC_THRESHOLD: usize = 12500;

/// The object whose reconcile is the collector's timer.
const TIMER_NAMESPACE: &str = "kube-system";

/// The collector's settings (kcm's flags and constants).
#[derive(Clone, Debug)]
pub struct Config {
    /// Terminated pods kept before the oldest are deleted; 0 keeps them all.
    pub terminated_pod_gc_threshold: usize,
    /// How often the pass runs (kcm's `gcCheckPeriod`, 20 s).
    pub gc_check_period: Duration,
    /// How long a node is missing before its pods are orphans (kcm's `quarantineTime`, 40 s).
    pub quarantine_time: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            terminated_pod_gc_threshold: DEFAULT_TERMINATED_POD_GC_THRESHOLD,
            gc_check_period: Duration::from_secs(20),
            quarantine_time: Duration::from_secs(40),
        }
    }
}

struct Ctx {
    client: kube::Client,
    clock: Clock,
    config: Config,
    pods: Store<Pod>,
    nodes: Store<Node>,
    /// Nodes missing from the cache, and when their quarantine ends (kcm's delaying
    /// `nodeQueue`: a node added again keeps its first time).
    quarantine: Mutex<BTreeMap<String, Timestamp>>,
}

fn add(manager: &mut Manager, setup: Setup) {
    add_with(manager, setup, Config::default());
}

/// Adds the collector with `config` (kcm's flags) instead of kcm's defaults.
pub fn add_with(manager: &mut Manager, setup: Setup, config: Config) {
    let ctx = Arc::new(Ctx {
        client: setup.client,
        clock: setup.clock,
        config,
        pods: informers::cache::<Pod>(manager),
        nodes: informers::cache::<Node>(manager),
        quarantine: Mutex::new(BTreeMap::new()),
    });
    let controller = informers::controller::<Namespace>(manager)
        .named("podgc")
        .with_predicate(|old: Option<&Namespace>, new: &Namespace| {
            old.is_none() && new.metadata.name.as_deref() == Some(TIMER_NAMESPACE)
        });
    manager.add(controller, reconcile, ctx);
}

async fn reconcile(namespace: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action> {
    if namespace.metadata.name.as_deref() != Some(TIMER_NAMESPACE) {
        return Ok(Action::await_change());
    }
    if !ctx.pods.is_ready() || !ctx.nodes.is_ready() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    gc(&ctx).await;
    Ok(Action::requeue(ctx.config.gc_check_period))
}

/// One pass (kcm's `gc`). Failures are logged and retried on the next pass, as kcm does.
async fn gc(ctx: &Ctx) {
    let pods = ctx.pods.list();
    let nodes = ctx.nodes.list();
    if ctx.config.terminated_pod_gc_threshold > 0 {
        gc_terminated(ctx, &pods).await;
    }
    gc_terminating_out_of_service(ctx, &pods).await;
    gc_orphaned(ctx, &pods, &nodes).await;
    gc_unscheduled_terminating(ctx, &pods).await;
}

/// kcm's `isPodTerminated`: any phase but Pending, Running and Unknown.
fn is_terminated(pod: &Pod) -> bool {
    !matches!(pods::phase(pod), "Pending" | "Running" | "Unknown")
}

/// kcm's `eviction.PodIsEvicted`.
fn is_evicted(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Failed")
        && status.and_then(|s| s.reason.as_deref()) == Some("Evicted")
}

/// kcm's `byEvictionAndCreationTimestamp`: evicted pods first, then the oldest, then by
/// name.
fn sort_for_deletion(pods: &mut [Arc<Pod>]) {
    pods.sort_by(|a, b| {
        is_evicted(b)
            .cmp(&is_evicted(a))
            .then_with(|| {
                let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                created(a).cmp(&created(b))
            })
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
}

async fn gc_terminated(ctx: &Ctx, pods: &[Arc<Pod>]) {
    let mut terminated: Vec<Arc<Pod>> = pods.iter().filter(|p| is_terminated(p)).cloned().collect();
    let excess = terminated
        .len()
        .saturating_sub(ctx.config.terminated_pod_gc_threshold);
    if excess == 0 {
        return;
    }
    tracing::info!(pods = excess, "garbage collecting pods");
    sort_for_deletion(&mut terminated);
    for pod in terminated.iter().take(excess) {
        mark_failed_and_delete(ctx, pod, None).await;
    }
}

async fn gc_terminating_out_of_service(ctx: &Ctx, pods: &[Arc<Pod>]) {
    let mut terminating: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .filter(|p| {
            let node_name = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            ctx.nodes
                .get(&ObjectKey::cluster(node_name))
                .is_some_and(|node| {
                    !node_is_ready(&node)
                        && has_taint_key(&node, "node.kubernetes.io/out-of-service")
                })
        })
        .cloned()
        .collect();
    sort_for_deletion(&mut terminating);
    for pod in &terminating {
        mark_failed_and_delete(ctx, pod, None).await;
    }
}

/// kcm's `IsNodeReady`.
pub(crate) fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn has_taint_key(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

async fn gc_orphaned(ctx: &Ctx, pods: &[Arc<Pod>], nodes: &[Arc<Node>]) {
    let existing: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    let now = ctx.clock.now();
    let quarantine =
        SignedDuration::try_from(ctx.config.quarantine_time).unwrap_or(SignedDuration::MAX);
    let due: Vec<String> = {
        let mut waiting = ctx.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        for pod in pods {
            let node = node_name(pod);
            if !node.is_empty() && !existing.contains(node) {
                waiting
                    .entry(node.to_string())
                    .or_insert_with(|| now.saturating_add(quarantine).unwrap_or(Timestamp::MAX));
            }
        }
        let due: Vec<String> = waiting
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for node in &due {
            waiting.remove(node);
        }
        due
    };
    let mut deleted = BTreeSet::new();
    let api: Api<Node> = Api::all(ctx.client.clone());
    for node in due.into_iter().filter(|n| !existing.contains(n)) {
        match api.get_opt(&node).await {
            Ok(None) => {
                deleted.insert(node);
            }
            Ok(Some(_)) => {}
            // Quarantined again on the next pass if still missing.
            Err(error) => tracing::warn!(%error, node, "error while getting node"),
        }
    }
    for pod in pods.iter().filter(|p| deleted.contains(node_name(p))) {
        tracing::info!(
            pod = pod.name_any(),
            node = node_name(pod),
            "found orphaned Pod assigned to the Node, deleting"
        );
        let condition = PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("DeletionByPodGC".into()),
            message: Some("PodGC: node no longer exists".into()),
            ..PodCondition::default()
        };
        mark_failed_and_delete(ctx, pod, Some(condition)).await;
    }
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

async fn gc_unscheduled_terminating(ctx: &Ctx, pods: &[Arc<Pod>]) {
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() && node_name(pod).is_empty() {
            tracing::info!(
                pod = pod.name_any(),
                "found unscheduled terminating Pod not assigned to any Node, deleting"
            );
            mark_failed_and_delete(ctx, pod, None).await;
        }
    }
}

/// kcm's `markFailedAndDeletePodWithCondition`: a pod not finished is patched to `Failed`
/// (with `condition`, if any) so it does not stay Running forever, then deleted at once.
async fn mark_failed_and_delete(ctx: &Ctx, pod: &Pod, condition: Option<PodCondition>) {
    if let Err(error) = try_mark_failed_and_delete(ctx, pod, condition).await {
        tracing::warn!(%error, pod = pod.name_any(), "PodGC could not delete the Pod");
    }
}

async fn try_mark_failed_and_delete(
    ctx: &Ctx,
    pod: &Pod,
    condition: Option<PodCondition>,
) -> std::result::Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let name = pod.name_any();
    let phase = pods::phase(pod);
    if phase != "Succeeded" && phase != "Failed" {
        let mut updated = pod.clone();
        if let Some(status) = updated.status.as_mut() {
            status.phase = Some("Failed".into());
        }
        let mut status = json!({"phase": "Failed"});
        if let Some(condition) = condition
            && update_pod_condition(&mut updated, condition, &ctx.clock)
            && let Some(c) = pods::condition(&updated, "DisruptionTarget")
        {
            status["conditions"] = json!([c]);
        }
        let patch = json!({"metadata": {"uid": pod.uid()}, "status": status});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// kcm's `UpdatePodCondition`: sets `condition` on the pod's status, keeping the transition
/// time when the status does not change. Whether anything changed.
pub(crate) fn update_pod_condition(
    pod: &mut Pod,
    mut condition: PodCondition,
    clock: &Clock,
) -> bool {
    condition.last_transition_time = Some(clock.now_time());
    let status = pod.status.get_or_insert_with(Default::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        conditions.push(condition);
        return true;
    };
    if condition.status == old.status {
        condition.last_transition_time = old.last_transition_time.clone();
    }
    let equal = condition.status == old.status
        && condition.reason == old.reason
        && condition.message == old.message
        && condition.last_probe_time == old.last_probe_time
        && condition.last_transition_time == old.last_transition_time;
    *old = condition;
    !equal
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, created: i64, phase: &str, reason: Option<&str>) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "creationTimestamp": Timestamp::from_second(created).expect("a time").to_string()},
                "status": {"phase": phase, "reason": reason},
            }))
            .expect("a pod"),
        )
    }

    #[test]
    fn evicted_then_oldest_then_by_name() {
        let mut pods = vec![
            pod("c", 10, "Succeeded", None),
            pod("b", 5, "Failed", None),
            pod("a", 10, "Failed", None),
            pod("e", 20, "Failed", Some("Evicted")),
        ];
        sort_for_deletion(&mut pods);
        let names: Vec<_> = pods.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["e", "b", "a", "c"]);
        assert!(is_terminated(&pods[0]));
        assert!(!is_terminated(&pod("p", 0, "Pending", None)));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let clock = Clock::from_fn(|| Timestamp::from_second(100).expect("a time"));
        let mut p = Pod::default();
        let c = |status: &str| PodCondition {
            type_: "DisruptionTarget".into(),
            status: status.into(),
            ..PodCondition::default()
        };
        assert!(update_pod_condition(&mut p, c("True"), &clock));
        assert!(!update_pod_condition(&mut p, c("True"), &clock));
        assert!(update_pod_condition(&mut p, c("False"), &clock));
    }
}
