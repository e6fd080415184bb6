//! InterPodAffinity (`pkg/scheduler/framework/plugins/interpodaffinity`): pod affinity and
//! anti-affinity, the incoming pod's and the placed pods'.
//!
//! - **filter**: counted once per cycle per topology domain (a node label key and value):
//!   the placed pods matching every required affinity term of the incoming pod, those
//!   matching each of its required anti-affinity terms, and the placed pods whose required
//!   anti-affinity terms match the incoming pod. A node fails when a required affinity
//!   term's domain holds no match (`node(s) didn't match pod affinity rules`, unless no pod
//!   at all matches and the pod matches its own terms: the first of a self-affine group),
//!   when an anti-affinity term's domain holds a match (`node(s) didn't match pod
//!   anti-affinity rules`), or when it is in a domain a placed pod's anti-affinity keeps the
//!   pod out of (`node(s) didn't satisfy existing pods anti-affinity rules`);
//! - **score** (weight 2): per domain, the weights of the incoming pod's preferred terms
//!   the placed pods match (anti-affinity subtracting), and of the placed pods' preferred
//!   terms the incoming pod matches, plus 1 (kube's `hardPodAffinityWeight`) for each
//!   placed pod's required affinity term it matches; scaled min to max over 0..=100.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use super::framework::{NodeInfo, Rejection};
use super::terms::{AffinityTerm, PodTerms, WeightedTerm};

/// The reason for a node where a required affinity term finds no pod.
pub(crate) const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// The reason for a node where a required anti-affinity term finds a pod.
pub(crate) const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// The reason for a node a placed pod's anti-affinity keeps the pod off.
pub(crate) const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// kube-scheduler's `hardPodAffinityWeight` default.
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// A topology domain: a node label key and its value.
type Domain<'a> = (&'a str, &'a str);

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// The domain of `node` for `key`, borrowed from the node's labels.
fn domain<'a>(node: &'a Node, key: &str) -> Option<Domain<'a>> {
    node_labels(node)
        .get_key_value(key)
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

/// Adds `delta` to the domain's count, dropping it at zero (kube's maps hold no zeros).
fn bump<'a>(counts: &mut HashMap<Domain<'a>, i64>, domain: Domain<'a>, delta: i64) {
    let count = counts.entry(domain).or_default();
    *count += delta;
    if *count == 0 {
        counts.remove(&domain);
    }
}

/// The placed pods with pod affinity (kube's `PodsWithAffinity`): their node and parsed
/// terms, and the terms by uid.
#[derive(Debug, Default)]
pub(crate) struct Placed<'a> {
    pods: Vec<(&'a Node, &'a Pod, Arc<PodTerms>)>,
    terms: HashMap<&'a str, Arc<PodTerms>>,
}

impl<'a> Placed<'a> {
    /// Records a placed pod with affinity and its terms.
    pub(crate) fn insert(&mut self, node: &'a Node, pod: &'a Pod, terms: Arc<PodTerms>) {
        if let Some(uid) = pod.metadata.uid.as_deref() {
            self.terms.insert(uid, terms.clone());
        }
        self.pods.push((node, pod, terms));
    }

    /// The terms of a placed pod with affinity.
    pub(crate) fn of(&self, pod: &Pod) -> Option<&PodTerms> {
        let uid = pod.metadata.uid.as_deref()?;
        self.terms.get(uid).map(Arc::as_ref)
    }

    fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// The incoming pod's parsed terms (namespace selectors merged into namespaces) and its
/// namespace's labels, shared by the filter and the score.
#[derive(Debug)]
pub(crate) struct Incoming<'a> {
    /// The pod.
    pub(crate) pod: &'a Pod,
    /// Its terms.
    pub(crate) terms: PodTerms,
    /// Its namespace's labels (for the placed pods' namespace selectors).
    pub(crate) namespace_labels: BTreeMap<String, String>,
}

/// The filter's per-cycle state (kube's PreFilter state).
#[derive(Debug, Clone)]
pub(crate) struct AffinityFilter<'a> {
    /// Domains where placed pods match all the required affinity terms.
    affinity: HashMap<Domain<'a>, i64>,
    /// Domains where placed pods match a required anti-affinity term.
    anti: HashMap<Domain<'a>, i64>,
    /// Domains where placed pods' required anti-affinity matches the incoming pod.
    existing_anti: HashMap<Domain<'a>, i64>,
}

