//! Prometheus metrics under kube-apiserver's names, labels, help texts and buckets, served
//! at `GET /metrics`, so dashboards and alerts written for kube-apiserver read konverge
//! unchanged.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `apiserver_request_total` | counter | verb, dry_run, group, version, resource, subresource, scope, component, code |
//! | `apiserver_request_duration_seconds` | histogram | verb, dry_run, group, version, resource, subresource, scope, component |
//! | `apiserver_request_sli_duration_seconds` | histogram | verb, group, version, resource, subresource, scope, component |
//! | `apiserver_response_sizes` | histogram | verb, group, version, resource, subresource, scope, component |
//! | `apiserver_longrunning_requests` | gauge | verb, group, version, resource, subresource, scope, component |
//! | `apiserver_current_inflight_requests`, `apiserver_current_inqueue_requests` (0) | gauge | request_kind (`readOnly`, `mutating`) |
//! | `apiserver_flowcontrol_dispatched_requests_total` | counter | flow_schema, priority_level |
//! | `apiserver_flowcontrol_nominal_limit_seats`, `..._lower_limit_seats`, `..._upper_limit_seats` | gauge | priority_level |
//! | `apiserver_watch_events_total`, `apiserver_watch_events_sizes` | counter, histogram | group, version, kind |
//! | `apiserver_storage_objects` | gauge | resource (`configmaps`, `deployments.apps`) |
//! | `etcd_request_duration_seconds`, `etcd_requests_total`, `etcd_request_errors_total` | histogram, counters | operation, type |
//! | `kubernetes_build_info` | gauge (1) | major, minor, git_version, git_commit, git_tree_state, build_date, go_version, compiler, platform (`/version`'s) |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_start_time_seconds`, ... | client_golang's process collector (Linux) | |
//!
//! The text is Prometheus' text format 0.0.4, as kube-apiserver writes it (client_golang):
//! help texts carry kube's stability level (`[STABLE] ...`), counters are named with their
//! `_total`, label pairs are sorted by name, numbers are written as Go writes them (`le="1"`),
//! and a family without series is left out.
//!
//! Recording is one `RequestInfo` per request, built from the route the dispatcher already
//! parsed, then a family lookup (a read lock, a write lock only for a new series) and an
//! atomic update per series: no I/O, no waiting on anything but those locks. Object counts
//! are read at scrape time, from the watch caches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::resources::ResourceType;

/// The content type of [`Metrics::encode`]'s output, the one kube-apiserver 1.33 answers
/// with (client_golang's text format; metric names escaped to underscores, which kube's
/// names need no escaping for).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores";

/// kube-apiserver's `component` label on the API's own requests.
const COMPONENT: &str = "apiserver";

/// `apiserver_request_duration_seconds` and `etcd_request_duration_seconds` buckets (chosen
/// by kube for its latency SLOs; the same list for both).
/// `apiserver_request_sli_duration_seconds` buckets.
const SLI_BUCKETS: [f64; 21] = [
    0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0,
    30.0, 45.0, 60.0,
];

const LATENCY_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// How long a store count stands for a resource without a watch cache (kube-apiserver's
/// `--etcd-count-metric-poll-period` default).
const COUNT_PERIOD: Duration = Duration::from_secs(60);

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn sli_histogram() -> Histogram {
    Histogram::new(SLI_BUCKETS)
}

fn response_size_histogram() -> Histogram {
    // 1 KB to 1 GB, as kube (ExponentialBuckets(1000, 10, 7)).
    Histogram::new((0..7).map(|i| 1000.0 * 10f64.powi(i)))
}

fn watch_event_size_histogram() -> Histogram {
    // 1 KiB to 128 KiB, as kube (ExponentialBuckets(1024, 2, 8)).
    Histogram::new((0..8).map(|i| 1024.0 * 2f64.powi(i)))
}

// Label sets. The encoder sorts label pairs by name, as client_golang writes them, so the
// field order here is free: the sets nest to share one copy of a request's labels.

/// `apiserver_request_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: u16,
    #[prometheus(flatten)]
    request: DurationLabels,
}

/// `apiserver_request_duration_seconds`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    dry_run: &'static str,
    #[prometheus(flatten)]
    endpoint: EndpointLabels,
}

/// The labels of the series without `dry_run` (SLI latency, sizes, long-running requests).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    verb: &'static str,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: &'static str,
    component: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    request_kind: &'static str,
}

