//! The control loops a cluster has even without nodes. kube-controller-manager's, which
//! [`ApiServerBuilder::control_loops`](crate::ApiServerBuilder::control_loops) turns off:
//! ownerReference garbage collection ([`gc`]), namespace finalization ([`namespaces`]), what
//! every namespace holds ([`namespace_defaults`]), ClusterRole aggregation ([`aggregation`]),
//! ResourceQuota usage ([`quota`], with its own watch) and the type checking of
//! ValidatingAdmissionPolicies ([`policy_status`]). And kube-apiserver's own, which always
//! run: store compaction ([`compaction`]), API Priority and Fairness' bootstrap objects and
//! FlowSchema conditions ([`flowcontrol`]), the repair of Services' node ports and cluster IPs
//! ([`service_repair`]), the definition controller ([`crd`]), which serves
//! custom resources and registers their groups' APIServices ([`api_services`]), the
//! availability checks of APIServices served by aggregated API servers
//! ([`api_service_status`]), the objects a new cluster starts with ([`bootstrap`]), the
//! `kubernetes` Service's endpoints listing the live servers ([`endpoints`]) and what the
//! server keeps in `kube-system` ([`kube_system`]: its identity Lease, the authentication
//! ConfigMap aggregated servers read).
//!
//! Both read one [`ClusterIndex`]: a small, ordered summary of every stored object (its uid,
//! owners, finalizers and whether it is being deleted), kept current by a single watch on the
//! whole store. The loops decide from the index and act through the [`Registry`], so their
//! writes follow the same rules as any client's.

pub mod aggregation;
pub(crate) mod api_service_status;
pub mod api_services;
pub mod bootstrap;
pub mod compaction;
pub mod crd;
mod decode;
pub mod endpoints;
mod fixed;
pub(crate) mod flowcontrol;
pub mod gc;
pub mod kube_system;
pub mod namespace_defaults;
pub mod namespaces;
pub mod policy_status;
pub mod quota;
pub(crate) mod service_repair;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{EventKind, KeyRange, RangeRequest, WatchRequest, WatchResponse};

use crate::registry::Registry;
use crate::resources::{Catalog, ResourceType};

/// One `ownerReferences` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// The owner's uid.
    pub uid: String,
    /// The owner's apiVersion.
    pub api_version: String,
    /// The owner's kind.
    pub kind: String,
    /// `blockOwnerDeletion`: a foreground deletion of the owner waits for this dependent.
    pub block_owner_deletion: bool,
}

/// What the control loops need to know of one object.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its resource.
    pub rt: Arc<ResourceType>,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its owners.
    pub owners: Vec<OwnerRef>,
    /// Whether it has a deletionTimestamp.
    pub deleting: bool,
    /// Its `metadata.finalizers`.
    pub finalizers: Vec<String>,
}

impl Node {
    /// Whether `other` tells the loops nothing new: a write that changed only what they do
    /// not read (a pod's status, a label) leaves the node as it was.
    fn same_as(&self, other: &Node) -> bool {
        Arc::ptr_eq(&self.rt, &other.rt)
            && self.namespace == other.namespace
            && self.name == other.name
            && self.uid == other.uid
            && self.owners == other.owners
            && self.deleting == other.deleting
            && self.finalizers == other.finalizers
    }

    fn is(&self, group: &str, plural: &str) -> bool {
        self.rt.group == group && self.rt.plural == plural
    }
}

/// What changed in the [`ClusterIndex`] since the loops last looked, so that a pass looks at
/// what a change can have decided and not at every object, as kube's garbage collector and
/// namespace controller follow their informers' events.
#[derive(Debug, Default)]
pub struct Changes {
    /// The uids of objects added, changed or removed.
    touched: BTreeSet<String>,
    /// The uids of the owners those objects named, before and after the change: whether an
    /// owner's foreground or orphan deletion can finish depends on its dependents.
    owners: BTreeSet<String>,
    /// The namespaces in which an object was added, changed or removed, and the namespaces
    /// that were themselves.
    namespaces: BTreeSet<String>,
    /// Whether a ClusterRole changed (aggregation).
    cluster_roles: bool,
    /// Whether a ValidatingAdmissionPolicy changed (its status).
    policies: bool,
}

