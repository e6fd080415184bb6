//! What a rule costs, in cel-go's units, as kube-apiserver estimates it at CRD create
//! (`checker.Cost` with Kubernetes' size and call estimators): each identifier and field
//! selection costs 1, each call its function's cost over the sizes of its arguments, a
//! comprehension its body times the size of its range. Sizes come from a [`Sizes`]: the
//! schema's bounds (`maxLength`, `maxItems`, ... or the request size) when a CRD is
//! validated.
//!
//! When a rule runs ([`actual`]), it is charged what cel-go's runtime cost tracking charges:
//! the same units, but only for what evaluates (the untaken branch of a conditional and the
//! operand a `&&` or `||` short-circuits cost nothing, a comprehension costs the iterations it
//! runs, `all` and `exists` stopping early), over the sizes of the values as they are.

use std::collections::HashMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::objects::Value as CelValue;
use cel::{Context, Program};
use serde_json::Value;

use super::checker::Checked;
use super::types::{Decl, DeclKind, Type};

/// A rule may cost this much at CRD create (`StaticEstimatedCostLimit`).
pub(crate) const RULE_LIMIT: u64 = 10_000_000;
/// All rules of one schema together may cost this much (`StaticEstimatedCRDCostLimit`).
pub(crate) const SCHEMA_LIMIT: u64 = 100_000_000;
/// One evaluation of one rule may cost this much (`PerCallLimit`).
pub(crate) const CALL_LIMIT: u64 = 1_000_000;
/// Validating one object may cost this much in all (`RuntimeCELCostBudget`).
pub(crate) const OBJECT_BUDGET: u64 = 10_000_000;

/// cel-go's traversal factors: a tenth per character, a quarter per regex character.
const STRING_FACTOR: f64 = 0.1;
const REGEX_FACTOR: f64 = 0.25;

/// A range of costs or sizes, saturating at `u64::MAX` (cel-go's `CostEstimate` and
/// `SizeEstimate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) min: u64,
    pub(crate) max: u64,
}

impl Range {
    const UNKNOWN: Range = Range {
        min: 0,
        max: u64::MAX,
    };

    pub(crate) const fn exactly(n: u64) -> Range {
        Range { min: n, max: n }
    }

