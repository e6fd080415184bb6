//! Objects of every supported kind built with k8s-pb's prost types (as a client would),
//! encoded with prost inside the `runtime.Unknown` envelope, decoded, and compared with the
//! JSON the same object has in k8s-openapi (the expected JSON is also parsed into the
//! k8s-openapi type, and the decoded JSON must be accepted by it).
//!
//! prost writes `Some(zero)` fields like Go writes non-pointer fields, so the tests also
//! show which zero values Go's JSON keeps (pointers) and which it drops (`omitempty`).

mod support;

use k8s_openapi::api as oa;
use k8s_pb::api::{
    apps::v1 as apps, autoscaling::v1 as autoscaling, batch::v1 as batch,
    coordination::v1 as coordination, core::v1 as core, events::v1 as events, policy::v1 as policy,
    rbac::v1 as rbac,
};
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::RawExtension;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};
use support::{body, check, map, s, strings};

const T0: i64 = 1_700_000_000; // 2023-11-14T22:13:20Z

fn time(seconds: i64) -> Option<meta::Time> {
    Some(meta::Time {
        seconds: Some(seconds),
        nanos: Some(0),
    })
}

fn micro(seconds: i64, nanos: i32) -> Option<meta::MicroTime> {
    Some(meta::MicroTime {
        seconds: Some(seconds),
        nanos: Some(nanos),
    })
}

fn q(v: &str) -> Quantity {
    Quantity { string: s(v) }
}

fn int(v: i32) -> Option<IntOrString> {
    Some(IntOrString {
        r#type: Some(0),
        int_val: Some(v),
        str_val: s(""),
    })
}

fn string(v: &str) -> Option<IntOrString> {
    Some(IntOrString {
        r#type: Some(1),
        int_val: Some(0),
        str_val: s(v),
    })
}

/// ObjectMeta the way client-go writes it: every non-pointer field, zero or not.
fn object_meta(name: &str, namespace: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: s(name),
        generate_name: s(""),
        namespace: s(namespace),
        self_link: s(""),
        uid: s(""),
        resource_version: s(""),
        generation: Some(0),
        creation_timestamp: Some(meta::Time::default()),
        ..Default::default()
    })
}

fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    map(&pairs
        .iter()
        .map(|(k, v)| (*k, (*v).to_owned()))
        .collect::<Vec<_>>())
}

fn container(name: &str, image: &str) -> core::Container {
    core::Container {
        name: s(name),
        image: s(image),
        ..Default::default()
    }
}

fn pod_template(app: &str, containers: Vec<core::Container>) -> Option<core::PodTemplateSpec> {
    Some(core::PodTemplateSpec {
        metadata: Some(meta::ObjectMeta {
            labels: labels(&[("app", app)]),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers,
            ..Default::default()
        }),
    })
}

fn selector(app: &str) -> Option<meta::LabelSelector> {
    Some(meta::LabelSelector {
        match_labels: labels(&[("app", app)]),
        match_expressions: vec![],
    })
}

fn template_json(app: &str, image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}, "creationTimestamp": null},
        "spec": {"containers": [{"name": app, "image": image, "resources": {}}]}
    })
}

