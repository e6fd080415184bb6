//! The Job controller (kcm's `job-controller`): runs a Job's pods until enough succeed,
//! counting each finished pod exactly once.
//!
//! Every pod it creates carries the `batch.kubernetes.io/job-tracking` finalizer, so a
//! finished pod cannot vanish before it is counted. A sync first writes the finished pods'
//! uids into `status.uncountedTerminatedPods`, then removes their finalizers, then moves
//! them into `succeeded`/`failed`: a crash between any two steps leaves nothing counted
//! twice or lost. Indexed Jobs count succeeded indexes instead (`completedIndexes`).
//!
//! As kcm 1.33 does by default, a Job that meets its completions (or success policy) first
//! gets `SuccessCriteriaMet`, and one that fails (`backoffLimit`, `activeDeadlineSeconds`,
//! a `FailJob` rule, failed indexes) first gets `FailureTarget`; its remaining pods are
//! deleted and `Complete` or `Failed` is added once none of them is still terminating.
//! Pods still carrying the finalizer once their Job is gone or finished (orphans) have it
//! removed by a second loop, kcm's orphan-pod worker.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use konverge_runtime::cache::Change;
use konverge_runtime::hotloop::HotLoopConfig;
use konverge_runtime::{Action, Manager, ObjectKey, Store, predicate};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::backoff::{self, Record};
use super::failure_policy;
use super::indexed::{self, Intervals, completion_index, is_indexed};
use super::{
    COMPLETION_INDEX, INDEX_FAILURE_COUNT, INDEX_IGNORED_FAILURE_COUNT, JOB_CONTROLLER_NAME,
    TRACKING_FINALIZER, is_finished,
};
use crate::clock::Clock;
use crate::controller_ref::{self, claim, controller_of, new_controller_ref, recheck_owner};
use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::expectations::Expectations;
use crate::{informers, pods};

/// kcm's `job-controller`.
pub const JOB: Descriptor = Descriptor {
    name: "job-controller",
    aliases: &["job"],
    service_account: "job-controller",
    add,
};

/// kcm's `MaxUncountedPods`: at most this many uids wait in `uncountedTerminatedPods`.
const MAX_UNCOUNTED_PODS: usize = 500;
/// kcm's `MaxPodCreateDeletePerSync`.
const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;
/// kcm's `--concurrent-job-syncs` default.
const WORKERS: usize = 5;

/// What the controller keeps between syncs.
struct Ctx {
    client: Client,
    clock: Clock,
    events: Events,
    pods: Store<Pod>,
    jobs: Store<Job>,
    expectations: Expectations,
    /// Pods whose finalizer removal was sent and not yet seen in the cache, by Job key.
    finalizers: Mutex<HashMap<String, HashSet<String>>>,
    /// Failures since the last success, by Job key.
    backoff: Mutex<HashMap<String, Record>>,
}

impl Ctx {
    fn backoff_record(&self, key: &str) -> Record {
        let map = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).copied().unwrap_or_default()
    }

    fn set_backoff_record(&self, key: &str, record: Record) {
        let mut map = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(key.to_string(), record);
    }

    fn forget(&self, key: &str) {
        self.backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.finalizers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.expectations.forget(key);
    }

    /// The uids whose finalizer removal is still unseen: those of `pods` still carrying it.
    fn expected_removals(&self, key: &str, pods: &[Arc<Pod>]) -> HashSet<String> {
        let mut map = self.finalizers.lock().unwrap_or_else(|e| e.into_inner());
        let Some(set) = map.get_mut(key) else {
            return HashSet::new();
        };
        set.retain(|uid| {
            pods.iter()
                .any(|p| p.uid().as_deref() == Some(uid.as_str()) && has_finalizer(p))
        });
        set.clone()
    }

    fn expect_removals(&self, key: &str, uids: impl IntoIterator<Item = String>) {
        let mut map = self.finalizers.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string()).or_default().extend(uids);
    }

    fn removal_failed(&self, key: &str, uid: &str) {
        let mut map = self.finalizers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = map.get_mut(key) {
            set.remove(uid);
        }
    }

    fn pod_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn now(&self) -> Time {
        self.clock.now_time()
    }
}

fn add(manager: &mut Manager, setup: Setup) {
    let pods = informers::cache::<Pod>(manager);
    let jobs = informers::cache::<Job>(manager);
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), "job-controller"),
        client: setup.client,
        clock: setup.clock,
        pods: pods.clone(),
        jobs: jobs.clone(),
        expectations: Expectations::new(),
        finalizers: Mutex::new(HashMap::new()),
        backoff: Mutex::new(HashMap::new()),
    });
    let owners = jobs.clone();
    let controller = informers::controller::<Job>(manager)
        .named("job-controller")
        .with_predicate(predicate::resource_version_changed())
        .concurrency(WORKERS)
        .hot_loop(batching())
        .watches_cached(
            informers::api::<Pod>(manager),
            informers::config(),
            move |change: &Change<Pod>| jobs_of_pod(&owners, change),
        );
    manager.add(controller, reconcile, ctx.clone());

    let tracked = pods.clone();
    let orphans = informers::controller::<Pod>(manager)
        .named("job-orphan-pod")
        .with_predicate(|_: Option<&Pod>, pod: &Pod| has_finalizer(pod))
        .watches_cached(
            informers::api::<Job>(manager),
            informers::config(),
            move |change: &Change<Job>| tracked_pods_of_done_job(&tracked, change),
        );
    manager.add(orphans, reconcile_orphan, ctx);
}

/// A Job is written on every change of its pods, so its own status writes come back as
/// echoes of busy but healthy syncs: a hot Job is held back at most kcm's
/// `syncJobBatchPeriod` (1 s), which is how long kcm batches a Job's syncs anyway.
fn batching() -> HotLoopConfig {
    HotLoopConfig {
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(1),
        ..HotLoopConfig::default()
    }
}

/// The Jobs a pod change concerns: its controller Job (before and after), or, for an
/// orphan, every Job of its namespace whose selector matches it (to adopt it).
fn jobs_of_pod(jobs: &Store<Job>, change: &Change<Pod>) -> Vec<ObjectKey> {
    let mut keys = BTreeSet::new();
    for pod in change.old.iter().chain(change.new.iter()) {
        let namespace = pod.namespace().unwrap_or_default();
        match controller_of(&pod.metadata) {
            Some(owner) if owner.kind == "Job" => {
                keys.insert((namespace, owner.name.clone()));
            }
            Some(_) => {}
            None => {
                for job in jobs.list_namespace(&namespace) {
                    let selects = job
                        .spec
                        .as_ref()
                        .and_then(|s| controller_ref::selector(s.selector.as_ref()).ok())
                        .is_some_and(|s| !s.is_empty() && s.matches(pods::labels(pod)));
                    if selects {
                        keys.insert((namespace.clone(), job.name_any()));
                    }
                }
            }
        }
    }
    keys.into_iter()
        .map(|(ns, name)| ObjectKey::namespaced(ns, name))
        .collect()
}

