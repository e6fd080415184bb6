//! The Pod Security levels and policy versions, and how a namespace's
//! `pod-security.kubernetes.io/*` labels resolve to the policy its pods are held to.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Value};

use crate::error::Cause;

/// The prefix of every Pod Security label and audit annotation.
pub(super) const PREFIX: &str = "pod-security.kubernetes.io/";

/// How strict a policy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Level {
    /// Anything goes.
    Privileged,
    /// Known privilege escalations are refused.
    Baseline,
    /// Hardened: baseline, plus the pod must run as a locked-down non-root user.
    Restricted,
}

impl Level {
    /// A label's level. Anything else is held to `restricted` (failing closed), with an error.
    fn parse(value: &str) -> (Level, Option<&'static str>) {
        match value {
            "privileged" => (Level::Privileged, None),
            "baseline" => (Level::Baseline, None),
            "restricted" => (Level::Restricted, None),
            _ => (
                Level::Restricted,
                Some("must be one of privileged, baseline, restricted"),
            ),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// How strict this level is against `other` (`Greater`: stricter).
    pub(super) fn strictness(self, other: Level) -> Ordering {
        let rank = |l: Level| match l {
            Level::Privileged => 0,
            Level::Baseline => 1,
            Level::Restricted => 2,
        };
        rank(self).cmp(&rank(other))
    }
}

/// A policy version: `latest`, or the checks as they were in Kubernetes `v1.N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Version {
    /// The newest checks this server knows.
    Latest,
    /// The checks of `v1.<minor>`.
    Minor(u64),
}

impl Version {
    /// A label's version: `latest` or `v1.N` (no leading zeros). Anything else is read as
    /// `latest`, with an error.
    fn parse(value: &str) -> (Version, Option<&'static str>) {
        const BAD: &str = r#"must be "latest" or "v1.x""#;
        if value == "latest" {
            return (Version::Latest, None);
        }
        let Some(digits) = value.strip_prefix("v1.") else {
            return (Version::Latest, Some(BAD));
        };
        let well_formed = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        // Go reads the number as a signed 64-bit integer: larger ones are refused too.
        match digits.parse::<i64>() {
            Ok(minor) if well_formed => (Version::Minor(minor.unsigned_abs()), None),
            _ => (Version::Latest, Some(BAD)),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(minor) => write!(f, "v1.{minor}"),
        }
    }
}

/// A level at a version: what one mode of a namespace's policy holds pods to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct LevelVersion {
    /// How strict.
    pub(super) level: Level,
    /// Which version of the checks.
    pub(super) version: Version,
}

impl LevelVersion {
    /// `privileged:latest`, kube-apiserver's default for every mode.
    pub(super) const PRIVILEGED_LATEST: LevelVersion = LevelVersion {
        level: Level::Privileged,
        version: Version::Latest,
    };
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// A namespace's policy: what is refused (`enforce`), recorded in the audit log (`audit`)
/// and warned about (`warn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Policy {
    /// Pods that violate it are refused.
    pub(super) enforce: LevelVersion,
    /// Violations are recorded as an audit annotation.
    pub(super) audit: LevelVersion,
    /// Violations are sent back as a warning.
    pub(super) warn: LevelVersion,
}

impl Policy {
    /// kube-apiserver's default configuration: `privileged:latest` for every mode.
    pub(super) const DEFAULT: Policy = Policy {
        enforce: LevelVersion::PRIVILEGED_LATEST,
        audit: LevelVersion::PRIVILEGED_LATEST,
        warn: LevelVersion::PRIVILEGED_LATEST,
    };

    /// Whether no mode checks anything.
    pub(super) fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|lv| lv.level == Level::Privileged)
    }

    /// The policy a namespace's labels ask for, over the defaults, with an error for each
    /// label that is not valid. A policy is always returned: a bad enforce level is read as
    /// `restricted` (fail closed), a bad audit or warn level as `privileged` (fail open), and
    /// a bad version as `latest`.
    pub(super) fn from_labels(labels: Option<&Map<String, Value>>) -> (Policy, Vec<Cause>) {
        let mut policy = Policy::DEFAULT;
        let mut errors = Vec::new();
        let Some(labels) = labels.filter(|l| !l.is_empty()) else {
            return (policy, errors);
        };
        let label = |mode: &str| -> Option<&str> {
            let key = format!("{PREFIX}{mode}");
            let value = labels.get(&key)?;
            // Label values are strings once the namespace is validated; anything else is
            // read as no value at all.
            Some(value.as_str().unwrap_or(""))
        };
        let mut invalid = |mode: &str, value: &str, why: &str| {
            errors.push(Cause::invalid(
                format!("metadata.labels[{PREFIX}{mode}]"),
                &Value::String(value.to_string()),
                why,
            ));
        };

        let mut enforce_level_set = false;
        if let Some(value) = label("enforce") {
            let (level, err) = Level::parse(value);
            policy.enforce.level = level;
            enforce_level_set = err.is_none();
            if let Some(why) = err {
                invalid("enforce", value, why);
            }
        }
        if let Some(value) = label("enforce-version") {
            let (version, err) = Version::parse(value);
            policy.enforce.version = version;
            if let Some(why) = err {
                invalid("enforce-version", value, why);
            }
        }
        if let Some(value) = label("audit") {
            let (level, err) = Level::parse(value);
            policy.audit.level = level;
            if let Some(why) = err {
                invalid("audit", value, why);
                policy.audit.level = Level::Privileged;
            }
        }
        if let Some(value) = label("audit-version") {
            let (version, err) = Version::parse(value);
            policy.audit.version = version;
            if let Some(why) = err {
                invalid("audit-version", value, why);
            }
        }
        let warn_level_set = label("warn").is_some();
        if let Some(value) = label("warn") {
            let (level, err) = Level::parse(value);
            policy.warn.level = level;
            if let Some(why) = err {
                invalid("warn", value, why);
                policy.warn.level = Level::Privileged;
            }
        }
        let warn_version_set = label("warn-version").is_some();
        if let Some(value) = label("warn-version") {
            let (version, err) = Version::parse(value);
            policy.warn.version = version;
            if let Some(why) = err {
                invalid("warn-version", value, why);
            }
        }
        // An explicitly stricter enforce level is warned about too, unless warn is set.
        if !warn_level_set
            && enforce_level_set
            && policy.enforce.level.strictness(policy.warn.level) == Ordering::Greater
        {
            policy.warn.level = policy.enforce.level;
            if !warn_version_set {
                policy.warn.version = policy.enforce.version;
            }
        }
        (policy, errors)
    }
}

