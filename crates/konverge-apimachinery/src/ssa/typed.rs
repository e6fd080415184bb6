//! Operations on objects typed by a [`Shape`] (structured-merge-diff's `typed` package): the
//! field set of an object, merging an apply configuration into a live object, comparing two
//! objects (added, modified and removed fields) and removing a set of fields.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map, Value};

use super::fieldpath::{FieldSet, Path, PathElement, values_equal};
use super::shape::{Atom, ListType, ListView, MapView, Shape};

/// Errors found while walking a value, each `path: message` as structured-merge-diff words
/// them.
pub(crate) type Errors = Vec<String>;

fn err_at(path: &[PathElement], msg: String) -> String {
    format!("{}: {msg}", Path(path.to_vec()))
}

/// The path element identifying a list item (structured-merge-diff's
/// `listItemToPathElement`).
pub(crate) fn list_item_pe(list: &ListView<'_>, item: &Value) -> Result<PathElement, String> {
    match list.list_type {
        ListType::Atomic => Err("invalid indexing of non-associative list".to_string()),
        ListType::Map(keys) if !keys.is_empty() => {
            let map = match item {
                Value::Null => {
                    return Err("associative list with keys may not have a null element".into());
                }
                Value::Object(m) => m,
                _ => {
                    return Err("associative list with keys may not have non-map elements".into());
                }
            };
            let mut fields = Vec::with_capacity(keys.len());
            for key in keys {
                if let Some(v) = map.get(key) {
                    fields.push((key.clone(), v.clone()));
                } else if let Some(d) = list.key_defaults.and_then(|d| d.get(key)) {
                    fields.push((key.clone(), d.clone()));
                } else {
                    return Err(format!(
                        "associative list with keys has an element that omits key field {} \
                         (and doesn't have default value)",
                        crate::gofmt::quote(key)
                    ));
                }
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(PathElement::Key(fields))
        }
        _ => match item {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => {
                Err("associative list without keys has an element that's a list type".into())
            }
            v => Ok(PathElement::Value(v.clone())),
        },
    }
}

/// The set of fields `value` sets (structured-merge-diff's `ToFieldSet`). With
/// `allow_duplicates` false, list items with the same key are an error (as for apply
/// configurations).
pub(crate) fn to_field_set(
    shape: &Shape,
    value: &Value,
    allow_duplicates: bool,
) -> Result<FieldSet, Errors> {
    let mut set = FieldSet::new();
    let mut errs = Vec::new();
    let mut path = Vec::new();
    walk_set(
        shape,
        value,
        &mut path,
        &mut set,
        &mut errs,
        allow_duplicates,
    );
    if errs.is_empty() { Ok(set) } else { Err(errs) }
}

fn walk_set(
    shape: &Shape,
    value: &Value,
    path: &mut Vec<PathElement>,
    set: &mut FieldSet,
    errs: &mut Errors,
    dups: bool,
) {
    let atom = shape.atom().deduce(Some(value));
    if let Some(m) = atom.map {
        if m.atomic {
            set.insert(path);
            return;
        }
        let Value::Object(obj) = value else { return };
        for (k, v) in obj {
            path.push(PathElement::Field(k.clone()));
            walk_set(m.child(k), v, path, set, errs, dups);
            let empty = matches!(v, Value::Null) || v.as_object().is_some_and(Map::is_empty);
            if empty || !m.is_field(k) {
                set.insert(path);
            }
            path.pop();
        }
    } else if atom.scalar {
        set.insert(path);
    } else if let Some(l) = atom.list {
        if *l.list_type == ListType::Atomic {
            set.insert(path);
            return;
        }
        let Value::Array(items) = value else { return };
        let mut seen = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            match list_item_pe(&l, item) {
                Ok(pe) => {
                    if !seen.insert(pe.clone()) && !dups {
                        errs.push(err_at(path, format!("duplicate entries for key {pe}")));
                        continue;
                    }
                    path.push(pe);
                    walk_set(l.element, item, path, set, errs, dups);
                    set.insert(path);
                    path.pop();
                }
                Err(e) => errs.push(err_at(path, format!("element {i}: {e}"))),
            }
        }
    } else {
        set.insert(path);
    }
}

