//! `konverge up`: a Kubernetes API on this machine, over HTTPS, in milliseconds.
//!
//! Opens the store (the embedded disk store by default), loads or creates the credentials in
//! the data directory (with the key ServiceAccount tokens are signed with, so tokens outlive
//! restarts), starts the API server on loopback, writes `DATA_DIR/kubeconfig`, says so, and
//! serves until Ctrl-C or SIGTERM.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use konverge_apiserver::{ApiServer, AuthorizationMode};
use konverge_store::{KvStore, MemStore};
use konverge_store_disk::DiskStore;

use konverge_apiserver::serve::in_process::Identity;
use konverge_apiserver::serve::{Credentials, Serve, server_url, write_kubeconfig};
use konverge_controllers::kubelet::SimulatedNodes;
use konverge_controllers::manager::ServiceAccountTokens;
use konverge_controllers::{ControllerManager, Selection};
use konverge_runtime::leader::LeaseConfig;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub(crate) struct UpArgs {
    /// Where the store, the credentials and the kubeconfig live (default: $HOME/.konverge).
    #[arg(long, env = "KONVERGE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The port to serve on (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// The address to serve on, as kube-apiserver's `--bind-address` (`0.0.0.0`: every
    /// IPv4 address). Default: loopback only.
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    bind_address: IpAddr,
    /// The address the other servers of the cluster and the `kubernetes` Service's
    /// endpoints name this server by, as kube-apiserver's `--advertise-address`. Default: the
    /// bind address, or 127.0.0.1 when that is every address.
    #[arg(long, value_name = "IP")]
    advertise_address: Option<IpAddr>,
    /// The credentials the servers of one cluster share: its CA and CA key, the
    /// ServiceAccount signing key and the admin token (`pki/ca.crt`, `pki/ca.key`,
    /// `pki/sa.key`, `token`, laid out as in a data directory, so a first server's data
    /// directory serves). The first server to find it empty creates them; copy it to every
    /// server of the cluster. Each server's serving certificate is issued from this CA at
    /// start, for its own addresses. Default: the data directory (one server alone).
    #[arg(long, value_name = "DIR")]
    credentials_dir: Option<PathBuf>,
    /// `disk` (durable, in the data directory), `memory` (gone on exit), or
    /// `etcd://HOST:PORT[,HOST:PORT...]` (an etcd cluster, by its members' client addresses;
    /// needs the `etcd` build feature).
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
    /// kube-scheduler's rules. `kubectl logs` shows what their containers "printed" (a start
    /// line, the command and args, the exit; or the pod's `konverge.dev/log` annotation). 0
    /// runs neither: pods stay Pending.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Zones to spread the simulated nodes over, comma-separated, round robin (`a,b`: node-1
    /// in `a`, node-2 in `b`, node-3 in `a`, ...), as their `topology.kubernetes.io/zone`
    /// label. Each zone must be a valid label value. Default: no zone label.
    #[arg(long, value_delimiter = ',', value_name = "ZONES", value_parser = parse_zone)]
    node_zones: Vec<String>,
    /// Each simulated node's capacity (and allocatable), comma-separated `RESOURCE=QUANTITY`
    /// pairs that replace the defaults one by one (`cpu=4,memory=16Gi,pods=110`; the defaults
    /// are cpu=8, memory=32Gi, pods=110, ephemeral-storage=100Gi). RESOURCE is `cpu`,
    /// `memory`, `pods`, `ephemeral-storage`, `hugepages-<size>` or an extended resource
    /// (`example.com/gpu`); QUANTITY is a Kubernetes quantity (`500m`, `1.5Gi`, `1e3`), not
    /// negative.
    #[arg(long, value_delimiter = ',', value_name = "RESOURCE=QUANTITY", value_parser = parse_capacity)]
    node_capacity: Vec<Capacity>,
    /// Lifecycle rules for the simulated kubelets, a YAML or JSON file: a list of rules, each
    /// a `match` (`namespace`, `labels`, `image` substring, `node`) and what the matched pods'
    /// containers do (`exitCode: N`, `imagePull: Fail`, `startSeconds: N` or
    /// `neverReady: true`), with an optional `limit` on how many pods it applies to. A pod's
    /// `konverge.dev/...` annotations win over a rule. A bad file stops `konverge up` before
    /// it serves.
    #[arg(long, value_name = "FILE")]
    kubelet_rules: Option<PathBuf>,
    /// Group-versions to serve beyond Kubernetes 1.33's defaults, with kube-apiserver's
    /// syntax, comma-separated: `GROUP/VERSION=true`
    /// (`admissionregistration.k8s.io/v1beta1=true`), `api/beta=true`, `api/all=true`. The
    /// defaults are always served; of the others, those konverge implements are served and
    /// the rest are named on start.
    #[arg(long, value_delimiter = ',', value_name = "KEY=VALUE")]
    runtime_config: Vec<String>,
    /// Feature gates, with kube-apiserver's syntax (`NAME=true,NAME2=false`): konverge runs
    /// every gate at its Kubernetes 1.33 default; a gate set to its default is taken, an
    /// unknown gate or one set otherwise stops `konverge up` with kube's words.
    #[arg(long, value_delimiter = ',', value_name = "NAME=BOOL")]
    feature_gates: Vec<String>,
}

