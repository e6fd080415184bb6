//! What kube-apiserver's start-up hooks create in a new cluster, created once when the server
//! starts (and again where missing): the system namespaces, the `kubernetes` ServiceCIDR (the
//! service IP range), the `kubernetes` Service with its Endpoints and EndpointSlice (pointing
//! at the advertised address; a restarted server brings them back to it once it serves,
//! [`kubernetes_service_after_restart`]), the system PriorityClasses, every bootstrap RBAC role and binding of
//! kube-apiserver 1.33 (the user-facing `cluster-admin`, `admin`, `edit`, `view`, the
//! `system:` roles of discovery, nodes, the scheduler, kube-controller-manager and each of its
//! controllers, and the Roles and RoleBindings in `kube-system` and `kube-public`), API
//! Priority and Fairness' priority levels and FlowSchemas (created as its config producer,
//! which [`super::flowcontrol`] goes on running), and an APIService for every built-in
//! group-version.
//!
//! The objects themselves are data, in `bootstrap.json` (and
//! [`crate::flowcontrol::bootstrap`]), as Kubernetes 1.33 creates them.
//! In a store never written to, the ones that are the same for every server (all but the
//! namespaces, the ServiceCIDR and the `kubernetes` Service and its endpoints) are made by
//! the create path once per process, as dry runs, and stored from what it would store
//! ([`Prepared`]); a server that finds a store written to before creates what is missing
//! one by one.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{KeyRange, RangeRequest};
use serde_json::{Value, json};

use super::fixed::{KUBERNETES, ensure, ensure_as, manager, reconcile, write_options_of};
use crate::error::{ApiError, Reason, Target};
use crate::registry::{Prepared, Registry, ServiceIpRange, WriteOptions};
use crate::resources::{ResourceType, meta};

/// The namespaces that exist from the start.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The `kubernetes` Service's cluster IP in the default service range (10.96.0.0/12,
/// kubeadm's); see [`ServiceIpRange::kubernetes_service_ip`] for another range.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The field manager of the default ServiceCIDR's status, kube-apiserver's controller's name.
const SERVICE_CIDR_MANAGER: &str = "kubernetes-service-cidr-controller";

/// What the bootstrap objects say about the server: its flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The range cluster IPs come from (`--service-cluster-ip-range`): the `kubernetes`
    /// ServiceCIDR's, and the `kubernetes` Service's IP is its first address.
    pub service_ip_range: ServiceIpRange,
    /// The address the `kubernetes` Service's endpoints point at (`--advertise-address`).
    pub advertise_address: IpAddr,
    /// The port they point at, the Service's `targetPort` (`--secure-port`).
    pub advertise_port: u16,
}

impl Config {
    /// Where the server says it is, for the `kubernetes` endpoints.
    pub fn advertised(&self) -> super::endpoints::Advertised {
        super::endpoints::Advertised {
            address: self.advertise_address,
            port: self.advertise_port,
        }
    }
}

impl Default for Config {
    /// 10.96.0.0/12, and 127.0.0.1:6443.
    fn default() -> Self {
        Config {
            service_ip_range: ServiceIpRange::default(),
            advertise_address: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            advertise_port: 6443,
        }
    }
}

/// Every built-in group-version's APIService priorities: (group, version,
/// groupPriorityMinimum, versionPriority), as kube-apiserver registers them (those not
/// served by default only when `--runtime-config` turns them on).
const API_SERVICE_PRIORITIES: [(&str, &str, i64, i64); 21] = [
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v1", 17500, 15),
    ("autoscaling", "v2", 17500, 30),
    ("batch", "v1", 17400, 15),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("networking.k8s.io", "v1", 17200, 15),
    ("policy", "v1", 17100, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1beta1", 16700, 12),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("node.k8s.io", "v1", 16300, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
];

/// The objects Kubernetes 1.33 bootstraps, by list: `clusterRoles`, `clusterRoleBindings`,
/// `roles`, `roleBindings` (namespaced), `priorityClasses`; read once per process.
fn bootstrap_data() -> &'static Value {
    static DATA: LazyLock<Value> =
        LazyLock::new(|| serde_json::from_str(include_str!("bootstrap.json")).unwrap_or_default());
    &DATA
}

/// Every built-in group-version's APIService, with its group and version.
fn api_services() -> &'static [(&'static str, &'static str, Value)] {
    static SERVICES: LazyLock<Vec<(&str, &str, Value)>> = LazyLock::new(|| {
        API_SERVICE_PRIORITIES
            .iter()
            .map(|&(group, version, group_priority, version_priority)| {
                let service = api_service(group, version, group_priority, version_priority);
                (group, version, service)
            })
            .collect()
    });
    &SERVICES
}

