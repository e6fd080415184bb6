//! What every part of the DaemonSet controller works with: its context, the key its
//! expectations are kept under, the requeue it asks for, and small readings of a DaemonSet
//! and its pods. Below `manage`, `update` and `history`, which all use it.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use konverge_runtime::{Action, Store};
use kube::ResourceExt;

use super::backoff::Backoff;
use super::strategy;
use crate::clock::Clock;
use crate::events::Events;
use crate::expectations::Expectations;
use crate::pods;

/// The label naming the revision a pod or revision belongs to
/// (`apps.DefaultDaemonSetUniqueLabelKey`).
pub const HASH_LABEL: &str = "controller-revision-hash";

/// What the reconciler works with.
pub(super) struct Ctx {
    pub(super) client: kube::Client,
    pub(super) clock: Clock,
    pub(super) events: Events,
    pub(super) expectations: Arc<Expectations>,
    pub(super) backoff: Backoff,
    pub(super) pods: Store<Pod>,
    pub(super) nodes: Store<Node>,
    pub(super) revisions: Store<ControllerRevision>,
}

/// The key expectations are kept under: `namespace/name`.
pub(super) fn key_of(ds: &DaemonSet) -> String {
    format!("{}/{}", ds.namespace().unwrap_or_default(), ds.name_any())
}

/// The shortest delay after which a sync wants to look again.
#[derive(Debug, Default)]
pub(super) struct Requeue(Option<Duration>);

impl Requeue {
    pub(super) fn within(&mut self, delay: Duration) {
        self.0 = Some(self.0.map_or(delay, |d| d.min(delay)));
    }

    pub(super) fn action(&self) -> Action {
        self.0.map_or_else(Action::await_change, Action::requeue)
    }
}

pub(super) fn min_ready_seconds(ds: &DaemonSet) -> i32 {
    ds.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

/// Whether `ds` may run two pods on a node during an update (kcm's `AllowsSurge`).
pub(super) fn allows_surge(ds: &DaemonSet) -> bool {
    strategy::surge_count(ds, 1).is_ok_and(|n| n > 0)
}

/// Whether `pod` runs the revision `hash` (kcm's `IsPodUpdated`). kcm also compares the
/// `pod-template-generation` label, but against the printed address of the generation
/// rather than its value, so that comparison never holds; only the hash decides.
pub(super) fn is_updated(pod: &Pod, hash: &str) -> bool {
    !hash.is_empty() && pods::labels(pod).get(HASH_LABEL).map(String::as_str) == Some(hash)
}

/// Scheduled pods first, then the oldest, then by name (kcm's
/// `podByCreationTimestampAndPhase`).
pub(super) fn by_age(a: &Pod, b: &Pod) -> Ordering {
    let scheduled = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    scheduled(b)
        .cmp(&scheduled(a))
        .then_with(|| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a).cmp(&created(b))
        })
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}
