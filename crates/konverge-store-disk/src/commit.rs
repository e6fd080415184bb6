//! Group commit: one thread applies transactions in order and makes each batch durable with
//! one fsync.
//!
//! Transactions queue on a channel. The committer takes whatever has queued (up to
//! [`MAX_BATCH`]) while the previous fsync ran, plans each against the on-disk state plus the
//! batch's earlier writes, writes the whole batch as one atomic fjall batch with `SyncAll`
//! durability (or `Buffer`, handed to the operating system without fsync, when the store was
//! opened without [`sync`](crate::DiskStoreOptions::sync)), and only then publishes the new revision to readers and watchers and answers
//! the callers. Nothing is visible before it is durable, and a crash loses only transactions
//! that were never acknowledged.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use konverge_store::mvcc::{Overlay, plan_txn};
use konverge_store::{Error, Event, EventKind, KeyValue, Result, Revision, Txn, TxnResponse};
use tokio::sync::{mpsc, oneshot};

use crate::codec::{encode_key_list, encode_version, history_key};
use crate::history::Latest;
use crate::{META_COMPACT, META_REVISION, Shared};

/// The most transactions one durable commit carries.
pub(crate) const MAX_BATCH: usize = 1024;

pub(crate) enum Command {
    Txn {
        txn: Txn,
        reply: oneshot::Sender<Result<TxnResponse>>,
    },
    Compact {
        revision: Revision,
        reply: oneshot::Sender<Result<()>>,
    },
}

pub(crate) fn run(shared: Arc<Shared>, mut commands: mpsc::Receiver<Command>) {
    let mut held: Option<Command> = None;
    loop {
        let Some(first) = held.take().or_else(|| commands.blocking_recv()) else {
            return;
        };
        let mut batch = match first {
            Command::Compact { revision, reply } => {
                let _ = reply.send(compact(&shared, revision));
                continue;
            }
            Command::Txn { txn, reply } => vec![(txn, reply)],
        };
        while batch.len() < MAX_BATCH {
            match commands.try_recv() {
                Ok(Command::Txn { txn, reply }) => batch.push((txn, reply)),
                Ok(compact) => {
                    held = Some(compact);
                    break;
                }
                Err(_) => break,
            }
        }
        commit_batch(&shared, batch);
    }
}

type Reply = oneshot::Sender<Result<TxnResponse>>;

fn commit_batch(shared: &Shared, batch: Vec<(Txn, Reply)>) {
    let base = shared.revision();
    let mut revision = base;
    let mut pending: BTreeMap<Bytes, Option<KeyValue>> = BTreeMap::new();
    let mut write = shared.db.batch().durability(Some(shared.persist));
    let mut committed: Vec<(Revision, Arc<[Event]>)> = Vec::new();
    let mut answers = Vec::with_capacity(batch.len());
    let latest = Latest(&shared.history);
    for (txn, reply) in batch {
        let view = Overlay::new(&latest, &pending);
        let plan = match plan_txn(&view, &txn, revision + 1) {
            Ok(plan) => plan,
            Err(err) => {
                answers.push((reply, Err(err)));
                continue;
            }
        };
        if !plan.events.is_empty() {
            revision += 1;
            for event in &plan.events {
                let value = match event.kind {
                    EventKind::Put => Some(&event.kv),
                    EventKind::Delete => None,
                };
                write.insert(
                    &shared.history.versions,
                    history_key(&event.kv.key, revision),
                    encode_version(value),
                );
                pending.insert(event.kv.key.clone(), value.cloned());
            }
            write.insert(
                &shared.history.changes,
                revision.to_be_bytes(),
                encode_key_list(plan.events.iter().map(|e| &e.kv.key[..])),
            );
            committed.push((revision, plan.events.into()));
        }
        answers.push((
            reply,
            Ok(TxnResponse {
                revision,
                succeeded: plan.succeeded,
                responses: plan.responses,
            }),
        ));
    }
    if revision != base {
        write.insert(&shared.meta, META_REVISION, revision.to_be_bytes());
        if let Err(err) = write.commit() {
            let message = shared.failed_commit(base, &err);
            tracing::error!(error = %message, "the batch is not applied");
            for (reply, _) in answers {
                let _ = reply.send(Err(Error::Backend {
                    message: message.clone(),
                    source: None,
                }));
            }
            return;
        }
        shared.publish(revision, committed);
    }
    for (reply, answer) in answers {
        let _ = reply.send(answer);
    }
}

fn compact(shared: &Arc<Shared>, revision: Revision) -> Result<()> {
    let (current, compacted) = shared.revisions();
    if revision <= compacted {
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
    let mut write = shared.db.batch().durability(Some(shared.persist));
    write.insert(&shared.meta, META_COMPACT, revision.to_be_bytes());
    write
        .commit()
        .map_err(|e| Error::backend("recording the compaction point", e))?;
    shared.set_compacted(revision);
    // Readers and watchers refuse revisions before `revision` from now on, so the old
    // versions can go in the background without holding up writes.
    let shared = shared.clone();
    std::thread::Builder::new()
        .name("konverge-compact".into())
        .spawn(move || {
            if let Err(err) = crate::compact::remove_history_before(&shared, revision) {
                tracing::warn!(error = %err, revision, "removing compacted history failed; it will be retried at the next compaction");
            }
        })
        .map_err(|e| Error::backend("starting the compaction thread", e))?;
    Ok(())
}