/// How a server's bootstrap found its store, for the control loops' first pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrapped {
    /// The store had been written to and held every fixed object: nothing was made. What
    /// depends on this server's flags and may have changed since the last one (the
    /// `kubernetes` Service's port and endpoints) is corrected once it serves
    /// ([`kubernetes_service_after_restart`]), as are flow control's conditions.
    Found,
    /// The store had been written to, but some fixed objects were missing: each was looked
    /// up, and made if missing.
    Existing,
    /// A new store, given the fixed objects as the create path makes them.
    Created {
        /// Whether they are as the pass every server makes before it serves (flow
        /// control's conditions) left them in the process's first new store: that pass has
        /// nothing left to do.
        passed: bool,
    },
    /// A new store, given the fixed objects as they stood after the first pass of the
    /// control loops over a store like it: the aggregated ClusterRoles (`admin`, `edit`,
    /// `view`, ...) already hold the rules they aggregate, written by the aggregation
    /// controller, so that pass has nothing left to do.
    CreatedSettled {
        /// As for [`Bootstrapped::Created`].
        passed: bool,
    },
}

impl Bootstrapped {
    /// Whether the store was written to before this server started.
    pub(crate) fn written_before(self) -> bool {
        matches!(self, Bootstrapped::Found | Bootstrapped::Existing)
    }

    /// Whether the fixed objects were given as the pass every server makes left them.
    pub(crate) fn passed(self) -> bool {
        match self {
            Bootstrapped::Found | Bootstrapped::Existing => false,
            Bootstrapped::Created { passed } | Bootstrapped::CreatedSettled { passed } => passed,
        }
    }
}

