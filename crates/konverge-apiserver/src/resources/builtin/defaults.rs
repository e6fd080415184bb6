//! kube-apiserver 1.33's defaulting (`SetDefaults_*` of the feature gates on by default) for
//! the kinds operators write: pods and every pod template, workloads, jobs, autoscalers,
//! network policies, storage and scheduling classes, RBAC subjects.
//!
//! Defaults only fill what is unset; they run on every write, so an update that leaves a
//! defaulted field out gets the default again, as with kube-apiserver.

use serde_json::{Map, Value, json};

fn object(v: &mut Value) -> Option<&mut Map<String, Value>> {
    v.as_object_mut()
}

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.into(), value);
        }
        Some(Value::String(s)) if s.is_empty() => {
            map.insert(key.into(), value);
        }
        _ => {}
    }
}

fn each<'a>(map: &'a mut Map<String, Value>, key: &str) -> impl Iterator<Item = &'a mut Value> {
    map.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// `imagePullPolicy`: `Always` for a `latest` or untagged image, `IfNotPresent` otherwise.
fn pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    // A tag follows the last ':' after the last '/' (a registry port is not a tag).
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.split_once(':').map(|(_, t)| t);
    match tag {
        Some("latest") => "Always",
        Some(_) => "IfNotPresent",
        None if digest => "IfNotPresent",
        None => "Always",
    }
}

fn probe(probe: &mut Value) {
    let Some(p) = object(probe) else { return };
    for (key, value) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        if p.get(key).and_then(Value::as_i64).unwrap_or(0) == 0 {
            p.insert(key.into(), json!(value));
        }
    }
    if let Some(http) = p.get_mut("httpGet") {
        http_get(http);
    }
}

fn http_get(action: &mut Value) {
    if let Some(h) = object(action) {
        set_default(h, "path", json!("/"));
        set_default(h, "scheme", json!("HTTP"));
    }
}

fn field_ref(selector: &mut Value) {
    if let Some(f) = object(selector) {
        set_default(f, "apiVersion", json!("v1"));
    }
}

fn container(c: &mut Value) {
    let Some(c) = object(c) else { return };
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    if !image.is_empty() {
        set_default(c, "imagePullPolicy", json!(pull_policy(&image)));
    }
    if !c.get("resources").is_some_and(Value::is_object) {
        c.insert("resources".into(), json!({}));
    }
    for port in each(c, "ports") {
        if let Some(p) = object(port) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    for key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(key) {
            probe(p);
        }
    }
    if let Some(lifecycle) = c.get_mut("lifecycle").and_then(Value::as_object_mut) {
        for hook in ["postStart", "preStop"] {
            if let Some(http) = lifecycle.get_mut(hook).and_then(|h| h.get_mut("httpGet")) {
                http_get(http);
            }
        }
    }
    for env in each(c, "env") {
        if let Some(f) = env.pointer_mut("/valueFrom/fieldRef") {
            field_ref(f);
        }
    }
}

/// A downward API source: its field references default to `v1`.
fn downward_api(source: &mut Value) {
    for item in source
        .get_mut("items")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(f) = item.get_mut("fieldRef") {
            field_ref(f);
        }
    }
}

fn volume(v: &mut Value) {
    let Some(v) = object(v) else { return };
    if v.keys().all(|k| k == "name") {
        v.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
            set_default(s, "defaultMode", json!(420));
        }
    }
    if let Some(h) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        h.entry("type").or_insert_with(|| json!(""));
    }
    if let Some(d) = v.get_mut("downwardAPI") {
        downward_api(d);
    }
    if let Some(sources) = v
        .get_mut("projected")
        .and_then(|p| p.get_mut("sources"))
        .and_then(Value::as_array_mut)
    {
        for source in sources {
            if let Some(token) = source
                .get_mut("serviceAccountToken")
                .and_then(Value::as_object_mut)
            {
                set_default(token, "expirationSeconds", json!(3600));
            }
            if let Some(d) = source.get_mut("downwardAPI") {
                downward_api(d);
            }
        }
    }
    if let Some(spec) = v
        .get_mut("ephemeral")
        .and_then(|e| e.get_mut("volumeClaimTemplate"))
        .and_then(|t| t.get_mut("spec"))
    {
        claim_spec(spec);
    }
}

