//! Simulated kubelets: nodes that register, heartbeat and "run" the pods bound to them
//! without running anything, so workloads reach Running, Ready and Succeeded as they would
//! on a cluster.
//!
//! This is not one of kcm's controllers (it is not in [`CONTROLLERS`](crate::CONTROLLERS)):
//! [`SimulatedNodes`] adds two controllers to a [`Manager`]:
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
//!   bound to a simulated node gets `startTime`, `hostIP(s)` and Pending with its containers
//!   waiting `ContainerCreating` (or `PodInitializing`); once its sandbox is "ready", a
//!   `podIP` from its node's CIDR (unique among the node's live pods) and the
//!   `PodReadyToStartContainers` condition; init containers then run one after another, each
//!   for the run time and terminated `Completed` before the next; then the app containers
//!   run (`started`, `containerd://` ids, `imageID docker.io/library/<image>@sha256:<fake
//!   digest>`), ready at once or after their readiness probe's `initialDelaySeconds`, and
//!   `ContainersReady` / `Ready` turn True. Pods owned by a Job or with `restartPolicy`
//!   Never or OnFailure complete after the run time: Succeeded, containers terminated with
//!   exit code 0 reason `Completed`, Ready False reason `PodCompleted`.
//!
//! Every status is computed from the pod's spec, annotations, `startTime` and the clock, so
//! it is written through `pods/status` only when it changes, and the controller asks to be
//! woken at the next moment something will change (no polling, no hot loop).
//!
//! # Lifecycle annotations
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
//! - `konverge.dev/image-pull: fail`: the first container to start never pulls its image:
//!   waiting `ErrImagePull` for a second, then `ImagePullBackOff` for good; the pod stays
//!   Pending.
//! - `konverge.dev/ready: "false"`: the containers run but are never ready.
//!
//! # Deletion
//!
//! A pod with a `deletionTimestamp` has its running containers terminated (exit code 143,
//! reason `Error`: the default SIGTERM ending, kept simple) and the pod marked Failed (or
//! Succeeded if every container had exited 0), then it is deleted for good (grace period 0)
//! once `min(deletionGracePeriodSeconds, Timing::delete)` has passed since the deletion was
//! asked for, so a deleted pod never hangs Terminating.
//!
//! # Where this differs from a kubelet
//!
//! Nothing runs: no probes but readiness's initial delay (readiness gates are honoured as
//! the kubelet does: Ready waits for their conditions), no startup probes, no restartable (sidecar) init container semantics, no eviction, no volumes.
//! Allocatable equals capacity (no reservations). The kubelet retries image pulls with
//! back-off and alternates `ErrImagePull` / `ImagePullBackOff`; here the pod stays in
//! `ImagePullBackOff`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, DaemonEndpoint, HostIP, Namespace, Node, NodeAddress, NodeCondition,
    NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};

use crate::clock::Clock;
use crate::error::Result;
use crate::informers;

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

    /// Adds the nodes' and the pods' controllers to `manager`; they write as `client` and
    /// read `clock`.
    pub fn add(self, manager: &mut Manager, client: Client, clock: Clock) {
        let nodes: Arc<BTreeMap<String, SimNode>> = Arc::new(
            self.names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let zone =
                        (!self.zones.is_empty()).then(|| self.zones[i % self.zones.len()].clone());
                    (name.clone(), SimNode::new(name, i + 1, zone))
                })
                .collect(),
        );
        let node_ctx = Arc::new(NodeCtx {
            client: client.clone(),
            clock: clock.clone(),
            nodes: nodes.clone(),
            capacity: self.capacity,
            instance_type: self.instance_type,
            timing: self.timing.clone(),
            node_cache: informers::cache::<Node>(manager),
            lease_cache: informers::cache::<Lease>(manager),
        });
        let timer = informers::controller::<Namespace>(manager)
            .named("simulated-nodes")
            .with_predicate(|old: Option<&Namespace>, new: &Namespace| {
                old.is_none() && new.metadata.name.as_deref() == Some(TIMER_NAMESPACE)
            });
        manager.add(timer, reconcile_nodes, node_ctx);

        let names: Arc<BTreeSet<String>> = Arc::new(nodes.keys().cloned().collect());
        let pod_ctx = Arc::new(PodCtx {
            client,
            clock,
            nodes,
            timing: self.timing,
            pods: informers::cache::<Pod>(manager),
            ips: Mutex::new(BTreeMap::new()),
        });
        let pods = informers::controller::<Pod>(manager)
            .named("simulated-kubelet")
            .concurrency(4)
            .with_predicate(move |_: Option<&Pod>, new: &Pod| {
                node_name(new).is_some_and(|n| names.contains(n))
            });
        manager.add(pods, reconcile_pod, pod_ctx);
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

