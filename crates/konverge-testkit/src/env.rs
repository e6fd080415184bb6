//! [`TestEnv`]: a konverge API server and a `kube::Client` for it — over a loopback port, or
//! in-process without a socket ([`TestEnvBuilder::in_process`]).

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures::StreamExt;
use konverge_apiserver::registry::WatchCacheConfig;
use konverge_apiserver::serve::{Serve, Serving};
use konverge_apiserver::{ApiServer, AuthorizationMode};
use konverge_controllers::kubelet::{Kubelets, SimulatedNodes};
use konverge_controllers::manager::ServiceAccountTokens;
use konverge_controllers::{Clock, ControllerManager, Selection};
use konverge_runtime::RunningManager;
use konverge_store::{
    KvStore, MemStore, RangeRequest, RangeResponse, Revision, Txn, TxnResponse, WatchRequest,
    WatchStream,
};
use kube::client::retry::RetryPolicy;
use tokio_util::sync::CancellationToken;
use tower::retry::RetryLayer;
use tower::{BoxError, Layer, ServiceExt};

use std::future::Future;

use konverge_apiserver::admission::Record;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::conversion::{ConversionRequest, ConversionResponse};

use crate::faults::{Faults, Restart};
use crate::webhooks::InProcess;

/// How many requests [`TestEnv::admissions`] remembers.
const ADMISSION_RECORDS: usize = 1024;
use crate::permissions::{DecisionLog, Permissions};
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
    /// A restart was asked of [`Faults`] made around a server outside a [`TestEnv`].
    #[error("these faults have no server to restart: only a TestEnv's can be restarted")]
    NotRestartable,
    /// A [`TestEnv::direct_client`], or a client of an in-process `TestEnv`, was used after
    /// its `TestEnv` was dropped.
    #[error("the TestEnv was dropped")]
    Stopped,
    /// A manifest given to [`TestEnv::apply_manifests`] could not be read or applied.
    #[error("manifest {index}: {message}")]
    Manifest {
        /// Which document (0-based).
        index: usize,
        /// What is wrong with it.
        message: String,
    },
    /// A request of the testkit's own failed.
    #[error("{0}")]
    Request(#[source] kube::Error),
    /// An in-process request found the server down while it restarts ([`TestEnv::restart`]):
    /// what a client over a socket sees as a refused connection.
    #[error("connection refused: the API server is restarting")]
    Down,
    /// An in-process request was still waiting for its answer when the server restarted or
    /// the [`TestEnv`] was dropped: what a client over a socket sees as a cut connection.
    #[error("connection reset: the API server stopped")]
    Cut,
    /// Asked of an in-process [`TestEnv`] ([`TestEnvBuilder::in_process`]): it has no
    /// socket, so no URL or kubeconfig.
    #[error(
        "this TestEnv is in-process: it has no socket, so no URL or kubeconfig (its clients call the server in-process)"
    )]
    NoSocket,
    /// kube-controller-manager's controllers could not start.
    #[error("starting kube-controller-manager's controllers: {0}")]
    Controllers(#[source] konverge_controllers::Error),
}

/// Which store a [`TestEnv`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Memory,
    Disk,
}

/// How [`TestEnv::client`] reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// Plain HTTP on a loopback port.
    Socket,
    /// The server's router called as a `tower` service: no listener at all.
    InProcess,
}

/// The URL [`TestEnv::url`] gives for an in-process environment: under `.invalid`, a
/// top-level domain reserved never to resolve, so a client pointed at it fails at once.
const IN_PROCESS_URL: &str = "http://in-process.invalid";

/// Configures a [`TestEnv`]; from [`TestEnv::builder`].
#[derive(Debug, Clone)]
pub struct TestEnvBuilder {
    backend: Backend,
    transport: Transport,
    watch_cache: WatchCacheConfig,
    control_loops: bool,
    authorization: AuthorizationMode,
    webhooks: InProcess,
    controllers: Selection,
    /// The key ServiceAccount tokens are signed with: the same across restarts, as a
    /// kube-apiserver restarted with its `--service-account-signing-key-file`, so tokens
    /// issued before a restart still authenticate after it.
    service_account_key: Vec<u8>,
    nodes: usize,
    zones: Vec<String>,
}

