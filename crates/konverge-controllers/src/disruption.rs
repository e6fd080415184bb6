//! kcm's disruption controller (`pkg/controller/disruption`): the status of every
//! PodDisruptionBudget, from the pods its selector matches, and the clean-up of stale
//! `DisruptionTarget` pod conditions.
//!
//! For each PDB: `expectedPods` (the pods themselves for an integer `minAvailable`, the sum of
//! the scales of the pods' controllers — ReplicationController, Deployment, ReplicaSet,
//! StatefulSet, then any owner whose kind has a `scale` subresource, read through it — for
//! `maxUnavailable` or a percentage), `currentHealthy` (Ready pods not
//! being deleted and not recently disrupted), `desiredHealthy`, `disruptionsAllowed`,
//! `observedGeneration`, `disruptedPods` (entries dropped two minutes after the eviction
//! that made them) and the `DisruptionAllowed` condition (`SufficientPods`,
//! `InsufficientPods`, or `SyncFailed` with the error when the status cannot be computed,
//! when `disruptionsAllowed` is also forced to 0 as kcm's fail-safe does).
//!
//! A second controller over pods resets a `DisruptionTarget` condition to False when it has
//! stayed True for two minutes on a pod that is neither being deleted nor finished (an
//! eviction that never happened), as kcm's stale-pod-disruption worker does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodCondition, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector as MetaSelector, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use konverge_runtime::cache::Change;
use konverge_runtime::controller::CachedResource;
use konverge_runtime::predicate;
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

use crate::clock::Clock;
use crate::controller_ref::{controller_of, selector};
use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::informers;
use crate::pods;

/// kcm's disruption controller.
pub const DISRUPTION: Descriptor = Descriptor {
    name: "disruption-controller",
    aliases: &["disruption"],
    service_account: "disruption-controller",
    add,
};

/// How long after an eviction a pod listed in `disruptedPods` is expected to be marked for
/// deletion (kcm's `DeletionTimeout`); past it the entry is dropped.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(2 * 60);

/// How long a `DisruptionTarget` condition may stay True on a pod that is not being deleted
/// before it is reset to False (kcm's `stalePodDisruptionTimeout`).
pub const STALE_POD_DISRUPTION_TIMEOUT: Duration = Duration::from_secs(2 * 60);

/// The PDB condition this controller keeps.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// The pod condition an eviction adds.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// The event source kcm's disruption controller records as.
const COMPONENT: &str = "controllermanager";

struct Ctx {
    client: kube::Client,
    clock: Clock,
    events: Events,
    pods: Store<Pod>,
    rcs: Store<ReplicationController>,
    replica_sets: Store<ReplicaSet>,
    deployments: Store<Deployment>,
    stateful_sets: Store<StatefulSet>,
}

fn add(manager: &mut Manager, setup: Setup) {
    let pdbs = informers::cache::<PodDisruptionBudget>(manager);
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), COMPONENT),
        client: setup.client,
        clock: setup.clock,
        pods: informers::cache::<Pod>(manager),
        rcs: informers::cache::<ReplicationController>(manager),
        replica_sets: informers::cache::<ReplicaSet>(manager),
        deployments: informers::cache::<Deployment>(manager),
        stateful_sets: informers::cache::<StatefulSet>(manager),
    });
    let by_pod = {
        let pdbs = pdbs.clone();
        move |change: &Change<Pod>| pdbs_for_pod(&pdbs, change)
    };
    let controller = informers::controller::<PodDisruptionBudget>(manager)
        .named("disruption")
        // Status writes by others (and the pods' changes) matter: every change is looked at.
        .with_predicate(predicate::always())
        .watches_cached(informers::api::<Pod>(manager), informers::config(), by_pod)
        .watches_cached(
            informers::api::<ReplicaSet>(manager),
            informers::config(),
            scale_trigger::<ReplicaSet>(pdbs.clone()),
        )
        .watches_cached(
            informers::api::<Deployment>(manager),
            informers::config(),
            scale_trigger::<Deployment>(pdbs.clone()),
        )
        .watches_cached(
            informers::api::<StatefulSet>(manager),
            informers::config(),
            scale_trigger::<StatefulSet>(pdbs.clone()),
        )
        .watches_cached(
            informers::api::<ReplicationController>(manager),
            informers::config(),
            scale_trigger::<ReplicationController>(pdbs),
        );
    manager.add(controller, reconcile, ctx.clone());

    let stale = informers::controller::<Pod>(manager)
        .named("disruption-stale-pod")
        .with_predicate(|old: Option<&Pod>, new: &Pod| {
            stale_condition_time(new).is_some() && old.is_none_or(|o| o != new)
        });
    manager.add(stale, reconcile_stale_pod, ctx);
}

