//! `x-kubernetes-validations` rules: compilation errors and evaluation against custom objects,
//! worded as Kubernetes words them.

use konverge_apimachinery::cel::Rules;
use serde_json::{Value, json};

const AT: &str = "spec.versions[0].schema.openAPIV3Schema";

fn rules(schema: Value) -> Rules {
    match Rules::compile(&schema, AT) {
        Ok(r) => r,
        Err(e) => panic!("{:?}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>()),
    }
}

fn errors(rules: &Rules, new: Value, old: Option<Value>) -> Vec<String> {
    rules
        .validate(&new, old.as_ref())
        .iter()
        .map(|e| e.to_string())
        .collect()
}

fn compile_errors(schema: Value) -> Vec<String> {
    match Rules::compile(&schema, AT) {
        Ok(_) => panic!("compiled"),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

/// A CR schema with `spec` holding `rules` and the given properties.
fn spec_schema(rules: Value, properties: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": rules,
                "properties": properties,
            }
        }
    })
}

#[test]
fn rule_on_spec_with_message() {
    let r = rules(spec_schema(
        json!([{"rule": "self.replicas <= self.maxReplicas", "message": "replicas must be <= maxReplicas"}]),
        json!({"replicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}}),
    ));
    assert!(!r.is_empty());
    assert!(errors(&r, json!({"spec": {"replicas": 3, "maxReplicas": 5}}), None).is_empty());
    assert_eq!(
        errors(&r, json!({"spec": {"replicas": 7, "maxReplicas": 5}}), None),
        ["spec: Invalid value: \"object\": replicas must be <= maxReplicas"]
    );
}

#[test]
fn default_message_is_failed_rule() {
    let r = rules(spec_schema(
        json!([{"rule": "self.name.startsWith('a')"}]),
        json!({"name": {"type": "string"}}),
    ));
    assert_eq!(
        errors(&r, json!({"spec": {"name": "bob"}}), None),
        ["spec: Invalid value: \"object\": failed rule: self.name.startsWith('a')"]
    );
}

#[test]
fn rule_on_root_reports_nil_field() {
    let schema = json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.name.size() < 5 && has(self.spec)"}],
        "properties": {"spec": {"type": "object"}},
    });
    let r = rules(schema);
    assert!(
        errors(
            &r,
            json!({"metadata": {"name": "abc", "namespace": "x"}, "spec": {}}),
            None
        )
        .is_empty()
    );
    assert_eq!(
        errors(
            &r,
            json!({"metadata": {"name": "abcdef"}, "spec": {}}),
            None
        ),
        [
            "<nil>: Invalid value: \"object\": failed rule: self.metadata.name.size() < 5 && has(self.spec)"
        ]
    );
}

#[test]
fn rules_on_nested_objects_array_items_and_map_values() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "template": {"type": "object", "properties": {
                "port": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0 && self < 65536", "message": "bad port"}]},
            }},
            "names": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 64, "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')"}]}},
            "limits": {"type": "object", "additionalProperties": {"type": "number", "x-kubernetes-validations": [{"rule": "self >= 0.5"}]}},
        }}},
    });
    let r = rules(schema);
    let obj = json!({"spec": {
        "template": {"port": 70000},
        "names": ["ok", "Bad", "fine"],
        "limits": {"cpu": 1, "mem": 0.25},
    }});
    assert_eq!(
        errors(&r, obj, None),
        [
            "spec.limits[mem]: Invalid value: \"number\": failed rule: self >= 0.5",
            "spec.names[1]: Invalid value: \"string\": failed rule: self.matches('^[a-z]+$')",
            "spec.template.port: Invalid value: \"integer\": bad port",
        ]
    );
}

