//! `konverge bench store`: what group commit buys.
//!
//! Writers put 1 KiB values under distinct keys as fast as the store acknowledges them, for a
//! fixed time at each concurrency level; every acknowledgement is a durable commit. The same
//! load runs against the embedded disk store and against a real etcd started on loopback (its
//! own write path: gRPC, raft log, fsync), and the run ends with the ratio of the two. Watch
//! fan-out measures how fast 100 watchers on one prefix all receive a stream of writes.
//! Last, each store is reopened on what the run left in it (etcd killed and started again)
//! and timed until it answers: what a restart costs once a store holds something.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use futures::StreamExt;
use konverge_store::{KeyRange, KvStore, WatchRequest, WatchResponse};
use konverge_store_disk::DiskStore;

#[derive(clap::Args)]
pub(crate) struct StoreArgs {
    /// A reduced run (about a minute): shorter phases and fewer fan-out writes.
    #[arg(long)]
    quick: bool,
    /// Seconds each concurrency level runs (default 10, or 2 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Concurrency levels to measure.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 16, 64])]
    writers: Vec<usize>,
    /// Skip the etcd side even if etcd is available.
    #[arg(long)]
    no_etcd: bool,
}

const VALUE_SIZE: usize = 1024;
const WATCHERS: usize = 100;

struct Sample {
    store: &'static str,
    writers: usize,
    commits: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }
}

pub(crate) async fn run(args: StoreArgs) -> anyhow::Result<()> {
    let phase =
        Duration::from_secs_f64(args.seconds.unwrap_or(if args.quick { 2.0 } else { 10.0 }));
    let fanout_writes = if args.quick { 2_000 } else { 20_000 };

    let disk_dir = tempfile::tempdir().context("creating a temporary directory")?;
    let disk: Arc<dyn KvStore> = Arc::new(DiskStore::open(disk_dir.path())?);
    let mut etcd = etcd::start(args.no_etcd).await;
    let etcd_store = match &etcd {
        Ok((_, store, _)) => Some(store.clone()),
        Err(why) => {
            println!("etcd: not measured: {why}");
            None
        }
    };
    if let Ok((server, _, _)) = &etcd {
        println!("etcd: {server}");
    }
    println!(
        "workload: 1 KiB values, distinct keys, {:.0} s per level, writers {:?}",
        phase.as_secs_f64(),
        args.writers
    );

    let mut samples = Vec::new();
    for &writers in &args.writers {
        samples.push(commit_load("disk", &disk, writers, phase).await?);
        if let Some(store) = &etcd_store {
            samples.push(commit_load("etcd", store, writers, phase).await?);
        }
    }
    let mut fanout = vec![("disk", watch_fanout(&disk, fanout_writes).await?)];
    if let Some(store) = &etcd_store {
        fanout.push(("etcd", watch_fanout(store, fanout_writes).await?));
    }
    let commits = |name| {
        samples
            .iter()
            .filter(|s: &&Sample| s.store == name)
            .map(|s| s.commits)
            .sum::<usize>()
            + fanout_writes
    };
    drop(disk);
    let started = Instant::now();
    let reopened = DiskStore::open(disk_dir.path())?;
    let disk_reopen = started.elapsed();
    reopened.current_revision().await?;
    drop(reopened);
    drop(etcd_store);
    let etcd_restart = match &mut etcd {
        Ok((_, _, server)) => Some(etcd::restart(server).await?),
        Err(_) => None,
    };

    println!();
    println!(
        "{:<6} {:>8} {:>12} {:>10} {:>10}",
        "store", "writers", "commits/s", "p50 ms", "p99 ms"
    );
    for s in &samples {
        println!(
            "{:<6} {:>8} {:>12.0} {:>10.3} {:>10.3}",
            s.store,
            s.writers,
            s.rate(),
            s.p50.as_secs_f64() * 1e3,
            s.p99.as_secs_f64() * 1e3
        );
    }
    println!();
    for (store, events_per_sec) in &fanout {
        println!(
            "watch fan-out {store}: {WATCHERS} watchers x {fanout_writes} writes: {events_per_sec:.0} events/s delivered"
        );
    }
    println!();
    println!(
        "reopen disk after {} commits of 1 KiB: {:.1} ms",
        commits("disk"),
        disk_reopen.as_secs_f64() * 1e3
    );
    if let Some(restart) = etcd_restart {
        println!(
            "restart etcd after {} commits of 1 KiB (killed, started, first read answered; \
             polled every 50 ms): {:.1} ms",
            commits("etcd"),
            restart.as_secs_f64() * 1e3
        );
        println!(
            "disk reopen/etcd restart time ratio: {:.3}",
            disk_reopen.as_secs_f64() / restart.as_secs_f64()
        );
    }
    if etcd_restart.is_some() {
        println!();
        for &writers in &args.writers {
            let rate = |name| {
                samples
                    .iter()
                    .find(|s| s.store == name && s.writers == writers)
                    .map(Sample::rate)
            };
            if let (Some(d), Some(e)) = (rate("disk"), rate("etcd")) {
                println!("disk/etcd commit ratio at {writers} writers: {:.2}", d / e);
            }
        }
    }
    Ok(())
}

