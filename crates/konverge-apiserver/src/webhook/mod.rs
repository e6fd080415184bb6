//! Calling webhooks — admission webhooks and CRD conversion webhooks — as kube-apiserver calls
//! them: a JSON POST over HTTPS to a `url` or to a Service, the server certificate verified
//! with the configuration's `caBundle`, within a timeout.
//!
//! konverge runs no pods, so a Service reference is resolved, in order, to: a handler the
//! embedding program registered in-process ([`Webhooks::register`], the testkit's in-process
//! webhooks; no TLS), an address given at start-up ([`Webhooks::map_service`], `konverge up
//! --webhook-service`), or the ready addresses of the Service's EndpointSlices (a Service
//! without a selector and an EndpointSlice pointing at a process outside the cluster, which a
//! real cluster routes the same way).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::lister::Lister;

pub(crate) mod client_config;
mod tls;

pub use client_config::{ClientConfig, ServiceReference};

/// A request to a webhook handled in-process.
#[derive(Debug, Clone)]
pub struct Request {
    /// The path (and query) posted to.
    pub path: String,
    /// The JSON body.
    pub body: Bytes,
}

/// A webhook's answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

/// An in-process webhook.
pub type Handler = Arc<dyn Fn(Request) -> BoxFuture<'static, Response> + Send + Sync>;

/// Why a webhook could not be called, worded as Go's HTTP client words it (the text after
/// `Post "<url>": `).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No answer within the timeout.
    #[error("context deadline exceeded")]
    Timeout,
    /// The TCP connection failed.
    #[error("dial tcp {addr}: connect: {reason}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// Why (`connection refused`).
        reason: String,
    },
    /// The TLS handshake failed (an unverifiable certificate, mostly).
    #[error("tls: failed to verify certificate: x509: {0}")]
    Certificate(String),
    /// Another TLS failure.
    #[error("remote error: tls: {0}")]
    Tls(String),
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(String),
    /// The Service could not be resolved to an address.
    #[error("{0}")]
    Resolve(String),
    /// The configuration is unusable (no URL or Service, a `caBundle` that is not PEM).
    #[error("{0}")]
    Config(String),
}

/// A Service's port: namespace, name, port.
type ServicePort = (String, String, i32);

/// How the server reaches webhooks: in-process handlers and Service addresses.
#[derive(Clone, Default)]
pub struct Webhooks {
    handlers: Arc<RwLock<HashMap<(String, String), Handler>>>,
    services: Arc<RwLock<HashMap<ServicePort, SocketAddr>>>,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks").finish_non_exhaustive()
    }
}

impl Webhooks {
    /// Routes calls to the Service `namespace/name` (any port, any path) to `handler`, in
    /// process, without TLS.
    pub fn register(&self, namespace: &str, name: &str, handler: Handler) {
        self.handlers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((namespace.to_string(), name.to_string()), handler);
    }

    /// Sends calls to port `port` of the Service `namespace/name` to `addr`.
    pub fn map_service(&self, namespace: &str, name: &str, port: i32, addr: SocketAddr) {
        self.services
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((namespace.to_string(), name.to_string(), port), addr);
    }

    /// Posts `body` to the webhook `config` names, with `query` appended to its URL; answers
    /// whatever HTTP response comes back within `timeout`.
    pub async fn call(
        &self,
        config: &ClientConfig,
        query: Option<&str>,
        body: Bytes,
        timeout: Duration,
        registry: &dyn Lister,
    ) -> Result<Response, CallError> {
        self.call_typed(config, query, body, timeout, registry)
            .await
            .map(|(response, _)| response)
    }

    /// [`Webhooks::call`], with the answer's `Content-Type` when it has one (in-process
    /// handlers have none): Kubernetes' client quotes a `text/*` error body back.
    pub(crate) async fn call_typed(
        &self,
        config: &ClientConfig,
        query: Option<&str>,
        body: Bytes,
        timeout: Duration,
        registry: &dyn Lister,
    ) -> Result<(Response, Option<String>), CallError> {
        match tokio::time::timeout(timeout, self.call_now(config, query, body, registry)).await {
            Ok(answer) => answer,
            Err(_) => Err(CallError::Timeout),
        }
    }

