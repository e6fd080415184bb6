//! Field selectors: the string grammar of `?fieldSelector=`, with the semantics of
//! `k8s.io/apimachinery/pkg/fields`.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use super::SelectorError;

/// How a [`FieldRequirement`] compares a field with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

impl FieldOperator {
    /// The operator as Kubernetes names it (`"="` or `"!="`).
    pub fn as_str(self) -> &'static str {
        match self {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        }
    }
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    field: String,
    operator: FieldOperator,
    value: String,
}

impl FieldRequirement {
    /// A requirement on `field` (not validated: the server decides which fields exist).
    pub fn new(
        field: impl Into<String>,
        operator: FieldOperator,
        value: impl Into<String>,
    ) -> Self {
        FieldRequirement {
            field: field.into(),
            operator,
            value: value.into(),
        }
    }

    /// The field, for example `metadata.name`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The operator.
    pub fn operator(&self) -> FieldOperator {
        self.operator
    }

    /// The value, unescaped.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Whether an object whose field has `actual` (`None`: the field is absent, which
    /// Kubernetes treats as the empty string) satisfies this requirement.
    pub fn matches_value(&self, actual: Option<&str>) -> bool {
        let actual = actual.unwrap_or("");
        match self.operator {
            FieldOperator::Equals => actual == self.value,
            FieldOperator::NotEquals => actual != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            self.field,
            self.operator.as_str(),
            escape_value(&self.value)
        )
    }
}

/// A field selector: the AND of its [`FieldRequirement`]s. The empty selector matches
/// everything.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches every object.
    pub fn everything() -> Self {
        FieldSelector::default()
    }

    /// Parses `field=value`, `field==value` and `field!=value` terms separated by commas.
    /// In values, `\,`, `\=` and `\\` stand for `,`, `=` and `\`; an unescaped `=` or `,` and
    /// any other escape are errors. Nothing is trimmed: spaces belong to the field or value,
    /// as in Kubernetes. Terms are sorted, and a bare `=` is dropped, as Kubernetes does.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut requirements = Vec::new();
        for term in terms {
            if term.is_empty() {
                continue;
            }
            let Some((field, op, raw_value)) = split_term(term) else {
                return Err(SelectorError::InvalidFieldSelectorTerm {
                    selector: selector.to_string(),
                    term: term.to_string(),
                });
            };
            let value = unescape_value(raw_value)?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                operator: op,
                value,
            });
        }
        // Kubernetes' identity transform drops requirements whose field and value are both
        // empty (a bare "=").
        requirements.retain(|r| !(r.field.is_empty() && r.value.is_empty()));
        Ok(FieldSelector { requirements })
    }

    /// A selector requiring `field=value`.
    pub fn one_term_equal(field: impl Into<String>, value: impl Into<String>) -> Self {
        FieldSelector {
            requirements: vec![FieldRequirement::new(field, FieldOperator::Equals, value)],
        }
    }

    /// The requirements, in the order Kubernetes keeps them (sorted by their text).
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// The fields the selector mentions, for the server to reject unsupported ones.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|r| r.field.as_str())
    }

    /// Whether this selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object passes the selector; `get` returns the object's value for a field
    /// (`None` for an absent field, which compares as the empty string).
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(get(&r.field).as_deref()))
    }

    /// The single value the selector requires for `field` (from `field=v`), if any: lets a
    /// server use an index (for example `metadata.name` or `spec.nodeName`).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    /// The canonical form: the terms joined by `,`, values escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

/// Escapes `\`, `,` and `=` in a field selector value.
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Reverses [`escape_value`], with Kubernetes' errors for unknown escapes and unescaped
/// `,`/`=`.
pub fn unescape_value(value: &str) -> Result<String, SelectorError> {
    if !value.contains(['\\', ',', '=']) {
        return Ok(value.to_string());
    }
    let mut out = String::with_capacity(value.len());
    let mut in_slash = false;
    for c in value.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(SelectorError::InvalidEscapeSequence {
                        sequence: format!("\\{c}"),
                    });
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(SelectorError::UnescapedCharacter { character: c }),
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError::InvalidEscapeSequence {
            sequence: "\\".to_string(),
        });
    }
    Ok(out)
}

/// Splits on commas that are not escaped; escapes stay in the terms.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Splits a term at the first operator (`!=`, then `==`, then `=` at each position).
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (text, op) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(text) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

/// The value of a dotted field path (`metadata.name`, `spec.nodeName`, `status.phase`) in an
/// object, as a field selector compares it: strings as they are, booleans and numbers in
/// their JSON text; `None` when the path is absent, `null`, an object or a list.
pub fn field_value(object: &Value, path: &str) -> Option<String> {
    let mut current = object;
    for segment in path.split('.') {
        current = current.as_object()?.get(segment)?;
    }
    match current {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}
