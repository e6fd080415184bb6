//! The type tree server-side apply needs (structured-merge-diff's schema): which objects are
//! structs with named fields, which are maps, how lists merge, what is atomic. Built from a
//! CRD's `openAPIV3Schema` ([`Shape::from_openapi_v3`]) or from the strategic-merge metadata
//! of the built-in kinds ([`Shape::from_patch_schema`]); [`Shape::deduced`] describes untyped
//! data.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::patch::{FieldSchema, PatchStrategy, TypeSchema};

/// How a list merges (`x-kubernetes-list-type` and `x-kubernetes-list-map-keys`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole; owned as one field.
    Atomic,
    /// A set of scalars, items owned one by one (`v:` paths).
    Set,
    /// Items are objects identified by these key fields (`k:` paths).
    Map(Vec<String>),
}

/// A node of the type tree. Like structured-merge-diff's atoms, a node may accept several
/// kinds of values (a scalar, a list and a map): the value present picks which applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    node: Node,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// Untyped, granular: maps merge key by key (every key a map element), lists are atomic.
    Deduced,
    /// Untyped and atomic.
    Untyped,
    Typed(Box<Typed>),
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Typed {
    scalar: bool,
    list: Option<ListShape>,
    map: Option<MapShape>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ListShape {
    pub(crate) element: Shape,
    pub(crate) list_type: ListType,
    pub(crate) key_defaults: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct MapShape {
    pub(crate) fields: BTreeMap<String, Shape>,
    pub(crate) element: Option<Shape>,
    pub(crate) atomic: bool,
    /// A struct only partly described (a built-in type known by its merge keys): its other
    /// keys are fields too, not map entries, though their values are untyped.
    pub(crate) open: bool,
}

/// A resolved node: which kinds of value it accepts and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Atom<'a> {
    pub(crate) scalar: bool,
    pub(crate) list: Option<ListView<'a>>,
    pub(crate) map: Option<MapView<'a>>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct ListView<'a> {
    pub(crate) element: &'a Shape,
    pub(crate) list_type: &'a ListType,
    pub(crate) key_defaults: Option<&'a BTreeMap<String, Value>>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct MapView<'a> {
    pub(crate) fields: Option<&'a BTreeMap<String, Shape>>,
    pub(crate) element: Option<&'a Shape>,
    pub(crate) atomic: bool,
    pub(crate) open: bool,
}

impl<'a> MapView<'a> {
    /// Whether `key` is a declared (struct) field.
    pub(crate) fn is_field(&self, key: &str) -> bool {
        self.open || self.fields.is_some_and(|f| f.contains_key(key))
    }

    /// The shape of `key`'s value: the declared field, else the map element; undeclared
    /// fields of a struct without elements are treated as untyped (structured-merge-diff
    /// rejects them; Kubernetes prunes them before).
    pub(crate) fn child(&self, key: &str) -> &'a Shape {
        self.fields
            .and_then(|f| f.get(key))
            .or(self.element)
            .unwrap_or(&DEDUCED)
    }
}

static DEDUCED: Shape = Shape {
    node: Node::Deduced,
};
static UNTYPED: Shape = Shape {
    node: Node::Untyped,
};
static ATOMIC_LIST: ListType = ListType::Atomic;

impl Atom<'_> {
    /// The part of the atom that applies to `value` (structured-merge-diff's `deduceAtom`).
    pub(crate) fn deduce(self, value: Option<&Value>) -> Self {
        let only = |scalar, list, map| Atom { scalar, list, map };
        match value {
            Some(Value::Bool(_) | Value::Number(_) | Value::String(_)) if self.scalar => {
                only(true, None, None)
            }
            Some(Value::Array(_)) if self.list.is_some() => only(false, self.list, None),
            Some(Value::Object(_)) if self.map.is_some() => only(false, None, self.map),
            _ => self,
        }
    }

    /// Whether two deduced atoms are the same.
    pub(crate) fn same(&self, other: &Self) -> bool {
        self.scalar == other.scalar
            && self.list.is_some() == other.list.is_some()
            && self.map.is_some() == other.map.is_some()
    }
}

impl Shape {
    /// Untyped data: objects merge key by key (each key owned as a map element), lists are
    /// atomic, scalars are leaves. What Kubernetes uses for types it has no schema for.
    pub fn deduced() -> Shape {
        DEDUCED.clone()
    }

    /// Any value, owned and replaced as a whole.
    pub fn atomic() -> Shape {
        UNTYPED.clone()
    }

    /// A scalar (string, number, boolean).
    pub fn scalar() -> Shape {
        Shape::typed(Typed {
            scalar: true,
            ..Typed::default()
        })
    }

    /// A struct with these named fields; `element` describes undeclared fields (`None`:
    /// treated as untyped).
    pub fn structure(fields: BTreeMap<String, Shape>, element: Option<Shape>) -> Shape {
        Shape::typed(Typed {
            map: Some(MapShape {
                fields,
                element,
                atomic: false,
                open: false,
            }),
            ..Typed::default()
        })
    }

    /// A map (`additionalProperties`) whose values have shape `element`.
    pub fn map_of(element: Shape) -> Shape {
        Shape::structure(BTreeMap::new(), Some(element))
    }

    /// A list of `element`s merging as `list_type`.
    pub fn list_of(element: Shape, list_type: ListType) -> Shape {
        Shape::typed(Typed {
            list: Some(ListShape {
                element,
                list_type,
                key_defaults: BTreeMap::new(),
            }),
            ..Typed::default()
        })
    }

    /// The same shape with these defaults for missing list map keys.
    fn with_key_defaults(mut self, defaults: BTreeMap<String, Value>) -> Shape {
        if let Node::Typed(t) = &mut self.node
            && let Some(l) = &mut t.list
        {
            l.key_defaults = defaults;
        }
        self
    }

    /// The same shape with its map part atomic (`x-kubernetes-map-type: atomic`).
    pub fn into_atomic_map(mut self) -> Shape {
        if let Node::Typed(t) = &mut self.node
            && let Some(m) = &mut t.map
        {
            m.atomic = true;
        }
        self
    }

    fn typed(t: Typed) -> Shape {
        Shape {
            node: Node::Typed(Box::new(t)),
        }
    }

    pub(crate) fn atom(&self) -> Atom<'_> {
        match &self.node {
            Node::Deduced => Atom {
                scalar: true,
                list: Some(ListView {
                    element: &UNTYPED,
                    list_type: &ATOMIC_LIST,
                    key_defaults: None,
                }),
                map: Some(MapView {
                    fields: None,
                    element: Some(&DEDUCED),
                    atomic: false,
                    open: false,
                }),
            },
            Node::Untyped => Atom {
                scalar: true,
                list: Some(ListView {
                    element: &UNTYPED,
                    list_type: &ATOMIC_LIST,
                    key_defaults: None,
                }),
                map: Some(MapView {
                    fields: None,
                    element: Some(&UNTYPED),
                    atomic: true,
                    open: false,
                }),
            },
            Node::Typed(t) => Atom {
                scalar: t.scalar,
                list: t.list.as_ref().map(|l| ListView {
                    element: &l.element,
                    list_type: &l.list_type,
                    key_defaults: Some(&l.key_defaults),
                }),
                map: t.map.as_ref().map(|m| MapView {
                    fields: Some(&m.fields),
                    element: m.element.as_ref(),
                    atomic: m.atomic,
                    open: m.open,
                }),
            },
        }
    }

    /// Converts a CRD version's `openAPIV3Schema` (structural schema JSON). Lists are atomic
    /// unless `x-kubernetes-list-type` says `set` or `map` (with `x-kubernetes-list-map-keys`,
    /// whose `default`s fill missing keys); objects with `properties` are structs, objects
    /// with `additionalProperties` maps, `x-kubernetes-map-type: atomic` makes either atomic;
    /// `x-kubernetes-preserve-unknown-fields` makes undeclared fields untyped
    /// ([`Shape::deduced`]); `x-kubernetes-int-or-string` is a scalar;
    /// `x-kubernetes-embedded-resource` adds `apiVersion`, `kind` and `metadata`. At the root,
    /// `apiVersion` and `kind` are scalars and `metadata` is `ObjectMeta`.
    pub fn from_openapi_v3(schema: &Value) -> Shape {
        let mut shape = convert_openapi(schema);
        add_resource_fields(&mut shape);
        shape
    }

    /// Converts the strategic-merge metadata of a built-in kind: lists with a
    /// `patchMergeKey` are map lists keyed by it (or by their list map keys, with their
    /// defaults), `merge` lists of primitives are sets, `replace` fields and atomic types are
    /// atomic, described objects are structs whose other fields are untyped, `metadata` is
    /// `ObjectMeta`; everything else is [`Shape::deduced`] (lists atomic).
    pub fn from_patch_schema(ts: &TypeSchema) -> Shape {
        let mut shape = convert_type_schema(ts);
        add_resource_fields(&mut shape);
        shape
    }
}

