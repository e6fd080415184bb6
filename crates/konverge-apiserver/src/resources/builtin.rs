//! The built-in resources: their names, scopes, subresources, typed codecs (from
//! `k8s-openapi`), defaults, validation and `kubectl get` columns.

use k8s_openapi::api::{apps, batch, coordination, core, events, rbac};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::{Cell, Column, NameRule, ResourceType, ScalePaths};
use crate::error::Cause;

/// Decodes `value` as `T` (wrong types fail with the field path), re-encodes it, and lists
/// the fields `T` does not have (which the re-encoding dropped).
fn typed<T>(value: Value) -> Result<(Value, Vec<String>), String>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let decoded: T = serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })?;
    let encoded = serde_json::to_value(&decoded).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    dropped_fields(&value, &encoded, "", &mut unknown);
    Ok((encoded, unknown))
}

/// Paths present in `before` but absent from `after` (null values do not count: they mean
/// "unset" to the API).
fn dropped_fields(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (key, value) in b {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match a.get(key) {
                    Some(next) => dropped_fields(value, next, &child, out),
                    None if value.is_null() => {}
                    None => out.push(child),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) if a.len() == b.len() => {
            for (i, (value, next)) in b.iter().zip(a).enumerate() {
                dropped_fields(value, next, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

struct Spec {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    scale: bool,
    generation: bool,
    name_rule: NameRule,
    codec: super::Codec,
}

const ALL: &[&str] = &["all"];

fn spec(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    codec: super::Codec,
) -> Spec {
    Spec {
        group,
        version,
        kind,
        plural,
        namespaced,
        short_names: &[],
        categories: &[],
        status: false,
        scale: false,
        generation: false,
        name_rule: NameRule::Subdomain,
        codec,
    }
}

impl Spec {
    fn short(mut self, names: &'static [&'static str]) -> Self {
        self.short_names = names;
        self
    }
    fn in_category(mut self, categories: &'static [&'static str]) -> Self {
        self.categories = categories;
        self
    }
    fn in_all(mut self) -> Self {
        self.categories = ALL;
        self
    }
    fn with_status(mut self) -> Self {
        self.status = true;
        self
    }
    fn with_scale(mut self) -> Self {
        self.scale = true;
        self
    }
    fn with_generation(mut self) -> Self {
        self.generation = true;
        self
    }
    fn names(mut self, rule: NameRule) -> Self {
        self.name_rule = rule;
        self
    }

    fn build(self) -> ResourceType {
        ResourceType {
            group: self.group.into(),
            version: self.version.into(),
            kind: self.kind.into(),
            plural: self.plural.into(),
            singular: self.kind.to_lowercase(),
            namespaced: self.namespaced,
            short_names: self.short_names.iter().map(|s| s.to_string()).collect(),
            categories: self.categories.iter().map(|s| s.to_string()).collect(),
            status: self.status,
            scale: self.scale.then(|| ScalePaths {
                spec_replicas: "spec.replicas".into(),
                status_replicas: "status.replicas".into(),
                selector: Some("spec.selector".into()),
                selector_is_string: false,
            }),
            generation: self.generation,
            name_rule: self.name_rule,
            codec: Some(self.codec),
            validate: None,
            default: None,
            prepare_create: None,
            columns: Vec::new(),
            selectable_fields: Vec::new(),
            create_on_update: false,
            custom: None,
        }
    }
}

/// Every built-in resource.
pub fn catalog() -> Vec<ResourceType> {
    use NameRule::*;
    let mut out = vec![
        spec(
            "",
            "v1",
            "Namespace",
            "namespaces",
            false,
            typed::<core::v1::Namespace>,
        )
        .short(&["ns"])
        .with_status()
        .names(Label)
        .build(),
        spec(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            typed::<core::v1::ConfigMap>,
        )
        .short(&["cm"])
        .build(),
        spec(
            "",
            "v1",
            "Secret",
            "secrets",
            true,
            typed::<core::v1::Secret>,
        )
        .build(),
        spec("", "v1", "Pod", "pods", true, typed::<core::v1::Pod>)
            .short(&["po"])
            .in_all()
            .with_status()
            .build(),
        spec(
            "",
            "v1",
            "Service",
            "services",
            true,
            typed::<core::v1::Service>,
        )
        .short(&["svc"])
        .in_all()
        .with_status()
        .names(Rfc1035Label)
        .build(),
        spec(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            typed::<core::v1::ServiceAccount>,
        )
        .short(&["sa"])
        .build(),
        spec("", "v1", "Event", "events", true, typed::<core::v1::Event>)
            .short(&["ev"])
            .build(),
        spec("", "v1", "Node", "nodes", false, typed::<core::v1::Node>)
            .short(&["no"])
            .with_status()
            .build(),
        spec(
            "",
            "v1",
            "Endpoints",
            "endpoints",
            true,
            typed::<core::v1::Endpoints>,
        )
        .short(&["ep"])
        .build(),
        spec(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            typed::<apps::v1::Deployment>,
        )
        .short(&["deploy"])
        .in_all()
        .with_status()
        .with_scale()
        .with_generation()
        .build(),
        spec(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            true,
            typed::<apps::v1::ReplicaSet>,
        )
        .short(&["rs"])
        .in_all()
        .with_status()
        .with_scale()
        .with_generation()
        .build(),
        spec(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            true,
            typed::<apps::v1::StatefulSet>,
        )
        .short(&["sts"])
        .in_all()
        .with_status()
        .with_scale()
        .with_generation()
        .build(),
        spec(
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            true,
            typed::<apps::v1::DaemonSet>,
        )
        .short(&["ds"])
        .in_all()
        .with_status()
        .with_generation()
        .build(),
        spec("batch", "v1", "Job", "jobs", true, typed::<batch::v1::Job>)
            .in_all()
            .with_status()
            .with_generation()
            .build(),
        spec(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            typed::<coordination::v1::Lease>,
        )
        .build(),
        spec(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            typed::<events::v1::Event>,
        )
        .short(&["ev"])
        .build(),
        spec(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            true,
            typed::<rbac::v1::Role>,
        )
        .names(PathSegment)
        .build(),
        spec(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            typed::<rbac::v1::ClusterRole>,
        )
        .names(PathSegment)
        .build(),
        spec(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            typed::<rbac::v1::RoleBinding>,
        )
        .names(PathSegment)
        .build(),
        spec(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            typed::<rbac::v1::ClusterRoleBinding>,
        )
        .names(PathSegment)
        .build(),
        spec(
            crate::crd::GROUP,
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            typed::<CustomResourceDefinition>,
        )
        .short(&["crd", "crds"])
        .in_category(&["api-extensions"])
        .with_status()
        .with_generation()
        .build(),
    ];
    for rt in &mut out {
        customize(rt);
    }
    out
}

fn customize(rt: &mut ResourceType) {
    match (rt.group.as_str(), rt.plural.as_str()) {
        (crate::crd::GROUP, "customresourcedefinitions") => {
            rt.default = Some(crate::crd::default_definition);
            rt.prepare_create = Some(crate::crd::prepare_definition);
            rt.validate = Some(crate::crd::validate_definition);
            rt.columns = crate::crd::definition_columns();
        }
        ("", "namespaces") => {
            rt.prepare_create = Some(|obj| {
                if obj.pointer("/status/phase").is_none() {
                    obj["status"] = json!({"phase": "Active"});
                }
                // Every namespace carries the namespace controller's finalizer.
                if !obj.get("spec").is_some_and(Value::is_object) {
                    obj["spec"] = json!({});
                }
                let finalizers = obj["spec"]
                    .as_object_mut()
                    .map(|spec| spec.entry("finalizers").or_insert_with(|| json!([])));
                if let Some(Value::Array(list)) = finalizers
                    && !list.iter().any(|f| f == "kubernetes")
                {
                    list.push(json!("kubernetes"));
                }
            });
            rt.columns = vec![col("Status", "string", |o| str_at(o, "/status/phase"))];
            rt.selectable_fields = vec!["status.phase"];
        }
        ("", "configmaps") => {
            rt.columns = vec![col("Data", "integer", |o| {
                let n = count(o, "/data") + count(o, "/binaryData");
                json!(n)
            })];
        }
        ("", "secrets") => {
            rt.default = Some(|obj| {
                if obj.get("type").is_none_or(Value::is_null) {
                    obj["type"] = json!("Opaque");
                }
            });
            rt.columns = vec![
                col("Type", "string", |o| str_at(o, "/type")),
                col("Data", "integer", |o| json!(count(o, "/data"))),
            ];
            rt.selectable_fields = vec!["type"];
        }
        ("", "pods") => {
            rt.prepare_create = Some(|obj| {
                if obj.pointer("/status/phase").is_none() {
                    obj["status"] = json!({"phase": "Pending"});
                }
            });
            rt.validate = Some(validate_pod);
            rt.columns = vec![
                col("Ready", "string", pod_ready),
                col("Status", "string", |o| str_at(o, "/status/phase")),
                col("Restarts", "string", |o| {
                    let restarts: i64 = o
                        .pointer("/status/containerStatuses")
                        .and_then(Value::as_array)
                        .map(|cs| cs.iter().filter_map(|c| c["restartCount"].as_i64()).sum())
                        .unwrap_or(0);
                    json!(restarts.to_string())
                }),
                wide(col("IP", "string", |o| str_or_none(o, "/status/podIP"))),
                wide(col("Node", "string", |o| str_or_none(o, "/spec/nodeName"))),
            ];
            rt.selectable_fields = vec!["spec.nodeName", "status.phase", "spec.serviceAccountName"];
        }
        ("", "services") => {
            rt.default = Some(default_service);
            rt.columns = vec![
                col("Type", "string", |o| str_at(o, "/spec/type")),
                col("Cluster-IP", "string", |o| {
                    str_or_none(o, "/spec/clusterIP")
                }),
                col("External-IP", "string", |o| {
                    let ips: Vec<String> = o
                        .pointer("/spec/externalIPs")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    json!(if ips.is_empty() {
                        "<none>".to_string()
                    } else {
                        ips.join(",")
                    })
                }),
                col("Port(s)", "string", service_ports),
                wide(col("Selector", "string", |o| {
                    json!(labels_text(o.pointer("/spec/selector")))
                })),
            ];
        }
        ("", "serviceaccounts") => {
            rt.columns = vec![col("Secrets", "integer", |o| json!(count(o, "/secrets")))];
        }
        ("", "nodes") => {
            rt.columns = vec![
                col("Status", "string", |o| {
                    let ready = o
                        .pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                        .map(|c| c["status"] == "True");
                    json!(match ready {
                        Some(true) => "Ready",
                        _ => "NotReady",
                    })
                }),
                col("Roles", "string", |o| {
                    let roles: Vec<String> = o
                        .pointer("/metadata/labels")
                        .and_then(Value::as_object)
                        .map(|l| {
                            l.keys()
                                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                                .map(String::from)
                                .collect()
                        })
                        .unwrap_or_default();
                    json!(if roles.is_empty() {
                        "<none>".to_string()
                    } else {
                        roles.join(",")
                    })
                }),
                col("Version", "string", |o| {
                    str_at(o, "/status/nodeInfo/kubeletVersion")
                }),
            ];
        }
        ("", "endpoints") => {
            rt.columns = vec![col("Endpoints", "string", |o| {
                let mut eps = Vec::new();
                for subset in o["subsets"].as_array().into_iter().flatten() {
                    for addr in subset["addresses"].as_array().into_iter().flatten() {
                        for port in subset["ports"].as_array().into_iter().flatten() {
                            eps.push(format!(
                                "{}:{}",
                                addr["ip"].as_str().unwrap_or(""),
                                port["port"]
                            ));
                        }
                    }
                }
                json!(if eps.is_empty() {
                    "<none>".to_string()
                } else {
                    eps.join(",")
                })
            })];
        }
        ("", "events") | ("events.k8s.io", "events") => {
            rt.columns = vec![
                col("Type", "string", |o| str_at(o, "/type")),
                col("Reason", "string", |o| str_at(o, "/reason")),
                col("Object", "string", |o| {
                    let obj = o.get("involvedObject").or_else(|| o.get("regarding"));
                    let kind = obj.and_then(|r| r["kind"].as_str()).unwrap_or("");
                    let name = obj.and_then(|r| r["name"].as_str()).unwrap_or("");
                    json!(format!("{}/{}", kind.to_lowercase(), name))
                }),
                col("Message", "string", |o| {
                    str_or(o.get("message").or_else(|| o.get("note")), "")
                }),
            ];
            rt.create_on_update = true;
            rt.selectable_fields = vec![
                "involvedObject.kind",
                "involvedObject.name",
                "involvedObject.namespace",
                "involvedObject.uid",
                "reason",
                "type",
            ];
        }
        ("apps", "deployments") => {
            rt.default = Some(default_replicas);
            rt.validate = Some(validate_workload);
            rt.columns = vec![
                col("Ready", "string", |o| {
                    json!(format!(
                        "{}/{}",
                        int_at(o, "/status/readyReplicas"),
                        int_at(o, "/spec/replicas")
                    ))
                }),
                col("Up-to-date", "integer", |o| {
                    json!(int_at(o, "/status/updatedReplicas"))
                }),
                col("Available", "integer", |o| {
                    json!(int_at(o, "/status/availableReplicas"))
                }),
                wide(col("Containers", "string", |o| container_field(o, "name"))),
                wide(col("Images", "string", |o| container_field(o, "image"))),
            ];
        }
        ("apps", "replicasets") => {
            rt.default = Some(default_replicas);
            rt.validate = Some(validate_workload);
            rt.columns = vec![
                col("Desired", "integer", |o| json!(int_at(o, "/spec/replicas"))),
                col("Current", "integer", |o| {
                    json!(int_at(o, "/status/replicas"))
                }),
                col("Ready", "integer", |o| {
                    json!(int_at(o, "/status/readyReplicas"))
                }),
            ];
        }
        ("apps", "statefulsets") => {
            rt.default = Some(default_replicas);
            rt.validate = Some(validate_workload);
            rt.columns = vec![col("Ready", "string", |o| {
                json!(format!(
                    "{}/{}",
                    int_at(o, "/status/readyReplicas"),
                    int_at(o, "/spec/replicas")
                ))
            })];
        }
        ("apps", "daemonsets") => {
            rt.validate = Some(validate_workload);
            rt.columns = vec![
                col("Desired", "integer", |o| {
                    json!(int_at(o, "/status/desiredNumberScheduled"))
                }),
                col("Current", "integer", |o| {
                    json!(int_at(o, "/status/currentNumberScheduled"))
                }),
                col("Ready", "integer", |o| {
                    json!(int_at(o, "/status/numberReady"))
                }),
            ];
        }
        ("batch", "jobs") => {
            rt.columns = vec![col("Completions", "string", |o| {
                json!(format!(
                    "{}/{}",
                    int_at(o, "/status/succeeded"),
                    o.pointer("/spec/completions")
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                ))
            })];
        }
        ("coordination.k8s.io", "leases") => {
            rt.create_on_update = true;
            rt.columns = vec![col("Holder", "string", |o| {
                str_at(o, "/spec/holderIdentity")
            })];
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            rt.columns = vec![col("Role", "string", |o| {
                json!(format!(
                    "{}/{}",
                    o.pointer("/roleRef/kind")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                    o.pointer("/roleRef/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ))
            })];
        }
        _ => {}
    }
}

fn col(name: &'static str, type_: &'static str, cell: fn(&Value) -> Value) -> Column {
    Column {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        priority: 0,
        cell: Cell::Fn(cell),
        description: String::new(),
    }
}

fn wide(mut column: Column) -> Column {
    column.priority = 1;
    column
}

fn str_at(o: &Value, pointer: &str) -> Value {
    str_or(o.pointer(pointer), "")
}

fn str_or_none(o: &Value, pointer: &str) -> Value {
    str_or(o.pointer(pointer), "<none>")
}

fn str_or(v: Option<&Value>, default: &str) -> Value {
    json!(
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(default)
    )
}

fn int_at(o: &Value, pointer: &str) -> i64 {
    o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn count(o: &Value, pointer: &str) -> usize {
    match o.pointer(pointer) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn labels_text(labels: Option<&Value>) -> String {
    let text: Vec<String> = labels
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if text.is_empty() {
        "<none>".into()
    } else {
        text.join(",")
    }
}

fn container_field(o: &Value, field: &str) -> Value {
    let values: Vec<&str> = o
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(|c| c[field].as_str()).collect())
        .unwrap_or_default();
    json!(values.join(","))
}

fn pod_ready(o: &Value) -> Value {
    let total = count(o, "/spec/containers");
    let ready = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter(|c| c["ready"] == true).count())
        .unwrap_or(0);
    json!(format!("{ready}/{total}"))
}

fn service_ports(o: &Value) -> Value {
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let proto = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(np) => format!("{}:{np}/{proto}", p["port"]),
                        None => format!("{}/{proto}", p["port"]),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    json!(if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    })
}

fn default_replicas(obj: &mut Value) {
    if obj.pointer("/spec/replicas").is_none_or(Value::is_null)
        && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("replicas".into(), json!(1));
    }
}

fn default_service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("type").or_insert_with(|| json!("ClusterIP"));
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            let Some(port) = port.as_object_mut() else {
                continue;
            };
            port.entry("protocol").or_insert_with(|| json!("TCP"));
            let unset = match port.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            };
            if unset && let Some(number) = port.get("port").cloned() {
                port.insert("targetPort".into(), number);
            }
        }
    }
}

