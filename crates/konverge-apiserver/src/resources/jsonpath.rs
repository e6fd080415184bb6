//! The JSONPath subset custom resources use in `additionalPrinterColumns` (and the scale
//! subresource's paths): `.spec.replicas`, `.status.conditions[0].type`,
//! `.spec.items[*].name`, `.status.conditions[?(@.type=="Ready")].status`, with or without
//! the `{...}` braces kubectl's templates use.

use serde_json::{Value, json};

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `[3]` (negative counts from the end).
    Index(i64),
    /// `[*]` or `.*`.
    All,
    /// `[?(@.a.b=="v")]`: the elements whose field at the path equals the value.
    Filter(Vec<String>, Value),
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    text: String,
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses `text`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let trimmed = text.trim();
        let inner = trimmed
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(trimmed);
        let inner = inner.strip_prefix('$').unwrap_or(inner);
        if !inner.starts_with('.') && !inner.starts_with('[') {
            return Err(format!(
                "unrecognized character in action: {:?}",
                first(inner)
            ));
        }
        let chars: Vec<char> = inner.chars().collect();
        let mut steps = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    i += 1;
                    let start = i;
                    while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                        i += 1;
                    }
                    let name: String = chars[start..i].iter().collect();
                    match name.as_str() {
                        "" if i >= chars.len() && steps.is_empty() => {}
                        "" => return Err("invalid array index or empty field name".into()),
                        "*" => steps.push(Step::All),
                        _ => steps.push(Step::Field(name)),
                    }
                }
                '[' => {
                    let close =
                        find_close(&chars, i).ok_or_else(|| "unterminated array".to_string())?;
                    let body: String = chars[i + 1..close].iter().collect();
                    steps.push(bracket(body.trim())?);
                    i = close + 1;
                }
                c => return Err(format!("unrecognized character in action: {c:?}")),
            }
        }
        Ok(JsonPath {
            text: text.to_string(),
            steps,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Every value the path selects in `obj`.
    pub fn find<'a>(&self, obj: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![obj];
        for step in &self.steps {
            let mut next = Vec::new();
            for value in current {
                match step {
                    Step::Field(name) => next.extend(value.get(name.as_str())),
                    Step::Index(i) => {
                        if let Some(items) = value.as_array() {
                            let len = items.len() as i64;
                            let at = if *i < 0 { len + i } else { *i };
                            if (0..len).contains(&at) {
                                next.push(&items[at as usize]);
                            }
                        }
                    }
                    Step::All => match value {
                        Value::Array(items) => next.extend(items.iter()),
                        Value::Object(map) => next.extend(map.values()),
                        _ => {}
                    },
                    Step::Filter(path, wanted) => {
                        if let Some(items) = value.as_array() {
                            next.extend(items.iter().filter(|item| {
                                path.iter()
                                    .try_fold(*item, |v, f| v.get(f.as_str()))
                                    .is_some_and(|v| v == wanted)
                            }));
                        }
                    }
                }
            }
            current = next;
        }
        current
    }

    /// A Table cell of a column of `type_` (`string`, `integer`, `number`, `boolean`, `date`):
    /// the first value found (a date as a human age), several values joined by commas, and
    /// `null` when nothing is found, as kube-apiserver's custom resource table convertor does.
    pub fn cell(&self, obj: &Value, type_: &str) -> Value {
        let found = self.find(obj);
        match found.as_slice() {
            [] => Value::Null,
            [one] => {
                if type_ == "date"
                    && let Some(t) = one.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok())
                {
                    let seconds = jiff::Timestamp::now().as_second() - t.as_second();
                    return json!(crate::resources::meta::human_duration(seconds));
                }
                (*one).clone()
            }
            many => {
                let parts: Vec<String> = many
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                json!(parts.join(","))
            }
        }
    }
}

fn first(text: &str) -> String {
    text.chars().next().map(String::from).unwrap_or_default()
}

/// The `]` closing the `[` at `open` (quotes and parentheses inside are skipped).
fn find_close(chars: &[char], open: usize) -> Option<usize> {
    let mut quote = None;
    let mut depth = 0;
    for (i, &c) in chars.iter().enumerate().skip(open + 1) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, ']') if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote(text: &str) -> Option<String> {
    let t = text.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = t.strip_prefix(q).and_then(|t| t.strip_suffix(q)) {
            return Some(inner.to_string());
        }
    }
    None
}

fn bracket(body: &str) -> Result<Step, String> {
    if body == "*" {
        return Ok(Step::All);
    }
    if let Some(name) = unquote(body) {
        return Ok(Step::Field(name));
    }
    if let Ok(i) = body.parse::<i64>() {
        return Ok(Step::Index(i));
    }
    if let Some(filter) = body
        .strip_prefix("?(")
        .and_then(|f| f.strip_suffix(')'))
        .map(str::trim)
    {
        let (lhs, rhs) = filter
            .split_once("==")
            .ok_or_else(|| format!("unsupported filter: {filter}"))?;
        let path = lhs
            .trim()
            .strip_prefix("@.")
            .ok_or_else(|| format!("unsupported filter: {filter}"))?;
        let rhs = rhs.trim();
        let wanted = match unquote(rhs) {
            Some(s) => Value::String(s),
            None => {
                serde_json::from_str(rhs).map_err(|_| format!("unsupported filter value: {rhs}"))?
            }
        };
        return Ok(Step::Filter(
            path.split('.').map(String::from).collect(),
            wanted,
        ));
    }
    Err(format!("invalid array index {body}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_select_what_kubectl_selects() {
        let obj = json!({
            "spec": {"replicas": 3, "items": [{"name": "a"}, {"name": "b"}]},
            "status": {"conditions": [
                {"type": "Synced", "status": "False"},
                {"type": "Ready", "status": "True"},
            ]},
        });
        let cell = |p: &str, t: &str| JsonPath::parse(p).unwrap().cell(&obj, t);
        assert_eq!(cell(".spec.replicas", "integer"), json!(3));
        assert_eq!(cell("{.spec.items[1].name}", "string"), json!("b"));
        assert_eq!(cell(".spec.items[-1].name", "string"), json!("b"));
        assert_eq!(cell(".spec.items[*].name", "string"), json!("a,b"));
        assert_eq!(
            cell(".status.conditions[?(@.type==\"Ready\")].status", "string"),
            json!("True")
        );
        assert_eq!(cell(".spec['replicas']", "integer"), json!(3));
        assert_eq!(cell(".spec.missing", "string"), Value::Null);
        assert!(JsonPath::parse("spec.replicas").is_err());
        assert!(JsonPath::parse(".spec[").is_err());
        assert!(JsonPath::parse(".spec..x").is_err());
    }
}