    async fn call_now(
        &self,
        config: &ClientConfig,
        query: Option<&str>,
        body: Bytes,
        registry: &dyn Lister,
    ) -> Result<(Response, Option<String>), CallError> {
        let (addr, server_name, path) = match (&config.url, &config.service) {
            (Some(url), _) => {
                let (host, port, path) = split_url(url)?;
                let addr = tokio::net::lookup_host((host.as_str(), port))
                    .await
                    .ok()
                    .and_then(|mut addrs| addrs.next())
                    .ok_or_else(|| {
                        CallError::Resolve(format!("dial tcp: lookup {host}: no such host"))
                    })?;
                (addr, host, path)
            }
            (None, Some(service)) => {
                let path = service.path.clone().unwrap_or_else(|| "/".into());
                let handler = self
                    .handlers
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&(service.namespace.clone(), service.name.clone()))
                    .cloned();
                if let Some(handler) = handler {
                    let path = with_query(path, query);
                    return Ok((handler(Request { path, body }).await, None));
                }
                let addr = self.resolve(service, registry).await?;
                let host = format!("{}.{}.svc", service.name, service.namespace);
                (addr, host, path)
            }
            (None, None) => {
                return Err(CallError::Config(
                    "the webhook has neither a url nor a service".into(),
                ));
            }
        };
        let tls = tls_config(config.ca_bundle.as_deref())?;
        let path = with_query(path, query);
        post(addr, &server_name, &path, body, tls).await
    }

    /// The address of a Service's port: mapped at start-up, or from its EndpointSlices.
    pub(crate) async fn resolve(
        &self,
        service: &ServiceReference,
        registry: &dyn Lister,
    ) -> Result<SocketAddr, CallError> {
        let mapped = self
            .services
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(
                service.namespace.clone(),
                service.name.clone(),
                service.port,
            ))
            .copied();
        if let Some(addr) = mapped {
            return Ok(addr);
        }
        let catalog = registry.catalog();
        let not_found = || CallError::Resolve(format!("service \"{}\" not found", service.name));
        let services = catalog.get("", "v1", "services").ok_or_else(not_found)?;
        let svc = registry
            .get(&services, Some(&service.namespace), &service.name)
            .await
            .map_err(|_| not_found())?;
        let port_name = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .and_then(|ports| {
                ports
                    .iter()
                    .find(|p| p["port"].as_i64() == Some(i64::from(service.port)))
            })
            .map(|p| p["name"].as_str().unwrap_or("").to_string())
            .ok_or_else(|| {
                CallError::Resolve(format!(
                    "no service port {} found for service \"{}\"",
                    service.port, service.name
                ))
            })?;
        let no_endpoints = || {
            CallError::Resolve(format!(
                "no endpoints available for service \"{}\"",
                service.name
            ))
        };
        let slices_rt = catalog
            .get("discovery.k8s.io", "v1", "endpointslices")
            .ok_or_else(no_endpoints)?;
        let selector = konverge_apimachinery::selector::LabelSelector::from_set(
            &[(
                "kubernetes.io/service-name".to_string(),
                service.name.clone(),
            )]
            .into(),
        );
        let slices = registry
            .list(&slices_rt, Some(&service.namespace), Some(&selector))
            .await
            .map_err(|_| no_endpoints())?;
        for slice in &slices {
            let Some(port) = slice
                .pointer("/ports")
                .and_then(Value::as_array)
                .and_then(|ports| {
                    ports
                        .iter()
                        .find(|p| p["name"].as_str().unwrap_or("") == port_name)
                })
                .and_then(|p| p["port"].as_u64())
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            let ready = slice
                .pointer("/endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|e| e.pointer("/conditions/ready") != Some(&Value::Bool(false)));
            for endpoint in ready {
                let address = endpoint
                    .pointer("/addresses/0")
                    .and_then(Value::as_str)
                    .and_then(|a| a.parse::<std::net::IpAddr>().ok());
                if let Some(ip) = address {
                    return Ok(SocketAddr::new(ip, port));
                }
            }
        }
        Err(no_endpoints())
    }
}

