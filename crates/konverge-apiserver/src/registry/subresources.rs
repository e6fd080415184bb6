//! Subresources and resources that act rather than store: binding a pod to a node, evicting
//! a pod (honouring its PodDisruptionBudget, and deleting it gracefully), the component
//! statuses, and the kubelet subresources (exec, attach, port forwarding, proxies; logs when
//! no [`PodLogs`](crate::PodLogs) hook answers them) that a server without nodes answers as
//! kube-apiserver answers for a pod with no reachable node.

use serde_json::{Value, json};

use crate::ApiServer;
use crate::error::{ApiError, Details, Reason, Result, Target};
use crate::registry::{DeleteOptions, Registry, WriteOptions};
use crate::resources::ResourceType;

fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

fn pods(registry: &Registry) -> Result<std::sync::Arc<ResourceType>> {
    registry
        .catalog()
        .get("", "v1", "pods")
        .ok_or_else(ApiError::no_route)
}

/// `POST .../bindings` and `POST .../pods/{name}/binding`: assigns the pod to the target node,
/// once.
pub async fn bind(
    registry: &Registry,
    ns: Option<&str>,
    path_name: Option<&str>,
    binding: Value,
    opts: &WriteOptions,
) -> Result<Value> {
    let name = binding
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(path_name) = path_name
        && path_name != name
    {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let target = Target {
        group: "",
        resource: "pods/binding",
        name: &name,
    };
    if node.is_empty() {
        return Err(ApiError::invalid(
            "Binding",
            "",
            &name,
            vec![crate::error::Cause::required("target.name")],
        ));
    }
    let pods = pods(registry)?;
    let assign = |pod: &Value| -> Result<Value> {
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict(
                target,
                format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        if let Some(assigned) = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                target,
                format!("pod {name} is already assigned to node {assigned:?}"),
            ));
        }
        let mut pod = pod.clone();
        pod["spec"]["nodeName"] = json!(node);
        scheduled(&mut pod);
        if let Some(annotations) = binding
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            let md = crate::resources::meta::metadata_mut(&mut pod);
            let into = md.entry("annotations").or_insert_with(|| json!({}));
            for (k, v) in annotations {
                into[k] = v.clone();
            }
        }
        Ok(pod)
    };
    let mut opts = opts.clone();
    opts.not_an_update = true;
    // kube-apiserver writes a binding straight to storage: no field manager records it.
    opts.field_manager = None;
    registry
        .patch(&pods, ns, &name, None, &opts, &assign)
        .await?;
    Ok(success(201))
}

/// Sets the pod's `PodScheduled` condition to `True`, as kube's binding storage does
/// (`podutil.UpdatePodCondition`): reason and message cleared, the transition time now unless
/// the condition already said `True`.
fn scheduled(pod: &mut Value) {
    let Some(status) = pod
        .as_object_mut()
        .map(|o| o.entry("status").or_insert_with(|| json!({})))
    else {
        return;
    };
    crate::resources::meta::set_condition(
        status,
        json!({
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": crate::resources::meta::now(),
        }),
    );
}

/// How often an eviction retries a write that lost a race (kube's `EvictionsRetry` steps).
const EVICTION_RETRIES: usize = 20;
/// How many evictions a budget may have pending before it refuses more
/// (`MaxDisruptedPodSize`).
const MAX_DISRUPTED_PODS: usize = 2000;

