//! Recognising etcd's revision errors among its gRPC failures.
//!
//! etcd reports a read or compaction at a compacted revision and one at a future revision as
//! gRPC `OutOfRange` statuses whose messages are fixed strings (`ErrCompacted` and
//! `ErrFutureRev` in etcd's mvcc package, prefixed with `etcdserver: ` by the gRPC layer).
//! Neither carries a revision; [`EtcdStore`](crate::EtcdStore) looks those up on the error
//! path. Requests beyond etcd's size limits (`--max-txn-ops`, `--max-request-bytes`) are
//! refused with fixed messages too, and count as invalid requests.

/// etcd's message for a revision before the compaction point.
const COMPACTED: &str = "required revision has been compacted";

/// etcd's message for a revision after the current one.
const FUTURE: &str = "required revision is a future revision";

/// etcd's messages for requests beyond its configured limits (the last one is its gRPC
/// server's, for messages well past `--max-request-bytes`).
const TOO_LARGE: [&str; 3] = [
    "too many operations in txn request",
    "request is too large",
    "received message larger than max",
];

/// What an etcd failure means for the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The revision asked for has been compacted.
    Compacted,
    /// The revision asked for is ahead of the store.
    FutureRevision,
    /// The request exceeds one of etcd's limits.
    TooLarge,
    /// Anything else: a backend failure.
    Other,
}

/// Classifies an etcd client error.
pub(crate) fn classify(err: &etcd_client::Error) -> Failure {
    match err {
        etcd_client::Error::GRpcStatus(status) => classify_message(status.message()),
        _ => Failure::Other,
    }
}

/// Whether `err` says the member a request went to could not be reached (gRPC
/// `Unavailable`, or no connection at all): a read may be sent again, and reaches another
/// member, as etcd's own client retries reads.
pub(crate) fn unavailable(err: &etcd_client::Error) -> bool {
    const UNAVAILABLE: i32 = 14;
    match err {
        etcd_client::Error::GRpcStatus(status) => i32::from(status.code()) == UNAVAILABLE,
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

fn classify_message(message: &str) -> Failure {
    if message.contains(COMPACTED) {
        Failure::Compacted
    } else if message.contains(FUTURE) {
        Failure::FutureRevision
    } else if TOO_LARGE.iter().any(|m| message.contains(m)) {
        Failure::TooLarge
    } else {
        Failure::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_etcds_messages() {
        assert_eq!(
            classify_message("etcdserver: mvcc: required revision has been compacted"),
            Failure::Compacted
        );
        assert_eq!(
            classify_message("etcdserver: mvcc: required revision is a future revision"),
            Failure::FutureRevision
        );
        assert_eq!(
            classify_message("etcdserver: too many operations in txn request"),
            Failure::TooLarge
        );
        assert_eq!(
            classify_message("etcdserver: request is too large"),
            Failure::TooLarge
        );
        assert_eq!(
            classify_message("grpc: received message larger than max (2097173 vs. 2097152)"),
            Failure::TooLarge
        );
        assert_eq!(
            classify_message("etcdserver: request timed out"),
            Failure::Other
        );
    }
}
