//! What the doctor remembers about each object while it watches: as little as answers the
//! report's questions.

use std::collections::hash_map::DefaultHasher;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::io;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::DynamicObject;
use serde_json::Value;

use super::{Shared, WatchedResource};

/// Distinct changing paths kept per object: enough to name what flaps, bounded for objects
/// that change somewhere new on every write (a map gaining a key each time).
const MAX_PATHS: usize = 32;
/// Distinct writers kept per object.
const MAX_MANAGERS: usize = 8;

/// (namespace, name); cluster-scoped objects have no namespace.
pub(crate) type ObjectName = (Option<Box<str>>, Box<str>);

/// The records of one resource's objects, fed by its watch.
pub(crate) struct ResourceRecords {
    pub(crate) resource: WatchedResource,
    pub(crate) objects: HashMap<ObjectName, ObjectRecord>,
    /// The last error the watch reported.
    pub(crate) problem: Option<String>,
    /// Whether a complete list ever arrived.
    pub(crate) listed_once: bool,
    /// The objects deleted during the window, with the hash of their uid ([`uid_key`]), to
    /// match against the Events about them.
    pub(crate) deleted: Vec<(ObjectName, u64)>,
    shared: Arc<Shared>,
    /// Bumped at each (re)list; objects the list did not return again were deleted unseen.
    list_epoch: u32,
}

/// One object's record.
pub(crate) struct ObjectRecord {
    /// Serialized size (JSON bytes) when the window opened, or when first seen after it.
    pub(crate) first_bytes: u32,
    /// Serialized size of the last version seen.
    pub(crate) last_bytes: u32,
    /// Hash of the last resourceVersion, to tell a relisted object that changed from one that
    /// did not.
    resource_version: u64,
    /// Hash of the uid ([`uid_key`]): a deleted object is matched to its Events by it, and a
    /// relisted object whose uid changed was deleted and made anew while the watch was down.
    uid: u64,
    /// Hashes of the last version's managedFields entries (manager, operation, subresource,
    /// time): an entry whose hash is new is a manager that just wrote.
    managed: Box<[u64]>,
    /// The list that last returned the object.
    list_epoch: u32,
    /// Set when the object was deleted during the window (its churn is kept).
    pub(crate) gone: bool,
    pub(crate) deleting: Option<Box<Deleting>>,
    pub(crate) churn: Option<Box<Churn>>,
}

/// A pending deletion.
pub(crate) struct Deleting {
    pub(crate) since: jiff::Timestamp,
    /// Each finalizer with the managers whose managedFields own it.
    pub(crate) finalizers: Vec<(String, Vec<String>)>,
}

/// The writes of an object written during the window.
pub(crate) struct Churn {
    pub(crate) writes: u32,
    /// When the writes of the last minute happened (ms into the window), to find the busiest
    /// minute of a long window.
    last_minute: VecDeque<u32>,
    pub(crate) busiest_minute: u32,
    /// Writes that made the object larger; `shrank` if any made it smaller.
    pub(crate) grew: u32,
    pub(crate) shrank: bool,
    pub(crate) managers: BTreeSet<String>,
    /// Changed field path → how many writes changed it.
    pub(crate) paths: BTreeMap<String, u32>,
    /// The last version without managedFields and resourceVersion, serialized (a third of the
    /// memory of a parsed tree), to diff the next version against.
    previous: Option<Box<[u8]>>,
}

impl Churn {
    fn new() -> Churn {
        Churn {
            writes: 0,
            last_minute: VecDeque::new(),
            busiest_minute: 0,
            grew: 0,
            shrank: false,
            managers: BTreeSet::new(),
            paths: BTreeMap::new(),
            previous: None,
        }
    }

    fn count_write(&mut self, at_ms: u32) {
        self.writes = self.writes.saturating_add(1);
        while self
            .last_minute
            .front()
            .is_some_and(|&t| t.saturating_add(60_000) <= at_ms)
        {
            self.last_minute.pop_front();
        }
        self.last_minute.push_back(at_ms);
        self.busiest_minute = self.busiest_minute.max(self.last_minute.len() as u32);
    }
}

