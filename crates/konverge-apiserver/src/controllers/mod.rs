//! The control loops a cluster has even without nodes: ownerReference garbage collection
//! ([`gc`]), namespace finalization ([`namespaces`]), what every namespace holds
//! ([`namespace_defaults`]), ClusterRole aggregation ([`aggregation`]), ResourceQuota usage
//! ([`quota`], with its own watch), the type checking of ValidatingAdmissionPolicies
//! ([`policy_status`]) and store compaction ([`compaction`]); the definition controller
//! ([`crd`]), which serves custom resources; and the objects a new cluster starts with
//! ([`bootstrap`]).
//!
//! Both read one [`ClusterIndex`]: a small, ordered summary of every stored object (its uid,
//! owners, finalizers and whether it is being deleted), kept current by a single watch on the
//! whole store. The loops decide from the index and act through the [`Registry`], so their
//! writes follow the same rules as any client's.

pub mod aggregation;
pub mod bootstrap;
pub mod compaction;
pub mod crd;
pub mod gc;
pub mod namespace_defaults;
pub mod namespaces;
pub mod policy_status;
pub mod quota;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{EventKind, KeyRange, RangeRequest, WatchRequest, WatchResponse};
use serde_json::Value;

use crate::registry::Registry;
use crate::resources::ResourceType;

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

/// Every stored object, by uid, with the reverse owner index. Ordered maps keep every pass
/// over it in the same order.
#[derive(Debug, Default)]
pub struct ClusterIndex {
    by_uid: BTreeMap<String, Node>,
    uid_by_key: BTreeMap<String, String>,
    dependents: BTreeMap<String, BTreeSet<String>>,
}

impl ClusterIndex {
    fn upsert(&mut self, key: &str, node: Node) {
        self.remove(key);
        for owner in &node.owners {
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert(node.uid.clone());
        }
        self.uid_by_key.insert(key.to_string(), node.uid.clone());
        self.by_uid.insert(node.uid.clone(), node);
    }

    fn remove(&mut self, key: &str) {
        let Some(uid) = self.uid_by_key.remove(key) else {
            return;
        };
        if let Some(node) = self.by_uid.remove(&uid) {
            for owner in &node.owners {
                if let Some(set) = self.dependents.get_mut(&owner.uid) {
                    set.remove(&uid);
                    if set.is_empty() {
                        self.dependents.remove(&owner.uid);
                    }
                }
            }
        }
    }

    /// The object with this uid.
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.by_uid.get(uid)
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
        self.by_uid
            .values()
            .filter(|n| n.namespace.as_deref() == Some(namespace))
            .count()
    }
}

fn node_of(registry: &Registry, key: &str, value: &[u8]) -> Option<Node> {
    let (rt, namespace, name) = registry.catalog().resolve_key(key)?;
    let obj: Value = serde_json::from_slice(value).ok()?;
    let md = obj.get("metadata")?;
    let uid = md.get("uid")?.as_str()?.to_string();
    let owners = md
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    Some(OwnerRef {
                        uid: r.get("uid")?.as_str()?.to_string(),
                        api_version: r.get("apiVersion")?.as_str()?.to_string(),
                        kind: r.get("kind")?.as_str()?.to_string(),
                        block_owner_deletion: r.get("blockOwnerDeletion")
                            == Some(&Value::Bool(true)),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Node {
        rt,
        namespace,
        name,
        uid,
        owners,
        deleting: md.get("deletionTimestamp").is_some(),
        finalizers: crate::resources::meta::finalizers(&obj),
    })
}

/// How long the loops wait after a change before acting, so a burst of changes is one pass.
const SETTLE: Duration = Duration::from_millis(20);
/// How often the loops look again even without changes (an action may have failed).
const RESYNC: Duration = Duration::from_secs(2);

/// What the control loops are told about the server.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The PEM of the CA that verifies the server, published in every namespace as
    /// `kube-root-ca.crt` (not published when the server has none).
    pub root_ca: Option<String>,
}

/// Runs the garbage collector, the namespace controllers, ClusterRole aggregation and the
/// resource quota controller ([`quota`]) until the store closes.
pub async fn run(registry: Registry, settings: Settings) {
    tokio::join!(run_shared(registry.clone(), settings), quota::run(registry));
}

/// The loops that share the [`ClusterIndex`], restarted after a failure.
async fn run_shared(registry: Registry, settings: Settings) {
    loop {
        if let Err(err) = run_once(&registry, &settings).await {
            tracing::warn!(error = %err, "control loops restarting");
            tokio::time::sleep(Duration::from_secs(1)).await;
        } else {
            return;
        }
    }
}

/// One pass of every loop over the store as it is now: what [`ApiServerBuilder::build`]
/// does before it returns, so a new server already has what these loops create (the default
/// ServiceAccounts, aggregated ClusterRoles) and its first client does not race them.
///
/// [`ApiServerBuilder::build`]: crate::ApiServerBuilder::build
pub async fn settle(registry: &Registry, settings: &Settings) -> Result<(), konverge_store::Error> {
    let (index, _) = index_now(registry).await?;
    pass(registry, &index, settings).await;
    Ok(())
}

async fn index_now(registry: &Registry) -> Result<(ClusterIndex, i64), konverge_store::Error> {
    let listed = registry
        .store()
        .range(RangeRequest::new(whole_registry()))
        .await?;
    let mut index = ClusterIndex::default();
    for kv in &listed.kvs {
        let key = String::from_utf8_lossy(&kv.key);
        if let Some(node) = node_of(registry, &key, &kv.value) {
            index.upsert(&key, node);
        }
    }
    Ok((index, listed.revision))
}

fn whole_registry() -> KeyRange {
    KeyRange::prefix(Bytes::from_static(b"/registry/"))
}

async fn pass(registry: &Registry, index: &ClusterIndex, settings: &Settings) {
    gc::pass(registry, index).await;
    namespaces::pass(registry, index).await;
    namespace_defaults::pass(registry, index, settings.root_ca.as_deref()).await;
    aggregation::pass(registry).await;
    policy_status::pass(registry).await;
}

async fn run_once(registry: &Registry, settings: &Settings) -> Result<(), konverge_store::Error> {
    let (mut index, revision) = index_now(registry).await?;
    let mut watch = registry
        .store()
        .watch(WatchRequest::new(whole_registry()).from_revision(revision + 1))
        .await?;
    let mut dirty = true;
    let mut resync = tokio::time::interval(RESYNC);
    loop {
        tokio::select! {
            message = watch.recv() => match message {
                Some(Ok(WatchResponse::Events(events))) => {
                    for event in events {
                        let key = String::from_utf8_lossy(&event.kv.key).into_owned();
                        match event.kind {
                            EventKind::Put => match node_of(registry, &key, &event.kv.value) {
                                Some(node) => index.upsert(&key, node),
                                None => index.remove(&key),
                            },
                            EventKind::Delete => index.remove(&key),
                        }
                    }
                    dirty = true;
                    continue;
                }
                Some(Ok(WatchResponse::Progress(_))) => continue,
                Some(Err(konverge_store::Error::Closed)) | None => return Ok(()),
                Some(Err(err)) => return Err(err),
            },
            _ = resync.tick() => dirty = true,
            () = tokio::time::sleep(SETTLE), if dirty => {
                dirty = false;
                pass(registry, &index, settings).await;
            }
        }
    }
}
