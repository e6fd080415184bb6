//! Which pods go first when a ReplicaSet scales down (kcm's `ActivePodsWithRanks` and
//! `getPodsToDelete`), with 1.33's defaults: `PodDeletionCost` and `LogarithmicScaleDown`
//! on.
//!
//! A pod further from serving goes first. Rule by rule, the first that tells two pods
//! apart decides:
//!
//! 1. not scheduled to a node before scheduled;
//! 2. `Pending` before `Unknown` before `Running`;
//! 3. not ready before ready;
//! 4. lower `controller.kubernetes.io/pod-deletion-cost` before higher;
//! 5. more pods of the same owner on its node before fewer (its rank);
//! 6. both ready: ready for less time before longer, compared by the base-2 logarithm of
//!    the time (pods ready about as long tie, and the uid decides);
//! 7. more container restarts before fewer;
//! 8. newer before older, again by the logarithm of the age.
//!
//! The comparison is kcm's, and like it not always transitive (rules 6 and 8 decide by uid
//! inside a logarithmic bucket), so the pods are sorted by a merge sort that only asks
//! "does this one go first?" and never relies on the order being total.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::pods;

/// kcm's pod annotation: the cost of deleting the pod, lower goes first.
pub(crate) const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The `count` pods of `pods` to delete first. `related` are the pods of every ReplicaSet
/// with the same controller owner (kcm's indirectly related pods): the active ones on a
/// pod's node make its rank.
pub(crate) fn pods_to_delete(
    pods: &[Arc<Pod>],
    related: &[Arc<Pod>],
    count: usize,
    now: Timestamp,
) -> Vec<Arc<Pod>> {
    if count >= pods.len() {
        return pods.to_vec();
    }
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for pod in related.iter().filter(|p| pods::is_active(p)) {
        *on_node.entry(node_name(pod)).or_default() += 1;
    }
    let ranked: Vec<(Arc<Pod>, usize)> = pods
        .iter()
        .map(|pod| {
            let rank = on_node.get(node_name(pod)).copied().unwrap_or(0);
            (pod.clone(), rank)
        })
        .collect();
    let sorted = merge_sort(ranked, &|a: &(Arc<Pod>, usize), b: &(Arc<Pod>, usize)| {
        goes_first(&a.0, a.1, &b.0, b.1, now)
    });
    sorted.into_iter().take(count).map(|(pod, _)| pod).collect()
}

/// Whether pod `a` (of rank `rank_a`) should be deleted before pod `b` (kcm's `Less`).
pub(crate) fn goes_first(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize, now: Timestamp) -> bool {
    let (node_a, node_b) = (node_name(a), node_name(b));
    if node_a != node_b && (node_a.is_empty() || node_b.is_empty()) {
        return node_a.is_empty();
    }
    let (phase_a, phase_b) = (phase_ordinal(a), phase_ordinal(b));
    if phase_a != phase_b {
        return phase_a < phase_b;
    }
    let (ready_a, ready_b) = (pods::is_ready(a), pods::is_ready(b));
    if ready_a != ready_b {
        return !ready_a;
    }
    let (cost_a, cost_b) = (deletion_cost(a), deletion_cost(b));
    if cost_a != cost_b {
        return cost_a < cost_b;
    }
    if rank_a != rank_b {
        return rank_a > rank_b;
    }
    if ready_a && ready_b {
        let (since_a, since_b) = (ready_since(a), ready_since(b));
        if since_a != since_b {
            return younger_first(since_a, since_b, a, b, now);
        }
    }
    let (restarts_a, restarts_b) = (max_restarts(a), max_restarts(b));
    if restarts_a != restarts_b {
        return restarts_a > restarts_b;
    }
    let (created_a, created_b) = (created(a), created(b));
    if created_a != created_b {
        return younger_first(created_a, created_b, a, b, now);
    }
    false
}

/// Of two different times, whether `a`'s goes first: an unknown time first, then the
/// smaller logarithmic age, ties broken by uid.
fn younger_first(
    time_a: Option<Timestamp>,
    time_b: Option<Timestamp>,
    a: &Pod,
    b: &Pod,
    now: Timestamp,
) -> bool {
    let (Some(time_a), Some(time_b)) = (time_a, time_b) else {
        return time_a.is_none();
    };
    match log_age(time_a, now).cmp(&log_age(time_b, now)) {
        std::cmp::Ordering::Equal => uid(a) < uid(b),
        order => order.is_lt(),
    }
}

