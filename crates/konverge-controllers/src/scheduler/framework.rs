//! One scheduling cycle over a snapshot of the nodes: kube-scheduler's default filter
//! plugins in their default order, its default resource scores, and the `FitError` message
//! an unschedulable pod gets.

use crate::pods::tolerates;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, Taint, Toleration,
};

use super::resources::{self, Resources};

/// NodeUnschedulable's reason.
pub(crate) const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// NodeAffinity's reason.
pub(crate) const REASON_NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
/// NodeResourcesFit's reason when the node holds as many pods as it may.
pub(crate) const REASON_TOO_MANY_PODS: &str = "Too many pods";
/// DefaultPreemption's reason for a node where removing pods would not help.
pub(crate) const REASON_PREEMPTION_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// DefaultPreemption's reason for a node where no pod could be removed to make room.
pub(crate) const REASON_NO_VICTIMS: &str = "No preemption victims found for incoming pod.";
/// kube-scheduler's `MaxNodeScore`: every score plugin's scores are scaled to 0..=this.
pub(crate) const MAX_NODE_SCORE: i64 = 100;
/// kube-scheduler's `ErrNoNodesAvailable`.
pub(crate) const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";
/// The taint a cordoned node is treated as having (kube's `TaintNodeUnschedulable`).
const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// A node as the scheduler sees it: the Node and what the pods on it (bound or assumed)
/// request.
#[derive(Debug)]
pub(crate) struct NodeInfo<'a> {
    /// The node.
    pub(crate) node: &'a Node,
    /// Its name.
    pub(crate) name: String,
    /// Its allocatable resources.
    pub(crate) allocatable: Resources,
    /// What its pods request.
    pub(crate) requested: Resources,
    /// What its pods request, a container without a CPU or memory request counted as
    /// kube-scheduler's defaults (for scoring).
    pub(crate) non_zero_requested: Resources,
    /// How many pods it holds.
    pub(crate) pods: i64,
    /// The pods it holds (bound or assumed), for the plugins that look at pods.
    pub(crate) pod_list: Vec<&'a Pod>,
}

impl<'a> NodeInfo<'a> {
    /// An empty node.
    #[cfg(test)]
    pub(crate) fn new(node: &'a Node) -> NodeInfo<'a> {
        NodeInfo::new_with(node, resources::allocatable(node))
    }

    /// An empty node whose allocatable resources were read already.
    pub(crate) fn new_with(node: &'a Node, allocatable: Resources) -> NodeInfo<'a> {
        NodeInfo {
            node,
            name: node.metadata.name.clone().unwrap_or_default(),
            allocatable,
            requested: Resources::default(),
            non_zero_requested: Resources::default(),
            pods: 0,
            pod_list: Vec::new(),
        }
    }

    /// No longer counts `pod` here.
    pub(crate) fn remove_pod(&mut self, pod: &Pod) {
        let requests = resources::PodRequests::of(pod);
        self.requested.subtract(&requests.requests);
        self.non_zero_requested.subtract(&requests.non_zero);
        self.pods -= 1;
    }

    /// Counts `pod` as running here.
    pub(crate) fn add_pod(&mut self, pod: &Pod) {
        self.add_requests(&resources::PodRequests::of(pod));
    }

    /// Counts a pod requesting `requests` as running here.
    pub(crate) fn add_requests(&mut self, requests: &resources::PodRequests) {
        self.requested.add(&requests.requests);
        self.non_zero_requested.add(&requests.non_zero);
        self.pods += 1;
    }
}

/// Why a filter turned a node down, and whether removing pods could change that
/// (kube's `Unschedulable`) or not (`UnschedulableAndUnresolvable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// The plugin's reasons.
    pub(crate) reasons: Vec<String>,
    /// Whether preemption could help.
    pub(crate) resolvable: bool,
}

impl Rejection {
    fn unresolvable(reason: impl Into<String>) -> Rejection {
        Rejection {
            reasons: vec![reason.into()],
            resolvable: false,
        }
    }
}

/// What the pod asks of a node, computed once per cycle (kube's PreFilter state).
#[derive(Debug)]
pub(crate) struct PodRequest<'a> {
    spec: Option<&'a PodSpec>,
    requests: Resources,
    non_zero: Resources,
}

