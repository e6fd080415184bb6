//! Tests of the etcd-specific mapping that the shared conformance suite does not pin down:
//! the revisions carried by compaction errors, progress notifications on a watch that is
//! still replaying history, watch cancellation in etcd, failures mid-watch, and key prefixes.

use std::time::Duration;

use bytes::Bytes;
use konverge_store::{
    Compare, Error, EventKind, KeyRange, KvStore, RangeRequest, Revision, Txn, TxnOp, WatchRequest,
    WatchResponse, WatchStream,
};
use konverge_store_etcd::EtcdStore;
use konverge_store_etcd::testing::EtcdServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PATIENCE: Duration = Duration::from_secs(30);

async fn start() -> (EtcdServer, EtcdStore) {
    let server = EtcdServer::start().await.expect("start etcd");
    let store = EtcdStore::connect(&[server.endpoint()])
        .await
        .expect("connect");
    (server, store)
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

async fn next(stream: &mut WatchStream) -> Option<konverge_store::Result<WatchResponse>> {
    tokio::time::timeout(PATIENCE, stream.recv())
        .await
        .expect("watch stalled")
}

/// Reads one gauge from etcd's Prometheus endpoint on its client URL.
async fn metric(server: &EtcdServer, name: &str) -> f64 {
    let addr = server.endpoint().trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect to etcd's metrics");
    conn.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("ask for metrics");
    let mut text = String::new();
    conn.read_to_string(&mut text).await.expect("read metrics");
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revision_errors_carry_the_compaction_point_and_the_current_revision() {
    let (_server, store) = start().await;
    let mut revs = Vec::new();
    for i in 0..10 {
        revs.push(store.put(b("k"), b(&i.to_string())).await.expect("put"));
    }
    let point = revs[6];
    store.compact(point).await.expect("compact");

    for before in [revs[0], revs[3], point - 1] {
        match store
            .range(RangeRequest::new(KeyRange::key(b("k"))).at_revision(before))
            .await
        {
            Err(Error::Compacted { compact_revision }) => assert_eq!(compact_revision, point),
            other => panic!("read at {before}: expected Compacted, got {other:?}"),
        }
    }
    let resp = store
        .range(RangeRequest::new(KeyRange::key(b("k"))).at_revision(point))
        .await
        .expect("read at the compaction point");
    assert_eq!((resp.revision, resp.kvs[0].value.clone()), (point, b("6")));

    for again in [0, 1, revs[2], point] {
        match store.compact(again).await {
            Err(Error::Compacted { compact_revision }) => assert_eq!(compact_revision, point),
            other => panic!("compact({again}): expected Compacted, got {other:?}"),
        }
    }

    let now = store.current_revision().await.expect("current");
    assert_eq!(now, revs[9]);
    match store.compact(now + 3).await {
        Err(Error::FutureRevision { requested, current }) => {
            assert_eq!((requested, current), (now + 3, now))
        }
        other => panic!("compact in the future: expected FutureRevision, got {other:?}"),
    }
    match store
        .range(RangeRequest::new(KeyRange::prefix(b(""))).at_revision(now + 1))
        .await
    {
        Err(Error::FutureRevision { requested, current }) => {
            assert_eq!((requested, current), (now + 1, now))
        }
        other => panic!("read in the future: expected FutureRevision, got {other:?}"),
    }
    match store
        .watch(WatchRequest::new(KeyRange::key(b("k"))).from_revision(now + 2))
        .await
    {
        Err(Error::FutureRevision { requested, current }) => {
            assert_eq!((requested, current), (now + 2, now))
        }
        other => panic!("watch from the future: expected FutureRevision, got {other:?}"),
    }

    // A watch from compacted history ends with the compaction point, and nothing else.
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::key(b("k"))).from_revision(revs[1]))
        .await
        .expect("watch");
    match next(&mut stream).await {
        Some(Err(Error::Compacted { compact_revision })) => assert_eq!(compact_revision, point),
        other => panic!("watch from compacted history: expected Compacted, got {other:?}"),
    }
    assert!(
        next(&mut stream).await.is_none(),
        "the error ends the watch"
    );
}