/// The PDBs in the pod's namespace whose selector matches the pod, before or after the
/// change (kcm wakes the first; every one is woken here, which costs nothing more).
fn pdbs_for_pod(pdbs: &Store<PodDisruptionBudget>, change: &Change<Pod>) -> Vec<ObjectKey> {
    let mut keys = Vec::new();
    for pod in change.old.iter().chain(change.new.iter()) {
        let namespace = pod.namespace().unwrap_or_default();
        for pdb in pdbs.list_namespace(&namespace) {
            let matches = selector(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
                .is_ok_and(|s| s.matches(pods::labels(pod)));
            if let Some(key) = ObjectKey::of(pdb.as_ref())
                && matches
                && !keys.contains(&key)
            {
                keys.push(key);
            }
        }
    }
    keys
}

/// A change of a workload's scale re-syncs the PDBs of its namespace.
fn scale_trigger<K>(
    pdbs: Store<PodDisruptionBudget>,
) -> impl Fn(&Change<K>) -> Vec<ObjectKey> + Send + Sync + 'static
where
    K: CachedResource + Resource<DynamicType = ()>,
{
    move |change: &Change<K>| {
        let replicas = |obj: &Option<Arc<K>>| {
            obj.as_ref()
                .and_then(|o| serde_json::to_value(o.as_ref()).ok())
                .and_then(|v| v.pointer("/spec/replicas").and_then(|r| r.as_i64()))
        };
        if change.old.is_some()
            && change.new.is_some()
            && replicas(&change.old) == replicas(&change.new)
        {
            return Vec::new();
        }
        let namespace = change.key.namespace.clone().unwrap_or_default();
        pdbs.list_namespace(&namespace)
            .iter()
            .filter_map(|p| ObjectKey::of(p.as_ref()))
            .collect()
    }
}

async fn reconcile(pdb: Arc<PodDisruptionBudget>, ctx: Arc<Ctx>) -> Result<Action> {
    match try_sync(&pdb, &ctx).await {
        Ok(action) => Ok(action),
        Err(Failure::Api(error)) if error.is_status(409) || error.is_status(404) => Err(error),
        Err(failure) => {
            let message = match failure {
                Failure::Api(error) => error.to_string(),
                Failure::Message(message) => message,
            };
            tracing::warn!(message, pdb = pdb.name_any(), "failed to sync PDB");
            fail_safe(&pdb, &ctx, &message).await?;
            Ok(Action::await_change())
        }
    }
}

/// Why a PDB's status could not be computed or written.
enum Failure {
    /// A write failed.
    Api(Error),
    /// The status cannot be computed; kcm's error message.
    Message(String),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Api(error)
    }
}

/// kcm's `trySync`: computes the status and writes it if it changed; asks to look again when
/// the oldest `disruptedPods` entry expires.
async fn try_sync(pdb: &PodDisruptionBudget, ctx: &Ctx) -> std::result::Result<Action, Failure> {
    let spec = pdb.spec.clone().unwrap_or_default();
    let namespace = pdb.namespace().unwrap_or_default();
    let pod_selector = match selector(spec.selector.as_ref()) {
        Ok(s) => s,
        Err(error) => {
            let message = error.to_string();
            let message = message
                .strip_prefix("terminal: ")
                .unwrap_or(&message)
                .to_string();
            ctx.events
                .warning(pdb, "NoPods", format!("Failed to get pods: {message}"));
            return Err(Failure::Message(message));
        }
    };
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .list_namespace(&namespace)
        .into_iter()
        .filter(|p| pod_selector.matches(pods::labels(p)))
        .collect();

    let counts = match expected_pod_count(ctx, &spec, &pods).await {
        Ok(counts) => counts,
        Err(error) => {
            ctx.events.warning(
                pdb,
                "CalculateExpectedPodCountFailed",
                format!("Failed to calculate the number of expected pods: {error}"),
            );
            return Err(Failure::Message(error));
        }
    };
    let now = ctx.clock.now();
    let (disrupted, recheck) = disrupted_pod_map(ctx, pdb, &pods, now);
    let current_healthy = count_healthy(&pods, &disrupted, now);
    let status = new_status(
        pdb,
        current_healthy,
        counts.desired_healthy,
        counts.expected,
        disrupted,
        now,
    );
    if status_up_to_date(pdb, &status) {
        return Ok(recheck_action(recheck, now));
    }
    // Events kcm records on every sync are recorded here when the status changes, so a
    // status write's own echo does not record them again.
    if pods.is_empty() {
        ctx.events
            .normal(pdb, "NoPods", "No matching pods found".to_string());
    }
    if !counts.unmanaged.is_empty() {
        ctx.events.warning(
            pdb,
            "UnmanagedPods",
            format!(
                "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.",
                go_selector(spec.selector.as_ref())
            ),
        );
    }
    write_status(ctx, pdb, status).await?;
    Ok(recheck_action(recheck, now))
}

