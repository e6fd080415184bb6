//! Server-side apply: field sets, managed fields, merge, conflicts, force, shared ownership,
//! removal and Update tracking, checked against Kubernetes' exact output.

use konverge_apimachinery::patch::PatchSchema;
use konverge_apimachinery::ssa::{
    ApplyError, FieldSet, ManagedFields, Request, Shape, apply, update,
};
use serde_json::{Value, json};

const AV: &str = "example.com/v1";

fn shape() -> Shape {
    Shape::from_openapi_v3(&json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "color": {"type": "string"},
                "args": {"type": "array", "items": {"type": "string"}},
                "tags": {"type": "array", "items": {"type": "string"},
                         "x-kubernetes-list-type": "set"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {
                              "name": {"type": "string"},
                              "port": {"type": "integer"},
                              "protocol": {"type": "string"}}}}
            }},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
        }
    }))
}

fn req<'a>(manager: &'a str, now: &'a str) -> Request<'a> {
    Request {
        manager,
        api_version: AV,
        subresource: None,
        now,
        force: false,
    }
}

fn widget(spec: Value) -> Value {
    json!({"apiVersion": AV, "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

fn mf(obj: &Value) -> Value {
    obj["metadata"]["managedFields"].clone()
}

fn fields_of(obj: &Value, manager: &str) -> String {
    let m = ManagedFields::from_object(obj).unwrap();
    let e =
        m.0.iter()
            .find(|e| e.manager == manager)
            .expect("manager entry");
    e.fields.to_fields_v1_json()
}

fn managers(obj: &Value) -> Vec<String> {
    ManagedFields::from_object(obj)
        .unwrap()
        .sorted()
        .iter()
        .map(|e| e.manager.clone())
        .collect()
}

fn apply_ok(live: Option<&Value>, config: Value, r: Request<'_>) -> Value {
    apply(&shape(), live, &config, &r).unwrap()
}

#[test]
fn fields_v1_round_trips_byte_for_byte() {
    let text = r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\",\"port\":80}":{".":{},"f:image":{}}},"f:finalizers":{"v:1":{},"v:\"a\"":{}},"f:items":{"i:9":{},"i:10":{}}}}"#;
    let value: Value = serde_json::from_str(text).unwrap();
    let set = FieldSet::from_fields_v1(&value).unwrap();
    assert_eq!(set.to_fields_v1_json(), text);
    assert_eq!(set.to_fields_v1(), value);
    let paths: Vec<String> = set.paths().iter().map(|p| p.to_string()).collect();
    assert_eq!(
        paths,
        [
            ".metadata.labels",
            ".metadata.labels.app",
            ".spec.containers[name=\"nginx\",port=80]",
            ".spec.containers[name=\"nginx\",port=80].image",
            ".spec.finalizers[=1]",
            ".spec.finalizers[=\"a\"]",
            ".spec.items[9]",
            ".spec.items[10]",
        ]
    );
}

#[test]
fn fields_v1_decoding_errors_are_worded_as_kubernetes() {
    let err = FieldSet::from_fields_v1(&json!({"x": {}})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "parsing key as path element: key must be 2 characters long:"
    );
    let err = FieldSet::from_fields_v1(&json!({"fx": {}})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "parsing key as path element: missing colon: fx"
    );
    // Unknown element types are skipped.
    let set = FieldSet::from_fields_v1(&json!({"z:x": {}, "f:a": {}})).unwrap();
    assert_eq!(set.to_fields_v1_json(), r#"{"f:a":{}}"#);
}

#[test]
fn apply_creates_and_records_the_applied_fields() {
    let config = json!({"apiVersion": AV, "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns", "labels": {"app": "x"}},
        "spec": {"replicas": 1, "args": ["x"], "tags": ["a"], "ports": [{"name": "http", "port": 80}]}});
    let out = apply_ok(None, config.clone(), req("alice", "2024-01-01T00:00:00Z"));
    let mut expected = config.clone();
    expected["metadata"]["managedFields"] = json!([{
        "manager": "alice", "operation": "Apply", "apiVersion": AV,
        "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:args": {}, "f:ports": {"k:{\"name\":\"http\"}": {".": {}, "f:name": {}, "f:port": {}}},
                       "f:replicas": {}, "f:tags": {"v:\"a\"": {}}}}
    }]);
    assert_eq!(out, expected);
}

