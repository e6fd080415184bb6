//! `konverge bench controller`: konverge-runtime against kube-runtime's `Controller`, doing the
//! same work on the same server in the same run.
//!
//! The work: N source ConfigMaps (label `role=source`, 1 KiB of data each, spread over four
//! namespaces) are mirrored into N children (`<name>-mirror`, label `role=mirror`, same data,
//! a controller ownerReference to the source). Both controllers watch sources by label, own
//! the children by label, run 16 workers, and share one reconciler: get the child; create it
//! if absent, replace it if its data differs; then await change.
//!
//! Both run with their defaults. The server records `metadata.managedFields` on every write;
//! konverge-runtime's cache leaves them out (skipped while parsing) unless a controller asks
//! for them, kube-runtime's reflector keeps them. The reconciler reads neither.
//!
//! How it is measured, so that time and memory belong to the controller alone:
//!
//! - The parent process runs the API server in-process (memory store, loopback HTTP) and
//!   creates the sources. Every run gets a fresh server with the same N objects, so each
//!   controller starts cold.
//! - For each run the parent re-executes this binary as a worker
//!   (`bench controller --worker konverge|kube-runtime --url ...`) that runs only the
//!   controller, through `kube::Client`.
//! - Converge time: from the worker's start (before its client is built) until its reconciler
//!   has confirmed, for every one of the N sources, a child with the right data (created,
//!   replaced or found equal). The reconciler is the same code for both runtimes, so the count
//!   is equally fair to both.
//! - Peak memory: the worker's `VmHWM` once it has also settled (no reconcile running or
//!   started for a second), so the reconciles that its own child creations trigger, and the
//!   caches they fill, are included for both.
//! - After each run the parent lists the children and checks all N exist with the right data.
//!
//! Runs alternate which runtime goes first; the ratios are of the medians.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kube::{Resource as _, ResourceExt as _};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// The namespaces the sources are spread over (round-robin).
const NAMESPACES: [&str; 4] = ["mirror-0", "mirror-1", "mirror-2", "mirror-3"];
/// How long a worker must see no reconcile before it reads its peak memory.
const SETTLE: Duration = Duration::from_secs(1);
/// Longest a worker may take to settle once it has converged.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// The prefix of the line a worker reports its result on.
const RESULT_PREFIX: &str = "konverge-bench-controller-result ";

#[derive(clap::Args)]
pub(crate) struct ControllerArgs {
    /// A reduced run (under a minute): 1,000 objects.
    #[arg(long)]
    quick: bool,
    /// How many source ConfigMaps to mirror (default 10,000, or 1,000 with --quick).
    #[arg(long)]
    objects: Option<usize>,
    /// Runs of each runtime, alternating which goes first (default 3).
    #[arg(long)]
    rounds: Option<usize>,
    /// Concurrent reconciles in both controllers.
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// Seconds a worker may take to converge before the run fails.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Internal: run one controller against --url, then report on stdout.
    #[arg(long, hide = true, value_enum, requires = "url")]
    worker: Option<Runtime>,
    /// Internal: the API server a worker talks to.
    #[arg(long, hide = true)]
    url: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Runtime {
    Konverge,
    KubeRuntime,
}

impl Runtime {
    fn name(self) -> &'static str {
        match self {
            Runtime::Konverge => "konverge",
            Runtime::KubeRuntime => "kube-runtime",
        }
    }
}

/// What a worker reports.
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    /// From the worker's start to the last child confirmed.
    converge_ms: f64,
    /// `VmHWM` once settled.
    peak_rss_kib: u64,
    /// Reconciles run (each source once, plus those its child's creation triggered).
    reconciles: usize,
    /// Reconciles that returned an error.
    errors: usize,
}