/// `apiserver_flowcontrol_*_limit_seats`' label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PriorityLevelLabels {
    priority_level: String,
}

/// `apiserver_flowcontrol_dispatched_requests_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabels {
    flow_schema: String,
    priority_level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    group: String,
    kind: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    operation: &'static str,
    r#type: String,
}

/// `kubernetes_build_info`'s labels: the `/version` fields.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    major: String,
    minor: String,
    git_version: String,
    git_commit: String,
    git_tree_state: String,
    build_date: String,
    go_version: String,
    compiler: String,
    platform: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Requests being served now, and the most at once since the last scrape, per kind.
#[derive(Debug, Default)]
struct Inflight {
    now: [AtomicI64; 2],
    peak: [AtomicI64; 2],
}

/// `readOnly` and `mutating`, the index into [`Inflight`]'s arrays.
const REQUEST_KINDS: [&str; 2] = ["readOnly", "mutating"];

/// Every metric the API server serves.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Histograms<DurationLabels>,
    sli_durations: Histograms<EndpointLabels>,
    response_sizes: Histograms<EndpointLabels>,
    longrunning: Family<EndpointLabels, Gauge>,
    inflight_gauge: Family<KindLabels, Gauge>,
    inqueue_gauge: Family<KindLabels, Gauge>,
    inflight: Inflight,
    dispatched: Family<FlowLabels, Counter>,
    lower_seats: Family<PriorityLevelLabels, Gauge>,
    nominal_seats: Family<PriorityLevelLabels, Gauge>,
    upper_seats: Family<PriorityLevelLabels, Gauge>,
    watch_events: Family<WatchLabels, Counter>,
    watch_event_sizes: Histograms<WatchLabels>,
    storage_objects: Family<ResourceLabels, Gauge>,
    /// When each resource without a watch cache was last counted in the store.
    counted: Mutex<HashMap<String, Instant>>,
    store_durations: Histograms<StoreLabels>,
    store_requests: Family<StoreLabels, Counter>,
    store_errors: Family<StoreLabels, Counter>,
    build_info: Family<BuildLabels, Gauge>,
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
    /// Every family registered, no series yet.
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            durations: Family::new_with_constructor(latency_histogram),
            sli_durations: Family::new_with_constructor(sli_histogram),
            response_sizes: Family::new_with_constructor(response_size_histogram),
            longrunning: Family::default(),
            inflight_gauge: Family::default(),
            inqueue_gauge: Family::default(),
            inflight: Inflight::default(),
            dispatched: Family::default(),
            lower_seats: Family::default(),
            nominal_seats: Family::default(),
            upper_seats: Family::default(),
            watch_events: Family::default(),
            watch_event_sizes: Family::new_with_constructor(watch_event_size_histogram),
            storage_objects: Family::default(),
            counted: Mutex::new(HashMap::new()),
            store_durations: Family::new_with_constructor(latency_histogram),
            store_requests: Family::default(),
            store_errors: Family::default(),
            build_info: Family::default(),
        };
        // Help texts are kube's, with the stability level component-base puts in front;
        // counters are registered without `_total`, which the encoder adds. Registered in
        // name order, the order client_golang writes families in.
        let r = &mut m.registry;
        r.register(
            "apiserver_current_inflight_requests",
            "[STABLE] Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
            m.inflight_gauge.clone(),
        );
        r.register(
            "apiserver_current_inqueue_requests",
            "[ALPHA] Maximal number of queued requests in this apiserver per request kind in last second.",
            m.inqueue_gauge.clone(),
        );
        r.register(
            "apiserver_flowcontrol_dispatched_requests",
            "[BETA] Number of requests executed by API Priority and Fairness subsystem",
            m.dispatched.clone(),
        );
        r.register(
            "apiserver_flowcontrol_lower_limit_seats",
            "[ALPHA] Configured lower bound on number of execution seats available to each priority level",
            m.lower_seats.clone(),
        );
        r.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "[BETA] Nominal number of execution seats configured for each priority level",
            m.nominal_seats.clone(),
        );
        r.register(
            "apiserver_flowcontrol_upper_limit_seats",
            "[ALPHA] Configured upper bound on number of execution seats available to each priority level",
            m.upper_seats.clone(),
        );
        r.register(
            "apiserver_longrunning_requests",
            "[STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.",
            m.longrunning.clone(),
        );
        r.register(
            "apiserver_request_duration_seconds",
            "[STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
            m.durations.clone(),
        );
        r.register(
            "apiserver_request_sli_duration_seconds",
            "[ALPHA] Response latency distribution (not counting webhook duration and priority & fairness queue wait times) in seconds for each verb, group, version, resource, subresource, scope and component.",
            m.sli_durations.clone(),
        );
        r.register(
            "apiserver_request",
            "[STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
            m.requests.clone(),
        );
        r.register(
            "apiserver_response_sizes",
            "[STABLE] Response size distribution in bytes for each group, version, verb, resource, subresource, scope and component.",
            m.response_sizes.clone(),
        );
        r.register(
            "apiserver_storage_objects",
            "[STABLE] Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
            m.storage_objects.clone(),
        );
        r.register(
            "apiserver_watch_events_sizes",
            "[ALPHA] Watch event size distribution in bytes",
            m.watch_event_sizes.clone(),
        );
        r.register(
            "apiserver_watch_events",
            "[ALPHA] Number of events sent in watch clients",
            m.watch_events.clone(),
        );
        r.register(
            "etcd_request_duration_seconds",
            "[ALPHA] Etcd request latency in seconds for each operation and object type.",
            m.store_durations.clone(),
        );
        r.register(
            "etcd_request_errors",
            "[ALPHA] Etcd failed request counts for each operation and object type.",
            m.store_errors.clone(),
        );
        r.register(
            "etcd_requests",
            "[ALPHA] Etcd request counts for each operation and object type.",
            m.store_requests.clone(),
        );
        r.register(
            "kubernetes_build_info",
            "[ALPHA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
            m.build_info.clone(),
        );
        m
    }

    /// Sets `kubernetes_build_info` from the server's `/version` answer.
    pub(crate) fn set_build_info(&self, version: &serde_json::Value) {
        let field = |name: &str| version[name].as_str().unwrap_or_default().to_string();
        self.build_info
            .get_or_create(&BuildLabels {
                major: field("major"),
                minor: field("minor"),
                git_version: field("gitVersion"),
                git_commit: field("gitCommit"),
                git_tree_state: field("gitTreeState"),
                build_date: field("buildDate"),
                go_version: field("goVersion"),
                compiler: field("compiler"),
                platform: field("platform"),
            })
            .set(1);
    }

    /// Sets a priority level's seats (`apiserver_flowcontrol_{nominal,lower,upper}_limit_seats`),
    /// as kube sets them whenever its configuration changes; a level that goes away keeps
    /// its last values, as in kube.
    pub(crate) fn set_priority_level_seats(
        &self,
        level: &str,
        nominal: i64,
        lower: i64,
        upper: i64,
    ) {
        let labels = PriorityLevelLabels {
            priority_level: level.to_string(),
        };
        self.nominal_seats.get_or_create(&labels).set(nominal);
        self.lower_seats.get_or_create(&labels).set(lower);
        self.upper_seats.get_or_create(&labels).set(upper);
    }

    /// Counts a request classified into `level` by `schema` as dispatched (nothing waits for
    /// a seat here: every classified request is dispatched at once).
    pub(crate) fn dispatched(&self, level: &str, schema: &str) {
        self.dispatched
            .get_or_create(&FlowLabels {
                flow_schema: schema.to_string(),
                priority_level: level.to_string(),
            })
            .inc();
    }

    /// Counts a request as in flight until the guard drops (`readOnly` for gets and lists,
    /// `mutating` otherwise; long-running requests are not counted, as kube's max-in-flight
    /// filter leaves them out).
    pub(crate) fn enter(&self, mutating: bool) -> InflightGuard<'_> {
        let i = usize::from(mutating);
        let now = self.inflight.now[i].fetch_add(1, Ordering::Relaxed) + 1;
        self.inflight.peak[i].fetch_max(now, Ordering::Relaxed);
        InflightGuard {
            counter: &self.inflight.now[i],
        }
    }

    /// Records a finished request.
    pub(crate) fn request(&self, info: &RequestInfo, code: StatusCode, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                code: code.as_u16(),
                request: info.labels.clone(),
            })
            .inc();
        self.durations
            .get_or_create(&info.labels)
            .observe(elapsed.as_secs_f64());
        // Without webhooks or priority and fairness queues, nothing is left out of the SLI.
        self.sli_durations
            .get_or_create(&info.labels.endpoint)
            .observe(elapsed.as_secs_f64());
    }

    /// Records the size of a get's or list's answer.
    pub(crate) fn response_size(&self, info: &RequestInfo, bytes: u64) {
        if matches!(info.labels.endpoint.verb, "GET" | "LIST") {
            self.response_sizes
                .get_or_create(&info.labels.endpoint)
                .observe(bytes as f64);
        }
    }

    /// Counts a long-running request (a watch, a connection) as open until the guard drops.
    pub(crate) fn long_running(&self, info: &RequestInfo) -> Gauge {
        let gauge = self
            .longrunning
            .get_or_create(&info.labels.endpoint)
            .clone();
        gauge.inc();
        gauge
    }

    /// The counter and size histogram of the events sent to watchers of one kind.
    pub(crate) fn watch_events(&self, rt: &ResourceType) -> (Counter, Histogram) {
        let labels = WatchLabels {
            group: rt.group.clone(),
            kind: rt.kind.clone(),
            version: rt.version.clone(),
        };
        (
            self.watch_events.get_or_create(&labels).clone(),
            self.watch_event_sizes.get_or_create(&labels).clone(),
        )
    }

    /// Records one store call for `resource` (`configmaps`, `deployments.apps`), as kube's
    /// etcd3 store does around each etcd request. Conflicts, existing and missing keys are
    /// answers (etcd's transactions that did not apply), not failures of the store.
    pub(crate) fn record_store_call(
        &self,
        operation: &'static str,
        resource: &str,
        elapsed: Duration,
        error: Option<&konverge_store::Error>,
    ) {
        let labels = StoreLabels {
            operation,
            r#type: resource.to_string(),
        };
        self.store_durations
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.store_requests.get_or_create(&labels).inc();
        if matches!(
            error,
            Some(konverge_store::Error::Closed | konverge_store::Error::Backend { .. })
        ) {
            self.store_errors.get_or_create(&labels).inc();
        }
    }

    /// Sets a resource's object count (`-1`: it could not be counted).
    pub(crate) fn set_object_count(&self, rt: &ResourceType, count: i64) {
        self.storage_objects
            .get_or_create(&ResourceLabels {
                resource: group_resource(rt),
            })
            .set(count);
    }

    /// Whether a resource without a watch cache is due to be counted in the store again
    /// (and, if so, notes that it is being counted now).
    pub(crate) fn count_due(&self, rt: &ResourceType) -> bool {
        let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match counted.get(&rt.storage_prefix()) {
            Some(at) if now.duration_since(*at) < COUNT_PERIOD => false,
            _ => {
                counted.insert(rt.storage_prefix(), now);
                true
            }
        }
    }

    /// Every series in Prometheus' text format 0.0.4 ([`CONTENT_TYPE`]), as kube-apiserver
    /// writes it.
    pub fn encode(&self) -> String {
        // The in-flight gauges hold the most requests at once since the last scrape (kube:
        // in the last second), then start over from the requests in flight now.
        for (i, kind) in REQUEST_KINDS.iter().enumerate() {
            let now = self.inflight.now[i].load(Ordering::Relaxed);
            let peak = self.inflight.peak[i].swap(now, Ordering::Relaxed);
            self.inflight_gauge
                .get_or_create(&KindLabels { request_kind: kind })
                .set(peak.max(now));
            // Nothing waits in a queue here (no priority and fairness): always 0, as kube
            // reports an idle queue.
            self.inqueue_gauge
                .get_or_create(&KindLabels { request_kind: kind })
                .set(0);
        }
        let mut open_metrics = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut open_metrics, &self.registry);
        let mut text = to_text_format(&open_metrics);
        // `process_*` sorts after every family above.
        text.push_str(&process_metrics());
        text
    }
}