impl Changes {
    fn note(&mut self, node: &Node) {
        self.touched.insert(node.uid.clone());
        self.owners
            .extend(node.owners.iter().map(|o| o.uid.clone()));
        if let Some(ns) = &node.namespace {
            self.namespaces.insert(ns.clone());
        } else if node.is("", "namespaces") {
            self.namespaces.insert(node.name.clone());
        }
        self.note_kind(node);
    }

    fn note_kind(&mut self, node: &Node) {
        // The root CA ConfigMap's content is kept as published: any write of it counts.
        if node.is("", "configmaps")
            && node.name == namespace_defaults::ROOT_CA_CONFIG_MAP
            && let Some(ns) = &node.namespace
        {
            self.namespaces.insert(ns.clone());
        }
        self.cluster_roles |= node.is("rbac.authorization.k8s.io", "clusterroles");
        self.policies |= node.is(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
        );
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.touched.is_empty()
            && self.namespaces.is_empty()
            && !self.cluster_roles
            && !self.policies
    }
}

/// What a pass looks at.
#[derive(Debug)]
pub enum Scope {
    /// Every object: the first pass, and the periodic one that retries what failed.
    Everything,
    /// What these changes can have decided.
    Changed(Changes),
}

impl Scope {
    /// The objects the garbage collector decides about, in uid order: those that changed,
    /// their owners (whose deletion may wait for them) and their dependents (whose fate
    /// follows their owners).
    fn gc_candidates<'i>(&self, index: &'i ClusterIndex) -> Vec<&'i Node> {
        match self {
            Scope::Everything => index.nodes().collect(),
            Scope::Changed(changes) => {
                let mut uids: BTreeSet<&str> = changes
                    .touched
                    .iter()
                    .chain(&changes.owners)
                    .map(String::as_str)
                    .collect();
                for uid in &changes.touched {
                    if let Some(dependents) = index.dependents.get(uid) {
                        uids.extend(dependents.iter().map(String::as_str));
                    }
                }
                uids.into_iter().filter_map(|uid| index.get(uid)).collect()
            }
        }
    }

    /// The namespaces whose finalization and defaults are looked at, in name order.
    fn namespaces<'a>(&'a self, index: &'a ClusterIndex) -> Vec<&'a str> {
        match self {
            Scope::Everything => index.namespaces.keys().map(String::as_str).collect(),
            Scope::Changed(changes) => changes.namespaces.iter().map(String::as_str).collect(),
        }
    }

    fn cluster_roles(&self) -> bool {
        match self {
            Scope::Everything => true,
            Scope::Changed(changes) => changes.cluster_roles,
        }
    }

    fn policies(&self) -> bool {
        match self {
            Scope::Everything => true,
            Scope::Changed(changes) => changes.policies,
        }
    }
}

/// Every stored object, by uid, with the reverse owner index, how many objects each
/// namespace holds, and what changed since [`ClusterIndex::take_changes`]. Ordered maps keep
/// every pass over it in the same order.
#[derive(Debug, Default)]
pub struct ClusterIndex {
    by_uid: BTreeMap<String, Node>,
    uid_by_key: HashMap<String, String>,
    dependents: BTreeMap<String, BTreeSet<String>>,
    /// The uid of every Namespace, by name.
    namespaces: BTreeMap<String, String>,
    /// How many objects each namespace holds.
    in_namespace: HashMap<String, usize>,
    changes: Changes,
}

impl ClusterIndex {
    fn upsert(&mut self, key: &str, node: Node) {
        // Aggregation and the policies' status read more than the node holds (rules,
        // labels, generation): any write of theirs counts.
        self.changes.note_kind(&node);
        if let Some(old) = self
            .uid_by_key
            .get(key)
            .and_then(|uid| self.by_uid.get(uid))
            && old.same_as(&node)
        {
            return;
        }
        self.remove(key);
        self.changes.note(&node);
        for owner in &node.owners {
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert(node.uid.clone());
        }
        if let Some(ns) = &node.namespace {
            *self.in_namespace.entry(ns.clone()).or_default() += 1;
        } else if node.is("", "namespaces") {
            self.namespaces.insert(node.name.clone(), node.uid.clone());
        }
        self.uid_by_key.insert(key.to_string(), node.uid.clone());
        self.by_uid.insert(node.uid.clone(), node);
    }

