//! ResourceQuota: the names and values of `spec.hard` (and of `status.hard` and
//! `status.used`), the scopes and scope selector, and scopes that may not change.
//!
//! Where kube-apiserver reports a value that is neither a string nor a number (a quantity,
//! a list of scopes, a scope selector), it prints it as Go's `%#v` does; these messages do
//! the same.

use konverge_apimachinery::selector::label_key_errors;
use serde_json::Value;

use super::{cause, required_because};
use crate::error::Cause;

/// What quotas may limit unqualified (`helper.IsStandardQuotaResourceName`, hugepages aside).
const QUOTA: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];

/// What is counted in whole numbers (`helper.IsIntegerResourceName`, extended resources
/// aside).
const INTEGER: &[&str] = &[
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

fn hugepages(name: &str) -> bool {
    name.starts_with("hugepages-") || name.starts_with("requests.hugepages-")
}

/// `helper.IsExtendedResourceName`.
fn extended(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native
        && !name.starts_with("requests.")
        && label_key_errors(&format!("requests.{name}")).is_empty()
}

/// A `FieldValueInvalid` cause whose value is already printed as kube prints it.
fn invalid(field: impl Into<String>, shown: &str, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {shown}: {detail}"),
    )
}

/// `ValidateResourceQuotaResourceName`.
fn resource_name(name: &str, at: &str, causes: &mut Vec<Cause>) {
    let shown = format!("{name:?}");
    let problems = label_key_errors(name);
    if !problems.is_empty() {
        causes.extend(problems.iter().map(|p| invalid(at, &shown, p)));
    } else if !name.contains('/')
        && !super::pod::STANDARD_RESOURCES.contains(&name)
        && !hugepages(name)
    {
        causes.push(invalid(
            at,
            &shown,
            "must be a standard resource type or fully qualified",
        ));
    }
    if !name.contains('/') && !QUOTA.contains(&name) && !hugepages(name) {
        causes.push(invalid(at, &shown, "must be a standard resource for quota"));
    }
}

/// The suffixes `resource.ParseQuantity` knows: (base, exponent, format).
fn suffix(text: &str) -> Option<(u32, i32, &'static str)> {
    let meaning = konverge_apimachinery::quantity::suffix(text)?;
    Some((
        meaning.base,
        i32::try_from(meaning.exponent).ok()?,
        meaning.format.name(),
    ))
}

/// A quantity as Go's `%#v` prints the `resource.Quantity` that `ParseQuantity` makes of
/// `text`: its int64 amount and scale, and the text itself when it is already canonical.
/// Quantities that do not fit that form are held in an `inf.Dec`, which Go prints as a
/// pointer; an address stands in for it.
fn go_quantity(text: &str) -> String {
    let dump = |value: i64, scale: i32, dec: &str, s: &str, format: &str| {
        format!(
            "resource.Quantity{{i:resource.int64Amount{{value:{value}, scale:{scale}}}, d:resource.infDecAmount{{Dec:(*inf.Dec)({dec})}}, s:{s:?}, Format:{format:?}}}"
        )
    };
    if text == "0" {
        return dump(0, 0, "nil", "0", "DecimalSI");
    }
    let bytes = text.as_bytes();
    let negative = bytes.first() == Some(&b'-');
    let mut pos = usize::from(matches!(bytes.first(), Some(b'-' | b'+')));
    while bytes.get(pos) == Some(&b'0') {
        pos += 1;
    }
    let digits_from = |from: usize| {
        bytes[from..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(bytes.len(), |i| from + i)
    };
    let num_end = digits_from(pos);
    let mut num = &text[pos..num_end];
    if num.is_empty() {
        num = "0";
    }
    let mut end = num_end;
    let mut denom = "";
    if bytes.get(end) == Some(&b'.') {
        let denom_end = digits_from(end + 1);
        denom = &text[end + 1..denom_end];
        end = denom_end;
    }
    let fallback = |format: &str| dump(0, 0, "0xc000010000", "", format);
    let Some((base, exponent, format)) = suffix(&text[end..]) else {
        return fallback("DecimalSI");
    };
    let digits = i32::try_from(num.len() + denom.len()).unwrap_or(i32::MAX);
    let (precision, mut scale, mantissa) = if base == 10 {
        (18 - digits, exponent, 1i64)
    } else if exponent >= 0 && denom.is_empty() {
        let num_len = i32::try_from(num.len()).unwrap_or(i32::MAX);
        (
            15 - num_len - (exponent as f32 * 3.0 / 10.0) as i32 - 1,
            0,
            1i64 << exponent,
        )
    } else {
        (-1, 0, 1)
    };
    if precision < 0 {
        return fallback(format);
    }
    scale -= i32::try_from(denom.len()).unwrap_or(i32::MAX);
    if scale < -9 {
        return fallback(format);
    }
    let shifted = format!("{num}{denom}");
    let Some(value) = shifted
        .parse::<i64>()
        .ok()
        .and_then(|v| v.checked_mul(mantissa))
    else {
        return fallback(format);
    };
    let value = if negative { -value } else { value };
    let raw: i64 = shifted.parse().unwrap_or(0);
    let canonical = if base == 2 {
        exponent % 10 == 0 && raw & 0x07 != 0
    } else {
        scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0')
    };
    dump(
        value,
        scale,
        "nil",
        if canonical { text } else { "" },
        format,
    )
}

/// `ValidateResourceQuantityValue`: not negative; whole for what is counted.
fn quantity_value(name: &str, value: &Value, at: &str, causes: &mut Vec<Cause>) {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return,
    };
    let Some(q) = konverge_apimachinery::quantity::value(&text) else {
        return;
    };
    if q.nanos < 0 {
        causes.push(invalid(
            at,
            &format!("{:?}", q.canonical),
            "must be greater than or equal to 0",
        ));
    }
    // Thousandths, rounded up, as `MilliValue` reads them.
    let milli = q.nanos.div_euclid(1_000_000) + i128::from(q.nanos.rem_euclid(1_000_000) != 0);
    if (INTEGER.contains(&name) || extended(name)) && milli % 1000 != 0 {
        causes.push(invalid(at, &go_quantity(text.trim()), "must be an integer"));
    }
}

