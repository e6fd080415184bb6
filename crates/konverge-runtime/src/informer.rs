//! Shared informers: one watch per resource type and selector, however many controllers read it.
//!
//! An [`Informer`] owns a [`watcher`](crate::watcher) and the cache [`Writer`]; it applies each
//! event and then calls its handlers with the resulting [`Change`]s. Handlers only enqueue keys
//! (they run under the informer's lock and must never block), so a slow reconciler can never
//! stall the watch. A handler added after the cache is filled is first shown every cached
//! object, so late subscribers miss nothing.
//!
//! Cached objects leave out `metadata.managedFields` unless a reader asks to keep them
//! ([`Informer::keep_managed_fields`]). They are skipped while the watch's JSON is parsed,
//! not decoded and then dropped, so a list page never holds them either.
//!
//! [`Informers`] hands out one informer per (type, URL, selectors): controllers that own or
//! watch the same resource share its watch and its cache.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::{Api, Resource};
use prometheus_client::metrics::gauge::Gauge;
use serde::de::DeserializeOwned;

use crate::cache::ReadyFlag;
use crate::cache::{Change, Index, Store, Writer};
use crate::metrics::Metrics;
use crate::metrics::resource_labels;
use crate::watcher::{self, WatcherMetrics};

mod lean;

use lean::{Lean, LeanType};

/// A change handler: must only enqueue, never block.
pub(crate) type Handler<K> = Arc<dyn Fn(&Change<K>) + Send + Sync>;

/// Errors setting up an informer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Indexes must be declared before the informer starts.
    #[error("index {0:?} was added after the informer for {1} started")]
    StartedIndex(String, String),
}

struct Inner<K> {
    api: Api<K>,
    config: watcher::Config,
    resource: String,
    /// The cluster it watches, in a multi-cluster [`Fleet`](crate::fleet::Fleet).
    cluster: Option<Arc<str>>,
    /// Whether cached objects keep `metadata.managedFields` (dropped by default).
    keep_managed_fields: std::sync::atomic::AtomicBool,
    store: Store<K>,
    /// Handlers, and the writer until the informer starts (then its task owns it).
    state: Mutex<InformerState<K>>,
}

struct InformerState<K> {
    handlers: Vec<Handler<K>>,
    writer: Option<Writer<K>>,
}

