//! The CronJob controller (kcm's `cronjob-controller`): creates a CronJob's Jobs at the
//! times its schedule names, keeps its `status.active` list, and deletes finished Jobs
//! beyond its history limits.
//!
//! Each Job is named `<cronjob>-<scheduled time in minutes since the epoch>`, which is
//! what makes a creation idempotent: a second attempt for the same time meets
//! AlreadyExists. A sync requeues itself 100 ms past the next scheduled time, so on the
//! virtual clock of a paused-time test a Job appears at exactly its minute.
//!
//! Only Jobs whose controller is the CronJob are its own: a Job made by
//! `kubectl create job --from=cronjob/<name>` (annotated
//! `cronjob.kubernetes.io/instantiate: manual`) has a plain ownerReference and is left
//! alone.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store, predicate};
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use kube::{Client, ResourceExt};

use super::schedule::{Schedule, load_zone};
use super::{CRONJOB_SCHEDULED_TIMESTAMP, finished_condition, is_finished, is_succeeded};
use crate::clock::Clock;
use crate::controller_ref::{controller_of, new_controller_ref};
use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::informers;

/// kcm's `cronjob-controller`.
pub const CRONJOB: Descriptor = Descriptor {
    name: "cronjob-controller",
    aliases: &["cronjob"],
    service_account: "cronjob-controller",
    add,
};

/// kcm's `nextScheduleDelta`: requeues land this long after the scheduled time.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);
/// kcm's `--concurrent-cron-job-syncs` default.
const WORKERS: usize = 5;

struct Ctx {
    client: Client,
    clock: Clock,
    events: Events,
    jobs: Store<Job>,
}

fn add(manager: &mut Manager, setup: Setup) {
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), "cronjob-controller"),
        client: setup.client,
        clock: setup.clock,
        jobs: informers::cache::<Job>(manager),
    });
    let _ = informers::cache::<CronJob>(manager);
    let controller = informers::controller::<CronJob>(manager)
        .named("cronjob-controller")
        .with_predicate(predicate::resource_version_changed())
        .concurrency(WORKERS)
        .watches_cached(
            informers::api::<Job>(manager),
            informers::config(),
            |change: &Change<Job>| {
                let mut keys: Vec<ObjectKey> = change
                    .old
                    .iter()
                    .chain(change.new.iter())
                    .filter_map(|job| {
                        let owner = controller_of(&job.metadata).filter(|o| o.kind == "CronJob")?;
                        Some(ObjectKey::namespaced(job.namespace()?, owner.name.clone()))
                    })
                    .collect();
                keys.dedup();
                keys
            },
        );
    manager.add(controller, reconcile, ctx);
}

/// What a sync of the CronJob concluded.
struct Outcome {
    requeue: Option<Duration>,
    update_status: bool,
}

async fn reconcile(shared: Arc<CronJob>, ctx: Arc<Ctx>) -> Result<Action> {
    let namespace = shared.namespace().unwrap_or_default();
    let name = shared.name_any();
    let jobs: Vec<Arc<Job>> = ctx
        .jobs
        .list_namespace(&namespace)
        .into_iter()
        .filter(|job| {
            controller_of(&job.metadata).is_some_and(|o| o.kind == "CronJob" && o.name == name)
        })
        .collect();
    let mut cronjob = (*shared).clone();
    let cleaned = cleanup_finished_jobs(&ctx, &mut cronjob, &jobs).await;
    let synced = sync_cronjob(&ctx, &mut cronjob, &jobs).await;
    let update = cleaned
        || match &synced {
            Ok(outcome) => outcome.update_status,
            Err((updated, _)) => *updated,
        };
    if update {
        let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), &namespace);
        let written = api
            .replace_status(&name, &PostParams::default(), &cronjob)
            .await?;
        konverge_runtime::reconcile::wrote(&written);
    }
    match synced {
        Ok(Outcome {
            requeue: Some(after),
            ..
        }) => Ok(Action::requeue(after)),
        Ok(_) => Ok(Action::await_change()),
        Err((_, error)) => Err(error),
    }
}

fn in_active_list(cronjob: &CronJob, uid: &str) -> bool {
    active(cronjob)
        .iter()
        .any(|r| r.uid.as_deref() == Some(uid))
}

fn active(cronjob: &CronJob) -> &[ObjectReference] {
    cronjob
        .status
        .as_ref()
        .and_then(|s| s.active.as_deref())
        .unwrap_or_default()
}

fn delete_from_active_list(cronjob: &mut CronJob, uid: &str) {
    let status = cronjob.status.get_or_insert_with(Default::default);
    let kept: Vec<ObjectReference> = status
        .active
        .iter()
        .flatten()
        .filter(|r| r.uid.as_deref() != Some(uid))
        .cloned()
        .collect();
    status.active = Some(kept).filter(|k| !k.is_empty());
}

