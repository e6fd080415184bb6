//! `konverge kubeconfig`: a kubeconfig for another identity on a `konverge up` cluster, to
//! try a controller or a person with the permissions RBAC gives them rather than the admin's.
//!
//! - `--user NAME [--group G]...`: a client certificate (CN=NAME, O=G...) signed by the data
//!   directory's CA, valid for a year by default. Needs no running server.
//! - `--as-serviceaccount NAMESPACE/NAME`: a token for the ServiceAccount from the TokenRequest
//!   API (`serviceaccounts/NAME/token`) of the running server, asked with the admin
//!   kubeconfig, valid for an hour by default.
//!
//! Either way the cluster (server URL and CA) is the one of `DATA_DIR/kubeconfig`, and the
//! kubeconfig goes to standard output, or to `-o FILE` (mode 0600).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use konverge_apiserver::auth::user::service_account_username;
use konverge_apiserver::serve::kubeconfig::{DEFAULT_NAMESPACE, KUBECONFIG_FILE, render};
use konverge_apiserver::serve::{client_certificate_auth, for_user, token_auth};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig, NamedCluster};

/// How long a client certificate lasts unless `--duration` says otherwise (a year).
const CERTIFICATE_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The longest a client certificate may last: the CA's own lifetime (about ten years).
const MAX_CERTIFICATE_DURATION: Duration = Duration::from_secs(3652 * 24 * 60 * 60);
/// How long a ServiceAccount token lasts unless `--duration` says otherwise.
const TOKEN_DURATION: Duration = Duration::from_secs(60 * 60);
/// How long to wait for the server's answer to the TokenRequest.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
#[command(group(
    clap::ArgGroup::new("identity")
        .required(true)
        .args(["user", "as_serviceaccount"])
))]
pub(crate) struct KubeconfigArgs {
    /// The data directory of `konverge up` (default: $HOME/.konverge).
    #[arg(long, env = "KONVERGE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where the cluster's CA is, when `konverge up` ran with `--credentials-dir` (the
    /// servers of one cluster share it); default: the data directory.
    #[arg(long, value_name = "DIR")]
    credentials_dir: Option<PathBuf>,
    /// A user with a client certificate the data directory's CA signs (its common name).
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// A group of the user (an organization of the certificate); repeat for several.
    #[arg(
        long = "group",
        value_name = "GROUP",
        conflicts_with = "as_serviceaccount"
    )]
    groups: Vec<String>,
    /// A ServiceAccount, with a token from the running server's TokenRequest API.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    as_serviceaccount: Option<String>,
    /// How long the credentials last (`1h`, `30m`, `8760h`): default an hour for a token,
    /// a year for a certificate.
    #[arg(long)]
    duration: Option<String>,
    /// Write the kubeconfig to FILE (mode 0600) instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

pub(crate) async fn run(args: KubeconfigArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::up::default_data_dir);
    if !data_dir.is_dir() {
        bail!(
            "no data directory {}: `konverge up --data-dir {}` makes one",
            data_dir.display(),
            data_dir.display()
        );
    }
    let admin_path = data_dir.join(KUBECONFIG_FILE);
    if !admin_path.is_file() {
        bail!(
            "{} does not exist: start `konverge up --data-dir {}` once first",
            admin_path.display(),
            data_dir.display()
        );
    }
    let admin = Kubeconfig::read_from(&admin_path)
        .with_context(|| format!("reading {}", admin_path.display()))?;
    let cluster = current_cluster(&admin)
        .with_context(|| format!("{} names no cluster", admin_path.display()))?;
    let duration = args.duration.as_deref().map(parse_duration).transpose()?;

    let (config, described) = match (&args.user, &args.as_serviceaccount) {
        (Some(user), _) => {
            let duration = duration.unwrap_or(CERTIFICATE_DURATION);
            if duration > MAX_CERTIFICATE_DURATION {
                bail!("--duration: a certificate can last 87600h (the CA's lifetime) at most");
            }
            let ca_dir = args.credentials_dir.as_deref().unwrap_or(&data_dir);
            let issued = konverge_apiserver::serve::issue_client_certificate(
                ca_dir,
                user,
                &args.groups,
                duration,
            )
            .with_context(|| {
                format!(
                    "issuing a client certificate for {user:?} with the CA in {}",
                    ca_dir.display()
                )
            })?;
            let auth = client_certificate_auth(&issued.cert_pem, &issued.key_pem);
            let groups = if args.groups.is_empty() {
                String::new()
            } else {
                format!(" in {}", args.groups.join(", "))
            };
            (
                for_user(cluster, user, auth, DEFAULT_NAMESPACE),
                format!("user {user}{groups} (client certificate)"),
            )
        }
        (None, Some(account)) => {
            let (namespace, name) = split_account(account)?;
            let duration = duration.unwrap_or(TOKEN_DURATION);
            let server = cluster
                .cluster
                .as_ref()
                .and_then(|c| c.server.clone())
                .unwrap_or_default();
            let token = request_token(&admin, namespace, name, duration)
                .await
                .map_err(|e| match e {
                    TokenError::Unreachable(source) => source.context(format!(
                        "cannot reach the server at {server} (from {}): is `konverge up \
                             --data-dir {}` running?",
                        admin_path.display(),
                        data_dir.display()
                    )),
                    TokenError::NoServiceAccount => anyhow::anyhow!(
                        "ServiceAccount {namespace}/{name} does not exist (`kubectl create \
                         serviceaccount {name} -n {namespace}` makes it)"
                    ),
                    TokenError::Refused(message) => anyhow::anyhow!(
                        "the server refused a token for ServiceAccount {namespace}/{name}: \
                         {message}"
                    ),
                })?;
            let user = service_account_username(namespace, name);
            (
                for_user(cluster, &user, token_auth(&token), namespace),
                format!("ServiceAccount {namespace}/{name} (token)"),
            )
        }
        (None, None) => unreachable!("clap requires --user or --as-serviceaccount"),
    };

    let yaml = render(&config)?;
    match &args.output {
        Some(path) => {
            write_private(path, &yaml).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote a kubeconfig for {described} to {}", path.display());
        }
        None => print!("{yaml}"),
    }
    Ok(())
}

