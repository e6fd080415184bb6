//! The built-in admission plugins konverge runs, each as its kube-apiserver namesake.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin};
use crate::error::{ApiError, Result, Target};
use crate::lister::Lister;
use crate::resources::ResourceType;

/// kube's `admission.NewForbidden`: `<resource> "<name>" is forbidden: <why>`.
pub(super) fn forbidden(attributes: &Attributes<'_>, why: String) -> ApiError {
    ApiError::forbidden(
        Target {
            group: &attributes.rt.group,
            resource: &attributes.rt.plural,
            name: attributes.name,
        },
        why,
    )
}

/// Every object of `group/version/plural`, read consistently.
async fn list(
    registry: &dyn Lister,
    group: &str,
    version: &str,
    plural: &str,
) -> Result<Vec<Arc<Value>>> {
    let Some(rt) = registry.catalog().get(group, version, plural) else {
        return Ok(Vec::new());
    };
    registry.list(&rt, None, None).await
}

/// Of the objects annotated as the default (`annotation` or `beta_annotation` = `"true"`), the
/// newest (then the first by name), as kube's default-class plugins choose.
fn newest_default(items: &[Arc<Value>], annotations: &[&str]) -> Option<String> {
    items
        .iter()
        .filter(|item| {
            annotations.iter().any(|a| {
                item.pointer("/metadata/annotations")
                    .and_then(|m| m.get(*a))
                    .and_then(Value::as_str)
                    == Some("true")
            })
        })
        .max_by(|a, b| {
            let created = |v: &Value| {
                v.pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let name = |v: &Value| {
                v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            created(a)
                .cmp(&created(b))
                .then_with(|| name(b).cmp(&name(a)))
        })
        .and_then(|item| item.pointer("/metadata/name").and_then(Value::as_str))
        .map(String::from)
}

/// What a default-class plugin fills in: the objects it defaults, their class field, the
/// annotation that opts out, and how the default class is marked.
struct ClassDefault {
    name: &'static str,
    group: &'static str,
    plural: &'static str,
    field: &'static str,
    opt_out: &'static str,
    class_group: &'static str,
    class_plural: &'static str,
    markers: &'static [&'static str],
}

impl ClassDefault {
    /// Sets `spec.<field>` of a created object that names no class (and does not opt out) to
    /// the default class's name, if there is a default class.
    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        let named = object
            .get("spec")
            .and_then(|spec| spec.get(self.field))
            .is_some_and(|v| !v.is_null());
        let opted_out = object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(self.opt_out))
            .is_some();
        if !attributes.creates(self.group, self.plural) || named || opted_out {
            return Ok(false);
        }
        let classes = list(registry, self.class_group, "v1", self.class_plural).await?;
        let Some(default) = newest_default(&classes, self.markers) else {
            return Ok(false);
        };
        if !object.get("spec").is_some_and(Value::is_object) {
            object["spec"] = json!({});
        }
        object["spec"][self.field] = json!(default);
        Ok(true)
    }
}

const STORAGE_CLASS: ClassDefault = ClassDefault {
    name: "DefaultStorageClass",
    group: "",
    plural: "persistentvolumeclaims",
    field: "storageClassName",
    opt_out: "volume.beta.kubernetes.io/storage-class",
    class_group: "storage.k8s.io",
    class_plural: "storageclasses",
    markers: &[
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ],
};

const INGRESS_CLASS: ClassDefault = ClassDefault {
    name: "DefaultIngressClass",
    group: "networking.k8s.io",
    plural: "ingresses",
    field: "ingressClassName",
    opt_out: "kubernetes.io/ingress.class",
    class_group: "networking.k8s.io",
    class_plural: "ingressclasses",
    markers: &["ingressclass.kubernetes.io/is-default-class"],
};

/// A default-class plugin: [`DefaultClass::storage`] or [`DefaultClass::ingress`].
#[derive(Clone, Copy)]
pub struct DefaultClass(&'static ClassDefault);

impl std::fmt::Debug for DefaultClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl DefaultClass {
    /// `DefaultStorageClass`: a PersistentVolumeClaim created without
    /// `spec.storageClassName` (and without the beta annotation) gets the default
    /// StorageClass's name.
    pub fn storage() -> DefaultClass {
        DefaultClass(&STORAGE_CLASS)
    }

    /// `DefaultIngressClass`: an Ingress created without `spec.ingressClassName` (and without
    /// the `kubernetes.io/ingress.class` annotation) gets the default IngressClass's name.
    pub fn ingress() -> DefaultClass {
        DefaultClass(&INGRESS_CLASS)
    }
}

#[async_trait::async_trait]
impl Plugin for DefaultClass {
    fn name(&self) -> &'static str {
        self.0.name
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        rt.group == self.0.group && rt.plural == self.0.plural
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        self.0.admit(attributes, object, registry).await
    }
}

