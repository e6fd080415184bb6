//! kcm's EndpointSlice controller (`pkg/controller/endpointslice` with the
//! `k8s.io/endpointslice` reconciler): for every Service with a selector, EndpointSlices
//! named `<service>-<random>`, owned by the Service, labelled
//! `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by:
//! endpointslice-controller.k8s.io`, one address type each (from the Service's
//! `ipFamilies`), at most 100 endpoints each, grouped by the ports their pods serve.
//!
//! Each pod is an endpoint with the conditions kcm gives it — `serving` when Ready,
//! `terminating` while being deleted, `ready` when serving and not terminating (always with
//! `publishNotReadyAddresses`) — its node, the node's `topology.kubernetes.io/zone`, its
//! hostname when its subdomain is the Service, and a reference to it. Slices are changed as
//! kcm changes them: endpoints updated in place, emptied slices deleted, new endpoints put
//! into slices being updated anyway (fullest first), then into the unchanged slice they
//! fill best, then into new slices; a slice about to be deleted is reused for one about to
//! be created; a Service without endpoints keeps one empty placeholder slice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store, predicate};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};

use super::addresses::{
    TriggerTimes, cluster_ip, find_port, format_trigger_time, hostname_for, ip_families,
    is_external_name, is_ipv6, is_service_ip_set, node_name, parse_ip, pod_ips, publish_not_ready,
    selector, selects, service_ports, services_for_pod_change, should_pod_be_in_endpoints,
    target_ref,
};
use super::subsets::namespace_terminating;
use super::{
    ANNOTATION_LAST_CHANGE_TRIGGER_TIME, LABEL_HEADLESS, LABEL_MANAGED_BY, LABEL_SERVICE_NAME,
    LABEL_ZONE,
};
use crate::descriptor::{Descriptor, Setup};
use crate::error::Result;
use crate::events::Events;
use crate::expectations::{Expectations, Seen};
use crate::{informers, pods};

/// kcm's EndpointSlice controller.
pub const ENDPOINTSLICE: Descriptor = Descriptor {
    name: "endpointslice-controller",
    aliases: &["endpointslice"],
    service_account: "endpointslice-controller",
    add,
};

/// The `endpointslice.kubernetes.io/managed-by` value of this controller's slices.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// kcm's `--max-endpoints-per-slice` default.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// kcm's event source for this controller.
const COMPONENT: &str = "endpoint-slice-controller";

/// kcm's `--concurrent-service-endpoint-syncs` default.
const WORKERS: usize = 5;

/// How soon a Service is synced again when one of its pods names a Node not in the cache
/// (kcm retries with back-off; a Node appearing syncs it at once).
const MISSING_NODE_RETRY: Duration = Duration::from_secs(5);

/// How soon a Service is looked at again while the cache has not caught up with its
/// slices' creations and deletions (a slice event usually comes first).
const CACHE_WAIT: Duration = Duration::from_secs(1);

struct Ctx {
    client: kube::Client,
    services: Store<Service>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    slices: Store<EndpointSlice>,
    triggers: TriggerTimes,
    events: Events,
    expectations: Expectations,
}

fn add(manager: &mut Manager, setup: Setup) {
    let ctx = Arc::new(Ctx {
        services: informers::cache::<Service>(manager),
        pods: informers::pods_by_node(manager),
        nodes: informers::cache::<Node>(manager),
        slices: informers::cache::<EndpointSlice>(manager),
        triggers: TriggerTimes::new(),
        events: Events::new(setup.client.clone(), COMPONENT),
        expectations: Expectations::new(),
        client: setup.client,
    });
    let (for_pods, for_nodes, for_deletes) = (ctx.clone(), ctx.clone(), ctx.clone());
    let controller = informers::controller::<Service>(manager)
        .named(ENDPOINTSLICE.name)
        .with_predicate(predicate::resource_version_changed())
        .concurrency(WORKERS)
        .watches_cached(
            informers::api::<Pod>(manager),
            informers::config(),
            move |change: &Change<Pod>| services_for_pod_change(&for_pods.services, change),
        )
        .watches_cached(
            informers::api::<EndpointSlice>(manager),
            informers::config(),
            |change: &Change<EndpointSlice>| services_of_slices(change, MANAGED_BY),
        )
        .watches_cached(
            informers::api::<Node>(manager),
            informers::config(),
            move |change: &Change<Node>| services_for_node_change(&for_nodes, change),
        )
        .watches_cached(
            informers::api::<Service>(manager),
            informers::config(),
            move |change: &Change<Service>| {
                if change.new.is_none() {
                    let key = &change.key;
                    let namespace = key.namespace.as_deref().unwrap_or_default();
                    for_deletes.triggers.forget(namespace, &key.name);
                    for_deletes
                        .expectations
                        .forget(&format!("{namespace}/{}", key.name));
                }
                Vec::new()
            },
        );
    manager.add(controller, sync_service, ctx);
}

