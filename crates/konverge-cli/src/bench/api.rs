//! `konverge bench api`: the API server as clients see it.
//!
//! - Readiness: an in-process server over the memory store (build until it serves), and
//!   `konverge up` as a process on a fresh disk store (spawn until `/readyz` answers over
//!   HTTPS), first start (generating credentials) and restart.
//! - Idle memory: RSS of `konverge up` a moment after it is ready.
//! - Throughput and latency of create, get, update, list and watch with `kube::Client` over
//!   HTTPS at 1 and 32 concurrent clients, and a list of 10,000 ConfigMaps.
//! - What admission costs with nothing configured for it: creates and gets at 32 clients
//!   against two `konverge up` side by side, one with every admission plugin disabled
//!   (the anchor).
//!
//! The anchor is a real etcd started in the same run: kube-apiserver cannot run without one,
//! so etcd's own readiness, idle memory and write rate are a lower bound on what a
//! kube-apiserver + etcd control plane costs on this machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

use super::compare::{Contender, Results, Verb, alternate};
use super::load::{Stats, ms, phase};
use super::up::{cpu_time, rss_mib, start_standalone, start_standalone_with};

#[derive(clap::Args)]
pub(crate) struct ApiArgs {
    /// A reduced run (under a minute).
    #[arg(long)]
    quick: bool,
    /// Seconds each throughput phase runs (default 5, or 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// How many ConfigMaps the large list holds (default 10,000, or 2,000 with --quick).
    #[arg(long)]
    list_size: Option<usize>,
    /// Skip the etcd anchor even if etcd is available.
    #[arg(long)]
    no_etcd: bool,
}

fn cm(name: &str, payload: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.to_string());
    c.data = Some([("payload".to_string(), payload.to_string())].into());
    c
}