/// The pods still carrying the tracking finalizer of a Job that is gone or finished.
fn tracked_pods_of_done_job(pods: &Store<Pod>, change: &Change<Job>) -> Vec<ObjectKey> {
    let done = change.new.as_ref().is_none_or(|job| is_finished(job));
    let Some(job) = change.new.as_ref().or(change.old.as_ref()) else {
        return Vec::new();
    };
    if !done {
        return Vec::new();
    }
    let uid = job.uid().unwrap_or_default();
    pods.by_owner(&uid)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| has_finalizer(p))
        .filter_map(|p| ObjectKey::of(p.as_ref()))
        .collect()
}

/// Removes the tracking finalizer of a pod no unfinished Job of this controller controls
/// (kcm's `syncOrphanPod`).
async fn reconcile_orphan(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action> {
    if !has_finalizer(&pod) {
        return Ok(Action::await_change());
    }
    let namespace = pod.namespace().unwrap_or_default();
    if let Some(owner) = controller_of(&pod.metadata) {
        if owner.kind != "Job" || owner.api_version != "batch/v1" {
            return Ok(Action::await_change());
        }
        let cached = ctx
            .jobs
            .get(&ObjectKey::namespaced(
                namespace.clone(),
                owner.name.clone(),
            ))
            .filter(|j| j.uid().as_deref() == Some(owner.uid.as_str()));
        let job = match cached {
            Some(job) => Some((*job).clone()),
            // The cache may lag: ask the server before calling the pod an orphan.
            None => Api::<Job>::namespaced(ctx.client.clone(), &namespace)
                .get_opt(&owner.name)
                .await?
                .filter(|j| j.uid().as_deref() == Some(owner.uid.as_str())),
        };
        if let Some(job) = job
            && (managed_elsewhere(&job) || !is_finished(&job))
        {
            return Ok(Action::await_change());
        }
    }
    remove_finalizer(&ctx.pod_api(&namespace), &pod).await?;
    Ok(Action::await_change())
}

/// The strategic merge patch kcm removes the tracking finalizer with; a pod already gone
/// needs nothing.
async fn remove_finalizer(api: &Api<Pod>, pod: &Pod) -> Result<()> {
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
    match api
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The pod carries the tracking finalizer.
pub fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

/// The Job names another controller in `spec.managedBy`.
fn managed_elsewhere(job: &Job) -> bool {
    job.spec
        .as_ref()
        .and_then(|s| s.managed_by.as_deref())
        .is_some_and(|by| by != JOB_CONTROLLER_NAME)
}

fn suspended(spec: &JobSpec) -> bool {
    spec.suspend == Some(true)
}

/// Only failed pods are replaced (not terminating ones): `podReplacementPolicy: Failed`,
/// or a pod failure policy.
fn only_replace_failed(spec: &JobSpec) -> bool {
    spec.pod_replacement_policy.as_deref() == Some("Failed") || spec.pod_failure_policy.is_some()
}

/// kcm's `isPodFailed`: Failed, or (unless only failed pods are replaced) deleted before
/// it succeeded.
fn is_pod_failed(pod: &Pod, spec: &JobSpec) -> bool {
    let phase = pods::phase(pod);
    if phase == "Failed" {
        return true;
    }
    if only_replace_failed(spec) {
        return false;
    }
    pod.metadata.deletion_timestamp.is_some() && phase != "Succeeded"
}

/// Being deleted and not finished (kcm's `CountTerminatingPods`).
fn is_terminating(pod: &Pod) -> bool {
    let phase = pods::phase(pod);
    pod.metadata.deletion_timestamp.is_some() && phase != "Failed" && phase != "Succeeded"
}

fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &Time,
) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()).filter(|r: &String| !r.is_empty()),
        message: Some(message.into()).filter(|m: &String| !m.is_empty()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

fn find_condition<'j>(status: &'j JobStatus, type_: &str) -> Option<&'j JobCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
}

/// Sets the condition `type_` (kcm's `ensureJobConditionStatus`): a False condition is
/// never added, only an existing one turned False. Returns whether anything changed.
fn ensure_condition(
    status: &mut JobStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: &Time,
) -> bool {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let same = existing.status == value
            && existing.reason.as_deref().unwrap_or("") == reason
            && existing.message.as_deref().unwrap_or("") == message;
        if same {
            return false;
        }
        *existing = new_condition(type_, value, reason, message, now);
        return true;
    }
    if value == "False" {
        return false;
    }
    conditions.push(new_condition(type_, value, reason, message, now));
    true
}

fn is_success_criteria_met(condition: Option<&JobCondition>) -> bool {
    condition.is_some_and(|c| c.type_ == "SuccessCriteriaMet" && c.status == "True")
}

/// The order kcm deletes active pods in (`controller.ActivePods`): unscheduled before
/// scheduled, pending before running, not ready before ready, ready for less time before
/// more, more restarts before fewer, newer before older.
fn deletion_order(pod: &Pod) -> impl Ord + use<> {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = match pods::phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    };
    let ready = pods::is_ready(pod);
    let ready_since = pods::condition(pod, "Ready")
        .filter(|_| ready)
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    let restarts: i32 = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0);
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (
        scheduled,
        phase,
        ready,
        (ready_since.is_some(), Reverse(ready_since)),
        Reverse(restarts),
        (created.is_some(), Reverse(created)),
    )
}

