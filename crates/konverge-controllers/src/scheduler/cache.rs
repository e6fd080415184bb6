//! The scheduler's own view of the cluster (kube-scheduler's `internalcache`): every node
//! with the pods counted on it and what they request, kept current change by change from
//! the shared informers' events rather than rebuilt from the pod list every cycle.
//!
//! - **nodes** by name, each with its Node (absent while pods name a node the cache has not
//!   seen), its pods (bound and assumed), their summed requests, and the ones with pod
//!   affinity (kube's `PodsWithAffinity`, their terms parsed once);
//! - **placements** by pod uid: where each counted pod is, its requests (computed once per
//!   version) and whether it is only *assumed* (chosen by a cycle, its Binding not yet seen):
//!   an assumed pod counts until the cache shows it bound, or its binding fails and it is
//!   forgotten. An unbound version of an assumed pod arriving late changes nothing;
//! - **pending**: the pods waiting for this scheduler, so a node change that may help them
//!   does not walk every pod;
//! - **matching counts**: for each (namespace, label selector) a cycle asked about lately,
//!   the pods on each node that match it and are not being deleted (kube's
//!   `countPodsMatchSelector`, which PodTopologySpread runs over every node's pods each
//!   cycle). The first cycle to ask scans once; every pod placed, changed or removed after
//!   adjusts the counts, so later cycles read them in O(nodes). Selectors no cycle asked
//!   about for a while are dropped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use konverge_apimachinery::selector::LabelSelector;
use konverge_runtime::ObjectKey;
use konverge_runtime::cache::Change;

use super::framework::NodeInfo;
use super::resources::{self, PodRequests, Resources};
use super::terms::{self, PodTerms};

/// How many selectors' counts are kept: more than any cluster's pending pods ask about at
/// once, few enough that each pod change updates them cheaply.
const MAX_SELECTORS: usize = 64;

/// One node as the scheduler counts it.
#[derive(Debug, Default)]
pub(crate) struct NodeEntry {
    node: Option<Arc<Node>>,
    /// The node's allocatable resources, read once per version of the Node.
    allocatable: Resources,
    /// The pods counted here, in the order they came.
    pods: Vec<Arc<Pod>>,
    /// Those of them with pod affinity or anti-affinity, and their terms.
    with_affinity: Vec<(Arc<Pod>, Arc<PodTerms>)>,
    requests: PodRequests,
    count: i64,
}

impl NodeEntry {
    /// The node as one cycle's plugins read it.
    pub(crate) fn info(&self) -> Option<NodeInfo<'_>> {
        let node = self.node.as_deref()?;
        let mut info = NodeInfo::new_with(node, self.allocatable.clone());
        info.requested = self.requests.requests.clone();
        info.non_zero_requested = self.requests.non_zero.clone();
        info.pods = self.count;
        info.pod_list = self.pods.iter().map(Arc::as_ref).collect();
        Some(info)
    }

    /// The Node (none while only pods name it).
    pub(crate) fn node(&self) -> Option<&Node> {
        self.node.as_deref()
    }

    /// The pods here with pod affinity, and their terms.
    pub(crate) fn with_affinity(&self) -> &[(Arc<Pod>, Arc<PodTerms>)] {
        &self.with_affinity
    }

    fn add(&mut self, pod: &Arc<Pod>, requests: &PodRequests, terms: Option<&Arc<PodTerms>>) {
        self.pods.push(pod.clone());
        if let Some(terms) = terms {
            self.with_affinity.push((pod.clone(), terms.clone()));
        }
        self.requests.requests.add(&requests.requests);
        self.requests.non_zero.add(&requests.non_zero);
        self.count += 1;
    }

    fn remove(&mut self, pod: &Arc<Pod>, requests: &PodRequests) {
        if let Some(i) = self.pods.iter().position(|p| Arc::ptr_eq(p, pod)) {
            self.pods.swap_remove(i);
        }
        if let Some(i) = self
            .with_affinity
            .iter()
            .position(|(p, _)| Arc::ptr_eq(p, pod))
        {
            self.with_affinity.swap_remove(i);
        }
        self.requests.requests.subtract(&requests.requests);
        self.requests.non_zero.subtract(&requests.non_zero);
        self.count -= 1;
    }

    fn is_empty(&self) -> bool {
        self.node.is_none() && self.pods.is_empty()
    }
}

