//! kcm's PersistentVolume binder (`pkg/controller/volume/persistentvolume`): binds claims to
//! volumes, provisions volumes for claims, and releases and reclaims volumes whose claim is
//! gone.
//!
//! - A Pending claim binds to the smallest Available volume that fits it: enough capacity,
//!   every access mode it asks for, the same storage class and volume mode, labels its
//!   selector matches; a volume pre-bound to the claim (`spec.claimRef`) wins over any other.
//!   Binding writes `spec.claimRef` and phase `Bound` on the volume, `spec.volumeName` and
//!   phase `Bound` (with the volume's access modes and capacity) on the claim, with the
//!   annotations `pv.kubernetes.io/bind-completed` and `pv.kubernetes.io/bound-by-controller`.
//! - A claim whose class binds `WaitForFirstConsumer` waits for the scheduler's
//!   `volume.kubernetes.io/selected-node` annotation (event `WaitForFirstConsumer`).
//! - A claim no volume fits is provisioned through its StorageClass: the claim gets
//!   `volume.kubernetes.io/storage-provisioner` (and the beta annotation). The provisioner
//!   [`HOSTPATH_PROVISIONER`] (`konverge.dev/hostpath`) is this controller's own, standing in
//!   for kcm's in-tree plugins: it creates a `hostPath` volume named `pvc-<claim uid>` under
//!   [`HOSTPATH_ROOT`] (the kubelet creates the directory, `DirectoryOrCreate`; pinned to the
//!   selected node when there is one), with the class's reclaim policy and mount options, the
//!   annotation `pv.kubernetes.io/provisioned-by`, and the `kubernetes.io/pv-controller`
//!   finalizer kcm puts on volumes it deletes itself; event `ProvisioningSucceeded`. Any other
//!   provisioner is external: event `ExternalProvisioning`, and the claim waits.
//! - A volume whose claim is deleted becomes `Released`; with reclaim policy `Delete` a volume
//!   provisioned here is deleted (nothing on the node is removed: the controller does not run
//!   there), one provisioned externally is left to its provisioner, and any other fails
//!   (`VolumeFailedDelete`), as in kcm without a deleter plugin. `Recycle` fails
//!   (`VolumeFailedRecycle`): there is no recycler.
//!
//! Not done: node affinity of existing volumes is not checked against the selected node, and
//! kcm's 15-second resync of every claim is replaced by triggers (volume, claim and class
//! changes).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, PersistentVolumeStatus,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use konverge_apimachinery::quantity;
use konverge_runtime::cache::Change;
use konverge_runtime::predicate;
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};

use crate::clock::Clock;
use crate::controller_ref::selector;
use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::informers;

/// kcm's PersistentVolume binder.
pub const PERSISTENTVOLUME_BINDER: Descriptor = Descriptor {
    name: "persistentvolume-binder-controller",
    aliases: &["persistentvolume-binder"],
    service_account: "persistent-volume-binder",
    add,
};

/// The provisioner this controller implements itself (see the module docs).
pub const HOSTPATH_PROVISIONER: &str = "konverge.dev/hostpath";
/// Where the volumes it provisions live on the node.
pub const HOSTPATH_ROOT: &str = "/tmp/konverge-hostpath";

/// Set on a claim once it is bound.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a volume or claim this controller bound (rather than the user).
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The provisioner that made a volume.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The provisioner a claim waits for.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// Its beta name, still written.
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The node the scheduler picked for a `WaitForFirstConsumer` claim.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The beta class annotation, read before `storageClassName`.
const ANN_BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The finalizer kcm keeps on volumes it will delete itself.
pub const PV_CONTROLLER_FINALIZER: &str = "kubernetes.io/pv-controller";

const COMPONENT: &str = "persistentvolume-controller";

struct Ctx {
    client: kube::Client,
    clock: Clock,
    events: Events,
    volumes: Store<PersistentVolume>,
    claims: Store<PersistentVolumeClaim>,
    classes: Store<StorageClass>,
}

