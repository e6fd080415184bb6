//! Strategic merge patch on built-in kinds, checked against kube-apiserver's behaviour
//! (`k8s.io/apimachinery/pkg/util/strategicpatch`).

use std::sync::Arc;

use konverge_apimachinery::patch::{
    FieldSchema, PatchError, PatchSchema, PatchStrategy, TypeSchema, apply_strategic_merge_patch,
    apply_strategic_merge_patch_with_schema,
};
use serde_json::{Value, json};

fn smp(group: &str, kind: &str, original: Value, patch: Value) -> Value {
    apply_strategic_merge_patch(&original, &patch, group, kind)
        .unwrap_or_else(|e| panic!("patch {patch} failed: {e}"))
}

fn smp_error(group: &str, kind: &str, original: Value, patch: Value) -> PatchError {
    match apply_strategic_merge_patch(&original, &patch, group, kind) {
        Ok(v) => panic!("patch {patch} should fail, got {v}"),
        Err(e) => e,
    }
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "labels": {"app": "web", "tier": "front"},
            "finalizers": ["a.example.com/x", "b.example.com/y"],
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u1"}
            ]
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "app:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                },
                {"name": "sidecar", "image": "sidecar:1"}
            ],
            "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
            "volumes": [{"name": "data", "emptyDir": {}}]
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "True"}
            ]
        }
    })
}

#[test]
fn containers_merge_by_name() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}}),
    );
    let containers = &patched["spec"]["containers"];
    assert_eq!(containers[0]["image"], "app:2");
    assert_eq!(containers[0]["env"], pod()["spec"]["containers"][0]["env"]);
    assert_eq!(
        containers[1],
        json!({"name": "sidecar", "image": "sidecar:1"})
    );
    assert_eq!(containers.as_array().map(Vec::len), Some(2));
}

#[test]
fn new_list_elements_are_added() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "debug", "image": "busybox"}]}}),
    );
    let names: Vec<&str> = patched["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // As in Kubernetes, an element the list did not have goes before the remaining ones.
    assert_eq!(names, ["debug", "app", "sidecar"]);
}

#[test]
fn env_ports_and_mounts_merge_by_their_keys() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{
            "name": "app",
            "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
            "ports": [{"containerPort": 443}],
            "volumeMounts": [{"mountPath": "/data", "readOnly": true}]
        }]}}),
    );
    let app = &patched["spec"]["containers"][0];
    assert_eq!(
        app["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}])
    );
    assert_eq!(
        app["ports"],
        json!([{"containerPort": 443}, {"containerPort": 80, "protocol": "TCP"}])
    );
    assert_eq!(
        app["volumeMounts"],
        json!([{"name": "data", "mountPath": "/data", "readOnly": true}])
    );
}

#[test]
fn delete_directive_removes_a_list_element() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [
            {"name": "sidecar", "$patch": "delete"},
            {"name": "app", "env": [{"name": "A", "$patch": "delete"}]}
        ]}}),
    );
    let containers = patched["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0]["name"], "app");
    assert_eq!(containers[0]["env"], json!([{"name": "B", "value": "2"}]));
}

#[test]
fn replace_directive_replaces_a_whole_list() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "only", "image": "only:1"}, {"$patch": "replace"}]}}),
    );
    assert_eq!(
        patched["spec"]["containers"],
        json!([{"name": "only", "image": "only:1"}])
    );
}

#[test]
fn replace_and_delete_directives_on_maps() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"labels": {"$patch": "replace", "new": "1"}}}),
    );
    assert_eq!(patched["metadata"]["labels"], json!({"new": "1"}));
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"labels": {"$patch": "delete"}}}),
    );
    assert_eq!(patched["metadata"]["labels"], json!({}));
    assert_eq!(patched["metadata"]["name"], "web");
}

#[test]
fn null_deletes_a_map_key() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"labels": {"tier": null, "new": "x"}}}),
    );
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "web", "new": "x"})
    );
    // A null for an absent key is ignored, and nulls inside new values are dropped.
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"annotations": {"a": "1", "b": null}}, "spec": {"nope": null}}),
    );
    assert_eq!(patched["metadata"]["annotations"], json!({"a": "1"}));
    assert!(patched["spec"].get("nope").is_none());
}

#[test]
fn lists_without_strategy_are_replaced() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"spec": {"tolerations": [{"key": "c", "operator": "Exists"}]}}),
    );
    assert_eq!(
        patched["spec"]["tolerations"],
        json!([{"key": "c", "operator": "Exists"}])
    );
}

