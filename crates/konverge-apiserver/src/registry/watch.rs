//! Watch: the store's ordered, exactly-once change stream turned into Kubernetes watch
//! events, with selectors, initial events, bookmarks and expiry.
//!
//! Served from the resource's watch cache (`cache.rs`): every watcher reads the same
//! encoded events from the cache's ring at its own pace, and the HTTP layer sends the JSON
//! line the cache built once for all of them ([`Sent::Cached`]). Without the cache (turned
//! off, or not caught up in time) a watch opens its own store watch and decodes for itself.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use konverge_store::{Event, EventKind, KeyRange, WatchRequest, WatchResponse};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::cache::{Cache, CachedEvent, CachedObject, EventType, Read};
use super::list::{ListOptions, ReadAt, selected, selected_cached, selects_on_content, too_large};
use super::{Registry, conversion, decode, parse_rv, set_rv, target};
use crate::error::{ApiError, Result};
use crate::resources::ResourceType;
use crate::resources::crd::ConversionWebhook;

/// The options of a watch.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Selectors and the `resourceVersion` to start from.
    pub list: ListOptions,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds`: the watch ends after this long.
    pub timeout: Option<Duration>,
    /// How often to send a bookmark when bookmarks are allowed.
    pub bookmark_interval: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            list: ListOptions::default(),
            allow_bookmarks: false,
            send_initial_events: None,
            timeout: None,
            bookmark_interval: Duration::from_secs(10),
        }
    }
}

/// One event of a watch. Objects are shared (`Arc`) between every watcher the watch cache
/// serves.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// An object appeared (was created, or began to match the selectors).
    Added(Arc<Value>),
    /// An object changed.
    Modified(Arc<Value>),
    /// An object went away (was deleted, or stopped matching the selectors).
    Deleted(Arc<Value>),
    /// Everything up to this object's resourceVersion has been sent.
    Bookmark(Arc<Value>),
    /// The watch failed; a `Status` follows and the stream ends.
    Error(Arc<Value>),
}

impl WatchEvent {
    /// The event's type (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`) and object.
    pub fn parts(&self) -> (&'static str, &Arc<Value>) {
        match self {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(o) => ("BOOKMARK", o),
            WatchEvent::Error(o) => ("ERROR", o),
        }
    }

    /// The event as it goes on the wire: `{"type": ..., "object": ...}`.
    pub fn to_json(&self) -> Value {
        let (kind, object) = self.parts();
        json!({"type": kind, "object": Value::clone(object)})
    }

    /// The object the event carries.
    pub fn object(&self) -> &Value {
        self.parts().1
    }

    /// The same kind of event with another object (for table and metadata-only watches).
    pub fn with_object(&self, object: Value) -> WatchEvent {
        let object = Arc::new(object);
        match self {
            WatchEvent::Added(_) => WatchEvent::Added(object),
            WatchEvent::Modified(_) => WatchEvent::Modified(object),
            WatchEvent::Deleted(_) => WatchEvent::Deleted(object),
            WatchEvent::Bookmark(_) => WatchEvent::Bookmark(object),
            WatchEvent::Error(_) => WatchEvent::Error(object),
        }
    }
}

impl EventType {
    /// A watch event of this type carrying `object`.
    fn event(self, object: Arc<Value>) -> WatchEvent {
        match self {
            EventType::Added => WatchEvent::Added(object),
            EventType::Modified => WatchEvent::Modified(object),
            EventType::Deleted => WatchEvent::Deleted(object),
        }
    }
}

/// A watch event as the feeds hand it to the HTTP layer.
#[derive(Debug, Clone)]
pub(crate) enum Sent {
    /// A decoded event (bookmarks, errors, watches served from the store, converted or
    /// defaulted objects).
    Decoded(WatchEvent),
    /// An object of the watch cache, as its JSON.
    Cached(CachedSend),
}

/// An object of the watch cache sent as an event of type `kind`.
#[derive(Debug, Clone)]
pub(crate) struct CachedSend {
    kind: EventType,
    object: Arc<CachedObject>,
    /// The cache's line of the event, when this is the event as the cache built it.
    line: Option<Bytes>,
}