#[test]
fn message_expression_wins_and_falls_back() {
    let r = rules(spec_schema(
        json!([
            {"rule": "self.x > 1", "message": "static", "messageExpression": "'x is too small for ' + self.label"},
            {"rule": "self.x > 2", "message": "fallback", "messageExpression": "self.note"},
            {"rule": "self.x > 3", "messageExpression": "'  '"},
        ]),
        json!({"x": {"type": "integer"}, "label": {"type": "string", "maxLength": 16},
               "note": {"type": "string", "maxLength": 16}}),
    ));
    assert_eq!(
        errors(&r, json!({"spec": {"x": 0, "label": "a"}}), None),
        [
            "spec: Invalid value: \"object\": x is too small for a",
            "spec: Invalid value: \"object\": fallback",
            "spec: Invalid value: \"object\": failed rule: self.x > 3",
        ]
    );
}

#[test]
fn reason_and_field_path() {
    let r = rules(spec_schema(
        json!([
            {"rule": "has(self.a)", "message": "a is required", "reason": "FieldValueRequired", "fieldPath": ".a"},
            {"rule": "!has(self.b)", "message": "b is not allowed", "reason": "FieldValueForbidden", "fieldPath": ".b"},
            {"rule": "self.c.size() == 1", "reason": "FieldValueDuplicate", "fieldPath": ".c['k']"},
            {"rule": "false", "message": "plain", "reason": "FieldValueInvalid"},
        ]),
        json!({"a": {"type": "string"}, "b": {"type": "string"},
               "c": {"type": "object", "additionalProperties": {"type": "string"}}}),
    ));
    assert_eq!(
        errors(&r, json!({"spec": {"b": "x", "c": {}}}), None),
        [
            "spec.a: Required value: a is required",
            "spec.b: Forbidden: b is not allowed",
            "spec.c[k]: Duplicate value: \"object\"",
            "spec: Invalid value: \"object\": plain",
        ]
    );
}

fn immutable_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "id": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "Value is immutable"}]},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]}},
        }}},
    })
}

#[test]
fn transition_rules_run_only_on_update_where_old_correlates() {
    let r = rules(immutable_schema());
    let first = json!({"spec": {"id": "a", "ports": [{"name": "http", "port": 80}]}});
    assert!(errors(&r, first.clone(), None).is_empty());
    assert!(errors(&r, first.clone(), Some(first.clone())).is_empty());
    let changed = json!({"spec": {"id": "b", "ports": [
        {"name": "grpc", "port": 9000},
        {"name": "http", "port": 8080},
    ]}});
    assert_eq!(
        errors(&r, changed, Some(first)),
        [
            "spec.id: Invalid value: \"string\": Value is immutable",
            "spec.ports[1]: Invalid value: \"object\": port is immutable",
        ]
    );
}

#[test]
fn optional_old_self_runs_on_create() {
    let r = rules(spec_schema(
        json!([{"rule": "oldSelf.hasValue() || self.x == 1", "message": "x must start at 1", "optionalOldSelf": true}]),
        json!({"x": {"type": "integer"}}),
    ));
    assert_eq!(
        errors(&r, json!({"spec": {"x": 2}}), None),
        ["spec: Invalid value: \"object\": x must start at 1"]
    );
    assert!(errors(&r, json!({"spec": {"x": 1}}), None).is_empty());
    assert!(
        errors(
            &r,
            json!({"spec": {"x": 2}}),
            Some(json!({"spec": {"x": 1}}))
        )
        .is_empty()
    );
}

#[test]
fn unchanged_values_are_ratcheted_on_update() {
    let r = rules(spec_schema(
        json!([{"rule": "self.x < 10"}]),
        json!({"x": {"type": "integer"}, "y": {"type": "integer"}}),
    ));
    let old = json!({"spec": {"x": 20, "y": 1}});
    assert!(errors(&r, old.clone(), Some(old.clone())).is_empty());
    assert_eq!(
        errors(&r, json!({"spec": {"x": 20, "y": 2}}), Some(old)),
        ["spec: Invalid value: \"object\": failed rule: self.x < 10"]
    );
}