#[test]
fn deployment() {
    let pb = apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            labels: labels(&[("app", "web")]),
            annotations: labels(&[("note", "x")]),
            ..object_meta("web", "prod").unwrap()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: labels(&[("app", "web")]),
                match_expressions: vec![meta::LabelSelectorRequirement {
                    key: s("tier"),
                    operator: s("In"),
                    values: strings(&["a", "b"]),
                }],
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta {
                    labels: labels(&[("app", "web")]),
                    ..Default::default()
                }),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        command: strings(&["nginx"]),
                        args: strings(&["-g", "daemon off;"]),
                        ports: vec![core::ContainerPort {
                            name: s("http"),
                            host_port: Some(0),
                            container_port: Some(80),
                            protocol: s("TCP"),
                            host_ip: s(""),
                        }],
                        env: vec![
                            core::EnvVar {
                                name: s("A"),
                                value: s("1"),
                                value_from: None,
                            },
                            core::EnvVar {
                                name: s("FROM_CM"),
                                value: s(""),
                                value_from: Some(core::EnvVarSource {
                                    config_map_key_ref: Some(core::ConfigMapKeySelector {
                                        local_object_reference: Some(core::LocalObjectReference {
                                            name: s("settings"),
                                        }),
                                        key: s("level"),
                                        optional: Some(false),
                                    }),
                                    ..Default::default()
                                }),
                            },
                            core::EnvVar {
                                name: s("POD_IP"),
                                value: None,
                                value_from: Some(core::EnvVarSource {
                                    field_ref: Some(core::ObjectFieldSelector {
                                        api_version: s("v1"),
                                        field_path: s("status.podIP"),
                                    }),
                                    ..Default::default()
                                }),
                            },
                        ],
                        resources: Some(core::ResourceRequirements {
                            limits: map(&[("cpu", q("500m")), ("memory", q("128Mi"))]),
                            requests: map(&[("cpu", q("250m"))]),
                            claims: vec![],
                        }),
                        liveness_probe: Some(core::Probe {
                            handler: Some(core::ProbeHandler {
                                http_get: Some(core::HttpGetAction {
                                    path: s("/healthz"),
                                    port: string("http"),
                                    scheme: s("HTTP"),
                                    host: s(""),
                                    http_headers: vec![],
                                }),
                                ..Default::default()
                            }),
                            initial_delay_seconds: Some(5),
                            timeout_seconds: Some(0),
                            period_seconds: Some(10),
                            ..Default::default()
                        }),
                        readiness_probe: Some(core::Probe {
                            handler: Some(core::ProbeHandler {
                                tcp_socket: Some(core::TcpSocketAction {
                                    port: int(80),
                                    host: None,
                                }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        security_context: Some(core::SecurityContext {
                            run_as_user: Some(0),
                            allow_privilege_escalation: Some(false),
                            read_only_root_filesystem: Some(true),
                            capabilities: Some(core::Capabilities {
                                add: vec![],
                                drop: strings(&["ALL"]),
                            }),
                            ..Default::default()
                        }),
                        volume_mounts: vec![core::VolumeMount {
                            name: s("data"),
                            read_only: Some(true),
                            mount_path: s("/data"),
                            sub_path: s(""),
                            ..Default::default()
                        }],
                        termination_message_path: s(""),
                        image_pull_policy: s("IfNotPresent"),
                        stdin: Some(false),
                        tty: Some(false),
                        ..container("nginx", "nginx:1.27")
                    }],
                    volumes: vec![
                        core::Volume {
                            name: s("data"),
                            volume_source: Some(core::VolumeSource {
                                empty_dir: Some(core::EmptyDirVolumeSource {
                                    medium: s(""),
                                    size_limit: Some(q("1Gi")),
                                }),
                                ..Default::default()
                            }),
                        },
                        core::Volume {
                            name: s("cfg"),
                            volume_source: Some(core::VolumeSource {
                                config_map: Some(core::ConfigMapVolumeSource {
                                    local_object_reference: Some(core::LocalObjectReference {
                                        name: s("settings"),
                                    }),
                                    items: vec![core::KeyToPath {
                                        key: s("level"),
                                        path: s("level.txt"),
                                        mode: None,
                                    }],
                                    default_mode: Some(0o644),
                                    optional: None,
                                }),
                                ..Default::default()
                            }),
                        },
                    ],
                    termination_grace_period_seconds: Some(0),
                    automount_service_account_token: Some(false),
                    node_selector: labels(&[("disk", "ssd")]),
                    tolerations: vec![core::Toleration {
                        key: s("dedicated"),
                        operator: s("Exists"),
                        value: s(""),
                        effect: s("NoSchedule"),
                        toleration_seconds: Some(30),
                    }],
                    host_network: Some(false),
                    restart_policy: s(""),
                    dns_policy: s("ClusterFirst"),
                    ..Default::default()
                }),
            }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(apps::RollingUpdateDeployment {
                    max_unavailable: string("25%"),
                    max_surge: int(1),
                }),
            }),
            min_ready_seconds: Some(0),
            revision_history_limit: Some(0),
            paused: Some(false),
            progress_deadline_seconds: Some(600),
        }),
        status: None,
    };
    let expected = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "prod",
            "creationTimestamp": null,
            "labels": {"app": "web"},
            "annotations": {"note": "x"}
        },
        "spec": {
            "replicas": 0,
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]
            },
            "template": {
                "metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                "spec": {
                    "containers": [{
                        "name": "nginx",
                        "image": "nginx:1.27",
                        "command": ["nginx"],
                        "args": ["-g", "daemon off;"],
                        "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                        "env": [
                            {"name": "A", "value": "1"},
                            {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {
                                "name": "settings", "key": "level", "optional": false
                            }}},
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {
                                "apiVersion": "v1", "fieldPath": "status.podIP"
                            }}}
                        ],
                        "resources": {
                            "limits": {"cpu": "500m", "memory": "128Mi"},
                            "requests": {"cpu": "250m"}
                        },
                        "livenessProbe": {
                            "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                            "initialDelaySeconds": 5,
                            "periodSeconds": 10
                        },
                        "readinessProbe": {"tcpSocket": {"port": 80}},
                        "securityContext": {
                            "runAsUser": 0,
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]}
                        },
                        "volumeMounts": [{"name": "data", "readOnly": true, "mountPath": "/data"}],
                        "imagePullPolicy": "IfNotPresent"
                    }],
                    "volumes": [
                        {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "cfg", "configMap": {
                            "name": "settings",
                            "items": [{"key": "level", "path": "level.txt"}],
                            "defaultMode": 420
                        }}
                    ],
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": false,
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{
                        "key": "dedicated", "operator": "Exists", "effect": "NoSchedule",
                        "tolerationSeconds": 30
                    }],
                    "dnsPolicy": "ClusterFirst"
                }
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}
            },
            "revisionHistoryLimit": 0,
            "progressDeadlineSeconds": 600
        },
        "status": {}
    });
    let decoded = check::<oa::apps::v1::Deployment>(&body("apps/v1", "Deployment", &pb), expected);
    // Go's JSON exactly: zero non-pointer omitempty fields are gone, zero pointers stay, the
    // Go zero values of unset non-pointer structs are there.
    let container = &decoded["spec"]["template"]["spec"]["containers"][0];
    for absent in ["stdin", "tty", "terminationMessagePath", "workingDir"] {
        assert!(container.get(absent).is_none(), "{absent}");
    }
    assert!(container["ports"][0].get("hostPort").is_none());
    assert!(container["ports"][0].get("hostIP").is_none());
    assert!(container["livenessProbe"].get("timeoutSeconds").is_none());
    assert!(container["env"][1].get("value").is_none());
    let spec = &decoded["spec"]["template"]["spec"];
    assert!(spec.get("hostNetwork").is_none() && spec.get("restartPolicy").is_none());
    assert!(decoded["spec"].get("minReadySeconds").is_none());
    assert!(decoded["spec"].get("paused").is_none());
    assert_eq!(decoded["spec"]["replicas"], 0);
    assert_eq!(container["securityContext"]["runAsUser"], 0);
    assert_eq!(spec["volumes"][0]["emptyDir"], json!({"sizeLimit": "1Gi"}));
    assert_eq!(decoded["status"], json!({}));
    assert_eq!(decoded["metadata"]["creationTimestamp"], Value::Null);
    assert_eq!(
        decoded["metadata"].as_object().unwrap().len(),
        5,
        "{}",
        decoded["metadata"]
    );
}

#[test]
fn secret_with_binary_data() {
    let pb = core::Secret {
        metadata: object_meta("creds", "default"),
        immutable: Some(true),
        data: map(&[
            ("bin", vec![0, 255, 1, 2]),
            ("text", b"hello".to_vec()),
            ("empty", vec![]),
        ]),
        string_data: labels(&[("plain", "text")]),
        r#type: s("Opaque"),
    };
    let expected = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default", "creationTimestamp": null},
        "immutable": true,
        "data": {"bin": "AP8BAg==", "text": "aGVsbG8=", "empty": ""},
        "stringData": {"plain": "text"},
        "type": "Opaque"
    });
    check::<oa::core::v1::Secret>(&body("v1", "Secret", &pb), expected);
}

