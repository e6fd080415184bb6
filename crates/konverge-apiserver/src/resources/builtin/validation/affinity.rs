//! Where pods may run: node and pod (anti-)affinity, label selectors, tolerations.

use serde_json::{Value, json};

use super::*;
use crate::error::Cause;
use konverge_apimachinery::selector::{label_key_errors, label_value_errors};

/// `validateAffinity`: node affinity, pod affinity and pod anti-affinity.
pub(super) fn affinity(affinity: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(node) = affinity.get("nodeAffinity").filter(|a| !a.is_null()) {
        node_affinity(node, &format!("{path}.nodeAffinity"), causes);
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        if let Some(pod) = affinity.get(kind).filter(|a| !a.is_null()) {
            pod_affinity(pod, &format!("{path}.{kind}"), causes);
        }
    }
}

fn items<'a>(obj: &'a Value, field: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    obj.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

fn node_affinity(node: &Value, path: &str, causes: &mut Vec<Cause>) {
    const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    if let Some(selector) = node.get(REQUIRED).filter(|s| !s.is_null()) {
        let at = format!("{path}.{REQUIRED}.nodeSelectorTerms");
        let terms = selector.get("nodeSelectorTerms").and_then(Value::as_array);
        if terms.is_none_or(Vec::is_empty) {
            causes.push(required_because(
                at,
                "must have at least one node selector term",
            ));
        } else {
            for (i, term) in items(selector, "nodeSelectorTerms") {
                node_selector_term(term, &format!("{at}[{i}]"), true, causes);
            }
        }
    }
    for (i, term) in items(node, PREFERRED) {
        let at = format!("{path}.{PREFERRED}[{i}]");
        weight(term, &at, causes);
        // Preferred terms take any label value.
        let preference = term.get("preference").unwrap_or(&Value::Null);
        node_selector_term(preference, &format!("{at}.preference"), false, causes);
    }
}

/// A weighted term's weight: 1 to 100.
fn weight(term: &Value, at: &str, causes: &mut Vec<Cause>) {
    let weight = term.get("weight").and_then(Value::as_i64).unwrap_or(0);
    if !(1..=100).contains(&weight) {
        causes.push(Cause::invalid(
            format!("{at}.weight"),
            &json!(weight),
            "must be in the range 1-100",
        ));
    }
}

/// `ValidateNodeSelectorTerm`: its label expressions and field expressions.
fn node_selector_term(term: &Value, at: &str, check_values: bool, causes: &mut Vec<Cause>) {
    for (j, req) in items(term, "matchExpressions") {
        requirement(
            req,
            &format!("{at}.matchExpressions[{j}]"),
            true,
            check_values,
            causes,
        );
    }
    for (j, req) in items(term, "matchFields") {
        let path = format!("{at}.matchFields[{j}]");
        let operator = req.get("operator").and_then(Value::as_str).unwrap_or("");
        let values = req
            .get("values")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        match operator {
            "In" | "NotIn" if values != 1 => causes.push(required_because(
                format!("{path}.values"),
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            )),
            "In" | "NotIn" => {}
            other => causes.push(Cause::invalid(
                format!("{path}.operator"),
                &json!(other),
                "not a valid selector operator",
            )),
        }
        let key = req.get("key").and_then(Value::as_str).unwrap_or("");
        if key != "metadata.name" {
            causes.push(Cause::invalid(
                format!("{path}.key"),
                &json!(key),
                "not a valid field selector key",
            ));
            continue;
        }
        for (v, value) in items(req, "values") {
            let value = value.as_str().unwrap_or_default();
            for problem in crate::resources::meta::name_problems(NameRule::Subdomain, value) {
                causes.push(Cause::invalid(
                    format!("{path}.values[{v}]"),
                    &json!(value),
                    problem,
                ));
            }
        }
    }
}

/// A selector requirement (`ValidateNodeSelectorRequirement`, or with `node` false
/// `ValidateLabelSelectorRequirement`, which knows no Gt and Lt).
fn requirement(req: &Value, at: &str, node: bool, check_values: bool, causes: &mut Vec<Cause>) {
    let operator = req.get("operator").and_then(Value::as_str).unwrap_or("");
    let values = req
        .get("values")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let values_at = format!("{at}.values");
    match operator {
        "In" | "NotIn" => {
            if values == 0 {
                causes.push(required_because(
                    &values_at,
                    "must be specified when `operator` is 'In' or 'NotIn'",
                ));
            }
        }
        "Exists" | "DoesNotExist" => {
            if values > 0 {
                causes.push(forbidden(
                    &values_at,
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ));
            }
        }
        "Gt" | "Lt" if node => {
            if values != 1 {
                causes.push(required_because(
                    &values_at,
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                ));
            }
        }
        other => causes.push(Cause::invalid(
            format!("{at}.operator"),
            &json!(other),
            "not a valid selector operator",
        )),
    }
    let key = req.get("key").and_then(Value::as_str).unwrap_or("");
    for problem in label_key_errors(key) {
        causes.push(Cause::invalid(format!("{at}.key"), &json!(key), problem));
    }
    if check_values {
        for (v, value) in items(req, "values") {
            let value = value.as_str().unwrap_or_default();
            for problem in label_value_errors(value) {
                causes.push(Cause::invalid(
                    format!("{values_at}[{v}]"),
                    &json!(value),
                    problem,
                ));
            }
        }
    }
}