impl<'a> PodRequest<'a> {
    /// The pod's demands.
    pub(crate) fn new(pod: &'a Pod) -> PodRequest<'a> {
        PodRequest {
            spec: pod.spec.as_ref(),
            requests: resources::pod_requests(pod, false),
            non_zero: resources::pod_requests(pod, true),
        }
    }

    fn tolerations(&self) -> &[Toleration] {
        self.spec
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or(&[])
    }

    /// Runs the filters in kube-scheduler's default order, stopping at the first that
    /// rejects the node, as the framework does.
    pub(crate) fn filter(&self, node: &NodeInfo<'_>) -> Result<(), Rejection> {
        self.node_unschedulable(node.node)?;
        self.taint_toleration(node.node)?;
        self.node_affinity(node.node)?;
        self.fit(node)
    }

    /// NodeUnschedulable: a cordoned node takes only pods tolerating its taint.
    fn node_unschedulable(&self, node: &Node) -> Result<(), Rejection> {
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        let taint = Taint {
            key: TAINT_UNSCHEDULABLE.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        if cordoned && !self.tolerations().iter().any(|t| tolerates(t, &taint)) {
            return Err(Rejection::unresolvable(REASON_UNSCHEDULABLE));
        }
        Ok(())
    }

    /// TaintToleration: the first `NoSchedule` or `NoExecute` taint the pod does not
    /// tolerate keeps it out.
    fn taint_toleration(&self, node: &Node) -> Result<(), Rejection> {
        match first_untolerated(node, self.tolerations()) {
            Some(taint) => Err(Rejection::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or("")
            ))),
            None => Ok(()),
        }
    }

    /// NodeAffinity: the pod's nodeSelector and required node affinity.
    fn node_affinity(&self, node: &Node) -> Result<(), Rejection> {
        if required_node_affinity_matches(self.spec, node) {
            Ok(())
        } else {
            Err(Rejection::unresolvable(REASON_NODE_AFFINITY))
        }
    }