impl TestEnvBuilder {
    /// Serves an admission webhook in-process at `path` of the Service `namespace/name`:
    /// a webhook configuration whose `clientConfig.service` names that Service (any port)
    /// and path reaches `handler`, with kube-rs's admission types, without TLS (its
    /// `caBundle` is not used). The Service itself need not exist.
    pub fn webhook<F, Fut>(self, namespace: &str, name: &str, path: &str, handler: F) -> Self
    where
        F: Fn(AdmissionRequest<DynamicObject>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = AdmissionResponse> + Send + 'static,
    {
        self.webhooks.admission(namespace, name, path, handler);
        self
    }

    /// Serves a CRD conversion webhook in-process at `path` of the Service
    /// `namespace/name`, as [`webhook`](Self::webhook) does an admission webhook.
    pub fn conversion_webhook<F, Fut>(
        self,
        namespace: &str,
        name: &str,
        path: &str,
        handler: F,
    ) -> Self
    where
        F: Fn(ConversionRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ConversionResponse> + Send + 'static,
    {
        self.webhooks.conversion(namespace, name, path, handler);
        self
    }

    /// Runs the server on a `DiskStore` in a temporary directory (removed once the store
    /// closes: when the [`TestEnv`] is dropped, or with control loops on, when the Tokio
    /// runtime ends) instead of the default in-memory store.
    ///
    /// The disk store does its work on threads of its own, which Tokio's paused time does
    /// not wait for: under paused time the clock would jump ahead while a request is in the
    /// store. Use the in-memory store for tests in paused time.
    pub fn disk(mut self) -> Self {
        self.backend = Backend::Disk;
        self
    }

    /// Serves no socket at all: [`TestEnv::client`] and [`TestEnv::client_for`] call the
    /// server's router in-process, as a `tower` service, through the same [`Faults`] and
    /// [`RequestLog`] a client over the loopback port goes through (injected failures,
    /// delays, cut watches, lost responses, stale reads, [restarts](TestEnv::restart) all
    /// work, and every request is recorded).
    ///
    /// Nothing then waits on the operating system, so with the in-memory store (the default)
    /// the environment works under Tokio's paused time — `#[tokio::test(start_paused =
    /// true)]` — where the clock jumps straight to the next timer whenever every task is
    /// idle: a controller's ten-minute requeue, a lease expiring, a backoff or an injected
    /// [delay](Faults::delay) take no real time, and always the same virtual time. See the
    /// crate documentation for what works paused. (Over a socket, paused time fires the
    /// client's read timeout and the test's own timeouts while a response is still on its
    /// way through the kernel.)
    ///
    /// [`TestEnv::url`], [`TestEnv::addr`] and [`TestEnv::write_kubeconfig`] have nothing
    /// to point at: see each.
    pub fn in_process(mut self) -> Self {
        self.transport = Transport::InProcess;
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

    /// How the server authorizes requests (default: [`AuthorizationMode::Rbac`], as a
    /// cluster does). [`TestEnv::client`] is the admin either way.
    pub fn authorization(mut self, mode: AuthorizationMode) -> Self {
        self.authorization = mode;
        self
    }

    /// Which of kube-controller-manager's controllers run beside the server (default: all of
    /// them, as on a cluster: Deployments get ReplicaSets, ReplicaSets get pods, Services get
    /// EndpointSlices, ...). They run as kcm runs them — each as its own ServiceAccount in
    /// `kube-system`, on Tokio's clock (virtual in paused time) — and reach the server past
    /// the [`Faults`] and outside the [`RequestLog`], like [`TestEnv::direct_client`]: the
    /// faults and the log are the controller under test's. [`Selection::none`] (or
    /// [`bare`](Self::bare)) leaves an API server alone, as envtest runs one.
    pub fn controllers(mut self, selection: Selection) -> Self {
        self.controllers = selection;
        self
    }

    /// Runs `count` simulated nodes (`node-1`, ...) beside the controllers: kubelets that take
    /// the pods bound to them through what a kubelet writes (Running, IPs, Ready, restarts,
    /// completion; no containers run) and a scheduler that binds pods with kube-scheduler's
    /// rules, on Tokio's clock (default: none, so pods stay Pending as under envtest).
    pub fn nodes(mut self, count: usize) -> Self {
        self.nodes = count;
        self
    }

    /// Spreads the simulated nodes ([`nodes`](Self::nodes)) over these zones, round robin in
    /// the order given: `node-1` in the first, `node-2` in the second, ... — each labelled
    /// `topology.kubernetes.io/zone`, as a cloud provider's nodes are, for topology spread
    /// and affinity to act on, and for [`Fault::ZoneOutage`](crate::Fault::ZoneOutage)
    /// (default: no zones).
    pub fn zones(mut self, zones: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.zones = zones.into_iter().map(Into::into).collect();
        self
    }

    /// An API server alone: no kube-controller-manager controllers
    /// ([`controllers`](Self::controllers)`(Selection::none())`). The server's own control
    /// loops (garbage collection, namespace finalization) still run; see
    /// [`control_loops`](Self::control_loops).
    pub fn bare(self) -> Self {
        self.controllers(Selection::none())
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
        let disk = match self.backend {
            Backend::Memory => None,
            Backend::Disk => Some(Arc::new(TempDiskStore::open()?)),
        };
        let store: Arc<dyn KvStore> = match &disk {
            Some(disk) => disk.clone(),
            None => Arc::new(MemStore::new()),
        };
        let token = konverge_apiserver::serve::credentials::generate_token();
        let decisions = DecisionLog::default();
        let server = self.build(&store, &token, &decisions).await?;
        let faults = Faults::new(&server);
        let serving = match self.transport {
            Transport::Socket => {
                let serving = serve(&faults, &server, "127.0.0.1:0").await?;
                server.set_address(serving.local_addr().to_string());
                serving.ready().await;
                Some(serving)
            }
            Transport::InProcess => None,
        };
        let socket = serving.as_ref().map(|s| (s.url(), s.local_addr()));
        let inner = Arc::new(Inner {
            builder: self,
            token,
            decisions,
            addr: socket.as_ref().map(|(_, addr)| *addr),
            store,
            disk,
            server: Mutex::new(server.clone()),
            serving: Mutex::new(serving),
            up: tokio::sync::RwLock::new(()),
            cut: Mutex::new(CancellationToken::new()),
            faults: faults.clone(),
            kubelets: Mutex::new(None),
        });
        let restart: Weak<dyn Restart> = Arc::downgrade(&inner) as Weak<dyn Restart>;
        faults.restart_with(restart);
        let client = match &socket {
            Some((url, _)) => socket_client(url, &inner.token, "default")?,
            None => in_process_client(&inner, &inner.token, "default"),
        };
        let (controllers, kubelets) = start_controllers(&inner).await?;
        if let Some(kubelets) = &kubelets {
            inner.server().set_pod_logs(Arc::new(kubelets.clone()));
            *inner
                .kubelets
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(kubelets.clone());
        }
        Ok(TestEnv {
            client,
            socket,
            inner,
            kubelets,
            _controllers: controllers,
        })
    }

    async fn build(
        &self,
        store: &Arc<dyn KvStore>,
        token: &str,
        decisions: &DecisionLog,
    ) -> Result<Arc<ApiServer>, Error> {
        let decisions = decisions.clone();
        ApiServer::builder(store.clone())
            .bearer_token(token)
            .observe_authorization(move |attributes, decision| {
                decisions.observe(attributes, decision)
            })
            .authorization(self.authorization)
            .control_loops(self.control_loops)
            .watch_cache(self.watch_cache.clone())
            .webhooks(self.webhooks.webhooks().clone())
            .record_admissions(ADMISSION_RECORDS)
            .service_account_key(self.service_account_key.clone())
            .build()
            .await
            .map_err(Error::Server)
    }
}

/// Serves `server` behind `faults` (which see every request first) on `addr`.
async fn serve(faults: &Faults, server: &Arc<ApiServer>, addr: &str) -> Result<Serving, Error> {
    let service = axum::Router::new().fallback_service(faults.layer().layer(server.router()));
    Serve::new(service).bind(addr).await.map_err(Error::Serve)
}

/// A client for the server at `url`, as the user of the bearer `token`.
fn socket_client(url: &str, token: &str, namespace: &str) -> Result<kube::Client, Error> {
    let uri = url
        .parse()
        .expect("an http URL of a socket address is a valid URI");
    let mut config = kube::Config::new(uri);
    config.default_namespace = namespace.to_string();
    config.auth_info.token = Some(token.to_string().into());
    kube::Client::try_from(config).map_err(Error::Client)
}

/// A client that calls `inner`'s server in-process through its faults, as the user of the
/// bearer `token`. It retries 429, 503 and 504 answers as a client built from a
/// `kube::Config` does, so both kinds of client meet faults the same way.
/// A client past the faults and the request log that follows restarts (see
/// [`TestEnv::direct_client`]): as the holder of `token` (the admin's by default),
/// impersonating `user` if given.
fn direct_client(inner: &Arc<Inner>, token: Option<String>, user: Option<&str>) -> kube::Client {
    direct_client_weak(Arc::downgrade(inner), token, user)
}

fn direct_client_weak(
    inner: Weak<Inner>,
    token: Option<String>,
    user: Option<&str>,
) -> kube::Client {
    let user = user.and_then(|u| http::HeaderValue::from_str(u).ok());
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let (inner, token, user) = (inner.clone(), token.clone(), user.clone());
        async move {
            let Some(inner) = inner.upgrade() else {
                return Err(Error::Stopped);
            };
            let router = {
                let _up = inner.up.read().await;
                inner.server().router()
            };
            if !request.headers().contains_key(http::header::AUTHORIZATION) {
                let bearer = format!("Bearer {}", token.as_deref().unwrap_or(&inner.token));
                if let Ok(value) = http::HeaderValue::from_str(&bearer) {
                    request
                        .headers_mut()
                        .insert(http::header::AUTHORIZATION, value);
                }
            }
            if let Some(user) = user {
                request.headers_mut().insert("impersonate-user", user);
            }
            match router.oneshot(request).await {
                Ok(response) => Ok(response),
                Err(never) => match never {},
            }
        }
    });
    kube::Client::new(service, "default")
}

/// Starts the controllers the builder selected, as `konverge up` does: informers as
/// `system:kube-controller-manager`, each controller as its ServiceAccount, past the faults;
/// and the simulated nodes, whose kubelets' handle comes back.
async fn start_controllers(
    inner: &Arc<Inner>,
) -> Result<(Option<RunningManager>, Option<Kubelets>), Error> {
    let selection = inner.builder.controllers.clone();
    let nodes = inner.builder.nodes;
    if selection.enabled().next().is_none() && nodes == 0 {
        return Ok((None, None));
    }
    let kcm = direct_client(inner, None, Some("system:kube-controller-manager"));
    let admin = direct_client(inner, None, None);
    let weak = Arc::downgrade(inner);
    let tokens = ServiceAccountTokens::new(admin.clone(), move |token| {
        direct_client_weak(weak.clone(), Some(token), None)
    });
    let mut manager = ControllerManager::new(kcm)
        .selection(selection)
        .credentials(tokens)
        .clock(Clock::tokio());
    let mut kubelets = None;
    if nodes > 0 {
        let simulated = SimulatedNodes::new(nodes).zones(inner.builder.zones.clone());
        kubelets = Some(simulated.kubelets());
        manager = manager.simulated_nodes(simulated, admin);
    }
    let running = manager.spawn().await.map_err(Error::Controllers)?;
    Ok((Some(running), kubelets))
}

fn in_process_client(inner: &Arc<Inner>, token: &str, namespace: &str) -> kube::Client {
    let inner = Arc::downgrade(inner);
    let bearer = http::HeaderValue::from_str(&format!("Bearer {token}")).ok();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        call_in_process(inner.clone(), bearer.clone(), request)
    });
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::server_retry()))
        .service(service);
    kube::Client::new(service, namespace)
}

