//! [`EtcdStore`]: konverge's [`KvStore`] over a real etcd cluster (v3 API, etcd 3.4 and later).
//!
//! # Where to start
//!
//! - [`EtcdStore::connect`] opens a store on a list of endpoints; [`EtcdStore::with_prefix`]
//!   confines it to the keys under a prefix, so several stores can share one etcd.
//! - The [`KvStore`] impl maps each method onto etcd's own API: `range` onto a KV range,
//!   `txn` onto a KV transaction, `compact` onto a compaction, `current_revision` onto the
//!   header of a cheap read. etcd's revisions *are* the store's revisions; nothing is
//!   renumbered.
//! - `watch` (module `watch`, private) runs one task per watch that owns an etcd watch
//!   stream and forwards into a [`konverge_store::watch::channel`] pair, including progress
//!   requests.
//! - Module `errors` (private) recognises etcd's "compacted" and "future revision" failures;
//!   the store then looks up the revision they leave out (the compaction point, the current
//!   revision), only on that error path.
//! - [`testing`] starts a throwaway `etcd` child process for tests and benchmarks.
//!
//! # Where etcd differs from the trait's reference implementation
//!
//! - etcd applies its own limits, which surface as [`Error::InvalidRequest`]: at most
//!   `--max-txn-ops` (default 128) operations per transaction branch and at most
//!   `--max-request-bytes` (default 1.5 MiB) per request.
//! - etcd's gRPC errors do not say where the compaction point is, so
//!   [`Error::Compacted`] costs a few extra reads to find it (a bisection over revisions).
//!   etcd cannot tell "never compacted" from "compacted at revision 1"; both report 1.
//! - Watch progress notifications of etcd before v3.4.31 and v3.5.13 can overtake events;
//!   against such a server the store checks each one with a probe watch before it reports
//!   it (see [`WatchStream::request_progress`] and the `watch` module).
//! - Revisions and compaction belong to the whole etcd cluster. Several stores sharing one
//!   etcd under different prefixes ([`EtcdStore::with_prefix`]) see each other's writes
//!   move the revision (a store's revision can jump by more than one between two of its own
//!   writes), and [`KvStore::compact`] on any of them compacts all of them.

mod errors;
mod keys;
pub mod testing;
mod watch;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, ConnectOptions, DeleteOptions, GetOptions, KvClient, PutOptions,
    WatchClient,
};
use konverge_store::{
    Compare, CompareOp, CompareTarget, Error, KvStore, RangeRequest, RangeResponse, Result,
    Revision, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchRequest, WatchStream,
};

use crate::errors::{Failure, classify};
use crate::keys::Keyspace;
use crate::watch::{ProgressMode, WatchContext};

/// The largest message the store accepts from etcd (etcd itself sends up to 2 GiB).
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// How long connecting to an endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times a read is sent while etcd members cannot be reached.
const READ_ATTEMPTS: usize = 5;

/// The pause before a read's second attempt; it doubles for each next one.
const READ_RETRY_BACKOFF: Duration = Duration::from_millis(25);

/// HTTP/2 keep-alive: how often to ping etcd while a request or watch is open, and how long
/// to wait for the answer before the connection counts as failed. etcd's default
/// `--grpc-keepalive-min-time` is 5 s; pinging more often gets the connection closed.
const KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(5));

/// A [`KvStore`] backed by etcd. Cloning gives another handle on the same connection.
///
/// Every method is one etcd request (plus, on the error paths that need it, a lookup of the
/// compaction point or the current revision); every failure maps onto [`Error`], the etcd
/// transport's own errors onto [`Error::Backend`].
#[derive(Clone)]
pub struct EtcdStore {
    kv: KvClient,
    watch: WatchClient,
    keyspace: Keyspace,
    progress: ProgressMode,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", self.keyspace.prefix())
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to etcd at `endpoints` (URLs such as `http://127.0.0.1:2379`) and checks that
    /// it answers.
    pub async fn connect(endpoints: &[String]) -> Result<Self> {
        let options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(KEEP_ALIVE.0, KEEP_ALIVE.1);
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(|err| Error::backend(format!("connecting to etcd at {endpoints:?}"), err))?;
        Self::from_client(client).await
    }

