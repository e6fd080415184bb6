//! Prometheus metrics, named as controller-runtime names them so existing dashboards work.
//!
//! One [`Metrics`] per manager holds every family; controllers, queues and informers get
//! cheap handles that carry their labels. Names and labels:
//!
//! | metric | labels |
//! |---|---|
//! | `controller_runtime_reconcile_total` | controller, result (`success`, `error`, `requeue`, `requeue_after`) |
//! | `controller_runtime_reconcile_errors_total` | controller |
//! | `controller_runtime_terminal_reconcile_errors_total` | controller |
//! | `controller_runtime_reconcile_panics_total` | controller |
//! | `controller_runtime_reconcile_time_seconds` | controller |
//! | `controller_runtime_max_concurrent_reconciles` | controller |
//! | `controller_runtime_active_workers` | controller |
//! | `workqueue_depth`, `workqueue_adds_total`, `workqueue_retries_total` | controller, name |
//! | `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds` | controller, name |
//! | `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds` | controller, name |
//! | `leader_election_master_status` | name |
//! | `konverge_watcher_restarts_total`, `konverge_watcher_relists_total` | resource |
//! | `konverge_cache_objects` | resource |
//! | `konverge_hot_loop_detections_total`, `konverge_hot_loop_backed_off_keys` | controller |
//!
//! Controllers run by a [`Fleet`](crate::fleet::Fleet) add a `cluster` label to every series.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// Label pairs of one series.
pub(crate) type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;
type SecondsGauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// The content type of [`Metrics::encode`]'s output (OpenMetrics text, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn reconcile_time_histogram() -> Histogram {
    // controller-runtime's buckets, so its dashboards' quantiles line up.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

fn queue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

/// Every metric the runtime exports, plus any the application registers.
pub struct Metrics {
    registry: Mutex<Registry>,
    pub(crate) reconcile_total: Family<Labels, Counter>,
    pub(crate) reconcile_errors: Family<Labels, Counter>,
    pub(crate) terminal_errors: Family<Labels, Counter>,
    pub(crate) panics: Family<Labels, Counter>,
    pub(crate) reconcile_time: Histograms,
    pub(crate) max_concurrent: Family<Labels, Gauge>,
    pub(crate) active_workers: Family<Labels, Gauge>,
    pub(crate) queue_depth: Family<Labels, Gauge>,
    pub(crate) queue_adds: Family<Labels, Counter>,
    pub(crate) queue_retries: Family<Labels, Counter>,
    pub(crate) queue_duration: Histograms,
    pub(crate) work_duration: Histograms,
    pub(crate) unfinished_work: SecondsGauges,
    pub(crate) longest_running: SecondsGauges,
    pub(crate) leader: Family<Labels, Gauge>,
    pub(crate) watcher_restarts: Family<Labels, Counter>,
    pub(crate) watcher_relists: Family<Labels, Counter>,
    pub(crate) cache_objects: Family<Labels, Gauge>,
    pub(crate) hot_loops: Family<Labels, Counter>,
    pub(crate) hot_loop_keys: Family<Labels, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every runtime metric registered (and no series until something runs).
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            terminal_errors: Family::default(),
            panics: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_time_histogram),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            queue_retries: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            work_duration: Family::new_with_constructor(queue_histogram),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
            leader: Family::default(),
            watcher_restarts: Family::default(),
            watcher_relists: Family::default(),
            cache_objects: Family::default(),
            hot_loops: Family::default(),
            hot_loop_keys: Family::default(),
        };
        let families: [(&str, &str, Box<dyn RegisterInto>); 20] = [
            (
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Box::new(m.reconcile_total.clone()),
            ),
            (
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Box::new(m.reconcile_errors.clone()),
            ),
            (
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
                Box::new(m.terminal_errors.clone()),
            ),
            (
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller",
                Box::new(m.panics.clone()),
            ),
            (
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                Box::new(m.reconcile_time.clone()),
            ),
            (
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                Box::new(m.max_concurrent.clone()),
            ),
            (
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                Box::new(m.active_workers.clone()),
            ),
            (
                "workqueue_depth",
                "Current depth of workqueue",
                Box::new(m.queue_depth.clone()),
            ),
            (
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                Box::new(m.queue_adds.clone()),
            ),
            (
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                Box::new(m.queue_retries.clone()),
            ),
            (
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                Box::new(m.queue_duration.clone()),
            ),
            (
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                Box::new(m.work_duration.clone()),
            ),
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been \
                 observed by work_duration",
                Box::new(m.unfinished_work.clone()),
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                Box::new(m.longest_running.clone()),
            ),
            (
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates \
                 backup, 1 indicates master",
                Box::new(m.leader.clone()),
            ),
            (
                "konverge_watcher_restarts",
                "Watcher failures per resource, each followed by a restart after backoff",
                Box::new(m.watcher_restarts.clone()),
            ),
            (
                "konverge_watcher_relists",
                "Full relists per resource (after 410 Expired or an unresumable watch)",
                Box::new(m.watcher_relists.clone()),
            ),
            (
                "konverge_cache_objects",
                "Objects held in the cache per resource",
                Box::new(m.cache_objects.clone()),
            ),
            (
                "konverge_hot_loop_detections",
                "Objects caught being reconciled again and again by the controller's own writes",
                Box::new(m.hot_loops.clone()),
            ),
            (
                "konverge_hot_loop_backed_off_keys",
                "Objects currently backed off by the hot-loop detector",
                Box::new(m.hot_loop_keys.clone()),
            ),
        ];
        for (name, help, metric) in families {
            metric.register_into(&mut registry, name, help);
        }
        *m.registry.lock().expect("metrics registry") = registry;
        m
    }

    /// Registers an application metric beside the runtime's, served on the same endpoint.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .register(name, help, metric);
    }

    /// The current value of every series, in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// Lets differently typed families be registered from one table.