    fn add(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    fn mul(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    /// Each bound times `f`, rounded up.
    fn factor(self, f: f64) -> Range {
        let scale = |n: u64| {
            let v = (n as f64 * f).ceil();
            if v >= u64::MAX as f64 {
                u64::MAX
            } else {
                v as u64
            }
        };
        Range {
            min: scale(self.min),
            max: scale(self.max),
        }
    }

    fn union(self, o: Range) -> Range {
        Range {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// How large the values at a path are (`["self", "spec", "items", "@items"]`).
pub(crate) trait Sizes {
    fn size(&self, path: &[String]) -> Option<Range>;

    /// How large a value nothing says more about can be (a computed string, say): unbounded
    /// when costs are estimated ahead, at most what the inputs hold when they are known.
    fn unknown(&self) -> Range {
        Range::UNKNOWN
    }
}

/// Sizes as the schema bounds them: kube-apiserver's `sizeEstimator` over the rule's `self`.
pub(crate) struct DeclSizes<'a>(pub(crate) &'a Decl);

impl Sizes for DeclSizes<'_> {
    fn size(&self, path: &[String]) -> Option<Range> {
        let mut decl = self.0;
        for segment in path.get(1..)? {
            decl = decl.step(segment)?;
        }
        Some(Range {
            min: 0,
            max: decl.max_elements,
        })
    }
}

/// Sizes of the object being validated: the largest value at each path, measured as the
/// schema measures it (characters, items, entries; nothing for numbers and objects).
pub(crate) struct ValueSizes<'a> {
    pub(crate) decl: &'a Decl,
    pub(crate) new: &'a Value,
    pub(crate) old: Option<&'a Value>,
}

impl Sizes for ValueSizes<'_> {
    fn size(&self, path: &[String]) -> Option<Range> {
        let root = match path.first().map(String::as_str) {
            Some("oldSelf") => self.old?,
            _ => self.new,
        };
        let mut decl = self.decl;
        let mut values = vec![root];
        for segment in path.get(1..)? {
            let next = decl.step(segment)?;
            values = values
                .into_iter()
                .flat_map(|v| -> Vec<&Value> {
                    match (segment.as_str(), v) {
                        ("@items", Value::Array(items)) => items.iter().collect(),
                        ("@values", Value::Object(map)) => map.values().collect(),
                        ("@keys", Value::Object(_)) => Vec::new(),
                        (name, Value::Object(map)) => map
                            .get(name)
                            .or_else(|| map.get(super::convert::unescape(name).as_str()))
                            .into_iter()
                            .collect(),
                        _ => Vec::new(),
                    }
                })
                .collect();
            decl = next;
        }
        let measure = |v: &Value| -> u64 {
            match (v, &decl.kind) {
                (_, DeclKind::Object(_)) => 0,
                (Value::String(s), DeclKind::Scalar(Type::Bytes)) => (s.len() as u64 * 3) / 4,
                (Value::String(s), DeclKind::Scalar(_)) => s.chars().count() as u64,
                (Value::Array(items), _) => items.len() as u64,
                (Value::Object(map), _) => map.len() as u64,
                _ => 0,
            }
        };
        let max = values.into_iter().map(measure).max().unwrap_or(0);
        Some(Range { min: 0, max })
    }
}

/// The cost of `program`, whose types `checked` holds, with values sized by `sizes`.
pub(crate) fn estimate(program: &Program, checked: &Checked, sizes: &dyn Sizes) -> Range {
    Coster::new(checked, sizes).cost(program.expression(), None)
}

/// What `program` costs as it runs in `context`: only what evaluates is charged, over the
/// sizes of the values it meets (`sizes` where a value cannot be computed). Counting stops
/// soon after the cost passes `limit` (as cel-go cancels the evaluation there): the result is
/// then more than `limit`, not the whole cost.
pub(crate) fn actual(
    program: &Program,
    checked: &Checked,
    sizes: &dyn Sizes,
    context: &Context,
    limit: u64,
) -> Range {
    let mut coster = Coster::new(checked, sizes);
    coster.limit = limit;
    coster.cost(program.expression(), Some(context))
}

/// The value of `e` in `ctx`, computed for costing only where that has no effect: an
/// expression that asks the authorizer (`check`) is not evaluated twice.
fn peek(ctx: &Context, e: &IdedExpr) -> Option<CelValue> {
    if asks_authorizer(e) {
        return None;
    }
    ctx.resolve(e).ok()
}

/// Whether `e` calls `check` anywhere in it.
fn asks_authorizer(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Call(call) => {
            call.func_name == "check"
                || call.target.as_deref().is_some_and(asks_authorizer)
                || call.args.iter().any(asks_authorizer)
        }
        Expr::Select(s) => asks_authorizer(&s.operand),
        Expr::List(l) => l.elements.iter().any(asks_authorizer),
        Expr::Map(m) => m.entries.iter().any(|entry| match &entry.expr {
            EntryExpr::MapEntry(me) => asks_authorizer(&me.key) || asks_authorizer(&me.value),
            EntryExpr::StructField(f) => asks_authorizer(&f.value),
        }),
        Expr::Struct(st) => st.entries.iter().any(|entry| match &entry.expr {
            EntryExpr::MapEntry(me) => asks_authorizer(&me.key) || asks_authorizer(&me.value),
            EntryExpr::StructField(f) => asks_authorizer(&f.value),
        }),
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .any(asks_authorizer),
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => false,
    }
}

/// How large a value is, as cel-go measures it: characters, bytes, items, entries; `None`
/// for a value that has no size (a number, a boolean...).
pub(crate) fn measure(value: &CelValue) -> Option<u64> {
    match value {
        CelValue::String(s) => Some(s.chars().count() as u64),
        CelValue::Bytes(b) => Some(b.len() as u64),
        CelValue::List(items) => Some(items.len() as u64),
        CelValue::Map(map) => Some(map.map.len() as u64),
        _ => None,
    }
}

/// A variable a comprehension declares: the path of the values it takes, or their size.
struct Var {
    name: String,
    path: Option<Vec<String>>,
    size: Option<Range>,
}

struct Coster<'a> {
    checked: &'a Checked,
    sizes: &'a dyn Sizes,
    vars: Vec<Var>,
    /// Sizes of call and comprehension results.
    computed: HashMap<u64, Range>,
    /// Where in `self` an expression's value comes from.
    paths: HashMap<u64, Vec<String>>,
    /// Past this cost, a running rule is cancelled: iterations are no longer counted.
    limit: u64,
}