/// `POST .../pods/{name}/eviction`, as kube-apiserver's `EvictionREST`: a pod that has
/// finished, never started or is terminating is deleted at once; otherwise its
/// PodDisruptionBudget must allow a disruption, which the eviction takes off the budget
/// (`disruptionsAllowed` decremented, the pod recorded in `disruptedPods`, guarded by the
/// budget's resourceVersion) before deleting the pod. The delete is the Eviction's
/// `deleteOptions` (`opts`, with the request's dry run), so the pod terminates gracefully as
/// any deleted pod.
pub async fn evict(
    registry: &Registry,
    ns: Option<&str>,
    name: &str,
    eviction: Value,
    opts: &DeleteOptions,
) -> Result<Value> {
    let body_name = eviction
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if body_name != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let pods = pods(registry)?;
    let client_resource_version = opts.precondition_resource_version.is_some();
    let mut attempt = 0;
    let pod = loop {
        let pod = registry.get(&pods, ns, name, None).await?;
        if !ignores_budgets(&pod) {
            break pod;
        }
        // A pending pod could start and become ready meanwhile: delete only the pod read.
        let mut delete = opts.clone();
        if !finished_or_terminating(&pod) && !client_resource_version {
            delete.precondition_resource_version = resource_version(&pod);
        }
        match registry.delete(&pods, ns, name, &delete).await {
            Ok(_) => return Ok(success(201)),
            Err(e)
                if e.reason == Reason::Conflict
                    && !client_resource_version
                    && attempt + 1 < EVICTION_RETRIES =>
            {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    let Some(budget) = budget_of(registry, ns, &pod).await? else {
        registry.delete(&pods, ns, name, opts).await?;
        return Ok(success(201));
    };
    let budget_name = str_at(&budget, "/metadata/name").to_string();
    let desired = int_at(&budget, "/status/desiredHealthy");
    let healthy = int_at(&budget, "/status/currentHealthy");
    // An unready pod is not among the healthy ones: when the budget is met without it, it
    // goes without taking a disruption, as long as it does not become ready meanwhile.
    let unready_spare = !pod_ready(&pod) && healthy >= desired && desired > 0;
    let mut delete = opts.clone();
    if unready_spare {
        if !client_resource_version {
            delete.precondition_resource_version = resource_version(&pod);
        }
    } else {
        take_disruption(registry, ns, budget, name, opts.dry_run).await?;
    }
    match registry.delete(&pods, ns, name, &delete).await {
        Ok(_) => Ok(success(201)),
        Err(e) if e.reason == Reason::Conflict && unready_spare && !client_resource_version => {
            Err(still_processing(&budget_name))
        }
        Err(e) => Err(e),
    }
}

/// Pods whose eviction disrupts nothing more (kube's `canIgnorePDB`).
fn ignores_budgets(pod: &Value) -> bool {
    matches!(
        str_at(pod, "/status/phase"),
        "Succeeded" | "Failed" | "Pending"
    ) || pod.pointer("/metadata/deletionTimestamp").is_some()
}

fn finished_or_terminating(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
        || pod.pointer("/metadata/deletionTimestamp").is_some()
}

fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| str_at(c, "/type") == "Ready" && str_at(c, "/status") == "True")
        })
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn int_at(value: &Value, pointer: &str) -> i64 {
    value.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn resource_version(value: &Value) -> Option<String> {
    Some(str_at(value, "/metadata/resourceVersion"))
        .filter(|rv| !rv.is_empty())
        .map(String::from)
}

/// The one PodDisruptionBudget of the pod's namespace whose (non-empty, valid) selector
/// matches it; more than one is refused as kube-apiserver refuses it.
async fn budget_of(registry: &Registry, ns: Option<&str>, pod: &Value) -> Result<Option<Value>> {
    let Some(budgets) = registry
        .catalog()
        .get("policy", "v1", "poddisruptionbudgets")
    else {
        return Ok(None);
    };
    let labels = crate::resources::meta::labels(pod);
    let listed = registry
        .list(&budgets, ns, &crate::registry::ListOptions::default())
        .await?;
    let mut matching = listed.items.iter().map(|b| &**b).filter(|b| {
        b.pointer("/spec/selector")
            .filter(|s| s.is_object())
            .and_then(|s| konverge_apimachinery::selector::LabelSelector::from_json(s).ok())
            .is_some_and(|s| !s.is_empty() && s.matches(&labels))
    });
    let first = matching.next().cloned();
    if matching.next().is_some() {
        return Err(ApiError::internal(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ));
    }
    Ok(first)
}

/// Takes one disruption off `budget` for `pod` (kube's `checkAndDecrement`), reading the
/// budget again when another eviction or the disruption controller wrote it first.
async fn take_disruption(
    registry: &Registry,
    ns: Option<&str>,
    mut budget: Value,
    pod: &str,
    dry_run: bool,
) -> Result<()> {
    let budgets = registry
        .catalog()
        .get("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(|| ApiError::internal("poddisruptionbudgets are not served"))?;
    let name = str_at(&budget, "/metadata/name").to_string();
    for _ in 0..EVICTION_RETRIES {
        let Some(decremented) = decrement(&budget, pod)? else {
            return Ok(());
        };
        if dry_run {
            return Ok(());
        }
        match registry
            .update(
                &budgets,
                ns,
                &name,
                decremented,
                Some("status"),
                &WriteOptions::default(),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.reason == Reason::Conflict => {
                budget = registry.get(&budgets, ns, &name, None).await?;
            }
            Err(e) => return Err(e),
        }
    }
    let mut timeout = ApiError::timeout(format!(
        "couldn't update PodDisruptionBudget {name:?} due to conflicts"
    ));
    timeout.details = Some(Box::new(Details {
        retry_after_seconds: Some(10),
        ..Details::default()
    }));
    Err(timeout)
}

/// The budget with one disruption taken for `pod`, or the refusal: not yet observed by the
/// disruption controller (429), no disruption allowed (429 naming what it needs), a
/// negative allowance or too many evictions pending (403).
fn decrement(budget: &Value, pod: &str) -> Result<Option<Value>> {
    let name = str_at(budget, "/metadata/name");
    let forbidden = |why: &str| {
        ApiError::forbidden(
            Target {
                group: "policy",
                resource: "poddisruptionbudget",
                name,
            },
            why,
        )
    };
    if int_at(budget, "/status/observedGeneration") < int_at(budget, "/metadata/generation") {
        return Err(still_processing(name));
    }
    let allowed = int_at(budget, "/status/disruptionsAllowed");
    if allowed < 0 {
        return Err(forbidden("pdb disruptions allowed is negative"));
    }
    let pending = budget
        .pointer("/status/disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    if pending > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(budget_refusal(
            0,
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int_at(budget, "/status/desiredHealthy"),
                int_at(budget, "/status/currentHealthy"),
            ),
        ));
    }
    let mut budget = budget.clone();
    let status = budget
        .as_object_mut()
        .map(|o| o.entry("status").or_insert_with(|| json!({})));
    let Some(Value::Object(status)) = status else {
        return Ok(None);
    };
    status.insert("disruptionsAllowed".into(), json!(allowed - 1));
    if allowed == 1 {
        let observed = status
            .get("observedGeneration")
            .cloned()
            .unwrap_or(json!(0));
        insufficient_pods(status, observed);
    }
    let disrupted = status.entry("disruptedPods").or_insert_with(|| json!({}));
    if let Some(disrupted) = disrupted.as_object_mut() {
        disrupted.insert(pod.to_string(), json!(crate::resources::meta::now()));
    } else {
        *disrupted = json!({ pod: crate::resources::meta::now() });
    }
    Ok(Some(budget))
}

