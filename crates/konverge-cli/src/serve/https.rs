//! Serving an [`axum::Router`] over HTTPS (or plain HTTP, for tests): HTTP/1.1 and HTTP/2
//! (ALPN `h2`, `http/1.1`), one task per connection, no request or idle timeouts (watches are
//! long-lived streams), graceful shutdown bounded by a grace period.
//!
//! Each request carries the peer address as an [`axum::extract::ConnectInfo<SocketAddr>`]
//! extension. HTTP/1.1 upgrades (`Connection: Upgrade`) are supported.

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
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::credentials::Credentials;

/// Default time connections get to finish after shutdown begins before they are dropped.
pub(crate) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Default limit for a client to complete the TLS handshake.
pub(crate) const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent HTTP/2 streams per connection (client-go multiplexes all watches of a process
/// over one connection; kube-apiserver allows 1000 too).
const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 1000;
/// Pause after an accept error that is not about a single connection (e.g. EMFILE).
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Tuning for [`serve_https_with`] and [`serve_http_with`].
#[derive(Debug, Clone)]
pub(crate) struct ServeOptions {
    /// After shutdown begins, how long open connections may keep running (finishing in-flight
    /// requests and streams) before they are dropped.
    pub(crate) shutdown_grace: Duration,
    /// How long a client may take to complete the TLS handshake before it is disconnected.
    pub(crate) tls_handshake_timeout: Duration,
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
pub(crate) enum ServeError {
    /// The serving certificate or key in the credentials could not be parsed.
    #[error("cannot parse the serving {what}")]
    Pem {
        /// `"certificate"` or `"private key"`.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls rejected the certificate or key.
    #[error("cannot build the TLS configuration")]
    Tls(#[source] rustls::Error),
}

/// The rustls server configuration for `credentials`: the serving certificate, TLS 1.2 and
/// 1.3 with the ring provider, ALPN `h2` then `http/1.1`, no client certificates.
pub(crate) fn tls_server_config(
    credentials: &Credentials,
) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    let chain = CertificateDer::pem_slice_iter(credentials.cert_pem.as_bytes())
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
    let key = PrivateKeyDer::from_pem_slice(credentials.key_pem.as_bytes()).map_err(|source| {
        ServeError::Pem {
            what: "private key",
            source,
        }
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ServeError::Tls)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(ServeError::Tls)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `service` over HTTPS on `listener` with the serving certificate of `credentials`
/// until `shutdown` completes, then shuts down gracefully with [`ServeOptions::default`]
/// (stops accepting, lets connections finish for up to [`DEFAULT_SHUTDOWN_GRACE`], then drops
/// them).
///
/// Returns `Ok(())` once shut down. Failed handshakes and connection errors are logged at
/// debug level and never end serving.
pub(crate) async fn serve_https(
    listener: TcpListener,
    service: Router,
    credentials: &Credentials,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    serve_https_with(
        listener,
        service,
        credentials,
        shutdown,
        ServeOptions::default(),
    )
    .await
}

/// [`serve_https`] with explicit [`ServeOptions`].
pub(crate) async fn serve_https_with(
    listener: TcpListener,
    service: Router,
    credentials: &Credentials,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> Result<(), ServeError> {
    let acceptor = TlsAcceptor::from(tls_server_config(credentials)?);
    serve(listener, service, Some(acceptor), shutdown, options).await;
    Ok(())
}

/// Serves `service` over plain HTTP (HTTP/1.1, and HTTP/2 with prior knowledge) on `listener`
/// until `shutdown` completes; otherwise the same as [`serve_https_with`]. Meant for tests.
#[cfg(test)]
pub(crate) async fn serve_http_with(
    listener: TcpListener,
    service: Router,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> Result<(), ServeError> {
    serve(listener, service, None, shutdown, options).await;
    Ok(())
}

/// The accept loop shared by HTTPS and HTTP.
async fn serve(
    listener: TcpListener,
    service: Router,
    acceptor: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) {
    let builder = Arc::new(connection_builder());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    if let Ok(addr) = listener.local_addr() {
        tracing::debug!(%addr, tls = acceptor.is_some(), "serving");
    }

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
        serve_connection(stream, remote, service, &builder, stop).await;
        return;
    };
    match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => serve_connection(tls, remote, service, &builder, stop).await,
        Ok(Err(e)) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
    }
}

/// Serves HTTP on one established connection until the client closes it or, after shutdown
/// begins, until its in-flight requests finish (the task is aborted when the grace period ends).
async fn serve_connection<I>(
    io: I,
    remote: SocketAddr,
    service: Router,
    builder: &auto::Builder<TokioExecutor>,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(remote));
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
