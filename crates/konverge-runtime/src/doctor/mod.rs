//! The doctor: watches every resource of a live cluster for a while and reports the writing
//! patterns that make clusters sick — hot loops, objects that keep growing, deletions that
//! never finish, objects let go while their controller was failing.
//!
//! [`run`] discovers every resource the server lets it list and watch (subresources are
//! skipped), opens one [`watcher`] per resource on [`DynamicObject`]s, and keeps a small record
//! per object, keyed by resource, namespace and name. Objects only listed (never written during
//! the window) cost a few dozen bytes: their size, the hashes of their resourceVersion and uid,
//! and the stamps of their managedFields. An object written during the window also keeps when
//! it was written, who wrote it, which fields changed, and its last version serialized, to diff
//! the next one against; an object deleted during the window is remembered with its uid. So
//! memory follows how many objects churn, not how many exist.
//!
//! Events are written all the time by design, so they are not records like the rest: one
//! watch (events.k8s.io/v1, or core v1 Events where that is not served) keeps only the latest
//! Event about each regarded object, by uid: its time, and for a Warning its reason, note and
//! reporting controller. Memory follows how many objects have Events, not how many Events
//! there are.
//!
//! The window opens once every resource has been listed (so writes are counted over the same
//! span for all); a resource's first list is always a baseline, never writes. Discovery runs
//! again every [`Options::rediscover_every`], so the objects of a CRD installed during the
//! window are watched too. At the end the records are turned into a [`Report`]:
//!
//! - [`HotLoop`]: written more than [`Options::hot_writes_per_minute`], with the field managers
//!   whose managedFields `time` moved and the field paths that kept changing;
//! - [`Growth`]: grew on several writes and never shrank; [`LargeObject`]: over
//!   [`Options::size_warn_percent`] of the 1.5 MiB object limit;
//! - [`StuckDeletion`]: a deletionTimestamp older than [`Options::stuck_after`], with the
//!   finalizers holding it and the managers that set them; [`TerminatingNamespace`]: a namespace
//!   stuck Terminating, with what is left in it;
//! - [`DeletedAfterWarning`]: deleted during the window while the latest Event about it was a
//!   `Warning` — the last thing its controller said was a failure, so the cleanup it owed (an
//!   external resource) likely never happened;
//! - [`RequestTrouble`]: conflict storms and error rates per resource and verb, from the
//!   server's `apiserver_request_total` counters at `/metrics`, read when the window opens and
//!   when it closes (skipped, and said so, when the server does not let them be read).

mod events;
mod record;
mod report;
mod requests;

use std::collections::{BTreeMap, HashSet};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::{ApiResource, Discovery, verbs};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::watcher::{self, Event};
use events::LatestEvents;
use record::ResourceRecords;
pub use report::{
    DeletedAfterWarning, FinalizerHold, Growth, HotLoop, LargeObject, ObjectRef, Report,
    StuckDeletion, TerminatingNamespace, Thresholds, Unwatched,
};
pub use requests::RequestTrouble;

/// Kubernetes refuses objects larger than this (etcd's request limit, 1.5 MiB).
pub const OBJECT_SIZE_LIMIT: u64 = 1536 * 1024;

/// What the doctor watches for and how long.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long to watch, once every resource is listed (60 s).
    pub window: Duration,
    /// An object written more often than this per minute is a hot loop (10). Over a window of
    /// a minute or more the rate is the busiest minute's; over a shorter one it is
    /// extrapolated, and three writes at least are needed (one edit in a two-second window is
    /// not a loop).
    pub hot_writes_per_minute: u32,
    /// An object above this share of [`OBJECT_SIZE_LIMIT`], in percent, is reported (50).
    pub size_warn_percent: u32,
    /// A deletion pending longer than this is stuck (5 minutes).
    pub stuck_after: Duration,
    /// How long to wait for every resource's first list before the window opens anyway (60 s);
    /// resources still unlisted by then are reported as [`Unwatched`].
    pub sync_timeout: Duration,
    /// How often discovery runs again during the window, to watch the resources of CRDs
    /// installed meanwhile (30 s).
    pub rediscover_every: Duration,
    /// A resource and verb answered 409 Conflict more often than this a minute is a conflict
    /// storm (30).
    pub conflicts_per_minute: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            window: Duration::from_secs(60),
            hot_writes_per_minute: 10,
            size_warn_percent: 50,
            stuck_after: Duration::from_secs(300),
            sync_timeout: Duration::from_secs(60),
            rediscover_every: Duration::from_secs(30),
            conflicts_per_minute: 30,
        }
    }
}

