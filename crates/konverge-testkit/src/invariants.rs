//! Invariants of a whole controller, checked while a test drives its inputs: it converges,
//! a resync of a converged world writes nothing, no object grows under add/remove churn,
//! no object is rewritten again and again, finalizers are released, children are created in
//! dependency order, and properties given to [`Invariants::always`] hold on every change.
//!
//! [`Invariants`] watches the resources a test names, straight from the server (past the
//! faults, and outside the [`RequestLog`]), and keeps every change it sees: the object, its
//! size, the field manager that wrote it and the fields that changed. Each check reads that
//! history and, when it fails, says which object, what changed, who wrote it and how.

// A violation is a test's failure report, made once at the end of a check: its size on the
// error path costs nothing worth boxing for.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::env::TestEnv;
use crate::requests::RequestLog;

/// kube-apiserver refuses objects over 1.5 MiB.
pub const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024 / 2;

/// An object's identity: its resource (`configmaps`, `deployments.apps`), namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// The plural, qualified by its group for non-core resources (`deployments.apps`).
    pub resource: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl fmt::Display for ObjectRef {
    /// `configmaps default/mirror`, or `namespaces kube-system`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.resource, self.name)
        } else {
            write!(f, "{} {}/{}", self.resource, self.namespace, self.name)
        }
    }
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// It appeared.
    Added,
    /// It was written.
    Modified,
    /// It is gone.
    Deleted,
}

/// One change the watch saw.
#[derive(Debug, Clone)]
pub struct Change {
    /// Its place in the history, from 0.
    pub seq: u64,
    /// When it was seen.
    pub at: Instant,
    /// Which object.
    pub object: ObjectRef,
    /// What happened.
    pub kind: ChangeKind,
    /// The object's JSON size after the change.
    pub size: usize,
    /// The field manager of the newest `managedFields` entry: who wrote it.
    pub manager: Option<String>,
    /// The fields that changed (`.data.b`, `.metadata.annotations.stamp`), metadata
    /// bookkeeping (resourceVersion, managedFields, generation) left out.
    pub paths: Vec<String>,
    /// The controller owner's UID, for ordering children by parent.
    pub owner: Option<String>,
    /// The object's resourceVersion after the change: the server's revision, which orders
    /// changes across resources (each resource is watched on its own stream, so the order
    /// changes are seen in is not the order they happened in).
    pub resource_version: Option<u64>,
}

/// The objects as last seen.
#[derive(Debug, Clone, Default)]
pub struct World {
    objects: BTreeMap<ObjectRef, Arc<Value>>,
}

impl World {
    /// The object, if it exists.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<&Value> {
        let key = ObjectRef {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        self.objects.get(&key).map(|v| &**v)
    }

    /// The object as a typed value, if it exists and reads as `K`.
    pub fn get_as<K>(&self, namespace: &str, name: &str) -> Option<K>
    where
        K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
    {
        let resource = qualified(&ApiResource::erase::<K>(&()));
        let value = self.get(&resource, namespace, name)?;
        serde_json::from_value(value.clone()).ok()
    }

    /// Every object of `resource`, in key order.
    pub fn list<'w>(
        &'w self,
        resource: &'w str,
    ) -> impl Iterator<Item = (&'w ObjectRef, &'w Value)> {
        self.objects
            .iter()
            .filter(move |(k, _)| k.resource == resource)
            .map(|(k, v)| (k, &**v))
    }

    /// Every object, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&ObjectRef, &Value)> {
        self.objects.iter().map(|(k, v)| (k, &**v))
    }
}

