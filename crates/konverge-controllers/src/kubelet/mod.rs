//! Simulated kubelets: nodes that register, heartbeat and "run" the pods bound to them
//! without running anything, so workloads reach Running, Ready and Succeeded as they would
//! on a cluster.
//!
//! This is not one of kcm's controllers (it is not in [`CONTROLLERS`](crate::CONTROLLERS)):
//! [`SimulatedNodes`] adds two controllers to a [`Manager`], and
//! [`SimulatedNodes::kubelets`] gives a [`Kubelets`] handle that acts on them while they run
//! (stop and start a node's kubelet, crash a pod's containers, lifecycle [`Rule`]s, logs).
//!
//! - **Nodes** (the kubelet's registration, `nodestatus` setters and `nodelease`): every
//!   simulated node is created with the kubelet's labels (`kubernetes.io/hostname`,
//!   `kubernetes.io/os=linux`, `kubernetes.io/arch=amd64`, their `beta.` forms,
//!   `topology.kubernetes.io/zone` and `node.kubernetes.io/instance-type` when given),
//!   `spec.podCIDR` `10.244.N.0/24` and a status with capacity = allocatable, addresses
//!   (InternalIP `10.0.0.N`, Hostname), nodeInfo and the conditions MemoryPressure,
//!   DiskPressure, PIDPressure and Ready with the kubelet's reasons and messages. A Lease
//!   `kube-node-lease/<node>` (holder the node, 40 s) is renewed every 10 s; the node's
//!   status is written again when it differs from what the kubelet reports, or every 5
//!   minutes to refresh `lastHeartbeatTime` (the kubelet's `nodeStatusReportFrequency`).
//!   The pass runs on a timer keyed on the `kube-system` Namespace, as the pod garbage
//!   collector's does.
//! - **Pods** (the kubelet's `generateAPIPodStatus`, `getPhase` and status manager): a pod
//!   bound to a simulated node is *admitted* (its lifecycle fixed from its annotations and
//!   the matching rules) and gets `startTime`, `hostIP(s)` and Pending with its containers
//!   waiting `ContainerCreating` (or `PodInitializing`); once its sandbox is "ready", a
//!   `podIP` from its node's CIDR (unique among the node's live pods) and the
//!   `PodReadyToStartContainers` condition; init containers then run one after another, each
//!   for the run time and terminated `Completed` before the next; then the app containers
//!   start one after another, each once its image is pulled (the pull takes [`Timing::pull`]
//!   for an `imagePullPolicy: Always` image, the default for `latest`; others are present),
//!   with `containerd://` ids and `imageID docker.io/library/<image>@sha256:<fake digest>`;
//!   `started` and ready as their startup and readiness probes say, in simulated time
//!   (see `probes`), and `ContainersReady` / `Ready` turn True. Pods owned by a Job or with
//!   `restartPolicy` Never or OnFailure complete after the run time: Succeeded, containers
//!   terminated with exit code 0 reason `Completed`, Ready False reason `PodCompleted`.
//!
//! Every status is computed from the pod's spec, `startTime`, its admitted lifecycle (and
//! the crashes asked for) and the clock, so it is written through `pods/status` only when it
//! changes, and the controller asks to be woken at the next moment something will change
//! (no polling, no hot loop). The kubelet's Events (`Pulling`, `Pulled`, `Created`,
//! `Started`, `BackOff`, `Failed`, `Unhealthy`, `Killing`, from component `kubelet`, in
//! kube 1.33's words) belong to moments of that timeline and are recorded once each.
//!
//! # The map
//!
//! - this module: [`SimulatedNodes`] (the builder, `add`), [`Timing`], the annotations;
//! - [`Kubelets`] (`kubelets`): the handle, on top of everything below;
//! - `worker`: the pod worker's reconcile (a live pod's status, a deleted pod's end);
//! - `node`: registration, node status and the Lease; `terminate`: deleted pods; `pod`:
//!   the worker's context, a pod's admission, status writes, events and pod IP;
//! - `status`: the pod's status and phase; `containers`: one container's timeline (pulls,
//!   runs, exits, crashes, back-off); `probes`: startup and readiness probes; `image`: image
//!   names, ids and pull policy; `events`: the kubelet's Events; [`logs`]: what `pods/log`
//!   reads;
//! - `state`: what the controllers and the handles share (stopped kubelets, rules, each
//!   pod's admitted lifecycle); `rules`: [`Rule`], [`Behaviour`], [`RuleId`] and a pod's
//!   admitted lifecycle, at the bottom.
//!
//! # Lifecycle annotations
//!
//! An annotation on the pod wins over a [`Rule`] asking otherwise.
//!
//! - `konverge.dev/start-seconds: "N"`: the sandbox takes N seconds (containers stay
//!   `ContainerCreating` that long; default 0).
//! - `konverge.dev/run-seconds: "N"`: how long an init container, a completing container or
//!   a crashing container runs (default: [`Timing::run`], 1 s).
//! - `konverge.dev/exit-code: "N"`: the app containers exit N after the run time. With
//!   restartPolicy Never the pod then ends Succeeded (0) or Failed; with Always (or
//!   OnFailure and N ≠ 0) the containers restart as the kubelet's CrashLoopBackOff does: the
//!   first restart at once, then after 10 s doubling up to 5 minutes, waiting with reason
//!   `CrashLoopBackOff`, `lastState` terminated and `restartCount` increasing.
//!   [`Kubelets::crash`] ends a running container the same way, at once.
//! - `konverge.dev/image-pull: fail`: the first container to start never pulls its image:
//!   waiting `ErrImagePull` for a second, then `ImagePullBackOff` for good; the pod stays
//!   Pending.
//! - `konverge.dev/ready: "false"`: the containers run but are never ready (a readiness
//!   probe, if there is one, fails: `Unhealthy`).
//! - `konverge.dev/log`: what the containers log ([`logs`]).
//!
//! # Deletion
//!
//! A pod with a `deletionTimestamp` has its running containers told to stop (`Killing`),
//! run their preStop `sleep` (`lifecycle.preStop.sleep.seconds`, at most the pod's
//! `deletionGracePeriodSeconds`), and terminated (exit code 143, reason `Error`: the default
//! SIGTERM ending, kept simple); the pod is marked Failed (or Succeeded if every container
//! had exited 0), then deleted for good (grace period 0, uid precondition) once the hooks are
//! done and `min(deletionGracePeriodSeconds, Timing::delete)` has passed, so a deleted pod
//! never hangs Terminating. The grace period runs on the kubelet's clock from when it saw the
//! deletion.
//!
//! # A stopped kubelet
//!
//! [`Kubelets::stop`] makes a node's kubelet write nothing at all (no Lease, no node status,
//! no pod status, no deletes), as a lost machine: kcm's node lifecycle controller marks the
//! node Unknown and taints it `node.kubernetes.io/unreachable`, and taint eviction deletes
//! its pods when their tolerations (300 s by default) run out — they stay Terminating, as
//! nothing finishes them. [`Kubelets::start`] registers the node again (if it was deleted),
//! renews its Lease at once, and that renewal wakes a look at every pod of the node: their
//! statuses are caught up and pending deletions finished.
//!
//! # Where this differs from a kubelet
//!
//! Nothing runs: probes always succeed (unless the pod is never ready) and liveness probes
//! are not run; readiness gates are honoured as the kubelet does (Ready waits for their
//! conditions); no restartable (sidecar) init container semantics, no eviction, no volumes,
//! no hooks but preStop `sleep`. Allocatable equals capacity (no reservations). The kubelet
//! retries image pulls with back-off and alternates `ErrImagePull` / `ImagePullBackOff`;
//! here the pod stays in `ImagePullBackOff`. An image pulled again at a restart takes no
//! time (`in 0s`). The back-off of a crashing container is indexed by its restart count
//! (the kubelet's also resets after 10 minutes of running). Events are recorded once per
//! transition: a kubelet repeats `BackOff` and `Unhealthy` on every sync and probe, here
//! each back-off and each failing run counts once. Events carry no `source.host` (the
//! crate's event recorder sets none).

