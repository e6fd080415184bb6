//! Watches: one task per watch owns an etcd watch stream and forwards it into a
//! [`konverge_store::watch::channel`] pair.
//!
//! # Progress notifications
//!
//! [`WatchResponse::Progress`]`(r)` promises that every change up to `r` has been delivered.
//! etcd's own answer to a progress request keeps that promise only from etcd v3.4.31 and
//! v3.5.13 on (etcd issues #15220 and #17507): older servers answer at once with their current
//! revision, ahead of events still queued for the watch, and for a watch that is replaying
//! history ("unsynced") ahead of *all* of them. So the task answers progress requests in one of
//! two ways ([`ProgressMode`]):
//!
//! - [`ProgressMode::Etcd`], on servers with the fixes: it forwards the request to etcd and
//!   translates etcd's notification (no events, header revision `r`) into `Progress(r)`.
//! - [`ProgressMode::Probe`], on older servers: it reads the current revision `r` and, unless
//!   the watch has already delivered everything up to `r`, opens a short-lived *probe* watch
//!   on the whole of etcd from the first revision the watch has not vouched for. Every etcd
//!   revision after 1 changed at least one key, so the probe is sure to reach `r`; on its way
//!   it notes the last revision up to `r` that touched the watched range. Once the watch itself
//!   has delivered that revision (events of one watch arrive in order), `Progress(r)` is true.
//!   The probe costs one linearizable read plus a replay of etcd's changes since the watch's
//!   last event or progress notification; a caller that asks for progress regularly keeps that
//!   window short.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use etcd_client::{EventType, GetOptions, KvClient, WatchClient, WatchOptions};
use konverge_store::watch::{WatchSender, channel};
use konverge_store::{
    Error, Event, EventKind, KeyRange, KeyValue, Result, Revision, WatchRequest, WatchResponse,
    WatchStream,
};

use crate::keys::Keyspace;

/// How many messages a watch buffers before its task waits for the reader (and, behind it,
/// etcd's stream applies flow control).
const WATCH_BUFFER: usize = 128;

/// The first etcd versions whose progress notifications are ordered with the events of the
/// watch (etcd-io/etcd#15237 and #17557): v3.4.31 and v3.5.13; every v3.6 and later has both.
const FIXED_PROGRESS: [(u64, u64, u64); 2] = [(3, 4, 31), (3, 5, 13)];

/// How a watch answers [`WatchStream::request_progress`]; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProgressMode {
    /// Ask etcd (its notifications are ordered with the watch's events).
    Etcd,
    /// Verify with a probe watch (etcd's notifications may overtake events).
    Probe,
}

impl ProgressMode {
    /// The mode for an etcd server of `version` (as etcd's status reports it, e.g. `3.4.23`);
    /// [`Probe`](Self::Probe) for anything unrecognised.
    pub(crate) fn for_version(version: &str) -> Self {
        let mut parts = version
            .trim_start_matches('v')
            .split(['.', '-', '+'])
            .map(|part| part.parse::<u64>().ok());
        let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
            (parts.next(), parts.next(), parts.next())
        else {
            return ProgressMode::Probe;
        };
        let fixed = match (major, minor) {
            (3, 4) | (3, 5) => FIXED_PROGRESS
                .iter()
                .any(|&(ma, mi, pa)| (ma, mi) == (major, minor) && patch >= pa),
            (3, minor) => minor > 5,
            (major, _) => major > 3,
        };
        if fixed {
            ProgressMode::Etcd
        } else {
            ProgressMode::Probe
        }
    }
}

/// What a watch task needs from the store.
#[derive(Clone)]
pub(crate) struct WatchContext {
    pub(crate) kv: KvClient,
    pub(crate) watch: WatchClient,
    pub(crate) keyspace: Keyspace,
    pub(crate) progress: ProgressMode,
}

/// Opens an etcd watch for `req` from revision `start` (which the caller checked is at most
/// one past the current revision), waits until etcd has created it, and spawns the task that
/// forwards it.
pub(crate) async fn start(
    ctx: WatchContext,
    req: &WatchRequest,
    start: Revision,
) -> Result<WatchStream> {
    let (key, range_end) = ctx.keyspace.range(&req.range);
    let mut opts = WatchOptions::new().with_start_revision(start);
    if !range_end.is_empty() {
        opts = opts.with_range(range_end);
    }
    if req.prev_kv {
        opts = opts.with_prev_key();
    }
    let mut stream = ctx
        .watch
        .clone()
        .watch(key, Some(opts))
        .await
        .map_err(|err| Error::backend("etcd watch failed", err))?;
    let created = stream
        .message()
        .await
        .map_err(|err| Error::backend("etcd watch failed", err))?
        .ok_or_else(|| backend("etcd closed the watch stream before creating the watch"))?;
    if created.compact_revision() != 0 {
        return Err(Error::Compacted {
            compact_revision: created.compact_revision(),
        });
    }
    if !created.created() || created.canceled() {
        return Err(backend(format!(
            "etcd refused the watch: {}",
            created.cancel_reason()
        )));
    }
    let (sender, out) = channel(WATCH_BUFFER);
    let forward = Forward {
        ctx,
        range: req.range.clone(),
        prev_kv: req.prev_kv,
        watch_id: created.watch_id(),
        sender,
        // etcd's revision 1 is its empty initial state: no change is ever stamped with it.
        delivered: (start - 1).max(1),
    };
    tokio::spawn(forward.run(stream));
    Ok(out)
}

