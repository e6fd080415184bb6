//! CEL's type checker, as cel-go runs it on a CRD rule: every expression gets a type from
//! the declared variables (`self`, `oldSelf`) and the declared functions, and what does not
//! fit is an issue worded as cel-go words it (`undefined field 'x'`, `found no matching
//! overload for '_+_' applied to '(int, string)'`, ...). After a clean check, the AST
//! validators Kubernetes installs run: homogeneous list and map literals, and literal
//! `duration`, `timestamp` and `matches` arguments.

use std::collections::HashMap;

use cel::Program;
use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

use super::functions::{Overload, functions};
use super::types::{Bindings, Type, assignable};

/// One problem, at a byte offset of the source.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Issue {
    pub(crate) offset: usize,
    pub(crate) message: String,
}

/// A call the checker resolved: what the cost estimator needs to price it.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// The function's name; qualified (`sets.contains`) for namespaced functions.
    pub(crate) function: String,
    /// Called on a target (the target is then the first argument).
    pub(crate) member: bool,
}

/// A rule that type-checked.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// The type of every expression, by id.
    pub(crate) types: HashMap<u64, Type>,
    /// Every call, by id.
    pub(crate) calls: HashMap<u64, Call>,
    pub(crate) uses_old_self: bool,
}

impl Checked {
    pub(crate) fn type_of(&self, e: &IdedExpr) -> Type {
        self.types.get(&e.id).cloned().unwrap_or(Type::Dyn)
    }
}

/// Type names usable as values (`type(x) == int`).
fn type_name(name: &str) -> Option<Type> {
    Some(match name {
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "bool" => Type::Bool,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "list" => Type::list(Type::Dyn),
        "map" => Type::map(Type::Dyn, Type::Dyn),
        "null_type" => Type::Null,
        "type" => Type::Kind(Box::new(Type::Dyn)),
        "dyn" => Type::Dyn,
        "optional_type" => Type::optional(Type::Dyn),
        "google.protobuf.Timestamp" => Type::Timestamp,
        "google.protobuf.Duration" => Type::Duration,
        _ => return None,
    })
}

/// Type-checks `program` with `vars` declared, then runs the AST validators.
pub(crate) fn check(program: &Program, vars: &[(&str, Type)]) -> Result<Checked, Vec<Issue>> {
    let mut checker = Checker {
        program,
        scopes: vars
            .iter()
            .map(|(name, t)| (name.to_string(), t.clone()))
            .collect(),
        out: Checked::default(),
        issues: Vec::new(),
    };
    checker.expr(program.expression());
    if checker.issues.is_empty() {
        validate(
            program,
            &checker.out.types,
            program.expression(),
            false,
            &mut checker.issues,
        );
    }
    if checker.issues.is_empty() {
        Ok(checker.out)
    } else {
        // cel-go reports issues by position, each once.
        checker.issues.sort_by_key(|i| i.offset);
        checker.issues.dedup();
        Err(checker.issues)
    }
}

struct Checker<'p> {
    program: &'p Program,
    /// Declared variables, innermost last.
    scopes: Vec<(String, Type)>,
    out: Checked,
    issues: Vec<Issue>,
}

