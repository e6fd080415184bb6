//! Finding or making the new ReplicaSet, scaling, cleaning up old ReplicaSets and writing
//! the status (kcm's `deployment/sync.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams, Preconditions};

use super::Rollout;
use super::util::{self, reason};
use crate::controller_ref;
use crate::error::{Error, Result};

/// Which way a scale goes, as kcm's events say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
    Up,
    Down,
}

impl Direction {
    fn word(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// The text of a failed request, as kcm prints its error.
fn message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Whether the server refused a create because the namespace is being deleted.
fn namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// A count as the API serializes it: `omitempty` drops zeros.
fn count(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

impl Rollout<'_> {
    /// The new ReplicaSet (made if `create` and missing) and the old ones, with the
    /// revisions synced (kcm's `getAllReplicaSetsAndSyncRevision`).
    pub(super) async fn new_and_old(
        &mut self,
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>)> {
        let old = util::find_old(&self.d, &self.sets);
        let new = self.new_replica_set(&old, create).await?;
        Ok((new, old))
    }

    /// The ReplicaSet whose template is the Deployment's, its annotations, revision and
    /// `minReadySeconds` brought up to date; made if missing and `create` (kcm's
    /// `getNewReplicaSet`).
    async fn new_replica_set(
        &mut self,
        old: &[ReplicaSet],
        create: bool,
    ) -> Result<Option<ReplicaSet>> {
        let new_revision = util::max_revision(old) + 1;
        if let Some(existing) = util::find_new(&self.d, &self.sets).cloned() {
            return self.sync_existing(existing, new_revision).await.map(Some);
        }
        if !create {
            return Ok(None);
        }
        self.create_new(old, new_revision).await.map(Some)
    }

    /// An existing new ReplicaSet: its annotations and `minReadySeconds` first; once they
    /// are right, the Deployment's revision and (for a Deployment with a progress deadline
    /// and no Progressing condition yet) `FoundNewReplicaSet`.
    async fn sync_existing(
        &mut self,
        existing: ReplicaSet,
        new_revision: i64,
    ) -> Result<ReplicaSet> {
        let mut rs = existing;
        let annotations_changed =
            util::set_new_rs_annotations(&self.d, &mut rs, new_revision, true);
        let min_ready = util::min_ready_seconds(&self.d);
        let spec = rs.spec.get_or_insert_with(ReplicaSetSpec::default);
        let min_ready_changed = spec.min_ready_seconds.unwrap_or(0) != min_ready.unwrap_or(0);
        if annotations_changed || min_ready_changed {
            spec.min_ready_seconds = min_ready;
            return self.update_replica_set(&rs).await;
        }
        let revision = rs
            .annotations()
            .get(util::REVISION)
            .cloned()
            .unwrap_or_default();
        let mut changed = util::set_deployment_revision(&mut self.d, &revision);
        let mut status = self.status();
        if util::progress_deadline(&self.d).is_some()
            && util::get_condition(Some(&status), reason::PROGRESSING).is_none()
        {
            let found = util::condition(
                reason::PROGRESSING,
                "True",
                reason::FOUND_NEW_RS,
                format!("Found new replica set {:?}", rs.name_any()),
                &self.ctx.clock.now_time(),
            );
            util::set_condition(&mut status, found);
            changed = true;
        }
        if changed {
            self.write_status(status).await?;
        }
        Ok(rs)
    }

    /// Makes the new ReplicaSet `<deployment>-<hash>`: the template with the hash label,
    /// the selector requiring it, the replicas the strategy allows now.
    async fn create_new(&mut self, old: &[ReplicaSet], new_revision: i64) -> Result<ReplicaSet> {
        let spec = self.d.spec.clone().unwrap_or_default();
        let collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        let hash = util::pod_template_hash(&spec.template, collision_count);
        let mut template = spec.template.clone();
        let template_meta = template.metadata.get_or_insert_with(ObjectMeta::default);
        template_meta
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(util::POD_TEMPLATE_HASH.into(), hash.clone());
        let labels = template_meta.labels.clone();
        let mut selector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(util::POD_TEMPLATE_HASH.into(), hash.clone());
        let name = format!("{}-{hash}", self.d.name_any());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace()),
                owner_references: Some(vec![controller_ref::new_controller_ref(&self.d)]),
                labels,
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: util::min_ready_seconds(&self.d),
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let replicas = util::new_rs_new_replicas(&self.d, old.iter().chain([&rs]), &rs)
            .map_err(Error::invalid)?;
        if let Some(spec) = rs.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
        util::set_new_rs_annotations(&self.d, &mut rs, new_revision, false);
        let (created, already_existed) = match self
            .replica_sets()
            .create(&PostParams::default(), &rs)
            .await
        {
            Ok(created) => (created, false),
            Err(kube::Error::Api(status))
                if status.code == 409 && status.reason == "AlreadyExists" =>
            {
                (self.existing_or_collision(&name, *status).await?, true)
            }
            Err(error) if namespace_terminating(&error) => return Err(error.into()),
            Err(error) => return Err(self.failed_create(&name, error).await),
        };
        self.remember(&created);
        if !already_existed && replicas > 0 {
            self.ctx.events.normal(
                &self.d,
                "ScalingReplicaSet",
                format!("Scaled up replica set {name} from 0 to {replicas}"),
            );
        }
        let mut changed = util::set_deployment_revision(&mut self.d, &new_revision.to_string());
        let mut status = self.status();
        if !already_existed && util::progress_deadline(&self.d).is_some() {
            let created_condition = util::condition(
                reason::PROGRESSING,
                "True",
                reason::NEW_REPLICA_SET,
                format!("Created new replica set {name:?}"),
                &self.ctx.clock.now_time(),
            );
            util::set_condition(&mut status, created_condition);
            changed = true;
        }
        if changed {
            self.write_status(status).await?;
        }
        Ok(created)
    }

    /// The new ReplicaSet's name is taken: by this very ReplicaSet (an earlier create whose
    /// answer was lost, or a cache behind), which is then the new one; or by another
    /// template whose hash collides, which bumps `status.collisionCount` so the next sync
    /// hashes to another name.
    async fn existing_or_collision(
        &mut self,
        name: &str,
        conflict: kube::core::Status,
    ) -> Result<ReplicaSet> {
        let found = self.replica_sets().get(name).await?;
        let ours = controller_ref::controller_of(&found.metadata)
            .is_some_and(|r| Some(r.uid.as_str()) == self.d.metadata.uid.as_deref());
        let same_template =
            util::equal_ignore_hash(&util::deployment_template(&self.d), &util::template(&found));
        if ours && same_template {
            return Ok(found);
        }
        let mut status = self.status();
        status.collision_count = Some(status.collision_count.unwrap_or(0).saturating_add(1));
        if self.write_status(status).await.is_ok() {
            tracing::info!(
                deployment = %self.d.name_any(),
                "found a hash collision for deployment - bumping collisionCount to resolve it"
            );
        }
        Err(kube::Error::Api(Box::new(conflict)).into())
    }

    /// A create the server refused: `ReplicaSetCreateError` as an event, and as the
    /// Progressing condition for a Deployment with a progress deadline.
    async fn failed_create(&mut self, name: &str, error: kube::Error) -> Error {
        let text = format!(
            "Failed to create new replica set {name:?}: {}",
            message(&error)
        );
        if util::progress_deadline(&self.d).is_some() {
            let mut status = self.status();
            let failed = util::condition(
                reason::PROGRESSING,
                "False",
                reason::FAILED_RS_CREATE,
                text.clone(),
                &self.ctx.clock.now_time(),
            );
            util::set_condition(&mut status, failed);
            // The create's error is the one reported; this write is best effort, as kcm's.
            let _ = self.write_status(status).await;
        }
        self.ctx
            .events
            .warning(&self.d, reason::FAILED_RS_CREATE, text);
        error.into()
    }

    /// Writes a ReplicaSet (an update guarded by its resourceVersion).
    pub(super) async fn update_replica_set(&mut self, rs: &ReplicaSet) -> Result<ReplicaSet> {
        let updated = self
            .replica_sets()
            .replace(&rs.name_any(), &PostParams::default(), rs)
            .await?;
        self.remember(&updated);
        Ok(updated)
    }

    /// Scales `rs` to `new_scale` unless it is there already; whether it scaled, and the
    /// ReplicaSet as written (kcm's `scaleReplicaSetAndRecordEvent`).
    pub(super) async fn scale_and_record(
        &mut self,
        rs: &ReplicaSet,
        new_scale: i32,
    ) -> Result<(bool, ReplicaSet)> {
        if util::replicas(rs) == new_scale {
            return Ok((false, rs.clone()));
        }
        let direction = if util::replicas(rs) < new_scale {
            Direction::Up
        } else {
            Direction::Down
        };
        self.scale_replica_set(rs, new_scale, direction).await
    }

    /// Sets `rs`'s replicas and its desired/max replica annotations; records
    /// `ScalingReplicaSet` when the size changed (kcm's `scaleReplicaSet`).
    pub(super) async fn scale_replica_set(
        &mut self,
        rs: &ReplicaSet,
        new_scale: i32,
        direction: Direction,
    ) -> Result<(bool, ReplicaSet)> {
        let desired = util::desired(&self.d);
        let max = desired.saturating_add(util::max_surge(&self.d));
        let old_scale = util::replicas(rs);
        let size_changes = old_scale != new_scale;
        if !size_changes && !util::replicas_annotations_differ(rs, desired, max) {
            return Ok((false, rs.clone()));
        }
        let mut copy = rs.clone();
        copy.spec
            .get_or_insert_with(ReplicaSetSpec::default)
            .replicas = Some(new_scale);
        util::set_replicas_annotations(&mut copy, desired, max);
        let updated = self.update_replica_set(&copy).await?;
        if size_changes {
            self.ctx.events.normal(
                &self.d,
                "ScalingReplicaSet",
                format!(
                    "Scaled {} replica set {} from {old_scale} to {new_scale}",
                    direction.word(),
                    updated.name_any()
                ),
            );
        }
        Ok((size_changes, updated))
    }

    /// Whether `spec.replicas` changed since the active ReplicaSets were last scaled (their
    /// desired-replicas annotation says otherwise; kcm's `isScalingEvent`).
    pub(super) async fn is_scaling_event(&mut self) -> Result<bool> {
        let (new, old) = self.new_and_old(false).await?;
        let desired = util::desired(&self.d);
        Ok(util::active(old.iter().chain(new.as_ref()))
            .into_iter()
            .filter_map(util::desired_annotation)
            .any(|annotated| annotated != desired))
    }

    /// Scales without rolling out: for a paused Deployment or a change of `spec.replicas`
    /// (kcm's `sync`).
    pub(super) async fn sync(&mut self) -> Result<()> {
        let (new, old) = self.new_and_old(false).await?;
        self.scale(new.as_ref(), &old).await?;
        if util::paused(&self.d) && super::rollback::rollback_to(&self.d).is_none() {
            self.cleanup(&old).await?;
        }
        let (new, old) = self.refreshed(new.as_ref(), &old);
        self.sync_status(new.as_ref(), &old).await
    }

    /// Only the status (kcm's `syncStatusOnly`, for a Deployment being deleted).
    pub(super) async fn sync_status_only(&mut self) -> Result<()> {
        let (new, old) = self.new_and_old(false).await?;
        self.sync_status(new.as_ref(), &old).await
    }

    /// `new` and `old` as the controller last wrote them (and without those it deleted).
    pub(super) fn refreshed(
        &self,
        new: Option<&ReplicaSet>,
        old: &[ReplicaSet],
    ) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
        let fresh = |rs: &ReplicaSet| {
            self.sets
                .iter()
                .find(|s| s.metadata.uid == rs.metadata.uid)
                .cloned()
        };
        (new.and_then(fresh), old.iter().filter_map(fresh).collect())
    }