/// How a version of an object arrived.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// In a (re)list.
    Listed,
    /// As a watch event.
    Written,
}

impl ResourceRecords {
    pub(crate) fn new(resource: WatchedResource, shared: Arc<Shared>) -> ResourceRecords {
        ResourceRecords {
            resource,
            objects: HashMap::new(),
            problem: None,
            listed_once: false,
            deleted: Vec::new(),
            shared,
            list_epoch: 0,
        }
    }

    pub(crate) fn relist_started(&mut self) {
        self.list_epoch = self.list_epoch.wrapping_add(1);
    }

    pub(crate) fn listed(&mut self, object: DynamicObject) {
        self.arrived(object, Arrival::Listed);
    }

    pub(crate) fn written(&mut self, object: DynamicObject) {
        self.arrived(object, Arrival::Written);
    }

    /// A list is complete: what it did not return was deleted while the watch was down.
    pub(crate) fn relist_done(&mut self) {
        self.listed_once = true;
        let epoch = self.list_epoch;
        let missing: Vec<ObjectName> = self
            .objects
            .iter()
            .filter(|(_, record)| !record.gone && record.list_epoch != epoch)
            .map(|(name, _)| name.clone())
            .collect();
        for name in missing {
            self.remove(name);
        }
    }

    pub(crate) fn deleted(&mut self, object: DynamicObject) {
        if let Some(name) = object_name(&object) {
            self.remove(name);
        }
    }

    /// Forgets a deleted object, or (if it churned during the window) keeps its churn: a loop
    /// that deletes and recreates an object is a hot loop too.
    fn remove(&mut self, name: ObjectName) {
        let at_ms = self.shared.window_ms();
        let Some(record) = self.objects.get_mut(&name) else {
            return;
        };
        if record.gone {
            return;
        }
        match at_ms {
            Some(at_ms) => {
                self.shared.write_seen();
                self.deleted.push((name.clone(), record.uid));
                let churn = record.churn.get_or_insert_with(|| Box::new(Churn::new()));
                churn.count_write(at_ms);
                churn.previous = None;
                record.gone = true;
                record.deleting = None;
            }
            None => {
                self.objects.remove(&name);
            }
        }
        self.shared.object_removed();
    }

