//! The conformance suite every [`KvStore`] implementation runs.
//!
//! Each case is a plain async function that takes a fresh, empty store and panics when the
//! store breaks the documented semantics. [`conformance_suite!`](crate::conformance_suite)
//! turns the whole list into one `#[tokio::test]` per case for a backend:
//!
//! ```ignore
//! konverge_store::conformance_suite!(async {
//!     konverge_store::conformance::TestStore::new(konverge_store::MemStore::new(), ())
//! });
//! ```
//!
//! Cases only assert revision arithmetic relative to what the store reports, never absolute
//! numbers, so that backends may start at different revisions.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::{
    Compare, CompareOp, Error, Event, EventKind, KeyRange, KvStore, RangeRequest, Revision, Txn,
    TxnOp, TxnOpResponse, WatchRequest, WatchResponse, WatchStream,
};

/// A store under test and whatever must live as long as it (a temporary directory, a child
/// etcd process).
pub struct TestStore {
    /// The store.
    pub store: Arc<dyn KvStore>,
    _guard: Box<dyn Any + Send + Sync>,
}

impl TestStore {
    /// Wraps a store and its guard.
    pub fn new(store: impl KvStore, guard: impl Any + Send + Sync) -> Self {
        TestStore {
            store: Arc::new(store),
            _guard: Box::new(guard),
        }
    }
}

/// Generates one `#[tokio::test]` per conformance case. The argument is an async expression
/// that evaluates to a fresh [`TestStore`] each time it is evaluated.
#[macro_export]
macro_rules! conformance_suite {
    ($factory:expr) => {
        $crate::conformance_suite!(@cases $factory;
            revision_arithmetic,
            key_bookkeeping,
            create_each_in_order,
            cas_success_and_failure,
            multi_key_atomicity,
            concurrent_cas_counters,
            reads_inside_txn_see_its_writes,
            range_at_past_revisions,
            range_limits_and_counts,
            delete_semantics,
            bad_input_is_rejected_and_writes_nothing,
            compaction,
            watch_delivers_only_the_range,
            watch_prev_kv,
            watch_ordering_under_concurrent_writers,
            watch_replay_from_past_revision,
            watch_from_compacted_revision,
            watch_from_the_future,
            progress_notifications,
            progress_while_replaying_history,
            hundred_watchers_receive_every_event_in_order,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let test_store: $crate::conformance::TestStore = $factory.await;
                $crate::conformance::$case(test_store.store.clone()).await;
            }
        )*
    };
}

/// A store handle as the cases take it.
pub type Store = Arc<dyn KvStore>;

/// How long a case waits for an event before it declares the watch stuck. Generous: it only
/// guards against hangs, it does not measure speed.
const PATIENCE: Duration = Duration::from_secs(30);

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

async fn put(store: &Store, key: &str, value: &str) -> Revision {
    store.put(b(key), b(value)).await.expect("put")
}

async fn current(store: &Store) -> Revision {
    store.current_revision().await.expect("current_revision")
}

