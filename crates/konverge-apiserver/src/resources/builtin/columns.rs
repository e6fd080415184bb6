//! `kubectl get` columns of the built-in kinds, as kube-apiserver's printers compute them.
//!
//! The server always prints the wide table: every column is in every row, and kubectl hides
//! the ones with priority 1 unless asked for `-o wide`. Each function here is one kind's
//! column list, Name included, in kube-apiserver's order.

use serde_json::{Value, json};

use crate::resources::{Cell, Column};

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

fn name() -> Column {
    let mut column = col("Name", "string", |o| {
        json!(
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
        )
    });
    column.format = "name".into();
    column.description = NAME_DESCRIPTION.into();
    column
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

fn age() -> Column {
    let mut column = col("Age", "string", |o| {
        json!(crate::resources::meta::age(o, jiff::Timestamp::now()))
    });
    column.description = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into();
    column
}

/// Name, the given columns, then Age: the shape of most kinds' tables.
fn named(columns: Vec<Column>) -> Vec<Column> {
    let mut all = vec![name()];
    all.extend(columns);
    all.push(age());
    all
}

/// The table of kinds without a printer (kube-apiserver's default table convertor): Name and
/// `Created At`.
pub(super) fn default_table() -> Vec<Column> {
    let mut created = col("Created At", "date", |o| {
        let at = o
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .unwrap_or("0001-01-01T00:00:00Z");
        json!(at)
    });
    created.description = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into();
    vec![name(), created]
}

fn text(o: &Value, pointer: &str) -> String {
    o.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn str_at(o: &Value, pointer: &str) -> Value {
    json!(text(o, pointer))
}

fn str_or(o: &Value, pointer: &str, default: &str) -> Value {
    let value = text(o, pointer);
    json!(if value.is_empty() { default } else { &value })
}

fn int_at(o: &Value, pointer: &str) -> i64 {
    o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn bool_at(o: &Value, pointer: &str, default: bool) -> Value {
    json!(
        o.pointer(pointer)
            .and_then(Value::as_bool)
            .unwrap_or(default)
    )
}

fn count(o: &Value, pointer: &str) -> usize {
    match o.pointer(pointer) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn strings(o: &Value, pointer: &str) -> Vec<String> {
    o.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn none_if_empty(s: String) -> Value {
    json!(if s.is_empty() {
        "<none>".to_string()
    } else {
        s
    })
}

/// `labels.FormatLabels`: sorted `k=v` pairs, `<none>` when empty.
fn labels_text(labels: Option<&Value>) -> String {
    let mut pairs: Vec<String> = labels
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A `LabelSelector` in selector syntax, requirements sorted by key (empty for none), or
/// `on_error` when it is no valid selector.
fn selector_text(selector: Option<&Value>, on_error: &str) -> String {
    let Some(selector) = selector.filter(|s| s.is_object()) else {
        return String::new();
    };
    konverge_apimachinery::selector::LabelSelector::from_json(selector)
        .map(|s| s.to_string())
        .unwrap_or_else(|_| on_error.to_string())
}

/// `metav1.FormatLabelSelector`: the selector, or `<none>`.
fn format_selector(selector: Option<&Value>) -> Value {
    none_if_empty(selector_text(selector, "<error>"))
}

fn container_field(o: &Value, containers: &str, field: &str) -> Value {
    let values: Vec<&str> = o
        .pointer(containers)
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(|c| c[field].as_str()).collect())
        .unwrap_or_default();
    json!(values.join(","))
}

fn template_columns(containers: &'static str) -> Vec<Column> {
    // Function pointers cannot capture, so the two container paths in use get a pair each.
    match containers {
        "/spec/jobTemplate/spec/template/spec/containers" => vec![
            wide(col("Containers", "string", |o| {
                container_field(o, "/spec/jobTemplate/spec/template/spec/containers", "name")
            })),
            wide(col("Images", "string", |o| {
                container_field(
                    o,
                    "/spec/jobTemplate/spec/template/spec/containers",
                    "image",
                )
            })),
        ],
        _ => vec![
            wide(col("Containers", "string", |o| {
                container_field(o, "/spec/template/spec/containers", "name")
            })),
            wide(col("Images", "string", |o| {
                container_field(o, "/spec/template/spec/containers", "image")
            })),
        ],
    }
}

/// How long ago an RFC 3339 timestamp was, or `<unknown>`.
fn since(o: &Value, pointer: &str) -> String {
    o.pointer(pointer)
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| {
            crate::resources::meta::human_duration(
                jiff::Timestamp::now().as_second() - t.as_second(),
            )
        })
        .unwrap_or_else(|| "<unknown>".into())
}

fn condition<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
}

fn condition_true(o: &Value, kind: &str) -> bool {
    condition(o, kind).is_some_and(|c| c["status"] == "True")
}

/// `IntOrString` as Go prints it.
fn int_or_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// At most `max` items joined by commas, with ` + N more...` past that; `<unset>` when empty.
fn list_with_more(items: Vec<String>, max: usize) -> Value {
    let total = items.len();
    let shown: Vec<String> = items.into_iter().take(max).collect();
    let joined = shown.join(",");
    if total > max {
        json!(format!("{joined} + {} more...", total - max))
    } else if joined.is_empty() {
        json!("<unset>")
    } else {
        json!(joined)
    }
}

pub(super) fn pods() -> Vec<Column> {
    let mut columns = vec![
        name(),
        col("Ready", "string", |o| pod_status(o).ready),
        col("Status", "string", |o| pod_status(o).reason),
        col("Restarts", "string", |o| pod_status(o).restarts),
        age(),
        wide(col("IP", "string", |o| {
            str_or(o, "/status/podIPs/0/ip", "<none>")
        })),
        wide(col("Node", "string", |o| {
            str_or(o, "/spec/nodeName", "<none>")
        })),
        wide(col("Nominated Node", "string", |o| {
            str_or(o, "/status/nominatedNodeName", "<none>")
        })),
        wide(col("Readiness Gates", "string", |o| {
            let gates = o
                .pointer("/spec/readinessGates")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if gates.is_empty() {
                return json!("<none>");
            }
            let ready = gates
                .iter()
                .filter(|g| {
                    g["conditionType"]
                        .as_str()
                        .is_some_and(|t| condition_true(o, t))
                })
                .count();
            json!(format!("{ready}/{}", gates.len()))
        })),
    ];
    columns[2].description =
        "The aggregate readiness state of this pod for accepting traffic.".into();
    columns
}

struct PodStatus {
    ready: Value,
    reason: Value,
    restarts: Value,
}

/// kube-apiserver's pod Status, Ready and Restarts cells.
fn pod_status(o: &Value) -> PodStatus {
    let empty = Vec::new();
    let array = |p: &str| o.pointer(p).and_then(Value::as_array).unwrap_or(&empty);
    let init_specs = array("/spec/initContainers");
    let sidecar = |name: &str| {
        init_specs
            .iter()
            .any(|c| c["name"] == name && c["restartPolicy"] == "Always")
    };
    let total = array("/spec/containers").len()
        + init_specs
            .iter()
            .filter(|c| c["restartPolicy"] == "Always")
            .count();
    let mut ready = 0;
    let mut restarts = 0;
    let mut sidecar_restarts = 0;
    let mut reason = text(o, "/status/phase");
    let status_reason = text(o, "/status/reason");
    if !status_reason.is_empty() {
        reason = status_reason.clone();
    }
    if array("/status/conditions")
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let mut initializing = false;
    for (i, c) in array("/status/initContainerStatuses").iter().enumerate() {
        let count = c["restartCount"].as_i64().unwrap_or(0);
        restarts += count;
        let name = c["name"].as_str().unwrap_or("");
        if sidecar(name) {
            sidecar_restarts += count;
        }
        let terminated = &c["state"]["terminated"];
        let waiting = &c["state"]["waiting"];
        if terminated.is_object() && terminated["exitCode"].as_i64() == Some(0) {
            continue;
        }
        if sidecar(name) && c["started"] == true {
            if c["ready"] == true {
                ready += 1;
            }
            continue;
        }
        initializing = true;
        reason = if terminated.is_object() {
            match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None if terminated["signal"].as_i64().unwrap_or(0) != 0 => {
                    format!("Init:Signal:{}", terminated["signal"])
                }
                None => format!(
                    "Init:ExitCode:{}",
                    terminated["exitCode"].as_i64().unwrap_or(0)
                ),
            }
        } else if let Some(r) = waiting["reason"]
            .as_str()
            .filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            format!("Init:{r}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        break;
    }
    if !initializing || condition_true(o, "Initialized") {
        restarts = sidecar_restarts;
        let mut has_running = false;
        for c in array("/status/containerStatuses").iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            let waiting = &c["state"]["waiting"];
            let terminated = &c["state"]["terminated"];
            if let Some(r) = waiting["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = r.into();
            } else if let Some(r) = terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = r.into();
            } else if terminated.is_object() {
                reason = if terminated["signal"].as_i64().unwrap_or(0) != 0 {
                    format!("Signal:{}", terminated["signal"])
                } else {
                    format!("ExitCode:{}", terminated["exitCode"].as_i64().unwrap_or(0))
                };
            } else if c["ready"] == true && c["state"]["running"].is_object() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true(o, "Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    let phase = text(o, "/status/phase");
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        if status_reason == "NodeLost" {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    PodStatus {
        ready: json!(format!("{ready}/{total}")),
        reason: json!(reason),
        restarts: json!(restarts.to_string()),
    }
}

pub(super) fn pod_templates() -> Vec<Column> {
    vec![
        name(),
        col("Containers", "string", |o| {
            container_field(o, "/template/spec/containers", "name")
        }),
        col("Images", "string", |o| {
            container_field(o, "/template/spec/containers", "image")
        }),
        col("Pod Labels", "string", |o| {
            json!(labels_text(o.pointer("/template/metadata/labels")))
        }),
    ]
}

pub(super) fn replication_controllers() -> Vec<Column> {
    let mut columns = vec![
        name(),
        col("Desired", "integer", |o| json!(int_at(o, "/spec/replicas"))),
        col("Current", "integer", |o| {
            json!(int_at(o, "/status/replicas"))
        }),
        col("Ready", "integer", |o| {
            json!(int_at(o, "/status/readyReplicas"))
        }),
        age(),
    ];
    columns.extend(template_columns("/spec/template/spec/containers"));
    columns.push(wide(col("Selector", "string", |o| {
        json!(labels_text(o.pointer("/spec/selector")))
    })));
    columns
}

pub(super) fn replica_sets() -> Vec<Column> {
    let mut columns = replication_controllers();
    if let Some(last) = columns.last_mut() {
        last.cell = Cell::Fn(|o| format_selector(o.pointer("/spec/selector")));
    }
    columns
}

pub(super) fn daemon_sets() -> Vec<Column> {
    let mut columns = vec![
        name(),
        col("Desired", "integer", |o| {
            json!(int_at(o, "/status/desiredNumberScheduled"))
        }),
        col("Current", "integer", |o| {
            json!(int_at(o, "/status/currentNumberScheduled"))
        }),
        col("Ready", "integer", |o| {
            json!(int_at(o, "/status/numberReady"))
        }),
        col("Up-to-date", "integer", |o| {
            json!(int_at(o, "/status/updatedNumberScheduled"))
        }),
        col("Available", "integer", |o| {
            json!(int_at(o, "/status/numberAvailable"))
        }),
        col("Node Selector", "string", |o| {
            json!(labels_text(o.pointer("/spec/template/spec/nodeSelector")))
        }),
        age(),
    ];
    columns.extend(template_columns("/spec/template/spec/containers"));
    columns.push(wide(col("Selector", "string", |o| {
        format_selector(o.pointer("/spec/selector"))
    })));
    columns
}

pub(super) fn deployments() -> Vec<Column> {
    let mut columns = vec![
        name(),
        col("Ready", "string", |o| {
            json!(format!(
                "{}/{}",
                int_at(o, "/status/readyReplicas"),
                int_at(o, "/spec/replicas")
            ))
        }),
        col("Up-to-date", "string", |o| {
            json!(int_at(o, "/status/updatedReplicas"))
        }),
        col("Available", "string", |o| {
            json!(int_at(o, "/status/availableReplicas"))
        }),
        age(),
    ];
    columns.extend(template_columns("/spec/template/spec/containers"));
    columns.push(wide(col("Selector", "string", |o| {
        json!(selector_text(o.pointer("/spec/selector"), "<invalid>"))
    })));
    columns
}

pub(super) fn stateful_sets() -> Vec<Column> {
    let mut columns = vec![
        name(),
        col("Ready", "string", |o| {
            json!(format!(
                "{}/{}",
                int_at(o, "/status/readyReplicas"),
                int_at(o, "/spec/replicas")
            ))
        }),
        age(),
    ];
    columns.extend(template_columns("/spec/template/spec/containers"));
    columns
}

pub(super) fn controller_revisions() -> Vec<Column> {
    named(vec![
        col("Controller", "string", |o| {
            let owner = o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .and_then(|refs| refs.iter().find(|r| r["controller"] == true));
            let Some(owner) = owner else {
                return json!("<none>");
            };
            let api_version = owner["apiVersion"].as_str().unwrap_or("");
            let group = api_version
                .rsplit_once('/')
                .map(|(g, _)| g)
                .unwrap_or_default();
            let kind = owner["kind"].as_str().unwrap_or("");
            let group_kind = if group.is_empty() {
                kind.to_string()
            } else {
                format!("{kind}.{group}")
            };
            json!(format!(
                "{}/{}",
                group_kind.to_lowercase(),
                owner["name"].as_str().unwrap_or("")
            ))
        }),
        col("Revision", "string", |o| json!(int_at(o, "/revision"))),
    ])
}

pub(super) fn jobs() -> Vec<Column> {
    let mut columns = vec![
        name(),
        col("Status", "string", |o| {
            let first_true = |kind: &str| condition(o, kind).is_some_and(|c| c["status"] == "True");
            json!(if first_true("Complete") {
                "Complete"
            } else if first_true("Failed") {
                "Failed"
            } else if o.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating"
            } else if first_true("Suspended") {
                "Suspended"
            } else if first_true("FailureTarget") {
                "FailureTarget"
            } else {
                "Running"
            })
        }),
        col("Completions", "string", |o| {
            let succeeded = int_at(o, "/status/succeeded");
            json!(
                match o.pointer("/spec/completions").and_then(Value::as_i64) {
                    Some(n) => format!("{succeeded}/{n}"),
                    None => {
                        let parallelism = o
                            .pointer("/spec/parallelism")
                            .and_then(Value::as_i64)
                            .unwrap_or(1);
                        if parallelism > 1 {
                            format!("{succeeded}/1 of {parallelism}")
                        } else {
                            format!("{succeeded}/1")
                        }
                    }
                }
            )
        }),
        col("Duration", "string", |o| {
            let at = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            };
            let Some(start) = at("/status/startTime") else {
                return json!("");
            };
            let end = at("/status/completionTime").unwrap_or_else(jiff::Timestamp::now);
            json!(crate::resources::meta::human_duration(
                end.as_second() - start.as_second()
            ))
        }),
        age(),
    ];
    columns.extend(template_columns("/spec/template/spec/containers"));
    columns.push(wide(col("Selector", "string", |o| {
        format_selector(o.pointer("/spec/selector"))
    })));
    columns
}

pub(super) fn cron_jobs() -> Vec<Column> {
    let mut columns = vec![
        name(),
        col("Schedule", "string", |o| str_at(o, "/spec/schedule")),
        col("Timezone", "string", |o| {
            str_or(o, "/spec/timeZone", "<none>")
        }),
        col("Suspend", "boolean", |o| {
            json!(match o.pointer("/spec/suspend").and_then(Value::as_bool) {
                Some(true) => "True",
                Some(false) => "False",
                None => "<unset>",
            })
        }),
        col("Active", "integer", |o| json!(count(o, "/status/active"))),
        col("Last Schedule", "string", |o| {
            if o.pointer("/status/lastScheduleTime")
                .is_none_or(Value::is_null)
            {
                json!("<none>")
            } else {
                json!(since(o, "/status/lastScheduleTime"))
            }
        }),
        age(),
    ];
    columns.extend(template_columns(
        "/spec/jobTemplate/spec/template/spec/containers",
    ));
    columns.push(wide(col("Selector", "string", |o| {
        format_selector(o.pointer("/spec/jobTemplate/spec/selector"))
    })));
    columns
}

pub(super) fn services() -> Vec<Column> {
    named(vec![
        col("Type", "string", |o| str_at(o, "/spec/type")),
        col("Cluster-IP", "string", |o| {
            str_or(o, "/spec/clusterIPs/0", "<none>")
        }),
        col("External-IP", "string", |o| {
            let external = strings(o, "/spec/externalIPs");
            match text(o, "/spec/type").as_str() {
                "ClusterIP" | "NodePort" => none_if_empty(external.join(",")),
                "LoadBalancer" => {
                    let lb = load_balancer(o);
                    if !external.is_empty() {
                        let mut all: Vec<String> = if lb.is_empty() {
                            Vec::new()
                        } else {
                            lb.split(',').map(String::from).collect()
                        };
                        all.extend(external);
                        json!(all.join(","))
                    } else if lb.is_empty() {
                        json!("<pending>")
                    } else {
                        json!(lb)
                    }
                }
                "ExternalName" => str_at(o, "/spec/externalName"),
                _ => json!("<unknown>"),
            }
        }),
        col("Port(s)", "string", |o| {
            let ports: Vec<String> = o
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            let proto = p["protocol"].as_str().unwrap_or("TCP");
                            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                                Some(np) => format!("{}:{np}/{proto}", p["port"]),
                                None => format!("{}/{proto}", p["port"]),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            none_if_empty(ports.join(","))
        }),
    ])
    .into_iter()
    .chain([wide(col("Selector", "string", |o| {
        json!(labels_text(o.pointer("/spec/selector")))
    }))])
    .collect()
}

/// The load balancer's ingress points: a sorted set of IPs, or hostnames where there is no IP.
fn load_balancer(o: &Value) -> String {
    let mut points: Vec<String> = o
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| {
                    i["ip"]
                        .as_str()
                        .filter(|s| !s.is_empty())
                        .or_else(|| i["hostname"].as_str().filter(|s| !s.is_empty()))
                        .map(String::from)
                })
                .collect()
        })
        .unwrap_or_default();
    points.sort();
    points.dedup();
    points.join(",")
}

