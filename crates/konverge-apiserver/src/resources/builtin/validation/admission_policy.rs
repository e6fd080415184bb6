//! ValidatingAdmissionPolicies and their bindings: kube-apiserver 1.33's defaults
//! (`SetDefaults_ValidatingAdmissionPolicySpec`, `SetDefaults_MatchResources`,
//! `SetDefaults_Rule`) and validation (`ValidateValidatingAdmissionPolicy`,
//! `ValidateValidatingAdmissionPolicyBinding`), expressions compiled as they are written, with
//! kube's words for what does not compile.

use std::collections::BTreeSet;

use konverge_apimachinery::cel::admission::{CompileError, Compiler, ErrorKind, Options, Returns};
use konverge_apimachinery::names;
use konverge_apimachinery::selector::label_key_errors;
use serde_json::{Value, json};

use super::affinity::label_selector;
use super::*;
use crate::error::Cause;

/// At most this many audit annotations (`maxAuditAnnotations`).
const MAX_AUDIT_ANNOTATIONS: usize = 20;
/// The longest audit annotation value expression (`maxAuditAnnotationValueExpressionLength`).
const MAX_VALUE_EXPRESSION_BYTES: usize = 5 * 1024;
/// At most this many match conditions.
const MAX_MATCH_CONDITIONS: usize = 64;

/// `SetDefaults_MatchResources` and `SetDefaults_Rule` on a `MatchResources`.
fn default_match_resources(resources: &mut Value) {
    let Some(map) = resources.as_object_mut() else {
        return;
    };
    map.entry("matchPolicy")
        .or_insert_with(|| json!("Equivalent"));
    for selector in ["namespaceSelector", "objectSelector"] {
        let entry = map.entry(selector).or_insert_with(|| json!({}));
        if entry.is_null() {
            *entry = json!({});
        }
    }
    for rules in ["resourceRules", "excludeResourceRules"] {
        for rule in map
            .get_mut(rules)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(rule) = rule.as_object_mut() {
                rule.entry("scope").or_insert_with(|| json!("*"));
            }
        }
    }
}

/// A ValidatingAdmissionPolicy's defaults: `failurePolicy: Fail`, and the match
/// constraints' `matchPolicy: Equivalent`, empty selectors and rules of every scope.
pub(in crate::resources::builtin) fn default_validating_admission_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("failurePolicy").or_insert_with(|| json!("Fail"));
    if let Some(constraints) = spec.get_mut("matchConstraints").filter(|c| c.is_object()) {
        default_match_resources(constraints);
    }
}

/// A ValidatingAdmissionPolicyBinding's defaults: those of its `matchResources`.
pub(in crate::resources::builtin) fn default_validating_admission_policy_binding(obj: &mut Value) {
    if let Some(resources) = obj
        .pointer_mut("/spec/matchResources")
        .filter(|r| r.is_object())
    {
        default_match_resources(resources);
    }
}

fn string<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    v.get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Go's `%#v` of a slice of strings of type `ty`.
fn go_slice(ty: &str, values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]{ty}{{{}}}", quoted.join(", "))
}

fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Cause {
    cause(
        "FieldValueTooMany",
        field,
        format!("Too many: {actual}: must have at most {max} items"),
    )
}

fn internal(field: impl Into<String>, detail: &str) -> Cause {
    cause("InternalError", field, format!("Internal error: {detail}"))
}

/// `convertCELErrorToValidationError`.
fn compile_error(field: &str, expression: &str, error: &CompileError) -> Cause {
    match error.kind {
        ErrorKind::Required => required_because(field, &error.detail),
        ErrorKind::Invalid => Cause::invalid(field, &json!(expression), &error.detail),
        ErrorKind::Internal => internal(field, &error.detail),
    }
}

