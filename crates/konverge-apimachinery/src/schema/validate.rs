//! Value validation of custom objects: kube-openapi's `SchemaValidator` (validators in its
//! order, its messages, its `MatchCount` for choosing which anyOf/oneOf failures to report,
//! its de-duplication by message), the conversion of its results to field errors done by
//! apiextensions-apiserver (`kubeOpenAPIResultToFieldErrors`), the embedded-resource checks
//! (`objectmeta.Validate`) and the list-type set/map uniqueness checks (`listtype`).

use serde_json::{Map, Value, json};

use super::{AdditionalProperties, Structural, formats};
use crate::field::{ErrorType, FieldError};
use crate::gofmt;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Code {
    InvalidType,
    Required,
    TooLong,
    Enum,
    MaxItems,
    TooManyProperties,
    Other,
}

#[derive(Debug, Clone)]
enum OErr {
    Validation {
        code: Code,
        name: String,
        value: Option<Value>,
        valid: i64,
        values: Vec<Value>,
        message: String,
    },
    Plain(String),
}

impl OErr {
    fn message(&self) -> &str {
        match self {
            OErr::Validation { message, .. } | OErr::Plain(message) => message,
        }
    }
}

fn verr(code: Code, name: &str, value: Option<Value>, message: String) -> OErr {
    OErr::Validation {
        code,
        name: name.to_string(),
        value,
        valid: -1,
        values: Vec::new(),
        message,
    }
}

#[derive(Default)]
struct Res {
    errors: Vec<OErr>,
    count: usize,
}

impl Res {
    fn add(&mut self, e: OErr) {
        if !self.errors.iter().any(|x| x.message() == e.message()) {
            self.errors.push(e);
        }
    }

    fn merge(&mut self, other: Res) {
        for e in other.errors {
            self.add(e);
        }
        self.count += other.count;
    }

    fn err(e: OErr) -> Res {
        Res {
            errors: vec![e],
            count: 0,
        }
    }

    fn valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// `%v` of a float64 bound or value.
fn fv(f: f64) -> String {
    gofmt::v(&json!(f))
}

fn join(base: &str, name: &str) -> String {
    match (base.is_empty(), name.is_empty()) {
        (_, true) => base.to_string(),
        (true, false) => name.to_string(),
        (false, false) => format!("{base}.{name}"),
    }
}

/// Validates `value` against `s` with error paths under `base`.
pub(super) fn validate_schema(s: &Structural, base: &str, value: &Value) -> Vec<FieldError> {
    let res = node(s, "", value, 0);
    to_field_errors(base, res.errors)
}

/// The whole-object validation of a custom resource (schema, embedded resources, list types).
pub(super) fn validate_object(s: &Structural, obj: &Value) -> Vec<FieldError> {
    let mut errs = validate_schema(s, "", obj);
    embedded_walk("", obj, s, &mut errs, 0);
    list_types("", s, obj, &mut errs, 0);
    errs
}

fn to_field_errors(base: &str, errors: Vec<OErr>) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|e| match e {
            OErr::Plain(msg) => FieldError::invalid(base, json!(""), msg),
            OErr::Validation {
                code,
                name,
                value,
                valid,
                values,
                message,
            } => {
                let path = if name.is_empty() || name == "." {
                    base.to_string()
                } else {
                    join(base, name.trim_start_matches('.'))
                };
                let value_or_empty = value.clone().unwrap_or(json!(""));
                match code {
                    Code::Required => FieldError::required(path, ""),
                    Code::Enum => {
                        let supported: Vec<String> = values
                            .iter()
                            .map(|v| match v {
                                Value::String(s) => s.clone(),
                                other => json_marshal(other),
                            })
                            .collect();
                        FieldError::not_supported(path, value.unwrap_or(Value::Null), &supported)
                    }
                    Code::TooLong => FieldError::new(
                        ErrorType::TooLong,
                        path,
                        None,
                        format!("may not be more than {valid} bytes"),
                    ),
                    Code::MaxItems | Code::TooManyProperties => FieldError::new(
                        ErrorType::TooMany,
                        path,
                        value,
                        format!("must have at most {valid} items"),
                    ),
                    Code::InvalidType => {
                        FieldError::new(ErrorType::TypeInvalid, path, Some(value_or_empty), message)
                    }
                    Code::Other => FieldError::invalid(path, value_or_empty, message),
                }
            }
        })
        .collect()
}