// ---------------------------------------------------------------------------------------
// Nodes and leases.

struct NodeCtx {
    client: Client,
    clock: Clock,
    nodes: Arc<BTreeMap<String, SimNode>>,
    capacity: BTreeMap<String, Quantity>,
    instance_type: Option<String>,
    timing: Timing,
    node_cache: Store<Node>,
    lease_cache: Store<Lease>,
}

async fn reconcile_nodes(namespace: Arc<Namespace>, ctx: Arc<NodeCtx>) -> Result<Action> {
    if namespace.metadata.name.as_deref() != Some(TIMER_NAMESPACE) {
        return Ok(Action::await_change());
    }
    if !ctx.node_cache.is_ready() || !ctx.lease_cache.is_ready() {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    ensure_lease_namespace(&ctx.client).await?;
    for node in ctx.nodes.values() {
        let registered = register(&ctx, node).await?;
        heartbeat(&ctx, node, &registered).await?;
    }
    Ok(Action::requeue(ctx.timing.lease_renew))
}

async fn ensure_lease_namespace(client: &Client) -> Result<()> {
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(LEASE_NAMESPACE.to_string());
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The node as the kubelet registers it; writes its status when it differs from what the
/// kubelet would report or the last report is older than `status_report`.
async fn register(ctx: &NodeCtx, sim: &SimNode) -> Result<Arc<Node>> {
    let api = Api::<Node>::all(ctx.client.clone());
    let now = ctx.clock.now();
    let existing = match ctx.node_cache.get(&ObjectKey::cluster(sim.name.clone())) {
        Some(node) => node,
        None => {
            let node = Node {
                metadata: node_meta(ctx, sim),
                spec: Some(NodeSpec {
                    pod_cidr: Some(sim.pod_cidr()),
                    pod_cidrs: Some(vec![sim.pod_cidr()]),
                    ..NodeSpec::default()
                }),
                status: Some(node_status(ctx, sim, None, now)),
            };
            match api.create(&PostParams::default(), &node).await {
                Ok(created) => Arc::new(created),
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    Arc::new(api.get(&sim.name).await?)
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let heartbeat =
        ready_condition(&existing).and_then(|c| c.last_heartbeat_time.as_ref().map(|t| t.0));
    let stale = heartbeat.is_none_or(|h| after(h, ctx.timing.status_report) <= now);
    let unchanged = node_status(ctx, sim, existing.status.as_ref(), heartbeat.unwrap_or(now));
    if !stale && existing.status.as_ref() == Some(&unchanged) {
        return Ok(existing);
    }
    let mut node = (*existing).clone();
    node.status = Some(node_status(ctx, sim, existing.status.as_ref(), now));
    node.metadata.managed_fields = None;
    Ok(Arc::new(
        api.replace_status(&sim.name, &PostParams::default(), &node)
            .await?,
    ))
}

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

fn node_meta(ctx: &NodeCtx, sim: &SimNode) -> ObjectMeta {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", sim.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Some(zone) = &sim.zone {
        labels.insert("topology.kubernetes.io/zone".into(), zone.clone());
    }
    if let Some(instance_type) = &ctx.instance_type {
        labels.insert(
            "node.kubernetes.io/instance-type".into(),
            instance_type.clone(),
        );
    }
    ObjectMeta {
        name: Some(sim.name.clone()),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(
            "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
            "true".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

/// The status the kubelet reports, with heartbeats at `heartbeat` and each condition's
/// transition time kept from `existing` when its status did not change.
fn node_status(
    ctx: &NodeCtx,
    sim: &SimNode,
    existing: Option<&NodeStatus>,
    heartbeat: Timestamp,
) -> NodeStatus {
    let heartbeat = Time(whole(heartbeat));
    let wanted = [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        (
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
    ];
    let conditions = wanted
        .iter()
        .map(|(type_, status, reason, message)| {
            let old = existing
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == *type_));
            let transition = match old {
                Some(c) if c.status == *status => c.last_transition_time.clone(),
                _ => Some(heartbeat.clone()),
            };
            NodeCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message.to_string()),
                last_heartbeat_time: Some(heartbeat.clone()),
                last_transition_time: transition,
            }
        })
        .collect();
    let id = fake_digest(&sim.name);
    NodeStatus {
        capacity: Some(ctx.capacity.clone()),
        allocatable: Some(ctx.capacity.clone()),
        conditions: Some(conditions),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: sim.internal_ip.clone(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: sim.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            boot_id: id[..32].to_string(),
            container_runtime_version: "containerd://2.0.5".into(),
            kernel_version: "6.8.0-konverge".into(),
            kube_proxy_version: String::new(),
            kubelet_version: "v1.33.0".into(),
            machine_id: id[32..].to_string(),
            operating_system: "linux".into(),
            os_image: "Ubuntu 24.04.2 LTS".into(),
            system_uuid: id[16..48].to_string(),
            swap: None,
        }),
        ..existing.cloned().unwrap_or_default()
    }
}

/// Creates or renews the node's Lease (the kubelet's `nodelease` controller).
async fn heartbeat(ctx: &NodeCtx, sim: &SimNode, node: &Node) -> Result<()> {
    let api = Api::<Lease>::namespaced(ctx.client.clone(), LEASE_NAMESPACE);
    let now = ctx.clock.now();
    let spec = LeaseSpec {
        holder_identity: Some(sim.name.clone()),
        lease_duration_seconds: Some(ctx.timing.lease_duration_seconds),
        renew_time: Some(MicroTime(now)),
        ..LeaseSpec::default()
    };
    match ctx
        .lease_cache
        .get(&ObjectKey::namespaced(LEASE_NAMESPACE, sim.name.clone()))
    {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(sim.name.clone()),
                    namespace: Some(LEASE_NAMESPACE.into()),
                    owner_references: node.metadata.uid.clone().map(|uid| {
                        vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Node".into(),
                            name: sim.name.clone(),
                            uid,
                            ..OwnerReference::default()
                        }]
                    }),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        Some(lease) => {
            let renewed = lease
                .spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0);
            // Renewed at most a second early: the timer's requeue may land just short.
            let due = renewed.is_none_or(|t| {
                after(
                    t,
                    ctx.timing
                        .lease_renew
                        .saturating_sub(Duration::from_secs(1)),
                ) <= now
            });
            if !due {
                return Ok(());
            }
            let mut lease = (*lease).clone();
            lease.metadata.managed_fields = None;
            let old = lease.spec.take().unwrap_or_default();
            lease.spec = Some(LeaseSpec {
                acquire_time: old.acquire_time,
                ..spec
            });
            api.replace(&sim.name, &PostParams::default(), &lease)
                .await?;
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pods.

struct PodCtx {
    client: Client,
    clock: Clock,
    nodes: Arc<BTreeMap<String, SimNode>>,
    timing: Timing,
    pods: Store<Pod>,
    /// Pod IPs handed out and not yet seen in the cache, by pod uid.
    ips: Mutex<BTreeMap<String, String>>,
}

async fn reconcile_pod(pod: Arc<Pod>, ctx: Arc<PodCtx>) -> Result<Action> {
    let Some(node) = node_name(&pod).and_then(|n| ctx.nodes.get(n)) else {
        return Ok(Action::await_change());
    };
    let now = ctx.clock.now();
    if pod.metadata.deletion_timestamp.is_some() {
        return terminate(&ctx, &pod, now).await;
    }
    if matches!(crate::pods::phase(&pod), "Succeeded" | "Failed") {
        return Ok(Action::await_change());
    }
    let (status, next) = desired_status(&ctx, &pod, node, now);
    write_status(&ctx, &pod, status).await?;
    Ok(next.map_or_else(Action::await_change, |t| Action::requeue(until(now, t))))
}

async fn write_status(ctx: &PodCtx, pod: &Pod, status: PodStatus) -> Result<()> {
    if pod.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut updated = pod.clone();
    updated.status = Some(status);
    updated.metadata.managed_fields = None;
    let api = Api::<Pod>::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    api.replace_status(&pod.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}

/// A deleted pod: its containers are stopped, then it is removed with no grace period.
async fn terminate(ctx: &PodCtx, pod: &Pod, now: Timestamp) -> Result<Action> {
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
    let deleted_at = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| {
            t.0.checked_sub(SignedDuration::from_secs(grace.max(0)))
                .ok()
        })
        .unwrap_or(now);
    let remove_at = after(deleted_at, secs(grace).min(ctx.timing.delete));
    let running = !matches!(crate::pods::phase(pod), "Succeeded" | "Failed");
    if running && pod.status.as_ref().is_some_and(|s| s.start_time.is_some()) {
        let status = stopped_status(pod, whole(deleted_at.min(now)), now);
        write_status(ctx, pod, status).await?;
    }
    // Already deleted with no grace period: the server removes it once its finalizers are
    // gone.
    if pod.metadata.deletion_grace_period_seconds == Some(0) {
        return Ok(Action::await_change());
    }
    if now < remove_at {
        return Ok(Action::requeue(until(now, remove_at)));
    }
    let api = Api::<Pod>::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// Every running container killed at `killed` (exit 143, `Error`), the pod terminal.
fn stopped_status(pod: &Pod, killed: Timestamp, now: Timestamp) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let mut all_zero = true;
    for c in status.container_statuses.iter_mut().flatten() {
        let state = c.state.get_or_insert_with(ContainerState::default);
        if let Some(running) = state.running.take() {
            *state = ContainerState {
                terminated: Some(terminated(
                    143,
                    running.started_at.map(|t| t.0),
                    killed,
                    c.container_id.clone(),
                )),
                ..ContainerState::default()
            };
        } else if state.waiting.is_some() {
            all_zero = false;
        }
        all_zero &= state.terminated.as_ref().is_none_or(|t| t.exit_code == 0);
        c.ready = false;
        c.started = Some(false);
    }
    let phase = if all_zero { "Succeeded" } else { "Failed" };
    status.phase = Some(phase.into());
    let mut conditions = status.conditions.take().unwrap_or_default();
    for (type_, reason) in [
        ("PodReadyToStartContainers", None),
        ("Ready", Some("PodCompleted")),
        ("ContainersReady", Some("PodCompleted")),
    ] {
        set_condition(&mut conditions, pod, type_, false, reason, None, now);
    }
    status.conditions = Some(conditions);
    status
}

fn terminated(
    code: i32,
    started: Option<Timestamp>,
    finished: Timestamp,
    id: Option<String>,
) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: code,
        reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
        started_at: started.map(Time),
        finished_at: Some(Time(finished)),
        container_id: id,
        ..ContainerStateTerminated::default()
    }
}

/// Sets (or adds) a kubelet condition, keeping its transition time when its status holds.
fn set_condition(
    conditions: &mut Vec<PodCondition>,
    pod: &Pod,
    type_: &str,
    true_: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) {
    let status = if true_ { "True" } else { "False" };
    let old = crate::pods::condition(pod, type_);
    let transition = match old {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(Time(whole(now))),
    };
    let condition = PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: transition,
        last_probe_time: None,
        ..PodCondition::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}

/// What the pod's annotations ask of its simulated life.
struct Rules {
    start: Duration,
    run: Duration,
    exit_code: Option<i32>,
    pull_fails: bool,
    never_ready: bool,
}

impl Rules {
    fn of(pod: &Pod, timing: &Timing) -> Rules {
        let annotation = |key: &str| pod.annotations().get(key).map(|v| v.trim().to_string());
        let seconds = |key: &str| {
            annotation(key)
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_secs)
        };
        Rules {
            start: seconds(START_SECONDS).unwrap_or(Duration::ZERO),
            run: seconds(RUN_SECONDS).unwrap_or(timing.run),
            exit_code: annotation(EXIT_CODE).and_then(|v| v.parse().ok()),
            pull_fails: annotation(IMAGE_PULL).as_deref() == Some("fail"),
            never_ready: annotation(READY).as_deref() == Some("false"),
        }
    }
}

