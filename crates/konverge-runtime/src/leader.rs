//! Leader election on a `coordination.k8s.io/v1` Lease.
//!
//! Several replicas of a controller run at once; only the one holding the Lease runs its
//! controllers. The protocol is client-go's `leaderelection` package:
//!
//! * **Acquire.** A candidate reads the Lease and creates it if it is absent. A Lease held by
//!   another identity is taken over only once it has *expired*, and expiry is judged on this
//!   process's own monotonic clock: the moment this process last saw the record change, plus the
//!   record's `leaseDurationSeconds`. Remote timestamps (`renewTime`) are never compared with
//!   the local wall clock, so clock skew between machines cannot cause two leaders. A takeover
//!   is a replace carrying the `resourceVersion` that was read; if another candidate wrote first
//!   the server answers 409 Conflict and this candidate tries again later. `leaseTransitions` is
//!   incremented whenever the holder changes. Candidates retry every `retry_period` plus jitter.
//! * **Renew.** The leader renews every `retry_period`. If no renewal succeeds within
//!   `renew_deadline` of the previous one, leadership is lost. It is also lost at once when the
//!   Lease is seen held by another identity. After a loss the elector becomes a candidate again.
//! * **Release.** When the shutdown token is cancelled, a leader clears `holderIdentity` and sets
//!   `leaseDurationSeconds` to 1, so a successor takes over on its next attempt instead of
//!   waiting for the lease to expire.
//!
//! Start with [`LeaseConfig::new`], then [`LeaderElection::new`] and [`LeaderElection::spawn`].
//! The returned [`LeaderHandle`] reports leadership through a `watch` channel: start controllers
//! when it turns `true`, stop them when it turns `false`.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), konverge_runtime::leader::Error> {
//! use konverge_runtime::leader::{LeaderElection, LeaseConfig};
//! use tokio_util::sync::CancellationToken;
//!
//! let shutdown = CancellationToken::new();
//! let election = LeaderElection::new(client, LeaseConfig::new("kube-system", "my-operator"))?;
//! let handle = election.spawn(shutdown.clone());
//! let mut leading = handle.leading();
//! while leading.changed().await.is_ok() {
//!     if *leading.borrow_and_update() {
//!         // start controllers
//!     } else {
//!         // stop controllers
//!     }
//! }
//! // Stop the controllers first, then cancel: the release lets a successor start at once.
//! shutdown.cancel();
//! handle.stopped().await?;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How far the wait between acquire attempts may stretch beyond `retry_period`, as a fraction of
/// it (client-go's `JitterFactor`). The renew deadline must leave room for one jittered retry.
const JITTER_FACTOR: f64 = 1.2;

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Lease name is empty.
    #[error("the lease name must not be empty")]
    EmptyLeaseName,

    /// The Lease namespace is empty.
    #[error("the lease namespace must not be empty")]
    EmptyLeaseNamespace,

    /// The identity is empty; it would be indistinguishable from a released Lease.
    #[error("the leader election identity must not be empty")]
    EmptyIdentity,

    /// The lease duration is not a whole number of seconds between 1 and `i32::MAX`; the Lease
    /// stores it as `leaseDurationSeconds`, so anything else would be rounded on the wire.
    #[error(
        "lease_duration must be a whole number of seconds, at least 1 s (got {lease_duration:?})"
    )]
    InvalidLeaseDuration {
        /// The configured lease duration.
        lease_duration: Duration,
    },

    /// The renew deadline is not shorter than the lease duration, so a leader could still
    /// believe it leads after others consider its lease expired.
    #[error(
        "renew_deadline ({renew_deadline:?}) must be shorter than lease_duration ({lease_duration:?})"
    )]
    RenewDeadlineNotBelowLeaseDuration {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured lease duration.
        lease_duration: Duration,
    },

    /// The renew deadline leaves no room for a retry: it must exceed `retry_period` times the
    /// jitter factor (1.2).
    #[error(
        "renew_deadline ({renew_deadline:?}) must be longer than 1.2 × retry_period ({retry_period:?})"
    )]
    RenewDeadlineTooShortForRetry {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured retry period.
        retry_period: Duration,
    },

    /// The retry period is zero.
    #[error("retry_period must be greater than zero")]
    ZeroRetryPeriod,

    /// A request to the API server about the Lease failed.
    #[error("{verb} lease {lease}")]
    Kube {
        /// What was being done: `get`, `create`, `replace` or `release`.
        verb: &'static str,
        /// The Lease, as `namespace/name`.
        lease: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },

    /// A request to the API server about the Lease did not answer in time.
    #[error("{verb} lease {lease}: no answer within {after:?}")]
    Timeout {
        /// What was being done: `acquire`, `renew` or `release`.
        verb: &'static str,
        /// The Lease, as `namespace/name`.
        lease: String,
        /// How long the request was given.
        after: Duration,
    },

    /// The election task panicked.
    #[error("the leader election task panicked")]
    Panicked(#[source] JoinError),
}

