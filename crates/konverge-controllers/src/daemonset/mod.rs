//! kcm's DaemonSet controller (`pkg/controller/daemon`): one pod of a DaemonSet on every
//! node that should run one.
//!
//! A sync reads the DaemonSet, the nodes and the pods from the shared caches and:
//!
//! - claims the pods its selector matches (adopting orphans, releasing pods it no longer
//!   matches) and finds the node each is for — its `nodeName`, or before scheduling the node
//!   its required node affinity names by `metadata.name`;
//! - finds or creates the ControllerRevision of its template ([`history`]), whose
//!   `controller-revision-hash` labels the pods of that revision;
//! - once its earlier creations and deletions are in the cache ([`Expectations`]), puts a
//!   pod on every node that should run one and deletes pods where none should run
//!   ([`manage`]), replaces failed pods with a per-node back-off ([`backoff`]), then replaces
//!   pods of older revisions as the update strategy allows ([`update`]) and deletes revisions
//!   beyond `revisionHistoryLimit`;
//! - writes the status counts.
//!
//! Which nodes should run a pod is [`placement`]: the template's node name, node selector,
//! required node affinity and tolerations (with the ones kcm adds) against the node's labels
//! and taints. Pods are created with `generateName: <daemonset>-`, pinned to their node by
//! node affinity (the scheduler binds them), labelled `controller-revision-hash` and
//! `pod-template-generation`.
//!
//! Triggers, as kcm's event handlers: a pod's controller DaemonSet (or, for an orphan, every
//! DaemonSet whose selector matches it); a ControllerRevision's; for a node added, every
//! DaemonSet that should run on it; for a node relabelled or retainted, every DaemonSet whose
//! verdict on it changed; for a node deleted, every DaemonSet (kcm leaves that to the pod
//! GC, which does not delete unscheduled pods; here the next sync deletes pods pinned to a
//! node that is gone).

pub mod backoff;
mod context;
pub mod history;
pub mod manage;
pub mod placement;
mod strategy;
pub mod update;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store, predicate};
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use self::backoff::Backoff;
use self::context::{Ctx, HASH_LABEL, Requeue, by_age, is_updated, key_of, min_ready_seconds};
use self::manage::NodePods;
use crate::controller_ref::{self, controller_of, new_controller_ref};
use crate::descriptor::{Descriptor, Setup};
use crate::error::Result;
use crate::events::Events;
use crate::expectations::{self, Expectations};
use crate::informers;
use crate::pods;

/// kcm's daemonset controller.
pub const DAEMONSET: Descriptor = Descriptor {
    name: "daemonset-controller",
    aliases: &["daemonset"],
    service_account: "daemon-set-controller",
    add,
};

/// kcm's `ConcurrentDaemonSetSyncs` default.
const WORKERS: usize = 2;

fn add(manager: &mut Manager, setup: Setup) {
    let daemon_sets = informers::cache::<DaemonSet>(manager);
    let expectations = Arc::new(Expectations::new());
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), DAEMONSET.name),
        client: setup.client,
        clock: setup.clock,
        expectations: expectations.clone(),
        backoff: Backoff::default(),
        pods: informers::cache::<Pod>(manager),
        nodes: informers::cache::<Node>(manager),
        revisions: informers::cache::<ControllerRevision>(manager),
    });
    let controller = informers::controller::<DaemonSet>(manager)
        .named(DAEMONSET.name)
        // kcm syncs on every change of a DaemonSet, status included.
        .with_predicate(predicate::resource_version_changed())
        .concurrency(WORKERS)
        .watches_cached(
            informers::api::<DaemonSet>(manager),
            informers::config(),
            move |change: &Change<DaemonSet>| {
                // A DaemonSet deleted: a new one of the same name starts clean.
                if change.new.is_none() {
                    expectations.forget(&key_of_parts(&change.key));
                }
                Vec::new()
            },
        )
        .watches_cached(
            informers::api::<Pod>(manager),
            informers::config(),
            pod_trigger(daemon_sets.clone()),
        )
        .watches_cached(
            informers::api::<ControllerRevision>(manager),
            informers::config(),
            revision_trigger(daemon_sets.clone()),
        )
        .watches_cached(
            informers::api::<Node>(manager),
            informers::config(),
            node_trigger(daemon_sets),
        );
    manager.add(controller, reconcile, ctx);
}

fn key_of_parts(key: &ObjectKey) -> String {
    format!(
        "{}/{}",
        key.namespace.as_deref().unwrap_or_default(),
        key.name
    )
}