pub(crate) async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let objects = args
        .objects
        .unwrap_or(if args.quick { 1_000 } else { 10_000 });
    if let Some(runtime) = args.worker {
        let url = args.url.context("--worker needs --url")?;
        return worker(runtime, &url, objects, args.concurrency).await;
    }
    let rounds = args.rounds.unwrap_or(3).max(1);
    let timeout = Duration::from_secs(args.timeout);
    let exe = std::env::current_exe().context("locating the konverge binary")?;

    println!(
        "controller: mirror {objects} ConfigMaps (1 KiB) into {objects} children, {} workers, \
         in-process API server (memory store) over loopback HTTP, {rounds} round(s)",
        args.concurrency
    );
    println!();
    println!(
        "{:<6} {:<13} {:>11} {:>10} {:>13} {:>11} {:>7}",
        "round", "runtime", "load s", "converge s", "peak RSS MiB", "reconciles", "errors"
    );
    let mut results: Vec<(Runtime, Report)> = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Runtime::KubeRuntime, Runtime::Konverge]
        } else {
            [Runtime::Konverge, Runtime::KubeRuntime]
        };
        for runtime in order {
            let server = Server::start().await?;
            let load = Instant::now();
            server.create_sources(objects).await?;
            let load = load.elapsed();
            let report = spawn_worker(
                &exe,
                runtime,
                &server.url,
                objects,
                args.concurrency,
                timeout,
            )
            .await
            .with_context(|| format!("{} worker", runtime.name()))?;
            server
                .verify(objects)
                .await
                .with_context(|| format!("after the {} run", runtime.name()))?;
            println!(
                "{:<6} {:<13} {:>11.2} {:>10.2} {:>13.1} {:>11} {:>7}",
                round + 1,
                runtime.name(),
                load.as_secs_f64(),
                report.converge_ms / 1e3,
                report.peak_rss_kib as f64 / 1024.0,
                report.reconciles,
                report.errors
            );
            results.push((runtime, report));
        }
    }

    let median = |runtime: Runtime, f: fn(&Report) -> f64| {
        let mut v: Vec<f64> = results
            .iter()
            .filter(|(r, _)| *r == runtime)
            .map(|(_, report)| f(report))
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let converge = |r: &Report| r.converge_ms / 1e3;
    let rss = |r: &Report| r.peak_rss_kib as f64 / 1024.0;
    println!();
    for runtime in [Runtime::KubeRuntime, Runtime::Konverge] {
        println!(
            "{:<13} median of {rounds}: converge {:.2} s, peak RSS {:.1} MiB",
            runtime.name(),
            median(runtime, converge),
            median(runtime, rss)
        );
    }
    println!();
    println!(
        "konverge/kube-runtime converge time ratio: {:.2}",
        median(Runtime::Konverge, converge) / median(Runtime::KubeRuntime, converge)
    );
    println!(
        "konverge/kube-runtime peak memory ratio: {:.2}",
        median(Runtime::Konverge, rss) / median(Runtime::KubeRuntime, rss)
    );
    Ok(())
}

/// An in-process API server on a loopback port; dropping it stops serving.
struct Server {
    url: String,
    client: kube::Client,
    _serving: konverge_apiserver::serve::Serving,
}

impl Server {
    async fn start() -> anyhow::Result<Server> {
        let server =
            konverge_apiserver::ApiServer::builder(Arc::new(konverge_store::MemStore::new()))
                .build()
                .await?;
        let serving = konverge_apiserver::serve::Serve::new(server.router())
            .bind("127.0.0.1:0")
            .await?;
        server.set_address(serving.local_addr().to_string());
        let url = serving.url();
        let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
        Ok(Server {
            url,
            client,
            _serving: serving,
        })
    }

    async fn create_sources(&self, objects: usize) -> anyhow::Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        for name in NAMESPACES {
            let mut ns = Namespace::default();
            ns.metadata.name = Some(name.to_string());
            namespaces.create(&PostParams::default(), &ns).await?;
        }
        let payload = "x".repeat(1024);
        futures::stream::iter(0..objects)
            .map(|i| {
                let api: Api<ConfigMap> =
                    Api::namespaced(self.client.clone(), NAMESPACES[i % NAMESPACES.len()]);
                let source = source(i, &payload);
                async move { api.create(&PostParams::default(), &source).await }
            })
            .buffer_unordered(32)
            .try_for_each(|_| async { Ok(()) })
            .await?;
        Ok(())
    }

    /// Checks that every source has a child with its data.
    async fn verify(&self, objects: usize) -> anyhow::Result<()> {
        let api: Api<ConfigMap> = Api::all(self.client.clone());
        let data = |selector: &str| {
            let api = api.clone();
            let params = ListParams::default().labels(selector);
            async move {
                anyhow::Ok(
                    api.list(&params)
                        .await?
                        .items
                        .into_iter()
                        .map(|cm| ((cm.namespace(), cm.name_any()), cm.data))
                        .collect::<BTreeMap<_, _>>(),
                )
            }
        };
        let sources = data("role=source").await?;
        let children = data("role=mirror").await?;
        if sources.len() != objects || children.len() != objects {
            bail!(
                "{} sources and {} children, expected {objects} of each",
                sources.len(),
                children.len()
            );
        }
        for ((namespace, name), data) in &sources {
            let child = (namespace.clone(), child_name(name));
            if children.get(&child) != Some(data) {
                bail!("{child:?} is missing or differs from its source");
            }
        }
        Ok(())
    }
}

