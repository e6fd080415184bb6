//! `x-kubernetes-validations`: the CEL rules of a CustomResourceDefinition's schema, compiled
//! once per schema ([`Rules::compile`]) and evaluated against custom objects
//! ([`Rules::validate`]), as apiextensions-apiserver's `pkg/apiserver/schema/cel` does.
//!
//! # Map
//!
//! - this file: walking the schema (compile) and the object (validate), transition rules,
//!   ratcheting, and the wording of every error.
//! - `check`: what a type checker would say about an untyped AST (undeclared references,
//!   `oldSelf` use, result type, comprehension depth).
//! - `convert`: JSON values as the CEL values a rule sees as `self`, typed by the schema.
//! - `library`: the CEL environment (standard library, strings extension, Kubernetes' list and
//!   set functions).
//!
//! Expressions are parsed and evaluated by the `cel` crate. It has no cost limit: rules whose
//! comprehensions nest over a value too large for them are refused with Kubernetes' per-call
//! cost error instead of being run (see [`Rules::validate`]).

mod check;
mod convert;
mod library;

use std::sync::Arc;

use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

use crate::field::{ErrorType, FieldError};
use crate::gofmt;

/// The largest `size ^ depth` a rule may reach, where `size` counts the JSON values of `self`
/// (and `oldSelf`) and `depth` is how deeply the rule's comprehensions nest.
const MAX_ESTIMATED_COST: f64 = 1e7;

/// The longest message a `messageExpression` may produce (`MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

/// Every `x-kubernetes-validations` rule of one `openAPIV3Schema` tree, compiled once.
pub struct Rules {
    schema: Value,
    root: Option<Node>,
    env: Arc<Env>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("rules", &self.root.as_ref().map_or(0, Node::count))
            .finish()
    }
}

/// The rules at one schema position and below.
struct Node {
    /// JSON pointer, into [`Rules::schema`], of the structural schema values here follow.
    schema_ptr: String,
    rules: Vec<Rule>,
    properties: Vec<(String, Node)>,
    items: Option<Box<Node>>,
    additional: Option<Box<Node>>,
    all_of: Vec<Node>,
}

impl Node {
    fn count(&self) -> usize {
        self.rules.len()
            + self
                .properties
                .iter()
                .map(|(_, n)| n.count())
                .sum::<usize>()
            + self.items.as_ref().map_or(0, |n| n.count())
            + self.additional.as_ref().map_or(0, |n| n.count())
            + self.all_of.iter().map(Node::count).sum::<usize>()
    }
}

/// One compiled rule.
struct Rule {
    /// `rule`, as written.
    source: String,
    program: Program,
    /// `message`, trimmed, when not empty.
    message: Option<String>,
    message_expression: Option<Program>,
    reason: ErrorType,
    /// `fieldPath`, normalized (`spec.x`), when set.
    field_path: Option<String>,
    uses_old_self: bool,
    optional_old_self: bool,
    /// How deeply comprehensions nest.
    depth: u32,
}

impl Rule {
    /// `ruleErrorString`: the message when there is one, else the rule.
    fn error_string(&self) -> String {
        match &self.message {
            Some(m) => m.clone(),
            None => self.source.trim().to_string(),
        }
    }

    /// `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        match &self.message {
            Some(m) => m.clone(),
            None => format!("failed rule: {}", self.source.trim()),
        }
    }
}

impl Rules {
    /// Compiles all rules found anywhere in `schema` (the raw `JSONSchemaProps` JSON of a CRD
    /// version: properties, items, additionalProperties and allOf are walked). `path` is where
    /// the schema sits in the CRD (`spec.versions[0].schema.openAPIV3Schema`); errors are worded
    /// as kube-apiserver's CRD validation words them, e.g.
    /// `<path>.properties[spec].x-kubernetes-validations[0].rule: Invalid value:
    /// apiextensions.ValidationRule{...}: compilation failed: ERROR: <input>:1:8: ...`.
    pub fn compile(schema: &Value, path: &str) -> Result<Rules, Vec<FieldError>> {
        let env = library::env();
        let mut errors = Vec::new();
        let root = compile_node(&env, schema, "", schema, path, None, &mut errors);
        if errors.is_empty() {
            Ok(Rules {
                schema: schema.clone(),
                root,
                env,
            })
        } else {
            Err(errors)
        }
    }

