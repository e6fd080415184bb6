//! Reading request bodies as kube-apiserver reads them: JSON with the duplicate fields
//! `fieldValidation=Strict` refuses (sigs.k8s.io/json's `DisallowDuplicateFields`), and YAML
//! with sigs.k8s.io/yaml's YAML 1.1 scalars (`yes`/`on` are booleans, `0755` is octal), the
//! last of duplicate keys kept, and the first duplicate reported as goyaml's strict mode
//! words it.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// How many strict errors are reported at most (as sigs.k8s.io/json).
const MAX_STRICT_ERRORS: usize = 100;

/// Why a body could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not valid JSON.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// Not valid YAML.
    #[error("{0}")]
    Yaml(#[from] serde_saphyr::Error),
}

/// A decoded body and what strict field validation would refuse in it (`duplicate field
/// "spec.replicas"`, or goyaml's `yaml: unmarshal errors:` text), in document order.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The body; of duplicate fields, the last one counts.
    pub value: Value,
    /// The strict decoding errors, each as kube-apiserver words it.
    pub strict_errors: Vec<String>,
}

/// Decodes a JSON document, noting duplicate fields by path (`a.b`, `items[0].name`).
pub fn json(text: &str) -> Result<Decoded, DecodeError> {
    let value: Value = serde_json::from_str(text)?;
    let mut found = Duplicates::default();
    let mut de = serde_json::Deserializer::from_str(text);
    PathSeed {
        path: String::new(),
        found: &mut found,
    }
    .deserialize(&mut de)?;
    Ok(Decoded {
        value,
        strict_errors: found
            .paths
            .into_iter()
            .map(|p| format!("duplicate field {}", crate::gofmt::quote(&p)))
            .collect(),
    })
}

/// Decodes a YAML document as sigs.k8s.io/yaml does: YAML 1.1 booleans and octal numbers,
/// the last of duplicate keys kept; the first duplicate key is reported as goyaml's strict
/// unmarshal reports it (`yaml: unmarshal errors:\n  line 4: key "name" already set in map`).
pub fn yaml(text: &str) -> Result<Decoded, DecodeError> {
    let lenient = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins,
        legacy_octal_numbers: true,
    };
    let value: Value = serde_saphyr::from_str_with_options(text, lenient)?;
    let strict = serde_saphyr::options! { legacy_octal_numbers: true };
    let strict_errors = match serde_saphyr::from_str_with_options::<Value>(text, strict) {
        Err(e) => match e.without_snippet() {
            serde_saphyr::Error::DuplicateMappingKey { key, location } => vec![format!(
                "yaml: unmarshal errors:\n  line {}: key {} already set in map",
                location.line(),
                crate::gofmt::quote(key.as_deref().unwrap_or(""))
            )],
            _ => Vec::new(),
        },
        Ok(_) => Vec::new(),
    };
    Ok(Decoded {
        value,
        strict_errors,
    })
}

#[derive(Default)]
struct Duplicates {
    paths: Vec<String>,
    seen: BTreeSet<String>,
}

impl Duplicates {
    fn add(&mut self, path: String) {
        if self.paths.len() < MAX_STRICT_ERRORS && self.seen.insert(path.clone()) {
            self.paths.push(path);
        }
    }
}

/// Walks one JSON value at `path`, recording duplicate keys of every object in it.
struct PathSeed<'a> {
    path: String,
    found: &'a mut Duplicates,
}

impl<'de> DeserializeSeed<'de> for PathSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PathSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !keys.insert(key) {
                self.found.add(path.clone());
            }
            map.next_value_seed(PathSeed {
                path,
                found: self.found,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(PathSeed {
                path: format!("{}[{i}]", self.path),
                found: self.found,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicate_json_fields_are_named_by_path_once_each() {
        let text = r#"{"a": 1, "a": 2, "b": {"c": 1, "c": 2, "c": 3}, "e": [{"f": 1, "f": 2}], "g": {"a": 1}}"#;
        let decoded = json(text).unwrap();
        assert_eq!(
            decoded.strict_errors,
            [
                r#"duplicate field "a""#,
                r#"duplicate field "b.c""#,
                r#"duplicate field "e[0].f""#
            ]
        );
        // The last one counts.
        assert_eq!(decoded.value["a"], 2);
        assert_eq!(decoded.value["b"]["c"], 3);
        assert!(
            json(r#"{"a": [1, {"b": 2}]}"#)
                .unwrap()
                .strict_errors
                .is_empty()
        );
    }

    #[test]
    fn yaml_is_read_as_yaml_1_1() {
        let decoded = yaml("a: yes\nb: off\nc: 0755\nd: \"yes\"\ne: 1.5\nf: ~\ng: 0x1F\n").unwrap();
        assert_eq!(
            decoded.value,
            json!({"a": true, "b": false, "c": 493, "d": "yes", "e": 1.5, "f": null, "g": 31})
        );
        assert!(decoded.strict_errors.is_empty());
    }

    #[test]
    fn yaml_duplicates_keep_the_last_and_are_reported_with_their_line() {
        let decoded = yaml("metadata:\n  name: a\n  name: b\n").unwrap();
        assert_eq!(decoded.value, json!({"metadata": {"name": "b"}}));
        assert_eq!(
            decoded.strict_errors,
            ["yaml: unmarshal errors:\n  line 3: key \"name\" already set in map"]
        );
    }
}
