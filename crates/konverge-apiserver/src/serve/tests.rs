//! End-to-end tests of `serve`: real TLS, real clients (kube-rs, kubectl, hyper HTTP/1.1 and
//! HTTP/2), restarts, corrupt files, streaming and graceful shutdown.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsConnector;

use super::credentials::{
    CA_CERT_FILE, CA_KEY_FILE, Credentials, CredentialsError, SERVICE_ACCOUNT_KEY_FILE,
    SERVING_CERT_FILE, SERVING_KEY_FILE, TOKEN_FILE, issue_client_certificate,
};
use super::https::{Serve, ServeOptions, Serving};
use super::kubeconfig::{KUBECONFIG_FILE, kubeconfig, render, server_url, write_kubeconfig};
use crate::auth::authn::ClientCertificate;
use crate::auth::tokens::ServiceAccountTokens;

const GIT_VERSION: &str = "v1.33.0+konverge-test";
const VERSION_JSON: &str = r#"{"major":"1","minor":"33","gitVersion":"v1.33.0+konverge-test","gitCommit":"0000000000000000000000000000000000000000","gitTreeState":"clean","buildDate":"2025-01-01T00:00:00Z","goVersion":"none","compiler":"rustc","platform":"linux/amd64"}"#;
const STREAM_CHUNKS: usize = 3;
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// A small API: /version (checks the bearer token), /stream (gated chunks), /forever.

/// What the test router saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    path: &'static str,
    authorization: Option<String>,
    version: Version,
    remote: SocketAddr,
}

#[derive(Clone)]
struct Api {
    token: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Each permit releases one more `/stream` chunk after the first.
    release: Arc<Semaphore>,
}

impl Api {
    fn new(token: &str) -> Self {
        Self {
            token: token.to_owned(),
            seen: Arc::default(),
            release: Arc::new(Semaphore::new(0)),
        }
    }

    fn router(&self) -> Router {
        Router::new()
            .route("/version", get(version))
            .route("/stream", get(stream))
            .route("/forever", get(forever))
            .route("/whoami", get(whoami))
            .with_state(self.clone())
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn record(
        &self,
        path: &'static str,
        remote: SocketAddr,
        version: Version,
        headers: &HeaderMap,
    ) {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or("<binary>").to_owned());
        self.seen.lock().unwrap().push(Seen {
            path,
            authorization,
            version,
            remote,
        });
    }
}

async fn version(
    State(api): State<Api>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    version: Version,
    headers: HeaderMap,
) -> Response {
    api.record("/version", remote, version, &headers);
    let expected = format!("Bearer {}", api.token);
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some(expected.as_str())
    {
        return (StatusCode::UNAUTHORIZED, "bad or missing bearer token").into_response();
    }
    ([(header::CONTENT_TYPE, "application/json")], VERSION_JSON).into_response()
}

async fn stream(
    State(api): State<Api>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    version: Version,
    headers: HeaderMap,
) -> Response {
    api.record("/stream", remote, version, &headers);
    let release = api.release.clone();
    let chunks = futures::stream::unfold(0, move |i| {
        let release = release.clone();
        async move {
            if i == STREAM_CHUNKS {
                return None;
            }
            if i > 0 {
                release.acquire().await.ok()?.forget();
            }
            Some((
                Ok::<_, Infallible>(Bytes::from(format!("chunk-{i}\n"))),
                i + 1,
            ))
        }
    });
    Body::from_stream(chunks).into_response()
}

/// The client certificate the connection presented: `CN O1,O2`, or `none`.
async fn whoami(certificate: Option<axum::Extension<ClientCertificate>>) -> String {
    match certificate {
        Some(axum::Extension(c)) => format!("{} {}", c.common_name, c.organizations.join(",")),
        None => "none".into(),
    }
}

/// One chunk, then nothing, forever (a quiet watch).
async fn forever() -> Response {
    let first = futures::stream::once(async { Ok::<_, Infallible>(Bytes::from("chunk-0\n")) });
    Body::from_stream(futures::StreamExt::chain(first, futures::stream::pending())).into_response()
}

// ---------------------------------------------------------------------------------------------
// Running servers.

struct Running {
    addr: SocketAddr,
    serving: Serving,
}

impl Running {
    /// Shuts down gracefully and returns how long that took.
    async fn stop(self) -> Duration {
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(30), self.serving.shutdown())
            .await
            .expect("server did not shut down");
        started.elapsed()
    }
}

async fn loopback_listener() -> TcpListener {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap()
}

async fn start_https(
    listener: TcpListener,
    router: Router,
    credentials: &Credentials,
    options: Option<ServeOptions>,
) -> Running {
    let mut serve = Serve::new(router)
        .tls(credentials)
        .expect("TLS configuration");
    if let Some(options) = options {
        serve = serve.options(options);
    }
    running(serve.listen(listener).expect("serving")).await
}

async fn start_http(listener: TcpListener, router: Router, options: ServeOptions) -> Running {
    running(
        Serve::new(router)
            .options(options)
            .listen(listener)
            .expect("serving"),
    )
    .await
}

async fn running(serving: Serving) -> Running {
    serving.ready().await;
    Running {
        addr: serving.local_addr(),
        serving,
    }
}

/// A data directory inside a fresh temporary directory (not created yet).
fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    (tmp, dir)
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP/1.1 and HTTP/2 clients over TLS (hyper), to watch individual body frames.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
}

impl Proto {
    fn alpn(self) -> &'static [u8] {
        match self {
            Proto::H1 => b"http/1.1",
            Proto::H2 => b"h2",
        }
    }

    fn version(self) -> Version {
        match self {
            Proto::H1 => Version::HTTP_11,
            Proto::H2 => Version::HTTP_2,
        }
    }
}

async fn tls_connect(
    addr: SocketAddr,
    ca_pem: &str,
    proto: Proto,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    tls_connect_as(addr, ca_pem, proto, None).await.unwrap()
}

