//! The `kube-apiserver` stand-in: konverge's API server with kube-apiserver's flags, as
//! envtest starts it.
//!
//! It serves HTTPS on `--bind-address:--secure-port` with the certificate envtest wrote in
//! `--cert-dir` (`apiserver.crt`/`apiserver.key`, or `--tls-cert-file`/`--tls-private-key-file`;
//! a self-signed one is made in `--cert-dir` when there is none, as kube-apiserver does), takes
//! users from client certificates signed by `--client-ca-file` (CN the user, O the groups),
//! signs ServiceAccount tokens with `--service-account-signing-key-file` for
//! `--service-account-issuer`, authorizes with `--authorization-mode` (RBAC or AlwaysAllow),
//! allocates Service IPs from `--service-cluster-ip-range`, and keeps its store where the
//! `etcd` at `--etcd-servers` says (see [`super::etcd`]), or in a real etcd when built with
//! the `etcd` feature.
//!
//! As kube-apiserver alone, it runs none of kube-controller-manager's loops: no `default`
//! ServiceAccounts, no `kube-root-ca.crt`, no garbage collection, namespaces stay Terminating.
//! What kube-apiserver itself does stays: bootstrap RBAC, priority classes, the `kubernetes`
//! Service, CustomResourceDefinitions served as they are created, compaction.
//!
//! `--audit-policy-file` and `--audit-log-path` (with `--audit-log-max*` rotation) write the
//! audit log as kube-apiserver's log backend does (see `konverge_apiserver::audit`).
//!
//! Flags it does not take are refused (`Error: unknown flag: --audit-webhook-config-file`),
//! and so are values it cannot honour (an authorization mode other than RBAC and AlwaysAllow,
//! a feature gate away from its 1.33 default, runtime-config that would change the API
//! served, the legacy audit format), each with the reason.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use konverge_apiserver::resources::runtime_config::RuntimeConfig;
use konverge_apiserver::serve::Serve;
use konverge_apiserver::serve::credentials::generate_token;
use konverge_apiserver::{ApiServer, AuthorizationMode, ServiceIpRange};
use konverge_store::KvStore;
use konverge_store_disk::{DiskStore, DiskStoreOptions};
use rustls::pki_types::pem::{PemObject as _, SectionKind};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::etcd::{STORE_PATH, StoreLocation, http_address};
use konverge_apimachinery::query::strconv_parse_bool as go_bool;

use super::flags::{self, Dialect};

