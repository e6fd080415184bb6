//! Putting one daemon pod on every node that should run one (kcm's `manage`,
//! `podsShouldBeOnNode` and `syncNodes`): create where a pod is missing, delete where a node
//! no longer fits, replace failed pods (with back-off), prune extra pods, and create and
//! delete in kcm's slow-start batches with kcm's events.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};

use super::context::{Ctx, HASH_LABEL, Requeue, allows_surge, by_age, key_of, min_ready_seconds};
use super::placement::{self, add_daemon_tolerations, pin_to_node};
use crate::controller_ref::new_controller_ref;
use crate::error::{Error, Result};
use crate::pods;

/// kcm's `BurstReplicas`: at most this many creations (and deletions) per sync.
const BURST_REPLICAS: usize = 250;

/// The label with the DaemonSet's template generation (`extensions.DaemonSetTemplateGenerationKey`).
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

/// The annotation the API server keeps the template generation in
/// (`apps.DeprecatedTemplateGeneration`).
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// Daemon pods by the node they are for.
pub(super) type NodePods = BTreeMap<String, Vec<Arc<Pod>>>;

/// What to change on the nodes.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// Nodes to create a daemon pod on.
    pub(super) create_on: Vec<String>,
    /// Daemon pods to delete.
    pub(super) delete: Vec<Arc<Pod>>,
}

/// Creates and deletes what each node needs (kcm's `manage`). Returns whether anything was
/// written, so the caller leaves the rolling update to the next sync, as kcm's expectations
/// do.
pub(super) async fn manage(
    ctx: &Ctx,
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    node_pods: &NodePods,
    hash: &str,
    requeue: &mut Requeue,
) -> Result<bool> {
    let mut changes = Changes::default();
    for node in nodes {
        on_node(ctx, ds, node, node_pods, hash, &mut changes, requeue);
    }
    changes
        .delete
        .extend(unscheduled_without_node(nodes, node_pods));
    sync_nodes(ctx, ds, changes, hash).await
}

/// What one node needs (kcm's `podsShouldBeOnNode`).
fn on_node(
    ctx: &Ctx,
    ds: &DaemonSet,
    node: &Node,
    node_pods: &NodePods,
    hash: &str,
    changes: &mut Changes,
    requeue: &mut Requeue,
) {
    let fit = placement::fit(node, ds);
    let node_name = node.name_any();
    let Some(daemon_pods) = node_pods.get(&node_name) else {
        if fit.should_run {
            changes.create_on.push(node_name);
        }
        return;
    };
    if !fit.should_continue_running {
        changes.delete.extend(
            daemon_pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .cloned(),
        );
        return;
    }
    let mut running = Vec::new();
    for pod in daemon_pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        match pods::phase(pod) {
            "Failed" => {
                if let Some(pod) = failed(ctx, ds, pod, &node_name, requeue) {
                    changes.delete.push(pod);
                }
            }
            "Succeeded" => {
                let message = format!(
                    "Found succeeded daemon pod {}/{} on node {node_name}, will try to delete it",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any()
                );
                ctx.events.normal(ds, "SucceededDaemonPod", message);
                changes.delete.push(pod.clone());
            }
            _ => running.push(pod.clone()),
        }
    }
    running.sort_by(|a, b| by_age(a, b));
    if !allows_surge(ds) {
        // One pod per node: the oldest stays.
        changes.delete.extend(running.into_iter().skip(1));
        return;
    }
    if running.len() <= 1 {
        if running.is_empty() && fit.should_run {
            changes.create_on.push(node_name);
        }
        return;
    }
    surge_prune(ctx, ds, running, hash, changes);
}

/// A failed daemon pod is deleted (to be recreated), unless its node is in back-off: then
/// the DaemonSet is looked at again once the back-off has passed.
fn failed(
    ctx: &Ctx,
    ds: &DaemonSet,
    pod: &Arc<Pod>,
    node_name: &str,
    requeue: &mut Requeue,
) -> Option<Arc<Pod>> {
    let observed = ds
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .unwrap_or(0);
    let key = format!("{}/{observed}/{node_name}", ds.uid().unwrap_or_default());
    let now = tokio::time::Instant::now();
    if let Some(delay) = ctx.backoff.waiting(&key, now) {
        requeue.within(delay);
        return None;
    }
    ctx.backoff.step(&key, now);
    let message = format!(
        "Found failed daemon pod {}/{} on node {node_name}, will try to kill it",
        pod.namespace().unwrap_or_default(),
        pod.name_any()
    );
    ctx.events.warning(ds, "FailedDaemonPod", message);
    Some(pod.clone())
}

/// With surge, a node keeps at most the oldest pod of the current revision and the oldest
/// older one; the older one goes once it is not ready or the new one is available.
fn surge_prune(
    ctx: &Ctx,
    ds: &DaemonSet,
    running: Vec<Arc<Pod>>,
    hash: &str,
    changes: &mut Changes,
) {
    let (mut oldest_new, mut oldest_old) = (None, None);
    for pod in running {
        let slot = if pods::labels(&pod).get(HASH_LABEL).map(String::as_str) == Some(hash) {
            &mut oldest_new
        } else {
            &mut oldest_old
        };
        if slot.is_none() {
            *slot = Some(pod);
        } else {
            changes.delete.push(pod);
        }
    }
    if let (Some(new), Some(old)) = (oldest_new, oldest_old) {
        let now = ctx.clock.now();
        if !pods::is_ready(&old) || pods::is_available(&new, min_ready_seconds(ds), now) {
            changes.delete.push(old);
        }
    }
}