    fn arrived(&mut self, mut object: DynamicObject, arrival: Arrival) {
        let Some(name) = object_name(&object) else {
            return;
        };
        let bytes = serialized_len(&object);
        let resource_version = hash_of(&object.metadata.resource_version);
        let uid = object
            .metadata
            .uid
            .as_deref()
            .map(uid_key)
            .unwrap_or_default();
        let deleting = deleting(&object);
        let managed_fields = object.metadata.managed_fields.take().unwrap_or_default();
        let managed: Box<[u64]> = managed_fields.iter().map(entry_stamp).collect();
        // A resource's first list is its baseline even when it completes after the window
        // opened (a slow resource past the sync timeout): listing is not writing.
        let at_ms = if arrival == Arrival::Listed && !self.listed_once {
            None
        } else {
            self.shared.window_ms()
        };
        let epoch = self.list_epoch;
        // A relist that finds another object under a known name: the one known was deleted
        // (and a new one made) while the watch was down.
        if arrival == Arrival::Listed
            && at_ms.is_some()
            && let Some(known) = self.objects.get(&name)
            && !known.gone
            && known.uid != uid
        {
            self.deleted.push((name.clone(), known.uid));
        }

        let record = match self.objects.entry(name) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                self.shared.object_added();
                // An object that appears during the window was just created: its creation
                // is a write, by the managers in its managedFields.
                let created = at_ms.is_some();
                entry.insert(ObjectRecord {
                    first_bytes: bytes,
                    last_bytes: bytes,
                    resource_version: if created { 0 } else { resource_version },
                    uid,
                    managed: if created {
                        Box::new([])
                    } else {
                        managed.clone()
                    },
                    list_epoch: epoch,
                    gone: false,
                    deleting: None,
                    churn: None,
                })
            }
        };
        if record.gone {
            record.gone = false;
            self.shared.object_added();
        }
        record.list_epoch = epoch;
        record.uid = uid;
        record.deleting = deleting;
        // A write moves the resourceVersion; a relisted object whose version did not move was
        // not written, and a duplicate event is not a second write.
        let is_write = record.resource_version != resource_version;
        match at_ms {
            // Before the window opens everything is baseline.
            None => {
                record.first_bytes = bytes;
            }
            Some(at_ms) if is_write => {
                self.shared.write_seen();
                let churn = record.churn.get_or_insert_with(|| Box::new(Churn::new()));
                churn.count_write(at_ms);
                if bytes > record.last_bytes {
                    churn.grew += 1;
                } else if bytes < record.last_bytes {
                    churn.shrank = true;
                }
                for (entry, stamp) in managed_fields.iter().zip(managed.iter()) {
                    if churn.managers.len() < MAX_MANAGERS
                        && !record.managed.contains(stamp)
                        && let Some(manager) = &entry.manager
                    {
                        churn.managers.insert(manager.clone());
                    }
                }
                object.metadata.resource_version = None;
                object.metadata.generation = None;
                let current = serde_json::to_value(&object).unwrap_or(Value::Null);
                if let Some(previous) = churn
                    .previous
                    .as_deref()
                    .and_then(|bytes| serde_json::from_slice::<Value>(bytes).ok())
                {
                    let mut changed = BTreeSet::new();
                    changed_paths(&previous, &current, &mut String::new(), &mut changed);
                    for path in changed {
                        if let Some(count) = churn.paths.get_mut(&path) {
                            *count += 1;
                        } else if churn.paths.len() < MAX_PATHS {
                            churn.paths.insert(path, 1);
                        }
                    }
                }
                churn.previous = serde_json::to_vec(&current).ok().map(Vec::into_boxed_slice);
            }
            Some(_) => {}
        }
        record.last_bytes = bytes;
        record.resource_version = resource_version;
        record.managed = managed;
    }
}

#[cfg(test)]
impl ObjectRecord {
    /// A record written at these times (ms into the window).
    pub(crate) fn written_at(times_ms: &[u32]) -> ObjectRecord {
        let mut churn = Churn::new();
        for &at in times_ms {
            churn.count_write(at);
        }
        ObjectRecord {
            first_bytes: 100,
            last_bytes: 100,
            resource_version: 0,
            uid: 0,
            managed: Box::new([]),
            list_epoch: 0,
            gone: false,
            deleting: None,
            churn: Some(Box::new(churn)),
        }
    }
}

fn object_name(object: &DynamicObject) -> Option<ObjectName> {
    let name = object.metadata.name.as_deref()?;
    Some((
        object.metadata.namespace.as_deref().map(Box::from),
        Box::from(name),
    ))
}

/// The key an object's uid is known by, in the records and in [`super::events`]: a hash, 8
/// bytes instead of 36 and an allocation.
pub(crate) fn uid_key(uid: &str) -> u64 {
    hash_of(&uid)
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// A managedFields entry's identity and time: it changes exactly when that manager writes.
fn entry_stamp(entry: &ManagedFieldsEntry) -> u64 {
    hash_of(&(
        &entry.manager,
        &entry.operation,
        &entry.subresource,
        entry.time.as_ref().map(|t| t.0.as_second()),
    ))
}

/// The object's size as JSON, counted without building the text.
fn serialized_len(object: &DynamicObject) -> u32 {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, object);
    u32::try_from(counter.0).unwrap_or(u32::MAX)
}

/// The pending deletion of `object`, if any: each finalizer (metadata's, and a namespace's
/// spec.finalizers) with the managers that set it.
fn deleting(object: &DynamicObject) -> Option<Box<Deleting>> {
    let since = object.metadata.deletion_timestamp.as_ref()?.0;
    let managed = object
        .metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default();
    let mut finalizers: Vec<(String, Vec<String>)> = object
        .metadata
        .finalizers
        .iter()
        .flatten()
        .map(|finalizer| {
            (
                finalizer.clone(),
                crate::finalizer::owners(managed, finalizer),
            )
        })
        .collect();
    if let Some(spec_finalizers) = object
        .data
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
    {
        for finalizer in spec_finalizers.iter().filter_map(Value::as_str) {
            finalizers.push((finalizer.to_string(), Vec::new()));
        }
    }
    Some(Box::new(Deleting { since, finalizers }))
}