    fn remove(&mut self, key: &str) {
        let Some(uid) = self.uid_by_key.remove(key) else {
            return;
        };
        let Some(node) = self.by_uid.remove(&uid) else {
            return;
        };
        self.changes.note(&node);
        for owner in &node.owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(&uid);
                if set.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
        }
        if let Some(ns) = &node.namespace {
            if let Some(count) = self.in_namespace.get_mut(ns) {
                *count -= 1;
                if *count == 0 {
                    self.in_namespace.remove(ns);
                }
            }
        } else if node.is("", "namespaces") && self.namespaces.get(&node.name) == Some(&uid) {
            self.namespaces.remove(&node.name);
        }
    }

    /// What changed since the last call, handed over.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Whether anything changed since the last [`ClusterIndex::take_changes`].
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    /// The object with this uid.
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.by_uid.get(uid)
    }

    /// The object stored under this key.
    pub fn get_by_key(&self, key: &str) -> Option<&Node> {
        self.uid_by_key
            .get(key)
            .and_then(|uid| self.by_uid.get(uid))
    }

    /// The Namespace with this name.
    pub fn namespace(&self, name: &str) -> Option<&Node> {
        self.namespaces
            .get(name)
            .and_then(|uid| self.by_uid.get(uid))
    }

    /// Every object, in uid order.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.by_uid.values()
    }

    /// The objects that name `uid` as an owner.
    pub fn dependents_of(&self, uid: &str) -> Vec<&Node> {
        self.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| self.by_uid.get(d))
            .collect()
    }

    /// The objects whose reference to `uid` blocks its foreground deletion
    /// (`blockOwnerDeletion: true`).
    pub fn blocking_dependents_of(&self, uid: &str) -> Vec<&Node> {
        self.dependents_of(uid)
            .into_iter()
            .filter(|d| {
                d.owners
                    .iter()
                    .any(|o| o.uid == uid && o.block_owner_deletion)
            })
            .collect()
    }

    /// How many objects live in a namespace.
    pub fn count_in_namespace(&self, namespace: &str) -> usize {
        self.in_namespace.get(namespace).copied().unwrap_or(0)
    }
}

/// The resource, namespace and name of storage keys, remembered by the part of the key that
/// decides them: the catalog's `resolve_key` compares every resource's prefix, and the loops
/// resolve every key the store writes. Forgets everything when the served resources change
/// ([`crd::catalog_changes`]).
#[derive(Debug, Default)]
struct Resolver {
    /// The resource of each key directory, with the length of its storage prefix.
    by_dir: HashMap<String, (Arc<ResourceType>, usize)>,
    catalog_changes: u64,
}

impl Resolver {
    fn resolve(
        &mut self,
        catalog: &Catalog,
        key: &str,
    ) -> Option<(Arc<ResourceType>, Option<String>, String)> {
        let changes = crd::catalog_changes();
        if changes != self.catalog_changes {
            self.by_dir.clear();
            self.catalog_changes = changes;
        }
        // Storage prefixes are `/registry/{plural}/` or `/registry/{group}/{plural}/`: which
        // match a key depends on its first two segments only.
        let dir = key_dir(key)?;
        let (rt, prefix) = match self.by_dir.get(dir) {
            Some(known) => known.clone(),
            None => {
                let (rt, _, _) = catalog.resolve_key(key)?;
                let known = (rt.clone(), rt.storage_prefix().len());
                self.by_dir.insert(dir.to_string(), known.clone());
                known
            }
        };
        let rest = key.get(prefix..)?;
        if rt.namespaced {
            let (ns, name) = rest.split_once('/')?;
            Some((rt, Some(ns.to_string()), name.to_string()))
        } else {
            Some((rt, None, rest.to_string()))
        }
    }
}

/// `/registry/a/b/` of `/registry/a/b/...`, or `/registry/a/` of `/registry/a/b`.
fn key_dir(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("/registry/")?;
    let first = rest.find('/')?;
    let end = match rest[first + 1..].find('/') {
        Some(second) => first + 1 + second + 1,
        None => first + 1,
    };
    Some(&key[.."/registry/".len() + end])
}

