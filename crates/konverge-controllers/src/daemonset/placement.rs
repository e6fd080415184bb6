//! Which nodes a DaemonSet's pods belong on: kcm's `NodeShouldRunDaemonPod` and the
//! scheduler predicates it borrows (node name, node selector, required node affinity, taints
//! against tolerations), the tolerations kcm gives every daemon pod, and the node affinity
//! that pins a daemon pod to its node.

use crate::pods::tolerates;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, Taint, Toleration,
};

/// The field a daemon pod's node affinity names its node by (`metav1.ObjectNameField`).
pub const NODE_NAME_FIELD: &str = "metadata.name";

const NO_SCHEDULE: &str = "NoSchedule";
const NO_EXECUTE: &str = "NoExecute";

/// What a node means to a DaemonSet (kcm's `NodeShouldRunDaemonPod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fit {
    /// A daemon pod should be created on the node if it has none.
    pub should_run: bool,
    /// A daemon pod already on the node may stay (it tolerates every NoExecute taint).
    pub should_continue_running: bool,
}

/// Whether `ds` should run (and keep running) a pod on `node`: the template's `nodeName`, if
/// any, names the node; its node selector and required node affinity match the node; and its
/// tolerations, with those kcm adds, tolerate the node's NoSchedule and NoExecute taints. A
/// node with only untolerated NoSchedule taints keeps the pods it has.
pub fn fit(node: &Node, ds: &DaemonSet) -> Fit {
    let none = Fit {
        should_run: false,
        should_continue_running: false,
    };
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let mut spec = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default();
    if spec
        .node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty() && n != node_name)
    {
        return none;
    }
    spec.node_name = Some(node_name.to_string());
    add_daemon_tolerations(&mut spec);
    if !node_selector_matches(&spec, node) || !required_affinity_matches(&spec, node) {
        return none;
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let untolerated = |effects: &[&str]| {
        untolerated_taint(taints, tolerations, |t| {
            effects.contains(&t.effect.as_str())
        })
    };
    if untolerated(&[NO_SCHEDULE, NO_EXECUTE]) {
        return Fit {
            should_run: false,
            should_continue_running: !untolerated(&[NO_EXECUTE]),
        };
    }
    Fit {
        should_run: true,
        should_continue_running: true,
    }
}

/// The tolerations kcm gives every daemon pod (kcm's `AddOrUpdateDaemonPodTolerations`), so
/// that node problems neither evict nor keep out a daemon: not-ready and unreachable
/// (NoExecute, forever), disk, memory and PID pressure and unschedulable (NoSchedule), and
/// network-unavailable (NoSchedule) for host-network pods. Each replaces a toleration of the
/// same key, operator, value and effect.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", NO_EXECUTE),
        ("node.kubernetes.io/unreachable", NO_EXECUTE),
        ("node.kubernetes.io/disk-pressure", NO_SCHEDULE),
        ("node.kubernetes.io/memory-pressure", NO_SCHEDULE),
        ("node.kubernetes.io/pid-pressure", NO_SCHEDULE),
        ("node.kubernetes.io/unschedulable", NO_SCHEDULE),
    ];
    if spec.host_network == Some(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", NO_SCHEDULE));
    }
    for (key, effect) in wanted {
        add_or_update_toleration(
            spec,
            Toleration {
                key: Some(key.to_string()),
                operator: Some("Exists".to_string()),
                effect: Some(effect.to_string()),
                ..Toleration::default()
            },
        );
    }
}

/// Adds `toleration`, replacing one with the same key, operator, value and effect (kcm's
/// `AddOrUpdateTolerationInPodSpec`).
fn add_or_update_toleration(spec: &mut PodSpec, toleration: Toleration) {
    let same = |t: &Toleration| {
        let s = |v: &Option<String>| v.as_deref().unwrap_or_default().to_string();
        s(&t.key) == s(&toleration.key)
            && s(&t.operator) == s(&toleration.operator)
            && s(&t.value) == s(&toleration.value)
            && s(&t.effect) == s(&toleration.effect)
    };
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    match tolerations.iter_mut().find(|t| same(t)) {
        Some(existing) => *existing = toleration,
        None => tolerations.push(toleration),
    }
}

