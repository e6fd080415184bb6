//! The fleet: the same controllers over several clusters, as multicluster-runtime does for Go.
//!
//! ```text
//! Fleet::new()                              one Metrics, one /metrics /healthz /readyz
//!   .cluster("east", client)                clusters known at start (or from_kubeconfig)
//!   .add(|cluster| (controller, ctx), reconcile)
//!   .spawn()  -> RunningFleet               runs until stopped
//!       .add_cluster("west", client)        clusters joining at run time
//!       .remove_cluster("east").await       and leaving
//! ```
//!
//! Each cluster gets its own [`Manager`]: its own informers, caches, work queues and workers,
//! built by calling each controller's factory with the [`Cluster`] (its name and client), so
//! the reconciler's context can hold that cluster's client. Everything a cluster runs is
//! labelled with it: every metric series gets a `cluster` label, the reconcile span a
//! `cluster` field, and the object key the reconcile sees ([`ReconcileScope::key`],
//! [`ReconcileInfo::key`]) names the cluster (`east:default/web`). A cluster that is removed
//! stops its own workers and watches — draining in-flight reconciles as a manager's shutdown
//! does — and no other cluster's.
//!
//! Leader election is per [`Manager`]; a fleet runs without it.
//!
//! [`ReconcileScope::key`]: crate::reconcile::ReconcileScope::key
//! [`ReconcileInfo::key`]: crate::reconcile::ReconcileInfo::key

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cache::ReadyFlag;
use crate::controller::{CachedResource, Controller};
use crate::manager::{HealthListener, Manager, RunningManager, serve_health};
use crate::metrics::Metrics;
use crate::reconcile::Action;

/// Errors of a fleet.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A cluster with this name is already in the fleet.
    #[error("cluster {0:?} is already in the fleet")]
    Duplicate(String),
    /// A kubeconfig could not be read, or has no such context.
    #[error("kubeconfig context {context:?}: {source}")]
    Kubeconfig {
        /// The context.
        context: String,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A client could not be built for a context.
    #[error("client for kubeconfig context {context:?}: {source}")]
    Client {
        /// The context.
        context: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The health and metrics endpoint could not be bound.
    #[error(transparent)]
    Manager(#[from] crate::manager::Error),
}

/// One cluster of a fleet: its name (in keys, labels and spans) and a client for it.
#[derive(Clone)]
pub struct Cluster {
    name: Arc<str>,
    client: Client,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster").field("name", &self.name).finish()
    }
}

impl Cluster {
    /// A cluster named `name`, reached through `client`.
    pub fn new(name: impl Into<Arc<str>>, client: Client) -> Cluster {
        Cluster {
            name: name.into(),
            client,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A client for it.
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}

/// Adds one controller, built for a cluster, to that cluster's manager.
type Factory = Arc<dyn Fn(&mut Manager, &Cluster) + Send + Sync>;

/// Runs controllers over several clusters (see the module docs).
pub struct Fleet {
    metrics: Arc<Metrics>,
    factories: Vec<Factory>,
    clusters: Vec<Cluster>,
    health: Option<HealthListener>,
    shutdown_timeout: Duration,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("clusters", &self.clusters)
            .field("controllers", &self.factories.len())
            .finish_non_exhaustive()
    }
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet::new()
    }
}

impl Fleet {
    /// An empty fleet.
    pub fn new() -> Fleet {
        Fleet {
            metrics: Arc::new(Metrics::new()),
            factories: Vec::new(),
            clusters: Vec::new(),
            health: None,
            shutdown_timeout: Duration::from_secs(30),
        }
    }

    /// A fleet of the clusters of these kubeconfig contexts (from `$KUBECONFIG` or
    /// `~/.kube/config`), each named after its context.
    pub async fn from_kubeconfig<S: AsRef<str>>(contexts: &[S]) -> Result<Fleet, Error> {
        Fleet::from_kubeconfig_file(None, contexts).await
    }

    /// A fleet of the clusters of these contexts of `kubeconfig` (the default kubeconfig when
    /// `None`), each named after its context.
    pub async fn from_kubeconfig_file<S: AsRef<str>>(
        kubeconfig: Option<Kubeconfig>,
        contexts: &[S],
    ) -> Result<Fleet, Error> {
        let mut fleet = Fleet::new();
        for context in contexts {
            let context = context.as_ref().to_string();
            let options = KubeConfigOptions {
                context: Some(context.clone()),
                ..KubeConfigOptions::default()
            };
            let config = match &kubeconfig {
                Some(kubeconfig) => {
                    kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &options).await
                }
                None => kube::Config::from_kubeconfig(&options).await,
            };
            let config = config.map_err(|source| Error::Kubeconfig {
                context: context.clone(),
                source,
            })?;
            let client = Client::try_from(config).map_err(|source| Error::Client {
                context: context.clone(),
                source,
            })?;
            fleet = fleet.cluster(context, client);
        }
        Ok(fleet)
    }

    /// Adds a cluster to run the controllers over from the start.
    pub fn cluster(mut self, name: impl Into<Arc<str>>, client: Client) -> Self {
        self.clusters.push(Cluster::new(name, client));
        self
    }

    /// Serves `/metrics` (every cluster's series), `/healthz` and `/readyz` (200 once every
    /// cluster's caches are filled) on `addr`.
    pub fn health_address(mut self, addr: SocketAddr) -> Self {
        self.health = Some(HealthListener::Address(addr));
        self
    }

    /// Like [`health_address`](Self::health_address), on an already bound listener.
    pub fn health_listener(mut self, listener: TcpListener) -> Self {
        self.health = Some(HealthListener::Listener(listener));
        self
    }

    /// How long in-flight reconciles of a cluster that leaves, or of every cluster at
    /// shutdown, may take to finish (default 30 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// The metrics registry all clusters report into.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Adds a controller to every cluster, present and future: `build` makes the cluster's
    /// [`Controller`] and the reconciler's context (which usually holds
    /// [`Cluster::client`]); `reconcile` runs as under a [`Manager`].
    pub fn add<K, Ctx, E, B, F, Fut>(&mut self, build: B, reconcile: F) -> &mut Self
    where
        K: CachedResource,
        Ctx: Send + Sync + 'static,
        E: std::error::Error + Send + Sync + 'static,
        B: Fn(&Cluster) -> (Controller<K>, Arc<Ctx>) + Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let reconcile = Arc::new(reconcile);
        self.factories
            .push(Arc::new(move |manager: &mut Manager, cluster: &Cluster| {
                let (controller, ctx) = build(cluster);
                let reconcile = reconcile.clone();
                manager.add(controller, move |obj, ctx| reconcile(obj, ctx), ctx);
            }));
        self
    }

    /// Starts every cluster's controllers in the background; the handle adds and removes
    /// clusters, and stops the fleet (also when dropped).
    pub async fn spawn(self) -> Result<RunningFleet, Error> {
        let stop = CancellationToken::new();
        let inner = Arc::new(Inner {
            metrics: self.metrics,
            factories: self.factories,
            shutdown_timeout: self.shutdown_timeout,
            clusters: Mutex::new(BTreeMap::new()),
        });
        if let Some(health) = self.health {
            let listener = health.bind().await?;
            let fleet = Arc::downgrade(&inner);
            let ready = move || fleet.upgrade().is_some_and(|f| f.ready());
            let router = Manager::health_router(inner.metrics.clone(), Arc::new(ready));
            tokio::spawn(serve_health(listener, router, stop.clone()));
        }
        let running = RunningFleet { inner, stop };
        for cluster in self.clusters {
            running.start(cluster)?;
        }
        Ok(running)
    }
}

