//! What strategic merge patch needs to know about a type: which lists merge (and by which
//! key) and which objects are replaced whole — Kubernetes' `patchStrategy` and
//! `patchMergeKey` struct tags (`x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key`
//! in OpenAPI).
//!
//! Fields a [`TypeSchema`] does not list have no strategy: objects merge recursively (with
//! no strategy below them) and lists are replaced whole. So a description only needs the
//! paths that lead to fields with a strategy.
//!
//! The same descriptions carry what server-side apply reads from the built-in types' OpenAPI
//! beyond the patch tags, and strategic merge patch ignores: lists keyed by more fields than
//! their merge key, with defaults for missing keys (`x-kubernetes-list-map-keys`: container
//! ports by `containerPort` and `protocol`), and types owned as a whole
//! (`+structType=atomic` / `+mapType=atomic`: label selectors, object references).

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

/// A field's `patchStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PatchStrategy {
    /// No strategy: objects merge recursively, lists are replaced whole.
    #[default]
    Default,
    /// `merge`: lists merge element by element (by the merge key, or as a set of primitives).
    Merge,
    /// `replace`: the patch's object or list replaces the field whole.
    Replace,
}

/// The metadata of a field nothing describes.
pub(crate) static UNDESCRIBED_FIELD: FieldSchema = FieldSchema {
    strategy: PatchStrategy::Default,
    retain_keys: false,
    merge_key: None,
    schema: None,
    primitive_elements: false,
    list_map_keys: Vec::new(),
    key_defaults: Vec::new(),
    atomic_list: false,
};

/// The strategic merge metadata of one field.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSchema {
    strategy: PatchStrategy,
    retain_keys: bool,
    merge_key: Option<String>,
    schema: Option<Arc<TypeSchema>>,
    primitive_elements: bool,
    list_map_keys: Vec<String>,
    key_defaults: Vec<(String, Value)>,
    atomic_list: bool,
}

impl FieldSchema {
    /// A struct-typed field without a strategy, described by `schema`.
    pub fn object(schema: Arc<TypeSchema>) -> Self {
        FieldSchema {
            schema: Some(schema),
            ..FieldSchema::default()
        }
    }

    /// A list of objects with `patchStrategy: merge` and `patchMergeKey: merge_key`.
    pub fn merge_list(merge_key: impl Into<String>) -> Self {
        FieldSchema {
            strategy: PatchStrategy::Merge,
            merge_key: Some(merge_key.into()),
            ..FieldSchema::default()
        }
    }

    /// A list of primitives with `patchStrategy: merge` (merged as a set, like
    /// `metadata.finalizers`).
    pub fn merge_set() -> Self {
        FieldSchema {
            strategy: PatchStrategy::Merge,
            primitive_elements: true,
            ..FieldSchema::default()
        }
    }

    /// A field with `patchStrategy: replace`.
    pub fn replace() -> Self {
        FieldSchema {
            strategy: PatchStrategy::Replace,
            ..FieldSchema::default()
        }
    }

    /// A field whose only strategy is `retainKeys` (it only guides clients building
    /// patches; the server honours `$retainKeys` wherever it appears).
    pub fn retain_keys() -> Self {
        FieldSchema {
            retain_keys: true,
            ..FieldSchema::default()
        }
    }

    /// Adds `retainKeys` to the field's strategies (as in `merge,retainKeys`).
    pub fn with_retain_keys(mut self) -> Self {
        self.retain_keys = true;
        self
    }

    /// Describes the field's type (for a list: its elements' type).
    pub fn with_schema(mut self, schema: Arc<TypeSchema>) -> Self {
        self.schema = Some(schema);
        self
    }

    /// The keys that identify the list's items for server-side apply
    /// (`x-kubernetes-list-map-keys`), when they are more than the merge key: container ports
    /// are merged by `containerPort` but identified by `containerPort` and `protocol`.
    pub fn with_list_map_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.list_map_keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// The value server-side apply assumes for a list map key an item leaves out (the key
    /// field's OpenAPI `default`, such as `protocol: TCP`).
    pub fn with_key_default(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.key_defaults.push((key.into(), value.into()));
        self
    }