/// Pods to delete: for Indexed Jobs every pod without a valid index and all but one of
/// each repeated index, then the first of the rest in deletion order, `at_least` in all.
fn pods_for_removal(
    job_indexed: bool,
    completions: i64,
    active: &[Arc<Pod>],
    at_least: usize,
) -> Vec<Arc<Pod>> {
    let mut remove = Vec::new();
    let mut left: Vec<Arc<Pod>> = Vec::new();
    if job_indexed {
        let mut by_index: HashMap<i64, Vec<Arc<Pod>>> = HashMap::new();
        for pod in active {
            match completion_index(pod) {
                Some(ix) if ix < completions => by_index.entry(ix).or_default().push(pod.clone()),
                _ => remove.push(pod.clone()),
            }
        }
        let mut indexes: Vec<_> = by_index.into_iter().collect();
        indexes.sort_by_key(|(ix, _)| *ix);
        for (_, mut same) in indexes {
            same.sort_by_key(|p| deletion_order(p));
            let keep = same.pop();
            remove.extend(same);
            left.extend(keep);
        }
    } else {
        left = active.to_vec();
    }
    if remove.len() < at_least {
        left.sort_by_key(|p| deletion_order(p));
        let more = at_least - remove.len();
        remove.extend(left.into_iter().take(more));
    }
    remove
}

/// The state of one sync (kcm's `syncJobCtx`).
struct Sync {
    key: String,
    job: Job,
    spec: JobSpec,
    pods: Vec<Arc<Pod>>,
    active: Vec<Arc<Pod>>,
    finished: Option<JobCondition>,
    succeeded: i32,
    failed: i32,
    prev_succeeded: Intervals,
    succeeded_indexes: Intervals,
    failed_indexes: Option<Intervals>,
    new_backoff: Record,
    expected_removals: HashSet<String>,
    uncounted_succeeded: HashSet<String>,
    uncounted_failed: HashSet<String>,
    delayed_deletion: HashMap<i64, Arc<Pod>>,
    terminating: i32,
    ready: i32,
    requeue: Option<Duration>,
}

impl Sync {
    fn status(&mut self) -> &mut JobStatus {
        self.job.status.get_or_insert_with(JobStatus::default)
    }

    fn completions(&self) -> i64 {
        i64::from(self.spec.completions.unwrap_or(0))
    }

    fn requeue_after(&mut self, delay: Duration) {
        self.requeue = Some(self.requeue.map_or(delay, |d| d.min(delay)));
    }

    /// A pod the Job counts: tracked, not already counted or being counted, with a valid
    /// index if the Job is Indexed (kcm's `getValidPodsWithFilter`).
    fn countable(&self, pod: &Pod, uncounted: &HashSet<String>) -> bool {
        let uid = pod.uid().unwrap_or_default();
        if !has_finalizer(pod) || uncounted.contains(&uid) || self.expected_removals.contains(&uid)
        {
            return false;
        }
        !is_indexed(&self.job) || completion_index(pod).is_some_and(|ix| ix < self.completions())
    }
}

async fn reconcile(shared: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action> {
    let namespace = shared.namespace().unwrap_or_default();
    let key = format!("{namespace}/{}", shared.name_any());
    if managed_elsewhere(&shared) {
        return Ok(Action::await_change());
    }
    if is_finished(&shared) {
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    let Some(spec) = shared.spec.clone() else {
        return Ok(Action::await_change());
    };
    if !matches!(
        spec.completion_mode.as_deref(),
        None | Some("NonIndexed" | "Indexed")
    ) {
        ctx.events.warning(
            shared.as_ref(),
            "UnknownCompletionMode",
            "Skipped Job sync because completion mode is unknown".into(),
        );
        return Ok(Action::await_change());
    }
    sync_job(&ctx, shared, spec, key).await
}

async fn sync_job(ctx: &Ctx, shared: Arc<Job>, spec: JobSpec, key: String) -> Result<Action> {
    let mut job = (*shared).clone();
    let status = job.status.get_or_insert_with(JobStatus::default);
    let uncounted = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default)
        .clone();
    let uid = shared.uid().unwrap_or_default();
    let owned = ctx.pods.by_owner(&uid).unwrap_or_default();
    let satisfied = ctx
        .expectations
        .satisfied_among(&key, owned.iter().map(|p| &**p));

    let pods = pods_for_job(ctx, &job, &spec).await?;
    let active: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| pods::is_active(p))
        .cloned()
        .collect();
    let mut sync = Sync {
        expected_removals: ctx.expected_removals(&key, &pods),
        ready: active.iter().filter(|p| pods::is_ready(p)).count() as i32,
        terminating: pods.iter().filter(|p| is_terminating(p)).count() as i32,
        uncounted_succeeded: uncounted.succeeded.iter().flatten().cloned().collect(),
        uncounted_failed: uncounted.failed.iter().flatten().cloned().collect(),
        key,
        job,
        spec,
        pods,
        active,
        finished: None,
        succeeded: 0,
        failed: 0,
        prev_succeeded: Intervals::default(),
        succeeded_indexes: Intervals::default(),
        failed_indexes: None,
        new_backoff: Record::default(),
        delayed_deletion: HashMap::new(),
        requeue: None,
    };
    let mut active_count = sync.active.len() as i32;
    let (new_succeeded, new_failed) = new_finished_pods(&sync);
    let ignored = new_failed
        .iter()
        .filter(|p| !failure_policy::matches(sync.spec.pod_failure_policy.as_ref(), p).counts)
        .count();
    let status = sync.job.status.clone().unwrap_or_default();
    sync.succeeded = status.succeeded.unwrap_or(0)
        + new_succeeded.len() as i32
        + sync.uncounted_succeeded.len() as i32;
    sync.failed = status.failed.unwrap_or(0)
        + (new_failed.len() - ignored) as i32
        + sync.uncounted_failed.len() as i32;

    let now = ctx.now();
    if status.start_time.is_none() && !suspended(&sync.spec) {
        sync.status().start_time = Some(now.clone());
    }
    let new_succeeded_refs: Vec<&Pod> = new_succeeded.iter().map(|p| p.as_ref()).collect();
    let new_failed_refs: Vec<&Pod> = new_failed.iter().map(|p| p.as_ref()).collect();
    sync.new_backoff = ctx
        .backoff_record(&sync.key)
        .after(&new_succeeded_refs, &new_failed_refs);

    decide_finished(ctx, &mut sync, &now);

    let mut suspend_changed = false;
    let mut manage_error = None;
    if sync.finished.is_some() {
        let active_pods = sync.active.clone();
        let (deleted_ready, deleted, error) =
            delete_active_pods(ctx, &sync.job, &active_pods).await;
        if deleted != active_count || !satisfied {
            // Not finished yet: pods may remain, or some are not in the cache yet.
            sync.finished = None;
        }
        active_count -= deleted;
        sync.terminating += deleted;
        sync.ready -= deleted_ready;
        manage_error = error;
    } else {
        let mut managed = false;
        if satisfied && sync.job.metadata.deletion_timestamp.is_none() {
            match manage_job(ctx, &mut sync).await {
                Ok(active) => active_count = active,
                Err((active, error)) => {
                    active_count = active;
                    manage_error = Some(error);
                }
            }
            managed = true;
        }
        let complete = match sync.spec.completions {
            None => sync.succeeded > 0 && active_count == 0,
            Some(completions) => sync.succeeded >= completions && active_count == 0,
        };
        if complete {
            sync.finished = Some(new_condition(
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                &now,
            ));
        } else if managed {
            suspend_changed = update_suspended(ctx, &mut sync, &now);
        }
    }

    let status = sync.job.status.clone().unwrap_or_default();
    let needs_update = suspend_changed
        || status.active.unwrap_or(0) != active_count
        || status.ready != Some(sync.ready)
        || status.terminating != Some(sync.terminating);
    let (ready, terminating) = (sync.ready, sync.terminating);
    let status = sync.status();
    status.active = Some(active_count);
    status.ready = Some(ready);
    status.terminating = Some(terminating);
    track_status(ctx, &mut sync, needs_update).await?;
    if let Some(error) = manage_error {
        return Err(error);
    }
    Ok(sync
        .requeue
        .map_or_else(Action::await_change, Action::requeue))
}

