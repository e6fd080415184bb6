//! The Rust types behind the kinds whose schemas we publish: every listable resource of
//! `k8s-openapi` (Kubernetes 1.33), with its group, version and kind.
//!
//! The schemas themselves come from the types' `schemars::JsonSchema` implementations, which
//! `k8s-openapi` generates from Kubernetes' own OpenAPI definitions (names included:
//! `io.k8s.api.apps.v1.Deployment`). This table only tells which type serves which
//! group/version/kind, so that a catalog entry finds its schema.

use k8s_openapi::schemars::{JsonSchema, Schema, SchemaGenerator};

/// A kind whose schema comes from a `k8s-openapi` type.
pub(crate) struct KnownKind {
    /// API group, empty for the core group.
    pub(crate) group: &'static str,
    /// API version.
    pub(crate) version: &'static str,
    /// The kind.
    pub(crate) kind: &'static str,
    /// Adds the type's schema (and everything it references) to the generator and returns
    /// the reference to it.
    pub(crate) schema: fn(&mut SchemaGenerator) -> Schema,
}

fn subschema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

macro_rules! known_kinds {
    ($($($segment:ident)::+),* $(,)?) => {
        &[$(KnownKind {
            group: <k8s_openapi::$($segment)::+ as k8s_openapi::Resource>::GROUP,
            version: <k8s_openapi::$($segment)::+ as k8s_openapi::Resource>::VERSION,
            kind: <k8s_openapi::$($segment)::+ as k8s_openapi::Resource>::KIND,
            schema: subschema::<k8s_openapi::$($segment)::+>,
        }),*]
    };
}

/// Every listable resource type of `k8s-openapi`.
static KNOWN_KINDS: &[KnownKind] = known_kinds![
    api::admissionregistration::v1::MutatingWebhookConfiguration,
    api::admissionregistration::v1::ValidatingAdmissionPolicy,
    api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    api::admissionregistration::v1::ValidatingWebhookConfiguration,
    api::admissionregistration::v1alpha1::MutatingAdmissionPolicy,
    api::admissionregistration::v1alpha1::MutatingAdmissionPolicyBinding,
    api::admissionregistration::v1beta1::ValidatingAdmissionPolicy,
    api::admissionregistration::v1beta1::ValidatingAdmissionPolicyBinding,
    api::apiserverinternal::v1alpha1::StorageVersion,
    api::apps::v1::ControllerRevision,
    api::apps::v1::DaemonSet,
    api::apps::v1::Deployment,
    api::apps::v1::ReplicaSet,
    api::apps::v1::StatefulSet,
    api::autoscaling::v1::HorizontalPodAutoscaler,
    api::autoscaling::v2::HorizontalPodAutoscaler,
    api::batch::v1::CronJob,
    api::batch::v1::Job,
    api::certificates::v1::CertificateSigningRequest,
    api::certificates::v1alpha1::ClusterTrustBundle,
    api::certificates::v1beta1::ClusterTrustBundle,
    api::coordination::v1::Lease,
    api::coordination::v1alpha2::LeaseCandidate,
    api::coordination::v1beta1::LeaseCandidate,
    api::core::v1::ComponentStatus,
    api::core::v1::ConfigMap,
    api::core::v1::Endpoints,
    api::core::v1::Event,
    api::core::v1::LimitRange,
    api::core::v1::Namespace,
    api::core::v1::Node,
    api::core::v1::PersistentVolume,
    api::core::v1::PersistentVolumeClaim,
    api::core::v1::Pod,
    api::core::v1::PodTemplate,
    api::core::v1::ReplicationController,
    api::core::v1::ResourceQuota,
    api::core::v1::Secret,
    api::core::v1::Service,
    api::core::v1::ServiceAccount,
    api::discovery::v1::EndpointSlice,
    api::events::v1::Event,
    api::flowcontrol::v1::FlowSchema,
    api::flowcontrol::v1::PriorityLevelConfiguration,
    api::networking::v1::Ingress,
    api::networking::v1::IngressClass,
    api::networking::v1::IPAddress,
    api::networking::v1::NetworkPolicy,
    api::networking::v1::ServiceCIDR,
    api::networking::v1beta1::IPAddress,
    api::networking::v1beta1::ServiceCIDR,
    api::node::v1::RuntimeClass,
    api::policy::v1::PodDisruptionBudget,
    api::rbac::v1::ClusterRole,
    api::rbac::v1::ClusterRoleBinding,
    api::rbac::v1::Role,
    api::rbac::v1::RoleBinding,
    api::resource::v1alpha3::DeviceClass,
    api::resource::v1alpha3::DeviceTaintRule,
    api::resource::v1alpha3::ResourceClaim,
    api::resource::v1alpha3::ResourceClaimTemplate,
    api::resource::v1alpha3::ResourceSlice,
    api::resource::v1beta1::DeviceClass,
    api::resource::v1beta1::ResourceClaim,
    api::resource::v1beta1::ResourceClaimTemplate,
    api::resource::v1beta1::ResourceSlice,
    api::resource::v1beta2::DeviceClass,
    api::resource::v1beta2::ResourceClaim,
    api::resource::v1beta2::ResourceClaimTemplate,
    api::resource::v1beta2::ResourceSlice,
    api::scheduling::v1::PriorityClass,
    api::storage::v1::CSIDriver,
    api::storage::v1::CSINode,
    api::storage::v1::CSIStorageCapacity,
    api::storage::v1::StorageClass,
    api::storage::v1::VolumeAttachment,
    api::storage::v1alpha1::VolumeAttributesClass,
    api::storage::v1beta1::VolumeAttributesClass,
    api::storagemigration::v1alpha1::StorageVersionMigration,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    kube_aggregator::pkg::apis::apiregistration::v1::APIService,
];

/// The `k8s-openapi` type serving `kind` in `group`/`version`, if there is one.
pub(crate) fn lookup(group: &str, version: &str, kind: &str) -> Option<&'static KnownKind> {
    KNOWN_KINDS
        .iter()
        .find(|k| k.group == group && k.version == version && k.kind == kind)
}
