//! A Kubernetes-compatible API server over konverge's revisioned store.
//!
//! kubectl, kube-rs, client-go and the Python client talk to it unchanged. It runs in-process
//! (tests build one in milliseconds over a [`MemStore`](konverge_store::MemStore)) or
//! standalone (`konverge up`, over the disk store).
//!
//! # Where to start
//!
//! The folders follow a request's path:
//!
//! - [`ApiServer`]: build one over any [`KvStore`], then serve [`ApiServer::router`] — a
//!   `tower::Service` — with [`serve::Serve`], or call it directly.
//! - [`http`]: the front door: routing ([`http::route`]), query and body decoding, content
//!   negotiation, discovery, OpenAPI, patch bodies, scale, `Table`s, health checks, and the
//!   encoding of every answer.
//! - [`registry`]: the one generic implementation of every verb for every resource
//!   (metadata rules, generation, `guaranteed_update`, finalizers, resourceVersion semantics,
//!   watch cache), server-side apply and managed fields ([`registry::apply`]), Service address
//!   allocation, and the subresources that act ([`registry::subresources`]).
//! - [`resources`]: what is served: the [`resources::Catalog`], every built-in kind
//!   ([`resources::builtin`]), custom resources ([`resources::crd`]), object metadata rules
//!   ([`resources::meta`]) and the review resources.
//! - [`admission`]: what the registry runs between decoding a write and storing it: the
//!   built-in admission plugins, ValidatingAdmissionPolicy ([`admission::policy`]) and the
//!   admission webhooks ([`admission::webhook`]), with the rule and selector matching they
//!   share ([`admission::matching`]).
//! - [`logs`]: `pods/log`, checked as kube-apiserver checks it and answered by whoever runs
//!   the (simulated) kubelets, through the [`PodLogs`] hook.
//! - [`webhook`]: calling admission and CRD conversion webhooks over HTTPS (by URL or
//!   Service), or in-process.
//! - [`aggregator`]: group-versions served by aggregated API servers (APIServices naming a
//!   Service): the proxy to them, their availability checks and their discovery.
//! - [`controllers`]: what runs without a request: bootstrap objects, garbage collection,
//!   namespaces, ClusterRole aggregation, ResourceQuota usage, policy type checking,
//!   definitions, compaction.
//! - [`metrics`]: `GET /metrics`, kube-apiserver's Prometheus metrics (requests, latencies,
//!   in-flight and long-running requests, watch events, stored objects, store latency) under
//!   kube's names, labels and buckets, recorded once per request by the dispatcher.
//! - [`flowcontrol`]: API Priority and Fairness: which FlowSchema and priority level take
//!   each request (named in its response's headers), the bootstrap configuration, seat
//!   limits.
//! - [`auth`]: who is asking (the admin token, ServiceAccount tokens, client certificates,
//!   impersonation) and whether they may (RBAC, or everything allowed).
//! - [`serve`]: the network around the API: HTTPS or HTTP serving with graceful shutdown,
//!   the CA, serving certificate and token, and kubeconfigs (what `konverge up` and the
//!   testkit use).
//! - [`error`]: `Status` failures, and the single place storage errors become API errors.
//!
//! `docs/architecture.md` in the repository walks the same path in prose.

pub mod admission;
pub mod aggregator;
pub mod audit;
pub mod auth;
pub mod controllers;
pub mod error;
pub mod flowcontrol;
pub mod http;
mod json;
pub mod lister;
pub mod logs;
pub mod metrics;
pub mod registry;
pub mod resources;
pub mod serve;
pub mod webhook;

#[cfg(test)]
mod builder_tests;

use std::sync::{Arc, RwLock};

use konverge_store::KvStore;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::registry::Registry;
use crate::resources::Catalog;

/// The Kubernetes version the server reports and whose API it serves.
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "33");

/// The user the server's bearer token authenticates (the `konverge up` admin).
pub const ADMIN_USER: &str = "kubernetes-admin";

/// The admin's groups.
pub const ADMIN_GROUPS: [&str; 2] = ["system:masters", "system:authenticated"];

pub use controllers::bootstrap::SYSTEM_NAMESPACES;
pub use logs::{LogLine, PodLogs};
pub use registry::ServiceIpRange;