/// The Services (by the `kubernetes.io/service-name` label) of the slices a change
/// concerns, before and after, when `managed_by` manages them.
pub(super) fn services_of_slices(
    change: &Change<EndpointSlice>,
    managed_by: &str,
) -> Vec<ObjectKey> {
    let namespace = change.key.namespace.clone().unwrap_or_default();
    let keys: BTreeSet<ObjectKey> = [change.old.as_deref(), change.new.as_deref()]
        .into_iter()
        .flatten()
        .filter(|slice| {
            slice.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(managed_by)
        })
        .filter_map(|slice| slice.labels().get(LABEL_SERVICE_NAME))
        .filter(|name| !name.is_empty())
        .map(|name| ObjectKey::namespaced(&namespace, name))
        .collect();
    keys.into_iter().collect()
}

/// A Node's zone.
fn zone(node: &Node) -> Option<&str> {
    node.labels()
        .get(LABEL_ZONE)
        .map(String::as_str)
        .filter(|z| !z.is_empty())
}

/// The Services of the pods on a Node that appeared, went, or changed zone: their
/// endpoints show its zone, and pods naming a missing Node are left out.
fn services_for_node_change(ctx: &Ctx, change: &Change<Node>) -> Vec<ObjectKey> {
    if let (Some(old), Some(new)) = (&change.old, &change.new)
        && zone(old) == zone(new)
    {
        return Vec::new();
    }
    let node = change.key.name.as_str();
    let on_node = informers::pods_on(&ctx.pods, node);
    let mut keys = BTreeSet::new();
    for pod in on_node {
        let namespace = pod.namespace().unwrap_or_default();
        for svc in ctx.services.list_namespace(&namespace) {
            if selector(&svc).is_some_and(|s| selects(s, pods::labels(&pod))) {
                keys.insert(ObjectKey::namespaced(&namespace, svc.name_any()));
            }
        }
    }
    keys.into_iter().collect()
}

/// Brings a Service's EndpointSlices in line with its pods (kcm's `syncService`).
async fn sync_service(service: Arc<Service>, ctx: Arc<Ctx>) -> Result<Action> {
    if is_external_name(&service) {
        return Ok(Action::await_change());
    }
    let Some(selector) = selector(&service) else {
        // Its users write its slices (or the mirroring controller does).
        return Ok(Action::await_change());
    };
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let key = format!("{namespace}/{name}");
    let cached = slices_of(&ctx.slices, &namespace, &name, MANAGED_BY);
    if !ctx.expectations.satisfied(&key, |uid| seen(&cached, uid)) {
        return Ok(Action::requeue(CACHE_WAIT));
    }
    // Slices being deleted are left to finish (kcm's `dropEndpointSlicesPendingDeletion`).
    let existing: Vec<Arc<EndpointSlice>> = cached
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .list_namespace(&namespace)
        .into_iter()
        .filter(|pod| selects(selector, pods::labels(pod)))
        .collect();
    let trigger = ctx.triggers.compute(&service, &pods);
    let mut plan = Plan::default();
    let mut missing_node = false;
    let types = address_types(&service);
    let mut by_type: BTreeMap<&str, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
    for slice in existing {
        match types.iter().find(|t| **t == slice.address_type) {
            Some(t) => by_type.entry(t).or_default().push(slice),
            None => plan.delete.push(slice),
        }
    }
    for address_type in &types {
        let existing = by_type.remove(address_type).unwrap_or_default();
        let (typed, missing) = plan_address_type(&ctx, &service, &pods, existing, address_type);
        plan.extend(typed);
        missing_node |= missing;
    }
    if let Err(error) = finalize(&ctx, &service, &key, plan, trigger).await {
        ctx.events.warning(
            &*service,
            "FailedToUpdateEndpointSlices",
            format!("Error updating Endpoint Slices for Service {namespace}/{name}: {error}"),
        );
        return Err(error);
    }
    Ok(if missing_node {
        Action::requeue(MISSING_NODE_RETRY)
    } else {
        Action::await_change()
    })
}

