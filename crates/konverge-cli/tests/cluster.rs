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
    server_on(None, store, shared, ip, extra)
}

/// [`server`], on `port` when given.
fn server_on(
    port: Option<u16>,
    store: &str,
    shared: &std::path::Path,
    ip: &str,
    extra: &[&str],
) -> Up {
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
    match port {
        Some(port) => Up::start_on(port, &args),
        None => Up::start_with(&args),
    }
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

    // A client certificate signed by the shared CA, issued from the second server's data
    // directory, is taken by the first.
    let alice = second.dir.path().join("alice.kubeconfig");
    let issued = std::process::Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args([
            "kubeconfig",
            "--user",
            "alice",
            "--group",
            "system:masters",
            "--data-dir",
        ])
        .arg(second.dir.path())
        .arg("--credentials-dir")
        .arg(shared.path())
        .arg("-o")
        .arg(&alice)
        .output()
        .expect("konverge kubeconfig");
    assert!(
        issued.status.success(),
        "{}",
        String::from_utf8_lossy(&issued.stderr)
    );
    let who = std::process::Command::new("kubectl")
        .env("KUBECONFIG", &alice)
        .args(["--server", &format!("https://127.0.0.2:{}", first.port)])
        .args([
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .output()
        .expect("kubectl");
    assert_eq!(
        String::from_utf8_lossy(&who.stdout),
        "alice",
        "{}",
        String::from_utf8_lossy(&who.stderr)
    );

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

/// Waits until `check` gives something, polling on the real clock (the servers are other
/// processes); fails the test, naming `what`, after `patience`.
fn until<T>(what: &str, patience: std::time::Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + patience;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Who holds the `kube-system/kube-controller-manager` Lease, as `up` reads it.
fn kcm_leader(up: &Up) -> Option<String> {
    let (code, out, _) = up.run(
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-controller-manager",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    (code == Some(0) && !out.trim().is_empty()).then(|| out.trim().to_string())
}

/// kube-controller-manager's loops run on the server holding its Lease only, and move to
/// another server once the Lease expires (15 s) when that one freezes or is killed.
#[test]
fn the_control_loops_follow_the_kube_controller_manager_lease() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(etcd) = etcd(&runtime) else { return };
    let store = format!("etcd://{}", etcd.endpoint().trim_start_matches("http://"));
    let shared = tempfile::tempdir().expect("temp dir");
    let mut servers = vec![
        server(&store, shared.path(), "127.0.0.2", &["--controllers", ""]),
        server(&store, shared.path(), "127.0.0.3", &["--controllers", ""]),
    ];
    let patience = std::time::Duration::from_secs(30);
    let leader = until("one server holds the Lease", patience, || {
        kcm_leader(&servers[0])
    });
    let leading = servers
        .iter()
        .position(|up| leader.ends_with(&up.dir.path().display().to_string()))
        .unwrap_or_else(|| panic!("the holder {leader} is neither server"));

    // The loops act: a new namespace gets its `default` ServiceAccount.
    let has_default_account = |up: &Up, namespace: &str| {
        let (code, _, _) = up.run(&["get", "serviceaccount", "default", "-n", namespace], None);
        (code == Some(0)).then_some(())
    };
    servers[0].ok(&["create", "namespace", "before"]);
    until(
        "the leader's loops make the default ServiceAccount",
        patience,
        || has_default_account(&servers[0], "before"),
    );

    // The leader freezes (SIGSTOP) holding the Lease: until the Lease expires, nobody acts,
    // not the other server either.
    let mut frozen = servers.remove(leading);
    let pid = frozen.child.id().to_string();
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([name, &pid])
            .status();
        assert!(sent.is_ok_and(|s| s.success()), "kill {name} {pid}");
    };
    signal("-STOP");
    let survivor = &servers[0];
    survivor.ok(&["create", "namespace", "during"]);
    // Long enough for a standby's loops to have acted (they settle in 20 ms), well inside
    // the 15 s lease.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        has_default_account(survivor, "during").is_none(),
        "the standby acted while the leader still held the Lease"
    );

    // It takes the Lease over once it expires, and its loops act on what is pending.
    let next = until("the survivor takes the Lease over", patience, || {
        kcm_leader(survivor).filter(|holder| *holder != leader)
    });
    assert!(
        next.ends_with(&survivor.dir.path().display().to_string()),
        "{next}"
    );
    until(
        "the survivor's loops make the default ServiceAccount",
        patience,
        || has_default_account(survivor, "during"),
    );

    // The frozen leader is killed for good (kill -9); the survivor goes on.
    frozen.child.kill().expect("kill -9 the old leader");
    frozen.child.wait().expect("the old leader exits");
    survivor.ok(&["create", "namespace", "after"]);
    until("the survivor's loops go on", patience, || {
        has_default_account(survivor, "after")
    });
}

/// The addresses the `kubernetes` Endpoints and EndpointSlice list, as `up` reads them.
fn kubernetes_endpoints(up: &Up) -> (String, String) {
    let endpoints = up.ok(&[
        "get",
        "endpoints",
        "kubernetes",
        "-o",
        "jsonpath={.subsets[*].addresses[*].ip}",
    ]);
    let slice = up.ok(&[
        "get",
        "endpointslice",
        "kubernetes",
        "-o",
        "jsonpath={.endpoints[*].addresses[*]}",
    ]);
    (endpoints, slice)
}

/// The `kubernetes` Service lists the live servers: each server's lease adds it, a server
/// stopping takes itself out at once, and a killed one's lease expires (15 s unrenewed).
#[test]
fn the_kubernetes_service_lists_the_live_servers() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(etcd) = etcd(&runtime) else { return };
    let store = format!("etcd://{}", etcd.endpoint().trim_start_matches("http://"));
    let shared = tempfile::tempdir().expect("temp dir");
    // One port for all, as the replicas of kube-apiserver serve.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let start = |ip: &str| {
        server_on(
            Some(port),
            &store,
            shared.path(),
            ip,
            &["--controllers", ""],
        )
    };
    let first = start("127.0.0.2");
    let second = start("127.0.0.3");
    let third = start("127.0.0.4");
    let patience = std::time::Duration::from_secs(40);
    let listing = |up: &Up, expected: &str| {
        until(&format!("the endpoints list {expected}"), patience, || {
            let (endpoints, slice) = kubernetes_endpoints(up);
            (endpoints == expected && slice == expected).then_some(())
        })
    };
    listing(&first, "127.0.0.2 127.0.0.3 127.0.0.4");
    assert_eq!(
        first.ok(&[
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "jsonpath={.subsets[0].ports[0].port}"
        ]),
        port.to_string()
    );

    // Stopped gracefully (SIGTERM): out at once, not after the lease expires.
    let stopped_at = std::time::Instant::now();
    drop(third.stop());
    listing(&first, "127.0.0.2 127.0.0.3");
    assert!(
        stopped_at.elapsed() < LEASE_TTL,
        "a server stopping takes itself out before its lease could expire"
    );

    // Killed: out once its lease expired.
    let mut second = second;
    second.child.kill().expect("kill -9");
    second.child.wait().expect("exits");
    listing(&first, "127.0.0.2");
}

