//! The functions a CRD rule may call, with their overloads, as kube-apiserver 1.33 declares
//! them for new expressions (its environment at compatibility version 1.32): CEL's standard
//! library and optionals, the strings extension (version 2), sets, two-variable
//! comprehensions, and Kubernetes' lists, regex, URL, IP, CIDR, quantity, format and
//! authorization libraries (the last only has values in admission expressions).
//!
//! Signatures are written as CEL prints them, one a line: `name(T, T) -> R` for a global
//! function, `Recv :: name(T) -> R` for a member function. `A`, `B`, `K` and `V` are type
//! parameters.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::types::Type;

const SIGNATURES: &str = "
_?_:_(bool, A, A) -> A
!_(bool) -> bool
_==_(A, A) -> bool
_!=_(A, A) -> bool
_+_(int, int) -> int
_+_(uint, uint) -> uint
_+_(double, double) -> double
_+_(string, string) -> string
_+_(bytes, bytes) -> bytes
_+_(list(A), list(A)) -> list(A)
_+_(duration, duration) -> duration
_+_(timestamp, duration) -> timestamp
_+_(duration, timestamp) -> timestamp
_-_(int, int) -> int
_-_(uint, uint) -> uint
_-_(double, double) -> double
_-_(duration, duration) -> duration
_-_(timestamp, duration) -> timestamp
_-_(timestamp, timestamp) -> duration
_*_(int, int) -> int
_*_(uint, uint) -> uint
_*_(double, double) -> double
_/_(int, int) -> int
_/_(uint, uint) -> uint
_/_(double, double) -> double
_%_(int, int) -> int
_%_(uint, uint) -> uint
-_(int) -> int
-_(double) -> double
_[_](list(A), int) -> A
_[_](map(K, V), K) -> V
_[_](optional(list(A)), int) -> optional(A)
_[_](optional(map(K, V)), K) -> optional(V)
_[?_](list(A), int) -> optional(A)
_[?_](map(K, V), K) -> optional(V)
_[?_](optional(list(A)), int) -> optional(A)
_[?_](optional(map(K, V)), K) -> optional(V)
@in(A, list(A)) -> bool
@in(A, map(A, B)) -> bool
@not_strictly_false(bool) -> bool
size(string) -> int
size(bytes) -> int
size(list(A)) -> int
size(map(A, B)) -> int
string :: size() -> int
bytes :: size() -> int
list(A) :: size() -> int
map(A, B) :: size() -> int
string :: contains(string) -> bool
string :: startsWith(string) -> bool
string :: endsWith(string) -> bool
string :: matches(string) -> bool
matches(string, string) -> bool
bool(bool) -> bool
bool(string) -> bool
bytes(bytes) -> bytes
bytes(string) -> bytes
double(double) -> double
double(int) -> double
double(string) -> double
double(uint) -> double
duration(duration) -> duration
duration(int) -> duration
duration(string) -> duration
int(int) -> int
int(double) -> int
int(duration) -> int
int(string) -> int
int(timestamp) -> int
int(uint) -> int
string(string) -> string
string(bool) -> string
string(bytes) -> string
string(double) -> string
string(duration) -> string
string(int) -> string
string(timestamp) -> string
string(uint) -> string
string(net.IP) -> string
string(net.CIDR) -> string
timestamp(timestamp) -> timestamp
timestamp(int) -> timestamp
timestamp(string) -> timestamp
uint(uint) -> uint
uint(double) -> uint
uint(int) -> uint
uint(string) -> uint
dyn(A) -> dyn
type(A) -> type(A)
timestamp :: getFullYear() -> int
timestamp :: getFullYear(string) -> int
timestamp :: getMonth() -> int
timestamp :: getMonth(string) -> int
timestamp :: getDayOfYear() -> int
timestamp :: getDayOfYear(string) -> int
timestamp :: getDayOfMonth() -> int
timestamp :: getDayOfMonth(string) -> int
timestamp :: getDate() -> int
timestamp :: getDate(string) -> int
timestamp :: getDayOfWeek() -> int
timestamp :: getDayOfWeek(string) -> int
timestamp :: getHours() -> int
timestamp :: getHours(string) -> int
timestamp :: getMinutes() -> int
timestamp :: getMinutes(string) -> int
timestamp :: getSeconds() -> int
timestamp :: getSeconds(string) -> int
timestamp :: getMilliseconds() -> int
timestamp :: getMilliseconds(string) -> int
duration :: getHours() -> int
duration :: getMinutes() -> int
duration :: getSeconds() -> int
duration :: getMilliseconds() -> int
optional.of(A) -> optional(A)
optional.ofNonZeroValue(A) -> optional(A)
optional.none() -> optional(A)
optional.unwrap(list(optional(A))) -> list(A)
optional(A) :: value() -> A
optional(A) :: hasValue() -> bool
optional(A) :: or(optional(A)) -> optional(A)
optional(A) :: orValue(A) -> A
list(A) :: first() -> optional(A)
list(A) :: last() -> optional(A)
list(optional(A)) :: unwrapOpt() -> list(A)
string :: charAt(int) -> string
string :: indexOf(string) -> int
string :: indexOf(string, int) -> int
string :: lastIndexOf(string) -> int
string :: lastIndexOf(string, int) -> int
string :: lowerAscii() -> string
string :: upperAscii() -> string
string :: replace(string, string) -> string
string :: replace(string, string, int) -> string
string :: split(string) -> list(string)
string :: split(string, int) -> list(string)
string :: substring(int) -> string
string :: substring(int, int) -> string
string :: trim() -> string
string :: format(list(dyn)) -> string
strings.quote(string) -> string
list(string) :: join() -> string
list(string) :: join(string) -> string
list(int) :: isSorted() -> bool
list(uint) :: isSorted() -> bool
list(double) :: isSorted() -> bool
list(bool) :: isSorted() -> bool
list(duration) :: isSorted() -> bool
list(timestamp) :: isSorted() -> bool
list(string) :: isSorted() -> bool
list(bytes) :: isSorted() -> bool
list(int) :: sum() -> int
list(uint) :: sum() -> uint
list(double) :: sum() -> double
list(duration) :: sum() -> duration
list(int) :: min() -> int
list(uint) :: min() -> uint
list(double) :: min() -> double
list(bool) :: min() -> bool
list(duration) :: min() -> duration
list(timestamp) :: min() -> timestamp
list(string) :: min() -> string
list(bytes) :: min() -> bytes
list(int) :: max() -> int
list(uint) :: max() -> uint
list(double) :: max() -> double
list(bool) :: max() -> bool
list(duration) :: max() -> duration
list(timestamp) :: max() -> timestamp
list(string) :: max() -> string
list(bytes) :: max() -> bytes
list(A) :: indexOf(A) -> int
list(A) :: lastIndexOf(A) -> int
sets.contains(list(A), list(A)) -> bool
sets.equivalent(list(A), list(A)) -> bool
sets.intersects(list(A), list(A)) -> bool
string :: find(string) -> string
string :: findAll(string) -> list(string)
string :: findAll(string, int) -> list(string)
url(string) -> kubernetes.URL
isURL(string) -> bool
kubernetes.URL :: getScheme() -> string
kubernetes.URL :: getHost() -> string
kubernetes.URL :: getHostname() -> string
kubernetes.URL :: getPort() -> string
kubernetes.URL :: getEscapedPath() -> string
kubernetes.URL :: getQuery() -> map(string, list(string))
quantity(string) -> kubernetes.Quantity
isQuantity(string) -> bool
sign(kubernetes.Quantity) -> int
kubernetes.Quantity :: isGreaterThan(kubernetes.Quantity) -> bool
kubernetes.Quantity :: isLessThan(kubernetes.Quantity) -> bool
kubernetes.Quantity :: compareTo(kubernetes.Quantity) -> int
kubernetes.Quantity :: asApproximateFloat() -> double
kubernetes.Quantity :: asInteger() -> int
kubernetes.Quantity :: isInteger() -> bool
kubernetes.Quantity :: add(kubernetes.Quantity) -> kubernetes.Quantity
kubernetes.Quantity :: add(int) -> kubernetes.Quantity
kubernetes.Quantity :: sub(kubernetes.Quantity) -> kubernetes.Quantity
kubernetes.Quantity :: sub(int) -> kubernetes.Quantity
ip(string) -> net.IP
isIP(string) -> bool
ip.isCanonical(string) -> bool
net.IP :: family() -> int
net.IP :: isUnspecified() -> bool
net.IP :: isLoopback() -> bool
net.IP :: isLinkLocalMulticast() -> bool
net.IP :: isLinkLocalUnicast() -> bool
net.IP :: isGlobalUnicast() -> bool
cidr(string) -> net.CIDR
isCIDR(string) -> bool
net.CIDR :: containsIP(string) -> bool
net.CIDR :: containsIP(net.IP) -> bool
net.CIDR :: containsCIDR(string) -> bool
net.CIDR :: containsCIDR(net.CIDR) -> bool
net.CIDR :: ip() -> net.IP
net.CIDR :: prefixLength() -> int
net.CIDR :: masked() -> net.CIDR
format.dns1123Label() -> kubernetes.NamedFormat
format.dns1123Subdomain() -> kubernetes.NamedFormat
format.dns1035Label() -> kubernetes.NamedFormat
format.qualifiedName() -> kubernetes.NamedFormat
format.dns1123LabelPrefix() -> kubernetes.NamedFormat
format.dns1123SubdomainPrefix() -> kubernetes.NamedFormat
format.dns1035LabelPrefix() -> kubernetes.NamedFormat
format.labelValue() -> kubernetes.NamedFormat
format.uri() -> kubernetes.NamedFormat
format.uuid() -> kubernetes.NamedFormat
format.byte() -> kubernetes.NamedFormat
format.date() -> kubernetes.NamedFormat
format.datetime() -> kubernetes.NamedFormat
format.named(string) -> optional(kubernetes.NamedFormat)
kubernetes.NamedFormat :: validate(string) -> optional(list(string))
kubernetes.authorization.Authorizer :: path(string) -> kubernetes.authorization.PathCheck
kubernetes.authorization.Authorizer :: group(string) -> kubernetes.authorization.GroupCheck
kubernetes.authorization.Authorizer :: serviceAccount(string, string) -> kubernetes.authorization.Authorizer
kubernetes.authorization.GroupCheck :: resource(string) -> kubernetes.authorization.ResourceCheck
kubernetes.authorization.ResourceCheck :: subresource(string) -> kubernetes.authorization.ResourceCheck
kubernetes.authorization.ResourceCheck :: namespace(string) -> kubernetes.authorization.ResourceCheck
kubernetes.authorization.ResourceCheck :: name(string) -> kubernetes.authorization.ResourceCheck
kubernetes.authorization.ResourceCheck :: fieldSelector(string) -> kubernetes.authorization.ResourceCheck
kubernetes.authorization.ResourceCheck :: labelSelector(string) -> kubernetes.authorization.ResourceCheck
kubernetes.authorization.PathCheck :: check(string) -> kubernetes.authorization.Decision
kubernetes.authorization.ResourceCheck :: check(string) -> kubernetes.authorization.Decision
kubernetes.authorization.Decision :: errored() -> bool
kubernetes.authorization.Decision :: error() -> string
kubernetes.authorization.Decision :: allowed() -> bool
kubernetes.authorization.Decision :: reason() -> string
";

