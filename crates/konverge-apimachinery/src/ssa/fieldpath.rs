//! Field paths and field sets: structured-merge-diff's `fieldpath` package. A [`FieldSet`] is
//! the set of paths a manager owns, encoded on the wire as `FieldsV1` (`f:name`,
//! `k:{"name":"x"}`, `v:"value"`, `i:0`, and `.` for "this node itself").

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Number, Value};

use super::ApplyError;

/// One step of a path: a struct or map field, a map-list item by its keys, a set item by its
/// value, or a list item by its index.
#[derive(Debug, Clone)]
pub enum PathElement {
    /// A field of an object (`f:name`, printed `.name`).
    Field(String),
    /// A map-list item, by its key fields sorted by name (`k:{...}`, printed `[name="x"]`).
    Key(Vec<(String, Value)>),
    /// A set item, by its value (`v:...`, printed `[=value]`).
    Value(Value),
    /// A list item by index (`i:0`, printed `[0]`).
    Index(i64),
}

impl PathElement {
    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The `FieldsV1` key of this element (`f:name`, `k:{"name":"x"}`, `v:1`, `i:0`).
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut out = String::from("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    go_json_string(&mut out, name);
                    out.push(':');
                    go_json(&mut out, value);
                }
                out.push('}');
                out
            }
            PathElement::Value(value) => {
                let mut out = String::from("v:");
                go_json(&mut out, value);
                out
            }
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key. `Ok(None)` for an unknown element type (skipped, as Kubernetes
    /// skips them).
    pub fn from_fields_v1_key(key: &str) -> Result<Option<PathElement>, String> {
        let bytes = key.as_bytes();
        if bytes.len() < 2 {
            return Err("key must be 2 characters long:".to_string());
        }
        if bytes[1] != b':' {
            return Err(format!("missing colon: {key}"));
        }
        let rest = &key[2..];
        match bytes[0] {
            b'f' => Ok(Some(PathElement::Field(rest.to_string()))),
            b'v' => serde_json::from_str::<Value>(rest)
                .map(|v| Some(PathElement::Value(v)))
                .map_err(|e| e.to_string()),
            b'k' => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(map)) => {
                    let fields = map.into_iter().collect();
                    Ok(Some(PathElement::Key(fields)))
                }
                Ok(_) => Err("ReadObjectCB: expect { or n".to_string()),
                Err(e) => Err(e.to_string()),
            },
            b'i' => rest
                .parse::<i64>()
                .map(|i| Some(PathElement::Index(i)))
                .map_err(|_| format!("strconv.Atoi: parsing {}: invalid syntax", quote(rest))),
            _ => Ok(None),
        }
    }
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for i in 0.. {
                    match (a.get(i), b.get(i)) {
                        (None, None) => return Ordering::Equal,
                        (None, Some(_)) => return Ordering::Less,
                        (Some(_), None) => return Ordering::Greater,
                        (Some((an, av)), Some((bn, bv))) => {
                            let c = an.cmp(bn).then_with(|| compare_values(av, bv));
                            if c != Ordering::Equal {
                                return c;
                            }
                        }
                    }
                }
                Ordering::Equal
            }
            (PathElement::Value(a), PathElement::Value(b)) => compare_values(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", value_to_string(v)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={}]", value_to_string(v)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the root of an object, printed as Kubernetes prints it
/// (`.spec.containers[name="nginx"].image`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Path(pub Vec<PathElement>);

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pe in &self.0 {
            write!(f, "{pe}")?;
        }
        Ok(())
    }
}