/// A running probe: the revision to report and the last revision up to it that touched the
/// watched range.
type Probe = Pin<Box<dyn Future<Output = Result<(Revision, Option<Revision>)>> + Send>>;

/// The state of one forwarding task.
struct Forward {
    ctx: WatchContext,
    range: KeyRange,
    prev_kv: bool,
    watch_id: i64,
    sender: WatchSender,
    /// Every change to the range up to this revision has been delivered.
    delivered: Revision,
}

/// Where the task is with a progress request.
enum Progress {
    /// None in hand.
    Idle,
    /// [`ProgressMode::Etcd`]: etcd was asked; its notification is awaited.
    Asked,
    /// [`ProgressMode::Probe`]: the probe runs.
    Probing(Probe),
    /// [`ProgressMode::Probe`]: the probe is done; `revision` can be reported once the watch
    /// has delivered `owed`.
    Owed { revision: Revision, owed: Revision },
}

impl Forward {
    async fn run(mut self, mut stream: etcd_client::WatchStream) {
        if let Err(err) = self.forward(&mut stream).await {
            self.sender.send(Err(err)).await;
            return;
        }
        // The caller dropped the stream: cancel the etcd watch (dropping `stream` right after
        // closes the gRPC stream too, so a failure to send the cancel changes nothing).
        let _ = stream.cancel(self.watch_id).await;
    }

