//! A store opened without fsync (`DiskStoreOptions::sync = false`, etcd's `--unsafe-no-fsync`):
//! it behaves like any other backend, and what it acknowledged survives the process being
//! killed (the operating system still has it), though not a machine crash, which a test
//! cannot cause.
//!
//! The writer is this same test binary, re-run with `KONVERGE_NO_FSYNC_WRITER_DIR` set (see
//! [`no_fsync_writer`]).

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use konverge_store::conformance::TestStore;
use konverge_store::{KeyRange, KvStore, RangeRequest};
use konverge_store_disk::{DiskStore, DiskStoreOptions};
use tokio::io::{AsyncBufReadExt, BufReader};

const WRITER_DIR: &str = "KONVERGE_NO_FSYNC_WRITER_DIR";
/// How many writes the writer makes before it says so and waits to be killed.
const WRITES: usize = 500;

fn unsynced() -> DiskStoreOptions {
    DiskStoreOptions {
        sync: false,
        ..DiskStoreOptions::default()
    }
}

konverge_store::conformance_suite!(async {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = DiskStore::open_with(dir.path(), unsynced()).expect("open");
    TestStore::new(store, dir)
});

#[test]
fn stores_sync_by_default() {
    assert!(DiskStoreOptions::default().sync);
}

/// The writer side: a no-op unless the parent started this binary as a writer. Writes
/// [`WRITES`] keys, prints `written <revision>` once all were acknowledged, then waits to be
/// killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fsync_writer() {
    let Ok(dir) = std::env::var(WRITER_DIR) else {
        return;
    };
    let store = DiskStore::open_with(&dir, unsynced()).expect("writer opens the store");
    let mut revision = 0;
    for n in 0..WRITES {
        revision = store
            .put(
                Bytes::from(format!("unsynced/{n:04}")),
                Bytes::from(format!("value-{n}")),
            )
            .await
            .expect("put");
    }
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "written {revision}").expect("stdout");
        out.flush().expect("flush");
    }
    // Killed here, with the store still open.
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill_without_fsync() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary");
    let mut child = tokio::process::Command::new(&exe)
        .args([
            "--exact",
            "no_fsync_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WRITER_DIR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("writer starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let written: i64 = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("read") {
            // The harness's `test no_fsync_writer ... ` may come first on the line.
            if let Some((_, revision)) = line.rsplit_once("written ") {
                return revision.trim().parse().expect("revision");
            }
        }
        panic!("the writer ended without writing");
    })
    .await
    .expect("the writer finishes its writes");
    child.start_kill().expect("SIGKILL");
    child.wait().await.expect("writer reaped");

    let store = DiskStore::open_with(dir.path(), unsynced()).expect("reopens");
    let listed = store
        .range(RangeRequest::new(KeyRange::prefix(Bytes::from_static(
            b"unsynced/",
        ))))
        .await
        .expect("range");
    assert_eq!(listed.kvs.len(), WRITES);
    assert_eq!(listed.revision, written);
    assert_eq!(listed.kvs[7].key, Bytes::from_static(b"unsynced/0007"));
    assert_eq!(listed.kvs[7].value, Bytes::from_static(b"value-7"));
    // And it goes on from there.
    let next = store
        .put(Bytes::from_static(b"after"), Bytes::from_static(b"kill"))
        .await
        .expect("put after reopening");
    assert_eq!(next, written + 1);
}
