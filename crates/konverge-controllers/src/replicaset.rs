//! kcm's replicaset and replication controllers: keep `spec.replicas` pods of a
//! ReplicaSet (or ReplicationController) running, and report them in its status.
//!
//! One controller serves both kinds, as in kcm (where RCs are converted to ReplicaSets on
//! the way in and back on the way out); [`ReplicaKind`](kind::ReplicaKind) is that
//! conversion. A sync of one object:
//!
//! 1. waits for its cache to show the pods its last sync created or deleted
//!    ([`Expectations`]), so a stale cache never creates or deletes twice;
//! 2. claims the active pods of its namespace by its selector (adopting orphans, releasing
//!    pods whose labels no longer match; [`controller_ref::claim`]);
//! 3. creates the missing pods in slow-start batches of 1, 2, 4, ... (the first failure
//!    stops the rest), or deletes the surplus in kcm's order ([`ranking`]); at most 500
//!    either way per sync (kcm's `BurstReplicas`). A ReplicaSet being deleted is left as it
//!    is: nothing claimed, created or deleted;
//! 4. writes its status through the status subresource when it changed: the replica
//!    counts, `observedGeneration`, and the `ReplicaFailure` condition while creating or
//!    deleting fails, and looks again when a ready pod will have been ready for
//!    `minReadySeconds`.
//!
//! Events are kcm's: `SuccessfulCreate` (`Created pod: <name>`), `FailedCreate`
//! (`Error creating: <error>`), `SuccessfulDelete` (`Deleted pod: <name>`) and
//! `FailedDelete` (`Error deleting: <error>`).
//!
//! One difference from kcm, for the same outcome: kcm names new pods through
//! `generateName`, and its client never retries a create. kube's client retries a create
//! whose answer was lost (a 504), which with `generateName` would make a second pod. So
//! the name is drawn here, from the API server's alphabet and in its form
//! (`<name>-xxxxx`, `generateName` still set): a retried create then answers
//! AlreadyExists, and a create whose outcome is unknown is settled by reading the pod.

mod kind;
mod ranking;
mod status;

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store, predicate, reconcile};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use rand::Rng;

use self::kind::{ReplicaKind, ReplicaStatus};
use self::status::ManageFailure;
use crate::clock::Clock;
use crate::controller_ref;
use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::expectations::Expectations;
use crate::informers;
use crate::pods;

/// kcm's replicaset controller.
pub const REPLICASET: Descriptor = Descriptor {
    name: "replicaset-controller",
    aliases: &["replicaset"],
    service_account: "replicaset-controller",
    add: add::<ReplicaSet>,
};

/// kcm's replication controller: the replicaset controller over ReplicationControllers.
pub const REPLICATION_CONTROLLER: Descriptor = Descriptor {
    name: "replicationcontroller-controller",
    aliases: &["replicationcontroller"],
    service_account: "replication-controller",
    add: add::<ReplicationController>,
};

/// The most pods one sync creates or deletes (kcm's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// How many objects are synced at once (kcm's `--concurrent-replicaset-syncs` and
/// `--concurrent-rc-syncs` defaults).
pub const CONCURRENT_SYNCS: usize = 5;

/// How many times a failed status write is retried after a fresh read (kcm's
/// `statusUpdateRetries`).
const STATUS_UPDATE_RETRIES: usize = 1;

/// The characters the API server draws generated name suffixes from.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The longest base a generated name keeps (63 minus the 5-character suffix).
const MAX_GENERATED_BASE: usize = 58;

/// What a sync reads and writes with.
struct Context<K: ReplicaKind> {
    client: Client,
    clock: Clock,
    events: Events,
    expectations: Arc<Expectations>,
    pods: Store<Pod>,
    owners: Store<K>,
}

/// A failed create or delete: what the ReplicaFailure condition says, and the error the
/// sync fails with (so it is retried with backoff).
struct Failure {
    condition: ManageFailure,
    error: Error,
}

impl Failure {
    fn new(message: String, error: Error) -> Failure {
        Failure {
            condition: ManageFailure { message },
            error,
        }
    }
}