/// The Suspended condition follows `spec.suspend`; resuming restarts the clock of
/// `activeDeadlineSeconds` (`startTime` is reset). Returns whether it changed.
fn update_suspended(ctx: &Ctx, sync: &mut Sync, now: &Time) -> bool {
    let job = sync.job.clone();
    if suspended(&sync.spec) {
        let changed = ensure_condition(
            sync.status(),
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now,
        );
        if changed {
            ctx.events.normal(&job, "Suspended", "Job suspended".into());
        }
        changed
    } else {
        let changed = ensure_condition(
            sync.status(),
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            now,
        );
        if changed {
            ctx.events.normal(&job, "Resumed", "Job resumed".into());
            sync.status().start_time = Some(now.clone());
        }
        changed
    }
}

/// Whether the Job met its success criteria or failed, and when to look again for its
/// active deadline.
fn decide_finished(ctx: &Ctx, sync: &mut Sync, now: &Time) {
    let status = sync.job.status.clone().unwrap_or_default();
    sync.finished = find_condition(&status, "SuccessCriteriaMet")
        .filter(|c| c.status == "True")
        .cloned();
    if sync.finished.is_none() {
        if let Some(target) =
            find_condition(&status, "FailureTarget").filter(|c| c.status == "True")
        {
            sync.finished = Some(new_condition(
                "Failed",
                "True",
                target.reason.as_deref().unwrap_or(""),
                target.message.as_deref().unwrap_or(""),
                now,
            ));
        } else if let Some(message) = fail_job_message(sync) {
            sync.finished = Some(new_condition(
                "FailureTarget",
                "True",
                "PodFailurePolicy",
                &message,
                now,
            ));
        }
    }
    if sync.finished.is_none() {
        let backoff_limit = sync.spec.backoff_limit.unwrap_or(6);
        let failure = |reason: &str, message: &str| {
            new_condition("FailureTarget", "True", reason, message, now)
        };
        if sync.failed > backoff_limit || past_backoff_limit_on_failure(&sync.spec, &sync.pods) {
            sync.finished = Some(failure(
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            ));
        } else if let Some(left) = active_deadline_left(ctx, sync) {
            if left.is_zero() {
                sync.finished = Some(failure(
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                ));
            } else {
                sync.requeue_after(left);
            }
        }
    }
    if is_indexed(&sync.job) {
        let completions = sync.completions();
        sync.prev_succeeded = Intervals::parse(
            status.completed_indexes.as_deref().unwrap_or(""),
            completions,
        );
        let newly: BTreeSet<i64> = sync
            .pods
            .iter()
            .filter(|p| pods::phase(p) == "Succeeded" && has_finalizer(p))
            .filter_map(|p| completion_index(p))
            .filter(|ix| *ix < completions)
            .collect();
        sync.succeeded_indexes = sync.prev_succeeded.with_indexes(newly);
        sync.succeeded = sync.succeeded_indexes.total() as i32;
        if sync.spec.backoff_limit_per_index.is_some() {
            let failed = failed_indexes(sync, &status);
            if sync.finished.is_none() {
                let total = failed.total();
                let failure = |reason: &str, message: &str| {
                    new_condition("FailureTarget", "True", reason, message, now)
                };
                if sync
                    .spec
                    .max_failed_indexes
                    .is_some_and(|max| total > i64::from(max))
                {
                    sync.finished = Some(failure(
                        "MaxFailedIndexesExceeded",
                        "Job has exceeded the specified maximal number of failed indexes",
                    ));
                } else if total > 0 && total + sync.succeeded_indexes.total() >= completions {
                    sync.finished = Some(failure("FailedIndexes", "Job has failed indexes"));
                }
            }
            sync.failed_indexes = Some(failed);
            sync.delayed_deletion = pods_with_delayed_deletion(sync);
        }
        if sync.finished.is_none()
            && let Some(message) = indexed::match_success_policy(
                sync.spec.success_policy.as_ref(),
                completions,
                &sync.succeeded_indexes,
            )
        {
            sync.finished = Some(new_condition(
                "SuccessCriteriaMet",
                "True",
                "SuccessPolicy",
                &message,
                now,
            ));
        }
    }
}

/// How long the Job may still be active (`None`: no deadline applies).
fn active_deadline_left(ctx: &Ctx, sync: &Sync) -> Option<Duration> {
    let seconds = sync.spec.active_deadline_seconds?;
    if suspended(&sync.spec) {
        return None;
    }
    let start = sync.job.status.as_ref()?.start_time.as_ref()?.0;
    let elapsed = ctx.clock.now().duration_since(start);
    let left = SignedDuration::from_secs(seconds) - elapsed;
    Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
}

