//! The encoder's answers read back with k8s-pb's prost types, as a Go client reads them:
//! lists, `Status` errors and watch frames (objects are checked byte for byte against
//! client-go in `tests/kubectl.rs`), and objects of every kind decoding to what was encoded.

mod support;

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message as _;
use serde_json::json;

/// The envelope of a protobuf body, checked.
fn unwrap(body: &[u8], api_version: &str, kind: &str) -> Vec<u8> {
    let rest = body.strip_prefix(b"k8s\0").expect("the k8s\\0 prefix");
    let unknown = Unknown::decode(rest).expect("a runtime.Unknown");
    let type_meta = unknown.type_meta.expect("typeMeta");
    assert_eq!(
        (type_meta.api_version.as_deref(), type_meta.kind.as_deref()),
        (Some(api_version), Some(kind))
    );
    unknown.raw.expect("raw")
}

#[test]
fn lists_read_back_as_their_list_message() {
    let items = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "5"}, "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
    ];
    let metadata = json!({"resourceVersion": "9", "continue": "next", "remainingItemCount": 3});
    let body = konverge_protobuf::encode_list("v1", "ConfigMapList", &metadata, items.iter())
        .expect("encodes");
    let list =
        core::ConfigMapList::decode(&*unwrap(&body, "v1", "ConfigMapList")).expect("decodes");
    let meta = list.metadata.expect("metadata");
    assert_eq!(meta.resource_version.as_deref(), Some("9"));
    assert_eq!(meta.r#continue.as_deref(), Some("next"));
    assert_eq!(meta.remaining_item_count, Some(3));
    let names: Vec<_> = list
        .items
        .iter()
        .map(|cm| {
            cm.metadata
                .as_ref()
                .and_then(|m| m.name.clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(list.items[0].data.get("k").map(String::as_str), Some("v"));

    // Items of a kind without an encoding are refused, not written half.
    assert!(
        konverge_protobuf::encode_list("example.com/v1", "WidgetList", &metadata, items.iter())
            .is_err()
    );
}

#[test]
fn a_list_written_in_pieces_is_the_list_written_whole() {
    // Item sizes around the varint boundaries of their lengths (127/128 bytes, 16 KiB), and
    // a list long enough that the envelope's own length takes three bytes.
    let items: Vec<_> = [0usize, 40, 60, 61, 62, 100, 16_300, 16_400, 20_000]
        .iter()
        .enumerate()
        .map(|(i, size)| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}")}, "data": {"k": "x".repeat(*size)}})
        })
        .collect();
    let metadata = json!({"resourceVersion": "9"});
    let whole = konverge_protobuf::encode_list("v1", "ConfigMapList", &metadata, items.iter())
        .expect("encodes");
    let messages: Vec<Vec<u8>> = items
        .iter()
        .map(|item| konverge_protobuf::encode_item(item).expect("encodes"))
        .collect();
    let mut pieces = konverge_protobuf::list_head(
        "v1",
        "ConfigMapList",
        &metadata,
        messages.iter().map(Vec::len),
    );
    for message in &messages {
        konverge_protobuf::list_item_prefix(message.len(), &mut pieces);
        pieces.extend_from_slice(message);
    }
    pieces.extend_from_slice(&konverge_protobuf::LIST_TAIL);
    assert_eq!(pieces, whole);
    let list =
        core::ConfigMapList::decode(&*unwrap(&pieces, "v1", "ConfigMapList")).expect("decodes");
    assert_eq!(list.items.len(), items.len());
    assert_eq!(list.items[7].data["k"].len(), 16_400);

    // An empty list too.
    let empty = konverge_protobuf::list_head("v1", "ConfigMapList", &metadata, [])
        .into_iter()
        .chain(konverge_protobuf::LIST_TAIL)
        .collect::<Vec<u8>>();
    let none: [serde_json::Value; 0] = [];
    assert_eq!(
        empty,
        konverge_protobuf::encode_list("v1", "ConfigMapList", &metadata, none.iter())
            .expect("encodes")
    );
}

#[test]
fn statuses_read_back_with_their_details_and_causes() {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "ConfigMap \"x\" is invalid: data[a b]: Invalid value: \"a b\": bad",
        "reason": "Invalid", "code": 422,
        "details": {"name": "x", "kind": "ConfigMap",
            "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: \"a b\": bad", "field": "data[a b]"}]},
    });
    let body = konverge_protobuf::encode_status(&status);
    let decoded = meta::Status::decode(&*unwrap(&body, "v1", "Status")).expect("decodes");
    assert_eq!(decoded.code, Some(422));
    assert_eq!(decoded.reason.as_deref(), Some("Invalid"));
    assert_eq!(decoded.status.as_deref(), Some("Failure"));
    assert_eq!(decoded.message.as_deref(), status["message"].as_str());
    let details = decoded.details.expect("details");
    assert_eq!(details.name.as_deref(), Some("x"));
    assert_eq!(details.causes.len(), 1);
    assert_eq!(details.causes[0].field.as_deref(), Some("data[a b]"));
    assert_eq!(
        details.causes[0].reason.as_deref(),
        Some("FieldValueInvalid")
    );
}

#[test]
fn watch_frames_carry_a_length_and_an_event_with_a_whole_body() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let object = konverge_protobuf::encode(&pod).expect("encodes");
    let frame = konverge_protobuf::watch_frame("ADDED", &object);
    let (length, event) = frame.split_at(4);
    assert_eq!(
        u32::from_be_bytes(length.try_into().unwrap()) as usize,
        event.len()
    );
    let event = meta::WatchEvent::decode(event).expect("a WatchEvent");
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let raw = event.object.and_then(|o| o.raw).expect("the object");
    assert_eq!(raw, object);
    let decoded = core::Pod::decode(&*unwrap(&raw, "v1", "Pod")).expect("a Pod");
    assert_eq!(
        decoded.spec.expect("spec").containers[0].image.as_deref(),
        Some("nginx")
    );
}

#[test]
fn every_kind_decodes_to_what_was_encoded() {
    for (api_version, kind) in konverge_protobuf::kinds() {
        let Some(api_version) = api_version else {
            continue;
        };
        let object = json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": "n", "namespace": "ns", "labels": {"a": "b"},
                "creationTimestamp": "2024-05-06T07:08:09Z", "resourceVersion": "12"},
        });
        let body = konverge_protobuf::encode(&object)
            .unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"));
        let (_, decoded) = konverge_protobuf::decode(&body)
            .unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"));
        assert_eq!(decoded["metadata"]["name"], "n", "{api_version} {kind}");
        assert_eq!(
            decoded["metadata"]["labels"]["a"], "b",
            "{api_version} {kind}"
        );
        assert_eq!(
            decoded["metadata"]["creationTimestamp"], "2024-05-06T07:08:09Z",
            "{api_version} {kind}"
        );
        // Encoding what was decoded gives the same bytes: nothing is lost either way.
        assert_eq!(
            konverge_protobuf::encode(&decoded).expect("re-encodes"),
            body,
            "{api_version} {kind}"
        );
    }
    // Wrong types are errors with the field path, not panics.
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 5}});
    let err = konverge_protobuf::encode(&bad).unwrap_err();
    assert_eq!(err.to_string(), "metadata.name: expected a string");
}
