//! Equivalence checks of the fast paths of [`update`](super::update) (the managed fields of
//! ordinary writes) against the computation they replace, kept here as the reference: the
//! full comparison walk over copies of both objects without their managed fields, field-set
//! operations that build new sets, and `FieldsV1` encoded as text and parsed back. Objects
//! are generated from a seed: structs, maps, map lists with keys (duplicates, missing keys),
//! sets, atomic lists and maps, nulls, empty values, mismatched types, numbers spelled two
//! ways, removed and re-added fields, over sequences of writes by several managers.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::fieldpath::{FieldSet, PathElement, values_equal};
use super::managed::{ManagedFields, ManagedFieldsEntry, Operation};
use super::shape::{Atom, ListType, ListView, MapView, Shape};
use super::typed::{self, Comparison, list_item_pe, without_managed_fields};
use super::{ApplyError, Request, cap_update_managers, manager_name, strip_set, update};

fn as_map(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object)
}

fn as_list(v: Option<&Value>) -> Option<&Vec<Value>> {
    v.and_then(Value::as_array)
}

/// The reference comparison: every node of both objects walked.
fn ref_compare(shape: &Shape, lhs: &Value, rhs: &Value) -> Comparison {
    let mut c = Comparison::default();
    compare_walk(shape, Some(lhs), Some(rhs), &mut Vec::new(), &mut c);
    c
}

fn ref_take_changes(
    shape: &Shape,
    old: &Value,
    new: &Value,
    managed: &mut ManagedFields,
) -> Comparison {
    let ignored = FieldSet::new();
    let mut cmp = ref_compare(shape, old, new);
    cmp.added = cmp.added.recursive_difference(&ignored);
    cmp.modified = cmp.modified.recursive_difference(&ignored);
    cmp.removed = cmp.removed.recursive_difference(&ignored);
    let changed = cmp.modified.union(&cmp.added);
    for e in &mut managed.0 {
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    managed.0.retain(|e| !e.fields.is_empty());
    cmp
}

/// The reference `FieldsV1` encoding: text, parsed back.
fn ref_fields_v1(set: &FieldSet) -> Value {
    serde_json::from_str(&set.to_fields_v1_json()).unwrap_or(Value::Null)
}

/// The reference object written: entries encoded through [`ref_fields_v1`].
fn ref_write_to(managed: &ManagedFields, obj: &mut Value) {
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    if managed.0.is_empty() {
        if let Some(Value::Object(meta)) = root.get_mut("metadata") {
            meta.remove("managedFields");
        }
        return;
    }
    let list: Vec<Value> = managed
        .sorted()
        .into_iter()
        .map(|e| {
            let mut v = e.to_value();
            v["fieldsV1"] = ref_fields_v1(&e.fields);
            v
        })
        .collect();
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

fn ref_update(
    shape: &Shape,
    old: Option<&Value>,
    new: &Value,
    req: &Request<'_>,
) -> Result<Value, ApplyError> {
    if !new.is_object() {
        return Err(ApplyError::Invalid(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            crate::gofmt::json_kind(new)
        )));
    }
    let empty = Value::Object(Map::new());
    let old_managed = || {
        old.map(|o| ManagedFields::from_object(o).unwrap_or_default())
            .unwrap_or_default()
    };
    let mut managed = if req.subresource.is_some() {
        old_managed()
    } else if ManagedFields::is_reset_list(new.get("metadata").and_then(|m| m.get("managedFields")))
    {
        ManagedFields::default()
    } else {
        match ManagedFields::from_object(new) {
            Ok(m) if !m.0.is_empty() => m,
            _ => old_managed(),
        }
    };
    let old_v = old.map_or_else(|| empty.clone(), without_managed_fields);
    let new_v = without_managed_fields(new);
    let cmp = ref_take_changes(shape, &old_v, &new_v, &mut managed);
    let mine = cmp.modified.union(&cmp.added).difference(strip_set());
    let me = ManagedFieldsEntry {
        manager: manager_name(req),
        operation: Operation::Update,
        api_version: req.api_version.to_string(),
        time: Some(req.now.to_string()),
        subresource: req.subresource.map(str::to_string),
        fields: mine,
    };
    if !me.fields.is_empty() {
        match managed.0.iter_mut().find(|e| e.same_manager(&me)) {
            Some(e) => {
                e.fields = me.fields.union(&e.fields);
                e.time = me.time.clone();
            }
            None => managed.0.push(me),
        }
    }
    cap_update_managers(&mut managed);
    let mut out = new_v;
    ref_write_to(&managed, &mut out);
    Ok(out)
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
    let keys: BTreeSet<&String> = lm.iter().chain(rm.iter()).flat_map(|m| m.keys()).collect();
    for k in keys {
        path.push(PathElement::Field(k.clone()));
        compare_walk(
            m.child(k),
            lm.and_then(|m| m.get(k)),
            rm.and_then(|m| m.get(k)),
            path,
            c,
        );
        path.pop();
    }
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

/// A small deterministic generator (splitmix64), so every failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn word(&mut self, words: &[&'static str]) -> &'static str {
        words[self.below(words.len())]
    }
}

