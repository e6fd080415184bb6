//! Go's duration syntax (`time.ParseDuration`): what Kubernetes accepts wherever a request
//! carries a duration (`?timeout=30s`), with Go's error messages.

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
    let invalid = || DurationError::Invalid(text.to_string());
    let mut rest = text;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if rest.starts_with('-') {
        return Err(invalid());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
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
    if total > i64::MAX as u128 {
        return Err(invalid());
    }
    Ok(Duration::from_nanos(total as u64))
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
}