/// One request of an in-process client: refused while the server is down, answered by the
/// faults and the router of the server running now, and cut (a response still awaited, or
/// a body still streaming, such as a watch) when that server stops.
async fn call_in_process(
    inner: Weak<Inner>,
    bearer: Option<http::HeaderValue>,
    mut request: http::Request<kube::client::Body>,
) -> Result<http::Response<axum::body::Body>, BoxError> {
    let (service, cut) = {
        let inner = inner.upgrade().ok_or(Error::Stopped)?;
        let Ok(_up) = inner.up.try_read() else {
            return Err(Error::Down.into());
        };
        let cut = inner
            .cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        (inner.faults.layer().layer(inner.server().router()), cut)
    };
    if let Some(bearer) = bearer
        && !request.headers().contains_key(http::header::AUTHORIZATION)
    {
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, bearer);
    }
    let request = request.map(axum::body::Body::new);
    let response = tokio::select! {
        () = cut.cancelled() => return Err(Error::Cut.into()),
        response = service.oneshot(request) => match response {
            Ok(response) => response,
            Err(never) => match never {},
        },
    };
    // A cut connection ends a body where it is, as a socket's does for kube's client.
    Ok(response.map(|body| {
        let stream = body.into_data_stream().take_until(cut.cancelled_owned());
        axum::body::Body::from_stream(crate::faults::drop_at_end(stream, ()))
    }))
}

