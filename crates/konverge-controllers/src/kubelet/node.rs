//! The kubelet's registration, node status and lease (`nodestatus`, `nodelease`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Namespace, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec,
    NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use konverge_runtime::{Action, ObjectKey, Store};
use kube::Client;
use kube::api::Api;

use super::image::fake_digest;
use super::state::Shared;
use super::{LEASE_NAMESPACE, SimNode, TIMER_NAMESPACE, Timing, after, whole};
use crate::clock::Clock;
use crate::error::Result;

/// What the nodes' timer reads and writes.
pub(super) struct NodeCtx {
    pub(super) client: Client,
    pub(super) clock: Clock,
    pub(super) nodes: Arc<BTreeMap<String, SimNode>>,
    pub(super) capacity: BTreeMap<String, Quantity>,
    pub(super) instance_type: Option<String>,
    pub(super) timing: Timing,
    pub(super) node_cache: Store<Node>,
    pub(super) lease_cache: Store<Lease>,
    pub(super) shared: Arc<Shared>,
}

pub(super) async fn reconcile_nodes(
    namespace: Arc<Namespace>,
    ctx: Arc<NodeCtx>,
) -> Result<Action> {
    if namespace.metadata.name.as_deref() != Some(TIMER_NAMESPACE) {
        return Ok(Action::await_change());
    }
    if !ctx.node_cache.is_ready() || !ctx.lease_cache.is_ready() {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    ensure_lease_namespace(&ctx.client).await?;
    for node in ctx.nodes.values() {
        sync(&ctx, node, false).await?;
    }
    Ok(Action::requeue(ctx.timing.lease_renew))
}

/// One node's kubelet: registered, its status written when due, its Lease renewed when due
/// (or at once with `renew`, as a kubelet that starts renews it). Nothing for a stopped
/// kubelet.
pub(super) async fn sync(ctx: &NodeCtx, node: &SimNode, renew: bool) -> Result<()> {
    if !ctx.shared.lock().is_running(&node.name) {
        return Ok(());
    }
    let registered = register(ctx, node).await?;
    heartbeat(ctx, node, &registered, renew).await
}

pub(super) async fn ensure_lease_namespace(client: &Client) -> Result<()> {
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(LEASE_NAMESPACE.to_string());
    match Api::<Namespace>::all(client.clone())
        .create(&super::write_params(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The node as the kubelet registers it; writes its status when it differs from what the
/// kubelet would report or the last report is older than `status_report`.
pub(super) async fn register(ctx: &NodeCtx, sim: &SimNode) -> Result<Arc<Node>> {
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
            match api.create(&super::write_params(), &node).await {
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
        api.replace_status(&sim.name, &super::write_params(), &node)
            .await?,
    ))
}

pub(super) fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

pub(super) fn node_meta(ctx: &NodeCtx, sim: &SimNode) -> ObjectMeta {
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
pub(super) fn node_status(
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
pub(super) async fn heartbeat(
    ctx: &NodeCtx,
    sim: &SimNode,
    node: &Node,
    renew: bool,
) -> Result<()> {
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
            match api.create(&super::write_params(), &lease).await {
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
            let due = renew
                || renewed.is_none_or(|t| {
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
            api.replace(&sim.name, &super::write_params(), &lease)
                .await?;
            Ok(())
        }
    }
}
