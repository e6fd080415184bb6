//! `x-kubernetes-validations`: the CEL rules of a CustomResourceDefinition's schema, compiled
//! once per schema ([`Rules::compile`]) and evaluated against custom objects
//! ([`Rules::validate`]), as apiextensions-apiserver's `pkg/apiserver/schema/cel` does.
//!
//! # Map
//!
//! - this file: walking the schema (compile) and the object (validate), transition rules,
//!   ratcheting, cost limits, and the wording of every error.
//! - `types`: the CEL type of each schema node (`self`), and the size bounds it declares.
//! - `functions`: the functions and overloads a rule may call.
//! - `checker`: the type checker and AST validators, worded as cel-go words its issues.
//! - `cost`: cel-go's cost model, over the schema's bounds (at CRD create) or the object's
//!   own sizes (when it is validated).
//! - `check`: rendering issues with the source line and a caret.
//! - `convert`: JSON values as the CEL values a rule sees as `self`, typed by the schema.
//! - `library`: the CEL run-time environment (standard library, strings extension,
//!   Kubernetes' list and set functions, and the authorization library of `authz`).
//! - [`admission`]: the environment of admission expressions (ValidatingAdmissionPolicies,
//!   webhooks' match conditions), built on the same checker, costs and library.
//!
//! Expressions are parsed and evaluated by the `cel` crate, which counts no cost while it
//! evaluates: before a rule runs, its cost is computed with the estimator over the sizes of
//! the object being validated, and held to kube-apiserver's per-call limit and per-object
//! budget (see [`Rules::validate`]).

pub mod admission;
mod authz;
mod check;
mod checker;
mod convert;
mod cost;
mod functions;
mod library;
mod types;

pub use convert::is_identifier;

use std::sync::Arc;

use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

use crate::field::{ErrorType, FieldError};
use crate::gofmt;
use types::{Decl, Type};

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
    /// What `self` is here, for sizing values when a rule's cost is counted.
    decl: Option<Arc<Decl>>,
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
    checked: checker::Checked,
    /// `message`, trimmed, when not empty.
    message: Option<String>,
    message_expression: Option<(Program, checker::Checked)>,
    reason: ErrorType,
    /// `fieldPath`, normalized (`spec.x`), when set.
    field_path: Option<String>,
    uses_old_self: bool,
    optional_old_self: bool,
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
        Rules::compile_with(schema, path, true)
    }

    /// Compiles the rules of a stored definition to serve its objects, as kube-apiserver
    /// does: their cost was limited when the definition was written, and is not again.
    pub fn compile_stored(schema: &Value) -> Result<Rules, Vec<FieldError>> {
        Rules::compile_with(schema, "", false)
    }

    fn compile_with(
        schema: &Value,
        path: &str,
        limit_costs: bool,
    ) -> Result<Rules, Vec<FieldError>> {
        let env = library::env();
        let mut compiler = Compiler {
            env: &env,
            errors: Vec::new(),
            total: Total::default(),
            limit_costs,
        };
        let root = compiler.node(schema, "", schema, path, None, true, Some(1));
        let Compiler {
            mut errors, total, ..
        } = compiler;
        if limit_costs && total.cost > cost::SCHEMA_LIMIT {
            for (rule, _) in total.expensive {
                errors.push(FieldError::forbidden(
                    rule,
                    "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                ));
            }
            errors.push(FieldError::forbidden(
                path,
                cost::exceeds_budget(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    total.cost,
                    cost::SCHEMA_LIMIT,
                ),
            ));
        }
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
            budget: cost::OBJECT_BUDGET,
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

/// The running total of a schema's estimated rule costs.
#[derive(Default)]
struct Total {
    cost: u64,
    /// The costliest rules (each at least 1% of the limit), costliest first, at most 4.
    expensive: Vec<(String, u64)>,
}

impl Total {
    fn observe(&mut self, path: String, cost: u64) {
        self.cost = self.cost.saturating_add(cost);
        if cost >= cost::SCHEMA_LIMIT / 100 {
            self.expensive.push((path, cost));
            self.expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
            self.expensive.truncate(4);
        }
    }
}

/// How many values a schema node holds for each of its children: its `maxItems` or
/// `maxProperties` (`None` when unbounded), one for objects and scalars.
fn max_elements(schema: &Value) -> Option<u64> {
    let bound = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_i64)
            .map(|n| n.max(0) as u64)
    };
    match convert::schema_type(schema) {
        "object"
            if schema
                .get("additionalProperties")
                .is_some_and(|a| !a.is_null()) =>
        {
            bound("maxProperties")
        }
        "array" => bound("maxItems"),
        _ => Some(1),
    }
}

/// A rule compiled and type-checked.
type Compiled = Result<(Program, checker::Checked), String>;

/// Compiles the rules of one schema, keeping what went wrong and what the rules cost.
struct Compiler<'e> {
    env: &'e Env,
    errors: Vec<FieldError>,
    total: Total,
    /// Refuse rules over the cost limits (when a definition is written).
    limit_costs: bool,
}

