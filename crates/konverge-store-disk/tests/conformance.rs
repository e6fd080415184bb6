//! The shared conformance suite against [`DiskStore`], each case in a fresh directory.

use konverge_store::conformance::TestStore;
use konverge_store_disk::{DiskStore, DiskStoreOptions};

konverge_store::conformance_suite!(async {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = DiskStore::open(dir.path()).expect("open");
    TestStore::new(store, dir)
});

/// The same suite with a watch window of one event, so every watch that is not at the head
/// catches up from the on-disk change log.
mod disk_catch_up {
    use super::*;

    konverge_store::conformance_suite!(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = DiskStoreOptions {
            watch_window_events: 1,
            ..DiskStoreOptions::default()
        };
        let store = DiskStore::open_with(dir.path(), options).expect("open");
        TestStore::new(store, dir)
    });
}
