//! The pod worker: one reconcile per pod bound to a simulated node — a live pod's status and
//! events, a deleted pod's termination.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use konverge_runtime::Action;

use super::pod::{PodCtx, computed, record_events, write_status};
use super::terminate::terminate;
use super::{node_name, until};
use crate::error::Result;

pub(super) async fn reconcile_pod(pod: Arc<Pod>, ctx: Arc<PodCtx>) -> Result<Action> {
    let now = ctx.clock.now();
    let next = sync(&ctx, &pod).await?;
    Ok(next.map_or_else(Action::await_change, |t| Action::requeue(until(now, t))))
}

/// One look at a pod by its kubelet: the status written if it changed, the events that came
/// due recorded, a deleted pod stopped and removed. Returns when to look again.
pub(super) async fn sync(ctx: &PodCtx, pod: &Pod) -> Result<Option<Timestamp>> {
    let Some(node) = node_name(pod).and_then(|n| ctx.nodes.get(n)) else {
        return Ok(None);
    };
    if !ctx.shared.lock().is_running(&node.name) {
        // A dead kubelet writes nothing; starting it again wakes this pod.
        return Ok(None);
    }
    let now = ctx.clock.now();
    if pod.metadata.deletion_timestamp.is_some() {
        return terminate(ctx, pod, now).await;
    }
    if matches!(crate::pods::phase(pod), "Succeeded" | "Failed") {
        return Ok(None);
    }
    let computed = computed(ctx, pod, node, now);
    record_events(ctx, pod, &computed.uid, &computed.events);
    write_status(ctx, pod, computed.status).await?;
    Ok(computed.next)
}