impl Compiler<'_> {
    /// The rules at `node_schema` and below. `cardinality` is how many times a rule here can
    /// run for one object, `None` when no ancestor bounds it.
    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        rule_schema: &Value,
        node_ptr: &str,
        node_schema: &Value,
        path: &str,
        forbid_old_self: Option<&str>,
        resource_root: bool,
        cardinality: Option<u64>,
    ) -> Option<Node> {
        let decl = Decl::of_schema(node_schema, "selfType0", resource_root);
        let rules = self.rules(
            rule_schema,
            node_schema,
            decl.as_ref(),
            path,
            forbid_old_self,
            cardinality,
        );
        let embedded = |s: &Value| {
            s.get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true)
        };
        let child_cardinality = cardinality
            .zip(max_elements(node_schema))
            .map(|(c, n)| c.saturating_mul(n));
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
                if let Some(node) = self.node(
                    sub,
                    &ptr,
                    node_sub,
                    &sub_path,
                    forbid.as_deref(),
                    embedded(node_sub),
                    child_cardinality,
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
                self.node(
                    sub,
                    &format!("{node_ptr}/items"),
                    node_sub,
                    &format!("{path}.items"),
                    forbid.as_deref(),
                    embedded(node_sub),
                    child_cardinality,
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
                self.node(
                    sub,
                    &format!("{node_ptr}/additionalProperties"),
                    node_sub,
                    &format!("{path}.additionalProperties"),
                    forbid.as_deref(),
                    embedded(node_sub),
                    child_cardinality,
                )
                .map(Box::new)
            }
            _ => None,
        };
        let mut all_of = Vec::new();
        if let Some(list) = rule_schema.get("allOf").and_then(Value::as_array) {
            for (i, sub) in list.iter().enumerate() {
                if let Some(node) = self.node(
                    sub,
                    node_ptr,
                    node_schema,
                    &format!("{path}.allOf[{i}]"),
                    forbid_old_self,
                    resource_root,
                    cardinality,
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
            decl,
            rules,
            properties,
            items,
            additional,
            all_of,
        })
    }

    /// Compiles `source` with `self` (and `oldSelf`) declared: parsed, type-checked, and of
    /// the `want`ed result type; `prefix` starts the error (`compilation failed: `).
    fn compile(&self, source: &str, vars: &[(&str, Type)], want: &Type, prefix: &str) -> Compiled {
        let program = self
            .env
            .compile(source)
            .map_err(|e| format!("{prefix}compilation failed: {}", check::parse_errors(&e)))?;
        let checked = checker::check(&program, vars).map_err(|issues| {
            format!(
                "{prefix}compilation failed: {}",
                check::issues(source, &issues)
            )
        })?;
        let result = checked.type_of(program.expression());
        // Exactly: a `dyn` result is refused too.
        if !result.same(want) || result.is_dyn_or_error() {
            let what = if prefix.is_empty() {
                "cel expression"
            } else {
                "messageExpression"
            };
            return Err(format!("{what} must evaluate to a {want}"));
        }
        Ok((program, checked))
    }

    fn rules(
        &mut self,
        schema: &Value,
        node_schema: &Value,
        decl: Option<&Arc<Decl>>,
        path: &str,
        forbid_old_self: Option<&str>,
        cardinality: Option<u64>,
    ) -> Vec<Rule> {
        let Some(list) = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        else {
            return Vec::new();
        };
        let base = format!("{path}.x-kubernetes-validations");
        let schema_errors = rule_schema_errors(list, &base, node_schema);
        if !schema_errors.is_empty() {
            self.errors.extend(schema_errors);
            return Vec::new();
        }
        let Some(decl) = decl else {
            self.errors.push(FieldError::new(
                ErrorType::Internal,
                base,
                None,
                "internal error: failed to construct type information for x-kubernetes-validations rules: unable to convert structural schema to CEL declarations",
            ));
            return Vec::new();
        };
        let self_type = decl.cel_type();
        let sizes = cost::DeclSizes(decl);
        let cardinality = cardinality.unwrap_or(types::MAX_REQUEST_BYTES / (decl.min_size + 1));
        let mut rules = Vec::new();
        for (i, rule) in list.iter().enumerate() {
            let at = |name: &str| format!("{base}[{i}].{name}");
            let source = string_field(rule, "rule");
            let optional_old_self = rule.get("optionalOldSelf").and_then(Value::as_bool);
            let old_type = if optional_old_self == Some(true) {
                Type::optional(self_type.clone())
            } else {
                self_type.clone()
            };
            let vars = [("self", self_type.clone()), ("oldSelf", old_type)];
            let compiled = self.compile(source, &vars, &Type::Bool, "");
            let mut failed = false;
            match &compiled {
                Ok((program, checked)) => {
                    let estimated = cost::estimate(program, checked, &sizes).max;
                    let total = estimated.saturating_mul(cardinality);
                    if self.limit_costs && total > cost::RULE_LIMIT {
                        self.errors.push(FieldError::forbidden(
                            at("rule"),
                            cost::exceeds_budget("estimated rule cost", total, cost::RULE_LIMIT),
                        ));
                        failed = true;
                    }
                    self.total.observe(at("rule"), total);
                }
                Err(detail) => {
                    self.errors.push(invalid_rule(at("rule"), rule, detail));
                    failed = true;
                }
            }
            let mut message_program = None;
            let message_expression = string_field(rule, "messageExpression");
            if compiled.is_ok() && !message_expression.is_empty() {
                match self.compile(
                    message_expression,
                    &vars,
                    &Type::String,
                    "messageExpression ",
                ) {
                    Ok((program, checked)) => {
                        let estimated = cost::estimate(&program, &checked, &sizes).max;
                        if self.limit_costs && estimated > cost::RULE_LIMIT {
                            self.errors.push(FieldError::forbidden(
                                at("messageExpression"),
                                cost::exceeds_budget(
                                    "estimated messageExpression cost",
                                    estimated,
                                    cost::RULE_LIMIT,
                                ),
                            ));
                            failed = true;
                        }
                        self.total.observe(at("messageExpression"), estimated);
                        message_program = Some((program, checked));
                    }
                    Err(detail) => {
                        self.errors
                            .push(invalid_rule(at("messageExpression"), rule, &detail));
                        failed = true;
                    }
                }
            }
            let uses_old_self = compiled.as_ref().is_ok_and(|(_, c)| c.uses_old_self);
            if uses_old_self {
                if let Some(within) = forbid_old_self {
                    self.errors.push(FieldError::invalid(
                        at("rule"),
                        Value::String(source.to_string()),
                        format!(
                            "oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"
                        ),
                    ));
                    failed = true;
                }
            } else if let Some(flag) = optional_old_self {
                self.errors.push(FieldError::invalid(
                    at("optionalOldSelf"),
                    Value::Bool(flag),
                    "may not be set if oldSelf is not used in rule",
                ));
                failed = true;
            }
            let (false, Ok((program, checked))) = (failed, compiled) else {
                continue;
            };
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
                checked,
                message: (!message.is_empty()).then(|| message.to_string()),
                message_expression: message_program,
                reason,
                field_path: if field_path.is_empty() {
                    None
                } else {
                    valid_field_path(field_path, node_schema)
                },
                uses_old_self,
                optional_old_self: optional_old_self.unwrap_or(false),
            });
        }
        rules
    }
}

