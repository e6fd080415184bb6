//! kube-apiserver 1.33's validation for the kinds operators write, with its field paths and
//! words: ConfigMap and Secret keys, sizes and types; workload selectors and templates; Job
//! and CronJob specifics (cron schedules as the `robfig/cron` parser reads them); pods'
//! containers, ports and restart policies; Service ports and types.

use std::collections::BTreeSet;

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

/// `IsConfigMapKey`: every problem of a data key.
fn config_key_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if key.len() > 253 {
        problems.push("must be no more than 253 characters".to_string());
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        problems.push("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".to_string());
    }
    if key == "." {
        problems.push("must not be '.'".to_string());
    } else if key == ".." {
        problems.push("must not be '..'".to_string());
    } else if key.starts_with("..") {
        problems.push("must not start with '..'".to_string());
    }
    problems
}

fn keys_of<'a>(obj: &'a Value, field: &str) -> Vec<(&'a String, &'a Value)> {
    obj.get(field)
        .and_then(Value::as_object)
        .map(|m| m.iter().collect())
        .unwrap_or_default()
}

fn check_keys(obj: &Value, field: &str, causes: &mut Vec<Cause>) {
    for (key, _) in keys_of(obj, field) {
        for problem in config_key_problems(key) {
            causes.push(Cause::invalid(
                format!("{field}[{key}]"),
                &json!(key),
                problem,
            ));
        }
    }
}

/// A data value's size: base64-decoded for `data` of Secrets and `binaryData`.
fn data_size(value: &Value, base64: bool) -> usize {
    use base64::Engine;
    let text = value.as_str().unwrap_or_default();
    if base64 {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(|b| b.len())
            .unwrap_or(text.len())
    } else {
        text.len()
    }
}

/// Immutable ConfigMaps and Secrets keep their data.
fn check_immutable(obj: &Value, old: Option<&Value>, fields: &[&str], causes: &mut Vec<Cause>) {
    let Some(old) = old else { return };
    if old.get("immutable") != Some(&json!(true)) {
        return;
    }
    const DETAIL: &str = "field is immutable when `immutable` is set";
    if obj.get("immutable") != Some(&json!(true)) {
        causes.push(forbidden("immutable", DETAIL));
    }
    for field in fields {
        if obj.get(*field) != old.get(*field) {
            causes.push(forbidden(*field, DETAIL));
        }
    }
}

pub(super) fn config_map(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    check_immutable(obj, old, &["data", "binaryData"], &mut causes);
    check_keys(obj, "data", &mut causes);
    check_keys(obj, "binaryData", &mut causes);
    let binary: BTreeSet<&String> = keys_of(obj, "binaryData")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for (key, _) in keys_of(obj, "data") {
        if binary.contains(key) {
            causes.push(Cause::invalid(
                format!("data[{key}]"),
                &json!(key),
                "duplicate of key present in binaryData",
            ));
        }
    }
    let size: usize = keys_of(obj, "data")
        .iter()
        .map(|(_, v)| data_size(v, false))
        .chain(
            keys_of(obj, "binaryData")
                .iter()
                .map(|(_, v)| data_size(v, true)),
        )
        .sum();
    if size > MAX_DATA_BYTES {
        // kube-apiserver reports the size on the empty path, printed `[]`.
        causes.push(too_long("[]", MAX_DATA_BYTES));
    }
    causes
}

