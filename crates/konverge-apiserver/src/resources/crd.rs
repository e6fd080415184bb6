//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): validating and defaulting a
//! definition, and turning an accepted one into the [`ResourceType`]s the server serves (one
//! per served version, all stored under one prefix in the storage version).
//!
//! The definition's structural schema drives everything a custom resource needs: pruning,
//! defaulting and validation ([`konverge_apimachinery::schema`]), `x-kubernetes-validations`
//! rules ([`konverge_apimachinery::cel`]), server-side apply's list and map semantics
//! ([`konverge_apimachinery::ssa`]), `kubectl get` columns and `kubectl explain`.
//! [`crate::controllers::crd`] establishes definitions and cleans up after deleted ones.

use std::sync::Arc;

use konverge_apimachinery::cel::Rules;
use konverge_apimachinery::field::{ErrorType, FieldError};
use konverge_apimachinery::schema::Structural;
use konverge_apimachinery::ssa::Shape;
use serde_json::{Value, json};

use crate::error::Cause;
pub use crate::resources::custom::{ConversionWebhook, CustomResource, cause};
use crate::resources::jsonpath::JsonPath;
use crate::resources::webhook_config;
use crate::resources::{Cell, Column, NameRule, ResourceType, ScalePaths};

/// The API group of definitions.
pub const GROUP: &str = "apiextensions.k8s.io";

/// The finalizer every definition carries until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Whether objects read from storage need [`CustomResource::present`] to be served as `rt`.
pub fn needs_conversion(rt: &ResourceType) -> bool {
    rt.custom
        .as_ref()
        .is_some_and(|c| c.storage_version != rt.version)
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The versions of a definition, as written.
fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The version objects are stored in, if exactly one is marked.
pub fn storage_version(crd: &Value) -> Option<String> {
    let mut storage = versions(crd)
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true));
    let first = storage.next()?;
    if storage.next().is_some() {
        return None;
    }
    first["name"].as_str().map(String::from)
}

/// Defaults a definition as kube-apiserver does: `singular` and `listKind` from `kind`,
/// conversion `None`, empty `status.storedVersions`.
pub fn default_definition(crd: &mut Value) {
    if let Some(names) = crd
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if names
            .get("singular")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if !kind.is_empty()
            && names
                .get("listKind")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    if let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("conversion")
            .or_insert_with(|| json!({"strategy": "None"}));
    }
    if let Some(service) = crd
        .pointer_mut("/spec/conversion/webhook/clientConfig/service")
        .and_then(Value::as_object_mut)
        && service.get("port").is_none_or(Value::is_null)
    {
        service.insert("port".into(), json!(443));
    }
}

/// Prepares a new definition: the cleanup finalizer, and its stored version.
pub fn prepare_definition(crd: &mut Value) {
    let md = crate::resources::meta::metadata_mut(crd);
    let finalizers = md.entry("finalizers").or_insert_with(|| json!([]));
    if let Value::Array(list) = finalizers
        && !list.iter().any(|f| f == CLEANUP_FINALIZER)
    {
        list.push(json!(CLEANUP_FINALIZER));
    }
    if let Some(storage) = storage_version(crd) {
        crd["status"] = json!({"storedVersions": [storage], "conditions": [], "acceptedNames": {"kind": "", "plural": ""}});
    }
}

fn dns1035(value: &str) -> Option<String> {
    crate::resources::meta::name_problems(NameRule::Rfc1035Label, value)
        .into_iter()
        .next()
}

