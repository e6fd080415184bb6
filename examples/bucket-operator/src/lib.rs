//! The bucket operator: a `Bucket` custom resource (`buckets.example.konverge.dev`) stands
//! for a storage bucket in a cloud outside the cluster. The operator creates the bucket,
//! reports it in the status, and deletes it before the `Bucket` may go, behind a finalizer.
//!
//! This is the finalizer story, and the error-class story. An operator that lets the object
//! go before its external resource is deleted leaks the resource whenever the delete fails
//! once; an operator that never removes its finalizer leaves objects stuck Terminating; an
//! operator that retries every error the same way hammers the cloud with requests that can
//! never succeed. This one uses konverge-runtime's [`finalizer`]: the finalizer goes only
//! after the cleanup succeeded. Transient cloud errors are retried with per-object backoff,
//! an invalid region is a [`TerminalError`] that is reported and not retried.
//! [`Mode::ReleasesEarly`] is the broken twin, which removes the finalizer first.
//!
//! The operator says what it did to each Bucket in Events (kube's event [`Recorder`], as
//! [`REPORTER`]): `Normal` `Created` when the cloud bucket is made, `Warning` `CleanupFailed`
//! when deleting it fails, `Normal` `Deleted` when it is deleted. A Bucket that is gone while
//! the last Event about it is `CleanupFailed` is a leaked cloud bucket, and `konverge doctor`
//! reports it so: that is how the twin is caught on a live cluster.
//!
//! [`Cloud`] is the external system: in memory here, with the failure modes of a real one
//! (transient errors on demand, invalid regions refused); a real operator talks to its
//! cloud's SDK in its place.
//!
//! # Where to start
//!
//! [`Bucket`] is the resource; [`controller`] and [`reconcile`] the operator; `src/main.rs`
//! runs it; `tests/invariants.rs` proves it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use konverge_runtime::finalizer::{FinalizerError, FinalizerEvent, finalizer};
use konverge_runtime::status::{StatusError, patch_status_if_changed};
use konverge_runtime::watcher::Config;
use konverge_runtime::{Action, Controller, TerminalError};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The finalizer that keeps a Bucket until its cloud bucket is gone.
pub const FINALIZER: &str = "buckets.example.konverge.dev/cleanup";
/// The controller's name: in its Events' `reportingController`.
pub const REPORTER: &str = "bucket-operator";

/// What a Bucket asks for.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "example.konverge.dev",
    version = "v1",
    kind = "Bucket",
    namespaced,
    status = "BucketStatus"
)]
pub struct BucketSpec {
    /// Where the bucket lives.
    pub region: String,
}

/// What the operator reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BucketStatus {
    /// The generation this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The bucket exists in the cloud.
    pub ready: bool,
    /// The cloud's id for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Why it could not be made, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The cloud's errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// Try again later.
    #[error("the cloud is unavailable, try again")]
    Unavailable,
    /// The region does not exist: no retry helps.
    #[error("region {0:?} does not exist")]
    NoSuchRegion(String),
}

/// The external system: buckets by name, with failures on demand.
#[derive(Clone, Default)]
pub struct Cloud {
    inner: Arc<Mutex<CloudState>>,
}

#[derive(Default)]
struct CloudState {
    buckets: BTreeMap<String, String>,
    fail_next: usize,
    calls: usize,
}

/// The regions the cloud has.
pub const REGIONS: &[&str] = &["eu-1", "us-1"];

impl Cloud {
    fn state(&self) -> std::sync::MutexGuard<'_, CloudState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn call(&self) -> Result<std::sync::MutexGuard<'_, CloudState>, CloudError> {
        let mut state = self.state();
        state.calls += 1;
        if state.fail_next > 0 {
            state.fail_next -= 1;
            return Err(CloudError::Unavailable);
        }
        Ok(state)
    }

    /// Creates the bucket unless it exists (idempotent); returns its id.
    pub fn ensure(&self, name: &str, region: &str) -> Result<String, CloudError> {
        let mut state = self.call()?;
        if !REGIONS.contains(&region) {
            return Err(CloudError::NoSuchRegion(region.into()));
        }
        state.buckets.insert(name.into(), region.into());
        Ok(format!("{region}/{name}"))
    }

    /// Deletes the bucket (idempotent: a missing bucket is deleted).
    pub fn delete(&self, name: &str) -> Result<(), CloudError> {
        self.call()?.buckets.remove(name);
        Ok(())
    }

    /// The next `n` calls fail as unavailable.
    pub fn fail_next(&self, n: usize) {
        self.state().fail_next = n;
    }

    /// The buckets that exist, by name, with their regions.
    pub fn buckets(&self) -> BTreeMap<String, String> {
        self.state().buckets.clone()
    }

    /// How many calls were made.
    pub fn calls(&self) -> usize {
        self.state().calls
    }
}

/// How the operator behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The finalizer goes only after the cloud bucket is deleted.
    Correct,
    /// The broken twin: removes the finalizer, then deletes the cloud bucket; when that
    /// fails, the Bucket is gone and the cloud bucket leaks.
    ReleasesEarly,
}

