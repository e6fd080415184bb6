//! Controllers: what to watch, what triggers a reconcile, and the workers that run it.
//!
//! A [`Controller`] names a primary resource and, optionally, resources it
//! [owns](Controller::owns) (a change to a child reconciles its controller owner) and resources
//! it [watches](Controller::watches) through a mapping function. The primary resource is
//! filtered by [`generation_changed`](crate::predicate::generation_changed) unless
//! [`with_predicate`](Controller::with_predicate) says otherwise.
//!
//! Hand it to a [`Manager`](crate::Manager) with a reconciler. Then:
//! event handlers only enqueue keys into the controller's [`WorkQueue`]; once every cache it
//! reads is ready, `concurrency` workers take keys (never two on the same key), read the latest
//! cached object, and run the reconciler under a deadline, a cancellation token, a tracing span
//! (`controller`, `object`, `reconcile_id`) and a panic guard. The result goes through the
//! error policy (see [`reconcile`](crate::reconcile)) and the
//! [hot-loop detector](crate::hotloop).
//!
//! The primary's first list is not copied into the queue whole: workers take its keys from
//! the cache a batch at a time, in key order and ahead of keys queued by later changes (a
//! change to a key not reached yet is folded into it), so every object is reconciled once,
//! in the order queuing the whole list would give, without a second copy of every key.

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::cache::{Change, Index, ReadyFlag, Store};
use crate::hotloop::{HotLoopConfig, HotLoopDetector};
use crate::informer::Informers;
use crate::key::ObjectKey;
use crate::metrics::{Metrics, controller_labels, queue_labels, resource_labels};
use crate::predicate::{Predicate, generation_changed};
use crate::queue::{RateLimit, WorkQueue};
use crate::reconcile::{
    Action, ErrorClass, Middleware, OnError, Outcome, ReconcileInfo, ReconcileScope, SCOPE, Stop,
    classify, retry_after,
};
use crate::watcher;

/// Bounds every resource type the runtime caches.
pub trait CachedResource:
    Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static
{
}

impl<K> CachedResource for K where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static
{
}

type Wire<K> = Box<dyn FnOnce(&Informers, &Wiring<K>) -> Arc<dyn ReadyFlag> + Send>;

