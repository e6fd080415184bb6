//! kube-apiserver's service address repair (`start-service-ip-repair-controllers`), which
//! runs in every server, with kube's Warning Events:
//!
//! - **Cluster IPs** (`ipallocator-repair-controller`, kube's `RepairIPAddress`): every
//!   Service and every `IPAddress` the allocator made is checked when the server starts, when
//!   it changes, and every three minutes. A Service's cluster IP without its `IPAddress` gets
//!   one (`ClusterIPNotAllocated`), as does one whose `IPAddress` names another parent; one
//!   outside every ServiceCIDR is reported (`ClusterIPOutOfRange`), as is one two Services
//!   hold (`ClusterIPAlreadyAllocated`). An `IPAddress` whose Service is gone is deleted once
//!   it is a minute old (`IPAddressNotAllocated`: a Service being created has its address a
//!   moment before it is stored), and one whose Service holds another IP at once
//!   (`IPAddressWrongReference`). These are `events.k8s.io/v1` Events.
//! - **Node ports** (`portallocator-repair-controller`): when the server starts and every
//!   three minutes, the node port bitmap is checked against the Services
//!   ([`Registry::repair_node_ports`]); a port a Service holds that is not marked taken is
//!   marked (`PortNotAllocated`), duplicates and ports out of range are reported, and a port
//!   no Service has held for three rounds is given back. These are core/v1 Events.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{KeyRange, WatchRequest, WatchResponse};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::error::Reason;
use crate::registry::{
    DeleteOptions, Leaks, ListOptions, Registry, ServiceIpRange, WriteOptions, ip_address_for,
};
use crate::resources::ResourceType;
use crate::resources::meta::meta_str;

/// kube-apiserver's `repairLoopInterval`: the node port rounds, and the cluster IP repair's
/// resync of everything.
pub(crate) const INTERVAL: Duration = Duration::from_secs(3 * 60);

/// How old an `IPAddress` whose Service does not exist must be before it counts as leaked
/// (kube's grace period, the default request timeout): a Service's address is made before
/// the Service is stored.
const LEAK_GRACE: Duration = Duration::from_secs(60);

/// The cluster IP repair's name, as its Events report it.
const IP_CONTROLLER: &str = "ipallocator-repair-controller";

/// The node port repair's name, as its Events' source.
const PORT_COMPONENT: &str = "portallocator-repair-controller";

/// The label of the controller that made an `IPAddress`, and the allocator's value.
const MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
const ALLOCATOR: &str = "ipallocator.k8s.io";

/// The field manager of the Events (kube-apiserver's loopback client).
const MANAGER: &str = "kube-apiserver";

/// The resources the repair reads and writes.
struct Kinds {
    services: std::sync::Arc<ResourceType>,
    addresses: std::sync::Arc<ResourceType>,
    core_events: Option<std::sync::Arc<ResourceType>>,
    events: Option<std::sync::Arc<ResourceType>>,
}

/// Repairs the service addresses of `registry`'s store, for good.
pub(crate) async fn run(registry: Registry) {
    let catalog = registry.catalog().clone();
    let Some(services) = catalog.get("", "v1", "services") else {
        return;
    };
    let kinds = Kinds {
        services: services.clone(),
        addresses: match catalog.get("networking.k8s.io", "v1", "ipaddresses") {
            Some(addresses) => addresses,
            None => {
                return repair_node_ports(&registry, &services, catalog.get("", "v1", "events"))
                    .await;
            }
        },
        core_events: catalog.get("", "v1", "events"),
        events: catalog.get("events.k8s.io", "v1", "events"),
    };
    tokio::join!(
        repair_node_ports(&registry, &kinds.services, kinds.core_events.clone()),
        repair_cluster_ips(&registry, &kinds)
    );
}

