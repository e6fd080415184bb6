//! What kube-controller-manager puts in every active namespace: the `default`
//! ServiceAccount, and the `kube-root-ca.crt` ConfigMap with the CA that verifies the server
//! (when the server has one). Both are recreated when deleted.

use serde_json::json;

use super::ClusterIndex;
use crate::error::Reason;
use crate::registry::{Registry, WriteOptions};

/// The ConfigMap holding the server's CA in every namespace.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// One pass over `namespaces`: creates what those that are active lack.
pub async fn pass(
    registry: &Registry,
    index: &ClusterIndex,
    namespaces: &[&str],
    root_ca: Option<&str>,
) {
    let catalog = registry.catalog();
    let (Some(accounts), Some(config_maps)) = (
        catalog.get("", "v1", "serviceaccounts"),
        catalog.get("", "v1", "configmaps"),
    ) else {
        return;
    };
    let active = namespaces
        .iter()
        .copied()
        .filter(|ns| index.namespace(ns).is_some_and(|n| !n.deleting));
    for ns in active {
        let with_account = index
            .get_by_key(&accounts.key(Some(ns), "default"))
            .is_some();
        let with_ca = index
            .get_by_key(&config_maps.key(Some(ns), ROOT_CA_CONFIG_MAP))
            .is_some();
        if !with_account {
            let created = registry
                .create(
                    &accounts,
                    Some(ns),
                    json!({"metadata": {"name": "default"}}),
                    &WriteOptions::default(),
                )
                .await;
            report(created, ns, "serviceaccounts");
        }
        if let Some(ca) = root_ca
            && !with_ca
        {
            let created = registry
                .create(
                    &config_maps,
                    Some(ns),
                    json!({
                        "metadata": {
                            "name": ROOT_CA_CONFIG_MAP,
                            "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION},
                        },
                        "data": {"ca.crt": ca},
                    }),
                    &WriteOptions::default(),
                )
                .await;
            report(created, ns, "configmaps");
        }
    }
}

fn report<T>(result: Result<T, crate::error::ApiError>, namespace: &str, resource: &str) {
    match result {
        Ok(_) => {}
        // Created meanwhile, or the namespace started terminating: nothing to do.
        Err(e)
            if matches!(
                e.reason,
                Reason::AlreadyExists | Reason::Forbidden | Reason::NotFound
            ) => {}
        Err(e) => tracing::warn!(error = %e, namespace, resource, "populating a namespace failed"),
    }
}
