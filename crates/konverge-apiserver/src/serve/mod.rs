//! Serving the API over the network, apart from the API itself: what `konverge up` and the
//! testkit both use.
//!
//! - [`Serve`]: serves an [`axum::Router`] (the [`ApiServer::router`](crate::ApiServer::router))
//!   over HTTPS or plain HTTP — HTTP/1.1 and HTTP/2, one task per connection, no request
//!   timeouts (watches stay open) — and returns a [`Serving`] handle: the bound address, when
//!   it accepts connections, and graceful shutdown bounded by a grace period.
//! - [`Credentials`]: a self-signed CA, a serving certificate for `localhost`/`127.0.0.1`/`::1`
//!   signed by it, a bearer token and the ServiceAccount token signing key, generated on first
//!   start in a data directory and reused afterwards; [`issue_client_certificate`] signs client
//!   certificates with the CA.
//! - [`kubeconfig()`]: the `kube::config::Kubeconfig` that points kubectl, client-go, kube-rs and
//!   the Python client at the server; [`write_kubeconfig`] writes it as `DATA_DIR/kubeconfig`;
//!   [`for_user`] makes one for another user of the same cluster.
//! - [`in_process`]: a `kube::Client` that calls the router in-process, as a given identity
//!   ([`ApiServer::client`](crate::ApiServer::client)): what the control loops `konverge up`
//!   runs beside the server use.
//!
//! What `konverge up` does:
//!
//! ```no_run
//! # async fn up(
//! #     data_dir: &std::path::Path,
//! #     store: std::sync::Arc<dyn konverge_store::KvStore>,
//! #     shutdown: impl std::future::Future<Output = ()>,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use konverge_apiserver::ApiServer;
//! use konverge_apiserver::serve::{Credentials, Serve, write_kubeconfig};
//!
//! let credentials = Credentials::load_or_create(data_dir)?;
//! let server = ApiServer::builder(store)
//!     .bearer_token(credentials.token.clone())
//!     .service_account_key(credentials.service_account_key.clone())
//!     .build()
//!     .await?;
//! let serving = Serve::new(server.router())
//!     .tls(&credentials)?
//!     .bind(("127.0.0.1", 6443))
//!     .await?;
//! let kubeconfig = write_kubeconfig(data_dir, &credentials, &serving.url())?;
//! println!("export KUBECONFIG={}", kubeconfig.display());
//! serving.until(shutdown).await; // Ctrl-C, say
//! # Ok(()) }
//! ```
//!
//! Authentication is not done here: [`Serve`] only hands each request the client certificate
//! the TLS handshake verified against the CA (what it says, as an
//! [`auth::authn::ClientCertificate`](crate::auth::authn::ClientCertificate) extension); the
//! API server (the router) decides who that is, or who a bearer token such as
//! [`Credentials::token`] is.

pub mod credentials;
mod fsutil;
pub mod https;
pub mod in_process;
pub mod kubeconfig;

#[cfg(test)]
mod tests;

pub use credentials::{Credentials, CredentialsError, issue_client_certificate};
pub use https::{Serve, ServeError, ServeOptions, Serving};
pub use kubeconfig::{
    KubeconfigError, client_certificate_auth, for_user, kubeconfig, server_url, token_auth,
    write_kubeconfig,
};