/// The reference kept in `status.active`.
fn job_reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

type SyncResult = std::result::Result<Outcome, (bool, Error)>;

/// kcm's `syncCronJob`: notes finished and missing Jobs, then starts the Job of the most
/// recent unmet scheduled time if the CronJob allows it.
async fn sync_cronjob(ctx: &Ctx, cronjob: &mut CronJob, jobs: &[Arc<Job>]) -> SyncResult {
    let now = ctx.clock.now();
    let mut update = false;
    let namespace = cronjob.namespace().unwrap_or_default();
    let cronjobs: Api<CronJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let job_api: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    for job in jobs {
        let uid = job.uid().unwrap_or_default();
        let found = in_active_list(cronjob, &uid);
        if !found && !is_finished(job) {
            let fresh = cronjobs
                .get(&cronjob.name_any())
                .await
                .map_err(|e| (update, e.into()))?;
            if in_active_list(&fresh, &uid) {
                continue;
            }
            ctx.events.warning(
                &*cronjob,
                "UnexpectedJob",
                format!(
                    "Saw a job that the controller did not create or forgot: {}",
                    job.name_any()
                ),
            );
        } else if let Some(condition) = finished_condition(job) {
            if found {
                let type_ = condition.type_.clone();
                delete_from_active_list(cronjob, &uid);
                ctx.events.normal(
                    &*cronjob,
                    "SawCompletedJob",
                    format!("Saw completed job: {}, condition: {type_}", job.name_any()),
                );
                update = true;
            }
            if is_succeeded(job) {
                let completed = job.status.as_ref().and_then(|s| s.completion_time.clone());
                let status = cronjob.status.get_or_insert_with(Default::default);
                let later = match (&status.last_successful_time, &completed) {
                    (None, _) => true,
                    (Some(last), Some(done)) => done.0 > last.0,
                    (Some(_), None) => false,
                };
                if later && status.last_successful_time != completed {
                    status.last_successful_time = completed;
                    update = true;
                }
            }
        }
    }
    let children: Vec<String> = jobs.iter().filter_map(|j| j.uid()).collect();
    for reference in active(cronjob).to_vec() {
        let uid = reference.uid.clone().unwrap_or_default();
        if children.contains(&uid) {
            continue;
        }
        let name = reference.name.clone().unwrap_or_default();
        match job_api.get_opt(&name).await {
            Ok(None) => {
                ctx.events.normal(
                    &*cronjob,
                    "MissingJob",
                    format!("Active job went missing: {name}"),
                );
                delete_from_active_list(cronjob, &uid);
                update = true;
            }
            Ok(Some(_)) => {}
            Err(e) => return Err((update, e.into())),
        }
    }
    let done = |requeue| {
        Ok(Outcome {
            requeue,
            update_status: update,
        })
    };
    if cronjob.metadata.deletion_timestamp.is_some() {
        return done(None);
    }
    let Some(spec) = cronjob.spec.clone() else {
        return done(None);
    };
    let zone = match spec.time_zone.as_deref().map(load_zone) {
        None => jiff::tz::TimeZone::UTC,
        Some(Ok(zone)) => zone,
        Some(Err(e)) => {
            let zone = spec.time_zone.clone().unwrap_or_default();
            ctx.events.warning(
                &*cronjob,
                "UnknownTimeZone",
                format!("invalid timeZone: {zone:?}: {e}"),
            );
            return done(None);
        }
    };
    if spec.suspend == Some(true) {
        return done(None);
    }
    if spec.schedule.contains("TZ") {
        ctx.events.warning(
            &*cronjob,
            "UnsupportedSchedule",
            format!(
                "CRON_TZ or TZ used in schedule {:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
                spec.schedule
            ),
        );
    }
    let schedule = match Schedule::parse(&spec.schedule, zone.clone()) {
        Ok(schedule) => schedule,
        Err(e) => {
            ctx.events.warning(
                &*cronjob,
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {e}", spec.schedule),
            );
            return done(None);
        }
    };
    let scheduled = match next_schedule_time(ctx, cronjob, now, &schedule) {
        Ok(scheduled) => scheduled,
        Err(e) => {
            ctx.events.warning(
                &*cronjob,
                "InvalidSchedule",
                format!("invalid schedule: {} : {e}", spec.schedule),
            );
            return done(None);
        }
    };
    let Some(scheduled) = scheduled else {
        return done(Some(next_schedule_duration(cronjob, now, &schedule)));
    };
    if let Some(deadline) = spec.starting_deadline_seconds {
        let too_late = scheduled
            .checked_add(SignedDuration::from_secs(deadline))
            .is_ok_and(|latest| latest < now);
        if too_late {
            ctx.events.warning(
                &*cronjob,
                "MissSchedule",
                format!(
                    "Missed scheduled time to start a job: {}",
                    scheduled.strftime("%a, %d %b %Y %H:%M:%S %z")
                ),
            );
            return done(Some(next_schedule_duration(cronjob, now, &schedule)));
        }
    }
    let job_name = job_name(&cronjob.name_any(), scheduled);
    let last = cronjob
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0);
    if active(cronjob)
        .iter()
        .any(|r| r.name.as_deref() == Some(job_name.as_str()))
        || last == Some(scheduled)
    {
        return done(Some(next_schedule_duration(cronjob, now, &schedule)));
    }
    let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
    if policy == "Forbid" && !active(cronjob).is_empty() {
        ctx.events.normal(
            &*cronjob,
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is Forbid"
                .into(),
        );
        return done(Some(next_schedule_duration(cronjob, now, &schedule)));
    }
    if policy == "Replace" {
        for reference in active(cronjob).to_vec() {
            let name = reference.name.clone().unwrap_or_default();
            let job = match job_api.get(&name).await {
                Ok(job) => job,
                Err(e) => {
                    ctx.events
                        .warning(&*cronjob, "FailedGet", format!("Get job: {e}"));
                    return Err((update, e.into()));
                }
            };
            if !delete_job(ctx, cronjob, &job).await {
                let error = Error::invalid(format!(
                    "could not replace job {namespace}/{}",
                    job.name_any()
                ));
                return Err((update, error));
            }
            update = true;
        }
    }
    let request = job_from_template(cronjob, scheduled, &zone);
    let created = match job_api.create(&PostParams::default(), &request).await {
        Ok(job) => {
            ctx.events.normal(
                &*cronjob,
                "SuccessfulCreate",
                format!("Created job {}", job.name_any()),
            );
            job
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let job = job_api
                .get(&request.name_any())
                .await
                .map_err(|e| (update, e.into()))?;
            let ours = controller_of(&job.metadata)
                .is_some_and(|o| o.uid == cronjob.uid().unwrap_or_default());
            if !ours || in_active_list(cronjob, &job.uid().unwrap_or_default()) {
                return Ok(Outcome {
                    requeue: Some(next_schedule_duration(cronjob, now, &schedule)),
                    update_status: update,
                });
            }
            job
        }
        Err(e) => {
            ctx.events.warning(
                &*cronjob,
                "FailedCreate",
                format!("Error creating job: {e}"),
            );
            return Err((update, e.into()));
        }
    };
    let status = cronjob.status.get_or_insert_with(Default::default);
    status
        .active
        .get_or_insert_with(Vec::new)
        .push(job_reference(&created));
    status.last_schedule_time = Some(Time(scheduled));
    Ok(Outcome {
        requeue: Some(next_schedule_duration(cronjob, now, &schedule)),
        update_status: true,
    })
}