/// Where a counted pod is.
#[derive(Debug)]
struct Placement {
    key: ObjectKey,
    node: String,
    pod: Arc<Pod>,
    requests: PodRequests,
    assumed: bool,
}

/// The matching pods per node of one selector, and the cycle that last asked.
#[derive(Debug)]
struct Matching {
    by_node: HashMap<String, i64>,
    asked: u64,
}

/// The matching counts of the selectors cycles asked about.
#[derive(Debug, Default)]
pub(crate) struct MatchCounts {
    by_selector: HashMap<(String, LabelSelector), Matching>,
    cycle: u64,
    /// The selector asked about last in this cycle (asked again for every node).
    last: Option<(String, LabelSelector)>,
}

impl MatchCounts {
    /// The pods of `namespace` on `node` that `selector` matches and that are not being
    /// deleted (kube's `countPodsMatchSelector`); an empty selector counts nothing.
    pub(crate) fn count(
        &mut self,
        nodes: &BTreeMap<String, NodeEntry>,
        namespace: &str,
        selector: &LabelSelector,
        node: &str,
    ) -> i64 {
        if selector.is_empty() {
            return 0;
        }
        let asked_last = matches!(&self.last, Some((ns, s)) if ns == namespace && s == selector);
        if !asked_last {
            let key = (namespace.to_string(), selector.clone());
            if !self.by_selector.contains_key(&key) {
                self.make_room();
                let by_node = scan_nodes(nodes, namespace, selector);
                self.by_selector.insert(
                    key.clone(),
                    Matching {
                        by_node,
                        asked: self.cycle,
                    },
                );
            }
            if let Some(matching) = self.by_selector.get_mut(&key) {
                matching.asked = self.cycle;
            }
            self.last = Some(key);
        }
        self.last
            .as_ref()
            .and_then(|key| self.by_selector.get(key))
            .and_then(|m| m.by_node.get(node))
            .copied()
            .unwrap_or(0)
    }

    /// Drops the selector asked about longest ago when the counts are full.
    fn make_room(&mut self) {
        if self.by_selector.len() < MAX_SELECTORS {
            return;
        }
        if let Some(oldest) = self
            .by_selector
            .iter()
            .min_by_key(|(_, m)| m.asked)
            .map(|(k, _)| k.clone())
        {
            self.by_selector.remove(&oldest);
        }
    }

    /// Counts `pod` on `node` (`delta` 1) or no longer (-1) for every selector it matches.
    fn update(&mut self, pod: &Pod, node: &str, delta: i64) {
        let namespace = terms::namespace(pod);
        for ((ns, selector), matching) in &mut self.by_selector {
            if ns == namespace && counts_for(pod, ns, selector) {
                let n = matching.by_node.entry(node.to_string()).or_default();
                *n += delta;
                if *n == 0 {
                    matching.by_node.remove(node);
                }
            }
        }
    }
}