    /// A store on an etcd client the caller configured (TLS, authentication, ...). Checks
    /// that etcd answers, and asks for its version to know how to answer watch progress
    /// requests (see [`WatchStream::request_progress`]: etcd before v3.4.31 and v3.5.13 cannot
    /// be trusted with them, and the store verifies their answers itself).
    pub async fn from_client(client: Client) -> Result<Self> {
        // The status is served by the member the client picked; with members of mixed
        // versions (a rolling upgrade) it may be the newer one.
        let progress = match client.maintenance_client().status().await {
            Ok(status) => ProgressMode::for_version(status.version()),
            Err(err) => {
                tracing::debug!(error = %err, "etcd status failed; verifying watch progress");
                ProgressMode::Probe
            }
        };
        let store = EtcdStore {
            kv: client
                .kv_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
            watch: client
                .watch_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
            keyspace: Keyspace::default(),
            progress,
        };
        store.current_revision().await?;
        Ok(store)
    }

    /// The same connection, confined to the etcd keys that start with `prefix`: store keys
    /// are stored as `prefix + key`, and ranges, deletes, compares and watches only ever see
    /// keys under the prefix (and never the key equal to the prefix itself, which is no
    /// store key). Revisions and compaction stay etcd's, shared with every other user of the
    /// cluster: writes under other prefixes move this store's revision too, and compacting
    /// this store compacts them all.
    pub fn with_prefix(mut self, prefix: impl Into<Bytes>) -> Self {
        self.keyspace = Keyspace::new(prefix.into());
        self
    }

    /// The key prefix set by [`with_prefix`](Self::with_prefix) (empty by default).
    pub fn prefix(&self) -> &[u8] {
        self.keyspace.prefix()
    }