#[test]
fn runtime_errors_are_worded_as_kubernetes() {
    let r = rules(spec_schema(
        json!([
            {"rule": "self.a == 'x'"},
            {"rule": "self.list[3] == 1", "message": "need four"},
            {"rule": "1 / self.n == 1"},
            {"rule": "self.v + 1 == 2"},
        ]),
        json!({"a": {"type": "string"}, "list": {"type": "array", "items": {"type": "integer"}},
               "n": {"type": "integer"}, "v": {"x-kubernetes-int-or-string": true}}),
    ));
    assert_eq!(
        errors(&r, json!({"spec": {"list": [1], "n": 0, "v": "one"}}), None),
        [
            "spec: Invalid value: \"object\": no such key: a evaluating rule: self.a == 'x'",
            "spec: Invalid value: \"object\": index out of bounds: 3 evaluating rule: need four",
            "spec: Invalid value: \"object\": division by zero evaluating rule: 1 / self.n == 1",
            "spec: Invalid value: \"object\": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: self.v + 1 == 2",
        ]
    );
}

#[test]
fn standard_macros_and_functions_work() {
    let r = rules(spec_schema(
        json!([
            {"rule": "self.items.all(i, i.size() > 0) && self.items.exists(i, i == 'a') && self.items.exists_one(i, i == 'b')"},
            {"rule": "self.items.map(i, i + '!').filter(i, i.endsWith('!')).size() == 3"},
            {"rule": "'a' in self.items && self.items[0].contains('a') && int('3') == 3 && double(self.n) == 2.0 && string(self.n) == '2'"},
            {"rule": "self.items.isSorted() && 'AbC'.lowerAscii() == 'abc' && 'x'.upperAscii() == 'X'"},
            {"rule": "self.when < timestamp('2030-01-01T00:00:00Z') && self.wait > duration('1m')"},
            {"rule": "self.dashed__dash__name == 1 && self.__namespace__ == 'n'"},
        ]),
        json!({"items": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10}}, "n": {"type": "integer"},
               "when": {"type": "string", "format": "date-time"}, "wait": {"type": "string", "format": "duration"},
               "dashed-name": {"type": "integer"}, "namespace": {"type": "string"}}),
    ));
    let ok = json!({"spec": {"items": ["a", "b", "c"], "n": 2, "when": "2024-05-01T10:00:00Z",
                             "wait": "1h30m", "dashed-name": 1, "namespace": "n"}});
    assert_eq!(errors(&r, ok, None), Vec::<String>::new());
}

#[test]
fn compile_errors_name_the_rule() {
    let schema = spec_schema(
        json!([{"rule": "self.x >"}]),
        json!({"x": {"type": "integer"}}),
    );
    assert_eq!(
        compile_errors(schema),
        [format!(
            "{AT}.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"self.x >\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}: compilation failed: ERROR: <input>:1:9: Syntax error: mismatched input '<EOF>' expecting {{'[', '{{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}}\n | self.x >\n | ........^"
        )]
    );

    let schema = spec_schema(json!([{"rule": "foo == 1"}]), json!({}));
    assert_eq!(
        compile_errors(schema),
        [format!(
            "{AT}.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"foo == 1\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}: compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')\n | foo == 1\n | ^"
        )]
    );
}

#[test]
fn rule_field_errors_at_their_path() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "list": {"type": "array", "maxItems": 10, "items": {"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}},
                "x-kubernetes-validations": [{"rule": "self.a == oldSelf.a"}]}},
            "x": {"type": "integer", "x-kubernetes-validations": [
                {"rule": ""},
                {"rule": "self > 0", "reason": "Bogus"},
                {"rule": "self > 0", "fieldPath": ".nope"},
                {"rule": "self > 0", "optionalOldSelf": true},
                {"rule": "self + 1"},
            ]},
        }}},
    });
    let errs = compile_errors(schema);
    let p = format!("{AT}.properties[spec].properties");
    assert_eq!(
        errs,
        [
            format!(
                "{p}[list].items.x-kubernetes-validations[0].rule: Invalid value: \"self.a == oldSelf.a\": oldSelf cannot be used on the uncorrelatable portion of the schema within {p}[list]"
            ),
            format!(
                "{p}[x].x-kubernetes-validations[0].rule: Required value: rule is not specified"
            ),
            format!(
                "{p}[x].x-kubernetes-validations[1].reason: Unsupported value: \"Bogus\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
            ),
            format!(
                "{p}[x].x-kubernetes-validations[2].fieldPath: Invalid value: \".nope\": fieldPath must be a valid path"
            ),
        ]
    );
    let schema = spec_schema(
        json!([{"rule": "self.x > 0", "optionalOldSelf": true}, {"rule": "self.x + 1"}]),
        json!({"x": {"type": "integer"}}),
    );
    let p = format!("{AT}.properties[spec].x-kubernetes-validations");
    let errs = compile_errors(schema);
    assert_eq!(
        errs[0],
        format!(
            "{p}[0].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule"
        )
    );
    assert!(
        errs[1].ends_with(": cel expression must evaluate to a bool"),
        "{}",
        errs[1]
    );
}