/// Every pod spec, in pods and templates alike.
fn pod_spec(spec: &mut Value) {
    let Some(s) = object(spec) else { return };
    set_default(s, "dnsPolicy", json!("ClusterFirst"));
    set_default(s, "restartPolicy", json!("Always"));
    set_default(s, "schedulerName", json!("default-scheduler"));
    set_default(s, "terminationGracePeriodSeconds", json!(30));
    if !s.get("securityContext").is_some_and(Value::is_object) {
        s.insert("securityContext".into(), json!({}));
    }
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        for c in each(s, key) {
            container(c);
        }
    }
    for v in each(s, "volumes") {
        volume(v);
    }
}

/// A pod template: its spec's defaults, and the `creationTimestamp: null` Go writes for its
/// metadata.
fn template(template: &mut Value) {
    if let Some(t) = object(template) {
        let md = t.entry("metadata").or_insert_with(|| json!({}));
        if let Some(md) = md.as_object_mut() {
            md.entry("creationTimestamp").or_insert(Value::Null);
        }
    }
    if let Some(spec) = template.get_mut("spec") {
        pod_spec(spec);
    }
}

/// Pods: the pod spec defaults, requests from limits, service links, host ports.
pub(super) fn pod(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec") else {
        return;
    };
    pod_spec(spec);
    let Some(s) = object(spec) else { return };
    set_default(s, "enableServiceLinks", json!(true));
    let host_network = s.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    for key in ["containers", "initContainers"] {
        for c in each(s, key) {
            let Some(c) = object(c) else { continue };
            if let Some(limits) = c
                .get("resources")
                .and_then(|r| r.get("limits"))
                .and_then(Value::as_object)
                .cloned()
                && let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut)
            {
                let requests = resources.entry("requests").or_insert_with(|| json!({}));
                if let Some(requests) = requests.as_object_mut() {
                    for (k, v) in limits {
                        requests.entry(k).or_insert(v);
                    }
                }
            }
            if host_network {
                for port in each(c, "ports") {
                    if port.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0
                        && let Some(container_port) = port.get("containerPort").cloned()
                    {
                        port["hostPort"] = container_port;
                    }
                }
            }
        }
    }
}

/// Pods start Pending, with their quality-of-service class.
pub(super) fn prepare_pod(obj: &mut Value) {
    let qos = qos_class(obj);
    let mut status = json!({"phase": "Pending", "qosClass": qos});
    if obj
        .pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty())
    {
        status["conditions"] = json!([{
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastProbeTime": null,
            "lastTransitionTime": null,
        }]);
    }
    obj["status"] = status;
}

/// `Guaranteed` when every container's cpu and memory requests equal their limits,
/// `BestEffort` when none has any, `Burstable` otherwise.
fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in containers {
        let requests = c.pointer("/resources/requests");
        let limits = c.pointer("/resources/limits");
        for resource in ["cpu", "memory"] {
            let request = requests.and_then(|r| r.get(resource));
            let limit = limits.and_then(|l| l.get(resource));
            any |= request.is_some() || limit.is_some();
            if limit.is_none() || request.is_some_and(|r| Some(r) != limit) {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

pub(super) fn pod_template(obj: &mut Value) {
    if let Some(t) = obj.get_mut("template") {
        template(t);
    }
}

/// ReplicationControllers: selector and labels from the template, one replica.
pub(super) fn replication_controller(obj: &mut Value) {
    let labels = obj.pointer("/spec/template/metadata/labels").cloned();
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        set_default(spec, "replicas", json!(1));
        if let Some(labels) = &labels
            && spec
                .get("selector")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty)
        {
            spec.insert("selector".into(), labels.clone());
        }
        if let Some(t) = spec.get_mut("template") {
            template(t);
        }
    }
    labels_from_template(obj);
}

pub(super) fn deployment(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
    if let Some(strategy) = strategy.as_object_mut() {
        set_default(strategy, "type", json!("RollingUpdate"));
        if strategy["type"] == "RollingUpdate" {
            let rolling = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
            if let Some(rolling) = rolling.as_object_mut() {
                set_default(rolling, "maxUnavailable", json!("25%"));
                set_default(rolling, "maxSurge", json!("25%"));
            }
        }
    }
    if let Some(t) = spec.get_mut("template") {
        template(t);
    }
}

pub(super) fn replica_set(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "replicas", json!(1));
    if let Some(t) = spec.get_mut("template") {
        template(t);
    }
}

