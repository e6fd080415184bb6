//! The Progressing condition and the progress deadline (kcm's `deployment/progress.go`).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus, ReplicaSet};
use konverge_runtime::Action;
use kube::ResourceExt;

use super::Rollout;
use super::util::{self, reason};
use crate::error::Result;

impl Rollout<'_> {
    /// Writes the rollout's status (kcm's `syncRolloutStatus`): the counts and Available as
    /// [`calculate_status`](Rollout::calculate_status) makes them; Progressing, for a
    /// Deployment with a progress deadline whose rollout is not known complete, says it
    /// completed (`NewReplicaSetAvailable`), moved (`ReplicaSetUpdated`) or ran out of time
    /// (`ProgressDeadlineExceeded`); ReplicaFailure mirrors the ReplicaSets'. A rollout that
    /// may still time out is looked at again when its deadline passes.
    pub(super) async fn sync_rollout_status(
        &mut self,
        new: Option<&ReplicaSet>,
        old: &[ReplicaSet],
    ) -> Result<Action> {
        let mut status = self.calculate_status(new, old);
        if util::progress_deadline(&self.d).is_none() {
            util::remove_condition(&mut status, reason::PROGRESSING);
        }
        let current = self.status();
        let current_reason =
            util::get_condition(Some(&current), reason::PROGRESSING).and_then(|c| c.reason.clone());
        let known_complete = status.replicas == status.updated_replicas
            && current_reason.as_deref() == Some(reason::NEW_RS_AVAILABLE);
        if util::progress_deadline(&self.d).is_some() && !known_complete {
            self.set_progressing(&mut status, new);
        }
        match self.replica_failures(new, old).into_iter().next() {
            Some(failure) => util::set_condition(&mut status, failure),
            None => util::remove_condition(&mut status, reason::REPLICA_FAILURE),
        }
        if self.d.status.as_ref() != Some(&status) {
            self.write_status(status.clone()).await?;
        }
        Ok(self.requeue_stuck(&status))
    }

    /// The Progressing condition `status` calls for.
    fn set_progressing(&self, status: &mut DeploymentStatus, new: Option<&ReplicaSet>) {
        let d = &self.d;
        let now = self.ctx.clock.now_time();
        let subject = |what: &str| match new {
            Some(rs) => format!("ReplicaSet {:?} {what}", rs.name_any()),
            None => format!("Deployment {:?} {what}", d.name_any()),
        };
        if util::complete(d, status) {
            let done = util::condition(
                reason::PROGRESSING,
                "True",
                reason::NEW_RS_AVAILABLE,
                subject("has successfully progressed."),
                &now,
            );
            util::set_condition(status, done);
        } else if util::progressing(d, status) {
            let mut moved = util::condition(
                reason::PROGRESSING,
                "True",
                reason::REPLICA_SET_UPDATED,
                subject("is progressing."),
                &now,
            );
            let current = self.status();
            if let Some(previous) = util::get_condition(Some(&current), reason::PROGRESSING) {
                if previous.status == "True" {
                    moved.last_transition_time = previous.last_transition_time.clone();
                }
                util::remove_condition(status, reason::PROGRESSING);
            }
            util::set_condition(status, moved);
        } else if util::timed_out(d, status, now.0) {
            let stuck = util::condition(
                reason::PROGRESSING,
                "False",
                reason::TIMED_OUT,
                subject("has timed out progressing."),
                &now,
            );
            util::set_condition(status, stuck);
        }
    }

    /// The ReplicaFailure conditions of the new ReplicaSet, or else of any (kcm's
    /// `getReplicaFailures`).
    fn replica_failures(
        &self,
        new: Option<&ReplicaSet>,
        old: &[ReplicaSet],
    ) -> Vec<DeploymentCondition> {
        let failures = |rs: &ReplicaSet| -> Vec<DeploymentCondition> {
            rs.status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .filter(|c| c.type_ == reason::REPLICA_FAILURE)
                .map(util::from_replica_set_condition)
                .collect()
        };
        let of_new: Vec<_> = new.map(failures).unwrap_or_default();
        if !of_new.is_empty() {
            return of_new;
        }
        old.iter().chain(new).flat_map(failures).collect()
    }

    /// When to look again at a rollout that may still run out of time (kcm's
    /// `requeueStuckDeployment`): a second after its deadline.
    fn requeue_stuck(&self, status: &DeploymentStatus) -> Action {
        let current = self.status();
        let Some(progressing) = util::get_condition(Some(&current), reason::PROGRESSING) else {
            return Action::await_change();
        };
        if util::progress_deadline(&self.d).is_none()
            || util::complete(&self.d, status)
            || progressing.reason.as_deref() == Some(reason::TIMED_OUT)
        {
            return Action::await_change();
        }
        let Some(deadline) = util::deadline_of(&self.d, &current) else {
            return Action::await_change();
        };
        let left = deadline.duration_since(self.ctx.clock.now());
        match Duration::try_from(left) {
            Ok(left) if left >= Duration::from_secs(1) => {
                Action::requeue(left + Duration::from_secs(1))
            }
            _ => Action::requeue(Duration::from_secs(1)),
        }
    }
}
