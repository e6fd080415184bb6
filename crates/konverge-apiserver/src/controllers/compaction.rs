//! Periodic compaction of the store, as kube-apiserver compacts etcd: every interval, history
//! older than the revision seen one interval ago is dropped. Watches and exact-version lists
//! older than that answer 410 Expired; everything newer is untouched.

use std::time::Duration;

use konverge_store::KvStore;

/// Compacts `store` every `interval` until the store closes.
pub async fn run(store: std::sync::Arc<dyn KvStore>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut previous: Option<i64> = None;
    loop {
        ticker.tick().await;
        let current = match store.current_revision().await {
            Ok(rev) => rev,
            Err(konverge_store::Error::Closed) => return,
            Err(err) => {
                tracing::warn!(error = %err, "reading the revision for compaction failed");
                continue;
            }
        };
        if let Some(target) = previous.filter(|p| *p > 1) {
            match store.compact(target).await {
                Ok(()) => tracing::debug!(revision = target, "compacted"),
                // Someone else (another API server on the same etcd) compacted further.
                Err(konverge_store::Error::Compacted { .. }) => {}
                Err(konverge_store::Error::Closed) => return,
                Err(err) => tracing::warn!(error = %err, revision = target, "compaction failed"),
            }
        }
        previous = Some(current);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use konverge_store::{KeyRange, MemStore, RangeRequest};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn compacts_to_the_revision_one_interval_old() {
        let store: Arc<dyn KvStore> = Arc::new(MemStore::new());
        let first = store
            .put(Bytes::from_static(b"k"), Bytes::from_static(b"1"))
            .await
            .expect("put");
        tokio::spawn(run(store.clone(), Duration::from_secs(300)));
        tokio::time::sleep(Duration::from_secs(301)).await;
        let mid = store
            .put(Bytes::from_static(b"k"), Bytes::from_static(b"2"))
            .await
            .expect("put");
        tokio::time::sleep(Duration::from_secs(300)).await;
        // The tick at 600 s compacted to the revision seen at 300 s: `first`.
        let old = store
            .range(
                RangeRequest::new(KeyRange::key(Bytes::from_static(b"k"))).at_revision(first - 1),
            )
            .await;
        assert!(
            matches!(old, Err(konverge_store::Error::Compacted { compact_revision }) if compact_revision == first)
        );
        let kept = store
            .range(RangeRequest::new(KeyRange::key(Bytes::from_static(b"k"))).at_revision(mid))
            .await
            .expect("newer history is kept");
        assert_eq!(kept.kvs[0].value, Bytes::from_static(b"2"));
    }
}