    /// The same field as a list server-side apply owns whole (`+listType=atomic`), though
    /// strategic merge patch merges it (`status.hostIPs` of pods, `status.conditions` of jobs).
    pub fn with_atomic_list(mut self) -> Self {
        self.atomic_list = true;
        self
    }

    /// Whether server-side apply owns the list whole despite its patch strategy.
    pub fn is_atomic_list(&self) -> bool {
        self.atomic_list
    }

    /// The keys identifying a keyed list's items: the list map keys if given, else the merge
    /// key.
    pub fn list_map_keys(&self) -> Vec<&str> {
        if self.list_map_keys.is_empty() {
            self.merge_key.as_deref().into_iter().collect()
        } else {
            self.list_map_keys.iter().map(String::as_str).collect()
        }
    }

    /// The defaults of list map keys (see [`FieldSchema::with_key_default`]).
    pub fn key_defaults(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.key_defaults.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The strategy.
    pub fn strategy(&self) -> PatchStrategy {
        self.strategy
    }

    /// Whether `retainKeys` is among the strategies.
    pub fn has_retain_keys(&self) -> bool {
        self.retain_keys
    }

    /// The merge key of a list merged by key.
    pub fn merge_key(&self) -> Option<&str> {
        self.merge_key.as_deref()
    }

    /// The description of the field's type (for a list: its elements' type), if any.
    pub fn schema(&self) -> Option<&TypeSchema> {
        self.schema.as_deref()
    }

    /// Go's kind name for the elements of this list, as Kubernetes prints it in errors.
    pub(crate) fn element_kind_name(&self) -> &'static str {
        if self.primitive_elements {
            "string"
        } else {
            "struct"
        }
    }
}

/// The strategic merge description of one (struct) type: its fields that have a strategy or
/// lead to one.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TypeSchema {
    name: String,
    fields: BTreeMap<String, FieldSchema>,
    atomic: bool,
}

impl TypeSchema {
    /// An empty description named after the Go type (for example `PodSpec`).
    pub fn new(name: impl Into<String>) -> Self {
        TypeSchema {
            name: name.into(),
            fields: BTreeMap::new(),
            atomic: false,
        }
    }

    /// The same description of a type server-side apply owns as a whole
    /// (`+structType=atomic` or `+mapType=atomic`: one manager owns all of a label selector).
    /// Strategic merge patch still merges it.
    pub fn into_atomic(mut self) -> Self {
        self.atomic = true;
        self
    }

    /// Whether server-side apply owns values of this type as a whole.
    pub fn is_atomic(&self) -> bool {
        self.atomic
    }

    /// A description of a top-level kind: `metadata` is `ObjectMeta`.
    pub fn kind(name: impl Into<String>) -> Self {
        TypeSchema::new(name).with_field("metadata", FieldSchema::object(object_meta_schema()))
    }

    /// Adds (or replaces) the description of a field, by its JSON name.
    pub fn with_field(mut self, name: impl Into<String>, field: FieldSchema) -> Self {
        self.fields.insert(name.into(), field);
        self
    }

    /// The type's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The description of a field, by its JSON name.
    pub fn field(&self, name: &str) -> Option<&FieldSchema> {
        self.fields.get(name)
    }

    /// The described fields.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &FieldSchema)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// Descriptions of kinds, looked up by API group and kind.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PatchSchema {
    kinds: BTreeMap<(String, String), Arc<TypeSchema>>,
}

static BUILTIN: LazyLock<PatchSchema> = LazyLock::new(builtin);

impl PatchSchema {
    /// An empty set of descriptions.
    pub fn new() -> Self {
        PatchSchema::default()
    }

