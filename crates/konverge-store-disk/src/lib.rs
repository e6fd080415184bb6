//! [`DiskStore`]: konverge's embedded, crash-safe [`KvStore`] on [fjall], and the API
//! server's default store.
//!
//! # Where to start
//!
//! - [`DiskStore::open`] opens (or creates) a store in a directory.
//! - `commit` holds the group committer: the one thread that orders transactions and makes
//!   each batch of them durable with one fsync before anyone sees it.
//! - `history` reads versions and the change log; `codec` says how they are laid out on disk.
//! - `compact` removes history that compaction made unreachable.
//!
//! # Guarantees
//!
//! The store passes `konverge_store::conformance` like every backend. A transaction is
//! acknowledged only after the batch it belongs to is on disk (fsync), and becomes visible to
//! reads and watches no earlier, so an acknowledged write survives `kill -9` and nothing that
//! was seen can be lost (with [`DiskStoreOptions::sync`] off, acknowledged writes survive the
//! process being killed but not the machine crashing). Watches are served from an in-memory window of recent revisions and
//! catch up from the on-disk change log when they start further back.
//!
//! A write the disk refuses (full, or failing) is answered with the operating system's
//! reason, and the store takes no more writes until it is reopened: fjall cannot know how
//! much of the failed batch reached its journal. Every later write says so, with the last
//! revision stored; reads go on. Reopening drops the failed batch and keeps every
//! acknowledged one (`tests/full_disk.rs`).

mod codec;
mod commit;
mod compact;
mod history;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use bytes::Bytes;
use fjall::{Database, KeyspaceCreateOptions};
use konverge_store::feed::{ChangeLog, spawn_log_watch};
use konverge_store::mvcc::shape_range;
use konverge_store::{
    Error, Event, KeyRange, KvStore, RangeRequest, RangeResponse, Result, Revision, Txn,
    TxnResponse, WatchRequest, WatchStream,
};
use tokio::sync::{mpsc, oneshot, watch};

use crate::commit::Command;
use crate::history::History;

const META_REVISION: &str = "revision";
const META_COMPACT: &str = "compact_revision";

/// Tuning for a [`DiskStore`].
#[derive(Debug, Clone)]
pub struct DiskStoreOptions {
    /// How many recent events watches are served from memory; older starts read the disk.
    pub watch_window_events: usize,
    /// How many bytes of keys and values (current and previous) that window may hold.
    pub watch_window_bytes: usize,
    /// How many transactions may wait for the committer before callers wait to enqueue.
    pub queue_depth: usize,
    /// Whether each batch is fsynced before it is acknowledged (default: yes). Without
    /// (etcd's `--unsafe-no-fsync`, what envtest runs etcd with), a batch is handed to the
    /// operating system and acknowledged: its data survives the process exiting or being
    /// killed, but not the machine crashing or losing power. Tests that start and stop many
    /// servers spend most of their write time in fsync otherwise.
    pub sync: bool,
}

/// The most journal fjall keeps before it flushes the keyspaces that hold it (its least).
/// Opening replays what is left of it, so this bounds a restart: the keyspaces that see few
/// writes (the change log's keys, the revision) would otherwise hold on to journals until
/// fjall's default of 512 MiB, all replayed at the next open.
const MAX_JOURNALING: u64 = 64 * 1024 * 1024;

impl Default for DiskStoreOptions {
    fn default() -> Self {
        DiskStoreOptions {
            watch_window_events: 65_536,
            watch_window_bytes: 16 * 1024 * 1024,
            queue_depth: 8_192,
            sync: true,
        }
    }
}

/// A durable [`KvStore`] in a directory. Cloning gives another handle to the same store; the
/// store closes when the last handle (and the last watch) is dropped.
#[derive(Clone)]
pub struct DiskStore {
    // Declared first so that it drops first: the last handle waits for the committer to
    // finish before the shared state (and with it the database) is released.
    committer: Arc<Committer>,
    shared: Arc<Shared>,
}

/// The way to the committer thread, which stops once the last handle drops it.
struct Committer {
    commands: Option<mpsc::Sender<Command>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.commands = None;
        if let Some(thread) = self.thread.take() {
            // Waits at most for the batch in flight. Joining makes close deterministic: once the
            // last handle is gone (and no watch is left), the directory can be opened again.
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (revision, compacted) = self.shared.revisions();
        f.debug_struct("DiskStore")
            .field("revision", &revision)
            .field("compact_revision", &compacted)
            .finish()
    }
}

pub(crate) struct Shared {
    db: Database,
    history: History,
    meta: fjall::Keyspace,
    published: RwLock<Published>,
    revision_tx: watch::Sender<Revision>,
    window_events: usize,
    window_bytes: usize,
    /// How commits reach the disk: fsynced, or handed to the operating system
    /// ([`DiskStoreOptions::sync`]).
    persist: fjall::PersistMode,
    /// The first commit that failed: the last revision stored before it, and why. fjall
    /// refuses every later write once one failed (it cannot know what reached the disk), so
    /// later failures say this instead of fjall's bare `Poisoned`.
    stopped: std::sync::OnceLock<(Revision, String)>,
}

