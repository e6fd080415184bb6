//! Go's text forms of times, as `meta/v1` Time and MicroTime write them to JSON: RFC 3339 in
//! UTC (`2006-01-02T15:04:05Z`, `2006-01-02T15:04:05.000000Z`). Durations' text is
//! konverge-apimachinery's (`duration::format_nanos`, `duration::parse_nanos`).

/// A time as seconds since the Unix epoch plus nanoseconds (normalized: `0..1e9`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Instant {
    seconds: i64,
    nanos: u32,
}

/// Seconds from 0001-01-01T00:00:00Z (Go's zero time) to the Unix epoch, negated.
pub(crate) const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

impl Instant {
    /// `time.Unix(seconds, nanos)`: nanoseconds outside `0..1e9` carry into the seconds.
    /// `None` if the seconds overflow.
    pub(crate) fn from_unix(seconds: i64, nanos: i64) -> Option<Self> {
        let carry = nanos.div_euclid(1_000_000_000);
        let nanos = u32::try_from(nanos.rem_euclid(1_000_000_000)).ok()?;
        Some(Self {
            seconds: seconds.checked_add(carry)?,
            nanos,
        })
    }

    /// Whether this is Go's zero `time.Time` (which JSON writes as `null`).
    pub(crate) fn is_go_zero(self) -> bool {
        self.seconds == GO_ZERO_TIME_UNIX && self.nanos == 0
    }

    pub(crate) fn seconds(self) -> i64 {
        self.seconds
    }

    /// RFC 3339 in UTC, with seconds precision (`time.RFC3339`), or with exactly six
    /// fractional digits (`metav1.RFC3339Micro`). `None` outside the years 0000–9999.
    pub(crate) fn rfc3339(self, micros: bool) -> Option<String> {
        let days = self.seconds.div_euclid(86_400);
        let secs_of_day = self.seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        if !(0..=9999).contains(&year) {
            return None;
        }
        let (h, m, s) = (secs_of_day / 3600, secs_of_day / 60 % 60, secs_of_day % 60);
        Some(if micros {
            format!(
                "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{:06}Z",
                self.nanos / 1000
            )
        } else {
            format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
        })
    }
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);
    // month and day are small and positive by construction.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seconds: i64, nanos: i64, micros: bool) -> Option<String> {
        Instant::from_unix(seconds, nanos)?.rfc3339(micros)
    }

    #[test]
    fn rfc3339() {
        assert_eq!(t(0, 0, false).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            t(1_700_000_000, 0, false).as_deref(),
            Some("2023-11-14T22:13:20Z")
        );
        assert_eq!(
            t(951_782_400, 0, false).as_deref(),
            Some("2000-02-29T00:00:00Z")
        );
        assert_eq!(
            t(1_700_000_000, 123_456_789, true).as_deref(),
            Some("2023-11-14T22:13:20.123456Z")
        );
        assert_eq!(t(-1, 0, false).as_deref(), Some("1969-12-31T23:59:59Z"));
        assert_eq!(
            t(GO_ZERO_TIME_UNIX, 0, false).as_deref(),
            Some("0001-01-01T00:00:00Z")
        );
        assert_eq!(
            t(253_402_300_799, 0, false).as_deref(),
            Some("9999-12-31T23:59:59Z")
        );
        assert_eq!(t(253_402_300_800, 0, false), None);
        assert_eq!(t(i64::MIN, 0, false), None);
        assert_eq!(t(i64::MAX, 0, false), None);
        assert_eq!(Instant::from_unix(i64::MAX, 2_000_000_000), None);
        assert_eq!(
            t(10, -1_500_000_000, true).as_deref(),
            Some("1970-01-01T00:00:08.500000Z")
        );
        assert!(
            Instant::from_unix(GO_ZERO_TIME_UNIX, 0)
                .unwrap()
                .is_go_zero()
        );
    }
}
