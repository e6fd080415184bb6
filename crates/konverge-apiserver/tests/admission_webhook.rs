//! Admission webhooks through a `kube::Client` on the in-process server: webhooks handled
//! in-process (`Webhooks::register`) and served over HTTPS by the test (reached by `url`, by
//! a mapped Service, and by a selectorless Service with an EndpointSlice), with
//! kube-apiserver's AdmissionReview, decisions and refusals.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use konverge_apiserver::ApiServer;
use konverge_apiserver::webhook::{Request, Response};
use konverge_store::MemStore;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

/// The namespace the webhook Services live in.
const HOOKS: &str = "webhooks";

/// A server, a client for it, and what its in-process webhooks were sent.
struct Cluster {
    server: Arc<ApiServer>,
    client: kube::Client,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// One call an in-process webhook received.
#[derive(Debug, Clone)]
struct Seen {
    service: String,
    path: String,
    review: Value,
}

/// What a test webhook answers: the HTTP status and body.
type Reply = (u16, Vec<u8>);

impl Cluster {
    async fn new() -> Cluster {
        let server = ApiServer::builder(Arc::new(MemStore::new()))
            .build()
            .await
            .expect("server");
        let client = kube::Client::new(server.router(), "default");
        Cluster {
            server,
            client,
            seen: Arc::default(),
        }
    }

    /// Serves the Service `webhooks/<name>` in-process with `answer`, recording each call.
    fn serve(&self, name: &str, answer: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        let seen = self.seen.clone();
        let service = name.to_string();
        let answer = Arc::new(answer);
        self.server.registry().webhooks().register(
            HOOKS,
            name,
            Arc::new(move |request: Request| {
                let review: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                let (status, body) = answer(&review);
                seen.lock().unwrap().push(Seen {
                    service: service.clone(),
                    path: request.path,
                    review,
                });
                Box::pin(async move {
                    Response {
                        status,
                        body: Bytes::from(body),
                    }
                })
            }),
        );
    }

    /// The reviews the in-process webhook `name` was sent, in order.
    fn reviews(&self, name: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.service == name)
            .cloned()
            .collect()
    }

    fn forget(&self) {
        self.seen.lock().unwrap().clear();
    }

    async fn validating(&self, name: &str, webhooks: Value) -> anyhow::Result<()> {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let config = serde_json::from_value(json!({
            "metadata": {"name": name}, "webhooks": webhooks,
        }))?;
        api.create(&PostParams::default(), &config).await?;
        Ok(())
    }

    async fn mutating(&self, name: &str, webhooks: Value) -> anyhow::Result<()> {
        let api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let config = serde_json::from_value(json!({
            "metadata": {"name": name}, "webhooks": webhooks,
        }))?;
        api.create(&PostParams::default(), &config).await?;
        Ok(())
    }

    async fn drop_validating(&self, name: &str) -> anyhow::Result<()> {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        api.delete(name, &DeleteParams::default()).await?;
        Ok(())
    }

    fn config_maps(&self, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// A request through the router itself, with the `Warning` headers of the answer.
    async fn call(&self, method: &str, path: &str, body: Value) -> (u16, Value, Vec<String>) {
        use tower::ServiceExt;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        let response = self.server.router().oneshot(req).await.unwrap();
        let code = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            code,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            warnings,
        )
    }
}

/// An AdmissionReview v1 answering `review` with `response` (its uid filled in).
fn answer(review: &Value, mut response: Value) -> Reply {
    response["uid"] = review["request"]["uid"].clone();
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response,
    });
    (200, serde_json::to_vec(&body).unwrap())
}

fn allow(review: &Value) -> Reply {
    answer(review, json!({"allowed": true}))
}

/// Allows the request, changing the object with the JSON patch `patch`.
fn patch(review: &Value, patch: Value) -> Reply {
    use base64::Engine;
    let patch =
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&patch).unwrap());
    answer(
        review,
        json!({"allowed": true, "patch": patch, "patchType": "JSONPatch"}),
    )
}

/// A webhook of a configuration, with the fields validation requires.
fn webhook(name: &str, client_config: Value, rules: Value) -> Value {
    json!({
        "name": name,
        "clientConfig": client_config,
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

/// The in-process Service `webhooks/<name>`.
fn service(name: &str) -> Value {
    json!({"service": {"namespace": HOOKS, "name": name, "path": "/hook"}})
}

/// Rules for `operations` of ConfigMaps.
fn config_map_rules(operations: &[&str]) -> Value {
    json!([{
        "operations": operations, "apiGroups": [""], "apiVersions": ["v1"],
        "resources": ["configmaps"],
    }])
}

fn config_map(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels}, "data": {"a": "1"},
    }))
    .unwrap()
}

/// The Status a refused request answered with.
fn refused(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected a Status, got {other:?}"),
    }
}

