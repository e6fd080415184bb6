//! `ResourceQuota`: a write that would take a namespace past one of its ResourceQuotas'
//! `status.hard` is refused; one that fits is charged to the quotas' `status.used` before it
//! is stored, as kube-apiserver's quota admission does. The resource quota controller
//! ([`crate::controllers::quota`]) fills in `status.hard` and recomputes `status.used` from what
//! exists; this module also holds what both share: how much of a quota an object uses, and
//! whether a quota's scopes cover it.
//!
//! Amounts are added, compared and printed as kube's `resource.Quantity` does: a sum keeps
//! the format (decimal, binary, exponent) of its first non-zero term, and prints canonically
//! (`1024Mi` prints `1Gi`), which is what kube's quota messages show.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use konverge_apimachinery::quantity;
use serde_json::{Map, Value, json};

use super::{Attributes, Operation, Plugin};
use crate::error::{ApiError, Result};
use crate::lister::Lister;
use crate::resources::ResourceType;

const NANO: i128 = 1_000_000_000;

/// How a quantity prints, as `resource.Quantity`'s `Format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `500m`, `1k`.
    DecimalSI,
    /// `1Gi`.
    BinarySI,
    /// `1e3`.
    DecimalExponent,
}

/// A quantity to add and compare: its value in units of 10^-9 and how it prints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Amount {
    nanos: i128,
    format: Format,
}

