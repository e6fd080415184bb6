//! The RollingUpdate strategy (kcm's `rollingUpdate`): replace pods of older revisions
//! while at most `maxUnavailable` daemon pods are unavailable, or — with `maxSurge` — start
//! the new pod next to the old one on at most `maxSurge` nodes at a time and delete the old
//! one once the new one is available. OnDelete replaces nothing: pods of the new revision
//! come only as old ones are deleted by someone else.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use konverge_runtime::ObjectKey;
use kube::ResourceExt;

use super::context::{Ctx, is_updated, min_ready_seconds};
use super::manage::{Changes, NodePods, sync_nodes};
use super::placement;
use super::strategy::{surge_count, unavailable_count};
use crate::error::{Error, Result};
use crate::pods;

/// A node's pod of the current revision and its pod of an older one.
type NewAndOld = (Option<Arc<Pod>>, Option<Arc<Pod>>);

/// The node's pods of the current revision and of older ones, at most one of each, not
/// counting deleted pods; `None` when there are more (the manage loop prunes them first)
/// (kcm's `findUpdatedPodsOnNode`).
fn updated_and_old(pods: &[Arc<Pod>], hash: &str) -> Option<NewAndOld> {
    let (mut new, mut old) = (None, None);
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let slot = if is_updated(pod, hash) {
            &mut new
        } else {
            &mut old
        };
        if slot.replace(pod.clone()).is_some() {
            return None;
        }
    }
    Some((new, old))
}

/// Deletes old pods (or, surging, creates new ones) as far as the strategy allows (kcm's
/// `rollingUpdate`). `node_pods` comes from the same cache read as the manage loop.
pub(super) async fn rolling_update(
    ctx: &Ctx,
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    node_pods: &NodePods,
    hash: &str,
) -> Result<bool> {
    let mut node_pods = node_pods.clone();
    let (max_surge, max_unavailable, desired) = desired_counts(ds, nodes, &mut node_pods)?;
    let changes = if max_surge == 0 {
        replace_within_unavailability(ctx, ds, &node_pods, hash, max_unavailable)
    } else {
        surge(ctx, ds, &node_pods, hash, max_surge, desired)?
    };
    sync_nodes(ctx, ds, changes, hash).await
}

/// `maxSurge`, `maxUnavailable` and the desired pod count; every node that should run a
/// pod gets an entry in `node_pods` (kcm's `updatedDesiredNodeCounts`).
fn desired_counts(
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    node_pods: &mut NodePods,
) -> Result<(i32, i32, i32)> {
    let mut desired = 0;
    for node in nodes {
        if placement::fit(node, ds).should_run {
            desired += 1;
            node_pods.entry(node.name_any()).or_default();
        }
    }
    let max_unavailable = unavailable_count(ds, desired).map_err(|e| {
        Error::invalid(format!(
            "couldn't get unavailable numbers: invalid value for MaxUnavailable: {e}"
        ))
    })?;
    let max_surge = surge_count(ds, desired).map_err(|e| {
        Error::invalid(format!(
            "couldn't get unavailable numbers: invalid value for MaxSurge: {e}"
        ))
    })?;
    // An impossible configuration (neither surge nor unavailability) accepts one
    // unavailable pod, as kcm does.
    let max_unavailable = if desired > 0 && max_unavailable == 0 && max_surge == 0 {
        1
    } else {
        max_unavailable
    };
    Ok((max_surge, max_unavailable, desired))
}

/// Without surge: old pods that are unavailable anyway are deleted, then available old pods
/// while fewer than `maxUnavailable` pods are unavailable; the manage loop creates their
/// replacements. A node without a pod, or with both an old and a new one, counts as
/// unavailable.
fn replace_within_unavailability(
    ctx: &Ctx,
    ds: &DaemonSet,
    node_pods: &NodePods,
    hash: &str,
    max_unavailable: i32,
) -> Changes {
    let now = ctx.clock.now();
    let min_ready = min_ready_seconds(ds);
    let mut unavailable = 0;
    let mut replacements = Vec::new();
    let mut candidates = Vec::new();
    for pods in node_pods.values() {
        let Some((new, old)) = updated_and_old(pods, hash) else {
            unavailable += 1;
            continue;
        };
        match (new, old) {
            (None, None) | (Some(_), Some(_)) => unavailable += 1,
            (Some(new), None) => {
                if !pods::is_available(&new, min_ready, now) {
                    unavailable += 1;
                }
            }
            (None, Some(old)) => {
                if !pods::is_available(&old, min_ready, now) {
                    replacements.push(old);
                    unavailable += 1;
                } else if unavailable < max_unavailable {
                    candidates.push(old);
                }
            }
        }
    }
    let room = usize::try_from(max_unavailable - unavailable).unwrap_or(0);
    replacements.extend(candidates.into_iter().take(room));
    Changes {
        create_on: Vec::new(),
        delete: replacements,
    }
}

/// With surge: a new pod is started next to an unavailable old one at once, and next to
/// available old ones on at most `maxSurge` nodes; an old pod goes once the new one on its
/// node is available. Old pods on nodes that no longer fit go only while enough pods stay
/// available elsewhere.
fn surge(
    ctx: &Ctx,
    ds: &DaemonSet,
    node_pods: &NodePods,
    hash: &str,
    max_surge: i32,
    desired: i32,
) -> Result<Changes> {
    let now = ctx.clock.now();
    let min_ready = min_ready_seconds(ds);
    let available = |pod: &Pod| pods::is_available(pod, min_ready, now);
    let should_run = |node_name: &str| -> Result<bool> {
        let node = ctx
            .nodes
            .get(&ObjectKey::cluster(node_name))
            .ok_or_else(|| {
                Error::Unsettled(format!("couldn't get node for nodeName {node_name:?}"))
            })?;
        Ok(placement::fit(&node, ds).should_run)
    };
    let mut delete = Vec::new();
    let mut should_not_run = Vec::new();
    let mut candidates = Vec::new();
    let mut allowed = Vec::new();
    let (mut surging, mut available_count) = (0, 0);
    for (node_name, pods) in node_pods {
        let Some((new, old)) = updated_and_old(pods, hash) else {
            surging += 1;
            continue;
        };
        if old.as_ref().or(new.as_ref()).is_some_and(|p| available(p)) {
            available_count += 1;
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) if !available(&old) => {
                if should_run(node_name)? {
                    allowed.push(node_name.clone());
                } else {
                    delete.push(old);
                }
            }
            (None, Some(old)) => {
                if !should_run(node_name)? {
                    should_not_run.push(old);
                } else if surging < max_surge {
                    candidates.push(node_name.clone());
                }
            }
            (Some(new), Some(old)) => {
                if available(&new) {
                    delete.push(old);
                } else {
                    surging += 1;
                }
            }
        }
    }
    let deletable = usize::try_from(available_count - desired).unwrap_or(0);
    delete.extend(should_not_run.into_iter().take(deletable));
    let room = usize::try_from(max_surge - surging).unwrap_or(0);
    allowed.extend(candidates.into_iter().take(room));
    Ok(Changes {
        create_on: allowed,
        delete,
    })
}
