//! The protobuf form of the OpenAPI v2 document (`openapi.v2.Document` of
//! github.com/google/gnostic-models, `openapiv2/OpenAPIv2.proto`), which is what client-go's
//! `DiscoveryClient.OpenAPISchema` asks for
//! (`Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) and decodes.
//!
//! Only the messages and fields a Kubernetes document uses are written. Vendor extensions and
//! literal values (`enum`, `default`, `example`) are `Any` messages holding YAML text, as
//! gnostic writes them; the JSON text of the value is valid YAML.

use serde_json::{Map, Value};

/// A protobuf message being written.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;

impl Writer {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.buf.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.buf.push(value as u8);
    }

    fn key(&mut self, field: u64, wire: u64) {
        self.varint((field << 3) | wire);
    }

    fn bytes(&mut self, field: u64, bytes: &[u8]) {
        self.key(field, LEN);
        self.varint(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    /// A string field (proto3 leaves out empty strings).
    fn string(&mut self, field: u64, value: &str) {
        if !value.is_empty() {
            self.bytes(field, value.as_bytes());
        }
    }

    /// A repeated string field; always written, even empty strings.
    fn repeated_string(&mut self, field: u64, value: &str) {
        self.bytes(field, value.as_bytes());
    }

    fn bool(&mut self, field: u64, value: bool) {
        if value {
            self.key(field, VARINT);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u64, value: i64) {
        if value != 0 {
            self.key(field, VARINT);
            self.varint(value as u64);
        }
    }

    fn double(&mut self, field: u64, value: f64) {
        if value != 0.0 {
            self.key(field, FIXED64);
            self.buf.extend_from_slice(&value.to_le_bytes());
        }
    }

    /// An embedded message (written even when empty: presence matters for messages).
    fn message(&mut self, field: u64, write: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::default();
        write(&mut inner);
        self.bytes(field, &inner.buf);
    }
}

fn str_of<'a>(map: &'a Map<String, Value>, key: &str) -> &'a str {
    map.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn bool_of(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn strings_of<'a>(map: &'a Map<String, Value>, key: &str) -> impl Iterator<Item = &'a str> {
    map.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// `Any { yaml = 2 }`.
fn any(w: &mut Writer, value: &Value) {
    w.string(2, &value.to_string());
}

/// `NamedAny { name = 1; Any value = 2 }` for every `x-` key of `map`, at `field`.
fn vendor_extensions(w: &mut Writer, field: u64, map: &Map<String, Value>) {
    for (key, value) in map.iter().filter(|(k, _)| k.starts_with("x-")) {
        w.message(field, |w| {
            w.string(1, key);
            w.message(2, |w| any(w, value));
        });
    }
}

/// `Schema`.
fn schema(w: &mut Writer, value: &Value) {
    let Some(map) = value.as_object() else {
        return;
    };
    w.string(1, str_of(map, "$ref"));
    w.string(2, str_of(map, "format"));
    w.string(3, str_of(map, "title"));
    w.string(4, str_of(map, "description"));
    if let Some(default) = map.get("default") {
        w.message(5, |w| any(w, default));
    }
    let number = |key: &str| map.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let integer = |key: &str| map.get(key).and_then(Value::as_i64).unwrap_or(0);
    w.double(6, number("multipleOf"));
    w.double(7, number("maximum"));
    w.bool(8, bool_of(map, "exclusiveMaximum"));
    w.double(9, number("minimum"));
    w.bool(10, bool_of(map, "exclusiveMinimum"));
    w.int64(11, integer("maxLength"));
    w.int64(12, integer("minLength"));
    w.string(13, str_of(map, "pattern"));
    w.int64(14, integer("maxItems"));
    w.int64(15, integer("minItems"));
    w.bool(16, bool_of(map, "uniqueItems"));
    w.int64(17, integer("maxProperties"));
    w.int64(18, integer("minProperties"));
    for required in strings_of(map, "required") {
        w.repeated_string(19, required);
    }
    for value in map
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(20, |w| any(w, value));
    }
    match map.get("additionalProperties") {
        Some(Value::Bool(allowed)) => w.message(21, |w| {
            // `boolean = 2` of the oneof: written even when false.
            w.key(2, VARINT);
            w.varint(u64::from(*allowed));
        }),
        Some(value @ Value::Object(_)) => w.message(21, |w| w.message(1, |w| schema(w, value))),
        _ => {}
    }
    match map.get("type") {
        Some(Value::String(t)) => w.message(22, |w| w.repeated_string(1, t)),
        Some(Value::Array(ts)) => w.message(22, |w| {
            for t in ts.iter().filter_map(Value::as_str) {
                w.repeated_string(1, t);
            }
        }),
        _ => {}
    }
    match map.get("items") {
        Some(value @ Value::Object(_)) => w.message(23, |w| w.message(1, |w| schema(w, value))),
        Some(Value::Array(items)) => w.message(23, |w| {
            for item in items {
                w.message(1, |w| schema(w, item));
            }
        }),
        _ => {}
    }
    for item in map
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(24, |w| schema(w, item));
    }
    if let Some(properties) = map.get("properties").and_then(Value::as_object) {
        w.message(25, |w| {
            for (name, value) in properties {
                w.message(1, |w| {
                    w.string(1, name);
                    w.message(2, |w| schema(w, value));
                });
            }
        });
    }
    w.string(26, str_of(map, "discriminator"));
    w.bool(27, bool_of(map, "readOnly"));
    if let Some(example) = map.get("example") {
        w.message(30, |w| any(w, example));
    }
    vendor_extensions(w, 31, map);
}

