//! Service addresses: a cluster IP for every Service but headless and ExternalName ones, and
//! node ports for NodePort and LoadBalancer ports, as kube-apiserver allocates them.
//!
//! Cluster IPs come from the ServiceCIDRs, as with kube-apiserver 1.33's allocator: the
//! server creates the `kubernetes` ServiceCIDR from its [`ServiceIpRange`]
//! (`--service-cluster-ip-range`, 10.96.0.0/12 unless told otherwise; its first address is the
//! `kubernetes` Service's), and IPs are picked at random from every IPv4 ServiceCIDR that is
//! ready and not being deleted. Each allocated IP is an `IPAddress` object named by the IP
//! with the Service as its parent, so a taken IP is an object that already exists. Node ports
//! come from 30000-32767 and are kept where kube-apiserver keeps them: a bitmap in a
//! `RangeAllocation` under `/registry/ranges/servicenodeports`, changed only by
//! compare-and-swap, so two creates racing for a port (through one server or several over
//! one etcd) never both get it. A store that has no bitmap yet (written before konverge kept
//! one) gets it from the Services it holds.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde_json::{Value, json};

use super::{ListOptions, Registry, WriteOptions};
use crate::error::{ApiError, Cause, Reason, Result};

/// The node port range.
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;
/// How many times the node port bitmap is read and changed again after losing a race.
const CAS_ATTEMPTS: usize = 16;
/// Random picks before giving up on a full range.
const PICKS: usize = 64;
/// The widest range kube-apiserver accepts: 2^20 addresses (a /12 for IPv4).
const MAX_HOST_BITS: u8 = 20;
/// The narrowest: 8 addresses (a /29).
const MIN_HOST_BITS: u8 = 3;

/// The IPv4 range Service cluster IPs are allocated from (`--service-cluster-ip-range`),
/// 10.96.0.0/12 (kubeadm's) by default.
///
/// Parsed from CIDR text with kube-apiserver's checks (a valid CIDR of 8 to 2^20 addresses)
/// and its words; IPv6 and dual-stack ranges are refused, as konverge allocates IPv4 service
/// IPs only. A CIDR with host bits set names its network, as Go's `ParseCIDR` does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceIpRange {
    network: Ipv4Addr,
    prefix: u8,
}

impl Default for ServiceIpRange {
    fn default() -> Self {
        ServiceIpRange {
            network: Ipv4Addr::new(10, 96, 0, 0),
            prefix: 12,
        }
    }
}

impl std::fmt::Display for ServiceIpRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl std::str::FromStr for ServiceIpRange {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let text = text.trim();
        if text.contains(',') {
            return Err(format!(
                "konverge allocates IPv4 service IPs only: the dual-stack service-cluster-ip-range {text:?} is not supported"
            ));
        }
        let Some((address, prefix)) = text.split_once('/') else {
            return Err("service-cluster-ip-range[0] is not a valid cidr".into());
        };
        if address.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(format!(
                "konverge allocates IPv4 service IPs only: the IPv6 service-cluster-ip-range {text:?} is not supported"
            ));
        }
        let digits = !prefix.is_empty() && prefix.bytes().all(|b| b.is_ascii_digit());
        let (Ok(address), Ok(prefix), true) =
            (address.parse::<Ipv4Addr>(), prefix.parse::<u8>(), digits)
        else {
            return Err("service-cluster-ip-range[0] is not a valid cidr".into());
        };
        if prefix > 32 {
            return Err("service-cluster-ip-range[0] is not a valid cidr".into());
        }
        let host_bits = 32 - prefix;
        if host_bits > MAX_HOST_BITS {
            return Err(format!(
                "specified --service-cluster-ip-range is too large; for 32-bit addresses, the mask must be >= {}",
                32 - MAX_HOST_BITS
            ));
        }
        if host_bits < MIN_HOST_BITS {
            return Err("error determining service IP ranges for primary service cidr: the service cluster IP range must be at least 8 IP addresses".into());
        }
        let mask = u32::MAX << host_bits;
        Ok(ServiceIpRange {
            network: Ipv4Addr::from(u32::from(address) & mask),
            prefix,
        })
    }
}

impl ServiceIpRange {
    /// The `kubernetes` Service's cluster IP: the range's first address after the network
    /// address, as kube-apiserver picks it.
    pub fn kubernetes_service_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }

    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - self.prefix);
        u32::from(ip) & mask == u32::from(self.network)
    }

    /// How many addresses the range holds.
    fn size(&self) -> u64 {
        1u64 << (32 - self.prefix)
    }

    /// A random address of the range, neither its network nor its broadcast address.
    fn random_ip(&self) -> Ipv4Addr {
        use rand::Rng;
        let offset = rand::rng().random_range(1..self.size() - 1);
        Ipv4Addr::from(u32::from(self.network) + offset as u32)
    }
}

/// What a create or update allocated, to give back if its write fails.
#[derive(Debug, Default)]
pub(crate) struct Allocated {
    ip: Option<String>,
    node_ports: Vec<i64>,
}

/// kube-apiserver's key for the node port allocator's bitmap.
const NODE_PORT_RANGE_KEY: &str = "/registry/ranges/servicenodeports";