/// `writers` tasks each putting fresh keys until `phase` is over.
async fn commit_load(
    name: &'static str,
    store: &Arc<dyn KvStore>,
    writers: usize,
    phase: Duration,
) -> anyhow::Result<Sample> {
    let value = Bytes::from(vec![b'v'; VALUE_SIZE]);
    let start = Instant::now();
    let deadline = start + phase;
    let mut tasks = Vec::with_capacity(writers);
    for writer in 0..writers {
        let store = store.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let key = Bytes::from(format!("/bench/{writers}/{writer}/{n}"));
                let t = Instant::now();
                store.put(key, value.clone()).await?;
                latencies.push(t.elapsed());
                n += 1;
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Ok(Sample {
        store: name,
        writers,
        commits: latencies.len(),
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
    })
}

/// Events per second delivered to [`WATCHERS`] watchers while 16 writers make `writes` puts.
async fn watch_fanout(store: &Arc<dyn KvStore>, writes: usize) -> anyhow::Result<f64> {
    let prefix = Bytes::from_static(b"/fanout/");
    let mut readers = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        let mut stream = store
            .watch(WatchRequest::new(KeyRange::Prefix(prefix.clone())))
            .await?;
        readers.push(tokio::spawn(async move {
            let mut seen = 0usize;
            while seen < writes {
                match stream.next().await {
                    Some(Ok(WatchResponse::Events(events))) => seen += events.len(),
                    Some(Ok(WatchResponse::Progress(_))) => {}
                    Some(Err(err)) => return Err(anyhow::Error::new(err)),
                    None => anyhow::bail!("watch ended after {seen} of {writes} events"),
                }
            }
            Ok(seen)
        }));
    }
    let start = Instant::now();
    let value = Bytes::from(vec![b'w'; VALUE_SIZE]);
    let writers = 16;
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = store.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            for n in (writer..writes).step_by(writers) {
                store
                    .put(Bytes::from(format!("/fanout/{n}")), value.clone())
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let mut delivered = 0usize;
    for reader in readers {
        delivered += reader.await??;
    }
    Ok(delivered as f64 / start.elapsed().as_secs_f64())
}

#[cfg(feature = "etcd")]
mod etcd {
    use std::sync::Arc;

    use konverge_store::KvStore;
    use konverge_store_etcd::EtcdStore;
    use konverge_store_etcd::testing::EtcdServer;

    /// Keeps etcd running; dropping it stops the server.
    pub(super) type Guard = EtcdServer;

    /// Kills `server` and starts it again on its data; how long until it answered.
    pub(super) async fn restart(server: &mut Guard) -> anyhow::Result<std::time::Duration> {
        let started = std::time::Instant::now();
        server.restart().await?;
        Ok(started.elapsed())
    }

    /// A real etcd on loopback, and a store on it.
    pub(super) async fn start(skip: bool) -> Result<(String, Arc<dyn KvStore>, Guard), String> {
        if skip {
            return Err("--no-etcd".into());
        }
        let server = EtcdServer::start().await.map_err(|e| {
            format!("could not start etcd ({e}); install it with `apt-get install -y etcd-server`")
        })?;
        let endpoint = server.endpoint();
        let store = EtcdStore::connect(std::slice::from_ref(&endpoint))
            .await
            .map_err(|e| format!("could not connect to etcd at {endpoint}: {e}"))?;
        let version = std::process::Command::new("etcd")
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.lines().next().map(str::to_string))
            .unwrap_or_else(|| "etcd".into());
        Ok((format!("{version} at {endpoint}"), Arc::new(store), server))
    }
}

#[cfg(not(feature = "etcd"))]
mod etcd {
    use std::sync::Arc;

    use konverge_store::KvStore;

    pub(super) type Guard = ();

    pub(super) async fn restart(_server: &mut Guard) -> anyhow::Result<std::time::Duration> {
        anyhow::bail!("this binary was built without the `etcd` feature")
    }

    pub(super) async fn start(_skip: bool) -> Result<(String, Arc<dyn KvStore>, Guard), String> {
        Err("this binary was built without the `etcd` feature \
             (cargo run --release -p konverge-cli --features etcd -- bench store)"
            .into())
    }
}
