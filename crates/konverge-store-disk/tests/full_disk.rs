//! A disk that refuses a write (full, or past a size limit): the batch that failed is answered
//! with the operating system's reason, every later write with why the store stopped and up to
//! which revision everything is stored; reads go on; once reopened, every acknowledged write
//! is there, nothing of the failed one, and writes are taken again.
//!
//! The writer is this same test binary, re-run with `KONVERGE_FULL_DISK_WRITER_DIR` set under
//! a file size limit (`ulimit -f`, with `SIGXFSZ` ignored, so that a write past the limit
//! fails with `EFBIG` as a write to a full disk fails with `ENOSPC`, instead of killing the
//! process). fjall sizes its journal at 64 MiB when it opens it, so the limit is just above
//! that and the write that crosses it is one large value. The writer prints one line per
//! outcome.

use std::collections::BTreeMap;

use bytes::Bytes;
use konverge_store::{KeyRange, KvStore, RangeRequest};
use konverge_store_disk::DiskStore;

const WRITER_DIR: &str = "KONVERGE_FULL_DISK_WRITER_DIR";
const VALUE_BYTES: usize = 16 * 1024;
/// More than is left under the limit in the journal.
const TOO_LARGE_BYTES: usize = 65 * 1024 * 1024;
const FILE_TOO_LARGE: &str = "File too large (os error 27)";

fn value() -> Bytes {
    Bytes::from(vec![b'v'; VALUE_BYTES])
}

/// The writer side. A no-op unless the parent started this binary as the writer.
#[tokio::test]
async fn full_disk_writer() {
    let Ok(dir) = std::env::var(WRITER_DIR) else {
        return;
    };
    let store = DiskStore::open(&dir).expect("the writer opens the store");
    for n in 0..20u32 {
        let key = format!("full/{n:05}");
        let revision = store
            .put(Bytes::from(key.clone()), value())
            .await
            .expect("a write under the limit");
        println!("ack {revision} {key}");
    }
    // Random, so that no compression makes it fit.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let too_large: Bytes = (0..TOO_LARGE_BYTES)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    match store
        .put(Bytes::from_static(b"full/large"), too_large)
        .await
    {
        Ok(revision) => println!("ack {revision} full/large"),
        Err(e) => println!("failed full/large {e}"),
    }
    match store.put(Bytes::from_static(b"full/later"), value()).await {
        Ok(revision) => println!("ack {revision} full/later"),
        Err(e) => println!("again {e}"),
    }
    let read = store
        .range(RangeRequest::new(KeyRange::prefix(Bytes::from_static(
            b"full/",
        ))))
        .await
        .expect("reads go on after a failed write");
    println!("read {} {}", read.revision, read.kvs.len());
}

#[tokio::test]
async fn a_write_the_disk_refuses_stops_the_store_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary");
    // `sh` is POSIX: `ulimit -f` counts 512-byte blocks, so 132096 is 64.5 MiB.
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"trap '' XFSZ; ulimit -f 132096 && exec "$0" --exact full_disk_writer --nocapture"#)
        .arg(&exe)
        .env(WRITER_DIR, dir.path())
        .output()
        .expect("run the writer");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the writer failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let mut acked: BTreeMap<String, i64> = BTreeMap::new();
    let (mut failed, mut again, mut read) = (None, None, None);
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("ack ") {
            let (revision, key) = rest.split_once(' ').expect("ack line");
            acked.insert(key.to_string(), revision.parse().expect("revision"));
        } else if let Some(rest) = line.strip_prefix("failed ") {
            failed = Some(rest.split_once(' ').expect("failed line"));
        } else if let Some(rest) = line.strip_prefix("again ") {
            again = Some(rest);
        } else if let Some(rest) = line.strip_prefix("read ") {
            read = Some(rest);
        }
    }
    let (failed_key, failed_message) =
        failed.unwrap_or_else(|| panic!("no write failed under the limit: {stdout}"));
    assert!(acked.len() > 1, "{stdout}");
    let last = *acked.values().max().expect("acknowledged writes");
    assert_eq!(
        failed_message,
        format!("storage backend failed: durable commit failed: {FILE_TOO_LARGE}")
    );
    assert_eq!(
        again,
        Some(
            format!(
                "storage backend failed: the disk store takes no more writes since one after \
                 revision {last} failed ({FILE_TOO_LARGE}); everything up to revision {last} \
                 is stored, and the store takes writes again once reopened"
            )
            .as_str()
        )
    );
    assert_eq!(read, Some(format!("{last} {}", acked.len()).as_str()));

    // Reopened without the limit: every acknowledged write, nothing of the failed one, and
    // the next write follows the last acknowledged revision.
    let store = DiskStore::open(dir.path()).expect("reopen");
    assert_eq!(store.current_revision().await.expect("revision"), last);
    let stored = store
        .range(RangeRequest::new(KeyRange::prefix(Bytes::from_static(
            b"full/",
        ))))
        .await
        .expect("range");
    let on_disk: BTreeMap<String, i64> = stored
        .kvs
        .iter()
        .map(|kv| {
            assert_eq!(kv.value.len(), VALUE_BYTES);
            (
                String::from_utf8_lossy(&kv.key).into_owned(),
                kv.mod_revision,
            )
        })
        .collect();
    assert_eq!(on_disk, acked);
    assert!(!on_disk.contains_key(failed_key));
    let next = store
        .put(Bytes::from(failed_key.to_string()), value())
        .await
        .expect("writes are taken again");
    assert_eq!(next, last + 1);
}
