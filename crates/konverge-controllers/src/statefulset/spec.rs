//! A StatefulSet's spec as the controller reads it, with the API server's defaults filled in
//! where a field is absent (an object made by another API server may lack them).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};

use crate::error::{Error, Result};

/// What one of `persistentVolumeClaimRetentionPolicy`'s fields says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retention {
    /// `Retain`: the claim outlives the pod or the set.
    Retain,
    /// `Delete`: the claim is owned, so the garbage collector deletes it with its owner.
    Delete,
}

impl Retention {
    /// `Delete`, or `Retain` for anything else (kcm treats a value it does not know as
    /// `Retain`; validation admits only the two).
    fn parse(value: Option<&str>) -> Retention {
        match value {
            Some("Delete") => Retention::Delete,
            _ => Retention::Retain,
        }
    }
}

/// `persistentVolumeClaimRetentionPolicy` (both `Retain` when unset, as kcm's
/// `getPersistentVolumeClaimRetentionPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Policy {
    /// `whenDeleted`: the claims of a deleted set.
    pub(crate) when_deleted: Retention,
    /// `whenScaled`: the claims of a pod removed by scaling down.
    pub(crate) when_scaled: Retention,
}

impl Policy {
    /// Both `Retain`: the controller leaves every claim's ownerReferences alone.
    pub(crate) fn retains_all(&self) -> bool {
        self.when_deleted == Retention::Retain && self.when_scaled == Retention::Retain
    }
}

/// `spec.updateStrategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// `RollingUpdate`, with `rollingUpdate.partition` when `rollingUpdate` is set.
    /// (`maxUnavailable` is ignored: the MaxUnavailableStatefulSet gate is off in 1.33.)
    RollingUpdate {
        /// `rollingUpdate.partition`; `None` when `rollingUpdate` itself is unset.
        partition: Option<i32>,
    },
    /// `OnDelete`: pods are replaced only once deleted by someone else.
    OnDelete,
}

/// The spec fields the controller acts on.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    /// `metadata.name`.
    pub(crate) name: String,
    /// `metadata.namespace`.
    pub(crate) namespace: String,
    /// `spec.replicas` (1 when unset).
    pub(crate) replicas: i32,
    /// `spec.ordinals.start` (0 when unset).
    pub(crate) start: i32,
    /// `spec.minReadySeconds`.
    pub(crate) min_ready_seconds: i32,
    /// `podManagementPolicy: Parallel` (kcm's `allowsBurst`).
    pub(crate) burst: bool,
    /// `spec.updateStrategy`.
    pub(crate) strategy: Strategy,
    /// `spec.persistentVolumeClaimRetentionPolicy`.
    pub(crate) policy: Policy,
    /// `spec.serviceName`: every pod's subdomain.
    pub(crate) service_name: String,
    /// `spec.volumeClaimTemplates`.
    pub(crate) claim_templates: Vec<PersistentVolumeClaim>,
    /// `spec.revisionHistoryLimit` (10 when unset).
    pub(crate) history_limit: i32,
    /// `spec.selector.matchLabels`: the labels of every claim.
    pub(crate) match_labels: Option<BTreeMap<String, String>>,
    /// `spec.template`.
    pub(crate) template: PodTemplateSpec,
}

impl Spec {
    /// Reads `set`'s spec; a set without one is refused.
    pub(crate) fn of(set: &StatefulSet) -> Result<Spec> {
        let spec: &StatefulSetSpec = set
            .spec
            .as_ref()
            .ok_or_else(|| Error::invalid("StatefulSet has no spec"))?;
        let strategy = spec.update_strategy.as_ref();
        let strategy = match strategy.and_then(|s| s.type_.as_deref()) {
            Some("OnDelete") => Strategy::OnDelete,
            _ => Strategy::RollingUpdate {
                partition: strategy
                    .and_then(|s| s.rolling_update.as_ref())
                    .map(|r| r.partition.unwrap_or(0)),
            },
        };
        let retention = spec.persistent_volume_claim_retention_policy.as_ref();
        Ok(Spec {
            name: set.metadata.name.clone().unwrap_or_default(),
            namespace: set.metadata.namespace.clone().unwrap_or_default(),
            replicas: spec.replicas.unwrap_or(1).max(0),
            start: spec
                .ordinals
                .as_ref()
                .and_then(|o| o.start)
                .unwrap_or(0)
                .max(0),
            min_ready_seconds: spec.min_ready_seconds.unwrap_or(0),
            burst: spec.pod_management_policy.as_deref() == Some("Parallel"),
            strategy,
            policy: Policy {
                when_deleted: Retention::parse(retention.and_then(|r| r.when_deleted.as_deref())),
                when_scaled: Retention::parse(retention.and_then(|r| r.when_scaled.as_deref())),
            },
            service_name: spec.service_name.clone().unwrap_or_default(),
            claim_templates: spec.volume_claim_templates.clone().unwrap_or_default(),
            history_limit: spec.revision_history_limit.unwrap_or(10),
            match_labels: spec.selector.match_labels.clone(),
            template: spec.template.clone(),
        })
    }

    /// The last ordinal of the set's range (kcm's `getEndOrdinal`); below `start` when
    /// there are no replicas.
    pub(crate) fn end(&self) -> i32 {
        self.start.saturating_add(self.replicas) - 1
    }

    /// Whether `ordinal` is one the set keeps (kcm's `podInOrdinalRange`).
    pub(crate) fn in_range(&self, ordinal: i32) -> bool {
        ordinal >= self.start && ordinal <= self.end()
    }
}
