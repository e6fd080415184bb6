//! `konverge bench lists`: a namespace of many ConfigMaps, created, then read whole.
//!
//! The workload of the issue that asked for it: 50,000 ConfigMaps of 1.4 KiB created with
//! `generateName` by 32 `kube::Client` tasks over HTTPS, then the whole namespace listed in
//! one request, twice as JSON and twice as Kubernetes protobuf. Measured:
//!
//! - the create rate and the server's CPU time per create;
//! - each full list's time to the last byte and its size;
//! - the server's RSS idle, after the creates, after each list, its peak, and a few seconds
//!   after the last list (what it gives back).
//!
//! The anchor is a real etcd started in the same run holding the same objects (the bytes
//! konverge serves for each, under the keys kube-apiserver would use, put by as many
//! clients): its put rate, its RSS, and the time to read them all back in pages of 1,000. kube-apiserver cannot run without it, so these
//! are a lower bound on what a kube-apiserver + etcd control plane holds and spends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use super::load::ms;
use super::up::{Standalone, cpu_time, peak_rss_mib, rss_mib, start_standalone};

#[derive(clap::Args)]
pub(crate) struct ListsArgs {
    /// A reduced run: 5,000 ConfigMaps.
    #[arg(long)]
    quick: bool,
    /// How many ConfigMaps to create (default 50,000, or 5,000 with --quick).
    #[arg(long)]
    objects: Option<usize>,
    /// Skip the etcd anchor even if etcd is available.
    #[arg(long)]
    no_etcd: bool,
}

/// The concurrent clients that create the ConfigMaps.
const CLIENTS: usize = 32;
/// The namespace that holds them.
const NAMESPACE: &str = "bench-lists";
/// Size of each ConfigMap's one value: with its metadata, about 1.4 KiB as stored.
const PAYLOAD: usize = 1_000;

/// One full list: how long to its last byte, and how many bytes.
struct Listed {
    took: Duration,
    bytes: usize,
    rss_after: f64,
}

pub(crate) async fn run(args: ListsArgs) -> anyhow::Result<()> {
    let objects = args
        .objects
        .unwrap_or(if args.quick { 5_000 } else { 50_000 });
    let dir = tempfile::tempdir()?;
    let server = start_standalone(dir.path()).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss(&server);

    let api: Api<ConfigMap> = Api::namespaced(server.client.clone(), NAMESPACE);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(server.client.clone());
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some(NAMESPACE.into());
    namespaces.create(&PostParams::default(), &ns).await?;

    let cpu_before = cpu_time(server.pid);
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let api = api.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut cm = ConfigMap::default();
            cm.metadata.generate_name = Some("cm-".into());
            cm.data = Some([("payload".to_string(), "x".repeat(PAYLOAD))].into());
            let mut stored = 0usize;
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < objects {
                let created = api.create(&PostParams::default(), &cm).await?;
                stored = serde_json::to_vec(&created)?.len();
            }
            anyhow::Ok(stored)
        }));
    }
    let mut object_bytes = 0;
    for task in tasks {
        object_bytes = object_bytes.max(task.await??);
    }
    let creating = started.elapsed();
    let create_cpu = match (cpu_before, cpu_time(server.pid)) {
        (Some(before), Some(after)) => Some((after - before) / u32::try_from(objects.max(1))?),
        _ => None,
    };
    let after_creates = rss(&server);

    let mut json = Vec::new();
    let mut protobuf = Vec::new();
    for _ in 0..2 {
        json.push(list(&server, "application/json", objects).await?);
    }
    for _ in 0..2 {
        protobuf.push(list(&server, konverge_protobuf_type(), objects).await?);
    }
    let peak = peak_rss_mib(server.pid).unwrap_or(f64::NAN);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let settled = rss(&server);
    let server_cpu = cpu_time(server.pid);
    drop(server);

    let etcd = etcd::measure(args.no_etcd, objects, object_bytes).await;

    println!(
        "{objects} ConfigMaps of {:.2} KiB (as served) in one namespace of `konverge up` (disk store), {CLIENTS} HTTPS clients",
        object_bytes as f64 / 1024.0
    );
    println!(
        "  create: {:.0}/s{}",
        objects as f64 / creating.as_secs_f64(),
        create_cpu.map_or(String::new(), |c| format!(
            ", server CPU {:.3} ms per create",
            ms(c)
        ))
    );
    for (what, runs) in [("JSON", &json), ("protobuf", &protobuf)] {
        for (i, l) in runs.iter().enumerate() {
            println!(
                "  full list {} as {what}: {:.0} ms, {:.1} MiB, RSS after {:.1} MiB",
                i + 1,
                ms(l.took),
                l.bytes as f64 / (1024.0 * 1024.0),
                l.rss_after
            );
        }
    }
    println!(
        "  RSS: idle {idle:.1} MiB, after the creates {after_creates:.1} MiB, peak {peak:.1} MiB, 5 s after the last list {settled:.1} MiB"
    );
    if let Some(cpu) = server_cpu {
        println!(
            "  server CPU over the whole run: {:.1} s",
            cpu.as_secs_f64()
        );
    }
    let best = |runs: &[Listed]| runs.iter().map(|l| l.took).min().unwrap_or_default();
    println!(
        "protobuf/JSON full list time ratio (best of 2 each): {:.2}",
        best(&protobuf).as_secs_f64() / best(&json).as_secs_f64()
    );
    let data = (objects * object_bytes) as f64 / (1024.0 * 1024.0);
    println!(
        "RSS after the lists / the objects' JSON ({data:.1} MiB): {:.2}",
        json.last().map_or(f64::NAN, |l| l.rss_after) / data
    );
    match etcd {
        Ok(anchor) => {
            println!(
                "anchor: etcd at {} holding the same {objects} objects: RSS {:.1} MiB, read back in pages of 1,000 in {:.0} ms",
                anchor.endpoint,
                anchor.rss,
                ms(anchor.read)
            );
            println!(
                "konverge creates (HTTPS, kube::Client)/etcd puts of the same at {CLIENTS} clients: {:.2} ({:.0}/s)",
                objects as f64 / creating.as_secs_f64() / anchor.put_rate,
                anchor.put_rate
            );
            println!(
                "konverge RSS after the lists/etcd RSS: {:.2}",
                json.last().map_or(f64::NAN, |l| l.rss_after) / anchor.rss
            );
            println!(
                "konverge full JSON list/etcd read of the same: {:.2}",
                best(&json).as_secs_f64() / anchor.read.as_secs_f64()
            );
        }
        Err(why) => println!("anchor: etcd not measured: {why}"),
    }
    Ok(())
}