/// An invariant that did not hold, with what a reader needs to see why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// The desired state was not reached, or writes did not stop, in time.
    #[error("did not converge within {waited:?}: {unmet}{}", recent_lines(.recent))]
    NotConverged {
        /// How long the check waited.
        waited: Duration,
        /// What was still wrong (the desired-state check's words, or "still writing").
        unmet: String,
        /// The last changes seen.
        recent: Vec<String>,
    },
    /// A resync of a converged world wrote.
    #[error("a resync of a converged world wrote {} time(s):{}", .writes.len(), recent_lines(.writes))]
    NotIdempotent {
        /// The writes, as the request log shows them.
        writes: Vec<String>,
    },
    /// An object grew across rounds that added and removed the same inputs.
    #[error("{object} grows under churn: {sizes:?} bytes after each round; fields that stayed: {}", .kept.join(", "))]
    Unbounded {
        /// Which object.
        object: ObjectRef,
        /// Its size after each round.
        sizes: Vec<usize>,
        /// Fields it has after the last round that it did not have after the first.
        kept: Vec<String>,
    },
    /// An object is close to kube-apiserver's 1.5 MiB limit.
    #[error("{object} is {size} bytes, {percent}% of the 1.5 MiB limit")]
    NearSizeLimit {
        /// Which object.
        object: ObjectRef,
        /// Its size.
        size: usize,
        /// Its share of the limit.
        percent: usize,
    },
    /// An object was written more often than its inputs changed.
    #[error("hot loop: {object} was written {writes} times (at most {allowed} allowed), by {}; changing: {}", .managers.join(", "), .paths.join(", "))]
    HotLoop {
        /// Which object.
        object: ObjectRef,
        /// How many writes.
        writes: u32,
        /// How many were allowed.
        allowed: u32,
        /// The field managers that wrote it.
        managers: Vec<String>,
        /// The fields that kept changing.
        paths: Vec<String>,
    },
    /// Objects stay marked for deletion, held by finalizers.
    #[error("still terminating after {waited:?}:{}", recent_lines(.held))]
    FinalizersHeld {
        /// How long the check waited.
        waited: Duration,
        /// Each object, its finalizers and who set them.
        held: Vec<String>,
    },
    /// A property given to [`Invariants::always`] did not hold, for longer than its grace.
    #[error("invariant {invariant:?} broken for {lasted:?}{} (grace {grace:?}), from {since:?} after the checks started: {reason}{}", if *.ongoing { " and still broken" } else { "" }, .after.as_ref().map(|c| format!("\n  first broken by: {c}")).unwrap_or_default())]
    Broken {
        /// The property's name.
        invariant: String,
        /// What its check said when the breach began.
        reason: String,
        /// When the breach began, from [`InvariantsBuilder::start`].
        since: Duration,
        /// How long it lasted (until the check, if it is still broken).
        lasted: Duration,
        /// How long a breach was allowed to last.
        grace: Duration,
        /// Whether it was still broken when checked.
        ongoing: bool,
        /// The change after which it broke (`None`: it did not hold when it was given).
        after: Option<String>,
    },
    /// A child was created before the children it depends on.
    #[error("out of order: {created} was created before any {dependency}{}", .owner.as_ref().map(|o| format!(" (owner {o})")).unwrap_or_default())]
    OutOfOrder {
        /// The child created too early.
        created: ObjectRef,
        /// The resource that should have come first.
        dependency: String,
        /// The owner both belong to.
        owner: Option<String>,
    },
}

fn recent_lines(lines: &[String]) -> String {
    lines.iter().map(|l| format!("\n  {l}")).collect()
}