/// The admission plugin whose rule (a namespaced object's namespace exists and is not
/// terminating) the registry enforces itself.
const NAMESPACE_LIFECYCLE: &str = "NamespaceLifecycle";

/// Builds an [`ApiServer`].
#[derive(Clone)]
pub struct ApiServerBuilder {
    store: Arc<dyn KvStore>,
    token: Option<String>,
    control_loops: bool,
    /// Whether the loops run under the caller's leader election
    /// ([`ApiServerBuilder::elected_control_loops`]).
    elected_loops: bool,
    compaction_interval: std::time::Duration,
    watch_cache: registry::WatchCacheConfig,
    root_ca: Option<String>,
    client_ca: Option<String>,
    front_proxy: Option<Arc<aggregator::FrontProxy>>,
    service_account_key: Option<Vec<u8>>,
    authorization: AuthorizationMode,
    observer: Option<auth::authz::Observer>,
    webhooks: webhook::Webhooks,
    disabled_admission: Vec<String>,
    admission_log: Option<usize>,
    bootstrap: controllers::bootstrap::Config,
    service_account_issuer: String,
    service_account_public_keys: Vec<Vec<u8>>,
    allow_privileged: bool,
    audit: Option<Arc<audit::Audit>>,
    runtime_config: resources::runtime_config::RuntimeConfig,
}

/// How the server decides whether a request may be done (`--authorization-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorizationMode {
    /// Everything is allowed (the builder's default: in-process servers of tests that do not
    /// care who asks).
    #[default]
    AlwaysAllow,
    /// Roles, ClusterRoles and their bindings decide, as on a cluster (`konverge up`'s
    /// default); `system:masters` may do anything.
    Rbac,
}

impl ApiServerBuilder {
    /// Tells `observer` of every request authorized (after authentication and impersonation)
    /// and what was decided — for tools that report which permissions a client used or
    /// lacked (konverge-testkit's permission report).
    pub fn observe_authorization(
        mut self,
        observer: impl Fn(&auth::authz::Attributes, &auth::authz::Decision) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// How the server reaches admission and conversion webhooks: in-process handlers and
    /// Service addresses registered on `webhooks` (which may also be registered later).
    pub fn webhooks(mut self, webhooks: webhook::Webhooks) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// Turns off the admission plugins named (`--disable-admission-plugins`, with
    /// kube-apiserver's names: `LimitRanger`, `ValidatingAdmissionWebhook`, ...). Building
    /// fails on a name the server does not know.
    pub fn disable_admission_plugins(
        mut self,
        names: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.disabled_admission = names.into_iter().map(Into::into).collect();
        self
    }

    /// Keeps a record of the last `capacity` requests admission saw: which plugins, policies
    /// and webhooks ran on each and what they decided ([`admission::Chain::log`]).
    pub fn record_admissions(mut self, capacity: usize) -> Self {
        self.admission_log = Some(capacity);
        self
    }

    /// How requests are authorized (default [`AuthorizationMode::AlwaysAllow`]).
    pub fn authorization(mut self, mode: AuthorizationMode) -> Self {
        self.authorization = mode;
        self
    }

    /// The ECDSA P-256 key (PKCS#8 DER) ServiceAccount tokens are signed with; without one,
    /// the server makes a key that lasts as long as it runs.
    pub fn service_account_key(mut self, pkcs8_der: impl Into<Vec<u8>>) -> Self {
        self.service_account_key = Some(pkcs8_der.into());
        self
    }

    /// The PEM of the CA clients verify the server with; published in every namespace as the
    /// `kube-root-ca.crt` ConfigMap, as kube-controller-manager does.
    pub fn root_ca(mut self, pem: impl Into<String>) -> Self {
        self.root_ca = Some(pem.into());
        self
    }

    /// The PEM of the CAs whose client certificates the server accepts (`--client-ca-file`);
    /// published in `kube-system` as the `extension-apiserver-authentication` ConfigMap's
    /// `client-ca-file`, where aggregated API servers read it.
    pub fn client_ca(mut self, pem: impl Into<String>) -> Self {
        self.client_ca = Some(pem.into());
        self
    }

    /// The front proxy's identity (`--proxy-client-cert-file` and
    /// `--requestheader-client-ca-file`): what the server presents to aggregated API servers,
    /// and publishes for them in `extension-apiserver-authentication`. Without one, a CA and
    /// client certificate made once per process.
    pub fn front_proxy(mut self, front_proxy: aggregator::FrontProxy) -> Self {
        self.front_proxy = Some(Arc::new(front_proxy));
        self
    }

    /// The admin's bearer token. With one, requests without credentials are anonymous (and
    /// forbidden nearly everything under RBAC); without, they are the admin.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The range Service cluster IPs are allocated from (`--service-cluster-ip-range`,
    /// default 10.96.0.0/12): the `kubernetes` ServiceCIDR's, whose first address is the
    /// `kubernetes` Service's IP. A store that already holds a `kubernetes` ServiceCIDR keeps
    /// it, as kube-apiserver does.
    pub fn service_ip_range(mut self, range: ServiceIpRange) -> Self {
        self.bootstrap.service_ip_range = range;
        self
    }

    /// Where the `kubernetes` Service's Endpoints and EndpointSlice point, and its
    /// `targetPort` (`--advertise-address` and `--secure-port`; default 127.0.0.1:6443).
    pub fn advertise(mut self, address: std::net::IpAddr, port: u16) -> Self {
        self.bootstrap.advertise_address = address;
        self.bootstrap.advertise_port = port;
        self
    }

    /// The issuer of ServiceAccount tokens (`--service-account-issuer`, default
    /// [`auth::tokens::ISSUER`]): the `iss` tokens carry and must carry, the issuer of the
    /// OIDC discovery document, and the default audience of TokenRequests, TokenReviews and
    /// bearer tokens (as kube-apiserver's `--api-audiences` defaults to the issuer).
    pub fn service_account_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.service_account_issuer = issuer.into();
        self
    }