    /// Whether the schema has no rule at all.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// Evaluates every rule against the custom object `new`, with `old` on update (for
    /// transition rules, those reading `oldSelf`, and for ratcheting: on update, errors of
    /// other rules on a value left unchanged are dropped, as Kubernetes turns them into
    /// warnings). A rule applies to every value at its schema position; transition rules run
    /// only where an old value correlates (object fields by name, map values by key, items of
    /// `x-kubernetes-list-type: map` lists by their keys), unless `optionalOldSelf` is set.
    ///
    /// Errors read as Kubernetes':
    /// `spec: Invalid value: "object": <message>` (or `failed rule: <rule>`),
    /// `spec: Invalid value: "object": no such key: x evaluating rule: <rule>`; a rule on the
    /// root reports the field `<nil>`. A rule whose comprehensions would cost too much over
    /// the value is not run: it fails with Kubernetes' `call cost exceeds limit` error and
    /// no further rules are run.
    pub fn validate(&self, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut run = Run {
            rules: self,
            errors: Vec::new(),
            stopped: false,
        };
        if let Some(root) = &self.root {
            let ratchet = old.is_some_and(|old| old == new);
            run.node(root, new, old, "", ratchet, ratchet, true);
        }
        run.errors
    }
}

fn pointer_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Whether an object's `x-kubernetes-map-type` lets old and new fields correlate.
fn map_correlatable(schema: &Value) -> bool {
    matches!(
        schema.get("x-kubernetes-map-type").and_then(Value::as_str),
        None | Some("granular") | Some("atomic")
    )
}

fn list_type(schema: &Value) -> &str {
    schema
        .get("x-kubernetes-list-type")
        .and_then(Value::as_str)
        .unwrap_or("")
}

#[allow(clippy::too_many_arguments)]
fn compile_node(
    env: &Env,
    rule_schema: &Value,
    node_ptr: &str,
    node_schema: &Value,
    path: &str,
    forbid_old_self: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> Option<Node> {
    let rules = compile_rules(env, rule_schema, node_schema, path, forbid_old_self, errors);
    let correlatable = map_correlatable(rule_schema);
    let mut properties = Vec::new();
    if let (Some(props), Some(node_props)) = (
        rule_schema.get("properties").and_then(Value::as_object),
        node_schema.get("properties").and_then(Value::as_object),
    ) {
        for (name, sub) in props {
            let Some(node_sub) = node_props.get(name) else {
                continue;
            };
            let sub_path = format!("{path}.properties[{name}]");
            let forbid = forbid_old_self
                .map(str::to_string)
                .or_else(|| (!correlatable).then(|| path.to_string()));
            let ptr = format!("{node_ptr}/properties/{}", pointer_token(name));
            if let Some(node) = compile_node(
                env,
                sub,
                &ptr,
                node_sub,
                &sub_path,
                forbid.as_deref(),
                errors,
            ) {
                properties.push((name.clone(), node));
            }
        }
    }
    let items = match (rule_schema.get("items"), node_schema.get("items")) {
        (Some(sub), Some(node_sub)) if sub.is_object() => {
            let forbid = forbid_old_self
                .map(str::to_string)
                .or_else(|| (list_type(rule_schema) != "map").then(|| path.to_string()));
            compile_node(
                env,
                sub,
                &format!("{node_ptr}/items"),
                node_sub,
                &format!("{path}.items"),
                forbid.as_deref(),
                errors,
            )
            .map(Box::new)
        }
        _ => None,
    };
    let additional = match (
        rule_schema.get("additionalProperties"),
        node_schema.get("additionalProperties"),
    ) {
        (Some(sub), Some(node_sub)) if sub.is_object() && node_sub.is_object() => {
            let forbid = forbid_old_self
                .map(str::to_string)
                .or_else(|| (!correlatable).then(|| path.to_string()));
            compile_node(
                env,
                sub,
                &format!("{node_ptr}/additionalProperties"),
                node_sub,
                &format!("{path}.additionalProperties"),
                forbid.as_deref(),
                errors,
            )
            .map(Box::new)
        }
        _ => None,
    };
    let mut all_of = Vec::new();
    if let Some(list) = rule_schema.get("allOf").and_then(Value::as_array) {
        for (i, sub) in list.iter().enumerate() {
            if let Some(node) = compile_node(
                env,
                sub,
                node_ptr,
                node_schema,
                &format!("{path}.allOf[{i}]"),
                forbid_old_self,
                errors,
            ) {
                all_of.push(node);
            }
        }
    }
    let empty = rules.is_empty()
        && properties.is_empty()
        && items.is_none()
        && additional.is_none()
        && all_of.is_empty();
    (!empty).then(|| Node {
        schema_ptr: node_ptr.to_string(),
        rules,
        properties,
        items,
        additional,
        all_of,
    })
}

fn string_field<'a>(rule: &'a Value, name: &str) -> &'a str {
    rule.get(name).and_then(Value::as_str).unwrap_or("")
}