#[tokio::test]
async fn validating_webhooks_allow_deny_and_see_the_request_as_kube_sends_it() -> anyhow::Result<()>
{
    let cluster = Cluster::new().await;
    cluster.serve("policy", |review| {
        let labels = &review["request"]["object"]["metadata"]["labels"];
        match labels["verdict"].as_str() {
            Some("forbid") => answer(
                review,
                json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "no thanks"}}),
            ),
            Some("silent") => answer(review, json!({"allowed": false})),
            Some("reason") => answer(
                review,
                json!({"allowed": false, "status": {"reason": "NotAcceptable", "code": 201}}),
            ),
            Some("custom") => answer(
                review,
                json!({"allowed": false, "status": {"reason": "ImageNotAllowed", "code": 403, "message": "pull from the mirror"}}),
            ),
            _ => allow(review),
        }
    });
    cluster
        .validating(
            "policy",
            json!([webhook(
                "policy.example.com",
                service("policy"),
                config_map_rules(&["CREATE", "UPDATE"])
            )]),
        )
        .await?;
    let cms = cluster.config_maps("default");
    cms.create(&PostParams::default(), &config_map("fine", json!({})))
        .await?;
    let seen = cluster.reviews("policy");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/hook?timeout=10s");
    let review = &seen[0].review;
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    let request = &review["request"];
    assert!(request["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert_eq!(
        request["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(request["requestKind"], request["kind"]);
    assert_eq!(request["requestResource"], request["resource"]);
    assert_eq!(request["name"], "fine");
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["object"]["data"], json!({"a": "1"}));
    assert_eq!(request["oldObject"], Value::Null);
    assert_eq!(request["dryRun"], false);
    assert_eq!(
        request["options"],
        json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"})
    );
    assert_eq!(
        request["userInfo"],
        json!({"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]})
    );
    assert!(request.get("subResource").is_none());

    // Each verdict: the object's name, what the webhook answers, and the refusal kube-apiserver
    // makes of it (code, reason, message).
    let refusals: [(&str, &str, u16, &str, &str); 4] = [
        (
            "forbidden",
            "forbid",
            403,
            "Forbidden",
            r#"admission webhook "policy.example.com" denied the request: no thanks"#,
        ),
        // kube-apiserver passes on the webhook's reason, here none.
        (
            "silent",
            "silent",
            400,
            "",
            r#"admission webhook "policy.example.com" denied the request without explanation"#,
        ),
        // A reason Kubernetes does not name is passed on as the webhook gave it.
        (
            "custom",
            "custom",
            403,
            "ImageNotAllowed",
            r#"admission webhook "policy.example.com" denied the request: pull from the mirror"#,
        ),
        // A code under 400 becomes 400; a reason without a message is the message.
        (
            "reason",
            "reason",
            400,
            "NotAcceptable",
            r#"admission webhook "policy.example.com" denied the request: NotAcceptable"#,
        ),
    ];
    for (name, verdict, code, reason, message) in refusals {
        let e = cms
            .create(
                &PostParams::default(),
                &config_map(name, json!({"verdict": verdict})),
            )
            .await
            .unwrap_err();
        assert_eq!(
            refused(e),
            (code, reason.into(), message.into()),
            "verdict {verdict}"
        );
    }
    assert!(cms.get_opt("forbidden").await?.is_none());

    // An update carries the object before.
    cluster.forget();
    let mut fine = cms.get("fine").await?;
    fine.data = Some([("a".to_string(), "2".to_string())].into());
    cms.replace("fine", &PostParams::default(), &fine).await?;
    let request = &cluster.reviews("policy")[0].review["request"];
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(request["oldObject"]["data"], json!({"a": "1"}));
    assert_eq!(request["object"]["data"], json!({"a": "2"}));
    assert_eq!(request["options"]["kind"], "UpdateOptions");
    Ok(())
}

/// A TLS server configuration for a certificate valid for `names`, signed by a new CA; and
/// that CA, in PEM.
fn tls(names: &[&str]) -> (Arc<rustls::ServerConfig>, String) {
    tls_signed_by("webhook test CA", names)
}

fn tls_signed_by(ca_name: &str, names: &[&str]) -> (Arc<rustls::ServerConfig>, String) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let cert = rcgen::CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &*ca)
        .unwrap();
    (serving(&cert, &key), ca.pem())
}

/// A TLS server configuration serving `cert`, whose key is `key`.
fn serving(cert: &rcgen::Certificate, key: &rcgen::KeyPair) -> Arc<rustls::ServerConfig> {
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    Arc::new(config)
}

/// A webhook served over HTTPS on a loopback port, with a certificate for `names`: its
/// address and its CA. `answer` gets the review and the path posted to.
async fn https_webhook(
    names: &[&str],
    answer: impl Fn(&Value, &str) -> Reply + Send + Sync + 'static,
) -> (SocketAddr, String) {
    let (config, ca) = tls(names);
    (serve_https(config, answer).await, ca)
}

/// A webhook served over HTTPS with `config` on a loopback port: its address.
async fn serve_https(
    config: Arc<rustls::ServerConfig>,
    answer: impl Fn(&Value, &str) -> Reply + Send + Sync + 'static,
) -> SocketAddr {
    use http_body_util::BodyExt;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, answer) = (acceptor.clone(), answer.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let answer = answer.clone();
                        async move {
                            let path = req.uri().to_string();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let review: Value =
                                serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let (status, body) = answer(&review, &path);
                            let content_type = if serde_json::from_slice::<Value>(&body).is_ok() {
                                "application/json"
                            } else {
                                "text/plain; charset=utf-8"
                            };
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .status(status)
                                    .header("content-type", content_type)
                                    .body(http_body_util::Full::new(Bytes::from(body)))
                                    .unwrap(),
                            )
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A TLS server configuration and the PEM of the certificate it serves.
type Served = (Arc<rustls::ServerConfig>, String);

/// A TLS server configuration serving one self-signed certificate, marked as a CA (what
/// `openssl req -x509` makes), shaped by `adjust`; and that certificate in PEM.
fn self_signed_ca(adjust: impl FnOnce(&mut rcgen::CertificateParams)) -> Served {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "webhook");
    adjust(&mut params);
    let cert = params.self_signed(&key).unwrap();
    (serving(&cert, &key), cert.pem())
}

/// kube-apiserver verifies a webhook's certificate with Go's crypto/x509: a self-signed
/// certificate marked as a CA and given as the `caBundle` is accepted (WebPKI refuses it as a
/// CA used as an end entity), still checked for its validity period, the server's name and
/// its extended key usage.
#[tokio::test]
async fn a_self_signed_ca_certificate_in_the_ca_bundle_serves_as_go_accepts_it()
-> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    let cases: Vec<(&str, Served, Option<&str>)> = vec![
        ("plain", self_signed_ca(|_| {}), None),
        (
            "server-auth",
            self_signed_ca(|p| {
                p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
            }),
            None,
        ),
        (
            "client-only",
            self_signed_ca(|p| {
                p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
            }),
            Some("incompatible key usage"),
        ),
        (
            "expired",
            self_signed_ca(|p| {
                p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                p.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }),
            Some("expired"),
        ),
        (
            "other-name",
            self_signed_ca(|p| {
                p.subject_alt_names = vec![rcgen::SanType::DnsName(
                    "elsewhere.example.com".try_into().unwrap(),
                )];
            }),
            Some("not valid for 127.0.0.1"),
        ),
    ];
    for (name, (config, pem), refusal) in cases {
        let addr = serve_https(config, |review, _| allow(review)).await;
        let rules = config_map_rules(&["CREATE"]);
        cluster
            .validating(
                name,
                json!([webhook(
                    &format!("{name}.example.com"),
                    json!({"url": format!("https://127.0.0.1:{}/", addr.port()),
                        "caBundle": ca_bundle(&pem)}),
                    rules,
                )]),
            )
            .await?;
        let cms = cluster.config_maps("default");
        let created = cms
            .create(&PostParams::default(), &config_map(name, json!({})))
            .await;
        match refusal {
            None => {
                created.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            }
            Some(words) => {
                let (code, _, message) = refused(created.unwrap_err());
                assert_eq!(code, 500, "{name}: {message}");
                assert!(
                    message.contains("failed calling webhook") && message.contains(words),
                    "{name}: {message}"
                );
            }
        }
        cluster.drop_validating(name).await?;
    }
    Ok(())
}