    /// The descriptions of Kubernetes' built-in kinds (derived from the `patchStrategy` and
    /// `patchMergeKey` tags of `k8s.io/api`).
    pub fn builtin() -> &'static PatchSchema {
        &BUILTIN
    }

    /// Registers (or replaces) the description of `kind` in API `group` (`""` for the core
    /// group).
    pub fn register(
        &mut self,
        group: impl Into<String>,
        kind: impl Into<String>,
        schema: Arc<TypeSchema>,
    ) {
        self.kinds.insert((group.into(), kind.into()), schema);
    }

    /// The description of `kind` in API `group` (`""` or `"core"` for the core group).
    pub fn lookup(&self, group: &str, kind: &str) -> Option<&TypeSchema> {
        let group = if group == "core" { "" } else { group };
        self.kinds
            .get(&(group.to_string(), kind.to_string()))
            .map(|s| s.as_ref())
    }

    /// The description of `kind` for an `apiVersion` (`v1`, `apps/v1`, …).
    pub fn lookup_api_version(&self, api_version: &str, kind: &str) -> Option<&TypeSchema> {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        self.lookup(group, kind)
    }

    /// The registered (group, kind) pairs.
    pub fn kinds(&self) -> impl Iterator<Item = (&str, &str)> {
        self.kinds.keys().map(|(g, k)| (g.as_str(), k.as_str()))
    }
}

/// `metav1.ObjectMeta`: owner references merge by `uid`, finalizers as a set.
pub fn object_meta_schema() -> Arc<TypeSchema> {
    static OBJECT_META: LazyLock<Arc<TypeSchema>> = LazyLock::new(|| {
        Arc::new(
            TypeSchema::new("ObjectMeta")
                .with_field(
                    "ownerReferences",
                    FieldSchema::merge_list("uid").with_schema(atomic("OwnerReference")),
                )
                .with_field("finalizers", FieldSchema::merge_set()),
        )
    });
    OBJECT_META.clone()
}

/// `core/v1.PodTemplateSpec`: `metadata` and a `PodSpec`.
pub fn pod_template_spec_schema() -> Arc<TypeSchema> {
    static POD_TEMPLATE_SPEC: LazyLock<Arc<TypeSchema>> = LazyLock::new(|| {
        Arc::new(
            TypeSchema::new("PodTemplateSpec")
                .with_field("metadata", FieldSchema::object(object_meta_schema()))
                .with_field("spec", FieldSchema::object(pod_spec_schema())),
        )
    });
    POD_TEMPLATE_SPEC.clone()
}

/// `core/v1.PodSpec`.
pub fn pod_spec_schema() -> Arc<TypeSchema> {
    static POD_SPEC: LazyLock<Arc<TypeSchema>> = LazyLock::new(|| {
        // Container and EphemeralContainer (whose common part is inlined) share these.
        let env_var_source = object(
            "EnvVarSource",
            vec![
                ("configMapKeyRef", atomic_object("ConfigMapKeySelector")),
                ("secretKeyRef", atomic_object("SecretKeySelector")),
                ("fieldRef", atomic_object("ObjectFieldSelector")),
                ("resourceFieldRef", atomic_object("ResourceFieldSelector")),
            ],
        );
        let env_var = object(
            "EnvVar",
            vec![("valueFrom", FieldSchema::object(env_var_source))],
        );
        let container = Arc::new(
            TypeSchema::new("Container")
                .with_field(
                    "ports",
                    FieldSchema::merge_list("containerPort")
                        .with_list_map_keys(["containerPort", "protocol"])
                        .with_key_default("protocol", "TCP"),
                )
                .with_field("env", FieldSchema::merge_list("name").with_schema(env_var))
                .with_field("volumeMounts", FieldSchema::merge_list("mountPath"))
                .with_field("volumeDevices", FieldSchema::merge_list("devicePath")),
        );
        let containers = || FieldSchema::merge_list("name").with_schema(container.clone());
        Arc::new(
            TypeSchema::new("PodSpec")
                .with_field(
                    "volumes",
                    FieldSchema::merge_list("name").with_retain_keys(),
                )
                .with_field("initContainers", containers())
                .with_field("containers", containers())
                .with_field("ephemeralContainers", containers())
                .with_field(
                    "imagePullSecrets",
                    FieldSchema::merge_list("name").with_schema(atomic("LocalObjectReference")),
                )
                .with_field("hostAliases", FieldSchema::merge_list("ip"))
                .with_field(
                    "topologySpreadConstraints",
                    FieldSchema::merge_list("topologyKey")
                        .with_list_map_keys(["topologyKey", "whenUnsatisfiable"])
                        .with_schema(object(
                            "TopologySpreadConstraint",
                            vec![("labelSelector", label_selector())],
                        )),
                )
                .with_field("nodeSelector", atomic_object("map[string]string"))
                .with_field(
                    "affinity",
                    FieldSchema::object(object(
                        "Affinity",
                        vec![(
                            "nodeAffinity",
                            FieldSchema::object(object(
                                "NodeAffinity",
                                vec![(
                                    "requiredDuringSchedulingIgnoredDuringExecution",
                                    atomic_object("NodeSelector"),
                                )],
                            )),
                        )],
                    )),
                )
                .with_field("schedulingGates", FieldSchema::merge_list("name"))
                .with_field(
                    "resourceClaims",
                    FieldSchema::merge_list("name").with_retain_keys(),
                )
                .with_field("evictionResponders", FieldSchema::merge_list("name")),
        )
    });
    POD_SPEC.clone()
}

