//! Object metadata rules shared by every resource: names, generated names, uids, timestamps,
//! and the fields a client may not change.

use serde_json::{Map, Value, json};

use crate::error::Cause;

/// How object names of a resource are validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain: lowercase alphanumerics, '-' and '.', at most 253 characters.
    Subdomain,
    /// RFC 1123 label: lowercase alphanumerics and '-', at most 63 characters.
    Label,
    /// RFC 1035 label (must start with a letter): Services.
    Rfc1035Label,
    /// Any name that is a valid path segment (no '/', '%', not "." or "..").
    PathSegment,
}

/// Checks `name` against `rule`: a cause for `field` per problem, as kube-apiserver reports
/// them.
pub fn check_name(rule: NameRule, name: &str, field: &str) -> Vec<Cause> {
    name_problems(rule, name)
        .into_iter()
        .map(|p| Cause::invalid(field, &Value::from(name), p))
        .collect()
}

/// What is wrong with `name` under `rule`, in kube-apiserver's words (empty when nothing).
pub fn name_problems(rule: NameRule, name: &str) -> Vec<String> {
    use konverge_apimachinery::names;
    match rule {
        NameRule::Subdomain => names::dns1123_subdomain_errors(name),
        NameRule::Label => names::dns1123_label_errors(name),
        NameRule::Rfc1035Label => names::dns1035_label_errors(name),
        NameRule::PathSegment => names::path_segment_name_errors(name),
    }
}

/// The current time as Kubernetes writes timestamps (RFC 3339, seconds, UTC).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Sets `condition` in `status.conditions` (made when missing), as Kubernetes' condition
/// helpers do (`SetAPIServiceCondition`, `UpdatePodCondition`, the CRD controller's): it
/// takes the place of the condition of its `type`, or is added after the others; while the
/// status stays what it was, the last transition time stays too.
pub fn set_condition(status: &mut Value, mut condition: Value) {
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let conditions = &mut status["conditions"];
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let Some(conditions) = conditions.as_array_mut() else {
        return;
    };
    match conditions
        .iter_mut()
        .find(|c| c["type"] == condition["type"])
    {
        Some(existing) => {
            if existing["status"] == condition["status"] {
                condition["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
}

/// A new object uid.
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `generateName` plus five random characters, as kube-apiserver generates them.
pub fn generate_name(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    // The whole name must stay within 63 characters when it is a label.
    let prefix: String = prefix.chars().take(58).collect();
    format!("{prefix}{suffix}")
}

/// `metadata` of an object, created empty if missing.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

/// A string field of `metadata`.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata.labels` as string pairs.
pub fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Everything that still holds an object's deletion: `metadata.finalizers`, and for
/// namespaces also `spec.finalizers` (the namespace controller's `kubernetes`).
pub fn pending_finalizers(obj: &Value, is_namespace: bool) -> Vec<String> {
    let mut all = finalizers(obj);
    if is_namespace {
        all.extend(
            obj.pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from)),
        );
    }
    all
}

/// The object without `metadata` and `status`: what `generation` counts changes of.
pub fn spec_part(obj: &Value) -> Value {
    let mut copy = obj.clone();
    if let Some(m) = copy.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    copy
}

/// How old `obj` is, as the Age column shows it.
pub(crate) fn age(obj: &Value, now: jiff::Timestamp) -> String {
    let Some(created) = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return "<unknown>".into();
    };
    human_duration(now.as_second() - created.as_second())
}

/// kubectl's short human durations (`duration.HumanDuration`): `45s`, `5m10s`, `3h`, `2d5h`,
/// `120d`, `3y1d`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_stays() {
        let mut status = json!({"conditions": [
            {"type": "Other", "status": "True"},
            {"type": "Ready", "status": "False", "lastTransitionTime": "2020-01-01T00:00:00Z", "reason": "Old"},
        ]});
        set_condition(
            &mut status,
            json!({"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "New"}),
        );
        assert_eq!(
            status["conditions"][1],
            json!({"type": "Ready", "status": "False", "lastTransitionTime": "2020-01-01T00:00:00Z", "reason": "New"})
        );
        set_condition(
            &mut status,
            json!({"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}),
        );
        assert_eq!(
            status["conditions"][1]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(status["conditions"][0]["type"], "Other");
        let mut empty = Value::Null;
        set_condition(&mut empty, json!({"type": "Ready", "status": "True"}));
        assert_eq!(
            empty,
            json!({"conditions": [{"type": "Ready", "status": "True"}]})
        );
    }

    #[test]
    fn names_follow_rfc1123_and_kubernetes_messages() {
        assert!(check_name(NameRule::Subdomain, "my-app.example", "metadata.name").is_empty());
        let cause = check_name(NameRule::Subdomain, "My_App", "metadata.name")
            .into_iter()
            .next()
            .expect("invalid");
        assert_eq!(cause.field, "metadata.name");
        assert!(
            cause
                .message
                .starts_with(r#"Invalid value: "My_App": a lowercase RFC 1123 subdomain"#)
        );
        assert!(!check_name(NameRule::Subdomain, "a.", "metadata.name").is_empty());
        assert!(!check_name(NameRule::Subdomain, &"a".repeat(254), "metadata.name").is_empty());
        assert!(check_name(NameRule::Label, "kube-system", "metadata.name").is_empty());
        assert!(!check_name(NameRule::Label, "a.b", "metadata.name").is_empty());
        assert!(!check_name(NameRule::Rfc1035Label, "1svc", "metadata.name").is_empty());
        assert!(check_name(NameRule::Rfc1035Label, "svc1", "metadata.name").is_empty());
        assert!(check_name(NameRule::PathSegment, "system:admin", "metadata.name").is_empty());
        assert!(!check_name(NameRule::PathSegment, "a/b", "metadata.name").is_empty());
    }

    #[test]
    fn generated_names_keep_the_prefix() {
        let name = generate_name("web-");
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        assert!(check_name(NameRule::Label, &name, "metadata.name").is_empty());
    }

    #[test]
    fn timestamps_are_rfc3339_seconds() {
        let t = now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
    }

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        for (seconds, text) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 3600, "3d1h"),
            (20 * 86400, "20d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(seconds), text, "{seconds}");
        }
    }
}