async fn keys_at(store: &Store, prefix: &str, revision: Option<Revision>) -> Vec<(String, String)> {
    let mut req = RangeRequest::new(KeyRange::prefix(b(prefix)));
    req.revision = revision;
    let resp = store.range(req).await.expect("range");
    resp.kvs
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into_owned(),
                String::from_utf8_lossy(&kv.value).into_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Reads from `stream` until `n` events have arrived (panics on errors, timeouts and excess).
async fn collect_events(stream: &mut WatchStream, n: usize) -> Vec<Event> {
    let mut events = Vec::with_capacity(n);
    while events.len() < n {
        let message = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .unwrap_or_else(|_| panic!("watch stalled after {} of {n} events", events.len()))
            .expect("watch ended early")
            .expect("watch failed");
        if let WatchResponse::Events(batch) = message {
            events.extend(batch);
        }
    }
    assert_eq!(events.len(), n, "watch delivered more events than written");
    events
}

/// Asserts that nothing more arrives on `stream` for a short while (after a progress
/// round-trip, so that "nothing" is not just "not yet").
async fn assert_quiet(store: &Store, stream: &mut WatchStream) {
    let now = current(store).await;
    stream.request_progress();
    loop {
        let message = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("no progress notification")
            .expect("watch ended")
            .expect("watch failed");
        match message {
            WatchResponse::Progress(rev) if rev >= now => return,
            WatchResponse::Progress(_) => stream.request_progress(),
            WatchResponse::Events(events) => panic!("unexpected events: {events:?}"),
        }
    }
}

/// The global revision moves by exactly one per transaction that changes something.
pub async fn revision_arithmetic(store: Store) {
    let r0 = current(&store).await;
    assert!(
        r0 >= 1,
        "a fresh store starts at revision 1 or later, got {r0}"
    );

    let r1 = put(&store, "a", "1").await;
    assert_eq!(r1, r0 + 1, "one put, one revision");

    let resp = store
        .txn(Txn::new().and_then([
            TxnOp::put("b", "1"),
            TxnOp::put("c", "1"),
            TxnOp::put("d", "1"),
        ]))
        .await
        .expect("txn");
    assert_eq!(
        resp.revision,
        r1 + 1,
        "a multi-key transaction gets one revision"
    );
    for key in ["b", "c", "d"] {
        let kv = store.get(b(key)).await.expect("get").expect("present");
        assert_eq!(kv.mod_revision, r1 + 1);
    }

    let resp = store
        .txn(Txn::new().and_then([TxnOp::get("a")]))
        .await
        .expect("read txn");
    assert_eq!(
        resp.revision,
        r1 + 1,
        "a read-only transaction leaves the revision alone"
    );

    let deleted = store.delete(b("absent")).await.expect("delete");
    assert!(deleted.is_none());
    assert_eq!(
        current(&store).await,
        r1 + 1,
        "deleting nothing changes nothing"
    );

    let resp = store
        .txn(
            Txn::new()
                .when([Compare::value("a", CompareOp::Equal, "not-1")])
                .and_then([TxnOp::put("a", "2")]),
        )
        .await
        .expect("txn");
    assert!(!resp.succeeded);
    assert_eq!(
        resp.revision,
        r1 + 1,
        "a failed compare with an empty else branch writes nothing"
    );

    let r2 = put(&store, "a", "3").await;
    assert_eq!(r2, r1 + 2);
    let resp = store
        .range(RangeRequest::new(KeyRange::key(b("a"))))
        .await
        .expect("range");
    assert_eq!(
        resp.revision, r2,
        "a read at the latest state answers with the current revision"
    );
}

/// create_revision, mod_revision and version follow etcd's rules.
pub async fn key_bookkeeping(store: Store) {
    let r1 = put(&store, "k", "v1").await;
    let kv = store.get(b("k")).await.expect("get").expect("present");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r1, 1)
    );
    assert_eq!(kv.value, b("v1"));

    let r2 = put(&store, "k", "v2").await;
    let kv = store.get(b("k")).await.expect("get").expect("present");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r2, 2)
    );

    let r3 = put(&store, "k", "v3").await;
    let kv = store.get(b("k")).await.expect("get").expect("present");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r3, 3)
    );
}

/// `create_each` creates in the order given, a revision each, and answers each key: one that
/// exists fails alone with AlreadyExists, and is left as it was.
pub async fn create_each_in_order(store: Store) {
    let before = put(&store, "each/b", "old").await;
    let answers = store
        .create_each(vec![
            (b("each/c"), b("1")),
            (b("each/b"), b("2")),
            (b("each/a"), b("3")),
            (b("each/d"), b("4")),
        ])
        .await;
    assert_eq!(answers.len(), 4);
    let revisions: Vec<Revision> = [&answers[0], &answers[2], &answers[3]]
        .iter()
        .map(|answer| *answer.as_ref().expect("created"))
        .collect();
    assert_eq!(
        revisions,
        [before + 1, before + 2, before + 3],
        "{answers:?}"
    );
    assert!(
        matches!(&answers[1], Err(Error::AlreadyExists { key }) if *key == b("each/b")),
        "{answers:?}"
    );
    assert_eq!(
        keys_at(&store, "each/", None).await,
        pairs(&[
            ("each/a", "3"),
            ("each/b", "old"),
            ("each/c", "1"),
            ("each/d", "4")
        ])
    );
    assert_eq!(current(&store).await, before + 3);
    assert!(store.create_each(Vec::new()).await.is_empty());
}

