//! The string formats kube-apiserver checks in custom resources: kube-openapi's `strfmt`
//! default registry, restricted to the formats CRD schemas support (others are ignored, as
//! `StripUnsupportedFormatsPostProcessor` drops them).

use super::regex::Regex;

/// The formats validated for CRDs, by normalized name (`date-time` is `datetime`).
const SUPPORTED: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// The normalized name of a format CRD validation checks, or `None` when it is ignored.
pub(crate) fn supported(format: &str) -> Option<String> {
    let normalized = format.replace('-', "");
    SUPPORTED
        .contains(&normalized.as_str())
        .then_some(normalized)
}

fn re(pattern: &str, s: &str) -> bool {
    Regex::new(pattern).map(|r| r.is_match(s)).unwrap_or(false)
}

/// Whether `s` is valid for the (normalized, supported) format.
pub(crate) fn validates(format: &str, s: &str) -> bool {
    match format {
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => is_request_uri(s),
        "email" => is_email(s),
        "hostname" => is_hostname(s),
        "ipv4" => parse_ip(s).is_some() && s.contains('.'),
        "ipv6" => parse_ip(s).is_some() && s.contains(':'),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "uuid" => re(
            "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid3" => re(
            "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid4" => re(
            "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid5" => re(
            "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            s,
        ),
        "isbn" => is_isbn10(s) || is_isbn13(s),
        "isbn10" => is_isbn10(s),
        "isbn13" => is_isbn13(s),
        "creditcard" => is_credit_card(s),
        "ssn" => s.len() == 11 && re(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$", s),
        "hexcolor" => re("^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", s),
        "rgbcolor" => re(
            r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$",
            s,
        ),
        "byte" => re(
            r"^(?:[A-Za-z0-9+\/]{4})*(?:[A-Za-z0-9+\/]{2}==|[A-Za-z0-9+\/]{3}=|[A-Za-z0-9+\/]{4})$",
            s,
        ),
        "password" => true,
        "date" => is_date(s),
        "duration" => is_duration(s),
        "datetime" => is_date_time(s),
        _ => true,
    }
}

/// Go's `url.ParseRequestURI` acceptance: an absolute URI or an absolute path, no control
/// characters, valid percent-escapes.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.chars().any(|c| (c as u32) < 0x20 || c == '\u{7f}') {
        return false;
    }
    let bytes = s.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return false;
        }
    }
    if s.starts_with('/') {
        return true;
    }
    let Some(colon) = s.find(':') else {
        return false;
    };
    let scheme = &s[..colon];
    let mut chars = scheme.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return false;
    }
    let rest = &s[colon + 1..];
    if let Some(authority) = rest.strip_prefix("//") {
        let host = authority.split(['/', '?']).next().unwrap_or("");
        let host = host.rsplit('@').next().unwrap_or("");
        if host.contains(' ') {
            return false;
        }
        if let Some(v6) = host.strip_prefix('[') {
            let Some(end) = v6.find(']') else {
                return false;
            };
            let port = &v6[end + 1..];
            return port.is_empty()
                || port
                    .strip_prefix(':')
                    .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
        }
        if let Some((_, port)) = host.rsplit_once(':')
            && !port.bytes().all(|b| b.is_ascii_digit())
        {
            return false;
        }
    }
    true
}