/// The earliest moment after `now` at which the status will change.
struct Next {
    now: Timestamp,
    at: Option<Timestamp>,
}

impl Next {
    fn at(&mut self, t: Timestamp) {
        if t > self.now && self.at.is_none_or(|a| t < a) {
            self.at = Some(t);
        }
    }
}

/// The status the kubelet would report now, and when it will next change.
fn desired_status(
    ctx: &PodCtx,
    pod: &Pod,
    node: &SimNode,
    now: Timestamp,
) -> (PodStatus, Option<Timestamp>) {
    let current = pod.status.clone().unwrap_or_default();
    let t0 = current
        .start_time
        .as_ref()
        .map_or_else(|| whole(now), |t| t.0);
    let rules = Rules::of(pod, &ctx.timing);
    let mut next = Next { now, at: None };
    let spec = pod.spec.clone().unwrap_or_default();
    let sandbox_at = after(t0, rules.start);
    // The first status is always Pending with the sandbox on its way, as the kubelet's
    // first sync writes it; the write itself wakes the next reconcile.
    let sandbox = current.start_time.is_some() && now >= sandbox_at;
    next.at(sandbox_at);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut sim = Sim {
        pod,
        uid: &uid,
        rules: &rules,
        now,
        next: &mut next,
    };

    // Init containers, one after another.
    let inits = spec.init_containers.clone().unwrap_or_default();
    let mut init_statuses = Vec::new();
    let mut t = sandbox_at;
    let mut pending_init: Vec<String> = Vec::new();
    for (i, c) in inits.iter().enumerate() {
        let blocked = !pending_init.is_empty();
        let status = if !sandbox || blocked {
            sim.waiting(c, "PodInitializing", None, 0)
        } else if rules.pull_fails && i == 0 {
            sim.pull_failure(c, sandbox_at)
        } else if now < after(t, rules.run) {
            sim.next.at(after(t, rules.run));
            sim.running(c, t, 0, None, false)
        } else {
            let mut s = sim.base(c, 0);
            s.ready = true;
            s.started = Some(false);
            s.state = Some(ContainerState {
                terminated: Some(terminated(
                    0,
                    Some(t),
                    after(t, rules.run),
                    s.container_id.clone(),
                )),
                ..ContainerState::default()
            });
            s
        };
        if status.state.as_ref().is_none_or(|s| s.terminated.is_none()) {
            pending_init.push(c.name.clone());
        }
        init_statuses.push(status);
        t = after(t, rules.run);
    }
    let initialized = sandbox && pending_init.is_empty();
    let app_start = t;

    // App containers.
    let restart = spec.restart_policy.as_deref().unwrap_or("Always");
    let owned_by_job = pod
        .owner_references()
        .iter()
        .any(|o| o.kind == "Job" && o.controller == Some(true));
    let completes = owned_by_job || restart != "Always";
    let mut app_statuses = Vec::new();
    for c in &spec.containers {
        let status = if !initialized {
            let reason = if inits.is_empty() {
                "ContainerCreating"
            } else {
                "PodInitializing"
            };
            sim.waiting(c, reason, None, 0)
        } else if rules.pull_fails && inits.is_empty() {
            sim.pull_failure(c, sandbox_at)
        } else {
            sim.lifecycle(c, app_start, completes, restart)
        };
        app_statuses.push(status);
    }

    // The phase, as the kubelet's getPhase.
    let never_ran = |s: &ContainerStatus| {
        s.state.as_ref().is_some_and(|st| st.waiting.is_some())
            && s.last_state.as_ref().is_none_or(|l| l.terminated.is_none())
    };
    let exit = |s: &ContainerStatus| {
        s.state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .map(|t| t.exit_code)
    };
    let phase = if !initialized || app_statuses.iter().any(never_ran) {
        "Pending"
    } else if app_statuses.iter().all(|s| exit(s).is_some()) {
        if app_statuses.iter().all(|s| exit(s) == Some(0)) {
            "Succeeded"
        } else {
            "Failed"
        }
    } else {
        "Running"
    };
    let terminal = matches!(phase, "Succeeded" | "Failed");

    let mut status = current.clone();
    status.phase = Some(phase.into());
    status.start_time = Some(Time(t0));
    status.host_ip = Some(node.internal_ip.clone());
    status.host_ips = Some(vec![HostIP {
        ip: node.internal_ip.clone(),
    }]);
    if sandbox && status.pod_ip.is_none() {
        let ip = if spec.host_network == Some(true) {
            node.internal_ip.clone()
        } else {
            allocate_ip(ctx, pod, node)
        };
        status.pod_ip = Some(ip.clone());
        status.pod_ips = Some(vec![PodIP { ip }]);
    }
    status.init_container_statuses = (!init_statuses.is_empty()).then_some(init_statuses);
    status.container_statuses = Some(app_statuses.clone());

    let mut conditions = current.conditions.clone().unwrap_or_default();
    let unready: Vec<&str> = app_statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let completed = terminal.then_some("PodCompleted");
    set_condition(
        &mut conditions,
        pod,
        "PodReadyToStartContainers",
        sandbox && !terminal,
        None,
        None,
        now,
    );
    if pending_init.is_empty() {
        set_condition(
            &mut conditions,
            pod,
            "Initialized",
            true,
            completed,
            None,
            now,
        );
    } else {
        let message = format!(
            "containers with incomplete status: [{}]",
            pending_init.join(" ")
        );
        set_condition(
            &mut conditions,
            pod,
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(message),
            now,
        );
    }
    for type_ in ["Ready", "ContainersReady"] {
        if terminal {
            set_condition(&mut conditions, pod, type_, false, completed, None, now);
        } else if unready.is_empty() {
            let gates = (type_ == "Ready")
                .then(|| unready_gates(&spec, &current))
                .flatten();
            match gates {
                Some(message) => set_condition(
                    &mut conditions,
                    pod,
                    type_,
                    false,
                    Some("ReadinessGatesNotReady"),
                    Some(message),
                    now,
                ),
                None => set_condition(&mut conditions, pod, type_, true, None, None, now),
            }
        } else {
            let message = format!("containers with unready status: [{}]", unready.join(" "));
            set_condition(
                &mut conditions,
                pod,
                type_,
                false,
                Some("ContainersNotReady"),
                Some(message),
                now,
            );
        }
    }
    if !conditions.iter().any(|c| c.type_ == "PodScheduled") {
        set_condition(&mut conditions, pod, "PodScheduled", true, None, None, now);
    }
    let order = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    conditions.sort_by_key(|c| {
        order
            .iter()
            .position(|o| *o == c.type_)
            .unwrap_or(order.len())
    });
    status.conditions = Some(conditions);
    (status, next.at)
}