/// Conditional writes succeed on a matching revision and fail with typed errors otherwise.
pub async fn cas_success_and_failure(store: Store) {
    let r1 = store.create(b("k"), b("v1")).await.expect("create");
    match store.create(b("k"), b("again")).await {
        Err(Error::AlreadyExists { key }) => assert_eq!(key, b("k")),
        other => panic!("second create: expected AlreadyExists, got {other:?}"),
    }

    let r2 = store
        .update(b("k"), b("v2"), r1)
        .await
        .expect("update at the right revision");
    assert_eq!(r2, r1 + 1);
    match store.update(b("k"), b("stale"), r1).await {
        Err(Error::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (r1, r2)),
        other => panic!("stale update: expected Conflict, got {other:?}"),
    }
    match store.update(b("missing"), b("v"), r1).await {
        Err(Error::NotFound { key }) => assert_eq!(key, b("missing")),
        other => panic!("update of a missing key: expected NotFound, got {other:?}"),
    }
    assert_eq!(
        store
            .get(b("k"))
            .await
            .expect("get")
            .expect("present")
            .value,
        b("v2")
    );

    match store.delete_if(b("k"), r1).await {
        Err(Error::Conflict { actual, .. }) => assert_eq!(actual, r2),
        other => panic!("stale delete: expected Conflict, got {other:?}"),
    }
    match store.delete_if(b("missing"), r1).await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("delete of a missing key: expected NotFound, got {other:?}"),
    }
    let gone = store
        .delete_if(b("k"), r2)
        .await
        .expect("delete at the right revision");
    assert_eq!(gone.value, b("v2"));
    assert!(store.get(b("k")).await.expect("get").is_none());

    // Every compare target and operator.
    put(&store, "c", "m").await;
    let kv = store.get(b("c")).await.expect("get").expect("present");
    let holds = [
        Compare::value("c", CompareOp::Equal, "m"),
        Compare::value("c", CompareOp::Greater, "a"),
        Compare::value("c", CompareOp::Less, "z"),
        Compare::value("c", CompareOp::NotEqual, "x"),
        Compare::version("c", CompareOp::Equal, 1),
        Compare::create_revision("c", CompareOp::Equal, kv.create_revision),
        Compare::mod_revision("c", CompareOp::Less, kv.mod_revision + 1),
        Compare::mod_revision("c", CompareOp::Greater, 0),
        Compare::absent("never-written"),
        Compare::version("never-written", CompareOp::Equal, 0),
    ];
    for compare in holds {
        let resp = store
            .txn(Txn::new().when([compare.clone()]))
            .await
            .expect("txn");
        assert!(resp.succeeded, "{compare:?} should hold");
    }
    let fails = [
        Compare::value("c", CompareOp::Equal, "n"),
        Compare::value("never-written", CompareOp::NotEqual, "x"),
        Compare::version("c", CompareOp::Greater, 1),
        Compare::absent("c"),
    ];
    for compare in fails {
        let resp = store
            .txn(Txn::new().when([compare.clone()]))
            .await
            .expect("txn");
        assert!(!resp.succeeded, "{compare:?} should not hold");
    }
}

/// Either every write of a transaction lands, at one revision, or none does.
pub async fn multi_key_atomicity(store: Store) {
    put(&store, "acct/a", "100").await;
    let before = current(&store).await;
    let resp = store
        .txn(
            Txn::new()
                .when([
                    Compare::value("acct/a", CompareOp::Equal, "100"),
                    Compare::absent("acct/lock"),
                    Compare::value("acct/a", CompareOp::Equal, "999"),
                ])
                .and_then([
                    TxnOp::put("acct/a", "50"),
                    TxnOp::put("acct/b", "50"),
                    TxnOp::put("acct/lock", "x"),
                ])
                .or_else([TxnOp::get("acct/a")]),
        )
        .await
        .expect("txn");
    assert!(!resp.succeeded);
    assert_eq!(resp.revision, before);
    assert_eq!(
        keys_at(&store, "acct/", None).await,
        pairs(&[("acct/a", "100")])
    );
    match &resp.responses[..] {
        [TxnOpResponse::Range(r)] => assert_eq!(r.kvs[0].value, b("100")),
        other => panic!("else branch should answer its read: {other:?}"),
    }

    let resp = store
        .txn(
            Txn::new()
                .when([Compare::value("acct/a", CompareOp::Equal, "100")])
                .and_then([
                    TxnOp::put("acct/a", "50"),
                    TxnOp::put("acct/b", "50"),
                    TxnOp::Delete {
                        range: KeyRange::key(b("acct/none")),
                        prev_kv: false,
                    },
                ]),
        )
        .await
        .expect("txn");
    assert!(resp.succeeded);
    assert_eq!(resp.revision, before + 1);
    assert_eq!(
        keys_at(&store, "acct/", None).await,
        pairs(&[("acct/a", "50"), ("acct/b", "50")])
    );
    // Neither key is visible at the revision before the transaction, both at its revision.
    assert_eq!(
        keys_at(&store, "acct/", Some(before)).await,
        pairs(&[("acct/a", "100")])
    );
}

