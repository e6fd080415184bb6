//! controller-runtime's envtest control plane, restated in Rust: start `etcd` and
//! `kube-apiserver` from an assets folder exactly as envtest does, hand out users, install
//! CRDs, stop — to check that a set of binaries works as envtest's assets (konverge's
//! `konverge envtest assets`, or real ones) and to time envtest's `Start()` and `Stop()`.
//!
//! What envtest does, release by release (`pkg/internal/testing/controlplane`,
//! `pkg/internal/testing/process`, `pkg/envtest` of controller-runtime v0.15 to v0.22):
//!
//! 1. `etcd --help`: `--unsafe-no-fsync=true` is passed if the help lists it.
//! 2. etcd starts with `--advertise-client-urls --data-dir --listen-client-urls
//!    --listen-peer-urls` (free loopback ports, a fresh temporary data directory); `GET
//!    /health` is polled every 100 ms — the first poll races the process start — until 200.
//! 3. Certificates, made by envtest's tiny CA (ECDSA P-256): a serving CA and a serving
//!    certificate for `localhost` (and, from v0.18, the bind address) written as
//!    `apiserver.crt`/`apiserver.key` in a fresh cert directory; a ServiceAccount signing CA
//!    as `sa-signer.crt`/`sa-signer.key`; a client CA as `client-cert-auth-ca.crt`.
//! 4. `kube-apiserver --help`: `--insecure-port=0` is passed only if the help lists it.
//! 5. kube-apiserver starts with envtest's flags (see [`ControlPlane::apiserver_args`]);
//!    `https://ADDR/healthz` is polled every 100 ms without credentials, TLS unverified.
//! 6. Users are client certificates from the client CA (CN the name, O the groups): the
//!    `default` and `admin` users are in `system:masters`.
//! 7. (v0.18+) the `default` namespace is polled until it exists; CRDs are created and
//!    discovery polled every 100 ms until every served version lists every plural.
//! 8. `Stop()`: SIGTERM to kube-apiserver, then etcd (to the process group on main), each
//!    waited for; the temporary directories are removed.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

/// How often envtest polls health and discovery.
const POLL: Duration = Duration::from_millis(100);
/// envtest's default start and stop timeouts.
const TIMEOUT: Duration = Duration::from_secs(20);

/// What went wrong playing envtest.
#[derive(Debug, thiserror::Error)]
pub enum EnvtestError {
    /// A file or process operation failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate could not be made.
    #[error("making certificates")]
    Certificate(#[source] rcgen::Error),
    /// A binary's `--help` did not exit 0.
    #[error("{binary} --help exited with {status}: {output}")]
    Help {
        /// The binary.
        binary: PathBuf,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed.
        output: String,
    },
    /// A process exited before it was ready, or was not ready in time.
    #[error("{binary} did not become ready: {why}")]
    NotReady {
        /// The binary.
        binary: String,
        /// Why (its exit status, or the timeout).
        why: String,
    },
    /// A client could not be built or a request failed.
    #[error("{what}")]
    Kube {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: kube::Error,
    },
    /// CRDs were not all served in time.
    #[error("CRDs not served after {0:?}: still waiting for {1:?}")]
    CrdsNotServed(Duration, Vec<String>),
    /// A process did not stop in time after SIGTERM.
    #[error("{0} did not stop within {TIMEOUT:?} of SIGTERM")]
    NotStopped(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvtestError {
    let what = what.into();
    move |source| EnvtestError::Io { what, source }
}

/// Where envtest finds its binaries.
#[derive(Debug, Clone)]
pub struct Assets {
    /// The `etcd` binary.
    pub etcd: PathBuf,
    /// The `kube-apiserver` binary.
    pub kube_apiserver: PathBuf,
}

impl Assets {
    /// The binaries of the folder `dir` (what `KUBEBUILDER_ASSETS` names).
    pub fn in_dir(dir: &Path) -> Assets {
        Assets {
            etcd: dir.join("etcd"),
            kube_apiserver: dir.join("kube-apiserver"),
        }
    }

    /// As envtest finds them: `TEST_ASSET_ETCD` and `TEST_ASSET_KUBE_APISERVER` first, then the
    /// folder `KUBEBUILDER_ASSETS` names, then `/usr/local/kubebuilder/bin`.
    pub fn from_env() -> Assets {
        let folder = std::env::var_os("KUBEBUILDER_ASSETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/local/kubebuilder/bin"));
        let find = |variable: &str, name: &str| {
            std::env::var_os(variable)
                .map(PathBuf::from)
                .unwrap_or_else(|| folder.join(name))
        };
        Assets {
            etcd: find("TEST_ASSET_ETCD", "etcd"),
            kube_apiserver: find("TEST_ASSET_KUBE_APISERVER", "kube-apiserver"),
        }
    }
}

/// What differs between controller-runtime releases in how envtest drives its binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The release.
    pub name: &'static str,
    /// Whether the serving certificate also names the bind address (v0.18+), not only
    /// `localhost` and what it resolves to.
    pub serving_names_bind_address: bool,
    /// Whether `Start()` waits for the `default` namespace (v0.18+).
    pub waits_for_default_namespace: bool,
    /// Whether processes run in their own process group and `Stop()` signals the group
    /// (main, after v0.22), rather than the process.
    pub signals_process_group: bool,
}

const fn release(name: &'static str, since_v0_18: bool, group: bool) -> Release {
    Release {
        name,
        serving_names_bind_address: since_v0_18,
        waits_for_default_namespace: since_v0_18,
        signals_process_group: group,
    }
}

/// controller-runtime v0.15 to v0.22 and main.
pub const RELEASES: [Release; 9] = [
    release("v0.15", false, false),
    release("v0.16", false, false),
    release("v0.17", false, false),
    release("v0.18", true, false),
    release("v0.19", true, false),
    release("v0.20", true, false),
    release("v0.21", true, false),
    release("v0.22", true, false),
    release("main", true, true),
];

/// A certificate authority as envtest's tiny CA.
struct TinyCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TinyCa {
    fn new() -> Result<TinyCa, EnvtestError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = subject("envtest-environment", &["envtest"]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
        ];
        validity(&mut params);
        let key = KeyPair::generate().map_err(EnvtestError::Certificate)?;
        let issuer =
            CertifiedIssuer::self_signed(params, key).map_err(EnvtestError::Certificate)?;
        Ok(TinyCa { issuer })
    }

    fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A certificate and key (PEM) signed by this CA.
    fn issue(
        &self,
        common_name: &str,
        organizations: &[&str],
        names: Vec<String>,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<(String, String), EnvtestError> {
        let mut params = CertificateParams::new(names).map_err(EnvtestError::Certificate)?;
        params.distinguished_name = subject(common_name, organizations);
        params.key_usages = vec![
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.extended_key_usages = vec![usage];
        validity(&mut params);
        let key = KeyPair::generate().map_err(EnvtestError::Certificate)?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(EnvtestError::Certificate)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn subject(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    for organization in organizations {
        name.push(DnType::OrganizationName, *organization);
    }
    name
}

/// From now for a week, as envtest's certificates.
fn validity(params: &mut CertificateParams) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let start = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(now.as_secs());
    params.not_before = start;
    params.not_after = start + Duration::from_secs(168 * 3600);
}

/// A user envtest provisions: a client certificate (CN the name, O the groups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// Its groups.
    pub groups: Vec<String>,
}

impl User {
    /// A user named `name` in `groups`.
    pub fn new(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }
}

/// etcd started as envtest starts it: `--help` probed for `--unsafe-no-fsync`, free loopback
/// ports, a fresh data directory (removed on stop), `/health` polled every 100 ms.
pub struct Etcd {
    child: Child,
    release: Release,
    url: String,
    _data_dir: tempfile::TempDir,
    /// How long the start took, `--help` probe included, until `/health` answered 200.
    pub ready_after: Duration,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// Starts the etcd `binary` as envtest `release` does.
    pub async fn start(binary: &Path, release: Release) -> Result<Etcd, EnvtestError> {
        let started = Instant::now();
        let data_dir = tempfile::Builder::new()
            .prefix("k8s_test_framework_")
            .tempdir()
            .map_err(io("making etcd's data directory"))?;
        let port = free_port()?;
        let peer_port = free_port()?;
        let url = format!("http://127.0.0.1:{port}");
        let mut args = BTreeMap::new();
        args.insert("advertise-client-urls".to_string(), vec![url.clone()]);
        args.insert("listen-client-urls".to_string(), vec![url.clone()]);
        args.insert(
            "listen-peer-urls".to_string(),
            vec![format!("http://127.0.0.1:{peer_port}")],
        );
        args.insert(
            "data-dir".to_string(),
            vec![data_dir.path().display().to_string()],
        );
        if help_lists(binary, "unsafe-no-fsync").await? {
            args.insert("unsafe-no-fsync".to_string(), vec!["true".to_string()]);
        }
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let child = start_process(binary, &as_args(&args), release, || etcd_healthy(addr)).await?;
        Ok(Etcd {
            child,
            release,
            url,
            _data_dir: data_dir,
            ready_after: started.elapsed(),
        })
    }

    /// Its client URL (what kube-apiserver's `--etcd-servers` gets).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// SIGTERM, waited for; the data directory is removed. Returns how long the exit took.
    pub async fn stop(self) -> Result<Duration, EnvtestError> {
        stop_process(self.child, "etcd", self.release).await
    }
}

/// A running envtest control plane: etcd and kube-apiserver started from [`Assets`] as
/// envtest starts them.
pub struct ControlPlane {
    assets: Assets,
    release: Release,
    etcd: Option<Etcd>,
    apiserver: Option<Child>,
    cert_dir: tempfile::TempDir,
    /// The API server's port (on 127.0.0.1).
    pub port: u16,
    serving_ca_pem: String,
    client_ca: TinyCa,
    apiserver_args: Vec<String>,
    apiserver_ready_after: Duration,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("release", &self.release.name)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// A free loopback port, as envtest's `addr.Suggest` finds one.
fn free_port() -> Result<u16, EnvtestError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port"))?;
    Ok(listener
        .local_addr()
        .map_err(io("finding a free port"))?
        .port())
}

/// `binary --help`, which must exit 0; whether its output lists `--flag`.
async fn help_lists(binary: &Path, flag: &str) -> Result<bool, EnvtestError> {
    let output = Command::new(binary)
        .arg("--help")
        .output()
        .await
        .map_err(io(format!("running {} --help", binary.display())))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        return Err(EnvtestError::Help {
            binary: binary.to_path_buf(),
            status: output.status,
            output: text,
        });
    }
    let wanted = format!("--{flag}");
    Ok(text.lines().any(|line| {
        line.trim_start().strip_prefix(&wanted).is_some_and(|rest| {
            rest.is_empty()
                || !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '-')
        })
    }))
}