/// Why the pod's readiness gates keep it unready (the kubelet's messages), if they do.
fn unready_gates(spec: &k8s_openapi::api::core::v1::PodSpec, status: &PodStatus) -> Option<String> {
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let messages: Vec<String> = spec
        .readiness_gates
        .iter()
        .flatten()
        .filter_map(|gate| {
            let gate = &gate.condition_type;
            match conditions.iter().find(|c| &c.type_ == gate) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {gate:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {gate:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    (!messages.is_empty()).then(|| messages.join(", "))
}

/// The container statuses' timeline for one pod.
struct Sim<'a> {
    pod: &'a Pod,
    uid: &'a str,
    rules: &'a Rules,
    now: Timestamp,
    next: &'a mut Next,
}

impl Sim<'_> {
    fn base(&self, c: &k8s_openapi::api::core::v1::Container, restarts: i32) -> ContainerStatus {
        let image = normalize_image(c.image.as_deref().unwrap_or_default());
        let repository = image
            .rsplit_once(':')
            .filter(|(_, tag)| !tag.contains('/'))
            .map_or(image.as_str(), |(r, _)| r);
        let repository = repository.split('@').next().unwrap_or(repository);
        ContainerStatus {
            name: c.name.clone(),
            image_id: format!("{repository}@sha256:{}", fake_digest(&image)),
            image,
            container_id: Some(format!(
                "containerd://{}",
                fake_digest(&format!("{}/{}/{restarts}", self.uid, c.name))
            )),
            restart_count: restarts,
            started: Some(false),
            ready: false,
            ..ContainerStatus::default()
        }
    }

    fn waiting(
        &self,
        c: &k8s_openapi::api::core::v1::Container,
        reason: &str,
        message: Option<String>,
        restarts: i32,
    ) -> ContainerStatus {
        let mut s = self.base(c, restarts);
        // Not created yet: the kubelet reports the image as the spec names it.
        s.container_id = None;
        s.image_id = String::new();
        s.image = c.image.clone().unwrap_or_default();
        s.state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message,
            }),
            ..ContainerState::default()
        });
        s
    }

    fn pull_failure(
        &mut self,
        c: &k8s_openapi::api::core::v1::Container,
        since: Timestamp,
    ) -> ContainerStatus {
        let image = c.image.clone().unwrap_or_default();
        let backoff_at = after(since, Duration::from_secs(1));
        self.next.at(backoff_at);
        if self.now < backoff_at {
            let message = format!(
                "rpc error: code = NotFound desc = failed to pull and unpack image {:?}: \
                 {IMAGE_PULL}: fail",
                normalize_image(&image)
            );
            self.waiting(c, "ErrImagePull", Some(message), 0)
        } else {
            // The kubelet names the image with its default tag applied.
            let tagged = with_default_tag(&image);
            let message = format!("Back-off pulling image {tagged:?}");
            self.waiting(c, "ImagePullBackOff", Some(message), 0)
        }
    }

    fn running(
        &mut self,
        c: &k8s_openapi::api::core::v1::Container,
        since: Timestamp,
        restarts: i32,
        last: Option<ContainerStateTerminated>,
        app: bool,
    ) -> ContainerStatus {
        let mut s = self.base(c, restarts);
        s.started = Some(true);
        if app && !self.rules.never_ready {
            let delay = c
                .readiness_probe
                .as_ref()
                .and_then(|p| p.initial_delay_seconds)
                .unwrap_or(0);
            let ready_at = after(since, secs(i64::from(delay)));
            self.next.at(ready_at);
            s.ready = self.now >= ready_at;
        }
        s.state = Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(since)),
            }),
            ..ContainerState::default()
        });
        s.last_state = last.map(|t| ContainerState {
            terminated: Some(t),
            ..ContainerState::default()
        });
        s
    }

    /// An app container started at `start`: runs for good, or exits and maybe restarts.
    fn lifecycle(
        &mut self,
        c: &k8s_openapi::api::core::v1::Container,
        start: Timestamp,
        completes: bool,
        restart: &str,
    ) -> ContainerStatus {
        let code = match (self.rules.exit_code, completes) {
            (Some(code), _) => code,
            (None, true) => 0,
            (None, false) => return self.running(c, start, 0, None, true),
        };
        let restarts = restart == "Always" || (restart == "OnFailure" && code != 0);
        let mut since = start;
        let mut last: Option<ContainerStateTerminated> = None;
        for k in 0..100_000_i32 {
            let exits = after(since, self.rules.run);
            if self.now < exits {
                self.next.at(exits);
                return self.running(c, since, k, last, true);
            }
            let id = self.base(c, k).container_id;
            let ended = terminated(code, Some(since), exits, id);
            if !restarts {
                let mut s = self.base(c, k);
                s.state = Some(ContainerState {
                    terminated: Some(ended),
                    ..ContainerState::default()
                });
                s.last_state = last.map(|t| ContainerState {
                    terminated: Some(t),
                    ..ContainerState::default()
                });
                return s;
            }
            let backoff = if k == 0 {
                Duration::ZERO
            } else {
                Duration::from_secs(10u64.saturating_mul(1 << (k - 1).min(10)).min(300))
            };
            let restarts_at = after(exits, backoff);
            if self.now < restarts_at {
                self.next.at(restarts_at);
                let message = format!(
                    "back-off {} restarting failed container={} pod={}_{}({})",
                    format_backoff(backoff),
                    c.name,
                    self.pod.name_any(),
                    self.pod.namespace().unwrap_or_default(),
                    self.uid
                );
                let ran = self.base(c, k);
                let mut s = self.waiting(c, "CrashLoopBackOff", Some(message), k);
                (s.image, s.image_id) = (ran.image, ran.image_id);
                s.last_state = Some(ContainerState {
                    terminated: Some(ended),
                    ..ContainerState::default()
                });
                return s;
            }
            since = restarts_at;
            last = Some(ended);
        }
        self.running(c, since, 100_000, last, true)
    }
}

