//! The bucket webhook: admission for the bucket operator's `Bucket`s, written with kube-rs's
//! admission types ([`AdmissionRequest`], [`AdmissionResponse`]).
//!
//! The bucket operator finds out that a Bucket names a region the cloud does not have only
//! when it reconciles it: the Bucket is stored, the operator reports a terminal error, and
//! the user learns of the mistake from the Bucket's status, if they look. A webhook refuses
//! the Bucket when it is written instead, with a message the user sees at once, and keeps
//! what the schema cannot express:
//!
//! - [`mutate`] (`/mutate`, a mutating webhook): writes the region as the cloud spells it
//!   (`" EU-1"` becomes `"eu-1"`), and labels the Bucket with its region
//!   ([`REGION_LABEL`]) so that Buckets can be selected by region;
//! - [`validate`] (`/validate`, a validating webhook): refuses regions the cloud does not
//!   have, refuses moving a Bucket to another region (a cloud bucket cannot move), and warns
//!   when a Bucket has no `owner` label.
//!
//! [`router`] serves both as an axum `Router`; [`serve`] serves it over HTTPS.
//! [`configurations`] makes the webhook configurations that send Bucket writes to it, by
//! Service (on a cluster) or by URL (a webhook outside the cluster, as with `konverge up`).
//!
//! # Where to start
//!
//! [`mutate`] and [`validate`] are the whole policy, plain functions from a request to a
//! response; `tests/webhook.rs` tests them through the API server twice: as in-process
//! handlers of konverge-testkit, and as this crate's HTTPS server.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::routing::post;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use konverge_example_bucket_operator::REGIONS;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::{Value, json};

/// The label that says a Bucket's region.
pub const REGION_LABEL: &str = "buckets.example.konverge.dev/region";
/// The name of both webhooks and both configurations.
pub const NAME: &str = "buckets.example.konverge.dev";

/// Why the webhook could not serve.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The serving certificate or key is not PEM, or does not make a TLS configuration.
    #[error("the serving certificate: {0}")]
    Certificate(String),
    /// The listener failed.
    #[error("listening")]
    Listen(#[source] std::io::Error),
}

/// The region of a Bucket being written, if it has one.
fn region_of(object: Option<&DynamicObject>) -> Option<&str> {
    object?.data.pointer("/spec/region")?.as_str()
}

/// How the cloud spells a region.
pub fn normalize(region: &str) -> String {
    region.trim().to_ascii_lowercase()
}

/// The mutating webhook: the region as the cloud spells it, and the region label.
pub fn mutate(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(region) = region_of(request.object.as_ref()) else {
        return response;
    };
    let wanted = normalize(region);
    let mut patch = Vec::new();
    if wanted != region {
        patch.push(json!({"op": "replace", "path": "/spec/region", "value": wanted}));
    }
    let labels = request
        .object
        .as_ref()
        .and_then(|o| o.metadata.labels.as_ref());
    match labels {
        None => patch.push(json!({"op": "add", "path": "/metadata/labels", "value": {REGION_LABEL: wanted}})),
        Some(labels) if labels.get(REGION_LABEL) != Some(&wanted) => patch.push(json!({
            "op": "add",
            "path": format!("/metadata/labels/{}", REGION_LABEL.replace('~', "~0").replace('/', "~1")),
            "value": wanted,
        })),
        Some(_) => {}
    }
    if patch.is_empty() {
        return response;
    }
    match serde_json::from_value::<json_patch::Patch>(Value::Array(patch)) {
        Ok(patch) => match response.with_patch(patch) {
            Ok(patched) => patched,
            Err(e) => AdmissionResponse::invalid(format!("encoding the patch: {e}")),
        },
        Err(e) => AdmissionResponse::invalid(format!("building the patch: {e}")),
    }
}

/// The validating webhook: known regions only, no moves, and an owner.
pub fn validate(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request);
    if request.operation == Operation::Delete {
        return response;
    }
    let Some(region) = region_of(request.object.as_ref()) else {
        return response;
    };
    if !REGIONS.contains(&region) {
        return response.deny(format!(
            "spec.region: region {region:?} does not exist; the cloud has {}",
            REGIONS.join(", ")
        ));
    }
    if request.operation == Operation::Update
        && let Some(old) = region_of(request.old_object.as_ref())
        && old != region
    {
        return response.deny(format!(
            "spec.region: a bucket cannot move: it is in {old}, and stays there (delete it and create another in {region})"
        ));
    }
    let owned = request
        .object
        .as_ref()
        .and_then(|o| o.metadata.labels.as_ref())
        .is_some_and(|labels| labels.contains_key("owner"));
    if !owned {
        response.warnings.get_or_insert_with(Vec::new).push(
            "the Bucket has no owner label: its cloud costs cannot be charged to anyone".into(),
        );
    }
    response
}