/// Sets the budget's `DisruptionAllowed` condition False `InsufficientPods`, as
/// `SetStatusCondition` does (the transition time moves only when the status changes).
fn insufficient_pods(status: &mut serde_json::Map<String, Value>, observed: Value) {
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(conditions) = conditions.as_array_mut() else {
        return;
    };
    let fresh = json!({
        "type": "DisruptionAllowed",
        "status": "False",
        "reason": "InsufficientPods",
        "message": "",
        "observedGeneration": observed,
        "lastTransitionTime": crate::resources::meta::now(),
    });
    match conditions
        .iter_mut()
        .find(|c| str_at(c, "/type") == "DisruptionAllowed")
    {
        Some(existing) => {
            if str_at(existing, "/status") == "False" {
                existing["reason"] = fresh["reason"].clone();
                existing["message"] = fresh["message"].clone();
                existing["observedGeneration"] = fresh["observedGeneration"].clone();
            } else {
                *existing = fresh;
            }
        }
        None => conditions.push(fresh),
    }
}

/// 429 with kube's `DisruptionBudget` cause.
fn budget_refusal(retry_after_seconds: u32, cause: String) -> ApiError {
    let mut err = ApiError::too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        retry_after_seconds,
    );
    let mut details = err.details.take().map(|d| *d).unwrap_or_default();
    details.causes.push(crate::error::Cause {
        reason: "DisruptionBudget".into(),
        message: cause,
        field: String::new(),
    });
    err.details = Some(Box::new(details));
    err
}