    /// Forwards until the caller drops the stream (`Ok`) or the watch fails (`Err`, to be
    /// delivered as the last item).
    async fn forward(&mut self, stream: &mut etcd_client::WatchStream) -> Result<()> {
        let mut progress = Progress::Idle;
        loop {
            if let Progress::Owed { revision, owed } = progress
                && self.delivered >= owed
            {
                progress = Progress::Idle;
                if !self.report_progress(revision).await {
                    return Ok(());
                }
                continue;
            }
            let idle = matches!(progress, Progress::Idle);
            tokio::select! {
                biased;
                () = self.sender.closed() => return Ok(()),
                () = self.sender.progress_requested(), if idle => {
                    self.sender.take_progress_request();
                    progress = match self.ctx.progress {
                        ProgressMode::Etcd => {
                            stream.request_progress().await.map_err(|err| {
                                Error::backend("etcd watch progress request failed", err)
                            })?;
                            Progress::Asked
                        }
                        ProgressMode::Probe => Progress::Probing(Box::pin(probe(
                            self.ctx.clone(),
                            self.range.clone(),
                            self.delivered,
                        ))),
                    };
                }
                result = poll_probe(&mut progress) => {
                    let (revision, owed) = result?;
                    progress = Progress::Owed { revision, owed: owed.unwrap_or(0) };
                }
                message = stream.message() => {
                    let resp = message
                        .map_err(|err| Error::backend("etcd watch failed", err))?
                        .ok_or_else(|| backend("etcd closed the watch stream"))?;
                    if !self.handle(&resp, &mut progress).await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Handles one etcd watch response; `Ok(false)` when the caller has gone.
    async fn handle(
        &mut self,
        resp: &etcd_client::WatchResponse,
        progress: &mut Progress,
    ) -> Result<bool> {
        if resp.compact_revision() != 0 {
            return Err(Error::Compacted {
                compact_revision: resp.compact_revision(),
            });
        }
        if resp.canceled() {
            return Err(backend(format!(
                "etcd cancelled the watch: {}",
                resp.cancel_reason()
            )));
        }
        if !resp.events().is_empty() {
            let events = resp
                .events()
                .iter()
                .map(|event| self.event(event))
                .collect::<Result<Vec<_>>>()?;
            let last = events.last().map_or(0, Event::revision);
            if !self.sender.send(Ok(WatchResponse::Events(events))).await {
                return Ok(false);
            }
            self.delivered = self.delivered.max(last);
            return Ok(true);
        }
        if resp.created() {
            return Ok(true);
        }
        // No events, not a create or cancel: a progress notification. Only those asked for
        // count (and only in `ProgressMode::Etcd`, the only mode that asks).
        if matches!(progress, Progress::Asked) {
            *progress = Progress::Idle;
            let revision = resp
                .header()
                .map(|h| h.revision())
                .ok_or_else(|| backend("etcd sent a progress notification without a header"))?;
            return Ok(self.report_progress(revision).await);
        }
        Ok(true)
    }

    /// Sends `Progress` for `revision` (or for what the watch has delivered, if later);
    /// `false` when the caller has gone.
    async fn report_progress(&mut self, revision: Revision) -> bool {
        let revision = revision.max(self.delivered);
        if !self
            .sender
            .send(Ok(WatchResponse::Progress(revision)))
            .await
        {
            return false;
        }
        self.delivered = revision;
        true
    }

    fn event(&self, event: &etcd_client::Event) -> Result<Event> {
        let kv = event
            .kv()
            .ok_or_else(|| backend("etcd sent a watch event without a key"))?;
        let prev_kv = match event.prev_kv() {
            Some(prev) if self.prev_kv => Some(self.ctx.keyspace.kv(prev)?),
            _ => None,
        };
        Ok(match event.event_type() {
            EventType::Put => Event {
                kind: EventKind::Put,
                kv: self.ctx.keyspace.kv(kv)?,
                prev_kv,
            },
            EventType::Delete => Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key: self.ctx.keyspace.strip(kv.key())?,
                    value: Bytes::new(),
                    create_revision: 0,
                    mod_revision: kv.mod_revision(),
                    version: 0,
                },
                prev_kv,
            },
        })
    }
}

/// Waits for the running probe, if any (never resolves otherwise).
async fn poll_probe(progress: &mut Progress) -> Result<(Revision, Option<Revision>)> {
    match progress {
        Progress::Probing(probe) => probe.await,
        _ => std::future::pending().await,
    }
}

/// The probe of [`ProgressMode::Probe`]: reads the current revision `r` and, if the watch
/// has not vouched for it yet (`delivered < r`), replays etcd's changes after `delivered`
/// up to `r`. Returns `r` and the last revision up to it that changed a key in `range`.
async fn probe(
    mut ctx: WatchContext,
    range: KeyRange,
    delivered: Revision,
) -> Result<(Revision, Option<Revision>)> {
    let resp = ctx
        .kv
        .get(
            ctx.keyspace.key(b"\0"),
            Some(GetOptions::new().with_count_only()),
        )
        .await
        .map_err(|err| Error::backend("etcd range (progress probe) failed", err))?;
    let revision = resp
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| backend("etcd answered without a response header"))?;
    if delivered >= revision {
        return Ok((revision, None));
    }
    let mut owed = None;
    let mut from = delivered + 1;
    'watch: loop {
        // The whole of etcd, not just the store's keyspace: only that is sure to have a change
        // at `revision`.
        let opts = WatchOptions::new()
            .with_range(b"\0".to_vec())
            .with_start_revision(from);
        let mut stream = ctx
            .watch
            .watch(b"\0".to_vec(), Some(opts))
            .await
            .map_err(|err| Error::backend("etcd watch (progress probe) failed", err))?;
        loop {
            let resp = stream
                .message()
                .await
                .map_err(|err| Error::backend("etcd watch (progress probe) failed", err))?
                .ok_or_else(|| backend("etcd closed the progress probe's watch stream"))?;
            if resp.compact_revision() != 0 {
                // History before the compaction point is gone; a watch that still owed
                // events from it fails with `Compacted` itself.
                from = resp.compact_revision();
                continue 'watch;
            }
            if resp.canceled() {
                return Err(backend(format!(
                    "etcd cancelled the progress probe: {}",
                    resp.cancel_reason()
                )));
            }
            let mut reached = false;
            for event in resp.events() {
                let Some(kv) = event.kv() else { continue };
                let event_revision = kv.mod_revision();
                if event_revision > revision {
                    reached = true;
                    break;
                }
                reached |= event_revision == revision;
                if ctx.keyspace.contains(&range, kv.key()) {
                    owed = Some(event_revision);
                }
            }
            // A revision's events arrive in one response, so by now every change up to
            // `revision` has been seen.
            if reached {
                return Ok((revision, owed));
            }
        }
    }
}

fn backend(message: impl Into<String>) -> Error {
    Error::Backend {
        message: message.into(),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_mode_follows_the_fixed_versions() {
        for fixed in [
            "3.4.31", "3.4.40", "3.5.13", "3.5.21", "3.6.0", "v3.6.4", "4.0.0",
        ] {
            assert_eq!(
                ProgressMode::for_version(fixed),
                ProgressMode::Etcd,
                "{fixed}"
            );
        }
        for old in [
            "3.4.23", "3.4.30", "3.5.0", "3.5.12", "3.3.27", "2.3.8", "", "x",
        ] {
            assert_eq!(ProgressMode::for_version(old), ProgressMode::Probe, "{old}");
        }
    }
}