#[test]
fn set_element_order_orders_and_is_not_stored() {
    let original = json!({"metadata": {"name": "x"}, "spec": {"containers": [
        {"name": "a", "image": "a"}, {"name": "b", "image": "b"}, {"name": "c", "image": "c"}
    ]}});
    let patched = smp(
        "",
        "Pod",
        original,
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "a2"}]
        }}),
    );
    assert_eq!(
        patched["spec"],
        json!({"containers": [{"name": "c", "image": "c"}, {"name": "a", "image": "a2"}, {"name": "b", "image": "b"}]})
    );

    // As kubectl apply sends it: a finalizer list reordered with one addition.
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"metadata": {
            "$setElementOrder/finalizers": ["c.example.com/z", "b.example.com/y", "a.example.com/x"],
            "finalizers": ["c.example.com/z"]
        }}),
    );
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["c.example.com/z", "b.example.com/y", "a.example.com/x"])
    );
    assert!(!patched.to_string().contains("$setElementOrder"));
}

#[test]
fn set_element_order_with_deletions_orders_like_kubernetes() {
    // kubectl apply removing `a` and adding `c` while `d` was added by someone else. In
    // Kubernetes the deletion shifts the live list in place before it orders the elements
    // the patch does not mention, so `d` lands between `b` and `c`.
    let original = json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "image": "b"}, {"name": "d", "image": "d"}]}});
    let patched = smp(
        "",
        "Pod",
        original,
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}],
            "containers": [{"name": "c"}, {"$patch": "delete", "name": "a"}]
        }}),
    );
    assert_eq!(
        patched["spec"]["containers"],
        json!([{"name": "b", "image": "b"}, {"name": "d", "image": "d"}, {"name": "c"}])
    );
}

#[test]
fn set_element_order_must_agree_with_the_patch() {
    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "app"}],
            "containers": [{"name": "other", "image": "x"}]
        }}),
    );
    assert_eq!(
        e.to_string(),
        "The order in patch list:\n[map[image:x name:other]]\n doesn't match $setElementOrder list:\n[map[name:app]]\n"
    );
    assert_eq!(e.path(), Some("spec.containers"));
}

#[test]
fn delete_from_primitive_list() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/x"]}}),
    );
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["b.example.com/y"])
    );
    assert!(!patched.to_string().contains("deleteFromPrimitiveList"));

    // Deleting and adding in one patch.
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"metadata": {
            "$deleteFromPrimitiveList/finalizers": ["b.example.com/y"],
            "finalizers": ["c.example.com/z"]
        }}),
    );
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["c.example.com/z", "a.example.com/x"])
    );
}

#[test]
fn finalizers_merge_as_a_set_and_owner_references_by_uid() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"metadata": {
            "finalizers": ["b.example.com/y", "c.example.com/z"],
            "ownerReferences": [
                {"uid": "u1", "controller": true},
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u2"}
            ]
        }}),
    );
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["a.example.com/x", "b.example.com/y", "c.example.com/z"])
    );
    assert_eq!(
        patched["metadata"]["ownerReferences"],
        json!([
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u1", "controller": true},
            {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u2"}
        ])
    );
}

#[test]
fn conditions_merge_by_type() {
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}}),
    );
    assert_eq!(
        patched["status"]["conditions"],
        json!([
            {"type": "Ready", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "PodScheduled", "status": "True"}
        ])
    );
}

#[test]
fn deployment_reaches_pod_template_containers() {
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "app:1"}, {"name": "log", "image": "log:1"}]}
            }
        },
        "status": {"conditions": [{"type": "Available", "status": "True"}]}
    });
    let patched = smp(
        "apps",
        "Deployment",
        deployment,
        json!({"spec": {
            "replicas": 3,
            "template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}},
            "strategy": {"$retainKeys": ["type"], "type": "Recreate"}
        }}),
    );
    assert_eq!(patched["spec"]["replicas"], 3);
    assert_eq!(
        patched["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "app:2"}, {"name": "log", "image": "log:1"}])
    );
    assert_eq!(patched["spec"]["strategy"], json!({"type": "Recreate"}));
    assert_eq!(
        patched["spec"]["template"]["metadata"],
        json!({"labels": {"app": "web"}})
    );
}

#[test]
fn retain_keys_must_list_the_patched_fields() {
    let e = smp_error(
        "apps",
        "Deployment",
        json!({"spec": {"strategy": {"type": "RollingUpdate"}}}),
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}),
    );
    assert_eq!(e.to_string(), "invalid patch format of retainKeys");
    assert_eq!(e.path(), Some("spec.strategy"));
    assert_eq!(e.kubernetes_status_code(), 400);
}