    /// More ECDSA P-256 public keys (SubjectPublicKeyInfo DER) whose ServiceAccount tokens
    /// are accepted, published in `/openid/v1/jwks` too — as kube-apiserver verifies with
    /// every key of `--service-account-key-file`. [`build`](Self::build) fails on a key that
    /// is not P-256.
    pub fn service_account_public_keys(mut self, spki_der: Vec<Vec<u8>>) -> Self {
        self.service_account_public_keys = spki_der;
        self
    }

    /// Whether pods (and the pod templates of workloads) may have privileged containers
    /// (`--allow-privileged`). Default: yes, as `konverge up` allows them; kube-apiserver's
    /// default is no. When not, a container with `securityContext.privileged: true` is refused
    /// by validation, `Forbidden: disallowed by cluster policy`, as kube-apiserver refuses it.
    pub fn allow_privileged(mut self, allow: bool) -> Self {
        self.allow_privileged = allow;
        self
    }

    /// Writes an audit log of the requests `audit`'s policy picks (`--audit-policy-file`,
    /// `--audit-log-path`; default: none).
    pub fn audit(mut self, audit: audit::Audit) -> Self {
        self.audit = Some(Arc::new(audit));
        self
    }

    /// Whether to run kube-controller-manager's loops (default: yes): the garbage collector,
    /// namespace finalization, every namespace's `default` ServiceAccount and
    /// `kube-root-ca.crt`, ClusterRole aggregation, ResourceQuota usage and the type checking
    /// of ValidatingAdmissionPolicies. What kube-apiserver itself does runs either way: the
    /// bootstrap objects, the CRD controller and compaction.
    pub fn control_loops(mut self, run: bool) -> Self {
        self.control_loops = run;
        self.elected_loops = false;
        self
    }

    /// Runs kube-controller-manager's loops (those [`control_loops`](Self::control_loops)
    /// names) only where the caller says: the server still makes their first pass before
    /// [`build`](Self::build) returns, but then leaves them to
    /// [`ApiServer::run_control_loops`], which the caller runs under leader election (the
    /// `kube-system/kube-controller-manager` Lease), so that of several servers over one store
    /// one acts.
    pub fn elected_control_loops(mut self) -> Self {
        self.control_loops = true;
        self.elected_loops = true;
        self
    }