/// An approximation of Go's `net/mail.ParseAddress`: `local@domain`, optionally as
/// `Display Name <local@domain>`.
fn is_email(s: &str) -> bool {
    let s = s.trim();
    let addr = match (s.rfind('<'), s.ends_with('>')) {
        (Some(open), true) => &s[open + 1..s.len() - 1],
        (None, false) => s,
        _ => return false,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    let atext = |c: char| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    let dot_atom =
        |p: &str| !p.is_empty() && p.split('.').all(|a| !a.is_empty() && a.chars().all(atext));
    let local_ok = if local.len() >= 2 && local.starts_with('"') && local.ends_with('"') {
        true
    } else {
        dot_atom(local)
    };
    let domain_ok = if domain.starts_with('[') && domain.ends_with(']') {
        true
    } else {
        dot_atom(domain)
    };
    local_ok && domain_ok
}

fn is_hostname(s: &str) -> bool {
    const PATTERN: &str = r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$";
    re(PATTERN, s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
}

/// Go's `net.ParseIP` (sloppy: IPv4 parts may have leading zeros, as `netutils.ParseIPSloppy`).
fn parse_ip(s: &str) -> Option<()> {
    if s.contains(':') {
        parse_ipv6(s)
    } else {
        parse_ipv4(s)
    }
}

fn parse_ipv4(s: &str) -> Option<()> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    for p in parts {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if p.parse::<u16>().ok()? > 255 {
            return None;
        }
    }
    Some(())
}

fn parse_ipv6(s: &str) -> Option<()> {
    let (head, tail, compressed) = match s.split_once("::") {
        Some((h, t)) => (h, t, true),
        None => (s, "", false),
    };
    if tail.contains("::") {
        return None;
    }
    let mut groups = 0usize;
    let mut count = |part: &str, last: bool| -> Option<()> {
        if part.is_empty() {
            return Some(());
        }
        let pieces: Vec<&str> = part.split(':').collect();
        let n = pieces.len();
        for (i, p) in pieces.into_iter().enumerate() {
            if last && i == n - 1 && p.contains('.') {
                parse_ipv4(p)?;
                groups += 2;
            } else {
                if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                groups += 1;
            }
        }
        Some(())
    };
    count(head, !compressed)?;
    if compressed {
        count(tail, true)?;
    }
    if compressed {
        (groups < 8).then_some(())
    } else {
        (groups == 8).then_some(())
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else {
        return false;
    };
    let bits = if ip.contains(':') { 128 } else { 32 };
    parse_ip(ip).is_some()
        && !prefix.is_empty()
        && prefix.len() <= 3
        && prefix.bytes().all(|b| b.is_ascii_digit())
        && prefix.parse::<u32>().is_ok_and(|p| p <= bits)
}

fn is_mac(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    if s.len() >= 14 && s.as_bytes().get(4) == Some(&b'.') {
        let parts: Vec<&str> = s.split('.').collect();
        return matches!(parts.len(), 3 | 4 | 10) && parts.iter().all(|p| hex(p, 4));
    }
    for sep in [':', '-'] {
        if s.as_bytes().get(2) == Some(&(sep as u8)) {
            let parts: Vec<&str> = s.split(sep).collect();
            return matches!(parts.len(), 6 | 8 | 20) && parts.iter().all(|p| hex(p, 2));
        }
    }
    false
}

fn sanitize_isbn(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect()
}

fn is_isbn10(s: &str) -> bool {
    let s = sanitize_isbn(s);
    if !re("^(?:[0-9]{9}X|[0-9]{10})$", &s) {
        return false;
    }
    let b = s.as_bytes();
    let mut sum: u32 = 0;
    for (i, d) in b.iter().take(9).enumerate() {
        sum += (i as u32 + 1) * u32::from(d - b'0');
    }
    sum += if b[9] == b'X' {
        100
    } else {
        10 * u32::from(b[9] - b'0')
    };
    sum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let s = sanitize_isbn(s);
    if !re("^(?:[0-9]{13})$", &s) {
        return false;
    }
    let b = s.as_bytes();
    let mut sum: u32 = 0;
    for (i, d) in b.iter().take(12).enumerate() {
        sum += if i % 2 == 0 { 1 } else { 3 } * u32::from(d - b'0');
    }
    u32::from(b[12] - b'0') == (10 - sum % 10) % 10
}

fn is_credit_card(s: &str) -> bool {
    let digits: String = s.chars().filter(|c| c.is_ascii_digit()).collect();
    const PATTERN: &str = r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})$";
    if !re(PATTERN, &digits) {
        return false;
    }
    let mut sum = 0u32;
    let mut double = false;
    for b in digits.bytes().rev() {
        let mut d = u32::from(b - b'0');
        if double {
            d *= 2;
            if d >= 10 {
                d = d % 10 + 1;
            }
        }
        sum += d;
        double = !double;
    }
    sum.is_multiple_of(10)
}

/// Go's `time.Parse("2006-01-02", s)`.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m)
}

fn days_in_month(y: u32, m: u32) -> u32 {
    match m {
        2 if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// kube-openapi's `IsDateTime`.
fn is_date_time(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let time = parts[1];
    if !re(
        r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$",
        time,
    ) {
        return false;
    }
    let (h, m, sec) = (&time[0..2], &time[3..5], &time[6..8]);
    h <= "23" && m <= "59" && sec <= "59"
}

/// Go's `time.ParseDuration`, then kube-openapi's lenient `<n> <unit>` fallback.
fn is_duration(s: &str) -> bool {
    crate::duration::parse_nanos(s).is_ok() || lenient_duration(s)
}

fn lenient_duration(s: &str) -> bool {
    const UNITS: &[&[&str]] = &[
        &["ns", "nano"],
        &["us", "µs", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut ok = false;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && chars[j].is_ascii_digit() {
            j += 1;
        }
        let mut k = j;
        while k < chars.len() && chars[k].is_whitespace() {
            k += 1;
        }
        let unit_start = k;
        while k < chars.len() && (chars[k].is_ascii_alphabetic() || chars[k] == 'µ') {
            k += 1;
        }
        if k == unit_start {
            i = j;
            continue;
        }
        let unit: String = chars[unit_start..k]
            .iter()
            .collect::<String>()
            .to_lowercase();
        for variants in UNITS {
            let last = variants.len() - 1;
            for (n, v) in variants.iter().enumerate() {
                if (n == last && unit.starts_with(v)) || unit.eq_ignore_ascii_case(v) {
                    ok = true;
                }
            }
        }
        i = k;
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert!(validates("ipv4", "10.0.0.1"));
        assert!(!validates("ipv4", "10.0.0.256"));
        assert!(validates("ipv6", "::1"));
        assert!(validates("ipv6", "2001:db8::8a2e:370:7334"));
        assert!(!validates("ipv6", "1.2.3.4"));
        assert!(validates("cidr", "10.0.0.0/8"));
        assert!(!validates("cidr", "10.0.0.0/33"));
        assert!(validates("mac", "00:1a:2b:3c:4d:5e"));
        assert!(validates("date", "2024-02-29"));
        assert!(!validates("date", "2023-02-29"));
        assert!(validates("datetime", "2024-01-01T10:00:00Z"));
        assert!(!validates("datetime", "2024-01-01"));
        assert!(validates("duration", "1h30m"));
        assert!(validates("duration", "3 days"));
        assert!(!validates("duration", "soon"));
        assert!(validates("hostname", "example.com"));
        assert!(!validates("hostname", "-bad"));
        assert!(validates("email", "a@b.c"));
        assert!(!validates("email", "nope"));
        assert!(validates("uri", "https://example.com/x"));
        assert!(!validates("uri", "example"));
        assert!(validates("byte", "aGVsbG8="));
        assert!(!validates("byte", "hello"));
        assert!(validates("isbn10", "0321751043"));
        assert!(validates("isbn13", "978-0321751041"));
    }
}
