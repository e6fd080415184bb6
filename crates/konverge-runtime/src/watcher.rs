//! The watcher: kube-runtime's, so there is one watcher in the workspace and a kube-rs user's
//! [`watcher::Config`](Config) works here unchanged.
//!
//! [`watcher`] lists (in pages, or as a streaming list with
//! [`Config::streaming_lists`]), then watches from the list's resourceVersion with bookmarks,
//! resumes a watch the server or the network ended, and relists after 410 Expired. Every
//! (re)list is framed by [`Event::Init`] … [`Event::InitDone`], so a consumer can replace its
//! state wholesale and notice deletions it missed while disconnected. Over an
//! `Api<PartialObjectMeta<K>>` only metadata crosses the wire.
//!
//! What konverge adds, inside the runtime's informers and triggers: kube-runtime's default
//! backoff between failures (exponential, with jitter, reset by a success), a warning per
//! failure, and the `konverge_watcher_restarts_total` (failures the watcher restarted after)
//! and `konverge_watcher_relists_total` (lists after the first) counters.

use std::fmt::Debug;

use futures::{Stream, StreamExt};
use kube::runtime::WatchStreamExt;
use prometheus_client::metrics::counter::Counter;

#[doc(inline)]
pub use kube::runtime::watcher::{
    Config, Error, Event, InitialListStrategy, ListSemantic, watcher,
};

/// Counters the watcher bumps (restarts and relists), labelled with the resource.
#[derive(Clone, Debug, Default)]
pub(crate) struct WatcherMetrics {
    restarts: Option<Counter>,
    relists: Option<Counter>,
}

impl WatcherMetrics {
    pub(crate) fn new(metrics: &crate::metrics::Metrics, labels: crate::metrics::Labels) -> Self {
        WatcherMetrics {
            restarts: Some(metrics.watcher_restarts.get_or_create(&labels).clone()),
            relists: Some(metrics.watcher_relists.get_or_create(&labels).clone()),
        }
    }
}

fn bump(counter: &Option<Counter>) {
    if let Some(c) = counter {
        c.inc();
    }
}

/// A watch stream as the runtime consumes it: backed off after failures, which are logged
/// and counted, and relists counted. It never ends.
pub(crate) fn instrument<K, S>(
    stream: S,
    resource: String,
    metrics: WatcherMetrics,
) -> impl Stream<Item = Result<Event<K>, Error>> + Send
where
    K: Send,
    S: Stream<Item = Result<Event<K>, Error>> + Send,
{
    let mut listed = false;
    stream.default_backoff().inspect(move |item| match item {
        Ok(Event::Init) => {
            if listed {
                bump(&metrics.relists);
            }
            listed = true;
        }
        Ok(_) => {}
        Err(error) => {
            bump(&metrics.restarts);
            tracing::warn!(%resource, %error, "watcher error; retrying with backoff");
        }
    })
}