#[test]
fn config_map_with_binary_data() {
    let pb = core::ConfigMap {
        metadata: object_meta("cfg", "default"),
        immutable: Some(false),
        data: labels(&[("a", "1"), ("unicode", "héllo ✓")]),
        binary_data: map(&[("blob", vec![0xde, 0xad, 0xbe, 0xef])]),
    };
    let expected = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": "default", "creationTimestamp": null},
        "immutable": false,
        "data": {"a": "1", "unicode": "héllo ✓"},
        "binaryData": {"blob": "3q2+7w=="}
    });
    check::<oa::core::v1::ConfigMap>(&body("v1", "ConfigMap", &pb), expected);
}

#[test]
fn service_with_int_or_string_ports() {
    let pb = core::Service {
        metadata: object_meta("web", "default"),
        spec: Some(core::ServiceSpec {
            ports: vec![
                core::ServicePort {
                    name: s("http"),
                    protocol: s("TCP"),
                    app_protocol: None,
                    port: Some(80),
                    target_port: string("http"),
                    node_port: Some(0),
                },
                core::ServicePort {
                    name: s("metrics"),
                    protocol: s("TCP"),
                    app_protocol: s("http"),
                    port: Some(9090),
                    target_port: int(9091),
                    node_port: Some(30090),
                },
            ],
            selector: labels(&[("app", "web")]),
            cluster_ip: s(""),
            r#type: s("NodePort"),
            session_affinity: s(""),
            external_traffic_policy: s("Local"),
            ip_families: strings(&["IPv4"]),
            ip_family_policy: s("SingleStack"),
            internal_traffic_policy: s("Cluster"),
            publish_not_ready_addresses: Some(false),
            ..Default::default()
        }),
        status: Some(core::ServiceStatus::default()),
    };
    let expected = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": null},
        "spec": {
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "http"},
                {"name": "metrics", "protocol": "TCP", "appProtocol": "http", "port": 9090,
                 "targetPort": 9091, "nodePort": 30090}
            ],
            "selector": {"app": "web"},
            "type": "NodePort",
            "externalTrafficPolicy": "Local",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster"
        },
        "status": {"loadBalancer": {}}
    });
    let decoded = check::<oa::core::v1::Service>(&body("v1", "Service", &pb), expected);
    assert!(decoded["spec"].get("clusterIP").is_none());
    assert!(decoded["spec"]["ports"][0].get("nodePort").is_none());
}

#[test]
fn pod_with_times_and_status() {
    let pb = core::Pod {
        metadata: Some(meta::ObjectMeta {
            uid: s("8f0e6a50-0000-4000-8000-000000000001"),
            resource_version: s("42"),
            generation: Some(1),
            creation_timestamp: time(T0),
            deletion_timestamp: time(T0 + 3600),
            deletion_grace_period_seconds: Some(0),
            finalizers: strings(&["example.com/cleanup"]),
            owner_references: vec![meta::OwnerReference {
                api_version: s("apps/v1"),
                kind: s("ReplicaSet"),
                name: s("web-abc"),
                uid: s("8f0e6a50-0000-4000-8000-000000000002"),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }],
            managed_fields: vec![meta::ManagedFieldsEntry {
                manager: s("kubectl"),
                operation: s("Update"),
                api_version: s("v1"),
                time: time(T0),
                fields_type: s("FieldsV1"),
                fields_v1: Some(meta::FieldsV1 {
                    raw: Some(br#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}"#.to_vec()),
                }),
                subresource: s(""),
            }],
            ..object_meta("web-abc-1", "default").unwrap()
        }),
        spec: Some(core::PodSpec {
            containers: vec![container("web", "nginx")],
            node_name: s("node-1"),
            ..Default::default()
        }),
        status: Some(core::PodStatus {
            phase: s("Running"),
            conditions: vec![core::PodCondition {
                r#type: s("Ready"),
                status: s("True"),
                last_probe_time: Some(meta::Time::default()),
                last_transition_time: time(T0 + 10),
                reason: s(""),
                message: s(""),
                observed_generation: None,
            }],
            host_ip: s("192.168.1.10"),
            pod_ip: s("10.0.0.5"),
            pod_ips: vec![core::PodIp { ip: s("10.0.0.5") }],
            start_time: Some(meta::Time {
                seconds: Some(T0 + 5),
                nanos: Some(999_999_999),
            }),
            container_statuses: vec![core::ContainerStatus {
                name: s("web"),
                state: Some(core::ContainerState {
                    running: Some(core::ContainerStateRunning {
                        started_at: time(T0 + 7),
                    }),
                    ..Default::default()
                }),
                last_state: Some(core::ContainerState::default()),
                ready: Some(true),
                restart_count: Some(0),
                image: s("nginx:latest"),
                image_id: s("docker.io/library/nginx@sha256:abc"),
                container_id: s(""),
                started: Some(true),
                ..Default::default()
            }],
            qos_class: s("BestEffort"),
            ..Default::default()
        }),
    };
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-abc-1", "namespace": "default",
            "uid": "8f0e6a50-0000-4000-8000-000000000001",
            "resourceVersion": "42",
            "generation": 1,
            "creationTimestamp": "2023-11-14T22:13:20Z",
            "deletionTimestamp": "2023-11-14T23:13:20Z",
            "deletionGracePeriodSeconds": 0,
            "finalizers": ["example.com/cleanup"],
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                "uid": "8f0e6a50-0000-4000-8000-000000000002",
                "controller": true, "blockOwnerDeletion": false
            }],
            "managedFields": [{
                "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "time": "2023-11-14T22:13:20Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}
            }]
        },
        "spec": {
            "containers": [{"name": "web", "image": "nginx", "resources": {}}],
            "nodeName": "node-1"
        },
        "status": {
            "phase": "Running",
            "conditions": [{
                "type": "Ready", "status": "True", "lastProbeTime": null,
                "lastTransitionTime": "2023-11-14T22:13:30Z"
            }],
            "hostIP": "192.168.1.10",
            "podIP": "10.0.0.5",
            "podIPs": [{"ip": "10.0.0.5"}],
            "startTime": "2023-11-14T22:13:25Z",
            "containerStatuses": [{
                "name": "web",
                "state": {"running": {"startedAt": "2023-11-14T22:13:27Z"}},
                "lastState": {},
                "ready": true,
                "restartCount": 0,
                "image": "nginx:latest",
                "imageID": "docker.io/library/nginx@sha256:abc",
                "started": true
            }],
            "qosClass": "BestEffort"
        }
    });
    let decoded = check::<oa::core::v1::Pod>(&body("v1", "Pod", &pb), expected);
    assert_eq!(
        decoded["status"]["conditions"][0]["lastProbeTime"],
        Value::Null
    );
    assert_eq!(decoded["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(
        decoded["status"]["containerStatuses"][0]["containerID"],
        Value::Null
    );
}