const KEYS: &[&str] = &[
    "spec",
    "status",
    "replicas",
    "color",
    "args",
    "tags",
    "ports",
    "selector",
    "labels",
    "extra",
    "conditions",
    "name",
    "port",
    "protocol",
    "type",
    "containers",
    "image",
    "env",
    "value",
    "nodeName",
    "phase",
    "x",
];

fn scalar(rng: &mut Rng) -> Value {
    match rng.below(9) {
        0 => json!(1),
        1 => json!(1.0),
        2 => json!(2),
        3 => json!(true),
        4 => Value::Null,
        5 => json!("b"),
        6 => json!("<&>"),
        _ => json!("a"),
    }
}

/// An item of a list: often an object with the key fields map lists use (`name`, `type`,
/// `port`, `protocol`), sometimes without them, sometimes a scalar.
fn item(rng: &mut Rng, depth: usize) -> Value {
    if rng.chance(30) {
        return scalar(rng);
    }
    let mut m = Map::new();
    for key in ["name", "type", "port", "protocol"] {
        if rng.chance(70) {
            m.insert(key.into(), json!(*rng.pick(&["a", "b", "c"])));
        }
    }
    if rng.chance(50) {
        let k = rng.pick(KEYS).to_string();
        m.insert(k, value(rng, depth + 1));
    }
    Value::Object(m)
}

fn value(rng: &mut Rng, depth: usize) -> Value {
    let kind = if depth >= 4 { 0 } else { rng.below(10) };
    match kind {
        0..=3 => scalar(rng),
        4 | 5 => {
            let n = rng.below(4);
            Value::Array((0..n).map(|_| item(rng, depth)).collect())
        }
        6 => Value::Object(Map::new()),
        _ => {
            let n = 1 + rng.below(4);
            let mut m = Map::new();
            for _ in 0..n {
                m.insert(rng.pick(KEYS).to_string(), value(rng, depth + 1));
            }
            Value::Object(m)
        }
    }
}

fn metadata(rng: &mut Rng) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!("w"));
    if rng.chance(50) {
        m.insert("labels".into(), json!({"app": *rng.pick(&["a", "b"])}));
    }
    if rng.chance(30) {
        m.insert("finalizers".into(), json!([*rng.pick(&["f1", "f2"]), "f3"]));
    }
    if rng.chance(30) {
        m.insert(
            "ownerReferences".into(),
            json!([{"uid": *rng.pick(&["u1", "u2"]), "kind": "ReplicaSet", "name": "r"}]),
        );
    }
    if rng.chance(30) {
        m.insert("resourceVersion".into(), json!(rng.below(5).to_string()));
    }
    Value::Object(m)
}

fn object(rng: &mut Rng) -> Value {
    let mut root = Map::new();
    root.insert("apiVersion".into(), json!("example.com/v1"));
    root.insert("kind".into(), json!("Widget"));
    root.insert("metadata".into(), metadata(rng));
    for key in ["spec", "status"] {
        let mut m = Map::new();
        for _ in 0..1 + rng.below(5) {
            m.insert(rng.pick(KEYS).to_string(), value(rng, 1));
        }
        root.insert(key.into(), Value::Object(m));
    }
    Value::Object(root)
}

