//! konverge-controllers: kube-controller-manager's controllers, written with
//! konverge-runtime over `kube::Client`.
//!
//! Each controller here does what kube-controller-manager (kcm) 1.33's controller of the same
//! name does — the same objects, names, labels, annotations, conditions, reasons and
//! messages — and is an ordinary konverge-runtime [`Controller`](konverge_runtime::Controller):
//! it runs against any cluster, `konverge up` runs them all in-process, and the testkit proves
//! each one converges under seeded fault plans.
//!
//! # Where to start
//!
//! [`ControllerManager`] is kcm: it picks controllers with kcm's `--controllers` syntax
//! ([`Selection`]), gives each the identity kcm gives it (a ServiceAccount in `kube-system`,
//! through [`Credentials`]) and runs them in one konverge-runtime
//! [`Manager`](konverge_runtime::Manager), whose shared informers watch as kcm's own
//! identity:
//!
//! ```no_run
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use konverge_controllers::{ControllerManager, Selection};
//!
//! let selection: Selection = "*,-cronjob".parse()?;
//! let running = ControllerManager::new(client).selection(selection).spawn().await?;
//! // ... until shutdown:
//! running.stop().await?;
//! # Ok(()) }
//! ```
//!
//! # The map
//!
//! - [`manager`]: [`ControllerManager`], [`Selection`], [`Credentials`], and
//!   [`CONTROLLERS`] — every controller with kcm's name, aliases and ServiceAccount, each a
//!   [`Descriptor`] ([`descriptor`]).
//! - What kcm's controllers share (kcm's `pkg/controller/controller_utils.go` and
//!   `controller_ref_manager.go`): [`pods`] (pod state, pods from templates),
//!   [`controller_ref`] (adopting and releasing children by selector), [`expectations`]
//!   (creations and deletions not yet seen in the cache), [`informers`] (the shared caches),
//!   [`events`] (Events as kcm records them), [`clock`] (the time a controller
//!   reads, virtual in paused-time tests).
//! - The controllers, one module each, named as kcm's `pkg/controller/` directories:
//!   [`replicaset`] (ReplicaSets and ReplicationControllers), [`deployment`],
//!   [`statefulset`], [`daemonset`], [`job`] (with the cronjob and ttl-after-finished
//!   controllers), [`endpoints`] (Endpoints, EndpointSlices and their mirroring),
//!   [`disruption`], [`podgc`], [`nodelifecycle`] (with taint-based eviction), [`volume`]
//!   (the PersistentVolume binder).
//! - Simulated nodes, so that pods run without running anything: [`kubelet`]
//!   ([`SimulatedNodes`](kubelet::SimulatedNodes): Node objects, Lease heartbeats, the pod
//!   status sequence and Events a kubelet writes, probes, preStop sleeps and logs, with
//!   lifecycle rules by annotation or [`Rule`](kubelet::Rule); its
//!   [`Kubelets`](kubelet::Kubelets) handle stops and starts nodes and crashes pods) and
//!   [`scheduler`] (binds pods with kube-scheduler's filters, scores, messages and
//!   preemption). [`ControllerManager::simulated_nodes`] runs both beside the controllers.

pub mod clock;
pub mod controller_ref;
pub mod daemonset;
pub mod deployment;
pub mod descriptor;
pub mod disruption;
pub mod endpoints;
pub mod error;
pub mod events;
pub mod expectations;
pub mod informers;
pub mod job;
pub mod kubelet;
pub mod manager;
pub mod nodelifecycle;
pub mod podgc;
pub mod pods;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
pub mod volume;

pub use clock::Clock;
pub use descriptor::{Descriptor, Setup};
pub use error::{Error, Result};
pub use manager::{CONTROLLERS, ControllerManager, Credentials, Selection};