/// PreFilter: `None` when neither the pod nor any placed pod has required terms that
/// concern it (kube's Skip).
pub(crate) fn pre_filter<'a>(
    incoming: &Incoming<'a>,
    nodes: &[NodeInfo<'a>],
    placed: &Placed<'a>,
) -> Option<AffinityFilter<'a>> {
    let mut filter = AffinityFilter {
        affinity: HashMap::new(),
        anti: HashMap::new(),
        existing_anti: HashMap::new(),
    };
    let terms = &incoming.terms;
    let own = !terms.required_affinity.is_empty() || !terms.required_anti.is_empty();
    if !own && placed.is_empty() {
        return None;
    }
    for (node, _, theirs) in &placed.pods {
        filter.count_existing(incoming, theirs, node, 1);
    }
    if own {
        for info in nodes {
            for pod in &info.pod_list {
                filter.count_own(terms, pod, info.node, 1);
            }
        }
    }
    if filter.existing_anti.is_empty() && !own {
        return None;
    }
    Some(filter)
}

impl<'a> AffinityFilter<'a> {
    /// A placed pod's required anti-affinity terms that match the incoming pod.
    fn count_existing(
        &mut self,
        incoming: &Incoming<'_>,
        theirs: &PodTerms,
        node: &'a Node,
        delta: i64,
    ) {
        for t in &theirs.required_anti {
            if t.matches(incoming.pod, &incoming.namespace_labels)
                && let Some(d) = domain(node, &t.topology_key)
            {
                bump(&mut self.existing_anti, d, delta);
            }
        }
    }

    /// The incoming pod's required terms that a placed pod matches.
    fn count_own(&mut self, terms: &PodTerms, pod: &Pod, node: &'a Node, delta: i64) {
        if PodTerms::all_match(&terms.required_affinity, pod) {
            for t in &terms.required_affinity {
                if let Some(d) = domain(node, &t.topology_key) {
                    bump(&mut self.affinity, d, delta);
                }
            }
        }
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        for t in &terms.required_anti {
            if t.matches(pod, &EMPTY)
                && let Some(d) = domain(node, &t.topology_key)
            {
                bump(&mut self.anti, d, delta);
            }
        }
    }

    /// Counts `pod` on `node` (`delta` 1) or no longer (`delta` -1), as preemption tries a
    /// node without its victims (kube's `AddPod`/`RemovePod`).
    pub(crate) fn update(
        &mut self,
        incoming: &Incoming<'_>,
        placed: &Placed<'_>,
        pod: &Pod,
        node: &'a Node,
        delta: i64,
    ) {
        if let Some(theirs) = placed.of(pod) {
            self.count_existing(incoming, theirs, node, delta);
        }
        self.count_own(&incoming.terms, pod, node, delta);
    }

    /// Filter: affinity, then anti-affinity, then the placed pods' anti-affinity.
    pub(crate) fn filter(&self, incoming: &Incoming<'_>, node: &Node) -> Result<(), Rejection> {
        if !self.satisfies_affinity(incoming, node) {
            return Err(Rejection {
                reasons: vec![REASON_AFFINITY.to_string()],
                resolvable: false,
            });
        }
        let resolvable = |reason: &str| {
            Err(Rejection {
                reasons: vec![reason.to_string()],
                resolvable: true,
            })
        };
        let blocked = |counts: &HashMap<Domain<'_>, i64>, key: &str, value: &str| {
            counts.get(&(key, value)).is_some_and(|n| *n > 0)
        };
        let labels = node_labels(node);
        if !self.anti.is_empty() {
            for t in &incoming.terms.required_anti {
                if let Some(value) = labels.get(&t.topology_key)
                    && blocked(&self.anti, &t.topology_key, value)
                {
                    return resolvable(REASON_ANTI_AFFINITY);
                }
            }
        }
        if !self.existing_anti.is_empty()
            && labels
                .iter()
                .any(|(k, v)| blocked(&self.existing_anti, k, v))
        {
            return resolvable(REASON_EXISTING_ANTI_AFFINITY);
        }
        Ok(())
    }

    fn satisfies_affinity(&self, incoming: &Incoming<'_>, node: &Node) -> bool {
        let terms = &incoming.terms.required_affinity;
        let labels = node_labels(node);
        let mut pods_exist = true;
        for t in terms {
            let Some(value) = labels.get(&t.topology_key) else {
                // Every topology key must be on the node.
                return false;
            };
            let key = (t.topology_key.as_str(), value.as_str());
            if self.affinity.get(&key).is_none_or(|n| *n <= 0) {
                pods_exist = false;
            }
        }
        // The first pod of a group with affinity to itself: nothing matches anywhere yet,
        // but it matches its own terms.
        pods_exist || (self.affinity.is_empty() && PodTerms::all_match(terms, incoming.pod))
    }
}