/// The DaemonSet a controller reference names, if the cache has that very one (kcm's
/// `resolveControllerRef`).
fn resolve(
    daemon_sets: &Store<DaemonSet>,
    namespace: &str,
    owner: &OwnerReference,
) -> Option<ObjectKey> {
    if owner.kind != "DaemonSet" {
        return None;
    }
    let key = ObjectKey::namespaced(namespace, &owner.name);
    let ds = daemon_sets.get(&key)?;
    (ds.uid().as_deref() == Some(owner.uid.as_str())).then_some(key)
}

/// The DaemonSets in `namespace` whose selector matches `labels` (kcm's
/// `GetPodDaemonSets`), for orphans that one of them may adopt.
fn selecting(
    daemon_sets: &Store<DaemonSet>,
    namespace: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Vec<ObjectKey> {
    daemon_sets
        .list_namespace(namespace)
        .into_iter()
        .filter(|ds| {
            controller_ref::selector(ds.spec.as_ref().map(|s| &s.selector))
                .is_ok_and(|s| !s.is_empty() && s.matches(labels))
        })
        .filter_map(|ds| ObjectKey::of(ds.as_ref()))
        .collect()
}

/// Maps a changed child (pod or revision) to the DaemonSets to sync: its controller before
/// and after; for an orphan that appeared or whose labels or controller changed, every
/// DaemonSet selecting it.
fn child_keys<C: kube::Resource>(
    daemon_sets: &Store<DaemonSet>,
    change: &Change<C>,
) -> Vec<ObjectKey> {
    let mut keys = Vec::new();
    let namespace = change.key.namespace.clone().unwrap_or_default();
    let old_ref = change
        .old
        .as_ref()
        .and_then(|o| controller_of(o.meta()).cloned());
    if let Some(owner) = &old_ref {
        keys.extend(resolve(daemon_sets, &namespace, owner));
    }
    if let Some(new) = &change.new {
        match controller_of(new.meta()) {
            Some(owner) => keys.extend(resolve(daemon_sets, &namespace, owner)),
            None => {
                let changed = change
                    .old
                    .as_ref()
                    .is_none_or(|old| old.meta().labels != new.meta().labels || old_ref.is_some());
                if changed {
                    let labels = new.meta().labels.clone().unwrap_or_default();
                    keys.extend(selecting(daemon_sets, &namespace, &labels));
                }
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

fn pod_trigger(
    daemon_sets: Store<DaemonSet>,
) -> impl Fn(&Change<Pod>) -> Vec<ObjectKey> + Send + Sync + 'static {
    move |change| child_keys(&daemon_sets, change)
}

fn revision_trigger(
    daemon_sets: Store<DaemonSet>,
) -> impl Fn(&Change<ControllerRevision>) -> Vec<ObjectKey> + Send + Sync + 'static {
    move |change| {
        // kcm does not sync a DaemonSet for a revision it created itself.
        let own_creation = change.old.is_none()
            && change
                .new
                .as_ref()
                .is_some_and(|n| controller_of(&n.metadata).is_some());
        if own_creation {
            return Vec::new();
        }
        child_keys(&daemon_sets, change)
    }
}

/// kcm's `addNode` and `updateNode` (only labels and taints matter), and every DaemonSet
/// when a node is deleted.
fn node_trigger(
    daemon_sets: Store<DaemonSet>,
) -> impl Fn(&Change<Node>) -> Vec<ObjectKey> + Send + Sync + 'static {
    move |change| {
        let all = daemon_sets.list();
        let keys = |pick: &dyn Fn(&DaemonSet) -> bool| {
            all.iter()
                .filter(|ds| pick(ds))
                .filter_map(|ds| ObjectKey::of(ds.as_ref()))
                .collect()
        };
        match (&change.old, &change.new) {
            (_, None) => keys(&|_| true),
            (None, Some(new)) => keys(&|ds| placement::fit(new, ds).should_run),
            (Some(old), Some(new)) => {
                let same = old.metadata.labels == new.metadata.labels
                    && old.spec.as_ref().and_then(|s| s.taints.as_ref())
                        == new.spec.as_ref().and_then(|s| s.taints.as_ref());
                if same {
                    return Vec::new();
                }
                keys(&|ds| placement::fit(old, ds) != placement::fit(new, ds))
            }
        }
    }
}

/// Claims `ds`'s pods: those it controls and still selects, and orphans it selects
/// (kcm's `getDaemonPods`).
async fn claim_pods(ctx: &Ctx, ds: &DaemonSet) -> Result<Vec<Arc<Pod>>> {
    let namespace = ds.namespace().unwrap_or_default();
    let selector = controller_ref::selector(ds.spec.as_ref().map(|s| &s.selector))?;
    let owner = new_controller_ref(ds);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let recheck_owner = owner.clone();
    controller_ref::claim(
        |ns| Api::<Pod>::namespaced(ctx.client.clone(), ns),
        &owner,
        ds.metadata.deletion_timestamp.is_some(),
        ctx.pods.list_namespace(&namespace),
        |p: &Pod| selector.matches(pods::labels(p)),
        || async move { controller_ref::recheck_owner(&daemon_sets, &recheck_owner).await },
    )
    .await
}

/// Daemon pods by the node they are for (kcm's `getNodesToDaemonPods`); finished pods
/// already being deleted are left out unless `include_deleted_terminal`.
fn by_node(daemon_pods: &[Arc<Pod>], include_deleted_terminal: bool) -> NodePods {
    let mut node_pods = NodePods::new();
    for pod in daemon_pods {
        let terminal = matches!(pods::phase(pod), "Succeeded" | "Failed");
        if !include_deleted_terminal && terminal && pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(node) = placement::target_node(pod) {
            node_pods.entry(node).or_default().push(pod.clone());
        }
    }
    node_pods
}

/// Whether the cache shows every pod this DaemonSet created and deleted.
fn expectations_satisfied(ctx: &Ctx, ds: &DaemonSet, daemon_pods: &[Arc<Pod>]) -> bool {
    let in_namespace = ctx.pods.list_namespace(&ds.namespace().unwrap_or_default());
    ctx.expectations.satisfied_among(
        &key_of(ds),
        daemon_pods.iter().chain(in_namespace.iter()).map(|p| &**p),
    )
}

/// The selector selects every pod: kcm refuses to act on such a DaemonSet.
fn selects_everything(ds: &DaemonSet) -> bool {
    ds.spec.as_ref().is_some_and(|s| {
        s.selector
            .match_labels
            .as_ref()
            .is_none_or(|l| l.is_empty())
            && s.selector
                .match_expressions
                .as_ref()
                .is_none_or(|e| e.is_empty())
    })
}

/// One sync of a DaemonSet (kcm's `syncDaemonSet`).
async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Ctx>) -> Result<Action> {
    if selects_everything(&ds) {
        ctx.events.warning(
            ds.as_ref(),
            "SelectingAll",
            "This daemon set is selecting all pods. A non-empty selector is required.".into(),
        );
        return Ok(Action::await_change());
    }
    // The revisions of a DaemonSet being deleted may be gone already: its status cannot be
    // computed, and nothing is created for it.
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let nodes = ctx.nodes.list();
    let daemon_pods = claim_pods(&ctx, &ds).await?;
    let Some((current, old)) = history::construct(&ctx, &ds, &daemon_pods).await? else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let hash = current
        .labels()
        .get(HASH_LABEL)
        .cloned()
        .unwrap_or_default();
    let mut requeue = Requeue::default();
    let satisfied = expectations_satisfied(&ctx, &ds, &daemon_pods);
    let synced = if satisfied {
        sync(&ctx, &ds, &nodes, &daemon_pods, &hash, old, &mut requeue).await
    } else {
        // Look again at the latest when the expectations expire.
        requeue.within(expectations::TIMEOUT);
        Ok(())
    };
    let status = update_status(
        &ctx,
        &ds,
        &nodes,
        &daemon_pods,
        &hash,
        satisfied,
        &mut requeue,
    )
    .await;
    synced?;
    status?;
    Ok(requeue.action())
}

/// The pods on the nodes, the update strategy, then the history (kcm's `updateDaemonSet`).
async fn sync(
    ctx: &Ctx,
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    daemon_pods: &[Arc<Pod>],
    hash: &str,
    old: Vec<ControllerRevision>,
    requeue: &mut Requeue,
) -> Result<()> {
    let node_pods = by_node(daemon_pods, false);
    let wrote = manage::manage(ctx, ds, nodes, &node_pods, hash, requeue).await?;
    // kcm updates only once the manage loop's writes are in the cache.
    if !wrote && strategy::is_rolling(ds) {
        update::rolling_update(ctx, ds, nodes, &node_pods, hash).await?;
    }
    history::cleanup(ctx, ds, old, daemon_pods).await
}

/// The status counts of `ds`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    desired: i32,
    current: i32,
    misscheduled: i32,
    ready: i32,
    updated: i32,
    available: i32,
    unavailable: i32,
}

