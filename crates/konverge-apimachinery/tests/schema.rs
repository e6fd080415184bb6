//! Structural schemas: parsing and CRD-time errors, validation messages, pruning, defaulting.

use konverge_apimachinery::schema::Structural;
use serde_json::{Value, json};

const ROOT: &str = "spec.versions[0].schema.openAPIV3Schema";

fn schema(spec: Value) -> Structural {
    let s = json!({"type": "object", "properties": {"spec": spec}});
    match Structural::from_json(&s, ROOT) {
        Ok(s) => s,
        Err(e) => panic!("schema rejected: {e:?}"),
    }
}

fn errors(s: &Structural, obj: Value) -> Vec<String> {
    s.validate(&obj).iter().map(|e| e.to_string()).collect()
}

fn cr(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

#[test]
fn value_validation_messages() {
    let cases: Vec<(Value, Value, Vec<&str>)> = vec![
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "minLength": 3}}}),
            json!({"name": "ab"}),
            vec![
                r#"spec.name: Invalid value: "ab": spec.name in body should be at least 3 chars long"#,
            ],
        ),
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 2}}}),
            json!({"name": "abc"}),
            vec!["spec.name: Too long: may not be more than 2 bytes"],
        ),
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z]+$"}}}),
            json!({"name": "A1"}),
            vec![r#"spec.name: Invalid value: "A1": spec.name in body should match '^[a-z]+$'"#],
        ),
        (
            json!({"type": "object", "properties": {"mode": {"type": "string", "enum": ["a", "b"]}}}),
            json!({"mode": "c"}),
            vec![r#"spec.mode: Unsupported value: "c": supported values: "a", "b""#],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "enum": [1, 2]}}}),
            json!({"n": 3}),
            vec![r#"spec.n: Unsupported value: 3: supported values: "1", "2""#],
        ),
        (
            json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}),
            json!({}),
            vec!["spec.name: Required value"],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 10}}}),
            json!({"n": 11}),
            vec!["spec.n: Invalid value: 11: spec.n in body should be less than or equal to 10"],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "exclusiveMinimum": true}}}),
            json!({"n": 1}),
            vec!["spec.n: Invalid value: 1: spec.n in body should be greater than 1"],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "number", "maximum": 1.5, "exclusiveMaximum": true}}}),
            json!({"n": 1.5}),
            vec!["spec.n: Invalid value: 1.5: spec.n in body should be less than 1.5"],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "number", "minimum": 0.5}}}),
            json!({"n": 0.25}),
            vec![
                "spec.n: Invalid value: 0.25: spec.n in body should be greater than or equal to 0.5",
            ],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}),
            json!({"n": 4}),
            vec!["spec.n: Invalid value: 4: spec.n in body should be a multiple of 3"],
        ),
        (
            json!({"type": "object", "properties": {"l": {"type": "array", "minItems": 2, "items": {"type": "string"}}}}),
            json!({"l": ["a"]}),
            vec!["spec.l: Invalid value: 1: spec.l in body should have at least 2 items"],
        ),
        (
            json!({"type": "object", "properties": {"l": {"type": "array", "maxItems": 1, "items": {"type": "string"}}}}),
            json!({"l": ["a", "b"]}),
            vec!["spec.l: Too many: 2: must have at most 1 items"],
        ),
        (
            json!({"type": "object", "properties": {"m": {"type": "object", "minProperties": 1}}}),
            json!({"m": {}}),
            vec!["spec.m: Invalid value: 0: spec.m in body should have at least 1 properties"],
        ),
        (
            json!({"type": "object", "properties": {"m": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}}}}),
            json!({"m": {"a": "x", "b": "y"}}),
            vec!["spec.m: Too many: 2: must have at most 1 items"],
        ),
        (
            json!({"type": "object", "properties": {"s": {"type": "string", "nullable": true}, "t": {"type": "string"}}}),
            json!({"s": null, "t": null}),
            vec![r#"spec.t: Invalid value: "null": spec.t in body must be of type string: "null""#],
        ),
    ];
    for (spec, value, want) in cases {
        let s = schema(spec.clone());
        assert_eq!(errors(&s, cr(value)), want, "schema {spec}");
    }
}

#[test]
fn acceptance_example_reason_and_field() {
    let s = schema(
        json!({"type": "object", "properties": {"name": {"type": "string", "minLength": 3}}}),
    );
    let errs = s.validate(&cr(json!({"name": "ab"})));
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].reason(), "FieldValueInvalid");
    assert_eq!(errs[0].field, "spec.name");
}

