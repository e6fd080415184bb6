//! Garbage collection of dependents by `ownerReferences`, with kube-apiserver's three
//! propagation policies.
//!
//! - **Background**: once none of an object's owners exists, the object is deleted. While some
//!   owner still exists, references to owners that are gone are removed.
//! - **Foreground**: an owner being deleted with the `foregroundDeletion` finalizer has its
//!   dependents deleted (in the foreground too); when none that blocks it
//!   (`blockOwnerDeletion: true`) is left, the finalizer goes and the owner with it. A
//!   dependent that would wait for an owner that waits for it (an ownerReference cycle) has
//!   its references made non-blocking first, as kube-controller-manager's collector does, so
//!   the cycle unwinds instead of waiting forever.
//! - **Orphan**: an owner being deleted with the `orphan` finalizer has its references removed
//!   from every dependent, then the finalizer goes.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{ClusterIndex, Node, Scope};
use crate::error::Reason;
use crate::registry::{DeleteOptions, Propagation, Registry, WriteOptions};

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// One garbage-collection pass over what `scope` covers of the index.
pub async fn pass(registry: &Registry, index: &ClusterIndex, scope: &Scope) {
    let mut kinds = ServedKinds::default();
    for node in scope.gc_candidates(index) {
        if !node.owners.is_empty() && !node.deleting {
            collect_dependent(registry, index, node, &mut kinds).await;
        }
        if node.deleting
            && node.finalizers.iter().any(|f| f == FOREGROUND)
            && index.blocking_dependents_of(&node.uid).is_empty()
        {
            remove_finalizer(registry, node, FOREGROUND).await;
        }
        if node.deleting && node.finalizers.iter().any(|f| f == ORPHAN) {
            for dependent in index.dependents_of(&node.uid) {
                remove_owner_refs(registry, dependent, std::slice::from_ref(&node.uid)).await;
            }
            if index.dependents_of(&node.uid).is_empty() {
                remove_finalizer(registry, node, ORPHAN).await;
            }
        }
    }
}

/// Whether the server serves a kind, remembered for one pass (the catalog lists every
/// resource to answer).
#[derive(Debug, Default)]
struct ServedKinds(HashMap<String, HashMap<String, bool>>);

impl ServedKinds {
    fn serves(&mut self, registry: &Registry, group: &str, kind: &str) -> bool {
        if let Some(served) = self.0.get(group).and_then(|kinds| kinds.get(kind)) {
            return *served;
        }
        let served = registry.catalog().by_kind(group, kind).is_some();
        self.0
            .entry(group.to_string())
            .or_default()
            .insert(kind.to_string(), served);
        served
    }
}

/// Decides about one dependent from the state of its owners.
async fn collect_dependent(
    registry: &Registry,
    index: &ClusterIndex,
    node: &Node,
    kinds: &mut ServedKinds,
) {
    let mut solid = Vec::new();
    let mut dangling = Vec::new();
    let mut waiting = Vec::new();
    for owner in &node.owners {
        let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
        if !kinds.serves(registry, group, &owner.kind) {
            // An owner of a kind this server does not serve cannot be checked: keep.
            solid.push(owner.uid.clone());
            continue;
        }
        match index.get(&owner.uid) {
            None => dangling.push(owner.uid.clone()),
            Some(o) if o.deleting && o.finalizers.iter().any(|f| f == FOREGROUND) => {
                waiting.push(owner.uid.clone())
            }
            Some(_) => solid.push(owner.uid.clone()),
        }
    }
    if !solid.is_empty() {
        let stale: Vec<String> = dangling.into_iter().chain(waiting).collect();
        if !stale.is_empty() {
            remove_owner_refs(registry, node, &stale).await;
        }
        return;
    }
    let propagation = if waiting.is_empty() {
        Propagation::Background
    } else {
        // Some owner waits for this object. If this object would in turn wait for one of its
        // own dependents that is waiting too, the wait could be a cycle: stop blocking the
        // owners first.
        let cycle = index
            .dependents_of(&node.uid)
            .iter()
            .any(|d| d.deleting && d.finalizers.iter().any(|f| f == FOREGROUND));
        if cycle && node.owners.iter().any(|o| o.block_owner_deletion) {
            unblock_owner_refs(registry, node).await;
        }
        Propagation::Foreground
    };
    let opts = DeleteOptions {
        propagation: Some(propagation),
        precondition_uid: Some(node.uid.clone()),
        ..DeleteOptions::default()
    };
    match registry
        .delete(&node.rt, node.namespace.as_deref(), &node.name, &opts)
        .await
    {
        Ok(_) => {
            tracing::debug!(resource = %node.rt.plural, name = %node.name, "garbage collected")
        }
        Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => {}
        Err(e) => tracing::warn!(error = %e, name = %node.name, "garbage collection failed"),
    }
}

async fn remove_owner_refs(registry: &Registry, node: &Node, uids: &[String]) {
    let apply = |current: &Value| {
        let mut new = current.clone();
        if let Some(refs) = new
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| {
                !r["uid"]
                    .as_str()
                    .is_some_and(|u| uids.iter().any(|x| x == u))
            });
            if refs.is_empty()
                && let Some(md) = new.get_mut("metadata").and_then(Value::as_object_mut)
            {
                md.remove("ownerReferences");
            }
        }
        Ok(new)
    };
    patch_node(registry, node, "removing owner references", &apply).await;
}

/// Sets `blockOwnerDeletion: false` on every reference of `node` that blocked.
async fn unblock_owner_refs(registry: &Registry, node: &Node) {
    let apply = |current: &Value| {
        let mut new = current.clone();
        if let Some(refs) = new
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for r in refs {
                if r["blockOwnerDeletion"] == json!(true) {
                    r["blockOwnerDeletion"] = json!(false);
                }
            }
        }
        Ok(new)
    };
    patch_node(registry, node, "unblocking owner references", &apply).await;
}

async fn remove_finalizer(registry: &Registry, node: &Node, finalizer: &str) {
    let apply = |current: &Value| {
        let mut new = current.clone();
        let kept: Vec<String> = crate::resources::meta::finalizers(current)
            .into_iter()
            .filter(|f| f != finalizer)
            .collect();
        crate::resources::meta::metadata_mut(&mut new).insert("finalizers".into(), json!(kept));
        Ok(new)
    };
    patch_node(registry, node, "removing a finalizer", &apply).await;
}

/// Applies `apply` to the object behind `node`; an object already gone is fine, any other
/// failure is logged and retried at the next pass.
async fn patch_node(
    registry: &Registry,
    node: &Node,
    what: &str,
    apply: &(dyn Fn(&Value) -> crate::error::Result<Value> + Send + Sync),
) {
    if let Err(e) = registry
        .patch(
            &node.rt,
            node.namespace.as_deref(),
            &node.name,
            None,
            &WriteOptions::default(),
            apply,
        )
        .await
        && e.reason != Reason::NotFound
    {
        tracing::warn!(error = %e, name = %node.name, "{what} failed");
    }
}
