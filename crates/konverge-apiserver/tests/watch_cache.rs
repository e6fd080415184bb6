//! The watch cache behind list and watch, through the registry: one store watch per resource
//! however many watchers, every event in order for each of them, 410 for watchers the ring
//! left behind, consistent lists, selector transitions, initial events, relists after the
//! cache's own watch is compacted.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use konverge_apimachinery::selector::{FieldSelector, LabelSelector};
use konverge_apiserver::registry::{
    ListOptions, Registry, ResourceVersionMatch, WatchCacheConfig, WatchEvent, WatchOptions,
    WriteOptions,
};
use konverge_apiserver::resources::{Catalog, ResourceType};
use konverge_store::{
    KeyRange, KvStore, MemStore, RangeRequest, RangeResponse, Revision, Txn, TxnResponse,
    WatchRequest, WatchStream,
};
use serde_json::{Value, json};
use tokio::sync::watch;

/// A store that counts the watches opened on it and can stall them, break them with
/// `Compacted`, as a store whose watcher fell behind compaction does, and fail them, as an
/// etcd member that goes away does.
struct Spy {
    inner: Arc<dyn KvStore>,
    watches: Mutex<Vec<KeyRange>>,
    control: watch::Sender<Control>,
    /// Whether the open watches have seen the last `stall(true)`.
    stalled: Arc<AtomicBool>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Control {
    stalled: bool,
    /// Watches opened before the n-th `break_watches` end with `Compacted`.
    breaks: u64,
    /// Watches opened before the n-th `fail_watches` end with a backend error.
    failures: u64,
}

impl Spy {
    fn new() -> Arc<Spy> {
        Arc::new(Spy {
            inner: Arc::new(MemStore::new()),
            watches: Mutex::new(Vec::new()),
            control: watch::channel(Control::default()).0,
            stalled: Arc::new(AtomicBool::new(false)),
        })
    }

    /// How many watches were opened on keys under `prefix`.
    fn watches_under(&self, prefix: &str) -> usize {
        self.watches
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r.start().starts_with(prefix.as_bytes()))
            .count()
    }

    /// Stops (or resumes) delivering to the open watches; returns once they stopped.
    async fn stall(&self, stalled: bool) {
        self.control.send_modify(|c| c.stalled = stalled);
        while stalled && !self.stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Ends every open watch with `Compacted`.
    fn break_watches(&self) {
        self.control.send_modify(|c| c.breaks += 1);
    }

    /// Ends every open watch with the error of a lost etcd member.
    fn fail_watches(&self) {
        self.control.send_modify(|c| c.failures += 1);
    }
}

#[async_trait]
impl KvStore for Spy {
    async fn range(&self, req: RangeRequest) -> konverge_store::Result<RangeResponse> {
        self.inner.range(req).await
    }

    async fn txn(&self, txn: Txn) -> konverge_store::Result<TxnResponse> {
        self.inner.txn(txn).await
    }

    async fn watch(&self, req: WatchRequest) -> konverge_store::Result<WatchStream> {
        self.watches.lock().expect("lock").push(req.range.clone());
        let mut inner = self.inner.watch(req).await?;
        let (sender, stream) = konverge_store::watch::channel(64);
        let mut control = self.control.subscribe();
        let (opened_at, failed_at) = {
            let now = control.borrow();
            (now.breaks, now.failures)
        };
        let stalled = self.stalled.clone();
        let store = self.inner.clone();
        tokio::spawn(async move {
            loop {
                let now = *control.borrow_and_update();
                if now.breaks > opened_at {
                    let compact_revision = store.current_revision().await.unwrap_or(1);
                    sender
                        .send(Err(konverge_store::Error::Compacted { compact_revision }))
                        .await;
                    return;
                }
                if now.failures > failed_at {
                    let lost = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
                    sender
                        .send(Err(konverge_store::Error::backend(
                            "etcd watch failed",
                            lost,
                        )))
                        .await;
                    return;
                }
                stalled.store(now.stalled, Ordering::SeqCst);
                tokio::select! {
                    message = inner.recv(), if !now.stalled => match message {
                        Some(message) => if !sender.send(message).await {
                            return;
                        },
                        None => return,
                    },
                    changed = control.changed() => if changed.is_err() {
                        return;
                    },
                    () = sender.progress_requested(), if !now.stalled => {
                        sender.take_progress_request();
                        inner.request_progress();
                    }
                    () = sender.closed() => return,
                }
            }
        });
        Ok(stream)
    }