/// A user's error policy ([`Controller::error_policy`]).
type ErrorPolicy<K> =
    Arc<dyn Fn(&K, &(dyn std::error::Error + 'static), ErrorClass) -> OnError + Send + Sync>;

/// What a trigger needs to enqueue keys.
struct Wiring<K> {
    queue: KeyQueue,
    primary: Store<K>,
    /// Told of every key a watched object's change queues (new input, not an echo).
    hot: Arc<HotLoopDetector>,
}

/// A controller's configuration (see the module docs).
pub struct Controller<K: Resource> {
    name: String,
    api: Api<K>,
    config: watcher::Config,
    kind: String,
    group: String,
    predicate: Arc<dyn Predicate<K>>,
    triggers: Vec<Wire<K>>,
    indexes: Vec<Index<K>>,
    concurrency: usize,
    timeout: Duration,
    rate_limit: RateLimit,
    hot_loop: HotLoopConfig,
    middleware: Vec<Arc<dyn Middleware<K>>>,
    error_policy: Option<ErrorPolicy<K>>,
    keep_managed_fields: bool,
    quiet_retries: u32,
}

impl<K: Resource> Debug for Controller<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

impl<K> Controller<K>
where
    K: CachedResource,
    K::DynamicType: Default,
{
    /// A controller of the objects `api` lists, watched as `config` says (kube-runtime's
    /// [`watcher::Config`]). Its name (for metrics and logs) defaults to the lower-case kind.
    pub fn new(api: Api<K>, config: watcher::Config) -> Controller<K> {
        Controller::new_with(api, config, &K::DynamicType::default())
    }
}

impl<K: CachedResource> Controller<K> {
    /// A controller of a type known only at run time: `api` and `dyntype` describe the same
    /// resource — for [`DynamicObject`](kube::api::DynamicObject), the
    /// [`ApiResource`](kube::api::ApiResource) found by [`kube::discovery`]:
    ///
    /// ```no_run
    /// # async fn run(client: kube::Client) -> Result<(), kube::Error> {
    /// use kube::api::{Api, DynamicObject, GroupVersionKind};
    /// use konverge_runtime::{Controller, watcher};
    ///
    /// let gvk = GroupVersionKind::gvk("apps", "v1", "Deployment");
    /// let (resource, _caps) = kube::discovery::pinned_kind(&client, &gvk).await?;
    /// let api = Api::<DynamicObject>::all_with(client, &resource);
    /// let controller = Controller::new_with(api, watcher::Config::default(), &resource);
    /// # Ok(()) }
    /// ```
    pub fn new_with(api: Api<K>, config: watcher::Config, dyntype: &K::DynamicType) -> Self {
        let kind = K::kind(dyntype).to_string();
        Controller {
            name: kind.to_lowercase(),
            group: K::group(dyntype).to_string(),
            kind,
            api,
            config,
            predicate: Arc::new(generation_changed::<K>()),
            triggers: Vec::new(),
            indexes: Vec::new(),
            concurrency: 1,
            timeout: Duration::from_secs(300),
            rate_limit: RateLimit::default(),
            hot_loop: HotLoopConfig::default(),
            middleware: Vec::new(),
            error_policy: None,
            keep_managed_fields: false,
            quiet_retries: 0,
        }
    }

    /// Names the controller (metrics label `controller`, log field).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Replaces the primary resource's predicate (default: generation changed).
    pub fn with_predicate(mut self, predicate: impl Predicate<K> + 'static) -> Self {
        self.predicate = Arc::new(predicate);
        self
    }

    /// How many objects are reconciled at once (default 1, as controller-runtime). One object
    /// is never reconciled by two workers at once, whatever this is.
    pub fn concurrency(mut self, workers: usize) -> Self {
        self.concurrency = workers.max(1);
        self
    }

    /// Deadline of each reconcile (default 5 minutes).
    pub fn reconcile_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Retry spacing for failed reconciles.
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.rate_limit = limit;
        self
    }

    /// Logs a failed reconcile that will be retried at debug level until the object has
    /// failed `retries` times in a row, and at warn level from then on (default 0: every
    /// failure at warn, as controller-runtime logs every reconciler error). For controllers
    /// whose failures are routine races settled by a retry, as kube-controller-manager's
    /// controllers log a failed sync at verbosity 2 until its 15th retry (`maxRetries`).
    /// Terminal errors, panics and timeouts are logged as always; the metrics count every
    /// failure.
    pub fn quiet_retries(mut self, retries: u32) -> Self {
        self.quiet_retries = retries;
        self
    }

    /// Hot-loop detection settings.
    pub fn hot_loop(mut self, config: HotLoopConfig) -> Self {
        self.hot_loop = config;
        self
    }

    /// Adds a middleware around every reconcile.
    pub fn middleware(mut self, middleware: impl Middleware<K> + 'static) -> Self {
        self.middleware.push(Arc::new(middleware));
        self
    }

    /// Decides what a failed reconcile leads to, on top of the [error classes](crate::reconcile):
    /// `policy` sees the object, the error and the class [`classify`] gave it, and returns
    /// the class to treat it as, or a fixed delay ([`OnError::Requeue`], as kube-runtime's
    /// `error_policy` returning `Action::requeue`). Without it, each class has its default
    /// policy.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # fn controller(c: konverge_runtime::Controller<ConfigMap>) -> konverge_runtime::Controller<ConfigMap> {
    /// use konverge_runtime::reconcile::{ErrorClass, OnError};
    ///
    /// c.error_policy(|_cm: &ConfigMap, error, class| match class {
    ///     // A dependency outside the cluster: poll it every minute instead of backing off.
    ///     ErrorClass::Retry if error.to_string().contains("upstream") => {
    ///         OnError::Requeue(Duration::from_secs(60))
    ///     }
    ///     class => OnError::Class(class),
    /// })
    /// # }
    /// ```
    pub fn error_policy<P>(mut self, policy: P) -> Self
    where
        P: Fn(&K, &(dyn std::error::Error + 'static), ErrorClass) -> OnError
            + Send
            + Sync
            + 'static,
    {
        self.error_policy = Some(Arc::new(policy));
        self
    }

    /// Keeps `metadata.managedFields` in the primary resource's cache. By default they are
    /// skipped as objects are parsed: they are most of an object's size once server-side apply
    /// is in use, and a reconciler rarely reads them. (The cache is shared: it keeps them if any
    /// controller reading it asks to.)
    pub fn keep_managed_fields(mut self) -> Self {
        self.keep_managed_fields = true;
        self
    }

    /// Adds an index to the primary resource's cache.
    pub fn index(mut self, index: Index<K>) -> Self {
        self.indexes.push(index);
        self
    }

    /// Reconciles the controller owner of every object `api` lists whose controller
    /// ownerReference points at this controller's kind.
    ///
    /// A trigger needs nothing but ownerReferences, so a cluster-wide `api` is watched as
    /// metadata only (`PartialObjectMetadata`): children's contents are neither transferred,
    /// decoded nor cached. A namespaced `api` is watched as given. For children of a kind known only at run time, see [`owns_with`](Self::owns_with). To read
    /// children from a cache, ask the manager for a [`store`](crate::Manager::store) of them.
    pub fn owns<C>(self, api: Api<C>, config: watcher::Config) -> Self
    where
        C: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        C::DynamicType: Default,
    {
        self.owns_with(api, config, &C::DynamicType::default())
    }

    /// [`owns`](Self::owns) for a child type known only at run time: `dyntype` describes
    /// the resource `api` lists (for [`DynamicObject`](kube::api::DynamicObject), its
    /// [`ApiResource`](kube::api::ApiResource)).
    pub fn owns_with<C>(
        mut self,
        api: Api<C>,
        config: watcher::Config,
        dyntype: &C::DynamicType,
    ) -> Self
    where
        C: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let (kind, group) = (self.kind.clone(), self.group.clone());
        let metadata = api.namespace().is_none().then(|| {
            Api::<kube::core::PartialObjectMeta<C>>::all_with(api.clone().into_client(), dyntype)
        });
        self.triggers.push(Box::new(move |informers, wiring| {
            let primary = wiring.primary.clone();
            let owners = move |meta: &kube::api::ObjectMeta| -> Vec<ObjectKey> {
                meta.owner_references
                    .iter()
                    .flatten()
                    .filter(|owner| {
                        owner.controller == Some(true)
                            && owner.kind == kind
                            && group_of(&owner.api_version) == group
                    })
                    .map(|owner| owner_key(&primary, meta.namespace.as_deref(), &owner.name))
                    .collect()
            };
            let resource = api.resource_url().to_string();
            // A trigger reads ownerReferences only: managedFields are skipped unparsed.
            if let Some(api) = metadata {
                let stream = move || crate::informer::watch_lean(api, config);
                let map = move |obj: &kube::core::PartialObjectMeta<C>| owners(obj.meta());
                trigger(informers, resource, stream, wiring, Arc::new(map))
            } else {
                // Metadata-only Apis of one namespace exist for dynamic types only; a
                // namespaced watch is small anyway.
                let stream = move || crate::informer::watch_lean(api, config);
                let map = move |obj: &C| owners(obj.meta());
                trigger(informers, resource, stream, wiring, Arc::new(map))
            }
        }));
        self
    }

    /// Reconciles the objects `map` names whenever an object `api` lists changes (or is
    /// deleted). The watched objects are not cached.
    pub fn watches<C, F>(mut self, api: Api<C>, config: watcher::Config, map: F) -> Self
    where
        C: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        F: Fn(&C) -> Vec<ObjectKey> + Send + Sync + 'static,
    {
        self.triggers.push(Box::new(move |informers, wiring| {
            let resource = api.resource_url().to_string();
            let stream = move || futures::StreamExt::boxed(watcher::watcher(api, config));
            trigger(informers, resource, stream, wiring, Arc::new(map))
        }));
        self
    }

    /// Reconciles the objects `map` names whenever an object in the manager's shared cache
    /// of `api` (the [`Store`] that [`Manager::store`](crate::Manager::store) returns for the
    /// same `api` and `config`) changes. `map` sees the whole [`Change`] — the object before
    /// and after, `new: None` for a deletion — once the cache holds it, so a reconcile it
    /// triggers reads the change from that cache. This is how a controller keeps children in
    /// a cache and is woken by them without a second watch: kube-controller-manager's
    /// controllers map a pod to its controller owner, or to every owner whose selector
    /// matches it, this way.
    pub fn watches_cached<C, F>(mut self, api: Api<C>, config: watcher::Config, map: F) -> Self
    where
        C: CachedResource,
        F: Fn(&Change<C>) -> Vec<ObjectKey> + Send + Sync + 'static,
    {
        self.triggers.push(Box::new(move |informers, wiring| {
            let informer = informers.get(api, config);
            let (queue, hot) = (wiring.queue.clone(), wiring.hot.clone());
            informer.subscribe(Arc::new(move |change: &Change<C>| {
                for key in map(change) {
                    hot.on_input(&key);
                    queue.add(&key);
                }
            }));
            Arc::new(informer.store())
        }));
        self
    }

    /// Connects the controller to shared informers and returns what the manager runs.
    pub(crate) fn wire<Ctx, E, F, Fut>(
        self,
        informers: &Informers,
        metrics: Arc<Metrics>,
        reconcile: F,
        ctx: Arc<Ctx>,
    ) -> Runnable
    where
        Ctx: Send + Sync + 'static,
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let cluster = informers.cluster().cloned();
        let queue = KeyQueue::new(WorkQueue::build(
            self.rate_limit.clone(),
            Some((
                metrics.clone(),
                queue_labels(&self.name, cluster.as_deref()),
            )),
        ));
        let informer = informers.get(self.api.clone(), self.config.clone());
        if self.keep_managed_fields {
            informer.keep_managed_fields();
        }
        for index in self.indexes {
            // Controllers are wired before anything starts, so this cannot fail; if it did,
            // lookups by the index report it.
            let _ = informer.add_index(index);
        }
        let primary = informer.store();
        let hot = Arc::new(HotLoopDetector::new(
            self.hot_loop,
            &self.name,
            cluster.as_deref(),
            Some(&metrics),
        ));
        {
            let queue = queue.clone();
            let predicate = self.predicate.clone();
            let hot = hot.clone();
            let store = primary.clone();
            informer.subscribe(Arc::new(move |change: &Change<K>| {
                if !store.is_ready() {
                    // The first list, reported before the store is marked ready: its keys
                    // are fed from the cache as workers drain the queue.
                    queue.sweep.start(&queue.queue);
                    return;
                }
                match &change.new {
                    None => queue.sweep.add_or_defer(&queue.queue, &change.key, false),
                    Some(new) => {
                        if predicate.allows(change.old.as_deref(), new) {
                            hot.on_change(&change.key, || {
                                let old = serde_json::to_value(change.old.as_deref()?).ok()?;
                                Some((old, serde_json::to_value(new.as_ref()).ok()?))
                            });
                            queue.add(&change.key);
                        }
                    }
                }
            }));
        }
        let wiring = Wiring {
            queue: queue.clone(),
            primary: primary.clone(),
            hot: hot.clone(),
        };
        let mut ready: Vec<Arc<dyn ReadyFlag>> = vec![Arc::new(primary.clone())];
        for trigger in self.triggers {
            ready.push(trigger(informers, &wiring));
        }
        let labels = controller_labels(&self.name, cluster.as_deref());
        // Export every series at zero from the start, as controller-runtime does, so rates and
        // alerts work before the first error.
        for result in ["success", "error", "requeue", "requeue_after"] {
            let mut with_result = labels.clone();
            with_result.push(("result", result.to_string()));
            drop(metrics.reconcile_total.get_or_create(&with_result));
        }
        drop(metrics.reconcile_errors.get_or_create(&labels));
        drop(metrics.terminal_errors.get_or_create(&labels));
        drop(metrics.panics.get_or_create(&labels));
        drop(metrics.active_workers.get_or_create(&labels));
        drop(metrics.hot_loops.get_or_create(&labels));
        let worker = Arc::new(Worker {
            name: self.name.clone(),
            cluster,
            kind: self.kind.clone(),
            error_policy: self.error_policy,
            store: primary,
            queue,
            hot,
            reconcile: Box::new(move |obj, ctx| Box::pin(reconcile(obj, ctx))),
            ctx,
            timeout: self.timeout,
            quiet_retries: self.quiet_retries,
            middleware: self.middleware,
            metrics,
            labels,
            cancel: CancellationToken::new(),
            ready,
            written: std::sync::Mutex::new(HashMap::new()),
            predicate: self.predicate,
        });
        let concurrency = self.concurrency;
        Runnable {
            name: self.name,
            run: Box::new(move |stop, grace| Box::pin(worker.run(stop, grace, concurrency))),
        }
    }
}

/// Maps a watched object to the primary objects it should reconcile.
type KeyMap<C> = Arc<dyn Fn(&C) -> Vec<ObjectKey> + Send + Sync>;

/// Enqueues what `map` names for every object `api` lists, without caching the objects —
/// like kube-runtime's triggers. Missed deletions cannot be diffed without a cache, so after a
/// relist (410) every primary object is enqueued instead: rare, and level-triggered.
fn trigger<K, C, S>(
    informers: &Informers,
    resource: String,
    stream: S,
    wiring: &Wiring<K>,
    map: KeyMap<C>,
) -> Arc<dyn ReadyFlag>
where
    K: Send + Sync + 'static,
    C: Send + 'static,
    S: FnOnce() -> futures::stream::BoxStream<'static, Result<watcher::Event<C>, watcher::Error>>
        + Send
        + 'static,
{
    let ready = Arc::new(TriggerReady(tokio::sync::watch::Sender::new(false)));
    let (queue, primary, flag) = (wiring.queue.clone(), wiring.primary.clone(), ready.clone());
    let hot = wiring.hot.clone();
    let labels = resource_labels(&resource, informers.cluster().map(|c| &**c));
    informers.add_starter(crate::informer::Starter {
        resource: resource.clone(),
        ready: ready.clone(),
        run: Box::new(move |metrics| {
            Box::pin(async move {
                let watcher_metrics = match &metrics {
                    Some(m) => watcher::WatcherMetrics::new(m, labels),
                    None => watcher::WatcherMetrics::default(),
                };
                let stream = watcher::instrument(stream(), resource, watcher_metrics);
                futures::pin_mut!(stream);
                let mut first = true;
                while let Some(item) = futures::StreamExt::next(&mut stream).await {
                    let Ok(event) = item else { continue };
                    match event {
                        watcher::Event::Init => {}
                        // The first list needs no triggers: every primary is queued by its own
                        // initial list, in key order.
                        watcher::Event::InitApply(_) if first => {}
                        watcher::Event::InitApply(obj)
                        | watcher::Event::Apply(obj)
                        | watcher::Event::Delete(obj) => {
                            for key in map(&obj) {
                                hot.on_input(&key);
                                queue.add(&key);
                            }
                        }
                        watcher::Event::InitDone => {
                            if !first {
                                for key in primary.keys() {
                                    queue.add(&key);
                                }
                            }
                            first = false;
                            flag.0.send_replace(true);
                        }
                    }
                }
            })
        }),
    });
    ready
}

struct TriggerReady(tokio::sync::watch::Sender<bool>);

impl ReadyFlag for TriggerReady {
    fn is_ready(&self) -> bool {
        *self.0.borrow()
    }

    fn wait(&self) -> BoxFuture<'static, ()> {
        let mut rx = self.0.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|r| *r).await;
        })
    }
}

