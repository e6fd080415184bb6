//! OpenAPI v2 (`/openapi/v2`): the union of the v3 group-version documents, rewritten in
//! Swagger 2.0 form.
//!
//! kubectl 1.27 and 1.28 fetch `/openapi/v2` (as protobuf, see [`super::proto`]) before
//! `apply`, `create` and `explain` and fail if it does not parse; later versions only fall
//! back to it. The conversion is mechanical: `#/components/schemas/` references become
//! `#/definitions/`, a described reference goes back from `allOf` to a `$ref` with siblings
//! (how Kubernetes' v2 document writes it, and the only form kube-openapi's v2 parser follows),
//! request bodies become `body` parameters, and media types become `consumes`/`produces`.

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

/// The v2 document of the v3 group-version documents `documents`.
pub(crate) fn document<'a>(documents: impl IntoIterator<Item = &'a Value>, version: &str) -> Value {
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
                definitions
                    .entry(name.clone())
                    .or_insert_with(|| schema(value));
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
