//! JSON patch: the RFC 6902 appendix examples, and kube-apiserver's (evanphx/json-patch v4)
//! extensions and error messages.

use konverge_apimachinery::patch::{MAX_JSON_PATCH_OPERATIONS, PatchError, apply_json_patch};
use serde_json::{Value, json};

fn apply(doc: Value, patch: Value) -> Value {
    apply_json_patch(&doc, &patch).unwrap_or_else(|e| panic!("patch {patch} failed: {e}"))
}

fn error(doc: Value, patch: Value) -> PatchError {
    match apply_json_patch(&doc, &patch) {
        Ok(v) => panic!("patch {patch} should fail, got {v}"),
        Err(e) => e,
    }
}

#[test]
fn rfc6902_appendix_a() {
    // A.1 – A.5
    assert_eq!(
        apply(
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz", "value": "qux"}])
        ),
        json!({"baz": "qux", "foo": "bar"})
    );
    assert_eq!(
        apply(
            json!({"foo": ["bar", "baz"]}),
            json!([{"op": "add", "path": "/foo/1", "value": "qux"}])
        ),
        json!({"foo": ["bar", "qux", "baz"]})
    );
    assert_eq!(
        apply(
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "remove", "path": "/baz"}])
        ),
        json!({"foo": "bar"})
    );
    assert_eq!(
        apply(
            json!({"foo": ["bar", "qux", "baz"]}),
            json!([{"op": "remove", "path": "/foo/1"}])
        ),
        json!({"foo": ["bar", "baz"]})
    );
    assert_eq!(
        apply(
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "replace", "path": "/baz", "value": "boo"}])
        ),
        json!({"baz": "boo", "foo": "bar"})
    );
    // A.6, A.7
    assert_eq!(
        apply(
            json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
            json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}])
        ),
        json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}})
    );
    assert_eq!(
        apply(
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}])
        ),
        json!({"foo": ["all", "cows", "eat", "grass"]})
    );
    // A.8, A.9
    let doc = json!({"baz": "qux", "foo": ["a", 2, "c"]});
    assert_eq!(
        apply(
            doc.clone(),
            json!([{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}])
        ),
        doc
    );
    let e = error(
        json!({"baz": "qux"}),
        json!([{"op": "test", "path": "/baz", "value": "bar"}]),
    );
    assert_eq!(e.to_string(), "testing value /baz failed: test failed");
    assert_eq!(
        e,
        PatchError::JsonPatchOperation {
            index: 0,
            op: "test".into(),
            path: "/baz".into(),
            message: "testing value /baz failed: test failed".into(),
        }
    );
    assert_eq!(e.kubernetes_status_code(), 422);
    // A.10, A.11
    assert_eq!(
        apply(
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}])
        ),
        json!({"foo": "bar", "child": {"grandchild": {}}})
    );
    assert_eq!(
        apply(
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}])
        ),
        json!({"foo": "bar", "baz": "qux"})
    );
    // A.12
    assert_eq!(
        error(
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz/bat", "value": "qux"}])
        )
        .to_string(),
        "add operation does not apply: doc is missing path: \"/baz/bat\": missing value"
    );
    // A.14, A.15
    let doc = json!({"/": 9, "~1": 10});
    assert_eq!(
        apply(
            doc.clone(),
            json!([{"op": "test", "path": "/~01", "value": 10}])
        ),
        doc
    );
    assert_eq!(
        error(doc, json!([{"op": "test", "path": "/~01", "value": "10"}])).to_string(),
        "testing value /~01 failed: test failed"
    );
    // A.16
    assert_eq!(
        apply(
            json!({"foo": ["bar"]}),
            json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}])
        ),
        json!({"foo": ["bar", ["abc", "def"]]})
    );
}

