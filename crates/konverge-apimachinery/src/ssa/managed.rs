//! `metadata.managedFields`: decoding (with kube-apiserver's validation messages), manager
//! identity, sorting and encoding.

use serde_json::{Map, Value};

use super::ApplyError;
use super::fieldpath::FieldSet;

/// The operation a managed fields entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write (create, update, patch).
    Update,
}

impl Operation {
    /// The wire name (`Apply` / `Update`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedFieldsEntry {
    /// The field manager.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The API version the fields were set through.
    pub api_version: String,
    /// When the entry last changed (RFC 3339), if known.
    pub time: Option<String>,
    /// The subresource written through (`status`), if any.
    pub subresource: Option<String>,
    /// The owned fields.
    pub fields: FieldSet,
}

impl ManagedFieldsEntry {
    /// Whether `self` and `other` are the same manager in Kubernetes' sense: same manager
    /// name, operation and subresource, and for Update entries the same API version.
    pub fn same_manager(&self, other: &ManagedFieldsEntry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// The manager identifier Kubernetes builds (a JSON encoding of manager, operation, API
    /// version for Update entries, and subresource); conflicts are sorted by it.
    pub fn identifier(&self) -> String {
        let mut out = String::from("{");
        let mut fields: Vec<(&str, &str)> = Vec::new();
        if !self.manager.is_empty() {
            fields.push(("manager", &self.manager));
        }
        fields.push(("operation", self.operation.as_str()));
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            fields.push(("apiVersion", &self.api_version));
        }
        if let Some(s) = self.subresource.as_deref().filter(|s| !s.is_empty()) {
            fields.push(("subresource", s));
        }
        for (i, (k, v)) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!("\"{k}\":{}", Value::String(v.to_string())));
        }
        out.push('}');
        out
    }

    /// How Kubernetes names this manager in conflict messages: `"m"`,
    /// `"m" with subresource "status"`, `"m" using v1` for Update entries.
    pub fn describe(&self) -> String {
        let mut out = crate::gofmt::quote(&self.manager);
        if let Some(s) = self.subresource.as_deref().filter(|s| !s.is_empty()) {
            out = format!("{out} with subresource {}", crate::gofmt::quote(s));
        }
        if self.operation == Operation::Update {
            out = format!("{out} using {}", self.api_version);
        }
        out
    }

    pub(crate) fn to_value(&self) -> Value {
        let mut m = Map::new();
        if !self.manager.is_empty() {
            m.insert("manager".into(), Value::String(self.manager.clone()));
        }
        m.insert("operation".into(), self.operation.as_str().into());
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), "FieldsV1".into());
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(s) = self.subresource.as_deref().filter(|s| !s.is_empty()) {
            m.insert("subresource".into(), Value::String(s.to_string()));
        }
        Value::Object(m)
    }
}

/// The managed fields of an object.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ManagedFields(pub Vec<ManagedFieldsEntry>);

fn cannot_unmarshal(v: &Value, target: &str) -> ApplyError {
    ApplyError::Invalid(format!(
        "json: cannot unmarshal {} into Go struct field ObjectMeta.metadata.managedFields of \
         type {target}",
        crate::gofmt::json_kind(v)
    ))
}

impl ManagedFields {
    /// Reads and validates `metadata.managedFields` of `obj` as kube-apiserver decodes it
    /// (`operation must be `Apply` or `Update``, `apiVersion must not be empty`,
    /// `missing fieldsType in managed fields entry N`, …). Entries for the same manager are
    /// collapsed (the last one wins).
    pub fn from_object(obj: &Value) -> Result<ManagedFields, ApplyError> {
        Self::from_list(obj.get("metadata").and_then(|m| m.get("managedFields")))
    }