fn validate_pod(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    match obj.pointer("/spec/containers").and_then(Value::as_array) {
        None => causes.push(Cause::required("spec.containers")),
        Some(cs) if cs.is_empty() => causes.push(Cause::required("spec.containers")),
        Some(cs) => containers(cs, "spec.containers", &mut causes),
    }
    causes
}

fn containers(cs: &[Value], field: &str, causes: &mut Vec<Cause>) {
    for (i, c) in cs.iter().enumerate() {
        match c.get("name").and_then(Value::as_str) {
            None | Some("") => causes.push(Cause::required(format!("{field}[{i}].name"))),
            Some(name) => {
                if let Some(cause) =
                    crate::meta::check_name(NameRule::Label, name, &format!("{field}[{i}].name"))
                {
                    causes.push(cause);
                }
            }
        }
        if c.get("image")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(Cause::required(format!("{field}[{i}].image")));
        }
    }
}

fn validate_workload(obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(replicas) = obj.pointer("/spec/replicas").and_then(Value::as_i64)
        && replicas < 0
    {
        causes.push(Cause::invalid(
            "spec.replicas",
            &json!(replicas),
            "must be greater than or equal to 0",
        ));
    }
    let selector = obj.pointer("/spec/selector");
    if selector.is_none_or(Value::is_null) {
        causes.push(Cause::required("spec.selector"));
    } else if let (Some(match_labels), Some(labels)) = (
        obj.pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object),
        obj.pointer("/spec/template/metadata/labels")
            .and_then(Value::as_object),
    ) && match_labels.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        causes.push(Cause::invalid(
            "spec.template.metadata.labels",
            &Value::Object(labels.clone()),
            "`selector` does not match template `labels`",
        ));
    }
    match obj
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
    {
        None => causes.push(Cause::required("spec.template.spec.containers")),
        Some(cs) if cs.is_empty() => causes.push(Cause::required("spec.template.spec.containers")),
        Some(cs) => containers(cs, "spec.template.spec.containers", &mut causes),
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_codec_reports_wrong_types_with_paths_and_drops_unknown_fields() {
        let err = typed::<apps::v1::Deployment>(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": "three"}
        }))
        .expect_err("a string is no replica count");
        assert!(
            err.starts_with("spec.replicas: invalid type: string"),
            "{err}"
        );

        let (out, unknown) = typed::<core::v1::ConfigMap>(json!({
            "metadata": {"name": "x", "labels": null, "bogus": 1},
            "data": {"a": "1"},
            "extra": {"nested": true}
        }))
        .expect("decodes");
        assert_eq!(
            unknown,
            vec!["extra".to_string(), "metadata.bogus".to_string()]
        );
        assert_eq!(out["data"]["a"], "1");
        assert!(out.get("extra").is_none());
        assert_eq!(out["kind"], "ConfigMap");
    }

    #[test]
    fn catalog_has_unique_paths_and_kinds() {
        let all = catalog();
        let mut paths: Vec<_> = all.iter().map(|r| (&r.group, &r.plural)).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), all.len());
    }
}