fn as_map(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object)
}

fn as_list(v: Option<&Value>) -> Option<&Vec<Value>> {
    v.and_then(Value::as_array)
}

/// Merges `rhs` (an apply configuration) into `lhs` (structured-merge-diff's `Merge` with
/// "keep the right-hand side" leaves).
pub(crate) fn merge(shape: &Shape, lhs: Option<&Value>, rhs: Option<&Value>) -> Option<Value> {
    let atom = shape.atom();
    let (al, ar) = (atom.deduce(lhs), atom.deduce(rhs));
    let chosen = if rhs.is_none() { al } else { ar };
    let leaf = || rhs.or(lhs).cloned();
    if let Some(m) = chosen.map {
        let (lm, rm) = (as_map(lhs), as_map(rhs));
        if m.atomic || (lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty)) {
            return leaf();
        }
        let mut out = Map::new();
        let keys: BTreeSet<&String> = lm.iter().chain(rm.iter()).flat_map(|m| m.keys()).collect();
        for k in keys {
            let l = lm.and_then(|m| m.get(k));
            let r = rm.and_then(|m| m.get(k));
            if let Some(v) = merge(m.child(k), l, r) {
                out.insert(k.clone(), v);
            }
        }
        if out.is_empty() {
            None
        } else {
            Some(Value::Object(out))
        }
    } else if chosen.scalar {
        leaf()
    } else if let Some(l) = chosen.list {
        let (ll, rl) = (as_list(lhs), as_list(rhs));
        let empty = ll.is_none_or(Vec::is_empty) && rl.is_none_or(Vec::is_empty);
        if *l.list_type == ListType::Atomic || empty {
            return leaf();
        }
        let out = merge_list(
            &l,
            ll.map_or(&[][..], Vec::as_slice),
            rl.map_or(&[][..], Vec::as_slice),
        );
        if out.is_empty() {
            None
        } else {
            Some(Value::Array(out))
        }
    } else {
        leaf()
    }
}

struct Indexed<'a> {
    pes: Vec<PathElement>,
    observed: BTreeMap<PathElement, Option<&'a Value>>,
}

fn index_list<'a>(l: &ListView<'_>, items: &'a [Value]) -> Indexed<'a> {
    let mut out = Indexed {
        pes: Vec::new(),
        observed: BTreeMap::new(),
    };
    for item in items {
        let Ok(pe) = list_item_pe(l, item) else {
            continue;
        };
        if out.observed.contains_key(&pe) {
            out.observed.insert(pe.clone(), None);
        } else {
            out.observed.insert(pe.clone(), Some(item));
        }
        out.pes.push(pe);
    }
    out
}

