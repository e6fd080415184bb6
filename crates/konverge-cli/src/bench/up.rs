//! `konverge up` as a process for the benchmarks: started on a data directory, its client, and
//! the memory processes use.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Resident memory of a process, in MiB.
pub(crate) fn rss_mib(pid: u32) -> Option<f64> {
    proc_status_mib(pid, "VmRSS:")
}

/// The CPU time (user and system, every thread) process `pid` has used so far, from
/// `/proc/<pid>/stat` (in clock ticks of 10 ms).
pub(crate) fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces), from the state on.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // utime and stime are the 14th and 15th fields; the state, the 3rd, is index 0 here.
    let total = ticks(11)? + ticks(12)?;
    Some(Duration::from_millis(total * 10))
}

/// A `kB` line of `/proc/<pid>/status`, in MiB.
fn proc_status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

pub(crate) struct Standalone {
    // Held so that dropping the handle kills the server.
    _child: tokio::process::Child,
    pub(crate) client: kube::Client,
    /// From the spawn until `/readyz` answered a client made from the kubeconfig.
    pub(crate) ready: Duration,
    /// From the spawn until the server printed that it is ready: the part of `ready` before
    /// the client reads the kubeconfig, makes its TLS configuration and connects.
    pub(crate) announced: Duration,
    pub(crate) pid: u32,
}

/// Starts `konverge up` on `dir` and waits until `/readyz` answers over HTTPS.
pub(crate) async fn start_standalone(dir: &Path) -> anyhow::Result<Standalone> {
    start_standalone_with(dir, &[]).await
}

/// [`start_standalone`] with more arguments for `konverge up`.
pub(crate) async fn start_standalone_with(
    dir: &Path,
    extra: &[&str],
) -> anyhow::Result<Standalone> {
    let exe = std::env::current_exe().context("locating the konverge binary")?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(exe)
        .args(["up", "--port", "0", "--store", "disk", "--data-dir"])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("starting konverge up")?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next_line().await?.context("konverge up exited")?;
    let announced = started.elapsed();
    if !first.starts_with("konverge is ready") {
        bail!("unexpected first line from konverge up: {first}");
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let kubeconfig = kube::config::Kubeconfig::read_from(dir.join("kubeconfig"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    loop {
        let req = http::Request::get("/readyz").body(Vec::new())?;
        if client.request_text(req).await.is_ok() {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("konverge up did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let ready = started.elapsed();
    let pid = child.id().context("konverge up pid")?;
    Ok(Standalone {
        _child: child,
        client,
        ready,
        announced,
        pid,
    })
}

/// The most memory a process has been resident with so far (`VmHWM`), in MiB.
pub(crate) fn peak_rss_mib(pid: u32) -> Option<f64> {
    proc_status_mib(pid, "VmHWM:")
}