/// Every node's matching pods, counted from scratch (nodes with none left out).
fn scan_nodes(
    nodes: &BTreeMap<String, NodeEntry>,
    namespace: &str,
    selector: &LabelSelector,
) -> HashMap<String, i64> {
    nodes
        .iter()
        .map(|(name, entry)| {
            let n = entry
                .pods
                .iter()
                .filter(|p| counts_for(p, namespace, selector))
                .count();
            (name.clone(), i64::try_from(n).unwrap_or(i64::MAX))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Whether `pod` counts for `selector` in `namespace`.
fn counts_for(pod: &Pod, namespace: &str, selector: &LabelSelector) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && terms::namespace(pod) == namespace
        && selector.matches(terms::labels(pod))
}

/// What changed for the pods waiting to be scheduled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PodEffect {
    /// A counted pod left its node (deleted, finished): room there again.
    pub(crate) freed_room: bool,
    /// A pod was placed, or a placed pod relabelled: pods waiting for (or kept off by)
    /// pods of some labels may fit now.
    pub(crate) may_match: bool,
}

/// The scheduler's view of nodes and the pods counted on them.
#[derive(Debug, Default)]
pub(crate) struct ClusterCache {
    nodes: BTreeMap<String, NodeEntry>,
    placements: HashMap<String, Placement>,
    pending: BTreeSet<ObjectKey>,
    matching: MatchCounts,
}

impl ClusterCache {
    /// Every node by name, and the matching counts (which read the nodes' pods when a
    /// selector is new).
    pub(crate) fn parts(&mut self) -> (&BTreeMap<String, NodeEntry>, &mut MatchCounts) {
        (&self.nodes, &mut self.matching)
    }

    /// The pods waiting for this scheduler.
    pub(crate) fn pending(&self) -> Vec<ObjectKey> {
        self.pending.iter().cloned().collect()
    }

    /// Whether a pod with this uid is assumed or bound (a cycle need not place it).
    pub(crate) fn is_placed(&self, uid: &str) -> bool {
        self.placements.contains_key(uid)
    }

    /// A new cycle starts: selectors asked about from now on count as fresh.
    pub(crate) fn next_cycle(&mut self) {
        self.matching.cycle += 1;
        self.matching.last = None;
    }

    /// A Node added, changed or deleted.
    pub(crate) fn apply_node(&mut self, change: &Change<Node>) {
        let name = change.key.name.clone();
        match &change.new {
            Some(node) => {
                let entry = self.nodes.entry(name).or_default();
                entry.allocatable = resources::allocatable(node);
                entry.node = Some(node.clone());
            }
            None => {
                if let Some(entry) = self.nodes.get_mut(&name) {
                    entry.node = None;
                    if entry.is_empty() {
                        self.nodes.remove(&name);
                    }
                }
            }
        }
    }

    /// A Pod added, changed or deleted: its place, and whether it is pending.
    pub(crate) fn apply_pod(&mut self, change: &Change<Pod>) -> PodEffect {
        let mut effect = PodEffect::default();
        let uid = change
            .new
            .as_deref()
            .or(change.old.as_deref())
            .and_then(|p| p.metadata.uid.clone())
            .unwrap_or_default();
        let assumed = self.placements.get(&uid).is_some_and(|p| p.assumed);
        match change.new.as_deref() {
            Some(pod) if super::is_ours(pod) && !assumed => {
                self.pending.insert(change.key.clone());
            }
            _ => {
                self.pending.remove(&change.key);
            }
        }
        if uid.is_empty() {
            return effect;
        }
        let new = change.new.as_ref().filter(|p| super::occupies_node(p));
        match new {
            Some(pod) => {
                let node = super::node_name(pod).unwrap_or_default().to_string();
                let before = self.placements.get(&uid);
                effect.may_match = before.is_none_or(|b| {
                    b.assumed || b.pod.metadata.labels != pod.metadata.labels || b.node != node
                });
                let requests = match before {
                    Some(b) if same_spec(&b.pod, pod) => b.requests.clone(),
                    _ => PodRequests::of(pod),
                };
                self.unplace(&uid);
                self.place(uid, change.key.clone(), node, pod.clone(), requests, false);
            }
            None => {
                let unbound_update = change
                    .new
                    .as_deref()
                    .is_some_and(|p| super::node_name(p).is_none());
                if !(unbound_update && assumed) && self.unplace(&uid) {
                    effect.freed_room = true;
                }
            }
        }
        effect
    }

    /// Counts `pod` on `node` before its Binding shows (kube's `AssumePod`).
    pub(crate) fn assume(&mut self, key: &ObjectKey, pod: &Arc<Pod>, node: &str) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.unplace(&uid);
        self.pending.remove(key);
        let requests = PodRequests::of(pod);
        self.place(
            uid,
            key.clone(),
            node.to_string(),
            pod.clone(),
            requests,
            true,
        );
    }

    /// Stops counting an assumed pod whose binding failed (kube's `ForgetPod`); a pod the
    /// cache shows bound stays.
    pub(crate) fn forget(&mut self, uid: &str) {
        if self.placements.get(uid).is_some_and(|p| p.assumed) {
            let key = self.placements.get(uid).map(|p| p.key.clone());
            self.unplace(uid);
            if let Some(key) = key {
                self.pending.insert(key);
            }
        }
    }

    fn place(
        &mut self,
        uid: String,
        key: ObjectKey,
        node: String,
        pod: Arc<Pod>,
        requests: PodRequests,
        assumed: bool,
    ) {
        let terms = terms::has_pod_affinity(&pod).then(|| Arc::new(PodTerms::parse(&pod).0));
        self.nodes
            .entry(node.clone())
            .or_default()
            .add(&pod, &requests, terms.as_ref());
        self.matching.update(&pod, &node, 1);
        self.placements.insert(
            uid,
            Placement {
                key,
                node,
                pod,
                requests,
                assumed,
            },
        );
    }

    /// Stops counting the pod with this uid; whether it was counted.
    fn unplace(&mut self, uid: &str) -> bool {
        let Some(placement) = self.placements.remove(uid) else {
            return false;
        };
        self.matching.update(&placement.pod, &placement.node, -1);
        if let Some(entry) = self.nodes.get_mut(&placement.node) {
            entry.remove(&placement.pod, &placement.requests);
            if entry.is_empty() {
                self.nodes.remove(&placement.node);
            }
        }
        true
    }
}