trait RegisterInto {
    fn register_into(self: Box<Self>, registry: &mut Registry, name: &str, help: &str);
}

impl<M: Metric> RegisterInto for M {
    fn register_into(self: Box<Self>, registry: &mut Registry, name: &str, help: &str) {
        registry.register(name, help, *self);
    }
}

/// Adds the `cluster` label of a [`Fleet`](crate::fleet::Fleet)'s series.
fn with_cluster(mut labels: Labels, cluster: Option<&str>) -> Labels {
    if let Some(cluster) = cluster {
        labels.push(("cluster", cluster.to_string()));
    }
    labels
}

/// The labels of one controller's series.
pub(crate) fn controller_labels(controller: &str, cluster: Option<&str>) -> Labels {
    with_cluster(vec![("controller", controller.to_string())], cluster)
}

/// The labels of one controller's work queue (client-go's `name`, controller-runtime's `controller`).
pub(crate) fn queue_labels(controller: &str, cluster: Option<&str>) -> Labels {
    with_cluster(
        vec![
            ("controller", controller.to_string()),
            ("name", controller.to_string()),
        ],
        cluster,
    )
}

/// The labels of one watched resource's series.
pub(crate) fn resource_labels(resource: &str, cluster: Option<&str>) -> Labels {
    with_cluster(vec![("resource", resource.to_string())], cluster)
}

/// Seconds as the float Prometheus wants.
pub(crate) fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_carry_controller_runtime_names() {
        let m = Metrics::new();
        m.reconcile_total
            .get_or_create(&vec![
                ("controller", "web".to_string()),
                ("result", "success".to_string()),
            ])
            .inc();
        m.queue_depth
            .get_or_create(&queue_labels("web", None))
            .set(3);
        let text = m.encode();
        assert!(
            text.contains(
                r#"controller_runtime_reconcile_total{controller="web",result="success"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"workqueue_depth{controller="web",name="web"} 3"#),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