#[test]
fn rules_that_cost_too_much_are_refused_at_create_and_at_run_time() {
    let rule = "self.l.all(a, self.l.all(b, self.l.all(c, a + b + c >= 0)))";
    // Unbounded, the rule could cost more than any budget: the CRD is refused.
    let schema = |bound: Value| {
        let mut list = json!({"type": "array", "items": {"type": "integer"}});
        if !bound.is_null() {
            list["maxItems"] = bound;
        }
        spec_schema(json!([{ "rule": rule }]), json!({ "l": list }))
    };
    let budget = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
    assert_eq!(
        compile_errors(schema(Value::Null)),
        [
            format!(
                "{AT}.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x {budget}"
            ),
            format!(
                "{AT}.properties[spec].x-kubernetes-validations[0].rule: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
            ),
            format!(
                "{AT}: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {budget}"
            ),
        ]
    );
    // A stored definition was held to the limits when it was written: it is served as it is.
    assert!(Rules::compile_stored(&schema(Value::Null)).is_ok());
    // Close to the limit, the factor is printed.
    assert_eq!(
        compile_errors(schema(json!(120))),
        [format!(
            "{AT}.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of 1.6x {budget}"
        )]
    );
    // Bounded, the CRD is taken; a large object still costs too much to check.
    let r = rules(schema(json!(100)));
    let big: Vec<i64> = (0..100).collect();
    assert_eq!(
        errors(&r, json!({"spec": {"l": big}}), None),
        [format!(
            "spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {rule}"
        )]
    );
    assert!(errors(&r, json!({"spec": {"l": [1, 2, 3]}}), None).is_empty());

    // Charged as it runs: when the expensive part does not evaluate (a `||` decided by its
    // left operand), the large object passes; when it does, it costs what it did.
    let guarded = format!("has(self.skip) || {rule}");
    let mut guarded_schema = schema(json!(100));
    guarded_schema["properties"]["spec"]["x-kubernetes-validations"] = json!([{ "rule": guarded }]);
    guarded_schema["properties"]["spec"]["properties"]["skip"] = json!({"type": "boolean"});
    let r = rules(guarded_schema);
    assert!(errors(&r, json!({"spec": {"l": big, "skip": true}}), None).is_empty());
    assert_eq!(
        errors(&r, json!({"spec": {"l": big}}), None),
        [format!(
            "spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {guarded}"
        )]
    );
}