/// The process's own metrics, as client_golang's process collector (which kube-apiserver
/// registers) reads them from `/proc`: CPU time, memory, file descriptors, start time and
/// network bytes. Linux only, as there; a value that cannot be read is left out.
fn process_metrics() -> String {
    let mut families = process::read();
    families.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::new();
    for (name, kind, help, value) in families {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n",
            go_float(value)
        ));
    }
    out
}

#[cfg(not(target_os = "linux"))]
mod process {
    pub(super) fn read() -> Vec<(&'static str, &'static str, &'static str, f64)> {
        Vec::new()
    }
}

#[cfg(target_os = "linux")]
mod process {
    use std::fs::read_to_string;

    /// `/proc` counts CPU time and start time in ticks of `USER_HZ`, 100 on every Linux ABI
    /// (Go's procfs assumes it too).
    const USER_HZ: f64 = 100.0;

    /// Name, type, help and value of each family that could be read.
    pub(super) fn read() -> Vec<(&'static str, &'static str, &'static str, f64)> {
        let mut out = Vec::new();
        if let Some(stat) = read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| stat(&s))
        {
            out.push((
                "process_cpu_seconds_total",
                "counter",
                "Total user and system CPU time spent in seconds.",
                (stat.utime + stat.stime) / USER_HZ,
            ));
            out.push((
                "process_virtual_memory_bytes",
                "gauge",
                "Virtual memory size in bytes.",
                stat.vsize,
            ));
            if let Some(boot) = read_to_string("/proc/stat").ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            }) {
                out.push((
                    "process_start_time_seconds",
                    "gauge",
                    "Start time of the process since unix epoch in seconds.",
                    boot + stat.starttime / USER_HZ,
                ));
            }
        }
        // VmRSS is the resident page count of `stat` times the page size, in kB.
        if let Some(rss) = read_to_string("/proc/self/status").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        }) {
            out.push((
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size in bytes.",
                rss * 1024.0,
            ));
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            out.push((
                "process_open_fds",
                "gauge",
                "Number of open file descriptors.",
                fds.count() as f64,
            ));
        }
        if let Ok(limits) = read_to_string("/proc/self/limits") {
            if let Some(v) = soft_limit(&limits, "Max open files") {
                out.push((
                    "process_max_fds",
                    "gauge",
                    "Maximum number of open file descriptors.",
                    v,
                ));
            }
            if let Some(v) = soft_limit(&limits, "Max address space") {
                out.push((
                    "process_virtual_memory_max_bytes",
                    "gauge",
                    "Maximum amount of virtual memory available in bytes.",
                    v,
                ));
            }
        }
        if let Ok(netstat) = read_to_string("/proc/self/net/netstat") {
            let ip: Vec<&str> = netstat
                .lines()
                .filter(|l| l.starts_with("IpExt:"))
                .collect();
            if let [names, values] = ip.as_slice() {
                let octets = |name: &str| {
                    names
                        .split_whitespace()
                        .zip(values.split_whitespace())
                        .find(|(n, _)| *n == name)
                        .and_then(|(_, v)| v.parse::<f64>().ok())
                        .unwrap_or(0.0)
                };
                out.push((
                    "process_network_receive_bytes_total",
                    "counter",
                    "Number of bytes received by the process over the network.",
                    octets("InOctets"),
                ));
                out.push((
                    "process_network_transmit_bytes_total",
                    "counter",
                    "Number of bytes sent by the process over the network.",
                    octets("OutOctets"),
                ));
            }
        }
        out
    }

    struct Stat {
        utime: f64,
        stime: f64,
        starttime: f64,
        vsize: f64,
    }

    /// The fields of `/proc/self/stat` used here (counted after the command name, which may
    /// hold spaces and parentheses).
    fn stat(text: &str) -> Option<Stat> {
        let (_, rest) = text.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state): field N is at N - 3.
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        Some(Stat {
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
            vsize: field(23)?,
        })
    }

    /// A limit's soft value; `unlimited` as Go's procfs reads it (the largest u64).
    fn soft_limit(limits: &str, name: &str) -> Option<f64> {
        let line = limits.lines().find(|l| l.starts_with(name))?;
        match line[name.len()..].split_whitespace().next()? {
            "unlimited" => Some(u64::MAX as f64),
            v => v.parse().ok(),
        }
    }
}

