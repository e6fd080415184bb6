//! What the endpoints controllers share (kcm's `k8s.io/endpointslice/util` and the helpers
//! of both controllers): which pods belong in a Service's endpoints, their addresses and
//! ports, which Services a pod change concerns, and the trigger-time annotation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use konverge_runtime::cache::Change;
use konverge_runtime::{ObjectKey, Store};
use kube::ResourceExt;

use crate::pods;

/// The Service's selector. A Service without one gets no endpoints from the controllers
/// (its users write them); an empty one selects every pod of its namespace, as in kcm.
pub fn selector(service: &Service) -> Option<&BTreeMap<String, String>> {
    service.spec.as_ref()?.selector.as_ref()
}

/// Whether `labels` carry every `key=value` of a Service selector.
pub fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// An `ExternalName` Service, which has no endpoints.
pub fn is_external_name(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName")
}

/// The Service's `clusterIP` (`""` when unset).
pub fn cluster_ip(service: &Service) -> &str {
    service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or("")
}

/// The Service has a cluster IP: it is neither headless (`None`) nor without one.
pub fn is_service_ip_set(service: &Service) -> bool {
    let ip = cluster_ip(service);
    ip != "None" && !ip.is_empty()
}

/// The Service's `publishNotReadyAddresses`.
pub fn publish_not_ready(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// The Service's ports (none for a headless Service that declares none).
pub fn service_ports(service: &Service) -> &[ServicePort] {
    service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or(&[])
}

/// The Service's `ipFamilies`.
pub fn ip_families(service: &Service) -> &[String] {
    service
        .spec
        .as_ref()
        .and_then(|s| s.ip_families.as_deref())
        .unwrap_or(&[])
}

/// The keys of the Services in `namespace` whose selector matches `labels` (kcm's
/// `getServicesForPod`); Services without a selector match nothing.
fn services_selecting(
    services: &Store<Service>,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> BTreeSet<ObjectKey> {
    services
        .list_namespace(namespace)
        .iter()
        .filter(|svc| selector(svc).is_some_and(|s| selects(s, labels)))
        .map(|svc| ObjectKey::namespaced(namespace, svc.name_any()))
        .collect()
}

/// The Services a pod change concerns (kcm's `GetServicesToUpdateOnPodChange`): those
/// selecting the pod when it appears or goes; on an update, none unless something an
/// endpoint shows changed (readiness, deletion, IPs) or what Services select it by (labels,
/// hostname, subdomain) — then those that select it now, and those that did before.
pub fn services_for_pod_change(services: &Store<Service>, change: &Change<Pod>) -> Vec<ObjectKey> {
    let namespace = change.key.namespace.as_deref().unwrap_or_default();
    let keys = match (change.old.as_deref(), change.new.as_deref()) {
        (None, None) => BTreeSet::new(),
        (None, Some(pod)) | (Some(pod), None) => {
            services_selecting(services, namespace, pods::labels(pod))
        }
        (Some(old), Some(new)) => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return Vec::new();
            }
            let (pod_changed, membership_changed) = pod_endpoints_changed(old, new);
            let now = services_selecting(services, namespace, pods::labels(new));
            if !membership_changed {
                if pod_changed { now } else { BTreeSet::new() }
            } else {
                let before = services_selecting(services, namespace, pods::labels(old));
                if pod_changed {
                    now.union(&before).cloned().collect()
                } else {
                    now.symmetric_difference(&before).cloned().collect()
                }
            }
        }
    };
    keys.into_iter().collect()
}

/// Whether a pod changed in a way its endpoints show (deletion, readiness, IPs), and in a
/// way that may change which Services select it (labels, hostname, subdomain) (kcm's
/// `podEndpointsChanged`).
fn pod_endpoints_changed(old: &Pod, new: &Pod) -> (bool, bool) {
    let spec = |pod: &Pod| {
        pod.spec
            .as_ref()
            .map(|s| (s.hostname.clone(), s.subdomain.clone()))
    };
    let membership = old.metadata.labels != new.metadata.labels || spec(old) != spec(new);
    let changed = old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || pods::is_ready(old) != pods::is_ready(new)
        || pod_ips(old) != pod_ips(new);
    (changed, membership)
}

/// The pod's `status.podIPs`.
pub fn pod_ips(pod: &Pod) -> Vec<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ips.as_ref())
        .map(|ips| ips.iter().map(|ip| ip.ip.as_str()).collect())
        .unwrap_or_default()
}

/// The pod's `status.podIP` (`""` when unset).
fn pod_ip(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .unwrap_or("")
}

/// Whether a pod belongs in a Service's endpoints (kcm's `ShouldPodBeInEndpoints`): not
/// finished, with an IP, and — unless `include_terminating` — not being deleted.
pub fn should_pod_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    let phase = pods::phase(pod);
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    if pod_ip(pod).is_empty() && pod_ips(pod).is_empty() {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// The pod's `spec.nodeName`, if set.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The pod's hostname, when its endpoint carries it: it has one and its subdomain is the
/// Service, in the same namespace (kcm's `ShouldSetHostname`).
pub fn hostname_for(pod: &Pod, service: &Service) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let hostname = spec.hostname.as_deref().filter(|h| !h.is_empty())?;
    let same_service = spec.subdomain.as_deref() == Some(service.name_any().as_str())
        && pod.namespace() == service.namespace();
    same_service.then(|| hostname.to_string())
}

