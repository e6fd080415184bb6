//! Admission with real kubectl against `konverge up`: the built-in plugins that change what
//! controllers see (LimitRange defaults, PodSecurity, ResourceQuota), a
//! ValidatingAdmissionPolicy, admission webhooks served over HTTPS by the test, and a
//! two-version CRD behind a conversion webhook. Errors are compared with kube-apiserver's
//! words as kubectl prints them.

mod common;

use common::Up;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  containers:
  - {name: app, image: nginx}
"#;

fn pod(name: &str) -> String {
    POD.replace("NAME", name)
}

#[test]
fn limit_ranges_fill_in_a_pods_resources() {
    let up = Up::start();
    up.ok(&["create", "namespace", "limited"]);
    up.ok_stdin(
        &["apply", "-n", "limited", "-f", "-"],
        Some(
            r#"
apiVersion: v1
kind: LimitRange
metadata: {name: defaults}
spec:
  limits:
  - type: Container
    default: {cpu: 500m, memory: 256Mi}
    defaultRequest: {cpu: 100m}
"#,
        ),
    );
    up.ok_stdin(&["apply", "-n", "limited", "-f", "-"], Some(&pod("web")));
    let resources =
        up.json(&["get", "pod", "web", "-n", "limited"])["spec"]["containers"][0]["resources"]
            .clone();
    assert_eq!(
        resources,
        serde_json::json!({
            "limits": {"cpu": "500m", "memory": "256Mi"},
            "requests": {"cpu": "100m", "memory": "256Mi"},
        })
    );
    let annotations = up.json(&["get", "pod", "web", "-n", "limited"])["metadata"]["annotations"]
        ["kubernetes.io/limit-ranger"]
        .clone();
    assert_eq!(
        annotations,
        "LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for container app"
    );
}

#[test]
fn pod_security_refuses_and_warns_as_kube_apiserver() {
    let up = Up::start();
    up.ok(&["create", "namespace", "locked"]);
    up.ok(&[
        "label",
        "namespace",
        "locked",
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let err = up.fails(&["apply", "-n", "locked", "-f", "-"], Some(&pod("web")));
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): error when creating "STDIN": pods "web" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
    );
    // Warn only: the pod is created, kubectl prints the warning.
    up.ok(&["create", "namespace", "watched"]);
    up.ok(&[
        "label",
        "namespace",
        "watched",
        "pod-security.kubernetes.io/warn=baseline",
    ]);
    let (code, _, err) = up.run(
        &["apply", "-n", "watched", "-f", "-"],
        Some(&pod("host").replace("containers:", "hostNetwork: true\n  containers:")),
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        err.trim(),
        r#"Warning: would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true)"#
    );
}

#[test]
fn a_resource_quota_refuses_what_would_exceed_it() {
    let up = Up::start();
    up.ok(&["create", "namespace", "small"]);
    up.ok(&[
        "create",
        "quota",
        "two-pods",
        "--hard=pods=2,requests.cpu=1",
        "-n",
        "small",
    ]);
    let sized = |name: &str, cpu: &str| {
        pod(name).replace(
            "image: nginx}",
            &format!("image: nginx, resources: {{requests: {{cpu: {cpu}}}}}}}"),
        )
    };
    up.ok_stdin(
        &["apply", "-n", "small", "-f", "-"],
        Some(&sized("a", "400m")),
    );
    let err = up.fails(
        &["apply", "-n", "small", "-f", "-"],
        Some(&sized("b", "800m")),
    );
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): error when creating "STDIN": pods "b" is forbidden: exceeded quota: two-pods, requested: requests.cpu=800m, used: requests.cpu=400m, limited: requests.cpu=1"#
    );
    up.ok_stdin(
        &["apply", "-n", "small", "-f", "-"],
        Some(&sized("b", "600m")),
    );
    let err = up.fails(&["apply", "-n", "small", "-f", "-"], Some(&sized("c", "0")));
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): error when creating "STDIN": pods "c" is forbidden: exceeded quota: two-pods, requested: pods=1, used: pods=2, limited: pods=2"#
    );
    let used = up.json(&["get", "quota", "two-pods", "-n", "small"])["status"]["used"].clone();
    assert_eq!(used, serde_json::json!({"pods": "2", "requests.cpu": "1"}));
    // Deleting a pod gives its share back.
    up.ok(&["delete", "pod", "a", "-n", "small", "--wait=false"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let used = up.json(&["get", "quota", "two-pods", "-n", "small"])["status"]["used"].clone();
        if used == serde_json::json!({"pods": "1", "requests.cpu": "600m"}) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "usage not released: {used}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    up.ok_stdin(&["apply", "-n", "small", "-f", "-"], Some(&sized("c", "0")));
}

/// A tokio runtime serving `router` over HTTPS on 127.0.0.1 with a fresh self-signed
/// certificate: the runtime (keep it alive), the address, and the certificate (the
/// `caBundle`).
fn https_webhook(router: axum::Router) -> (tokio::runtime::Runtime, std::net::SocketAddr, String) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let (cert, key) =
        konverge_example_bucket_webhook::self_signed(&["127.0.0.1"]).expect("a certificate");
    let addr = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("an address");
        konverge_example_bucket_webhook::serve_router(listener, &cert, &key, router)
            .expect("serving");
        addr
    });
    (runtime, addr, cert)
}