/// One resource type's watch, cache and change handlers.
pub struct Informer<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            inner: self.inner.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Informer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("resource", &self.inner.resource)
            .finish_non_exhaustive()
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// An informer for `api` (not started).
    pub fn new(api: Api<K>, config: watcher::Config) -> Informer<K> {
        Informer::in_cluster(api, config, None)
    }

    fn in_cluster(api: Api<K>, config: watcher::Config, cluster: Option<Arc<str>>) -> Informer<K> {
        let writer = Writer::new(Vec::new());
        let resource = api.resource_url().to_string();
        Informer {
            inner: Arc::new(Inner {
                store: writer.store(),
                api,
                config,
                resource,
                cluster,
                keep_managed_fields: std::sync::atomic::AtomicBool::new(false),
                state: Mutex::new(InformerState {
                    handlers: Vec::new(),
                    writer: Some(writer),
                }),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InformerState<K>> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache this informer fills.
    pub fn store(&self) -> Store<K> {
        self.inner.store.clone()
    }

    /// The resource URL it watches (also its metrics label).
    pub fn resource(&self) -> &str {
        &self.inner.resource
    }

    /// Adds an index; only before [`run`](Self::run) starts.
    pub fn add_index(&self, index: Index<K>) -> Result<(), Error> {
        match &mut self.lock().writer {
            Some(writer) => {
                writer.add_index(index);
                Ok(())
            }
            None => Err(Error::StartedIndex(
                index.name().to_string(),
                self.inner.resource.clone(),
            )),
        }
    }

    /// Keeps `metadata.managedFields` in the cached objects; by default they are skipped as
    /// objects are parsed (they are most of an object's size once server-side apply is in use).
    /// Takes effect if called before [`run`](Self::run).
    pub fn keep_managed_fields(&self) {
        self.inner
            .keep_managed_fields
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The watch, decoding objects whole if `keep_managed_fields`, otherwise with their
    /// managedFields skipped by the parser.
    fn watch(
        &self,
        keep_managed_fields: bool,
    ) -> futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>> {
        let (api, config) = (self.inner.api.clone(), self.inner.config.clone());
        if keep_managed_fields {
            return watcher::watcher(api, config).boxed();
        }
        watch_lean(api, config)
    }

    /// Adds a change handler. Objects already cached are replayed to it first (as creates).
    pub(crate) fn subscribe(&self, handler: Handler<K>) {
        let mut state = self.lock();
        for obj in self.inner.store.list() {
            if let Some(key) = crate::key::ObjectKey::of(obj.as_ref()) {
                handler(&Change {
                    key,
                    old: None,
                    new: Some(obj),
                });
            }
        }
        state.handlers.push(handler);
    }

    /// Watches and fills the cache until the future is dropped. Only the first call does
    /// anything; later calls return at once (the informer is already running).
    pub async fn run(&self, metrics: Option<Arc<Metrics>>) {
        let Some(mut writer) = self.lock().writer.take() else {
            return;
        };
        let resource = self.inner.resource.clone();
        let labels = resource_labels(&resource, self.inner.cluster.as_deref());
        let (watcher_metrics, objects) = match &metrics {
            Some(m) => (
                WatcherMetrics::new(m, labels.clone()),
                Some(m.cache_objects.get_or_create(&labels).clone()),
            ),
            None => (WatcherMetrics::default(), None),
        };
        let objects: Option<Gauge> = objects;
        let keep = self
            .inner
            .keep_managed_fields
            .load(std::sync::atomic::Ordering::Relaxed);
        let stream = watcher::instrument(self.watch(keep), resource, watcher_metrics);
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            let Ok(event) = item else {
                // The watcher logged it and is backing off.
                continue;
            };
            let state = self.lock();
            writer.apply_each(event, |change| {
                for handler in &state.handlers {
                    handler(&change);
                }
            });
            drop(state);
            if let Some(g) = &objects {
                g.set(self.inner.store.len() as i64);
            }
        }
    }
}

/// kube-runtime's watcher over `api`, its objects decoded without `metadata.managedFields`
/// (skipped by the parser, never allocated).
pub(crate) fn watch_lean<K>(
    api: Api<K>,
    config: watcher::Config,
) -> futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let lean = Api::<Lean<K>>::all_with(api.clone().into_client(), &LeanType::of(&api));
    watcher::watcher(lean, config)
        .map(|item| item.map(unwrap_event))
        .boxed()
}

fn unwrap_event<K>(event: watcher::Event<Lean<K>>) -> watcher::Event<K> {
    match event {
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(obj) => watcher::Event::InitApply(obj.0),
        watcher::Event::InitDone => watcher::Event::InitDone,
        watcher::Event::Apply(obj) => watcher::Event::Apply(obj.0),
        watcher::Event::Delete(obj) => watcher::Event::Delete(obj.0),
    }
}

type InformerKey = (TypeId, String, String);

/// One informer per resource type, URL and selectors, shared by everything that asks.
#[derive(Default)]
pub struct Informers {
    cluster: Option<Arc<str>>,
    map: Mutex<HashMap<InformerKey, Box<dyn Any + Send + Sync>>>,
    starters: Mutex<Vec<Starter>>,
}

/// Starts one informer (type-erased), and tells whether its cache is ready.
pub(crate) struct Starter {
    pub(crate) run:
        Box<dyn FnOnce(Option<Arc<Metrics>>) -> futures::future::BoxFuture<'static, ()> + Send>,
    pub(crate) ready: Arc<dyn ReadyFlag>,
    pub(crate) resource: String,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").finish_non_exhaustive()
    }
}

impl Informers {
    /// Informers of one cluster of a [`Fleet`](crate::fleet::Fleet): its name labels their
    /// metrics.
    pub(crate) fn for_cluster(cluster: Option<Arc<str>>) -> Informers {
        Informers {
            cluster,
            ..Informers::default()
        }
    }

    /// The cluster these informers watch (`None` outside a fleet).
    pub(crate) fn cluster(&self) -> Option<&Arc<str>> {
        self.cluster.as_ref()
    }

    /// The shared informer for `api` and `config`'s selectors, created on first use.
    pub fn get<K>(&self, api: Api<K>, config: watcher::Config) -> Informer<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let key = (
            TypeId::of::<K>(),
            api.resource_url().to_string(),
            format!(
                "{}|{}",
                config.label_selector.as_deref().unwrap_or(""),
                config.field_selector.as_deref().unwrap_or("")
            ),
        );
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = map.get(&key).and_then(|b| b.downcast_ref::<Informer<K>>()) {
            return existing.clone();
        }
        let informer = Informer::in_cluster(api, config, self.cluster.clone());
        map.insert(key, Box::new(informer.clone()));
        let (run, ready) = (informer.clone(), informer.store());
        self.starters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Starter {
                resource: informer.resource().to_string(),
                run: Box::new(move |metrics| Box::pin(async move { run.run(metrics).await })),
                ready: Arc::new(ready),
            });
        informer
    }

    /// Registers something else to start with the informers (a trigger-only watch).
    pub(crate) fn add_starter(&self, starter: Starter) {
        self.starters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(starter);
    }

    /// The readiness flags of the informers and triggers not started yet.
    pub(crate) fn ready_flags(&self) -> Vec<Arc<dyn ReadyFlag>> {
        let starters = self.starters.lock().unwrap_or_else(|e| e.into_inner());
        starters.iter().map(|s| s.ready.clone()).collect()
    }

    /// The informers created so far that have not been handed to a runner yet.
    pub(crate) fn take_starters(&self) -> Vec<Starter> {
        std::mem::take(&mut *self.starters.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
