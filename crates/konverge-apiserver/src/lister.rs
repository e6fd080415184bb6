//! What the server's own readers see of the stored objects: the seams between the registry and
//! the code it runs, which never holds the registry itself.
//!
//! - [`Lister`]: admission plugins, the RBAC authorizer and webhook Service lookup read objects
//!   through it (gets, consistent lists from the watch cache), ask how often a kind of
//!   configuration changed ([`Changes`]), and make their one write (ResourceQuota admission
//!   recording usage in a quota's status). The [`Registry`](crate::registry::Registry)
//!   implements it; kube-apiserver's plugins read listers over informers the same way.
//! - [`View`]: what such a reader keeps of one kind of configuration (RBAC's policy, the
//!   admission webhooks and policies, API Priority and Fairness), rebuilt when, and only
//!   when, its [`Changes`] count moved.
//! - [`WriteCheck`]: what the registry asks before storing a client's write of a kind that
//!   needs one (RBAC's escalation check).
//!
//! They depend on nothing but the catalog of resources, so the registry may run admission and
//! authorization code that reads through them without an import circle.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};

use konverge_apimachinery::selector::LabelSelector;
use serde_json::Value;

use crate::auth::user::UserInfo;
use crate::error::Result;
use crate::resources::{Catalog, ResourceType};

/// A kind of configuration whose committed writes are counted, so that readers that keep a
/// view of it rebuild the view when, and only when, it may have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changes {
    /// Roles, ClusterRoles and their bindings.
    Policy,
    /// Admission webhook configurations, admission policies and their bindings.
    Admission,
    /// ResourceQuotas.
    Quota,
    /// FlowSchemas and PriorityLevelConfigurations.
    FlowControl,
    /// APIServices.
    ApiServices,
}

impl Changes {
    /// How many kinds of counted configuration there are.
    pub(crate) const COUNT: usize = 5;
}

/// Reads of stored objects, for the code the registry runs.
///
/// Reads see every write answered before they began: gets read the store, lists are consistent
/// reads of the watch cache.
#[async_trait::async_trait]
pub trait Lister: Send + Sync + std::fmt::Debug {
    /// The resources served.
    fn catalog(&self) -> &Arc<Catalog>;

    /// The object `name` (in `namespace`), as `rt` serves it; `NotFound` if there is none.
    async fn get(&self, rt: &ResourceType, namespace: Option<&str>, name: &str) -> Result<Value>;

    /// Every object of `rt` (in `namespace`, or in all), those matching `labels` only when
    /// given, in key order.
    async fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: Option<&LabelSelector>,
    ) -> Result<Vec<Arc<Value>>>;

    /// How many changes of `of` there have been. It moves before a write through this
    /// server is answered, so a reader that rebuilds its view whenever it moves never judges
    /// a request by configuration older than what a client has been told is written; and it
    /// moves when the watch cache of such a kind applies a change, so a write through another
    /// server over the same store reaches the reader too, as soon as the cache has it.
    fn changes(&self, of: Changes) -> u64;

    /// Stores `object` as the new status of `name`, if nothing changed it since it was read
    /// (its resourceVersion): ResourceQuota admission records what it charged.
    async fn write_status(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        object: Value,
    ) -> Result<()>;
}

/// A reader's view of one kind of counted configuration, built from its stored objects and
/// rebuilt when, and only when, its [`Changes`] count moved since: readers share the current
/// view, and one reader at a time rebuilds it (the others wait, then share what it built).
pub struct View<T> {
    of: Changes,
    current: RwLock<Option<(u64, Arc<T>)>>,
    rebuild: tokio::sync::Mutex<()>,
}

impl<T> std::fmt::Debug for View<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("of", &self.of)
            .finish_non_exhaustive()
    }
}

impl<T> View<T> {
    /// A view of `of`, built at its first use.
    pub fn new(of: Changes) -> View<T> {
        View {
            of,
            current: RwLock::new(None),
            rebuild: tokio::sync::Mutex::new(()),
        }
    }

    /// The view, if its configuration did not change since it was built.
    pub fn fresh(&self, lister: &dyn Lister) -> Option<Arc<T>> {
        let count = lister.changes(self.of);
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|(built_at, _)| *built_at == count)
            .map(|(_, view)| view.clone())
    }

    /// The view as of the configuration's latest change: `build` makes it, given the
    /// previous one (to keep what did not change), when the count moved since.
    pub async fn get<F, Fut>(&self, lister: &dyn Lister, build: F) -> Result<Arc<T>>
    where
        F: FnOnce(Option<Arc<T>>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if let Some(view) = self.fresh(lister) {
            return Ok(view);
        }
        let _one = self.rebuild.lock().await;
        if let Some(view) = self.fresh(lister) {
            return Ok(view);
        }
        // Counted before reading: a write committed while building moves the count again,
        // and the next use builds once more.
        let count = lister.changes(self.of);
        let previous = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, view)| view.clone());
        let built = Arc::new(build(previous).await?);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
            Some((count, built.clone()));
        Ok(built)
    }
}

/// Checks a client's create or update before it is stored, knowing who writes — as
/// kube-apiserver's storage refuses RBAC objects that grant more than their writer holds.
#[async_trait::async_trait]
pub trait WriteCheck: Send + Sync {
    /// Whether writes of `rt` are checked at all.
    fn applies(&self, rt: &ResourceType) -> bool;

    /// `Ok` if `user` may store `new` (replacing `old`, for an update) in `rt`.
    async fn check(
        &self,
        rt: &ResourceType,
        old: Option<&Value>,
        new: &Value,
        user: &UserInfo,
    ) -> Result<()>;
}