#[test]
fn lease_with_micro_time() {
    let pb = coordination::Lease {
        metadata: object_meta("leader", "kube-system"),
        spec: Some(coordination::LeaseSpec {
            holder_identity: s("node-1_abc"),
            lease_duration_seconds: Some(15),
            acquire_time: micro(T0, 123_456_789),
            renew_time: micro(T0 + 1, 0),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    let expected = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "leader", "namespace": "kube-system", "creationTimestamp": null},
        "spec": {
            "holderIdentity": "node-1_abc",
            "leaseDurationSeconds": 15,
            "acquireTime": "2023-11-14T22:13:20.123456Z",
            "renewTime": "2023-11-14T22:13:21.000000Z",
            "leaseTransitions": 0
        }
    });
    check::<oa::coordination::v1::Lease>(&body("coordination.k8s.io/v1", "Lease", &pb), expected);
}

fn object_reference(kind: &str, name: &str) -> Option<core::ObjectReference> {
    Some(core::ObjectReference {
        kind: s(kind),
        namespace: s("default"),
        name: s(name),
        uid: s("u-1"),
        api_version: s("v1"),
        resource_version: s(""),
        field_path: s(""),
    })
}

#[test]
fn core_event() {
    let pb = core::Event {
        metadata: object_meta("web.17a", "default"),
        involved_object: object_reference("Pod", "web"),
        reason: s("Pulled"),
        message: s("Successfully pulled image"),
        source: Some(core::EventSource {
            component: s("kubelet"),
            host: s("node-1"),
        }),
        first_timestamp: time(T0),
        last_timestamp: time(T0 + 60),
        count: Some(2),
        r#type: s("Normal"),
        event_time: Some(meta::MicroTime::default()),
        series: Some(core::EventSeries {
            count: Some(2),
            last_observed_time: micro(T0 + 60, 500_000),
        }),
        action: s(""),
        related: None,
        reporting_component: s("kubelet"),
        reporting_instance: s("node-1"),
    };
    let expected = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web.17a", "namespace": "default", "creationTimestamp": null},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "uid": "u-1",
                           "apiVersion": "v1"},
        "reason": "Pulled",
        "message": "Successfully pulled image",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2023-11-14T22:13:20Z",
        "lastTimestamp": "2023-11-14T22:14:20Z",
        "count": 2,
        "type": "Normal",
        "eventTime": null,
        "series": {"count": 2, "lastObservedTime": "2023-11-14T22:14:20.000500Z"},
        "reportingComponent": "kubelet",
        "reportingInstance": "node-1"
    });
    check::<oa::core::v1::Event>(&body("v1", "Event", &pb), expected);
}

#[test]
fn events_v1_event() {
    let pb = events::Event {
        metadata: object_meta("web.17b", "default"),
        event_time: micro(T0, 1_000),
        series: None,
        reporting_controller: s("example.com/controller"),
        reporting_instance: s("controller-0"),
        action: s("Reconcile"),
        reason: s("Synced"),
        regarding: object_reference("Deployment", "web"),
        related: None,
        note: s("all good"),
        r#type: s("Normal"),
        deprecated_source: Some(core::EventSource::default()),
        deprecated_first_timestamp: Some(meta::Time::default()),
        deprecated_last_timestamp: Some(meta::Time::default()),
        deprecated_count: Some(0),
    };
    let expected = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web.17b", "namespace": "default", "creationTimestamp": null},
        "eventTime": "2023-11-14T22:13:20.000001Z",
        "reportingController": "example.com/controller",
        "reportingInstance": "controller-0",
        "action": "Reconcile",
        "reason": "Synced",
        "regarding": {"kind": "Deployment", "namespace": "default", "name": "web", "uid": "u-1",
                      "apiVersion": "v1"},
        "note": "all good",
        "type": "Normal",
        "deprecatedSource": {},
        "deprecatedFirstTimestamp": null,
        "deprecatedLastTimestamp": null
    });
    let decoded = check::<oa::events::v1::Event>(&body("events.k8s.io/v1", "Event", &pb), expected);
    assert!(decoded.get("deprecatedCount").is_none());
}

