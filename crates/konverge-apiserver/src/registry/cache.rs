//! The watch cache: list and watch served from memory, one cache per resource, as
//! kube-apiserver's cacher does it.
//!
//! # What a cache holds
//!
//! A [`Cache`] follows one storage prefix (`rt.storage_prefix()`) with **one** store watch
//! (with `prev_kv`), whatever the number of clients. Its single writer, the feeder task, keeps:
//!
//! - the **state**: every object under the prefix, in key order, as a [`CachedObject`]: its
//!   JSON as clients get it (kube-apiserver's key order, `metadata.resourceVersion` set) and
//!   what selectors read (name, namespace, labels, the resource's selectable fields), as
//!   kube's cacher keeps objects with their label and field sets. Holding bytes rather than
//!   a decoded tree keeps an object's memory close to its JSON size; what needs the object
//!   itself (tables, metadata-only answers, protobuf, conversion, field selectors on fields
//!   not kept) decodes it on demand;
//! - the **ring**: the last [`WatchCacheConfig::capacity`] events ([`CachedEvent`]), each
//!   encoded once as the JSON watch line every plain-JSON watcher sends (the object is a
//!   slice of that line, shared with the state and with list answers), holding every event
//!   with a revision after [`since`](State::since);
//! - the **revision**: everything up to it has been applied — raised by events and by the
//!   store's progress notifications, which the feeder requests on demand (a consistent read
//!   asks for one).
//!
//! # Readers
//!
//! Lists take a snapshot of the state (a clone of `Arc`s under a read lock). Watchers *pull*
//! from the ring at their own pace from their own cursor, as the store's log watches do
//! ([`konverge_store::feed`]): the feeder never waits for a watcher, a slow watcher only
//! delays itself, and one that falls so far behind that the ring dropped events it has not
//! read yet ends with 410 Expired (its client relists). Every applied revision is published
//! on a [`tokio::sync::watch`] channel that wakes waiting readers.
//!
//! # Start, failures and relists
//!
//! A cache starts on first use (no cost at server start). It reads the prefix at
//! `max(current - capacity, compaction point)` and replays the store's history from there into
//! the ring, so a watch from a resourceVersion the client got shortly before the cache
//! existed (from a write, say) is served as the store would serve it. The cache counts as
//! ready once it has caught up with the store's revision at that read.
//!
//! When its watch fails, the feeder resumes it from the next revision (backend errors keep
//! the state); when the store compacted past it, it relists the same way, and watchers whose
//! cursor lies before the new ring get 410. A closed store closes the cache.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{
    Event, EventKind, KeyRange, KeyValue, KvStore, RangeRequest, Revision, WatchRequest,
    WatchResponse,
};
use serde_json::Value;
use tokio::sync::{Notify, watch};

use super::{decode, set_rv};
use crate::error::{ApiError, Result};
use crate::resources::meta;
use crate::resources::{FieldValue, ResourceType};

/// How the watch cache is sized and whether it is used.
#[derive(Debug, Clone)]
pub struct WatchCacheConfig {
    /// Serve lists and watches from the cache (default: yes). Without it every list reads the
    /// store and every watch opens its own store watch.
    pub enabled: bool,
    /// How many events each resource's cache keeps (default 10,000). A watch from an older
    /// resourceVersion, or a watcher that falls this far behind, gets 410 Expired.
    ///
    /// A count rather than an age: memory stays bounded under any write rate (at most this
    /// many events per resource, sharing objects with the state), and at kube-apiserver's
    /// default compaction interval (5 minutes) 10,000 events cover more than 30 writes a
    /// second to one resource — the window clients resume in is rarely shorter than the
    /// store's own history.
    pub capacity: usize,
    /// How long a read waits for the cache to catch up with a revision (default 3 s, as
    /// kube-apiserver). A consistent read that times out falls back to the store; a
    /// `resourceVersion` ahead of the cache is answered 504 Timeout.
    pub wait_timeout: Duration,
}

impl Default for WatchCacheConfig {
    fn default() -> Self {
        WatchCacheConfig {
            enabled: true,
            capacity: 10_000,
            wait_timeout: Duration::from_secs(3),
        }
    }
}

/// How many keys one read fetches while (re)listing a prefix.
const LIST_CHUNK: u64 = 5_000;

/// The longest pause between attempts after store failures.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How often a waiting reader asks again for a progress notification (a request made on a
/// store watch that then failed is never answered).
const PROGRESS_RETRY: Duration = Duration::from_millis(250);