fn base64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Converts Widgets between v1 (`spec.color`) and v2 (`spec.colour`).
async fn convert_widgets(
    body: axum::body::Bytes,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let request = &review["request"];
    let desired = request["desiredAPIVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let converted: Vec<serde_json::Value> = request["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut object| {
            let (from, to) = if desired.ends_with("/v2") {
                ("color", "colour")
            } else {
                ("colour", "color")
            };
            if let Some(spec) = object["spec"].as_object_mut()
                && let Some(value) = spec.remove(from)
            {
                spec.insert(to.into(), value);
            }
            object["apiVersion"] = serde_json::json!(desired);
            object
        })
        .collect();
    let review = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {
            "uid": request["uid"],
            "convertedObjects": converted,
            "result": {"status": "Success"},
        },
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        review.to_string(),
    )
}

#[test]
fn a_two_version_crd_is_served_in_both_versions_through_a_conversion_webhook() {
    let up = Up::start();
    let router = axum::Router::new().route("/convert", axum::routing::post(convert_widgets));
    let (_runtime, addr, ca) = https_webhook(router);
    let schema = |field: &str| {
        format!(
            "openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, properties: {{{field}: {{type: string}}}}}}}}}}"
        )
    };
    let crd = format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.example.com}}
spec:
  group: example.com
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        url: https://{addr}/convert
        caBundle: {}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{{}}}
  - name: v2
    served: true
    storage: false
    schema: {{{}}}
"#,
        base64(&ca),
        schema("color"),
        schema("colour"),
    );
    up.ok_stdin(&["apply", "-f", "-"], Some(&crd));
    up.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=10s",
    ]);
    // Written in v2, stored in v1, read in either.
    up.ok_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w, namespace: default}\nspec: {colour: teal}\n"),
    );
    let v1 = up.json(&["get", "widgets.v1.example.com", "w"]);
    assert_eq!(v1["apiVersion"], "example.com/v1");
    assert_eq!(v1["spec"], serde_json::json!({"color": "teal"}));
    let v2 = up.json(&["get", "widgets.v2.example.com", "w"]);
    assert_eq!(v2["apiVersion"], "example.com/v2");
    assert_eq!(v2["spec"], serde_json::json!({"colour": "teal"}));
    // Written in v1, listed in v2.
    up.ok_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x, namespace: default}\nspec: {color: red}\n"),
    );
    let listed = up.json(&["get", "widgets.v2.example.com"]);
    let colours: Vec<&str> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|w| w["spec"]["colour"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(colours, ["teal", "red"]);
    // A patch through v2 changes the stored v1 object.
    up.ok(&[
        "patch",
        "widgets.v2.example.com",
        "x",
        "--type=merge",
        "-p",
        r#"{"spec":{"colour":"blue"}}"#,
    ]);
    assert_eq!(
        up.json(&["get", "widgets.v1.example.com", "x"])["spec"],
        serde_json::json!({"color": "blue"})
    );
}
