//! Query parameters as kube-apiserver's parameter codec reads them.
//!
//! A boolean parameter (`watch`, `allowWatchBookmarks`, `sendInitialEvents`, `force`, ...) is
//! false only when its first value is `0` or `false` in any case; any other value, an empty
//! one included, is true (apimachinery's `Convert_Slice_string_To_bool`). So `watch=True`,
//! what the Python client sends, watches, and so do `watch=1`, `watch=yes` and `watch=`.
//! Flags and `?pretty` are read with Go's stricter `strconv.ParseBool`
//! ([`strconv_parse_bool`]). Integer parameters (`limit`, `timeoutSeconds`,
//! `gracePeriodSeconds`, `tailLines`, ...) are read with `strconv.ParseInt`
//! ([`strconv_parse_int`]): an empty value is an error, not absent.

/// The value of a boolean query parameter given as `value`.
pub fn parse_bool(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

/// Go's `strconv.ParseBool`, with its error words: what flags (`--feature-gates`,
/// `--runtime-config`) and `?pretty` are read with.
pub fn strconv_parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing {text:?}: invalid syntax"
        )),
    }
}

/// Go's `strconv.ParseInt(text, 10, 64)`, with its error words: what integer query
/// parameters are read with.
pub fn strconv_parse_int(text: &str) -> Result<i64, String> {
    text.parse::<i64>().map_err(|e| {
        let reason = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("strconv.ParseInt: parsing {text:?}: {reason}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_as_go_parses_them() {
        assert_eq!(strconv_parse_int("-5"), Ok(-5));
        assert_eq!(strconv_parse_int("+5"), Ok(5));
        assert_eq!(
            strconv_parse_int(""),
            Err(r#"strconv.ParseInt: parsing "": invalid syntax"#.into())
        );
        assert_eq!(
            strconv_parse_int("1_000"),
            Err(r#"strconv.ParseInt: parsing "1_000": invalid syntax"#.into())
        );
        assert_eq!(
            strconv_parse_int("99999999999999999999"),
            Err(r#"strconv.ParseInt: parsing "99999999999999999999": value out of range"#.into())
        );
    }

    #[test]
    fn only_zero_and_false_are_false() {
        for value in ["false", "False", "FALSE", "fAlSe", "0"] {
            assert!(!parse_bool(value), "{value}");
        }
        for value in [
            "true", "True", "TRUE", "1", "t", "T", "yes", "", "F", "f", "00", " false",
        ] {
            assert!(parse_bool(value), "{value:?}");
        }
    }
}
