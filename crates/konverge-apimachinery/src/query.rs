//! Query parameters as kube-apiserver's parameter codec reads them.
//!
//! A boolean parameter (`watch`, `allowWatchBookmarks`, `sendInitialEvents`, `force`, ...) is
//! false only when its first value is `0` or `false` in any case; any other value, an empty
//! one included, is true (apimachinery's `Convert_Slice_string_To_bool`). So `watch=True`,
//! what the Python client sends, watches, and so do `watch=1`, `watch=yes` and `watch=`.
//! Flags and `?pretty` are read with Go's stricter `strconv.ParseBool`
//! ([`strconv_parse_bool`]).

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

#[cfg(test)]
mod tests {
    use super::*;

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