pub(crate) async fn run(args: ApiArgs) -> anyhow::Result<()> {
    let seconds =
        Duration::from_secs_f64(args.seconds.unwrap_or(if args.quick { 1.0 } else { 5.0 }));
    let list_size = args
        .list_size
        .unwrap_or(if args.quick { 2_000 } else { 10_000 });
    let payload = "x".repeat(1024);

    // In-process readiness: build the server over a memory store, 50 times. Each is stopped
    // before the next is built, as a test's server is when the test ends: the loops of
    // servers still running would compete with the build being timed.
    let mut in_process = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let server =
            konverge_apiserver::ApiServer::builder(Arc::new(konverge_store::MemStore::new()))
                .build()
                .await?;
        let _router = server.router();
        in_process.push(t.elapsed());
        server.stop();
    }
    in_process.sort_unstable();
    let in_process_median = in_process[in_process.len() / 2];

    // Standalone readiness: first start (credentials generated) and restart, 5 times each.
    let mut first_starts = Vec::new();
    let mut restarts = Vec::new();
    let mut restarts_announced = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir()?;
        let first = start_standalone(dir.path()).await?;
        first_starts.push(first.ready);
        drop(first);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let again = start_standalone(dir.path()).await?;
        restarts.push(again.ready);
        restarts_announced.push(again.announced);
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss.extend(rss_mib(again.pid));
    }
    first_starts.sort_unstable();
    restarts.sort_unstable();
    restarts_announced.sort_unstable();
    rss.sort_by(f64::total_cmp);
    let median = |v: &[Duration]| v[v.len() / 2];
    let idle_rss = rss.get(rss.len() / 2).copied().unwrap_or(f64::NAN);

    // The anchor.
    let etcd = etcd::measure(args.no_etcd, seconds, &payload).await;

    // Throughput over HTTPS against one standalone server.
    let dir = tempfile::tempdir()?;
    let server = start_standalone(dir.path()).await?;
    let api: Api<ConfigMap> = Api::namespaced(server.client.clone(), "default");
    let mut rows: Vec<(String, usize, Stats)> = Vec::new();
    // The server's CPU time per create, at each client count (its controllers included).
    let mut create_cpu: Vec<(usize, Duration)> = Vec::new();
    for clients in [1usize, 32] {
        let a = api.clone();
        let p = payload.clone();
        let cpu_before = cpu_time(server.pid);
        let create = phase(clients, seconds, move |c, n| {
            let a = a.clone();
            let obj = cm(&format!("c{clients}-{c}-{n}"), &p);
            async move {
                a.create(&PostParams::default(), &obj).await?;
                Ok(())
            }
        })
        .await?;
        if let (Some(before), Some(after)) = (cpu_before, cpu_time(server.pid)) {
            create_cpu.push((clients, (after - before) / create.ops.max(1) as u32));
        }
        // Every client created at least this many: gets and updates stay within them.
        let created_per_client = create.min_per_client.max(1);
        rows.push(("create".into(), clients, create));
        let a = api.clone();
        let get = phase(clients, seconds, move |c, n| {
            let a = a.clone();
            async move {
                a.get(&format!("c{clients}-{c}-{}", n % created_per_client))
                    .await?;
                Ok(())
            }
        })
        .await?;
        rows.push(("get".into(), clients, get));
        let a = api.clone();
        let update = phase(clients, seconds, move |c, n| {
            let a = a.clone();
            async move {
                let patch = serde_json::json!({"data": {"n": n.to_string()}});
                a.patch(
                    &format!("c{clients}-{c}-{}", n % created_per_client),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await?;
                Ok(())
            }
        })
        .await?;
        rows.push(("update".into(), clients, update));
        let a = api.clone();
        let list = phase(clients, seconds, move |_, _| {
            let a = a.clone();
            async move {
                a.list(&ListParams::default().limit(100)).await?;
                Ok(())
            }
        })
        .await?;
        rows.push(("list 100".into(), clients, list));
    }

    // Watch: 32 watchers, one writer; events delivered per second.
    let watchers = 32;
    let writes = if args.quick { 500 } else { 2_000 };
    let wapi: Api<ConfigMap> = Api::namespaced(server.client.clone(), "kube-public");
    let mut streams = Vec::new();
    let rv = wapi
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    for _ in 0..watchers {
        streams.push(wapi.watch(&WatchParams::default(), &rv).await?.boxed());
    }
    let started = Instant::now();
    let readers: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut n = 0usize;
                while n < writes {
                    match s.next().await {
                        Some(Ok(WatchEvent::Added(_))) => n += 1,
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Err(anyhow::Error::new(e)),
                        None => bail!("watch ended"),
                    }
                }
                Ok(n)
            })
        })
        .collect();
    for n in 0..writes {
        wapi.create(&PostParams::default(), &cm(&format!("w-{n}"), "w"))
            .await?;
    }
    let mut delivered = 0;
    for r in readers {
        delivered += r.await??;
    }
    let watch_rate = delivered as f64 / started.elapsed().as_secs_f64();

    // The large list.
    let lapi: Api<ConfigMap> = Api::namespaced(server.client.clone(), "kube-node-lease");
    let fill = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for n in 0..list_size {
        let a = lapi.clone();
        let permit = fill.clone().acquire_owned().await?;
        let p = payload.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            a.create(&PostParams::default(), &cm(&format!("l-{n:05}"), &p))
                .await
        }));
    }
    for t in tasks {
        t.await??;
    }
    let mut list_times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let listed = lapi.list(&ListParams::default()).await?.items;
        list_times.push(t.elapsed());
        // Besides ours, the namespace holds the kube-root-ca.crt every namespace has.
        let items = listed
            .iter()
            .filter(|c| {
                c.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("l-"))
            })
            .count();
        if items != list_size {
            bail!("listed {items} of {list_size} ConfigMaps");
        }
    }
    list_times.sort_unstable();
    let busy_rss = rss_mib(server.pid).unwrap_or(f64::NAN);
    drop(server);

    let admission = admission_cost(if args.quick { 1 } else { 10 }, seconds / 2).await?;
    let admission_cpu = admission_cpu_cost(
        if args.quick { 3 } else { 9 },
        if args.quick { 1_000 } else { 5_000 },
    )
    .await?;

    println!("readiness");
    println!(
        "  in-process (memory store), median of 50:  {:>8.3} ms",
        ms(in_process_median)
    );
    println!(
        "  konverge up, first start (new CA), median of 5: {:>8.1} ms",
        ms(median(&first_starts))
    );
    println!(
        "  konverge up, restart, median of 5:        {:>8.1} ms",
        ms(median(&restarts))
    );
    println!(
        "    of which until it printed it was ready: {:>8.1} ms (the rest is the client's: kubeconfig, TLS, /readyz)",
        ms(median(&restarts_announced))
    );
    println!("memory");
    println!(
        "  konverge up idle RSS, median of 5:        {:>8.1} MiB",
        idle_rss
    );
    println!(
        "  konverge up RSS after the run ({list_size} ConfigMaps of 1 KiB): {busy_rss:.1} MiB"
    );
    println!();
    println!(
        "{:<10} {:>8} {:>10} {:>10} {:>10}",
        "verb", "clients", "ops/s", "p50 ms", "p99 ms"
    );
    for (verb, clients, s) in &rows {
        println!(
            "{verb:<10} {clients:>8} {:>10.0} {:>10.3} {:>10.3}",
            s.rate(),
            ms(s.p50),
            ms(s.p99)
        );
    }
    for (clients, cpu) in &create_cpu {
        println!(
            "server CPU per create at {clients} clients: {:.3} ms (konverge up's user and system time over the phase / creates)",
            ms(*cpu)
        );
    }
    println!("watch: {watchers} watchers x {writes} creates: {watch_rate:.0} events/s delivered");
    println!(
        "list of {list_size} ConfigMaps (1 KiB each): median {:.1} ms, best {:.1} ms",
        ms(median(&list_times)),
        ms(list_times[0])
    );
    println!();
    admission.print(
        &format!(
            "admission: ConfigMap creates and gets at {ADMISSION_CLIENTS} clients, every admission plugin on \
             (no policies or webhooks configured) vs --disable-admission-plugins for all (medians of rounds)"
        ),
        "admission",
        "disabled",
    );
    if let (Some((p50, p99)), Some((get50, get99)), Some(on), Some(off)) = (
        admission.ratio(Verb::Create, "enabled", "disabled"),
        admission.ratio(Verb::Get, "enabled", "disabled"),
        admission.p50(Verb::Create, "enabled"),
        admission.p50(Verb::Create, "disabled"),
    ) {
        let pct = |r: f64| (r - 1.0) * 100.0;
        println!(
            "empty admission chain cost on create at {ADMISSION_CLIENTS} clients: p50 {:+.1}% (ratio of the medians), {:+.1}% (median of per-round ratios), p99 {:+.1}%; gets, which admission does not see, {:+.1}% / {:+.1}% (the noise)",
            pct(on / off),
            pct(p50),
            pct(p99),
            pct(get50),
            pct(get99)
        );
        let (with, without) = admission_cpu;
        let added = with.as_secs_f64() - without.as_secs_f64();
        println!(
            "in-process, one create at a time: {:.1} µs with the chain, {:.1} µs without: {:+.1} µs, {:+.2}% of the {ADMISSION_CLIENTS}-client create p50 ({on:.2} ms)",
            with.as_secs_f64() * 1e6,
            without.as_secs_f64() * 1e6,
            added * 1e6,
            added * 1e3 / on * 100.0
        );
    }
    println!();
    match etcd {
        Ok(anchor) => {
            println!("anchor: {}", anchor.description);
            println!(
                "  etcd ready: {:.1} ms, idle RSS {:.1} MiB",
                ms(anchor.ready),
                anchor.rss
            );
            for (clients, rate) in &anchor.put_rates {
                println!("  etcd put 1 KiB at {clients} clients: {rate:.0} ops/s");
            }
            for (clients, cpu) in &anchor.put_cpu {
                println!(
                    "  etcd CPU per put at {clients} clients: {:.3} ms",
                    ms(*cpu)
                );
            }
            println!();
            println!(
                "konverge up/etcd ready time ratio: {:.2}",
                ms(median(&restarts)) / ms(anchor.ready)
            );
            println!(
                "konverge up/etcd idle memory ratio: {:.2}",
                idle_rss / anchor.rss
            );
            for (clients, rate) in &anchor.put_rates {
                if let Some((_, _, s)) = rows.iter().find(|(v, c, _)| v == "create" && c == clients)
                {
                    println!(
                        "konverge create (HTTPS, kube::Client)/etcd put ratio at {clients} clients: {:.2}",
                        s.rate() / rate
                    );
                }
            }
            for (clients, put) in &anchor.put_cpu {
                if let Some((_, create)) = create_cpu.iter().find(|(c, _)| c == clients) {
                    println!(
                        "konverge CPU per create/etcd CPU per put at {clients} clients: {:.2}",
                        create.as_secs_f64() / put.as_secs_f64().max(f64::MIN_POSITIVE)
                    );
                }
            }
        }
        Err(why) => println!("anchor: etcd not measured: {why}"),
    }
    Ok(())
}