fn add<K: ReplicaKind>(manager: &mut Manager, setup: Setup) {
    let owners = informers::cache::<K>(manager);
    let pods = informers::cache::<Pod>(manager);
    let expectations = Arc::new(Expectations::new());
    let ctx = Arc::new(Context {
        events: Events::new(setup.client.clone(), K::EVENT_SOURCE),
        client: setup.client,
        clock: setup.clock,
        expectations: expectations.clone(),
        pods,
        owners: owners.clone(),
    });
    let controller = informers::controller::<K>(manager)
        .named(K::CONTROLLER)
        // kcm syncs on every change of the object, its status included.
        .with_predicate(predicate::always::<K>())
        .concurrency(CONCURRENT_SYNCS)
        .watches_cached(
            informers::api::<Pod>(manager),
            informers::config(),
            move |change: &Change<Pod>| owners_of_pod(&owners, change),
        )
        .watches_cached(
            informers::api::<K>(manager),
            informers::config(),
            move |change: &Change<K>| {
                forget_replaced(&expectations, change);
                Vec::new()
            },
        );
    manager.add(controller, sync::<K>, ctx);
}

/// A deleted (or deleted and re-created) object's expectations are dropped, so a new
/// object of the same name starts clean.
fn forget_replaced<K: ReplicaKind>(expectations: &Expectations, change: &Change<K>) {
    let Some(old) = &change.old else { return };
    let replaced = change.new.as_ref().is_none_or(|new| new.uid() != old.uid());
    if replaced {
        expectations.forget(&expectation_key(&**old));
    }
}

/// `namespace/name`, the key kcm's expectations use.
fn expectation_key<K: Resource>(owner: &K) -> String {
    format!(
        "{}/{}",
        owner.meta().namespace.as_deref().unwrap_or_default(),
        owner.meta().name.as_deref().unwrap_or_default()
    )
}

/// Whether an update of a pod changed what its owner's sync reads of it beyond labels and
/// controller: whether it is active (phase, deletion), whether it is Ready and since when
/// (availability counts from the transition). Everything else a sync reads (the node,
/// restarts, for choosing pods to delete) it reads from the cache when it runs.
fn concerns_owner(old: &Pod, new: &Pod) -> bool {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    // Ready and since when (a pod not Ready counts the same however it is not).
    fn ready_since(pod: &Pod) -> Option<Option<&Time>> {
        pods::condition(pod, "Ready")
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.as_ref())
    }
    pods::is_active(old) != pods::is_active(new)
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || ready_since(old) != ready_since(new)
}

/// The objects a pod change concerns (kcm's `addPod`, `updatePod`, `deletePod`): its
/// controller — before and after, if the controller reference or the labels changed — or,
/// for an orphan whose labels or reference changed, every object whose selector matches it.
fn owners_of_pod<K: ReplicaKind>(owners: &Store<K>, change: &Change<Pod>) -> Vec<ObjectKey> {
    let mut keys = Vec::new();
    match (change.old.as_deref(), change.new.as_deref()) {
        (Some(old), None) => keys.extend(resolve(owners, old)),
        (None, Some(new)) => {
            if new.metadata.deletion_timestamp.is_some()
                || controller_ref::controller_of(&new.metadata).is_some()
            {
                keys.extend(resolve(owners, new));
            } else {
                keys.extend(selecting(owners, new));
            }
        }
        (Some(old), Some(new)) => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return keys;
            }
            let labels_changed = old.metadata.labels != new.metadata.labels;
            if new.metadata.deletion_timestamp.is_some() {
                keys.extend(resolve(owners, new));
                if labels_changed {
                    keys.extend(resolve(owners, old));
                }
                return dedup(keys);
            }
            let old_ref = controller_ref::controller_of(&old.metadata);
            let new_ref = controller_ref::controller_of(&new.metadata);
            let ref_changed = old_ref != new_ref;
            if ref_changed && old_ref.is_some() {
                keys.extend(resolve(owners, old));
            }
            if new_ref.is_some() {
                if !labels_changed && !ref_changed && !concerns_owner(old, new) {
                    // A Binding, or a kubelet's status that leaves the pod as active and as
                    // Ready as it was: kcm queues the owner and its sync finds nothing to do;
                    // at 10,000 pods that sync is the controller's whole cost.
                    return keys;
                }
                keys.extend(resolve(owners, new));
            } else if labels_changed || ref_changed {
                keys.extend(selecting(owners, new));
            }
        }
        (None, None) => {}
    }
    dedup(keys)
}