/// A random edit of `v`: most subtrees kept as they are (so that the equal-subtree paths are
/// taken), some replaced, removed, added to, reordered or duplicated.
fn mutate(rng: &mut Rng, v: &Value, depth: usize) -> Value {
    if rng.chance(if depth == 0 { 0 } else { 8 }) {
        return value(rng, depth);
    }
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, child) in m {
                if depth > 0 && rng.chance(8) {
                    continue;
                }
                let keep = k == "metadata" || rng.chance(60);
                let child = if keep {
                    child.clone()
                } else {
                    mutate(rng, child, depth + 1)
                };
                out.insert(k.clone(), child);
            }
            if depth > 0 && rng.chance(15) {
                out.insert(rng.pick(KEYS).to_string(), value(rng, depth + 1));
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let mut out: Vec<Value> = items
                .iter()
                .map(|i| {
                    if rng.chance(70) {
                        i.clone()
                    } else {
                        mutate(rng, i, depth + 1)
                    }
                })
                .collect();
            if rng.chance(15) {
                out.reverse();
            }
            if rng.chance(10) && !out.is_empty() {
                let dup = out[rng.below(out.len())].clone();
                out.push(dup);
            }
            if rng.chance(15) {
                out.push(item(rng, depth + 1));
            }
            if rng.chance(10) && !out.is_empty() {
                out.remove(rng.below(out.len()));
            }
            Value::Array(out)
        }
        _ if rng.chance(30) => scalar(rng),
        other => other.clone(),
    }
}

fn shapes() -> Vec<(&'static str, Shape)> {
    let widget = Shape::from_openapi_v3(&json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "color": {"type": "string"},
                "args": {"type": "array", "items": {"type": "string"}},
                "tags": {"type": "array", "items": {"type": "string"},
                         "x-kubernetes-list-type": "set"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name", "protocol"],
                          "items": {"type": "object", "properties": {
                              "name": {"type": "string"},
                              "port": {"type": "integer"},
                              "protocol": {"type": "string", "default": "TCP"}}}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                             "additionalProperties": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "containers": {"type": "array", "x-kubernetes-list-type": "map",
                               "x-kubernetes-list-map-keys": ["name"],
                               "items": {"type": "object", "properties": {
                                   "name": {"type": "string"},
                                   "image": {"type": "string"},
                                   "env": {"type": "array", "x-kubernetes-list-type": "map",
                                           "x-kubernetes-list-map-keys": ["name"],
                                           "items": {"type": "object", "properties": {
                                               "name": {"type": "string"},
                                               "value": {"type": "string"}}}}}}}
            }},
            "status": {"type": "object", "properties": {
                "phase": {"type": "string"},
                "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                               "x-kubernetes-list-map-keys": ["type"],
                               "items": {"type": "object", "properties": {
                                   "type": {"type": "string"},
                                   "status": {"type": "string"}}}}
            }}
        }
    }));
    let pod = crate::patch::PatchSchema::builtin()
        .lookup("", "Pod")
        .map(Shape::from_patch_schema)
        .unwrap_or_else(Shape::deduced);
    vec![
        ("widget", widget),
        ("pod", pod),
        ("deduced", Shape::deduced()),
        ("atomic", Shape::atomic()),
    ]
}

/// The managed fields a client might send: what it read, nothing, a reset, entries of its
/// own (in Kubernetes' spelling or not), or something undecodable.
fn tamper_managed_fields(rng: &mut Rng, shape: &Shape, obj: &mut Value) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let own = |rng: &mut Rng| {
        let set = typed::to_field_set(shape, &object(rng), true).unwrap_or_default();
        json!({"manager": "client", "operation": "Update", "apiVersion": "example.com/v1",
               "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
               "fieldsV1": set.to_fields_v1()})
    };
    match rng.below(12) {
        0 => {
            meta.remove("managedFields");
        }
        1 => {
            meta.insert("managedFields".into(), json!([]));
        }
        2 => {
            meta.insert("managedFields".into(), json!([{}]));
        }
        3 => {
            let entries = json!([own(rng)]);
            meta.insert("managedFields".into(), entries);
        }
        4 => {
            // Not in Kubernetes' spelling: a lone `.`, an unknown element type, duplicates.
            meta.insert(
                "managedFields".into(),
                json!([{"manager": "odd", "operation": "Update", "apiVersion": "v9",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:spec": {".": {}, "f:color": {".": {}},
                                                "x:y": {}, "f:tags": {"v:1": {}, "v:1.0": {}}}}}]),
            );
        }
        5 => {
            meta.insert("managedFields".into(), json!("not a list"));
        }
        _ => {}
    }
}

