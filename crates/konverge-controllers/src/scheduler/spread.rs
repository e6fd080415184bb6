//! PodTopologySpread (`pkg/scheduler/framework/plugins/podtopologyspread`): a pod's
//! `topologySpreadConstraints`, or kube-scheduler's system defaults for a pod that has none
//! and belongs to a Service, ReplicaSet, ReplicationController or StatefulSet.
//!
//! - **filter** (`DoNotSchedule`): counted once per cycle, the pods matching each
//!   constraint's selector (and `matchLabelKeys`) per domain over the nodes the constraint
//!   takes in (`nodeAffinityPolicy` Honor by default, `nodeTaintsPolicy` Ignore); a node
//!   fails when its domain would hold more than `maxSkew` above the least-loaded domain
//!   (taken as 0 while there are fewer domains than `minDomains`);
//! - **score** (`ScheduleAnyway`, weight 2): kube's weighted count of matching pods per
//!   domain (log-scaled by the number of domains), inverted so the emptiest domain scores
//!   100. The system defaults (`kubernetes.io/hostname` maxSkew 3, `topology.kubernetes.io/zone`
//!   maxSkew 5) spread a Deployment's or StatefulSet's pods without any spec.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Node, Pod, ReplicationController, Service, TopologySpreadConstraint,
};
use konverge_apimachinery::selector::{LabelSelector, SelectorError};
use konverge_runtime::{ObjectKey, Store};

use super::framework::{self, NodeInfo, Rejection};
use super::terms::{self, labels, namespace};

/// The reason for a node whose domain would be too full.
pub(crate) const REASON_SKEW: &str = "node(s) didn't match pod topology spread constraints";
/// The reason for a node without a constraint's topology label.
pub(crate) const REASON_MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
/// `v1.LabelHostname`.
const HOSTNAME: &str = "kubernetes.io/hostname";
/// `v1.LabelTopologyZone`.
const ZONE: &str = "topology.kubernetes.io/zone";

/// The objects the system default constraints take their selector from.
#[derive(Clone)]
pub(crate) struct Owners {
    /// Services (their selectors).
    pub(crate) services: Store<Service>,
    /// ReplicationControllers.
    pub(crate) replication_controllers: Store<ReplicationController>,
    /// ReplicaSets.
    pub(crate) replica_sets: Store<ReplicaSet>,
    /// StatefulSets.
    pub(crate) stateful_sets: Store<StatefulSet>,
}

/// One constraint, parsed (kube's `topologySpreadConstraint`).
#[derive(Debug, Clone)]
pub(crate) struct Constraint {
    max_skew: i64,
    topology_key: String,
    selector: LabelSelector,
    min_domains: i64,
    honor_node_affinity: bool,
    honor_taints: bool,
}

impl Constraint {
    /// Whether the node is one of this constraint's domains for `pod` (kube's
    /// `matchNodeInclusionPolicies`).
    fn includes(&self, pod: &Pod, node: &Node) -> bool {
        if self.honor_node_affinity
            && !framework::required_node_affinity_matches(pod.spec.as_ref(), node)
        {
            return false;
        }
        !(self.honor_taints && framework::has_untolerated_do_not_schedule_taint(pod, node))
    }
}

/// The constraints of `pod` with `action` (`DoNotSchedule` or `ScheduleAnyway`), and
/// whether they are the system defaults; an invalid selector is kube's error message.
fn constraints(
    pod: &Pod,
    action: &str,
    owners: &Owners,
) -> Result<(Vec<Constraint>, bool), String> {
    let spec = pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or(&[]);
    let hard = action == "DoNotSchedule";
    if !spec.is_empty() {
        return from_spec(spec, labels(pod), action)
            .map(|c| (c, false))
            .map_err(|e| {
                let which = if hard { "hard" } else { "soft" };
                format!("obtaining pod's {which} topology spread constraints: {e}")
            });
    }
    let defaults = system_defaults();
    let mut constraints = from_spec(&defaults, labels(pod), action).map_err(|e| {
        let which = if hard { "hard" } else { "soft" };
        format!("setting default {which} topology spread constraints: {e}")
    })?;
    if constraints.is_empty() {
        return Ok((constraints, true));
    }
    let selector = default_selector(pod, owners);
    if selector.is_empty() {
        return Ok((Vec::new(), true));
    }
    for c in &mut constraints {
        c.selector = selector.clone();
    }
    Ok((constraints, true))
}

