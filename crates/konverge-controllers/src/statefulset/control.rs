//! One sync of a StatefulSet with its pods (kcm's `stateful_set_control.go`,
//! `stateful_pod_control.go` and `stateful_set_status_updater.go`).
//!
//! The sync finds the current and update revisions (creating the update revision when the
//! template is new), then walks the pods it keeps, ordinal by ordinal: a missing pod is
//! created (its claims first), a finished one deleted to be recreated, one with a wrong
//! identity fixed. Under `OrderedReady` the walk stops at the first pod not yet Running,
//! Ready and available, and pods beyond the range are deleted one at a time, highest
//! ordinal first; under `Parallel` everything happens at once, in batches that double in
//! size. A rolling update then deletes the highest-ordinal pod not at the update revision,
//! down to the partition, one at a time (with the MaxUnavailableStatefulSet gate off, as in
//! 1.33, `maxUnavailable` is ignored); the recreated pod comes back at the update revision.
//! Last, the status is written if it changed, and revisions no pod uses beyond
//! `revisionHistoryLimit` are deleted.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use super::claims::{ClaimView, Owner, Ownership, has_stale_ref};
use super::context::Ctx;
use super::history;
use super::identity::{self, ordinal};
use super::spec::{Retention, Spec, Strategy};
use crate::error::Error;
use crate::pods;

/// kcm's `MaxBatchSize`: the most writes a `Parallel` set has in flight at once.
const MAX_BATCH: usize = 500;

/// How often a status write lost to a newer version is retried on a fresh copy (client-go's
/// `retry.DefaultRetry`, which kcm's status updater uses).
const STATUS_RETRIES: usize = 4;

/// Why a sync stopped short.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A request failed; retried as its error says.
    Api {
        /// What kcm would say (its events carry it).
        message: String,
        /// The error.
        error: Error,
    },
    /// Waiting for something no watch reports (a claim being deleted, a cache behind the
    /// server): the sync is tried again shortly.
    Wait(String),
}

impl Failure {
    /// The failure with `context` before its message.
    fn context(self, context: String) -> Failure {
        match self {
            Failure::Api { message, error } => Failure::Api {
                message: format!("{context}: {message}"),
                error,
            },
            Failure::Wait(message) => Failure::Wait(format!("{context}: {message}")),
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        let message = match &error {
            Error::Kube(kube::Error::Api(status)) if !status.message.is_empty() => {
                status.message.clone()
            }
            other => other.to_string(),
        };
        Failure::Api { message, error }
    }
}

impl From<kube::Error> for Failure {
    fn from(error: kube::Error) -> Failure {
        Failure::from(Error::from(error))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Api { message, .. } | Failure::Wait(message) => f.write_str(message),
        }
    }
}

/// The status fields the controller owns, absent ones read as zero (Go's zero values).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Status {
    pub(crate) observed_generation: i64,
    pub(crate) replicas: i32,
    pub(crate) ready_replicas: i32,
    pub(crate) current_replicas: i32,
    pub(crate) updated_replicas: i32,
    pub(crate) available_replicas: i32,
    pub(crate) current_revision: String,
    pub(crate) update_revision: String,
    pub(crate) collision_count: i32,
}

impl Status {
    /// The set's status as it stands.
    fn of(set: &StatefulSet) -> Status {
        let Some(s) = &set.status else {
            return Status::default();
        };
        Status {
            observed_generation: s.observed_generation.unwrap_or(0),
            replicas: s.replicas,
            ready_replicas: s.ready_replicas.unwrap_or(0),
            current_replicas: s.current_replicas.unwrap_or(0),
            updated_replicas: s.updated_replicas.unwrap_or(0),
            available_replicas: s.available_replicas.unwrap_or(0),
            current_revision: s.current_revision.clone().unwrap_or_default(),
            update_revision: s.update_revision.clone().unwrap_or_default(),
            collision_count: s.collision_count.unwrap_or(0),
        }
    }

