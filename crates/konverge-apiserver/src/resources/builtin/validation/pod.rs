//! Pods and pod templates: containers, ports, probes and lifecycle handlers, env vars,
//! resources, security contexts, policies and names; volumes are in `volumes`, what an
//! update may change in `pod_update`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::downward::{object_field_selector, resource_field_selector};
use super::pod_update::pod_update;
use super::quantity;
use super::volumes::{local_descending_path, volume_mounts, volumes};
use super::*;
use crate::error::Cause;

/// Containers, init containers: names (unique across both), images, ports, volume mounts,
/// probes and lifecycle handlers, in kube-apiserver's order.
fn containers(spec: &Value, path: &str, volumes: &BTreeSet<String>, causes: &mut Vec<Cause>) {
    let mut names = BTreeSet::new();
    let grace = spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64);
    for list in ["containers", "initContainers"] {
        let items = spec.get(list).and_then(Value::as_array);
        if list == "containers" && items.is_none_or(Vec::is_empty) {
            causes.push(required(format!("{path}.containers")));
        }
        for (i, c) in items.into_iter().flatten().enumerate() {
            let at = format!("{path}.{list}[{i}]");
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            let name_ok = if name.is_empty() {
                causes.push(required(format!("{at}.name")));
                false
            } else {
                let problems = check_name(NameRule::Label, name, &format!("{at}.name"));
                let ok = problems.is_empty();
                causes.extend(problems);
                ok
            };
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                causes.push(required(format!("{at}.image")));
            }
            // Defaulting sets both policies; only a wrong one gets here.
            one_of(
                c,
                "terminationMessagePolicy",
                &at,
                &["File", "FallbackToLogsOnError"],
                causes,
            );
            ports(c, &at, causes);
            env(c, &at, causes);
            volume_mounts(c, &at, volumes, causes);
            one_of(
                c,
                "imagePullPolicy",
                &at,
                &["Always", "IfNotPresent", "Never"],
                causes,
            );
            resources(c, &at, causes);
            if let Some(context) = c.get("securityContext").filter(|s| !s.is_null()) {
                security_context(context, &format!("{at}.securityContext"), None, causes);
            }
            let restart = c.get("restartPolicy").and_then(Value::as_str);
            if list == "initContainers"
                && let Some(policy) = restart.filter(|p| *p != "Always")
            {
                causes.push(not_supported(
                    format!("{at}.restartPolicy"),
                    policy,
                    &["Always"],
                ));
            }
            if name_ok && !names.insert(name.to_string()) {
                causes.push(duplicate(format!("{at}.name"), &json!(name)));
            }
            if list == "initContainers" {
                // Init containers run one by one: each is checked alone, and kube-apiserver
                // names it as the first of a list of one.
                host_port_conflicts(
                    std::slice::from_ref(c),
                    &format!("{path}.initContainers"),
                    causes,
                );
            }
            if list == "containers" || restart == Some("Always") {
                handlers(c, &at, grace, causes);
            } else {
                for field in [
                    "lifecycle",
                    "livenessProbe",
                    "readinessProbe",
                    "startupProbe",
                ] {
                    if c.get(field).is_some_and(|v| !v.is_null()) {
                        causes.push(forbidden(
                            format!("{at}.{field}"),
                            "may not be set for init containers without restartPolicy=Always",
                        ));
                    }
                }
            }
            if list == "containers" && c.get("restartPolicy").is_some_and(|r| !r.is_null()) {
                causes.push(forbidden(
                    format!("{at}.restartPolicy"),
                    "may not be set for non-init containers",
                ));
            }
        }
        if list == "containers" {
            host_port_conflicts(
                items.map(Vec::as_slice).unwrap_or_default(),
                &format!("{path}.containers"),
                causes,
            );
        }
    }
}