fn recheck_action(recheck: Option<Timestamp>, now: Timestamp) -> Action {
    match recheck {
        Some(at) => Action::requeue(
            Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
                + Duration::from_millis(1),
        ),
        None => Action::await_change(),
    }
}

struct Counts {
    expected: i32,
    desired_healthy: i32,
    unmanaged: Vec<String>,
}

/// kcm's `getExpectedPodCount`.
async fn expected_pod_count(
    ctx: &Ctx,
    spec: &k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec,
    pods: &[Arc<Pod>],
) -> std::result::Result<Counts, String> {
    let mut counts = Counts {
        expected: 0,
        desired_healthy: 0,
        unmanaged: Vec::new(),
    };
    if let Some(max_unavailable) = &spec.max_unavailable {
        let (expected, unmanaged) = expected_scale(ctx, pods).await?;
        let max = scaled_value(max_unavailable, expected)?;
        counts.expected = expected;
        counts.unmanaged = unmanaged;
        counts.desired_healthy = (expected - max).max(0);
    } else if let Some(min_available) = &spec.min_available {
        match min_available {
            IntOrString::Int(n) => {
                counts.desired_healthy = *n;
                counts.expected = i32::try_from(pods.len()).unwrap_or(i32::MAX);
            }
            IntOrString::String(_) => {
                let (expected, unmanaged) = expected_scale(ctx, pods).await?;
                counts.expected = expected;
                counts.unmanaged = unmanaged;
                counts.desired_healthy = scaled_value(min_available, expected)?;
            }
        }
    }
    Ok(counts)
}

/// kcm's `intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)`.
pub fn scaled_value(value: &IntOrString, total: i32) -> std::result::Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let Some(number) = s.strip_suffix('%') else {
                return Err(
                    "invalid value for IntOrString: invalid type: string is not a percentage"
                        .to_string(),
                );
            };
            let percent: i64 = number.parse().map_err(|_| {
                format!("invalid value {s:?}: strconv.Atoi: parsing {number:?}: invalid syntax")
            })?;
            let scaled = (percent * i64::from(total) + 99).div_euclid(100);
            Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
        }
    }
}

