//! Decoding watched objects without their `metadata.managedFields`.
//!
//! Dropping managedFields after an object is decoded still allocates them first: for a list
//! page of 500 objects that is every entry's `fieldsV1` tree (a map per field path), several
//! megabytes built and freed per page, which sets the process's peak memory during the
//! initial list and leaves the heap fragmented. [`Lean<K>`] decodes `K` through a
//! deserializer that passes the JSON through unchanged except that the `managedFields` value
//! inside the top-level `metadata` object is skipped by the parser (`IgnoredAny`), so it is
//! never allocated.
//!
//! kube-runtime's watcher decodes whatever type its `Api` names, so the informer watches an
//! `Api<Lean<K>>` at the same URL as the caller's `Api<K>` and unwraps each object.

use std::borrow::Cow;
use std::fmt;

use kube::Resource;
use kube::api::ObjectMeta;
use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess,
    SeqAccess, Visitor,
};
use serde::{Deserialize, Serialize};

/// A `K` decoded without `metadata.managedFields`.
#[derive(Clone, Debug)]
pub(crate) struct Lean<K>(pub(crate) K);

/// `Lean<K>`'s dynamic type: the URL the caller's `Api<K>` lists and watches.
///
/// An `Api<Lean<K>>` is only ever listed and watched, and kube builds its requests from
/// [`Resource::url_path`] alone; the group, version and resource name are read back from
/// that URL (`/api/v1/...` or `/apis/<group>/<version>/...`) and the kind, which a URL does
/// not carry, is reported as the resource name.
#[derive(Clone, Debug)]
pub(crate) struct LeanType {
    url: String,
    group: String,
    version: String,
    plural: String,
}

impl LeanType {
    /// The type of the objects `api` lists, at `api`'s URL (namespace included).
    pub(crate) fn of<K: Resource>(api: &kube::Api<K>) -> LeanType {
        let url = api.resource_url().to_string();
        let parts: Vec<&str> = url.split('/').filter(|p| !p.is_empty()).collect();
        let (group, version) = match parts.as_slice() {
            ["api", version, ..] => ("", *version),
            ["apis", group, version, ..] => (*group, *version),
            _ => ("", ""),
        };
        LeanType {
            group: group.to_string(),
            version: version.to_string(),
            plural: parts.last().copied().unwrap_or_default().to_string(),
            url,
        }
    }
}

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = LeanType;
    type Scope = K::Scope;

    fn kind(dt: &LeanType) -> Cow<'_, str> {
        Cow::Borrowed(&dt.plural)
    }

    fn group(dt: &LeanType) -> Cow<'_, str> {
        Cow::Borrowed(&dt.group)
    }

    fn version(dt: &LeanType) -> Cow<'_, str> {
        Cow::Borrowed(&dt.version)
    }

    fn plural(dt: &LeanType) -> Cow<'_, str> {
        Cow::Borrowed(&dt.plural)
    }

    fn metadata_api() -> bool {
        K::metadata_api()
    }

    fn url_path(dt: &LeanType, _namespace: Option<&str>) -> String {
        // The caller's URL already names its namespace, if any.
        dt.url.clone()
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

impl<K: Serialize> Serialize for Lean<K> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(Filter {
            inner: d,
            level: Level::Object,
        })
        .map(Lean)
    }
}

/// Where in the object a [`Filter`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The object itself: its `metadata` value is filtered.
    Object,
    /// The object's `metadata`: its `managedFields` entry is skipped.
    Metadata,
}

/// A deserializer passing everything through, except that maps at `level` are filtered.
struct Filter<D> {
    inner: D,
    level: Level,
}

