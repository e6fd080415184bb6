//! `konverge bench creates`: closed-loop creates of ConfigMaps against a server that is
//! already running, named by a kubeconfig — `konverge up`, another build of it, or a
//! kube-apiserver — to profile a server under load (`perf record -p`) or to compare two run
//! by hand. With the server's process id, its CPU per create is read from `/proc`.
//!
//! The ConfigMaps are made with `generateName` and labelled `konverge.dev/bench=creates`, so
//! `kubectl delete configmaps -l konverge.dev/bench=creates` removes them.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::load::{ms, phase};
use super::up::cpu_time;

/// The label every ConfigMap made here carries.
const LABEL: (&str, &str) = ("konverge.dev/bench", "creates");

#[derive(clap::Args)]
pub(crate) struct CreatesArgs {
    /// The kubeconfig naming the server (its current context).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Concurrent clients, each creating one ConfigMap after another.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Bytes of data in each ConfigMap (1,400: about the 1.4 KiB objects of `bench lists`).
    #[arg(long, default_value_t = 1400)]
    size: usize,
    /// The namespace to create in; it must exist.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// The server's process id on this machine: its CPU time over the run, per create, is
    /// read from `/proc/<pid>/stat`.
    #[arg(long)]
    pid: Option<u32>,
}

pub(crate) async fn run(args: CreatesArgs) -> anyhow::Result<()> {
    if args.clients == 0 || !args.seconds.is_finite() || args.seconds <= 0.0 {
        anyhow::bail!("--clients and --seconds must be more than 0");
    }
    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let server = config.cluster_url.to_string();
    let api: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config)?, &args.namespace);
    let mut template = ConfigMap::default();
    template.metadata.generate_name = Some("bench-".into());
    template.metadata.labels = Some([(LABEL.0.to_string(), LABEL.1.to_string())].into());
    template.data = Some([("payload".to_string(), "x".repeat(args.size))].into());
    // One create first: a server that refuses them says why before the load starts.
    api.create(&PostParams::default(), &template).await?;

    let cpu_before = args.pid.and_then(cpu_time);
    let stats = phase(
        args.clients,
        Duration::from_secs_f64(args.seconds),
        move |_, _| {
            let (api, template) = (api.clone(), template.clone());
            async move {
                api.create(&PostParams::default(), &template).await?;
                Ok(())
            }
        },
    )
    .await?;
    let cpu = args
        .pid
        .and_then(|pid| Some((pid, cpu_time(pid)?.checked_sub(cpu_before?)?)));

    println!(
        "{} creates of {}-byte ConfigMaps in {:.1} s from {} clients at {server}: {:.0}/s, p50 {:.3} ms, p99 {:.3} ms",
        stats.ops,
        args.size,
        stats.elapsed.as_secs_f64(),
        args.clients,
        stats.rate(),
        ms(stats.p50),
        ms(stats.p99)
    );
    if let Some((pid, cpu)) = cpu {
        println!(
            "server CPU per create: {:.3} ms (process {pid}'s user and system time over the run / creates)",
            ms(cpu) / stats.ops.max(1) as f64
        );
    }
    println!(
        "clean up: kubectl delete configmaps -n {} -l {}={}",
        args.namespace, LABEL.0, LABEL.1
    );
    Ok(())
}
