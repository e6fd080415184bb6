//! Runs label-audit against the cluster of the current kubeconfig (`konverge up` writes one).
//! An argument is the label selector to audit by (default: objects carrying
//! `audit.konverge.dev/audit`); `--broken` runs the twin that stamps the resourceVersion, to
//! watch the runtime's hot-loop detector back it off.

use konverge_example_label_audit::{LABEL, Mode, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut mode = Mode::Correct;
    let mut selector = LABEL.to_string();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--broken" => mode = Mode::StampsResourceVersion,
            _ => selector = arg,
        }
    }
    let client = kube::Client::try_default().await?;
    run(client, &selector, mode, async {
        tokio::signal::ctrl_c().await.ok();
    })
    .await?;
    Ok(())
}
