//! Service addresses: a cluster IP for every Service but headless and ExternalName ones, and
//! node ports for NodePort and LoadBalancer ports, as kube-apiserver allocates them.
//!
//! Cluster IPs come from 10.96.0.0/12 (kubeadm's default service range; 10.96.0.1 is the
//! `kubernetes` Service's). Each allocated IP is an `IPAddress` object named by the IP with
//! the Service as its parent, as with kube-apiserver 1.33's allocator, so a taken IP is an
//! object that already exists. Node ports come from 30000-32767 and are taken when another
//! Service has them.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::{ListOptions, Registry, WriteOptions};
use crate::error::{ApiError, Cause, Reason, Result};
use crate::resources::ResourceType;

/// The service IP range: 10.96.0.0/12.
const RANGE_START: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const RANGE_BITS: u32 = 12;
const RANGE_TEXT: &str = "10.96.0.0/12";
/// The node port range.
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;
/// Random picks before giving up on a full range.
const PICKS: usize = 64;

/// What a create allocated, to give back if the create fails.
#[derive(Debug, Default)]
pub(crate) struct Allocated {
    ip: Option<String>,
}

fn in_range(ip: Ipv4Addr) -> bool {
    u32::from(ip) >> (32 - RANGE_BITS) == RANGE_START >> (32 - RANGE_BITS)
}

fn random_ip() -> String {
    use rand::Rng;
    let size = 1u32 << (32 - RANGE_BITS);
    // Neither the network address nor the broadcast address.
    let offset = rand::rng().random_range(1..size - 1);
    Ipv4Addr::from(RANGE_START + offset).to_string()
}

fn wants_cluster_ip(svc: &Value) -> bool {
    svc.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName")
        && svc.pointer("/spec/clusterIP").and_then(Value::as_str) != Some("None")
}

fn wants_node_ports(svc: &Value) -> bool {
    matches!(
        svc.pointer("/spec/type").and_then(Value::as_str),
        Some("NodePort" | "LoadBalancer")
    )
}

fn invalid(svc: &Value, causes: Vec<Cause>) -> ApiError {
    let name = crate::resources::meta::meta_str(svc, "name").unwrap_or("");
    ApiError::invalid("Service", "", name, causes)
}

impl Registry {
    /// Allocates the cluster IP and node ports a new Service needs (keeping those it asks
    /// for, when free), and writes them into it.
    pub(crate) async fn allocate_service(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        svc: &mut Value,
    ) -> Result<Allocated> {
        let mut allocated = Allocated::default();
        if wants_node_ports(svc) {
            self.allocate_node_ports(rt, svc).await?;
        }
        if !wants_cluster_ip(svc) {
            return Ok(allocated);
        }
        let asked = svc
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .map(String::from);
        let name = crate::resources::meta::meta_str(svc, "name")
            .unwrap_or("")
            .to_string();
        let ip = match asked {
            Some(ip) => {
                let problem = match ip.parse::<Ipv4Addr>() {
                    Err(_) => Some(format!(
                        "failed to allocate IP {ip}: the provided IP ({ip}) is not a valid IPv4 address"
                    )),
                    Ok(parsed) if !in_range(parsed) => Some(format!(
                        "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {RANGE_TEXT}"
                    )),
                    Ok(_) => None,
                };
                if let Some(problem) = problem {
                    return Err(invalid(
                        svc,
                        vec![Cause::invalid("spec.clusterIPs", &json!([ip]), problem)],
                    ));
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
            None => {
                let mut picked = None;
                for _ in 0..PICKS {
                    let ip = random_ip();
                    match self.claim_ip(&ip, ns, &name).await {
                        Ok(()) => {
                            picked = Some(ip);
                            break;
                        }
                        Err(e) if e.reason == Reason::AlreadyExists => continue,
                        Err(e) => return Err(e),
                    }
                }
                picked.ok_or_else(|| {
                    ApiError::internal("failed to allocate a serviceIP: range is full")
                })?
            }
        };
        let spec = &mut svc["spec"];
        spec["clusterIP"] = json!(ip);
        spec["clusterIPs"] = json!([ip]);
        spec["ipFamilies"] = json!(["IPv4"]);
        if spec.get("ipFamilyPolicy").is_none_or(Value::is_null) {
            spec["ipFamilyPolicy"] = json!("SingleStack");
        }
        allocated.ip = Some(ip);
        Ok(allocated)
    }

    /// Gives back what a failed create allocated.
    pub(crate) async fn release_allocated(&self, allocated: Allocated) {
        if let Some(ip) = allocated.ip {
            self.release_ip(&ip).await;
        }
    }

    /// Gives back a deleted Service's cluster IP.
    pub(crate) async fn release_service(&self, svc: &Value) {
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
        let address = json!({
            "metadata": {
                "name": ip,
                "labels": {
                    "ipaddress.kubernetes.io/ip-family": "IPv4",
                    "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
                },
            },
            "spec": {"parentRef": {"group": "", "resource": "services", "namespace": ns.unwrap_or(""), "name": service}},
        });
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

    /// Gives every port of a NodePort or LoadBalancer Service a free node port, keeping those
    /// it asks for when they are free.
    async fn allocate_node_ports(&self, rt: &ResourceType, svc: &mut Value) -> Result<()> {
        let listed = self.list(rt, None, &ListOptions::default()).await?;
        let mut used: BTreeSet<i64> = BTreeSet::new();
        for other in &listed.items {
            for port in other
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = port["nodePort"].as_i64() {
                    used.insert(n);
                }
            }
        }
        let Some(ports) = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut) else {
            return Ok(());
        };
        let mut causes = Vec::new();
        for (i, port) in ports.iter_mut().enumerate() {
            match port["nodePort"].as_i64().filter(|n| *n != 0) {
                Some(n) if !NODE_PORTS.contains(&n) => causes.push(Cause::invalid(
                    format!("spec.ports[{i}].nodePort"),
                    &json!(n),
                    format!(
                        "provided port is not in the valid range. The range of valid ports is {}-{}",
                        NODE_PORTS.start(),
                        NODE_PORTS.end()
                    ),
                )),
                Some(n) if used.contains(&n) => causes.push(Cause::invalid(
                    format!("spec.ports[{i}].nodePort"),
                    &json!(n),
                    "provided port is already allocated",
                )),
                Some(n) => {
                    used.insert(n);
                }
                None => {
                    use rand::Rng;
                    let free: Vec<i64> = NODE_PORTS.filter(|p| !used.contains(p)).collect();
                    if free.is_empty() {
                        return Err(ApiError::internal(
                            "failed to allocate a nodePort: range is full",
                        ));
                    }
                    let n = free[rand::rng().random_range(0..free.len())];
                    used.insert(n);
                    port["nodePort"] = json!(n);
                }
            }
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(invalid(svc, causes))
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