/// `deployments.apps`, or `configmaps` for the core group.
fn qualified(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

#[derive(Default)]
struct State {
    world: World,
    history: Vec<Change>,
    /// Watches that have listed everything once.
    ready: usize,
    /// What [`Invariants::always`] was given, evaluated on every change.
    properties: Vec<Property>,
}

/// A check of the world as a whole, for [`Invariants::always`].
type Check = Box<dyn Fn(&World) -> Result<(), String> + Send + Sync>;

/// A property that must hold of the world on every change, give or take `grace`.
struct Property {
    name: String,
    grace: Duration,
    check: Check,
    /// The breach going on now, if any.
    open: Option<Breach>,
    /// The first breach that outlasted the grace, and how long it lasted.
    broken: Option<(Breach, Duration)>,
}

/// A stretch of time over which a property did not hold.
#[derive(Debug, Clone)]
struct Breach {
    since: Instant,
    /// What the check said when the breach began.
    reason: String,
    /// The change after which it began (none: when the property was given).
    after: Option<String>,
}

impl Property {
    /// Checks `world` as of `now`; `after` describes the change that made it so.
    fn evaluate(&mut self, world: &World, now: Instant, after: impl FnOnce() -> Option<String>) {
        match ((self.check)(world), &self.open) {
            (Ok(()), Some(breach)) => {
                let lasted = now.saturating_duration_since(breach.since);
                if lasted > self.grace && self.broken.is_none() {
                    self.broken = Some((breach.clone(), lasted));
                }
                self.open = None;
            }
            (Err(reason), None) => {
                self.open = Some(Breach {
                    since: now,
                    reason,
                    after: after(),
                });
            }
            (Ok(()), None) | (Err(_), Some(_)) => {}
        }
    }

    /// The first breach longer than the grace, counting one still open at `now`.
    fn violation(&self, started: Instant, now: Instant) -> Option<Violation> {
        let (breach, lasted, ongoing) = match (&self.broken, &self.open) {
            (Some((breach, lasted)), _) => (breach, *lasted, false),
            (None, Some(open)) if now.saturating_duration_since(open.since) > self.grace => {
                (open, now.saturating_duration_since(open.since), true)
            }
            _ => return None,
        };
        Some(Violation::Broken {
            invariant: self.name.clone(),
            reason: breach.reason.clone(),
            since: breach.since.saturating_duration_since(started),
            lasted,
            grace: self.grace,
            ongoing,
            after: breach.after.clone(),
        })
    }
}

struct Shared {
    state: Mutex<State>,
    changed: Notify,
    /// When the watches started.
    started: Instant,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records as deleted every object of `resource` the world holds that a relist, now
    /// done, did not show.
    fn forget_unlisted(&self, resource: &str, listed: &BTreeSet<ObjectRef>) {
        let gone: Vec<Arc<Value>> = self
            .state()
            .world
            .objects
            .iter()
            .filter(|(key, _)| key.resource == resource && !listed.contains(*key))
            .map(|(_, object)| object.clone())
            .collect();
        for object in gone {
            self.observe(resource, &object, true);
        }
    }

    /// Records what a watch saw of `object` (`None`: deleted).
    fn observe(&self, resource: &str, object: &Value, deleted: bool) {
        let meta = &object["metadata"];
        let key = object_ref(resource, object);
        let mut state = self.state();
        let previous = state.world.objects.get(&key).cloned();
        let kind = match (&previous, deleted) {
            (None, true) => return,
            (Some(_), true) => ChangeKind::Deleted,
            (None, false) => ChangeKind::Added,
            (Some(prev), false) => {
                // A relist shows objects again that did not change.
                if prev["metadata"]["resourceVersion"] == meta["resourceVersion"] {
                    return;
                }
                ChangeKind::Modified
            }
        };
        let mut paths = Vec::new();
        if let Some(prev) = &previous {
            changed_paths(prev, object, "", &mut paths);
        }
        let change = Change {
            seq: state.history.len() as u64,
            at: Instant::now(),
            object: key.clone(),
            kind,
            size: serde_json::to_vec(object).map_or(0, |b| b.len()),
            manager: newest_manager(object),
            paths,
            owner: controller_owner(object),
            resource_version: meta["resourceVersion"]
                .as_str()
                .and_then(|rv| rv.parse().ok()),
        };
        if deleted {
            state.world.objects.remove(&key);
        } else {
            state.world.objects.insert(key, Arc::new(object.clone()));
        }
        let State {
            world, properties, ..
        } = &mut *state;
        for property in properties.iter_mut() {
            property.evaluate(world, change.at, || Some(describe(&change)));
        }
        state.history.push(change);
        drop(state);
        self.changed.notify_waiters();
    }
}

/// Fields whose value differs between `a` and `b`, as `.a.b` paths (list items by index);
/// the server's bookkeeping is left out.
fn changed_paths(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    const BOOKKEEPING: &[&str] = &[
        ".metadata.resourceVersion",
        ".metadata.managedFields",
        ".metadata.generation",
    ];
    if BOOKKEEPING.contains(&at) {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let child = format!("{at}.{key}");
                match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) => changed_paths(p, q, &child, out),
                    _ if !BOOKKEEPING.contains(&child.as_str()) => out.push(child),
                    _ => {}
                }
            }
        }
        (x, y) if x != y => out.push(if at.is_empty() { ".".into() } else { at.into() }),
        _ => {}
    }
}