fn object(name: &str, fields: Vec<(&str, FieldSchema)>) -> Arc<TypeSchema> {
    Arc::new(
        fields
            .into_iter()
            .fold(TypeSchema::new(name), |t, (k, f)| t.with_field(k, f)),
    )
}

fn kind(name: &str, fields: Vec<(&str, FieldSchema)>) -> Arc<TypeSchema> {
    Arc::new(
        fields
            .into_iter()
            .fold(TypeSchema::kind(name), |t, (k, f)| t.with_field(k, f)),
    )
}

/// A `status` whose `conditions` merge by `type`.
fn conditions_status(name: &str) -> FieldSchema {
    FieldSchema::object(object(
        name,
        vec![("conditions", FieldSchema::merge_list("type"))],
    ))
}

/// A type server-side apply owns as a whole.
fn atomic(name: &str) -> Arc<TypeSchema> {
    Arc::new(TypeSchema::new(name).into_atomic())
}

/// A field of a type server-side apply owns as a whole.
fn atomic_object(name: &str) -> FieldSchema {
    FieldSchema::object(atomic(name))
}

/// A `metav1.LabelSelector` field (`+structType=atomic`).
fn label_selector() -> FieldSchema {
    atomic_object("LabelSelector")
}

/// A `spec` holding a pod `template` and a `selector` (a label selector or, for replication
/// controllers, an atomic map).
fn template_spec(name: &str, selector: FieldSchema) -> FieldSchema {
    FieldSchema::object(object(
        name,
        vec![
            ("template", FieldSchema::object(pod_template_spec_schema())),
            ("selector", selector),
        ],
    ))
}

