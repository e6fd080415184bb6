//! Reading request bodies as kube-apiserver reads them: JSON with the duplicate fields
//! `fieldValidation=Strict` refuses (sigs.k8s.io/json's `DisallowDuplicateFields`), and YAML
//! as sigs.k8s.io/yaml converts it to JSON (YAML 1.1 scalars: `yes`/`on` are booleans, `0755`
//! is octal; keys and floats written as Go writes them), the last of duplicate keys kept, and
//! the duplicates reported as goyaml's strict mode words them.

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

/// Where each field of a JSON body came, in document order: what kube's typed decoder meets
/// first, so its unknown and duplicate fields are reported in the order it meets them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldOrder {
    /// Each field path's first occurrence, counted in document order.
    first: std::collections::HashMap<String, usize>,
    /// Each duplicated path, with where its second occurrence came.
    duplicates: Vec<(String, usize)>,
}

impl FieldOrder {
    /// The strict decoding errors of a body decoded into a built-in type, as sigs.k8s.io/json
    /// reports them: `unknown` fields (which the type does not have) and duplicate fields
    /// together, in the order the decoder meets them; a duplicate of an unknown field, or
    /// inside one, is only unknown.
    pub fn typed_errors(&self, unknown: &[String]) -> Vec<String> {
        let within_unknown = |path: &str| {
            unknown.iter().any(|u| {
                path == u
                    || path
                        .strip_prefix(u.as_str())
                        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
            })
        };
        let mut found: Vec<(usize, String)> = unknown
            .iter()
            .map(|path| {
                let at = self.first.get(path).copied().unwrap_or(usize::MAX);
                (at, format!("unknown field {}", crate::gofmt::quote(path)))
            })
            .collect();
        found.extend(
            self.duplicates
                .iter()
                .filter(|(path, _)| !within_unknown(path))
                .map(|(path, at)| {
                    (
                        *at,
                        format!("duplicate field {}", crate::gofmt::quote(path)),
                    )
                }),
        );
        found.sort_by_key(|(at, _)| *at);
        found.into_iter().map(|(_, error)| error).collect()
    }
}

/// A decoded body and what strict field validation would refuse in it (`duplicate field
/// "spec.replicas"`, or goyaml's `yaml: unmarshal errors:` text), in document order.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The body; of duplicate fields, the last one counts.
    pub value: Value,
    /// The strict decoding errors, each as kube-apiserver words it.
    pub strict_errors: Vec<String>,
    /// Where each field came in a JSON body (none for YAML, whose fields kube meets in the
    /// sorted order of its JSON form).
    pub order: Option<FieldOrder>,
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
            .iter()
            .map(|p| format!("duplicate field {}", crate::gofmt::quote(p)))
            .collect(),
        order: Some(FieldOrder {
            first: found.first,
            duplicates: found.paths.into_iter().zip(found.at).collect(),
        }),
    })
}

/// A finite float as it reads back after Go's JSON encoder wrote it: with no fraction and
/// below 1e21 it is written as an integer (`2.0` is `2`, `2e3` is `2000`).
fn go_float(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 1e21 {
        if v >= i64::MIN as f64 && v < i64::MAX as f64 {
            return Value::from(v as i64);
        }
        if v >= 0.0 && v < u64::MAX as f64 {
            return Value::from(v as u64);
        }
    }
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// The numbers of a JSON body as kube-apiserver's unstructured decoding leaves them (the
/// custom resources' path: sigs.k8s.io/json keeps a number an int64 when it reads as one
/// and makes it a float64 otherwise, and Go's encoder writes a float64 with no fraction as
/// an integer). `2.0` and `1e3` are stored and served as `2` and `1000`, as a Go client
/// decoding them into an integer field needs. (An integer beyond int64, which kube makes a
/// float64 and writes rounded to 17 digits, is left as it is.)
pub fn numbers_as_unstructured(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.is_finite()) {
                *value = go_float(f);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(numbers_as_unstructured),
        Value::Object(fields) => fields.values_mut().for_each(numbers_as_unstructured),
        _ => {}
    }
}