/// A konverge API server and a `kube::Client` for it, with [`Faults`] and a [`RequestLog`]
/// between the two: over a loopback port (plain HTTP), or in-process
/// ([`TestEnvBuilder::in_process`]).
///
/// Dropping the `TestEnv` stops the server: the listener closes and every open connection,
/// watches included, is cut (in-process, open streams end and later requests fail with
/// [`Error::Stopped`]). The server's control loops (when on) work on its registry, not over
/// HTTP, and stop with the Tokio runtime — a `#[tokio::test]`'s ends with the test.
pub struct TestEnv {
    client: kube::Client,
    /// The URL and address of the loopback port; `None` in-process.
    socket: Option<(String, SocketAddr)>,
    inner: Arc<Inner>,
    /// The simulated nodes' kubelets, when there are any.
    kubelets: Option<Kubelets>,
    /// kube-controller-manager's controllers (stopped when dropped).
    _controllers: Option<RunningManager>,
}

/// What changes when the server restarts, and what it needs to start again.
struct Inner {
    builder: TestEnvBuilder,
    /// The admin's bearer token.
    token: String,
    /// Every authorization decision about users outside `system:masters`.
    decisions: DecisionLog,
    /// The loopback port served on; `None` in-process.
    addr: Option<SocketAddr>,
    store: Arc<dyn KvStore>,
    /// The same store as `store`, when it is the disk store (to reopen).
    disk: Option<Arc<TempDiskStore>>,
    server: Mutex<Arc<ApiServer>>,
    // Dropping it stops serving and cuts every connection.
    serving: Mutex<Option<Serving>>,
    /// Held for writing while the server restarts: the direct client waits on it, in-process
    /// clients through the faults are refused.
    up: tokio::sync::RwLock<()>,
    /// Cancelled when the server stops (a restart, or the `TestEnv` dropped): cuts the
    /// in-process clients' requests and streams, as a socket's connections are cut. A
    /// restart puts a fresh one in its place.
    cut: Mutex<CancellationToken>,
    faults: Faults,
    /// The simulated kubelets, once started: they answer every server's `pods/log`.
    kubelets: Mutex<Option<Kubelets>>,
}