    async fn compact(&self, revision: Revision) -> konverge_store::Result<()> {
        self.inner.compact(revision).await
    }

    async fn current_revision(&self) -> konverge_store::Result<Revision> {
        self.inner.current_revision().await
    }
}

struct Env {
    registry: Registry,
    store: Arc<Spy>,
    configmaps: Arc<ResourceType>,
    secrets: Arc<ResourceType>,
}

async fn env(config: WatchCacheConfig) -> Env {
    let store = Spy::new();
    let catalog = Arc::new(Catalog::builtin());
    let registry = Registry::new(store.clone(), catalog.clone()).with_watch_cache(config);
    let namespaces = catalog.get("", "v1", "namespaces").expect("namespaces");
    for ns in ["default", "other"] {
        registry
            .create(
                &namespaces,
                None,
                json!({"metadata": {"name": ns}}),
                &WriteOptions::default(),
            )
            .await
            .expect("namespace");
    }
    Env {
        registry,
        store,
        configmaps: catalog.get("", "v1", "configmaps").expect("configmaps"),
        secrets: catalog.get("", "v1", "secrets").expect("secrets"),
    }
}

type Events = Pin<Box<dyn Stream<Item = WatchEvent> + Send>>;

impl Env {
    async fn create(&self, ns: &str, name: &str, labels: Value) -> Value {
        self.registry
            .create(
                &self.configmaps,
                Some(ns),
                json!({"metadata": {"name": name, "labels": labels}, "data": {"v": "0"}}),
                &WriteOptions::default(),
            )
            .await
            .expect("create")
            .object
    }

    async fn set(&self, ns: &str, name: &str, labels: Value, v: &str) -> Value {
        self.registry
            .update(
                &self.configmaps,
                Some(ns),
                name,
                json!({"metadata": {"name": name, "labels": labels}, "data": {"v": v}}),
                None,
                &WriteOptions::default(),
            )
            .await
            .expect("update")
            .object
    }

    async fn delete(&self, ns: &str, name: &str) {
        self.registry
            .delete(&self.configmaps, Some(ns), name, &Default::default())
            .await
            .expect("delete");
    }

    async fn watch(&self, ns: Option<&str>, opts: WatchOptions) -> Events {
        Box::pin(
            self.registry
                .watch(self.configmaps.clone(), ns.map(String::from), opts)
                .await
                .expect("watch"),
        )
    }

    async fn revision(&self) -> Revision {
        self.store.current_revision().await.expect("revision")
    }
}

fn from(rv: Revision) -> WatchOptions {
    WatchOptions {
        list: ListOptions {
            resource_version: Some(rv.to_string()),
            ..ListOptions::default()
        },
        ..WatchOptions::default()
    }
}

async fn next(events: &mut Events) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("event in time")
        .expect("stream open")
}