/// Leaf paths of `value` (`.data.a`), for comparing what two versions hold.
fn leaf_paths(value: &Value, at: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                leaf_paths(v, &format!("{at}.{k}"), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                leaf_paths(v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {
            out.insert(at.to_string());
        }
    }
}

fn newest_manager(object: &Value) -> Option<String> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .max_by_key(|e| e["time"].as_str().unwrap_or_default().to_string())
        .and_then(|e| e["manager"].as_str())
        .map(str::to_string)
}

fn controller_owner(object: &Value) -> Option<String> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"] == Value::Bool(true))
        .and_then(|o| o["uid"].as_str())
        .map(str::to_string)
}

/// The managers whose `managedFields` own `finalizer` ([`konverge_runtime::finalizer::owners`]).
fn finalizer_owners(object: &Value, finalizer: &str) -> Vec<String> {
    let managed: Vec<_> =
        serde_json::from_value(object["metadata"]["managedFields"].clone()).unwrap_or_default();
    konverge_runtime::finalizer::owners(&managed, finalizer)
}

/// The observer's delays before it watches again after a failure: from 10 ms, doubling, at
/// most 500 ms. kube-runtime's default backoff, a reflector's, starts at 800 ms and reaches
/// 30 s: after a server restart the observer would judge the invariants on a world seconds
/// old.
#[derive(Debug, Default)]
struct Reconnect {
    next: Option<Duration>,
}

impl Iterator for Reconnect {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next.unwrap_or(Duration::from_millis(10));
        self.next = Some((delay * 2).min(Duration::from_millis(500)));
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for Reconnect {
    fn reset(&mut self) {
        self.next = None;
    }
}

/// Chooses what to watch; [`TestEnv::invariants`] makes one.
pub struct InvariantsBuilder<'e> {
    env: &'e TestEnv,
    resources: Vec<ApiResource>,
    quiet: Duration,
}

impl InvariantsBuilder<'_> {
    /// Watches the resource of a typed kind (`ConfigMap`, a `#[derive(CustomResource)]`).
    pub fn watch<K: kube::Resource<DynamicType = ()>>(self) -> Self {
        self.watch_resource(ApiResource::erase::<K>(&()))
    }

    /// Watches any resource.
    pub fn watch_resource(mut self, resource: ApiResource) -> Self {
        self.resources.push(resource);
        self
    }

    /// How long without a change counts as quiet (default 300 ms).
    pub fn quiet_for(mut self, quiet: Duration) -> Self {
        self.quiet = quiet;
        self
    }

    /// Starts watching, and returns once every watch has listed what exists.
    pub async fn start(self) -> Invariants {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            started: Instant::now(),
        });
        // Past the faults and the request log: the observer must see every change, and
        // must not count as a client of the controller under test.
        let client = self.env.direct_client();
        let mut tasks = Vec::new();
        for resource in &self.resources {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
            let name = qualified(resource);
            let shared = shared.clone();
            // Items of a list of a built-in kind carry no type, as kube-apiserver sends them;
            // events do. Every object is seen with its type, so a relist changes nothing.
            let types = kube::api::TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            };
            tasks.push(tokio::spawn(async move {
                let mut listed = false;
                // The objects a relist has shown so far: a relist after an expired history
                // or a lost watch says nothing of what was deleted meanwhile, so whatever
                // it left out is deleted once it is done.
                let mut relisted = BTreeSet::new();
                let mut events = watcher(api, watcher::Config::default())
                    .backoff(Reconnect::default())
                    .boxed();
                while let Some(event) = events.next().await {
                    let Ok(event) = event else { continue };
                    match event {
                        watcher::Event::Apply(o) => {
                            shared.observe(&name, &typed(o, &types), false);
                        }
                        watcher::Event::InitApply(o) => {
                            let o = typed(o, &types);
                            relisted.insert(object_ref(&name, &o));
                            shared.observe(&name, &o, false);
                        }
                        watcher::Event::Delete(o) => {
                            shared.observe(&name, &typed(o, &types), true);
                        }
                        watcher::Event::Init => relisted.clear(),
                        watcher::Event::InitDone => {
                            shared.forget_unlisted(&name, &std::mem::take(&mut relisted));
                            if !listed {
                                listed = true;
                                shared.state().ready += 1;
                                shared.changed.notify_waiters();
                            }
                        }
                    }
                }
            }));
        }
        let invariants = Invariants {
            shared,
            log: self.env.requests(),
            quiet: self.quiet,
            tasks,
        };
        let count = self.resources.len();
        invariants
            .wait(Duration::from_secs(10), |state| state.ready >= count)
            .await;
        invariants
    }
}

