//! Subresources and resources that act rather than store: binding a pod to a node, evicting
//! a pod (honouring its PodDisruptionBudget), the component statuses, and the kubelet
//! subresources (logs, exec, attach, port forwarding, proxies) that a server without nodes
//! answers as kube-apiserver answers for a pod with no reachable node.

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
    opts.field_manager
        .get_or_insert_with(|| "kube-scheduler".into());
    registry
        .patch(&pods, ns, &name, None, &opts, &assign)
        .await?;
    Ok(success(201))
}

/// `POST .../pods/{name}/eviction`: deletes the pod unless that would take a
/// PodDisruptionBudget below what it allows.
pub async fn evict(
    registry: &Registry,
    ns: Option<&str>,
    name: &str,
    eviction: Value,
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
    let pod = registry.get(&pods, ns, name, None).await?;
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    // Pods that have finished (or never started) do not count against a budget.
    let guarded = !matches!(phase, "Succeeded" | "Failed" | "Pending");
    if guarded
        && let Some(budgets) = registry
            .catalog()
            .get("policy", "v1", "poddisruptionbudgets")
    {
        let labels = crate::resources::meta::labels(&pod);
        let listed = registry
            .list(&budgets, ns, &crate::registry::ListOptions::default())
            .await?;
        let matching: Vec<&Value> = listed
            .items
            .iter()
            .map(|b| &**b)
            .filter(|b| {
                b.pointer("/spec/selector")
                    .filter(|s| s.is_object())
                    .and_then(|s| konverge_apimachinery::selector::LabelSelector::from_json(s).ok())
                    .is_some_and(|s| !s.is_empty() && s.matches(&labels))
            })
            .collect();
        if matching.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(budget) = matching.first() {
            let allowed = budget
                .pointer("/status/disruptionsAllowed")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if allowed <= 0 {
                let budget_name = budget
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let desired = budget
                    .pointer("/status/desiredHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let healthy = budget
                    .pointer("/status/currentHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let mut err = ApiError::too_many_requests(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    0,
                );
                err.details = Some(Box::new(Details {
                    causes: vec![crate::error::Cause {
                        reason: "DisruptionBudget".into(),
                        message: format!(
                            "The disruption budget {budget_name} needs {desired} healthy pods and has {healthy} currently"
                        ),
                        field: String::new(),
                    }],
                    ..Details::default()
                }));
                return Err(err);
            }
        }
    }
    let opts = DeleteOptions {
        dry_run: eviction
            .pointer("/deleteOptions/dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "All")),
        precondition_uid: eviction
            .pointer("/deleteOptions/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from),
        ..DeleteOptions::default()
    };
    registry.delete(&pods, ns, name, &opts).await?;
    Ok(success(201))
}

/// The options object a connect request (`exec`, `attach`, `portforward`, `proxy`) carries
/// in its query, as admission sees it: `PodExecOptions`, `PodAttachOptions`,
/// `PodPortForwardOptions`, or the kind's `…ProxyOptions`.
pub fn connect_options(rt: &ResourceType, subresource: &str, query: &str) -> Value {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
    let flag = |key: &str| {
        pairs
            .iter()
            .any(|(k, v)| k == key && matches!(v.as_str(), "true" | "1"))
    };
    let all = |key: &str| -> Vec<Value> {
        pairs
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| json!(v))
            .collect()
    };
    let one = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| json!(v));
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
                o["container"] = container;
            }
            if subresource == "exec" {
                o["command"] = json!(all("command"));
            }
            o
        }
        "portforward" => {
            let ports: Vec<Value> = all("ports")
                .into_iter()
                .filter_map(|p| p.as_str()?.parse::<i64>().ok().map(|n| json!(n)))
                .collect();
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
        options["path"] = path;
    }
    options
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
    let audiences = crate::auth::tokens::audiences(&request);
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