/// Ordering comparisons: every type with an order, and int, uint and double mixed
/// (kube-apiserver enables cross-type numeric comparisons).
const ORDERED: &[&str] = &["bool", "string", "bytes", "timestamp", "duration"];
const NUMERIC: &[&str] = &["int", "uint", "double"];

/// One overload of a function.
#[derive(Debug)]
pub(crate) struct Overload {
    /// Called on a target (`s.contains(x)`), or as a global (`size(s)`).
    pub(crate) member: bool,
    /// The target first, for member overloads.
    pub(crate) params: Vec<Type>,
    pub(crate) result: Type,
}

/// Every declared function's overloads, by name.
pub(crate) fn functions() -> &'static BTreeMap<String, Vec<Overload>> {
    static FUNCTIONS: OnceLock<BTreeMap<String, Vec<Overload>>> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        let mut lines: Vec<String> = SIGNATURES.lines().map(str::to_string).collect();
        for op in ["_<_", "_<=_", "_>_", "_>=_"] {
            for t in ORDERED {
                lines.push(format!("{op}({t}, {t}) -> bool"));
            }
            for a in NUMERIC {
                for b in NUMERIC {
                    lines.push(format!("{op}({a}, {b}) -> bool"));
                }
            }
        }
        let mut out: BTreeMap<String, Vec<Overload>> = BTreeMap::new();
        for line in lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
            let (name, overload) = parse_signature(line)
                .unwrap_or_else(|| panic!("malformed CEL signature in the table: {line}"));
            out.entry(name).or_default().push(overload);
        }
        out
    })
}