fn ca_bundle(pem: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(pem)
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

async fn create_namespace(cluster: &Cluster, name: &str, labels: Value) -> anyhow::Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?,
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn webhooks_are_reached_over_https_by_url_mapped_service_and_endpoint_slice()
-> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    let paths = Arc::new(Mutex::new(Vec::new()));
    let recorded = paths.clone();
    let (addr, ca) = https_webhook(
        &["127.0.0.1", "mapped.webhooks.svc", "sliced.webhooks.svc"],
        move |review, path| {
            recorded.lock().unwrap().push(path.to_string());
            if review["request"]["name"] == "refused" {
                answer(
                    review,
                    json!({"allowed": false, "status": {"message": format!("not via {path}")}}),
                )
            } else {
                allow(review)
            }
        },
    )
    .await;
    create_namespace(&cluster, HOOKS, json!({})).await?;
    cluster
        .server
        .registry()
        .webhooks()
        .map_service(HOOKS, "mapped", 8443, addr);
    // A Service without a selector, and the EndpointSlice that says where it is.
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(cluster.client.clone(), HOOKS);
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "sliced"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": addr.port()}]},
            }))?,
        )
        .await?;
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(cluster.client.clone(), HOOKS);
    slices
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "sliced-1", "labels": {"kubernetes.io/service-name": "sliced"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": addr.port(), "protocol": "TCP"}],
            }))?,
        )
        .await?;
    let bundle = ca_bundle(&ca);
    let rules = config_map_rules(&["CREATE"]);
    cluster
        .validating(
            "https",
            json!([
                webhook(
                    "url.example.com",
                    json!({"url": format!("https://127.0.0.1:{}/by-url", addr.port()), "caBundle": bundle}),
                    rules.clone(),
                ),
                webhook(
                    "mapped.example.com",
                    json!({"service": {"namespace": HOOKS, "name": "mapped", "port": 8443, "path": "/mapped"}, "caBundle": bundle}),
                    rules.clone(),
                ),
                webhook(
                    "sliced.example.com",
                    json!({"service": {"namespace": HOOKS, "name": "sliced", "path": "/sliced"}, "caBundle": bundle}),
                    rules,
                ),
            ]),
        )
        .await?;
    let cms = cluster.config_maps("default");
    cms.create(&PostParams::default(), &config_map("fine", json!({})))
        .await?;
    let mut called = paths.lock().unwrap().clone();
    called.sort();
    assert_eq!(
        called,
        [
            "/by-url?timeout=10s",
            "/mapped?timeout=10s",
            "/sliced?timeout=10s"
        ]
    );
    let e = cms
        .create(&PostParams::default(), &config_map("refused", json!({})))
        .await
        .unwrap_err();
    let (code, _, message) = refused(e);
    assert_eq!(code, 400);
    assert!(
        message.starts_with("admission webhook \"")
            && message.contains("denied the request: not via /"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn unreachable_webhooks_fail_or_are_ignored_as_their_failure_policy_says()
-> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    let port = closed_port().await;
    let url = format!("https://127.0.0.1:{port}/");
    let mut ignored = webhook(
        "ignored.example.com",
        json!({"url": url}),
        config_map_rules(&["CREATE"]),
    );
    ignored["failurePolicy"] = json!("Ignore");
    cluster.validating("ignored", json!([ignored])).await?;
    let cms = cluster.config_maps("default");
    cms.create(&PostParams::default(), &config_map("through", json!({})))
        .await?;
    let mut failing = webhook(
        "failing.example.com",
        json!({"url": url}),
        config_map_rules(&["CREATE"]),
    );
    failing["failurePolicy"] = json!("Fail");
    cluster.validating("failing", json!([failing])).await?;
    let e = cms
        .create(&PostParams::default(), &config_map("stopped", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refused(e),
        (
            500,
            "InternalError".into(),
            format!(
                r#"Internal error occurred: failed calling webhook "failing.example.com": failed to call webhook: Post "https://127.0.0.1:{port}/?timeout=10s": dial tcp 127.0.0.1:{port}: connect: connection refused"#
            )
        )
    );
    // Removing the configuration lets writes through again.
    cluster.drop_validating("failing").await?;
    cms.create(&PostParams::default(), &config_map("again", json!({})))
        .await?;
    Ok(())
}

#[tokio::test]
async fn certificates_not_signed_by_the_ca_bundle_are_refused() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    let (addr, _) = https_webhook(&["127.0.0.1"], |review, _| allow(review)).await;
    let (_, other_ca) = tls_signed_by("another CA", &["127.0.0.1"]);
    cluster
        .validating(
            "untrusted",
            json!([webhook(
                "untrusted.example.com",
                json!({"url": format!("https://127.0.0.1:{}/", addr.port()), "caBundle": ca_bundle(&other_ca)}),
                config_map_rules(&["CREATE"]),
            )]),
        )
        .await?;
    let e = cluster
        .config_maps("default")
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refused(e).2,
        format!(
            r#"Internal error occurred: failed calling webhook "untrusted.example.com": failed to call webhook: Post "https://127.0.0.1:{}/?timeout=10s": tls: failed to verify certificate: x509: certificate signed by unknown authority"#,
            addr.port()
        )
    );
    Ok(())
}