/// Answers one AdmissionReview with `review`, or 400 when the body is not one.
fn answer(
    body: &[u8],
    review: fn(&AdmissionRequest<DynamicObject>) -> AdmissionResponse,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
    let json = [(header::CONTENT_TYPE, "application/json")];
    let request = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
        .map_err(|e| e.to_string())
        .and_then(|r| {
            let request: Result<AdmissionRequest<DynamicObject>, _> = r.try_into();
            request.map_err(|e| e.to_string())
        });
    match request {
        Ok(request) => {
            let response = review(&request).into_review();
            match serde_json::to_vec(&response) {
                Ok(body) => (StatusCode::OK, json, body),
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json,
                    e.to_string().into_bytes(),
                ),
            }
        }
        Err(e) => (StatusCode::BAD_REQUEST, json, e.into_bytes()),
    }
}

/// Both webhooks: `POST /mutate` and `POST /validate`.
pub fn router() -> Router {
    Router::new()
        .route(
            "/mutate",
            post(|body: Bytes| async move { answer(&body, mutate) }),
        )
        .route(
            "/validate",
            post(|body: Bytes| async move { answer(&body, validate) }),
        )
}

/// Serves [`router`] over HTTPS on `listener` with the PEM certificate chain and key, until
/// the task is dropped or aborted.
pub fn serve(
    listener: tokio::net::TcpListener,
    cert_pem: &str,
    key_pem: &str,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    serve_router(listener, cert_pem, key_pem, router())
}

/// Serves any axum `Router` over HTTPS (HTTP/1.1) on `listener` with the PEM certificate
/// chain and key, until the task is dropped or aborted: what a webhook needs, and no more.
pub fn serve_router(
    listener: tokio::net::TcpListener,
    cert_pem: &str,
    key_pem: &str,
    app: Router,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Certificate(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| Error::Certificate(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Certificate(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| Error::Certificate(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    Ok(tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    }))
}

/// Where the API server finds the webhook.
#[derive(Debug, Clone)]
pub enum Target {
    /// A Service in the cluster (the webhook runs as a pod behind it).
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The PEM CA that signed the webhook's serving certificate.
        ca_bundle: Option<String>,
    },
    /// An address outside the cluster, `https://host:port`.
    Url {
        /// The base URL.
        base: String,
        /// The PEM CA that signed the webhook's serving certificate.
        ca_bundle: Option<String>,
    },
}

impl Target {
    fn client_config(&self, path: &str) -> WebhookClientConfig {
        match self {
            Target::Service {
                namespace,
                name,
                ca_bundle,
            } => WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.into()),
                    port: Some(443),
                }),
                ca_bundle: ca_bundle
                    .as_ref()
                    .map(|c| ByteString(c.as_bytes().to_vec())),
                url: None,
            },
            Target::Url { base, ca_bundle } => WebhookClientConfig {
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
                ca_bundle: ca_bundle
                    .as_ref()
                    .map(|c| ByteString(c.as_bytes().to_vec())),
                service: None,
            },
        }
    }
}

/// The rule both webhooks match: creates and updates of Buckets.
fn rules() -> Vec<RuleWithOperations> {
    vec![RuleWithOperations {
        api_groups: Some(vec!["example.konverge.dev".into()]),
        api_versions: Some(vec!["v1".into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        resources: Some(vec!["buckets".into()]),
        scope: Some("Namespaced".into()),
    }]
}

/// The webhook configurations that send Bucket creates and updates to the webhook at
/// `target`: `/mutate` first, then `/validate`. Both fail closed: a Bucket is not written
/// while the webhook is down.
pub fn configurations(
    target: &Target,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let mut mutating = MutatingWebhookConfiguration {
        webhooks: Some(vec![MutatingWebhook {
            name: NAME.into(),
            client_config: target.client_config("/mutate"),
            rules: Some(rules()),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(5),
            ..MutatingWebhook::default()
        }]),
        ..MutatingWebhookConfiguration::default()
    };
    mutating.metadata.name = Some(NAME.into());
    let mut validating = ValidatingWebhookConfiguration {
        webhooks: Some(vec![ValidatingWebhook {
            name: NAME.into(),
            client_config: target.client_config("/validate"),
            rules: Some(rules()),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(5),
            ..ValidatingWebhook::default()
        }]),
        ..ValidatingWebhookConfiguration::default()
    };
    validating.metadata.name = Some(NAME.into());
    (mutating, validating)
}

/// A self-signed serving certificate for `hosts` (IP addresses or DNS names): the PEM
/// certificate (which is also the CA bundle) and the PEM key.
pub fn self_signed(hosts: &[&str]) -> Result<(String, String), Error> {
    let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let certified =
        rcgen::generate_simple_self_signed(names).map_err(|e| Error::Certificate(e.to_string()))?;
    Ok((certified.cert.pem(), certified.signing_key.serialize_pem()))
}

/// The address `serve` listens on, as a `https://` base URL.
pub fn base_url(addr: SocketAddr) -> String {
    format!("https://{addr}")
}