/// A resource list's names and values.
fn resource_list(list: Option<&Value>, at: &str, causes: &mut Vec<Cause>) {
    let Some(list) = list.and_then(Value::as_object) else {
        return;
    };
    for (name, value) in list {
        let path = format!("{at}[{name}]");
        resource_name(name, &path, causes);
        quantity_value(name, value, &path, causes);
    }
}

fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    value.and_then(Value::as_array).map(|items| {
        items
            .iter()
            .map(|i| i.as_str().unwrap_or("").to_string())
            .collect()
    })
}

/// A Go slice of a string type as `%#v` prints it: `[]T{"a", "b"}`, or `[]T(nil)`.
fn go_slice(kind: &str, items: Option<&[String]>) -> String {
    match items {
        None => format!("[]{kind}(nil)"),
        Some(items) => format!(
            "[]{kind}{{{}}}",
            items
                .iter()
                .map(|i| format!("{i:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The quota's `spec.scopeSelector` as `%#v` prints it.
fn go_selector(selector: &Value) -> String {
    let expressions = selector["matchExpressions"].as_array().map(|list| {
        list.iter()
            .map(|e| {
                format!(
                    "core.ScopedResourceSelectorRequirement{{ScopeName:{:?}, Operator:{:?}, Values:{}}}",
                    e["scopeName"].as_str().unwrap_or(""),
                    e["operator"].as_str().unwrap_or(""),
                    go_slice("string", strings(e.get("values")).as_deref()),
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    });
    match expressions {
        None => {
            "core.ScopeSelector{MatchExpressions:[]core.ScopedResourceSelectorRequirement(nil)}"
                .into()
        }
        Some(list) => format!(
            "core.ScopeSelector{{MatchExpressions:[]core.ScopedResourceSelectorRequirement{{{list}}}}}"
        ),
    }
}

/// `helper.IsResourceQuotaScopeValidForResource`.
fn scope_fits(scope: &str, resource: &str) -> bool {
    let count = resource == "pods";
    let compute = matches!(
        resource,
        "cpu" | "memory" | "limits.cpu" | "limits.memory" | "requests.cpu" | "requests.memory"
    );
    match scope {
        "Terminating"
        | "NotTerminating"
        | "NotBestEffort"
        | "PriorityClass"
        | "CrossNamespacePodAffinity" => count || compute,
        "BestEffort" => count,
        _ => true,
    }
}

/// Whether the standard hard names all fit `scope`.
fn misfits<'a>(scope: &str, hard: &'a [String]) -> impl Iterator<Item = &'a String> {
    let scope = scope.to_string();
    hard.iter()
        .filter(move |k| QUOTA.contains(&k.as_str()) || hugepages(k))
        .filter(move |k| !scope_fits(&scope, k))
}

/// Both of a pair of opposite scopes.
fn conflicting(scopes: &[&str]) -> usize {
    [
        ("BestEffort", "NotBestEffort"),
        ("Terminating", "NotTerminating"),
    ]
    .iter()
    .filter(|(a, b)| scopes.contains(a) && scopes.contains(b))
    .count()
}

/// `validateResourceQuotaScopes`.
fn scopes(spec: &Value, hard: &[String], causes: &mut Vec<Cause>) {
    let Some(list) = strings(spec.get("scopes")).filter(|l| !l.is_empty()) else {
        return;
    };
    let shown = go_slice("core.ResourceQuotaScope", Some(&list));
    for scope in &list {
        if !SCOPES.contains(&scope.as_str()) {
            causes.push(invalid("spec.scopes", &shown, "unsupported scope"));
        }
        for _ in misfits(scope, hard) {
            causes.push(invalid(
                "spec.scopes",
                &shown,
                "unsupported scope applied to resource",
            ));
        }
    }
    let names: Vec<&str> = list.iter().map(String::as_str).collect();
    for _ in 0..conflicting(&names) {
        causes.push(invalid("spec.scopes", &shown, "conflicting scopes"));
    }
}

/// `validateScopedResourceSelectorRequirement`.
fn scope_selector(spec: &Value, hard: &[String], causes: &mut Vec<Cause>) {
    let Some(selector) = spec.get("scopeSelector").filter(|s| !s.is_null()) else {
        return;
    };
    let at = "spec.scopeSelector.matchExpressions";
    let mut names = Vec::new();
    for expression in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let scope = expression["scopeName"].as_str().unwrap_or("");
        let operator = expression["operator"].as_str().unwrap_or("");
        let values = strings(expression.get("values"));
        if !SCOPES.contains(&scope) {
            causes.push(invalid(
                format!("{at}.scopeName"),
                &format!("{scope:?}"),
                "unsupported scope",
            ));
        }
        for _ in misfits(scope, hard) {
            causes.push(invalid(
                at,
                &go_selector(selector),
                "unsupported scope applied to resource",
            ));
        }
        if matches!(
            scope,
            "BestEffort"
                | "NotBestEffort"
                | "Terminating"
                | "NotTerminating"
                | "CrossNamespacePodAffinity"
        ) && operator != "Exists"
        {
            causes.push(invalid(
                format!("{at}.operator"),
                &format!("{operator:?}"),
                "must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
            ));
        }
        let count = values.as_ref().map_or(0, Vec::len);
        match operator {
            "In" | "NotIn" if count == 0 => causes.push(required_because(
                format!("{at}.values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "Exists" | "DoesNotExist" if count != 0 => causes.push(invalid(
                format!("{at}.values"),
                &go_slice("string", values.as_deref()),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(invalid(
                format!("{at}.operator"),
                &format!("{other:?}"),
                "not a valid selector operator",
            )),
        }
        names.push(scope);
    }
    // kube reports the pair against the quota's scopes list.
    let shown = go_slice(
        "core.ResourceQuotaScope",
        strings(spec.get("scopes")).as_deref(),
    );
    for _ in 0..conflicting(&names) {
        causes.push(invalid(at, &shown, "conflicting scopes"));
    }
}

/// kube's ResourceQuota validation: on create `ValidateResourceQuota`, on update also that
/// `spec.scopes` did not change; status writes check the status's names and values.
pub(crate) fn resource_quota(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    resource_list(spec.get("hard"), "spec.hard", &mut causes);
    let mut hard: Vec<String> = spec["hard"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    hard.sort();
    scopes(&spec, &hard, &mut causes);
    scope_selector(&spec, &hard, &mut causes);
    resource_list(obj.pointer("/status/hard"), "status.hard", &mut causes);
    resource_list(obj.pointer("/status/used"), "status.used", &mut causes);
    if let Some(old) = old {
        let set = |v: &Value| -> std::collections::BTreeSet<String> {
            strings(v.pointer("/spec/scopes"))
                .unwrap_or_default()
                .into_iter()
                .collect()
        };
        if set(obj) != set(old) {
            causes.push(invalid(
                "spec.scopes",
                &go_slice(
                    "core.ResourceQuotaScope",
                    strings(obj.pointer("/spec/scopes")).as_deref(),
                ),
                "field is immutable",
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_print_as_go_prints_the_parsed_struct() {
        assert_eq!(
            go_quantity("1.5"),
            r#"resource.Quantity{i:resource.int64Amount{value:15, scale:-1}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:"", Format:"DecimalSI"}"#
        );
        assert_eq!(
            go_quantity("1500m"),
            r#"resource.Quantity{i:resource.int64Amount{value:1500, scale:-3}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:"1500m", Format:"DecimalSI"}"#
        );
    }

    #[test]
    fn scopes_must_fit_the_resources_and_each_other() {
        let causes = resource_quota(
            &json!({"spec": {"hard": {"memory": "1Gi", "pods": "2"}, "scopes": ["BestEffort", "NotBestEffort"]}}),
            None,
        );
        let messages: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            messages,
            [
                r#"spec.scopes: Invalid value: []core.ResourceQuotaScope{"BestEffort", "NotBestEffort"}: unsupported scope applied to resource"#,
                r#"spec.scopes: Invalid value: []core.ResourceQuotaScope{"BestEffort", "NotBestEffort"}: conflicting scopes"#,
            ]
        );
    }
}
