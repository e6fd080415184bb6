//! The status a ReplicaSet reports (kcm's `calculateStatus`), and when a pod of it becomes
//! available.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use konverge_apimachinery::selector::LabelSelector;

use super::kind::{Condition, ReplicaKind, ReplicaStatus};
use crate::pods;

/// kcm's condition type for pods that could not be created or deleted.
pub(crate) const REPLICA_FAILURE: &str = "ReplicaFailure";

/// What went wrong creating or deleting pods, as the ReplicaFailure condition tells it.
#[derive(Clone, Debug)]
pub(crate) struct ManageFailure {
    /// The error's text (kcm's `err.Error()`).
    pub(crate) message: String,
}

/// The status `owner` should have with `pods` (its active pods) after a sync that failed
/// with `failure`, if it did. The counts are kcm's; the ReplicaFailure condition is added
/// on a failure (reason `FailedCreate` when short of pods, `FailedDelete` when over),
/// kept as it is while failures go on, and removed by the first sync that does not fail.
pub(crate) fn calculate<K: ReplicaKind>(
    owner: &K,
    pods: &[Arc<Pod>],
    failure: Option<&ManageFailure>,
    now: Timestamp,
    transition: Time,
) -> ReplicaStatus {
    let mut status = owner.replica_status();
    let template_labels = owner
        .template()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let fully_labeled = LabelSelector::from_set(&template_labels);
    let min_ready = owner.min_ready_seconds();
    let has_failure = status.conditions.iter().any(|c| c.type_ == REPLICA_FAILURE);
    match failure {
        Some(failure) if !has_failure => {
            let diff = i64::try_from(pods.len()).unwrap_or(i64::MAX) - i64::from(owner.desired());
            let reason = match diff.signum() {
                -1 => Some("FailedCreate".to_string()),
                1 => Some("FailedDelete".to_string()),
                _ => None,
            };
            status.conditions.push(Condition {
                type_: REPLICA_FAILURE.into(),
                status: "True".into(),
                reason,
                message: Some(failure.message.clone()).filter(|m| !m.is_empty()),
                last_transition_time: Some(transition),
            });
        }
        None if has_failure => status.conditions.retain(|c| c.type_ != REPLICA_FAILURE),
        _ => {}
    }
    // One look at each pod (a sync of a large ReplicaSet is mostly this loop).
    let (mut labeled, mut ready, mut available) = (0usize, 0usize, 0usize);
    for pod in pods {
        labeled += usize::from(fully_labeled.matches(pods::labels(pod)));
        if pods::is_ready(pod) {
            ready += 1;
            available += usize::from(pods::is_available(pod, min_ready, now));
        }
    }
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    status.replicas = count(pods.len());
    status.fully_labeled_replicas = count(labeled);
    status.ready_replicas = count(ready);
    status.available_replicas = count(available);
    status
}

/// How long until the next of `pods` that is ready but not yet available becomes
/// available, plus a second (kcm's margin against clock skew); `None` if none will.
pub(crate) fn next_available(
    pods: &[Arc<Pod>],
    min_ready_seconds: i32,
    now: Timestamp,
) -> Option<Duration> {
    if min_ready_seconds <= 0 {
        return None;
    }
    let wait = SignedDuration::from_secs(i64::from(min_ready_seconds));
    pods.iter()
        .filter(|p| pods::is_ready(p) && !pods::is_available(p, min_ready_seconds, now))
        .filter_map(|p| {
            let since = pods::condition(p, "Ready")?
                .last_transition_time
                .as_ref()?
                .0;
            let until = since.checked_add(wait).ok()?.duration_since(now);
            let delay = until.checked_add(SignedDuration::from_secs(1))?;
            Some(Duration::try_from(delay).unwrap_or(Duration::ZERO))
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSet;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("a time")
    }

    fn replica_set(replicas: i32, min_ready: i32) -> ReplicaSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "generation": 2},
            "spec": {
                "replicas": replicas,
                "minReadySeconds": min_ready,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web", "tier": "front"}}},
            },
        }))
        .expect("a replicaset")
    }

    fn pod(labels: serde_json::Value, ready_since: Option<i64>) -> Arc<Pod> {
        let conditions = ready_since.map(|s| {
            serde_json::json!([{"type": "Ready", "status": "True",
                                "lastTransitionTime": at(s).to_string()}])
        });
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"labels": labels},
                "status": {"phase": "Running", "conditions": conditions.unwrap_or_default()},
            }))
            .expect("a pod"),
        )
    }

    #[test]
    fn counts_labels_readiness_and_availability() {
        let rs = replica_set(3, 10);
        let pods = vec![
            pod(
                serde_json::json!({"app": "web", "tier": "front"}),
                Some(100),
            ),
            pod(
                serde_json::json!({"app": "web", "tier": "front"}),
                Some(195),
            ),
            pod(serde_json::json!({"app": "web"}), None),
        ];
        let status = calculate(&rs, &pods, None, at(200), Time(at(200)));
        assert_eq!(
            (
                status.replicas,
                status.fully_labeled_replicas,
                status.ready_replicas,
                status.available_replicas
            ),
            (3, 2, 2, 1)
        );
        assert!(status.conditions.is_empty());
        // Ready at 195, available after 205: looked at again at 206.
        assert_eq!(
            next_available(&pods, 10, at(200)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(next_available(&pods, 0, at(200)), None);
    }

    #[test]
    fn a_failure_is_reported_once_and_cleared_by_success() {
        let mut rs = replica_set(3, 0);
        let failure = ManageFailure {
            message: "pods \"web-x\" is forbidden: exceeded quota".into(),
        };
        let status = calculate(&rs, &[], Some(&failure), at(5), Time(at(5)));
        let condition = &status.conditions[0];
        assert_eq!(condition.type_, "ReplicaFailure");
        assert_eq!(condition.reason.as_deref(), Some("FailedCreate"));
        assert_eq!(condition.message.as_deref(), Some(failure.message.as_str()));
        rs.set_replica_status(&status);
        // A later failure keeps the first condition as it is.
        let other = ManageFailure {
            message: "another".into(),
        };
        let again = calculate(&rs, &[], Some(&other), at(9), Time(at(9)));
        assert_eq!(again.conditions, status.conditions);
        rs.set_replica_status(&again);
        let cleared = calculate(&rs, &[], None, at(10), Time(at(10)));
        assert!(cleared.conditions.is_empty());
    }
}
