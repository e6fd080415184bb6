//! `DATA_DIR/kubeconfig`: how kubectl, client-go, kube-rs and the Python client reach the
//! server (cluster, user and context all named `konverge`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Serialize;

use super::credentials::Credentials;
use super::fsutil;

/// Name of the kubeconfig file in the data directory.
pub(crate) const KUBECONFIG_FILE: &str = "kubeconfig";
/// Name of the cluster, user and context in the kubeconfig.
pub(crate) const NAME: &str = "konverge";
/// Namespace of the kubeconfig's context.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

/// Why the kubeconfig could not be rendered or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KubeconfigError {
    /// Serializing the kubeconfig as YAML failed.
    #[error("cannot render the kubeconfig as YAML")]
    Render(#[source] serde_saphyr::SerializeError),
    /// A directory could not be created.
    #[error("cannot create directory {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The kubeconfig file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// The `https://` URL clients should use for a server listening on `addr`.
///
/// The serving certificate covers `localhost`, `127.0.0.1` and `::1`: an IPv6 loopback
/// address gives `https://[::1]:PORT`, anything else (in particular `0.0.0.0`, `::` and
/// `127.0.0.1`) gives `https://127.0.0.1:PORT`.
pub(crate) fn server_url(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V6(ip) if ip.is_loopback() => format!("https://[::1]:{}", addr.port()),
        _ => format!("https://127.0.0.1:{}", addr.port()),
    }
}

/// Renders a kubeconfig for `server` (e.g. from [`server_url`]) trusting the CA of
/// `credentials` and authenticating with its token.
pub(crate) fn render(credentials: &Credentials, server: &str) -> Result<String, KubeconfigError> {
    let ca_data = base64::engine::general_purpose::STANDARD.encode(credentials.ca_pem.as_bytes());
    let config = Kubeconfig {
        api_version: "v1",
        kind: "Config",
        clusters: vec![NamedCluster {
            name: NAME,
            cluster: Cluster {
                server,
                certificate_authority_data: &ca_data,
            },
        }],
        users: vec![NamedUser {
            name: NAME,
            user: User {
                token: &credentials.token,
            },
        }],
        contexts: vec![NamedContext {
            name: NAME,
            context: Context {
                cluster: NAME,
                user: NAME,
                namespace: DEFAULT_NAMESPACE,
            },
        }],
        current_context: NAME,
        preferences: Preferences {},
    };
    // Plain one-line scalars (no folded `>-` blocks): what kubectl writes, and what scripts
    // that grep a kubeconfig expect.
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    serde_saphyr::to_string_with_options(&config, options).map_err(KubeconfigError::Render)
}

/// Writes (replacing atomically) `DATA_DIR/kubeconfig` with mode 0600 for `server`, and
/// returns its path. Call on every start: the port may differ from the last one.
pub(crate) fn write_kubeconfig(
    data_dir: &Path,
    credentials: &Credentials,
    server: &str,
) -> Result<PathBuf, KubeconfigError> {
    let yaml = render(credentials, server)?;
    fsutil::create_private_dir_all(data_dir).map_err(|source| KubeconfigError::CreateDir {
        path: data_dir.to_path_buf(),
        source,
    })?;
    let path = data_dir.join(KUBECONFIG_FILE);
    fsutil::write_private_atomic(&path, yaml.as_bytes()).map_err(|source| {
        KubeconfigError::Write {
            path: path.clone(),
            source,
        }
    })?;
    Ok(path)
}

#[derive(Serialize)]
struct Kubeconfig<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    clusters: Vec<NamedCluster<'a>>,
    users: Vec<NamedUser<'a>>,
    contexts: Vec<NamedContext<'a>>,
    #[serde(rename = "current-context")]
    current_context: &'a str,
    preferences: Preferences,
}

#[derive(Serialize)]
struct NamedCluster<'a> {
    name: &'a str,
    cluster: Cluster<'a>,
}

#[derive(Serialize)]
struct Cluster<'a> {
    server: &'a str,
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: &'a str,
}

#[derive(Serialize)]
struct NamedUser<'a> {
    name: &'a str,
    user: User<'a>,
}

#[derive(Serialize)]
struct User<'a> {
    token: &'a str,
}

#[derive(Serialize)]
struct NamedContext<'a> {
    name: &'a str,
    context: Context<'a>,
}

#[derive(Serialize)]
struct Context<'a> {
    cluster: &'a str,
    user: &'a str,
    namespace: &'a str,
}

#[derive(Serialize)]
struct Preferences {}
