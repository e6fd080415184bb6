//! Status conditions that change only when something changed.
//!
//! A condition's `lastTransitionTime` says when its `status` last flipped. A reconciler that stamps
//! `now` on every pass rewrites the status on every pass, and its own write triggers the next
//! reconcile: an endless loop. [`set_condition`] therefore keeps `lastTransitionTime` unless the
//! status flips, touches nothing when nothing differs, and reports whether it changed the list, so
//! the caller (and [`crate::status`]) can skip the write.
//!
//! Order is deterministic: an existing condition keeps its position, a new one is appended.
//!
//! Two flavours:
//! - typed, over `Vec<Condition>` (`k8s_openapi`'s `meta/v1` `Condition`): [`set_condition`],
//!   [`find_condition`], [`is_condition_true`], [`remove_condition`];
//! - untyped, over a status held as [`serde_json::Value`] ([`set_condition_in`],
//!   [`find_condition_in`], [`remove_condition_in`]), for condition types shaped like
//!   `Condition` but with fields of their own (a Deployment's `lastUpdateTime`, say): fields
//!   this module does not know are kept as they are.

use std::fmt;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Map, Value};

/// Errors from the untyped helpers, which work on a status whose shape is not checked by a type.
#[derive(Debug, thiserror::Error)]
pub enum ConditionsError {
    /// The status is neither a JSON object nor null, so it cannot hold `conditions`.
    #[error("status is not a JSON object (found {found})")]
    StatusNotObject {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// `status.conditions` is present but not an array.
    #[error("status.conditions is not an array (found {found})")]
    ConditionsNotArray {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// An element of `status.conditions` is not an object.
    #[error("status.conditions[{index}] is not a JSON object (found {found})")]
    ConditionNotObject {
        /// Position of the element in the list.
        index: usize,
        /// The JSON type found instead.
        found: &'static str,
    },
}

/// `Result` with this module's error.
pub type Result<T, E = ConditionsError> = std::result::Result<T, E>;

/// The status of a condition: Kubernetes' `True`, `False` or `Unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Whether the condition holds is not known (yet).
    Unknown,
}

impl ConditionStatus {
    /// The wire form: `"True"`, `"False"` or `"Unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sets the condition of type `type_`, and returns whether the list changed.
///
/// - No condition of that type: one is appended with `lastTransitionTime = now`.
/// - The status differs: status, reason, message, observedGeneration are updated and
///   `lastTransitionTime` becomes `now`.
/// - Only reason, message or observedGeneration differ: they are updated and
///   `lastTransitionTime` is kept.
/// - Nothing differs: nothing is touched and `false` comes back.
///
/// `now` is truncated to whole seconds, the precision `Time` has on the wire, so the condition
/// in memory equals the one read back from the server.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let status = status.as_str();
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) else {
        conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation,
            last_transition_time: Time(whole_seconds(now)),
        });
        return true;
    };
    let mut changed = false;
    if existing.status != status {
        existing.status = status.to_owned();
        existing.last_transition_time = Time(whole_seconds(now));
        changed = true;
    }
    changed |= replace_if_different(&mut existing.reason, reason);
    changed |= replace_if_different(&mut existing.message, message);
    if existing.observed_generation != observed_generation {
        existing.observed_generation = observed_generation;
        changed = true;
    }
    changed
}

/// The condition of type `type_`, if there is one.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` exists and has status `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True.as_str())
}