/// Whether some taint `filter` selects is tolerated by none of `tolerations` (the
/// scheduler's `FindMatchingUntoleratedTaint`).
fn untolerated_taint(
    taints: &[Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> bool {
    taints
        .iter()
        .filter(|t| filter(t))
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// Every entry of the pod's `nodeSelector` is one of the node's labels.
fn node_selector_matches(spec: &PodSpec, node: &Node) -> bool {
    let labels = node_labels(node);
    spec.node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// The pod's required node affinity, if any, selects the node: one of its terms matches.
/// A term with no requirements, or one that does not parse, matches no node (the
/// scheduler's `nodeaffinity.RequiredNodeAffinity`; kcm ignores the parse errors).
fn required_affinity_matches(spec: &PodSpec, node: &Node) -> bool {
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    required
        .node_selector_terms
        .iter()
        .any(|term| term_matches(term, node) == Some(true))
}

/// Whether `term` selects `node`; `None` when it selects nothing or does not parse.
fn term_matches(term: &NodeSelectorTerm, node: &Node) -> Option<bool> {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return None;
    }
    let labels = node_labels(node);
    let mut matched = true;
    for requirement in expressions {
        matched &= label_requirement_matches(requirement, labels)?;
    }
    let name = node.metadata.name.as_deref().unwrap_or_default();
    for requirement in fields {
        matched &= field_requirement_matches(requirement, name)?;
    }
    Some(matched)
}

/// A label requirement against the node's labels; `None` when it is malformed.
fn label_requirement_matches(
    requirement: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = requirement.values.as_deref().unwrap_or_default();
    let value = labels.get(&requirement.key);
    let number = |v: &str| v.parse::<i64>().ok();
    match requirement.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => None,
        "In" => Some(value.is_some_and(|v| values.contains(v))),
        "NotIn" => Some(!value.is_some_and(|v| values.contains(v))),
        "Exists" | "DoesNotExist" if !values.is_empty() => None,
        "Exists" => Some(value.is_some()),
        "DoesNotExist" => Some(value.is_none()),
        "Gt" | "Lt" => {
            let [bound] = values else { return None };
            let bound = number(bound)?;
            let Some(actual) = value.and_then(|v| number(v)) else {
                return Some(false);
            };
            Some(if requirement.operator == "Gt" {
                actual > bound
            } else {
                actual < bound
            })
        }
        _ => None,
    }
}

/// A field requirement: only `metadata.name` with `In` or `NotIn` (one value) is allowed.
fn field_requirement_matches(requirement: &NodeSelectorRequirement, name: &str) -> Option<bool> {
    let values = requirement.values.as_deref().unwrap_or_default();
    if requirement.key != NODE_NAME_FIELD || values.len() != 1 {
        return None;
    }
    match requirement.operator.as_str() {
        "In" => Some(values[0] == name),
        "NotIn" => Some(values[0] != name),
        _ => None,
    }
}

/// `affinity` with its required node affinity replaced by one selecting only `node` by name
/// (kcm's `ReplaceDaemonSetPodNodeNameNodeAffinity`): the scheduler then binds the pod there.
/// Preferred terms and pod (anti-)affinity are kept.
pub fn pin_to_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: NODE_NAME_FIELD.to_string(),
            operator: "In".to_string(),
            values: Some(vec![node.to_string()]),
        }]),
        ..NodeSelectorTerm::default()
    };
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
    affinity
}

/// The node a daemon pod is for (kcm's `GetTargetNodeName`): its `nodeName` once scheduled,
/// before that the one node its required affinity names by `metadata.name`.
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(name) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(name.to_string());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|r| r.key == NODE_NAME_FIELD && r.operator == "In")
        .and_then(|r| match r.values.as_deref() {
            Some([only]) => Some(only.clone()),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).expect("a node")
    }

    fn daemon_set(spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "ds", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": spec},
            }
        }))
        .expect("a daemon set")
    }

    fn containers() -> serde_json::Value {
        json!([{"name": "c", "image": "i"}])
    }

    #[test]
    fn taints_keep_out_new_pods_and_no_execute_evicts() {
        let ds = daemon_set(json!({"containers": containers()}));
        let plain = node(json!({"metadata": {"name": "a"}}));
        assert!(fit(&plain, &ds).should_run);
        let no_schedule = node(json!({"metadata": {"name": "a"},
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}));
        assert_eq!(
            fit(&no_schedule, &ds),
            Fit {
                should_run: false,
                should_continue_running: true
            }
        );
        let no_execute = node(json!({"metadata": {"name": "a"},
            "spec": {"taints": [{"key": "gpu", "value": "x", "effect": "NoExecute"}]}}));
        assert_eq!(
            fit(&no_execute, &ds),
            Fit {
                should_run: false,
                should_continue_running: false
            }
        );
        // kcm's own tolerations cover unschedulable and not-ready nodes.
        let cordoned = node(json!({"metadata": {"name": "a"}, "spec": {"taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}}));
        assert!(fit(&cordoned, &ds).should_run);
        let tolerant = daemon_set(json!({"containers": containers(),
            "tolerations": [{"key": "gpu", "operator": "Equal", "value": "x"}]}));
        assert!(fit(&no_execute, &tolerant).should_run);
    }

    #[test]
    fn selectors_affinity_and_node_name_pick_nodes() {
        let gpu = node(json!({"metadata": {"name": "a", "labels": {"gpu": "true", "cores": "8"}}}));
        let cpu = node(json!({"metadata": {"name": "b", "labels": {"cores": "2"}}}));
        let selected =
            daemon_set(json!({"containers": containers(), "nodeSelector": {"gpu": "true"}}));
        assert!(fit(&gpu, &selected).should_run);
        assert!(!fit(&cpu, &selected).should_continue_running);
        let big = daemon_set(
            json!({"containers": containers(), "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}]}}}}),
        );
        assert!(fit(&gpu, &big).should_run);
        assert!(!fit(&cpu, &big).should_run);
        let named = daemon_set(json!({"containers": containers(), "nodeName": "b"}));
        assert!(!fit(&gpu, &named).should_run);
        assert!(fit(&cpu, &named).should_run);
        let broken = daemon_set(
            json!({"containers": containers(), "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "cores", "operator": "In"}]}]}}}}),
        );
        assert!(!fit(&gpu, &broken).should_run);
    }

    #[test]
    fn daemon_pods_are_pinned_by_name_and_found_again() {
        let affinity = pin_to_node(None, "node-1");
        let pod = Pod {
            spec: Some(PodSpec {
                affinity: Some(affinity),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        assert_eq!(target_node(&pod).as_deref(), Some("node-1"));
        let mut spec = PodSpec {
            host_network: Some(true),
            ..PodSpec::default()
        };
        add_daemon_tolerations(&mut spec);
        add_daemon_tolerations(&mut spec);
        assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(7));
    }
}