    /// Counts the pods of `lists` (kcm's `updateStatus`): created, ready, available, at the
    /// current revision, at the update revision.
    fn count(&mut self, lists: &[&[Arc<Pod>]], min_ready_seconds: i32, now: Timestamp) {
        self.replicas = 0;
        self.ready_replicas = 0;
        self.available_replicas = 0;
        self.current_replicas = 0;
        self.updated_replicas = 0;
        for pod in lists.iter().flat_map(|l| l.iter()) {
            let created = identity::is_created(pod);
            self.replicas += i32::from(created);
            if identity::is_running_and_ready(pod) {
                self.ready_replicas += 1;
                if identity::is_available(pod, min_ready_seconds, now) {
                    self.available_replicas += 1;
                }
            }
            if created && !pods::is_terminating(pod) {
                let revision = identity::revision(pod);
                self.current_replicas += i32::from(revision == self.current_revision);
                self.updated_replicas += i32::from(revision == self.update_revision);
            }
        }
    }

    /// Whether writing this status would change the set's (kcm's `inconsistentStatus`).
    fn differs_from(&self, old: &Status) -> bool {
        self.observed_generation > old.observed_generation
            || self.replicas != old.replicas
            || self.current_replicas != old.current_replicas
            || self.ready_replicas != old.ready_replicas
            || self.updated_replicas != old.updated_replicas
            || self.current_revision != old.current_revision
            || self.available_replicas != old.available_replicas
            || self.update_revision != old.update_revision
    }

    /// The API's status with these fields, as kcm's update writes it: conditions and any
    /// other field the controller does not own are dropped, as kcm's wholesale write does.
    fn to_api(&self) -> StatefulSetStatus {
        let count = |n: i32| (n != 0).then_some(n);
        let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
        StatefulSetStatus {
            observed_generation: (self.observed_generation != 0)
                .then_some(self.observed_generation),
            replicas: self.replicas,
            ready_replicas: count(self.ready_replicas),
            current_replicas: count(self.current_replicas),
            updated_replicas: count(self.updated_replicas),
            available_replicas: Some(self.available_replicas),
            current_revision: text(&self.current_revision),
            update_revision: text(&self.update_revision),
            collision_count: Some(self.collision_count),
            conditions: None,
        }
    }
}