/// Pods not yet scheduled that are for nodes that no longer exist: the pod GC leaves
/// unscheduled pods alone, so the DaemonSet deletes them (kcm's
/// `getUnscheduledPodsWithoutNode`).
fn unscheduled_without_node(nodes: &[Arc<Node>], node_pods: &NodePods) -> Vec<Arc<Pod>> {
    let existing: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    node_pods
        .iter()
        .filter(|(node, _)| !existing.contains(*node))
        .flat_map(|(_, pods)| pods.iter())
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none_or(str::is_empty)
        })
        .cloned()
        .collect()
}

/// The template daemon pods are made from (kcm's `CreatePodTemplate`): kcm's tolerations,
/// the `pod-template-generation` label when the DaemonSet records one, and the revision's
/// `controller-revision-hash`.
pub fn pod_template(ds: &DaemonSet, hash: &str) -> PodTemplateSpec {
    let mut template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    add_daemon_tolerations(template.spec.get_or_insert_with(Default::default));
    let labels = template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default);
    if let Some(generation) = template_generation(ds) {
        labels.insert(
            TEMPLATE_GENERATION_LABEL.to_string(),
            generation.to_string(),
        );
    }
    if !hash.is_empty() {
        labels.insert(HASH_LABEL.to_string(), hash.to_string());
    }
    template
}

/// The template generation the API server recorded, if it parses (kcm's
/// `GetTemplateGeneration`).
fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.annotations()
        .get(TEMPLATE_GENERATION_ANNOTATION)?
        .parse()
        .ok()
}

/// The daemon pod for `node`: the template, pinned to the node by required node affinity.
fn pod_for(ds: &DaemonSet, template: &PodTemplateSpec, node: &str) -> Pod {
    let mut pod = pods::from_template(template, &ds.metadata, Some(new_controller_ref(ds)));
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.affinity = Some(pin_to_node(spec.affinity.take(), node));
    pod
}

/// Deletes `changes.delete` and creates pods on `changes.create_on`, at most
/// [`BURST_REPLICAS`] of each (kcm's `syncNodes`). Creations go in batches of 1, 2, 4, ...
/// and stop at the first batch with a failure; deletions all at once. Each write is
/// recorded in the expectations and as kcm's event. Returns whether anything was attempted;
/// the first failure is the error.
pub(super) async fn sync_nodes(
    ctx: &Ctx,
    ds: &DaemonSet,
    changes: Changes,
    hash: &str,
) -> Result<bool> {
    let Changes {
        mut create_on,
        mut delete,
    } = changes;
    create_on.truncate(BURST_REPLICAS);
    delete.truncate(BURST_REPLICAS);
    let wrote = !create_on.is_empty() || !delete.is_empty();
    let key = key_of(ds);
    let template = pod_template(ds, hash);
    let mut errors = Vec::new();
    let mut pos = 0;
    let mut batch = create_on.len().min(1);
    while pos < create_on.len() {
        let creates = create_on[pos..pos + batch]
            .iter()
            .map(|node| create(ctx, ds, &key, pod_for(ds, &template, node)));
        let failed: Vec<Error> = join_all(creates)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        pos += batch;
        if !failed.is_empty() {
            errors.extend(failed);
            break;
        }
        batch = (2 * batch).min(create_on.len() - pos);
    }
    let deletes = delete.iter().map(|pod| remove(ctx, ds, &key, pod));
    errors.extend(join_all(deletes).await.into_iter().filter_map(Result::err));
    match errors.into_iter().next() {
        Some(error) => Err(error),
        None => Ok(wrote),
    }
}

/// Creates one daemon pod (kcm's `RealPodControl.CreatePods`).
async fn create(ctx: &Ctx, ds: &DaemonSet, key: &str, pod: Pod) -> Result<()> {
    if pod.metadata.labels.as_ref().is_none_or(|l| l.is_empty()) {
        return Err(Error::invalid("unable to create pods, no labels"));
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ds.namespace().unwrap_or_default());
    match api.create(&PostParams::default(), &pod).await {
        Ok(created) => {
            ctx.expectations
                .created(key, created.uid().unwrap_or_default());
            ctx.events.normal(
                ds,
                "SuccessfulCreate",
                format!("Created pod: {}", created.name_any()),
            );
            Ok(())
        }
        // The namespace is going away: every later create fails the same way.
        Err(kube::Error::Api(status)) if namespace_terminating(&status) => Ok(()),
        Err(error) => {
            ctx.events.warning(
                ds,
                "FailedCreate",
                format!("Error creating: {}", message(&error)),
            );
            Err(error.into())
        }
    }
}

/// Deletes one daemon pod (kcm's `RealPodControl.DeletePod`); one already gone is fine.
async fn remove(ctx: &Ctx, ds: &DaemonSet, key: &str, pod: &Pod) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ds.namespace().unwrap_or_default());
    let name = pod.name_any();
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            ctx.expectations.deleted(key, pod.uid().unwrap_or_default());
            ctx.events
                .normal(ds, "SuccessfulDelete", format!("Deleted pod: {name}"));
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(error) => {
            ctx.events.warning(
                ds,
                "FailedDelete",
                format!("Error deleting: {}", message(&error)),
            );
            Err(error.into())
        }
    }
}

fn namespace_terminating(status: &kube::core::Status) -> bool {
    status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// An error as kcm's events print it: the server's message when it sent one.
fn message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}