#[test]
fn service_ports_merge_by_port() {
    let service = json!({"metadata": {"name": "s"}, "spec": {"ports": [
        {"name": "http", "port": 80, "targetPort": 8080},
        {"name": "https", "port": 443, "targetPort": 8443}
    ]}});
    let patched = smp(
        "",
        "Service",
        service,
        json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
    );
    assert_eq!(
        patched["spec"]["ports"],
        json!([{"name": "http", "port": 80, "targetPort": 9090}, {"name": "https", "port": 443, "targetPort": 8443}])
    );
}

#[test]
fn other_builtin_kinds() {
    // ConfigMap data merges like any map.
    let patched = smp(
        "",
        "ConfigMap",
        json!({"data": {"a": "1", "b": "2"}}),
        json!({"data": {"b": null, "c": "3"}}),
    );
    assert_eq!(patched["data"], json!({"a": "1", "c": "3"}));
    // Node addresses merge by type, podCIDRs as a set.
    let node = json!({"spec": {"podCIDRs": ["10.0.0.0/24"]}, "status": {"addresses": [{"type": "InternalIP", "address": "10.1.1.1"}]}});
    let patched = smp(
        "",
        "Node",
        node,
        json!({"spec": {"podCIDRs": ["fd00::/64"]}, "status": {"addresses": [{"type": "Hostname", "address": "n1"}]}}),
    );
    assert_eq!(
        patched["spec"]["podCIDRs"],
        json!(["fd00::/64", "10.0.0.0/24"])
    );
    assert_eq!(
        patched["status"]["addresses"].as_array().map(Vec::len),
        Some(2)
    );
    // A Job's pod template; a CronJob's job template.
    let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}}}}});
    let patched = smp(
        "batch",
        "CronJob",
        cron,
        json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "2"}]}}}}}}),
    );
    assert_eq!(
        patched["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"],
        json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}])
    );
    // RBAC rules are atomic.
    let patched = smp(
        "rbac.authorization.k8s.io",
        "Role",
        json!({"rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]}),
        json!({"rules": [{"verbs": ["watch"]}]}),
    );
    assert_eq!(patched["rules"], json!([{"verbs": ["watch"]}]));
    // A PodDisruptionBudget's selector is replaced whole.
    let patched = smp(
        "policy",
        "PodDisruptionBudget",
        json!({"spec": {"selector": {"matchLabels": {"a": "1"}}}}),
        json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}}),
    );
    assert_eq!(
        patched["spec"]["selector"],
        json!({"matchLabels": {"b": "2"}})
    );
}

#[test]
fn custom_resources_are_not_supported() {
    let e = smp_error(
        "example.com",
        "Widget",
        json!({"spec": {}}),
        json!({"spec": {"a": 1}}),
    );
    assert_eq!(e, PatchError::StrategicMergePatchUnsupported);
    assert_eq!(
        e.to_string(),
        "strategic merge patch format is not supported"
    );
    assert_eq!(e.kubernetes_status_code(), 415);
    assert_eq!(
        apply_strategic_merge_patch_with_schema(&json!({}), &json!({}), None),
        Err(PatchError::StrategicMergePatchUnsupported)
    );
}

#[test]
fn malformed_patches() {
    let e = smp_error("", "Pod", pod(), json!([{"op": "add"}]));
    assert_eq!(
        e.to_string(),
        "json: cannot unmarshal array into Go value of type map[string]interface {}"
    );
    assert_eq!(e.kubernetes_status_code(), 400);

    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"image": "nginx:2"}]}}),
    );
    assert_eq!(
        e.to_string(),
        "map: map[image:nginx:2] does not contain declared merge key: name"
    );
    assert_eq!(e.path(), Some("spec.containers"));

    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"$patch": "delete"}]}}),
    );
    assert_eq!(
        e.to_string(),
        "map: map[$patch:delete] does not contain declared merge key: name"
    );

    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "app", "$patch": "merge"}]}}),
    );
    assert_eq!(
        e.to_string(),
        "merging lists cannot yet be specified in the patch"
    );

    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "app", "$patch": "frobnicate"}]}}),
    );
    assert_eq!(
        e.to_string(),
        "unknown patch type: frobnicate in map: map[$patch:frobnicate name:app]"
    );

    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"labels": {"$patch": "merge"}}}),
    );
    assert_eq!(
        e.to_string(),
        "unknown patch type: merge in map: map[$patch:merge]"
    );

    let e = smp_error("", "Pod", pod(), json!({"spec": {"containers": ["app"]}}));
    assert_eq!(
        e.to_string(),
        "list element types are not identical: [[map[env:[map[name:A value:1] map[name:B value:2]] image:app:1 name:app ports:[map[containerPort:80 protocol:TCP]] volumeMounts:[map[mountPath:/data name:data]]] map[image:sidecar:1 name:sidecar]] [app]]"
    );

    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"finalizers": [["a"]]}}),
    );
    assert_eq!(
        e.to_string(),
        "list element types are not identical: [[a.example.com/x b.example.com/y] [[a]]]"
    );
    let e = smp_error(
        "",
        "Pod",
        json!({"metadata": {"finalizers": [["a"]]}}),
        json!({"metadata": {"finalizers": [["b"]]}}),
    );
    assert_eq!(e.to_string(), "lists of lists are not supported");
    assert_eq!(e.kubernetes_status_code(), 422);

    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"$deleteFromPrimitiveList": ["x"]}}),
    );
    assert_eq!(e.to_string(), "invalid patch format of primitive list");
    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"$setElementOrder": ["x"]}}),
    );
    assert_eq!(
        e.to_string(),
        "invalid patch format of setElementOrder list"
    );
    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"$retainKeys": "name"}}),
    );
    assert_eq!(e.to_string(), "invalid patch format of retainKeys");
    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"metadata": {"$setElementOrder/finalizers": "x"}}),
    );
    assert_eq!(
        e.to_string(),
        "expected a []interface {}, but received a string"
    );

    let e = smp_error(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{"name": "app", "$frobnicate": 1}]}}),
    );
    assert_eq!(
        e,
        PatchError::UnknownDirective {
            path: "spec.containers[0].$frobnicate".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "strict decoding error: unknown field \"spec.containers[0].$frobnicate\""
    );

    assert_eq!(
        smp_error("", "Pod", json!([]), json!({})),
        PatchError::InvalidDocument
    );
}