/// The cached slices of a Service that `managed_by` manages, in key order.
pub(super) fn slices_of(
    slices: &Store<EndpointSlice>,
    namespace: &str,
    service: &str,
    managed_by: &str,
) -> Vec<Arc<EndpointSlice>> {
    slices
        .by_label(LABEL_SERVICE_NAME, service)
        .unwrap_or_else(|_| slices.list_namespace(namespace))
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(namespace)
                && s.labels().get(LABEL_SERVICE_NAME).map(String::as_str) == Some(service)
                && s.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(managed_by)
        })
        .collect()
}

/// What the cache holds of the slice `uid` among a Service's `slices`.
pub(super) fn seen(slices: &[Arc<EndpointSlice>], uid: &str) -> Seen {
    match slices
        .iter()
        .find(|s| s.metadata.uid.as_deref() == Some(uid))
    {
        None => Seen::Absent,
        Some(s) if s.metadata.deletion_timestamp.is_some() => Seen::Terminating,
        Some(_) => Seen::Present,
    }
}

/// The address types of a Service's slices (kcm's `getAddressTypesForService`): its
/// `ipFamilies`; without them, its cluster IP's family, or both for a headless Service.
fn address_types(service: &Service) -> Vec<&'static str> {
    let mut types = BTreeSet::new();
    for family in ip_families(service) {
        match family.as_str() {
            "IPv4" => types.insert("IPv4"),
            "IPv6" => types.insert("IPv6"),
            _ => false,
        };
    }
    if types.is_empty() {
        if is_service_ip_set(service) {
            types.insert(if is_ipv6(cluster_ip(service)) {
                "IPv6"
            } else {
                "IPv4"
            });
        } else {
            types.extend(["IPv4", "IPv6"]);
        }
    }
    types.into_iter().collect()
}

/// The slices to create, update and delete.
#[derive(Debug, Default)]
struct Plan {
    create: Vec<EndpointSlice>,
    update: Vec<EndpointSlice>,
    delete: Vec<Arc<EndpointSlice>>,
}

impl Plan {
    fn extend(&mut self, other: Plan) {
        self.create.extend(other.create);
        self.update.extend(other.update);
        self.delete.extend(other.delete);
    }
}

/// How endpoints are told apart (kcm's `endpointHash`): their addresses, hostname and the
/// object they point at. Anything else of an endpoint is updated in place.
type EndpointKey = (Vec<String>, String, String, String);

fn endpoint_key(endpoint: &Endpoint) -> EndpointKey {
    let mut addresses = endpoint.addresses.clone();
    addresses.sort();
    let target = endpoint.target_ref.as_ref();
    let field = |f: fn(&ObjectReference) -> Option<&String>| {
        target.and_then(f).cloned().unwrap_or_default()
    };
    (
        addresses,
        endpoint.hostname.clone().unwrap_or_default(),
        field(|t| t.namespace.as_ref()),
        field(|t| t.name.as_ref()),
    )
}

/// A set of endpoints by [`EndpointKey`] (kcm's `EndpointSet`), taken out in key order.
#[derive(Debug, Default)]
pub(super) struct EndpointSet(BTreeMap<EndpointKey, Endpoint>);

impl EndpointSet {
    pub(super) fn insert(&mut self, endpoint: Endpoint) {
        self.0.insert(endpoint_key(&endpoint), endpoint);
    }

    pub(super) fn get(&self, endpoint: &Endpoint) -> Option<&Endpoint> {
        self.0.get(&endpoint_key(endpoint))
    }

