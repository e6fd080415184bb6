//! Runs the bucket webhook on this machine for the cluster of the current kubeconfig
//! (`konverge up` writes one): makes a self-signed serving certificate for 127.0.0.1, serves
//! `/mutate` and `/validate` over HTTPS, and installs the webhook configurations that point
//! at it (by URL, with the certificate as their `caBundle`). On a cluster, the webhook runs
//! as a pod behind a Service instead, and the configurations name that Service.

use clap::Parser;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use konverge_example_bucket_webhook::{Target, base_url, configurations, self_signed, serve};
use kube::Api;
use kube::api::{Patch, PatchParams};

#[derive(Parser)]
struct Args {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:9443")]
    listen: std::net::SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    let (cert, key) = self_signed(&[&addr.ip().to_string()])?;
    let server = serve(listener, &cert, &key)?;
    let client = kube::Client::try_default().await?;
    let (mutating, validating) = configurations(&Target::Url {
        base: base_url(addr),
        ca_bundle: Some(cert),
    });
    let apply = PatchParams::apply("bucket-webhook").force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            konverge_example_bucket_webhook::NAME,
            &apply,
            &Patch::Apply(&mutating),
        )
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client)
        .patch(
            konverge_example_bucket_webhook::NAME,
            &apply,
            &Patch::Apply(&validating),
        )
        .await?;
    tracing::info!(%addr, "serving the bucket webhook");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = server => {}
    }
    Ok(())
}
