//! The resources the server serves: what each one is called, how it is scoped and stored, and
//! what is special about it (its strategy).
//!
//! A [`ResourceType`] is plain data plus a few hooks. Built-in types come from
//! [`builtin::catalog`]; custom resources will be added at run time, so the [`Catalog`] is
//! shared and can grow.

pub mod builtin;
pub mod crd;
pub mod custom;
pub mod jsonpath;
pub mod meta;
pub(crate) mod reviews;
pub mod runtime_config;
pub mod subresource;
pub mod webhook_config;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::error::{ApiError, Cause};

pub use meta::NameRule;
pub use subresource::{Action, Part, Storage, Subresource};

/// The fields the scale subresource reads and writes, as dotted paths (`spec.replicas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// Where the desired replica count lives (`spec.replicas`).
    pub spec_replicas: String,
    /// Where the observed replica count lives (`status.replicas`).
    pub status_replicas: String,
    /// Where the label selector lives (`spec.selector`), if anywhere.
    pub selector: Option<String>,
    /// Whether the selector is a serialized string (custom resources' `labelSelectorPath`)
    /// rather than a structured `LabelSelector` (the built-in workloads).
    pub selector_is_string: bool,
}

/// How a column's cell is computed.
#[derive(Clone)]
pub enum Cell {
    /// By a function of the object (built-in resources).
    Fn(fn(&Value) -> Value),
    /// By a JSONPath (custom resources' `additionalPrinterColumns`).
    Path(crate::resources::jsonpath::JsonPath),
}

/// One column of `kubectl get` output: its header, and how to compute the cell.
#[derive(Clone)]
pub struct Column {
    /// The header, as kubectl prints it (upper-cased by kubectl).
    pub name: String,
    /// `string`, `integer`, `date`, ...
    pub type_: String,
    /// `format` of the column definition (`name`, `int32`, ...; usually empty).
    pub format: String,
    /// Hidden unless `-o wide` (`priority` above 0).
    pub priority: i64,
    /// The cell for an object.
    pub cell: Cell,
    /// What the column means.
    pub description: String,
}

impl Column {
    /// The cell of `obj`.
    pub fn cell(&self, obj: &Value) -> Value {
        match &self.cell {
            Cell::Fn(f) => f(obj),
            Cell::Path(path) => path.cell(obj, &self.type_),
        }
    }
}

impl std::fmt::Debug for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Column").field("name", &self.name).finish()
    }
}

/// Turns a request body into the stored form: decodes it as the resource's type (rejecting
/// wrong types), drops fields the type does not have, and reports which ones it dropped.
pub type Codec = fn(Value) -> Result<(Value, Vec<String>), String>;

/// Per-resource validation and defaulting.
pub type Validator = fn(&Value, Option<&Value>) -> Vec<Cause>;

/// The verbs of a resource or subresource, in the order discovery lists them.
pub type Verbs = &'static [&'static str];

/// Every verb of a stored collection.
pub const ALL_VERBS: Verbs = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of `status`, `scale` and the other subresources that read and write the object.
pub const SUBRESOURCE_VERBS: Verbs = &["get", "patch", "update"];

/// An answer computed from a request body instead of stored: the review resources, each
/// answered by the server's authenticator or authorizer (`reviews.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    /// `SelfSubjectReview`: who the requester is.
    SelfSubject,
    /// `TokenReview`: whose a token is.
    Token,
    /// `SubjectAccessReview`, `LocalSubjectAccessReview`: may a user do something.
    SubjectAccess,
    /// `SelfSubjectAccessReview`: may the requester do something.
    SelfSubjectAccess,
    /// `SelfSubjectRulesReview`: what the requester may do in a namespace.
    SelfSubjectRules,
}

/// How a resource is served.
#[derive(Debug, Clone, Copy)]
pub enum Serving {
    /// Objects are stored, read, watched and deleted.
    Stored,
    /// `create` only: the answer is computed from the body and nothing is stored.
    Review(Review),
    /// `get` and `list` only: the health of the server's parts (`componentstatuses`).
    ComponentStatus,
    /// `create` only: binds the pod named in the body to a node (`bindings`).
    Binding,
}

/// How objects of a resource served in several versions convert between the stored version
/// and this one (autoscaling/v1 HorizontalPodAutoscalers stored as autoscaling/v2).
#[derive(Debug, Clone, Copy)]
pub struct Conversion {
    /// From the stored form to this version.
    pub to_served: fn(&mut Value),
    /// From this version to the stored form.
    pub to_storage: fn(&mut Value),
}