/// Concurrent read-modify-write loops on two keys never lose an update or tear a pair.
pub async fn concurrent_cas_counters(store: Store) {
    const TASKS: usize = 8;
    const INCREMENTS: usize = 25;
    put(&store, "ctr/x", "0").await;
    put(&store, "ctr/y", "0").await;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0usize;
            for _ in 0..INCREMENTS {
                loop {
                    let x = store.get(b("ctr/x")).await.expect("get").expect("present");
                    let y = store.get(b("ctr/y")).await.expect("get").expect("present");
                    let n: u64 = String::from_utf8_lossy(&x.value).parse().expect("number");
                    let txn = Txn::new()
                        .when([
                            Compare::mod_revision("ctr/x", CompareOp::Equal, x.mod_revision),
                            Compare::mod_revision("ctr/y", CompareOp::Equal, y.mod_revision),
                        ])
                        .and_then([
                            TxnOp::put("ctr/x", (n + 1).to_string()),
                            TxnOp::put("ctr/y", (n + 1).to_string()),
                        ]);
                    if store.txn(txn).await.expect("txn").succeeded {
                        break;
                    }
                    conflicts += 1;
                }
            }
            conflicts
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let total = (TASKS * INCREMENTS).to_string();
    assert_eq!(
        keys_at(&store, "ctr/", None).await,
        pairs(&[("ctr/x", &total), ("ctr/y", &total)])
    );
}

/// A read after a write in the same branch sees the write.
pub async fn reads_inside_txn_see_its_writes(store: Store) {
    put(&store, "r/a", "old").await;
    let resp = store
        .txn(Txn::new().and_then([
            TxnOp::put("r/a", "new"),
            TxnOp::put("r/b", "1"),
            TxnOp::Range(RangeRequest::new(KeyRange::prefix(b("r/")))),
        ]))
        .await
        .expect("txn");
    match &resp.responses[..] {
        [_, _, TxnOpResponse::Range(r)] => {
            let values: Vec<_> = r.kvs.iter().map(|kv| kv.value.clone()).collect();
            assert_eq!(values, vec![b("new"), b("1")]);
            assert_eq!(r.count, 2);
        }
        other => panic!("unexpected responses {other:?}"),
    }
}

/// Reads at a past revision see exactly the state after that revision.
pub async fn range_at_past_revisions(store: Store) {
    let r1 = put(&store, "p/a", "a1").await;
    let r2 = put(&store, "p/b", "b1").await;
    let r3 = put(&store, "p/a", "a2").await;
    let resp = store.delete(b("p/b")).await.expect("delete");
    assert!(resp.is_some());
    let r4 = current(&store).await;
    let r5 = put(&store, "p/b", "b2").await;

    assert_eq!(keys_at(&store, "p/", Some(r1 - 1)).await, pairs(&[]));
    assert_eq!(
        keys_at(&store, "p/", Some(r1)).await,
        pairs(&[("p/a", "a1")])
    );
    assert_eq!(
        keys_at(&store, "p/", Some(r2)).await,
        pairs(&[("p/a", "a1"), ("p/b", "b1")])
    );
    assert_eq!(
        keys_at(&store, "p/", Some(r3)).await,
        pairs(&[("p/a", "a2"), ("p/b", "b1")])
    );
    assert_eq!(
        keys_at(&store, "p/", Some(r4)).await,
        pairs(&[("p/a", "a2")])
    );
    assert_eq!(
        keys_at(&store, "p/", Some(r5)).await,
        pairs(&[("p/a", "a2"), ("p/b", "b2")])
    );
    assert_eq!(
        keys_at(&store, "p/", None).await,
        keys_at(&store, "p/", Some(r5)).await
    );

    let resp = store
        .range(RangeRequest::new(KeyRange::key(b("p/b"))).at_revision(r2))
        .await
        .expect("range");
    assert_eq!(
        resp.revision, r2,
        "a past read answers at the revision asked for"
    );
    let kv = &resp.kvs[0];
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r2, r2, 1)
    );
    let kv = store.get(b("p/b")).await.expect("get").expect("present");
    assert_eq!(
        (kv.create_revision, kv.version),
        (r5, 1),
        "re-created after delete"
    );

    match store
        .range(RangeRequest::new(KeyRange::prefix(b("p/"))).at_revision(r5 + 1))
        .await
    {
        Err(Error::FutureRevision { requested, current }) => {
            assert_eq!((requested, current), (r5 + 1, r5))
        }
        other => panic!("read one ahead of the store: expected FutureRevision, got {other:?}"),
    }
}

