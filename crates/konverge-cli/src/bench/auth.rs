//! `konverge bench auth`: what authorization costs a client that is not the admin.
//!
//! `konverge up` runs twice on fresh disk stores, once with `--authorization-mode
//! AlwaysAllow` (the anchor) and once with `RBAC`, each with a ServiceAccount bound to the
//! `edit` ClusterRole in namespace `bench`. Clients using the ServiceAccount's token then
//! create and get ConfigMaps there from 32 concurrent tasks. Both runs authenticate the same
//! token (signature check and ServiceAccount lookup), so the difference is authorization:
//! resolving the ServiceAccount's roles and matching their rules, per request.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{Api, PostParams};

use super::api::{Stats, ms, phase};
use super::up::start_standalone_with;

#[derive(clap::Args)]
pub(crate) struct AuthArgs {
    /// Seconds each phase runs (default 5, or 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// A reduced run (about 10 seconds).
    #[arg(long)]
    quick: bool,
    /// Concurrent clients (default 32).
    #[arg(long, default_value_t = 32)]
    clients: usize,
}

const NAMESPACE: &str = "bench";

/// Creates and gets ConfigMaps as a ServiceAccount against `konverge up` in `mode`.
async fn measure(mode: &str, seconds: Duration, clients: usize) -> anyhow::Result<(Stats, Stats)> {
    let dir = tempfile::tempdir()?;
    let server = start_standalone_with(dir.path(), &["--authorization-mode", mode]).await?;
    let admin = server.client.clone();
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(NAMESPACE.into());
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    let mut account = ServiceAccount::default();
    account.metadata.name = Some("bencher".into());
    accounts.create(&PostParams::default(), &account).await?;
    let mut binding = RoleBinding {
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "edit".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "bencher".into(),
            namespace: Some(NAMESPACE.into()),
            ..Subject::default()
        }]),
        ..RoleBinding::default()
    };
    binding.metadata.name = Some("bencher-edits".into());
    Api::<RoleBinding>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &binding)
        .await?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request("bencher", &PostParams::default(), &request)
        .await?
        .status
        .context("a token")?
        .token;
    let kubeconfig = kube::config::Kubeconfig::read_from(dir.path().join("kubeconfig"))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.auth_info.token = Some(token.into());
    let client = kube::Client::try_from(config)?;
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);

    let a = api.clone();
    let created = phase(clients, seconds, move |c, n| {
        let a = a.clone();
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("cm-{c}-{n}"));
        cm.data = Some([("payload".to_string(), "x".repeat(1024))].into());
        async move {
            a.create(&PostParams::default(), &cm).await?;
            Ok(())
        }
    })
    .await?;
    let a = api.clone();
    let got = phase(clients, seconds, move |c, _| {
        let a = a.clone();
        async move {
            a.get(&format!("cm-{c}-0")).await?;
            Ok(())
        }
    })
    .await?;
    Ok((created, got))
}

pub(crate) async fn run(args: AuthArgs) -> anyhow::Result<()> {
    let seconds =
        Duration::from_secs_f64(args.seconds.unwrap_or(if args.quick { 1.0 } else { 5.0 }));
    let (allow_create, allow_get) = measure("AlwaysAllow", seconds, args.clients).await?;
    let (rbac_create, rbac_get) = measure("RBAC", seconds, args.clients).await?;
    println!(
        "authorization cost, ServiceAccount token, {} clients, {} s per phase",
        args.clients,
        seconds.as_secs_f64()
    );
    println!("| verb | mode | ops/s | p50 ms | p99 ms | p50 vs AlwaysAllow | p99 vs AlwaysAllow |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (verb, anchor, rbac) in [
        ("create", &allow_create, &rbac_create),
        ("get", &allow_get, &rbac_get),
    ] {
        for (mode, stats) in [("AlwaysAllow", anchor), ("RBAC", rbac)] {
            println!(
                "| {verb} | {mode} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |",
                stats.rate(),
                ms(stats.p50),
                ms(stats.p99),
                ms(stats.p50) / ms(anchor.p50),
                ms(stats.p99) / ms(anchor.p99),
            );
        }
    }
    Ok(())
}
