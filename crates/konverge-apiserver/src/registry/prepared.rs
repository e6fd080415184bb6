//! Objects the create path made once, kept to be stored as new objects in any store.
//!
//! A server bootstraps the same ~150 objects into every new store (kube-apiserver 1.33's
//! roles, bindings, priority classes, APIServices). Decoding, defaulting, admitting,
//! validating and encoding them again for every in-process test server costs more than
//! everything else a build does, and gives the same bytes each time except for three values:
//! the object's `uid`, its `creationTimestamp` and its managed fields' `time` (and its
//! conditions' `lastTransitionTime`, for objects a control loop's first pass wrote). A [`Prepared`]
//! object is the bytes the create path would store (its answer to a dry run), with those
//! values marked by position, so that storing it is a copy, a new uid and the current time:
//! what the full path would store for the same input, byte for byte. Nothing is skipped for
//! objects that vary: a prepared object can only be made from what a create answered.
//! [`Registry::create_prepared`] stores many with one [`KvStore::create_each`], which a disk
//! store makes durable in one commit.
//!
//! [`KvStore::create_each`]: konverge_store::KvStore::create_each

use bytes::Bytes;
use serde_json::Value;

use super::{Registry, encode, target};
use crate::error::{ApiError, Result};
use crate::resources::ResourceType;
use crate::resources::meta;

/// Stands for the uid in a prepared object's bytes: as long as a uid.
const UID_MARK: &str = "prepared-uid-is-marked-here-36-chars";
/// Stands for a timestamp: as long as `2006-01-02T15:04:05Z`.
const TIME_MARK: &str = "prepared-time-mark-z";

/// An object as the create path stores it, with where its uid and times go.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    key: Bytes,
    name: String,
    bytes: Vec<u8>,
    uids: Vec<usize>,
    times: Vec<usize>,
}

impl Prepared {
    /// Prepares `created`, the object a create of `rt` answered (with its uid, creation time
    /// and managed fields; a dry run's answer will do), to be stored in any store.
    pub(crate) fn from_created(rt: &ResourceType, created: &Value) -> Result<Prepared> {
        let name = meta::meta_str(created, "name").unwrap_or("").to_string();
        let namespace = meta::meta_str(created, "namespace").map(String::from);
        let mut marked = created.clone();
        let md = meta::metadata_mut(&mut marked);
        md.insert("uid".into(), Value::from(UID_MARK));
        md.insert("creationTimestamp".into(), Value::from(TIME_MARK));
        if let Some(entries) = md.get_mut("managedFields").and_then(Value::as_array_mut) {
            for entry in entries {
                if entry.get("time").is_some() {
                    entry["time"] = Value::from(TIME_MARK);
                }
            }
        }
        // A condition a control loop's first pass wrote is as new as the object.
        if let Some(conditions) = marked
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut)
        {
            for condition in conditions {
                if condition.get("lastTransitionTime").is_some() {
                    condition["lastTransitionTime"] = Value::from(TIME_MARK);
                }
            }
        }
        let bytes = encode(rt, &marked)?.to_vec();
        let uids = positions(&bytes, UID_MARK);
        let times = positions(&bytes, TIME_MARK);
        if uids.len() != 1 {
            return Err(ApiError::internal(format!(
                "cannot prepare {}/{name}: its uid is not where it was put",
                rt.plural
            )));
        }
        Ok(Prepared {
            key: Bytes::from(rt.key(namespace.as_deref(), &name)),
            name,
            bytes,
            uids,
            times,
        })
    }

    /// The object's storage key.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// The bytes to store: these, with `uid` and `time` in place of the marks.
    fn stamped(&self, uid: &str, time: &str) -> Option<Bytes> {
        if uid.len() != UID_MARK.len() || time.len() != TIME_MARK.len() {
            return None;
        }
        let mut bytes = self.bytes.clone();
        for &at in &self.uids {
            bytes[at..at + uid.len()].copy_from_slice(uid.as_bytes());
        }
        for &at in &self.times {
            bytes[at..at + time.len()].copy_from_slice(time.as_bytes());
        }
        Some(Bytes::from(bytes))
    }
}

/// Where `mark` starts in `bytes`, every time.
fn positions(bytes: &[u8], mark: &str) -> Vec<usize> {
    let mark = mark.as_bytes();
    bytes
        .windows(mark.len())
        .enumerate()
        .filter(|(_, window)| *window == mark)
        .map(|(at, _)| at)
        .collect()
}

impl Registry {
    /// Stores each prepared object as a new object of its resource, in order, each with a
    /// new uid and the current time, as creates of the objects they were prepared from would
    /// (store metrics and change counts included); the store may make them durable together.
    /// Answers for each: AlreadyExists when it exists.
    pub(crate) async fn create_prepared(
        &self,
        objects: &[(&ResourceType, &Prepared)],
    ) -> Vec<Result<()>> {
        let now = meta::now();
        let mut items = Vec::with_capacity(objects.len());
        let mut stamped = Vec::with_capacity(objects.len());
        for (rt, prepared) in objects {
            let uid = meta::new_uid();
            match prepared.stamped(&uid, &now) {
                Some(value) => {
                    items.push((prepared.key.clone(), value));
                    stamped.push(Ok(()));
                }
                None => stamped.push(Err(ApiError::internal(format!(
                    "cannot stamp {}/{}: uid {uid:?} or time {now:?} is not of the usual length",
                    rt.plural, prepared.name
                )))),
            }
        }
        let started = std::time::Instant::now();
        let mut created = self.store.create_each(items).await.into_iter();
        let elapsed = started.elapsed();
        objects
            .iter()
            .zip(stamped)
            .map(|((rt, prepared), stamped)| {
                stamped?;
                let result = created.next().unwrap_or(Err(konverge_store::Error::Closed));
                self.count_store_call("create", rt, elapsed, &result);
                result
                    .map(|_| ())
                    .map_err(|e| ApiError::from_store(e, target(rt, &prepared.name)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_as_long_as_what_they_stand_for() {
        assert_eq!(UID_MARK.len(), meta::new_uid().len());
        assert_eq!(TIME_MARK.len(), "2006-01-02T15:04:05Z".len());
        assert_eq!(TIME_MARK.len(), meta::now().len());
    }
}
