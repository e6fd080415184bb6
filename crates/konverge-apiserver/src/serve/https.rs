//! Serving an [`axum::Router`] over HTTPS (or plain HTTP): HTTP/1.1 and HTTP/2
//! (ALPN `h2`, `http/1.1`), one task per connection, no request or idle timeouts (watches are
//! long-lived streams), graceful shutdown bounded by a grace period.
//!
//! Over TLS with a client CA (`--client-ca-file`; the CA of the credentials), the server asks
//! for a client certificate without requiring one, as kube-apiserver does: a client that
//! sends one must send one that CA signed for client authentication (or the handshake fails);
//! a client that sends none goes on to bearer tokens or anonymity. Without a client CA it asks
//! for none.
//!
//! Each request carries the peer address as an [`axum::extract::ConnectInfo<SocketAddr>`]
//! extension and, when the connection presented a client certificate, what it says as a
//! [`ClientCertificate`] extension. HTTP/1.1 upgrades (`Connection: Upgrade`) are supported.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::credentials::Credentials;
use super::kubeconfig::server_url;
use crate::auth::authn::ClientCertificate;

/// Default time connections get to finish after shutdown begins before they are dropped.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Default limit for a client to complete the TLS handshake.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent HTTP/2 streams per connection (client-go multiplexes all watches of a process
/// over one connection; kube-apiserver allows 1000 too).
const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 1000;
/// Pause after an accept error that is not about a single connection (e.g. EMFILE).
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Tuning for [`Serve`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// After shutdown begins, how long open connections may keep running (finishing in-flight
    /// requests and streams) before they are dropped.
    pub shutdown_grace: Duration,
    /// How long a client may take to complete the TLS handshake before it is disconnected.
    pub tls_handshake_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            tls_handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
        }
    }
}

