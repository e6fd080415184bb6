//! Watch streams: what a watch delivers and the channel between a backend and its caller.
//!
//! A backend creates a pair with [`channel`], keeps the [`WatchSender`] in a task that feeds
//! events, and hands the [`WatchStream`] to the caller. Dropping the stream cancels the watch:
//! the sender sees [`WatchSender::closed`] and the backend releases its resources.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::{Notify, mpsc};

use crate::{Event, Result, Revision};

/// One message of a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchResponse {
    /// Changes, in revision order. A revision's changes are never split across messages.
    Events(Vec<Event>),
    /// Every change up to and including this revision has been delivered. Sent once per
    /// [`WatchStream::request_progress`] call (calls made while one is pending coalesce).
    Progress(Revision),
}

/// The receiving end of a watch: a [`Stream`] of [`WatchResponse`]s.
///
/// Events arrive exactly once, in revision order, with no revision skipped. An `Err` item
/// ends the stream: [`Error::Compacted`](crate::Error::Compacted) when the watch asked for (or
/// fell behind to) history that compaction removed, [`Error::Closed`](crate::Error::Closed)
/// when the store shut down, or a backend failure.
#[derive(Debug)]
pub struct WatchStream {
    rx: mpsc::Receiver<Result<WatchResponse>>,
    progress: Arc<ProgressRequest>,
}

#[derive(Debug, Default)]
struct ProgressRequest {
    pending: AtomicBool,
    notify: Notify,
}

impl WatchStream {
    /// Asks for a [`WatchResponse::Progress`] once every change up to the store's current
    /// revision has been delivered on this stream.
    pub fn request_progress(&self) {
        self.progress.pending.store(true, Ordering::Release);
        self.progress.notify.notify_one();
    }

    /// The next message, or `None` once the watch has ended.
    pub async fn recv(&mut self) -> Option<Result<WatchResponse>> {
        self.rx.recv().await
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchResponse>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// The backend's end of a watch.
#[derive(Debug)]
pub struct WatchSender {
    tx: mpsc::Sender<Result<WatchResponse>>,
    progress: Arc<ProgressRequest>,
}

impl WatchSender {
    /// Sends a message, waiting while the caller's buffer is full. Returns `false` when the
    /// caller has dropped the stream.
    pub async fn send(&self, message: Result<WatchResponse>) -> bool {
        self.tx.send(message).await.is_ok()
    }

    /// Takes a pending progress request, if the caller made one.
    pub fn take_progress_request(&self) -> bool {
        self.progress.pending.swap(false, Ordering::AcqRel)
    }

    /// Waits until the caller makes a progress request (it stays pending until taken).
    pub async fn progress_requested(&self) {
        loop {
            if self.progress.pending.load(Ordering::Acquire) {
                return;
            }
            self.progress.notify.notified().await;
        }
    }

    /// Waits until the caller drops the stream.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Whether the caller has dropped the stream.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// Creates a watch with room for `capacity` undelivered messages; a full buffer makes the
/// backend wait, so a slow reader slows only its own watch.
pub fn channel(capacity: usize) -> (WatchSender, WatchStream) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let progress = Arc::new(ProgressRequest::default());
    (
        WatchSender {
            tx,
            progress: progress.clone(),
        },
        WatchStream { rx, progress },
    )
}
