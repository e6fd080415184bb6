//! The Recreate strategy (kcm's `deployment/recreate.go`): every old ReplicaSet goes to
//! zero, and only once no old pod runs does the new ReplicaSet start, at full size.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use konverge_runtime::Action;

use super::Rollout;
use super::util;
use crate::controller_ref;
use crate::error::{Error, Result};
use crate::pods;

impl Rollout<'_> {
    /// One step of a Recreate rollout (kcm's `rolloutRecreate`).
    pub(super) async fn rollout_recreate(&mut self) -> Result<Action> {
        let (new, old) = self.new_and_old(false).await?;
        if self.scale_down_old_for_recreate(&old).await? {
            let (new, old) = self.refreshed(new.as_ref(), &old);
            return self.sync_rollout_status(new.as_ref(), &old).await;
        }
        if self.old_pods_running(new.as_ref(), &old) {
            return self.sync_rollout_status(new.as_ref(), &old).await;
        }
        let (new, old) = match new {
            Some(new) => (new, old),
            None => {
                let (new, old) = self.new_and_old(true).await?;
                let new = new.ok_or_else(|| Error::invalid("the new replica set was not made"))?;
                (new, old)
            }
        };
        self.scale_and_record(&new, util::desired(&self.d)).await?;
        if util::complete(&self.d, &self.status()) {
            self.cleanup(&old).await?;
        }
        let (new, old) = self.refreshed(Some(&new), &old);
        self.sync_rollout_status(new.as_ref(), &old).await
    }

    /// Scales every active old ReplicaSet to zero; whether any was scaled.
    async fn scale_down_old_for_recreate(&mut self, old: &[ReplicaSet]) -> Result<bool> {
        let mut scaled = false;
        for rs in util::active(old) {
            scaled |= self.scale_and_record(rs, 0).await?.0;
        }
        Ok(scaled)
    }

    /// Whether any pod of an old ReplicaSet may still run (kcm's `oldPodsRunning`): the old
    /// ReplicaSets report pods, or the cache holds one of their pods not yet Succeeded or
    /// Failed.
    fn old_pods_running(&self, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> bool {
        if util::total(old, util::actual) > 0 {
            return true;
        }
        let new_uid = new.and_then(|rs| rs.metadata.uid.as_deref());
        self.pods_by_replica_set()
            .into_iter()
            .filter(|(uid, _)| Some(uid.as_str()) != new_uid)
            .flat_map(|(_, pods)| pods)
            .any(|pod| !matches!(pods::phase(&pod), "Succeeded" | "Failed"))
    }

    /// The pods the Deployment's selector matches, by the uid of the claimed ReplicaSet that
    /// controls each (kcm's `getPodMapForDeployment`).
    fn pods_by_replica_set(&self) -> BTreeMap<String, Vec<std::sync::Arc<Pod>>> {
        let mut map: BTreeMap<String, Vec<std::sync::Arc<Pod>>> = self
            .sets
            .iter()
            .filter_map(|rs| rs.metadata.uid.clone())
            .map(|uid| (uid, Vec::new()))
            .collect();
        let Ok(selector) = controller_ref::selector(self.d.spec.as_ref().map(|s| &s.selector))
        else {
            return map;
        };
        for pod in self.ctx.pods.list_namespace(&self.namespace()) {
            if !selector.matches(pods::labels(&pod)) {
                continue;
            }
            let Some(owner) = controller_ref::controller_of(&pod.metadata) else {
                continue;
            };
            if let Some(list) = map.get_mut(&owner.uid) {
                list.push(pod);
            }
        }
        map
    }
}