fn name(event: &WatchEvent) -> String {
    event.object()["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn rv_of(obj: &Value) -> Revision {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("resourceVersion")
}

fn summary(event: &WatchEvent) -> (&'static str, String, Revision) {
    let kind = match event {
        WatchEvent::Added(_) => "ADDED",
        WatchEvent::Modified(_) => "MODIFIED",
        WatchEvent::Deleted(_) => "DELETED",
        WatchEvent::Bookmark(_) => "BOOKMARK",
        WatchEvent::Error(_) => "ERROR",
    };
    (kind, name(event), rv_of(event.object()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_watchers_share_one_store_watch_and_see_every_event_in_order() {
    let env = Arc::new(env(WatchCacheConfig::default()).await);
    let start = env.revision().await;
    let mut watchers = Vec::new();
    for i in 0..100 {
        // Half watch the namespace, half every namespace.
        let ns = (i % 2 == 0).then_some("default");
        watchers.push(env.watch(ns, from(start)).await);
    }
    const OBJECTS: usize = 100;
    let writer = {
        let env = env.clone();
        tokio::spawn(async move {
            let mut expected = Vec::new();
            for i in 0..OBJECTS {
                let name = format!("cm-{i:03}");
                let created = env.create("default", &name, json!({})).await;
                expected.push(("ADDED", name.clone(), rv_of(&created)));
                let changed = env.set("default", &name, json!({}), "1").await;
                expected.push(("MODIFIED", name.clone(), rv_of(&changed)));
                if i % 3 == 0 {
                    env.delete("default", &name).await;
                    let deleted = env.revision().await;
                    expected.push(("DELETED", name, deleted));
                }
            }
            expected
        })
    };
    let readers: Vec<_> = watchers
        .into_iter()
        .map(|mut events| {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while seen.len() < OBJECTS * 2 + OBJECTS.div_ceil(3) {
                    seen.push(summary(&next(&mut events).await));
                }
                seen
            })
        })
        .collect();
    let expected = writer.await.expect("writer");
    for reader in readers {
        assert_eq!(reader.await.expect("reader"), expected);
    }
    assert_eq!(env.store.watches_under("/registry/configmaps/"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_the_ring_left_behind_gets_410() {
    let env = env(WatchCacheConfig {
        capacity: 16,
        ..WatchCacheConfig::default()
    })
    .await;
    let start = env.revision().await;
    // Nobody reads this one: its buffer fills, the ring moves on without it.
    let mut slow = env.watch(Some("default"), from(start)).await;
    let mut fast = env.watch(Some("default"), from(start)).await;
    const WRITES: usize = 700;
    let mut fast_seen = 0;
    for i in 0..WRITES {
        env.create("default", &format!("cm-{i:03}"), json!({}))
            .await;
        // The fast reader keeps up (and is never told it is too old).
        while let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_millis(0), fast.next()).await
        {
            assert!(matches!(event, WatchEvent::Added(_)), "{event:?}");
            fast_seen += 1;
        }
    }
    while fast_seen < WRITES {
        assert!(matches!(next(&mut fast).await, WatchEvent::Added(_)));
        fast_seen += 1;
    }
    let mut added = 0;
    let status = loop {
        match next(&mut slow).await {
            WatchEvent::Added(_) => added += 1,
            WatchEvent::Error(status) => break status,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(added < WRITES, "{added}");
    assert_eq!(status["code"], 410, "{status}");
    assert_eq!(status["reason"], "Expired");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("too old resource version: ")),
        "{status}"
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(5), slow.next())
            .await
            .expect("ends")
            .is_none()
    );

    // Starting from a resourceVersion the ring no longer holds is 410 as well (though the
    // store still has that history), as kube-apiserver's cache answers it.
    let mut late = env.watch(Some("default"), from(start)).await;
    match next(&mut late).await {
        WatchEvent::Error(status) => {
            assert_eq!(status["code"], 410);
            let message = status["message"].as_str().expect("message");
            assert!(
                message.starts_with(&format!("too old resource version: {start} (")),
                "{message}"
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    assert_eq!(env.store.watches_under("/registry/configmaps/"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_right_after_a_write_see_it() {
    let env = env(WatchCacheConfig::default()).await;
    let opts = ListOptions::default();
    for i in 0..100 {
        let name = format!("cm-{i:03}");
        let created = env.create("default", &name, json!({})).await;
        let listed = env
            .registry
            .list(&env.configmaps, Some("default"), &opts)
            .await
            .expect("list");
        assert!(listed.resource_version >= rv_of(&created));
        assert_eq!(listed.items.len(), i + 1);
        assert_eq!(name_of(listed.items.last().expect("item")), name);

        // A write to another resource moves the store's revision: the next consistent list
        // is at least that new (the cache learns it from a progress notification).
        let other = env
            .registry
            .create(
                &env.secrets,
                Some("default"),
                json!({"metadata": {"name": format!("s-{i}")}}),
                &WriteOptions::default(),
            )
            .await
            .expect("secret");
        let listed = env
            .registry
            .list(&env.configmaps, None, &opts)
            .await
            .expect("list");
        assert!(listed.resource_version >= rv_of(&other.object));
    }
    // A write behind the registry's back, straight into the store, is seen as well.
    env.store
        .put(
            Bytes::from_static(b"/registry/configmaps/other/direct"),
            Bytes::from(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "direct", "namespace": "other"}})
                    .to_string(),
            ),
        )
        .await
        .expect("put");
    let listed = env
        .registry
        .list(&env.configmaps, Some("other"), &opts)
        .await
        .expect("list");
    assert_eq!(listed.items.len(), 1);
    assert_eq!(name_of(&listed.items[0]), "direct");
    assert_eq!(env.store.watches_under("/registry/configmaps/"), 1);
}

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_turn_changes_into_added_and_deleted() {
    let env = env(WatchCacheConfig::default()).await;
    let start = env.revision().await;
    let mut opts = from(start);
    opts.list.label_selector = Some(LabelSelector::parse("tier=web").expect("selector"));
    let mut labelled = env.watch(Some("default"), opts).await;
    let mut opts = from(start);
    opts.list.field_selector = Some(FieldSelector::parse("metadata.name=b").expect("selector"));
    let mut named = env.watch(None, opts).await;

    env.create("default", "a", json!({})).await;
    env.set("default", "a", json!({"tier": "web"}), "1").await;
    env.set("default", "a", json!({"tier": "web"}), "2").await;
    env.set("default", "a", json!({"tier": "db"}), "3").await;
    env.set("default", "a", json!({"tier": "db"}), "4").await;
    env.delete("default", "a").await;
    env.create("default", "b", json!({"tier": "web"})).await;
    env.delete("default", "b").await;
    // Same labels elsewhere: not this watch's namespace.
    env.create("other", "c", json!({"tier": "web"})).await;

    let mut seen = Vec::new();
    for _ in 0..5 {
        let event = next(&mut labelled).await;
        let (kind, name, _) = summary(&event);
        let v = event.object()["data"]["v"]
            .as_str()
            .unwrap_or("")
            .to_string();
        seen.push((kind, name, v));
    }
    let expected = [
        ("ADDED", "a", "1"),
        ("MODIFIED", "a", "2"),
        // Leaving the selector is a DELETED carrying the new state.
        ("DELETED", "a", "3"),
        ("ADDED", "b", "0"),
        ("DELETED", "b", "0"),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(k, n, v)| (*k, n.to_string(), v.to_string()))
        .collect();
    assert_eq!(seen, expected);
    let kinds: Vec<_> = [next(&mut named).await, next(&mut named).await]
        .iter()
        .map(|e| summary(e).0)
        .collect();
    assert_eq!(kinds, ["ADDED", "DELETED"]);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), labelled.next())
            .await
            .is_err(),
        "nothing more for the labelled watch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_events_come_from_the_cache_and_end_with_a_bookmark() {
    let env = env(WatchCacheConfig::default()).await;
    for name in ["c", "a", "b"] {
        env.create("default", name, json!({})).await;
    }
    env.create("other", "z", json!({})).await;
    let written = env.revision().await;

    let mut streaming = env
        .watch(
            Some("default"),
            WatchOptions {
                allow_bookmarks: true,
                send_initial_events: Some(true),
                ..WatchOptions::default()
            },
        )
        .await;
    let mut names = Vec::new();
    for _ in 0..3 {
        let event = next(&mut streaming).await;
        assert!(matches!(event, WatchEvent::Added(_)), "{event:?}");
        names.push(name(&event));
    }
    assert_eq!(names, ["a", "b", "c"]);
    let end = next(&mut streaming).await;
    let WatchEvent::Bookmark(bookmark) = &end else {
        panic!("expected the end bookmark, got {end:?}");
    };
    assert_eq!(
        bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert!(rv_of(bookmark) >= written);
    assert_eq!(bookmark["kind"], "ConfigMap");

    // Then it goes on live.
    let d = env.create("default", "d", json!({})).await;
    let live = next(&mut streaming).await;
    assert_eq!(summary(&live), ("ADDED", "d".into(), rv_of(&d)));

    // The legacy form (resourceVersion unset) sends the state without the bookmark.
    let mut legacy = env.watch(Some("default"), WatchOptions::default()).await;
    let mut names = Vec::new();
    for _ in 0..4 {
        let event = next(&mut legacy).await;
        assert!(matches!(event, WatchEvent::Added(_)), "{event:?}");
        names.push(name(&event));
    }
    assert_eq!(names, ["a", "b", "c", "d"]);
    env.delete("default", "a").await;
    assert_eq!(summary(&next(&mut legacy).await).0, "DELETED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_carry_the_caches_progress_and_timeouts_end_watches() {
    let env = env(WatchCacheConfig::default()).await;
    let start = env.revision().await;
    let mut watch = env
        .watch(
            Some("default"),
            WatchOptions {
                allow_bookmarks: true,
                bookmark_interval: Duration::from_millis(50),
                timeout: Some(Duration::from_millis(1500)),
                ..from(start)
            },
        )
        .await;
    // Only other resources change: the bookmark still moves past their revisions.
    let secret = env
        .registry
        .create(
            &env.secrets,
            Some("default"),
            json!({"metadata": {"name": "s"}}),
            &WriteOptions::default(),
        )
        .await
        .expect("secret");
    let began = tokio::time::Instant::now();
    loop {
        match next(&mut watch).await {
            WatchEvent::Bookmark(b) if rv_of(&b) >= rv_of(&secret.object) => break,
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // timeoutSeconds ends the stream.
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("ends in time")
    {
        assert!(matches!(event, WatchEvent::Bookmark(_)), "{event:?}");
    }
    assert!(began.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_relists_when_its_watch_is_compacted_and_watchers_get_410() {
    let env = env(WatchCacheConfig::default()).await;
    env.create("default", "before", json!({})).await;
    let start = env.revision().await;
    let mut watch = env.watch(Some("default"), from(start)).await;
    env.create("default", "seen", json!({})).await;
    assert_eq!(name(&next(&mut watch).await), "seen");

    // The cache's watch stalls while writes go on and the store compacts them away.
    env.store.stall(true).await;
    env.create("default", "missed", json!({})).await;
    let now = env.revision().await;
    env.store.compact(now).await.expect("compact");
    env.store.break_watches();
    env.store.stall(false).await;

    match next(&mut watch).await {
        WatchEvent::Error(status) => {
            assert_eq!(status["code"], 410, "{status}");
            let message = status["message"].as_str().expect("message");
            assert!(
                message.starts_with("too old resource version: "),
                "{message}"
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // The relisted cache has everything and serves new watches.
    let listed = env
        .registry
        .list(&env.configmaps, Some("default"), &ListOptions::default())
        .await
        .expect("list");
    let names: Vec<_> = listed.items.iter().map(|o| name_of(o)).collect();
    assert_eq!(names, ["before", "missed", "seen"]);
    let mut again = env
        .watch(Some("default"), from(listed.resource_version))
        .await;
    env.create("default", "after", json!({})).await;
    assert_eq!(name(&next(&mut again).await), "after");
    assert!(env.store.watches_under("/registry/configmaps/") >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_and_store_lists_agree_on_pages_tokens_and_counts() {
    let cached = env(WatchCacheConfig::default()).await;
    let uncached = env(WatchCacheConfig {
        enabled: false,
        ..WatchCacheConfig::default()
    })
    .await;
    for env in [&cached, &uncached] {
        for i in 0..25 {
            let tier = if i % 2 == 0 { "web" } else { "db" };
            env.create("default", &format!("p-{i:02}"), json!({ "tier": tier }))
                .await;
        }
        env.create("other", "elsewhere", json!({ "tier": "web" }))
            .await;
    }
    let pages = |env: &Env, selector: Option<&str>| {
        let registry = env.registry.clone();
        let rt = env.configmaps.clone();
        let selector = selector.map(|s| LabelSelector::parse(s).expect("selector"));
        async move {
            let mut out = Vec::new();
            let mut opts = ListOptions {
                limit: Some(10),
                label_selector: selector.clone(),
                ..ListOptions::default()
            };
            loop {
                let page = registry
                    .list(&rt, Some("default"), &opts)
                    .await
                    .expect("page");
                let names: Vec<String> =
                    page.items.iter().map(|o| name_of(o).to_string()).collect();
                out.push((names, page.remaining, page.continue_token.is_some()));
                match page.continue_token {
                    Some(token) => {
                        opts = ListOptions {
                            limit: Some(10),
                            continue_token: Some(token),
                            label_selector: selector.clone(),
                            ..ListOptions::default()
                        }
                    }
                    None => return out,
                }
            }
        }
    };
    // The two stores saw the same writes, so revisions agree too.
    for selector in [None, Some("tier=web")] {
        assert_eq!(
            pages(&cached, selector).await,
            pages(&uncached, selector).await,
            "{selector:?}"
        );
    }
    let first = cached
        .registry
        .list(
            &cached.configmaps,
            None,
            &ListOptions {
                limit: Some(5),
                ..ListOptions::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(first.remaining, Some(21));
    assert_eq!(first.resource_version, cached.revision().await);

    // resourceVersion ahead of the store: 504, for lists and watches alike.
    let ahead = cached.revision().await + 100;
    let opts = ListOptions {
        resource_version: Some(ahead.to_string()),
        ..ListOptions::default()
    };
    let err = cached
        .registry
        .list(&cached.configmaps, None, &opts)
        .await
        .expect_err("too large");
    assert_eq!((err.code.as_u16(), err.reason.as_str()), (504, "Timeout"));
    let err = match cached
        .registry
        .watch(cached.configmaps.clone(), None, from(ahead))
        .await
    {
        Ok(_) => panic!("watch from the future"),
        Err(err) => err,
    };
    assert_eq!(err.code.as_u16(), 504);
    // Exact reads still go to the store and its history.
    let exact = ListOptions {
        resource_version: Some(first.resource_version.to_string()),
        resource_version_match: Some(ResourceVersionMatch::Exact),
        ..ListOptions::default()
    };
    let listed = cached
        .registry
        .list(&cached.configmaps, None, &exact)
        .await
        .expect("exact");
    assert_eq!(listed.items.len(), 26);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_cache_every_watch_watches_the_store() {
    let env = env(WatchCacheConfig {
        enabled: false,
        ..WatchCacheConfig::default()
    })
    .await;
    let start = env.revision().await;
    let mut a = env.watch(Some("default"), from(start)).await;
    let mut b = env.watch(None, from(start)).await;
    env.create("default", "x", json!({})).await;
    assert_eq!(name(&next(&mut a).await), "x");
    assert_eq!(name(&next(&mut b).await), "x");
    assert_eq!(env.store.watches_under("/registry/configmaps/"), 2);
    assert_eq!(env.registry.watch_caches(), 0);
}

/// A store watch that fails (an etcd member killed under the server) is opened again after
/// the last revision sent: whether a watch is served by the cache or by a store watch of its
/// own, its client sees every change once, in order, and no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_watch_resumes_without_a_gap_a_repeat_or_an_error() {
    for enabled in [true, false] {
        let env = env(WatchCacheConfig {
            enabled,
            ..WatchCacheConfig::default()
        })
        .await;
        let start = env.revision().await;
        let mut watch = env.watch(Some("default"), from(start)).await;
        env.create("default", "a", json!({})).await;
        assert_eq!(summary(&next(&mut watch).await).1, "a");
        let opened = env.store.watches_under("/registry/configmaps/");

        env.store.stall(true).await;
        env.set("default", "a", json!({}), "1").await;
        env.create("default", "b", json!({})).await;
        env.store.fail_watches();
        env.store.stall(false).await;
        env.set("default", "b", json!({}), "1").await;
        env.delete("default", "a").await;

        let mut seen = Vec::new();
        for _ in 0..4 {
            let (kind, name, _) = summary(&next(&mut watch).await);
            seen.push(format!("{kind} {name}"));
        }
        assert_eq!(
            seen,
            ["MODIFIED a", "ADDED b", "MODIFIED b", "DELETED a"],
            "cache enabled: {enabled}"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(200), watch.next())
                .await
                .is_err(),
            "nothing more (cache enabled: {enabled})"
        );
        assert_eq!(
            env.store.watches_under("/registry/configmaps/"),
            opened + 1,
            "one store watch opened again (cache enabled: {enabled})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_history_answers_410_for_earlier_resource_versions() {
    let env = env(WatchCacheConfig::default()).await;
    let old = rv_of(&env.create("default", "a", json!({})).await);
    // Before: the cache's ring serves a watch from `old`.
    let mut before = env.watch(Some("default"), from(old)).await;
    env.create("default", "b", json!({})).await;
    assert_eq!(name(&next(&mut before).await), "b");
    env.create("default", "c", json!({})).await;

    let expired_at = env.registry.expire_history().await.expect("expire");
    assert_eq!(expired_at, env.revision().await);

    // The cache forgot its ring, so the same watch is now 410 (the store's compaction alone
    // would not do it: the ring would still hold `old`).
    let mut late = env.watch(Some("default"), from(old)).await;
    match next(&mut late).await {
        WatchEvent::Error(status) => {
            assert_eq!(status["code"], 410, "{status}");
            assert_eq!(status["reason"], "Expired", "{status}");
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // As the store compacted at `expired_at` keeps that revision, the cache keeps its event:
    // a client that missed only the last change gets it.
    let mut edge = env.watch(Some("default"), from(expired_at - 1)).await;
    assert_eq!(name(&next(&mut edge).await), "c");
    // An exact list at `old` reads the compacted store.
    let exact = env
        .registry
        .list(
            &env.configmaps,
            Some("default"),
            &ListOptions {
                resource_version: Some(old.to_string()),
                resource_version_match: Some(ResourceVersionMatch::Exact),
                ..ListOptions::default()
            },
        )
        .await
        .expect_err("compacted");
    assert_eq!(
        (exact.code.as_u16(), exact.reason.as_str()),
        (410, "Expired")
    );

    // A fresh list works, and a watch from its revision sees what comes next.
    let listed = env
        .registry
        .list(&env.configmaps, Some("default"), &ListOptions::default())
        .await
        .expect("list");
    let names: Vec<_> = listed.items.iter().map(|o| name_of(o)).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let mut again = env
        .watch(Some("default"), from(listed.resource_version))
        .await;
    env.create("default", "d", json!({})).await;
    assert_eq!(name(&next(&mut again).await), "d");

    // Expiring again with nothing written since is fine.
    assert_eq!(
        env.registry.expire_history().await.expect("again"),
        env.revision().await
    );
}