/// The taken node ports as kube's allocator stores them: a `RangeAllocation` whose `data` is
/// a bitmap, the big-endian bytes of an integer whose bit `i` is port `30000 + i`.
fn encode_node_ports(taken: &BTreeSet<i64>) -> Bytes {
    let bits = taken
        .iter()
        .filter(|p| NODE_PORTS.contains(p))
        .map(|p| (p - NODE_PORTS.start()) as usize);
    let len = bits.clone().max().map_or(0, |top| top / 8 + 1);
    let mut bytes = vec![0u8; len];
    for bit in bits {
        bytes[len - 1 - bit / 8] |= 1 << (bit % 8);
    }
    let allocation = json!({
        "kind": "RangeAllocation", "apiVersion": "v1",
        "metadata": {"creationTimestamp": null},
        "range": format!("{}-{}", NODE_PORTS.start(), NODE_PORTS.end()),
        "data": STANDARD.encode(bytes),
    });
    Bytes::from(serde_json::to_vec(&allocation).unwrap_or_default())
}

/// The node ports a stored `RangeAllocation` holds.
fn decode_node_ports(value: &[u8]) -> Option<BTreeSet<i64>> {
    let allocation: Value = serde_json::from_slice(value).ok()?;
    let bytes = STANDARD
        .decode(allocation.get("data")?.as_str().unwrap_or(""))
        .ok()?;
    let len = bytes.len();
    Some(
        bytes
            .iter()
            .enumerate()
            .flat_map(|(at, byte)| {
                (0..8)
                    .filter(move |bit| byte & (1 << bit) != 0)
                    .map(move |bit| NODE_PORTS.start() + ((len - 1 - at) * 8 + bit) as i64)
            })
            .collect(),
    )
}

/// The ranges of the IPv4 ServiceCIDRs that take allocations: ready (or with no Ready
/// condition yet, as kube's allocator assumes when kube-controller-manager is not running)
/// and not being deleted; the default one's (`kubernetes`) first, the others' in name order
/// (kube's allocator takes them in no particular order, and turns to another when one is
/// full).
fn allocating_ranges(service_cidrs: &[std::sync::Arc<Value>]) -> Vec<ServiceIpRange> {
    let mut ordered: Vec<&Value> = service_cidrs.iter().map(|c| c.as_ref()).collect();
    ordered
        .sort_by_key(|c| c.pointer("/metadata/name").and_then(Value::as_str) != Some("kubernetes"));
    let mut ranges = Vec::new();
    for cidr in ordered {
        if cidr
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
        {
            continue;
        }
        let ready = cidr
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .is_none_or(|c| c["status"] == "True");
        if !ready {
            continue;
        }
        for text in cidr
            .pointer("/spec/cidrs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if let Some(range) = parse_cidr(text)
                && !ranges.contains(&range)
            {
                ranges.push(range);
            }
        }
    }
    ranges
}

/// An IPv4 CIDR of a ServiceCIDR, whatever its size (validation decided what it may be).
fn parse_cidr(text: &str) -> Option<ServiceIpRange> {
    let (address, prefix) = text.split_once('/')?;
    let address: Ipv4Addr = address.parse().ok()?;
    let prefix: u8 = prefix.parse().ok().filter(|p| (1..=30).contains(p))?;
    let mask = u32::MAX << (32 - prefix);
    Some(ServiceIpRange {
        network: Ipv4Addr::from(u32::from(address) & mask),
        prefix,
    })
}

fn wants_cluster_ip(svc: &Value) -> bool {
    svc.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName")
        && svc.pointer("/spec/clusterIP").and_then(Value::as_str) != Some("None")
}

/// Whether the Service's ports take node ports (kube's `needsNodePort`).
fn wants_node_ports(svc: &Value) -> bool {
    matches!(
        svc.pointer("/spec/type").and_then(Value::as_str),
        Some("NodePort" | "LoadBalancer")
    )
}

/// Whether ports without a node port are given one (kube's `shouldAllocateNodePorts`): a
/// LoadBalancer may say `allocateLoadBalancerNodePorts: false`.
fn allocates_node_ports(svc: &Value) -> bool {
    match svc.pointer("/spec/type").and_then(Value::as_str) {
        Some("NodePort") => true,
        Some("LoadBalancer") => svc
            .pointer("/spec/allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        _ => false,
    }
}

/// Whether the Service needs a health check node port (kube's `needsHCNodePort`): a
/// LoadBalancer whose external traffic stays on the node it arrives at.
fn wants_health_check_port(svc: &Value) -> bool {
    svc.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer")
        && svc
            .pointer("/spec/externalTrafficPolicy")
            .and_then(Value::as_str)
            == Some("Local")
}

/// The node ports a Service holds: its ports' and its health check's.
fn node_ports_of(svc: &Value) -> impl Iterator<Item = i64> + '_ {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|port| port["nodePort"].as_i64())
        .chain(
            svc.pointer("/spec/healthCheckNodePort")
                .and_then(Value::as_i64),
        )
        .filter(|n| *n != 0)
}

