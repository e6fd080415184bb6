//! `components.schemas` of one group-version document: the schemas of its kinds and of
//! everything they reference, from `k8s-openapi`'s `schemars` implementations.
//!
//! One [`SchemaGenerator`] with OpenAPI 3.0 settings collects every definition reachable from
//! the document's kinds under its Kubernetes name (`k8s-openapi` names its schemas the way
//! Kubernetes does, `io.k8s.api.apps.v1.Deployment`), with references written
//! `#/components/schemas/<name>`; the generator's transforms then put a described reference
//! in `allOf` (`{"allOf": [{"$ref": ...}], "description": ...}`), the form kube-apiserver
//! publishes and the one `kubectl explain` reads field descriptions from.
//!
//! On top of that this module adds what the Go types carry outside their schemas:
//!
//! - the `XList` kinds (`k8s-openapi` has one generic `List<T>` without a schema), built from
//!   the item kind's own `apiVersion`/`kind` properties and `ListMeta`;
//! - `x-kubernetes-group-version-kind` on every top-level kind and list (`kubectl explain`
//!   and `kubectl apply` find a kind's schema by it);
//! - `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` from the strategic merge
//!   descriptions the server itself patches with
//!   ([`PatchSchema::builtin`](konverge_apimachinery::patch::PatchSchema::builtin)), so that
//!   the patches `kubectl apply` computes from this document are the ones the server merges
//!   the same way.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::generate::SchemaSettings;
use k8s_openapi::schemars::{JsonSchema, Schema, SchemaGenerator};
use konverge_apimachinery::patch::{PatchSchema, PatchStrategy, TypeSchema};
use serde_json::{Map, Value, json};

use super::kinds;
use crate::resources::ResourceType;

/// How references to component schemas start.
pub(crate) const REF_PREFIX: &str = "#/components/schemas/";

/// The schema names one served resource's operations refer to.
#[derive(Debug, Clone)]
pub(crate) struct ResourceSchemas {
    /// The resource.
    pub(crate) rt: Arc<ResourceType>,
    /// The kind's schema, `io.k8s.api.apps.v1.Deployment`.
    pub(crate) kind: String,
    /// The list kind's schema, `io.k8s.api.apps.v1.DeploymentList`.
    pub(crate) list: String,
}

/// The schema names of the API machinery types operations refer to.
#[derive(Debug, Clone)]
pub(crate) struct CommonSchemas {
    /// `Status`, the answer to deletions and failures.
    pub(crate) status: String,
    /// `DeleteOptions`, the body of deletions.
    pub(crate) delete_options: String,
    /// `WatchEvent`, what watches stream.
    pub(crate) watch_event: String,
    /// `Patch`, the body of patches.
    pub(crate) patch: String,
    /// `APIResourceList`, the group-version's resource discovery.
    pub(crate) api_resource_list: String,
    /// `autoscaling/v1` `Scale`, if a resource has a scale subresource.
    pub(crate) scale: Option<String>,
}

/// The schemas of one group-version document.
#[derive(Debug)]
pub(crate) struct Components {
    /// `components.schemas`.
    pub(crate) schemas: Map<String, Value>,
    /// What each resource's operations refer to, in catalog order.
    pub(crate) resources: Vec<ResourceSchemas>,
    /// What every operation may refer to.
    pub(crate) common: CommonSchemas,
}

/// The name a reference schema (`{"$ref": "#/components/schemas/<name>"}`) points at.
fn ref_name(schema: &Schema) -> Option<String> {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix(REF_PREFIX))
        .map(str::to_string)
}

fn subschema_name<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    let schema = generator.subschema_for::<T>();
    ref_name(&schema).unwrap_or_else(|| T::schema_name().into_owned())
}

/// A reference to a component schema.
pub(crate) fn reference(name: &str) -> Value {
    json!({ "$ref": format!("{REF_PREFIX}{name}") })
}

/// The definition name of a custom resource's kind (one that `k8s-openapi` has no type for
/// and a definition serves), or `None` for built-in kinds.
pub(crate) fn custom_definition_name(rt: &ResourceType) -> Option<String> {
    (rt.custom.is_some() && kinds::lookup(&rt.group, &rt.version, &rt.kind).is_none())
        .then(|| untyped_definition_name(rt))
}

/// The definition name of a kind `k8s-openapi` has no type for: Kubernetes names custom
/// resources' schemas after the reversed group (`com.example.stable.v1.CronTab`).
fn untyped_definition_name(rt: &ResourceType) -> String {
    let mut parts: Vec<&str> = rt.group.split('.').filter(|p| !p.is_empty()).collect();
    parts.reverse();
    parts.push(&rt.version);
    parts.push(&rt.kind);
    parts.join(".")
}

