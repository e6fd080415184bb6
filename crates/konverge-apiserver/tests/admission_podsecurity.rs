//! `PodSecurity` on the in-process server: namespaces labelled for the Pod Security
//! Standards refuse, warn about and admit pods as kube-apiserver does, word for word.
//! Requests whose `Warning` headers matter go straight to the router (`kube::Client` does
//! not expose them).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use konverge_apiserver::ApiServer;
use konverge_store::MemStore;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tower::ServiceExt;

struct Server {
    api: Arc<ApiServer>,
    router: axum::Router,
    client: kube::Client,
}

async fn server() -> Server {
    // No control loops: each test makes the `default` ServiceAccount its pods need itself,
    // instead of waiting for the controller to.
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .control_loops(false)
        .build()
        .await
        .expect("server");
    let router = server.router();
    Server {
        client: kube::Client::new(router.clone(), "default"),
        router,
        api: server,
    }
}

/// What the server answered: status code, `Warning` headers (their text), body.
struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

impl Server {
    async fn send(&self, method: &str, path: &str, content_type: &str, body: Value) -> Answer {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(axum::body::Body::from(body.to_string()))
            .expect("request");
        let response = self.router.clone().oneshot(req).await.expect("infallible");
        let code = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| warning_text(v.to_str().expect("ASCII header")))
            .collect();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        Answer {
            code,
            warnings,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send("POST", path, "application/json", body).await
    }

    /// A namespace with these labels, and its `default` ServiceAccount.
    async fn namespace(&self, name: &str, labels: Value) -> anyhow::Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?,
            )
            .await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), name);
        accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "default"}}))?,
            )
            .await?;
        Ok(())
    }

    async fn relabel(&self, name: &str, labels: Value) -> Answer {
        self.send(
            "PATCH",
            &format!("/api/v1/namespaces/{name}"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": labels}}),
        )
        .await
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

/// The text of a `Warning: 299 - "…"` header.
fn warning_text(header: &str) -> String {
    let quoted = header.strip_prefix("299 - ").unwrap_or(header);
    serde_json::from_str(quoted).unwrap_or_else(|_| quoted.to_string())
}

fn pods_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods")
}

/// A pod with one container `c` running nginx, and `spec_extra` merged into its spec.
fn pod(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
    for (k, v) in spec_extra.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

/// A security context that passes the restricted level.
fn hardened() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// The restricted violations of a pod whose one container `c` sets nothing.
const PLAIN_RESTRICTED: &str = r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#;

fn status(answer: &Answer) -> (u16, &str, &str) {
    (
        answer.code,
        answer.body["reason"].as_str().unwrap_or(""),
        answer.body["message"].as_str().unwrap_or(""),
    )
}

#[tokio::test]
async fn baseline_enforcement_refuses_pods_with_every_reason_in_kubes_order() -> anyhow::Result<()>
{
    let s = server().await;
    s.namespace(
        "base",
        json!({"pod-security.kubernetes.io/enforce": "baseline"}),
    )
    .await?;
    let bad = pod(
        "bad",
        json!({
            "hostNetwork": true,
            "hostPID": true,
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{
                "name": "c", "image": "nginx",
                "ports": [{"containerPort": 80, "hostPort": 80}],
                "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}},
            }],
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
        }),
    );
    let answer = s.post(&pods_path("base"), bad).await;
    assert_eq!(
        status(&answer),
        (
            403,
            "Forbidden",
            r#"pods "bad" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities (container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add), host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume "root"), hostPort (container "c" uses hostPort 80), privileged (container "c" must not set securityContext.privileged=true), forbidden sysctls (kernel.msgmax)"#
        )
    );
    assert_eq!(answer.body["details"]["kind"], "pods");
    assert!(
        answer.warnings.is_empty(),
        "a refused pod gets no warning: {:?}",
        answer.warnings
    );

    // What baseline allows passes, with no warning (warn follows enforce: baseline).
    let answer = s.post(&pods_path("base"), pod("plain", json!({}))).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    Ok(())
}

#[tokio::test]
async fn restricted_enforcement_refuses_with_baseline_reasons_first() -> anyhow::Result<()> {
    let s = server().await;
    s.namespace(
        "locked",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await?;
    let pods = s.pods("locked");
    let e = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod("plain", json!({})))?,
        )
        .await
        .expect_err("refused");
    let kube::Error::Api(e) = e else {
        panic!("expected an API error, got {e:?}")
    };
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        format!(
            r#"pods "plain" is forbidden: violates PodSecurity "restricted:latest": {PLAIN_RESTRICTED}"#
        )
    );

    let mut init = json!({"name": "init", "image": "busybox", "securityContext": hardened()});
    init["securityContext"]["seLinuxOptions"] = json!({"type": "spc_t"});
    let mut c = json!({"name": "c", "image": "nginx", "securityContext": hardened()});
    c["securityContext"]["runAsUser"] = json!(0);
    c["securityContext"]["capabilities"]["add"] = json!(["NET_RAW"]);
    let hostile = pod(
        "hostile",
        json!({
            "initContainers": [init],
            "containers": [c],
            "volumes": [{"name": "nfs", "nfs": {"server": "nas", "path": "/"}}, {"name": "scratch", "emptyDir": {}}],
        }),
    );
    let answer = s.post(&pods_path("locked"), hostile).await;
    assert_eq!(
        status(&answer),
        (
            403,
            "Forbidden",
            r#"pods "hostile" is forbidden: violates PodSecurity "restricted:latest": seLinuxOptions (container "init" set forbidden securityContext.seLinuxOptions: type "spc_t"), unrestricted capabilities (container "c" must not include "NET_RAW" in securityContext.capabilities.add), restricted volume types (volume "nfs" uses restricted volume type "nfs"), runAsUser=0 (container "c" must not set runAsUser=0)"#
        )
    );

    // A pod that meets every restricted rule is admitted without a warning, the API token
    // volume the ServiceAccount plugin mounts included.
    let compliant = pod(
        "compliant",
        json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "nginx", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
            "volumes": [{"name": "config", "configMap": {"name": "settings"}}],
        }),
    );
    let answer = s.post(&pods_path("locked"), compliant).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    let volumes = answer.body["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        volumes.iter().any(|v| v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))),
        "{volumes:?}"
    );

    // A dry run is judged the same way.
    let answer = s
        .post(
            &format!("{}?dryRun=All", pods_path("locked")),
            pod("dry", json!({})),
        )
        .await;
    assert_eq!(answer.code, 403);
    Ok(())
}

