//! The manager: runs informers, controllers, leader election and the health/metrics endpoint
//! as one unit, and shuts them down in order.
//!
//! ```text
//! Manager::new(client)              shared informers, one Metrics
//!   .health_address(addr)           /metrics, /healthz, /readyz on one port
//!   .leader_election(LeaseConfig)   controllers run only while this process leads
//!   .add(controller, reconcile, ctx)
//!   .run(shutdown).await            until `shutdown` completes (or leadership is lost)
//! ```
//!
//! Informers start at once (a standby keeps its caches warm, so it can take over quickly);
//! controllers start when leadership is acquired (at once without leader election). On
//! shutdown the controllers stop taking work, in-flight reconciles get
//! [`shutdown_timeout`](Manager::shutdown_timeout) to finish (then are cancelled), the Lease is
//! released, and the informers stop. `/readyz` answers 200 once every cache has been filled;
//! `/healthz` answers 200 while the manager runs.

use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::future::BoxFuture;
use kube::{Api, Client};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cache::ReadyFlag;
use crate::cache::{Index, Store};
use crate::controller::{CachedResource, Controller, Runnable};
use crate::informer::Informers;
use crate::leader::{self, LeaderElection, LeaseConfig};
use crate::metrics::{CONTENT_TYPE, Metrics};
use crate::reconcile::Action;
use crate::watcher;

/// Why the manager stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The health/metrics port could not be bound.
    #[error("binding the health and metrics endpoint on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Leader election could not start (bad configuration).
    #[error("leader election: {0}")]
    LeaderElection(#[source] leader::Error),
    /// This process lost its Lease; controllers were stopped. Exit and restart, as
    /// controller-runtime does: another replica now leads.
    #[error("leadership lost")]
    LeadershipLost,
    /// An index was added after its informer started.
    #[error(transparent)]
    Informer(#[from] crate::informer::Error),
}

/// Runs controllers (see the module docs).
pub struct Manager {
    client: Client,
    informers: Informers,
    metrics: Arc<Metrics>,
    runnables: Vec<Runnable>,
    health: Option<HealthListener>,
    lease: Option<LeaseConfig>,
    shutdown_timeout: Duration,
}

pub(crate) enum HealthListener {
    Address(SocketAddr),
    Listener(TcpListener),
}

impl HealthListener {
    pub(crate) async fn bind(self) -> Result<TcpListener, Error> {
        match self {
            HealthListener::Listener(l) => Ok(l),
            HealthListener::Address(addr) => TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind { addr, source }),
        }
    }
}

/// Serves the health router until `stop` fires.
pub(crate) async fn serve_health(listener: TcpListener, router: Router, stop: CancellationToken) {
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "health endpoint failed");
    }
}