/// `Priority`: a pod created with a `priorityClassName` gets that class's value as its
/// `priority` and its `preemptionPolicy` (403 if the class does not exist); without one, the
/// global default class's, or priority 0 and `PreemptLowerPriority`. A priority or policy the
/// client set must agree. A PriorityClass may be the global default only if no other is.
#[derive(Debug, Clone, Copy)]
pub struct Priority;

/// The classes marked `globalDefault`, the lowest value first (kube picks it if a race made
/// two).
fn default_class(classes: &[Arc<Value>]) -> Option<&Value> {
    classes
        .iter()
        .filter(|c| c["globalDefault"] == true)
        .min_by_key(|c| c["value"].as_i64().unwrap_or(0))
        .map(|c| c.as_ref())
}

#[async_trait::async_trait]
impl Plugin for Priority {
    fn name(&self) -> &'static str {
        "Priority"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        rt.is(crate::resources::PODS) || rt.is(crate::resources::PRIORITY_CLASSES)
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        if attributes.subresource.is_some() || !attributes.rt.is(crate::resources::PODS) {
            return Ok(false);
        }
        if attributes.operation == Operation::Update {
            // The plugin set them on create; an update that leaves them out keeps them.
            let mut changed = false;
            if let (Some(old), Some(spec)) = (attributes.old, object.get_mut("spec"))
                && spec.is_object()
            {
                for field in ["priority", "preemptionPolicy"] {
                    if spec.get(field).is_none_or(Value::is_null)
                        && let Some(kept) = old["spec"].get(field).filter(|v| !v.is_null())
                    {
                        spec[field] = kept.clone();
                        changed = true;
                    }
                }
            }
            return Ok(changed);
        }
        let classes = list(registry, "scheduling.k8s.io", "v1", "priorityclasses").await?;
        let named = object
            .pointer("/spec/priorityClassName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(String::from);
        let (class_name, priority, policy) = match &named {
            None => match default_class(&classes) {
                Some(class) => (
                    class["metadata"]["name"].as_str().map(String::from),
                    class["value"].as_i64().unwrap_or(0),
                    class["preemptionPolicy"]
                        .as_str()
                        .unwrap_or("PreemptLowerPriority")
                        .to_string(),
                ),
                None => (None, 0, "PreemptLowerPriority".to_string()),
            },
            Some(name) => {
                let Some(class) = classes
                    .iter()
                    .find(|c| c["metadata"]["name"].as_str() == Some(name))
                else {
                    return Err(forbidden(
                        attributes,
                        format!("no PriorityClass with name {name} was found"),
                    ));
                };
                (
                    None,
                    class["value"].as_i64().unwrap_or(0),
                    class["preemptionPolicy"]
                        .as_str()
                        .unwrap_or("PreemptLowerPriority")
                        .to_string(),
                )
            }
        };
        if !object.get("spec").is_some_and(Value::is_object) {
            object["spec"] = json!({});
        }
        let spec = &mut object["spec"];
        if let Some(given) = spec.get("priority").and_then(Value::as_i64)
            && given != priority
        {
            return Err(forbidden(
                attributes,
                format!(
                    "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
                ),
            ));
        }
        if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
            && given != policy
        {
            return Err(forbidden(
                attributes,
                format!(
                    "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
                ),
            ));
        }
        if let Some(class_name) = class_name {
            spec["priorityClassName"] = json!(class_name);
        }
        spec["priority"] = json!(priority);
        spec["preemptionPolicy"] = json!(policy);
        Ok(true)
    }

    async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<()> {
        if attributes.subresource.is_some()
            || !attributes.rt.is(crate::resources::PRIORITY_CLASSES)
            || object["globalDefault"] != true
        {
            return Ok(());
        }
        let classes = list(registry, "scheduling.k8s.io", "v1", "priorityclasses").await?;
        if let Some(existing) = default_class(&classes) {
            let existing = existing["metadata"]["name"].as_str().unwrap_or("");
            if attributes.operation == Operation::Create || existing != attributes.name {
                return Err(forbidden(
                    attributes,
                    format!(
                        "PriorityClass {existing} is already marked as default. Only one default can exist"
                    ),
                ));
            }
        }
        Ok(())
    }
}
