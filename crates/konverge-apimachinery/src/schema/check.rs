//! Parsing of `openAPIV3Schema` JSON into [`Structural`] and the checks kube-apiserver runs
//! on a CRD's schema: structurality (`ValidateStructural`), defaults
//! (`structuraldefaulting.ValidateDefaults`) and the OpenAPI restrictions
//! (`ValidateCustomResourceDefinitionOpenAPISchema`), in that order.

use serde_json::{Map, Value, json};

use super::{AdditionalProperties, Structural, regex::Regex};
use crate::field::FieldError;

const MAX_DEPTH: usize = 200;

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn wrong(path: &str, name: &str, v: &Value, want: &str) -> FieldError {
    FieldError::invalid(child(path, name), v.clone(), format!("must be {want}"))
}

/// Parses one node; JSON of the wrong shape is reported and otherwise ignored.
pub(super) fn parse(v: &Value, path: &str, errs: &mut Vec<FieldError>, depth: usize) -> Structural {
    let mut s = <Structural as Default>::default();
    let Some(obj) = v.as_object() else {
        errs.push(FieldError::invalid(path, v.clone(), "must be an object"));
        return s;
    };
    if depth > MAX_DEPTH {
        errs.push(FieldError::forbidden(path, "nests too deeply"));
        return s;
    }
    for (k, val) in obj {
        parse_key(&mut s, obj, k, val, path, errs, depth);
    }
    s
}

fn string(val: &Value, path: &str, k: &str, errs: &mut Vec<FieldError>) -> String {
    match val.as_str() {
        Some(x) => x.to_string(),
        None => {
            errs.push(wrong(path, k, val, "a string"));
            String::new()
        }
    }
}

fn boolean(val: &Value, path: &str, k: &str, errs: &mut Vec<FieldError>) -> bool {
    match val.as_bool() {
        Some(b) => b,
        None => {
            errs.push(wrong(path, k, val, "a boolean"));
            false
        }
    }
}

fn int(val: &Value, path: &str, k: &str, errs: &mut Vec<FieldError>) -> Option<i64> {
    match val.as_i64() {
        Some(i) => Some(i),
        None => {
            errs.push(wrong(path, k, val, "an integer"));
            None
        }
    }
}

fn float(val: &Value, path: &str, k: &str, errs: &mut Vec<FieldError>) -> Option<f64> {
    match val.as_f64() {
        Some(f) => Some(f),
        None => {
            errs.push(wrong(path, k, val, "a number"));
            None
        }
    }
}

fn strings(val: &Value, path: &str, k: &str, errs: &mut Vec<FieldError>) -> Vec<String> {
    match val.as_array() {
        Some(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => {
            errs.push(wrong(path, k, val, "a list of strings"));
            Vec::new()
        }
    }
}

fn schemas(
    val: &Value,
    path: &str,
    k: &str,
    errs: &mut Vec<FieldError>,
    depth: usize,
) -> Vec<Structural> {
    match val.as_array() {
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| parse(item, &index(&child(path, k), i), errs, depth + 1))
            .collect(),
        None => {
            errs.push(wrong(path, k, val, "a list of schemas"));
            Vec::new()
        }
    }
}