/// Why serving could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound (or the listener's address read).
    #[error("cannot listen")]
    Bind(#[source] io::Error),
    /// The serving certificate or key in the credentials could not be parsed.
    #[error("cannot parse the serving {what}")]
    Pem {
        /// `"certificate"`, `"private key"` or `"CA certificate"`.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls rejected the certificate or key.
    #[error("cannot build the TLS configuration")]
    Tls(#[source] rustls::Error),
    /// The CA in the credentials cannot verify client certificates.
    #[error("cannot verify client certificates with the CA")]
    ClientCa(#[source] rustls::server::VerifierBuilderError),
}

/// The rustls server configuration: the serving chain and key (PEM), TLS 1.2 and 1.3 with the
/// ring provider, ALPN `h2` then `http/1.1`, and, with a client CA (PEM), client certificates
/// asked for (not required) and verified against it.
fn tls_server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: Option<&str>,
) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ServeError::Pem {
            what: "certificate",
            source,
        })?;
    if chain.is_empty() {
        return Err(ServeError::Pem {
            what: "certificate",
            source: rustls::pki_types::pem::Error::NoItemsFound,
        });
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|source| ServeError::Pem {
            what: "private key",
            source,
        })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(ServeError::Tls)?;
    let builder = match client_ca_pem {
        Some(ca_pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
                let ca = ca.map_err(|source| ServeError::Pem {
                    what: "CA certificate",
                    source,
                })?;
                roots.add(ca).map_err(ServeError::Tls)?;
            }
            let clients = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(ServeError::ClientCa)?;
            builder.with_client_cert_verifier(clients)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(ServeError::Tls)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serving a router on a TCP listener: over HTTPS with [`tls`](Self::tls), plain HTTP
/// otherwise. [`bind`](Self::bind) or [`listen`](Self::listen) starts it and returns the
/// [`Serving`] handle.
///
/// ```no_run
/// # async fn run(
/// #     server: std::sync::Arc<konverge_apiserver::ApiServer>,
/// #     credentials: konverge_apiserver::serve::Credentials,
/// #     shutdown: impl std::future::Future<Output = ()>,
/// # ) -> Result<(), Box<dyn std::error::Error>> {
/// use konverge_apiserver::serve::Serve;
///
/// let serving = Serve::new(server.router())
///     .tls(&credentials)?
///     .bind(("127.0.0.1", 6443))
///     .await?;
/// println!("serving at {}", serving.url());
/// serving.until(shutdown).await;
/// # Ok(()) }
/// ```
pub struct Serve {
    service: Router,
    tls: Option<TlsAcceptor>,
    options: ServeOptions,
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("tls", &self.tls.is_some())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Serve {
    /// Serves `service` (typically [`ApiServer::router`](crate::ApiServer::router)).
    pub fn new(service: Router) -> Self {
        Serve {
            service,
            tls: None,
            options: ServeOptions::default(),
        }
    }

    /// Serves over TLS with the serving certificate of `credentials` (HTTP/2 and HTTP/1.1 by
    /// ALPN), verifying client certificates against their CA.
    pub fn tls(self, credentials: &Credentials) -> Result<Self, ServeError> {
        self.tls_pem(
            &credentials.cert_pem,
            &credentials.key_pem,
            Some(&credentials.ca_pem),
        )
    }

    /// Serves over TLS with the certificate chain `cert_pem` (leaf first) and its private key
    /// `key_pem` (PKCS#8 `PRIVATE KEY`, SEC1 `EC PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY`), as
    /// kube-apiserver's `--tls-cert-file` and `--tls-private-key-file`. With `client_ca_pem`
    /// (`--client-ca-file`), clients are asked for a certificate (not required), which must
    /// chain to one of its CAs and then authenticates the request; without, none is asked for.
    pub fn tls_pem(
        mut self,
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: Option<&str>,
    ) -> Result<Self, ServeError> {
        self.tls = Some(TlsAcceptor::from(tls_server_config(
            cert_pem,
            key_pem,
            client_ca_pem,
        )?));
        Ok(self)
    }

    /// Grace period and TLS handshake timeout (default: [`ServeOptions::default`]).
    pub fn options(mut self, options: ServeOptions) -> Self {
        self.options = options;
        self
    }

    /// Binds `addr` and starts serving on it.
    pub async fn bind(self, addr: impl tokio::net::ToSocketAddrs) -> Result<Serving, ServeError> {
        let listener = TcpListener::bind(addr).await.map_err(ServeError::Bind)?;
        self.listen(listener)
    }

    /// Starts serving on a listener bound already. Connections that arrived before wait in
    /// its backlog and are served.
    pub fn listen(self, listener: TcpListener) -> Result<Serving, ServeError> {
        let addr = listener.local_addr().map_err(ServeError::Bind)?;
        let tls = self.tls.is_some();
        let (stop, stopping) = watch::channel(false);
        let (accepting, ready) = watch::channel(false);
        let task = tokio::spawn(serve(
            listener,
            self.service,
            self.tls,
            stopping,
            accepting,
            self.options,
        ));
        Ok(Serving {
            addr,
            tls,
            stop,
            ready,
            task: Some(task),
        })
    }
}

/// A running server: its address, whether it accepts connections yet, and how to stop it.
///
/// [`shutdown`](Self::shutdown) stops gracefully: no new connections, open ones get the grace
/// period to finish. Dropping the handle instead stops at once, cutting every connection
/// (what a test that simulates a crash wants).
#[derive(Debug)]
pub struct Serving {
    addr: SocketAddr,
    tls: bool,
    stop: watch::Sender<bool>,
    ready: watch::Receiver<bool>,
    task: Option<JoinHandle<()>>,
}

impl Serving {
    /// The address the listener is bound to (the port picked when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL clients use: `https://` and a name the serving certificate covers (see
    /// [`server_url`]) over TLS, `http://ADDR` otherwise.
    pub fn url(&self) -> String {
        if self.tls {
            server_url(self.addr)
        } else {
            format!("http://{}", self.addr)
        }
    }

    /// Waits until the server accepts connections (a connection made earlier waits in the
    /// listen backlog until then). Returns at once if it already does, or if it has stopped.
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|accepting| *accepting).await;
    }

    /// Serves until `signal` completes, then shuts down gracefully.
    pub async fn until(self, signal: impl Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }

    /// Shuts down gracefully: stops accepting, lets open connections finish for up to the
    /// grace period, then drops what is left. Returns once every connection is closed.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
            && e.is_panic()
        {
            tracing::error!(error = %e, "the accept loop panicked");
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        // The accept loop owns the connection tasks (a `JoinSet`): aborting it cuts them all.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The accept loop shared by HTTPS and HTTP.
async fn serve(
    listener: TcpListener,
    service: Router,
    acceptor: Option<TlsAcceptor>,
    mut stopping: watch::Receiver<bool>,
    accepting: watch::Sender<bool>,
    options: ServeOptions,
) {
    let builder = Arc::new(connection_builder());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let shutdown = async move {
        // An error means the handle is gone (its drop aborts this task anyway).
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    let mut shutdown = pin!(shutdown);
    if let Ok(addr) = listener.local_addr() {
        tracing::debug!(%addr, tls = acceptor.is_some(), "serving");
    }
    accepting.send_replace(true);

    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = joined
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "connection task panicked");
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(handle_connection(
                        stream,
                        remote,
                        acceptor.clone(),
                        service.clone(),
                        builder.clone(),
                        stop_rx.clone(),
                        options.tls_handshake_timeout,
                    ));
                }
                Err(e) if is_connection_error(&e) => {
                    tracing::debug!(error = %e, "accept failed for one connection");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; retrying");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(ACCEPT_ERROR_BACKOFF) => {}
                    }
                }
            },
        }
    }

    // Stop accepting: new connections are refused from here on.
    drop(listener);
    let open = connections.len();
    tracing::debug!(open, "shutting down: draining connections");
    stop_tx.send_replace(true);
    let drained = tokio::time::timeout(options.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::debug!(
            open = connections.len(),
            grace = ?options.shutdown_grace,
            "grace period over: dropping open connections"
        );
        connections.shutdown().await;
    }
}