impl CachedSend {
    /// An event of the ring as this watch sends it: its line is shared when the type is
    /// the one the cache wrote it with.
    fn of(kind: EventType, event: &CachedEvent) -> CachedSend {
        CachedSend {
            kind,
            object: event.object.clone(),
            line: (kind == event.kind).then(|| event.line.clone()),
        }
    }

    /// The event as a line of a JSON watch stream: the cache's own line, or one around the
    /// object's cached JSON.
    pub(crate) fn json_line(&self) -> Bytes {
        match &self.line {
            Some(line) => line.clone(),
            None => crate::json::watch_line_around(self.kind.as_str(), self.object.json()),
        }
    }
}

impl Sent {
    /// The event, decoded.
    pub(crate) fn into_event(self) -> WatchEvent {
        match self {
            Sent::Decoded(event) => event,
            Sent::Cached(cached) => match cached.object.decode() {
                Ok(object) => cached.kind.event(Arc::new(object)),
                Err(err) => error(&err),
            },
        }
    }
}

/// How many events a watch buffers for its client before its task waits.
const BUFFER: usize = 256;

/// How many events a cached watcher takes from the ring at a time.
const READ_BATCH: usize = 256;

impl Registry {
    /// Starts a watch. Errors found before the first event (bad options, a resourceVersion
    /// ahead of the store) are returned here; a resourceVersion older than the retained
    /// history (the watch cache's window, or the store's compaction) is an `ERROR` event with
    /// a 410 `Status`, as kube-apiserver sends it.
    ///
    /// With the watch cache (the default), every watcher of a resource reads the same
    /// decoded events from the cache's ring; initial events come from the cache's state
    /// (consistent with the store for `resourceVersion` unset, as they are for `"0"`), and
    /// bookmarks carry the cache's progress. A watcher that falls behind the ring ends with
    /// 410. If the cache cannot catch up in time, the watch is served from the store.
    pub async fn watch(
        &self,
        rt: Arc<ResourceType>,
        ns: Option<String>,
        opts: WatchOptions,
    ) -> Result<impl Stream<Item = WatchEvent> + Send + 'static + use<>> {
        Ok(self.watch_sent(rt, ns, opts).await?.map(Sent::into_event))
    }

    /// [`Registry::watch`] for the HTTP layer: events of the watch cache stay as the JSON
    /// the cache built once for every watcher.
    pub(crate) async fn watch_sent(
        &self,
        rt: Arc<ResourceType>,
        ns: Option<String>,
        opts: WatchOptions,
    ) -> Result<impl Stream<Item = Sent> + Send + 'static + use<>> {
        if let Some(fields) = &opts.list.field_selector {
            super::list::check_field_selector(&rt, fields)?;
        }
        let rv = opts
            .list
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty());
        let initial = match (rv, opts.send_initial_events) {
            (_, Some(send)) => {
                if send && !opts.allow_bookmarks {
                    return Err(ApiError::invalid(
                        "ListOptions",
                        "meta.k8s.io",
                        "",
                        vec![crate::error::Cause::forbidden(
                            "sendInitialEvents",
                            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled and allowWatchBookmarks is set",
                        )],
                    ));
                }
                send
            }
            (None | Some("0"), None) => true,
            (Some(_), None) => false,
        };
        let (tx, rx) = mpsc::channel::<Sent>(BUFFER);
        let deadline = opts.timeout.map(|t| tokio::time::Instant::now() + t);
        // Resources converted by a webhook are converted by the feeds, which must wait for
        // it (and end the watch when it fails).
        let converting = conversion::webhook(&rt).map(|hook| Converting {
            registry: self.clone(),
            hook: hook.clone(),
        });
        // The feeds select on the stored form; clients get the served form.
        let served = (rt.changes_on_read() && converting.is_none()).then(|| rt.clone());
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        })
        .map(move |sent| {
            let Some(rt) = &served else {
                return sent;
            };
            let event = sent.into_event();
            Sent::Decoded(match &event {
                WatchEvent::Error(_) | WatchEvent::Bookmark(_) => event,
                _ => {
                    let mut obj = event.object().clone();
                    rt.to_served(&mut obj);
                    event.with_object(obj)
                }
            })
        });
        if self.caches.config().enabled
            && let Some((cache, initial, cursor)) =
                self.start_cached(&rt, ns.as_deref(), initial, rv).await?
        {
            let prefix = Bytes::from(rt.namespace_prefix(ns.as_deref()));
            let feed = CachedFeed {
                cache,
                rt,
                prefix,
                opts,
                tx,
                deadline,
                converting,
            };
            tokio::spawn(feed.run(initial, cursor));
            return Ok(stream);
        }
        let current = self.current_revision(&rt).await?;
        let start_after = match rv {
            Some(rv) if !initial => {
                let rv = parse_rv(rv)?;
                if rv > current {
                    return Err(too_large(&rt, rv, current));
                }
                rv
            }
            _ => current,
        };
        let feed = Feed {
            registry: self.clone(),
            rt,
            ns,
            opts,
            tx,
            deadline,
            converting,
        };
        tokio::spawn(feed.run(initial, start_after));
        Ok(stream)
    }

    /// Where a cached watch starts: the cache, the initial objects (if it sends them) and the
    /// revision after which it streams. `None` when the cache cannot catch up in time.
    async fn start_cached(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        initial: bool,
        rv: Option<&str>,
    ) -> Result<Option<(Arc<Cache>, Option<Vec<Arc<CachedObject>>>, i64)>> {
        let cache = self.caches.get(rt);
        let timeout = self.caches.config().wait_timeout;
        // `resourceVersion` unset: the latest state (a consistent read); "0": any state.
        let wait = match rv {
            Some("0") => None,
            None => Some(self.current_revision(rt).await?),
            Some(_) if initial => Some(self.current_revision(rt).await?),
            Some(rv) => {
                let rv = parse_rv(rv)?;
                let applied = cache.applied();
                if !(applied.ready && applied.revision >= rv) {
                    let current = self.current_revision(rt).await?;
                    if rv > current {
                        return Err(too_large(rt, rv, current));
                    }
                    if cache.wait_until(Some(rv), timeout).await.is_err() {
                        return Ok(None);
                    }
                }
                // Streams from `rv`; the watcher's first read tells whether the ring still
                // reaches back there.
                return Ok(Some((cache, None, rv)));
            }
        };
        let Ok(revision) = cache.wait_until(wait, timeout).await else {
            return Ok(None);
        };
        if !initial {
            return Ok(Some((cache, None, revision)));
        }
        let prefix = rt.namespace_prefix(ns);
        let snapshot = cache.snapshot(prefix.as_bytes(), None);
        let objects = snapshot.items.into_iter().map(|(_, obj)| obj).collect();
        Ok(Some((cache, Some(objects), snapshot.revision)))
    }
}

