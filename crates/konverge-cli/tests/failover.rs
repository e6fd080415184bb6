//! Failover of a highly available konverge: three `konverge up` over a three-member etcd
//! cluster, clients spread over them by a small TCP balancer, a steady create/update load, a
//! watch, and kube-controller-manager's controllers running a Deployment. One konverge server
//! (the controllers' leader) is killed with SIGKILL, then one etcd member: no acknowledged
//! write is lost, the watch resumes without a gap or a repeat, the controllers (and the
//! scheduler and simulated node, when they ran there) move to another server and the
//! Deployment's pods become ready, and each pod is created once.
//!
//! Runs when the `etcd` feature is built (the test command builds every feature) and an
//! `etcd` binary is installed. It prints what it measured (`FAILOVER ...` lines), which
//! docs/benchmarks.md records.

#![cfg(feature = "etcd")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Up;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use konverge_store_etcd::testing::{Error as EtcdError, EtcdCluster};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const IPS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];

/// A TCP balancer on loopback: each connection goes to the next backend that accepts it.
async fn balancer(backends: Vec<SocketAddr>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the balancer");
    let addr = listener.local_addr().expect("addr");
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            let backends = backends.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let start = next.fetch_add(1, Ordering::Relaxed);
                for i in 0..backends.len() {
                    let backend = backends[(start + i) % backends.len()];
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A kube client for the cluster through `balancer`, with the first server's credentials
/// (the serving certificates name 127.0.0.1, where the balancer listens).
async fn client(up: &Up, balancer: SocketAddr) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(up.kubeconfig()).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    config.cluster_url = format!("https://{balancer}").parse().expect("url");
    config.read_timeout = Some(Duration::from_secs(5));
    kube::Client::try_from(config).expect("client")
}

/// Who holds the Lease `kube-system/<name>`, read through `client`.
async fn holder(client: &kube::Client, name: &str) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    leases.get(name).await.ok()?.spec?.holder_identity
}

/// Waits until the Lease `name` is held by another than `from`; how long it took since
/// `since`.
async fn moved(client: &kube::Client, name: &str, from: &str, since: Instant) -> Duration {
    until(
        &format!("another server takes the {name} Lease"),
        Duration::from_secs(60),
        || async {
            holder(client, name)
                .await
                .is_some_and(|holder| holder != from)
        },
    )
    .await;
    since.elapsed()
}

/// How many of the Deployment `web`'s replicas are ready.
async fn ready_replicas(deployments: &Api<k8s_openapi::api::apps::v1::Deployment>) -> i32 {
    deployments
        .get("web")
        .await
        .ok()
        .and_then(|d| d.status?.ready_replicas)
        .unwrap_or(0)
}

/// What the writers were told was written: each object's last acknowledged value.
#[derive(Default)]
struct Acknowledged {
    values: Mutex<BTreeMap<String, u64>>,
    writes: AtomicU64,
    failed: AtomicU64,
}

