//! `konverge bench cluster`: a whole cluster in one process — the API server, kcm's
//! controllers, the scheduler and simulated nodes — taking one large Deployment from create
//! to every pod Ready.
//!
//! The process is started as `konverge up` starts it (RBAC; each controller with its own
//! ServiceAccount token; the scheduler and the kubelets as the admin), on the memory store by
//! default (`--store disk` puts the disk store, `konverge up`'s default, in a temporary
//! directory). Every client the controllers, the scheduler and the kubelets use counts what
//! it sends by verb and resource, and how long each request took to answer in-process; the
//! benchmark's own polling (a Deployment get every 50 ms, a pod list at the end) uses an
//! uncounted client. Reported: the wall time from the Deployment's create to its
//! `status.readyReplicas` reaching `--replicas` with every pod's Ready condition True; pods
//! bound per second from the first Binding to the last; requests and writes per pod; CPU
//! time; and the peak resident memory (`VmHWM`) of the whole process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use konverge_apiserver::serve::Credentials;
use konverge_apiserver::serve::in_process::Identity;
use konverge_apiserver::{ApiServer, AuthorizationMode};
use konverge_controllers::kubelet::SimulatedNodes;
use konverge_controllers::manager::ServiceAccountTokens;
use konverge_controllers::{ControllerManager, Selection};
use konverge_store::{KvStore, MemStore};
use konverge_store_disk::DiskStore;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};

use super::up::{peak_rss_mib, rss_mib};
use super::workloads::{Counts, Tally, counting_client, is_write, web_deployment};

#[derive(clap::Args)]
pub(crate) struct ClusterArgs {
    /// Simulated nodes (110 pods fit on each).
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Replicas of the Deployment.
    #[arg(long, default_value_t = 10_000)]
    replicas: i32,
    /// The store under the API server.
    #[arg(long, value_enum, default_value_t = StoreKind::Memory)]
    store: StoreKind,
    /// Give up after this many seconds without every pod Ready.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

/// `--store`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum StoreKind {
    /// The memory store (`konverge up --store memory`).
    Memory,
    /// The disk store in a temporary directory (`konverge up`'s default).
    Disk,
}

/// How often the benchmark looks at the Deployment.
const POLL: Duration = Duration::from_millis(50);
/// How often a row of the timeline is taken.
const TIMELINE_EVERY: Duration = Duration::from_secs(1);

/// The running cluster and the counters on its clients.
struct Cluster {
    server: Arc<ApiServer>,
    admin: Client,
    /// kcm's informers and controllers.
    controllers: Counts,
    /// The scheduler and the kubelets.
    nodes: Counts,
    running: konverge_runtime::RunningManager,
    // Held so the disk store's directory outlives the run.
    _dir: tempfile::TempDir,
}

async fn start(args: &ClusterArgs) -> anyhow::Result<Cluster> {
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let credentials = Credentials::load_or_create(dir.path())?;
    let store: Arc<dyn KvStore> = match args.store {
        StoreKind::Memory => Arc::new(MemStore::new()),
        StoreKind::Disk => {
            let path = dir.path().join("store");
            Arc::new(
                DiskStore::open(&path)
                    .with_context(|| format!("opening the disk store in {}", path.display()))?,
            )
        }
    };
    let server = ApiServer::builder(store)
        .bearer_token(credentials.token.clone())
        .root_ca(credentials.ca_pem.clone())
        .client_ca(credentials.ca_pem.clone())
        .service_account_key(credentials.service_account_key.clone())
        .authorization(AuthorizationMode::Rbac)
        .build()
        .await
        .context("starting the API server")?;
    let token = credentials.token.clone();
    let admin = server.client(Identity::Token(token.clone()));
    let controllers = Counts::default();
    let nodes = Counts::default();
    let kcm = counting_client(
        &server,
        Identity::Impersonating {
            token: token.clone(),
            user: "system:kube-controller-manager".into(),
        },
        controllers.clone(),
    );
    let (for_tokens, counts) = (server.clone(), controllers.clone());
    let tokens = ServiceAccountTokens::new(admin.clone(), move |token| {
        counting_client(&for_tokens, Identity::Token(token), counts.clone())
    });
    let node_client = counting_client(&server, Identity::Token(token), nodes.clone());
    let running = ControllerManager::new(kcm)
        .selection(Selection::all())
        .credentials(tokens)
        .simulated_nodes(SimulatedNodes::new(args.nodes), node_client)
        .spawn()
        .await
        .context("starting kube-controller-manager's controllers and the simulated nodes")?;
    Ok(Cluster {
        server,
        admin,
        controllers,
        nodes,
        running,
        _dir: dir,
    })
}

