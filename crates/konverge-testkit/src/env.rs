//! [`TestEnv`]: a konverge API server on a loopback port and a `kube::Client` for it.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use konverge_apiserver::ApiServer;
use konverge_apiserver::registry::WatchCacheConfig;
use konverge_apiserver::serve::{Serve, Serving};
use konverge_store::{
    KvStore, MemStore, RangeRequest, RangeResponse, Revision, Txn, TxnResponse, WatchRequest,
    WatchStream,
};
use tower::Layer;

use crate::faults::Faults;
use crate::requests::RequestLog;

/// Why a [`TestEnv`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The temporary directory for the disk store could not be created.
    #[error("creating a temporary directory for the disk store")]
    TempDir(#[source] io::Error),
    /// The disk store could not be opened.
    #[error("opening the disk store")]
    Store(#[source] konverge_store::Error),
    /// The API server failed to bootstrap (create the system namespaces).
    #[error("building the API server")]
    Server(#[source] konverge_apiserver::error::ApiError),
    /// No loopback port could be bound.
    #[error("serving on a loopback port")]
    Serve(#[source] konverge_apiserver::serve::ServeError),
    /// The `kube::Client` could not be built.
    #[error("building the kube client")]
    Client(#[source] kube::Error),
}

/// Which store a [`TestEnv`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Memory,
    Disk,
}

/// Configures a [`TestEnv`]; from [`TestEnv::builder`].
#[derive(Debug, Clone)]
pub struct TestEnvBuilder {
    backend: Backend,
    watch_cache: WatchCacheConfig,
    control_loops: bool,
}

impl TestEnvBuilder {
    /// Runs the server on a `DiskStore` in a temporary directory (removed once the store
    /// closes: when the [`TestEnv`] is dropped, or with control loops on, when the Tokio
    /// runtime ends) instead of the default in-memory store.
    pub fn disk(mut self) -> Self {
        self.backend = Backend::Disk;
        self
    }

    /// How the server's watch caches serve lists and watches (default:
    /// [`WatchCacheConfig::default`]).
    pub fn watch_cache(mut self, config: WatchCacheConfig) -> Self {
        self.watch_cache = config;
        self
    }

    /// Whether the server runs its control loops — garbage collection of ownerReferences,
    /// namespace finalization, periodic compaction (default: yes, as a cluster does).
    pub fn control_loops(mut self, run: bool) -> Self {
        self.control_loops = run;
        self
    }

    /// Starts the environment.
    ///
    /// # Panics
    ///
    /// If it cannot start (see [`Error`]), with the cause in the message: this is a test
    /// helper. Use [`try_start`](Self::try_start) to handle the error instead.
    pub async fn start(self) -> TestEnv {
        match self.try_start().await {
            Ok(env) => env,
            Err(e) => panic!("konverge-testkit: TestEnv failed to start: {}", chain(&e)),
        }
    }

    /// Starts the environment, or says why it could not.
    pub async fn try_start(self) -> Result<TestEnv, Error> {
        let store: Arc<dyn KvStore> = match self.backend {
            Backend::Memory => Arc::new(MemStore::new()),
            Backend::Disk => Arc::new(TempDiskStore::open()?),
        };
        let server = ApiServer::builder(store.clone())
            .control_loops(self.control_loops)
            .watch_cache(self.watch_cache)
            .build()
            .await
            .map_err(Error::Server)?;
        let faults = Faults::new(&server);
        // The faults see every request before the server does.
        let service = axum::Router::new().fallback_service(faults.layer().layer(server.router()));
        let serving = Serve::new(service)
            .bind("127.0.0.1:0")
            .await
            .map_err(Error::Serve)?;
        let addr = serving.local_addr();
        server.set_address(addr.to_string());
        let url = serving.url();
        let uri = url
            .parse()
            .expect("an http URL of a socket address is a valid URI");
        let client = kube::Client::try_from(kube::Config::new(uri)).map_err(Error::Client)?;
        serving.ready().await;
        Ok(TestEnv {
            client,
            url,
            addr,
            server,
            store,
            faults,
            _serving: serving,
        })
    }
}

/// A konverge API server on a loopback port (plain HTTP) and a `kube::Client` for it, with
/// [`Faults`] and a [`RequestLog`] between the two.
///
/// Dropping the `TestEnv` stops the server: the listener closes and every open connection,
/// watches included, is cut. The server's control loops (when on) work on its registry, not
/// over HTTP, and stop with the Tokio runtime — a `#[tokio::test]`'s ends with the test.
pub struct TestEnv {
    client: kube::Client,
    url: String,
    addr: SocketAddr,
    server: Arc<ApiServer>,
    store: Arc<dyn KvStore>,
    faults: Faults,
    // Dropping it stops serving and cuts every connection.
    _serving: Serving,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl TestEnv {
    /// Starts an environment over an in-memory store with the server's defaults.
    ///
    /// # Panics
    ///
    /// If it cannot start; see [`TestEnvBuilder::start`].
    pub async fn start() -> TestEnv {
        TestEnv::builder().start().await
    }

    /// A builder, to choose the store, the watch cache and the control loops.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder {
            backend: Backend::Memory,
            watch_cache: WatchCacheConfig::default(),
            control_loops: true,
        }
    }

    /// A client for the server (a cheap clone; all clones share one connection pool).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The server's base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API server itself, for in-process calls to its registry.
    pub fn server(&self) -> &Arc<ApiServer> {
        &self.server
    }

    /// The store under the server.
    pub fn store(&self) -> &Arc<dyn KvStore> {
        &self.store
    }

    /// The fault-injection handle: drop watches, expire history, inject errors and latency.
    /// Cheap; every call returns a handle on the same faults.
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// The record of every request clients sent to the server (the same as
    /// `faults().requests()`).
    pub fn requests(&self) -> RequestLog {
        self.faults.requests()
    }

    /// Writes a kubeconfig for this server to `path` (cluster, user and context named
    /// `konverge-testkit`; the server needs no credentials), so real tools
    /// (`kubectl --kubeconfig`) can look at what a test did.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let config = konverge_apiserver::serve::kubeconfig("konverge-testkit", &self.url, None);
        let yaml =
            konverge_apiserver::serve::kubeconfig::render(&config).map_err(io::Error::other)?;
        std::fs::write(path, yaml)
    }
}

/// A `DiskStore` in a temporary directory that lives exactly as long as the store: the
/// server's control loops may hold the store after the [`TestEnv`] is gone, and the directory
/// must not be removed under an open store.
struct TempDiskStore {
    store: konverge_store_disk::DiskStore,
    // Declared after the store, so the store closes before the directory is removed.
    _dir: tempfile::TempDir,
}

impl TempDiskStore {
    fn open() -> Result<Self, Error> {
        let dir = tempfile::tempdir().map_err(Error::TempDir)?;
        let store = konverge_store_disk::DiskStore::open(dir.path()).map_err(Error::Store)?;
        Ok(TempDiskStore { store, _dir: dir })
    }
}

/// Every method the disk store implements goes straight to it (the rest are the trait's
/// defaults, built on these).
#[async_trait::async_trait]
impl KvStore for TempDiskStore {
    async fn range(&self, req: RangeRequest) -> konverge_store::Result<RangeResponse> {
        self.store.range(req).await
    }

    async fn txn(&self, txn: Txn) -> konverge_store::Result<TxnResponse> {
        self.store.txn(txn).await
    }

    async fn watch(&self, req: WatchRequest) -> konverge_store::Result<WatchStream> {
        self.store.watch(req).await
    }

    async fn compact(&self, revision: Revision) -> konverge_store::Result<()> {
        self.store.compact(revision).await
    }

    async fn current_revision(&self) -> konverge_store::Result<Revision> {
        self.store.current_revision().await
    }
}

/// An error and its sources, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
