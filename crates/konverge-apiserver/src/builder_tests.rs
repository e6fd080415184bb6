//! The builder's kube-apiserver flags, through the server's own router: the service IP range
//! and advertised address (`--service-cluster-ip-range`, `--advertise-address`,
//! `--secure-port`), the ServiceAccount issuer and keys (`--service-account-issuer`,
//! `--service-account-key-file`), `--allow-privileged`, and what runs without
//! kube-controller-manager's loops.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use konverge_store::{KvStore, MemStore};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::auth::tokens::ServiceAccountTokens;
use rcgen::PublicKeyData as _;

use crate::{ApiServer, ApiServerBuilder, ServiceIpRange};

fn builder() -> ApiServerBuilder {
    ApiServer::builder(Arc::new(MemStore::new())).control_loops(false)
}

/// Sends a request (as the admin: the servers here require no token, unless `bearer` is
/// given) and returns the status and the JSON answer.
async fn call_as(
    server: &Arc<ApiServer>,
    method: Method,
    path: &str,
    body: Option<Value>,
    bearer: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = bearer {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = match body {
        Some(body) => request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .expect("request");
    let response = server.router().oneshot(request).await.expect("answered");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

async fn call(
    server: &Arc<ApiServer>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    call_as(server, method, path, body, None).await
}

/// POSTs a Service named `name` with `spec` to `default`.
async fn create_service(server: &Arc<ApiServer>, name: &str, spec: Value) -> (StatusCode, Value) {
    call(
        server,
        Method::POST,
        "/api/v1/namespaces/default/services",
        Some(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})),
    )
    .await
}

async fn get(server: &Arc<ApiServer>, path: &str) -> Value {
    let (status, value) = call(server, Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "GET {path}: {value}");
    value
}

// -------------------------------------------------------------------------------------------
// Service IP range and advertised address.

#[test]
fn service_ip_ranges_parse_as_kube_apiserver_checks_them() {
    let default = ServiceIpRange::default();
    assert_eq!(default.to_string(), "10.96.0.0/12");
    assert_eq!(default.kubernetes_service_ip(), Ipv4Addr::new(10, 96, 0, 1));
    let range: ServiceIpRange = "10.0.0.0/24".parse().expect("valid");
    assert_eq!(range.to_string(), "10.0.0.0/24");
    assert_eq!(range.kubernetes_service_ip(), Ipv4Addr::new(10, 0, 0, 1));
    assert!(range.contains(Ipv4Addr::new(10, 0, 0, 254)));
    assert!(!range.contains(Ipv4Addr::new(10, 0, 1, 1)));
    // Host bits name the network, as Go's ParseCIDR does.
    let sloppy: ServiceIpRange = "172.20.5.9/16".parse().expect("valid");
    assert_eq!(sloppy.to_string(), "172.20.0.0/16");
    assert_eq!(sloppy.kubernetes_service_ip(), Ipv4Addr::new(172, 20, 0, 1));
    // The extremes kube-apiserver accepts: /12 and /29.
    assert!("10.96.0.0/12".parse::<ServiceIpRange>().is_ok());
    assert!("10.0.0.8/29".parse::<ServiceIpRange>().is_ok());

    let error = |text: &str| text.parse::<ServiceIpRange>().expect_err(text);
    for bad in [
        "",
        "10.0.0.0",
        "10.0.0.0/33",
        "10.0.0/24",
        "ten/8",
        "10.0.0.0/+24",
    ] {
        assert_eq!(
            error(bad),
            "service-cluster-ip-range[0] is not a valid cidr",
            "{bad:?}"
        );
    }
    assert_eq!(
        error("10.0.0.0/8"),
        "specified --service-cluster-ip-range is too large; for 32-bit addresses, the mask must be >= 12"
    );
    assert_eq!(
        error("10.0.0.0/30"),
        "error determining service IP ranges for primary service cidr: the service cluster IP range must be at least 8 IP addresses"
    );
    assert_eq!(
        error("fd00:10:96::/112"),
        "konverge allocates IPv4 service IPs only: the IPv6 service-cluster-ip-range \"fd00:10:96::/112\" is not supported"
    );
    assert_eq!(
        error("10.96.0.0/12,fd00:10:96::/112"),
        "konverge allocates IPv4 service IPs only: the dual-stack service-cluster-ip-range \"10.96.0.0/12,fd00:10:96::/112\" is not supported"
    );
}

#[tokio::test]
async fn services_get_ips_from_the_configured_range_and_kubernetes_points_at_the_advertised_address()
 {
    let range: ServiceIpRange = "10.0.0.0/24".parse().expect("valid");
    let server = builder()
        .service_ip_range(range.clone())
        .advertise(IpAddr::V4(Ipv4Addr::new(192, 168, 7, 5)), 8443)
        .build()
        .await
        .expect("server");

    // The range is the `kubernetes` ServiceCIDR, Ready as kube-apiserver makes it.
    let cidr = get(
        &server,
        "/apis/networking.k8s.io/v1/servicecidrs/kubernetes",
    )
    .await;
    assert_eq!(cidr["spec"]["cidrs"], json!(["10.0.0.0/24"]));
    let ready = &cidr["status"]["conditions"][0];
    assert_eq!(
        (&ready["type"], &ready["status"], &ready["message"]),
        (
            &json!("Ready"),
            &json!("True"),
            &json!("Kubernetes default Service CIDR is ready")
        )
    );

    let kubernetes = get(&server, "/api/v1/namespaces/default/services/kubernetes").await;
    assert_eq!(kubernetes["spec"]["clusterIP"], "10.0.0.1");
    assert_eq!(kubernetes["spec"]["clusterIPs"], json!(["10.0.0.1"]));
    assert_eq!(
        kubernetes["spec"]["ports"],
        json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}])
    );
    let slice = assert_endpoints(&server, "192.168.7.5", 8443).await;
    assert_eq!(slice["addressType"], "IPv4");

    // A new Service gets an IP of the range (neither the network nor the broadcast address).
    let (status, web) = create_service(&server, "web", json!({"ports": [{"port": 80}]})).await;
    assert_eq!(status, StatusCode::CREATED, "{web}");
    let ip: Ipv4Addr = web["spec"]["clusterIP"]
        .as_str()
        .expect("an IP")
        .parse()
        .expect("IPv4");
    assert!(range.contains(ip), "{ip}");
    assert!(ip != Ipv4Addr::new(10, 0, 0, 0) && ip != Ipv4Addr::new(10, 0, 0, 255));
    let address = get(
        &server,
        &format!("/apis/networking.k8s.io/v1/ipaddresses/{ip}"),
    )
    .await;
    assert_eq!(address["spec"]["parentRef"]["name"], "web");

    // One asked for outside the range is refused, naming the range.
    let (status, refused) = create_service(
        &server,
        "outside",
        json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(
        refused["message"],
        "Service \"outside\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.10\"}: failed to allocate IP 10.96.0.10: the provided IP (10.96.0.10) is not in the valid range. The range of valid IPs is 10.0.0.0/24"
    );
    // One inside is kept.
    let (status, inside) = create_service(
        &server,
        "inside",
        json!({"clusterIP": "10.0.0.77", "ports": [{"port": 80}]}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{inside}");
    assert_eq!(inside["spec"]["clusterIP"], "10.0.0.77");

    // Another ServiceCIDR widens what may be asked for, as in Kubernetes 1.33.
    let (status, extra) = call(
        &server,
        Method::POST,
        "/apis/networking.k8s.io/v1/servicecidrs",
        Some(
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
            "metadata": {"name": "extra"}, "spec": {"cidrs": ["10.1.0.0/24"]}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{extra}");
    let (status, widened) = create_service(
        &server,
        "widened",
        json!({"clusterIP": "10.1.0.5", "ports": [{"port": 80}]}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{widened}");
    assert_eq!(widened["spec"]["clusterIP"], "10.1.0.5");
}

#[tokio::test]
async fn the_default_range_and_address_are_kubeadms_and_a_restart_repoints_the_endpoints() {
    let store: Arc<dyn KvStore> = Arc::new(MemStore::new());
    let first = ApiServer::builder(store.clone())
        .control_loops(false)
        .build()
        .await
        .expect("server");
    let cidr = get(&first, "/apis/networking.k8s.io/v1/servicecidrs/kubernetes").await;
    assert_eq!(cidr["spec"]["cidrs"], json!(["10.96.0.0/12"]));
    let kubernetes = get(&first, "/api/v1/namespaces/default/services/kubernetes").await;
    assert_eq!(kubernetes["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(kubernetes["spec"]["ports"][0]["targetPort"], 6443);
    let endpoints = get(&first, "/api/v1/namespaces/default/endpoints/kubernetes").await;
    assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
    assert_eq!(endpoints["subsets"][0]["ports"][0]["port"], 6443);
    first.stop();
    drop(first);

    // Restarted on the same store, advertising another (IPv6) address and port: corrected
    // once the server serves, as kube-apiserver's bootstrap controller corrects them after
    // its `/readyz` answers.
    let second = ApiServer::builder(store)
        .control_loops(false)
        .advertise(IpAddr::V6(Ipv6Addr::LOCALHOST), 7443)
        .build()
        .await
        .expect("server");
    let repointed = async {
        loop {
            let kubernetes = get(&second, "/api/v1/namespaces/default/services/kubernetes").await;
            let endpoints = get(&second, "/api/v1/namespaces/default/endpoints/kubernetes").await;
            if kubernetes["spec"]["ports"][0]["targetPort"] == 7443
                && endpoints["subsets"][0]["ports"][0]["port"] == 7443
            {
                return kubernetes;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let kubernetes = tokio::time::timeout(Duration::from_secs(10), repointed)
        .await
        .expect("the restarted server repoints the kubernetes Service and endpoints");
    assert_eq!(kubernetes["spec"]["clusterIP"], "10.96.0.1");
    assert_endpoints(&second, "::1", 7443).await;
}

/// Asserts the `kubernetes` Endpoints and EndpointSlice point at `ip`:`port`; returns the
/// slice.
async fn assert_endpoints(server: &Arc<ApiServer>, ip: &str, port: u16) -> Value {
    let endpoints = get(server, "/api/v1/namespaces/default/endpoints/kubernetes").await;
    assert_eq!(
        endpoints["subsets"],
        json!([{
            "addresses": [{"ip": ip}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }])
    );
    let slice = get(
        server,
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes",
    )
    .await;
    assert_eq!(slice["endpoints"][0]["addresses"], json!([ip]));
    assert_eq!(slice["ports"][0]["port"], port);
    slice
}

// -------------------------------------------------------------------------------------------
// ServiceAccount tokens: issuer and keys.

/// A token for `default/builder` for the default audience, valid for an hour from `now`.
fn hour_token(tokens: &ServiceAccountTokens, uid: &str, now: i64) -> String {
    tokens.issue(
        "default",
        "builder",
        uid,
        &[ISSUER.to_string()],
        now,
        3600,
        None,
    )
}

/// The claims of a JWT, unverified.
fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url")).expect("JSON")
}

async fn service_account(server: &Arc<ApiServer>, name: &str) {
    let (status, answer) = call(
        server,
        Method::POST,
        "/api/v1/namespaces/default/serviceaccounts",
        Some(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
}

async fn token_request(server: &Arc<ApiServer>, name: &str, spec: Value) -> (StatusCode, Value) {
    call(
        server,
        Method::POST,
        &format!("/api/v1/namespaces/default/serviceaccounts/{name}/token"),
        Some(
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}),
        ),
    )
    .await
}

async fn token_review(server: &Arc<ApiServer>, spec: Value) -> Value {
    let (status, review) = call(
        server,
        Method::POST,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        Some(
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{review}");
    review
}

/// Who a bearer token is, by `SelfSubjectReview`.
async fn whoami(server: &Arc<ApiServer>, token: &str) -> (StatusCode, Value) {
    call_as(
        server,
        Method::POST,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
        Some(token),
    )
    .await
}

const ISSUER: &str = "https://envtest.example/issuer";

#[tokio::test]
async fn tokens_carry_the_configured_issuer_which_is_their_default_audience() {
    let server = builder()
        .service_account_issuer(ISSUER)
        .build()
        .await
        .expect("server");
    service_account(&server, "builder").await;
    let (status, request) = token_request(&server, "builder", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{request}");
    assert_eq!(request["spec"]["audiences"], json!([ISSUER]));
    let token = request["status"]["token"].as_str().expect("a token");
    let issued = claims(token);
    assert_eq!(issued["iss"], ISSUER);
    assert_eq!(issued["aud"], json!([ISSUER]));

    // A TokenReview without audiences checks for the issuer; a bearer token authenticates.
    let review = token_review(&server, json!({"token": token})).await;
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(review["status"]["audiences"], json!([ISSUER]));
    assert_eq!(
        review["status"]["user"]["username"],
        "system:serviceaccount:default:builder"
    );
    let (status, me) = whoami(&server, token).await;
    assert_eq!(status, StatusCode::CREATED, "{me}");
    assert_eq!(
        me["status"]["userInfo"]["username"],
        "system:serviceaccount:default:builder"
    );

    // A token for another audience only is not for the API.
    let (_, vault) = token_request(&server, "builder", json!({"audiences": ["vault"]})).await;
    let vault_token = vault["status"]["token"].as_str().expect("a token");
    let (status, _) = whoami(&server, vault_token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The discovery document names the issuer.
    let discovery = get(&server, "/.well-known/openid-configuration").await;
    assert_eq!(discovery["issuer"], ISSUER);

    // A token this key signed for another issuer is not accepted.
    let tokens = server.service_account_tokens();
    assert_eq!(tokens.issuer(), ISSUER);
    let audience = [ISSUER.to_string()];
    let now = jiff::Timestamp::now().as_second();
    let ours = tokens.issue("default", "builder", "u", &audience, now, 600, None);
    assert!(tokens.verify(&ours, &audience, now).is_some());
    let mut elsewhere = claims(&ours);
    elsewhere["iss"] = json!(crate::auth::tokens::ISSUER);
    let key = ServiceAccountTokens::generate_key();
    let default_issuer = ServiceAccountTokens::from_pkcs8(&key).expect("key");
    let this_issuer = ServiceAccountTokens::from_pkcs8(&key)
        .expect("key")
        .with_issuer(ISSUER);
    let theirs = default_issuer.issue("default", "builder", "u", &audience, now, 600, None);
    assert_eq!(claims(&theirs)["iss"], crate::auth::tokens::ISSUER);
    assert!(this_issuer.verify(&theirs, &audience, now).is_none());
    assert!(default_issuer.verify(&theirs, &audience, now).is_some());
}

/// The SubjectPublicKeyInfo DER of a P-256 key in PKCS#8 DER.
fn spki_of(pkcs8: &[u8]) -> Vec<u8> {
    rcgen::KeyPair::try_from(pkcs8)
        .expect("a key")
        .subject_public_key_info()
}

#[tokio::test]
async fn tokens_signed_by_any_configured_public_key_are_accepted_and_published() {
    let signing = ServiceAccountTokens::generate_key();
    let other = ServiceAccountTokens::generate_key();
    let server = builder()
        .service_account_key(signing.clone())
        .service_account_issuer(ISSUER)
        // The signing key's own public key among them, as envtest passes both files.
        .service_account_public_keys(vec![spki_of(&signing), spki_of(&other)])
        .build()
        .await
        .expect("server");
    service_account(&server, "builder").await;
    let account = get(
        &server,
        "/api/v1/namespaces/default/serviceaccounts/builder",
    )
    .await;
    let uid = account["metadata"]["uid"].as_str().expect("uid");

    // A token signed elsewhere with the other key (another API server of the cluster).
    let elsewhere = ServiceAccountTokens::from_pkcs8(&other)
        .expect("key")
        .with_issuer(ISSUER);
    let now = jiff::Timestamp::now().as_second();
    let token = hour_token(&elsewhere, uid, now);
    let (status, me) = whoami(&server, &token).await;
    assert_eq!(status, StatusCode::CREATED, "{me}");
    assert_eq!(
        me["status"]["userInfo"]["username"],
        "system:serviceaccount:default:builder"
    );

    // Both keys are published, the signing key first, each once.
    let jwks = get(&server, "/openid/v1/jwks").await;
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["kid"].as_str().expect("kid"))
        .collect();
    let signing_kid = ServiceAccountTokens::from_pkcs8(&signing)
        .expect("key")
        .jwks()["keys"][0]["kid"]
        .clone();
    let other_kid = elsewhere.jwks()["keys"][0]["kid"].clone();
    assert_eq!(
        kids,
        [signing_kid.as_str().unwrap(), other_kid.as_str().unwrap()]
    );

    // A token of a key the server was not given is refused.
    let stranger = ServiceAccountTokens::generate().with_issuer(ISSUER);
    let forged = hour_token(&stranger, uid, now);
    let (status, _) = whoami(&server, &forged).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_public_key_that_is_not_p256_fails_the_build() {
    let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).expect("key");
    let error = builder()
        .service_account_public_keys(vec![
            spki_of(&ServiceAccountTokens::generate_key()),
            p384.subject_public_key_info(),
        ])
        .build()
        .await
        .expect_err("not P-256");
    assert_eq!(
        error.message,
        "Internal error occurred: the service account keys: public key 1 is not an ECDSA P-256 public key (SubjectPublicKeyInfo DER): konverge signs and verifies ES256 tokens only"
    );
    let garbage = builder()
        .service_account_public_keys(vec![b"not a key".to_vec()])
        .build()
        .await
        .expect_err("not a key");
    assert!(
        garbage
            .message
            .contains("public key 0 is not an ECDSA P-256 public key")
    );
}

/// A DER length.
fn der_len(len: usize) -> Vec<u8> {
    match len {
        0..=0x7f => vec![len as u8],
        0x80..=0xff => vec![0x81, len as u8],
        _ => vec![0x82, (len >> 8) as u8, len as u8],
    }
}

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend(der_len(content.len()));
    out.extend_from_slice(content);
    out
}

/// An ECDSA P-256 key laid out as Go's `x509.MarshalPKCS8PrivateKey` writes it (what
/// controller-runtime's envtest writes as the service account signing key): the curve in the
/// algorithm identifier, and an ECPrivateKey holding the 32-byte scalar and the public key,
/// without the optional curve parameters.
fn go_pkcs8(scalar: &[u8; 32], point: &[u8]) -> Vec<u8> {
    const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    const PRIME256V1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    let mut bit_string = vec![0x00];
    bit_string.extend_from_slice(point);
    let ec_private_key = der(
        0x30,
        &[
            der(0x02, &[1]),
            der(0x04, scalar),
            der(0xa1, &der(0x03, &bit_string)),
        ]
        .concat(),
    );
    let algorithm = der(
        0x30,
        &[der(0x06, EC_PUBLIC_KEY), der(0x06, PRIME256V1)].concat(),
    );
    der(
        0x30,
        &[der(0x02, &[0]), algorithm, der(0x04, &ec_private_key)].concat(),
    )
}

#[tokio::test]
async fn a_go_pkcs8_p256_key_signs_the_tokens() {
    // A key pair made elsewhere (rcgen), its scalar and point written out as Go writes them.
    let generated = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let pkcs8 = generated.serialize_der();
    // The scalar is the OCTET STRING of length 32 in the ECPrivateKey, the point the last
    // 65 bytes.
    let at = pkcs8
        .windows(2)
        .position(|w| w == [0x04, 0x20])
        .expect("the scalar");
    let scalar: [u8; 32] = pkcs8[at + 2..at + 34].try_into().expect("32 bytes");
    let point = &pkcs8[pkcs8.len() - 65..];
    assert_eq!(point[0], 0x04, "an uncompressed point");
    let go = go_pkcs8(&scalar, point);
    assert_eq!(go.len(), 138, "Go's 138-byte P-256 PKCS#8");
    assert_eq!(&go[..4], &[0x30, 0x81, 0x87, 0x02]);

    let server = builder()
        .service_account_key(go)
        .build()
        .await
        .expect("the Go key is taken");
    service_account(&server, "builder").await;
    let (status, request) = token_request(&server, "builder", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{request}");
    let token = request["status"]["token"].as_str().expect("a token");
    let (status, me) = whoami(&server, token).await;
    assert_eq!(status, StatusCode::CREATED, "{me}");
    // The key id is kube-apiserver's for the same public key.
    let jwks = get(&server, "/openid/v1/jwks").await;
    let spki = generated.subject_public_key_info();
    let kid = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
    assert_eq!(jwks["keys"][0]["kid"], kid);
}

// -------------------------------------------------------------------------------------------
// --allow-privileged.

fn privileged_container(name: &str) -> Value {
    json!({"name": name, "image": "busybox", "securityContext": {"privileged": true}})
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"initContainers": [privileged_container("init")],
                 "containers": [{"name": "plain", "image": "busybox"}, privileged_container("c")]}})
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}},
                              "spec": {"containers": [privileged_container("c")]}}}})
}

#[tokio::test]
async fn privileged_containers_are_refused_when_not_allowed() {
    let strict = builder()
        .allow_privileged(false)
        .build()
        .await
        .expect("server");
    // Without kube-controller-manager nobody makes it, and the ServiceAccount admission
    // plugin wants it.
    service_account(&strict, "default").await;
    let (status, refused) = call(
        &strict,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(pod()),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["reason"], "Invalid");
    assert_eq!(
        refused["message"],
        "Pod \"p\" is invalid: [spec.containers[1].securityContext.privileged: Forbidden: disallowed by cluster policy, spec.initContainers[0].securityContext.privileged: Forbidden: disallowed by cluster policy]"
    );
    let causes = &refused["details"]["causes"];
    assert_eq!(causes[0]["reason"], "FieldValueForbidden");
    assert_eq!(
        causes[0]["field"],
        "spec.containers[1].securityContext.privileged"
    );

    let (status, refused) = call(
        &strict,
        Method::POST,
        "/apis/apps/v1/namespaces/default/deployments",
        Some(deployment()),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(
        refused["message"],
        "Deployment.apps \"d\" is invalid: spec.template.spec.containers[0].securityContext.privileged: Forbidden: disallowed by cluster policy"
    );

    // An unprivileged pod is fine; making it privileged by an update is refused too.
    let mut plain = pod();
    plain["spec"] = json!({"containers": [{"name": "plain", "image": "busybox"}]});
    let (status, created) = call(
        &strict,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(plain),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let mut with_debugger = created.clone();
    with_debugger["spec"]["ephemeralContainers"] = json!([{
        "name": "debugger", "image": "busybox", "securityContext": {"privileged": true},
    }]);
    let (status, refused) = call(
        &strict,
        Method::PUT,
        "/api/v1/namespaces/default/pods/p/ephemeralcontainers",
        Some(with_debugger),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(
        refused["details"]["causes"][0]["field"],
        "spec.ephemeralContainers[0].securityContext.privileged"
    );

    // The default server allows them, as `konverge up` does.
    let allowing = builder().build().await.expect("server");
    service_account(&allowing, "default").await;
    let (status, created) = call(
        &allowing,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(pod()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
}

// -------------------------------------------------------------------------------------------
// control_loops(false): kube-apiserver without kube-controller-manager.

#[tokio::test(start_paused = true)]
async fn without_control_loops_the_server_does_only_what_kube_apiserver_does() {
    let server = builder()
        .root_ca("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        .compaction_interval(Duration::from_secs(1))
        .build()
        .await
        .expect("server");

    // kube-apiserver's bootstrap objects are there.
    for path in [
        "/api/v1/namespaces/kube-system",
        "/api/v1/namespaces/kube-node-lease",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:discovery",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin",
        "/apis/scheduling.k8s.io/v1/priorityclasses/system-cluster-critical",
        "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical",
        "/api/v1/namespaces/default/services/kubernetes",
        "/apis/networking.k8s.io/v1/servicecidrs/kubernetes",
    ] {
        get(&server, path).await;
    }

    let (status, created) = call(
        &server,
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, deleted) = call(&server, Method::DELETE, "/api/v1/namespaces/team", None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    tokio::time::sleep(Duration::from_secs(30)).await;

    // kube-controller-manager's work is not done: no default ServiceAccount or root CA
    // ConfigMap in any namespace, and a deleted namespace stays Terminating.
    for ns in ["default", "kube-system"] {
        let (status, _) = call(
            &server,
            Method::GET,
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/default"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{ns}");
        let (status, _) = call(
            &server,
            Method::GET,
            &format!("/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{ns}");
    }
    let team = get(&server, "/api/v1/namespaces/team").await;
    assert_eq!(team["status"]["phase"], "Terminating");
    assert_eq!(team["spec"]["finalizers"], json!(["kubernetes"]));

    // Compaction, kube-apiserver's own, runs: history older than an interval is gone.
    let store = server.registry().store().clone();
    let before = store.current_revision().await.expect("revision");
    let (status, _) = call(
        &server,
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let old = store
        .range(
            konverge_store::RangeRequest::new(konverge_store::KeyRange::prefix(
                bytes::Bytes::from_static(b"/registry/"),
            ))
            .at_revision(before),
        )
        .await;
    assert!(
        matches!(old, Err(konverge_store::Error::Compacted { compact_revision }) if compact_revision > before),
        "{old:?}"
    );
}

// -------------------------------------------------------------------------------------------
// What kube-apiserver keeps in kube-system itself.

/// A self-signed CA certificate's PEM.
fn ca_pem(name: &str) -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.self_signed(&key).expect("certificate").pem()
}

/// Lets the server's loops act on what just happened (the clock is paused: only tasks
/// that are ready run), then reads `path`.
async fn settled(server: &Arc<ApiServer>, path: &str) -> (StatusCode, Value) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    call(server, Method::GET, path, None).await
}

#[tokio::test(start_paused = true)]
async fn the_server_keeps_its_identity_lease_and_what_it_publishes_in_kube_system() {
    use crate::controllers::kube_system::{self, Settings};
    let ca = ca_pem("konverge-test-ca");
    let server = builder()
        .client_ca(ca.clone())
        .build()
        .await
        .expect("server");

    // The identity Lease: named after the host, labelled, renewed every 10 seconds.
    let hostname = Settings::for_this_host(None).hostname;
    let id = kube_system::server_id(&hostname);
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
    let lease_path = format!("{leases}/{id}");
    let (status, lease) = settled(&server, &lease_path).await;
    assert_eq!(status, StatusCode::OK, "{lease}");
    assert_eq!(
        lease["metadata"]["labels"],
        json!({"apiserver.kubernetes.io/identity": "kube-apiserver", "kubernetes.io/hostname": hostname})
    );
    let holder = lease["spec"]["holderIdentity"].as_str().expect("holder");
    assert!(holder.starts_with(&format!("{id}_")), "{holder}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 3600);
    assert!(lease["spec"]["renewTime"].is_string(), "{lease}");
    tokio::time::sleep(Duration::from_secs(11)).await;
    let renewed = get(&server, &lease_path).await;
    assert_ne!(
        renewed["metadata"]["resourceVersion"], lease["metadata"]["resourceVersion"],
        "renewed after 10 seconds"
    );
    // A label removed by hand is put back at the next renewal.
    let mut unlabelled = renewed.clone();
    unlabelled["metadata"]["labels"] = json!({});
    let (status, _) = call(&server, Method::PUT, &lease_path, Some(unlabelled)).await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let relabelled = get(&server, &lease_path).await;
    assert_eq!(
        relabelled["metadata"]["labels"]["apiserver.kubernetes.io/identity"],
        "kube-apiserver"
    );

    // Another server's identity Lease that expired is deleted at the next hourly pass; one
    // without the label, and a current one, are left.
    let lease_of = |name: &str, labelled: bool, renew: &str| {
        let labels = if labelled {
            json!({"apiserver.kubernetes.io/identity": "kube-apiserver"})
        } else {
            json!({})
        };
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": labels},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 3600, "renewTime": renew},
        })
    };
    let future = "2999-01-01T00:00:00.000000Z";
    for (name, labelled, renew) in [
        ("apiserver-gone", true, "2020-01-01T00:00:00.000000Z"),
        ("apiserver-current", true, future),
        ("someone-elses", false, "2020-01-01T00:00:00.000000Z"),
    ] {
        let (status, body) = call(
            &server,
            Method::POST,
            leases,
            Some(lease_of(name, labelled, renew)),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let (status, _) = settled(&server, &format!("{leases}/apiserver-gone")).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the expired identity Lease is collected"
    );
    for name in ["apiserver-current", "someone-elses", id.as_str()] {
        get(&server, &format!("{leases}/{name}")).await;
    }

    // extension-apiserver-authentication: the client CA, combined with the CAs already
    // there, and the front proxy's; other keys dropped; recreated when deleted.
    let auth = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication";
    let front_proxy = server.aggregator().front_proxy().request_header_data();
    let with_front_proxy = |data: Value| {
        let mut data = data;
        for (key, value) in front_proxy.as_object().expect("data") {
            data[key] = value.clone();
        }
        data
    };
    let published = get(&server, auth).await;
    assert_eq!(
        published["data"],
        with_front_proxy(json!({"client-ca-file": ca}))
    );
    let other = ca_pem("another-front-proxy-ca");
    let mut edited = published.clone();
    edited["data"] = json!({"client-ca-file": other, "extra": "x"});
    let (status, _) = call(&server, Method::PUT, auth, Some(edited)).await;
    assert_eq!(status, StatusCode::OK);
    let (_, combined) = settled(&server, auth).await;
    assert_eq!(
        combined["data"],
        with_front_proxy(json!({"client-ca-file": format!("{other}{ca}")}))
    );
    let (status, _) = call(&server, Method::DELETE, auth, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, recreated) = settled(&server, auth).await;
    assert_eq!(status, StatusCode::OK, "{recreated}");
    assert_eq!(
        recreated["data"],
        with_front_proxy(json!({"client-ca-file": ca}))
    );

    // The legacy token tracking ConfigMap: the day tracking started; a `since` that is not a
    // date is put back; deleted, it is created again at most once per half hour.
    let tracking = "/api/v1/namespaces/kube-system/configmaps/kube-apiserver-legacy-service-account-token-tracking";
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let since = get(&server, tracking).await;
    assert_eq!(since["data"], json!({"since": today}));
    let mut garbled = since.clone();
    garbled["data"]["since"] = json!("a while ago");
    let (status, _) = call(&server, Method::PUT, tracking, Some(garbled)).await;
    assert_eq!(status, StatusCode::OK);
    let (_, restored) = settled(&server, tracking).await;
    assert_eq!(restored["data"]["since"], json!(today));
    // More than half an hour since it was created: created again at once.
    let (status, _) = call(&server, Method::DELETE, tracking, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = settled(&server, tracking).await;
    assert_eq!(status, StatusCode::OK);
    // Deleted again: not before half an hour after that.
    let (status, _) = call(&server, Method::DELETE, tracking, None).await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(29 * 60)).await;
    let (status, _) = settled(&server, tracking).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "created at most once per half hour"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (status, again) = settled(&server, tracking).await;
    assert_eq!(status, StatusCode::OK, "{again}");
}

#[tokio::test]
async fn without_a_client_ca_the_authentication_config_map_holds_the_front_proxy_only() {
    let server = builder().build().await.expect("server");
    let (status, _) = settled(
        &server,
        "/api/v1/namespaces/kube-system/configmaps/kube-apiserver-legacy-service-account-token-tracking",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, published) = call(
        &server,
        Method::GET,
        "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        published["data"],
        server.aggregator().front_proxy().request_header_data()
    );
    let names = published["data"]["requestheader-allowed-names"].clone();
    assert_eq!(names, "[\"front-proxy-client\"]");
}

#[tokio::test(start_paused = true)]
async fn custom_groups_get_apiservices_as_kube_apiserver_registers_them() {
    let server = builder().build().await.expect("server");
    let definition = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v2alpha1", "served": false, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            ],
        },
    });
    let definitions = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (status, body) = call(&server, Method::POST, definitions, Some(definition)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let services = "/apis/apiregistration.k8s.io/v1/apiservices";
    let v1 = format!("{services}/v1.example.com");
    let (status, service) = settled(&server, &v1).await;
    assert_eq!(status, StatusCode::OK, "{service}");
    assert_eq!(
        service["metadata"]["labels"],
        json!({"kube-aggregator.kubernetes.io/automanaged": "true"})
    );
    assert_eq!(
        service["spec"],
        json!({"group": "example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 100})
    );
    assert_eq!(service["status"]["conditions"][0]["reason"], "Local");
    // A version not served has none.
    let (status, _) = settled(&server, &format!("{services}/v2alpha1.example.com")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Changed or deleted by someone else, it is put back.
    let mut changed = service.clone();
    changed["spec"]["versionPriority"] = json!(7);
    let (status, _) = call(&server, Method::PUT, &v1, Some(changed)).await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let (_, restored) = settled(&server, &v1).await;
    assert_eq!(restored["spec"]["versionPriority"], 100);
    let (status, _) = call(&server, Method::DELETE, &v1, None).await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let (status, _) = settled(&server, &v1).await;
    assert_eq!(status, StatusCode::OK, "recreated");
    // A built-in group's APIService (registered at start) is left as it is.
    let (status, apps) = settled(&server, &format!("{services}/v1.apps")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        apps["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"],
        "onstart"
    );

    // Once no definition serves the group-version, its APIService goes.
    let (status, _) = call(
        &server,
        Method::DELETE,
        &format!("{definitions}/widgets.example.com"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut gone = StatusCode::OK;
    for _ in 0..100 {
        gone = settled(&server, &v1).await.0;
        if gone == StatusCode::NOT_FOUND {
            break;
        }
    }
    assert_eq!(gone, StatusCode::NOT_FOUND);
}

// -------------------------------------------------------------------------------------------
// Bootstrap objects prepared once per process.

/// Every stored bootstrap object of the fixed kinds, by key, without what differs per
/// server (uid, creation time, managed fields' time).
async fn fixed_bootstrap_objects(store: &Arc<dyn KvStore>) -> Vec<(String, Value)> {
    let listed = store
        .range(konverge_store::RangeRequest::new(
            konverge_store::KeyRange::prefix(bytes::Bytes::from_static(b"/registry/")),
        ))
        .await
        .expect("range");
    let mut objects = Vec::new();
    for kv in listed.kvs {
        let key = String::from_utf8(kv.key.to_vec()).expect("key");
        let fixed = [
            "/registry/rbac.authorization.k8s.io/",
            "/registry/scheduling.k8s.io/priorityclasses/",
            "/registry/apiregistration.k8s.io/apiservices/",
            "/registry/flowcontrol.apiserver.k8s.io/",
        ];
        if !fixed.iter().any(|prefix| key.starts_with(prefix)) {
            continue;
        }
        let mut object: Value = serde_json::from_slice(&kv.value).expect("stored JSON");
        let metadata = object["metadata"].as_object_mut().expect("metadata");
        let uid = metadata.remove("uid").expect("uid");
        let uid = uid.as_str().expect("a uid");
        assert!(uuid::Uuid::parse_str(uid).is_ok(), "{key}: {uid}");
        let created = metadata.remove("creationTimestamp").expect("creation time");
        let created = created.as_str().expect("a time");
        assert!(
            created.parse::<jiff::Timestamp>().is_ok(),
            "{key}: {created}"
        );
        for entry in metadata["managedFields"]
            .as_array_mut()
            .expect("managed fields")
        {
            let time = entry.as_object_mut().expect("entry").remove("time");
            let time = time.as_ref().and_then(Value::as_str).expect("a time");
            assert!(time.parse::<jiff::Timestamp>().is_ok(), "{key}: {time}");
        }
        // Entries are ordered by their times, which the line above dropped: written in one
        // second or across two, the same entries may come in either order.
        if let Some(entries) = metadata["managedFields"].as_array_mut() {
            entries.sort_by_key(|entry| entry["manager"].as_str().unwrap_or_default().to_string());
        }
        // An APIService's Available condition and a FlowSchema's Dangling condition are as
        // old as their store: stores made across a second boundary differ there only.
        for condition in object
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let time = condition
                .as_object_mut()
                .expect("condition")
                .remove("lastTransitionTime");
            let time = time.as_ref().and_then(Value::as_str).expect("a time");
            assert!(time.parse::<jiff::Timestamp>().is_ok(), "{key}: {time}");
        }
        objects.push((key, object));
    }
    objects
}

#[tokio::test]
async fn every_new_store_gets_the_bootstrap_objects_the_create_path_makes() {
    // The first new store of the process may prepare them, the second uses what was
    // prepared; a store written to before goes the create path, object by object.
    let stores: Vec<Arc<dyn KvStore>> = vec![
        Arc::new(MemStore::new()),
        Arc::new(MemStore::new()),
        Arc::new(MemStore::new()),
    ];
    stores[2]
        .put(
            bytes::Bytes::from_static(b"/unrelated"),
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .expect("put");
    let mut uids = Vec::new();
    for store in &stores {
        let server = ApiServer::builder(store.clone())
            .control_loops(false)
            .build()
            .await
            .expect("server");
        let (_, admin) = call(
            &server,
            Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
            None,
        )
        .await;
        uids.push(admin["metadata"]["uid"].clone());
        server.stop();
    }
    assert!(uids[0] != uids[1] && uids[1] != uids[2], "{uids:?}");
    let first = fixed_bootstrap_objects(&stores[0]).await;
    let prepared = fixed_bootstrap_objects(&stores[1]).await;
    let created = fixed_bootstrap_objects(&stores[2]).await;
    assert!(created.len() > 100, "{}", created.len());
    assert_eq!(first, created);
    assert_eq!(prepared, created);
}

/// Five memory stores: one written to before (by something else than a server), then four
/// new ones.
async fn one_written_before_and_four_new() -> Vec<Arc<dyn KvStore>> {
    let written_before: Arc<dyn KvStore> = Arc::new(MemStore::new());
    written_before
        .put(
            bytes::Bytes::from_static(b"/unrelated"),
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .expect("put");
    let mut stores: Vec<Arc<dyn KvStore>> = vec![written_before];
    for _ in 0..4 {
        stores.push(Arc::new(MemStore::new()));
    }
    stores
}

#[tokio::test]
async fn new_stores_get_the_flow_schemas_conditions_the_first_pass_writes() {
    // Every server writes its FlowSchemas' Dangling conditions before it serves. What the
    // first new store of the process was given is remembered: later new stores, with
    // control loops or without, hold the conditions from the start and write nothing. A
    // store written to before writes them itself. All end alike.
    let stores = one_written_before_and_four_new().await;
    let prefix = bytes::Bytes::from_static(b"/registry/flowcontrol.apiserver.k8s.io/flowschemas/");
    let mut written_once = Vec::new();
    for (i, store) in stores.iter().enumerate() {
        let server = ApiServer::builder(store.clone())
            .control_loops(i % 2 == 0)
            .build()
            .await
            .expect("server");
        let schemas = store
            .range(konverge_store::RangeRequest::new(
                konverge_store::KeyRange::prefix(prefix.clone()),
            ))
            .await
            .expect("range")
            .kvs;
        assert_eq!(schemas.len(), 13);
        let mut once = true;
        for kv in schemas {
            let schema: Value = serde_json::from_slice(&kv.value).expect("JSON");
            let condition = &schema["status"]["conditions"][0];
            assert_eq!(condition["type"], "Dangling", "{schema}");
            assert_eq!(condition["reason"], "Found", "{schema}");
            once &= kv.create_revision == kv.mod_revision;
            if once {
                // Given with the object: as old as the object.
                assert_eq!(
                    condition["lastTransitionTime"], schema["metadata"]["creationTimestamp"],
                    "{schema}"
                );
            }
        }
        written_once.push(once);
        server.stop();
    }
    assert!(!written_once[0], "{written_once:?}");
    assert!(
        written_once[2..].iter().all(|once| *once),
        "a later new store wrote its conditions itself: {written_once:?}"
    );
    // (ClusterRoles differ: aggregated only where control loops run.)
    let flow_control = |objects: Vec<(String, Value)>| -> Vec<(String, Value)> {
        objects
            .into_iter()
            .filter(|(key, _)| key.starts_with("/registry/flowcontrol.apiserver.k8s.io/"))
            .collect()
    };
    let expected = flow_control(fixed_bootstrap_objects(&stores[0]).await);
    assert_eq!(expected.len(), 21);
    for store in &stores[1..] {
        let objects = flow_control(fixed_bootstrap_objects(store).await);
        for (object, wanted) in objects.iter().zip(&expected) {
            assert_eq!(object, wanted);
        }
    }
}

#[tokio::test]
async fn new_stores_get_the_aggregated_roles_the_first_pass_writes() {
    // Servers with control loops: the first new store of the process is aggregated by the
    // loops' first pass, which is remembered; later new stores are given the aggregated
    // roles as that pass wrote them, in one write each. A store written to before is
    // looked up and given what it misses, then aggregated by the loops once the server is
    // up. All end alike.
    let stores = one_written_before_and_four_new().await;
    let admin =
        bytes::Bytes::from_static(b"/registry/rbac.authorization.k8s.io/clusterroles/admin");
    for store in &stores {
        let server = ApiServer::builder(store.clone())
            .build()
            .await
            .expect("server");
        // Aggregated by the time the server is built, or (the store written to before)
        // soon after.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let kv = store.get(admin.clone()).await.expect("get").expect("admin");
            let role: Value = serde_json::from_slice(&kv.value).expect("JSON");
            if role["rules"].as_array().is_some_and(|r| !r.is_empty()) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "admin never aggregated"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        server.stop();
    }
    let mut written_once = Vec::new();
    for store in &stores {
        let kv = store.get(admin.clone()).await.expect("get").expect("admin");
        written_once.push(kv.create_revision == kv.mod_revision);
    }
    // The store written to before, and the first new one, aggregate for themselves (unless
    // an earlier test of this process already left what a first pass writes).
    assert!(!written_once[0], "{written_once:?}");
    assert!(
        written_once[2..].iter().any(|once| *once),
        "no later new store was given the aggregated roles: {written_once:?}"
    );
    let expected = fixed_bootstrap_objects(&stores[0]).await;
    let (_, admin_role) = expected
        .iter()
        .find(|(key, _)| key.ends_with("/clusterroles/admin"))
        .expect("admin");
    assert!(
        admin_role["rules"].as_array().is_some_and(|r| r.len() > 10),
        "{admin_role}"
    );
    let mut managers: Vec<&str> = admin_role["metadata"]["managedFields"]
        .as_array()
        .expect("managed fields")
        .iter()
        .filter_map(|entry| entry["manager"].as_str())
        .collect();
    managers.sort_unstable();
    assert_eq!(
        managers,
        ["clusterrole-aggregation-controller", "kube-apiserver"]
    );
    for store in &stores[1..] {
        assert_eq!(fixed_bootstrap_objects(store).await, expected);
    }
}