/// Drops a request from the in-flight count.
#[derive(Debug)]
pub(crate) struct InflightGuard<'a> {
    counter: &'a AtomicI64,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::Relaxed);
    }
}

/// kube's name for a resource in storage metrics: `configmaps`, `deployments.apps`
/// (`GroupResource.String()`).
pub(crate) fn group_resource(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    }
}

/// What kube-apiserver's metrics say about one request.
#[derive(Debug, Clone)]
pub(crate) struct RequestInfo {
    /// The labels of its series (but the answer's code), built once per request.
    labels: DurationLabels,
    /// A watch or a connection: counted in `apiserver_longrunning_requests` while open and
    /// recorded when it ends.
    pub(crate) long_running: bool,
}

impl RequestInfo {
    /// A request for a resource. `namespace`, `name`, `subresource` as the route parsed them.
    pub(crate) fn resource(
        rt: &ResourceType,
        namespace: Option<&str>,
        name: Option<&str>,
        subresource: Option<&str>,
        watch_path: bool,
        request: &RequestParts<'_>,
    ) -> RequestInfo {
        // The scope kube's installer gives each route.
        let mut scope = if rt.namespaced {
            "namespace"
        } else {
            "cluster"
        };
        if name.is_some() || request.method == Method::POST {
            scope = "resource";
        }
        if rt.namespaced && namespace.is_none() {
            scope = "cluster";
        }
        let connect = subresource
            .and_then(|s| rt.subresource(s))
            .is_some_and(|s| s.storage.connects());
        let verb = if watch_path && !connect {
            "WATCH"
        } else {
            reported_verb(request, scope, connect)
        };
        RequestInfo {
            labels: DurationLabels {
                dry_run: dry_run(request.query),
                endpoint: EndpointLabels {
                    verb,
                    group: rt.group.clone(),
                    version: rt.version.clone(),
                    resource: rt.plural.clone(),
                    subresource: subresource.unwrap_or_default().to_string(),
                    scope,
                    component: COMPONENT,
                },
            },
            long_running: verb == "WATCH" || connect,
        }
    }