fn add(manager: &mut Manager, setup: Setup) {
    let volumes = informers::cache::<PersistentVolume>(manager);
    let claims = informers::cache::<PersistentVolumeClaim>(manager);
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), COMPONENT),
        client: setup.client,
        clock: setup.clock,
        volumes: volumes.clone(),
        claims: claims.clone(),
        classes: informers::cache::<StorageClass>(manager),
    });
    let waiting = {
        let claims = claims.clone();
        move |pv: Option<&PersistentVolume>| -> Vec<ObjectKey> {
            let mut keys: Vec<ObjectKey> = claims
                .list()
                .iter()
                .filter(|c| {
                    c.spec
                        .as_ref()
                        .and_then(|s| s.volume_name.as_deref())
                        .unwrap_or("")
                        .is_empty()
                })
                .filter_map(|c| ObjectKey::of(c.as_ref()))
                .collect();
            if let Some(r) = pv.and_then(|v| v.spec.as_ref()?.claim_ref.as_ref()) {
                keys.push(ObjectKey::namespaced(
                    r.namespace.clone().unwrap_or_default(),
                    r.name.clone().unwrap_or_default(),
                ));
            }
            keys
        }
    };
    let by_volume = {
        let waiting = waiting.clone();
        move |change: &Change<PersistentVolume>| {
            let mut keys = waiting(change.new.as_deref());
            keys.extend(waiting(change.old.as_deref()));
            keys.sort();
            keys.dedup();
            keys
        }
    };
    let claims_controller = informers::controller::<PersistentVolumeClaim>(manager)
        .named("persistentvolume-claims")
        .with_predicate(predicate::always())
        .watches_cached(
            informers::api::<PersistentVolume>(manager),
            informers::config(),
            by_volume,
        )
        .watches_cached(
            informers::api::<StorageClass>(manager),
            informers::config(),
            move |_: &Change<StorageClass>| waiting(None),
        );
    manager.add(claims_controller, reconcile_claim, ctx.clone());

    let volumes_controller = informers::controller::<PersistentVolume>(manager)
        .named("persistentvolume-volumes")
        .with_predicate(predicate::always())
        .watches_cached(
            informers::api::<PersistentVolumeClaim>(manager),
            informers::config(),
            move |change: &Change<PersistentVolumeClaim>| {
                let (namespace, name) = (change.key.namespace.clone(), change.key.name.clone());
                volumes
                    .list()
                    .iter()
                    .filter(|v| {
                        v.spec
                            .as_ref()
                            .and_then(|s| s.claim_ref.as_ref())
                            .is_some_and(|r| {
                                r.namespace == namespace && r.name.as_deref() == Some(name.as_str())
                            })
                    })
                    .filter_map(|v| ObjectKey::of(v.as_ref()))
                    .collect()
            },
        );
    manager.add(volumes_controller, reconcile_volume, ctx);
}

fn annotation<'a, K: Resource>(obj: &'a K, key: &str) -> Option<&'a str> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// kcm's `GetPersistentVolumeClaimClass`.
fn claim_class(claim: &PersistentVolumeClaim) -> String {
    annotation(claim, ANN_BETA_CLASS)
        .map(str::to_string)
        .or_else(|| claim.spec.as_ref()?.storage_class_name.clone())
        .unwrap_or_default()
}

/// kcm's `GetPersistentVolumeClass`.
fn volume_class(volume: &PersistentVolume) -> String {
    annotation(volume, ANN_BETA_CLASS)
        .map(str::to_string)
        .or_else(|| volume.spec.as_ref()?.storage_class_name.clone())
        .unwrap_or_default()
}