/// `--key=value` arguments in envtest's order (sorted by key).
fn as_args(args: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    args.iter()
        .flat_map(|(key, values)| {
            if values.is_empty() {
                vec![format!("--{key}")]
            } else {
                values.iter().map(|v| format!("--{key}={v}")).collect()
            }
        })
        .collect()
}

impl ControlPlane {
    /// Starts etcd then kube-apiserver as envtest `release` does, with `extra` kube-apiserver
    /// flags (`key`, `value`) set as `APIServer.Configure().Set` sets them (replacing
    /// envtest's value for the same key).
    pub async fn start(
        assets: &Assets,
        release: Release,
        extra: &[(&str, &str)],
    ) -> Result<ControlPlane, EnvtestError> {
        let etcd = Etcd::start(&assets.etcd, release).await?;
        let cert_dir = tempfile::Builder::new()
            .prefix("k8s_test_framework_")
            .tempdir()
            .map_err(io("making kube-apiserver's cert directory"))?;
        let port = free_port()?;
        let (serving_ca_pem, client_ca) = write_certificates(cert_dir.path(), release)?;
        let mut plane = ControlPlane {
            assets: assets.clone(),
            release,
            etcd: Some(etcd),
            apiserver: None,
            cert_dir,
            port,
            serving_ca_pem,
            client_ca,
            apiserver_args: Vec::new(),
            apiserver_ready_after: Duration::ZERO,
        };
        let mut args = plane.default_apiserver_args();
        if help_lists(&assets.kube_apiserver, "insecure-port").await? {
            args.insert("insecure-port".to_string(), vec!["0".to_string()]);
        }
        for (key, value) in extra {
            args.insert(key.to_string(), vec![value.to_string()]);
        }
        plane.apiserver_args = as_args(&args);
        plane.start_apiserver().await?;
        if release.waits_for_default_namespace {
            let admin = plane.client(&User::new("admin", &["system:masters"]))?;
            poll_until(Duration::from_secs(5), || async {
                admin
                    .request_text(
                        http::Request::get("/api/v1/namespaces/default")
                            .body(Vec::new())
                            .unwrap_or_default(),
                    )
                    .await
                    .is_ok()
            })
            .await
            .map_err(|_| EnvtestError::NotReady {
                binary: "kube-apiserver".into(),
                why: "the default namespace did not appear within 5s".into(),
            })?;
        }
        Ok(plane)
    }