pub(super) fn ingresses() -> Vec<Column> {
    named(vec![
        col("Class", "string", |o| {
            str_or(o, "/spec/ingressClassName", "<none>")
        }),
        col("Hosts", "string", |o| {
            let rules = o
                .pointer("/spec/rules")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut hosts = Vec::new();
            let mut more = false;
            for rule in &rules {
                let Some(host) = rule["host"].as_str().filter(|h| !h.is_empty()) else {
                    continue;
                };
                if hosts.len() == 3 {
                    more = true;
                    break;
                }
                hosts.push(host.to_string());
            }
            let mut out = hosts.join(",");
            if more {
                out = format!("{out} + {} more...", rules.len() - 3);
            }
            json!(if out.is_empty() { "*".to_string() } else { out })
        }),
        col("Address", "string", |o| json!(load_balancer(o))),
        col("Ports", "string", |o| {
            json!(if count(o, "/spec/tls") > 0 {
                "80, 443"
            } else {
                "80"
            })
        }),
    ])
}

pub(super) fn ingress_classes() -> Vec<Column> {
    named(vec![
        col("Controller", "string", |o| str_at(o, "/spec/controller")),
        col("Parameters", "string", |o| {
            let Some(p) = o.pointer("/spec/parameters").filter(|p| p.is_object()) else {
                return json!("<none>");
            };
            let kind = p["kind"].as_str().unwrap_or("");
            let name = p["name"].as_str().unwrap_or("");
            json!(match p["apiGroup"].as_str() {
                Some(group) => format!("{kind}.{group}/{name}"),
                None => format!("{kind}/{name}"),
            })
        }),
    ])
}