/// etcd before v3.4.31 answers a progress request at once, ahead of the events a watch that
/// replays history still owes; the store must not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_waits_for_a_watch_replaying_history() {
    const WRITES: usize = 2000;
    let (_server, store) = start().await;
    let first = store.current_revision().await.expect("current") + 1;
    for i in 0..WRITES {
        store
            .put(b(&format!("r/{}", i % 13)), Bytes::from(vec![b'x'; 200]))
            .await
            .expect("put");
        if i % 100 == 0 {
            store.put(b("elsewhere"), b("v")).await.expect("put");
        }
    }
    let last = store.put(b("elsewhere"), b("last")).await.expect("put");

    for round in 0..3 {
        let mut stream = store
            .watch(WatchRequest::new(KeyRange::prefix(b("r/"))).from_revision(first))
            .await
            .expect("watch");
        stream.request_progress();
        let mut events = 0;
        let mut previous: Revision = 0;
        loop {
            match next(&mut stream)
                .await
                .expect("watch ended")
                .expect("watch failed")
            {
                WatchResponse::Events(batch) => {
                    for event in batch {
                        assert!(event.revision() > previous, "events in revision order");
                        previous = event.revision();
                        events += 1;
                    }
                }
                WatchResponse::Progress(revision) => {
                    assert_eq!(
                        events, WRITES,
                        "round {round}: progress {revision} after {events} of {WRITES} events"
                    );
                    assert!(revision >= last, "progress {revision} behind {last}");
                    break;
                }
            }
        }
    }
}