#[test]
fn null_patch_changes_nothing() {
    assert_eq!(smp("", "Pod", pod(), json!(null)), pod());
    assert_eq!(smp("", "Pod", pod(), json!({})), pod());
}

#[test]
fn directives_in_new_values_are_not_stored() {
    // A new container carrying nested directives: they never reach the object.
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"spec": {"containers": [{
            "name": "new",
            "$setElementOrder/env": [{"name": "X"}],
            "env": [{"name": "X", "value": "1"}]
        }]}}),
    );
    assert_eq!(
        patched["spec"]["containers"][0],
        json!({"name": "new", "env": [{"name": "X", "value": "1"}]})
    );
    // A new map with `$patch` disappears, as in Kubernetes.
    let patched = smp(
        "",
        "Pod",
        pod(),
        json!({"spec": {"securityContext": {"$patch": "replace", "runAsUser": 1}}}),
    );
    assert!(patched["spec"].get("securityContext").is_none());
}

#[test]
fn custom_schemas() {
    let widget = Arc::new(TypeSchema::kind("Widget").with_field(
        "spec",
        FieldSchema::object(Arc::new(
            TypeSchema::new("WidgetSpec").with_field("parts", FieldSchema::merge_list("id")),
        )),
    ));
    let mut schemas = PatchSchema::new();
    schemas.register("example.com", "Widget", widget);
    let schema = schemas
        .lookup_api_version("example.com/v1", "Widget")
        .unwrap();
    assert_eq!(
        schema.field("spec").map(FieldSchema::strategy),
        Some(PatchStrategy::Default)
    );
    let patched = apply_strategic_merge_patch_with_schema(
        &json!({"metadata": {"finalizers": ["a"]}, "spec": {"parts": [{"id": 1, "n": "a"}, {"id": 2, "n": "b"}]}}),
        &json!({"metadata": {"finalizers": ["b"]}, "spec": {"parts": [{"id": 2, "n": "c"}]}}),
        Some(schema),
    )
    .unwrap();
    assert_eq!(
        patched,
        json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {"parts": [{"id": 1, "n": "a"}, {"id": 2, "n": "c"}]}})
    );
}

#[test]
fn builtin_lookup() {
    let builtin = PatchSchema::builtin();
    for (group, kind) in [
        ("", "Pod"),
        ("core", "Pod"),
        ("", "PodTemplate"),
        ("", "Service"),
        ("", "ConfigMap"),
        ("", "Secret"),
        ("", "ServiceAccount"),
        ("", "Namespace"),
        ("", "Node"),
        ("", "Endpoints"),
        ("", "Event"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
        ("coordination.k8s.io", "Lease"),
        ("rbac.authorization.k8s.io", "Role"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "RoleBinding"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ] {
        assert!(builtin.lookup(group, kind).is_some(), "{group}/{kind}");
    }
    assert!(
        builtin
            .lookup_api_version("apps/v1", "Deployment")
            .is_some()
    );
    assert!(builtin.lookup_api_version("v1", "Pod").is_some());
    assert!(builtin.lookup("", "Widget").is_none());
}
