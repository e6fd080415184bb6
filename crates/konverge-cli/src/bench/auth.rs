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

use super::api::{Stats, ms, phase};
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

/// Creates ConfigMaps (named by `round`) from `clients` tasks for `seconds`.
async fn creates(
    api: &Api<ConfigMap>,
    round: usize,
    clients: usize,
    seconds: Duration,
) -> anyhow::Result<Stats> {
    let a = api.clone();
    phase(clients, seconds, move |c, n| {
        let a = a.clone();
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("cm-{round}-{c}-{n}"));
        cm.data = Some([("payload".to_string(), "x".repeat(1024))].into());
        async move {
            a.create(&PostParams::default(), &cm).await?;
            Ok(())
        }
    })
    .await
}

/// Gets the ConfigMaps the first round created from `clients` tasks for `seconds`.
async fn gets(api: &Api<ConfigMap>, clients: usize, seconds: Duration) -> anyhow::Result<Stats> {
    let a = api.clone();
    phase(clients, seconds, move |c, _| {
        let a = a.clone();
        async move {
            a.get(&format!("cm-0-{c}-0")).await?;
            Ok(())
        }
    })
    .await
}

/// One verb against one server, over the rounds.
struct Series {
    verb: &'static str,
    mode: &'static str,
    rates: Vec<f64>,
    p50s: Vec<f64>,
    p99s: Vec<f64>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub(crate) async fn run(args: AuthArgs) -> anyhow::Result<()> {
    let seconds =
        Duration::from_secs_f64(args.seconds.unwrap_or(if args.quick { 1.0 } else { 3.0 }));
    let rounds = if args.quick { 1 } else { args.rounds.max(1) };
    let servers = [
        ("AlwaysAllow", start("AlwaysAllow").await?),
        ("RBAC", start("RBAC").await?),
    ];
    // Phases alternate between the two servers, round after round, so that whatever else the
    // machine does falls on both alike; each figure is the median over the rounds.
    let mut results: Vec<Series> = Vec::new();
    for round in 0..rounds {
        for verb in ["create", "get"] {
            for (mode, server) in &servers {
                let stats = match verb {
                    "create" => creates(&server.api, round, args.clients, seconds).await?,
                    _ => gets(&server.api, args.clients, seconds).await?,
                };
                let entry = match results
                    .iter_mut()
                    .position(|r| r.verb == verb && r.mode == *mode)
                {
                    Some(i) => &mut results[i],
                    None => {
                        results.push(Series {
                            verb,
                            mode,
                            rates: Vec::new(),
                            p50s: Vec::new(),
                            p99s: Vec::new(),
                        });
                        results.last_mut().expect("just pushed")
                    }
                };
                entry.rates.push(stats.rate());
                entry.p50s.push(ms(stats.p50));
                entry.p99s.push(ms(stats.p99));
            }
        }
    }
    println!(
        "authorization cost, ServiceAccount token, {} clients, {} rounds of {} s phases (medians)",
        args.clients,
        rounds,
        seconds.as_secs_f64()
    );
    println!("| verb | mode | ops/s | p50 ms | p99 ms | p50 vs AlwaysAllow | p99 vs AlwaysAllow |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    let mut anchor = (0.0, 0.0);
    for Series {
        verb,
        mode,
        rates,
        p50s,
        p99s,
    } in results
    {
        let (rate, p50, p99) = (median(rates), median(p50s), median(p99s));
        if mode == "AlwaysAllow" {
            anchor = (p50, p99);
        }
        println!(
            "| {verb} | {mode} | {rate:.0} | {p50:.2} | {p99:.2} | {:.2} | {:.2} |",
            p50 / anchor.0,
            p99 / anchor.1,
        );
    }
    Ok(())
}
