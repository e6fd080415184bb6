//! ValidatingWebhookConfigurations and MutatingWebhookConfigurations: kube-apiserver's
//! defaults (`admissionregistration/v1`) and validation, with its field paths and words.
//!
//! An update is held to the rules its object already met: a configuration stored with side
//! effects, unknown AdmissionReview versions, repeated webhook names or invalid selector
//! values may keep them, as kube-apiserver allows.

use std::collections::BTreeSet;

use konverge_apimachinery::names::{dns1035_label_errors, dns1123_subdomain_errors};
use konverge_apimachinery::selector::{label_key_errors, label_value_errors};
use serde_json::{Value, json};

use super::*;
use crate::error::Cause;
use crate::resources::webhook_config;

/// The AdmissionReview versions kube-apiserver 1.33 accepts.
const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Which kind of configuration.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Validating,
    Mutating,
}

/// Defaults of a ValidatingWebhookConfiguration's webhooks.
pub(crate) fn default_validating_webhook_configuration(obj: &mut Value) {
    default_webhooks(obj, Kind::Validating);
}

/// Defaults of a MutatingWebhookConfiguration's webhooks.
pub(crate) fn default_mutating_webhook_configuration(obj: &mut Value) {
    default_webhooks(obj, Kind::Mutating);
}

fn default_webhooks(obj: &mut Value, kind: Kind) {
    let Some(webhooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for webhook in webhooks.iter_mut().filter_map(Value::as_object_mut) {
        let mut default = |field: &str, value: Value| {
            if webhook.get(field).is_none_or(Value::is_null) {
                webhook.insert(field.into(), value);
            }
        };
        default("failurePolicy", json!("Fail"));
        default("matchPolicy", json!("Equivalent"));
        default("namespaceSelector", json!({}));
        default("objectSelector", json!({}));
        default("timeoutSeconds", json!(10));
        if kind == Kind::Mutating {
            default("reinvocationPolicy", json!("Never"));
        }
        for rule in webhook
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            if rule.get("scope").is_none_or(Value::is_null) {
                rule.insert("scope".into(), json!("*"));
            }
        }
        if let Some(service) = webhook
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
            && service.get("port").is_none_or(Value::is_null)
        {
            service.insert("port".into(), json!(443));
        }
    }
}

/// `ValidateValidatingWebhookConfiguration` (and its update form).
pub(crate) fn validating_webhook_configuration(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    configuration(obj, old, Kind::Validating)
}

/// `ValidateMutatingWebhookConfiguration` (and its update form).
pub(crate) fn mutating_webhook_configuration(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    configuration(obj, old, Kind::Mutating)
}

/// What validation asks of a configuration; an update relaxes what the stored object did
/// not meet.
struct Options {
    require_no_side_effects: bool,
    require_recognized_review_version: bool,
    require_unique_names: bool,
    allow_invalid_label_values: bool,
    ignore_match_conditions: bool,
}

fn webhooks(obj: &Value) -> &[Value] {
    obj.get("webhooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn text<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or("")
}

fn strings(value: &Value, field: &str) -> Vec<String> {
    value
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap_or("").to_string())
        .collect()
}

impl Options {
    fn for_update(old: Option<&Value>, new: &Value) -> Options {
        let Some(old) = old else {
            return Options {
                require_no_side_effects: true,
                require_recognized_review_version: true,
                require_unique_names: true,
                allow_invalid_label_values: false,
                ignore_match_conditions: false,
            };
        };
        let before = webhooks(old);
        let mut names = BTreeSet::new();
        Options {
            require_no_side_effects: before
                .iter()
                .all(|w| matches!(text(w, "sideEffects"), "None" | "NoneOnDryRun")),
            require_recognized_review_version: before.iter().all(|w| {
                let versions = strings(w, "admissionReviewVersions");
                versions.is_empty()
                    || versions
                        .iter()
                        .any(|v| REVIEW_VERSIONS.contains(&v.as_str()))
            }),
            require_unique_names: before.iter().all(|w| names.insert(text(w, "name"))),
            allow_invalid_label_values: before.iter().any(|w| {
                ["namespaceSelector", "objectSelector"].iter().any(|s| {
                    w.get(*s).is_some_and(|selector| {
                        let mut causes = Vec::new();
                        label_selector(selector, "", false, &mut causes);
                        !causes.is_empty()
                    })
                })
            }),
            ignore_match_conditions: {
                let after = webhooks(new);
                after.len() == before.len()
                    && after
                        .iter()
                        .zip(before)
                        .all(|(a, b)| a.get("matchConditions") == b.get("matchConditions"))
            },
        }
    }
}

