//! What the pod worker reads and writes: its context, a pod's admission, its computed
//! status and events, its pod IP.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use konverge_runtime::Store;
use kube::api::Api;
use kube::{Client, ResourceExt};

use super::events::{self, Planned};
use super::rules::{Admitted, Lifecycle};
use super::state::Shared;
use super::status::{Computed, desired_status};
use super::{SimNode, Timing};
use crate::clock::Clock;
use crate::error::Result;
use crate::events::Events;

/// What the pod worker reads and writes.
pub(super) struct PodCtx {
    pub(super) client: Client,
    pub(super) clock: Clock,
    pub(super) nodes: Arc<BTreeMap<String, SimNode>>,
    pub(super) timing: Timing,
    pub(super) pods: Store<Pod>,
    /// Pod IPs handed out and not yet seen in the cache, by node, then pod uid.
    pub(super) ips: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    pub(super) shared: Arc<Shared>,
    pub(super) events: Events,
}

/// The status the pod's kubelet would report now (admitting the pod if it has not yet).
pub(super) fn computed(ctx: &PodCtx, pod: &Pod, node: &SimNode, now: Timestamp) -> Computed {
    let admitted = admit(ctx, pod);
    desired_status(pod, node, &admitted, &ctx.timing, now, || {
        allocate_ip(ctx, pod, node)
    })
}

/// What the kubelet remembers of `pod`, deciding its lifecycle when it first sees it.
pub(super) fn admit(ctx: &PodCtx, pod: &Pod) -> Admitted {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut state = ctx.shared.lock();
    if let Some(admitted) = state.pods.get(&uid) {
        return admitted.clone();
    }
    if state.due_to_forget() {
        let pods = ctx.pods.list();
        let live: HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        state.forget_pods_but(&live);
    }
    let behaviours = state.apply_rules(pod);
    let mut admitted = Admitted::new(Lifecycle::of(pod, &ctx.timing, &behaviours));
    // Run by an earlier kubelet: its past is not this kubelet's to record.
    admitted.replayed = pod.status.as_ref().is_some_and(|s| s.start_time.is_some());
    state.pods.insert(uid, admitted.clone());
    admitted
}

/// Records the events not recorded for the pod yet.
pub(super) fn record_events(ctx: &PodCtx, pod: &Pod, uid: &str, planned: &[Planned]) {
    let mut due = Vec::new();
    {
        let mut state = ctx.shared.lock();
        let Some(admitted) = state.pods.get_mut(uid) else {
            return;
        };
        let replayed = std::mem::take(&mut admitted.replayed);
        for event in planned {
            if admitted.recorded.insert(event.key.clone()) && !replayed {
                due.push(event);
            }
        }
    }
    for event in due {
        events::record(&ctx.events, pod, event);
    }
}

pub(super) async fn write_status(ctx: &PodCtx, pod: &Pod, status: PodStatus) -> Result<()> {
    // The stored status is already as the server stores it; only a status that differs
    // from it as it is needs shaping to tell a real change from empty fields.
    if pod.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let status = as_stored(status);
    if pod.status.clone().map(as_stored).as_ref() == Some(&status) {
        return Ok(());
    }
    let mut updated = pod.clone();
    updated.status = Some(status);
    updated.metadata.managed_fields = None;
    let api = Api::<Pod>::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    api.replace_status(&pod.name_any(), &super::write_params(), &updated)
        .await?;
    Ok(())
}

/// `status` as the API server stores it: shaped as Go encodes a PodStatus (a zero-valued
/// `omitempty` field left out, struct fields written), so that a status that would store
/// the same compares equal to the stored one and is not sent again.
fn as_stored(status: PodStatus) -> PodStatus {
    let Ok(mut value) = serde_json::to_value(&status) else {
        return status;
    };
    konverge_apimachinery::go_encoding::shape_type("core/v1.PodStatus", &mut value);
    serde_json::from_value(value).unwrap_or(status)
}

/// The lowest free address of the node's CIDR (from .2), skipping the IPs of the node's
/// live pods and those handed to its pods whose status does not show them yet.
pub(super) fn allocate_ip(ctx: &PodCtx, pod: &Pod, node: &SimNode) -> String {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let live: BTreeMap<String, Arc<Pod>> = crate::informers::pods_on(&ctx.pods, &node.name)
        .into_iter()
        .filter(|p| !matches!(crate::pods::phase(p), "Succeeded" | "Failed"))
        .map(|p| (p.metadata.uid.clone().unwrap_or_default(), p))
        .collect();
    let mut ips = ctx.ips.lock().unwrap_or_else(PoisonError::into_inner);
    let handed = ips.entry(node.name.clone()).or_default();
    // Forget IPs handed to pods that are gone or whose status now holds them.
    handed.retain(|u, _| {
        live.get(u)
            .is_some_and(|p| p.status.as_ref().is_none_or(|s| s.pod_ip.is_none()))
    });
    if let Some(ip) = handed.get(&uid) {
        return ip.clone();
    }
    // Hosts in use, by the last octet of addresses in the node's prefix.
    let mut used = [false; 256];
    let prefix = format!("{}.", node.pod_prefix);
    let host = |ip: &str| ip.strip_prefix(&prefix)?.parse::<u8>().ok();
    let live_ips = live
        .values()
        .filter_map(|p| p.status.as_ref()?.pod_ip.as_deref());
    for h in handed
        .values()
        .map(String::as_str)
        .chain(live_ips)
        .filter_map(host)
    {
        used[usize::from(h)] = true;
    }
    let free = (2..=254u8).find(|h| !used[usize::from(*h)]).unwrap_or(254);
    let ip = format!("{prefix}{free}");
    handed.insert(uid, ip.clone());
    ip
}