#[test]
fn types_and_paths() {
    let s = schema(json!({
        "type": "object",
        "properties": {
            "replicas": {"type": "integer"},
            "flag": {"type": "boolean"},
            "ratio": {"type": "number"},
            "obj": {"type": "object"},
            "list": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 1}},
            "port": {"x-kubernetes-int-or-string": true},
        }
    }));
    let got = errors(
        &s,
        cr(json!({
            "replicas": "3",
            "flag": 1,
            "ratio": "x",
            "obj": [],
            "list": [[1, "a"]],
            "labels": {"app": 5, "b": "long"},
            "port": true,
        })),
    );
    assert_eq!(
        got,
        vec![
            r#"spec.flag: Invalid value: "integer": spec.flag in body must be of type boolean: "integer""#,
            r#"spec.labels.app: Invalid value: "integer": spec.labels.app in body must be of type string: "integer""#,
            "spec.labels.b: Too long: may not be more than 1 bytes",
            r#"spec.list[0][1]: Invalid value: "string": spec.list[0][1] in body must be of type integer: "string""#,
            r#"spec.obj: Invalid value: "array": spec.obj in body must be of type object: "array""#,
            r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#,
            r#"spec.ratio: Invalid value: "string": spec.ratio in body must be of type number: "string""#,
            r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
        ]
    );
    // integral floats are integers; ints are numbers
    assert!(errors(&s, cr(json!({"replicas": 2.0, "ratio": 1, "port": "80"}))).is_empty());
    assert!(errors(&s, cr(json!({"port": 80}))).is_empty());
}

#[test]
fn formats() {
    let cases = [
        ("uuid", "nope", true),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", false),
        ("date-time", "yesterday", true),
        ("date-time", "2024-01-02T03:04:05Z", false),
        ("date", "2024-13-01", true),
        ("ipv4", "1.2.3", true),
        ("ipv6", "::1", false),
        ("cidr", "10.0.0.0/8", false),
        ("mac", "zz", true),
        ("email", "x@y.z", false),
        ("hostname", "a..b", true),
        ("uri", "http://x/y", false),
        ("byte", "***", true),
        ("duration", "5s", false),
        ("int32", "anything", false), // integer formats are not checked for CRDs
        ("unknown-format", "anything", false),
    ];
    for (format, value, bad) in cases {
        let s = schema(
            json!({"type": "object", "properties": {"f": {"type": "string", "format": format}}}),
        );
        let got = errors(&s, cr(json!({"f": value})));
        if bad {
            assert_eq!(
                got,
                vec![format!(
                    "spec.f: Invalid value: {value:?}: spec.f in body must be of type {format}: {value:?}"
                )],
                "{format}"
            );
        } else {
            assert!(got.is_empty(), "{format} {value}: {got:?}");
        }
    }
}

#[test]
fn composition_keywords() {
    let s = schema(json!({
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "not": {"required": ["a"]},
    }));
    assert_eq!(
        errors(&s, cr(json!({"a": "x"}))),
        vec![r#"Invalid value: "": "spec" must not validate the schema (not)"#]
    );
    let s = schema(json!({
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    }));
    assert_eq!(
        errors(&s, cr(json!({"a": "x", "b": "y"}))),
        vec![
            r#"Invalid value: "": "spec" must validate one and only one schema (oneOf). Found 2 valid alternatives"#
        ]
    );
    assert!(errors(&s, cr(json!({"a": "x"}))).is_empty());
}

#[test]
fn embedded_resources_and_list_types() {
    let s = schema(json!({
        "type": "object",
        "properties": {
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {
                "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
            },
        }
    }));
    assert_eq!(
        errors(
            &s,
            cr(json!({
                "template": {"kind": "Bad_Kind"},
                "set": ["a", "a"],
                "ports": [{"name": "x"}, {"name": "x"}],
            }))
        ),
        vec![
            "spec.template.apiVersion: Required value: must not be empty",
            r#"spec.template.kind: Invalid value: "Bad_Kind": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#,
            r#"spec.ports[1]: Duplicate value: map[string]interface {}{"name":"x"}"#,
            r#"spec.set[1]: Duplicate value: "a""#,
        ]
    );
}

#[test]
fn schema_errors() {
    let cases: Vec<(Value, Vec<String>)> = vec![
        (
            json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}}),
            vec![format!(
                "{ROOT}.properties[spec].type: Required value: must not be empty for specified object fields"
            )],
        ),
        (
            json!({"type": "object", "properties": {"spec": {"type": "array"}}}),
            vec![format!(
                "{ROOT}.properties[spec].items: Required value: must be specified"
            )],
        ),
        (
            json!({"type": "string"}),
            vec![format!(
                r#"{ROOT}.type: Invalid value: "string": must be object at the root"#
            )],
        ),
        (
            json!({"type": "object", "properties": {"spec": {"type": "object", "allOf": [{"type": "object"}]}}}),
            vec![format!(
                "{ROOT}.properties[spec].allOf[0].type: Forbidden: must be empty to be structural"
            )],
        ),
        (
            json!({"type": "object", "properties": {"spec": {"type": "string", "pattern": "("}}}),
            vec![format!(
                r#"{ROOT}.properties[spec].pattern: Invalid value: "(": must be a valid regular expression, but isn't: error parsing regexp: unclosed group: `(`"#
            )],
        ),
        (
            json!({"type": "object", "properties": {"spec": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}}),
            vec![format!(
                "{ROOT}.properties[spec].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
            )],
        ),
        (
            json!({"type": "object", "properties": {"spec": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}}}),
            vec![format!(
                "{ROOT}.properties[spec].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
            )],
        ),
        (
            json!({"type": "object", "properties": {"spec": {"type": "string", "default": 5}}}),
            vec![format!(
                r#"{ROOT}.properties[spec].default: Invalid value: "integer":  in body must be of type string: "integer""#
            )],
        ),
        (
            json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
            vec![format!(
                "{ROOT}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            )],
        ),
        (
            json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-embedded-resource": true}}}),
            vec![format!(
                "{ROOT}.properties[spec].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"
            )],
        ),
    ];
    for (s, want) in cases {
        let got: Vec<String> = match Structural::from_json(&s, ROOT) {
            Ok(_) => Vec::new(),
            Err(e) => e.iter().map(|e| e.to_string()).collect(),
        };
        assert_eq!(got, want, "{s}");
    }
    // tolerated keys
    let ok = json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.a > 0"}],
        "x-kubernetes-map-type": "atomic",
        "properties": {"a": {"type": "integer"}}
    }}});
    assert!(Structural::from_json(&ok, ROOT).is_ok());
}