fn configuration(obj: &Value, old: Option<&Value>, kind: Kind) -> Vec<Cause> {
    let options = Options::for_update(old, obj);
    let mut causes = Vec::new();
    let mut names = BTreeSet::new();
    for (i, hook) in webhooks(obj).iter().enumerate() {
        let at = format!("webhooks[{i}]");
        webhook(hook, &at, kind, &options, &mut causes);
        review_versions(
            hook,
            &format!("{at}.admissionReviewVersions"),
            options.require_recognized_review_version,
            &mut causes,
        );
        let name = text(hook, "name");
        if options.require_unique_names && !name.is_empty() && !names.insert(name) {
            causes.push(duplicate(format!("{at}.name"), &json!(name)));
        }
    }
    causes
}

/// `validateValidatingWebhook` / `validateMutatingWebhook`.
fn webhook(hook: &Value, at: &str, kind: Kind, options: &Options, causes: &mut Vec<Cause>) {
    fully_qualified_name(text(hook, "name"), &format!("{at}.name"), causes);
    for (j, rule) in items(hook, "rules") {
        super::admission_policy::rule_with_operations(rule, &format!("{at}.rules[{j}]"), causes);
    }
    let mut supported = |field: &str, allowed: &[&str]| {
        if let Some(value) = hook.get(field).and_then(Value::as_str)
            && !allowed.contains(&value)
        {
            causes.push(not_supported(format!("{at}.{field}"), value, allowed));
        }
    };
    supported("failurePolicy", &["Fail", "Ignore"]);
    supported("matchPolicy", &["Equivalent", "Exact"]);
    let side_effects: &[&str] = if options.require_no_side_effects {
        &["None", "NoneOnDryRun"]
    } else {
        &["None", "NoneOnDryRun", "Some", "Unknown"]
    };
    // The typed decoding leaves an absent sideEffects empty.
    match text(hook, "sideEffects") {
        "" => causes.push(required_because(
            format!("{at}.sideEffects"),
            &format!("must specify one of {}", side_effects.join(", ")),
        )),
        value if !side_effects.contains(&value) => {
            causes.push(not_supported(
                format!("{at}.sideEffects"),
                value,
                side_effects,
            ));
        }
        _ => {}
    }
    if let Some(timeout) = hook.get("timeoutSeconds").and_then(Value::as_i64)
        && !(1..=30).contains(&timeout)
    {
        causes.push(Cause::invalid(
            format!("{at}.timeoutSeconds"),
            &json!(timeout),
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for field in ["namespaceSelector", "objectSelector"] {
        if let Some(selector) = hook.get(field).filter(|s| !s.is_null()) {
            label_selector(
                selector,
                &format!("{at}.{field}"),
                options.allow_invalid_label_values,
                causes,
            );
        }
    }
    if kind == Kind::Mutating
        && let Some(policy) = hook.get("reinvocationPolicy").and_then(Value::as_str)
        && !["IfNeeded", "Never"].contains(&policy)
    {
        causes.push(not_supported(
            format!("{at}.reinvocationPolicy"),
            policy,
            &["IfNeeded", "Never"],
        ));
    }
    client_config(
        hook.get("clientConfig"),
        &format!("{at}.clientConfig"),
        causes,
    );
    if !options.ignore_match_conditions {
        match_conditions(hook, &format!("{at}.matchConditions"), causes);
    }
}

/// `IsFullyQualifiedName`: a DNS subdomain of at least three segments.
fn fully_qualified_name(name: &str, at: &str, causes: &mut Vec<Cause>) {
    if name.is_empty() {
        causes.push(required(at));
        return;
    }
    let problems = dns1123_subdomain_errors(name);
    if !problems.is_empty() {
        causes.push(Cause::invalid(at, &json!(name), problems.join(",")));
        return;
    }
    if name.split('.').count() < 3 {
        causes.push(Cause::invalid(
            at,
            &json!(name),
            "should be a domain with at least three segments separated by dots",
        ));
    }
}

/// `ValidateLabelSelector`.
fn label_selector(selector: &Value, at: &str, allow_invalid_values: bool, causes: &mut Vec<Cause>) {
    let labels_at = format!("{at}.matchLabels");
    for (key, value) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for problem in label_key_errors(key) {
            causes.push(Cause::invalid(&labels_at, &json!(key), problem));
        }
        let value = value.as_str().unwrap_or("");
        for problem in label_value_errors(value) {
            causes.push(Cause::invalid(&labels_at, &json!(value), problem));
        }
    }
    for (i, requirement) in items(selector, "matchExpressions") {
        let at = format!("{at}.matchExpressions[{i}]");
        let values = strings(requirement, "values");
        match text(requirement, "operator") {
            "In" | "NotIn" if values.is_empty() => causes.push(required_because(
                format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(Cause::invalid(
                format!("{at}.operator"),
                &json!(other),
                "not a valid selector operator",
            )),
        }
        let key = text(requirement, "key");
        for problem in label_key_errors(key) {
            causes.push(Cause::invalid(format!("{at}.key"), &json!(key), problem));
        }
        if !allow_invalid_values {
            for (k, value) in values.iter().enumerate() {
                for problem in label_value_errors(value) {
                    causes.push(Cause::invalid(
                        format!("{at}.values[{k}]"),
                        &json!(value),
                        problem,
                    ));
                }
            }
        }
    }
}

/// Exactly one of `url` (`ValidateWebhookURL`, https only) and `service`
/// (`ValidateWebhookService`).
fn client_config(config: Option<&Value>, at: &str, causes: &mut Vec<Cause>) {
    let null = Value::Null;
    let config = config.unwrap_or(&null);
    let url = config.get("url").and_then(Value::as_str);
    let service = config.get("service").filter(|s| !s.is_null());
    match (url, service) {
        (Some(url), None) => webhook_url(url, &format!("{at}.url"), causes),
        (None, Some(service)) => webhook_service(service, &format!("{at}.service"), causes),
        _ => causes.push(required_because(
            at,
            "exactly one of url or service is required",
        )),
    }
}

fn webhook_url(url: &str, at: &str, causes: &mut Vec<Cause>) {
    causes.extend(
        webhook_config::validate_url(at, url)
            .iter()
            .map(crate::resources::crd::cause),
    );
}

fn webhook_service(service: &Value, at: &str, causes: &mut Vec<Cause>) {
    causes.extend(
        webhook_config::validate_service(at, service, false)
            .iter()
            .map(crate::resources::crd::cause),
    );
}

/// `validateMatchConditions`: as a policy's (names, at most 64, expressions compiled), in
/// the environment of webhooks (no `params`).
fn match_conditions(hook: &Value, at: &str, causes: &mut Vec<Cause>) {
    let null = Value::Null;
    let conditions = hook.get("matchConditions").unwrap_or(&null);
    super::admission_policy::match_conditions(conditions, at, false, causes);
}

/// `validateAdmissionReviewVersions`.
fn review_versions(hook: &Value, at: &str, require_recognized: bool, causes: &mut Vec<Cause>) {
    let versions = strings(hook, "admissionReviewVersions");
    if versions.is_empty() {
        causes.push(required_because(
            at,
            &format!("must specify one of {}", REVIEW_VERSIONS.join(", ")),
        ));
        return;
    }
    let mut seen = BTreeSet::new();
    let mut recognized = false;
    for (i, version) in versions.iter().enumerate() {
        if !seen.insert(version.as_str()) {
            causes.push(Cause::invalid(
                format!("{at}[{i}]"),
                &json!(version),
                "duplicate version",
            ));
            continue;
        }
        for problem in dns1035_label_errors(version) {
            causes.push(Cause::invalid(
                format!("{at}[{i}]"),
                &json!(version),
                problem,
            ));
        }
        recognized |= REVIEW_VERSIONS.contains(&version.as_str());
    }
    if require_recognized && !recognized {
        causes.push(Cause::invalid(
            at,
            &json!(versions),
            format!(
                "must include at least one of {}",
                REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn hook(extra: Value) -> Value {
        let mut hook = json!({
            "name": "hook.example.com",
            "clientConfig": {"service": {"namespace": "ns", "name": "svc"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            hook[k] = v;
        }
        hook
    }

    fn validate(hooks: Value) -> Vec<String> {
        let mut obj = json!({"webhooks": hooks});
        default_mutating_webhook_configuration(&mut obj);
        messages(&mutating_webhook_configuration(&obj, None))
    }

    #[test]
    fn defaults_are_kube_apiservers() {
        let mut obj = json!({"webhooks": [hook(json!({}))]});
        default_mutating_webhook_configuration(&mut obj);
        let hook = &obj["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(hook["matchPolicy"], "Equivalent");
        assert_eq!(hook["namespaceSelector"], json!({}));
        assert_eq!(hook["objectSelector"], json!({}));
        assert_eq!(hook["timeoutSeconds"], 10);
        assert_eq!(hook["reinvocationPolicy"], "Never");
        assert_eq!(hook["rules"][0]["scope"], "*");
        assert_eq!(hook["clientConfig"]["service"]["port"], 443);
        let mut obj = json!({"webhooks": [hook.clone()]});
        default_validating_webhook_configuration(&mut obj);
        assert!(validate(json!([hook])).is_empty());
    }

    #[test]
    fn webhooks_are_validated_with_kube_apiservers_words() {
        assert_eq!(
            validate(json!([hook(json!({
                "name": "hook",
                "sideEffects": "",
                "admissionReviewVersions": [],
                "timeoutSeconds": 31,
                "failurePolicy": "Maybe",
                "reinvocationPolicy": "Always",
            }))])),
            [
                r#"webhooks[0].name: Invalid value: "hook": should be a domain with at least three segments separated by dots"#,
                r#"webhooks[0].failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore""#,
                "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
                "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
                r#"webhooks[0].reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never""#,
                "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
            ]
        );
        assert_eq!(
            validate(json!([hook(json!({
                "rules": [{"operations": ["*", "CREATE", "PATCH"], "apiGroups": [], "apiVersions": ["v1", ""],
                    "resources": ["*", "pods", "pods/*", "pods/status"], "scope": "Everywhere"}],
                "admissionReviewVersions": ["v2", "v2"],
            }))])),
            [
                r#"webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{"*", "CREATE", "PATCH"}: if '*' is present, must not specify other operations"#,
                r#"webhooks[0].rules[0].operations[2]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE""#,
                "webhooks[0].rules[0].apiGroups: Required value",
                "webhooks[0].rules[0].apiVersions[1]: Required value",
                r#"webhooks[0].rules[0].resources[3]: Invalid value: "pods/status": if 'pods/*' is present, must not specify pods/status"#,
                r#"webhooks[0].rules[0].resources: Invalid value: []string{"*", "pods", "pods/*", "pods/status"}: if '*' is present, must not specify other resources without subresources"#,
                r#"webhooks[0].rules[0].scope: Unsupported value: "Everywhere": supported values: "*", "Cluster", "Namespaced""#,
                r#"webhooks[0].admissionReviewVersions[1]: Invalid value: "v2": duplicate version"#,
                r#"webhooks[0].admissionReviewVersions: Invalid value: []string{"v2", "v2"}: must include at least one of v1, v1beta1"#,
            ]
        );
        assert_eq!(
            validate(json!([
                hook(json!({"clientConfig": {"url": "http://user@example.com/x?a=b#c"}})),
                hook(json!({"clientConfig": {}})),
            ])),
            [
                r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#,
                r#"webhooks[0].clientConfig.url: Invalid value: "user": user information is not permitted in the URL"#,
                r#"webhooks[0].clientConfig.url: Invalid value: "c": fragments are not permitted in the URL"#,
                r#"webhooks[0].clientConfig.url: Invalid value: "a=b": query parameters are not permitted in the URL"#,
                "webhooks[1].clientConfig: Required value: exactly one of url or service is required",
                r#"webhooks[1].name: Duplicate value: "hook.example.com""#,
            ]
        );
        assert_eq!(
            validate(json!([hook(json!({
                "clientConfig": {"service": {"namespace": "", "name": "svc", "port": 0, "path": "validate//Bad"}},
                "namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In"}]},
                "matchConditions": [{"name": "a", "expression": " "}, {"name": "a", "expression": "true"}],
            }))])),
            [
                "webhooks[0].namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "webhooks[0].clientConfig.service.namespace: Required value: service namespace is required",
                "webhooks[0].clientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
                r#"webhooks[0].clientConfig.service.path: Invalid value: "validate//Bad": must start with a '/'"#,
                r#"webhooks[0].clientConfig.service.path: Invalid value: "validate//Bad": segment[1] may not be empty"#,
                r#"webhooks[0].clientConfig.service.path: Invalid value: "validate//Bad": segment[2]: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#,
                "webhooks[0].matchConditions[0].expression: Required value",
                r#"webhooks[0].matchConditions[1].name: Duplicate value: "a""#,
            ]
        );
    }

    #[test]
    fn updates_keep_what_the_stored_configuration_had() {
        let mut old = json!({"webhooks": [
            hook(json!({"sideEffects": "Unknown", "admissionReviewVersions": ["v2"]})),
            hook(json!({})),
        ]});
        default_mutating_webhook_configuration(&mut old);
        let new = old.clone();
        assert!(mutating_webhook_configuration(&new, Some(&old)).is_empty());
        assert_eq!(
            messages(&mutating_webhook_configuration(&new, None)),
            [
                r#"webhooks[0].sideEffects: Unsupported value: "Unknown": supported values: "None", "NoneOnDryRun""#,
                r#"webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1"#,
                r#"webhooks[1].name: Duplicate value: "hook.example.com""#,
            ]
        );
    }
}