/// Adds the paths (jq style: `.metadata.annotations.last-run`) where `old` and `new` differ.
/// Arrays are compared whole: `.status.conditions`, not one path per element.
fn changed_paths(old: &Value, new: &Value, path: &mut String, out: &mut BTreeSet<String>) {
    if old == new || out.len() >= MAX_PATHS {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let len = path.len();
                push_key(path, key);
                changed_paths(
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    path,
                    out,
                );
                path.truncate(len);
            }
        }
        _ => {
            out.insert(if path.is_empty() {
                ".".to_string()
            } else {
                path.clone()
            });
        }
    }
}

/// Appends `.key`, or `["key"]` when the key would not read as one segment (annotation keys
/// such as `example.com/counter`).
fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/'));
    if plain {
        path.push('.');
        path.push_str(key);
    } else {
        path.push('[');
        path.push_str(&Value::String(key.to_string()).to_string());
        path.push(']');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(old: Value, new: Value) -> Vec<String> {
        let mut out = BTreeSet::new();
        changed_paths(&old, &new, &mut String::new(), &mut out);
        out.into_iter().collect()
    }

    #[test]
    fn paths_name_leaves_quote_dotted_keys_and_stop_at_arrays() {
        let old = json!({
            "metadata": {"annotations": {"last-run": "1", "example.com/n": "1", "same": "x"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        });
        let new = json!({
            "metadata": {"annotations": {"last-run": "2", "example.com/n": "2", "same": "x"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        });
        assert_eq!(
            paths(old, new),
            [
                ".metadata.annotations.last-run",
                r#".metadata.annotations["example.com/n"]"#,
                ".status.conditions",
            ]
        );
    }

    #[test]
    fn added_and_removed_keys_are_changes() {
        assert_eq!(
            paths(json!({"data": {"a": "1"}}), json!({"data": {"b": "1"}})),
            [".data.a", ".data.b"]
        );
    }

    #[test]
    fn deletions_in_the_window_are_kept_with_their_uid_even_when_seen_only_by_a_relist() {
        let object = |name: &str, uid: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default", "uid": uid,
                             "resourceVersion": uid},
            }))
            .unwrap()
        };
        let shared = Arc::new(Shared::default());
        let resource = WatchedResource {
            api: kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            heartbeat: false,
        };
        let mut records = ResourceRecords::new(resource, shared.clone());
        records.relist_started();
        for (name, uid) in [
            ("before", "u0"),
            ("watched", "u1"),
            ("missed", "u2"),
            ("swapped", "u3"),
        ] {
            records.listed(object(name, uid));
        }
        records.relist_done();
        // Deleted before the window opens: forgotten, not a deletion in the window.
        records.deleted(object("before", "u0"));
        let _ = shared.window_start.set(tokio::time::Instant::now());
        records.deleted(object("watched", "u1"));
        // The watch was down: `missed` is gone and `swapped` is another object now.
        records.relist_started();
        records.listed(object("swapped", "u4"));
        records.relist_done();
        let mut deleted: Vec<(&str, u64)> = records
            .deleted
            .iter()
            .map(|((_, name), uid)| (&**name, *uid))
            .collect();
        deleted.sort();
        assert_eq!(
            deleted,
            [
                ("missed", uid_key("u2")),
                ("swapped", uid_key("u3")),
                ("watched", uid_key("u1")),
            ]
        );
    }

    #[test]
    fn the_busiest_minute_slides() {
        let mut churn = Churn::new();
        for at in [0, 10_000, 59_999, 60_000, 61_000, 130_000] {
            churn.count_write(at);
        }
        assert_eq!(churn.writes, 6);
        // 10 s, 59.999 s, 60 s and 61 s fall within one minute.
        assert_eq!(churn.busiest_minute, 4);
    }
}