/// The kubelet's back-off as Go prints a duration (`10s`, `1m20s`, `5m0s`).
fn format_backoff(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{}s", s / 60, s % 60)
    }
}

/// The image as containerd reports it: `nginx` is `docker.io/library/nginx:latest`.
fn normalize_image(image: &str) -> String {
    let (first, rest) = image.split_once('/').unwrap_or(("", image));
    let qualified = if first.is_empty() {
        format!("docker.io/library/{rest}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        image.to_string()
    } else {
        format!("docker.io/{image}")
    };
    with_default_tag(&qualified)
}

/// `image`, with `:latest` when it names neither a tag nor a digest.
fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or_default();
    if last.contains(':') || last.contains('@') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

/// 64 hex digits that depend only on `input` (FNV-1a, four seeds): fake but stable ids.
fn fake_digest(input: &str) -> String {
    (0u64..4)
        .map(|seed| {
            let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for byte in input.bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
            format!("{hash:016x}")
        })
        .collect()
}

/// The lowest free address of the node's CIDR (from .2), skipping the live pods' IPs.
fn allocate_ip(ctx: &PodCtx, pod: &Pod, node: &SimNode) -> String {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut handed = ctx.ips.lock().unwrap_or_else(PoisonError::into_inner);
    let live: BTreeMap<String, Arc<Pod>> = ctx
        .pods
        .list()
        .into_iter()
        .filter(|p| node_name(p) == Some(node.name.as_str()))
        .filter(|p| !matches!(crate::pods::phase(p), "Succeeded" | "Failed"))
        .map(|p| (p.metadata.uid.clone().unwrap_or_default(), p))
        .collect();
    // Forget IPs handed to pods that are gone or whose status now holds them.
    handed.retain(|u, _| {
        live.get(u)
            .is_some_and(|p| p.status.as_ref().is_none_or(|s| s.pod_ip.is_none()))
    });
    if let Some(ip) = handed.get(&uid) {
        return ip.clone();
    }
    let mut used: BTreeSet<String> = handed.values().cloned().collect();
    used.extend(
        live.values()
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone()),
    );
    let ip = (2..=254)
        .map(|host| format!("{}.{host}", node.pod_prefix))
        .find(|ip| !used.contains(ip))
        .unwrap_or_else(|| format!("{}.254", node.pod_prefix));
    handed.insert(uid, ip.clone());
    ip
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_normalized_as_containerd_reports_them() {
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(
            normalize_image("nginx:1.27"),
            "docker.io/library/nginx:1.27"
        );
        assert_eq!(
            normalize_image("bitnami/redis"),
            "docker.io/bitnami/redis:latest"
        );
        assert_eq!(
            normalize_image("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(
            normalize_image("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
    }

    #[test]
    fn digests_are_stable_and_64_hex_digits() {
        let digest = fake_digest("nginx");
        assert_eq!(digest.len(), 64);
        assert_eq!(digest, fake_digest("nginx"));
        assert_ne!(digest, fake_digest("redis"));
        assert_eq!(format_backoff(Duration::from_secs(80)), "1m20s");
    }
}