    fn remove(&mut self, endpoint: &Endpoint) -> Option<Endpoint> {
        self.0.remove(&endpoint_key(endpoint))
    }

    pub(super) fn pop(&mut self) -> Option<Endpoint> {
        self.0.pop_first().map(|(_, e)| e)
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether two endpoints with the same [`EndpointKey`] are the same (kcm's
/// `EndpointsEqualBeyondHash`): node, zone, conditions, and target (resourceVersion aside).
pub(super) fn equal_beyond_key(a: &Endpoint, b: &Endpoint) -> bool {
    let conditions = |e: &Endpoint| {
        let c = e.conditions.clone().unwrap_or_default();
        (c.ready, c.serving, c.terminating)
    };
    let target = |e: &Endpoint| {
        e.target_ref.clone().map(|mut t| {
            t.resource_version = None;
            t
        })
    };
    a.node_name == b.node_name
        && a.zone == b.zone
        && conditions(a) == conditions(b)
        && target(a) == target(b)
}

/// The key grouping slices by their ports (kcm's `PortMapKey`): the ports in a fixed order.
pub(super) fn ports_key(ports: &[EndpointPort]) -> String {
    let mut ports: Vec<_> = ports
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                p.port,
                p.protocol.clone(),
                p.app_protocol.clone(),
            )
        })
        .collect();
    ports.sort();
    serde_json::to_string(&ports).unwrap_or_default()
}

/// The Service's slices of one address type, planned (kcm's `reconcileByAddressType`).
/// The flag says a pod was left out because its Node is not cached.
fn plan_address_type(
    ctx: &Ctx,
    service: &Service,
    pods: &[Arc<Pod>],
    existing: Vec<Arc<EndpointSlice>>,
    address_type: &str,
) -> (Plan, bool) {
    let mut plan = Plan::default();
    let existing_count = existing.len();
    let mut existing_by_ports: BTreeMap<String, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
    for slice in existing {
        if owned_by(&slice, service) {
            let key = ports_key(slice.ports.as_deref().unwrap_or_default());
            existing_by_ports.entry(key).or_default().push(slice);
        } else {
            plan.delete.push(slice);
        }
    }
    let mut desired: BTreeMap<String, (Vec<EndpointPort>, EndpointSet)> = BTreeMap::new();
    let mut missing_node = false;
    for pod in pods {
        if !should_pod_be_in_endpoints(pod, true) {
            continue;
        }
        let ports = endpoint_ports(service, pod);
        let (_, set) = desired
            .entry(ports_key(&ports))
            .or_insert_with(|| (ports, EndpointSet::default()));
        let node = node_name(pod).and_then(|n| ctx.nodes.get(&ObjectKey::cluster(n)));
        if node.is_none() && !publish_not_ready(service) {
            tracing::info!(
                pod = %pod.name_any(),
                service = %service.name_any(),
                "skipping Pod for Service, Node not found"
            );
            missing_node = true;
            continue;
        }
        let endpoint = pod_to_endpoint(pod, node.as_deref(), service, address_type);
        if !endpoint.addresses.is_empty() {
            set.insert(endpoint);
        }
    }
    let mut desired_keys = BTreeSet::new();
    for (key, (ports, set)) in desired {
        let existing = existing_by_ports
            .get(&key)
            .map(Vec::as_slice)
            .unwrap_or_default();
        plan.extend(plan_ports(service, existing, set, &ports, address_type));
        desired_keys.insert(key);
    }
    for (key, slices) in existing_by_ports {
        if !desired_keys.contains(&key) {
            plan.delete.extend(slices);
        }
    }
    if existing_count == plan.delete.len() && plan.create.is_empty() {
        let placeholder = new_slice(service, Vec::new(), address_type);
        if plan.delete.len() == 1 && same_placeholder(&plan.delete[0], &placeholder) {
            plan.delete.clear();
        } else {
            plan.create.push(placeholder);
        }
    }
    (plan, missing_node)
}