fn merge_list(l: &ListView<'_>, lhs: &[Value], rhs: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    let r = index_list(l, rhs);
    let lx = index_list(l, lhs);
    let mut shared: VecDeque<&PathElement> = r
        .pes
        .iter()
        .filter(|pe| lx.observed.contains_key(pe))
        .collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs: BTreeSet<PathElement> = BTreeSet::new();
    let (llen, rlen) = (lx.pes.len(), r.pes.len());
    let (mut li, mut ri) = (0, 0);
    let lhs_item = |pe: &PathElement| lx.observed.get(pe).copied().flatten();
    let rhs_item = |pe: &PathElement| r.observed.get(pe).copied().flatten();
    let mut guard = 0usize;
    while li < llen || ri < rlen {
        guard += 1;
        if guard > 4 * (llen + rlen) + 4 {
            break;
        }
        if li < llen && ri < rlen {
            let pe = &lx.pes[li];
            if *pe == r.pes[ri] {
                merged_rhs.insert(pe.clone());
                if let Some(v) = merge(l.element, lhs_item(pe), rhs_item(pe)) {
                    out.push(v);
                }
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if r.observed.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < llen {
            let pe = &lx.pes[li];
            if !r.observed.contains_key(pe) {
                let item = lhs_pe_value(l, lhs, li);
                if let Some(v) = merge(l.element, item, None) {
                    out.push(v);
                }
                li += 1;
                continue;
            } else if merged_rhs.contains(pe) {
                li += 1;
            }
        }
        if ri < rlen {
            let pe = &r.pes[ri];
            merged_rhs.insert(pe.clone());
            if let Some(v) = merge(l.element, lhs_item(pe), rhs_item(pe)) {
                out.push(v);
            }
            ri += 1;
            if next_shared.is_some_and(|n| n == pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    out
}

/// The `i`-th indexable item of `items` (items whose key could not be computed are skipped
/// when indexing).
fn lhs_pe_value<'a>(l: &ListView<'_>, items: &'a [Value], i: usize) -> Option<&'a Value> {
    items
        .iter()
        .filter(|item| list_item_pe(l, item).is_ok())
        .nth(i)
}

/// What changed between two objects (structured-merge-diff's `Comparison`).
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    pub(crate) added: FieldSet,
    pub(crate) modified: FieldSet,
    pub(crate) removed: FieldSet,
}

/// Compares `lhs` (before) with `rhs` (after).
pub(crate) fn compare(shape: &Shape, lhs: &Value, rhs: &Value) -> Comparison {
    let mut c = Comparison::default();
    compare_walk(shape, Some(lhs), Some(rhs), &mut Vec::new(), &mut c);
    c
}

/// [`compare`] of the two objects as if neither had `metadata.managedFields` (what an update
/// compares), without copying them to take the list out: only `metadata` is copied, and only
/// when it holds the list.
pub(crate) fn compare_without_managed_fields(
    shape: &Shape,
    lhs: &Value,
    rhs: &Value,
) -> Comparison {
    let atom = shape.atom();
    let (al, ar) = (atom.deduce(Some(lhs)), atom.deduce(Some(rhs)));
    // `compare` walks two objects key by key unless the root is atomic (or not a map): only
    // then is the whole object a leaf whose equality the list would change; those rare
    // cases copy.
    let (Some(lm), Some(rm)) = (lhs.as_object(), rhs.as_object()) else {
        return compare(
            shape,
            &without_managed_fields(lhs),
            &without_managed_fields(rhs),
        );
    };
    let (Some(m), true) = (al.map, al.same(&ar) && al.map.is_some_and(|m| !m.atomic)) else {
        return compare(
            shape,
            &without_managed_fields(lhs),
            &without_managed_fields(rhs),
        );
    };
    if lm.is_empty() && rm.is_empty() {
        return Comparison::default();
    }
    let stripped = |v: Option<&Value>| -> Option<Value> {
        v.filter(|v| v.get("managedFields").is_some())
            .map(without_managed_fields_here)
    };
    let mut c = Comparison::default();
    let mut path = Vec::new();
    for_each_key(Some(lm), Some(rm), |k, l, r| {
        if k == "metadata" {
            let (sl, sr) = (stripped(l), stripped(r));
            compare_child(
                m,
                k,
                sl.as_ref().or(l),
                sr.as_ref().or(r),
                &mut path,
                &mut c,
            );
        } else {
            compare_child(m, k, l, r, &mut path, &mut c);
        }
    });
    c
}

/// `obj` without `metadata.managedFields`.
pub(crate) fn without_managed_fields(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(Value::Object(meta)) = out.get_mut("metadata") {
        meta.remove("managedFields");
    }
    out
}

/// `meta` (an object's `metadata`) without its `managedFields`.
fn without_managed_fields_here(meta: &Value) -> Value {
    match meta {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "managedFields")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Calls `f` once for every key of either map with its value on each side.
fn for_each_key<'a>(
    lm: Option<&'a Map<String, Value>>,
    rm: Option<&'a Map<String, Value>>,
    mut f: impl FnMut(&'a String, Option<&'a Value>, Option<&'a Value>),
) {
    for (k, l) in lm.into_iter().flatten() {
        f(k, Some(l), rm.and_then(|m| m.get(k)));
    }
    for (k, r) in rm.into_iter().flatten() {
        if lm.is_none_or(|m| !m.contains_key(k)) {
            f(k, None, Some(r));
        }
    }
}

/// Compares the values of field `k` of a map. Equal values have no added, modified or
/// removed fields, so they are not walked (nor is the path element built).
fn compare_child(
    m: MapView<'_>,
    k: &str,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
) {
    if let (Some(l), Some(r)) = (lhs, rhs)
        && l == r
    {
        return;
    }
    path.push(PathElement::Field(k.to_string()));
    compare_walk(m.child(k), lhs, rhs, path, c);
    path.pop();
}

fn compare_walk(
    shape: &Shape,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
) {
    let atom = shape.atom();
    let (al, ar) = (atom.deduce(lhs), atom.deduce(rhs));
    let mut in_leaf = false;
    if rhs.is_none() {
        compare_atom(al, lhs, rhs, path, c, &mut in_leaf);
    } else if lhs.is_none() || al.same(&ar) {
        compare_atom(ar, lhs, rhs, path, c, &mut in_leaf);
    } else {
        let mut other_leaf = false;
        compare_atom(al, lhs, rhs, path, c, &mut other_leaf);
        compare_atom(ar, lhs, rhs, path, c, &mut in_leaf);
    }
    if !in_leaf {
        if lhs.is_none() {
            c.added.insert(path);
        } else if rhs.is_none() {
            c.removed.insert(path);
        }
    }
}

fn compare_leaf(
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &[PathElement],
    c: &mut Comparison,
    in_leaf: &mut bool,
) {
    if *in_leaf {
        return;
    }
    *in_leaf = true;
    match (lhs, rhs) {
        (None, _) => c.added.insert(path),
        (_, None) => c.removed.insert(path),
        (Some(l), Some(r)) if !values_equal(l, r) => c.modified.insert(path),
        _ => {}
    }
}

fn compare_atom(
    atom: Atom<'_>,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
    in_leaf: &mut bool,
) {
    if let Some(m) = atom.map {
        compare_map(m, lhs, rhs, path, c, in_leaf);
    } else if atom.scalar {
        compare_leaf(lhs, rhs, path, c, in_leaf);
    } else if let Some(l) = atom.list {
        compare_list(l, lhs, rhs, path, c, in_leaf);
    } else {
        compare_leaf(lhs, rhs, path, c, in_leaf);
    }
}

fn compare_map(
    m: MapView<'_>,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
    in_leaf: &mut bool,
) {
    let (lm, rm) = (as_map(lhs), as_map(rhs));
    if m.atomic || (lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty)) {
        compare_leaf(lhs, rhs, path, c, in_leaf);
        return;
    }
    for_each_key(lm, rm, |k, l, r| compare_child(m, k, l, r, path, c));
}

fn compare_list(
    l: ListView<'_>,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
    in_leaf: &mut bool,
) {
    let (ll, rl) = (as_list(lhs), as_list(rhs));
    let empty = ll.is_none_or(Vec::is_empty) && rl.is_none_or(Vec::is_empty);
    if *l.list_type == ListType::Atomic || empty {
        compare_leaf(lhs, rhs, path, c, in_leaf);
        return;
    }
    let mut order: Vec<PathElement> = Vec::new();
    let mut lvals: BTreeMap<PathElement, Vec<&Value>> = BTreeMap::new();
    let mut rvals: BTreeMap<PathElement, Vec<&Value>> = BTreeMap::new();
    for item in ll.into_iter().flatten() {
        if let Ok(pe) = list_item_pe(&l, item) {
            let e = lvals.entry(pe.clone()).or_default();
            if e.is_empty() {
                order.push(pe);
            }
            e.push(item);
        }
    }
    for item in rl.into_iter().flatten() {
        if let Ok(pe) = list_item_pe(&l, item) {
            let e = rvals.entry(pe.clone()).or_default();
            if e.is_empty() && !lvals.contains_key(&pe) {
                order.push(pe.clone());
            }
            e.push(item);
        }
    }
    for pe in order {
        let lv = lvals.get(&pe).cloned().unwrap_or_default();
        let rv = rvals.get(&pe).cloned().unwrap_or_default();
        if let ([l], [r]) = (lv.as_slice(), rv.as_slice())
            && l == r
        {
            continue;
        }
        path.push(pe);
        if lv.len() <= 1 && rv.len() <= 1 {
            compare_walk(l.element, lv.first().copied(), rv.first().copied(), path, c);
        } else if lv.len() >= 2 && rv.len() >= 2 {
            let equal = lv.len() == rv.len() && lv.iter().zip(&rv).all(|(a, b)| values_equal(a, b));
            if !equal {
                c.modified.insert(path);
            }
        } else if lv.len() >= 2 {
            if let Some(r) = rv.first() {
                compare_walk(l.element, None, Some(r), path, c);
            }
            c.removed.insert(path);
        } else {
            if let Some(lf) = lv.first() {
                compare_walk(l.element, Some(lf), None, path, c);
            }
            c.added.insert(path);
        }
        path.pop();
    }
}

/// `set` with every named struct field that has owned children also a member (structured-
/// merge-diff's `EnsureNamedFieldsAreMembers`).
pub(crate) fn ensure_named_fields_are_members(set: &FieldSet, shape: &Shape) -> FieldSet {
    let atom = shape.atom();
    let mut out = FieldSet::new();
    for pe in set.members() {
        out.add_member(pe.clone());
    }
    for (pe, child) in set.children() {
        let child_shape = match pe {
            PathElement::Field(name) => match atom.map {
                Some(m) => {
                    if m.is_field(name) {
                        out.add_member(pe.clone());
                    }
                    m.child(name)
                }
                None => Shape::deduced_ref(),
            },
            PathElement::Key(_) => atom.list.map_or(Shape::deduced_ref(), |l| l.element),
            _ => Shape::deduced_ref(),
        };
        out.set_child(
            pe.clone(),
            ensure_named_fields_are_members(child, child_shape),
        );
    }
    out
}

/// `value` without the fields in `to_remove` (structured-merge-diff's `RemoveItems`). A
/// map or list left empty is dropped from its parent (where structured-merge-diff leaves a
/// `null` that Kubernetes' decoding then drops).
pub(crate) fn remove_items(shape: &Shape, value: &Value, to_remove: &FieldSet) -> Option<Value> {
    let atom = shape.atom().deduce(Some(value));
    if let Some(m) = atom.map {
        let Value::Object(obj) = value else {
            return Some(value.clone());
        };
        if obj.is_empty() || m.atomic {
            return None;
        }
        let mut out = Map::new();
        for (k, v) in obj {
            let pe = PathElement::Field(k.clone());
            if to_remove.has(std::slice::from_ref(&pe)) {
                continue;
            }
            match to_remove.with_prefix(&pe) {
                Some(sub) => {
                    if let Some(v) = remove_items(m.child(k), v, sub) {
                        out.insert(k.clone(), v);
                    }
                }
                None => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        if out.is_empty() {
            None
        } else {
            Some(Value::Object(out))
        }
    } else if atom.scalar {
        Some(value.clone())
    } else if let Some(l) = atom.list {
        let Value::Array(items) = value else {
            return Some(value.clone());
        };
        if items.is_empty() || *l.list_type == ListType::Atomic {
            return None;
        }
        let mut out = Vec::new();
        for item in items {
            let Ok(pe) = list_item_pe(&l, item) else {
                out.push(item.clone());
                continue;
            };
            if to_remove.has(std::slice::from_ref(&pe)) {
                continue;
            }
            match to_remove.with_prefix(&pe) {
                Some(sub) => {
                    if let Some(v) = remove_items(l.element, item, sub) {
                        out.push(v);
                    }
                }
                None => out.push(item.clone()),
            }
        }
        if out.is_empty() {
            None
        } else {
            Some(Value::Array(out))
        }
    } else {
        Some(value.clone())
    }
}