/// 429: the budget changed since the disruption controller last looked at it.
fn still_processing(name: &str) -> ApiError {
    budget_refusal(
        10,
        format!("The disruption budget {name} is still being processed by the server."),
    )
}

/// The options object a connect request (`exec`, `attach`, `portforward`, `proxy`) carries
/// in its query, as admission sees it: `PodExecOptions`, `PodAttachOptions`,
/// `PodPortForwardOptions`, or the kind's `…ProxyOptions`. Read as kube's parameter codec
/// reads them: a boolean's first value (only `0` and `false` in any case are false), every
/// `command`, and `ports` as comma-separated 16-bit numbers (a 400 when one is not).
pub fn connect_options(rt: &ResourceType, subresource: &str, query: &str) -> Result<Value> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
    let one = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let flag = |key: &str| one(key).is_some_and(konverge_apimachinery::query::parse_bool);
    let all = |key: &str| -> Vec<&str> {
        pairs
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let mut options = match subresource {
        "exec" | "attach" => {
            let mut o = json!({
                "kind": if subresource == "exec" { "PodExecOptions" } else { "PodAttachOptions" },
                "apiVersion": "v1",
            });
            for key in ["stdin", "stdout", "stderr", "tty"] {
                if flag(key) {
                    o[key] = json!(true);
                }
            }
            if let Some(container) = one("container") {
                o["container"] = json!(container);
            }
            if subresource == "exec" {
                o["command"] = json!(all("command"));
            }
            o
        }
        "portforward" => {
            let mut ports = Vec::new();
            for port in all("ports").into_iter().flat_map(|p| p.split(',')) {
                // Go's ParseUint takes no sign; Rust's parse would take a `+`.
                let digits = if port.starts_with('+') { "" } else { port };
                let number = digits.parse::<u16>().map_err(|e| {
                    let reason = match e.kind() {
                        std::num::IntErrorKind::PosOverflow => "value out of range",
                        _ => "invalid syntax",
                    };
                    ApiError::bad_request(format!(
                        "cannot convert to []int32: strconv.ParseUint: parsing {port:?}: {reason}"
                    ))
                })?;
                ports.push(json!(number));
            }
            let mut o = json!({"kind": "PodPortForwardOptions", "apiVersion": "v1"});
            if !ports.is_empty() {
                o["ports"] = json!(ports);
            }
            o
        }
        _ => {
            let kind = match rt.plural.as_str() {
                "services" => "ServiceProxyOptions",
                "nodes" => "NodeProxyOptions",
                _ => "PodProxyOptions",
            };
            json!({"kind": kind, "apiVersion": "v1"})
        }
    };
    if subresource == "proxy"
        && let Some(path) = one("path")
    {
        options["path"] = json!(path);
    }
    Ok(options)
}