/// Go's `json.Marshal` of a decoded value (integral floats print without a fraction).
fn json_marshal(v: &Value) -> String {
    match v {
        Value::Number(n) if n.as_i64().is_none() && n.as_u64().is_none() => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e21 {
                format!("{f:.0}")
            } else {
                n.to_string()
            }
        }
        other => other.to_string(),
    }
}

fn types(s: &Structural) -> Vec<&str> {
    if s.int_or_string {
        vec!["integer", "string"]
    } else if s.type_.is_empty() {
        Vec::new()
    } else {
        vec![s.type_.as_str()]
    }
}

/// The format kube-apiserver keeps (unsupported formats are dropped for CRDs).
fn effective_format(s: &Structural) -> &str {
    if formats::supported(&s.format).is_some() {
        &s.format
    } else {
        ""
    }
}

#[derive(PartialEq, Clone, Copy)]
enum Kind {
    Bool,
    Int,
    Float,
    Str,
    Array,
    Object,
}

fn kind(v: &Value) -> Option<Kind> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => Kind::Bool,
        Value::Number(n) if n.is_i64() => Kind::Int,
        Value::Number(_) => Kind::Float,
        Value::String(_) => Kind::Str,
        Value::Array(_) => Kind::Array,
        Value::Object(_) => Kind::Object,
    })
}

const MAX_DEPTH: usize = 10_000;

/// `SchemaValidator.Validate`.
fn node(s: &Structural, path: &str, data: &Value, depth: usize) -> Res {
    let mut result = Res::default();
    if depth > MAX_DEPTH {
        return result;
    }
    let Some(k) = kind(data) else {
        result.merge(type_validator(s, path, data));
        result.merge(common_validator(s, path, data));
        return result;
    };
    let format = effective_format(s);
    let t = types(s);
    let mut run = |r: Res| {
        result.merge(r);
        result.count += 1;
    };
    if !t.is_empty() || !format.is_empty() {
        run(type_validator(s, path, data));
    }
    run(props_validator(s, path, data, depth));
    if k == Kind::Str {
        run(string_validator(s, path, data));
        if !format.is_empty() {
            run(format_validator(s, path, data));
        }
    }
    if matches!(k, Kind::Int | Kind::Float) {
        run(number_validator(s, path, data));
    }
    if k == Kind::Array {
        run(slice_validator(s, path, data, depth));
    }
    run(common_validator(s, path, data));
    if k == Kind::Object {
        run(object_validator(s, path, data, depth));
    }
    result.count += 1;
    result
}

fn invalid_type(path: &str, type_name: &str, value: &str) -> OErr {
    verr(
        Code::InvalidType,
        path,
        Some(json!(value)),
        format!(
            "{path} in body must be of type {type_name}: {}",
            gofmt::quote(value)
        ),
    )
}

fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_991.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    if f == f.trunc() {
        return true;
    }
    let g = f.trunc();
    let diff = (f - g).abs();
    if g == 0.0 {
        return diff < 1e-9 * f64::MIN_POSITIVE;
    }
    diff / (f.abs() + g.abs()) < 1e-9
}

fn type_validator(s: &Structural, path: &str, data: &Value) -> Res {
    let t = types(s);
    let Some(k) = kind(data) else {
        if !t.is_empty() && !s.nullable {
            return Res::err(invalid_type(path, &t.join(","), "null"));
        }
        return Res {
            errors: Vec::new(),
            count: 1,
        };
    };
    let (sch_type, fmt) = match k {
        Kind::Bool => ("boolean", ""),
        Kind::Str => ("string", ""),
        Kind::Int => ("integer", "int64"),
        Kind::Float => ("number", "float64"),
        Kind::Array => ("array", ""),
        Kind::Object => ("object", ""),
    };
    let format = effective_format(s);
    let contains = |x: &str| t.contains(&x);
    let is_float_int =
        k == Kind::Float && data.as_f64().is_some_and(is_json_integer) && contains("integer");
    let is_int_float = k == Kind::Int && contains("number");
    if k != Kind::Str
        && k != Kind::Array
        && !format.is_empty()
        && !(contains(sch_type) || fmt == format || is_float_int || is_int_float)
    {
        return Res::err(invalid_type(path, format, fmt));
    }
    if !(contains("number") || contains("integer") || format.is_empty())
        && matches!(k, Kind::Str | Kind::Array)
    {
        return Res {
            errors: Vec::new(),
            count: 1,
        };
    }
    if !(contains(sch_type) || is_float_int || is_int_float) {
        return Res::err(invalid_type(path, &t.join(","), sch_type));
    }
    Res {
        errors: Vec::new(),
        count: 1,
    }
}