/// kube-apiserver's flags that the stand-in honours.
#[derive(clap::Parser, Debug)]
#[command(
    name = "kube-apiserver",
    no_binary_name = true,
    args_override_self = true,
    disable_version_flag = true,
    about = "konverge, standing in for kube-apiserver (Kubernetes 1.33) under \
             controller-runtime's envtest: the API alone, without kube-controller-manager."
)]
pub(super) struct Flags {
    /// The port on which to serve HTTPS with authentication and authorization. It cannot be
    /// switched off with 0.
    #[arg(long, default_value_t = 6443, value_parser = clap::value_parser!(u16).range(1..))]
    secure_port: u16,
    /// The IP address on which to listen for the --secure-port port.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// The IP address on which to advertise the apiserver to members of the cluster: the
    /// `kubernetes` Service's endpoints (default: --bind-address, or 127.0.0.1 when that is
    /// unspecified).
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// The directory where the TLS certs are located (apiserver.crt, apiserver.key; made,
    /// self-signed, when missing). Not read when --tls-cert-file and --tls-private-key-file
    /// are given.
    #[arg(long, default_value = "/var/run/kubernetes")]
    cert_dir: PathBuf,
    /// File containing the default x509 Certificate for HTTPS (the server's certificate,
    /// then any intermediates).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// If set, any request presenting a client certificate signed by one of the authorities
    /// in the client-ca-file is authenticated with an identity corresponding to the
    /// CommonName of the client certificate (and its Organizations as groups).
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Identifier of the service account token issuer (the `iss` of the tokens signed, and
    /// their default audience). Repeatable: the first is the issuer, others are accepted too.
    #[arg(long, action = clap::ArgAction::Append)]
    service_account_issuer: Vec<String>,
    /// File containing PEM-encoded public keys or certificates whose keys verify
    /// ServiceAccount tokens, besides the signing key. Repeatable.
    #[arg(long, action = clap::ArgAction::Append)]
    service_account_key_file: Vec<PathBuf>,
    /// Path to the file that contains the private key of the service account token issuer
    /// (ECDSA P-256, PKCS#8).
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,
    /// A CIDR notation IP range from which to assign service cluster IPs (IPv4).
    #[arg(long, default_value = "10.0.0.0/24")]
    service_cluster_ip_range: String,
    /// Ordered list of plug-ins to do authorization on secure port: RBAC, AlwaysAllow.
    #[arg(long, value_delimiter = ',', default_value = "AlwaysAllow")]
    authorization_mode: Vec<String>,
    /// If true, allow privileged containers.
    #[arg(long, value_parser = go_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    allow_privileged: bool,
    /// admission plugins that should be enabled in addition to default enabled ones.
    #[arg(long, value_delimiter = ',')]
    enable_admission_plugins: Vec<String>,
    /// admission plugins that should be disabled although they are in the default enabled
    /// plugins list.
    #[arg(long, value_delimiter = ',')]
    disable_admission_plugins: Vec<String>,
    /// A set of key=value pairs that enable or disable built-in APIs (api/all, api/ga,
    /// api/beta, api/alpha, GROUP/VERSION, GROUP/VERSION/RESOURCE). konverge serves 1.33's
    /// default APIs, and those off by default it implements when asked.
    #[arg(long, value_delimiter = ',')]
    runtime_config: Vec<String>,
    /// A set of key=value pairs that describe feature gates (1.33's). konverge serves 1.33
    /// with its default feature gates: a gate set to its default is taken, one set otherwise
    /// refused.
    #[arg(long, value_delimiter = ',')]
    feature_gates: Vec<String>,
    /// List of etcd servers to connect with (scheme://ip:port), comma separated: konverge's
    /// etcd stand-in, or a real etcd with the `etcd` build feature.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// The prefix to prepend to all resource paths in etcd.
    #[arg(long, default_value = "/registry")]
    etcd_prefix: String,
    /// Path to the file that defines the audit policy configuration (`audit.k8s.io/v1`
    /// `Policy`).
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// If set, all requests coming to the apiserver will be logged to this file. '-' means
    /// standard out.
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// The maximum number of days to retain old audit log files based on the timestamp
    /// encoded in their filename.
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,
    /// The maximum number of old audit log files to retain. Setting a value of 0 will mean
    /// there's no restriction on the number of files.
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// The maximum size in megabytes of the audit log file before it gets rotated.
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Format of saved audits: "json" (konverge does not write the "legacy" text format).
    #[arg(long, default_value = "json")]
    audit_log_format: String,
    /// Strategy for sending audit events: "blocking", "batch" or "blocking-strict".
    /// konverge writes each event as it happens, in every mode.
    #[arg(long, default_value = "blocking")]
    audit_log_mode: String,
    /// API group and version used for serializing audit events written to log.
    #[arg(long, default_value = "audit.k8s.io/v1")]
    audit_log_version: String,
    /// number for the log level verbosity.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    verbosity: u8,
}

/// kube-apiserver 1.33's admission plugins, in its order, and whether each runs unless told
/// not to.
const KUBE_ADMISSION_PLUGINS: [(&str, bool); 36] = [
    ("AlwaysAdmit", false),
    ("NamespaceAutoProvision", false),
    ("NamespaceLifecycle", true),
    ("NamespaceExists", false),
    ("LimitPodHardAntiAffinityTopology", false),
    ("LimitRanger", true),
    ("ServiceAccount", true),
    ("NodeRestriction", false),
    ("TaintNodesByCondition", true),
    ("AlwaysPullImages", false),
    ("ImagePolicyWebhook", false),
    ("PodSecurity", true),
    ("PodNodeSelector", false),
    ("Priority", true),
    ("DefaultTolerationSeconds", true),
    ("PodTolerationRestriction", false),
    ("EventRateLimit", false),
    ("ExtendedResourceToleration", false),
    ("DefaultStorageClass", true),
    ("StorageObjectInUseProtection", true),
    ("OwnerReferencesPermissionEnforcement", false),
    ("PersistentVolumeClaimResize", true),
    ("RuntimeClass", true),
    ("CertificateApproval", true),
    ("CertificateSigning", true),
    ("ClusterTrustBundleAttest", true),
    ("CertificateSubjectRestriction", true),
    ("DefaultIngressClass", true),
    ("DenyServiceExternalIPs", false),
    ("PodTopologyLabels", true),
    ("MutatingAdmissionPolicy", true),
    ("MutatingAdmissionWebhook", true),
    ("ValidatingAdmissionPolicy", true),
    ("ValidatingAdmissionWebhook", true),
    ("ResourceQuota", true),
    ("AlwaysDeny", false),
];

fn is_kube_plugin(name: &str) -> bool {
    KUBE_ADMISSION_PLUGINS
        .iter()
        .any(|(plugin, _)| *plugin == name)
}

fn kube_runs_by_default(name: &str) -> bool {
    KUBE_ADMISSION_PLUGINS
        .iter()
        .any(|(plugin, on)| *on && *plugin == name)
}

/// The admission plugins konverge's server runs (and so can turn off): its chain, the dynamic
/// plugins, and NamespaceLifecycle, whose rule its registry keeps.
fn konverge_admission_plugins() -> Vec<&'static str> {
    let mut names = konverge_apiserver::admission::Chain::builtin().names();
    names.extend([
        "NamespaceLifecycle",
        "MutatingAdmissionWebhook",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionWebhook",
    ]);
    names
}