/// A set of field paths (structured-merge-diff's `fieldpath.Set`): the paths that are
/// members, and the sets below each element that has children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Whether the set has no paths.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds a path (the empty path, the root, is never a member).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => match self.children.get_mut(first) {
                // Looked up before inserting: a path mostly extends a child that exists, and
                // cloning the element for every level of every insert dominated building sets.
                Some(child) => child.insert(rest),
                None => {
                    let mut child = FieldSet::new();
                    child.insert(rest);
                    self.children.insert(first.clone(), child);
                }
            },
        }
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// The set below `pe` (empty when there is none).
    pub fn with_prefix(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe).filter(|c| !c.is_empty())
    }

    /// The paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, set) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(set),
                None => set.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, set) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let i = set.intersection(theirs);
                if !i.is_empty() {
                    children.insert(pe.clone(), i);
                }
            }
        }
        FieldSet { members, children }
    }

    /// The paths of this set that are not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, set) in &self.children {
            let d = match other.children.get(pe) {
                Some(theirs) => set.difference(theirs),
                None => set.clone(),
            };
            if !d.is_empty() {
                children.insert(pe.clone(), d);
            }
        }
        FieldSet { members, children }
    }

    /// Removes the paths of `other` in place: afterwards the set equals
    /// `self.difference(other)` (children left empty are dropped, as there), but only the
    /// parts `other` reaches are visited and nothing is cloned.
    pub fn subtract(&mut self, other: &FieldSet) {
        if !other.members.is_empty() {
            if other.members.len() < self.members.len() {
                for pe in &other.members {
                    self.members.remove(pe);
                }
            } else {
                self.members.retain(|pe| !other.members.contains(pe));
            }
        }
        for (pe, theirs) in &other.children {
            if let Some(mine) = self.children.get_mut(pe) {
                mine.subtract(theirs);
            }
        }
        self.children.retain(|_, child| !child.is_empty());
    }

    /// Adds the paths of `other` in place: afterwards the set equals `self.union(&other)`.
    pub fn union_with(&mut self, other: FieldSet) {
        if self.members.is_empty() && self.children.is_empty() {
            *self = other;
            return;
        }
        self.members.extend(other.members);
        for (pe, theirs) in other.children {
            match self.children.entry(pe) {
                std::collections::btree_map::Entry::Occupied(mut mine) => {
                    mine.get_mut().union_with(theirs);
                }
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert(theirs);
                }
            }
        }
    }

    /// The paths of this set that neither are in `other` nor lie below one of its members
    /// (structured-merge-diff's `RecursiveDifference`, used to ignore whole subtrees).
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, set) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let d = match other.children.get(pe) {
                Some(theirs) => set.recursive_difference(theirs),
                None => set.clone(),
            };
            if !d.is_empty() {
                children.insert(pe.clone(), d);
            }
        }
        FieldSet { members, children }
    }

    /// Every path, in Kubernetes' order (a node's members, then its children's paths).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for pe in &self.members {
            let mut p = prefix.clone();
            p.push(pe.clone());
            out.push(Path(p));
        }
        for (pe, set) in &self.children {
            prefix.push(pe.clone());
            set.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    pub(crate) fn members(&self) -> &BTreeSet<PathElement> {
        &self.members
    }

    pub(crate) fn children(&self) -> &BTreeMap<PathElement, FieldSet> {
        &self.children
    }

    pub(crate) fn add_member(&mut self, pe: PathElement) {
        self.members.insert(pe);
    }

    pub(crate) fn set_child(&mut self, pe: PathElement, set: FieldSet) {
        if set.is_empty() {
            self.children.remove(&pe);
        } else {
            self.children.insert(pe, set);
        }
    }

    /// Decodes `FieldsV1` (the `fieldsV1` of a managed fields entry). Errors are worded as
    /// Kubernetes words them (without the byte-offset context of its JSON reader).
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, ApplyError> {
        match read_v1(value) {
            Ok((set, _)) => Ok(set.unwrap_or_default()),
            Err(e) => Err(ApplyError::Invalid(e)),
        }
    }

    /// Encodes the set as `FieldsV1` JSON text, byte for byte as Kubernetes does (`.` first,
    /// then fields, keys, values and indices in structured-merge-diff's order).
    pub fn to_fields_v1_json(&self) -> String {
        let mut out = String::from("{");
        self.emit(false, &mut out);
        out.push('}');
        out
    }

    /// Encodes the set as a `FieldsV1` JSON value (the same content as
    /// [`FieldSet::to_fields_v1_json`]; object keys in `serde_json`'s order).
    pub fn to_fields_v1(&self) -> Value {
        // Built directly rather than by parsing `to_fields_v1_json`: the same keys in the same
        // order (a later duplicate key replaces an earlier one, as in parsing), without
        // writing and re-reading the text on every write.
        Value::Object(self.emit_value(false))
    }

    fn emit_value(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self && !(self.members.is_empty() && self.children.is_empty()) {
            out.insert(".".to_string(), Value::Object(Map::new()));
        }
        for pe in self.keys() {
            let value = match self.children.get(pe) {
                Some(child) => child.emit_value(self.members.contains(pe)),
                None => Map::new(),
            };
            out.insert(pe.to_fields_v1_key(), Value::Object(value));
        }
        out
    }

    /// The members and the elements with children, in order, each once.
    fn keys(&self) -> impl Iterator<Item = &PathElement> {
        let mut members = self.members.iter().peekable();
        let mut children = self.children.keys().peekable();
        std::iter::from_fn(move || match (members.peek(), children.peek()) {
            (Some(m), Some(c)) => match m.cmp(c) {
                Ordering::Less => members.next(),
                Ordering::Greater => children.next(),
                Ordering::Equal => {
                    children.next();
                    members.next()
                }
            },
            (Some(_), None) => members.next(),
            (None, _) => children.next(),
        })
    }

    fn emit(&self, include_self: bool, out: &mut String) {
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !std::mem::take(&mut first) {
                out.push(',');
            }
        };
        if include_self && !(self.members.is_empty() && self.children.is_empty()) {
            sep(out);
            out.push_str("\".\":{}");
        }
        for pe in self.keys() {
            sep(out);
            go_json_string(out, &pe.to_fields_v1_key());
            out.push(':');
            match self.children.get(pe) {
                Some(child) => {
                    out.push('{');
                    child.emit(self.members.contains(pe), out);
                    out.push('}');
                }
                None => out.push_str("{}"),
            }
        }
    }
}