/// Removes the condition of type `type_`; returns whether there was one. Others keep their order.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// [`set_condition`] on a status held as JSON: works on `status.conditions`, creating the list
/// (and turning a null status into an object) when needed. Returns whether the status changed.
///
/// Fields of the condition object this module does not know (`lastUpdateTime`, ...) are kept.
/// `observed_generation: None` removes `observedGeneration`, so the helper also fits condition
/// types that have no such field.
pub fn set_condition_in(
    status: &mut Value,
    type_: &str,
    condition_status: ConditionStatus,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> Result<bool> {
    if status.is_null() {
        *status = Value::Object(Map::new());
    }
    let found = json_type(status);
    let Value::Object(fields) = status else {
        return Err(ConditionsError::StatusNotObject { found });
    };
    let list = fields
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if list.is_null() {
        *list = Value::Array(Vec::new());
    }
    let found = json_type(list);
    let Value::Array(list) = list else {
        return Err(ConditionsError::ConditionsNotArray { found });
    };
    let index = position_in(list, type_)?;
    let condition_status = Value::from(condition_status.as_str());
    let Some(index) = index else {
        let mut condition = Map::new();
        condition.insert("type".into(), type_.into());
        condition.insert("status".into(), condition_status);
        condition.insert("reason".into(), reason.into());
        condition.insert("message".into(), message.into());
        if let Some(generation) = observed_generation {
            condition.insert("observedGeneration".into(), generation.into());
        }
        condition.insert("lastTransitionTime".into(), time_value(now));
        list.push(Value::Object(condition));
        return Ok(true);
    };
    let Value::Object(condition) = &mut list[index] else {
        unreachable!("position_in only returns indexes of objects");
    };
    let mut changed = false;
    if condition.get("status") != Some(&condition_status) {
        condition.insert("status".into(), condition_status);
        condition.insert("lastTransitionTime".into(), time_value(now));
        changed = true;
    }
    changed |= set_field(condition, "reason", Some(reason.into()));
    changed |= set_field(condition, "message", Some(message.into()));
    changed |= set_field(
        condition,
        "observedGeneration",
        observed_generation.map(Value::from),
    );
    Ok(changed)
}

/// The condition of type `type_` in `status.conditions`, if there is one. A status without
/// conditions has none.
pub fn find_condition_in<'a>(status: &'a Value, type_: &str) -> Result<Option<&'a Value>> {
    let Some(list) = conditions_of(status)? else {
        return Ok(None);
    };
    Ok(position_in(list, type_)?.map(|index| &list[index]))
}

/// Removes the condition of type `type_` from `status.conditions`; returns whether there was one.
pub fn remove_condition_in(status: &mut Value, type_: &str) -> Result<bool> {
    if conditions_of(status)?.is_none() {
        return Ok(false);
    }
    let Some(Value::Array(list)) = status.get_mut("conditions") else {
        unreachable!("conditions_of checked that status.conditions is an array");
    };
    match position_in(list, type_)? {
        Some(index) => {
            list.remove(index);
            Ok(true)
        }
        None => Ok(false),
    }
}

fn replace_if_different(field: &mut String, value: &str) -> bool {
    if field == value {
        return false;
    }
    value.clone_into(field);
    true
}

/// Sets (`Some`) or removes (`None`) a field; returns whether that changed anything.
fn set_field(object: &mut Map<String, Value>, key: &str, value: Option<Value>) -> bool {
    match value {
        Some(value) if object.get(key) != Some(&value) => {
            object.insert(key.into(), value);
            true
        }
        Some(_) => false,
        None => object.remove(key).is_some(),
    }
}

/// `status.conditions` as a list, `None` when the status or the list is absent.
fn conditions_of(status: &Value) -> Result<Option<&Vec<Value>>> {
    match status {
        Value::Null => Ok(None),
        Value::Object(fields) => match fields.get("conditions") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(list)) => Ok(Some(list)),
            Some(other) => Err(ConditionsError::ConditionsNotArray {
                found: json_type(other),
            }),
        },
        other => Err(ConditionsError::StatusNotObject {
            found: json_type(other),
        }),
    }
}

fn position_in(list: &[Value], type_: &str) -> Result<Option<usize>> {
    for (index, condition) in list.iter().enumerate() {
        let Value::Object(condition) = condition else {
            return Err(ConditionsError::ConditionNotObject {
                index,
                found: json_type(condition),
            });
        };
        if condition.get("type").and_then(Value::as_str) == Some(type_) {
            return Ok(Some(index));
        }
    }
    Ok(None)
}

