//! The `etcd` stand-in: what envtest needs of etcd, and no more.
//!
//! envtest starts etcd, waits for `GET /health` to answer 200 at the client URL, and hands
//! that URL to kube-apiserver as `--etcd-servers`. konverge's API server keeps its own store,
//! so this stand-in speaks no etcd protocol: it binds the client and peer URLs (so the ports
//! are taken, as etcd takes them), creates `--data-dir`, answers `/health`, and tells the
//! `kube-apiserver` stand-in where the store lives (`GET /konverge/store`: the data directory
//! and whether to fsync). The store itself is konverge's disk store in that directory, opened
//! by the API server: it outlives API server restarts, as data in etcd does, and goes with the
//! directory envtest removes on `Stop()`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::TcpListener;

use konverge_apimachinery::query::strconv_parse_bool as go_bool;

use super::flags::{self, Dialect};

/// The path the `kube-apiserver` stand-in asks for the store at.
pub(super) const STORE_PATH: &str = "/konverge/store";

/// What `GET /konverge/store` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StoreLocation {
    /// The etcd stand-in's `--data-dir`, absolute.
    pub(super) data_dir: PathBuf,
    /// False under `--unsafe-no-fsync`: commits are not fsynced.
    pub(super) sync: bool,
}

/// etcd's flags that envtest passes (and `--name`, which names the default data directory).
#[derive(clap::Parser, Debug)]
#[command(
    name = "etcd",
    no_binary_name = true,
    args_override_self = true,
    disable_version_flag = true,
    about = "konverge, standing in for etcd under controller-runtime's envtest: it answers \
             /health at the client URLs and keeps --data-dir, where the kube-apiserver \
             stand-in keeps its store. It speaks no etcd protocol."
)]
pub(super) struct Flags {
    /// Human-readable name for this member.
    #[arg(long, default_value = "default")]
    name: String,
    /// Path to the data directory (default: NAME.etcd).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// List of URLs to listen on for client traffic (plain http).
    #[arg(long, value_delimiter = ',', default_value = "http://localhost:2379")]
    listen_client_urls: Vec<String>,
    /// List of this member's client URLs to advertise to the public.
    #[arg(long, value_delimiter = ',', default_value = "http://localhost:2379")]
    advertise_client_urls: Vec<String>,
    /// List of URLs to listen on for peer traffic (bound as etcd binds them; a single member
    /// has no peers to talk to).
    #[arg(long, value_delimiter = ',', default_value = "http://localhost:2380")]
    listen_peer_urls: Vec<String>,
    /// Disables fsync, unsafe, will cause data loss.
    #[arg(long, value_parser = go_bool, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false")]
    unsafe_no_fsync: bool,
}

/// Runs the stand-in until SIGTERM.
pub(super) async fn main(args: Vec<OsString>) -> ExitCode {
    let flags = match flags::parse::<Flags>(args, Dialect::GoFlag) {
        Ok(flags) => flags,
        Err(code) => return code,
    };
    match run(flags).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("etcd: {error:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(flags: Flags) -> anyhow::Result<()> {
    let data_dir = flags
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.etcd", flags.name)));
    let data_dir = prepare_data_dir(&data_dir)?;
    for url in &flags.advertise_client_urls {
        http_address(url, "--advertise-client-urls").await?;
    }
    let mut peers = Vec::new();
    for url in &flags.listen_peer_urls {
        let addr = http_address(url, "--listen-peer-urls").await?;
        peers.push(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening for peers on {url}"))?,
        );
    }
    let location = StoreLocation {
        data_dir: data_dir.clone(),
        sync: !flags.unsafe_no_fsync,
    };
    let router = axum::Router::new()
        .route(
            "/health",
            get(|| async { json_response(&json!({"health": "true", "reason": ""})) }),
        )
        .route(
            STORE_PATH,
            get(move || {
                let location = location.clone();
                async move { json_response(&location) }
            }),
        );
    let mut serving = Vec::new();
    for url in &flags.listen_client_urls {
        let addr = http_address(url, "--listen-client-urls").await?;
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening for clients on {url}"))?;
        serving.push(tokio::spawn(
            axum::serve(listener, router.clone()).into_future(),
        ));
    }
    eprintln!(
        "konverge's etcd stand-in is serving {} (data in {})",
        flags.listen_client_urls.join(","),
        data_dir.display()
    );
    // SIGTERM, as envtest's Stop() sends, or Ctrl-C.
    crate::up::shutdown_signal().await;
    drop(peers);
    for task in serving {
        task.abort();
    }
    Ok(())
}

/// A JSON answer.
fn json_response(body: &impl Serialize) -> ([(http::HeaderName, &'static str); 1], String) {
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(body).unwrap_or_default(),
    )
}

/// Creates the data directory (owner only, as etcd does) and returns it absolute.
fn prepare_data_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating --data-dir {}", dir.display()))?;
    dir.canonicalize()
        .with_context(|| format!("resolving --data-dir {}", dir.display()))
}

/// The address an `http://HOST:PORT` URL of `flag` names.
pub(super) async fn http_address(url: &str, flag: &str) -> anyhow::Result<SocketAddr> {
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("{flag}: {url:?} is not a URL"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            bail!("{flag}: {url:?}: konverge's etcd stand-in serves plain http only, not {other}")
        }
        None => bail!("{flag}: {url:?} is not a URL (http://HOST:PORT)"),
    }
    let host = uri
        .host()
        .with_context(|| format!("{flag}: {url:?} names no host"))?;
    let port = uri
        .port_u16()
        .with_context(|| format!("{flag}: {url:?} names no port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    tokio::net::lookup_host((host, port))
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .with_context(|| format!("{flag}: {url:?}: cannot resolve {host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn client_urls_are_plain_http_addresses() {
        let addr = http_address("http://127.0.0.1:2379", "--listen-client-urls")
            .await
            .expect("an address");
        assert_eq!(addr, "127.0.0.1:2379".parse().expect("addr"));
        let error = http_address("https://127.0.0.1:2379", "--listen-client-urls")
            .await
            .expect_err("https is refused")
            .to_string();
        assert_eq!(
            error,
            "--listen-client-urls: \"https://127.0.0.1:2379\": konverge's etcd stand-in \
             serves plain http only, not https"
        );
        let error = http_address("http://127.0.0.1", "--listen-peer-urls")
            .await
            .expect_err("no port")
            .to_string();
        assert_eq!(
            error,
            "--listen-peer-urls: \"http://127.0.0.1\" names no port"
        );
    }
}