/// What admission adds to one ConfigMap create in-process, with nothing configured for it:
/// two in-process servers over memory stores, one with every admission plugin disabled,
/// creating `creates` ConfigMaps one after the other through the registry, in turn (in the
/// opposite order every other round); the medians over `rounds` of the time per create,
/// with the chain and without it.
async fn admission_cpu_cost(rounds: usize, creates: usize) -> anyhow::Result<(Duration, Duration)> {
    let server = |disabled: Vec<String>| {
        konverge_apiserver::ApiServer::builder(Arc::new(konverge_store::MemStore::new()))
            .control_loops(false)
            .disable_admission_plugins(disabled)
            .build()
    };
    let on = server(Vec::new()).await?;
    let names: Vec<String> = on
        .registry()
        .admission()
        .names()
        .into_iter()
        .map(String::from)
        .collect();
    let off = server(names).await?;
    let configmaps = on
        .registry()
        .catalog()
        .get("", "v1", "configmaps")
        .ok_or_else(|| anyhow::anyhow!("configmaps are not served"))?;
    let body = serde_json::to_value(cm("x", &"x".repeat(1024)))?;
    let mut times: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let registry = [&on, &off][which].registry();
            let started = Instant::now();
            for n in 0..creates {
                let mut object = body.clone();
                object["metadata"]["name"] = serde_json::json!(format!("r{round}-{n}"));
                registry
                    .create(
                        &configmaps,
                        Some("default"),
                        object,
                        &konverge_apiserver::registry::WriteOptions::default(),
                    )
                    .await?;
            }
            times[which].push(started.elapsed() / u32::try_from(creates)?);
        }
    }
    let median = |mut v: Vec<Duration>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let [with, without] = times;
    Ok((median(with), median(without)))
}

