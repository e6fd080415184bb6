//! Runs the bucket operator against the cluster of the current kubeconfig (`konverge up`
//! writes one), installing its CustomResourceDefinition first, over an in-memory cloud.
//! `--broken` runs the twin that lets Buckets go before their cloud bucket is deleted.

use std::sync::Arc;
use std::time::Duration;

use konverge_example_bucket_operator::{Bucket, Cloud, Context, Mode, controller, reconcile};
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
        Mode::ReleasesEarly
    } else {
        Mode::Correct
    };
    let client = kube::Client::try_default().await?;
    konverge_runtime::crd::install(
        &client,
        &Bucket::crd(),
        "bucket-operator",
        Duration::from_secs(30),
    )
    .await?;
    let mut manager = Manager::new(client.clone());
    let cloud = Cloud::default();
    manager.add(
        controller(&client),
        reconcile,
        Arc::new(Context::new(client, cloud, mode)),
    );
    manager
        .run(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    Ok(())
}