/// Decodes a YAML document as sigs.k8s.io/yaml does (goyaml v2, then `json.Marshal`): YAML
/// 1.1 booleans and octal numbers; the last of duplicate keys kept; keys that are not strings
/// written as Go writes them (`yes:` is `"true"`, `0x10:` is `"16"`, `1e6:` is `"1e+06"`);
/// floats with no fraction written as integers (`replicas: 2e3` is `2000`, as Go's JSON
/// encoder prints it); only the first document read. Duplicate keys are reported as goyaml's
/// strict unmarshal reports them, every one on the line of its value
/// (`yaml: unmarshal errors:\n  line 4: key "name" already set in map\n  line 9: ...`).
pub fn yaml(text: &str) -> Result<Decoded, DecodeError> {
    let lenient = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins,
        legacy_octal_numbers: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
    };
    let GoYaml { value, duplicates } =
        match serde_saphyr::from_str_with_options::<GoYaml>(text, lenient.clone()) {
            Ok(document) => document,
            // goyaml reads the first document and ignores the rest.
            Err(e) if is_multiple_documents(&e) => {
                let documents: Vec<GoYaml> =
                    serde_saphyr::from_multiple_with_options(text, lenient)?;
                documents.into_iter().next().unwrap_or(GoYaml {
                    value: Value::Null,
                    duplicates: Vec::new(),
                })
            }
            Err(e) => return Err(e.into()),
        };
    let duplicates = if duplicates.is_empty() {
        // Keys that are numbers are compared by value before the document is read: the
        // strict parser finds the first such duplicate.
        first_numeric_duplicate(text)
    } else {
        duplicates
    };
    let strict_errors = if duplicates.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "yaml: unmarshal errors:\n  {}",
            duplicates.join("\n  ")
        )]
    };
    Ok(Decoded {
        value,
        strict_errors,
        order: None,
    })
}

/// The first duplicate key the strict parser finds, as goyaml words it (the key's line).
fn first_numeric_duplicate(text: &str) -> Vec<String> {
    let strict = serde_saphyr::options! {
        legacy_octal_numbers: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
    };
    match serde_saphyr::from_str_with_options::<GoYaml>(text, strict) {
        Err(e) => match e.without_snippet() {
            serde_saphyr::Error::DuplicateMappingKey { key, location } => vec![format!(
                "line {}: key {} already set in map",
                location.line(),
                go_key_literal(key.as_deref().unwrap_or(""))
            )],
            _ => Vec::new(),
        },
        Ok(_) => Vec::new(),
    }
}

fn is_multiple_documents(error: &serde_saphyr::Error) -> bool {
    error.to_string().contains("multiple YAML documents")
}

/// A duplicate key as goyaml's message prints it (Go's `%#v` of the resolved key): a string
/// quoted, a number or boolean as it resolved.
fn go_key_literal(text: &str) -> String {
    match serde_saphyr::from_str::<GoKey>(text) {
        Ok(GoKey::Resolved(resolved)) => resolved,
        Ok(GoKey::Text(text)) => crate::gofmt::quote(&text),
        Ok(GoKey::Null) => "<nil>".into(),
        Err(_) => crate::gofmt::quote(text),
    }
}

/// A YAML value read into JSON as sigs.k8s.io/yaml converts it, and the keys set twice in
/// its mappings, as goyaml's strict mode reports them (`line 4: key "name" already set in
/// map`: the line of the second value; a mapping's duplicates inside its values first).
struct GoYaml {
    value: Value,
    duplicates: Vec<String>,
}

impl<'de> serde::Deserialize<'de> for GoYaml {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(GoYamlVisitor)
    }
}

impl GoYaml {
    fn plain(value: Value) -> GoYaml {
        GoYaml {
            value,
            duplicates: Vec::new(),
        }
    }
}

struct GoYamlVisitor;

