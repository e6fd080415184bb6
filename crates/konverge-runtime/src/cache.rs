//! The ordered cache: one writer (the informer), many cheap readers.
//!
//! A [`Store`] is a clonable read handle. Everything it returns is in [`ObjectKey`] order —
//! the same order in every process and every run, never hash order — and objects are shared
//! `Arc`s, so readers never copy and never see a half-applied change. Only the [`Writer`]
//! changes the cache, one watcher event at a time.
//!
//! Indexes ([`Index`]) map a value computed from each object (a label pair, an owner's UID, or
//! anything a function returns) to the objects that have it, and are kept in step with every
//! write. The store is *ready* once its first complete list has been applied; controllers wait
//! for that before their first reconcile, so they never act on a partial view.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, RwLock};

use futures::future::BoxFuture;
use kube::Resource;
use tokio::sync::watch;

use crate::key::ObjectKey;
use crate::watcher;

type IndexFn<K> = Box<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// A secondary index: a name, and the values each object is filed under.
pub struct Index<K> {
    name: String,
    values: IndexFn<K>,
}

impl<K> fmt::Debug for Index<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index").field("name", &self.name).finish()
    }
}

/// Name of the built-in label index ([`Index::labels`]).
pub const LABEL_INDEX: &str = "label";
/// Name of the built-in owner index ([`Index::owners`]).
pub const OWNER_INDEX: &str = "owner";

impl<K: Resource> Index<K> {
    /// An index filing each object under every value `f` returns.
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Index<K> {
        Index {
            name: name.into(),
            values: Box::new(f),
        }
    }

    /// Objects by label, filed under `key=value` for each of their labels.
    pub fn labels() -> Index<K> {
        Index::new(LABEL_INDEX, |obj: &K| {
            obj.meta()
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        })
    }

    /// Objects by owner, filed under the UID of each of their ownerReferences.
    pub fn owners() -> Index<K> {
        Index::new(OWNER_INDEX, |obj: &K| {
            obj.meta()
                .owner_references
                .iter()
                .flatten()
                .map(|o| o.uid.clone())
                .collect()
        })
    }

    /// The index's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Where the cache files an object: its namespace, shared by every key in that namespace
/// (most caches hold thousands of objects in a handful of namespaces), and its name.
///
/// Ordered as [`ObjectKey`] orders keys without a cluster, and looked up by `&ObjectKey`
/// through [`KeyParts`], so no `ObjectKey` is built to read the cache.
#[derive(Clone)]
struct Slot {
    namespace: Option<Arc<str>>,
    name: Box<str>,
}

impl Slot {
    fn key(&self) -> ObjectKey {
        ObjectKey {
            cluster: None,
            namespace: self.namespace.as_deref().map(str::to_string),
            name: self.name.to_string(),
        }
    }
}

/// A key's namespace and name, which is all the cache orders and finds objects by.
trait KeyParts {
    fn parts(&self) -> (Option<&str>, &str);
}

impl KeyParts for Slot {
    fn parts(&self) -> (Option<&str>, &str) {
        (self.namespace.as_deref(), &self.name)
    }
}

impl KeyParts for ObjectKey {
    fn parts(&self) -> (Option<&str>, &str) {
        (self.namespace.as_deref(), &self.name)
    }
}

/// A namespace and name to look up or start a range at.
struct Probe<'a>(Option<&'a str>, &'a str);

impl KeyParts for Probe<'_> {
    fn parts(&self) -> (Option<&str>, &str) {
        (self.0, self.1)
    }
}

impl PartialEq for dyn KeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyParts + '_ {}

impl PartialOrd for dyn KeyParts + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn KeyParts + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

