//! What a reconcile returns and how its errors are treated.
//!
//! A reconciler returns an [`Action`] (done, or look again after a delay) or an error. Errors
//! are sorted into an [`ErrorClass`] by [`classify`], and each class has its own policy:
//!
//! | class | what happens |
//! |---|---|
//! | [`ErrorClass::NotFound`] | done: the object (or what it needed) is gone; a new event will come |
//! | [`ErrorClass::Conflict`] | requeued at once: the cache is about to catch up with the newer version; a conflict again right after backs off as a retry does (the cache is behind, and retrying at once would spin) |
//! | [`ErrorClass::Terminal`] | not retried (counted in `controller_runtime_terminal_reconcile_errors_total`) |
//! | [`ErrorClass::Retry`] | retried with per-object exponential backoff and jitter, or after the server's `Retry-After` when it sent one ([`retry_after`]) |
//!
//! A controller's [`error_policy`](crate::Controller::error_policy) may override the class
//! of any error, or requeue after a fixed delay ([`OnError`]).
//!
//! Inside a reconcile, [`current`] gives its [`ReconcileScope`]: the object key, a reconcile
//! id (also on the tracing span), the deadline and a cancellation token that fires when the
//! deadline passes or the manager shuts down.

use std::error::Error as StdError;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::key::ObjectKey;

/// What to do after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Nothing more to do until the object (or something it owns or watches) changes.
    pub fn await_change() -> Action {
        Action {
            requeue_after: None,
        }
    }

    /// Look at the object again after `delay`, even if nothing changes (for polling external
    /// state). The delay is a floor: an event can trigger a reconcile sooner.
    pub fn requeue(delay: Duration) -> Action {
        Action {
            requeue_after: Some(delay),
        }
    }

    /// The requested delay, if any.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// How an error is handled (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// The object or a dependency is gone: stop.
    NotFound,
    /// A write lost an optimistic-concurrency race: retry at once.
    Conflict,
    /// Retrying cannot help: stop, and count it.
    Terminal,
    /// Retry with backoff.
    Retry,
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an error policy ([`Controller::error_policy`](crate::Controller::error_policy))
/// decides about a failed reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Handle it as this class (see the module docs); `OnError::Class(class)` with the class
    /// the policy was given is the default.
    Class(ErrorClass),
    /// Look at the object again after this delay, whatever the class; no backoff grows.
    Requeue(Duration),
}

impl From<ErrorClass> for OnError {
    fn from(class: ErrorClass) -> OnError {
        OnError::Class(class)
    }
}

impl From<Action> for OnError {
    /// kube-runtime's error policies return an [`Action`]: `Action::requeue(d)` becomes
    /// [`OnError::Requeue`], `Action::await_change()` waits for the next change (as
    /// [`ErrorClass::NotFound`] does).
    fn from(action: Action) -> OnError {
        match action.requeue_after() {
            Some(delay) => OnError::Requeue(delay),
            None => OnError::Class(ErrorClass::NotFound),
        }
    }
}

impl ErrorClass {
    /// The label used in logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorClass::NotFound => "not_found",
            ErrorClass::Conflict => "conflict",
            ErrorClass::Terminal => "terminal",
            ErrorClass::Retry => "retry",
        }
    }
}

/// Marks an error as terminal: the reconcile is not retried until the object changes.
///
/// Return it directly, or keep it in your error's `source()` chain (for example as a
/// `#[source]` or `#[from]` field of a `thiserror` variant).
#[derive(Debug)]
pub struct TerminalError(Box<dyn StdError + Send + Sync>);

impl TerminalError {
    /// Wraps `error` as terminal.
    pub fn new(error: impl Into<Box<dyn StdError + Send + Sync>>) -> TerminalError {
        TerminalError(error.into())
    }
}

impl fmt::Display for TerminalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "terminal: {}", self.0)
    }
}

impl StdError for TerminalError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(self.0.as_ref())
    }
}

/// Classifies an error by walking its `source()` chain: a [`TerminalError`] anywhere makes it
/// terminal; otherwise the first `kube::Error` answer decides (404 → NotFound, 409 Conflict →
/// Conflict); everything else is retried.
pub fn classify(error: &(dyn StdError + 'static)) -> ErrorClass {
    let mut current = Some(error);
    let mut class = None;
    while let Some(e) = current {
        if e.is::<TerminalError>() {
            return ErrorClass::Terminal;
        }
        if class.is_none()
            && let Some(kube::Error::Api(status)) = e.downcast_ref::<kube::Error>()
        {
            class = match (status.code, status.reason.as_str()) {
                (404, _) => Some(ErrorClass::NotFound),
                (409, "Conflict") => Some(ErrorClass::Conflict),
                _ => Some(ErrorClass::Retry),
            };
        }
        current = e.source();
    }
    class.unwrap_or(ErrorClass::Retry)
}

/// How long the server asked the client to wait before trying again (`Retry-After`, as the
/// `retryAfterSeconds` of a 429 or 5xx `Status`), found by walking the error's `source()`
/// chain to the first `kube::Error` answer.
pub fn retry_after(error: &(dyn StdError + 'static)) -> Option<Duration> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(kube::Error::Api(status)) = e.downcast_ref::<kube::Error>() {
            return status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s)));
        }
        current = e.source();
    }
    None
}

/// The running reconcile, as seen from inside it.
#[derive(Clone, Debug)]
pub struct ReconcileScope {
    /// The object being reconciled.
    pub key: ObjectKey,
    /// A unique id for this reconcile (also on its tracing span).
    pub id: String,
    /// When the reconcile is cancelled.
    pub deadline: Instant,
    /// Fires at the deadline or on shutdown. Long operations should `select!` on it.
    pub cancellation: CancellationToken,
    /// The Rust type of the controller's objects, to tell its own object from others.
    pub(crate) primary: std::any::TypeId,
    /// Their kind (what tells one dynamic kind from another).
    pub(crate) kind: String,
    /// The newest resourceVersion of the reconciled object that this reconcile wrote.
    pub(crate) written: Arc<Mutex<Option<u64>>>,
}

