//! The built-in resources of Kubernetes 1.33, each declared once: its group, version, kind,
//! plural and scope come from `k8s-openapi`'s [`Resource`](k8s_openapi::Resource) metadata;
//! the declaration adds what discovery says besides (short names, categories, verbs,
//! subresources) and what is special about the resource (its strategy: defaults, validation,
//! initial state, columns, field selectors).
//!
//! - `columns.rs`: `kubectl get` tables, as kube-apiserver's printers compute them.
//! - `strategy.rs`: defaults, validation and preparation on create.
//! - `convert.rs`: resources served in a version other than the stored one.
//! - `fields.rs`: field selectors.

mod columns;
mod convert;
mod defaults;
mod fields;
mod strategy;
mod validation;

use std::any::TypeId;

use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates,
    coordination, core, discovery, events, flowcontrol, networking, node, policy, rbac, scheduling,
    storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use konverge_apimachinery::go_encoding;
use serde_json::{Value, json};

pub(crate) use convert::{events_to_core, hpa_to_v2};
pub(crate) use validation::refuse_privileged;

use super::{
    ALL_VERBS, Action, Catalog, Column, Conversion, Deletion, FieldLabels, NameRule, Part,
    ResourceType, Review, STATUS_RESETS_ALL, SUBRESOURCE_VERBS, ScalePaths, SelectableField,
    Serving, Storage, Subresource, Verbs, storage_version_hash,
};
use crate::error::Cause;

/// Drops from a decoded body of `rt` (in `rt`'s version) the empty fields Go leaves out
/// (see [`go_encoding`]); custom resources keep theirs.
pub(crate) fn omit_empty(rt: &ResourceType, obj: &mut Value) {
    if rt.custom.is_none() {
        go_encoding::omit_empty(&format!("{}/{}", rt.api_version(), rt.kind), obj);
    }
}

/// Shapes an object of `rt` (in `rt`'s version) as Go writes it (see [`go_encoding`]):
/// what kube-apiserver stores and answers. Custom resources are left as their schema made
/// them.
pub(crate) fn shape_as_go(rt: &ResourceType, obj: &mut Value) {
    if rt.custom.is_none() {
        go_encoding::shape(&format!("{}/{}", rt.api_version(), rt.kind), obj);
    }
}

/// Decodes `value` as `T` (wrong types fail with the field path), re-encodes it, and lists
/// the fields `T` does not have (which the re-encoding dropped).
fn typed<T>(value: Value) -> Result<(Value, Vec<String>), String>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let mut value = value;
    let mut unwrapped = 0;
    let decoded: T = loop {
        match serde_path_to_error::deserialize(&value) {
            Ok(decoded) => break decoded,
            // Go reads base64 (`[]byte` fields: Secret data, CSR requests, CA bundles)
            // ignoring line breaks, as PEM-style wrapped base64 has them.
            Err(e) if unwrapped < MAX_UNWRAPPED && unwrap_base64(&mut value, e.path()) => {
                unwrapped += 1;
            }
            Err(e) => {
                let path = e.path().to_string();
                return Err(if path == "." {
                    e.inner().to_string()
                } else {
                    format!("{path}: {}", e.inner())
                });
            }
        }
    };
    let encoded = serde_json::to_value(&decoded).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    dropped_fields(&value, &encoded, "", &mut unknown);
    Ok((encoded, unknown))
}

/// How many wrapped base64 strings one object may have unwrapped.
const MAX_UNWRAPPED: usize = 256;

/// Removes the line breaks (`\r`, `\n`) from the string at `path`, if it has any: the
/// string a base64 field failed to decode. Whether anything was removed.
fn unwrap_base64(value: &mut Value, path: &serde_path_to_error::Path) -> bool {
    use serde_path_to_error::Segment;
    let mut node = value;
    for segment in path {
        let next = match segment {
            Segment::Map { key } => node.get_mut(key.as_str()),
            Segment::Seq { index } => node.get_mut(*index),
            Segment::Enum { .. } | Segment::Unknown => None,
        };
        let Some(next) = next else {
            return false;
        };
        node = next;
    }
    match node {
        Value::String(text) if text.contains(['\r', '\n']) => {
            text.retain(|c| c != '\r' && c != '\n');
            true
        }
        _ => false,
    }
}