/// `name(T, ...) -> R` or `Recv :: name(T, ...) -> R`.
fn parse_signature(line: &str) -> Option<(String, Overload)> {
    let (call, result) = line.split_once(" -> ")?;
    let (receiver, call) = match call.split_once(" :: ") {
        Some((r, c)) => (Some(parse_type(r)?), c),
        None => (None, call),
    };
    let open = call.find('(')?;
    let name = call[..open].to_string();
    let inner = call[open + 1..].strip_suffix(')')?;
    let mut params: Vec<Type> = receiver.into_iter().collect();
    let member = !params.is_empty();
    for arg in split_top_level(inner) {
        params.push(parse_type(arg)?);
    }
    Some((
        name,
        Overload {
            member,
            params,
            result: parse_type(result)?,
        },
    ))
}

/// The comma-separated parts of `s` outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = s[start..].trim();
    if !last.is_empty() {
        parts.push(last);
    }
    parts
}

fn parse_type(s: &str) -> Option<Type> {
    let s = s.trim();
    if let Some(open) = s.find('(') {
        let inner = split_top_level(s[open + 1..].strip_suffix(')')?);
        let arg = |i: usize| inner.get(i).and_then(|t| parse_type(t));
        return match &s[..open] {
            "list" => Some(Type::list(arg(0)?)),
            "map" => Some(Type::map(arg(0)?, arg(1)?)),
            "optional" => Some(Type::optional(arg(0)?)),
            "type" => Some(Type::Kind(Box::new(arg(0)?))),
            _ => None,
        };
    }
    Some(match s {
        "bool" => Type::Bool,
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "duration" => Type::Duration,
        "timestamp" => Type::Timestamp,
        "null" => Type::Null,
        "dyn" => Type::Dyn,
        "A" => Type::Param("A"),
        "B" => Type::Param("B"),
        "K" => Type::Param("K"),
        "V" => Type::Param("V"),
        "net.IP" => Type::Opaque("net.IP"),
        "net.CIDR" => Type::Opaque("net.CIDR"),
        "kubernetes.URL" => Type::Opaque("kubernetes.URL"),
        "kubernetes.Quantity" => Type::Opaque("kubernetes.Quantity"),
        "kubernetes.NamedFormat" => Type::Opaque("kubernetes.NamedFormat"),
        "kubernetes.authorization.Authorizer" => Type::Opaque(super::authz::AUTHORIZER),
        "kubernetes.authorization.PathCheck" => Type::Opaque(super::authz::PATH_CHECK),
        "kubernetes.authorization.GroupCheck" => Type::Opaque(super::authz::GROUP_CHECK),
        "kubernetes.authorization.ResourceCheck" => Type::Opaque(super::authz::RESOURCE_CHECK),
        "kubernetes.authorization.Decision" => Type::Opaque(super::authz::DECISION),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signature_parses() {
        let f = functions();
        assert!(f["size"].iter().any(|o| o.member));
        assert_eq!(
            f["_<_"].len(),
            ORDERED.len() + NUMERIC.len() * NUMERIC.len()
        );
        let join = &f["join"][1];
        assert_eq!(
            (join.member, join.params.len(), join.result.to_string()),
            (true, 2, "string".into())
        );
    }
}