impl TestEnv {
    /// Invariant checks over what a controller does to the resources the builder names.
    ///
    /// ```no_run
    /// # async fn example(env: konverge_testkit::TestEnv) -> Result<(), konverge_testkit::Violation> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use std::time::Duration;
    ///
    /// let check = env.invariants().watch::<ConfigMap>().start().await;
    /// // ... start the controller, create its inputs ...
    /// check
    ///     .converges(Duration::from_secs(5), |world| {
    ///         match world.get("configmaps", "default", "mirror") {
    ///             Some(_) => Ok(()),
    ///             None => Err("no mirror yet".into()),
    ///         }
    ///     })
    ///     .await?;
    /// check.no_hot_loop(3)?;
    /// # Ok(()) }
    /// ```
    pub fn invariants(&self) -> InvariantsBuilder<'_> {
        InvariantsBuilder {
            env: self,
            resources: Vec::new(),
            quiet: Duration::from_millis(300),
        }
    }
}

/// The invariant checks, over what the watches have seen since [`InvariantsBuilder::start`]
/// (or the last [`Invariants::forget`]). Dropping it stops the watches.
pub struct Invariants {
    shared: Arc<Shared>,
    log: RequestLog,
    quiet: Duration,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Invariants {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Invariants {
    /// The objects as last seen.
    pub fn world(&self) -> World {
        self.shared.state().world.clone()
    }

    /// Every change seen, oldest first.
    pub fn history(&self) -> Vec<Change> {
        self.shared.state().history.clone()
    }

    /// Forgets the history (the world is kept): later checks look at what happens next.
    pub fn forget(&self) {
        self.shared.state().history.clear();
    }

    /// Waits until `done` holds of the state, or `within` passes; says whether it held.
    async fn wait(&self, within: Duration, mut done: impl FnMut(&State) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let notified = self.shared.changed.notified();
            if done(&self.shared.state()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(&self.shared.state());
            }
        }
    }

    /// The last `n` changes, as lines for a report.
    fn recent(&self, n: usize) -> Vec<String> {
        let state = self.shared.state();
        state
            .history
            .iter()
            .rev()
            .take(n)
            .rev()
            .map(describe)
            .collect()
    }

    /// **Always**: `check` must accept the world (the objects as last seen) on every change
    /// the watches see from now on — a safety property, such as "a WebApp is never
    /// Available while fewer of its pods are ready than it asks for", where
    /// [`converges`](Self::converges) says only where things end up. It is evaluated now
    /// and after every change of a watched object, in the order the changes were seen; a
    /// breach runs from the change after which `check` first said `Err(reason)` to the
    /// change after which it said `Ok` again. [`always_held`](Self::always_held) reports
    /// the first breach that lasted longer than `grace`, under `name`.
    ///
    /// Why a grace: a status derived from other objects trails them. When a pod stops being
    /// ready, its ReplicaSet's status, then its Deployment's, then an operator's status
    /// follow, each a write after the one before — and each resource is watched on its own
    /// stream, so the order the checks see changes of different resources in is not quite
    /// the order they happened in. `grace` is how long the world may disagree with itself;
    /// zero makes every disagreement a violation. Tokio's clock measures it, so in paused
    /// time a breach lasts exactly as long as the simulated world took to catch up.
    ///
    /// ```no_run
    /// # async fn example(check: konverge_testkit::Invariants) -> Result<(), konverge_testkit::Violation> {
    /// use std::time::Duration;
    ///
    /// check.always("at most 3 config maps", Duration::ZERO, |world| {
    ///     match world.list("configmaps").count() {
    ///         n if n <= 3 => Ok(()),
    ///         n => Err(format!("{n} config maps")),
    ///     }
    /// });
    /// // ... drive the controller ...
    /// check.always_held()?;
    /// # Ok(()) }
    /// ```
    pub fn always(
        &self,
        name: impl Into<String>,
        grace: Duration,
        check: impl Fn(&World) -> Result<(), String> + Send + Sync + 'static,
    ) {
        let mut property = Property {
            name: name.into(),
            grace,
            check: Box::new(check),
            open: None,
            broken: None,
        };
        let mut state = self.shared.state();
        property.evaluate(&state.world, Instant::now(), || None);
        state.properties.push(property);
    }

    /// Whether every property given to [`always`](Self::always) held: the first breach
    /// (in the order the properties were given) that lasted longer than its grace, a breach
    /// still going on included, is a [`Violation::Broken`] naming the property, what its
    /// check said, when the breach began and after which change.
    pub fn always_held(&self) -> Result<(), Violation> {
        let state = self.shared.state();
        let now = Instant::now();
        match state
            .properties
            .iter()
            .find_map(|p| p.violation(self.shared.started, now))
        {
            Some(violation) => Err(violation),
            None => Ok(()),
        }
    }

    /// **Converges**: waits until `desired` accepts the world and nothing has changed for the
    /// quiet period (counted from this call at the earliest, so changes still on their way
    /// are seen). `desired` says what is still wrong as `Err(reason)`.
    pub async fn converges(
        &self,
        within: Duration,
        desired: impl Fn(&World) -> Result<(), String>,
    ) -> Result<(), Violation> {
        let started = Instant::now();
        let deadline = started + within;
        let mut unmet;
        loop {
            let (last_change, verdict) = {
                let state = self.shared.state();
                let last = state.history.last().map(|c| c.at);
                (last, desired(&state.world))
            };
            // Quiet counts from the call too: a write the test just made may not have been
            // seen yet, and must not pass for a converged world.
            let quiet_since =
                last_change.map_or(started.elapsed(), |t| t.elapsed().min(started.elapsed()));
            match verdict {
                Ok(()) if quiet_since >= self.quiet => return Ok(()),
                Ok(()) => unmet = "still writing".to_string(),
                Err(reason) => unmet = reason,
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let notified = self.shared.changed.notified();
            let step = (self.quiet / 4).max(Duration::from_millis(10));
            let _ = tokio::time::timeout((deadline - now).min(step), notified).await;
        }
        Err(Violation::NotConverged {
            waited: within,
            unmet,
            recent: self.recent(10),
        })
    }

    /// **Idempotent**: runs `resync` (which must not write: for example restarting the
    /// controller, so it lists and reconciles everything again), waits for quiet, and fails
    /// if any client wrote meanwhile — with the writes as the request log shows them.
    pub async fn idempotent<F: Future>(
        &self,
        within: Duration,
        resync: F,
    ) -> Result<F::Output, Violation> {
        self.log.reset();
        let output = resync.await;
        // Give the controller time to act on the resync, then until it is quiet.
        tokio::time::sleep(self.quiet).await;
        let _ = self.converges(within, |_| Ok(())).await;
        let writes: Vec<String> = self
            .log
            .records()
            .iter()
            .filter(|r| r.request.verb.is_some_and(crate::Verb::is_write))
            .map(|r| r.to_string())
            .collect();
        if writes.is_empty() {
            Ok(output)
        } else {
            Err(Violation::NotIdempotent { writes })
        }
    }

    /// **Bounded**: runs `rounds` rounds of `churn` (each should add inputs and remove the
    /// same ones again), waits for quiet after each, and fails for an object whose size kept
    /// growing from the first round to the last, naming the fields it kept. Objects above
    /// 75% of the 1.5 MiB limit fail too.
    pub async fn bounded<F, Fut>(
        &self,
        rounds: usize,
        within: Duration,
        mut churn: F,
    ) -> Result<(), Violation>
    where
        F: FnMut(usize) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut snapshots: Vec<World> = Vec::new();
        for round in 0..rounds {
            churn(round).await;
            tokio::time::sleep(self.quiet).await;
            self.converges(within, |_| Ok(())).await?;
            snapshots.push(self.world());
        }
        let (Some(first), Some(last)) = (snapshots.first(), snapshots.last()) else {
            return Ok(());
        };
        for (key, value) in last.objects.iter() {
            let size = serde_json::to_vec(&**value).map_or(0, |b| b.len());
            if size * 4 > MAX_OBJECT_BYTES * 3 {
                return Err(Violation::NearSizeLimit {
                    object: key.clone(),
                    size,
                    percent: size * 100 / MAX_OBJECT_BYTES,
                });
            }
            let sizes: Vec<usize> = snapshots
                .iter()
                .filter_map(|w| w.objects.get(key))
                .map(|v| content_size(v))
                .collect();
            let grew = sizes.len() == snapshots.len()
                && sizes.windows(2).all(|w| w[1] >= w[0])
                && sizes.last() > sizes.first();
            if !grew {
                continue;
            }
            let (mut before, mut after) = (BTreeSet::new(), BTreeSet::new());
            if let Some(v) = first.objects.get(key) {
                leaf_paths(v, "", &mut before);
            }
            leaf_paths(value, "", &mut after);
            let kept: Vec<String> = after
                .difference(&before)
                .filter(|p| {
                    !p.starts_with(".metadata.managedFields")
                        && !p.starts_with(".metadata.resourceVersion")
                })
                .cloned()
                .collect();
            return Err(Violation::Unbounded {
                object: key.clone(),
                sizes,
                kept,
            });
        }
        Ok(())
    }

    /// **No hot loop**: no object was written more than `max_writes` times in the history
    /// (since start or [`forget`](Self::forget)); a failure names the managers that wrote
    /// it and the fields that kept changing.
    pub fn no_hot_loop(&self, max_writes: usize) -> Result<(), Violation> {
        let state = self.shared.state();
        let mut writes: BTreeMap<&ObjectRef, Vec<&Change>> = BTreeMap::new();
        for change in &state.history {
            if change.kind == ChangeKind::Modified {
                writes.entry(&change.object).or_default().push(change);
            }
        }
        let Some((object, changes)) = writes
            .into_iter()
            .filter(|(_, c)| c.len() > max_writes)
            .max_by_key(|(_, c)| c.len())
        else {
            return Ok(());
        };
        let managers: BTreeSet<String> = changes.iter().filter_map(|c| c.manager.clone()).collect();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for change in &changes {
            for path in &change.paths {
                *counts.entry(path).or_default() += 1;
            }
        }
        let mut paths: Vec<(&str, usize)> = counts.into_iter().collect();
        paths.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        Err(Violation::HotLoop {
            object: object.clone(),
            writes: u32::try_from(changes.len()).unwrap_or(u32::MAX),
            allowed: u32::try_from(max_writes).unwrap_or(u32::MAX),
            managers: managers.into_iter().collect(),
            paths: paths
                .into_iter()
                .take(5)
                .map(|(p, _)| p.to_string())
                .collect(),
        })
    }

    /// **Finalizers released**: waits until no watched object is marked for deletion; a
    /// failure lists each one with its finalizers and the managers that set them.
    pub async fn finalizers_released(&self, within: Duration) -> Result<(), Violation> {
        let terminating = |state: &State| {
            state
                .world
                .objects
                .values()
                .any(|o| !o["metadata"]["deletionTimestamp"].is_null())
        };
        if self.wait(within, |s| !terminating(s)).await {
            return Ok(());
        }
        let state = self.shared.state();
        let held = state
            .world
            .objects
            .iter()
            .filter(|(_, o)| !o["metadata"]["deletionTimestamp"].is_null())
            .map(|(key, o)| {
                let finalizers: Vec<String> = o["metadata"]["finalizers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|f| {
                        let owners = finalizer_owners(o, f);
                        if owners.is_empty() {
                            f.to_string()
                        } else {
                            format!("{f} (set by {})", owners.join(", "))
                        }
                    })
                    .collect();
                format!("{key}: held by {}", finalizers.join(", "))
            })
            .collect();
        Err(Violation::FinalizersHeld {
            waited: within,
            held,
        })
    }