/// kcm's `getExpectedScale`: the sum of the scales of the pods' controllers, each counted
/// once, and the names of the pods that have no controller.
async fn expected_scale(
    ctx: &Ctx,
    pods: &[Arc<Pod>],
) -> std::result::Result<(i32, Vec<String>), String> {
    let mut scales: BTreeMap<String, i32> = BTreeMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let Some(owner) = controller_of(&pod.metadata) else {
            unmanaged.push(pod.name_any());
            continue;
        };
        if scales.contains_key(&owner.uid) {
            continue;
        }
        let namespace = pod.namespace().unwrap_or_default();
        let found = match controller_scale(ctx, owner, &namespace) {
            Some(found) => Some(found),
            None => scale_controller(ctx, owner, &namespace).await?,
        };
        match found {
            Some((uid, scale)) => {
                scales.insert(uid, scale);
            }
            None => return Err(format!("found no controllers for pod {:?}", pod.name_any())),
        }
    }
    Ok((
        scales.values().copied().fold(0i32, i32::saturating_add),
        unmanaged,
    ))
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The finders kcm tries in order: ReplicationController, Deployment (through its
/// ReplicaSet), ReplicaSet, StatefulSet. The uid and `spec.replicas` of the controller.
fn controller_scale(ctx: &Ctx, owner: &OwnerReference, namespace: &str) -> Option<(String, i32)> {
    let group = group_of(&owner.api_version);
    let key = ObjectKey::namespaced(namespace, &owner.name);
    match (owner.kind.as_str(), group) {
        ("ReplicationController", "") => {
            let rc = ctx
                .rcs
                .get(&key)
                .filter(|r| r.uid().as_deref() == Some(&owner.uid))?;
            Some((
                owner.uid.clone(),
                rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ))
        }
        ("ReplicaSet", "apps" | "extensions") => {
            let rs = ctx
                .replica_sets
                .get(&key)
                .filter(|r| r.uid().as_deref() == Some(&owner.uid))?;
            match controller_of(&rs.metadata) {
                Some(dep) if dep.kind == "Deployment" => {
                    if !matches!(group_of(&dep.api_version), "apps" | "extensions") {
                        return None;
                    }
                    let deployment = ctx
                        .deployments
                        .get(&ObjectKey::namespaced(namespace, &dep.name))
                        .filter(|d| d.uid().as_deref() == Some(&dep.uid))?;
                    let replicas = deployment
                        .spec
                        .as_ref()
                        .and_then(|s| s.replicas)
                        .unwrap_or(1);
                    Some((dep.uid.clone(), replicas))
                }
                _ => Some((
                    owner.uid.clone(),
                    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                )),
            }
        }
        ("StatefulSet", "apps") => {
            let ss = ctx
                .stateful_sets
                .get(&key)
                .filter(|s| s.uid().as_deref() == Some(&owner.uid))?;
            Some((
                owner.uid.clone(),
                ss.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ))
        }
        _ => None,
    }
}

/// kcm's `getScaleController`, its last finder: the owner's `scale` subresource, whatever
/// its kind (found by discovery), if the scale names the owner's uid. An owner whose kind has
/// no `scale` is an error (`daemonsets.apps does not implement the scale subresource`); an
/// owner that does not exist is no controller.
async fn scale_controller(
    ctx: &Ctx,
    owner: &OwnerReference,
    namespace: &str,
) -> std::result::Result<Option<(String, i32)>, String> {
    let group = group_of(&owner.api_version);
    let version = owner
        .api_version
        .rsplit_once('/')
        .map_or(owner.api_version.as_str(), |(_, v)| v);
    let listed = if group.is_empty() {
        ctx.client.list_core_api_resources(version).await
    } else {
        ctx.client
            .list_api_group_resources(&owner.api_version)
            .await
    };
    let no_match = || {
        format!(
            "no matches for kind {:?} in version {:?}",
            owner.kind, owner.api_version
        )
    };
    let resources = match listed {
        Ok(list) => list.resources,
        Err(kube::Error::Api(status)) if status.code == 404 => return Err(no_match()),
        Err(error) => return Err(error.to_string()),
    };
    let Some(resource) = resources
        .iter()
        .find(|r| r.kind == owner.kind && !r.name.contains('/'))
    else {
        return Err(no_match());
    };
    let api_resource = kube::discovery::ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: owner.api_version.clone(),
        kind: owner.kind.clone(),
        plural: resource.name.clone(),
    };
    let api: Api<kube::api::DynamicObject> = if resource.namespaced {
        Api::namespaced_with(ctx.client.clone(), namespace, &api_resource)
    } else {
        Api::all_with(ctx.client.clone(), &api_resource)
    };
    match api.get_scale(&owner.name).await {
        Ok(scale) => {
            if scale.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
                return Ok(None);
            }
            let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or_default();
            Ok(Some((owner.uid.clone(), replicas)))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {
            // Either the owner is gone or its kind has no scale: discovery says which.
            let scale_name = format!("{}/scale", resource.name);
            let implements = resources.iter().any(|r| {
                r.name == scale_name
                    && r.kind == "Scale"
                    && r.group.as_deref() == Some("autoscaling")
                    && r.version.as_deref() == Some("v1")
            });
            if implements {
                Ok(None)
            } else if group.is_empty() {
                Err(format!(
                    "{} does not implement the scale subresource",
                    resource.name
                ))
            } else {
                Err(format!(
                    "{}.{group} does not implement the scale subresource",
                    resource.name
                ))
            }
        }
        Err(error) => Err(error.to_string()),
    }
}