/// Validates a definition (`old` on update), with kube-apiserver's messages.
pub fn validate_definition(crd: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errors: Vec<FieldError> = Vec::new();
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let name = str_at(crd, "/metadata/name");
    if name != format!("{plural}.{group}") {
        errors.push(FieldError::invalid(
            "metadata.name",
            json!(name),
            r#"must be spec.names.plural+"."+spec.group"#,
        ));
    }
    if group.is_empty() {
        errors.push(FieldError::required("spec.group", ""));
    } else if !crate::resources::meta::name_problems(NameRule::Subdomain, group).is_empty() {
        errors.push(FieldError::invalid(
            "spec.group",
            json!(group),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
    } else if !group.contains('.') {
        errors.push(FieldError::invalid(
            "spec.group",
            json!(group),
            "should be a domain with at least one dot",
        ));
    }
    match str_at(crd, "/spec/scope") {
        "" => errors.push(FieldError::required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => errors.push(FieldError::not_supported(
            "spec.scope",
            json!(other),
            &["Cluster".into(), "Namespaced".into()],
        )),
    }
    let all = versions(crd);
    // kube-apiserver keeps one schema every version shares as `spec.validation` (internal
    // version), and reports its problems there.
    let first_schema = all
        .first()
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
        .filter(|s| s.is_object());
    let shared_schema = first_schema.is_some()
        && all
            .iter()
            .all(|v| v.pointer("/schema/openAPIV3Schema") == first_schema);
    let mut seen = std::collections::BTreeSet::new();
    let mut unique = true;
    let mut storage = 0;
    for (i, version) in all.iter().enumerate() {
        let vname = version["name"].as_str().unwrap_or("");
        let path = format!("spec.versions[{i}]");
        if !seen.insert(vname) {
            unique = false;
        }
        if version["storage"].as_bool() == Some(true) {
            storage += 1;
        }
        if let Some(problem) = dns1035(vname) {
            errors.push(FieldError::invalid(
                format!("{path}.name"),
                json!(vname),
                problem,
            ));
        }
        match version.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => errors.push(FieldError::required(
                format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
            // Checked once, at the first version, under the path it is hoisted to.
            Some(_) if shared_schema && i > 0 => {}
            Some(schema) => {
                let at = if shared_schema {
                    "spec.validation.openAPIV3Schema".to_string()
                } else {
                    format!("{path}.schema.openAPIV3Schema")
                };
                if let Err(errs) = Structural::from_json(schema, &at) {
                    errors.extend(errs);
                } else if let Err(errs) = Rules::compile(schema, &at) {
                    errors.extend(errs);
                }
            }
        }
        errors.extend(validate_subresources(version, &path));
        if let Some(columns) = version["additionalPrinterColumns"].as_array() {
            for (j, column) in columns.iter().enumerate() {
                errors.extend(validate_column(
                    column,
                    &format!("{path}.additionalPrinterColumns[{j}]"),
                ));
            }
        }
        errors.extend(validate_selectable_fields(version, &path));
    }
    let shown_versions = Value::Array(all.to_vec());
    if !unique {
        errors.push(FieldError::invalid(
            "spec.versions",
            shown_versions.clone(),
            "must contain unique version names",
        ));
    }
    if storage != 1 {
        errors.push(FieldError::invalid(
            "spec.versions",
            shown_versions,
            "must have exactly one version marked as storage version",
        ));
    }
    for (field, value) in [
        ("plural", plural),
        ("singular", str_at(crd, "/spec/names/singular")),
        ("kind", str_at(crd, "/spec/names/kind")),
        ("listKind", str_at(crd, "/spec/names/listKind")),
    ] {
        let path = format!("spec.names.{field}");
        if value.is_empty() {
            errors.push(FieldError::required(path, ""));
        } else if matches!(field, "plural" | "singular") {
            if let Some(problem) = dns1035(value) {
                errors.push(FieldError::invalid(path, json!(value), problem));
            }
        } else if !value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            errors.push(FieldError::invalid(
                path,
                json!(value),
                "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
            ));
        }
    }
    if let Some(short) = crd
        .pointer("/spec/names/shortNames")
        .and_then(Value::as_array)
    {
        for (i, s) in short.iter().enumerate() {
            let s = s.as_str().unwrap_or("");
            if let Some(problem) = dns1035(s) {
                errors.push(FieldError::invalid(
                    format!("spec.names.shortNames[{i}]"),
                    json!(s),
                    problem,
                ));
            }
        }
    }
    errors.extend(validate_conversion(crd, old));
    if let Some(old) = old {
        let established = old
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        let mut immutable = vec![
            ("spec.group", "/spec/group"),
            ("spec.names.plural", "/spec/names/plural"),
        ];
        if established {
            immutable.push(("spec.scope", "/spec/scope"));
            immutable.push(("spec.names.kind", "/spec/names/kind"));
        }
        for (field, pointer) in immutable {
            let now = crd.pointer(pointer).cloned().unwrap_or(Value::Null);
            if old.pointer(pointer).cloned().unwrap_or(Value::Null) != now {
                errors.push(FieldError::invalid(field, now, "field is immutable"));
            }
        }
    }
    errors.extend(validate_preserve_unknown_fields(crd, old));
    errors.iter().map(cause).collect()
}

fn validate_subresources(version: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(scale) = version.pointer("/subresources/scale") else {
        return errors;
    };
    let at = format!("{path}.subresources.scale");
    for (field, required) in [
        ("specReplicasPath", true),
        ("statusReplicasPath", true),
        ("labelSelectorPath", false),
    ] {
        match scale.get(field).and_then(Value::as_str) {
            None | Some("") if required => {
                errors.push(FieldError::required(format!("{at}.{field}"), ""));
            }
            None | Some("") => {}
            Some(p) => {
                let prefix = if field == "specReplicasPath" {
                    ".spec."
                } else {
                    ".status."
                };
                if !(p.starts_with(prefix)
                    || (field == "labelSelectorPath" && p.starts_with(".spec.")))
                {
                    errors.push(FieldError::invalid(
                        format!("{at}.{field}"),
                        json!(p),
                        format!(
                            "should be a json path under {}",
                            prefix.trim_end_matches('.')
                        ),
                    ));
                }
            }
        }
    }
    errors
}

fn validate_column(column: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if column["name"].as_str().is_none_or(str::is_empty) {
        errors.push(FieldError::required(format!("{path}.name"), ""));
    }
    match column["type"].as_str() {
        None | Some("") => errors.push(FieldError::required(format!("{path}.type"), "")),
        Some("integer" | "number" | "string" | "boolean" | "date") => {}
        Some(other) => errors.push(FieldError::not_supported(
            format!("{path}.type"),
            json!(other),
            &["boolean", "date", "integer", "number", "string"].map(String::from),
        )),
    }
    match column["jsonPath"].as_str() {
        None | Some("") => errors.push(FieldError::required(format!("{path}.jsonPath"), "")),
        Some(p) => {
            if let Err(problem) = JsonPath::parse(p) {
                errors.push(FieldError::invalid(
                    format!("{path}.jsonPath"),
                    json!(p),
                    format!("must be a simple json path: {problem}"),
                ));
            }
        }
    }
    errors
}

/// A dotted field path from a JSON path (`.spec.replicas` → `spec.replicas`).
fn dotted(path: &str) -> String {
    path.trim_start_matches('.').to_string()
}

/// The resources a definition serves: one per served version.
pub fn served_types(crd: &Value) -> Vec<ResourceType> {
    let Some(storage) = storage_version(crd) else {
        return Vec::new();
    };
    let crd_name = str_at(crd, "/metadata/name").to_string();
    let fingerprint = format!(
        "{}/{}",
        str_at(crd, "/metadata/uid"),
        crd.pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    );
    let webhook = conversion_webhook(crd, &storage);
    let names = &crd["spec"]["names"];
    let list = |field: &str| -> Vec<String> {
        names[field]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    versions(crd)
        .iter()
        .filter(|v| v["served"].as_bool() == Some(true))
        .filter_map(|version| {
            let schema = version
                .pointer("/schema/openAPIV3Schema")
                .filter(|s| s.is_object())
                .cloned();
            let structural = schema
                .as_ref()
                .and_then(|s| Structural::from_json(s, "").ok());
            let rules = schema
                .as_ref()
                .and_then(|s| Rules::compile_stored(s).ok())
                .filter(|r| !r.is_empty());
            let shape = Arc::new(
                schema
                    .as_ref()
                    .map(Shape::from_openapi_v3)
                    .unwrap_or_else(Shape::deduced),
            );
            let subresources = &version["subresources"];
            let scale = subresources
                .get("scale")
                .filter(|s| s.is_object())
                .map(|s| ScalePaths {
                    spec_replicas: dotted(
                        s["specReplicasPath"].as_str().unwrap_or(".spec.replicas"),
                    ),
                    status_replicas: dotted(
                        s["statusReplicasPath"]
                            .as_str()
                            .unwrap_or(".status.replicas"),
                    ),
                    selector: s["labelSelectorPath"]
                        .as_str()
                        .filter(|p| !p.is_empty())
                        .map(dotted),
                    selector_is_string: true,
                });
            Some(ResourceType {
                group: str_at(crd, "/spec/group").to_string(),
                version: version["name"].as_str()?.to_string(),
                kind: names["kind"].as_str()?.to_string(),
                plural: names["plural"].as_str()?.to_string(),
                singular: names["singular"].as_str().unwrap_or("").to_string(),
                namespaced: str_at(crd, "/spec/scope") == "Namespaced",
                short_names: list("shortNames"),
                categories: list("categories"),
                status: subresources.get("status").is_some_and(Value::is_object),
                scale,
                generation: true,
                name_rule: NameRule::Subdomain,
                codec: None,
                validate: None,
                default: None,
                prepare_create: None,
                columns: printer_columns(version),
                selectable_fields: selectable_fields(version),
                field_labels: crate::resources::FieldLabels::Converted,
                create_on_update: false,
                verbs: crate::resources::ALL_VERBS,
                subresources: Vec::new(),
                storage_version_hash: Some(crate::resources::storage_version_hash(
                    str_at(crd, "/spec/group"),
                    &storage,
                    names["kind"].as_str()?,
                )),
                serving: crate::resources::Serving::Stored,
                stored_under: None,
                conversion: None,
                status_resets: crate::resources::STATUS_RESETS_ALL,
                allocates_addresses: false,
                deletion: crate::resources::Deletion::Plain,
                custom: Some(Arc::new(CustomResource {
                    crd_name: crd_name.clone(),
                    storage_version: storage.clone(),
                    schema,
                    defaults_on_read: structural.as_ref().is_some_and(Structural::has_defaults),
                    structural,
                    rules,
                    shape,
                    fingerprint: fingerprint.clone(),
                    webhook: webhook.clone(),
                })),
            })
        })
        .collect()
}

/// How many fields a version may make selectable.
const MAX_SELECTABLE_FIELDS: usize = 8;

/// A version's `selectableFields`: each a path to a string, boolean or integer field of its
/// schema, outside metadata, once, and at most eight of them.
fn validate_selectable_fields(version: &Value, path: &str) -> Vec<FieldError> {
    let Some(fields) = version["selectableFields"]
        .as_array()
        .filter(|f| !f.is_empty())
    else {
        return Vec::new();
    };
    let at = format!("{path}.selectableFields");
    let Some(schema) = version
        .pointer("/schema/openAPIV3Schema")
        .filter(|s| s.is_object())
    else {
        return vec![FieldError::invalid(
            at,
            json!(""),
            "selectableFields may only be set when version.schema.openAPIV3Schema is not included",
        )];
    };
    let mut errors = Vec::new();
    let mut unique = std::collections::BTreeSet::new();
    for (i, field) in fields.iter().enumerate() {
        let field_at = format!("{at}[{i}].jsonPath");
        let json_path = field["jsonPath"].as_str().unwrap_or("");
        if json_path.is_empty() {
            errors.push(FieldError::required(field_at, ""));
            continue;
        }
        let (named, found) =
            match konverge_apimachinery::cel::field_path_in_schema(json_path, schema, false) {
                Ok(found) => found,
                Err(problem) => {
                    errors.push(FieldError::invalid(
                        field_at,
                        json!(json_path),
                        format!("is an invalid path: {problem}"),
                    ));
                    continue;
                }
            };
        if named.split(['.', '[']).next() == Some("metadata") {
            errors.push(FieldError::invalid(
                field_at.clone(),
                json!(json_path),
                "must not point to fields in metadata",
            ));
        }
        if !matches!(
            found.get("type").and_then(Value::as_str),
            Some("string" | "boolean" | "integer")
        ) {
            errors.push(FieldError::invalid(
                field_at.clone(),
                json!(json_path),
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        if !unique.insert(named) {
            errors.push(FieldError::new(
                ErrorType::Duplicate,
                field_at,
                Some(json!(json_path)),
                "",
            ));
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        errors.push(FieldError::new(
            ErrorType::TooMany,
            at,
            Some(json!(unique.len())),
            format!("must have at most {MAX_SELECTABLE_FIELDS} items"),
        ));
    }
    errors
}

/// A version's `selectableFields`, selected by their path without the leading dot
/// (`spec.color`), as kube-apiserver names them.
fn selectable_fields(version: &Value) -> Vec<crate::resources::SelectableField> {
    version["selectableFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let json_path = f["jsonPath"].as_str()?;
            Some(crate::resources::SelectableField {
                label: json_path.strip_prefix('.').unwrap_or(json_path).to_string(),
                value: crate::resources::FieldValue::Path(JsonPath::parse(json_path).ok()?),
            })
        })
        .collect()
}

/// The `kubectl get` columns of a version: its `additionalPrinterColumns`, or Age.
fn printer_columns(version: &Value) -> Vec<Column> {
    let given = version["additionalPrinterColumns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if given.is_empty() {
        return vec![Column {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            priority: 0,
            cell: Cell::Path(
                JsonPath::parse(".metadata.creationTimestamp").expect("a valid path"),
            ),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into(),
        }];
    }
    given
        .iter()
        .filter_map(|c| {
            Some(Column {
                name: c["name"].as_str()?.to_string(),
                type_: c["type"].as_str()?.to_string(),
                format: c["format"].as_str().unwrap_or("").to_string(),
                priority: c["priority"].as_i64().unwrap_or(0),
                cell: Cell::Path(JsonPath::parse(c["jsonPath"].as_str()?).ok()?),
                description: c["description"].as_str().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The `kubectl get crd` columns.
pub fn definition_columns() -> Vec<Column> {
    vec![Column {
        name: "Created At".into(),
        type_: "date".into(),
        format: String::new(),
        priority: 0,
        cell: Cell::Fn(|o| {
            o.pointer("/metadata/creationTimestamp")
                .cloned()
                .unwrap_or(Value::Null)
        }),
        description: String::new(),
    }]
}

/// The ConversionReview versions the server speaks, as kube-apiserver lists them in its
/// messages.
const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Whether a definition's condition `type_` is `True`.
fn condition_true(crd: &Value, type_: &str) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// The webhook's client configuration, if the definition has one
/// (`spec.conversion.webhook.clientConfig`; kube-apiserver's internal
/// `spec.conversion.webhookClientConfig`).
fn webhook_client_config(crd: &Value) -> Option<&Value> {
    crd.pointer("/spec/conversion/webhook/clientConfig")
        .filter(|c| !c.is_null())
}

/// `spec.conversion.webhook.conversionReviewVersions` (kube-apiserver's internal
/// `spec.conversion.conversionReviewVersions`).
fn review_versions(crd: &Value) -> Vec<String> {
    crd.pointer("/spec/conversion/webhook/conversionReviewVersions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .map(|v| v.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The `caBundle` of a client configuration, decoded (it is base64 in JSON).
fn ca_bundle(config: &Value) -> Vec<u8> {
    use base64::Engine;
    config
        .get("caBundle")
        .and_then(Value::as_str)
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_default()
}

/// `spec.conversion`, as kube-apiserver validates it: the strategy, and for `Webhook` the
/// client configuration and the ConversionReview versions; `None` forbids both. Field paths
/// are kube-apiserver's internal ones (`spec.conversion.webhookClientConfig`,
/// `spec.conversion.conversionReviewVersions`), which is what it reports for v1 too.
fn validate_conversion(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(conversion) = crd.pointer("/spec/conversion").filter(|c| !c.is_null()) else {
        return errors;
    };
    let strategy = conversion
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("");
    let preserve_unknown = crd
        .pointer("/spec/preserveUnknownFields")
        .and_then(Value::as_bool)
        == Some(true);
    if strategy != "None" && preserve_unknown {
        errors.push(FieldError::invalid(
            "spec.conversion.strategy",
            json!(strategy),
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    match strategy {
        "" => errors.push(FieldError::required("spec.conversion.strategy", "")),
        "None" | "Webhook" => {}
        other => errors.push(FieldError::not_supported(
            "spec.conversion.strategy",
            json!(other),
            &["None".into(), "Webhook".into()],
        )),
    }
    let client = webhook_client_config(crd);
    let versions = review_versions(crd);
    const CLIENT: &str = "spec.conversion.webhookClientConfig";
    const VERSIONS: &str = "spec.conversion.conversionReviewVersions";
    if strategy != "Webhook" {
        if client.is_some() {
            errors.push(FieldError::forbidden(
                CLIENT,
                "should not be set when strategy is not set to Webhook",
            ));
        }
        if !versions.is_empty() {
            errors.push(FieldError::forbidden(
                VERSIONS,
                "should not be set when strategy is not set to Webhook",
            ));
        }
        return errors;
    }
    match client {
        None => errors.push(FieldError::required(
            CLIENT,
            "required when strategy is set to Webhook",
        )),
        Some(config) => {
            let url = config.get("url").and_then(Value::as_str);
            let service = config.get("service").filter(|s| !s.is_null());
            match (url, service) {
                (Some(url), None) => {
                    errors.extend(webhook_config::validate_url(&format!("{CLIENT}.url"), url))
                }
                (None, Some(service)) => errors.extend(webhook_config::validate_service(
                    &format!("{CLIENT}.service"),
                    service,
                    true,
                )),
                _ => errors.push(FieldError::required(
                    CLIENT,
                    "exactly one of url or service is required",
                )),
            }
            let bundle = ca_bundle(config);
            if !bundle.is_empty()
                && !allow_invalid_ca_bundle(old)
                && let Err(problem) = check_ca_bundle(&bundle)
            {
                errors.push(FieldError::new(
                    ErrorType::Invalid,
                    format!("{CLIENT}.caBundle"),
                    None,
                    format!(
                        "{}: unable to load root certificates: {problem}",
                        go_bytes(&bundle)
                    ),
                ));
            }
        }
    }
    // An update keeps accepting unrecognized versions only if the definition already had
    // nothing but unrecognized ones (kube-apiserver's ratcheting).
    let require_recognized = old.is_none_or(|old| {
        let before = review_versions(old);
        before.is_empty() || before.iter().any(|v| REVIEW_VERSIONS.contains(&v.as_str()))
    });
    errors.extend(validate_review_versions(
        &versions,
        require_recognized,
        VERSIONS,
    ));
    errors
}

/// Whether an update may keep an invalid `caBundle`: always before the definition is
/// established (and on create), afterwards only if the one it had was invalid too.
fn allow_invalid_ca_bundle(old: Option<&Value>) -> bool {
    let Some(old) = old else {
        return true;
    };
    if !condition_true(old, "Established") {
        return true;
    }
    let Some(config) = webhook_client_config(old) else {
        return false;
    };
    let bundle = ca_bundle(config);
    !bundle.is_empty() && check_ca_bundle(&bundle).is_err()
}

/// Whether a PEM bundle holds a certificate, and if not why, in the words of client-go's
/// `rootCertPool` (the first problem met, in order).
fn check_ca_bundle(pem: &[u8]) -> Result<(), String> {
    let mut rest = pem;
    let mut problem = None;
    while !rest.is_empty() {
        let Some((label, body, after)) = next_pem_block(rest) else {
            problem.get_or_insert_with(|| "unable to parse bytes as PEM block".to_string());
            break;
        };
        rest = after;
        if label != b"CERTIFICATE" {
            continue;
        }
        let text: String = body
            .iter()
            .filter(|b| !b.is_ascii_whitespace())
            .map(|b| char::from(*b))
            .collect();
        use base64::Engine;
        match base64::engine::general_purpose::STANDARD.decode(text) {
            // A DER certificate is a SEQUENCE.
            Ok(der) if der.first() == Some(&0x30) => return Ok(()),
            _ => {
                problem.get_or_insert_with(|| {
                    "failed to parse certificate: x509: malformed certificate".to_string()
                });
            }
        }
    }
    Err(problem.unwrap_or_else(|| "no valid certificate authority data seen".to_string()))
}

/// The next PEM block of `data`: its label, its body and what follows it.
fn next_pem_block(data: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    let start = find(data, BEGIN)? + BEGIN.len();
    let label_len = find(&data[start..], b"-----")?;
    let label = &data[start..start + label_len];
    let body_start = start + label_len + 5;
    let end_marker = [b"-----END ".as_slice(), label, b"-----"].concat();
    let body_len = find(&data[body_start..], &end_marker)?;
    let after = body_start + body_len + end_marker.len();
    Some((
        label,
        &data[body_start..body_start + body_len],
        &data[after..],
    ))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Bytes as Go's `%#v` prints a `[]byte`: `[]byte{0x6e, 0x6f}`.
fn go_bytes(bytes: &[u8]) -> String {
    let shown: Vec<String> = bytes.iter().map(|b| format!("0x{b:x}")).collect();
    format!("[]byte{{{}}}", shown.join(", "))
}

/// A `[]string` as Go's `%#v` prints it: `[]string{"v2", "v3"}`.
fn go_strings(values: &[String]) -> String {
    let shown: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]string{{{}}}", shown.join(", "))
}

/// `conversionReviewVersions`: at least one, no duplicates, each a DNS-1035 label, and (unless
/// ratcheted) one the server speaks.
fn validate_review_versions(
    versions: &[String],
    require_recognized: bool,
    path: &str,
) -> Vec<FieldError> {
    if versions.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let mut errors = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut recognized = false;
    for (i, version) in versions.iter().enumerate() {
        if !seen.insert(version.as_str()) {
            errors.push(FieldError::invalid(
                format!("{path}[{i}]"),
                json!(version),
                "duplicate version",
            ));
            continue;
        }
        for problem in crate::resources::meta::name_problems(NameRule::Rfc1035Label, version) {
            errors.push(FieldError::invalid(
                format!("{path}[{i}]"),
                json!(version),
                problem,
            ));
        }
        recognized |= REVIEW_VERSIONS.contains(&version.as_str());
    }
    if require_recognized && !recognized {
        // kube-apiserver lists the accepted versions sorted.
        let mut accepted = REVIEW_VERSIONS;
        accepted.sort_unstable();
        errors.push(FieldError::new(
            ErrorType::Invalid,
            path,
            None,
            format!(
                "{}: must include at least one of {}",
                go_strings(versions),
                accepted.join(", ")
            ),
        ));
    }
    errors
}

/// `spec.preserveUnknownFields` may not be set to true (a definition that had it keeps it).
fn validate_preserve_unknown_fields(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let set = |d: &Value| {
        d.pointer("/spec/preserveUnknownFields")
            .and_then(Value::as_bool)
            == Some(true)
    };
    if old.is_some_and(set) || !set(crd) {
        return Vec::new();
    }
    vec![FieldError::invalid(
        "spec.preserveUnknownFields",
        json!(true),
        "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
    )]
}

/// The webhook that converts a definition's objects, when its strategy is `Webhook`.
fn conversion_webhook(crd: &Value, storage: &str) -> Option<Arc<ConversionWebhook>> {
    if crd
        .pointer("/spec/conversion/strategy")
        .and_then(Value::as_str)
        != Some("Webhook")
    {
        return None;
    }
    let config: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookClientConfig =
        serde_json::from_value(webhook_client_config(crd)?.clone()).ok()?;
    let schemas = versions(crd)
        .iter()
        .filter_map(|v| {
            let schema = v.pointer("/schema/openAPIV3Schema")?;
            Some((
                v["name"].as_str()?.to_string(),
                Structural::from_json(schema, "").ok()?,
            ))
        })
        .collect();
    Some(Arc::new(ConversionWebhook {
        crd_name: str_at(crd, "/metadata/name").to_string(),
        group: str_at(crd, "/spec/group").to_string(),
        kind: str_at(crd, "/spec/names/kind").to_string(),
        storage_version: storage.to_string(),
        client: crate::webhook::client_config::ClientConfig::conversion(&config),
        review_versions: review_versions(crd),
        schemas,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_bundles_are_judged_as_client_go_judges_them() {
        assert_eq!(
            check_ca_bundle(b"not a pem"),
            Err("unable to parse bytes as PEM block".into())
        );
        assert_eq!(
            check_ca_bundle(b"-----BEGIN KEY-----\nAAAA\n-----END KEY-----"),
            Err("no valid certificate authority data seen".into())
        );
        assert_eq!(
            check_ca_bundle(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            Err("failed to parse certificate: x509: malformed certificate".into())
        );
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec!["ca".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("a certificate");
        assert_eq!(check_ca_bundle(cert.pem().as_bytes()), Ok(()));
        assert_eq!(go_bytes(b"no"), "[]byte{0x6e, 0x6f}");
    }

    #[test]
    fn webhook_services_are_checked_with_kube_apiserver_paths() {
        let messages = |service: Value| -> Vec<String> {
            webhook_config::validate_service("s", &service, true)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            messages(json!({"name": "n", "namespace": "ns", "path": "//"})),
            [r#"s.path: Invalid value: "//": segment[0] may not be empty"#]
        );
        assert_eq!(
            messages(json!({"name": "n", "namespace": "ns", "path": "/a/b/", "port": 70000})),
            [
                "s.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive"
            ]
        );
        assert!(messages(json!({"name": "n", "namespace": "ns", "path": "/"})).is_empty());
    }
}