impl PartialEq for Amount {
    fn eq(&self, other: &Amount) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Amount {}

impl PartialOrd for Amount {
    fn partial_cmp(&self, other: &Amount) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Amount {
    fn cmp(&self, other: &Amount) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Amount {
    /// Zero, as a fresh decimal quantity.
    pub(crate) fn zero() -> Amount {
        Amount::count(0)
    }

    /// A whole number of things (`pods=1`).
    pub(crate) fn count(n: i64) -> Amount {
        Amount {
            nanos: i128::from(n) * NANO,
            format: Format::DecimalSI,
        }
    }

    /// The quantity a text (`1.5Gi`) or a JSON number holds.
    pub(crate) fn from_value(value: &Value) -> Option<Amount> {
        match value {
            Value::String(text) => Amount::parse(text),
            Value::Number(n) => Amount::parse(&n.to_string()),
            _ => None,
        }
    }

    fn parse(text: &str) -> Option<Amount> {
        let parsed = quantity::value(text)?;
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
            .unwrap_or(text.len());
        let suffix = &text[split..];
        let format = if matches!(suffix, "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei") {
            Format::BinarySI
        } else if suffix.len() > 1 && suffix.starts_with(['e', 'E']) {
            Format::DecimalExponent
        } else {
            Format::DecimalSI
        };
        Some(Amount {
            nanos: parsed.nanos,
            format,
        })
    }

    /// `Quantity.Add`: a zero takes the other's format.
    pub(crate) fn add(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    /// `Quantity.Sub`: a zero takes the other's format.
    pub(crate) fn sub(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    /// Whether it is zero.
    pub(crate) fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// `Quantity.Value()`: whole units, rounded up.
    pub(crate) fn value(self) -> i128 {
        ceil_div(self.nanos, NANO)
    }

    /// `Quantity.MilliValue()`: thousandths, rounded up.
    pub(crate) fn milli_value(self) -> i128 {
        ceil_div(self.nanos, NANO / 1000)
    }

    /// `Quantity.RoundUp(0)`: whole units, keeping the format.
    fn round_up(self) -> Amount {
        Amount {
            nanos: self.value().saturating_mul(NANO),
            format: self.format,
        }
    }
}

fn ceil_div(n: i128, d: i128) -> i128 {
    n.div_euclid(d) + i128::from(n.rem_euclid(d) != 0)
}

/// `n` / 10^`places`, written out exactly.
fn decimal_text(n: i128, places: u32) -> String {
    let sign = if n < 0 { "-" } else { "" };
    let magnitude = n.unsigned_abs();
    let scale = 10u128.pow(places);
    format!(
        "{sign}{}.{:0width$}",
        magnitude / scale,
        magnitude % scale,
        width = places as usize
    )
}

impl std::fmt::Display for Amount {
    /// The canonical form `Quantity.String()` prints: the value is written out in its format
    /// and read back by the shared quantity parser, which canonicalizes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let decimal = decimal_text(self.nanos, 9);
        let text = match self.format {
            Format::DecimalSI => decimal,
            Format::DecimalExponent => format!("{decimal}e0"),
            // In kibibytes: 10^10 / 1024 = 9765625, so 19 places hold the value exactly.
            Format::BinarySI => match self.nanos.checked_mul(9_765_625) {
                Some(scaled) => format!("{}Ki", decimal_text(scaled, 19)),
                None => decimal,
            },
        };
        match quantity::value(&text) {
            Some(q) => f.write_str(&q.canonical),
            None => f.write_str(&text),
        }
    }
}

/// A resource list (`{"requests.cpu": "1"}`), sorted by name as kube prints them.
pub(crate) type Resources = BTreeMap<String, Amount>;

/// The resource list a JSON object holds (entries that are not quantities are left out).
pub(crate) fn resources(list: Option<&Value>) -> Resources {
    list.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), Amount::from_value(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A resource list as JSON, every quantity in its canonical form.
pub(crate) fn resources_json(list: &Resources) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, v)| (k.clone(), json!(v.to_string())))
            .collect::<Map<String, Value>>(),
    )
}

/// `quota.Add`.
pub(crate) fn add(a: &Resources, b: &Resources) -> Resources {
    let mut out = a.clone();
    for (k, v) in b {
        out.entry(k.clone())
            .and_modify(|q| *q = q.add(*v))
            .or_insert(*v);
    }
    out
}

/// `quota.SubtractWithNonNegativeResult`.
fn subtract_non_negative(a: &Resources, b: &Resources) -> Resources {
    let mut out = Resources::new();
    for (k, v) in a {
        let left = b.get(k).map_or(*v, |other| v.sub(*other));
        out.insert(
            k.clone(),
            if left.nanos > 0 { left } else { Amount::zero() },
        );
    }
    for k in b.keys() {
        out.entry(k.clone()).or_insert_with(Amount::zero);
    }
    out
}

/// `quota.Mask`: the entries named in `names`.
pub(crate) fn mask<'a>(list: &Resources, names: impl IntoIterator<Item = &'a String>) -> Resources {
    let names: BTreeSet<&String> = names.into_iter().collect();
    list.iter()
        .filter(|(k, _)| names.contains(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// `quota.Equals`: the same names with equal values.
pub(crate) fn equals(a: &Resources, b: &Resources) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

/// `quota.LessThanOrEqual`: the names whose value in `a` is over its bound in `b`.
fn exceeding(a: &Resources, b: &Resources) -> Vec<String> {
    b.iter()
        .filter(|(k, bound)| a.get(*k).is_some_and(|v| v > *bound))
        .map(|(k, _)| k.clone())
        .collect()
}

/// `quota.Max` into `list`: the greater value of each name (the first on a tie).
fn max_into(list: &mut Resources, other: &Resources) {
    for (k, v) in other {
        match list.get(k) {
            Some(existing) if v <= existing => {}
            _ => {
                list.insert(k.clone(), *v);
            }
        }
    }
}

/// kube's `prettyPrint`: `a=1,b=2`, sorted by name.
fn pretty(list: &Resources) -> String {
    list.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// One scope a quota is restricted to (`spec.scopes` are `Exists` selectors).
#[derive(Debug, Clone)]
pub(crate) struct Selector {
    scope: String,
    operator: String,
    values: Vec<String>,
}

/// A quota's scopes and scope selector expressions, in kube's order.
pub(crate) fn selectors(quota: &Value) -> Vec<Selector> {
    let mut out: Vec<Selector> = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|scope| Selector {
            scope: scope.to_string(),
            operator: "Exists".into(),
            values: Vec::new(),
        })
        .collect();
    out.extend(
        quota
            .pointer("/spec/scopeSelector/matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|e| Selector {
                scope: e["scopeName"].as_str().unwrap_or("").to_string(),
                operator: e["operator"].as_str().unwrap_or("").to_string(),
                values: e["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect(),
            }),
    );
    out
}

/// What pods are charged for.
const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// What services are charged for.
const SERVICE_RESOURCES: &[&str] = &[
    "count/services",
    "services",
    "services.nodeports",
    "services.loadbalancers",
];

/// `<class>.storageclass.storage.k8s.io/<resource>` charges claims of one StorageClass.
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// The resources still counted under their old names as well as `count/<resource>`.
const LEGACY_COUNTS: &[&str] = &[
    "configmaps",
    "resourcequotas",
    "replicationcontrollers",
    "secrets",
];

/// The resources kube's quota never charges (not stored, or too chatty).
const IGNORED: &[(&str, &str)] = &[
    ("", "bindings"),
    ("", "componentstatuses"),
    ("", "events"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
];

/// The container resources that, when a quota limits them, every container must state
/// (kube keeps this requirement for cpu and memory only, for compatibility).
const MUST_STATE: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// `count/<resource>` or `count/<resource>.<group>`.
pub(crate) fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

/// How one kind of object is charged to quotas (kube's quota evaluators).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Evaluator {
    /// Pods: their count and compute resources.
    Pods,
    /// Services: their count, load balancers and node ports.
    Services,
    /// PersistentVolumeClaims: their count and storage, overall and per StorageClass.
    Claims,
    /// Any other resource: one of each object, under these names.
    Count(Vec<String>),
}

impl Evaluator {
    /// The evaluator for `group/plural`.
    pub(crate) fn for_resource(group: &str, plural: &str) -> Evaluator {
        match (group, plural) {
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::Claims,
            ("", legacy) if LEGACY_COUNTS.contains(&legacy) => {
                Evaluator::Count(vec![count_name(group, plural), legacy.to_string()])
            }
            _ => Evaluator::Count(vec![count_name(group, plural)]),
        }
    }

    /// Whether it charges `name`.
    fn charges(&self, name: &str) -> bool {
        match self {
            Evaluator::Pods => {
                POD_RESOURCES.contains(&name)
                    || name.starts_with("hugepages-")
                    || name.starts_with("requests.hugepages-")
                    || (name.starts_with("requests.") && !is_native(name))
            }
            Evaluator::Services => SERVICE_RESOURCES.contains(&name),
            Evaluator::Claims => {
                matches!(
                    name,
                    "count/persistentvolumeclaims" | "persistentvolumeclaims" | "requests.storage"
                ) || name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"))
                    || name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}requests.storage"))
            }
            Evaluator::Count(names) => names.iter().any(|n| n == name),
        }
    }

    /// Of `names`, those it charges.
    pub(crate) fn matching<'a>(
        &self,
        names: impl IntoIterator<Item = &'a String>,
    ) -> BTreeSet<String> {
        names
            .into_iter()
            .filter(|n| self.charges(n))
            .cloned()
            .collect()
    }

    /// Whether a write is one the evaluator charges (creates; updates that can change
    /// usage).
    fn handles(&self, attributes: &Attributes<'_>) -> bool {
        let create = attributes.operation == Operation::Create;
        let update = attributes.operation == Operation::Update;
        match (self, attributes.subresource) {
            (Evaluator::Pods, None) => create,
            (Evaluator::Pods, Some("resize")) => update,
            (Evaluator::Services, _) => create || update,
            // kube compares two freshly made pointers to decide whether a claim's status
            // write matters: every one does.
            (Evaluator::Claims, None | Some("status")) => create || update,
            (Evaluator::Count(_), None) => create,
            _ => false,
        }
    }

    /// What `object` is charged.
    pub(crate) fn usage(&self, object: &Value) -> Resources {
        match self {
            Evaluator::Pods => pod_usage(object),
            Evaluator::Services => service_usage(object),
            Evaluator::Claims => claim_usage(object),
            Evaluator::Count(names) => names
                .iter()
                .map(|n| (n.clone(), Amount::count(1)))
                .collect(),
        }
    }

    /// Whether `object` is within `selector`'s scope (only pods have scopes).
    pub(crate) fn in_scope(&self, selector: &Selector, object: &Value) -> bool {
        match self {
            Evaluator::Pods => pod_in_scope(selector, object),
            _ => false,
        }
    }

    /// What an object must state when a quota limits `required` (only pods must).
    fn constraints(&self, required: &BTreeSet<String>, object: &Value) -> Option<String> {
        match self {
            Evaluator::Pods => pod_constraints(required, object),
            _ => None,
        }
    }

    /// kube's `generic.Matches`: the quota limits something the evaluator charges (by its
    /// `status.hard`), and `object` is in every one of its scopes.
    pub(crate) fn covered_by(&self, quota: &Value, object: &Value) -> bool {
        let hard = resources(quota.pointer("/status/hard"));
        !self.matching(hard.keys()).is_empty()
            && selectors(quota).iter().all(|s| self.in_scope(s, object))
    }
}

/// kube's `IsNativeResource`: unprefixed, or in a `kubernetes.io` domain.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// kube's `IsExtendedResourceName`: a prefixed, non-native name that can also be quota'd
/// as `requests.<name>`.
fn is_extended(name: &str) -> bool {
    if is_native(name) || name.starts_with("requests.") {
        return false;
    }
    let Some((domain, short)) = name.split_once('/') else {
        return false;
    };
    let label_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    !domain.is_empty()
        && !short.is_empty()
        && short.len() <= 63
        && short.chars().all(label_char)
        && short.starts_with(|c: char| c.is_ascii_alphanumeric())
        && short.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn containers<'a>(pod: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn is_sidecar(container: &Value) -> bool {
    container["restartPolicy"] == "Always"
}

/// The pod's total of `requests` or `limits`, as kube sums containers: every app container
/// and sidecar adds up; an init container counts with the sidecars started before it; the
/// total is the greater of the two. `per_container` picks what each container states.
fn aggregate(pod: &Value, per_container: &dyn Fn(&Value) -> Resources) -> Resources {
    let mut total = Resources::new();
    for container in containers(pod, "containers") {
        total = add(&total, &per_container(container));
    }
    let mut sidecars = Resources::new();
    let mut init = Resources::new();
    for container in containers(pod, "initContainers") {
        let own = per_container(container);
        let during = if is_sidecar(container) {
            total = add(&total, &own);
            sidecars = add(&sidecars, &own);
            sidecars.clone()
        } else {
            add(&own, &sidecars)
        };
        max_into(&mut init, &during);
    }
    max_into(&mut total, &init);
    total
}

/// A container's stated `requests` or `limits`.
fn stated(container: &Value, kind: &str) -> Resources {
    resources(container.pointer(&format!("/resources/{kind}")))
}

/// The pod's containers' total requests and limits as LimitRanger reads them (what the spec
/// states, without overhead).
pub(crate) fn stated_totals(pod: &Value) -> (Resources, Resources) {
    (
        aggregate(pod, &|c| stated(c, "requests")),
        aggregate(pod, &|c| stated(c, "limits")),
    )
}

/// A container's status, by name.
fn container_status<'a>(pod: &'a Value, name: &Value) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|f| {
            pod.pointer(&format!("/status/{f}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .find(|s| s["name"] == *name)
}

fn resize_infeasible(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodResizePending")
        .is_some_and(|c| c["reason"] == "Infeasible")
}

/// What a container holds, with in-place resizing: the greater of what its spec asks and
/// what the node allocated and applied (only what the node has when the resize cannot be
/// done).
fn held(pod: &Value, container: &Value, kind: &str) -> Resources {
    let spec = stated(container, kind);
    let Some(status) = container_status(pod, &container["name"])
        .filter(|s| s.get("resources").is_some_and(|r| !r.is_null()))
    else {
        return spec;
    };
    let applied = resources(status.pointer(&format!("/resources/{kind}")));
    let mut out = if resize_infeasible(pod) {
        Resources::new()
    } else {
        spec
    };
    max_into(&mut out, &applied);
    if kind == "requests" {
        max_into(&mut out, &resources(status.get("allocatedResources")));
    }
    out
}

/// kube's `PodRequests`: the containers' requests (what they hold), plus the pod overhead.
fn pod_requests(pod: &Value) -> Resources {
    let total = aggregate(pod, &|c| {
        if is_init(pod, c) && !is_sidecar(c) {
            stated(c, "requests")
        } else {
            held(pod, c, "requests")
        }
    });
    add(&total, &resources(pod.pointer("/spec/overhead")))
}

/// kube's `PodLimits`: the containers' limits, plus the overhead of each limited resource.
fn pod_limits(pod: &Value) -> Resources {
    let mut total = aggregate(pod, &|c| {
        if is_init(pod, c) && !is_sidecar(c) {
            stated(c, "limits")
        } else {
            held(pod, c, "limits")
        }
    });
    for (name, overhead) in resources(pod.pointer("/spec/overhead")) {
        if let Some(limit) = total.get_mut(&name)
            && !limit.is_zero()
        {
            *limit = limit.add(overhead);
        }
    }
    total
}

/// Whether `container` is one of the pod's init containers (they cannot be resized unless
/// they are sidecars).
fn is_init(pod: &Value, container: &Value) -> bool {
    containers(pod, "initContainers").any(|c| std::ptr::eq(c, container))
}

/// kube's `podComputeUsageHelper`: the compute resources requests and limits charge.
fn compute_usage(requests: &Resources, limits: &Resources) -> Resources {
    let mut out = Resources::new();
    out.insert("pods".into(), Amount::count(1));
    for resource in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(resource) {
            out.insert(resource.into(), *q);
            out.insert(format!("requests.{resource}"), *q);
        }
        if let Some(q) = limits.get(resource) {
            out.insert(format!("limits.{resource}"), *q);
        }
    }
    for (name, q) in requests {
        if name.starts_with("hugepages-") {
            out.insert(name.clone(), *q);
            out.insert(format!("requests.{name}"), *q);
        }
        if is_extended(name) {
            out.insert(format!("requests.{name}"), *q);
        }
    }
    out
}

/// kube's `QuotaV1Pod`: a pod is charged until it ends (`Succeeded`, `Failed`) or its
/// deletion's grace period is over.
pub(crate) fn pod_charged(pod: &Value) -> bool {
    if matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    let deleted = pod
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let grace = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64);
    match (deleted, grace) {
        (Some(at), Some(grace)) => at
            .checked_add(jiff::SignedDuration::from_secs(grace))
            .is_ok_and(|deadline| jiff::Timestamp::now() <= deadline),
        _ => true,
    }
}

