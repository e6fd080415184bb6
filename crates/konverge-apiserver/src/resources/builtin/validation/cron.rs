//! CronJobs: names, schedules as robfig/cron reads them, time zones.

use serde_json::{Value, json};

use super::workloads::job_spec;
use super::*;
use crate::error::Cause;

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

pub(crate) fn cron_job(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
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
pub(super) fn cron_schedule(schedule: &str) -> Result<(), String> {
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
