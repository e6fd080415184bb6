//! Watch: the store's ordered, exactly-once change stream turned into Kubernetes watch
//! events, with selectors, initial events, bookmarks and expiry.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use konverge_store::{Event, EventKind, KeyRange, WatchRequest, WatchResponse};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::list::{ListOptions, selected};
use super::{Registry, decode, parse_rv, set_rv, target};
use crate::error::{ApiError, Result};
use crate::resources::ResourceType;

/// The options of a watch.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Selectors and the `resourceVersion` to start from.
    pub list: ListOptions,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds`: the watch ends after this long.
    pub timeout: Option<Duration>,
    /// How often to send a bookmark when bookmarks are allowed.
    pub bookmark_interval: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            list: ListOptions::default(),
            allow_bookmarks: false,
            send_initial_events: None,
            timeout: None,
            bookmark_interval: Duration::from_secs(10),
        }
    }
}

/// One event of a watch.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// An object appeared (was created, or began to match the selectors).
    Added(Value),
    /// An object changed.
    Modified(Value),
    /// An object went away (was deleted, or stopped matching the selectors).
    Deleted(Value),
    /// Everything up to this object's resourceVersion has been sent.
    Bookmark(Value),
    /// The watch failed; a `Status` follows and the stream ends.
    Error(Value),
}

impl WatchEvent {
    /// The event as it goes on the wire: `{"type": ..., "object": ...}`.
    pub fn to_json(&self) -> Value {
        let (kind, object) = match self {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(o) => ("BOOKMARK", o),
            WatchEvent::Error(o) => ("ERROR", o),
        };
        json!({"type": kind, "object": object})
    }

    /// The object the event carries.
    pub fn object(&self) -> &Value {
        match self {
            WatchEvent::Added(o)
            | WatchEvent::Modified(o)
            | WatchEvent::Deleted(o)
            | WatchEvent::Bookmark(o)
            | WatchEvent::Error(o) => o,
        }
    }
}

const BUFFER: usize = 256;

impl Registry {
    /// Starts a watch. Errors found before the first event (bad options, a resourceVersion
    /// ahead of the store) are returned here; a resourceVersion that compaction removed is
    /// an `ERROR` event with a 410 `Status`, as kube-apiserver sends it.
    pub async fn watch(
        &self,
        rt: Arc<ResourceType>,
        ns: Option<String>,
        opts: WatchOptions,
    ) -> Result<impl Stream<Item = WatchEvent> + Send + 'static + use<>> {
        if let Some(fields) = &opts.list.field_selector {
            super::list::check_field_selector(&rt, fields)?;
        }
        let rv = opts
            .list
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty());
        let initial = match (rv, opts.send_initial_events) {
            (_, Some(send)) => {
                if send && !opts.allow_bookmarks {
                    return Err(ApiError::invalid(
                        "ListOptions",
                        "meta.k8s.io",
                        "",
                        vec![crate::error::Cause::forbidden(
                            "sendInitialEvents",
                            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled and allowWatchBookmarks is set",
                        )],
                    ));
                }
                send
            }
            (None | Some("0"), None) => true,
            (Some(_), None) => false,
        };
        let current = self
            .store
            .current_revision()
            .await
            .map_err(|e| ApiError::from_store(e, target(&rt, "")))?;
        let start_after = match rv {
            Some(rv) if !initial => {
                let rv = parse_rv(rv)?;
                if rv > current {
                    return Err(ApiError::from_store(
                        konverge_store::Error::FutureRevision {
                            requested: rv,
                            current,
                        },
                        target(&rt, ""),
                    ));
                }
                rv
            }
            _ => current,
        };
        let (tx, rx) = mpsc::channel(BUFFER);
        let registry = self.clone();
        tokio::spawn(async move {
            let feed = Feed {
                registry,
                rt,
                ns,
                opts,
                tx,
            };
            feed.run(initial, start_after).await;
        });
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        }))
    }
}

struct Feed {
    registry: Registry,
    rt: Arc<ResourceType>,
    ns: Option<String>,
    opts: WatchOptions,
    tx: mpsc::Sender<WatchEvent>,
}

impl Feed {
    async fn send(&self, event: WatchEvent) -> bool {
        self.tx.send(event).await.is_ok()
    }

    fn bookmark(&self, rv: i64, initial_events_end: bool) -> WatchEvent {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        WatchEvent::Bookmark(json!({
            "kind": self.rt.kind,
            "apiVersion": self.rt.api_version(),
            "metadata": metadata,
        }))
    }

    fn error(err: &ApiError) -> WatchEvent {
        WatchEvent::Error(err.to_status())
    }

    async fn run(self, initial: bool, mut start_after: i64) {
        let deadline = self.opts.timeout.map(|t| tokio::time::Instant::now() + t);
        if initial {
            let list = ListOptions {
                limit: None,
                continue_token: None,
                resource_version: None,
                resource_version_match: None,
                ..self.opts.list.clone()
            };
            match self
                .registry
                .list(&self.rt, self.ns.as_deref(), &list)
                .await
            {
                Ok(listed) => {
                    start_after = listed.resource_version;
                    for obj in listed.items {
                        if !self.send(WatchEvent::Added(obj)).await {
                            return;
                        }
                    }
                    if self.opts.send_initial_events == Some(true)
                        && !self.send(self.bookmark(start_after, true)).await
                    {
                        return;
                    }
                }
                Err(err) => {
                    self.send(Self::error(&err)).await;
                    return;
                }
            }
        }
        let prefix = Bytes::from(self.rt.namespace_prefix(self.ns.as_deref()));
        let request = WatchRequest::new(KeyRange::Prefix(prefix))
            .from_revision(start_after + 1)
            .with_prev_kv();
        let mut stream = match self.registry.store.watch(request).await {
            Ok(stream) => stream,
            Err(err) => {
                self.send(Self::error(&self.watch_error(err, start_after)))
                    .await;
                return;
            }
        };
        let mut last_sent = start_after;
        let mut bookmarks = tokio::time::interval(self.opts.bookmark_interval);
        bookmarks.tick().await;
        loop {
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                message = stream.recv() => match message {
                    Some(Ok(WatchResponse::Events(events))) => {
                        for event in events {
                            let revision = event.revision();
                            match self.translate(event) {
                                Ok(Some(out)) => {
                                    if !self.send(out).await {
                                        return;
                                    }
                                }
                                Ok(None) => {}
                                Err(err) => {
                                    self.send(Self::error(&err)).await;
                                    return;
                                }
                            }
                            last_sent = last_sent.max(revision);
                        }
                    }
                    Some(Ok(WatchResponse::Progress(rev))) => {
                        if self.opts.allow_bookmarks && rev > last_sent {
                            last_sent = rev;
                            if !self.send(self.bookmark(rev, false)).await {
                                return;
                            }
                        }
                    }
                    Some(Err(err)) => {
                        self.send(Self::error(&self.watch_error(err, last_sent))).await;
                        return;
                    }
                    None => return,
                },
                _ = bookmarks.tick(), if self.opts.allow_bookmarks => stream.request_progress(),
                () = timeout => return,
                () = self.tx.closed() => return,
            }
        }
    }

    fn watch_error(&self, err: konverge_store::Error, rv: i64) -> ApiError {
        match err {
            konverge_store::Error::Compacted { compact_revision } => ApiError::expired(format!(
                "too old resource version: {rv} ({compact_revision})"
            )),
            other => ApiError::from_store(other, target(&self.rt, "")),
        }
    }

    /// One store event as a watch event of this watch, or `None` if the selectors hide it.
    fn translate(&self, event: Event) -> Result<Option<WatchEvent>> {
        let opts = &self.opts.list;
        let old = match &event.prev_kv {
            Some(prev) => Some(decode(prev)?),
            None => None,
        };
        let old_selected = old.as_ref().is_some_and(|o| selected(&self.rt, opts, o));
        match event.kind {
            EventKind::Put => {
                let new = decode(&event.kv)?;
                let new_selected = selected(&self.rt, opts, &new);
                Ok(match (old.is_some(), old_selected, new_selected) {
                    (true, true, true) => Some(WatchEvent::Modified(new)),
                    (_, false, true) => Some(WatchEvent::Added(new)),
                    (true, true, false) => Some(WatchEvent::Deleted(new)),
                    _ => None,
                })
            }
            EventKind::Delete => Ok(match old {
                Some(mut gone) if old_selected => {
                    set_rv(&mut gone, event.kv.mod_revision);
                    Some(WatchEvent::Deleted(gone))
                }
                _ => None,
            }),
        }
    }
}