/// Limits, counts, keys-only reads and the range shapes.
pub async fn range_limits_and_counts(store: Store) {
    for i in 0..10 {
        put(&store, &format!("l/{i:02}"), &format!("v{i}")).await;
    }
    put(&store, "l0", "outside the prefix").await;
    put(&store, "k", "before the prefix").await;

    let resp = store
        .range(RangeRequest::new(KeyRange::prefix(b("l/"))).with_limit(3))
        .await
        .expect("range");
    assert_eq!(resp.kvs.len(), 3);
    assert_eq!(resp.count, 10);
    assert!(resp.more);
    let keys: Vec<_> = resp.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(
        keys,
        vec![b("l/00"), b("l/01"), b("l/02")],
        "limited reads return the first keys"
    );

    let resp = store
        .range(RangeRequest::new(KeyRange::prefix(b("l/"))).with_limit(10))
        .await
        .expect("range");
    assert_eq!((resp.kvs.len(), resp.count, resp.more), (10, 10, false));

    let resp = store
        .range(RangeRequest::new(KeyRange::prefix(b("l/"))).count_only())
        .await
        .expect("range");
    assert_eq!((resp.kvs.len(), resp.count), (0, 10));

    let resp = store
        .range(RangeRequest::new(KeyRange::prefix(b("l/"))).keys_only())
        .await
        .expect("range");
    assert_eq!(resp.kvs.len(), 10);
    assert!(
        resp.kvs
            .iter()
            .all(|kv| kv.value.is_empty() && kv.version == 1)
    );

    let resp = store
        .range(RangeRequest::new(KeyRange::range(b("l/03"), b("l/06"))))
        .await
        .expect("range");
    let keys: Vec<_> = resp.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(keys, vec![b("l/03"), b("l/04"), b("l/05")]);

    let resp = store
        .range(RangeRequest::new(KeyRange::From(b("l/08"))))
        .await
        .expect("range");
    let keys: Vec<_> = resp.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(keys, vec![b("l/08"), b("l/09"), b("l0")]);

    let resp = store
        .range(RangeRequest::new(KeyRange::prefix(b("nothing/"))))
        .await
        .expect("range");
    assert_eq!((resp.kvs.len(), resp.count, resp.more), (0, 0, false));

    let resp = store
        .range(RangeRequest::new(KeyRange::prefix(Bytes::new())))
        .await
        .expect("all");
    assert_eq!(resp.count, 12, "an empty prefix is the whole keyspace");
}

/// Deletes reset versions, report what they removed and leave the rest alone.
pub async fn delete_semantics(store: Store) {
    for i in 0..5 {
        put(&store, &format!("d/{i}"), "v").await;
    }
    put(&store, "d/0", "v2").await;
    put(&store, "e", "untouched").await;
    let before = current(&store).await;
    let resp = store
        .txn(Txn::new().and_then([TxnOp::Delete {
            range: KeyRange::prefix(b("d/")),
            prev_kv: true,
        }]))
        .await
        .expect("delete range");
    assert_eq!(resp.revision, before + 1, "a range delete is one revision");
    match &resp.responses[..] {
        [TxnOpResponse::Delete { deleted, prev_kvs }] => {
            assert_eq!(*deleted, 5);
            assert_eq!(prev_kvs.len(), 5);
            assert_eq!(prev_kvs[0].key, b("d/0"));
            assert_eq!(prev_kvs[0].version, 2);
        }
        other => panic!("unexpected responses {other:?}"),
    }
    assert!(keys_at(&store, "d/", None).await.is_empty());
    assert_eq!(
        keys_at(&store, "e", None).await,
        pairs(&[("e", "untouched")])
    );

    let resp = store
        .txn(Txn::new().and_then([TxnOp::Delete {
            range: KeyRange::prefix(b("d/")),
            prev_kv: false,
        }]))
        .await
        .expect("delete nothing");
    match &resp.responses[..] {
        [TxnOpResponse::Delete { deleted: 0, .. }] => {}
        other => panic!("unexpected responses {other:?}"),
    }
    assert_eq!(resp.revision, before + 1);

    let r = put(&store, "d/0", "reborn").await;
    let kv = store.get(b("d/0")).await.expect("get").expect("present");
    assert_eq!(
        (kv.create_revision, kv.version),
        (r, 1),
        "a delete resets the version"
    );
}

/// Bad input gets a typed error and changes nothing.
pub async fn bad_input_is_rejected_and_writes_nothing(store: Store) {
    put(&store, "x", "1").await;
    let before = current(&store).await;
    assert!(matches!(
        store.get(Bytes::new()).await,
        Err(Error::EmptyKey)
    ));
    assert!(matches!(
        store.put(Bytes::new(), b("v")).await,
        Err(Error::EmptyKey)
    ));
    assert!(matches!(
        store
            .range(RangeRequest::new(KeyRange::range(b("b"), b("a"))))
            .await,
        Err(Error::InvalidRange { .. })
    ));
    assert!(matches!(
        store
            .txn(Txn::new().and_then([TxnOp::put("y", "1"), TxnOp::put("y", "2")]))
            .await,
        Err(Error::DuplicateKey(_))
    ));
    assert!(matches!(
        store
            .txn(Txn::new().and_then([
                TxnOp::put("ok", "1"),
                TxnOp::Delete {
                    range: KeyRange::range(b("z"), b("a")),
                    prev_kv: false
                }
            ]))
            .await,
        Err(Error::InvalidRange { .. })
    ));
    assert!(matches!(
        store
            .txn(Txn::new().when([Compare::absent(Bytes::new())]))
            .await,
        Err(Error::EmptyKey)
    ));
    assert!(matches!(
        store
            .watch(WatchRequest::new(KeyRange::range(b("b"), b("a"))))
            .await,
        Err(Error::InvalidRange { .. })
    ));
    assert!(matches!(
        store
            .range(RangeRequest::new(KeyRange::key(b("x"))).at_revision(-1))
            .await,
        Err(Error::InvalidRequest(_))
    ));
    assert_eq!(
        current(&store).await,
        before,
        "rejected requests write nothing"
    );
    assert!(store.get(b("ok")).await.expect("get").is_none());
    assert!(store.get(b("y")).await.expect("get").is_none());
}