impl<'a> Coster<'a> {
    fn new(checked: &'a Checked, sizes: &'a dyn Sizes) -> Coster<'a> {
        Coster {
            checked,
            sizes,
            vars: Vec::new(),
            computed: HashMap::new(),
            paths: HashMap::new(),
            limit: u64::MAX,
        }
    }

    fn var(&self, name: &str) -> Option<&Var> {
        self.vars.iter().rev().find(|v| v.name == name)
    }

    fn path_with(&self, e: &IdedExpr, segment: &str) -> Option<Vec<String>> {
        let mut path = self.paths.get(&e.id)?.clone();
        path.push(segment.to_string());
        Some(path)
    }

    /// `computeSize`: how large the value of `e` can be; when it runs, how large it is.
    fn size(&self, e: &IdedExpr, ctx: Option<&Context>) -> Range {
        if let Some(ctx) = ctx
            && let Some(value) = peek(ctx, e)
        {
            // A scalar costs as one, as cel-go sizes it.
            return Range::exactly(measure(&value).unwrap_or(1));
        }
        if let Some(size) = self.computed.get(&e.id) {
            return *size;
        }
        match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => {
                return Range::exactly(s.chars().count() as u64);
            }
            Expr::Literal(LiteralValue::Bytes(b)) => return Range::exactly(b.len() as u64),
            Expr::Literal(_) => return Range::exactly(1),
            Expr::List(l) => return Range::exactly(l.elements.len() as u64),
            Expr::Map(m) => return Range::exactly(m.entries.len() as u64),
            _ => {}
        }
        if let Some(path) = self.paths.get(&e.id)
            && let Some(size) = self.sizes.size(path)
        {
            return size;
        }
        let scalar = |t: &Type| {
            matches!(
                t,
                Type::Bool
                    | Type::Double
                    | Type::Duration
                    | Type::Int
                    | Type::Timestamp
                    | Type::Uint
            )
        };
        match self.checked.type_of(e) {
            Type::Optional(inner) if scalar(&inner) => return Range::exactly(1),
            t if scalar(&t) => return Range::exactly(1),
            _ => {}
        }
        if let Expr::Ident(name) = &e.expr
            && let Some(size) = self.var(name).and_then(|v| v.size)
        {
            return size;
        }
        self.sizes.unknown()
    }

    fn cost(&mut self, e: &IdedExpr, ctx: Option<&Context>) -> Range {
        match &e.expr {
            Expr::Unspecified | Expr::Literal(_) => Range::default(),
            Expr::Ident(name) => {
                let path = match self.var(name) {
                    Some(v) => v.path.clone(),
                    None => Some(vec![name.clone()]),
                };
                if let Some(path) = path {
                    self.paths.insert(e.id, path);
                }
                Range::exactly(1)
            }
            Expr::Select(s) => {
                let operand = self.cost(&s.operand, ctx);
                if let Some(path) = self.path_with(&s.operand, &s.field) {
                    self.paths.insert(e.id, path);
                }
                if s.test {
                    return operand;
                }
                let selectable = matches!(
                    self.checked.type_of(&s.operand),
                    Type::Map(..) | Type::Object(_) | Type::Param(_)
                );
                operand.add(Range::exactly(u64::from(selectable)))
            }
            Expr::List(l) => l.elements.iter().fold(Range::exactly(10), |sum, item| {
                sum.add(self.cost(item, ctx))
            }),
            Expr::Map(m) => {
                m.entries
                    .iter()
                    .fold(Range::exactly(30), |sum, entry| match &entry.expr {
                        EntryExpr::MapEntry(me) => sum
                            .add(self.cost(&me.key, ctx))
                            .add(self.cost(&me.value, ctx)),
                        EntryExpr::StructField(f) => sum.add(self.cost(&f.value, ctx)),
                    })
            }
            Expr::Struct(s) => s
                .entries
                .iter()
                .fold(Range::exactly(40), |sum, entry| match &entry.expr {
                    EntryExpr::StructField(f) => sum.add(self.cost(&f.value, ctx)),
                    EntryExpr::MapEntry(me) => sum
                        .add(self.cost(&me.key, ctx))
                        .add(self.cost(&me.value, ctx)),
                }),
            Expr::Call(call) => {
                let mut args: Vec<&IdedExpr> = Vec::new();
                let member = self.checked.calls.get(&e.id).is_none_or(|c| c.member);
                if let (Some(target), true) = (&call.target, member) {
                    args.push(target);
                }
                args.extend(call.args.iter());
                let function = self
                    .checked
                    .calls
                    .get(&e.id)
                    .map_or(call.func_name.clone(), |c| c.function.clone());
                if let Some(ctx) = ctx
                    && let Some(cost) = self.branch(e, &function, &args, ctx)
                {
                    return cost;
                }
                let costs: Vec<Range> = args.iter().map(|a| self.cost(a, ctx)).collect();
                if function == "_[_]" || function == "_[?_]" {
                    let segment = match self.checked.type_of(args[0]) {
                        Type::Map(..) => "@values",
                        _ => "@items",
                    };
                    if let Some(path) = self.path_with(args[0], segment) {
                        self.paths.insert(e.id, path);
                    }
                }
                self.call(e, &function, member, &args, &costs, ctx)
            }
            Expr::Comprehension(c) => {
                if let Some(ctx) = ctx
                    && let Some(cost) = self.iterations(c, ctx)
                {
                    return cost;
                }
                let range_cost = self.cost(&c.iter_range, ctx);
                let init_cost = self.cost(&c.accu_init, ctx);
                let range_type = self.checked.type_of(&c.iter_range);
                let is_map = matches!(range_type, Type::Map(..));
                let (first, second) = match (is_map, c.iter_var2.is_some()) {
                    (true, _) => ("@keys", "@values"),
                    (false, true) => ("@indices", "@items"),
                    (false, false) => ("@items", "@items"),
                };
                let literal_entry = match &c.iter_range.expr {
                    Expr::List(l) => l
                        .elements
                        .iter()
                        .map(|item| self.size(item, ctx))
                        .reduce(Range::union),
                    _ => None,
                };
                let depth = self.vars.len();
                self.vars.push(Var {
                    name: c.accu_var.clone(),
                    path: None,
                    size: None,
                });
                self.vars.push(Var {
                    name: c.iter_var.clone(),
                    path: self.path_with(&c.iter_range, first),
                    size: literal_entry,
                });
                if let Some(v) = &c.iter_var2 {
                    self.vars.push(Var {
                        name: v.clone(),
                        path: self.path_with(&c.iter_range, second),
                        size: None,
                    });
                }
                let body = self
                    .cost(&c.loop_cond, ctx)
                    .add(self.cost(&c.loop_step, ctx));
                let result_cost = self.cost(&c.result, ctx);
                self.vars.truncate(depth);
                let range_size = self.size(&c.iter_range, ctx);
                match &c.accu_init.expr {
                    Expr::List(_) | Expr::Map(_) => {
                        self.computed.insert(e.id, range_size);
                    }
                    Expr::Literal(_) => {
                        self.computed.insert(e.id, Range::exactly(1));
                    }
                    _ => {}
                }
                range_cost
                    .add(init_cost)
                    .add(result_cost)
                    .add(range_size.mul(body))
            }
        }
    }

    /// What a conditional or a logical operator costs as it runs: its condition (or left
    /// operand), and the branch (or right operand) that evaluates, if any. `None` for other
    /// calls.
    fn branch(
        &mut self,
        e: &IdedExpr,
        function: &str,
        args: &[&IdedExpr],
        ctx: &Context,
    ) -> Option<Range> {
        let first = args.first()?;
        match function {
            "_&&_" | "_||_" => {
                let second = args.get(1)?;
                let left = self.cost(first, Some(ctx));
                let short = matches!(
                    (function, peek(ctx, first)),
                    ("_&&_", Some(CelValue::Bool(false))) | ("_||_", Some(CelValue::Bool(true)))
                );
                if short {
                    return Some(left);
                }
                Some(left.add(self.cost(second, Some(ctx))))
            }
            "_?_:_" => {
                let condition = self.cost(first, Some(ctx));
                let taken = match peek(ctx, first) {
                    Some(CelValue::Bool(true)) => args.get(1)?,
                    Some(CelValue::Bool(false)) => args.get(2)?,
                    // A condition not computed here: charged as estimated.
                    None => return None,
                    // An error or a non-boolean stops the evaluation at the condition.
                    Some(_) => return Some(condition),
                };
                let cost = condition.add(self.cost(taken, Some(ctx)));
                let size = self.size(taken, Some(ctx));
                self.computed.insert(e.id, size);
                Some(cost)
            }
            _ => None,
        }
    }

    /// What a comprehension costs as it runs: its range and initial value, each iteration's
    /// condition and (unless the condition stops it) step, and its result. `None` when its
    /// range or accumulator cannot be computed (the estimate is charged then).
    fn iterations(
        &mut self,
        c: &cel::common::ast::ComprehensionExpr,
        ctx: &Context,
    ) -> Option<Range> {
        if [&c.loop_cond, &c.loop_step, &c.result]
            .into_iter()
            .any(asks_authorizer)
        {
            return None;
        }
        let range = peek(ctx, &c.iter_range)?;
        let mut accu = peek(ctx, &c.accu_init)?;
        let pairs: Vec<(CelValue, CelValue)> = match (&range, c.iter_var2.is_some()) {
            (CelValue::List(items), true) => items
                .iter()
                .enumerate()
                .map(|(i, item)| (CelValue::Int(i as i64), item.clone()))
                .collect(),
            (CelValue::List(items), false) => items
                .iter()
                .map(|item| (item.clone(), CelValue::Null))
                .collect(),
            (CelValue::Map(map), _) => map
                .map
                .iter()
                .map(|(key, value)| (CelValue::from(key), value.clone()))
                .collect(),
            _ => return None,
        };
        let mut total = self
            .cost(&c.iter_range, Some(ctx))
            .add(self.cost(&c.accu_init, Some(ctx)));
        for (first, second) in pairs {
            let mut scope = ctx.new_inner_scope();
            scope.add_variable_from_value(c.accu_var.clone(), accu.clone());
            scope.add_variable_from_value(c.iter_var.clone(), first);
            if let Some(name) = &c.iter_var2 {
                scope.add_variable_from_value(name.clone(), second);
            }
            total = total.add(self.cost(&c.loop_cond, Some(&scope)));
            match scope.resolve(&c.loop_cond) {
                Ok(CelValue::Bool(false)) | Err(_) => break,
                Ok(_) => {}
            }
            total = total.add(self.cost(&c.loop_step, Some(&scope)));
            if total.max > self.limit {
                return Some(total);
            }
            match scope.resolve(&c.loop_step) {
                Ok(next) => accu = next,
                Err(_) => break,
            }
        }
        let mut scope = ctx.new_inner_scope();
        scope.add_variable_from_value(c.accu_var.clone(), accu);
        Some(total.add(self.cost(&c.result, Some(&scope))))
    }

    /// A call's cost: its function's, over the sizes of its arguments (the target first),
    /// plus the arguments' own.
    fn call(
        &mut self,
        e: &IdedExpr,
        function: &str,
        member: bool,
        args: &[&IdedExpr],
        costs: &[Range],
        ctx: Option<&Context>,
    ) -> Range {
        let args_cost = costs.iter().fold(Range::default(), |s, c| s.add(*c));
        let size = |i: usize| {
            args.get(i)
                .map_or(self.sizes.unknown(), |a| self.size(a, ctx))
        };
        let one = Range::exactly(1);
        let string_like = |i: usize| {
            args.get(i)
                .is_some_and(|a| matches!(self.checked.type_of(a), Type::String | Type::Bytes))
        };
        let (own, result_size): (Range, Option<Range>) = match function {
            "_&&_" | "_||_" => {
                let (l, r) = (costs[0], costs.get(1).copied().unwrap_or_default());
                return Range {
                    min: l.min,
                    max: l.max.saturating_add(r.max),
                };
            }
            "_?_:_" => {
                let cost = costs[0].add(costs[1].union(costs[2]));
                self.computed.insert(e.id, size(1).union(size(2)));
                return cost;
            }
            "dyn" => return one.add(args_cost),
            // An authorization check costs as much as two may together in one call.
            "check" if member => (Range::exactly(350_000), None),
            "sets.contains" | "sets.intersects" => (size(0).mul(size(1)).add(one), None),
            "sets.equivalent" => (size(0).mul(size(1)).factor(2.0).add(one), None),
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf"
                if member && matches!(self.checked.type_of(args[0]), Type::List(_)) =>
            {
                let item = match self.checked.type_of(args[0]) {
                    Type::List(t) if matches!(*t, Type::String | Type::Bytes) => {
                        let item = self
                            .path_with(args[0], "@items")
                            .and_then(|p| self.sizes.size(&p))
                            .unwrap_or(self.sizes.unknown());
                        one.add(item.factor(STRING_FACTOR))
                    }
                    _ => one,
                };
                (size(0).mul(item), None)
            }
            "indexOf" | "lastIndexOf" if member => (size(0).factor(STRING_FACTOR), None),
            "lowerAscii" | "upperAscii" | "substring" | "trim" if member => {
                (size(0).factor(STRING_FACTOR), Some(size(0)))
            }
            "url" => (size(0).factor(STRING_FACTOR), Some(size(0))),
            "replace" if member => (size(0).factor(0.2), Some(size(0))),
            "split" if member => {
                let limit = match args.get(2).map(|a| &a.expr) {
                    Some(Expr::Literal(LiteralValue::Int(n))) => Some((**n).max(0) as u64),
                    _ => None,
                };
                let max = limit.unwrap_or(size(0).max);
                (size(0).factor(0.2), Some(Range { min: 0, max }))
            }
            "join" if member => {
                let item = self
                    .path_with(args[0], "@items")
                    .and_then(|p| self.sizes.size(&p))
                    .unwrap_or(self.sizes.unknown());
                let separators = match args.get(1) {
                    Some(_) => size(1).mul(Range {
                        min: size(0).min.saturating_sub(1),
                        max: size(0).max.saturating_sub(1),
                    }),
                    None => Range::default(),
                };
                let total = size(0).mul(item).add(separators);
                (total.factor(STRING_FACTOR), Some(total))
            }
            "find" | "findAll" if member => (
                size(0)
                    .add(one)
                    .factor(STRING_FACTOR)
                    .mul(size(1).factor(REGEX_FACTOR)),
                Some(Range {
                    min: 0,
                    max: size(0).max,
                }),
            ),
            "ip" if member => (one, None),
            "cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" | "ip" => {
                (size(0).factor(STRING_FACTOR), None)
            }
            "ip.isCanonical" => (size(0).factor(0.2), None),
            "containsIP" | "containsCIDR" => {
                let mut cost = Range { min: 1, max: 4 };
                if function == "containsCIDR" {
                    cost = cost.add(Range { min: 1, max: 2 }).add(one);
                }
                if string_like(1) {
                    cost = cost.add(size(1).factor(STRING_FACTOR));
                }
                (cost, None)
            }
            "validate" if member => (size(1).factor(STRING_FACTOR).factor(32.0), None),
            "format" if member => (size(0).factor(STRING_FACTOR), None),
            "strings.quote" => (size(0).factor(STRING_FACTOR), None),
            "bytes" | "string" if !member && string_like(0) => {
                (size(0).factor(STRING_FACTOR), None)
            }
            "startsWith" | "endsWith" if member => (size(1).factor(STRING_FACTOR), None),
            "@in" if matches!(self.checked.type_of(args[1]), Type::List(_)) => (size(1), None),
            "matches" if member => (
                size(0)
                    .add(one)
                    .factor(STRING_FACTOR)
                    .mul(size(1).factor(REGEX_FACTOR)),
                None,
            ),
            "contains" if member => (
                size(0)
                    .factor(STRING_FACTOR)
                    .mul(size(1).factor(STRING_FACTOR)),
                None,
            ),
            "_+_" if string_like(0) => {
                let total = size(0).add(size(1));
                (total.factor(STRING_FACTOR), Some(total))
            }
            "_+_" if matches!(self.checked.type_of(args[0]), Type::List(_)) => {
                (one, Some(size(0).add(size(1))))
            }
            "_==_" | "_!=_" => (smaller(size(0), size(1)), None),
            "_<_" | "_<=_" | "_>_" | "_>=_" if string_like(0) && string_like(1) => {
                (smaller(size(0), size(1)), None)
            }
            _ => (one, None),
        };
        if let Some(size) = result_size {
            self.computed.insert(e.id, size);
        }
        own.add(args_cost)
    }
}