fn source(i: usize, payload: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(format!("src-{i:05}"));
    cm.metadata.labels = Some([("role".to_string(), "source".to_string())].into());
    cm.data = Some(
        [
            ("index".to_string(), i.to_string()),
            ("payload".to_string(), payload.to_string()),
        ]
        .into(),
    );
    cm
}

fn child_name(source: &str) -> String {
    format!("{source}-mirror")
}

/// Runs one worker to completion and returns its report. The worker is killed if this
/// returns early (error or timeout).
async fn spawn_worker(
    exe: &std::path::Path,
    runtime: Runtime,
    url: &str,
    objects: usize,
    concurrency: u16,
    timeout: Duration,
) -> anyhow::Result<Report> {
    let mut child = tokio::process::Command::new(exe)
        .args([
            "bench",
            "controller",
            "--worker",
            runtime.name(),
            "--url",
            url,
        ])
        .args(["--objects", &objects.to_string()])
        .args(["--concurrency", &concurrency.to_string()])
        // The worker exits when this pipe closes, so it cannot outlive the parent.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("starting the worker")?;
    let stdout = child.stdout.take().context("worker stdout")?;
    let read = async {
        let mut lines = BufReader::new(stdout).lines();
        let mut report = None;
        while let Some(line) = lines.next_line().await? {
            match line.strip_prefix(RESULT_PREFIX) {
                Some(json) => report = Some(serde_json::from_str::<Report>(json)?),
                None => eprintln!("worker: {line}"),
            }
        }
        let status = child.wait().await?;
        if !status.success() {
            bail!("exited with {status}");
        }
        report.context("exited without a report")
    };
    tokio::time::timeout(timeout, read)
        .await
        .with_context(|| format!("did not converge within {timeout:?}"))?
}

/// The reconciler's state, shared by both runtimes: which sources have a correct child, and
/// when the controller was last busy.
struct Mirror {
    client: kube::Client,
    confirmed: Vec<AtomicBool>,
    confirmed_count: AtomicUsize,
    converged: tokio::sync::Notify,
    reconciles: AtomicUsize,
    errors: AtomicUsize,
    in_flight: AtomicUsize,
    last_activity: Mutex<Instant>,
}

impl Mirror {
    fn new(client: kube::Client, objects: usize) -> Mirror {
        Mirror {
            client,
            confirmed: (0..objects).map(|_| AtomicBool::new(false)).collect(),
            confirmed_count: AtomicUsize::new(0),
            converged: tokio::sync::Notify::new(),
            reconciles: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            last_activity: Mutex::new(Instant::now()),
        }
    }

    fn touch(&self) {
        if let Ok(mut last) = self.last_activity.lock() {
            *last = Instant::now();
        }
    }

    /// The reconciler both runtimes run.
    async fn reconcile(&self, source: &ConfigMap) -> Result<(), kube::Error> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.touch();
        let result = self.mirror(source).await;
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        match &result {
            Ok(()) => self.confirm(source),
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.touch();
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        result
    }

    async fn mirror(&self, source: &ConfigMap) -> Result<(), kube::Error> {
        let namespace = source.namespace().unwrap_or_default();
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        let name = child_name(&source.name_any());
        let mut desired = ConfigMap::default();
        desired.metadata.name = Some(name.clone());
        desired.metadata.namespace = Some(namespace);
        desired.metadata.labels = Some([("role".to_string(), "mirror".to_string())].into());
        desired.metadata.owner_references = source.controller_owner_ref(&()).map(|o| vec![o]);
        desired.data = source.data.clone();
        match api.get_opt(&name).await? {
            None => {
                api.create(&PostParams::default(), &desired).await?;
            }
            Some(child) if child.data != source.data => {
                desired.metadata.resource_version = child.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &desired).await?;
            }
            Some(_) => {}
        }
        Ok(())
    }

    fn confirm(&self, source: &ConfigMap) {
        let index = source
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix("src-"))
            .and_then(|i| i.parse::<usize>().ok());
        let Some(flag) = index.and_then(|i| self.confirmed.get(i)) else {
            return;
        };
        if !flag.swap(true, Ordering::SeqCst)
            && self.confirmed_count.fetch_add(1, Ordering::SeqCst) + 1 == self.confirmed.len()
        {
            self.converged.notify_one();
        }
    }

    /// Completes once every source has a correct child, with the time it happened.
    async fn wait_converged(&self) -> Instant {
        if self.confirmed_count.load(Ordering::SeqCst) < self.confirmed.len() {
            self.converged.notified().await;
        }
        Instant::now()
    }

    /// Completes once no reconcile has run or started for [`SETTLE`].
    async fn wait_settled(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let idle = self
                .last_activity
                .lock()
                .map(|last| last.elapsed())
                .unwrap_or_default();
            if self.in_flight.load(Ordering::SeqCst) == 0 && idle >= SETTLE {
                return Ok(());
            }
            if started.elapsed() > SETTLE_LIMIT {
                bail!("still reconciling {SETTLE_LIMIT:?} after converging");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// This process's peak resident memory, in KiB.
fn peak_rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .context("no VmHWM in /proc/self/status")?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib)
}