/// kube's `PodUsageFunc`: one `count/pods` always; the pod's compute resources while it is
/// charged.
fn pod_usage(pod: &Value) -> Resources {
    let mut out = Resources::new();
    out.insert("count/pods".into(), Amount::count(1));
    if !pod_charged(pod) {
        return out;
    }
    add(&out, &compute_usage(&pod_requests(pod), &pod_limits(pod)))
}

/// `activeDeadlineSeconds` set (and not negative).
fn terminating(pod: &Value) -> bool {
    pod.pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|s| s >= 0)
}

/// kube's QoS class `BestEffort`: no container requests or limits any cpu or memory.
fn best_effort(pod: &Value) -> bool {
    ["containers", "initContainers"].iter().all(|field| {
        containers(pod, field).all(|c| {
            ["requests", "limits"].iter().all(|kind| {
                let stated = stated(c, kind);
                ["cpu", "memory"]
                    .iter()
                    .all(|r| stated.get(*r).is_none_or(|q| q.nanos <= 0))
            })
        })
    })
}

/// Whether a pod (anti-)affinity term of the pod names other namespaces.
fn cross_namespace_affinity(pod: &Value) -> bool {
    let crosses = |term: &Value| {
        term["namespaces"].as_array().is_some_and(|n| !n.is_empty())
            || term.get("namespaceSelector").is_some_and(|s| !s.is_null())
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let Some(affinity) = pod.pointer(&format!("/spec/affinity/{kind}")) else {
            return false;
        };
        let required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .any(crosses);
        let preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|w| crosses(&w["podAffinityTerm"]));
        required || preferred
    })
}