/// `validateResources`: the resources of a rule, with and without subresources.
fn resources(resources: &[String], at: &str, causes: &mut Vec<Cause>) {
    if resources.is_empty() {
        causes.push(required(at));
    }
    let mut with_wildcard_sub = BTreeSet::new();
    let mut sub_with_wildcard_resource = BTreeSet::new();
    let (mut double_wildcard, mut single_wildcard, mut without_sub) = (false, false, false);
    for (i, res_sub) in resources.iter().enumerate() {
        if res_sub.is_empty() {
            causes.push(required(format!("{at}[{i}]")));
            continue;
        }
        if res_sub == "*/*" {
            double_wildcard = true;
        }
        if res_sub == "*" {
            single_wildcard = true;
        }
        let Some((res, sub)) = res_sub.split_once('/') else {
            // As kube: the last resource without a subresource decides.
            without_sub = res_sub != "*";
            continue;
        };
        if with_wildcard_sub.contains(res) {
            causes.push(Cause::invalid(
                format!("{at}[{i}]"),
                &json!(res_sub),
                format!("if '{res}/*' is present, must not specify {res_sub}"),
            ));
        }
        if sub_with_wildcard_resource.contains(sub) {
            causes.push(Cause::invalid(
                format!("{at}[{i}]"),
                &json!(res_sub),
                format!("if '*/{sub}' is present, must not specify {res_sub}"),
            ));
        }
        if sub == "*" {
            with_wildcard_sub.insert(res.to_string());
        }
        if res == "*" {
            sub_with_wildcard_resource.insert(sub.to_string());
        }
    }
    if resources.len() > 1 && double_wildcard {
        causes.push(invalid_shown(
            at,
            &go_slice("string", resources),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single_wildcard && without_sub {
        causes.push(invalid_shown(
            at,
            &go_slice("string", resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
}

/// `validateRuleWithOperations` (which includes `validateRule`, subresources allowed).
pub(super) fn rule_with_operations(rule: &Value, at: &str, causes: &mut Vec<Cause>) {
    let operations = strings(rule, "operations");
    if operations.is_empty() {
        causes.push(required(format!("{at}.operations")));
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        causes.push(invalid_shown(
            format!("{at}.operations"),
            &go_slice("admissionregistration.OperationType", &operations),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, operation) in operations.iter().enumerate() {
        if !["*", "CONNECT", "CREATE", "DELETE", "UPDATE"].contains(&operation.as_str()) {
            causes.push(not_supported(
                format!("{at}.operations[{i}]"),
                operation,
                &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
            ));
        }
    }
    let groups = strings(rule, "apiGroups");
    if groups.is_empty() {
        causes.push(required(format!("{at}.apiGroups")));
    }
    if groups.len() > 1 && groups.iter().any(|g| g == "*") {
        causes.push(invalid_shown(
            format!("{at}.apiGroups"),
            &go_slice("string", &groups),
            "if '*' is present, must not specify other API groups",
        ));
    }
    let versions = strings(rule, "apiVersions");
    if versions.is_empty() {
        causes.push(required(format!("{at}.apiVersions")));
    }
    if versions.len() > 1 && versions.iter().any(|v| v == "*") {
        causes.push(invalid_shown(
            format!("{at}.apiVersions"),
            &go_slice("string", &versions),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, version) in versions.iter().enumerate() {
        if version.is_empty() {
            causes.push(required(format!("{at}.apiVersions[{i}]")));
        }
    }
    resources(
        &strings(rule, "resources"),
        &format!("{at}.resources"),
        causes,
    );
    if let Some(scope) = string(rule, "scope")
        && !["*", "Cluster", "Namespaced"].contains(&scope)
    {
        causes.push(not_supported(
            format!("{at}.scope"),
            scope,
            &["*", "Cluster", "Namespaced"],
        ));
    }
}

/// `validateNamedRuleWithOperations`.
fn named_rule(rule: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut seen = BTreeSet::new();
    for (i, name) in strings(rule, "resourceNames").iter().enumerate() {
        let field = format!("{at}.resourceNames[{i}]");
        for problem in names::path_segment_name_errors(name) {
            causes.push(Cause::invalid(&field, &json!(name), problem));
        }
        if !seen.insert(name.clone()) {
            causes.push(duplicate(&field, &json!(name)));
        }
    }
    rule_with_operations(rule, at, causes);
}

/// `validateMatchResources`.
fn match_resources(resources: &Value, at: &str, causes: &mut Vec<Cause>) {
    match string(resources, "matchPolicy") {
        None => causes.push(required(format!("{at}.matchPolicy"))),
        Some(p) if !["Equivalent", "Exact"].contains(&p) => causes.push(not_supported(
            format!("{at}.matchPolicy"),
            p,
            &["Equivalent", "Exact"],
        )),
        Some(_) => {}
    }
    for selector in ["namespaceSelector", "objectSelector"] {
        match resources.get(selector).filter(|s| !s.is_null()) {
            None => causes.push(required(format!("{at}.{selector}"))),
            Some(s) => label_selector(s, &format!("{at}.{selector}"), causes),
        }
    }
    for list in ["resourceRules", "excludeResourceRules"] {
        for (i, rule) in items(resources, list) {
            named_rule(rule, &format!("{at}.{list}[{i}]"), causes);
        }
    }
}

/// `IsQualifiedName` problems, as `ValidateQualifiedName` reports them.
fn qualified_name(name: &str, field: &str, causes: &mut Vec<Cause>) {
    for problem in label_key_errors(name) {
        causes.push(Cause::invalid(field, &json!(name), problem));
    }
}

/// `validateParamKind`.
fn param_kind(kind: &Value, causes: &mut Vec<Cause>) {
    let at = "spec.paramKind";
    let api_version = string(kind, "apiVersion").unwrap_or("");
    if api_version.is_empty() {
        causes.push(required(format!("{at}.apiVersion")));
    } else {
        let parsed = match (api_version, api_version.matches('/').count()) {
            ("/", _) => Some(("", "")),
            (v, 0) => Some(("", v)),
            (v, 1) => v.split_once('/'),
            _ => None,
        };
        match parsed {
            None => causes.push(Cause::invalid(
                format!("{at}.apiVersion"),
                &json!(api_version),
                format!("unexpected GroupVersion string: {api_version}"),
            )),
            Some((group, version)) => {
                if !group.is_empty() {
                    let errs = names::dns1123_subdomain_errors(group);
                    if !errs.is_empty() {
                        causes.push(Cause::invalid(
                            format!("{at}.apiVersion"),
                            &json!(group),
                            errs.join(","),
                        ));
                    }
                }
                if version.is_empty() {
                    causes.push(Cause::invalid(
                        format!("{at}.apiVersion"),
                        &json!(api_version),
                        "version must be specified",
                    ));
                } else {
                    let errs = names::dns1035_label_errors(version);
                    if !errs.is_empty() {
                        causes.push(Cause::invalid(
                            format!("{at}.apiVersion"),
                            &json!(version),
                            errs.join(","),
                        ));
                    }
                }
            }
        }
    }
    let kind_name = string(kind, "kind").unwrap_or("");
    if kind_name.is_empty() {
        causes.push(required(format!("{at}.kind")));
    } else {
        let errs = names::dns1035_label_errors(&kind_name.to_lowercase());
        if !errs.is_empty() {
            causes.push(Cause::invalid(
                format!("{at}.kind"),
                &json!(kind_name),
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    errs.join(",")
                ),
            ));
        }
    }
}

/// `validateMatchConditions`, compiled without variables (as kube compiles them when they
/// are written).
pub(super) fn match_conditions(
    conditions: &Value,
    at: &str,
    with_params: bool,
    causes: &mut Vec<Cause>,
) {
    let list = conditions.as_array().cloned().unwrap_or_default();
    if list.len() > MAX_MATCH_CONDITIONS {
        causes.push(too_many(at, list.len(), MAX_MATCH_CONDITIONS));
    }
    let compiler = Compiler::new();
    let options = Options {
        params: with_params,
        authorizer: true,
    };
    let mut names = BTreeSet::new();
    for (i, condition) in list.iter().enumerate() {
        let expression = string(condition, "expression").unwrap_or("");
        let field = format!("{at}[{i}].expression");
        if expression.trim().is_empty() {
            causes.push(required(&field));
        } else if let Err(e) = compiler.compile(expression.trim(), Returns::Bool, options) {
            causes.push(compile_error(&field, expression.trim(), &e));
        }
        let name = string(condition, "name").unwrap_or("");
        if name.is_empty() {
            causes.push(required(format!("{at}[{i}].name")));
        } else {
            qualified_name(name, &format!("{at}[{i}].name"), causes);
            if !names.insert(name.to_string()) {
                causes.push(duplicate(format!("{at}[{i}].name"), &json!(name)));
            }
        }
    }
}

/// `validateValidationActions`.
fn validation_actions(actions: &[String], causes: &mut Vec<Cause>) {
    let at = "spec.validationActions";
    let mut seen = BTreeSet::new();
    for (i, action) in actions.iter().enumerate() {
        if !["Audit", "Deny", "Warn"].contains(&action.as_str()) {
            causes.push(not_supported(
                format!("{at}[{i}]"),
                action,
                &["Audit", "Deny", "Warn"],
            ));
        }
        if !seen.insert(action.as_str()) {
            causes.push(duplicate(format!("{at}[{i}]"), &json!(action)));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        causes.push(invalid_shown(
            at,
            &go_slice("admissionregistration.ValidationAction", actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        causes.push(required_because(
            at,
            "at least one validation action is required",
        ));
    }
}

/// Whether an update leaves what match conditions are compiled against unchanged (kube then
/// does not compile them again: `ignoreValidatingAdmissionPolicyMatchConditions`).
fn conditions_unchanged(obj: &Value, old: Option<&Value>) -> bool {
    old.is_some_and(|old| {
        obj.pointer("/spec/paramKind") == old.pointer("/spec/paramKind")
            && obj.pointer("/spec/matchConditions") == old.pointer("/spec/matchConditions")
    })
}

/// `ValidateValidatingAdmissionPolicy` (and its update).
pub(in crate::resources::builtin) fn validating_admission_policy(
    obj: &Value,
    old: Option<&Value>,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    match string(spec, "failurePolicy") {
        None => causes.push(required("spec.failurePolicy")),
        Some(p) if !["Fail", "Ignore"].contains(&p) => {
            causes.push(not_supported("spec.failurePolicy", p, &["Fail", "Ignore"]))
        }
        Some(_) => {}
    }
    let params = spec.get("paramKind").filter(|p| !p.is_null());
    if let Some(kind) = params {
        param_kind(kind, &mut causes);
    }
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => causes.push(required("spec.matchConstraints")),
        Some(constraints) => {
            match_resources(constraints, "spec.matchConstraints", &mut causes);
            if items(constraints, "resourceRules").next().is_none() {
                causes.push(required("spec.matchConstraints.resourceRules"));
            }
        }
    }
    if !conditions_unchanged(obj, old) {
        match_conditions(
            spec.get("matchConditions").unwrap_or(&null),
            "spec.matchConditions",
            params.is_some(),
            &mut causes,
        );
    }
    let options = Options {
        params: params.is_some(),
        authorizer: true,
    };
    // Variables are composed only when there are some: without, `variables` is undeclared.
    let mut compiler = if items(spec, "variables").next().is_some() {
        Compiler::with_variables()
    } else {
        Compiler::new()
    };
    for (i, variable) in items(spec, "variables") {
        let at = format!("spec.variables[{i}]");
        let name = string(variable, "name").unwrap_or("");
        if name.trim().is_empty() {
            causes.push(required_because(
                format!("{at}.name"),
                "name is not specified",
            ));
        } else if !konverge_apimachinery::cel::is_identifier(name) {
            causes.push(Cause::invalid(
                format!("{at}.name"),
                &json!(name),
                "name is not a valid CEL identifier",
            ));
        }
        let expression = string(variable, "expression").unwrap_or("");
        if expression.trim().is_empty() {
            causes.push(required_because(
                format!("{at}.expression"),
                "expression is not specified",
            ));
        } else if let Err(e) = compiler.add_variable(name, expression, options) {
            causes.push(compile_error(&format!("{at}.expression"), expression, &e));
        }
    }
    let validations: Vec<(usize, &Value)> = items(spec, "validations").collect();
    let annotations: Vec<(usize, &Value)> = items(spec, "auditAnnotations").collect();
    if validations.is_empty() && annotations.is_empty() {
        let detail = "validations or auditAnnotations must contain at least one item";
        causes.push(required_because("spec.validations", detail));
        causes.push(required_because("spec.auditAnnotations", detail));
        return causes;
    }
    for (i, validation) in validations {
        let at = format!("spec.validations[{i}]");
        let expression = string(validation, "expression").unwrap_or("");
        if expression.trim().is_empty() {
            causes.push(required_because(
                format!("{at}.expression"),
                "expression is not specified",
            ));
        } else if let Err(e) = compiler.compile(expression, Returns::Bool, options) {
            causes.push(compile_error(&format!("{at}.expression"), expression, &e));
        }
        let message_expression = string(validation, "messageExpression").unwrap_or("");
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            causes.push(Cause::invalid(
                format!("{at}.messageExpression"),
                &json!(message_expression),
                "must be non-empty if specified",
            ));
        } else if !message_expression.trim().is_empty() {
            let without_authorizer = Options {
                authorizer: false,
                ..options
            };
            if let Err(e) =
                compiler.compile(message_expression, Returns::String, without_authorizer)
            {
                causes.push(compile_error(
                    &format!("{at}.messageExpression"),
                    message_expression,
                    &e,
                ));
            }
        }
        let message = string(validation, "message").unwrap_or("");
        if !message.is_empty() && message.trim().is_empty() {
            causes.push(Cause::invalid(
                format!("{at}.message"),
                &json!(message),
                "message must be non-empty if specified",
            ));
        } else if message.trim().contains(['\n', '\r']) {
            causes.push(Cause::invalid(
                format!("{at}.message"),
                &json!(message),
                "message must not contain line breaks",
            ));
        }
        if let Some(reason) = string(validation, "reason")
            && !["Forbidden", "Invalid", "RequestEntityTooLarge"].contains(&reason)
        {
            causes.push(not_supported(
                format!("{at}.reason"),
                reason,
                &["Forbidden", "Invalid", "RequestEntityTooLarge"],
            ));
        }
    }
    if annotations.len() > MAX_AUDIT_ANNOTATIONS {
        let shown: Vec<String> = annotations
            .iter()
            .map(|(_, a)| {
                format!(
                    "admissionregistration.AuditAnnotation{{Key:{:?}, ValueExpression:{:?}}}",
                    string(a, "key").unwrap_or(""),
                    string(a, "valueExpression").unwrap_or("")
                )
            })
            .collect();
        causes.push(invalid_shown(
            "spec.auditAnnotations",
            &format!(
                "[]admissionregistration.AuditAnnotation{{{}}}",
                shown.join(", ")
            ),
            &format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let policy_name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut keys = BTreeSet::new();
    for (i, annotation) in annotations {
        let at = format!("spec.auditAnnotations[{i}]");
        let key = string(annotation, "key").unwrap_or("");
        if policy_name.is_empty() {
            causes.push(Cause::invalid(
                format!("{at}.key"),
                &json!(key),
                "requires metadata.name be non-empty",
            ));
        } else {
            qualified_name(
                &format!("{policy_name}/{key}"),
                &format!("{at}.key"),
                &mut causes,
            );
        }
        let value = string(annotation, "valueExpression").unwrap_or("");
        let trimmed = value.trim();
        if trimmed.is_empty() {
            causes.push(required_because(
                format!("{at}.valueExpression"),
                "valueExpression is not specified",
            ));
        } else if trimmed.len() > MAX_VALUE_EXPRESSION_BYTES {
            causes.push(required_because(
                format!("{at}.valueExpression"),
                &format!("must not exceed {MAX_VALUE_EXPRESSION_BYTES} bytes in length"),
            ));
        } else if let Err(e) = compiler.compile(trimmed, Returns::StringOrNull, options) {
            causes.push(compile_error(&format!("{at}.valueExpression"), value, &e));
        }
        if !keys.insert(key.to_string()) {
            causes.push(duplicate(format!("{at}.key"), &json!(key)));
        }
    }
    causes
}

/// `validateParamRef`.
fn param_ref(param_ref: &Value, causes: &mut Vec<Cause>) {
    let at = "spec.paramRef";
    let name = string(param_ref, "name").unwrap_or("");
    let selector = param_ref.get("selector").filter(|s| !s.is_null());
    if !name.is_empty() {
        for problem in names::path_segment_name_errors(name) {
            causes.push(Cause::invalid(format!("{at}.name"), &json!(name), problem));
        }
        if selector.is_some() {
            causes.push(forbidden(
                format!("{at}.name"),
                "name and selector are mutually exclusive",
            ));
        }
    }
    if let Some(selector) = selector {
        label_selector(selector, &format!("{at}.selector"), causes);
        if !name.is_empty() {
            causes.push(forbidden(
                format!("{at}.selector"),
                "name and selector are mutually exclusive",
            ));
        }
    }
    if name.is_empty() && selector.is_none() {
        causes.push(required_because(
            at,
            "one of name or selector must be specified",
        ));
    }
    match string(param_ref, "parameterNotFoundAction").filter(|a| !a.is_empty()) {
        None => causes.push(required(format!("{at}.parameterNotFoundAction"))),
        Some(action) if action != "Deny" && action != "Allow" => causes.push(not_supported(
            format!("{at}.parameterNotFoundAction"),
            action,
            &["Deny", "Allow"],
        )),
        Some(_) => {}
    }
}

/// `ValidateValidatingAdmissionPolicyBinding` (updates are validated the same way).
pub(in crate::resources::builtin) fn validating_admission_policy_binding(
    obj: &Value,
    _old: Option<&Value>,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let policy = string(spec, "policyName").unwrap_or("");
    if policy.is_empty() {
        causes.push(required("spec.policyName"));
    } else {
        for problem in names::dns1123_subdomain_errors(policy) {
            causes.push(Cause::invalid("spec.policyName", &json!(policy), problem));
        }
    }
    if let Some(reference) = spec.get("paramRef").filter(|p| !p.is_null()) {
        param_ref(reference, &mut causes);
    }
    if let Some(resources) = spec.get("matchResources").filter(|m| !m.is_null()) {
        // kube-apiserver spells the field so in these errors.
        match_resources(resources, "spec.matchResouces", &mut causes);
    }
    validation_actions(&strings(spec, "validationActions"), &mut causes);
    causes
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

    fn policy(spec: Value) -> Value {
        let mut obj = json!({"metadata": {"name": "p"}, "spec": spec});
        default_validating_admission_policy(&mut obj);
        obj
    }

    const RULES: &str = r#"{"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}"#;

    fn constraints() -> Value {
        serde_json::from_str(RULES).expect("rules")
    }

    #[test]
    fn defaults_fill_what_validation_requires() {
        let obj = policy(
            json!({"matchConstraints": constraints(), "validations": [{"expression": "true"}]}),
        );
        assert_eq!(obj["spec"]["failurePolicy"], "Fail");
        assert_eq!(obj["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
        assert_eq!(
            obj["spec"]["matchConstraints"]["namespaceSelector"],
            json!({})
        );
        assert_eq!(
            obj["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
            "*"
        );
        assert!(validating_admission_policy(&obj, None).is_empty());
    }

    #[test]
    fn policies_are_refused_with_kube_words() {
        let obj = policy(json!({
            "matchConstraints": constraints(),
            "validations": [
                {"expression": "object.x +"},
                {"expression": "1", "reason": "Teapot", "message": " "},
                {"expression": "true", "messageExpression": "1"},
            ],
            "variables": [{"name": "in", "expression": "1"}],
        }));
        let got = messages(&validating_admission_policy(&obj, None));
        assert_eq!(
            got[0],
            r#"spec.variables[0].name: Invalid value: "in": name is not a valid CEL identifier"#
        );
        assert!(got[1].starts_with(r#"spec.validations[0].expression: Invalid value: "object.x +": compilation failed: ERROR: <input>:1:11: Syntax error"#), "{got:?}");
        assert_eq!(
            got[2],
            r#"spec.validations[1].expression: Invalid value: "1": must evaluate to bool but got int"#
        );
        assert_eq!(
            got[3],
            r#"spec.validations[1].message: Invalid value: " ": message must be non-empty if specified"#
        );
        assert_eq!(
            got[4],
            r#"spec.validations[1].reason: Unsupported value: "Teapot": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge""#
        );
        assert_eq!(
            got[5],
            r#"spec.validations[2].messageExpression: Invalid value: "1": must evaluate to string but got int"#
        );
        let empty = policy(json!({}));
        assert_eq!(
            messages(&validating_admission_policy(
                &json!({"metadata": {"name": "p"}, "spec": {}}),
                None
            )),
            [
                "spec.failurePolicy: Required value",
                "spec.matchConstraints: Required value",
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
                "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
            ]
        );
        assert_eq!(
            messages(&validating_admission_policy(&empty, None))[0],
            "spec.matchConstraints: Required value"
        );
    }

    #[test]
    fn bindings_are_refused_with_kube_words() {
        let binding = json!({"spec": {
            "policyName": "p",
            "paramRef": {"name": "a", "selector": {}},
            "validationActions": ["Deny", "Warn", "Deny"],
        }});
        assert_eq!(
            messages(&validating_admission_policy_binding(&binding, None)),
            [
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.parameterNotFoundAction: Required value",
                r#"spec.validationActions[2]: Duplicate value: "Deny""#,
                r#"spec.validationActions: Invalid value: []admissionregistration.ValidationAction{"Deny", "Warn", "Deny"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"#,
            ]
        );
    }
}