fn host_port(ip: &str, port: &Value) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

pub(super) fn endpoints() -> Vec<Column> {
    named(vec![col("Endpoints", "string", |o| {
        let subsets = o
            .get("subsets")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if subsets.is_empty() {
            return json!("<none>");
        }
        let mut list = Vec::new();
        let mut count = 0;
        let mut more = false;
        for subset in &subsets {
            let addresses: Vec<&str> = subset["addresses"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x["ip"].as_str()).collect())
                .unwrap_or_default();
            let ports = subset["ports"].as_array().cloned().unwrap_or_default();
            if ports.is_empty() {
                count += addresses.len();
                for ip in &addresses {
                    if list.len() == 3 {
                        more = true;
                    } else if !more {
                        list.push(ip.to_string());
                    }
                }
                continue;
            }
            for port in &ports {
                count += addresses.len();
                for ip in &addresses {
                    if list.len() == 3 {
                        more = true;
                    } else if !more {
                        list.push(host_port(ip, &port["port"]));
                    }
                }
            }
        }
        let mut out = list.join(",");
        if more {
            out = format!("{out} + {} more...", count - 3);
        }
        json!(out)
    })])
}

pub(super) fn endpoint_slices() -> Vec<Column> {
    named(vec![
        col("AddressType", "string", |o| str_at(o, "/addressType")),
        col("Ports", "string", |o| {
            let ports: Vec<String> = o
                .get("ports")
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .map(|p| match (p["port"].as_i64(), p["name"].as_str()) {
                            (Some(n), _) => n.to_string(),
                            (None, Some(name)) => name.to_string(),
                            _ => "*".to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            list_with_more(ports, 3)
        }),
        col("Endpoints", "string", |o| {
            let addresses: Vec<String> = o
                .get("endpoints")
                .and_then(Value::as_array)
                .map(|es| es.iter().flat_map(|e| strings(e, "/addresses")).collect())
                .unwrap_or_default();
            list_with_more(addresses, 3)
        }),
    ])
}

pub(super) fn nodes() -> Vec<Column> {
    fn address(o: &Value, kind: &str) -> Value {
        let found = o
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x["type"] == kind))
            .and_then(|x| x["address"].as_str());
        json!(found.unwrap_or("<none>"))
    }
    vec![
        name(),
        col("Status", "string", |o| {
            let mut status = match condition(o, "Ready") {
                Some(c) if c["status"] == "True" => "Ready".to_string(),
                Some(_) => "NotReady".to_string(),
                None => "Unknown".to_string(),
            };
            if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
                status.push_str(",SchedulingDisabled");
            }
            json!(status)
        }),
        col("Roles", "string", |o| {
            let mut roles: Vec<String> = Vec::new();
            if let Some(labels) = o.pointer("/metadata/labels").and_then(Value::as_object) {
                for (k, v) in labels {
                    if let Some(role) = k.strip_prefix("node-role.kubernetes.io/")
                        && !role.is_empty()
                    {
                        roles.push(role.to_string());
                    }
                    if k == "kubernetes.io/role"
                        && let Some(role) = v.as_str().filter(|r| !r.is_empty())
                    {
                        roles.push(role.to_string());
                    }
                }
            }
            roles.sort();
            roles.dedup();
            none_if_empty(roles.join(","))
        }),
        age(),
        col("Version", "string", |o| {
            str_at(o, "/status/nodeInfo/kubeletVersion")
        }),
        wide(col("Internal-IP", "string", |o| address(o, "InternalIP"))),
        wide(col("External-IP", "string", |o| address(o, "ExternalIP"))),
        wide(col("OS-Image", "string", |o| {
            str_or(o, "/status/nodeInfo/osImage", "<unknown>")
        })),
        wide(col("Kernel-Version", "string", |o| {
            str_or(o, "/status/nodeInfo/kernelVersion", "<unknown>")
        })),
        wide(col("Container-Runtime", "string", |o| {
            str_or(o, "/status/nodeInfo/containerRuntimeVersion", "<unknown>")
        })),
    ]
}