fn volume_name_of(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

fn claim_ref(volume: &PersistentVolume) -> Option<&ObjectReference> {
    volume.spec.as_ref()?.claim_ref.as_ref()
}

/// kcm's `IsVolumeBoundToClaim`: the volume's claimRef names the claim (and its uid, if set).
fn bound_to_claim(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = claim_ref(volume) else {
        return false;
    };
    r.name == claim.metadata.name
        && r.namespace == claim.metadata.namespace
        && r.uid
            .as_deref()
            .is_none_or(|uid| uid.is_empty() || Some(uid) == claim.metadata.uid.as_deref())
}

fn storage(resources: Option<&BTreeMap<String, Quantity>>) -> Option<i128> {
    quantity::value(&resources?.get("storage")?.0).map(|q| q.nanos)
}

fn phase_of(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

// ---------------------------------------------------------------- claims

async fn reconcile_claim(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Ctx>) -> Result<Action> {
    if annotation(claim.as_ref(), ANN_BIND_COMPLETED).is_some() {
        sync_bound_claim(&ctx, &claim).await?;
    } else {
        sync_unbound_claim(&ctx, &claim).await?;
    }
    Ok(Action::await_change())
}

/// Whether binding waits for the scheduler (kcm's `shouldDelayBinding`).
fn delay_binding(ctx: &Ctx, claim: &PersistentVolumeClaim) -> bool {
    if annotation(claim, ANN_SELECTED_NODE).is_some() {
        return false;
    }
    let class = claim_class(claim);
    !class.is_empty()
        && ctx
            .classes
            .get(&ObjectKey::cluster(class))
            .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
}

async fn sync_unbound_claim(ctx: &Ctx, claim: &PersistentVolumeClaim) -> Result<()> {
    let volume_name = volume_name_of(claim);
    if volume_name.is_empty() {
        let delay = delay_binding(ctx, claim);
        if let Some(volume) = find_best_match(ctx, claim, delay) {
            return bind(ctx, &volume, claim).await;
        }
        let class = claim_class(claim);
        let claim = if delay {
            ctx.events.normal(
                claim,
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding".into(),
            );
            claim.clone()
        } else if !class.is_empty() {
            provision(ctx, claim, &class).await?
        } else {
            ctx.events.normal(
                claim,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set".into(),
            );
            claim.clone()
        };
        update_claim_status(ctx, &claim, "Pending", None).await?;
        return Ok(());
    }
    // The user asked for a volume by name.
    let volume = ctx.volumes.get(&ObjectKey::cluster(volume_name));
    match volume {
        Some(volume) if claim_ref(&volume).is_none() && fits(&volume, claim) => {
            bind(ctx, &volume, claim).await
        }
        Some(volume) if bound_to_claim(&volume, claim) => bind(ctx, &volume, claim).await,
        Some(volume)
            if claim_ref(&volume).is_some()
                && annotation(claim, ANN_BOUND_BY_CONTROLLER).is_some() =>
        {
            Err(Error::invalid(format!(
                "Invalid binding of claim {:?} to volume {:?}: volume already claimed by {:?}",
                claim.name_any(),
                volume.name_any(),
                claim_ref(&volume)
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default()
            )))
        }
        _ => update_claim_status(ctx, claim, "Pending", None).await,
    }
}

fn pending_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether `volume` could hold `claim` (capacity, modes, class, volume mode, selector).
fn fits(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let (Some(vspec), Some(cspec)) = (volume.spec.as_ref(), claim.spec.as_ref()) else {
        return false;
    };
    let requested =
        storage(cspec.resources.as_ref().and_then(|r| r.requests.as_ref())).unwrap_or(0);
    let capacity = storage(vspec.capacity.as_ref()).unwrap_or(0);
    let modes = vspec.access_modes.clone().unwrap_or_default();
    let volume_mode = vspec.volume_mode.as_deref().unwrap_or("Filesystem");
    let claim_mode = cspec.volume_mode.as_deref().unwrap_or("Filesystem");
    let selected = match &cspec.selector {
        None => true,
        Some(s) => selector(Some(s)).is_ok_and(|s| s.matches(&volume.labels().clone())),
    };
    capacity >= requested
        && volume_mode == claim_mode
        && cspec
            .access_modes
            .iter()
            .flatten()
            .all(|m| modes.contains(m))
        && volume_class(volume) == claim_class(claim)
        && selected
}

/// kcm's `findMatchingVolume`: a volume pre-bound to the claim, else the smallest Available
/// one that fits (none while binding waits for the scheduler).
fn find_best_match(
    ctx: &Ctx,
    claim: &PersistentVolumeClaim,
    delay: bool,
) -> Option<Arc<PersistentVolume>> {
    let cspec = claim.spec.as_ref()?;
    let requested =
        storage(cspec.resources.as_ref().and_then(|r| r.requests.as_ref())).unwrap_or(0);
    let mut best: Option<(i128, Arc<PersistentVolume>)> = None;
    for volume in ctx.volumes.list() {
        let Some(vspec) = volume.spec.as_ref() else {
            continue;
        };
        let capacity = storage(vspec.capacity.as_ref()).unwrap_or(0);
        let modes = vspec.access_modes.clone().unwrap_or_default();
        if capacity < requested
            || vspec.volume_mode.as_deref().unwrap_or("Filesystem")
                != cspec.volume_mode.as_deref().unwrap_or("Filesystem")
            || volume.metadata.deletion_timestamp.is_some()
            || !cspec
                .access_modes
                .iter()
                .flatten()
                .all(|m| modes.contains(m))
        {
            continue;
        }
        if bound_to_claim(&volume, claim) {
            return Some(volume);
        }
        if delay
            || phase_of(&volume) != "Available"
            || vspec.claim_ref.is_some()
            || !fits(&volume, claim)
        {
            continue;
        }
        if best.as_ref().is_none_or(|(size, _)| capacity < *size) {
            best = Some((capacity, volume));
        }
    }
    best.map(|(_, v)| v)
}

/// kcm's `provisionClaim`: the claim is annotated with its provisioner; ours makes the
/// volume, any other is waited for.
async fn provision(
    ctx: &Ctx,
    claim: &PersistentVolumeClaim,
    class_name: &str,
) -> Result<PersistentVolumeClaim> {
    let Some(class) = ctx.classes.get(&ObjectKey::cluster(class_name)) else {
        ctx.events.warning(
            claim,
            "ProvisioningFailed",
            format!("storageclass.storage.k8s.io {class_name:?} not found"),
        );
        return Ok(claim.clone());
    };
    let provisioner = class.provisioner.clone();
    let claim = set_claim_provisioner(ctx, claim, &provisioner).await?;
    if provisioner != HOSTPATH_PROVISIONER {
        ctx.events.normal(
            &claim,
            "ExternalProvisioning",
            format!("Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."),
        );
        return Ok(claim);
    }
    let name = format!("pvc-{}", claim.uid().unwrap_or_default());
    if ctx.volumes.get(&ObjectKey::cluster(&name)).is_some() {
        return Ok(claim);
    }
    let volume = provisioned_volume(&name, &claim, &class);
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api.create(&PostParams::default(), &volume).await {
        Ok(_) => ctx.events.normal(
            &claim,
            "ProvisioningSucceeded",
            format!("Successfully provisioned volume {name} using {HOSTPATH_PROVISIONER}"),
        ),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => {
            ctx.events
                .warning(&claim, "ProvisioningFailed", e.to_string());
            return Err(e.into());
        }
    }
    Ok(claim)
}

async fn set_claim_provisioner(
    ctx: &Ctx,
    claim: &PersistentVolumeClaim,
    provisioner: &str,
) -> Result<PersistentVolumeClaim> {
    if annotation(claim, ANN_STORAGE_PROVISIONER) == Some(provisioner)
        && annotation(claim, ANN_BETA_STORAGE_PROVISIONER) == Some(provisioner)
    {
        return Ok(claim.clone());
    }
    let mut updated = claim.clone();
    let annotations = updated
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(ANN_STORAGE_PROVISIONER.into(), provisioner.into());
    annotations.insert(ANN_BETA_STORAGE_PROVISIONER.into(), provisioner.into());
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let written = api
        .replace(&claim.name_any(), &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(written)
}

/// The volume our provisioner makes for `claim` of `class`.
fn provisioned_volume(
    name: &str,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
) -> PersistentVolume {
    let cspec = claim.spec.clone().unwrap_or_default();
    let reclaim = class
        .reclaim_policy
        .clone()
        .unwrap_or_else(|| "Delete".into());
    let node_affinity = annotation(claim, ANN_SELECTED_NODE).map(|node| VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "kubernetes.io/hostname".into(),
                    operator: "In".into(),
                    values: Some(vec![node.to_string()]),
                }]),
                ..NodeSelectorTerm::default()
            }],
        }),
    });
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(BTreeMap::from([
                (ANN_BOUND_BY_CONTROLLER.to_string(), "yes".to_string()),
                (
                    ANN_PROVISIONED_BY.to_string(),
                    HOSTPATH_PROVISIONER.to_string(),
                ),
            ])),
            finalizers: (reclaim == "Delete").then(|| vec![PV_CONTROLLER_FINALIZER.to_string()]),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: cspec.access_modes.clone(),
            capacity: cspec
                .resources
                .as_ref()
                .and_then(|r| r.requests.clone())
                .map(|r| r.into_iter().filter(|(k, _)| k == "storage").collect()),
            claim_ref: Some(reference(claim)),
            persistent_volume_reclaim_policy: Some(reclaim),
            storage_class_name: Some(class.name_any()),
            mount_options: class.mount_options.clone(),
            volume_mode: Some(
                cspec
                    .volume_mode
                    .clone()
                    .unwrap_or_else(|| "Filesystem".into()),
            ),
            host_path: Some(HostPathVolumeSource {
                path: format!("{HOSTPATH_ROOT}/{name}"),
                type_: Some("DirectoryOrCreate".into()),
            }),
            node_affinity,
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