const MANAGERS: &[&str] = &[
    "a",
    "b",
    "kubelet",
    "kube-scheduler",
    "",
    "m5",
    "m6",
    "m7",
    "m8",
    "m9",
    "m10",
    "m11",
    "m12",
    "m13",
];

#[test]
fn updates_match_the_full_computation() {
    let mut checked = 0;
    for (name, shape) in shapes() {
        for seed in 0..150u64 {
            let mut rng = Rng(seed * 7919 + name.len() as u64);
            let mut live: Option<Value> = None;
            let mut next = object(&mut rng);
            for step in 0..10 {
                if step > 0 && rng.chance(20) {
                    // Some Apply entries among the Update ones.
                    let base = object(&mut rng);
                    let config = mutate(&mut rng, &base, 0);
                    let r = Request {
                        manager: rng.word(&["alice", "bob"]),
                        api_version: "example.com/v1",
                        subresource: None,
                        now: "2026-01-01T00:00:30Z",
                        force: true,
                    };
                    if let Ok(applied) = super::apply(&shape, live.as_ref(), &config, &r) {
                        live = Some(applied);
                    }
                }
                let mut new = mutate(&mut rng, live.as_ref().unwrap_or(&next), 0);
                tamper_managed_fields(&mut rng, &shape, &mut new);
                let now = format!("2026-01-01T00:00:{:02}Z", step + rng.below(3));
                let many = rng.chance(30);
                let managers = if many { MANAGERS } else { &MANAGERS[..4] };
                let r = Request {
                    manager: rng.word(managers),
                    api_version: rng.word(&["example.com/v1", "example.com/v2"]),
                    subresource: if rng.chance(30) { Some("status") } else { None },
                    now: &now,
                    force: false,
                };
                let old = if rng.chance(10) { None } else { live.as_ref() };
                let fast = update(&shape, old, &new, &r);
                let reference = ref_update(&shape, old, &new, &r);
                assert_eq!(
                    fast, reference,
                    "shape {name}, seed {seed}, step {step}: old {old:?}, new {new}"
                );
                if let (Ok(f), Ok(s)) = (&fast, &reference) {
                    assert_eq!(f.to_string(), s.to_string());
                }
                checked += 1;
                if let Ok(out) = fast {
                    live = Some(out);
                }
                next = object(&mut rng);
            }
        }
    }
    assert_eq!(checked, 4 * 150 * 10);
}

#[test]
fn a_single_status_change_is_all_the_kubelet_owns() {
    let shape = shapes().swap_remove(1).1;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx",
                                 "ports": [{"containerPort": 80, "protocol": "TCP"}]}]},
        "status": {"phase": "Pending"}});
    let req = |manager, subresource, now| Request {
        manager,
        api_version: "v1",
        subresource,
        now,
        force: false,
    };
    let created = update(
        &shape,
        None,
        &pod,
        &req("kcm", None, "2026-01-01T00:00:00Z"),
    )
    .unwrap();
    let mut running = created.clone();
    running["status"]["phase"] = json!("Running");
    running["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    let r = req("kubelet", Some("status"), "2026-01-01T00:00:01Z");
    let out = update(&shape, Some(&created), &running, &r).unwrap();
    assert_eq!(
        out,
        ref_update(&shape, Some(&created), &running, &r).unwrap()
    );
    let managed = ManagedFields::from_object(&out).unwrap();
    let kubelet = managed.0.iter().find(|e| e.manager == "kubelet").unwrap();
    assert_eq!(
        kubelet.fields.to_fields_v1_json(),
        r#"{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"Ready\"}":{".":{},"f:status":{},"f:type":{}}},"f:phase":{}}}"#
    );
    // The creator keeps the spec and loses the phase the kubelet changed.
    let kcm = managed.0.iter().find(|e| e.manager == "kcm").unwrap();
    let f = |n: &str| PathElement::Field(n.to_string());
    let container = PathElement::Key(vec![("name".to_string(), json!("c"))]);
    assert!(
        kcm.fields
            .has(&[f("spec"), f("containers"), container, f("image")])
    );
    assert!(!kcm.fields.has(&[f("status"), f("phase")]));
    assert!(kcm.fields.has(&[f("metadata"), f("labels"), f("app")]));
    assert_eq!(out["status"]["phase"], "Running");
    assert_eq!(out["metadata"]["managedFields"][1]["subresource"], "status");
}