/// `restartPolicy: OnFailure` pods restarted their containers `backoffLimit` times in all.
fn past_backoff_limit_on_failure(spec: &JobSpec, pods: &[Arc<Pod>]) -> bool {
    let restart_policy = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref());
    if restart_policy != Some("OnFailure") {
        return false;
    }
    let restarts: i32 = pods
        .iter()
        .filter(|p| matches!(pods::phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .map(|c| c.restart_count)
        .sum();
    let limit = spec.backoff_limit.unwrap_or(6);
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// The message of the first `FailJob` rule a failed pod matches.
fn fail_job_message(sync: &Sync) -> Option<String> {
    let policy = sync.spec.pod_failure_policy.as_ref()?;
    sync.pods
        .iter()
        .filter(|p| is_pod_failed(p, &sync.spec))
        .find_map(|p| failure_policy::matches(Some(policy), p).fail_job)
}

/// Tracked pods that succeeded or failed and are not counted yet.
fn new_finished_pods(sync: &Sync) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
    let succeeded = sync
        .pods
        .iter()
        .filter(|p| sync.countable(p, &sync.uncounted_succeeded) && pods::phase(p) == "Succeeded")
        .cloned()
        .collect();
    let failed = sync
        .pods
        .iter()
        .filter(|p| sync.countable(p, &sync.uncounted_failed) && is_pod_failed(p, &sync.spec))
        .cloned()
        .collect();
    (succeeded, failed)
}

/// The failed indexes: those in `status.failedIndexes` and those whose pod failed for the
/// last time allowed (kcm's `calculateFailedIndexes`).
fn failed_indexes(sync: &Sync, status: &JobStatus) -> Intervals {
    let completions = sync.completions();
    let previous = Intervals::parse(status.failed_indexes.as_deref().unwrap_or(""), completions);
    let newly: BTreeSet<i64> = sync
        .pods
        .iter()
        .filter(|p| has_finalizer(p) && index_failed(&sync.spec, p))
        .filter_map(|p| completion_index(p))
        .filter(|ix| *ix < completions)
        .collect();
    previous.with_indexes(newly)
}

fn index_failed(spec: &JobSpec, pod: &Pod) -> bool {
    if !is_pod_failed(pod, spec) {
        return false;
    }
    let verdict = failure_policy::matches(spec.pod_failure_policy.as_ref(), pod);
    if verdict.action == Some("FailIndex") {
        return true;
    }
    verdict.counts
        && annotation_count(pod, INDEX_FAILURE_COUNT) >= spec.backoff_limit_per_index.unwrap_or(0)
}

/// A non-negative int32 annotation, 0 when missing or invalid.
fn annotation_count(pod: &Pod, key: &str) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|v| *v >= 0)
        .unwrap_or(0)
}

fn absolute_failure_count(pod: &Pod) -> i32 {
    annotation_count(pod, INDEX_FAILURE_COUNT)
        .saturating_add(annotation_count(pod, INDEX_IGNORED_FAILURE_COUNT))
}

/// For each index with neither an active pod nor a final outcome, its latest failed pod,
/// kept (with its finalizer) until its replacement carries the failure count on.
fn pods_with_delayed_deletion(sync: &Sync) -> HashMap<i64, Arc<Pod>> {
    let active = indexed::indexes_of(sync.active.iter().map(|p| p.as_ref()));
    let no_uncounted = HashSet::new();
    let failed = sync.failed_indexes.clone().unwrap_or_default();
    let mut result: HashMap<i64, Arc<Pod>> = HashMap::new();
    for pod in &sync.pods {
        if !sync.countable(pod, &no_uncounted) || !is_pod_failed(pod, &sync.spec) {
            continue;
        }
        let Some(ix) = completion_index(pod).filter(|ix| *ix < sync.completions()) else {
            continue;
        };
        if sync.succeeded_indexes.has(ix) || failed.has(ix) || active.contains(&ix) {
            continue;
        }
        let replace = result.get(&ix).is_none_or(|last| {
            absolute_failure_count(last) <= absolute_failure_count(pod)
                && backoff::finished_at(pod) >= backoff::finished_at(last)
        });
        if replace {
            result.insert(ix, pod.clone());
        }
    }
    result
}

/// The pods the Job controls, after adopting orphans its selector matches (with the
/// tracking finalizer) and releasing the pods it no longer matches.
async fn pods_for_job(ctx: &Ctx, job: &Job, spec: &JobSpec) -> Result<Vec<Arc<Pod>>> {
    let selector = controller_ref::selector(spec.selector.as_ref())?;
    let namespace = job.namespace().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let candidates = ctx.pods.list_namespace(&namespace);
    let owned_before: HashSet<String> = candidates
        .iter()
        .filter(|p| p.owner_references().iter().any(|r| r.uid == uid))
        .filter_map(|p| p.uid())
        .collect();
    let owner = new_controller_ref(job);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let client = ctx.client.clone();
    let claimed = claim(
        |ns| Api::<Pod>::namespaced(client.clone(), ns),
        &owner,
        job.metadata.deletion_timestamp.is_some(),
        candidates,
        |p: &Pod| selector.matches(pods::labels(p)),
        || recheck_owner(&jobs, &owner),
    )
    .await?;
    let api = ctx.pod_api(&namespace);
    let mut result = Vec::with_capacity(claimed.len());
    for pod in claimed {
        let adopted = !pod.uid().is_some_and(|u| owned_before.contains(&u));
        if adopted && !has_finalizer(&pod) {
            let patch = json!({"metadata": {"finalizers": [TRACKING_FINALIZER], "uid": pod.uid()}});
            match api
                .patch(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(e) => return Err(e.into()),
            }
            let mut copy = (*pod).clone();
            copy.metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(TRACKING_FINALIZER.into());
            result.push(Arc::new(copy));
        } else {
            result.push(pod);
        }
    }
    Ok(result)
}

