//! Runs the web operator against the cluster of the current kubeconfig (`konverge up` writes
//! one), installing its CustomResourceDefinition first. `--broken=available-too-early` or
//! `--broken=stale-ready-count` runs one of the broken twins.

use std::sync::Arc;
use std::time::Duration;

use konverge_example_web_operator::{Context, Mode, WebApp, controller, reconcile};
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
    let mode = match std::env::args().find_map(|a| a.strip_prefix("--broken=").map(String::from)) {
        Some(name) => name.parse()?,
        None => Mode::Correct,
    };
    let client = kube::Client::try_default().await?;
    konverge_runtime::crd::install(
        &client,
        &WebApp::crd(),
        "web-operator",
        Duration::from_secs(30),
    )
    .await?;
    let mut manager = Manager::new(client.clone());
    manager.add(
        controller(&client),
        reconcile,
        Arc::new(Context::new(client, mode)),
    );
    manager
        .run(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    Ok(())
}
