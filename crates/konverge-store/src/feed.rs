//! Watches served from a backend's own change log.
//!
//! Backends that keep their history themselves ([`MemStore`](crate::MemStore), the disk
//! store) implement [`ChangeLog`] and publish their current revision on a
//! [`tokio::sync::watch`] channel after every commit. [`spawn_log_watch`] then runs one task
//! per watch that *pulls* changes from the log from its own cursor: it can never skip or repeat
//! a revision, a slow reader only delays itself (the log, not a per-watcher queue, holds what it
//! has not read yet), and falling behind a compaction is noticed on the next read.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::watch::{WatchSender, WatchStream, channel};
use crate::{Error, Event, KeyRange, Result, Revision, WatchResponse};

/// How many messages a watch buffers before its task waits for the reader.
pub const WATCH_BUFFER: usize = 128;

/// How many events one read of the change log gathers before handing them to the reader.
pub const EVENTS_PER_READ: usize = 1024;

/// A backend's history of committed changes, in revision order.
#[async_trait]
pub trait ChangeLog: Send + Sync + 'static {
    /// The changes committed at revisions `from..=to` to keys in `range`, in revision order
    /// and, within a revision, in the order the transaction made them. Reading stops at the end
    /// of the first revision at which `max_events` events have been gathered; the second value
    /// is the last revision read (`to` when nothing stopped it early).
    ///
    /// Fails with [`Error::Compacted`] when `from` is older than the compaction point, checked
    /// so that a compaction running concurrently can never produce a silent gap.
    async fn read_changes(
        &self,
        from: Revision,
        to: Revision,
        range: &KeyRange,
        max_events: usize,
    ) -> Result<(Vec<Event>, Revision)>;
}

/// Starts a watch on `log` that delivers every change from `start` onwards. `current` carries
/// the store's latest committed revision; the watch ends with [`Error::Closed`] when its sender
/// is dropped (the store closed).
pub fn spawn_log_watch(
    log: Arc<dyn ChangeLog>,
    current: watch::Receiver<Revision>,
    range: KeyRange,
    start: Revision,
    prev_kv: bool,
) -> WatchStream {
    let (sender, stream) = channel(WATCH_BUFFER);
    tokio::spawn(run_log_watch(log, current, range, start, prev_kv, sender));
    stream
}

async fn run_log_watch(
    log: Arc<dyn ChangeLog>,
    mut current: watch::Receiver<Revision>,
    range: KeyRange,
    mut next: Revision,
    prev_kv: bool,
    sender: WatchSender,
) {
    let mut progress_pending = false;
    loop {
        // A request taken before `latest` is read was made when the store was at most at
        // `latest`: it is answered as soon as everything up to `latest` is delivered, even if
        // newer revisions arrived meanwhile — under a steady write load the watch is never
        // idle, and a request answered only when idle would wait for as long as the load lasts.
        progress_pending |= sender.take_progress_request();
        let latest = *current.borrow_and_update();
        if next <= latest {
            match log
                .read_changes(next, latest, &range, EVENTS_PER_READ)
                .await
            {
                Ok((events, last)) => {
                    next = last + 1;
                    if !events.is_empty() {
                        let events = events
                            .into_iter()
                            .map(|e| crate::mvcc::strip_prev(e, prev_kv))
                            .collect();
                        if !sender.send(Ok(WatchResponse::Events(events))).await {
                            return;
                        }
                    }
                    if progress_pending && last >= latest {
                        progress_pending = false;
                        if !sender.send(Ok(WatchResponse::Progress(last))).await {
                            return;
                        }
                    }
                }
                Err(err) => {
                    sender.send(Err(err)).await;
                    return;
                }
            }
            continue;
        }
        if progress_pending {
            progress_pending = false;
            if !sender.send(Ok(WatchResponse::Progress(latest))).await {
                return;
            }
            continue;
        }
        tokio::select! {
            changed = current.changed() => if changed.is_err() {
                sender.send(Err(Error::Closed)).await;
                return;
            },
            () = sender.progress_requested() => {}
            () = sender.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use bytes::Bytes;

    use crate::{KeyRange, KvStore, MemStore, WatchRequest, WatchResponse};

    /// Under a steady stream of writes the watch is never idle; progress requests are still
    /// answered promptly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn progress_is_answered_under_a_steady_write_load() {
        let store = Arc::new(MemStore::new());
        let mut stream = store
            .watch(WatchRequest::new(KeyRange::prefix(Bytes::from_static(
                b"quiet/",
            ))))
            .await
            .expect("watch");
        let stop = Arc::new(AtomicBool::new(false));
        // A bounded writer that yields after every put: the load is steady, but it cannot
        // starve the runtime or grow the (uncompacted) history without bound.
        let writer = {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                for i in 0..200_000u64 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    store
                        .put(
                            Bytes::from(format!("busy/{}", i % 64)),
                            Bytes::from_static(b"v"),
                        )
                        .await
                        .expect("put");
                    tokio::task::yield_now().await;
                }
            })
        };
        for _ in 0..20 {
            let before = store.current_revision().await.expect("revision");
            stream.request_progress();
            match tokio::time::timeout(Duration::from_secs(10), stream.recv()).await {
                Ok(Some(Ok(WatchResponse::Progress(rev)))) => assert!(rev >= before),
                other => panic!("expected a progress notification, got {other:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.await.expect("writer");
    }
}
