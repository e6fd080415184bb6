//! Object metadata rules shared by every resource: names, generated names, uids, timestamps,
//! and the fields a client may not change.

use serde_json::{Map, Value, json};

use crate::error::Cause;
use crate::resources::NameRule;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str, first_alpha: bool) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && (if first_alpha {
            bytes[0].is_ascii_lowercase()
        } else {
            alnum(bytes[0])
        })
        && alnum(bytes[bytes.len() - 1])
        && bytes.iter().all(|&b| alnum(b) || b == b'-')
}

/// Checks `name` against `rule`, returning the cause kube-apiserver would give for `field`.
pub fn check_name(rule: NameRule, name: &str, field: &str) -> Option<Cause> {
    name_problem(rule, name).map(|p| Cause::invalid(field, &Value::from(name), p))
}

/// What is wrong with `name` under `rule`, in kube-apiserver's words.
pub fn name_problem(rule: NameRule, name: &str) -> Option<String> {
    match rule {
        NameRule::Subdomain => {
            if name.len() > 253 {
                Some("must be no more than 253 characters".to_string())
            } else if !name.split('.').all(|part| is_label(part, false)) {
                Some(SUBDOMAIN_MSG.to_string())
            } else {
                None
            }
        }
        NameRule::Label => {
            if name.len() > 63 {
                Some("must be no more than 63 characters".to_string())
            } else if !is_label(name, false) {
                Some(LABEL_MSG.to_string())
            } else {
                None
            }
        }
        NameRule::Rfc1035Label => {
            if name.len() > 63 {
                Some("must be no more than 63 characters".to_string())
            } else if !is_label(name, true) {
                Some(DNS1035_MSG.to_string())
            } else {
                None
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                Some(format!("may not be '{name}'"))
            } else if name.contains('/') {
                Some("may not contain '/'".to_string())
            } else if name.contains('%') {
                Some("may not contain '%'".to_string())
            } else {
                None
            }
        }
    }
}

/// The current time as Kubernetes writes timestamps (RFC 3339, seconds, UTC).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc1123_and_kubernetes_messages() {
        assert!(check_name(NameRule::Subdomain, "my-app.example", "metadata.name").is_none());
        let cause = check_name(NameRule::Subdomain, "My_App", "metadata.name").expect("invalid");
        assert_eq!(cause.field, "metadata.name");
        assert!(
            cause
                .message
                .starts_with(r#"Invalid value: "My_App": a lowercase RFC 1123 subdomain"#)
        );
        assert!(check_name(NameRule::Subdomain, "a.", "metadata.name").is_some());
        assert!(check_name(NameRule::Subdomain, &"a".repeat(254), "metadata.name").is_some());
        assert!(check_name(NameRule::Label, "kube-system", "metadata.name").is_none());
        assert!(check_name(NameRule::Label, "a.b", "metadata.name").is_some());
        assert!(check_name(NameRule::Rfc1035Label, "1svc", "metadata.name").is_some());
        assert!(check_name(NameRule::Rfc1035Label, "svc1", "metadata.name").is_none());
        assert!(check_name(NameRule::PathSegment, "system:admin", "metadata.name").is_none());
        assert!(check_name(NameRule::PathSegment, "a/b", "metadata.name").is_some());
    }

    #[test]
    fn generated_names_keep_the_prefix() {
        let name = generate_name("web-");
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        assert!(check_name(NameRule::Label, &name, "metadata.name").is_none());
    }

    #[test]
    fn timestamps_are_rfc3339_seconds() {
        let t = now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
    }
}
