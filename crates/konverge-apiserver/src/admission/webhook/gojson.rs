//! How Go's `encoding/json` words what it finds wrong with a document, for the errors
//! kube-apiserver relays from a webhook's answer (`invalid character 'x' looking for
//! beginning of value`, `json: cannot unmarshal string into Go struct field ...`).

use serde_json::Value;

/// Go's scanner error for `data`, or `None` when it is one valid JSON document.
pub(crate) fn syntax_error(data: &[u8]) -> Option<String> {
    Scanner { data, at: 0 }.document().err()
}

/// What Go's decoder calls the JSON type of `value` in an `UnmarshalTypeError`.
pub(crate) use konverge_apimachinery::gofmt::json_kind as kind;

/// `json: cannot unmarshal <kind> into Go struct field <owner>.<path> of type <go_type>`.
pub(crate) fn field_type_error(value: &Value, owner: &str, path: &str, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {owner}.{path} of type {go_type}",
        kind(value)
    )
}

/// `json: cannot unmarshal <kind> into Go value of type <go_type>`.
pub(crate) fn value_type_error(value: &Value, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go value of type {go_type}",
        kind(value)
    )
}

/// Go's `quoteChar`: how the scanner shows the byte it choked on (as the rune of that
/// value, escaped as `strconv.Quote` escapes it).
fn quote_char(c: u8) -> String {
    let shown = match c {
        b'\'' => "\\'".to_string(),
        b'"' => "\"".to_string(),
        b'\\' => "\\\\".to_string(),
        0x07 => "\\a".to_string(),
        0x08 => "\\b".to_string(),
        0x0c => "\\f".to_string(),
        b'\n' => "\\n".to_string(),
        b'\r' => "\\r".to_string(),
        b'\t' => "\\t".to_string(),
        0x0b => "\\v".to_string(),
        0x00..=0x1f | 0x7f => format!("\\x{c:02x}"),
        0x80..=0x9f | 0xa0 | 0xad => format!("\\u{:04x}", u32::from(c)),
        _ => char::from(c).to_string(),
    };
    format!("'{shown}'")
}

struct Scanner<'a> {
    data: &'a [u8],
    at: usize,
}

/// The container a value sits in.
enum Frame {
    Object,
    Array,
}

