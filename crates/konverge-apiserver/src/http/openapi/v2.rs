//! OpenAPI v2 (`/openapi/v2`): the union of the v3 group-version documents, rewritten in
//! Swagger 2.0 form.
//!
//! kubectl 1.27 and 1.28 fetch `/openapi/v2` (as protobuf, see [`super::proto`]) before
//! `apply`, `create` and `explain` and fail if it does not parse; later versions only fall
//! back to it. The conversion is mechanical: `#/components/schemas/` references become
//! `#/definitions/`, a described reference goes back from `allOf` to a `$ref` with siblings
//! (how Kubernetes' v2 document writes it, and the only form kube-openapi's v2 parser follows),
//! request bodies become `body` parameters, and media types become `consumes`/`produces`.
//! Custom resources' schemas are first made what kube-apiserver publishes in v2 for them
//! ([`custom_resource`]).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

const V3_PREFIX: &str = "#/components/schemas/";
const V2_PREFIX: &str = "#/definitions/";

/// A schema in v2 form.
fn schema(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                match key.as_str() {
                    "$ref" => {
                        let target = value.as_str().unwrap_or_default();
                        let target = match target.strip_prefix(V3_PREFIX) {
                            Some(name) => format!("{V2_PREFIX}{name}"),
                            None => target.to_string(),
                        };
                        out.insert(key.clone(), Value::String(target));
                    }
                    "nullable" => {}
                    "allOf" => match value.as_array().map(Vec::as_slice) {
                        // A described reference: `$ref` with siblings.
                        Some([only])
                            if only.get("$ref").is_some()
                                && only.as_object().is_some_and(|o| o.len() == 1) =>
                        {
                            if let Value::Object(reference) = schema(only) {
                                out.extend(reference);
                            }
                        }
                        _ => {
                            out.insert(key.clone(), schema(value));
                        }
                    },
                    // Maps of schemas: convert the values, not the keys.
                    "properties" => {
                        let converted = value
                            .as_object()
                            .map(|props| {
                                props
                                    .iter()
                                    .map(|(k, v)| (k.clone(), schema(v)))
                                    .collect::<Map<_, _>>()
                            })
                            .unwrap_or_default();
                        out.insert(key.clone(), Value::Object(converted));
                    }
                    // Literal values: as they are.
                    "enum" | "default" | "example" | "required" => {
                        out.insert(key.clone(), value.clone());
                    }
                    _ if key.starts_with("x-") => {
                        out.insert(key.clone(), value.clone());
                    }
                    _ => {
                        out.insert(key.clone(), schema(value));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(schema).collect()),
        other => other.clone(),
    }
}

