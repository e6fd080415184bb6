//! Type checking of a ValidatingAdmissionPolicy's expressions against the schemas of the
//! kinds its `matchConstraints` name (at most ten) and of its `paramKind`, as
//! kube-apiserver's `TypeChecker` does for `status.typeChecking.expressionWarnings`.
//!
//! Schemas are the served OpenAPI v3 ones (built-in kinds and custom resources alike), with
//! their references inlined. A kind whose schema cannot be found is not checked; a policy
//! whose `paramKind` has no schema is checked without `params`, as kube-apiserver does.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use konverge_apimachinery::cel::admission::{Compiler, Options, SchemaType};
use serde_json::{Map, Value, json};

use crate::resources::Catalog;

/// How many kinds a policy is checked against at most (`maxTypesToCheck`).
const MAX_TYPES: usize = 10;

/// One kind, as Go prints a `schema.GroupVersionKind`: `apps/v1, Kind=Deployment`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Gvk {
    group: String,
    version: String,
    kind: String,
}

impl std::fmt::Display for Gvk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

/// One warning: where (`spec.validations[0].expression`) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpressionWarning {
    /// The field of the expression.
    pub field_ref: String,
    /// The issues, per kind.
    pub warning: String,
}

impl ExpressionWarning {
    /// As `status.typeChecking.expressionWarnings` holds it.
    pub fn to_json(&self) -> Value {
        json!({"fieldRef": self.field_ref, "warning": self.warning})
    }
}

/// The kinds the policy's rules name without wildcards, sorted (kube's `typesToCheck`).
fn types_to_check(policy: &ValidatingAdmissionPolicy, catalog: &Catalog) -> Vec<Gvk> {
    let mut found = BTreeSet::new();
    let rules = policy
        .spec
        .as_ref()
        .and_then(|s| s.match_constraints.as_ref())
        .and_then(|m| m.resource_rules.clone())
        .unwrap_or_default();
    let mut count = 0;
    for rule in rules {
        let list = |v: &Option<Vec<String>>| {
            let mut v = v.clone().unwrap_or_default();
            v.sort();
            v
        };
        let groups = list(&rule.api_groups);
        let versions = list(&rule.api_versions);
        if groups.iter().any(|g| g.contains('*')) || versions.iter().any(|v| v.contains('*')) {
            continue;
        }
        let resources: Vec<String> = list(&rule.resources)
            .into_iter()
            .filter(|r| !r.contains('*') && !r.contains('/'))
            .collect();
        for group in &groups {
            for version in &versions {
                for resource in &resources {
                    let Some(rt) = catalog.get(group, version, resource) else {
                        continue;
                    };
                    found.insert(Gvk {
                        group: rt.group.clone(),
                        version: rt.version.clone(),
                        kind: rt.kind.clone(),
                    });
                    count += 1;
                    if count == MAX_TYPES {
                        return found.into_iter().collect();
                    }
                }
            }
        }
    }
    found.into_iter().collect()
}

/// The served schema of a kind, references inlined.
fn schema(catalog: &Catalog, gvk: &Gvk) -> Option<Value> {
    let snapshot = crate::http::openapi::snapshot(catalog);
    let path = if gvk.group.is_empty() {
        format!("api/{}", gvk.version)
    } else {
        format!("apis/{}/{}", gvk.group, gvk.version)
    };
    let document = snapshot.document(&path)?;
    let schemas = document.value.pointer("/components/schemas")?.as_object()?;
    let wanted = json!({"group": gvk.group, "version": gvk.version, "kind": gvk.kind});
    let found = schemas.values().find(|s| {
        s.get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array)
            .is_some_and(|gvks| gvks.contains(&wanted))
    })?;
    Some(inline(found, schemas, &mut Vec::new()))
}

