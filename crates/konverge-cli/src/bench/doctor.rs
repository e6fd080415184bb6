//! `konverge bench doctor`: what `konverge doctor` costs on a cluster of many objects, and
//! whether it finds every hot loop within its window.
//!
//! `konverge up` runs as a process on a fresh disk store. `konverge doctor -o json` runs as a
//! process against it three times, each with the same window: on the bootstrap objects only
//! (the anchor), on N ConfigMaps left alone, and on the same N while writers patch `hot` of
//! them over and over (an annotation, round-robin, from 8 concurrent writers) for the whole
//! window. For each run: the doctor's peak resident memory (`VmHWM`, polled while it runs),
//! its wall time from start to report, the writes it saw and the hot loops it reported.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::up::{peak_rss_mib, start_standalone};

#[derive(clap::Args)]
pub(crate) struct DoctorArgs {
    /// A reduced run (1,000 objects, a 5 s window).
    #[arg(long)]
    quick: bool,
    /// How many ConfigMaps the cluster holds (default 10,000, or 1,000 with --quick).
    #[arg(long)]
    objects: Option<usize>,
    /// How many of them are written over and over (default 100, or 20 with --quick).
    #[arg(long)]
    hot: Option<usize>,
    /// The doctor's window, in seconds (default 30, or 5 with --quick).
    #[arg(long)]
    window: Option<u64>,
}

/// The namespace the load goes into.
const NAMESPACE: &str = "load";
/// Concurrent writers, for the load and for the churn.
const WRITERS: usize = 8;

/// One doctor run, as measured from outside.
struct Run {
    label: String,
    peak_mib: f64,
    wall: Duration,
    report: Value,
}

impl Run {
    fn count(&self, field: &str) -> u64 {
        match &self.report[field] {
            Value::Array(items) => items.len() as u64,
            value => value.as_u64().unwrap_or(0),
        }
    }
}

pub(crate) async fn run(args: DoctorArgs) -> anyhow::Result<()> {
    let objects = args
        .objects
        .unwrap_or(if args.quick { 1_000 } else { 10_000 });
    let hot = args
        .hot
        .unwrap_or(if args.quick { 20 } else { 100 })
        .min(objects);
    let window = Duration::from_secs(args.window.unwrap_or(if args.quick { 5 } else { 30 }));

    let dir = tempfile::tempdir()?;
    let server = start_standalone(dir.path()).await?;
    let kubeconfig = dir.path().join("kubeconfig");
    let mut runs = Vec::new();

    runs.push(doctor(&kubeconfig, window, "bootstrap objects only (anchor)").await?);

    let started = Instant::now();
    load(&server.client, objects).await?;
    eprintln!(
        "loaded {objects} ConfigMaps in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    runs.push(doctor(&kubeconfig, window, &format!("{objects} ConfigMaps, quiet")).await?);

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let churners: Vec<_> = (0..WRITERS)
        .map(|writer| {
            tokio::spawn(churn(
                server.client.clone(),
                writer,
                hot,
                stop.clone(),
                writes.clone(),
            ))
        })
        .collect();
    let churned = doctor(
        &kubeconfig,
        window,
        &format!("{objects} ConfigMaps, {hot} of them written over and over"),
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for churner in churners {
        churner.await??;
    }
    runs.push(churned?);

    print(&runs, objects, hot, window, writes.load(Ordering::Relaxed));
    // What the benchmark exists to show: every hot object found, nothing else.
    let found = runs[2].count("hot_loops");
    if found != hot as u64 {
        bail!("the doctor reported {found} hot loops, {hot} objects were written over and over");
    }
    if let Some(run) = runs[..2].iter().find(|r| r.count("hot_loops") != 0) {
        bail!(
            "the doctor reported hot loops on a quiet cluster: {}",
            run.label
        );
    }
    Ok(())
}

/// Creates `n` ConfigMaps of 8 keys of 40 bytes in [`NAMESPACE`], from [`WRITERS`] clients.
async fn load(client: &kube::Client, n: usize) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(NAMESPACE.into());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let value = "v".repeat(40);
    futures::stream::iter((0..n).map(Ok))
        .try_for_each_concurrent(WRITERS * 4, |i| {
            let (api, value) = (api.clone(), value.clone());
            async move {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(name(i));
                cm.data = Some(
                    (0..8)
                        .map(|k| (format!("key-{k}"), value.clone()))
                        .collect(),
                );
                api.create(&PostParams::default(), &cm).await.map(drop)
            }
        })
        .await
        .context("creating the ConfigMaps")
}

fn name(i: usize) -> String {
    format!("cm-{i:05}")
}

/// Patches the annotation `last-run` of this writer's share of the first `hot` ConfigMaps,
/// round-robin, until `stop`.
async fn churn(
    client: kube::Client,
    writer: usize,
    hot: usize,
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let params = PatchParams {
        field_manager: Some("churner".into()),
        ..PatchParams::default()
    };
    let mine: Vec<usize> = (writer..hot).step_by(WRITERS).collect();
    if mine.is_empty() {
        return Ok(());
    }
    for tick in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let i = mine[tick as usize % mine.len()];
        let patch = json!({"metadata": {"annotations": {"last-run": tick.to_string()}}});
        api.patch(&name(i), &params, &Patch::Merge(patch)).await?;
        writes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Runs `konverge doctor -o json --for window` against the server and measures it.
async fn doctor(kubeconfig: &Path, window: Duration, label: &str) -> anyhow::Result<Run> {
    eprintln!("doctor: {label} ...");
    let exe = std::env::current_exe().context("locating the konverge binary")?;
    let started = Instant::now();
    let child = tokio::process::Command::new(exe)
        .arg("doctor")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--for", &format!("{}s", window.as_secs()), "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting konverge doctor")?;
    let pid = child.id().context("the doctor's pid")?;
    let output = child.wait_with_output();
    tokio::pin!(output);
    let mut peak: f64 = 0.0;
    let mut ticks = tokio::time::interval(Duration::from_millis(20));
    let output = loop {
        tokio::select! {
            output = &mut output => break output?,
            _ = ticks.tick() => {
                if let Some(mib) = peak_rss_mib(pid) {
                    peak = peak.max(mib);
                }
            }
        }
    };
    let wall = started.elapsed();
    // Exit code 1 means findings; anything else is a failure.
    if !matches!(output.status.code(), Some(0 | 1)) {
        bail!("konverge doctor failed ({})", output.status);
    }
    let report: Value =
        serde_json::from_slice(&output.stdout).context("reading the doctor's JSON report")?;
    Ok(Run {
        label: label.to_string(),
        peak_mib: peak,
        wall,
        report,
    })
}

fn print(runs: &[Run], objects: usize, hot: usize, window: Duration, churn_writes: u64) {
    println!(
        "konverge doctor, window {} s, {objects} ConfigMaps ({hot} written over and over: {churn_writes} patches during the last run)",
        window.as_secs()
    );
    println!(
        "| cluster | objects | writes seen | hot loops | wall time s | peak RSS MiB | vs anchor |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let anchor = runs[0].peak_mib;
    for run in runs {
        println!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.2} |",
            run.label,
            run.count("objects"),
            run.count("writes"),
            run.count("hot_loops"),
            run.wall.as_secs_f64(),
            run.peak_mib,
            run.peak_mib / anchor
        );
    }
}