/// What every reconcile gets.
pub struct Context {
    /// The cluster.
    pub client: Client,
    /// The cloud.
    pub cloud: Cloud,
    /// Correct, or the broken twin.
    pub mode: Mode,
    /// Publishes the Events about Buckets, as [`REPORTER`].
    pub recorder: Recorder,
}

impl Context {
    /// A context whose Events are published through `client` as [`REPORTER`].
    pub fn new(client: Client, cloud: Cloud, mode: Mode) -> Context {
        let reporter = Reporter {
            controller: REPORTER.into(),
            instance: None,
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            cloud,
            mode,
        }
    }

    /// Publishes an Event about `bucket`: what was tried (`action`) and how it went. Events
    /// are a report, not state: one that cannot be written is logged and the reconcile goes
    /// on.
    async fn tell(
        &self,
        bucket: &Bucket,
        type_: EventType,
        (action, reason): (&str, &str),
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &bucket.object_ref(&())).await {
            tracing::warn!(bucket = %bucket.name_any(), reason, %error, "could not publish an Event");
        }
    }

    /// Deletes `bucket`'s cloud bucket and says how that went.
    async fn delete_cloud_bucket(&self, bucket: &Bucket) -> Result<(), Error> {
        let name = bucket.name_any();
        match self.cloud.delete(&name) {
            Ok(()) => {
                let note = format!("deleted cloud bucket {name}");
                self.tell(bucket, EventType::Normal, ("Delete", "Deleted"), note)
                    .await;
                Ok(())
            }
            Err(error) => {
                let note = format!("deleting cloud bucket {name}: {error}");
                self.tell(
                    bucket,
                    EventType::Warning,
                    ("Delete", "CleanupFailed"),
                    note,
                )
                .await;
                Err(Error::Cloud(error))
            }
        }
    }
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cloud failed; retried with backoff.
    #[error("cloud: {0}")]
    Cloud(#[source] CloudError),
    /// The spec cannot work; reported in the status, not retried.
    #[error("invalid bucket: {0}")]
    Invalid(#[source] TerminalError),
    /// Writing the status failed.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The finalizer's bookkeeping failed.
    #[error(transparent)]
    Finalizer(#[from] Box<FinalizerError<Error>>),
    /// Talking to the API server failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// The controller: Buckets, on spec changes (the default predicate).
pub fn controller(client: &Client) -> Controller<Bucket> {
    Controller::new(Api::<Bucket>::all(client.clone()), Config::default()).named("bucket-operator")
}

/// Makes the cloud bucket and reports it, or deletes it before the Bucket may go.
pub async fn reconcile(bucket: Arc<Bucket>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<Bucket> =
        Api::namespaced(ctx.client.clone(), &bucket.namespace().unwrap_or_default());
    if ctx.mode == Mode::ReleasesEarly && bucket.metadata.deletion_timestamp.is_some() {
        // The mistake: let the object go first, then clean up.
        let release = json!({"metadata": {"finalizers": null}});
        api.patch(
            &bucket.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&release),
        )
        .await?;
        ctx.delete_cloud_bucket(&bucket).await?;
        return Ok(Action::await_change());
    }
    let outcome = finalizer(&api, FINALIZER, bucket, |event| async {
        match event {
            FinalizerEvent::Apply(bucket) => apply(&api, &bucket, &ctx).await,
            // The finalizer goes only if this succeeds.
            FinalizerEvent::Cleanup(bucket) => ctx
                .delete_cloud_bucket(&bucket)
                .await
                .map(|()| Action::await_change()),
        }
    })
    .await;
    match outcome {
        Ok(_) => Ok(Action::await_change()),
        // The reconcile's own error keeps its class (terminal stays terminal).
        Err(FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e)) => Err(e),
        Err(other) => Err(Error::Finalizer(Box::new(other))),
    }
}

async fn apply(api: &Api<Bucket>, bucket: &Bucket, ctx: &Context) -> Result<Action, Error> {
    let mut status = BucketStatus::default();
    let result = ctx.cloud.ensure(&bucket.name_any(), &bucket.spec.region);
    match &result {
        Ok(id) => {
            status.ready = true;
            status.id = Some(id.clone());
        }
        Err(CloudError::NoSuchRegion(_)) => {
            status.error = result.as_ref().err().map(ToString::to_string);
        }
        Err(CloudError::Unavailable) => return Err(Error::Cloud(CloudError::Unavailable)),
    }
    let was_ready = bucket.status.as_ref().is_some_and(|s| s.ready);
    let written = patch_status_if_changed(api, bucket, &status).await?;
    // Said once, when the Bucket first reports its cloud bucket (a resync writes nothing).
    if written.is_written()
        && !was_ready
        && let Some(id) = &status.id
    {
        let note = format!("created cloud bucket {id}");
        ctx.tell(bucket, EventType::Normal, ("Create", "Created"), note)
            .await;
    }
    match result {
        Err(e @ CloudError::NoSuchRegion(_)) => Err(Error::Invalid(TerminalError::new(e))),
        _ => Ok(Action::await_change()),
    }
}