fn parse_key(
    s: &mut Structural,
    _obj: &Map<String, Value>,
    k: &str,
    val: &Value,
    path: &str,
    errs: &mut Vec<FieldError>,
    depth: usize,
) {
    match k {
        "type" => s.type_ = string(val, path, k, errs),
        "format" => s.format = string(val, path, k, errs),
        "description" => s.description = string(val, path, k, errs),
        "title" => s.title = string(val, path, k, errs),
        "default" => s.default = Some(val.clone()),
        "nullable" => s.nullable = boolean(val, path, k, errs),
        "properties" => match val.as_object() {
            Some(props) => {
                for (name, p) in props {
                    let p_path = key(&child(path, k), name);
                    s.properties
                        .insert(name.clone(), parse(p, &p_path, errs, depth + 1));
                }
            }
            None => errs.push(wrong(path, k, val, "an object")),
        },
        "items" => {
            if val.is_array() {
                s.items_is_array = true;
            } else {
                s.items = Some(Box::new(parse(val, &child(path, k), errs, depth + 1)));
            }
        }
        "additionalProperties" => {
            s.additional_properties = Some(match val {
                Value::Bool(b) => AdditionalProperties::Bool(*b),
                _ => AdditionalProperties::Schema(Box::new(parse(
                    val,
                    &child(path, k),
                    errs,
                    depth + 1,
                ))),
            })
        }
        "x-kubernetes-preserve-unknown-fields" => {
            s.preserve_unknown_fields = Some(boolean(val, path, k, errs))
        }
        "x-kubernetes-embedded-resource" => s.embedded_resource = boolean(val, path, k, errs),
        "x-kubernetes-int-or-string" => s.int_or_string = boolean(val, path, k, errs),
        "x-kubernetes-list-type" => s.list_type = Some(string(val, path, k, errs)),
        "x-kubernetes-list-map-keys" => s.list_map_keys = strings(val, path, k, errs),
        "x-kubernetes-map-type" => s.map_type = Some(string(val, path, k, errs)),
        "x-kubernetes-validations" => s.x_validations = Some(val.clone()),
        "maximum" => s.maximum = float(val, path, k, errs),
        "minimum" => s.minimum = float(val, path, k, errs),
        "exclusiveMaximum" => s.exclusive_maximum = boolean(val, path, k, errs),
        "exclusiveMinimum" => s.exclusive_minimum = boolean(val, path, k, errs),
        "maxLength" => s.max_length = int(val, path, k, errs),
        "minLength" => s.min_length = int(val, path, k, errs),
        "maxItems" => s.max_items = int(val, path, k, errs),
        "minItems" => s.min_items = int(val, path, k, errs),
        "maxProperties" => s.max_properties = int(val, path, k, errs),
        "minProperties" => s.min_properties = int(val, path, k, errs),
        "multipleOf" => s.multiple_of = float(val, path, k, errs),
        "uniqueItems" => s.unique_items = boolean(val, path, k, errs),
        "pattern" => {
            let p = string(val, path, k, errs);
            s.compiled_pattern = Regex::new(&p).ok();
            s.pattern = Some(p);
        }
        "enum" => match val.as_array() {
            Some(items) => s.enum_ = Some(items.clone()),
            None => errs.push(wrong(path, k, val, "a list")),
        },
        "required" => s.required = strings(val, path, k, errs),
        "allOf" => s.all_of = schemas(val, path, k, errs, depth),
        "oneOf" => s.one_of = schemas(val, path, k, errs, depth),
        "anyOf" => s.any_of = schemas(val, path, k, errs, depth),
        "not" => s.not = Some(Box::new(parse(val, &child(path, k), errs, depth + 1))),
        "example" | "externalDocs" | "$schema" => {}
        "id" | "$ref" | "definitions" | "dependencies" | "patternProperties"
        | "additionalItems" => s.unsupported.push(k.to_string()),
        _ => errs.push(FieldError::new(
            crate::field::ErrorType::Invalid,
            child(path, k),
            None,
            "unknown field",
        )),
    }
}