/// Records that the running reconcile wrote its own object, as `obj` came back from the
/// server: the controller will not reconcile that object again from a cache older than this
/// write (it waits, a few seconds at most, for its cache to catch up). Without it, a
/// reconcile that starts before the cache has seen the previous one's write decides on the
/// old object — writes again, fails with 409, retries at once, and so on until the cache
/// catches up. konverge-runtime's status and finalizer helpers call it; call it after your
/// own writes of the reconciled object. Outside a reconcile, or for other objects, it does
/// nothing.
pub fn wrote<R: kube::Resource + 'static>(obj: &R) {
    let _ = SCOPE.try_with(|scope| {
        let meta = obj.meta();
        // A DynamicObject's type is the same for every kind: compare the kind it came with.
        let dynamic_kind = (obj as &dyn std::any::Any)
            .downcast_ref::<kube::api::DynamicObject>()
            .and_then(|o| o.types.as_ref())
            .map(|t| t.kind.as_str());
        let same = std::any::TypeId::of::<R>() == scope.primary
            && dynamic_kind.is_none_or(|kind| kind == scope.kind)
            && meta.name.as_deref() == Some(scope.key.name.as_str())
            && meta.namespace == scope.key.namespace;
        let version = meta
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok());
        if let (true, Some(version)) = (same, version) {
            let mut written = scope.written.lock().unwrap_or_else(PoisonError::into_inner);
            *written = Some(written.map_or(version, |w| w.max(version)));
        }
    });
}

tokio::task_local! {
    pub(crate) static SCOPE: ReconcileScope;
}

/// The scope of the reconcile running on this task, if any.
pub fn current() -> Option<ReconcileScope> {
    SCOPE.try_with(Clone::clone).ok()
}

/// What became of one reconcile (shown to middleware).
#[derive(Debug)]
pub enum Outcome {
    /// The reconciler returned this action.
    Done(Action),
    /// The reconciler returned an error of this class.
    Failed {
        /// Its class.
        class: ErrorClass,
        /// Its message.
        message: String,
    },
    /// The reconciler panicked.
    Panicked(String),
    /// The deadline passed.
    TimedOut,
    /// A middleware stopped it before it ran.
    Stopped,
}

/// Facts about a reconcile, for middleware.
#[derive(Clone, Debug)]
pub struct ReconcileInfo {
    /// The controller's name.
    pub controller: String,
    /// The object.
    pub key: ObjectKey,
    /// The reconcile's id.
    pub id: String,
    /// Failed attempts since the last success.
    pub retries: u32,
}

/// Why a middleware stopped a reconcile, and what to do instead.
#[derive(Debug)]
pub enum Stop {
    /// Skip this reconcile; nothing is retried.
    Skip,
    /// Skip it now; look again after this delay.
    Requeue(Duration),
    /// Treat it as a failed reconcile (retried with backoff).
    Fail(String),
}

/// Hooks around every reconcile: logging, metrics, validation. `before` hooks run in the order
/// added and any of them may stop the chain; `after` hooks run in reverse order.
pub trait Middleware<K>: Send + Sync {
    /// Runs before the reconciler; an `Err` stops the reconcile.
    fn before(&self, _obj: &K, _info: &ReconcileInfo) -> Result<(), Stop> {
        Ok(())
    }

    /// Runs after the reconcile (or after a `before` hook stopped it).
    fn after(&self, _obj: &K, _info: &ReconcileInfo, _outcome: &Outcome) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.into(),
            ..Status::default()
        }))
    }

    #[derive(Debug, thiserror::Error)]
    enum AppError {
        #[error("talking to the API: {0}")]
        Kube(#[source] kube::Error),
        #[error("bad spec")]
        Invalid(#[source] TerminalError),
        #[error("flaky")]
        Flaky,
    }

    #[test]
    fn retry_after_comes_from_the_status_details() {
        let mut status = Status {
            code: 429,
            reason: "TooManyRequests".into(),
            ..Status::default()
        };
        assert_eq!(
            retry_after(&kube::Error::Api(Box::new(status.clone()))),
            None
        );
        status.details =
            Some(serde_json::from_value(serde_json::json!({"retryAfterSeconds": 7})).unwrap());
        let error = AppError::Kube(kube::Error::Api(Box::new(status)));
        assert_eq!(retry_after(&error), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&AppError::Flaky), None);
    }

    #[test]
    fn classes_by_chain() {
        assert_eq!(classify(&api_error(404, "NotFound")), ErrorClass::NotFound);
        assert_eq!(classify(&api_error(409, "Conflict")), ErrorClass::Conflict);
        assert_eq!(
            classify(&api_error(409, "AlreadyExists")),
            ErrorClass::Retry
        );
        assert_eq!(
            classify(&api_error(500, "InternalError")),
            ErrorClass::Retry
        );
        assert_eq!(
            classify(&AppError::Kube(api_error(409, "Conflict"))),
            ErrorClass::Conflict
        );
        assert_eq!(
            classify(&AppError::Invalid(TerminalError::new(
                "replicas must be positive"
            ))),
            ErrorClass::Terminal
        );
        assert_eq!(classify(&AppError::Flaky), ErrorClass::Retry);
        assert_eq!(
            classify(&TerminalError::new(api_error(404, "NotFound"))),
            ErrorClass::Terminal,
            "terminal wins over what it wraps"
        );
    }
}