#[tokio::test]
async fn warn_mode_admits_with_a_warning_header() -> anyhow::Result<()> {
    let s = server().await;
    s.namespace(
        "warned",
        json!({"pod-security.kubernetes.io/warn": "restricted"}),
    )
    .await?;
    let answer = s.post(&pods_path("warned"), pod("plain", json!({}))).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert_eq!(
        answer.warnings,
        [format!(
            r#"would violate PodSecurity "restricted:latest": {PLAIN_RESTRICTED}"#
        )]
    );

    // Enforce baseline, warn restricted: a baseline pod is warned about as restricted
    // sees it; one that baseline refuses is refused, without a warning.
    s.namespace(
        "mixed",
        json!({
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/warn": "restricted",
            "pod-security.kubernetes.io/warn-version": "v1.24",
        }),
    )
    .await?;
    let answer = s.post(&pods_path("mixed"), pod("plain", json!({}))).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert_eq!(
        answer.warnings,
        [format!(
            r#"would violate PodSecurity "restricted:v1.24": {PLAIN_RESTRICTED}"#
        )]
    );
    let answer = s
        .post(&pods_path("mixed"), pod("host", json!({"hostIPC": true})))
        .await;
    assert_eq!(
        status(&answer),
        (
            403,
            "Forbidden",
            r#"pods "host" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostIPC=true)"#
        )
    );
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);

    // Without labels nothing is checked.
    s.namespace("open", json!({})).await?;
    let answer = s
        .post(
            &pods_path("open"),
            pod("anything", json!({"hostNetwork": true})),
        )
        .await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    Ok(())
}

#[tokio::test]
async fn workloads_get_warnings_and_are_never_refused() -> anyhow::Result<()> {
    let s = server().await;
    s.namespace(
        "locked",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await?;
    let template = json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": true}}]},
    });
    let expected = format!(
        r#"would violate PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true), {PLAIN_RESTRICTED}"#
    );
    let workloads = [
        (
            "/apis/apps/v1/namespaces/locked/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                   "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}),
        ),
        (
            "/apis/apps/v1/namespaces/locked/daemonsets",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "web"},
                   "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}),
        ),
        (
            "/apis/batch/v1/namespaces/locked/cronjobs",
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "web"},
                   "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
                       "metadata": {}, "spec": {"restartPolicy": "Never", "containers": template["spec"]["containers"]}}}}}}),
        ),
        (
            "/api/v1/namespaces/locked/podtemplates",
            json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "web"}, "template": template}),
        ),
    ];
    for (path, object) in workloads {
        let answer = s.post(path, object).await;
        assert_eq!(answer.code, 201, "{path}: {}", answer.body);
        assert_eq!(answer.warnings, std::slice::from_ref(&expected), "{path}");
    }

    // An update is checked again (and still not refused); a write to a subresource is not.
    let answer = s
        .send(
            "PATCH",
            "/apis/apps/v1/namespaces/locked/deployments/web",
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"tier": "front"}}}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert_eq!(answer.warnings, std::slice::from_ref(&expected));
    let answer = s
        .send(
            "PATCH",
            "/apis/apps/v1/namespaces/locked/deployments/web/scale",
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    Ok(())
}