/// Compaction drops history before a revision and nothing from it on.
pub async fn compaction(store: Store) {
    let r1 = put(&store, "c/a", "1").await;
    let r2 = put(&store, "c/b", "1").await;
    store.delete(b("c/b")).await.expect("delete");
    let r3 = current(&store).await;
    let r4 = put(&store, "c/a", "2").await;
    put(&store, "c/c", "1").await;

    store.compact(r3).await.expect("compact");
    match store
        .range(RangeRequest::new(KeyRange::prefix(b("c/"))).at_revision(r2))
        .await
    {
        Err(Error::Compacted { compact_revision }) => assert_eq!(compact_revision, r3),
        other => panic!("read before the compaction point: expected Compacted, got {other:?}"),
    }
    assert_eq!(
        keys_at(&store, "c/", Some(r3)).await,
        pairs(&[("c/a", "1")])
    );
    assert_eq!(
        keys_at(&store, "c/", Some(r4)).await,
        pairs(&[("c/a", "2")])
    );
    assert_eq!(
        keys_at(&store, "c/", None).await,
        pairs(&[("c/a", "2"), ("c/c", "1")])
    );
    let kv = store.get(b("c/a")).await.expect("get").expect("present");
    assert_eq!(
        (kv.create_revision, kv.version),
        (r1, 2),
        "bookkeeping survives compaction"
    );

    assert!(matches!(
        store.compact(r3).await,
        Err(Error::Compacted { .. })
    ));
    assert!(matches!(
        store.compact(r1).await,
        Err(Error::Compacted { .. })
    ));
    let now = current(&store).await;
    assert!(matches!(
        store.compact(now + 1).await,
        Err(Error::FutureRevision { .. })
    ));
    store
        .compact(now)
        .await
        .expect("compact to the current revision");
    assert_eq!(
        keys_at(&store, "c/", None).await,
        pairs(&[("c/a", "2"), ("c/c", "1")])
    );
    let r = put(&store, "c/d", "1").await;
    assert_eq!(r, now + 1, "the store works on after compaction");
}

/// A watch sees changes to its range and nothing else.
pub async fn watch_delivers_only_the_range(store: Store) {
    let mut one = store
        .watch(WatchRequest::new(KeyRange::key(b("w/a"))))
        .await
        .expect("watch");
    let mut range = store
        .watch(WatchRequest::new(KeyRange::range(b("w/b"), b("w/d"))))
        .await
        .expect("watch");
    let ra = put(&store, "w/a", "1").await;
    put(&store, "w/ab", "1").await;
    let rb = put(&store, "w/b", "1").await;
    let rc = put(&store, "w/c", "1").await;
    put(&store, "w/d", "1").await;
    let events = collect_events(&mut one, 1).await;
    assert_eq!(
        (events[0].kv.key.clone(), events[0].revision()),
        (b("w/a"), ra)
    );
    assert_eq!(events[0].kind, EventKind::Put);
    let events = collect_events(&mut range, 2).await;
    let got: Vec<_> = events
        .iter()
        .map(|e| (e.kv.key.clone(), e.revision()))
        .collect();
    assert_eq!(got, vec![(b("w/b"), rb), (b("w/c"), rc)]);
    assert_quiet(&store, &mut one).await;
    assert_quiet(&store, &mut range).await;
}