    /// NodeResourcesFit: room for one more pod, then for each resource requested.
    pub(crate) fn fit(&self, node: &NodeInfo<'_>) -> Result<(), Rejection> {
        let mut reasons = Vec::new();
        if node.pods + 1 > node.allocatable.pods {
            reasons.push(REASON_TOO_MANY_PODS.to_string());
        }
        let want = &self.requests;
        if !want.is_zero() {
            let (have, used) = (&node.allocatable, &node.requested);
            let short = |want: i64, have: i64, used: i64| want > 0 && want > have - used;
            if short(want.milli_cpu, have.milli_cpu, used.milli_cpu) {
                reasons.push("Insufficient cpu".into());
            }
            if short(want.memory, have.memory, used.memory) {
                reasons.push("Insufficient memory".into());
            }
            if short(
                want.ephemeral_storage,
                have.ephemeral_storage,
                used.ephemeral_storage,
            ) {
                reasons.push("Insufficient ephemeral-storage".into());
            }
            for (name, amount) in &want.scalars {
                let have = have.scalars.get(name).copied().unwrap_or(0);
                let used = used.scalars.get(name).copied().unwrap_or(0);
                if short(*amount, have, used) {
                    reasons.push(format!("Insufficient {name}"));
                }
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(Rejection {
                reasons,
                resolvable: true,
            })
        }
    }

    /// Whether the pod may preempt at all (`preemptionPolicy: Never` may not).
    pub(crate) fn may_preempt(&self) -> bool {
        self.spec.and_then(|s| s.preemption_policy.as_deref()) != Some("Never")
    }

    /// The node's score: kube-scheduler's default score plugins that look at the node
    /// alone, each scaled to 0..=100 and weighted as the default profile weighs them
    /// (NodeResourcesFit least-allocated 1, NodeResourcesBalancedAllocation 1,
    /// TaintToleration 3, NodeAffinity 2). `normalize` carries the cycle-wide maxima the
    /// last two scale against.
    pub(crate) fn score(&self, node: &NodeInfo<'_>, normalize: &Normalize) -> i64 {
        let least = least_allocated(&self.non_zero, node);
        let balanced = if self.requests.milli_cpu == 0 && self.requests.memory == 0 {
            0
        } else {
            balanced_allocation(&self.requests, node)
        };
        let taints = normalize.taints(self.intolerable_prefer_no_schedule(node.node));
        let affinity = normalize.affinity(self.preferred_affinity(node.node));
        least + balanced + 3 * taints + 2 * affinity
    }

    /// TaintToleration's raw score: `PreferNoSchedule` taints the pod does not tolerate.
    pub(crate) fn intolerable_prefer_no_schedule(&self, node: &Node) -> i64 {
        let tolerations: Vec<&Toleration> = self
            .tolerations()
            .iter()
            .filter(|t| {
                matches!(
                    t.effect.as_deref(),
                    None | Some("") | Some("PreferNoSchedule")
                )
            })
            .collect();
        let count = taints(node)
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule")
            .filter(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
            .count();
        i64::try_from(count).unwrap_or(i64::MAX)
    }

    /// NodeAffinity's raw score: the weights of the preferred terms the node matches.
    pub(crate) fn preferred_affinity(&self, node: &Node) -> i64 {
        self.spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
            .filter(|p| p.weight != 0 && term_matches(&p.preference, node))
            .map(|p| i64::from(p.weight))
            .sum()
    }
}

/// The filters preemption runs again on a node without (some of) its pods: kube's Filter
/// plugins with their PreFilter state updated by `AddPod` and `RemovePod`.
pub(crate) trait NodeFilters {
    /// Runs every filter on the node.
    fn filter(&self, node: &NodeInfo<'_>) -> Result<(), Rejection>;
    /// Counts `pod` on the node again.
    fn add(&mut self, pod: &Pod);
    /// No longer counts `pod` on the node.
    fn remove(&mut self, pod: &Pod);
}

/// DefaultPreemption's `SelectVictimsOnNode` (without PodDisruptionBudgets): with every pod
/// of lower priority gone the pod must pass the filters; then the most important of those
/// are put back one by one while it still passes, and the rest are the victims. The
/// reasons the node is no candidate otherwise: no lower-priority pod, or the filters'
/// reasons with them all gone.
pub(crate) fn victims_on<'p>(
    node: &NodeInfo<'_>,
    on_node: &[&'p Pod],
    preemptor_priority: i32,
    filters: &mut impl NodeFilters,
) -> Result<Vec<&'p Pod>, Vec<String>> {
    let mut rest = NodeInfo::new_with(node.node, node.allocatable.clone());
    let mut lower: Vec<&Pod> = Vec::new();
    for pod in on_node {
        if priority(pod) < preemptor_priority {
            lower.push(pod);
            filters.remove(pod);
        } else {
            rest.add_pod(pod);
        }
    }
    if lower.is_empty() {
        return Err(vec![REASON_NO_VICTIMS.to_string()]);
    }
    filters.filter(&rest).map_err(|r| r.reasons)?;
    // Most important first: higher priority, then started earlier.
    lower.sort_by(|a, b| {
        priority(b)
            .cmp(&priority(a))
            .then_with(|| start_time(a).cmp(&start_time(b)))
    });
    let mut victims = Vec::new();
    for pod in lower {
        rest.add_pod(pod);
        filters.add(pod);
        if filters.filter(&rest).is_err() {
            rest.remove_pod(pod);
            filters.remove(pod);
            victims.push(pod);
        }
    }
    Ok(victims)
}

/// The maxima that TaintToleration and NodeAffinity scale their scores against (kube's
/// `DefaultNormalizeScore`).
#[derive(Debug, Default)]
pub(crate) struct Normalize {
    /// The most intolerable `PreferNoSchedule` taints on any feasible node.
    pub(crate) max_taints: i64,
    /// The largest preferred-affinity weight of any feasible node.
    pub(crate) max_affinity: i64,
}

impl Normalize {
    fn taints(&self, count: i64) -> i64 {
        if self.max_taints == 0 {
            return 100;
        }
        100 - count * 100 / self.max_taints
    }

    fn affinity(&self, weight: i64) -> i64 {
        if self.max_affinity == 0 {
            return weight;
        }
        weight * 100 / self.max_affinity
    }
}

/// LeastAllocated over cpu and memory, weight 1 each: the share left free, 0..=100.
fn least_allocated(pod: &Resources, node: &NodeInfo<'_>) -> i64 {
    let free = |alloc: i64, requested: i64| {
        if alloc == 0 || requested > alloc {
            0
        } else {
            (alloc - requested) * 100 / alloc
        }
    };
    let cpu = free(
        node.allocatable.milli_cpu,
        node.non_zero_requested.milli_cpu + pod.milli_cpu,
    );
    let memory = free(
        node.allocatable.memory,
        node.non_zero_requested.memory + pod.memory,
    );
    (cpu + memory) / 2
}

/// BalancedAllocation over cpu and memory: 100 when both are used in the same proportion,
/// less the standard deviation of the two fractions.
fn balanced_allocation(pod: &Resources, node: &NodeInfo<'_>) -> i64 {
    let fraction = |alloc: i64, requested: i64| {
        if alloc <= 0 {
            return 1.0;
        }
        (requested as f64 / alloc as f64).min(1.0)
    };
    let cpu = fraction(
        node.allocatable.milli_cpu,
        node.requested.milli_cpu + pod.milli_cpu,
    );
    let memory = fraction(node.allocatable.memory, node.requested.memory + pod.memory);
    let std = (cpu - memory).abs() / 2.0;
    ((1.0 - std) * 100.0) as i64
}

/// The first `NoSchedule` or `NoExecute` taint of the node that `tolerations` do not
/// tolerate (kube's `FindMatchingUntoleratedTaint` with `DoNotScheduleTaintsFilterFunc`).
fn first_untolerated<'n>(node: &'n Node, tolerations: &[Toleration]) -> Option<&'n Taint> {
    taints(node)
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// Whether the node has a `NoSchedule` or `NoExecute` taint the pod does not tolerate.
pub(crate) fn has_untolerated_do_not_schedule_taint(pod: &Pod, node: &Node) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[]);
    first_untolerated(node, tolerations).is_some()
}

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