pub(super) fn secret(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(old) = old {
        let (new_type, old_type) = (obj.get("type"), old.get("type"));
        if new_type != old_type {
            causes.push(Cause::invalid(
                "type",
                new_type.unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
    }
    check_immutable(obj, old, &["data"], &mut causes);
    check_keys(obj, "data", &mut causes);
    let data = obj.get("data").and_then(Value::as_object);
    let has = |key: &str| data.is_some_and(|d| d.contains_key(key));
    let size: usize = keys_of(obj, "data")
        .iter()
        .map(|(_, v)| data_size(v, true))
        .sum();
    if size > MAX_DATA_BYTES {
        causes.push(too_long("data", MAX_DATA_BYTES));
    }
    match obj.get("type").and_then(Value::as_str).unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let account = obj
                .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if account.is_empty() {
                causes.push(required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                ));
            }
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => {
            causes.push(required("data[.dockercfg]"))
        }
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            causes.push(required("data[.dockerconfigjson]"))
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(required("data[username]"));
            causes.push(required("data[password]"));
        }
        "kubernetes.io/ssh-auth" => {
            let empty = data
                .and_then(|d| d.get("ssh-privatekey"))
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if empty {
                causes.push(required("data[ssh-privatekey]"));
            }
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has(key) {
                    causes.push(required(format!("data[{key}]")));
                }
            }
        }
        _ => {}
    }
    causes
}

/// Containers, init containers: names (unique across both), images, ports.
fn containers(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let mut names = BTreeSet::new();
    for list in ["containers", "initContainers"] {
        let items = spec.get(list).and_then(Value::as_array);
        if list == "containers" && items.is_none_or(Vec::is_empty) {
            causes.push(required(format!("{path}.containers")));
        }
        for (i, c) in items.into_iter().flatten().enumerate() {
            let at = format!("{path}.{list}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => causes.push(required(format!("{at}.name"))),
                Some(name) => {
                    let problems = check_name(NameRule::Label, name, &format!("{at}.name"));
                    if problems.is_empty() && !names.insert(name.to_string()) {
                        causes.push(duplicate(format!("{at}.name"), &json!(name)));
                    }
                    causes.extend(problems);
                }
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                causes.push(required(format!("{at}.image")));
            }
            if list == "containers" && c.get("restartPolicy").is_some_and(|r| !r.is_null()) {
                causes.push(forbidden(
                    format!("{at}.restartPolicy"),
                    "may not be set for non-init containers",
                ));
            }
            ports(c, &at, causes);
        }
    }
}

fn ports(container: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut names = BTreeSet::new();
    for (j, port) in container
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("{at}.ports[{j}]");
        match port.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => causes.push(required(format!("{path}.containerPort"))),
            Some(n) if !(1..=65535).contains(&n) => causes.push(Cause::invalid(
                format!("{path}.containerPort"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            )),
            _ => {}
        }
        if let Some(n) = port.get("hostPort").and_then(Value::as_i64)
            && n != 0
            && !(1..=65535).contains(&n)
        {
            causes.push(Cause::invalid(
                format!("{path}.hostPort"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            ));
        }
        protocol(port, &path, causes);
        if let Some(name) = port
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            let problems = port_name_problems(name);
            if problems.is_empty() && !names.insert(name.to_string()) {
                causes.push(duplicate(format!("{path}.name"), &json!(name)));
            }
            for problem in problems {
                causes.push(Cause::invalid(
                    format!("{path}.name"),
                    &json!(name),
                    problem,
                ));
            }
        }
    }
}

/// A port's protocol, when set, is one Kubernetes knows.
fn protocol(port: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(protocol) = port.get("protocol").and_then(Value::as_str)
        && !matches!(protocol, "TCP" | "UDP" | "SCTP")
    {
        causes.push(not_supported(
            format!("{path}.protocol"),
            protocol,
            &["SCTP", "TCP", "UDP"],
        ));
    }
}

/// `IsValidPortName`.
fn port_name_problems(name: &str) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if name.len() > 15 {
        problems.push("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        problems.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        problems.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        problems.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("must not begin or end with a hyphen");
    }
    problems
}

fn restart_policy(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    match spec.get("restartPolicy").and_then(Value::as_str) {
        None | Some("") => causes.push(required(format!("{path}.restartPolicy"))),
        Some("Always" | "OnFailure" | "Never") => {}
        Some(other) => causes.push(not_supported(
            format!("{path}.restartPolicy"),
            other,
            &["Always", "OnFailure", "Never"],
        )),
    }
}

pub(super) fn pod(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    containers(&spec, "spec", &mut causes);
    restart_policy(&spec, "spec", &mut causes);
    causes
}

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