/// A watch whose range never changes while the rest of etcd does still gets current progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_on_a_quiet_range_of_a_busy_store() {
    let (_server, store) = start().await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix(b("quiet/"))))
        .await
        .expect("watch");
    for round in 0..5 {
        for i in 0..50 {
            store
                .put(b(&format!("busy/{i}")), b(&round.to_string()))
                .await
                .expect("put");
        }
        let now = store.current_revision().await.expect("current");
        stream.request_progress();
        match next(&mut stream).await {
            Some(Ok(WatchResponse::Progress(revision))) => assert!(revision >= now),
            other => panic!("expected progress, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_events_are_tombstones_with_prev_kv_under_a_prefix() {
    let (_server, store) = start().await;
    let store = store.with_prefix("tenant/");
    let created = store.put(b("a"), b("1")).await.expect("put");
    let updated = store.put(b("a"), b("2")).await.expect("put");
    let mut stream = store
        .watch(
            WatchRequest::new(KeyRange::prefix(b("")))
                .from_revision(created)
                .with_prev_kv(),
        )
        .await
        .expect("watch");
    let resp = store
        .txn(Txn::new().and_then([TxnOp::Delete {
            range: KeyRange::prefix(b("")),
            prev_kv: true,
        }]))
        .await
        .expect("delete everything");
    let deleted = resp.revision;

    let mut events = Vec::new();
    while events.len() < 3 {
        match next(&mut stream).await.expect("ended").expect("failed") {
            WatchResponse::Events(batch) => events.extend(batch),
            WatchResponse::Progress(_) => {}
        }
    }
    assert_eq!(events[0].kind, EventKind::Put);
    assert_eq!(events[0].prev_kv, None, "a create has no previous value");
    assert_eq!(
        events[1]
            .prev_kv
            .as_ref()
            .map(|kv| (kv.key.clone(), kv.value.clone())),
        Some((b("a"), b("1")))
    );
    let delete = &events[2];
    assert_eq!(delete.kind, EventKind::Delete);
    assert_eq!(
        (
            delete.kv.key.clone(),
            delete.kv.value.clone(),
            delete.kv.create_revision,
            delete.kv.mod_revision,
            delete.kv.version
        ),
        (b("a"), Bytes::new(), 0, deleted, 0)
    );
    let prev = delete.prev_kv.as_ref().expect("prev_kv on the delete");
    assert_eq!(
        (
            prev.key.clone(),
            prev.value.clone(),
            prev.mod_revision,
            prev.version
        ),
        (b("a"), b("2"), updated, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_watch_cancels_it_in_etcd() {
    let (server, store) = start().await;
    let watcher_total = "etcd_debugging_mvcc_watcher_total";
    assert_eq!(metric(&server, watcher_total).await, 0.0);
    let streams: Vec<_> = futures_join(&store, 3).await;
    assert_eq!(metric(&server, watcher_total).await, 3.0);
    drop(streams);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while metric(&server, watcher_total).await != 0.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcd still has watchers after the streams were dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        metric(&server, "etcd_debugging_mvcc_watch_stream_total").await,
        0.0
    );
}

async fn futures_join(store: &EtcdStore, n: usize) -> Vec<WatchStream> {
    let mut streams = Vec::new();
    for i in 0..n {
        streams.push(
            store
                .watch(WatchRequest::new(KeyRange::key(b(&format!("w/{i}")))))
                .await
                .expect("watch"),
        );
    }
    streams
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_with_a_backend_error_when_etcd_goes_away() {
    let (server, store) = start().await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix(b(""))))
        .await
        .expect("watch");
    let written = store.put(b("k"), b("v")).await.expect("put");
    match next(&mut stream).await {
        Some(Ok(WatchResponse::Events(events))) => assert_eq!(events[0].revision(), written),
        other => panic!("expected the put, got {other:?}"),
    }
    drop(server);
    match next(&mut stream).await {
        Some(Err(Error::Backend { .. })) => {}
        other => panic!("expected a backend error, got {other:?}"),
    }
    assert!(
        next(&mut stream).await.is_none(),
        "the error ends the watch"
    );
    assert!(matches!(
        store.current_revision().await,
        Err(Error::Backend { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_with_different_prefixes_share_one_etcd() {
    let (_server, store) = start().await;
    let left = store.clone().with_prefix("left/");
    let right = store.clone().with_prefix("right/");
    assert_eq!(left.prefix(), b"left/");

    let mut right_watch = right
        .watch(WatchRequest::new(KeyRange::prefix(b(""))))
        .await
        .expect("watch");
    left.create(b("k"), b("l"))
        .await
        .expect("create on the left");
    right
        .create(b("k"), b("r"))
        .await
        .expect("the same key on the right is another key");
    assert_eq!(
        left.get(b("k")).await.expect("get").expect("present").value,
        b("l")
    );
    let all = store
        .range(RangeRequest::new(KeyRange::prefix(b(""))))
        .await
        .expect("range");
    let keys: Vec<_> = all.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(keys, vec![b("left/k"), b("right/k")]);

    // Compares look at the store's own keys.
    let resp = left
        .txn(
            Txn::new()
                .when([Compare::value("k", konverge_store::CompareOp::Equal, "l")])
                .and_then([TxnOp::Delete {
                    range: KeyRange::From(b("a")),
                    prev_kv: false,
                }]),
        )
        .await
        .expect("txn");
    assert!(resp.succeeded);
    assert!(left.get(b("k")).await.expect("get").is_none());
    assert!(right.get(b("k")).await.expect("get").is_some());

    // The right store's watch saw only its own key.
    match next(&mut right_watch).await {
        Some(Ok(WatchResponse::Events(events))) => {
            assert_eq!(events.len(), 1);
            assert_eq!(
                (events[0].kv.key.clone(), events[0].kv.value.clone()),
                (b("k"), b("r"))
            );
        }
        other => panic!("expected the right store's create, got {other:?}"),
    }
    right_watch.request_progress();
    match next(&mut right_watch).await {
        Some(Ok(WatchResponse::Progress(_))) => {}
        other => panic!("expected progress and no foreign events, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_etcds_limits_are_invalid_and_write_nothing() {
    let (_server, store) = start().await;
    let before = store.current_revision().await.expect("current");
    let puts = (0..129).map(|i| TxnOp::put(b(&format!("many/{i}")), b("v")));
    match store.txn(Txn::new().and_then(puts)).await {
        Err(Error::InvalidRequest(message)) => assert!(message.contains("too many"), "{message}"),
        other => panic!("129 operations: expected InvalidRequest, got {other:?}"),
    }
    // Past etcd's --max-request-bytes (1.5 MiB), and past its gRPC server's limit (2 MiB).
    for size in [1_800_000, 3 << 20] {
        let huge = Bytes::from(vec![b'x'; size]);
        match store.put(b("huge"), huge).await {
            Err(Error::InvalidRequest(_)) => {}
            other => panic!("a {size}-byte value: expected InvalidRequest, got {other:?}"),
        }
    }
    assert_eq!(store.current_revision().await.expect("current"), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_nothing_is_a_backend_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let result = tokio::time::timeout(
        PATIENCE,
        EtcdStore::connect(&[format!("http://127.0.0.1:{port}")]),
    )
    .await
    .expect("connect gave up in time");
    assert!(matches!(result, Err(Error::Backend { .. })), "{result:?}");
}

/// With one member of three killed, reads on a store that knows every member go on: a read
/// sent to the dead member is sent again, and another member answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_on_when_a_member_dies() {
    let mut cluster = konverge_store_etcd::testing::EtcdCluster::start(3)
        .await
        .expect("start an etcd cluster");
    let store = EtcdStore::connect(&cluster.endpoints())
        .await
        .expect("connect");
    store.put(b("/k"), b("v")).await.expect("put");
    cluster.kill(0).await;
    for i in 0..200 {
        let read = store
            .range(RangeRequest::new(KeyRange::key(b("/k"))))
            .await
            .unwrap_or_else(|e| panic!("read {i} failed: {e}"));
        assert_eq!(read.kvs.len(), 1);
        store
            .current_revision()
            .await
            .unwrap_or_else(|e| panic!("revision {i} failed: {e}"));
    }
}