/// What readers may see: everything up to `revision` is durable.
struct Published {
    revision: Revision,
    compact_revision: Revision,
    /// The most recent revisions' events, contiguous, newest last.
    window: VecDeque<(Revision, Arc<[Event]>)>,
    window_events: usize,
    window_bytes: usize,
}

/// The memory one revision's events hold in the watch window.
fn event_bytes(events: &[Event]) -> usize {
    events
        .iter()
        .map(|e| {
            e.kv.key.len() + e.kv.value.len() + e.prev_kv.as_ref().map_or(0, |p| p.value.len())
        })
        .sum()
}

impl DiskStore {
    /// Opens the store in `path`, creating it if needed, with default options.
    ///
    /// Opening replays fjall's journal, so every transaction acknowledged before a crash is
    /// there. Must be called inside a Tokio runtime only for watches; opening itself blocks.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, DiskStoreOptions::default())
    }

    /// Opens the store in `path` with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: DiskStoreOptions) -> Result<Self> {
        let fail = |what: &'static str| move |e: fjall::Error| Error::backend(what, e);
        let db = Database::builder(path.as_ref())
            .max_journaling_size(MAX_JOURNALING)
            .open()
            .map_err(fail("opening the disk store"))?;
        let open = |name: &str| {
            db.keyspace(name, KeyspaceCreateOptions::default)
                .map_err(fail("opening a keyspace"))
        };
        let history = History {
            versions: open("versions")?,
            changes: open("changes")?,
        };
        let meta = open("meta")?;
        let read_meta = |key: &str, default: Revision| -> Result<Revision> {
            match meta.get(key).map_err(fail("reading metadata"))? {
                None => Ok(default),
                Some(raw) => {
                    codec::decode_revision(&raw).map_err(|e| Error::backend("reading metadata", e))
                }
            }
        };
        let revision = read_meta(META_REVISION, 1)?;
        let compact_revision = read_meta(META_COMPACT, 0)?;
        let (revision_tx, _) = watch::channel(revision);
        let shared = Arc::new(Shared {
            db,
            history,
            meta,
            published: RwLock::new(Published {
                revision,
                compact_revision,
                window: VecDeque::new(),
                window_events: 0,
                window_bytes: 0,
            }),
            revision_tx,
            window_events: options.watch_window_events.max(1),
            window_bytes: options.watch_window_bytes,
            persist: if options.sync {
                fjall::PersistMode::SyncAll
            } else {
                fjall::PersistMode::Buffer
            },
            stopped: std::sync::OnceLock::new(),
        });
        let (commands, queue) = mpsc::channel(options.queue_depth.max(1));
        let committer = shared.clone();
        let thread = std::thread::Builder::new()
            .name("konverge-commit".into())
            .spawn(move || commit::run(committer, queue))
            .map_err(|e| Error::backend("starting the committer thread", e))?;
        let committer = Arc::new(Committer {
            commands: Some(commands),
            thread: Some(thread),
        });
        Ok(DiskStore { committer, shared })
    }

    async fn call<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<Result<T>>) -> Command,
    ) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        let commands = self.committer.commands.as_ref().ok_or(Error::Closed)?;
        commands
            .send(command(reply))
            .await
            .map_err(|_| Error::Closed)?;
        answer.await.map_err(|_| Error::Closed)?
    }
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, Published> {
        self.published.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Published> {
        self.published.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The current and the compaction revision.
    fn revisions(&self) -> (Revision, Revision) {
        let p = self.read();
        (p.revision, p.compact_revision)
    }

    fn revision(&self) -> Revision {
        self.read().revision
    }

    /// Makes a durable batch visible: readers, then watchers.
    fn publish(&self, revision: Revision, committed: Vec<(Revision, Arc<[Event]>)>) {
        {
            let mut p = self.write();
            for (rev, events) in committed {
                p.window_events += events.len();
                p.window_bytes += event_bytes(&events);
                p.window.push_back((rev, events));
            }
            while (p.window_events > self.window_events || p.window_bytes > self.window_bytes)
                && p.window.len() > 1
            {
                if let Some((_, events)) = p.window.pop_front() {
                    p.window_events -= events.len();
                    p.window_bytes -= event_bytes(&events);
                }
            }
            p.revision = revision;
        }
        self.revision_tx.send_replace(revision);
    }

    /// What a failed commit after `revision` answers: the first failure's cause (an I/O
    /// error in words: `No space left on device (os error 28)`), then, for every later
    /// write, that the store stopped and why.
    fn failed_commit(&self, revision: Revision, err: &fjall::Error) -> String {
        let cause = match err {
            fjall::Error::Io(io) => io.to_string(),
            other => other.to_string(),
        };
        match self.stopped.get() {
            Some((last, first)) if matches!(err, fjall::Error::Poisoned) => format!(
                "the disk store takes no more writes since one after revision {last} failed \
                 ({first}); everything up to revision {last} is stored, and the store takes \
                 writes again once reopened"
            ),
            _ => {
                let _ = self.stopped.set((revision, cause.clone()));
                format!("durable commit failed: {cause}")
            }
        }
    }

    fn set_compacted(&self, revision: Revision) {
        let mut p = self.write();
        p.compact_revision = revision;
        while p.window.front().is_some_and(|(rev, _)| *rev < revision) {
            if let Some((_, events)) = p.window.pop_front() {
                p.window_events -= events.len();
                p.window_bytes -= event_bytes(&events);
            }
        }
    }

    /// Fails unless reads at `revision` are still served whole. Called before a read of the
    /// past and again after it: physical compaction only starts after the compaction point
    /// is raised, so a read that passes both checks cannot have seen a half-removed history.
    fn check_readable(&self, revision: Revision) -> Result<()> {
        let (current, compacted) = self.revisions();
        if revision < compacted {
            return Err(Error::Compacted {
                compact_revision: compacted,
            });
        }
        if revision > current {
            return Err(Error::FutureRevision {
                requested: revision,
                current,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl KvStore for DiskStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        req.validate()?;
        let point = matches!(req.range, KeyRange::Key(_));
        let shared = self.shared.clone();
        let read = move || {
            let revision = req.revision.filter(|r| *r > 0).unwrap_or(shared.revision());
            shared.check_readable(revision)?;
            let kvs = match &req.range {
                KeyRange::Key(key) => shared.history.get_at(key, revision)?.into_iter().collect(),
                range => shared.history.scan_at(range, revision)?,
            };
            shared.check_readable(revision)?;
            Ok(shape_range(kvs, &req, revision))
        };
        if point {
            // One key is a short seek; a thread hop would cost more than it saves.
            return read();
        }
        tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| Error::backend("reading the disk store", e))?
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        self.call(|reply| Command::Txn { txn, reply }).await
    }

    /// Queues every create before waiting for any: the committer takes them, in order, as
    /// one group commit (a journal write and one sync per batch, not per key).
    async fn create_each(&self, items: Vec<(Bytes, Bytes)>) -> Vec<Result<Revision>> {
        let mut queued = Vec::with_capacity(items.len());
        for (key, value) in items {
            let (reply, answer) = oneshot::channel();
            let txn = konverge_store::create_txn(key.clone(), value);
            let sent = match self.committer.commands.as_ref() {
                Some(commands) => commands.send(Command::Txn { txn, reply }).await.is_ok(),
                None => false,
            };
            queued.push((key, sent.then_some(answer)));
        }
        let mut answers = Vec::with_capacity(queued.len());
        for (key, answer) in queued {
            let answer = match answer {
                Some(answer) => answer.await.unwrap_or(Err(Error::Closed)),
                None => Err(Error::Closed),
            };
            answers.push(answer.and_then(|resp| konverge_store::created(key, resp)));
        }
        answers
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        req.validate()?;
        let (current, compacted) = self.shared.revisions();
        let start = match req.start_revision.filter(|r| *r > 0) {
            None => current + 1,
            Some(start) if start < compacted => {
                return Err(Error::Compacted {
                    compact_revision: compacted,
                });
            }
            Some(start) if start > current + 1 => {
                return Err(Error::FutureRevision {
                    requested: start,
                    current,
                });
            }
            Some(start) => start,
        };
        Ok(spawn_log_watch(
            self.shared.clone(),
            self.shared.revision_tx.subscribe(),
            req.range,
            start,
            req.prev_kv,
        ))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.call(|reply| Command::Compact { revision, reply })
            .await
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.revision())
    }
}

#[async_trait]
impl ChangeLog for Shared {
    async fn read_changes(
        &self,
        from: Revision,
        to: Revision,
        range: &KeyRange,
        max_events: usize,
    ) -> Result<(Vec<Event>, Revision)> {
        {
            let p = self.read();
            if from < p.compact_revision {
                return Err(Error::Compacted {
                    compact_revision: p.compact_revision,
                });
            }
            if let Some(&(first, _)) = p.window.front()
                && from >= first
            {
                let mut events = Vec::new();
                let skip = usize::try_from(from - first).unwrap_or(usize::MAX);
                for (rev, changes) in p.window.iter().skip(skip) {
                    if *rev > to {
                        break;
                    }
                    events.extend(
                        changes
                            .iter()
                            .filter(|e| range.contains(&e.kv.key))
                            .cloned(),
                    );
                    if events.len() >= max_events {
                        return Ok((events, *rev));
                    }
                }
                return Ok((events, to));
            }
        }
        // Older than the in-memory window: read the on-disk change log up to where the window
        // starts (the window only moves forward, so what it dropped is on disk).
        let history = self.history.clone();
        let range = range.clone();
        let window_start = self.read().window.front().map_or(to + 1, |(rev, _)| *rev);
        let disk_to = to.min(window_start - 1);
        let (events, last) =
            tokio::task::spawn_blocking(move || history.changes(from, disk_to, &range, max_events))
                .await
                .map_err(|e| Error::backend("reading the change log", e))??;
        let compacted = self.read().compact_revision;
        if from < compacted {
            return Err(Error::Compacted {
                compact_revision: compacted,
            });
        }
        Ok((events, last))
    }
}