const OBJECT_META_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_META_DESCRIPTION: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// The schema of a kind without a typed schema (a custom resource): type meta, object
/// metadata, and any other fields.
fn untyped_kind_schema(object_meta: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiVersion": { "description": API_VERSION_DESCRIPTION, "type": "string" },
            "kind": { "description": KIND_DESCRIPTION, "type": "string" },
            "metadata": { "allOf": [reference(object_meta)], "description": OBJECT_META_DESCRIPTION },
        },
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The schema of a custom resource: its definition's `openAPIV3Schema`, with the standard
/// type meta and object metadata, as kube-apiserver publishes it.
fn custom_kind_schema(schema: &Value, object_meta: &str) -> Value {
    let mut schema = schema.clone();
    if !schema.is_object() {
        return untyped_kind_schema(object_meta);
    }
    let properties = schema
        .as_object_mut()
        .map(|s| s.entry("properties").or_insert_with(|| json!({})));
    if let Some(Value::Object(properties)) = properties {
        properties.insert(
            "apiVersion".into(),
            json!({ "description": API_VERSION_DESCRIPTION, "type": "string" }),
        );
        properties.insert(
            "kind".into(),
            json!({ "description": KIND_DESCRIPTION, "type": "string" }),
        );
        properties.insert(
            "metadata".into(),
            json!({ "allOf": [reference(object_meta)], "description": OBJECT_META_DESCRIPTION }),
        );
    }
    schema["type"] = json!("object");
    schema
}

/// The schema of `<Kind>List`: the item kind's type meta, `ListMeta` and the items.
fn list_schema(kind_schema: Option<&Value>, kind: &str, kind_name: &str, list_meta: &str) -> Value {
    let property = |name: &str, description: &str| {
        kind_schema
            .and_then(|s| s.pointer(&format!("/properties/{name}")))
            .cloned()
            .unwrap_or_else(|| json!({ "description": description, "type": "string" }))
    };
    json!({
        "description": format!("{kind}List is a list of {kind} objects."),
        "type": "object",
        "properties": {
            "apiVersion": property("apiVersion", API_VERSION_DESCRIPTION),
            "items": {
                "description": format!("List of {kind} objects."),
                "type": "array",
                "items": reference(kind_name),
            },
            "kind": property("kind", KIND_DESCRIPTION),
            "metadata": { "allOf": [reference(list_meta)], "description": LIST_META_DESCRIPTION },
        },
        "required": ["items"],
    })
}

/// A group/version/kind as the `x-kubernetes-group-version-kind` extension writes it.
pub(crate) fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({ "group": group, "kind": kind, "version": version })
}

fn set_gvks(schemas: &mut Map<String, Value>, name: &str, gvks: Vec<Value>) {
    if let Some(Value::Object(schema)) = schemas.get_mut(name) {
        schema.insert("x-kubernetes-group-version-kind".into(), Value::Array(gvks));
    }
}

/// The schema a property's value has, if it is a reference: `{"$ref"}`, `{"allOf": [{"$ref"}]}`,
/// or the same as array items.
fn referenced_name(property: &Value) -> Option<String> {
    let direct = |schema: &Value| -> Option<String> {
        schema
            .get("$ref")
            .or_else(|| schema.pointer("/allOf/0/$ref"))
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix(REF_PREFIX))
            .map(str::to_string)
    };
    direct(property).or_else(|| property.get("items").and_then(direct))
}