/// kube-scheduler's `systemDefaultConstraints`.
fn system_defaults() -> Vec<TopologySpreadConstraint> {
    [(HOSTNAME, 3), (ZONE, 5)]
        .into_iter()
        .map(|(key, skew)| TopologySpreadConstraint {
            topology_key: key.to_string(),
            when_unsatisfiable: "ScheduleAnyway".to_string(),
            max_skew: skew,
            ..TopologySpreadConstraint::default()
        })
        .collect()
}

/// kube's `filterTopologySpreadConstraints`: those with `action`, selectors parsed and
/// `matchLabelKeys` merged in.
fn from_spec(
    spec: &[TopologySpreadConstraint],
    pod_labels: &BTreeMap<String, String>,
    action: &str,
) -> Result<Vec<Constraint>, SelectorError> {
    let mut result = Vec::new();
    for c in spec.iter().filter(|c| c.when_unsatisfiable == action) {
        let mut selector = terms::selector(c.label_selector.as_ref())?;
        let keys = c.match_label_keys.as_deref().unwrap_or(&[]);
        let match_labels: BTreeMap<String, String> = keys
            .iter()
            .filter_map(|k| pod_labels.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        if !match_labels.is_empty() {
            // As kube: the pod's values first, then the selector's own requirements (a
            // missing selector, which selects nothing, adds none).
            let mut merged = LabelSelector::from_set(&match_labels);
            if !selector.matches_nothing() {
                for r in selector.requirements() {
                    merged.add(r.clone());
                }
            }
            selector = merged;
        }
        result.push(Constraint {
            max_skew: i64::from(c.max_skew),
            topology_key: c.topology_key.clone(),
            selector,
            min_domains: c.min_domains.map_or(1, i64::from),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    Ok(result)
}

/// kube's `helper.DefaultSelector`: the selectors of the pod's Services merged, plus its
/// controller's (a ReplicationController's labels, a ReplicaSet's or StatefulSet's
/// requirements).
fn default_selector(pod: &Pod, owners: &Owners) -> LabelSelector {
    let ns = namespace(pod);
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    for service in owners.services.list_namespace(ns) {
        let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        if LabelSelector::from_set(selector).matches(labels(pod)) {
            set.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let mut selector = LabelSelector::from_set(&set);
    let Some(owner) = crate::controller_ref::controller_of(&pod.metadata) else {
        return selector;
    };
    let key = ObjectKey::namespaced(ns, owner.name.clone());
    let requirements_of = |s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector| {
        terms::selector(Some(s))
            .ok()
            .filter(|s| !s.matches_nothing())
            .map(|s| s.requirements().to_vec())
            .unwrap_or_default()
    };
    match (owner.api_version.as_str(), owner.kind.as_str()) {
        ("v1", "ReplicationController") => {
            if let Some(rc) = owners.replication_controllers.get(&key) {
                let rc_selector = rc.spec.as_ref().and_then(|s| s.selector.as_ref());
                set.extend(
                    rc_selector
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
                selector = LabelSelector::from_set(&set);
            }
        }
        ("apps/v1", "ReplicaSet") => {
            if let Some(rs) = owners.replica_sets.get(&key) {
                for r in rs
                    .spec
                    .as_ref()
                    .map(|s| requirements_of(&s.selector))
                    .unwrap_or_default()
                {
                    selector.add(r);
                }
            }
        }
        ("apps/v1", "StatefulSet") => {
            if let Some(ss) = owners.stateful_sets.get(&key) {
                for r in ss
                    .spec
                    .as_ref()
                    .map(|s| requirements_of(&s.selector))
                    .unwrap_or_default()
                {
                    selector.add(r);
                }
            }
        }
        _ => {}
    }
    selector
}

/// kube's `nodeLabelsMatchSpreadConstraints`: the node has every constraint's key.
fn has_all_keys(node: &Node, constraints: &[Constraint]) -> bool {
    let labels = node_labels(node);
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// How a cycle counts the pods on a node that a selector matches (kube's
/// `countPodsMatchSelector`: pods of the namespace, not being deleted, matching; none for an
/// empty selector). The scheduler reads counts its cache keeps current; the tests count
/// the node's pods (`scan`).
pub(crate) type Counter<'c> = dyn FnMut(&NodeInfo<'_>, &LabelSelector, &str) -> i64 + 'c;

/// [`Counter`] by looking at every pod on the node.
#[cfg(test)]
pub(crate) fn scan(info: &NodeInfo<'_>, selector: &LabelSelector, ns: &str) -> i64 {
    if selector.is_empty() {
        return 0;
    }
    let n = info
        .pod_list
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && namespace(p) == ns)
        .filter(|p| selector.matches(labels(p)))
        .count();
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The filter's per-cycle state (kube's PreFilter state): matching pods per domain.
#[derive(Debug, Clone)]
pub(crate) struct SpreadFilter<'a> {
    pod: &'a Pod,
    constraints: Vec<Constraint>,
    /// Whether the pod itself matches each constraint's selector.
    self_match: Vec<bool>,
    /// Per constraint: matching pods per domain (every domain a node offers, even empty).
    counts: Vec<HashMap<&'a str, i64>>,
    /// Per constraint: the global minimum the skew is measured against.
    minimum: Vec<i64>,
}

/// PreFilter: `None` when the pod has no `DoNotSchedule` constraint (kube's Skip), or
/// kube's error for an invalid selector.
pub(crate) fn pre_filter<'a>(
    pod: &'a Pod,
    owners: &Owners,
    nodes: &[NodeInfo<'a>],
    count: &mut Counter<'_>,
) -> Result<Option<SpreadFilter<'a>>, String> {
    let (constraints, _) = constraints(pod, "DoNotSchedule", owners)
        .map_err(|e| format!("get constraints from pod: {e}"))?;
    if constraints.is_empty() {
        return Ok(None);
    }
    let ns = namespace(pod);
    let mut counts: Vec<HashMap<&'a str, i64>> = vec![HashMap::new(); constraints.len()];
    for info in nodes {
        let node = info.node;
        if !has_all_keys(node, &constraints) {
            continue;
        }
        let labels = node_labels(node);
        for (i, c) in constraints.iter().enumerate() {
            if !c.includes(pod, node) {
                continue;
            }
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            *counts[i].entry(value.as_str()).or_default() += count(info, &c.selector, ns);
        }
    }
    let self_match = constraints
        .iter()
        .map(|c| c.selector.matches(labels(pod)))
        .collect();
    let mut filter = SpreadFilter {
        pod,
        minimum: Vec::new(),
        constraints,
        self_match,
        counts,
    };
    filter.update_minimum();
    Ok(Some(filter))
}

impl<'a> SpreadFilter<'a> {
    fn update_minimum(&mut self) {
        self.minimum = self
            .constraints
            .iter()
            .zip(&self.counts)
            .map(|(c, counts)| {
                let domains = i64::try_from(counts.len()).unwrap_or(i64::MAX);
                if domains < c.min_domains {
                    0
                } else {
                    counts
                        .values()
                        .copied()
                        .min()
                        .unwrap_or(i64::from(i32::MAX))
                }
            })
            .collect();
    }

    /// Filter: every constraint's domain for this node stays within `maxSkew`.
    pub(crate) fn filter(&self, node: &Node) -> Result<(), Rejection> {
        let labels = node_labels(node);
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                return Err(Rejection {
                    reasons: vec![REASON_MISSING_LABEL.to_string()],
                    resolvable: false,
                });
            };
            let matching = self.counts[i].get(value.as_str()).copied().unwrap_or(0);
            let skew = matching + i64::from(self.self_match[i]) - self.minimum[i];
            if skew > c.max_skew {
                return Err(Rejection {
                    reasons: vec![REASON_SKEW.to_string()],
                    resolvable: true,
                });
            }
        }
        Ok(())
    }

    /// Counts `pod` on `node` (`delta` 1) or no longer (`delta` -1), as preemption tries
    /// nodes without their victims (kube's `AddPod`/`RemovePod`).
    pub(crate) fn update(&mut self, pod: &Pod, node: &'a Node, delta: i64) {
        if namespace(pod) != namespace(self.pod) || !has_all_keys(node, &self.constraints) {
            return;
        }
        let labels = node_labels(node);
        for (i, c) in self.constraints.iter().enumerate() {
            if !c.selector.matches(terms::labels(pod)) || !c.includes(self.pod, node) {
                continue;
            }
            if let Some(value) = labels.get(&c.topology_key) {
                *self.counts[i].entry(value.as_str()).or_default() += delta;
            }
        }
        self.update_minimum();
    }
}

/// The score's per-cycle state (kube's PreScore state).
#[derive(Debug)]
pub(crate) struct SpreadScore<'a> {
    constraints: Vec<Constraint>,
    /// Per distinct selector: the matching pods on each node, by node name (the system
    /// defaults' two constraints share one selector, counted once).
    matching: Vec<HashMap<&'a str, i64>>,
    /// Per constraint: its selector's entry in `matching`.
    matching_of: Vec<usize>,
    /// Feasible nodes lacking a constraint's key (scored 0).
    ignored: HashSet<&'a str>,
    /// Per constraint (but hostname ones, counted per node): matching pods per domain of
    /// the feasible nodes.
    counts: Vec<HashMap<&'a str, i64>>,
    /// Per constraint: how much a matching pod weighs (more domains, more weight).
    weights: Vec<f64>,
}

/// PreScore over the feasible nodes: `None` when the pod has no `ScheduleAnyway`
/// constraint and no system default applies (kube's Skip).
pub(crate) fn pre_score<'a>(
    pod: &'a Pod,
    owners: &Owners,
    nodes: &[NodeInfo<'a>],
    feasible: &[&NodeInfo<'a>],
    count: &mut Counter<'_>,
) -> Result<Option<SpreadScore<'a>>, String> {
    let (constraints, system_defaulted) = constraints(pod, "ScheduleAnyway", owners)
        .map_err(|e| format!("calculating preScoreState: {e}"))?;
    if constraints.is_empty() || nodes.is_empty() {
        return Ok(None);
    }
    // Only the pod's own constraints require every key: nodes without a zone still get
    // hostname spreading from the defaults.
    let require_all = !system_defaulted;
    let mut ignored = HashSet::new();
    let mut counts: Vec<HashMap<&'a str, i64>> = vec![HashMap::new(); constraints.len()];
    let mut sizes = vec![0usize; constraints.len()];
    // Nodes without a key share the domain "" with nodes whose value is "": only then is
    // it worth counting (the score reads counts only for nodes with the key).
    let mut empty_value = vec![false; constraints.len()];
    for info in feasible {
        if require_all && !has_all_keys(info.node, &constraints) {
            ignored.insert(info.node.metadata.name.as_deref().unwrap_or(""));
            continue;
        }
        let labels = node_labels(info.node);
        for (i, c) in constraints.iter().enumerate() {
            if c.topology_key == HOSTNAME {
                continue;
            }
            let value = labels.get(&c.topology_key).map_or("", String::as_str);
            empty_value[i] |= labels.get(&c.topology_key).is_some_and(String::is_empty);
            if !counts[i].contains_key(value) {
                counts[i].insert(value, 0);
                sizes[i] += 1;
            }
        }
    }
    let weights = constraints
        .iter()
        .zip(&sizes)
        .map(|(c, size)| {
            let size = if c.topology_key == HOSTNAME {
                feasible.len() - ignored.len()
            } else {
                *size
            };
            (size as f64 + 2.0).ln()
        })
        .collect();
    let ns = namespace(pod);
    let mut selectors: Vec<&LabelSelector> = Vec::new();
    let matching_of: Vec<usize> = constraints
        .iter()
        .map(|c| match selectors.iter().position(|s| **s == c.selector) {
            Some(i) => i,
            None => {
                selectors.push(&c.selector);
                selectors.len() - 1
            }
        })
        .collect();
    let matching: Vec<HashMap<&'a str, i64>> = selectors
        .iter()
        .map(|selector| {
            nodes
                .iter()
                .map(|info| {
                    let name = info.node.metadata.name.as_deref().unwrap_or("");
                    (name, count(info, selector, ns))
                })
                .collect()
        })
        .collect();
    for info in nodes {
        if require_all && !has_all_keys(info.node, &constraints) {
            continue;
        }
        let name = info.node.metadata.name.as_deref().unwrap_or("");
        let labels = node_labels(info.node);
        for (i, c) in constraints.iter().enumerate() {
            let value = match labels.get(&c.topology_key) {
                Some(value) => value.as_str(),
                None if empty_value[i] => "",
                None => continue,
            };
            if !c.includes(pod, info.node) {
                continue;
            }
            if let Some(count) = counts[i].get_mut(value) {
                *count += matching[matching_of[i]].get(name).copied().unwrap_or(0);
            }
        }
    }
    Ok(Some(SpreadScore {
        constraints,
        matching,
        matching_of,
        ignored,
        counts,
        weights,
    }))
}

impl SpreadScore<'_> {
    /// Score: the weighted matching pods of the node's domains (lower is better until
    /// normalized).
    pub(crate) fn score(&self, info: &NodeInfo<'_>) -> i64 {
        if self.ignored.contains(info.name.as_str()) {
            return 0;
        }
        let labels = node_labels(info.node);
        let mut score = 0.0;
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == HOSTNAME {
                self.matching[self.matching_of[i]]
                    .get(info.name.as_str())
                    .copied()
                    .unwrap_or(0)
            } else {
                self.counts[i].get(value.as_str()).copied().unwrap_or(0)
            };
            score += count as f64 * self.weights[i] + (c.max_skew - 1) as f64;
        }
        score.round() as i64
    }

    /// NormalizeScore: the fewest matching pods scores 100, ignored nodes 0.
    pub(crate) fn normalize(&self, nodes: &[&NodeInfo<'_>], scores: &mut [i64]) {
        let scored = || {
            nodes
                .iter()
                .zip(scores.iter())
                .filter(|(n, _)| !self.ignored.contains(n.name.as_str()))
                .map(|(_, s)| *s)
        };
        let min = scored().min().unwrap_or(i64::MAX);
        let max = scored().max().unwrap_or(0).max(0);
        for (node, score) in nodes.iter().zip(scores.iter_mut()) {
            *score = if self.ignored.contains(node.name.as_str()) {
                0
            } else if max == 0 {
                framework::MAX_NODE_SCORE
            } else {
                framework::MAX_NODE_SCORE * (max + min - *score) / max
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a pod")
    }

    #[test]
    fn match_label_keys_add_the_pods_values_before_the_selector() {
        let spec: Vec<TopologySpreadConstraint> = serde_json::from_value(json!([
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "web"}},
             "matchLabelKeys": ["pod-template-hash", "absent"]},
            {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
        ]))
        .expect("constraints");
        let labels = BTreeMap::from([
            ("app".to_string(), "web".to_string()),
            ("pod-template-hash".to_string(), "abc".to_string()),
        ]);
        let hard = from_spec(&spec, &labels, "DoNotSchedule").expect("valid");
        assert_eq!(hard.len(), 1);
        assert_eq!(
            hard[0].selector.to_string(),
            "app=web,pod-template-hash=abc"
        );
        assert_eq!(hard[0].min_domains, 1);
        assert!(hard[0].honor_node_affinity && !hard[0].honor_taints);
        let soft = from_spec(&spec, &labels, "ScheduleAnyway").expect("valid");
        // No selector: it selects nothing.
        assert!(soft[0].selector.matches_nothing());
    }

    #[test]
    fn an_invalid_selector_is_kubes_error() {
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}}]}}));
        let spec = p
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref());
        let error =
            from_spec(spec.unwrap_or(&[]), labels(&p), "DoNotSchedule").expect_err("invalid");
        assert_eq!(
            error.to_string(),
            "\"Equals\" is not a valid label selector operator"
        );
    }

    fn node(name: &str, zone: Option<&str>) -> Node {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if let Some(zone) = zone {
            labels[ZONE] = json!(zone);
        }
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
            .expect("a node")
    }

    fn store<K: kube::Resource + Clone>(objects: Vec<K>) -> Store<K> {
        let mut writer = konverge_runtime::cache::Writer::new(Vec::new());
        for o in objects {
            writer.apply(konverge_runtime::watcher::Event::Apply(o));
        }
        writer.store()
    }

    fn owners(replica_sets: Vec<ReplicaSet>, services: Vec<Service>) -> Owners {
        Owners {
            services: store(services),
            replication_controllers: store(Vec::new()),
            replica_sets: store(replica_sets),
            stateful_sets: store(Vec::new()),
        }
    }

    fn spread_pod(name: &str, constraint: serde_json::Value) -> Pod {
        pod(
            json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "s"}},
            "spec": {"containers": [], "topologySpreadConstraints": [constraint]}}),
        )
    }

    #[test]
    fn skew_min_domains_and_missing_labels_decide_per_node() {
        let nodes = [
            node("a", Some("z1")),
            node("b", Some("z1")),
            node("c", Some("z2")),
            node("d", None),
        ];
        let placed = spread_pod("placed", json!({}));
        let mut infos: Vec<NodeInfo<'_>> = nodes.iter().map(NodeInfo::new).collect();
        infos[0].pod_list.push(&placed);
        let constraint = json!({"maxSkew": 1, "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "s"}}});
        let incoming = spread_pod("new", constraint.clone());
        let owners = owners(Vec::new(), Vec::new());
        let mut filter = pre_filter(&incoming, &owners, &infos, &mut scan)
            .expect("valid")
            .expect("a constraint");
        let verdicts: Vec<Result<(), Rejection>> = nodes.iter().map(|n| filter.filter(n)).collect();
        let skew = Err(Rejection {
            reasons: vec![REASON_SKEW.to_string()],
            resolvable: true,
        });
        let missing = Err(Rejection {
            reasons: vec![REASON_MISSING_LABEL.to_string()],
            resolvable: false,
        });
        assert_eq!(verdicts, vec![skew.clone(), skew.clone(), Ok(()), missing]);
        // Without the placed pod (preemption's dry run) zone-1 is fine again.
        filter.update(&placed, &nodes[0], -1);
        assert_eq!(filter.filter(&nodes[0]), Ok(()));
        // Three domains wanted, two exist: the minimum is 0, and zone-2 takes one more.
        let mut with_min = constraint;
        with_min["minDomains"] = json!(3);
        let incoming = spread_pod("new", with_min);
        let filter = pre_filter(&incoming, &owners, &infos, &mut scan)
            .expect("valid")
            .expect("a constraint");
        assert_eq!(filter.filter(&nodes[0]), skew);
        assert_eq!(filter.filter(&nodes[2]), Ok(()));
    }

    #[test]
    fn system_defaults_select_by_services_and_the_replica_set() {
        let rs: ReplicaSet = serde_json::from_value(
            json!({"metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web", "pod-template-hash": "1"}},
                     "template": {}}}),
        )
        .expect("a ReplicaSet");
        let service: Service =
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"tier": "front"}}}))
            .expect("a Service");
        let other: Service =
            serde_json::from_value(json!({"metadata": {"name": "db", "namespace": "default"},
            "spec": {"selector": {"app": "db"}}}))
            .expect("a Service");
        let owners = owners(vec![rs], vec![service, other]);
        let p = pod(
            json!({"metadata": {"name": "web-1-x", "namespace": "default",
            "labels": {"app": "web", "pod-template-hash": "1", "tier": "front"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                                 "uid": "u", "controller": true}]},
            "spec": {"containers": []}}),
        );
        let (constraints, defaulted) = constraints(&p, "ScheduleAnyway", &owners).expect("valid");
        assert!(defaulted);
        let keys: Vec<(&str, i64)> = constraints
            .iter()
            .map(|c| (c.topology_key.as_str(), c.max_skew))
            .collect();
        assert_eq!(keys, vec![(HOSTNAME, 3), (ZONE, 5)]);
        assert_eq!(
            constraints[0].selector.to_string(),
            "app=web,pod-template-hash=1,tier=front"
        );
        // Nothing hard by default, and a pod of no controller nor Service gets nothing.
        assert!(constraints_empty(&p, "DoNotSchedule", &owners));
        let bare = pod(json!({"metadata": {"name": "bare", "namespace": "default",
            "labels": {"app": "web"}}, "spec": {"containers": []}}));
        assert!(constraints_empty(&bare, "ScheduleAnyway", &owners));
    }

    fn constraints_empty(p: &Pod, action: &str, owners: &Owners) -> bool {
        constraints(p, action, owners).expect("valid").0.is_empty()
    }

    #[test]
    fn the_score_favours_the_emptier_domain_and_ignored_nodes_get_zero() {
        let score = SpreadScore {
            constraints: Vec::new(),
            matching: Vec::new(),
            matching_of: Vec::new(),
            ignored: HashSet::from(["c"]),
            counts: Vec::new(),
            weights: Vec::new(),
        };
        let nodes: Vec<Node> = ["a", "b", "c"]
            .iter()
            .map(|n| serde_json::from_value(json!({"metadata": {"name": n}})).expect("a node"))
            .collect();
        let infos: Vec<NodeInfo<'_>> = nodes.iter().map(NodeInfo::new).collect();
        let refs: Vec<&NodeInfo<'_>> = infos.iter().collect();
        let mut scores = vec![2, 6, 0];
        score.normalize(&refs, &mut scores);
        // 100 * (6 + 2 - s) / 6
        assert_eq!(scores, vec![100, 33, 0]);
    }
}
