//! Cron schedules as kcm reads them (robfig/cron's `ParseStandard`): five fields (minute,
//! hour, day of month, month, day of week) with `*`, `?`, lists, ranges, steps and month
//! and weekday names; the descriptors `@yearly`, `@annually`, `@monthly`, `@weekly`,
//! `@daily`, `@midnight`, `@hourly` and `@every <duration>`; and a `TZ=`/`CRON_TZ=` prefix
//! naming the time zone (which the API no longer accepts in new CronJobs).
//!
//! Times are found in the schedule's time zone from jiff's tz database; a civil time that
//! a DST gap skips is taken as the instant after the gap.

use std::time::Duration;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// Marks a field given as `*` or `?` (which matters for the day fields).
const STAR: u64 = 1 << 63;

/// A parsed schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    kind: Kind,
    zone: TimeZone,
}

#[derive(Clone, Debug)]
enum Kind {
    Fields(Fields),
    Every(Duration),
}

/// Bit sets of the matching values of each field.
#[derive(Clone, Copy, Debug)]
struct Fields {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// The time zone `name` as Go's `time.LoadLocation` finds it (`""` and `UTC` are UTC).
pub fn load_zone(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() || name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    if name == "Local" {
        return Ok(TimeZone::system());
    }
    jiff::tz::db()
        .get(name)
        .map_err(|_| format!("unknown time zone {name}"))
}

impl Schedule {
    /// Parses `spec`, in `zone` unless it names its own; the error is robfig/cron's.
    pub fn parse(spec: &str, zone: TimeZone) -> Result<Schedule, String> {
        let mut zone = zone;
        let mut spec = spec.trim();
        if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
            let (prefix, rest) = spec.split_once(' ').unwrap_or((spec, ""));
            let name = prefix.split_once('=').map_or("", |(_, name)| name);
            zone = load_zone(name).map_err(|e| format!("provided bad location {name}: {e}"))?;
            spec = rest.trim();
        }
        if spec.is_empty() {
            return Err("empty spec string".into());
        }
        let kind = if spec.starts_with('@') {
            descriptor(spec)?
        } else {
            let fields: Vec<&str> = spec.split_whitespace().collect();
            if fields.len() != 5 {
                return Err(format!(
                    "expected exactly 5 fields, found {}: [{}]",
                    fields.len(),
                    fields.join(" ")
                ));
            }
            Kind::Fields(Fields {
                minute: field(fields[0], &MINUTE)?,
                hour: field(fields[1], &HOUR)?,
                dom: field(fields[2], &DOM)?,
                month: field(fields[3], &MONTH)?,
                dow: field(fields[4], &DOW)?,
            })
        };
        Ok(Schedule { kind, zone })
    }

    /// The first time after `after` the schedule fires; `None` when it never does within
    /// five years (robfig's zero time).
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        match &self.kind {
            Kind::Every(delay) => {
                let whole = Timestamp::from_second(after.as_second()).ok()?;
                whole.checked_add(*delay).ok()
            }
            Kind::Fields(fields) => fields.next(&self.zone, after),
        }
    }
}

impl Fields {
    fn next(&self, zone: &TimeZone, after: Timestamp) -> Option<Timestamp> {
        let civil = after.to_zoned(zone.clone()).datetime();
        let mut t = civil
            .with()
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()?
            .checked_add(1.minute())
            .ok()?;
        let limit = t.year() + 5;
        while t.year() <= limit {
            if !has(self.month, t.month()) {
                t = t
                    .date()
                    .first_of_month()
                    .checked_add(1.month())
                    .ok()?
                    .to_datetime(midnight());
            } else if !self.day_matches(t) {
                t = t.date().tomorrow().ok()?.to_datetime(midnight());
            } else if !has(self.hour, t.hour()) {
                t = t
                    .with()
                    .minute(0)
                    .build()
                    .ok()?
                    .checked_add(1.hour())
                    .ok()?;
            } else if !has(self.minute, t.minute()) {
                t = t.checked_add(1.minute()).ok()?;
            } else {
                let found = t.to_zoned(zone.clone()).ok()?.timestamp();
                if found > after {
                    return Some(found);
                }
                t = t.checked_add(1.minute()).ok()?;
            }
        }
        None
    }

    /// robfig's day rule: when either day field is `*`, both must match; otherwise either.
    fn day_matches(&self, t: DateTime) -> bool {
        let dom = has(self.dom, t.day());
        let dow = has(self.dow, t.weekday().to_sunday_zero_offset());
        if self.dom & STAR != 0 || self.dow & STAR != 0 {
            dom && dow
        } else {
            dom || dow
        }
    }
}

fn midnight() -> jiff::civil::Time {
    jiff::civil::Time::midnight()
}

fn has(bits: u64, value: i8) -> bool {
    u32::try_from(value).is_ok_and(|v| v < 63 && bits & (1 << v) != 0)
}

