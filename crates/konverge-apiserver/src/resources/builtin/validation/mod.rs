//! kube-apiserver 1.33's validation for the kinds operators write, with its field paths and
//! words. One file per family of kinds:
//!
//! - `config`: ConfigMap and Secret keys, sizes, types and immutability;
//! - `pod`: pod specs wherever they appear (containers, ports, restart policies);
//! - `workloads`: apps/v1 selectors and templates, StatefulSet updates, Jobs;
//! - `cron`: CronJob schedules as the `robfig/cron` parser reads them, and time zones;
//! - `service`: Service types and ports.
//!
//! This file holds the words every family shares (`Required value`, `Unsupported value` ...).

use serde_json::{Value, json};

use crate::error::Cause;
use crate::resources::NameRule;
use crate::resources::meta::check_name;

/// ConfigMaps and Secrets hold at most 1 MiB of data.
const MAX_DATA_BYTES: usize = 1024 * 1024;

fn cause(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.into(),
        message: message.into(),
        field: field.into(),
    }
}

fn required(field: impl Into<String>) -> Cause {
    Cause::required(field)
}

fn required_because(field: impl Into<String>, detail: &str) -> Cause {
    cause(
        "FieldValueRequired",
        field,
        format!("Required value: {detail}"),
    )
}

fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    cause(
        "FieldValueNotSupported",
        field,
        format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
    )
}

fn duplicate(field: impl Into<String>, value: &Value) -> Cause {
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    cause(
        "FieldValueDuplicate",
        field,
        format!("Duplicate value: {shown}"),
    )
}

fn too_long(field: impl Into<String>, max: usize) -> Cause {
    cause(
        "FieldValueTooLong",
        field,
        format!("Too long: may not be more than {max} bytes"),
    )
}

fn forbidden(field: impl Into<String>, detail: &str) -> Cause {
    Cause::forbidden(field, detail)
}

/// Each of `fields` under `at` (a JSON pointer, reported as the dotted `path`) that is set
/// must not be negative.
fn non_negative(obj: &Value, at: &str, path: &str, fields: &[&str], causes: &mut Vec<Cause>) {
    for field in fields {
        if let Some(n) = obj
            .pointer(&format!("{at}/{field}"))
            .and_then(Value::as_i64)
            && n < 0
        {
            causes.push(Cause::invalid(
                format!("{path}.{field}"),
                &json!(n),
                "must be greater than or equal to 0",
            ));
        }
    }
}

mod config;
mod cron;
mod pod;
mod service;
mod workloads;

pub(super) use config::{config_map, secret};
pub(super) use cron::cron_job;
pub(super) use pod::pod;
pub(super) use service::service;
pub(super) use workloads::{daemon_set, deployment, job, replica_set, stateful_set};

/// Go's `%#v` of a `map[string]string` (keys sorted), or its nil.
fn go_string_map(map: Option<&Value>) -> String {
    match map.and_then(Value::as_object) {
        None => "map[string]string(nil)".into(),
        Some(m) => {
            let entries: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or_default()))
                .collect();
            format!("map[string]string{{{}}}", entries.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cron::cron_schedule;
    use super::*;

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn config_keys_and_sizes_are_checked_as_kube_apiserver_checks_them() {
        let cm = json!({"data": {"a b": "1", "..": "2", "ok": "3"}, "binaryData": {"ok": "MQ=="}});
        let got = messages(&config_map(&cm, None));
        assert!(got.contains(&r#"data[a b]: Invalid value: "a b": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#.to_string()), "{got:?}");
        assert!(got.contains(&r#"data[..]: Invalid value: "..": must not be '..'"#.to_string()));
        assert!(got.contains(
            &r#"data[ok]: Invalid value: "ok": duplicate of key present in binaryData"#.to_string()
        ));
        let big = json!({"data": {"a": "x".repeat(MAX_DATA_BYTES + 1)}});
        assert_eq!(
            messages(&config_map(&big, None)),
            ["[]: Too long: may not be more than 1048576 bytes"]
        );
        let tls = json!({"type": "kubernetes.io/tls", "data": {}});
        assert_eq!(
            messages(&secret(&tls, None)),
            [
                "data[tls.crt]: Required value",
                "data[tls.key]: Required value"
            ]
        );
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let changed = json!({"immutable": true, "data": {"a": "2"}});
        assert_eq!(
            messages(&config_map(&changed, Some(&old))),
            ["data: Forbidden: field is immutable when `immutable` is set"]
        );
    }

    #[test]
    fn workloads_and_jobs_are_checked_with_kube_apiserver_words() {
        let deploy = json!({"spec": {"selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
        assert_eq!(
            messages(&deployment(&deploy, None)),
            [
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"b\"}: `selector` does not match template `labels`",
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            ]
        );
        let job = json!({"spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "x"}, {"name": "c", "image": "y"}]}}}});
        assert_eq!(
            messages(&super::job(&job, None)),
            [
                "spec.template.spec.containers[1].name: Duplicate value: \"c\"",
                "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
            ]
        );
    }

    #[test]
    fn cron_time_zones_are_iana_names() {
        let cron = |schedule: &str, zone: Option<&str>| {
            let mut obj = json!({"metadata": {"name": "c"}, "spec": {"schedule": schedule,
                "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x"}]}}}}}});
            if let Some(zone) = zone {
                obj["spec"]["timeZone"] = json!(zone);
            }
            obj
        };
        let zone_messages = |zone: &str| -> Vec<String> {
            messages(&cron_job(&cron("0 * * * *", Some(zone)), None))
                .into_iter()
                .filter(|m| m.starts_with("spec.timeZone"))
                .collect()
        };
        assert!(zone_messages("Europe/Berlin").is_empty());
        assert!(zone_messages("UTC").is_empty());
        assert_eq!(
            zone_messages("Local"),
            [
                "spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"
            ]
        );
        assert_eq!(
            zone_messages("../etc/passwd"),
            ["spec.timeZone: Invalid value: \"../etc/passwd\": unknown time zone ../etc/passwd"]
        );
        if !jiff::tz::db().is_definitively_empty() {
            assert_eq!(
                zone_messages("Amerrica/New_York"),
                [
                    "spec.timeZone: Invalid value: \"Amerrica/New_York\": unknown time zone Amerrica/New_York"
                ]
            );
        }
        // TZ in the schedule: refused on create, kept on update of a CronJob that had it.
        let tz = cron("TZ=UTC 0 * * * *", None);
        assert_eq!(
            messages(&cron_job(&tz, None)),
            [
                "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
            ]
        );
        assert!(messages(&cron_job(&tz, Some(&tz))).is_empty());
        let both = cron("TZ=UTC 0 * * * *", Some("UTC"));
        assert_eq!(
            messages(&cron_job(&both, Some(&tz))),
            [
                "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use both timeZone field and TZ or CRON_TZ in schedule"
            ]
        );
    }

    #[test]
    fn cron_schedules_parse_as_robfig_cron_parses_them() {
        for ok in [
            "*/5 * * * *",
            "0 0 * * MON-FRI",
            "@hourly",
            "15,45 8-18 1 JAN,jul *",
        ] {
            assert_eq!(cron_schedule(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            cron_schedule("bad").unwrap_err(),
            "expected exactly 5 fields, found 1: [bad]"
        );
        assert_eq!(
            cron_schedule("61 * * * *").unwrap_err(),
            "end of range (61) above maximum (59): 61"
        );
        assert_eq!(
            cron_schedule("x * * * *").unwrap_err(),
            r#"failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax"#
        );
    }
}
