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