impl Checker<'_> {
    fn offset(&self, id: u64) -> usize {
        self.program
            .source_info()
            .offset_for(id)
            .map_or(0, |(start, _)| start as usize)
    }

    fn report(&mut self, id: u64, message: String) {
        let offset = self.offset(id);
        self.issues.push(Issue { offset, message });
    }

    fn lookup(&self, name: &str) -> Option<Type> {
        self.scopes
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
    }

    fn expr(&mut self, e: &IdedExpr) -> Type {
        let t = self.expr_inner(e);
        self.out.types.insert(e.id, t.clone());
        t
    }

    fn expr_inner(&mut self, e: &IdedExpr) -> Type {
        match &e.expr {
            Expr::Unspecified => Type::Dyn,
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Type::Bool,
                LiteralValue::Bytes(_) => Type::Bytes,
                LiteralValue::Double(_) => Type::Double,
                LiteralValue::Int(_) => Type::Int,
                LiteralValue::Null => Type::Null,
                LiteralValue::String(_) => Type::String,
                LiteralValue::UInt(_) => Type::Uint,
            },
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(select) => {
                // `a.b.c` may name a variable or a type before it names fields.
                if let Some(name) = qualified_name(e)
                    && let Some(t) = self
                        .lookup(&name)
                        .or_else(|| type_name(&name).map(|t| Type::Kind(Box::new(t))))
                {
                    return t;
                }
                let operand = self.expr(&select.operand);
                let field = self.select(e.id, &operand, &select.field);
                if select.test { Type::Bool } else { field }
            }
            Expr::Call(call) => {
                let function = call.func_name.as_str();
                if function == "_&&_" || function == "_||_" {
                    for arg in &call.args {
                        let t = self.expr(arg);
                        if !assignable(&Type::Bool, &t, &mut Bindings::new()) {
                            self.report(arg.id, format!("expected type 'bool' but found '{t}'"));
                        }
                    }
                    self.out.calls.insert(
                        e.id,
                        Call {
                            function: function.to_string(),
                            member: false,
                        },
                    );
                    return Type::Bool;
                }
                if function == "_?._" {
                    let operand = self.expr(&call.args[0]);
                    let field = match call.args.get(1).map(|a| &a.expr) {
                        Some(Expr::Literal(LiteralValue::String(s))) => s.to_string(),
                        _ => String::new(),
                    };
                    let (inner, _) = unwrap_optional(&operand);
                    let t = self.select(e.id, &inner, &field);
                    return Type::optional(t);
                }
                // `sets.contains(a, b)`: a namespaced global function, not a member call.
                let qualified = call
                    .target
                    .as_deref()
                    .and_then(qualified_name)
                    .map(|ns| format!("{ns}.{function}"))
                    .filter(|q| functions().contains_key(q) && self.lookup(q).is_none());
                let (name, member) = match &qualified {
                    Some(q) => (q.clone(), false),
                    None => (function.to_string(), call.target.is_some()),
                };
                let mut args = Vec::new();
                if let (Some(target), false) = (&call.target, qualified.is_some()) {
                    args.push(self.expr(target));
                }
                for arg in &call.args {
                    args.push(self.expr(arg));
                }
                self.out.calls.insert(
                    e.id,
                    Call {
                        function: name.clone(),
                        member,
                    },
                );
                self.resolve(e.id, &name, member, &args)
            }
            Expr::List(list) => {
                let mut elem: Option<Type> = None;
                for (i, item) in list.elements.iter().enumerate() {
                    let mut t = self.expr(item);
                    if list.optional_indices.contains(&i) {
                        t = match t {
                            Type::Optional(inner) => *inner,
                            t if t.is_dyn_or_error() => t,
                            other => {
                                self.report(
                                    item.id,
                                    format!(
                                        "expected type 'optional_type(dyn)' but found '{other}'"
                                    ),
                                );
                                Type::Error
                            }
                        };
                    }
                    elem = Some(join(elem, t));
                }
                Type::list(elem.unwrap_or(Type::Dyn))
            }
            Expr::Map(map) => {
                let (mut key, mut value) = (None, None);
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        let k = self.expr(&m.key);
                        let v = self.expr(&m.value);
                        let v = if m.optional { unwrap_optional(&v).0 } else { v };
                        key = Some(join(key, k));
                        value = Some(join(value, v));
                    }
                }
                Type::map(key.unwrap_or(Type::Dyn), value.unwrap_or(Type::Dyn))
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        self.expr(&f.value);
                    }
                }
                self.report(e.id, format!("'{}' is not a type", s.type_name));
                Type::Error
            }
            Expr::Comprehension(c) => {
                let range = self.expr(&c.iter_range);
                let (first, second) = match &range {
                    Type::List(elem) => match &c.iter_var2 {
                        Some(_) => (Type::Int, (**elem).clone()),
                        None => ((**elem).clone(), Type::Dyn),
                    },
                    Type::Map(k, v) => ((**k).clone(), (**v).clone()),
                    t if t.is_dyn_or_error() || matches!(t, Type::Param(_)) => {
                        (Type::Dyn, Type::Dyn)
                    }
                    other => {
                        let message = format!(
                            "expression of type '{other}' cannot be range of a comprehension (must be list, map, or dynamic)"
                        );
                        self.report(c.iter_range.id, message);
                        (Type::Dyn, Type::Dyn)
                    }
                };
                let mut accu = self.expr(&c.accu_init);
                let depth = self.scopes.len();
                self.scopes.push((c.accu_var.clone(), accu.clone()));
                self.scopes.push((c.iter_var.clone(), first));
                if let Some(v) = &c.iter_var2 {
                    self.scopes.push((v.clone(), second));
                }
                let cond = self.expr(&c.loop_cond);
                if !assignable(&Type::Bool, &cond, &mut Bindings::new()) {
                    self.report(
                        c.loop_cond.id,
                        format!("expected type 'bool' but found '{cond}'"),
                    );
                }
                let step = self.expr(&c.loop_step);
                if is_empty_literal(&c.accu_init) {
                    // `[]` and `{}` take the type the step builds (`map` yields `list(int)`).
                    accu = step.clone();
                    self.scopes[depth].1 = accu.clone();
                } else if !assignable(&accu, &step, &mut Bindings::new()) {
                    self.report(
                        c.loop_step.id,
                        format!("expected type '{accu}' but found '{step}'"),
                    );
                }
                let result = self.expr(&c.result);
                self.scopes.truncate(depth);
                result
            }
        }
    }

    fn ident(&mut self, id: u64, name: &str) -> Type {
        if let Some(t) = self.lookup(name) {
            if name == "oldSelf" {
                self.out.uses_old_self = true;
            }
            return t;
        }
        if let Some(t) = type_name(name) {
            return Type::Kind(Box::new(t));
        }
        self.report(
            id,
            format!("undeclared reference to '{name}' (in container '')"),
        );
        Type::Error
    }

    /// `operand.field`.
    fn select(&mut self, id: u64, operand: &Type, field: &str) -> Type {
        let (inner, optional) = unwrap_optional(operand);
        let t = match &inner {
            Type::Map(_, v) => (**v).clone(),
            Type::Object(decl) => match decl.field(field) {
                Some(f) => f.cel_type(),
                None => {
                    self.report(id, format!("undefined field '{field}'"));
                    Type::Error
                }
            },
            t if t.is_dyn_or_error() || matches!(t, Type::Param(_)) => Type::Dyn,
            other => {
                self.report(
                    id,
                    format!("type '{other}' does not support field selection"),
                );
                Type::Dyn
            }
        };
        if optional { Type::optional(t) } else { t }
    }

    /// The result of calling `name` with `args` (the target first for a member call).
    fn resolve(&mut self, id: u64, name: &str, member: bool, args: &[Type]) -> Type {
        let Some(overloads) = functions().get(name) else {
            self.report(
                id,
                format!("undeclared reference to '{name}' (in container '')"),
            );
            return Type::Error;
        };
        let mut result: Option<Type> = None;
        for overload in overloads.iter().filter(|o| o.member == member) {
            if let Some(t) = matches(overload, args) {
                result = Some(match result {
                    None => t,
                    Some(prev) if prev.same(&t) => prev,
                    Some(_) => Type::Dyn,
                });
            }
        }
        if let Some(t) = result {
            return t;
        }
        let shown: Vec<String> = args.iter().map(Type::to_string).collect();
        let applied = if member {
            format!("{}.({})", shown[0], shown[1..].join(", "))
        } else {
            format!("({})", shown.join(", "))
        };
        self.report(
            id,
            format!("found no matching overload for '{name}' applied to '{applied}'"),
        );
        Type::Error
    }
}

