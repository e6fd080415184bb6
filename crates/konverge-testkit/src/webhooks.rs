//! In-process webhooks: an admission or conversion webhook written as a Rust function over
//! kube-rs's types, served to the [`TestEnv`](crate::TestEnv)'s API server without a socket or
//! TLS, at a Service reference — so the webhook configuration a test writes is the one a
//! cluster would get, with `clientConfig.service` pointing at the webhook's Service.
//!
//! ```no_run
//! # async fn run() {
//! use kube::core::DynamicObject;
//! use kube::core::admission::{AdmissionRequest, AdmissionResponse};
//! use konverge_testkit::TestEnv;
//!
//! let env = TestEnv::builder()
//!     .webhook("webhooks", "policy", "/validate", |request: AdmissionRequest<DynamicObject>| async move {
//!         let response = AdmissionResponse::from(&request);
//!         match request.name.as_str() {
//!             "forbidden" => response.deny("that name is taken"),
//!             _ => response,
//!         }
//!     })
//!     .start()
//!     .await;
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use futures::FutureExt;
use konverge_apiserver::webhook::{Handler, Request, Response, Webhooks};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};

type Route = Arc<dyn Fn(Bytes) -> futures::future::BoxFuture<'static, Response> + Send + Sync>;

/// Routes by Service namespace, Service name and path.
type Routes = HashMap<(String, String, String), Route>;

/// The in-process webhooks of one environment: which Service and path each is served at.
#[derive(Clone, Default)]
pub(crate) struct InProcess {
    webhooks: Webhooks,
    routes: Arc<RwLock<Routes>>,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess").finish_non_exhaustive()
    }
}

impl InProcess {
    /// What the API server calls webhooks through.
    pub(crate) fn webhooks(&self) -> &Webhooks {
        &self.webhooks
    }

    /// Serves an admission webhook at `path` of the Service `namespace/name`.
    pub(crate) fn admission<F, Fut>(&self, namespace: &str, name: &str, path: &str, handler: F)
    where
        F: Fn(AdmissionRequest<DynamicObject>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = AdmissionResponse> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let route: Route = Arc::new(move |body: Bytes| {
            let review = serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
                .map_err(|e| e.to_string())
                .and_then(|review| {
                    let request: Result<AdmissionRequest<DynamicObject>, _> = review.try_into();
                    request.map_err(|e| e.to_string())
                });
            match review {
                Ok(request) => handler(request)
                    .map(|response| json_response(&response.into_review()))
                    .boxed(),
                Err(e) => futures::future::ready(bad_request(&e)).boxed(),
            }
        });
        self.route(namespace, name, path, route);
    }

    /// Serves a CRD conversion webhook at `path` of the Service `namespace/name`.
    pub(crate) fn conversion<F, Fut>(&self, namespace: &str, name: &str, path: &str, handler: F)
    where
        F: Fn(ConversionRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ConversionResponse> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let route: Route = Arc::new(move |body: Bytes| {
            let request = serde_json::from_slice::<ConversionReview>(&body)
                .map_err(|e| e.to_string())
                .and_then(|review| {
                    ConversionRequest::from_review(review).map_err(|e| e.to_string())
                });
            match request {
                Ok(request) => handler(request)
                    .map(|response| json_response(&response.into_review()))
                    .boxed(),
                Err(e) => futures::future::ready(bad_request(&e)).boxed(),
            }
        });
        self.route(namespace, name, path, route);
    }

    fn route(&self, namespace: &str, name: &str, path: &str, route: Route) {
        self.routes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((namespace.into(), name.into(), path.into()), route);
        let routes = self.routes.clone();
        let key = (namespace.to_string(), name.to_string());
        let service: Handler = Arc::new(move |request: Request| {
            let path = request
                .path
                .split_once('?')
                .map_or(request.path.as_str(), |(path, _)| path)
                .to_string();
            let route = routes
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&(key.0.clone(), key.1.clone(), path.clone()))
                .cloned();
            match route {
                Some(route) => route(request.body),
                None => futures::future::ready(Response {
                    status: 404,
                    body: Bytes::from(format!("no webhook at {path}")),
                })
                .boxed(),
            }
        });
        self.webhooks.register(namespace, name, service);
    }
}

fn json_response(body: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(body) => Response {
            status: 200,
            body: Bytes::from(body),
        },
        Err(e) => Response {
            status: 500,
            body: Bytes::from(e.to_string()),
        },
    }
}

fn bad_request(message: &str) -> Response {
    Response {
        status: 400,
        body: Bytes::from(message.to_string()),
    }
}