fn konverge_protobuf_type() -> &'static str {
    "application/vnd.kubernetes.protobuf"
}

fn rss(server: &Standalone) -> f64 {
    rss_mib(server.pid).unwrap_or(f64::NAN)
}

/// Lists the whole namespace in one request, accepting `accept`, and reads the body to the
/// end.
async fn list(server: &Standalone, accept: &str, objects: usize) -> anyhow::Result<Listed> {
    let req = http::Request::get(format!("/api/v1/namespaces/{NAMESPACE}/configmaps"))
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())?;
    let started = Instant::now();
    let response = server.client.send(req).await?;
    if !response.status().is_success() {
        bail!("list as {accept} answered {}", response.status());
    }
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response.into_body().collect_bytes().await?;
    let took = started.elapsed();
    if !content_type.starts_with(accept) {
        bail!("asked for {accept}, got {content_type}");
    }
    if accept == "application/json" {
        let listed: serde_json::Value = serde_json::from_slice(&body)?;
        let items = listed["items"].as_array().map_or(0, Vec::len);
        // The namespace also holds its kube-root-ca.crt.
        if items < objects {
            bail!("listed {items} of {objects} ConfigMaps");
        }
    }
    Ok(Listed {
        took,
        bytes: body.len(),
        rss_after: rss_mib(server.pid).context("reading the server's RSS")?,
    })
}

struct Anchor {
    endpoint: String,
    rss: f64,
    read: Duration,
    /// Puts per second of the same values under the same keys, at the same concurrency.
    put_rate: f64,
}

#[cfg(feature = "etcd")]
mod etcd {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use konverge_store::{KeyRange, KvStore, RangeRequest};
    use konverge_store_etcd::EtcdStore;
    use konverge_store_etcd::testing::EtcdServer;

    use super::{Anchor, CLIENTS, NAMESPACE};
    use crate::bench::up::rss_mib;

    pub(super) async fn measure(
        skip: bool,
        objects: usize,
        object_bytes: usize,
    ) -> Result<Anchor, String> {
        if skip {
            return Err("--no-etcd".into());
        }
        let server = EtcdServer::start().await.map_err(|e| {
            format!("could not start etcd ({e}); install it with `apt-get install -y etcd-server`")
        })?;
        let store: Arc<dyn KvStore> = Arc::new(
            EtcdStore::connect(std::slice::from_ref(&server.endpoint()))
                .await
                .map_err(|e| e.to_string())?,
        );
        let value = Bytes::from(vec![b'x'; object_bytes]);
        let prefix = format!("/registry/configmaps/{NAMESPACE}/");
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let putting = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..CLIENTS {
            let (store, value, prefix, next) =
                (store.clone(), value.clone(), prefix.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if n >= objects {
                        return Ok::<_, String>(());
                    }
                    store
                        .put(Bytes::from(format!("{prefix}cm-{n:06}")), value.clone())
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }));
        }
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
        let put_rate = objects as f64 / putting.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let started = Instant::now();
        let mut from = Bytes::from(prefix.clone());
        let end = Bytes::from(format!("{}0", prefix.trim_end_matches('/')));
        let mut read = 0usize;
        loop {
            let page = store
                .range(
                    RangeRequest::new(KeyRange::range(from.clone(), end.clone())).with_limit(1_000),
                )
                .await
                .map_err(|e| e.to_string())?;
            read += page.kvs.len();
            match page.kvs.last() {
                Some(last) if page.more => {
                    let mut after = last.key.to_vec();
                    after.push(0);
                    from = Bytes::from(after);
                }
                _ => break,
            }
        }
        let took = started.elapsed();
        if read != objects {
            return Err(format!("etcd read back {read} of {objects}"));
        }
        let rss = server.pid().and_then(rss_mib).unwrap_or(f64::NAN);
        Ok(Anchor {
            endpoint: server.endpoint(),
            rss,
            read: took,
            put_rate,
        })
    }
}

#[cfg(not(feature = "etcd"))]
mod etcd {
    use super::Anchor;

    pub(super) async fn measure(
        _skip: bool,
        _objects: usize,
        _object_bytes: usize,
    ) -> Result<Anchor, String> {
        Err("built without the `etcd` feature (cargo run --release -p konverge-cli --features etcd -- bench lists)".into())
    }
}