/// The cluster of the current context (or the only one).
fn current_cluster(config: &Kubeconfig) -> Option<NamedCluster> {
    let wanted = config
        .current_context
        .as_ref()
        .and_then(|current| config.contexts.iter().find(|c| &c.name == current))
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    match wanted {
        Some(name) => config.clusters.iter().find(|c| c.name == name).cloned(),
        None => config.clusters.first().cloned(),
    }
}

/// `NAMESPACE/NAME`.
fn split_account(account: &str) -> anyhow::Result<(&str, &str)> {
    match account.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok((namespace, name))
        }
        _ => bail!("--as-serviceaccount {account:?}: expected NAMESPACE/NAME"),
    }
}

/// A duration as Go writes them (`1h`, `90m`, `1h30m`), at least a second; whole seconds
/// count, as kubectl's `--duration` counts them.
fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let invalid = || anyhow::anyhow!("invalid --duration {text:?}: use e.g. 10m, 1h or 8760h");
    let parsed = konverge_apimachinery::duration::parse_duration(text).map_err(|_| invalid())?;
    if parsed.as_secs() == 0 {
        return Err(invalid());
    }
    Ok(Duration::from_secs(parsed.as_secs()))
}

/// Why no token came back.
enum TokenError {
    /// No answer from the server.
    Unreachable(anyhow::Error),
    /// The ServiceAccount does not exist.
    NoServiceAccount,
    /// The server answered with an error (e.g. a duration under ten minutes).
    Refused(String),
}

/// A token for `namespace/name` from the TokenRequest API, asked as the admin of `admin`.
async fn request_token(
    admin: &Kubeconfig,
    namespace: &str,
    name: &str,
    duration: Duration,
) -> Result<String, TokenError> {
    let config = kube::Config::from_custom_kubeconfig(admin.clone(), &KubeConfigOptions::default())
        .await
        .map_err(|e| TokenError::Refused(format!("the admin kubeconfig: {e}")))?;
    let client = kube::Client::try_from(config).map_err(|e| TokenError::Unreachable(e.into()))?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let accounts = Api::<ServiceAccount>::namespaced(client, namespace);
    let answer = tokio::time::timeout(
        REQUEST_TIMEOUT,
        accounts.create_token_request(name, &PostParams::default(), &request),
    )
    .await
    .map_err(|_| TokenError::Unreachable(anyhow::anyhow!("no answer in {REQUEST_TIMEOUT:?}")))?;
    match answer {
        Ok(response) => response
            .status
            .map(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| TokenError::Refused("the answer holds no token".into())),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(TokenError::NoServiceAccount),
        Err(kube::Error::Api(status)) => Err(TokenError::Refused(status.message)),
        Err(e) => Err(TokenError::Unreachable(e.into())),
    }
}

/// Writes `contents` to `path`, readable by the owner only (it holds credentials).
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    // An existing file keeps its mode when opened: make it private too.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.write_all(contents.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_duration("8760h").unwrap(),
            Duration::from_secs(365 * 24 * 3600)
        );
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        for bad in ["", "1", "h", "1d", "-1h", "0s", "1h 30m", "500ms"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn service_accounts_are_namespace_slash_name() {
        assert_eq!(split_account("team/builder").unwrap(), ("team", "builder"));
        for bad in ["builder", "/builder", "team/", "a/b/c"] {
            assert!(split_account(bad).is_err(), "{bad:?}");
        }
    }
}