fn bookmark(rt: &ResourceType, rv: i64, initial_events_end: bool) -> WatchEvent {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    WatchEvent::Bookmark(Arc::new(json!({
        "kind": rt.kind,
        "apiVersion": rt.api_version(),
        "metadata": metadata,
    })))
}

fn error(err: &ApiError) -> WatchEvent {
    WatchEvent::Error(Arc::new(err.to_status()))
}

fn too_old(rv: i64, oldest: i64) -> ApiError {
    ApiError::expired(format!("too old resource version: {rv} ({oldest})"))
}

async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Sends one event to the client, waiting while its buffer is full; `false` once the client
/// is gone or the watch's time is up.
async fn send(
    tx: &mpsc::Sender<Sent>,
    deadline: Option<tokio::time::Instant>,
    event: Sent,
) -> bool {
    tokio::select! {
        sent = tx.send(event) => sent.is_ok(),
        () = until(deadline) => false,
    }
}

/// A watch served from the watch cache.
struct CachedFeed {
    cache: Arc<Cache>,
    rt: Arc<ResourceType>,
    /// The watched namespace's storage prefix (the resource's for all namespaces).
    prefix: Bytes,
    opts: WatchOptions,
    tx: mpsc::Sender<Sent>,
    deadline: Option<tokio::time::Instant>,
    /// Set for a resource converted by a webhook.
    converting: Option<Converting>,
}