impl PartialEq for Slot {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Slot {}

impl PartialOrd for Slot {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Slot {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

impl<'a> Borrow<dyn KeyParts + 'a> for Slot {
    fn borrow(&self) -> &(dyn KeyParts + 'a) {
        self
    }
}

type Objects<K> = BTreeMap<Slot, Arc<K>>;

struct State<K> {
    objects: Objects<K>,
    /// index name → value → keys.
    indexes: BTreeMap<String, BTreeMap<String, BTreeSet<Slot>>>,
}

struct Shared<K> {
    state: RwLock<State<K>>,
    ready: watch::Sender<bool>,
}

/// A read handle on the cache. Cloning is cheap; all clones see the same cache.
pub struct Store<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            shared: self.shared.clone(),
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("len", &self.read().objects.len())
            .field("ready", &*self.shared.ready.borrow())
            .finish()
    }
}

/// An error reading an index.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store was not built with this index.
    #[error("no index named {0:?}; declare it when the cache is created")]
    NoSuchIndex(String),
}

impl<K> Store<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State<K>> {
        self.shared.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached object with this key. A store holds one cluster's objects: the key's
    /// [`cluster`](ObjectKey::cluster) is not compared.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.read().objects.get(key as &dyn KeyParts).cloned()
    }

    /// Whether an object with this key is cached (the key's cluster is not compared).
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.read().objects.contains_key(key as &dyn KeyParts)
    }

    /// Every cached object, in key order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().objects.values().cloned().collect()
    }

    /// Every key, in order.
    pub fn keys(&self) -> Vec<ObjectKey> {
        self.read().objects.keys().map(Slot::key).collect()
    }

    /// Up to `limit` keys, in order, starting after `after` (from the first key if `None`):
    /// walks a large cache a page at a time without copying every key at once.
    pub fn keys_after(&self, after: Option<&ObjectKey>, limit: usize) -> Vec<ObjectKey> {
        let from: Bound<&dyn KeyParts> = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        self.read()
            .objects
            .range::<dyn KeyParts, _>((from, Bound::Unbounded))
            .take(limit)
            .map(|(slot, _)| slot.key())
            .collect()
    }

    /// The cached objects of one namespace, in key order.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        let start = Probe(Some(namespace), "");
        let start: Bound<&dyn KeyParts> = Bound::Included(&start);
        self.read()
            .objects
            .range::<dyn KeyParts, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.namespace.as_deref() == Some(namespace))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects filed under `value` in the index `index`, in key order.
    pub fn index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, Error> {
        let state = self.read();
        let by_value = state
            .indexes
            .get(index)
            .ok_or_else(|| Error::NoSuchIndex(index.to_string()))?;
        Ok(by_value
            .get(value)
            .into_iter()
            .flatten()
            .filter_map(|k| state.objects.get(k).cloned())
            .collect())
    }

    /// Objects labelled `key=value` (needs [`Index::labels`]).
    pub fn by_label(&self, key: &str, value: &str) -> Result<Vec<Arc<K>>, Error> {
        self.index(LABEL_INDEX, &format!("{key}={value}"))
    }

    /// Objects with an ownerReference to `uid` (needs [`Index::owners`]).
    pub fn by_owner(&self, uid: &str) -> Result<Vec<Arc<K>>, Error> {
        self.index(OWNER_INDEX, uid)
    }

    /// Whether the first complete list has been applied.
    pub fn is_ready(&self) -> bool {
        *self.shared.ready.borrow()
    }

    /// Waits until the first complete list has been applied.
    pub async fn wait_until_ready(&self) {
        let mut rx = self.shared.ready.subscribe();
        // The sender lives as long as this store, so this cannot fail.
        let _ = rx.wait_for(|ready| *ready).await;
    }
}

/// One change to the cache: the object before and after (`None` when absent).
#[derive(Debug)]
pub struct Change<K> {
    /// The key.
    pub key: ObjectKey,
    /// The cached object before the change.
    pub old: Option<Arc<K>>,
    /// The object after the change (`None`: deleted).
    pub new: Option<Arc<K>>,
}

/// How many of a relist's changes are gathered at a time (under the read lock) to be
/// reported, so that reporting a large relist holds neither the lock nor a list of every
/// change.
const RELIST_BATCH: usize = 256;