fn add_resource_fields(shape: &mut Shape) {
    if let Node::Typed(t) = &mut shape.node
        && let Some(m) = &mut t.map
    {
        m.fields.insert("apiVersion".into(), Shape::scalar());
        m.fields.insert("kind".into(), Shape::scalar());
        m.fields.insert("metadata".into(), object_meta());
    }
}

/// `metav1.ObjectMeta` as Kubernetes' schema types it.
fn object_meta() -> Shape {
    let mut fields = BTreeMap::new();
    for name in [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        fields.insert(name.to_string(), Shape::scalar());
    }
    fields.insert("labels".into(), Shape::map_of(Shape::scalar()));
    fields.insert("annotations".into(), Shape::map_of(Shape::scalar()));
    fields.insert(
        "finalizers".into(),
        Shape::list_of(Shape::scalar(), ListType::Set),
    );
    let mut owner = BTreeMap::new();
    for name in [
        "apiVersion",
        "kind",
        "name",
        "uid",
        "controller",
        "blockOwnerDeletion",
    ] {
        owner.insert(name.to_string(), Shape::scalar());
    }
    fields.insert(
        "ownerReferences".into(),
        // `+structType=atomic`: an owner reference is owned whole.
        Shape::list_of(
            Shape::structure(owner, None).into_atomic_map(),
            ListType::Map(vec!["uid".into()]),
        ),
    );
    fields.insert(
        "managedFields".into(),
        Shape::list_of(Shape::deduced(), ListType::Atomic),
    );
    Shape::structure(fields, None)
}