/// The slices of one set of ports, planned (kcm's `reconcileByPortMapping`; see the
/// module docs).
fn plan_ports(
    service: &Service,
    existing: &[Arc<EndpointSlice>],
    mut desired: EndpointSet,
    ports: &[EndpointPort],
    address_type: &str,
) -> Plan {
    let mut changed: BTreeMap<String, EndpointSlice> = BTreeMap::new();
    let mut unchanged: BTreeMap<String, Arc<EndpointSlice>> = BTreeMap::new();
    let mut delete = Vec::new();
    // 1. Keep the endpoints still wanted, updated; note what changed.
    for slice in existing {
        let name = slice.name_any();
        let mut kept = Vec::new();
        let mut updated = false;
        for endpoint in &slice.endpoints {
            if let Some(want) = desired.remove(endpoint) {
                updated |= !equal_beyond_key(&want, endpoint);
                kept.push(want);
            }
        }
        let (labels, labels_changed) = slice_labels(slice.metadata.labels.as_ref(), service);
        if updated || kept.len() != slice.endpoints.len() {
            if kept.is_empty() {
                delete.push(slice.clone());
            } else {
                let mut copy = (**slice).clone();
                copy.endpoints = kept;
                copy.metadata.labels = Some(labels);
                changed.insert(name, copy);
            }
        } else if labels_changed {
            let mut copy = (**slice).clone();
            copy.metadata.labels = Some(labels);
            changed.insert(name, copy);
        } else {
            unchanged.insert(name, slice.clone());
        }
    }
    // 2. Fill the slices being updated anyway, fullest first.
    let mut order: Vec<String> = changed.keys().cloned().collect();
    order.sort_by_key(|name| std::cmp::Reverse(changed.get(name).map_or(0, |s| s.endpoints.len())));
    for name in &order {
        if let Some(slice) = changed.get_mut(name) {
            fill(slice, &mut desired);
        }
    }
    // 3. The rest: into the unchanged slice they fill best, else into new slices.
    let mut create = Vec::new();
    while !desired.is_empty() {
        let reuse = (desired.len() < MAX_ENDPOINTS_PER_SLICE)
            .then(|| slice_to_fill(&unchanged, desired.len()))
            .flatten();
        match reuse.and_then(|name| unchanged.remove(&name)) {
            Some(slice) => {
                let mut copy = (*slice).clone();
                fill(&mut copy, &mut desired);
                changed.insert(copy.name_any(), copy);
            }
            None => {
                let mut slice = new_slice(service, ports.to_vec(), address_type);
                fill(&mut slice, &mut desired);
                create.push(slice);
            }
        }
    }
    Plan {
        create,
        update: changed.into_values().collect(),
        delete,
    }
}

/// Moves desired endpoints into `slice` until it is full.
fn fill(slice: &mut EndpointSlice, desired: &mut EndpointSet) {
    while slice.endpoints.len() < MAX_ENDPOINTS_PER_SLICE {
        let Some(endpoint) = desired.pop() else {
            return;
        };
        slice.endpoints.push(endpoint);
    }
}

/// The unchanged slice `count` more endpoints fill most without overflowing (kcm's
/// `getSliceToFill`).
fn slice_to_fill(unchanged: &BTreeMap<String, Arc<EndpointSlice>>, count: usize) -> Option<String> {
    let mut best: Option<(usize, &String)> = None;
    for (name, slice) in unchanged {
        let Some(room) = MAX_ENDPOINTS_PER_SLICE.checked_sub(count + slice.endpoints.len()) else {
            continue;
        };
        if best.is_none_or(|(least, _)| room < least) {
            best = Some((room, name));
            if room == 0 {
                break;
            }
        }
    }
    best.map(|(_, name)| name.clone())
}

/// A slice is owned by the Service (kcm's `ownedBy`).
fn owned_by(slice: &EndpointSlice, service: &Service) -> bool {
    let uid = service.uid();
    slice
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == uid.as_ref() && o.kind == "Service" && o.api_version == "v1")
}

