//! A stateful pod's identity (kcm's `stateful_set_utils.go`): its name and ordinal, its
//! labels, hostname and subdomain, the claims of its volumes, and the pod states the
//! controller waits on.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};

use super::spec::Spec;
use crate::{controller_ref, pods};

/// kcm's label with the pod's own name (`apps.StatefulSetPodNameLabel`).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// kcm's label with the pod's ordinal (`apps.PodIndexLabel`, on by default since 1.28).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// kcm's label with the name of the pod's ControllerRevision (`apps.StatefulSetRevisionLabel`).
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The set name and ordinal in a pod's name `<set>-<ordinal>` (kcm's
/// `getParentNameAndOrdinal`): the ordinal is `-1` when the name does not end in `-` and
/// digits, or when they overflow an `int32`.
pub(crate) fn parent_and_ordinal(name: &str) -> (&str, i32) {
    match name.rsplit_once('-') {
        Some((parent, digits))
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (parent, digits.parse::<i32>().unwrap_or(-1))
        }
        _ => ("", -1),
    }
}

/// The pod's ordinal, `-1` when it has none.
pub(crate) fn ordinal(pod: &Pod) -> i32 {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or_default()).1
}

/// The name of the set's pod of `ordinal` (kcm's `getPodName`).
pub(crate) fn pod_name(set: &str, ordinal: i32) -> String {
    format!("{set}-{ordinal}")
}

/// The name of the claim from `template` for the pod of `ordinal` (kcm's
/// `getPersistentVolumeClaimName`): `<claim>-<set>-<ordinal>`.
pub(crate) fn claim_name(template: &PersistentVolumeClaim, set: &str, ordinal: i32) -> String {
    let claim = template.metadata.name.as_deref().unwrap_or_default();
    format!("{claim}-{set}-{ordinal}")
}

/// Whether the pod's name makes it one of the set's (kcm's `isMemberOf`).
pub(crate) fn is_member_of(spec: &Spec, pod: &Pod) -> bool {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or_default()).0 == spec.name
}

/// The pod's `controller-revision-hash` label (`""` without one).
pub(crate) fn revision(pod: &Pod) -> &str {
    pods::labels(pod)
        .get(REVISION_LABEL)
        .map_or("", String::as_str)
}

/// Whether the pod has its identity in the set: its name, namespace and name label (kcm's
/// `identityMatches`).
pub(crate) fn identity_matches(spec: &Spec, pod: &Pod) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let (parent, ordinal) = parent_and_ordinal(name);
    ordinal >= 0
        && parent == spec.name
        && name == pod_name(&spec.name, ordinal)
        && pod.metadata.namespace.as_deref().unwrap_or_default() == spec.namespace
        && pods::labels(pod).get(POD_NAME_LABEL).map(String::as_str) == Some(name)
}

/// Gives the pod its identity: name, namespace, and the name and index labels (kcm's
/// `updateIdentity`).
pub(crate) fn update_identity(spec: &Spec, pod: &mut Pod) {
    let ordinal = ordinal(pod);
    let name = pod_name(&spec.name, ordinal);
    pod.metadata.namespace = Some(spec.namespace.clone());
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    pod.metadata.name = Some(name);
}

/// Whether the pod mounts the claim of each of the set's claim templates (kcm's
/// `storageMatches`).
pub(crate) fn storage_matches(spec: &Spec, pod: &Pod) -> bool {
    let ordinal = ordinal(pod);
    if ordinal < 0 {
        return false;
    }
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    spec.claim_templates.iter().all(|template| {
        let name = template.metadata.name.as_deref().unwrap_or_default();
        volumes
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .is_some_and(|pvc| pvc.claim_name == claim_name(template, &spec.name, ordinal))
    })
}