fn dedup(mut keys: Vec<ObjectKey>) -> Vec<ObjectKey> {
    keys.sort();
    keys.dedup();
    keys
}

/// The pod's controller, if it is a `K` in the cache with the referenced uid.
fn resolve<K: ReplicaKind>(owners: &Store<K>, pod: &Pod) -> Option<ObjectKey> {
    let reference = controller_ref::controller_of(&pod.metadata)?;
    if reference.kind != K::kind(&()) {
        return None;
    }
    let key = ObjectKey::namespaced(
        pod.metadata.namespace.clone().unwrap_or_default(),
        reference.name.clone(),
    );
    let owner = owners.get(&key)?;
    (owner.uid().as_deref() == Some(reference.uid.as_str())).then_some(key)
}

/// Every `K` in the pod's namespace whose selector matches its labels (an empty selector
/// matches nothing here, as in kcm's listers).
fn selecting<K: ReplicaKind>(owners: &Store<K>, pod: &Pod) -> Vec<ObjectKey> {
    let labels = pods::labels(pod);
    if labels.is_empty() {
        return Vec::new();
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    owners
        .list_namespace(namespace)
        .iter()
        .filter(|owner| {
            owner
                .selector()
                .is_ok_and(|s| !s.is_empty() && s.matches(labels))
        })
        .filter_map(|owner| ObjectKey::of(&**owner))
        .collect()
}

/// One sync of `owner` (kcm's `syncReplicaSet`).
async fn sync<K: ReplicaKind>(owner: Arc<K>, ctx: Arc<Context<K>>) -> Result<Action> {
    let namespace = owner.namespace().unwrap_or_default();
    let key = expectation_key(&*owner);
    let in_namespace = ctx.pods.list_namespace(&namespace);
    let needs_sync = ctx
        .expectations
        .satisfied_among(&key, in_namespace.iter().map(|p| &**p));
    let selector = owner.selector().map_err(|e| {
        Error::invalid(format!(
            "error converting pod selector to selector for rs {key}: {e}"
        ))
    })?;
    let active: Vec<Arc<Pod>> = in_namespace
        .into_iter()
        .filter(|pod| pods::is_active(pod))
        .collect();
    let owner_ref = controller_ref::new_controller_ref(&*owner);
    let deleting = owner.meta().deletion_timestamp.is_some();
    let owners_api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let claimed = controller_ref::claim(
        |ns| Api::namespaced(ctx.client.clone(), ns),
        &owner_ref,
        deleting,
        active,
        |pod: &Pod| selector.matches(pods::labels(pod)),
        || controller_ref::recheck_owner(&owners_api, &owner_ref),
    )
    .await?;

    let failure = if needs_sync && !deleting {
        manage(&ctx, &owner, &owner_ref, &key, &claimed).await.err()
    } else {
        None
    };
    let now = ctx.clock.now();
    let status = status::calculate(
        &*owner,
        &claimed,
        failure.as_ref().map(|f| &f.condition),
        now,
        ctx.clock.now_time(),
    );
    write_status(&owners_api, &owner, status).await?;
    if let Some(failure) = failure {
        return Err(failure.error);
    }
    Ok(
        match status::next_available(&claimed, owner.min_ready_seconds(), now) {
            Some(delay) => Action::requeue(delay),
            None => Action::await_change(),
        },
    )
}

/// Creates or deletes pods so `owner` has as many as it wants (kcm's `manageReplicas`).
async fn manage<K: ReplicaKind>(
    ctx: &Context<K>,
    owner: &K,
    owner_ref: &OwnerReference,
    key: &str,
    claimed: &[Arc<Pod>],
) -> Result<(), Failure> {
    let desired = usize::try_from(owner.desired()).unwrap_or(0);
    let have = claimed.len();
    if have < desired {
        let count = (desired - have).min(BURST_REPLICAS);
        tracing::debug!(key, need = desired, creating = count, "too few replicas");
        create_pods(ctx, owner, owner_ref, key, count).await
    } else if have > desired {
        let count = (have - desired).min(BURST_REPLICAS);
        tracing::debug!(key, need = desired, deleting = count, "too many replicas");
        let related = related_pods(ctx, owner);
        let victims = ranking::pods_to_delete(claimed, &related, count, ctx.clock.now());
        delete_pods(ctx, owner, key, victims).await
    } else {
        Ok(())
    }
}

/// Creates `count` pods in batches of 1, 2, 4, ...: a batch with a failure is the last
/// (kcm's `slowStartBatch`), so a quota that refuses every pod costs one request, not
/// hundreds.
async fn create_pods<K: ReplicaKind>(
    ctx: &Context<K>,
    owner: &K,
    owner_ref: &OwnerReference,
    key: &str,
    count: usize,
) -> Result<(), Failure> {
    let default_template = PodTemplateSpec::default();
    let template = owner.template().unwrap_or(&default_template);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace().unwrap_or_default());
    let mut remaining = count;
    let mut batch = remaining.min(1);
    while batch > 0 {
        let results =
            join_all((0..batch).map(|_| create_pod(ctx, &api, owner, template, owner_ref))).await;
        let mut first_failure = None;
        for result in results {
            match result {
                Ok(Some(uid)) => ctx.expectations.created(key, uid),
                Ok(None) => {}
                Err(failure) => {
                    first_failure.get_or_insert(failure);
                }
            }
        }
        if let Some(failure) = first_failure {
            return Err(failure);
        }
        remaining -= batch;
        batch = (2 * batch).min(remaining);
    }
    Ok(())
}