    /// envtest's kube-apiserver flags for this plane (before the `--help` probe and the
    /// caller's own).
    fn default_apiserver_args(&self) -> BTreeMap<String, Vec<String>> {
        let dir = self.cert_dir.path();
        let file = |name: &str| dir.join(name).display().to_string();
        let mut args = BTreeMap::new();
        let mut set = |key: &str, value: String| {
            args.insert(key.to_string(), vec![value]);
        };
        set("service-cluster-ip-range", "10.0.0.0/24".into());
        set("allow-privileged", "true".into());
        set("disable-admission-plugins", "ServiceAccount".into());
        set("cert-dir", dir.display().to_string());
        set("authorization-mode", "RBAC".into());
        set("secure-port", self.port.to_string());
        set("bind-address", "127.0.0.1".into());
        set(
            "service-account-issuer",
            format!("https://127.0.0.1:{}/", self.port),
        );
        set("service-account-key-file", file("sa-signer.crt"));
        set("service-account-signing-key-file", file("sa-signer.key"));
        if let Some(etcd) = &self.etcd {
            set("etcd-servers", etcd.url().to_string());
        }
        set("client-ca-file", file("client-cert-auth-ca.crt"));
        args
    }

    /// How long etcd's part of the start took.
    pub fn etcd_ready_after(&self) -> Duration {
        self.etcd
            .as_ref()
            .map(|e| e.ready_after)
            .unwrap_or_default()
    }

    /// How long kube-apiserver's part of the start took (its last start), from spawning it
    /// until `/healthz` answered 200.
    pub fn apiserver_ready_after(&self) -> Duration {
        self.apiserver_ready_after
    }

    /// The kube-apiserver command line (after the program name) this plane started.
    pub fn apiserver_args(&self) -> &[String] {
        &self.apiserver_args
    }

    async fn start_apiserver(&mut self) -> Result<(), EnvtestError> {
        let started = Instant::now();
        let health = self.health_client()?;
        let port = self.port;
        let child = start_process(
            &self.assets.kube_apiserver,
            &self.apiserver_args,
            self.release,
            || {
                let health = health.clone();
                let addr: SocketAddr = ([127, 0, 0, 1], port).into();
                async move {
                    // Connection refused costs nothing to ask; only an open port gets the
                    // HTTPS request.
                    tokio::net::TcpStream::connect(addr).await.is_ok()
                        && health
                            .request_text(
                                http::Request::get("/healthz")
                                    .body(Vec::new())
                                    .unwrap_or_default(),
                            )
                            .await
                            .is_ok()
                }
            },
        )
        .await?;
        self.apiserver = Some(child);
        self.apiserver_ready_after = started.elapsed();
        Ok(())
    }

    fn url(&self) -> Result<http::Uri, EnvtestError> {
        format!("https://127.0.0.1:{}/", self.port)
            .parse()
            .map_err(|e: http::uri::InvalidUri| EnvtestError::Io {
                what: "the API server's URL".into(),
                source: std::io::Error::other(e),
            })
    }

    /// A client without credentials that does not verify TLS: what envtest polls `/healthz`
    /// with.
    fn health_client(&self) -> Result<kube::Client, EnvtestError> {
        let mut config = kube::Config::new(self.url()?);
        config.accept_invalid_certs = true;
        kube::Client::try_from(config).map_err(|source| EnvtestError::Kube {
            what: "a client for /healthz".into(),
            source,
        })
    }

