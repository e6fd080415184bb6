//! Structural schemas of custom resources (`apiextensions.k8s.io/v1` `JSONSchemaProps`), as
//! kube-apiserver's apiextensions-apiserver uses them: parsing and CRD-time checks, value
//! validation of custom objects, pruning of unknown fields and defaulting.
//!
//! # Map
//!
//! - [`Structural`]: one schema node. [`Structural::from_json`] parses an `openAPIV3Schema`
//!   and reports non-structural schemas and bad values with kube-apiserver's wording
//!   (`check.rs`); the getters serve `kubectl explain`-like lookups.
//! - [`Structural::validate`] (`validate.rs`): kube-openapi's schema validator turned into
//!   field errors as apiextensions-apiserver turns them (`spec.name: Invalid value: "ab":
//!   spec.name in body should be at least 3 chars long`), plus the checks of embedded
//!   resources (`apiVersion`, `kind`) and of `x-kubernetes-list-type` set/map uniqueness.
//! - [`Structural::prune`] and [`Structural::default`] (`prune.rs`): the pruning and
//!   defaulting algorithms.
//! - `formats.rs`: the string formats CRD validation checks; `regex.rs`: a Go RE2-compatible
//!   matcher for `pattern`.

mod check;
mod formats;
mod prune;
mod regex;
mod validate;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::field::FieldError;

/// `additionalProperties`: a boolean or a schema.
#[derive(Debug, Clone)]
pub enum AdditionalProperties {
    /// `additionalProperties: true|false`.
    Bool(bool),
    /// `additionalProperties: {...}`.
    Schema(Box<Structural>),
}

/// One node of a structural schema: a JSONSchemaProps with its value validations and the
/// Kubernetes vendor extensions.
#[derive(Debug, Clone, Default)]
pub struct Structural {
    type_: String,
    format: String,
    description: String,
    title: String,
    default: Option<Value>,
    nullable: bool,
    properties: BTreeMap<String, Structural>,
    items: Option<Box<Structural>>,
    items_is_array: bool,
    additional_properties: Option<AdditionalProperties>,
    preserve_unknown_fields: Option<bool>,
    embedded_resource: bool,
    int_or_string: bool,
    list_type: Option<String>,
    list_map_keys: Vec<String>,
    map_type: Option<String>,
    x_validations: Option<Value>,
    maximum: Option<f64>,
    exclusive_maximum: bool,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    max_length: Option<i64>,
    min_length: Option<i64>,
    pattern: Option<String>,
    compiled_pattern: Option<regex::Regex>,
    max_items: Option<i64>,
    min_items: Option<i64>,
    unique_items: bool,
    multiple_of: Option<f64>,
    enum_: Option<Vec<Value>>,
    max_properties: Option<i64>,
    min_properties: Option<i64>,
    required: Vec<String>,
    all_of: Vec<Structural>,
    one_of: Vec<Structural>,
    any_of: Vec<Structural>,
    not: Option<Box<Structural>>,
    /// Keys present that CRDs do not support (`$ref`, `id`, `definitions`, ...).
    unsupported: Vec<String>,
}

impl Structural {
    /// Parses an `openAPIV3Schema` (JSON as in a CRD). `path` is where it sits in the CRD,
    /// e.g. `spec.versions[0].schema.openAPIV3Schema`; errors (non-structural schema, bad
    /// values) are field errors under it, worded as kube-apiserver words CRD validation errors.
    pub fn from_json(schema: &Value, path: &str) -> Result<Structural, Vec<FieldError>> {
        let mut errs = Vec::new();
        let s = check::parse(schema, path, &mut errs, 0);
        if !errs.is_empty() {
            return Err(errs);
        }
        let errs = check::check(&s, path);
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(s)
    }

