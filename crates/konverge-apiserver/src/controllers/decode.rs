//! What the control loops read of a stored object, decoded straight from its bytes.
//!
//! The loops see every write of the store, and need four fields of each: `metadata.uid`,
//! `metadata.ownerReferences`, `metadata.deletionTimestamp` and `metadata.finalizers`.
//! Decoding the whole object into a [`serde_json::Value`] for that built every pod's spec,
//! status and managed fields only to drop them; here serde skips what is not asked for
//! without building it, and strings are borrowed from the stored bytes where they have no
//! escapes.
//!
//! The fields are read as leniently as `Value`'s accessors would read them: a field of an
//! unexpected type counts as absent (a non-string uid, a non-array list), an owner reference
//! lacking a string `uid`, `apiVersion` or `kind` is skipped, `blockOwnerDeletion` holds only
//! when it is `true`, and `deletionTimestamp` counts when the key is present at all.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The parts of a stored object the control loops look at.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Summary<'a> {
    /// `metadata.uid`.
    pub uid: Cow<'a, str>,
    /// `metadata.ownerReferences`, the well-formed ones.
    pub owners: Vec<OwnerParts<'a>>,
    /// Whether `metadata.deletionTimestamp` is there.
    pub deleting: bool,
    /// The string entries of `metadata.finalizers`.
    pub finalizers: Vec<Cow<'a, str>>,
}

/// One well-formed `ownerReferences` entry.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct OwnerParts<'a> {
    /// `uid`.
    pub uid: Cow<'a, str>,
    /// `apiVersion`.
    pub api_version: Cow<'a, str>,
    /// `kind`.
    pub kind: Cow<'a, str>,
    /// `blockOwnerDeletion: true`.
    pub block_owner_deletion: bool,
}

/// Reads what the loops need of a stored object; `None` for bytes that are not a JSON
/// object, or an object without a string `metadata.uid` (such an object is not indexed).
pub(crate) fn summary(value: &[u8]) -> Option<Summary<'_>> {
    // Only an object has metadata (serde would also read a struct from an array).
    let first = value.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    let stored: Stored<'_> = serde_json::from_slice(value).ok()?;
    let meta = stored.metadata?;
    Some(Summary {
        uid: meta.uid?,
        owners: meta.owner_references.0.into_iter().flatten().collect(),
        deleting: meta.deletion_timestamp,
        finalizers: meta.finalizers.0.into_iter().flatten().collect(),
    })
}

#[derive(Deserialize)]
struct Stored<'a> {
    #[serde(borrow, default, deserialize_with = "object_or_none")]
    metadata: Option<Meta<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    #[serde(borrow, default, deserialize_with = "lenient")]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "lenient")]
    owner_references: List<Option<OwnerParts<'a>>>,
    #[serde(default, deserialize_with = "present")]
    deletion_timestamp: bool,
    #[serde(borrow, default, deserialize_with = "lenient")]
    finalizers: List<Option<Cow<'a, str>>>,
}

/// `metadata` as an object; anything else (null, a string, an array) is no metadata.
fn object_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Meta<'de>>, D::Error> {
    struct MetaVisitor;
    impl<'de> Visitor<'de> for MetaVisitor {
        type Value = Option<Meta<'de>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("object metadata")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            Meta::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            drain_seq(seq).map(|()| None)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(MetaVisitor)
}

/// A present key, whatever its value (even `null`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(d).map(|_| true)
}

/// A list; anything but an array reads as an empty one.
#[derive(Debug, Default)]
struct List<T>(Vec<T>);

/// How a value of an expected JSON type becomes `Self`; any other type gives the default.
trait Lenient<'de>: Default {
    fn from_str(_: Cow<'de, str>) -> Self {
        Self::default()
    }
    fn from_bool(_: bool) -> Self {
        Self::default()
    }
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Self, A::Error> {
        drain_seq(seq).map(|()| Self::default())
    }
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn lenient<'de, D: Deserializer<'de>, T: Lenient<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(LenientVisitor(PhantomData))
}

struct LenientVisitor<T>(PhantomData<T>);

impl<'de, T: Lenient<'de>> Visitor<'de> for LenientVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<T, E> {
        Ok(T::from_str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Ok(T::from_str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<T, E> {
        Ok(T::from_str(Cow::Owned(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        Ok(T::from_bool(v))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_none<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::from_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_map(map)
    }
}

/// One element of a list, read leniently.
struct Element<T>(T);

impl<'de, T: Lenient<'de>> Deserialize<'de> for Element<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d).map(Element)
    }
}

impl<'de> Lenient<'de> for Option<Cow<'de, str>> {
    fn from_str(s: Cow<'de, str>) -> Self {
        Some(s)
    }
}

impl<'de> Lenient<'de> for bool {
    fn from_bool(b: bool) -> Self {
        b
    }
}

impl<'de, T: Lenient<'de>> Lenient<'de> for List<T> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Element(item)) = seq.next_element::<Element<T>>()? {
            items.push(item);
        }
        Ok(List(items))
    }
}