/// `QueryParameterSubSchema`/`PathParameterSubSchema`/`HeaderParameterSubSchema`: the same
/// leading fields; `type` is field 6 for query parameters and 5 for the others (which have no
/// `allow_empty_value`), and `unique_items` and the extensions move along.
fn non_body_parameter(w: &mut Writer, map: &Map<String, Value>, query: bool) {
    let shift = if query { 1 } else { 0 };
    w.bool(1, bool_of(map, "required"));
    w.string(2, str_of(map, "in"));
    w.string(3, str_of(map, "description"));
    w.string(4, str_of(map, "name"));
    if query {
        w.bool(5, bool_of(map, "allowEmptyValue"));
    }
    w.string(5 + shift, str_of(map, "type"));
    w.string(6 + shift, str_of(map, "format"));
    w.bool(19 + shift, bool_of(map, "uniqueItems"));
    vendor_extensions(w, 22 + shift, map);
}

/// `ParametersItem`.
fn parameter(w: &mut Writer, value: &Value) {
    let Some(map) = value.as_object() else {
        return;
    };
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        // `json_reference = 2`: `JsonReference { _ref = 1 }`.
        w.message(2, |w| w.message(1, |w| w.string(1, reference)));
        return;
    }
    // `parameter = 1`: `Parameter`.
    w.message(1, |w| match str_of(map, "in") {
        "body" => w.message(1, |w| {
            w.string(1, str_of(map, "description"));
            w.string(2, str_of(map, "name"));
            w.string(3, "body");
            w.bool(4, bool_of(map, "required"));
            if let Some(body_schema) = map.get("schema") {
                w.message(5, |w| schema(w, body_schema));
            }
            vendor_extensions(w, 6, map);
        }),
        // `non_body_parameter = 2`: header = 1, form data = 2, query = 3, path = 4.
        "query" => w.message(2, |w| w.message(3, |w| non_body_parameter(w, map, true))),
        "path" => w.message(2, |w| w.message(4, |w| non_body_parameter(w, map, false))),
        _ => w.message(2, |w| w.message(1, |w| non_body_parameter(w, map, false))),
    });
}

