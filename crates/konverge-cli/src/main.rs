//! The `konverge` command.
//!
//! - `konverge up`: the API server on loopback over HTTPS, with a kubeconfig (see `up`;
//!   serving, credentials and the kubeconfig are `konverge_apiserver::serve`).
//! - `konverge kubeconfig`: a kubeconfig for another identity on that server — a user with a
//!   client certificate from its CA, or a ServiceAccount with a token (see `kubeconfig`).
//! - `konverge doctor`: watch a live cluster for a window and report hot loops, growing
//!   objects, stuck deletions and objects deleted after a Warning Event (see `doctor`; the
//!   engine is `konverge_runtime::doctor`).
//! - `konverge bench`: measurements against an anchor run in the same run (see `bench`):
//!   `store` (the disk store against a real etcd), `api` (readiness, memory and verb
//!   throughput of `konverge up`), `controller` (konverge-runtime against kube-runtime),
//!   `doctor` (the doctor's memory and findings on 10,000 objects), `auth` (RBAC against
//!   AlwaysAllow for a ServiceAccount's requests), `workloads` (the deployment and replicaset
//!   controllers' requests per pod, against kube-controller-manager's); and `creates`, load
//!   on any running server for profiling it.
//! - `konverge envtest assets`: a folder for controller-runtime envtest's `KUBEBUILDER_ASSETS`
//!   whose `kube-apiserver` and `etcd` are this binary standing in for them (see `envtest`).

mod bench;
mod doctor;
mod envtest;
mod kubeconfig;
mod rules;
mod up;

use std::process::ExitCode;

/// mimalloc rather than the system allocator: the server, its controllers and the simulated
/// kubelets allocate from many threads at once, where glibc's malloc spent a sixth of the
/// cluster benchmark's CPU (docs/benchmarks.md). Built without its transparent huge page
/// advice (`no_thp`): with it, every 2 MiB region of its eagerly committed arenas that was
/// touched at all became resident, 17 MiB of an idle `konverge up`'s 30 MiB of heap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "konverge",
    version,
    about = "Kubernetes controllers that converge"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a Kubernetes API server on this machine and write a kubeconfig for it.
    Up(up::UpArgs),
    /// Print a kubeconfig for another identity on a `konverge up` server: a user with a client
    /// certificate its CA signs (`--user NAME --group G`), or a ServiceAccount with a token
    /// from the running server (`--as-serviceaccount NAMESPACE/NAME`).
    Kubeconfig(kubeconfig::KubeconfigArgs),
    /// Watch a live cluster for a while and report hot loops, growing objects, stuck
    /// deletions and objects deleted after a Warning.
    ///
    /// Findings: objects written too often (with who wrote them and which fields changed),
    /// objects that grow write after write or near the 1.5 MiB limit, deletions and namespaces
    /// held up by finalizers, objects deleted during the window while the latest Event about
    /// them was a Warning (the last thing their controller said was a failure: the cleanup
    /// they were owed, such as an external resource, may never have happened), and conflict
    /// storms and error rates from the server's metrics.
    ///
    /// Exit code 0: nothing found; 1: findings; 2: the doctor could not run.
    Doctor(doctor::DoctorArgs),
    /// Measure konverge against its anchors (results are ratios measured in one run).
    Bench {
        #[command(subcommand)]
        target: bench::Target,
    },
    /// Stand in for the binaries controller-runtime's envtest runs: `export
    /// KUBEBUILDER_ASSETS=$(konverge envtest assets)` and a Go operator's tests start konverge
    /// instead of etcd and kube-apiserver.
    Envtest {
        #[command(subcommand)]
        command: envtest::EnvtestCommand,
    },
}

fn main() -> anyhow::Result<ExitCode> {
    // Called as `kube-apiserver` or `etcd` (the links `konverge envtest assets` writes), this
    // binary is that program's stand-in, with that program's flags.
    let mut args = std::env::args_os();
    let stand_in = args.next().as_ref().and_then(envtest::StandIn::named);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if let Some(stand_in) = stand_in {
        return Ok(runtime.block_on(envtest::run_stand_in(stand_in, args.collect())));
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    runtime.block_on(async {
        match cli.command {
            Command::Up(args) => up::run(args).await.map(|()| ExitCode::SUCCESS),
            Command::Kubeconfig(args) => kubeconfig::run(args).await.map(|()| ExitCode::SUCCESS),
            Command::Bench { target } => bench::run(target).await.map(|()| ExitCode::SUCCESS),
            Command::Envtest { command } => envtest::run(command).await,
            // Findings and failures get distinct exit codes, so scripts can tell a sick
            // cluster from a doctor that could not look.
            Command::Doctor(args) => Ok(match doctor::run(args).await {
                Ok(false) => ExitCode::SUCCESS,
                Ok(true) => ExitCode::from(1),
                Err(error) => {
                    eprintln!("Error: {error:#}");
                    ExitCode::from(2)
                }
            }),
        }
    })
}