impl CachedFeed {
    async fn send(&self, event: WatchEvent) -> bool {
        send(&self.tx, self.deadline, Sent::Decoded(event)).await
    }

    async fn send_cached(&self, cached: CachedSend) -> bool {
        send(&self.tx, self.deadline, Sent::Cached(cached)).await
    }

    fn filtering(&self) -> bool {
        self.opts.list.label_selector.is_some() || self.opts.list.field_selector.is_some()
    }

    fn selected(&self, obj: &CachedObject) -> bool {
        !self.filtering() || selected_cached(&self.rt, &self.opts.list, obj)
    }

    /// `initial`: the objects to send as ADDED first; `cursor`: every change up to this
    /// revision is accounted for (sent, or part of the initial objects).
    async fn run(self, initial: Option<Vec<Arc<CachedObject>>>, mut cursor: i64) {
        let mut last_sent = cursor;
        if let Some(objects) = initial {
            match &self.converting {
                None => {
                    for object in objects {
                        if !self.selected(&object) {
                            continue;
                        }
                        let added = CachedSend {
                            kind: EventType::Added,
                            object,
                            line: None,
                        };
                        if !self.send_cached(added).await {
                            return;
                        }
                    }
                }
                Some(converting) => {
                    let converted = match decoded(&objects) {
                        Ok(objects) => converting.initial(&self.rt, &self.opts.list, objects).await,
                        Err(err) => Err(err),
                    };
                    let objects = match converted {
                        Ok(objects) => objects,
                        Err(err) => {
                            self.send(error(&conversion::watch_error(&err))).await;
                            return;
                        }
                    };
                    for obj in objects {
                        if !self.send(WatchEvent::Added(obj)).await {
                            return;
                        }
                    }
                }
            }
            if self.opts.send_initial_events == Some(true)
                && !self.send(bookmark(&self.rt, cursor, true)).await
            {
                return;
            }
        }
        let mut applied = self.cache.subscribe();
        let mut bookmarks = tokio::time::interval(self.opts.bookmark_interval);
        bookmarks.tick().await;
        let mut bookmark_due = false;
        loop {
            applied.borrow_and_update();
            match self.cache.read_after(cursor, READ_BATCH) {
                Read::Closed => {
                    let err =
                        ApiError::from_store(konverge_store::Error::Closed, target(&self.rt, ""));
                    self.send(error(&err)).await;
                    return;
                }
                Read::TooOld { since } => {
                    self.send(error(&too_old(cursor, since))).await;
                    return;
                }
                Read::Events { events, caught_up } => {
                    for event in &events {
                        cursor = event.revision;
                        if !event.key.starts_with(&self.prefix) {
                            continue;
                        }
                        let out = match &self.converting {
                            None => self.translate(event).map(Sent::Cached),
                            Some(converting) => match converting
                                .translate_cached(&self.rt, &self.opts.list, event)
                                .await
                            {
                                Ok(out) => out.map(Sent::Decoded),
                                Err(err) => {
                                    self.send(error(&conversion::watch_error(&err))).await;
                                    return;
                                }
                            },
                        };
                        if let Some(out) = out {
                            if !send(&self.tx, self.deadline, out).await {
                                return;
                            }
                            last_sent = event.revision;
                        }
                    }
                    let Some(revision) = caught_up else {
                        continue;
                    };
                    cursor = cursor.max(revision);
                    if bookmark_due && cursor > last_sent {
                        bookmark_due = false;
                        last_sent = cursor;
                        if !self.send(bookmark(&self.rt, cursor, false)).await {
                            return;
                        }
                    }
                }
            }
            tokio::select! {
                changed = applied.changed() => if changed.is_err() {
                    return;
                },
                _ = bookmarks.tick(), if self.opts.allow_bookmarks => {
                    bookmark_due = true;
                    self.cache.want_progress();
                }
                () = until(self.deadline) => return,
                () = self.tx.closed() => return,
            }
        }
    }