    /// A client certificate and key (PEM) for `user`, from envtest's client CA.
    fn user_certificate(&self, user: &User) -> Result<(String, String), EnvtestError> {
        let groups: Vec<&str> = user.groups.iter().map(String::as_str).collect();
        self.client_ca.issue(
            &user.name,
            &groups,
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    /// A client for `user`, a client certificate signed by envtest's client CA, as envtest's
    /// `AddUser` provisions it.
    pub fn client(&self, user: &User) -> Result<kube::Client, EnvtestError> {
        let (cert, key) = self.user_certificate(user)?;
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let mut config = kube::Config::new(self.url()?);
        config.root_cert = Some(pem_certificates(&self.serving_ca_pem));
        config.auth_info = kube::config::AuthInfo {
            client_certificate_data: Some(b64(&cert)),
            client_key_data: Some(b64(&key).into()),
            ..Default::default()
        };
        kube::Client::try_from(config).map_err(|source| EnvtestError::Kube {
            what: format!("a client for {}", user.name),
            source,
        })
    }

    /// A kubeconfig for `user` (JSON, which kubectl reads as it reads YAML): what envtest's
    /// `AuthenticatedUser.KubeConfig()` gives and its `KubeCtl` runs kubectl with.
    pub fn kubeconfig(&self, user: &User) -> Result<String, EnvtestError> {
        let (cert, key) = self.user_certificate(user)?;
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "envtest", "cluster": {
                "server": format!("https://127.0.0.1:{}", self.port),
                "certificate-authority-data": b64(&self.serving_ca_pem),
            }}],
            "users": [{"name": "envtest", "user": {
                "client-certificate-data": b64(&cert),
                "client-key-data": b64(&key),
            }}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest"}}],
            "current-context": "envtest",
        });
        Ok(config.to_string())
    }

    /// A client that authenticates with a bearer `token` (a ServiceAccount's).
    pub fn token_client(&self, token: &str) -> Result<kube::Client, EnvtestError> {
        let mut config = kube::Config::new(self.url()?);
        config.root_cert = Some(pem_certificates(&self.serving_ca_pem));
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        };
        kube::Client::try_from(config).map_err(|source| EnvtestError::Kube {
            what: "a client for a token".into(),
            source,
        })
    }

    /// Creates `crds` (CustomResourceDefinitions as JSON) and polls discovery every 100 ms, as
    /// envtest's `InstallCRDs` does, until every served version of each lists its plural
    /// (10 s at most).
    pub async fn install_crds(
        &self,
        client: &kube::Client,
        crds: &[Value],
    ) -> Result<(), EnvtestError> {
        for crd in crds {
            let body = serde_json::to_vec(crd).unwrap_or_default();
            client
                .request_text(
                    http::Request::post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
                        .header("content-type", "application/json")
                        .body(body)
                        .unwrap_or_default(),
                )
                .await
                .map_err(|source| EnvtestError::Kube {
                    what: format!("creating CRD {}", crd["metadata"]["name"]),
                    source,
                })?;
        }
        let mut waiting: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for crd in crds {
            let group = crd["spec"]["group"].as_str().unwrap_or_default();
            let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
            for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
                if version["served"] == true {
                    let gv = format!("{group}/{}", version["name"].as_str().unwrap_or_default());
                    waiting.entry(gv).or_default().push(plural.to_string());
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut missing = Vec::new();
            for (gv, plurals) in &waiting {
                let listed = client
                    .request::<Value>(
                        http::Request::get(format!("/apis/{gv}"))
                            .body(Vec::new())
                            .unwrap_or_default(),
                    )
                    .await
                    .map(|list| {
                        list["resources"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|r| r["name"].as_str().map(String::from))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default();
                missing.extend(
                    plurals
                        .iter()
                        .filter(|p| !listed.contains(p))
                        .map(|p| format!("{gv} {p}")),
                );
            }
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EnvtestError::CrdsNotServed(
                    Duration::from_secs(10),
                    missing,
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops kube-apiserver alone and starts it again on the same etcd (envtest's
    /// `APIServer.Stop()` then `Start()`).
    pub async fn restart_apiserver(&mut self) -> Result<(), EnvtestError> {
        if let Some(child) = self.apiserver.take() {
            stop_process(child, "kube-apiserver", self.release).await?;
        }
        self.start_apiserver().await
    }

    /// envtest's `Stop()`: SIGTERM to kube-apiserver, then to etcd, each waited for; then the
    /// directories are removed. Returns how long each took to exit.
    pub async fn stop(mut self) -> Result<Stopped, EnvtestError> {
        let mut stopped = Stopped::default();
        if let Some(child) = self.apiserver.take() {
            stopped.kube_apiserver = stop_process(child, "kube-apiserver", self.release).await?;
        }
        if let Some(etcd) = self.etcd.take() {
            stopped.etcd = etcd.stop().await?;
        }
        // The temporary directories go with `self`, as envtest removes them.
        Ok(stopped)
    }
}

/// How long each process took to exit after SIGTERM.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stopped {
    /// kube-apiserver's time.
    pub kube_apiserver: Duration,
    /// etcd's time.
    pub etcd: Duration,
}

/// The DER certificates of a PEM bundle.
fn pem_certificates(pem: &str) -> Vec<Vec<u8>> {
    pem.split("-----END CERTIFICATE-----")
        .filter_map(|block| {
            let body: String = block
                .lines()
                .filter(|l| !l.starts_with("-----") && !l.trim().is_empty())
                .collect();
            base64::engine::general_purpose::STANDARD.decode(body).ok()
        })
        .filter(|der| !der.is_empty())
        .collect()
}

/// Writes envtest's certificates in `dir`; returns the serving CA (what clients trust) and
/// the client CA.
fn write_certificates(dir: &Path, release: Release) -> Result<(String, TinyCa), EnvtestError> {
    let serving_ca = TinyCa::new()?;
    let mut names = vec!["localhost".to_string()];
    // `localhost` resolved, as Go's net.LookupHost does.
    names.extend(["127.0.0.1".to_string(), "::1".to_string()]);
    if release.serving_names_bind_address {
        names.push("127.0.0.1".to_string());
    }
    names.dedup();
    let (cert, key) = serving_ca.issue(
        "localhost",
        &["envtest"],
        names,
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let write = |name: &str, contents: &str| {
        std::fs::write(dir.join(name), contents).map_err(io(format!("writing {name}")))
    };
    write("apiserver.crt", &cert)?;
    write("apiserver.key", &key)?;
    let sa = TinyCa::new()?;
    write("sa-signer.crt", &sa.cert_pem())?;
    write("sa-signer.key", &sa.key_pem())?;
    let client_ca = TinyCa::new()?;
    write("client-cert-auth-ca.crt", &client_ca.cert_pem())?;
    Ok((serving_ca.cert_pem(), client_ca))
}

/// Starts `binary` with `args` and polls `ready` every 100 ms (the first poll as the process
/// starts), as envtest's `process.State.Start`.
async fn start_process<F, Fut>(
    binary: &Path,
    args: &[String],
    release: Release,
    ready: F,
) -> Result<Child, EnvtestError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut command = Command::new(binary);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            if std::env::var_os("KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            },
        )
        .kill_on_drop(true);
    if release.signals_process_group {
        command.process_group(0);
    }
    let mut child = command
        .spawn()
        .map_err(io(format!("starting {}", binary.display())))?;
    let name = binary.display().to_string();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if ready().await {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(EnvtestError::NotReady {
                binary: name,
                why: format!("it exited with {status}"),
            });
        }
        if Instant::now() >= deadline {
            return Err(EnvtestError::NotReady {
                binary: name,
                why: format!("not ready within {TIMEOUT:?}"),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// SIGTERM to the process (or its group), then waits for it; SIGKILL after the timeout.
async fn stop_process(
    mut child: Child,
    name: &str,
    release: Release,
) -> Result<Duration, EnvtestError> {
    let started = Instant::now();
    let Some(pid) = child.id() else {
        return Ok(Duration::ZERO);
    };
    let target = if release.signals_process_group {
        format!("-{pid}")
    } else {
        pid.to_string()
    };
    let _ = Command::new("kill")
        .args(["-TERM", "--", &target])
        .status()
        .await;
    match tokio::time::timeout(TIMEOUT, child.wait()).await {
        Ok(_) => Ok(started.elapsed()),
        Err(_) => {
            let _ = child.kill().await;
            Err(EnvtestError::NotStopped(name.to_string()))
        }
    }
}

/// Whether `GET /health` at `addr` answers 200.
async fn etcd_healthy(addr: SocketAddr) -> bool {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n")
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    match tokio::time::timeout(Duration::from_secs(1), exchange).await {
        Ok(Ok(response)) => response.starts_with(b"HTTP/1.1 200"),
        _ => false,
    }
}

async fn poll_until<F, Fut>(limit: Duration, check: F) -> Result<(), ()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` CustomResourceDefinitions of the shape operators install (a namespaced kind with a
/// spec and a status subresource, one served and stored version), spread over four groups.
pub fn sample_crds(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let group = format!("g{}.envtest.konverge.dev", i % 4);
            let plural = format!("widgets{i}");
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.{group}")},
                "spec": {
                    "group": group,
                    "scope": "Namespaced",
                    "names": {
                        "plural": plural,
                        "singular": format!("widget{i}"),
                        "kind": format!("Widget{i}"),
                        "listKind": format!("Widget{i}List"),
                    },
                    "versions": [{
                        "name": "v1",
                        "served": true,
                        "storage": true,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {
                                    "replicas": {"type": "integer", "minimum": 0},
                                    "image": {"type": "string"},
                                }},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            },
                        }},
                    }],
                },
            })
        })
        .collect()
}