fn with_query(path: String, query: Option<&str>) -> String {
    match query {
        Some(q) if path.contains('?') => format!("{path}&{q}"),
        Some(q) => format!("{path}?{q}"),
        None => path,
    }
}

/// `https://host[:port][/path]` → host, port (default 443), path and query (default `/`).
fn split_url(url: &str) -> Result<(String, u16, String), CallError> {
    let unsupported = || CallError::Config(format!("unsupported protocol scheme in {url:?}"));
    let uri: http::Uri = url
        .parse()
        .map_err(|e| CallError::Config(format!("parse {url:?}: {e}")))?;
    if uri.scheme_str() != Some("https") {
        return Err(unsupported());
    }
    let host = uri
        .host()
        .ok_or_else(|| CallError::Config(format!("no host in {url:?}")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let path = uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok((host.to_string(), uri.port_u16().unwrap_or(443), path))
}

fn tls_config(ca_bundle: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, CallError> {
    client_tls(ca_bundle, false, None)
}

/// A client certificate and its key, presented to the server called.
#[derive(Clone, Debug)]
pub(crate) struct ClientIdentity {
    pub(crate) chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub(crate) key: Arc<rustls::pki_types::PrivateKeyDer<'static>>,
}

/// How a client of the server's own (webhooks, aggregated API servers) verifies what it
/// calls: by `ca_bundle` as Go verifies (the system's roots without one), or not at all when
/// `insecure`; presenting `identity` when given.
pub(crate) fn client_tls(
    ca_bundle: Option<&[u8]>,
    insecure: bool,
    identity: Option<&ClientIdentity>,
) -> Result<Arc<rustls::ClientConfig>, CallError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError::Tls(e.to_string()))?;
    let verified = match ca_bundle.filter(|b| !b.is_empty()) {
        _ if insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(tls::Unverified::new(provider))),
        // The bundle's certificates, verified as Go verifies them.
        Some(pem) => {
            let mut reader = pem;
            let roots = rustls_pemfile_certs(&mut reader)?;
            let verifier = tls::GoVerifier::new(roots, provider)
                .map_err(|e| CallError::Config(format!("caBundle: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
        }
        None => {
            let mut roots = rustls::RootCertStore::empty();
            let native = rustls_native_certs::load_native_certs();
            for cert in native.certs {
                let _ = roots.add(cert);
            }
            builder.with_root_certificates(roots)
        }
    };
    let config = match identity {
        Some(identity) => verified
            .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())
            .map_err(|e| CallError::Config(format!("client certificate: {e}")))?,
        None => verified.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// What Go's dialer says of a failed connect (the `syscall.Errno` text).
fn go_dial_error(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::ConnectionRefused => "connection refused".into(),
        ErrorKind::ConnectionReset => "connection reset by peer".into(),
        ErrorKind::TimedOut => "connection timed out".into(),
        ErrorKind::HostUnreachable => "no route to host".into(),
        ErrorKind::NetworkUnreachable => "network is unreachable".into(),
        _ => error.to_string(),
    }
}

/// An HTTP/1.1 connection over TLS to `addr`, whose certificate must name `server_name`.
pub(crate) async fn connect<B>(
    addr: SocketAddr,
    server_name: &str,
    tls: Arc<rustls::ClientConfig>,
) -> Result<hyper::client::conn::http1::SendRequest<B>, CallError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| CallError::Connect {
            addr,
            reason: go_dial_error(&e),
        })?;
    let _ = tcp.set_nodelay(true);
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|e| CallError::Config(format!("server name {server_name:?}: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| tls_error(&e, server_name))?;
    let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| CallError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(send)
}

/// The certificates of a PEM bundle.
fn rustls_pemfile_certs(
    reader: &mut &[u8],
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, CallError> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(reader)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CallError::Config(format!("caBundle: {e}")))
}

async fn post(
    addr: SocketAddr,
    server_name: &str,
    path: &str,
    body: Bytes,
    tls: Arc<rustls::ClientConfig>,
) -> Result<(Response, Option<String>), CallError> {
    let mut send = connect(addr, server_name, tls).await?;
    let request = http::Request::post(path)
        .header(http::header::HOST, server_name)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*")
        .body(Full::new(body))
        .map_err(|e| CallError::Http(e.to_string()))?;
    let (status, content_type, body) = exchange(&mut send, request).await?;
    Ok((Response { status, body }, content_type))
}

/// Sends `request` and reads the whole answer: its status, `Content-Type` and body.
pub(crate) async fn exchange<B>(
    send: &mut hyper::client::conn::http1::SendRequest<B>,
    request: http::Request<B>,
) -> Result<(u16, Option<String>, Bytes), CallError>
where
    B: hyper::body::Body + Send + 'static,
{
    let answer = send
        .send_request(request)
        .await
        .map_err(|e| CallError::Http(e.to_string()))?;
    let status = answer.status().as_u16();
    let content_type = answer
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let body = answer
        .into_body()
        .collect()
        .await
        .map_err(|e| CallError::Http(e.to_string()))?
        .to_bytes();
    Ok((status, content_type, body))
}

fn tls_error(error: &std::io::Error, server_name: &str) -> CallError {
    let Some(tls) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return CallError::Tls(error.to_string());
    };
    match tls {
        // A CA of the same name that did not sign the certificate is, to Go, an unknown
        // authority too.
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature,
        ) => CallError::Certificate("certificate signed by unknown authority".into()),
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. },
        ) => CallError::Certificate(format!("certificate is not valid for {server_name}")),
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::Expired
            | rustls::CertificateError::ExpiredContext { .. }
            | rustls::CertificateError::NotValidYet
            | rustls::CertificateError::NotValidYetContext { .. },
        ) => CallError::Certificate("certificate has expired or is not yet valid".into()),
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::InvalidPurpose
            | rustls::CertificateError::InvalidPurposeContext { .. },
        ) => CallError::Certificate("certificate specifies an incompatible key usage".into()),
        rustls::Error::InvalidCertificate(other) => CallError::Certificate(format!("{other:?}")),
        other => CallError::Tls(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_the_urls_kube_apiserver_posts_to() {
        let service = ClientConfig {
            url: None,
            service: Some(ServiceReference {
                namespace: "ns".into(),
                name: "hook".into(),
                path: Some("/validate".into()),
                port: 8443,
            }),
            ca_bundle: None,
        };
        assert_eq!(
            service.target(Some("timeout=10s")),
            "https://hook.ns.svc:8443/validate?timeout=10s"
        );
        let url = ClientConfig {
            url: Some("https://127.0.0.1:9443/x?a=b".into()),
            service: None,
            ca_bundle: None,
        };
        assert_eq!(
            url.target(Some("timeout=5s")),
            "https://127.0.0.1:9443/x?a=b&timeout=5s"
        );
    }

    #[test]
    fn urls_split_into_host_port_and_path() {
        let split = |u: &str| split_url(u).expect("splits");
        assert_eq!(
            split("https://example.com/a/b"),
            ("example.com".into(), 443, "/a/b".into())
        );
        assert_eq!(
            split("https://127.0.0.1:9443"),
            ("127.0.0.1".into(), 9443, "/".into())
        );
        assert_eq!(
            split("https://[::1]:9443/v"),
            ("::1".into(), 9443, "/v".into())
        );
        assert!(split_url("http://example.com").is_err());
    }
}
