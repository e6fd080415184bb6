//! Server-side apply and managed fields, on top of [`konverge_apimachinery::ssa`].
//!
//! Every write through the API records who changed what in `metadata.managedFields`: a
//! create, update or patch by manager `m` is an `Update` by `m` (recorded by `managed.rs`); an
//! `application/apply-patch+yaml` patch is an `Apply` ([`Registry::apply`]), which merges the
//! applied configuration into the object with the list semantics of the type, removes what
//! the manager stopped applying (unless others own it), and refuses to change fields other
//! managers own unless forced (409 with one cause per field and manager).
//!
//! What a type's lists and maps are (atomic, set, map with keys) comes from the built-in
//! types' descriptions (merge keys, list map keys with their defaults, atomic types such as
//! label selectors) or from a custom resource's schema (`managed.rs` keeps each type's shape).

use bytes::Bytes;
use konverge_apimachinery::ssa;
use serde_json::{Value, json};

use super::managed::{apply_error, request, shape};
use crate::error::{ApiError, Reason, Result};
use crate::registry::{Registry, WriteOptions, Written};
use crate::resources::ResourceType;

/// How often an apply starts over when the object appears or disappears underneath it.
const MAX_RACES: usize = 16;

/// Parses an apply patch body as kube-apiserver does: always as YAML (JSON is YAML too), as
/// sigs.k8s.io/yaml reads it; with what strict field validation refuses in its text
/// (duplicate keys, in goyaml's words).
pub fn parse_config(body: &Bytes) -> Result<konverge_apimachinery::decoding::Decoded> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the apply patch is not UTF-8"))?;
    let decoded = konverge_apimachinery::decoding::yaml(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !decoded.value.is_object() {
        return Err(ApiError::bad_request(
            "error decoding YAML: the apply patch must be an object",
        ));
    }
    Ok(decoded)
}

/// What an apply patch's duplicate keys do under `fieldValidation`: refuse the patch
/// (`Strict`, kube's `error strict decoding YAML: ...`) or become one warning per duplicate
/// (`Warn`, the default).
pub fn check_config_duplicates(
    strict_errors: &[String],
    validation: super::FieldValidation,
) -> Result<Vec<String>> {
    if strict_errors.is_empty() {
        return Ok(Vec::new());
    }
    match validation {
        super::FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "error strict decoding YAML: error converting YAML to JSON: {}",
            strict_errors.join(", ")
        ))),
        super::FieldValidation::Warn => Ok(super::yaml_warnings(strict_errors.to_vec())),
        super::FieldValidation::Ignore => Ok(Vec::new()),
    }
}

/// What of an applied configuration a write through `subresource` may change: the status
/// subresource applies status only; the main resource of a type with a status subresource
/// applies everything but status.
fn reset_fields(rt: &ResourceType, config: &Value, subresource: Option<&str>) -> Value {
    let mut config = config.clone();
    match subresource {
        Some("status") => {
            let md = config.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let mut kept = json!({
                "apiVersion": config.get("apiVersion").cloned().unwrap_or(Value::Null),
                "kind": config.get("kind").cloned().unwrap_or(Value::Null),
                "metadata": {},
            });
            for field in ["name", "namespace"] {
                if let Some(v) = md.get(field) {
                    kept["metadata"][field] = v.clone();
                }
            }
            if let Some(status) = config.get("status") {
                kept["status"] = status.clone();
            }
            config = kept;
        }
        _ if rt.status => {
            if let Some(map) = config.as_object_mut() {
                map.remove("status");
            }
        }
        _ => {}
    }
    config
}

/// Fields an apply configuration sets that a custom resource's schema does not declare:
/// kube-apiserver refuses to build the typed patch (500, as it does).
fn undeclared_fields(
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    config: &Value,
) -> Result<()> {
    let Some(structural) = rt.custom.as_ref().and_then(|c| c.structural.as_ref()) else {
        return Ok(());
    };
    let mut pruned = config.clone();
    let unknown = structural.prune(&mut pruned);
    let Some(first) = unknown.first() else {
        return Ok(());
    };
    let object = match ns {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    Err(ApiError::internal(format!(
        "failed to create typed patch object ({object}; {}/{}, Kind={}): .{first}: field not declared in schema",
        rt.group, rt.version, rt.kind
    )))
}

impl Registry {
    /// Server-side apply of `config` to the object `name` (or its status), creating the object
    /// when it does not exist.
    #[allow(clippy::too_many_arguments)]
    pub async fn apply(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        mut config: Value,
        opts: &WriteOptions,
        force: bool,
    ) -> Result<Written> {
        let manager = opts
            .field_manager
            .clone()
            .ok_or_else(|| ApiError::bad_request("fieldManager is required for apply patch"))?;
        rt.check_type_meta(&config)?;
        for (field, want) in [("apiVersion", rt.api_version()), ("kind", rt.kind.clone())] {
            if config
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(ApiError::bad_request(format!(
                    "{field} must be set in an apply patch (expected {want:?})"
                )));
            }
        }
        let md = crate::resources::meta::metadata_mut(&mut config);
        match md.get("name").and_then(Value::as_str) {
            Some(given) if !given.is_empty() && given != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({given}) does not match the name on the URL ({name})"
                )));
            }
            _ => {
                md.insert("name".into(), json!(name));
            }
        }
        // What the applier sent as managed fields is not theirs to set.
        md.remove("managedFields");
        let config = reset_fields(rt, &config, subresource);
        undeclared_fields(rt, ns, name, &config)?;
        let shape = shape(rt);
        let api_version = rt.api_version();
        let opts = WriteOptions {
            applied: true,
            ..opts.clone()
        };
        // Retried when the object is created or deleted underneath.
        let merge = |current: &Value| -> Result<Value> {
            let now = crate::resources::meta::now();
            let req = request(&api_version, &manager, subresource, &now, force);
            ssa::apply(&shape, Some(current), &config, &req).map_err(apply_error)
        };
        for _ in 0..MAX_RACES {
            match self.patch(rt, ns, name, subresource, &opts, &merge).await {
                // Absent: the apply creates it.
                Err(e) if e.reason == Reason::NotFound && subresource.is_none() => {}
                other => return other,
            }
            let now = crate::resources::meta::now();
            let req = request(&api_version, &manager, None, &now, force);
            let created = ssa::apply(&shape, None, &config, &req).map_err(apply_error)?;
            match self.create(rt, ns, created, &opts).await {
                // Created by someone else in the meantime: apply to theirs.
                Err(e) if e.reason == Reason::AlreadyExists => continue,
                other => return other,
            }
        }
        Err(ApiError::conflict(
            crate::error::Target {
                group: &rt.group,
                resource: &rt.plural,
                name,
            },
            "the object kept being created and deleted while it was applied",
        ))
    }
}
