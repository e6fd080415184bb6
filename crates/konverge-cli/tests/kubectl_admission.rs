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

/// An answer to an AdmissionReview: the request's uid, `allowed`, and the rest of `extra`.
fn admission_answer(
    body: &[u8],
    allowed: bool,
    extra: serde_json::Value,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    let review: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let mut response = serde_json::json!({"uid": review["request"]["uid"], "allowed": allowed});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        response[k] = v;
    }
    let answer = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
}

/// The test's webhooks: `/validate` refuses ConfigMaps labelled `verdict=deny` and warns
/// about `verdict=warn`; `/mutate` annotates them; `/slow` answers after two seconds.
fn webhook_router() -> axum::Router {
    use axum::routing::post;
    axum::Router::new()
        .route(
            "/validate",
            post(|body: axum::body::Bytes| async move {
                let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                match review["request"]["object"]["metadata"]["labels"]["verdict"].as_str() {
                    Some("deny") => admission_answer(
                        &body,
                        false,
                        serde_json::json!({"status": {"code": 403, "reason": "Forbidden", "message": "verdict=deny"}}),
                    ),
                    Some("warn") => admission_answer(
                        &body,
                        true,
                        serde_json::json!({"warnings": ["verdict=warn is deprecated"]}),
                    ),
                    _ => admission_answer(&body, true, serde_json::json!({})),
                }
            }),
        )
        .route(
            "/mutate",
            post(|body: axum::body::Bytes| async move {
                let patch = serde_json::json!([
                    {"op": "add", "path": "/metadata/annotations", "value": {"mutated-by": "test-webhook"}}
                ]);
                admission_answer(
                    &body,
                    true,
                    serde_json::json!({"patchType": "JSONPatch", "patch": base64(&patch.to_string())}),
                )
            }),
        )
        .route(
            "/slow",
            post(|body: axum::body::Bytes| async move {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                admission_answer(&body, true, serde_json::json!({}))
            }),
        )
}

/// A webhook on ConfigMap creates in namespaces labelled `hooked=yes`, at `url`.
fn hook(name: &str, url: &str, ca: &str, extra: &str) -> String {
    format!(
        r#"
  - name: {name}
    clientConfig: {{url: "{url}", caBundle: {ca}}}
    rules: [{{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}}]
    namespaceSelector: {{matchLabels: {{hooked: "yes"}}}}
    admissionReviewVersions: [v1]
    {extra}"#,
        ca = base64(ca),
    )
}

#[test]
fn webhooks_allow_deny_warn_mutate_and_fail_as_configured() {
    let up = Up::start();
    let (_runtime, addr, ca) = https_webhook(webhook_router());
    let url = |path: &str| format!("https://{addr}{path}");
    up.ok(&["create", "namespace", "hooked"]);
    up.ok(&["label", "namespace", "hooked", "hooked=yes"]);
    up.ok_stdin(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {{name: annotate}}\nwebhooks:{}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: verdicts}}\nwebhooks:{}\n",
            hook("annotate.konverge.test", &url("/mutate"), &ca, "sideEffects: None"),
            hook("verdicts.konverge.test", &url("/validate"), &ca, "sideEffects: NoneOnDryRun"),
        )),
    );
    let cm = |name: &str, verdict: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: hooked, labels: {{verdict: {verdict}}}}}\n"
        )
    };

    // Allowed, and mutated.
    up.ok_stdin(&["apply", "-f", "-"], Some(&cm("fine", "ok")));
    assert_eq!(
        up.ok(&[
            "get",
            "configmap",
            "fine",
            "-n",
            "hooked",
            "-o",
            "jsonpath={.metadata.annotations.mutated-by}",
        ]),
        "test-webhook"
    );
    // Denied.
    let err = up.fails(&["apply", "-f", "-"], Some(&cm("refused", "deny")));
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): error when creating "STDIN": admission webhook "verdicts.konverge.test" denied the request: verdict=deny"#
    );
    // Warned.
    let (code, _, err) = up.run(&["apply", "-f", "-"], Some(&cm("warned", "warn")));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err.trim(), "Warning: verdict=warn is deprecated");
    // A server-side dry run reaches the webhooks without side effects, and stores nothing.
    let err = up.fails(
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&cm("dry", "deny")),
    );
    assert!(
        err.contains(
            r#"admission webhook "verdicts.konverge.test" denied the request: verdict=deny"#
        ),
        "{err}"
    );
    up.ok_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&cm("dry", "ok")),
    );
    let (code, _, _) = up.run(&["get", "configmap", "dry", "-n", "hooked"], None);
    assert_ne!(code, Some(0), "a dry run stores nothing");

    // Unreachable: Fail refuses, Ignore lets the write through.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        listener.local_addr().expect("an address").port()
    };
    let down = format!("https://127.0.0.1:{closed}/validate");
    up.ok_stdin(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: down}}\nwebhooks:{}{}\n",
            hook("ignored.konverge.test", &down, &ca, "sideEffects: None\n    failurePolicy: Ignore"),
            hook("failing.konverge.test", &down, &ca, "sideEffects: None\n    failurePolicy: Fail"),
        )),
    );
    let err = up.fails(&["apply", "-f", "-"], Some(&cm("unreachable", "ok")));
    assert_eq!(
        err.trim(),
        format!(
            r#"Error from server (InternalError): error when creating "STDIN": Internal error occurred: failed calling webhook "failing.konverge.test": failed to call webhook: Post "https://127.0.0.1:{closed}/validate?timeout=10s": dial tcp 127.0.0.1:{closed}: connect: connection refused"#
        )
    );
    up.ok(&["delete", "validatingwebhookconfiguration", "down"]);

    // Too slow: the call times out.
    up.ok_stdin(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: slow}}\nwebhooks:{}\n",
            hook("slow.konverge.test", &url("/slow"), &ca, "sideEffects: None\n    timeoutSeconds: 1"),
        )),
    );
    let err = up.fails(&["apply", "-f", "-"], Some(&cm("late", "ok")));
    assert_eq!(
        err.trim(),
        format!(
            r#"Error from server (InternalError): error when creating "STDIN": Internal error occurred: failed calling webhook "slow.konverge.test": failed to call webhook: Post "https://{addr}/slow?timeout=1s": context deadline exceeded"#
        )
    );
}