#[test]
fn copy_and_escaped_paths() {
    assert_eq!(
        apply(
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!([
                {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/app.kubernetes.io~1name"},
                {"op": "remove", "path": "/metadata/labels/a"}
            ])
        ),
        json!({"metadata": {"labels": {"app.kubernetes.io/name": "1"}}})
    );
}

#[test]
fn kubernetes_extensions() {
    // Negative indexes count from the end.
    assert_eq!(
        apply(
            json!({"a": [1, 2, 3]}),
            json!([{"op": "remove", "path": "/a/-1"}])
        ),
        json!({"a": [1, 2]})
    );
    assert_eq!(
        apply(
            json!({"a": [1, 2, 3]}),
            json!([{"op": "add", "path": "/a/-1", "value": 4}])
        ),
        json!({"a": [1, 2, 3, 4]})
    );
    assert_eq!(
        apply(
            json!({"a": [1, 2, 3]}),
            json!([{"op": "replace", "path": "/a/-3", "value": 0}])
        ),
        json!({"a": [0, 2, 3]})
    );
    // `replace` of an absent member adds it.
    assert_eq!(
        apply(
            json!({"a": 1}),
            json!([{"op": "replace", "path": "/b", "value": 2}])
        ),
        json!({"a": 1, "b": 2})
    );
    // `test` of an absent member against null holds.
    assert_eq!(
        apply(
            json!({"a": 1}),
            json!([{"op": "test", "path": "/b", "value": null}])
        ),
        json!({"a": 1})
    );
    // `replace` of the whole document.
    assert_eq!(
        apply(
            json!({"a": 1}),
            json!([{"op": "replace", "path": "", "value": {"b": 2}}])
        ),
        json!({"b": 2})
    );
    // A null patch is empty.
    assert_eq!(apply(json!({"a": 1}), json!(null)), json!({"a": 1}));
}

#[test]
fn failing_operations_have_evanphx_messages() {
    let doc = json!({"spec": {"replicas": 1, "list": [1, 2]}});
    let cases = [
        (
            json!([{"op": "remove", "path": "/spec/x"}]),
            "error in remove for path: '/spec/x': Unable to remove nonexistent key: x: missing value",
        ),
        (
            json!([{"op": "remove", "path": "/nope/x"}]),
            "remove operation does not apply: doc is missing path: \"/nope/x\": missing value",
        ),
        (
            json!([{"op": "remove", "path": "/spec/list/5"}]),
            "error in remove for path: '/spec/list/5': Unable to access invalid index: 5: invalid index referenced",
        ),
        (
            json!([{"op": "replace", "path": "/spec/list/2", "value": 0}]),
            "replace operation does not apply: doc is missing key: /spec/list/2: missing value",
        ),
        (
            json!([{"op": "replace", "path": "/nope/x", "value": 0}]),
            "replace operation does not apply: doc is missing path: /nope/x: missing value",
        ),
        (
            json!([{"op": "add", "path": "/spec/list/x", "value": 0}]),
            "error in add for path: '/spec/list/x': value was not a proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        (
            json!([{"op": "add", "path": "/spec/list/3", "value": 0}]),
            "error in add for path: '/spec/list/3': Unable to access invalid index: 3: invalid index referenced",
        ),
        (
            json!([{"op": "move", "from": "/spec/nope", "path": "/spec/x"}]),
            "error in move for path: 'nope': Unable to remove nonexistent key: nope: missing value",
        ),
        (
            json!([{"op": "copy", "from": "/nope/a", "path": "/spec/x"}]),
            "copy operation does not apply: doc is missing from path: /nope/a: missing value",
        ),
        (
            json!([{"op": "test", "path": "/spec/replicas", "value": 2}]),
            "testing value /spec/replicas failed: test failed",
        ),
        (
            json!([{"op": "test", "path": "/nope/x", "value": 2}]),
            "test operation does not apply: is missing path: /nope/x: missing value",
        ),
        (
            json!([{"op": "frobnicate", "path": "/spec"}]),
            "Unexpected kind: frobnicate",
        ),
        (json!([{"path": "/spec"}]), "Unexpected kind: unknown"),
        (json!([null]), "Unexpected kind: unknown"),
        (
            json!([{"op": "add", "value": 1}]),
            "add operation failed to decode path: missing value",
        ),
        (
            json!([{"op": "replace", "value": 1}]),
            "replace operation failed to decode path: operation missing path field: missing value",
        ),
        (
            json!([{"op": "move", "path": "/a"}]),
            "move operation failed to decode from: operation, missing from field: missing value",
        ),
    ];
    for (patch, message) in cases {
        assert_eq!(
            error(doc.clone(), patch.clone()).to_string(),
            message,
            "{patch}"
        );
    }
    // The failing operation is located.
    let e = error(
        doc,
        json!([{"op": "test", "path": "/spec/replicas", "value": 1}, {"op": "remove", "path": "/spec/x"}]),
    );
    assert!(matches!(e, PatchError::JsonPatchOperation { index: 1, ref op, .. } if op == "remove"));
    assert_eq!(e.path(), Some("/spec/x"));
}

#[test]
fn undecodable_patches() {
    let e = error(json!({}), json!({"op": "add"}));
    assert_eq!(
        e.to_string(),
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
    );
    assert_eq!(e.kubernetes_status_code(), 400);
    assert_eq!(
        error(json!({}), json!(["add"])).to_string(),
        "json: cannot unmarshal string into Go value of type jsonpatch.Operation"
    );
    let too_many = Value::Array(vec![
        json!({"op": "test", "path": "/a", "value": null});
        MAX_JSON_PATCH_OPERATIONS + 1
    ]);
    let e = error(json!({}), too_many);
    assert_eq!(
        e.to_string(),
        "The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    assert_eq!(e.kubernetes_status_code(), 413);
}