    /// The group-versions served beyond Kubernetes 1.33's defaults (`--runtime-config`;
    /// default: none).
    pub fn runtime_config(mut self, config: resources::runtime_config::RuntimeConfig) -> Self {
        self.runtime_config = config;
        self
    }

    /// How often history older than one interval is compacted away (default 5 minutes, as
    /// kube-apiserver does with etcd).
    pub fn compaction_interval(mut self, interval: std::time::Duration) -> Self {
        self.compaction_interval = interval;
        self
    }

    /// How lists and watches are served from memory (default: a watch cache per resource
    /// keeping 10,000 events; see [`registry::WatchCacheConfig`]).
    pub fn watch_cache(mut self, config: registry::WatchCacheConfig) -> Self {
        self.watch_cache = config;
        self
    }

    /// Creates the server and the objects a cluster has from the start (the system
    /// namespaces, bootstrap RBAC, the `kubernetes` ServiceCIDR, the `default/kubernetes`
    /// Service), if they are missing.
    /// With control loops on, their first pass also runs before this returns, so the server
    /// is settled when its first client arrives: every namespace has its `default`
    /// ServiceAccount (and `kube-root-ca.crt`), and aggregated ClusterRoles have their rules.
    pub async fn build(self) -> Result<Arc<ApiServer>, ApiError> {
        let catalog = Arc::new(Catalog::with_runtime_config(&self.runtime_config));
        if !self.allow_privileged {
            resources::builtin::refuse_privileged(&catalog);
        }
        let tokens = match &self.service_account_key {
            Some(der) => auth::tokens::ServiceAccountTokens::from_pkcs8(der)
                .map_err(|e| ApiError::internal(format!("the service account key: {e}")))?,
            None => auth::tokens::ServiceAccountTokens::generate(),
        };
        let tokens = tokens
            .with_issuer(self.service_account_issuer.clone())
            .with_public_keys(&self.service_account_public_keys)
            .map_err(|e| ApiError::internal(format!("the service account keys: {e}")))?;
        let metrics = Arc::new(metrics::Metrics::new());
        let registry = Registry::new(self.store, catalog)
            .with_watch_cache(self.watch_cache)
            .with_metrics(metrics.clone())
            .with_webhooks(self.webhooks.clone());
        let tokens = Arc::new(tokens);
        let mut rbac = None;
        let (registry, authorization) = match self.authorization {
            AuthorizationMode::AlwaysAllow => (
                registry,
                auth::authz::Authorization::new(
                    Arc::new(auth::authz::AlwaysAllow),
                    self.observer.clone(),
                ),
            ),
            AuthorizationMode::Rbac => {
                let authorizer = Arc::new(auth::rbac::Rbac::new(Arc::new(registry.clone())));
                rbac = Some(authorizer.clone());
                let authorization =
                    auth::authz::Authorization::new(authorizer.clone(), self.observer.clone());
                let escalation = auth::rbac::Escalation::new(authorizer, authorization.clone());
                (
                    registry.with_write_check(Arc::new(escalation)),
                    authorization,
                )
            }
        };
        // The dynamic admission plugins run after the built-in ones and before
        // ResourceQuota, in kube-apiserver's order. They read through a registry whose chain
        // does not hold them.
        let dynamic: Arc<dyn lister::Lister> = Arc::new(registry.clone());
        let mut chain = admission::Chain::builtin()
            .with_before(
                "ResourceQuota",
                Arc::new(admission::MutatingAdmissionWebhook::new(
                    dynamic.clone(),
                    self.webhooks.clone(),
                    authorization.clone(),
                )),
            )
            .with_before(
                "ResourceQuota",
                Arc::new(admission::policy::ValidatingAdmissionPolicy::new(
                    dynamic.clone(),
                    authorization.clone(),
                )),
            )
            .with_before(
                "ResourceQuota",
                Arc::new(admission::ValidatingAdmissionWebhook::new(
                    dynamic,
                    self.webhooks.clone(),
                    authorization.clone(),
                )),
            );
        // NamespaceLifecycle is not in the chain: the registry keeps its rule.
        let mut registry = registry;
        if self
            .disabled_admission
            .iter()
            .any(|n| n == NAMESPACE_LIFECYCLE)
        {
            registry = registry.without_namespace_lifecycle();
        }
        if !self.disabled_admission.is_empty() {
            let mut known = chain.names();
            known.push(NAMESPACE_LIFECYCLE);
            if let Some(unknown) = self
                .disabled_admission
                .iter()
                .find(|name| !known.contains(&name.as_str()))
            {
                return Err(ApiError::bad_request(format!(
                    "admission plugin {unknown:?} is unknown; the plugins are {}",
                    known.join(", ")
                )));
            }
            chain = chain.without(&self.disabled_admission);
        }
        if let Some(capacity) = self.admission_log {
            chain = chain.logged(capacity);
        }
        let registry = registry.with_admission(chain);
        let flow_control = Arc::new(flowcontrol::FlowControl::new(
            Arc::new(registry.clone()),
            metrics.clone(),
        ));
        let front_proxy = match self.front_proxy.clone() {
            Some(front_proxy) => front_proxy,
            None => aggregator::FrontProxy::for_this_process()
                .map_err(|e| ApiError::internal(e.to_string()))?,
        };
        let aggregator = Arc::new(aggregator::Aggregator::new(
            Arc::new(registry.clone()),
            self.webhooks.clone(),
            front_proxy.clone(),
        ));
        let stop = CancellationToken::new();
        let server = Arc::new(ApiServer {
            registry,
            metrics,
            flow_control,
            aggregator,
            authenticator: auth::authn::Authenticator::new(self.token, tokens.clone()),
            authorization,
            rbac,
            tokens,
            address: RwLock::new("127.0.0.1:6443".into()),
            stop: stop.clone(),
            pod_logs: RwLock::new(None),
            audit: self.audit.clone(),
            elected_loops: std::sync::Mutex::new(None),
            endpoints_stop: stop.child_token(),
            advertised: self.bootstrap.advertised(),
        });
        server.metrics.set_build_info(&server.version_info());
        let bootstrapped =
            controllers::bootstrap::run(&server.registry, &self.bootstrap, self.control_loops)
                .await?;
        controllers::crd::install_existing(&server.registry)
            .await
            .map_err(|e| {
                ApiError::from_store(
                    e,
                    error::Target {
                        group: resources::crd::GROUP,
                        resource: "customresourcedefinitions",
                        name: "",
                    },
                )
            })?;
        server.background(controllers::crd::run(server.registry.clone()));
        server.background(controllers::kube_system::run(
            server.registry.clone(),
            controllers::kube_system::Settings::for_this_host(self.client_ca.clone())
                .with_front_proxy(front_proxy),
        ));
        server.background(controllers::compaction::run(
            server.registry.store().clone(),
            self.compaction_interval,
        ));
        server.background(controllers::service_repair::run(server.registry.clone()));
        server.background(controllers::api_service_status::run(
            server.registry.clone(),
            server.aggregator.clone(),
        ));
        if self.control_loops {
            let settings = controllers::Settings {
                root_ca: self.root_ca.clone(),
            };
            // Over a store that held every bootstrap object (a restart) the loops' pass is
            // their first, once the server serves: what they create is there from before.
            let settled = match bootstrapped {
                controllers::bootstrap::Bootstrapped::Found => None,
                _ => Some(
                    controllers::settle(&server.registry, &settings, bootstrapped)
                        .await
                        .map_err(|e| ApiError::from_store(e, error::Target::default()))?,
                ),
            };
            if self.elected_loops {
                *server
                    .elected_loops
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(settings);
            } else {
                server.background(controllers::run(server.registry.clone(), settings, settled));
            }
        }
        // The FlowSchemas' first conditions, written before the server serves and after
        // the settling writes above (not in their way).
        let flow_settled = controllers::flowcontrol::settle(&server.registry, bootstrapped).await;
        server.background(controllers::flowcontrol::run(
            server.registry.clone(),
            flow_settled,
        ));
        {
            let registry = server.registry.clone();
            let config = self.bootstrap.clone();
            let endpoints = async move {
                if bootstrapped == controllers::bootstrap::Bootstrapped::Found {
                    controllers::bootstrap::kubernetes_service_after_restart(&registry, &config)
                        .await;
                }
                controllers::endpoints::run(registry, config.advertised()).await;
            };
            tokio::spawn(
                server
                    .endpoints_stop
                    .clone()
                    .run_until_cancelled_owned(endpoints),
            );
        }
        Ok(server)
    }
}

