//! kcm's statefulset controller (`pkg/controller/statefulset`): pods with stable names
//! `<set>-<ordinal>`, stable claims `<claim>-<set>-<ordinal>`, created in order and
//! replaced in reverse order, one revision of the pod template at a time.
//!
//! - [`spec`]: the spec as read, with the API server's defaults.
//! - [`identity`]: pod names, ordinals, labels, hostname and subdomain, claims, pod states.
//! - [`history`]: ControllerRevisions (names, hashes, the template patch they hold).
//! - [`claims`]: the claims' ownerReferences under `persistentVolumeClaimRetentionPolicy`.
//! - [`control`]: one sync (kcm's `StatefulSetControl` and `StatefulPodControl`).
//!
//! A sync starts when the set's spec changes (a new generation, or its deletion starting) or
//! one of its pods does (a pod with the set as controller, or an orphan its selector
//! matches). kcm also syncs on every status change; here the controller's own status writes,
//! one per step of a rollout, would each come back as a sync that finds nothing to do and,
//! in a row, look like a hot loop to the runtime. A status changed by someone else is
//! rewritten at the set's next pod event. It adopts orphan revisions and
//! pods the selector matches (pods also by name: `<set>-<n>`), releases pods that no
//! longer match, and acts only once its pod cache has seen its own creations and deletions.
//! With `minReadySeconds`, it looks again that long after a sync leaves pods not yet
//! available.

pub mod claims;
mod context;
pub mod control;
pub mod history;
pub mod identity;
pub mod spec;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use konverge_apimachinery::selector::LabelSelector;
use konverge_runtime::cache::Change;
use konverge_runtime::reconcile::OnError;
use konverge_runtime::{Action, ErrorClass, Manager, ObjectKey, Store, predicate};
use kube::ResourceExt;
use kube::api::Api;

use self::context::Ctx;
use self::control::{Failure, Sync};
use self::spec::Spec;
use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::expectations::{Expectations, Seen};
use crate::{controller_ref, informers, pods};

/// kcm's statefulset controller.
pub const STATEFULSET: Descriptor = Descriptor {
    name: "statefulset-controller",
    aliases: &["statefulset"],
    service_account: "statefulset-controller",
    add,
};

/// The component kcm records the controller's events as.
const EVENT_SOURCE: &str = "statefulset-controller";

/// kcm's `ConcurrentStatefulSetSyncs` default.
const WORKERS: usize = 5;

/// How soon a sync that waits on something no watch reports tries again.
const WAIT_RETRY: Duration = Duration::from_secs(1);

/// How soon a sync that lost a write to a newer version tries again.
const CONFLICT_RETRY: Duration = Duration::from_millis(100);

/// How soon a sync waiting for its pod cache looks again if no pod event wakes it first.
const EXPECTATIONS_RETRY: Duration = Duration::from_secs(5);

fn add(manager: &mut Manager, setup: Setup) {
    let sets = informers::cache::<StatefulSet>(manager);
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), EVENT_SOURCE),
        client: setup.client,
        clock: setup.clock,
        expectations: Expectations::new(),
        pods: informers::cache::<Pod>(manager),
        claims: informers::cache::<PersistentVolumeClaim>(manager),
        revisions: informers::cache::<ControllerRevision>(manager),
    });
    let controller = informers::controller::<StatefulSet>(manager)
        .named("statefulset")
        .with_predicate(predicate::generation_changed())
        .concurrency(WORKERS)
        .error_policy(|_: &StatefulSet, _, class| match class {
            // A write lost to a newer version: the cache catches up within moments, but not
            // while a sync retries without pause.
            ErrorClass::Conflict => OnError::Requeue(CONFLICT_RETRY),
            class => OnError::Class(class),
        })
        .watches_cached(
            informers::api::<Pod>(manager),
            informers::config(),
            move |change| sets_of_pod(&sets, change),
        );
    manager.add(controller, reconcile, ctx);
}

/// The sets a pod change concerns (kcm's `addPod`, `updatePod`, `deletePod`): its
/// controller, before and after; for an orphan created or relabelled, every set whose
/// selector matches it, which may adopt it.
fn sets_of_pod(sets: &Store<StatefulSet>, change: &Change<Pod>) -> Vec<ObjectKey> {
    let (old, new) = (change.old.as_deref(), change.new.as_deref());
    let old_ref = old.and_then(|p| controller_ref::controller_of(&p.metadata));
    let Some(new) = new else {
        return old_ref
            .zip(old)
            .and_then(|(r, p)| resolve(sets, p, r))
            .into_iter()
            .collect();
    };
    let new_ref = controller_ref::controller_of(&new.metadata);
    let mut keys = Vec::new();
    if old_ref.is_some() && old_ref != new_ref {
        keys.extend(old_ref.zip(old).and_then(|(r, p)| resolve(sets, p, r)));
    }
    match new_ref {
        Some(reference) => keys.extend(resolve(sets, new, reference)),
        None => {
            let relabelled = old.is_none_or(|o| o.metadata.labels != new.metadata.labels);
            if relabelled || old_ref.is_some() {
                keys.extend(selecting(sets, new));
            }
        }
    }
    keys
}

/// The set `reference` names, if it is a StatefulSet in the pod's namespace with that uid
/// (kcm's `resolveControllerRef`).
fn resolve(sets: &Store<StatefulSet>, pod: &Pod, reference: &OwnerReference) -> Option<ObjectKey> {
    if reference.kind != "StatefulSet" || !reference.api_version.starts_with("apps/") {
        return None;
    }
    let key = ObjectKey::namespaced(pod.namespace().unwrap_or_default(), &reference.name);
    let set = sets.get(&key)?;
    (set.metadata.uid.as_deref() == Some(reference.uid.as_str())).then_some(key)
}