/// kcm's `buildDisruptedPodMap`: the entries of `disruptedPods` still waiting for their pod
/// to be marked for deletion, and when the first of them expires.
fn disrupted_pod_map(
    ctx: &Ctx,
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<Timestamp>) {
    let mut result = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    let Some(disrupted) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
        return (result, None);
    };
    let timeout = SignedDuration::try_from(DELETION_TIMEOUT).unwrap_or(SignedDuration::MAX);
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(since) = disrupted.get(&pod.name_any()) else {
            continue;
        };
        let expected = since.0.saturating_add(timeout).unwrap_or(Timestamp::MAX);
        if expected < now {
            ctx.events.warning(
                pod.as_ref(),
                "NotDeleted",
                format!(
                    "Pod was expected by PDB {}/{} to be deleted but it wasn't",
                    pdb.namespace().unwrap_or_default(),
                    pdb.namespace().unwrap_or_default()
                ),
            );
        } else {
            if recheck.is_none_or(|r| expected < r) {
                recheck = Some(expected);
            }
            result.insert(pod.name_any(), since.clone());
        }
    }
    (result, recheck)
}

/// kcm's `countHealthyPods`: Ready pods neither being deleted nor disrupted.
fn count_healthy(pods: &[Arc<Pod>], disrupted: &BTreeMap<String, Time>, now: Timestamp) -> i32 {
    let timeout = SignedDuration::try_from(DELETION_TIMEOUT).unwrap_or(SignedDuration::MAX);
    let healthy = pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            disrupted
                .get(&pod.name_any())
                .is_none_or(|t| t.0.saturating_add(timeout).unwrap_or(Timestamp::MAX) <= now)
        })
        .filter(|pod| pods::is_ready(pod))
        .count();
    i32::try_from(healthy).unwrap_or(i32::MAX)
}

/// The status kcm's `updatePdbStatus` writes, with the `DisruptionAllowed` condition.
fn new_status(
    pdb: &PodDisruptionBudget,
    current_healthy: i32,
    desired_healthy: i32,
    expected: i32,
    disrupted: BTreeMap<String, Time>,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let mut allowed = current_healthy - desired_healthy;
    if expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let old = pdb.status.clone().unwrap_or_default();
    let mut status = PodDisruptionBudgetStatus {
        current_healthy,
        desired_healthy,
        expected_pods: expected,
        disruptions_allowed: allowed,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        observed_generation: pdb.metadata.generation,
        conditions: old.conditions,
    };
    let (state, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    set_condition(&mut status, state, reason, "", now);
    status
}

/// kcm's `apimeta.SetStatusCondition` for the `DisruptionAllowed` condition: the transition
/// time moves only when the status does.
fn set_condition(
    status: &mut PodDisruptionBudgetStatus,
    state: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let generation = status.observed_generation;
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let whole = Timestamp::from_second(now.as_second()).unwrap_or(now);
    match conditions
        .iter_mut()
        .find(|c| c.type_ == DISRUPTION_ALLOWED)
    {
        Some(existing) => {
            if existing.status != state {
                existing.status = state.to_string();
                existing.last_transition_time = Time(whole);
            }
            existing.reason = reason.to_string();
            existing.message = message.to_string();
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: DISRUPTION_ALLOWED.to_string(),
            status: state.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            observed_generation: generation,
            last_transition_time: Time(whole),
        }),
    }
}

/// kcm's up-to-date check: every number, the disrupted pods, the generation and the
/// condition already say what would be written.
fn status_up_to_date(pdb: &PodDisruptionBudget, new: &PodDisruptionBudgetStatus) -> bool {
    let Some(old) = &pdb.status else {
        return false;
    };
    let old_disrupted = old.disrupted_pods.clone().unwrap_or_default();
    let new_disrupted = new.disrupted_pods.clone().unwrap_or_default();
    let condition_ok = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_ALLOWED)
        .is_some_and(|c| {
            if new.disruptions_allowed > 0 {
                c.status == "True" && c.reason == "SufficientPods"
            } else {
                c.status == "False" && c.reason == "InsufficientPods"
            }
        });
    old.current_healthy == new.current_healthy
        && old.desired_healthy == new.desired_healthy
        && old.expected_pods == new.expected_pods
        && old.disruptions_allowed == new.disruptions_allowed
        && old_disrupted == new_disrupted
        && old.observed_generation == pdb.metadata.generation
        && condition_ok
}

