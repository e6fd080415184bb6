//! Everything `konverge up` needs to serve a Kubernetes API over HTTPS, independent of the API
//! itself.
//!
//! - [`credentials`]: a self-signed CA, a serving certificate for `localhost`/`127.0.0.1`/`::1`
//!   signed by it, and a bearer token, generated on first start and reused afterwards.
//! - [`kubeconfig`]: `DATA_DIR/kubeconfig` pointing kubectl, client-go, kube-rs and the Python
//!   client at the server, trusting the CA and carrying the token.
//! - [`https`]: HTTP/1.1 + HTTP/2 serving of an [`axum::Router`] over TLS (or plain TCP for
//!   tests), one task per connection, no request timeouts (watches stay open), and graceful
//!   shutdown with a bounded grace period.
//!
//! Typical use (what `konverge up` does):
//!
//! ```ignore
//! let credentials = Credentials::load_or_create(&data_dir)?;
//! let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
//! let addr = listener.local_addr()?;
//! let kubeconfig = write_kubeconfig(&data_dir, &credentials, &server_url(addr))?;
//! println!("ready: export KUBECONFIG={}", kubeconfig.display());
//! serve_https(listener, router, &credentials, shutdown_signal()).await?;
//! ```
//!
//! Authentication is not done here: the API server (the router) checks the
//! `Authorization: Bearer <token>` header against [`Credentials::token`] itself.

pub(crate) mod credentials;
mod fsutil;
pub(crate) mod https;
pub(crate) mod kubeconfig;

#[cfg(test)]
mod tests;

pub(crate) use credentials::Credentials;
pub(crate) use https::serve_https;
pub(crate) use kubeconfig::{server_url, write_kubeconfig};