/// A worker: runs one controller until it converges and settles, then reports.
async fn worker(
    runtime: Runtime,
    url: &str,
    objects: usize,
    concurrency: u16,
) -> anyhow::Result<()> {
    let started = Instant::now();
    // The parent holds our stdin open; if it dies, stop rather than linger.
    std::thread::spawn(|| {
        let mut buf = [0u8; 64];
        let mut stdin = std::io::stdin();
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        std::process::exit(3);
    });
    let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
    let ctx = Arc::new(Mirror::new(client.clone(), objects));
    let measure = {
        let ctx = ctx.clone();
        async move {
            let converged = ctx.wait_converged().await;
            ctx.wait_settled().await?;
            anyhow::Ok((converged - started, peak_rss_kib()?))
        }
    };
    let (converge, peak) = match runtime {
        Runtime::Konverge => run_konverge(client, ctx.clone(), concurrency, measure).await?,
        Runtime::KubeRuntime => run_kube_runtime(client, ctx.clone(), concurrency, measure).await?,
    };
    let report = Report {
        converge_ms: converge.as_secs_f64() * 1e3,
        peak_rss_kib: peak,
        reconciles: ctx.reconciles.load(Ordering::SeqCst),
        errors: ctx.errors.load(Ordering::SeqCst),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{RESULT_PREFIX}{}", serde_json::to_string(&report)?)?;
    out.flush()?;
    Ok(())
}

async fn run_konverge<M>(
    client: kube::Client,
    ctx: Arc<Mirror>,
    concurrency: u16,
    measure: M,
) -> anyhow::Result<(Duration, u64)>
where
    M: Future<Output = anyhow::Result<(Duration, u64)>>,
{
    use konverge_runtime::{Action, Controller, Manager, watcher};

    async fn reconcile(source: Arc<ConfigMap>, ctx: Arc<Mirror>) -> Result<Action, kube::Error> {
        ctx.reconcile(&source).await?;
        Ok(Action::await_change())
    }

    let mut manager = Manager::new(client.clone());
    let controller = Controller::new(
        Api::<ConfigMap>::all(client.clone()),
        watcher::Config::default().labels("role=source"),
    )
    .named("mirror")
    .owns(
        Api::<ConfigMap>::all(client),
        watcher::Config::default().labels("role=mirror"),
    )
    .concurrency(usize::from(concurrency));
    manager.add(controller, reconcile, ctx);
    tokio::select! {
        result = manager.run(futures::future::pending()) => {
            result?;
            bail!("the manager stopped before the controller converged")
        }
        measured = measure => measured,
    }
}

async fn run_kube_runtime<M>(
    client: kube::Client,
    ctx: Arc<Mirror>,
    concurrency: u16,
    measure: M,
) -> anyhow::Result<(Duration, u64)>
where
    M: Future<Output = anyhow::Result<(Duration, u64)>>,
{
    use kube::runtime::controller::{Action, Config, Controller};
    use kube::runtime::watcher;

    async fn reconcile(source: Arc<ConfigMap>, ctx: Arc<Mirror>) -> Result<Action, kube::Error> {
        ctx.reconcile(&source).await?;
        Ok(Action::await_change())
    }

    fn error_policy(_: Arc<ConfigMap>, error: &kube::Error, _: Arc<Mirror>) -> Action {
        tracing::warn!(%error, "reconcile failed");
        Action::requeue(Duration::from_millis(5))
    }

    let controller = Controller::new(
        Api::<ConfigMap>::all(client.clone()),
        watcher::Config::default().labels("role=source"),
    )
    .owns(
        Api::<ConfigMap>::all(client),
        watcher::Config::default().labels("role=mirror"),
    )
    .with_config(Config::default().concurrency(concurrency))
    .run(reconcile, error_policy, ctx)
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, "controller");
        }
    });
    tokio::select! {
        () = controller => bail!("the controller stopped before it converged"),
        measured = measure => measured,
    }
}
