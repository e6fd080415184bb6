//! Label selectors: grammar, canonical form, errors and matching, checked against the
//! behaviour of Kubernetes 1.33 (`k8s.io/apimachinery/pkg/labels`).

use std::collections::BTreeMap;

use konverge_apimachinery::selector::{LabelSelector, Operator, Requirement, SelectorError};
use serde_json::json;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse(s: &str) -> LabelSelector {
    LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

fn parse_error(s: &str) -> String {
    match LabelSelector::parse(s) {
        Ok(sel) => panic!("{s:?} should not parse, got {sel}"),
        Err(e) => e.to_string(),
    }
}

const LABEL_VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NAME_PART_RULE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

#[test]
fn good_strings_round_trip_without_spaces() {
    for s in [
        "x=a,y=b,z=c",
        "",
        "x!=a,y=b",
        "x=",
        "x= ",
        "x=,z= ",
        "x= ,z= ",
        "!x",
        "x>1",
        "x>1,z<5",
    ] {
        assert_eq!(parse(s).to_string(), s.replace(' ', ""), "{s:?}");
    }
}

#[test]
fn canonical_form_sorts_requirements_and_values() {
    assert_eq!(parse("z=1,a=2").to_string(), "a=2,z=1");
    assert_eq!(
        parse("x in (foo,,baz),y,z notin ()").to_string(),
        "x in (,baz,foo),y,z notin ()"
    );
    assert_eq!(
        parse("x notin (abc,,def),bar,z in (),w").to_string(),
        "bar,w,x notin (,abc,def),z in ()"
    );
    assert_eq!(parse("x==a,y!=b").to_string(), "x==a,y!=b");
    assert_eq!(
        parse("a in (x,y,notin, z,in)").to_string(),
        "a in (in,notin,x,y,z)"
    );
    assert_eq!(parse("x in (b,a,b)").requirements()[0].values(), ["a", "b"]);
}

#[test]
fn whitespace_is_skipped_between_tokens() {
    assert_eq!(parse("\rx").to_string(), "x");
    assert_eq!(parse("foo  in\t (abc)").to_string(), "foo in (abc)");
    assert_eq!(parse("x notin\n (abc)").to_string(), "x notin (abc)");
    assert_eq!(parse("x notin ( )").to_string(), "x notin ()");
    assert_eq!(parse("x notin (, a)").to_string(), "x notin (,a)");
    assert_eq!(parse(" a = b , c != d ").to_string(), "a=b,c!=d");
    assert_eq!(parse("a ").to_string(), "a");
    assert!(parse("   ").is_empty());
}

#[test]
fn keys_with_prefixes() {
    let sel = parse("this-is-another-dns.domain.com/key-with-dash in (so,what)");
    assert_eq!(
        sel.requirements()[0].key(),
        "this-is-another-dns.domain.com/key-with-dash"
    );
    assert_eq!(sel.requirements()[0].operator(), Operator::In);
    let sel = parse("0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)");
    assert_eq!(
        sel.to_string(),
        "0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)"
    );
}

#[test]
fn operators_are_recognised() {
    let ops: Vec<Operator> = parse("a,!b,c=1,d==1,e!=1,f in (1),g notin (1),h>1,i<1")
        .requirements()
        .iter()
        .map(Requirement::operator)
        .collect();
    assert_eq!(
        ops,
        [
            Operator::Exists,
            Operator::DoesNotExist,
            Operator::Equals,
            Operator::DoubleEquals,
            Operator::NotEquals,
            Operator::In,
            Operator::NotIn,
            Operator::GreaterThan,
            Operator::LessThan,
        ]
    );
    // `in` and `notin` are values after an operator.
    assert!(parse("notin=in").matches(&labels(&[("notin", "in")])));
}

#[test]
fn malformed_selectors_have_kubernetes_messages() {
    let cases = [
        ("x=a||y=b", format!("unable to parse requirement: values[0][x]: Invalid value: \"a||y\": {LABEL_VALUE_RULE}")),
        ("x==a==b", "found '==', expected: ',' or 'end of string'".to_string()),
        ("!x=a", "found '=', expected: ',' or 'end of string'".to_string()),
        ("x,,y", "found ',', expected: identifier after ','".to_string()),
        (",x,y", "found ',', expected: !, identifier, or 'end of string'".to_string()),
        ("a in (xyz),", "found '', expected: identifier after ','".to_string()),
        ("a in (xyz)b notin ()", "found 'b', expected: ',' or 'end of string'".to_string()),
        ("x nott in (y)", "unable to parse requirement: found 'nott', expected: in, notin, =, ==, !=, gt, lt".to_string()),
        ("a in (xyz abc)", "unable to parse requirement: found 'abc', expected: ',' or ')'".to_string()),
        ("a notin(", "unable to parse requirement: found '', expected: ',', ')' or identifier".to_string()),
        ("a (", "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt".to_string()),
        ("(", "found '(', expected: !, identifier, or 'end of string'".to_string()),
        ("x in", "unable to parse requirement: found '' expected: '('".to_string()),
        ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'".to_string()),
        ("x in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier".to_string()),
        ("x in (,,)", "unable to parse requirement: found ')', expected: ',', or identifier".to_string()),
        ("!", "unable to parse requirement: found '', expected: identifier".to_string()),
        ("x=(", "unable to parse requirement: found '(', expected: identifier".to_string()),
        ("x<a", "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer".to_string()),
        ("x=a*b", format!("unable to parse requirement: values[0][x]: Invalid value: \"a*b\": {LABEL_VALUE_RULE}")),
        ("-x", format!("unable to parse requirement: <nil>: Invalid value: \"-x\": {NAME_PART_RULE}")),
        (
            "x=a,y in (b,-c,-d)",
            format!(
                "unable to parse requirement: [values[0][y]: Invalid value: \"-c\": {LABEL_VALUE_RULE}, values[1][y]: Invalid value: \"-d\": {LABEL_VALUE_RULE}]"
            ),
        ),
    ];
    let mismatches: Vec<String> = cases
        .iter()
        .filter(|(input, message)| parse_error(input) != *message)
        .map(|(input, message)| {
            format!("{input:?}: got {:?}, want {message:?}", parse_error(input))
        })
        .collect();
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    assert!(matches!(
        LabelSelector::parse("x in"),
        Err(SelectorError::InvalidLabelSelector { .. })
    ));
}

#[test]
fn invalid_keys() {
    assert_eq!(
        parse_error("example.com/"),
        format!(
            "unable to parse requirement: <nil>: Invalid value: \"example.com/\": name part must be non-empty; {NAME_PART_RULE}"
        )
    );
    assert_eq!(
        parse_error(&"k".repeat(64)),
        format!(
            "unable to parse requirement: <nil>: Invalid value: \"{}\": name part must be no more than 63 characters",
            "k".repeat(64)
        )
    );
    assert!(parse_error("Example.com/x").contains("prefix part a lowercase RFC 1123 subdomain"));
    assert!(parse_error("a/b/c").contains("a qualified name must consist of"));
    assert_eq!(parse(&"k".repeat(63)).to_string(), "k".repeat(63));
}

#[test]
fn no_input_panics() {
    for s in [
        "\0",
        "a\0b",
        "x=\u{0}",
        "é=ü",
        "a=\u{2028}",
        "((((",
        "!!!",
        "=",
        "a==",
        "<>",
        "a in (()",
    ] {
        let _ = LabelSelector::parse(s);
    }
}

#[test]
fn matching() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
    let cases: &[Case] = &[
        ("", &[("x", "y")], true),
        ("x=y", &[("x", "y")], true),
        ("x=y,z=w", &[("x", "y"), ("z", "w")], true),
        ("x!=y,z!=w", &[("x", "z"), ("z", "a")], true),
        ("x", &[("x", "z")], true),
        ("!x", &[("y", "z")], true),
        ("x>1", &[("x", "2")], true),
        ("x<1", &[("x", "0")], true),
        ("x=z", &[], false),
        ("x=y", &[("x", "z")], false),
        ("x=y,z=w", &[("x", "w"), ("z", "w")], false),
        ("x!=y,z!=w", &[("x", "z"), ("z", "w")], false),
        ("x", &[("y", "z")], false),
        ("!x", &[("x", "z")], false),
        ("x>1", &[("x", "0")], false),
        ("x<1", &[("x", "2")], false),
        ("z>1", &[("z", "v2")], false),
        ("x!=y", &[], true),
        ("x notin (a)", &[], true),
        ("x in (a,b)", &[("x", "b")], true),
        ("x in (a,b)", &[("x", "c")], false),
        ("x notin (),y", &[("y", "")], true),
        ("x in ()", &[("y", "baz")], false),
        ("x=", &[("x", "")], true),
        (
            "foo=bar,foobar=bar,baz=blah",
            &[("foo", "bar"), ("baz", "blah")],
            false,
        ),
    ];
    for (selector, set, want) in cases {
        assert_eq!(
            parse(selector).matches(&labels(set)),
            *want,
            "{selector:?} on {set:?}"
        );
    }
}