mod containers;
mod events;
mod image;
mod kubelets;
pub mod logs;
mod node;
mod pod;
mod probes;
mod rules;
mod state;
mod status;
mod terminate;
mod worker;

/// How the kubelets write: as `kubelet`, the field manager kube's kubelet is recorded as
/// (its user agent's first word).
fn write_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(events::COMPONENT.to_string()),
        ..kube::api::PostParams::default()
    }
}

pub use kubelets::Kubelets;
pub use rules::{Behaviour, Rule, RuleId};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use konverge_runtime::cache::Change;
use konverge_runtime::{Manager, ObjectKey, Store};
use kube::{Client, ResourceExt};

use crate::clock::Clock;
use crate::events::Events;
use crate::informers;
use kubelets::Wiring;
use node::{NodeCtx, reconcile_nodes};
use pod::PodCtx;
use state::Shared;
use worker::reconcile_pod;

/// Where leases live.
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The object whose reconcile is the node heartbeat timer.
const TIMER_NAMESPACE: &str = "kube-system";
/// Annotation: seconds before the sandbox is ready.
pub const START_SECONDS: &str = "konverge.dev/start-seconds";
/// Annotation: seconds a completing or crashing container runs.
pub const RUN_SECONDS: &str = "konverge.dev/run-seconds";
/// Annotation: the exit code of the app containers.
pub const EXIT_CODE: &str = "konverge.dev/exit-code";
/// Annotation: `fail` makes image pulls fail.
pub const IMAGE_PULL: &str = "konverge.dev/image-pull";
/// Annotation: `"false"` keeps containers unready.
pub const READY: &str = "konverge.dev/ready";

