//! Object keys: `namespace/name`, ordered the same way in every process.
//!
//! Everything the runtime iterates (caches, index results, the initial fill of the work queue)
//! is ordered by [`ObjectKey`], so two runs over the same objects see them in the same order.
//! Cluster-scoped keys (no namespace) sort before namespaced ones.

use std::fmt;

use kube::Resource;

/// Which object: its namespace (none for cluster-scoped objects) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// The namespace, or `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectKey {
    /// A key for a namespaced object.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// A key for a cluster-scoped object.
    pub fn cluster(name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            namespace: None,
            name: name.into(),
        }
    }

    /// The key of an object, or `None` if it has no name (only possible before it is created).
    pub fn of<K: Resource>(obj: &K) -> Option<ObjectKey> {
        let meta = obj.meta();
        Some(ObjectKey {
            namespace: meta.namespace.clone(),
            name: meta.name.clone()?,
        })
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_keys_sort_first_then_namespace_then_name() {
        let mut keys = [
            ObjectKey::namespaced("b", "a"),
            ObjectKey::namespaced("a", "z"),
            ObjectKey::cluster("m"),
            ObjectKey::namespaced("a", "b"),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["m", "a/b", "a/z", "b/a"]);
    }
}
