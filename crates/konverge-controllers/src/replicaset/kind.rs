//! The two kinds one controller serves: ReplicaSets and ReplicationControllers.
//!
//! kcm runs its ReplicaSet controller over ReplicationControllers by converting each RC to
//! a ReplicaSet on the way in and back on the way out, as if RC were an older version of
//! ReplicaSet. Here [`ReplicaKind`] is that conversion: the controller reads the spec and
//! status of either kind through it, and writes the status back through it.

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{
    PodTemplateSpec, ReplicationController, ReplicationControllerCondition,
    ReplicationControllerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use konverge_apimachinery::selector::LabelSelector;
use konverge_runtime::controller::CachedResource;
use kube::Resource;
use kube::core::NamespaceResourceScope;

use crate::controller_ref;
use crate::error::Result;

/// A ReplicaSet-like kind, as the controller sees it.
pub(crate) trait ReplicaKind:
    CachedResource + Resource<DynamicType = (), Scope = NamespaceResourceScope>
{
    /// kcm's controller name (`replicaset-controller`), for metrics and logs.
    const CONTROLLER: &'static str;
    /// The event source kcm records as (`replicaset-controller`, `replication-controller`).
    const EVENT_SOURCE: &'static str;

    /// `spec.replicas` (1 when unset, as the API server defaults it).
    fn desired(&self) -> i32;
    /// `spec.minReadySeconds`.
    fn min_ready_seconds(&self) -> i32;
    /// The pod selector; an invalid one is an error (the controller leaves the object alone).
    fn selector(&self) -> Result<LabelSelector>;
    /// The pod template, if the object has one.
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// The status fields the controller owns.
    fn replica_status(&self) -> ReplicaStatus;
    /// Replaces the status fields the controller owns.
    fn set_replica_status(&mut self, status: &ReplicaStatus);
}

/// The status both kinds share, absent counts read as 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplicaStatus {
    pub(crate) replicas: i32,
    pub(crate) fully_labeled_replicas: i32,
    pub(crate) ready_replicas: i32,
    pub(crate) available_replicas: i32,
    pub(crate) observed_generation: i64,
    pub(crate) conditions: Vec<Condition>,
}

/// A status condition of either kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Condition {
    pub(crate) type_: String,
    pub(crate) status: String,
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) last_transition_time: Option<Time>,
}

/// Go's `omitempty`: kcm's zero counts are not written.
fn omit_zero<T: Default + PartialEq>(value: T) -> Option<T> {
    (value != T::default()).then_some(value)
}

// The two kinds' statuses and conditions are distinct k8s-openapi types of the same shape;
// these read and write either.

/// The [`ReplicaStatus`] of either kind's `Option<…Status>`.
macro_rules! read_status {
    ($status:expr) => {
        match $status {
            None => ReplicaStatus::default(),
            Some(status) => ReplicaStatus {
                replicas: status.replicas,
                fully_labeled_replicas: status.fully_labeled_replicas.unwrap_or(0),
                ready_replicas: status.ready_replicas.unwrap_or(0),
                available_replicas: status.available_replicas.unwrap_or(0),
                observed_generation: status.observed_generation.unwrap_or(0),
                conditions: status
                    .conditions
                    .iter()
                    .flatten()
                    .map(|c| Condition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        last_transition_time: c.last_transition_time.clone(),
                    })
                    .collect(),
            },
        }
    };
}

/// Either kind's status type (`$status_ty`, conditions `$condition_ty`) holding `$status`,
/// zero counts omitted, with the kind's further `$field: $value`s.
macro_rules! written_status {
    ($status_ty:ident, $condition_ty:ident, $status:expr $(, $field:ident: $value:expr)*) => {{
        let status: &ReplicaStatus = $status;
        let conditions: Vec<$condition_ty> = status
            .conditions
            .iter()
            .map(|c| $condition_ty {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time.clone(),
            })
            .collect();
        $status_ty {
            replicas: status.replicas,
            fully_labeled_replicas: omit_zero(status.fully_labeled_replicas),
            ready_replicas: omit_zero(status.ready_replicas),
            available_replicas: omit_zero(status.available_replicas),
            observed_generation: omit_zero(status.observed_generation),
            conditions: omit_zero(conditions),
            $($field: $value,)*
        }
    }};
}

impl ReplicaKind for ReplicaSet {
    const CONTROLLER: &'static str = "replicaset-controller";
    const EVENT_SOURCE: &'static str = "replicaset-controller";

    fn desired(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn selector(&self) -> Result<LabelSelector> {
        controller_ref::selector(self.spec.as_ref().map(|s| &s.selector))
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }

    fn replica_status(&self) -> ReplicaStatus {
        read_status!(&self.status)
    }

    fn set_replica_status(&mut self, status: &ReplicaStatus) {
        // 1.33 counts terminating replicas only behind the (alpha, off)
        // DeploymentReplicaSetTerminatingReplicas gate, and then writes none.
        self.status = Some(written_status!(
            ReplicaSetStatus,
            ReplicaSetCondition,
            status,
            terminating_replicas: None
        ));
    }
}

impl ReplicaKind for ReplicationController {
    const CONTROLLER: &'static str = "replicationcontroller-controller";
    const EVENT_SOURCE: &'static str = "replication-controller";

    fn desired(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    /// The RC's map selector as the `matchLabels` of a ReplicaSet selector (kcm's
    /// conversion): none selects nothing.
    fn selector(&self) -> Result<LabelSelector> {
        Ok(self
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map_or_else(LabelSelector::nothing, LabelSelector::from_set))
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }

    fn replica_status(&self) -> ReplicaStatus {
        read_status!(&self.status)
    }

    fn set_replica_status(&mut self, status: &ReplicaStatus) {
        self.status = Some(written_status!(
            ReplicationControllerStatus,
            ReplicationControllerCondition,
            status
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_zero_counts_are_omitted() {
        let status = ReplicaStatus {
            replicas: 3,
            fully_labeled_replicas: 3,
            ready_replicas: 0,
            available_replicas: 0,
            observed_generation: 2,
            conditions: Vec::new(),
        };
        let mut rs = ReplicaSet::default();
        rs.set_replica_status(&status);
        assert_eq!(rs.replica_status(), status);
        let written = rs.status.as_ref().expect("a status");
        assert_eq!(written.ready_replicas, None);
        assert_eq!(written.conditions, None);
        let mut rc = ReplicationController::default();
        rc.set_replica_status(&status);
        assert_eq!(rc.replica_status(), status);
    }

    #[test]
    fn selectors_of_both_kinds() {
        let rs: ReplicaSet = serde_json::from_value(serde_json::json!({
            "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Bogus"}]}}
        }))
        .expect("a replicaset");
        assert!(rs.selector().is_err(), "an unknown operator is invalid");
        assert!(
            ReplicaSet::default()
                .selector()
                .expect("none")
                .matches_nothing()
        );
        let rc: ReplicationController = serde_json::from_value(serde_json::json!({
            "spec": {"selector": {"app": "web"}}
        }))
        .expect("an rc");
        let labels = [("app".to_string(), "web".to_string())].into();
        assert!(rc.selector().expect("a selector").matches(&labels));
        assert!(
            ReplicationController::default()
                .selector()
                .expect("none")
                .matches_nothing()
        );
    }
}