/// Writes the strategic merge metadata of `type_schema` onto the properties of the schema
/// `name`, and recursively onto the schemas its described fields refer to.
fn annotate_patch_metadata(
    schemas: &mut Map<String, Value>,
    name: &str,
    type_schema: &TypeSchema,
    depth: usize,
) {
    // The descriptions are finite trees; the bound only guards against a malformed one.
    if depth > 32 {
        return;
    }
    for (field, field_schema) in type_schema.fields() {
        let Some(property) = schemas
            .get_mut(name)
            .and_then(|s| s.get_mut("properties"))
            .and_then(|p| p.get_mut(field))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let mut strategies = Vec::new();
        if field_schema.strategy() == PatchStrategy::Merge {
            strategies.push("merge");
        } else if field_schema.strategy() == PatchStrategy::Replace {
            strategies.push("replace");
        }
        if field_schema.has_retain_keys() {
            strategies.push("retainKeys");
        }
        if !strategies.is_empty() {
            property
                .entry("x-kubernetes-patch-strategy")
                .or_insert_with(|| Value::String(strategies.join(",")));
        }
        if let Some(key) = field_schema.merge_key() {
            property
                .entry("x-kubernetes-patch-merge-key")
                .or_insert_with(|| Value::String(key.to_string()));
        }
        // What server-side apply reads: how lists are keyed and what is owned whole.
        if field_schema.strategy() == PatchStrategy::Merge {
            let keys = field_schema.list_map_keys();
            if field_schema.is_atomic_list() {
                property.insert("x-kubernetes-list-type".into(), json!("atomic"));
            } else if keys.is_empty() {
                property.insert("x-kubernetes-list-type".into(), json!("set"));
            } else {
                property.insert("x-kubernetes-list-type".into(), json!("map"));
                property.insert("x-kubernetes-list-map-keys".into(), json!(keys));
            }
        }
        let target = referenced_name(&Value::Object(property.clone()));
        let atomic = field_schema.schema().is_some_and(TypeSchema::is_atomic);
        if atomic && target.is_none() {
            property.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
        if let (Some(sub), Some(target)) = (field_schema.schema(), target) {
            if atomic && let Some(def) = schemas.get_mut(&target).and_then(Value::as_object_mut) {
                def.insert("x-kubernetes-map-type".into(), json!("atomic"));
            }
            annotate_patch_metadata(schemas, &target, sub, depth + 1);
        }
    }
}

/// The schemas of the group-version `group`/`version` serving `resources`; `served` lists
/// every group-version the server serves (the extension of the shared `DeleteOptions` and
/// `WatchEvent` kinds names them all, as kube-apiserver's does).
pub(crate) fn build(resources: &[Arc<ResourceType>], served: &[(String, String)]) -> Components {
    let mut generator: SchemaGenerator = SchemaSettings::openapi3()
        .with(|s| s.meta_schema = None)
        .into_generator();

    let list_meta = subschema_name::<meta::ListMeta>(&mut generator);
    let object_meta = subschema_name::<meta::ObjectMeta>(&mut generator);
    let common = CommonSchemas {
        status: subschema_name::<meta::Status>(&mut generator),
        delete_options: subschema_name::<meta::DeleteOptions>(&mut generator),
        watch_event: subschema_name::<meta::WatchEvent<meta::Status>>(&mut generator),
        patch: subschema_name::<meta::Patch>(&mut generator),
        api_resource_list: subschema_name::<meta::APIResourceList>(&mut generator),
        scale: resources
            .iter()
            .any(|rt| rt.scale.is_some())
            .then(|| subschema_name::<k8s_openapi::api::autoscaling::v1::Scale>(&mut generator)),
    };

    // Typed kinds first (collecting their definitions), then everything else.
    let mut typed = Vec::with_capacity(resources.len());
    for rt in resources {
        let name = kinds::lookup(&rt.group, &rt.version, &rt.kind)
            .and_then(|known| ref_name(&(known.schema)(&mut generator)));
        typed.push(name);
    }
    let mut schemas = generator.take_definitions(true);

    let mut refs = Vec::with_capacity(resources.len());
    for (rt, typed_name) in resources.iter().zip(typed) {
        let kind = match typed_name {
            Some(name) => name,
            None => {
                let name = untyped_definition_name(rt);
                let schema = match rt.custom.as_ref().and_then(|c| c.schema.as_ref()) {
                    Some(schema) => custom_kind_schema(schema, &object_meta),
                    None => untyped_kind_schema(&object_meta),
                };
                schemas.entry(name.clone()).or_insert(schema);
                name
            }
        };
        let list = format!("{kind}List");
        let list_value = list_schema(schemas.get(&kind), &rt.kind, &kind, &list_meta);
        schemas.entry(list.clone()).or_insert(list_value);
        set_gvks(
            &mut schemas,
            &kind,
            vec![gvk(&rt.group, &rt.version, &rt.kind)],
        );
        set_gvks(
            &mut schemas,
            &list,
            vec![gvk(&rt.group, &rt.version, &rt.list_kind())],
        );
        if rt.codec.is_some()
            && let Some(type_schema) = PatchSchema::builtin().lookup(&rt.group, &rt.kind)
        {
            annotate_patch_metadata(&mut schemas, &kind, type_schema, 0);
        }
        refs.push(ResourceSchemas {
            rt: rt.clone(),
            kind,
            list,
        });
    }

    set_gvks(&mut schemas, &common.status, vec![gvk("", "v1", "Status")]);
    for (name, kind) in [
        (&common.delete_options, "DeleteOptions"),
        (&common.watch_event, "WatchEvent"),
    ] {
        let gvks = served.iter().map(|(g, v)| gvk(g, v, kind)).collect();
        set_gvks(&mut schemas, name, gvks);
    }
    if let Some(scale) = &common.scale {
        set_gvks(&mut schemas, scale, vec![gvk("autoscaling", "v1", "Scale")]);
    }
    Components {
        schemas,
        resources: refs,
        common,
    }
}