/// Connects over TLS, with a client certificate and key (PEM) if given.
async fn tls_connect_as(
    addr: SocketAddr,
    ca_pem: &str,
    proto: Proto,
    client: Option<(&str, &str)>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match client {
        Some((cert_pem, key_pem)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()],
                rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![proto.alpn().to_vec()];
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(proto.alpn()));
    Ok(tls)
}

/// Sends `GET path` on a new HTTP connection over `io` and returns the response head.
async fn get_on<I>(io: I, proto: Proto, addr: SocketAddr, path: &str) -> hyper::Response<Incoming>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let response = match proto {
        Proto::H1 => {
            let (mut send, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(connection);
            let request = hyper::Request::get(path)
                .header(header::HOST, format!("localhost:{}", addr.port()))
                .body(Empty::<Bytes>::new())
                .unwrap();
            send.send_request(request).await.unwrap()
        }
        Proto::H2 => {
            let (mut send, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let request = hyper::Request::get(format!("https://localhost:{}{path}", addr.port()))
                .body(Empty::<Bytes>::new())
                .unwrap();
            send.send_request(request).await.unwrap()
        }
    };
    assert_eq!(response.version(), proto.version());
    response
}

/// Reads body frames until exactly `expected` arrived (fails after [`WAIT`]).
async fn expect_text(body: &mut Incoming, expected: &str) {
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "timed out waiting for {expected:?}; got {:?}",
                    String::from_utf8_lossy(&got)
                )
            })
            .unwrap_or_else(|| panic!("body ended before {expected:?}"))
            .unwrap();
        if let Ok(data) = frame.into_data() {
            got.extend_from_slice(&data);
        }
    }
    assert_eq!(String::from_utf8_lossy(&got), expected);
}

