//! APIServices served by an aggregated API server: kube-aggregator's availability checks
//! (reasons and messages), the proxy (the user in `X-Remote-*` headers, the front proxy's
//! client certificate verified by the CA published in `extension-apiserver-authentication`,
//! watches streamed) and discovery, against a real HTTPS server on a loopback port.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bytes::Bytes;
use common::eventually::eventually_some;
use common::{Backend, TestServer};
use futures::StreamExt as _;
use serde_json::{Value, json};

const GROUP: &str = "wardle.example.com";
const NAME: &str = "v1alpha1.wardle.example.com";
const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";

/// What the aggregated server saw of each request: path and query, headers, and the common
/// name of the client certificate presented.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: http::HeaderMap,
}

/// An aggregated API server for `wardle.example.com/v1alpha1` over HTTPS, accepting only
/// client certificates signed by `client_ca` (PEM): its address, its CA (PEM), what it saw,
/// a gate its watches wait on between their two events, and its listener's task (aborted,
/// it takes no more connections).
async fn wardle_server(
    client_ca: &str,
) -> (
    SocketAddr,
    String,
    Arc<Mutex<Vec<Seen>>>,
    Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<()>,
) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "wardle CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["api.wardle.svc".to_string()])
        .unwrap()
        .signed_by(&key, &*ca)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for der in rustls::pki_types::CertificateDer::pem_slice_iter(client_ca.as_bytes()) {
        roots.add(der.unwrap()).unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(tokio::sync::Notify::new());
    let (seen_by_server, gate_of_server) = (seen.clone(), gate.clone());
    let listening = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen, gate) = (
                acceptor.clone(),
                seen_by_server.clone(),
                gate_of_server.clone(),
            );
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (seen, gate) = (seen.clone(), gate.clone());
                        async move {
                            let path = req.uri().to_string();
                            seen.lock().unwrap().push(Seen {
                                path: path.clone(),
                                headers: req.headers().clone(),
                            });
                            Ok::<_, std::convert::Infallible>(answer(&path, gate))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, ca.pem(), seen, gate, listening)
}

type Body = http_body_util::StreamBody<
    futures::stream::BoxStream<
        'static,
        Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
    >,
>;

fn body_of(value: Value) -> Body {
    let bytes = Bytes::from(serde_json::to_vec(&value).unwrap());
    http_body_util::StreamBody::new(Box::pin(futures::stream::once(async move {
        Ok(hyper::body::Frame::data(bytes))
    })))
}