type Read = (Option<FieldSet>, bool);

fn read_v1(value: &Value) -> Result<Read, String> {
    let map = match value {
        Value::Null => return Ok((None, true)),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "ReadMapCB: expect {{ or n, but found {}",
                other.to_string().chars().next().unwrap_or(' ')
            ));
        }
    };
    let mut children: Option<FieldSet> = None;
    let mut is_member = false;
    for (key, child) in map {
        if key == "." {
            is_member = true;
            continue;
        }
        let pe = match PathElement::from_fields_v1_key(key) {
            Ok(Some(pe)) => pe,
            Ok(None) => continue,
            Err(e) => return Err(format!("parsing key as path element: {e}")),
        };
        let (grandchildren, child_is_member) = read_v1(child)?;
        if child_is_member {
            children
                .get_or_insert_with(FieldSet::new)
                .add_member(pe.clone());
        }
        if let Some(g) = grandchildren {
            let c = children.get_or_insert_with(FieldSet::new);
            let merged = match c.children.get(&pe) {
                Some(existing) => existing.union(&g),
                None => g,
            };
            c.children.insert(pe, merged);
        }
    }
    if children.is_none() {
        is_member = true;
    }
    Ok((children, is_member))
}

/// structured-merge-diff's total order over values: numbers < strings < booleans < lists <
/// maps < null.
pub(crate) fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                let c = compare_values(l, r);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.is_empty() && y.is_empty() {
                return Ordering::Equal;
            }
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for (i, k) in keys.into_iter().enumerate() {
                let c = if i == x.len() {
                    Ordering::Less
                } else if i == y.len() {
                    Ordering::Greater
                } else {
                    match (x.get(k), y.get(k)) {
                        (None, _) => Ordering::Greater,
                        (_, None) => Ordering::Less,
                        (Some(l), Some(r)) => compare_values(l, r),
                    }
                };
                if c != Ordering::Equal {
                    return c;
                }
            }
            Ordering::Equal
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

fn compare_numbers(a: &Number, b: &Number) -> Ordering {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => {
            let x = a.as_f64().unwrap_or(0.0);
            let y = b.as_f64().unwrap_or(0.0);
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
    }
}

/// Value equality as structured-merge-diff sees it (numbers compare numerically).
pub(crate) fn values_equal(a: &Value, b: &Value) -> bool {
    compare_values(a, b) == Ordering::Equal
}

/// structured-merge-diff's `value.ToString` (used in printed paths).
fn value_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float_v(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(value_to_string).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", value_to_string(v)))
            .collect(),
    }
}

fn quote(s: &str) -> String {
    crate::gofmt::quote(s)
}

/// Go's `%v` of a float64.
fn go_float_v(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    let sci = format!("{f:e}");
    let (mantissa, exponent) = match sci.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i32>().unwrap_or(0)),
        None => return sci,
    };
    if !(-4..21).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        format!("{f}")
    }
}

/// Go's `encoding/json` rendering of a value (HTML-safe escapes, sorted keys).
fn go_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => go_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(out, k);
                out.push(':');
                go_json(out, item);
            }
            out.push('}');
        }
    }
}

fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let sci = format!("{f:e}");
        match sci.split_once('e') {
            Some((m, e)) => {
                let exp: i32 = e.parse().unwrap_or(0);
                if exp < 0 {
                    format!("{m}e-{}", exp.abs())
                } else {
                    format!("{m}e+{exp:02}")
                }
            }
            None => sci,
        }
    } else {
        format!("{f}")
    }
}

fn go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}