/// kcm's claimRef (`GetReference`).
fn reference(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        name: claim.metadata.name.clone(),
        namespace: claim.metadata.namespace.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

/// kcm's `bind`: volume to claim, volume Bound, claim to volume, claim Bound; each write
/// only if needed, so a retry finishes what a failure left.
async fn bind(ctx: &Ctx, volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> Result<()> {
    let volume = bind_volume_to_claim(ctx, volume, claim).await?;
    let volume = update_volume_phase(ctx, &volume, "Bound", None).await?;
    let claim = bind_claim_to_volume(ctx, claim, &volume).await?;
    update_claim_status(ctx, &claim, "Bound", Some(&volume)).await
}

async fn bind_volume_to_claim(
    ctx: &Ctx,
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<PersistentVolume> {
    let full = claim_ref(volume)
        .is_some_and(|r| bound_to_claim(volume, claim) && r.uid == claim.metadata.uid);
    if full {
        return Ok(volume.clone());
    }
    let mut updated = volume.clone();
    if !bound_to_claim(volume, claim) {
        updated
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
    }
    updated.spec.get_or_insert_with(Default::default).claim_ref = Some(reference(claim));
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let written = api
        .replace(&volume.name_any(), &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(written)
}

async fn bind_claim_to_volume(
    ctx: &Ctx,
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
) -> Result<PersistentVolumeClaim> {
    let name = volume.name_any();
    let set_name = volume_name_of(claim) != name;
    if !set_name && annotation(claim, ANN_BIND_COMPLETED).is_some() {
        return Ok(claim.clone());
    }
    let mut updated = claim.clone();
    let annotations = updated
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(ANN_BIND_COMPLETED.into(), "yes".into());
    if set_name {
        annotations.insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        updated
            .spec
            .get_or_insert_with(Default::default)
            .volume_name = Some(name);
    }
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let written = api
        .replace(&claim.name_any(), &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(written)
}

/// kcm's `updateClaimStatus`: the phase, and the volume's access modes and capacity (or
/// none).
async fn update_claim_status(
    ctx: &Ctx,
    claim: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<()> {
    let mut updated = claim.clone();
    let status = updated.status.get_or_insert_with(Default::default);
    status.phase = Some(phase.into());
    match volume.and_then(|v| v.spec.as_ref()) {
        Some(spec) => {
            status.access_modes = spec.access_modes.clone();
            status.capacity = spec.capacity.clone();
        }
        None => {
            status.access_modes = None;
            status.capacity = None;
        }
    }
    if updated.status == claim.status {
        return Ok(());
    }
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let written = api
        .replace_status(&claim.name_any(), &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(())
}

/// kcm's `updateClaimStatusWithEvent`: a claim that lost its volume is `Lost`, told once.
async fn claim_lost(
    ctx: &Ctx,
    claim: &PersistentVolumeClaim,
    reason: &str,
    message: &str,
) -> Result<()> {
    if pending_phase(claim) == "Lost" {
        return Ok(());
    }
    update_claim_status(ctx, claim, "Lost", None).await?;
    ctx.events.warning(claim, reason, message.to_string());
    Ok(())
}

async fn sync_bound_claim(ctx: &Ctx, claim: &PersistentVolumeClaim) -> Result<()> {
    let name = volume_name_of(claim);
    if name.is_empty() {
        return claim_lost(
            ctx,
            claim,
            "ClaimLost",
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
        )
        .await;
    }
    let Some(volume) = ctx.volumes.get(&ObjectKey::cluster(name)) else {
        return claim_lost(
            ctx,
            claim,
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
        )
        .await;
    };
    match claim_ref(&volume) {
        None => bind(ctx, &volume, claim).await,
        Some(r) if r.uid == claim.metadata.uid => bind(ctx, &volume, claim).await,
        Some(_) => {
            claim_lost(
                ctx,
                claim,
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            )
            .await
        }
    }
}

// ---------------------------------------------------------------- volumes

async fn reconcile_volume(volume: Arc<PersistentVolume>, ctx: Arc<Ctx>) -> Result<Action> {
    if volume.metadata.deletion_timestamp.is_some() {
        release_finalizer(&ctx, &volume).await?;
        return Ok(Action::await_change());
    }
    sync_volume(&ctx, &volume).await?;
    Ok(Action::await_change())
}

/// The volume of our provisioner has nothing to clean up outside the cluster: once it is
/// being deleted, the finalizer goes.
async fn release_finalizer(ctx: &Ctx, volume: &PersistentVolume) -> Result<()> {
    let finalizers = volume.finalizers();
    if !finalizers.iter().any(|f| f == PV_CONTROLLER_FINALIZER)
        || annotation(volume, ANN_PROVISIONED_BY) != Some(HOSTPATH_PROVISIONER)
    {
        return Ok(());
    }
    let mut updated = volume.clone();
    updated.metadata.finalizers = Some(
        finalizers
            .iter()
            .filter(|f| *f != PV_CONTROLLER_FINALIZER)
            .cloned()
            .collect(),
    );
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api
        .replace(&volume.name_any(), &PostParams::default(), &updated)
        .await
    {
        Ok(written) => {
            konverge_runtime::reconcile::wrote(&written);
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// kcm's `syncVolume`.
async fn sync_volume(ctx: &Ctx, volume: &PersistentVolume) -> Result<()> {
    let Some(r) = claim_ref(volume) else {
        update_volume_phase(ctx, volume, "Available", None).await?;
        return Ok(());
    };
    if r.uid.as_deref().unwrap_or("").is_empty() {
        // Pre-bound to a claim that is not bound yet: the claim's sync binds it.
        update_volume_phase(ctx, volume, "Available", None).await?;
        return Ok(());
    }
    let namespace = r.namespace.clone().unwrap_or_default();
    let name = r.name.clone().unwrap_or_default();
    let mut claim = ctx.claims.get(&ObjectKey::namespaced(&namespace, &name));
    if claim.is_none() {
        // Never release on a cache that may lag: the API server has the last word.
        let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
        claim = api.get_opt(&name).await?.map(Arc::new);
    }
    let claim = claim.filter(|c| c.metadata.uid == r.uid);
    let Some(claim) = claim else {
        let volume = if matches!(phase_of(volume), "Released" | "Failed") {
            volume.clone()
        } else {
            update_volume_phase(ctx, volume, "Released", None).await?
        };
        return reclaim(ctx, &volume).await;
    };
    let bound_name = volume_name_of(&claim);
    if bound_name.is_empty() {
        // The claim's sync finishes the binding.
        return Ok(());
    }
    if bound_name == volume.name_any() {
        update_volume_phase(ctx, volume, "Bound", None).await?;
        return Ok(());
    }
    // The claim is bound to another volume.
    let policy = volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
    if annotation(volume, ANN_PROVISIONED_BY).is_some() && policy == Some("Delete") {
        let volume = if matches!(phase_of(volume), "Released" | "Failed") {
            volume.clone()
        } else {
            update_volume_phase(ctx, volume, "Released", None).await?
        };
        return reclaim(ctx, &volume).await;
    }
    unbind_volume(ctx, volume).await
}

/// kcm's `unbindVolume`: a volume the controller bound loses its claimRef; one the user
/// pre-bound keeps it without the uid.
async fn unbind_volume(ctx: &Ctx, volume: &PersistentVolume) -> Result<()> {
    let mut updated = volume.clone();
    let by_controller = annotation(volume, ANN_BOUND_BY_CONTROLLER).is_some();
    if by_controller {
        updated.spec.get_or_insert_with(Default::default).claim_ref = None;
        if let Some(a) = updated.metadata.annotations.as_mut() {
            a.remove(ANN_BOUND_BY_CONTROLLER);
        }
    } else if let Some(r) = updated.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
        r.uid = None;
    }
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let written = api
        .replace(&volume.name_any(), &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    update_volume_phase(ctx, &written, "Available", None).await?;
    Ok(())
}

/// kcm's `reclaimVolume`.
async fn reclaim(ctx: &Ctx, volume: &PersistentVolume) -> Result<()> {
    let policy = volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.clone())
        .unwrap_or_default();
    match policy.as_str() {
        "Retain" => Ok(()),
        "Recycle" => {
            fail_volume(
                ctx,
                volume,
                "VolumeFailedRecycle",
                "No recycler plugin found for the volume!",
            )
            .await
        }
        "Delete" => match annotation(volume, ANN_PROVISIONED_BY) {
            Some(HOSTPATH_PROVISIONER) => {
                let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: volume.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(&volume.name_any(), &params).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
            // An external provisioner deletes its own volumes.
            Some(_) => Ok(()),
            None => {
                let message = format!(
                    "error getting deleter volume plugin for volume {:?}: no deletable volume plugin matched",
                    volume.name_any()
                );
                fail_volume(ctx, volume, "VolumeFailedDelete", &message).await
            }
        },
        _ => Ok(()),
    }
}

/// kcm's `updateVolumePhaseWithEvent` to `Failed`.
async fn fail_volume(
    ctx: &Ctx,
    volume: &PersistentVolume,
    reason: &str,
    message: &str,
) -> Result<()> {
    if phase_of(volume) == "Failed" {
        return Ok(());
    }
    update_volume_phase(ctx, volume, "Failed", Some(message)).await?;
    ctx.events.warning(volume, reason, message.to_string());
    Ok(())
}

/// kcm's `updateVolumePhase`, with `lastPhaseTransitionTime` moved when the phase changes.
async fn update_volume_phase(
    ctx: &Ctx,
    volume: &PersistentVolume,
    phase: &str,
    message: Option<&str>,
) -> Result<PersistentVolume> {
    if phase_of(volume) == phase {
        return Ok(volume.clone());
    }
    let mut updated = volume.clone();
    updated.status = Some(PersistentVolumeStatus {
        phase: Some(phase.into()),
        message: message.map(str::to_string),
        reason: None,
        last_phase_transition_time: Some(ctx.clock.now_time()),
    });
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let written = api
        .replace_status(&volume.name_any(), &PostParams::default(), &updated)
        .await?;
    konverge_runtime::reconcile::wrote(&written);
    Ok(written)
}