/// `<cronjob>-<scheduled time in minutes since the epoch>`.
pub fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    format!("{cronjob}-{}", scheduled.as_second().div_euclid(60))
}

/// The Job for `scheduled` (kcm's `getJobFromTemplate2`): the template's labels,
/// annotations and spec, the scheduled time as an RFC 3339 annotation in the CronJob's
/// time zone, controlled by the CronJob.
fn job_from_template(cronjob: &CronJob, scheduled: Timestamp, zone: &jiff::tz::TimeZone) -> Job {
    let template = cronjob
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(CRONJOB_SCHEDULED_TIMESTAMP.into(), rfc3339(scheduled, zone));
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(&cronjob.name_any(), scheduled)),
            namespace: cronjob.metadata.namespace.clone(),
            labels: meta.labels.filter(|l| !l.is_empty()),
            annotations: Some(annotations),
            owner_references: Some(vec![new_controller_ref(cronjob)]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// Go's `time.RFC3339` of `at` in `zone`: `Z` for a zero offset, `+hh:mm` otherwise.
fn rfc3339(at: Timestamp, zone: &jiff::tz::TimeZone) -> String {
    let zoned = at.to_zoned(zone.clone());
    if zoned.offset().seconds() == 0 {
        zoned.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    }
}

/// Deletes a Job of the CronJob (in the background, as kcm) and drops it from the active
/// list. Returns whether it was deleted.
async fn delete_job(ctx: &Ctx, cronjob: &mut CronJob, job: &Job) -> bool {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(&job.name_any(), &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => {
            ctx.events
                .warning(&*cronjob, "FailedDelete", format!("Deleted job: {e}"));
            return false;
        }
    }
    delete_from_active_list(cronjob, &job.uid().unwrap_or_default());
    ctx.events.normal(
        &*cronjob,
        "SuccessfulDelete",
        format!("Deleted job {}", job.name_any()),
    );
    true
}

/// Deletes the oldest finished Jobs beyond `successfulJobsHistoryLimit` and
/// `failedJobsHistoryLimit`. Returns whether the status changed.
async fn cleanup_finished_jobs(ctx: &Ctx, cronjob: &mut CronJob, jobs: &[Arc<Job>]) -> bool {
    let Some(spec) = cronjob.spec.clone() else {
        return false;
    };
    let mut update = false;
    for (type_, limit) in [
        ("Complete", spec.successful_jobs_history_limit),
        ("Failed", spec.failed_jobs_history_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut finished: Vec<&Arc<Job>> = jobs
            .iter()
            .filter(|j| finished_condition(j).is_some_and(|c| c.type_ == type_))
            .collect();
        let excess = finished
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(0));
        if excess == 0 {
            continue;
        }
        finished.sort_by(|a, b| {
            let start = |j: &Job| {
                j.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0)
            };
            match (start(a), start(b)) {
                (Some(x), Some(y)) if x != y => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                _ => a.name_any().cmp(&b.name_any()),
            }
        });
        for job in finished.into_iter().take(excess) {
            if delete_job(ctx, cronjob, job).await {
                update = true;
            }
        }
    }
    update
}

