//! The delay before a Job replaces a failed pod: 10 s after the first failure since the
//! last success, doubling with each further one, at most 10 minutes (kcm's
//! `backoff_utils.go`).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;

/// kcm's `DefaultJobPodFailureBackOff`.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
/// kcm's `MaxJobPodFailureBackOff`.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// A Job's failures since its last success, kept by the controller between syncs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Failed pods that finished after the last succeeded one.
    pub failures_after_last_success: u32,
    /// When the last of them finished.
    pub last_failure: Option<Timestamp>,
}

impl Record {
    /// The record after `succeeded` and `failed` pods (not counted before) finished.
    pub fn after(self, succeeded: &[&Pod], failed: &[&Pod]) -> Record {
        let last_success = succeeded.iter().map(|p| finished_at(p)).max();
        let mut failed_times: Vec<Timestamp> = failed.iter().map(|p| finished_at(p)).collect();
        failed_times.sort();
        match last_success {
            None => match failed_times.last() {
                None => self,
                Some(last) => Record {
                    failures_after_last_success: self.failures_after_last_success
                        + failed_times.len() as u32,
                    last_failure: Some(*last),
                },
            },
            Some(success) => {
                let after: Vec<&Timestamp> =
                    failed_times.iter().filter(|t| **t > success).collect();
                Record {
                    failures_after_last_success: after.len() as u32,
                    last_failure: after.last().map(|t| **t),
                }
            }
        }
    }

    /// How long to wait at `now` before creating a replacement pod.
    pub fn remaining(&self, now: Timestamp) -> Duration {
        remaining(self.failures_after_last_success, self.last_failure, now)
    }
}

/// The wait after `failures` consecutive failures, the last at `last_failure`.
pub fn remaining(failures: u32, last_failure: Option<Timestamp>, now: Timestamp) -> Duration {
    let Some(last_failure) = last_failure.filter(|_| failures > 0) else {
        return Duration::ZERO;
    };
    let mut backoff = DEFAULT_BACKOFF;
    for _ in 1..failures {
        backoff = backoff.saturating_mul(2);
        if backoff >= MAX_BACKOFF {
            backoff = MAX_BACKOFF;
            break;
        }
    }
    let elapsed = now.duration_since(last_failure);
    let backoff = SignedDuration::try_from(backoff).unwrap_or(SignedDuration::MAX);
    if backoff < elapsed {
        return Duration::ZERO;
    }
    Duration::try_from(backoff - elapsed).unwrap_or(Duration::ZERO)
}

/// When a pod finished: its containers' last finish, else its Ready=False transition,
/// else the start of its deletion, else its creation (kcm's `getFinishedTime`).
pub fn finished_at(pod: &Pod) -> Timestamp {
    let status = pod.status.as_ref();
    let containers = status.and_then(|s| s.container_statuses.as_ref());
    let mut latest: Option<Timestamp> = None;
    let mut all_finished = true;
    for container in containers.into_iter().flatten() {
        match container
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref())
        {
            Some(at) => latest = Some(latest.map_or(at.0, |l| l.max(at.0))),
            None => all_finished = false,
        }
    }
    if all_finished && let Some(at) = latest {
        return at;
    }
    if let Some(at) = crate::pods::condition(pod, "Ready")
        .filter(|c| c.status == "False")
        .and_then(|c| c.last_transition_time.as_ref())
    {
        return at.0;
    }
    if let Some(deleted) = &pod.metadata.deletion_timestamp {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        return deleted
            .0
            .checked_sub(SignedDuration::from_secs(grace))
            .unwrap_or(deleted.0);
    }
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_ten_minutes() {
        let at = |s| Timestamp::from_second(s).expect("a time");
        assert_eq!(remaining(0, Some(at(0)), at(0)), Duration::ZERO);
        assert_eq!(remaining(1, Some(at(0)), at(3)), Duration::from_secs(7));
        assert_eq!(remaining(3, Some(at(0)), at(0)), Duration::from_secs(40));
        assert_eq!(remaining(20, Some(at(0)), at(0)), MAX_BACKOFF);
        assert_eq!(remaining(2, Some(at(0)), at(25)), Duration::ZERO);
    }
}