/// The fields of an ObjectMeta (`metadata` of a custom resource, or of a resource embedded
/// in one) that ObjectMeta does not have, by path below `prefix`, removed from it: what
/// apiextensions-apiserver's metadata coercion reports as unknown fields and drops. What is
/// left is shaped as Go's `ObjectMeta` writes it (coercion goes through it). Malformed
/// metadata is left for validation to refuse.
pub(crate) fn coerce_object_meta(metadata: &mut Value, prefix: &str) -> Vec<String> {
    let Ok((_, unknown)) =
        typed::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(metadata.clone())
    else {
        return Vec::new();
    };
    for path in &unknown {
        remove_path(metadata, path);
    }
    go_encoding::shape_type("meta/v1.ObjectMeta", metadata);
    unknown
        .into_iter()
        .map(|path| format!("{prefix}.{path}"))
        .collect()
}

/// Removes the field at `path` (`a.b`, `list[0].c`) from `value`.
fn remove_path(value: &mut Value, path: &str) {
    let mut node = value;
    let mut segments = path.split('.').peekable();
    while let Some(segment) = segments.next() {
        let (key, indexes) = match segment.find('[') {
            Some(at) => (&segment[..at], &segment[at..]),
            None => (segment, ""),
        };
        if segments.peek().is_none() && indexes.is_empty() {
            if let Some(map) = node.as_object_mut() {
                map.remove(key);
            }
            return;
        }
        let Some(next) = node.get_mut(key) else {
            return;
        };
        node = next;
        for index in indexes
            .split(['[', ']'])
            .filter(|i| !i.is_empty())
            .filter_map(|i| i.parse::<usize>().ok())
        {
            let Some(next) = node.get_mut(index) else {
                return;
            };
            node = next;
        }
    }
}

