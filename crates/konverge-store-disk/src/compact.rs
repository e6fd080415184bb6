//! Physical compaction: removing versions and change-log entries that no read can reach.

use fjall::Keyspace;
use konverge_store::{Error, Result, Revision};

use crate::Shared;
use crate::codec::{REV_LEN, split_history_key};

/// Deletions written per batch.
const CHUNK: usize = 4096;

/// Removes, for every key, the versions before `revision` except the newest of them when it
/// is a live value (reads at `revision` see it), and the change-log entries before
/// `revision`. Reads at or after `revision` are unaffected at every step; deletions need not
/// be durable, as leftovers are unreachable and the next compaction removes them.
pub(crate) fn remove_history_before(shared: &Shared, revision: Revision) -> Result<()> {
    let fail = |e: fjall::Error| Error::backend("compacting history", e);
    let mut doomed: Vec<fjall::Slice> = Vec::new();
    // The newest version seen so far that is older than `revision`, for the key being walked:
    // its full history key, and whether it is a live value.
    let mut older: Option<(fjall::Slice, bool)> = None;
    for guard in shared.history.versions.iter() {
        let (raw_key, raw_value) = guard.into_inner().map_err(fail)?;
        let (escaped, rev) =
            split_history_key(&raw_key).map_err(|e| Error::backend("compacting history", e))?;
        if let Some((prev, live)) = older.take() {
            let same_key = prev.len() >= escaped.len() && prev[..prev.len() - REV_LEN] == *escaped;
            let superseded = same_key && rev < revision;
            if superseded || !live {
                doomed.push(prev);
            }
        }
        if rev < revision {
            older = Some((raw_key, raw_value.first() == Some(&1)));
        }
        if doomed.len() >= CHUNK {
            flush(shared, &shared.history.versions, &mut doomed)?;
        }
    }
    if let Some((prev, false)) = older {
        doomed.push(prev);
    }
    flush(shared, &shared.history.versions, &mut doomed)?;

    for guard in shared.history.changes.range(..revision.to_be_bytes()) {
        doomed.push(guard.key().map_err(fail)?);
        if doomed.len() >= CHUNK {
            flush(shared, &shared.history.changes, &mut doomed)?;
        }
    }
    flush(shared, &shared.history.changes, &mut doomed)
}

fn flush(shared: &Shared, keyspace: &Keyspace, doomed: &mut Vec<fjall::Slice>) -> Result<()> {
    if doomed.is_empty() {
        return Ok(());
    }
    let mut write = shared.db.batch();
    for key in doomed.drain(..) {
        write.remove(keyspace, key);
    }
    write
        .commit()
        .map_err(|e| Error::backend("compacting history", e))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use konverge_store::{KeyRange, KvStore, RangeRequest};

    use super::*;
    use crate::DiskStore;

    fn count(keyspace: &Keyspace) -> usize {
        keyspace.iter().count()
    }

    #[tokio::test]
    async fn removes_exactly_the_unreachable_history() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = DiskStore::open(dir.path()).expect("open");
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        for v in ["1", "2", "3"] {
            store.put(b("a"), b(v)).await.expect("put");
        }
        store.put(b("b"), b("1")).await.expect("put");
        store.delete(b("b")).await.expect("delete");
        let last = store.put(b("c"), b("1")).await.expect("put");
        assert_eq!(count(&store.shared.history.versions), 6);
        assert_eq!(count(&store.shared.history.changes), 6);

        store.compact(last).await.expect("compact");
        // The background pass may still be running; this pass removes the same set.
        remove_history_before(&store.shared, last).expect("remove");

        // a keeps its newest version, b (deleted before the point) is gone, c is at the point.
        assert_eq!(count(&store.shared.history.versions), 2);
        assert_eq!(count(&store.shared.history.changes), 1);
        let kvs = store
            .range(RangeRequest::new(KeyRange::prefix(Bytes::new())).at_revision(last))
            .await
            .expect("range")
            .kvs;
        let seen: Vec<_> = kvs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone(), kv.version))
            .collect();
        assert_eq!(seen, vec![(b("a"), b("3"), 3), (b("c"), b("1"), 1)]);
    }
}