/// A field selector label, and how its value is read from a stored object.
#[derive(Debug, Clone)]
pub struct SelectableField {
    /// The label clients select on (`spec.nodeName`).
    pub label: String,
    /// Its value.
    pub value: FieldValue,
}

/// How a selectable field's value is read.
#[derive(Clone)]
pub enum FieldValue {
    /// Computed (built-in resources).
    Fn(fn(&Value) -> String),
    /// A JSON path (custom resources' `selectableFields`).
    Path(crate::resources::jsonpath::JsonPath),
}

impl std::fmt::Debug for FieldValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldValue::Fn(_) => f.write_str("Fn"),
            FieldValue::Path(_) => f.write_str("Path"),
        }
    }
}

impl SelectableField {
    /// The field's value in `obj`: empty when absent, as kube-apiserver compares it.
    pub fn value_of(&self, obj: &Value) -> String {
        match &self.value {
            FieldValue::Fn(f) => f(obj),
            FieldValue::Path(path) => match path.cell(obj, "string") {
                Value::String(s) => s,
                Value::Null => String::new(),
                other => other.to_string(),
            },
        }
    }
}

/// How a resource answers field selector labels it does not know (kube-apiserver's field
/// label conversion functions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldLabels {
    /// No conversion function: `metadata.name` and `metadata.namespace` only, others
    /// refused with `"x" is not a known field selector: only "metadata.name", "metadata.namespace"`.
    #[default]
    MetadataOnly,
    /// A conversion function: the selectable fields, `metadata.name`, and
    /// `metadata.namespace` on namespaced resources; others refused with
    /// `field label not supported: x`.
    Converted,
    /// batch/v1 Jobs' conversion function, which words its refusal
    /// `field label "x" not supported for batchv1.Job`.
    Job,
}

/// A resource the server serves.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    /// The served version.
    pub version: String,
    /// The kind, `ConfigMap`.
    pub kind: String,
    /// The plural resource name used in paths, `configmaps`.
    pub plural: String,
    /// The singular name, `configmap`.
    pub singular: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// kubectl abbreviations, `cm`.
    pub short_names: Vec<String>,
    /// Groupings such as `all`.
    pub categories: Vec<String>,
    /// Whether a `status` subresource exists (then the main resource ignores status writes
    /// and the status subresource ignores everything else).
    pub status: bool,
    /// Where the scale subresource reads and writes, if it exists.
    pub scale: Option<ScalePaths>,
    /// Whether `metadata.generation` counts spec changes.
    pub generation: bool,
    /// How names are validated.
    pub name_rule: NameRule,
    /// Typed decoding for built-in types.
    pub codec: Option<Codec>,
    /// Resource-specific validation (`old` is set on update).
    pub validate: Option<Validator>,
    /// Resource-specific defaulting on create and update.
    pub default: Option<fn(&mut Value)>,
    /// Preparation on create only, after client-set status is dropped (initial status,
    /// mandatory finalizers), as kube-apiserver's `PrepareForCreate`.
    pub prepare_create: Option<fn(&mut Value)>,
    /// Columns for `kubectl get`, after NAME and before AGE.
    pub columns: Vec<Column>,
    /// Fields usable in field selectors besides `metadata.name` and `metadata.namespace`.
    pub selectable_fields: Vec<SelectableField>,
    /// Which field selector labels the resource accepts besides its selectable fields, and
    /// how it refuses the others.
    pub field_labels: FieldLabels,
    /// Whether `PUT` of an object that does not exist creates it.
    pub create_on_update: bool,
    /// What a custom resource's definition says (schema, storage version, printer columns);
    /// `None` for built-in resources.
    pub custom: Option<Arc<crate::resources::custom::CustomResource>>,
    /// The verbs discovery lists (and the server serves).
    pub verbs: Verbs,
    /// Subresources besides `status` and `scale`.
    pub subresources: Vec<Subresource>,
    /// `storageVersionHash`: a hash of the group, version and kind objects are stored as, by
    /// which clients notice a storage migration; `None` for resources that store nothing.
    pub storage_version_hash: Option<String>,
    /// Stored, or answered without storage.
    pub serving: Serving,
    /// Where objects are stored when not under this resource's own group and plural
    /// (events.k8s.io Events are core Events): `(group, plural)`.
    pub stored_under: Option<(&'static str, &'static str)>,
    /// How built-in objects convert from and to the stored version, when it differs.
    pub conversion: Option<Conversion>,
    /// The metadata fields a `status` write cannot change (its status strategy takes them
    /// from the current object); other metadata changes are kept. Custom resources' status
    /// writes change the status only.
    pub status_resets: &'static [&'static str],
    /// Whether objects get cluster IPs and node ports allocated (Services).
    pub allocates_addresses: bool,
    /// How a delete goes, as the resource's kube-apiserver strategy decides it.
    pub deletion: Deletion,
}