/// Deletes active pods of a finished Job, keeping their finalizers (they are removed once
/// counted). Returns how many ready pods and how many pods were deleted.
async fn delete_active_pods(
    ctx: &Ctx,
    job: &Job,
    active: &[Arc<Pod>],
) -> (i32, i32, Option<Error>) {
    let namespace = job.namespace().unwrap_or_default();
    let api = ctx.pod_api(&namespace);
    let results = join_all(active.iter().map(|pod| {
        let api = api.clone();
        async move {
            let outcome = api.delete(&pod.name_any(), &DeleteParams::default()).await;
            (pod, outcome)
        }
    }))
    .await;
    let (mut ready, mut deleted, mut error) = (0, 0, None);
    for (pod, outcome) in results {
        match outcome {
            Ok(_) => {
                ctx.events.normal(
                    job,
                    "SuccessfulDelete",
                    format!("Deleted pod: {}", pod.name_any()),
                );
                deleted += 1;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => deleted += 1,
            Err(e) => {
                ctx.events
                    .warning(job, "FailedDelete", format!("Error deleting: {e}"));
                error = Some(e.into());
                continue;
            }
        }
        if pods::is_ready(pod) {
            ready += 1;
        }
    }
    (ready, deleted, error)
}

/// Deletes pods the Job has too many of, removing their finalizers first, with
/// expectations. Returns how many ready pods and how many pods were deleted.
async fn delete_job_pods(ctx: &Ctx, sync: &Sync, doomed: &[Arc<Pod>]) -> (i32, i32, Option<Error>) {
    let job = &sync.job;
    let api = ctx.pod_api(&job.namespace().unwrap_or_default());
    let results = join_all(doomed.iter().map(|pod| {
        let api = api.clone();
        async move {
            if has_finalizer(pod) {
                remove_finalizer(&api, pod).await?;
            }
            match api.delete(&pod.name_any(), &DeleteParams::default()).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
                Err(e) => Err(Error::from(e)),
            }
        }
    }))
    .await;
    let (mut ready, mut deleted, mut error) = (0, 0, None);
    for (pod, outcome) in doomed.iter().zip(results) {
        match outcome {
            Ok(existed) => {
                if existed {
                    ctx.events.normal(
                        job,
                        "SuccessfulDelete",
                        format!("Deleted pod: {}", pod.name_any()),
                    );
                    ctx.expectations
                        .deleted(&sync.key, pod.uid().unwrap_or_default());
                }
                deleted += 1;
                if pods::is_ready(pod) {
                    ready += 1;
                }
            }
            Err(e) => {
                ctx.events
                    .warning(job, "FailedDelete", format!("Error deleting: {e}"));
                error = Some(e);
            }
        }
    }
    (ready, deleted, error)
}

/// Brings the number of active pods to what the Job wants (kcm's `manageJob`): all
/// deleted while suspended, extra ones deleted, missing ones created (after the failure
/// backoff, in slow-start batches). Returns the active count, with the error if any.
async fn manage_job(ctx: &Ctx, sync: &mut Sync) -> std::result::Result<i32, (i32, Error)> {
    let mut active = sync.active.len() as i32;
    let active_pods = sync.active.clone();
    if suspended(&sync.spec) {
        let doomed = pods_for_removal(
            is_indexed(&sync.job),
            sync.completions(),
            &active_pods,
            active_pods.len(),
        );
        let (ready, removed, error) = delete_job_pods(ctx, sync, &doomed).await;
        active -= removed;
        sync.terminating += removed;
        sync.ready -= ready;
        return error.map_or(Ok(active), |e| Err((active, e)));
    }
    let parallelism = sync.spec.parallelism.unwrap_or(1);
    let want = match sync.spec.completions {
        None if sync.succeeded > 0 => active,
        None => parallelism,
        Some(completions) => (completions - sync.succeeded).min(parallelism).max(0),
    };
    let excess = (active - want).max(0) as usize;
    let mut doomed = pods_for_removal(
        is_indexed(&sync.job),
        sync.completions(),
        &active_pods,
        excess,
    );
    doomed.truncate(MAX_POD_CREATE_DELETE_PER_SYNC);
    if !doomed.is_empty() {
        let (ready, removed, error) = delete_job_pods(ctx, sync, &doomed).await;
        active -= removed;
        sync.terminating += removed;
        sync.ready -= ready;
        return error.map_or(Ok(active), |e| Err((active, e)));
    }
    let terminating = if only_replace_failed(&sync.spec) {
        sync.terminating
    } else {
        0
    };
    let missing = want - terminating - active;
    if missing <= 0 {
        return Ok(active);
    }
    let now = ctx.clock.now();
    if sync.spec.backoff_limit_per_index.is_none() {
        let wait = sync.new_backoff.remaining(now);
        if !wait.is_zero() {
            sync.requeue_after(wait.max(Duration::from_secs(1)));
            return Ok(0);
        }
    }
    let mut missing = (missing as usize).min(MAX_POD_CREATE_DELETE_PER_SYNC);
    let mut indexes: Vec<Option<i64>> = vec![None; missing];
    if is_indexed(&sync.job) {
        let mut taken = sync
            .succeeded_indexes
            .with_indexes(indexed::indexes_of(active_pods.iter().map(|p| p.as_ref())));
        if only_replace_failed(&sync.spec) {
            let terminating = sync
                .pods
                .iter()
                .filter(|p| is_terminating(p))
                .map(|p| p.as_ref());
            taken = taken.with_indexes(indexed::indexes_of(terminating));
        }
        if let Some(failed) = &sync.failed_indexes {
            taken = taken.merge(failed);
        }
        let mut pending = indexed::first_pending(&taken, missing, sync.completions());
        if sync.spec.backoff_limit_per_index.is_some() {
            let mut ready_now = Vec::new();
            let mut soonest: Option<Duration> = None;
            for ix in pending {
                let wait = sync
                    .delayed_deletion
                    .get(&ix)
                    .map_or(Duration::ZERO, |last| {
                        backoff::remaining(
                            (absolute_failure_count(last) + 1) as u32,
                            Some(backoff::finished_at(last)),
                            now,
                        )
                    });
                if wait.is_zero() {
                    ready_now.push(ix);
                } else {
                    soonest = Some(soonest.map_or(wait, |s| s.min(wait)));
                }
            }
            if ready_now.is_empty()
                && let Some(wait) = soonest
            {
                sync.requeue_after(wait.max(Duration::from_secs(1)));
                return Ok(0);
            }
            pending = ready_now;
        }
        missing = pending.len();
        indexes = pending.into_iter().map(Some).collect();
    }
    let created = create_pods(ctx, sync, &indexes).await;
    match created {
        Ok(n) => Ok(active + n as i32),
        Err((n, error)) => Err((active + n as i32, error)),
    }
    .map_err(|(a, e)| (a.min(active + missing as i32), e))
}