/// The labels a slice of the Service carries (kcm's `setEndpointSliceLabels`): the
/// Service's, but for the reserved ones, with the headless label for a headless Service,
/// the Service's name and the managing controller; and whether the slice's own labels
/// (reserved ones aside) differ from the Service's.
fn slice_labels(
    current: Option<&BTreeMap<String, String>>,
    service: &Service,
) -> (BTreeMap<String, String>, bool) {
    let reserved =
        |k: &String| k == LABEL_SERVICE_NAME || k == LABEL_MANAGED_BY || k == LABEL_HEADLESS;
    let unreserved = |labels: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        labels
            .iter()
            .filter(|(k, _)| !reserved(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut labels = unreserved(service.labels());
    let changed = current.map(unreserved).unwrap_or_default() != labels;
    if !is_service_ip_set(service) {
        labels.insert(LABEL_HEADLESS.into(), String::new());
    }
    labels.insert(LABEL_SERVICE_NAME.into(), service.name_any());
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    (labels, changed)
}

/// The controller reference of a Service's slices.
fn service_ref(service: &Service) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: service.name_any(),
        uid: service.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A new, empty slice of the Service (kcm's `newEndpointSlice`).
fn new_slice(service: &Service, ports: Vec<EndpointPort>, address_type: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(pods::generate_name(&service.name_any())),
            namespace: service.namespace(),
            labels: Some(slice_labels(None, service).0),
            owner_references: Some(vec![service_ref(service)]),
            ..ObjectMeta::default()
        },
        address_type: address_type.into(),
        endpoints: Vec::new(),
        ports: Some(ports),
    }
}

/// Whether an existing slice is the placeholder kcm would create (kcm's
/// `placeholderSliceCompare`: namespace, labels, owners, address type, no endpoints, no
/// ports).
fn same_placeholder(existing: &EndpointSlice, placeholder: &EndpointSlice) -> bool {
    existing.metadata.namespace == placeholder.metadata.namespace
        && existing.labels() == placeholder.labels()
        && existing.owner_references() == placeholder.owner_references()
        && existing.address_type == placeholder.address_type
        && existing.endpoints.is_empty()
        && existing.ports.as_deref().unwrap_or_default().is_empty()
}

/// The endpoint ports a pod serves for the Service (kcm's `getEndpointPorts`): a headless
/// Service may have none.
fn endpoint_ports(service: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let ports = service_ports(service);
    if ports.is_empty() && cluster_ip(service) == "None" {
        return Vec::new();
    }
    ports
        .iter()
        .filter_map(|service_port| {
            let number = find_port(pod, service_port)?;
            Some(EndpointPort {
                name: Some(service_port.name.clone().unwrap_or_default()),
                port: Some(number),
                protocol: Some(
                    service_port
                        .protocol
                        .clone()
                        .unwrap_or_else(|| "TCP".into()),
                ),
                app_protocol: service_port.app_protocol.clone(),
            })
        })
        .collect()
}

/// A pod as an endpoint of the Service (kcm's `podToEndpoint`).
fn pod_to_endpoint(
    pod: &Pod,
    node: Option<&Node>,
    service: &Service,
    address_type: &str,
) -> Endpoint {
    let serving = pods::is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    // A terminating pod is never ready, unless the Service publishes unready addresses.
    let ready = publish_not_ready(service) || (serving && !terminating);
    let want_v6 = address_type == "IPv6";
    let addresses = pod_ips(pod)
        .into_iter()
        .filter_map(parse_ip)
        .filter(|ip| ip.is_ipv6() == want_v6)
        .map(|ip| ip.to_string())
        .collect();
    Endpoint {
        addresses,
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        target_ref: Some(target_ref(pod)),
        node_name: node_name(pod).map(str::to_string),
        zone: node.and_then(zone).map(str::to_string),
        hostname: hostname_for(pod, service),
        ..Endpoint::default()
    }
}

/// Sets (or clears) the trigger-time annotation of a slice about to be written.
fn set_trigger_time(slice: &mut EndpointSlice, trigger: Option<jiff::Timestamp>) {
    let annotations = slice.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match trigger {
        Some(time) => {
            annotations.insert(
                ANNOTATION_LAST_CHANGE_TRIGGER_TIME.into(),
                format_trigger_time(time),
            );
        }
        None => {
            annotations.remove(ANNOTATION_LAST_CHANGE_TRIGGER_TIME);
        }
    }
}

/// Writes a plan (kcm's `finalize`): slices about to be deleted are reused for slices about
/// to be created (same address type, owned by the Service); no slice is created for a
/// Service being deleted.
async fn finalize(
    ctx: &Ctx,
    service: &Service,
    key: &str,
    mut plan: Plan,
    trigger: Option<jiff::Timestamp>,
) -> Result<()> {
    let mut i = 0;
    while i < plan.delete.len() && !plan.create.is_empty() {
        let old = &plan.delete[i];
        let fits = plan
            .create
            .last()
            .is_some_and(|new| new.address_type == old.address_type && owned_by(old, service));
        if let (true, Some(mut slice)) = (fits, plan.create.pop()) {
            slice.metadata.name = old.metadata.name.clone();
            slice.metadata.resource_version = old.metadata.resource_version.clone();
            plan.update.push(slice);
            plan.delete.remove(i);
        } else {
            i += 1;
        }
    }
    let namespace = service.namespace().unwrap_or_default();
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &namespace);
    if service.metadata.deletion_timestamp.is_none() {
        for mut slice in plan.create {
            set_trigger_time(&mut slice, trigger);
            match api.create(&PostParams::default(), &slice).await {
                Ok(created) => ctx
                    .expectations
                    .created(key, created.uid().unwrap_or_default()),
                Err(error) if namespace_terminating(&error) => return Ok(()),
                Err(error) => return Err(error.into()),
            }
        }
    }
    for mut slice in plan.update {
        set_trigger_time(&mut slice, trigger);
        api.replace(&slice.name_any(), &PostParams::default(), &slice)
            .await?;
    }
    for slice in plan.delete {
        delete_slice(&api, &slice).await?;
        ctx.expectations
            .deleted(key, slice.uid().unwrap_or_default());
    }
    Ok(())
}