/// Go's `%#v` of the internal `apiextensions.ValidationRule` kube-apiserver shows as the bad
/// value of a rule that does not compile (pointers print as addresses; ours is a stand-in).
fn go_rule(rule: &Value) -> String {
    let s = |name: &str| gofmt::quote(string_field(rule, name));
    let reason = if rule.get("reason").is_some_and(|r| !r.is_null()) {
        "(*apiextensions.FieldValueErrorReason)(0xc000010000)"
    } else {
        "(*apiextensions.FieldValueErrorReason)(nil)"
    };
    let optional = if rule.get("optionalOldSelf").is_some_and(|r| !r.is_null()) {
        "(*bool)(0xc000010008)"
    } else {
        "(*bool)(nil)"
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
    )
}

/// An `Invalid value` whose value is the rule itself, as Go prints it.
fn invalid_rule(field: String, rule: &Value, detail: &str) -> FieldError {
    FieldError::new(
        ErrorType::Invalid,
        field,
        None,
        format!("{}: {detail}", go_rule(rule)),
    )
}

fn compile_rules(
    env: &Env,
    schema: &Value,
    node_schema: &Value,
    path: &str,
    forbid_old_self: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> Vec<Rule> {
    let Some(list) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let base = format!("{path}.x-kubernetes-validations");
    let mut schema_errors = Vec::new();
    for (i, rule) in list.iter().enumerate() {
        let at = |name: &str| format!("{base}[{i}].{name}");
        let source = string_field(rule, "rule");
        let message = string_field(rule, "message");
        let trimmed_message = message.trim();
        if source.trim().is_empty() {
            schema_errors.push(FieldError::required(at("rule"), "rule is not specified"));
        } else if !message.is_empty() && trimmed_message.is_empty() {
            schema_errors.push(FieldError::invalid(
                at("message"),
                Value::String(message.to_string()),
                "message must be non-empty if specified",
            ));
        } else if trimmed_message.contains('\n') {
            schema_errors.push(FieldError::invalid(
                at("message"),
                Value::String(message.to_string()),
                "message must not contain line breaks",
            ));
        } else if source.trim().contains('\n') && trimmed_message.is_empty() {
            schema_errors.push(FieldError::required(
                at("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        let message_expression = string_field(rule, "messageExpression");
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            schema_errors.push(FieldError::required(
                at("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = rule.get("reason").filter(|r| !r.is_null()) {
            let supported = [
                "FieldValueDuplicate",
                "FieldValueForbidden",
                "FieldValueInvalid",
                "FieldValueRequired",
            ];
            if !reason.as_str().is_some_and(|r| supported.contains(&r)) {
                let supported: Vec<String> = supported.iter().map(|s| s.to_string()).collect();
                schema_errors.push(FieldError::not_supported(
                    at("reason"),
                    reason.clone(),
                    &supported,
                ));
            }
        }
        let field_path = string_field(rule, "fieldPath");
        if !field_path.is_empty() && field_path.trim().is_empty() {
            schema_errors.push(FieldError::invalid(
                at("fieldPath"),
                Value::String(field_path.to_string()),
                "fieldPath must be non-empty if specified",
            ));
        }
        if field_path.contains('\n') {
            schema_errors.push(FieldError::invalid(
                at("fieldPath"),
                Value::String(field_path.to_string()),
                "fieldPath must not contain line breaks",
            ));
        }
        if !field_path.is_empty() && valid_field_path(field_path, node_schema).is_none() {
            schema_errors.push(FieldError::invalid(
                at("fieldPath"),
                Value::String(field_path.to_string()),
                "fieldPath must be a valid path",
            ));
        }
    }
    if !schema_errors.is_empty() {
        errors.extend(schema_errors);
        return Vec::new();
    }

    let mut rules = Vec::new();
    for (i, rule) in list.iter().enumerate() {
        let at = |name: &str| format!("{base}[{i}].{name}");
        let source = string_field(rule, "rule");
        let program = match env.compile(source) {
            Ok(p) => p,
            Err(e) => {
                let detail = format!("compilation failed: {}", check::parse_errors(&e));
                errors.push(invalid_rule(at("rule"), rule, &detail));
                continue;
            }
        };
        let analysis = check::analyze(&program);
        if !analysis.undeclared.is_empty() {
            let issues: Vec<String> = analysis
                .undeclared
                .iter()
                .map(|(name, offset)| {
                    let m = format!("undeclared reference to '{name}' (in container '')");
                    check::issue(source, *offset, &m)
                })
                .collect();
            let detail = format!("compilation failed: {}", issues.join("\n"));
            errors.push(invalid_rule(at("rule"), rule, &detail));
            continue;
        }
        if check::surely_not_bool(program.expression()) {
            errors.push(invalid_rule(
                at("rule"),
                rule,
                "cel expression must evaluate to a bool",
            ));
            continue;
        }
        let optional_old_self = rule.get("optionalOldSelf").and_then(Value::as_bool);
        if analysis.uses_old_self {
            if let Some(within) = forbid_old_self {
                errors.push(FieldError::invalid(
                    at("rule"),
                    Value::String(source.to_string()),
                    format!(
                        "oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"
                    ),
                ));
                continue;
            }
        } else if let Some(flag) = optional_old_self {
            errors.push(FieldError::invalid(
                at("optionalOldSelf"),
                Value::Bool(flag),
                "may not be set if oldSelf is not used in rule",
            ));
            continue;
        }
        let mut message_program = None;
        let message_expression = string_field(rule, "messageExpression");
        if !message_expression.is_empty() {
            match env.compile(message_expression) {
                Ok(p) => {
                    let analysis = check::analyze(&p);
                    if let Some((name, offset)) = analysis.undeclared.first() {
                        let m = format!("undeclared reference to '{name}' (in container '')");
                        let detail = format!(
                            "messageExpression compilation failed: {}",
                            check::issue(message_expression, *offset, &m)
                        );
                        errors.push(invalid_rule(at("messageExpression"), rule, &detail));
                        continue;
                    }
                    if check::surely_not_string(p.expression()) {
                        errors.push(invalid_rule(
                            at("messageExpression"),
                            rule,
                            "messageExpression must evaluate to a string",
                        ));
                        continue;
                    }
                    message_program = Some(p);
                }
                Err(e) => {
                    let detail = format!(
                        "messageExpression compilation failed: {}",
                        check::parse_errors(&e)
                    );
                    errors.push(invalid_rule(at("messageExpression"), rule, &detail));
                    continue;
                }
            }
        }
        let reason = match rule.get("reason").and_then(Value::as_str) {
            Some("FieldValueForbidden") => ErrorType::Forbidden,
            Some("FieldValueRequired") => ErrorType::Required,
            Some("FieldValueDuplicate") => ErrorType::Duplicate,
            _ => ErrorType::Invalid,
        };
        let field_path = string_field(rule, "fieldPath");
        let message = string_field(rule, "message").trim();
        rules.push(Rule {
            source: source.to_string(),
            program,
            message: (!message.is_empty()).then(|| message.to_string()),
            message_expression: message_program,
            reason,
            field_path: if field_path.is_empty() {
                None
            } else {
                valid_field_path(field_path, node_schema)
            },
            uses_old_self: analysis.uses_old_self,
            optional_old_self: optional_old_self.unwrap_or(false),
            depth: analysis.depth,
        });
    }
    rules
}

/// Splits a JSON path into `.`, `[`, `]` and the text between them (a single-quoted string
/// is one token, delimiters inside it included).
fn path_tokens(path: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let bytes = path.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        if bytes[start] == b'\'' {
            let mut end = start + 1;
            while end < bytes.len() && !(bytes[end] == b'\'' && bytes[end - 1] != b'\\') {
                end += 1;
            }
            let stop = (end + 1).min(bytes.len());
            tokens.push(&path[start..stop]);
            start = stop;
            continue;
        }
        if matches!(bytes[start], b'.' | b'[' | b']') {
            tokens.push(&path[start..start + 1]);
            start += 1;
            continue;
        }
        let end = path[start..]
            .find(['.', '[', ']'])
            .map_or(path.len(), |i| start + i);
        tokens.push(&path[start..end]);
        start = end;
    }
    tokens
}

fn unescape_single_quote(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\'' => '\'',
            '\\' => '\\',
            _ => return None,
        });
    }
    Some(out)
}

/// `ValidFieldPath`: the normalized field path `json_path` (`.a['b'].c`) names in `schema`, or
/// `None` when it names nothing there.
fn valid_field_path(json_path: &str, schema: &Value) -> Option<String> {
    field_path_in_schema(json_path, schema, true)
        .ok()
        .map(|(path, _)| path)
        .filter(|path| !path.is_empty())
}

/// kube-apiserver's `ValidFieldPath`: the field path `json_path` (`.spec.a['b']`) names in a
/// structural `schema` (`spec.a.b`, with `[key]` for map keys), and the schema of the field
/// it names, or why it names nothing, in kube-apiserver's words (`does not refer to a valid
/// field`, `array notation is not allowed`, …). `allow_array` permits the `['name']` form.
pub fn field_path_in_schema<'s>(
    json_path: &str,
    schema: &'s Value,
    allow_array: bool,
) -> Result<(String, &'s Value), String> {
    let mut path = String::new();
    let mut schema = schema;
    let tokens = path_tokens(json_path);
    let end = || "unexpected end of JSON path".to_string();
    let mut i = 0;
    while i < tokens.len() {
        let name = match tokens[i] {
            "[" => {
                if !allow_array {
                    return Err("array notation is not allowed".into());
                }
                let quoted = tokens.get(i + 1).ok_or_else(end)?;
                if quoted.len() < 2 || !quoted.starts_with('\'') || !quoted.ends_with('\'') {
                    return Err(format!("expected single quoted string but got {quoted}"));
                }
                let name = unescape_single_quote(&quoted[1..quoted.len() - 1])
                    .ok_or_else(|| "invalid string literal: invalid syntax".to_string())?;
                match tokens.get(i + 2) {
                    Some(&"]") => {}
                    Some(other) => return Err(format!("expected ] but got {other}")),
                    None => return Err(end()),
                }
                i += 3;
                name
            }
            "." => {
                let name = tokens.get(i + 1).ok_or_else(end)?;
                i += 2;
                name.to_string()
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        };
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            schema = props
                .get(&name)
                .ok_or_else(|| "does not refer to a valid field".to_string())?;
            path = child_path(&path, &name);
        } else if let Some(additional) = schema.get("additionalProperties") {
            schema = additional;
            path = format!("{path}[{name}]");
        } else {
            return Err("does not refer to a valid field".into());
        }
    }
    Ok((path, schema))
}

/// One call of [`Rules::validate`].
struct Run<'a> {
    rules: &'a Rules,
    errors: Vec<FieldError>,
    /// Set once a rule exceeded the cost limit: nothing more runs.
    stopped: bool,
}

/// Counts the JSON values in `value`, up to `limit`.
fn size(value: &Value, limit: usize) -> usize {
    let mut count = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        count += 1;
        if count >= limit {
            return count;
        }
        match v {
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    count
}

/// The field as Kubernetes prints a path: `<nil>` for the root.
fn shown(path: &str) -> String {
    if path.is_empty() {
        "<nil>".to_string()
    } else {
        path.to_string()
    }
}

/// The error of a failed rule for its `reason`.
fn reason_error(kind: ErrorType, path: &str, ty: &str, detail: String) -> FieldError {
    let ty = Value::String(ty.to_string());
    match kind {
        ErrorType::Forbidden => FieldError::forbidden(shown(path), detail),
        ErrorType::Required => FieldError::required(shown(path), detail),
        ErrorType::Duplicate => FieldError::new(ErrorType::Duplicate, shown(path), Some(ty), ""),
        _ => FieldError::invalid(shown(path), ty, detail),
    }
}

/// cel-go's wording of an evaluation error.
fn execution_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        ExecutionError::Overflow(_, CelValue::UInt(_), _) => {
            "unsigned integer overflow".to_string()
        }
        ExecutionError::Overflow(..) => "integer overflow".to_string(),
        ExecutionError::IndexOutOfBounds(index) => match index {
            CelValue::Int(i) => format!("index out of bounds: {i}"),
            other => format!("index out of bounds: {other:?}"),
        },
        ExecutionError::UndeclaredReference(name) => {
            format!("undeclared reference to '{name}'")
        }
        ExecutionError::FunctionError { message, .. } => message.clone(),
        ExecutionError::NoSuchOverload(_)
        | ExecutionError::UnsupportedBinaryOperator(..)
        | ExecutionError::ValuesNotComparable(..)
        | ExecutionError::UnexpectedType { .. }
        | ExecutionError::UnsupportedTargetType { .. }
        | ExecutionError::NotSupportedAsMethod { .. }
        | ExecutionError::UnsupportedIndex(..)
        | ExecutionError::UnsupportedKeyType(_)
        | ExecutionError::InvalidArgumentCount { .. } => "no such overload".to_string(),
        other => other.to_string(),
    }
}