/// One `--node-capacity` entry, the quantity in its canonical form (`1024Mi` is `1Gi`), as a
/// kubelet reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Capacity {
    resource: String,
    quantity: String,
}

fn parse_capacity(arg: &str) -> Result<Capacity, String> {
    let (resource, quantity) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?} is not RESOURCE=QUANTITY (e.g. cpu=4 or memory=16Gi)"))?;
    let resource = resource.trim();
    let quantity = quantity.trim();
    check_resource_name(resource)?;
    konverge_apimachinery::quantity::parse(quantity)
        .map_err(|error| format!("{arg:?}: {quantity:?} is not a quantity: {error}"))?;
    let value = konverge_apimachinery::quantity::value(quantity)
        .ok_or_else(|| format!("{arg:?}: {quantity:?} is too large a quantity"))?;
    if value.nanos < 0 {
        return Err(format!("{arg:?}: the quantity must not be negative"));
    }
    Ok(Capacity {
        resource: resource.to_string(),
        quantity: value.canonical,
    })
}

/// A node's resource names: the ones a kubelet reports, or an extended resource
/// (`example.com/gpu`, a qualified name with a prefix), as node validation accepts.
fn check_resource_name(resource: &str) -> Result<(), String> {
    const KNOWN: &[&str] = &["cpu", "memory", "pods", "ephemeral-storage"];
    let extended = resource.contains('/')
        && konverge_apimachinery::selector::validate_label_key(resource).is_ok();
    let hugepages = resource
        .strip_prefix("hugepages-")
        .is_some_and(|size| konverge_apimachinery::quantity::parse(size).is_ok());
    if KNOWN.contains(&resource) || extended || hugepages {
        return Ok(());
    }
    Err(format!(
        "unknown resource {resource:?}: use cpu, memory, pods, ephemeral-storage, \
         hugepages-<size> or an extended resource name (example.com/gpu)"
    ))
}

fn parse_zone(arg: &str) -> Result<String, String> {
    if arg.is_empty() {
        return Err("a zone name must not be empty".into());
    }
    konverge_apimachinery::selector::validate_label_value(arg)
        .map_err(|error| format!("{arg:?} is not a zone label value: {error}"))?;
    Ok(arg.to_string())
}

/// The simulated nodes `--nodes`, `--node-zones` and `--node-capacity` ask for; `None` for
/// none.
fn simulated_nodes(args: &UpArgs) -> Option<SimulatedNodes> {
    if args.nodes == 0 {
        return None;
    }
    let mut nodes = SimulatedNodes::new(args.nodes);
    if !args.node_zones.is_empty() {
        nodes = nodes.zones(args.node_zones.iter().cloned());
    }
    for capacity in &args.node_capacity {
        nodes = nodes.capacity(capacity.resource.clone(), capacity.quantity.clone());
    }
    Some(nodes)
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
    bail!("unknown --store {spec:?}: use disk, memory or etcd://HOST:PORT[,HOST:PORT...]")
}

