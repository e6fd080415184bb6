//! Built-in objects shaped as Go's `encoding/json` writes them. kube-apiserver decodes a
//! built-in object into its Go struct and encodes it from there, so what it stores and
//! answers follows the struct's field tags, whatever the client sent:
//!
//! - a field tagged `omitempty` whose value is empty (`""`, `0`, `false`, `[]`, `{}`, or
//!   `null`; for a pointer only `null`) is left out: a client's `labels: {}`,
//!   `finalizers: []` or a container's `hostPort: 0` is not kept;
//! - a struct field is always written (`omitempty` does nothing for structs), and so is a
//!   field without `omitempty`, at its zero value: a Service has
//!   `"status": {"loadBalancer": {}}`, every container `"resources": {}`, a ClusterRole
//!   without rules `"rules": null`, a pod template's metadata `"creationTimestamp": null`.
//!
//! [`omit_empty`] is the first half alone, for a body just decoded (to defaulting an empty
//! value is "unset", as Go's zero values are); [`shape`] is both, for what is stored and
//! sent; [`shape_type`] shapes a value of a type below a kind (an `ObjectMeta`, a
//! `PodTemplateSpec`).
//!
//! The data (`go_encoding.json`) was read from the Kubernetes 1.33 API types (k8s.io/api,
//! apimachinery, apiextensions-apiserver and kube-aggregator at v0.33.13): `kinds` names
//! the Go type of each served `apiVersion/kind`, and `types` gives, per Go type, each JSON
//! field that needs something: `o` (`"e"`: omitted when empty; `"n"`: only when `null`,
//! for pointers), `z` (always written; this is its zero value), `t` and `s` (the Go struct it
//! holds: `"1"` one, `"["` a list of them, `"m"` a map of them).

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value};

/// When a field is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Omit {
    Never,
    WhenNull,
    WhenEmpty,
}

/// How a field holds a struct.
#[derive(Debug, Clone, Copy)]
enum Shape {
    One,
    Items,
    Values,
}

#[derive(Debug)]
struct Field {
    name: &'static str,
    omit: Omit,
    zero: Option<Value>,
    holds: Option<(Shape, usize)>,
}

#[derive(Debug, Default)]
struct Types {
    kinds: HashMap<&'static str, usize>,
    types: Vec<Vec<Field>>,
    names: HashMap<&'static str, usize>,
}

/// A field as `go_encoding.json` writes it (borrowed from the embedded text, so reading it
/// copies no names).
#[derive(Deserialize)]
struct RawField<'a> {
    #[serde(default, borrow)]
    o: Option<&'a str>,
    #[serde(default, deserialize_with = "present")]
    z: Option<Value>,
    #[serde(default, borrow)]
    t: Option<&'a str>,
    #[serde(default, borrow)]
    s: Option<&'a str>,
}

/// A present `null` is `Some(Value::Null)`, not `None`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The whole file; the maps are ordered, so a type's index is its place in `types`.
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(borrow)]
    kinds: BTreeMap<&'a str, &'a str>,
    #[serde(borrow)]
    types: BTreeMap<&'a str, BTreeMap<&'a str, RawField<'a>>>,
}

fn types() -> &'static Types {
    static TYPES: OnceLock<Types> = OnceLock::new();
    TYPES.get_or_init(|| {
        serde_json::from_str::<Raw<'static>>(include_str!("go_encoding.json"))
            .map(index)
            .unwrap_or_default()
    })
}