/// The key of an owner named by a child in `namespace`: namespaced unless the primary cache
/// knows it as a cluster-scoped object.
fn owner_key<K>(primary: &Store<K>, namespace: Option<&str>, name: &str) -> ObjectKey {
    match namespace {
        Some(ns) => {
            let namespaced = ObjectKey::namespaced(ns, name);
            let cluster = ObjectKey::cluster(name);
            if !primary.contains(&namespaced) && primary.contains(&cluster) {
                cluster
            } else {
                namespaced
            }
        }
        None => ObjectKey::cluster(name),
    }
}

/// A wired controller, ready to run.
pub(crate) struct Runnable {
    pub(crate) name: String,
    pub(crate) run: Box<dyn FnOnce(CancellationToken, Duration) -> BoxFuture<'static, ()> + Send>,
}

type ReconcileFn<K, Ctx, E> =
    Box<dyn Fn(Arc<K>, Arc<Ctx>) -> BoxFuture<'static, Result<Action, E>> + Send + Sync>;

struct Worker<K, Ctx, E> {
    name: String,
    /// The cluster, in a [`Fleet`](crate::fleet::Fleet).
    cluster: Option<Arc<str>>,
    /// The primary resource's kind.
    kind: String,
    error_policy: Option<ErrorPolicy<K>>,
    store: Store<K>,
    queue: KeyQueue,
    hot: Arc<HotLoopDetector>,
    reconcile: ReconcileFn<K, Ctx, E>,
    ctx: Arc<Ctx>,
    timeout: Duration,
    /// Failures in a row of one object logged at debug level before warn.
    quiet_retries: u32,
    middleware: Vec<Arc<dyn Middleware<K>>>,
    metrics: Arc<Metrics>,
    labels: crate::metrics::Labels,
    /// Cancels reconciles still running when the shutdown grace period ends.
    cancel: CancellationToken,
    /// Every cache the controller reads; the first reconcile waits for all of them.
    ready: Vec<Arc<dyn ReadyFlag>>,
    /// The last resourceVersion reconciles wrote to each object, and when: the next
    /// reconcile of it waits until the cache has caught up.
    written: std::sync::Mutex<HashMap<ObjectKey, (u64, Instant)>>,
    /// The primary resource's predicate (the initial sweep applies it as it feeds keys).
    predicate: Arc<dyn Predicate<K>>,
}