/// The caches of every resource, started on first use.
pub(crate) struct Caches {
    store: Arc<dyn KvStore>,
    config: WatchCacheConfig,
    /// Where each cache records its reads of the store (kube's cacher lists through the etcd3
    /// store, so its lists count as `list` store calls).
    metrics: Arc<crate::metrics::Metrics>,
    caches: Mutex<HashMap<String, Arc<Cache>>>,
    /// The registry's counters of [`Changes`](crate::lister::Changes), which the caches of
    /// the counted kinds move for every change they apply.
    changes: Arc<[AtomicU64; crate::lister::Changes::COUNT]>,
    /// Dropped with the registry, or sent on by [`Caches::stop`]: the feeders stop.
    shutdown: watch::Sender<()>,
    shutdown_rx: watch::Receiver<()>,
}

impl Caches {
    pub(crate) fn new(
        store: Arc<dyn KvStore>,
        config: WatchCacheConfig,
        metrics: Arc<crate::metrics::Metrics>,
        changes: Arc<[AtomicU64; crate::lister::Changes::COUNT]>,
    ) -> Self {
        let (shutdown, shutdown_rx) = watch::channel(());
        Caches {
            store,
            config,
            metrics,
            caches: Mutex::new(HashMap::new()),
            changes,
            shutdown,
            shutdown_rx,
        }
    }

    /// Stops every feeder, running or started later.
    pub(crate) fn stop(&self) {
        self.shutdown.send_replace(());
    }

    pub(crate) fn config(&self) -> &WatchCacheConfig {
        &self.config
    }