/// A resource named by its group and plural, as kube's `schema.GroupResource` names one:
/// what code outside the resources' own modules compares a [`ResourceType`] with
/// ([`ResourceType::is`]), whatever version it is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupResource {
    /// The API group, empty for the core group.
    pub group: &'static str,
    /// The plural resource name.
    pub resource: &'static str,
}

impl GroupResource {
    /// `resource` of `group`.
    pub const fn new(group: &'static str, resource: &'static str) -> GroupResource {
        GroupResource { group, resource }
    }
}

/// `pods`.
pub const PODS: GroupResource = GroupResource::new("", "pods");
/// `namespaces`.
pub const NAMESPACES: GroupResource = GroupResource::new("", "namespaces");
/// `resourcequotas`.
pub const RESOURCE_QUOTAS: GroupResource = GroupResource::new("", "resourcequotas");
/// `persistentvolumeclaims`.
pub const PERSISTENT_VOLUME_CLAIMS: GroupResource =
    GroupResource::new("", "persistentvolumeclaims");
/// `priorityclasses.scheduling.k8s.io`.
pub const PRIORITY_CLASSES: GroupResource =
    GroupResource::new("scheduling.k8s.io", "priorityclasses");

/// How objects of a resource are deleted (kube-apiserver's delete strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Deletion {
    /// Gone once no finalizer holds them; the delete answers with a `Status`.
    #[default]
    Plain,
    /// Deleted gracefully (pods): marked with a grace period and kept until their kubelet
    /// deletes them again, or deleted at once when nothing runs them; the delete answers with
    /// the object, as kube's pod storage returns deleted objects.
    Graceful,
    /// Held by `spec.finalizers` too, which only the `finalize` subresource changes, and
    /// marked `Terminating` while held (namespaces).
    SpecFinalizers,
}

/// The metadata `ResetObjectMetaForStatus` resets.
pub const STATUS_RESETS_ALL: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// kube-apiserver's `storageVersionHash`: the first 8 bytes of the SHA-256 of
/// `group/version/kind`, base64.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine;
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{group}/{version}/{kind}").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(&digest.as_ref()[..8])
}

impl ResourceType {
    /// Whether this is `resource`, in whatever version.
    pub fn is(&self, resource: GroupResource) -> bool {
        self.group == resource.group && self.plural == resource.resource
    }

    /// `apiVersion` as objects carry it: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The list kind, `ConfigMapList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The storage prefix of all objects: `/registry/configmaps/` or
    /// `/registry/apps/deployments/`.
    pub fn storage_prefix(&self) -> String {
        let (group, plural) = match self.stored_under {
            Some((group, plural)) => (group, plural),
            None => (self.group.as_str(), self.plural.as_str()),
        };
        if group.is_empty() {
            format!("/registry/{plural}/")
        } else {
            format!("/registry/{group}/{plural}/")
        }
    }

    /// Every subresource, by name, as discovery lists them: `status` and `scale` when the
    /// resource has them, and the others.
    pub fn all_subresources(&self) -> Vec<Subresource> {
        let mut all = self.subresources.clone();
        if self.status {
            all.push(Subresource::status(self));
        }
        if self.scale.is_some() {
            all.push(Subresource::scale());
        }
        all.sort_by_key(|s| s.name);
        all
    }

    /// The subresource `name`, if served.
    pub fn subresource(&self, name: &str) -> Option<Subresource> {
        match name {
            "status" if self.status => Some(Subresource::status(self)),
            "scale" if self.scale.is_some() => Some(Subresource::scale()),
            _ => self.subresources.iter().find(|s| s.name == name).copied(),
        }
    }