/// Creates every bootstrap object that is missing. `settled` asks for the fixed objects as
/// the control loops' first pass leaves them, when this process has seen one (a server
/// whose control loops run).
pub async fn run(
    registry: &Registry,
    config: &Config,
    settled: bool,
) -> Result<Bootstrapped, ApiError> {
    // A store never written to (at revision 1, as a new etcd) holds none of them: nothing
    // to look up first.
    let fresh = registry
        .store()
        .current_revision()
        .await
        .map_err(|e| ApiError::from_store(e, Target::default()))?
        <= 1;
    for name in SYSTEM_NAMESPACES {
        ensure(
            registry,
            "",
            "v1",
            "namespaces",
            None,
            json!({"metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]}}),
        )
        .await?;
    }
    default_service_cidr(registry, &config.service_ip_range).await?;
    let fixed = fixed_objects(registry);
    if fresh {
        kubernetes_service(registry, config).await?;
        return create_fixed(registry, &fixed, settled).await;
    }
    // Looked up together: one read of the keys under each resource's prefix.
    let present = stored_keys(registry, &fixed).await?;
    let keys = keys_of(&fixed);
    if keys.iter().all(|key| present.contains(key.as_bytes())) {
        return Ok(Bootstrapped::Found);
    }
    kubernetes_service(registry, config).await?;
    for (object, key) in fixed.iter().zip(keys) {
        if present.contains(key.as_bytes()) {
            continue;
        }
        let namespace = meta::meta_str(object.value, "namespace");
        ensure_as(
            registry,
            &object.rt,
            namespace,
            object.value.clone(),
            object.manager,
        )
        .await?;
    }
    Ok(Bootstrapped::Existing)
}

/// The keys stored under the prefixes of `fixed`'s resources.
async fn stored_keys(registry: &Registry, fixed: &[Fixed]) -> Result<HashSet<Bytes>, ApiError> {
    let mut prefixes: Vec<String> = fixed.iter().map(|o| o.rt.storage_prefix()).collect();
    prefixes.dedup();
    let mut keys = HashSet::new();
    for prefix in prefixes {
        let listed = registry
            .store()
            .range(RangeRequest::new(KeyRange::prefix(Bytes::from(prefix))).keys_only())
            .await
            .map_err(|e| ApiError::from_store(e, Target::default()))?;
        keys.extend(listed.kvs.into_iter().map(|kv| kv.key));
    }
    Ok(keys)
}

/// One of the objects every server bootstraps the same way, whatever its flags.
struct Fixed {
    rt: Arc<ResourceType>,
    value: &'static Value,
    /// The field manager it is created as.
    manager: &'static str,
}

/// The objects every server bootstraps the same way, in the order they are created: the
/// priority classes, the RBAC roles and bindings, API Priority and Fairness' priority levels
/// and FlowSchemas (suggested, then mandatory, as kube's config producer ensures them), and
/// the APIService of every built-in group-version this server serves.
fn fixed_objects(registry: &Registry) -> Vec<Fixed> {
    let data = bootstrap_data();
    let catalog = registry.catalog();
    let mut fixed = Vec::new();
    let rbac = "rbac.authorization.k8s.io";
    for (list, group, plural) in [
        ("priorityClasses", "scheduling.k8s.io", "priorityclasses"),
        ("clusterRoles", rbac, "clusterroles"),
        ("clusterRoleBindings", rbac, "clusterrolebindings"),
        ("roles", rbac, "roles"),
        ("roleBindings", rbac, "rolebindings"),
    ] {
        let Some(rt) = catalog.get(group, "v1", plural) else {
            continue;
        };
        for value in data[list].as_array().into_iter().flatten() {
            fixed.push(Fixed {
                rt: rt.clone(),
                value,
                manager: manager(),
            });
        }
    }
    let flow = crate::flowcontrol::bootstrap();
    let group = crate::flowcontrol::GROUP;
    if let (Some(levels), Some(schemas)) = (
        catalog.get(group, "v1", "prioritylevelconfigurations"),
        catalog.get(group, "v1", "flowschemas"),
    ) {
        for (rt, list) in [
            (&levels, &flow.suggested_priority_levels),
            (&schemas, &flow.suggested_flow_schemas),
            (&levels, &flow.mandatory_priority_levels),
            (&schemas, &flow.mandatory_flow_schemas),
        ] {
            fixed.extend(list.iter().map(|value| Fixed {
                rt: rt.clone(),
                value,
                manager: crate::flowcontrol::PRODUCER,
            }));
        }
    }
    let Some(api_service_rt) = catalog.get("apiregistration.k8s.io", "v1", "apiservices") else {
        return fixed;
    };
    let all = catalog.all();
    let served: HashSet<(&str, &str)> = all
        .iter()
        .map(|rt| (rt.group.as_str(), rt.version.as_str()))
        .collect();
    for (group, version, value) in api_services() {
        if served.contains(&(group, version)) {
            fixed.push(Fixed {
                rt: api_service_rt.clone(),
                value,
                manager: manager(),
            });
        }
    }
    fixed
}

/// The fixed objects as the create path makes them, prepared the first time this process
/// bootstrapped a new store, with the storage keys they were made for; and, once a first
/// pass of the control loops has aggregated the ClusterRoles of such a store, the same
/// objects with those roles as that pass left them.
struct PreparedSet {
    keys: Vec<String>,
    created: Arc<Vec<Prepared>>,
    settled: Option<Arc<Vec<Prepared>>>,
    /// Whether both are as the pass every server makes left them ([`Keep::Created`]).
    passed: bool,
}

static PREPARED: Mutex<Option<PreparedSet>> = Mutex::new(None);

/// The storage keys of `fixed`, in order.
fn keys_of(fixed: &[Fixed]) -> Vec<String> {
    fixed
        .iter()
        .map(|object| {
            let namespace = meta::meta_str(object.value, "namespace");
            let name = meta::meta_str(object.value, "name").unwrap_or_default();
            object.rt.key(namespace, name)
        })
        .collect()
}

/// Creates the fixed objects in a new store. The first time in a process, each goes the
/// create path of any request (defaults, admission, validation, managed fields) as a dry
/// run, and what it would store is kept; then they are stored, in order, with their own
/// uids and times (see [`Prepared`]), which a disk store makes durable in one commit rather
/// than one per object. Later servers of the same resources skip the dry runs, and those
/// asking for `settled` objects get the aggregated ClusterRoles as the first aggregation
/// pass wrote them ([`remember_settled`]), if there has been one.
async fn create_fixed(
    registry: &Registry,
    fixed: &[Fixed],
    settled: bool,
) -> Result<Bootstrapped, ApiError> {
    let keys = keys_of(fixed);
    let ready = PREPARED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .filter(|set| set.keys == keys)
        .map(|set| match &set.settled {
            Some(objects) if settled => (
                objects.clone(),
                Bootstrapped::CreatedSettled { passed: set.passed },
            ),
            _ => (
                set.created.clone(),
                Bootstrapped::Created { passed: set.passed },
            ),
        });
    let (prepared, bootstrapped) = match ready {
        Some(ready) => ready,
        None => {
            let mut prepared = Vec::with_capacity(fixed.len());
            for object in fixed {
                let opts = WriteOptions {
                    dry_run: true,
                    ..write_options_of(object.manager)
                };
                let namespace = meta::meta_str(object.value, "namespace");
                let written = registry
                    .create(&object.rt, namespace, object.value.clone(), &opts)
                    .await?;
                prepared.push(Prepared::from_created(&object.rt, &written.object)?);
            }
            let prepared = Arc::new(prepared);
            *PREPARED.lock().unwrap_or_else(PoisonError::into_inner) = Some(PreparedSet {
                keys,
                created: prepared.clone(),
                settled: None,
                passed: false,
            });
            (prepared, Bootstrapped::Created { passed: false })
        }
    };
    let objects: Vec<(&ResourceType, &Prepared)> = fixed
        .iter()
        .zip(prepared.iter())
        .map(|(object, prepared)| (&*object.rt, prepared))
        .collect();
    for created in registry.create_prepared(&objects).await {
        match created {
            // Made meanwhile by another server of the same store.
            Err(e) if e.reason == Reason::AlreadyExists => {}
            other => other?,
        }
    }
    Ok(bootstrapped)
}

/// What one pass of a control loop over a store saw and wrote, for [`remember_settled`].
#[derive(Debug)]
pub(crate) struct Pass {
    /// The resources it read.
    pub(crate) read: Vec<Arc<ResourceType>>,
    /// The storage key of every object of those resources it read.
    pub(crate) listed: HashSet<String>,
    /// The objects it wrote, as written, each with its resource (one of `read`).
    pub(crate) written: Vec<(Arc<ResourceType>, Value)>,
    /// Whether a write failed.
    pub(crate) failed: bool,
}

impl Pass {
    /// A pass that has read nothing yet.
    pub(crate) fn new(read: Vec<Arc<ResourceType>>) -> Pass {
        Pass {
            read,
            listed: HashSet::new(),
            written: Vec::new(),
            failed: false,
        }
    }
}

/// Which of the prepared objects a first pass over a new store is remembered into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Those of every later new store: the pass runs in every server (flow control's
    /// conditions).
    Created,
    /// Those of later new stores whose control loops run, for a pass of those loops
    /// (ClusterRole aggregation).
    Settled,
}

/// Keeps what the first pass of a loop over a store [`Bootstrapped::Created`] wrote, for
/// later new stores to be given those objects as they stand after it, so their own pass has
/// nothing to write. Kept only when the pass saw exactly the fixed objects of the resources
/// it read (nothing else could have changed its outcome), wrote nothing but fixed objects,
/// and nothing failed; otherwise later stores go on writing for themselves. A pass
/// remembered [`Keep::Settled`] is remembered once; one [`Keep::Created`] goes into the
/// settled objects too, whether they were remembered before or after.
pub(crate) fn remember_settled(registry: &Registry, pass: &Pass, into: Keep) {
    let fixed = fixed_objects(registry);
    let keys = keys_of(&fixed);
    let fixed_read: HashSet<&str> = fixed
        .iter()
        .zip(&keys)
        .filter(|(object, _)| pass.read.iter().any(|rt| Arc::ptr_eq(rt, &object.rt)))
        .map(|(_, key)| key.as_str())
        .collect();
    let listed: HashSet<&str> = pass.listed.iter().map(String::as_str).collect();
    if pass.failed || listed != fixed_read {
        return;
    }
    let mut written = Vec::with_capacity(pass.written.len());
    for (rt, object) in &pass.written {
        let Ok(prepared) = Prepared::from_created(rt, object) else {
            return;
        };
        match keys.iter().position(|key| key.as_bytes() == prepared.key()) {
            Some(at) => written.push((at, prepared)),
            None => return,
        }
    }
    let replaced = |objects: &[Prepared]| {
        let mut objects = objects.to_vec();
        for (at, prepared) in &written {
            objects[*at] = prepared.clone();
        }
        Arc::new(objects)
    };
    let mut guard = PREPARED.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(set) = guard.as_mut().filter(|set| set.keys == keys) else {
        return;
    };
    match into {
        Keep::Settled if set.settled.is_none() => set.settled = Some(replaced(&set.created)),
        Keep::Settled => {}
        Keep::Created if set.passed => {}
        Keep::Created => {
            set.passed = true;
            set.created = replaced(&set.created);
            if let Some(settled) = &set.settled {
                set.settled = Some(replaced(settled));
            }
        }
    }
}

/// Whether `group`/`version` is one of kube-apiserver's own group-versions (served or not),
/// whose APIService is registered at start, never for a custom resource.
pub(crate) fn is_builtin_group_version(group: &str, version: &str) -> bool {
    API_SERVICE_PRIORITIES
        .iter()
        .any(|(g, v, _, _)| *g == group && *v == version)
}

/// The APIService of a group-version served by this server itself.
fn api_service(group: &str, version: &str, group_priority: i64, version_priority: i64) -> Value {
    json!({
        "metadata": {
            "name": format!("{version}.{group}"),
            "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"},
        },
        "spec": {
            "group": group,
            "version": version,
            "groupPriorityMinimum": group_priority,
            "versionPriority": version_priority,
        },
    })
}

