//! Go's durations: the syntax `time.ParseDuration` reads (what Kubernetes accepts wherever a
//! request, a CEL expression, a protobuf `Duration` or a flag carries one: `?timeout=30s`,
//! `1h30m`, `-1.5s`), with Go's error messages, and the text `time.Duration.String()` writes
//! (`1m20s`, `1.5ms`). The one copy of each in konverge.

use std::time::Duration;

/// Why a duration does not parse, worded as Go's `time.ParseDuration` words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// Not a duration at all: `time: invalid duration "abc"`.
    #[error("time: invalid duration {0:?}")]
    Invalid(String),
    /// A number without a unit: `time: missing unit in duration "5"`.
    #[error("time: missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A unit Go does not know: `time: unknown unit "x" in duration "5x"`.
    #[error("time: unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit {
        /// The unit.
        unit: String,
        /// The whole text.
        text: String,
    },
}

/// Nanoseconds per unit.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration (`300ms`, `1.5h`, `2h45m`). Negative durations are refused as
/// invalid, since nothing in the API takes one.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.starts_with('-') {
        return Err(DurationError::Invalid(text.to_string()));
    }
    let nanos = parse_nanos(text)?;
    Ok(Duration::from_nanos(nanos.unsigned_abs()))
}

/// Parses a Go duration, negative ones included, to nanoseconds (`-1.5s` is
/// -1,500,000,000), exactly (no floating point) and within Go's range (about ±292 years).
pub fn parse_nanos(text: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid(text.to_string());
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number = &rest[..digits];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid());
        }
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(text.to_string()));
        }
        let per = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit.to_string(),
            text: text.to_string(),
        })?;
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let mut nanos = whole.checked_mul(per).ok_or_else(invalid)?;
        let mut scale = per;
        for digit in fraction.chars() {
            scale /= 10;
            nanos += u128::from(digit.to_digit(10).unwrap_or(0)) * scale;
        }
        total = total.checked_add(nanos).ok_or_else(invalid)?;
    }
    let limit = if negative {
        i64::MAX as u128 + 1
    } else {
        i64::MAX as u128
    };
    if total > limit {
        return Err(invalid());
    }
    // In range: `total` is at most 2^63, whose negation is i64::MIN.
    let magnitude = total as i128;
    Ok((if negative { -magnitude } else { magnitude }) as i64)
}

/// Go's `time.Duration(nanos).String()`: `0s`, `1.5µs`, `300ms`, `1m20s`, `-2h0m0s`.
pub fn format_nanos(nanos: i64) -> String {
    let mut u = nanos.unsigned_abs();
    if u == 0 {
        return "0s".to_string();
    }
    // Built back to front, as Go builds it.
    let mut out: Vec<char> = Vec::with_capacity(32);
    out.push('s');
    if u < 1_000_000_000 {
        let precision = if u < 1_000 {
            out.push('n');
            0
        } else if u < 1_000_000 {
            out.push('\u{b5}');
            3
        } else {
            out.push('m');
            6
        };
        u = push_fraction(&mut out, u, precision);
        push_integer(&mut out, u);
    } else {
        u = push_fraction(&mut out, u, 9);
        push_integer(&mut out, u % 60);
        u /= 60;
        if u > 0 {
            out.push('m');
            push_integer(&mut out, u % 60);
            u /= 60;
            if u > 0 {
                out.push('h');
                push_integer(&mut out, u);
            }
        }
    }
    if nanos < 0 {
        out.push('-');
    }
    out.iter().rev().collect()
}

/// The fraction `v / 10^precision` without trailing zeros (nor the point, when it is zero),
/// pushed back to front; returns the integer part.
fn push_fraction(out: &mut Vec<char>, mut v: u64, precision: u32) -> u64 {
    let mut print = false;
    for _ in 0..precision {
        let digit = (v % 10) as u8;
        print = print || digit != 0;
        if print {
            out.push(char::from(b'0' + digit));
        }
        v /= 10;
    }
    if print {
        out.push('.');
    }
    v
}

/// `v` in decimal, pushed back to front.
fn push_integer(out: &mut Vec<char>, mut v: u64) {
    if v == 0 {
        out.push('0');
        return;
    }
    while v > 0 {
        out.push(char::from(b'0' + (v % 10) as u8));
        v /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_go_parses_them() {
        for (text, nanos) in [
            ("0", 0u64),
            ("30s", 30_000_000_000),
            ("1.5h", 5_400_000_000_000),
            ("2h45m", 9_900_000_000_000),
            ("300ms", 300_000_000),
            ("1us", 1_000),
            ("+5m", 300_000_000_000),
            (".5s", 500_000_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_nanos(nanos)),
                "{text}"
            );
        }
        assert_eq!(
            parse_duration("abc").unwrap_err().to_string(),
            r#"time: invalid duration "abc""#
        );
        assert_eq!(
            parse_duration("5").unwrap_err().to_string(),
            r#"time: missing unit in duration "5""#
        );
        assert_eq!(
            parse_duration("5x").unwrap_err().to_string(),
            r#"time: unknown unit "x" in duration "5x""#
        );
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn signed_durations_parse_to_nanoseconds() {
        assert_eq!(parse_nanos("-1.5s"), Ok(-1_500_000_000));
        assert_eq!(parse_nanos("1h2m3.5s"), Ok(3_723_500_000_000));
        assert_eq!(parse_nanos("-0"), Ok(0));
        assert_eq!(parse_nanos("9223372036854775807ns"), Ok(i64::MAX));
        assert_eq!(parse_nanos("-9223372036854775808ns"), Ok(i64::MIN));
        assert!(parse_nanos("9223372036854775808ns").is_err());
        assert_eq!(
            parse_nanos("1x").unwrap_err().to_string(),
            "time: unknown unit \"x\" in duration \"1x\""
        );
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn durations_print_as_go_prints_them() {
        for (nanos, text) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5\u{b5}s"),
            (300_000_000, "300ms"),
            (10_000_000_000, "10s"),
            (80_000_000_000, "1m20s"),
            (300_000_000_000, "5m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (-7_200_000_000_000, "-2h0m0s"),
            (2_200_000, "2.2ms"),
            (5_025_000_000_000, "1h23m45s"),
            (-1_500_000_000, "-1.5s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (i64::MAX, "2562047h47m16.854775807s"),
        ] {
            assert_eq!(format_nanos(nanos), text, "{nanos}");
        }
    }
}
