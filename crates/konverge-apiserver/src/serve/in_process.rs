//! A `kube::Client` that calls the server's router in-process: no socket, no TLS, no
//! serialization beyond the HTTP bodies themselves. What `konverge up` gives the control
//! loops it runs beside the server (kube-controller-manager's controllers), as a
//! kube-controller-manager on the same machine would reach kube-apiserver over loopback.

use std::sync::Arc;

use http::HeaderValue;
use tower::ServiceExt;

use crate::ApiServer;

/// Who an in-process client is.
#[derive(Clone, Debug)]
pub enum Identity {
    /// The holder of a bearer token (the admin's, or a ServiceAccount's from a
    /// TokenRequest).
    Token(String),
    /// The holder of `token` acting as `user` (impersonation: `token`'s holder must be
    /// allowed to impersonate, as the admin is).
    Impersonating {
        /// The bearer token that authenticates the request.
        token: String,
        /// The user it acts as.
        user: String,
    },
}

impl ApiServer {
    /// A client of this server that calls its router in-process, as `identity`.
    pub fn client(self: &Arc<Self>, identity: Identity) -> kube::Client {
        let (token, user) = match identity {
            Identity::Token(token) => (token, None),
            Identity::Impersonating { token, user } => (token, Some(user)),
        };
        let bearer = HeaderValue::from_str(&format!("Bearer {token}")).ok();
        let user = user.and_then(|u| HeaderValue::from_str(&u).ok());
        let router = self.router();
        let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
            let router = router.clone();
            let headers = request.headers_mut();
            if let Some(bearer) = &bearer {
                headers.insert(http::header::AUTHORIZATION, bearer.clone());
            }
            if let Some(user) = &user {
                headers.insert("impersonate-user", user.clone());
            }
            async move {
                match router.oneshot(request.map(axum::body::Body::new)).await {
                    Ok(response) => Ok::<_, std::convert::Infallible>(response),
                    Err(never) => match never {},
                }
            }
        });
        kube::Client::new(service, "default")
    }
}