/// The data with type names made indexes.
fn index(raw: Raw<'static>) -> Types {
    let names: HashMap<&'static str, usize> = raw
        .types
        .keys()
        .enumerate()
        .map(|(i, name)| (*name, i))
        .collect();
    let types = raw
        .types
        .into_values()
        .map(|fields| {
            fields
                .into_iter()
                .map(|(name, spec)| Field {
                    name,
                    omit: match spec.o {
                        None => Omit::Never,
                        Some("n") => Omit::WhenNull,
                        Some(_) => Omit::WhenEmpty,
                    },
                    zero: spec.z,
                    holds: spec.t.and_then(|t| names.get(t)).map(|&t| {
                        let shape = match spec.s {
                            Some("[") => Shape::Items,
                            Some("m") => Shape::Values,
                            _ => Shape::One,
                        };
                        (shape, t)
                    }),
                })
                .collect()
        })
        .collect();
    Types {
        kinds: raw
            .kinds
            .into_iter()
            .filter_map(|(kind, ty)| names.get(ty).map(|&t| (kind, t)))
            .collect(),
        types,
        names,
    }
}

/// Drops from an object of `kind` (`apiVersion/kind`: `v1/Pod`, `apps/v1/Deployment`) the
/// empty fields Go leaves out. Whether `kind` is a built-in kind.
pub fn omit_empty(kind: &str, obj: &mut Value) -> bool {
    shape_kind(kind, obj, false)
}

/// Shapes an object of `kind` (`apiVersion/kind`) as Go writes it: empty `omitempty` fields
/// dropped, struct fields and fields without `omitempty` written (a `null` where Go has a
/// struct becomes that struct). Whether `kind` is a built-in kind.
pub fn shape(kind: &str, obj: &mut Value) -> bool {
    shape_kind(kind, obj, true)
}

/// Shapes a value of the Go type `go_type` (`meta/v1.ObjectMeta`, `core/v1.PodTemplateSpec`:
/// the package below `k8s.io/api` or `k8s.io/apimachinery/pkg/apis`, and the type's name)
/// as Go writes it. Whether the type is known.
pub fn shape_type(go_type: &str, value: &mut Value) -> bool {
    walk_known(types().names.get(go_type), value, true)
}

fn shape_kind(kind: &str, obj: &mut Value, fill: bool) -> bool {
    walk_known(types().kinds.get(kind), obj, fill)
}

/// Walks `value` as the type at `ty`, if there is one; whether there was.
fn walk_known(ty: Option<&usize>, value: &mut Value, fill: bool) -> bool {
    ty.map(|&ty| walk(types(), ty, value, fill)).is_some()
}

/// Whether Go's `omitempty` leaves this value out (`null`, `false`, `0`, `""`, `[]`, `{}`):
/// the zero value of a JSON field's Go type.
pub fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn walk(types: &Types, ty: usize, value: &mut Value, fill: bool) {
    let Some(map) = value.as_object_mut() else {
        return;
    };
    for field in &types.types[ty] {
        let omitted = match (field.omit, map.get(field.name)) {
            (_, None) => false,
            (Omit::WhenEmpty, Some(v)) => is_empty(v),
            (Omit::WhenNull, Some(v)) => v.is_null(),
            (Omit::Never, Some(_)) => false,
        };
        if omitted {
            map.remove(field.name);
            continue;
        }
        let Some(value) = present_or_zero(map, field, fill) else {
            continue;
        };
        if let Some((holds, inner)) = field.holds {
            match (holds, value) {
                (Shape::One, v) => walk(types, inner, v, fill),
                (Shape::Items, Value::Array(items)) => {
                    for item in items {
                        walk(types, inner, item, fill);
                    }
                }
                (Shape::Values, Value::Object(values)) => {
                    for item in values.values_mut() {
                        walk(types, inner, item, fill);
                    }
                }
                _ => {}
            }
        }
    }
}

