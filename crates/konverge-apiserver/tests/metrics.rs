//! `GET /metrics`: kube-apiserver's metric names, labels, help texts and buckets, counted over
//! requests sent to the router in-process.

mod common;

use std::sync::Arc;

use axum::body::Body;
use futures::StreamExt;
use konverge_apiserver::ApiServer;
use konverge_store::MemStore;
use serde_json::json;
use tower::ServiceExt;

async fn server() -> axum::Router {
    ApiServer::builder(Arc::new(MemStore::new()))
        .build()
        .await
        .expect("server")
        .router()
}

fn request(method: &str, path: &str, content_type: &str, body: String) -> http::Request<Body> {
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(Body::from(body))
        .expect("request")
}

/// Sends a request in-process: status and body.
async fn send(
    router: &axum::Router,
    method: &str,
    path: &str,
    content_type: &str,
    body: serde_json::Value,
) -> (u16, String) {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let response = router
        .clone()
        .oneshot(request(method, path, content_type, body))
        .await
        .expect("infallible");
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

async fn metrics(router: &axum::Router) -> String {
    let response = router
        .clone()
        .oneshot(request("GET", "/metrics", "", String::new()))
        .await
        .expect("infallible");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
    );
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// The value of the series written exactly `series` (name and labels).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
}

/// An `apiserver_request_total` series as kube-apiserver writes it (labels sorted by name).
fn requests(code: u16, verb: &str, resource: &str, scope: &str, dry_run: &str) -> String {
    format!(
        "apiserver_request_total{{code=\"{code}\",component=\"apiserver\",dry_run=\"{dry_run}\",group=\"\",resource=\"{resource}\",scope=\"{scope}\",subresource=\"\",verb=\"{verb}\",version=\"v1\"}}"
    )
}

fn configmap(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}})
}

