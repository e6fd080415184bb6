//! konverge-runtime: Kubernetes controllers that converge — deterministic, loop-free and
//! race-free — on any `kube::Client` (a real cluster, `konverge up`, or the testkit).
//!
//! # Where to start
//!
//! Write a reconciler `async fn(Arc<K>, Arc<Ctx>) -> Result<Action, E>`, describe what it
//! watches with a [`Controller`], and run it in a [`Manager`]:
//!
//! ```no_run
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use konverge_runtime::{Action, Controller, Manager, watcher};
//! use kube::{Api, Client};
//!
//! async fn reconcile(cm: Arc<ConfigMap>, _client: Arc<Client>) -> Result<Action, kube::Error> {
//!     tracing::info!(name = ?cm.metadata.name, "seen");
//!     Ok(Action::await_change())
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::try_default().await?;
//! let mut manager = Manager::new(client.clone());
//! let controller = Controller::new(Api::<ConfigMap>::all(client.clone()), watcher::Config::default());
//! manager.add(controller, reconcile, Arc::new(client));
//! manager.run(async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! # Ok(()) }
//! ```
//!
//! # The map
//!
//! The data path, in order:
//!
//! - [`watcher`]: kube-runtime's watcher (list + watch with resume, relist on 410, bookmarks,
//!   streaming lists) and its `watcher::Config`, with backoff and metrics added.
//! - [`cache`]: the ordered cache — one [`Writer`](cache::Writer), many [`Store`] readers,
//!   key-ordered iteration, indexes, a ready signal.
//! - [`informer`]: one shared watch and cache per resource type and selector; handlers that
//!   only enqueue.
//! - [`queue`]: the [`WorkQueue`] — de-duplication, one worker per key, delays, per-key
//!   backoff with jitter, an overall rate limit.
//! - [`controller`]: the [`Controller`] builder (owns, watches, predicates, concurrency,
//!   deadlines, middleware, error policy) and its workers — over a static type, or over
//!   `DynamicObject` with an `ApiResource` found by discovery ([`Controller::new_with`]).
//! - [`reconcile`]: [`Action`], error classes and their policy, [`TerminalError`], the
//!   per-reconcile scope (deadline, cancellation token, id), [`Middleware`].
//! - [`manager`]: the [`Manager`] — runs it all, serves `/metrics`, `/healthz`, `/readyz`,
//!   leader election, graceful shutdown.
//! - [`fleet`]: the [`Fleet`] — the same controllers over several clusters (kubeconfig
//!   contexts, or clusters added and removed at run time), each cluster's keys, metrics and
//!   spans labelled with its name.
//!
//! What keeps controllers converging:
//!
//! - [`predicate`]: which changes trigger a reconcile (generation by default).
//! - [`crd`]: installing the operator's own CustomResourceDefinition at start.
//! - [`hotloop`]: catches an object reconciled again and again by the controller's own writes.
//! - read your own writes: after a reconcile wrote its object ([`reconcile::wrote`], called by
//!   the status and finalizer helpers), the object's next reconcile waits until the cache has
//!   that write, so a stale cache never makes it write again with an old resourceVersion.
//! - [`finalizer`], [`status`], [`conditions`], [`apply`]: cleanup before deletion, status
//!   written only when it changed, condition transitions, children applied in dependency order
//!   and only when they differ (by merge patch, or by server-side apply, which prunes what a
//!   controller stops declaring).
//! - [`leader`]: leader election on a `coordination.k8s.io/v1` Lease.
//! - [`metrics`]: Prometheus metrics under controller-runtime's names.
//! - [`key`]: [`ObjectKey`], the order everything iterates in.
//!
//! Looking at a whole cluster:
//!
//! - [`doctor`]: watches every resource of a live cluster for a window and reports hot loops
//!   (with the managers and fields that flap), growing and oversized objects, deletions or
//!   namespaces stuck on finalizers (with who set them), and objects deleted while the latest
//!   Event about them was a Warning — what `konverge doctor` prints.

pub mod apply;
pub mod cache;
pub mod conditions;
pub mod controller;
pub mod crd;
pub mod doctor;
pub mod finalizer;
pub mod fleet;
pub mod hotloop;
pub mod informer;
pub mod key;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod predicate;
pub mod queue;
pub mod reconcile;
pub mod status;
pub mod watcher;

pub use cache::Store;
pub use controller::Controller;
pub use fleet::Fleet;
pub use key::ObjectKey;
pub use manager::{Manager, RunningManager};
pub use queue::WorkQueue;
pub use reconcile::{Action, ErrorClass, Middleware, OnError, TerminalError};

/// The README's code blocks, compiled as doctests so the README's controller cannot rot.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The migration guide's code blocks, compiled as doctests so the guide cannot rot.
#[doc = include_str!("../../../docs/migrating-from-kube-runtime.md")]
#[cfg(doctest)]
pub struct MigrationGuideDoctests;