    /// A request for a non-resource endpoint kube instruments (`/healthz`, aggregated
    /// discovery at `apis`), under the component kube gives it.
    pub(crate) fn non_resource(
        path: &str,
        component: &'static str,
        request: &RequestParts<'_>,
    ) -> RequestInfo {
        let verb = reported_verb(request, "", false);
        RequestInfo {
            labels: DurationLabels {
                dry_run: dry_run(request.query),
                endpoint: EndpointLabels {
                    verb,
                    group: String::new(),
                    version: String::new(),
                    resource: String::new(),
                    subresource: path.to_string(),
                    scope: "",
                    component,
                },
            },
            long_running: verb == "WATCH",
        }
    }

    /// Whether the request writes (kube's max-in-flight filter: anything but get, list and
    /// watch).
    pub(crate) fn mutating(&self) -> bool {
        !matches!(self.labels.endpoint.verb, "GET" | "LIST" | "WATCH")
    }
}

/// The parts of a request its metrics labels come from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestParts<'a> {
    pub(crate) method: &'a Method,
    pub(crate) query: Option<&'a str>,
    pub(crate) content_type: Option<&'a str>,
}

/// kube's reported verb: the method, a GET of a collection as `LIST`, `WATCH` when the query
/// asks to watch, `APPLY` for apply patches, `CONNECT` for connections, `other` for methods
/// kube does not report.
fn reported_verb(request: &RequestParts<'_>, scope: &str, connect: bool) -> &'static str {
    let method = request.method;
    if connect {
        return "CONNECT";
    }
    // A GET (not a HEAD) whose first `watch` value is anything but `0` and `false` watches,
    // as kube reads the query (an empty value watches too).
    if method == Method::GET
        && query_values(request.query, "watch")
            .next()
            .is_some_and(konverge_apimachinery::query::parse_bool)
    {
        return "WATCH";
    }
    match method.as_str() {
        "GET" | "HEAD" if scope == "resource" || scope.is_empty() => "GET",
        "GET" | "HEAD" => "LIST",
        // kube compares the whole header, parameters included.
        "PATCH" if request.content_type == Some("application/apply-patch+yaml") => "APPLY",
        "PATCH" => "PATCH",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        _ => "other",
    }
}

/// The `dry_run` label: empty without `dryRun`, `All` when every value is `All`, `invalid`
/// otherwise (the only valid values, deduplicated and sorted, join to `All`).
fn dry_run(query: Option<&str>) -> &'static str {
    if !query.is_some_and(|q| q.contains("dryRun")) {
        return "";
    }
    let mut values = query_values(query, "dryRun").peekable();
    if values.peek().is_none() {
        return "";
    }
    if values.all(|v| v == "All") {
        "All"
    } else {
        "invalid"
    }
}