/// Runs the stand-in until SIGTERM.
pub(super) async fn main(args: Vec<OsString>) -> ExitCode {
    let flags = match flags::parse::<Flags>(args, Dialect::Pflag) {
        Ok(flags) => flags,
        Err(code) => return code,
    };
    init_logging(flags.verbosity);
    let settings = match Settings::from_flags(&flags) {
        Ok(settings) => settings,
        Err(errors) => {
            eprintln!("Error: {}", aggregate(&errors));
            return ExitCode::from(1);
        }
    };
    match run(flags, settings).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error:#}");
            ExitCode::from(1)
        }
    }
}

/// Errors as kube-apiserver reports several: one alone, or `[a, b]`.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn init_logging(verbosity: u8) {
    let level = match verbosity {
        0 | 1 => "warn",
        2 | 3 => "info",
        4 | 5 => "debug",
        _ => "trace",
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// What the flags ask for, checked before anything starts (every problem at once, as
/// kube-apiserver's validation reports them).
#[derive(Debug)]
struct Settings {
    authorization: AuthorizationMode,
    service_range: ServiceIpRange,
    disabled_plugins: Vec<String>,
    issuer: String,
    signing_key_file: PathBuf,
    runtime_config: RuntimeConfig,
}

impl Settings {
    fn from_flags(flags: &Flags) -> Result<Settings, Vec<String>> {
        let mut errors = Vec::new();
        if flags.etcd_servers.is_empty() {
            errors.push("--etcd-servers must be specified".to_string());
        }
        if flags.service_account_issuer.is_empty() {
            errors.push("service-account-issuer is a required flag".to_string());
        }
        if flags.service_account_signing_key_file.is_none()
            || flags.service_account_issuer.is_empty()
        {
            errors.push(
                "--service-account-signing-key-file and --service-account-issuer are required \
                 flags"
                    .to_string(),
            );
        }
        let authorization = authorization_mode(&flags.authorization_mode)
            .map_err(|e| errors.extend(e))
            .ok();
        let service_range = flags
            .service_cluster_ip_range
            .parse::<ServiceIpRange>()
            .map_err(|e| errors.push(format!("--service-cluster-ip-range: {e}")))
            .ok();
        let disabled_plugins = admission_plugins(
            &flags.enable_admission_plugins,
            &flags.disable_admission_plugins,
        )
        .map_err(|e| errors.extend(e))
        .ok();
        let runtime_config = RuntimeConfig::parse(&flags.runtime_config)
            .map_err(|e| errors.extend(e))
            .ok();
        if let Err(e) = super::feature_gates::check(&flags.feature_gates) {
            errors.extend(e);
        }
        errors.extend(audit_flags(flags));
        if flags.etcd_prefix.is_empty() || !flags.etcd_prefix.starts_with('/') {
            errors.push(format!(
                "--etcd-prefix {:?}: the prefix must be an absolute path such as /registry",
                flags.etcd_prefix
            ));
        }
        match (
            errors.is_empty(),
            authorization,
            service_range,
            disabled_plugins,
            flags.service_account_issuer.first(),
            &flags.service_account_signing_key_file,
            runtime_config,
        ) {
            (
                true,
                Some(authorization),
                Some(service_range),
                Some(disabled_plugins),
                Some(issuer),
                Some(signing_key_file),
                Some(runtime_config),
            ) => Ok(Settings {
                authorization,
                service_range,
                disabled_plugins,
                issuer: issuer.clone(),
                signing_key_file: signing_key_file.clone(),
                runtime_config,
            }),
            _ => Err(errors),
        }
    }
}

/// The `--audit-log-*` values konverge honours.
fn audit_flags(flags: &Flags) -> Vec<String> {
    let mut errors = Vec::new();
    match flags.audit_log_format.as_str() {
        "json" => {}
        "legacy" => errors.push(
            "--audit-log-format legacy: konverge writes audit events as json only".to_string(),
        ),
        other => errors.push(format!(
            "invalid audit log format {other}, allowed formats are \"json,legacy\""
        )),
    }
    if !matches!(
        flags.audit_log_mode.as_str(),
        "blocking" | "batch" | "blocking-strict"
    ) {
        errors.push(format!(
            "invalid audit log mode {}, allowed modes are \"batch,blocking,blocking-strict\"",
            flags.audit_log_mode
        ));
    }
    if flags.audit_log_version != "audit.k8s.io/v1" {
        errors.push(format!(
            "invalid audit log version {}, allowed versions are \"audit.k8s.io/v1\"",
            flags.audit_log_version
        ));
    }
    errors
}

/// The audit log the flags ask for: a policy and a log path both, as kube-apiserver's log
/// backend needs (either alone records nothing, and says so).
fn audit(flags: &Flags) -> anyhow::Result<Option<konverge_apiserver::audit::Audit>> {
    use konverge_apiserver::audit::{Audit, LogOptions, Policy};
    let (policy, path) = match (&flags.audit_policy_file, &flags.audit_log_path) {
        (Some(policy), Some(path)) => (policy, path),
        (None, Some(_)) => {
            eprintln!("No audit policy file provided, no events will be recorded for log backend");
            return Ok(None);
        }
        _ => return Ok(None),
    };
    let text = std::fs::read_to_string(policy)
        .with_context(|| format!("--audit-policy-file: reading {}", policy.display()))?;
    let policy = Policy::parse(&text)
        .with_context(|| format!("--audit-policy-file {}", policy.display()))?;
    let options = LogOptions {
        path: path.clone(),
        max_size_mb: flags.audit_log_maxsize,
        max_backups: flags.audit_log_maxbackup,
        max_age_days: flags.audit_log_maxage,
    };
    Ok(Some(
        Audit::new(policy, options).context("--audit-log-path")?,
    ))
}

/// `--authorization-mode`: RBAC and AlwaysAllow are what konverge authorizes with. Any
/// AlwaysAllow in the chain allows everything (RBAC only ever allows or has no opinion).
fn authorization_mode(modes: &[String]) -> Result<AuthorizationMode, Vec<String>> {
    const KUBE_MODES: [&str; 6] = [
        "AlwaysAllow",
        "AlwaysDeny",
        "ABAC",
        "Webhook",
        "RBAC",
        "Node",
    ];
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for mode in modes {
        if !KUBE_MODES.contains(&mode.as_str()) {
            errors.push(format!("authorization-mode {mode:?} is not a valid mode"));
        } else if !matches!(mode.as_str(), "RBAC" | "AlwaysAllow") {
            errors.push(format!(
                "authorization-mode {mode:?}: konverge authorizes with RBAC or AlwaysAllow only"
            ));
        }
        if !seen.insert(mode.as_str()) {
            errors.push(format!(
                "authorization-mode {mode:?} has mode specified more than once"
            ));
        }
    }
    if modes.is_empty() {
        errors.push("at least one authorization-mode must be passed".to_string());
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(if seen.contains("AlwaysAllow") {
        AuthorizationMode::AlwaysAllow
    } else {
        AuthorizationMode::Rbac
    })
}

/// `--enable-admission-plugins` and `--disable-admission-plugins`: the plugins to turn off in
/// konverge's chain. Enabling a plugin konverge runs (or kube-apiserver runs by default) is
/// already so; enabling one konverge does not implement is refused.
fn admission_plugins(enable: &[String], disable: &[String]) -> Result<Vec<String>, Vec<String>> {
    let ours = konverge_admission_plugins();
    let mut errors = Vec::new();
    for (flag, names) in [
        ("enable-admission-plugins", enable),
        ("disable-admission-plugins", disable),
    ] {
        for name in names.iter().filter(|n| !n.is_empty()) {
            if !is_kube_plugin(name) {
                errors.push(format!("{flag} plugin {name:?} is unknown"));
            }
        }
    }
    let overlap: Vec<&str> = enable
        .iter()
        .filter(|name| disable.contains(name))
        .map(String::as_str)
        .collect();
    if !overlap.is_empty() {
        errors.push(format!(
            "[{}] in enable-admission-plugins and disable-admission-plugins overlapped",
            overlap.join(" ")
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for name in enable.iter().filter(|n| !n.is_empty()) {
        let already =
            ours.contains(&name.as_str()) || kube_runs_by_default(name) || name == "AlwaysAdmit";
        if !already {
            errors.push(format!(
                "enable-admission-plugins plugin {name:?}: konverge does not implement it"
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(disable
        .iter()
        .filter(|name| ours.contains(&name.as_str()))
        .cloned()
        .collect())
}

async fn run(flags: Flags, settings: Settings) -> anyhow::Result<()> {
    let started = Instant::now();
    let port = flags.secure_port;
    let advertise = flags
        .advertise_address
        .unwrap_or(if flags.bind_address.is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            flags.bind_address
        });
    let (cert_pem, key_pem) = serving_certificate(&flags, advertise, &settings.service_range)?;
    let client_ca = match &flags.client_ca_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--client-ca-file: reading {}", path.display()))?,
        ),
        None => None,
    };
    let signing_key = signing_key(&settings.signing_key_file)?;
    let public_keys = verification_keys(&flags.service_account_key_file)?;
    let audit = audit(&flags)?;
    let (store, described) = open_store(&flags.etcd_servers, &flags.etcd_prefix).await?;
    let mut builder = ApiServer::builder(store);
    if let Some(audit) = audit {
        builder = builder.audit(audit);
    }
    if let Some(client_ca) = &client_ca {
        builder = builder.client_ca(client_ca.clone());
    }
    let server = builder
        .control_loops(false)
        // kube-apiserver has no admin token: a random one nobody is given leaves requests
        // without credentials anonymous, as there.
        .bearer_token(generate_token())
        .authorization(settings.authorization)
        .service_account_key(signing_key)
        .service_account_issuer(settings.issuer.clone())
        .service_account_public_keys(public_keys)
        .service_ip_range(settings.service_range.clone())
        .advertise(advertise, port)
        .allow_privileged(flags.allow_privileged)
        .disable_admission_plugins(settings.disabled_plugins.iter().cloned())
        .runtime_config(settings.runtime_config.clone())
        .build()
        .await
        .context("starting the API server")?;
    let serving = Serve::new(server.router())
        .tls_pem(&cert_pem, &key_pem, client_ca.as_deref())
        .context("the serving certificate")?
        .bind(SocketAddr::new(flags.bind_address, port))
        .await
        .with_context(|| format!("listening on {}", SocketAddr::new(flags.bind_address, port)))?;
    server.set_address(SocketAddr::new(advertise, port).to_string());
    serving.ready().await;
    eprintln!(
        "konverge's kube-apiserver stand-in is serving https://{} in {:.1} ms ({described})",
        serving.local_addr(),
        started.elapsed().as_secs_f64() * 1e3
    );
    // SIGTERM, as envtest's Stop() sends, or Ctrl-C.
    crate::up::shutdown_signal().await;
    // envtest's Stop() waits for the process: connections (watches included) are cut at
    // once rather than given a grace period.
    drop(serving);
    server.stop();
    Ok(())
}

/// The serving certificate and key: --tls-cert-file/--tls-private-key-file, else
/// `apiserver.crt`/`apiserver.key` in --cert-dir, made there (self-signed) when missing.
fn serving_certificate(
    flags: &Flags,
    advertise: IpAddr,
    range: &ServiceIpRange,
) -> anyhow::Result<(String, String)> {
    let read = |path: &Path, flag: &str| {
        std::fs::read_to_string(path).with_context(|| format!("{flag}: reading {}", path.display()))
    };
    match (&flags.tls_cert_file, &flags.tls_private_key_file) {
        (Some(cert), Some(key)) => {
            return Ok((
                read(cert, "--tls-cert-file")?,
                read(key, "--tls-private-key-file")?,
            ));
        }
        (Some(_), None) | (None, Some(_)) => {
            bail!("--tls-cert-file and --tls-private-key-file must be given together")
        }
        (None, None) => {}
    }
    let cert = flags.cert_dir.join("apiserver.crt");
    let key = flags.cert_dir.join("apiserver.key");
    if cert.exists() && key.exists() {
        return Ok((read(&cert, "--cert-dir")?, read(&key, "--cert-dir")?));
    }
    let (cert_pem, key_pem) = self_signed(advertise, range)?;
    std::fs::create_dir_all(&flags.cert_dir).with_context(|| {
        format!(
            "error creating self-signed certificates: creating {}",
            flags.cert_dir.display()
        )
    })?;
    std::fs::write(&cert, &cert_pem).with_context(|| format!("writing {}", cert.display()))?;
    std::fs::write(&key, &key_pem).with_context(|| format!("writing {}", key.display()))?;
    Ok((cert_pem, key_pem))
}

/// A self-signed serving certificate for the names kube-apiserver's covers: localhost, the
/// `kubernetes` Service's DNS names and IP, and the advertised address.
fn self_signed(advertise: IpAddr, range: &ServiceIpRange) -> anyhow::Result<(String, String)> {
    let mut names: Vec<String> = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .map(String::from)
    .to_vec();
    names.push("127.0.0.1".into());
    names.push(range.kubernetes_service_ip().to_string());
    if !advertise.is_loopback() {
        names.push(advertise.to_string());
    }
    let mut params = rcgen::CertificateParams::new(names).context("the certificate's names")?;
    let mut subject = rcgen::DistinguishedName::new();
    subject.push(rcgen::DnType::CommonName, "localhost");
    params.distinguished_name = subject;
    let key = rcgen::KeyPair::generate().context("generating a key")?;
    let cert = params
        .self_signed(&key)
        .context("signing the certificate")?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// --service-account-signing-key-file: an ECDSA P-256 key in PKCS#8, as envtest writes it.
fn signing_key(path: &Path) -> anyhow::Result<Vec<u8>> {
    let pem = std::fs::read(path).with_context(|| {
        format!(
            "--service-account-signing-key-file: reading {}",
            path.display()
        )
    })?;
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(&pem) {
        let (kind, der) = section.with_context(|| {
            format!(
                "--service-account-signing-key-file: {} is not PEM",
                path.display()
            )
        })?;
        match kind {
            SectionKind::PrivateKey => return Ok(der),
            SectionKind::EcPrivateKey | SectionKind::RsaPrivateKey => bail!(
                "--service-account-signing-key-file: {}: konverge signs ServiceAccount tokens \
                 with ECDSA P-256 keys in PKCS#8 (\"PRIVATE KEY\"); convert this key with \
                 `openssl pkcs8 -topk8 -nocrypt`",
                path.display()
            ),
            _ => {}
        }
    }
    bail!(
        "--service-account-signing-key-file: {} holds no private key",
        path.display()
    )
}

/// --service-account-key-file: the public keys (SubjectPublicKeyInfo DER) of the
/// certificates and public keys in the files. Private keys there are the signing key's
/// counterpart (envtest passes the signing key's certificate) and are skipped.
fn verification_keys(files: &[PathBuf]) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    for path in files {
        let pem = std::fs::read(path)
            .with_context(|| format!("--service-account-key-file: reading {}", path.display()))?;
        let before = keys.len();
        for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(&pem) {
            let (kind, der) = section.with_context(|| {
                format!("--service-account-key-file: {} is not PEM", path.display())
            })?;
            match kind {
                SectionKind::Certificate => keys.push(
                    konverge_apiserver::auth::x509::public_key_info(&der).with_context(|| {
                        format!("--service-account-key-file: {}", path.display())
                    })?,
                ),
                SectionKind::PublicKey => keys.push(der),
                _ => {}
            }
        }
        if keys.len() == before && !pem_has_private_key(&pem) {
            bail!(
                "--service-account-key-file: {} holds no certificate or public key",
                path.display()
            );
        }
    }
    Ok(keys)
}

fn pem_has_private_key(pem: &[u8]) -> bool {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .any(|(kind, _)| {
            matches!(
                kind,
                SectionKind::PrivateKey | SectionKind::EcPrivateKey | SectionKind::RsaPrivateKey
            )
        })
}

/// The store: konverge's disk store where the `etcd` stand-in at --etcd-servers keeps its
/// data, or (with the `etcd` feature) the real etcd there.
async fn open_store(
    servers: &[String],
    prefix: &str,
) -> anyhow::Result<(Arc<dyn KvStore>, String)> {
    let url = servers
        .first()
        .context("--etcd-servers must be specified")?;
    let addr = http_address(url, "--etcd-servers").await?;
    match store_location(addr).await {
        Ok(Some(location)) => {
            let dir = location.data_dir.join(store_dir_name(prefix));
            let options = DiskStoreOptions {
                sync: location.sync,
                ..DiskStoreOptions::default()
            };
            let store = DiskStore::open_with(&dir, options)
                .with_context(|| format!("opening the store in {}", dir.display()))?;
            Ok((Arc::new(store), format!("store in {}", dir.display())))
        }
        Ok(None) => real_etcd(servers, prefix).await,
        Err(error) => Err(error).with_context(|| format!("cannot reach etcd at {url}")),
    }
}

/// The directory of the store for `--etcd-prefix` in the etcd stand-in's data directory:
/// API servers with different prefixes keep different stores, as they would in one etcd.
fn store_dir_name(prefix: &str) -> String {
    let trimmed = prefix.trim_matches('/');
    if trimmed == "registry" {
        return "konverge".to_string();
    }
    let safe: String = trimmed
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("konverge-{safe}")
}

/// Asks the etcd at `addr` where the store is (`GET /konverge/store`): `None` when it answers
/// but is not konverge's stand-in (a real etcd).
async fn store_location(addr: SocketAddr) -> anyhow::Result<Option<StoreLocation>> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(
                format!("GET {STORE_PATH} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .context("no answer within 10 s")??;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let ok = head
        .lines()
        .next()
        .is_some_and(|status| status.split_whitespace().nth(1) == Some("200"));
    if !ok {
        return Ok(None);
    }
    Ok(serde_json::from_str(body).ok())
}

#[cfg(feature = "etcd")]
async fn real_etcd(servers: &[String], prefix: &str) -> anyhow::Result<(Arc<dyn KvStore>, String)> {
    if prefix.trim_end_matches('/') != "/registry" {
        bail!("--etcd-prefix {prefix:?}: konverge keeps its keys under /registry in a real etcd");
    }
    let store = konverge_store_etcd::EtcdStore::connect(servers)
        .await
        .with_context(|| format!("connecting to etcd at {}", servers.join(",")))?;
    Ok((Arc::new(store), format!("etcd at {}", servers.join(","))))
}

#[cfg(not(feature = "etcd"))]
async fn real_etcd(
    servers: &[String],
    _prefix: &str,
) -> anyhow::Result<(Arc<dyn KvStore>, String)> {
    bail!(
        "{} is not konverge's etcd stand-in, and this konverge was built without the `etcd` \
         feature that talks to a real etcd: use the etcd from `konverge envtest assets`",
        servers.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn repeated_flags_accumulate_as_pflag_slices_and_the_last_single_value_wins() {
        let flags = <Flags as clap::Parser>::try_parse_from([
            "--service-account-issuer=https://a",
            "--service-account-issuer=https://b",
            "--enable-admission-plugins=PodSecurity,Priority",
            "--enable-admission-plugins=RuntimeClass",
            "--disable-admission-plugins=",
            "--secure-port=1",
            "--secure-port=2",
        ])
        .expect("parses");
        assert_eq!(flags.service_account_issuer, ["https://a", "https://b"]);
        assert_eq!(
            flags.enable_admission_plugins,
            ["PodSecurity", "Priority", "RuntimeClass"]
        );
        assert_eq!(flags.disable_admission_plugins, [""]);
        assert_eq!(flags.secure_port, 2);
    }

    #[test]
    fn authorization_modes_are_rbac_or_always_allow() {
        assert_eq!(
            authorization_mode(&strings(&["RBAC"])),
            Ok(AuthorizationMode::Rbac)
        );
        assert_eq!(
            authorization_mode(&strings(&["RBAC", "AlwaysAllow"])),
            Ok(AuthorizationMode::AlwaysAllow)
        );
        assert_eq!(
            authorization_mode(&strings(&["Node", "RBAC"])),
            Err(strings(&[
                "authorization-mode \"Node\": konverge authorizes with RBAC or AlwaysAllow only"
            ]))
        );
        assert_eq!(
            authorization_mode(&strings(&["Magic"])),
            Err(strings(&[
                "authorization-mode \"Magic\" is not a valid mode"
            ]))
        );
        assert_eq!(
            authorization_mode(&strings(&["RBAC", "RBAC"])),
            Err(strings(&[
                "authorization-mode \"RBAC\" has mode specified more than once"
            ]))
        );
    }

    #[test]
    fn admission_flags_turn_off_what_konverge_runs_and_refuse_the_rest() {
        assert_eq!(
            admission_plugins(&[], &strings(&["NamespaceLifecycle", "ServiceAccount"])),
            Ok(strings(&["NamespaceLifecycle", "ServiceAccount"]))
        );
        // Not run by konverge: nothing to turn off.
        assert_eq!(
            admission_plugins(&[], &strings(&["TaintNodesByCondition"])),
            Ok(vec![])
        );
        assert_eq!(
            admission_plugins(&strings(&["PodSecurity", "AlwaysAdmit"]), &[]),
            Ok(vec![])
        );
        assert_eq!(
            admission_plugins(&strings(&["NodeRestriction"]), &[]),
            Err(strings(&[
                "enable-admission-plugins plugin \"NodeRestriction\": konverge does not implement it"
            ]))
        );
        assert_eq!(
            admission_plugins(&strings(&["Foo"]), &strings(&["Bar"])),
            Err(strings(&[
                "enable-admission-plugins plugin \"Foo\" is unknown",
                "disable-admission-plugins plugin \"Bar\" is unknown"
            ]))
        );
        assert_eq!(
            admission_plugins(&strings(&["LimitRanger"]), &strings(&["LimitRanger"])),
            Err(strings(&[
                "[LimitRanger] in enable-admission-plugins and disable-admission-plugins overlapped"
            ]))
        );
    }

    #[test]
    fn runtime_config_is_read_as_kube_apiserver_reads_it() {
        let parse = |entries: &[&str]| RuntimeConfig::parse(&strings(entries));
        assert!(parse(&["api/ga=true", "apps/v1=true", "api/alpha=false"]).is_ok());
        assert!(parse(&["v1=true", "api/v1=true"]).is_ok());
        assert!(
            parse(&["admissionregistration.k8s.io/v1beta1=true"])
                .unwrap()
                .enabled
                .contains(&("admissionregistration.k8s.io".into(), "v1beta1".into()))
        );
        assert_eq!(
            parse(&["nothing.example.com/v1=true"]),
            Err(strings(&["unknown api groups nothing.example.com"]))
        );
    }

    #[test]
    fn stores_per_etcd_prefix() {
        assert_eq!(store_dir_name("/registry"), "konverge");
        assert_eq!(store_dir_name("/registry/"), "konverge");
        assert_eq!(
            store_dir_name("/tenant-a/registry"),
            "konverge-tenant-a_registry"
        );
    }
}
