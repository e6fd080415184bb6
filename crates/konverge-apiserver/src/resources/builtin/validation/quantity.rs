//! Resource quantities as `resource.Quantity` reads and prints them: their value (in
//! nano-units, rounded up as Go rounds) and their canonical form (`String()`), which
//! kube-apiserver's messages show (`1000m` prints `1`, `1024Mi` prints `1Gi`).

use serde_json::Value;

/// A parsed quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Quantity {
    /// The value in units of 10^-9.
    pub(super) nanos: i128,
    /// What `Quantity.String()` prints.
    pub(super) canonical: String,
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

const DECIMAL_SUFFIXES: &[(&str, i32)] = &[
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: &[&str] = &["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
const NANO: i128 = 1_000_000_000;

/// Parses a quantity (a string, or a JSON number); None when it is none, or too large to
/// hold here.
pub(super) fn parse(q: &Value) -> Option<Quantity> {
    let text = match q {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_string(),
        _ => return None,
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (negative, number) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits: i128 = format!("{whole}{fraction}").parse().ok()?;
    let places = i32::try_from(fraction.len()).ok()?;
    // value = digits * 10^(exp10 - places) * 1024^exp1024
    let (format, exp10, exp1024) =
        if let Some(k) = BINARY_SUFFIXES.iter().skip(1).position(|s| *s == suffix) {
            (Format::BinarySI, 0, k as u32 + 1)
        } else if let Some((_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            (Format::DecimalSI, *e, 0)
        } else {
            let e: i32 = suffix.strip_prefix(['e', 'E'])?.parse().ok()?;
            (Format::DecimalExponent, e, 0)
        };
    let scaled = digits.checked_mul(1024i128.checked_pow(exp1024)?)?;
    let shift = exp10 - places + 9;
    let magnitude = if shift >= 0 {
        scaled.checked_mul(10i128.checked_pow(shift.unsigned_abs())?)?
    } else {
        // Below a nano-unit Go rounds up.
        let divisor = 10i128.checked_pow(shift.unsigned_abs())?;
        (scaled + divisor - 1) / divisor
    };
    let nanos = if negative { -magnitude } else { magnitude };
    Some(Quantity {
        nanos,
        canonical: canonical(nanos, format),
    })
}

/// `Quantity.CanonicalizeBytes`.
fn canonical(nanos: i128, format: Format) -> String {
    if nanos == 0 {
        return "0".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.abs();
    // Binary quantities print in binary when whole and at least 1024.
    if format == Format::BinarySI && magnitude >= 1024 * NANO && magnitude % NANO == 0 {
        let (mut n, mut k) = (magnitude / NANO, 0);
        while n % 1024 == 0 && k + 1 < BINARY_SUFFIXES.len() {
            n /= 1024;
            k += 1;
        }
        return format!("{sign}{n}{}", BINARY_SUFFIXES[k]);
    }
    let (mut mantissa, mut exponent) = (magnitude, -9i32);
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    let down = exponent.rem_euclid(3);
    mantissa *= 10i128.pow(down.unsigned_abs());
    exponent -= down;
    let suffix = match format {
        Format::DecimalExponent if exponent == 0 => String::new(),
        Format::DecimalExponent => format!("e{exponent}"),
        _ => DECIMAL_SUFFIXES
            .iter()
            .find(|(_, e)| *e == exponent)
            .map_or_else(|| format!("e{exponent}"), |(s, _)| s.to_string()),
    };
    format!("{sign}{mantissa}{suffix}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn quantities_print_as_go_prints_them() {
        for (given, printed) in [
            (json!("1"), "1"),
            (json!("1000m"), "1"),
            (json!("0.5"), "500m"),
            (json!(0.5), "500m"),
            (json!("1500m"), "1500m"),
            (json!("1024Mi"), "1Gi"),
            (json!("1536Mi"), "1536Mi"),
            (json!("512Ki"), "512Ki"),
            (json!("0.5Gi"), "512Mi"),
            (json!("100Ki"), "100Ki"),
            (json!("1e3"), "1e3"),
            (json!("1E6"), "1e6"),
            (json!("10k"), "10k"),
            (json!("12345"), "12345"),
            (json!("-1"), "-1"),
            (json!("0"), "0"),
            (json!("1n"), "1n"),
            (json!("0.1n"), "1n"),
            (json!("1.5Ki"), "1536"),
            (json!("2000"), "2k"),
        ] {
            assert_eq!(
                super::parse(&given).map(|q| q.canonical),
                Some(printed.to_string()),
                "{given}"
            );
        }
        assert!(
            super::parse(&json!("1Gi")).unwrap().nanos > super::parse(&json!("1G")).unwrap().nanos
        );
    }
}