#[tokio::test]
async fn answers_that_are_not_admission_reviews_fail_the_call() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("odd", |review| {
        let name = review["request"]["name"].as_str().unwrap_or("");
        match name {
            "garbage" => (200, b"garbage".to_vec()),
            "empty" => (200, Vec::new()),
            "uid" => {
                let (status, body) = answer(review, json!({"allowed": true}));
                let mut body: Value = serde_json::from_slice(&body).unwrap();
                body["response"]["uid"] = json!("not-yours");
                (status, serde_json::to_vec(&body).unwrap())
            }
            "beta" => {
                let (status, body) = answer(review, json!({"allowed": true}));
                let mut body: Value = serde_json::from_slice(&body).unwrap();
                body["apiVersion"] = json!("admission.k8s.io/v1beta1");
                (status, serde_json::to_vec(&body).unwrap())
            }
            "kindless" => {
                let uid = review["request"]["uid"].clone();
                (
                    200,
                    serde_json::to_vec(&json!({"response": {"uid": uid, "allowed": true}}))
                        .unwrap(),
                )
            }
            "absent" => (
                200,
                serde_json::to_vec(
                    &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
                )
                .unwrap(),
            ),
            "patching" => answer(
                review,
                json!({"allowed": true, "patch": "W10=", "patchType": "JSONPatch"}),
            ),
            "status" => (
                503,
                serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "overloaded", "code": 503})).unwrap(),
            ),
            _ => allow(review),
        }
    });
    cluster
        .validating(
            "odd",
            json!([webhook(
                "odd.example.com",
                service("odd"),
                config_map_rules(&["CREATE"])
            )]),
        )
        .await?;
    let cms = cluster.config_maps("default");
    let prefix = r#"Internal error occurred: failed calling webhook "odd.example.com": "#;
    let cases = [
        (
            "garbage",
            "failed to call webhook: couldn't get version/kind; json parse error: invalid character 'g' looking for beginning of value",
        ),
        (
            "empty",
            "failed to call webhook: 0-length response with status code: 200 and content type: ",
        ),
        (
            "beta",
            "failed to call webhook: converting (v1beta1.AdmissionReview) to (v1.AdmissionReview): unknown conversion",
        ),
        (
            "kindless",
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /, Kind=",
        ),
        (
            "absent",
            "received invalid webhook response: webhook response was absent",
        ),
        (
            "patching",
            "received invalid webhook response: validating webhook may not return response.patch",
        ),
        ("status", "failed to call webhook: overloaded"),
    ];
    for (name, want) in cases {
        let e = cms
            .create(&PostParams::default(), &config_map(name, json!({})))
            .await
            .unwrap_err();
        assert_eq!(
            refused(e),
            (500, "InternalError".into(), format!("{prefix}{want}")),
            "{name}"
        );
    }
    let e = cms
        .create(&PostParams::default(), &config_map("uid", json!({})))
        .await
        .unwrap_err();
    let message = refused(e).2;
    assert!(
        message.starts_with(&format!(
            r#"{prefix}received invalid webhook response: expected response.uid=""#
        )) && message.ends_with(r#"", got "not-yours""#),
        "{message}"
    );
    // A text error page is quoted back.
    let (addr, ca) = https_webhook(&["127.0.0.1"], |_, _| (500, b"boom\n".to_vec())).await;
    cluster
        .validating(
            "broken",
            json!([webhook(
                "broken.example.com",
                json!({"url": format!("https://127.0.0.1:{}/", addr.port()), "caBundle": ca_bundle(&ca)}),
                config_map_rules(&["CREATE"]),
            )]),
        )
        .await?;
    let e = cms
        .create(&PostParams::default(), &config_map("fine", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refused(e).2,
        r#"Internal error occurred: failed calling webhook "broken.example.com": failed to call webhook: an error on the server ("boom") has prevented the request from succeeding"#
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn webhooks_that_do_not_answer_in_time_fail_the_call() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.server.registry().webhooks().register(
        HOOKS,
        "slow",
        Arc::new(|_request: Request| Box::pin(futures::future::pending())),
    );
    let mut slow = webhook(
        "slow.example.com",
        json!({"service": {"namespace": HOOKS, "name": "slow"}}),
        config_map_rules(&["CREATE"]),
    );
    slow["timeoutSeconds"] = json!(3);
    cluster.validating("slow", json!([slow])).await?;
    let e = cluster
        .config_maps("default")
        .create(&PostParams::default(), &config_map("late", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refused(e).2,
        r#"Internal error occurred: failed calling webhook "slow.example.com": failed to call webhook: Post "https://slow.webhooks.svc:443/?timeout=3s": context deadline exceeded"#
    );
    Ok(())
}

#[tokio::test]
async fn deletes_are_validated_against_the_object_deleted() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("keeper", |review| {
        let old = &review["request"]["oldObject"];
        if old["metadata"]["labels"]["keep"] == "yes" {
            answer(
                review,
                json!({"allowed": false, "status": {"code": 403, "message": "kept"}}),
            )
        } else {
            allow(review)
        }
    });
    cluster
        .validating(
            "keeper",
            json!([webhook(
                "keeper.example.com",
                service("keeper"),
                config_map_rules(&["DELETE"])
            )]),
        )
        .await?;
    let cms = cluster.config_maps("default");
    cms.create(
        &PostParams::default(),
        &config_map("kept", json!({"keep": "yes"})),
    )
    .await?;
    cms.create(&PostParams::default(), &config_map("gone", json!({})))
        .await?;
    // Creates do not match the rules.
    assert!(cluster.reviews("keeper").is_empty());
    let e = cms
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        refused(e),
        (
            403,
            "".into(),
            r#"admission webhook "keeper.example.com" denied the request: kept"#.into()
        )
    );
    assert!(cms.get_opt("kept").await?.is_some());
    cms.delete("gone", &DeleteParams::default()).await?;
    let request = &cluster.reviews("keeper")[0].review["request"];
    assert_eq!(request["operation"], "DELETE");
    assert_eq!(request["object"], Value::Null);
    assert_eq!(request["oldObject"]["metadata"]["name"], "kept");
    assert_eq!(
        request["options"],
        json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"})
    );
    Ok(())
}

#[tokio::test]
async fn selectors_choose_the_namespaces_and_objects_webhooks_see() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("picky", allow);
    let mut by_namespace = webhook(
        "namespaces.example.com",
        service("picky"),
        config_map_rules(&["CREATE"]),
    );
    by_namespace["namespaceSelector"] = json!({"matchLabels": {"env": "prod"}});
    let mut by_object = webhook(
        "objects.example.com",
        service("picky"),
        config_map_rules(&["CREATE"]),
    );
    by_object["objectSelector"] =
        json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]});
    cluster
        .validating("picky", json!([by_namespace, by_object]))
        .await?;
    create_namespace(&cluster, "prod", json!({"env": "prod"})).await?;
    create_namespace(&cluster, "dev", json!({"env": "dev"})).await?;
    let called = |cluster: &Cluster| {
        let mut names: Vec<String> = cluster
            .reviews("picky")
            .iter()
            .map(|s| {
                format!(
                    "{}/{}",
                    s.review["request"]["namespace"].as_str().unwrap(),
                    s.review["request"]["name"].as_str().unwrap()
                )
            })
            .collect();
        names.sort();
        cluster.forget();
        names
    };
    cluster
        .config_maps("dev")
        .create(&PostParams::default(), &config_map("plain", json!({})))
        .await?;
    assert!(called(&cluster).is_empty());
    cluster
        .config_maps("prod")
        .create(&PostParams::default(), &config_map("plain", json!({})))
        .await?;
    assert_eq!(called(&cluster), ["prod/plain"]);
    cluster
        .config_maps("dev")
        .create(
            &PostParams::default(),
            &config_map("web", json!({"tier": "web"})),
        )
        .await?;
    assert_eq!(called(&cluster), ["dev/web"]);
    cluster
        .config_maps("prod")
        .create(
            &PostParams::default(),
            &config_map("web", json!({"tier": "web"})),
        )
        .await?;
    assert_eq!(called(&cluster), ["prod/web", "prod/web"]);
    Ok(())
}