/// The node port rounds: at once, then every [`INTERVAL`].
async fn repair_node_ports(
    registry: &Registry,
    services: &ResourceType,
    events: Option<std::sync::Arc<ResourceType>>,
) {
    let mut leaks = Leaks::default();
    let mut rounds = tokio::time::interval(INTERVAL);
    loop {
        rounds.tick().await;
        match registry.repair_node_ports(&mut leaks).await {
            Ok(problems) => {
                let Some(events) = &events else { continue };
                for problem in problems {
                    let event =
                        core_event(services, &problem.service, problem.reason, &problem.message);
                    write_event(registry, events, event).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "repairing node ports failed"),
        }
    }
}

/// The cluster IP repair, restarted after a store failure.
async fn repair_cluster_ips(registry: &Registry, kinds: &Kinds) {
    loop {
        match watch_and_repair(registry, kinds).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "the cluster IP repair restarting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Checks everything at once and every [`INTERVAL`], and each Service and `IPAddress` the
/// store's watches show changed; an `IPAddress` too young to count as leaked is looked at
/// again when it is old enough. Ends when the store closes.
async fn watch_and_repair(registry: &Registry, kinds: &Kinds) -> Result<(), konverge_store::Error> {
    let store = registry.store();
    let from = store.current_revision().await? + 1;
    let watch = |rt: &ResourceType| {
        WatchRequest::new(KeyRange::prefix(Bytes::from(rt.storage_prefix()))).from_revision(from)
    };
    let mut service_events = store.watch(watch(&kinds.services)).await?;
    let mut address_events = store.watch(watch(&kinds.addresses)).await?;
    let mut resync = tokio::time::interval(INTERVAL);
    // IPAddresses to look at again, and when.
    let mut due: BTreeMap<String, Instant> = BTreeMap::new();
    let mut repair = Repair {
        registry,
        kinds,
        due: &mut due,
        ranges: None,
    };
    loop {
        // Each batch reads the ServiceCIDRs afresh.
        repair.ranges = None;
        let next = repair.due.values().min().copied();
        tokio::select! {
            _ = resync.tick() => repair.everything().await,
            message = service_events.recv() => {
                let Some(changed) = changed(registry, message)? else { return Ok(()) };
                for (ns, name) in changed {
                    repair.service(ns.as_deref(), &name).await;
                }
            }
            message = address_events.recv() => {
                let Some(changed) = changed(registry, message)? else { return Ok(()) };
                for (_, name) in changed {
                    repair.address(&name).await;
                }
            }
            _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now = Instant::now();
                let ready: Vec<String> = repair
                    .due
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in ready {
                    repair.due.remove(&name);
                    repair.address(&name).await;
                }
            }
        }
    }
}

/// An object's namespace and name.
type Named = (Option<String>, String);

/// The objects a store watch's message says changed; `None` when the
/// store closed.
fn changed(
    registry: &Registry,
    message: Option<konverge_store::Result<WatchResponse>>,
) -> konverge_store::Result<Option<Vec<Named>>> {
    match message {
        Some(Ok(WatchResponse::Events(events))) => Ok(Some(
            events
                .iter()
                .filter_map(|event| {
                    let key = String::from_utf8_lossy(&event.kv.key);
                    let (_, ns, name) = registry.catalog().resolve_key(&key)?;
                    Some((ns, name))
                })
                .collect(),
        )),
        Some(Ok(_)) => Ok(Some(Vec::new())),
        Some(Err(konverge_store::Error::Closed)) | None => Ok(None),
        Some(Err(e)) => Err(e),
    }
}

/// One pass of the cluster IP repair's checks (kube's `syncService` and `syncIPAddress`).
struct Repair<'a> {
    registry: &'a Registry,
    kinds: &'a Kinds,
    due: &'a mut BTreeMap<String, Instant>,
    /// The ServiceCIDRs' ranges, read once per batch of checks.
    ranges: Option<Vec<ServiceIpRange>>,
}

impl Repair<'_> {
    /// The ServiceCIDRs' ranges, read if this batch has not yet (`None`: unreadable, logged;
    /// the next resync looks again).
    async fn ranges(&mut self) -> Option<&[ServiceIpRange]> {
        if self.ranges.is_none() {
            match self.registry.service_cidr_ranges().await {
                Ok(ranges) => self.ranges = Some(ranges),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the ServiceCIDRs failed");
                    return None;
                }
            }
        }
        self.ranges.as_deref()
    }

    /// Every Service, then every `IPAddress` the allocator made (kube's `runOnce`).
    async fn everything(&mut self) {
        let all = ListOptions::default();
        match self.registry.list(&self.kinds.services, None, &all).await {
            Ok(listed) => {
                for svc in &listed.items {
                    self.check_service(svc).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing Services for the cluster IP repair failed")
            }
        }
        // Those the allocator did not make are left alone by `check_address`.
        match self.registry.list(&self.kinds.addresses, None, &all).await {
            Ok(listed) => {
                for address in &listed.items {
                    self.check_address(address).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing IPAddresses for the cluster IP repair failed")
            }
        }
    }

    async fn service(&mut self, ns: Option<&str>, name: &str) {
        if let Some(svc) = self.get(&self.kinds.services, ns, name).await {
            self.check_service(&svc).await;
        }
    }

    async fn address(&mut self, name: &str) {
        if let Some(address) = self.get(&self.kinds.addresses, None, name).await {
            self.check_address(&address).await;
        }
    }

    /// The object, or `None` when it does not exist (or cannot be read: logged, and the
    /// next resync looks again).
    async fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<Value> {
        match self.registry.get(rt, ns, name, None).await {
            Ok(object) => Some(object),
            Err(e) if e.reason == Reason::NotFound => None,
            Err(e) => {
                tracing::warn!(error = %e, name, "reading for the cluster IP repair failed");
                None
            }
        }
    }

    /// Every cluster IP of `svc` has its `IPAddress`, naming `svc` (kube's `syncService`).
    async fn check_service(&mut self, svc: &Value) {
        let ns = meta_str(svc, "namespace").unwrap_or("");
        let name = meta_str(svc, "name").unwrap_or("");
        let ips: Vec<String> = svc
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect();
        let set = svc
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .is_some_and(|ip| !ip.is_empty() && ip != "None");
        if !set {
            return;
        }
        for ip in ips {
            let Ok(parsed) = ip.parse::<std::net::IpAddr>() else {
                // Go prints the nil IP its parser returns as `<nil>`.
                self.record(
                    svc,
                    &self.kinds.services,
                    "ClusterIPNotValid",
                    "ClusterIPValidation",
                    "Cluster IP <nil> is not a valid IP; please recreate Service".into(),
                )
                .await;
                continue;
            };
            let family = if parsed.is_ipv6() { "IPv6" } else { "IPv4" };
            // konverge's ServiceCIDRs are IPv4 ones.
            let in_range = match parsed {
                std::net::IpAddr::V4(v4) => match self.ranges().await {
                    Some(ranges) => ranges.iter().any(|range| range.contains(v4)),
                    None => continue,
                },
                std::net::IpAddr::V6(_) => false,
            };
            if !in_range {
                self.record(
                    svc,
                    &self.kinds.services,
                    "ClusterIPOutOfRange",
                    "ClusterIPAllocation",
                    format!("Cluster IP [{family}]: {ip} is not within any configured Service CIDR; please recreate service"),
                )
                .await;
                continue;
            }
            let Some(address) = self.get(&self.kinds.addresses, None, &ip).await else {
                self.record(
                    svc,
                    &self.kinds.services,
                    "ClusterIPNotAllocated",
                    "ClusterIPAllocation",
                    format!("Cluster IP [{family}]: {ip} is not allocated; repairing"),
                )
                .await;
                self.create_address(&ip, ns, name).await;
                continue;
            };
            let parent = |field: &str| {
                address
                    .pointer(&format!("/spec/parentRef/{field}"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            // An IPAddress for another kind of parent, or for a Service that does not exist,
            // is made again for this one; one another Service also holds is reported.
            let wrong_reference = if !parent("group").is_empty() || parent("resource") != "services"
            {
                true
            } else if parent("namespace") != ns || parent("name") != name {
                let (other_ns, other) = (parent("namespace"), parent("name"));
                match self
                    .get(&self.kinds.services, Some(&other_ns), &other)
                    .await
                {
                    None => true,
                    Some(other_svc) => {
                        let held_there = other_svc
                            .pointer("/spec/clusterIPs")
                            .and_then(Value::as_array)
                            .is_some_and(|ips| ips.iter().any(|held| held.as_str() == Some(&ip)));
                        if held_there {
                            self.record(svc, &self.kinds.services, "ClusterIPAlreadyAllocated", "ClusterIPAllocation",
                                format!("Cluster IP [{family}]:{ip} was assigned to multiple services; please recreate service")).await;
                        }
                        false
                    }
                }
            } else {
                false
            };
            if wrong_reference {
                self.record(
                    svc,
                    &self.kinds.services,
                    "ClusterIPNotAllocated",
                    "ClusterIPAllocation",
                    format!("the ClusterIP [{family}]: {ip} for Service {ns}/{name} has a wrong reference; repairing"),
                )
                .await;
                self.recreate_address(&ip, ns, name).await;
                continue;
            }
            let label = |name: &str| {
                address
                    .pointer(&format!("/metadata/labels/{}", name.replace('/', "~1")))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            if label("ipaddress.kubernetes.io/ip-family") != family
                || label(MANAGED_BY) != ALLOCATOR
            {
                self.recreate_address(&ip, ns, name).await;
            }
        }
    }

    /// An `IPAddress` the allocator made names a Service that holds it (kube's
    /// `syncIPAddress`); one whose Service is gone is deleted once [`LEAK_GRACE`] old.
    async fn check_address(&mut self, address: &Value) {
        let text = |pointer: &str| {
            address
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        if text("/metadata/labels/ipaddress.kubernetes.io~1managed-by") != ALLOCATOR {
            return;
        }
        let ip = text("/metadata/name");
        let (group, resource) = (
            text("/spec/parentRef/group"),
            text("/spec/parentRef/resource"),
        );
        let (ns, name) = (
            text("/spec/parentRef/namespace"),
            text("/spec/parentRef/name"),
        );
        if !group.is_empty() || resource != "services" {
            // Go's `%v` of the *ParentReference.
            self.record(address, &self.kinds.addresses, "IPAddressNotAllocated", "IPAddressAllocation",
                format!("IPAddress {ip} appears to have been modified, not referencing a Service &{{{group} {resource} {ns} {name}}}: cleaning up")).await;
            self.delete_address(&ip).await;
            return;
        }
        let Some(svc) = self.get(&self.kinds.services, Some(&ns), &name).await else {
            let created = text("/metadata/creationTimestamp")
                .parse::<jiff::Timestamp>()
                .unwrap_or_else(|_| jiff::Timestamp::now());
            let age = jiff::Timestamp::now()
                .duration_since(created)
                .unsigned_abs();
            if age > LEAK_GRACE {
                self.record(address, &self.kinds.addresses, "IPAddressNotAllocated", "IPAddressAllocation",
                    format!("IPAddress: {ip} for Service {ns}/{name} appears to have leaked: cleaning up")).await;
                self.delete_address(&ip).await;
            } else {
                self.due.insert(ip, Instant::now() + (LEAK_GRACE - age));
            }
            return;
        };
        let held = svc
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .is_some_and(|ips| ips.iter().any(|held| held.as_str() == Some(&ip)));
        if !held {
            self.record(
                address,
                &self.kinds.addresses,
                "IPAddressWrongReference",
                "IPAddressAllocation",
                format!(
                    "IPAddress: {ip} for Service {ns}/{name} has a wrong reference; cleaning up"
                ),
            )
            .await;
            self.delete_address(&ip).await;
        }
    }

    async fn create_address(&self, ip: &str, ns: &str, service: &str) {
        let address = ip_address_for(ip, Some(ns), service);
        let opts = WriteOptions {
            field_manager: Some(MANAGER.into()),
            ..WriteOptions::default()
        };
        match self
            .registry
            .create(&self.kinds.addresses, None, address, &opts)
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == Reason::AlreadyExists => {}
            Err(e) => tracing::warn!(error = %e, ip, "recording a cluster IP failed"),
        }
    }

    async fn delete_address(&self, ip: &str) -> bool {
        match self
            .registry
            .delete(&self.kinds.addresses, None, ip, &DeleteOptions::default())
            .await
        {
            Ok(_) => true,
            Err(e) if e.reason == Reason::NotFound => true,
            Err(e) => {
                tracing::warn!(error = %e, ip, "deleting an IPAddress failed");
                false
            }
        }
    }

    async fn recreate_address(&self, ip: &str, ns: &str, service: &str) {
        if self.delete_address(ip).await {
            self.create_address(ip, ns, service).await;
        }
    }

    /// A Warning `events.k8s.io/v1` Event about `regarding`, as kube's events recorder
    /// writes it for this controller.
    async fn record(
        &self,
        regarding: &Value,
        rt: &ResourceType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let Some(events) = &self.kinds.events else {
            return;
        };
        let now = jiff::Timestamp::now();
        let name = meta_str(regarding, "name").unwrap_or("");
        let host = hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        let event = json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{name}.{:x}", now.as_nanosecond()),
                "namespace": event_namespace(regarding),
            },
            "eventTime": format!("{}.{:06}Z", now.strftime("%Y-%m-%dT%H:%M:%S"), now.subsec_microsecond()),
            "reportingController": IP_CONTROLLER,
            "reportingInstance": format!("{IP_CONTROLLER}-{host}"),
            "action": action,
            "reason": reason,
            "regarding": reference(rt, regarding),
            "note": note,
            "type": "Warning",
        });
        write_event(self.registry, events, event).await;
    }
}

/// A Warning core/v1 Event about the Service `regarding`, as kube's legacy event recorder
/// writes it for the node port repair (its source the component, no reporting instance).
fn core_event(services: &ResourceType, regarding: &Value, reason: &str, message: &str) -> Value {
    let now = jiff::Timestamp::now();
    let time = crate::resources::meta::now();
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": format!("{}.{:x}", meta_str(regarding, "name").unwrap_or(""), now.as_nanosecond()),
            "namespace": event_namespace(regarding),
        },
        "involvedObject": reference(services, regarding),
        "reason": reason,
        "message": message,
        "source": {"component": PORT_COMPONENT},
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": 1,
        "type": "Warning",
        "eventTime": null,
        "reportingComponent": PORT_COMPONENT,
        "reportingInstance": "",
    })
}

