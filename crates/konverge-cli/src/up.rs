//! `konverge up`: a Kubernetes API on this machine, over HTTPS, in milliseconds.
//!
//! Opens the store (the embedded disk store by default), loads or creates the credentials in
//! the data directory (with the key ServiceAccount tokens are signed with, so tokens outlive
//! restarts), starts the API server on loopback, writes `DATA_DIR/kubeconfig`, says so, and
//! serves until Ctrl-C or SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use konverge_apiserver::{ApiServer, AuthorizationMode};
use konverge_store::{KvStore, MemStore};
use konverge_store_disk::DiskStore;

use konverge_apiserver::serve::in_process::Identity;
use konverge_apiserver::serve::{Credentials, Serve, write_kubeconfig};
use konverge_controllers::kubelet::SimulatedNodes;
use konverge_controllers::manager::ServiceAccountTokens;
use konverge_controllers::{ControllerManager, Selection};
use konverge_runtime::leader::LeaseConfig;

#[derive(clap::Args)]
pub(crate) struct UpArgs {
    /// Where the store, the credentials and the kubeconfig live (default: $HOME/.konverge).
    #[arg(long, env = "KONVERGE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The loopback port to serve on (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// `disk` (durable, in the data directory), `memory` (gone on exit), or
    /// `etcd://HOST:PORT` (an etcd cluster; needs the `etcd` build feature).
    #[arg(long, default_value = "disk")]
    store: String,
    /// How requests are authorized: `RBAC` (Roles, ClusterRoles and their bindings decide, as
    /// on a cluster; the kubeconfig's admin is in system:masters) or `AlwaysAllow`.
    #[arg(long, value_enum, default_value_t = Authorization::Rbac)]
    authorization_mode: Authorization,
    /// Admission plugins to turn off, comma-separated, with kube-apiserver's names
    /// (`LimitRanger`, `ServiceAccount`, `ValidatingAdmissionWebhook`, ...).
    #[arg(long, value_delimiter = ',', value_name = "PLUGINS")]
    disable_admission_plugins: Vec<String>,
    /// Where a webhook Service is, since konverge runs no pods:
    /// `NAMESPACE/NAME:PORT=HOST:PORT` sends admission and conversion webhook calls for port
    /// PORT of Service NAMESPACE/NAME to HOST:PORT (TLS is verified against the Service's DNS
    /// name, `NAME.NAMESPACE.svc`, as on a cluster). Repeatable. A Service without this
    /// mapping is reached through its EndpointSlices.
    #[arg(long = "webhook-service", value_name = "NAMESPACE/NAME:PORT=HOST:PORT", value_parser = parse_webhook_service)]
    webhook_services: Vec<WebhookService>,
    /// kube-controller-manager's controllers to run, with its syntax: `*` runs every one,
    /// `NAME` enables one, `-NAME` disables one, the first entry naming a controller decides
    /// (`*,-cronjob-controller`; kcm's canonical names or their aliases). An empty list runs
    /// none: an API server alone.
    #[arg(long, default_value = "*", value_name = "LIST")]
    controllers: String,
    /// Simulated nodes (`node-1`, `node-2`, ...): kubelets that run the pods bound to them
    /// (status, IPs, readiness, restarts; no containers) and a scheduler that binds pods with
    /// kube-scheduler's rules. 0 runs neither: pods stay Pending.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
}

/// A `--webhook-service` mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
struct WebhookService {
    namespace: String,
    name: String,
    port: i32,
    addr: std::net::SocketAddr,
}

fn parse_webhook_service(arg: &str) -> Result<WebhookService, String> {
    let usage = || format!("{arg:?} is not NAMESPACE/NAME:PORT=HOST:PORT");
    let (service, addr) = arg.split_once('=').ok_or_else(usage)?;
    let (namespace, rest) = service.split_once('/').ok_or_else(usage)?;
    let (name, port) = rest.split_once(':').ok_or_else(usage)?;
    let port: i32 = port
        .parse()
        .ok()
        .filter(|p| (1..=65535).contains(p))
        .ok_or_else(|| format!("{arg:?}: the Service port must be a number from 1 to 65535"))?;
    if namespace.is_empty() || name.is_empty() {
        return Err(usage());
    }
    let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("{arg:?}: {addr:?} is not a HOST:PORT address"))?;
    Ok(WebhookService {
        namespace: namespace.into(),
        name: name.into(),
        port,
        addr,
    })
}

/// `--authorization-mode`, with kube-apiserver's names.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Authorization {
    #[value(name = "RBAC")]
    Rbac,
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
}

/// `$HOME/.konverge`.
pub(crate) fn default_data_dir() -> PathBuf {
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".konverge"),
        None => PathBuf::from(".konverge"),
    }
}

async fn open_store(
    spec: &str,
    data_dir: &std::path::Path,
) -> anyhow::Result<(Arc<dyn KvStore>, String)> {
    if spec == "disk" {
        let path = data_dir.join("store");
        let store = DiskStore::open(&path)
            .with_context(|| format!("opening the disk store in {}", path.display()))?;
        return Ok((Arc::new(store), format!("disk store in {}", path.display())));
    }
    if spec == "memory" {
        return Ok((
            Arc::new(MemStore::new()),
            "memory store (nothing is kept on exit)".into(),
        ));
    }
    if let Some(endpoint) = spec.strip_prefix("etcd://") {
        return open_etcd(endpoint).await;
    }
    bail!("unknown --store {spec:?}: use disk, memory or etcd://HOST:PORT")
}