/// Result of leader election operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which Lease to compete for, under which identity, and the timing of the protocol.
///
/// The defaults are client-go's: a 15 s lease, a 10 s renew deadline and a 2 s retry period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's identity, written to `holderIdentity`. It must be unique among the
    /// candidates: two processes sharing an identity would both believe they lead.
    pub identity: String,
    /// How long a candidate waits, after it last saw the record change, before it may take the
    /// Lease over. A whole number of seconds.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership. Shorter than
    /// `lease_duration`, so the leader steps down before anyone may take over.
    pub renew_deadline: Duration,
    /// Interval between acquire attempts (plus jitter) and between renewals.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's default lease duration.
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
    /// client-go's default renew deadline.
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
    /// client-go's default retry period.
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

    /// A configuration for the Lease `namespace/name` with the default timing and a fresh
    /// [`default_identity`].
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: default_identity(),
            lease_duration: Self::DEFAULT_LEASE_DURATION,
            renew_deadline: Self::DEFAULT_RENEW_DEADLINE,
            retry_period: Self::DEFAULT_RETRY_PERIOD,
        }
    }

    /// Replaces the identity.
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// Replaces the lease duration.
    pub fn with_lease_duration(mut self, lease_duration: Duration) -> Self {
        self.lease_duration = lease_duration;
        self
    }

    /// Replaces the renew deadline.
    pub fn with_renew_deadline(mut self, renew_deadline: Duration) -> Self {
        self.renew_deadline = renew_deadline;
        self
    }

    /// Replaces the retry period.
    pub fn with_retry_period(mut self, retry_period: Duration) -> Self {
        self.retry_period = retry_period;
        self
    }

    /// Checks that the configuration is usable: non-empty names and identity, a lease duration
    /// of whole seconds, `renew_deadline < lease_duration` and
    /// `renew_deadline > 1.2 × retry_period > 0`.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(Error::EmptyLeaseName);
        }
        if self.namespace.is_empty() {
            return Err(Error::EmptyLeaseNamespace);
        }
        if self.identity.is_empty() {
            return Err(Error::EmptyIdentity);
        }
        lease_duration_seconds(self.lease_duration)?;
        if self.retry_period.is_zero() {
            return Err(Error::ZeroRetryPeriod);
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(Error::RenewDeadlineNotBelowLeaseDuration {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(Error::RenewDeadlineTooShortForRetry {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }

    fn lease_key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The identity client-go tools use by default: the host name, `_`, and a random suffix so that
/// two processes on one host (or a restarted process) never share an identity.
pub fn default_identity() -> String {
    format!("{}_{:016x}", host_name(), rand::random::<u64>())
}

/// This machine's name, as kube's leader election puts it first in an identity: `HOSTNAME`
/// (in a Pod, the Pod's name), else the kernel's host name, else `localhost`.
pub fn host_name() -> String {
    // In a Pod, HOSTNAME is the Pod name; elsewhere fall back to the kernel's host name.
    let from_env = std::env::var("HOSTNAME").ok();
    let from_kernel = || std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let from_etc = || std::fs::read_to_string("/etc/hostname").ok();
    from_env
        .or_else(from_kernel)
        .or_else(from_etc)
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

fn lease_duration_seconds(lease_duration: Duration) -> Result<i32> {
    let invalid = || Error::InvalidLeaseDuration { lease_duration };
    if lease_duration.subsec_nanos() != 0 {
        return Err(invalid());
    }
    match i32::try_from(lease_duration.as_secs()) {
        Ok(seconds) if seconds >= 1 => Ok(seconds),
        _ => Err(invalid()),
    }
}

/// A candidate for leadership of one Lease, ready to be [spawned](LeaderElection::spawn).
pub struct LeaderElection {
    api: Api<Lease>,
    config: LeaseConfig,
    lease_duration_seconds: i32,
}

impl std::fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElection")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl LeaderElection {
    /// A candidate for the Lease described by `config`, talking to the API server through
    /// `client`. Fails if the configuration is invalid (see [`LeaseConfig::validate`]).
    pub fn new(client: Client, config: LeaseConfig) -> Result<Self> {
        config.validate()?;
        let lease_duration_seconds = lease_duration_seconds(config.lease_duration)?;
        Ok(LeaderElection {
            api: Api::namespaced(client, &config.namespace),
            config,
            lease_duration_seconds,
        })
    }

    /// The configuration this candidate runs with.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Starts competing for the Lease on a new task, until `shutdown` is cancelled; a leader
    /// then releases the Lease before the task ends.
    ///
    /// Must be called within a Tokio runtime.
    pub fn spawn(self, shutdown: CancellationToken) -> LeaderHandle {
        let (leading_tx, leading_rx) = watch::channel(false);
        let identity = self.config.identity.clone();
        let elector = Elector {
            lease_key: self.config.lease_key(),
            api: self.api,
            config: self.config,
            lease_duration_seconds: self.lease_duration_seconds,
            lease: None,
            observed: None,
            reported_holder: None,
            leading: leading_tx,
        };
        let task = tokio::spawn(elector.run(shutdown));
        LeaderHandle {
            identity,
            leading: leading_rx,
            task,
        }
    }
}

/// A running election: reports whether this process leads, and joins the election task.
///
/// Dropping the handle does not stop the election; cancel the shutdown token for that.
#[derive(Debug)]
pub struct LeaderHandle {
    identity: String,
    leading: watch::Receiver<bool>,
    task: JoinHandle<Result<()>>,
}

impl LeaderHandle {
    /// The identity this process competes under (the Lease's `holderIdentity` while it leads).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this process currently leads.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// A receiver that turns `true` when this process becomes leader and `false` when it loses
    /// or gives up leadership. It may turn `true` again later: after a loss the elector competes
    /// again.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Stops the election at once, without releasing the Lease, as if the process had died:
    /// a successor must wait for the lease to expire. Prefer cancelling the shutdown token.
    pub fn abort(&self) {
        self.task.abort();
    }

    /// Waits until the election task has ended: after the shutdown token was cancelled and, if
    /// this process led, the Lease was released (or the release failed, which is returned), or
    /// after [`abort`](Self::abort).
    pub async fn stopped(self) -> Result<()> {
        match self.task.await {
            Ok(result) => result,
            Err(error) if error.is_cancelled() => Ok(()),
            Err(error) => Err(Error::Panicked(error)),
        }
    }
}

/// The Lease record as this process last saw it, and when — on the local monotonic clock — it
/// last saw it change. Expiry is judged from that moment, never from the record's timestamps.
#[derive(Clone, Debug)]
struct Observed {
    spec: LeaseSpec,
    changed_at: Instant,
}

impl Observed {
    /// Records `spec` seen at `now`; the observation time moves only if the record changed.
    fn observe(previous: Option<Observed>, spec: LeaseSpec, now: Instant) -> Observed {
        match previous {
            Some(previous) if previous.spec == spec => previous,
            _ => Observed {
                spec,
                changed_at: now,
            },
        }
    }

    /// The holder, if any; client-go writes an empty string on release, konverge clears it.
    fn holder(&self) -> Option<&str> {
        self.spec
            .holder_identity
            .as_deref()
            .filter(|holder| !holder.is_empty())
    }

    /// When the lease expires for this observer. The record's own duration counts (it is what
    /// the holder promised); a record without one is given `fallback`.
    fn expires_at(&self, fallback: Duration) -> Instant {
        let duration = match self.spec.lease_duration_seconds {
            Some(seconds) if seconds > 0 => Duration::from_secs(seconds.unsigned_abs().into()),
            _ => fallback,
        };
        self.changed_at + duration
    }

    /// The identity that holds an unexpired lease at `now`, unless that is `identity` itself.
    fn other_holder(&self, identity: &str, now: Instant, fallback: Duration) -> Option<&str> {
        self.holder()
            .filter(|holder| *holder != identity && now < self.expires_at(fallback))
    }
}

/// The record `identity` writes to acquire or renew a Lease whose current record is `old`.
fn acquired_spec(
    old: &LeaseSpec,
    identity: &str,
    duration_seconds: i32,
    now: Timestamp,
) -> LeaseSpec {
    let renewing = old.holder_identity.as_deref() == Some(identity);
    let transitions = old.lease_transitions.unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(duration_seconds),
        acquire_time: match (&old.acquire_time, renewing) {
            (Some(acquired), true) => Some(acquired.clone()),
            _ => Some(MicroTime(now)),
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if renewing {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..old.clone()
    }
}

/// The record a leader writes to give the Lease up: no holder and a 1 s duration, so that
/// candidates running older protocols also take over at once.
fn released_spec(old: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: old.lease_transitions,
        ..old.clone()
    }
}

/// The wait before the next acquire attempt: `retry_period` stretched by up to 120 %, so that
/// candidates started together spread out.
fn jittered(retry_period: Duration) -> Duration {
    retry_period + retry_period.mul_f64(JITTER_FACTOR * rand::random::<f64>())
}

/// The outcome of one attempt to acquire or renew.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// This process holds the Lease now.
    Holding,
    /// Another identity holds an unexpired lease.
    HeldBy(String),
    /// Another writer got there first (409); the next attempt reads the new record.
    Conflict,
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// The election task's state. Only this task writes it; the outside sees `leading`.
struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    lease_key: String,
    lease_duration_seconds: i32,
    /// The Lease object last read or written: its resourceVersion guards the next write.
    lease: Option<Lease>,
    observed: Option<Observed>,
    /// The other holder last logged, so that a change of leader is logged once.
    reported_holder: Option<String>,
    leading: watch::Sender<bool>,
}

impl Elector {
    async fn run(mut self, shutdown: CancellationToken) -> Result<()> {
        loop {
            let Some(acquired_at) = self.acquire(&shutdown).await else {
                // A leader that lost its lease to a renew timeout may still be named in it.
                return self.release().await;
            };
            if shutdown.is_cancelled() {
                return self.release().await;
            }
            tracing::info!(lease = %self.lease_key, identity = %self.config.identity, "acquired leadership");
            self.set_leading(true);
            if self.renew(&shutdown, acquired_at).await {
                tracing::info!(lease = %self.lease_key, identity = %self.config.identity, "stopping leading: shutting down");
                self.set_leading(false);
                return self.release().await;
            }
            self.set_leading(false);
        }
    }

    /// Tries until the Lease is held or `shutdown` is cancelled. Returns when the successful
    /// attempt started, or `None` on shutdown.
    async fn acquire(&mut self, shutdown: &CancellationToken) -> Option<Instant> {
        loop {
            if shutdown.is_cancelled() {
                return None;
            }
            let started = Instant::now();
            let deadline = started + self.config.renew_deadline;
            match self.attempt(false, "acquire", deadline).await {
                Ok(Attempt::Holding) => return Some(started),
                Ok(Attempt::HeldBy(holder)) => {
                    if self.reported_holder.as_deref() != Some(holder.as_str()) {
                        tracing::info!(lease = %self.lease_key, identity = %self.config.identity, holder = %holder, "lease held by another candidate");
                        self.reported_holder = Some(holder);
                    }
                }
                Ok(Attempt::Conflict) => {
                    tracing::debug!(lease = %self.lease_key, "another candidate wrote the lease first");
                }
                Err(error) => {
                    tracing::warn!(lease = %self.lease_key, identity = %self.config.identity, error = %error, "failed to acquire lease");
                }
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(jittered(self.config.retry_period)) => {}
            }
        }
    }

    /// Renews while leading. Returns `true` on shutdown, `false` once leadership is lost.
    async fn renew(&mut self, shutdown: &CancellationToken, mut renewed_at: Instant) -> bool {
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return true,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
            let started = Instant::now();
            let deadline = renewed_at + self.config.renew_deadline;
            let outcome = if started >= deadline {
                Err(Error::Timeout {
                    verb: "renew",
                    lease: self.lease_key.clone(),
                    after: self.config.renew_deadline,
                })
            } else {
                self.attempt(true, "renew", deadline).await
            };
            match outcome {
                Ok(Attempt::Holding) => renewed_at = started,
                Ok(Attempt::HeldBy(holder)) => {
                    tracing::info!(lease = %self.lease_key, identity = %self.config.identity, holder = %holder, "lost leadership: lease taken by another candidate");
                    self.reported_holder = Some(holder);
                    return false;
                }
                Ok(Attempt::Conflict) => {
                    tracing::debug!(lease = %self.lease_key, "lease changed while renewing; retrying");
                }
                Err(error @ Error::Timeout { .. }) => {
                    tracing::info!(lease = %self.lease_key, identity = %self.config.identity, error = %error, "lost leadership: renew deadline passed");
                    return false;
                }
                Err(error) => {
                    tracing::warn!(lease = %self.lease_key, identity = %self.config.identity, error = %error, "failed to renew lease");
                }
            }
            if Instant::now() >= renewed_at + self.config.renew_deadline {
                tracing::info!(lease = %self.lease_key, identity = %self.config.identity, "lost leadership: renew deadline passed");
                return false;
            }
        }
    }

    /// One acquire-or-renew attempt, abandoned at `deadline`.
    async fn attempt(
        &mut self,
        leading: bool,
        verb: &'static str,
        deadline: Instant,
    ) -> Result<Attempt> {
        let given = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout_at(deadline, self.try_acquire_or_renew(leading)).await {
            Ok(outcome) => outcome,
            Err(_elapsed) => Err(Error::Timeout {
                verb,
                lease: self.lease_key.clone(),
                after: given,
            }),
        }
    }

    async fn try_acquire_or_renew(&mut self, leading: bool) -> Result<Attempt> {
        let identity = self.config.identity.clone();
        // A leader writes over the record it wrote last without reading first; a conflict means
        // the record changed behind its back, and the read below finds out how.
        if leading && let Some(lease) = self.lease.clone() {
            let old = lease.spec.clone().unwrap_or_default();
            if old.holder_identity.as_deref() == Some(identity.as_str()) {
                let spec = acquired_spec(
                    &old,
                    &identity,
                    self.lease_duration_seconds,
                    Timestamp::now(),
                );
                match self.replace(lease, spec).await {
                    Ok(()) => return Ok(Attempt::Holding),
                    Err(Error::Kube { source, .. }) if is_conflict(&source) => {}
                    Err(error) => return Err(error),
                }
            }
        }

        let Some(lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|source| self.kube_error("get", source))?
        else {
            return self.create().await;
        };
        let now = Instant::now();
        let old = lease.spec.clone().unwrap_or_default();
        let observed = Observed::observe(self.observed.take(), old.clone(), now);
        let other = observed
            .other_holder(&identity, now, self.config.lease_duration)
            .map(str::to_owned);
        self.observed = Some(observed);
        self.lease = Some(lease.clone());
        if let Some(holder) = other {
            return Ok(Attempt::HeldBy(holder));
        }

        let spec = acquired_spec(
            &old,
            &identity,
            self.lease_duration_seconds,
            Timestamp::now(),
        );
        match self.replace(lease, spec).await {
            Ok(()) => Ok(Attempt::Holding),
            Err(Error::Kube { source, .. }) if is_conflict(&source) => Ok(Attempt::Conflict),
            Err(error) => Err(error),
        }
    }

    async fn create(&mut self) -> Result<Attempt> {
        let now = Timestamp::now();
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.lease_duration_seconds),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                self.record(created);
                Ok(Attempt::Holding)
            }
            // AlreadyExists: another candidate created it between our read and our create.
            Err(source) if is_conflict(&source) => Ok(Attempt::Conflict),
            Err(source) => Err(self.kube_error("create", source)),
        }
    }

    /// Writes `spec` over `lease`, guarded by the resourceVersion `lease` was read at.
    async fn replace(&mut self, mut lease: Lease, spec: LeaseSpec) -> Result<()> {
        lease.spec = Some(spec);
        let written = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(|source| self.kube_error("replace", source))?;
        self.record(written);
        Ok(())
    }

    /// Remembers a Lease this process wrote: it has seen its own write change the record.
    fn record(&mut self, lease: Lease) {
        let spec = lease.spec.clone().unwrap_or_default();
        self.observed = Some(Observed::observe(
            self.observed.take(),
            spec,
            Instant::now(),
        ));
        self.lease = Some(lease);
    }

    /// Gives the Lease up if this process holds it, so a successor need not wait for expiry.
    async fn release(&mut self) -> Result<()> {
        let identity = self.config.identity.clone();
        let Some(lease) = self.lease.clone() else {
            return Ok(());
        };
        let old = lease.spec.clone().unwrap_or_default();
        if old.holder_identity.as_deref() != Some(identity.as_str()) {
            return Ok(());
        }
        let spec = released_spec(&old, Timestamp::now());
        let after = self.config.renew_deadline;
        match tokio::time::timeout(after, self.replace(lease, spec)).await {
            Ok(Ok(())) => {
                tracing::info!(lease = %self.lease_key, identity = %identity, "released leadership");
                Ok(())
            }
            Ok(Err(Error::Kube { source, .. })) if is_conflict(&source) => {
                // The record changed since our last renewal: someone else has it already.
                tracing::info!(lease = %self.lease_key, identity = %identity, "lease changed before release; nothing to release");
                Ok(())
            }
            Ok(Err(Error::Kube { source, lease, .. })) => {
                let error = Error::Kube {
                    verb: "release",
                    lease,
                    source,
                };
                tracing::warn!(lease = %self.lease_key, identity = %identity, error = %error, "failed to release lease; successors wait for it to expire");
                Err(error)
            }
            Ok(Err(error)) => Err(error),
            Err(_elapsed) => {
                let error = Error::Timeout {
                    verb: "release",
                    lease: self.lease_key.clone(),
                    after,
                };
                tracing::warn!(lease = %self.lease_key, identity = %identity, error = %error, "failed to release lease; successors wait for it to expire");
                Err(error)
            }
        }
    }

    fn set_leading(&self, leading: bool) {
        self.leading.send_if_modified(|current| {
            let changed = *current != leading;
            *current = leading;
            changed
        });
    }

    fn kube_error(&self, verb: &'static str, source: kube::Error) -> Error {
        Error::Kube {
            verb,
            lease: self.lease_key.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaseConfig {
        LeaseConfig::new("default", "lock").with_identity("me")
    }

    #[test]
    fn defaults_are_client_go_s_and_valid() {
        let config = LeaseConfig::new("ns", "name");
        assert_eq!(config.lease_duration, Duration::from_secs(15));
        assert_eq!(config.renew_deadline, Duration::from_secs(10));
        assert_eq!(config.retry_period, Duration::from_secs(2));
        config.validate().unwrap();
    }

    #[test]
    fn default_identity_is_host_name_and_unique_suffix() {
        let one = default_identity();
        let two = default_identity();
        assert_ne!(one, two);
        let (host, suffix) = one.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert_eq!(suffix.len(), 16);
        assert!(two.starts_with(&format!("{host}_")));
    }

    #[track_caller]
    fn rejected(config: LeaseConfig, expected: fn(&Error) -> bool) {
        let error = config.validate().unwrap_err();
        assert!(expected(&error), "{config:?} gave {error:?}");
    }

    #[test]
    fn validation_rejects_unsafe_configs() {
        let secs = Duration::from_secs;
        let millis = Duration::from_millis;
        let unnamed = LeaseConfig {
            name: String::new(),
            ..config()
        };
        rejected(unnamed, |e| matches!(e, Error::EmptyLeaseName));
        let no_namespace = LeaseConfig {
            namespace: String::new(),
            ..config()
        };
        rejected(no_namespace, |e| matches!(e, Error::EmptyLeaseNamespace));
        rejected(config().with_identity(""), |e| {
            matches!(e, Error::EmptyIdentity)
        });
        let invalid_duration = |e: &Error| matches!(e, Error::InvalidLeaseDuration { .. });
        rejected(config().with_lease_duration(millis(1500)), invalid_duration);
        let sub_second = config()
            .with_lease_duration(millis(500))
            .with_renew_deadline(millis(300))
            .with_retry_period(millis(100));
        rejected(sub_second, invalid_duration);
        rejected(
            config().with_lease_duration(secs(u64::from(u32::MAX))),
            invalid_duration,
        );
        let deadline_too_long =
            |e: &Error| matches!(e, Error::RenewDeadlineNotBelowLeaseDuration { .. });
        rejected(config().with_renew_deadline(secs(15)), deadline_too_long);
        rejected(config().with_renew_deadline(secs(20)), deadline_too_long);
        rejected(config().with_renew_deadline(millis(2400)), |e| {
            matches!(e, Error::RenewDeadlineTooShortForRetry { .. })
        });
        rejected(config().with_retry_period(Duration::ZERO), |e| {
            matches!(e, Error::ZeroRetryPeriod)
        });

        config()
            .with_lease_duration(secs(2))
            .with_renew_deadline(secs(1))
            .with_retry_period(millis(200))
            .validate()
            .unwrap();
        config()
            .with_renew_deadline(millis(2401))
            .validate()
            .unwrap();
    }

    fn held_by(holder: &str, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn expiry_counts_from_the_last_observed_change_not_remote_time() {
        let fallback = Duration::from_secs(15);
        let t0 = Instant::now();
        // renewTime is 1970: a comparison with the wall clock would call this long expired.
        let seen = Observed::observe(None, held_by("other", 10), t0);
        assert_eq!(seen.other_holder("me", t0, fallback), Some("other"));
        assert_eq!(
            seen.other_holder("me", t0 + Duration::from_millis(9999), fallback),
            Some("other")
        );
        assert_eq!(
            seen.other_holder("me", t0 + Duration::from_secs(10), fallback),
            None
        );

        // Seeing the same record again does not restart the clock...
        let again = Observed::observe(
            Some(seen.clone()),
            held_by("other", 10),
            t0 + Duration::from_secs(9),
        );
        assert_eq!(again.changed_at, t0);
        assert_eq!(
            again.other_holder("me", t0 + Duration::from_secs(10), fallback),
            None
        );

        // ...but any change of the record (a renewal) does.
        let mut renewed = held_by("other", 10);
        renewed.renew_time = Some(MicroTime(
            Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1),
        ));
        let later = t0 + Duration::from_secs(9);
        let renewed = Observed::observe(Some(again), renewed, later);
        assert_eq!(renewed.changed_at, later);
        assert_eq!(
            renewed.other_holder("me", t0 + Duration::from_secs(18), fallback),
            Some("other")
        );
    }

    #[test]
    fn own_released_and_durationless_records() {
        let fallback = Duration::from_secs(15);
        let t0 = Instant::now();
        let own = Observed::observe(None, held_by("me", 10), t0);
        assert_eq!(own.other_holder("me", t0, fallback), None);

        for released in [
            LeaseSpec {
                holder_identity: None,
                ..held_by("x", 1)
            },
            LeaseSpec {
                holder_identity: Some(String::new()),
                ..held_by("x", 1)
            },
        ] {
            let released = Observed::observe(None, released, t0);
            assert_eq!(released.holder(), None);
            assert_eq!(released.other_holder("me", t0, fallback), None);
        }

        let no_duration = Observed::observe(
            None,
            LeaseSpec {
                lease_duration_seconds: None,
                ..held_by("other", 0)
            },
            t0,
        );
        assert_eq!(no_duration.expires_at(fallback), t0 + fallback);
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let now = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1000);
        let mut old = held_by("other", 10);
        old.acquire_time = Some(MicroTime(Timestamp::UNIX_EPOCH));

        let taken = acquired_spec(&old, "me", 15, now);
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_duration_seconds, Some(15));
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.renew_time, Some(MicroTime(now)));

        let later = now + jiff::SignedDuration::from_secs(2);
        let renewed = acquired_spec(&taken, "me", 15, later);
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, Some(MicroTime(now)));
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));

        let released = released_spec(&renewed, later);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, Some(4));

        let after_release = acquired_spec(&released, "next", 15, later);
        assert_eq!(after_release.lease_transitions, Some(5));
        assert_eq!(after_release.acquire_time, Some(MicroTime(later)));
    }

    #[test]
    fn jitter_stays_within_client_go_s_bounds() {
        let retry = Duration::from_millis(200);
        for _ in 0..1000 {
            let wait = jittered(retry);
            assert!(
                wait >= retry && wait <= retry.mul_f64(1.0 + JITTER_FACTOR),
                "{wait:?}"
            );
        }
    }
}