/// The selector and template of a workload, as apps/v1 checks them.
fn selector_and_template(obj: &Value, kind: &str, causes: &mut Vec<Cause>) {
    let selector = obj.pointer("/spec/selector").filter(|s| !s.is_null());
    match selector {
        None => {
            if kind != "daemonset" {
                causes.push(required("spec.selector"));
            }
        }
        Some(sel) => {
            let empty = sel
                .get("matchLabels")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty())
                && sel
                    .get("matchExpressions")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty);
            if empty {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.selector",
                    format!("Invalid value: v1.LabelSelector{{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}}: empty selector is invalid for {kind}"),
                ));
                return;
            }
        }
    }
    let labels = obj.pointer("/spec/template/metadata/labels");
    let matches = selector
        .and_then(|s| konverge_apimachinery::selector::LabelSelector::from_json(s).ok())
        .map(|s| {
            let set = labels
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            s.matches(&set)
        });
    if matches == Some(false) || (selector.is_none() && kind == "daemonset") {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.template.metadata.labels",
            format!(
                "Invalid value: {}: `selector` does not match template `labels`",
                go_string_map(labels)
            ),
        ));
    }
}

fn workload(obj: &Value, kind: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    non_negative(
        obj,
        "/spec",
        "spec",
        &[
            "replicas",
            "minReadySeconds",
            "revisionHistoryLimit",
            "progressDeadlineSeconds",
        ],
        &mut causes,
    );
    selector_and_template(obj, kind, &mut causes);
    let spec = obj
        .pointer("/spec/template/spec")
        .cloned()
        .unwrap_or(Value::Null);
    containers(&spec, "spec.template.spec", &mut causes);
    match spec.get("restartPolicy").and_then(Value::as_str) {
        Some("Always") => {}
        None | Some("") => causes.push(required("spec.template.spec.restartPolicy")),
        Some(other) => causes.push(not_supported(
            "spec.template.spec.restartPolicy",
            other,
            &["Always"],
        )),
    }
    if spec
        .get("activeDeadlineSeconds")
        .is_some_and(|v| !v.is_null())
    {
        let owner = match kind {
            "daemonset" => "DaemonSet",
            "statefulset" => "StatefulSet",
            _ => "ReplicaSet",
        };
        causes.push(forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {owner} is not Supported"),
        ));
    }
    causes
}

pub(super) fn deployment(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    workload(obj, "deployment")
}

/// ReplicaSets share Deployments' checks, and their wording.
pub(super) fn replica_set(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    workload(obj, "deployment")
}

pub(super) fn daemon_set(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    workload(obj, "daemonset")
}