    /// One cached event as a watch event of this watch, or `None` if the selectors hide it.
    fn translate(&self, event: &CachedEvent) -> Option<CachedSend> {
        if !self.filtering() {
            return Some(CachedSend::of(event.kind, event));
        }
        let old_selected = event.prev.as_deref().is_some_and(|o| self.selected(o));
        if event.deleted() {
            return old_selected.then(|| CachedSend::of(EventType::Deleted, event));
        }
        let new_selected = self.selected(&event.object);
        let kind = match (event.prev.is_some(), old_selected, new_selected) {
            (true, true, true) => EventType::Modified,
            (_, false, true) => EventType::Added,
            (true, true, false) => EventType::Deleted,
            _ => return None,
        };
        Some(CachedSend::of(kind, event))
    }
}

/// Cached objects, decoded (for conversion).
fn decoded(objects: &[Arc<CachedObject>]) -> Result<Vec<Arc<Value>>> {
    objects.iter().map(|o| o.decode().map(Arc::new)).collect()
}

/// The first wait before a failed store watch is opened again; it doubles up to
/// [`MAX_BACKOFF`] while the store keeps failing.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How [`Feed::follow`] ended.
enum Followed {
    /// The client is gone, its time is up, or it was sent its last event.
    Done,
    /// The store watch failed.
    Failed(konverge_store::Error),
}

/// A watch served from its own store watch (the watch cache is off, or could not catch up).
struct Feed {
    registry: Registry,
    rt: Arc<ResourceType>,
    ns: Option<String>,
    opts: WatchOptions,
    tx: mpsc::Sender<Sent>,
    deadline: Option<tokio::time::Instant>,
    /// Set for a resource converted by a webhook.
    converting: Option<Converting>,
}

impl Feed {
    async fn send(&self, event: WatchEvent) -> bool {
        send(&self.tx, self.deadline, Sent::Decoded(event)).await
    }