/// Counts, over the nodes, the pods where they should be and where they should not (kcm's
/// `updateDaemonSetStatus`): the oldest pod of each node decides its readiness.
fn count(
    ctx: &Ctx,
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    node_pods: &NodePods,
    hash: &str,
) -> Counts {
    let now = ctx.clock.now();
    let min_ready = min_ready_seconds(ds);
    let mut counts = Counts::default();
    for node in nodes {
        let fit = placement::fit(node, ds);
        let on_node = node_pods.get(&node.name_any()).filter(|p| !p.is_empty());
        match (fit.should_run, on_node) {
            (true, None) => counts.desired += 1,
            (true, Some(on_node)) => {
                counts.desired += 1;
                counts.current += 1;
                let Some(pod) = on_node.iter().min_by(|a, b| by_age(a, b)) else {
                    continue;
                };
                if pods::is_ready(pod) {
                    counts.ready += 1;
                    if pods::is_available(pod, min_ready, now) {
                        counts.available += 1;
                    }
                }
                if is_updated(pod, hash) {
                    counts.updated += 1;
                }
            }
            (false, Some(_)) => counts.misscheduled += 1,
            (false, None) => {}
        }
    }
    counts.unavailable = counts.desired - counts.available;
    counts
}

/// Writes the status counts, and `observedGeneration` when this sync acted on the
/// DaemonSet's generation, if they changed (kcm's `storeDaemonSetStatus`).
async fn update_status(
    ctx: &Ctx,
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    daemon_pods: &[Arc<Pod>],
    hash: &str,
    observe_generation: bool,
    requeue: &mut Requeue,
) -> Result<()> {
    let counts = count(ctx, ds, nodes, &by_node(daemon_pods, false), hash);
    let min_ready = min_ready_seconds(ds);
    // kcm's last line of defence against clock skew: look again after minReadySeconds.
    if min_ready > 0 && counts.ready != counts.available {
        requeue.within(Duration::from_secs(u64::try_from(min_ready).unwrap_or(0)));
    }
    let status = ds.status.clone().unwrap_or_default();
    let recorded = Counts {
        desired: status.desired_number_scheduled,
        current: status.current_number_scheduled,
        misscheduled: status.number_misscheduled,
        ready: status.number_ready,
        updated: status.updated_number_scheduled.unwrap_or(0),
        available: status.number_available.unwrap_or(0),
        unavailable: status.number_unavailable.unwrap_or(0),
    };
    let generation = ds.metadata.generation.unwrap_or(0);
    let observed = status.observed_generation.unwrap_or(0);
    if recorded == counts && (!observe_generation || observed >= generation) {
        return Ok(());
    }
    let generation = observe_generation.then_some(generation);
    store_status(ctx, ds, &counts, generation).await
}

