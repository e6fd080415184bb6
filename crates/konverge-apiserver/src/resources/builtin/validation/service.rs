//! Services: types, ports and node ports.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::pod::protocol;
use super::*;
use crate::error::Cause;

pub(crate) fn service(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = crate::resources::builtin::strategy::validate_service(obj, old);
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or("");
    if !matches!(
        kind,
        "ClusterIP" | "ExternalName" | "LoadBalancer" | "NodePort"
    ) {
        causes.push(not_supported(
            "spec.type",
            kind,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ));
    }
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    let ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() && !headless && kind != "ExternalName" {
        causes.push(required("spec.ports"));
    }
    if kind == "ExternalName"
        && spec
            .get("externalName")
            .and_then(Value::as_str)
            .is_none_or(|n| n.trim_end_matches('.').is_empty())
    {
        causes.push(required("spec.externalName"));
    }
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        match port
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            None if ports.len() > 1 => causes.push(required(format!("{path}.name"))),
            None => {}
            Some(name) => {
                let problems = check_name(NameRule::Label, name, &format!("{path}.name"));
                if problems.is_empty() && !names.insert(name.to_string()) {
                    causes.push(duplicate(format!("{path}.name"), &json!(name)));
                }
                causes.extend(problems);
            }
        }
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&number) {
            causes.push(Cause::invalid(
                format!("{path}.port"),
                &json!(number),
                "must be between 1 and 65535, inclusive",
            ));
        }
        protocol(port, &path, &mut causes);
        if kind == "ClusterIP"
            && port
                .get("nodePort")
                .and_then(Value::as_i64)
                .is_some_and(|n| n != 0)
        {
            causes.push(forbidden(
                format!("{path}.nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
    }
    causes
}