/// Whether a pod is in a quota scope.
fn pod_in_scope(selector: &Selector, pod: &Value) -> bool {
    match selector.scope.as_str() {
        "Terminating" => terminating(pod),
        "NotTerminating" => !terminating(pod),
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "PriorityClass" => {
            let class = pod
                .pointer("/spec/priorityClassName")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty());
            // The selector reads the class as the value of a label named `PriorityClass`.
            match (selector.operator.as_str(), class) {
                ("Exists", class) => class.is_some(),
                ("DoesNotExist", class) => class.is_none(),
                ("In", Some(class)) => selector.values.iter().any(|v| v == class),
                ("In", None) => false,
                ("NotIn", Some(class)) => !selector.values.iter().any(|v| v == class),
                ("NotIn", None) => true,
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
        _ => false,
    }
}

/// kube's pod `Constraints`: when a quota limits cpu or memory, every container must state
/// them (`must specify limits.cpu for: a,b; requests.memory for: a`).
fn pod_constraints(required: &BTreeSet<String>, pod: &Value) -> Option<String> {
    let required: BTreeSet<&str> = required
        .iter()
        .map(String::as_str)
        .filter(|r| MUST_STATE.contains(r))
        .collect();
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for field in ["containers", "initContainers"] {
        for container in containers(pod, field) {
            let usage = compute_usage(&stated(container, "requests"), &stated(container, "limits"));
            for resource in &required {
                if !usage.contains_key(*resource) {
                    missing
                        .entry(resource)
                        .or_default()
                        .insert(container["name"].as_str().unwrap_or("").to_string());
                }
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(resource, names)| {
            format!(
                "{resource} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Some(format!("must specify {}", parts.join("; ")))
}

/// kube's service usage: one service; its ports as node ports if it is a NodePort or
/// LoadBalancer service (only the ports that name one, for a load balancer that allocates
/// none); one load balancer.
fn service_usage(service: &Value) -> Resources {
    let ports = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut out = Resources::new();
    out.insert("count/services".into(), Amount::count(1));
    out.insert("services".into(), Amount::count(1));
    let mut balancers = 0;
    let node_ports = match service.pointer("/spec/type").and_then(Value::as_str) {
        Some("NodePort") => ports.len(),
        Some("LoadBalancer") => {
            balancers = 1;
            if service.pointer("/spec/allocateLoadBalancerNodePorts") == Some(&Value::Bool(false)) {
                ports
                    .iter()
                    .filter(|p| p["nodePort"].as_i64().is_some_and(|n| n != 0))
                    .count()
            } else {
                ports.len()
            }
        }
        _ => 0,
    };
    out.insert("services.loadbalancers".into(), Amount::count(balancers));
    out.insert(
        "services.nodeports".into(),
        Amount::count(i64::try_from(node_ports).unwrap_or(i64::MAX)),
    );
    out
}

/// A claim's StorageClass: the beta annotation if present, else `spec.storageClassName`.
fn claim_class(claim: &Value) -> String {
    if let Some(class) = claim
        .pointer("/metadata/annotations")
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
    {
        return class.as_str().unwrap_or("").to_string();
    }
    claim
        .pointer("/spec/storageClassName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// kube's claim usage: one claim (also under its class); the storage it requests, or what
/// was allocated when that is more, in whole bytes (also under its class).
fn claim_usage(claim: &Value) -> Resources {
    let mut out = Resources::new();
    out.insert("persistentvolumeclaims".into(), Amount::count(1));
    out.insert("count/persistentvolumeclaims".into(), Amount::count(1));
    let class = claim_class(claim);
    if !class.is_empty() {
        out.insert(
            format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
            Amount::count(1),
        );
    }
    let requested = claim
        .pointer("/spec/resources/requests/storage")
        .and_then(Amount::from_value)
        .map(Amount::round_up);
    let allocated = claim
        .pointer("/status/allocatedResources/storage")
        .and_then(Amount::from_value);
    let storage = match (requested, allocated) {
        (Some(requested), Some(allocated)) if allocated > requested => Some(allocated.round_up()),
        (requested, _) => requested,
    };
    if let Some(storage) = storage {
        out.insert("requests.storage".into(), storage);
        if !class.is_empty() {
            out.insert(
                format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                storage,
            );
        }
    }
    out
}

/// A quota as the admission reads it.
#[derive(Debug, Clone)]
struct Quota {
    object: Value,
    name: String,
    hard: Resources,
    used: Resources,
    /// `status.used` as read, to tell whether the request changed it.
    read: Resources,
}

impl Quota {
    fn of(object: &Value) -> Quota {
        let used = resources(object.pointer("/status/used"));
        Quota {
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            hard: resources(object.pointer("/status/hard")),
            read: used.clone(),
            used,
            object: object.clone(),
        }
    }
}

/// kube's `CheckRequest`: refuses a write that a quota's constraints refuse, or that would
/// take a quota past its hard limits; otherwise charges it to every quota that covers it.
fn check_request(
    evaluator: &Evaluator,
    quotas: &mut [Quota],
    attributes: &Attributes<'_>,
    object: &Value,
) -> Result<()> {
    let forbidden = |why: String| super::plugins::forbidden(attributes, why);
    let mut interesting = Vec::new();
    for (i, quota) in quotas.iter().enumerate() {
        if !evaluator.covered_by(&quota.object, object) {
            continue;
        }
        let restricted = evaluator.matching(quota.hard.keys());
        if let Some(why) = evaluator.constraints(&restricted, object) {
            return Err(forbidden(format!("failed quota: {}: {why}", quota.name)));
        }
        if restricted.iter().any(|r| !quota.used.contains_key(r)) {
            return Err(forbidden(format!(
                "status unknown for quota: {}, resources: {}",
                quota.name,
                restricted.iter().cloned().collect::<Vec<_>>().join(",")
            )));
        }
        interesting.push(i);
    }
    let input = evaluator.usage(object);
    let negative: Vec<String> = input
        .iter()
        .filter(|(_, q)| q.nanos < 0)
        .map(|(k, _)| k.clone())
        .collect();
    if !negative.is_empty() {
        return Err(forbidden(format!(
            "quota usage is negative for resource(s): {}",
            negative.join(",")
        )));
    }
    let mut deltas: HashMap<usize, Resources> =
        interesting.iter().map(|i| (*i, input.clone())).collect();
    if attributes.operation == Operation::Update {
        let Some(old) = attributes.old else {
            return Err(forbidden(
                "unable to get previous usage since prior version of object was not found".into(),
            ));
        };
        let versioned = old
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty());
        if versioned {
            let delta = subtract_non_negative(&input, &evaluator.usage(old));
            for i in &interesting {
                if evaluator.covered_by(&quotas[*i].object, old) {
                    deltas.insert(*i, delta.clone());
                }
            }
        }
    }
    for delta in deltas.values_mut() {
        delta.retain(|_, q| !q.is_zero());
    }
    deltas.retain(|_, d| !d.is_empty());
    for i in interesting {
        let Some(delta) = deltas.get(&i) else {
            continue;
        };
        let quota = &mut quotas[i];
        let requested = mask(delta, quota.hard.keys());
        let new_used = add(&quota.used, &requested);
        if attributes.subresource != Some("status") {
            let exceeded = exceeding(&mask(&new_used, requested.keys()), &quota.hard);
            if !exceeded.is_empty() {
                return Err(forbidden(format!(
                    "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                    quota.name,
                    pretty(&mask(&requested, &exceeded)),
                    pretty(&mask(&quota.used, &exceeded)),
                    pretty(&mask(&quota.hard, &exceeded)),
                )));
            }
        }
        quota.used = new_used;
    }
    Ok(())
}

/// How many times the quotas are read again when recording usage loses a race.
const RETRIES: usize = 3;

/// `ResourceQuota`: refuses writes that exceed a namespace's quotas and charges the others.
/// Requests in one namespace are judged one at a time, as kube's quota admission does.
#[derive(Debug, Default)]
pub struct ResourceQuota {
    namespaces: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Which namespaces have quotas, as of a registry quota generation.
    with_quota: std::sync::RwLock<Option<QuotaNamespaces>>,
}

/// The namespaces that have ResourceQuotas, read consistently when the registry's quota
/// generation was `generation`.
#[derive(Debug)]
struct QuotaNamespaces {
    generation: u64,
    read: Instant,
    namespaces: BTreeSet<String>,
}

/// How long the namespaces with quotas are trusted without a write of a quota through this
/// server (writes through other servers sharing the store are seen within it; kube's quota
/// admission trusts a live lookup for 30 seconds too).
const TRUSTED_FOR: Duration = Duration::from_secs(30);

impl ResourceQuota {
    fn lock_for(&self, namespace: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(namespace.to_string()).or_default().clone()
    }

    /// Whether `namespace` has quotas: known without a read while no quota was written
    /// since the namespaces with quotas were last read (most writes, in most namespaces,
    /// then cost a lookup); read again, consistently, when one was.
    async fn may_have_quotas(&self, registry: &dyn Lister, namespace: &str) -> Result<bool> {
        let generation = registry.changes(crate::lister::Changes::Quota);
        {
            let known = self.with_quota.read().unwrap_or_else(|e| e.into_inner());
            if let Some(known) = known.as_ref()
                && known.generation == generation
                && known.read.elapsed() < TRUSTED_FOR
            {
                return Ok(known.namespaces.contains(namespace));
            }
        }
        let Some(rt) = registry.catalog().get("", "v1", "resourcequotas") else {
            return Ok(false);
        };
        let read = Instant::now();
        let namespaces: BTreeSet<String> = registry
            .list(&rt, None, None)
            .await?
            .iter()
            .filter_map(|q| q.pointer("/metadata/namespace")?.as_str().map(String::from))
            .collect();
        let found = namespaces.contains(namespace);
        *self.with_quota.write().unwrap_or_else(|e| e.into_inner()) = Some(QuotaNamespaces {
            generation,
            read,
            namespaces,
        });
        Ok(found)
    }
}

/// The quotas of a namespace, in name order, read consistently.
async fn quotas_in(registry: &dyn Lister, namespace: &str) -> Result<Vec<Quota>> {
    let Some(rt) = registry.catalog().get("", "v1", "resourcequotas") else {
        return Ok(Vec::new());
    };
    Ok(registry
        .list(&rt, Some(namespace), None)
        .await?
        .iter()
        .map(|q| Quota::of(q))
        .collect())
}

/// Writes a quota's new `status.used`, if nothing changed the quota since it was read.
async fn record(registry: &dyn Lister, namespace: &str, quota: &Quota) -> Result<()> {
    let Some(rt) = registry.catalog().get("", "v1", "resourcequotas") else {
        return Ok(());
    };
    let mut body = quota.object.clone();
    if !body.get("status").is_some_and(Value::is_object) {
        body["status"] = json!({});
    }
    body["status"]["used"] = resources_json(&quota.used);
    registry
        .write_status(&rt, Some(namespace), &quota.name, body)
        .await
}

#[async_trait::async_trait]
impl Plugin for ResourceQuota {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        rt.namespaced
            && !IGNORED
                .iter()
                .any(|(group, plural)| rt.group == *group && rt.plural == *plural)
    }

    async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<()> {
        if attributes.namespace.is_empty() {
            return Ok(());
        }
        let evaluator = Evaluator::for_resource(&attributes.rt.group, &attributes.rt.plural);
        if !evaluator.handles(attributes) {
            return Ok(());
        }
        // Most namespaces have no quota: their writes are not serialized for nothing.
        if !self.may_have_quotas(registry, attributes.namespace).await? {
            return Ok(());
        }
        let lock = self.lock_for(attributes.namespace);
        let _judging = lock.lock().await;
        let mut quotas = quotas_in(registry, attributes.namespace).await?;
        let mut failure: Option<ApiError> = None;
        for attempt in 0..=RETRIES {
            if quotas.is_empty() {
                return Ok(());
            }
            check_request(&evaluator, &mut quotas, attributes, object)?;
            if attributes.dry_run {
                return Ok(());
            }
            let mut failed = BTreeSet::new();
            for quota in quotas.iter().filter(|q| !equals(&q.used, &q.read)) {
                if let Err(e) = record(registry, attributes.namespace, quota).await {
                    failed.insert(quota.name.clone());
                    failure = Some(e);
                }
            }
            if failed.is_empty() || attempt == RETRIES {
                break;
            }
            // Only the quotas that could not be written are judged again: the others hold
            // the charge already.
            quotas = quotas_in(registry, attributes.namespace)
                .await?
                .into_iter()
                .filter(|q| failed.contains(&q.name))
                .collect();
            failure = None;
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amount(text: &str) -> Amount {
        Amount::parse(text).expect("a quantity")
    }

    #[test]
    fn sums_print_in_the_format_of_their_first_term() {
        for (a, b, sum) in [
            ("500m", "500m", "1"),
            ("1Gi", "512Mi", "1536Mi"),
            ("0", "1Gi", "1Gi"),
            ("1", "1Gi", "1073741825"),
            ("1Gi", "1", "1073741825"),
            ("1e3", "1e3", "2e3"),
            ("100m", "1.5", "1600m"),
            ("2Ki", "1000", "3048"),
        ] {
            assert_eq!(amount(a).add(amount(b)).to_string(), sum, "{a} + {b}");
        }
        assert_eq!(amount("1Gi").sub(amount("1Gi")).to_string(), "0");
        assert_eq!(amount("1500m").value(), 2);
        assert_eq!(amount("0.5m").milli_value(), 1);
        assert_eq!(amount("1.5").round_up().to_string(), "2");
    }

    #[test]
    fn sidecars_count_with_the_app_containers_and_init_containers_at_their_peak() {
        let pod = json!({"spec": {
            "initContainers": [
                {"name": "setup", "resources": {"requests": {"cpu": "2"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "late", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}}},
            ],
        }});
        let (requests, _) = stated_totals(&pod);
        assert_eq!(requests["cpu"].to_string(), "2");
        assert_eq!(requests["memory"].to_string(), "1Gi");
        let usage = pod_usage(&pod);
        assert_eq!(usage["requests.cpu"].to_string(), "2");
        assert_eq!(usage["pods"].to_string(), "1");
        assert_eq!(usage["count/pods"].to_string(), "1");
    }

    #[test]
    fn ended_pods_are_charged_only_as_objects() {
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}, "status": {"phase": "Succeeded"}});
        let usage = pod_usage(&pod);
        assert_eq!(usage.keys().collect::<Vec<_>>(), ["count/pods"]);
    }

    #[test]
    fn constraints_name_each_container_missing_a_resource() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "b", "resources": {"requests": {"cpu": "1"}}},
                {"name": "a"},
            ],
            "initContainers": [{"name": "init", "resources": {"limits": {"cpu": "1"}}}],
        }});
        let required: BTreeSet<String> = ["limits.cpu", "requests.cpu", "pods"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            pod_constraints(&required, &pod).as_deref(),
            Some("must specify limits.cpu for: a,b; requests.cpu for: a,init")
        );
    }

    #[test]
    fn pods_are_in_the_scopes_kube_puts_them_in() {
        let selector = |scope: &str, operator: &str, values: &[&str]| Selector {
            scope: scope.into(),
            operator: operator.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let plain = json!({"spec": {"containers": [{"name": "a"}]}});
        let classy = json!({"spec": {"priorityClassName": "high", "containers": [{"name": "a", "resources": {"requests": {"memory": "1Mi"}}}]}});
        let far = json!({"spec": {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {"namespaceSelector": {}, "topologyKey": "zone"}}]}}}});
        let scoped = |s: &Selector, pod: &Value| Evaluator::Pods.in_scope(s, pod);
        assert!(scoped(&selector("BestEffort", "Exists", &[]), &plain));
        assert!(scoped(&selector("NotBestEffort", "Exists", &[]), &classy));
        assert!(scoped(&selector("PriorityClass", "In", &["high"]), &classy));
        assert!(!scoped(&selector("PriorityClass", "In", &["high"]), &plain));
        assert!(scoped(
            &selector("PriorityClass", "NotIn", &["high"]),
            &plain
        ));
        assert!(scoped(
            &selector("PriorityClass", "DoesNotExist", &[]),
            &plain
        ));
        assert!(scoped(
            &selector("CrossNamespacePodAffinity", "Exists", &[]),
            &far
        ));
        assert!(!scoped(
            &selector("CrossNamespacePodAffinity", "Exists", &[]),
            &plain
        ));
        assert!(!Evaluator::Services.in_scope(&selector("BestEffort", "Exists", &[]), &plain));
    }

    #[test]
    fn services_and_claims_are_charged_as_kube_charges_them() {
        let lb = json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80, "nodePort": 30001}, {"port": 81}]}});
        let usage = service_usage(&lb);
        assert_eq!(usage["services.nodeports"].to_string(), "1");
        assert_eq!(usage["services.loadbalancers"].to_string(), "1");
        let claim = json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1.5"}}}, "status": {"allocatedResources": {"storage": "2Gi"}}});
        let usage = claim_usage(&claim);
        assert_eq!(usage["requests.storage"].to_string(), "2Gi");
        assert_eq!(
            usage["gold.storageclass.storage.k8s.io/persistentvolumeclaims"].to_string(),
            "1"
        );
    }
}