struct Member {
    manager: RunningManager,
    ready: Vec<Arc<dyn ReadyFlag>>,
}

struct Inner {
    metrics: Arc<Metrics>,
    factories: Vec<Factory>,
    shutdown_timeout: Duration,
    clusters: Mutex<BTreeMap<Arc<str>, Member>>,
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Arc<str>, Member>> {
        self.clusters.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ready(&self) -> bool {
        self.lock()
            .values()
            .all(|m| m.ready.iter().all(|r| r.is_ready()))
    }
}

/// A fleet running in the background ([`Fleet::spawn`]).
pub struct RunningFleet {
    inner: Arc<Inner>,
    stop: CancellationToken,
}

impl fmt::Debug for RunningFleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunningFleet")
            .field("clusters", &self.clusters())
            .finish()
    }
}

impl RunningFleet {
    fn start(&self, cluster: Cluster) -> Result<(), Error> {
        let mut clusters = self.inner.lock();
        if clusters.contains_key(&cluster.name) {
            return Err(Error::Duplicate(cluster.name.to_string()));
        }
        let mut manager = Manager::for_cluster(
            cluster.client.clone(),
            Some(cluster.name.clone()),
            self.inner.metrics.clone(),
        )
        .shutdown_timeout(self.inner.shutdown_timeout);
        for factory in &self.inner.factories {
            factory(&mut manager, &cluster);
        }
        let ready = manager.ready_flags();
        tracing::info!(cluster = %cluster.name, "cluster joined the fleet; starting its controllers");
        clusters.insert(
            cluster.name,
            Member {
                manager: manager.spawn(),
                ready,
            },
        );
        Ok(())
    }

    /// Runs the fleet's controllers over one more cluster.
    pub fn add_cluster(&self, name: impl Into<Arc<str>>, client: Client) -> Result<(), Error> {
        self.start(Cluster::new(name, client))
    }

    /// Stops the controllers of cluster `name` (in-flight reconciles get the shutdown
    /// timeout) and its watches, and waits until they stopped; the other clusters go on.
    /// Returns whether the cluster was in the fleet.
    pub async fn remove_cluster(&self, name: &str) -> bool {
        let Some(member) = self.inner.lock().remove(name) else {
            return false;
        };
        tracing::info!(cluster = %name, "cluster left the fleet; stopping its controllers");
        if let Err(error) = member.manager.stop().await {
            tracing::warn!(cluster = %name, %error, "the cluster's manager stopped with an error");
        }
        true
    }

    /// The clusters running, by name.
    pub fn clusters(&self) -> Vec<String> {
        self.inner.lock().keys().map(|k| k.to_string()).collect()
    }

    /// Whether every cluster's caches are filled.
    pub fn is_ready(&self) -> bool {
        self.inner.ready()
    }

    /// The metrics registry all clusters report into.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    /// Stops every cluster's controllers (in-flight reconciles get the shutdown timeout) and
    /// waits until they stopped.
    pub async fn stop(self) {
        let members: Vec<(Arc<str>, Member)> = std::mem::take(&mut *self.inner.lock())
            .into_iter()
            .collect();
        let stops = members.into_iter().map(|(name, member)| async move {
            if let Err(error) = member.manager.stop().await {
                tracing::warn!(cluster = %name, %error, "the cluster's manager stopped with an error");
            }
        });
        futures::future::join_all(stops).await;
        self.stop.cancel();
    }
}

impl Drop for RunningFleet {
    fn drop(&mut self) {
        // Dropping the managers asks each to shut down.
        self.inner.lock().clear();
        self.stop.cancel();
    }
}