pub(super) fn stateful_set(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = spec.entry("updateStrategy").or_insert_with(|| json!({}));
    if let Some(strategy) = strategy.as_object_mut() {
        if strategy
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            strategy.insert("type".into(), json!("RollingUpdate"));
            strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
        }
        if strategy["type"] == "RollingUpdate"
            && let Some(rolling) = strategy
                .get_mut("rollingUpdate")
                .and_then(Value::as_object_mut)
        {
            set_default(rolling, "partition", json!(0));
        }
    }
    let retention = spec
        .entry("persistentVolumeClaimRetentionPolicy")
        .or_insert_with(|| json!({}));
    if let Some(retention) = retention.as_object_mut() {
        set_default(retention, "whenDeleted", json!("Retain"));
        set_default(retention, "whenScaled", json!("Retain"));
    }
    for claim in each(spec, "volumeClaimTemplates") {
        if let Some(s) = claim.get_mut("spec") {
            claim_spec(s);
        }
        if let Some(c) = object(claim) {
            c.entry("status")
                .or_insert_with(|| json!({"phase": "Pending"}));
        }
    }
    if let Some(t) = spec.get_mut("template") {
        template(t);
    }
}

pub(super) fn daemon_set(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "revisionHistoryLimit", json!(10));
    let strategy = spec.entry("updateStrategy").or_insert_with(|| json!({}));
    if let Some(strategy) = strategy.as_object_mut() {
        set_default(strategy, "type", json!("RollingUpdate"));
        if strategy["type"] == "RollingUpdate" {
            let rolling = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
            if let Some(rolling) = rolling.as_object_mut() {
                set_default(rolling, "maxUnavailable", json!(1));
                set_default(rolling, "maxSurge", json!(0));
            }
        }
    }
    if let Some(t) = spec.get_mut("template") {
        template(t);
    }
}

/// DaemonSets record their template generation, as kube-apiserver's apps/v1 conversion does.
pub(super) fn prepare_daemon_set(obj: &mut Value) {
    let md = crate::resources::meta::metadata_mut(obj);
    let annotations = md.entry("annotations").or_insert_with(|| json!({}));
    if let Some(a) = annotations.as_object_mut() {
        a.insert(
            "deprecated.daemonset.template.generation".into(),
            json!("1"),
        );
    }
}

fn job_spec(spec: &mut Map<String, Value>) {
    match (
        spec.get("completions").filter(|v| !v.is_null()),
        spec.get("parallelism").filter(|v| !v.is_null()),
    ) {
        (None, None) => {
            spec.insert("completions".into(), json!(1));
            spec.insert("parallelism".into(), json!(1));
        }
        (_, None) => {
            spec.insert("parallelism".into(), json!(1));
        }
        _ => {}
    }
    let per_index = spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null());
    set_default(
        spec,
        "backoffLimit",
        json!(if per_index { i32::MAX as i64 } else { 6 }),
    );
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "manualSelector", json!(false));
    let failure_policy = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
    set_default(
        spec,
        "podReplacementPolicy",
        json!(if failure_policy {
            "Failed"
        } else {
            "TerminatingOrFailed"
        }),
    );
    if let Some(rules) = spec
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut)
    {
        for rule in rules {
            for pattern in rule
                .get_mut("onPodConditions")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(p) = object(pattern) {
                    set_default(p, "status", json!("True"));
                }
            }
        }
    }
    if let Some(t) = spec.get_mut("template") {
        template(t);
    }
}

pub(super) fn job(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        job_spec(spec);
    }
    labels_from_template(obj);
}

/// An object without labels takes its pod template's (ReplicationControllers, Jobs).
fn labels_from_template(obj: &mut Value) {
    if let Some(labels) = obj.pointer("/spec/template/metadata/labels").cloned() {
        let md = crate::resources::meta::metadata_mut(obj);
        if md
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
        {
            md.insert("labels".into(), labels);
        }
    }
}