/// A pod's priority (0 when unset, as without a PriorityClass).
pub(crate) fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// When the pod started (unstarted pods last).
fn start_time(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0)
        .or(Some(jiff::Timestamp::MAX))
}

/// The pod's nodeSelector (every label equal) and required node affinity (any term).
pub(crate) fn required_node_affinity_matches(spec: Option<&PodSpec>, node: &Node) -> bool {
    let labels = node_labels(node);
    let selector = spec.and_then(|s| s.node_selector.as_ref());
    if !selector
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        None => true,
        Some(selector) => selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, node)),
    }
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// One node selector term: every expression and field requirement holds; a term with
/// neither matches no node; an invalid requirement fails the term.
fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node_labels(node);
    let name = node.metadata.name.as_deref().unwrap_or("");
    expressions.iter().all(|r| label_requirement(r, labels))
        && fields.iter().all(|r| field_requirement(r, name))
}

fn label_requirement(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    let value = labels.get(&r.key);
    let integer = |v: &str| v.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), [bound]) = (value.and_then(|v| integer(v)), values) else {
                return false;
            };
            let Some(bound) = integer(bound) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// `matchFields` supports only `metadata.name` with `In` or `NotIn` and one value.
fn field_requirement(r: &NodeSelectorRequirement, name: &str) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    if r.key != "metadata.name" || values.len() != 1 {
        return false;
    }
    match r.operator.as_str() {
        "In" => values[0] == name,
        "NotIn" => values[0] != name,
        _ => false,
    }
}

/// kube's histogram of reasons: `"<count> <reason>"` for each reason, sorted as strings,
/// joined by `", "`.
fn histogram<'r>(reasons: impl Iterator<Item = &'r str>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in reasons {
        *counts.entry(reason).or_default() += 1;
    }
    let mut lines: Vec<String> = counts
        .into_iter()
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect();
    lines.sort();
    lines.join(", ")
}

/// kube's `FitError.Error()`: `0/<nodes> nodes are available: <histogram>.` followed by
/// the PostFilter (preemption) message.
pub(crate) fn fit_error(nodes: usize, rejections: &[Rejection], post_filter: &str) -> String {
    fit_error_of(
        nodes,
        rejections
            .iter()
            .flat_map(|r| r.reasons.iter().map(String::as_str)),
        post_filter,
    )
}

fn fit_error_of<'r>(
    nodes: usize,
    reasons: impl Iterator<Item = &'r str>,
    post_filter: &str,
) -> String {
    let mut message = format!("0/{nodes} nodes are available:");
    let reasons = histogram(reasons);
    if !reasons.is_empty() {
        message.push_str(&format!(" {reasons}."));
    }
    if !post_filter.is_empty() {
        message.push_str(&format!(" {post_filter}"));
    }
    message
}

/// kube's `FitError.Error()` when a PreFilter plugin turned the pod down for every node:
/// its message instead of the histogram.
pub(crate) fn fit_error_pre_filter(nodes: usize, message: &str, post_filter: &str) -> String {
    let mut text = format!("0/{nodes} nodes are available: {message}.");
    if !post_filter.is_empty() {
        text.push_str(&format!(" {post_filter}"));
    }
    text
}