/// A key as the controller's queue holds it: namespace and name in one allocation.
///
/// The queue holds every key of a burst at once (all the children of a large list changing
/// queue their owners), and an [`ObjectKey`]'s size and two strings were most of its memory.
/// The cluster is left out: one controller's queue holds one cluster's keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct QueueKey {
    /// The namespace, then the name.
    text: Box<str>,
    /// The namespace's length in `text`, or `None` for a cluster-scoped key.
    namespace: Option<u32>,
}

impl QueueKey {
    fn parts(&self) -> (Option<&str>, &str) {
        match self.namespace {
            Some(len) => {
                let (namespace, name) = self.text.split_at(len as usize);
                (Some(namespace), name)
            }
            None => (None, &self.text),
        }
    }

    fn key(&self) -> ObjectKey {
        let (namespace, name) = self.parts();
        ObjectKey {
            cluster: None,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }
}

impl From<&ObjectKey> for QueueKey {
    fn from(key: &ObjectKey) -> QueueKey {
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let mut text = String::with_capacity(namespace.len() + key.name.len());
        text.push_str(namespace);
        text.push_str(&key.name);
        QueueKey {
            text: text.into_boxed_str(),
            // Namespaces are DNS labels; one longer than u32::MAX cannot be stored anyway.
            namespace: key
                .namespace
                .as_ref()
                .map(|ns| u32::try_from(ns.len()).unwrap_or(u32::MAX)),
        }
    }
}

impl PartialOrd for QueueKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for QueueKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// A key's namespace and name, the order the sweep walks the cache in.
fn parts(key: &ObjectKey) -> (Option<&str>, &str) {
    (key.namespace.as_deref(), &key.name)
}

/// The controller's work queue: keys held as [`QueueKey`]s, and the primary's first list
/// fed from the cache ([`InitialSweep`]).
#[derive(Clone)]
struct KeyQueue {
    queue: WorkQueue<QueueKey>,
    sweep: Arc<InitialSweep>,
}

impl KeyQueue {
    fn new(queue: WorkQueue<QueueKey>) -> KeyQueue {
        KeyQueue {
            queue,
            sweep: Arc::new(InitialSweep::default()),
        }
    }

