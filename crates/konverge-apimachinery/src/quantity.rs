//! Resource quantities (`500m`, `1.5Gi`, `1e3`): which texts are quantities, with the errors
//! `resource.ParseQuantity` gives for the others (kube-apiserver refuses a body holding a
//! bad quantity while decoding it, with these words), and their values and canonical forms
//! as `resource.Quantity` computes and prints them (`1000m` prints `1`, `1024Mi` prints
//! `1Gi`), which validation messages show.

/// Why a text is not a quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// `ErrFormatWrong`.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// `ErrSuffix`.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// Checks `text` as `resource.ParseQuantity` does.
pub fn parse(text: &str) -> Result<(), QuantityError> {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return Err(QuantityError::Format);
    }
    if text == "0" {
        return Ok(());
    }
    let mut pos = 0;
    if matches!(bytes[0], b'+' | b'-') {
        pos += 1;
    }
    let digits = |from: usize| {
        bytes[from..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(bytes.len(), |i| from + i)
    };
    pos = digits(pos);
    if pos < bytes.len() && bytes[pos] == b'.' {
        pos = digits(pos + 1);
    }
    // The suffix: letters of the suffix alphabet, then an optional signed exponent.
    let suffix_start = pos;
    pos = bytes[pos..]
        .iter()
        .position(|b| !b"eEinumkKMGTP".contains(b))
        .map_or(bytes.len(), |i| pos + i);
    if pos < bytes.len() && matches!(bytes[pos], b'+' | b'-') {
        pos += 1;
    }
    if digits(pos) != bytes.len() {
        return Err(QuantityError::Format);
    }
    if suffix_known(&text[suffix_start..]) {
        Ok(())
    } else {
        Err(QuantityError::Suffix)
    }
}

/// The binary (`Ki`…`Ei`) and decimal (`n`…`E`) suffixes, and decimal exponents (`e3`, `E-2`).
fn suffix_known(text: &str) -> bool {
    suffix(text).is_some()
}

/// What a quantity's suffix means, as `resource.ParseQuantity`'s suffixer reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suffix {
    /// 10 for decimal suffixes and exponents, 2 for binary suffixes.
    pub base: u32,
    /// The power of the base (`Ki` is 2^10, `m` is 10^-3, `e6` is 10^6).
    pub exponent: i64,
    /// The format a quantity with this suffix is printed in.
    pub format: Format,
}

/// The suffix `text` (what follows a quantity's number), if `ParseQuantity` knows it.
pub fn suffix(text: &str) -> Option<Suffix> {
    if let Some((_, exponent)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == text) {
        return Some(Suffix {
            base: 10,
            exponent: i64::from(*exponent),
            format: Format::DecimalSI,
        });
    }
    if let Some(k) = BINARY_SUFFIXES.iter().skip(1).position(|s| *s == text) {
        return Some(Suffix {
            base: 2,
            exponent: 10 * (k as i64 + 1),
            format: Format::BinarySI,
        });
    }
    let exponent = text.strip_prefix(['e', 'E'])?.parse().ok()?;
    Some(Suffix {
        base: 10,
        exponent,
        format: Format::DecimalExponent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_read_as_parse_quantity_reads_them() {
        for good in [
            "0", "1", "500m", "1.5Gi", "1e3", "1E", "2Ki", ".5", "1.", "-1", "+3k", "0.1", "1e-3",
            "100M",
        ] {
            assert_eq!(parse(good), Ok(()), "{good}");
        }
        for (bad, error) in [
            ("", QuantityError::Format),
            ("abc", QuantityError::Format),
            ("1Gb", QuantityError::Format),
            ("1 Gi", QuantityError::Format),
            ("1X", QuantityError::Format),
            ("1K", QuantityError::Suffix),
            ("1ee", QuantityError::Suffix),
            ("1mi", QuantityError::Suffix),
        ] {
            assert_eq!(parse(bad), Err(error), "{bad}");
        }
    }
}

/// A quantity's value and canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    /// The value in units of 10^-9, rounded up below that as Go rounds.
    pub nanos: i128,
    /// What `Quantity.String()` prints.
    pub canonical: String,
}

/// How a quantity is printed (`resource.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Decimal suffixes (`500m`, `1k`).
    DecimalSI,
    /// Binary suffixes (`1Gi`).
    BinarySI,
    /// Decimal exponents (`1e3`).
    DecimalExponent,
}

impl Format {
    /// Its name in Go (`DecimalSI`, `BinarySI`, `DecimalExponent`).
    pub fn name(self) -> &'static str {
        match self {
            Format::DecimalSI => "DecimalSI",
            Format::BinarySI => "BinarySI",
            Format::DecimalExponent => "DecimalExponent",
        }
    }
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

/// The value and canonical form of a quantity (`1.5Gi`); `None` when `text` is not one, or
/// is too large to hold here.
pub fn value(text: &str) -> Option<Quantity> {
    let text = text.trim();
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
    let meaning = self::suffix(suffix)?;
    let exponent = i32::try_from(meaning.exponent).ok()?;
    let (exp10, exp1024) = if meaning.base == 2 {
        (0, exponent.unsigned_abs() / 10)
    } else {
        (exponent, 0)
    };
    let format = meaning.format;
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
mod value_tests {

    #[test]
    fn quantities_print_as_go_prints_them() {
        for (given, printed) in [
            ("1", "1"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("1500m", "1500m"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("512Ki", "512Ki"),
            ("0.5Gi", "512Mi"),
            ("100Ki", "100Ki"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("10k", "10k"),
            ("12345", "12345"),
            ("-1", "-1"),
            ("0", "0"),
            ("1n", "1n"),
            ("0.1n", "1n"),
            ("1.5Ki", "1536"),
            ("2000", "2k"),
        ] {
            assert_eq!(
                super::value(given).map(|q| q.canonical),
                Some(printed.to_string()),
                "{given}"
            );
        }
        assert!(super::value("1Gi").unwrap().nanos > super::value("1G").unwrap().nanos);
    }
}