#[test]
fn one_conflict_message_and_cause() {
    let live = apply_ok(None, widget(json!({"replicas": 1})), req("alice", "T1"));
    let err = apply(
        &shape(),
        Some(&live),
        &widget(json!({"replicas": 2})),
        &req("bob", "T2"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
    );
    assert_eq!(err.status_code(), 409);
    let ApplyError::Conflicts(conflicts) = err else {
        panic!()
    };
    assert_eq!(conflicts[0].field, ".spec.replicas");
    assert_eq!(conflicts[0].message(), "conflict with \"alice\"");
}

#[test]
fn several_conflicts_are_grouped_by_manager() {
    let live = apply_ok(
        None,
        widget(json!({"replicas": 1, "ports": [{"name": "http", "port": 80}]})),
        req("alice", "T1"),
    );
    let mut edited = live.clone();
    edited["spec"]["color"] = json!("blue");
    let live = update(&shape(), Some(&live), &edited, &req("kubectl-edit", "T2")).unwrap();
    let config =
        widget(json!({"replicas": 2, "color": "red", "ports": [{"name": "http", "port": 81}]}));
    let err = apply(&shape(), Some(&live), &config, &req("bob", "T3")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 3 conflicts: conflicts with \"alice\":\n- .spec.replicas\n\
         - .spec.ports[name=\"http\"].port\nconflicts with \"kubectl-edit\" using example.com/v1:\n\
         - .spec.color"
    );
    let ApplyError::Conflicts(conflicts) = err else {
        panic!()
    };
    let causes: Vec<(String, String)> = conflicts
        .iter()
        .map(|c| (c.message(), c.field.clone()))
        .collect();
    assert_eq!(
        causes,
        [
            (
                "conflict with \"alice\"".to_string(),
                ".spec.replicas".to_string()
            ),
            (
                "conflict with \"alice\"".to_string(),
                ".spec.ports[name=\"http\"].port".to_string()
            ),
            (
                "conflict with \"kubectl-edit\" using example.com/v1".to_string(),
                ".spec.color".to_string()
            ),
        ]
    );
}

#[test]
fn force_takes_ownership() {
    let live = apply_ok(
        None,
        widget(json!({"replicas": 1, "color": "blue"})),
        req("alice", "T1"),
    );
    let mut r = req("bob", "T2");
    r.force = true;
    let out = apply_ok(Some(&live), widget(json!({"replicas": 2})), r);
    assert_eq!(out["spec"], json!({"replicas": 2, "color": "blue"}));
    assert_eq!(fields_of(&out, "alice"), r#"{"f:spec":{"f:color":{}}}"#);
    assert_eq!(fields_of(&out, "bob"), r#"{"f:spec":{"f:replicas":{}}}"#);
}

#[test]
fn same_value_is_shared_without_conflict() {
    let live = apply_ok(None, widget(json!({"replicas": 1})), req("alice", "T1"));
    let out = apply_ok(
        Some(&live),
        widget(json!({"replicas": 1})),
        req("bob", "T2"),
    );
    assert_eq!(fields_of(&out, "alice"), r#"{"f:spec":{"f:replicas":{}}}"#);
    assert_eq!(fields_of(&out, "bob"), r#"{"f:spec":{"f:replicas":{}}}"#);
    // The object did not change: bob's entry has no time.
    assert_eq!(
        mf(&out)[1],
        json!({"manager": "bob", "operation": "Apply", "apiVersion": AV,
               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}})
    );
}

#[test]
fn a_field_no_longer_applied_is_removed_unless_co_owned() {
    let live = apply_ok(
        None,
        widget(json!({"replicas": 1, "color": "blue"})),
        req("alice", "T1"),
    );
    let out = apply_ok(
        Some(&live),
        widget(json!({"replicas": 1})),
        req("alice", "T2"),
    );
    assert_eq!(out["spec"], json!({"replicas": 1}));

    let shared = apply_ok(
        Some(&live),
        widget(json!({"color": "blue"})),
        req("bob", "T2"),
    );
    let out = apply_ok(
        Some(&shared),
        widget(json!({"replicas": 1})),
        req("alice", "T3"),
    );
    assert_eq!(out["spec"], json!({"replicas": 1, "color": "blue"}));
    assert_eq!(fields_of(&out, "alice"), r#"{"f:spec":{"f:replicas":{}}}"#);
    assert_eq!(fields_of(&out, "bob"), r#"{"f:spec":{"f:color":{}}}"#);
}

#[test]
fn map_list_items_and_nested_fields_are_removed() {
    let ports =
        json!([{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "https", "port": 443}]);
    let live = apply_ok(None, widget(json!({"ports": ports})), req("alice", "T1"));
    let out = apply_ok(
        Some(&live),
        widget(json!({"ports": [{"name": "http", "port": 80}]})),
        req("alice", "T2"),
    );
    assert_eq!(
        out["spec"],
        json!({"ports": [{"name": "http", "port": 80}]})
    );
    assert_eq!(
        fields_of(&out, "alice"),
        r#"{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{".":{},"f:name":{},"f:port":{}}}}}"#
    );
}

#[test]
fn map_list_items_merge_by_key_in_order() {
    let live = apply_ok(
        None,
        widget(json!({"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]})),
        req("alice", "T1"),
    );
    let out = apply_ok(
        Some(&live),
        widget(json!({"ports": [{"name": "c", "port": 3}, {"name": "b", "protocol": "UDP"}]})),
        req("bob", "T2"),
    );
    assert_eq!(
        out["spec"]["ports"],
        json!([{"name": "a", "port": 1}, {"name": "c", "port": 3},
               {"name": "b", "port": 2, "protocol": "UDP"}])
    );
}

#[test]
fn set_lists_union_their_items() {
    let live = apply_ok(None, widget(json!({"tags": ["a"]})), req("alice", "T1"));
    let out = apply_ok(
        Some(&live),
        widget(json!({"tags": ["b"]})),
        req("bob", "T2"),
    );
    assert_eq!(out["spec"]["tags"], json!(["a", "b"]));
    assert_eq!(
        fields_of(&out, "bob"),
        r#"{"f:spec":{"f:tags":{"v:\"b\"":{}}}}"#
    );
}

#[test]
fn atomic_lists_conflict_and_are_replaced() {
    let live = apply_ok(
        None,
        widget(json!({"args": ["x", "y"]})),
        req("alice", "T1"),
    );
    let err = apply(
        &shape(),
        Some(&live),
        &widget(json!({"args": ["z"]})),
        &req("bob", "T2"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.args"
    );
    let mut r = req("bob", "T2");
    r.force = true;
    let out = apply_ok(Some(&live), widget(json!({"args": ["z"]})), r);
    assert_eq!(out["spec"]["args"], json!(["z"]));
    assert_eq!(managers(&out), ["bob"]);
}

#[test]
fn update_tracks_changed_fields_and_later_applies_conflict() {
    let created = update(
        &shape(),
        None,
        &widget(json!({"replicas": 1})),
        &req("kubectl-create", "T1"),
    )
    .unwrap();
    assert_eq!(
        mf(&created),
        json!([{"manager": "kubectl-create", "operation": "Update", "apiVersion": AV,
                "time": "T1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {".": {}, "f:replicas": {}}}}])
    );
    let live = apply_ok(
        Some(&created),
        widget(json!({"color": "red"})),
        req("alice", "T2"),
    );
    let mut edited = live.clone();
    edited["spec"]["color"] = json!("blue");
    let live = update(&shape(), Some(&live), &edited, &req("kubectl-edit", "T3")).unwrap();
    assert_eq!(managers(&live), ["kubectl-create", "kubectl-edit"]);
    assert_eq!(
        fields_of(&live, "kubectl-edit"),
        r#"{"f:spec":{"f:color":{}}}"#
    );
    let err = apply(
        &shape(),
        Some(&live),
        &widget(json!({"color": "green"})),
        &req("alice", "T4"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using example.com/v1: .spec.color"
    );
    // Removing a field drops it from every manager; empty managers disappear.
    let mut removed = live.clone();
    removed["spec"].as_object_mut().unwrap().remove("color");
    let out = update(&shape(), Some(&live), &removed, &req("kubectl-edit", "T5")).unwrap();
    assert_eq!(managers(&out), ["kubectl-create"]);
}

#[test]
fn update_takes_client_managed_fields_and_resets() {
    let live = apply_ok(None, widget(json!({"replicas": 1})), req("alice", "T1"));
    let mut new = live.clone();
    new["metadata"]["managedFields"] = json!([]);
    let out = update(&shape(), Some(&live), &new, &req("kubectl", "T2")).unwrap();
    assert!(out["metadata"].get("managedFields").is_none());
    new["metadata"]["managedFields"] = json!([{}]);
    let out = update(&shape(), Some(&live), &new, &req("kubectl", "T2")).unwrap();
    assert!(out["metadata"].get("managedFields").is_none());
}

#[test]
fn status_subresource_apply_is_its_own_entry() {
    let live = apply_ok(None, widget(json!({"replicas": 1})), req("alice", "T1"));
    let mut r = req("alice", "T2");
    r.subresource = Some("status");
    let config = json!({"apiVersion": AV, "kind": "Widget", "metadata": {"name": "w"},
                        "status": {"phase": "Ready"}});
    let out = apply(&shape(), Some(&live), &config, &r).unwrap();
    assert_eq!(
        mf(&out),
        json!([
            {"manager": "alice", "operation": "Apply", "apiVersion": AV, "time": "T1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "alice", "operation": "Apply", "apiVersion": AV, "time": "T2",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}},
             "subresource": "status"}
        ])
    );
    let err = apply(&shape(), Some(&out), &widget(json!({"replicas": 1})), &{
        let mut r = req("bob", "T3");
        r.subresource = Some("status");
        r
    });
    assert!(err.is_ok());
    let other = apply(
        &shape(),
        Some(&out),
        &config_with_phase("Failed"),
        &req("bob", "T3"),
    )
    .unwrap_err();
    assert_eq!(
        other.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\" with subresource \"status\": .status.phase"
    );
}

fn config_with_phase(phase: &str) -> Value {
    json!({"apiVersion": AV, "kind": "Widget", "metadata": {"name": "w"}, "status": {"phase": phase}})
}

#[test]
fn malformed_input_is_rejected_with_kubernetes_messages() {
    let s = shape();
    let r = req("alice", "T1");
    let err = apply(&s, None, &json!([1]), &r).unwrap_err();
    assert_eq!(
        err.to_string(),
        "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}"
    );
    let err = apply(
        &s,
        None,
        &json!({"apiVersion": AV, "metadata": {"name": "w"}}),
        &r,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid object type: example.com/v1, Kind="
    );
    assert_eq!(err.status_code(), 400);
    let err = apply(&s, None, &json!({"kind": "Widget"}), &r).unwrap_err();
    assert_eq!(err.to_string(), "invalid object type: /, Kind=Widget");
    let mut with_mf = widget(json!({}));
    with_mf["metadata"]["managedFields"] = json!([]);
    let err = apply(&s, None, &with_mf, &r).unwrap_err();
    assert_eq!(err.to_string(), "metadata.managedFields must be nil");

    let mut bad_live = widget(json!({"replicas": 1}));
    bad_live["metadata"]["managedFields"] =
        json!([{"manager": "x", "operation": "Patch", "apiVersion": AV, "fieldsType": "FieldsV1"}]);
    let err = apply(&s, Some(&bad_live), &widget(json!({})), &r).unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to decode managed fields: operation must be `Apply` or `Update`"
    );
    bad_live["metadata"]["managedFields"] =
        json!([{"manager": "x", "operation": "Apply", "apiVersion": AV}]);
    let err = ManagedFields::from_object(&bad_live).unwrap_err();
    assert_eq!(
        err.to_string(),
        "missing fieldsType in managed fields entry 0"
    );

    let err = apply(&s, None, &widget(json!({"ports": [{"port": 80}]})), &r).unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to create typed patch object (/w; example.com/v1, Kind=Widget): .spec.ports: \
         element 0: associative list with keys has an element that omits key field \"name\" \
         (and doesn't have default value)"
    );
    let err = apply(
        &s,
        None,
        &widget(json!({"ports": [{"name": "a"}, {"name": "a"}]})),
        &r,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to create typed patch object (/w; example.com/v1, Kind=Widget): .spec.ports: \
         duplicate entries for key [name=\"a\"]"
    );
}

#[test]
fn built_in_kinds_merge_containers_by_name() {
    let ts = PatchSchema::builtin().lookup("apps", "Deployment").unwrap();
    let s = Shape::from_patch_schema(ts);
    let dep = |image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}}})
    };
    let r = Request {
        api_version: "apps/v1",
        ..req("alice", "T1")
    };
    let live = apply(&s, None, &dep("nginx:1"), &r).unwrap();
    let r2 = Request {
        manager: "bob",
        ..r
    };
    let err = apply(&s, Some(&live), &dep("nginx:2"), &r2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\": \
         .spec.template.spec.containers[name=\"nginx\"].image"
    );
}

#[test]
fn built_in_kinds_key_lists_and_own_atomic_types_as_kubernetes_does() {
    let ts = PatchSchema::builtin().lookup("apps", "Deployment").unwrap();
    let s = Shape::from_patch_schema(ts);
    let dep = |labels: Value, ports: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "dns", "ownerReferences": [
                   {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u1"}]},
               "spec": {"selector": {"matchLabels": labels},
                        "template": {"spec": {
                            "nodeSelector": {"disk": "ssd"},
                            "containers": [{"name": "dns", "image": "coredns",
                                "ports": ports,
                                "env": [{"name": "PASS", "valueFrom":
                                    {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}}}})
    };
    let r = Request {
        api_version: "apps/v1",
        ..req("alice", "T1")
    };
    // 53/TCP (protocol left to its default) and 53/UDP are two ports: container ports are
    // keyed by containerPort and protocol, not by the merge key alone.
    let live = apply(
        &s,
        None,
        &dep(
            json!({"app": "dns"}),
            json!([{"containerPort": 53}, {"containerPort": 53, "protocol": "UDP"}]),
        ),
        &r,
    )
    .unwrap();
    let fields = fields_of(&live, "alice");
    for owned in [
        r#""k:{\"containerPort\":53,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}"#,
        r#""k:{\"containerPort\":53,\"protocol\":\"UDP\"}":{".":{},"f:containerPort":{},"f:protocol":{}}"#,
        // Atomic types are owned as one field.
        r#""f:selector":{}"#,
        r#""f:nodeSelector":{}"#,
        r#""f:secretKeyRef":{}"#,
        r#""k:{\"uid\":\"u1\"}":{}"#,
    ] {
        assert!(fields.contains(owned), "{owned} not in {fields}");
    }

    // Another manager adding a label to the selector conflicts on the whole selector.
    let r2 = Request {
        manager: "bob",
        ..r
    };
    let err = apply(
        &s,
        Some(&live),
        &dep(
            json!({"app": "dns", "tier": "infra"}),
            json!([{"containerPort": 53}, {"containerPort": 53, "protocol": "UDP"}]),
        ),
        &r2,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.selector"
    );

    // The same manager dropping the UDP port removes that port only.
    let live = apply(
        &s,
        Some(&live),
        &dep(json!({"app": "dns"}), json!([{"containerPort": 53}])),
        &r,
    )
    .unwrap();
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 53}])
    );
}

/// What `kubectl apply` (client-side) leaves: the object, recorded as an Update by
/// `kubectl-client-side-apply`, with the configuration in the last-applied annotation.
fn client_side_applied(spec: Value) -> Value {
    let mut config = widget(spec);
    let annotation = format!("{config}\n");
    config["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": annotation});
    update(
        &shape(),
        None,
        &config,
        &req("kubectl-client-side-apply", "T1"),
    )
    .unwrap()
}

#[test]
fn kubectl_server_side_apply_upgrades_client_side_apply() {
    let live = client_side_applied(json!({"replicas": 1, "color": "red"}));

    // Another manager changing a client-side applied field conflicts, as usual.
    let err = apply(
        &shape(),
        Some(&live),
        &widget(json!({"color": "blue"})),
        &req("alice", "T2"),
    )
    .unwrap_err();
    assert!(
        matches!(err, ApplyError::Conflicts(ref c) if c.len() == 1),
        "{err}"
    );

    // kubectl takes over the fields whose values are still the last-applied ones, and
    // rewrites the annotation to what it applied.
    let out = apply(
        &shape(),
        Some(&live),
        &widget(json!({"replicas": 1, "color": "blue"})),
        &req("kubectl", "T2"),
    )
    .unwrap();
    assert_eq!(out["spec"]["color"], "blue");
    assert_eq!(
        fields_of(&out, "kubectl"),
        r#"{"f:spec":{"f:color":{},"f:replicas":{}}}"#
    );
    assert_eq!(
        out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
        concat!(
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"#,
            r#""spec":{"color":"blue","replicas":1}}"#,
            "\n"
        )
    );

    // A field someone changed since the client-side apply is a real conflict.
    let mut edited = live.clone();
    edited["spec"]["replicas"] = json!(3);
    let live = update(&shape(), Some(&live), &edited, &req("kubectl-edit", "T3")).unwrap();
    let mut edited = live.clone();
    edited["spec"]["color"] = json!("green");
    let live = update(
        &shape(),
        Some(&live),
        &edited,
        &req("kubectl-client-side-apply", "T4"),
    )
    .unwrap();
    let err = apply(
        &shape(),
        Some(&live),
        &widget(json!({"replicas": 1, "color": "blue"})),
        &req("kubectl", "T5"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"kubectl-client-side-apply\" using \
         example.com/v1:\n- .spec.color\nconflicts with \"kubectl-edit\" using example.com/v1:\n\
         - .spec.replicas"
    );
}