    /// Validates a whole custom object (the root carries apiVersion, kind and metadata, which
    /// the schema does not constrain beyond what Kubernetes checks) and returns every error,
    /// with Kubernetes' wording and field paths.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate::validate_object(self, obj)
    }

    /// Validates `value` against this node alone, with errors under `path` (empty for a
    /// whole object), as apiextensions-apiserver validates e.g. the `status` of a status
    /// update (`path` = `status`).
    pub fn validate_value(&self, path: &str, value: &Value) -> Vec<FieldError> {
        validate::validate_schema(self, path, value)
    }

    /// Drops fields the schema does not specify (unless
    /// `x-kubernetes-preserve-unknown-fields`), keeping apiVersion/kind/metadata at the root
    /// and in `x-kubernetes-embedded-resource` objects, then drops `null`s of non-nullable
    /// fields without a default. Returns the unknown field paths as kube-apiserver reports
    /// them in warnings (`spec.foo`, `spec.list[0].bar`), sorted.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        prune::prune_root(self, obj)
    }

    /// Applies `default`s: missing fields (and `null`s of non-nullable fields) get the
    /// default of their schema, recursively, only inside objects that exist.
    pub fn default(&self, obj: &mut Value) {
        prune::default(self, obj, 0);
    }

    /// Whether this schema or any schema inside it has a `default`.
    pub fn has_defaults(&self) -> bool {
        self.default.is_some()
            || self.properties.values().any(Structural::has_defaults)
            || self.items.as_ref().is_some_and(|i| i.has_defaults())
            || matches!(&self.additional_properties, Some(AdditionalProperties::Schema(s)) if s.has_defaults())
    }

    /// The schema of property or map entry `name` of this object schema.
    pub fn child(&self, name: &str) -> Option<&Structural> {
        self.properties
            .get(name)
            .or_else(|| self.additional_properties())
    }

    /// The schema of property `name` only.
    pub fn property(&self, name: &str) -> Option<&Structural> {
        self.properties.get(name)
    }

    /// The declared properties, by name.
    pub fn properties(&self) -> &BTreeMap<String, Structural> {
        &self.properties
    }

    /// The schema of array items.
    pub fn items(&self) -> Option<&Structural> {
        self.items.as_deref()
    }

    /// The schema of map values (`additionalProperties` given as a schema).
    pub fn additional_properties(&self) -> Option<&Structural> {
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(s)) => Some(s),
            _ => None,
        }
    }

    /// Calls `visit` with every object of `obj` that is a resource of its own: the root
    /// (path `""`) and each `x-kubernetes-embedded-resource` object inside it (`spec.template`,
    /// `spec.items[0]`), in document order: where apiextensions-apiserver reads an ObjectMeta.
    pub fn visit_resources(&self, obj: &mut Value, visit: &mut dyn FnMut(&str, &mut Value)) {
        let mut path = String::new();
        visit(&path, obj);
        self.visit_embedded(obj, &mut path, visit, 0);
    }

    fn visit_embedded(
        &self,
        obj: &mut Value,
        path: &mut String,
        visit: &mut dyn FnMut(&str, &mut Value),
        depth: usize,
    ) {
        if depth > 1000 {
            return;
        }
        let len = path.len();
        match obj {
            Value::Object(map) => {
                for (key, value) in map.iter_mut() {
                    let Some(child) = self.child(key) else {
                        continue;
                    };
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    if child.embedded_resource && value.is_object() {
                        visit(path, value);
                    }
                    child.visit_embedded(value, path, visit, depth + 1);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                let Some(item) = self.items() else {
                    return;
                };
                for (i, value) in items.iter_mut().enumerate() {
                    path.push_str(&format!("[{i}]"));
                    if item.embedded_resource && value.is_object() {
                        visit(path, value);
                    }
                    item.visit_embedded(value, path, visit, depth + 1);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// `additionalProperties` as given.
    pub fn additional_properties_raw(&self) -> Option<&AdditionalProperties> {
        self.additional_properties.as_ref()
    }

    /// The node at a field path (`["spec", "containers"]`; `[]` and map keys step into
    /// items and map values).
    pub fn at_path(&self, path: &[&str]) -> Option<&Structural> {
        let mut node = self;
        for seg in path {
            node = if *seg == "[]" {
                node.items()?
            } else {
                node.child(seg)?
            };
        }
        Some(node)
    }

    /// `type` (empty when unset; `x-kubernetes-int-or-string` nodes have none).
    pub fn type_name(&self) -> &str {
        &self.type_
    }

    /// `format` as written in the schema.
    pub fn format(&self) -> &str {
        &self.format
    }

    /// `description`.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// `title`.
    pub fn title(&self) -> &str {
        &self.title
    }

    /// `default`.
    pub fn default_value(&self) -> Option<&Value> {
        self.default.as_ref()
    }

    /// `nullable`.
    pub fn nullable(&self) -> bool {
        self.nullable
    }

    /// `required`.
    pub fn required(&self) -> &[String] {
        &self.required
    }

    /// `enum`.
    pub fn enum_values(&self) -> Option<&[Value]> {
        self.enum_.as_deref()
    }

    /// `x-kubernetes-preserve-unknown-fields: true`.
    pub fn preserve_unknown_fields(&self) -> bool {
        self.preserve_unknown_fields == Some(true)
    }

    /// `x-kubernetes-embedded-resource`.
    pub fn embedded_resource(&self) -> bool {
        self.embedded_resource
    }

    /// `x-kubernetes-int-or-string`.
    pub fn int_or_string(&self) -> bool {
        self.int_or_string
    }

    /// `x-kubernetes-list-type`.
    pub fn list_type(&self) -> Option<&str> {
        self.list_type.as_deref()
    }

    /// `x-kubernetes-list-map-keys`.
    pub fn list_map_keys(&self) -> &[String] {
        &self.list_map_keys
    }

    /// `x-kubernetes-map-type`.
    pub fn map_type(&self) -> Option<&str> {
        self.map_type.as_deref()
    }

    /// `x-kubernetes-validations` as written (CEL rules are evaluated elsewhere).
    pub fn x_validations(&self) -> Option<&Value> {
        self.x_validations.as_ref()
    }
}
