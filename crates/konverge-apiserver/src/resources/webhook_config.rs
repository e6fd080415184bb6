//! Where a webhook is (`clientConfig` of admission webhooks and of CRD conversion webhooks),
//! validated as kube-apiserver's `ValidateWebhookURL` and `ValidateWebhookService` validate
//! it, with a URL split as Go's `net/url.Parse` splits it (its errors are part of the
//! messages).

use crate::resources::meta::NameRule;
use konverge_apimachinery::field::FieldError;
use serde_json::{Value, json};

/// A webhook `url`, as kube-apiserver's `ValidateWebhookURL` checks it (HTTPS only).
pub(crate) fn validate_url(path: &str, url: &str) -> Vec<FieldError> {
    const FORM: &str = "; desired format: https://host[/path]";
    let parsed = match GoUrl::parse(url) {
        Ok(parsed) => parsed,
        Err(problem) => {
            return vec![FieldError::required(
                path,
                format!("url must be a valid URL: {problem}{FORM}"),
            )];
        }
    };
    let mut errors = Vec::new();
    if parsed.scheme != "https" {
        errors.push(FieldError::invalid(
            path,
            json!(parsed.scheme),
            format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    if parsed.host.is_empty() {
        errors.push(FieldError::invalid(
            path,
            json!(parsed.host),
            format!("host must be specified{FORM}"),
        ));
    }
    if let Some(user) = &parsed.user {
        errors.push(FieldError::invalid(
            path,
            json!(user),
            "user information is not permitted in the URL",
        ));
    }
    if !parsed.fragment.is_empty() {
        errors.push(FieldError::invalid(
            path,
            json!(parsed.fragment),
            "fragments are not permitted in the URL",
        ));
    }
    if !parsed.query.is_empty() {
        errors.push(FieldError::invalid(
            path,
            json!(parsed.query),
            "query parameters are not permitted in the URL",
        ));
    }
    errors
}

/// A webhook `service`, as kube-apiserver's `ValidateWebhookService` checks it. For a CRD's
/// conversion webhook kube-apiserver passes the service name where the function expects the
/// namespace and the other way round (`names_swapped`), so a missing namespace is reported
/// at `service.name` (and a missing name at `service.namespace`); that is reproduced.
pub(crate) fn validate_service(
    path: &str,
    service: &Value,
    names_swapped: bool,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = service.get("name").and_then(Value::as_str).unwrap_or("");
    let namespace = service
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (name, namespace) = if names_swapped {
        (namespace, name)
    } else {
        (name, namespace)
    };
    if name.is_empty() {
        errors.push(FieldError::required(
            format!("{path}.name"),
            "service name is required",
        ));
    }
    if namespace.is_empty() {
        errors.push(FieldError::required(
            format!("{path}.namespace"),
            "service namespace is required",
        ));
    }
    let port = service.get("port").and_then(Value::as_i64).unwrap_or(443);
    if !(1..=65535).contains(&port) {
        errors.push(FieldError::invalid(
            format!("{path}.port"),
            json!(port),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(url_path) = service.get("path").and_then(Value::as_str) else {
        return errors;
    };
    if url_path.is_empty() || url_path == "/" {
        return errors;
    }
    let at = format!("{path}.path");
    if url_path == "//" {
        errors.push(FieldError::invalid(
            at,
            json!(url_path),
            "segment[0] may not be empty",
        ));
        return errors;
    }
    if !url_path.starts_with('/') {
        errors.push(FieldError::invalid(
            at.clone(),
            json!(url_path),
            "must start with a '/'",
        ));
    }
    let mut steps = url_path.get(1..).unwrap_or("");
    steps = steps.strip_suffix('/').unwrap_or(steps);
    for (i, step) in steps.split('/').enumerate() {
        if step.is_empty() {
            errors.push(FieldError::invalid(
                at.clone(),
                json!(url_path),
                format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for problem in crate::resources::meta::name_problems(NameRule::Subdomain, step) {
            errors.push(FieldError::invalid(
                at.clone(),
                json!(url_path),
                format!("segment[{i}]: {problem}"),
            ));
        }
    }
    errors
}

/// What Go's `url.Parse` makes of a URL: the parts webhook validation looks at.
#[derive(Debug, Default, PartialEq, Eq)]
struct GoUrl {
    scheme: String,
    user: Option<String>,
    host: String,
    query: String,
    fragment: String,
}

impl GoUrl {
    /// Parses `raw` as Go's `net/url` does; the error is worded as Go's
    /// (`parse "::x": missing protocol scheme`).
    fn parse(raw: &str) -> Result<GoUrl, String> {
        let (rest, fragment) = match raw.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (raw, None),
        };
        let fail = |url: &str, why: &str| {
            format!("parse {}: {why}", konverge_apimachinery::gofmt::quote(url))
        };
        let mut url = GoUrl::parse_without_fragment(rest).map_err(|e| fail(rest, &e))?;
        if let Some(fragment) = fragment {
            url.fragment = unescape(fragment, false).map_err(|e| fail(raw, &e))?;
        }
        Ok(url)
    }

    fn parse_without_fragment(raw: &str) -> Result<GoUrl, String> {
        if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err("net/url: invalid control character in URL".into());
        }
        let mut url = GoUrl::default();
        let mut rest = raw;
        // The scheme: letters first, then letters, digits, `+`, `-`, `.`, up to a colon.
        for (i, c) in raw.char_indices() {
            match c {
                'a'..='z' | 'A'..='Z' => {}
                '0'..='9' | '+' | '-' | '.' if i > 0 => {}
                ':' if i == 0 => return Err("missing protocol scheme".into()),
                ':' => {
                    url.scheme = raw[..i].to_ascii_lowercase();
                    rest = &raw[i + 1..];
                    break;
                }
                _ => break,
            }
        }
        if rest.ends_with('?') && rest.matches('?').count() == 1 {
            rest = &rest[..rest.len() - 1];
        } else if let Some((before, query)) = rest.split_once('?') {
            url.query = query.to_string();
            rest = before;
        }
        if !rest.starts_with('/') {
            if !url.scheme.is_empty() {
                // An opaque URL (`https:host`): no host.
                return Ok(url);
            }
            let first_segment = rest.split('/').next().unwrap_or("");
            if first_segment.contains(':') {
                return Err("first path segment in URL cannot contain colon".into());
            }
        }
        if (!url.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
            let authority = &rest[2..];
            let authority = authority.split('/').next().unwrap_or(authority);
            let host = match authority.rfind('@') {
                Some(at) => {
                    url.user = Some(authority[..at].to_string());
                    &authority[at + 1..]
                }
                None => authority,
            };
            url.host = parse_host(host)?;
        }
        Ok(url)
    }
}

/// Go's `parseHost`: a port, when there is one, must be digits; `[` opens an IPv6 literal.
fn parse_host(host: &str) -> Result<String, String> {
    let invalid_port = |port: &str| {
        format!(
            "invalid port {} after host",
            konverge_apimachinery::gofmt::quote(port)
        )
    };
    let port_ok = |port: &str| port.is_empty() || port[1..].bytes().all(|b| b.is_ascii_digit());
    if host.starts_with('[') {
        let Some(close) = host.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        let port = &host[close + 1..];
        if !port.is_empty() && (!port.starts_with(':') || !port_ok(port)) {
            return Err(invalid_port(port));
        }
    } else if let Some(colon) = host.rfind(':') {
        let port = &host[colon..];
        if !port_ok(port) {
            return Err(invalid_port(port));
        }
    }
    unescape(host, true)
}

/// Go's `unescape` of a host (`in_host`) or fragment: `%XX` escapes, and in a host only
/// the characters a host may hold.
fn unescape(text: &str, in_host: bool) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let escape = text.get(i..(i + 3).min(text.len())).unwrap_or(&text[i..]);
                let valid = escape.len() == 3 && escape[1..].bytes().all(|b| b.is_ascii_hexdigit());
                if !valid {
                    return Err(format!(
                        "invalid URL escape {}",
                        konverge_apimachinery::gofmt::quote(escape)
                    ));
                }
                i += 3;
            }
            c if in_host
                && c < 0x80
                && !c.is_ascii_alphanumeric()
                && !b"-_.~!$&'()*+,;=:[]<>\"".contains(&c) =>
            {
                return Err(format!(
                    "invalid character {} in host name",
                    konverge_apimachinery::gofmt::quote(&char::from(c).to_string())
                ));
            }
            _ => i += 1,
        }
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_as_go_parses_them() {
        let parse = GoUrl::parse;
        assert_eq!(
            parse("https://127.0.0.1:9443/x"),
            Ok(GoUrl {
                scheme: "https".into(),
                host: "127.0.0.1:9443".into(),
                ..GoUrl::default()
            })
        );
        assert_eq!(
            parse("://x").map(|_| ()),
            Err(r#"parse "://x": missing protocol scheme"#.into())
        );
        assert_eq!(
            parse("https://host:port/").map(|_| ()),
            Err(r#"parse "https://host:port/": invalid port ":port" after host"#.into())
        );
        assert_eq!(
            parse("https://ho st/").map(|_| ()),
            Err(r#"parse "https://ho st/": invalid character " " in host name"#.into())
        );
        assert_eq!(parse("example.com/x").map(|u| u.host), Ok(String::new()));
    }
    #[test]
    fn urls_split_as_go_splits_them() {
        let url = GoUrl::parse("https://u:p@example.com:8443/x?a=b#frag").expect("parses");
        assert_eq!(
            url,
            GoUrl {
                scheme: "https".into(),
                user: Some("u:p".into()),
                host: "example.com:8443".into(),
                query: "a=b".into(),
                fragment: "frag".into(),
            }
        );
        // An opaque URL has no host.
        assert_eq!(GoUrl::parse("https:example.com").expect("parses").host, "");
        assert_eq!(GoUrl::parse("example.com/x").expect("parses").scheme, "");
        assert_eq!(
            GoUrl::parse("://x").unwrap_err(),
            r#"parse "://x": missing protocol scheme"#
        );
        assert_eq!(
            GoUrl::parse("https://example.com:port/").unwrap_err(),
            r#"parse "https://example.com:port/": invalid port ":port" after host"#
        );
        assert_eq!(GoUrl::parse("x:y/z:w").expect("a scheme").scheme, "x");
        assert_eq!(GoUrl::parse("a/b:c").expect("a path").host, "");
        assert_eq!(GoUrl::parse("ab:c").expect("a scheme").scheme, "ab");
        assert_eq!(GoUrl::parse("/a:b").expect("a path").scheme, "");
        assert_eq!(
            GoUrl::parse("1a:b").unwrap_err(),
            r#"parse "1a:b": first path segment in URL cannot contain colon"#
        );
        assert_eq!(
            GoUrl::parse("https://example.com/#%zz").unwrap_err(),
            r#"parse "https://example.com/#%zz": invalid URL escape "%zz""#
        );
    }
}