/// The values of one query parameter, in order (percent-decoding is not needed for the
/// parameters read here: their meaningful values are plain words).
fn query_values<'a>(query: Option<&'a str>, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(move |pair| match pair.split_once('=') {
            Some((k, v)) if k == key => Some(v),
            None if pair == key => Some(""),
            _ => None,
        })
}

/// Rewrites prometheus-client's OpenMetrics text as client_golang's text format 0.0.4:
/// counter families named with `_total`, help texts as given, no `# UNIT` or `# EOF`,
/// families without series left out, series sorted by labels, numbers as Go formats them.
fn to_text_format(open_metrics: &str) -> String {
    let mut out = String::with_capacity(open_metrics.len());
    let mut help: Option<&str> = None;
    let mut header = String::new();
    let mut series: Vec<(String, Vec<String>)> = Vec::new();
    let flush = |out: &mut String, header: &mut String, series: &mut Vec<(String, Vec<String>)>| {
        if !series.is_empty() {
            out.push_str(header);
            series.sort_by(|a, b| a.0.cmp(&b.0));
            for (_, mut lines) in series.drain(..) {
                // client_golang writes a histogram's buckets, then its sum, then its count.
                lines.sort_by_key(|line| {
                    let name = line.split(['{', ' ']).next().unwrap_or_default();
                    if name.ends_with("_sum") {
                        1
                    } else if name.ends_with("_count") {
                        2
                    } else {
                        0
                    }
                });
                for line in lines {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
        header.clear();
    };
    for line in open_metrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush(&mut out, &mut header, &mut series);
            help = Some(rest);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            if let Some(help) = help.take() {
                let text = help.split_once(' ').map_or("", |(_, text)| text);
                // prometheus-client ends every help text with a period of its own.
                let text = text.strip_suffix('.').unwrap_or(text);
                header.push_str(&format!("# HELP {name} {text}\n"));
            }
            header.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if line.starts_with('#') || line.is_empty() {
            // `# UNIT`, `# EOF`: not in the 0.0.4 format.
        } else {
            let line = go_numbers(line);
            // A histogram's buckets, sum and count stay together, in order.
            let key = series_key(&line);
            match series.last_mut() {
                Some((last, lines)) if *last == key => lines.push(line),
                _ => series.push((key, vec![line])),
            }
        }
    }
    flush(&mut out, &mut header, &mut series);
    out
}

/// A sample's label set without `le`: what the lines of one series share.
fn series_key(line: &str) -> String {
    let labels = match (line.find('{'), line.rfind('}')) {
        (Some(start), Some(end)) if start < end => &line[start..end],
        _ => "",
    };
    match labels.find(",le=\"").or_else(|| labels.find("{le=\"")) {
        Some(at) => labels[..at].to_string(),
        None => labels.to_string(),
    }
}

/// A sample line as client_golang writes it: label pairs sorted by name, a bucket's `le`
/// last (prometheus-client writes it first), `le` and the value as Go writes floats.
fn go_numbers(line: &str) -> String {
    let (head, value) = line.rsplit_once(' ').unwrap_or((line, ""));
    let value = go_float_text(value);
    let (Some(open), Some(close)) = (head.find('{'), head.rfind('}')) else {
        return format!("{head} {value}");
    };
    let (name, labels) = (&head[..open], &head[open + 1..close]);
    // Label values here never hold `",`: the split finds every pair.
    let mut pairs: Vec<&str> = Vec::new();
    let mut le = None;
    let mut rest = labels;
    while !rest.is_empty() {
        let (pair, next) = match rest.find("\",") {
            Some(at) => (&rest[..=at], &rest[at + 2..]),
            None => (rest, ""),
        };
        match pair.strip_prefix("le=\"").and_then(|v| v.strip_suffix('"')) {
            Some(bound) => le = Some(go_float_text(bound)),
            None => pairs.push(pair),
        }
        rest = next;
    }
    pairs.sort_by_key(|pair| pair.split('=').next().unwrap_or_default());
    let mut out = format!("{name}{{{}", pairs.join(","));
    if let Some(le) = le {
        if !pairs.is_empty() {
            out.push(',');
        }
        out.push_str(&format!("le=\"{le}\""));
    }
    out.push_str(&format!("}} {value}"));
    out
}

fn go_float_text(text: &str) -> String {
    match text.parse::<f64>() {
        Ok(v) => go_float(v),
        Err(_) => text.to_string(),
    }
}

/// `v` as Go's `strconv.FormatFloat(v, 'g', -1, 64)` writes it (what client_golang uses):
/// the shortest digits, with an exponent below 1e-4 and from 1e6 on (`le="1e+06"`).
fn go_float(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v.is_nan() {
        return "NaN".into();
    }
    if v != 0.0 && (v.abs() < 1e-4 || v.abs() >= 1e6) {
        // Rust writes `1e-5`; Go writes `1e-05` (a sign and at least two digits).
        let text = format!("{v:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let (sign, digits) = match exponent.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exponent),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    format!("{v}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_go_writes_them() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(0.005), "0.005");
        assert_eq!(go_float(60.0), "60");
        assert_eq!(go_float(131072.0), "131072");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(45678592.0), "4.5678592e+07");
        assert_eq!(go_float(1e-5), "1e-05");
        assert_eq!(go_float(f64::INFINITY), "+Inf");
    }

    #[test]
    fn verbs_are_reported_as_kube_reports_them() {
        let parts = |method: &'static Method, query, content_type| RequestParts {
            method,
            query,
            content_type,
        };
        assert_eq!(
            reported_verb(&parts(&Method::GET, None, None), "namespace", false),
            "LIST"
        );
        assert_eq!(
            reported_verb(&parts(&Method::GET, None, None), "resource", false),
            "GET"
        );
        assert_eq!(
            reported_verb(
                &parts(&Method::GET, Some("watch=1"), None),
                "cluster",
                false
            ),
            "WATCH"
        );
        assert_eq!(
            reported_verb(
                &parts(&Method::GET, Some("watch=false"), None),
                "cluster",
                false
            ),
            "LIST"
        );
        assert_eq!(
            reported_verb(&parts(&Method::GET, Some("watch="), None), "cluster", false),
            "WATCH"
        );
        assert_eq!(
            reported_verb(
                &parts(&Method::HEAD, Some("watch=1"), None),
                "cluster",
                false
            ),
            "LIST"
        );
        assert_eq!(
            reported_verb(
                &parts(&Method::PATCH, None, Some("application/apply-patch+yaml")),
                "resource",
                false
            ),
            "APPLY"
        );
        assert_eq!(
            reported_verb(&parts(&Method::OPTIONS, None, None), "", false),
            "other"
        );
        assert_eq!(dry_run(Some("dryRun=All")), "All");
        assert_eq!(dry_run(Some("dryRun=All&dryRun=All")), "All");
        assert_eq!(dry_run(Some("dryRun=x")), "invalid");
        assert_eq!(dry_run(Some("limit=1")), "");
    }

    #[test]
    fn open_metrics_become_the_text_format() {
        let m = Metrics::new();
        m.store_requests
            .get_or_create(&StoreLabels {
                operation: "get",
                r#type: "configmaps".into(),
            })
            .inc();
        m.store_durations
            .get_or_create(&StoreLabels {
                operation: "get",
                r#type: "configmaps".into(),
            })
            .observe(0.001);
        let text = m.encode();
        assert!(
            text.contains(
                "# HELP etcd_requests_total [ALPHA] Etcd request counts for each operation and object type.\n\
                 # TYPE etcd_requests_total counter\n\
                 etcd_requests_total{operation=\"get\",type=\"configmaps\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "etcd_request_duration_seconds_bucket{operation=\"get\",type=\"configmaps\",le=\"1\"} 1\n"
            ),
            "{text}"
        );
        // Buckets, then sum and count, as client_golang orders them.
        assert!(
            text.contains(
                "etcd_request_duration_seconds_bucket{operation=\"get\",type=\"configmaps\",le=\"+Inf\"} 1\n\
                 etcd_request_duration_seconds_sum{operation=\"get\",type=\"configmaps\"} 0.001\n\
                 etcd_request_duration_seconds_count{operation=\"get\",type=\"configmaps\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("apiserver_current_inflight_requests{request_kind=\"mutating\"} 0\n"),
            "{text}"
        );
        // No series, no family; no OpenMetrics trailer.
        assert!(!text.contains("etcd_request_errors_total"), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
    }
}