fn composite(msg: String) -> OErr {
    OErr::Plain(msg)
}

fn props_validator(s: &Structural, path: &str, data: &Value, depth: usize) -> Res {
    let mut main = Res::default();
    let q = gofmt::quote(path);
    if !s.any_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut succeeded = false;
        for sub in &s.any_of {
            let r = node(sub, path, data, depth + 1);
            if r.valid() {
                best = None;
                succeeded = true;
                first_success = Some(r);
                break;
            }
            if best.as_ref().is_none_or(|b| r.count > b.count) {
                best = Some(r);
            }
        }
        if !succeeded {
            main.add(composite(format!(
                "{q} must validate at least one schema (anyOf)"
            )));
        }
        if let Some(b) = best {
            main.merge(b);
        } else if let Some(f) = first_success {
            main.merge(f);
        }
    }
    if !s.one_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut validated = 0;
        for sub in &s.one_of {
            let r = node(sub, path, data, depth + 1);
            if r.valid() {
                validated += 1;
                best = None;
                if first_success.is_none() {
                    first_success = Some(r);
                }
                continue;
            }
            if validated == 0 && best.as_ref().is_none_or(|b| r.count > b.count) {
                best = Some(r);
            }
        }
        if validated != 1 {
            let extra = if validated == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {validated} valid alternatives")
            };
            main.add(composite(format!(
                "{q} must validate one and only one schema (oneOf). {extra}"
            )));
            if let Some(b) = best {
                main.merge(b);
            }
        } else if let Some(f) = first_success {
            main.merge(f);
        }
    }
    if !s.all_of.is_empty() {
        let mut validated = 0;
        for sub in &s.all_of {
            let r = node(sub, path, data, depth + 1);
            if r.valid() {
                validated += 1;
            }
            main.merge(r);
        }
        if validated != s.all_of.len() {
            let extra = if validated == 0 {
                ". None validated"
            } else {
                ""
            };
            main.add(composite(format!(
                "{q} must validate all the schemas (allOf){extra}"
            )));
        }
    }
    if let Some(not) = &s.not
        && node(not, path, data, depth + 1).valid()
    {
        main.add(composite(format!("{q} must not validate the schema (not)")));
    }
    main.count += 1;
    main
}