/// Creates `load-<writer>-<n>` objects and updates each once, retrying every failed request
/// until it is answered, until `stop`.
async fn writer(api: Api<ConfigMap>, writer: usize, ack: Arc<Acknowledged>, stop: Arc<AtomicBool>) {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("load-{writer}-{n}");
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"load": "yes"}},
            "data": {"v": "0"},
        }))
        .expect("configmap");
        loop {
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => break,
                // Written by an attempt whose answer was lost with its server.
                Err(kube::Error::Api(status)) if status.code == 409 => break,
                Err(_) => {
                    ack.failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        ack.values.lock().unwrap().insert(name.clone(), 0);
        ack.writes.fetch_add(1, Ordering::Relaxed);
        let patch = Patch::Merge(json!({"data": {"v": "1"}}));
        loop {
            match api.patch(&name, &PatchParams::default(), &patch).await {
                Ok(_) => break,
                Err(_) => {
                    ack.failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        ack.values.lock().unwrap().insert(name, 1);
        ack.writes.fetch_add(1, Ordering::Relaxed);
        n += 1;
    }
}

/// What a watch saw: every event's (type, name, value), and how often it resumed.
#[derive(Default)]
struct Watched {
    events: Mutex<Vec<(String, String, String)>>,
    resumed: AtomicU64,
}

/// Watches `api` from `from`, resuming from the last resourceVersion seen whenever the
/// stream breaks, until `stop`.
async fn watcher(api: Api<ConfigMap>, mut from: String, seen: Arc<Watched>, stop: Arc<AtomicBool>) {
    let params = WatchParams::default().labels("load=yes").timeout(10);
    while !stop.load(Ordering::Relaxed) {
        let Ok(stream) = api.watch(&params, &from).await else {
            seen.resumed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        futures::pin_mut!(stream);
        loop {
            let event = tokio::select! {
                event = stream.next() => event,
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::Relaxed) { return; }
                    continue;
                }
            };
            match event {
                Some(Ok(WatchEvent::Added(cm))) | Some(Ok(WatchEvent::Modified(cm))) => {
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    let value = cm
                        .data
                        .as_ref()
                        .and_then(|d| d.get("v").cloned())
                        .unwrap_or_default();
                    from = cm.metadata.resource_version.clone().unwrap_or(from);
                    seen.events
                        .lock()
                        .unwrap()
                        .push(("PUT".into(), name, value));
                }
                Some(Ok(WatchEvent::Bookmark(b))) => from = b.metadata.resource_version,
                Some(Ok(WatchEvent::Deleted(_))) => {}
                Some(Ok(WatchEvent::Error(status))) => {
                    panic!("the watch ended with {status:?}: a resume from {from} was refused")
                }
                Some(Err(_)) | None => {
                    seen.resumed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
    }
}

/// `read`, retried (every 100 ms, at most 50 times) while it fails, as a client retries a
/// request whose server or etcd member just died; the failures are counted in `failed`.
async fn retried<T, F, Fut>(failed: &AtomicU64, mut read: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    for _ in 0..50 {
        match read().await {
            Ok(value) => return value,
            Err(error) => {
                eprintln!("a read failed, retrying: {error}");
                failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    panic!("a read kept failing");
}

/// Waits until `check` holds, polling every 100 ms, for at most `patience`; how long it took.
async fn until<F, Fut>(what: &str, patience: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < patience,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

#[test]
fn a_killed_server_and_a_killed_etcd_member_lose_nothing() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut etcd = match runtime.block_on(EtcdCluster::start(3)) {
        Ok(cluster) => cluster,
        Err(EtcdError::NotFound) => {
            eprintln!("skipping: no etcd installed");
            return;
        }
        Err(other) => panic!("starting etcd: {other}"),
    };
    let store = format!(
        "etcd://{}",
        etcd.endpoints()
            .iter()
            .map(|e| e.trim_start_matches("http://"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let shared = tempfile::tempdir().expect("temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let shared_dir = shared.path().display().to_string();
    let mut servers: Vec<Option<Up>> = IPS
        .iter()
        .map(|ip| {
            Some(Up::start_on(
                port,
                &[
                    "--store",
                    &store,
                    "--credentials-dir",
                    &shared_dir,
                    "--bind-address",
                    ip,
                    "--nodes",
                    "1",
                ],
            ))
        })
        .collect();
    let backends: Vec<SocketAddr> = IPS
        .iter()
        .map(|ip| format!("{ip}:{port}").parse().expect("addr"))
        .collect();

    runtime.block_on(async {
        let balancer = balancer(backends).await;
        let first = servers[0].as_ref().expect("running");
        let kube = client(first, balancer).await;
        let configmaps: Api<ConfigMap> = Api::namespaced(kube.clone(), "default");
        let pods: Api<Pod> = Api::namespaced(kube.clone(), "default");
        let patience = Duration::from_secs(60);

        // A Deployment of 3, which the controllers' leader runs.
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(kube.clone(), "default");
        let deployment = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
        }))
        .expect("deployment");
        deployments
            .create(&PostParams::default(), &deployment)
            .await
            .expect("create the Deployment");
        let web = ListParams::default().labels("app=web");
        until("the Deployment's 3 pods are ready", patience, || {
            let deployments = deployments.clone();
            async move { ready_replicas(&deployments).await == 3 }
        })
        .await;
        let created_pods = pods.list(&web).await.expect("list pods");
        let pods_from = created_pods.metadata.resource_version.expect("rv");
        let mut ever_created: BTreeSet<String> = created_pods
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();

        // The load and the watch.
        let start_rv = configmaps
            .list(&ListParams::default().labels("load=yes"))
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("rv");
        let stop = Arc::new(AtomicBool::new(false));
        let stop_watch = Arc::new(AtomicBool::new(false));
        let ack = Arc::new(Acknowledged::default());
        let watched = Arc::new(Watched::default());
        let mut writers = Vec::new();
        for w in 0..2 {
            writers.push(tokio::spawn(writer(configmaps.clone(), w, ack.clone(), stop.clone())));
        }
        let watch = tokio::spawn(watcher(
            configmaps.clone(),
            start_rv,
            watched.clone(),
            stop_watch.clone(),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;

        // Kill -9 the konverge server leading the controllers.
        let leader = holder(&kube, "kube-controller-manager")
            .await
            .expect("a leader");
        let scheduler = holder(&kube, "kube-scheduler").await.expect("a scheduler");
        let leading = servers
            .iter()
            .position(|up| {
                up.as_ref()
                    .is_some_and(|up| leader.ends_with(&up.dir.path().display().to_string()))
            })
            .expect("the leader is one of the servers");
        let mut killed = servers[leading].take().expect("running");
        let killed_at = Instant::now();
        killed.child.kill().expect("kill -9");
        killed.child.wait().expect("exits");
        let writes_before = ack.writes.load(Ordering::Relaxed);
        let failover = moved(&kube, "kube-controller-manager", &leader, killed_at).await;
        // The scheduler and the simulated nodes move too, if they ran there.
        let scheduler_failover = if scheduler == leader {
            Some(moved(&kube, "kube-scheduler", &scheduler, killed_at).await)
        } else {
            None
        };

        // The new leader's controllers act: the Deployment scaled to 5 converges.
        deployments
            .patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}})))
            .await
            .expect("scale");
        let converged = until("the Deployment's 5 pods are ready", patience, || {
            let deployments = deployments.clone();
            async move { ready_replicas(&deployments).await == 5 }
        })
        .await;

        // Kill -9 an etcd member; the load goes on.
        let writes_at_etcd_kill = ack.writes.load(Ordering::Relaxed);
        etcd.kill(0).await;
        until("writes go on after an etcd member died", patience, || {
            let ack = ack.clone();
            async move { ack.writes.load(Ordering::Relaxed) > writes_at_etcd_kill + 20 }
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        for task in writers {
            task.await.expect("writer");
        }

        // No acknowledged write is lost.
        let load = ListParams::default().labels("load=yes");
        let stored: BTreeMap<String, String> = retried(&ack.failed, || configmaps.list(&load))
            .await
            .items
            .into_iter()
            .map(|cm| {
                let value = cm.data.and_then(|d| d.get("v").cloned()).unwrap_or_default();
                (cm.metadata.name.unwrap_or_default(), value)
            })
            .collect();
        let acknowledged = ack.values.lock().unwrap().clone();
        let mut lost = 0;
        for (name, value) in &acknowledged {
            match stored.get(name) {
                Some(v) if v.parse::<u64>().is_ok_and(|v| v >= *value) => {}
                other => {
                    lost += 1;
                    eprintln!("lost: {name} acknowledged {value}, stored {other:?}");
                }
            }
        }
        assert_eq!(lost, 0, "acknowledged writes lost");

        // The watch saw every stored change once, in order per object, across the resumes.
        let changes: usize = stored
            .values()
            .map(|v| v.parse::<usize>().unwrap_or(0) + 1)
            .sum();
        let caught_up = until("the watch has caught up", patience, || {
            let watched = watched.clone();
            async move { watched.events.lock().unwrap().len() >= changes }
        });
        caught_up.await;
        stop_watch.store(true, Ordering::Relaxed);
        watch.await.expect("watcher");
        let events = watched.events.lock().unwrap().clone();
        let mut per_object: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (_, name, value) in &events {
            per_object.entry(name.clone()).or_default().push(value.clone());
        }
        for (name, value) in &stored {
            let seen = per_object.get(name).cloned().unwrap_or_default();
            let expected: Vec<String> = (0..=value.parse::<u64>().unwrap_or(0)).map(|v| v.to_string()).collect();
            assert_eq!(seen, expected, "the watch's events of {name}");
        }

        // Each pod was created once: the controllers acted once per change.
        let since = WatchParams::default().labels("app=web").timeout(1);
        let mut stream = Box::pin(retried(&ack.failed, || pods.watch(&since, &pods_from)).await);
        while let Some(Ok(event)) = stream.next().await {
            if let WatchEvent::Added(pod) = event {
                ever_created.extend(pod.metadata.name);
            }
        }
        assert_eq!(ever_created.len(), 5, "pods ever created: {ever_created:?}");

        println!(
            "FAILOVER writes acknowledged {} (before the server kill {writes_before}), lost {lost}, \
             requests failed and retried {}, watch resumptions {}, controllers' Lease moved in {:.1} s, \
             scheduler's and nodes' Lease {}, Deployment ready {:.1} s later, pods created {}",
            ack.writes.load(Ordering::Relaxed),
            ack.failed.load(Ordering::Relaxed),
            watched.resumed.load(Ordering::Relaxed),
            failover.as_secs_f64(),
            scheduler_failover.map_or("held elsewhere, unmoved".to_string(), |d| format!(
                "moved in {:.1} s",
                d.as_secs_f64()
            )),
            converged.as_secs_f64(),
            ever_created.len(),
        );
    });
}
