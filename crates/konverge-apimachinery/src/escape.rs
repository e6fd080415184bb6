//! Percent-decoding of URL path segments (`%2F` is `/`), as Go's `url.PathUnescape` decodes
//! them: the one copy the API server's routing, its authorizer and the testkit's request log
//! share.

/// Why a segment does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EscapeError {
    /// A `%` not followed by two hex digits.
    #[error("invalid escape in path segment {0:?}")]
    InvalidEscape(String),
    /// The decoded bytes are not UTF-8.
    #[error("path segment {0:?} is not UTF-8 once decoded")]
    NotUtf8(String),
}

/// Decodes the `%XX` escapes of `segment`.
pub fn percent_decode(segment: &str) -> Result<String, EscapeError> {
    if !segment.contains('%') {
        return Ok(segment.to_string());
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = segment
                .get(i + 1..i + 3)
                .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| EscapeError::InvalidEscape(segment.to_string()))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| EscapeError::NotUtf8(segment.to_string()))
}

/// [`percent_decode`], or the segment as it was when it does not decode (for readers that
/// describe a request the router will refuse anyway).
pub fn percent_decode_or_keep(segment: &str) -> String {
    percent_decode(segment).unwrap_or_else(|_| segment.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_decode_as_go_decodes_them() {
        assert_eq!(percent_decode("plain"), Ok("plain".to_string()));
        assert_eq!(percent_decode("a%2Fb%20c"), Ok("a/b c".to_string()));
        assert_eq!(percent_decode("caf%C3%A9"), Ok("café".to_string()));
        assert_eq!(
            percent_decode("100%"),
            Err(EscapeError::InvalidEscape("100%".to_string()))
        );
        assert_eq!(
            percent_decode("%+1"),
            Err(EscapeError::InvalidEscape("%+1".to_string()))
        );
        assert_eq!(
            percent_decode("%FF"),
            Err(EscapeError::NotUtf8("%FF".to_string()))
        );
        assert_eq!(percent_decode_or_keep("100%"), "100%");
    }
}