    /// Brings the ReplicaSets to the Deployment's size (kcm's `scale`): the only active one
    /// (or the newest) takes it all; once the new one is saturated the old ones go to zero;
    /// during a rolling update the change is shared in proportion to each ReplicaSet's size.
    async fn scale(&mut self, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> Result<()> {
        let desired = util::desired(&self.d);
        if let Some(only) = util::active_or_latest(new, old).cloned() {
            if util::replicas(&only) != desired {
                self.scale_and_record(&only, desired).await?;
            }
            return Ok(());
        }
        if util::is_saturated(&self.d, new) {
            for rs in util::active(old) {
                self.scale_and_record(rs, 0).await?;
            }
            return Ok(());
        }
        if util::is_rolling(&self.d) {
            self.scale_proportionally(new, old).await?;
        }
        Ok(())
    }

    /// Shares a change of size between the active ReplicaSets in proportion to their sizes;
    /// what rounding leaves goes to the largest (kcm's proportional scaling).
    async fn scale_proportionally(
        &mut self,
        new: Option<&ReplicaSet>,
        old: &[ReplicaSet],
    ) -> Result<()> {
        let mut sets: Vec<ReplicaSet> = util::active(old.iter().chain(new))
            .into_iter()
            .cloned()
            .collect();
        let current = util::total(&sets, util::replicas);
        let desired = util::desired(&self.d);
        let allowed = if desired > 0 {
            desired.saturating_add(util::max_surge(&self.d))
        } else {
            0
        };
        let to_add = allowed - current;
        let direction = match to_add.signum() {
            1 => {
                sets.sort_by(util::by_size_newer);
                Direction::Up
            }
            -1 => {
                sets.sort_by(util::by_size_older);
                Direction::Down
            }
            // Nothing to share; kcm still refreshes the replica annotations below.
            _ => Direction::Up,
        };
        let mut added = 0;
        let mut sizes = Vec::with_capacity(sets.len());
        for rs in &sets {
            let share = if to_add != 0 {
                util::proportion(rs, &self.d, to_add, added)
            } else {
                0
            };
            added += share;
            sizes.push(util::replicas(rs) + share);
        }
        for (i, rs) in sets.iter().enumerate() {
            let mut size = sizes[i];
            if i == 0 && to_add != 0 {
                size = (size + to_add - added).max(0);
            }
            self.scale_replica_set(rs, size, direction).await?;
        }
        Ok(())
    }

    /// Deletes the oldest old ReplicaSets beyond `revisionHistoryLimit`, only those scaled
    /// to zero with no pods and fully observed (kcm's `cleanupDeployment`).
    pub(super) async fn cleanup(&mut self, old: &[ReplicaSet]) -> Result<()> {
        let Some(limit) = util::revision_history_limit(&self.d) else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> = old
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = cleanable.len() as i64 - i64::from(limit);
        if excess <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| util::by_revision(a, b));
        for rs in cleanable.into_iter().take(excess as usize) {
            let observed = rs
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            let busy = util::actual(rs) != 0
                || util::replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > observed;
            if busy {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: rs.metadata.uid.clone(),
                    resource_version: rs.metadata.resource_version.clone(),
                }),
                ..DeleteParams::default()
            };
            match self.replica_sets().delete(&rs.name_any(), &params).await {
                Ok(_) => self.sets.retain(|s| s.metadata.uid != rs.metadata.uid),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }

    /// The status the ReplicaSets make (kcm's `calculateStatus`): their counts, the
    /// collision count, the conditions as they are with Available set from the minimum
    /// availability.
    pub(super) fn calculate_status(
        &self,
        new: Option<&ReplicaSet>,
        old: &[ReplicaSet],
    ) -> DeploymentStatus {
        let all = || old.iter().chain(new);
        let available = util::total(all(), util::available);
        let unavailable = (util::total(all(), util::replicas) - available).max(0);
        let current = self.status();
        let mut status = DeploymentStatus {
            observed_generation: self.d.metadata.generation.filter(|g| *g != 0),
            replicas: count(util::total(all(), util::actual)),
            updated_replicas: count(util::total(new, util::actual)),
            ready_replicas: count(util::total(all(), util::ready)),
            available_replicas: count(available),
            unavailable_replicas: count(unavailable),
            collision_count: current.collision_count,
            conditions: current.conditions.filter(|c| !c.is_empty()),
            terminating_replicas: None,
        };
        let now = self.ctx.clock.now_time();
        let minimum = util::desired(&self.d) - util::max_unavailable(&self.d);
        let availability = if available >= minimum {
            util::condition(
                reason::AVAILABLE,
                "True",
                reason::MINIMUM_AVAILABLE,
                "Deployment has minimum availability.".into(),
                &now,
            )
        } else {
            util::condition(
                reason::AVAILABLE,
                "False",
                reason::MINIMUM_UNAVAILABLE,
                "Deployment does not have minimum availability.".into(),
                &now,
            )
        };
        util::set_condition(&mut status, availability);
        status
    }