const JSON: &str = "application/json";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_with_kube_apiserver_labels() {
    let router = server().await;
    assert_eq!(
        send(&router, "POST", CONFIGMAPS, JSON, configmap("a"))
            .await
            .0,
        201
    );
    assert_eq!(
        send(&router, "POST", CONFIGMAPS, JSON, configmap("a"))
            .await
            .0,
        409
    );
    let dry_run = format!("{CONFIGMAPS}?dryRun=All");
    assert_eq!(
        send(&router, "POST", &dry_run, JSON, configmap("b"))
            .await
            .0,
        201
    );
    let a = format!("{CONFIGMAPS}/a");
    assert_eq!(send(&router, "GET", &a, JSON, json!(null)).await.0, 200);
    let missing = format!("{CONFIGMAPS}/missing");
    assert_eq!(
        send(&router, "GET", &missing, JSON, json!(null)).await.0,
        404
    );
    assert_eq!(
        send(&router, "GET", CONFIGMAPS, JSON, json!(null)).await.0,
        200
    );
    assert_eq!(
        send(&router, "GET", "/api/v1/configmaps", JSON, json!(null))
            .await
            .0,
        200
    );
    let merge = json!({"data": {"b": "2"}});
    let (code, _) = send(&router, "PATCH", &a, "application/merge-patch+json", merge).await;
    assert_eq!(code, 200);
    let apply = format!("{CONFIGMAPS}/a?fieldManager=test&force=true");
    let (code, body) = send(
        &router,
        "PATCH",
        &apply,
        "application/apply-patch+yaml",
        configmap("a"),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(send(&router, "DELETE", &a, JSON, json!(null)).await.0, 200);
    assert_eq!(
        send(&router, "GET", "/healthz", JSON, json!(null)).await.0,
        200
    );

    let text = metrics(&router).await;
    for (series, count) in [
        (requests(201, "POST", "configmaps", "resource", ""), 1.0),
        (requests(409, "POST", "configmaps", "resource", ""), 1.0),
        (requests(201, "POST", "configmaps", "resource", "All"), 1.0),
        (requests(200, "GET", "configmaps", "resource", ""), 1.0),
        (requests(404, "GET", "configmaps", "resource", ""), 1.0),
        (requests(200, "LIST", "configmaps", "namespace", ""), 1.0),
        (requests(200, "LIST", "configmaps", "cluster", ""), 1.0),
        (requests(200, "PATCH", "configmaps", "resource", ""), 1.0),
        (requests(200, "APPLY", "configmaps", "resource", ""), 1.0),
        (requests(200, "DELETE", "configmaps", "resource", ""), 1.0),
        (
            "apiserver_request_total{code=\"200\",component=\"\",dry_run=\"\",group=\"\",resource=\"\",scope=\"\",subresource=\"/healthz\",verb=\"GET\",version=\"\"}".to_string(),
            1.0,
        ),
    ] {
        assert_eq!(value(&text, &series), Some(count), "{series} in\n{text}");
    }
    // kube's help texts, types and buckets.
    for line in [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
        "# TYPE apiserver_request_total counter",
        "# HELP apiserver_request_duration_seconds [STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
        "# TYPE apiserver_request_duration_seconds histogram",
        "# HELP apiserver_current_inflight_requests [STABLE] Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
        "# TYPE apiserver_current_inflight_requests gauge",
        "# HELP apiserver_storage_objects [STABLE] Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
        "# HELP etcd_request_duration_seconds [ALPHA] Etcd request latency in seconds for each operation and object type.",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    let duration = "apiserver_request_duration_seconds_bucket{component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"";
    let les: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix(duration)?
                .strip_prefix(",le=\"")?
                .split('"')
                .next()
        })
        .collect();
    assert_eq!(
        les,
        [
            "0.005", "0.025", "0.05", "0.1", "0.2", "0.4", "0.6", "0.8", "1", "1.25", "1.5", "2",
            "3", "4", "5", "6", "8", "10", "15", "20", "30", "45", "60", "+Inf"
        ]
    );
    let sli = "apiserver_request_sli_duration_seconds_bucket{component=\"apiserver\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\",le=\"0.05\"}";
    assert_eq!(value(&text, sli), Some(2.0), "{text}");
    let count = "apiserver_request_duration_seconds_count{component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"}";
    assert_eq!(value(&text, count), Some(2.0), "{text}");
    let build = text
        .lines()
        .find(|l| l.starts_with("kubernetes_build_info{"))
        .expect("kubernetes_build_info");
    assert!(
        build.starts_with("kubernetes_build_info{build_date=\"\",compiler=\"rustc\",git_commit=\"\",git_tree_state=\"clean\",git_version=\"v1.33.0+konverge-")
            && build.contains(",major=\"1\",minor=\"33\",platform=\"")
            && build.ends_with("\"} 1"),
        "{build}"
    );
    // Sizes of gets and lists, in kube's buckets as client_golang writes them.
    let size = "apiserver_response_sizes_bucket{component=\"apiserver\",group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\",le=\"1e+06\"}";
    assert_eq!(value(&text, size), Some(1.0), "{text}");
    if cfg!(target_os = "linux") {
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{text}"
        );
        assert!(
            value(&text, "process_resident_memory_bytes").is_some_and(|v| v > 0.0),
            "{text}"
        );
    }
    // The scrape itself is a read in flight.
    assert!(
        value(
            &text,
            "apiserver_current_inflight_requests{request_kind=\"readOnly\"}"
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    assert!(
        value(
            &text,
            "apiserver_current_inflight_requests{request_kind=\"mutating\"}"
        )
        .is_some(),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "apiserver_current_inqueue_requests{request_kind=\"readOnly\"}"
        ),
        Some(0.0),
        "{text}"
    );
    // The store's calls, under kube's etcd metric names.
    for series in [
        "etcd_requests_total{operation=\"create\",type=\"configmaps\"}",
        "etcd_requests_total{operation=\"get\",type=\"configmaps\"}",
        "etcd_requests_total{operation=\"update\",type=\"configmaps\"}",
        "etcd_requests_total{operation=\"delete\",type=\"configmaps\"}",
        // The watch cache's list of the store, started by the first list.
        "etcd_requests_total{operation=\"list\",type=\"configmaps\"}",
        "etcd_request_duration_seconds_count{operation=\"create\",type=\"configmaps\"}",
    ] {
        assert!(
            value(&text, series).is_some_and(|v| v >= 1.0),
            "{series} in\n{text}"
        );
    }
    assert!(
        text.contains("etcd_request_duration_seconds_bucket{operation=\"create\",type=\"configmaps\",le=\"0.005\"} "),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_long_running_and_count_their_events() {
    let router = server().await;
    assert_eq!(
        send(&router, "POST", CONFIGMAPS, JSON, configmap("a"))
            .await
            .0,
        201
    );
    let response = router
        .clone()
        .oneshot(request(
            "GET",
            &format!("{CONFIGMAPS}?watch=true"),
            JSON,
            String::new(),
        ))
        .await
        .expect("infallible");
    assert_eq!(response.status(), 200);
    let mut events = response.into_body().into_data_stream();
    let first = events.next().await.expect("an event").expect("bytes");
    assert!(String::from_utf8_lossy(&first).contains("\"ADDED\""));

    let open = "apiserver_longrunning_requests{component=\"apiserver\",group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"}";
    let watches = requests(200, "WATCH", "configmaps", "namespace", "");
    let sent = "apiserver_watch_events_total{group=\"\",kind=\"ConfigMap\",version=\"v1\"}";
    let text = metrics(&router).await;
    assert_eq!(value(&text, open), Some(1.0), "{text}");
    assert_eq!(value(&text, sent), Some(1.0), "{text}");
    // Recorded when it ends, as kube records a watch when its handler returns.
    assert_eq!(value(&text, &watches), None, "{text}");
    assert!(
        text.contains("# TYPE apiserver_longrunning_requests gauge\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "apiserver_watch_events_sizes_bucket{group=\"\",kind=\"ConfigMap\",version=\"v1\",le=\"1024\"} 1\n"
        ),
        "{text}"
    );

    drop(events);
    let text = metrics(&router).await;
    assert_eq!(value(&text, open), Some(0.0), "{text}");
    assert_eq!(value(&text, &watches), Some(1.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_objects_are_counted_per_resource() {
    let router = server().await;
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    });
    let (code, body) = send(
        &router,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        JSON,
        deployment,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        send(&router, "POST", CONFIGMAPS, JSON, configmap("a"))
            .await
            .0,
        201
    );
    // A list starts the configmaps' watch cache: counted from memory from then on.
    let (_, list) = send(&router, "GET", "/api/v1/configmaps", JSON, json!(null)).await;
    let listed = serde_json::from_str::<serde_json::Value>(&list).expect("list")["items"]
        .as_array()
        .expect("items")
        .len();
    let text = metrics(&router).await;
    assert_eq!(
        value(
            &text,
            "apiserver_storage_objects{resource=\"deployments.apps\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "apiserver_storage_objects{resource=\"configmaps\"}"),
        Some(listed as f64),
        "{text}"
    );
    assert_eq!(
        send(&router, "POST", CONFIGMAPS, JSON, configmap("b"))
            .await
            .0,
        201
    );
    // The cache applies the write asynchronously.
    common::eventually::eventually("the object count follows the write", || async {
        let text = metrics(&router).await;
        value(&text, "apiserver_storage_objects{resource=\"configmaps\"}")
            == Some(listed as f64 + 1.0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_are_answered_and_not_counted() {
    let router = server().await;
    for (method, path) in [
        ("GET", "/api/v1/nope"),
        ("GET", "/apis/a/b/c/d/e/f/g"),
        ("GET", "/api/v1/namespaces/%zz/configmaps"),
        ("GET", "/api/v1/namespaces/default/configmaps/x/nope"),
        ("GET", "/api/v1/configmaps/x"),
        ("POST", "/metrics"),
        ("GET", "/metrics/extra"),
    ] {
        let (code, body) = send(&router, method, path, JSON, json!(null)).await;
        assert!((400..500).contains(&code), "{method} {path}: {code} {body}");
    }
    let text = metrics(&router).await;
    assert!(!text.contains("apiserver_request_total"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_token_and_refused_requests_are_not_counted() {
    let router = ApiServer::builder(Arc::new(MemStore::new()))
        .bearer_token("secret")
        .authorization(konverge_apiserver::AuthorizationMode::Rbac)
        .build()
        .await
        .expect("server")
        .router();
    // Anonymous: forbidden; a token the server does not know: unauthorized.
    let (code, _) = send(&router, "GET", "/metrics", JSON, json!(null)).await;
    assert_eq!(code, 403);
    let (code, _) = send(&router, "GET", CONFIGMAPS, JSON, json!(null)).await;
    assert_eq!(code, 403);
    let wrong = http::Request::builder()
        .uri(CONFIGMAPS)
        .header("authorization", "Bearer guess")
        .body(Body::empty())
        .expect("request");
    let refused = router.clone().oneshot(wrong).await.expect("infallible");
    assert_eq!(refused.status(), 401);
    let with_token = |path: &str| {
        http::Request::builder()
            .uri(path)
            .header("authorization", "Bearer secret")
            .body(Body::empty())
            .expect("request")
    };
    let listed = router
        .clone()
        .oneshot(with_token(CONFIGMAPS))
        .await
        .expect("infallible");
    assert_eq!(listed.status(), 200);
    let response = router
        .clone()
        .oneshot(with_token("/metrics"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), 200);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total"))
        .collect();
    assert_eq!(
        lines,
        [format!(
            "{} 1",
            requests(200, "LIST", "configmaps", "namespace", "")
        )],
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_subresources_and_watch_paths_are_labelled_as_kube_labels_them() {
    let router = server().await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    assert_eq!(
        send(&router, "POST", "/api/v1/namespaces", JSON, ns)
            .await
            .0,
        201
    );
    assert_eq!(
        send(&router, "GET", "/api/v1/namespaces", JSON, json!(null))
            .await
            .0,
        200
    );
    let status = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    let (code, body) = send(
        &router,
        "PUT",
        "/api/v1/namespaces/team/status",
        JSON,
        status,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let response = router
        .clone()
        .oneshot(request(
            "GET",
            "/api/v1/watch/namespaces/team/configmaps",
            JSON,
            String::new(),
        ))
        .await
        .expect("infallible");
    assert_eq!(response.status(), 200);
    drop(response);

    let text = metrics(&router).await;
    for series in [
        requests(201, "POST", "namespaces", "resource", ""),
        requests(200, "LIST", "namespaces", "cluster", ""),
        requests(200, "WATCH", "configmaps", "namespace", ""),
        "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"namespaces\",scope=\"resource\",subresource=\"status\",verb=\"PUT\",version=\"v1\"}".to_string(),
    ] {
        assert_eq!(value(&text, &series), Some(1.0), "{series} in\n{text}");
    }
}

/// Over HTTP, as `konverge up` serves it: a watch the server ends (its timeout) is recorded
/// and no longer open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_over_http_are_recorded_when_they_end() {
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, WatchParams};

    let t = common::TestServer::start(common::Backend::Memory).await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let stream = api
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch");
    let events: Vec<_> = stream.try_collect().await.expect("events");
    drop(events);

    let text = t
        .client
        .request_text(
            http::Request::get("/metrics")
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .expect("metrics");
    let open = "apiserver_longrunning_requests{component=\"apiserver\",group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"}";
    // The server drops the finished stream just after the client read its end.
    let text =
        common::eventually::eventually_some("the finished watch is no longer open", || async {
            let text = if value(&text, open) == Some(0.0) {
                text.clone()
            } else {
                t.client
                    .request_text(
                        http::Request::get("/metrics")
                            .body(Vec::new())
                            .expect("request"),
                    )
                    .await
                    .expect("metrics")
            };
            (value(&text, open) == Some(0.0)).then_some(text)
        })
        .await;
    assert_eq!(
        value(
            &text,
            &requests(200, "WATCH", "configmaps", "namespace", "")
        ),
        Some(1.0),
        "{text}"
    );
}

/// A request's FlowSchema and priority level uids, from its response's headers.
async fn classified(
    router: &axum::Router,
    user: Option<&str>,
    path: &str,
) -> (u16, String, String) {
    let mut req = http::Request::builder().method("GET").uri(path);
    if let Some(user) = user {
        req = req
            .header("impersonate-user", user)
            .header("impersonate-group", "system:authenticated");
    }
    let response = router
        .clone()
        .oneshot(req.body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or_default().to_string())
            .unwrap_or_else(|| "<none>".to_string())
    };
    (
        response.status().as_u16(),
        header("x-kubernetes-pf-flowschema-uid"),
        header("x-kubernetes-pf-prioritylevel-uid"),
    )
}

/// Whether the FlowSchema at `path` has a `Dangling` condition of `status` and `reason`.
async fn dangling_is(router: &axum::Router, path: &str, status: &str, reason: &str) -> bool {
    let (_, text) = send(router, "GET", path, "", serde_json::Value::Null).await;
    let schema: serde_json::Value = serde_json::from_str(&text).expect("json");
    let condition = &schema["status"]["conditions"][0];
    condition["type"] == "Dangling"
        && condition["status"] == status
        && condition["reason"] == reason
}

/// Kubernetes' e2e "API priority and fairness" specs as a Go client runs them: a
/// PriorityLevelConfiguration and a FlowSchema for one user are created; once the schema's
/// `Dangling` condition is `False` and the level's seats are published, that user's requests
/// answer with their uids, and everyone else's with the bootstrap schemas'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_classified_by_flow_schemas() {
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .authorization(konverge_apiserver::AuthorizationMode::Rbac)
        .build()
        .await
        .expect("server");
    let router = server.router();
    let base = "/apis/flowcontrol.apiserver.k8s.io/v1";
    let (code, level) = send(
        &router,
        "POST",
        &format!("{base}/prioritylevelconfigurations"),
        "application/json",
        json!({"metadata": {"name": "e2e-testing-prioritylevel"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1,
                "limitResponse": {"type": "Reject"}}}}),
    )
    .await;
    assert_eq!(code, 201, "{level}");
    let (code, schema) = send(
        &router,
        "POST",
        &format!("{base}/flowschemas"),
        "application/json",
        json!({"metadata": {"name": "e2e-testing-flowschema"},
            "spec": {"matchingPrecedence": 1000,
                "priorityLevelConfiguration": {"name": "e2e-testing-prioritylevel"},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "noxu"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}),
    )
    .await;
    assert_eq!(code, 201, "{schema}");
    let uid = |text: &str| {
        serde_json::from_str::<serde_json::Value>(text).expect("json")["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_string()
    };
    let (level_uid, schema_uid) = (uid(&level), uid(&schema));
    let path = format!("{base}/flowschemas/e2e-testing-flowschema");
    common::eventually::eventually("the schema's Dangling condition is False", || {
        dangling_is(&router, &path, "False", "Found")
    })
    .await;
    // 600 seats shared by 245 + 1 shares.
    let text = metrics(&router).await;
    assert_eq!(
        value(
            &text,
            r#"apiserver_flowcontrol_nominal_limit_seats{priority_level="e2e-testing-prioritylevel"}"#
        ),
        Some(3.0),
        "{text}"
    );
    assert!(text.contains("# HELP apiserver_flowcontrol_nominal_limit_seats [BETA] Nominal number of execution seats configured for each priority level\n"));
    assert_eq!(
        value(
            &text,
            r#"apiserver_flowcontrol_nominal_limit_seats{priority_level="global-default"}"#
        ),
        Some(49.0)
    );

    // The matching user: the created schema and level, even when refused (forbidden after
    // classification, as in kube).
    assert_eq!(
        classified(&router, Some("noxu"), "/version").await,
        (200, schema_uid.clone(), level_uid.clone())
    );
    let (code, fs, pl) = classified(&router, Some("noxu"), "/api/v1/namespaces/default/pods").await;
    assert_eq!(code, 403);
    assert!(!fs.is_empty() && fs != "<none>" && fs != schema_uid, "{fs}");
    assert!(!pl.is_empty() && pl != "<none>" && pl != level_uid, "{pl}");
    // Anyone else: global-default's.
    let (code, global_fs, global_pl) = classified(&router, Some("foo"), "/version").await;
    assert_eq!(code, 200);
    assert_eq!((global_fs.clone(), global_pl.clone()), (fs, pl));
    let (_, text) = send(
        &router,
        "GET",
        &format!("{base}/flowschemas/global-default"),
        "",
        serde_json::Value::Null,
    )
    .await;
    assert_eq!(global_fs, uid(&text));
    // The admin (system:masters): exempt.
    let (_, text) = send(
        &router,
        "GET",
        &format!("{base}/flowschemas/exempt"),
        "",
        serde_json::Value::Null,
    )
    .await;
    let (_, exempt_fs, _) = classified(&router, None, "/version").await;
    assert_eq!(exempt_fs, uid(&text));
    // Pods' logs are long-running: not classified.
    let (_, fs, pl) = classified(&router, None, "/api/v1/namespaces/default/pods/p/log").await;
    assert_eq!((fs.as_str(), pl.as_str()), ("<none>", "<none>"));
    let text = metrics(&router).await;
    // One request of noxu's was not a resource request: only it went to noxu's schema.
    assert_eq!(
        value(
            &text,
            r#"apiserver_flowcontrol_dispatched_requests_total{flow_schema="e2e-testing-flowschema",priority_level="e2e-testing-prioritylevel"}"#
        ),
        Some(1.0),
        "{text}"
    );

    // The level deleted: the schema dangles, and its user goes to global-default.
    let (code, _) = send(
        &router,
        "DELETE",
        &format!("{base}/prioritylevelconfigurations/e2e-testing-prioritylevel"),
        "",
        serde_json::Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    common::eventually::eventually("the schema dangles", || {
        dangling_is(&router, &path, "True", "NotFound")
    })
    .await;
    assert_eq!(
        classified(&router, Some("noxu"), "/version").await,
        (200, global_fs, global_pl)
    );
}