/// Pairs of objects, each side with or without managed fields, with `metadata` in every
/// form the comparison must see through (absent, only the list, not an object).
fn object_pairs(rng: &mut Rng) -> (Value, Value) {
    let mut l = object(rng);
    let mut r = mutate(rng, &l, 0);
    for side in [&mut l, &mut r] {
        match rng.below(6) {
            0 => {
                side["metadata"]["managedFields"] = json!([{"manager": "x"}]);
            }
            1 => side["metadata"] = json!({"managedFields": []}),
            2 => side["metadata"] = json!("meta"),
            3 => {
                side.as_object_mut().map(|m| m.remove("metadata"));
            }
            4 => *side = json!({"metadata": {"managedFields": [1]}}),
            _ => {}
        }
    }
    (l, r)
}

#[test]
fn comparisons_match_the_full_walk() {
    for (name, shape) in shapes() {
        for seed in 0..400u64 {
            let mut rng = Rng(seed + 1_000_000);
            let (l, r) = object_pairs(&mut rng);
            let (sl, sr) = (without_managed_fields(&l), without_managed_fields(&r));
            let want = ref_compare(&shape, &sl, &sr);
            let fast = typed::compare_without_managed_fields(&shape, &l, &r);
            let same = |a: &Comparison, b: &Comparison| {
                a.added == b.added && a.modified == b.modified && a.removed == b.removed
            };
            assert!(same(&fast, &want), "shape {name}, seed {seed}: {l} vs {r}");
            assert!(
                same(&typed::compare(&shape, &sl, &sr), &want),
                "{name} {seed}"
            );
        }
    }
}

#[test]
fn set_operations_in_place_match_the_copying_ones() {
    let shape = shapes().swap_remove(0).1;
    let set_of = |rng: &mut Rng| {
        let base = object(rng);
        let v = mutate(rng, &base, 0);
        typed::to_field_set(&shape, &v, true).unwrap_or_default()
    };
    for seed in 0..400u64 {
        let mut rng = Rng(seed + 2_000_000);
        let (a, b) = (set_of(&mut rng), set_of(&mut rng));
        let mut d = a.clone();
        d.subtract(&b);
        assert_eq!(d, a.difference(&b), "seed {seed}");
        let mut u = a.clone();
        u.union_with(b.clone());
        assert_eq!(u, a.union(&b), "seed {seed}");
        let mut u = FieldSet::new();
        u.union_with(b.clone());
        assert_eq!(u, FieldSet::new().union(&b), "seed {seed}");
        for set in [&a, &b, &d, &u, &a.intersection(&b)] {
            assert_eq!(set.to_fields_v1(), ref_fields_v1(set), "seed {seed}");
        }
    }
}

#[test]
fn fields_v1_values_are_built_as_the_text_parses() {
    // Elements that are equal but spelled differently, escapes, and a member with children.
    let v1 = json!({"f:a": {".": {}, "f:b": {}}, "f:tags": {"v:1": {}, "v:\"<&>\"": {}},
                    "f:ports": {"k:{\"name\":\"a\",\"port\":1.5}": {".": {}, "f:x": {}}},
                    "f:i": {"i:0": {}, "i:3": {}}});
    let set = FieldSet::from_fields_v1(&v1).unwrap();
    assert_eq!(set.to_fields_v1(), ref_fields_v1(&set));
    // Go's encoder escapes `<`, `&` and `>` inside the key.
    assert!(
        set.to_fields_v1()["f:tags"]
            .get(r#"v:"\u003c\u0026\u003e""#)
            .is_some()
    );
    let mut dup = FieldSet::new();
    dup.insert(&[PathElement::Field("t".into()), PathElement::Value(json!(1))]);
    dup.insert(&[
        PathElement::Field("t".into()),
        PathElement::Value(json!(1.0)),
    ]);
    assert_eq!(dup.to_fields_v1(), json!({"f:t": {"v:1": {}}}));
    assert_eq!(dup.to_fields_v1(), ref_fields_v1(&dup));
}
