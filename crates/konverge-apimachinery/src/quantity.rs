//! Resource quantities (`500m`, `1.5Gi`, `1e3`): which texts are quantities, with the errors
//! `resource.ParseQuantity` gives for the others. kube-apiserver refuses a body holding a
//! bad quantity while decoding it, with these words.

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
fn suffix_known(suffix: &str) -> bool {
    const KNOWN: &[&str] = &[
        "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    if KNOWN.contains(&suffix) {
        return true;
    }
    match suffix.strip_prefix(['e', 'E']) {
        Some(exponent) => exponent.parse::<i64>().is_ok(),
        None => false,
    }
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