/// The overload's result for `args`, when they fit its parameters.
fn matches(overload: &Overload, args: &[Type]) -> Option<Type> {
    if overload.params.len() != args.len() {
        return None;
    }
    let mut bindings = Bindings::new();
    for (param, arg) in overload.params.iter().zip(args) {
        if !assignable(param, arg, &mut bindings) {
            return None;
        }
    }
    Some(overload.result.substitute(&bindings))
}

/// The common type of literal elements: the first one's, or `dyn` when they differ.
fn join(acc: Option<Type>, next: Type) -> Type {
    match acc {
        None => next,
        Some(prev) if prev.same(&next) => prev,
        Some(_) => Type::Dyn,
    }
}

fn unwrap_optional(t: &Type) -> (Type, bool) {
    match t {
        Type::Optional(inner) => ((**inner).clone(), true),
        other => (other.clone(), false),
    }
}

fn is_empty_literal(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::List(l) => l.elements.is_empty(),
        Expr::Map(m) => m.entries.is_empty(),
        _ => false,
    }
}

/// `a.b.c` as a dotted name, when it is only identifiers and selections.
fn qualified_name(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(s) if !s.test => {
            qualified_name(&s.operand).map(|prefix| format!("{prefix}.{}", s.field))
        }
        _ => None,
    }
}

