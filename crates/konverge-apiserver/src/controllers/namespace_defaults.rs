//! What kube-controller-manager puts in every active namespace: the `default`
//! ServiceAccount, and the `kube-root-ca.crt` ConfigMap with the CA that verifies the server
//! (when the server has one). Both are recreated when deleted.

use std::collections::BTreeSet;

use serde_json::json;

use super::ClusterIndex;
use crate::error::Reason;
use crate::registry::{Registry, WriteOptions};

/// The ConfigMap holding the server's CA in every namespace.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// One pass: creates what an active namespace lacks.
pub async fn pass(registry: &Registry, index: &ClusterIndex, root_ca: Option<&str>) {
    let mut active = BTreeSet::new();
    let mut with_account = BTreeSet::new();
    let mut with_ca = BTreeSet::new();
    for node in index.nodes() {
        match (
            node.rt.group.as_str(),
            node.rt.plural.as_str(),
            &node.namespace,
        ) {
            ("", "namespaces", None) if !node.deleting => {
                active.insert(node.name.clone());
            }
            ("", "serviceaccounts", Some(ns)) if node.name == "default" => {
                with_account.insert(ns.clone());
            }
            ("", "configmaps", Some(ns)) if node.name == ROOT_CA_CONFIG_MAP => {
                with_ca.insert(ns.clone());
            }
            _ => {}
        }
    }
    let catalog = registry.catalog();
    let (Some(accounts), Some(config_maps)) = (
        catalog.get("", "v1", "serviceaccounts"),
        catalog.get("", "v1", "configmaps"),
    ) else {
        return;
    };
    for ns in &active {
        if !with_account.contains(ns) {
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
            && !with_ca.contains(ns)
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