    /// Writes the status the ReplicaSets make, if it changed (kcm's `syncDeploymentStatus`).
    async fn sync_status(&mut self, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> Result<()> {
        let status = self.calculate_status(new, old);
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        self.write_status(status).await
    }

    /// Says in the Progressing condition that the Deployment is paused, or resumed, so that
    /// the time spent paused never counts against the progress deadline (kcm's
    /// `checkPausedConditions`). A timed-out rollout keeps saying so.
    pub(super) async fn check_paused_conditions(&mut self) -> Result<()> {
        if util::progress_deadline(&self.d).is_none() {
            return Ok(());
        }
        let mut status = self.status();
        let current = util::get_condition(Some(&status), reason::PROGRESSING);
        let current_reason = current.and_then(|c| c.reason.as_deref());
        if current_reason == Some(reason::TIMED_OUT) {
            return Ok(());
        }
        let paused_said = current_reason == Some(reason::PAUSED);
        let (why, text) = match (util::paused(&self.d), paused_said) {
            (true, false) => (reason::PAUSED, "Deployment is paused"),
            (false, true) => (reason::RESUMED, "Deployment is resumed"),
            _ => return Ok(()),
        };
        let condition = util::condition(
            reason::PROGRESSING,
            "Unknown",
            why,
            text.into(),
            &self.ctx.clock.now_time(),
        );
        util::set_condition(&mut status, condition);
        self.write_status(status).await
    }
}