/// Forwards the visitor-taking `Deserializer` methods with the visitor wrapped.
macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method($($arg,)* Wrap { inner: visitor, level: self.level })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filter<D> {
    type Error = D::Error;

    forward! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// A visitor passing everything through, filtering the maps (and options or newtypes of
/// maps) it is shown.
struct Wrap<V> {
    inner: V,
    level: Level,
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Filter {
            inner: d,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(Filter {
            inner: d,
            level: self.level,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(FilterMap {
            inner: map,
            level: self.level,
            filter_value: false,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A map key, borrowed from the input when the format allows.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_string()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A map whose `managedFields` entry is skipped (at [`Level::Metadata`]), or whose
/// `metadata` value is filtered (at [`Level::Object`]).
struct FilterMap<A> {
    inner: A,
    level: Level,
    /// Whether the value about to be read is the object's `metadata`.
    filter_value: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilterMap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            match (self.level, key.as_str()) {
                (Level::Metadata, "managedFields") => {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                (Level::Object, "metadata") => self.filter_value = true,
                _ => self.filter_value = false,
            }
            return match key {
                Key::Borrowed(k) => seed.deserialize(BorrowedStrDeserializer::new(k)),
                Key::Owned(k) => seed.deserialize(StringDeserializer::new(k)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.filter_value) {
            self.inner.next_value_seed(MetadataSeed(seed))
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// Deserializes the object's `metadata` through a [`Level::Metadata`] filter.
struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Filter {
            inner: d,
            level: Level::Metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DynamicObject, PartialObjectMeta};
    use serde_json::json;

    fn object() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "a",
                "namespace": "ns",
                "resourceVersion": "7",
                "labels": {"managedFields": "a label, not the field"},
                "managedFields": [{
                    "manager": "kubectl",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {"f:k": {}}}
                }],
                "annotations": {"note": "after managedFields"}
            },
            "data": {"k": "v", "managedFields": "data, not metadata"}
        })
    }

    #[test]
    fn skips_managed_fields_and_keeps_everything_else() {
        let text = object().to_string();
        let lean: Lean<ConfigMap> = serde_json::from_str(&text).unwrap();
        let mut full: ConfigMap = serde_json::from_str(&text).unwrap();
        assert!(full.metadata.managed_fields.is_some());
        assert_eq!(lean.0.metadata.managed_fields, None);
        full.metadata.managed_fields = None;
        assert_eq!(lean.0, full, "nothing but managedFields is left out");
    }

    #[test]
    fn works_for_dynamic_objects_and_metadata_only_objects() {
        let text = object().to_string();
        let dynamic: Lean<DynamicObject> = serde_json::from_str(&text).unwrap();
        assert_eq!(dynamic.0.metadata.managed_fields, None);
        assert_eq!(dynamic.0.data["data"]["k"], "v");
        assert_eq!(
            dynamic.0.metadata.annotations.unwrap()["note"],
            "after managedFields"
        );
        let meta: Lean<PartialObjectMeta<ConfigMap>> = serde_json::from_str(&text).unwrap();
        assert_eq!(meta.0.metadata.managed_fields, None);
        assert_eq!(meta.0.metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn inside_lists_and_watch_events_too() {
        let list = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": [object(), object()]});
        let list: kube::core::ObjectList<Lean<ConfigMap>> =
            serde_json::from_str(&list.to_string()).unwrap();
        assert!(
            list.items
                .iter()
                .all(|o| o.0.metadata.managed_fields.is_none())
        );
        assert_eq!(list.items.len(), 2);
        // The object before its type: the event is buffered before it is decoded.
        let event = json!({"object": object(), "type": "MODIFIED"});
        let event: kube::core::WatchEvent<Lean<ConfigMap>> =
            serde_json::from_str(&event.to_string()).unwrap();
        let kube::core::WatchEvent::Modified(obj) = event else {
            panic!("a MODIFIED event");
        };
        assert_eq!(obj.0.metadata.managed_fields, None);
        assert_eq!(obj.0.metadata.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn bad_input_is_still_an_error() {
        let mut bad = object();
        bad["metadata"]["name"] = json!(7);
        assert!(serde_json::from_str::<Lean<ConfigMap>>(&bad.to_string()).is_err());
        assert!(serde_json::from_str::<Lean<ConfigMap>>("[1, 2]").is_err());
        let mut bad_fields = object();
        bad_fields["metadata"]["managedFields"] = json!("not a list");
        // Skipped unread: what the cache would drop anyway cannot fail the decode.
        assert!(serde_json::from_str::<Lean<ConfigMap>>(&bad_fields.to_string()).is_ok());
    }

    #[test]
    fn its_type_names_the_callers_url() {
        let client = || {
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
                .unwrap()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let api = kube::Api::<ConfigMap>::namespaced(client(), "ns");
        let dt = LeanType::of(&api);
        assert_eq!(
            Lean::<ConfigMap>::url_path(&dt, None),
            "/api/v1/namespaces/ns/configmaps"
        );
        assert_eq!(Lean::<ConfigMap>::version(&dt), "v1");
        assert_eq!(Lean::<ConfigMap>::group(&dt), "");
        let deployments = kube::Api::<k8s_openapi::api::apps::v1::Deployment>::all(client());
        let dt = LeanType::of(&deployments);
        assert_eq!(Lean::<ConfigMap>::group(&dt), "apps");
        assert_eq!(Lean::<ConfigMap>::plural(&dt), "deployments");
    }
}