#[test]
fn pruning() {
    let s = Structural::from_json(
        &json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "keep": {"type": "string"},
                "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"typed": {"type": "object", "properties": {"x": {"type": "string"}}}}},
                "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                             "properties": {"spec": {"type": "object", "properties": {"y": {"type": "string"}}}}},
                "n": {"type": "string"},
            }}
        }}),
        ROOT,
    )
    .unwrap_or_default();
    let mut obj = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}},
        "status": {"x": 1},
        "spec": {
            "keep": "k", "drop": 1, "n": null,
            "list": [{"a": "x", "b": "y"}],
            "free": {"anything": [1], "typed": {"x": "1", "z": 2}},
            "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"y": "1", "q": 2}, "extra": true},
        }
    });
    let removed = s.prune(&mut obj);
    assert_eq!(
        removed,
        vec![
            "spec.drop",
            "spec.embedded.extra",
            "spec.embedded.spec.q",
            "spec.free.typed.z",
            "spec.list[0].b",
            "status",
        ]
    );
    assert_eq!(
        obj,
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"a": "b"}},
            "spec": {
                "keep": "k",
                "list": [{"a": "x"}],
                "free": {"anything": [1], "typed": {"x": "1"}},
                "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"y": "1"}},
            }
        })
    );
}

#[test]
fn defaulting() {
    let s = Structural::from_json(
        &json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "auto"},
                "nullable": {"type": "string", "nullable": true, "default": "d"},
                "nested": {"type": "object", "properties": {"x": {"type": "string", "default": "nx"}}},
                "withDefault": {"type": "object", "default": {}, "properties": {"y": {"type": "string", "default": "ny"}}},
                "items": {"type": "array", "items": {"type": "object", "properties": {"z": {"type": "integer", "default": 7}}}},
                "map": {"type": "object", "additionalProperties": {"type": "string", "default": "m"}},
            }}
        }}),
        ROOT,
    )
    .unwrap_or_default();
    let mut obj = json!({"spec": {"mode": null, "nullable": null, "items": [{}, {"z": 1}], "map": {"a": null}}});
    s.default(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {
            "replicas": 1, "mode": "auto", "nullable": null,
            "withDefault": {"y": "ny"},
            "items": [{"z": 7}, {"z": 1}],
            "map": {"a": "m"},
        }})
    );
    // nothing is created where the parent does not exist
    let mut empty = json!({});
    s.default(&mut empty);
    assert_eq!(empty, json!({}));
}

#[test]
fn null_without_default_is_pruned() {
    let s = schema(
        json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string", "nullable": true}}}),
    );
    let mut obj = cr(json!({"a": null, "b": null}));
    assert!(s.prune(&mut obj).is_empty());
    assert_eq!(obj["spec"], json!({"b": null}));
}

#[test]
fn lookups() {
    let s = schema(
        json!({"type": "object", "description": "the spec", "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string", "format": "hostname"}},
            "list": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "integer"}},
        }}),
    );
    let spec = s.child("spec").map(|c| c.description().to_string());
    assert_eq!(spec.as_deref(), Some("the spec"));
    assert_eq!(
        s.at_path(&["spec", "labels", "anykey"]).map(|n| n.format()),
        Some("hostname")
    );
    assert_eq!(
        s.at_path(&["spec", "list", "[]"]).map(|n| n.type_name()),
        Some("integer")
    );
    assert_eq!(
        s.at_path(&["spec", "list"]).and_then(|n| n.list_type()),
        Some("set")
    );
}