/// The score's per-cycle state: weights per topology key and value.
#[derive(Debug)]
pub(crate) struct AffinityScore<'a> {
    by_key: HashMap<&'a str, HashMap<&'a str, i64>>,
}

/// PreScore: `None` when no term of the pod or of a placed pod adds anything (kube's Skip).
pub(crate) fn pre_score<'a>(
    incoming: &Incoming<'a>,
    nodes: &[NodeInfo<'a>],
    placed: &Placed<'a>,
) -> Option<AffinityScore<'a>> {
    let terms = &incoming.terms;
    let own = !terms.preferred_affinity.is_empty() || !terms.preferred_anti.is_empty();
    if !own && placed.is_empty() {
        return None;
    }
    let mut score = AffinityScore {
        by_key: HashMap::new(),
    };
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    if own {
        // The pod's preferred terms against every placed pod.
        for info in nodes.iter().filter(|i| !node_labels(i.node).is_empty()) {
            for pod in &info.pod_list {
                score.add_all(&terms.preferred_affinity, pod, &EMPTY, info.node, 1);
                score.add_all(&terms.preferred_anti, pod, &EMPTY, info.node, -1);
            }
        }
    }
    // The placed pods' terms against the pod.
    let ns = &incoming.namespace_labels;
    for (node, _, theirs) in &placed.pods {
        if node_labels(node).is_empty() {
            continue;
        }
        for t in &theirs.required_affinity {
            score.add(t, HARD_POD_AFFINITY_WEIGHT, incoming.pod, ns, node);
        }
        score.add_all(&theirs.preferred_affinity, incoming.pod, ns, node, 1);
        score.add_all(&theirs.preferred_anti, incoming.pod, ns, node, -1);
    }
    (!score.by_key.is_empty()).then_some(score)
}

impl<'a> AffinityScore<'a> {
    fn add(
        &mut self,
        term: &AffinityTerm,
        weight: i64,
        pod: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        node: &'a Node,
    ) {
        if term.matches(pod, namespace_labels)
            && let Some((key, value)) = domain(node, &term.topology_key)
        {
            *self
                .by_key
                .entry(key)
                .or_default()
                .entry(value)
                .or_default() += weight;
        }
    }

    fn add_all(
        &mut self,
        terms: &[WeightedTerm],
        pod: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        node: &'a Node,
        sign: i64,
    ) {
        for w in terms {
            self.add(&w.term, w.weight * sign, pod, namespace_labels, node);
        }
    }

    /// Score: the sum over the node's domains.
    pub(crate) fn score(&self, node: &Node) -> i64 {
        let labels = node_labels(node);
        self.by_key
            .iter()
            .filter_map(|(key, values)| labels.get(*key).and_then(|v| values.get(v.as_str())))
            .sum()
    }