/// `ValidateLabelSelector`: labels (reported on the map) and expressions.
pub(super) fn label_selector(selector: &Value, at: &str, causes: &mut Vec<Cause>) {
    let labels = format!("{at}.matchLabels");
    for (key, value) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for problem in label_key_errors(key) {
            causes.push(Cause::invalid(&labels, &json!(key), problem));
        }
        let value = value.as_str().unwrap_or_default();
        for problem in label_value_errors(value) {
            causes.push(Cause::invalid(&labels, &json!(value), problem));
        }
    }
    for (i, req) in items(selector, "matchExpressions") {
        requirement(
            req,
            &format!("{at}.matchExpressions[{i}]"),
            false,
            true,
            causes,
        );
    }
}

fn pod_affinity(affinity: &Value, path: &str, causes: &mut Vec<Cause>) {
    const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    for (i, term) in items(affinity, REQUIRED) {
        pod_affinity_term(term, &format!("{path}.{REQUIRED}[{i}]"), causes);
    }
    for (i, weighted) in items(affinity, PREFERRED) {
        let at = format!("{path}.{PREFERRED}[{i}]");
        weight(weighted, &at, causes);
        let term = weighted.get("podAffinityTerm").unwrap_or(&Value::Null);
        pod_affinity_term(term, &format!("{at}.podAffinityTerm"), causes);
    }
}

/// `validatePodAffinityTerm` (but for matchLabelKeys and mismatchLabelKeys).
fn pod_affinity_term(term: &Value, at: &str, causes: &mut Vec<Cause>) {
    for field in ["labelSelector", "namespaceSelector"] {
        if let Some(selector) = term.get(field).filter(|s| !s.is_null()) {
            label_selector(selector, &format!("{at}.{field}"), causes);
        }
    }
    for (_, namespace) in items(term, "namespaces") {
        let namespace = namespace.as_str().unwrap_or_default();
        for problem in crate::resources::meta::name_problems(NameRule::Label, namespace) {
            // kube-apiserver reports them on `namespace`, without the index.
            causes.push(Cause::invalid(
                format!("{at}.namespace"),
                &json!(namespace),
                problem,
            ));
        }
    }
    let key = term
        .get("topologyKey")
        .and_then(Value::as_str)
        .unwrap_or("");
    let key_at = format!("{at}.topologyKey");
    if key.is_empty() {
        causes.push(required_because(&key_at, "can not be empty"));
    }
    for problem in label_key_errors(key) {
        causes.push(Cause::invalid(&key_at, &json!(key), problem));
    }
}

/// `ValidateTolerations`.
pub(super) fn tolerations(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    for (i, t) in items(spec, "tolerations") {
        let at = format!("{path}[{i}]");
        let text = |field: &str| t.get(field).and_then(Value::as_str).unwrap_or("");
        let (key, operator, value, effect) =
            (text("key"), text("operator"), text("value"), text("effect"));
        if !key.is_empty() {
            for problem in label_key_errors(key) {
                causes.push(Cause::invalid(format!("{at}.key"), &json!(key), problem));
            }
        }
        if key.is_empty() && operator != "Exists" {
            causes.push(Cause::invalid(
                format!("{at}.operator"),
                &json!(operator),
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        let seconds = t.get("tolerationSeconds").and_then(Value::as_i64);
        if seconds.is_some() && effect != "NoExecute" {
            causes.push(Cause::invalid(
                format!("{at}.effect"),
                &json!(effect),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let problems = label_value_errors(value);
                if !problems.is_empty() {
                    // kube-apiserver reports the value on `operator`.
                    causes.push(Cause::invalid(
                        format!("{at}.operator"),
                        &json!(value),
                        problems.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    // Go prints the whole toleration; its tolerationSeconds is a pointer,
                    // whose address no one can reproduce.
                    let seconds = match seconds {
                        None => "(*int64)(nil)".to_string(),
                        Some(s) => format!("(*int64)({s})"),
                    };
                    let shown = format!(
                        "core.Toleration{{Key:{key:?}, Operator:{operator:?}, Value:{value:?}, Effect:{effect:?}, TolerationSeconds:{seconds}}}"
                    );
                    causes.push(invalid_shown(
                        format!("{at}.operator"),
                        &shown,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => causes.push(not_supported(
                format!("{at}.operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
        {
            causes.push(not_supported(
                format!("{at}.effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
}
