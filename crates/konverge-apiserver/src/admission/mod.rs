//! Admission: the chain kube-apiserver runs between decoding a write and storing it —
//! mutating plugins first (they may change the object), then, after the object is validated,
//! validating plugins (they may only refuse it).
//!
//! The registry runs the [`Chain`] on every create and update, the server's own writes
//! included, dry runs too. The built-in plugins ([`Chain::builtin`]), each as kube-apiserver
//! enables it by default:
//!
//! - [`LimitRanger`]: the namespace's LimitRanges fill in a new pod's missing container
//!   limits and requests and refuse those out of their `min`/`max`;
//! - [`ServiceAccount`]: a new pod runs as an existing ServiceAccount (`default` unless it
//!   names one) with its API token, the cluster CA and its namespace mounted;
//! - [`Priority`]: a pod's `priorityClassName` becomes its `priority` and `preemptionPolicy`
//!   (the global default class, or priority 0, when it names none);
//! - [`DefaultTolerationSeconds`]: a new pod tolerates not-ready and unreachable nodes for
//!   five minutes;
//! - [`DefaultClass::storage`] (`DefaultStorageClass`): a PersistentVolumeClaim that names no
//!   class gets the default StorageClass;
//! - [`DefaultClass::ingress`] (`DefaultIngressClass`): an Ingress that names no class gets
//!   the default IngressClass.

mod limits;
mod plugins;
mod pods;

use std::sync::Arc;

use serde_json::Value;

use crate::auth::user::UserInfo;
use crate::error::Result;
use crate::registry::Registry;
use crate::resources::ResourceType;

pub use limits::LimitRanger;
pub use plugins::{DefaultClass, Priority};
pub use pods::{DefaultTolerationSeconds, ServiceAccount};

/// What a write does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A create.
    Create,
    /// An update (a patch, an apply, a subresource write).
    Update,
}

/// What the chain knows about a write.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// Create or update.
    pub operation: Operation,
    /// The resource.
    pub rt: &'a ResourceType,
    /// The namespace (empty for cluster-scoped resources).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The subresource written, if any.
    pub subresource: Option<&'a str>,
    /// The object before an update.
    pub old: Option<&'a Value>,
    /// Who writes (`None`: the server itself).
    pub user: Option<&'a UserInfo>,
    /// Whether nothing will be stored.
    pub dry_run: bool,
}

impl Attributes<'_> {
    /// Whether this is a create of `group/plural` (no subresource).
    pub fn creates(&self, group: &str, plural: &str) -> bool {
        self.operation == Operation::Create
            && self.subresource.is_none()
            && self.rt.group == group
            && self.rt.plural == plural
    }
}

/// One admission plugin.
#[async_trait::async_trait]
pub trait Plugin: Send + Sync + std::fmt::Debug {
    /// Its name, as `--enable-admission-plugins` spells it.
    fn name(&self) -> &'static str;

    /// Whether it may act on writes of `rt` at all (writes of other resources skip it).
    fn handles(&self, _rt: &ResourceType) -> bool {
        true
    }

    /// The mutating phase: may change `object` (then says so), or refuse the write.
    async fn admit(
        &self,
        _attributes: &Attributes<'_>,
        _object: &mut Value,
        _registry: &Registry,
    ) -> Result<bool> {
        Ok(false)
    }

    /// The validating phase, after the object passed validation: may only refuse the write.
    async fn validate(
        &self,
        _attributes: &Attributes<'_>,
        _object: &Value,
        _registry: &Registry,
    ) -> Result<()> {
        Ok(())
    }
}

/// The plugins, in the order they run.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    plugins: Vec<Arc<dyn Plugin>>,
}

impl Chain {
    /// No plugins.
    pub fn empty() -> Chain {
        Chain::default()
    }

    /// The built-in plugins kube-apiserver enables by default that konverge implements, in
    /// kube-apiserver's order.
    pub fn builtin() -> Chain {
        Chain {
            plugins: vec![
                Arc::new(LimitRanger),
                Arc::new(ServiceAccount),
                Arc::new(Priority),
                Arc::new(DefaultTolerationSeconds),
                Arc::new(DefaultClass::storage()),
                Arc::new(DefaultClass::ingress()),
            ],
        }
    }

    /// Whether there are no plugins.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// Whether any plugin may act on writes of `rt` (if none, the registry skips the chain,
    /// and does not keep the old object of an update for it).
    pub fn handles(&self, rt: &ResourceType) -> bool {
        self.plugins.iter().any(|p| p.handles(rt))
    }

    /// The names of the plugins, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// Runs every plugin's mutating phase; says whether any changed the object.
    pub async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &Registry,
    ) -> Result<bool> {
        let mut changed = false;
        for plugin in self.plugins.iter().filter(|p| p.handles(attributes.rt)) {
            changed |= plugin.admit(attributes, object, registry).await?;
        }
        Ok(changed)
    }

    /// Runs every plugin's validating phase.
    pub async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &Registry,
    ) -> Result<()> {
        for plugin in self.plugins.iter().filter(|p| p.handles(attributes.rt)) {
            plugin.validate(attributes, object, registry).await?;
        }
        Ok(())
    }
}
