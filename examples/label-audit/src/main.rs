//! Runs label-audit against the cluster of the current kubeconfig (`konverge up` writes one).
//! The first argument is the label selector to audit by (default: objects carrying
//! `audit.konverge.dev/audit`).

use konverge_example_label_audit::{LABEL, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let selector = std::env::args().nth(1).unwrap_or_else(|| LABEL.to_string());
    let client = kube::Client::try_default().await?;
    run(client, &selector, async {
        tokio::signal::ctrl_c().await.ok();
    })
    .await?;
    Ok(())
}