/// Why the doctor could not run at all. Trouble with single resources does not fail a run:
/// it is listed in [`Report::unwatched`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither aggregated nor per-group discovery answered.
    #[error("API discovery failed: {0}")]
    Discovery(#[source] kube::Error),
    /// Discovery found nothing that can be both listed and watched.
    #[error("the server offers no resource that can be listed and watched")]
    NothingToWatch,
    /// A watch task panicked.
    #[error("a watch task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// How a run is going, for a progress display.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Progress {
    /// Discovery is done; this many resources are being listed.
    Discovered {
        /// Resources to watch.
        resources: usize,
    },
    /// Every resource was listed (or the sync timeout passed); the window is open.
    Synced {
        /// Resources listed, or given up on because the server refuses them.
        listed: usize,
        /// Resources to watch.
        resources: usize,
        /// Objects known.
        objects: u64,
    },
    /// Once a second while the window is open.
    Watching {
        /// Time since the window opened.
        elapsed: Duration,
        /// The window's length.
        window: Duration,
        /// Objects known.
        objects: u64,
        /// Writes seen since the window opened.
        writes: u64,
    },
}

/// A resource the doctor watches, as discovery described it.
#[derive(Clone, Debug)]
pub(crate) struct WatchedResource {
    pub(crate) api: ApiResource,
    /// Objects written periodically by design (Leases are renewed every few seconds): their
    /// write rate is not a hot loop.
    pub(crate) heartbeat: bool,
}

impl WatchedResource {
    /// `configmaps`, `deployments.apps`: how kubectl names a resource.
    pub(crate) fn display_name(&self) -> String {
        if self.api.group.is_empty() {
            self.api.plural.clone()
        } else {
            format!("{}.{}", self.api.plural, self.api.group)
        }
    }

    fn key(&self) -> (String, String) {
        (self.api.group.clone(), self.api.plural.clone())
    }

    fn is_namespaces(&self) -> bool {
        self.api.group.is_empty() && self.api.plural == "namespaces"
    }
}

/// What the watch tasks share with the coordinator.
#[derive(Default)]
pub(crate) struct Shared {
    /// When the window opened; events before it only set the baseline.
    window_start: OnceLock<Instant>,
    objects: AtomicU64,
    writes: AtomicU64,
}

impl Shared {
    /// Milliseconds since the window opened, or `None` before it.
    pub(crate) fn window_ms(&self) -> Option<u32> {
        self.window_start
            .get()
            .map(|start| u32::try_from(start.elapsed().as_millis()).unwrap_or(u32::MAX))
    }

