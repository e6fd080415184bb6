//! Expectations: the children a controller created or deleted that its cache has not shown
//! yet (kcm's `UIDTrackingControllerExpectations`).
//!
//! A cache lags the API server. A ReplicaSet that created three pods and reconciles again
//! before its cache has them would create three more. So a controller records each child it
//! creates or deletes under its own key, and acts on its children only once its cache has
//! caught up: every created child seen, every deleted child gone or terminating. kcm counts
//! events to get there; here the cache itself is asked, by uid, so a missed event can never
//! leave a controller waiting. As in kcm, expectations older than five minutes are
//! forgotten, so a write whose answer was lost cannot stall a controller forever.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// kcm's `ExpectationsTimeout`.
pub const TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// What the cache holds of one child, by uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not in the cache.
    Absent,
    /// In the cache.
    Present,
    /// In the cache with a deletion timestamp.
    Terminating,
}

#[derive(Debug)]
struct Pending {
    creations: BTreeSet<String>,
    deletions: BTreeSet<String>,
    since: Instant,
}

/// Expectations of one controller, by the owner's key (`namespace/name`).
#[derive(Debug, Default)]
pub struct Expectations {
    pending: Mutex<BTreeMap<String, Pending>>,
}

impl Expectations {
    /// No expectations.
    pub fn new() -> Expectations {
        Expectations::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, Pending>) -> T) -> T {
        f(&mut self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn entry<'m>(map: &'m mut BTreeMap<String, Pending>, key: &str) -> &'m mut Pending {
        map.entry(key.to_string()).or_insert_with(|| Pending {
            creations: BTreeSet::new(),
            deletions: BTreeSet::new(),
            since: Instant::now(),
        })
    }

    /// `key` created the child `uid`.
    pub fn created(&self, key: &str, uid: impl Into<String>) {
        self.with(|map| Self::entry(map, key).creations.insert(uid.into()));
    }

    /// `key` deleted the child `uid`.
    pub fn deleted(&self, key: &str, uid: impl Into<String>) {
        self.with(|map| Self::entry(map, key).deletions.insert(uid.into()));
    }

    /// Whether `key`'s cache has caught up with its writes, asking `seen` what the cache
    /// holds of each child. Children seen as expected are forgotten; all of `key`'s
    /// expectations are forgotten once they are five minutes old.
    pub fn satisfied(&self, key: &str, seen: impl Fn(&str) -> Seen) -> bool {
        self.with(|map| {
            let Some(pending) = map.get_mut(key) else {
                return true;
            };
            // A child created and then deleted by the same controller may come and go
            // between two looks: absent, both writes are behind it.
            let Pending {
                creations,
                deletions,
                ..
            } = pending;
            creations.retain(|uid| seen(uid) == Seen::Absent && !deletions.contains(uid));
            deletions.retain(|uid| seen(uid) == Seen::Present);
            let done = pending.creations.is_empty() && pending.deletions.is_empty();
            if done || pending.since.elapsed() >= TIMEOUT {
                map.remove(key);
                return true;
            }
            false
        })
    }

    /// [`satisfied`](Self::satisfied), `children` being what the cache holds (`key`'s
    /// children among others): nothing is read when nothing is pending, and otherwise only
    /// the children pending are looked at — a sync of a ReplicaSet of 10,000 pods must not
    /// index them all to find the few hundred it just created.
    pub fn satisfied_among<'c, R>(
        &self,
        key: &str,
        children: impl IntoIterator<Item = &'c R>,
    ) -> bool
    where
        R: kube::Resource + 'c,
    {
        let Some(wanted) = self.with(|map| {
            map.get(key).map(|p| {
                p.creations
                    .iter()
                    .chain(&p.deletions)
                    .cloned()
                    .collect::<HashSet<String>>()
            })
        }) else {
            return true;
        };
        let seen: HashMap<&str, Seen> = children
            .into_iter()
            .filter_map(|child| {
                let meta = child.meta();
                let uid = meta.uid.as_deref().filter(|uid| wanted.contains(*uid))?;
                let state = if meta.deletion_timestamp.is_some() {
                    Seen::Terminating
                } else {
                    Seen::Present
                };
                Some((uid, state))
            })
            .collect();
        self.satisfied(key, |uid| seen.get(uid).copied().unwrap_or(Seen::Absent))
    }

    /// Forgets `key` (the owner is gone).
    pub fn forget(&self, key: &str) {
        self.with(|map| map.remove(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_cache_then_forgets() {
        let expectations = Expectations::new();
        assert!(expectations.satisfied("ns/rs", |_| Seen::Absent));
        expectations.created("ns/rs", "a");
        expectations.deleted("ns/rs", "b");
        assert!(!expectations.satisfied("ns/rs", |_| Seen::Present));
        // "a" seen; "b" still present.
        assert!(!expectations.satisfied("ns/rs", |uid| match uid {
            "a" => Seen::Present,
            _ => Seen::Present,
        }));
        assert!(expectations.satisfied("ns/rs", |uid| match uid {
            "b" => Seen::Terminating,
            _ => Seen::Absent,
        }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_created_and_deleted_before_the_cache_saw_it_is_not_awaited() {
        let expectations = Expectations::new();
        expectations.created("ns/rs", "a");
        expectations.deleted("ns/rs", "a");
        assert!(expectations.satisfied("ns/rs", |_| Seen::Absent));
        expectations.created("ns/rs", "b");
        expectations.deleted("ns/rs", "b");
        assert!(
            !expectations.satisfied("ns/rs", |_| Seen::Present),
            "seen created: its deletion is still awaited"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn expire_after_five_minutes() {
        let expectations = Expectations::new();
        expectations.created("ns/rs", "lost");
        assert!(!expectations.satisfied("ns/rs", |_| Seen::Absent));
        tokio::time::sleep(TIMEOUT).await;
        assert!(expectations.satisfied("ns/rs", |_| Seen::Absent));
    }

    fn pod(uid: &str, deleting: bool) -> k8s_openapi::api::core::v1::Pod {
        let mut pod = k8s_openapi::api::core::v1::Pod::default();
        pod.metadata.uid = Some(uid.into());
        if deleting {
            pod.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        pod
    }

    #[tokio::test(start_paused = true)]
    async fn among_the_cached_children_as_by_uid() {
        let expectations = Expectations::new();
        let cached = [pod("a", false), pod("b", true), pod("c", false)];
        assert!(
            expectations.satisfied_among("ns/rs", &cached),
            "nothing pending"
        );
        expectations.created("ns/rs", "a");
        expectations.created("ns/rs", "new");
        expectations.deleted("ns/rs", "b");
        expectations.deleted("ns/rs", "c");
        assert!(
            !expectations.satisfied_among("ns/rs", &cached),
            "\"new\" not seen yet, \"c\" still running"
        );
        let later = [pod("a", false), pod("new", false), pod("b", true)];
        assert!(expectations.satisfied_among("ns/rs", &later));
        assert!(expectations.satisfied_among("ns/other", &cached));
    }
}