/// The cache's only writer: applies watcher events and reports what changed.
pub struct Writer<K> {
    shared: Arc<Shared<K>>,
    indexers: Vec<Index<K>>,
    /// The objects of a (re)list in progress.
    relist: Option<Objects<K>>,
    /// The namespaces keys share, so each is stored once however many objects it holds.
    namespaces: BTreeSet<Arc<str>>,
    /// Deletions since unused namespaces were last dropped from `namespaces`.
    deletions: usize,
}

impl<K> fmt::Debug for Writer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl<K: Resource> Writer<K> {
    /// An empty cache with these indexes.
    pub fn new(indexers: Vec<Index<K>>) -> Writer<K> {
        let indexes = indexers
            .iter()
            .map(|i| (i.name.clone(), BTreeMap::new()))
            .collect();
        Writer {
            shared: Arc::new(Shared {
                state: RwLock::new(State {
                    objects: BTreeMap::new(),
                    indexes,
                }),
                ready: watch::Sender::new(false),
            }),
            indexers,
            relist: None,
            namespaces: BTreeSet::new(),
            deletions: 0,
        }
    }

    /// Adds an index (a no-op if one with this name exists), filing the objects already cached.
    pub fn add_index(&mut self, index: Index<K>) {
        if self.indexers.iter().any(|i| i.name == index.name) {
            return;
        }
        let mut state = self.write();
        let mut by_value: BTreeMap<String, BTreeSet<Slot>> = BTreeMap::new();
        for (slot, obj) in &state.objects {
            for value in (index.values)(obj) {
                by_value.entry(value).or_default().insert(slot.clone());
            }
        }
        state.indexes.insert(index.name.clone(), by_value);
        drop(state);
        self.indexers.push(index);
    }

    /// A read handle.
    pub fn store(&self) -> Store<K> {
        Store {
            shared: self.shared.clone(),
        }
    }

    /// Applies one watcher event; returns the changes it made, in key order.
    ///
    /// A relist is applied as a whole at [`watcher::Event::InitDone`]: objects whose
    /// resourceVersion changed are reported as changes, objects missing from the new list as
    /// deletions — so a consumer learns about deletions it missed while disconnected.
    pub fn apply(&mut self, event: watcher::Event<K>) -> Vec<Change<K>> {
        let mut changes = Vec::new();
        self.apply_each(event, |change| changes.push(change));
        changes
    }