#[test]
fn rules_are_type_checked_against_the_schema() {
    let spec = json!({
        "replicas": {"type": "integer"},
        "ratio": {"type": "number"},
        "names": {"type": "array", "maxItems": 4, "items": {"type": "string", "maxLength": 8}},
        "labels": {"type": "object", "maxProperties": 4, "additionalProperties": {"type": "string", "maxLength": 8}},
        "port": {"x-kubernetes-int-or-string": true},
    });
    let error = |rule: &str| -> String {
        let errs = compile_errors(spec_schema(json!([{ "rule": rule }]), spec.clone()));
        assert_eq!(errs.len(), 1, "{errs:?}");
        let detail = errs[0].split("OptionalOldSelf:(*bool)(nil)}: ").nth(1);
        detail.unwrap_or(&errs[0]).to_string()
    };
    assert_eq!(
        error("self.replicas > 0 && self.replicsa < 10"),
        "compilation failed: ERROR: <input>:1:26: undefined field 'replicsa'\n | self.replicas > 0 && self.replicsa < 10\n | .........................^"
    );
    assert_eq!(
        error("self.replicas == 'three'"),
        "compilation failed: ERROR: <input>:1:15: found no matching overload for '_==_' applied to '(int, string)'\n | self.replicas == 'three'\n | ..............^"
    );
    assert_eq!(
        error("self.ratio == 1"),
        "compilation failed: ERROR: <input>:1:12: found no matching overload for '_==_' applied to '(double, int)'\n | self.ratio == 1\n | ...........^"
    );
    assert_eq!(
        error("self.names.size() > 0 && self.names.foo"),
        "compilation failed: ERROR: <input>:1:36: type 'list(string)' does not support field selection\n | self.names.size() > 0 && self.names.foo\n | ...................................^"
    );
    assert_eq!(
        error("self.replicas.all(x, x > 0)"),
        "compilation failed: ERROR: <input>:1:5: expression of type 'int' cannot be range of a comprehension (must be list, map, or dynamic)\n | self.replicas.all(x, x > 0)\n | ....^"
    );
    assert_eq!(
        error("self.names.all(n, n)"),
        "compilation failed: ERROR: <input>:1:19: expected type 'bool' but found 'string'\n | self.names.all(n, n)\n | ..................^"
    );
    assert_eq!(
        error("size(self.ratio) > 1"),
        "compilation failed: ERROR: <input>:1:5: found no matching overload for 'size' applied to '(double)'\n | size(self.ratio) > 1\n | ....^"
    );
    assert_eq!(
        error("self.replicas.startsWith('a')"),
        "compilation failed: ERROR: <input>:1:25: found no matching overload for 'startsWith' applied to 'int.(string)'\n | self.replicas.startsWith('a')\n | ........................^"
    );
    assert_eq!(error("self.port"), "cel expression must evaluate to a bool");
    assert_eq!(
        error("self.replicas + 1"),
        "cel expression must evaluate to a bool"
    );
    assert_eq!(
        error("[1, 'a'].size() == 2"),
        "compilation failed: ERROR: <input>:1:5: expected type 'int' but found 'string'\n | [1, 'a'].size() == 2\n | ....^"
    );
    assert_eq!(
        error("duration('1d') > duration('1h')"),
        "compilation failed: ERROR: <input>:1:10: invalid duration argument\n | duration('1d') > duration('1h')\n | .........^"
    );
    // What type-checks: map values, dyn int-or-string, comprehensions, optionals, libraries.
    let ok = [
        "self.labels.all(k, self.labels[k].size() < 9)",
        "self.port == 80 || self.port == 'http'",
        "self.names.map(n, n.size()).all(s, s > 0)",
        "self.?ratio.orValue(1.0) > 0.5",
        "sets.contains(self.names, ['a'])",
        "self.names.exists(n, n.lowerAscii() == 'a') || self.replicas < 2.5",
        "has(self.ratio) ? self.ratio > 0.0 : true",
        "self.metadata.name.startsWith('a')",
    ];
    for rule in ok {
        let mut schema = spec_schema(
            json!([{ "rule": rule.replace("self.metadata", "self.spec") }]),
            spec.clone(),
        );
        if rule.contains("metadata") {
            schema["x-kubernetes-validations"] = json!([{ "rule": rule }]);
            schema["properties"]["spec"]["x-kubernetes-validations"] = json!([]);
        }
        if let Err(e) = Rules::compile(&schema, AT) {
            panic!(
                "{rule}: {:?}",
                e.iter().map(|e| e.to_string()).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn schema_without_rules_is_empty() {
    let r = rules(json!({"type": "object", "properties": {"spec": {"type": "object"}}}));
    assert!(r.is_empty());
    assert!(r.validate(&json!({"spec": {}}), None).is_empty());
}

#[test]
fn rules_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Rules>();
}
