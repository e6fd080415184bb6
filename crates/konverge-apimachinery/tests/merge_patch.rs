//! JSON merge patch: the RFC 7386 appendix examples, with kube-apiserver's
//! (evanphx/json-patch v4) handling of non-object patches.

use konverge_apimachinery::patch::{PatchError, apply_merge_patch};
use serde_json::json;

#[test]
fn rfc7386_appendix_a() {
    let cases = [
        (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": "b"}),
            json!({"b": "c"}),
            json!({"a": "b", "b": "c"}),
        ),
        (json!({"a": "b"}), json!({"a": null}), json!({})),
        (
            json!({"a": "b", "b": "c"}),
            json!({"a": null}),
            json!({"b": "c"}),
        ),
        (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
        (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
        (
            json!({"a": {"b": "c"}}),
            json!({"a": {"b": "d", "c": null}}),
            json!({"a": {"b": "d"}}),
        ),
        (
            json!({"a": [{"b": "c"}]}),
            json!({"a": [1]}),
            json!({"a": [1]}),
        ),
        (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
        (json!({"a": "b"}), json!(["c"]), json!(["c"])),
        (
            json!({"e": null}),
            json!({"a": 1}),
            json!({"e": null, "a": 1}),
        ),
        (
            json!([1, 2]),
            json!({"a": "b", "c": null}),
            json!({"a": "b"}),
        ),
        (
            json!({}),
            json!({"a": {"bb": {"ccc": null}}}),
            json!({"a": {"bb": {}}}),
        ),
    ];
    for (doc, patch, want) in cases {
        assert_eq!(
            apply_merge_patch(&doc, &patch).unwrap(),
            want,
            "{doc} + {patch}"
        );
    }
}

#[test]
fn kubernetes_refuses_null_and_scalar_patches() {
    // RFC 7386 would make the document `null` or `"bar"`; kube-apiserver answers 400.
    for patch in [json!(null), json!("bar"), json!(1), json!(true)] {
        let e = apply_merge_patch(&json!({"a": "foo"}), &patch).unwrap_err();
        assert_eq!(e, PatchError::MergePatchInvalidPatch);
        assert_eq!(e.to_string(), "Invalid JSON Patch");
        assert_eq!(e.kubernetes_status_code(), 400);
    }
    assert_eq!(
        apply_merge_patch(&json!(null), &json!({}))
            .unwrap_err()
            .to_string(),
        "Invalid JSON Document"
    );
}

#[test]
fn objects_merge_and_lists_replace() {
    let deployment = json!({
        "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}}
    });
    let patched = apply_merge_patch(
        &deployment,
        &json!({
            "metadata": {"labels": {"tier": null, "new": "x"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}}
        }),
    )
    .unwrap();
    assert_eq!(
        patched,
        json!({
            "metadata": {"name": "web", "labels": {"app": "web", "new": "x"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}}
        })
    );
}

#[test]
fn nulls_are_pruned_from_new_values() {
    // Where there is nothing to merge with, nulls go, even inside lists (as in kube-apiserver).
    assert_eq!(
        apply_merge_patch(&json!({}), &json!({"a": [{"b": null, "c": 1}, null]})).unwrap(),
        json!({"a": [{"c": 1}, null]})
    );
}