impl Inner {
    fn server(&self) -> Arc<ApiServer> {
        self.server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Cuts every in-process connection open now.
    fn cut(&self) {
        let cut = std::mem::replace(
            &mut *self.cut.lock().unwrap_or_else(PoisonError::into_inner),
            CancellationToken::new(),
        );
        cut.cancel();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.cut();
    }
}

#[async_trait::async_trait]
impl Restart for Inner {
    async fn restart(&self, down: Duration) -> Result<(), Error> {
        let _down = self.up.write().await;
        // The process dies: every connection is cut, the port refuses new ones, and nothing
        // of the old server runs on.
        drop(
            self.serving
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        self.cut();
        self.server().stop();
        if let Some(disk) = &self.disk {
            disk.reopen().await?;
        }
        tokio::time::sleep(down).await;
        // A new process: a fresh server over what the store kept, on the same address.
        let server = self
            .builder
            .build(&self.store, &self.token, &self.decisions)
            .await?;
        if let Some(addr) = self.addr {
            server.set_address(addr.to_string());
            let serving = serve(&self.faults, &server, &addr.to_string()).await?;
            serving.ready().await;
            *self.serving.lock().unwrap_or_else(PoisonError::into_inner) = Some(serving);
        }
        self.faults.follow(&server);
        if let Some(kubelets) = &*self.kubelets.lock().unwrap_or_else(PoisonError::into_inner) {
            server.set_pod_logs(Arc::new(kubelets.clone()));
        }
        *self.server.lock().unwrap_or_else(PoisonError::into_inner) = server;
        Ok(())
    }
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field(
                "url",
                &self.socket.as_ref().map_or("in-process", |(url, _)| url),
            )
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
            transport: Transport::Socket,
            watch_cache: WatchCacheConfig::default(),
            control_loops: true,
            authorization: AuthorizationMode::Rbac,
            webhooks: InProcess::default(),
            controllers: Selection::all(),
            service_account_key:
                konverge_apiserver::auth::tokens::ServiceAccountTokens::generate_key(),
            nodes: 0,
            zones: Vec::new(),
        }
    }

    /// The simulated nodes' kubelets ([`TestEnvBuilder::nodes`]), to act on them as a
    /// cluster's nodes are acted on: stop and start a kubelet (a node lost and back), crash
    /// a pod's containers, make the next pods admitted fail to pull or start slowly. `None`
    /// without simulated nodes. [`FaultPlan::run_on`](crate::FaultPlan::run_on) uses it for
    /// the plan's cluster faults.
    pub fn kubelets(&self) -> Option<Kubelets> {
        self.kubelets.clone()
    }