/// Core Events (events.k8s.io Events are served converted from the same stored objects, and
/// printed from them, as kube-apiserver prints both from its internal type).
pub(super) fn events() -> Vec<Column> {
    fn first_seen(o: &Value) -> String {
        if o.get("firstTimestamp").and_then(Value::as_str).is_some() {
            since(o, "/firstTimestamp")
        } else {
            since(o, "/eventTime")
        }
    }
    fn core(o: &Value) -> std::borrow::Cow<'_, Value> {
        if o.get("regarding").is_some() || o.get("note").is_some() {
            let mut c = o.clone();
            super::events_to_core(&mut c);
            std::borrow::Cow::Owned(c)
        } else {
            std::borrow::Cow::Borrowed(o)
        }
    }
    let mut name_column = name();
    name_column.priority = 1;
    vec![
        col("Last Seen", "string", |o| {
            let o = core(o);
            json!(if o.pointer("/series/lastObservedTime").is_some() {
                since(&o, "/series/lastObservedTime")
            } else if o.get("lastTimestamp").and_then(Value::as_str).is_some() {
                since(&o, "/lastTimestamp")
            } else {
                first_seen(&o)
            })
        }),
        col("Type", "string", |o| str_at(&core(o), "/type")),
        col("Reason", "string", |o| str_at(&core(o), "/reason")),
        col("Object", "string", |o| {
            let o = core(o);
            let kind = text(&o, "/involvedObject/kind").to_lowercase();
            let name = text(&o, "/involvedObject/name");
            json!(if name.is_empty() {
                kind
            } else {
                format!("{kind}/{name}")
            })
        }),
        wide(col("Subobject", "string", |o| {
            str_at(&core(o), "/involvedObject/fieldPath")
        })),
        wide(col("Source", "string", |o| {
            let o = core(o);
            let mut component = text(&o, "/source/component");
            if component.is_empty() {
                component = text(&o, "/reportingComponent");
            }
            let mut instance = text(&o, "/source/host");
            if instance.is_empty() {
                instance = text(&o, "/reportingInstance");
            }
            json!(if instance.is_empty() {
                component
            } else {
                format!("{component}, {instance}")
            })
        })),
        col("Message", "string", |o| {
            json!(text(&core(o), "/message").trim())
        }),
        wide(col("First Seen", "string", |o| json!(first_seen(&core(o))))),
        wide(col("Count", "string", |o| {
            let o = core(o);
            let count = match o.pointer("/series/count").and_then(Value::as_i64) {
                Some(n) => n,
                None => match int_at(&o, "/count") {
                    0 => 1,
                    n => n,
                },
            };
            json!(count)
        })),
        name_column,
    ]
}

