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
        let latest = *current.borrow_and_update();
        progress_pending |= sender.take_progress_request();
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
