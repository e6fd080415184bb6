//! Reads of the on-disk history: a key or a range as of a revision, and the change log.

use bytes::Bytes;
use fjall::Keyspace;
use konverge_store::mvcc::{ReadView, tombstone};
use konverge_store::{Error, Event, EventKind, KeyRange, KeyValue, Result, Revision};

use crate::codec::{
    decode_key_list, decode_version, history_key, key_prefix, split_history_key, unescape_key,
};

fn io(what: &'static str) -> impl FnOnce(fjall::Error) -> Error {
    move |e| Error::backend(what, e)
}

fn corrupt(e: crate::codec::CorruptRecord) -> Error {
    Error::backend("reading the disk store", e)
}

/// The history and change-log keyspaces, read-only.
#[derive(Clone)]
pub(crate) struct History {
    pub(crate) versions: Keyspace,
    pub(crate) changes: Keyspace,
}

impl History {
    /// The key as of `revision` (the newest version at or before it).
    pub(crate) fn get_at(&self, key: &[u8], revision: Revision) -> Result<Option<KeyValue>> {
        let lo = history_key(key, 0);
        let hi = history_key(key, revision);
        match self.versions.range(lo..=hi).next_back() {
            None => Ok(None),
            Some(guard) => {
                let (raw_key, raw_value) = guard.into_inner().map_err(io("reading a key"))?;
                let (_, mod_revision) = split_history_key(&raw_key).map_err(corrupt)?;
                decode_version(Bytes::copy_from_slice(key), mod_revision, &raw_value)
                    .map_err(corrupt)
            }
        }
    }

    /// Every key of `range` that is live as of `revision`, in key order.
    pub(crate) fn scan_at(&self, range: &KeyRange, revision: Revision) -> Result<Vec<KeyValue>> {
        let start = key_prefix(range.start());
        let iter = match range.end() {
            Some(end) => self.versions.range(start..key_prefix(&end)),
            None => self.versions.range(start..),
        };
        let mut out = Vec::new();
        // The newest version at or before `revision` of the key being walked.
        let mut current: Option<(Vec<u8>, Revision, fjall::Slice)> = None;
        for guard in iter {
            let (raw_key, raw_value) = guard.into_inner().map_err(io("scanning keys"))?;
            let (escaped, rev) = split_history_key(&raw_key).map_err(corrupt)?;
            let same_key = current.as_ref().is_some_and(|(k, _, _)| k[..] == *escaped);
            if !same_key {
                if let Some(done) = current.take() {
                    push_live(&mut out, done)?;
                }
                if rev <= revision {
                    current = Some((escaped.to_vec(), rev, raw_value));
                }
            } else if rev <= revision {
                current = Some((escaped.to_vec(), rev, raw_value));
            }
        }
        if let Some(done) = current {
            push_live(&mut out, done)?;
        }
        Ok(out)
    }

    /// The changes at revisions `from..=to` to keys in `range`, with previous values, stopping
    /// after the revision at which `max_events` have been gathered.
    pub(crate) fn changes(
        &self,
        from: Revision,
        to: Revision,
        range: &KeyRange,
        max_events: usize,
    ) -> Result<(Vec<Event>, Revision)> {
        let mut events = Vec::new();
        let iter = self.changes.range(from.to_be_bytes()..=to.to_be_bytes());
        for guard in iter {
            let (raw_rev, raw_keys) = guard.into_inner().map_err(io("reading the change log"))?;
            let rev = crate::codec::decode_revision(&raw_rev).map_err(corrupt)?;
            for key in decode_key_list(&raw_keys).map_err(corrupt)? {
                if !range.contains(&key) {
                    continue;
                }
                let raw = self
                    .versions
                    .get(history_key(&key, rev))
                    .map_err(io("reading the change log"))?
                    .ok_or_else(|| {
                        Error::backend(
                            "reading the change log",
                            format!("revision {rev} lists a key with no version at it"),
                        )
                    })?;
                let prev_kv = self.get_at(&key, rev - 1)?;
                let event = match decode_version(key.clone(), rev, &raw).map_err(corrupt)? {
                    Some(kv) => Event {
                        kind: EventKind::Put,
                        kv,
                        prev_kv,
                    },
                    None => Event {
                        kind: EventKind::Delete,
                        kv: tombstone(key, rev),
                        prev_kv,
                    },
                };
                events.push(event);
            }
            if events.len() >= max_events {
                return Ok((events, rev));
            }
        }
        Ok((events, to))
    }
}

fn push_live(
    out: &mut Vec<KeyValue>,
    (escaped, rev, raw): (Vec<u8>, Revision, fjall::Slice),
) -> Result<()> {
    let key = unescape_key(&escaped).map_err(corrupt)?;
    if let Some(kv) = decode_version(key, rev, &raw).map_err(corrupt)? {
        out.push(kv);
    }
    Ok(())
}

/// Everything on disk, as the committer sees it: it is the only writer, so what is on disk is
/// the latest state.
pub(crate) struct Latest<'a>(pub(crate) &'a History);

impl ReadView for Latest<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        self.0.get_at(key, Revision::MAX)
    }

    fn scan(&self, range: &KeyRange) -> Result<Vec<KeyValue>> {
        self.0.scan_at(range, Revision::MAX)
    }
}
