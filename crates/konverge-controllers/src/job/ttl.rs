//! The TTL-after-finished controller (kcm's `ttl-after-finished-controller`): deletes a
//! finished Job (and, in the foreground, its pods) `ttlSecondsAfterFinished` after it
//! finished, requeuing itself for exactly that moment.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use konverge_runtime::{Action, Manager, predicate};
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use kube::{Client, ResourceExt};

use super::finished_condition;
use crate::clock::Clock;
use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};
use crate::informers;

/// kcm's `ttl-after-finished-controller`.
pub const TTL_AFTER_FINISHED: Descriptor = Descriptor {
    name: "ttl-after-finished-controller",
    aliases: &["ttl-after-finished"],
    service_account: "ttl-after-finished-controller",
    add,
};

/// kcm's `--concurrent-ttl-after-finished-syncs` default.
const WORKERS: usize = 5;

struct Ctx {
    client: Client,
    clock: Clock,
}

fn add(manager: &mut Manager, setup: Setup) {
    let ctx = Arc::new(Ctx {
        client: setup.client,
        clock: setup.clock,
    });
    let controller = informers::controller::<Job>(manager)
        .named("ttl-after-finished-controller")
        .with_predicate(predicate::resource_version_changed())
        .concurrency(WORKERS);
    manager.add(controller, reconcile, ctx);
}

/// When the Job may be deleted: `None` when it is not finished, has no TTL or is being
/// deleted already.
fn expires_at(job: &Job) -> Result<Option<Timestamp>> {
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
        return Ok(None);
    };
    let Some(condition) = finished_condition(job) else {
        return Ok(None);
    };
    let finished = condition.last_transition_time.as_ref().ok_or_else(|| {
        Error::invalid(format!(
            "unable to find the time when the Job {}/{} finished",
            job.namespace().unwrap_or_default(),
            job.name_any()
        ))
    })?;
    Ok(finished
        .0
        .checked_add(SignedDuration::from_secs(i64::from(ttl)))
        .ok())
}

/// How long until `job` expires at `now` (`None`: it does not need deleting).
fn time_left(job: &Job, now: Timestamp) -> Result<Option<Duration>> {
    Ok(expires_at(job)?
        .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)))
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action> {
    match time_left(&job, ctx.clock.now())? {
        None => return Ok(Action::await_change()),
        Some(left) if !left.is_zero() => return Ok(Action::requeue(left)),
        Some(_) => {}
    }
    // The cached TTL may be stale: decide on the Job as the server has it.
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let Some(fresh) = api.get_opt(&job.name_any()).await? else {
        return Ok(Action::await_change());
    };
    match time_left(&fresh, ctx.clock.now())? {
        None => return Ok(Action::await_change()),
        Some(left) if !left.is_zero() => return Ok(Action::requeue(left)),
        Some(_) => {}
    }
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(Preconditions {
            uid: fresh.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&fresh.name_any(), &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}
