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