    /// NormalizeScore: scaled from the lowest (0) to the highest (100).
    pub(crate) fn normalize(scores: &mut [i64]) {
        let min = scores.iter().copied().min().unwrap_or(0);
        let max = scores.iter().copied().max().unwrap_or(0);
        let spread = max - min;
        for score in scores.iter_mut() {
            *score = if spread > 0 {
                (super::framework::MAX_NODE_SCORE as f64 * ((*score - min) as f64 / spread as f64))
                    as i64
            } else {
                0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"kubernetes.io/hostname": name, "zone": zone}}}))
        .expect("a node")
    }

    fn pod(name: &str, app: &str, affinity: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default",
            "uid": name, "labels": {"app": app}},
            "spec": {"containers": [], "affinity": affinity}}))
        .expect("a pod")
    }

    fn required(kind: &str, app: &str, key: &str) -> serde_json::Value {
        json!({kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}})
    }

    fn incoming(pod: &Pod) -> Incoming<'_> {
        Incoming {
            pod,
            terms: PodTerms::parse(pod).0,
            namespace_labels: BTreeMap::new(),
        }
    }

    fn rejected(reason: &str, resolvable: bool) -> Result<(), Rejection> {
        Err(Rejection {
            reasons: vec![reason.to_string()],
            resolvable,
        })
    }

    #[test]
    fn anti_affinity_both_ways_and_the_first_of_a_self_affine_group() {
        let nodes = [node("a", "z1"), node("b", "z1"), node("c", "z2")];
        // On a: a db pod that keeps web pods out of its zone.
        let db = pod("db", "db", required("podAntiAffinity", "web", "zone"));
        let mut infos: Vec<NodeInfo<'_>> = nodes.iter().map(NodeInfo::new).collect();
        infos[0].pod_list.push(&db);
        let mut placed = Placed::default();
        placed.insert(&nodes[0], &db, Arc::new(PodTerms::parse(&db).0));

        let web = pod("web", "web", json!({}));
        let web = incoming(&web);
        let filter = pre_filter(&web, &infos, &placed).expect("the db's terms apply");
        let existing = rejected(REASON_EXISTING_ANTI_AFFINITY, true);
        assert_eq!(filter.filter(&web, &nodes[0]), existing);
        assert_eq!(filter.filter(&web, &nodes[1]), existing);
        assert_eq!(filter.filter(&web, &nodes[2]), Ok(()));
        // Preemption's dry run without the db pod.
        let mut without = filter.clone();
        without.update(&web, &placed, &db, &nodes[0], -1);
        assert_eq!(without.filter(&web, &nodes[1]), Ok(()));

        // A pod avoiding db pods per host: only node a is out.
        let shy = pod(
            "shy",
            "shy",
            required("podAntiAffinity", "db", "kubernetes.io/hostname"),
        );
        let shy = incoming(&shy);
        let filter = pre_filter(&shy, &infos, &placed).expect("own terms");
        assert_eq!(
            filter.filter(&shy, &nodes[0]),
            rejected(REASON_ANTI_AFFINITY, true)
        );
        assert_eq!(filter.filter(&shy, &nodes[1]), Ok(()));

        // Affinity to cache pods: none anywhere. A cache pod itself may go first; another
        // pod may not.
        let first = pod("c0", "cache", required("podAffinity", "cache", "zone"));
        let first = incoming(&first);
        let filter = pre_filter(&first, &infos, &placed).expect("own terms");
        assert_eq!(filter.filter(&first, &nodes[2]), Ok(()));
        let follower = pod("f", "web", required("podAffinity", "cache", "zone"));
        let follower = incoming(&follower);
        let filter = pre_filter(&follower, &infos, &placed).expect("own terms");
        assert_eq!(
            filter.filter(&follower, &nodes[2]),
            rejected(REASON_AFFINITY, false)
        );
        // A node without the topology key never matches affinity.
        let bare: Node =
            serde_json::from_value(json!({"metadata": {"name": "x"}})).expect("a node");
        assert_eq!(
            filter.filter(&follower, &bare),
            rejected(REASON_AFFINITY, false)
        );
    }

    #[test]
    fn preferred_terms_and_placed_pods_required_affinity_score_by_domain() {
        let nodes = [node("a", "z1"), node("b", "z1"), node("c", "z2")];
        let db = pod("db", "db", required("podAffinity", "web", "zone"));
        let mut infos: Vec<NodeInfo<'_>> = nodes.iter().map(NodeInfo::new).collect();
        infos[2].pod_list.push(&db);
        let mut placed = Placed::default();
        placed.insert(&nodes[2], &db, Arc::new(PodTerms::parse(&db).0));
        // Prefers to be away from db pods (weight 5) and the db pod wants web pods in its
        // zone (hardPodAffinityWeight 1): zone z2 nets -4.
        let web = pod(
            "web",
            "web",
            json!({"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "podAffinityTerm":
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}}]}}),
        );
        let web = incoming(&web);
        let score = pre_score(&web, &infos, &placed).expect("terms apply");
        let mut scores: Vec<i64> = nodes.iter().map(|n| score.score(n)).collect();
        assert_eq!(scores, vec![0, 0, -4]);
        AffinityScore::normalize(&mut scores);
        assert_eq!(scores, vec![100, 100, 0]);
    }

    #[test]
    fn normalize_scales_from_min_to_max() {
        let mut scores = vec![-3, 0, 3, 1];
        AffinityScore::normalize(&mut scores);
        assert_eq!(scores, vec![0, 50, 100, 66]);
        let mut flat = vec![5, 5];
        AffinityScore::normalize(&mut flat);
        assert_eq!(flat, vec![0, 0]);
    }

    #[test]
    fn zero_counts_are_dropped() {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": {"zone": "a"}}}))
                .expect("a node");
        let mut counts = HashMap::new();
        let d = domain(&node, "zone").expect("labelled");
        bump(&mut counts, d, 1);
        bump(&mut counts, d, -1);
        assert!(counts.is_empty());
        assert_eq!(domain(&node, "rack"), None);
    }
}