    /// A client for the server, as the admin, through the [`Faults`] (a cheap clone; all
    /// clones share one connection pool): over the loopback port, or in-process for an
    /// environment built with [`TestEnvBuilder::in_process`].
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A client that calls the server in-process, as the admin, through the [`Faults`] and
    /// into the [`RequestLog`] like [`client`](Self::client) — what `client` is for an
    /// environment built with [`TestEnvBuilder::in_process`]; beside a loopback port, a
    /// second client with the same faults and log. While the server
    /// [restarts](Self::restart) its requests are refused ([`Error::Down`]) and those in
    /// flight, watches included, are cut, as a socket's are.
    ///
    /// It works under Tokio's paused time (see [`TestEnvBuilder::in_process`]); while the
    /// environment also serves a loopback port nothing else changes, but that port's own
    /// client does not work paused.
    pub fn in_process_client(&self) -> kube::Client {
        match &self.socket {
            None => self.client.clone(),
            Some(_) => in_process_client(&self.inner, &self.inner.token, "default"),
        }
    }

    /// The server's base URL, `http://127.0.0.1:<port>`. An in-process environment has
    /// none: it gives `http://in-process.invalid`, under a top-level domain reserved never
    /// to resolve, so a client pointed at it fails to connect rather than reach another
    /// server.
    pub fn url(&self) -> String {
        match &self.socket {
            Some((url, _)) => url.clone(),
            None => IN_PROCESS_URL.to_string(),
        }
    }

    /// The address the server listens on (the same after a [restart](Self::restart)). An
    /// in-process environment listens nowhere: it gives the unspecified address `0.0.0.0:0`,
    /// which no connection reaches; [`socket_addr`](Self::socket_addr) tells the two apart.
    pub fn addr(&self) -> SocketAddr {
        self.socket_addr()
            .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The address the server listens on, or `None` for an in-process environment
    /// ([`TestEnvBuilder::in_process`]).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        self.socket.as_ref().map(|(_, addr)| *addr)
    }

    /// The API server itself, for in-process calls to its registry: the one running now (a
    /// [restart](Self::restart) starts another).
    pub fn server(&self) -> Arc<ApiServer> {
        self.inner.server()
    }

    /// The store under the server.
    pub fn store(&self) -> &Arc<dyn KvStore> {
        &self.inner.store
    }

    /// A client that reaches the server in-process, past the [`Faults`] (nothing is injected
    /// into its requests, and they are not in the [`RequestLog`]): for a test's own writes
    /// and observers, which should not count as the controller under test. It follows
    /// restarts: while the server is down its requests wait, then go to the new server.
    pub fn direct_client(&self) -> kube::Client {
        direct_client(&self.inner, None, None)
    }

    /// Restarts the API server, as when its process is killed and started again: every
    /// connection (watches included) is cut and the port refuses connections for `down`
    /// (in-process, requests are refused with [`Error::Down`]); the
    /// server's control loops and watch caches stop; with the disk store, the store is
    /// closed and opened again from its files. Then a new server starts on the same address
    /// over what the store kept — every acknowledged write, the same revisions — with empty
    /// watch caches, so clients must reconnect and watch again (from a resourceVersion the
    /// store still has, or relist). With the in-memory store the store stays up, as etcd does
    /// when kube-apiserver restarts.
    pub async fn restart(&self, down: Duration) -> Result<(), Error> {
        self.inner.restart(down).await
    }

    /// Applies Kubernetes manifests as the admin — YAML documents separated by `---` (the
    /// ServiceAccount, Roles and bindings an operator ships) — with server-side apply (field
    /// manager `konverge-testkit`), in order. Stops at the first document that is not an
    /// object of a served kind or that the server refuses.
    pub async fn apply_manifests(&self, yaml: &str) -> Result<(), Error> {
        let client = self.direct_client();
        let discovery = kube::Discovery::new(client.clone())
            .run()
            .await
            .map_err(Error::Request)?;
        let documents = split_documents(yaml);
        for (index, text) in documents.iter().enumerate() {
            let fail = |message: String| Error::Manifest { index, message };
            let value = konverge_apimachinery::decoding::yaml(text)
                .map_err(|e| fail(e.to_string()))?
                .value;
            if value.is_null() {
                continue;
            }
            let object: kube::api::DynamicObject =
                serde_json::from_value(value.clone()).map_err(|e| fail(e.to_string()))?;
            let types = object
                .types
                .clone()
                .ok_or_else(|| fail("no apiVersion and kind".into()))?;
            let gvk =
                kube::api::GroupVersionKind::try_from(&types).map_err(|e| fail(e.to_string()))?;
            let (resource, capabilities) = discovery.resolve_gvk(&gvk).ok_or_else(|| {
                fail(format!(
                    "{} {} is not served",
                    types.api_version, types.kind
                ))
            })?;
            let name = object
                .metadata
                .name
                .clone()
                .ok_or_else(|| fail("no metadata.name".into()))?;
            let api: kube::Api<kube::api::DynamicObject> =
                if capabilities.scope == kube::discovery::Scope::Namespaced {
                    let namespace = object.metadata.namespace.as_deref().unwrap_or("default");
                    kube::Api::namespaced_with(client.clone(), namespace, &resource)
                } else {
                    kube::Api::all_with(client.clone(), &resource)
                };
            let params = kube::api::PatchParams::apply("konverge-testkit").force();
            api.patch(&name, &params, &kube::api::Patch::Apply(&value))
                .await
                .map_err(|e| fail(e.to_string()))?;
        }
        Ok(())
    }