#[test]
fn namespace_service_account_node_endpoints() {
    let ns = core::Namespace {
        metadata: object_meta("team-a", ""),
        spec: Some(core::NamespaceSpec {
            finalizers: strings(&["kubernetes"]),
        }),
        status: Some(core::NamespaceStatus {
            phase: s("Active"),
            conditions: vec![],
        }),
    };
    check::<oa::core::v1::Namespace>(
        &body("v1", "Namespace", &ns),
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a", "creationTimestamp": null},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}
        }),
    );

    let sa = core::ServiceAccount {
        metadata: object_meta("robot", "default"),
        secrets: vec![core::ObjectReference {
            name: s("robot-token"),
            ..Default::default()
        }],
        image_pull_secrets: vec![core::LocalObjectReference {
            name: s("registry"),
        }],
        automount_service_account_token: Some(false),
    };
    check::<oa::core::v1::ServiceAccount>(
        &body("v1", "ServiceAccount", &sa),
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "robot", "namespace": "default", "creationTimestamp": null},
            "secrets": [{"name": "robot-token"}],
            "imagePullSecrets": [{"name": "registry"}],
            "automountServiceAccountToken": false
        }),
    );

    let node = core::Node {
        metadata: object_meta("node-1", ""),
        spec: Some(core::NodeSpec {
            pod_cidr: s("10.244.0.0/24"),
            pod_cid_rs: strings(&["10.244.0.0/24"]),
            unschedulable: Some(true),
            taints: vec![core::Taint {
                key: s("node.kubernetes.io/unschedulable"),
                value: s(""),
                effect: s("NoSchedule"),
                time_added: time(T0),
            }],
            ..Default::default()
        }),
        status: Some(core::NodeStatus {
            capacity: map(&[("cpu", q("4")), ("memory", q("8Gi")), ("pods", q("110"))]),
            allocatable: map(&[("cpu", q("3800m"))]),
            conditions: vec![core::NodeCondition {
                r#type: s("Ready"),
                status: s("True"),
                last_heartbeat_time: time(T0),
                last_transition_time: time(T0 - 86_400),
                reason: s("KubeletReady"),
                message: s("kubelet is posting ready status"),
            }],
            addresses: vec![core::NodeAddress {
                r#type: s("InternalIP"),
                address: s("192.168.1.10"),
            }],
            daemon_endpoints: Some(core::NodeDaemonEndpoints {
                kubelet_endpoint: Some(core::DaemonEndpoint { port: Some(10250) }),
            }),
            node_info: Some(core::NodeSystemInfo {
                kubelet_version: s("v1.33.0"),
                operating_system: s("linux"),
                architecture: s("amd64"),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    check::<oa::core::v1::Node>(
        &body("v1", "Node", &node),
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-1", "creationTimestamp": null},
            "spec": {
                "podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"],
                "unschedulable": true,
                "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                            "timeAdded": "2023-11-14T22:13:20Z"}]
            },
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "3800m"},
                "conditions": [{
                    "type": "Ready", "status": "True",
                    "lastHeartbeatTime": "2023-11-14T22:13:20Z",
                    "lastTransitionTime": "2023-11-13T22:13:20Z",
                    "reason": "KubeletReady", "message": "kubelet is posting ready status"
                }],
                "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"kubeletVersion": "v1.33.0", "operatingSystem": "linux",
                             "architecture": "amd64"}
            }
        }),
    );

    let endpoints = core::Endpoints {
        metadata: object_meta("web", "default"),
        subsets: vec![core::EndpointSubset {
            addresses: vec![core::EndpointAddress {
                ip: s("10.0.0.5"),
                hostname: s(""),
                node_name: s("node-1"),
                target_ref: object_reference("Pod", "web-abc-1"),
            }],
            not_ready_addresses: vec![core::EndpointAddress {
                ip: s("10.0.0.6"),
                ..Default::default()
            }],
            ports: vec![core::EndpointPort {
                name: s("http"),
                port: Some(8080),
                protocol: s("TCP"),
                app_protocol: None,
            }],
        }],
    };
    check::<oa::core::v1::Endpoints>(
        &body("v1", "Endpoints", &endpoints),
        json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": null},
            "subsets": [{
                "addresses": [{"ip": "10.0.0.5", "nodeName": "node-1", "targetRef": {
                    "kind": "Pod", "namespace": "default", "name": "web-abc-1", "uid": "u-1",
                    "apiVersion": "v1"
                }}],
                "notReadyAddresses": [{"ip": "10.0.0.6"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            }]
        }),
    );
}

#[test]
fn replica_set_stateful_set_daemon_set() {
    let rs = apps::ReplicaSet {
        metadata: object_meta("web-abc", "default"),
        spec: Some(apps::ReplicaSetSpec {
            replicas: Some(2),
            min_ready_seconds: Some(0),
            selector: selector("web"),
            template: pod_template("web", vec![container("web", "nginx")]),
        }),
        status: Some(apps::ReplicaSetStatus {
            replicas: Some(2),
            fully_labeled_replicas: Some(2),
            ready_replicas: Some(1),
            available_replicas: Some(0),
            observed_generation: Some(3),
            ..Default::default()
        }),
    };
    check::<oa::apps::v1::ReplicaSet>(
        &body("apps/v1", "ReplicaSet", &rs),
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-abc", "namespace": "default", "creationTimestamp": null},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": template_json("web", "nginx")
            },
            "status": {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 1,
                       "observedGeneration": 3}
        }),
    );

    let sts = apps::StatefulSet {
        metadata: object_meta("db", "default"),
        spec: Some(apps::StatefulSetSpec {
            replicas: Some(3),
            selector: selector("db"),
            template: pod_template("db", vec![container("db", "postgres")]),
            volume_claim_templates: vec![core::PersistentVolumeClaim {
                metadata: object_meta("data", ""),
                spec: Some(core::PersistentVolumeClaimSpec {
                    access_modes: strings(&["ReadWriteOnce"]),
                    resources: Some(core::VolumeResourceRequirements {
                        limits: Default::default(),
                        requests: map(&[("storage", q("10Gi"))]),
                    }),
                    storage_class_name: s(""),
                    ..Default::default()
                }),
                status: None,
            }],
            service_name: s("db"),
            pod_management_policy: s("Parallel"),
            update_strategy: Some(apps::StatefulSetUpdateStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(apps::RollingUpdateStatefulSetStrategy {
                    partition: Some(0),
                    max_unavailable: None,
                }),
            }),
            persistent_volume_claim_retention_policy: Some(
                apps::StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: s("Retain"),
                    when_scaled: s("Delete"),
                },
            ),
            ..Default::default()
        }),
        status: None,
    };
    check::<oa::apps::v1::StatefulSet>(
        &body("apps/v1", "StatefulSet", &sts),
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "default", "creationTimestamp": null},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "db"}},
                "template": template_json("db", "postgres"),
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data", "creationTimestamp": null},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "10Gi"}},
                        "storageClassName": ""
                    },
                    "status": {}
                }],
                "serviceName": "db",
                "podManagementPolicy": "Parallel",
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain",
                                                          "whenScaled": "Delete"}
            },
            "status": {"replicas": 0, "availableReplicas": 0}
        }),
    );

    let ds = apps::DaemonSet {
        metadata: object_meta("agent", "kube-system"),
        spec: Some(apps::DaemonSetSpec {
            selector: selector("agent"),
            template: pod_template("agent", vec![container("agent", "agent:1")]),
            update_strategy: Some(apps::DaemonSetUpdateStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(apps::RollingUpdateDaemonSet {
                    max_unavailable: int(1),
                    max_surge: int(0),
                }),
            }),
            min_ready_seconds: Some(0),
            revision_history_limit: Some(10),
        }),
        status: None,
    };
    check::<oa::apps::v1::DaemonSet>(
        &body("apps/v1", "DaemonSet", &ds),
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "kube-system", "creationTimestamp": null},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": template_json("agent", "agent:1"),
                "updateStrategy": {"type": "RollingUpdate",
                                   "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                "revisionHistoryLimit": 10
            },
            "status": {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                       "desiredNumberScheduled": 0, "numberReady": 0}
        }),
    );
}

