//! The revisioned key-value store under konverge's API server, with etcd's semantics.
//!
//! # Where to start
//!
//! - [`KvStore`] is the seam: ranges, transactions, watches and compaction, each documented
//!   with exactly what it returns at which revision and which [`Error`] it fails with.
//! - [`MemStore`] is the in-memory implementation (tests, and the reference for the others).
//!   The disk backend lives in `konverge-store-disk`, the etcd backend in `konverge-store-etcd`.
//! - [`conformance`] (feature `conformance`) is the one suite every implementation runs.
//!
//! # The model
//!
//! The store has one global [`Revision`]. Every transaction that changes at least one key
//! commits as exactly one new revision (+1), however many keys it touches; reads and
//! transactions that change nothing leave it alone. Each key carries `create_revision`,
//! `mod_revision` and `version` ([`KeyValue`]). History is kept until [`KvStore::compact`]
//! drops what lies before a revision; reads and watches that need dropped history fail with
//! [`Error::Compacted`].
//!
//! Building blocks for backends that keep their own history are public too: [`mvcc`]
//! (transaction evaluation) and [`feed`] (watches pulled from a change log).

mod error;
pub mod feed;
mod kv;
mod mem;
pub mod mvcc;
mod request;
pub mod watch;

#[cfg(feature = "conformance")]
pub mod conformance;

use async_trait::async_trait;
use bytes::Bytes;

pub use error::{Error, Result};
pub use kv::{Event, EventKind, KeyRange, KeyValue, Revision, prefix_end};
pub use mem::MemStore;
pub use request::{
    Compare, CompareOp, CompareTarget, RangeRequest, RangeResponse, Txn, TxnOp, TxnOpResponse,
    TxnResponse, WatchRequest,
};
pub use watch::{WatchResponse, WatchStream};