#[cfg(feature = "etcd")]
async fn open_etcd(endpoint: &str) -> anyhow::Result<(Arc<dyn KvStore>, String)> {
    let url = format!("http://{endpoint}");
    let store = konverge_store_etcd::EtcdStore::connect(std::slice::from_ref(&url))
        .await
        .with_context(|| format!("connecting to etcd at {url}"))?;
    Ok((Arc::new(store), format!("etcd at {url}")))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(_endpoint: &str) -> anyhow::Result<(Arc<dyn KvStore>, String)> {
    bail!("this konverge was built without etcd support: rebuild with `--features etcd`")
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Starts kube-controller-manager's controllers beside `server`, as kcm runs beside
/// kube-apiserver: in-process clients (no socket, no TLS), informers and the
/// `kube-system/kube-controller-manager` Lease as `system:kube-controller-manager`, each
/// controller as its own ServiceAccount in `kube-system` (kcm's
/// `--use-service-account-credentials`).
async fn start_controllers(
    server: &Arc<ApiServer>,
    token: &str,
    selection: Selection,
    nodes: usize,
    data_dir: &std::path::Path,
) -> anyhow::Result<konverge_runtime::RunningManager> {
    let kcm = server.client(Identity::Impersonating {
        token: token.to_string(),
        user: "system:kube-controller-manager".into(),
    });
    let admin = server.client(Identity::Token(token.to_string()));
    let for_token = server.clone();
    let tokens = ServiceAccountTokens::new(admin.clone(), move |token| {
        for_token.client(Identity::Token(token))
    });
    // One `konverge up` per data directory: after a restart, the same identity takes its Lease
    // back at once instead of waiting for it to expire.
    let identity = format!(
        "{}_{}",
        konverge_runtime::leader::host_name(),
        data_dir.display()
    );
    let lease = LeaseConfig::new("kube-system", "kube-controller-manager").with_identity(identity);
    let mut manager = ControllerManager::new(kcm)
        .selection(selection)
        .credentials(tokens)
        .leader_election(lease);
    if nodes > 0 {
        manager = manager.simulated_nodes(SimulatedNodes::new(nodes), admin);
    }
    let running = manager.spawn().await?;
    Ok(running)
}

pub(crate) async fn run(args: UpArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let selection: Selection = args
        .controllers
        .parse()
        .with_context(|| format!("--controllers {:?}", args.controllers))?;
    let data_dir = args.data_dir.unwrap_or_else(default_data_dir);
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating the data directory {}", data_dir.display()))?;
    let credentials = Credentials::load_or_create(&data_dir)?;
    let (store, described) = open_store(&args.store, &data_dir).await?;
    let webhooks = konverge_apiserver::webhook::Webhooks::default();
    for service in &args.webhook_services {
        webhooks.map_service(
            &service.namespace,
            &service.name,
            service.port,
            service.addr,
        );
    }
    let server = ApiServer::builder(store)
        .webhooks(webhooks)
        .disable_admission_plugins(args.disable_admission_plugins.iter().cloned())
        .bearer_token(credentials.token.clone())
        .root_ca(credentials.ca_pem.clone())
        .service_account_key(credentials.service_account_key.clone())
        .authorization(match args.authorization_mode {
            Authorization::Rbac => AuthorizationMode::Rbac,
            Authorization::AlwaysAllow => AuthorizationMode::AlwaysAllow,
        })
        .build()
        .await
        .context("starting the API server")?;
    let serving = Serve::new(server.router())
        .tls(&credentials)?
        .bind(("127.0.0.1", args.port))
        .await
        .with_context(|| format!("listening on 127.0.0.1:{}", args.port))?;
    server.set_address(serving.local_addr().to_string());
    let url = serving.url();
    let kubeconfig = write_kubeconfig(&data_dir, &credentials, &url)?;
    serving.ready().await;
    println!(
        "konverge is ready in {:.1} ms: Kubernetes API at {url} ({described})",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!("export KUBECONFIG={}", kubeconfig.display());
    println!("kubectl get namespaces");
    let controllers = start_controllers(
        &server,
        &credentials.token,
        selection,
        args.nodes,
        &data_dir,
    )
    .await
    .context("starting kube-controller-manager's controllers")?;
    serving.until(shutdown_signal()).await;
    if let Err(error) = controllers.stop().await {
        tracing::warn!(%error, "the controllers did not stop cleanly");
    }
    println!("konverge stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_services_parse_or_say_what_is_wrong() {
        assert_eq!(
            parse_webhook_service("hooks/policy:443=127.0.0.1:9443"),
            Ok(WebhookService {
                namespace: "hooks".into(),
                name: "policy".into(),
                port: 443,
                addr: "127.0.0.1:9443".parse().expect("an address"),
            })
        );
        assert!(
            parse_webhook_service("policy:443=127.0.0.1:9443")
                .unwrap_err()
                .contains("is not NAMESPACE/NAME:PORT=HOST:PORT")
        );
        assert!(
            parse_webhook_service("hooks/policy:0=127.0.0.1:9443")
                .unwrap_err()
                .contains("from 1 to 65535")
        );
        assert!(
            parse_webhook_service("hooks/policy:443=nowhere")
                .unwrap_err()
                .contains("is not a HOST:PORT address")
        );
    }
}