fn string_validator(s: &Structural, path: &str, data: &Value) -> Res {
    let Some(text) = data.as_str() else {
        return Res::default();
    };
    let len = text.chars().count() as i64;
    if let Some(max) = s.max_length
        && len > max
    {
        return Res::err(OErr::Validation {
            code: Code::TooLong,
            name: path.to_string(),
            value: Some(data.clone()),
            valid: max,
            values: Vec::new(),
            message: format!("{path} in body should be at most {max} chars long"),
        });
    }
    if let Some(min) = s.min_length
        && len < min
    {
        return Res::err(verr(
            Code::Other,
            path,
            Some(data.clone()),
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(p) = &s.pattern {
        let shown = match (&s.compiled_pattern, super::regex::Regex::new(p)) {
            (Some(re), _) if re.is_match(text) => return Res::default(),
            (Some(_), _) => p.clone(),
            (None, Err(e)) => format!("{p}, but pattern is invalid: {}", e.0),
            (None, Ok(re)) if re.is_match(text) => return Res::default(),
            (None, Ok(_)) => p.clone(),
        };
        return Res::err(verr(
            Code::Other,
            path,
            Some(data.clone()),
            format!("{path} in body should match '{shown}'"),
        ));
    }
    Res::default()
}

fn format_validator(s: &Structural, path: &str, data: &Value) -> Res {
    let (Some(text), Some(name)) = (data.as_str(), formats::supported(&s.format)) else {
        return Res::default();
    };
    if formats::validates(&name, text) {
        return Res::default();
    }
    Res::err(verr(
        Code::InvalidType,
        path,
        Some(data.clone()),
        format!(
            "{path} in body must be of type {}: {}",
            s.format,
            gofmt::quote(text)
        ),
    ))
}

/// `IsValueValidAgainstRange` for CRDs (where integer/number formats are dropped).
fn range_check(val: &Value, type_name: &str, prefix: &str, path: &str) -> Option<OErr> {
    if type_name != "integer" {
        return None;
    }
    let ok = match val {
        Value::Number(n) if n.is_i64() => true,
        Value::Number(n) => n.as_f64().is_some_and(|f| {
            f.fract() == 0.0 && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f)
        }),
        _ => false,
    };
    (!ok).then(|| {
        OErr::Plain(format!(
            "{prefix} value must be of type integer (default format) in {path}"
        ))
    })
}

fn number_validator(s: &Structural, path: &str, data: &Value) -> Res {
    let mut res = Res::default();
    let type_name = if s.int_or_string {
        ""
    } else {
        s.type_.as_str()
    };
    let as_int = data.as_i64().filter(|_| data.is_i64());
    let f = data.as_f64().unwrap_or(0.0);
    if let Some(e) = range_check(data, type_name, "Checked", path) {
        res.add(e);
    }
    let mut multiple = Res::default();
    let mut minimum = Res::default();
    let mut maximum = Res::default();
    if let Some(factor) = s.multiple_of {
        let bound_err = range_check(&json!(factor), type_name, "MultipleOf", path);
        let native = bound_err.is_none();
        if let Some(e) = bound_err {
            multiple.add(e);
        }
        let positive = |shown: String| {
            verr(
                Code::Other,
                path,
                Some(data.clone()),
                format!("factor MultipleOf declared for {path} must be positive: {shown}"),
            )
        };
        let not_multiple = |shown: String| {
            verr(
                Code::Other,
                path,
                Some(data.clone()),
                format!("{path} in body should be a multiple of {shown}"),
            )
        };
        match as_int {
            Some(i) if native => {
                let fi = factor as i64;
                if fi <= 0 {
                    multiple.add(positive(fi.to_string()));
                } else if i % fi != 0 {
                    multiple.add(not_multiple(fi.to_string()));
                }
            }
            _ => {
                if factor <= 0.0 {
                    multiple.add(positive(fv(factor)));
                } else {
                    let mult = if factor < 1.0 {
                        1.0 / factor * f
                    } else {
                        f / factor
                    };
                    if !is_json_integer(mult) {
                        multiple.add(not_multiple(fv(factor)));
                    }
                }
            }
        }
    }
    let bound = |target: &mut Res, b: f64, exclusive: bool, is_max: bool, prefix: &str| {
        let bound_err = range_check(&json!(b), type_name, prefix, path);
        let native = bound_err.is_none();
        if let Some(e) = bound_err {
            target.add(e);
        }
        let (fails, shown) = match as_int {
            Some(i) if native => {
                let bi = b as i64;
                let fails = if is_max {
                    if exclusive { i >= bi } else { i > bi }
                } else if exclusive {
                    i <= bi
                } else {
                    i < bi
                };
                (fails, bi.to_string())
            }
            _ => {
                let fails = if is_max {
                    if exclusive { f >= b } else { f > b }
                } else if exclusive {
                    f <= b
                } else {
                    f < b
                };
                (fails, fv(b))
            }
        };
        if fails {
            let words = match (is_max, exclusive) {
                (true, false) => "less than or equal to",
                (true, true) => "less than",
                (false, false) => "greater than or equal to",
                (false, true) => "greater than",
            };
            target.add(verr(
                Code::Other,
                path,
                Some(data.clone()),
                format!("{path} in body should be {words} {shown}"),
            ));
        }
    };
    if let Some(max) = s.maximum {
        bound(
            &mut maximum,
            max,
            s.exclusive_maximum,
            true,
            "Maximum boundary",
        );
    }
    if let Some(min) = s.minimum {
        bound(
            &mut minimum,
            min,
            s.exclusive_minimum,
            false,
            "Minimum boundary",
        );
    }
    res.merge(multiple);
    res.merge(minimum);
    res.merge(maximum);
    res.count += 1;
    res
}

fn slice_validator(s: &Structural, path: &str, data: &Value, depth: usize) -> Res {
    let mut result = Res::default();
    let Some(items) = data.as_array() else {
        return result;
    };
    if let Some(is) = &s.items {
        for (i, item) in items.iter().enumerate() {
            result.merge(node(is, &format!("{path}[{i}]"), item, depth + 1));
        }
    }
    let size = items.len() as i64;
    if let Some(min) = s.min_items
        && size < min
    {
        result.add(verr(
            Code::Other,
            path,
            Some(json!(size)),
            format!("{path} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = s.max_items
        && size > max
    {
        result.add(OErr::Validation {
            code: Code::MaxItems,
            name: path.to_string(),
            value: Some(json!(size)),
            valid: max,
            values: Vec::new(),
            message: format!("{path} in body should have at most {max} items"),
        });
    }
    if s.unique_items {
        let dup = items
            .iter()
            .enumerate()
            .any(|(i, a)| items[..i].iter().any(|b| a == b));
        if dup {
            result.add(verr(
                Code::Other,
                path,
                None,
                format!("{path} in body shouldn't contain duplicates"),
            ));
        }
    }
    result.count += 1;
    result
}

/// Enum membership as kube-openapi checks it (numbers compare by value).
fn enum_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

fn common_validator(s: &Structural, path: &str, data: &Value) -> Res {
    let Some(values) = &s.enum_ else {
        return Res::default();
    };
    if values.is_empty() || (!data.is_null() && values.iter().any(|v| enum_eq(data, v))) {
        return Res::default();
    }
    let shown: Vec<Value> = values.clone();
    Res::err(OErr::Validation {
        code: Code::Enum,
        name: path.to_string(),
        value: (!data.is_null()).then(|| data.clone()),
        valid: -1,
        values: shown.clone(),
        message: format!(
            "{path} in body should be one of {}",
            gofmt::v(&Value::Array(shown))
        ),
    })
}

fn object_validator(s: &Structural, path: &str, data: &Value, depth: usize) -> Res {
    let mut res = Res::default();
    let Some(obj) = data.as_object() else {
        return res;
    };
    let n = obj.len() as i64;
    if let Some(min) = s.min_properties
        && n < min
    {
        res.add(verr(
            Code::Other,
            path,
            Some(json!(n)),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = s.max_properties
        && n > max
    {
        res.add(OErr::Validation {
            code: Code::TooManyProperties,
            name: path.to_string(),
            value: Some(json!(n)),
            valid: max,
            values: Vec::new(),
            message: format!("{path} in body should have at most {max} properties"),
        });
    }
    match &s.additional_properties {
        Some(AdditionalProperties::Bool(false)) => {
            for k in obj.keys() {
                if !s.properties.contains_key(k) {
                    res.add(verr(
                        Code::Other,
                        path,
                        Some(json!(k)),
                        format!("{path}.{k} in body is a forbidden property"),
                    ));
                }
            }
        }
        Some(AdditionalProperties::Schema(ap)) => {
            for (k, v) in obj {
                if !s.properties.contains_key(k) {
                    res.merge(node(ap, &format!("{path}.{k}"), v, depth + 1));
                }
            }
        }
        _ => {}
    }
    for (name, prop) in &s.properties {
        if let Some(v) = obj.get(name) {
            res.merge(node(prop, &join(path, name), v, depth + 1));
        }
    }
    for k in &s.required {
        if !obj.contains_key(k) {
            let name = format!("{path}.{k}");
            res.add(verr(
                Code::Required,
                &name,
                None,
                format!("{name} in body is required"),
            ));
        }
    }
    res
}

fn fp_child(path: &str, name: &str) -> String {
    join(path, name)
}

fn fp_key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

fn fp_index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// `objectmeta.Validate` below the root: embedded resources need apiVersion and kind.
fn embedded_walk(path: &str, x: &Value, s: &Structural, errs: &mut Vec<FieldError>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(obj) => {
            if s.embedded_resource {
                errs.extend(embedded_resource(path, obj));
            }
            for (k, v) in obj {
                if let Some(p) = s.properties.get(k) {
                    embedded_walk(&fp_child(path, k), v, p, errs, depth + 1);
                } else if let Some(ap) = s.additional_properties() {
                    embedded_walk(&fp_key(path, k), v, ap, errs, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items() {
                for (i, v) in items.iter().enumerate() {
                    embedded_walk(&fp_index(path, i), v, is, errs, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// The embedded-resource checks of a value (the node itself may be embedded).
pub(super) fn embedded(path: &str, x: &Value, s: &Structural) -> Vec<FieldError> {
    let mut errs = Vec::new();
    embedded_walk(path, x, s, &mut errs, 0);
    errs
}

fn embedded_resource(path: &str, x: &Map<String, Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !x.contains_key("apiVersion") {
        errs.push(FieldError::required(
            fp_child(path, "apiVersion"),
            "must not be empty",
        ));
    }
    if !x.contains_key("kind") {
        errs.push(FieldError::required(
            fp_child(path, "kind"),
            "must not be empty",
        ));
    }
    for (k, v) in x {
        match k.as_str() {
            "apiVersion" => match v.as_str() {
                None => errs.push(FieldError::invalid(
                    fp_child(path, "apiVersion"),
                    v.clone(),
                    "must be a string",
                )),
                Some("") => errs.push(FieldError::invalid(
                    fp_child(path, "apiVersion"),
                    v.clone(),
                    "must not be empty",
                )),
                Some(av) if av.matches('/').count() > 1 => errs.push(FieldError::invalid(
                    fp_child(path, "apiVersion"),
                    v.clone(),
                    format!("unexpected GroupVersion string: {av}"),
                )),
                Some(_) => {}
            },
            "kind" => match v.as_str() {
                None => errs.push(FieldError::invalid(
                    fp_child(path, "kind"),
                    v.clone(),
                    "must be a string",
                )),
                Some("") => errs.push(FieldError::invalid(
                    fp_child(path, "kind"),
                    v.clone(),
                    "must not be empty",
                )),
                Some(kind) => {
                    let msgs = crate::names::dns1035_label_errors(&kind.to_lowercase());
                    if !msgs.is_empty() {
                        errs.push(FieldError::invalid(
                            fp_child(path, "kind"),
                            v.clone(),
                            format!(
                                "may have mixed case, but should otherwise match: {}",
                                msgs.join(",")
                            ),
                        ));
                    }
                }
            },
            "metadata" if !v.is_object() => {
                errs.push(FieldError::invalid(
                    fp_child(path, "metadata"),
                    v.clone(),
                    format!(
                        "invalid metadata: expected object, got {}",
                        gofmt::type_name(v)
                    ),
                ));
            }
            _ => {}
        }
    }
    errs
}

/// `listtype.ValidateListSetsAndMaps`: items of `set` lists and keys of `map` lists are unique.
fn list_types(path: &str, s: &Structural, x: &Value, errs: &mut Vec<FieldError>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(obj) => {
            if let Some(ap) = s.additional_properties() {
                for (k, v) in obj {
                    list_types(&fp_key(path, k), ap, v, errs, depth + 1);
                }
            }
            for (k, v) in obj {
                if let Some(p) = s.properties.get(k) {
                    list_types(&fp_child(path, k), p, v, errs, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in duplicates(items) {
                        errs.push(duplicate(fp_index(path, i), items[i].clone()));
                    }
                }
                Some("map") => list_map(path, s, items, errs),
                _ => {}
            }
            if let Some(is) = s.items() {
                for (i, v) in items.iter().enumerate() {
                    list_types(&fp_index(path, i), is, v, errs, depth + 1);
                }
            }
        }
        _ => {}
    }
}

fn duplicate(path: String, value: Value) -> FieldError {
    FieldError::new(ErrorType::Duplicate, path, Some(value), "")
}

/// Indices of the second occurrence of each repeated value.
fn duplicates(items: &[Value]) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, x) in items.iter().enumerate() {
        let before = items[..i].iter().filter(|y| enum_eq(x, y)).count();
        if before == 1 {
            out.push(i);
        }
    }
    out
}

fn list_map(path: &str, s: &Structural, items: &[Value], errs: &mut Vec<FieldError>) {
    for (i, x) in items.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            errs.push(FieldError::invalid(
                fp_index(path, i),
                x.clone(),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    let keys: Vec<Value> = items
        .iter()
        .map(|x| {
            let mut key = Map::new();
            if let Some(obj) = x.as_object() {
                for k in &s.list_map_keys {
                    if let Some(v) = obj.get(k) {
                        key.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    for i in duplicates(&keys) {
        errs.push(duplicate(fp_index(path, i), keys[i].clone()));
    }
}
