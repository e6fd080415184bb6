//! The `konverge` command.
//!
//! - `konverge bench store`: durable commit rate and latency of the disk store against a real
//!   etcd on loopback, and watch fan-out (see `bench::store`).

mod bench;

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
    /// Measure konverge against its anchors (results are ratios measured in one run).
    Bench {
        #[command(subcommand)]
        target: bench::Target,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Bench { target } => bench::run(target).await,
        }
    })
}
