//! CEL types of the values a rule sees, as kube-apiserver derives them from a structural
//! schema (`SchemaDeclType`): the type the checker gives `self`, and the sizes the cost
//! estimator assumes (`MaxElements`, `MinSerializedSize`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::convert::escape;

/// The largest request kube-apiserver takes: every size bound derives from it.
pub(crate) const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;

/// A CEL type, as the checker sees it.
#[derive(Clone, Debug)]
pub(crate) enum Type {
    /// Any type: checked at run time.
    Dyn,
    /// The type of an expression that failed to check; assignable to anything, so one
    /// mistake is reported once.
    Error,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    List(Box<Type>),
    Map(Box<Type>, Box<Type>),
    /// An object of a schema, by the name kube-apiserver gives it (`selfType0.spec`).
    Object(Arc<Decl>),
    /// A type only its library functions know (`net.IP`, `kubernetes.Quantity`).
    Opaque(&'static str),
    Optional(Box<Type>),
    /// The type of a type name used as a value (`int`, `type(x)`).
    Kind(Box<Type>),
    /// A type parameter of an overload (`A` in `size(list(A))`).
    Param(&'static str),
}

impl Type {
    pub(crate) fn list(elem: Type) -> Type {
        Type::List(Box::new(elem))
    }

    pub(crate) fn map(key: Type, value: Type) -> Type {
        Type::Map(Box::new(key), Box::new(value))
    }

    pub(crate) fn optional(inner: Type) -> Type {
        Type::Optional(Box::new(inner))
    }

    /// `dyn` or an error: nothing can be said about it at check time.
    pub(crate) fn is_dyn_or_error(&self) -> bool {
        matches!(self, Type::Dyn | Type::Error)
    }

    /// Whether the two types are the same type (object types by name).
    pub(crate) fn same(&self, other: &Type) -> bool {
        match (self, other) {
            (Type::List(a), Type::List(b))
            | (Type::Optional(a), Type::Optional(b))
            | (Type::Kind(a), Type::Kind(b)) => a.same(b),
            (Type::Map(ka, va), Type::Map(kb, vb)) => ka.same(kb) && va.same(vb),
            (Type::Object(a), Type::Object(b)) => a.name == b.name,
            (Type::Opaque(a), Type::Opaque(b)) | (Type::Param(a), Type::Param(b)) => a == b,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }

    /// The type with every type parameter replaced: by its binding, else by `dyn`.
    pub(crate) fn substitute(&self, bindings: &Bindings) -> Type {
        match self {
            Type::Param(p) => bindings
                .get(p)
                .map_or(Type::Dyn, |bound| bound.substitute(bindings)),
            Type::List(e) => Type::list(e.substitute(bindings)),
            Type::Map(k, v) => Type::map(k.substitute(bindings), v.substitute(bindings)),
            Type::Optional(t) => Type::optional(t.substitute(bindings)),
            Type::Kind(t) => Type::Kind(Box::new(t.substitute(bindings))),
            other => other.clone(),
        }
    }
}

/// Type parameters bound while matching one overload.
pub(crate) type Bindings = BTreeMap<&'static str, Type>;

/// Whether a value of type `arg` may be passed where `param` is declared, binding type
/// parameters as it goes (cel-go's `internalIsAssignable`): `dyn` and errors are assignable
/// both ways, `null` only to objects, opaque types, timestamps, durations and optionals.
pub(crate) fn assignable(param: &Type, arg: &Type, bindings: &mut Bindings) -> bool {
    match (param, arg) {
        (Type::Param(p), _) => match bindings.get(p).cloned() {
            Some(bound) => {
                if assignable(&bound, arg, bindings) {
                    true
                } else if assignable(arg, &bound, &mut bindings.clone()) {
                    // The more general type wins: `A` bound to `int`, then `dyn`.
                    bindings.insert(p, arg.clone());
                    true
                } else {
                    false
                }
            }
            None => {
                bindings.insert(p, arg.clone());
                true
            }
        },
        (_, Type::Param(_)) => true,
        (Type::Dyn | Type::Error, _) | (_, Type::Dyn | Type::Error) => true,
        (
            Type::Object(_)
            | Type::Opaque(_)
            | Type::Timestamp
            | Type::Duration
            | Type::Optional(_)
            | Type::Null,
            Type::Null,
        ) => true,
        (Type::List(p), Type::List(a)) => assignable(p, a, bindings),
        (Type::Optional(p), Type::Optional(a)) | (Type::Kind(p), Type::Kind(a)) => {
            assignable(p, a, bindings)
        }
        (Type::Map(pk, pv), Type::Map(ak, av)) => {
            assignable(pk, ak, bindings) && assignable(pv, av, bindings)
        }
        _ => param.same(arg),
    }
}

impl fmt::Display for Type {
    /// As cel-go's `FormatCELType` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Dyn => f.write_str("dyn"),
            Type::Error => f.write_str("!error!"),
            Type::Null => f.write_str("null"),
            Type::Bool => f.write_str("bool"),
            Type::Int => f.write_str("int"),
            Type::Uint => f.write_str("uint"),
            Type::Double => f.write_str("double"),
            Type::String => f.write_str("string"),
            Type::Bytes => f.write_str("bytes"),
            Type::Duration => f.write_str("duration"),
            Type::Timestamp => f.write_str("timestamp"),
            Type::List(e) => write!(f, "list({e})"),
            Type::Map(k, v) => write!(f, "map({k}, {v})"),
            Type::Object(d) => f.write_str(&d.name),
            Type::Opaque(name) => f.write_str(name),
            Type::Optional(t) => write!(f, "optional_type({t})"),
            Type::Kind(t) => write!(f, "type({t})"),
            Type::Param(_) => f.write_str("dyn"),
        }
    }
}

/// What a schema node declares to CEL (kube-apiserver's `DeclType`): its type, and the
/// bounds the cost estimator works from.
#[derive(Debug)]
pub(crate) struct Decl {
    /// The object type's name; empty for other types.
    pub(crate) name: String,
    pub(crate) kind: DeclKind,
    /// The most elements (string bytes, list items, map entries) a value can have, from
    /// `maxLength`, `maxItems`, `maxProperties` or the request size; 0 when unset, as for
    /// numbers, booleans and objects.
    pub(crate) max_elements: u64,
    /// The fewest bytes the value takes in JSON.
    pub(crate) min_size: u64,
}

#[derive(Debug)]
pub(crate) enum DeclKind {
    Scalar(Type),
    List(Arc<Decl>),
    /// A map with string keys.
    Map(Arc<Decl>),
    /// An object: its exposed properties by escaped name.
    Object(BTreeMap<String, Arc<Decl>>),
}

/// The key type of every schema map.
static STRING_KEY: Decl = Decl {
    name: String::new(),
    kind: DeclKind::Scalar(Type::String),
    max_elements: 0,
    min_size: 2,
};

impl Decl {
    /// The CEL type of values of this declaration.
    pub(crate) fn cel_type(self: &Arc<Decl>) -> Type {
        match &self.kind {
            DeclKind::Scalar(t) => t.clone(),
            DeclKind::List(e) => Type::list(e.cel_type()),
            DeclKind::Map(v) => Type::map(Type::String, v.cel_type()),
            DeclKind::Object(_) => Type::Object(Arc::clone(self)),
        }
    }