/// Writes the cluster IP `ip` and its family into `svc`; returns `ip`.
fn finish_cluster_ip(svc: &mut Value, ip: String) -> String {
    let spec = &mut svc["spec"];
    spec["clusterIP"] = json!(ip);
    spec["clusterIPs"] = json!([ip]);
    spec["ipFamilies"] = json!(["IPv4"]);
    if spec.get("ipFamilyPolicy").is_none_or(Value::is_null) {
        spec["ipFamilyPolicy"] = json!("SingleStack");
    }
    ip
}

/// kube's dry-run stand-in for a node port not asked for: one more than the highest port
/// the operation has taken so far, or 32769 for its first.
fn dry_run_node_port(taken: &[i64]) -> i64 {
    taken.iter().max().copied().unwrap_or(32768) + 1
}

fn invalid(svc: &Value, causes: Vec<Cause>) -> ApiError {
    let name = crate::resources::meta::meta_str(svc, "name").unwrap_or("");
    ApiError::invalid("Service", "", name, causes)
}

impl Registry {
    /// Allocates the cluster IP and node ports a new Service needs (keeping those it asks
    /// for, when free), and writes them into it. A dry run takes nothing and writes what
    /// kube's dry-run allocators answer (see [`Registry::allocate_addresses`]).
    pub(crate) async fn allocate_service(
        &self,
        ns: Option<&str>,
        svc: &mut Value,
        dry_run: bool,
    ) -> Result<Allocated> {
        self.allocate_addresses(ns, None, svc, dry_run).await
    }

    /// Allocates what an updated Service newly needs (kube's `allocateUpdate`): node ports
    /// for ports without one when it became a NodePort or LoadBalancer (or gained ports),
    /// a health check node port, and a cluster IP when it stopped being an ExternalName.
    pub(crate) async fn allocate_service_update(
        &self,
        ns: Option<&str>,
        old: &Value,
        svc: &mut Value,
        dry_run: bool,
    ) -> Result<Allocated> {
        self.allocate_addresses(ns, Some(old), svc, dry_run).await
    }

    /// Node ports, then a cluster IP when the Service needs one and has none (on an update,
    /// only when it was an ExternalName): what a create (`old` is `None`) or an update
    /// needs; nothing stays taken when it fails. A dry run takes nothing, as kube's dry-run
    /// allocators: a node port asked for is refused when taken, one not asked for is a
    /// stand-in (32769, then one more than the highest given), and a cluster IP not asked
    /// for is the range's network address.
    async fn allocate_addresses(
        &self,
        ns: Option<&str>,
        old: Option<&Value>,
        svc: &mut Value,
        dry_run: bool,
    ) -> Result<Allocated> {
        let mut allocated = Allocated {
            node_ports: self.allocate_node_ports(old, svc, dry_run).await?,
            ..Allocated::default()
        };
        let needs_ip = match old {
            None => wants_cluster_ip(svc),
            Some(old) => {
                wants_cluster_ip(svc)
                    && !wants_cluster_ip(old)
                    && svc
                        .pointer("/spec/clusterIP")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
            }
        };
        if needs_ip {
            match self.allocate_cluster_ip(ns, svc, dry_run).await {
                Ok(ip) => allocated.ip = Some(ip),
                Err(e) => {
                    self.release_allocated(allocated).await;
                    return Err(e);
                }
            }
        }
        Ok(allocated)
    }

    /// Gives back what an update released: node ports the Service no longer has, and the
    /// cluster IP of a Service that became an ExternalName.
    pub(crate) async fn release_replaced(&self, old: &Value, new: &Value) {
        let kept: BTreeSet<i64> = node_ports_of(new).collect();
        let dropped: Vec<i64> = node_ports_of(old).filter(|p| !kept.contains(p)).collect();
        self.release_node_ports(&dropped).await;
        let ip = |svc: &Value| {
            svc.pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .filter(|ip| !ip.is_empty() && *ip != "None")
                .map(String::from)
        };
        if let Some(old_ip) = ip(old)
            && ip(new).as_ref() != Some(&old_ip)
        {
            self.release_ip(&old_ip).await;
        }
    }