/// The base-2 logarithm of the nanoseconds from `time` to `now`, `-1` when not after it
/// (kcm's `logarithmicRankDiff` ranks).
fn log_age(time: Timestamp, now: Timestamp) -> i64 {
    let nanos = now.as_nanosecond() - time.as_nanosecond();
    if nanos <= 0 {
        return -1;
    }
    // ilog2 is the floor of log2, as kcm's int64(math.Log2(float64(d))).
    i64::from(nanos.ilog2())
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// `Pending` < `Unknown` < `Running`; any other phase counts as `Pending` (a missing key
/// in kcm's map reads 0).
fn phase_ordinal(pod: &Pod) -> u8 {
    match pods::phase(pod) {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

/// The pod's deletion cost: 0 when unset or invalid (kcm accepts a 32-bit integer with no
/// `+` sign and no leading zeros).
pub(crate) fn deletion_cost(pod: &Pod) -> i32 {
    let Some(value) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST))
    else {
        return 0;
    };
    let valid_start = match value.as_bytes() {
        [] => false,
        [b'-', ..] => true,
        [b'0'] => true,
        [b'1'..=b'9', ..] => true,
        _ => false,
    };
    if !valid_start {
        return 0;
    }
    value.parse::<i32>().unwrap_or(0)
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    pods::condition(pod, "Ready")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

fn created(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

/// A stable merge sort by `first` alone (see the module docs for why not `sort_by`).
fn merge_sort<T>(mut items: Vec<T>, first: &impl Fn(&T, &T) -> bool) -> Vec<T> {
    if items.len() <= 1 {
        return items;
    }
    let right = items.split_off(items.len() / 2);
    let left = merge_sort(items, first);
    let right = merge_sort(right, first);
    let mut merged = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_right = match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => first(r, l),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (None, None) => break,
        };
        let next = if take_right {
            right.next()
        } else {
            left.next()
        };
        merged.extend(next);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("a time")
    }

    /// A pod: `node` ("" unscheduled), `phase`, ready since `ready` (None: not ready),
    /// created at `created`.
    fn pod(name: &str, node: &str, phase: &str, ready: Option<i64>, created: i64) -> Pod {
        let conditions = ready.map(|since| {
            serde_json::json!([{
                "type": "Ready", "status": "True",
                "lastTransitionTime": at(since).to_string(),
            }])
        });
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "uid": format!("uid-{name}"),
                "creationTimestamp": Time(at(created)),
            },
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "conditions": conditions.unwrap_or_default()},
        }))
        .expect("a pod")
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or(""))
            .collect()
    }

    const NOW: i64 = 1_000_000;

    #[test]
    fn earlier_stages_of_startup_go_first() {
        let pods: Vec<Arc<Pod>> = vec![
            Arc::new(pod("ready", "n1", "Running", Some(NOW - 100), NOW - 200)),
            Arc::new(pod("not-ready", "n1", "Running", None, NOW - 200)),
            Arc::new(pod("unknown", "n1", "Unknown", None, NOW - 200)),
            Arc::new(pod("pending", "n1", "Pending", None, NOW - 200)),
            Arc::new(pod("unscheduled", "", "Pending", None, NOW - 200)),
        ];
        let order = pods_to_delete(&pods, &[], 4, at(NOW));
        assert_eq!(
            names(&order),
            ["unscheduled", "pending", "unknown", "not-ready"]
        );
    }

    #[test]
    fn deletion_cost_then_crowded_nodes_then_recently_ready() {
        let mut cheap = pod("cheap", "n4", "Running", Some(NOW - 10_000), NOW - 20_000);
        cheap.metadata.annotations =
            Some([(POD_DELETION_COST.to_string(), "-5".to_string())].into());
        let crowded = pod("crowded", "n2", "Running", Some(NOW - 10_000), NOW - 20_000);
        let fresh = pod("fresh", "n1", "Running", Some(NOW - 5), NOW - 20_000);
        let old = pod("old", "n3", "Running", Some(NOW - 10_000), NOW - 20_000);
        let pods: Vec<Arc<Pod>> = [old, fresh, crowded, cheap].map(Arc::new).to_vec();
        // n2 holds two related pods, every other node one.
        let neighbour = Arc::new(pod("neighbour", "n2", "Running", None, NOW));
        let related: Vec<Arc<Pod>> = [pods.clone(), vec![neighbour]].concat();
        let order = pods_to_delete(&pods, &related, 3, at(NOW));
        assert_eq!(names(&order), ["cheap", "crowded", "fresh"]);
    }

    #[test]
    fn ages_compare_logarithmically_then_by_uid() {
        // Ready 100 s and 120 s ago: the same power of two of nanoseconds, so the uid
        // decides; ready 1000 s ago is older by a bucket.
        let b = pod("b", "n1", "Running", Some(NOW - 100), NOW - 5000);
        let a = pod("a", "n2", "Running", Some(NOW - 120), NOW - 5000);
        let c = pod("c", "n3", "Running", Some(NOW - 1000), NOW - 5000);
        let pods: Vec<Arc<Pod>> = [c, b, a].map(Arc::new).to_vec();
        assert_eq!(names(&pods_to_delete(&pods, &[], 2, at(NOW))), ["a", "b"]);
    }

    #[test]
    fn restarts_then_newer_pods_go_first() {
        let mut crashy = pod("crashy", "n1", "Running", None, NOW - 5000);
        crashy.status.as_mut().expect("status").container_statuses = Some(vec![
            serde_json::from_value(serde_json::json!({
                "name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 4,
            }))
            .expect("a container status"),
        ]);
        let newer = pod("newer", "n1", "Running", None, NOW - 10);
        let older = pod("older", "n1", "Running", None, NOW - 5000);
        let pods: Vec<Arc<Pod>> = [older, newer, crashy].map(Arc::new).to_vec();
        assert_eq!(
            names(&pods_to_delete(&pods, &[], 2, at(NOW))),
            ["crashy", "newer"]
        );
    }

    #[test]
    fn deletion_costs_are_read_as_kcm_reads_them() {
        let with = |value: &str| {
            let mut p = pod("p", "", "Pending", None, 0);
            p.metadata.annotations = Some([(POD_DELETION_COST.to_string(), value.into())].into());
            deletion_cost(&p)
        };
        assert_eq!(with("10"), 10);
        assert_eq!(with("-3"), -3);
        assert_eq!(with("0"), 0);
        assert_eq!(with("+10"), 0);
        assert_eq!(with("008"), 0);
        assert_eq!(with("99999999999"), 0);
        assert_eq!(with("x"), 0);
    }

    #[test]
    fn everything_goes_when_all_are_asked_for() {
        let pods: Vec<Arc<Pod>> = vec![Arc::new(pod("x", "", "Pending", None, 0))];
        assert_eq!(pods_to_delete(&pods, &[], 5, at(NOW)).len(), 1);
    }
}
