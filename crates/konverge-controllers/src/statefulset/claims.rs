//! Which ownerReferences a pod's claims carry under the set's
//! `persistentVolumeClaimRetentionPolicy` (kcm's `isClaimOwnerUpToDate` and
//! `updateClaimOwnerRefForSetAndPod`, GA since 1.32):
//!
//! | whenScaled | whenDeleted | claim of a pod in range | claim of a scaled-down pod |
//! |---|---|---|---|
//! | Retain | Retain | none | none |
//! | Retain | Delete | the set | the set |
//! | Delete | Retain | none | the pod |
//! | Delete | Delete | the set | the pod |
//!
//! The references are controller references, so the garbage collector deletes the claim with
//! its owner. A claim whose reference names the set or pod with another uid (left by an
//! earlier object of the same name) is not touched; nor, beyond removing the set's and
//! pod's own references, is one controlled by something else.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use konverge_runtime::{ObjectKey, Store};

use super::spec::{Policy, Retention};

/// An owner as a claim's references name it.
#[derive(Clone, Debug)]
pub(crate) struct Owner {
    /// `apps/v1` or `v1`.
    pub(crate) api_version: &'static str,
    /// `StatefulSet` or `Pod`.
    pub(crate) kind: &'static str,
    /// Its name.
    pub(crate) name: String,
    /// Its uid (`""` for a pod not created yet).
    pub(crate) uid: String,
}

impl Owner {
    /// The pod `pod` as an owner.
    pub(crate) fn pod(pod: &Pod) -> Owner {
        Owner {
            api_version: "v1",
            kind: "Pod",
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }

    /// A reference of this owner's kind and name (kcm's `matchesRef`).
    fn named_by(&self, reference: &OwnerReference) -> bool {
        reference.api_version == self.api_version
            && reference.kind == self.kind
            && reference.name == self.name
    }

    /// The controller reference to this owner.
    fn controller_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.into(),
            kind: self.kind.into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

/// A claim and the two owners the policy decides about.
#[derive(Debug)]
pub(crate) struct Ownership<'a> {
    /// The set's retention policy.
    pub(crate) policy: Policy,
    /// The set.
    pub(crate) set: &'a Owner,
    /// The pod of the claim.
    pub(crate) pod: &'a Owner,
    /// The pod's ordinal is outside the set's range (scaled down).
    pub(crate) scaled_down: bool,
}

fn refs(claim: &PersistentVolumeClaim) -> &[OwnerReference] {
    claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
}

fn has_ref(claim: &PersistentVolumeClaim, owner: &Owner) -> bool {
    refs(claim).iter().any(|r| r.uid == owner.uid)
}

/// The first reference naming `owner` has another uid (kcm's `hasStaleOwnerRef`).
pub(crate) fn has_stale_ref(claim: &PersistentVolumeClaim, owner: &Owner) -> bool {
    refs(claim)
        .iter()
        .find(|r| owner.named_by(r))
        .is_some_and(|r| r.uid != owner.uid)
}

impl Ownership<'_> {
    /// Another controller manages the claim, or a reference to the set or pod is stale
    /// (kcm's `hasUnexpectedController`); never under Retain/Retain.
    pub(crate) fn has_unexpected_controller(&self, claim: &PersistentVolumeClaim) -> bool {
        if self.policy.retains_all() {
            return false;
        }
        refs(claim).iter().any(|r| {
            for owner in [self.set, self.pod] {
                if owner.named_by(r) {
                    return r.uid != owner.uid;
                }
            }
            r.controller == Some(true)
        })
    }

    /// The set or pod is an owner but not the controller (kcm's `hasNonControllerOwner`).
    fn has_non_controller_owner(&self, claim: &PersistentVolumeClaim) -> bool {
        refs(claim)
            .iter()
            .any(|r| (r.uid == self.set.uid || r.uid == self.pod.uid) && r.controller != Some(true))
    }

    /// The owners the policy wants on the claim: (the set, the pod).
    fn wanted(&self) -> (bool, bool) {
        match (self.policy.when_scaled, self.policy.when_deleted) {
            (Retention::Retain, Retention::Retain) => (false, false),
            (Retention::Retain, Retention::Delete) => (true, false),
            (Retention::Delete, Retention::Retain) => (false, self.scaled_down),
            (Retention::Delete, Retention::Delete) => (!self.scaled_down, self.scaled_down),
        }
    }