    /// The cache of `rt`'s storage prefix, started now if it is not running yet.
    pub(crate) fn get(&self, rt: &ResourceType) -> Arc<Cache> {
        let prefix = rt.storage_prefix();
        let mut caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cache) = caches.get(&prefix) {
            return cache.clone();
        }
        let cache = Arc::new(Cache::new(
            Bytes::from(prefix.clone()),
            self.store.clone(),
            self.config.capacity.max(1),
            StoreTimer {
                metrics: self.metrics.clone(),
                resource: crate::metrics::group_resource(rt),
            },
            computed_fields(rt),
            super::changes_of(rt).map(|of| Counter {
                all: self.changes.clone(),
                index: of as usize,
            }),
        ));
        tokio::spawn(cache.clone().run(self.shutdown_rx.clone()));
        caches.insert(prefix, cache.clone());
        cache
    }

    /// Every running cache.
    pub(crate) fn running(&self) -> Vec<Arc<Cache>> {
        self.caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// How many objects the running cache of `prefix` holds, if one runs and has listed
    /// (a cache is not started for the asking).
    pub(crate) fn object_count(&self, prefix: &str) -> Option<usize> {
        let cache = self
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(prefix)
            .cloned()?;
        let state = cache.read_state();
        (state.listed && !state.closed).then_some(state.objects.len())
    }

    /// How many resources have a running cache.
    pub(crate) fn len(&self) -> usize {
        self.caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The type of a watch event that carries an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

impl EventType {
    /// The type as it goes on the wire.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// A selectable field whose value the cache keeps with every object (built-in resources
/// compute theirs; kube's cacher keeps the field set `GetAttrs` gives).
#[derive(Debug, Clone)]
pub(crate) struct ComputedField {
    label: String,
    value: fn(&Value) -> String,
}

/// The computed selectable fields of `rt`, kept with each of its cached objects.
fn computed_fields(rt: &ResourceType) -> Arc<[ComputedField]> {
    rt.selectable_fields
        .iter()
        .filter_map(|field| match field.value {
            FieldValue::Fn(value) => Some(ComputedField {
                label: field.label.clone(),
                value,
            }),
            FieldValue::Path(_) => None,
        })
        .collect()
}

/// One object as the cache holds it, shared by the state, the ring, lists and watchers.
pub(crate) struct CachedObject {
    /// The object's JSON as served: kube-apiserver's key order, resourceVersion set.
    json: Bytes,
    name: Box<str>,
    namespace: Box<str>,
    labels: BTreeMap<String, String>,
    /// Which fields `fields` holds (shared by every object of the cache).
    computed: Arc<[ComputedField]>,
    /// The value of each of `computed`, in its order.
    fields: Box<[Box<str>]>,
    /// The object's protobuf message as a list holds it, written by the first protobuf
    /// list that sends it and kept for the next ones (objects of built-in kinds only).
    protobuf: std::sync::OnceLock<Bytes>,
}

impl std::fmt::Debug for CachedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedObject")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("bytes", &self.json.len())
            .finish_non_exhaustive()
    }
}

impl CachedObject {
    /// What the cache keeps of `object` (decoded, resourceVersion set), whose JSON is `json`.
    fn new(object: &Value, json: Bytes, computed: &Arc<[ComputedField]>) -> CachedObject {
        let text = |s: Option<&str>| Box::<str>::from(s.unwrap_or(""));
        CachedObject {
            json,
            name: text(meta::meta_str(object, "name")),
            namespace: text(meta::meta_str(object, "namespace")),
            labels: meta::labels(object),
            computed: computed.clone(),
            fields: computed
                .iter()
                .map(|field| Box::from((field.value)(object)))
                .collect(),
            protobuf: std::sync::OnceLock::new(),
        }
    }

    /// The object's protobuf message as a list holds it among its items, encoded the first
    /// time it is asked for.
    pub(crate) fn protobuf_item(&self) -> Result<&Bytes> {
        if let Some(message) = self.protobuf.get() {
            return Ok(message);
        }
        let message = konverge_protobuf::encode_item(&self.decode()?)
            .map_err(|e| ApiError::internal(format!("encoding as protobuf: {e}")))?;
        Ok(self.protobuf.get_or_init(|| Bytes::from(message)))
    }

    /// The object's JSON, exactly as lists and watches send it.
    pub(crate) fn json(&self) -> &Bytes {
        &self.json
    }

    /// The object, decoded.
    pub(crate) fn decode(&self) -> Result<Value> {
        serde_json::from_slice(&self.json)
            .map_err(|e| ApiError::internal(format!("watch cache object is not JSON: {e}")))
    }

    /// `metadata.name`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.namespace` (empty for cluster-scoped objects).
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.labels`.
    pub(crate) fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// The kept value of selectable field `label`, if the cache computed it with `value`
    /// (the same function: the resource asking may be another version of the one cached).
    pub(crate) fn field(&self, label: &str, value: fn(&Value) -> String) -> Option<&str> {
        self.computed
            .iter()
            .position(|f| f.label == label && std::ptr::fn_addr_eq(f.value, value))
            .and_then(|i| self.fields.get(i))
            .map(|v| &**v)
    }
}

/// One change, encoded once and shared by every watcher.
#[derive(Debug)]
pub(crate) struct CachedEvent {
    /// The revision of the change.
    pub(crate) revision: Revision,
    /// The object's storage key.
    pub(crate) key: Bytes,
    /// How the change looks to a watcher that sees every object: `ADDED` (a creation),
    /// `MODIFIED` or `DELETED`.
    pub(crate) kind: EventType,
    /// The object after the change; for a deletion, the object as it was, with the
    /// deletion's revision as its resourceVersion (as kube-apiserver sends it).
    pub(crate) object: Arc<CachedObject>,
    /// The object before the change (`None` for a creation).
    pub(crate) prev: Option<Arc<CachedObject>>,
    /// The event as a JSON watch line of type `kind`; `object`'s JSON is a slice of it.
    pub(crate) line: Bytes,
}

impl CachedEvent {
    /// Whether the change deleted the object.
    pub(crate) fn deleted(&self) -> bool {
        self.kind == EventType::Deleted
    }
}

/// Encodes a decoded object (resourceVersion set) for the cache: a watch line of type
/// `kind` holding it, or without `kind` just its JSON.
fn encode(
    object: &Value,
    kind: Option<EventType>,
    size_hint: usize,
    computed: &Arc<[ComputedField]>,
) -> Result<(Bytes, CachedObject)> {
    let failed = |e: serde_json::Error| ApiError::internal(format!("encoding an object: {e}"));
    let (line, json) = match kind {
        Some(kind) => {
            let (line, at) =
                crate::json::encode_watch_line(kind.as_str(), object, size_hint).map_err(failed)?;
            let json = line.slice(at);
            (line, json)
        }
        None => {
            let mut json = Vec::with_capacity(size_hint + crate::json::ENCODING_SLACK);
            crate::json::write_object_json(&mut json, object).map_err(failed)?;
            (Bytes::new(), Bytes::from(json))
        }
    };
    Ok((line, CachedObject::new(object, json, computed)))
}

/// What a cache has applied, as its readers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Every change up to this revision is in.
    pub(crate) revision: Revision,
    /// The initial (or last) list is done and the replay caught up with it.
    pub(crate) ready: bool,
    /// The store closed; the cache serves nothing any more.
    pub(crate) closed: bool,
}

/// Why a wait for the cache did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitError {
    /// The cache did not get there in time; it is at this revision.
    Timeout(Revision),
    /// The cache is closed.
    Closed,
}

/// A consistent copy of part of the state.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The revision the copy is exactly at.
    pub(crate) revision: Revision,
    /// Objects in key order, with their keys.
    pub(crate) items: Vec<(Bytes, Arc<CachedObject>)>,
    /// How many objects the range holds (at least `items.len()`).
    pub(crate) total: usize,
}

/// What a watcher reads from the ring.
#[derive(Debug)]
pub(crate) enum Read {
    /// Events after the cursor; `caught_up` is the cache's revision when these were the last.
    Events {
        events: Vec<Arc<CachedEvent>>,
        caught_up: Option<Revision>,
    },
    /// The ring no longer holds every event after the cursor: it starts after `since`.
    TooOld { since: Revision },
    /// The cache is closed.
    Closed,
}

#[derive(Debug, Default)]
struct State {
    /// Every change up to here is applied.
    revision: Revision,
    /// The ring holds every event with a revision after this one.
    since: Revision,
    /// Ready once `revision` reaches this (the store's revision at the last list).
    ready_at: Revision,
    /// A list has been read (the state means something).
    listed: bool,
    closed: bool,
    objects: BTreeMap<Bytes, Arc<CachedObject>>,
    ring: VecDeque<Arc<CachedEvent>>,
}

impl State {
    fn applied(&self) -> Applied {
        Applied {
            revision: self.revision,
            ready: self.listed && self.revision >= self.ready_at,
            closed: self.closed,
        }
    }
}

/// Records a cache's reads of the store under its resource's name.
struct StoreTimer {
    metrics: Arc<crate::metrics::Metrics>,
    /// `configmaps`, `deployments.apps`.
    resource: String,
}

/// The counter of [`Changes`](crate::lister::Changes) a cache moves.
struct Counter {
    all: Arc<[AtomicU64; crate::lister::Changes::COUNT]>,
    index: usize,
}

impl Counter {
    fn bump(&self) {
        self.all[self.index].fetch_add(1, Ordering::AcqRel);
    }
}

/// The cache of one resource.
pub(crate) struct Cache {
    prefix: Bytes,
    store: Arc<dyn KvStore>,
    timer: StoreTimer,
    capacity: usize,
    /// The selectable fields kept with every object.
    computed: Arc<[ComputedField]>,
    state: RwLock<State>,
    applied: watch::Sender<Applied>,
    progress_wanted: Notify,
    /// Moved after every change applied, for readers that keep a view of the resource
    /// (RBAC, admission configuration, quotas): a change another server wrote reaches them
    /// this way.
    changed: Option<Counter>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("prefix", &self.prefix)
            .field("applied", &*self.applied.borrow())
            .finish_non_exhaustive()
    }
}

enum Stop {
    /// Start over with a list (the store compacted past the cache).
    Relist,
    /// Watch again from the next revision after a pause.
    Retry,
    /// The store closed or the registry went away.
    Exit,
}

impl Cache {
    fn new(
        prefix: Bytes,
        store: Arc<dyn KvStore>,
        capacity: usize,
        timer: StoreTimer,
        computed: Arc<[ComputedField]>,
        changed: Option<Counter>,
    ) -> Self {
        let (applied, _) = watch::channel(Applied {
            revision: 0,
            ready: false,
            closed: false,
        });
        Cache {
            prefix,
            store,
            timer,
            capacity,
            computed,
            state: RwLock::new(State::default()),
            applied,
            progress_wanted: Notify::new(),
            changed,
        }
    }

    fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, applied: Applied) {
        self.applied.send_if_modified(|current| {
            let changed = *current != applied;
            *current = applied;
            changed
        });
    }

    /// What the cache has applied now.
    pub(crate) fn applied(&self) -> Applied {
        *self.applied.borrow()
    }

    /// A receiver that wakes on every newly applied revision.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Applied> {
        self.applied.subscribe()
    }

    /// Asks the feeder for a progress notification (requests coalesce).
    pub(crate) fn want_progress(&self) {
        self.progress_wanted.notify_one();
    }

    /// Waits until the cache is ready and, with `revision`, has applied it.
    pub(crate) async fn wait_until(
        &self,
        revision: Option<Revision>,
        timeout: Duration,
    ) -> Result<Revision, WaitError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.subscribe();
        loop {
            let applied = *rx.borrow_and_update();
            if applied.closed {
                return Err(WaitError::Closed);
            }
            if applied.ready && revision.is_none_or(|r| applied.revision >= r) {
                return Ok(applied.revision);
            }
            if revision.is_some() {
                self.want_progress();
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(WaitError::Timeout(applied.revision));
            }
            let slice = deadline.min(now + PROGRESS_RETRY);
            match tokio::time::timeout_at(slice, rx.changed()).await {
                Ok(Ok(())) | Err(_) => {}
                Ok(Err(_)) => return Err(WaitError::Closed),
            }
        }
    }

    /// The objects whose keys start with `prefix` (a namespace's, or the whole resource's),
    /// at the cache's revision; with `max`, only the first `max` of them (`total` counts all).
    pub(crate) fn snapshot(&self, prefix: &[u8], max: Option<usize>) -> Snapshot {
        let start = Bound::Included(Bytes::copy_from_slice(prefix));
        let end = match konverge_store::prefix_end(prefix) {
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        };
        let state = self.read_state();
        let mut range = state.objects.range((start, end));
        let mut items = Vec::new();
        let mut total = 0;
        for (key, obj) in range.by_ref() {
            items.push((key.clone(), obj.clone()));
            total += 1;
            if max.is_some_and(|m| items.len() >= m) {
                break;
            }
        }
        total += range.count();
        Snapshot {
            revision: state.revision,
            items,
            total,
        }
    }

    /// Up to `max` events after `cursor`.
    pub(crate) fn read_after(&self, cursor: Revision, max: usize) -> Read {
        let state = self.read_state();
        if state.closed {
            return Read::Closed;
        }
        if cursor < state.since {
            return Read::TooOld { since: state.since };
        }
        let start = state.ring.partition_point(|e| e.revision <= cursor);
        let events: Vec<_> = state.ring.range(start..).take(max).cloned().collect();
        let caught_up = (start + events.len() == state.ring.len()).then_some(state.revision);
        Read::Events { events, caught_up }
    }

    /// Drops the events before `revision` from the ring, as compacting the store at
    /// `revision` drops its history: a watch can start after `revision - 1` at the earliest
    /// (never after more than the cache has applied), and a watcher whose cursor lies before
    /// that reads [`Read::TooOld`] (410). Every watcher is woken to find out at once.
    pub(crate) fn forget_history_before(&self, revision: Revision) {
        let mut state = self.write_state();
        let since = (revision - 1).min(state.revision).max(state.since);
        let dropped = state.ring.partition_point(|e| e.revision <= since);
        state.ring.drain(..dropped);
        state.since = since;
        drop(state);
        self.applied.send_modify(|_| {});
    }

    /// The oldest revision a watch can start after.
    #[cfg(test)]
    fn since(&self) -> Revision {
        self.read_state().since
    }

    /// The feeder: the only writer of the state. Runs until the store closes or the registry
    /// is dropped.
    async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<()>) {
        let mut backoff = Duration::from_millis(50);
        let mut listed = false;
        loop {
            let stop = if listed {
                self.follow(&mut shutdown, &mut backoff).await
            } else {
                match self.relist().await {
                    Ok(()) => {
                        listed = true;
                        continue;
                    }
                    Err(konverge_store::Error::Closed) => Stop::Exit,
                    Err(err) => {
                        tracing::warn!(error = %err, prefix = ?self.prefix, "watch cache list failed");
                        Stop::Retry
                    }
                }
            };
            match stop {
                Stop::Relist => listed = false,
                Stop::Retry => {
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        _ = shutdown.changed() => return,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Stop::Exit => {
                    let mut state = self.write_state();
                    state.closed = true;
                    let applied = state.applied();
                    drop(state);
                    self.publish(applied);
                    return;
                }
            }
        }
    }

    /// Reads the prefix at `max(current - capacity, compaction point)` into a new state with
    /// an empty ring; the watch that follows replays the history after it.
    async fn relist(&self) -> konverge_store::Result<()> {
        let current = self.store.current_revision().await?;
        let capacity = Revision::try_from(self.capacity).unwrap_or(Revision::MAX);
        let mut at = current.saturating_sub(capacity).max(1);
        let kvs = loop {
            match self.read_prefix(at).await {
                Ok(kvs) => break kvs,
                Err(konverge_store::Error::Compacted { compact_revision })
                    if compact_revision > at =>
                {
                    at = compact_revision;
                }
                Err(err) => return Err(err),
            }
        };
        let mut objects = BTreeMap::new();
        for kv in &kvs {
            match self.standalone(kv) {
                Ok(obj) => {
                    objects.insert(Bytes::copy_from_slice(&kv.key), Arc::new(obj));
                }
                Err(err) => {
                    tracing::warn!(key = ?kv.key, error = %err.message, "watch cache skips an undecodable object");
                }
            }
        }
        let mut state = self.write_state();
        *state = State {
            revision: at,
            since: at,
            ready_at: current,
            listed: true,
            closed: false,
            objects,
            ring: VecDeque::new(),
        };
        let applied = state.applied();
        drop(state);
        self.publish(applied);
        // What was missed between two lists is a change too.
        if let Some(counter) = &self.changed {
            counter.bump();
        }
        Ok(())
    }

    async fn read_prefix(
        &self,
        at: Revision,
    ) -> konverge_store::Result<Vec<konverge_store::KeyValue>> {
        let end = konverge_store::prefix_end(&self.prefix);
        let mut cursor = self.prefix.clone();
        let mut kvs = Vec::new();
        loop {
            let range = match &end {
                Some(end) => KeyRange::range(cursor.clone(), end.clone()),
                None => KeyRange::From(cursor.clone()),
            };
            let started = std::time::Instant::now();
            let resp = self
                .store
                .range(
                    RangeRequest::new(range)
                        .at_revision(at)
                        .with_limit(LIST_CHUNK),
                )
                .await;
            self.timer.metrics.record_store_call(
                "list",
                &self.timer.resource,
                started.elapsed(),
                resp.as_ref().err(),
            );
            let resp = resp?;
            let more = resp.more;
            kvs.extend(resp.kvs);
            match kvs.last() {
                Some(last) if more => {
                    let mut next = last.key.to_vec();
                    next.push(0);
                    cursor = Bytes::from(next);
                }
                _ => return Ok(kvs),
            }
        }
    }

    /// Watches the store from the next revision and applies what comes, until it fails.
    async fn follow(&self, shutdown: &mut watch::Receiver<()>, backoff: &mut Duration) -> Stop {
        let from = self.read_state().revision + 1;
        let request = WatchRequest::new(KeyRange::Prefix(self.prefix.clone()))
            .from_revision(from)
            .with_prev_kv();
        let mut stream = match self.store.watch(request).await {
            Ok(stream) => stream,
            Err(err) => return self.stop_for(err),
        };
        // Whoever waits for a revision learns it soon (a request made on a failed watch is
        // never answered).
        stream.request_progress();
        loop {
            tokio::select! {
                message = stream.recv() => match message {
                    Some(Ok(WatchResponse::Events(events))) => {
                        *backoff = Duration::from_millis(50);
                        self.apply(events);
                    }
                    Some(Ok(WatchResponse::Progress(revision))) => {
                        *backoff = Duration::from_millis(50);
                        self.progress(revision);
                    }
                    Some(Err(err)) => return self.stop_for(err),
                    None => return Stop::Retry,
                },
                () = self.progress_wanted.notified() => stream.request_progress(),
                _ = shutdown.changed() => return Stop::Exit,
            }
        }
    }

    fn stop_for(&self, err: konverge_store::Error) -> Stop {
        match err {
            konverge_store::Error::Compacted { compact_revision } => {
                tracing::info!(prefix = ?self.prefix, compact_revision, "watch cache fell behind compaction; relisting");
                Stop::Relist
            }
            konverge_store::Error::Closed => Stop::Exit,
            err => {
                tracing::warn!(error = %err, prefix = ?self.prefix, "watch cache's store watch failed; resuming");
                Stop::Retry
            }
        }
    }

    fn progress(&self, revision: Revision) {
        let mut state = self.write_state();
        if revision <= state.revision {
            return;
        }
        state.revision = revision;
        let applied = state.applied();
        drop(state);
        self.publish(applied);
    }

    /// A stored object as the cache keeps it outside any event (listed, or filled in).
    fn standalone(&self, kv: &KeyValue) -> Result<CachedObject> {
        let object = decode(kv)?;
        encode(&object, None, kv.value.len(), &self.computed).map(|(_, obj)| obj)
    }

    /// Applies one message of events: encodes each once, then updates the state and the
    /// ring.
    fn apply(&self, events: Vec<Event>) {
        let Some(last) = events.last().map(Event::revision) else {
            return;
        };
        // The feeder is the only writer, so what it reads of the state stays true until it
        // takes the write lock; readers are not held up meanwhile (encoding holds no lock).
        let mut changes: Vec<(Bytes, Option<Arc<CachedObject>>)> = Vec::with_capacity(events.len());
        let mut out = Vec::with_capacity(events.len());
        let mut overlay: HashMap<Bytes, Option<Arc<CachedObject>>> = HashMap::new();
        for event in &events {
            let key = Bytes::copy_from_slice(&event.kv.key);
            let revision = event.revision();
            let prev = match overlay.get(&key) {
                Some(prev) => prev.clone(),
                None => self.read_state().objects.get(&key).cloned(),
            };
            // The state is the store's state before this event; the store's prev_kv only
            // fills in should the two ever disagree.
            let prev = prev.or_else(|| {
                let kv = event.prev_kv.as_ref()?;
                tracing::warn!(key = ?kv.key, revision, "watch cache was missing an object the store had");
                self.standalone(kv).ok().map(Arc::new)
            });
            let put = match event.kind {
                EventKind::Put => {
                    let kind = match prev {
                        Some(_) => EventType::Modified,
                        None => EventType::Added,
                    };
                    match self.encode_put(&event.kv, kind) {
                        Ok(put) => Some(put),
                        Err(err) => {
                            // An undecodable value: the object is gone as far as clients can
                            // tell.
                            tracing::warn!(key = ?event.kv.key, revision, error = %err.message, "watch cache skips an undecodable object");
                            None
                        }
                    }
                }
                EventKind::Delete => None,
            };
            let change = put.or_else(|| {
                let prev = prev.as_deref()?;
                self.encode_deletion(prev, revision)
                    .inspect_err(|err| tracing::warn!(key = ?event.kv.key, revision, error = %err.message, "watch cache cannot encode a deletion"))
                    .ok()
            });
            let new = change.and_then(|(kind, line, object)| {
                let object = Arc::new(object);
                out.push(Arc::new(CachedEvent {
                    revision,
                    key: key.clone(),
                    kind,
                    object: object.clone(),
                    prev,
                    line,
                }));
                (kind != EventType::Deleted).then_some(object)
            });
            overlay.insert(key.clone(), new.clone());
            changes.push((key, new));
        }
        let mut state = self.write_state();
        for (key, after) in changes {
            match after {
                Some(obj) => {
                    state.objects.insert(key, obj);
                }
                None => {
                    state.objects.remove(&key);
                }
            }
        }
        state.ring.extend(out);
        evict(&mut state, self.capacity);
        state.revision = state.revision.max(last);
        let applied = state.applied();
        drop(state);
        self.publish(applied);
        if let Some(counter) = &self.changed {
            counter.bump();
        }
    }

    /// A written object's event of type `kind`.
    fn encode_put(
        &self,
        kv: &KeyValue,
        kind: EventType,
    ) -> Result<(EventType, Bytes, CachedObject)> {
        let object = decode(kv)?;
        let (line, cached) = encode(&object, Some(kind), kv.value.len(), &self.computed)?;
        Ok((kind, line, cached))
    }

    /// The `DELETED` event of `prev`, with the deletion's revision as its resourceVersion.
    fn encode_deletion(
        &self,
        prev: &CachedObject,
        revision: Revision,
    ) -> Result<(EventType, Bytes, CachedObject)> {
        let mut gone = prev.decode()?;
        set_rv(&mut gone, revision);
        let kind = EventType::Deleted;
        let (line, cached) = encode(&gone, Some(kind), prev.json.len(), &self.computed)?;
        Ok((kind, line, cached))
    }
}

/// Drops the oldest events beyond `capacity`, whole revisions at a time.
fn evict(state: &mut State, capacity: usize) {
    while state.ring.len() > capacity {
        let Some(oldest) = state.ring.pop_front() else {
            break;
        };
        state.since = oldest.revision;
        while state
            .ring
            .front()
            .is_some_and(|e| e.revision == oldest.revision)
        {
            state.ring.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use konverge_store::KeyValue;
    use serde_json::json;

    fn kv(key: &str, value: Value, mod_revision: Revision) -> KeyValue {
        KeyValue {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::from(serde_json::to_vec(&value).expect("json")),
            create_revision: mod_revision,
            mod_revision,
            version: 1,
        }
    }

    fn put(key: &str, name: &str, rev: Revision, prev: Option<KeyValue>) -> Event {
        Event {
            kind: EventKind::Put,
            kv: kv(key, json!({"metadata": {"name": name}}), rev),
            prev_kv: prev,
        }
    }

    fn cache(capacity: usize) -> Cache {
        let cache = Cache::new(
            Bytes::from_static(b"/registry/configmaps/"),
            Arc::new(konverge_store::MemStore::new()),
            capacity,
            StoreTimer {
                metrics: Arc::new(crate::metrics::Metrics::new()),
                resource: "configmaps".into(),
            },
            Arc::from(Vec::new()),
            None,
        );
        {
            let mut state = cache.write_state();
            state.listed = true;
            state.revision = 1;
            state.since = 1;
            state.ready_at = 1;
        }
        cache
    }

    fn rv(obj: &CachedObject) -> String {
        obj.decode()
            .expect("json")
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .expect("rv")
            .to_string()
    }

    #[test]
    fn a_batch_that_creates_changes_and_deletes_one_key_keeps_every_step() {
        let cache = cache(100);
        let k = "/registry/configmaps/default/a";
        let created = kv(k, json!({"metadata": {"name": "a"}}), 2);
        cache.apply(vec![
            put(k, "a", 2, None),
            put(k, "a", 3, Some(created.clone())),
            Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    value: Bytes::new(),
                    mod_revision: 4,
                    ..created.clone()
                },
                prev_kv: Some(created),
            },
        ]);
        let Read::Events { events, caught_up } = cache.read_after(1, 10) else {
            panic!("events");
        };
        assert_eq!(caught_up, Some(4));
        let steps: Vec<_> = events
            .iter()
            .map(|e| (e.revision, e.deleted(), e.prev.is_some(), rv(&e.object)))
            .collect();
        assert_eq!(
            steps,
            vec![
                (2, false, false, "2".into()),
                (3, false, true, "3".into()),
                (4, true, true, "4".into()),
            ]
        );
        assert_eq!(rv(events[2].prev.as_deref().expect("prev")), "3");
        assert!(
            cache
                .snapshot(b"/registry/configmaps/", None)
                .items
                .is_empty()
        );
    }

    #[test]
    fn the_ring_drops_whole_revisions_and_readers_behind_it_are_too_old() {
        let cache = cache(3);
        for rev in 2..=6 {
            cache.apply(vec![put(
                &format!("/registry/configmaps/default/o{rev}"),
                "o",
                rev,
                None,
            )]);
        }
        assert_eq!(cache.since(), 3);
        assert!(matches!(cache.read_after(2, 10), Read::TooOld { since: 3 }));
        let Read::Events { events, caught_up } = cache.read_after(3, 2) else {
            panic!("events");
        };
        assert_eq!(
            events.iter().map(|e| e.revision).collect::<Vec<_>>(),
            [4, 5]
        );
        assert_eq!(caught_up, None);
        let snapshot = cache.snapshot(b"/registry/configmaps/default/", Some(2));
        assert_eq!(
            (snapshot.items.len(), snapshot.total, snapshot.revision),
            (2, 5, 6)
        );
    }

    #[test]
    fn forgetting_history_keeps_what_a_store_compacted_at_the_revision_keeps() {
        let cache = cache(100);
        for rev in 2..=6 {
            cache.apply(vec![put(
                &format!("/registry/configmaps/default/o{rev}"),
                "o",
                rev,
                None,
            )]);
        }
        cache.forget_history_before(6);
        assert_eq!(cache.since(), 5);
        assert!(matches!(cache.read_after(4, 10), Read::TooOld { since: 5 }));
        let Read::Events { events, .. } = cache.read_after(5, 10) else {
            panic!("events");
        };
        assert_eq!(events.iter().map(|e| e.revision).collect::<Vec<_>>(), [6]);
        // Never past what the cache has applied, and never back.
        cache.forget_history_before(100);
        assert_eq!(cache.since(), 6);
        cache.forget_history_before(3);
        assert_eq!(cache.since(), 6);
        assert_eq!(cache.snapshot(b"/registry/configmaps/", None).total, 5);
    }

    #[test]
    fn progress_raises_the_revision_and_makes_the_cache_ready() {
        let cache = cache(3);
        cache.write_state().ready_at = 10;
        cache.progress(5);
        assert!(!cache.applied().ready);
        cache.progress(10);
        assert_eq!(
            cache.applied(),
            Applied {
                revision: 10,
                ready: true,
                closed: false
            }
        );
        cache.progress(7);
        assert_eq!(cache.applied().revision, 10);
    }
}