/// `schema` with every `$ref` (and described reference, `allOf: [{$ref}]`) replaced by what
/// it refers to; a reference back into itself is left untyped.
fn inline(schema: &Value, schemas: &Map<String, Value>, stack: &mut Vec<String>) -> Value {
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or_default().to_string();
        if stack.contains(&name) {
            return json!({"x-kubernetes-preserve-unknown-fields": true});
        }
        let Some(target) = schemas.get(&name) else {
            return json!({});
        };
        stack.push(name);
        let resolved = inline(target, schemas, stack);
        stack.pop();
        return resolved;
    }
    if map.get("type").is_none()
        && let Some([single]) = map
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
    {
        return inline(single, schemas, stack);
    }
    let mut out = Map::new();
    for (key, value) in map {
        let resolved = match key.as_str() {
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), inline(v, schemas, stack)))
                    .collect(),
            ),
            "items" | "additionalProperties" if value.is_object() => inline(value, schemas, stack),
            _ => value.clone(),
        };
        out.insert(key.clone(), resolved);
    }
    Value::Object(out)
}

/// The policy's expression warnings (kube's `TypeChecker.Check`).
pub fn check(policy: &ValidatingAdmissionPolicy, catalog: &Catalog) -> Vec<ExpressionWarning> {
    let Some(spec) = &policy.spec else {
        return Vec::new();
    };
    let kinds: Vec<(Gvk, SchemaType)> = types_to_check(policy, catalog)
        .into_iter()
        .filter_map(|gvk| {
            let typed = SchemaType::of(&schema(catalog, &gvk)?, &gvk.kind)?;
            Some((gvk, typed))
        })
        .collect();
    let params = spec.param_kind.as_ref().and_then(|pk| {
        let api_version = pk.api_version.as_deref().unwrap_or("");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = Gvk {
            group: group.to_string(),
            version: version.to_string(),
            kind: pk.kind.clone().unwrap_or_default(),
        };
        SchemaType::of(&schema(catalog, &gvk)?, &gvk.kind)
    });
    let options = Options {
        params: params.is_some(),
        authorizer: true,
    };
    let check_expression = |expression: &str| -> Option<String> {
        let mut messages = Vec::new();
        for (gvk, object) in &kinds {
            let mut compiler =
                Compiler::with_variables().typed(Some(object.clone()), params.clone());
            for variable in spec.variables.iter().flatten() {
                let _ = compiler.add_variable(&variable.name, &variable.expression, options);
            }
            if let Err(issues) = compiler.type_check(expression, options) {
                messages.push(format!("{gvk}: {issues}\n"));
            }
        }
        (!messages.is_empty()).then(|| messages.join("\n"))
    };
    let mut warnings = Vec::new();
    for (i, validation) in spec.validations.iter().flatten().enumerate() {
        if let Some(warning) = check_expression(&validation.expression) {
            warnings.push(ExpressionWarning {
                field_ref: format!("spec.validations[{i}].expression"),
                warning,
            });
        }
        if let Some(message) = validation
            .message_expression
            .as_deref()
            .filter(|m| !m.is_empty())
            && let Some(warning) = check_expression(message)
        {
            warnings.push(ExpressionWarning {
                field_ref: format!("spec.validations[{i}].messageExpression"),
                warning,
            });
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(expression: &str) -> ValidatingAdmissionPolicy {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["deployments"]}]},
                "validations": [{"expression": expression}],
            }
        }))
        .expect("a policy")
    }

    #[test]
    fn expressions_are_checked_against_the_served_schemas() {
        let catalog = Catalog::builtin();
        assert_eq!(
            check(&policy("object.spec.replicas > 1"), &catalog),
            Vec::new()
        );
        assert_eq!(
            check(&policy("object.metadata.labels['a'] == 'b'"), &catalog),
            Vec::new()
        );
        let warnings = check(&policy("object.spec.replica > 1"), &catalog);
        assert_eq!(
            warnings,
            vec![ExpressionWarning {
                field_ref: "spec.validations[0].expression".into(),
                warning: "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica > 1\n | ...........^\n".into(),
            }]
        );
    }
}
