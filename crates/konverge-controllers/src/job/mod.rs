//! kcm's batch controllers: the Job controller ([`JOB`]), the CronJob controller
//! ([`CRONJOB`]) and the TTL-after-finished controller ([`TTL_AFTER_FINISHED`]).
//!
//! - [`controller`]: Jobs run their pods to completion (kcm's `pkg/controller/job`), with
//!   the pieces it is made of: [`indexed`] (completion indexes and their interval strings,
//!   success policies), [`failure_policy`] (pod failure policies) and [`backoff`] (the delay
//!   before a failed pod is replaced).
//! - [`cronjob`]: CronJobs create Jobs on a [`schedule`] (kcm's `pkg/controller/cronjob`).
//! - [`ttl`]: finished Jobs are deleted `ttlSecondsAfterFinished` after they finished (kcm's
//!   `pkg/controller/ttlafterfinished`).

pub mod backoff;
pub mod controller;
pub mod cronjob;
pub mod failure_policy;
pub mod indexed;
pub mod schedule;
pub mod ttl;

use k8s_openapi::api::batch::v1::{Job, JobCondition};

pub use controller::JOB;
pub use cronjob::CRONJOB;
pub use ttl::TTL_AFTER_FINISHED;

/// The finalizer that keeps a Job's pods until the Job controller has counted them.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The annotation (and label) holding an Indexed Job pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// How many failures of its index a pod's predecessors counted (`backoffLimitPerIndex`).
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// How many failures of its index the pod failure policy ignored.
pub const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
/// The annotation a CronJob puts on its Jobs: the time they were scheduled for.
pub const CRONJOB_SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// `spec.managedBy` of the Jobs this controller manages (and of Jobs that do not say).
pub const JOB_CONTROLLER_NAME: &str = "kubernetes.io/job-controller";

/// The Job's `Complete` or `Failed` condition, if it is True (kcm's `FinishedCondition`).
pub fn finished_condition(job: &Job) -> Option<&JobCondition> {
    conditions(job)
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// The Job is `Complete` or `Failed` (kcm's `IsJobFinished`).
pub fn is_finished(job: &Job) -> bool {
    finished_condition(job).is_some()
}

/// The Job is `Complete` (kcm's `IsJobSucceeded`).
pub fn is_succeeded(job: &Job) -> bool {
    conditions(job)
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True")
}

fn conditions(job: &Job) -> &[JobCondition] {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}
