//! Runs the aggregator against the cluster of the current kubeconfig (`konverge up` writes
//! one). `--broken` runs the twin that never prunes, to watch `konverge doctor` catch it.

use std::sync::Arc;

use konverge_example_aggregator::{Context, Mode, controller, reconcile};
use konverge_runtime::Manager;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mode = if std::env::args().any(|a| a == "--broken") {
        Mode::NeverPrunes
    } else {
        Mode::Correct
    };
    let client = kube::Client::try_default().await?;
    let mut manager = Manager::new(client.clone());
    manager.add(
        controller(&client),
        reconcile,
        Arc::new(Context { client, mode }),
    );
    manager
        .run(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    Ok(())
}