/// The checks of a node's rules that come before compiling any: required and well-formed
/// `rule`, `message`, `messageExpression`, `reason` and `fieldPath`.
fn rule_schema_errors(list: &[Value], base: &str, node_schema: &Value) -> Vec<FieldError> {
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
    schema_errors
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
    /// Set once a rule exceeded the cost limit or the budget: nothing more runs.
    stopped: bool,
    /// What is left of the object's cost budget.
    budget: u64,
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
        let out_of_budget = |detail: &str| {
            FieldError::invalid(
                shown(path),
                Value::String(ty.to_string()),
                format!(
                    "{detail} failed due to running out of cost budget, no further validation rules will be run"
                ),
            )
        };
        if self.budget == 0 {
            self.errors.push(out_of_budget("validation"));
            self.stopped = true;
            return;
        }
        for rule in &node.rules {
            if rule.uses_old_self && old.is_none() && !rule.optional_old_self {
                continue;
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
            // What the rule costs as it runs on this object (only what evaluates, over the
            // values' own sizes), charged against the per-call limit and the object's budget.
            let cost = match &node.decl {
                Some(decl) => {
                    let sizes = cost::ValueSizes { decl, new, old };
                    let limit = cost::CALL_LIMIT.min(self.budget);
                    cost::actual(&rule.program, &rule.checked, &sizes, context, limit).max
                }
                None => 0,
            };
            if cost > self.budget {
                self.errors.push(out_of_budget("validation"));
                self.stopped = true;
                return;
            }
            if cost > cost::CALL_LIMIT {
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
            self.budget -= cost;
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
                        .and_then(|(p, _)| message_expression(p, &plain))
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