fn builtin() -> PatchSchema {
    let mut schema = PatchSchema::new();
    let mut add = |group: &str, schema_for_kind: Arc<TypeSchema>| {
        let name = schema_for_kind.name().to_string();
        schema.register(group, name, schema_for_kind);
    };

    // core/v1
    let pod_status = object(
        "PodStatus",
        vec![
            ("conditions", FieldSchema::merge_list("type")),
            ("hostIPs", FieldSchema::merge_list("ip").with_atomic_list()),
            ("podIPs", FieldSchema::merge_list("ip")),
            (
                "resourceClaimStatuses",
                FieldSchema::merge_list("name").with_retain_keys(),
            ),
            (
                "nodeAllocatableResourceClaimStatuses",
                FieldSchema::merge_list("resourceClaimName").with_schema(object(
                    "NodeAllocatableResourceClaimStatus",
                    vec![
                        ("mapping", FieldSchema::merge_list("name")),
                        ("overhead", FieldSchema::merge_list("name")),
                    ],
                )),
            ),
        ],
    );
    add(
        "",
        kind(
            "Pod",
            vec![
                ("spec", FieldSchema::object(pod_spec_schema())),
                ("status", FieldSchema::object(pod_status)),
            ],
        ),
    );
    add(
        "",
        kind(
            "PodTemplate",
            vec![("template", FieldSchema::object(pod_template_spec_schema()))],
        ),
    );
    add(
        "",
        kind(
            "ReplicationController",
            vec![
                (
                    "spec",
                    template_spec(
                        "ReplicationControllerSpec",
                        atomic_object("map[string]string"),
                    ),
                ),
                ("status", conditions_status("ReplicationControllerStatus")),
            ],
        ),
    );
    add(
        "",
        kind(
            "Service",
            vec![
                (
                    "spec",
                    FieldSchema::object(object(
                        "ServiceSpec",
                        vec![
                            (
                                "ports",
                                FieldSchema::merge_list("port")
                                    .with_list_map_keys(["port", "protocol"])
                                    .with_key_default("protocol", "TCP"),
                            ),
                            ("selector", atomic_object("map[string]string")),
                        ],
                    )),
                ),
                ("status", conditions_status("ServiceStatus")),
            ],
        ),
    );
    add(
        "",
        kind(
            "ServiceAccount",
            vec![(
                "secrets",
                FieldSchema::merge_list("name").with_schema(atomic("ObjectReference")),
            )],
        ),
    );
    add(
        "",
        kind(
            "Namespace",
            vec![("status", conditions_status("NamespaceStatus"))],
        ),
    );
    add(
        "",
        kind(
            "Node",
            vec![
                (
                    "spec",
                    FieldSchema::object(object(
                        "NodeSpec",
                        vec![("podCIDRs", FieldSchema::merge_set())],
                    )),
                ),
                (
                    "status",
                    FieldSchema::object(object(
                        "NodeStatus",
                        vec![
                            ("conditions", FieldSchema::merge_list("type")),
                            ("addresses", FieldSchema::merge_list("type")),
                        ],
                    )),
                ),
            ],
        ),
    );
    add(
        "",
        kind(
            "PersistentVolumeClaim",
            vec![
                (
                    "spec",
                    FieldSchema::object(object(
                        "PersistentVolumeClaimSpec",
                        vec![
                            ("selector", label_selector()),
                            ("dataSource", atomic_object("TypedLocalObjectReference")),
                        ],
                    )),
                ),
                (
                    "status",
                    FieldSchema::object(object(
                        "PersistentVolumeClaimStatus",
                        vec![
                            ("conditions", FieldSchema::merge_list("type")),
                            (
                                "healthStatus",
                                FieldSchema::object(object(
                                    "VolumeHealthStatus",
                                    vec![("healthConditions", FieldSchema::merge_list("status"))],
                                )),
                            ),
                        ],
                    )),
                ),
            ],
        ),
    );
    add(
        "",
        kind(
            "ComponentStatus",
            vec![("conditions", FieldSchema::merge_list("type"))],
        ),
    );
    add(
        "",
        kind(
            "Event",
            vec![
                ("involvedObject", atomic_object("ObjectReference")),
                ("related", atomic_object("ObjectReference")),
            ],
        ),
    );
    add(
        "",
        kind(
            "ResourceQuota",
            vec![(
                "spec",
                FieldSchema::object(object(
                    "ResourceQuotaSpec",
                    vec![("scopeSelector", atomic_object("ScopeSelector"))],
                )),
            )],
        ),
    );
    for name in [
        "ConfigMap",
        "Secret",
        "Endpoints",
        "PersistentVolume",
        "LimitRange",
    ] {
        add("", kind(name, vec![]));
    }

    // apps/v1
    add(
        "apps",
        kind(
            "Deployment",
            vec![
                (
                    "spec",
                    FieldSchema::object(object(
                        "DeploymentSpec",
                        vec![
                            ("template", FieldSchema::object(pod_template_spec_schema())),
                            ("selector", label_selector()),
                            ("strategy", FieldSchema::retain_keys()),
                        ],
                    )),
                ),
                ("status", conditions_status("DeploymentStatus")),
            ],
        ),
    );
    for (name, spec, status) in [
        ("ReplicaSet", "ReplicaSetSpec", "ReplicaSetStatus"),
        ("StatefulSet", "StatefulSetSpec", "StatefulSetStatus"),
        ("DaemonSet", "DaemonSetSpec", "DaemonSetStatus"),
    ] {
        add(
            "apps",
            kind(
                name,
                vec![
                    ("spec", template_spec(spec, label_selector())),
                    ("status", conditions_status(status)),
                ],
            ),
        );
    }
    add("apps", kind("ControllerRevision", vec![]));

    // batch/v1
    let job_spec = object(
        "JobSpec",
        vec![
            ("template", FieldSchema::object(pod_template_spec_schema())),
            ("selector", label_selector()),
            (
                "scheduling",
                FieldSchema::object(object(
                    "JobSchedulingConfiguration",
                    vec![("resourceClaims", FieldSchema::merge_list("name"))],
                )),
            ),
        ],
    );
    add(
        "batch",
        kind(
            "Job",
            vec![
                ("spec", FieldSchema::object(job_spec.clone())),
                (
                    "status",
                    FieldSchema::object(object(
                        "JobStatus",
                        vec![(
                            "conditions",
                            FieldSchema::merge_list("type").with_atomic_list(),
                        )],
                    )),
                ),
            ],
        ),
    );
    add(
        "batch",
        kind(
            "CronJob",
            vec![(
                "spec",
                FieldSchema::object(object(
                    "CronJobSpec",
                    vec![(
                        "jobTemplate",
                        FieldSchema::object(object(
                            "JobTemplateSpec",
                            vec![
                                ("metadata", FieldSchema::object(object_meta_schema())),
                                ("spec", FieldSchema::object(job_spec)),
                            ],
                        )),
                    )],
                )),
            )],
        ),
    );

    // Kinds with nothing but ObjectMeta to describe.
    for (group, name) in [
        ("coordination.k8s.io", "Lease"),
        ("rbac.authorization.k8s.io", "Role"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "RoleBinding"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("autoscaling", "Scale"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "IngressClass"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("events.k8s.io", "Event"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding",
        ),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("node.k8s.io", "RuntimeClass"),
    ] {
        add(group, kind(name, vec![]));
    }

    // Kinds whose status conditions merge by type.
    for (group, name, status) in [
        ("policy", "PodDisruptionBudget", "PodDisruptionBudgetStatus"),
        (
            "autoscaling",
            "HorizontalPodAutoscaler",
            "HorizontalPodAutoscalerStatus",
        ),
        ("networking.k8s.io", "ServiceCIDR", "ServiceCIDRStatus"),
        ("apiregistration.k8s.io", "APIService", "APIServiceStatus"),
        (
            "flowcontrol.apiserver.k8s.io",
            "FlowSchema",
            "FlowSchemaStatus",
        ),
        (
            "flowcontrol.apiserver.k8s.io",
            "PriorityLevelConfiguration",
            "PriorityLevelConfigurationStatus",
        ),
    ] {
        let mut fields = vec![("status", conditions_status(status))];
        if name == "PodDisruptionBudget" {
            fields.push((
                "spec",
                FieldSchema::object(object(
                    "PodDisruptionBudgetSpec",
                    vec![("selector", FieldSchema::replace())],
                )),
            ));
        }
        add(group, kind(name, fields));
    }

    add(
        "storage.k8s.io",
        kind(
            "CSINode",
            vec![(
                "spec",
                FieldSchema::object(object(
                    "CSINodeSpec",
                    vec![("drivers", FieldSchema::merge_list("name"))],
                )),
            )],
        ),
    );
    add(
        "resource.k8s.io",
        kind(
            "ResourceClaim",
            vec![(
                "status",
                FieldSchema::object(object(
                    "ResourceClaimStatus",
                    vec![("reservedFor", FieldSchema::merge_list("uid"))],
                )),
            )],
        ),
    );

    // admissionregistration.k8s.io
    let webhooks = FieldSchema::merge_list("name").with_schema(object(
        "Webhook",
        vec![("matchConditions", FieldSchema::merge_list("name"))],
    ));
    add(
        "admissionregistration.k8s.io",
        kind(
            "ValidatingWebhookConfiguration",
            vec![("webhooks", webhooks.clone())],
        ),
    );
    add(
        "admissionregistration.k8s.io",
        kind("MutatingWebhookConfiguration", vec![("webhooks", webhooks)]),
    );
    add(
        "admissionregistration.k8s.io",
        kind(
            "ValidatingAdmissionPolicy",
            vec![(
                "spec",
                FieldSchema::object(object(
                    "ValidatingAdmissionPolicySpec",
                    vec![
                        ("matchConditions", FieldSchema::merge_list("name")),
                        ("variables", FieldSchema::merge_list("name")),
                    ],
                )),
            )],
        ),
    );
    add(
        "admissionregistration.k8s.io",
        kind(
            "MutatingAdmissionPolicy",
            vec![(
                "spec",
                FieldSchema::object(object(
                    "MutatingAdmissionPolicySpec",
                    vec![("matchConditions", FieldSchema::merge_list("name"))],
                )),
            )],
        ),
    );

    schema
}