impl Run<'_> {
    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        node: &Node,
        new: &Value,
        old: Option<&Value>,
        path: &str,
        ratchet: bool,
        parent_ratchet: bool,
        resource_root: bool,
    ) {
        if self.stopped || new.is_null() {
            return;
        }
        let old = old.filter(|o| !o.is_null());
        let schema = self
            .rules
            .schema
            .pointer(&node.schema_ptr)
            .unwrap_or(&Value::Null);
        if !node.rules.is_empty() {
            self.expressions(node, schema, new, old, path, ratchet, resource_root);
        }
        for all_of in &node.all_of {
            self.node(
                all_of,
                new,
                old,
                path,
                parent_ratchet,
                parent_ratchet,
                resource_root,
            );
        }
        match new {
            Value::Object(map) => {
                let correlatable = map_correlatable(schema);
                let old_map = old.and_then(Value::as_object).filter(|_| correlatable);
                if let Some(additional) = &node.additional {
                    for (key, value) in map {
                        let old_value = old_map.and_then(|m| m.get(key));
                        let r = old_value.map_or(ratchet, |o| o == value);
                        let sub = format!("{path}[{key}]");
                        self.node(additional, value, old_value, &sub, r, ratchet, false);
                    }
                }
                for (name, sub_node) in &node.properties {
                    let Some(value) = map.get(name) else { continue };
                    let old_value = old_map.and_then(|m| m.get(name));
                    let r = old_value.map_or(ratchet, |o| o == value);
                    let embedded = schema
                        .pointer(&format!(
                            "/properties/{}/x-kubernetes-embedded-resource",
                            pointer_token(name)
                        ))
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    let sub = child_path(path, name);
                    self.node(sub_node, value, old_value, &sub, r, ratchet, embedded);
                }
            }
            Value::Array(items) => {
                let Some(item_node) = &node.items else { return };
                let old_items = old.and_then(Value::as_array);
                let kind = list_type(schema);
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let embedded = schema
                    .pointer("/items/x-kubernetes-embedded-resource")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                for (i, item) in items.iter().enumerate() {
                    let old_item = match (kind, old_items) {
                        ("map", Some(olds)) => olds
                            .iter()
                            .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k))),
                        _ => None,
                    };
                    let r = match (kind, old_item, old_items) {
                        (_, Some(o), _) => o == item,
                        ("set", None, Some(olds)) => olds.contains(item) || ratchet,
                        _ => ratchet,
                    };
                    let sub = format!("{path}[{i}]");
                    self.node(item_node, item, old_item, &sub, r, ratchet, embedded);
                }
            }
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn expressions(
        &mut self,
        node: &Node,
        schema: &Value,
        new: &Value,
        old: Option<&Value>,
        path: &str,
        ratchet: bool,
        resource_root: bool,
    ) {
        let ty = convert::schema_type(schema);
        let self_value = convert::to_cel(new, schema, resource_root);
        let old_value = old.map(|o| convert::to_cel(o, schema, resource_root));
        let env = self.rules.env.clone();
        let mut plain = Context::with_env(env.clone());
        plain.add_variable_from_value("self", self_value.clone());
        if let Some(o) = &old_value {
            plain.add_variable_from_value("oldSelf", o.clone());
        }
        let mut optional: Option<Context> = None;
        let limit = MAX_ESTIMATED_COST as usize;
        let mut value_size: Option<usize> = None;
        for rule in &node.rules {
            if rule.uses_old_self && old.is_none() && !rule.optional_old_self {
                continue;
            }
            if rule.depth > 0 {
                let n = *value_size.get_or_insert_with(|| {
                    size(new, limit).saturating_add(old.map_or(0, |o| size(o, limit)))
                });
                if (n as f64).powi(rule.depth.min(64) as i32) > MAX_ESTIMATED_COST {
                    self.errors.push(FieldError::invalid(
                        shown(path),
                        Value::String(ty.to_string()),
                        format!(
                            "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                            rule.error_string()
                        ),
                    ));
                    self.stopped = true;
                    return;
                }
            }
            let context = if rule.optional_old_self {
                optional.get_or_insert_with(|| {
                    let mut c = Context::with_env(env.clone());
                    c.add_variable_from_value("self", self_value.clone());
                    let opt = match &old_value {
                        Some(o) => cel::objects::OptionalValue::of(o.clone()),
                        None => cel::objects::OptionalValue::none(),
                    };
                    c.add_variable_from_value("oldSelf", CelValue::Opaque(Arc::new(opt)));
                    c
                })
            } else {
                &plain
            };
            let result = rule.program.execute(context);
            match result {
                Ok(CelValue::Bool(true)) => {}
                Err(e) => {
                    let text = execution_error(&e);
                    let detail = if text.starts_with("no such overload") {
                        format!(
                            "'{text}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                            rule.error_string()
                        )
                    } else {
                        format!("{text} evaluating rule: {}", rule.error_string())
                    };
                    self.errors.push(FieldError::invalid(
                        shown(path),
                        Value::String(ty.to_string()),
                        detail,
                    ));
                }
                Ok(_) => {
                    let at = match &rule.field_path {
                        Some(fp) => child_path(path, fp),
                        None => path.to_string(),
                    };
                    let message = rule
                        .message_expression
                        .as_ref()
                        .and_then(|p| message_expression(p, &plain))
                        .unwrap_or_else(|| rule.message_or_default());
                    let error = reason_error(rule.reason, &at, ty, message);
                    if rule.uses_old_self || !ratchet {
                        self.errors.push(error);
                    }
                }
            }
        }
    }
}

/// The message a `messageExpression` yields, or `None` when it fails or yields nothing usable
/// (the rule's message then stands).
fn message_expression(program: &Program, context: &Context) -> Option<String> {
    match program.execute(context) {
        Ok(CelValue::String(s)) => {
            let trimmed = s.trim();
            let usable = !trimmed.is_empty()
                && trimmed.len() <= MAX_MESSAGE_EXPRESSION_BYTES
                && !trimmed.contains('\n');
            usable.then(|| trimmed.to_string())
        }
        _ => None,
    }
}
