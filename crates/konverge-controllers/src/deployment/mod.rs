//! kcm's deployment controller (`pkg/controller/deployment`): a Deployment's pods run in
//! ReplicaSets, one per pod template, named `<deployment>-<pod-template-hash>`.
//!
//! Each sync claims the ReplicaSets the Deployment's selector matches (adopting orphans,
//! releasing those that no longer match), then:
//!
//! - a Deployment being deleted only has its status brought up to date;
//! - a paused Deployment is scaled but not rolled out ([`sync`]), with the Progressing
//!   condition saying `DeploymentPaused` (or `DeploymentResumed` once resumed);
//! - a deprecated rollback request (the `deprecated.deployment.rollback.to` annotation) puts
//!   an earlier ReplicaSet's template back into the Deployment ([`rollback`]);
//! - a change of `spec.replicas` scales the ReplicaSets in proportion to their sizes;
//! - otherwise the rollout moves one step: a `RollingUpdate` within maxSurge and
//!   maxUnavailable ([`rolling`]), or a `Recreate` that scales the old ReplicaSets to zero
//!   and waits for their pods to go before the new one starts ([`recreate`]);
//!
//! and the status — replica counts from the ReplicaSets as the cache shows them, and the
//! Available and Progressing conditions, with the progress deadline checked in the clock's
//! time ([`progress`]) — is written when it changed.
//!
//! A Deployment is synced on every change but its status (the controller's own status
//! writes ask for one more sync themselves, as kcm's echo of its own write does), on every
//! change to a ReplicaSet (for its controller, or every matching Deployment for an orphan),
//! and when a pod of a Recreate Deployment is deleted.

mod progress;
mod recreate;
mod rollback;
mod rolling;
mod sync;
mod util;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, ErrorClass, Manager, ObjectKey, OnError, Store};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use crate::clock::Clock;
use crate::controller_ref;
use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::informers;

/// kcm's deployment controller.
pub const DEPLOYMENT: Descriptor = Descriptor {
    name: "deployment-controller",
    aliases: &["deployment"],
    service_account: "deployment-controller",
    add,
};

/// How many Deployments are synced at once (kcm's `--concurrent-deployment-syncs`).
const WORKERS: usize = 5;

/// What every sync reads and writes through.
struct Ctx {
    client: Client,
    clock: Clock,
    events: Events,
    replica_sets: Store<ReplicaSet>,
    pods: Store<Pod>,
}

fn add(manager: &mut Manager, setup: Setup) {
    let deployments = informers::cache::<Deployment>(manager);
    let replica_sets = informers::cache::<ReplicaSet>(manager);
    let pods = informers::cache::<Pod>(manager);
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), "deployment-controller"),
        client: setup.client,
        clock: setup.clock,
        replica_sets: replica_sets.clone(),
        pods,
    });
    let by_replica_set = {
        let deployments = deployments.clone();
        move |change: &Change<ReplicaSet>| for_replica_set(&deployments, change)
    };
    let by_pod = move |change: &Change<Pod>| for_deleted_pod(&deployments, &replica_sets, change);
    let controller = informers::controller::<Deployment>(manager)
        .named("deployment")
        .with_predicate(not_only_status)
        .concurrency(WORKERS)
        .error_policy(conflicts_back_off)
        .watches_cached(
            informers::api::<ReplicaSet>(manager),
            informers::config(),
            by_replica_set,
        )
        .watches_cached(informers::api::<Pod>(manager), informers::config(), by_pod);
    manager.add(controller, reconcile, ctx);
}