pub(super) fn stateful_set(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = workload(obj, "statefulset");
    if let Some(old) = old {
        // Only these may change.
        let mut a = obj.get("spec").cloned().unwrap_or(Value::Null);
        let mut b = old.get("spec").cloned().unwrap_or(Value::Null);
        for field in [
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ] {
            for spec in [&mut a, &mut b] {
                if let Some(s) = spec.as_object_mut() {
                    s.remove(field);
                }
            }
        }
        if a != b {
            causes.push(forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }
    causes
}

fn job_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    non_negative(
        spec,
        "",
        path,
        &[
            "parallelism",
            "completions",
            "activeDeadlineSeconds",
            "backoffLimit",
            "ttlSecondsAfterFinished",
        ],
        causes,
    );
    let pod = spec
        .pointer("/template/spec")
        .cloned()
        .unwrap_or(Value::Null);
    let pod_path = format!("{path}.template.spec");
    containers(&pod, &pod_path, causes);
    match pod.get("restartPolicy").and_then(Value::as_str) {
        Some("OnFailure" | "Never") => {}
        None | Some("" | "Always") => causes.push(required_because(
            format!("{pod_path}.restartPolicy"),
            "valid values: \"OnFailure\", \"Never\"",
        )),
        Some(other) => causes.push(not_supported(
            format!("{pod_path}.restartPolicy"),
            other,
            &["OnFailure", "Never"],
        )),
    }
}

pub(super) fn job(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    job_spec(&spec, "spec", &mut causes);
    causes
}

/// A CronJob's `timeZone`: an IANA name, as `time.LoadLocation` finds them (from the tz
/// database of this machine; without one, only the name's form is checked).
fn time_zone(zone: &str) -> Vec<Cause> {
    let invalid = |detail: String| Cause::invalid("spec.timeZone", &json!(zone), detail);
    if zone.is_empty() {
        return vec![invalid("timeZone must be nil or non-empty string".into())];
    }
    let part_ok = |part: &str| {
        !matches!(part, "." | "..")
            && !part.starts_with('-')
            && (1..=14).contains(&part.len())
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
    };
    if !zone.split('/').all(part_ok) {
        return vec![invalid(format!("unknown time zone {zone}"))];
    }
    let mut causes = Vec::new();
    if zone.eq_ignore_ascii_case("Local") {
        causes.push(invalid(
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"
                .into(),
        ));
    }
    if zone != "Local" && !known_zone(zone) {
        causes.push(invalid(format!("unknown time zone {zone}")));
    }
    causes
}

/// Whether `time.LoadLocation` finds `zone` (in this machine's tz database; without one,
/// every name is taken).
fn known_zone(zone: &str) -> bool {
    let db = jiff::tz::db();
    matches!(zone, "" | "UTC" | "Local") || db.is_definitively_empty() || db.get(zone).is_ok()
}

pub(super) fn cron_job(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if crate::resources::meta::meta_str(obj, "name").is_some_and(|n| n.len() > 52) {
        let name = crate::resources::meta::meta_str(obj, "name").unwrap_or_default();
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be no more than 52 characters",
        ));
    }
    match obj.pointer("/spec/schedule").and_then(Value::as_str) {
        None | Some("") => causes.push(required("spec.schedule")),
        Some(schedule) => {
            // robfig/cron takes a `TZ=` or `CRON_TZ=` prefix; the API forbids it, except in
            // updates of CronJobs that had one already (and no timeZone).
            let parsed = match schedule
                .strip_prefix("TZ=")
                .or_else(|| schedule.strip_prefix("CRON_TZ="))
                .and_then(|rest| rest.split_once(' '))
            {
                Some((zone, rest)) if known_zone(zone) => cron_schedule(rest.trim()),
                Some((zone, _)) => Err(format!(
                    "provided bad location {zone}: unknown time zone {zone}"
                )),
                None => cron_schedule(schedule),
            };
            if let Err(problem) = parsed {
                causes.push(Cause::invalid("spec.schedule", &json!(schedule), problem));
            }
            let allow_tz = old
                .and_then(|o| o.pointer("/spec/schedule"))
                .and_then(Value::as_str)
                .is_some_and(|s| s.contains("TZ"));
            let has_zone = obj.pointer("/spec/timeZone").is_some_and(|z| !z.is_null());
            if schedule.contains("TZ") {
                if !allow_tz {
                    causes.push(Cause::invalid(
                        "spec.schedule",
                        &json!(schedule),
                        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                    ));
                } else if has_zone {
                    causes.push(Cause::invalid(
                        "spec.schedule",
                        &json!(schedule),
                        "cannot use both timeZone field and TZ or CRON_TZ in schedule",
                    ));
                }
            }
        }
    }
    if let Some(zone) = obj.pointer("/spec/timeZone").and_then(Value::as_str) {
        causes.extend(time_zone(zone));
    }
    non_negative(
        obj,
        "/spec",
        "spec",
        &[
            "startingDeadlineSeconds",
            "successfulJobsHistoryLimit",
            "failedJobsHistoryLimit",
        ],
        &mut causes,
    );
    match obj
        .pointer("/spec/concurrencyPolicy")
        .and_then(Value::as_str)
    {
        None | Some("Allow" | "Forbid" | "Replace") => {}
        Some("") => causes.push(required("spec.concurrencyPolicy")),
        Some(other) => causes.push(not_supported(
            "spec.concurrencyPolicy",
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    let spec = obj
        .pointer("/spec/jobTemplate/spec")
        .cloned()
        .unwrap_or(Value::Null);
    job_spec(&spec, "spec.jobTemplate.spec", &mut causes);
    causes
}

/// A standard cron schedule (five fields, or a `@` descriptor), as `robfig/cron`'s
/// `ParseStandard` reads it, with its error words.
pub(crate) fn cron_schedule(schedule: &str) -> Result<(), String> {
    if let Some(descriptor) = schedule.strip_prefix('@') {
        return match descriptor {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            d if d.starts_with("every ") => Ok(()),
            _ => Err(format!("unrecognized descriptor: {schedule}")),
        };
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    const BOUNDS: [(u32, u32, &[&str]); 5] = [
        (0, 59, &[]),
        (0, 23, &[]),
        (1, 31, &[]),
        (
            1,
            12,
            &[
                "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
            ],
        ),
        (0, 6, &["sun", "mon", "tue", "wed", "thu", "fri", "sat"]),
    ];
    for (field, (min, max, names)) in fields.iter().zip(BOUNDS) {
        for part in field.split(',') {
            cron_range(part, min, max, names)?;
        }
    }
    Ok(())
}

fn cron_number(text: &str, names: &[&str], offset: u32) -> Result<u32, String> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(i as u32 + offset);
    }
    text.parse::<u32>().map_err(|_| {
        format!("failed to parse int from {text}: strconv.Atoi: parsing {text:?}: invalid syntax")
    })
}

fn cron_range(part: &str, min: u32, max: u32, names: &[&str]) -> Result<(), String> {
    let (range, step) = match part.split_once('/') {
        Some((range, step)) => (range, Some(step)),
        None => (part, None),
    };
    let (start, end) = if range == "*" || range == "?" {
        (min, max)
    } else {
        match range.split_once('-') {
            Some((a, b)) => (cron_number(a, names, min)?, cron_number(b, names, min)?),
            None => {
                let n = cron_number(range, names, min)?;
                (n, if step.is_some() { max } else { n })
            }
        }
    };
    if let Some(step) = step {
        let step = cron_number(step, &[], 0)?;
        if step == 0 {
            return Err(format!("step of range should be a positive number: {part}"));
        }
    }
    if start < min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({min}): {part}"
        ));
    }
    if end > max {
        return Err(format!(
            "end of range ({end}) above maximum ({max}): {part}"
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {part}"
        ));
    }
    Ok(())
}