    /// [`apply`](Self::apply), handing each change to `report` as it is found rather than
    /// returning them all: a relist of many objects is then never held as a second list.
    /// The cache already holds the event's outcome when `report` runs, and no lock is held
    /// (`report` may read the store).
    pub fn apply_each(&mut self, event: watcher::Event<K>, mut report: impl FnMut(Change<K>)) {
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
            }
            watcher::Event::InitApply(obj) => {
                let slot = self.slot(&obj);
                if let (Some(relist), Some(slot)) = (&mut self.relist, slot) {
                    relist.insert(slot, Arc::new(obj));
                }
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                self.replace(fresh, &mut report);
                self.shared.ready.send_replace(true);
            }
            watcher::Event::Apply(obj) => {
                let Some(slot) = self.slot(&obj) else {
                    return;
                };
                let new = Arc::new(obj);
                let mut state = self.write();
                let old = state.objects.insert(slot.clone(), new.clone());
                self.reindex(&mut state, &slot, old.as_deref(), Some(&new));
                drop(state);
                report(Change {
                    key: slot.key(),
                    old,
                    new: Some(new),
                });
            }
            watcher::Event::Delete(obj) => {
                let Some(slot) = self.slot(&obj) else {
                    return;
                };
                let mut state = self.write();
                let old = state.objects.remove(&slot);
                self.reindex(&mut state, &slot, old.as_deref(), None);
                drop(state);
                self.deletions += 1;
                if self.deletions >= 1024 {
                    self.drop_unused_namespaces();
                }
                report(Change {
                    key: slot.key(),
                    old: Some(old.unwrap_or_else(|| Arc::new(obj))),
                    new: None,
                });
            }
        }
    }

    /// Where `obj` is filed (`None` if it has no name), its namespace shared with the
    /// other keys of that namespace.
    fn slot(&mut self, obj: &K) -> Option<Slot> {
        let meta = obj.meta();
        let name = meta.name.as_deref()?;
        let namespace = meta.namespace.as_deref().map(|ns| {
            if let Some(shared) = self.namespaces.get(ns) {
                return shared.clone();
            }
            let shared: Arc<str> = Arc::from(ns);
            self.namespaces.insert(shared.clone());
            shared
        });
        Some(Slot {
            namespace,
            name: name.into(),
        })
    }

    /// Forgets namespaces no key uses any more.
    fn drop_unused_namespaces(&mut self) {
        self.deletions = 0;
        self.namespaces.retain(|ns| Arc::strong_count(ns) > 1);
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State<K>> {
        self.shared.state.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State<K>> {
        self.shared.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `fresh` the cache, then reports what differs from before, in key order.
    fn replace(&mut self, fresh: Objects<K>, report: &mut impl FnMut(Change<K>)) {
        let mut state = self.write();
        let old = std::mem::replace(&mut state.objects, fresh);
        let State { objects, indexes } = &mut *state;
        for index in indexes.values_mut() {
            index.clear();
        }
        for (slot, obj) in objects.iter() {
            for indexer in &self.indexers {
                let by_value = indexes.entry(indexer.name.clone()).or_default();
                for value in (indexer.values)(obj) {
                    by_value.entry(value).or_default().insert(slot.clone());
                }
            }
        }
        drop(state);

        // Only this writer changes the cache, so reading it back a batch at a time sees
        // exactly what was just stored.
        let mut old = old.into_iter().peekable();
        let mut after: Option<Slot> = None;
        loop {
            let batch: Vec<(Slot, Arc<K>)> = {
                let state = self.read();
                let from = match &after {
                    Some(slot) => Bound::Excluded(slot),
                    None => Bound::Unbounded,
                };
                state
                    .objects
                    .range::<Slot, _>((from, Bound::Unbounded))
                    .take(RELIST_BATCH)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            let Some((last, _)) = batch.last() else {
                break;
            };
            after = Some(last.clone());
            for (slot, new) in batch {
                while let Some((gone, obj)) = old.next_if(|(k, _)| *k < slot) {
                    report(Change {
                        key: gone.key(),
                        old: Some(obj),
                        new: None,
                    });
                }
                let before = old.next_if(|(k, _)| *k == slot).map(|(_, obj)| obj);
                let same = before.as_ref().is_some_and(|b| {
                    b.meta().resource_version.is_some()
                        && b.meta().resource_version == new.meta().resource_version
                });
                if !same {
                    report(Change {
                        key: slot.key(),
                        old: before,
                        new: Some(new),
                    });
                }
            }
        }
        for (gone, obj) in old {
            report(Change {
                key: gone.key(),
                old: Some(obj),
                new: None,
            });
        }
        self.drop_unused_namespaces();
    }

    fn reindex(&self, state: &mut State<K>, slot: &Slot, old: Option<&K>, new: Option<&K>) {
        for indexer in &self.indexers {
            let by_value = state.indexes.entry(indexer.name.clone()).or_default();
            if let Some(old) = old {
                for value in (indexer.values)(old) {
                    if let Some(keys) = by_value.get_mut(&value) {
                        keys.remove(slot);
                        if keys.is_empty() {
                            by_value.remove(&value);
                        }
                    }
                }
            }
            if let Some(new) = new {
                for value in (indexer.values)(new) {
                    by_value.entry(value).or_default().insert(slot.clone());
                }
            }
        }
    }
}

/// A cache whose readiness gates the first reconcile.
pub(crate) trait ReadyFlag: Send + Sync {
    fn is_ready(&self) -> bool;
    fn wait(&self) -> BoxFuture<'static, ()>;
}

impl<K: Send + Sync + 'static> ReadyFlag for Store<K> {
    fn is_ready(&self) -> bool {
        Store::is_ready(self)
    }

    fn wait(&self) -> BoxFuture<'static, ()> {
        let store = self.clone();
        Box::pin(async move { store.wait_until_ready().await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, rv: &str, labels: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn names(objs: &[Arc<ConfigMap>]) -> Vec<String> {
        objs.iter()
            .map(|o| ObjectKey::of(o.as_ref()).unwrap().to_string())
            .collect()
    }

    #[test]
    fn lists_in_key_order_whatever_the_arrival_order() {
        let mut w = Writer::new(vec![]);
        let store = w.store();
        w.apply(watcher::Event::Init);
        for (ns, n) in [("b", "x"), ("a", "z"), ("a", "b"), ("c", "a")] {
            w.apply(watcher::Event::InitApply(cm(ns, n, "1", &[])));
        }
        assert!(!store.is_ready());
        w.apply(watcher::Event::InitDone);
        assert!(store.is_ready());
        assert_eq!(names(&store.list()), ["a/b", "a/z", "b/x", "c/a"]);
        assert_eq!(names(&store.list_namespace("a")), ["a/b", "a/z"]);
    }

    #[test]
    fn a_relist_reports_changes_and_missed_deletions() {
        let mut w = Writer::new(vec![]);
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(cm("a", "same", "1", &[])));
        w.apply(watcher::Event::InitApply(cm("a", "changed", "1", &[])));
        w.apply(watcher::Event::InitApply(cm("a", "gone", "1", &[])));
        assert_eq!(w.apply(watcher::Event::InitDone).len(), 3);

        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(cm("a", "same", "1", &[])));
        w.apply(watcher::Event::InitApply(cm("a", "changed", "2", &[])));
        w.apply(watcher::Event::InitApply(cm("a", "new", "3", &[])));
        let changes = w.apply(watcher::Event::InitDone);
        let summary: Vec<(String, bool, bool)> = changes
            .iter()
            .map(|c| (c.key.to_string(), c.old.is_some(), c.new.is_some()))
            .collect();
        assert_eq!(
            summary,
            [
                ("a/changed".to_string(), true, true),
                ("a/gone".to_string(), true, false),
                ("a/new".to_string(), false, true),
            ]
        );
        assert_eq!(names(&w.store().list()), ["a/changed", "a/new", "a/same"]);
    }

    #[test]
    fn indexes_follow_every_write() {
        let mut w = Writer::new(vec![
            Index::labels(),
            Index::new("by-name-length", |c: &ConfigMap| {
                vec![c.metadata.name.as_deref().unwrap_or("").len().to_string()]
            }),
        ]);
        let store = w.store();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(cm(
            "a",
            "two",
            "1",
            &[("app", "web")],
        )));
        w.apply(watcher::Event::InitApply(cm(
            "a",
            "one",
            "1",
            &[("app", "web")],
        )));
        w.apply(watcher::Event::InitDone);
        assert_eq!(
            names(&store.by_label("app", "web").unwrap()),
            ["a/one", "a/two"]
        );
        assert_eq!(
            names(&store.index("by-name-length", "3").unwrap()),
            ["a/one", "a/two"]
        );

        w.apply(watcher::Event::Apply(cm("a", "two", "2", &[("app", "db")])));
        assert_eq!(names(&store.by_label("app", "web").unwrap()), ["a/one"]);
        assert_eq!(names(&store.by_label("app", "db").unwrap()), ["a/two"]);
        w.apply(watcher::Event::Delete(cm(
            "a",
            "one",
            "3",
            &[("app", "web")],
        )));
        assert!(store.by_label("app", "web").unwrap().is_empty());
        assert!(matches!(store.by_owner("x"), Err(Error::NoSuchIndex(_))));
    }

    #[test]
    fn a_large_relist_is_reported_in_key_order_after_the_cache_holds_it() {
        let mut w = Writer::new(vec![Index::labels()]);
        let store = w.store();
        let name = |i: usize| format!("o-{i:04}");
        w.apply(watcher::Event::Init);
        for i in 0..1000 {
            w.apply(watcher::Event::InitApply(cm(
                "a",
                &name(i),
                "1",
                &[("k", "v")],
            )));
        }
        w.apply(watcher::Event::InitDone);
        // Relist: every third object gone, every fifth changed, new ones in between.
        w.apply(watcher::Event::Init);
        for i in 0..1000 {
            if i % 3 == 0 {
                continue;
            }
            let rv = if i % 5 == 0 { "2" } else { "1" };
            w.apply(watcher::Event::InitApply(cm(
                "a",
                &name(i),
                rv,
                &[("k", "v")],
            )));
            if i % 7 == 0 {
                let new = format!("{}-new", name(i));
                w.apply(watcher::Event::InitApply(cm("a", &new, "3", &[])));
            }
        }
        let mut reported = Vec::new();
        w.apply_each(watcher::Event::InitDone, |change| {
            // The cache already holds the outcome, and reading it here does not deadlock.
            assert_eq!(store.get(&change.key).is_some(), change.new.is_some());
            reported.push((
                change.key.to_string(),
                change.old.is_some(),
                change.new.is_some(),
            ));
        });
        let mut expected = Vec::new();
        for i in 0..1000 {
            let key = format!("a/{}", name(i));
            if i % 3 == 0 {
                expected.push((key.clone(), true, false));
            } else if i % 5 == 0 {
                expected.push((key.clone(), true, true));
            }
            if i % 3 != 0 && i % 7 == 0 {
                expected.push((format!("{key}-new"), false, true));
            }
        }
        assert_eq!(reported, expected);
        assert_eq!(store.by_label("k", "v").unwrap().len(), 1000 - 334);
    }

    #[test]
    fn namespaces_are_shared_and_forgotten_once_unused() {
        let mut w = Writer::new(vec![]);
        let store = w.store();
        w.apply(watcher::Event::Init);
        for ns in ["a", "b"] {
            for name in ["x", "y"] {
                w.apply(watcher::Event::InitApply(cm(ns, name, "1", &[])));
            }
        }
        w.apply(watcher::Event::InitDone);
        assert_eq!(w.namespaces.len(), 2);
        let shared = w.namespaces.iter().find(|ns| &***ns == "a").unwrap();
        assert_eq!(
            Arc::strong_count(shared),
            3,
            "one copy for both keys of namespace a"
        );
        // A relist without namespace b forgets it.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(cm("a", "x", "1", &[])));
        w.apply(watcher::Event::InitDone);
        let left: Vec<&str> = w.namespaces.iter().map(|ns| &**ns).collect();
        assert_eq!(left, ["a"]);
        assert_eq!(names(&store.list()), ["a/x"]);
    }

    #[test]
    fn keys_can_be_walked_a_page_at_a_time_and_looked_up_in_any_cluster() {
        let mut w = Writer::new(vec![]);
        let store = w.store();
        w.apply(watcher::Event::Init);
        for (ns, n) in [("b", "x"), ("a", "z"), ("a", "b"), ("c", "a")] {
            w.apply(watcher::Event::InitApply(cm(ns, n, "1", &[])));
        }
        w.apply(watcher::Event::InitDone);
        let first = store.keys_after(None, 3);
        assert_eq!(first, store.keys()[..3]);
        let rest = store.keys_after(first.last(), 3);
        assert_eq!(rest, [ObjectKey::namespaced("c", "a")]);
        assert!(store.keys_after(rest.last(), 3).is_empty());
        let in_cluster = ObjectKey::namespaced("a", "z").in_cluster(Some("east".into()));
        assert!(store.contains(&in_cluster));
        assert!(store.get(&in_cluster).is_some());
        assert!(!store.contains(&ObjectKey::cluster("z")));
        assert!(store.list_namespace("b").len() == 1 && store.list_namespace("d").is_empty());
    }
}