#[test]
fn job_with_pod_failure_policy() {
    let pb = batch::Job {
        metadata: object_meta("migrate", "default"),
        spec: Some(batch::JobSpec {
            parallelism: Some(1),
            completions: Some(1),
            active_deadline_seconds: Some(600),
            pod_failure_policy: Some(batch::PodFailurePolicy {
                rules: vec![batch::PodFailurePolicyRule {
                    action: s("FailJob"),
                    on_exit_codes: Some(batch::PodFailurePolicyOnExitCodesRequirement {
                        container_name: s("main"),
                        operator: s("In"),
                        values: vec![42, -1, 2_147_483_647],
                    }),
                    on_pod_conditions: vec![],
                }],
            }),
            backoff_limit: Some(0),
            ttl_seconds_after_finished: Some(0),
            completion_mode: s("NonIndexed"),
            suspend: Some(false),
            template: Some(core::PodTemplateSpec {
                metadata: None,
                spec: Some(core::PodSpec {
                    containers: vec![container("main", "migrate:1")],
                    restart_policy: s("Never"),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: None,
    };
    check::<oa::batch::v1::Job>(
        &body("batch/v1", "Job", &pb),
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "namespace": "default", "creationTimestamp": null},
            "spec": {
                "parallelism": 1, "completions": 1, "activeDeadlineSeconds": 600,
                "podFailurePolicy": {"rules": [{
                    "action": "FailJob",
                    "onExitCodes": {"containerName": "main", "operator": "In",
                                    "values": [42, -1, 2_147_483_647]}
                }]},
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": 0,
                "completionMode": "NonIndexed",
                "suspend": false,
                "template": {
                    "metadata": {"creationTimestamp": null},
                    "spec": {"containers": [{"name": "main", "image": "migrate:1",
                                             "resources": {}}],
                             "restartPolicy": "Never"}
                }
            },
            "status": {}
        }),
    );
}

#[test]
fn rbac_kinds() {
    let rule = rbac::PolicyRule {
        verbs: strings(&["get", "list"]),
        api_groups: strings(&[""]),
        resources: strings(&["pods", "pods/log"]),
        resource_names: vec![],
        non_resource_ur_ls: vec![],
    };
    let role = rbac::Role {
        metadata: object_meta("reader", "default"),
        rules: vec![rule.clone()],
    };
    let rule_json = json!({"verbs": ["get", "list"], "apiGroups": [""],
                           "resources": ["pods", "pods/log"]});
    check::<oa::rbac::v1::Role>(
        &body("rbac.authorization.k8s.io/v1", "Role", &role),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reader", "namespace": "default", "creationTimestamp": null},
            "rules": [rule_json.clone()]
        }),
    );
    let cluster_role = rbac::ClusterRole {
        metadata: object_meta("aggregate", ""),
        rules: vec![rbac::PolicyRule {
            verbs: strings(&["get"]),
            non_resource_ur_ls: strings(&["/healthz"]),
            ..Default::default()
        }],
        aggregation_rule: Some(rbac::AggregationRule {
            cluster_role_selectors: vec![meta::LabelSelector {
                match_labels: labels(&[("rbac.example.com/aggregate", "true")]),
                match_expressions: vec![],
            }],
        }),
    };
    check::<oa::rbac::v1::ClusterRole>(
        &body("rbac.authorization.k8s.io/v1", "ClusterRole", &cluster_role),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "aggregate", "creationTimestamp": null},
            "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"rbac.example.com/aggregate": "true"}}
            ]}
        }),
    );
    let subjects = vec![
        rbac::Subject {
            kind: s("User"),
            api_group: s("rbac.authorization.k8s.io"),
            name: s("alice"),
            namespace: s(""),
        },
        rbac::Subject {
            kind: s("ServiceAccount"),
            api_group: s(""),
            name: s("robot"),
            namespace: s("default"),
        },
    ];
    let role_ref = Some(rbac::RoleRef {
        api_group: s("rbac.authorization.k8s.io"),
        kind: s("ClusterRole"),
        name: s("view"),
    });
    let subjects_json = json!([
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
        {"kind": "ServiceAccount", "name": "robot", "namespace": "default"}
    ]);
    let role_ref_json = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "view"});
    let binding = rbac::RoleBinding {
        metadata: object_meta("view", "default"),
        subjects: subjects.clone(),
        role_ref: role_ref.clone(),
    };
    check::<oa::rbac::v1::RoleBinding>(
        &body("rbac.authorization.k8s.io/v1", "RoleBinding", &binding),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "view", "namespace": "default", "creationTimestamp": null},
            "subjects": subjects_json.clone(),
            "roleRef": role_ref_json.clone()
        }),
    );
    let cluster_binding = rbac::ClusterRoleBinding {
        metadata: object_meta("view-all", ""),
        subjects,
        role_ref,
    };
    check::<oa::rbac::v1::ClusterRoleBinding>(
        &body(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            &cluster_binding,
        ),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "view-all", "creationTimestamp": null},
            "subjects": subjects_json,
            "roleRef": role_ref_json
        }),
    );
}