    /// [`ManagedFields::from_object`] of the `metadata.managedFields` value itself (`None`
    /// when the object has none).
    pub(crate) fn from_list(list: Option<&Value>) -> Result<ManagedFields, ApplyError> {
        let Some(list) = list else {
            return Ok(ManagedFields::default());
        };
        let items = match list {
            Value::Null => return Ok(ManagedFields::default()),
            Value::Array(items) => items,
            other => return Err(cannot_unmarshal(other, "[]v1.ManagedFieldsEntry")),
        };
        let mut out = ManagedFields::default();
        for (i, item) in items.iter().enumerate() {
            let Value::Object(m) = item else {
                return Err(cannot_unmarshal(item, "v1.ManagedFieldsEntry"));
            };
            let string = |k: &str| -> Result<String, ApplyError> {
                match m.get(k) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(other) => Err(ApplyError::Invalid(format!(
                        "json: cannot unmarshal {} into Go struct field \
                         ManagedFieldsEntry.metadata.managedFields.{k} of type {}",
                        crate::gofmt::json_kind(other),
                        if k == "time" { "v1.Time" } else { "string" }
                    ))),
                }
            };
            let operation = match string("operation")?.as_str() {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => {
                    return Err(ApplyError::Invalid(
                        "operation must be `Apply` or `Update`".into(),
                    ));
                }
            };
            let api_version = string("apiVersion")?;
            if api_version.is_empty() {
                return Err(ApplyError::Invalid("apiVersion must not be empty".into()));
            }
            match string("fieldsType")?.as_str() {
                "FieldsV1" => {}
                "" => {
                    return Err(ApplyError::Invalid(format!(
                        "missing fieldsType in managed fields entry {i}"
                    )));
                }
                other => {
                    return Err(ApplyError::Invalid(format!(
                        "invalid fieldsType {} in managed fields entry {i}",
                        crate::gofmt::quote(other)
                    )));
                }
            }
            let manager = string("manager")?;
            let fields = match m.get("fieldsV1") {
                None | Some(Value::Null) => FieldSet::new(),
                Some(v) => FieldSet::from_fields_v1(v).map_err(|e| {
                    ApplyError::Invalid(format!(
                        "error decoding versioned set from {}: error decoding set: {}",
                        crate::gofmt::quote(&manager),
                        e
                    ))
                })?,
            };
            let time = Some(string("time")?).filter(|t| !t.is_empty());
            let subresource = Some(string("subresource")?).filter(|s| !s.is_empty());
            let entry = ManagedFieldsEntry {
                manager,
                operation,
                api_version,
                time,
                subresource,
                fields,
            };
            out.0.retain(|e| !e.same_manager(&entry));
            out.0.push(entry);
        }
        Ok(out)
    }

    /// Whether a `metadata.managedFields` value asks for a reset: an empty list, or a list of
    /// one empty entry.
    pub(crate) fn is_reset_list(list: Option<&Value>) -> bool {
        match list {
            Some(Value::Array(items)) => match items.as_slice() {
                [] => true,
                [Value::Object(m)] => m.values().all(|v| match v {
                    Value::Null => true,
                    Value::String(s) => s.is_empty(),
                    _ => false,
                }),
                _ => false,
            },
            _ => false,
        }
    }

    /// The entries, sorted as Kubernetes sorts them: Apply before Update, then by time
    /// (seconds), manager, API version and subresource.
    pub fn sorted(&self) -> Vec<&ManagedFieldsEntry> {
        let mut entries: Vec<&ManagedFieldsEntry> = self.0.iter().collect();
        entries.sort_by(|p, q| {
            let secs =
                |e: &ManagedFieldsEntry| e.time.as_deref().and_then(unix_seconds).unwrap_or(0);
            p.operation
                .cmp(&q.operation)
                .then_with(|| secs(p).cmp(&secs(q)))
                .then_with(|| p.manager.cmp(&q.manager))
                .then_with(|| p.api_version.cmp(&q.api_version))
                .then_with(|| p.subresource.cmp(&q.subresource))
        });
        entries
    }

    /// Writes the entries (sorted) into `metadata.managedFields` of `obj`, or removes the key
    /// when there are none.
    pub fn write_to(&self, obj: &mut Value) {
        let Some(root) = obj.as_object_mut() else {
            return;
        };
        if self.0.is_empty() {
            if let Some(Value::Object(meta)) = root.get_mut("metadata") {
                meta.remove("managedFields");
            }
            return;
        }
        let list: Vec<Value> = self.sorted().into_iter().map(|e| e.to_value()).collect();
        let meta = root
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Value::Object(meta) = meta {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Seconds since the epoch of an RFC 3339 timestamp.
fn unix_seconds(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b't') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &t[19..];
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (rest.get(1..3)?.parse::<i64>().ok()? * 3600
                + rest.get(4..6)?.parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some(days * 86400 + h * 3600 + mi * 60 + s - offset)
}