/// The `kubernetes` ServiceCIDR: the service IP range cluster IPs are allocated from, made
/// Ready, as kube-apiserver's default ServiceCIDR controller does. One left by an earlier run
/// with another range is kept (kube-apiserver does not change it either, and says so).
async fn default_service_cidr(registry: &Registry, range: &ServiceIpRange) -> Result<(), ApiError> {
    let Some(rt) = registry
        .catalog()
        .get("networking.k8s.io", "v1", "servicecidrs")
    else {
        return Ok(());
    };
    let cidrs = json!([range.to_string()]);
    ensure(
        registry,
        "networking.k8s.io",
        "v1",
        "servicecidrs",
        None,
        json!({"metadata": {"name": KUBERNETES}, "spec": {"cidrs": cidrs}}),
    )
    .await?;
    let mut current = registry.get(&rt, None, KUBERNETES, None).await?;
    if current.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    if current.pointer("/spec/cidrs") != Some(&cidrs) {
        tracing::warn!(
            service_cidr = ?current.pointer("/spec/cidrs"),
            flags = %range,
            "the default ServiceCIDR does not match the service IP range; configure the range to match it or delete it"
        );
        return Ok(());
    }
    let ready = current
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    if ready.is_some_and(|c| c["status"] != "Unknown") {
        return Ok(());
    }
    current["status"] = json!({"conditions": [{
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": meta::now(),
        "reason": "",
        "message": "Kubernetes default Service CIDR is ready",
    }]});
    let opts = WriteOptions {
        field_manager: Some(SERVICE_CIDR_MANAGER.into()),
        ..WriteOptions::default()
    };
    registry
        .update(&rt, None, KUBERNETES, current, Some("status"), &opts)
        .await
        .map(|_| ())
}

