//! Helpers shared by the integration tests: building bodies with k8s-pb + prost as a
//! client would, and comparing decoded JSON with Go's zero-value rules in mind.

#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message as _;
use serde_json::Value;

pub(crate) fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

pub(crate) fn map<V: Clone>(pairs: &[(&str, V)]) -> BTreeMap<String, V> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

pub(crate) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The raw message wrapped in the `k8s\0` + `runtime.Unknown` envelope, as client-go sends.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: s(api_version),
            kind: s(kind),
        }),
        raw: Some(raw),
        content_encoding: s(""),
        content_type: s(""),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

pub(crate) fn body(api_version: &str, kind: &str, message: &impl prost::Message) -> Vec<u8> {
    envelope(api_version, kind, message.encode_to_vec())
}

/// Go writes these for unset non-pointer fields; they carry no information.
pub(crate) fn zeroish(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(zeroish),
    }
}

fn compare(actual: &Value, expected: &Value, path: &str, errors: &mut Vec<String>) {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => {
            for (key, e_value) in e {
                match a.get(key) {
                    Some(a_value) => compare(a_value, e_value, &format!("{path}.{key}"), errors),
                    None => errors.push(format!("{path}.{key}: missing (expected {e_value})")),
                }
            }
            for (key, a_value) in a {
                if !e.contains_key(key) && !zeroish(a_value) {
                    errors.push(format!("{path}.{key}: unexpected {a_value}"));
                }
            }
        }
        (Value::Array(a), Value::Array(e)) if a.len() == e.len() => {
            for (i, (a, e)) in a.iter().zip(e).enumerate() {
                compare(a, e, &format!("{path}[{i}]"), errors);
            }
        }
        (Value::Number(a), Value::Number(e)) if a.as_f64() == e.as_f64() => {}
        _ if actual == expected => {}
        _ => errors.push(format!("{path}: got {actual}, expected {expected}")),
    }
}

/// `actual` has everything `expected` has, equal, and nothing else but Go zero values.
pub(crate) fn assert_equivalent(actual: &Value, expected: &Value) {
    let mut errors = Vec::new();
    compare(actual, expected, "", &mut errors);
    assert!(
        errors.is_empty(),
        "{}\nactual: {}",
        errors.join("\n"),
        serde_json::to_string_pretty(actual).unwrap()
    );
}

/// Decodes `body` and checks the result against `expected`, directly and after a round trip
/// through the k8s-openapi type `T` (as the server's typed codec will do).
pub(crate) fn check<T>(body: &[u8], expected: Value) -> Value
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let (type_meta, decoded) = konverge_protobuf::decode(body).expect("decode");
    assert_eq!(decoded["apiVersion"], type_meta.api_version.as_str());
    assert_eq!(decoded["kind"], type_meta.kind.as_str());
    assert_equivalent(&decoded, &expected);
    let typed: T = serde_json::from_value(decoded.clone())
        .unwrap_or_else(|e| panic!("the k8s-openapi type rejects the decoded JSON: {e}"));
    let expected_typed: T = serde_json::from_value(expected).expect("expected JSON is typed");
    assert_equivalent(
        &serde_json::to_value(&typed).unwrap(),
        &serde_json::to_value(&expected_typed).unwrap(),
    );
    decoded
}