/// A new Job selects its own pods by its uid, unless it chose its selector itself.
pub(super) fn prepare_job(obj: &mut Value) {
    if obj.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let uid = crate::resources::meta::meta_str(obj, "uid")
        .unwrap_or("")
        .to_string();
    let name = crate::resources::meta::meta_str(obj, "name")
        .unwrap_or("")
        .to_string();
    // Labels the defaults copied from the template follow it (kube-apiserver copies them
    // again when it reads the new Job back).
    let copied = obj.pointer("/metadata/labels").is_none()
        || obj.pointer("/metadata/labels") == obj.pointer("/spec/template/metadata/labels");
    if let Some(t) = obj
        .pointer_mut("/spec/template")
        .and_then(Value::as_object_mut)
    {
        let md = t.entry("metadata").or_insert_with(|| json!({}));
        if let Some(md) = md.as_object_mut() {
            let labels = md.entry("labels").or_insert_with(|| json!({}));
            if let Some(labels) = labels.as_object_mut() {
                for (key, value) in [
                    ("batch.kubernetes.io/controller-uid", &uid),
                    ("controller-uid", &uid),
                    ("batch.kubernetes.io/job-name", &name),
                    ("job-name", &name),
                ] {
                    labels.entry(key).or_insert_with(|| json!(value));
                }
            }
        }
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let selector = spec.entry("selector").or_insert_with(|| json!({}));
        if !selector.is_object() {
            *selector = json!({});
        }
        let match_labels = selector
            .as_object_mut()
            .map(|s| s.entry("matchLabels").or_insert_with(|| json!({})));
        if let Some(Value::Object(m)) = match_labels {
            m.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
        }
    }
    if copied && let Some(labels) = obj.pointer("/spec/template/metadata/labels").cloned() {
        crate::resources::meta::metadata_mut(obj).insert("labels".into(), labels);
    }
}

pub(super) fn cron_job(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "concurrencyPolicy", json!("Allow"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "successfulJobsHistoryLimit", json!(3));
    set_default(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(job_template) = spec.get_mut("jobTemplate").and_then(Value::as_object_mut) {
        let md = job_template.entry("metadata").or_insert_with(|| json!({}));
        if let Some(md) = md.as_object_mut() {
            md.entry("creationTimestamp").or_insert(Value::Null);
        }
        if let Some(t) = job_template
            .get_mut("spec")
            .and_then(|s| s.get_mut("template"))
        {
            template(t);
        }
    }
}

/// autoscaling/v2 HorizontalPodAutoscalers (v1 ones are stored as v2, and defaulted so).
pub(super) fn horizontal_pod_autoscaler(obj: &mut Value) {
    if obj
        .pointer("/spec/targetCPUUtilizationPercentage")
        .is_some()
        || obj["apiVersion"] == "autoscaling/v1"
    {
        // An autoscaling/v1 object: its defaults are v2's, seen through v1.
        super::convert::hpa_to_v2(obj);
        horizontal_pod_autoscaler(obj);
        super::convert::hpa_to_v1(obj);
        return;
    }
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "minReplicas", json!(1));
    if spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    if let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        let up = behavior.entry("scaleUp").or_insert_with(|| json!({}));
        if let Some(up) = up.as_object_mut() {
            set_default(up, "stabilizationWindowSeconds", json!(0));
            set_default(up, "selectPolicy", json!("Max"));
            if up
                .get("policies")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                up.insert(
                    "policies".into(),
                    json!([{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]),
                );
            }
        }
        let down = behavior.entry("scaleDown").or_insert_with(|| json!({}));
        if let Some(down) = down.as_object_mut() {
            set_default(down, "selectPolicy", json!("Max"));
            if down
                .get("policies")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                down.insert(
                    "policies".into(),
                    json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
                );
            }
        }
    }
}

fn claim_spec(spec: &mut Value) {
    if let Some(s) = object(spec) {
        set_default(s, "volumeMode", json!("Filesystem"));
    }
}

pub(super) fn network_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for key in ["ingress", "egress"] {
        for rule in each(spec, key) {
            for port in rule
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(p) = object(port) {
                    set_default(p, "protocol", json!("TCP"));
                }
            }
        }
    }
    if spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let mut types = vec![json!("Ingress")];
        if spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty())
        {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), json!(types));
    }
}

pub(super) fn storage_class(obj: &mut Value) {
    if let Some(o) = object(obj) {
        set_default(o, "reclaimPolicy", json!("Delete"));
        set_default(o, "volumeBindingMode", json!("Immediate"));
    }
}