#[tokio::test]
async fn webhooks_never_see_the_configurations_that_register_them() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("wall", |review| {
        answer(
            review,
            json!({"allowed": false, "status": {"message": "wall"}}),
        )
    });
    cluster
        .validating(
            "wall",
            json!([webhook(
                "wall.example.com",
                service("wall"),
                json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]),
            )]),
        )
        .await?;
    let e = cluster
        .config_maps("default")
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refused(e).2,
        r#"admission webhook "wall.example.com" denied the request: wall"#
    );
    // Another configuration, and the removal of this one, go through untouched.
    cluster
        .validating(
            "second",
            json!([webhook(
                "second.example.com",
                service("wall"),
                config_map_rules(&["CREATE"])
            )]),
        )
        .await?;
    cluster.drop_validating("wall").await?;
    cluster.drop_validating("second").await?;
    assert_eq!(cluster.reviews("wall").len(), 1);
    cluster
        .config_maps("default")
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await?;
    Ok(())
}

#[tokio::test]
async fn warnings_reach_the_client_deduplicated_and_sanitised() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("chatty", |review| {
        answer(
            review,
            json!({"allowed": true, "warnings": ["mind the gap", "mind the gap", "", "bell\u{7}"]}),
        )
    });
    cluster
        .validating(
            "chatty",
            json!([webhook(
                "chatty.example.com",
                service("chatty"),
                config_map_rules(&["CREATE"])
            )]),
        )
        .await?;
    let (code, _, warnings) = cluster
        .call(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}}),
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(warnings, [r#"299 - "mind the gap""#]);
    Ok(())
}

#[tokio::test]
async fn dry_runs_reach_only_webhooks_without_side_effects() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("calm", allow);
    let mut on_dry_run = webhook(
        "calm.example.com",
        service("calm"),
        config_map_rules(&["CREATE"]),
    );
    on_dry_run["sideEffects"] = json!("NoneOnDryRun");
    cluster.validating("calm", json!([on_dry_run])).await?;
    let cms = cluster.config_maps("default");
    cms.create(
        &PostParams {
            dry_run: true,
            ..PostParams::default()
        },
        &config_map("dry", json!({})),
    )
    .await?;
    let request = &cluster.reviews("calm")[0].review["request"];
    assert_eq!(request["dryRun"], true);
    assert_eq!(
        request["options"],
        json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"]})
    );
    assert!(cms.get_opt("dry").await?.is_none());

    // A configuration with side effects, stored before validation refused them (written
    // straight to the store), refuses dry runs.
    let rt = cluster
        .server
        .registry()
        .catalog()
        .get(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
        )
        .unwrap();
    let mut effects = webhook(
        "effects.example.com",
        service("calm"),
        config_map_rules(&["CREATE"]),
    );
    effects["sideEffects"] = json!("Some");
    let stored = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "effects", "uid": "u-effects", "creationTimestamp": "2025-01-01T00:00:00Z"},
        "webhooks": [effects],
    });
    cluster
        .server
        .registry()
        .store()
        .create(
            Bytes::from(rt.key(None, "effects")),
            Bytes::from(serde_json::to_vec(&stored)?),
        )
        .await?;
    // Any write of admission configuration makes the webhooks be read again.
    cluster
        .validating(
            "nudge",
            json!([webhook(
                "nudge.example.com",
                service("calm"),
                config_map_rules(&["DELETE"])
            )]),
        )
        .await?;
    let e = cms
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &config_map("dry", json!({})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused(e),
        (
            400,
            "BadRequest".into(),
            r#"admission webhook "effects.example.com" does not support dry run"#.into()
        )
    );
    // Without dry run, it is called.
    cms.create(&PostParams::default(), &config_map("wet", json!({})))
        .await?;
    Ok(())
}

