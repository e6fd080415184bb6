//! Subresources, each registered with the resource that has it, as kube-apiserver gives each
//! one a REST storage of its own (`StatusREST`, `ScaleREST`, `EvictionREST`, ...).
//!
//! A [`Subresource`] says what discovery lists (name, kind, verbs) and how it is served
//! ([`Storage`]): the HTTP layer dispatches on the storage, and the registry's update asks a
//! [`Part`] which part of the object the write may change. Nothing outside the resources'
//! modules tells subresources apart by name.

use serde_json::{Value, json};

use super::{ResourceType, Verbs, meta};

/// A subresource as discovery lists it (`pods/eviction`), and how it is served.
#[derive(Debug, Clone, Copy)]
pub struct Subresource {
    /// The name after the object's name: `eviction`.
    pub name: &'static str,
    /// The group, version and kind it takes and answers with, when they are not the parent's
    /// (`policy/v1` `Eviction`).
    pub kind: Option<(&'static str, &'static str, &'static str)>,
    /// Its verbs.
    pub verbs: Verbs,
    /// How requests for it are served.
    pub storage: Storage,
}

/// How a subresource is served: its storage, in kube-apiserver's words.
#[derive(Debug, Clone, Copy)]
pub enum Storage {
    /// Reads the parent object and writes one part of it (`status`, `approval`, `finalize`,
    /// `ephemeralcontainers`, `resize`).
    Part(Part),
    /// The parent's replicas, read and written as an `autoscaling/v1` `Scale`.
    Scale,
    /// `create` only, answered with what was done rather than an object of the parent's
    /// kind: binding a pod to a node, a ServiceAccount token, an eviction.
    Action(Action),
    /// `get` only: a pod's log, read from its kubelet.
    Log,
    /// A stream to the object's kubelet (`exec`, `attach`, `portforward`, `proxy`).
    Connect,
}

/// What a [`Storage::Action`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `pods/binding`: assigns the pod to a node.
    Binding,
    /// `serviceaccounts/token`: issues a token for the ServiceAccount.
    Token,
    /// `pods/eviction`: deletes the pod if its disruption budgets allow it.
    Eviction,
}

/// Makes the stored object of a write through a [`Storage::Part`] from the current object
/// and the one the client sent; an error is the message of a bad request.
pub type Merge = fn(rt: &ResourceType, current: &Value, new: Value) -> Result<Value, String>;

/// The update strategy of a subresource that writes one part of its object.
#[derive(Clone, Copy)]
pub struct Part {
    /// The object the write stores, the part taken from what was sent and the rest from the
    /// current object (the strategy's `PrepareForUpdate`).
    pub merge: Merge,
    /// Whether the write is validated by its own rules rather than the kind's update rules:
    /// the object is checked against itself (a pod's resize and ephemeral containers change
    /// what the pod's update rules keep).
    pub own_rules: bool,
}

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("own_rules", &self.own_rules)
            .finish()
    }
}

impl Part {
    /// A part validated by the kind's update rules.
    pub const fn new(merge: Merge) -> Part {
        Part {
            merge,
            own_rules: false,
        }
    }

    /// A part validated by its own rules.
    pub const fn with_own_rules(merge: Merge) -> Part {
        Part {
            merge,
            own_rules: true,
        }
    }
}

impl Storage {
    /// Whether the answer is what was done rather than an object kube-apiserver can show as
    /// a Table (it has no table convertor for bindings, tokens and evictions).
    pub fn tableless(&self) -> bool {
        matches!(self, Storage::Action(_))
    }

    /// Whether requests are streams from a kubelet, which kube-apiserver holds open as
    /// long-running (its `attach`, `exec`, `log`, `portforward` and `proxy` subresources) and
    /// reports as `CONNECT`.
    pub fn connects(&self) -> bool {
        matches!(self, Storage::Log | Storage::Connect)
    }

    /// Whether a write is validated by its own rules rather than the kind's update rules
    /// ([`Part::own_rules`]).
    pub fn own_rules(&self) -> bool {
        matches!(self, Storage::Part(part) if part.own_rules)
    }
}

impl Subresource {
    /// The `status` subresource of `rt`: the status of a custom resource, or a built-in
    /// kind's status with the metadata changes its status strategy keeps.
    pub(super) fn status(rt: &ResourceType) -> Subresource {
        let merge: Merge = if rt.custom.is_some() {
            custom_status
        } else {
            builtin_status
        };
        Subresource {
            name: "status",
            kind: None,
            verbs: super::SUBRESOURCE_VERBS,
            storage: Storage::Part(Part::new(merge)),
        }
    }

    /// The `scale` subresource.
    pub(super) fn scale() -> Subresource {
        Subresource {
            name: "scale",
            kind: Some(("autoscaling", "v1", "Scale")),
            verbs: super::SUBRESOURCE_VERBS,
            storage: Storage::Scale,
        }
    }
}

/// A custom resource's status subresource changes the status and nothing else, but for who
/// manages what, which the write records.
fn custom_status(_: &ResourceType, current: &Value, new: Value) -> Result<Value, String> {
    let mut merged = current.clone();
    match new.get("status") {
        Some(status) => merged["status"] = status.clone(),
        None => {
            if let Some(o) = merged.as_object_mut() {
                o.remove("status");
            }
        }
    }
    keep_managed_fields(&mut merged, &new);
    Ok(merged)
}

