//! Rendering of values the way Go's `fmt` package prints them.
//!
//! Kubernetes builds many of its error messages with `%q`, `%v` and `%s` over strings and over
//! decoded JSON (`map[string]interface{}`, `[]interface{}`, `int64`, `float64`, …). These
//! helpers reproduce that output so our messages read exactly like kube-apiserver's.

use serde_json::{Number, Value};

/// `%q` of a Go string: double-quoted, with Go's escapes for non-printable characters.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if is_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols
/// and the ASCII space.
fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    // Format characters (Unicode category Cf) that Go does not consider printable.
    !matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e000}'..='\u{f8ff}'
    )
}

/// `%#v` of a Go `[]string`: `[]string{"a", "b"}`, or `[]string(nil)` when empty (the only
/// way an empty slice reaches an error message in the code paths we reproduce).
pub(crate) fn sharp_v_strings(values: &[String]) -> String {
    if values.is_empty() {
        return "[]string(nil)".to_string();
    }
    let items: Vec<String> = values.iter().map(|v| quote(v)).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// Whether a JSON number decodes to an `int64` in kube-apiserver (the unstructured converter
/// and the patch decoder keep integers as `int64`; everything else is a `float64`).
fn is_int64(n: &Number) -> bool {
    n.is_i64()
}

/// `%v` of a JSON number decoded as Kubernetes decodes it.
fn number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    match n.as_f64() {
        Some(f) => float(f),
        None => n.to_string(),
    }
}

/// `%v` of a Go `float64`: the shortest representation, with an exponent when it is below
/// -4 or at least 21.
fn float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".to_string()
        } else {
            "0".to_string()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exponent) = match sci.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i32>().unwrap_or(0)),
        None => return sci,
    };
    if !(-4..21).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        format!("{f}")
    }
}

/// `%v` of a decoded JSON value (`map[string]interface{}` prints as `map[k:v …]` with sorted
/// keys, slices as `[a b]`, `nil` as `<nil>`).
pub(crate) fn v(value: &Value) -> String {
    let mut out = String::new();
    write_v(&mut out, value);
    out
}

fn write_v(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_v(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("map[");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                if let Some(item) = map.get(key.as_str()) {
                    write_v(out, item);
                }
            }
            out.push(']');
        }
    }
}

/// `%v` of several lists at once (Go's `fmt.Sprint` of a `[][]interface{}`).
pub(crate) fn v_lists(lists: &[&[Value]]) -> String {
    let items: Vec<String> = lists
        .iter()
        .map(|list| v(&Value::Array(list.to_vec())))
        .collect();
    format!("[{}]", items.join(" "))
}

/// `%s` of a decoded JSON value: strings print as themselves, other values with Go's
/// `%!s(type=value)` marker.
pub(crate) fn s(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".to_string(),
        Value::Bool(_) | Value::Number(_) => format!("%!s({}={})", type_name(value), v(value)),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(s).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", map.get(k.as_str()).map(s).unwrap_or_default()))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `reflect.TypeOf(x).String()` for a decoded JSON value.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if is_int64(n) => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The name `encoding/json` uses for a JSON value's kind in "cannot unmarshal X" errors.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
    }

    #[test]
    fn prints_values_like_go() {
        assert_eq!(
            v(&json!({"b": [1, "x", null], "a": {"c": true}})),
            "map[a:map[c:true] b:[1 x <nil>]]"
        );
        assert_eq!(v(&json!(1.5)), "1.5");
        assert_eq!(v(&json!(1e21)), "1e+21");
        assert_eq!(v(&json!(0.00001)), "1e-05");
        assert_eq!(s(&json!(5)), "%!s(int64=5)");
        assert_eq!(
            sharp_v_strings(&["a".into(), "b".into()]),
            "[]string{\"a\", \"b\"}"
        );
    }
}