#[tokio::test]
async fn mutating_webhooks_patch_objects_which_are_then_validated() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("labeler", |review| {
        let name = review["request"]["name"].as_str().unwrap_or("");
        match name {
            "bad-key" => patch(
                review,
                json!([{"op": "add", "path": "/data/bad key", "value": "x"}]),
            ),
            "missing" => patch(
                review,
                json!([{"op": "remove", "path": "/metadata/annotations/nope"}]),
            ),
            "wrong-type" => patch(
                review,
                json!([{"op": "replace", "path": "/data", "value": 5}]),
            ),
            "not-a-patch" => patch(review, json!({"op": "add"})),
            _ => patch(
                review,
                json!([
                    {"op": "add", "path": "/metadata/labels/mutated", "value": "yes"},
                    {"op": "add", "path": "/data/added", "value": "by webhook"},
                ]),
            ),
        }
    });
    cluster.serve("checker", allow);
    cluster
        .mutating(
            "labeler",
            json!([webhook(
                "labeler.example.com",
                service("labeler"),
                config_map_rules(&["CREATE"])
            )]),
        )
        .await?;
    cluster
        .validating(
            "checker",
            json!([webhook(
                "checker.example.com",
                service("checker"),
                config_map_rules(&["CREATE"])
            )]),
        )
        .await?;
    let cms = cluster.config_maps("default");
    let created = cms
        .create(
            &PostParams::default(),
            &config_map("plain", json!({"app": "x"})),
        )
        .await?;
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("mutated").map(String::as_str), Some("yes"));
    assert_eq!(
        created
            .data
            .unwrap_or_default()
            .get("added")
            .map(String::as_str),
        Some("by webhook")
    );
    assert!(created.metadata.uid.is_some());
    // The mutating webhook saw the object before the server filled in its uid; the
    // validating one sees the mutated object.
    let mutated = &cluster.reviews("labeler")[0].review["request"]["object"];
    assert_eq!(mutated["metadata"].get("uid"), None);
    assert_eq!(mutated["metadata"].get("creationTimestamp"), None);
    let validated = &cluster.reviews("checker")[0].review["request"]["object"];
    assert_eq!(validated["metadata"]["labels"]["mutated"], "yes");
    assert_eq!(validated["data"]["added"], "by webhook");

    let e = cms
        .create(&PostParams::default(), &config_map("bad-key", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refused(e),
        (
            422,
            "Invalid".into(),
            r#"ConfigMap "bad-key" is invalid: data[bad key]: Invalid value: "bad key": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#.into()
        )
    );
    let e = cms
        .create(&PostParams::default(), &config_map("missing", json!({})))
        .await
        .unwrap_err();
    let (code, reason, message) = refused(e);
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    assert_eq!(
        message,
        r#"Internal error occurred: remove operation does not apply: doc is missing path: "/metadata/annotations/nope": missing value"#
    );
    let e = cms
        .create(&PostParams::default(), &config_map("wrong-type", json!({})))
        .await
        .unwrap_err();
    let (code, _, message) = refused(e);
    assert_eq!(code, 500);
    assert!(
        message.starts_with("Internal error occurred: "),
        "{message}"
    );
    let e = cms
        .create(
            &PostParams::default(),
            &config_map("not-a-patch", json!({})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused(e).2,
        "Internal error occurred: json: cannot unmarshal object into Go value of type jsonpatch.Patch"
    );
    for name in ["bad-key", "missing", "wrong-type", "not-a-patch"] {
        assert!(cms.get_opt(name).await?.is_none(), "{name}");
    }
    // Only the request that got through validation reached the validating webhook.
    assert_eq!(cluster.reviews("checker").len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_failing_webhook_leaves_no_earlier_patch_behind() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("first", |review| {
        patch(
            review,
            json!([{"op": "add", "path": "/metadata/labels/first", "value": "yes"}]),
        )
    });
    cluster.serve("second", |review| {
        answer(
            review,
            json!({"allowed": false, "status": {"message": "second says no"}}),
        )
    });
    cluster
        .mutating(
            "chain",
            json!([
                webhook(
                    "first.example.com",
                    service("first"),
                    config_map_rules(&["CREATE", "UPDATE"])
                ),
                webhook(
                    "second.example.com",
                    service("second"),
                    config_map_rules(&["UPDATE"])
                ),
            ]),
        )
        .await?;
    let cms = cluster.config_maps("default");
    cms.create(
        &PostParams::default(),
        &config_map("x", json!({"app": "x"})),
    )
    .await?;
    let mut x = cms.get("x").await?;
    x.metadata.labels = Some([("app".to_string(), "changed".to_string())].into());
    let e = cms
        .replace("x", &PostParams::default(), &x)
        .await
        .unwrap_err();
    assert_eq!(
        refused(e).2,
        r#"admission webhook "second.example.com" denied the request: second says no"#
    );
    let stored = cms.get("x").await?.metadata.labels.unwrap_or_default();
    assert_eq!(stored.get("app").map(String::as_str), Some("x"));
    assert_eq!(stored.get("first").map(String::as_str), Some("yes"));
    Ok(())
}

/// A mutating webhook that leaves `metadata.managedFields` in a state kube cannot decode has
/// them reset to what they were before admission, with kube-apiserver's warning; a valid
/// change of them is kept.
#[tokio::test]
async fn managed_fields_a_webhook_breaks_are_reset_with_a_warning() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("breaks", |review| {
        let name = review["request"]["name"].as_str().unwrap_or("");
        let operation = if name == "kept" { "Update" } else { "Bogus" };
        patch(
            review,
            json!([{"op": "add", "path": "/metadata/managedFields", "value": [{
                "manager": "webhook", "operation": operation, "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:from-webhook": {}}},
            }]}, {"op": "add", "path": "/data", "value": {"from-webhook": "yes"}}]),
        )
    });
    cluster
        .mutating(
            "breaks",
            json!([webhook(
                "breaks.example.com",
                service("breaks"),
                config_map_rules(&["CREATE", "UPDATE"])
            )]),
        )
        .await?;
    let warning = r#"299 - ".metadata.managedFields was in an invalid state after admission; this could be caused by an outdated mutating admission controller; please fix your requests: operation must be `Apply` or `Update`""#;
    let managers = |object: &Value| -> Vec<(String, String)> {
        object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
                (s("manager"), s("operation"))
            })
            .collect()
    };
    let tester = || vec![("tester".to_string(), "Update".to_string())];

    let path = "/api/v1/namespaces/default/configmaps";
    let (code, created, warnings) = cluster
        .call(
            "POST",
            &format!("{path}?fieldManager=tester"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(warnings, [warning]);
    assert_eq!(managers(&created), tester());
    assert_eq!(created["data"]["from-webhook"], "yes");
    let stored = cluster.config_maps("default").get("x").await?;
    assert_eq!(managers(&serde_json::to_value(&stored)?), tester());

    // An update the webhook breaks the same way keeps the fields as the update recorded them,
    // and the object stays writable.
    let mut body = serde_json::to_value(&stored)?;
    body["metadata"]["labels"]["a"] = json!("c");
    let (code, updated, warnings) = cluster
        .call("PUT", &format!("{path}/x?fieldManager=tester"), body)
        .await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(warnings, [warning]);
    assert_eq!(managers(&updated), tester());
    assert_eq!(updated["metadata"]["labels"]["a"], "c");

    // A change of the managed fields that decodes is the webhook's to make.
    let (code, kept, warnings) = cluster
        .call(
            "POST",
            &format!("{path}?fieldManager=tester"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}}),
        )
        .await;
    assert_eq!(code, 201, "{kept}");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        managers(&kept),
        [("webhook".to_string(), "Update".to_string())]
    );
    Ok(())
}

#[tokio::test]
async fn if_needed_webhooks_are_called_again_after_later_changes() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    // `early` records whether it saw `late`'s label; `late` adds it.
    cluster.serve("early", |review| {
        let labels = &review["request"]["object"]["metadata"]["labels"];
        let saw = if labels.get("late").is_some() {
            "yes"
        } else {
            "no"
        };
        patch(
            review,
            json!([{"op": "add", "path": "/metadata/labels/early-saw-late", "value": saw}]),
        )
    });
    cluster.serve("late", |review| {
        patch(
            review,
            json!([{"op": "add", "path": "/metadata/labels/late", "value": "here"}]),
        )
    });
    cluster.serve("never", allow);
    let mut early = webhook(
        "early.example.com",
        service("early"),
        config_map_rules(&["CREATE"]),
    );
    early["reinvocationPolicy"] = json!("IfNeeded");
    let never = webhook(
        "never.example.com",
        service("never"),
        config_map_rules(&["CREATE"]),
    );
    let late = webhook(
        "late.example.com",
        service("late"),
        config_map_rules(&["CREATE"]),
    );
    // Configurations are consulted by name: `a-...` before `b-...`.
    cluster.mutating("a-early", json!([never, early])).await?;
    cluster.mutating("b-late", json!([late])).await?;
    // The patches add to `metadata.labels`, so the object has a label: empty labels are
    // dropped before webhooks see the object, as Go's `omitempty` drops them.
    let created = cluster
        .config_maps("default")
        .create(
            &PostParams::default(),
            &config_map("x", json!({"app": "x"})),
        )
        .await?;
    let labels = created.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("early-saw-late").map(String::as_str),
        Some("yes")
    );
    assert_eq!(labels.get("late").map(String::as_str), Some("here"));
    assert_eq!(cluster.reviews("early").len(), 2);
    assert_eq!(cluster.reviews("late").len(), 1);
    assert_eq!(cluster.reviews("never").len(), 1);
    Ok(())
}