/// The aggregated server's answers: its legacy discovery, a list of flunders, and a watch
/// that sends one event, waits for the gate, then sends another.
fn answer(path: &str, gate: Arc<tokio::sync::Notify>) -> http::Response<Body> {
    let json = |status: u16, value: Value| {
        http::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(body_of(value))
            .unwrap()
    };
    if path == "/apis/wardle.example.com/v1alpha1" {
        return json(
            200,
            json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": "wardle.example.com/v1alpha1",
                "resources": [
                    {"name": "flunders", "singularName": "flunder", "namespaced": true,
                     "kind": "Flunder", "verbs": ["create", "get", "list", "watch"]},
                ],
            }),
        );
    }
    if path.starts_with(FLUNDERS) && path.contains("watch=true") {
        let event = |name: &str| {
            let mut line = serde_json::to_vec(&json!({"type": "ADDED", "object": {
                "apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                "metadata": {"name": name, "namespace": "default"}}}))
            .unwrap();
            line.push(b'\n');
            Ok(hyper::body::Frame::data(Bytes::from(line)))
        };
        let stream = futures::stream::once(async move { event("first") }).chain(
            futures::stream::once(async move {
                gate.notified().await;
                event("second")
            }),
        );
        return http::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(http_body_util::StreamBody::new(stream.boxed()))
            .unwrap();
    }
    if path.starts_with(FLUNDERS) {
        return json(
            200,
            json!({"kind": "FlunderList", "apiVersion": "wardle.example.com/v1alpha1",
                   "metadata": {}, "items": []}),
        );
    }
    json(
        404,
        json!({"kind": "Status", "status": "Failure", "code": 404}),
    )
}

async fn condition(t: &TestServer, name: &str, reason: &str) -> Value {
    let path = format!("/apis/apiregistration.k8s.io/v1/apiservices/{name}");
    eventually_some(&format!("{name} to be {reason}"), || async {
        let (_, service) = t.call("GET", &path, Value::Null).await;
        let condition = service["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Available")?
            .clone();
        (condition["reason"] == reason).then_some(condition)
    })
    .await
}

/// A GET through the in-process router: status, content type, body as text.
async fn get_text(t: &TestServer, path: &str, accept: Option<&str>) -> (u16, String, String) {
    use tower::ServiceExt;
    let mut request = http::Request::builder().uri(path);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = t
        .router
        .clone()
        .oneshot(request.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        content_type,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn an_aggregated_api_is_checked_proxied_and_discovered_as_kube_aggregator_does() {
    let t = TestServer::start(Backend::Memory).await;
    // What an aggregated server trusts the front proxy by, as kube-apiserver publishes it.
    let (code, auth) = t
        .call(
            "GET",
            "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
            Value::Null,
        )
        .await;
    assert_eq!(code, 200, "{auth}");
    let data = &auth["data"];
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );
    let client_ca = data["requestheader-client-ca-file"].as_str().expect("a CA");
    let (addr, server_ca, seen, gate, listening) = wardle_server(client_ca).await;

    // Registered before its Service exists: not available, and nothing is proxied.
    let (code, created) = t
        .call(
            "POST",
            "/apis/apiregistration.k8s.io/v1/apiservices",
            json!({
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": NAME},
                "spec": {
                    "group": GROUP, "version": "v1alpha1",
                    "service": {"namespace": "wardle", "name": "api", "port": 443},
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(&server_ca),
                    "groupPriorityMinimum": 2000, "versionPriority": 200,
                },
            }),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    let missing = condition(&t, NAME, "ServiceNotFound").await;
    assert_eq!(missing["status"], "False");
    assert_eq!(
        missing["message"],
        "service/api in \"wardle\" is not present"
    );
    let (code, content_type, body) = get_text(&t, FLUNDERS, None).await;
    assert_eq!(
        (code, content_type.as_str(), body.as_str()),
        (503, "text/plain; charset=utf-8", "service unavailable\n")
    );

    // Its Service, then its endpoints: each check in kube's order, with kube's words.
    let (code, _) = t
        .call(
            "POST",
            "/api/v1/namespaces",
            json!({"metadata": {"name": "wardle"}}),
        )
        .await;
    assert_eq!(code, 201);
    let (code, service) = t
        .call(
            "POST",
            "/api/v1/namespaces/wardle/services",
            json!({"metadata": {"name": "api"}, "spec": {"ports": [{"port": 443, "targetPort": addr.port()}]}}),
        )
        .await;
    assert_eq!(code, 201, "{service}");
    let no_endpoints = condition(&t, NAME, "EndpointsNotFound").await;
    assert_eq!(
        no_endpoints["message"],
        "cannot find endpoints for service/api in \"wardle\""
    );
    let (code, _) = t
        .call(
            "POST",
            "/api/v1/namespaces/wardle/endpoints",
            json!({"metadata": {"name": "api"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": addr.port()}]}]}),
        )
        .await;
    assert_eq!(code, 201);
    let (code, slice) = t
        .call(
            "POST",
            "/apis/discovery.k8s.io/v1/namespaces/wardle/endpointslices",
            json!({"metadata": {"name": "api-1", "labels": {"kubernetes.io/service-name": "api"}},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": ["127.0.0.1"]}],
                   "ports": [{"name": "", "port": addr.port()}]}),
        )
        .await;
    assert_eq!(code, 201, "{slice}");
    let passed = condition(&t, NAME, "Passed").await;
    assert_eq!(passed["status"], "True");
    assert_eq!(passed["message"], "all checks passed");
    {
        let seen = seen.lock().unwrap();
        let check = seen
            .iter()
            .find(|s| s.path == "/apis/wardle.example.com/v1alpha1")
            .expect("the discovery check");
        assert_eq!(check.headers["x-remote-user"], "system:kube-aggregator");
        assert_eq!(check.headers["x-remote-group"], "system:masters");
    }

    // Proxied as the user, with what proved who they are left behind.
    let (code, _, body) = get_text(&t, &format!("{FLUNDERS}?limit=5"), None).await;
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "FlunderList");
    let request = seen
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s.path.starts_with(FLUNDERS))
        .cloned()
        .expect("the proxied request");
    assert_eq!(request.path, format!("{FLUNDERS}?limit=5"));
    assert!(request.headers.get("x-remote-user").is_some());
    let groups: Vec<&str> = request
        .headers
        .get_all("x-remote-group")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert!(groups.contains(&"system:authenticated"), "{groups:?}");
    assert!(request.headers.get("authorization").is_none());

    // A watch is streamed: its first event arrives while the server holds the second.
    let (code, first) = t.first_chunk(&format!("{FLUNDERS}?watch=true")).await;
    assert_eq!(code, 200);
    assert!(first.contains("\"first\""), "{first}");
    gate.notify_waiters();

    // Discovery: the group in /apis and /apis/{group}, its resources in aggregated discovery.
    let (_, groups) = t.call("GET", "/apis", Value::Null).await;
    let wardle = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == GROUP)
        .expect("the group in /apis");
    assert_eq!(
        wardle["preferredVersion"],
        json!({"groupVersion": "wardle.example.com/v1alpha1", "version": "v1alpha1"})
    );
    let (code, group) = t.call("GET", "/apis/wardle.example.com", Value::Null).await;
    assert_eq!(code, 200);
    assert_eq!(group["kind"], "APIGroup");
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let version = eventually_some("the discovered resources", || async {
        let (_, _, body) = get_text(&t, "/apis", Some(aggregated)).await;
        let list: Value = serde_json::from_str(&body).ok()?;
        let version = list["items"]
            .as_array()?
            .iter()
            .find(|g| g["metadata"]["name"] == GROUP)?["versions"][0]
            .clone();
        (version["freshness"] == "Current").then_some(version)
    })
    .await;
    assert_eq!(version["resources"][0]["resource"], "flunders");
    assert_eq!(version["resources"][0]["scope"], "Namespaced");

    // A port the Service does not have.
    let (code, _) = t
        .call(
            "POST",
            "/apis/apiregistration.k8s.io/v1/apiservices",
            json!({"metadata": {"name": "v1beta1.wardle.example.com"},
                   "spec": {"group": GROUP, "version": "v1beta1", "insecureSkipTLSVerify": true,
                            "service": {"namespace": "wardle", "name": "api", "port": 8443},
                            "groupPriorityMinimum": 2000, "versionPriority": 100}}),
        )
        .await;
    assert_eq!(code, 201);
    let port = condition(&t, "v1beta1.wardle.example.com", "ServicePortError").await;
    assert_eq!(
        port["message"],
        "service/api in \"wardle\" is not listening on port 8443"
    );

    // The server goes away: the next check (its Endpoints touched) fails as kube words it,
    // nothing is proxied, and its discovery is kept but stale.
    listening.abort();
    let _ = listening.await;
    let endpoints = "/api/v1/namespaces/wardle/endpoints/api";
    let (_, mut touched) = t.call("GET", endpoints, Value::Null).await;
    touched["metadata"]["labels"] = json!({"touched": "yes"});
    let (code, _) = t.call("PUT", endpoints, touched).await;
    assert_eq!(code, 200);
    // (A check already under way when the listener closed may fail otherwise first: its
    // connection reset. The check the change brings finds nothing listening.)
    let url = format!("https://{addr}/apis/wardle.example.com/v1alpha1");
    let refused = format!(
        "failing or missing response from {url}: Get \"{url}\": dial tcp {addr}: connect: connection refused"
    );
    let path = format!("/apis/apiregistration.k8s.io/v1/apiservices/{NAME}");
    eventually_some("the check to find nothing listening", || async {
        let (_, service) = t.call("GET", &path, Value::Null).await;
        let condition = service["status"]["conditions"][0].clone();
        (condition["reason"] == "FailedDiscoveryCheck" && condition["message"] == refused.as_str())
            .then_some(())
    })
    .await;
    let unavailable = eventually_some("the proxy to stop", || async {
        let answer = get_text(&t, FLUNDERS, None).await;
        (answer.0 == 503).then_some(answer)
    })
    .await;
    assert_eq!(unavailable.2, "service unavailable\n");
    let (_, _, body) = get_text(&t, "/apis", Some(aggregated)).await;
    let list: Value = serde_json::from_str(&body).unwrap();
    let stale = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == GROUP)
        .expect("still listed")["versions"][0]
        .clone();
    assert_eq!(stale["freshness"], "Stale");
    assert_eq!(stale["resources"][0]["resource"], "flunders");
}
