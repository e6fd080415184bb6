//! Field selectors of the built-in kinds: the labels kube-apiserver 1.33's field label
//! conversion functions accept, and how each value is read (its strategies' `GetAttrs`).
//! A label the object lacks reads as the empty string, as kube-apiserver compares it.

use serde_json::Value;

use crate::resources::{FieldValue, SelectableField};

fn field(label: &str, value: fn(&Value) -> String) -> SelectableField {
    SelectableField {
        label: label.into(),
        value: FieldValue::Fn(value),
    }
}

fn text(o: &Value, pointer: &str) -> String {
    match o.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

fn flag(o: &Value, pointer: &str) -> String {
    o.pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or(false)
        .to_string()
}

fn count(o: &Value, pointer: &str) -> String {
    o.pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .to_string()
}

pub(super) fn pod_fields() -> Vec<SelectableField> {
    vec![
        field("spec.nodeName", |o| text(o, "/spec/nodeName")),
        // An old name for spec.nodeName, still accepted.
        field("spec.host", |o| text(o, "/spec/nodeName")),
        field("spec.restartPolicy", |o| text(o, "/spec/restartPolicy")),
        field("spec.schedulerName", |o| text(o, "/spec/schedulerName")),
        field("spec.serviceAccountName", |o| {
            text(o, "/spec/serviceAccountName")
        }),
        field("spec.hostNetwork", |o| flag(o, "/spec/hostNetwork")),
        field("status.phase", |o| text(o, "/status/phase")),
        // Read from podIPs, which kube-apiserver keeps in step with podIP.
        field("status.podIP", |o| {
            let first = text(o, "/status/podIPs/0/ip");
            if first.is_empty() {
                text(o, "/status/podIP")
            } else {
                first
            }
        }),
        // Accepted (the downward API names it) but never indexed: always empty.
        field("status.podIPs", |_| String::new()),
        field("status.nominatedNodeName", |o| {
            text(o, "/status/nominatedNodeName")
        }),
    ]
}

pub(super) fn node_fields() -> Vec<SelectableField> {
    vec![field("spec.unschedulable", |o| {
        flag(o, "/spec/unschedulable")
    })]
}

pub(super) fn namespace_fields() -> Vec<SelectableField> {
    vec![field("status.phase", |o| text(o, "/status/phase"))]
}

pub(super) fn secret_fields() -> Vec<SelectableField> {
    vec![field("type", |o| text(o, "/type"))]
}

pub(super) fn service_fields() -> Vec<SelectableField> {
    vec![
        field("spec.clusterIP", |o| text(o, "/spec/clusterIP")),
        field("spec.type", |o| text(o, "/spec/type")),
    ]
}

pub(super) fn replication_controller_fields() -> Vec<SelectableField> {
    vec![field("status.replicas", |o| count(o, "/status/replicas"))]
}

pub(super) fn job_fields() -> Vec<SelectableField> {
    vec![field("status.successful", |o| {
        count(o, "/status/succeeded")
    })]
}

pub(super) fn csr_fields() -> Vec<SelectableField> {
    vec![field("spec.signerName", |o| text(o, "/spec/signerName"))]
}

/// `source`: the source component, or the reporting controller when there is none.
fn event_source(o: &Value) -> String {
    let component = text(o, "/source/component");
    if component.is_empty() {
        text(o, "/reportingComponent")
    } else {
        component
    }
}

/// Core Events, read from the stored (core) form.
pub(super) fn core_event_fields() -> Vec<SelectableField> {
    vec![
        field("involvedObject.kind", |o| text(o, "/involvedObject/kind")),
        field("involvedObject.namespace", |o| {
            text(o, "/involvedObject/namespace")
        }),
        field("involvedObject.name", |o| text(o, "/involvedObject/name")),
        field("involvedObject.uid", |o| text(o, "/involvedObject/uid")),
        field("involvedObject.apiVersion", |o| {
            text(o, "/involvedObject/apiVersion")
        }),
        field("involvedObject.resourceVersion", |o| {
            text(o, "/involvedObject/resourceVersion")
        }),
        field("involvedObject.fieldPath", |o| {
            text(o, "/involvedObject/fieldPath")
        }),
        field("reason", |o| text(o, "/reason")),
        field("reportingComponent", |o| text(o, "/reportingComponent")),
        field("source", event_source),
        field("type", |o| text(o, "/type")),
    ]
}

/// events.k8s.io Events: the same stored objects under the events.k8s.io names.
pub(super) fn events_v1_fields() -> Vec<SelectableField> {
    vec![
        field("regarding.kind", |o| text(o, "/involvedObject/kind")),
        field("regarding.namespace", |o| {
            text(o, "/involvedObject/namespace")
        }),
        field("regarding.name", |o| text(o, "/involvedObject/name")),
        field("regarding.uid", |o| text(o, "/involvedObject/uid")),
        field("regarding.apiVersion", |o| {
            text(o, "/involvedObject/apiVersion")
        }),
        field("regarding.resourceVersion", |o| {
            text(o, "/involvedObject/resourceVersion")
        }),
        field("regarding.fieldPath", |o| {
            text(o, "/involvedObject/fieldPath")
        }),
        field("reason", |o| text(o, "/reason")),
        field("reportingController", |o| text(o, "/reportingComponent")),
        field("source", event_source),
        field("type", |o| text(o, "/type")),
    ]
}
