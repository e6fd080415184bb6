//! Test Kubernetes controllers in milliseconds, without a cluster.
//!
//! # Where to start
//!
//! [`TestEnv`] starts konverge's API server in-process, on a loopback port over plain HTTP,
//! and hands out a [`kube::Client`] for it. The server is ready in about a millisecond, so
//! every test gets its own; dropping the `TestEnv` stops it. [`TestEnv::builder`] chooses a
//! disk store instead of memory, the watch cache settings, and whether the server's control
//! loops (garbage collection, namespace finalization) run. [`TestEnv::write_kubeconfig`] lets
//! `kubectl` look at a test's server.
//!
//! [`TestEnvBuilder::in_process`] leaves the socket out: [`TestEnv::client`] then calls the
//! server's router in-process, through the same faults and request log, and the test can run
//! in Tokio's paused time (see [Paused time](#paused-time)).
//!
//! Between the client and the server sits a [`FaultLayer`], driven by the [`Faults`] handle
//! ([`TestEnv::faults`]). It makes happen on purpose what a controller meets on a real
//! cluster, so a test can show the controller converges anyway:
//!
//! - [`Faults::drop_watches`]: every open watch stream ends, as when a load balancer cuts
//!   long-lived connections;
//! - [`Faults::expire_history`]: forced compaction — watches and exact lists from earlier
//!   resourceVersions get 410 Expired, as after a long disconnect;
//! - [`Faults::inject_conflicts`], [`Faults::inject_errors`], [`Faults::fail`]: the next *n*
//!   requests a [`Rule`] matches (by [`Verb`], resource, namespace, name) are answered with a
//!   Kubernetes `Status` ([`Failure`]) and never reach the server;
//! - [`Faults::delay`]: latency for matching requests;
//! - [`Faults::lose_responses`]: writes the server applies whose answers never arrive;
//! - [`Faults::stale_reads`]: reads that allow it (`resourceVersion=0`, not-older-than)
//!   answered from an older revision, as by a lagging watch cache;
//! - [`TestEnv::restart`] ([`Faults::restart_server`]): the API server restarts — connections
//!   cut and refused for a while, the disk store closed and reopened, watch caches empty.
//!
//! Admission runs as on a cluster (the built-in plugins, ValidatingAdmissionPolicies,
//! admission webhooks). [`TestEnvBuilder::webhook`] serves an admission webhook written as a
//! Rust function over kube-rs's `AdmissionRequest`/`AdmissionResponse` in-process, at the
//! Service its configuration names (and [`TestEnvBuilder::conversion_webhook`] a CRD
//! conversion webhook); a real HTTPS webhook works too. [`TestEnv::admissions`] tells which
//! admissions ran on each request and what they decided ([`AdmissionRecord`]).
//!
//! [`TestEnv::direct_client`] reaches the server in-process, past the faults and across
//! restarts: for a test's own writes and observers.
//!
//! The same layer records every request in a [`RequestLog`] ([`TestEnv::requests`]): verb,
//! resource and subresource, namespace, name, status code. With it a test asserts what a
//! reconcile did over the API — for example that a second reconcile of a converged object
//! writes nothing ([`RequestLog::writes`]).
//!
//! [`FaultPlan::random`] draws a schedule of all of these (plus 429s with `Retry-After`, 500s
//! and stale caches) from a seed: the same seed replays the same faults, and a plan prints
//! its seed.
//!
//! [`FaultPlan::cluster`] adds faults of the cluster under the controller, for an
//! environment with simulated nodes ([`TestEnvBuilder::nodes`], spread over
//! [`TestEnvBuilder::zones`]): nodes lost for a while or for good, nodes drained as `kubectl
//! drain` does (PodDisruptionBudgets respected), zones down, containers crashing, image
//! pulls failing, pods slow to start, pods evicted — nodes and pods [picked](Pick) by the
//! seed. [`FaultPlan::run_on`] carries a plan out on a [`TestEnv`], the cluster faults
//! through its kubelets ([`TestEnv::kubelets`], [`Kubelets`]), and reports what each fault
//! did and to which node or pod ([`Happened`]).
//!
//! [`TestEnv::invariants`] checks a whole controller while a test drives its inputs
//! ([`Invariants`]): it **converges** (the desired state is reached and writes stop), is
//! **idempotent** (a resync of a converged world writes nothing), stays **bounded** (no
//! object grows when the same inputs are added and removed again and again, nothing nears
//! 1.5 MiB), has **no hot loop** (no object rewritten over and over), **releases
//! finalizers**, and creates children **in dependency order**; a property of the test's
//! own holds **always**, on every change the watches see ([`Invariants::always`]). A failed
//! check is a
//! [`Violation`] that names the object, the field manager and the fields.
//!
//! # Paused time
//!
//! Under `#[tokio::test(start_paused = true)]` (Tokio's `test-util` feature, a current-thread
//! runtime) the clock stands still while any task can run and jumps to the next timer when
//! none can. A controller's ten-minute requeue, a lease that expires, a backoff, a watch's
//! server-side timeout then take no real time — and always the same virtual time, so a test
//! can assert exact delays. Over a socket this breaks: while a response is still in the kernel
//! every task looks idle, and the clock jumps to the client's read timeout or the test's own
//! timeout. So paused tests start their environment with
//! `TestEnv::builder().in_process().start()`:
//!
//! - works paused: the in-memory store, the server and its control loops (their timers follow
//!   the virtual clock), [`TestEnv::client`], [`TestEnv::client_for`],
//!   [`TestEnv::in_process_client`] and [`TestEnv::direct_client`], every fault
//!   ([`Faults::delay`] and a restart's `down` are Tokio sleeps), the [`RequestLog`],
//!   [`TestEnv::restart`], in-process webhooks ([`TestEnvBuilder::webhook`]), [`Invariants`]
//!   and [`FaultPlan`]s (Tokio timers), kube-controller-manager's controllers and the
//!   simulated nodes with their cluster faults (on Tokio's clock: minutes of a node's life
//!   take a second or two);
//! - does not: the disk store ([`TestEnvBuilder::disk`]; its work runs on threads of its own,
//!   which the virtual clock does not wait for), anything over a socket — the loopback port of
//!   an environment that is not in-process, admission webhooks reached over HTTPS, an HTTP
//!   endpoint of the test's own — and multi-threaded runtimes, which Tokio cannot pause.
//!
//! An in-process environment has no URL to give: [`TestEnv::write_kubeconfig`] fails with
//! [`Error::NoSocket`], [`TestEnv::url`] and [`TestEnv::addr`] give addresses nothing answers
//! at, and [`TestEnv::socket_addr`] is `None`.
//!
//! ```
//! use std::time::Duration;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//! use konverge_testkit::{Rule, TestEnv, Verb};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build()?.block_on(async {
//! // In a test: #[tokio::test(start_paused = true)]
//! let env = TestEnv::builder().in_process().start().await;
//! let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
//! env.faults().delay(Rule::new().verb(Verb::Create), Duration::from_secs(600));
//! let started = tokio::time::Instant::now();
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("settings".into());
//! config_maps.create(&PostParams::default(), &cm).await?;
//! // Ten virtual minutes, exactly; no real time.
//! assert_eq!(started.elapsed().as_secs(), 600);
//! assert_eq!(env.requests().count(Verb::Create, "configmaps"), 1);
//! # Ok::<_, anyhow::Error>(())
//! # })?;
//! # Ok::<_, anyhow::Error>(())
//! ```
//!
//! # Example
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//! use konverge_testkit::{Rule, TestEnv, Verb};
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let env = TestEnv::start().await;
//! let config_maps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("settings".into());
//! let cm = config_maps.create(&PostParams::default(), &cm).await?;
//!
//! // The next update of a ConfigMap fails as if another writer had won the race.
//! env.faults()
//!     .inject_conflicts(Rule::new().verb(Verb::Update).resource("configmaps"), 1);
//! let err = config_maps
//!     .replace("settings", &PostParams::default(), &cm)
//!     .await
//!     .unwrap_err();
//! assert!(matches!(err, kube::Error::Api(status) if status.code == 409));
//! config_maps.replace("settings", &PostParams::default(), &cm).await?;
//!
//! assert_eq!(env.requests().count(Verb::Update, "configmaps"), 2);
//! assert_eq!(env.requests().writes(), 3);
//! # Ok::<_, anyhow::Error>(())
//! # })?;
//! # Ok::<_, anyhow::Error>(())
//! ```
//!
//! # Modules, by what they hold
//!
//! - [`TestEnv`], [`TestEnvBuilder`], [`Error`]: starting and stopping the server; its
//!   clients over a loopback port or in-process ([`TestEnvBuilder::in_process`],
//!   [`TestEnv::in_process_client`]).
//! - [`Faults`], [`Rule`], [`Failure`], [`FaultLayer`]: fault injection; the layer also
//!   wraps [`ApiServer::router`](konverge_apiserver::ApiServer::router) for in-process tests
//!   without a socket.
//! - [`FaultPlan`], [`Step`], [`Fault`], [`Pick`], [`Happened`]: seeded schedules of
//!   faults, of the API and of the cluster; [`Kubelets`], [`KubeletRule`],
//!   [`KubeletBehaviour`]: the simulated nodes' kubelets, acted on directly.
//! - [`Invariants`], [`InvariantsBuilder`], [`Violation`], [`World`], [`Change`],
//!   [`ObjectRef`]: invariant checks over a whole controller.
//! - [`RequestLog`], [`RequestRecord`], [`RequestInfo`], [`Verb`]: request accounting, and how
//!   a request's verb and resource are read from its method and path (as kube-apiserver
//!   does).
//! - [`envtest`]: controller-runtime envtest's control plane restated (etcd and
//!   kube-apiserver started from an assets folder as envtest starts them, users, CRDs,
//!   `Stop()`): to check binaries work as envtest's assets and to time its start-up.

mod cluster;
mod env;
pub mod envtest;
mod faults;
mod invariants;
mod permissions;
mod plan;
mod request_info;
mod requests;
mod rule;
mod stale;
mod webhooks;

pub use cluster::{Happened, Pick};
pub use env::{Error, TestEnv, TestEnvBuilder};
pub use faults::{Failure, FaultLayer, FaultService, Faults, Rule};
pub use http::StatusCode;
pub use invariants::{
    Change, ChangeKind, Invariants, InvariantsBuilder, MAX_OBJECT_BYTES, ObjectRef, Violation,
    World,
};
pub use konverge_apiserver::admission::{Decision, Ran, Record as AdmissionRecord};
pub use konverge_controllers::kubelet::{
    Behaviour as KubeletBehaviour, Kubelets, Rule as KubeletRule,
};
pub use permissions::{Denial, Permissions, Unused, Used};
pub use plan::{Fault, FaultPlan, Step};
pub use request_info::{RequestInfo, Verb};
pub use requests::{RequestLog, RequestRecord};