/// Creates one pod from `template` (kcm's `CreatePods`): its uid, or `None` if it was not
/// created because the namespace is being deleted (not a failure, as in kcm).
async fn create_pod<K: ReplicaKind>(
    ctx: &Context<K>,
    api: &Api<Pod>,
    owner: &K,
    template: &PodTemplateSpec,
    owner_ref: &OwnerReference,
) -> Result<Option<String>, Failure> {
    let mut pod = pods::from_template(template, owner.meta(), Some(owner_ref.clone()));
    if pods::labels(&pod).is_empty() {
        let message = "unable to create pods, no labels".to_string();
        return Err(Failure::new(message.clone(), Error::invalid(message)));
    }
    let name = pod_name(owner.meta().name.as_deref().unwrap_or_default());
    pod.metadata.name = Some(name.clone());
    let error = match api.create(&PostParams::default(), &pod).await {
        Ok(created) => {
            ctx.events
                .normal(owner, "SuccessfulCreate", format!("Created pod: {name}"));
            return Ok(Some(created.uid().unwrap_or_default()));
        }
        Err(error) => error,
    };
    if namespace_terminating(&error) {
        return Ok(None);
    }
    if outcome_unknown(&error)
        && let Some(uid) = created_by(api, &name, &owner_ref.uid).await
    {
        ctx.events
            .normal(owner, "SuccessfulCreate", format!("Created pod: {name}"));
        return Ok(Some(uid));
    }
    let message = error_text(&error);
    ctx.events
        .warning(owner, "FailedCreate", format!("Error creating: {message}"));
    Err(Failure::new(message, error.into()))
}

/// Deletes `victims` at once (kcm's `DeletePod` for each). A pod already gone is not a
/// failure; the first other error is.
async fn delete_pods<K: ReplicaKind>(
    ctx: &Context<K>,
    owner: &K,
    key: &str,
    victims: Vec<Arc<Pod>>,
) -> Result<(), Failure> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace().unwrap_or_default());
    let results = join_all(
        victims
            .iter()
            .map(|pod| delete_pod(ctx, &api, owner, key, pod)),
    )
    .await;
    results.into_iter().collect()
}