#[tokio::test]
async fn pod_updates_are_checked_only_when_what_runs_changes() -> anyhow::Result<()> {
    let s = server().await;
    s.namespace("ns", json!({})).await?;
    let answer = s.post(&pods_path("ns"), pod("old", json!({}))).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    let answer = s
        .relabel(
            "ns",
            json!({"pod-security.kubernetes.io/enforce": "restricted"}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);

    // Labels and annotations may change on a pod the namespace would now refuse.
    let path = format!("{}/old", pods_path("ns"));
    let answer = s
        .send(
            "PATCH",
            &path,
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"seen": "yes"}}}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    let answer = s
        .send(
            "PATCH",
            &format!("{path}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running"}}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);

    // A new image is a new evaluation.
    let answer = s
        .send(
            "PATCH",
            &path,
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:2"}]),
        )
        .await;
    assert_eq!(
        status(&answer),
        (
            403,
            "Forbidden",
            format!(
                r#"pods "old" is forbidden: violates PodSecurity "restricted:latest": {PLAIN_RESTRICTED}"#
            )
            .as_str()
        )
    );
    Ok(())
}

#[tokio::test]
async fn namespace_labels_must_be_valid() -> anyhow::Result<()> {
    let s = server().await;
    let answer = s
        .post(
            "/api/v1/namespaces",
            json!({"metadata": {"name": "bad", "labels": {"pod-security.kubernetes.io/enforce": "strict"}}}),
        )
        .await;
    assert_eq!(
        status(&answer),
        (
            422,
            "Invalid",
            r#"Namespace "bad" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#
        )
    );
    assert_eq!(
        answer.body["details"]["causes"],
        json!([{
            "reason": "FieldValueInvalid",
            "message": r#"Invalid value: "strict": must be one of privileged, baseline, restricted"#,
            "field": "metadata.labels[pod-security.kubernetes.io/enforce]",
        }])
    );

    let answer = s
        .post(
            "/api/v1/namespaces",
            json!({"metadata": {"name": "bad", "labels": {
                "pod-security.kubernetes.io/warn": "loud",
                "pod-security.kubernetes.io/audit-version": "1.25",
            }}}),
        )
        .await;
    assert_eq!(
        status(&answer),
        (
            422,
            "Invalid",
            r#"Namespace "bad" is invalid: [metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: "1.25": must be "latest" or "v1.x", metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "loud": must be one of privileged, baseline, restricted]"#
        )
    );

    // Valid labels are kept; changing one to a bad value is refused.
    s.namespace(
        "good",
        json!({"pod-security.kubernetes.io/enforce": "baseline"}),
    )
    .await?;
    let answer = s
        .relabel(
            "good",
            json!({"pod-security.kubernetes.io/enforce-version": "v1.025"}),
        )
        .await;
    assert_eq!(
        status(&answer),
        (
            422,
            "Invalid",
            r#"Namespace "good" is invalid: metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: "v1.025": must be "latest" or "v1.x""#
        )
    );
    let answer = s
        .relabel(
            "good",
            json!({"pod-security.kubernetes.io/enforce-version": "v1.25"}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    Ok(())
}

#[tokio::test]
async fn tightening_enforcement_warns_about_existing_pods() -> anyhow::Result<()> {
    let s = server().await;
    s.namespace("ns", json!({})).await?;
    for (name, extra) in [
        ("web-b", json!({})),
        ("web-a", json!({})),
        ("web-c", json!({})),
        ("host", json!({"hostNetwork": true})),
        (
            "good",
            json!({"securityContext": {"runAsNonRoot": true}, "containers": [{"name": "c", "image": "nginx", "securityContext": hardened()}]}),
        ),
    ] {
        let answer = s.post(&pods_path("ns"), pod(name, extra)).await;
        assert_eq!(answer.code, 201, "{name}: {}", answer.body);
    }

    let answer = s
        .relabel(
            "ns",
            json!({"pod-security.kubernetes.io/enforce": "baseline"}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert_eq!(
        answer.warnings,
        [
            r#"existing pods in namespace "ns" violate the new PodSecurity enforce level "baseline:latest""#,
            "host: host namespaces",
        ]
    );

    let answer = s
        .relabel(
            "ns",
            json!({"pod-security.kubernetes.io/enforce": "restricted"}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert_eq!(
        answer.warnings,
        [
            r#"existing pods in namespace "ns" violate the new PodSecurity enforce level "restricted:latest""#,
            "host: host namespaces, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
            "web-a (and 2 other pods): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
        ]
    );

    // Relaxing, or keeping the same level, checks nothing.
    let answer = s
        .relabel(
            "ns",
            json!({"pod-security.kubernetes.io/enforce": "baseline"}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    let answer = s
        .relabel(
            "ns",
            json!({"pod-security.kubernetes.io/warn": "restricted"}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    // A new version at the same level is checked again.
    let answer = s
        .relabel(
            "ns",
            json!({"pod-security.kubernetes.io/enforce-version": "v1.30"}),
        )
        .await;
    assert_eq!(
        answer.warnings,
        [
            r#"existing pods in namespace "ns" violate the new PodSecurity enforce level "baseline:v1.30""#,
            "host: host namespaces",
        ]
    );
    Ok(())
}

#[tokio::test]
async fn pinned_versions_apply_the_checks_of_their_release() -> anyhow::Result<()> {
    let s = server().await;
    let mut root = pod(
        "root",
        json!({"containers": [{"name": "c", "image": "nginx", "securityContext": hardened()}]}),
    );
    root["spec"]["containers"][0]["securityContext"]["runAsUser"] = json!(0);
    root["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = json!(true);

    // runAsUser=0 has been refused since v1.23.
    s.namespace(
        "old",
        json!({"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "v1.22"}),
    )
    .await?;
    let answer = s.post(&pods_path("old"), root.clone()).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    let answer = s.post(&pods_path("old"), pod("plain", json!({}))).await;
    assert_eq!(
        status(&answer).2,
        format!(
            r#"pods "plain" is forbidden: violates PodSecurity "restricted:v1.22": {PLAIN_RESTRICTED}"#
        )
    );

    s.namespace(
        "new",
        json!({"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "v1.23"}),
    )
    .await?;
    let answer = s.post(&pods_path("new"), root).await;
    assert_eq!(
        status(&answer),
        (
            403,
            "Forbidden",
            r#"pods "root" is forbidden: violates PodSecurity "restricted:v1.23": runAsUser=0 (container "c" must not set runAsUser=0)"#
        )
    );

    // Versions newer than the checks use the newest checks, and keep their name.
    s.namespace(
        "future",
        json!({"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "v1.99"}),
    )
    .await?;
    let answer = s
        .post(
            &pods_path("future"),
            pod("tuned", json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}, {"name": "kernel.sem", "value": "1"}]}})),
        )
        .await;
    assert_eq!(
        status(&answer).2,
        r#"pods "tuned" is forbidden: violates PodSecurity "baseline:v1.99": forbidden sysctls (kernel.sem)"#
    );
    Ok(())
}

#[test]
fn pod_security_runs_after_service_account_and_before_priority() {
    let names = konverge_apiserver::admission::Chain::builtin().names();
    let at = |name: &str| names.iter().position(|n| *n == name);
    assert!(at("ServiceAccount") < at("PodSecurity"));
    assert!(at("PodSecurity") < at("Priority"));
    assert!(at("PodSecurity").is_some());
}

#[tokio::test]
async fn a_namespace_stored_with_a_bad_level_enforces_restricted() -> anyhow::Result<()> {
    // Labels refused today may be in storage from before: write one past admission.
    let s = server().await;
    let namespaces = s
        .api
        .registry()
        .catalog()
        .get("", "v1", "namespaces")
        .expect("namespaces are served");
    let legacy = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "legacy", "uid": "6f1c1f4e-0000-4000-8000-000000000001",
                     "creationTimestamp": "2024-01-01T00:00:00Z",
                     "labels": {"pod-security.kubernetes.io/enforce": "strict"}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    });
    s.api
        .registry()
        .store()
        .create(
            namespaces.key(None, "legacy").into(),
            serde_json::to_vec(&legacy)?.into(),
        )
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(s.client.clone(), "legacy");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "default"}}))?,
        )
        .await?;

    // An unknown enforce level fails closed: pods are held to restricted.
    let answer = s.post(&pods_path("legacy"), pod("plain", json!({}))).await;
    assert_eq!(
        status(&answer).2,
        format!(
            r#"pods "plain" is forbidden: violates PodSecurity "restricted:latest": {PLAIN_RESTRICTED}"#
        )
    );

    // Other changes to the namespace go through while the bad label stays as it was; a new
    // bad value does not.
    let answer = s.relabel("legacy", json!({"team": "a"})).await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    let answer = s
        .relabel(
            "legacy",
            json!({"pod-security.kubernetes.io/enforce": "stricter"}),
        )
        .await;
    assert_eq!(
        status(&answer),
        (
            422,
            "Invalid",
            r#"Namespace "legacy" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "stricter": must be one of privileged, baseline, restricted"#
        )
    );
    // Fixing the label is an update like any other.
    let answer = s
        .relabel(
            "legacy",
            json!({"pod-security.kubernetes.io/enforce": "privileged"}),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    let answer = s.post(&pods_path("legacy"), pod("plain", json!({}))).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    Ok(())
}