/// Paths present in `before` but absent from `after` (null values do not count: they mean
/// "unset" to the API).
fn dropped_fields(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (key, value) in b {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match a.get(key) {
                    Some(next) => dropped_fields(value, next, &child, out),
                    None if value.is_null() => {}
                    None => out.push(child),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) if a.len() == b.len() => {
            for (i, (value, next)) in b.iter().zip(a).enumerate() {
                dropped_fields(value, next, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A resource declared from its `k8s-openapi` type: every verb, no subresource, stored under
/// its own group and plural.
fn declare<T>() -> ResourceType
where
    T: k8s_openapi::Resource + serde::de::DeserializeOwned + serde::Serialize + 'static,
{
    let namespaced =
        TypeId::of::<T::Scope>() == TypeId::of::<k8s_openapi::NamespaceResourceScope>();
    ResourceType {
        group: T::GROUP.into(),
        version: T::VERSION.into(),
        kind: T::KIND.into(),
        plural: T::URL_PATH_SEGMENT.into(),
        singular: T::KIND.to_lowercase(),
        namespaced,
        short_names: Vec::new(),
        categories: Vec::new(),
        status: false,
        scale: None,
        generation: false,
        name_rule: NameRule::Subdomain,
        codec: Some(typed::<T>),
        validate: None,
        default: None,
        prepare_create: None,
        columns: columns::default_table(),
        selectable_fields: Vec::new(),
        field_labels: FieldLabels::MetadataOnly,
        create_on_update: false,
        custom: None,
        verbs: ALL_VERBS,
        subresources: Vec::new(),
        storage_version_hash: Some(storage_version_hash(T::GROUP, T::VERSION, T::KIND)),
        serving: Serving::Stored,
        stored_under: None,
        conversion: None,
        status_resets: &[],
        allocates_addresses: false,
        deletion: Deletion::Plain,
    }
}

/// The declaration builder: each method sets one thing discovery or the strategy says.
impl ResourceType {
    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }
    fn in_all(mut self) -> Self {
        self.categories = vec!["all".into()];
        self
    }
    fn in_api_extensions(mut self) -> Self {
        self.categories = vec!["api-extensions".into()];
        self
    }
    fn with_status(mut self) -> Self {
        self.status = true;
        self
    }
    fn with_scale(mut self) -> Self {
        self.scale = Some(ScalePaths {
            spec_replicas: "spec.replicas".into(),
            status_replicas: "status.replicas".into(),
            selector: Some("spec.selector".into()),
            selector_is_string: false,
        });
        self
    }
    fn with_generation(mut self) -> Self {
        self.generation = true;
        self
    }
    fn names(mut self, rule: NameRule) -> Self {
        self.name_rule = rule;
        self
    }
    fn verbs(mut self, verbs: Verbs) -> Self {
        self.verbs = verbs;
        self
    }
    fn sub(mut self, name: &'static str, verbs: Verbs, storage: Storage) -> Self {
        self.subresources.push(Subresource {
            name,
            kind: None,
            verbs,
            storage,
        });
        self
    }
    fn sub_of<S: k8s_openapi::Resource>(mut self, verbs: Verbs, storage: Storage) -> Self {
        self.subresources.push(Subresource {
            name: S::URL_PATH_SEGMENT,
            kind: Some((S::GROUP, S::VERSION, S::KIND)),
            verbs,
            storage,
        });
        self
    }
    /// A subresource whose kind is named by Kubernetes but has no `Resource` type of its own
    /// (`PodExecOptions`).
    fn sub_kind(
        mut self,
        name: &'static str,
        kind: &'static str,
        verbs: Verbs,
        storage: Storage,
    ) -> Self {
        self.subresources.push(Subresource {
            name,
            kind: Some(("", "v1", kind)),
            verbs,
            storage,
        });
        self
    }
    fn columns(mut self, columns: Vec<Column>) -> Self {
        self.columns = columns;
        self
    }
    fn validate(mut self, validate: fn(&Value, Option<&Value>) -> Vec<Cause>) -> Self {
        self.validate = Some(validate);
        self
    }
    fn defaults(mut self, default: fn(&mut Value)) -> Self {
        self.default = Some(default);
        self
    }
    fn on_create(mut self, prepare: fn(&mut Value)) -> Self {
        self.prepare_create = Some(prepare);
        self
    }
    fn fields(mut self, labels: FieldLabels, fields: Vec<SelectableField>) -> Self {
        self.field_labels = labels;
        self.selectable_fields = fields;
        self
    }
    fn status_resets(mut self, fields: &'static [&'static str]) -> Self {
        self.status_resets = fields;
        self
    }
    fn allocates_addresses(mut self) -> Self {
        self.allocates_addresses = true;
        self.validate = Some(validation::service);
        self
    }
    fn deleted(mut self, deletion: Deletion) -> Self {
        self.deletion = deletion;
        self
    }
    fn create_on_update(mut self) -> Self {
        self.create_on_update = true;
        self
    }
    /// Objects are stored as `S` (another version, or another group's kind).
    fn stored_as<S: k8s_openapi::Resource>(mut self, conversion: Conversion) -> Self {
        self.storage_version_hash = Some(storage_version_hash(S::GROUP, S::VERSION, S::KIND));
        self.stored_under = Some((S::GROUP, S::URL_PATH_SEGMENT));
        self.conversion = Some(conversion);
        self
    }
    /// Objects are stored under another version's hash (kube-apiserver 1.33 still stores
    /// them as that version; only the hash shows it).
    fn storage_version(mut self, version: &str) -> Self {
        self.storage_version_hash = Some(storage_version_hash(&self.group, version, &self.kind));
        self
    }
    fn review(mut self, review: Review) -> Self {
        self.verbs = &["create"];
        self.serving = Serving::Review(review);
        self.storage_version_hash = None;
        self.columns = Vec::new();
        self
    }
}

const CREATE: Verbs = &["create"];
const CREATE_GET: Verbs = &["create", "get"];
const PROXY: Verbs = &["create", "delete", "get", "patch", "update"];
const NAMESPACE_VERBS: Verbs = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// The group-versions kube-apiserver 1.33 serves only when `--runtime-config` asks, that
/// konverge implements: (group, version, resources).
pub fn optional() -> Vec<(&'static str, &'static str, Vec<ResourceType>)> {
    let as_v1 = |obj: &mut Value| {
        obj["apiVersion"] = json!("admissionregistration.k8s.io/v1");
    };
    let as_v1beta1 = |obj: &mut Value| {
        obj["apiVersion"] = json!("admissionregistration.k8s.io/v1beta1");
    };
    // v1beta1's ValidatingAdmissionPolicies and their bindings are v1's, stored as v1.
    let same_as_v1 = Conversion {
        to_served: as_v1beta1,
        to_storage: as_v1,
    };
    vec![(
        "admissionregistration.k8s.io",
        "v1beta1",
        vec![
            validating_admission_policy(
                declare::<admissionregistration::v1beta1::ValidatingAdmissionPolicy>()
                    .stored_as::<admissionregistration::v1::ValidatingAdmissionPolicy>(same_as_v1),
            ),
            validating_admission_policy_binding(
                declare::<admissionregistration::v1beta1::ValidatingAdmissionPolicyBinding>()
                    .stored_as::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(
                    same_as_v1,
                ),
            ),
        ],
    )]
}

/// What ValidatingAdmissionPolicies are, in any version.
fn validating_admission_policy(declared: ResourceType) -> ResourceType {
    declared
        .defaults(validation::default_validating_admission_policy)
        .validate(validation::validating_admission_policy)
        .status_resets(STATUS_RESETS_ALL)
        .in_api_extensions()
        .with_status()
        .with_generation()
        .columns(columns::validating_admission_policies())
}

/// What ValidatingAdmissionPolicyBindings are, in any version.
fn validating_admission_policy_binding(declared: ResourceType) -> ResourceType {
    declared
        .defaults(validation::default_validating_admission_policy_binding)
        .validate(validation::validating_admission_policy_binding)
        .in_api_extensions()
        .with_generation()
        .columns(columns::validating_admission_policy_bindings())
}

/// Every built-in resource kube-apiserver 1.33 serves by default.
pub fn catalog() -> Vec<ResourceType> {
    use NameRule::*;
    use fields::*;
    vec![
        // core/v1
        declare::<core::v1::Binding>()
            .verbs(CREATE)
            .columns(Vec::new())
            .no_storage(Serving::Binding),
        declare::<core::v1::ComponentStatus>()
            .short(&["cs"])
            .verbs(&["get", "list"])
            .columns(columns::component_statuses())
            .no_storage(Serving::ComponentStatus),
        declare::<core::v1::ConfigMap>()
            .short(&["cm"])
            .validate(validation::config_map)
            .columns(columns::config_maps()),
        declare::<core::v1::Endpoints>()
            .short(&["ep"])
            .create_on_update()
            .defaults(defaults::endpoints)
            .columns(columns::endpoints()),
        declare::<core::v1::Event>()
            .short(&["ev"])
            .create_on_update()
            .columns(columns::events())
            .fields(FieldLabels::Converted, core_event_fields()),
        declare::<core::v1::LimitRange>()
            .short(&["limits"])
            .create_on_update()
            .defaults(defaults::limit_range),
        declare::<core::v1::Namespace>()
            .deleted(Deletion::SpecFinalizers)
            .short(&["ns"])
            .with_status()
            .names(Label)
            .verbs(NAMESPACE_VERBS)
            .sub(
                "finalize",
                &["update"],
                Storage::Part(Part::new(strategy::namespace_finalize)),
            )
            .defaults(strategy::default_namespace)
            .on_create(strategy::prepare_namespace)
            .columns(columns::namespaces())
            .fields(FieldLabels::Converted, namespace_fields()),
        declare::<core::v1::Node>()
            .short(&["no"])
            .with_status()
            .sub_kind("proxy", "NodeProxyOptions", PROXY, Storage::Connect)
            .columns(columns::nodes())
            .fields(FieldLabels::Converted, node_fields()),
        declare::<core::v1::PersistentVolumeClaim>()
            .short(&["pvc"])
            .with_status()
            .defaults(strategy::default_persistent_volume_claim)
            .on_create(strategy::prepare_pending)
            .validate(validation::persistent_volume_claim)
            .columns(columns::persistent_volume_claims()),
        declare::<core::v1::PersistentVolume>()
            .short(&["pv"])
            .with_status()
            .defaults(strategy::default_persistent_volume)
            .on_create(strategy::prepare_pending)
            .validate(validation::persistent_volume)
            .columns(columns::persistent_volumes()),
        declare::<core::v1::Pod>()
            .deleted(Deletion::Graceful)
            .status_resets(&["ownerReferences"])
            .short(&["po"])
            .in_all()
            .with_status()
            .with_generation()
            .sub_kind("attach", "PodAttachOptions", CREATE_GET, Storage::Connect)
            .sub_kind(
                "binding",
                "Binding",
                CREATE,
                Storage::Action(Action::Binding),
            )
            .sub(
                "ephemeralcontainers",
                SUBRESOURCE_VERBS,
                Storage::Part(Part::with_own_rules(strategy::pod_ephemeral_containers)),
            )
            .sub_of::<policy::v1::Eviction>(CREATE, Storage::Action(Action::Eviction))
            .sub_kind("exec", "PodExecOptions", CREATE_GET, Storage::Connect)
            .sub("log", &["get"], Storage::Log)
            .sub_kind(
                "portforward",
                "PodPortForwardOptions",
                CREATE_GET,
                Storage::Connect,
            )
            .sub_kind("proxy", "PodProxyOptions", PROXY, Storage::Connect)
            .sub(
                "resize",
                SUBRESOURCE_VERBS,
                Storage::Part(Part::with_own_rules(strategy::pod_resize)),
            )
            .defaults(defaults::pod)
            .on_create(defaults::prepare_pod)
            .validate(validation::pod)
            .columns(columns::pods())
            .fields(FieldLabels::Converted, pod_fields()),
        declare::<core::v1::PodTemplate>()
            .with_generation()
            .defaults(defaults::pod_template)
            .validate(validation::pod_template)
            .columns(columns::pod_templates()),
        declare::<core::v1::ReplicationController>()
            .short(&["rc"])
            .in_all()
            .with_status()
            .with_scale()
            .with_generation()
            .defaults(defaults::replication_controller)
            .validate(validation::replication_controller)
            .columns(columns::replication_controllers())
            .fields(FieldLabels::Converted, replication_controller_fields()),
        declare::<core::v1::ResourceQuota>()
            .short(&["quota"])
            .with_status()
            .validate(validation::resource_quota)
            .columns(columns::resource_quotas()),
        declare::<core::v1::Secret>()
            .defaults(strategy::default_secret)
            .validate(validation::secret)
            .columns(columns::secrets())
            .fields(FieldLabels::Converted, secret_fields()),
        declare::<core::v1::ServiceAccount>()
            .short(&["sa"])
            .sub_of::<authentication::v1::TokenRequest>(CREATE, Storage::Action(Action::Token))
            .columns(columns::service_accounts()),
        declare::<core::v1::Service>()
            .short(&["svc"])
            .in_all()
            .with_status()
            .names(Rfc1035Label)
            .create_on_update()
            .sub_kind("proxy", "ServiceProxyOptions", PROXY, Storage::Connect)
            .allocates_addresses()
            .defaults(strategy::default_service)
            .columns(columns::services())
            .fields(FieldLabels::Converted, service_fields()),
        // admissionregistration.k8s.io/v1
        declare::<admissionregistration::v1::MutatingWebhookConfiguration>()
            .in_api_extensions()
            .with_generation()
            .defaults(validation::default_mutating_webhook_configuration)
            .validate(validation::mutating_webhook_configuration)
            .columns(columns::webhook_configurations()),
        validating_admission_policy(declare::<
            admissionregistration::v1::ValidatingAdmissionPolicy,
        >()),
        validating_admission_policy_binding(declare::<
            admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        >()),
        declare::<admissionregistration::v1::ValidatingWebhookConfiguration>()
            .in_api_extensions()
            .with_generation()
            .defaults(validation::default_validating_webhook_configuration)
            .validate(validation::validating_webhook_configuration)
            .columns(columns::webhook_configurations()),
        // apiextensions.k8s.io/v1
        declare::<CustomResourceDefinition>()
            .short(&["crd", "crds"])
            .in_api_extensions()
            .with_status()
            .with_generation()
            .storage_version("v1beta1")
            .defaults(crate::resources::crd::default_definition)
            .on_create(crate::resources::crd::prepare_definition)
            .validate(crate::resources::crd::validate_definition)
            .columns(crate::resources::crd::definition_columns()),
        // apiregistration.k8s.io/v1
        declare::<APIService>()
            .names(PathSegment)
            .on_create(strategy::prepare_api_service)
            .status_resets(STATUS_RESETS_ALL)
            .in_api_extensions()
            .with_status()
            .columns(columns::api_services()),
        // apps/v1
        declare::<apps::v1::ControllerRevision>().columns(columns::controller_revisions()),
        declare::<apps::v1::DaemonSet>()
            .short(&["ds"])
            .in_all()
            .with_status()
            .with_generation()
            .defaults(defaults::daemon_set)
            .on_create(defaults::prepare_daemon_set)
            .validate(validation::daemon_set)
            .columns(columns::daemon_sets()),
        declare::<apps::v1::Deployment>()
            .status_resets(&["labels"])
            .short(&["deploy"])
            .in_all()
            .with_status()
            .with_scale()
            .with_generation()
            .defaults(defaults::deployment)
            .validate(validation::deployment)
            .columns(columns::deployments()),
        declare::<apps::v1::ReplicaSet>()
            .short(&["rs"])
            .in_all()
            .with_status()
            .with_scale()
            .with_generation()
            .defaults(defaults::replica_set)
            .validate(validation::replica_set)
            .columns(columns::replica_sets()),
        declare::<apps::v1::StatefulSet>()
            .short(&["sts"])
            .in_all()
            .with_status()
            .with_scale()
            .with_generation()
            .defaults(defaults::stateful_set)
            .validate(validation::stateful_set)
            .columns(columns::stateful_sets()),
        // authentication.k8s.io/v1
        declare::<authentication::v1::SelfSubjectReview>().review(Review::SelfSubject),
        declare::<authentication::v1::TokenReview>().review(Review::Token),
        // authorization.k8s.io/v1
        declare::<authorization::v1::LocalSubjectAccessReview>().review(Review::SubjectAccess),
        declare::<authorization::v1::SelfSubjectAccessReview>().review(Review::SelfSubjectAccess),
        declare::<authorization::v1::SelfSubjectRulesReview>().review(Review::SelfSubjectRules),
        declare::<authorization::v1::SubjectAccessReview>().review(Review::SubjectAccess),
        // autoscaling/v1 and v2, stored as v2
        declare::<autoscaling::v1::HorizontalPodAutoscaler>()
            .short(&["hpa"])
            .in_all()
            .with_status()
            .stored_as::<autoscaling::v2::HorizontalPodAutoscaler>(Conversion {
                to_served: convert::hpa_to_v1,
                to_storage: convert::hpa_to_v2,
            })
            .defaults(defaults::horizontal_pod_autoscaler)
            .columns(columns::horizontal_pod_autoscalers()),
        declare::<autoscaling::v2::HorizontalPodAutoscaler>()
            .short(&["hpa"])
            .in_all()
            .with_status()
            .defaults(defaults::horizontal_pod_autoscaler)
            .columns(columns::horizontal_pod_autoscalers()),
        // batch/v1
        declare::<batch::v1::CronJob>()
            .short(&["cj"])
            .in_all()
            .with_status()
            .with_generation()
            .defaults(defaults::cron_job)
            .validate(validation::cron_job)
            .columns(columns::cron_jobs()),
        declare::<batch::v1::Job>()
            .in_all()
            .with_status()
            .with_generation()
            .defaults(defaults::job)
            .validate(validation::job)
            .on_create(defaults::prepare_job)
            .columns(columns::jobs())
            .fields(FieldLabels::Job, job_fields()),
        // certificates.k8s.io/v1
        declare::<certificates::v1::CertificateSigningRequest>()
            .short(&["csr"])
            .with_status()
            .sub(
                "approval",
                SUBRESOURCE_VERBS,
                Storage::Part(Part::new(strategy::certificate_approval)),
            )
            .on_create(strategy::prepare_certificate_signing_request)
            .columns(columns::certificate_signing_requests())
            .fields(FieldLabels::Converted, csr_fields()),
        // coordination.k8s.io/v1
        declare::<coordination::v1::Lease>()
            .create_on_update()
            .columns(columns::leases()),
        // discovery.k8s.io/v1
        declare::<discovery::v1::EndpointSlice>()
            .with_generation()
            .defaults(defaults::endpoint_slice)
            .columns(columns::endpoint_slices()),
        // events.k8s.io/v1: core Events, converted
        declare::<events::v1::Event>()
            .short(&["ev"])
            .create_on_update()
            .stored_as::<core::v1::Event>(Conversion {
                to_served: convert::events_from_core,
                to_storage: convert::events_to_core,
            })
            .columns(columns::events())
            .fields(FieldLabels::Converted, events_v1_fields()),
        // flowcontrol.apiserver.k8s.io/v1
        declare::<flowcontrol::v1::FlowSchema>()
            .status_resets(STATUS_RESETS_ALL)
            .with_status()
            .with_generation()
            .columns(columns::flow_schemas()),
        declare::<flowcontrol::v1::PriorityLevelConfiguration>()
            .status_resets(STATUS_RESETS_ALL)
            .with_status()
            .with_generation()
            .columns(columns::priority_level_configurations()),
        // networking.k8s.io/v1
        declare::<networking::v1::IngressClass>()
            .with_generation()
            .validate(validation::ingress_class)
            .columns(columns::ingress_classes()),
        declare::<networking::v1::Ingress>()
            .short(&["ing"])
            .with_status()
            .with_generation()
            .columns(columns::ingresses()),
        declare::<networking::v1::IPAddress>()
            .short(&["ip"])
            .storage_version("v1beta1")
            .columns(columns::ip_addresses()),
        declare::<networking::v1::NetworkPolicy>()
            .short(&["netpol"])
            .with_generation()
            .defaults(defaults::network_policy)
            .columns(columns::network_policies()),
        declare::<networking::v1::ServiceCIDR>()
            .status_resets(STATUS_RESETS_ALL)
            .with_status()
            .storage_version("v1beta1")
            .columns(columns::service_cidrs()),
        // node.k8s.io/v1
        declare::<node::v1::RuntimeClass>()
            .names(Subdomain)
            .columns(columns::runtime_classes()),
        // policy/v1
        declare::<policy::v1::PodDisruptionBudget>()
            .short(&["pdb"])
            .with_status()
            .with_generation()
            .columns(columns::pod_disruption_budgets()),
        // rbac.authorization.k8s.io/v1
        declare::<rbac::v1::ClusterRoleBinding>()
            .names(PathSegment)
            .create_on_update()
            .defaults(defaults::role_binding)
            .validate(validation::role_binding)
            .columns(columns::role_bindings()),
        declare::<rbac::v1::ClusterRole>()
            .names(PathSegment)
            .create_on_update(),
        declare::<rbac::v1::RoleBinding>()
            .names(PathSegment)
            .create_on_update()
            .defaults(defaults::role_binding)
            .validate(validation::role_binding)
            .columns(columns::role_bindings()),
        declare::<rbac::v1::Role>()
            .names(PathSegment)
            .create_on_update(),
        // scheduling.k8s.io/v1
        declare::<scheduling::v1::PriorityClass>()
            .short(&["pc"])
            .defaults(defaults::priority_class)
            .validate(validation::priority_class)
            .columns(columns::priority_classes()),
        // storage.k8s.io/v1
        declare::<storage::v1::CSIDriver>()
            .with_generation()
            .defaults(defaults::csi_driver)
            .validate(validation::csi_driver)
            .columns(columns::csi_drivers()),
        declare::<storage::v1::CSINode>().columns(columns::csi_nodes()),
        declare::<storage::v1::CSIStorageCapacity>().columns(columns::csi_storage_capacities()),
        declare::<storage::v1::StorageClass>()
            .short(&["sc"])
            .defaults(defaults::storage_class)
            .validate(validation::storage_class)
            .columns(columns::storage_classes()),
        declare::<storage::v1::VolumeAttachment>()
            .status_resets(STATUS_RESETS_ALL)
            .with_status()
            .columns(columns::volume_attachments()),
    ]
}

impl ResourceType {
    /// Served without storage: nothing to hash, nothing to watch.
    fn no_storage(mut self, serving: Serving) -> Self {
        self.serving = serving;
        self.storage_version_hash = None;
        self
    }
}

/// The catalog of the built-in resources is made here, where they are declared.
impl Catalog {
    /// A catalog of the built-in resources.
    pub fn builtin() -> Self {
        let served = Catalog::default();
        for rt in catalog() {
            served.insert(rt);
        }
        served
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrapped_base64_is_read_as_go_reads_it() {
        let wrapped = "aGVsbG8g\nd29ybGQ=\r\n";
        let (out, unknown) = typed::<core::v1::Secret>(json!({
            "metadata": {"name": "tls"},
            "data": {"tls.crt": wrapped, "tls.key": "a2V5"},
        }))
        .expect("line breaks are ignored");
        assert_eq!(out["data"]["tls.crt"], "aGVsbG8gd29ybGQ=");
        assert!(unknown.is_empty());
        let err = typed::<core::v1::Secret>(json!({
            "metadata": {"name": "bad"},
            "data": {"k": "not base64!"},
        }))
        .expect_err("other bad base64 is refused");
        assert!(err.starts_with("data.k:"), "{err}");
    }

    #[test]
    fn typed_codec_reports_wrong_types_with_paths_and_drops_unknown_fields() {
        let err = typed::<apps::v1::Deployment>(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": "three"}
        }))
        .expect_err("a string is no replica count");
        assert!(
            err.starts_with("spec.replicas: invalid type: string"),
            "{err}"
        );

        let (out, unknown) = typed::<core::v1::ConfigMap>(json!({
            "metadata": {"name": "x", "labels": null, "bogus": 1},
            "data": {"a": "1"},
            "extra": {"nested": true}
        }))
        .expect("decodes");
        assert_eq!(
            unknown,
            vec!["extra".to_string(), "metadata.bogus".to_string()]
        );
        assert_eq!(out["data"]["a"], "1");
        assert!(out.get("extra").is_none());
        assert_eq!(out["kind"], "ConfigMap");
    }

    #[test]
    fn catalog_has_unique_paths() {
        let all = catalog();
        let mut paths: Vec<_> = all
            .iter()
            .map(|r| (&r.group, &r.version, &r.plural))
            .collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), all.len());
    }

    /// Hashes kube-apiserver 1.33 publishes, including the resources stored as another
    /// version or kind.
    #[test]
    fn storage_version_hashes_match_kube_apiserver() {
        let all = catalog();
        let hash = |group: &str, version: &str, plural: &str| {
            all.iter()
                .find(|r| r.group == group && r.version == version && r.plural == plural)
                .and_then(|r| r.storage_version_hash.clone())
        };
        for (group, version, plural, want) in [
            ("", "v1", "configmaps", "qFsyl6wFWjQ="),
            ("", "v1", "pods", "xPOwRZ+Yhw8="),
            ("events.k8s.io", "v1", "events", "r2yiGXH7wu8="),
            (
                "autoscaling",
                "v1",
                "horizontalpodautoscalers",
                "qwQve8ut294=",
            ),
            (
                "autoscaling",
                "v2",
                "horizontalpodautoscalers",
                "qwQve8ut294=",
            ),
            (
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "jfWCUB31mvA=",
            ),
            ("networking.k8s.io", "v1", "servicecidrs", "8ufAXOnr3Yg="),
            ("networking.k8s.io", "v1", "ipaddresses", "O4H8VxQhW5Y="),
            ("discovery.k8s.io", "v1", "endpointslices", "qgS0xkrxYAI="),
            (
                "apiregistration.k8s.io",
                "v1",
                "apiservices",
                "InPBPD7+PqM=",
            ),
        ] {
            assert_eq!(
                hash(group, version, plural).as_deref(),
                Some(want),
                "{group}/{version}/{plural}"
            );
        }
        assert_eq!(hash("authentication.k8s.io", "v1", "tokenreviews"), None);
    }
}