/// Admission of a connect request (kube-apiserver admits it before it connects): mutating,
/// then validating, with the options as the object and nothing stored.
pub async fn admit_connect(
    registry: &Registry,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    subresource: &str,
    mut options: Value,
    user: &crate::auth::user::UserInfo,
) -> Result<()> {
    let chain = registry.admission().clone();
    if !chain.handles_operation(rt, crate::admission::Operation::Connect) {
        return Ok(());
    }
    let trace = crate::admission::Trace::default();
    let attributes = crate::admission::Attributes {
        operation: crate::admission::Operation::Connect,
        rt,
        namespace: ns.unwrap_or(""),
        name,
        subresource: Some(subresource),
        old: None,
        user: Some(user),
        dry_run: false,
        trace: &trace,
    };
    let admitted = async {
        chain.admit(&attributes, &mut options, registry).await?;
        chain.validate(&attributes, &options, registry).await
    }
    .await;
    chain.finish(&attributes);
    admitted
}

/// The kubelet subresources: a pod without a node has no kubelet to talk to; one with a node
/// that this server does not know has none either.
pub async fn needs_kubelet(
    registry: &Registry,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    subresource: &str,
) -> ApiError {
    let object = match registry.get(rt, ns, name, None).await {
        Ok(object) => object,
        Err(e) => return e,
    };
    let node = match rt.plural.as_str() {
        "pods" => {
            let node = object
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if node.is_empty() {
                return ApiError::bad_request(format!("pod {name} does not have a host assigned"));
            }
            node.to_string()
        }
        "nodes" => name.to_string(),
        _ => {
            return ApiError::unavailable(format!("no endpoints available for service \"{name}\""));
        }
    };
    let mut err = ApiError::unavailable(format!(
        "the {subresource} subresource needs the kubelet of node {node:?}, and this server runs no nodes"
    ));
    err.reason = Reason::ServiceUnavailable;
    err
}

/// `componentstatuses`: the components kube-apiserver reports on, as this server has them:
/// the store (as `etcd-0`), the control loops (as `controller-manager`), and no scheduler.
pub async fn component_statuses(server: &ApiServer) -> Vec<Value> {
    let store = server.registry().store().current_revision().await;
    let condition = |healthy: bool, message: &str, error: Option<String>| {
        let mut c = json!({"type": "Healthy", "status": if healthy { "True" } else { "False" }, "message": message});
        if let Some(error) = error {
            c["error"] = json!(error);
        }
        c
    };
    let etcd = match store {
        Ok(_) => condition(true, "ok", None),
        Err(e) => condition(false, "", Some(e.to_string())),
    };
    let scheduler = condition(
        false,
        "",
        Some("this server runs no scheduler: pods are placed by bindings".into()),
    );
    [
        ("controller-manager", condition(true, "ok", None)),
        ("etcd-0", etcd),
        ("scheduler", scheduler),
    ]
    .into_iter()
    .map(|(name, c)| {
        json!({
            "kind": "ComponentStatus",
            "apiVersion": "v1",
            "metadata": {"name": name},
            "conditions": [c],
        })
    })
    .collect()
}