    /// Whether the claim's references are as the policy wants (kcm's
    /// `isClaimOwnerUpToDate`).
    pub(crate) fn is_up_to_date(&self, claim: &PersistentVolumeClaim) -> bool {
        if has_stale_ref(claim, self.set) || has_stale_ref(claim, self.pod) {
            return true;
        }
        if self.has_unexpected_controller(claim) {
            return !(has_ref(claim, self.set) || has_ref(claim, self.pod));
        }
        if self.has_non_controller_owner(claim) {
            return false;
        }
        let (set, pod) = self.wanted();
        has_ref(claim, self.set) == set && has_ref(claim, self.pod) == pod
    }

    /// The claim's references made as the policy wants (kcm's
    /// `updateClaimOwnerRefForSetAndPod`): the set's and pod's removed, then added back as
    /// controller references where wanted — unless another controller manages the claim.
    pub(crate) fn updated_refs(&self, claim: &PersistentVolumeClaim) -> Vec<OwnerReference> {
        let unexpected = self.has_unexpected_controller(claim);
        let mut refs: Vec<OwnerReference> = refs(claim)
            .iter()
            .filter(|r| !self.set.named_by(r) && !self.pod.named_by(r))
            .cloned()
            .collect();
        if unexpected {
            return refs;
        }
        let (set, pod) = self.wanted();
        for (owner, want) in [(self.set, set), (self.pod, pod)] {
            if want && !refs.iter().any(|r| r.uid == owner.uid) {
                refs.push(owner.controller_ref());
            }
        }
        refs
    }
}

/// The claims the controller reads: its shared cache, overlaid with the claims this sync
/// wrote (the cache may not show them yet, and kcm watches no claims to be told).
#[derive(Debug)]
pub(crate) struct ClaimView {
    cache: Store<PersistentVolumeClaim>,
    written: Mutex<BTreeMap<String, Arc<PersistentVolumeClaim>>>,
}

impl ClaimView {
    /// The cache, nothing written yet.
    pub(crate) fn new(cache: Store<PersistentVolumeClaim>) -> ClaimView {
        ClaimView {
            cache,
            written: Mutex::new(BTreeMap::new()),
        }
    }

    /// The claim `namespace/name`, as last written by this sync or else as cached.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let written = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned();
        written.or_else(|| self.cache.get(&ObjectKey::namespaced(namespace, name)))
    }

    /// Records a claim this sync wrote, as the server answered.
    pub(crate) fn wrote(&self, claim: PersistentVolumeClaim) {
        let name = claim.metadata.name.clone().unwrap_or_default();
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, Arc::new(claim));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(kind: &'static str, name: &str, uid: &str) -> Owner {
        Owner {
            api_version: if kind == "Pod" { "v1" } else { "apps/v1" },
            kind,
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn claim(refs: Vec<OwnerReference>) -> PersistentVolumeClaim {
        let mut claim = PersistentVolumeClaim::default();
        claim.metadata.owner_references = Some(refs);
        claim
    }

    #[test]
    fn each_policy_wants_its_owners() {
        let (set, pod) = (
            owner("StatefulSet", "web", "s1"),
            owner("Pod", "web-0", "p1"),
        );
        let cases = [
            (Retention::Retain, Retention::Retain, false, vec![]),
            (Retention::Retain, Retention::Delete, false, vec!["s1"]),
            (Retention::Delete, Retention::Retain, false, vec![]),
            (Retention::Delete, Retention::Retain, true, vec!["p1"]),
            (Retention::Delete, Retention::Delete, false, vec!["s1"]),
            (Retention::Delete, Retention::Delete, true, vec!["p1"]),
        ];
        for (when_scaled, when_deleted, scaled_down, want) in cases {
            let ownership = Ownership {
                policy: Policy {
                    when_deleted,
                    when_scaled,
                },
                set: &set,
                pod: &pod,
                scaled_down,
            };
            let bare = claim(vec![]);
            assert_eq!(ownership.is_up_to_date(&bare), want.is_empty());
            let refs = ownership.updated_refs(&bare);
            let uids: Vec<&str> = refs.iter().map(|r| r.uid.as_str()).collect();
            assert_eq!(uids, want, "{when_scaled:?}/{when_deleted:?} {scaled_down}");
            assert!(refs.iter().all(|r| r.controller == Some(true)));
            assert!(ownership.is_up_to_date(&claim(refs)));
        }
    }

    #[test]
    fn stale_references_are_left_alone() {
        let (set, pod) = (
            owner("StatefulSet", "web", "s2"),
            owner("Pod", "web-0", "p1"),
        );
        let ownership = Ownership {
            policy: Policy {
                when_deleted: Retention::Delete,
                when_scaled: Retention::Delete,
            },
            set: &set,
            pod: &pod,
            scaled_down: false,
        };
        let stale = claim(vec![owner("StatefulSet", "web", "s1").controller_ref()]);
        assert!(ownership.is_up_to_date(&stale));
        assert!(has_stale_ref(&stale, &set));
    }
}