/// Runs `step` over `0..count` as kcm's `runForAll`: in order, stopping at the first step
/// that says to (`monotonic`), or all at once in batches of 1, 2, 4, ... up to
/// [`MAX_BATCH`], stopping after a batch with a failure. Returns whether to stop the sync.
async fn run_for_all<F, Fut>(count: usize, monotonic: bool, step: F) -> Result<bool, Failure>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<bool, Failure>>,
{
    if monotonic {
        for i in 0..count {
            if step(i).await? {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    let (mut done, mut batch) = (0, count.min(1));
    while batch > 0 {
        let results = futures::future::join_all((done..done + batch).map(&step)).await;
        done += batch;
        if let Some(failure) = results.into_iter().find_map(Result::err) {
            return Err(failure);
        }
        batch = (2 * batch).min(count - done).min(MAX_BATCH);
    }
    Ok(false)
}

/// What a sync ended with: the status it computed (if it got that far) and how it ended.
pub(crate) struct Outcome {
    /// The status written (or found already written).
    pub(crate) status: Option<Status>,
    /// Whether the sync finished.
    pub(crate) result: Result<(), Failure>,
}

/// One sync of one set.
pub(crate) struct Sync<'a> {
    ctx: &'a Ctx,
    set: &'a StatefulSet,
    spec: Spec,
    key: String,
    set_owner: Owner,
    claims: ClaimView,
    now: Timestamp,
    pods_api: Api<Pod>,
    claims_api: Api<PersistentVolumeClaim>,
    revisions_api: Api<ControllerRevision>,
}

impl<'a> Sync<'a> {
    /// A sync of `set` (whose spec is `spec`), keyed `key` in the expectations.
    pub(crate) fn new(ctx: &'a Ctx, set: &'a StatefulSet, spec: Spec, key: String) -> Sync<'a> {
        let client = ctx.client.clone();
        let namespace = spec.namespace.clone();
        Sync {
            set_owner: Owner {
                api_version: "apps/v1",
                kind: "StatefulSet",
                name: spec.name.clone(),
                uid: set.metadata.uid.clone().unwrap_or_default(),
            },
            claims: ClaimView::new(ctx.claims.clone()),
            now: ctx.clock.now(),
            pods_api: Api::namespaced(client.clone(), &namespace),
            claims_api: Api::namespaced(client.clone(), &namespace),
            revisions_api: Api::namespaced(client, &namespace),
            ctx,
            set,
            spec,
            key,
        }
    }

    /// kcm's `UpdateStatefulSet`: revisions, pods, status, then history.
    pub(crate) async fn run(
        &self,
        pods: &[Arc<Pod>],
        mut revisions: Vec<Arc<ControllerRevision>>,
    ) -> Outcome {
        history::sort(&mut revisions);
        let (current, update, collision_count) = match self.revisions(&revisions).await {
            Ok(found) => found,
            Err(failure) => {
                let truncated = self.truncate_history(pods, &revisions, None, None).await;
                return Outcome {
                    status: None,
                    result: Err(truncated.err().unwrap_or(failure)),
                };
            }
        };
        let (status, mut result) = self
            .update_set(&current, &update, collision_count, pods)
            .await;
        let status = match status {
            Some(status) => match self.write_status(status).await {
                Ok(written) => Some(written),
                Err(failure) => {
                    result = result.and(Err(failure));
                    None
                }
            },
            None => None,
        };
        // The current revision as written: kcm reaches it at the sync its own status write
        // triggers; here that write triggers none.
        let current_name = status
            .as_ref()
            .map_or_else(|| current.name_any(), |s| s.current_revision.clone());
        let truncated = self
            .truncate_history(
                pods,
                &revisions,
                Some(&current_name),
                Some(&update.name_any()),
            )
            .await;
        Outcome {
            status,
            result: result.and(truncated),
        }
    }

    /// The current and update revisions and the collision count (kcm's
    /// `getStatefulSetRevisions`): the update revision is the newest one if it holds the
    /// template, an older one holding it renumbered as the newest (a rollback), or a new one.
    async fn revisions(
        &self,
        revisions: &[Arc<ControllerRevision>],
    ) -> Result<(Arc<ControllerRevision>, Arc<ControllerRevision>, i32), Failure> {
        let mut collision_count = Status::of(self.set).collision_count;
        let next = history::next_revision(revisions);
        let wanted = history::new_revision(self.set, &self.spec, next, collision_count);
        let equal = revisions.iter().rev().find(|r| history::equal(r, &wanted));
        let update = match (equal, revisions.last()) {
            (Some(equal), Some(last)) if history::equal(last, equal) => last.clone(),
            (Some(equal), _) => {
                Arc::new(history::renumber(&self.revisions_api, equal, next).await?)
            }
            (None, _) => Arc::new(
                history::create(
                    &self.revisions_api,
                    &self.spec,
                    wanted,
                    &mut collision_count,
                )
                .await?,
            ),
        };
        let current_name = Status::of(self.set).current_revision;
        let current = revisions
            .iter()
            .find(|r| r.name_any() == current_name)
            .cloned()
            .unwrap_or_else(|| update.clone());
        Ok((current, update, collision_count))
    }

    /// kcm's `updateStatefulSet`: brings the pods to the set's spec, returning the status to
    /// write (`None` when the revisions cannot be read) and how the walk ended.
    async fn update_set(
        &self,
        current: &ControllerRevision,
        update: &ControllerRevision,
        collision_count: i32,
        pods: &[Arc<Pod>],
    ) -> (Option<Status>, Result<(), Failure>) {
        let templates =
            history::template_of(current).and_then(|c| Ok((c, history::template_of(update)?)));
        let (current_template, update_template) = match templates {
            Ok(templates) => templates,
            Err(error) => return (None, Err(error.into())),
        };
        let (min_ready, now) = (self.spec.min_ready_seconds, self.now);
        let mut status = Status {
            observed_generation: self.set.metadata.generation.unwrap_or(0),
            current_revision: current.name_any(),
            update_revision: update.name_any(),
            collision_count,
            ..Status::default()
        };
        status.count(&[pods], min_ready, now);
        let (replicas, condemned) = self.partition(
            pods,
            (&current_template, &status.current_revision),
            (&update_template, &status.update_revision),
        );
        let first_unavailable = replicas
            .iter()
            .chain(condemned.iter().rev())
            .find(|p| identity::is_unavailable(p, min_ready, now))
            .and_then(|p| p.metadata.name.clone());
        if self.set.metadata.deletion_timestamp.is_some() {
            return (Some(status), Ok(()));
        }
        let result = self
            .walk(&replicas, &condemned, first_unavailable.as_deref())
            .await;
        status.count(&[&replicas, &condemned], min_ready, now);
        match result {
            Ok(true) => (Some(status), Ok(())),
            Err(failure) => (Some(status), Err(failure)),
            Ok(false) => {
                let update_name = status.update_revision.clone();
                let result = self
                    .rolling_update(&replicas, &update_name, &mut status)
                    .await;
                (Some(status), result)
            }
        }
    }

    /// Splits the pods into those in the set's range, by ordinal, with new pods where one is
    /// missing (kcm's `newVersionedStatefulSetPod`), and those beyond it, highest first.
    fn partition(
        &self,
        pods: &[Arc<Pod>],
        current: (&PodTemplateSpec, &str),
        update: (&PodTemplateSpec, &str),
    ) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
        let start = self.spec.start;
        let mut slots: Vec<Option<Arc<Pod>>> = vec![None; self.spec.replicas as usize];
        let mut condemned = Vec::new();
        for pod in pods {
            let ordinal = ordinal(pod);
            if self.spec.in_range(ordinal) {
                slots[(ordinal - start) as usize] = Some(pod.clone());
            } else if ordinal >= 0 {
                condemned.push(pod.clone());
            }
        }
        let current_replicas = Status::of(self.set).current_replicas;
        let replicas = slots
            .into_iter()
            .zip(start..)
            .map(|(slot, ordinal)| {
                slot.unwrap_or_else(|| {
                    let at_current = match self.spec.strategy {
                        Strategy::RollingUpdate { partition: None } => {
                            ordinal < start.saturating_add(current_replicas)
                        }
                        Strategy::RollingUpdate {
                            partition: Some(partition),
                        } => ordinal < start.saturating_add(partition),
                        Strategy::OnDelete => false,
                    };
                    let (template, revision) = if at_current { current } else { update };
                    Arc::new(identity::new_pod(
                        self.set, &self.spec, template, revision, ordinal,
                    ))
                })
            })
            .collect();
        condemned.sort_by_key(|p| Reverse(ordinal(p)));
        (replicas, condemned)
    }

    /// The pods in range, then the claims and pods beyond it. `Ok(true)`: stopped early.
    async fn walk(
        &self,
        replicas: &[Arc<Pod>],
        condemned: &[Arc<Pod>],
        first_unavailable: Option<&str>,
    ) -> Result<bool, Failure> {
        let monotonic = !self.spec.burst;
        if run_for_all(replicas.len(), monotonic, |i| {
            self.process_replica(&replicas[i], monotonic)
        })
        .await?
        {
            return Ok(true);
        }
        let fix_claims = |i: usize| async move {
            if !self.claims_match_retention(&condemned[i]) {
                self.update_claims_for_retention(&condemned[i]).await?;
            }
            Ok(false)
        };
        if run_for_all(condemned.len(), monotonic, fix_claims).await? {
            return Ok(true);
        }
        run_for_all(condemned.len(), monotonic, |i| {
            self.process_condemned(&condemned[i], first_unavailable, monotonic)
        })
        .await
    }

    /// kcm's `processReplica` for one pod in range. `Ok(true)`: stop the walk.
    async fn process_replica(&self, pod: &Pod, monotonic: bool) -> Result<bool, Failure> {
        let (min_ready, now) = (self.spec.min_ready_seconds, self.now);
        if identity::is_finished(pod) {
            if pod.metadata.deletion_timestamp.is_none() {
                self.delete_pod(pod).await?;
            }
            return Ok(true);
        }
        if !identity::is_created(pod) {
            if self.claim_is_stale(pod) {
                return Ok(true);
            }
            self.create_pod(pod).await?;
            // The pod was made to the spec: nothing more to check until it is seen.
            return Ok(monotonic);
        }
        if identity::is_pending(pod) {
            self.create_missing_claims(pod).await?;
        }
        if monotonic
            && (pods::is_terminating(pod)
                || !identity::is_running_and_ready(pod)
                || !identity::is_available(pod, min_ready, now))
        {
            return Ok(true);
        }
        if identity::identity_matches(&self.spec, pod)
            && identity::storage_matches(&self.spec, pod)
            && self.claims_match_retention(pod)
        {
            return Ok(false);
        }
        self.update_pod(pod).await?;
        Ok(false)
    }

    /// kcm's `processCondemned` for one pod beyond the range. `Ok(true)`: stop the walk.
    async fn process_condemned(
        &self,
        pod: &Pod,
        first_unavailable: Option<&str>,
        monotonic: bool,
    ) -> Result<bool, Failure> {
        if pods::is_terminating(pod) {
            return Ok(monotonic);
        }
        let first = pod.metadata.name.as_deref() == first_unavailable;
        let healthy = identity::is_running_and_ready(pod)
            && identity::is_available(pod, self.spec.min_ready_seconds, self.now);
        if monotonic && !healthy && !first {
            return Ok(true);
        }
        self.delete_pod(pod).await?;
        Ok(true)
    }

    /// The rolling update with the MaxUnavailableStatefulSet gate off: from the highest
    /// ordinal down to the partition, delete the first pod not at the update revision, or
    /// wait for the first unavailable one.
    async fn rolling_update(
        &self,
        replicas: &[Arc<Pod>],
        update_revision: &str,
        status: &mut Status,
    ) -> Result<(), Failure> {
        let Strategy::RollingUpdate { partition } = self.spec.strategy else {
            return Ok(());
        };
        let update_min = usize::try_from(partition.unwrap_or(0)).unwrap_or(0);
        for pod in replicas.iter().skip(update_min).rev() {
            if identity::revision(pod) != update_revision && !pods::is_terminating(pod) {
                self.delete_pod(pod).await?;
                status.current_replicas -= 1;
                return Ok(());
            }
            if identity::is_unavailable(pod, self.spec.min_ready_seconds, self.now) {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Completes a finished rolling update and writes the status if it changed (kcm's
    /// `updateStatefulSetStatus`), retried on a fresh copy when it loses a race.
    async fn write_status(&self, mut status: Status) -> Result<Status, Failure> {
        let replicas = self.spec.replicas;
        if matches!(self.spec.strategy, Strategy::RollingUpdate { .. })
            && status.updated_replicas == replicas
            && status.ready_replicas == replicas
            && status.replicas == replicas
        {
            status.current_replicas = status.updated_replicas;
            status.current_revision = status.update_revision.clone();
        }
        if !status.differs_from(&Status::of(self.set)) {
            return Ok(status);
        }
        let api: Api<StatefulSet> = Api::namespaced(self.ctx.client.clone(), &self.spec.namespace);
        let mut target = self.set.clone();
        for attempt in 0.. {
            target.status = Some(status.to_api());
            match api
                .replace_status(&self.spec.name, &PostParams::default(), &target)
                .await
            {
                Ok(written) => {
                    konverge_runtime::reconcile::wrote(&written);
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < STATUS_RETRIES => {
                    target = api.get(&self.spec.name).await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(status)
    }

    /// Deletes the oldest revisions no pod uses and that are neither current nor update,
    /// keeping `revisionHistoryLimit` (kcm's `truncateHistory`).
    async fn truncate_history(
        &self,
        pods: &[Arc<Pod>],
        revisions: &[Arc<ControllerRevision>],
        current: Option<&str>,
        update: Option<&str>,
    ) -> Result<(), Failure> {
        let mut live: BTreeSet<&str> = pods.iter().map(|p| identity::revision(p)).collect();
        live.extend(current);
        live.extend(update);
        let old: Vec<&Arc<ControllerRevision>> = revisions
            .iter()
            .filter(|r| !live.contains(r.metadata.name.as_deref().unwrap_or_default()))
            .collect();
        let Ok(limit) = usize::try_from(self.spec.history_limit) else {
            return Ok(());
        };
        for revision in old.iter().take(old.len().saturating_sub(limit)) {
            history::delete(&self.revisions_api, revision).await?;
        }
        Ok(())
    }

    /// The ownership of a pod's claims under the set's policy.
    fn ownership<'o>(&'o self, pod: &'o Owner, ordinal: i32) -> Ownership<'o> {
        Ownership {
            policy: self.spec.policy,
            set: &self.set_owner,
            pod,
            scaled_down: !self.spec.in_range(ordinal),
        }
    }

    /// Every existing claim of the pod has the references the policy wants (kcm's
    /// `ClaimsMatchRetentionPolicy`; a missing claim is picked up later).
    fn claims_match_retention(&self, pod: &Pod) -> bool {
        let (owner, ordinal) = (Owner::pod(pod), ordinal(pod));
        let ownership = self.ownership(&owner, ordinal);
        self.spec.claim_templates.iter().all(|template| {
            let name = identity::claim_name(template, &self.spec.name, ordinal);
            self.claims
                .get(&self.spec.namespace, &name)
                .is_none_or(|claim| ownership.is_up_to_date(&claim))
        })
    }

    /// Gives the pod's claims the references the policy wants (kcm's
    /// `UpdatePodClaimForRetentionPolicy`).
    async fn update_claims_for_retention(&self, pod: &Pod) -> Result<(), Failure> {
        let (owner, ordinal) = (Owner::pod(pod), ordinal(pod));
        let ownership = self.ownership(&owner, ordinal);
        for template in &self.spec.claim_templates {
            let name = identity::claim_name(template, &self.spec.name, ordinal);
            let Some(claim) = self.claims.get(&self.spec.namespace, &name) else {
                continue;
            };
            if ownership.has_unexpected_controller(&claim) {
                self.ctx.events.warning(
                    self.set,
                    "ConflictingController",
                    format!(
                        "PersistentVolumeClaim {name} has a conflicting OwnerReference that acts as a manging controller, the retention policy is ignored for this claim"
                    ),
                );
            }
            if ownership.is_up_to_date(&claim) {
                continue;
            }
            let mut changed = (*claim).clone();
            changed.metadata.owner_references = Some(ownership.updated_refs(&claim));
            let updated = self
                .claims_api
                .replace(&name, &PostParams::default(), &changed)
                .await
                .map_err(|e| {
                    Failure::from(e).context(format!(
                        "could not update claim {name} for delete policy ownerRefs"
                    ))
                })?;
            self.claims.wrote(updated);
        }
        Ok(())
    }

    /// Under `whenScaled: Delete`, a claim of this ordinal still owned by an earlier pod of
    /// the same name blocks its creation until the garbage collector removes it (kcm's
    /// `PodClaimIsStale`).
    fn claim_is_stale(&self, pod: &Pod) -> bool {
        if self.spec.policy.when_scaled == Retention::Retain {
            return false;
        }
        let owner = Owner::pod(pod);
        identity::claims_for(&self.spec, ordinal(pod))
            .iter()
            .filter_map(|(_, claim)| {
                self.claims.get(
                    &self.spec.namespace,
                    claim.metadata.name.as_deref().unwrap_or_default(),
                )
            })
            .any(|claim| has_stale_ref(&claim, &owner))
    }

    /// Creates the pod's missing claims (kcm's `createPersistentVolumeClaims`). A claim that
    /// already exists is the one wanted; one being deleted makes the pod wait.
    async fn create_claims(&self, pod: &Pod) -> Result<(), Failure> {
        let mut first_failure = None;
        for (_, claim) in identity::claims_for(&self.spec, ordinal(pod)) {
            let name = claim.metadata.name.clone().unwrap_or_default();
            match self.claims.get(&self.spec.namespace, &name) {
                Some(existing) if existing.metadata.deletion_timestamp.is_some() => {
                    first_failure
                        .get_or_insert(Failure::Wait(format!("pvc {name} is being deleted")));
                }
                Some(_) => {}
                None => match self.claims_api.create(&PostParams::default(), &claim).await {
                    Ok(created) => {
                        self.claim_event("create", pod, &name, None);
                        self.claims.wrote(created);
                    }
                    Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => {}
                    Err(error) => {
                        let failure = Failure::from(error);
                        self.claim_event("create", pod, &name, Some(&failure));
                        first_failure
                            .get_or_insert(failure.context(format!("failed to create PVC {name}")));
                    }
                },
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// Creates the claims of a pending pod and sets their references (kcm's
    /// `createMissingPersistentVolumeClaims`).
    async fn create_missing_claims(&self, pod: &Pod) -> Result<(), Failure> {
        self.create_claims(pod).await?;
        if let Err(failure) = self.update_claims_for_retention(pod).await {
            self.pod_event("update", pod, Some(&failure));
            return Err(failure);
        }
        Ok(())
    }

    /// Creates the pod, its claims first (kcm's `CreateStatefulPod`). A pod of that name
    /// already there (an earlier create whose answer was lost) makes the sync wait for the
    /// cache.
    async fn create_pod(&self, pod: &Pod) -> Result<(), Failure> {
        if let Err(failure) = self.create_claims(pod).await {
            self.pod_event("create", pod, Some(&failure));
            return Err(failure);
        }
        let created = match self.pods_api.create(&PostParams::default(), pod).await {
            Ok(created) => created,
            Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => {
                return Err(Failure::Wait(format!(
                    "pod {} already exists",
                    pod.name_any()
                )));
            }
            Err(error) => {
                let failure = Failure::from(error);
                self.pod_event("create", pod, Some(&failure));
                return Err(failure);
            }
        };
        if let Some(uid) = created.metadata.uid.clone() {
            self.ctx.expectations.created(&self.key, uid);
        }
        if let Err(failure) = self.update_claims_for_retention(&created).await {
            self.pod_event("update", pod, Some(&failure));
            return Err(failure);
        }
        self.pod_event("create", pod, None);
        Ok(())
    }

    /// Deletes the pod (kcm's `DeleteStatefulPod`), only if it is still the one seen: one
    /// already gone, or replaced by a namesake, needs nothing.
    async fn delete_pod(&self, pod: &Pod) -> Result<(), Failure> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.pods_api.delete(&pod.name_any(), &params).await {
            Ok(_) => {
                if let Some(uid) = pod.metadata.uid.clone() {
                    self.ctx.expectations.deleted(&self.key, uid);
                }
                self.pod_event("delete", pod, None);
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(error) => {
                let failure = Failure::from(error);
                self.pod_event("delete", pod, Some(&failure));
                Err(failure)
            }
        }
    }

    /// Fixes the pod's identity, volumes and claim references (kcm's `UpdateStatefulPod`).
    async fn update_pod(&self, pod: &Pod) -> Result<(), Failure> {
        let mut updated = pod.clone();
        let mut consistent = true;
        if !identity::identity_matches(&self.spec, &updated) {
            identity::update_identity(&self.spec, &mut updated);
            consistent = false;
        }
        if !identity::storage_matches(&self.spec, &updated) {
            identity::update_storage(&self.spec, &mut updated);
            consistent = false;
            if let Err(failure) = self.create_claims(&updated).await {
                self.pod_event("update", pod, Some(&failure));
                return Err(failure);
            }
        }
        if !self.claims_match_retention(&updated) {
            if let Err(failure) = self.update_claims_for_retention(&updated).await {
                self.pod_event("update", pod, Some(&failure));
                return Err(failure);
            }
            consistent = false;
        }
        if consistent {
            return Ok(());
        }
        let result = if updated == *pod {
            Ok(())
        } else {
            self.pods_api
                .replace(&pod.name_any(), &PostParams::default(), &updated)
                .await
                .map(drop)
                .map_err(Failure::from)
        };
        self.pod_event("update", pod, result.as_ref().err());
        result
    }

    /// kcm's `recordPodEvent`.
    fn pod_event(&self, verb: &str, pod: &Pod, failure: Option<&Failure>) {
        let (pod, set) = (pod.name_any(), &self.spec.name);
        match failure {
            None => self.ctx.events.normal(
                self.set,
                &format!("Successful{}", title(verb)),
                format!("{verb} Pod {pod} in StatefulSet {set} successful"),
            ),
            Some(failure) => self.ctx.events.warning(
                self.set,
                &format!("Failed{}", title(verb)),
                format!("{verb} Pod {pod} in StatefulSet {set} failed error: {failure}"),
            ),
        }
    }

    /// kcm's `recordClaimEvent`.
    fn claim_event(&self, verb: &str, pod: &Pod, claim: &str, failure: Option<&Failure>) {
        let (pod, set) = (pod.name_any(), &self.spec.name);
        match failure {
            None => self.ctx.events.normal(
                self.set,
                &format!("Successful{}", title(verb)),
                format!("{verb} Claim {claim} Pod {pod} in StatefulSet {set} success"),
            ),
            Some(failure) => self.ctx.events.warning(
                self.set,
                &format!("Failed{}", title(verb)),
                format!("{verb} Claim {claim} for Pod {pod} in StatefulSet {set} failed error: {failure}"),
            ),
        }
    }
}

/// `create` → `Create`, as Go's `strings.Title`.
fn title(verb: &str) -> String {
    let mut chars = verb.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_are_titled() {
        assert_eq!(title("create"), "Create");
        assert_eq!(title(""), "");
    }

    #[tokio::test]
    async fn parallel_batches_double_and_stop_after_a_failure() {
        let seen = std::sync::Mutex::new(Vec::new());
        let result = run_for_all(10, false, |i| {
            seen.lock().expect("lock").push(i);
            async move {
                if i == 4 {
                    Err(Failure::Wait("no".into()))
                } else {
                    Ok(false)
                }
            }
        })
        .await;
        assert!(result.is_err());
        // Batches [0], [1, 2], [3, 4, 5, 6]: the failing batch is the last.
        assert_eq!(seen.lock().expect("lock").len(), 7);
    }

    #[tokio::test]
    async fn monotonic_walks_stop_at_the_first_blocker() {
        let result = run_for_all(5, true, |i| async move { Ok(i == 2) }).await;
        assert!(matches!(result, Ok(true)));
    }
}