fn node_of(resolver: &mut Resolver, registry: &Registry, key: &str, value: &[u8]) -> Option<Node> {
    let summary = decode::summary(value)?;
    let (rt, namespace, name) = resolver.resolve(registry.catalog(), key)?;
    Some(Node {
        rt,
        namespace,
        name,
        uid: summary.uid.into_owned(),
        owners: summary
            .owners
            .into_iter()
            .map(|o| OwnerRef {
                uid: o.uid.into_owned(),
                api_version: o.api_version.into_owned(),
                kind: o.kind.into_owned(),
                block_owner_deletion: o.block_owner_deletion,
            })
            .collect(),
        deleting: summary.deleting,
        finalizers: summary
            .finalizers
            .into_iter()
            .map(|f| f.into_owned())
            .collect(),
    })
}

/// Logs a control loop's write that failed for a reason other than a race: an object
/// changed, created or deleted meanwhile is looked at again at the loop's next pass.
fn report_write(result: Result<(), crate::error::ApiError>, what: &str) {
    use crate::error::Reason;
    match result {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.reason,
                Reason::Conflict | Reason::AlreadyExists | Reason::NotFound
            ) => {}
        Err(e) => tracing::warn!(error = %e, "writing {what} failed"),
    }
}

/// How long the loops wait after a change before acting, so a burst of changes is one pass.
const SETTLE: Duration = Duration::from_millis(20);
/// How often the loops look at everything again, even without changes: an action may have
/// failed, or the served resources changed what an owner reference resolves to.
const RESYNC: Duration = Duration::from_secs(2);

/// When the shared loops act.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// The quiet time after changes before a pass over what they touched.
    settle: Duration,
    /// The period of the pass over everything.
    resync: Duration,
}

const TIMING: Timing = Timing {
    settle: SETTLE,
    resync: RESYNC,
};

/// What the control loops are told about the server.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The PEM of the CA that verifies the server, published in every namespace as
    /// `kube-root-ca.crt` (not published when the server has none).
    pub root_ca: Option<String>,
}

/// Runs the garbage collector, the namespace controllers, ClusterRole aggregation and the
/// resource quota controller ([`quota`]) until the store closes.
///
/// Given what [`settle`] left, the loops start from its index and watch from the revision
/// it was read at, rather than indexing the store again and repeating its pass at once.
pub async fn run(registry: Registry, settings: Settings, settled: Option<Settled>) {
    tokio::join!(
        run_shared(registry.clone(), settings, TIMING, settled),
        quota::run(registry)
    );
}

/// The loops that share the [`ClusterIndex`], restarted after a failure.
async fn run_shared(
    registry: Registry,
    settings: Settings,
    timing: Timing,
    mut settled: Option<Settled>,
) {
    loop {
        if let Err(err) = run_once(&registry, &settings, timing, settled.take()).await {
            tracing::warn!(error = %err, "control loops restarting");
            tokio::time::sleep(Duration::from_secs(1)).await;
        } else {
            return;
        }
    }
}

/// One pass of every loop over the store as it is now: what [`ApiServerBuilder::build`]
/// does before it returns, so a new server already has what these loops create (the default
/// ServiceAccounts, aggregated ClusterRoles) and its first client does not race them. Over a
/// store written to before, ClusterRole aggregation is left to the loops' first pass: the
/// roles are as the last server aggregated them. Over one that held every bootstrap object
/// (a restart), `build` leaves the whole pass to the loops: it would find what the last
/// server made.
///
/// [`ApiServerBuilder::build`]: crate::ApiServerBuilder::build
pub async fn settle(
    registry: &Registry,
    settings: &Settings,
    bootstrapped: bootstrap::Bootstrapped,
) -> Result<Settled, konverge_store::Error> {
    let mut resolver = Resolver::default();
    let (index, revision) = index_now(registry, &mut resolver).await?;
    let scope = Scope::Everything;
    objects_pass(registry, &index, settings, &scope).await;
    match bootstrapped {
        // The aggregated roles were stored as a pass like this one left them.
        bootstrap::Bootstrapped::CreatedSettled { .. } => {}
        bootstrap::Bootstrapped::Created { .. } => {
            if let Some(aggregated) = aggregation::pass(registry).await {
                bootstrap::remember_settled(registry, &aggregated, bootstrap::Keep::Settled);
            }
        }
        // A store written to before holds the roles as the last server's loops aggregated
        // them; whatever changed since is aggregated by the loops' first pass, after the
        // server is up (kube-controller-manager's aggregation never holds kube-apiserver
        // back either).
        bootstrap::Bootstrapped::Found | bootstrap::Bootstrapped::Existing => {}
    }
    policy_status::pass(registry).await;
    Ok(Settled {
        index,
        revision,
        resolver,
        aggregate: bootstrapped.written_before(),
    })
}