    /// Queues `key` (a change to it passed the predicate, or a trigger names it).
    fn add(&self, key: &ObjectKey) {
        self.sweep.add_or_defer(&self.queue, key, true);
    }

    fn add_after(&self, key: &ObjectKey, delay: Duration) {
        self.queue.add_after(QueueKey::from(key), delay);
    }

    fn add_rate_limited(&self, key: &ObjectKey) -> Duration {
        self.queue.add_rate_limited(QueueKey::from(key))
    }

    fn add_at_once_then_rate_limited(&self, key: &ObjectKey) -> Duration {
        self.queue
            .add_at_once_then_rate_limited(QueueKey::from(key))
    }

    fn forget(&self, key: &ObjectKey) {
        self.queue.forget(&QueueKey::from(key));
    }

    fn num_requeues(&self, key: &ObjectKey) -> u32 {
        self.queue.num_requeues(&QueueKey::from(key))
    }

    /// The next key, after topping the queue up from the first list.
    async fn get<K>(&self, store: &Store<K>, predicate: &dyn Predicate<K>) -> Option<ObjectKey> {
        self.sweep.feed(&self.queue, store, predicate);
        self.queue.get().await.map(|key| key.key())
    }

    fn done(&self, key: &ObjectKey) {
        self.queue.done(&QueueKey::from(key));
    }
}

/// How many keys of the first list are moved from the cache to the queue at a time, once
/// fewer than this many of them are waiting.
const SWEEP_BATCH: usize = 256;

/// The primary's first list, fed to the queue from the cache a batch at a time instead of
/// queued whole: queuing every key of a large cache at once holds a second copy of every
/// key (in the queue's order and its de-duplication map) until the workers reach it, the
/// largest allocation a controller makes after its cache. The keys go to the queue in the
/// same (key) order, each once, ahead of keys queued by later changes
/// ([`WorkQueue::add_first`]), and a change to a key not fed yet is folded into it, as the
/// queue would have folded it into the queued key: the order of reconciles is the one
/// queuing the whole list at once gives.
#[derive(Default)]
struct InitialSweep {
    state: std::sync::Mutex<SweepState>,
}

#[derive(Default)]
struct SweepState {
    /// Whether keys of the first list are still to be fed.
    active: bool,
    /// The last key fed; every key after it is still to come.
    cursor: Option<ObjectKey>,
    /// Keys not fed yet whose change passed the predicate since the list: fed whatever
    /// the predicate says of the object when the sweep reaches it.
    changed: std::collections::BTreeSet<ObjectKey>,
    /// Keys of the first list not fed yet (counted into the queue-depth metric).
    remaining: usize,
}

impl InitialSweep {
    fn lock(&self) -> std::sync::MutexGuard<'_, SweepState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One more object of the first list.
    fn start(&self, queue: &WorkQueue<QueueKey>) {
        let mut state = self.lock();
        state.active = true;
        state.remaining += 1;
        queue.set_backlog(state.remaining);
    }

