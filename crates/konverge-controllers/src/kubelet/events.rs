//! The kubelet's Events (`pkg/kubelet/events`): reasons and messages as kube 1.33 words them.
//!
//! Each event belongs to a moment of a pod's simulated timeline (a container created, an
//! image pulled, a back-off begun) and has a key naming that transition. The status
//! computation lists the events whose moment has come; the pod worker records those whose
//! key it has not recorded for the pod yet, so each is recorded once however often the pod
//! is reconciled. A kubelet that admits a pod some earlier kubelet already ran records none
//! of the pod's past (a restarted kubelet does not replay history).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::runtime::events::EventType;

use crate::events::Events;

/// The component kubelet events come from.
pub(super) const COMPONENT: &str = "kubelet";

/// An event of a pod's timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Planned {
    /// What makes it one transition (`app/0/Started`).
    pub(super) key: String,
    /// When it happens.
    pub(super) at: Timestamp,
    pub(super) type_: Type,
    pub(super) reason: &'static str,
    pub(super) message: String,
    /// The container it is about (`spec.containers{web}`), as kubelet references name it.
    pub(super) field_path: Option<String>,
}

/// An event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Type {
    Normal,
    Warning,
}

/// Records `planned` about `pod`.
pub(super) fn record(events: &Events, pod: &Pod, planned: &Planned) {
    let mut reference = pod.object_ref(&());
    reference.field_path.clone_from(&planned.field_path);
    let type_ = match planned.type_ {
        Type::Normal => EventType::Normal,
        Type::Warning => EventType::Warning,
    };
    events.record(reference, type_, planned.reason, planned.message.clone());
}

/// `spec.containers{name}` or `spec.initContainers{name}`.
pub(super) fn field_path(init: bool, name: &str) -> String {
    let list = if init { "initContainers" } else { "containers" };
    format!("spec.{list}{{{name}}}")
}

/// Go's `time.Duration` printing of whole seconds (`0s`, `10s`, `1m20s`, `5m0s`).
pub(super) fn go_duration(secs: u64) -> String {
    let nanos = i64::try_from(secs)
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .unwrap_or(i64::MAX);
    konverge_apimachinery::duration::format_nanos(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_prints_them() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(10), "10s");
        assert_eq!(go_duration(80), "1m20s");
        assert_eq!(go_duration(300), "5m0s");
        assert_eq!(go_duration(3723), "1h2m3s");
        assert_eq!(field_path(true, "init"), "spec.initContainers{init}");
    }
}
