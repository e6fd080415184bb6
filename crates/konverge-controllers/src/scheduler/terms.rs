//! Pod (anti-)affinity terms and label selectors as kube-scheduler parses them
//! (`framework.AffinityTerm`, `framework.PodInfo`), shared by InterPodAffinity and
//! PodTopologySpread.
//!
//! Parsing is done once per pod: the scheduler's cache keeps the terms of the pods on
//! nodes (`cache::NodeEntry`), since a pod's affinity cannot change after it is created.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as MetaSelector;
use konverge_apimachinery::selector::{LabelSelector, SelectorError};
use konverge_runtime::Store;

/// `metav1.LabelSelectorAsSelector`: `None` selects nothing, an empty selector everything.
pub(crate) fn selector(selector: Option<&MetaSelector>) -> Result<LabelSelector, SelectorError> {
    match selector {
        None => Ok(LabelSelector::nothing()),
        Some(s) => {
            let value = serde_json::to_value(s)
                .map_err(|e| SelectorError::MalformedLabelSelector(e.to_string()))?;
            LabelSelector::from_json(&value)
        }
    }
}

/// A pod's labels (none when it has none).
pub(crate) fn labels(pod: &Pod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// A pod's namespace.
pub(crate) fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("")
}

/// One parsed pod (anti-)affinity term.
#[derive(Debug, Clone)]
pub(crate) struct AffinityTerm {
    /// The namespaces named (or the pod's own when neither these nor a namespace selector
    /// are given).
    pub(crate) namespaces: BTreeSet<String>,
    /// Which pods the term is about.
    pub(crate) selector: LabelSelector,
    /// Which namespaces, by their labels.
    pub(crate) namespace_selector: LabelSelector,
    /// The node label whose values are the domains.
    pub(crate) topology_key: String,
}

impl AffinityTerm {
    fn parse(pod: &Pod, term: &PodAffinityTerm) -> Result<AffinityTerm, SelectorError> {
        let selector = selector(term.label_selector.as_ref())?;
        let named = term.namespaces.as_deref().unwrap_or(&[]);
        let namespaces = if named.is_empty() && term.namespace_selector.is_none() {
            BTreeSet::from([namespace(pod).to_string()])
        } else {
            named.iter().cloned().collect()
        };
        let namespace_selector = self::selector(term.namespace_selector.as_ref())?;
        Ok(AffinityTerm {
            namespaces,
            selector,
            namespace_selector,
            topology_key: term.topology_key.clone(),
        })
    }

    /// Whether `pod` is one the term is about: in one of its namespaces (or a namespace
    /// whose labels `namespace_labels` its namespace selector matches), with matching
    /// labels.
    pub(crate) fn matches(&self, pod: &Pod, namespace_labels: &BTreeMap<String, String>) -> bool {
        (self.namespaces.contains(namespace(pod))
            || self.namespace_selector.matches(namespace_labels))
            && self.selector.matches(labels(pod))
    }

    /// kube's `mergeAffinityTermNamespacesIfNotEmpty`: the namespaces a non-empty namespace
    /// selector picks become named ones, so matching needs no namespace lookup.
    fn merge_namespaces(&mut self, namespaces: &[Arc<Namespace>]) {
        if self.namespace_selector.is_empty() {
            return;
        }
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        for ns in namespaces {
            let labels = ns.metadata.labels.as_ref().unwrap_or(&EMPTY);
            if let Some(name) = &ns.metadata.name
                && self.namespace_selector.matches(labels)
            {
                self.namespaces.insert(name.clone());
            }
        }
        self.namespace_selector = LabelSelector::nothing();
    }
}

/// A preferred term and its weight.
#[derive(Debug, Clone)]
pub(crate) struct WeightedTerm {
    /// The term.
    pub(crate) term: AffinityTerm,
    /// Its weight.
    pub(crate) weight: i64,
}

/// A pod's parsed pod affinity and anti-affinity (kube's `PodInfo` terms).
#[derive(Debug, Clone, Default)]
pub(crate) struct PodTerms {
    /// Required pod affinity.
    pub(crate) required_affinity: Vec<AffinityTerm>,
    /// Required pod anti-affinity.
    pub(crate) required_anti: Vec<AffinityTerm>,
    /// Preferred pod affinity.
    pub(crate) preferred_affinity: Vec<WeightedTerm>,
    /// Preferred pod anti-affinity.
    pub(crate) preferred_anti: Vec<WeightedTerm>,
}

/// Whether the pod has pod affinity or anti-affinity at all (kube's `PodsWithAffinity`).
pub(crate) fn has_pod_affinity(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
}

fn required(terms: Option<&Vec<PodAffinityTerm>>) -> &[PodAffinityTerm] {
    terms.map_or(&[], Vec::as_slice)
}

fn preferred(terms: Option<&Vec<WeightedPodAffinityTerm>>) -> &[WeightedPodAffinityTerm] {
    terms.map_or(&[], Vec::as_slice)
}

/// kube's `getAffinityTerms`: all of a list, or none and the first error.
fn parse_list(pod: &Pod, terms: &[PodAffinityTerm]) -> Result<Vec<AffinityTerm>, SelectorError> {
    terms.iter().map(|t| AffinityTerm::parse(pod, t)).collect()
}

fn parse_weighted(
    pod: &Pod,
    terms: &[WeightedPodAffinityTerm],
) -> Result<Vec<WeightedTerm>, SelectorError> {
    terms
        .iter()
        .map(|t| {
            Ok(WeightedTerm {
                term: AffinityTerm::parse(pod, &t.pod_affinity_term)?,
                weight: i64::from(t.weight),
            })
        })
        .collect()
}

