//! The rolling update (kcm's `deployment/rolling.go`): the new ReplicaSet grows as far as
//! maxSurge allows, the old ones shrink as far as maxUnavailable allows — unhealthy old
//! replicas first — one step per sync, each step woken by the ReplicaSets' status.

use k8s_openapi::api::apps::v1::ReplicaSet;
use konverge_runtime::Action;

use super::Rollout;
use super::util;
use crate::error::{Error, Result};

impl Rollout<'_> {
    /// One step of a rolling update (kcm's `rolloutRolling`).
    pub(super) async fn rollout_rolling(&mut self) -> Result<Action> {
        let (new, old) = self.new_and_old(true).await?;
        let Some(new) = new else {
            return Err(Error::invalid("the new replica set was not made"));
        };
        if self.reconcile_new(&new, &old).await? {
            let (new, old) = self.refreshed(Some(&new), &old);
            return self.sync_rollout_status(new.as_ref(), &old).await;
        }
        let (fresh_new, fresh_old) = self.refreshed(Some(&new), &old);
        let new = fresh_new.unwrap_or(new);
        if self.reconcile_old(&new, &fresh_old).await? {
            let (new, old) = self.refreshed(Some(&new), &old);
            return self.sync_rollout_status(new.as_ref(), &old).await;
        }
        if util::complete(&self.d, &self.status()) {
            self.cleanup(&fresh_old).await?;
        }
        let (new, old) = self.refreshed(Some(&new), &fresh_old);
        self.sync_rollout_status(new.as_ref(), &old).await
    }

    /// Grows (or shrinks) the new ReplicaSet toward `spec.replicas` within maxSurge; whether
    /// it scaled (kcm's `reconcileNewReplicaSet`).
    async fn reconcile_new(&mut self, new: &ReplicaSet, old: &[ReplicaSet]) -> Result<bool> {
        let desired = util::desired(&self.d);
        let current = util::replicas(new);
        if current == desired {
            return Ok(false);
        }
        if current > desired {
            return Ok(self.scale_and_record(new, desired).await?.0);
        }
        let target = util::new_rs_new_replicas(&self.d, old.iter().chain([new]), new)
            .map_err(Error::invalid)?;
        Ok(self.scale_and_record(new, target).await?.0)
    }

    /// Shrinks the old ReplicaSets as far as availability allows; whether any shrank (kcm's
    /// `reconcileOldReplicaSets`).
    async fn reconcile_old(&mut self, new: &ReplicaSet, old: &[ReplicaSet]) -> Result<bool> {
        let mut old: Vec<ReplicaSet> = util::active(old).into_iter().cloned().collect();
        if util::total(&old, util::replicas) == 0 {
            return Ok(false);
        }
        let all_pods = util::total(old.iter().chain([new]), util::replicas);
        let min_available = util::desired(&self.d) - util::max_unavailable(&self.d);
        let new_unavailable = util::replicas(new) - util::available(new);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        let cleaned = self.cleanup_unhealthy(&mut old, max_scaled_down).await?;
        let scaled = self.scale_down_old(new, &mut old).await?;
        Ok(cleaned + scaled > 0)
    }

    /// Scales away old replicas that are not available, oldest ReplicaSets first, at most
    /// `max_cleanup` (kcm's `cleanupUnhealthyReplicas`).
    async fn cleanup_unhealthy(&mut self, old: &mut [ReplicaSet], max_cleanup: i32) -> Result<i32> {
        old.sort_by(util::by_creation);
        let mut scaled_down = 0;
        for slot in old.iter_mut() {
            if scaled_down >= max_cleanup {
                break;
            }
            let replicas = util::replicas(slot);
            let unhealthy = replicas - util::available(slot);
            if replicas == 0 || unhealthy == 0 {
                continue;
            }
            let count = (max_cleanup - scaled_down).min(unhealthy);
            let target = replicas - count;
            if target > replicas {
                return Err(Error::Unsettled(format!(
                    "when cleaning up unhealthy replicas, got invalid request to scale down {}/{} {replicas} -> {target}",
                    self.namespace(),
                    kube::ResourceExt::name_any(slot)
                )));
            }
            let (_, updated) = self.scale_and_record(slot, target).await?;
            *slot = updated;
            scaled_down += count;
        }
        Ok(scaled_down)
    }

    /// Scales old ReplicaSets down by as many available replicas as exceed the minimum
    /// availability, oldest first (kcm's `scaleDownOldReplicaSetsForRollingUpdate`).
    async fn scale_down_old(&mut self, new: &ReplicaSet, old: &mut [ReplicaSet]) -> Result<i32> {
        let min_available = util::desired(&self.d) - util::max_unavailable(&self.d);
        let available = util::total(old.iter().chain([new]), util::available);
        if available <= min_available {
            return Ok(0);
        }
        old.sort_by(util::by_creation);
        let to_scale_down = available - min_available;
        let mut scaled_down = 0;
        for rs in old.iter() {
            if scaled_down >= to_scale_down {
                break;
            }
            let replicas = util::replicas(rs);
            if replicas == 0 {
                continue;
            }
            let count = replicas.min(to_scale_down - scaled_down);
            self.scale_and_record(rs, replicas - count).await?;
            scaled_down += count;
        }
        Ok(scaled_down)
    }
}