    /// Gives `svc` a cluster IP: the one it asks for when free, otherwise a random free one.
    async fn allocate_cluster_ip(
        &self,
        ns: Option<&str>,
        svc: &mut Value,
        dry_run: bool,
    ) -> Result<String> {
        let asked = svc
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .map(String::from);
        let name = crate::resources::meta::meta_str(svc, "name")
            .unwrap_or("")
            .to_string();
        let ranges = self.service_ranges().await?;
        let ip = match asked {
            Some(ip) => {
                let problem = match ip.parse::<Ipv4Addr>() {
                    Err(_) => Some(format!(
                        "failed to allocate IP {ip}: the provided IP ({ip}) is not a valid IPv4 address"
                    )),
                    Ok(parsed) if !ranges.iter().any(|r| r.contains(parsed)) => {
                        let valid: Vec<String> = ranges.iter().map(ToString::to_string).collect();
                        Some(format!(
                            "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                            valid.join(", ")
                        ))
                    }
                    Ok(_) => None,
                };
                if let Some(problem) = problem {
                    return Err(invalid(
                        svc,
                        vec![Cause::invalid("spec.clusterIPs", &json!([ip]), problem)],
                    ));
                }
                if dry_run {
                    return Ok(finish_cluster_ip(svc, ip));
                }
                match self.claim_ip(&ip, ns, &name).await {
                    Ok(()) => ip,
                    Err(e) if e.reason == Reason::AlreadyExists => {
                        return Err(invalid(
                            svc,
                            vec![Cause::invalid(
                                "spec.clusterIPs",
                                &json!([ip]),
                                format!(
                                    "failed to allocate IP {ip}: provided IP is already allocated"
                                ),
                            )],
                        ));
                    }
                    Err(e) => return Err(e),
                }
            }
            None if dry_run => match ranges.first() {
                Some(range) => range.network().to_string(),
                None => {
                    return Err(ApiError::internal(
                        "failed to allocate a serviceIP: range is full",
                    ));
                }
            },
            None => {
                let mut picked = None;
                'ranges: for range in &ranges {
                    for _ in 0..PICKS {
                        let ip = range.random_ip().to_string();
                        match self.claim_ip(&ip, ns, &name).await {
                            Ok(()) => {
                                picked = Some(ip);
                                break 'ranges;
                            }
                            Err(e) if e.reason == Reason::AlreadyExists => continue,
                            Err(e) => return Err(e),
                        }
                    }
                }
                picked.ok_or_else(|| {
                    ApiError::internal("failed to allocate a serviceIP: range is full")
                })?
            }
        };
        Ok(finish_cluster_ip(svc, ip))
    }

    /// The ranges cluster IPs are allocated from: those of the ServiceCIDRs that take
    /// allocations. A registry without the ServiceCIDR API, or one whose ServiceCIDRs were
    /// never created (no server bootstrapped it), allocates from the default range.
    async fn service_ranges(&self) -> Result<Vec<ServiceIpRange>> {
        let Some(cidrs) = self.catalog.get("networking.k8s.io", "v1", "servicecidrs") else {
            return Ok(vec![ServiceIpRange::default()]);
        };
        let listed = self.list(&cidrs, None, &ListOptions::default()).await?;
        if listed.items.is_empty() {
            return Ok(vec![ServiceIpRange::default()]);
        }
        Ok(allocating_ranges(&listed.items))
    }

    /// Gives back what a failed create allocated.
    pub(crate) async fn release_allocated(&self, allocated: Allocated) {
        if let Some(ip) = allocated.ip {
            self.release_ip(&ip).await;
        }
        self.release_node_ports(&allocated.node_ports).await;
    }

    /// The node ports taken now, as [`Registry::change_node_ports`] reads them.
    async fn taken_node_ports(&self) -> Result<BTreeSet<i64>> {
        let key = Bytes::from_static(NODE_PORT_RANGE_KEY.as_bytes());
        let current = self
            .store
            .get(key)
            .await
            .map_err(|e| ApiError::internal(format!("the node port allocator failed: {e}")))?;
        match current {
            Some(kv) => Ok(decode_node_ports(&kv.value).unwrap_or_default()),
            None => self.node_ports_in_services().await,
        }
    }

    /// Changes the taken node ports with `change` (run again when another writer got there
    /// first), and returns what it returned. The bitmap is made from the Services when the
    /// store has none.
    async fn change_node_ports<T>(
        &self,
        mut change: impl FnMut(&mut BTreeSet<i64>) -> Result<T>,
    ) -> Result<T> {
        let key = Bytes::from_static(NODE_PORT_RANGE_KEY.as_bytes());
        let store_error = |e: konverge_store::Error| {
            ApiError::internal(format!("the node port allocator failed: {e}"))
        };
        for _ in 0..CAS_ATTEMPTS {
            let current = self.store.get(key.clone()).await.map_err(store_error)?;
            let (mut taken, revision) = match &current {
                Some(kv) => (
                    decode_node_ports(&kv.value).unwrap_or_default(),
                    Some(kv.mod_revision),
                ),
                None => (self.node_ports_in_services().await?, None),
            };
            let before = taken.clone();
            let answer = change(&mut taken)?;
            // Nothing to write: unchanged, or still empty on a store that has no bitmap
            // (an idle new cluster writes nothing).
            if taken == before && (revision.is_some() || taken.is_empty()) {
                return Ok(answer);
            }
            let value = encode_node_ports(&taken);
            let written = match revision {
                Some(revision) => self.store.update(key.clone(), value, revision).await,
                None => self.store.create(key.clone(), value).await,
            };
            match written {
                Ok(_) => return Ok(answer),
                Err(
                    konverge_store::Error::Conflict { .. }
                    | konverge_store::Error::AlreadyExists { .. },
                ) => {}
                Err(e) => return Err(store_error(e)),
            }
        }
        Err(ApiError::internal(
            "the node port allocator failed: too many concurrent changes",
        ))
    }

    /// Every node port the stored Services hold.
    async fn node_ports_in_services(&self) -> Result<BTreeSet<i64>> {
        let Some(services) = self.catalog.get("", "v1", "services") else {
            return Ok(BTreeSet::new());
        };
        let listed = self.list(&services, None, &ListOptions::default()).await?;
        Ok(listed
            .items
            .iter()
            .flat_map(|s| node_ports_of(s).collect::<Vec<_>>())
            .collect())
    }

    /// Gives node ports back; a failure is logged (the port stays taken until repaired).
    async fn release_node_ports(&self, ports: &[i64]) {
        if ports.is_empty() {
            return;
        }
        let released = self
            .change_node_ports(|taken| {
                for port in ports {
                    taken.remove(port);
                }
                Ok(())
            })
            .await;
        if let Err(e) = released {
            tracing::warn!(error = %e, ?ports, "releasing node ports failed");
        }
    }

    /// Gives back a deleted Service's cluster IP.
    pub(crate) async fn release_service(&self, svc: &Value) {
        self.release_node_ports(&node_ports_of(svc).collect::<Vec<_>>())
            .await;
        if let Some(ip) = svc
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty() && *ip != "None")
        {
            self.release_ip(ip).await;
        }
    }

    async fn claim_ip(&self, ip: &str, ns: Option<&str>, service: &str) -> Result<()> {
        let Some(addresses) = self.catalog.get("networking.k8s.io", "v1", "ipaddresses") else {
            return Ok(());
        };
        let address = ip_address_for(ip, ns, service);
        // Boxed: creating a Service creates an IPAddress through the same create.
        Box::pin(self.create(&addresses, None, address, &WriteOptions::default()))
            .await
            .map(|_| ())
    }

    async fn release_ip(&self, ip: &str) {
        let Some(addresses) = self.catalog.get("networking.k8s.io", "v1", "ipaddresses") else {
            return;
        };
        // Boxed: deleting a Service deletes its IPAddress through the same delete.
        match Box::pin(self.delete(&addresses, None, ip, &super::DeleteOptions::default())).await {
            Ok(_) => {}
            Err(e) if e.reason == Reason::NotFound => {}
            Err(e) => tracing::warn!(error = %e, ip, "releasing a service IP failed"),
        }
    }

    /// Gives every port of a NodePort or LoadBalancer Service a free node port (unless a
    /// LoadBalancer says not to), and a LoadBalancer with the `Local` external traffic
    /// policy its health check node port, keeping those it asks for when they are free. On
    /// an update (`old`), the ports the Service already holds stay its own. Returns the
    /// ports newly taken.
    async fn allocate_node_ports(
        &self,
        old: Option<&Value>,
        svc: &mut Value,
        dry_run: bool,
    ) -> Result<Vec<i64>> {
        let ports_wanted = wants_node_ports(svc);
        let health_check = wants_health_check_port(svc);
        if !ports_wanted && !health_check {
            return Ok(Vec::new());
        }
        let allocate = allocates_node_ports(svc);
        let held: BTreeSet<i64> = old.map(|o| node_ports_of(o).collect()).unwrap_or_default();
        // Which node port each slot asks for (`None`: any free one); slot `ports.len()` is
        // the health check's.
        let ports = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut slots: Vec<(usize, String, Option<i64>)> = Vec::new();
        if ports_wanted {
            for (i, port) in ports.iter().enumerate() {
                let asked = port["nodePort"].as_i64().filter(|n| *n != 0);
                if asked.is_some() || allocate {
                    slots.push((i, format!("spec.ports[{i}].nodePort"), asked));
                }
            }
        }
        if health_check {
            let asked = svc
                .pointer("/spec/healthCheckNodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n != 0);
            slots.push((ports.len(), "spec.healthCheckNodePort".into(), asked));
        }
        let choose = |bitmap: &mut BTreeSet<i64>| {
            let mut causes = Vec::new();
            let mut given = Vec::new();
            let mut taken = Vec::new();
            let mut mine: BTreeSet<i64> = BTreeSet::new();
            for (slot, field, asked) in &slots {
                match asked {
                        Some(n) if !NODE_PORTS.contains(n) => causes.push(Cause::invalid(
                            field,
                            &json!(n),
                            format!(
                                "provided port is not in the valid range. The range of valid ports is {}-{}",
                                NODE_PORTS.start(),
                                NODE_PORTS.end()
                            ),
                        )),
                        Some(n) if held.contains(n) && !mine.contains(n) => {
                            mine.insert(*n);
                        }
                        Some(n) if bitmap.contains(n) => causes.push(Cause::invalid(
                            field,
                            &json!(n),
                            "provided port is already allocated",
                        )),
                        Some(n) => {
                            bitmap.insert(*n);
                            mine.insert(*n);
                            taken.push(*n);
                        }
                        None if dry_run => {
                            let n = dry_run_node_port(&taken);
                            mine.insert(n);
                            taken.push(n);
                            given.push((*slot, n));
                        }
                        None => {
                            use rand::Rng;
                            let free: Vec<i64> = NODE_PORTS.filter(|p| !bitmap.contains(p)).collect();
                            if free.is_empty() {
                                return Err(ApiError::internal(
                                    "failed to allocate a nodePort: range is full",
                                ));
                            }
                            let n = free[rand::rng().random_range(0..free.len())];
                            bitmap.insert(n);
                            mine.insert(n);
                            taken.push(n);
                            given.push((*slot, n));
                        }
                    }
            }
            if causes.is_empty() {
                Ok((given, taken))
            } else {
                Err(invalid(svc, causes))
            }
        };
        let (given, taken) = if dry_run {
            // Checked against what is taken, nothing written.
            let mut taken = self.taken_node_ports().await?;
            let (given, _) = choose(&mut taken)?;
            (given, Vec::new())
        } else {
            self.change_node_ports(choose).await?
        };
        for (slot, n) in given {
            if slot == ports.len() {
                svc["spec"]["healthCheckNodePort"] = json!(n);
            } else {
                svc["spec"]["ports"][slot]["nodePort"] = json!(n);
            }
        }
        Ok(taken)
    }
}