    /// A client acting as the ServiceAccount `namespace/name` (created if it does not exist),
    /// with a token from the TokenRequest API: its requests go through the [`Faults`] like
    /// [`client`](Self::client)'s (over the same transport: in-process for an environment
    /// built with [`TestEnvBuilder::in_process`]) and are authorized by RBAC, so it can do exactly what the
    /// roles bound to the ServiceAccount allow. [`permissions`](Self::permissions) reports
    /// what it used and lacked.
    pub async fn client_for(&self, namespace: &str, name: &str) -> Result<kube::Client, Error> {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        let accounts: kube::Api<ServiceAccount> =
            kube::Api::namespaced(self.direct_client(), namespace);
        let mut account = ServiceAccount::default();
        account.metadata.name = Some(name.to_string());
        match accounts.create(&Default::default(), &account).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(Error::Request(e)),
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(24 * 3600),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let token = accounts
            .create_token_request(name, &Default::default(), &request)
            .await
            .map_err(Error::Request)?
            .status
            .map(|s| s.token)
            .unwrap_or_default();
        match &self.socket {
            Some((url, _)) => socket_client(url, &token, namespace),
            None => Ok(in_process_client(&self.inner, &token, namespace)),
        }
    }

    /// What the ServiceAccount `namespace/name` did with its permissions so far: the granted
    /// permissions its requests used, the requests denied (each with the rule that would
    /// allow it), and the granted permissions it never used — judged against the roles bound
    /// to it by name. `Display` is a readable report; [`Permissions::assert_no_denials`] fails
    /// a test on any denial. Empty grants under [`AuthorizationMode::AlwaysAllow`].
    pub async fn permissions(&self, namespace: &str, name: &str) -> Permissions {
        let user = konverge_apiserver::auth::user::UserInfo::service_account(namespace, name, "");
        let grants = match self.server().rbac() {
            Some(rbac) => match rbac.snapshot().await {
                Ok(snapshot) => snapshot.grants_to(&user),
                Err(_) => Vec::new(),
            },
            None => Vec::new(),
        };
        Permissions::judge(&user.name, &self.inner.decisions, &grants)
    }