pub(super) fn service(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = super::strategy::validate_service(obj, old);
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or("");
    if !matches!(
        kind,
        "ClusterIP" | "ExternalName" | "LoadBalancer" | "NodePort"
    ) {
        causes.push(not_supported(
            "spec.type",
            kind,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ));
    }
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    let ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() && !headless && kind != "ExternalName" {
        causes.push(required("spec.ports"));
    }
    if kind == "ExternalName"
        && spec
            .get("externalName")
            .and_then(Value::as_str)
            .is_none_or(|n| n.trim_end_matches('.').is_empty())
    {
        causes.push(required("spec.externalName"));
    }
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        match port
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            None if ports.len() > 1 => causes.push(required(format!("{path}.name"))),
            None => {}
            Some(name) => {
                let problems = check_name(NameRule::Label, name, &format!("{path}.name"));
                if problems.is_empty() && !names.insert(name.to_string()) {
                    causes.push(duplicate(format!("{path}.name"), &json!(name)));
                }
                causes.extend(problems);
            }
        }
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&number) {
            causes.push(Cause::invalid(
                format!("{path}.port"),
                &json!(number),
                "must be between 1 and 65535, inclusive",
            ));
        }
        protocol(port, &path, &mut causes);
        if kind == "ClusterIP"
            && port
                .get("nodePort")
                .and_then(Value::as_i64)
                .is_some_and(|n| n != 0)
        {
            causes.push(forbidden(
                format!("{path}.nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
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
