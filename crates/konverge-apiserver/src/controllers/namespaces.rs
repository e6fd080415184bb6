//! Namespace finalization: a namespace being deleted is emptied, then its `kubernetes`
//! finalizer is removed and it goes.

use serde_json::{Value, json};

use super::ClusterIndex;
use crate::error::Reason;
use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions};

const FINALIZER: &str = "kubernetes";

/// One pass over `namespaces`: empties those that are terminating and finalizes the empty
/// ones.
pub async fn pass(registry: &Registry, index: &ClusterIndex, namespaces: &[&str]) {
    let terminating = namespaces
        .iter()
        .filter_map(|name| index.namespace(name))
        .filter(|n| n.deleting);
    for namespace in terminating {
        let ns = namespace.name.as_str();
        if index.count_in_namespace(ns) > 0 {
            for rt in registry
                .catalog()
                .stored()
                .into_iter()
                .filter(|rt| rt.namespaced)
            {
                if let Err(e) = registry
                    .delete_collection(
                        &rt,
                        Some(ns),
                        &ListOptions::default(),
                        &DeleteOptions::default(),
                    )
                    .await
                {
                    tracing::warn!(error = %e, namespace = ns, resource = %rt.plural, "emptying a namespace failed");
                }
            }
            continue;
        }
        let apply = |current: &Value| {
            let mut new = current.clone();
            if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                let kept: Vec<Value> = spec
                    .get("finalizers")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|f| f.as_str() != Some(FINALIZER))
                    .cloned()
                    .collect();
                spec.insert("finalizers".into(), json!(kept));
            }
            Ok(new)
        };
        if let Err(e) = registry
            .patch(
                &namespace.rt,
                None,
                ns,
                Some("finalize"),
                &WriteOptions::default(),
                &apply,
            )
            .await
            && e.reason != Reason::NotFound
        {
            tracing::warn!(error = %e, namespace = ns, "finalizing a namespace failed");
        }
    }
}