fn descriptor(spec: &str) -> Result<Kind, String> {
    let fields = |text: &str| match Schedule::parse(text, TimeZone::UTC) {
        Ok(Schedule { kind, .. }) => Ok(kind),
        Err(e) => Err(e),
    };
    match spec {
        "@yearly" | "@annually" => fields("0 0 1 1 *"),
        "@monthly" => fields("0 0 1 * *"),
        "@weekly" => fields("0 0 * * 0"),
        "@daily" | "@midnight" => fields("0 0 * * *"),
        "@hourly" => fields("0 * * * *"),
        _ => match spec.strip_prefix("@every ") {
            Some(text) => {
                let duration = go_duration(text.trim()).ok_or_else(|| {
                    format!(
                        "failed to parse duration {spec}: time: invalid duration {:?}",
                        text.trim()
                    )
                })?;
                let whole = Duration::from_secs(duration.as_secs().max(1));
                Ok(Kind::Every(whole))
            }
            None => Err(format!("unrecognized descriptor: {spec}")),
        },
    }
}

/// A non-negative Go duration (`1h30m`, `90s`, `1.5h`).
fn go_duration(text: &str) -> Option<Duration> {
    konverge_apimachinery::duration::parse_duration(text).ok()
}

/// One comma-separated field.
fn field(text: &str, bounds: &Bounds) -> Result<u64, String> {
    text.split(',')
        .try_fold(0u64, |bits, part| Ok(bits | range(part, bounds)?))
}

fn number(text: &str, names: &[&str], offset: u32) -> Result<u32, String> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(i as u32 + offset);
    }
    match text.parse::<i64>() {
        Ok(n) if n < 0 => Err(format!("negative number ({n}) not allowed: {text}")),
        Ok(n) => u32::try_from(n).map_err(|_| format!("failed to parse int from {text}")),
        Err(_) => Err(format!(
            "failed to parse int from {text}: strconv.Atoi: parsing {text:?}: invalid syntax"
        )),
    }
}

/// One range of a field: `*`, `?`, `a`, `a-b`, each with an optional `/step`.
fn range(expr: &str, bounds: &Bounds) -> Result<u64, String> {
    let steps: Vec<&str> = expr.split('/').collect();
    let lows: Vec<&str> = steps[0].split('-').collect();
    let mut star = 0;
    let (start, mut end) = if lows[0] == "*" || lows[0] == "?" {
        star = STAR;
        (bounds.min, bounds.max)
    } else {
        let start = number(lows[0], bounds.names, bounds.min)?;
        match lows.len() {
            1 => (start, start),
            2 => (start, number(lows[1], bounds.names, bounds.min)?),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let step = match steps.len() {
        1 => 1,
        2 => {
            let step = number(steps[1], &[], 0)?;
            if lows.len() == 1 {
                end = bounds.max;
            }
            if step > 1 {
                star = 0;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    let bits = (start..=end)
        .step_by(step as usize)
        .fold(0u64, |b, v| b | (1 << v));
    Ok(bits | star)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn next(spec: &str, after: &str) -> Option<String> {
        Schedule::parse(spec, TimeZone::UTC)
            .expect("a schedule")
            .next(at(after))
            .map(|t| t.to_string())
    }

    #[test]
    fn fields_find_the_next_minute() {
        assert_eq!(
            next("*/5 * * * *", "2024-03-01T10:02:30Z").as_deref(),
            Some("2024-03-01T10:05:00Z")
        );
        assert_eq!(
            next("*/5 * * * *", "2024-03-01T10:05:00Z").as_deref(),
            Some("2024-03-01T10:10:00Z")
        );
        assert_eq!(
            next("0 0 1 jan *", "2024-03-01T10:02:30Z").as_deref(),
            Some("2025-01-01T00:00:00Z")
        );
        assert_eq!(
            next("@hourly", "2024-03-01T10:02:30Z").as_deref(),
            Some("2024-03-01T11:00:00Z")
        );
        // Both day fields restricted: either matches (Friday the 1st or the 15th).
        assert_eq!(
            next("0 12 15 * fri", "2024-03-02T00:00:00Z").as_deref(),
            Some("2024-03-08T12:00:00Z")
        );
        assert_eq!(next("0 0 31 2 *", "2024-03-02T00:00:00Z"), None);
        assert_eq!(
            next("@every 90s", "2024-03-02T00:00:00.5Z").as_deref(),
            Some("2024-03-02T00:01:30Z")
        );
    }

    #[test]
    fn time_zones_shift_the_schedule() {
        let paris = Schedule::parse("0 9 * * *", load_zone("Europe/Paris").expect("a zone"))
            .expect("a schedule");
        assert_eq!(
            paris
                .next(at("2024-01-10T00:00:00Z"))
                .map(|t| t.to_string())
                .as_deref(),
            Some("2024-01-10T08:00:00Z")
        );
        let prefixed =
            Schedule::parse("CRON_TZ=Asia/Tokyo 0 9 * * *", TimeZone::UTC).expect("a schedule");
        assert_eq!(
            prefixed
                .next(at("2024-01-10T00:00:00Z"))
                .map(|t| t.to_string())
                .as_deref(),
            Some("2024-01-11T00:00:00Z")
        );
    }

    #[test]
    fn errors_read_as_robfig_cron() {
        let err = |s| Schedule::parse(s, TimeZone::UTC).expect_err("invalid");
        assert_eq!(err("* * *"), "expected exactly 5 fields, found 3: [* * *]");
        assert_eq!(
            err("61 * * * *"),
            "end of range (61) above maximum (59): 61"
        );
        assert_eq!(err("@often"), "unrecognized descriptor: @often");
        assert_eq!(
            err("TZ=Nowhere/Else * * * * *"),
            "provided bad location Nowhere/Else: unknown time zone Nowhere/Else"
        );
    }
}