impl Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field(
                "controllers",
                &self.runnables.iter().map(|r| &r.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager talking to the API through `client`.
    pub fn new(client: Client) -> Manager {
        Manager::for_cluster(client, None, Arc::new(Metrics::new()))
    }

    /// One cluster's manager in a [`Fleet`](crate::fleet::Fleet): its series carry the
    /// cluster's name, in the fleet's registry.
    pub(crate) fn for_cluster(
        client: Client,
        cluster: Option<Arc<str>>,
        metrics: Arc<Metrics>,
    ) -> Manager {
        Manager {
            client,
            informers: Informers::for_cluster(cluster),
            metrics,
            runnables: Vec::new(),
            health: None,
            lease: None,
            shutdown_timeout: Duration::from_secs(30),
        }
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `addr`.
    pub fn health_address(mut self, addr: SocketAddr) -> Self {
        self.health = Some(HealthListener::Address(addr));
        self
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on an already bound listener (handy for
    /// tests: bind port 0, read the port, pass the listener).
    pub fn health_listener(mut self, listener: TcpListener) -> Self {
        self.health = Some(HealthListener::Listener(listener));
        self
    }

    /// Runs controllers only while this process holds the Lease.
    pub fn leader_election(mut self, lease: LeaseConfig) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long in-flight reconciles may take to finish at shutdown (default 30 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// The client controllers were built with.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The metrics registry (register application metrics here to serve them on `/metrics`).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The shared cache of `api` under `config`'s selectors — the same cache controllers that
    /// own or watch this resource use. Filled once [`run`](Self::run) starts.
    pub fn store<K: CachedResource>(&self, api: Api<K>, config: watcher::Config) -> Store<K> {
        self.informers.get(api, config).store()
    }

    /// Like [`store`](Self::store), with an extra index.
    pub fn store_with_index<K: CachedResource>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        index: Index<K>,
    ) -> Result<Store<K>, Error> {
        let informer = self.informers.get(api, config);
        informer.add_index(index)?;
        Ok(informer.store())
    }

    /// Adds a controller and its reconciler.
    pub fn add<K, Ctx, E, F, Fut>(
        &mut self,
        controller: Controller<K>,
        reconcile: F,
        ctx: Arc<Ctx>,
    ) -> &mut Self
    where
        K: CachedResource,
        Ctx: Send + Sync + 'static,
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let runnable = controller.wire(&self.informers, self.metrics.clone(), reconcile, ctx);
        self.runnables.push(runnable);
        self
    }

    /// Adds a task that runs beside the controllers, as they do: only while this process
    /// leads (at once without leader election), until the token it is given is cancelled (on
    /// shutdown, or when leadership is lost; the task must end then). controller-runtime's
    /// `mgr.Add` of a leader-elected `RunnableFunc`: what acts without reconciling one
    /// resource (a loop over a whole store, say).
    pub fn add_task<F>(&mut self, name: impl Into<String>, task: F) -> &mut Self
    where
        F: FnOnce(CancellationToken) -> BoxFuture<'static, ()> + Send + 'static,
    {
        self.runnables.push(crate::controller::Runnable {
            name: name.into(),
            run: Box::new(move |stop, _timeout| task(stop)),
        });
        self
    }

    /// The readiness of every cache and trigger added so far.
    pub(crate) fn ready_flags(&self) -> Vec<Arc<dyn ReadyFlag>> {
        self.informers.ready_flags()
    }

    /// The `/metrics`, `/healthz`, `/readyz` router; `/readyz` answers 200 when `ready` says.
    pub(crate) fn health_router(
        metrics: Arc<Metrics>,
        ready: Arc<dyn Fn() -> bool + Send + Sync>,
    ) -> Router {
        Router::new()
            .route(
                "/metrics",
                get(move || {
                    let metrics = metrics.clone();
                    async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.encode()) }
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/readyz",
                get(move || {
                    let ready = ready.clone();
                    async move {
                        if ready() {
                            (StatusCode::OK, "ok").into_response()
                        } else {
                            (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
                        }
                    }
                }),
            )
    }

    /// Runs in the background (a Tokio task) until the returned handle is stopped or
    /// dropped: what tests and embedding programs want instead of [`run`](Self::run)'s
    /// shutdown future.
    pub fn spawn(self) -> RunningManager {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(self.run(async move { stopped.cancelled().await }));
        RunningManager {
            stop,
            task: Some(task),
        }
    }

    /// Runs until `shutdown` completes, then stops everything in order. Returns
    /// [`Error::LeadershipLost`] if the Lease was lost while leading.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let stop = CancellationToken::new();
        let mut background: JoinSet<()> = JoinSet::new();
        // Every cache and trigger a controller reads registered a starter, so their readiness
        // flags are /readyz's.
        let starters = self.informers.take_starters();
        let ready: Vec<Arc<dyn ReadyFlag>> = starters.iter().map(|s| s.ready.clone()).collect();

        if let Some(health) = self.health {
            let all_ready = move || ready.iter().all(|r| r.is_ready());
            let router = Manager::health_router(self.metrics.clone(), Arc::new(all_ready));
            background.spawn(serve_health(health.bind().await?, router, stop.clone()));
        }

        let mut informers: JoinSet<()> = JoinSet::new();
        for starter in starters {
            tracing::debug!(resource = %starter.resource, "starting informer");
            informers.spawn((starter.run)(Some(self.metrics.clone())));
        }

        let lease_stop = CancellationToken::new();
        let mut leader = None;
        if let Some(lease) = self.lease {
            let labels = vec![("name", lease.name.clone())];
            let gauge = self.metrics.leader.get_or_create(&labels).clone();
            gauge.set(0);
            let election =
                LeaderElection::new(self.client.clone(), lease).map_err(Error::LeaderElection)?;
            let handle = election.spawn(lease_stop.clone());
            let mut leading = handle.leading();
            background.spawn(async move {
                loop {
                    gauge.set(i64::from(*leading.borrow_and_update()));
                    if leading.changed().await.is_err() {
                        gauge.set(0);
                        return;
                    }
                }
            });
            leader = Some(handle);
        }

        futures::pin_mut!(shutdown);
        let mut lost = false;
        let mut controllers: JoinSet<()> = JoinSet::new();
        let started = match &leader {
            None => true,
            Some(handle) => {
                let mut leading = handle.leading();
                tokio::select! {
                    acquired = leading.wait_for(|l| *l) => acquired.is_ok(),
                    _ = &mut shutdown => false,
                }
            }
        };
        if started {
            for runnable in self.runnables {
                controllers.spawn((runnable.run)(stop.clone(), self.shutdown_timeout));
            }
            let lost_lease: BoxFuture<'static, ()> = match &leader {
                Some(handle) => {
                    let mut leading = handle.leading();
                    Box::pin(async move {
                        let _ = leading.wait_for(|l| !*l).await;
                    })
                }
                None => Box::pin(futures::future::pending()),
            };
            tokio::select! {
                _ = &mut shutdown => {}
                _ = lost_lease => {
                    tracing::error!("leadership lost; stopping controllers");
                    lost = true;
                }
            }
        }
        stop.cancel();
        while controllers.join_next().await.is_some() {}
        lease_stop.cancel();
        if let Some(handle) = leader
            && let Err(error) = handle.stopped().await
        {
            tracing::warn!(%error, "releasing the lease failed");
        }
        informers.abort_all();
        while informers.join_next().await.is_some() {}
        while background.join_next().await.is_some() {}
        if lost {
            Err(Error::LeadershipLost)
        } else {
            Ok(())
        }
    }
}

/// A manager running in the background ([`Manager::spawn`]). Dropping it asks the manager to
/// shut down (gracefully, in the background); [`stop`](Self::stop) also waits for it.
pub struct RunningManager {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<Result<(), Error>>>,
}

impl RunningManager {
    /// Shuts the manager down and waits until it stopped; returns what [`Manager::run`]
    /// returned.
    pub async fn stop(mut self) -> Result<(), Error> {
        self.stop.cancel();
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(result) => result,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            // Cancelled with its runtime: nothing is left to stop.
            Err(_) => Ok(()),
        }
    }
}

impl Drop for RunningManager {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
