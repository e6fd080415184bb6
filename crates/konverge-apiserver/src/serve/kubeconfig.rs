//! `DATA_DIR/kubeconfig`: how kubectl, client-go, kube-rs and the Python client reach the
//! server (cluster, user and context all named `konverge`); and kubeconfigs for other users
//! of the same cluster ([`for_user`]: a client certificate, a ServiceAccount token).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext, Preferences,
};
use secrecy::SecretString;

use super::credentials::Credentials;
use super::fsutil;

/// Name of the kubeconfig file in the data directory.
pub const KUBECONFIG_FILE: &str = "kubeconfig";
/// Name of the cluster, user and context in the kubeconfig.
pub const NAME: &str = "konverge";
/// Namespace of the kubeconfig's context.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Why the kubeconfig could not be rendered or written.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
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
/// A server listening on every address (`0.0.0.0`, `::`) is reached at
/// `https://127.0.0.1:PORT`, which its serving certificate covers; one listening on one
/// address is reached there (the serving certificate of a server of a cluster names it).
pub fn server_url(addr: SocketAddr) -> String {
    match addr.ip() {
        ip if ip.is_unspecified() => format!("https://127.0.0.1:{}", addr.port()),
        IpAddr::V6(ip) => format!("https://[{ip}]:{}", addr.port()),
        IpAddr::V4(ip) => format!("https://{ip}:{}", addr.port()),
    }
}

/// A kubeconfig with one cluster, user and context, all called `name`, for `server`: trusting
/// the CA of `credentials` and sending its token, or (without credentials, for a plain-HTTP
/// test server) neither. The context's namespace is `default`.
pub fn kubeconfig(name: &str, server: &str, credentials: Option<&Credentials>) -> Kubeconfig {
    let cluster = Cluster {
        server: Some(server.to_string()),
        certificate_authority_data: credentials
            .map(|c| base64::engine::general_purpose::STANDARD.encode(c.ca_pem.as_bytes())),
        ..Cluster::default()
    };
    let user = AuthInfo {
        token: credentials.map(|c| SecretString::from(c.token.clone())),
        ..AuthInfo::default()
    };
    single(
        NamedCluster {
            name: name.into(),
            cluster: Some(cluster),
            ..NamedCluster::default()
        },
        name,
        user,
        name,
        DEFAULT_NAMESPACE,
    )
}

/// A kubeconfig for `user` on `cluster` (the cluster of a kubeconfig [`write_kubeconfig`]
/// wrote: server and CA): the user is called `user` and authenticates with `auth` (a client
/// certificate, a token), the context is `<user>@<cluster>` and works in `namespace`.
pub fn for_user(cluster: NamedCluster, user: &str, auth: AuthInfo, namespace: &str) -> Kubeconfig {
    let context = format!("{user}@{}", cluster.name);
    single(cluster, user, auth, &context, namespace)
}

/// The credentials of a client certificate, embedded (`client-certificate-data`,
/// `client-key-data`).
pub fn client_certificate_auth(cert_pem: &str, key_pem: &str) -> AuthInfo {
    let base64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem.as_bytes());
    AuthInfo {
        client_certificate_data: Some(base64(cert_pem)),
        client_key_data: Some(SecretString::from(base64(key_pem))),
        ..AuthInfo::default()
    }
}

/// The credentials of a bearer token.
pub fn token_auth(token: &str) -> AuthInfo {
    AuthInfo {
        token: Some(SecretString::from(token.to_string())),
        ..AuthInfo::default()
    }
}

/// One cluster, one user, one context using them (the current one).
fn single(
    cluster: NamedCluster,
    user: &str,
    auth: AuthInfo,
    context: &str,
    namespace: &str,
) -> Kubeconfig {
    Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        contexts: vec![NamedContext {
            name: context.into(),
            context: Some(Context {
                cluster: cluster.name.clone(),
                user: Some(user.into()),
                namespace: Some(namespace.into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        clusters: vec![cluster],
        auth_infos: vec![NamedAuthInfo {
            name: user.into(),
            auth_info: Some(auth),
            ..NamedAuthInfo::default()
        }],
        current_context: Some(context.into()),
        preferences: Some(Preferences::default()),
        ..Kubeconfig::default()
    }
}

/// `config` as YAML, with plain one-line scalars (no folded `>-` blocks): what kubectl
/// writes, and what scripts that grep a kubeconfig expect.
pub fn render(config: &Kubeconfig) -> Result<String, KubeconfigError> {
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    serde_saphyr::to_string_with_options(config, options).map_err(KubeconfigError::Render)
}

/// Writes (replacing atomically) `DATA_DIR/kubeconfig` with mode 0600 for `server` (see
/// [`kubeconfig`], named `konverge`), and returns its path. Call on every start: the port
/// may differ from the last one.
pub fn write_kubeconfig(
    data_dir: &Path,
    credentials: &Credentials,
    server: &str,
) -> Result<PathBuf, KubeconfigError> {
    let yaml = render(&kubeconfig(NAME, server, Some(credentials)))?;
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