    pub(crate) fn object_added(&self) {
        self.objects.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn object_removed(&self) {
        self.objects.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn write_seen(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Watches the cluster behind `client` for [`Options::window`] and reports what it found.
/// `progress` is called as discovery, listing and the window go on.
pub async fn run(
    client: Client,
    options: &Options,
    mut progress: impl FnMut(Progress),
) -> Result<Report, Error> {
    let Discovered { resources, events } = discover(&client).await?;
    if resources.is_empty() {
        return Err(Error::NothingToWatch);
    }
    // The Events resource is listed before the window opens like every other.
    let to_list = resources.len() + usize::from(events.is_some());
    progress(Progress::Discovered { resources: to_list });

    let shared = Arc::new(Shared::default());
    let stop = CancellationToken::new();
    let (listed_tx, mut listed_rx) = mpsc::unbounded_channel();
    let spawn_watch = |resource: WatchedResource| {
        let api = resource.api.clone();
        let records = ResourceRecords::new(resource, shared.clone());
        tokio::spawn(watch(
            client.clone(),
            api,
            records,
            listed_tx.clone(),
            stop.clone(),
        ))
    };
    let events_task = events.map(|resource| {
        let latest = LatestEvents::new(resource.display_name());
        tokio::spawn(watch(
            client.clone(),
            resource.api,
            latest,
            listed_tx.clone(),
            stop.clone(),
        ))
    });
    let mut known: HashSet<(String, String)> = HashSet::new();
    let mut tasks = Vec::with_capacity(resources.len());
    for resource in &resources {
        known.insert(resource.key());
        tasks.push(spawn_watch(resource.clone()));
    }

    // Writes are counted from the moment every resource is listed, so that all are counted
    // over the same span; a resource the server keeps refusing must not hold the window shut.
    let mut listed = 0;
    let sync_deadline = tokio::time::sleep(options.sync_timeout);
    let mut sync_deadline = pin!(sync_deadline);
    while listed < to_list {
        tokio::select! {
            message = listed_rx.recv() => match message {
                Some(()) => listed += 1,
                None => break,
            },
            () = &mut sync_deadline => break,
        }
    }
    let counters_before = requests::scrape(&client).await;
    let window_start = Instant::now();
    let _ = shared.window_start.set(window_start);
    progress(Progress::Synced {
        listed,
        resources: to_list,
        objects: shared.objects.load(Ordering::Relaxed),
    });

    let window_end = window_start + options.window;
    let mut ticks = tokio::time::interval_at(
        window_start + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let rediscover_every = options.rediscover_every.max(Duration::from_millis(100));
    let mut rediscovery =
        tokio::time::interval_at(window_start + rediscover_every, rediscover_every);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(window_end) => break,
            _ = ticks.tick() => progress(Progress::Watching {
                elapsed: window_start.elapsed(),
                window: options.window,
                objects: shared.objects.load(Ordering::Relaxed),
                writes: shared.writes.load(Ordering::Relaxed),
            }),
            // A CRD installed during the window adds a resource; its first list is its
            // baseline, like everyone else's. A failed rediscovery just keeps what is watched.
            _ = rediscovery.tick() => {
                if let Ok(Ok(found)) = tokio::time::timeout_at(window_end, discover(&client)).await {
                    for resource in found.resources {
                        if known.insert(resource.key()) {
                            tasks.push(spawn_watch(resource));
                        }
                    }
                }
            }
        }
    }
    let window = window_start.elapsed();
    stop.cancel();

    let mut watched = Vec::with_capacity(tasks.len());
    for task in tasks {
        watched.push(task.await.map_err(Error::Task)?);
    }
    let latest_events = match events_task {
        Some(task) => Some(task.await.map_err(Error::Task)?),
        None => None,
    };
    let mut report = report::build(
        &watched,
        latest_events.as_ref(),
        options,
        window,
        shared.writes.load(Ordering::Relaxed),
        jiff::Timestamp::now(),
    );
    if let (Some(before), Some(after)) = (counters_before, requests::scrape(&client).await) {
        report.server_metrics = true;
        report.request_trouble =
            requests::trouble(&before, &after, window, options.conflicts_per_minute);
    }
    Ok(report)
}

/// What discovery found to watch.
struct Discovered {
    /// Every resource that can be listed and watched, at its most stable version, minus
    /// subresources and Events, sorted by group and name.
    resources: Vec<WatchedResource>,
    /// The Events to watch for the latest Event per object: events.k8s.io's, or core v1's
    /// where the server does not serve those (both are views of the same objects).
    events: Option<WatchedResource>,
}

async fn discover(client: &Client) -> Result<Discovered, Error> {
    // Aggregated discovery is two requests instead of one per group version; servers older
    // than 1.26 do not offer it.
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(discovery) => discovery,
        Err(_) => Discovery::new(client.clone())
            .run()
            .await
            .map_err(Error::Discovery)?,
    };
    let mut resources: BTreeMap<(String, String), WatchedResource> = BTreeMap::new();
    let (mut events_v1, mut core_events) = (None, None);
    for group in discovery.groups() {
        for (api, capabilities) in group.resources_by_stability() {
            if api.plural.contains('/')
                || !capabilities.supports_operation(verbs::LIST)
                || !capabilities.supports_operation(verbs::WATCH)
            {
                continue;
            }
            let resource = WatchedResource {
                heartbeat: api.group == "coordination.k8s.io" && api.plural == "leases",
                api,
            };
            match (resource.api.group.as_str(), resource.api.plural.as_str()) {
                ("events.k8s.io", "events") => events_v1 = Some(resource),
                ("", "events") => core_events = Some(resource),
                _ => {
                    resources.insert(resource.key(), resource);
                }
            }
        }
    }
    Ok(Discovered {
        resources: resources.into_values().collect(),
        events: events_v1.or(core_events),
    })
}

/// Where a watch's events go: an object resource's records, or the latest Events.
trait Sink: Send + 'static {
    /// A (re)list starts.
    fn relist_started(&mut self);
    /// An object of a (re)list.
    fn listed(&mut self, object: DynamicObject);
    /// A (re)list is complete.
    fn relist_done(&mut self);
    /// An object was created or changed.
    fn written(&mut self, object: DynamicObject);
    /// An object was deleted.
    fn deleted(&mut self, object: DynamicObject);
    /// The watch reported an error.
    fn problem(&mut self, error: String);
}

impl Sink for ResourceRecords {
    fn relist_started(&mut self) {
        ResourceRecords::relist_started(self);
    }
    fn listed(&mut self, object: DynamicObject) {
        ResourceRecords::listed(self, object);
    }
    fn relist_done(&mut self) {
        ResourceRecords::relist_done(self);
    }
    fn written(&mut self, object: DynamicObject) {
        ResourceRecords::written(self, object);
    }
    fn deleted(&mut self, object: DynamicObject) {
        ResourceRecords::deleted(self, object);
    }
    fn problem(&mut self, error: String) {
        self.problem = Some(error);
    }
}

impl Sink for LatestEvents {
    fn relist_started(&mut self) {}
    fn listed(&mut self, event: DynamicObject) {
        self.seen(&event);
    }
    fn relist_done(&mut self) {
        self.listed_once = true;
    }
    fn written(&mut self, event: DynamicObject) {
        self.seen(&event);
    }
    /// An Event that expired (its TTL passed) still was the last thing said.
    fn deleted(&mut self, _event: DynamicObject) {}
    fn problem(&mut self, error: String) {
        self.problem = Some(error);
    }
}

/// One resource's watch: every event goes into `sink` until `stop`; the sink is the result.
/// Signals `listed` once, after the first complete list (or on giving up).
async fn watch<S: Sink>(
    client: Client,
    api: ApiResource,
    mut sink: S,
    listed: mpsc::UnboundedSender<()>,
    stop: CancellationToken,
) -> S {
    let api: Api<DynamicObject> = Api::all_with(client, &api);
    let mut events = pin!(watcher::watcher(api, watcher::Config::default()));
    let mut signalled = false;
    loop {
        let event = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            event = events.next() => event,
        };
        match event {
            None => break,
            Some(Ok(Event::Init)) => sink.relist_started(),
            Some(Ok(Event::InitApply(object))) => sink.listed(object),
            Some(Ok(Event::InitDone)) => {
                sink.relist_done();
                if !signalled {
                    signalled = true;
                    let _ = listed.send(());
                }
            }
            Some(Ok(Event::Apply(object))) => sink.written(object),
            Some(Ok(Event::Delete(object))) => sink.deleted(object),
            Some(Err(error)) => {
                let refused = refusal(&error);
                sink.problem(error.to_string());
                // A resource the server refuses to list (RBAC, an aggregated API that is
                // down) will not start working within the window: stop retrying it.
                if refused && !signalled {
                    let _ = listed.send(());
                    break;
                }
            }
        }
    }
    sink
}

/// Whether the server turned the request down for good (4xx other than conflicts and rate
/// limits, or 503 from an unavailable aggregated API).
fn refusal(error: &watcher::Error) -> bool {
    let source = match error {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) => e,
        _ => return false,
    };
    matches!(source, kube::Error::Api(status) if matches!(status.code, 401 | 403 | 404 | 405 | 503))
}