/// Whether two versions of a pod request the same (the spec is all requests read).
fn same_spec(a: &Pod, b: &Pod) -> bool {
    a.spec == b.spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, app: &str, cpu: &str) -> Arc<Pod> {
        let mut spec =
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]});
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                             "labels": {"app": app}},
                "spec": spec,
            }))
            .expect("a pod"),
        )
    }

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "pods": "110"}},
            }))
            .expect("a node"),
        )
    }

    fn change<K>(
        old: Option<&Arc<K>>,
        new: Option<&Arc<K>>,
        name: &str,
        ns: Option<&str>,
    ) -> Change<K> {
        Change {
            key: match ns {
                Some(ns) => ObjectKey::namespaced(ns, name),
                None => ObjectKey::cluster(name),
            },
            old: old.cloned(),
            new: new.cloned(),
        }
    }

    fn with_nodes(names: &[&str]) -> ClusterCache {
        let mut cache = ClusterCache::default();
        for name in names {
            cache.apply_node(&change(None, Some(&node(name)), name, None));
        }
        cache
    }

    fn requested_cpu(cache: &ClusterCache, node: &str) -> (i64, i64) {
        let info = cache.nodes[node].info().expect("a node");
        (info.requested.milli_cpu, info.pods)
    }

    #[test]
    fn an_assumed_pod_counts_until_its_binding_shows_and_a_late_unbound_version_changes_nothing() {
        let mut cache = with_nodes(&["a", "b"]);
        let unbound = pod("p", None, "web", "500m");
        let key = ObjectKey::namespaced("ns", "p");
        assert_eq!(
            cache.apply_pod(&change(None, Some(&unbound), "p", Some("ns"))),
            PodEffect::default()
        );
        assert_eq!(cache.pending(), vec![key.clone()]);

        cache.assume(&key, &unbound, "b");
        assert!(cache.is_placed("uid-p"));
        assert!(cache.pending().is_empty());
        assert_eq!(requested_cpu(&cache, "b"), (500, 1));

        // A status write made before the binding arrives after the assumption.
        let stale = pod("p", None, "web", "500m");
        cache.apply_pod(&change(Some(&unbound), Some(&stale), "p", Some("ns")));
        assert_eq!(requested_cpu(&cache, "b"), (500, 1));
        assert!(cache.pending().is_empty());

        let bound = pod("p", Some("b"), "web", "500m");
        let effect = cache.apply_pod(&change(Some(&stale), Some(&bound), "p", Some("ns")));
        assert!(effect.may_match);
        assert_eq!(requested_cpu(&cache, "b"), (500, 1));
        // Bound now: a failed binding elsewhere cannot take it off.
        cache.forget("uid-p");
        assert_eq!(requested_cpu(&cache, "b"), (500, 1));

        let effect = cache.apply_pod(&change(Some(&bound), None, "p", Some("ns")));
        assert!(effect.freed_room);
        assert_eq!(requested_cpu(&cache, "b"), (0, 0));
        assert!(!cache.is_placed("uid-p"));
    }

    #[test]
    fn a_forgotten_pod_leaves_its_node_and_waits_again() {
        let mut cache = with_nodes(&["a"]);
        let p = pod("p", None, "web", "1");
        let key = ObjectKey::namespaced("ns", "p");
        cache.apply_pod(&change(None, Some(&p), "p", Some("ns")));
        cache.assume(&key, &p, "a");
        assert_eq!(requested_cpu(&cache, "a"), (1000, 1));
        cache.forget("uid-p");
        assert_eq!(requested_cpu(&cache, "a"), (0, 0));
        assert_eq!(cache.pending(), vec![key]);
    }

    #[test]
    fn a_finished_pod_frees_its_room() {
        let mut cache = with_nodes(&["a"]);
        let running = pod("p", Some("a"), "web", "1");
        cache.apply_pod(&change(None, Some(&running), "p", Some("ns")));
        assert_eq!(requested_cpu(&cache, "a"), (1000, 1));
        let mut done = (*running).clone();
        done.status =
            Some(serde_json::from_value(json!({"phase": "Succeeded"})).expect("a status"));
        let effect = cache.apply_pod(&change(
            Some(&running),
            Some(&Arc::new(done)),
            "p",
            Some("ns"),
        ));
        assert!(effect.freed_room);
        assert_eq!(requested_cpu(&cache, "a"), (0, 0));
    }

    #[test]
    fn matching_counts_follow_every_change_as_a_scan_would_count() {
        let mut cache = with_nodes(&["a", "b"]);
        let web: LabelSelector = "app=web".parse().expect("a selector");
        let count = |cache: &mut ClusterCache, node: &str| {
            let (nodes, matching) = cache.parts();
            matching.count(nodes, "ns", &web, node)
        };
        let w1 = pod("w1", Some("a"), "web", "1");
        let w2 = pod("w2", Some("a"), "web", "1");
        let db = pod("db", Some("b"), "db", "1");
        for (name, p) in [("w1", &w1), ("db", &db)] {
            cache.apply_pod(&change(None, Some(p), name, Some("ns")));
        }
        // The first question scans; the answers after follow the changes.
        assert_eq!((count(&mut cache, "a"), count(&mut cache, "b")), (1, 0));
        cache.apply_pod(&change(None, Some(&w2), "w2", Some("ns")));
        let w3 = pod("w3", None, "web", "1");
        cache.assume(&ObjectKey::namespaced("ns", "w3"), &w3, "b");
        assert_eq!((count(&mut cache, "a"), count(&mut cache, "b")), (2, 1));
        // Relabelled away, and being deleted: no longer counted.
        let relabelled = pod("db", Some("b"), "web", "1");
        cache.apply_pod(&change(Some(&db), Some(&relabelled), "db", Some("ns")));
        assert_eq!(count(&mut cache, "b"), 2);
        let mut deleting = (*w1).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-27T00:00:00Z".parse().expect("a time"),
            ));
        cache.apply_pod(&change(
            Some(&w1),
            Some(&Arc::new(deleting)),
            "w1",
            Some("ns"),
        ));
        assert_eq!(count(&mut cache, "a"), 1);
        cache.forget("uid-w3");
        assert_eq!(count(&mut cache, "b"), 1);
        // Every count equals a scan of the node's pods.
        for name in ["a", "b"] {
            let info = cache.nodes[name].info().expect("a node");
            let scanned = super::super::spread::scan(&info, &web, "ns");
            assert_eq!(count(&mut cache, name), scanned, "node {name}");
        }
        // Another namespace's selector counts nothing here.
        let (nodes, matching) = cache.parts();
        assert_eq!(matching.count(nodes, "other", &web, "a"), 0);
    }

    #[test]
    fn pods_on_an_unknown_node_wait_for_it_and_a_deleted_node_keeps_its_pods_counted() {
        let mut cache = ClusterCache::default();
        let p = pod("p", Some("late"), "web", "1");
        cache.apply_pod(&change(None, Some(&p), "p", Some("ns")));
        assert!(cache.nodes["late"].info().is_none());
        cache.apply_node(&change(None, Some(&node("late")), "late", None));
        assert_eq!(requested_cpu(&cache, "late"), (1000, 1));
        cache.apply_node(&change(Some(&node("late")), None, "late", None));
        assert!(cache.nodes["late"].info().is_none());
        cache.apply_pod(&change(Some(&p), None, "p", Some("ns")));
        assert!(cache.nodes.is_empty());
    }
}