/// Asserts that the body ends (cleanly, or with an error if `cut` is allowed) with no more data.
async fn expect_end(body: &mut Incoming, cut_allowed: bool) {
    loop {
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .expect("body did not end");
        match frame {
            None => return,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    assert!(data.is_empty(), "unexpected data: {data:?}");
                }
            }
            Some(Err(e)) => {
                assert!(cut_allowed, "body failed: {e}");
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Credentials.

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn credentials_are_generated_once_with_private_modes() {
    let (_tmp, dir) = data_dir();
    let first = Credentials::load_or_create(&dir).unwrap();
    assert!(first.generated);
    assert!(first.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(first.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(first.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    // 32 random bytes, URL-safe base64 without padding.
    assert_eq!(first.token.len(), 43);
    assert!(
        first
            .token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    );
    #[cfg(unix)]
    {
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("pki")), 0o700);
        for file in [
            CA_CERT_FILE,
            CA_KEY_FILE,
            SERVING_CERT_FILE,
            SERVING_KEY_FILE,
            TOKEN_FILE,
        ] {
            assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(dir.join(TOKEN_FILE)).unwrap(),
        format!("{}\n", first.token)
    );
    let debug = format!("{first:?}");
    assert!(!debug.contains(&first.token) && !debug.contains(&first.key_pem));

    let second = Credentials::load_or_create(&dir).unwrap();
    assert!(!second.generated);
    assert_eq!(
        Credentials {
            generated: true,
            ..second.clone()
        },
        first
    );
    assert_eq!(Credentials::load(&dir).unwrap(), second);

    // A different data directory gets a different identity.
    let (_tmp2, other) = data_dir();
    let other = Credentials::load_or_create(&other).unwrap();
    assert_ne!(other.ca_pem, first.ca_pem);
    assert_ne!(other.token, first.token);
}

#[test]
fn the_service_account_key_is_kept_and_made_for_older_data_directories() {
    let (_tmp, dir) = data_dir();
    let first = Credentials::load_or_create(&dir).unwrap();
    #[cfg(unix)]
    assert_eq!(mode(&dir.join(SERVICE_ACCOUNT_KEY_FILE)), 0o600);
    assert!(
        std::fs::read_to_string(dir.join(SERVICE_ACCOUNT_KEY_FILE))
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );
    ServiceAccountTokens::from_pkcs8(&first.service_account_key).unwrap();
    assert!(!format!("{first:?}").contains(&format!("{:?}", first.service_account_key)));
    let again = Credentials::load_or_create(&dir).unwrap();
    assert_eq!(again.service_account_key, first.service_account_key);

    // A data directory from before the key existed: everything else loads, the key is made.
    std::fs::remove_file(dir.join(SERVICE_ACCOUNT_KEY_FILE)).unwrap();
    let upgraded = Credentials::load_or_create(&dir).unwrap();
    assert!(!upgraded.generated);
    assert_eq!(upgraded.token, first.token);
    assert_ne!(upgraded.service_account_key, first.service_account_key);
    assert_eq!(
        Credentials::load_or_create(&dir)
            .unwrap()
            .service_account_key,
        upgraded.service_account_key
    );

    // A damaged key is an error naming it, not replaced.
    let error = error_after(|dir| {
        std::fs::write(
            dir.join(SERVICE_ACCOUNT_KEY_FILE),
            std::fs::read_to_string(dir.join(CA_CERT_FILE)).unwrap(),
        )
        .unwrap()
    });
    assert_invalid(&error, SERVICE_ACCOUNT_KEY_FILE, "private key");
}

#[test]
fn existing_empty_pki_dir_counts_as_first_start() {
    let (_tmp, dir) = data_dir();
    std::fs::create_dir_all(dir.join("pki")).unwrap();
    assert!(Credentials::load_or_create(&dir).unwrap().generated);
}

/// Runs `damage` on a fresh data directory and returns the error of the next start.
fn error_after(damage: impl FnOnce(&Path)) -> CredentialsError {
    let (_tmp, dir) = data_dir();
    Credentials::load_or_create(&dir).unwrap();
    damage(&dir);
    Credentials::load_or_create(&dir).expect_err("damaged credentials were accepted")
}

fn assert_invalid(error: &CredentialsError, file: &str, reason_part: &str) {
    let message = error.to_string();
    match error {
        CredentialsError::Invalid { path, reason } => {
            assert!(path.ends_with(file), "{message}");
            assert!(reason.contains(reason_part), "{message}");
        }
        other => panic!("expected Invalid for {file}, got {other:?}"),
    }
    assert!(message.contains(file), "{message}");
    assert!(message.contains("delete the pki directory"), "{message}");
}

#[test]
fn corrupt_ca_certificate_is_a_clear_error() {
    let error = error_after(|dir| std::fs::write(dir.join(CA_CERT_FILE), "garbage\n").unwrap());
    assert_invalid(&error, CA_CERT_FILE, "no PEM CERTIFICATE");

    // Truncated in the middle of the PEM block.
    let error = error_after(|dir| {
        let path = dir.join(CA_CERT_FILE);
        let pem = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, &pem[..pem.len() / 2]).unwrap();
    });
    assert_invalid(&error, CA_CERT_FILE, "not valid PEM");

    // Valid PEM framing around bytes that are not a certificate.
    let error = error_after(|dir| {
        std::fs::write(
            dir.join(CA_CERT_FILE),
            "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
    });
    assert_invalid(&error, CA_CERT_FILE, "not a usable CA certificate");

    let error = error_after(|dir| std::fs::write(dir.join(CA_CERT_FILE), [0xff, 0xfe]).unwrap());
    assert_invalid(&error, CA_CERT_FILE, "not UTF-8");
}

#[test]
fn inconsistent_files_are_clear_errors() {
    // A key that belongs to another certificate.
    let error = error_after(|dir| {
        std::fs::copy(dir.join(CA_KEY_FILE), dir.join(SERVING_KEY_FILE)).unwrap();
    });
    assert_invalid(&error, SERVING_KEY_FILE, "does not belong");

    let error = error_after(|dir| std::fs::write(dir.join(CA_KEY_FILE), "").unwrap());
    assert_invalid(&error, CA_KEY_FILE, "not a PEM private key");

    // A serving certificate from another CA.
    let error = error_after(|dir| {
        let (_tmp, other) = data_dir();
        Credentials::load_or_create(&other).unwrap();
        for file in [SERVING_CERT_FILE, SERVING_KEY_FILE] {
            std::fs::copy(other.join(file), dir.join(file)).unwrap();
        }
    });
    assert_invalid(&error, SERVING_CERT_FILE, "issued by");

    let error = error_after(|dir| std::fs::write(dir.join(TOKEN_FILE), "\n").unwrap());
    assert_invalid(&error, TOKEN_FILE, "empty");
    let error = error_after(|dir| std::fs::write(dir.join(TOKEN_FILE), "a b\n").unwrap());
    assert_invalid(&error, TOKEN_FILE, "' '");
}

#[test]
fn partial_credentials_are_a_clear_error() {
    let error = error_after(|dir| std::fs::remove_file(dir.join(TOKEN_FILE)).unwrap());
    let message = error.to_string();
    match &error {
        CredentialsError::Incomplete {
            missing, present, ..
        } => {
            assert_eq!(missing.len(), 1);
            assert!(missing[0].ends_with(TOKEN_FILE));
            assert_eq!(present.len(), 4);
        }
        other => panic!("expected Incomplete, got {other:?}"),
    }
    assert!(message.contains("incomplete credentials"), "{message}");
    assert!(
        message.contains("missing") && message.contains("/token"),
        "{message}"
    );

    // Nothing was regenerated behind the user's back.
    let (_tmp, dir) = data_dir();
    let original = Credentials::load_or_create(&dir).unwrap();
    std::fs::remove_file(dir.join(SERVING_CERT_FILE)).unwrap();
    assert!(Credentials::load_or_create(&dir).is_err());
    assert!(!dir.join(SERVING_CERT_FILE).exists());
    assert_eq!(
        std::fs::read_to_string(dir.join(CA_CERT_FILE)).unwrap(),
        original.ca_pem
    );
}

/// The certificates pass OpenSSL's strict X.509 checks (what Python 3.13+ enables by default).
#[test]
fn certificates_pass_openssl_strict_verification() {
    let (_tmp, dir) = data_dir();
    Credentials::load_or_create(&dir).unwrap();
    let output = match std::process::Command::new("openssl")
        .arg("verify")
        .arg("-x509_strict")
        .arg("-purpose")
        .arg("sslserver")
        .arg("-CAfile")
        .arg(dir.join(CA_CERT_FILE))
        .arg(dir.join(SERVING_CERT_FILE))
        .output()
    {
        Ok(output) => output,
        Err(e) => {
            eprintln!("skipping: cannot run openssl: {e}");
            return;
        }
    };
    assert!(
        output.status.success(),
        "openssl verify failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Client certificates pass OpenSSL's strict checks for TLS clients too.
#[test]
fn client_certificates_pass_openssl_strict_verification() {
    let (tmp, dir) = data_dir();
    Credentials::load_or_create(&dir).unwrap();
    let issued =
        issue_client_certificate(&dir, "alice", &["devs".into()], Duration::from_secs(3600))
            .unwrap();
    let path = tmp.path().join("alice.crt");
    std::fs::write(&path, &issued.cert_pem).unwrap();
    let output = match std::process::Command::new("openssl")
        .args(["verify", "-x509_strict", "-purpose", "sslclient", "-CAfile"])
        .arg(dir.join(CA_CERT_FILE))
        .arg(&path)
        .output()
    {
        Ok(output) => output,
        Err(e) => {
            eprintln!("skipping: cannot run openssl: {e}");
            return;
        }
    };
    assert!(
        output.status.success(),
        "openssl verify failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let subject = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    // OpenSSL versions space the subject differently.
    let subject: String = String::from_utf8_lossy(&subject.stdout)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    assert_eq!(subject, "subject=O=devs,CN=alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_asked_for_verified_and_handed_to_every_request() {
    let (_tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let server = start_https(
        loopback_listener().await,
        Api::new(&credentials.token).router(),
        &credentials,
        None,
    )
    .await;
    let groups = ["devs".to_string(), "ops".to_string()];
    let alice =
        issue_client_certificate(&dir, "alice", &groups, Duration::from_secs(3600)).unwrap();

    for proto in [Proto::H1, Proto::H2] {
        // With a certificate the CA signed: every request on the connection carries it.
        let tls = tls_connect_as(
            server.addr,
            &credentials.ca_pem,
            proto,
            Some((&alice.cert_pem, &alice.key_pem)),
        )
        .await
        .unwrap();
        let mut response = get_on(tls, proto, server.addr, "/whoami").await;
        assert_eq!(response.status(), StatusCode::OK);
        expect_text(response.body_mut(), "alice devs,ops").await;

        // Without one: served all the same, without a certificate.
        let tls = tls_connect(server.addr, &credentials.ca_pem, proto).await;
        let mut response = get_on(tls, proto, server.addr, "/whoami").await;
        expect_text(response.body_mut(), "none").await;
    }

    // A certificate from another CA is refused in the handshake (TLS 1.3 clients learn it
    // when they first read).
    let (_tmp2, other_dir) = data_dir();
    Credentials::load_or_create(&other_dir).unwrap();
    let mallory =
        issue_client_certificate(&other_dir, "mallory", &[], Duration::from_secs(3600)).unwrap();
    let refused = match tls_connect_as(
        server.addr,
        &credentials.ca_pem,
        Proto::H1,
        Some((&mallory.cert_pem, &mallory.key_pem)),
    )
    .await
    {
        Err(_) => true,
        Ok(mut tls) => {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let _ = tls
                .write_all(b"GET /whoami HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .await;
            let mut buf = Vec::new();
            let read = tokio::time::timeout(WAIT, tls.read_to_end(&mut buf))
                .await
                .expect("the server answers or closes");
            read.is_err() || buf.is_empty()
        }
    };
    assert!(refused, "a certificate from another CA was accepted");

    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Kubeconfig.

#[test]
fn server_url_uses_a_name_the_certificate_covers() {
    let url = |s: &str| server_url(s.parse().unwrap());
    assert_eq!(url("127.0.0.1:6443"), "https://127.0.0.1:6443");
    assert_eq!(url("0.0.0.0:1234"), "https://127.0.0.1:1234");
    assert_eq!(url("[::]:1234"), "https://127.0.0.1:1234");
    assert_eq!(url("[::1]:1234"), "https://[::1]:1234");
    assert_eq!(url("127.0.0.2:6443"), "https://127.0.0.2:6443");
    assert_eq!(url("10.0.0.5:6443"), "https://10.0.0.5:6443");
    assert_eq!(url("[fd00::5]:6443"), "https://[fd00::5]:6443");
}

// ---------------------------------------------------------------------------------------------
// Credentials shared by the servers of a cluster.

/// `openssl verify` of `cert_pem` as a server certificate for `ip`, issued by `ca_pem`, with
/// OpenSSL's strict checks; `None` when openssl cannot run.
fn openssl_verifies(ca_pem: &str, cert_pem: &str, ip: &str) -> Option<bool> {
    let tmp = tempfile::tempdir().unwrap();
    let (ca, cert) = (tmp.path().join("ca.crt"), tmp.path().join("server.crt"));
    std::fs::write(&ca, ca_pem).unwrap();
    std::fs::write(&cert, cert_pem).unwrap();
    let output = std::process::Command::new("openssl")
        .args([
            "verify",
            "-x509_strict",
            "-purpose",
            "sslserver",
            "-verify_ip",
            ip,
        ])
        .arg("-CAfile")
        .arg(&ca)
        .arg(&cert)
        .output()
        .ok()?;
    Some(output.status.success())
}

#[test]
fn servers_of_a_cluster_share_the_ca_token_and_signing_key_and_serve_their_own_names() {
    let (_tmp, shared) = data_dir();
    let first = Credentials::for_cluster(&shared, &["127.0.0.2".into()]).unwrap();
    let second = Credentials::for_cluster(&shared, &["127.0.0.3".into()]).unwrap();
    assert!(first.generated && !second.generated);
    assert_eq!(first.ca_pem, second.ca_pem);
    assert_eq!(first.token, second.token);
    assert_eq!(first.service_account_key, second.service_account_key);
    assert_ne!(first.cert_pem, second.cert_pem);
    // Only what is shared is on disk, private; the serving certificates are not.
    for file in [
        CA_CERT_FILE,
        CA_KEY_FILE,
        SERVICE_ACCOUNT_KEY_FILE,
        TOKEN_FILE,
    ] {
        assert_eq!(mode(&shared.join(file)), 0o600, "{file}");
    }
    assert!(!shared.join(SERVING_CERT_FILE).exists());

    // Each serving certificate names its own server, and loopback, not the other server.
    let checks = [
        (&first, "127.0.0.2", true),
        (&first, "127.0.0.1", true),
        (&first, "127.0.0.3", false),
        (&second, "127.0.0.3", true),
        (&second, "127.0.0.2", false),
    ];
    for (credentials, ip, expected) in checks {
        match openssl_verifies(&credentials.ca_pem, &credentials.cert_pem, ip) {
            Some(verified) => assert_eq!(verified, expected, "{ip}"),
            None => eprintln!("skipping the openssl checks: cannot run openssl"),
        }
    }

    // A single server's data directory later made from them serves as ever.
    let single = Credentials::load_or_create(&shared).unwrap();
    assert!(!single.generated);
    assert_eq!(single.ca_pem, first.ca_pem);
    assert_eq!(single.token, first.token);
    assert!(shared.join(SERVING_CERT_FILE).exists());
}

#[test]
fn servers_started_at_once_over_an_empty_directory_agree_on_one_ca() {
    let (_tmp, shared) = data_dir();
    let made: Vec<Credentials> = std::thread::scope(|scope| {
        let handles: Vec<_> = (2..6)
            .map(|n| {
                let shared = &shared;
                scope.spawn(move || {
                    Credentials::for_cluster(shared, &[format!("127.0.0.{n}")]).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(made.iter().filter(|c| c.generated).count(), 1);
    for credentials in &made {
        assert_eq!(credentials.ca_pem, made[0].ca_pem);
        assert_eq!(credentials.token, made[0].token);
    }
}

#[test]
fn a_damaged_shared_directory_is_a_clear_error() {
    let (_tmp, shared) = data_dir();
    Credentials::for_cluster(&shared, &[]).unwrap();
    std::fs::remove_file(shared.join(TOKEN_FILE)).unwrap();
    let error = Credentials::for_cluster(&shared, &[]).unwrap_err();
    assert!(
        matches!(&error, CredentialsError::Incomplete { missing, .. } if missing.len() == 1),
        "{error:?}"
    );
    std::fs::write(shared.join(TOKEN_FILE), "x").unwrap();
    std::fs::write(shared.join(CA_KEY_FILE), "not a key").unwrap();
    let error = Credentials::for_cluster(&shared, &[]).unwrap_err();
    assert_invalid(&error, CA_KEY_FILE, "");
}

/// A kubeconfig written by one server of a cluster reaches another: the same CA vouches
/// for both serving certificates, and the same token is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_of_one_server_of_a_cluster_reaches_another() {
    let (_tmp, shared) = data_dir();
    let ip: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let first = Credentials::for_cluster(&shared, &[]).unwrap();
    let second = Credentials::for_cluster(&shared, &[ip.to_string()]).unwrap();
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let api = Api::new(&second.token);
    let server = start_https(listener, api.router(), &second, None).await;
    let (_home, dir) = data_dir();
    let kubeconfig = write_kubeconfig(&dir, &first, &server_url(addr)).unwrap();
    assert_eq!(kube_client_version(&kubeconfig).await.unwrap(), GIT_VERSION);
    assert_eq!(api.seen().len(), 1);
    server.stop().await;
}

#[test]
fn kubeconfig_is_written_private_and_rewritten_each_start() {
    let (_tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let path = write_kubeconfig(&dir, &credentials, "https://127.0.0.1:1111").unwrap();
    assert_eq!(path, dir.join(KUBECONFIG_FILE));
    #[cfg(unix)]
    assert_eq!(mode(&path), 0o600);
    write_kubeconfig(&dir, &credentials, "https://127.0.0.1:2222").unwrap();
    let yaml = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        yaml,
        render(&kubeconfig(
            "konverge",
            "https://127.0.0.1:2222",
            Some(&credentials)
        ))
        .unwrap()
    );

    let config = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    assert_eq!(config.current_context.as_deref(), Some("konverge"));
    let cluster = config.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(config.clusters[0].name, "konverge");
    assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:2222"));
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.as_deref().unwrap())
        .unwrap();
    assert_eq!(ca, credentials.ca_pem.as_bytes());
    assert_eq!(config.auth_infos[0].name, "konverge");
    assert!(
        config.auth_infos[0]
            .auth_info
            .as_ref()
            .unwrap()
            .token
            .is_some()
    );
    let context = config.contexts[0].context.as_ref().unwrap();
    assert_eq!(config.contexts[0].name, "konverge");
    assert_eq!(context.cluster, "konverge");
    assert_eq!(context.user.as_deref(), Some("konverge"));
    assert_eq!(context.namespace.as_deref(), Some("default"));
}

/// `kubectl config view --raw` reads the kubeconfig back field by field.
#[test]
fn kubectl_parses_the_kubeconfig() {
    let (tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let path = write_kubeconfig(&dir, &credentials, "https://127.0.0.1:6443").unwrap();
    let view = |jsonpath: &str| {
        kubectl(
            tmp.path(),
            &path,
            &[
                "config",
                "view",
                "--raw",
                "-o",
                &format!("jsonpath={jsonpath}"),
            ],
        )
    };
    let Some(server) = view("{.clusters[?(@.name==\"konverge\")].cluster.server}") else {
        return;
    };
    assert_eq!(server, "https://127.0.0.1:6443");
    assert_eq!(view("{.current-context}").unwrap(), "konverge");
    assert_eq!(
        view("{.users[?(@.name==\"konverge\")].user.token}").unwrap(),
        credentials.token
    );
    assert_eq!(
        view("{.contexts[?(@.name==\"konverge\")].context.namespace}").unwrap(),
        "default"
    );
    assert_eq!(
        view("{.clusters[0].cluster.certificate-authority-data}").unwrap(),
        base64::engine::general_purpose::STANDARD.encode(&credentials.ca_pem)
    );
}

/// Runs kubectl with `kubeconfig` and returns its stdout, or `None` (test skipped) when kubectl
/// is not installed. Fails the test when kubectl exits unsuccessfully.
fn kubectl(home: &Path, kubeconfig: &Path, args: &[&str]) -> Option<String> {
    let output = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipping: kubectl is not on PATH");
            return None;
        }
        Err(e) => panic!("cannot run kubectl: {e}"),
    };
    assert!(
        output.status.success(),
        "kubectl {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8(output.stdout).unwrap())
}

// ---------------------------------------------------------------------------------------------
// Serving.

/// A kube::Client built from the written kubeconfig reaches the server over HTTPS (CA data
/// trusted, bearer token sent).
async fn kube_client_version(kubeconfig: &Path) -> Result<String, kube::Error> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = kube::Client::try_from(config)?;
    Ok(client.apiserver_version().await?.git_version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_client_and_kubectl_reach_the_server_with_ca_and_token() {
    let (tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let api = Api::new(&credentials.token);
    let listener = loopback_listener().await;
    let addr = listener.local_addr().unwrap();
    let kubeconfig = write_kubeconfig(&dir, &credentials, &server_url(addr)).unwrap();
    let server = start_https(listener, api.router(), &credentials, None).await;

    // (a) kube-rs.
    assert_eq!(kube_client_version(&kubeconfig).await.unwrap(), GIT_VERSION);
    let seen = api.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/version");
    let expected_auth = format!("Bearer {}", credentials.token);
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(expected_auth.as_str())
    );
    assert!(seen[0].remote.ip().is_loopback());

    // (b) kubectl (HTTP/2 via ALPN, like client-go).
    let home = tmp.path().to_path_buf();
    let path = kubeconfig.clone();
    let output =
        tokio::task::spawn_blocking(move || kubectl(&home, &path, &["get", "--raw", "/version"]))
            .await
            .unwrap();
    if let Some(output) = output {
        assert!(output.contains(GIT_VERSION), "{output}");
        let seen = api.seen();
        let last = seen.last().unwrap();
        assert_eq!(last.authorization.as_deref(), Some(expected_auth.as_str()));
        assert_eq!(last.version, Version::HTTP_2, "kubectl should use HTTP/2");
    }

    // A client without the token is refused by the (test) API, proving the check is real.
    let tls = tls_connect(server.addr, &credentials.ca_pem, Proto::H2).await;
    let response = get_on(tls, Proto::H2, server.addr, "/version").await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_reuses_ca_and_token_so_old_kubeconfigs_keep_working() {
    let (tmp, dir) = data_dir();
    let first = Credentials::load_or_create(&dir).unwrap();
    let listener = loopback_listener().await;
    let addr = listener.local_addr().unwrap();
    let kubeconfig = write_kubeconfig(&dir, &first, &server_url(addr)).unwrap();
    let saved = tmp.path().join("saved-kubeconfig");
    std::fs::copy(&kubeconfig, &saved).unwrap();
    let server = start_https(listener, Api::new(&first.token).router(), &first, None).await;
    assert_eq!(kube_client_version(&saved).await.unwrap(), GIT_VERSION);
    server.stop().await;

    // Second start: same data directory, same port.
    let second = Credentials::load_or_create(&dir).unwrap();
    assert!(!second.generated);
    assert_eq!(second.ca_pem, first.ca_pem);
    assert_eq!(second.token, first.token);
    let listener = TcpListener::bind(addr).await.unwrap();
    write_kubeconfig(&dir, &second, &server_url(addr)).unwrap();
    assert_eq!(
        std::fs::read(&kubeconfig).unwrap(),
        std::fs::read(&saved).unwrap()
    );
    let api = Api::new(&second.token);
    let server = start_https(listener, api.router(), &second, None).await;
    assert_eq!(kube_client_version(&saved).await.unwrap(), GIT_VERSION);
    assert_eq!(api.seen().len(), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_do_not_stop_the_server() {
    let (_tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let options = ServeOptions {
        tls_handshake_timeout: Duration::from_millis(300),
        ..ServeOptions::default()
    };
    let server = start_https(
        loopback_listener().await,
        Api::new(&credentials.token).router(),
        &credentials,
        Some(options),
    )
    .await;

    // Plain HTTP on the TLS port.
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut tcp, b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // A client that does not trust the CA.
    let (_tmp2, other_dir) = data_dir();
    let other = Credentials::load_or_create(&other_dir).unwrap();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(other.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let untrusting = TlsConnector::from(Arc::new(config))
        .connect(
            ServerName::try_from("localhost").unwrap(),
            TcpStream::connect(server.addr).await.unwrap(),
        )
        .await;
    assert!(untrusting.is_err());
    // A client that connects and never says anything (hits the handshake timeout).
    let _silent = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    for proto in [Proto::H1, Proto::H2] {
        let tls = tls_connect(server.addr, &credentials.ca_pem, proto).await;
        let response = get_on(tls, proto, server.addr, "/version").await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    drop(tcp);
    server.stop().await;
}

/// (e) A streaming response reaches the client chunk by chunk: each chunk after the first is
/// only produced once the client has received the previous one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_delivered_incrementally_over_http2_and_http1() {
    let (_tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let api = Api::new(&credentials.token);
    let server = start_https(loopback_listener().await, api.router(), &credentials, None).await;

    for proto in [Proto::H2, Proto::H1] {
        let tls = tls_connect(server.addr, &credentials.ca_pem, proto).await;
        let response = get_on(tls, proto, server.addr, "/stream").await;
        assert_eq!(response.status(), StatusCode::OK);
        if proto == Proto::H1 {
            assert_eq!(
                response.headers().get(header::TRANSFER_ENCODING).unwrap(),
                "chunked"
            );
        }
        let mut body = response.into_body();
        for i in 0..STREAM_CHUNKS {
            if i > 0 {
                api.release.add_permits(1);
            }
            expect_text(&mut body, &format!("chunk-{i}\n")).await;
        }
        expect_end(&mut body, false).await;
        assert_eq!(api.seen().last().unwrap().version, proto.version());
    }
    server.stop().await;
}

/// The same over plain HTTP (HTTP/1.1, and HTTP/2 with prior knowledge).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_serves_both_protocols() {
    let api = Api::new("t0ken");
    let server = start_http(
        loopback_listener().await,
        api.router(),
        ServeOptions::default(),
    )
    .await;
    for proto in [Proto::H1, Proto::H2] {
        let tcp = TcpStream::connect(server.addr).await.unwrap();
        let response = get_on(tcp, proto, server.addr, "/stream").await;
        let mut body = response.into_body();
        expect_text(&mut body, "chunk-0\n").await;
        api.release.add_permits(STREAM_CHUNKS - 1);
        expect_text(&mut body, "chunk-1\nchunk-2\n").await;
        expect_end(&mut body, false).await;
    }
    let elapsed = server.stop().await;
    assert!(
        elapsed < Duration::from_secs(2),
        "idle shutdown took {elapsed:?}"
    );
}

/// (f) On shutdown the server stops accepting, but open streams run to completion within the
/// grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_open_streams_finish() {
    let (_tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let api = Api::new(&credentials.token);
    let options = ServeOptions {
        shutdown_grace: Duration::from_secs(20),
        ..ServeOptions::default()
    };
    let server = start_https(
        loopback_listener().await,
        api.router(),
        &credentials,
        Some(options),
    )
    .await;
    let addr = server.addr;

    let mut bodies = Vec::new();
    for proto in [Proto::H2, Proto::H1] {
        let tls = tls_connect(addr, &credentials.ca_pem, proto).await;
        let mut body = get_on(tls, proto, addr, "/stream").await.into_body();
        expect_text(&mut body, "chunk-0\n").await;
        bodies.push(body);
    }

    let started = Instant::now();
    let stopping = tokio::spawn(server.stop());
    // New connections are refused once shutdown has begun.
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "still accepting after shutdown");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!stopping.is_finished());

    api.release.add_permits(2 * (STREAM_CHUNKS - 1));
    for body in &mut bodies {
        expect_text(body, "chunk-1\nchunk-2\n").await;
        expect_end(body, false).await;
    }
    stopping.await.unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(5),
        "shutdown waited {elapsed:?} after the streams finished"
    );
}

/// (f) Streams that do not finish (watches) are cut when the grace period ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_drops_endless_streams_after_the_grace_period() {
    let (_tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let grace = Duration::from_millis(500);
    let options = ServeOptions {
        shutdown_grace: grace,
        ..ServeOptions::default()
    };
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks_before = metrics.num_alive_tasks();
    let server = start_https(
        loopback_listener().await,
        Api::new(&credentials.token).router(),
        &credentials,
        Some(options),
    )
    .await;
    let addr = server.addr;

    let mut bodies = Vec::new();
    for proto in [Proto::H2, Proto::H1] {
        let tls = tls_connect(addr, &credentials.ca_pem, proto).await;
        let mut body = get_on(tls, proto, addr, "/forever").await.into_body();
        expect_text(&mut body, "chunk-0\n").await;
        bodies.push(body);
    }

    let elapsed = server.stop().await;
    assert!(
        elapsed >= grace,
        "did not wait for the grace period: {elapsed:?}"
    );
    assert!(elapsed < grace + Duration::from_secs(3), "took {elapsed:?}");
    for body in &mut bodies {
        expect_end(body, true).await;
    }
    // Nothing is left running: no connection tasks, no HTTP/2 stream tasks (and the test's own
    // client connection tasks saw the connections close).
    let deadline = Instant::now() + WAIT;
    while metrics.num_alive_tasks() > tasks_before {
        assert!(
            Instant::now() < deadline,
            "{} tasks still alive after shutdown",
            metrics.num_alive_tasks() - tasks_before
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The default grace period also bounds shutdown (no options) with an endless stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_grace_period_bounds_shutdown() {
    let (_tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let server = start_https(
        loopback_listener().await,
        Api::new(&credentials.token).router(),
        &credentials,
        None,
    )
    .await;
    let tls = tls_connect(server.addr, &credentials.ca_pem, Proto::H2).await;
    let mut body = get_on(tls, Proto::H2, server.addr, "/forever")
        .await
        .into_body();
    expect_text(&mut body, "chunk-0\n").await;
    let elapsed = server.stop().await;
    let grace = super::https::DEFAULT_SHUTDOWN_GRACE;
    assert!(
        elapsed >= grace && elapsed < grace + Duration::from_secs(3),
        "{elapsed:?}"
    );
    expect_end(&mut body, true).await;
}

/// Tokens that look like other YAML types survive the round trip through kubectl as strings.
#[test]
fn unusual_tokens_round_trip_through_kubectl() {
    let (tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    for token in [
        "123",
        "1e3",
        "0x1F",
        "0o17",
        ".5",
        "true",
        "yes",
        "off",
        "null",
        "~",
        "-abc",
        "=x",
        "a+b/c=",
        "2001-01-01",
    ] {
        let credentials = Credentials {
            token: token.to_owned(),
            ..credentials.clone()
        };
        let path = write_kubeconfig(&dir, &credentials, "https://127.0.0.1:6443").unwrap();
        let Some(got) = kubectl(
            tmp.path(),
            &path,
            &[
                "config",
                "view",
                "--raw",
                "-o",
                "jsonpath={.users[0].user.token}",
            ],
        ) else {
            return;
        };
        assert_eq!(got, token);
    }
}

/// Python's TLS stack with strict X.509 checks (the default from Python 3.13 on, which the
/// Python Kubernetes client inherits) accepts the server and CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_strict_tls_accepts_the_server() {
    const SCRIPT: &str = r#"
import ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[1])
ctx.verify_flags |= ssl.VERIFY_X509_STRICT
req = urllib.request.Request(sys.argv[2], headers={"Authorization": "Bearer " + sys.argv[3]})
print(urllib.request.urlopen(req, context=ctx).read().decode())
"#;
    let (_tmp, dir) = data_dir();
    let credentials = Credentials::load_or_create(&dir).unwrap();
    let server = start_https(
        loopback_listener().await,
        Api::new(&credentials.token).router(),
        &credentials,
        None,
    )
    .await;
    let url = format!("{}/version", server_url(server.addr));
    let ca = dir.join(CA_CERT_FILE);
    let token = credentials.token.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg("-c")
            .arg(SCRIPT)
            .arg(ca)
            .arg(url)
            .arg(token)
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .output()
    })
    .await
    .unwrap();
    match output {
        Err(e) => eprintln!("skipping: cannot run python3: {e}"),
        Ok(output) => assert!(
            output.status.success()
                && String::from_utf8_lossy(&output.stdout).contains(GIT_VERSION),
            "python3 failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Serving with certificates made elsewhere (`Serve::tls_pem`), as envtest hands them over.

/// A CA made as controller-runtime's tinyca makes one: ECDSA P-256, may sign certificates.
fn tiny_ca(common_name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    rcgen::CertifiedIssuer::self_signed(params, key).unwrap()
}

/// A certificate `ca` signs as tinyca does (ECDSA P-256, KeyUsage digitalSignature and
/// keyEncipherment), for `usage`, with `names` as SANs: its PEM and its key.
fn tiny_cert(
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    common_name: &str,
    organizations: &[&str],
    names: &[&str],
    usage: rcgen::ExtendedKeyUsagePurpose,
) -> (String, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    for organization in organizations {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *organization);
    }
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    (params.signed_by(&key, ca).unwrap().pem(), key)
}

/// The SEC1 `EC PRIVATE KEY` PEM of a P-256 key: the ECPrivateKey its PKCS#8 wraps.
fn sec1_pem(key: &rcgen::KeyPair) -> String {
    let pkcs8 = key.serialize_der();
    // SEQUENCE (two-byte length) { INTEGER 0, SEQUENCE { OIDs }, OCTET STRING { ECPrivateKey } }
    assert_eq!(&pkcs8[..2], &[0x30, 0x81]);
    let algorithm = 3 + 3;
    let octets = algorithm + 2 + usize::from(pkcs8[algorithm + 1]);
    assert_eq!(pkcs8[octets], 0x04);
    let len = usize::from(pkcs8[octets + 1]);
    let sec1 = &pkcs8[octets + 2..octets + 2 + len];
    let body = base64::engine::general_purpose::STANDARD.encode(sec1);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n",
        lines.join("\n")
    )
}

/// envtest's certificates: a serving CA and its certificate for `names`, and alice's
/// client certificate (no SAN, client authentication only, group `team`) from another CA.
struct EnvtestPki {
    serving_ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    client_ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    serving_pem: String,
    serving_key: rcgen::KeyPair,
    alice_pem: String,
    alice_key: rcgen::KeyPair,
}

fn envtest_pki(names: &[&str]) -> EnvtestPki {
    let serving_ca = tiny_ca("serving-ca");
    let client_ca = tiny_ca("client-ca");
    let (serving_pem, serving_key) = tiny_cert(
        &serving_ca,
        "localhost",
        &[],
        names,
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (alice_pem, alice_key) = tiny_cert(
        &client_ca,
        "alice",
        &["team"],
        &[],
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    );
    EnvtestPki {
        serving_ca,
        client_ca,
        serving_pem,
        serving_key,
        alice_pem,
        alice_key,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_pem_serves_given_certificates_and_verifies_clients_against_another_ca() {
    let EnvtestPki {
        serving_ca,
        client_ca,
        serving_pem,
        serving_key,
        alice_pem,
        alice_key,
    } = envtest_pki(&["localhost", "127.0.0.1"]);
    let alice_key = alice_key.serialize_pem();
    assert!(alice_key.starts_with("-----BEGIN PRIVATE KEY-----"));

    let server = running(
        Serve::new(Api::new("t").router())
            .tls_pem(
                &serving_pem,
                &serving_key.serialize_pem(),
                Some(&client_ca.pem()),
            )
            .expect("TLS configuration")
            .listen(loopback_listener().await)
            .expect("serving"),
    )
    .await;
    for proto in [Proto::H1, Proto::H2] {
        let tls = tls_connect_as(
            server.addr,
            &serving_ca.pem(),
            proto,
            Some((&alice_pem, &alice_key)),
        )
        .await
        .unwrap();
        let mut response = get_on(tls, proto, server.addr, "/whoami").await;
        expect_text(response.body_mut(), "alice team").await;
        let tls = tls_connect(server.addr, &serving_ca.pem(), proto).await;
        let mut response = get_on(tls, proto, server.addr, "/whoami").await;
        expect_text(response.body_mut(), "none").await;
    }
    server.stop().await;

    // Without a client CA no certificate is asked for (rustls clients send one only when
    // asked), and a SEC1 `EC PRIVATE KEY` serves as well.
    let server = running(
        Serve::new(Api::new("t").router())
            .tls_pem(&serving_pem, &sec1_pem(&serving_key), None)
            .expect("TLS configuration")
            .listen(loopback_listener().await)
            .expect("serving"),
    )
    .await;
    let tls = tls_connect_as(
        server.addr,
        &serving_ca.pem(),
        Proto::H1,
        Some((&alice_pem, &alice_key)),
    )
    .await
    .unwrap();
    let mut response = get_on(tls, Proto::H1, server.addr, "/whoami").await;
    expect_text(response.body_mut(), "none").await;
    server.stop().await;

    // Bad input: clear errors, no panics.
    let error = |result: Result<Serve, super::https::ServeError>| match result {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let serve = || Serve::new(Api::new("t").router());
    assert_eq!(
        error(serve().tls_pem("", &alice_key, None)),
        "cannot parse the serving certificate"
    );
    assert_eq!(
        error(serve().tls_pem(&serving_pem, "not a key", None)),
        "cannot parse the serving private key"
    );
    assert_eq!(
        error(serve().tls_pem(&serving_pem, &alice_key, None)),
        "cannot build the TLS configuration"
    );
    assert_eq!(
        error(serve().tls_pem(&serving_pem, &serving_key.serialize_pem(), Some(""))),
        "cannot verify client certificates with the CA"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_of_the_client_ca_authenticates_its_user() {
    let EnvtestPki {
        serving_ca,
        client_ca,
        serving_pem,
        serving_key,
        alice_pem,
        alice_key,
    } = envtest_pki(&["localhost"]);
    let api = crate::ApiServer::builder(Arc::new(konverge_store::MemStore::new()))
        .control_loops(false)
        .bearer_token("admin-token")
        .authorization(crate::AuthorizationMode::Rbac)
        .build()
        .await
        .unwrap();
    let server = running(
        Serve::new(api.router())
            .tls_pem(
                &serving_pem,
                &serving_key.serialize_pem(),
                Some(&client_ca.pem()),
            )
            .unwrap()
            .listen(loopback_listener().await)
            .unwrap(),
    )
    .await;
    // RBAC refuses alice by name (she has no role): the certificate made her alice.
    let tls = tls_connect_as(
        server.addr,
        &serving_ca.pem(),
        Proto::H1,
        Some((&alice_pem, &alice_key.serialize_pem())),
    )
    .await
    .unwrap();
    let response = get_on(
        tls,
        Proto::H1,
        server.addr,
        "/api/v1/namespaces/default/pods",
    )
    .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        status["message"],
        "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    // Without a certificate (nor a token): anonymous.
    let tls = tls_connect(server.addr, &serving_ca.pem(), Proto::H1).await;
    let response = get_on(
        tls,
        Proto::H1,
        server.addr,
        "/api/v1/namespaces/default/pods",
    )
    .await;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("User \"system:anonymous\""),
        "{status}"
    );
    server.stop().await;
}