    /// **Ordered**: children were created in the order of `resources` (qualified plurals,
    /// dependencies first): among the objects one controller owner created, none of a
    /// resource came before the first of every resource listed ahead of it that it has.
    /// Objects without a controller owner (what the cluster itself keeps, such as the
    /// `kubernetes` Service or kube-apiserver's ConfigMaps in `kube-system`) are not compared.
    pub fn ordered(&self, resources: &[&str]) -> Result<(), Violation> {
        let state = self.shared.state();
        let mut by_owner: BTreeMap<&str, Vec<&Change>> = BTreeMap::new();
        for change in &state.history {
            if change.kind == ChangeKind::Added
                && resources.contains(&change.object.resource.as_str())
                && let Some(owner) = change.owner.as_deref()
            {
                by_owner.entry(owner).or_default().push(change);
            }
        }
        for (owner, mut created) in by_owner {
            // In the order the server made them, not the order the watches told of them.
            created.sort_by_key(|c| (c.resource_version, c.seq));
            let present: BTreeSet<&str> =
                created.iter().map(|c| c.object.resource.as_str()).collect();
            let mut seen = BTreeSet::new();
            for change in created {
                let rank = resources
                    .iter()
                    .position(|r| *r == change.object.resource)
                    .unwrap_or(0);
                if let Some(missing) = resources[..rank]
                    .iter()
                    .find(|r| present.contains(**r) && !seen.contains(**r))
                {
                    return Err(Violation::OutOfOrder {
                        created: change.object.clone(),
                        dependency: missing.to_string(),
                        owner: Some(owner.to_string()),
                    });
                }
                seen.insert(change.object.resource.as_str());
            }
        }
        Ok(())
    }
}