/// The simulated kubelets' periods.
#[derive(Clone, Debug)]
pub struct Timing {
    /// How often leases are renewed (the kubelet's 10 s: a quarter of the lease duration).
    pub lease_renew: Duration,
    /// The lease's `leaseDurationSeconds` (40).
    pub lease_duration_seconds: i32,
    /// How often an unchanged node status is written again (`nodeStatusReportFrequency`,
    /// 5 minutes).
    pub status_report: Duration,
    /// How long init containers and completing containers run (1 s).
    pub run: Duration,
    /// How long pulling an image takes (1 s): the first start of a container whose image
    /// is pulled every time (`imagePullPolicy: Always`, the default for `latest`).
    pub pull: Duration,
    /// The longest a deleted pod waits before it is removed (1 s).
    pub delete: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_renew: Duration::from_secs(10),
            lease_duration_seconds: 40,
            status_report: Duration::from_secs(300),
            run: Duration::from_secs(1),
            pull: Duration::from_secs(1),
            delete: Duration::from_secs(1),
        }
    }
}

/// A set of simulated nodes and their kubelets.
#[derive(Clone, Debug)]
pub struct SimulatedNodes {
    names: Vec<String>,
    zones: Vec<String>,
    instance_type: Option<String>,
    capacity: BTreeMap<String, Quantity>,
    timing: Timing,
    /// What the kubelets and their [`Kubelets`] handles share.
    shared: Arc<Shared>,
    /// How the handles reach the running controllers.
    wiring: Arc<Wiring>,
}

impl SimulatedNodes {
    /// `count` nodes named `node-1`..`node-N`, no zones, each with cpu 8, memory 32Gi,
    /// 110 pods and 100Gi of ephemeral storage.
    pub fn new(count: usize) -> SimulatedNodes {
        let capacity = [
            ("cpu", "8"),
            ("memory", "32Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "100Gi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
        SimulatedNodes {
            names: (1..=count).map(|i| format!("node-{i}")).collect(),
            zones: Vec::new(),
            instance_type: None,
            capacity,
            timing: Timing::default(),
            shared: Arc::default(),
            wiring: Arc::default(),
        }
    }

    /// Names the nodes (as many as given, replacing `node-1`..`node-N`).
    pub fn names(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Spreads the nodes over `zones`, round robin (`topology.kubernetes.io/zone`).
    pub fn zones(mut self, zones: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.zones = zones.into_iter().map(Into::into).collect();
        self
    }

    /// Labels every node `node.kubernetes.io/instance-type=<instance_type>`.
    pub fn instance_type(mut self, instance_type: impl Into<String>) -> Self {
        self.instance_type = Some(instance_type.into());
        self
    }

    /// Sets one resource of every node's capacity (and allocatable).
    pub fn capacity(mut self, resource: impl Into<String>, quantity: impl Into<String>) -> Self {
        self.capacity
            .insert(resource.into(), Quantity(quantity.into()));
        self
    }

    /// Replaces the periods and simulated durations.
    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// The nodes' names.
    pub fn node_names(&self) -> &[String] {
        &self.names
    }

    /// A handle on these nodes' kubelets, sharing state with the controllers `add` starts
    /// (take it once the nodes are named and zoned).
    pub fn kubelets(&self) -> Kubelets {
        Kubelets::new(
            Arc::new(self.sim_nodes()),
            self.shared.clone(),
            self.wiring.clone(),
        )
    }

    fn sim_nodes(&self) -> BTreeMap<String, SimNode> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let zone =
                    (!self.zones.is_empty()).then(|| self.zones[i % self.zones.len()].clone());
                (name.clone(), SimNode::new(name, i + 1, zone))
            })
            .collect()
    }