/// The API server: a registry over a store, and the HTTP front that serves it.
pub struct ApiServer {
    registry: Registry,
    metrics: Arc<metrics::Metrics>,
    /// Classifies requests by the stored FlowSchemas.
    flow_control: Arc<flowcontrol::FlowControl>,
    /// Proxies to aggregated API servers.
    aggregator: Arc<aggregator::Aggregator>,
    authenticator: auth::authn::Authenticator,
    authorization: auth::authz::Authorization,
    rbac: Option<Arc<auth::rbac::Rbac>>,
    tokens: Arc<auth::tokens::ServiceAccountTokens>,
    address: RwLock<String>,
    /// Cancelled by [`ApiServer::stop`]: ends the control loops.
    stop: CancellationToken,
    /// What answers `pods/log` ([`ApiServer::set_pod_logs`]).
    pod_logs: RwLock<Option<Arc<dyn logs::PodLogs>>>,
    /// The audit log, if requests are audited.
    audit: Option<Arc<audit::Audit>>,
    /// What kube-controller-manager's loops are told, when they run under the caller's leader
    /// election ([`ApiServerBuilder::elected_control_loops`]).
    elected_loops: std::sync::Mutex<Option<controllers::Settings>>,
    /// Ends the renewal of this server's lease in the `kubernetes` endpoints: on
    /// [`stop`](ApiServer::stop), or first thing in [`withdraw`](ApiServer::withdraw).
    endpoints_stop: CancellationToken,
    /// Where the server says it is (its advertised address and port).
    advertised: controllers::endpoints::Advertised,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").finish_non_exhaustive()
    }
}