#[test]
fn scale() {
    let pb = autoscaling::Scale {
        metadata: object_meta("web", "default"),
        spec: Some(autoscaling::ScaleSpec { replicas: Some(5) }),
        status: Some(autoscaling::ScaleStatus {
            replicas: Some(3),
            selector: s("app=web"),
        }),
    };
    check::<oa::autoscaling::v1::Scale>(
        &body("autoscaling/v1", "Scale", &pb),
        json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": null},
            "spec": {"replicas": 5},
            "status": {"replicas": 3, "selector": "app=web"}
        }),
    );
    // Scale.spec.replicas is a non-pointer int32 with omitempty: Go drops 0.
    let zero = autoscaling::Scale {
        metadata: object_meta("web", "default"),
        spec: Some(autoscaling::ScaleSpec { replicas: Some(0) }),
        status: None,
    };
    let (_, decoded) = konverge_protobuf::decode(&body("autoscaling/v1", "Scale", &zero)).unwrap();
    assert_eq!(decoded["spec"], json!({}));
    assert_eq!(decoded["status"], json!({"replicas": 0}));
}

fn props(
    pairs: &[(&str, apiext::JsonSchemaProps)],
) -> std::collections::BTreeMap<String, apiext::JsonSchemaProps> {
    map(pairs)
}

fn raw_json(text: &str) -> apiext::Json {
    apiext::Json {
        raw: Some(text.as_bytes().to_vec()),
    }
}

fn typed_schema(ty: &str) -> apiext::JsonSchemaProps {
    apiext::JsonSchemaProps {
        r#type: s(ty),
        ..Default::default()
    }
}

#[test]
fn custom_resource_definition() {
    let spec_schema = apiext::JsonSchemaProps {
        r#type: s("object"),
        required: strings(&["replicas"]),
        properties: props(&[
            (
                "replicas",
                apiext::JsonSchemaProps {
                    r#type: s("integer"),
                    minimum: Some(1.0),
                    maximum: Some(10.5),
                    default: Some(raw_json("3")),
                    ..Default::default()
                },
            ),
            (
                "tags",
                apiext::JsonSchemaProps {
                    r#type: s("array"),
                    items: Some(Box::new(apiext::JsonSchemaPropsOrArray {
                        schema: Some(Box::new(apiext::JsonSchemaProps {
                            r#type: s("string"),
                            r#enum: vec![raw_json("\"a\""), raw_json("\"b\"")],
                            ..Default::default()
                        })),
                        j_son_schemas: vec![],
                    })),
                    x_kubernetes_list_type: s("set"),
                    ..Default::default()
                },
            ),
            (
                "tuple",
                apiext::JsonSchemaProps {
                    items: Some(Box::new(apiext::JsonSchemaPropsOrArray {
                        schema: None,
                        j_son_schemas: vec![typed_schema("string"), typed_schema("integer")],
                    })),
                    ..Default::default()
                },
            ),
            (
                "labels",
                apiext::JsonSchemaProps {
                    r#type: s("object"),
                    additional_properties: Some(Box::new(apiext::JsonSchemaPropsOrBool {
                        allows: Some(true),
                        schema: Some(Box::new(typed_schema("string"))),
                    })),
                    ..Default::default()
                },
            ),
            (
                "strict",
                apiext::JsonSchemaProps {
                    r#type: s("object"),
                    additional_properties: Some(Box::new(apiext::JsonSchemaPropsOrBool {
                        allows: Some(false),
                        schema: None,
                    })),
                    ..Default::default()
                },
            ),
            (
                "free",
                apiext::JsonSchemaProps {
                    r#type: s("object"),
                    x_kubernetes_preserve_unknown_fields: Some(true),
                    ..Default::default()
                },
            ),
            (
                "port",
                apiext::JsonSchemaProps {
                    x_kubernetes_int_or_string: Some(true),
                    any_of: vec![typed_schema("integer"), typed_schema("string")],
                    ..Default::default()
                },
            ),
        ]),
        dependencies: map(&[(
            "a",
            apiext::JsonSchemaPropsOrStringArray {
                schema: None,
                property: strings(&["b"]),
            },
        )]),
        x_kubernetes_validations: vec![apiext::ValidationRule {
            rule: s("self.replicas <= 10"),
            message: s("too many"),
            ..Default::default()
        }],
        ..Default::default()
    };
    let pb = apiext::CustomResourceDefinition {
        metadata: object_meta("widgets.example.com", ""),
        spec: Some(apiext::CustomResourceDefinitionSpec {
            group: s("example.com"),
            names: Some(apiext::CustomResourceDefinitionNames {
                plural: s("widgets"),
                singular: s("widget"),
                short_names: strings(&["wd"]),
                kind: s("Widget"),
                list_kind: s("WidgetList"),
                categories: strings(&["all"]),
            }),
            scope: s("Namespaced"),
            versions: vec![apiext::CustomResourceDefinitionVersion {
                name: s("v1"),
                served: Some(true),
                storage: Some(true),
                deprecated: Some(false),
                schema: Some(apiext::CustomResourceValidation {
                    open_apiv3_schema: Some(apiext::JsonSchemaProps {
                        r#type: s("object"),
                        properties: props(&[
                            ("spec", spec_schema),
                            ("status", typed_schema("object")),
                        ]),
                        ..Default::default()
                    }),
                }),
                subresources: Some(apiext::CustomResourceSubresources {
                    status: Some(apiext::CustomResourceSubresourceStatus {}),
                    scale: Some(apiext::CustomResourceSubresourceScale {
                        spec_replicas_path: s(".spec.replicas"),
                        status_replicas_path: s(".status.replicas"),
                        label_selector_path: None,
                    }),
                }),
                additional_printer_columns: vec![apiext::CustomResourceColumnDefinition {
                    name: s("Replicas"),
                    r#type: s("integer"),
                    format: s(""),
                    description: s(""),
                    priority: Some(0),
                    json_path: s(".spec.replicas"),
                }],
                ..Default::default()
            }],
            conversion: Some(apiext::CustomResourceConversion {
                strategy: s("None"),
                webhook: None,
            }),
            preserve_unknown_fields: Some(false),
        }),
        status: None,
    };
    let expected = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "creationTimestamp": null},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "shortNames": ["wd"],
                      "kind": "Widget", "listKind": "WidgetList", "categories": ["all"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["replicas"],
                            "properties": {
                                "replicas": {"type": "integer", "minimum": 1, "maximum": 10.5,
                                             "default": 3},
                                "tags": {"type": "array",
                                         "items": {"type": "string", "enum": ["a", "b"]},
                                         "x-kubernetes-list-type": "set"},
                                "tuple": {"items": [{"type": "string"}, {"type": "integer"}]},
                                "labels": {"type": "object",
                                           "additionalProperties": {"type": "string"}},
                                "strict": {"type": "object", "additionalProperties": false},
                                "free": {"type": "object",
                                         "x-kubernetes-preserve-unknown-fields": true},
                                "port": {"x-kubernetes-int-or-string": true,
                                         "anyOf": [{"type": "integer"}, {"type": "string"}]}
                            },
                            "dependencies": {"a": ["b"]},
                            "x-kubernetes-validations": [{"rule": "self.replicas <= 10",
                                                          "message": "too many"}]
                        },
                        "status": {"type": "object"}
                    }
                }},
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas"
                }},
                "additionalPrinterColumns": [{"name": "Replicas", "type": "integer",
                                              "jsonPath": ".spec.replicas"}]
            }],
            "conversion": {"strategy": "None"}
        },
        "status": {"conditions": null, "acceptedNames": {"plural": "", "kind": ""},
                   "storedVersions": null}
    });
    let decoded = check::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
        &body("apiextensions.k8s.io/v1", "CustomResourceDefinition", &pb),
        expected,
    );
    let spec = &decoded["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["properties"]["strict"]["additionalProperties"], false);
    assert_eq!(spec["properties"]["replicas"]["minimum"], json!(1));
    assert_eq!(spec["properties"]["replicas"]["maximum"], json!(10.5));
    assert_eq!(
        decoded["spec"]["versions"][0]["additionalPrinterColumns"][0]["priority"],
        Value::Null
    );
}