    /// A field of an object; a reserved word also finds its escaped form (`self.namespace`
    /// reads the property `namespace`, declared as `__namespace__`).
    pub(crate) fn field(&self, name: &str) -> Option<&Arc<Decl>> {
        let DeclKind::Object(fields) = &self.kind else {
            return None;
        };
        fields
            .get(name)
            .or_else(|| fields.get(&format!("__{name}__")))
    }

    /// The declaration one step along a cost-estimation path: `@items`/`@values` (elements),
    /// `@keys` (map keys), or a field name.
    pub(crate) fn step(&self, segment: &str) -> Option<&Decl> {
        match (segment, &self.kind) {
            ("@items" | "@values", DeclKind::List(e) | DeclKind::Map(e)) => Some(e),
            ("@keys", DeclKind::Map(_)) => Some(&STRING_KEY),
            (_, DeclKind::Object(_)) => self.field(segment).map(|d| &**d),
            _ => None,
        }
    }

    /// `SchemaDeclType`: the declaration of `schema` (`None` when CEL cannot see it: no
    /// type, or an array without items), with object types named after `name`
    /// (`selfType0`, then `selfType0.spec`, `selfType0.items.@idx`). `resource_root` marks
    /// the CRD's root and embedded resources, whose `metadata` exposes `name` and
    /// `generateName` only.
    pub(crate) fn of_schema(schema: &Value, name: &str, resource_root: bool) -> Option<Arc<Decl>> {
        let flag = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
        let int = |key: &str| {
            schema
                .get(key)
                .and_then(Value::as_i64)
                .map(|n| n.max(0) as u64)
        };
        let unbounded = MAX_REQUEST_BYTES - 2;
        let scalar = |t: Type, min_size: u64, max_elements: u64| {
            Some(Arc::new(Decl {
                name: String::new(),
                kind: DeclKind::Scalar(t),
                max_elements,
                min_size,
            }))
        };
        if flag("x-kubernetes-int-or-string") {
            return scalar(Type::Dyn, 1, unbounded);
        }
        let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "array" => {
                let items = schema.get("items").filter(|i| i.is_object())?;
                let embedded = items
                    .get("x-kubernetes-embedded-resource")
                    .and_then(Value::as_bool)
                    == Some(true);
                let elem = Decl::of_schema(items, &format!("{name}.@idx"), embedded)?;
                let max = int("maxItems").unwrap_or(unbounded / (elem.min_size + 1));
                Some(Arc::new(Decl {
                    name: String::new(),
                    kind: DeclKind::List(elem),
                    max_elements: max,
                    min_size: 2,
                }))
            }
            "object" => {
                if let Some(additional) =
                    schema.get("additionalProperties").filter(|a| a.is_object())
                {
                    let embedded = additional
                        .get("x-kubernetes-embedded-resource")
                        .and_then(Value::as_bool)
                        == Some(true);
                    let value = Decl::of_schema(additional, &format!("{name}.@elem"), embedded)?;
                    let max = int("maxProperties").unwrap_or(unbounded / (value.min_size + 6));
                    return Some(Arc::new(Decl {
                        name: String::new(),
                        kind: DeclKind::Map(value),
                        max_elements: max,
                        min_size: 2,
                    }));
                }
                Some(Arc::new(object(schema, name, resource_root)))
            }
            "string" => match schema.get("format").and_then(Value::as_str) {
                Some("byte") => scalar(Type::Bytes, 2, int("maxLength").unwrap_or(unbounded)),
                Some("duration") => scalar(Type::Duration, 3, 32),
                Some("date") => scalar(Type::Timestamp, 12, 12),
                Some("date-time") => scalar(Type::Timestamp, 21, 32),
                _ => {
                    let enum_max = schema.get("enum").and_then(Value::as_array).map(|values| {
                        values
                            .iter()
                            .filter_map(Value::as_str)
                            .map(|s| s.len() as u64)
                            .max()
                            .unwrap_or(0)
                    });
                    // maxLength counts characters, each up to 4 bytes.
                    let max = int("maxLength")
                        .map(|n| n.saturating_mul(4))
                        .or(enum_max)
                        .unwrap_or(unbounded);
                    scalar(Type::String, 2, max)
                }
            },
            "boolean" => scalar(Type::Bool, 4, 0),
            "number" => scalar(Type::Double, 1, 0),
            "integer" => scalar(Type::Int, 1, 0),
            _ => None,
        }
    }
}