/// The field's value, written at its zero when `fill` and Go always writes it.
fn present_or_zero<'a>(
    map: &'a mut Map<String, Value>,
    field: &Field,
    fill: bool,
) -> Option<&'a mut Value> {
    if !fill {
        return map.get_mut(field.name);
    }
    match (map.contains_key(field.name), &field.zero) {
        (false, Some(zero)) => {
            map.insert(field.name.to_owned(), zero.clone());
        }
        (true, Some(zero @ Value::Object(_))) => {
            let value = map.get_mut(field.name)?;
            if value.is_null() {
                *value = zero.clone();
            }
        }
        _ => {}
    }
    map.get_mut(field.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_served_kind_has_its_go_type() {
        assert!(types().kinds.len() >= 60, "{}", types().kinds.len());
        for kind in [
            "v1/Pod",
            "apps/v1/Deployment",
            "apiextensions.k8s.io/v1/CustomResourceDefinition",
            "apiregistration.k8s.io/v1/APIService",
            "admissionregistration.k8s.io/v1beta1/ValidatingAdmissionPolicy",
        ] {
            assert!(types().kinds.contains_key(kind), "{kind}");
        }
        assert!(!shape("example.com/v1/Widget", &mut json!({})));
    }

    #[test]
    fn an_empty_object_gets_what_go_always_writes() {
        let mut service = json!({});
        assert!(shape("v1/Service", &mut service));
        assert_eq!(
            service,
            json!({"metadata": {"creationTimestamp": null}, "spec": {}, "status": {"loadBalancer": {}}})
        );
        let mut role = json!({"metadata": {"name": "r"}});
        shape("rbac.authorization.k8s.io/v1/ClusterRole", &mut role);
        assert_eq!(
            role,
            json!({"metadata": {"name": "r", "creationTimestamp": null}, "rules": null})
        );
        let mut set = json!({"status": null});
        shape("apps/v1/StatefulSet", &mut set);
        assert_eq!(
            set["status"],
            json!({"replicas": 0, "availableReplicas": 0})
        );
    }

    #[test]
    fn empty_omitempty_fields_are_dropped_at_every_depth() {
        let mut pod = json!({
            "metadata": {"name": "p", "labels": {}, "finalizers": [], "generateName": "",
                "generation": 0, "ownerReferences": [], "deletionGracePeriodSeconds": null},
            "spec": {
                "nodeSelector": {}, "hostNetwork": false, "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "", "stdin": false,
                    "ports": [{"containerPort": 80, "hostPort": 0, "name": ""}], "env": []}],
                "securityContext": {},
            },
        });
        omit_empty("v1/Pod", &mut pod);
        assert_eq!(
            pod,
            json!({
                "metadata": {"name": "p"},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "ports": [{"containerPort": 80}]}],
                    "securityContext": {},
                },
            }),
            "pointers keep their zero values, and empty structs stay"
        );
        shape("v1/Pod", &mut pod);
        assert_eq!(pod["spec"]["containers"][0]["resources"], json!({}));
        assert_eq!(pod["metadata"]["creationTimestamp"], Value::Null);
        assert_eq!(pod["status"], json!({}));
    }

    #[test]
    fn what_a_client_set_is_kept() {
        let mut service = json!({
            "spec": {"type": "ClusterIP", "ports": [{"port": 80, "targetPort": 8080}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}},
        });
        let before = service.clone();
        shape("v1/Service", &mut service);
        assert_eq!(service["spec"], before["spec"]);
        assert_eq!(service["status"], before["status"]);
    }

    #[test]
    fn go_types_below_kinds_are_shaped_too() {
        let mut metadata =
            json!({"name": "x", "annotations": {}, "finalizers": [], "labels": {"a": "b"}});
        assert!(shape_type("meta/v1.ObjectMeta", &mut metadata));
        assert_eq!(
            metadata,
            json!({"name": "x", "labels": {"a": "b"}, "creationTimestamp": null})
        );
        let mut template = json!({"spec": {"containers": [{"name": "c"}]}});
        assert!(shape_type("core/v1.PodTemplateSpec", &mut template));
        assert_eq!(
            template,
            json!({"metadata": {"creationTimestamp": null},
                "spec": {"containers": [{"name": "c", "resources": {}}]}})
        );
        assert!(!shape_type("core/v1.Nothing", &mut template));
    }
}