/// What the node port repair remembers between rounds: how many rounds in a row each node
/// port was seen taken with no Service holding it.
#[derive(Debug, Default)]
pub(crate) struct Leaks {
    ports: BTreeMap<i64, u32>,
}

/// Rounds an address must be seen taken by no Service before it is given back (kube's
/// `numRepairsBeforeLeakCleanup`): a create between taking an address and storing its
/// Service is not mistaken for a leak.
const ROUNDS_BEFORE_RELEASE: u32 = 3;

/// One round of leak counting over `taken` against `in_use`: what stays taken (everything
/// in use, and leaked addresses not yet seen often enough), with `counts` moved on (a leak
/// seen again counts one more; one released or back in use is forgotten).
fn count_leaks<T: Ord + Clone>(
    taken: &BTreeSet<T>,
    in_use: &BTreeSet<T>,
    counts: &BTreeMap<T, u32>,
) -> (BTreeSet<T>, BTreeMap<T, u32>) {
    let mut kept = in_use.clone();
    let mut next = BTreeMap::new();
    for leaked in taken.difference(in_use) {
        let seen = counts.get(leaked).copied().unwrap_or(0) + 1;
        if seen < ROUNDS_BEFORE_RELEASE {
            kept.insert(leaked.clone());
            next.insert(leaked.clone(), seen);
        }
    }
    (kept, next)
}