/// What [`settle`] indexed, and the revision it read the store at: where [`run`] starts.
pub struct Settled {
    index: ClusterIndex,
    revision: i64,
    resolver: Resolver,
    /// Whether ClusterRole aggregation is still to be done.
    aggregate: bool,
}

impl std::fmt::Debug for Settled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settled")
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

async fn index_now(
    registry: &Registry,
    resolver: &mut Resolver,
) -> Result<(ClusterIndex, i64), konverge_store::Error> {
    let listed = registry
        .store()
        .range(RangeRequest::new(whole_registry()))
        .await?;
    let mut index = ClusterIndex::default();
    for kv in &listed.kvs {
        let key = String::from_utf8_lossy(&kv.key);
        if let Some(node) = node_of(resolver, registry, &key, &kv.value) {
            index.upsert(&key, node);
        }
    }
    // The first pass looks at everything.
    index.take_changes();
    Ok((index, listed.revision))
}

/// The loops that look at objects through the index: garbage collection, namespaces and
/// what every namespace holds.
async fn objects_pass(
    registry: &Registry,
    index: &ClusterIndex,
    settings: &Settings,
    scope: &Scope,
) {
    gc::pass(registry, index, scope).await;
    let namespaces = scope.namespaces(index);
    namespaces::pass(registry, index, &namespaces).await;
    namespace_defaults::pass(registry, index, &namespaces, settings.root_ca.as_deref()).await;
}

fn whole_registry() -> KeyRange {
    KeyRange::prefix(Bytes::from_static(b"/registry/"))
}

async fn pass(registry: &Registry, index: &ClusterIndex, settings: &Settings, scope: &Scope) {
    objects_pass(registry, index, settings, scope).await;
    if scope.cluster_roles() {
        aggregation::pass(registry).await;
    }
    if scope.policies() {
        policy_status::pass(registry).await;
    }
}

async fn run_once(
    registry: &Registry,
    settings: &Settings,
    timing: Timing,
    settled: Option<Settled>,
) -> Result<(), konverge_store::Error> {
    let (mut index, revision, mut resolver, first_resync) = match settled {
        // Settle's pass looked at everything: the first resync is a period away.
        Some(settled) => {
            if settled.aggregate {
                aggregation::pass(registry).await;
            }
            (
                settled.index,
                settled.revision,
                settled.resolver,
                tokio::time::Instant::now() + timing.resync,
            )
        }
        None => {
            let mut resolver = Resolver::default();
            let (index, revision) = index_now(registry, &mut resolver).await?;
            // The first tick is now: the first pass looks at everything.
            (index, revision, resolver, tokio::time::Instant::now())
        }
    };
    let mut watch = registry
        .store()
        .watch(WatchRequest::new(whole_registry()).from_revision(revision + 1))
        .await?;
    let mut resync = tokio::time::interval_at(first_resync, timing.resync);
    let mut everything = false;
    loop {
        tokio::select! {
            message = watch.recv() => match message {
                Some(Ok(WatchResponse::Events(events))) => {
                    for event in events {
                        let key = String::from_utf8_lossy(&event.kv.key);
                        match event.kind {
                            EventKind::Put => {
                                match node_of(&mut resolver, registry, &key, &event.kv.value) {
                                    Some(node) => index.upsert(&key, node),
                                    None => index.remove(&key),
                                }
                            }
                            EventKind::Delete => index.remove(&key),
                        }
                    }
                    continue;
                }
                Some(Ok(WatchResponse::Progress(_))) => continue,
                Some(Err(konverge_store::Error::Closed)) | None => return Ok(()),
                Some(Err(err)) => return Err(err),
            },
            _ = resync.tick() => everything = true,
            () = tokio::time::sleep(timing.settle), if everything || index.has_changes() => {
                let changes = index.take_changes();
                let scope = if std::mem::take(&mut everything) {
                    Scope::Everything
                } else {
                    Scope::Changed(changes)
                };
                pass(registry, &index, settings, &scope).await;
            }
        }
    }
}

#[cfg(test)]
mod tests;