/// The namespace of an Event about `regarding`: its own, or `default` for a cluster-scoped
/// object (as client-go's recorders choose).
fn event_namespace(regarding: &Value) -> &str {
    meta_str(regarding, "namespace")
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default")
}

/// Writes `event`; a failure is logged, never in the repair's way (as kube's event
/// broadcaster drops what it cannot write).
async fn write_event(registry: &Registry, events: &ResourceType, event: Value) {
    let namespace = event["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let opts = WriteOptions {
        field_manager: Some(MANAGER.into()),
        ..WriteOptions::default()
    };
    if let Err(e) = registry
        .create(events, Some(&namespace), event, &opts)
        .await
    {
        tracing::debug!(error = %e, "event not recorded");
    }
}

/// The `ObjectReference` of `object`, a `rt`, as client-go's `ref.GetReference` makes it.
fn reference(rt: &ResourceType, object: &Value) -> Value {
    let mut reference = serde_json::Map::new();
    reference.insert("kind".into(), json!(rt.kind));
    if let Some(ns) = meta_str(object, "namespace").filter(|ns| !ns.is_empty()) {
        reference.insert("namespace".into(), json!(ns));
    }
    for field in ["name", "uid"] {
        if let Some(value) = meta_str(object, field) {
            reference.insert(field.into(), json!(value));
        }
    }
    reference.insert("apiVersion".into(), json!(rt.api_version()));
    if let Some(rv) = meta_str(object, "resourceVersion") {
        reference.insert("resourceVersion".into(), json!(rv));
    }
    Value::Object(reference)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A server over a new store, its repair's first passes done.
    async fn start() -> (Arc<crate::ApiServer>, Registry) {
        let started = crate::controllers::tests::server_without_loops().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        started
    }

    fn rt(registry: &Registry, group: &str, plural: &str) -> std::sync::Arc<ResourceType> {
        registry.catalog().get(group, "v1", plural).expect("served")
    }

    /// Writes `object` straight into the store, past the create path: what a server stopped
    /// half-way through a write, or a restored backup, leaves behind.
    async fn store_raw(registry: &Registry, rt: &ResourceType, object: Value) {
        let key = rt.key(
            meta_str(&object, "namespace"),
            meta_str(&object, "name").unwrap(),
        );
        registry
            .store()
            .create(
                Bytes::from(key),
                Bytes::from(serde_json::to_vec(&object).unwrap()),
            )
            .await
            .expect("stored");
    }

    async fn exists(registry: &Registry, rt: &ResourceType, ns: Option<&str>, name: &str) -> bool {
        match registry.get(rt, ns, name, None).await {
            Ok(_) => true,
            Err(e) if e.reason == Reason::NotFound => false,
            Err(e) => panic!("{e}"),
        }
    }

    /// The Events in `default` of `group` (`""`: core/v1), by reason.
    async fn events(registry: &Registry, group: &str) -> Vec<Value> {
        let events = rt(registry, group, "events");
        registry
            .list(&events, Some("default"), &ListOptions::default())
            .await
            .expect("listed")
            .items
            .iter()
            .map(|e| Value::clone(e))
            .collect()
    }

    fn raw_service(name: &str, spec: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec,
        })
    }

    fn raw_address(ip: &str, service: &str, created: jiff::Timestamp) -> Value {
        let mut address = ip_address_for(ip, Some("default"), service);
        address["apiVersion"] = json!("networking.k8s.io/v1");
        address["kind"] = json!("IPAddress");
        address["metadata"]["uid"] = json!(format!("uid-{ip}"));
        address["metadata"]["creationTimestamp"] =
            json!(created.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        address
    }

    /// Node ports a Service holds but the bitmap does not, ports two Services hold and ports
    /// out of the range are reported by the next round as kube's
    /// `portallocator-repair-controller` reports them, and an unmarked port is marked.
    #[tokio::test(start_paused = true)]
    async fn node_port_problems_are_reported_and_unmarked_ports_marked() {
        let (_server, registry) = start().await;
        let services = rt(&registry, "", "services");
        let node_port = |port: i64| json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80, "nodePort": port}]});
        registry
            .create(
                &services,
                Some("default"),
                json!({"metadata": {"name": "marked"}, "spec": {"type": "NodePort",
                    "ports": [{"port": 80, "nodePort": 30100}]}}),
                &WriteOptions::default(),
            )
            .await
            .expect("created");
        for (name, port) in [
            ("unmarked", 30200),
            ("dup-a", 30300),
            ("dup-b", 30300),
            ("outside", 40000),
        ] {
            store_raw(&registry, &services, raw_service(name, node_port(port))).await;
        }
        tokio::time::sleep(INTERVAL).await;

        let mut reported: Vec<(String, String, String)> = events(&registry, "")
            .await
            .iter()
            .map(|e| {
                assert_eq!(e["type"], "Warning", "{e}");
                assert_eq!(e["source"]["component"], PORT_COMPONENT, "{e}");
                assert_eq!(e["reportingComponent"], PORT_COMPONENT, "{e}");
                assert_eq!(e["count"], 1, "{e}");
                let involved = &e["involvedObject"];
                assert_eq!(involved["kind"], "Service", "{e}");
                assert_eq!(involved["apiVersion"], "v1", "{e}");
                assert_eq!(
                    involved["uid"],
                    format!("uid-{}", involved["name"].as_str().unwrap()),
                    "{e}"
                );
                (
                    e["reason"].as_str().unwrap().to_string(),
                    involved["name"].as_str().unwrap().to_string(),
                    e["message"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        reported.sort();
        let expected = [
            (
                "PortAlreadyAllocated",
                "dup-b",
                "Port 30300 was assigned to multiple services; please recreate service",
            ),
            (
                "PortNotAllocated",
                "dup-a",
                "Port 30300 is not allocated; repairing",
            ),
            (
                "PortNotAllocated",
                "unmarked",
                "Port 30200 is not allocated; repairing",
            ),
            (
                "PortOutOfRange",
                "outside",
                "Port 40000 is not within the port range 30000-32767; please recreate service",
            ),
        ]
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
        assert_eq!(reported, expected);
        // The unmarked port is taken now.
        let refused = registry
            .create(
                &services,
                Some("default"),
                json!({"metadata": {"name": "again"}, "spec": {"type": "NodePort",
                    "ports": [{"port": 80, "nodePort": 30200}]}}),
                &WriteOptions::default(),
            )
            .await
            .expect_err("taken");
        assert!(
            refused
                .message
                .contains("provided port is already allocated"),
            "{refused}"
        );
    }

    /// A server stopped between taking a Service's node port and storing it leaks the port:
    /// the repair gives it back after three rounds (not before: a create in flight is not a
    /// leak).
    #[tokio::test(start_paused = true)]
    async fn a_leaked_node_port_is_given_back_after_three_rounds() {
        let (_server, registry) = start().await;
        let services = rt(&registry, "", "services");
        let node_port = |name: &str| {
            json!({"metadata": {"name": name}, "spec": {"type": "NodePort",
                "ports": [{"port": 80, "nodePort": 30123}]}})
        };
        let opts = WriteOptions::default();
        registry
            .create(&services, Some("default"), node_port("leaked"), &opts)
            .await
            .expect("created");
        registry
            .store()
            .delete(Bytes::from(services.key(Some("default"), "leaked")))
            .await
            .expect("deleted");
        let mut leaks = Leaks::default();
        for round in 1..=3 {
            let problems = registry
                .repair_node_ports(&mut leaks)
                .await
                .expect("repaired");
            assert!(problems.is_empty(), "{problems:?}");
            let taken = registry
                .create(
                    &services,
                    Some("default"),
                    node_port(&format!("again-{round}")),
                    &opts,
                )
                .await;
            if round < 3 {
                let refused = taken.expect_err("still taken");
                assert!(
                    refused
                        .message
                        .contains("provided port is already allocated"),
                    "{refused}"
                );
            } else {
                taken.expect("given back after three rounds");
            }
        }
    }

    /// kube's `ipallocator-repair-controller`: an IPAddress deleted under its Service is
    /// made again at the next resync; a leaked one goes once a minute old, one naming a
    /// Service that holds another IP at once; a cluster IP outside every ServiceCIDR is
    /// reported. Each with kube's Warning `events.k8s.io/v1` Event.
    #[tokio::test(start_paused = true)]
    async fn cluster_ip_problems_are_repaired_and_reported_as_kube_does() {
        let (_server, registry) = start().await;
        let services = rt(&registry, "", "services");
        let addresses = rt(&registry, "networking.k8s.io", "ipaddresses");
        let kept = registry
            .create(
                &services,
                Some("default"),
                json!({"metadata": {"name": "kept"}, "spec": {"ports": [{"port": 80}]}}),
                &WriteOptions::default(),
            )
            .await
            .expect("created")
            .object;
        let kept_ip = kept["spec"]["clusterIP"].as_str().unwrap().to_string();
        registry
            .store()
            .delete(Bytes::from(addresses.key(None, &kept_ip)))
            .await
            .expect("deleted");
        tokio::time::sleep(INTERVAL).await;
        let back = registry
            .get(&addresses, None, &kept_ip, None)
            .await
            .expect("made again at the resync");
        assert_eq!(back["spec"]["parentRef"]["name"], "kept");

        let now = jiff::Timestamp::now();
        let old = now - jiff::SignedDuration::from_secs(120);
        store_raw(
            &registry,
            &addresses,
            raw_address("10.96.200.1", "gone", old),
        )
        .await;
        store_raw(
            &registry,
            &addresses,
            raw_address("10.96.200.2", "gone-too", now),
        )
        .await;
        store_raw(
            &registry,
            &addresses,
            raw_address("10.96.200.3", "kept", old),
        )
        .await;
        store_raw(
            &registry,
            &services,
            raw_service(
                "outside",
                json!({"clusterIP": "192.168.7.7", "clusterIPs": ["192.168.7.7"], "ports": [{"port": 80}]}),
            ),
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !exists(&registry, &addresses, None, "10.96.200.1").await,
            "leaked, a minute old"
        );
        assert!(
            exists(&registry, &addresses, None, "10.96.200.2").await,
            "too young to be a leak"
        );
        assert!(
            !exists(&registry, &addresses, None, "10.96.200.3").await,
            "wrong reference"
        );

        let mut reported: Vec<(String, String, String, String)> =
            events(&registry, "events.k8s.io")
                .await
                .iter()
                .map(|e| {
                    assert_eq!(e["type"], "Warning", "{e}");
                    assert_eq!(e["reportingController"], IP_CONTROLLER, "{e}");
                    assert!(
                        e["reportingInstance"]
                            .as_str()
                            .unwrap()
                            .starts_with("ipallocator-repair-controller-"),
                        "{e}"
                    );
                    (
                        e["reason"].as_str().unwrap().to_string(),
                        e["action"].as_str().unwrap().to_string(),
                        format!(
                            "{} {}",
                            e["regarding"]["kind"].as_str().unwrap(),
                            e["regarding"]["name"].as_str().unwrap()
                        ),
                        e["note"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
        reported.sort();
        let expected = [
            ("ClusterIPNotAllocated", "ClusterIPAllocation", "Service kept".to_string(),
                format!("Cluster IP [IPv4]: {kept_ip} is not allocated; repairing")),
            ("ClusterIPOutOfRange", "ClusterIPAllocation", "Service outside".to_string(),
                "Cluster IP [IPv4]: 192.168.7.7 is not within any configured Service CIDR; please recreate service".to_string()),
            ("IPAddressNotAllocated", "IPAddressAllocation", "IPAddress 10.96.200.1".to_string(),
                "IPAddress: 10.96.200.1 for Service default/gone appears to have leaked: cleaning up".to_string()),
            ("IPAddressWrongReference", "IPAddressAllocation", "IPAddress 10.96.200.3".to_string(),
                "IPAddress: 10.96.200.3 for Service default/kept has a wrong reference; cleaning up".to_string()),
        ]
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c, d));
        assert_eq!(reported, expected);
    }
}