/// Events carry the previous value when asked, and deletes look like etcd's.
pub async fn watch_prev_kv(store: Store) {
    let r1 = put(&store, "pv/a", "1").await;
    let mut with = store
        .watch(WatchRequest::new(KeyRange::prefix(b("pv/"))).with_prev_kv())
        .await
        .expect("watch");
    let mut without = store
        .watch(WatchRequest::new(KeyRange::prefix(b("pv/"))))
        .await
        .expect("watch");
    let r2 = put(&store, "pv/a", "2").await;
    store.delete(b("pv/a")).await.expect("delete");
    let r3 = current(&store).await;

    let events = collect_events(&mut with, 2).await;
    let prev = events[0].prev_kv.as_ref().expect("prev_kv on update");
    assert_eq!((prev.value.clone(), prev.mod_revision), (b("1"), r1));
    assert_eq!(events[0].kv.version, 2);
    assert_eq!(events[1].kind, EventKind::Delete);
    assert_eq!(events[1].kv.key, b("pv/a"));
    assert_eq!(events[1].kv.mod_revision, r3);
    assert!(events[1].kv.value.is_empty());
    let prev = events[1].prev_kv.as_ref().expect("prev_kv on delete");
    assert_eq!((prev.value.clone(), prev.mod_revision), (b("2"), r2));

    let events = collect_events(&mut without, 2).await;
    assert!(events.iter().all(|e| e.prev_kv.is_none()));
}

/// Concurrent writers: one watcher sees every revision once, in order, with no gap.
pub async fn watch_ordering_under_concurrent_writers(store: Store) {
    const WRITERS: usize = 8;
    const WRITES: usize = 40;
    let start = current(&store).await + 1;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix(b("cw/"))).from_revision(start))
        .await
        .expect("watch");
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..WRITES {
                store
                    .put(b(&format!("cw/{w}/{i}")), b(&format!("{i}")))
                    .await
                    .expect("put");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
    let events = collect_events(&mut stream, WRITERS * WRITES).await;
    let revisions: Vec<_> = events.iter().map(Event::revision).collect();
    let expected: Vec<_> = (start..start + (WRITERS * WRITES) as Revision).collect();
    assert_eq!(
        revisions, expected,
        "every revision exactly once, in order, no gap"
    );
    // Each writer's own puts arrive in the order it made them.
    let mut last_seen: BTreeMap<String, i64> = BTreeMap::new();
    for e in &events {
        let key = String::from_utf8_lossy(&e.kv.key).into_owned();
        let mut parts = key.rsplitn(2, '/');
        let i: i64 = parts.next().and_then(|s| s.parse().ok()).expect("index");
        let writer = parts.next().expect("writer").to_string();
        let prev = last_seen.insert(writer, i);
        assert_eq!(prev.map_or(0, |p| p + 1), i, "writer order preserved");
    }
    assert_quiet(&store, &mut stream).await;
}

/// A watch from a past revision replays history, then goes on live.
pub async fn watch_replay_from_past_revision(store: Store) {
    let mut revs = Vec::new();
    for i in 0..5 {
        revs.push(put(&store, &format!("h/{i}"), "v").await);
    }
    store.delete(b("h/0")).await.expect("delete");
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix(b("h/"))).from_revision(revs[1]))
        .await
        .expect("watch");
    let live = put(&store, "h/live", "v").await;
    let events = collect_events(&mut stream, 6).await;
    let got: Vec<_> = events
        .iter()
        .map(|e| (e.kind, e.kv.key.clone(), e.revision()))
        .collect();
    assert_eq!(
        got,
        vec![
            (EventKind::Put, b("h/1"), revs[1]),
            (EventKind::Put, b("h/2"), revs[2]),
            (EventKind::Put, b("h/3"), revs[3]),
            (EventKind::Put, b("h/4"), revs[4]),
            (EventKind::Delete, b("h/0"), revs[4] + 1),
            (EventKind::Put, b("h/live"), live),
        ]
    );
}

/// A watch from compacted history fails with the compaction point; one from it works.
pub async fn watch_from_compacted_revision(store: Store) {
    let r1 = put(&store, "wc/a", "1").await;
    let r2 = put(&store, "wc/a", "2").await;
    let r3 = put(&store, "wc/a", "3").await;
    store.compact(r2).await.expect("compact");

    let req = WatchRequest::new(KeyRange::prefix(b("wc/"))).from_revision(r1);
    match store.watch(req).await {
        Err(Error::Compacted { compact_revision }) => assert_eq!(compact_revision, r2),
        Ok(mut stream) => match tokio::time::timeout(PATIENCE, stream.next()).await {
            Ok(Some(Err(Error::Compacted { compact_revision }))) => {
                assert_eq!(compact_revision, r2)
            }
            other => panic!("watch from a compacted revision: expected Compacted, got {other:?}"),
        },
        Err(other) => panic!("watch from a compacted revision: expected Compacted, got {other:?}"),
    }

    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix(b("wc/"))).from_revision(r2))
        .await
        .expect("watch from the compaction point");
    let events = collect_events(&mut stream, 2).await;
    let revisions: Vec<_> = events.iter().map(Event::revision).collect();
    assert_eq!(revisions, vec![r2, r3]);
}

