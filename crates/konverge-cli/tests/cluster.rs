//! Several `konverge up` over one etcd, as the servers of one cluster: they share the
//! cluster's credentials (`--credentials-dir`), each serves on an address of its own with a
//! serving certificate naming it, and a kubeconfig or a ServiceAccount token of one server is
//! taken by the others.
//!
//! Runs when the `etcd` feature is built (the test command builds every feature) and an
//! `etcd` binary is installed.

#![cfg(feature = "etcd")]

mod common;

use common::Up;

/// A fresh etcd, or `None` (the test is skipped, saying why) when none can run here.
fn etcd(runtime: &tokio::runtime::Runtime) -> Option<konverge_store_etcd::testing::EtcdServer> {
    match runtime.block_on(konverge_store_etcd::testing::EtcdServer::start()) {
        Ok(server) => Some(server),
        Err(konverge_store_etcd::testing::Error::NotFound) => {
            eprintln!("skipping: no etcd installed");
            None
        }
        Err(other) => panic!("starting etcd: {other}"),
    }
}

/// `konverge up` on `ip` over `store`, with the cluster's credentials in `shared`.
fn server(store: &str, shared: &std::path::Path, ip: &str, extra: &[&str]) -> Up {
    let shared = shared.display().to_string();
    let mut args = vec![
        "--store",
        store,
        "--credentials-dir",
        &shared,
        "--bind-address",
        ip,
        "--nodes",
        "0",
    ];
    args.extend_from_slice(extra);
    Up::start_with(&args)
}

#[test]
fn servers_over_one_etcd_share_credentials_and_serve_their_own_addresses() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(etcd) = etcd(&runtime) else { return };
    let store = format!("etcd://{}", etcd.endpoint().trim_start_matches("http://"));
    let shared = tempfile::tempdir().expect("temp dir");
    let first = server(&store, shared.path(), "127.0.0.2", &[]);
    let second = server(&store, shared.path(), "127.0.0.3", &["--controllers", ""]);
    let second_url = format!("https://127.0.0.3:{}", second.port);

    // Each kubeconfig names its own server.
    let server_of = |up: &Up| {
        up.ok(&[
            "config",
            "view",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ])
    };
    assert_eq!(
        server_of(&first),
        format!("https://127.0.0.2:{}", first.port)
    );
    assert_eq!(server_of(&second), second_url);

    // The first server's kubeconfig reaches the second: the same CA vouches for its serving
    // certificate, which names 127.0.0.3, and the same admin token is taken.
    first.ok(&["create", "configmap", "written-on-the-first"]);
    let read = first.ok(&[
        "--server",
        &second_url,
        "get",
        "configmap",
        "written-on-the-first",
        "-o",
        "jsonpath={.metadata.name}",
    ]);
    assert_eq!(read, "written-on-the-first");

    // A ServiceAccount token issued through the first server is taken by the second.
    let token = first.ok(&["create", "token", "default", "-n", "default"]);
    let who = first.ok(&[
        "--server",
        &second_url,
        "--token",
        token.trim(),
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(who, "system:serviceaccount:default:default");

    // A wrong token is refused by both, so the check above is real.
    for url in [
        format!("https://127.0.0.2:{}", first.port),
        second_url.clone(),
    ] {
        let (code, _, err) = first.run(
            &["--server", &url, "--token", "nonesuch", "get", "ns"],
            None,
        );
        assert_ne!(code, Some(0), "{url}");
        assert!(
            err.contains("Unauthorized") || err.contains("provide credentials"),
            "{err}"
        );
    }
}