/// A write that lost a race is retried with backoff, as kcm requeues every failed sync
/// rate-limited: retried at once, a sync would lose the same race again and again while its
/// cache is behind.
fn conflicts_back_off(
    _: &Deployment,
    _: &(dyn std::error::Error + 'static),
    class: ErrorClass,
) -> OnError {
    match class {
        ErrorClass::Conflict => OnError::Class(ErrorClass::Retry),
        other => OnError::Class(other),
    }
}

/// Passes every change to a Deployment but one to its status alone (the controller's own
/// writes, which ask for their follow-up sync themselves).
fn not_only_status(old: Option<&Deployment>, new: &Deployment) -> bool {
    let Some(old) = old else {
        return true;
    };
    let meta = |d: &Deployment| {
        let mut meta = d.metadata.clone();
        meta.resource_version = None;
        meta.managed_fields = None;
        meta
    };
    old.spec != new.spec || meta(old) != meta(new)
}

/// The Deployment a controller ownerReference names, if the cache has that very one (kcm's
/// `resolveControllerRef`).
fn resolve(
    deployments: &Store<Deployment>,
    namespace: &str,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Option<ObjectKey> {
    if owner.kind != "Deployment" {
        return None;
    }
    let key = ObjectKey::namespaced(namespace, owner.name.as_str());
    let d = deployments.get(&key)?;
    (d.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some(key)
}

/// The Deployments whose selector matches an orphan ReplicaSet's labels (kcm's
/// `getDeploymentsForReplicaSet`): those that might adopt it.
fn matching(deployments: &Store<Deployment>, rs: &ReplicaSet) -> Vec<ObjectKey> {
    let namespace = rs.namespace().unwrap_or_default();
    let labels = rs.labels();
    if labels.is_empty() {
        return Vec::new();
    }
    deployments
        .list_namespace(&namespace)
        .into_iter()
        .filter(|d| {
            let selector = d.spec.as_ref().map(|s| &s.selector);
            controller_ref::selector(selector).is_ok_and(|s| !s.is_empty() && s.matches(labels))
        })
        .filter_map(|d| ObjectKey::of(d.as_ref()))
        .collect()
}

/// The Deployments a change to a ReplicaSet concerns (kcm's add/update/deleteReplicaSet):
/// its controller before and after, or, for an orphan whose labels or owner changed, every
/// Deployment that might adopt it.
fn for_replica_set(deployments: &Store<Deployment>, change: &Change<ReplicaSet>) -> Vec<ObjectKey> {
    let owner = |rs: &ReplicaSet| {
        let namespace = rs.namespace().unwrap_or_default();
        controller_ref::controller_of(&rs.metadata)
            .and_then(|r| resolve(deployments, &namespace, r))
    };
    let mut keys = Vec::new();
    let Some(new) = change.new.as_deref() else {
        // Deleted: its controller syncs.
        if let Some(old) = change.old.as_deref() {
            keys.extend(owner(old));
        }
        return keys;
    };
    let old = change.old.as_deref();
    let new_ref = controller_ref::controller_of(&new.metadata);
    let old_ref = old.and_then(|o| controller_ref::controller_of(&o.metadata));
    let ref_changed = old.is_some() && new_ref.map(|r| &r.uid) != old_ref.map(|r| &r.uid);
    if ref_changed && let Some(previous) = old {
        keys.extend(owner(previous));
    }
    if new_ref.is_some() {
        keys.extend(owner(new));
        return keys;
    }
    let labels_changed = old.is_none_or(|o| o.metadata.labels != new.metadata.labels);
    if labels_changed || ref_changed || new.metadata.deletion_timestamp.is_some() {
        keys.extend(matching(deployments, new));
    }
    keys
}

/// A deleted pod of a ReplicaSet of a Recreate Deployment syncs that Deployment, which may
/// be waiting for its old pods to go (kcm's `deletePod`).
fn for_deleted_pod(
    deployments: &Store<Deployment>,
    replica_sets: &Store<ReplicaSet>,
    change: &Change<Pod>,
) -> Vec<ObjectKey> {
    if change.new.is_some() {
        return Vec::new();
    }
    let Some(pod) = change.old.as_deref() else {
        return Vec::new();
    };
    let namespace = pod.namespace().unwrap_or_default();
    let Some(owner) = controller_ref::controller_of(&pod.metadata) else {
        return Vec::new();
    };
    if owner.kind != "ReplicaSet" {
        return Vec::new();
    }
    let rs_key = ObjectKey::namespaced(namespace.as_str(), owner.name.as_str());
    let Some(rs) = replica_sets
        .get(&rs_key)
        .filter(|rs| rs.metadata.uid.as_deref() == Some(owner.uid.as_str()))
    else {
        return Vec::new();
    };
    let Some(key) = controller_ref::controller_of(&rs.metadata)
        .and_then(|r| resolve(deployments, &namespace, r))
    else {
        return Vec::new();
    };
    let recreate = deployments
        .get(&key)
        .is_some_and(|d| util::strategy(&d) == "Recreate");
    if recreate { vec![key] } else { Vec::new() }
}

/// One sync of one Deployment (kcm's `syncDeployment`).
async fn reconcile(d: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action> {
    let mut sync = Rollout::new(&ctx, (*d).clone());
    let action = sync.run().await?;
    // The controller's own status writes are not triggers (see `not_only_status`): ask for
    // the sync kcm's echo of the write would have started.
    if sync.wrote_status {
        return Ok(Action::requeue(Duration::ZERO));
    }
    Ok(action)
}

/// A sync in progress: the Deployment as last read or written, and its ReplicaSets as
/// claimed, each replaced by what the server answered to the controller's writes.
struct Rollout<'c> {
    ctx: &'c Ctx,
    d: Deployment,
    sets: Vec<ReplicaSet>,
    wrote_status: bool,
}

impl<'c> Rollout<'c> {
    fn new(ctx: &'c Ctx, d: Deployment) -> Rollout<'c> {
        Rollout {
            ctx,
            d,
            sets: Vec::new(),
            wrote_status: false,
        }
    }

    fn namespace(&self) -> String {
        self.d.namespace().unwrap_or_default()
    }

    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.ctx.client.clone(), &self.namespace())
    }

    fn replica_sets(&self) -> Api<ReplicaSet> {
        Api::namespaced(self.ctx.client.clone(), &self.namespace())
    }

    /// The Deployment's status (empty when it has none).
    fn status(&self) -> DeploymentStatus {
        self.d.status.clone().unwrap_or_default()
    }

    async fn run(&mut self) -> Result<Action> {
        let selector = self.d.spec.as_ref().map(|s| &s.selector);
        if selector.is_some_and(selects_all) {
            return self.selecting_all().await;
        }
        self.claim().await?;
        if self.d.metadata.deletion_timestamp.is_some() {
            self.sync_status_only().await?;
            return Ok(Action::await_change());
        }
        self.check_paused_conditions().await?;
        if util::paused(&self.d) {
            self.sync().await?;
            return Ok(Action::await_change());
        }
        if rollback::rollback_to(&self.d).is_some() {
            self.rollback().await?;
            return Ok(Action::await_change());
        }
        if self.is_scaling_event().await? {
            self.sync().await?;
            return Ok(Action::await_change());
        }
        match util::strategy(&self.d) {
            "Recreate" => self.rollout_recreate().await,
            "RollingUpdate" => self.rollout_rolling().await,
            other => Err(Error::invalid(format!(
                "unexpected deployment strategy type: {other}"
            ))),
        }
    }

    /// kcm refuses a Deployment whose selector is empty: it would select every pod.
    async fn selecting_all(&mut self) -> Result<Action> {
        self.ctx.events.warning(
            &self.d,
            "SelectingAll",
            "This deployment is selecting all pods. A non-empty selector is required.".into(),
        );
        let mut status = self.status();
        let generation = self.d.metadata.generation.unwrap_or(0);
        if status.observed_generation.unwrap_or(0) < generation {
            status.observed_generation = Some(generation);
            self.write_status(status).await?;
        }
        Ok(Action::await_change())
    }

    /// Claims the ReplicaSets the selector matches (kcm's `getReplicaSetsForDeployment`).
    async fn claim(&mut self) -> Result<()> {
        let selector = controller_ref::selector(self.d.spec.as_ref().map(|s| &s.selector))
            .map_err(|e| {
                Error::invalid(format!(
                    "deployment {}/{} has invalid label selector: {e}",
                    self.namespace(),
                    self.d.name_any()
                ))
            })?;
        let owner = controller_ref::new_controller_ref(&self.d);
        let deleting = self.d.metadata.deletion_timestamp.is_some();
        let candidates = self.ctx.replica_sets.list_namespace(&self.namespace());
        let client = self.ctx.client.clone();
        let deployments = self.deployments();
        let claimed = controller_ref::claim(
            |namespace| Api::namespaced(client.clone(), namespace),
            &owner,
            deleting,
            candidates,
            |rs: &ReplicaSet| selector.matches(rs.labels()),
            || async { controller_ref::recheck_owner(&deployments, &owner).await },
        )
        .await?;
        self.sets = claimed.iter().map(|rs| (**rs).clone()).collect();
        Ok(())
    }

    /// Writes `status` (kcm's `UpdateStatus` of the whole Deployment: metadata changes such
    /// as the revision annotation go with it).
    async fn write_status(&mut self, status: DeploymentStatus) -> Result<()> {
        self.d.status = Some(status);
        self.update_status().await
    }

    /// Writes the working copy's status and metadata.
    async fn update_status(&mut self) -> Result<()> {
        let name = self.d.name_any();
        let written = self
            .deployments()
            .replace_status(&name, &PostParams::default(), &self.d)
            .await?;
        konverge_runtime::reconcile::wrote(&written);
        self.d = written;
        self.wrote_status = true;
        Ok(())
    }

    /// Replaces the ReplicaSet the server answered with in the claimed list.
    fn remember(&mut self, rs: &ReplicaSet) {
        match self
            .sets
            .iter_mut()
            .find(|s| s.metadata.uid == rs.metadata.uid)
        {
            Some(slot) => *slot = rs.clone(),
            None => self.sets.push(rs.clone()),
        }
    }
}

/// Whether a selector is the empty one that selects everything.
fn selects_all(selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
}