/// The pod for one more of the Job's completions (of `index` for Indexed Jobs).
fn pod_for(sync: &Sync, index: Option<i64>) -> Pod {
    let mut template = sync.spec.template.clone();
    let meta = template.metadata.get_or_insert_with(Default::default);
    let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.into());
    }
    let job_name = sync.job.name_any();
    if let Some(ix) = index {
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), ix.to_string());
        meta.labels
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), ix.to_string());
        if sync.spec.backoff_limit_per_index.is_some() {
            let replaced = sync.delayed_deletion.get(&ix);
            let (failures, ignored) = replaced.map_or((0, 0), |pod| {
                let (mut failures, mut ignored) = (
                    annotation_count(pod, INDEX_FAILURE_COUNT),
                    annotation_count(pod, INDEX_IGNORED_FAILURE_COUNT),
                );
                if failure_policy::matches(sync.spec.pod_failure_policy.as_ref(), pod).counts {
                    failures += 1;
                } else {
                    ignored += 1;
                }
                (failures, ignored)
            });
            let annotations = meta.annotations.get_or_insert_with(Default::default);
            annotations.insert(INDEX_FAILURE_COUNT.into(), failures.to_string());
            if ignored > 0 {
                annotations.insert(INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
            }
        }
        if let Some(spec) = template.spec.as_mut() {
            spec.hostname = Some(format!("{job_name}-{ix}"));
            for container in spec
                .init_containers
                .iter_mut()
                .flatten()
                .chain(spec.containers.iter_mut())
            {
                indexed::add_index_env(container);
            }
        }
    }
    let mut pod = pods::from_template(
        &template,
        &sync.job.metadata,
        Some(new_controller_ref(&sync.job)),
    );
    if let Some(ix) = index {
        pod.metadata.generate_name = Some(indexed::generate_name(&job_name, ix));
    }
    pod
}

/// Creates one pod per entry of `indexes`, in batches of 1, 2, 4, ... that stop at the
/// first batch with a failure (kcm's slow start). Returns how many were created.
async fn create_pods(
    ctx: &Ctx,
    sync: &Sync,
    indexes: &[Option<i64>],
) -> std::result::Result<usize, (usize, Error)> {
    let api = ctx.pod_api(&sync.job.namespace().unwrap_or_default());
    let mut created = 0;
    let mut batch = 1;
    let mut rest = indexes;
    while !rest.is_empty() {
        let (now, later) = rest.split_at(batch.min(rest.len()));
        rest = later;
        let results = join_all(now.iter().map(|ix| {
            let pod = pod_for(sync, *ix);
            let api = api.clone();
            async move { api.create(&PostParams::default(), &pod).await }
        }))
        .await;
        let mut failure = None;
        for result in results {
            match result {
                Ok(pod) => {
                    ctx.expectations
                        .created(&sync.key, pod.uid().unwrap_or_default());
                    ctx.events.normal(
                        &sync.job,
                        "SuccessfulCreate",
                        format!("Created pod: {}", pod.name_any()),
                    );
                    created += 1;
                }
                Err(e) => {
                    ctx.events
                        .warning(&sync.job, "FailedCreate", format!("Error creating: {e}"));
                    failure = Some(Error::from(e));
                }
            }
        }
        if let Some(error) = failure {
            return Err((created, error));
        }
        batch *= 2;
    }
    Ok(created)
}

/// Counts finished pods through `uncountedTerminatedPods`, removes their finalizers, and
/// adds the terminal condition once nothing is left to count (kcm's
/// `trackJobStatusAndRemoveFinalizers`).
async fn track_status(ctx: &Ctx, sync: &mut Sync, mut needs_flush: bool) -> Result<()> {
    let indexed = is_indexed(&sync.job);
    if indexed {
        sync.pods.sort_by_key(|p| completion_index(p).unwrap_or(-1));
    }
    let mut with_finalizer: HashSet<String> = sync
        .pods
        .iter()
        .filter(|p| has_finalizer(p))
        .filter_map(|p| p.uid())
        .filter(|uid| !sync.expected_removals.contains(uid))
        .collect();
    if clean_uncounted(sync.status(), &with_finalizer) {
        needs_flush = true;
    }
    let completions = sync.completions();
    let mut to_remove: Vec<Arc<Pod>> = Vec::new();
    let mut new_indexes: Vec<i64> = Vec::new();
    let mut reached_max = false;
    let pods = sync.pods.clone();
    for pod in &pods {
        let uid = pod.uid().unwrap_or_default();
        if !has_finalizer(pod) || sync.expected_removals.contains(&uid) {
            continue;
        }
        let failed = is_pod_failed(pod, &sync.spec);
        if !can_remove_finalizer(sync, pod, failed) {
            continue;
        }
        to_remove.push(pod.clone());
        let ix = completion_index(pod).filter(|ix| *ix < completions);
        if pods::phase(pod) == "Succeeded" && !sync.uncounted_failed.contains(&uid) {
            if indexed {
                if let Some(ix) = ix.filter(|ix| !sync.prev_succeeded.has(*ix)) {
                    new_indexes.push(ix);
                    needs_flush = true;
                }
            } else if !sync.uncounted_succeeded.contains(&uid) {
                needs_flush = true;
                uncounted_mut(sync.status())
                    .succeeded
                    .get_or_insert_with(Vec::new)
                    .push(uid.clone());
            }
        } else if failed
            || sync
                .finished
                .as_ref()
                .is_some_and(|f| !is_success_criteria_met(Some(f)))
        {
            let valid = !indexed || ix.is_some();
            let counts = failure_policy::matches(sync.spec.pod_failure_policy.as_ref(), pod).counts;
            if !sync.uncounted_failed.contains(&uid) && valid && counts {
                needs_flush = true;
                uncounted_mut(sync.status())
                    .failed
                    .get_or_insert_with(Vec::new)
                    .push(uid.clone());
            }
        }
        let uncounted = sync
            .job
            .status
            .as_ref()
            .and_then(|s| s.uncounted_terminated_pods.as_ref());
        let waiting = uncounted.map_or(0, |u| {
            u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
        });
        if new_indexes.len() + waiting >= MAX_UNCOUNTED_PODS {
            reached_max = true;
            break;
        }
    }
    if indexed {
        sync.succeeded_indexes = sync
            .succeeded_indexes
            .with_indexes(new_indexes.iter().copied());
        let completed = sync.succeeded_indexes.to_string();
        let total = sync.succeeded_indexes.total() as i32;
        let failed = sync.failed_indexes.as_ref().map(ToString::to_string);
        let status = sync.status();
        if status.completed_indexes.as_deref().unwrap_or("") != completed {
            needs_flush = true;
        }
        status.succeeded = Some(total);
        status.completed_indexes = Some(completed).filter(|c| !c.is_empty());
        if status.failed_indexes != failed {
            status.failed_indexes = failed;
            needs_flush = true;
        }
    }
    let now = ctx.now();
    if let Some(target) = sync.finished.clone().filter(|f| f.type_ == "FailureTarget") {
        sync.status()
            .conditions
            .get_or_insert_with(Vec::new)
            .push(target.clone());
        needs_flush = true;
        sync.finished = Some(with_type(&target, "Failed", &now));
    }
    if let Some(met) = sync
        .finished
        .clone()
        .filter(|f| is_success_criteria_met(Some(f)))
    {
        let status = sync.job.status.clone().unwrap_or_default();
        if find_condition(&status, "SuccessCriteriaMet")
            .filter(|c| c.status == "True")
            .is_none()
        {
            sync.status()
                .conditions
                .get_or_insert_with(Vec::new)
                .push(met.clone());
            needs_flush = true;
        }
        sync.finished = Some(with_type(&met, "Complete", &now));
    }
    needs_flush =
        flush_and_remove_finalizers(ctx, sync, &to_remove, &mut with_finalizer, needs_flush)
            .await?;
    let finished = !reached_max && enact_finished(sync, &now);
    if finished {
        needs_flush = true;
    }
    if needs_flush {
        sync.job = update_status(ctx, &sync.job).await?;
        if finished {
            record_finished(ctx, sync);
        }
    }
    Ok(())
}

