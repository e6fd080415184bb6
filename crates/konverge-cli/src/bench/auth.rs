//! `konverge bench auth`: what authorization costs a client that is not the admin.
//!
//! Two `konverge up` run side by side on fresh disk stores, one with `--authorization-mode
//! AlwaysAllow` (the anchor) and one with `RBAC`, each with a ServiceAccount bound to the
//! `edit` ClusterRole in namespace `bench`. Clients using the ServiceAccount's token then
//! create and get ConfigMaps there from 32 concurrent tasks, the two servers in turn, round
//! after round; the figures are medians over the rounds. Both runs authenticate the same
//! token (signature check and ServiceAccount lookup), so the difference is authorization:
//! resolving the ServiceAccount's roles and matching their rules, per request.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{Api, PostParams};

use super::compare::{Contender, Verb, alternate};
use super::up::start_standalone_with;

#[derive(clap::Args)]
pub(crate) struct AuthArgs {
    /// Seconds each phase runs (default 3, or 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// A reduced run (one round of 1 s phases).
    #[arg(long)]
    quick: bool,
    /// Rounds of alternating phases (default 5).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Concurrent clients (default 32).
    #[arg(long, default_value_t = 32)]
    clients: usize,
}

const NAMESPACE: &str = "bench";

/// `konverge up` in one authorization mode, and the ServiceAccount's ConfigMaps API on it.
struct Server {
    // Held: dropping it stops the server.
    _server: super::up::Standalone,
    _dir: tempfile::TempDir,
    api: Api<ConfigMap>,
}

/// Starts `konverge up` in `mode` with a ServiceAccount bound to `edit` in [`NAMESPACE`].
async fn start(mode: &str) -> anyhow::Result<Server> {
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
    Ok(Server {
        _server: server,
        _dir: dir,
        api: Api::namespaced(client, NAMESPACE),
    })
}

pub(crate) async fn run(args: AuthArgs) -> anyhow::Result<()> {
    let seconds =
        Duration::from_secs_f64(args.seconds.unwrap_or(if args.quick { 1.0 } else { 3.0 }));
    let rounds = if args.quick { 1 } else { args.rounds.max(1) };
    // Held until the end: dropping a server stops it.
    let (always, rbac) = (start("AlwaysAllow").await?, start("RBAC").await?);
    let servers = [
        Contender {
            name: "AlwaysAllow",
            api: always.api.clone(),
        },
        Contender {
            name: "RBAC",
            api: rbac.api.clone(),
        },
    ];
    let results = alternate(
        &servers,
        &[Verb::Create, Verb::Get],
        rounds,
        args.clients,
        seconds,
    )
    .await?;
    results.print(
        &format!(
            "authorization cost, ServiceAccount token, {} clients, {} rounds of {} s phases (medians)",
            args.clients,
            rounds,
            seconds.as_secs_f64()
        ),
        "mode",
        "AlwaysAllow",
    );
    Ok(())
}