/// `modified configmaps default/x by kubectl: .data.a, .data.b (412 bytes)`.
fn describe(change: &Change) -> String {
    let kind = match change.kind {
        ChangeKind::Added => "added",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
    };
    let by = change
        .manager
        .as_ref()
        .map(|m| format!(" by {m}"))
        .unwrap_or_default();
    let paths = if change.paths.is_empty() {
        String::new()
    } else {
        format!(": {}", change.paths.join(", "))
    };
    format!(
        "{kind} {}{by}{paths} ({} bytes)",
        change.object, change.size
    )
}

/// An object's size without its `resourceVersion`: a counter that gains a digit now and then
/// (999 to 1000) is not content the object keeps.
/// `object` as JSON, with `types` when it came without (an item of a list of a built-in
/// kind).
fn typed(mut object: DynamicObject, types: &kube::api::TypeMeta) -> Value {
    object.types.get_or_insert_with(|| types.clone());
    serde_json::to_value(&object).unwrap_or_default()
}

fn content_size(object: &Value) -> usize {
    let rv = object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map_or(0, str::len);
    serde_json::to_vec(object).map_or(0, |b| b.len().saturating_sub(rv))
}

/// Which object of `resource` `object` is.
fn object_ref(resource: &str, object: &Value) -> ObjectRef {
    let meta = &object["metadata"];
    ObjectRef {
        resource: resource.to_string(),
        namespace: meta["namespace"].as_str().unwrap_or_default().to_string(),
        name: meta["name"].as_str().unwrap_or_default().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_listed_without_their_type_are_seen_with_it() {
        let types = kube::api::TypeMeta {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let listed: DynamicObject =
            serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"x": "1"}})).unwrap();
        let watched: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "1"}}),
        )
        .unwrap();
        assert_eq!(typed(listed, &types), typed(watched, &types));
    }

    #[test]
    fn changed_paths_leave_bookkeeping_out() {
        let a = json!({"metadata": {"resourceVersion": "1", "annotations": {"x": "1"}}, "data": {"a": "1"}});
        let b = json!({"metadata": {"resourceVersion": "2", "annotations": {"x": "2"}}, "data": {"a": "1", "b": "2"}});
        let mut out = Vec::new();
        changed_paths(&a, &b, "", &mut out);
        assert_eq!(out, [".data.b", ".metadata.annotations.x"]);
    }

    #[test]
    fn finalizers_are_traced_to_their_managers() {
        let o = json!({"metadata": {"finalizers": ["example.com/cleanup"], "managedFields": [
            {"manager": "cleaner", "operation": "Update", "time": "2026-01-01T00:00:00Z",
             "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, "v:\"example.com/cleanup\"": {}}}}},
            {"manager": "other", "operation": "Update", "time": "2026-01-02T00:00:00Z",
             "fieldsV1": {"f:data": {}}}]}});
        assert_eq!(finalizer_owners(&o, "example.com/cleanup"), ["cleaner"]);
        assert_eq!(newest_manager(&o).as_deref(), Some("other"));
    }
}