/// `POST .../serviceaccounts/{name}/token` (TokenRequest): a signed token for the
/// ServiceAccount, optionally bound to a pod, for the audiences asked (the issuer by
/// default), valid for `expirationSeconds` (an hour by default, ten minutes at least).
pub async fn token_request(
    registry: &Registry,
    tokens: &crate::auth::tokens::ServiceAccountTokens,
    ns: Option<&str>,
    name: &str,
    mut request: Value,
) -> Result<Value> {
    let accounts = registry
        .catalog()
        .get("", "v1", "serviceaccounts")
        .ok_or_else(ApiError::no_route)?;
    let account = registry.get(&accounts, ns, name, None).await?;
    let namespace = ns.unwrap_or("");
    let uid = account
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let seconds = match request.pointer("/spec/expirationSeconds") {
        None | Some(Value::Null) => 3600,
        Some(v) => v.as_i64().unwrap_or(0),
    };
    let mut causes = Vec::new();
    if seconds < 600 {
        causes.push(crate::error::Cause::invalid(
            "spec.expirationSeconds",
            &json!(seconds),
            "may not specify a duration less than 10 minutes",
        ));
    } else if seconds > 1 << 32 {
        causes.push(crate::error::Cause::invalid(
            "spec.expirationSeconds",
            &json!(seconds),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            name,
            causes,
        ));
    }
    let audiences = tokens.audiences(&request);
    let mut bound_to = None;
    if let Some(bound) = request
        .pointer("/spec/boundObjectRef")
        .filter(|b| b.is_object())
    {
        let kind_name = bound["kind"].as_str().unwrap_or("");
        let Some(kind) = crate::auth::tokens::BoundKind::of(kind_name) else {
            return Err(ApiError::bad_request(format!(
                "cannot bind token to object of type {kind_name}"
            )));
        };
        let (plural, object_ns) = match kind {
            crate::auth::tokens::BoundKind::Pod => ("pods", ns),
            crate::auth::tokens::BoundKind::Secret => ("secrets", ns),
            crate::auth::tokens::BoundKind::Node => ("nodes", None),
        };
        let rt = registry
            .catalog()
            .get("", "v1", plural)
            .ok_or_else(ApiError::no_route)?;
        let object_name = bound["name"].as_str().unwrap_or("");
        let found = registry.get(&rt, object_ns, object_name, None).await?;
        let object_uid = found
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if let Some(want) = bound["uid"].as_str().filter(|u| !u.is_empty())
            && want != object_uid
        {
            return Err(ApiError::conflict(
                Target {
                    group: "",
                    resource: plural,
                    name: object_name,
                },
                format!(
                    "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        bound_to = Some(crate::auth::tokens::Bound {
            kind,
            name: object_name.to_string(),
            uid: object_uid,
        });
    }
    let now = jiff::Timestamp::now();
    let token = tokens.issue(
        namespace,
        name,
        &uid,
        &audiences,
        now.as_second(),
        seconds,
        bound_to.as_ref(),
    );
    let expires = jiff::Timestamp::from_second(now.as_second() + seconds)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!("TokenRequest");
    let md = crate::resources::meta::metadata_mut(&mut request);
    md.insert("name".into(), json!(name));
    md.insert("namespace".into(), json!(namespace));
    md.insert("creationTimestamp".into(), Value::Null);
    request["spec"]["audiences"] = json!(audiences);
    request["spec"]["expirationSeconds"] = json!(seconds);
    request["status"] = json!({"token": token, "expirationTimestamp": expires});
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> std::sync::Arc<ResourceType> {
        crate::resources::Catalog::builtin()
            .get("", "v1", "pods")
            .expect("pods")
    }

    #[test]
    fn connect_options_are_read_as_kubes_parameter_codec_reads_them() {
        // What the Python client's stream() sends: Python's True.
        let exec = connect_options(
            &pods(),
            "exec",
            "command=sh&command=-c&stdin=True&stdout=false&stderr=yes&tty=0&tty=1&container=c",
        )
        .expect("options");
        assert_eq!(
            exec,
            json!({
                "kind": "PodExecOptions", "apiVersion": "v1",
                "stdin": true, "stderr": true, "container": "c", "command": ["sh", "-c"],
            })
        );
        let forward =
            connect_options(&pods(), "portforward", "ports=80,443&ports=8080").expect("options");
        assert_eq!(forward["ports"], json!([80, 443, 8080]));
        for (ports, message) in [
            (
                "ports=http",
                r#"cannot convert to []int32: strconv.ParseUint: parsing "http": invalid syntax"#,
            ),
            (
                "ports=70000",
                r#"cannot convert to []int32: strconv.ParseUint: parsing "70000": value out of range"#,
            ),
        ] {
            let err = connect_options(&pods(), "portforward", ports).expect_err(ports);
            assert_eq!(
                (err.reason, err.message.as_str()),
                (Reason::BadRequest, message)
            );
        }
    }
}
