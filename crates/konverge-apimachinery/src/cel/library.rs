//! The CEL environment rules are compiled and evaluated in: the standard library, the strings
//! extension (`lowerAscii`, `upperAscii`, `trim`, `split`, `replace`, `indexOf`, ...), and the
//! cheap parts of Kubernetes' own libraries: the list functions `isSorted`, `sum`, `min`, `max`,
//! `indexOf` and `lastIndexOf`, `sets.contains`, `sets.equivalent`, `sets.intersects`, and
//! the authorization library's functions (see `authz`).

use std::cmp::Ordering;
use std::sync::{Arc, LazyLock};

use cel::common::types::{ANY_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError, Value};

/// The shared environment, built once.
pub(crate) fn env() -> Arc<Env> {
    static ENV: LazyLock<Option<Arc<Env>>> = LazyLock::new(|| build().ok().map(Arc::new));
    ENV.clone().unwrap_or_else(|| Arc::new(Env::stdlib()))
}

fn build() -> Result<Env, cel::DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    env.add_member_overload("isSorted", "list.isSorted()", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list.sum()", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list.min()", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list.max()", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list.indexOf(dyn)",
        LIST_TYPE,
        vec![ANY_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list.lastIndexOf(dyn)",
        LIST_TYPE,
        vec![ANY_TYPE],
        last_index_of,
    )?;
    env.add_overload(
        "sets.contains",
        "sets.contains(list,list)",
        vec![LIST_TYPE, LIST_TYPE],
        sets_contains,
    )?;
    env.add_overload(
        "sets.equivalent",
        "sets.equivalent(list,list)",
        vec![LIST_TYPE, LIST_TYPE],
        sets_equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "sets.intersects(list,list)",
        vec![LIST_TYPE, LIST_TYPE],
        sets_intersects,
    )?;
    super::authz::register(&mut env)?;
    Ok(env)
}

/// The list (or other value) an argument holds, as a plain [`Value`].
fn value(arg: Option<&CowVal<'_, '_>>) -> Result<Value, ExecutionError> {
    let arg = arg.ok_or_else(ExecutionError::missing_argument_or_target)?;
    Value::try_from(arg.as_ref())
}

fn list(arg: Option<&CowVal<'_, '_>>, function: &str) -> Result<Arc<Vec<Value>>, ExecutionError> {
    match value(arg)? {
        Value::List(items) => Ok(items),
        other => Err(ExecutionError::no_such_overload(
            function,
            vec![other.type_of().to_string()],
        )),
    }
}

fn owned<'b, 'v>(value: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let val: Box<dyn Val> = value.try_into()?;
    Ok(CowVal::Owned(val))
}

/// Orders two values of one comparable kind, or fails as CEL does.
fn compare(a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    a.partial_cmp(b)
        .ok_or_else(|| ExecutionError::ValuesNotComparable(a.clone(), b.clone()))
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = list(args.first(), "isSorted")?;
    for pair in items.windows(2) {
        if compare(&pair[0], &pair[1])? == Ordering::Greater {
            return owned(Value::Bool(false));
        }
    }
    owned(Value::Bool(true))
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = list(args.first(), "sum")?;
    let mut total = match items.first() {
        Some(Value::Float(_)) => Value::Float(0.0),
        Some(Value::UInt(_)) => Value::UInt(0),
        _ => Value::Int(0),
    };
    for item in items.iter() {
        total = match (&total, item) {
            (Value::Int(a), Value::Int(b)) => Value::Int(
                a.checked_add(*b)
                    .ok_or_else(|| ExecutionError::Overflow("+", total.clone(), item.clone()))?,
            ),
            (Value::UInt(a), Value::UInt(b)) => Value::UInt(
                a.checked_add(*b)
                    .ok_or_else(|| ExecutionError::Overflow("+", total.clone(), item.clone()))?,
            ),
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            _ => {
                return Err(ExecutionError::no_such_overload(
                    "sum",
                    vec![item.type_of().to_string()],
                ));
            }
        };
    }
    owned(total)
}

fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    keep: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = list(args.first(), function)?;
    let mut best: Option<&Value> = None;
    for item in items.iter() {
        best = match best {
            Some(current) if compare(item, current)? != keep => Some(current),
            _ => Some(item),
        };
    }
    match best {
        Some(best) => owned(best.clone()),
        None => Err(ExecutionError::function_error(
            function,
            format!("{function} called on empty list"),
        )),
    }
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "min", Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "max", Ordering::Greater)
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = list(args.first(), "indexOf")?;
    let needle = value(args.get(1))?;
    let found = items.iter().position(|item| *item == needle);
    owned(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = list(args.first(), "lastIndexOf")?;
    let needle = value(args.get(1))?;
    let found = items.iter().rposition(|item| *item == needle);
    owned(Value::Int(found.map_or(-1, |i| i as i64)))
}

/// A list's items.
type Items = Arc<Vec<Value>>;

fn two_lists(args: &[CowVal<'_, '_>], function: &str) -> Result<(Items, Items), ExecutionError> {
    Ok((list(args.first(), function)?, list(args.get(1), function)?))
}

fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args, "sets.contains")?;
    owned(Value::Bool(b.iter().all(|x| a.contains(x))))
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args, "sets.equivalent")?;
    owned(Value::Bool(
        b.iter().all(|x| a.contains(x)) && a.iter().all(|x| b.contains(x)),
    ))
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args, "sets.intersects")?;
    owned(Value::Bool(b.iter().any(|x| a.contains(x))))
}
