//! Crash safety: a writer process is killed with SIGKILL at random moments; every write it
//! saw acknowledged must be there when the store reopens, with contiguous revisions.
//!
//! The writer is this same test binary, re-run with `KONVERGE_CRASH_WRITER_DIR` set (see
//! [`crash_writer`]); it prints one line per acknowledged write.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{KeyRange, KvStore, RangeRequest, WatchRequest, WatchResponse};
use konverge_store_disk::DiskStore;
use rand::Rng;
use tokio::io::{AsyncBufReadExt, BufReader};

const WRITER_DIR: &str = "KONVERGE_CRASH_WRITER_DIR";
const WRITER_CYCLE: &str = "KONVERGE_CRASH_WRITER_CYCLE";
const CYCLES: usize = 20;
const WRITERS: usize = 16;

/// The writer side. A no-op unless the parent started this binary as a writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_writer() {
    let Ok(dir) = std::env::var(WRITER_DIR) else {
        return;
    };
    let cycle: usize = std::env::var(WRITER_CYCLE)
        .expect("cycle")
        .parse()
        .expect("cycle number");
    let store = DiskStore::open(&dir).expect("writer opens the store");
    let (acks, mut acked) = tokio::sync::mpsc::unbounded_channel();
    for writer in 0..WRITERS {
        let store = store.clone();
        let acks = acks.clone();
        tokio::spawn(async move {
            for n in 0u64.. {
                let key = format!("crash/{cycle:02}/{writer:02}/{n:08}");
                // Values of several sizes, up to 8 KiB, so batches span journal blocks.
                let value = format!("{key}:").repeat((n as usize % 7) * 40 + 1);
                let revision = store
                    .put(Bytes::from(key.clone()), Bytes::from(value.clone()))
                    .await
                    .expect("put");
                if acks
                    .send(format!("ack {revision} {key} {}", value.len()))
                    .is_err()
                {
                    return;
                }
            }
        });
    }
    drop(acks);
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    while let Some(line) = acked.recv().await {
        // A line is printed (and flushed) only after the put returned, i.e. after it was
        // acknowledged as durable.
        writeln!(out, "{line}").expect("stdout");
        out.flush().expect("flush");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary");
    let mut rng = rand::rng();
    // key -> (revision, value length) for every acknowledged write so far.
    let mut acked: BTreeMap<String, (i64, usize)> = BTreeMap::new();
    // Revisions the parent itself wrote while verifying (not under `crash/`).
    let mut own: Vec<i64> = Vec::new();

    for cycle in 0..CYCLES {
        let mut child = tokio::process::Command::new(&exe)
            .args([
                "--exact",
                "crash_writer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(WRITER_DIR, dir.path())
            .env(WRITER_CYCLE, cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start writer");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();

        // Let it get going (first ack), then kill it at a random moment.
        let kill_after = Duration::from_millis(rng.random_range(20..400));
        let mut first = true;
        let mut cycle_acks = 0usize;
        let deadline = tokio::time::sleep(Duration::from_secs(60));
        tokio::pin!(deadline);
        let mut kill_at = None;
        loop {
            let kill = async {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                line = lines.next_line() => match line.expect("read writer output") {
                    Some(line) => {
                        if let Some(ack) = line.strip_prefix("ack ") {
                            let mut parts = ack.split(' ');
                            let revision: i64 = parts.next().and_then(|r| r.parse().ok()).expect("revision");
                            let key = parts.next().expect("key").to_string();
                            let len: usize = parts.next().and_then(|r| r.parse().ok()).expect("length");
                            acked.insert(key, (revision, len));
                            cycle_acks += 1;
                            if first {
                                first = false;
                                kill_at = Some(tokio::time::Instant::now() + kill_after);
                            }
                        }
                    }
                    None => break,
                },
                () = kill => {
                    child.start_kill().expect("SIGKILL the writer");
                    kill_at = None;
                }
                () = &mut deadline => panic!("cycle {cycle}: writer made no progress"),
            }
        }
        let status = child.wait().await.expect("reap writer");
        assert!(
            !status.success(),
            "cycle {cycle}: the writer must have been killed"
        );
        assert!(
            cycle_acks > 0,
            "cycle {cycle}: the writer acknowledged nothing"
        );

        verify(dir.path(), &acked, &mut own, cycle).await;
    }
}

/// Reopens the store and checks every acknowledged write, contiguity, and that it works on.
async fn verify(
    dir: &std::path::Path,
    acked: &BTreeMap<String, (i64, usize)>,
    own: &mut Vec<i64>,
    cycle: usize,
) {
    let store = DiskStore::open(dir).expect("reopen after SIGKILL");
    let current = store.current_revision().await.expect("revision");
    let all = store
        .range(RangeRequest::new(KeyRange::prefix(Bytes::from_static(
            b"crash/",
        ))))
        .await
        .expect("range");
    let on_disk: BTreeMap<String, (i64, usize)> = all
        .kvs
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into_owned(),
                (kv.mod_revision, kv.value.len()),
            )
        })
        .collect();
    for (key, expected) in acked {
        assert_eq!(
            on_disk.get(key),
            Some(expected),
            "cycle {cycle}: acknowledged write of {key} lost or changed"
        );
    }
    // Every crash key is written once, so together with the parent's own writes, revisions
    // 2..=current are each exactly one write: no gap, no revision without its write, nothing
    // beyond the recorded revision.
    let mut revisions: Vec<i64> = on_disk.values().map(|(rev, _)| *rev).collect();
    revisions.sort_unstable();
    let mut all_revisions: Vec<i64> = revisions.iter().chain(own.iter()).copied().collect();
    all_revisions.sort_unstable();
    let contiguous = all_revisions.iter().copied().eq(2..=current);
    assert!(
        contiguous,
        "cycle {cycle}: revisions are not contiguous: {} writes for revisions 2..={current}, \
         first out of place: {:?}",
        all_revisions.len(),
        all_revisions
            .iter()
            .zip(2..)
            .find(|(got, want)| **got != *want)
    );

    // The change log agrees: a watch from the first revision replays every write in order.
    let mut watch = store
        .watch(WatchRequest::new(KeyRange::prefix(Bytes::from_static(b"crash/"))).from_revision(2))
        .await
        .expect("watch");
    let mut replayed = Vec::new();
    while replayed.len() < revisions.len() {
        match tokio::time::timeout(Duration::from_secs(30), watch.recv()).await {
            Ok(Some(Ok(WatchResponse::Events(events)))) => {
                replayed.extend(events.iter().map(|e| e.kv.mod_revision))
            }
            other => panic!("cycle {cycle}: replay stopped: {other:?}"),
        }
    }
    assert!(
        replayed == revisions,
        "cycle {cycle}: the change log replays {} events, the keys say {}",
        replayed.len(),
        revisions.len()
    );
    drop(watch);

    // And it works on: the next write gets the next revision.
    let next = store
        .put(
            Bytes::from_static(b"after-crash"),
            Bytes::from_static(b"ok"),
        )
        .await
        .expect("write after reopen");
    assert_eq!(next, current + 1);
    let gone = store
        .delete(Bytes::from_static(b"after-crash"))
        .await
        .expect("delete");
    assert!(gone.is_some());
    own.extend([next, next + 1]);
    drop(store);
    // The dropped watch's task releases its handle on the database asynchronously; give it
    // the moment it needs before the next writer opens the directory.
    wait_until_unlocked(dir).await;
}

async fn wait_until_unlocked(dir: &std::path::Path) {
    for _ in 0..500 {
        match DiskStore::open(dir) {
            Ok(store) => {
                drop(store);
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    panic!("the store directory stayed locked after every handle was dropped");
}