/// What a round of the node port repair found wrong with a Service, for the Warning Event
/// kube's `portallocator-repair-controller` records about it.
#[derive(Debug, Clone)]
pub(crate) struct PortProblem {
    /// The Service, as listed.
    pub service: Arc<Value>,
    /// The Event's reason (`PortNotAllocated`, `PortAlreadyAllocated`, `PortOutOfRange`).
    pub reason: &'static str,
    /// The Event's message, kube's words.
    pub message: String,
}

/// The node ports a Service holds, as kube's repair counts them (`collectServiceNodePorts`):
/// a port given twice with the same protocol counts twice (a duplicate), with another
/// protocol once; the health check node port unless a UDP-only port already holds it.
fn collect_service_node_ports(svc: &Value) -> Vec<i64> {
    let mut ports = Vec::new();
    let mut seen: BTreeMap<i64, BTreeSet<&str>> = BTreeMap::new();
    for port in svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(node_port) = port["nodePort"].as_i64().filter(|p| *p != 0) else {
            continue;
        };
        let protocol = port["protocol"].as_str().unwrap_or("TCP");
        let protocols = seen.entry(node_port).or_default();
        if protocols.is_empty() || protocols.contains(protocol) {
            ports.push(node_port);
        }
        protocols.insert(protocol);
    }
    if let Some(health) = svc
        .pointer("/spec/healthCheckNodePort")
        .and_then(Value::as_i64)
        .filter(|p| *p != 0)
        && seen.get(&health).is_none_or(|p| p.contains("TCP"))
    {
        ports.push(health);
    }
    ports
}

/// The `IPAddress` kube's allocator records a Service's cluster IP with (its family and
/// manager labels, and the Service as its parent).
pub(crate) fn ip_address_for(ip: &str, ns: Option<&str>, service: &str) -> Value {
    let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
    json!({
        "metadata": {
            "name": ip,
            "labels": {
                "ipaddress.kubernetes.io/ip-family": family,
                "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
            },
        },
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": ns.unwrap_or(""), "name": service}},
    })
}

impl Registry {
    /// One round of kube-apiserver's node port repair (`portallocator-repair-controller`):
    /// node ports the Services hold are marked taken, and ports taken by no Service for
    /// [`ROUNDS_BEFORE_RELEASE`] rounds are given back. Returns what it found wrong with
    /// the Services, in their order: a port not marked taken (marked now), a port two
    /// Services hold, a port outside the range.
    pub(crate) async fn repair_node_ports(&self, leaks: &mut Leaks) -> Result<Vec<PortProblem>> {
        let Some(services) = self.catalog.get("", "v1", "services") else {
            return Ok(Vec::new());
        };
        let listed = self.list(&services, None, &ListOptions::default()).await?;
        let counts = leaks.ports.clone();
        let mut outcome = (BTreeMap::new(), Vec::new());
        self.change_node_ports(|taken| {
            let mut rebuilt = BTreeSet::new();
            let mut problems = Vec::new();
            for svc in &listed.items {
                for port in collect_service_node_ports(svc) {
                    let problem = if !NODE_PORTS.contains(&port) {
                        Some((
                            "PortOutOfRange",
                            format!(
                                "Port {port} is not within the port range {}-{}; please recreate service",
                                NODE_PORTS.start(),
                                NODE_PORTS.end()
                            ),
                        ))
                    } else if !rebuilt.insert(port) {
                        Some((
                            "PortAlreadyAllocated",
                            format!(
                                "Port {port} was assigned to multiple services; please recreate service"
                            ),
                        ))
                    } else if !taken.contains(&port) {
                        Some((
                            "PortNotAllocated",
                            format!("Port {port} is not allocated; repairing"),
                        ))
                    } else {
                        None
                    };
                    if let Some((reason, message)) = problem {
                        problems.push(PortProblem {
                            service: svc.clone(),
                            reason,
                            message,
                        });
                    }
                }
            }
            let (kept, next) = count_leaks(taken, &rebuilt, &counts);
            *taken = kept;
            outcome = (next, problems);
            Ok(())
        })
        .await?;
        leaks.ports = outcome.0;
        Ok(outcome.1)
    }