/// The AST validators of Kubernetes' environment, run on a checked expression.
/// `in_format` is set under a `format(...)` call, whose literals may mix types.
fn validate(
    program: &Program,
    types: &HashMap<u64, Type>,
    e: &IdedExpr,
    in_format: bool,
    issues: &mut Vec<Issue>,
) {
    let offset = |id: u64| {
        program
            .source_info()
            .offset_for(id)
            .map_or(0, |(start, _)| start as usize)
    };
    match &e.expr {
        Expr::List(list) => {
            if !in_format {
                let optional = |i: usize| list.optional_indices.contains(&i);
                let items = list
                    .elements
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e, optional(i)));
                homogeneous(program, types, items, issues, true);
            }
            for item in &list.elements {
                validate(program, types, item, in_format, issues);
            }
        }
        Expr::Map(map) => {
            let (mut keys, mut values) = (Vec::new(), Vec::new());
            for entry in &map.entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    keys.push(&m.key);
                    values.push(&m.value);
                }
            }
            if !in_format {
                homogeneous(
                    program,
                    types,
                    keys.iter().map(|k| (*k, false)),
                    issues,
                    false,
                );
                homogeneous(
                    program,
                    types,
                    values.iter().map(|v| (*v, false)),
                    issues,
                    false,
                );
            }
            for item in keys.into_iter().chain(values) {
                validate(program, types, item, in_format, issues);
            }
        }
        Expr::Call(call) => {
            // Literal arguments of these are checked as they would be at run time.
            let literal = match call.func_name.as_str() {
                "duration" | "timestamp" if call.target.is_none() => call.args.first(),
                "matches" => call.args.last(),
                _ => None,
            };
            if let Some(arg) = literal
                && let Expr::Literal(LiteralValue::String(s)) = &arg.expr
                && !literal_ok(&call.func_name, s)
            {
                issues.push(Issue {
                    offset: offset(arg.id),
                    message: format!("invalid {} argument", call.func_name),
                });
            }
            let in_format = in_format || call.func_name == "format";
            if let Some(target) = &call.target {
                validate(program, types, target, in_format, issues);
            }
            for arg in &call.args {
                validate(program, types, arg, in_format, issues);
            }
        }
        Expr::Select(s) => validate(program, types, &s.operand, in_format, issues),
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                validate(program, types, part, in_format, issues);
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    validate(program, types, &f.value, in_format, issues);
                }
            }
        }
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => {}
    }
}

/// The elements of a literal must share the first one's type; an optional element
/// (`[?x]`) counts as its value's type. A list stops at its first mismatch; a map reports
/// every one.
fn homogeneous<'e>(
    program: &Program,
    types: &HashMap<u64, Type>,
    items: impl Iterator<Item = (&'e IdedExpr, bool)>,
    issues: &mut Vec<Issue>,
    first_only: bool,
) {
    let mut first: Option<Type> = None;
    for (item, optional) in items {
        let mut t = types.get(&item.id).cloned().unwrap_or(Type::Dyn);
        if optional {
            t = unwrap_optional(&t).0;
        }
        match &first {
            None => first = Some(t),
            Some(f) if !f.same(&t) => {
                let offset = program
                    .source_info()
                    .offset_for(item.id)
                    .map_or(0, |(start, _)| start as usize);
                issues.push(Issue {
                    offset,
                    message: format!("expected type '{f}' but found '{t}'"),
                });
                if first_only {
                    return;
                }
            }
            Some(_) => {}
        }
    }
}

/// Whether a literal argument of `duration`, `timestamp` or `matches` would be accepted.
fn literal_ok(function: &str, text: &str) -> bool {
    match function {
        "duration" => crate::duration::parse_duration(text).is_ok(),
        "timestamp" => chrono::DateTime::parse_from_rfc3339(text).is_ok(),
        _ => regex::Regex::new(text).is_ok(),
    }
}