    async fn run(self, initial: bool, mut start_after: i64) {
        if initial {
            let mut list = ListOptions {
                limit: None,
                continue_token: None,
                resource_version: None,
                resource_version_match: None,
                ..self.opts.list.clone()
            };
            if self.converting.is_some() && selects_on_content(&list) {
                // Selected once converted.
                list.label_selector = None;
                list.field_selector = None;
            }
            let listed = match self
                .registry
                .list_store(&self.rt, self.ns.as_deref(), &list, ReadAt::Latest)
                .await
            {
                Ok(listed) => match &self.converting {
                    None => Ok(listed),
                    Some(converting) => converting
                        .initial(&self.rt, &self.opts.list, listed.items)
                        .await
                        .map(|items| super::ListResult { items, ..listed })
                        .map_err(|e| conversion::watch_error(&e)),
                },
                Err(err) => Err(err),
            };
            match listed {
                Ok(listed) => {
                    start_after = listed.resource_version;
                    for obj in listed.items {
                        if !self.send(WatchEvent::Added(obj)).await {
                            return;
                        }
                    }
                    if self.opts.send_initial_events == Some(true)
                        && !self.send(bookmark(&self.rt, start_after, true)).await
                    {
                        return;
                    }
                }
                Err(err) => {
                    self.send(error(&err)).await;
                    return;
                }
            }
        }
        let mut last_sent = start_after;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let err = match self.follow(&mut last_sent, &mut backoff).await {
                Followed::Done => return,
                Followed::Failed(err) => err,
            };
            // A failing backend (an etcd member lost, a connection reset) is not the client's
            // end: as kube-apiserver's watch cache re-establishes its etcd watch, this watch
            // resumes after what it sent. History lost meanwhile is the client's 410.
            if !matches!(err, konverge_store::Error::Backend { .. }) {
                if !matches!(err, konverge_store::Error::Closed) {
                    self.send(error(&self.watch_error(err, last_sent))).await;
                }
                return;
            }
            tracing::warn!(error = %err, resource = %self.rt.plural, after = last_sent, "a watch's store watch failed; resuming");
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = until(self.deadline) => return,
                () = self.tx.closed() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Streams the store's changes after `last_sent` (kept up to date) until the watch ends
    /// or the store watch fails.
    async fn follow(&self, last_sent: &mut i64, backoff: &mut Duration) -> Followed {
        let prefix = Bytes::from(self.rt.namespace_prefix(self.ns.as_deref()));
        let request = WatchRequest::new(KeyRange::Prefix(prefix))
            .from_revision(*last_sent + 1)
            .with_prev_kv();
        let mut stream = match self.registry.store.watch(request).await {
            Ok(stream) => stream,
            Err(err) => return Followed::Failed(err),
        };
        let mut bookmarks = tokio::time::interval(self.opts.bookmark_interval);
        bookmarks.tick().await;
        loop {
            tokio::select! {
                message = stream.recv() => match message {
                    Some(Ok(WatchResponse::Events(events))) => {
                        *backoff = FIRST_BACKOFF;
                        for event in events {
                            let revision = event.revision();
                            let translated = match &self.converting {
                                None => self.translate(event),
                                Some(converting) => self.translate_converted(converting, event).await,
                            };
                            match translated {
                                Ok(Some(out)) => {
                                    if !self.send(out).await {
                                        return Followed::Done;
                                    }
                                }
                                Ok(None) => {}
                                Err(err) => {
                                    self.send(error(&err)).await;
                                    return Followed::Done;
                                }
                            }
                            *last_sent = (*last_sent).max(revision);
                        }
                    }
                    Some(Ok(WatchResponse::Progress(rev))) => {
                        *backoff = FIRST_BACKOFF;
                        if self.opts.allow_bookmarks && rev > *last_sent {
                            *last_sent = rev;
                            if !self.send(bookmark(&self.rt, rev, false)).await {
                                return Followed::Done;
                            }
                        }
                    }
                    Some(Err(err)) => return Followed::Failed(err),
                    None => return Followed::Done,
                },
                _ = bookmarks.tick(), if self.opts.allow_bookmarks => stream.request_progress(),
                () = until(self.deadline) => return Followed::Done,
                () = self.tx.closed() => return Followed::Done,
            }
        }
    }

    fn watch_error(&self, err: konverge_store::Error, rv: i64) -> ApiError {
        match err {
            konverge_store::Error::Compacted { compact_revision } => too_old(rv, compact_revision),
            other => ApiError::from_store(other, target(&self.rt, "")),
        }
    }

    /// [`Feed::translate`] for a resource converted by a webhook.
    async fn translate_converted(
        &self,
        converting: &Converting,
        event: Event,
    ) -> Result<Option<WatchEvent>> {
        let old = match &event.prev_kv {
            Some(prev) => Some(Arc::new(decode(prev)?)),
            None => None,
        };
        let (object, deleted) = match event.kind {
            EventKind::Put => (Arc::new(decode(&event.kv)?), false),
            EventKind::Delete => {
                let Some(old) = &old else {
                    return Ok(None);
                };
                let mut gone = Value::clone(old);
                set_rv(&mut gone, event.kv.mod_revision);
                (Arc::new(gone), true)
            }
        };
        converting
            .translate(&self.rt, &self.opts.list, old.as_ref(), &object, deleted)
            .await
            .map_err(|e| conversion::watch_error(&e))
    }

    /// One store event as a watch event of this watch, or `None` if the selectors hide it.
    fn translate(&self, event: Event) -> Result<Option<WatchEvent>> {
        let opts = &self.opts.list;
        let old = match &event.prev_kv {
            Some(prev) => Some(decode(prev)?),
            None => None,
        };
        let old_selected = old.as_ref().is_some_and(|o| selected(&self.rt, opts, o));
        match event.kind {
            EventKind::Put => {
                let new = Arc::new(decode(&event.kv)?);
                let new_selected = selected(&self.rt, opts, &new);
                Ok(match (old.is_some(), old_selected, new_selected) {
                    (true, true, true) => Some(WatchEvent::Modified(new)),
                    (_, false, true) => Some(WatchEvent::Added(new)),
                    (true, true, false) => Some(WatchEvent::Deleted(new)),
                    _ => None,
                })
            }
            EventKind::Delete => Ok(match old {
                Some(mut gone) if old_selected => {
                    set_rv(&mut gone, event.kv.mod_revision);
                    Some(WatchEvent::Deleted(Arc::new(gone)))
                }
                _ => None,
            }),
        }
    }
}

/// How many objects one review of a watch's initial events holds.
const INITIAL_CHUNK: usize = 500;

/// What a watch of a resource converted by a webhook needs to convert what it sends.
struct Converting {
    registry: Registry,
    hook: Arc<ConversionWebhook>,
}

impl Converting {
    /// The initial objects of a watch, converted (in reviews of [`INITIAL_CHUNK`] objects)
    /// and selected: on their stored form when the selectors look at names only, otherwise
    /// once converted.
    async fn initial(
        &self,
        rt: &ResourceType,
        opts: &ListOptions,
        mut objects: Vec<Arc<Value>>,
    ) -> Result<Vec<Arc<Value>>> {
        let filtering = opts.label_selector.is_some() || opts.field_selector.is_some();
        let content = selects_on_content(opts);
        if filtering && !content {
            objects.retain(|o| selected(rt, opts, o));
        }
        for chunk in objects.chunks_mut(INITIAL_CHUNK) {
            self.registry.served_many(rt, &self.hook, chunk).await?;
        }
        if content {
            objects.retain(|o| selected(rt, opts, o));
        }
        Ok(objects)
    }

