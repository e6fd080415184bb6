//! What kube-apiserver's start-up hooks create in a new cluster, created once when the server
//! starts (and again where missing): the system namespaces, the `kubernetes` Service with its
//! Endpoints and EndpointSlice, the system PriorityClasses, the bootstrap RBAC roles and
//! bindings (`cluster-admin`, `admin`, `edit`, `view`, the `system:` discovery and public
//! information roles), and an APIService for every built-in group-version.
//!
//! The objects themselves are data, in `bootstrap.json`, as Kubernetes 1.33 creates them.

use serde_json::{Value, json};

use crate::error::{ApiError, Reason};
use crate::registry::{Registry, WriteOptions};

/// The namespaces that exist from the start.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The `kubernetes` Service's cluster IP: the first address of kubeadm's default service
/// range (10.96.0.0/12).
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The field manager of what the server writes at start-up.
const MANAGER: &str = "kube-apiserver";

/// Every built-in group's APIService priorities: (group, version, groupPriorityMinimum,
/// versionPriority), as kube-apiserver registers them.
const API_SERVICE_PRIORITIES: [(&str, &str, i64, i64); 20] = [
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v1", 17500, 15),
    ("autoscaling", "v2", 17500, 30),
    ("batch", "v1", 17400, 15),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("networking.k8s.io", "v1", 17200, 15),
    ("policy", "v1", 17100, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("node.k8s.io", "v1", 16300, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
];

/// The objects Kubernetes 1.33 bootstraps, by list: `clusterRoles`, `clusterRoleBindings`,
/// `priorityClasses`.
fn bootstrap_data() -> Value {
    serde_json::from_str(include_str!("bootstrap.json")).unwrap_or_else(|_| json!({}))
}

/// Creates `obj` as `resource` unless it exists (a restarted server finds what it made).
async fn ensure(
    registry: &Registry,
    group: &str,
    version: &str,
    plural: &str,
    namespace: Option<&str>,
    obj: Value,
) -> Result<(), ApiError> {
    let Some(rt) = registry.catalog().get(group, version, plural) else {
        return Ok(());
    };
    // Looked up first, as kube-apiserver's bootstrap controllers do: creating a Service
    // that exists would first fail to allocate its (taken) cluster IP.
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match registry.get(&rt, namespace, name, None).await {
        Ok(_) => return Ok(()),
        Err(e) if e.reason == Reason::NotFound => {}
        Err(e) => return Err(e),
    }
    let opts = WriteOptions {
        field_manager: Some(MANAGER.into()),
        ..WriteOptions::default()
    };
    match registry.create(&rt, namespace, obj, &opts).await {
        Ok(_) => Ok(()),
        Err(e) if e.reason == Reason::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates every bootstrap object that is missing.
pub async fn run(registry: &Registry) -> Result<(), ApiError> {
    for name in SYSTEM_NAMESPACES {
        ensure(
            registry,
            "",
            "v1",
            "namespaces",
            None,
            json!({"metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]}}),
        )
        .await?;
    }
    kubernetes_service(registry).await?;
    let data = bootstrap_data();
    for (list, group, plural) in [
        ("priorityClasses", "scheduling.k8s.io", "priorityclasses"),
        ("clusterRoles", "rbac.authorization.k8s.io", "clusterroles"),
        (
            "clusterRoleBindings",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
        ),
    ] {
        for obj in data[list].as_array().into_iter().flatten() {
            ensure(registry, group, "v1", plural, None, obj.clone()).await?;
        }
    }
    for (group, version, group_priority, version_priority) in API_SERVICE_PRIORITIES {
        let served = registry
            .catalog()
            .all()
            .iter()
            .any(|rt| rt.group == group && rt.version == version);
        if !served {
            continue;
        }
        ensure(
            registry,
            "apiregistration.k8s.io",
            "v1",
            "apiservices",
            None,
            api_service(group, version, group_priority, version_priority),
        )
        .await?;
    }
    Ok(())
}

/// The APIService of a group-version served by this server itself.
fn api_service(group: &str, version: &str, group_priority: i64, version_priority: i64) -> Value {
    json!({
        "metadata": {
            "name": format!("{version}.{group}"),
            "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"},
        },
        "spec": {
            "group": group,
            "version": version,
            "groupPriorityMinimum": group_priority,
            "versionPriority": version_priority,
        },
    })
}

/// The `kubernetes` Service in `default`, its Endpoints and its EndpointSlice, pointing at the
/// server itself.
async fn kubernetes_service(registry: &Registry) -> Result<(), ApiError> {
    ensure(
        registry,
        "",
        "v1",
        "services",
        Some("default"),
        json!({
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {
                "type": "ClusterIP",
                "clusterIP": KUBERNETES_SERVICE_IP,
                "clusterIPs": [KUBERNETES_SERVICE_IP],
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
                "internalTrafficPolicy": "Cluster",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
            },
        }),
    )
    .await?;
    ensure(
        registry,
        "",
        "v1",
        "endpoints",
        Some("default"),
        json!({
            "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{
                "addresses": [{"ip": "127.0.0.1"}],
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
            }],
        }),
    )
    .await?;
    ensure(
        registry,
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        Some("default"),
        json!({
            "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        }),
    )
    .await
}