/// The checks kube-apiserver runs on a parsed schema, in its order.
pub(super) fn check(s: &Structural, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s.nullable {
        errs.push(FieldError::forbidden(
            child(path, "nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let mut structural = Vec::new();
    invariants(s, Level::Root, path, &mut structural);
    completeness(s, path, path, &mut structural);
    structural.sort_by_key(|e| e.to_string());
    if !structural.is_empty() {
        errs.extend(structural);
    } else {
        let mut root = s.clone();
        root.embedded_resource = true;
        defaults(&root, path, true, false, &mut errs);
    }
    openapi(s, path, true, &Ssv::default(), &mut errs);
    errs
}

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

fn is_int_or_string_pair(v: &[Structural]) -> bool {
    let only_type = |s: &Structural, t: &str| {
        let mut probe = s.clone();
        if probe.type_ != t {
            return false;
        }
        probe.type_.clear();
        is_empty_node(&probe)
    };
    v.len() == 2 && only_type(&v[0], "integer") && only_type(&v[1], "string")
}

fn is_empty_node(s: &Structural) -> bool {
    s.type_.is_empty()
        && s.format.is_empty()
        && s.description.is_empty()
        && s.title.is_empty()
        && s.default.is_none()
        && !s.nullable
        && s.properties.is_empty()
        && s.items.is_none()
        && s.additional_properties.is_none()
        && s.preserve_unknown_fields.is_none()
        && !s.embedded_resource
        && !s.int_or_string
        && s.list_type.is_none()
        && s.list_map_keys.is_empty()
        && s.map_type.is_none()
        && s.x_validations.is_none()
        && !has_value_validation(s)
}

fn has_value_validation(s: &Structural) -> bool {
    s.maximum.is_some()
        || s.minimum.is_some()
        || s.exclusive_maximum
        || s.exclusive_minimum
        || s.max_length.is_some()
        || s.min_length.is_some()
        || s.pattern.is_some()
        || s.max_items.is_some()
        || s.min_items.is_some()
        || s.unique_items
        || s.multiple_of.is_some()
        || s.enum_.is_some()
        || s.max_properties.is_some()
        || s.min_properties.is_some()
        || !s.required.is_empty()
        || !s.all_of.is_empty()
        || !s.one_of.is_empty()
        || !s.any_of.is_empty()
        || s.not.is_some()
        || !s.format.is_empty()
}

fn invariants(s: &Structural, lvl: Level, path: &str, errs: &mut Vec<FieldError>) {
    if s.type_ == "array" && s.items.is_none() {
        errs.push(FieldError::required(
            child(path, "items"),
            "must be specified",
        ));
    }
    if let Some(items) = &s.items {
        invariants(items, Level::Item, &child(path, "items"), errs);
    }
    for (k, p) in &s.properties {
        invariants(p, Level::Field, &key(&child(path, "properties"), k), errs);
    }
    if let Some(ap) = &s.additional_properties {
        if lvl == Level::Root {
            errs.push(FieldError::forbidden(
                child(path, "additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let AdditionalProperties::Schema(ap) = ap {
            invariants(ap, Level::Field, &child(path, "additionalProperties"), errs);
        }
    }
    if s.int_or_string && s.preserve_unknown_fields == Some(true) {
        errs.push(FieldError::invalid(
            child(path, "x-kubernetes-preserve-unknown-fields"),
            json!(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if s.int_or_string && s.embedded_resource {
        errs.push(FieldError::invalid(
            child(path, "x-kubernetes-embedded-resource"),
            json!(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_pair(&s.any_of);
    let skip_first_all_of_any_of = s
        .all_of
        .first()
        .is_some_and(|a| is_int_or_string_pair(&a.any_of));
    value_validation(s, skip_any_of, skip_first_all_of_any_of, path, errs);

    let check_metadata = lvl == Level::Root || s.embedded_resource;
    let preserve = s.preserve_unknown_fields == Some(true);
    if s.embedded_resource && s.type_ != "object" {
        let msg = "must be object if x-kubernetes-embedded-resource is true";
        errs.push(if s.type_.is_empty() {
            FieldError::required(child(path, "type"), msg)
        } else {
            FieldError::invalid(child(path, "type"), json!(s.type_), msg)
        });
    } else if s.type_.is_empty() && !s.int_or_string && !preserve {
        let msg = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(child(path, "type"), msg));
    }
    if s.embedded_resource && s.additional_properties.is_some() {
        errs.push(FieldError::forbidden(
            child(path, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !s.type_.is_empty() && s.type_ != "object" {
        errs.push(FieldError::invalid(
            child(path, "type"),
            json!(s.type_),
            "must be object at the root",
        ));
    }
    for meta in ["kind", "apiVersion"] {
        if let Some(p) = s.properties.get(meta)
            && check_metadata
            && p.type_ != "string"
        {
            errs.push(FieldError::invalid(
                child(&key(&child(path, "properties"), meta), "type"),
                json!(p.type_),
                "must be string",
            ));
        }
    }
    if let Some(m) = s.properties.get("metadata") {
        let m_path = key(&child(path, "properties"), "metadata");
        if check_metadata && m.type_ != "object" {
            errs.push(FieldError::invalid(
                child(&m_path, "type"),
                json!(m.type_),
                "must be object",
            ));
        }
        if lvl == Level::Root {
            let mut probe = m.clone();
            let names = ["name", "generateName"];
            if probe.properties.keys().all(|k| names.contains(&k.as_str())) {
                probe.properties.clear();
            }
            probe.type_.clear();
            probe.default = None;
            if !is_empty_node(&probe) {
                errs.push(FieldError::forbidden(
                    m_path,
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
    }
    if s.embedded_resource && !preserve && s.properties.is_empty() {
        errs.push(FieldError::required(
            child(path, "properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

fn value_validation(
    s: &Structural,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        for (i, n) in s.any_of.iter().enumerate() {
            nested(n, false, &index(&child(path, "anyOf"), i), errs);
        }
    }
    for (i, n) in s.all_of.iter().enumerate() {
        nested(
            n,
            skip_first_all_of_any_of && i == 0,
            &index(&child(path, "allOf"), i),
            errs,
        );
    }
    for (i, n) in s.one_of.iter().enumerate() {
        nested(n, false, &index(&child(path, "oneOf"), i), errs);
    }
    if let Some(n) = &s.not {
        nested(n, false, &child(path, "not"), errs);
    }
    if let Some(p) = &s.pattern
        && let Err(e) = Regex::new(p)
    {
        errs.push(FieldError::invalid(
            child(path, "pattern"),
            json!(p),
            format!("must be a valid regular expression, but isn't: {}", e.0),
        ));
    }
}

fn nested(s: &Structural, skip_any_of: bool, path: &str, errs: &mut Vec<FieldError>) {
    value_validation(s, skip_any_of, false, path, errs);
    if let Some(items) = &s.items {
        nested(items, false, &child(path, "items"), errs);
    }
    for (k, p) in &s.properties {
        nested(p, false, &key(&child(path, "properties"), k), errs);
    }
    let forbid = |errs: &mut Vec<FieldError>, name: &str, what: &str| {
        errs.push(FieldError::forbidden(
            child(path, name),
            format!("must be {what} to be structural"),
        ))
    };
    if !s.type_.is_empty() {
        forbid(errs, "type", "empty");
    }
    if s.additional_properties.is_some() {
        forbid(errs, "additionalProperties", "undefined");
    }
    if s.default.is_some() {
        forbid(errs, "default", "undefined");
    }
    if !s.title.is_empty() {
        forbid(errs, "title", "empty");
    }
    if !s.description.is_empty() {
        forbid(errs, "description", "empty");
    }
    if s.nullable {
        forbid(errs, "nullable", "false");
    }
    if s.preserve_unknown_fields == Some(true) {
        forbid(errs, "x-kubernetes-preserve-unknown-fields", "false");
    }
    if s.embedded_resource {
        forbid(errs, "x-kubernetes-embedded-resource", "false");
    }
    if s.int_or_string {
        forbid(errs, "x-kubernetes-int-or-string", "false");
    }
    if !s.list_map_keys.is_empty() {
        forbid(errs, "x-kubernetes-list-map-keys", "empty");
    }
    if s.list_type.is_some() {
        forbid(errs, "x-kubernetes-list-type", "undefined");
    }
    if s.map_type.is_some() {
        forbid(errs, "x-kubernetes-map-type", "undefined");
    }
    if s.x_validations
        .as_ref()
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        forbid(errs, "x-kubernetes-validations", "empty");
    }
    if s.properties.contains_key("metadata") {
        errs.push(FieldError::forbidden(
            key(&child(path, "properties"), "metadata"),
            "must not be specified in a nested context",
        ));
    }
}

fn completeness(s: &Structural, s_path: &str, v_path: &str, errs: &mut Vec<FieldError>) {
    completeness_value(s, Some(s), s_path, v_path, errs);
}

/// Properties and items used under allOf/anyOf/oneOf/not must be specified structurally.
fn completeness_value(
    v: &Structural,
    s: Option<&Structural>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<FieldError>,
) {
    let groups: [(&str, &[Structural]); 3] = [
        ("allOf", &v.all_of),
        ("anyOf", &v.any_of),
        ("oneOf", &v.one_of),
    ];
    if let Some(n) = &v.not {
        completeness_nested(n, s, s_path, &child(v_path, "not"), errs);
    }
    for (name, list) in groups {
        for (i, n) in list.iter().enumerate() {
            completeness_nested(n, s, s_path, &index(&child(v_path, name), i), errs);
        }
    }
}

fn completeness_nested(
    v: &Structural,
    s: Option<&Structural>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<FieldError>,
) {
    let Some(s) = s else {
        errs.push(FieldError::required(
            s_path,
            format!("because it is defined in {v_path}"),
        ));
        return;
    };
    completeness_value(v, Some(s), s_path, v_path, errs);
    if let Some(items) = &v.items {
        completeness_nested(
            items,
            s.items.as_deref(),
            &child(s_path, "items"),
            &child(v_path, "items"),
            errs,
        );
    }
    for (k, p) in &v.properties {
        let vp = key(&child(v_path, "properties"), k);
        match s.properties.get(k) {
            Some(sp) => completeness_nested(
                p,
                Some(sp),
                &key(&child(s_path, "properties"), k),
                &vp,
                errs,
            ),
            None => errs.push(FieldError::required(
                key(&child(s_path, "properties"), k),
                format!("because it is defined in {vp}"),
            )),
        }
    }
}

/// `structuraldefaulting.ValidateDefaults`: every default must be pruned and valid.
fn defaults(
    s: &Structural,
    path: &str,
    is_root: bool,
    inside_meta: bool,
    errs: &mut Vec<FieldError>,
) {
    let inside_meta = inside_meta && !s.embedded_resource;
    if let Some(d) = &s.default
        && !inside_meta
    {
        let d_path = child(path, "default");
        let mut pruned = d.clone();
        let mut probe = s.clone();
        probe.embedded_resource = s.embedded_resource;
        super::prune::prune_unknown(&probe, &mut pruned, s.embedded_resource);
        if &pruned != d {
            errs.push(FieldError::invalid(
                d_path.clone(),
                d.clone(),
                "must not have unknown fields",
            ));
        }
        let mut e = super::validate::embedded(&d_path, d, s);
        if e.is_empty() {
            e = super::validate::validate_schema(s, &d_path, d);
        }
        errs.extend(e);
    }
    let _ = is_root;
    if let Some(items) = &s.items {
        defaults(items, &child(path, "items"), false, inside_meta, errs);
    }
    for (k, p) in &s.properties {
        let meta = s.embedded_resource && matches!(k.as_str(), "metadata" | "apiVersion" | "kind");
        defaults(
            p,
            &key(&child(path, "properties"), k),
            false,
            inside_meta || meta,
            errs,
        );
    }
}

/// The restrictions of `specStandardValidatorV3` and friends.
#[derive(Clone, Default)]
struct Ssv {
    forbid_defaults: Option<String>,
    inside_meta: bool,
}

const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

fn openapi(s: &Structural, path: &str, is_root: bool, ssv: &Ssv, errs: &mut Vec<FieldError>) {
    // specStandardValidatorV3.validate
    if !s.type_.is_empty() && !TYPES.contains(&s.type_.as_str()) {
        let supported: Vec<String> = TYPES.iter().map(|t| t.to_string()).collect();
        errs.push(FieldError::not_supported(
            child(path, "type"),
            json!(s.type_),
            &supported,
        ));
    }
    if s.default.is_some()
        && let Some(reason) = &ssv.forbid_defaults
    {
        errs.push(FieldError::forbidden(
            child(path, "default"),
            format!("must not be set {reason}").trim_end().to_string(),
        ));
    }
    for u in &s.unsupported {
        let name = u.as_str();
        errs.push(FieldError::forbidden(
            child(path, name),
            format!("{name} is not supported"),
        ));
    }
    if s.type_ == "null" {
        errs.push(FieldError::forbidden(
            child(path, "type"),
            "type cannot be set to null, use nullable as an alternative",
        ));
    }
    if s.items_is_array {
        errs.push(FieldError::forbidden(
            child(path, "items"),
            "items must be a schema object and not an array",
        ));
    }
    if ssv.inside_meta && s.embedded_resource {
        errs.push(FieldError::forbidden(
            child(path, "x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }
    if s.unique_items {
        errs.push(FieldError::forbidden(
            child(path, "uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(ap) = &s.additional_properties {
        let disallowed = !matches!(ap, AdditionalProperties::Bool(true));
        if !s.properties.is_empty() && disallowed {
            errs.push(FieldError::forbidden(
                child(path, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if let AdditionalProperties::Schema(ap) = ap {
            let mut sub = ssv.clone();
            if ssv.inside_meta {
                sub.forbid_defaults =
                    Some("inside additionalProperties applying to object metadata".into());
            }
            openapi(ap, &child(path, "additionalProperties"), false, &sub, errs);
        }
    }
    for (k, p) in &s.properties {
        let mut sub = ssv.clone();
        if (is_root || s.embedded_resource)
            && matches!(k.as_str(), "metadata" | "apiVersion" | "kind")
        {
            sub.inside_meta = true;
            if is_root {
                sub.forbid_defaults = Some(format!("in top-level {k}"));
            }
        }
        openapi(p, &key(&child(path, "properties"), k), false, &sub, errs);
    }
    if let Some(n) = &s.not {
        openapi(n, &child(path, "not"), false, ssv, errs);
    }
    for (name, list) in [
        ("allOf", &s.all_of),
        ("oneOf", &s.one_of),
        ("anyOf", &s.any_of),
    ] {
        for (i, n) in list.iter().enumerate() {
            openapi(n, &index(&child(path, name), i), false, ssv, errs);
        }
    }
    if let Some(items) = &s.items {
        openapi(items, &child(path, "items"), false, ssv, errs);
    }
    if s.preserve_unknown_fields == Some(false) {
        errs.push(FieldError::invalid(
            child(path, "x-kubernetes-preserve-unknown-fields"),
            json!(false),
            "must be true or undefined",
        ));
    }
    if let Some(mt) = &s.map_type {
        if s.type_ != "object" {
            let msg = "must be object if x-kubernetes-map-type is specified";
            errs.push(if s.type_.is_empty() {
                FieldError::required(child(path, "type"), msg)
            } else {
                FieldError::invalid(child(path, "type"), json!(s.type_), msg)
            });
        }
        if mt != "atomic" && mt != "granular" {
            errs.push(FieldError::not_supported(
                child(path, "x-kubernetes-map-type"),
                json!(mt),
                &["atomic".into(), "granular".into()],
            ));
        }
    }
    if let Some(lt) = &s.list_type {
        if s.type_ != "array" {
            let msg = "must be array if x-kubernetes-list-type is specified";
            errs.push(if s.type_.is_empty() {
                FieldError::required(child(path, "type"), msg)
            } else {
                FieldError::invalid(child(path, "type"), json!(s.type_), msg)
            });
        } else if lt == "set"
            && let Some(is) = &s.items
        {
            let ip = child(path, "items");
            if is.type_ == "array" && is.list_type.as_deref().is_some_and(|t| t != "atomic") {
                errs.push(FieldError::invalid(
                    child(&ip, "x-kubernetes-list-type"),
                    json!(is.list_type),
                    "must be atomic as item of a list with x-kubernetes-list-type=set",
                ));
            }
            if is.type_ == "object" && is.map_type.as_deref() != Some("atomic") {
                errs.push(FieldError::invalid(
                    child(&ip, "x-kubernetes-map-type"),
                    json!(is.list_type),
                    "must be atomic as item of a list with x-kubernetes-list-type=set",
                ));
            }
        }
        if !matches!(lt.as_str(), "atomic" | "set" | "map") {
            errs.push(FieldError::not_supported(
                child(path, "x-kubernetes-list-type"),
                json!(lt),
                &["atomic".into(), "set".into(), "map".into()],
            ));
        }
    }
    if !s.list_map_keys.is_empty() {
        let msg = "must be map if x-kubernetes-list-map-keys is non-empty";
        match s.list_type.as_deref() {
            None => errs.push(FieldError::required(
                child(path, "x-kubernetes-list-type"),
                msg,
            )),
            Some("map") => {}
            Some(other) => errs.push(FieldError::invalid(
                child(path, "x-kubernetes-list-type"),
                json!(other),
                msg,
            )),
        }
    }
    if s.list_type.as_deref() == Some("map") {
        list_map(s, path, errs);
    }
    if let Some(is) = &s.items
        && matches!(s.list_type.as_deref(), Some("set") | Some("map"))
    {
        let lt = s.list_type.as_deref().unwrap_or_default();
        let ip = child(path, "items");
        if is.nullable {
            errs.push(FieldError::forbidden(
                child(&ip, "nullable"),
                format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
            ));
        }
        if lt == "map" {
            for k in &s.list_map_keys {
                let Some(p) = is.properties.get(k) else {
                    continue;
                };
                let pp = key(&child(&ip, "properties"), k);
                if !is.required.contains(k) && p.default.is_none() {
                    errs.push(FieldError::required(
                        child(&pp, "default"),
                        "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                    ));
                }
                if p.nullable {
                    errs.push(FieldError::forbidden(
                        child(&pp, "nullable"),
                        "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    ));
                }
            }
        }
    }
}

fn list_map(s: &Structural, path: &str, errs: &mut Vec<FieldError>) {
    if s.list_map_keys.is_empty() {
        errs.push(FieldError::required(
            child(path, "x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
        ));
    }
    let Some(is) = &s.items else {
        if s.items_is_array {
            errs.push(FieldError::invalid(
                child(path, "items"),
                json!(""),
                "must only have a single schema if x-kubernetes-list-type is map",
            ));
        } else {
            errs.push(FieldError::required(
                child(path, "items"),
                "must have a schema if x-kubernetes-list-type is map",
            ));
        }
        return;
    };
    let ip = child(path, "items");
    if is.type_ != "object" {
        errs.push(FieldError::invalid(
            child(&ip, "type"),
            json!(is.type_),
            "must be object if parent array's x-kubernetes-list-type is map",
        ));
        return;
    }
    let keys_value = json!(s.list_map_keys);
    let mut seen = std::collections::BTreeSet::new();
    for k in &s.list_map_keys {
        match is.properties.get(k) {
            Some(p) if p.type_ == "array" || p.type_ == "object" => {
                errs.push(FieldError::invalid(
                    child(&key(&child(&ip, "properties"), k), "type"),
                    json!(is.type_),
                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                ));
            }
            Some(_) => {}
            None => errs.push(FieldError::invalid(
                child(path, "x-kubernetes-list-map-keys"),
                keys_value.clone(),
                "entries must all be names of item properties",
            )),
        }
        if !seen.insert(k) {
            errs.push(FieldError::invalid(
                child(path, "x-kubernetes-list-map-keys"),
                keys_value.clone(),
                "must not contain duplicate entries",
            ));
        }
    }
}