#[tokio::test]
async fn mutating_webhooks_may_not_patch_a_delete() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("eraser", |review| {
        if review["request"]["name"] == "patched" {
            patch(
                review,
                json!([{"op": "add", "path": "/metadata/labels", "value": {}}]),
            )
        } else {
            allow(review)
        }
    });
    cluster
        .mutating(
            "eraser",
            json!([webhook(
                "eraser.example.com",
                service("eraser"),
                config_map_rules(&["DELETE"])
            )]),
        )
        .await?;
    let cms = cluster.config_maps("default");
    cms.create(&PostParams::default(), &config_map("patched", json!({})))
        .await?;
    cms.create(&PostParams::default(), &config_map("plain", json!({})))
        .await?;
    let e = cms
        .delete("patched", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        refused(e).2,
        r#"Internal error occurred: admission webhook "eraser.example.com" attempted to modify the object, which is not supported for this operation"#
    );
    cms.delete("plain", &DeleteParams::default()).await?;
    let request = &cluster.reviews("eraser")[1].review["request"];
    assert_eq!(request["operation"], "DELETE");
    assert_eq!(request["object"], Value::Null);
    assert_eq!(request["oldObject"], Value::Null);
    Ok(())
}

#[tokio::test]
async fn equivalent_versions_match_and_are_converted() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("scaler", |review| {
        patch(
            review,
            json!([{"op": "add", "path": "/metadata/labels", "value": {"seen": "v2"}}]),
        )
    });
    let rules = json!([{
        "operations": ["CREATE"], "apiGroups": ["autoscaling"], "apiVersions": ["v2"],
        "resources": ["horizontalpodautoscalers"],
    }]);
    let mut exact = webhook("exact.example.com", service("scaler"), rules.clone());
    exact["matchPolicy"] = json!("Exact");
    let equivalent = webhook("equivalent.example.com", service("scaler"), rules);
    cluster
        .mutating("scaler", json!([exact, equivalent]))
        .await?;
    let hpas: Api<k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler> =
        Api::namespaced(cluster.client.clone(), "default");
    let created = hpas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "maxReplicas": 3, "targetCPUUtilizationPercentage": 50},
            }))?,
        )
        .await?;
    assert_eq!(
        created
            .metadata
            .labels
            .unwrap_or_default()
            .get("seen")
            .map(String::as_str),
        Some("v2")
    );
    assert_eq!(
        created.spec.unwrap().target_cpu_utilization_percentage,
        Some(50)
    );
    let seen = cluster.reviews("scaler");
    assert_eq!(
        seen.len(),
        1,
        "only the Equivalent webhook matches a v1 write"
    );
    let request = &seen[0].review["request"];
    assert_eq!(
        request["kind"],
        json!({"group": "autoscaling", "version": "v2", "kind": "HorizontalPodAutoscaler"})
    );
    assert_eq!(
        request["requestKind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "HorizontalPodAutoscaler"})
    );
    assert_eq!(request["resource"]["version"], "v2");
    assert_eq!(request["requestResource"]["version"], "v1");
    assert_eq!(request["object"]["apiVersion"], "autoscaling/v2");
    assert_eq!(
        request["object"]["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        50
    );
    Ok(())
}

#[tokio::test]
async fn v1beta1_webhooks_get_and_answer_v1beta1_reviews() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("old", |review| {
        use base64::Engine;
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op": "add", "path": "/metadata/labels", "value": {"old": "style"}}]"#);
        // A v1beta1 answer needs neither the uid nor a patch type.
        let body = json!({"response": {"allowed": true, "patch": patch}});
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1beta1");
        (200, serde_json::to_vec(&body).unwrap())
    });
    let mut old = webhook(
        "old.example.com",
        service("old"),
        config_map_rules(&["CREATE"]),
    );
    old["admissionReviewVersions"] = json!(["v1beta2", "v1beta1"]);
    cluster.mutating("old", json!([old])).await?;
    let created = cluster
        .config_maps("default")
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await?;
    assert_eq!(
        created
            .metadata
            .labels
            .unwrap_or_default()
            .get("old")
            .map(String::as_str),
        Some("style")
    );
    Ok(())
}

#[tokio::test]
async fn namespace_selectors_need_the_namespace() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("scoped", allow);
    let mut scoped = webhook(
        "scoped.example.com",
        service("scoped"),
        config_map_rules(&["CREATE"]),
    );
    scoped["namespaceSelector"] = json!({"matchLabels": {"env": "prod"}});
    cluster.mutating("scoped", json!([scoped])).await?;
    let e = cluster
        .config_maps("ghost")
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refused(e),
        (
            404,
            "NotFound".into(),
            r#"namespaces "ghost" not found"#.into()
        )
    );
    Ok(())
}