/// Comparing two values traverses the smaller one.
fn smaller(a: Range, b: Range) -> Range {
    let s = a.max.min(b.max);
    Range {
        min: u64::from(s > 0),
        max: s,
    }
    .factor(STRING_FACTOR)
}

/// `getCostErrorMessage`.
pub(crate) fn exceeds_budget(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::checker;
    use serde_json::json;

    /// The estimated cost of `rule` on a node of `schema`, as kube-apiserver estimates it.
    fn estimated(rule: &str, schema: Value) -> u64 {
        let decl = Decl::of_schema(&schema, "selfType0", false).unwrap();
        let env = crate::cel::library::env();
        let program = env.compile(rule).unwrap();
        let vars = [("self", decl.cel_type()), ("oldSelf", decl.cel_type())];
        let checked = checker::check(&program, &vars).unwrap();
        estimate(&program, &checked, &DeclSizes(&decl)).max
    }

    /// What `rule` costs as it runs on `value` (a node of `schema`), and what was estimated
    /// for the same value beforehand.
    fn charged(rule: &str, schema: Value, value: Value) -> (u64, u64) {
        let decl = Decl::of_schema(&schema, "selfType0", false).unwrap();
        let env = crate::cel::library::env();
        let program = env.compile(rule).unwrap();
        let vars = [("self", decl.cel_type()), ("oldSelf", decl.cel_type())];
        let checked = checker::check(&program, &vars).unwrap();
        let sizes = ValueSizes {
            decl: &decl,
            new: &value,
            old: None,
        };
        let mut context = Context::with_env(env.clone());
        context
            .add_variable_from_value("self", crate::cel::convert::to_cel(&value, &schema, false));
        assert!(
            matches!(program.execute(&context), Ok(CelValue::Bool(_))),
            "{rule} runs"
        );
        (
            actual(&program, &checked, &sizes, &context, u64::MAX).max,
            estimate(&program, &checked, &sizes).max,
        )
    }

    /// Charged as it runs: a branch not taken and an operand short-circuited cost nothing,
    /// and `exists` stops at the first match.
    #[test]
    fn only_what_evaluates_is_charged() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "items": {"type": "array", "items": {"type": "string"}},
        }});
        let items: Vec<Value> = (0..1000).map(|i| json!(format!("item-{i:04}"))).collect();
        let value = json!({"items": items});
        let nested = "self.items.all(a, self.items.all(b, a.size() + b.size() > 0))";
        // The expensive branch is not taken: the condition is all that is charged.
        let (actual, estimated) = charged(
            &format!("!has(self.spec) ? true : {nested}"),
            schema.clone(),
            value.clone(),
        );
        assert!(actual < 10, "{actual}");
        assert!(estimated > CALL_LIMIT, "{estimated}");
        // A short-circuited operand costs nothing; an evaluated one does.
        let (short, _) = charged(
            &format!("has(self.spec) && {nested}"),
            schema.clone(),
            value.clone(),
        );
        assert!(short < 10, "{short}");
        let (taken, _) = charged(
            &format!("!has(self.spec) && {nested}"),
            schema.clone(),
            value.clone(),
        );
        assert!(taken > CALL_LIMIT, "{taken}");
        // `exists` stops at the first match: one iteration, not a thousand.
        let (first, _) = charged(
            "self.items.exists(x, x == 'item-0000')",
            schema.clone(),
            value.clone(),
        );
        let (last, _) = charged("self.items.exists(x, x == 'item-0999')", schema, value);
        assert!(first < 20 && last > 1000 * 3, "{first} {last}");
    }

    /// The values apiextensions-apiserver's own cost tests expect.
    #[test]
    fn estimates_match_kube_apiservers() {
        let list = |items: Value| json!({"type": "array", "items": items});
        assert_eq!(
            estimated("self.all(x, true)", list(json!({"type": "number"}))),
            4718591
        );
        assert_eq!(
            estimated("self.all(x, true)", list(json!({"type": "string"}))),
            3145727
        );
        assert_eq!(
            estimated("self.all(x, x == 0.0)", list(json!({"type": "number"}))),
            6291454
        );
        assert_eq!(
            estimated("self.matches('x')", json!({"type": "string"})),
            314574
        );
        assert_eq!(
            estimated(
                "size(self + 'hello') > size('hello')",
                json!({"type": "string"})
            ),
            314578
        );
        let bounded = json!({"type": "array", "maxItems": 10,
            "items": {"type": "string", "maxLength": 20}});
        assert_eq!(
            estimated("self.all(x, x.matches('^[a-z]+$'))", bounded),
            222
        );
        let numbers = json!({"type": "array", "maxItems": 10, "items": {"type": "integer"}});
        assert_eq!(estimated("self.all(x, self.all(y, true))", numbers), 352);
    }
}