pub(super) fn namespaces() -> Vec<Column> {
    named(vec![col("Status", "string", |o| {
        str_at(o, "/status/phase")
    })])
}

pub(super) fn secrets() -> Vec<Column> {
    named(vec![
        col("Type", "string", |o| str_at(o, "/type")),
        col("Data", "string", |o| json!(count(o, "/data"))),
    ])
}

pub(super) fn service_accounts() -> Vec<Column> {
    named(vec![col("Secrets", "string", |o| {
        json!(count(o, "/secrets"))
    })])
}

pub(super) fn config_maps() -> Vec<Column> {
    named(vec![col("Data", "string", |o| {
        json!(count(o, "/data") + count(o, "/binaryData"))
    })])
}

/// `GetAccessModesAsString`: each mode once, in a fixed order.
fn access_modes(modes: Vec<String>) -> String {
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.iter().any(|m| m == mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

fn quantity_or_zero(o: &Value, pointer: &str) -> Value {
    str_or(o, pointer, "0")
}

fn storage_class(o: &Value) -> Value {
    match o
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .and_then(Value::as_str)
    {
        Some(class) => json!(class),
        None => str_at(o, "/spec/storageClassName"),
    }
}

fn terminating_or_phase(o: &Value) -> Value {
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        json!("Terminating")
    } else {
        str_at(o, "/status/phase")
    }
}

pub(super) fn persistent_volumes() -> Vec<Column> {
    vec![
        name(),
        col("Capacity", "string", |o| {
            quantity_or_zero(o, "/spec/capacity/storage")
        }),
        col("Access Modes", "string", |o| {
            json!(access_modes(strings(o, "/spec/accessModes")))
        }),
        col("Reclaim Policy", "string", |o| {
            str_at(o, "/spec/persistentVolumeReclaimPolicy")
        }),
        col("Status", "string", terminating_or_phase),
        col("Claim", "string", |o| {
            if o.pointer("/spec/claimRef").is_none_or(Value::is_null) {
                return json!("");
            }
            json!(format!(
                "{}/{}",
                text(o, "/spec/claimRef/namespace"),
                text(o, "/spec/claimRef/name")
            ))
        }),
        col("StorageClass", "string", storage_class),
        col("VolumeAttributesClass", "string", |o| {
            str_or(o, "/spec/volumeAttributesClassName", "<unset>")
        }),
        col("Reason", "string", |o| str_at(o, "/status/reason")),
        age(),
        wide(col("VolumeMode", "string", |o| {
            str_or(o, "/spec/volumeMode", "<unset>")
        })),
    ]
}

pub(super) fn persistent_volume_claims() -> Vec<Column> {
    vec![
        name(),
        col("Status", "string", terminating_or_phase),
        col("Volume", "string", |o| str_at(o, "/spec/volumeName")),
        col("Capacity", "string", |o| {
            if text(o, "/spec/volumeName").is_empty() {
                json!("")
            } else {
                quantity_or_zero(o, "/status/capacity/storage")
            }
        }),
        col("Access Modes", "string", |o| {
            if text(o, "/spec/volumeName").is_empty() {
                json!("")
            } else {
                json!(access_modes(strings(o, "/status/accessModes")))
            }
        }),
        col("StorageClass", "string", storage_class),
        col("VolumeAttributesClass", "string", |o| {
            str_or(o, "/spec/volumeAttributesClassName", "<unset>")
        }),
        age(),
        wide(col("VolumeMode", "string", |o| {
            str_or(o, "/spec/volumeMode", "<unset>")
        })),
    ]
}

/// A ComponentStatus's first `Healthy` condition (its conditions are not under `status`).
fn healthy(o: &Value) -> Option<&Value> {
    o.get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Healthy"))
}

pub(super) fn component_statuses() -> Vec<Column> {
    vec![
        name(),
        col("Status", "string", |o| {
            json!(match healthy(o) {
                Some(c) if c["status"] == "True" => "Healthy",
                Some(_) => "Unhealthy",
                None => "Unknown",
            })
        }),
        col("Message", "string", |o| {
            json!(healthy(o).and_then(|c| c["message"].as_str()).unwrap_or(""))
        }),
        col("Error", "string", |o| {
            json!(healthy(o).and_then(|c| c["error"].as_str()).unwrap_or(""))
        }),
    ]
}

/// HPA tables read autoscaling/v2 objects (v1 objects are converted first).
pub(super) fn horizontal_pod_autoscalers() -> Vec<Column> {
    named(vec![
        col("Reference", "string", |o| {
            json!(format!(
                "{}/{}",
                text(o, "/spec/scaleTargetRef/kind"),
                text(o, "/spec/scaleTargetRef/name")
            ))
        }),
        col("Targets", "string", |o| {
            let mut o = o.clone();
            if o.pointer("/spec/targetCPUUtilizationPercentage").is_some()
                || o.pointer("/spec/metrics").is_none()
            {
                super::hpa_to_v2(&mut o);
            }
            json!(hpa_targets(&o))
        }),
        col("MinPods", "string", |o| {
            json!(
                match o.pointer("/spec/minReplicas").and_then(Value::as_i64) {
                    Some(n) => n.to_string(),
                    None => "<unset>".into(),
                }
            )
        }),
        col("MaxPods", "string", |o| {
            json!(int_at(o, "/spec/maxReplicas"))
        }),
        col("Replicas", "string", |o| {
            json!(int_at(o, "/status/currentReplicas"))
        }),
    ])
}

fn hpa_targets(o: &Value) -> String {
    let specs = o
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if specs.is_empty() {
        return "<none>".into();
    }
    let statuses = o
        .pointer("/status/currentMetrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let quantity = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let unknown = || "<unknown>".to_string();
    let mut texts = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let status = statuses.get(i);
        let kind = spec["type"].as_str().unwrap_or("");
        let field = match kind {
            "External" => "external",
            "Pods" => "pods",
            "Object" => "object",
            "Resource" => "resource",
            "ContainerResource" => "containerResource",
            _ => {
                texts.push("<unknown type>".to_string());
                continue;
            }
        };
        let target = &spec[field]["target"];
        let current = status.map(|s| &s[field]["current"]);
        let current_of = |key: &str| {
            current
                .and_then(|c| quantity(&c[key]))
                .unwrap_or_else(unknown)
        };
        texts.push(match kind {
            "External" | "Object" => match quantity(&target["averageValue"]) {
                Some(avg) => format!("{}/{avg} (avg)", current_of("averageValue")),
                None => format!(
                    "{}/{}",
                    current_of("value"),
                    quantity(&target["value"]).unwrap_or_default()
                ),
            },
            "Pods" => format!(
                "{}/{}",
                current_of("averageValue"),
                quantity(&target["averageValue"]).unwrap_or_default()
            ),
            _ => {
                let name = spec[field]["name"].as_str().unwrap_or("");
                match quantity(&target["averageValue"]) {
                    Some(avg) => format!("{name}: {}/{avg}", current_of("averageValue")),
                    None => {
                        let current = current
                            .and_then(|c| c["averageUtilization"].as_i64())
                            .map(|n| format!("{n}%"))
                            .unwrap_or_else(unknown);
                        let wanted = target["averageUtilization"]
                            .as_i64()
                            .map(|n| format!("{n}%"))
                            .unwrap_or_else(|| "<auto>".into());
                        format!("{name}: {current}/{wanted}")
                    }
                }
            }
        });
    }
    let total = texts.len();
    let mut out = texts.into_iter().take(2).collect::<Vec<_>>().join(", ");
    if total > 2 {
        out = format!("{out} + {} more...", total - 2);
    }
    out
}

pub(super) fn network_policies() -> Vec<Column> {
    named(vec![col("Pod-Selector", "string", |o| {
        format_selector(o.pointer("/spec/podSelector"))
    })])
}

pub(super) fn role_bindings() -> Vec<Column> {
    fn subjects(o: &Value, kind: &str) -> Value {
        let names: Vec<String> = o
            .get("subjects")
            .and_then(Value::as_array)
            .map(|s| {
                s.iter()
                    .filter(|s| s["kind"] == kind)
                    .map(|s| {
                        let name = s["name"].as_str().unwrap_or("");
                        if kind == "ServiceAccount" {
                            format!("{}/{name}", s["namespace"].as_str().unwrap_or(""))
                        } else {
                            name.to_string()
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!(names.join(", "))
    }
    vec![
        name(),
        col("Role", "string", |o| {
            json!(format!(
                "{}/{}",
                text(o, "/roleRef/kind"),
                text(o, "/roleRef/name")
            ))
        }),
        age(),
        wide(col("Users", "string", |o| subjects(o, "User"))),
        wide(col("Groups", "string", |o| subjects(o, "Group"))),
        wide(col("ServiceAccounts", "string", |o| {
            subjects(o, "ServiceAccount")
        })),
    ]
}

pub(super) fn certificate_signing_requests() -> Vec<Column> {
    vec![
        name(),
        age(),
        col("SignerName", "string", |o| {
            str_or(o, "/spec/signerName", "<none>")
        }),
        col("Requestor", "string", |o| str_at(o, "/spec/username")),
        col("RequestedDuration", "string", |o| {
            match o.pointer("/spec/expirationSeconds").and_then(Value::as_i64) {
                Some(seconds) => json!(crate::resources::meta::human_duration(seconds)),
                None => json!("<none>"),
            }
        }),
        col("Condition", "string", |o| {
            let has = |kind: &str| condition(o, kind).is_some();
            let mut text = if has("Denied") {
                "Denied".to_string()
            } else if has("Approved") {
                "Approved".to_string()
            } else {
                "Pending".to_string()
            };
            if has("Failed") {
                text.push_str(",Failed");
            }
            if o.pointer("/status/certificate")
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty())
            {
                text.push_str(",Issued");
            }
            json!(text)
        }),
    ]
}

pub(super) fn leases() -> Vec<Column> {
    named(vec![col("Holder", "string", |o| {
        str_at(o, "/spec/holderIdentity")
    })])
}

pub(super) fn storage_classes() -> Vec<Column> {
    let mut name_column = name();
    name_column.cell = Cell::Fn(|o| {
        let name = text(o, "/metadata/name");
        let default = [
            "storageclass.kubernetes.io~1is-default-class",
            "storageclass.beta.kubernetes.io~1is-default-class",
        ]
        .iter()
        .any(|a| o.pointer(&format!("/metadata/annotations/{a}")) == Some(&json!("true")));
        json!(if default {
            format!("{name} (default)")
        } else {
            name
        })
    });
    vec![
        name_column,
        col("Provisioner", "string", |o| str_at(o, "/provisioner")),
        col("ReclaimPolicy", "string", |o| {
            str_or(o, "/reclaimPolicy", "Delete")
        }),
        col("VolumeBindingMode", "string", |o| {
            str_or(o, "/volumeBindingMode", "Immediate")
        }),
        col("AllowVolumeExpansion", "string", |o| {
            bool_at(o, "/allowVolumeExpansion", false)
        }),
        age(),
    ]
}

pub(super) fn resource_quotas() -> Vec<Column> {
    fn split(o: &Value, limits: bool) -> Value {
        let Some(hard) = o.pointer("/status/hard").and_then(Value::as_object) else {
            return json!("");
        };
        let mut keys: Vec<&String> = hard.keys().collect();
        keys.sort();
        let parts: Vec<String> = keys
            .into_iter()
            .filter(|k| {
                let pieces: Vec<&str> = k.split('.').collect();
                (pieces.len() >= 2 && pieces[0] == "limits") == limits
            })
            .map(|k| {
                let used = o
                    .pointer(&format!(
                        "/status/used/{}",
                        k.replace('~', "~0").replace('/', "~1")
                    ))
                    .and_then(Value::as_str)
                    .unwrap_or("0");
                format!("{k}: {used}/{}", hard[k].as_str().unwrap_or(""))
            })
            .collect();
        json!(parts.join(", "))
    }
    named(vec![
        col("Request", "string", |o| split(o, false)),
        col("Limit", "string", |o| split(o, true)),
    ])
}

pub(super) fn priority_classes() -> Vec<Column> {
    vec![
        name(),
        col("Value", "integer", |o| json!(int_at(o, "/value"))),
        col("Global-Default", "boolean", |o| {
            bool_at(o, "/globalDefault", false)
        }),
        age(),
        col("PreemptionPolicy", "string", |o| {
            str_at(o, "/preemptionPolicy")
        }),
    ]
}

pub(super) fn runtime_classes() -> Vec<Column> {
    named(vec![col("Handler", "string", |o| str_at(o, "/handler"))])
}

pub(super) fn volume_attachments() -> Vec<Column> {
    let mut attacher = col("Attacher", "string", |o| str_at(o, "/spec/attacher"));
    attacher.format = "name".into();
    named(vec![
        attacher,
        col("PV", "string", |o| {
            str_at(o, "/spec/source/persistentVolumeName")
        }),
        col("Node", "string", |o| str_at(o, "/spec/nodeName")),
        col("Attached", "boolean", |o| {
            bool_at(o, "/status/attached", false)
        }),
    ])
}

pub(super) fn csi_nodes() -> Vec<Column> {
    named(vec![col("Drivers", "integer", |o| {
        json!(count(o, "/spec/drivers"))
    })])
}

pub(super) fn csi_drivers() -> Vec<Column> {
    named(vec![
        col("AttachRequired", "boolean", |o| {
            bool_at(o, "/spec/attachRequired", true)
        }),
        col("PodInfoOnMount", "boolean", |o| {
            bool_at(o, "/spec/podInfoOnMount", false)
        }),
        col("StorageCapacity", "boolean", |o| {
            bool_at(o, "/spec/storageCapacity", false)
        }),
        col("TokenRequests", "string", |o| {
            match o.pointer("/spec/tokenRequests").and_then(Value::as_array) {
                None => json!("<unset>"),
                Some(requests) => json!(
                    requests
                        .iter()
                        .map(|r| r["audience"].as_str().unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            }
        }),
        col("RequiresRepublish", "boolean", |o| {
            bool_at(o, "/spec/requiresRepublish", false)
        }),
        col("Modes", "string", |o| {
            none_if_empty(strings(o, "/spec/volumeLifecycleModes").join(","))
        }),
    ])
}

pub(super) fn csi_storage_capacities() -> Vec<Column> {
    vec![
        name(),
        col("StorageClassName", "string", |o| {
            str_at(o, "/storageClassName")
        }),
        col("Capacity", "string", |o| str_or(o, "/capacity", "<unset>")),
    ]
}

pub(super) fn webhook_configurations() -> Vec<Column> {
    named(vec![col("Webhooks", "integer", |o| {
        json!(count(o, "/webhooks"))
    })])
}

pub(super) fn validating_admission_policies() -> Vec<Column> {
    named(vec![
        col("Validations", "integer", |o| {
            json!(count(o, "/spec/validations"))
        }),
        col("ParamKind", "string", |o| {
            if o.pointer("/spec/paramKind").is_none_or(Value::is_null) {
                return json!("<unset>");
            }
            json!(format!(
                "{}/{}",
                text(o, "/spec/paramKind/apiVersion"),
                text(o, "/spec/paramKind/kind")
            ))
        }),
    ])
}

pub(super) fn validating_admission_policy_bindings() -> Vec<Column> {
    named(vec![
        col("PolicyName", "string", |o| str_at(o, "/spec/policyName")),
        col("ParamRef", "string", |o| {
            let Some(param) = o.pointer("/spec/paramRef").filter(|p| p.is_object()) else {
                return json!("<unset>");
            };
            let name = param["name"].as_str().unwrap_or("");
            if !name.is_empty() {
                let ns = param["namespace"].as_str().unwrap_or("");
                return json!(if ns.is_empty() {
                    format!("*/{name}")
                } else {
                    format!("{ns}/{name}")
                });
            }
            match param.get("selector").filter(|s| s.is_object()) {
                Some(selector) => json!(selector_text(Some(selector), "<error>")),
                None => json!("<unset>"),
            }
        }),
    ])
}

pub(super) fn flow_schemas() -> Vec<Column> {
    vec![
        name(),
        col("PriorityLevel", "string", |o| {
            str_at(o, "/spec/priorityLevelConfiguration/name")
        }),
        col("MatchingPrecedence", "string", |o| {
            json!(int_at(o, "/spec/matchingPrecedence"))
        }),
        col("DistinguisherMethod", "string", |o| {
            str_or(o, "/spec/distinguisherMethod/type", "<none>")
        }),
        age(),
        col("MissingPL", "string", |o| {
            json!(
                condition(o, "Dangling")
                    .and_then(|c| c["status"].as_str())
                    .unwrap_or("?")
            )
        }),
    ]
}

pub(super) fn priority_level_configurations() -> Vec<Column> {
    fn limited(o: &Value, pointer: &str) -> Value {
        if o.pointer("/spec/limited").is_none_or(Value::is_null) {
            return json!("<none>");
        }
        match o.pointer(pointer).and_then(Value::as_i64) {
            Some(n) => json!(n),
            None => json!("<none>"),
        }
    }
    named(vec![
        col("Type", "string", |o| str_at(o, "/spec/type")),
        col("NominalConcurrencyShares", "string", |o| {
            limited(o, "/spec/limited/nominalConcurrencyShares")
        }),
        col("Queues", "string", |o| {
            limited(o, "/spec/limited/limitResponse/queuing/queues")
        }),
        col("HandSize", "string", |o| {
            limited(o, "/spec/limited/limitResponse/queuing/handSize")
        }),
        col("QueueLengthLimit", "string", |o| {
            limited(o, "/spec/limited/limitResponse/queuing/queueLengthLimit")
        }),
    ])
}

pub(super) fn pod_disruption_budgets() -> Vec<Column> {
    named(vec![
        col("Min Available", "string", |o| {
            json!(int_or_string(o.pointer("/spec/minAvailable")).unwrap_or_else(|| "N/A".into()))
        }),
        col("Max Unavailable", "string", |o| {
            json!(int_or_string(o.pointer("/spec/maxUnavailable")).unwrap_or_else(|| "N/A".into()))
        }),
        col("Allowed Disruptions", "integer", |o| {
            json!(int_at(o, "/status/disruptionsAllowed"))
        }),
    ])
}

pub(super) fn service_cidrs() -> Vec<Column> {
    named(vec![col("CIDRs", "string", |o| {
        json!(strings(o, "/spec/cidrs").join(","))
    })])
}

/// IPAddress: two column definitions and three cells, as kube-apiserver prints it (kubectl
/// shows the first two).
pub(super) fn ip_addresses() -> Vec<Column> {
    named(vec![col("ParentRef", "string", |o| {
        let Some(parent) = o.pointer("/spec/parentRef").filter(|p| p.is_object()) else {
            return json!("<none>");
        };
        let group = parent["group"].as_str().unwrap_or("");
        let resource = parent["resource"].as_str().unwrap_or("");
        let mut out = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        }
        .to_lowercase();
        if let Some(ns) = parent["namespace"].as_str().filter(|n| !n.is_empty()) {
            out.push('/');
            out.push_str(ns);
        }
        out.push('/');
        out.push_str(parent["name"].as_str().unwrap_or(""));
        json!(out)
    })])
}

pub(super) fn api_services() -> Vec<Column> {
    named(vec![
        col("Service", "string", |o| {
            if o.pointer("/spec/service").is_none_or(Value::is_null) {
                json!("Local")
            } else {
                json!(format!(
                    "{}/{}",
                    text(o, "/spec/service/namespace"),
                    text(o, "/spec/service/name")
                ))
            }
        }),
        col("Available", "string", |o| match condition(o, "Available") {
            None => json!("Unknown"),
            Some(c) if c["status"] == "True" => json!("True"),
            Some(c) => {
                let status = c["status"].as_str().unwrap_or("");
                match c["reason"].as_str().filter(|r| !r.is_empty()) {
                    Some(reason) => json!(format!("{status} ({reason})")),
                    None => json!(status),
                }
            }
        }),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_print_sorted_in_selector_syntax() {
        let selector = json!({
            "matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [
                {"key": "c", "operator": "In", "values": ["y", "x"]},
                {"key": "d", "operator": "DoesNotExist"}
            ]
        });
        assert_eq!(
            selector_text(Some(&selector), "<error>"),
            "a=1,b=2,c in (x,y),!d"
        );
        assert_eq!(format_selector(Some(&json!({}))), json!("<none>"));
    }

    #[test]
    fn pod_status_follows_kubectl() {
        let pod = json!({
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ]}
        });
        let status = pod_status(&pod);
        assert_eq!(status.ready, json!("1/2"));
        assert_eq!(status.reason, json!("CrashLoopBackOff"));
        assert_eq!(status.restarts, json!("2"));
        let init = json!({
            "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "i", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}
            ]}
        });
        assert_eq!(pod_status(&init).reason, json!("Init:0/1"));
    }

    #[test]
    fn hpa_targets_read_like_kubectl() {
        let hpa = json!({
            "spec": {"metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
                {"type": "External", "external": {"metric": {"name": "q"}, "target": {"type": "Value", "value": "5"}}}
            ]},
            "status": {"currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 30}}}
            ]}
        });
        assert_eq!(hpa_targets(&hpa), "cpu: 30%/80%, <unknown>/10 + 1 more...");
    }
}