/// Waits until `count` nodes are registered and Ready.
async fn nodes_ready(admin: &Client, count: usize) -> anyhow::Result<()> {
    let started = Instant::now();
    let api: Api<Node> = Api::all(admin.clone());
    loop {
        let ready = api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready >= count {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{ready} of {count} nodes were Ready after a minute");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The process's CPU time (user + system), from `/proc/self/stat`.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces): state is
    // the first, utime the 12th and stime the 13th; both in clock ticks (USER_HZ, 100).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// One row of the timeline.
struct Sample {
    at: Duration,
    created: u64,
    bound: u64,
    status_writes: u64,
    ready: i32,
    cpu: Duration,
}

fn sample(cluster: &Cluster, at: Duration, ready: i32) -> Sample {
    Sample {
        at,
        created: cluster.controllers.requests("create", "pods"),
        bound: cluster.nodes.requests("create", "pods/binding"),
        status_writes: cluster.nodes.requests("update", "pods/status")
            + cluster.nodes.requests("patch", "pods/status"),
        ready,
        cpu: cpu_time().unwrap_or_default(),
    }
}

/// Pods of the Deployment, those bound, and those Ready; read in pages of 500, so the
/// check itself does not raise the process's peak memory.
async fn pods_bound_and_ready(admin: &Client) -> anyhow::Result<(usize, usize, usize)> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let (mut total, mut bound, mut ready) = (0, 0, 0);
    let mut params = ListParams::default().labels("app=web").limit(500);
    loop {
        let page = pods.list(&params).await?;
        total += page.items.len();
        bound += page
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        ready += page
            .items
            .iter()
            .filter(|p| konverge_controllers::pods::is_ready(p))
            .count();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((total, bound, ready)),
        }
    }
}

/// The outcome of a run.
struct Outcome {
    /// From the create to every pod Ready, or to giving up.
    took: Duration,
    /// Whether every pod became Ready.
    finished: bool,
    samples: Vec<Sample>,
    /// Pods of the Deployment, how many are bound, how many Ready.
    pods: (usize, usize, usize),
}

/// Creates the Deployment and waits until it and every one of its pods are Ready, or
/// `--timeout` has passed.
async fn run_deployment(cluster: &Cluster, args: &ClusterArgs) -> anyhow::Result<Outcome> {
    let deployments: Api<Deployment> = Api::namespaced(cluster.admin.clone(), "default");
    let started = Instant::now();
    deployments
        .create(&PostParams::default(), &web_deployment(args.replicas)?)
        .await?;
    let mut samples = vec![sample(cluster, Duration::ZERO, 0)];
    let deadline = Duration::from_secs(args.timeout);
    let wanted = usize::try_from(args.replicas).unwrap_or(0);
    loop {
        let ready = deployments
            .get("web")
            .await?
            .status
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        let at = started.elapsed();
        if samples
            .last()
            .is_none_or(|s| at >= s.at + TIMELINE_EVERY || ready == args.replicas)
        {
            samples.push(sample(cluster, at, ready));
        }
        let given_up = at > deadline;
        if ready == args.replicas || given_up {
            let pods = pods_bound_and_ready(&cluster.admin).await?;
            let finished = pods.0 == wanted && pods.2 == wanted;
            if finished || given_up {
                return Ok(Outcome {
                    took: started.elapsed(),
                    finished,
                    samples,
                    pods,
                });
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

fn print_timeline(samples: &[Sample]) {
    println!("timeline (cumulative since the create):");
    println!(
        "    {:>6} {:>8} {:>8} {:>8} {:>13} {:>8}",
        "s", "created", "bound", "ready", "status writes", "cpu s"
    );
    let cpu0 = samples.first().map_or(Duration::ZERO, |s| s.cpu);
    for s in samples {
        println!(
            "    {:>6.1} {:>8} {:>8} {:>8} {:>13} {:>8.1}",
            s.at.as_secs_f64(),
            s.created,
            s.bound,
            s.ready,
            s.status_writes,
            s.cpu.saturating_sub(cpu0).as_secs_f64()
        );
    }
}

/// Requests of one client's counts, with totals.
fn print_requests(who: &str, counts: &BTreeMap<(String, String), Tally>) {
    for ((verb, resource), tally) in counts {
        println!(
            "    {who:<11} {verb:>8} {resource:<34} {:>8} {:>9.2} {:>9.3}",
            tally.requests,
            tally.busy.as_secs_f64(),
            tally.busy.as_secs_f64() * 1e3 / tally.requests.max(1) as f64
        );
    }
}

fn totals(counts: &BTreeMap<(String, String), Tally>) -> (u64, u64) {
    counts.iter().fold((0, 0), |(all, writes), ((verb, _), t)| {
        let w = if is_write(verb) { t.requests } else { 0 };
        (all + t.requests, writes + w)
    })
}

pub(crate) async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    if args.replicas < 1 || args.nodes < 1 {
        bail!("--nodes and --replicas must be at least 1");
    }
    let store = match args.store {
        StoreKind::Memory => "memory store",
        StoreKind::Disk => "disk store",
    };
    let booted = Instant::now();
    let cluster = start(&args).await?;
    nodes_ready(&cluster.admin, args.nodes).await?;
    println!(
        "cluster: {} simulated nodes, kcm's controllers, the scheduler, RBAC, {store}; nodes Ready in {:.2} s",
        args.nodes,
        booted.elapsed().as_secs_f64()
    );
    // What starting took is not the Deployment's.
    cluster.controllers.take();
    cluster.nodes.take();
    let pid = std::process::id();
    let rss_before = rss_mib(pid).unwrap_or(0.0);
    let cpu_before = cpu_time().unwrap_or_default();
    println!(
        "deployment: default/web, {} replicas, created now",
        args.replicas
    );

    let outcome = run_deployment(&cluster, &args).await?;
    let cpu = cpu_time().unwrap_or_default().saturating_sub(cpu_before);
    let peak = peak_rss_mib(pid).unwrap_or(0.0);
    let (controllers, nodes) = (cluster.controllers.snapshot(), cluster.nodes.snapshot());
    let bindings = nodes
        .get(&("create".to_string(), "pods/binding".to_string()))
        .copied()
        .unwrap_or_default();
    let binding_span = match (bindings.first, bindings.last) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    };
    let replicas = f64::from(args.replicas);
    let (all_c, writes_c) = totals(&controllers);
    let (all_n, writes_n) = totals(&nodes);
    let (pods, bound, ready) = outcome.pods;

    print_timeline(&outcome.samples);
    println!("requests (component, verb, resource, count, seconds answering, ms each):");
    print_requests("controllers", &controllers);
    print_requests("nodes", &nodes);
    if outcome.finished {
        println!("all ready: {:.2} s", outcome.took.as_secs_f64());
    } else {
        println!(
            "all ready: not after {:.2} s (gave up)",
            outcome.took.as_secs_f64()
        );
    }
    println!("pods ready: {ready}/{pods} ({bound} bound)");
    println!(
        "pods bound: {} in {:.2} s from the first Binding to the last: {:.0} pods/s",
        bindings.requests,
        binding_span.as_secs_f64(),
        bindings.requests as f64 / binding_span.as_secs_f64().max(1e-3)
    );
    println!(
        "requests: {} ({} from the controllers, {} from the scheduler and kubelets)",
        all_c + all_n,
        all_c,
        all_n
    );
    println!(
        "writes per pod: {:.2} ({:.2} controllers, {:.2} scheduler and kubelets)",
        (writes_c + writes_n) as f64 / replicas,
        writes_c as f64 / replicas,
        writes_n as f64 / replicas
    );
    println!(
        "cpu: {:.1} s over {:.1} s of wall time ({:.2} cores busy)",
        cpu.as_secs_f64(),
        outcome.took.as_secs_f64(),
        cpu.as_secs_f64() / outcome.took.as_secs_f64().max(1e-3)
    );
    println!(
        "peak RSS: {peak:.1} MiB (VmHWM of the whole process: API server, store, controllers, scheduler, kubelets and this benchmark; {rss_before:.1} MiB before the Deployment)"
    );
    cluster.running.stop().await?;
    cluster.server.stop();
    if !outcome.finished {
        bail!(
            "not every pod was Ready after {} s: {pods} pods, {bound} bound, {ready} Ready",
            args.timeout
        );
    }
    Ok(())
}