/// A revisioned key-value store with etcd's semantics.
///
/// Implementations are shared between tasks (`Send + Sync`) and cheap to call concurrently.
/// Every method validates its input first: an empty key is [`Error::EmptyKey`], a range whose
/// end is not after its start is [`Error::InvalidRange`]; nothing is written when a request
/// is invalid.
#[async_trait]
pub trait KvStore: Send + Sync + 'static {
    /// Reads the keys of `req.range`, in key order.
    ///
    /// At `req.revision = None` the read sees the latest committed state and
    /// [`RangeResponse::revision`] is the store's current revision. At `Some(r)` it sees the
    /// store exactly as it was after revision `r` and answers with `revision = r`. A revision
    /// before the compaction point fails with [`Error::Compacted`], one after the current
    /// revision with [`Error::FutureRevision`].
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// Runs a transaction atomically: compares, then one branch. See [`Txn`] for how the
    /// revision moves. Reads inside the transaction see its earlier writes.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse>;

    /// Watches a range of keys.
    ///
    /// From `start_revision` (default: the next revision), the stream delivers every change to
    /// a key in the range, in revision order, each exactly once, with no revision skipped
    /// between the start and the store's current revision. A start revision before the
    /// compaction point fails with [`Error::Compacted`] (here, or as the stream's first item if
    /// the backend learns it late); one more than a revision ahead of the store fails with
    /// [`Error::FutureRevision`].
    async fn watch(&self, req: WatchRequest) -> Result<WatchStream>;

    /// Drops history before `revision`: afterwards, reads and watches at revisions from
    /// `revision` on behave as before, and older ones fail with [`Error::Compacted`].
    /// Compacting to a revision at or before the current compaction point fails with
    /// [`Error::Compacted`]; past the current revision with [`Error::FutureRevision`].
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The store's current revision (the revision of the last committed change, or 1 for a
    /// store that has never been written).
    async fn current_revision(&self) -> Result<Revision>;

    /// The latest value of one key.
    async fn get(&self, key: Bytes) -> Result<Option<KeyValue>> {
        let resp = self.range(RangeRequest::new(KeyRange::Key(key))).await?;
        Ok(resp.kvs.into_iter().next())
    }

    /// Writes a key unconditionally and returns the revision of the write.
    async fn put(&self, key: Bytes, value: Bytes) -> Result<Revision> {
        let resp = self
            .txn(Txn::new().and_then([TxnOp::put(key, value)]))
            .await?;
        Ok(resp.revision)
    }

    /// Creates a key that must not exist yet; [`Error::AlreadyExists`] otherwise.
    async fn create(&self, key: Bytes, value: Bytes) -> Result<Revision> {
        let resp = self.txn(create_txn(key.clone(), value)).await?;
        created(key, resp)
    }

    /// Creates each key as [`KvStore::create`] would, one transaction (and revision) each,
    /// in the order given, and answers for each. A store may make them durable together,
    /// as one commit: a caller learns nothing about any of them before every answer is in.
    async fn create_each(&self, items: Vec<(Bytes, Bytes)>) -> Vec<Result<Revision>> {
        let mut answers = Vec::with_capacity(items.len());
        for (key, value) in items {
            answers.push(self.create(key, value).await);
        }
        answers
    }

    /// Replaces a key whose mod_revision must be `expected`. Fails with [`Error::NotFound`]
    /// when the key is absent and [`Error::Conflict`] when it changed since `expected`.
    async fn update(&self, key: Bytes, value: Bytes, expected: Revision) -> Result<Revision> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                expected,
            )])
            .and_then([TxnOp::put(key.clone(), value)])
            .or_else([TxnOp::get(key.clone())]);
        let resp = self.txn(txn).await?;
        if resp.succeeded {
            return Ok(resp.revision);
        }
        Err(guard_failure(key, expected, resp))
    }

    /// Deletes a key and returns it as it was, `None` if it did not exist.
    async fn delete(&self, key: Bytes) -> Result<Option<KeyValue>> {
        let resp = self.txn(Txn::new().and_then([TxnOp::delete(key)])).await?;
        Ok(deleted_kv(resp))
    }

    /// Deletes a key whose mod_revision must be `expected`, returning it as it was. Fails with
    /// [`Error::NotFound`] when the key is absent and [`Error::Conflict`] when it changed.
    async fn delete_if(&self, key: Bytes, expected: Revision) -> Result<KeyValue> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                expected,
            )])
            .and_then([TxnOp::delete(key.clone())])
            .or_else([TxnOp::get(key.clone())]);
        let resp = self.txn(txn).await?;
        if resp.succeeded {
            return deleted_kv(resp).ok_or(Error::NotFound { key });
        }
        Err(guard_failure(key, expected, resp))
    }
}

/// The transaction of [`KvStore::create`]: `key` is written if it is absent.
pub fn create_txn(key: Bytes, value: Bytes) -> Txn {
    Txn::new()
        .when([Compare::absent(key.clone())])
        .and_then([TxnOp::put(key, value)])
}

/// The answer of [`KvStore::create`] to the response of its [`create_txn`].
pub fn created(key: Bytes, resp: TxnResponse) -> Result<Revision> {
    if resp.succeeded {
        Ok(resp.revision)
    } else {
        Err(Error::AlreadyExists { key })
    }
}

/// Turns the else-branch read of a failed `mod_revision == expected` guard into the error.
fn guard_failure(key: Bytes, expected: Revision, resp: TxnResponse) -> Error {
    let current = resp.responses.into_iter().find_map(|r| match r {
        TxnOpResponse::Range(r) => r.kvs.into_iter().next(),
        _ => None,
    });
    match current {
        None => Error::NotFound { key },
        Some(kv) => Error::Conflict {
            key,
            expected,
            actual: kv.mod_revision,
        },
    }
}

fn deleted_kv(resp: TxnResponse) -> Option<KeyValue> {
    resp.responses.into_iter().find_map(|r| match r {
        TxnOpResponse::Delete { prev_kvs, .. } => prev_kvs.into_iter().next(),
        _ => None,
    })
}