impl ApiServer {
    /// A builder over `store`.
    pub fn builder(store: Arc<dyn KvStore>) -> ApiServerBuilder {
        ApiServerBuilder {
            store,
            token: None,
            control_loops: true,
            elected_loops: false,
            compaction_interval: std::time::Duration::from_secs(300),
            watch_cache: registry::WatchCacheConfig::default(),
            root_ca: None,
            client_ca: None,
            front_proxy: None,
            service_account_key: None,
            authorization: AuthorizationMode::AlwaysAllow,
            observer: None,
            webhooks: webhook::Webhooks::default(),
            disabled_admission: Vec::new(),
            admission_log: None,
            bootstrap: controllers::bootstrap::Config::default(),
            service_account_issuer: auth::tokens::ISSUER.to_string(),
            service_account_public_keys: Vec::new(),
            allow_privileged: true,
            audit: None,
            runtime_config: Default::default(),
        }
    }

    /// The HTTP service (an axum `Router`, which is a `tower::Service`).
    pub fn router(self: &Arc<Self>) -> axum::Router {
        http::router(self.clone())
    }

    /// The key ServiceAccount tokens are signed with.
    pub fn service_account_tokens(&self) -> &Arc<auth::tokens::ServiceAccountTokens> {
        &self.tokens
    }

    /// The classifier of requests (API Priority and Fairness).
    pub fn flow_control(&self) -> &Arc<flowcontrol::FlowControl> {
        &self.flow_control
    }

    /// The aggregator: remote group-versions and the proxy to their servers.
    pub fn aggregator(&self) -> &Arc<aggregator::Aggregator> {
        &self.aggregator
    }

    /// The metrics `GET /metrics` serves.
    pub fn metrics(&self) -> &Arc<metrics::Metrics> {
        &self.metrics
    }

    /// The registry, for in-process callers and control loops.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Stops everything the server runs in the background: its control loops, compaction and
    /// the watch caches' feeders (the watch caches close; requests still being served may
    /// fail). Requests are not refused by this — stop serving the router first — and the store
    /// stays open. Once the last handle on the server and its registry is dropped, nothing of
    /// it holds the store any more, so a store that closes when unused (the disk store) can be
    /// reopened, as when the process restarts.
    pub fn stop(&self) {
        self.stop.cancel();
        self.registry.stop_watch_caches();
    }