async fn write_status(
    ctx: &Ctx,
    pdb: &PodDisruptionBudget,
    status: PodDisruptionBudgetStatus,
) -> Result<()> {
    let mut updated = pdb.clone();
    updated.status = Some(status);
    let api: Api<PodDisruptionBudget> =
        Api::namespaced(ctx.client.clone(), &pdb.namespace().unwrap_or_default());
    let written = api
        .replace_status(&pdb.name_any(), &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(())
}

/// kcm's `failSafe`: `disruptionsAllowed` 0 and the condition False with `SyncFailed` and the
/// error, so no eviction is approved on a status that could not be computed.
async fn fail_safe(pdb: &PodDisruptionBudget, ctx: &Ctx, message: &str) -> Result<()> {
    let mut status = pdb.status.clone().unwrap_or_default();
    status.disruptions_allowed = 0;
    let already = status.conditions.iter().flatten().any(|c| {
        c.type_ == DISRUPTION_ALLOWED
            && c.status == "False"
            && c.reason == "SyncFailed"
            && c.message == message
    });
    if already
        && pdb
            .status
            .as_ref()
            .is_some_and(|s| s.disruptions_allowed == 0)
    {
        return Ok(());
    }
    set_condition(&mut status, "False", "SyncFailed", message, ctx.clock.now());
    write_status(ctx, pdb, status).await
}

/// How Go prints a `*metav1.LabelSelector` with `%v`, as kcm's `UnmanagedPods` message shows
/// it.
fn go_selector(selector: Option<&MetaSelector>) -> String {
    let Some(selector) = selector else {
        return "nil".to_string();
    };
    let labels: String = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let expressions: String = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|e| {
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.key,
                e.operator,
                e.values.clone().unwrap_or_default().join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

/// When a pod's `DisruptionTarget` condition is stale, if it can be: True, not set by the
/// kubelet, on a pod neither being deleted nor finished (kcm's
/// `nonTerminatingPodHasStaleDisruptionCondition`). The time it became True.
fn stale_condition_time(pod: &Pod) -> Option<Timestamp> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let condition = pods::condition(pod, DISRUPTION_TARGET)?;
    let phase = pods::phase(pod);
    if condition.status != "True"
        || condition.reason.as_deref() == Some("TerminationByKubelet")
        || phase == "Succeeded"
        || phase == "Failed"
    {
        return None;
    }
    Some(
        condition
            .last_transition_time
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
    )
}

/// kcm's `syncStalePodDisruption`: once the condition has been True for two minutes, it is
/// set False (with no reason or message, as kcm writes it).
async fn reconcile_stale_pod(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action> {
    let Some(since) = stale_condition_time(&pod) else {
        return Ok(Action::await_change());
    };
    let now = ctx.clock.now();
    let timeout =
        SignedDuration::try_from(STALE_POD_DISRUPTION_TIMEOUT).unwrap_or(SignedDuration::MAX);
    let due = since.saturating_add(timeout).unwrap_or(Timestamp::MAX);
    if due > now {
        let wait = Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO);
        return Ok(Action::requeue(wait + Duration::from_millis(1)));
    }
    let mut updated = pod.as_ref().clone();
    let condition = PodCondition {
        type_: DISRUPTION_TARGET.to_string(),
        status: "False".to_string(),
        ..PodCondition::default()
    };
    if !crate::podgc::update_pod_condition(&mut updated, condition, &ctx.clock) {
        return Ok(Action::await_change());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let written = api
        .replace_status(&pod.name_any(), &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up_as_kcm() {
        let pct = |s: &str| IntOrString::String(s.to_string());
        assert_eq!(scaled_value(&pct("50%"), 5), Ok(3));
        assert_eq!(scaled_value(&pct("20%"), 10), Ok(2));
        assert_eq!(scaled_value(&IntOrString::Int(2), 10), Ok(2));
        assert!(scaled_value(&pct("half"), 10).is_err());
        assert!(scaled_value(&pct("x%"), 10).is_err());
    }

    #[test]
    fn selectors_print_as_go_does() {
        let selector: MetaSelector =
            serde_json::from_value(serde_json::json!({"matchLabels": {"app": "web"}}))
                .expect("a selector");
        assert_eq!(
            go_selector(Some(&selector)),
            "&LabelSelector{MatchLabels:map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{},}"
        );
    }
}
