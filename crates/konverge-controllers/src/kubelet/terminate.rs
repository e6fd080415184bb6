//! Deleted pods: containers stopped, then the final delete.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerState, Pod, PodStatus};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};

use super::containers::terminated;
use super::events::{Planned, Type, field_path};
use super::pod::{PodCtx, admit, record_events, write_status};
use super::status::set_condition;
use super::{after, secs, whole};
use crate::error::Result;

/// A deleted pod: its running containers are told to stop (the kubelet's `Killing`
/// events), run their preStop `sleep` (at most the pod's grace period), and are stopped;
/// then the pod is removed with no grace period, once `min(grace, Timing::delete)` has
/// passed since the kubelet saw the deletion (and the preStop hooks are done). Returns when
/// to look again.
pub(super) async fn terminate(
    ctx: &PodCtx,
    pod: &Pod,
    now: Timestamp,
) -> Result<Option<Timestamp>> {
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .unwrap_or(0)
        .max(0);
    // The grace period runs on the kubelet's clock from when it saw the deletion, as a
    // kubelet's does (not from the API server's deletionTimestamp).
    let deleted_at = deletion_seen(ctx, pod, now);
    let stop_at = after(deleted_at, secs(pre_stop_seconds(pod).min(grace)));
    let remove_at = stop_at.max(after(deleted_at, secs(grace).min(ctx.timing.delete)));
    let running = !matches!(crate::pods::phase(pod), "Succeeded" | "Failed");
    if running && pod.status.as_ref().is_some_and(|s| s.start_time.is_some()) {
        record_killing(ctx, pod, deleted_at);
        if now < stop_at {
            return Ok(Some(stop_at));
        }
        let status = stopped_status(pod, whole(stop_at.min(now)), now);
        write_status(ctx, pod, status).await?;
    }
    // Already deleted with no grace period: the server removes it once its finalizers are
    // gone.
    if pod.metadata.deletion_grace_period_seconds == Some(0) {
        return Ok(None);
    }
    if now < remove_at {
        return Ok(Some(remove_at));
    }
    let api = Api::<Pod>::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if ctx.shared.lock().pods.get(&uid).is_some_and(|a| a.deleted) {
        // Sent already; the cache has not caught up with it.
        return Ok(None);
    }
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(admitted) = ctx.shared.lock().pods.get_mut(&uid) {
        admitted.deleted = true;
    }
    Ok(None)
}

/// When the kubelet first saw the pod's deletion (now, the first time it is asked).
fn deletion_seen(ctx: &PodCtx, pod: &Pod, now: Timestamp) -> Timestamp {
    admit(ctx, pod);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut state = ctx.shared.lock();
    let Some(admitted) = state.pods.get_mut(&uid) else {
        return whole(now);
    };
    // Even for a pod an earlier kubelet ran, stopping it is this kubelet's doing.
    admitted.replayed = false;
    *admitted.deleting_since.get_or_insert(whole(now))
}

/// The longest preStop `sleep` of the pod's containers, in seconds.
fn pre_stop_seconds(pod: &Pod) -> i64 {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.lifecycle.as_ref()?.pre_stop.as_ref()?.sleep.as_ref())
        .map(|sleep| sleep.seconds.max(0))
        .max()
        .unwrap_or(0)
}

/// `Killing` for each container the pod's status shows running (once).
fn record_killing(ctx: &PodCtx, pod: &Pod, at: Timestamp) {
    let planned: Vec<Planned> = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .filter(|s| s.state.as_ref().is_some_and(|st| st.running.is_some()))
        .map(|s| Planned {
            key: format!("{}/Killing", s.name),
            at,
            type_: Type::Normal,
            reason: "Killing",
            message: format!("Stopping container {}", s.name),
            field_path: Some(field_path(false, &s.name)),
        })
        .collect();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    record_events(ctx, pod, &uid, &planned);
}

/// Every running container killed at `killed` (exit 143, `Error`), the pod terminal.
pub(super) fn stopped_status(pod: &Pod, killed: Timestamp, now: Timestamp) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let mut all_zero = true;
    for c in status.container_statuses.iter_mut().flatten() {
        let state = c.state.get_or_insert_with(ContainerState::default);
        if let Some(running) = state.running.take() {
            *state = ContainerState {
                terminated: Some(terminated(
                    143,
                    running.started_at.map(|t| t.0),
                    killed,
                    c.container_id.clone(),
                )),
                ..ContainerState::default()
            };
        } else if state.waiting.is_some() {
            all_zero = false;
        }
        all_zero &= state.terminated.as_ref().is_none_or(|t| t.exit_code == 0);
        c.ready = false;
        c.started = Some(false);
    }
    let phase = if all_zero { "Succeeded" } else { "Failed" };
    status.phase = Some(phase.into());
    let mut conditions = status.conditions.take().unwrap_or_default();
    for (type_, reason) in [
        ("PodReadyToStartContainers", None),
        ("Ready", Some("PodCompleted")),
        ("ContainersReady", Some("PodCompleted")),
    ] {
        set_condition(&mut conditions, pod, type_, false, reason, None, now);
    }
    status.conditions = Some(conditions);
    status
}