async fn delete_pod<K: ReplicaKind>(
    ctx: &Context<K>,
    api: &Api<Pod>,
    owner: &K,
    key: &str,
    pod: &Pod,
) -> Result<(), Failure> {
    let name = pod.name_any();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            ctx.expectations.deleted(key, uid);
            ctx.events
                .normal(owner, "SuccessfulDelete", format!("Deleted pod: {name}"));
            Ok(())
        }
        // Gone already (or our own delete, retried after its answer was lost): the cache
        // is still to show it gone.
        Err(kube::Error::Api(status)) if status.is_not_found() => {
            ctx.expectations.deleted(key, uid);
            Ok(())
        }
        Err(error) => {
            let message = error_text(&error);
            ctx.events
                .warning(owner, "FailedDelete", format!("Error deleting: {message}"));
            Err(Failure::new(
                format!("unable to delete pods: {message}"),
                error.into(),
            ))
        }
    }
}

/// The pods of every object controlled by `owner`'s controller (kcm's
/// `getIndirectlyRelatedPods`): their active pods on a node rank the pods there. An
/// object without a controller has none.
fn related_pods<K: ReplicaKind>(ctx: &Context<K>, owner: &K) -> Vec<Arc<Pod>> {
    let Some(controller) = controller_ref::controller_of(owner.meta()) else {
        return Vec::new();
    };
    let namespace = owner.namespace().unwrap_or_default();
    let in_namespace = ctx.pods.list_namespace(&namespace);
    let mut seen = HashSet::new();
    let mut related = Vec::new();
    let siblings = ctx.owners.by_owner(&controller.uid).unwrap_or_default();
    for sibling in siblings.iter().filter(|s| {
        s.namespace().as_deref() == Some(namespace.as_str())
            && controller_ref::controller_of(s.meta()).is_some_and(|c| c.uid == controller.uid)
    }) {
        let Ok(selector) = sibling.selector() else {
            continue;
        };
        for pod in in_namespace
            .iter()
            .filter(|p| selector.matches(pods::labels(p)))
        {
            if seen.insert(pod.metadata.uid.clone()) {
                related.push(pod.clone());
            }
        }
    }
    related
}

/// Writes `status` if it differs from `owner`'s, with `observedGeneration` set to the
/// generation acted on (kcm's `updateReplicaSetStatus`: a full status update, retried once
/// on a fresh copy).
async fn write_status<K: ReplicaKind>(
    api: &Api<K>,
    owner: &K,
    mut status: ReplicaStatus,
) -> Result<()> {
    status.observed_generation = owner.meta().generation.unwrap_or(0);
    if owner.replica_status() == status {
        return Ok(());
    }
    let name = owner.name_any();
    let mut target = owner.clone();
    let mut attempt = 0;
    loop {
        target.set_replica_status(&status);
        match api
            .replace_status(&name, &PostParams::default(), &target)
            .await
        {
            Ok(updated) => {
                reconcile::wrote(&updated);
                return Ok(());
            }
            Err(error) if attempt >= STATUS_UPDATE_RETRIES => return Err(error.into()),
            Err(_) => {
                attempt += 1;
                target = api.get(&name).await?;
            }
        }
    }
}

/// A pod name as the API server generates one from `owner`'s pods' `generateName`.
fn pod_name(owner: &str) -> String {
    let prefix = pods::generate_name(owner);
    let base: String = prefix.chars().take(MAX_GENERATED_BASE).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| char::from(NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())]))
        .collect();
    base + &suffix
}

/// The create may have been carried out although it failed: an AlreadyExists (a retry of
/// our own create), a server error or timeout, or no answer at all.
fn outcome_unknown(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.is_already_exists() || status.code >= 500,
        _ => true,
    }
}

