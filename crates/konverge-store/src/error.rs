//! The one error type every [`KvStore`](crate::KvStore) operation returns.

use bytes::Bytes;

use crate::Revision;

/// What went wrong in a store operation.
///
/// Backends map their own failures onto these variants so that callers (the API server's
/// single error-mapping module) can handle every backend the same way.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key was empty. Every key must have at least one byte.
    #[error("key must not be empty")]
    EmptyKey,

    /// A range's end sorted at or before its start.
    #[error("invalid range: end {end:?} is not after start {start:?}")]
    InvalidRange {
        /// The start of the range (inclusive).
        start: Bytes,
        /// The end of the range (exclusive), which must sort after `start`.
        end: Bytes,
    },

    /// A request was malformed in a way the other variants do not name.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// A transaction wrote the same key twice (two puts, or a put inside a deleted range).
    #[error("duplicate key {0:?} in one transaction")]
    DuplicateKey(Bytes),

    /// The requested revision has been compacted away.
    #[error("revision has been compacted; oldest available revision is {compact_revision}")]
    Compacted {
        /// The store's compaction point: reads and watches at or after it still work.
        compact_revision: Revision,
    },

    /// The requested revision is ahead of the store's current revision.
    #[error("revision {requested} is in the future; current revision is {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's revision when the request was served.
        current: Revision,
    },

    /// A conditional write expected the key to be absent, but it exists.
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The key that exists.
        key: Bytes,
    },

    /// A conditional write or delete expected the key to exist, but it does not.
    #[error("key {key:?} not found")]
    NotFound {
        /// The missing key.
        key: Bytes,
    },

    /// A conditional write expected another mod_revision than the key has.
    #[error("key {key:?} was modified: expected mod_revision {expected}, found {actual}")]
    Conflict {
        /// The key that changed.
        key: Bytes,
        /// The mod_revision the caller expected.
        expected: Revision,
        /// The key's mod_revision at the time of the write.
        actual: Revision,
    },

    /// The store has been closed (or its committer stopped) and serves no more requests.
    #[error("store is closed")]
    Closed,

    /// The backend failed (I/O, network, an unexpected answer from etcd).
    #[error("storage backend failed: {message}")]
    Backend {
        /// What the backend was doing.
        message: String,
        /// The backend's own error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl Error {
    /// A backend failure with its cause.
    pub fn backend(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Backend {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// `Result` with the store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