/// HTTP/1.1 + HTTP/2 connection settings. No timer is installed, so there is no HTTP/1
/// header-read timeout and no HTTP/2 keep-alive: idle keep-alive connections and quiet watch
/// streams stay open for as long as the client wants.
fn connection_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(HTTP2_MAX_CONCURRENT_STREAMS);
    builder
}

/// Accept errors that concern one connection only (the listener itself is fine).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

async fn handle_connection(
    stream: TcpStream,
    remote: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    service: Router,
    builder: Arc<auto::Builder<TokioExecutor>>,
    stop: watch::Receiver<bool>,
    handshake_timeout: Duration,
) {
    let Some(acceptor) = acceptor else {
        serve_connection(stream, remote, None, service, &builder, stop).await;
        return;
    };
    match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            // The verifier accepted the chain; its first certificate is the client's.
            let certificate = match tls.get_ref().1.peer_certificates() {
                Some([leaf, ..]) => match ClientCertificate::from_der(leaf) {
                    Ok(certificate) => Some(certificate),
                    Err(e) => {
                        tracing::debug!(%remote, error = %e, "unreadable client certificate");
                        return;
                    }
                },
                _ => None,
            };
            serve_connection(tls, remote, certificate, service, &builder, stop).await;
        }
        Ok(Err(e)) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
    }
}

/// Serves HTTP on one established connection until the client closes it or, after shutdown
/// begins, until its in-flight requests finish (the task is aborted when the grace period ends).
/// Every request carries the peer's address and client certificate.
async fn serve_connection<I>(
    io: I,
    remote: SocketAddr,
    certificate: Option<ClientCertificate>,
    service: Router,
    builder: &auto::Builder<TokioExecutor>,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(remote));
        if let Some(certificate) = &certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        service.clone().oneshot(request)
    });
    let mut connection = pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), service));
    let stopping = async move {
        // An error means the server is gone; treat that as shutdown too.
        let _ = stop.wait_for(|stop| *stop).await;
    };
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stopping => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%remote, error = %e, "connection ended with an error");
    }
}
