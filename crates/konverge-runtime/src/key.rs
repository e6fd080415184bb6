//! Object keys: `namespace/name`, ordered the same way in every process.
//!
//! Everything the runtime iterates (caches, index results, the initial fill of the work queue)
//! is ordered by [`ObjectKey`], so two runs over the same objects see them in the same order.
//! Cluster-scoped keys (no namespace) sort before namespaced ones.
//!
//! Controllers run by a [`Fleet`](crate::fleet::Fleet) see keys that also name the cluster
//! (shown as `cluster:namespace/name`); each cluster's caches and queues hold its own keys
//! without one.

use std::fmt;
use std::sync::Arc;

use kube::Resource;

/// Which object: its namespace (none for cluster-scoped objects) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// The cluster, for controllers run over several ([`Fleet`](crate::fleet::Fleet)).
    pub cluster: Option<Arc<str>>,
    /// The namespace, or `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectKey {
    /// A key for a namespaced object.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            cluster: None,
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// A key for a cluster-scoped object.
    pub fn cluster(name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            cluster: None,
            namespace: None,
            name: name.into(),
        }
    }

    /// The key of an object, or `None` if it has no name (only possible before it is created).
    pub fn of<K: Resource>(obj: &K) -> Option<ObjectKey> {
        let meta = obj.meta();
        Some(ObjectKey {
            cluster: None,
            namespace: meta.namespace.clone(),
            name: meta.name.clone()?,
        })
    }
}

impl ObjectKey {
    /// The same key in `cluster`.
    pub fn in_cluster(mut self, cluster: Option<Arc<str>>) -> ObjectKey {
        self.cluster = cluster;
        self
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(cluster) = &self.cluster {
            write!(f, "{cluster}:")?;
        }
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

    #[test]
    fn keys_in_a_cluster_show_it_and_sort_by_it_first() {
        let east = ObjectKey::namespaced("a", "x").in_cluster(Some("east".into()));
        let west = ObjectKey::cluster("m").in_cluster(Some("west".into()));
        assert_eq!(east.to_string(), "east:a/x");
        assert_eq!(west.to_string(), "west:m");
        let mut keys = [west.clone(), ObjectKey::namespaced("z", "z"), east.clone()];
        keys.sort();
        assert_eq!(keys, [ObjectKey::namespaced("z", "z"), east, west]);
    }
}