/// A reference to the pod, as endpoints carry it.
pub fn target_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.namespace(),
        name: Some(pod.name_any()),
        uid: pod.uid(),
        ..ObjectReference::default()
    }
}

/// The pod's port a Service port targets (kcm's `FindPort`): a number as is, a name looked
/// up among the named ports (of the same protocol) of its containers and its sidecars
/// (init containers restarted always). `None`: the pod has no such port.
pub fn find_port(pod: &Pod, service_port: &ServicePort) -> Option<i32> {
    let protocol = service_port.protocol.as_deref().unwrap_or("TCP");
    let name = match &service_port.target_port {
        Some(IntOrString::Int(port)) => return Some(*port),
        None => return Some(service_port.port),
        Some(IntOrString::String(name)) => name,
    };
    let spec = pod.spec.as_ref()?;
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| {
            p.name.as_deref() == Some(name.as_str())
                && p.protocol.as_deref().unwrap_or("TCP") == protocol
        })
        .map(|p| p.container_port)
}

/// Parses an IP as Go's `ParseIPSloppy` does: IPv4 octets may carry leading zeros.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let octets: Vec<u8> = text
        .split('.')
        .map(|o| {
            (!o.is_empty() && o.len() <= 3 && o.bytes().all(|b| b.is_ascii_digit()))
                .then(|| o.parse::<u8>().ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    let [a, b, c, d] = octets.as_slice() else {
        return None;
    };
    Some(IpAddr::V4(Ipv4Addr::new(*a, *b, *c, *d)))
}

/// Whether `text` is an IPv6 address.
pub fn is_ipv6(text: &str) -> bool {
    parse_ip(text).is_some_and(|ip| ip.is_ipv6())
}

/// The time a pod change reflected in endpoints happened: its Ready condition's last
/// transition (kcm's `getPodTriggerTime`).
fn pod_trigger_time(pod: &Pod) -> Option<Timestamp> {
    pods::condition(pod, "Ready")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// What the tracker last saw of one Service.
#[derive(Debug, Default)]
struct TriggerState {
    service: Option<Timestamp>,
    pods: HashMap<String, Timestamp>,
}

/// Computes the `endpoints.kubernetes.io/last-change-trigger-time` annotation (kcm's
/// `TriggerTimeTracker`): the Service's creation the first time it is synced, then the
/// earliest of the pod Ready transitions (and Service creation) that changed since the
/// previous sync, or nothing when none did.
#[derive(Debug, Default)]
pub struct TriggerTimes {
    services: Mutex<HashMap<(String, String), TriggerState>>,
}

impl TriggerTimes {
    /// No Service seen yet.
    pub fn new() -> TriggerTimes {
        TriggerTimes::default()
    }

    /// Records this sync of `service` with its `pods`, and returns the trigger time to
    /// export (`None`: clear the annotation).
    pub fn compute(&self, service: &Service, pods: &[std::sync::Arc<Pod>]) -> Option<Timestamp> {
        let key = (service.namespace().unwrap_or_default(), service.name_any());
        let mut map = self
            .services
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = map.contains_key(&key);
        let state = map.entry(key).or_default();
        let mut earliest: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| {
            earliest = Some(earliest.map_or(t, |e| e.min(t)));
        };
        let mut seen = HashMap::new();
        for pod in pods {
            if let Some(t) = pod_trigger_time(pod) {
                if state.pods.get(&pod.name_any()).is_none_or(|last| t > *last) {
                    consider(t);
                }
                seen.insert(pod.name_any(), t);
            }
        }
        let created = service.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(t) = created
            && state.service.is_none_or(|last| t > last)
        {
            consider(t);
        }
        state.pods = seen;
        state.service = created;
        if known { earliest } else { created }
    }

    /// Forgets a deleted Service.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.services
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

/// The annotation value of a trigger time: RFC 3339 in UTC with as many fractional digits
/// as needed, as Go's `RFC3339Nano`.
pub fn format_trigger_time(time: Timestamp) -> String {
    time.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sloppy_ips_parse_as_go_does() {
        assert_eq!(
            parse_ip("010.001.0.7").map(|ip| ip.to_string()).as_deref(),
            Some("10.1.0.7")
        );
        assert!(is_ipv6("fd00::1"));
        assert!(!is_ipv6("10.0.0.1"));
        assert!(parse_ip("not-an-ip").is_none());
        assert!(parse_ip("1.2.3").is_none());
    }

    #[test]
    fn named_ports_are_found_by_name_and_protocol() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080},
                {"name": "dns", "containerPort": 5353, "protocol": "UDP"},
            ]}]}
        }))
        .expect("a pod");
        let port = |target: IntOrString, protocol: &str| ServicePort {
            port: 80,
            protocol: Some(protocol.into()),
            target_port: Some(target),
            ..ServicePort::default()
        };
        assert_eq!(
            find_port(&pod, &port(IntOrString::String("http".into()), "TCP")),
            Some(8080)
        );
        assert_eq!(
            find_port(&pod, &port(IntOrString::String("dns".into()), "TCP")),
            None
        );
        assert_eq!(
            find_port(&pod, &port(IntOrString::String("dns".into()), "UDP")),
            Some(5353)
        );
        assert_eq!(
            find_port(&pod, &port(IntOrString::Int(9000), "TCP")),
            Some(9000)
        );
    }
}