/// How many scheduled times were missed since the earliest time considered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Missed {
    None,
    Few,
    Many,
}

/// kcm's `mostRecentScheduleTime`: the earliest time considered (the last scheduled
/// time, else the CronJob's creation, moved up to the starting deadline if asked), the
/// most recent scheduled time at or before `now` after it, and how many were missed.
fn most_recent_schedule_time(
    cronjob: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
    with_deadline: bool,
) -> std::result::Result<(Timestamp, Option<Timestamp>, Missed), String> {
    let mut earliest = cronjob
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .or(cronjob.metadata.creation_timestamp.as_ref())
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    if with_deadline
        && let Some(deadline) = cronjob
            .spec
            .as_ref()
            .and_then(|s| s.starting_deadline_seconds)
        && let Ok(limit) = now.checked_sub(SignedDuration::from_secs(deadline))
        && limit > earliest
    {
        earliest = limit;
    }
    let too_close = || "time difference between two schedules is less than 1 second".to_string();
    let t1 = schedule.next(earliest).ok_or_else(too_close)?;
    let t2 = schedule.next(t1).ok_or_else(too_close)?;
    if now < t1 {
        return Ok((earliest, None, Missed::None));
    }
    if now < t2 {
        return Ok((earliest, Some(t1), Missed::None));
    }
    let between = t2
        .duration_since(t1)
        .round(jiff::Unit::Second)
        .map_or(0, |d| d.as_secs());
    if between < 1 {
        return Err(too_close());
    }
    let elapsed = now.duration_since(t1).as_secs();
    let missed = elapsed / between + 1;
    let from = t1
        .checked_add(SignedDuration::from_secs((missed - 2) * between))
        .unwrap_or(t1);
    let mut most_recent = None;
    let mut t = schedule.next(from);
    while let Some(at) = t.filter(|at| *at <= now) {
        most_recent = Some(at);
        t = schedule.next(at);
    }
    let missed = if missed > 100 {
        Missed::Many
    } else {
        Missed::Few
    };
    Ok((earliest, most_recent, missed))
}

/// How long until 100 ms past the next scheduled time (kcm's `nextScheduleTimeDuration`).
fn next_schedule_duration(cronjob: &CronJob, now: Timestamp, schedule: &Schedule) -> Duration {
    let from = match most_recent_schedule_time(cronjob, now, schedule, false) {
        Err(_) => now,
        Ok((_, Some(recent), _)) => recent,
        Ok((earliest, None, Missed::None)) => earliest,
        Ok((_, None, _)) => now,
    };
    let next = schedule.next(from).unwrap_or(now);
    let wait = Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO);
    wait + NEXT_SCHEDULE_DELTA
}

/// The scheduled time to start a Job for, if one is due (kcm's `nextScheduleTime`, with
/// its warning when too many were missed).
fn next_schedule_time(
    ctx: &Ctx,
    cronjob: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
) -> std::result::Result<Option<Timestamp>, String> {
    let (_, recent, missed) = most_recent_schedule_time(cronjob, now, schedule, true)?;
    let Some(recent) = recent.filter(|r| *r <= now) else {
        return Ok(None);
    };
    if missed == Missed::Many {
        ctx.events.warning(
            cronjob,
            "TooManyMissedTimes",
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
                .into(),
        );
    }
    Ok(Some(recent))
}