impl PodTerms {
    /// Parses the pod's terms as kube's `NewPodInfo` does: a list with an invalid selector is
    /// left empty and named in the error (kube's aggregate: one message alone, several in
    /// brackets).
    pub(crate) fn parse(pod: &Pod) -> (PodTerms, Option<String>) {
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
        let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let mut errors: Vec<String> = Vec::new();
        let required_affinity = kept(
            &mut errors,
            "requiredAffinityTerms",
            parse_list(
                pod,
                required(pod_affinity.and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })),
            ),
        );
        let required_anti = kept(
            &mut errors,
            "requiredAntiAffinityTerms",
            parse_list(
                pod,
                required(anti.and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })),
            ),
        );
        let preferred_affinity = kept(
            &mut errors,
            "preferredAffinityTerms",
            parse_weighted(
                pod,
                preferred(pod_affinity.and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                })),
            ),
        );
        let preferred_anti = kept(
            &mut errors,
            "preferredAntiAffinityTerms",
            parse_weighted(
                pod,
                preferred(anti.and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                })),
            ),
        );
        let error = match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(format!("[{}]", errors.join(", "))),
        };
        let terms = PodTerms {
            required_affinity,
            required_anti,
            preferred_affinity,
            preferred_anti,
        };
        (terms, error)
    }

    /// The incoming pod's terms with their namespace selectors turned into namespaces.
    pub(crate) fn merge_namespaces(&mut self, namespaces: &Store<Namespace>) {
        let needs = |t: &AffinityTerm| !t.namespace_selector.is_empty();
        let any = self.required_affinity.iter().any(needs)
            || self.required_anti.iter().any(needs)
            || self.preferred_affinity.iter().any(|w| needs(&w.term))
            || self.preferred_anti.iter().any(|w| needs(&w.term));
        if !any {
            return;
        }
        let all = namespaces.list();
        for t in self
            .required_affinity
            .iter_mut()
            .chain(self.required_anti.iter_mut())
        {
            t.merge_namespaces(&all);
        }
        for w in self
            .preferred_affinity
            .iter_mut()
            .chain(self.preferred_anti.iter_mut())
        {
            w.term.merge_namespaces(&all);
        }
    }

    /// Whether `pod` matches every one of `terms` (kube's `podMatchesAllAffinityTerms`; no
    /// terms match nothing).
    pub(crate) fn all_match(terms: &[AffinityTerm], pod: &Pod) -> bool {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        !terms.is_empty() && terms.iter().all(|t| t.matches(pod, &EMPTY))
    }
}

/// The terms a list parsed to, or none, with its error kept once in `errors` (named by the
/// list, as kube names it).
fn kept<T>(errors: &mut Vec<String>, what: &str, result: Result<Vec<T>, SelectorError>) -> Vec<T> {
    result.unwrap_or_else(|e| {
        let message = format!("{what}: {e}");
        if !errors.contains(&message) {
            errors.push(message);
        }
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a pod")
    }

    #[test]
    fn an_invalid_operator_empties_its_list_and_is_named() {
        let p = pod(
            json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {
            "containers": [],
            "affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]},
                     "topologyKey": "kubernetes.io/hostname"}]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}]},
            }}}),
        );
        let (terms, error) = PodTerms::parse(&p);
        assert_eq!(
            error.as_deref(),
            Some("requiredAffinityTerms: \"Equals\" is not a valid label selector operator")
        );
        assert!(terms.required_affinity.is_empty());
        assert_eq!(terms.required_anti.len(), 1);
        assert_eq!(terms.required_anti[0].topology_key, "zone");
        assert!(terms.required_anti[0].namespaces.contains("ns"));
    }

    #[test]
    fn two_invalid_lists_are_bracketed() {
        let bad = json!([{"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
                          "topologyKey": "zone"}]);
        let p = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": bad},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": bad},
            }}}),
        );
        let (_, error) = PodTerms::parse(&p);
        assert_eq!(
            error.as_deref(),
            Some(
                "[requiredAffinityTerms: \"Gt\" is not a valid label selector operator, \
                 requiredAntiAffinityTerms: \"Gt\" is not a valid label selector operator]"
            )
        );
    }

    #[test]
    fn a_term_matches_by_namespace_list_or_selector_and_labels() {
        let owner =
            pod(json!({"metadata": {"name": "o", "namespace": "a"}, "spec": {"containers": []}}));
        let term: PodAffinityTerm = serde_json::from_value(json!({
            "labelSelector": {"matchLabels": {"app": "db"}},
            "namespaceSelector": {"matchLabels": {"team": "x"}},
            "topologyKey": "zone"}))
        .expect("a term");
        let term = AffinityTerm::parse(&owner, &term).expect("valid");
        // A namespace selector without namespaces does not add the pod's own.
        assert!(term.namespaces.is_empty());
        let db = pod(json!({"metadata": {"name": "d", "namespace": "b", "labels": {"app": "db"}}}));
        let team_x = BTreeMap::from([("team".to_string(), "x".to_string())]);
        assert!(term.matches(&db, &team_x));
        assert!(!term.matches(&db, &BTreeMap::new()));
        // A missing label selector selects nothing.
        let none: PodAffinityTerm =
            serde_json::from_value(json!({"topologyKey": "zone"})).expect("a term");
        let none = AffinityTerm::parse(&owner, &none).expect("valid");
        assert!(!none.matches(&db, &team_x));
    }
}
