//! ConfigMaps and Secrets: keys, sizes, types and immutability.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;
use crate::error::Cause;

/// `IsConfigMapKey`: every problem of a data key.
pub(super) fn config_key_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if key.len() > 253 {
        problems.push("must be no more than 253 characters".to_string());
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        problems.push("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".to_string());
    }
    if key == "." {
        problems.push("must not be '.'".to_string());
    } else if key == ".." {
        problems.push("must not be '..'".to_string());
    } else if key.starts_with("..") {
        problems.push("must not start with '..'".to_string());
    }
    problems
}

fn keys_of<'a>(obj: &'a Value, field: &str) -> Vec<(&'a String, &'a Value)> {
    obj.get(field)
        .and_then(Value::as_object)
        .map(|m| m.iter().collect())
        .unwrap_or_default()
}

fn check_keys(obj: &Value, field: &str, causes: &mut Vec<Cause>) {
    for (key, _) in keys_of(obj, field) {
        for problem in config_key_problems(key) {
            causes.push(Cause::invalid(
                format!("{field}[{key}]"),
                &json!(key),
                problem,
            ));
        }
    }
}

/// A data value's size: base64-decoded for `data` of Secrets and `binaryData`.
fn data_size(value: &Value, base64: bool) -> usize {
    use base64::Engine;
    let text = value.as_str().unwrap_or_default();
    if base64 {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(|b| b.len())
            .unwrap_or(text.len())
    } else {
        text.len()
    }
}

/// Immutable ConfigMaps and Secrets keep their data.
fn check_immutable(obj: &Value, old: Option<&Value>, fields: &[&str], causes: &mut Vec<Cause>) {
    let Some(old) = old else { return };
    if old.get("immutable") != Some(&json!(true)) {
        return;
    }
    const DETAIL: &str = "field is immutable when `immutable` is set";
    if obj.get("immutable") != Some(&json!(true)) {
        causes.push(forbidden("immutable", DETAIL));
    }
    for field in fields {
        if obj.get(*field) != old.get(*field) {
            causes.push(forbidden(*field, DETAIL));
        }
    }
}

pub(crate) fn config_map(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    check_immutable(obj, old, &["data", "binaryData"], &mut causes);
    check_keys(obj, "data", &mut causes);
    check_keys(obj, "binaryData", &mut causes);
    let binary: BTreeSet<&String> = keys_of(obj, "binaryData")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for (key, _) in keys_of(obj, "data") {
        if binary.contains(key) {
            causes.push(Cause::invalid(
                format!("data[{key}]"),
                &json!(key),
                "duplicate of key present in binaryData",
            ));
        }
    }
    let size: usize = keys_of(obj, "data")
        .iter()
        .map(|(_, v)| data_size(v, false))
        .chain(
            keys_of(obj, "binaryData")
                .iter()
                .map(|(_, v)| data_size(v, true)),
        )
        .sum();
    if size > MAX_DATA_BYTES {
        // kube-apiserver reports the size on the empty path, printed `[]`.
        causes.push(too_long("[]", MAX_DATA_BYTES));
    }
    causes
}

pub(crate) fn secret(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(old) = old {
        let (new_type, old_type) = (obj.get("type"), old.get("type"));
        if new_type != old_type {
            causes.push(Cause::invalid(
                "type",
                new_type.unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
    }
    check_immutable(obj, old, &["data"], &mut causes);
    check_keys(obj, "data", &mut causes);
    let data = obj.get("data").and_then(Value::as_object);
    let has = |key: &str| data.is_some_and(|d| d.contains_key(key));
    let size: usize = keys_of(obj, "data")
        .iter()
        .map(|(_, v)| data_size(v, true))
        .sum();
    if size > MAX_DATA_BYTES {
        causes.push(too_long("data", MAX_DATA_BYTES));
    }
    match obj.get("type").and_then(Value::as_str).unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let account = obj
                .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if account.is_empty() {
                causes.push(required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                ));
            }
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => {
            causes.push(required("data[.dockercfg]"))
        }
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            causes.push(required("data[.dockerconfigjson]"))
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(required("data[username]"));
            causes.push(required("data[password]"));
        }
        "kubernetes.io/ssh-auth" => {
            let empty = data
                .and_then(|d| d.get("ssh-privatekey"))
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if empty {
                causes.push(required("data[ssh-privatekey]"));
            }
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has(key) {
                    causes.push(required(format!("data[{key}]")));
                }
            }
        }
        _ => {}
    }
    causes
}
