//! What CEL's type checker would tell about an expression, as far as an untyped AST shows it:
//! references to undeclared variables, whether `oldSelf` is used, how deeply comprehensions
//! nest (for the cost guard), and whether the result can be a `bool` (or a `string` for a
//! `messageExpression`). Errors are worded as cel-go words its issues.

use cel::Program;
use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

/// Identifiers that are declared without being variables: type names and namespaces.
const DECLARED: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "duration",
    "timestamp",
    "optional",
    "sets",
    "strings",
    "math",
    "lists",
    "dyn",
    "cel",
];

/// Functions whose result is never a `bool`.
const NOT_BOOL: &[&str] = &[
    "_+_",
    "_-_",
    "_*_",
    "_/_",
    "_%_",
    "-_",
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "duration",
    "timestamp",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "join",
    "indexOf",
    "lastIndexOf",
    "charAt",
    "sum",
    "min",
    "max",
    "format",
    "reverse",
];

/// Functions whose result is never a `string`.
const NOT_STRING: &[&str] = &[
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "_&&_",
    "_||_",
    "!_",
    "@in",
    "_-_",
    "_*_",
    "_/_",
    "_%_",
    "-_",
    "size",
    "int",
    "uint",
    "double",
    "bytes",
    "duration",
    "timestamp",
    "matches",
    "startsWith",
    "endsWith",
    "contains",
    "has",
    "isSorted",
    "split",
];

/// What the walk found.
#[derive(Default)]
pub(crate) struct Analysis {
    /// The expression reads `oldSelf`.
    pub(crate) uses_old_self: bool,
    /// Undeclared identifiers, with their byte offset in the source.
    pub(crate) undeclared: Vec<(String, usize)>,
    /// The deepest nesting of comprehensions (macros such as `all`, `map`).
    pub(crate) depth: u32,
}

/// Walks `program`'s AST.
pub(crate) fn analyze(program: &Program) -> Analysis {
    let mut analysis = Analysis::default();
    let mut scope = Vec::new();
    analysis.depth = walk(program, program.expression(), &mut scope, &mut analysis);
    analysis
}

fn walk(program: &Program, e: &IdedExpr, scope: &mut Vec<String>, out: &mut Analysis) -> u32 {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => 0,
        Expr::Ident(name) => {
            if scope.iter().any(|s| s == name)
                || name == "self"
                || DECLARED.contains(&name.as_str())
            {
                return 0;
            }
            if name == "oldSelf" {
                out.uses_old_self = true;
                return 0;
            }
            let offset = program
                .source_info()
                .offset_for(e.id)
                .map_or(0, |(start, _)| start as usize);
            out.undeclared.push((name.clone(), offset));
            0
        }
        Expr::Select(select) => walk(program, &select.operand, scope, out),
        Expr::Call(call) => {
            let mut depth = 0;
            if let Some(target) = &call.target {
                depth = walk(program, target, scope, out);
            }
            for arg in &call.args {
                depth = depth.max(walk(program, arg, scope, out));
            }
            depth
        }
        Expr::List(list) => list
            .elements
            .iter()
            .map(|item| walk(program, item, scope, out))
            .max()
            .unwrap_or(0),
        Expr::Map(map) => entries(program, &map.entries, scope, out),
        Expr::Struct(s) => entries(program, &s.entries, scope, out),
        Expr::Comprehension(c) => {
            let outer = walk(program, &c.iter_range, scope, out).max(walk(
                program,
                &c.accu_init,
                scope,
                out,
            ));
            let pushed = 2 + usize::from(c.iter_var2.is_some());
            scope.push(c.iter_var.clone());
            scope.push(c.accu_var.clone());
            if let Some(v) = &c.iter_var2 {
                scope.push(v.clone());
            }
            let inner = walk(program, &c.loop_cond, scope, out)
                .max(walk(program, &c.loop_step, scope, out))
                .max(walk(program, &c.result, scope, out));
            scope.truncate(scope.len().saturating_sub(pushed));
            outer.max(inner.saturating_add(1))
        }
    }
}

fn entries(
    program: &Program,
    entries: &[cel::common::ast::IdedEntryExpr],
    scope: &mut Vec<String>,
    out: &mut Analysis,
) -> u32 {
    let mut depth = 0;
    for entry in entries {
        match &entry.expr {
            EntryExpr::StructField(f) => depth = depth.max(walk(program, &f.value, scope, out)),
            EntryExpr::MapEntry(m) => {
                depth = depth
                    .max(walk(program, &m.key, scope, out))
                    .max(walk(program, &m.value, scope, out));
            }
        }
    }
    depth
}

/// Whether the expression's result is certainly not a `bool`.
pub(crate) fn surely_not_bool(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Literal(l) => !matches!(l, LiteralValue::Boolean(_)),
        Expr::List(_) | Expr::Map(_) | Expr::Struct(_) => true,
        Expr::Call(call) => NOT_BOOL.contains(&call.func_name.as_str()),
        Expr::Comprehension(c) => matches!(c.accu_init.expr, Expr::List(_)),
        _ => false,
    }
}

/// Whether the expression's result is certainly not a `string`.
pub(crate) fn surely_not_string(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Literal(l) => !matches!(l, LiteralValue::String(_)),
        Expr::List(_) | Expr::Map(_) | Expr::Struct(_) | Expr::Comprehension(_) => true,
        Expr::Select(s) => s.test,
        Expr::Call(call) => NOT_STRING.contains(&call.func_name.as_str()),
        _ => false,
    }
}

/// cel-go's rendering of one issue: `ERROR: <input>:L:C: message` and the source line with a
/// caret under the column.
pub(crate) fn issue(source: &str, offset: usize, message: &str) -> String {
    let mut line_no = 1;
    let mut line_start = 0;
    for (i, c) in source.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line_no += 1;
            line_start = i + 1;
        }
    }
    let line = source[line_start..].lines().next().unwrap_or("");
    let column = source
        .get(line_start..offset.max(line_start))
        .map_or(0, |s| s.chars().count());
    let mut out = format!("ERROR: <input>:{line_no}:{}: {message}", column + 1);
    out.push_str("\n | ");
    out.push_str(line);
    out.push_str("\n | ");
    out.push_str(&".".repeat(column));
    out.push('^');
    out
}

/// A parse failure of the cel crate worded as cel-go words it (` | ` before source lines).
pub(crate) fn parse_errors(errors: &cel::ParseErrors) -> String {
    errors.to_string().replace("\n| ", "\n | ")
}