/// Deletes a slice; one already gone is fine.
pub(super) async fn delete_slice(api: &Api<EndpointSlice>, slice: &EndpointSlice) -> Result<()> {
    match api
        .delete(&slice.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(ip: &str, name: &str) -> Endpoint {
        Endpoint {
            addresses: vec![ip.into()],
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            }),
            conditions: Some(EndpointConditions {
                ready: Some(true),
                ..EndpointConditions::default()
            }),
            ..Endpoint::default()
        }
    }

    fn service() -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "labels": {"app": "web"}},
            "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.10", "ipFamilies": ["IPv4"]}
        }))
        .expect("a service")
    }

    #[test]
    fn endpoints_are_packed_in_slices_of_at_most_a_hundred() {
        let mut set = EndpointSet::default();
        for i in 0..250 {
            set.insert(endpoint(
                &format!("10.0.{}.{}", i / 200, i % 200),
                &format!("p{i}"),
            ));
        }
        let plan = plan_ports(&service(), &[], set, &[], "IPv4");
        let sizes: Vec<usize> = plan.create.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        assert!(plan.update.is_empty() && plan.delete.is_empty());
        let labels = plan.create[0].labels();
        assert_eq!(
            labels.get(LABEL_SERVICE_NAME).map(String::as_str),
            Some("web")
        );
        assert_eq!(
            labels.get(LABEL_MANAGED_BY).map(String::as_str),
            Some(MANAGED_BY)
        );
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            plan.create[0].metadata.generate_name.as_deref(),
            Some("web-")
        );
    }

    #[test]
    fn the_remainder_goes_to_the_unchanged_slice_it_fills_best() {
        let slice = |name: &str, n: usize| {
            let mut s = new_slice(&service(), Vec::new(), "IPv4");
            s.metadata.name = Some(name.into());
            s.endpoints = (0..n)
                .map(|i| endpoint(&format!("10.{n}.0.{i}"), &format!("{name}{i}")))
                .collect();
            Arc::new(s)
        };
        let existing = [slice("a", 60), slice("b", 95)];
        let mut desired = EndpointSet::default();
        for s in &existing {
            for e in &s.endpoints {
                desired.insert(e.clone());
            }
        }
        desired.insert(endpoint("10.9.9.9", "new"));
        let plan = plan_ports(&service(), &existing, desired, &[], "IPv4");
        assert!(plan.create.is_empty());
        assert_eq!(plan.update.len(), 1);
        assert_eq!(plan.update[0].name_any(), "b");
        assert_eq!(plan.update[0].endpoints.len(), 96);
    }
}