fn whole_seconds(now: Timestamp) -> Timestamp {
    // In range by construction: `now` was a valid timestamp with the same second.
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

fn time_value(now: Timestamp) -> Value {
    // `Time` serializes to a string and cannot fail for a valid timestamp.
    serde_json::to_value(Time(whole_seconds(now))).unwrap_or(Value::Null)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
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

    fn t(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn ready(
        conditions: &mut Vec<Condition>,
        status: ConditionStatus,
        reason: &str,
        at: i64,
    ) -> bool {
        set_condition(conditions, "Ready", status, reason, "msg", Some(1), t(at))
    }

    #[test]
    fn new_condition_is_appended_with_now_as_transition_time() {
        let mut conditions = Vec::new();
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Waiting",
            "m",
            Some(3),
            t(100)
        ));
        assert_eq!(
            conditions,
            vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "Waiting".into(),
                message: "m".into(),
                observed_generation: Some(3),
                last_transition_time: Time(t(100)),
            }]
        );
    }

    #[test]
    fn same_values_change_nothing_and_keep_the_time() {
        let mut conditions = Vec::new();
        ready(&mut conditions, ConditionStatus::True, "Up", 100);
        let before = conditions.clone();
        assert!(!ready(&mut conditions, ConditionStatus::True, "Up", 200));
        assert_eq!(conditions, before);
    }

    #[test]
    fn reason_message_generation_updates_keep_the_transition_time() {
        let mut conditions = Vec::new();
        ready(&mut conditions, ConditionStatus::True, "Up", 100);
        assert!(ready(
            &mut conditions,
            ConditionStatus::True,
            "StillUp",
            200
        ));
        assert_eq!(conditions[0].reason, "StillUp");
        assert_eq!(conditions[0].last_transition_time, Time(t(100)));

        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::True,
            "StillUp",
            "new",
            Some(1),
            t(300)
        ));
        assert_eq!(conditions[0].message, "new");
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::True,
            "StillUp",
            "new",
            Some(2),
            t(400)
        ));
        assert_eq!(conditions[0].observed_generation, Some(2));
        assert_eq!(conditions[0].last_transition_time, Time(t(100)));
    }

    #[test]
    fn status_change_moves_the_transition_time() {
        let mut conditions = Vec::new();
        ready(&mut conditions, ConditionStatus::True, "Up", 100);
        assert!(ready(&mut conditions, ConditionStatus::False, "Up", 200));
        assert_eq!(conditions[0].status, "False");
        assert_eq!(conditions[0].last_transition_time, Time(t(200)));
        assert!(ready(&mut conditions, ConditionStatus::Unknown, "Up", 300));
        assert_eq!(conditions[0].last_transition_time, Time(t(300)));
    }

    #[test]
    fn now_is_truncated_to_whole_seconds() {
        let mut conditions = Vec::new();
        let now = Timestamp::new(100, 999_999_999).unwrap();
        set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::True,
            "Up",
            "",
            None,
            now,
        );
        assert_eq!(conditions[0].last_transition_time, Time(t(100)));
    }

    #[test]
    fn existing_conditions_keep_their_position_new_ones_append() {
        let mut conditions = Vec::new();
        for type_ in ["Zeta", "Alpha", "Mid"] {
            set_condition(
                &mut conditions,
                type_,
                ConditionStatus::True,
                "R",
                "",
                None,
                t(1),
            );
        }
        set_condition(
            &mut conditions,
            "Alpha",
            ConditionStatus::False,
            "R",
            "",
            None,
            t(2),
        );
        set_condition(
            &mut conditions,
            "Beta",
            ConditionStatus::False,
            "R",
            "",
            None,
            t(2),
        );
        let types: Vec<_> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Zeta", "Alpha", "Mid", "Beta"]);
    }

    #[test]
    fn find_is_true_and_remove() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::True,
            "R",
            "",
            None,
            t(1),
        );
        set_condition(
            &mut conditions,
            "Synced",
            ConditionStatus::False,
            "R",
            "",
            None,
            t(1),
        );
        set_condition(
            &mut conditions,
            "Last",
            ConditionStatus::Unknown,
            "R",
            "",
            None,
            t(1),
        );
        assert!(is_condition_true(&conditions, "Ready"));
        assert!(!is_condition_true(&conditions, "Synced"));
        assert!(!is_condition_true(&conditions, "Last"));
        assert!(!is_condition_true(&conditions, "Missing"));
        assert_eq!(
            find_condition(&conditions, "Synced").unwrap().status,
            "False"
        );
        assert!(find_condition(&conditions, "Missing").is_none());

        assert!(remove_condition(&mut conditions, "Synced"));
        assert!(!remove_condition(&mut conditions, "Synced"));
        let types: Vec<_> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Last"]);
    }

    #[test]
    fn condition_status_from_bool_and_display() {
        assert_eq!(ConditionStatus::from(true), ConditionStatus::True);
        assert_eq!(ConditionStatus::from(false).to_string(), "False");
        assert_eq!(ConditionStatus::Unknown.as_str(), "Unknown");
    }

    #[test]
    fn json_condition_is_created_in_a_null_status() {
        let mut status = Value::Null;
        let changed = set_condition_in(
            &mut status,
            "Ready",
            ConditionStatus::True,
            "Up",
            "m",
            Some(4),
            t(100),
        )
        .unwrap();
        assert!(changed);
        assert_eq!(
            status,
            json!({"conditions": [{
                "type": "Ready", "status": "True", "reason": "Up", "message": "m",
                "observedGeneration": 4, "lastTransitionTime": "1970-01-01T00:01:40Z",
            }]})
        );
    }

    #[test]
    fn json_condition_keeps_unknown_fields_and_transition_time_without_status_change() {
        let mut status = json!({"replicas": 2, "conditions": [
            {"type": "Available", "status": "True", "reason": "A", "message": "",
             "lastUpdateTime": "2020-01-01T00:00:00Z", "lastTransitionTime": "2020-01-01T00:00:00Z"},
            {"type": "Progressing", "status": "True", "reason": "P", "message": ""},
        ]});
        let changed = set_condition_in(
            &mut status,
            "Available",
            ConditionStatus::True,
            "B",
            "",
            None,
            t(100),
        )
        .unwrap();
        assert!(changed);
        let available = find_condition_in(&status, "Available").unwrap().unwrap();
        assert_eq!(available["reason"], "B");
        assert_eq!(available["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(available["lastUpdateTime"], "2020-01-01T00:00:00Z");
        assert!(available.get("observedGeneration").is_none());
        assert_eq!(status["replicas"], 2);

        let unchanged = status.clone();
        assert!(
            !set_condition_in(
                &mut status,
                "Available",
                ConditionStatus::True,
                "B",
                "",
                None,
                t(200)
            )
            .unwrap()
        );
        assert_eq!(status, unchanged);

        assert!(
            set_condition_in(
                &mut status,
                "Available",
                ConditionStatus::False,
                "B",
                "",
                None,
                t(200)
            )
            .unwrap()
        );
        let available = find_condition_in(&status, "Available").unwrap().unwrap();
        assert_eq!(available["lastTransitionTime"], "1970-01-01T00:03:20Z");
        assert_eq!(status["conditions"][1]["type"], "Progressing");
    }

    #[test]
    fn json_conditions_append_and_remove_in_order() {
        let mut status = json!({});
        for type_ in ["B", "A", "C"] {
            set_condition_in(
                &mut status,
                type_,
                ConditionStatus::True,
                "R",
                "",
                None,
                t(1),
            )
            .unwrap();
        }
        assert!(remove_condition_in(&mut status, "A").unwrap());
        assert!(!remove_condition_in(&mut status, "A").unwrap());
        let types: Vec<_> = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["B", "C"]);
        assert!(!remove_condition_in(&mut Value::Null, "A").unwrap());
        assert!(find_condition_in(&Value::Null, "A").unwrap().is_none());
    }

    #[test]
    fn json_shape_errors_are_reported() {
        let err = set_condition_in(
            &mut json!([1]),
            "A",
            ConditionStatus::True,
            "R",
            "",
            None,
            t(1),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "status is not a JSON object (found array)");
        let err = set_condition_in(
            &mut json!({"conditions": {}}),
            "A",
            ConditionStatus::True,
            "R",
            "",
            None,
            t(1),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "status.conditions is not an array (found object)"
        );
        let err = find_condition_in(&json!({"conditions": [{"type": "B"}, "x"]}), "A").unwrap_err();
        assert_eq!(
            err.to_string(),
            "status.conditions[1] is not a JSON object (found string)"
        );
    }
}