/// Concurrent clients of the admission comparison.
const ADMISSION_CLIENTS: usize = 32;

/// What admission costs when nothing is configured for it: two `konverge up` side by side,
/// one as it starts by default, one with every admission plugin disabled.
async fn admission_cost(rounds: usize, seconds: Duration) -> anyhow::Result<Results> {
    let names = konverge_apiserver::ApiServer::builder(Arc::new(konverge_store::MemStore::new()))
        .control_loops(false)
        .build()
        .await?
        .registry()
        .admission()
        .names()
        .join(",");
    let (on_dir, off_dir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    // Held until the end: dropping a server stops it.
    let on = start_standalone(on_dir.path()).await?;
    let off =
        start_standalone_with(off_dir.path(), &["--disable-admission-plugins", &names]).await?;
    let contenders = [
        Contender {
            name: "disabled",
            api: Api::namespaced(off.client.clone(), "default"),
        },
        Contender {
            name: "enabled",
            api: Api::namespaced(on.client.clone(), "default"),
        },
    ];
    alternate(
        &contenders,
        &[Verb::Create, Verb::Get],
        rounds,
        ADMISSION_CLIENTS,
        seconds,
    )
    .await
}

struct Anchor {
    description: String,
    ready: Duration,
    rss: f64,
    put_rates: Vec<(usize, f64)>,
    /// etcd's CPU time per put, at each client count.
    put_cpu: Vec<(usize, Duration)>,
}

#[cfg(feature = "etcd")]
mod etcd {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use konverge_store::KvStore;
    use konverge_store_etcd::EtcdStore;
    use konverge_store_etcd::testing::EtcdServer;

    use super::Anchor;
    use crate::bench::up::{cpu_time, rss_mib};

    pub(super) async fn measure(
        skip: bool,
        seconds: Duration,
        payload: &str,
    ) -> Result<Anchor, String> {
        if skip {
            return Err("--no-etcd".into());
        }
        let t = Instant::now();
        let server = EtcdServer::start().await.map_err(|e| {
            format!("could not start etcd ({e}); install it with `apt-get install -y etcd-server`")
        })?;
        let ready = t.elapsed();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = server.pid().and_then(rss_mib).unwrap_or(f64::NAN);
        let store: Arc<dyn KvStore> = Arc::new(
            EtcdStore::connect(std::slice::from_ref(&server.endpoint()))
                .await
                .map_err(|e| e.to_string())?,
        );
        let value = Bytes::from(payload.to_string());
        let mut put_rates = Vec::new();
        let mut put_cpu = Vec::new();
        for clients in [1usize, 32] {
            let cpu_before = server.pid().and_then(cpu_time);
            let stats = super::phase(clients, seconds, {
                let store = store.clone();
                let value = value.clone();
                move |c, n| {
                    let store = store.clone();
                    let value = value.clone();
                    async move {
                        store
                            .put(
                                Bytes::from(format!(
                                    "/registry/configmaps/default/c{clients}-{c}-{n}"
                                )),
                                value,
                            )
                            .await?;
                        Ok(())
                    }
                }
            })
            .await
            .map_err(|e| e.to_string())?;
            if let (Some(before), Some(after)) = (cpu_before, server.pid().and_then(cpu_time)) {
                put_cpu.push((clients, (after - before) / stats.ops.max(1) as u32));
            }
            put_rates.push((clients, stats.rate()));
        }
        Ok(Anchor {
            description: format!(
                "etcd at {} (kube-apiserver needs one; its own cost comes on top)",
                server.endpoint()
            ),
            ready,
            rss,
            put_rates,
            put_cpu,
        })
    }
}

#[cfg(not(feature = "etcd"))]
mod etcd {
    use std::time::Duration;

    use super::Anchor;

    pub(super) async fn measure(
        _skip: bool,
        _seconds: Duration,
        _payload: &str,
    ) -> Result<Anchor, String> {
        Err("built without the `etcd` feature (cargo run --release -p konverge-cli --features etcd -- bench api)".into())
    }
}