    /// Queues `key` for a change, unless the sweep has yet to reach it: then it is queued
    /// when the sweep does (`passed`: the change passed the predicate).
    fn add_or_defer(&self, queue: &WorkQueue<QueueKey>, key: &ObjectKey, passed: bool) {
        let mut state = self.lock();
        let ahead = state.active && state.cursor.as_ref().is_none_or(|c| parts(key) > parts(c));
        if !ahead {
            drop(state);
            queue.add(QueueKey::from(key));
        } else if passed {
            state.changed.insert(key.clone());
        }
    }

    /// Feeds the first list to the queue, a batch at a time, until it holds a batch's worth
    /// of keys (or the list is done): a worker about to wait for a key never waits while
    /// keys of the first list are left.
    fn feed<K>(&self, queue: &WorkQueue<QueueKey>, store: &Store<K>, predicate: &dyn Predicate<K>) {
        let mut state = self.lock();
        while state.active && queue.len_first() < SWEEP_BATCH {
            let keys = store.keys_after(state.cursor.as_ref(), SWEEP_BATCH);
            for key in &keys {
                let changed = state.changed.remove(key);
                if changed
                    || store
                        .get(key)
                        .is_some_and(|obj| predicate.allows(None, &obj))
                {
                    queue.add_first(QueueKey::from(key));
                }
            }
            state.remaining = state.remaining.saturating_sub(keys.len());
            if keys.len() < SWEEP_BATCH {
                // Done. Keys that changed and were then deleted before the sweep reached
                // them are queued, as their change queued them before.
                state.active = false;
                state.remaining = 0;
                for key in std::mem::take(&mut state.changed) {
                    queue.add_first(QueueKey::from(&key));
                }
            }
            if let Some(last) = keys.into_iter().next_back() {
                state.cursor = Some(last);
            }
            queue.set_backlog(state.remaining);
        }
    }
}

/// How often a key whose cache is behind its own write is looked at again.
const READ_YOUR_WRITES_POLL: Duration = Duration::from_millis(10);
/// How long a reconcile waits at most for the cache to see the previous reconcile's write.
const READ_YOUR_WRITES_LIMIT: Duration = Duration::from_secs(5);

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

impl<K, Ctx, E> Worker<K, Ctx, E>
where
    K: CachedResource,
    Ctx: Send + Sync + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    async fn run(self: Arc<Self>, stop: CancellationToken, grace: Duration, concurrency: usize) {
        let waits: Vec<_> = self.ready_waits();
        tokio::select! {
            _ = futures::future::join_all(waits) => {}
            _ = stop.cancelled() => return,
        }
        self.metrics
            .max_concurrent
            .get_or_create(&self.labels)
            .set(concurrency as i64);
        tracing::info!(controller = %self.name, workers = concurrency, "caches ready; starting workers");
        let mut workers = JoinSet::new();
        for _ in 0..concurrency {
            let me = self.clone();
            workers.spawn(async move {
                loop {
                    let next = me.queue.get(&me.store, me.predicate.as_ref()).await;
                    let Some(key) = next else {
                        break;
                    };
                    me.process(&key).await;
                    me.queue.done(&key);
                }
            });
        }
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => self.queue.queue.update_progress_metrics(),
                _ = stop.cancelled() => break,
            }
        }
        self.queue.queue.shut_down();
        let drained = tokio::time::timeout(grace, async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(controller = %self.name, ?grace, "reconciles still running after the shutdown grace period; cancelling them");
            self.cancel.cancel();
            workers.abort_all();
            while workers.join_next().await.is_some() {}
        }
        tracing::info!(controller = %self.name, "stopped");
    }

    fn ready_waits(&self) -> Vec<BoxFuture<'static, ()>> {
        self.ready.iter().map(|r| r.wait()).collect()
    }

    async fn process(&self, key: &ObjectKey) {
        let Some(obj) = self.store.get(key) else {
            // Deleted: nothing to converge (finalizers run while the object still exists).
            self.queue.forget(key);
            self.hot.forget(key);
            return;
        };
        if self.cache_behind_own_write(key, &obj) {
            self.queue.add_after(key, READ_YOUR_WRITES_POLL);
            return;
        }
        if let Some(wait) = self.hot.before(key) {
            self.queue.add_after(key, wait);
            return;
        }
        let info = ReconcileInfo {
            controller: self.name.clone(),
            key: key.clone().in_cluster(self.cluster.clone()),
            id: uuid::Uuid::new_v4().to_string(),
            retries: self.queue.num_requeues(key),
        };
        for (i, m) in self.middleware.iter().enumerate() {
            if let Err(stop) = m.before(&obj, &info) {
                match stop {
                    Stop::Skip => self.queue.forget(key),
                    Stop::Requeue(delay) => self.queue.add_after(key, delay),
                    Stop::Fail(reason) => {
                        tracing::warn!(controller = %self.name, object = %key, %reason, "middleware failed the reconcile");
                        self.count_error();
                        self.queue.add_rate_limited(key);
                    }
                }
                for m in self.middleware[..i].iter().rev() {
                    m.after(&obj, &info, &Outcome::Stopped);
                }
                self.hot.after(key);
                return;
            }
        }
        let outcome = self.reconcile_once(key, &obj, &info).await;
        self.hot.after(key);
        for m in self.middleware.iter().rev() {
            m.after(&obj, &info, &outcome);
        }
    }

    /// Whether the cached `obj` is older than the last write a reconcile of `key` made to it
    /// (read your own writes); gives up waiting after [`READ_YOUR_WRITES_LIMIT`].
    fn cache_behind_own_write(&self, key: &ObjectKey, obj: &K) -> bool {
        let mut written = self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((version, at)) = written.get(key).copied() else {
            return false;
        };
        let cached = obj
            .meta()
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok());
        let behind = cached.is_some_and(|c| c < version);
        if behind && at.elapsed() < READ_YOUR_WRITES_LIMIT {
            return true;
        }
        if behind {
            tracing::warn!(controller = %self.name, object = %key, wrote = version, "cache did not catch up with our write; reconciling from it anyway");
        }
        written.remove(key);
        false
    }

    /// Whether a failure of `key`, just requeued, is still within [`Controller::quiet_retries`].
    fn quiet(&self, key: &ObjectKey) -> bool {
        self.queue.num_requeues(key) <= self.quiet_retries
    }

    fn count_error(&self) {
        self.metrics
            .reconcile_errors
            .get_or_create(&self.labels)
            .inc();
        self.result("error");
    }

    fn result(&self, result: &str) {
        let mut labels = self.labels.clone();
        labels.push(("result", result.to_string()));
        self.metrics.reconcile_total.get_or_create(&labels).inc();
    }

    async fn reconcile_once(&self, key: &ObjectKey, obj: &Arc<K>, info: &ReconcileInfo) -> Outcome {
        let span = tracing::info_span!(
            "reconcile",
            controller = %self.name,
            object = %info.key,
            reconcile_id = %info.id,
            cluster = tracing::field::Empty,
        );
        if let Some(cluster) = &self.cluster {
            span.record("cluster", &**cluster);
        }
        let deadline = Instant::now() + self.timeout;
        let written = Arc::new(std::sync::Mutex::new(None));
        let scope = ReconcileScope {
            key: info.key.clone(),
            id: info.id.clone(),
            deadline,
            cancellation: self.cancel.child_token(),
            primary: std::any::TypeId::of::<K>(),
            kind: self.kind.clone(),
            written: written.clone(),
        };
        let token = scope.cancellation.clone();
        let active = self
            .metrics
            .active_workers
            .get_or_create(&self.labels)
            .clone();
        active.inc();
        let started = Instant::now();
        let run = AssertUnwindSafe((self.reconcile)(obj.clone(), self.ctx.clone())).catch_unwind();
        let result = tokio::time::timeout_at(deadline, SCOPE.scope(scope, run))
            .instrument(span.clone())
            .await;
        active.dec();
        let wrote = *written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(version) = wrote {
            self.written
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key.clone(), (version, Instant::now()));
        }
        self.metrics
            .reconcile_time
            .get_or_create(&self.labels)
            .observe(started.elapsed().as_secs_f64());
        let _enter = span.enter();
        match result {
            Ok(Ok(Ok(action))) => {
                self.queue.forget(key);
                match action.requeue_after() {
                    Some(delay) => {
                        self.result("requeue_after");
                        self.queue.add_after(key, delay);
                    }
                    None => self.result("success"),
                }
                tracing::debug!("reconciled");
                Outcome::Done(action)
            }
            Ok(Ok(Err(error))) => {
                let mut class = classify(&error);
                self.count_error();
                let decision = match &self.error_policy {
                    Some(policy) => policy(obj, &error, class),
                    None => OnError::Class(class),
                };
                let decision = match decision {
                    OnError::Class(chosen) => chosen,
                    OnError::Requeue(delay) => {
                        tracing::warn!(%error, %class, retry_in = ?delay, "reconcile failed; requeued as the error policy says");
                        self.queue.add_after(key, delay);
                        return Outcome::Failed {
                            class,
                            message: error.to_string(),
                        };
                    }
                };
                class = decision;
                match class {
                    ErrorClass::NotFound => {
                        tracing::debug!(%error, "reconcile: not found; done");
                        self.queue.forget(key);
                    }
                    ErrorClass::Conflict => {
                        // At once: the cache is about to have the newer version. If the next
                        // attempt conflicts again the cache is behind, and retrying at once
                        // would spin (in paused time, with the clock stopped) until it catches
                        // up: repeats back off from the base delay instead.
                        let delay = self.queue.add_at_once_then_rate_limited(key);
                        tracing::debug!(%error, retry_in = ?delay, "reconcile: conflict; requeued");
                    }
                    ErrorClass::Terminal => {
                        tracing::error!(%error, "reconcile failed terminally; not retrying");
                        self.metrics
                            .terminal_errors
                            .get_or_create(&self.labels)
                            .inc();
                        self.queue.forget(key);
                    }
                    ErrorClass::Retry => {
                        // The server's Retry-After wins over our own backoff: it knows its load.
                        let delay = match retry_after(&error) {
                            Some(after) => {
                                self.queue.add_after(key, after);
                                after
                            }
                            None => self.queue.add_rate_limited(key),
                        };
                        if self.quiet(key) {
                            tracing::debug!(%error, retry_in = ?delay, "reconcile failed");
                        } else {
                            tracing::warn!(%error, retry_in = ?delay, "reconcile failed");
                        }
                    }
                }
                Outcome::Failed {
                    class,
                    message: error.to_string(),
                }
            }
            Ok(Err(panic)) => {
                let message = panic_message(panic.as_ref());
                self.metrics.panics.get_or_create(&self.labels).inc();
                self.count_error();
                let delay = self.queue.add_rate_limited(key);
                tracing::error!(panic = %message, retry_in = ?delay, "reconcile panicked");
                Outcome::Panicked(message)
            }
            Err(_) => {
                token.cancel();
                self.count_error();
                let delay = self.queue.add_rate_limited(key);
                tracing::warn!(timeout = ?self.timeout, retry_in = ?delay, "reconcile timed out");
                Outcome::TimedOut
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_keys_round_trip_and_sort_as_object_keys() {
        let mut keys = vec![
            ObjectKey::namespaced("b", "a"),
            ObjectKey::namespaced("a", "zz"),
            ObjectKey::cluster("m"),
            ObjectKey::namespaced("ab", ""),
            ObjectKey::namespaced("a", "b"),
            ObjectKey::cluster("ab"),
        ];
        let mut queued: Vec<QueueKey> = keys.iter().map(QueueKey::from).collect();
        keys.sort();
        queued.sort();
        let back: Vec<ObjectKey> = queued.iter().map(QueueKey::key).collect();
        assert_eq!(back, keys);
        // "a" + "b" and "ab" + "" hold the same text: the namespace length tells them apart.
        assert_ne!(
            QueueKey::from(&ObjectKey::namespaced("a", "b")),
            QueueKey::from(&ObjectKey::namespaced("ab", ""))
        );
        assert_ne!(
            QueueKey::from(&ObjectKey::cluster("ab")),
            QueueKey::from(&ObjectKey::namespaced("", "ab"))
        );
        let in_cluster = ObjectKey::namespaced("a", "b").in_cluster(Some("east".into()));
        assert_eq!(
            QueueKey::from(&in_cluster).key(),
            ObjectKey::namespaced("a", "b")
        );
    }
}