impl<'de> Visitor<'de> for GoYamlVisitor {
    type Value = GoYaml;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<GoYaml, E> {
        Ok(GoYaml::plain(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<GoYaml, E> {
        Ok(GoYaml::plain(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<GoYaml, E> {
        Ok(GoYaml::plain(v.into()))
    }
    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<GoYaml, E> {
        self.visit_f64(v as f64)
    }
    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<GoYaml, E> {
        self.visit_f64(v as f64)
    }
    /// Go's JSON encoder writes a float with no fraction below 1e21 as an integer, and
    /// refuses infinities and NaN.
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<GoYaml, E> {
        if !v.is_finite() {
            let shown = if v.is_nan() {
                "NaN"
            } else if v > 0.0 {
                "+Inf"
            } else {
                "-Inf"
            };
            return Err(E::custom(format!("json: unsupported value: {shown}")));
        }
        Ok(GoYaml::plain(go_float(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<GoYaml, E> {
        Ok(GoYaml::plain(Value::String(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<GoYaml, E> {
        Ok(GoYaml::plain(Value::String(v)))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<GoYaml, E> {
        Ok(GoYaml::plain(Value::String(
            String::from_utf8_lossy(v).into_owned(),
        )))
    }
    fn visit_unit<E>(self) -> Result<GoYaml, E> {
        Ok(GoYaml::plain(Value::Null))
    }
    fn visit_none<E>(self) -> Result<GoYaml, E> {
        Ok(GoYaml::plain(Value::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<GoYaml, D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<GoYaml, A::Error> {
        let mut items = Vec::new();
        let mut duplicates = Vec::new();
        while let Some(item) = seq.next_element::<GoYaml>()? {
            duplicates.extend(item.duplicates);
            items.push(item.value);
        }
        Ok(GoYaml {
            value: Value::Array(items),
            duplicates,
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<GoYaml, A::Error> {
        let mut object = serde_json::Map::new();
        let mut duplicates = Vec::new();
        while let Some(key) = map.next_key::<GoKey>()? {
            let spanned: serde_saphyr::Spanned<GoYaml> = map.next_value()?;
            let GoYaml {
                value,
                duplicates: inner,
            } = spanned.value;
            duplicates.extend(inner);
            let (key, literal) = match key {
                GoKey::Text(text) => {
                    let literal = crate::gofmt::quote(&text);
                    (text, literal)
                }
                GoKey::Resolved(resolved) => (resolved.clone(), resolved),
                GoKey::Null => {
                    return Err(serde::de::Error::custom(format!(
                        "unsupported map key of type: %!s(<nil>), key: <nil>, value: {}",
                        go_value_literal(&value)
                    )));
                }
            };
            if object.insert(key, value).is_some() {
                duplicates.push(format!(
                    "line {}: key {literal} already set in map",
                    spanned.referenced.line()
                ));
            }
        }
        Ok(GoYaml {
            value: Value::Object(object),
            duplicates,
        })
    }
}

/// A value as Go's `%+#v` prints the scalars sigs.k8s.io/yaml reports with a bad key.
fn go_value_literal(value: &Value) -> String {
    match value {
        Value::String(s) => crate::gofmt::quote(s),
        Value::Null => "<nil>".into(),
        other => other.to_string(),
    }
}

/// A mapping key as goyaml resolves it, before sigs.k8s.io/yaml turns it into a string.
enum GoKey {
    /// A string key.
    Text(String),
    /// A number or boolean, written as sigs.k8s.io/yaml writes it.
    Resolved(String),
    /// `~` or `null`, which JSON cannot have as a key.
    Null,
}

impl<'de> serde::Deserialize<'de> for GoKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(GoKeyVisitor)
    }
}

struct GoKeyVisitor;

impl<'de> Visitor<'de> for GoKeyVisitor {
    type Value = GoKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML mapping key")
    }

    fn visit_bool<E>(self, v: bool) -> Result<GoKey, E> {
        Ok(GoKey::Resolved(v.to_string()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<GoKey, E> {
        Ok(GoKey::Resolved(v.to_string()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<GoKey, E> {
        Ok(GoKey::Resolved(v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<GoKey, E> {
        Ok(GoKey::Resolved(go_float32_g(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<GoKey, E> {
        Ok(GoKey::Text(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<GoKey, E> {
        Ok(GoKey::Text(v))
    }
    fn visit_unit<E>(self) -> Result<GoKey, E> {
        Ok(GoKey::Null)
    }
    fn visit_none<E>(self) -> Result<GoKey, E> {
        Ok(GoKey::Null)
    }
}

/// `strconv.FormatFloat(v, 'g', -1, 32)`: the shortest digits that read back as the same
/// 32-bit float, in exponent form when `%g` chooses it (a decimal exponent below -4 or, at
/// the shortest precision, from 6 on), e.g. `1.5`, `1000`, `1e+06`, `3.1415927`.
fn go_float32_g(v: f64) -> String {
    if v.is_nan() {
        return ".nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let single = v as f32;
    // Rust's `{:e}` writes the shortest round-trip digits: `d[.ddd]e<exp>`.
    let shortest = format!("{:e}", single.abs());
    let (mantissa, exponent) = shortest.split_once('e').unwrap_or((&shortest, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if single.is_sign_negative() && single != 0.0 {
        "-"
    } else {
        ""
    };
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{fraction}e{exp_sign}{:02}", exponent.abs());
    }
    // Plain decimal: the digits with the point after `exponent + 1` of them.
    let point = exponent + 1;
    let text = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        let (whole, fraction) = digits.split_at(point as usize);
        format!("{whole}.{fraction}")
    };
    format!("{sign}{text}")
}

#[derive(Default)]
struct Duplicates {
    paths: Vec<String>,
    /// Where each of `paths` was met.
    at: Vec<usize>,
    seen: BTreeSet<String>,
    /// Each path's first occurrence.
    first: std::collections::HashMap<String, usize>,
    /// How many fields were met so far.
    met: usize,
}

impl Duplicates {
    fn meet(&mut self, path: &str) {
        self.met += 1;
        if !self.first.contains_key(path) {
            self.first.insert(path.to_string(), self.met);
        }
    }

    fn add(&mut self, path: String) {
        if self.paths.len() < MAX_STRICT_ERRORS && self.seen.insert(path.clone()) {
            self.paths.push(path);
            self.at.push(self.met);
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
            self.found.meet(&path);
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
    fn numbers_read_as_kube_reads_a_custom_resource() {
        let mut body: Value = serde_json::from_str(
            r#"{"a": 2.0, "b": [1e3, 2.5, 7], "c": {"d": 12.0e2, "e": 9007199254740993, "f": 0.25}}"#,
        )
        .unwrap();
        numbers_as_unstructured(&mut body);
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"a":2,"b":[1000,2.5,7],"c":{"d":1200,"e":9007199254740993,"f":0.25}}"#
        );
    }

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

    /// Cases whose results sigs.k8s.io/yaml v1.4.0 (goyaml v2) gives, from its tests
    /// (`TestYAMLToJSON`, goyaml's `unmarshalTests`) and its conversion rules.
    #[test]
    fn yaml_reads_as_sigs_k8s_io_yaml_converts() {
        let cases: &[(&str, Value)] = &[
            // Flow collections, trailing commas included.
            ("seq: [A,B,C,]", json!({"seq": ["A", "B", "C"]})),
            (
                "a: [1, 2, ]\nb: {c: 1, }\n",
                json!({"a": [1, 2], "b": {"c": 1}}),
            ),
            ("{a: 1, }", json!({"a": 1})),
            (r#"{"a": [1, {"b": 2,},], }"#, json!({"a": [1, {"b": 2}]})),
            ("a: {b}", json!({"a": {"b": null}})),
            // Floats with no fraction are integers in the JSON.
            (
                "a: 2e3\nb: 3.0\nc: 08\nd: 6.8523e+5",
                json!({"a": 2000, "b": 3, "c": 8, "d": 685230}),
            ),
            (
                "a: 1.5\nb: .5\nc: -.5",
                json!({"a": 1.5, "b": 0.5, "c": -0.5}),
            ),
            ("a: 1e21", json!({"a": 1e21})),
            // Keys that are not strings.
            ("1: a", json!({"1": "a"})),
            ("True: a", json!({"true": "a"})),
            ("no: a", json!({"false": "a"})),
            ("x: 1\ny: 2\n", json!({"x": 1, "true": 2})),
            ("on: push", json!({"true": "push"})),
            ("1.2: a", json!({"1.2": "a"})),
            ("1.50: a", json!({"1.5": "a"})),
            ("1e3: a", json!({"1000": "a"})),
            ("1e6: a", json!({"1e+06": "a"})),
            ("3.14159265358979: a", json!({"3.1415927": "a"})),
            ("1e+36: a", json!({"1e+36": "a"})),
            ("0x10: a", json!({"16": "a"})),
            ("0777: a", json!({"511": "a"})),
            ("2001-12-14: a", json!({"2001-12-14": "a"})),
            ("\"1e+36\": a\n'yes': b", json!({"1e+36": "a", "yes": "b"})),
            // Keys that resolve to the same value: the last one is kept.
            ("true: a\nyes: b\n", json!({"true": "b"})),
            ("0xB: a\n11: b\n", json!({"11": "b"})),
            // Only the first document.
            ("a: 1\n---\nb: 2\n", json!({"a": 1})),
            // Timestamps and quoted scalars stay strings.
            (
                "a: 2001-12-14\nb: \"123\"\nc: '0777'",
                json!({"a": "2001-12-14", "b": "123", "c": "0777"}),
            ),
            ("a: !!binary aGVsbG8=", json!({"a": "hello"})),
            (
                "a: &x {b: 1}\nc: *x\n",
                json!({"a": {"b": 1}, "c": {"b": 1}}),
            ),
        ];
        for (text, expected) in cases {
            let decoded = yaml(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(&decoded.value, expected, "{text:?}");
        }
    }

    #[test]
    fn yaml_that_json_cannot_hold_is_refused() {
        for (text, message) in [
            ("a: .inf", "json: unsupported value: +Inf"),
            ("a: -.inf", "json: unsupported value: -Inf"),
            ("a: .nan", "json: unsupported value: NaN"),
            (
                "~: a",
                "unsupported map key of type: %!s(<nil>), key: <nil>, value: \"a\"",
            ),
        ] {
            let error = yaml(text).expect_err(text).to_string();
            assert!(error.contains(message), "{text:?}: {error}");
        }
        for text in ["a: [, ]", "a: [a,, b]", "a: {, }"] {
            assert!(yaml(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn go_formats_float_keys_with_single_precision() {
        for (v, text) in [
            (1.5, "1.5"),
            (1000.0, "1000"),
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1e36, "1e+36"),
        ] {
            assert_eq!(go_float32_g(v), text, "{v}");
        }
    }

    #[test]
    fn yaml_duplicates_keep_the_last_and_are_reported_with_their_line() {
        let decoded = yaml("metadata:\n  name: a\n  name: b\n").unwrap();
        assert_eq!(decoded.value, json!({"metadata": {"name": "b"}}));
        assert_eq!(
            decoded.strict_errors,
            ["yaml: unmarshal errors:\n  line 3: key \"name\" already set in map"]
        );
        // A key that is not a string is printed as Go prints its value.
        let decoded = yaml("a: 1\n9: 2\n9: 4").unwrap();
        assert_eq!(
            decoded.strict_errors,
            ["yaml: unmarshal errors:\n  line 3: key 9 already set in map"]
        );
        // goyaml's rules (its strict tests and `setMapIndex`): every duplicate, on the line
        // of its value (a block mapping's first entry), those inside a value first; keys that
        // resolve alike are duplicates.
        for (text, expected) in [
            (
                "a:\n  x: 1\na:\n  y: 2\n",
                "line 4: key \"a\" already set in map",
            ),
            (
                "a: 1\nb: 1\nb: 2\na: 2\n",
                "line 3: key \"b\" already set in map\n  line 4: key \"a\" already set in map",
            ),
            (
                "a: 1\na:\n  b: 1\n  b: 2\n",
                "line 4: key \"b\" already set in map\n  line 3: key \"a\" already set in map",
            ),
            ("true: a\nyes: b\n", "line 2: key true already set in map"),
        ] {
            let decoded = yaml(text).unwrap();
            assert_eq!(
                decoded.strict_errors,
                [format!("yaml: unmarshal errors:\n  {expected}")],
                "{text:?}"
            );
        }
    }
}