#[test]
fn a_validating_admission_policy_denies_and_warns() {
    let up = Up::start();
    up.ok_stdin(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: small-configmaps}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.data) || object.data.size() <= 2"
    message: at most two keys
  - expression: "!has(object.data) || !('password' in object.data)"
    messageExpression: "'configmap ' + object.metadata.name + ' holds a password: use a Secret'"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: small-configmaps-deny}
spec:
  policyName: small-configmaps
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {strict: "yes"}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: small-configmaps-warn}
spec:
  policyName: small-configmaps
  validationActions: [Warn]
  matchResources:
    namespaceSelector: {matchLabels: {strict: "no"}}
"#,
        ),
    );
    for (ns, strict) in [("strict", "yes"), ("lenient", "no")] {
        up.ok(&["create", "namespace", ns]);
        up.ok(&["label", "namespace", ns, &format!("strict={strict}")]);
    }
    let err = up.fails(
        &[
            "create",
            "configmap",
            "big",
            "-n",
            "strict",
            "--from-literal=a=1",
            "--from-literal=b=2",
            "--from-literal=c=3",
        ],
        None,
    );
    assert_eq!(
        err.trim(),
        // 422 Invalid (the validation's default reason), worded as a 403 is: as kube-apiserver.
        r#"error: failed to create configmap: configmaps "big" is forbidden: ValidatingAdmissionPolicy 'small-configmaps' with binding 'small-configmaps-deny' denied request: at most two keys"#
    );
    let err = up.fails(
        &[
            "create",
            "configmap",
            "secret",
            "-n",
            "strict",
            "--from-literal=password=hunter2",
        ],
        None,
    );
    assert_eq!(
        err.trim(),
        r#"error: failed to create configmap: configmaps "secret" is forbidden: ValidatingAdmissionPolicy 'small-configmaps' with binding 'small-configmaps-deny' denied request: configmap secret holds a password: use a Secret"#
    );
    let (code, _, err) = up.run(
        &[
            "create",
            "configmap",
            "big",
            "-n",
            "lenient",
            "--from-literal=a=1",
            "--from-literal=b=2",
            "--from-literal=c=3",
        ],
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        err.trim(),
        "Warning: Validation failed for ValidatingAdmissionPolicy 'small-configmaps' with binding 'small-configmaps-warn': at most two keys"
    );
    // The policy's expressions were checked against the ConfigMap schema: nothing to warn of.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let status =
            up.json(&["get", "validatingadmissionpolicy", "small-configmaps"])["status"].clone();
        if status["observedGeneration"] == 1 {
            assert_eq!(status["typeChecking"], serde_json::json!({}), "{status}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no type checking: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