/// How long a server's lease in the `kubernetes` endpoints lasts unrenewed.
const LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(15);

/// A kube client for `up`, from the kubeconfig it wrote.
async fn client(up: &Up) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(up.kubeconfig()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// Reads on one server see the writes answered by another, and a watch resumed on another
/// server from the last resourceVersion seen misses no event and repeats none: the servers
/// are one control plane, whose resourceVersions are etcd's revisions.
#[test]
fn reads_and_watches_are_consistent_across_servers() {
    use futures::StreamExt as _;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(etcd) = etcd(&runtime) else { return };
    let store = format!("etcd://{}", etcd.endpoint().trim_start_matches("http://"));
    let shared = tempfile::tempdir().expect("temp dir");
    let first = server(&store, shared.path(), "127.0.0.2", &["--controllers", ""]);
    let second = server(&store, shared.path(), "127.0.0.3", &["--controllers", ""]);
    runtime.block_on(async {
        let on_first: Api<ConfigMap> = Api::namespaced(client(&first).await, "default");
        let on_second: Api<ConfigMap> = Api::namespaced(client(&second).await, "default");
        let configmap = |name: String| {
            serde_json::from_value::<ConfigMap>(serde_json::json!({"metadata": {"name": name}}))
                .expect("configmap")
        };
        // The second server's watch cache is running (a first list starts it).
        let listed = on_second.list(&ListParams::default()).await.expect("list");
        let start = listed.metadata.resource_version.expect("a resourceVersion");

        // Each write on the first server is in the second's very next list and get.
        for i in 0..30 {
            let name = format!("read-{i}");
            on_first
                .create(&PostParams::default(), &configmap(name.clone()))
                .await
                .expect("create");
            let listed = on_second.list(&ListParams::default()).await.expect("list");
            assert!(
                listed
                    .items
                    .iter()
                    .any(|cm| cm.metadata.name.as_deref() == Some(&name)),
                "a list on the second server missed {name}"
            );
            on_second
                .get(&name)
                .await
                .expect("get on the second server");
        }

        // A watch on the first server, cut after 10 events, resumed on the second.
        let names = |events: Vec<WatchEvent<ConfigMap>>| -> Vec<(String, String)> {
            events
                .into_iter()
                .map(|event| match event {
                    WatchEvent::Added(cm) => (
                        cm.metadata.name.unwrap_or_default(),
                        cm.metadata.resource_version.unwrap_or_default(),
                    ),
                    other => panic!("unexpected {other:?}"),
                })
                .collect()
        };
        let watch = |api: Api<ConfigMap>, from: String, count: usize| async move {
            let stream = api
                .watch(&WatchParams::default(), &from)
                .await
                .expect("watch");
            let events: Vec<WatchEvent<ConfigMap>> = stream
                .take(count)
                .map(|event| event.expect("an event"))
                .collect()
                .await;
            events
        };
        let first_part = names(watch(on_first.clone(), start.clone(), 10).await);
        let resume_from = first_part.last().expect("10 events").1.clone();
        let second_part = names(watch(on_second.clone(), resume_from, 20).await);
        let seen: Vec<String> = first_part
            .iter()
            .chain(&second_part)
            .map(|(name, _)| name.clone())
            .collect();
        let expected: Vec<String> = (0..30).map(|i| format!("read-{i}")).collect();
        assert_eq!(
            seen, expected,
            "every event once, in order, across the two servers"
        );
    });
}