pub(super) fn csi_driver(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "attachRequired", json!(true));
    set_default(spec, "podInfoOnMount", json!(false));
    set_default(spec, "storageCapacity", json!(false));
    set_default(spec, "requiresRepublish", json!(false));
    set_default(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    set_default(spec, "seLinuxMount", json!(false));
    if spec
        .get("volumeLifecycleModes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
    }
}

/// A `type: Container` limit's `default` comes from `max`, its `defaultRequest` from
/// `default`, then from `min`, for each resource it does not name (kube's
/// `SetDefaults_LimitRangeItem`).
pub(super) fn limit_range(obj: &mut Value) {
    let Some(limits) = obj
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for limit in limits.iter_mut() {
        let Some(item) = limit.as_object_mut() else {
            continue;
        };
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        let copy = |item: &serde_json::Map<String, Value>, key: &str| {
            item.get(key)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (max, min) = (copy(item, "max"), copy(item, "min"));
        let mut default = copy(item, "default");
        for (k, v) in max {
            default.entry(k).or_insert(v);
        }
        let mut request = copy(item, "defaultRequest");
        for (k, v) in default.clone().into_iter().chain(min) {
            request.entry(k).or_insert(v);
        }
        if !default.is_empty() {
            item.insert("default".into(), Value::Object(default));
        }
        if !request.is_empty() {
            item.insert("defaultRequest".into(), Value::Object(request));
        }
    }
}

pub(super) fn priority_class(obj: &mut Value) {
    if let Some(o) = object(obj) {
        set_default(o, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
}

/// RBAC subjects: users and groups are `rbac.authorization.k8s.io` subjects.
pub(super) fn role_binding(obj: &mut Value) {
    let Some(o) = object(obj) else { return };
    for subject in each(o, "subjects") {
        let Some(s) = object(subject) else { continue };
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        if matches!(kind, "User" | "Group") {
            set_default(s, "apiGroup", json!("rbac.authorization.k8s.io"));
        }
    }
}

pub(super) fn endpoint_slice(obj: &mut Value) {
    let Some(o) = object(obj) else { return };
    for port in each(o, "ports") {
        if let Some(p) = object(port) {
            set_default(p, "protocol", json!("TCP"));
            p.entry("name").or_insert_with(|| json!(""));
        }
    }
}

pub(super) fn endpoints(obj: &mut Value) {
    let Some(o) = object(obj) else { return };
    for subset in each(o, "subsets") {
        for port in subset
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(p) = object(port) {
                set_default(p, "protocol", json!("TCP"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_pull_policies_follow_the_tag() {
        for (image, policy) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("registry:5000/team/app", "Always"),
            ("registry:5000/team/app:v2", "IfNotPresent"),
            ("nginx@sha256:abc", "IfNotPresent"),
        ] {
            assert_eq!(pull_policy(image), policy, "{image}");
        }
    }

    #[test]
    fn pods_get_kube_apiserver_defaults() {
        let mut pod = json!({"spec": {
            "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                            "readinessProbe": {"httpGet": {"port": 80}}}],
            "volumes": [{"name": "v"}, {"name": "s", "secret": {"secretName": "x"}}]
        }});
        super::pod(&mut pod);
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["securityContext"], json!({}));
        assert_eq!(spec["enableServiceLinks"], true);
        let c = &spec["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"})
        );
        assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTP");
        assert_eq!(c["readinessProbe"]["periodSeconds"], 10);
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][1]["secret"]["defaultMode"], 420);
        prepare_pod(&mut pod);
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "Guaranteed"})
        );
    }

    #[test]
    fn jobs_select_their_own_pods() {
        let mut job = json!({
            "metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "perl:5"}]}}}
        });
        super::job(&mut job);
        prepare_job(&mut job);
        let spec = &job["spec"];
        assert_eq!(
            (
                spec["completions"].clone(),
                spec["parallelism"].clone(),
                spec["backoffLimit"].clone()
            ),
            (json!(1), json!(1), json!(6))
        );
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(spec["template"]["metadata"]["labels"]["job-name"], "pi");
        assert_eq!(
            job["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
            "u-1"
        );
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Never");
    }
}