    /// Serves another admission webhook in-process; see [`TestEnvBuilder::webhook`]. It
    /// answers from the next request on.
    pub fn webhook<F, Fut>(&self, namespace: &str, name: &str, path: &str, handler: F)
    where
        F: Fn(AdmissionRequest<DynamicObject>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = AdmissionResponse> + Send + 'static,
    {
        self.inner
            .builder
            .webhooks
            .admission(namespace, name, path, handler);
    }

    /// Serves another CRD conversion webhook in-process; see
    /// [`TestEnvBuilder::conversion_webhook`].
    pub fn conversion_webhook<F, Fut>(&self, namespace: &str, name: &str, path: &str, handler: F)
    where
        F: Fn(ConversionRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ConversionResponse> + Send + 'static,
    {
        self.inner
            .builder
            .webhooks
            .conversion(namespace, name, path, handler);
    }

    /// What admission did on the server's most recent requests (up to 1,024, oldest first):
    /// for each create, update and delete, which built-in plugins, admission policies and
    /// webhooks ran and what each decided, and the warnings sent back. Since the last
    /// restart.
    pub fn admissions(&self) -> Vec<Record> {
        let server = self.server();
        server
            .registry()
            .admission()
            .log()
            .map(|log| log.records())
            .unwrap_or_default()
    }

    /// The fault-injection handle: drop watches, expire history, inject errors and latency.
    /// Cheap; every call returns a handle on the same faults.
    pub fn faults(&self) -> Faults {
        self.inner.faults.clone()
    }

    /// The record of every request clients sent to the server (the same as
    /// `faults().requests()`).
    pub fn requests(&self) -> RequestLog {
        self.inner.faults.requests()
    }

    /// Writes a kubeconfig for this server to `path` (cluster, user and context named
    /// `konverge-testkit`, with the admin's token), so real tools (`kubectl --kubeconfig`) can
    /// look at what a test did.
    ///
    /// An in-process environment ([`TestEnvBuilder::in_process`]) has no address to write:
    /// it fails with an error of kind [`io::ErrorKind::Unsupported`] wrapping
    /// [`Error::NoSocket`], and writes nothing.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let Some((url, _)) = &self.socket else {
            return Err(io::Error::new(io::ErrorKind::Unsupported, Error::NoSocket));
        };
        let mut config = konverge_apiserver::serve::kubeconfig("konverge-testkit", url, None);
        for user in &mut config.auth_infos {
            if let Some(auth) = &mut user.auth_info {
                auth.token = Some(self.inner.token.clone().into());
            }
        }
        let yaml =
            konverge_apiserver::serve::kubeconfig::render(&config).map_err(io::Error::other)?;
        std::fs::write(path, yaml)
    }
}

/// A `DiskStore` in a temporary directory that lives exactly as long as the store: the
/// server's control loops may hold the store after the [`TestEnv`] is gone, and the directory
/// must not be removed under an open store. It can be closed and opened again in place, as a
/// restarted process does.
struct TempDiskStore {
    /// `None` while it is being reopened.
    store: RwLock<Option<konverge_store_disk::DiskStore>>,
    // Declared after the store, so the store closes before the directory is removed.
    dir: tempfile::TempDir,
}

/// How long a reopen waits for the last user of the old store to let go.
const REOPEN_TIMEOUT: Duration = Duration::from_secs(10);

impl TempDiskStore {
    fn open() -> Result<Self, Error> {
        let dir = tempfile::tempdir().map_err(Error::TempDir)?;
        let store = konverge_store_disk::DiskStore::open(dir.path()).map_err(Error::Store)?;
        Ok(TempDiskStore {
            store: RwLock::new(Some(store)),
            dir,
        })
    }

    fn current(&self) -> konverge_store::Result<konverge_store_disk::DiskStore> {
        self.store
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(konverge_store::Error::Closed)
    }

    /// Closes the store and opens it again from its files. The directory stays locked until
    /// the last handle and watch of the old store are gone (calls in flight and the watches
    /// of a stopped server end within moments); until then opening is retried.
    async fn reopen(&self) -> Result<(), Error> {
        let old = self
            .store
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(old);
        let deadline = tokio::time::Instant::now() + REOPEN_TIMEOUT;
        let store = loop {
            match konverge_store_disk::DiskStore::open(self.dir.path()) {
                Ok(store) => break store,
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => return Err(Error::Store(e)),
            }
        };
        *self.store.write().unwrap_or_else(PoisonError::into_inner) = Some(store);
        Ok(())
    }
}

/// Every method the disk store implements goes straight to it (the rest are the trait's
/// defaults, built on these); while it is being reopened, calls fail as on a closed store.
#[async_trait::async_trait]
impl KvStore for TempDiskStore {
    async fn range(&self, req: RangeRequest) -> konverge_store::Result<RangeResponse> {
        self.current()?.range(req).await
    }

    async fn txn(&self, txn: Txn) -> konverge_store::Result<TxnResponse> {
        self.current()?.txn(txn).await
    }

    async fn watch(&self, req: WatchRequest) -> konverge_store::Result<WatchStream> {
        self.current()?.watch(req).await
    }

    async fn compact(&self, revision: Revision) -> konverge_store::Result<()> {
        self.current()?.compact(revision).await
    }

    async fn current_revision(&self) -> konverge_store::Result<Revision> {
        self.current()?.current_revision().await
    }
}

/// The documents of a multi-document YAML text (split at `---` lines).
fn split_documents(yaml: &str) -> Vec<String> {
    let mut documents = vec![String::new()];
    for line in yaml.lines() {
        if line == "---" || line.starts_with("--- ") {
            documents.push(String::new());
            continue;
        }
        let current = documents.last_mut().expect("never empty");
        current.push_str(line);
        current.push('\n');
    }
    documents.retain(|d| !d.trim().is_empty());
    documents
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