/// An object of `properties`: one field per property CEL can see and name.
fn object(schema: &Value, name: &str, resource_root: bool) -> Decl {
    let plain = |t: &str| serde_json::json!({"type": t});
    let mut properties: BTreeMap<String, Value> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    if resource_root && !declares_type_and_object_meta(&properties) {
        properties.insert("kind".into(), plain("string"));
        properties.insert("apiVersion".into(), plain("string"));
        properties.insert(
            "metadata".into(),
            serde_json::json!({"type": "object", "properties": {
                "name": {"type": "string"}, "generateName": {"type": "string"}}}),
        );
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields = BTreeMap::new();
    let mut min_size = 2;
    for (property, sub) in &properties {
        let Some(escaped) = escape(property) else {
            continue;
        };
        let embedded = sub
            .get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            == Some(true);
        let Some(decl) = Decl::of_schema(sub, &format!("{name}.{escaped}"), embedded) else {
            continue;
        };
        if required.contains(&property.as_str()) && sub.get("default").is_none() {
            min_size += property.len() as u64 + decl.min_size + 4;
        }
        fields.insert(escaped, decl);
    }
    Decl {
        name: name.to_string(),
        kind: DeclKind::Object(fields),
        max_elements: 0,
        min_size,
    }
}

/// `WithTypeAndObjectMeta` leaves a schema alone that already declares `kind`,
/// `apiVersion`, and `metadata` with `name` and `generateName` as strings.
fn declares_type_and_object_meta(properties: &BTreeMap<String, Value>) -> bool {
    let is = |v: Option<&Value>, t: &str| {
        v.and_then(|s| s.get("type")).and_then(Value::as_str) == Some(t)
    };
    let meta = properties.get("metadata");
    let meta_prop = |name: &str| {
        meta.and_then(|m| m.get("properties"))
            .and_then(|p| p.get(name))
    };
    is(properties.get("kind"), "string")
        && is(properties.get("apiVersion"), "string")
        && is(meta, "object")
        && is(meta_prop("name"), "string")
        && is(meta_prop("generateName"), "string")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_declare_what_kube_apiserver_declares() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["replicas"], "properties": {
                "replicas": {"type": "integer"},
                "names": {"type": "array", "items": {"type": "string", "maxLength": 20}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "when": {"type": "string", "format": "date-time"},
                "port": {"x-kubernetes-int-or-string": true},
                "in": {"type": "string"},
                "a-b": {"type": "string"},
                "untyped": {"x-kubernetes-preserve-unknown-fields": true}}}}});
        let root = Decl::of_schema(&schema, "selfType0", true).unwrap();
        let spec = root.field("spec").unwrap();
        assert_eq!(spec.cel_type().to_string(), "selfType0.spec");
        let shown = |name: &str| spec.field(name).map(|d| d.cel_type().to_string());
        assert_eq!(shown("replicas").as_deref(), Some("int"));
        assert_eq!(shown("names").as_deref(), Some("list(string)"));
        assert_eq!(shown("labels").as_deref(), Some("map(string, string)"));
        assert_eq!(shown("when").as_deref(), Some("timestamp"));
        assert_eq!(shown("port").as_deref(), Some("dyn"));
        assert_eq!(
            shown("in").as_deref(),
            Some("string"),
            "reserved words escape"
        );
        assert_eq!(shown("a__dash__b").as_deref(), Some("string"));
        assert_eq!(shown("untyped"), None, "no type: not exposed");
        // The root is a resource: metadata is name and generateName.
        let meta = root.field("metadata").unwrap();
        assert!(meta.field("name").is_some() && meta.field("labels").is_none());
        // Sizes: list items from the request size, strings 4 bytes a character.
        let names = spec.field("names").unwrap();
        assert_eq!(names.max_elements, (MAX_REQUEST_BYTES - 2) / 3);
        assert_eq!(names.step("@items").unwrap().max_elements, 80);
        assert_eq!(spec.min_size, 2 + "replicas".len() as u64 + 1 + 4);
    }
}