    /// [`Converting::translate`] for an event of the watch cache (decoded for the review).
    async fn translate_cached(
        &self,
        rt: &ResourceType,
        opts: &ListOptions,
        event: &CachedEvent,
    ) -> Result<Option<WatchEvent>> {
        let prev = match &event.prev {
            Some(prev) => Some(Arc::new(prev.decode()?)),
            None => None,
        };
        let object = Arc::new(event.object.decode()?);
        self.translate(rt, opts, prev.as_ref(), &object, event.deleted())
            .await
    }

    /// One change as a watch event, converted, or `None` if the selectors hide it. Selectors
    /// that look at more than names select on the converted objects (the object before the
    /// change is converted with it, in one review).
    async fn translate(
        &self,
        rt: &ResourceType,
        opts: &ListOptions,
        prev: Option<&Arc<Value>>,
        object: &Arc<Value>,
        deleted: bool,
    ) -> Result<Option<WatchEvent>> {
        let filtering = opts.label_selector.is_some() || opts.field_selector.is_some();
        let chosen = |prev: Option<&Value>, object: &Value| {
            let sel = |o: &Value| !filtering || selected(rt, opts, o);
            if deleted {
                return prev
                    .is_some_and(sel)
                    .then_some(WatchEvent::Deleted as fn(_) -> _);
            }
            let old_selected = prev.is_some_and(sel);
            match (prev.is_some(), old_selected, sel(object)) {
                (true, true, true) => Some(WatchEvent::Modified as fn(_) -> _),
                (_, false, true) => Some(WatchEvent::Added as fn(_) -> _),
                (true, true, false) => Some(WatchEvent::Deleted as fn(_) -> _),
                _ => None,
            }
        };
        if !selects_on_content(opts) {
            let Some(event) = chosen(prev.map(|p| &**p), object) else {
                return Ok(None);
            };
            let converted = self
                .registry
                .served_one(rt, &self.hook, Value::clone(object))
                .await?;
            return Ok(Some(event(Arc::new(converted))));
        }
        let mut items = vec![object.clone()];
        if !deleted && let Some(prev) = prev {
            items.push(prev.clone());
        }
        self.registry
            .served_many(rt, &self.hook, &mut items)
            .await?;
        let object = items[0].clone();
        // A deleted object is its last state: it decides whether the watch saw it.
        let prev = if deleted { Some(&object) } else { items.get(1) };
        Ok(chosen(prev.map(|p| &**p), &object).map(|event| event(object.clone())))
    }
}