/// A built-in kind's status strategy keeps everything but the status from the current
/// object, except metadata: changes to it are kept, but for the fields the kind's status
/// strategy resets.
fn builtin_status(rt: &ResourceType, current: &Value, new: Value) -> Result<Value, String> {
    let mut merged = new;
    let (Some(into), Some(from)) = (merged.as_object_mut(), current.as_object()) else {
        return Err("the object must be a JSON object".into());
    };
    let own = |k: &str| matches!(k, "metadata" | "status" | "apiVersion" | "kind");
    into.retain(|k, _| own(k));
    for (k, v) in from {
        if !own(k) {
            into.insert(k.clone(), v.clone());
        }
    }
    reset_metadata(&mut merged, current, rt.status_resets);
    Ok(merged)
}

/// `current` with one field (`parent.field`) taken from `new` (`absent` when `new` lacks
/// it), and the managed fields the write recorded: what a subresource that changes one
/// field stores.
pub(crate) fn current_with(
    current: &Value,
    new: &Value,
    parent: &str,
    field: &str,
    absent: Value,
) -> Value {
    let mut merged = current.clone();
    merged[parent][field] = new
        .get(parent)
        .and_then(|p| p.get(field))
        .cloned()
        .unwrap_or(absent);
    keep_managed_fields(&mut merged, new);
    merged
}

/// Keeps the managed fields the write recorded on `new`.
pub(crate) fn keep_managed_fields(merged: &mut Value, new: &Value) {
    if let Some(managed) = new.pointer("/metadata/managedFields") {
        meta::metadata_mut(merged).insert("managedFields".into(), managed.clone());
    }
}

/// Takes the metadata fields a status strategy resets from `current`.
fn reset_metadata(merged: &mut Value, current: &Value, fields: &[&str]) {
    let old = current
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let md = meta::metadata_mut(merged);
    for field in fields {
        match old.get(*field) {
            Some(v) => md.insert((*field).into(), v.clone()),
            None => md.remove(*field),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin::catalog;

    fn find(plural: &str, sub: &str) -> Subresource {
        let rt = catalog()
            .into_iter()
            .find(|rt| rt.plural == plural)
            .expect(plural);
        rt.subresource(sub).expect(sub)
    }

    #[test]
    fn every_subresource_is_served_by_a_storage_for_its_verbs() {
        for rt in catalog() {
            for sub in rt.all_subresources() {
                let at = format!("{}/{}", rt.plural, sub.name);
                let writes = sub.verbs.contains(&"update");
                match sub.storage {
                    Storage::Part(_) | Storage::Scale => assert!(writes, "{at}"),
                    Storage::Action(_) => assert_eq!(sub.verbs, &["create"], "{at}"),
                    Storage::Log => assert_eq!(sub.verbs, &["get"], "{at}"),
                    Storage::Connect => assert!(sub.verbs.contains(&"get"), "{at}"),
                }
                // Looked up by name, the same subresource is found.
                let found = rt.subresource(sub.name).expect(&at);
                assert_eq!(found.verbs, sub.verbs, "{at}");
            }
            assert!(rt.subresource("nonesuch").is_none());
        }
    }

    #[test]
    fn parts_write_only_their_part() {
        let pod = json!({
            "metadata": {"name": "p", "labels": {"a": "1"}, "ownerReferences": [{"name": "o"}]},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}]},
            "status": {"phase": "Pending"},
        });
        let mut sent = pod.clone();
        sent["metadata"]["labels"]["a"] = json!("2");
        sent["metadata"]["ownerReferences"] = json!([]);
        sent["spec"]["containers"][0]["image"] = json!("j");
        sent["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1"}});
        sent["spec"]["ephemeralContainers"] = json!([{"name": "e"}]);
        sent["status"]["phase"] = json!("Running");
        let pods = catalog()
            .into_iter()
            .find(|rt| rt.plural == "pods")
            .unwrap();
        let merged = |sub: &str| match find("pods", sub).storage {
            Storage::Part(part) => (part.merge)(&pods, &pod, sent.clone()).unwrap(),
            other => panic!("{sub}: {other:?}"),
        };

        // The status strategy keeps the spec and the owner references, not the labels.
        let status = merged("status");
        assert_eq!(status["status"]["phase"], "Running");
        assert_eq!(status["spec"], pod["spec"]);
        assert_eq!(status["metadata"]["labels"]["a"], "2");
        assert_eq!(
            status["metadata"]["ownerReferences"],
            pod["metadata"]["ownerReferences"]
        );

        let resize = merged("resize");
        assert_eq!(
            resize["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "1"
        );
        assert_eq!(resize["spec"]["containers"][0]["image"], "i");
        assert_eq!(resize["status"], pod["status"]);

        let ephemeral = merged("ephemeralcontainers");
        assert_eq!(ephemeral["spec"]["ephemeralContainers"][0]["name"], "e");
        assert_eq!(ephemeral["spec"]["containers"], pod["spec"]["containers"]);
        assert!(find("pods", "resize").storage.own_rules());
        assert!(!find("pods", "status").storage.own_rules());
        assert!(find("pods", "exec").storage.connects());
        assert!(find("pods", "eviction").storage.tableless());

        // A status write that is not an object is a bad request, not a panic.
        match find("pods", "status").storage {
            Storage::Part(part) => assert!((part.merge)(&pods, &pod, json!([])).is_err()),
            other => panic!("{other:?}"),
        }
    }
}