/// The uid of the pod `name` if it exists and `owner_uid` controls it. A list by name,
/// not a get: kcm's role lets the controller list pods, not get them.
async fn created_by(api: &Api<Pod>, name: &str, owner_uid: &str) -> Option<String> {
    let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
    let pods = api.list(&by_name).await.ok()?;
    pods.items
        .into_iter()
        .filter(|pod| pod.metadata.name.as_deref() == Some(name))
        .find(|pod| {
            controller_ref::controller_of(&pod.metadata).is_some_and(|r| r.uid == owner_uid)
        })
        .and_then(|pod| pod.uid())
}

/// The create failed because the namespace is being deleted.
fn namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// An error as kcm prints it: an API error is its message.
fn error_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_take_the_api_servers_form() {
        let name = pod_name("web");
        assert_eq!(name.len(), "web-".len() + 5);
        assert!(name.starts_with("web-"));
        assert!(name[4..].bytes().all(|b| NAME_ALPHABET.contains(&b)));
        let long = pod_name(&"x".repeat(80));
        assert_eq!(long.len(), MAX_GENERATED_BASE + 5);
    }

    /// A cache holding the ReplicaSet `default/web` (uid `rs-1`, selecting `app=web`).
    fn web_owner() -> Store<ReplicaSet> {
        let owner: ReplicaSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "rs-1"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}},
        }))
        .expect("a replicaset");
        let mut writer = konverge_runtime::cache::Writer::new(Vec::new());
        let _ = writer.apply(konverge_runtime::watcher::Event::Apply(owner));
        writer.store()
    }

    #[test]
    fn orphans_wake_the_objects_selecting_them() {
        let owners = web_owner();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"},
                         "resourceVersion": "1"},
        }))
        .expect("a pod");
        let change = Change {
            key: ObjectKey::namespaced("default", "p"),
            old: None,
            new: Some(Arc::new(pod.clone())),
        };
        assert_eq!(
            owners_of_pod(&owners, &change),
            [ObjectKey::namespaced("default", "web")]
        );
        // Owned by someone else: only its controller counts.
        let mut owned = pod.clone();
        owned.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web".into(),
            uid: "another".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        let change = Change {
            key: ObjectKey::namespaced("default", "p"),
            old: None,
            new: Some(Arc::new(owned)),
        };
        assert!(owners_of_pod(&owners, &change).is_empty());
    }

    #[test]
    fn an_owned_pods_update_wakes_its_owner_only_if_the_sync_would_see_it() {
        let owners = web_owner();
        let pod = |rv: &str, node: Option<&str>, phase: &str, ready: Option<&str>| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"},
                             "resourceVersion": rv,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                  "name": "web", "uid": "rs-1", "controller": true}]},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase, "conditions": ready.map(|s| vec![serde_json::json!(
                    {"type": "Ready", "status": s, "lastTransitionTime": "2026-11-27T00:00:00Z"})])},
            }))
            .expect("a pod")
        };
        let woken = |old: Pod, new: Pod| {
            owners_of_pod(
                &owners,
                &Change {
                    key: ObjectKey::namespaced("default", "p"),
                    old: Some(Arc::new(old)),
                    new: Some(Arc::new(new)),
                },
            )
        };
        let web = [ObjectKey::namespaced("default", "web")];
        // Bound, then Pending with Ready False: the owner's counts do not change.
        let created = pod("1", None, "Pending", None);
        let bound = pod("2", Some("node-1"), "Pending", None);
        let starting = pod("3", Some("node-1"), "Pending", Some("False"));
        assert!(woken(created, bound.clone()).is_empty());
        // Not Ready either way (no condition, then False): nothing to count.
        assert!(woken(bound, starting.clone()).is_empty());
        let running = pod("4", Some("node-1"), "Running", Some("False"));
        assert!(woken(starting, running.clone()).is_empty());
        let ready = pod("5", Some("node-1"), "Running", Some("True"));
        assert_eq!(woken(running, ready.clone()), web);
        let failed = pod("6", Some("node-1"), "Failed", Some("True"));
        assert_eq!(woken(ready, failed), web, "no longer active");
    }
}
