//! Label selectors: the string grammar of `?labelSelector=` and the structured
//! `metav1.LabelSelector`, with the semantics of `k8s.io/apimachinery/pkg/labels`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use super::SelectorError;
use super::validation::{label_key_errors, label_value_errors};
use crate::gofmt;

/// How a [`Requirement`] relates a label's value to its values (Kubernetes'
/// `selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `k=v`: the label exists and equals the value.
    Equals,
    /// `k==v`: the same as [`Operator::Equals`], kept apart to render as written.
    DoubleEquals,
    /// `k!=v`: the label is absent or differs from the value.
    NotEquals,
    /// `k in (a,b)`: the label exists and equals one of the values.
    In,
    /// `k notin (a,b)`: the label is absent or equals none of the values.
    NotIn,
    /// `k`: the label exists.
    Exists,
    /// `!k`: the label does not exist.
    DoesNotExist,
    /// `k>n`: the label exists and, as an integer, is greater than the value.
    GreaterThan,
    /// `k<n`: the label exists and, as an integer, is less than the value.
    LessThan,
}

impl Operator {
    /// The operator's name in Kubernetes (`"="`, `"=="`, `"!="`, `"in"`, `"notin"`,
    /// `"exists"`, `"!"`, `"gt"`, `"lt"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One condition of a label selector: a key, an operator and the operator's values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

/// Joins field errors the way Kubernetes' error aggregate does: one error alone, several
/// de-duplicated inside `[…]` separated by `", "`.
fn aggregate(errs: Vec<String>) -> Option<String> {
    let mut seen = BTreeSet::new();
    let unique: Vec<String> = errs
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    match unique.len() {
        0 => None,
        1 => unique.into_iter().next(),
        _ => Some(format!("[{}]", unique.join(", "))),
    }
}

impl Requirement {
    /// Builds a requirement, checking it as Kubernetes' `labels.NewRequirement` does: the key
    /// must be a valid label key, `In`/`NotIn` need at least one value, the equality operators
    /// exactly one, `Exists`/`DoesNotExist` none, `GreaterThan`/`LessThan` exactly one integer,
    /// and every value must be a valid label value.
    pub fn new(
        key: impl Into<String>,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Self, SelectorError> {
        let key = key.into();
        let mut errs = Vec::new();
        let key_errs = label_key_errors(&key);
        if !key_errs.is_empty() {
            errs.push(format!(
                "key: Invalid value: {}: {}",
                gofmt::quote(&key),
                key_errs.join("; ")
            ));
        }
        let bad_values = || gofmt::sharp_v_strings(&values);
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(format!(
                        "values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty",
                        bad_values()
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {}: exact-match compatibility requires one single value",
                        bad_values()
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(format!(
                        "values: Invalid value: {}: values set must be empty for exists and does not exist",
                        bad_values()
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                        bad_values()
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(format!(
                            "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                            gofmt::quote(v)
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = label_value_errors(v);
            if !value_errs.is_empty() {
                errs.push(format!(
                    "values[{i}][{key}]: Invalid value: {}: {}",
                    gofmt::quote(v),
                    value_errs.join("; ")
                ));
            }
        }
        match aggregate(errs) {
            Some(message) => Err(SelectorError::InvalidRequirement { message }),
            None => Ok(Requirement {
                key,
                operator,
                values,
            }),
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, as given (the string parser sorts and de-duplicates them).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a set of labels satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let has_value = |v: &String| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                labels.get(&self.key).is_some_and(has_value)
            }
            Operator::NotIn | Operator::NotEquals => !labels.get(&self.key).is_some_and(has_value),
            Operator::Exists => labels.contains_key(&self.key),
            Operator::DoesNotExist => !labels.contains_key(&self.key),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(Ok(actual)) = labels.get(&self.key).map(|v| v.parse::<i64>()) else {
                    return false;
                };
                let [wanted] = self.values.as_slice() else {
                    return false;
                };
                let Ok(wanted) = wanted.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > wanted
                } else {
                    actual < wanted
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// Kubernetes' rendering: `!k`, `k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
    /// `k>1`, `k<1`, with several values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
        };
        f.write_str(op)?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        f.write_str(&values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: the AND of its [`Requirement`]s.
///
/// The empty selector matches everything; [`LabelSelector::nothing`] (what a missing
/// `metav1.LabelSelector` converts to) matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches every object.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// The selector that matches no object.
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Parses the string form used by `?labelSelector=` and `kubectl -l`:
    ///
    /// ```text
    /// <selector>    ::= <requirement> | <requirement> "," <selector>
    /// <requirement> ::= [!] KEY [ <set-based> | <exact-match> | <comparison> ]
    /// <set-based>   ::= ( "in" | "notin" ) "(" VALUE { "," VALUE } ")"
    /// <exact-match> ::= ( "=" | "==" | "!=" ) VALUE
    /// <comparison>  ::= ( ">" | "<" ) INTEGER
    /// ```
    ///
    /// Spaces, tabs and line breaks between tokens are ignored; values may be empty. Errors
    /// carry kube-apiserver's messages (for example
    /// `unable to parse requirement: found '', expected: identifier`).
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser::new(selector);
        let mut requirements = parser
            .parse()
            .map_err(|message| SelectorError::InvalidLabelSelector { message })?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// A selector requiring every label of `set` with its value (Kubernetes'
    /// `SelectorFromSet`; like it, the keys and values are not validated). An empty set
    /// selects everything.
    pub fn from_set(set: &BTreeMap<String, String>) -> Self {
        let requirements = set
            .iter()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                operator: Operator::Equals,
                values: vec![v.clone()],
            })
            .collect();
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// Converts a structured `metav1.LabelSelector` (`{"matchLabels": {…},
    /// "matchExpressions": [{"key", "operator", "values"}]}`), as Kubernetes'
    /// `LabelSelectorAsSelector` does: `null` selects nothing, an empty selector everything,
    /// operators are `In`, `NotIn`, `Exists` and `DoesNotExist`.
    pub fn from_json(selector: &Value) -> Result<Self, SelectorError> {
        let map = match selector {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(map) => map,
            other => {
                return Err(SelectorError::MalformedLabelSelector(format!(
                    "json: cannot unmarshal {} into Go value of type v1.LabelSelector",
                    gofmt::json_kind(other)
                )));
            }
        };
        let type_error = |found: &Value, field: &str, ty: &str| {
            SelectorError::MalformedLabelSelector(format!(
                "json: cannot unmarshal {} into Go struct field {field} of type {ty}",
                gofmt::json_kind(found)
            ))
        };
        let mut requirements = Vec::new();
        match map.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                let mut sorted: Vec<(&String, &Value)> = labels.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                for (k, v) in sorted {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => {
                            return Err(type_error(other, "LabelSelector.matchLabels", "string"));
                        }
                    };
                    requirements.push(Requirement::new(k.clone(), Operator::Equals, vec![v])?);
                }
            }
            Some(other) => {
                return Err(type_error(
                    other,
                    "LabelSelector.matchLabels",
                    "map[string]string",
                ));
            }
        }
        match map.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for expr in exprs {
                    let expr = match expr {
                        Value::Object(e) => e,
                        Value::Null => &serde_json::Map::new(),
                        other => {
                            return Err(type_error(
                                other,
                                "LabelSelector.matchExpressions",
                                "v1.LabelSelectorRequirement",
                            ));
                        }
                    };
                    let string_field = |name: &str| -> Result<String, SelectorError> {
                        match expr.get(name) {
                            None | Some(Value::Null) => Ok(String::new()),
                            Some(Value::String(s)) => Ok(s.clone()),
                            Some(other) => Err(type_error(
                                other,
                                &format!("LabelSelector.matchExpressions.{name}"),
                                "string",
                            )),
                        }
                    };
                    let key = string_field("key")?;
                    let operator = string_field("operator")?;
                    let values = match expr.get("values") {
                        None | Some(Value::Null) => Vec::new(),
                        Some(Value::Array(vs)) => vs
                            .iter()
                            .map(|v| match v {
                                Value::String(s) => Ok(s.clone()),
                                Value::Null => Ok(String::new()),
                                other => Err(type_error(
                                    other,
                                    "LabelSelector.matchExpressions.values",
                                    "string",
                                )),
                            })
                            .collect::<Result<_, _>>()?,
                        Some(other) => {
                            return Err(type_error(
                                other,
                                "LabelSelector.matchExpressions.values",
                                "[]string",
                            ));
                        }
                    };
                    let op = match operator.as_str() {
                        "In" => Operator::In,
                        "NotIn" => Operator::NotIn,
                        "Exists" => Operator::Exists,
                        "DoesNotExist" => Operator::DoesNotExist,
                        _ => return Err(SelectorError::InvalidOperator(operator)),
                    };
                    requirements.push(Requirement::new(key, op, values)?);
                }
            }
            Some(other) => {
                return Err(type_error(
                    other,
                    "LabelSelector.matchExpressions",
                    "[]v1.LabelSelectorRequirement",
                ));
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// Adds a requirement (kept sorted by key, as Kubernetes does).
    pub fn add(&mut self, requirement: Requirement) {
        self.requirements.push(requirement);
        self.requirements.sort_by(|a, b| a.key.cmp(&b.key));
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector selects everything (no requirement).
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether this is the selector that selects nothing.
    pub fn matches_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The single value the selector requires for `key` (from `key=v`, `key==v` or
    /// `key in (v)`), if any: lets a server use an index.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [v]) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string form: requirements sorted by key, joined by `,` (empty for the
    /// selectors that match everything or nothing).
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

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

/// Tokens of the label selector grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The byte-oriented lexer of Kubernetes' label selector parser. A NUL byte reads like the
/// end of the string, as it does there.
struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn read(&mut self) -> u8 {
        match self.s.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    /// A slice of the input between two byte positions that are always at ASCII bytes or at
    /// the ends, hence at character boundaries.
    fn slice(&self, start: usize, end: usize) -> String {
        self.s.get(start..end).unwrap_or_default().to_string()
    }

    fn scan_identifier_or_keyword(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut end = start;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            end = self.pos;
        }
        let literal = self.slice(start, end);
        match keyword(&literal) {
            Some(token) => (token, literal),
            None => (Token::Identifier, literal),
        }
    }

    fn scan_special_symbol(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut last: Option<(Token, usize)> = None;
        let mut end = start;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) {
                end = self.pos;
                if let Some(token) = keyword(self.s.get(start..end).unwrap_or_default()) {
                    last = Some((token, end));
                } else if last.is_some() {
                    self.unread();
                    break;
                }
            } else {
                self.unread();
                break;
            }
        }
        match last {
            Some((token, last_end)) => (token, self.slice(start, last_end)),
            None => (
                Token::Error,
                format!("error expected: keyword found '{}'", self.slice(start, end)),
            ),
        }
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_identifier_or_keyword()
        }
    }
}

/// Whether `in`/`notin` are operators (after a key) or plain values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

type ParseResult<T> = Result<T, String>;

impl Parser {
    fn new(selector: &str) -> Self {
        let mut lexer = Lexer {
            s: selector,
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, index: usize, context: Context) -> (Token, String) {
        let (token, literal) = self
            .items
            .get(index)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        let token = match (context, token) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            _ => token,
        };
        (token, literal)
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        self.item(self.position, context)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let item = self.item(self.position, context);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> ParseResult<Vec<Requirement>> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (token, literal) = self.consume(Context::Values);
                    match token {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (next, next_literal) = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{next_literal}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!(
                                "found '{literal}', expected: ',' or 'end of string'"
                            ));
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{literal}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> ParseResult<Requirement> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return Requirement::new(key, op, Vec::new()).map_err(|e| e.to_string());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(key, operator, values.into_iter().collect()).map_err(|e| e.to_string())
    }

    fn parse_key_and_infer_operator(&mut self) -> ParseResult<(String, Option<Operator>)> {
        let mut operator = None;
        let (mut token, mut literal) = self.consume(Context::Values);
        if token == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let errs = label_key_errors(&literal);
        if !errs.is_empty() {
            return Err(format!(
                "<nil>: Invalid value: {}: {}",
                gofmt::quote(&literal),
                errs.join("; ")
            ));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> ParseResult<Operator> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{literal}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    fn parse_values(&mut self) -> ParseResult<BTreeSet<String>> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{literal}' expected: '('"));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (token, _) = self.consume(Context::Values);
                if token != Token::ClosedPar {
                    return Err(format!("found '{literal}', expected: ')'"));
                }
                Ok(set)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!(
                "found '{literal}', expected: ',', ')' or identifier"
            )),
        }
    }

    fn parse_identifiers_list(&mut self) -> ParseResult<BTreeSet<String>> {
        let mut set = BTreeSet::new();
        loop {
            let (token, literal) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    set.insert(literal);
                    let (next, next_literal) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{next_literal}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if next == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set);
                    }
                    if next == Token::Comma {
                        // Kubernetes 1.33 consumes the second comma here.
                        self.consume(Context::Values);
                        set.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{literal}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> ParseResult<BTreeSet<String>> {
        let (token, _) = self.lookahead(Context::Values);
        if matches!(token, Token::EndOfString | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            Ok(BTreeSet::from([literal]))
        } else {
            Err(format!("found '{literal}', expected: identifier"))
        }
    }
}