/// DefaultPreemption's message when it finds nothing to preempt, itself a `FitError` over
/// every node: nodes turned down for a reason removing pods cannot change are "not
/// helpful"; the others (`tried`) say why no victims were found on them (kube's
/// `No preemption victims found for incoming pod.`, or the filters' reasons when the pod
/// does not fit even without every lower-priority pod). (The reason ends in a period and
/// the histogram adds one: kube-scheduler's message ends in `..`.)
pub(crate) fn preemption_message(nodes: usize, tried: &[Vec<String>]) -> String {
    let not_helpful = nodes.saturating_sub(tried.len());
    let reasons = tried
        .iter()
        .flatten()
        .map(String::as_str)
        .chain(std::iter::repeat_n(
            REASON_PREEMPTION_NOT_HELPFUL,
            not_helpful,
        ));
    format!("preemption: {}", fit_error_of(nodes, reasons, ""))
}

/// DefaultPreemption's message for a pod whose earlier preemption is still under way.
pub(crate) const PREEMPTION_TERMINATING: &str =
    "preemption: not eligible due to a terminating pod on the nominated node.";

/// DefaultPreemption's message for a pod that may not preempt.
pub(crate) const PREEMPTION_NEVER: &str = "preemption: not eligible due to preemptionPolicy=Never.";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(value: serde_json::Value) -> Node {
        let mut base = json!({"metadata": {"name": "n"}, "status": {"allocatable":
            {"cpu": "2", "memory": "4Gi", "pods": "2", "example.com/gpu": "1"}}});
        if let (Some(base), Some(extra)) = (base.as_object_mut(), value.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(base).expect("a node")
    }

    fn pod(cpu: &str, gpu: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": cpu, "example.com/gpu": gpu}}}]}}))
        .expect("a pod")
    }

    #[test]
    fn fit_reports_every_shortage_in_kubes_order() {
        let n = node(json!({}));
        let mut info = NodeInfo::new(&n);
        info.add_pod(&pod("1", "0"));
        info.add_pod(&pod("500m", "0"));
        let incoming = pod("1", "2");
        let rejection = PodRequest::new(&incoming)
            .filter(&info)
            .expect_err("no room");
        assert_eq!(
            rejection.reasons,
            [
                "Too many pods",
                "Insufficient cpu",
                "Insufficient example.com/gpu"
            ]
        );
        assert!(rejection.resolvable);
    }

    #[test]
    fn the_first_untolerated_taint_is_named_and_prefer_no_schedule_is_only_scored() {
        let n = node(json!({"spec": {"taints": [
            {"key": "soft", "effect": "PreferNoSchedule"},
            {"key": "a", "value": "1", "effect": "NoExecute"},
            {"key": "b", "effect": "NoSchedule"},
        ]}}));
        let info = NodeInfo::new(&n);
        let incoming = pod("100m", "0");
        let request = PodRequest::new(&incoming);
        let rejection = request.filter(&info).expect_err("tainted");
        assert_eq!(rejection.reasons, ["node(s) had untolerated taint {a: 1}"]);
        assert!(!rejection.resolvable);
        assert_eq!(request.intolerable_prefer_no_schedule(&n), 1);
    }

    #[test]
    fn an_empty_term_and_a_bad_gt_value_match_nothing() {
        let n = node(json!({"metadata": {"name": "n", "labels": {"gen": "x"}}}));
        assert!(!term_matches(&NodeSelectorTerm::default(), &n));
        let term: NodeSelectorTerm = serde_json::from_value(json!({"matchExpressions": [
            {"key": "gen", "operator": "Gt", "values": ["1"]}]}))
        .expect("a term");
        assert!(!term_matches(&term, &n));
        let fields: NodeSelectorTerm = serde_json::from_value(json!({"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["m"]}]}))
        .expect("a term");
        assert!(term_matches(&fields, &n));
    }

    #[test]
    fn least_allocated_prefers_the_emptier_node() {
        let n = node(json!({}));
        let mut busy = NodeInfo::new(&n);
        busy.add_pod(&pod("1", "0"));
        let empty = NodeInfo::new(&n);
        let incoming = pod("500m", "0");
        let request = PodRequest::new(&incoming);
        let normalize = Normalize::default();
        assert!(request.score(&empty, &normalize) > request.score(&busy, &normalize));
    }
}
