//! The shared [`KvStore`](konverge_store::KvStore) conformance suite, run against a real etcd:
//! one `etcd` child process per test case.
//!
//! The suite runs twice: on a store that owns the whole of etcd, and (module `prefixed`) on
//! one confined to a key prefix in an etcd that also holds keys before, after and around it.

use konverge_store::conformance::TestStore;
use konverge_store_etcd::EtcdStore;
use konverge_store_etcd::testing::EtcdServer;

/// A fresh etcd and a store on all of it; the server is the guard.
async fn etcd_store() -> TestStore {
    let server = EtcdServer::start().await.expect("start etcd");
    let store = EtcdStore::connect(&[server.endpoint()])
        .await
        .expect("connect to etcd");
    TestStore::new(store, server)
}

konverge_store::conformance_suite!(crate::etcd_store());

mod prefixed {
    use super::*;

    /// A fresh etcd with keys outside the prefix, and a store confined to the prefix.
    async fn prefixed_store() -> TestStore {
        let server = EtcdServer::start().await.expect("start etcd");
        let store = EtcdStore::connect(&[server.endpoint()])
            .await
            .expect("connect to etcd");
        // Neighbours of every kind: sorting before the prefix, right after it (the prefix end
        // "konverge0"), the prefix itself without a key, and far after it.
        for key in ["a", "konverge", "konverge0", "konverge/", "\u{7f}zzz"] {
            konverge_store::KvStore::put(&store, key.into(), "noise".into())
                .await
                .expect("write a neighbour");
        }
        TestStore::new(store.with_prefix("konverge/"), server)
    }

    konverge_store::conformance_suite!(prefixed_store());
}