/// `AccumulateUniqueHostPorts`: a protocol, host IP and host port is taken once.
fn host_port_conflicts(containers: &[Value], path: &str, causes: &mut Vec<Cause>) {
    let mut taken = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        for (j, port) in items(c, "ports") {
            let host_port = port.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if host_port == 0 {
                continue;
            }
            let text = |f: &str| {
                port.get(f)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let key = format!("{}/{}/{host_port}", text("protocol"), text("hostIP"));
            if !taken.insert(key.clone()) {
                causes.push(duplicate(
                    format!("{path}[{i}].ports[{j}].hostPort"),
                    &json!(key),
                ));
            }
        }
    }
}

/// `validateHostNetwork`: on the host's network a container's host port is its port (pods
/// get it defaulted so; templates may leave it 0).
fn host_network(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    if spec.get("hostNetwork") != Some(&json!(true)) {
        return;
    }
    for (i, c) in items(spec, "containers") {
        for (j, port) in items(c, "ports") {
            let host_port = port.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            let container_port = port
                .get("containerPort")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if host_port != 0 && host_port != container_port {
                causes.push(Cause::invalid(
                    format!("{path}.containers[{i}].ports[{j}].hostPort"),
                    &json!(host_port),
                    "must match `containerPort` when `hostNetwork` is true",
                ));
            }
        }
    }
}

/// Names a pod spec refers to (`serviceAccountName`, `nodeName` ...), each a DNS subdomain
/// or label when set.
fn named(spec: &Value, path: &str, fields: &[(&str, NameRule)], causes: &mut Vec<Cause>) {
    for (field, rule) in fields {
        if let Some(name) = spec
            .get(*field)
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            causes.extend(check_name(*rule, name, &format!("{path}.{field}")));
        }
    }
}