#[test]
fn everything_and_nothing() {
    assert!(LabelSelector::everything().matches(&labels(&[])));
    assert!(LabelSelector::everything().is_empty());
    assert!(!LabelSelector::nothing().matches(&labels(&[])));
    assert!(!LabelSelector::nothing().is_empty());
    assert_eq!(LabelSelector::nothing().to_string(), "");
}

#[test]
fn exact_match_introspection() {
    let sel = parse("a=1,b in (2),c in (3,4),d!=5");
    assert_eq!(sel.requires_exact_match("a"), Some("1"));
    assert_eq!(sel.requires_exact_match("b"), Some("2"));
    assert_eq!(sel.requires_exact_match("c"), None);
    assert_eq!(sel.requires_exact_match("d"), None);
}

#[test]
fn structured_selector() {
    let sel = LabelSelector::from_json(&json!({
        "matchLabels": {"app": "web", "tier": "front"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "canary"]},
            {"key": "legacy", "operator": "DoesNotExist"},
            {"key": "team", "operator": "Exists"},
            {"key": "zone", "operator": "NotIn", "values": ["b"]}
        ]
    }))
    .unwrap();
    assert_eq!(
        sel.to_string(),
        "app=web,env in (canary,prod),!legacy,team,tier=front,zone notin (b)"
    );
    let ok = labels(&[
        ("app", "web"),
        ("tier", "front"),
        ("env", "prod"),
        ("team", "x"),
    ]);
    assert!(sel.matches(&ok));
    let mut bad = ok.clone();
    bad.insert("legacy".into(), "1".into());
    assert!(!sel.matches(&bad));

    assert!(
        LabelSelector::from_json(&json!({}))
            .unwrap()
            .matches(&labels(&[]))
    );
    assert!(
        LabelSelector::from_json(&json!({"matchLabels": {}}))
            .unwrap()
            .is_empty()
    );
    assert!(
        LabelSelector::from_json(&json!(null))
            .unwrap()
            .matches_nothing()
    );
}