/// The sets of the pod's namespace whose (non-empty) selector matches it (kcm's
/// `GetPodStatefulSets`).
fn selecting(sets: &Store<StatefulSet>, pod: &Pod) -> Vec<ObjectKey> {
    let labels = pods::labels(pod);
    sets.list_namespace(&pod.namespace().unwrap_or_default())
        .iter()
        .filter(|set| selector_of(set).is_ok_and(|s| !s.is_empty() && s.matches(labels)))
        .filter_map(|set| ObjectKey::of(&**set))
        .collect()
}

fn selector_of(set: &StatefulSet) -> Result<LabelSelector> {
    controller_ref::selector(set.spec.as_ref().map(|s| &s.selector))
}

/// kcm's `sync` of one set.
async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Ctx>) -> Result<Action> {
    // Claims and revisions trigger nothing: wait for their first list here.
    ctx.claims.wait_until_ready().await;
    ctx.revisions.wait_until_ready().await;
    let spec = Spec::of(&set)?;
    let selector = selector_of(&set)?;
    let key = format!("{}/{}", spec.namespace, spec.name);
    if !ctx
        .expectations
        .satisfied(&key, |uid| seen(&ctx.pods, &spec.namespace, uid))
    {
        return Ok(Action::requeue(EXPECTATIONS_RETRY));
    }
    let revisions = adopt_revisions(&set, &spec, &selector, &ctx).await?;
    let pods = claim_pods(&set, &spec, &selector, &ctx).await?;
    let sync = Sync::new(&ctx, &set, spec.clone(), key);
    let outcome = sync.run(&pods, revisions).await;
    match outcome.result {
        Err(Failure::Api { error, .. }) => Err(error),
        Err(Failure::Wait(why)) => {
            tracing::debug!(set = %set.name_any(), %why, "waiting");
            Ok(Action::requeue(WAIT_RETRY))
        }
        Ok(()) => {
            let pending = outcome
                .status
                .is_some_and(|s| s.available_replicas != spec.replicas);
            Ok(if spec.min_ready_seconds > 0 && pending {
                let seconds = u64::try_from(spec.min_ready_seconds).unwrap_or(0);
                Action::requeue(Duration::from_secs(seconds))
            } else {
                Action::await_change()
            })
        }
    }
}

/// What the pod cache holds of the pod `uid` in `namespace`.
fn seen(pods: &Store<Pod>, namespace: &str, uid: &str) -> Seen {
    pods.list_namespace(namespace)
        .iter()
        .find(|p| p.metadata.uid.as_deref() == Some(uid))
        .map_or(Seen::Absent, |p| {
            if pods::is_terminating(p) {
                Seen::Terminating
            } else {
                Seen::Present
            }
        })
}

/// The set's revisions: those it controls and orphans its selector matches, which it
/// adopts (kcm's `adoptOrphanRevisions` and `ListRevisions`).
async fn adopt_revisions(
    set: &StatefulSet,
    spec: &Spec,
    selector: &LabelSelector,
    ctx: &Ctx,
) -> Result<Vec<Arc<ControllerRevision>>> {
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let (mut owned, orphans): (Vec<_>, Vec<_>) = ctx
        .revisions
        .list_namespace(&spec.namespace)
        .into_iter()
        .filter(|r| selector.matches(r.labels()))
        .filter_map(|r| match controller_ref::controller_of(&r.metadata) {
            None => Some((false, r)),
            Some(c) if c.uid == uid => Some((true, r)),
            Some(_) => None,
        })
        .partition(|(mine, _)| *mine);
    let owner = controller_ref::new_controller_ref(set);
    let client = ctx.client.clone();
    let adopted = controller_ref::claim(
        |ns| Api::namespaced(client.clone(), ns),
        &owner,
        set.metadata.deletion_timestamp.is_some(),
        orphans.into_iter().map(|(_, r)| r),
        |_| true,
        || recheck(set, spec, ctx),
    )
    .await
    .map_err(|e| match e {
        Error::Invalid(e) => Error::invalid(format!("can't adopt ControllerRevisions: {e}")),
        other => other,
    })?;
    owned.extend(adopted.into_iter().map(|r| (true, r)));
    Ok(owned.into_iter().map(|(_, r)| r).collect())
}

/// The set's pods: those it controls that still match, and orphans that match (selector
/// and name), which it adopts; those it controls that no longer match are released (kcm's
/// `getPodsForStatefulSet`).
async fn claim_pods(
    set: &StatefulSet,
    spec: &Spec,
    selector: &LabelSelector,
    ctx: &Ctx,
) -> Result<Vec<Arc<Pod>>> {
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let candidates = ctx
        .pods
        .list_namespace(&spec.namespace)
        .into_iter()
        .filter(|p| controller_ref::controller_of(&p.metadata).is_none_or(|c| c.uid == uid));
    let owner = controller_ref::new_controller_ref(set);
    let client = ctx.client.clone();
    controller_ref::claim(
        |ns| Api::namespaced(client.clone(), ns),
        &owner,
        set.metadata.deletion_timestamp.is_some(),
        candidates,
        |pod: &Pod| selector.matches(pods::labels(pod)) && identity::is_member_of(spec, pod),
        || recheck(set, spec, ctx),
    )
    .await
}

/// kcm's `canAdoptFunc`: the set read fresh must be the same and not being deleted.
async fn recheck(set: &StatefulSet, spec: &Spec, ctx: &Ctx) -> Result<()> {
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &spec.namespace);
    controller_ref::recheck_owner(&api, &controller_ref::new_controller_ref(set)).await
}