/// A watch one revision ahead is "from now"; further ahead is refused.
pub async fn watch_from_the_future(store: Store) {
    let now = put(&store, "f/a", "1").await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix(b("f/"))).from_revision(now + 1))
        .await
        .expect("watch from the next revision");
    match store
        .watch(WatchRequest::new(KeyRange::prefix(b("f/"))).from_revision(now + 5))
        .await
    {
        Err(Error::FutureRevision { requested, .. }) => assert_eq!(requested, now + 5),
        Ok(mut stream) => match tokio::time::timeout(PATIENCE, stream.next()).await {
            Ok(Some(Err(Error::FutureRevision { requested, .. }))) => {
                assert_eq!(requested, now + 5)
            }
            other => panic!("watch from the future: expected FutureRevision, got {other:?}"),
        },
        Err(other) => panic!("watch from the future: expected FutureRevision, got {other:?}"),
    }
    let next = put(&store, "f/b", "1").await;
    let events = collect_events(&mut stream, 1).await;
    assert_eq!(events[0].revision(), next);
}

/// A progress notification comes after every earlier change and names the current revision.
pub async fn progress_notifications(store: Store) {
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix(b("pg/"))))
        .await
        .expect("watch");
    let mut written = Vec::new();
    for i in 0..20 {
        written.push(put(&store, &format!("pg/{i}"), "v").await);
    }
    // A write outside the watched range moves the revision too.
    let last = put(&store, "other", "v").await;
    stream.request_progress();
    let mut seen = Vec::new();
    loop {
        let message = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("no progress notification")
            .expect("watch ended")
            .expect("watch failed");
        match message {
            WatchResponse::Events(events) => seen.extend(events.iter().map(Event::revision)),
            WatchResponse::Progress(rev) => {
                assert!(
                    rev >= last,
                    "progress {rev} is behind the last write {last}"
                );
                break;
            }
        }
    }
    assert_eq!(
        seen, written,
        "every event before the progress notification"
    );

    // A second request on a quiet stream answers too.
    stream.request_progress();
    match tokio::time::timeout(PATIENCE, stream.next()).await {
        Ok(Some(Ok(WatchResponse::Progress(rev)))) => assert!(rev >= last),
        other => panic!("expected a second progress notification, got {other:?}"),
    }
}

/// A progress request made while a watch is still replaying history is answered only after
/// the replay: a notification never overtakes the events it vouches for.
pub async fn progress_while_replaying_history(store: Store) {
    const WRITES: usize = 2000;
    let first = current(&store).await + 1;
    for chunk in 0..WRITES / 100 {
        let mut txns = Vec::new();
        for i in 0..100 {
            let store = store.clone();
            txns.push(tokio::spawn(async move {
                store
                    .put(b(&format!("rp/{chunk}/{i}")), b("v"))
                    .await
                    .expect("put")
            }));
        }
        for txn in txns {
            txn.await.expect("writer");
        }
    }
    let last = current(&store).await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix(b("rp/"))).from_revision(first))
        .await
        .expect("watch");
    stream.request_progress();
    let mut seen = 0usize;
    loop {
        let message = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("no progress notification")
            .expect("watch ended")
            .expect("watch failed");
        match message {
            WatchResponse::Events(events) => seen += events.len(),
            WatchResponse::Progress(rev) => {
                assert!(
                    rev >= last,
                    "progress {rev} is behind the last write {last}"
                );
                assert_eq!(seen, WRITES, "progress {rev} overtook undelivered events");
                break;
            }
        }
    }
}

/// A hundred watchers on one prefix each receive every event, in order.
pub async fn hundred_watchers_receive_every_event_in_order(store: Store) {
    const WATCHERS: usize = 100;
    const WRITES: usize = 60;
    let mut streams = Vec::new();
    for _ in 0..WATCHERS {
        streams.push(
            store
                .watch(WatchRequest::new(KeyRange::prefix(b("fan/"))))
                .await
                .expect("watch"),
        );
    }
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..WRITES {
                revs.push(
                    store
                        .put(b(&format!("fan/{}", i % 7)), b(&i.to_string()))
                        .await
                        .expect("put"),
                );
            }
            revs
        })
    };
    let readers: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                collect_events(&mut stream, WRITES)
                    .await
                    .iter()
                    .map(|e| (e.revision(), e.kv.value.clone()))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let revs = writer.await.expect("writer");
    let expected: Vec<_> = revs
        .iter()
        .enumerate()
        .map(|(i, r)| (*r, b(&i.to_string())))
        .collect();
    for reader in readers {
        assert_eq!(reader.await.expect("reader"), expected);
    }
}
