//! Periodic compaction of the store, as kube-apiserver compacts etcd. Every interval the
//! compactor writes the `compact_rev_key` key (its value the revision compacted to, its
//! version a logical clock shared by every server on one store), then drops the history older
//! than the revision of its previous write, one interval ago. Watches and exact-version lists
//! older than that answer 410 Expired; everything newer is untouched.
//!
//! The write moves the revision on even when nothing else is written, so an idle cluster's
//! old `continue` tokens and resourceVersions expire as a cluster's do. When several servers
//! share a store, the write is a compare-and-swap on the key's version: one compacts per
//! interval, the others learn the clock and try again an interval later.

use std::time::Duration;

use bytes::Bytes;
use konverge_store::{Compare, CompareOp, CompareTarget, KvStore, Txn, TxnOp, TxnOpResponse};

/// The key whose version is the compactors' shared clock (kube-apiserver's name).
pub const COMPACT_REV_KEY: &str = "compact_rev_key";

/// Compacts `store` every `interval` until the store closes.
pub async fn run(store: std::sync::Arc<dyn KvStore>, interval: Duration) {
    let mut clock = Clock::default();
    loop {
        tokio::time::sleep(interval).await;
        match clock.tick(store.as_ref()).await {
            Ok(()) => {}
            Err(konverge_store::Error::Closed) => return,
            Err(err) => tracing::warn!(error = %err, "compaction failed"),
        }
    }
}

/// What one compactor knows: the shared clock's value it expects, and the revision of its
/// own last write (0 before the first, when nothing is compacted).
#[derive(Debug, Default, Clone, Copy)]
struct Clock {
    version: i64,
    revision: i64,
}

impl Clock {
    async fn tick(&mut self, store: &dyn KvStore) -> konverge_store::Result<()> {
        let key = Bytes::from_static(COMPACT_REV_KEY.as_bytes());
        let txn = Txn::new()
            .when([Compare {
                key: key.clone(),
                target: CompareTarget::Version(self.version),
                op: CompareOp::Equal,
            }])
            .and_then([TxnOp::put(key.clone(), self.revision.to_string())])
            .or_else([TxnOp::get(key)]);
        let response = store.txn(txn).await?;
        if !response.succeeded {
            // Another server ticked the clock: follow it, and try again next interval.
            if let Some(TxnOpResponse::Range(read)) = response.responses.first()
                && let Some(kv) = read.kvs.first()
            {
                self.version = kv.version;
            }
            self.revision = response.revision;
            return Ok(());
        }
        let target = std::mem::replace(&mut self.revision, response.revision);
        self.version += 1;
        if target == 0 {
            return Ok(());
        }
        match store.compact(target).await {
            Ok(()) => tracing::debug!(revision = target, "compacted"),
            // Compacted further already (by hand, or by a server with another clock).
            Err(konverge_store::Error::Compacted { .. }) => {}
            Err(err) => return Err(err),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use konverge_store::{KeyRange, MemStore, RangeRequest};

    use super::*;

    /// The compactors' clock key, as stored.
    async fn clock_key(store: &dyn KvStore) -> konverge_store::KeyValue {
        store
            .get(Bytes::from_static(COMPACT_REV_KEY.as_bytes()))
            .await
            .expect("get")
            .expect("the clock key")
    }

    fn at(key: &'static [u8], revision: i64) -> RangeRequest {
        RangeRequest::new(KeyRange::key(Bytes::from_static(key))).at_revision(revision)
    }

    #[tokio::test(start_paused = true)]
    async fn history_moves_on_and_is_compacted_one_interval_late() {
        let store: Arc<dyn KvStore> = Arc::new(MemStore::new());
        let first = store
            .put(Bytes::from_static(b"k"), Bytes::from_static(b"1"))
            .await
            .expect("put");
        tokio::spawn(run(store.clone(), Duration::from_secs(300)));
        // The first tick writes the clock (the revision moves on with nothing else written)
        // and compacts nothing.
        tokio::time::sleep(Duration::from_secs(301)).await;
        let ticked = store.current_revision().await.expect("revision");
        assert_eq!(ticked, first + 1);
        store
            .range(at(b"k", first))
            .await
            .expect("nothing compacted yet");
        let mid = store
            .put(Bytes::from_static(b"k"), Bytes::from_static(b"2"))
            .await
            .expect("put");
        // The second compacts to the first tick's revision: what came before is gone, even
        // on a store nobody else writes to; what came after is kept.
        tokio::time::sleep(Duration::from_secs(300)).await;
        let old = store.range(at(b"k", first)).await;
        assert!(
            matches!(old, Err(konverge_store::Error::Compacted { compact_revision }) if compact_revision == ticked),
            "{old:?}"
        );
        let kept = store
            .range(at(b"k", mid))
            .await
            .expect("newer history is kept");
        assert_eq!(kept.kvs[0].value, Bytes::from_static(b"2"));
        let clock = clock_key(store.as_ref()).await;
        assert_eq!(clock.version, 2);
        assert_eq!(clock.value, Bytes::from(ticked.to_string()));
    }

    #[tokio::test]
    async fn servers_sharing_a_store_take_turns() {
        let store = MemStore::new();
        let (mut one, mut other) = (Clock::default(), Clock::default());
        one.tick(&store).await.expect("tick");
        // The other finds the clock moved: it follows and writes nothing.
        let before = store.current_revision().await.expect("revision");
        other.tick(&store).await.expect("tick");
        assert_eq!(store.current_revision().await.expect("revision"), before);
        assert_eq!(other.version, 1);
        // Next interval, whoever comes first ticks it, once.
        other.tick(&store).await.expect("tick");
        one.tick(&store).await.expect("tick");
        assert_eq!(clock_key(&store).await.version, 2);
        assert_eq!(one.version, 2);
    }
}