#[tokio::test]
async fn audit_annotations_record_what_webhooks_did() -> anyhow::Result<()> {
    use konverge_apiserver::admission::{Attributes, Decision, Operation, Trace};
    let cluster = Cluster::new().await;
    cluster.serve("noted", |review| {
        let (status, body) = patch(
            review,
            json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]),
        );
        let mut body: Value = serde_json::from_slice(&body).unwrap();
        body["response"]["auditAnnotations"] =
            json!({"decision": "patched", "bad key!": "dropped"});
        (status, serde_json::to_vec(&body).unwrap())
    });
    cluster
        .mutating(
            "noted",
            json!([webhook(
                "noted.example.com",
                service("noted"),
                config_map_rules(&["CREATE"])
            )]),
        )
        .await?;
    let mut ignored = webhook(
        "ignored.example.com",
        json!({"url": format!("https://127.0.0.1:{}/", closed_port().await)}),
        config_map_rules(&["CREATE"]),
    );
    ignored["failurePolicy"] = json!("Ignore");
    cluster.validating("ignored", json!([ignored])).await?;
    let registry = cluster.server.registry();
    let rt = registry.catalog().get("", "v1", "configmaps").unwrap();
    let trace = Trace::default();
    let attributes = Attributes {
        operation: Operation::Create,
        rt: &rt,
        namespace: "default",
        name: "x",
        subresource: None,
        old: None,
        user: None,
        dry_run: false,
        trace: &trace,
    };
    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}});
    let chain = registry.admission();
    assert!(chain.admit(&attributes, &mut object, registry).await?);
    assert_eq!(object["metadata"]["labels"], json!({"a": "b"}));
    chain.validate(&attributes, &object, registry).await?;
    let annotations: std::collections::BTreeMap<String, String> =
        trace.annotations().into_iter().collect();
    assert_eq!(
        annotations,
        [
            ("failed-open.validating.webhook.admission.k8s.io/round_0_index_0", "ignored.example.com"),
            ("mutation.webhook.admission.k8s.io/round_0_index_0", r#"{"configuration":"noted","webhook":"noted.example.com","mutated":true}"#),
            ("noted.example.com/decision", "patched"),
            ("patch.webhook.admission.k8s.io/round_0_index_0", r#"{"configuration":"noted","webhook":"noted.example.com","patch":[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}],"patchType":"JSONPatch"}"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    );
    let decisions: Vec<(String, Decision)> = trace
        .admissions()
        .into_iter()
        .map(|r| (r.name.to_string(), r.decision))
        .filter(|(name, _)| name.contains("Webhook"))
        .collect();
    assert_eq!(
        decisions,
        [
            (
                "MutatingWebhook/noted.example.com".to_string(),
                Decision::Mutated
            ),
            ("MutatingAdmissionWebhook".to_string(), Decision::Mutated),
            // The chain records every plugin's mutating phase, this one's too.
            ("ValidatingAdmissionWebhook".to_string(), Decision::Allowed),
            (
                "ValidatingWebhook/ignored.example.com".to_string(),
                Decision::Allowed
            ),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn configurations_get_kube_apiservers_defaults_and_validation() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let (code, body, _) = cluster
        .call(
            "POST",
            path,
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "bad"},
                "webhooks": [
                    {"name": "bad.example.com", "clientConfig": {"url": "http://example.com/x"},
                     "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
                    {"name": "bad.example.com", "clientConfig": {"service": {"namespace": "ns", "name": "svc"}},
                     "sideEffects": "Some", "admissionReviewVersions": ["v1"], "timeoutSeconds": 0},
                ],
            }),
        )
        .await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        body["message"],
        concat!(
            r#"ValidatingWebhookConfiguration.admissionregistration.k8s.io "bad" is invalid: ["#,
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun, ",
            r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path], "#,
            "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1, ",
            r#"webhooks[1].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun", "#,
            "webhooks[1].timeoutSeconds: Invalid value: 0: the timeout value must be between 1 and 30 seconds, ",
            r#"webhooks[1].name: Duplicate value: "bad.example.com"]"#,
        )
    );
    assert_eq!(
        body["details"]["causes"][0],
        json!({"reason": "FieldValueRequired", "message": "Required value: must specify one of None, NoneOnDryRun", "field": "webhooks[0].sideEffects"})
    );
    let (code, body, _) = cluster
        .call(
            "POST",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "defaulted"},
                "webhooks": [{"name": "defaulted.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                    "clientConfig": {"service": {"namespace": "ns", "name": "svc"}},
                    "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}],
            }),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let hook = &body["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(hook["matchPolicy"], "Equivalent");
    assert_eq!(hook["namespaceSelector"], json!({}));
    assert_eq!(hook["objectSelector"], json!({}));
    assert_eq!(hook["timeoutSeconds"], 10);
    assert_eq!(hook["reinvocationPolicy"], "Never");
    assert_eq!(hook["rules"][0]["scope"], "*");
    assert_eq!(hook["clientConfig"]["service"]["port"], 443);
    Ok(())
}

/// `matchConditions` choose which requests a webhook sees (CEL, on the object in the version
/// the webhook matched); conditions that cannot be evaluated refuse the request under
/// `failurePolicy: Fail` and skip the webhook under `Ignore`.
#[tokio::test]
async fn match_conditions_choose_the_requests_webhooks_see() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    cluster.serve("conditional", allow);
    let mut labelled = webhook(
        "labelled.example.com",
        service("conditional"),
        config_map_rules(&["CREATE"]),
    );
    labelled["matchConditions"] = json!([
        {"name": "labelled", "expression": "has(object.metadata.labels) && 'tier' in object.metadata.labels"},
        {"name": "not-kube-system", "expression": "request.namespace != 'kube-system'"},
    ]);
    cluster.validating("labelled", json!([labelled])).await?;
    let cms = cluster.config_maps("default");
    cms.create(&PostParams::default(), &config_map("plain", json!({})))
        .await?;
    assert!(cluster.reviews("conditional").is_empty());
    cms.create(
        &PostParams::default(),
        &config_map("web", json!({"tier": "web"})),
    )
    .await?;
    assert_eq!(cluster.reviews("conditional").len(), 1);

    // A condition that errors: Fail refuses the request, Ignore skips the webhook.
    cluster.serve("erring", allow);
    let erring = |name: &str, policy: &str| {
        let mut hook = webhook(name, service("erring"), config_map_rules(&["CREATE"]));
        hook["failurePolicy"] = json!(policy);
        hook["matchConditions"] =
            json!([{"name": "missing", "expression": "object.metadata.labels['missing'] == 'x'"}]);
        hook
    };
    cluster
        .validating("ignored", json!([erring("ignored.example.com", "Ignore")]))
        .await?;
    cms.create(
        &PostParams::default(),
        &config_map("skipped", json!({"tier": "db"})),
    )
    .await?;
    assert!(cluster.reviews("erring").is_empty());
    cluster
        .validating("failing", json!([erring("failing.example.com", "Fail")]))
        .await?;
    let e = cms
        .create(
            &PostParams::default(),
            &config_map("refused", json!({"tier": "db"})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused(e),
        (
            403,
            "Forbidden".into(),
            r#"configmaps "refused" is forbidden: expression 'object.metadata.labels['missing'] == 'x'' resulted in error: no such key: missing"#.into()
        )
    );
    assert!(cluster.reviews("erring").is_empty());
    assert!(cms.get_opt("refused").await?.is_none());
    Ok(())
}

/// `matchConditions` are compiled when a configuration is written: in the environment of
/// webhooks, which has no `params`.
#[tokio::test]
async fn match_conditions_that_do_not_compile_are_refused() -> anyhow::Result<()> {
    let cluster = Cluster::new().await;
    let mut hook = webhook(
        "compiled.example.com",
        service("compiled"),
        config_map_rules(&["CREATE"]),
    );
    hook["matchConditions"] = json!([
        {"name": "params", "expression": "params.x == 1"},
        {"name": "typed", "expression": "object.metadata.name"},
    ]);
    let (code, body, _) = cluster
        .call(
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "compiled"}, "webhooks": [hook],
            }),
        )
        .await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        body["message"],
        concat!(
            r#"ValidatingWebhookConfiguration.admissionregistration.k8s.io "compiled" is invalid: ["#,
            r#"webhooks[0].matchConditions[0].expression: Invalid value: "params.x == 1": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')"#,
            "\n | params.x == 1\n | ^, ",
            r#"webhooks[0].matchConditions[1].expression: Invalid value: "object.metadata.name": must evaluate to bool but got dyn]"#,
        )
    );
    Ok(())
}