/// A v3 parameter (`schema` holding its type) in v2 form (type inline).
fn parameter(value: &Value) -> Value {
    let mut out = Map::new();
    if let Some(map) = value.as_object() {
        for (key, value) in map {
            if key == "schema" {
                if let Some(inner) = value.as_object() {
                    out.extend(inner.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            } else {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

fn parameters(value: Option<&Value>) -> Vec<Value> {
    value
        .and_then(Value::as_array)
        .map(|ps| ps.iter().map(parameter).collect())
        .unwrap_or_default()
}

/// The schema of the first media type of a v3 `content` map, and the media types.
fn content(value: Option<&Value>) -> (Option<Value>, Vec<String>) {
    let Some(content) = value
        .and_then(|v| v.get("content"))
        .and_then(Value::as_object)
    else {
        return (None, Vec::new());
    };
    let schema_value = content
        .values()
        .find_map(|media| media.get("schema"))
        .map(schema);
    (schema_value, content.keys().cloned().collect())
}

fn operation(op: &Value) -> Value {
    let mut out = Map::new();
    let mut produces = BTreeSet::new();
    let mut consumes = Vec::new();
    let mut params = parameters(op.get("parameters"));
    if let Some(body) = op.get("requestBody") {
        let (body_schema, media_types) = content(Some(body));
        consumes = media_types;
        let mut param = json!({ "name": "body", "in": "body", "required": true });
        if let Some(body_schema) = body_schema {
            param["schema"] = body_schema;
        }
        params.insert(0, param);
    }
    let mut responses = Map::new();
    if let Some(rs) = op.get("responses").and_then(Value::as_object) {
        for (code, response) in rs {
            let (response_schema, media_types) = content(Some(response));
            produces.extend(media_types);
            let mut converted = json!({
                "description": response.get("description").cloned().unwrap_or(Value::String(String::new())),
            });
            if let Some(response_schema) = response_schema {
                converted["schema"] = response_schema;
            }
            responses.insert(code.clone(), converted);
        }
    }
    if let Some(map) = op.as_object() {
        for (key, value) in map {
            match key.as_str() {
                "tags" | "description" | "operationId" | "deprecated" => {
                    out.insert(key.clone(), value.clone());
                }
                _ if key.starts_with("x-") => {
                    out.insert(key.clone(), value.clone());
                }
                _ => {}
            }
        }
    }
    if !consumes.is_empty() {
        out.insert("consumes".into(), json!(consumes));
    }
    if !produces.is_empty() {
        out.insert("produces".into(), json!(produces));
    }
    out.insert("schemes".into(), json!(["https"]));
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    out.insert("responses".into(), Value::Object(responses));
    Value::Object(out)
}

fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    if let Some(map) = item.as_object() {
        for (key, value) in map {
            match key.as_str() {
                "get" | "put" | "post" | "delete" | "options" | "head" | "patch" => {
                    out.insert(key.clone(), operation(value));
                }
                "parameters" => {
                    out.insert(key.clone(), Value::Array(parameters(Some(value))));
                }
                _ if key.starts_with("x-") => {
                    out.insert(key.clone(), value.clone());
                }
                _ => {}
            }
        }
    }
    Value::Object(out)
}

/// A custom resource's v3 schema as apiextensions-apiserver publishes it in v2: a schema
/// whose root keeps unknown fields is only `type: object` (kubectl would take its properties
/// for the only ones allowed); otherwise `ToStructuralOpenAPIV2`'s rules hold at every level
/// (see [`structural_v2`]).
fn custom_resource(v3: &Value) -> Value {
    if v3.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        let mut open = json!({"type": "object"});
        if let Some(gvk) = v3.get("x-kubernetes-group-version-kind") {
            open["x-kubernetes-group-version-kind"] = gvk.clone();
        }
        return open;
    }
    let mut out = v3.clone();
    structural_v2(&mut out);
    out
}

/// apiextensions' `ToStructuralOpenAPIV2` on one level of a schema, then its properties,
/// items and additional properties: no `allOf`, `oneOf`, `anyOf` or `not` (a described
/// reference, `allOf` of one `$ref`, is not a value validation and stays); a nullable value
/// loses its type, items and properties (and is no longer required by its parent); a value
/// that keeps unknown fields loses its items and properties, and its type if `object`; an
/// array without items loses its type.
fn structural_v2(s: &mut Value) {
    let Some(map) = s.as_object_mut() else {
        return;
    };
    for junctor in ["oneOf", "anyOf", "not"] {
        map.remove(junctor);
    }
    let described_reference = map
        .get("allOf")
        .and_then(Value::as_array)
        .is_some_and(|all| matches!(all.as_slice(), [only] if only.get("$ref").is_some()));
    if !described_reference {
        map.remove("allOf");
    }
    if map.get("nullable") == Some(&Value::Bool(true)) {
        for key in ["type", "items", "properties", "nullable"] {
            map.remove(key);
        }
    }
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        map.remove("items");
        map.remove("properties");
    }
    if !map.contains_key("items") && map.get("type").and_then(Value::as_str) == Some("array") {
        map.remove("type");
    }
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        && map.get("type").and_then(Value::as_str) == Some("object")
    {
        map.remove("type");
    }
    let nullable_properties: Vec<String> = map
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .filter(|(_, p)| p.get("nullable") == Some(&Value::Bool(true)))
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Array(required)) = map.get_mut("required") {
        required.retain(|r| {
            !r.as_str()
                .is_some_and(|r| nullable_properties.iter().any(|n| n == r))
        });
    }
    if map
        .get("additionalProperties")
        .and_then(|a| a.get("nullable"))
        == Some(&Value::Bool(true))
    {
        map.remove("required");
    }
    if map
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        map.remove("required");
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(structural_v2);
    }
    if let Some(items) = map.get_mut("items") {
        structural_v2(items);
    }
    if let Some(additional) = map
        .get_mut("additionalProperties")
        .filter(|a| a.is_object())
    {
        structural_v2(additional);
    }
}

/// The v2 document of the v3 group-version documents `documents`, in which the definitions
/// named in `custom` are custom resources' schemas.
pub(crate) fn document<'a>(
    documents: impl IntoIterator<Item = &'a Value>,
    version: &str,
    custom: &BTreeSet<String>,
) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for doc in documents {
        if let Some(ps) = doc.get("paths").and_then(Value::as_object) {
            for (path, item) in ps {
                paths.entry(path.clone()).or_insert_with(|| path_item(item));
            }
        }
        if let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, value) in schemas {
                definitions.entry(name.clone()).or_insert_with(|| {
                    if custom.contains(name) {
                        schema(&custom_resource(value))
                    } else {
                        schema(value)
                    }
                });
            }
        }
    }
    json!({
        "swagger": "2.0",
        "info": { "title": "Kubernetes", "version": version },
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "type": "apiKey",
                "name": "authorization",
                "in": "header",
            }
        },
        "security": [{ "BearerToken": [] }],
    })
}