/// `Operation`.
fn operation(w: &mut Writer, value: &Value) {
    let Some(map) = value.as_object() else {
        return;
    };
    for tag in strings_of(map, "tags") {
        w.repeated_string(1, tag);
    }
    w.string(2, str_of(map, "summary"));
    w.string(3, str_of(map, "description"));
    w.string(5, str_of(map, "operationId"));
    for media in strings_of(map, "produces") {
        w.repeated_string(6, media);
    }
    for media in strings_of(map, "consumes") {
        w.repeated_string(7, media);
    }
    for param in map
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(8, |w| parameter(w, param));
    }
    if let Some(responses) = map.get("responses").and_then(Value::as_object) {
        w.message(9, |w| {
            for (code, response) in responses {
                // `NamedResponseValue { name = 1; ResponseValue value = 2 }`, `ResponseValue
                // { Response response = 1 }`, `Response { description = 1; SchemaItem
                // schema = 2 }`, `SchemaItem { Schema schema = 1 }`.
                w.message(1, |w| {
                    w.string(1, code);
                    w.message(2, |w| {
                        w.message(1, |w| {
                            let response = response.as_object();
                            w.string(
                                1,
                                response
                                    .map(|r| str_of(r, "description"))
                                    .unwrap_or_default(),
                            );
                            if let Some(response_schema) = response.and_then(|r| r.get("schema")) {
                                w.message(2, |w| w.message(1, |w| schema(w, response_schema)));
                            }
                        });
                    });
                });
            }
        });
    }
    for scheme in strings_of(map, "schemes") {
        w.repeated_string(10, scheme);
    }
    w.bool(11, bool_of(map, "deprecated"));
    vendor_extensions(w, 13, map);
}

/// `PathItem`.
fn path_item(w: &mut Writer, value: &Value) {
    let Some(map) = value.as_object() else {
        return;
    };
    for (field, method) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        if let Some(op) = map.get(method) {
            w.message(field, |w| operation(w, op));
        }
    }
    for param in map
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(9, |w| parameter(w, param));
    }
    vendor_extensions(w, 10, map);
}

/// The protobuf encoding of a v2 document.
pub(crate) fn encode(document: &Value) -> Vec<u8> {
    let mut w = Writer::default();
    let Some(doc) = document.as_object() else {
        return w.buf;
    };
    w.string(1, str_of(doc, "swagger"));
    if let Some(info) = doc.get("info").and_then(Value::as_object) {
        w.message(2, |w| {
            w.string(1, str_of(info, "title"));
            w.string(2, str_of(info, "version"));
            w.string(3, str_of(info, "description"));
        });
    }
    if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
        w.message(8, |w| {
            vendor_extensions(w, 1, paths);
            for (path, item) in paths.iter().filter(|(k, _)| !k.starts_with("x-")) {
                w.message(2, |w| {
                    w.string(1, path);
                    w.message(2, |w| path_item(w, item));
                });
            }
        });
    }
    if let Some(definitions) = doc.get("definitions").and_then(Value::as_object) {
        w.message(9, |w| {
            for (name, value) in definitions {
                w.message(1, |w| {
                    w.string(1, name);
                    w.message(2, |w| schema(w, value));
                });
            }
        });
    }
    for requirement in doc
        .get("security")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        // `SecurityRequirement { repeated NamedStringArray additional_properties = 1 }`.
        w.message(12, |w| {
            for (name, scopes) in requirement.as_object().into_iter().flatten() {
                w.message(1, |w| {
                    w.string(1, name);
                    w.message(2, |w| {
                        for scope in scopes
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                        {
                            w.repeated_string(1, scope);
                        }
                    });
                });
            }
        });
    }
    if let Some(definitions) = doc.get("securityDefinitions").and_then(Value::as_object) {
        // `SecurityDefinitions { repeated NamedSecurityDefinitionsItem additional_properties =
        // 1 }`; API keys are `api_key_security = 2` of `SecurityDefinitionsItem`.
        w.message(13, |w| {
            for (name, definition) in definitions {
                let Some(definition) = definition.as_object() else {
                    continue;
                };
                if str_of(definition, "type") != "apiKey" {
                    continue;
                }
                w.message(1, |w| {
                    w.string(1, name);
                    w.message(2, |w| {
                        w.message(2, |w| {
                            w.string(1, "apiKey");
                            w.string(2, str_of(definition, "name"));
                            w.string(3, str_of(definition, "in"));
                            w.string(4, str_of(definition, "description"));
                        });
                    });
                });
            }
        });
    }
    w.buf
}
