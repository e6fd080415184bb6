//! Label key and label value validation, with kube-apiserver's wording (Kubernetes 1.33,
//! `k8s.io/apimachinery/pkg/util/validation`: `IsQualifiedName` and `IsValidLabelValue`).

use crate::names::{dns1123_subdomain_errors, max_len_error, regex_error};

/// Longest name part of a label key, and longest label value.
const LABEL_MAX_LENGTH: usize = 63;

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, anchored.
fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Everything wrong with `key` as a label key (a "qualified name": an optional DNS subdomain
/// prefix and `/`, then a name of at most 63 characters), in kube-apiserver's words. Empty
/// when the key is valid.
pub fn label_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_MAX_LENGTH {
        errs.push(format!("name part {}", max_len_error(LABEL_MAX_LENGTH)));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Everything wrong with `value` as a label value (empty, or at most 63 alphanumerics plus
/// `-`, `_`, `.` inside), in kube-apiserver's words. Empty when the value is valid.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_MAX_LENGTH {
        errs.push(max_len_error(LABEL_MAX_LENGTH));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Checks a label key; the error is every problem joined with `"; "`, as label selectors
/// report it.
pub fn validate_label_key(key: &str) -> Result<(), String> {
    let errs = label_key_errors(key);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// Checks a label value; the error is every problem joined with `"; "`, as label selectors
/// report it.
pub fn validate_label_value(value: &str) -> Result<(), String> {
    let errs = label_value_errors(value);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(label_key_errors("app").is_empty());
        assert!(label_key_errors("example.com/app-name_1.x").is_empty());
        assert!(label_key_errors("app.kubernetes.io/name").is_empty());
        assert_eq!(
            label_key_errors("/a"),
            vec!["prefix part must be non-empty"]
        );
        assert_eq!(label_key_errors("a/").len(), 2);
        assert_eq!(label_key_errors("a/b/c").len(), 1);
        assert_eq!(
            label_key_errors("Example.com/a")[0]
                .split(' ')
                .take(2)
                .collect::<Vec<_>>(),
            ["prefix", "part"]
        );
        assert_eq!(
            label_key_errors(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
        assert_eq!(
            label_key_errors("-a"),
            vec![
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
    }

    #[test]
    fn values() {
        assert!(label_value_errors("").is_empty());
        assert!(label_value_errors("v1.2_3-x").is_empty());
        assert_eq!(label_value_errors("a b").len(), 1);
        assert_eq!(
            label_value_errors(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }
}