#[cfg(feature = "etcd")]
async fn open_etcd(endpoints: &str) -> anyhow::Result<(Arc<dyn KvStore>, String)> {
    let urls: Vec<String> = endpoints
        .split(',')
        .map(|endpoint| format!("http://{}", endpoint.trim()))
        .collect();
    let listed = urls.join(",");
    let store = konverge_store_etcd::EtcdStore::connect(&urls)
        .await
        .with_context(|| format!("connecting to etcd at {listed}"))?;
    Ok((Arc::new(store), format!("etcd at {listed}")))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(_endpoint: &str) -> anyhow::Result<(Arc<dyn KvStore>, String)> {
    bail!("this konverge was built without etcd support: rebuild with `--features etcd`")
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
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

/// Runs the manager `make` builds until `stop`, under its Lease: a manager that loses its
/// Lease has stopped what it ran, and a new one stands again as a candidate.
fn supervise<F, Fut>(what: &'static str, stop: CancellationToken, make: F) -> Supervised
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<konverge_runtime::Manager>> + Send,
{
    let stopping = stop.clone();
    let task = tokio::spawn(async move {
        loop {
            let manager = match make().await {
                Ok(manager) => manager,
                Err(error) => {
                    tracing::warn!(%error, "starting {what} failed; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                        () = stopping.cancelled() => return Ok(()),
                    }
                }
            };
            match manager.run(stopping.clone().cancelled_owned()).await {
                Err(konverge_runtime::manager::Error::LeadershipLost)
                    if !stopping.is_cancelled() =>
                {
                    tracing::warn!(
                        "{what} lost its Lease and stopped; standing again as a candidate"
                    );
                }
                result => return result,
            }
        }
    });
    Supervised { stop, task }
}

/// A manager [`supervise`] runs.
struct Supervised {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), konverge_runtime::manager::Error>>,
}

impl Supervised {
    /// Stops it (releasing its Lease) and waits until it stopped.
    async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        Ok(self.task.await??)
    }
}

/// Starts kube-controller-manager's controllers beside `server`, as kcm runs beside
/// kube-apiserver: in-process clients (no socket, no TLS), informers and the
/// `kube-system/kube-controller-manager` Lease as `system:kube-controller-manager`, each
/// controller as its own ServiceAccount in `kube-system` (kcm's
/// `--use-service-account-credentials`), with the server's own kcm loops (garbage
/// collection, namespaces, quotas, ...) under the same Lease. And the simulated nodes' kubelets
/// and scheduler, under kube-scheduler's Lease (`kube-system/kube-scheduler`). Of several
/// servers over one store, the one holding a Lease acts.
fn start_controllers(
    server: &Arc<ApiServer>,
    token: &str,
    selection: Selection,
    nodes: Option<SimulatedNodes>,
    identity: String,
) -> Vec<Supervised> {
    let admin = server.client(Identity::Token(token.to_string()));
    let mut running = Vec::new();
    {
        let (server, token, identity) = (server.clone(), token.to_string(), identity.clone());
        running.push(supervise(
            "kube-controller-manager's controllers",
            CancellationToken::new(),
            move || {
                let manager = controller_manager(&server, &token, selection.clone(), &identity);
                async move { Ok(manager.build().await?) }
            },
        ));
    }
    if let Some(nodes) = nodes {
        running.push(supervise(
            "the scheduler and the simulated nodes",
            CancellationToken::new(),
            move || {
                let lease =
                    LeaseConfig::new("kube-system", "kube-scheduler").with_identity(&identity);
                let mut manager =
                    konverge_runtime::Manager::new(admin.clone()).leader_election(lease);
                let clock = konverge_controllers::Clock::system();
                konverge_controllers::scheduler::add(&mut manager, admin.clone(), clock.clone());
                nodes.clone().add(&mut manager, admin.clone(), clock);
                async move { Ok(manager) }
            },
        ));
    }
    running
}

fn controller_manager(
    server: &Arc<ApiServer>,
    token: &str,
    selection: Selection,
    identity: &str,
) -> ControllerManager {
    let kcm = server.client(Identity::Impersonating {
        token: token.to_string(),
        user: "system:kube-controller-manager".into(),
    });
    let admin = server.client(Identity::Token(token.to_string()));
    let for_token = server.clone();
    let tokens =
        ServiceAccountTokens::new(admin, move |token| for_token.client(Identity::Token(token)));
    let lease = LeaseConfig::new("kube-system", "kube-controller-manager").with_identity(identity);
    let loops = server.clone();
    ControllerManager::new(kcm)
        .selection(selection)
        .credentials(tokens)
        .leader_election(lease)
        .task("kube-controller-manager-loops", move |stop| {
            Box::pin(loops.run_control_loops(stop))
        })
}

/// This server's credentials: a single server's, kept in its data directory, or, when it
/// serves on an address of its own or shares `credentials_dir` with the other servers of a
/// cluster, the cluster's, with a serving certificate issued now for its addresses.
fn credentials(
    credentials_dir: Option<&std::path::Path>,
    data_dir: &std::path::Path,
    bind: IpAddr,
    advertise: IpAddr,
) -> anyhow::Result<Credentials> {
    let loopback_names = [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
    ];
    let mut names = Vec::new();
    for ip in [bind, advertise] {
        if !ip.is_unspecified() && !loopback_names.contains(&ip) && !names.contains(&ip.to_string())
        {
            names.push(ip.to_string());
        }
    }
    Ok(match credentials_dir {
        None if names.is_empty() => Credentials::load_or_create(data_dir)?,
        dir => {
            let dir = dir.unwrap_or(data_dir);
            Credentials::for_cluster(dir, &names)
                .with_context(|| format!("the cluster's credentials in {}", dir.display()))?
        }
    })
}

pub(crate) async fn run(args: UpArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let selection: Selection = args
        .controllers
        .parse()
        .with_context(|| format!("--controllers {:?}", args.controllers))?;
    let runtime_config =
        konverge_apiserver::resources::runtime_config::RuntimeConfig::parse(&args.runtime_config)
            .map_err(|errors| anyhow::anyhow!("--runtime-config: {}", errors.join("; ")))?;
    crate::envtest::feature_gates::check(&args.feature_gates)
        .map_err(|errors| anyhow::anyhow!("--feature-gates: {}", errors.join("; ")))?;
    for (group, version) in &runtime_config.not_served {
        eprintln!("--runtime-config: konverge does not serve {group}/{version}");
    }
    let nodes = simulated_nodes(&args);
    let rules = match &args.kubelet_rules {
        Some(_) if nodes.is_none() => {
            bail!("--kubelet-rules needs simulated nodes, and --nodes is 0")
        }
        Some(path) => crate::rules::load(path)?,
        None => Vec::new(),
    };
    let data_dir = args.data_dir.unwrap_or_else(default_data_dir);
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating the data directory {}", data_dir.display()))?;
    let advertise = args
        .advertise_address
        .unwrap_or(if args.bind_address.is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            args.bind_address
        });
    let credentials = credentials(
        args.credentials_dir.as_deref(),
        &data_dir,
        args.bind_address,
        advertise,
    )?;
    let listener = tokio::net::TcpListener::bind((args.bind_address, args.port))
        .await
        .with_context(|| {
            format!(
                "listening on {}",
                SocketAddr::new(args.bind_address, args.port)
            )
        })?;
    let port = listener.local_addr()?.port();
    // The kubeconfig names the address just bound: written (and synced) while the store
    // opens and the server is built.
    let url = server_url(listener.local_addr()?);
    let kubeconfig = {
        let (data_dir, credentials, url) = (data_dir.clone(), credentials.clone(), url.clone());
        tokio::task::spawn_blocking(move || write_kubeconfig(&data_dir, &credentials, &url))
    };
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
        .client_ca(credentials.ca_pem.clone())
        .service_account_key(credentials.service_account_key.clone())
        .authorization(match args.authorization_mode {
            Authorization::Rbac => AuthorizationMode::Rbac,
            Authorization::AlwaysAllow => AuthorizationMode::AlwaysAllow,
        })
        .runtime_config(runtime_config)
        .advertise(advertise, port)
        .elected_control_loops()
        .build()
        .await
        .context("starting the API server")?;
    let serving = Serve::new(server.router())
        .tls(&credentials)?
        .listen(listener)?;
    server.set_address(serving.local_addr().to_string());
    let kubeconfig = kubeconfig.await.context("writing the kubeconfig")??;
    serving.ready().await;
    println!(
        "konverge is ready in {:.1} ms: Kubernetes API at {url} ({described})",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!("export KUBECONFIG={}", kubeconfig.display());
    println!("kubectl get namespaces");
    if let Some(nodes) = &nodes {
        server.set_pod_logs(Arc::new(nodes.kubelets()));
        // Added before the kubelets start, so even the first pod they admit follows them.
        let kubelets = nodes.kubelets();
        for rule in rules {
            kubelets.add_rule(rule);
        }
    }
    // One `konverge up` per data directory: after a restart, the same identity takes its Lease
    // back at once instead of waiting for it to expire.
    let identity = format!(
        "{}_{}",
        konverge_runtime::leader::host_name(),
        data_dir.display()
    );
    let controllers = start_controllers(&server, &credentials.token, selection, nodes, identity);
    // Out of the `kubernetes` Service's endpoints first, so that clients following them move
    // to the other servers of the cluster while this one still answers.
    let withdrawing = server.clone();
    serving
        .until(async move {
            shutdown_signal().await;
            withdrawing.withdraw().await;
        })
        .await;
    for running in controllers {
        if let Err(error) = running.stop().await {
            tracing::warn!(%error, "the controllers did not stop cleanly");
        }
    }
    println!("konverge stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_on_an_address_of_its_own_gets_a_certificate_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let own: IpAddr = "127.0.0.2".parse().unwrap();
        // Alone on loopback: the data directory's credentials, serving certificate on disk.
        let single = credentials(None, &data, lo, lo).unwrap();
        assert!(data.join("pki/apiserver.crt").exists());
        // On an address of its own: the same CA and token, a certificate issued now.
        let own_address = credentials(None, &data, own, own).unwrap();
        assert_eq!(own_address.ca_pem, single.ca_pem);
        assert_eq!(own_address.token, single.token);
        assert_ne!(own_address.cert_pem, single.cert_pem);
        // A credentials directory that cannot be one is named in the error.
        let file = tmp.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let error = credentials(Some(&file), &data, lo, lo).unwrap_err();
        assert!(
            format!("{error:#}")
                .contains(&format!("the cluster's credentials in {}", file.display())),
            "{error:#}"
        );
    }

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

    #[test]
    fn node_capacities_parse_to_canonical_quantities_or_say_what_is_wrong() {
        let capacity = |resource: &str, quantity: &str| Capacity {
            resource: resource.into(),
            quantity: quantity.into(),
        };
        assert_eq!(parse_capacity("cpu=4"), Ok(capacity("cpu", "4")));
        assert_eq!(
            parse_capacity("memory=16Gi"),
            Ok(capacity("memory", "16Gi"))
        );
        assert_eq!(
            parse_capacity("memory=1024Mi"),
            Ok(capacity("memory", "1Gi"))
        );
        assert_eq!(parse_capacity("cpu=1500m"), Ok(capacity("cpu", "1500m")));
        assert_eq!(
            parse_capacity("example.com/gpu=2"),
            Ok(capacity("example.com/gpu", "2"))
        );
        assert_eq!(
            parse_capacity("hugepages-2Mi=1Gi"),
            Ok(capacity("hugepages-2Mi", "1Gi"))
        );
        assert_eq!(
            parse_capacity("cpu"),
            Err("\"cpu\" is not RESOURCE=QUANTITY (e.g. cpu=4 or memory=16Gi)".into())
        );
        assert_eq!(
            parse_capacity("memory=16GB"),
            Err("\"memory=16GB\": \"16GB\" is not a quantity: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'".into())
        );
        assert_eq!(
            parse_capacity("memory=16K"),
            Err(
                "\"memory=16K\": \"16K\" is not a quantity: unable to parse quantity's suffix"
                    .into()
            )
        );
        assert_eq!(
            parse_capacity("cpu=-1"),
            Err("\"cpu=-1\": the quantity must not be negative".into())
        );
        let unknown = parse_capacity("cpus=4").unwrap_err();
        assert!(
            unknown.starts_with("unknown resource \"cpus\": use cpu, memory, pods"),
            "{unknown}"
        );
        assert!(parse_capacity("/gpu=1").is_err());
    }

    #[test]
    fn node_zones_are_label_values() {
        assert_eq!(parse_zone("eu-west-1a"), Ok("eu-west-1a".to_string()));
        assert_eq!(
            parse_zone(""),
            Err("a zone name must not be empty".to_string())
        );
        let bad = parse_zone("zone a").unwrap_err();
        assert!(
            bad.starts_with("\"zone a\" is not a zone label value: a valid label must be"),
            "{bad}"
        );
    }

    #[test]
    fn node_flags_shape_the_simulated_nodes() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            up: UpArgs,
        }
        let cli = Cli::try_parse_from([
            "up",
            "--nodes",
            "3",
            "--node-zones",
            "a,b",
            "--node-capacity",
            "cpu=4,memory=16Gi",
        ])
        .expect("valid flags");
        assert_eq!(cli.up.node_zones, ["a", "b"]);
        assert_eq!(
            cli.up.node_capacity,
            [
                Capacity {
                    resource: "cpu".into(),
                    quantity: "4".into()
                },
                Capacity {
                    resource: "memory".into(),
                    quantity: "16Gi".into()
                }
            ]
        );
        let nodes = simulated_nodes(&cli.up).expect("three nodes");
        assert_eq!(nodes.node_names(), ["node-1", "node-2", "node-3"]);
        let none = Cli::try_parse_from(["up", "--nodes", "0"]).expect("valid flags");
        assert!(simulated_nodes(&none.up).is_none());
        let error = Cli::try_parse_from(["up", "--node-capacity", "cpu=4,memory=lots"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("invalid value 'memory=lots' for '--node-capacity <RESOURCE=QUANTITY>'"),
            "{error}"
        );
        assert!(
            error.contains("\"memory=lots\": \"lots\" is not a quantity"),
            "{error}"
        );
        let error = Cli::try_parse_from(["up", "--node-zones", "a,,b"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("a zone name must not be empty"), "{error}");
    }
}