    /// The ranges of every stored ServiceCIDR, whatever their state (what kube's
    /// `servicecidr.ContainsIP` looks in); without the ServiceCIDR API, or none stored, the
    /// default range.
    pub(crate) async fn service_cidr_ranges(&self) -> Result<Vec<ServiceIpRange>> {
        let Some(cidrs) = self.catalog.get("networking.k8s.io", "v1", "servicecidrs") else {
            return Ok(vec![ServiceIpRange::default()]);
        };
        let listed = self.list(&cidrs, None, &ListOptions::default()).await?;
        if listed.items.is_empty() {
            return Ok(vec![ServiceIpRange::default()]);
        }
        Ok(listed
            .items
            .iter()
            .flat_map(|cidr| {
                cidr.pointer("/spec/cidrs")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter_map(parse_cidr)
                    .collect::<Vec<_>>()
            })
            .collect())
    }
}

/// What an update that changes a Service's type no longer needs, cleared when the client
/// left it as it was (kube's `dropTypeDependentFields`): cluster IPs, IP families and their
/// policy of a Service that became an ExternalName; node ports of one that is no longer a
/// NodePort or LoadBalancer (when no new one was asked for); the health check node port,
/// `allocateLoadBalancerNodePorts` and `loadBalancerClass` of one that no longer needs them.
/// What the client changed as well is left for validation to refuse.
pub(crate) fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let none = json!({});
    let before = old.get("spec").unwrap_or(&none);
    let after = new.get("spec").unwrap_or(&none);
    let field = |spec: &Value, name: &str| spec.get(name).cloned().unwrap_or(Value::Null);
    let ty = |spec: &Value| spec.get("type").and_then(Value::as_str).map(String::from);
    let mut cleared: Vec<&str> = Vec::new();
    let needs_ip = |spec: &Value| ty(spec).as_deref() != Some("ExternalName");
    if needs_ip(before) && !needs_ip(after) {
        let empty_is_null = |v: Value| match v {
            Value::String(s) if s.is_empty() => Value::Null,
            Value::Array(a) if a.is_empty() => Value::Null,
            v => v,
        };
        let same =
            |name: &str| empty_is_null(field(before, name)) == empty_is_null(field(after, name));
        if same("clusterIP") && same("clusterIPs") {
            cleared.extend(["clusterIP", "clusterIPs"]);
        }
        if same("ipFamilies") {
            cleared.push("ipFamilies");
        }
        if same("ipFamilyPolicy") {
            cleared.push("ipFamilyPolicy");
        }
    }
    let needs_ports =
        |spec: &Value| matches!(ty(spec).as_deref(), Some("NodePort" | "LoadBalancer"));
    let ports = |spec: &Value| -> BTreeSet<i64> {
        spec.get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p["nodePort"].as_i64())
            .filter(|n| *n != 0)
            .collect()
    };
    let drop_node_ports =
        needs_ports(before) && !needs_ports(after) && ports(after).is_subset(&ports(before));
    let load_balancer = |spec: &Value| ty(spec).as_deref() == Some("LoadBalancer");
    let needs_health_check = |spec: &Value| {
        load_balancer(spec)
            && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
    };
    if needs_health_check(before)
        && !needs_health_check(after)
        && field(before, "healthCheckNodePort") == field(after, "healthCheckNodePort")
    {
        cleared.push("healthCheckNodePort");
    }
    if load_balancer(before) && !load_balancer(after) {
        let allocate = "allocateLoadBalancerNodePorts";
        if field(before, allocate).is_boolean() && field(before, allocate) == field(after, allocate)
        {
            cleared.push(allocate);
        }
        if field(before, "loadBalancerClass") == field(after, "loadBalancerClass") {
            cleared.push("loadBalancerClass");
        }
    }
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for name in cleared {
        spec.remove(name);
    }
    if drop_node_ports {
        for port in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            port.remove("nodePort");
        }
    }
}