    /// Runs kube-controller-manager's loops, when the server was built to leave them to the
    /// caller ([`ApiServerBuilder::elected_control_loops`]), until `stop` is cancelled (this
    /// server lost its Lease, or shuts down) or the server [stops](Self::stop); returns at
    /// once otherwise. Each run starts over from the store as it is: a new leader looks at
    /// everything once, and acts on what is pending.
    pub async fn run_control_loops(self: Arc<Self>, stop: CancellationToken) {
        let settings = self
            .elected_loops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some(settings) = settings else {
            return;
        };
        let loops = controllers::run(self.registry.clone(), settings, None);
        tokio::select! {
            () = loops => {}
            () = stop.cancelled() => {}
            () = self.stop.cancelled() => {}
        }
    }

    /// Takes this server out of the `kubernetes` Service's endpoints, as kube-apiserver does
    /// when it shuts down gracefully: its lease is deleted and no longer renewed, and the
    /// endpoints list the other servers of the cluster. Call it before the server stops
    /// serving, so clients that follow the endpoints move away first.
    pub async fn withdraw(&self) {
        self.endpoints_stop.cancel();
        controllers::endpoints::withdraw(&self.registry, &self.advertised).await;
    }

    /// Runs `task` until [`stop`](Self::stop).
    fn background(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        tokio::spawn(self.stop.clone().run_until_cancelled_owned(task));
    }

    /// The audit log, if requests are audited ([`ApiServerBuilder::audit`]).
    pub fn audit(&self) -> Option<&Arc<audit::Audit>> {
        self.audit.as_ref()
    }

    /// Records the address clients reach the server at (reported by `/api`).
    pub fn set_address(&self, address: impl Into<String>) {
        *self.address.write().unwrap_or_else(|e| e.into_inner()) = address.into();
    }

    /// Lets `logs` answer `GET .../pods/{name}/log` for the pods on the nodes it runs (the
    /// simulated kubelets, which start after the server); replaces any earlier hook. Without
    /// one, log requests for scheduled pods are refused as needing a kubelet.
    pub fn set_pod_logs(&self, logs: Arc<dyn logs::PodLogs>) {
        *self.pod_logs.write().unwrap_or_else(|e| e.into_inner()) = Some(logs);
    }

    /// The hook that answers `pods/log`, if one is set.
    pub(crate) fn pod_logs(&self) -> Option<Arc<dyn logs::PodLogs>> {
        self.pod_logs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How credentials become users.
    pub fn authenticator(&self) -> &auth::authn::Authenticator {
        &self.authenticator
    }

    /// How requests are authorized.
    pub fn authorization(&self) -> &auth::authz::Authorization {
        &self.authorization
    }

    /// The RBAC authorizer, when the server runs [`AuthorizationMode::Rbac`].
    pub fn rbac(&self) -> Option<&Arc<auth::rbac::Rbac>> {
        self.rbac.as_ref()
    }

    fn address(&self) -> String {
        self.address
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `/version`.
    pub fn version_info(&self) -> Value {
        serde_json::to_value(VersionInfo::of_this_build()).unwrap_or_default()
    }

    /// The `/version` body, written as kube-apiserver writes it: Go's field order, indented
    /// by two spaces, with no trailing newline.
    pub(crate) fn version_body(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(&VersionInfo::of_this_build()).unwrap_or_default()
    }
}

/// What `/version` says, in the field order of apimachinery's `version.Info`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct VersionInfo {
    major: &'static str,
    minor: &'static str,
    git_version: String,
    git_commit: &'static str,
    git_tree_state: &'static str,
    build_date: &'static str,
    go_version: &'static str,
    compiler: &'static str,
    platform: String,
}

impl VersionInfo {
    fn of_this_build() -> VersionInfo {
        let (major, minor) = KUBERNETES_VERSION;
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        VersionInfo {
            major,
            minor,
            git_version: format!("v{major}.{minor}.0+konverge-{}", env!("CARGO_PKG_VERSION")),
            git_commit: "",
            git_tree_state: "clean",
            build_date: "",
            go_version: "rust (konverge)",
            compiler: "rustc",
            platform: format!("{}/{arch}", std::env::consts::OS),
        }
    }
}