    /// Adds the nodes' and the pods' controllers to `manager`; they write as `client` and
    /// read `clock`.
    pub fn add(self, manager: &mut Manager, client: Client, clock: Clock) {
        let nodes = Arc::new(self.sim_nodes());
        let node_ctx = Arc::new(NodeCtx {
            client: client.clone(),
            clock: clock.clone(),
            nodes: nodes.clone(),
            capacity: self.capacity,
            instance_type: self.instance_type,
            timing: self.timing.clone(),
            node_cache: informers::cache::<Node>(manager),
            lease_cache: informers::cache::<Lease>(manager),
            shared: self.shared.clone(),
        });
        let timer = informers::controller::<Namespace>(manager)
            .named("simulated-nodes")
            .with_predicate(|old: Option<&Namespace>, new: &Namespace| {
                old.is_none() && new.metadata.name.as_deref() == Some(TIMER_NAMESPACE)
            });
        manager.add(timer, reconcile_nodes, node_ctx.clone());

        let names: Arc<BTreeSet<String>> = Arc::new(nodes.keys().cloned().collect());
        let pod_ctx = Arc::new(PodCtx {
            events: Events::new(client.clone(), events::COMPONENT),
            client,
            clock,
            nodes,
            timing: self.timing,
            pods: informers::pods_by_node(manager),
            ips: Mutex::new(BTreeMap::new()),
            shared: self.shared.clone(),
        });
        self.wiring.wire(&node_ctx, &pod_ctx);
        let pods = informers::controller::<Pod>(manager)
            .named("simulated-kubelet")
            .concurrency(4)
            .with_predicate(move |_: Option<&Pod>, new: &Pod| {
                node_name(new).is_some_and(|n| names.contains(n))
            })
            .watches_cached(
                informers::api::<Lease>(manager),
                informers::config(),
                resync_on_lease(self.shared.clone(), pod_ctx.pods.clone()),
            );
        manager.add(pods, reconcile_pod, pod_ctx);
    }
}

/// The trigger that wakes a restarted kubelet's pods: its first Lease renewal names every
/// pod bound to its node (once).
fn resync_on_lease(
    shared: Arc<Shared>,
    pods: Store<Pod>,
) -> impl Fn(&Change<Lease>) -> Vec<ObjectKey> + Send + Sync + 'static {
    move |change: &Change<Lease>| {
        let Some(lease) = &change.new else {
            return Vec::new();
        };
        if lease.metadata.namespace.as_deref() != Some(LEASE_NAMESPACE) {
            return Vec::new();
        }
        let node = lease.metadata.name.clone().unwrap_or_default();
        if !shared.lock().take_resync(&node) {
            return Vec::new();
        }
        informers::pods_on(&pods, &node)
            .iter()
            .map(|p| ObjectKey::namespaced(p.namespace().unwrap_or_default(), p.name_any()))
            .collect()
    }
}

/// One simulated node's addresses.
#[derive(Clone, Debug)]
struct SimNode {
    name: String,
    zone: Option<String>,
    internal_ip: String,
    /// The first three octets of its pod CIDR (`10.244.N`).
    pod_prefix: String,
}

impl SimNode {
    fn new(name: &str, index: usize, zone: Option<String>) -> SimNode {
        SimNode {
            name: name.to_string(),
            zone,
            internal_ip: format!("10.0.{}.{}", index / 256, index % 256),
            pod_prefix: format!("10.{}.{}", 244 + index / 256, index % 256),
        }
    }

    fn pod_cidr(&self) -> String {
        format!("{}.0/24", self.pod_prefix)
    }
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

fn secs(n: i64) -> Duration {
    Duration::from_secs(u64::try_from(n).unwrap_or(0))
}

fn whole(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or(Duration::ZERO)
}
