//! Transaction evaluation shared by the backends that keep their own MVCC state
//! ([`MemStore`](crate::MemStore) and the disk store).
//!
//! A backend serialises transactions itself (a lock, or a single committer) and, for each one,
//! calls [`plan_txn`] with a [`ReadView`] of the latest state. The plan says whether the
//! compares held, what each operation answers, and which [`Event`]s the transaction commits at
//! the revision it was offered; the backend then makes those events durable and visible.
//! Keeping this in one place means every backend agrees on versions, create revisions,
//! previous values and read-your-writes inside a transaction.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::{
    Event, EventKind, KeyRange, KeyValue, RangeRequest, RangeResponse, Result, Revision, Txn,
    TxnOp, TxnOpResponse,
};

/// The latest state of the store, as a transaction sees it.
pub trait ReadView {
    /// The key's latest value, `None` if absent.
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>>;
    /// Every live key in `range`, in key order.
    fn scan(&self, range: &KeyRange) -> Result<Vec<KeyValue>>;
}

/// A [`ReadView`] with pending writes layered on top: `None` marks a deleted key.
pub struct Overlay<'a> {
    base: &'a dyn ReadView,
    writes: &'a BTreeMap<Bytes, Option<KeyValue>>,
}

impl<'a> Overlay<'a> {
    /// `writes` over `base`.
    pub fn new(base: &'a dyn ReadView, writes: &'a BTreeMap<Bytes, Option<KeyValue>>) -> Self {
        Overlay { base, writes }
    }
}

impl ReadView for Overlay<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        match self.writes.get(key) {
            Some(pending) => Ok(pending.clone()),
            None => self.base.get(key),
        }
    }

    fn scan(&self, range: &KeyRange) -> Result<Vec<KeyValue>> {
        let pending: Vec<_> = self.writes.range(range.bounds()).collect();
        if pending.is_empty() {
            return self.base.scan(range);
        }
        let mut merged: BTreeMap<Bytes, KeyValue> = self
            .base
            .scan(range)?
            .into_iter()
            .map(|kv| (kv.key.clone(), kv))
            .collect();
        for (key, write) in pending {
            match write {
                Some(kv) => merged.insert(key.clone(), kv.clone()),
                None => merged.remove(key),
            };
        }
        Ok(merged.into_values().collect())
    }
}

/// What a transaction does, worked out against a [`ReadView`] before it is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnPlan {
    /// Whether every compare held.
    pub succeeded: bool,
    /// One response per operation of the branch that ran.
    pub responses: Vec<TxnOpResponse>,
    /// The changes to commit, in operation order, all at the revision offered to
    /// [`plan_txn`], with previous values filled in. Empty if the transaction changes nothing,
    /// in which case the store's revision must not move.
    pub events: Vec<Event>,
}

/// Works out `txn` against `view`, whose latest revision is `revision - 1`: the changes, if
/// any, are stamped with `revision`. The transaction must have been validated.
pub fn plan_txn(view: &dyn ReadView, txn: &Txn, revision: Revision) -> Result<TxnPlan> {
    let mut succeeded = true;
    for compare in &txn.compares {
        if !compare.evaluate(view.get(&compare.key)?.as_ref()) {
            succeeded = false;
            break;
        }
    }
    let branch = if succeeded {
        &txn.success
    } else {
        &txn.failure
    };

    let mut writes: BTreeMap<Bytes, Option<KeyValue>> = BTreeMap::new();
    let mut events = Vec::new();
    let mut responses = Vec::with_capacity(branch.len());
    for op in branch {
        let view = Overlay::new(view, &writes);
        let response = match op {
            TxnOp::Put {
                key,
                value,
                prev_kv,
            } => {
                let prev = view.get(key)?;
                let kv = KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: prev.as_ref().map_or(revision, |p| p.create_revision),
                    mod_revision: revision,
                    version: prev.as_ref().map_or(1, |p| p.version + 1),
                };
                writes.insert(key.clone(), Some(kv.clone()));
                events.push(Event {
                    kind: EventKind::Put,
                    kv,
                    prev_kv: prev.clone(),
                });
                TxnOpResponse::Put {
                    prev_kv: if *prev_kv { prev } else { None },
                }
            }
            TxnOp::Delete { range, prev_kv } => {
                let doomed = view.scan(range)?;
                let deleted = doomed.len() as u64;
                for prev in &doomed {
                    writes.insert(prev.key.clone(), None);
                    events.push(Event {
                        kind: EventKind::Delete,
                        kv: tombstone(prev.key.clone(), revision),
                        prev_kv: Some(prev.clone()),
                    });
                }
                TxnOpResponse::Delete {
                    deleted,
                    prev_kvs: if *prev_kv { doomed } else { Vec::new() },
                }
            }
            TxnOp::Range(req) => TxnOpResponse::Range(shape_range(view.scan(&req.range)?, req, 0)),
        };
        responses.push(response);
    }

    // Reads inside the transaction are answered at the revision the transaction ends at.
    let end_revision = if events.is_empty() {
        revision - 1
    } else {
        revision
    };
    for response in &mut responses {
        if let TxnOpResponse::Range(r) = response {
            r.revision = end_revision;
        }
    }
    Ok(TxnPlan {
        succeeded,
        responses,
        events,
    })
}

/// The key as a delete event carries it.
pub fn tombstone(key: Bytes, revision: Revision) -> KeyValue {
    KeyValue {
        key,
        value: Bytes::new(),
        create_revision: 0,
        mod_revision: revision,
        version: 0,
    }
}

/// Applies a range request's limit, count-only and keys-only options to every live key of
/// its range (in key order), answering at `revision`.
pub fn shape_range(
    mut kvs: Vec<KeyValue>,
    req: &RangeRequest,
    revision: Revision,
) -> RangeResponse {
    let count = kvs.len() as u64;
    if req.count_only {
        return RangeResponse {
            revision,
            kvs: Vec::new(),
            count,
            more: false,
        };
    }
    let limit = req.effective_limit();
    let more = kvs.len() > limit;
    kvs.truncate(limit);
    if req.keys_only {
        for kv in &mut kvs {
            kv.value = Bytes::new();
        }
    }
    RangeResponse {
        revision,
        kvs,
        count,
        more,
    }
}

/// Removes the previous value from an event unless the watch asked for it.
pub fn strip_prev(mut event: Event, prev_kv: bool) -> Event {
    if !prev_kv {
        event.prev_kv = None;
    }
    event
}
