//! What kube-controller-manager puts in every active namespace: the `default`
//! ServiceAccount, and the `kube-root-ca.crt` ConfigMap with the CA that verifies the server
//! (when the server has one). Both are recreated when deleted, and the ConfigMap is put back
//! as published when its data or description is changed (kcm's root CA publisher).

use serde_json::{Value, json};

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
        let Some(ca) = root_ca else {
            continue;
        };
        if !with_ca {
            let created = registry
                .create(
                    &config_maps,
                    Some(ns),
                    json!({
                        "metadata": {
                            "name": ROOT_CA_CONFIG_MAP,
                            "annotations": {DESCRIPTION_ANNOTATION: ROOT_CA_DESCRIPTION},
                        },
                        "data": {"ca.crt": ca},
                    }),
                    &WriteOptions::default(),
                )
                .await;
            report(created, ns, "configmaps");
            continue;
        }
        let Ok(published) = registry
            .get(&config_maps, Some(ns), ROOT_CA_CONFIG_MAP, None)
            .await
        else {
            continue;
        };
        if let Some(restored) = restore_root_ca(published, ca) {
            let updated = registry
                .update(
                    &config_maps,
                    Some(ns),
                    ROOT_CA_CONFIG_MAP,
                    restored,
                    None,
                    &WriteOptions::default(),
                )
                .await;
            report(updated, ns, "configmaps");
        }
    }
}

/// The annotation that says what the root CA ConfigMap is for.
const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";

/// The root CA ConfigMap put back as published, if it is not: its data exactly the CA (other
/// keys removed), its description annotation present. Other metadata is kept.
fn restore_root_ca(mut published: Value, ca: &str) -> Option<Value> {
    let data = json!({"ca.crt": ca});
    let described = published
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|d| !d.is_empty());
    if published.get("data") == Some(&data) && described {
        return None;
    }
    published["data"] = data;
    let metadata = published.get_mut("metadata")?.as_object_mut()?;
    if !metadata.get("annotations").is_some_and(Value::is_object) {
        metadata.insert("annotations".into(), json!({}));
    }
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.insert(DESCRIPTION_ANNOTATION.into(), json!(ROOT_CA_DESCRIPTION));
    }
    Some(published)
}

fn report<T>(result: Result<T, crate::error::ApiError>, namespace: &str, resource: &str) {
    match result {
        Ok(_) => {}
        // Created or changed meanwhile (the next pass looks again), or the namespace started
        // terminating: nothing to do.
        Err(e)
            if matches!(
                e.reason,
                Reason::AlreadyExists | Reason::Conflict | Reason::Forbidden | Reason::NotFound
            ) => {}
        Err(e) => tracing::warn!(error = %e, namespace, resource, "populating a namespace failed"),
    }
}
