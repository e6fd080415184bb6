//! Field selectors: grammar, escaping, errors and matching, checked against the behaviour of
//! Kubernetes 1.33 (`k8s.io/apimachinery/pkg/fields`).

use std::collections::BTreeMap;

use konverge_apimachinery::selector::{
    FieldOperator, FieldSelector, SelectorError, escape_value, field_value, unescape_value,
};
use serde_json::json;

fn fields(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |f: &str| map.get(f).cloned()
}

#[test]
fn parses_terms_in_sorted_order() {
    let sel = FieldSelector::parse("status.phase!=Running,metadata.name=foo").unwrap();
    let reqs: Vec<(&str, FieldOperator, &str)> = sel
        .requirements()
        .iter()
        .map(|r| (r.field(), r.operator(), r.value()))
        .collect();
    assert_eq!(
        reqs,
        [
            ("metadata.name", FieldOperator::Equals, "foo"),
            ("status.phase", FieldOperator::NotEquals, "Running")
        ]
    );
    assert_eq!(sel.to_string(), "metadata.name=foo,status.phase!=Running");
    assert_eq!(
        sel.fields().collect::<Vec<_>>(),
        ["metadata.name", "status.phase"]
    );
}

#[test]
fn double_equals_is_equals() {
    let sel = FieldSelector::parse("spec.nodeName==node-1").unwrap();
    assert_eq!(sel.requirements()[0].operator(), FieldOperator::Equals);
    assert_eq!(sel.to_string(), "spec.nodeName=node-1");
    assert_eq!(sel.requires_exact_match("spec.nodeName"), Some("node-1"));
}

#[test]
fn empty_selectors_select_everything() {
    for s in ["", ",", ",,", "="] {
        let sel = FieldSelector::parse(s).unwrap();
        assert!(sel.is_empty(), "{s:?}");
        assert!(sel.matches(&fields(&[])));
    }
    // An empty value is a requirement.
    let sel = FieldSelector::parse("spec.nodeName=").unwrap();
    assert!(sel.matches(&fields(&[])));
    assert!(!sel.matches(&fields(&[("spec.nodeName", "n1")])));
}

#[test]
fn nothing_is_trimmed() {
    let sel = FieldSelector::parse("a = b").unwrap();
    assert_eq!(sel.requirements()[0].field(), "a ");
    assert_eq!(sel.requirements()[0].value(), " b");
}

#[test]
fn escapes() {
    let sel = FieldSelector::parse(r"metadata.name=a\,b\=c\\d,x=y").unwrap();
    assert_eq!(sel.requirements()[0].value(), r"a,b=c\d");
    assert_eq!(sel.to_string(), r"metadata.name=a\,b\=c\\d,x=y");
    assert_eq!(escape_value(r"a,b=c\d"), r"a\,b\=c\\d");
    assert_eq!(unescape_value(r"a\,b").unwrap(), "a,b");
    assert_eq!(unescape_value("plain").unwrap(), "plain");
}

#[test]
fn errors_have_kubernetes_messages() {
    let err = |s: &str| FieldSelector::parse(s).unwrap_err().to_string();
    assert_eq!(
        err("foo"),
        "invalid selector: 'foo'; can't understand 'foo'"
    );
    assert_eq!(
        err("a=b,foo"),
        "invalid selector: 'a=b,foo'; can't understand 'foo'"
    );
    assert_eq!(
        err("a=b=c"),
        "invalid field selector: unescaped character in value: 61"
    );
    assert_eq!(
        err(r"a=b\x"),
        r"invalid field selector: invalid escape sequence: \x"
    );
    assert_eq!(
        err(r"a=b\"),
        r"invalid field selector: invalid escape sequence: \"
    );
    assert!(matches!(
        FieldSelector::parse("x"),
        Err(SelectorError::InvalidFieldSelectorTerm { .. })
    ));
    assert!(FieldSelector::parse("a==").is_ok());
    for s in ["\\", "a=\\é", "é=ü", "!=", "a!==b", "\0"] {
        let _ = FieldSelector::parse(s);
    }
}

#[test]
fn matching() {
    let sel = FieldSelector::parse("metadata.namespace=default,status.phase!=Succeeded").unwrap();
    assert!(sel.matches(&fields(&[
        ("metadata.namespace", "default"),
        ("status.phase", "Running")
    ])));
    assert!(!sel.matches(&fields(&[
        ("metadata.namespace", "default"),
        ("status.phase", "Succeeded")
    ])));
    assert!(!sel.matches(&fields(&[("metadata.namespace", "kube-system")])));
    // An absent field compares as the empty string.
    assert!(sel.matches(&fields(&[("metadata.namespace", "default")])));
    assert!(
        FieldSelector::one_term_equal("metadata.name", "x")
            .matches(&fields(&[("metadata.name", "x")]))
    );
}

#[test]
fn resolves_dotted_paths_in_objects() {
    let pod = json!({
        "metadata": {"name": "web-0", "namespace": "default"},
        "spec": {"nodeName": "node-1", "priority": 10, "hostNetwork": true},
        "status": {"phase": "Running"}
    });
    assert_eq!(field_value(&pod, "metadata.name").as_deref(), Some("web-0"));
    assert_eq!(
        field_value(&pod, "spec.nodeName").as_deref(),
        Some("node-1")
    );
    assert_eq!(field_value(&pod, "spec.priority").as_deref(), Some("10"));
    assert_eq!(
        field_value(&pod, "spec.hostNetwork").as_deref(),
        Some("true")
    );
    assert_eq!(field_value(&pod, "status.podIP"), None);
    assert_eq!(field_value(&pod, "spec"), None);
    assert_eq!(field_value(&pod, "metadata.name.x"), None);

    let sel = FieldSelector::parse("spec.nodeName=node-1,status.phase=Running").unwrap();
    assert!(sel.matches(&|f: &str| field_value(&pod, f)));
}