type Scan<T> = Result<T, String>;

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.data.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn next(&mut self) -> Scan<u8> {
        let c = self.peek().ok_or_else(end)?;
        self.at += 1;
        Ok(c)
    }

    /// One whole document. Iterative, so that deep nesting cannot exhaust the stack.
    fn document(&mut self) -> Scan<()> {
        let mut stack: Vec<Frame> = Vec::new();
        self.skip_space();
        'value: loop {
            match self.next()? {
                b'{' => {
                    self.skip_space();
                    if self.peek() == Some(b'}') {
                        self.at += 1;
                    } else {
                        self.key()?;
                        stack.push(Frame::Object);
                        continue 'value;
                    }
                }
                b'[' => {
                    self.skip_space();
                    if self.peek() == Some(b']') {
                        self.at += 1;
                    } else {
                        stack.push(Frame::Array);
                        continue 'value;
                    }
                }
                b'"' => self.string()?,
                c @ (b'-' | b'0'..=b'9') => self.number(c)?,
                b't' => self.literal("true")?,
                b'f' => self.literal("false")?,
                b'n' => self.literal("null")?,
                other => return Err(invalid(other, "looking for beginning of value")),
            }
            // A value is complete: read what follows it, closing the containers it ends.
            loop {
                self.skip_space();
                match stack.last() {
                    None => {
                        return match self.peek() {
                            None => Ok(()),
                            Some(c) => Err(invalid(c, "after top-level value")),
                        };
                    }
                    Some(Frame::Object) => match self.next()? {
                        b',' => {
                            self.skip_space();
                            self.key()?;
                            continue 'value;
                        }
                        b'}' => {
                            stack.pop();
                        }
                        c => return Err(invalid(c, "after object key:value pair")),
                    },
                    Some(Frame::Array) => match self.next()? {
                        b',' => {
                            self.skip_space();
                            continue 'value;
                        }
                        b']' => {
                            stack.pop();
                        }
                        c => return Err(invalid(c, "after array element")),
                    },
                }
            }
        }
    }

    /// An object key and its colon.
    fn key(&mut self) -> Scan<()> {
        match self.next()? {
            b'"' => self.string()?,
            c => return Err(invalid(c, "looking for beginning of object key string")),
        }
        self.skip_space();
        match self.next()? {
            b':' => {
                self.skip_space();
                Ok(())
            }
            c => Err(invalid(c, "after object key")),
        }
    }

    /// The rest of a string, its opening quote read.
    fn string(&mut self) -> Scan<()> {
        loop {
            match self.next()? {
                b'"' => return Ok(()),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            let c = self.next()?;
                            if !c.is_ascii_hexdigit() {
                                return Err(invalid(c, "in \\u hexadecimal character escape"));
                            }
                        }
                    }
                    c => return Err(invalid(c, "in string escape code")),
                },
                c if c < 0x20 => return Err(invalid(c, "in string literal")),
                _ => {}
            }
        }
    }

    /// The rest of a number, its first byte read.
    fn number(&mut self, first: u8) -> Scan<()> {
        let mut c = first;
        if c == b'-' {
            c = self.next()?;
            if !c.is_ascii_digit() {
                return Err(invalid(c, "in numeric literal"));
            }
        }
        if c != b'0' {
            while self.peek().is_some_and(|d| d.is_ascii_digit()) {
                self.at += 1;
            }
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            let d = self.next()?;
            if !d.is_ascii_digit() {
                return Err(invalid(d, "after decimal point in numeric literal"));
            }
            while self.peek().is_some_and(|d| d.is_ascii_digit()) {
                self.at += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            let mut d = self.next()?;
            if d == b'+' || d == b'-' {
                d = self.next()?;
            }
            if !d.is_ascii_digit() {
                return Err(invalid(d, "in exponent of numeric literal"));
            }
            while self.peek().is_some_and(|d| d.is_ascii_digit()) {
                self.at += 1;
            }
        }
        Ok(())
    }

    /// The rest of `true`, `false` or `null`, its first byte read.
    fn literal(&mut self, word: &str) -> Scan<()> {
        for expected in word.bytes().skip(1) {
            let c = self.next()?;
            if c != expected {
                return Err(invalid(
                    c,
                    &format!("in literal {word} (expecting {})", quote_char(expected)),
                ));
            }
        }
        Ok(())
    }
}

fn invalid(c: u8, context: &str) -> String {
    format!("invalid character {} {context}", quote_char(c))
}

fn end() -> String {
    "unexpected end of JSON input".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_are_worded_as_go_words_them() {
        let cases: &[(&str, Option<&str>)] = &[
            ("{}", None),
            (r#" {"a": [1, -2.5e+3, true, null, "x\u00e9"]} "#, None),
            (
                "garbage",
                Some("invalid character 'g' looking for beginning of value"),
            ),
            (
                "not json",
                Some("invalid character 'o' in literal null (expecting 'u')"),
            ),
            ("", Some("unexpected end of JSON input")),
            (r#"{"a": 1"#, Some("unexpected end of JSON input")),
            ("{} x", Some("invalid character 'x' after top-level value")),
            (
                "{a}",
                Some("invalid character 'a' looking for beginning of object key string"),
            ),
            (r#"{"a" 1}"#, Some("invalid character '1' after object key")),
            (
                r#"{"a": 1 "b"}"#,
                Some("invalid character '\"' after object key:value pair"),
            ),
            ("[1 2]", Some("invalid character '2' after array element")),
            ("-x", Some("invalid character 'x' in numeric literal")),
            (
                "1.x",
                Some("invalid character 'x' after decimal point in numeric literal"),
            ),
            ("01", Some("invalid character '1' after top-level value")),
            (
                r#""\q""#,
                Some("invalid character 'q' in string escape code"),
            ),
            (
                "<html>",
                Some("invalid character '<' looking for beginning of value"),
            ),
            (
                "[1,]",
                Some("invalid character ']' looking for beginning of value"),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(syntax_error(text.as_bytes()).as_deref(), *want, "{text:?}");
        }
    }
}