/// The claims of the pod of `ordinal`, one per claim template, with the template's name
/// (kcm's `getPersistentVolumeClaims`): the template named for the pod, in the set's
/// namespace, labelled with the set's `matchLabels` on top of its own.
pub(crate) fn claims_for(spec: &Spec, ordinal: i32) -> Vec<(String, PersistentVolumeClaim)> {
    spec.claim_templates
        .iter()
        .map(|template| {
            let mut claim = template.clone();
            claim.metadata.name = Some(claim_name(template, &spec.name, ordinal));
            claim.metadata.namespace = Some(spec.namespace.clone());
            claim.metadata.labels = match (claim.metadata.labels.take(), &spec.match_labels) {
                (Some(mut own), Some(selector)) => {
                    own.extend(selector.clone());
                    Some(own)
                }
                (own, selector) => own.or_else(|| selector.clone()),
            };
            claim.status = None;
            let template_name = template.metadata.name.clone().unwrap_or_default();
            (template_name, claim)
        })
        .collect()
}

/// Mounts the set's claims in the pod, replacing volumes of the same names (kcm's
/// `updateStorage`; here the claims come first in template order, where kcm's order is
/// that of a Go map).
pub(crate) fn update_storage(spec: &Spec, pod: &mut Pod) {
    let claims = claims_for(spec, ordinal(pod));
    let pod_spec = pod.spec.get_or_insert_with(Default::default);
    let current = pod_spec.volumes.take().unwrap_or_default();
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(name, claim)| Volume {
            name: name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.metadata.name.clone().unwrap_or_default(),
                read_only: None,
            }),
            ..Volume::default()
        })
        .collect();
    volumes.extend(
        current
            .into_iter()
            .filter(|v| !claims.iter().any(|(name, _)| *name == v.name)),
    );
    pod_spec.volumes = Some(volumes);
}

/// A new pod of `ordinal` from `template` at `revision` (kcm's `newStatefulSetPod` and
/// `setPodRevision`): controlled by the set, named and labelled for its ordinal, with its
/// hostname and subdomain (set only at creation: they are immutable) and its claims.
pub(crate) fn new_pod(
    set: &StatefulSet,
    spec: &Spec,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: i32,
) -> Pod {
    let owner = controller_ref::new_controller_ref(set);
    let mut pod = pods::from_template(template, &set.metadata, Some(owner));
    pod.metadata.name = Some(pod_name(&spec.name, ordinal));
    update_identity(spec, &mut pod);
    let pod_spec = pod.spec.get_or_insert_with(Default::default);
    pod_spec.hostname = pod.metadata.name.clone();
    pod_spec.subdomain = Some(spec.service_name.clone()).filter(|s| !s.is_empty());
    update_storage(spec, &mut pod);
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(REVISION_LABEL.into(), revision.to_string());
    pod
}

/// The API server has the pod: it has a phase (kcm's `isCreated`).
pub(crate) fn is_created(pod: &Pod) -> bool {
    !pods::phase(pod).is_empty()
}

/// Phase `Pending`.
pub(crate) fn is_pending(pod: &Pod) -> bool {
    pods::phase(pod) == "Pending"
}

/// Phase `Failed` or `Succeeded`: the pod will not run again and is replaced.
pub(crate) fn is_finished(pod: &Pod) -> bool {
    matches!(pods::phase(pod), "Failed" | "Succeeded")
}

/// Phase `Running` and Ready (kcm's `isRunningAndReady`).
pub(crate) fn is_running_and_ready(pod: &Pod) -> bool {
    pods::phase(pod) == "Running" && pods::is_ready(pod)
}

/// Ready for `minReadySeconds` at `now` (kcm's `isRunningAndAvailable`).
pub(crate) fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    pods::is_available(pod, min_ready_seconds, now)
}

/// Running, ready and not being deleted (kcm's `isHealthy`).
pub(crate) fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !pods::is_terminating(pod)
}

/// Not healthy, or not available yet (kcm's `isUnavailable`).
pub(crate) fn is_unavailable(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    !is_healthy(pod) || !is_available(pod, min_ready_seconds, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_the_last_dash_and_digits() {
        assert_eq!(parent_and_ordinal("web-0"), ("web", 0));
        assert_eq!(parent_and_ordinal("my-web-12"), ("my-web", 12));
        assert_eq!(parent_and_ordinal("web"), ("", -1));
        assert_eq!(parent_and_ordinal("web-"), ("", -1));
        assert_eq!(parent_and_ordinal("web-1a"), ("", -1));
        assert_eq!(parent_and_ordinal("web-99999999999"), ("web", -1));
    }
}