fn with_type(condition: &JobCondition, type_: &str, now: &Time) -> JobCondition {
    new_condition(
        type_,
        "True",
        condition.reason.as_deref().unwrap_or(""),
        condition.message.as_deref().unwrap_or(""),
        now,
    )
}

fn uncounted_mut(status: &mut JobStatus) -> &mut UncountedTerminatedPods {
    status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default)
}

/// Whether a tracked pod's finalizer may go: the Job is being deleted or finished, the pod
/// succeeded, or it failed and is not kept to hand its index's failure count on.
fn can_remove_finalizer(sync: &Sync, pod: &Pod, failed: bool) -> bool {
    if sync.job.metadata.deletion_timestamp.is_some()
        || sync.finished.is_some()
        || pods::phase(pod) == "Succeeded"
    {
        return true;
    }
    if !failed {
        return false;
    }
    if sync.spec.backoff_limit_per_index.is_some()
        && let Some(ix) = completion_index(pod)
        && let Some(kept) = sync.delayed_deletion.get(&ix)
        && kept.uid() == pod.uid()
    {
        return false;
    }
    true
}

/// Moves the uncounted pods whose finalizer is gone into `succeeded`/`failed`. Returns
/// whether the status changed.
fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let mut changed = false;
    let (mut succeeded, mut failed) = (status.succeeded.unwrap_or(0), status.failed.unwrap_or(0));
    let uncounted = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    for (list, counter) in [
        (&mut uncounted.succeeded, &mut succeeded),
        (&mut uncounted.failed, &mut failed),
    ] {
        let before = list.as_ref().map_or(0, Vec::len);
        let kept: Vec<String> = list
            .iter()
            .flatten()
            .filter(|uid| with_finalizer.contains(*uid))
            .cloned()
            .collect();
        if kept.len() != before {
            changed = true;
            *counter += (before - kept.len()) as i32;
            *list = Some(kept).filter(|k| !k.is_empty());
        }
    }
    status.succeeded = Some(succeeded);
    status.failed = Some(failed);
    changed
}

/// Writes the uncounted pods (and interim conditions), removes the finalizers, then counts
/// the pods whose finalizer is gone (kcm's `flushUncountedAndRemoveFinalizers`). Returns
/// whether the status still needs writing.
async fn flush_and_remove_finalizers(
    ctx: &Ctx,
    sync: &mut Sync,
    to_remove: &[Arc<Pod>],
    with_finalizer: &mut HashSet<String>,
    mut needs_flush: bool,
) -> Result<bool> {
    if needs_flush {
        sync.job = update_status(ctx, &sync.job).await?;
        ctx.set_backoff_record(&sync.key, sync.new_backoff);
        needs_flush = false;
    }
    let mut removal_error = None;
    if !to_remove.is_empty() {
        ctx.expect_removals(&sync.key, to_remove.iter().filter_map(|p| p.uid()));
        let api = ctx.pod_api(&sync.job.namespace().unwrap_or_default());
        let results = join_all(to_remove.iter().map(|pod| remove_finalizer(&api, pod))).await;
        for (pod, result) in to_remove.iter().zip(results) {
            let uid = pod.uid().unwrap_or_default();
            match result {
                Ok(()) => {
                    with_finalizer.remove(&uid);
                }
                Err(e) => {
                    ctx.removal_failed(&sync.key, &uid);
                    removal_error = Some(e);
                }
            }
        }
    }
    if clean_uncounted(sync.status(), with_finalizer) {
        needs_flush = true;
    }
    if let Some(error) = removal_error {
        if needs_flush {
            sync.job = update_status(ctx, &sync.job).await?;
        }
        return Err(error);
    }
    Ok(needs_flush)
}

/// Adds `Complete` (with `completionTime`) or `Failed` once no pod is left uncounted or
/// terminating. Returns whether it did.
fn enact_finished(sync: &mut Sync, now: &Time) -> bool {
    let Some(finished) = sync.finished.clone() else {
        return false;
    };
    let status = sync.job.status.clone().unwrap_or_default();
    let waiting = status.uncounted_terminated_pods.as_ref().map_or(0, |u| {
        u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
    });
    if waiting > 0 || sync.terminating > 0 {
        return false;
    }
    let status = sync.status();
    ensure_condition(
        status,
        &finished.type_,
        &finished.status,
        finished.reason.as_deref().unwrap_or(""),
        finished.message.as_deref().unwrap_or(""),
        now,
    );
    if finished.type_ == "Complete" {
        status.completion_time = finished.last_transition_time.clone();
    }
    true
}

/// kcm's events for a finished Job.
fn record_finished(ctx: &Ctx, sync: &Sync) {
    let Some(finished) = &sync.finished else {
        return;
    };
    let job = &sync.job;
    if finished.type_ == "Complete" {
        let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
        if sync.spec.completions.is_some_and(|c| succeeded > c) {
            ctx.events.warning(
                job,
                "TooManySucceededPods",
                "Too many succeeded pods running after completion count reached".into(),
            );
        }
        ctx.events.normal(job, "Completed", "Job completed".into());
    } else {
        ctx.events.warning(
            job,
            finished.reason.as_deref().unwrap_or(""),
            finished.message.clone().unwrap_or_default(),
        );
    }
}

/// Writes the Job's status (an update guarded by its resourceVersion, as kcm's
/// `UpdateStatus`).
async fn update_status(ctx: &Ctx, job: &Job) -> Result<Job> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let written = api
        .replace_status(&job.name_any(), &PostParams::default(), job)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(written)
}