/// What [`run`] leaves for after the server serves on a store written before: the
/// `kubernetes` Service and its endpoints, as kube-apiserver's bootstrap controller corrects
/// them once its own `/readyz` answers (a restarted server's port or address may have
/// changed). On a new store [`run`] writes them first, so that they are there from the
/// start. Tried again on failure (a client's write in the way) until it goes through.
pub(crate) async fn kubernetes_service_after_restart(registry: &Registry, config: &Config) {
    let mut wait = Duration::from_millis(100);
    loop {
        match kubernetes_service(registry, config).await {
            Ok(()) => return,
            Err(error) if error.reason == Reason::ServiceUnavailable => return,
            Err(error) => {
                tracing::warn!(%error, "correcting the kubernetes Service and its endpoints failed; trying again");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(super::endpoints::INTERVAL);
    }
}

/// The `kubernetes` Service in `default`, its Endpoints and its EndpointSlice, pointing at the
/// server's advertised address and port and at the other servers of the cluster whose
/// leases are in the store ([`endpoints`](super::endpoints)), as kube-apiserver's endpoint
/// reconciler writes them.
async fn kubernetes_service(registry: &Registry, config: &Config) -> Result<(), ApiError> {
    let ip = config.service_ip_range.kubernetes_service_ip().to_string();
    let port = config.advertise_port;
    reconcile(
        registry,
        "",
        "services",
        json!({
            "metadata": {"name": KUBERNETES, "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {
                "type": "ClusterIP",
                "clusterIP": ip,
                "clusterIPs": [ip],
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
                "internalTrafficPolicy": "Cluster",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
            },
        }),
        &["/spec/ports"],
    )
    .await?;
    let mut addresses = super::endpoints::leased_addresses(registry)
        .await
        .map_err(|e| ApiError::from_store(e, Target::default()))?;
    super::endpoints::ensure_lease(registry, &config.advertised(), &addresses)
        .await
        .map_err(|e| ApiError::from_store(e, Target::default()))?;
    addresses.insert(config.advertise_address);
    super::endpoints::kubernetes_endpoints(registry, config.advertise_address, port, &addresses)
        .await
}