    /// Whether the resource serves `verb`.
    pub fn serves(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// Whether objects read from storage differ from what this resource serves.
    pub fn converts(&self) -> bool {
        self.conversion.is_some()
            || self
                .custom
                .as_ref()
                .is_some_and(|c| c.storage_version != self.version)
    }

    /// Whether objects read from storage are changed before they are served: converted
    /// ([`converts`](Self::converts)), or given the defaults of a custom resource's schema.
    pub fn changes_on_read(&self) -> bool {
        self.converts() || self.custom.as_ref().is_some_and(|c| c.defaults_on_read)
    }

    /// Turns a stored object into what this resource serves: its version, and for custom
    /// resources the schema's defaults.
    pub fn to_served(&self, obj: &mut Value) {
        if let Some(conversion) = self.conversion {
            (conversion.to_served)(obj);
        } else if let Some(custom) = &self.custom {
            custom.present(&self.api_version(), obj);
        }
    }

    /// The storage prefix of one namespace (or of everything, for cluster-scoped resources and
    /// `None`).
    pub fn namespace_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{ns}/", self.storage_prefix()),
            _ => self.storage_prefix(),
        }
    }

    /// The storage key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}{name}", self.namespace_prefix(namespace))
    }

    /// Validates an object name by this resource's rule: a cause per problem.
    pub fn check_name(&self, name: &str, field: &str) -> Vec<Cause> {
        crate::resources::meta::check_name(self.name_rule, name, field)
    }

    /// Rejects objects whose `apiVersion`/`kind` belong to another resource.
    pub fn check_type_meta(&self, obj: &Value) -> Result<(), ApiError> {
        let kind = obj.get("kind").and_then(Value::as_str);
        let api_version = obj.get("apiVersion").and_then(Value::as_str);
        if kind.is_some_and(|k| k != self.kind)
            || api_version.is_some_and(|v| v != self.api_version())
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({})",
                api_version.unwrap_or(""),
                self.api_version()
            )));
        }
        Ok(())
    }
}

/// Kubernetes' version priority: GA before beta before alpha, higher numbers first, and
/// versions that do not look like Kubernetes versions last, alphabetically.
pub fn version_priority(
    version: &str,
) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (level, minor) = if tail.is_empty() {
            (0, "0")
        } else if let Some(m) = tail.strip_prefix("beta") {
            (1, m)
        } else if let Some(m) = tail.strip_prefix("alpha") {
            (2, m)
        } else {
            return None;
        };
        let minor: u64 = if minor.is_empty() && level > 0 {
            0
        } else {
            minor.parse().ok()?
        };
        Some((level, major, minor))
    });
    match parsed {
        Some((level, major, minor)) => (
            level,
            std::cmp::Reverse(major),
            std::cmp::Reverse(minor),
            String::new(),
        ),
        None => (
            3,
            std::cmp::Reverse(0),
            std::cmp::Reverse(0),
            version.to_string(),
        ),
    }
}

/// Every served resource, indexed for the lookups requests need.
#[derive(Debug, Default)]
pub struct Catalog {
    by_path: RwLock<BTreeMap<(String, String, String), Arc<ResourceType>>>,
}

impl Catalog {
    /// Adds (or replaces) a resource.
    pub fn insert(&self, rt: ResourceType) -> Arc<ResourceType> {
        let rt = Arc::new(rt);
        self.by_path
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                (rt.group.clone(), rt.version.clone(), rt.plural.clone()),
                rt.clone(),
            );
        rt
    }

    /// The resource served at `/apis/{group}/{version}/{plural}`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.by_path
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Whether any resource is served under `/apis/{group}/{version}`.
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        let from = (group.to_string(), version.to_string(), String::new());
        self.by_path
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .range(from..)
            .next()
            .is_some_and(|((g, v, _), _)| g == group && v == version)
    }

    /// Every resource, ordered by group, version and plural.
    pub fn all(&self) -> Vec<Arc<ResourceType>> {
        self.by_path
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The resource, namespace and name a storage key belongs to.
    pub fn resolve_key(&self, key: &str) -> Option<(Arc<ResourceType>, Option<String>, String)> {
        let map = self.by_path.read().unwrap_or_else(|e| e.into_inner());
        // The longest matching prefix wins (`/registry/apps/...` over a core resource named
        // `apps`); of the resources sharing a prefix, the one serving the stored form.
        let rt = map
            .values()
            .filter(|rt| key.starts_with(&rt.storage_prefix()))
            .max_by_key(|rt| (rt.storage_prefix().len(), !rt.converts()))?
            .clone();
        let rest = &key[rt.storage_prefix().len()..];
        if rt.namespaced {
            let (ns, name) = rest.split_once('/')?;
            Some((rt, Some(ns.to_string()), name.to_string()))
        } else {
            Some((rt.clone(), None, rest.to_string()))
        }
    }

    /// One resource per storage prefix, the one serving the stored form: what to walk to
    /// visit every stored object once.
    pub fn stored(&self) -> Vec<Arc<ResourceType>> {
        self.all()
            .into_iter()
            .filter(|rt| matches!(rt.serving, Serving::Stored) && !rt.converts())
            .collect()
    }

    /// Removes a resource (a custom resource whose definition is gone or stopped serving a
    /// version).
    pub fn remove(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.by_path
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// The resource with this kind in this group (any served version).
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.all()
            .into_iter()
            .find(|rt| rt.group == group && rt.kind == kind)
    }
}
