//! What pods request and nodes offer, in kube-scheduler's units (`framework.Resource`):
//! milli-CPU, bytes of memory and ephemeral storage, a pod count, and extended resources
//! as whole units.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use konverge_apimachinery::quantity;

/// kube-scheduler's `DefaultMilliCPURequest`: what a container without a CPU request counts
/// as when nodes are scored (never when they are filtered).
pub(crate) const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// kube-scheduler's `DefaultMemoryRequest` (200 MiB), the same for memory.
pub(crate) const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An amount of each resource kube-scheduler accounts for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Resources {
    /// CPU in thousandths of a core.
    pub(crate) milli_cpu: i64,
    /// Memory in bytes.
    pub(crate) memory: i64,
    /// Ephemeral storage in bytes.
    pub(crate) ephemeral_storage: i64,
    /// Pods (only meaningful for a node's allocatable).
    pub(crate) pods: i64,
    /// Extended resources (`example.com/gpu`, `hugepages-2Mi`), whole units.
    pub(crate) scalars: BTreeMap<String, i64>,
}

/// Go's `Quantity.MilliValue()`: rounded up.
fn milli_value(q: &Quantity) -> i64 {
    let nanos = quantity::value(&q.0).map_or(0, |v| v.nanos);
    clamp(nanos.div_euclid(1_000_000) + i128::from(nanos.rem_euclid(1_000_000) != 0))
}

/// Go's `Quantity.Value()`: rounded up.
fn value(q: &Quantity) -> i64 {
    let nanos = quantity::value(&q.0).map_or(0, |v| v.nanos);
    clamp(nanos.div_euclid(1_000_000_000) + i128::from(nanos.rem_euclid(1_000_000_000) != 0))
}

fn clamp(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// kube-scheduler's `IsScalarResourceName`: extended resources (a domain other than
/// `kubernetes.io`), hugepages and attachable volumes.
fn is_scalar(name: &str) -> bool {
    let extended =
        name.contains('/') && !name.starts_with("kubernetes.io/") && !name.starts_with("requests.");
    extended || name.starts_with("hugepages-") || name.starts_with("attachable-volumes-")
}

impl Resources {
    /// A resource list (`requests`, `allocatable`, `overhead`) as amounts.
    pub(crate) fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let mut r = Resources::default();
        r.add_list(list);
        r
    }

    fn add_list(&mut self, list: Option<&BTreeMap<String, Quantity>>) {
        for (name, q) in list.into_iter().flatten() {
            match name.as_str() {
                "cpu" => self.milli_cpu = self.milli_cpu.saturating_add(milli_value(q)),
                "memory" => self.memory = self.memory.saturating_add(value(q)),
                "ephemeral-storage" => {
                    self.ephemeral_storage = self.ephemeral_storage.saturating_add(value(q));
                }
                "pods" => self.pods = self.pods.saturating_add(value(q)),
                other if is_scalar(other) => {
                    let v = self.scalars.entry(other.to_string()).or_default();
                    *v = v.saturating_add(value(q));
                }
                _ => {}
            }
        }
    }

    /// Adds `other` to these amounts.
    pub(crate) fn add(&mut self, other: &Resources) {
        self.combine(other, i64::saturating_add);
    }

    /// Takes `other` off these amounts.
    pub(crate) fn subtract(&mut self, other: &Resources) {
        self.combine(other, i64::saturating_sub);
    }

    /// Raises each amount to `other`'s where `other`'s is larger.
    fn max_with(&mut self, other: &Resources) {
        self.combine(other, i64::max);
    }

    /// Each amount of these and `other`'s, combined by `op`.
    fn combine(&mut self, other: &Resources, op: fn(i64, i64) -> i64) {
        self.milli_cpu = op(self.milli_cpu, other.milli_cpu);
        self.memory = op(self.memory, other.memory);
        self.ephemeral_storage = op(self.ephemeral_storage, other.ephemeral_storage);
        self.pods = op(self.pods, other.pods);
        for (name, v) in &other.scalars {
            let mine = self.scalars.entry(name.clone()).or_default();
            *mine = op(*mine, *v);
        }
    }

    /// Whether nothing at all is requested (kube's Fit then checks only the pod count).
    pub(crate) fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalars.values().all(|v| *v == 0)
    }
}

/// A node's allocatable resources.
pub(crate) fn allocatable(node: &Node) -> Resources {
    Resources::from_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()))
}

fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// What a pod requests (kube's `resourcehelper.PodRequests`): its containers' requests
/// summed, sidecar init containers (`restartPolicy: Always`) added as they keep running,
/// raised to what the largest ordinary init container needs alongside the sidecars started
/// before it, plus the pod's overhead. With `non_zero`, a container that requests no CPU or
/// no memory counts as kube-scheduler's defaults (used for scoring only).
pub(crate) fn pod_requests(pod: &Pod, non_zero: bool) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let container_requests = |c: &Container| {
        let list = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let mut r = Resources::from_list(list);
        if non_zero {
            let has = |name: &str| list.is_some_and(|l| l.contains_key(name));
            if !has("cpu") {
                r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
            }
            if !has("memory") {
                r.memory = DEFAULT_MEMORY_REQUEST;
            }
        }
        r
    };
    let mut requests = Resources::default();
    for c in &spec.containers {
        requests.add(&container_requests(c));
    }
    let mut sidecars = Resources::default();
    let mut init = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let mut needs = container_requests(c);
        if is_sidecar(c) {
            requests.add(&needs);
            sidecars.add(&needs);
            needs = sidecars.clone();
        } else {
            needs.add(&sidecars);
        }
        init.max_with(&needs);
    }
    requests.max_with(&init);
    requests.add(&Resources::from_list(spec.overhead.as_ref()));
    requests
}

/// What a pod requests, for filtering and for scoring.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodRequests {
    /// [`pod_requests`] as filters count them.
    pub(crate) requests: Resources,
    /// [`pod_requests`] with kube-scheduler's defaults for containers without a cpu or
    /// memory request, as scores count them.
    pub(crate) non_zero: Resources,
}

impl PodRequests {
    /// The pod's requests, computed.
    pub(crate) fn of(pod: &Pod) -> PodRequests {
        PodRequests {
            requests: pod_requests(pod, false),
            non_zero: pod_requests(pod, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).expect("a pod")
    }

    fn container(name: &str, cpu: &str, memory: &str) -> serde_json::Value {
        json!({"name": name, "resources": {"requests": {"cpu": cpu, "memory": memory}}})
    }

    #[test]
    fn init_containers_count_by_their_largest_and_overhead_is_added() {
        let p = pod(json!({
            "containers": [container("a", "500m", "1Gi"), container("b", "250m", "1Gi")],
            "initContainers": [container("init-1", "2", "100Mi"), container("init-2", "1", "3Gi")],
            "overhead": {"cpu": "100m", "memory": "10Mi"},
        }));
        let r = pod_requests(&p, false);
        assert_eq!(r.milli_cpu, 2000 + 100);
        assert_eq!(r.memory, 3 * 1024 * 1024 * 1024 + 10 * 1024 * 1024);
    }

    #[test]
    fn sidecars_run_alongside_later_init_containers_and_the_app() {
        let mut sidecar = container("proxy", "1", "1Gi");
        sidecar["restartPolicy"] = json!("Always");
        let p = pod(json!({
            "containers": [container("app", "1", "1Gi")],
            "initContainers": [sidecar, container("migrate", "2", "1Gi")],
        }));
        let r = pod_requests(&p, false);
        // migrate runs beside the sidecar: 3 cores; afterwards app + sidecar: 2.
        assert_eq!(r.milli_cpu, 3000);
        assert_eq!(r.memory, 2 * 1024 * 1024 * 1024);
    }

    #[test]
    fn containers_without_requests_count_as_defaults_only_for_scoring() {
        let p = pod(json!({"containers": [{"name": "a"}, container("b", "1", "1Mi")]}));
        assert_eq!(pod_requests(&p, false).milli_cpu, 1000);
        let non_zero = pod_requests(&p, true);
        assert_eq!(non_zero.milli_cpu, 1000 + DEFAULT_MILLI_CPU_REQUEST);
        assert_eq!(non_zero.memory, 1024 * 1024 + DEFAULT_MEMORY_REQUEST);
    }

    #[test]
    fn extended_resources_are_scalars_and_quantities_round_up() {
        let list: BTreeMap<String, Quantity> = [
            ("cpu", "1.0001"),
            ("example.com/gpu", "2"),
            ("hugepages-2Mi", "4Mi"),
            ("kubernetes.io/other", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
        let r = Resources::from_list(Some(&list));
        assert_eq!(r.milli_cpu, 1001);
        assert_eq!(r.scalars.get("example.com/gpu"), Some(&2));
        assert_eq!(r.scalars.get("hugepages-2Mi"), Some(&(4 * 1024 * 1024)));
        assert!(!r.scalars.contains_key("kubernetes.io/other"));
    }
}
