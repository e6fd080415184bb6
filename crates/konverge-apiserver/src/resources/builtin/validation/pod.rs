//! Pods and pod templates: containers, ports, restart policies.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;
use crate::error::Cause;

/// Containers, init containers: names (unique across both), images, ports.
pub(super) fn containers(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let mut names = BTreeSet::new();
    for list in ["containers", "initContainers"] {
        let items = spec.get(list).and_then(Value::as_array);
        if list == "containers" && items.is_none_or(Vec::is_empty) {
            causes.push(required(format!("{path}.containers")));
        }
        for (i, c) in items.into_iter().flatten().enumerate() {
            let at = format!("{path}.{list}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => causes.push(required(format!("{at}.name"))),
                Some(name) => {
                    let problems = check_name(NameRule::Label, name, &format!("{at}.name"));
                    if problems.is_empty() && !names.insert(name.to_string()) {
                        causes.push(duplicate(format!("{at}.name"), &json!(name)));
                    }
                    causes.extend(problems);
                }
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                causes.push(required(format!("{at}.image")));
            }
            if list == "containers" && c.get("restartPolicy").is_some_and(|r| !r.is_null()) {
                causes.push(forbidden(
                    format!("{at}.restartPolicy"),
                    "may not be set for non-init containers",
                ));
            }
            ports(c, &at, causes);
        }
    }
}

fn ports(container: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut names = BTreeSet::new();
    for (j, port) in container
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("{at}.ports[{j}]");
        match port.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => causes.push(required(format!("{path}.containerPort"))),
            Some(n) if !(1..=65535).contains(&n) => causes.push(Cause::invalid(
                format!("{path}.containerPort"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            )),
            _ => {}
        }
        if let Some(n) = port.get("hostPort").and_then(Value::as_i64)
            && n != 0
            && !(1..=65535).contains(&n)
        {
            causes.push(Cause::invalid(
                format!("{path}.hostPort"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            ));
        }
        protocol(port, &path, causes);
        if let Some(name) = port
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            let problems = port_name_problems(name);
            if problems.is_empty() && !names.insert(name.to_string()) {
                causes.push(duplicate(format!("{path}.name"), &json!(name)));
            }
            for problem in problems {
                causes.push(Cause::invalid(
                    format!("{path}.name"),
                    &json!(name),
                    problem,
                ));
            }
        }
    }
}

/// A port's protocol, when set, is one Kubernetes knows.
pub(super) fn protocol(port: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(protocol) = port.get("protocol").and_then(Value::as_str)
        && !matches!(protocol, "TCP" | "UDP" | "SCTP")
    {
        causes.push(not_supported(
            format!("{path}.protocol"),
            protocol,
            &["SCTP", "TCP", "UDP"],
        ));
    }
}

/// `IsValidPortName`.
fn port_name_problems(name: &str) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if name.len() > 15 {
        problems.push("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        problems.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        problems.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        problems.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("must not begin or end with a hyphen");
    }
    problems
}

fn restart_policy(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    match spec.get("restartPolicy").and_then(Value::as_str) {
        None | Some("") => causes.push(required(format!("{path}.restartPolicy"))),
        Some("Always" | "OnFailure" | "Never") => {}
        Some(other) => causes.push(not_supported(
            format!("{path}.restartPolicy"),
            other,
            &["Always", "OnFailure", "Never"],
        )),
    }
}

pub(crate) fn pod(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    containers(&spec, "spec", &mut causes);
    restart_policy(&spec, "spec", &mut causes);
    causes
}