impl<'de> Lenient<'de> for Option<OwnerParts<'de>> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let (mut uid, mut api_version, mut kind, mut block) = (None, None, None, false);
        while let Some(field) = map.next_key::<RefField>()? {
            match field {
                RefField::Uid => uid = map.next_value::<Element<Option<Cow<'de, str>>>>()?.0,
                RefField::ApiVersion => {
                    api_version = map.next_value::<Element<Option<Cow<'de, str>>>>()?.0
                }
                RefField::Kind => kind = map.next_value::<Element<Option<Cow<'de, str>>>>()?.0,
                RefField::BlockOwnerDeletion => block = map.next_value::<Element<bool>>()?.0,
                RefField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(match (uid, api_version, kind) {
            (Some(uid), Some(api_version), Some(kind)) => Some(OwnerParts {
                uid,
                api_version,
                kind,
                block_owner_deletion: block,
            }),
            _ => None,
        })
    }
}

/// The keys of an owner reference the loops read (matched without allocating).
enum RefField {
    Uid,
    ApiVersion,
    Kind,
    BlockOwnerDeletion,
    Other,
}

impl<'de> Deserialize<'de> for RefField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = RefField;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RefField, E> {
                Ok(match v {
                    "uid" => RefField::Uid,
                    "apiVersion" => RefField::ApiVersion,
                    "kind" => RefField::Kind,
                    "blockOwnerDeletion" => RefField::BlockOwnerDeletion,
                    _ => RefField::Other,
                })
            }
        }
        d.deserialize_identifier(FieldVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// uid, owners (uid, apiVersion, kind, blockOwnerDeletion), deleting, finalizers.
    type Flat = (
        String,
        Vec<(String, String, String, bool)>,
        bool,
        Vec<String>,
    );

    /// What reading the object as a `Value` gives: the reading `summary` must match.
    fn by_value(bytes: &[u8]) -> Option<Flat> {
        let obj: Value = serde_json::from_slice(bytes).ok()?;
        let md = obj.get("metadata")?;
        let uid = md.get("uid")?.as_str()?.to_string();
        let owners = md
            .get("ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| {
                        Some((
                            r.get("uid")?.as_str()?.to_string(),
                            r.get("apiVersion")?.as_str()?.to_string(),
                            r.get("kind")?.as_str()?.to_string(),
                            r.get("blockOwnerDeletion") == Some(&Value::Bool(true)),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some((
            uid,
            owners,
            md.get("deletionTimestamp").is_some(),
            crate::resources::meta::finalizers(&obj),
        ))
    }

    fn flat(bytes: &[u8]) -> Option<Flat> {
        let s = summary(bytes)?;
        Some((
            s.uid.into_owned(),
            s.owners
                .into_iter()
                .map(|o| {
                    (
                        o.uid.into_owned(),
                        o.api_version.into_owned(),
                        o.kind.into_owned(),
                        o.block_owner_deletion,
                    )
                })
                .collect(),
            s.deleting,
            s.finalizers.into_iter().map(Cow::into_owned).collect(),
        ))
    }

    #[test]
    fn reads_what_a_value_reading_reads() {
        let cases = [
            json!({"metadata": {"uid": "u1", "name": "a"}, "spec": {"x": [1, 2, {"y": null}]}}),
            json!({"metadata": {"uid": "u\"2", "finalizers": ["a", 3, "b\\n", null],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "m", "fieldsV1": {"f:a": {}}}],
            "ownerReferences": [
                {"uid": "o1", "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                 "controller": true, "blockOwnerDeletion": true},
                {"uid": "o2", "apiVersion": "v1", "kind": "ConfigMap", "blockOwnerDeletion": "true"},
                {"uid": 3, "apiVersion": "v1", "kind": "ConfigMap"},
                {"apiVersion": "v1", "kind": "ConfigMap"},
                "not a reference",
                null,
                {"uid": "o4", "apiVersion": "v1", "kind": "ConfigMap", "blockOwnerDeletion": false}
            ]}}),
            json!({"metadata": {"uid": "u3", "deletionTimestamp": null, "finalizers": "x",
                "ownerReferences": {"uid": "o"}}}),
            json!({"metadata": {"uid": "u4", "finalizers": null, "ownerReferences": null}}),
            json!({"metadata": {"uid": 5}}),
            json!({"metadata": {"uid": null}}),
            json!({"metadata": {"name": "no-uid"}}),
            json!({"metadata": null}),
            json!({"metadata": "text"}),
            json!({"metadata": ["u6"]}),
            json!({"kind": "NoMetadata"}),
            json!(["metadata"]),
            json!("text"),
            json!(7),
        ];
        for case in cases {
            let bytes = serde_json::to_vec(&case).expect("json");
            assert_eq!(flat(&bytes), by_value(&bytes), "{case}");
        }
        for broken in [
            &b""[..],
            b"{",
            b"{\"metadata\": {\"uid\": \"u\"}",
            b"  {\"metadata\": {\"uid\": \"u\"}} x",
        ] {
            assert_eq!(flat(broken), None, "{}", String::from_utf8_lossy(broken));
        }
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let bytes = br#"{"metadata": {"uid": "plain", "finalizers": ["f"],
            "ownerReferences": [{"uid": "o", "apiVersion": "v1", "kind": "Pod"}]}}"#;
        let s = summary(bytes).expect("summary");
        assert!(matches!(s.uid, Cow::Borrowed("plain")));
        assert!(matches!(s.finalizers[0], Cow::Borrowed("f")));
        assert!(matches!(s.owners[0].uid, Cow::Borrowed("o")));
        assert!(!s.deleting);
    }
}