fn convert_openapi(s: &Value) -> Shape {
    let Some(obj) = s.as_object() else {
        return Shape::deduced();
    };
    let flag = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
    if flag("x-kubernetes-int-or-string") {
        return Shape::scalar();
    }
    let preserve = flag("x-kubernetes-preserve-unknown-fields");
    let ty = obj.get("type").and_then(Value::as_str);
    let props = obj.get("properties").and_then(Value::as_object);
    let items = obj.get("items");
    let map_atomic = obj.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
    let shape = match ty {
        Some("object") | None if props.is_some() || ty == Some("object") || preserve => {
            if ty.is_none() && props.is_none() {
                return Shape::deduced();
            }
            let mut fields: BTreeMap<String, Shape> = props
                .map(|p| {
                    p.iter()
                        .map(|(k, v)| (k.clone(), convert_openapi(v)))
                        .collect()
                })
                .unwrap_or_default();
            if flag("x-kubernetes-embedded-resource") {
                fields.insert("apiVersion".into(), Shape::scalar());
                fields.insert("kind".into(), Shape::scalar());
                fields.insert("metadata".into(), object_meta());
            }
            let element = if preserve {
                Some(Shape::deduced())
            } else {
                match obj.get("additionalProperties") {
                    Some(Value::Bool(true)) => Some(Shape::deduced()),
                    Some(ap @ Value::Object(_)) => Some(convert_openapi(ap)),
                    _ => None,
                }
            };
            Shape::structure(fields, element)
        }
        Some("array") => {
            let element = items.map(convert_openapi).unwrap_or_else(Shape::deduced);
            let list_type = match obj.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => ListType::Set,
                Some("map") => ListType::Map(
                    obj.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|keys| {
                            keys.iter()
                                .filter_map(|k| k.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                _ => ListType::Atomic,
            };
            let mut key_defaults = BTreeMap::new();
            if let ListType::Map(keys) = &list_type {
                let item_props = items
                    .and_then(|i| i.get("properties"))
                    .and_then(Value::as_object);
                for key in keys {
                    if let Some(d) = item_props
                        .and_then(|p| p.get(key))
                        .and_then(|k| k.get("default"))
                    {
                        key_defaults.insert(key.clone(), d.clone());
                    }
                }
            }
            Shape::list_of(element, list_type).with_key_defaults(key_defaults)
        }
        Some("string" | "integer" | "number" | "boolean") => Shape::scalar(),
        _ => {
            if preserve || ty.is_none() {
                Shape::deduced()
            } else {
                Shape::scalar()
            }
        }
    };
    if map_atomic {
        shape.into_atomic_map()
    } else {
        shape
    }
}

fn convert_type_schema(ts: &TypeSchema) -> Shape {
    if ts.name() == "ObjectMeta" {
        return object_meta();
    }
    let fields = ts
        .fields()
        .map(|(name, f)| (name.to_string(), convert_field(f)))
        .collect();
    let mut shape = Shape::structure(fields, Some(Shape::deduced()));
    if let Node::Typed(t) = &mut shape.node
        && let Some(m) = &mut t.map
    {
        // A described type is a struct: its undescribed keys are fields, not map entries.
        m.open = true;
        m.atomic = ts.is_atomic();
    }
    shape
}

fn convert_field(f: &FieldSchema) -> Shape {
    let described = || f.schema().map(convert_type_schema);
    match f.strategy() {
        PatchStrategy::Replace => Shape::atomic(),
        PatchStrategy::Merge if f.is_atomic_list() => {
            Shape::list_of(described().unwrap_or_else(Shape::deduced), ListType::Atomic)
        }
        PatchStrategy::Merge => match f.merge_key() {
            Some(_) => {
                let keys = f.list_map_keys().into_iter().map(str::to_string).collect();
                Shape::list_of(
                    described().unwrap_or_else(Shape::deduced),
                    ListType::Map(keys),
                )
                .with_key_defaults(
                    f.key_defaults()
                        .map(|(k, v)| (k.to_string(), v.clone()))
                        .collect(),
                )
            }
            None if f.element_kind_name() == "string" => {
                Shape::list_of(Shape::scalar(), ListType::Set)
            }
            None => Shape::deduced(),
        },
        PatchStrategy::Default => described().unwrap_or_else(Shape::deduced),
    }
}

impl Shape {
    pub(crate) fn deduced_ref() -> &'static Shape {
        &DEDUCED
    }
}
