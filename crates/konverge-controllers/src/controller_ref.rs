//! Controller references: who controls an object, and claiming children by selector (kcm's
//! `ControllerRefManager`).
//!
//! A controller claims the children its selector matches: those it already controls and
//! still matches are kept; those it controls but no longer matches are released (its
//! ownerReference removed); orphans that match are adopted (its ownerReference added) —
//! unless the controller itself is being deleted, which a fresh read confirms once before
//! the first adoption. Children controlled by another owner are left alone. The patches are
//! kcm's strategic merge patches, guarded by the child's `uid` so they never touch a
//! namesake.

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use konverge_apimachinery::selector::LabelSelector;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::{Error, Result};

/// The controller ownerReference of `meta`, if it has one (kcm's `GetControllerOf`).
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// The controller ownerReference a controller puts on its children: `controller` and
/// `blockOwnerDeletion` true, as kcm's `NewControllerRef`.
pub fn new_controller_ref<P: Resource<DynamicType = ()>>(owner: &P) -> OwnerReference {
    OwnerReference {
        api_version: P::api_version(&()).into_owned(),
        kind: P::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The selector of a `metav1.LabelSelector` (`None` selects nothing, as kcm's
/// `LabelSelectorAsSelector`); an invalid one is an [`Error::Invalid`].
pub fn selector(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Result<LabelSelector> {
    let value = serde_json::to_value(selector).unwrap_or_default();
    LabelSelector::from_json(&value).map_err(|e| Error::invalid(format!("invalid selector: {e}")))
}

/// Claims `candidates` for the controller `owner` (see the module docs) and returns the
/// children it now controls, in the order given. `matches` is the selector test (kcm also
/// filters pods there); `owner_deleting` is whether the cached owner has a deletion
/// timestamp; `recheck` reads the owner fresh from the API server and fails if it is gone,
/// replaced or being deleted — called at most once, before the first adoption.
pub async fn claim<C, M, R, Fut>(
    api_for: impl Fn(&str) -> Api<C>,
    owner: &OwnerReference,
    owner_deleting: bool,
    candidates: impl IntoIterator<Item = Arc<C>>,
    matches: M,
    recheck: R,
) -> Result<Vec<Arc<C>>>
where
    C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    M: Fn(&C) -> bool,
    R: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut claimed = Vec::new();
    let mut recheck = Some(recheck);
    // Most children are claimed already: an Api (a URL) is made only to write one.
    let api = |child: &C| api_for(child.meta().namespace.as_deref().unwrap_or_default());
    for child in candidates {
        match controller_of(child.meta()) {
            Some(controller) if controller.uid != owner.uid => {}
            Some(_) if matches(&child) => claimed.push(child),
            Some(_) => {
                if !owner_deleting {
                    release(&api(&child), &child, &owner.uid).await?;
                }
            }
            None => {
                if owner_deleting || !matches(&child) || child.meta().deletion_timestamp.is_some() {
                    continue;
                }
                if let Some(recheck) = recheck.take() {
                    recheck().await?;
                }
                if adopt(&api(&child), &child, owner).await? {
                    claimed.push(child);
                }
            }
        }
    }
    Ok(claimed)
}

/// Adds `owner` as `child`'s controller. `false`: the child is gone.
async fn adopt<C>(api: &Api<C>, child: &C, owner: &OwnerReference) -> Result<bool>
where
    C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let patch = json!({
        "metadata": {
            "ownerReferences": [owner],
            "uid": child.uid(),
        }
    });
    match api
        .patch(
            &child.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Removes the ownerReference to `owner_uid` from `child`. A child that is gone, or that
/// changed identity (the `uid` guard fails as Invalid), needs no release.
async fn release<C>(api: &Api<C>, child: &C, owner_uid: &str) -> Result<()>
where
    C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let patch = json!({
        "metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
            "uid": child.uid(),
        }
    });
    match api
        .patch(
            &child.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 422 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The recheck kcm does before adopting: the owner read fresh from the API server must be
/// the same object (same uid) and not being deleted.
pub async fn recheck_owner<P>(api: &Api<P>, owner: &OwnerReference) -> Result<()>
where
    P: Resource + Clone + DeserializeOwned + Debug,
{
    let fresh = api.get(&owner.name).await?;
    if fresh.uid().as_deref() != Some(owner.uid.as_str()) {
        return Err(Error::invalid(format!(
            "original {} {} is gone: got uid {}, wanted {}",
            owner.kind,
            owner.name,
            fresh.uid().unwrap_or_default(),
            owner.uid
        )));
    }
    if let Some(at) = &fresh.meta().deletion_timestamp {
        return Err(Error::invalid(format!(
            "{}/{} has just been deleted at {}",
            fresh.namespace().unwrap_or_default(),
            owner.name,
            at.0
        )));
    }
    Ok(())
}