/// A list of field errors as kube's aggregate error prints it: the one error, or `[e1, e2]`.
pub(super) fn aggregate(errors: &[Cause]) -> String {
    let rendered: Vec<String> = errors
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    match rendered.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", rendered.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(labels: Value) -> (Policy, Vec<String>) {
        let (policy, errors) = Policy::from_labels(labels.as_object());
        (
            policy,
            errors
                .iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect(),
        )
    }

    fn lv(level: Level, version: Version) -> LevelVersion {
        LevelVersion { level, version }
    }

    #[test]
    fn no_labels_is_the_default_privileged_latest() {
        assert_eq!(policy(json!({})), (Policy::DEFAULT, vec![]));
        assert_eq!(policy(json!({"app": "x"})), (Policy::DEFAULT, vec![]));
        assert!(Policy::DEFAULT.fully_privileged());
        assert_eq!(
            LevelVersion::PRIVILEGED_LATEST.to_string(),
            "privileged:latest"
        );
    }

    #[test]
    fn versions_parse_as_kube_parses_them() {
        assert_eq!(Version::parse("latest"), (Version::Latest, None));
        assert_eq!(Version::parse("v1.0"), (Version::Minor(0), None));
        assert_eq!(Version::parse("v1.25"), (Version::Minor(25), None));
        for bad in [
            "v1.025", "v2.1", "1.25", "v1.", "v1.x", "v1.-1", "", "Latest",
        ] {
            assert_eq!(
                Version::parse(bad),
                (Version::Latest, Some(r#"must be "latest" or "v1.x""#)),
                "{bad}"
            );
        }
        assert_eq!(Version::Minor(7).to_string(), "v1.7");
    }

    #[test]
    fn an_enforce_level_is_warned_about_too_unless_warn_is_set() {
        let (p, errors) = policy(json!({
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": "v1.24",
        }));
        assert!(errors.is_empty());
        assert_eq!(p.enforce, lv(Level::Baseline, Version::Minor(24)));
        assert_eq!(p.warn, lv(Level::Baseline, Version::Minor(24)));
        assert_eq!(p.audit, LevelVersion::PRIVILEGED_LATEST);

        let (p, _) = policy(json!({
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/warn": "baseline",
        }));
        assert_eq!(p.warn, lv(Level::Baseline, Version::Latest));

        let (p, _) = policy(json!({
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "v1.22",
            "pod-security.kubernetes.io/warn-version": "v1.30",
        }));
        assert_eq!(p.warn, lv(Level::Restricted, Version::Minor(30)));
    }

    #[test]
    fn bad_labels_fail_closed_for_enforce_and_open_for_audit_and_warn() {
        let (p, errors) = policy(json!({
            "pod-security.kubernetes.io/enforce": "strict",
            "pod-security.kubernetes.io/enforce-version": "v1.x",
            "pod-security.kubernetes.io/audit": "loud",
            "pod-security.kubernetes.io/warn": "",
        }));
        assert_eq!(p.enforce, lv(Level::Restricted, Version::Latest));
        assert_eq!(p.audit.level, Level::Privileged);
        // A bad enforce level does not carry over to warn.
        assert_eq!(p.warn.level, Level::Privileged);
        assert_eq!(
            errors,
            [
                r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: "v1.x": must be "latest" or "v1.x""#,
                r#"metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: "loud": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "": must be one of privileged, baseline, restricted"#,
            ]
        );
    }

    #[test]
    fn errors_aggregate_as_kube_prints_them() {
        let (_, errors) =
            Policy::from_labels(json!({"pod-security.kubernetes.io/audit": "x"}).as_object());
        assert_eq!(
            aggregate(&errors),
            r#"metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: "x": must be one of privileged, baseline, restricted"#
        );
        let (_, errors) = Policy::from_labels(
            json!({"pod-security.kubernetes.io/audit": "x", "pod-security.kubernetes.io/warn": "y"})
                .as_object(),
        );
        assert!(
            aggregate(&errors).starts_with("[metadata.labels[pod-security.kubernetes.io/audit]")
        );
    }

    #[test]
    fn levels_order_by_strictness() {
        assert_eq!(
            Level::Restricted.strictness(Level::Baseline),
            Ordering::Greater
        );
        assert_eq!(
            Level::Privileged.strictness(Level::Baseline),
            Ordering::Less
        );
        assert_eq!(Level::Baseline.strictness(Level::Baseline), Ordering::Equal);
    }
}