#[test]
fn structured_selector_errors() {
    let err = |v: serde_json::Value| LabelSelector::from_json(&v).unwrap_err().to_string();
    assert_eq!(
        err(json!({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]})),
        "\"Equals\" is not a valid label selector operator"
    );
    assert_eq!(
        err(json!({"matchExpressions": [{"key": "a", "operator": "In"}]})),
        "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
    );
    assert_eq!(
        err(
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x", "y"]}]})
        ),
        "values: Invalid value: []string{\"x\", \"y\"}: values set must be empty for exists and does not exist"
    );
    assert_eq!(
        err(json!({"matchLabels": {"-a": "b"}})),
        format!("key: Invalid value: \"-a\": {NAME_PART_RULE}")
    );
    assert_eq!(
        err(json!({"matchLabels": {"a": "b c"}})),
        format!("values[0][a]: Invalid value: \"b c\": {LABEL_VALUE_RULE}")
    );
    assert_eq!(
        err(json!({"matchLabels": ["a"]})),
        "json: cannot unmarshal array into Go struct field LabelSelector.matchLabels of type map[string]string"
    );
    assert_eq!(
        err(json!("a=b")),
        "json: cannot unmarshal string into Go value of type v1.LabelSelector"
    );
}

#[test]
fn requirement_constructor() {
    assert!(Requirement::new("x", Operator::In, vec!["foo".into()]).is_ok());
    assert!(Requirement::new("x", Operator::Exists, vec![]).is_ok());
    assert!(Requirement::new("x", Operator::GreaterThan, vec!["1".into()]).is_ok());
    assert_eq!(
        Requirement::new("x", Operator::Equals, vec!["bar".into(), "foo".into()])
            .unwrap_err()
            .to_string(),
        "values: Invalid value: []string{\"bar\", \"foo\"}: exact-match compatibility requires one single value"
    );
    assert_eq!(
        Requirement::new("x", Operator::LessThan, vec![])
            .unwrap_err()
            .to_string(),
        "values: Invalid value: []string(nil): for 'Gt', 'Lt' operators, exactly one value is required"
    );
    let mut sel = LabelSelector::everything();
    sel.add(Requirement::new("b", Operator::Exists, vec![]).unwrap());
    sel.add(Requirement::new("a", Operator::NotIn, vec!["x".into()]).unwrap());
    assert_eq!(sel.to_string(), "a notin (x),b");
}

#[test]
fn from_set() {
    let sel = LabelSelector::from_set(&labels(&[("b", "2"), ("a", "1")]));
    assert_eq!(sel.to_string(), "a=1,b=2");
    assert!(sel.matches(&labels(&[("a", "1"), ("b", "2"), ("c", "3")])));
    assert!(LabelSelector::from_set(&BTreeMap::new()).is_empty());
}