/// An update that leaves a Service's addresses out keeps the allocated ones (a `PUT` of the
/// manifest it was created from must not change its IP or ports).
pub(crate) fn carry_service_addresses(new: &mut Value, current: &Value) {
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let before = &current["spec"];
    let external_name = spec.get("type").and_then(Value::as_str) == Some("ExternalName");
    if !external_name
        && spec
            .get("clusterIP")
            .is_none_or(|ip| ip.as_str().is_none_or(str::is_empty))
    {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if let Some(value) = before.get(field).filter(|v| !v.is_null()) {
                spec.entry(field).or_insert_with(|| value.clone());
                if spec[field].is_null() || spec[field] == json!("") {
                    spec.insert(field.into(), value.clone());
                }
            }
        }
    }
    // `patchAllocatedValues`: a client that sends only `clusterIP` keeps `clusterIPs` (and
    // validation then finds a changed one).
    if !external_name
        && spec
            .get("clusterIPs")
            .is_none_or(|ips| ips.as_array().is_none_or(Vec::is_empty))
        && let Some(ips) = before
            .get("clusterIPs")
            .filter(|ips| ips.as_array().is_some_and(|a| !a.is_empty()))
    {
        spec.insert("clusterIPs".into(), ips.clone());
    }
    let old_ports = before["ports"].as_array().cloned().unwrap_or_default();
    for port in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if port["nodePort"].as_i64().is_some_and(|n| n != 0) {
            continue;
        }
        let same = old_ports.iter().find(|old| {
            old["port"] == port["port"]
                && old["protocol"].as_str().unwrap_or("TCP")
                    == port["protocol"].as_str().unwrap_or("TCP")
        });
        if let Some(node_port) = same
            .and_then(|old| old.get("nodePort"))
            .filter(|n| n.is_i64())
        {
            port["nodePort"] = node_port.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(name: &str, cidrs: &[&str], ready: Option<&str>, deleting: bool) -> Arc<Value> {
        let mut obj = json!({"metadata": {"name": name}, "spec": {"cidrs": cidrs}});
        if let Some(status) = ready {
            obj["status"] = json!({"conditions": [{"type": "Ready", "status": status}]});
        }
        if deleting {
            obj["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        Arc::new(obj)
    }

    #[test]
    fn ranges_are_the_ready_ipv4_service_cidrs_the_default_first() {
        let listed = [
            cidr("a-extra", &["10.1.0.0/24"], None, false),
            cidr("b-gone", &["10.2.0.0/24"], Some("True"), true),
            cidr("c-not-ready", &["10.3.0.0/24"], Some("False"), false),
            cidr(
                "d-dual",
                &["fd00::/108", "10.4.0.5/24"],
                Some("True"),
                false,
            ),
            cidr("kubernetes", &["10.96.0.0/12"], Some("True"), false),
        ];
        let ranges: Vec<String> = allocating_ranges(&listed)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(ranges, ["10.96.0.0/12", "10.1.0.0/24", "10.4.0.0/24"]);
    }

    #[test]
    fn leaks_are_released_on_their_third_round() {
        let set = |v: &[i64]| v.iter().copied().collect::<BTreeSet<i64>>();
        let taken = set(&[1, 2, 3]);
        let in_use = set(&[1, 4]);
        let (kept, counts) = count_leaks(&taken, &in_use, &BTreeMap::new());
        assert_eq!(
            kept,
            set(&[1, 2, 3, 4]),
            "in use is taken; leaks stay for now"
        );
        assert_eq!(counts, [(2, 1), (3, 1)].into_iter().collect());
        let (kept, counts) = count_leaks(&kept, &set(&[1, 3, 4]), &counts);
        assert_eq!(kept, set(&[1, 2, 3, 4]));
        assert_eq!(
            counts,
            [(2, 2)].into_iter().collect(),
            "3 is back in use: forgotten"
        );
        let (kept, counts) = count_leaks(&kept, &set(&[1, 3, 4]), &counts);
        assert_eq!(kept, set(&[1, 3, 4]), "2 is released on its third round");
        assert!(counts.is_empty());
    }

    #[test]
    fn node_ports_are_kept_as_kubes_bitmap() {
        let taken: BTreeSet<i64> = [30000, 30007, 30008, 32767].into_iter().collect();
        let encoded = encode_node_ports(&taken);
        let allocation: Value = serde_json::from_slice(&encoded).unwrap();
        assert_eq!(allocation["kind"], "RangeAllocation");
        assert_eq!(allocation["range"], "30000-32767");
        let bytes = STANDARD
            .decode(allocation["data"].as_str().unwrap())
            .unwrap();
        // Bit 2767 is the top bit set: 346 bytes, big-endian; bits 0, 7 and 8 at the end.
        assert_eq!(bytes.len(), 346);
        assert_eq!(bytes[0], 0b1000_0000);
        assert_eq!(&bytes[344..], &[0b0000_0001, 0b1000_0001]);
        assert_eq!(decode_node_ports(&encoded), Some(taken));
        assert_eq!(
            decode_node_ports(&encode_node_ports(&BTreeSet::new())),
            Some(BTreeSet::new())
        );
        assert_eq!(decode_node_ports(b"not json"), None);
    }

    #[test]
    fn random_ips_are_neither_network_nor_broadcast() {
        let range: ServiceIpRange = "10.0.0.8/29".parse().expect("valid");
        for _ in 0..200 {
            let ip = range.random_ip();
            assert!(range.contains(ip));
            assert!(ip != Ipv4Addr::new(10, 0, 0, 8) && ip != Ipv4Addr::new(10, 0, 0, 15));
        }
    }
}
