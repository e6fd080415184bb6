//! [`MemStore`]: the whole MVCC history in memory.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;

use crate::feed::{ChangeLog, spawn_log_watch};
use crate::mvcc::{ReadView, plan_txn, shape_range};
use crate::{
    Error, Event, KeyRange, KeyValue, KvStore, RangeRequest, RangeResponse, Result, Revision, Txn,
    TxnResponse, WatchRequest, WatchStream,
};

/// An in-memory [`KvStore`]: every revision since the last compaction, for tests and for
/// short-lived servers. Cloning gives another handle to the same store.
#[derive(Clone)]
pub struct MemStore {
    inner: Arc<Inner>,
}

struct Inner {
    state: RwLock<State>,
    revision: watch::Sender<Revision>,
}

struct State {
    /// Per key, its versions in revision order; `None` marks a delete.
    keys: BTreeMap<Bytes, Vec<(Revision, Option<KeyValue>)>>,
    /// The changes of each revision after the compaction point.
    log: BTreeMap<Revision, Arc<[Event]>>,
    revision: Revision,
    compact_revision: Revision,
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.read();
        f.debug_struct("MemStore")
            .field("revision", &state.revision)
            .field("compact_revision", &state.compact_revision)
            .field("keys", &state.keys.len())
            .finish()
    }
}

impl MemStore {
    /// An empty store at revision 1.
    pub fn new() -> Self {
        let (revision, _) = watch::channel(1);
        MemStore {
            inner: Arc::new(Inner {
                state: RwLock::new(State {
                    keys: BTreeMap::new(),
                    log: BTreeMap::new(),
                    revision: 1,
                    compact_revision: 0,
                }),
                revision,
            }),
        }
    }
}

impl Inner {
    // A panic while holding the lock cannot leave the state half-changed (every mutation is
    // computed first and applied without fallible steps), so a poisoned lock is still sound.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn check_readable(&self, revision: Revision) -> Result<()> {
        if revision < self.compact_revision {
            return Err(Error::Compacted {
                compact_revision: self.compact_revision,
            });
        }
        if revision > self.revision {
            return Err(Error::FutureRevision {
                requested: revision,
                current: self.revision,
            });
        }
        Ok(())
    }

    fn at(versions: &[(Revision, Option<KeyValue>)], revision: Revision) -> Option<&KeyValue> {
        let idx = versions.partition_point(|(rev, _)| *rev <= revision);
        idx.checked_sub(1).and_then(|i| versions[i].1.as_ref())
    }
}

impl ReadView for State {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        Ok(self
            .keys
            .get(key)
            .and_then(|v| v.last())
            .and_then(|(_, kv)| kv.clone()))
    }

    fn scan(&self, range: &KeyRange) -> Result<Vec<KeyValue>> {
        Ok(self
            .keys
            .range(range.bounds())
            .filter_map(|(_, v)| v.last().and_then(|(_, kv)| kv.clone()))
            .collect())
    }
}

#[async_trait]
impl KvStore for MemStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        req.validate()?;
        let state = self.inner.read();
        let revision = req.revision.filter(|r| *r > 0).unwrap_or(state.revision);
        state.check_readable(revision)?;
        let kvs = state
            .keys
            .range(req.range.bounds())
            .filter_map(|(_, versions)| State::at(versions, revision).cloned())
            .collect();
        Ok(shape_range(kvs, &req, revision))
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        let mut state = self.inner.write();
        let revision = state.revision + 1;
        let plan = plan_txn(&*state, &txn, revision)?;
        if !plan.events.is_empty() {
            for event in plan.events.iter() {
                let value = match event.kind {
                    crate::EventKind::Put => Some(event.kv.clone()),
                    crate::EventKind::Delete => None,
                };
                state
                    .keys
                    .entry(event.kv.key.clone())
                    .or_default()
                    .push((revision, value));
            }
            state.log.insert(revision, plan.events.into());
            state.revision = revision;
            self.inner.revision.send_replace(revision);
        }
        Ok(TxnResponse {
            revision: state.revision,
            succeeded: plan.succeeded,
            responses: plan.responses,
        })
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        req.validate()?;
        let current = {
            let state = self.inner.read();
            let start = req.start_revision.filter(|r| *r > 0);
            if let Some(start) = start {
                if start < state.compact_revision {
                    return Err(Error::Compacted {
                        compact_revision: state.compact_revision,
                    });
                }
                if start > state.revision + 1 {
                    return Err(Error::FutureRevision {
                        requested: start,
                        current: state.revision,
                    });
                }
            }
            state.revision
        };
        let start = req.start_revision.filter(|r| *r > 0).unwrap_or(current + 1);
        Ok(spawn_log_watch(
            Arc::new(self.clone()),
            self.inner.revision.subscribe(),
            req.range,
            start,
            req.prev_kv,
        ))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut state = self.inner.write();
        if revision <= state.compact_revision {
            return Err(Error::Compacted {
                compact_revision: state.compact_revision,
            });
        }
        if revision > state.revision {
            return Err(Error::FutureRevision {
                requested: revision,
                current: state.revision,
            });
        }
        state.keys.retain(|_, versions| {
            // Keep everything from `revision` on, plus the newest older version if it is a live
            // value: it is what reads at `revision` see.
            let older = versions.partition_point(|(rev, _)| *rev < revision);
            let keep_from = match older.checked_sub(1) {
                Some(newest_older) if versions[newest_older].1.is_some() => newest_older,
                _ => older,
            };
            versions.drain(..keep_from);
            !versions.is_empty()
        });
        state.log = state.log.split_off(&revision);
        state.compact_revision = revision;
        Ok(())
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.inner.read().revision)
    }
}

#[async_trait]
impl ChangeLog for MemStore {
    async fn read_changes(
        &self,
        from: Revision,
        to: Revision,
        range: &KeyRange,
        max_events: usize,
    ) -> Result<(Vec<Event>, Revision)> {
        let state = self.inner.read();
        if from < state.compact_revision {
            return Err(Error::Compacted {
                compact_revision: state.compact_revision,
            });
        }
        let mut events = Vec::new();
        let mut last = to;
        for (rev, changes) in state.log.range(from..=to) {
            events.extend(
                changes
                    .iter()
                    .filter(|e| range.contains(&e.kv.key))
                    .cloned(),
            );
            if events.len() >= max_events {
                last = *rev;
                break;
            }
        }
        Ok((events, last))
    }
}