#[test]
fn delete_options_in_any_group_version() {
    let pb = meta::DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(meta::Preconditions {
            uid: s("u-1"),
            resource_version: None,
        }),
        orphan_dependents: None,
        propagation_policy: s("Foreground"),
        dry_run: strings(&["All"]),
        ignore_store_read_error_with_cluster_breaking_potential: None,
    };
    for api_version in ["v1", "apps/v1", "meta.k8s.io/v1", "batch/v1"] {
        let expected = json!({
            "apiVersion": api_version, "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": "u-1"},
            "propagationPolicy": "Foreground",
            "dryRun": ["All"]
        });
        let decoded = check::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>(
            &body(api_version, "DeleteOptions", &pb),
            expected.clone(),
        );
        assert_eq!(decoded, expected);
    }
}

#[test]
fn controller_revision_raw_extension() {
    let pb = apps::ControllerRevision {
        metadata: object_meta("web-7d9", "default"),
        data: Some(RawExtension {
            raw: Some(br#"{"spec":{"template":{"$patch":"replace"}}}"#.to_vec()),
        }),
        revision: Some(3),
    };
    check::<oa::apps::v1::ControllerRevision>(
        &body("apps/v1", "ControllerRevision", &pb),
        json!({
            "apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": "web-7d9", "namespace": "default", "creationTimestamp": null},
            "data": {"spec": {"template": {"$patch": "replace"}}},
            "revision": 3
        }),
    );
}

#[test]
fn eviction_and_binding() {
    let eviction = policy::Eviction {
        metadata: object_meta("web-abc-1", "default"),
        delete_options: Some(meta::DeleteOptions {
            grace_period_seconds: Some(30),
            ..Default::default()
        }),
    };
    check::<oa::policy::v1::Eviction>(
        &body("policy/v1", "Eviction", &eviction),
        json!({
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "web-abc-1", "namespace": "default", "creationTimestamp": null},
            "deleteOptions": {"gracePeriodSeconds": 30}
        }),
    );
    let binding = core::Binding {
        metadata: object_meta("web-abc-1", "default"),
        target: Some(core::ObjectReference {
            kind: s("Node"),
            name: s("node-1"),
            ..Default::default()
        }),
    };
    check::<oa::core::v1::Binding>(
        &body("v1", "Binding", &binding),
        json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": "web-abc-1", "namespace": "default", "creationTimestamp": null},
            "target": {"kind": "Node", "name": "node-1"}
        }),
    );
}

#[test]
fn every_supported_kind_decodes_an_empty_object() {
    // What Go writes for the zero value of each type: the object must come out with its
    // apiVersion and kind and be accepted by the k8s-openapi codec of the same shape.
    for (api_version, kind) in konverge_protobuf::kinds() {
        let api_version = api_version.unwrap_or("v1");
        let body = support::envelope(api_version, kind, Vec::new());
        let (type_meta, decoded) = konverge_protobuf::decode(&body)
            .unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"));
        assert_eq!(type_meta.kind, kind);
        assert_eq!(decoded["apiVersion"], api_version);
        assert_eq!(decoded["kind"], kind);
    }
    assert!(konverge_protobuf::supports("v1", "Pod"));
    assert!(konverge_protobuf::supports("apps/v1", "DeleteOptions"));
    assert!(!konverge_protobuf::supports("apps/v1", "Pod"));
    assert!(!konverge_protobuf::supports("example.com/v1", "Widget"));
}