/// `ValidateQualifiedName` of each readiness gate's condition and scheduling gate's name
/// (these unique).
fn gates(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    for (i, gate) in items(spec, "readinessGates") {
        let condition = gate
            .get("conditionType")
            .and_then(Value::as_str)
            .unwrap_or("");
        for problem in konverge_apimachinery::selector::label_key_errors(condition) {
            causes.push(Cause::invalid(
                format!("{path}.readinessGates[{i}].conditionType"),
                &json!(condition),
                problem,
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for (i, gate) in items(spec, "schedulingGates") {
        let at = format!("{path}.schedulingGates[{i}]");
        let name = gate.get("name").and_then(Value::as_str).unwrap_or("");
        for problem in konverge_apimachinery::selector::label_key_errors(name) {
            causes.push(Cause::invalid(&at, &json!(name), problem));
        }
        if !seen.insert(name) {
            causes.push(duplicate(&at, &json!(name)));
        }
    }
}

/// A container's lifecycle hooks and probes (`validateLifecycle`, `validateLivenessProbe` ...).
fn handlers(c: &Value, at: &str, grace: Option<i64>, causes: &mut Vec<Cause>) {
    for hook in ["postStart", "preStop"] {
        if let Some(h) = c
            .pointer(&format!("/lifecycle/{hook}"))
            .filter(|h| !h.is_null())
        {
            handler(
                h,
                &format!("{at}.lifecycle.{hook}"),
                LIFECYCLE_HANDLERS,
                grace,
                causes,
            );
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(p) = c.get(probe).filter(|p| !p.is_null()) else {
            continue;
        };
        let path = format!("{at}.{probe}");
        handler(p, &path, PROBE_HANDLERS, grace, causes);
        non_negative(
            p,
            "",
            &path,
            &[
                "initialDelaySeconds",
                "timeoutSeconds",
                "periodSeconds",
                "successThreshold",
                "failureThreshold",
            ],
            causes,
        );
        let probe_grace = p
            .get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64);
        if let Some(g) = probe_grace.filter(|g| *g <= 0) {
            causes.push(Cause::invalid(
                format!("{path}.terminationGracePeriodSeconds"),
                &json!(g),
                "must be greater than 0",
            ));
        }
        if probe == "readinessProbe" {
            if let Some(g) = probe_grace {
                causes.push(Cause::invalid(
                    format!("{path}.terminationGracePeriodSeconds"),
                    &json!(g),
                    "must not be set for readinessProbes",
                ));
            }
        } else {
            // Go's zero value: a threshold left out is 0 (defaulting makes it 1).
            let success = p
                .get("successThreshold")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if success != 1 {
                causes.push(Cause::invalid(
                    format!("{path}.successThreshold"),
                    &json!(success),
                    "must be 1",
                ));
            }
        }
    }
}

/// The handlers a probe may use, in the order `validateHandler` looks at them.
const PROBE_HANDLERS: &[&str] = &["exec", "httpGet", "tcpSocket", "grpc"];
/// The handlers a lifecycle hook may use.
const LIFECYCLE_HANDLERS: &[&str] = &["exec", "httpGet", "tcpSocket", "sleep"];

/// `validateHandler`: exactly one handler, and that one well formed.
fn handler(h: &Value, path: &str, kinds: &[&str], grace: Option<i64>, causes: &mut Vec<Cause>) {
    let mut found = false;
    for kind in kinds {
        let Some(action) = h.get(*kind).filter(|a| !a.is_null()) else {
            continue;
        };
        let at = format!("{path}.{kind}");
        if found {
            causes.push(forbidden(at, "may not specify more than 1 handler type"));
            continue;
        }
        found = true;
        match *kind {
            "exec"
                if action
                    .get("command")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty) =>
            {
                causes.push(required(format!("{at}.command")));
            }
            "httpGet" => {
                if action
                    .get("path")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(required(format!("{at}.path")));
                }
                port_num_or_name(action.get("port"), &format!("{at}.port"), causes);
                let scheme = action.get("scheme").and_then(Value::as_str).unwrap_or("");
                if !matches!(scheme, "HTTP" | "HTTPS") {
                    causes.push(not_supported(
                        format!("{at}.scheme"),
                        scheme,
                        &["HTTP", "HTTPS"],
                    ));
                }
                for header in action
                    .get("httpHeaders")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = header.get("name").and_then(Value::as_str).unwrap_or("");
                    if name.is_empty()
                        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    {
                        // kube-apiserver reports it on the list, without the index.
                        causes.push(Cause::invalid(
                            format!("{at}.httpHeaders"),
                            &json!(name),
                            "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
                        ));
                    }
                }
            }
            "tcpSocket" => port_num_or_name(action.get("port"), &format!("{at}.port"), causes),
            "grpc" => {
                let port = action.get("port").and_then(Value::as_i64).unwrap_or(0);
                port_num_or_name(Some(&json!(port)), &format!("{at}.port"), causes);
            }
            "sleep" => {
                let seconds = action.get("seconds").and_then(Value::as_i64).unwrap_or(0);
                // Only with a grace period to compare with (pods always have one, defaulted).
                if let Some(grace) = grace
                    && !(0..=grace).contains(&seconds)
                {
                    causes.push(Cause::invalid(
                        at,
                        &json!(seconds),
                        format!(
                            "must be non-negative and less than terminationGracePeriodSeconds ({grace})"
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    if !found {
        causes.push(required_because(path, "must specify a handler type"));
    }
}

/// `ValidatePortNumOrName`: a number in range, or a valid port name.
fn port_num_or_name(port: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    match port {
        Some(Value::String(name)) => {
            for problem in port_name_problems(name) {
                causes.push(Cause::invalid(path, &json!(name), problem));
            }
        }
        other => {
            let n = other.and_then(Value::as_i64).unwrap_or(0);
            if !(1..=65535).contains(&n) {
                causes.push(Cause::invalid(
                    path,
                    &json!(n),
                    "must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
}

fn ports(container: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut names = BTreeSet::new();
    for (j, port) in items(container, "ports") {
        let path = format!("{at}.ports[{j}]");
        match port.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => causes.push(required(format!("{path}.containerPort"))),
            Some(n) if !(1..=65535).contains(&n) => causes.push(Cause::invalid(
                format!("{path}.containerPort"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            )),
            _ => {}
        }
        if let Some(n) = port.get("hostPort").and_then(Value::as_i64)
            && n != 0
            && !(1..=65535).contains(&n)
        {
            causes.push(Cause::invalid(
                format!("{path}.hostPort"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            ));
        }
        protocol(port, &path, causes);
        if let Some(name) = port
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            let problems = port_name_problems(name);
            if problems.is_empty() && !names.insert(name.to_string()) {
                causes.push(duplicate(format!("{path}.name"), &json!(name)));
            }
            for problem in problems {
                causes.push(Cause::invalid(
                    format!("{path}.name"),
                    &json!(name),
                    problem,
                ));
            }
        }
    }
}

/// A port's protocol, when set, is one Kubernetes knows.
pub(super) fn protocol(port: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(protocol) = port.get("protocol").and_then(Value::as_str)
        && !matches!(protocol, "TCP" | "UDP" | "SCTP")
    {
        causes.push(not_supported(
            format!("{path}.protocol"),
            protocol,
            &["SCTP", "TCP", "UDP"],
        ));
    }
}

/// `IsValidPortName`.
fn port_name_problems(name: &str) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if name.len() > 15 {
        problems.push("must be no more than 15 characters");
    }
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        problems.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        problems.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        problems.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("must not begin or end with a hyphen");
    }
    problems
}

fn restart_policy(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    match spec.get("restartPolicy").and_then(Value::as_str) {
        None | Some("") => causes.push(required(format!("{path}.restartPolicy"))),
        Some("Always" | "OnFailure" | "Never") => {}
        Some(other) => causes.push(not_supported(
            format!("{path}.restartPolicy"),
            other,
            &["Always", "OnFailure", "Never"],
        )),
    }
}

/// Every check of a pod spec at `path` (`spec`, `template.spec`, `spec.template.spec` ...).
pub(super) fn pod_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let volumes = volumes(spec, path, causes);
    containers(spec, path, &volumes, causes);
    host_network(spec, path, causes);
    restart_policy(spec, path, causes);
    one_of(
        spec,
        "dnsPolicy",
        path,
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        causes,
    );
    node_selector(spec, path, causes);
    if let Some(context) = spec.get("securityContext").filter(|s| !s.is_null()) {
        let at = format!("{path}.securityContext");
        security_context(context, &at, Some(spec), causes);
    }
    if let Some(affinity) = spec.get("affinity").filter(|a| !a.is_null()) {
        super::affinity::affinity(affinity, &format!("{path}.affinity"), causes);
    }
    dns_config(spec, path, causes);
    gates(spec, path, causes);
    named(
        spec,
        path,
        &[
            ("serviceAccountName", NameRule::Subdomain),
            ("nodeName", NameRule::Subdomain),
        ],
        causes,
    );
    if let Some(deadline) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && !(1..=i64::from(i32::MAX)).contains(&deadline)
    {
        causes.push(Cause::invalid(
            format!("{path}.activeDeadlineSeconds"),
            &json!(deadline),
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    named(
        spec,
        path,
        &[
            ("hostname", NameRule::Label),
            ("subdomain", NameRule::Label),
        ],
        causes,
    );
    super::affinity::tolerations(spec, &format!("{path}.tolerations"), causes);
    named(
        spec,
        path,
        &[
            ("priorityClassName", NameRule::Subdomain),
            ("runtimeClassName", NameRule::Subdomain),
        ],
        causes,
    );
    one_of(
        spec,
        "preemptionPolicy",
        path,
        &["PreemptLowerPriority", "Never"],
        causes,
    );
}

/// `validatePodSpecSecurityContext` (with the pod spec) or `ValidateSecurityContext` of a
/// container: user and group IDs, a shared process namespace, the fsGroup change policy,
/// the seccomp profile.
fn security_context(context: &Value, at: &str, pod: Option<&Value>, causes: &mut Vec<Cause>) {
    let id = |field: &str, value: Option<&Value>, causes: &mut Vec<Cause>| {
        if let Some(n) = value.and_then(Value::as_i64)
            && !(0..=i64::from(i32::MAX)).contains(&n)
        {
            causes.push(Cause::invalid(
                format!("{at}.{field}"),
                &json!(n),
                "must be between 0 and 2147483647, inclusive",
            ));
        }
    };
    let ids: &[&str] = if pod.is_some() {
        &["fsGroup", "runAsUser", "runAsGroup"]
    } else {
        &["runAsUser", "runAsGroup"]
    };
    for field in ids {
        id(field, context.get(*field), causes);
    }
    if let Some(spec) = pod {
        for (g, gid) in items(context, "supplementalGroups") {
            id(&format!("supplementalGroups[{g}]"), Some(gid), causes);
        }
        // The v1 API has these on the spec; kube-apiserver's internal one, and its path,
        // on the security context.
        let shared = spec.get("shareProcessNamespace") == Some(&json!(true));
        if shared && spec.get("hostPID") == Some(&json!(true)) {
            causes.push(Cause::invalid(
                format!("{at}.shareProcessNamespace"),
                &json!(true),
                "ShareProcessNamespace and HostPID cannot both be enabled",
            ));
        }
        if let Some(policy) = context.get("fsGroupChangePolicy").and_then(Value::as_str)
            && !matches!(policy, "Always" | "OnRootMismatch")
        {
            causes.push(not_supported(
                format!("{at}.fsGroupChangePolicy"),
                policy,
                &["Always", "OnRootMismatch"],
            ));
        }
    }
    if let Some(profile) = context.get("seccompProfile").filter(|p| !p.is_null()) {
        let path = format!("{at}.seccompProfile");
        let kind = profile.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "Localhost" | "RuntimeDefault" | "Unconfined" => {}
            "" => causes.push(required_because(
                format!("{path}.type"),
                "type is required when seccompProfile is set",
            )),
            other => causes.push(not_supported(
                format!("{path}.type"),
                other,
                &["Localhost", "RuntimeDefault", "Unconfined"],
            )),
        }
        let local = profile.get("localhostProfile").and_then(Value::as_str);
        if kind == "Localhost" {
            match local {
                None => causes.push(required_because(
                    format!("{path}.localhostProfile"),
                    "must be set when seccomp type is Localhost",
                )),
                Some(file) => {
                    local_descending_path(file, &format!("{path}.localhostProfile"), causes)
                }
            }
        }
    }
}

/// Whether requests of `name` may be below its limit: native resources but hugepages
/// (`helper.IsOvercommitAllowed`).
fn overcommit_allowed(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    native && !name.starts_with("hugepages-")
}

/// The resource names kube-apiserver knows (`helper.IsStandardResourceName`).
pub(super) const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];

/// `validateContainerResourceName`: a qualified name, known to Kubernetes and to containers,
/// or an extended resource.
fn container_resource_name_problems(name: &str) -> Vec<String> {
    use konverge_apimachinery::selector::label_key_errors;
    let mut problems = label_key_errors(name);
    let qualified = !name.contains('/');
    if problems.is_empty()
        && qualified
        && !STANDARD_RESOURCES.contains(&name)
        && !name.starts_with("hugepages-")
        && !name.starts_with("requests.hugepages-")
    {
        problems.push("must be a standard resource type or fully qualified".into());
    }
    let native = qualified || name.contains("kubernetes.io/");
    if qualified {
        if !matches!(name, "cpu" | "memory" | "ephemeral-storage")
            && !name.starts_with("hugepages-")
        {
            problems.push("must be a standard resource for containers".into());
        }
    } else if !native {
        let extended = !name.starts_with("requests.")
            && label_key_errors(&format!("requests.{name}")).is_empty();
        if !extended {
            problems.push("doesn't follow extended resource name standard".into());
        }
    }
    problems
}

/// `validateResourceRequirements` of a container: resource names, no negative quantities,
/// requests within limits (equal to them for resources that cannot be overcommitted),
/// hugepages with cpu or memory. Whole numbers for extended resources and hugepage sizes
/// are not checked here.
fn resources(c: &Value, at: &str, causes: &mut Vec<Cause>) {
    let path = format!("{at}.resources");
    let list = |field: &str| -> Vec<(String, quantity::Quantity)> {
        c.pointer(&format!("/resources/{field}"))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, q)| quantity::parse(q).map(|q| (name.clone(), q)))
            .collect()
    };
    let (limits, requests) = (list("limits"), list("requests"));
    let name_and_sign =
        |field: &str, name: &str, q: &quantity::Quantity, causes: &mut Vec<Cause>| {
            for problem in container_resource_name_problems(name) {
                causes.push(Cause::invalid(
                    format!("{path}.{field}[{name}]"),
                    &json!(name),
                    problem,
                ));
            }
            if q.nanos < 0 {
                causes.push(Cause::invalid(
                    format!("{path}.{field}[{name}]"),
                    &json!(q.canonical),
                    "must be greater than or equal to 0",
                ));
            }
        };
    for (name, q) in &limits {
        name_and_sign("limits", name, q, causes);
    }
    for (name, q) in &requests {
        name_and_sign("requests", name, q, causes);
        // Reported on the requests, without the resource's name.
        match limits.iter().find(|(l, _)| l == name) {
            Some((_, limit)) if q.nanos != limit.nanos && !overcommit_allowed(name) => {
                causes.push(Cause::invalid(
                    format!("{path}.requests"),
                    &json!(q.canonical),
                    format!("must be equal to {name} limit of {}", limit.canonical),
                ));
            }
            Some((_, limit)) if q.nanos > limit.nanos => {
                causes.push(Cause::invalid(
                    format!("{path}.requests"),
                    &json!(q.canonical),
                    format!(
                        "must be less than or equal to {name} limit of {}",
                        limit.canonical
                    ),
                ));
            }
            Some(_) => {}
            None if !overcommit_allowed(name) => causes.push(required_because(
                format!("{path}.limits"),
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
    }
    let has = |list: &[(String, quantity::Quantity)], f: &dyn Fn(&str) -> bool| {
        list.iter().any(|(name, _)| f(name))
    };
    let hugepages = |n: &str| n.starts_with("hugepages-");
    let cpu_or_memory = |n: &str| matches!(n, "cpu" | "memory");
    if (has(&limits, &hugepages) || has(&requests, &hugepages))
        && !has(&limits, &cpu_or_memory)
        && !has(&requests, &cpu_or_memory)
    {
        causes.push(forbidden(path, "HugePages require cpu or memory"));
    }
}

/// A field that, when set, holds one of `allowed` (the others are defaulted when unset).
fn one_of(obj: &Value, field: &str, path: &str, allowed: &[&str], causes: &mut Vec<Cause>) {
    if let Some(value) = obj.get(field).and_then(Value::as_str)
        && !value.is_empty()
        && !allowed.contains(&value)
    {
        causes.push(not_supported(format!("{path}.{field}"), value, allowed));
    }
}

/// `validatePodDNSConfig`: what the None policy needs, and at most three nameservers.
fn dns_config(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let at = format!("{path}.dnsConfig");
    let config = spec.get("dnsConfig").filter(|c| !c.is_null());
    let nameservers = config
        .and_then(|c| c.get("nameservers"))
        .and_then(Value::as_array);
    if spec.get("dnsPolicy").and_then(Value::as_str) == Some("None") {
        if config.is_none() {
            causes.push(required_because(
                &at,
                "must provide `dnsConfig` when `dnsPolicy` is None",
            ));
            return;
        }
        if nameservers.is_none_or(Vec::is_empty) {
            causes.push(required_because(
                format!("{at}.nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            ));
            return;
        }
    }
    if let Some(servers) = nameservers.filter(|n| n.len() > 3) {
        causes.push(Cause::invalid(
            format!("{at}.nameservers"),
            &Value::Array(servers.clone()),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, server) in nameservers.into_iter().flatten().enumerate() {
        let server = server.as_str().unwrap_or_default();
        if !ip_sloppy(server) {
            causes.push(Cause::invalid(
                format!("{at}.nameservers[{i}]"),
                &json!(server),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    let searches = config
        .and_then(|c| c.get("searches"))
        .and_then(Value::as_array);
    if let Some(list) = searches {
        let names: Vec<&str> = list
            .iter()
            .map(|s| s.as_str().unwrap_or_default())
            .collect();
        if names.len() > 32 {
            causes.push(Cause::invalid(
                format!("{at}.searches"),
                &Value::Array(list.clone()),
                "must not have more than 32 search paths",
            ));
        }
        if names.join(" ").len() > 2048 {
            causes.push(Cause::invalid(
                format!("{at}.searches"),
                &Value::Array(list.clone()),
                "must not have more than 2048 characters (including spaces) in the search list",
            ));
        }
        for (i, search) in names.iter().enumerate() {
            // RelaxedDNSSearchValidation (on in 1.33): `.` alone, a trailing dot and `_` pass.
            if *search == "." {
                continue;
            }
            let search = search.strip_suffix('.').unwrap_or(search);
            for problem in subdomain_with_underscore_problems(search) {
                causes.push(Cause::invalid(
                    format!("{at}.searches[{i}]"),
                    &json!(search),
                    problem,
                ));
            }
        }
    }
    for (i, option) in config
        .and_then(|c| c.get("options"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if option
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(required_because(
                format!("{at}.options[{i}]"),
                "must not be empty",
            ));
        }
    }
}

/// `netutils.ParseIPSloppy`: an IPv4 or IPv6 address, IPv4 octets perhaps with leading zeros.
fn ip_sloppy(text: &str) -> bool {
    let octets: Vec<&str> = text.split('.').collect();
    text.parse::<std::net::IpAddr>().is_ok()
        || (octets.len() == 4
            && octets.iter().all(|o| {
                !o.is_empty()
                    && o.bytes().all(|b| b.is_ascii_digit())
                    && o.parse::<u32>().is_ok_and(|n| n <= 255)
            }))
}

/// `IsDNS1123SubdomainWithUnderscore`; its message names `_` but shows the plain regex.
fn subdomain_with_underscore_problems(name: &str) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if name.len() > 253 {
        problems.push("must be no more than 253 characters");
    }
    let label_ok = |label: &str| {
        let bytes = label.as_bytes();
        !bytes.is_empty()
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_'))
            && bytes[0] != b'-'
            && bytes[bytes.len() - 1] != b'-'
    };
    if !name.split('.').all(label_ok) {
        problems.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '_', '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
    }
    problems
}

/// `IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation is on in 1.33): printable
/// ASCII but `=`.
fn env_name_ok(name: &str) -> bool {
    name.chars().all(|c| (' '..='~').contains(&c) && c != '=')
}

const ENV_NAME: &str = "a valid environment variable name must consist only of printable ASCII characters other than '='";

/// `ValidateNameFunc(..)(name, prefix)` with a DNS subdomain: a generateName-like prefix may
/// end with `-`.
fn subdomain_problems(name: &str, prefix: bool) -> Vec<String> {
    let masked = match name.strip_suffix('-') {
        Some(rest) if prefix && !rest.is_empty() => format!("{rest}a"),
        _ => name.to_string(),
    };
    crate::resources::meta::name_problems(NameRule::Subdomain, &masked)
}

/// The fields env vars may take from the pod (sorted, as kube-apiserver lists them).
const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// `ValidateEnv` and `ValidateEnvFrom`: names, one source per value, and the references.
fn env(c: &Value, at: &str, causes: &mut Vec<Cause>) {
    for (i, var) in items(c, "env") {
        let path = format!("{at}.env[{i}]");
        let name = var.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(required(format!("{path}.name")));
        } else if !env_name_ok(name) {
            causes.push(Cause::invalid(
                format!("{path}.name"),
                &json!(name),
                ENV_NAME,
            ));
        }
        let Some(from) = var.get("valueFrom").filter(|v| !v.is_null()) else {
            continue;
        };
        let from_at = format!("{path}.valueFrom");
        let mut sources = 0;
        for source in [
            "fieldRef",
            "resourceFieldRef",
            "configMapKeyRef",
            "secretKeyRef",
        ] {
            let Some(selector) = from.get(source).filter(|s| !s.is_null()) else {
                continue;
            };
            sources += 1;
            let ref_at = format!("{from_at}.{source}");
            if source == "fieldRef" {
                object_field_selector(selector, &ref_at, ENV_FIELD_PATHS, causes);
            } else if source == "resourceFieldRef" {
                resource_field_selector(selector, &ref_at, false, causes);
            } else {
                let ref_name = selector.get("name").and_then(Value::as_str).unwrap_or("");
                // The name is checked even when empty.
                for problem in subdomain_problems(ref_name, false) {
                    causes.push(Cause::invalid(
                        format!("{ref_at}.name"),
                        &json!(ref_name),
                        problem,
                    ));
                }
                let key = selector.get("key").and_then(Value::as_str).unwrap_or("");
                if key.is_empty() {
                    causes.push(required(format!("{ref_at}.key")));
                }
                for problem in super::config::config_key_problems(key)
                    .into_iter()
                    .filter(|_| !key.is_empty())
                {
                    causes.push(Cause::invalid(
                        format!("{ref_at}.key"),
                        &json!(key),
                        problem,
                    ));
                }
            }
        }
        let has_value = var
            .get("value")
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty());
        let problem = match sources {
            0 => Some(
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ),
            _ if has_value => Some("may not be specified when `value` is not empty"),
            1 => None,
            _ => Some("may not have more than one field specified at a time"),
        };
        if let Some(problem) = problem {
            causes.push(Cause::invalid(&from_at, &json!(""), problem));
        }
    }
    for (i, from) in items(c, "envFrom") {
        let path = format!("{at}.envFrom[{i}]");
        let prefix = from.get("prefix").and_then(Value::as_str).unwrap_or("");
        if !env_name_ok(prefix) {
            causes.push(Cause::invalid(
                format!("{path}.prefix"),
                &json!(prefix),
                ENV_NAME,
            ));
        }
        let mut sources = 0;
        for source in ["configMapRef", "secretRef"] {
            let Some(reference) = from.get(source).filter(|s| !s.is_null()) else {
                continue;
            };
            sources += 1;
            let name_at = format!("{path}.{source}.name");
            let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                causes.push(required(&name_at));
            }
            for problem in subdomain_problems(name, true)
                .into_iter()
                .filter(|_| !name.is_empty())
            {
                causes.push(Cause::invalid(&name_at, &json!(name), problem));
            }
        }
        // kube-apiserver reports these on the list, without the index.
        let problem = match sources {
            0 => Some("must specify one of: `configMapRef` or `secretRef`"),
            1 => None,
            _ => Some("may not have more than one field specified at a time"),
        };
        if let Some(problem) = problem {
            causes.push(Cause::invalid(format!("{at}.envFrom"), &json!(""), problem));
        }
    }
}

/// `ValidateLabels` of the node selector: problems are reported on the map, not the key.
fn node_selector(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let at = format!("{path}.nodeSelector");
    for (key, value) in spec
        .get("nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for problem in konverge_apimachinery::selector::label_key_errors(key) {
            causes.push(Cause::invalid(&at, &json!(key), problem));
        }
        let value = value.as_str().unwrap_or_default();
        for problem in konverge_apimachinery::selector::label_value_errors(value) {
            causes.push(Cause::invalid(&at, &json!(value), problem));
        }
    }
}

pub(crate) fn pod(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    pod_spec(&spec, "spec", &mut causes);
    // Pods only (`validateContainersOnlyForPod`).
    for list in ["containers", "initContainers"] {
        for (i, c) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
            if image.trim() != image {
                causes.push(Cause::invalid(
                    format!("spec.{list}[{i}].image"),
                    &json!(image),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    if let Some(old) = old {
        pod_update(obj, old, &mut causes);
    }
    causes
}