    /// Maps an etcd failure onto the store's [`Error`], looking up the revision a
    /// compaction or future-revision error leaves out. `requested` is the revision the
    /// request named.
    /// A read, sent again (after 25, 50, 100, 200 ms) while the member it went to cannot be
    /// reached: the client's next attempt goes to another member, as etcd's own client retries
    /// reads. Writes are not retried (one may have been applied).
    async fn get_retrying(
        &self,
        key: impl Into<Vec<u8>>,
        opts: GetOptions,
    ) -> std::result::Result<etcd_client::GetResponse, etcd_client::Error> {
        let key = key.into();
        let mut backoff = READ_RETRY_BACKOFF;
        for _ in 1..READ_ATTEMPTS {
            match self.kv.clone().get(key.clone(), Some(opts.clone())).await {
                Err(err) if errors::unavailable(&err) => {
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                result => return result,
            }
        }
        self.kv.clone().get(key, Some(opts)).await
    }

    async fn fail(&self, err: etcd_client::Error, what: &str, requested: Revision) -> Error {
        match classify(&err) {
            Failure::Compacted => match self.compact_revision(requested).await {
                Ok(compact_revision) => Error::Compacted { compact_revision },
                Err(lookup) => lookup,
            },
            Failure::FutureRevision => match self.current_revision().await {
                Ok(current) => Error::FutureRevision { requested, current },
                Err(lookup) => lookup,
            },
            Failure::TooLarge => Error::InvalidRequest(format!("etcd refused the {what}: {err}")),
            Failure::Other => Error::backend(format!("etcd {what} failed"), err),
        }
    }

    /// Whether a read at `revision` is served (`false`: compacted away).
    async fn readable(&self, revision: Revision) -> Result<bool> {
        let opts = GetOptions::new().with_revision(revision).with_count_only();
        match self.kv.clone().get(self.probe_key(), Some(opts)).await {
            Ok(_) => Ok(true),
            Err(err) => match classify(&err) {
                Failure::Compacted => Ok(false),
                _ => Err(Error::backend("etcd range (compaction probe) failed", err)),
            },
        }
    }

    /// The compaction point: the oldest revision reads are still served at. etcd's errors do
    /// not carry it, so it is found by bisecting with reads (about log2 of the current
    /// revision of them), starting from `at_least`, a revision known not to be after it. Reads
    /// at the compaction point work, reads before it fail.
    async fn compact_revision(&self, at_least: Revision) -> Result<Revision> {
        let mut hi = self.current_revision().await?; // always readable
        let mut lo = at_least.clamp(1, hi);
        if self.readable(lo).await? {
            return Ok(lo);
        }
        // Invariant: `lo` is compacted, `hi` is readable.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.readable(mid).await? {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Ok(hi)
    }

    /// A key to aim requests at that are about revisions rather than keys.
    fn probe_key(&self) -> Vec<u8> {
        self.keyspace.key(b"\0")
    }

    /// The etcd options for a range request, without the key.
    fn get_options(&self, req: &RangeRequest, range_end: Vec<u8>) -> GetOptions {
        let mut opts = GetOptions::new();
        if !range_end.is_empty() {
            opts = opts.with_range(range_end);
        }
        if let Some(revision) = req.revision.filter(|r| *r > 0) {
            opts = opts.with_revision(revision);
        }
        if let Some(limit) = req.limit.filter(|l| *l > 0) {
            opts = opts.with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        if req.count_only {
            opts = opts.with_count_only();
        }
        if req.keys_only {
            opts = opts.with_keys_only();
        }
        opts
    }

    /// An etcd range answer as a [`RangeResponse`] at `revision`.
    fn range_response(
        &self,
        resp: &etcd_client::GetResponse,
        revision: Revision,
    ) -> Result<RangeResponse> {
        Ok(RangeResponse {
            revision,
            kvs: self.keyspace.kvs(resp.kvs())?,
            count: u64::try_from(resp.count()).unwrap_or(0),
            more: resp.more(),
        })
    }

    fn compare(&self, compare: &Compare) -> etcd_client::Compare {
        let key = self.keyspace.key(&compare.key);
        let op = match compare.op {
            CompareOp::Equal => etcd_client::CompareOp::Equal,
            CompareOp::NotEqual => etcd_client::CompareOp::NotEqual,
            CompareOp::Less => etcd_client::CompareOp::Less,
            CompareOp::Greater => etcd_client::CompareOp::Greater,
        };
        match &compare.target {
            CompareTarget::ModRevision(rev) => etcd_client::Compare::mod_revision(key, op, *rev),
            CompareTarget::CreateRevision(rev) => {
                etcd_client::Compare::create_revision(key, op, *rev)
            }
            CompareTarget::Version(version) => etcd_client::Compare::version(key, op, *version),
            CompareTarget::Value(value) => etcd_client::Compare::value(key, op, value.to_vec()),
        }
    }

    fn txn_op(&self, op: &TxnOp) -> etcd_client::TxnOp {
        match op {
            TxnOp::Put {
                key,
                value,
                prev_kv,
            } => {
                let opts = prev_kv.then(|| PutOptions::new().with_prev_key());
                etcd_client::TxnOp::put(self.keyspace.key(key), value.to_vec(), opts)
            }
            TxnOp::Delete { range, prev_kv } => {
                let (key, range_end) = self.keyspace.range(range);
                let mut opts = DeleteOptions::new();
                if !range_end.is_empty() {
                    opts = opts.with_range(range_end);
                }
                if *prev_kv {
                    opts = opts.with_prev_key();
                }
                etcd_client::TxnOp::delete(key, Some(opts))
            }
            TxnOp::Range(req) => {
                let (key, range_end) = self.keyspace.range(&req.range);
                etcd_client::TxnOp::get(key, Some(self.get_options(req, range_end)))
            }
        }
    }

    /// One etcd operation answer as the store's, checked against the operation asked for.
    fn txn_op_response(
        &self,
        op: &TxnOp,
        resp: &etcd_client::TxnOpResponse,
        revision: Revision,
    ) -> Result<TxnOpResponse> {
        match (op, resp) {
            (TxnOp::Put { .. }, etcd_client::TxnOpResponse::Put(put)) => Ok(TxnOpResponse::Put {
                prev_kv: put.prev_key().map(|kv| self.keyspace.kv(kv)).transpose()?,
            }),
            (TxnOp::Delete { .. }, etcd_client::TxnOpResponse::Delete(delete)) => {
                Ok(TxnOpResponse::Delete {
                    deleted: u64::try_from(delete.deleted()).unwrap_or(0),
                    prev_kvs: self.keyspace.kvs(delete.prev_kvs())?,
                })
            }
            // Reads inside a transaction answer at the revision the transaction ends at (etcd
            // stamps them with the revision at the time of the read instead).
            (TxnOp::Range(_), etcd_client::TxnOpResponse::Get(get)) => {
                Ok(TxnOpResponse::Range(self.range_response(get, revision)?))
            }
            (op, resp) => Err(Error::Backend {
                message: format!("etcd answered {op:?} with {resp:?}"),
                source: None,
            }),
        }
    }
}

/// The revision in an etcd response header.
fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Result<Revision> {
    header.map(|h| h.revision()).ok_or_else(|| Error::Backend {
        message: "etcd answered without a response header".into(),
        source: None,
    })
}

#[async_trait]
impl KvStore for EtcdStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        req.validate()?;
        let (key, range_end) = self.keyspace.range(&req.range);
        let opts = self.get_options(&req, range_end);
        let requested = req.revision.filter(|r| *r > 0);
        let resp = match self.get_retrying(key, opts).await {
            Ok(resp) => resp,
            Err(err) => return Err(self.fail(err, "range", requested.unwrap_or(0)).await),
        };
        // etcd's header carries the current revision even for a read in the past.
        let revision = match requested {
            Some(revision) => revision,
            None => header_revision(resp.header())?,
        };
        self.range_response(&resp, revision)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        let request = etcd_client::Txn::new()
            .when(
                txn.compares
                    .iter()
                    .map(|c| self.compare(c))
                    .collect::<Vec<_>>(),
            )
            .and_then(
                txn.success
                    .iter()
                    .map(|op| self.txn_op(op))
                    .collect::<Vec<_>>(),
            )
            .or_else(
                txn.failure
                    .iter()
                    .map(|op| self.txn_op(op))
                    .collect::<Vec<_>>(),
            );
        let resp = match self.kv.clone().txn(request).await {
            Ok(resp) => resp,
            Err(err) => return Err(self.fail(err, "txn", 0).await),
        };
        let revision = header_revision(resp.header())?;
        let succeeded = resp.succeeded();
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let op_responses = resp.op_responses();
        if op_responses.len() != branch.len() {
            return Err(Error::Backend {
                message: format!(
                    "etcd answered a branch of {} operations with {} responses",
                    branch.len(),
                    op_responses.len()
                ),
                source: None,
            });
        }
        let responses = branch
            .iter()
            .zip(&op_responses)
            .map(|(op, resp)| self.txn_op_response(op, resp, revision))
            .collect::<Result<Vec<_>>>()?;
        Ok(TxnResponse {
            revision,
            succeeded,
            responses,
        })
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        req.validate()?;
        let current = self.current_revision().await?;
        let start = match req.start_revision.filter(|r| *r > 0) {
            // etcd would accept a watch from the future and wait for it.
            Some(start) if start > current + 1 => {
                return Err(Error::FutureRevision {
                    requested: start,
                    current,
                });
            }
            Some(start) => start,
            // Pinning "the next revision" down lets the watch vouch for everything before it
            // in progress notifications.
            None => current + 1,
        };
        let ctx = WatchContext {
            kv: self.kv.clone(),
            watch: self.watch.clone(),
            keyspace: self.keyspace.clone(),
            progress: self.progress,
        };
        watch::start(ctx, &req, start).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        if revision <= 0 {
            // Nothing lies before revision 1: every such compaction is already done.
            return Err(Error::Compacted {
                compact_revision: self.compact_revision(1).await?,
            });
        }
        let opts = CompactionOptions::new().with_physical();
        match self.kv.clone().compact(revision, Some(opts)).await {
            Ok(_) => Ok(()),
            Err(err) => Err(self.fail(err, "compaction", revision).await),
        }
    }

    async fn current_revision(&self) -> Result<Revision> {
        let opts = GetOptions::new().with_count_only();
        let resp = self
            .get_retrying(self.probe_key(), opts)
            .await
            .map_err(|err| Error::backend("etcd range (current revision) failed", err))?;
        header_revision(resp.header())
    }
}