/// Writes `counts` (and `observedGeneration`, when given) with an update of the status, as
/// kcm does (its role may update `daemonsets/status`, not patch it); on a failure, once more
/// on a fresh read (kcm's `StatusUpdateRetries`).
async fn store_status(
    ctx: &Ctx,
    ds: &DaemonSet,
    counts: &Counts,
    observed_generation: Option<i64>,
) -> Result<()> {
    let api: Api<DaemonSet> =
        Api::namespaced(ctx.client.clone(), &ds.namespace().unwrap_or_default());
    let name = ds.name_any();
    let mut to_update = ds.clone();
    let mut retried = false;
    loop {
        let status = to_update.status.get_or_insert_with(Default::default);
        if let Some(generation) = observed_generation {
            status.observed_generation = Some(generation);
        }
        status.desired_number_scheduled = counts.desired;
        status.current_number_scheduled = counts.current;
        status.number_misscheduled = counts.misscheduled;
        status.number_ready = counts.ready;
        status.updated_number_scheduled = Some(counts.updated);
        status.number_available = Some(counts.available);
        status.number_unavailable = Some(counts.unavailable);
        match api
            .replace_status(&name, &PostParams::default(), &to_update)
            .await
        {
            Ok(written) => {
                konverge_runtime::reconcile::wrote(&written);
                return Ok(());
            }
            Err(error) if retried => return Err(error.into()),
            Err(_) => {
                retried = true;
                to_update = api.get(&name).await?;
            }
        }
    }
}
