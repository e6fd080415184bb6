//! `konverge bench envtest`: controller-runtime envtest's `Start()` (with CRDs) and `Stop()`
//! on konverge's assets, played as envtest plays them (konverge-testkit's `envtest`, the
//! newest release's steps, 100 ms polls included).
//!
//! Anchors, in the same run: a real etcd's part of `Start()` (the same `--help` probe, start
//! and `/health` polls), always when `etcd` is on PATH; and, when `--kube-apiserver` names a
//! real kube-apiserver, envtest's whole `Start()`/`Stop()` on real etcd + kube-apiserver.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::load::ms;
use anyhow::Context as _;
use konverge_testkit::envtest::{Assets, ControlPlane, Etcd, RELEASES, User, sample_crds};

#[derive(clap::Args)]
pub(crate) struct EnvtestArgs {
    /// Start/stop rounds for each contender.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// CRDs each `Start()` installs (and waits to be served).
    #[arg(long, default_value_t = 20)]
    crds: usize,
    /// The real etcd of the anchor (default: `etcd` on PATH).
    #[arg(long)]
    etcd: Option<PathBuf>,
    /// A real kube-apiserver: with it, envtest's whole start and stop on real etcd and
    /// kube-apiserver is measured too.
    #[arg(long)]
    kube_apiserver: Option<PathBuf>,
}

/// Median, minimum and maximum of some durations.
struct Spread {
    median: Duration,
    min: Duration,
    max: Duration,
}

impl Spread {
    fn of(mut samples: Vec<Duration>) -> Spread {
        samples.sort_unstable();
        Spread {
            median: samples.get(samples.len() / 2).copied().unwrap_or_default(),
            min: samples.first().copied().unwrap_or_default(),
            max: samples.last().copied().unwrap_or_default(),
        }
    }

    fn show(&self) -> String {
        format!(
            "median {:.1} ms (min {:.1}, max {:.1})",
            ms(self.median),
            ms(self.min),
            ms(self.max)
        )
    }
}

/// One contender's rounds: envtest's Start() with CRDs, Stop(), and etcd's part of Start().
struct Rounds {
    start: Spread,
    stop: Spread,
    etcd: Spread,
    apiserver: Spread,
    crds: Spread,
}

async fn control_plane_rounds(
    assets: &Assets,
    rounds: usize,
    crds: usize,
) -> anyhow::Result<Rounds> {
    let release = RELEASES[RELEASES.len() - 1];
    let crds = sample_crds(crds);
    let (mut starts, mut stops, mut etcds) = (Vec::new(), Vec::new(), Vec::new());
    let (mut apiservers, mut installs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let plane = ControlPlane::start(assets, release, &[]).await?;
        let admin = plane.client(&User::new("admin", &["system:masters"]))?;
        let installing = Instant::now();
        plane.install_crds(&admin, &crds).await?;
        starts.push(started.elapsed());
        installs.push(installing.elapsed());
        etcds.push(plane.etcd_ready_after());
        apiservers.push(plane.apiserver_ready_after());
        let stopping = Instant::now();
        plane.stop().await?;
        stops.push(stopping.elapsed());
    }
    Ok(Rounds {
        start: Spread::of(starts),
        stop: Spread::of(stops),
        etcd: Spread::of(etcds),
        apiserver: Spread::of(apiservers),
        crds: Spread::of(installs),
    })
}

async fn etcd_rounds(etcd: &std::path::Path, rounds: usize) -> anyhow::Result<(Spread, Spread)> {
    let release = RELEASES[RELEASES.len() - 1];
    let (mut starts, mut stops) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let running = Etcd::start(etcd, release).await?;
        starts.push(running.ready_after);
        let stopping = Instant::now();
        running.stop().await?;
        stops.push(stopping.elapsed());
    }
    Ok((Spread::of(starts), Spread::of(stops)))
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

fn version_of(binary: &std::path::Path) -> String {
    std::process::Command::new(binary)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "version unknown".into())
}

pub(crate) async fn run(args: EnvtestArgs) -> anyhow::Result<()> {
    let folder = tempfile::tempdir().context("a temporary assets folder")?;
    let dir = crate::envtest::write_assets(folder.path())?;
    let assets = Assets::in_dir(&dir);
    println!(
        "envtest Start() = control plane + admin user + default namespace + {} CRDs served; \
         {} rounds each",
        args.crds, args.rounds
    );
    let ours = control_plane_rounds(&assets, args.rounds, args.crds).await?;
    println!("konverge assets: Start() {}", ours.start.show());
    println!("konverge assets: Stop()  {}", ours.stop.show());
    println!(
        "konverge assets: etcd's part of Start() {}",
        ours.etcd.show()
    );
    println!(
        "konverge assets: kube-apiserver's part (spawn to /healthz) {}",
        ours.apiserver.show()
    );
    println!(
        "konverge assets: CRDs created and served {}",
        ours.crds.show()
    );

    let real_etcd = args.etcd.clone().or_else(|| on_path("etcd"));
    match &real_etcd {
        Some(etcd) => {
            let (start, stop) = etcd_rounds(etcd, args.rounds).await?;
            println!(
                "real etcd ({}): etcd's part of Start() {}, Stop() {}",
                version_of(etcd),
                start.show(),
                stop.show()
            );
            println!(
                "ratio, etcd's part of Start(): konverge / real etcd = {:.2}",
                ms(ours.etcd.median) / ms(start.median).max(f64::EPSILON)
            );
        }
        None => println!("real etcd: not measured: no etcd on PATH (--etcd PATH)"),
    }
    match (&args.kube_apiserver, &real_etcd) {
        (Some(kube_apiserver), Some(etcd)) => {
            let real = Assets {
                etcd: etcd.clone(),
                kube_apiserver: kube_apiserver.clone(),
            };
            let theirs = control_plane_rounds(&real, args.rounds, args.crds).await?;
            println!(
                "real kube-apiserver ({}) + etcd: Start() {}, Stop() {}",
                version_of(kube_apiserver),
                theirs.start.show(),
                theirs.stop.show()
            );
            println!(
                "ratio, Start(): konverge / kube-apiserver + etcd = {:.3}; Stop(): {:.3}",
                ms(ours.start.median) / ms(theirs.start.median).max(f64::EPSILON),
                ms(ours.stop.median) / ms(theirs.stop.median).max(f64::EPSILON)
            );
        }
        _ => {
            println!("real kube-apiserver + etcd: not measured (--kube-apiserver PATH and an etcd)")
        }
    }
    Ok(())
}
