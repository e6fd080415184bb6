//! Runs the app operator against the cluster of the current kubeconfig (`konverge up` writes
//! one), installing its CustomResourceDefinition first. `--broken` runs the twin that writes
//! its status on every pass, to watch `konverge doctor` catch the hot loop.

use std::sync::Arc;
use std::time::Duration;

use konverge_example_app_operator::{App, Context, Mode, controller, reconcile};
use konverge_runtime::Manager;
use kube::CustomResourceExt;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mode = if std::env::args().any(|a| a == "--broken") {
        Mode::Flapping
    } else {
        Mode::Correct
    };
    let client = kube::Client::try_default().await?;
    konverge_runtime::crd::install(
        &client,
        &App::crd(),
        "app-operator",
        Duration::from_secs(30),
    )
    .await?;
    let mut manager = Manager::new(client.clone());
    manager.add(
        controller(&client, mode),
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
