//! The API server through a real `kube::Client`: every verb, the error codes clients branch
//! on, watch resume and expiry, pagination, subresources, finalizers — against the memory and
//! the disk store.

mod common;

use std::time::Duration;

use common::eventually::eventually;
use common::{Backend, TestServer};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::Status;
use serde_json::json;

/// Runs each case once per backend.
macro_rules! on_every_store {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::TestServer::start(super::Backend::Memory).await).await;
                }
            )*
        }
        mod disk {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::TestServer::start(super::Backend::Disk).await).await;
                }
            )*
        }
    };
}

on_every_store!(
    bootstrap_objects_exist,
    configmap_crud,
    errors_have_kubernetes_codes_and_reasons,
    invalid_objects_get_422_with_causes,
    watch_delivers_changes_and_resumes,
    watch_from_compacted_version_is_410,
    list_pagination,
    selectors,
    generation_and_status_subresource,
    finalizers_hold_deletion,
    scale_subresource,
    dry_run_writes_nothing,
    patches,
    no_op_update_keeps_resource_version,
    garbage_collection_background,
    garbage_collection_foreground,
    garbage_collection_foreground_unwinds_owner_cycles,
    garbage_collection_orphan,
    namespace_deletion_empties_the_namespace,
);

fn status_of(err: kube::Error) -> Box<Status> {
    match err {
        kube::Error::Api(status) => status,
        other => panic!("expected an API error, got {other}"),
    }
}

fn cm(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": data,
    }))
    .expect("configmap")
}

async fn bootstrap_objects_exist(t: TestServer) {
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .expect("list namespaces")
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect();
    for expected in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(names.contains(&expected.to_string()), "{names:?}");
    }
    let ns = namespaces.get("default").await.expect("default");
    assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Active"));
    let services: Api<Service> = Api::namespaced(t.client.clone(), "default");
    let kubernetes = services
        .get("kubernetes")
        .await
        .expect("kubernetes service");
    assert_eq!(
        kubernetes.spec.and_then(|s| s.cluster_ip).as_deref(),
        Some("10.96.0.1")
    );
    let version = t.client.apiserver_version().await.expect("version");
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "33")
    );
}

async fn configmap_crud(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &cm("app", json!({"a": "1"})))
        .await
        .expect("create");
    let md = &created.metadata;
    assert!(md.uid.is_some() && md.creation_timestamp.is_some());
    assert_eq!(md.namespace.as_deref(), Some("default"));
    let rv1 = md.resource_version.clone().expect("resourceVersion");

    let got = api.get("app").await.expect("get");
    assert_eq!(got.metadata.resource_version.as_deref(), Some(rv1.as_str()));
    assert_eq!(
        got.data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("1")
    );

    let mut changed = got.clone();
    changed.data = Some([("a".to_string(), "2".to_string())].into());
    let replaced = api
        .replace("app", &PostParams::default(), &changed)
        .await
        .expect("replace");
    let rv2 = replaced.metadata.resource_version.clone().expect("rv");
    assert_ne!(rv1, rv2);

    // The same stale object again: 409 Conflict.
    let stale = status_of(
        api.replace("app", &PostParams::default(), &changed)
            .await
            .expect_err("stale"),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert!(
        stale.message.contains("the object has been modified"),
        "{}",
        stale.message
    );

    let listed = api.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 1);
    // Across namespaces: this one, and those kube-apiserver keeps in kube-system.
    let all: Api<ConfigMap> = Api::all(t.client.clone());
    let names: Vec<String> = all
        .list(&ListParams::default())
        .await
        .expect("list all")
        .items
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                kube::ResourceExt::namespace(c).unwrap_or_default(),
                kube::ResourceExt::name_any(c)
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "default/app",
            "kube-system/extension-apiserver-authentication",
            "kube-system/kube-apiserver-legacy-service-account-token-tracking"
        ]
    );

    let deleted = api
        .delete("app", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        deleted.is_right(),
        "an object without finalizers is gone at once"
    );
    let missing = status_of(api.get("app").await.expect_err("gone"));
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, r#"configmaps "app" not found"#);
}

async fn errors_have_kubernetes_codes_and_reasons(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    api.create(&PostParams::default(), &cm("dup", json!({})))
        .await
        .expect("create");
    let dup = status_of(
        api.create(&PostParams::default(), &cm("dup", json!({})))
            .await
            .expect_err("dup"),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));

    let nowhere: Api<ConfigMap> = Api::namespaced(t.client.clone(), "nowhere");
    let missing_ns = status_of(
        nowhere
            .create(&PostParams::default(), &cm("x", json!({})))
            .await
            .expect_err("no ns"),
    );
    assert_eq!(
        (missing_ns.code, missing_ns.reason.as_str()),
        (404, "NotFound")
    );
    assert_eq!(missing_ns.message, r#"namespaces "nowhere" not found"#);

    let (code, status) = t
        .raw("GET", "/api/v1/namespaces/default/widgets", None, vec![])
        .await;
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));

    let (code, status) = t
        .raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some("application/json"),
            "{not json",
        )
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (400, Some("BadRequest")),
        "{status}"
    );

    let (code, status) = t
        .raw(
            "PUT",
            "/api/v1/namespaces/default/configmaps",
            Some("application/json"),
            "{}",
        )
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (405, Some("MethodNotAllowed")),
        "{status}"
    );

    let (code, status) = t
        .raw(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/dup",
            Some("application/xml"),
            "<x/>",
        )
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (415, Some("UnsupportedMediaType")),
        "{status}"
    );

    // More data than a ConfigMap holds is invalid; an object larger than the store takes is
    // too large.
    let huge = "x".repeat(2 * 1024 * 1024);
    let big = status_of(
        api.create(&PostParams::default(), &cm("big", json!({"blob": huge})))
            .await
            .expect_err("too much data"),
    );
    assert_eq!((big.code, big.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        big.message,
        r#"ConfigMap "big" is invalid: []: Too long: may not be more than 1048576 bytes"#
    );
    let gone = status_of(api.get("big").await.expect_err("nothing half-written"));
    assert_eq!(gone.code, 404);
    let events: Api<DynamicObject> = Api::namespaced_with(
        t.client.clone(),
        "default",
        &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&()),
    );
    let event: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "big"},
        "involvedObject": {"kind": "Pod", "name": "p"}, "message": huge,
    }))
    .unwrap();
    let big = status_of(
        events
            .create(&PostParams::default(), &event)
            .await
            .expect_err("too large"),
    );
    assert_eq!(
        (big.code, big.reason.as_str()),
        (413, "RequestEntityTooLarge")
    );

    let wrong_type = t
        .raw(
            "POST",
            "/apis/apps/v1/namespaces/default/deployments",
            Some("application/json"),
            r#"{"metadata":{"name":"w"},"spec":{"replicas":"three"}}"#,
        )
        .await;
    assert_eq!(wrong_type.0, 400, "{}", wrong_type.1);
    assert!(
        wrong_type.1["message"]
            .as_str()
            .unwrap_or("")
            .contains("spec.replicas"),
        "{}",
        wrong_type.1
    );
}

async fn invalid_objects_get_422_with_causes(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let bad = status_of(
        api.create(&PostParams::default(), &cm("Bad_Name", json!({})))
            .await
            .expect_err("invalid"),
    );
    assert_eq!((bad.code, bad.reason.as_str()), (422, "Invalid"));
    assert!(
        bad.message.starts_with(r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#),
        "{}",
        bad.message
    );
    let (_, status) = t
        .raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some("application/json"),
            r#"{"metadata":{"name":"Bad_Name"}}"#,
        )
        .await;
    assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");

    let deployments: Api<Deployment> = Api::namespaced(t.client.clone(), "default");
    let no_containers: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}}
    }))
    .expect("deployment");
    let err = status_of(
        deployments
            .create(&PostParams::default(), &no_containers)
            .await
            .expect_err("invalid"),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("spec.template.spec.containers: Required value"),
        "{}",
        err.message
    );
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
            }
        }
    }))
    .expect("deployment")
}

async fn watch_delivers_changes_and_resumes(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let first = api
        .create(&PostParams::default(), &cm("w1", json!({})))
        .await
        .expect("create");
    let from = first.metadata.resource_version.clone().expect("rv");
    let mut stream = api
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();
    api.create(&PostParams::default(), &cm("w2", json!({})))
        .await
        .expect("create");
    api.patch(
        "w2",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .expect("patch");
    api.delete("w2", &DeleteParams::default())
        .await
        .expect("delete");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .expect("event in time")
            .expect("watch ok")
            .expect("stream open");
        match event {
            WatchEvent::Added(o) => seen.push(("ADDED", o.metadata.name.expect("name"))),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.metadata.name.expect("name"))),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o.metadata.name.expect("name"))),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    assert_eq!(
        seen,
        vec![
            ("ADDED", "w2".into()),
            ("MODIFIED", "w2".into()),
            ("DELETED", "w2".into())
        ]
    );

    // kube-runtime's watcher (list, then watch with bookmarks) sees the current state.
    let events = kube::runtime::watcher(api.clone(), kube::runtime::watcher::Config::default());
    let mut objects = kube::runtime::WatchStreamExt::applied_objects(events).boxed();
    let seen = tokio::time::timeout(Duration::from_secs(10), objects.try_next())
        .await
        .expect("watcher in time")
        .expect("watcher ok")
        .expect("object");
    assert_eq!(seen.metadata.name.as_deref(), Some("w1"));
}

async fn watch_from_compacted_version_is_410(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let first = api
        .create(&PostParams::default(), &cm("c1", json!({})))
        .await
        .expect("create");
    let old = first.metadata.resource_version.clone().expect("rv");
    api.create(&PostParams::default(), &cm("c2", json!({})))
        .await
        .expect("create");
    api.create(&PostParams::default(), &cm("c3", json!({})))
        .await
        .expect("create");
    // History before c3 goes: a watch from c1's version (changes from the next revision on)
    // needs c2's revision, which is gone.
    let now = t.store.current_revision().await.expect("rev");
    t.store.compact(now).await.expect("compact");
    let mut stream = api
        .watch(&WatchParams::default(), &old)
        .await
        .expect("watch")
        .boxed();
    match tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await {
        Ok(Ok(Some(WatchEvent::Error(e)))) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    // A list at an exact, compacted resourceVersion is 410 as well.
    let exact = ListParams::default()
        .at(&old)
        .matching(kube::api::VersionMatch::Exact);
    let err = status_of(api.list(&exact).await.expect_err("compacted"));
    assert_eq!(err.code, 410);
}

/// kube-apiserver's compactor writes a key of its own every interval, so history moves on
/// and an old continue token expires even when nothing else is written; the 410 carries a
/// token that goes on at the latest state.
#[tokio::test(start_paused = true)]
async fn an_idle_clusters_continue_tokens_expire() {
    let t = TestServer::start_with(Backend::Memory, |b| {
        b.compaction_interval(Duration::from_secs(300))
    })
    .await;
    for name in ["a", "b", "c"] {
        let (code, body) = t
            .call(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                json!({"metadata": {"name": name}}),
            )
            .await;
        assert_eq!(code, 201, "{body}");
    }
    let path = "/api/v1/namespaces/default/configmaps?limit=1";
    let (code, first) = t.call("GET", path, serde_json::Value::Null).await;
    assert_eq!(code, 200, "{first}");
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // Within one interval the token still works.
    tokio::time::sleep(Duration::from_secs(301)).await;
    let next = format!("{path}&continue={token}");
    let (code, second) = t.call("GET", &next, serde_json::Value::Null).await;
    assert_eq!(code, 200, "{second}");
    // Two intervals on, with no client writing, it has expired.
    tokio::time::sleep(Duration::from_secs(300)).await;
    let (code, expired) = t.call("GET", &next, serde_json::Value::Null).await;
    assert_eq!(code, 410, "{expired}");
    assert_eq!(expired["reason"], "Expired");
    assert!(
        expired["message"]
            .as_str()
            .unwrap()
            .starts_with("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response"),
        "{expired}"
    );
    assert!(expired.get("details").is_none(), "{expired}");
    // Its token goes on where the list stood, at the latest state.
    let fresh = expired["metadata"]["continue"].as_str().unwrap();
    let (code, rest) = t
        .call(
            "GET",
            &format!("{path}&continue={fresh}"),
            serde_json::Value::Null,
        )
        .await;
    assert_eq!(code, 200, "{rest}");
    assert_eq!(rest["items"][0]["metadata"]["name"], "b");
}

/// Boolean query parameters as kube's parameter codec reads them: only `0` and `false` (in
/// any case) are false. The Python client's watches send `watch=True`.
#[tokio::test(start_paused = true)]
async fn boolean_parameters_are_read_as_kube_reads_them() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, body) = t
        .call(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "seen"}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let path = "/api/v1/namespaces/default/configmaps";
    for value in ["true", "True", "TRUE", "1", "t", "yes", ""] {
        let (code, first) = t.first_chunk(&format!("{path}?watch={value}")).await;
        assert_eq!(code, 200, "watch={value}: {first}");
        let event: serde_json::Value = serde_json::from_str(first.trim()).expect("an event");
        assert_eq!(event["type"], "ADDED", "watch={value}");
    }
    for value in ["false", "False", "FALSE", "0"] {
        let (code, listed) = t.first_chunk(&format!("{path}?watch={value}")).await;
        assert_eq!(code, 200, "watch={value}: {listed}");
        let list: serde_json::Value = serde_json::from_str(&listed).expect("a list");
        assert_eq!(list["kind"], "ConfigMapList", "watch={value}");
    }
    // The first value counts.
    let (_, first) = t
        .first_chunk(&format!("{path}?watch=True&watch=false"))
        .await;
    assert!(first.contains("\"ADDED\""), "{first}");
    // Bookmarks and initial events take the same spellings.
    let (code, first) = t
        .first_chunk(&format!(
            "{path}?watch=1&allowWatchBookmarks=True&sendInitialEvents=TRUE&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(code, 200, "{first}");
    assert!(first.contains("\"ADDED\""), "{first}");
}

/// Which request this is is read once, as kube's request info reads it, before anything
/// else: a verb with nothing after it is kube's plain-text 500, a path that does not decode
/// is refused before routing.
#[tokio::test(start_paused = true)]
async fn requests_are_read_once_before_anything_else() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, body) = t.first_chunk("/api/v1/watch?limit=1").await;
    assert_eq!(code, 500);
    assert_eq!(
        body,
        "Internal Server Error: \"/api/v1/watch?limit=1\": failed to create RequestInfo: \
         unable to determine kind and namespace from url, /api/v1/watch?limit=1\n"
    );
    let (code, body) = t
        .first_chunk("/api/v1/namespaces/default/configmaps/%zz")
        .await;
    assert_eq!(code, 400, "{body}");
    // A namespace's own path names it.
    let (code, body) = t.first_chunk("/api/v1/namespaces/default").await;
    assert_eq!(code, 200, "{body}");
}

/// Bodies are the bytes kube-apiserver writes: objects, lists and errors through its JSON
/// serializer end with a newline (clients compare error bodies); `/version` is indented and
/// has none.
#[tokio::test(start_paused = true)]
async fn json_bodies_end_as_kube_apiserver_ends_them() {
    let t = TestServer::start(Backend::Memory).await;
    for path in [
        "/api/v1/namespaces/default",
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/namespaces/default/configmaps/missing",
        "/api",
        "/apis/apps/v1",
    ] {
        let (_, body) = t.first_chunk(path).await;
        assert!(
            body.ends_with("}\n") && !body.ends_with("\n\n"),
            "{path}: {body:?}"
        );
    }
    // Indented for `?pretty=true` and for curl, as Go's MarshalIndent writes it.
    let (_, pretty) = t
        .first_chunk("/api/v1/namespaces/default?pretty=true")
        .await;
    assert!(
        pretty.starts_with("{\n  \"kind\": \"Namespace\",\n  \"apiVersion\": \"v1\","),
        "{pretty}"
    );
    assert!(pretty.ends_with("\n}"), "{pretty:?}");
    let (_, compact) = t
        .first_chunk("/api/v1/namespaces/default?pretty=false")
        .await;
    assert!(compact.starts_with("{\"kind\":\"Namespace\""), "{compact}");
    {
        use tower::ServiceExt;
        let req = http::Request::builder()
            .uri("/api/v1/namespaces/default")
            .header("user-agent", "curl/8.5.0")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = t.router.clone().oneshot(req).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert!(body.starts_with(b"{\n  \"kind\""), "{body:?}");
    }
    let (code, version) = t.first_chunk("/version").await;
    assert_eq!(code, 200);
    assert!(
        version.starts_with("{\n  \"major\": \"1\",\n  \"minor\": \"33\",\n"),
        "{version}"
    );
    assert!(version.ends_with("\n}"), "{version:?}");
}

async fn list_pagination(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    for i in 0..25 {
        api.create(&PostParams::default(), &cm(&format!("p-{i:02}"), json!({})))
            .await
            .expect("create");
    }
    let mut names = Vec::new();
    let mut params = ListParams::default().limit(10);
    let mut pages = 0;
    let mut rvs = Vec::new();
    loop {
        let page = api.list(&params).await.expect("page");
        pages += 1;
        rvs.push(page.metadata.resource_version.clone());
        if pages == 1 {
            assert_eq!(page.metadata.remaining_item_count, Some(15));
        }
        names.extend(page.items.into_iter().filter_map(|c| c.metadata.name));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => {
                params = ListParams::default().limit(10).continue_token(&token)
            }
            _ => break,
        }
        // Writes between pages do not show up: every page is read at the first page's revision.
        api.create(
            &PostParams::default(),
            &cm(&format!("late-{pages}"), json!({})),
        )
        .await
        .expect("create");
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..25).map(|i| format!("p-{i:02}")).collect();
    assert_eq!(names, expected);
    assert!(rvs.windows(2).all(|w| w[0] == w[1]), "{rvs:?}");
}

async fn selectors(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    for (name, tier) in [("a", "web"), ("b", "db"), ("c", "web")] {
        let mut c = cm(name, json!({}));
        c.metadata.labels = Some([("tier".to_string(), tier.to_string())].into());
        api.create(&PostParams::default(), &c)
            .await
            .expect("create");
    }
    let names = |list: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        list.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("tier=web"))
                .await
                .expect("list")
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("tier in (db)"))
                .await
                .expect("list")
        ),
        ["b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("tier!=web"))
                .await
                .expect("list")
        ),
        ["b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("!tier"))
                .await
                .expect("list")
        )
        .len(),
        0
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=b"))
                .await
                .expect("list")
        ),
        ["b"]
    );
    let err = status_of(
        api.list(&ListParams::default().fields("spec.nope=x"))
            .await
            .expect_err("unsupported field"),
    );
    assert_eq!(err.code, 400);
    let err = status_of(
        api.list(&ListParams::default().labels("tier in (web"))
            .await
            .expect_err("bad selector"),
    );
    assert_eq!(err.code, 400);
}

async fn generation_and_status_subresource(t: TestServer) {
    let api: Api<Deployment> = Api::namespaced(t.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &deployment("web", 1))
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    // Status is not set on create: it is what Go writes for an empty status, `{}`.
    assert_eq!(created.status, Some(Default::default()));

    let patched = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("spec patch");
    assert_eq!(
        patched.metadata.generation,
        Some(2),
        "spec change bumps generation"
    );

    let labelled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .expect("metadata patch");
    assert_eq!(
        labelled.metadata.generation,
        Some(2),
        "metadata change does not"
    );

    let with_status = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3, "readyReplicas": 2}})),
        )
        .await
        .expect("status patch");
    assert_eq!(
        with_status.metadata.generation,
        Some(2),
        "status change does not"
    );
    assert_eq!(
        with_status.status.as_ref().and_then(|s| s.ready_replicas),
        Some(2)
    );

    // The main resource ignores status; the status subresource ignores spec.
    let ignored = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 0}})),
        )
        .await
        .expect("status through main resource");
    assert_eq!(
        ignored.status.as_ref().and_then(|s| s.ready_replicas),
        Some(2)
    );
    let ignored = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 9}})),
        )
        .await
        .expect("spec through status");
    assert_eq!(ignored.spec.as_ref().and_then(|s| s.replicas), Some(3));
}

async fn finalizers_hold_deletion(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let mut c = cm("held", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    api.create(&PostParams::default(), &c)
        .await
        .expect("create");
    let pending = api
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let pending = pending.left().expect("deletion waits for the finalizer");
    assert!(pending.metadata.deletion_timestamp.is_some());
    let still = api.get("held").await.expect("still there");
    assert!(still.metadata.deletion_timestamp.is_some());

    let err = status_of(
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/cleanup", "new"]}})),
        )
        .await
        .expect_err("no new finalizers"),
    );
    assert_eq!(err.code, 422);

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    let gone = status_of(
        api.get("held")
            .await
            .expect_err("deleted after the last finalizer"),
    );
    assert_eq!(gone.code, 404);

    // Marking an object with a generation for deletion starts a new generation, as
    // kube-apiserver does, so generation-filtered controllers see it.
    let deployments: Api<Deployment> = Api::namespaced(t.client.clone(), "default");
    let mut d = deployment("held", 1);
    d.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    let created = deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    let marked = deployments
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("held by its finalizer");
    assert_eq!(marked.metadata.generation, Some(2));
    let again = deployments
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete again")
        .left()
        .expect("still held");
    assert_eq!(
        again.metadata.generation,
        Some(2),
        "only the first mark counts"
    );
}

async fn scale_subresource(t: TestServer) {
    let api: Api<Deployment> = Api::namespaced(t.client.clone(), "default");
    api.create(&PostParams::default(), &deployment("scaled", 2))
        .await
        .expect("create");
    let scale = api.get_scale("scaled").await.expect("get scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(
        scale.status.and_then(|s| s.selector).as_deref(),
        Some("app=scaled")
    );
    api.patch_scale(
        "scaled",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .expect("patch scale");
    let d = api.get("scaled").await.expect("get");
    assert_eq!(d.spec.and_then(|s| s.replicas), Some(5));
    assert_eq!(d.metadata.generation, Some(2));
}

/// The ConfigMaps as stored: each key with its mod revision. (The store's revision is not
/// compared: the server's own loops write beside the test, in `kube-system`.)
async fn stored_configmaps(t: &TestServer) -> Vec<(bytes::Bytes, i64)> {
    let prefix = bytes::Bytes::from_static(b"/registry/configmaps/");
    let listed = t
        .store
        .range(konverge_store::RangeRequest::new(
            konverge_store::KeyRange::prefix(prefix),
        ))
        .await
        .expect("range");
    listed
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.mod_revision))
        .filter(|(key, _)| !key.starts_with(b"/registry/configmaps/kube-system/"))
        .collect()
}

async fn dry_run_writes_nothing(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let before = stored_configmaps(&t).await;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answered = api
        .create(&dry, &cm("dry", json!({"a": "1"})))
        .await
        .expect("dry create");
    assert_eq!(answered.metadata.name.as_deref(), Some("dry"));
    assert_eq!(stored_configmaps(&t).await, before);
    assert_eq!(
        status_of(api.get("dry").await.expect_err("not created")).code,
        404
    );

    api.create(&PostParams::default(), &cm("real", json!({"a": "1"})))
        .await
        .expect("create");
    let before = stored_configmaps(&t).await;
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let answered = api
        .patch(
            "real",
            &dry_patch,
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await
        .expect("dry patch");
    assert_eq!(
        answered.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("2")
    );
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    api.delete("real", &dry_delete).await.expect("dry delete");
    assert_eq!(stored_configmaps(&t).await, before);
    let real = api.get("real").await.expect("still there");
    assert_eq!(
        real.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("1")
    );
}

async fn patches(t: TestServer) {
    let api: Api<Deployment> = Api::namespaced(t.client.clone(), "default");
    let mut d = deployment("patched", 1);
    if let Some(spec) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.containers.push(
            serde_json::from_value(json!({"name": "sidecar", "image": "busybox"}))
                .expect("container"),
        );
    }
    api.create(&PostParams::default(), &d)
        .await
        .expect("create");

    // Strategic merge: containers merge by name.
    let smp = api
        .patch(
            "patched",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.28"}]}}}})),
        )
        .await
        .expect("strategic");
    let containers = smp
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec")
        .containers;
    let images: Vec<_> = containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        images,
        vec![
            ("main".into(), "nginx:1.28".into()),
            ("sidecar".into(), "busybox".into())
        ]
    );

    // JSON patch, including a failing test op (422, nothing written).
    let json_patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/replicas", "value": 4}
    ]))
    .expect("patch");
    let jp = api
        .patch(
            "patched",
            &PatchParams::default(),
            &Patch::Json::<()>(json_patch),
        )
        .await
        .expect("json patch");
    assert_eq!(jp.spec.and_then(|s| s.replicas), Some(4));
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/replicas", "value": 99},
        {"op": "replace", "path": "/spec/replicas", "value": 7}
    ]))
    .expect("patch");
    let err = status_of(
        api.patch(
            "patched",
            &PatchParams::default(),
            &Patch::Json::<()>(failing),
        )
        .await
        .expect_err("test fails"),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        api.get("patched")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.replicas),
        Some(4)
    );

    // Merge patch with null removes a key.
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &cm("m", json!({"keep": "1", "drop": "2"})),
    )
    .await
    .expect("create");
    let merged = cms
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"drop": null}})),
        )
        .await
        .expect("merge");
    assert_eq!(
        merged
            .data
            .expect("data")
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        vec!["keep".to_string()]
    );
}

async fn no_op_update_keeps_resource_version(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &cm("same", json!({"a": "1"})))
        .await
        .expect("create");
    let before = stored_configmaps(&t).await;
    let again = api
        .replace("same", &PostParams::default(), &created)
        .await
        .expect("replace");
    assert_eq!(
        again.metadata.resource_version,
        created.metadata.resource_version
    );
    let patched = api
        .patch(
            "same",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "1"}})),
        )
        .await
        .expect("patch");
    assert_eq!(
        patched.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(stored_configmaps(&t).await, before, "nothing was written");
}

async fn owned_pair(api: &Api<ConfigMap>, owner: &str, dependent: &str) -> ConfigMap {
    let owner_obj = api
        .create(&PostParams::default(), &cm(owner, json!({})))
        .await
        .expect("owner");
    let mut dep = cm(dependent, json!({}));
    dep.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner,
            "uid": owner_obj.metadata.uid.clone().expect("uid"),
            "blockOwnerDeletion": true,
        }))
        .expect("owner reference"),
    ]);
    api.create(&PostParams::default(), &dep)
        .await
        .expect("dependent");
    owner_obj
}

async fn exists(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.expect("get").is_some()
}

async fn garbage_collection_background(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    owned_pair(&api, "owner", "dep").await;
    // A dependent whose owner lives on is left alone: real time for the collector's passes
    // (20 ms after a change) to have acted, since what is asserted is that nothing happens.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(exists(&api, "dep").await);
    api.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    eventually("the dependent is collected", || async {
        !exists(&api, "dep").await
    })
    .await;
}

async fn garbage_collection_foreground(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    owned_pair(&api, "fg-owner", "fg-dep").await;
    let pending = api
        .delete("fg-owner", &DeleteParams::foreground())
        .await
        .expect("delete owner");
    let pending = pending.left().expect("the owner waits for its dependents");
    assert!(
        pending
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually("dependent and owner are gone", || async {
        !exists(&api, "fg-dep").await && !exists(&api, "fg-owner").await
    })
    .await;
}

/// `a` owns `b` and `b` owns `a`, both references blocking: a foreground deletion of `a` would
/// wait for `b`, which would wait for `a`. The collector makes `b`'s references non-blocking
/// (as kube-controller-manager's does), and both go.
async fn garbage_collection_foreground_unwinds_owner_cycles(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    owned_pair(&api, "cycle-a", "cycle-b").await;
    let b = api.get("cycle-b").await.expect("b");
    let refer_to = |obj: &ConfigMap| {
        json!({"metadata": {"ownerReferences": [{
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": obj.metadata.name.clone().expect("name"),
            "uid": obj.metadata.uid.clone().expect("uid"),
            "blockOwnerDeletion": true,
        }]}})
    };
    api.patch(
        "cycle-a",
        &PatchParams::default(),
        &Patch::Merge(refer_to(&b)),
    )
    .await
    .expect("a is owned by b");
    api.delete("cycle-a", &DeleteParams::foreground())
        .await
        .expect("delete a");
    eventually("both ends of the cycle are gone", || async {
        !exists(&api, "cycle-a").await && !exists(&api, "cycle-b").await
    })
    .await;

    // A dependent that does not block its owner does not hold a foreground deletion, and
    // is collected once the owner is gone.
    let owner = api
        .create(&PostParams::default(), &cm("loose-owner", json!({})))
        .await
        .expect("owner");
    let mut loose = cm("loose-dep", json!({}));
    loose.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    loose.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "loose-owner",
            "uid": owner.metadata.uid.clone().expect("uid"),
        }))
        .expect("owner reference"),
    ]);
    api.create(&PostParams::default(), &loose)
        .await
        .expect("dependent");
    api.delete("loose-owner", &DeleteParams::foreground())
        .await
        .expect("delete owner");
    eventually("the owner is gone while its dependent is held", || async {
        !exists(&api, "loose-owner").await
    })
    .await;
    eventually("the dependent is being deleted", || async {
        api.get("loose-dep")
            .await
            .expect("held by its finalizer")
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    api.patch(
        "loose-dep",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    eventually("the dependent is gone", || async {
        !exists(&api, "loose-dep").await
    })
    .await;
}

async fn garbage_collection_orphan(t: TestServer) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    owned_pair(&api, "or-owner", "or-dep").await;
    api.delete("or-owner", &DeleteParams::orphan())
        .await
        .expect("delete owner");
    eventually("the owner is gone", || async {
        !exists(&api, "or-owner").await
    })
    .await;
    let dep = api.get("or-dep").await.expect("the dependent stays");
    assert!(
        dep.metadata.owner_references.unwrap_or_default().is_empty(),
        "its owner reference is removed"
    );
}

async fn namespace_deletion_empties_the_namespace(t: TestServer) {
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "scratch"}})).expect("ns");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create ns");
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "scratch");
    api.create(&PostParams::default(), &cm("plain", json!({})))
        .await
        .expect("cm");
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held)
        .await
        .expect("held cm");

    namespaces
        .delete("scratch", &DeleteParams::default())
        .await
        .expect("delete ns");
    let terminating = namespaces.get("scratch").await.expect("still there");
    assert_eq!(
        terminating.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    eventually("the plain object is deleted", || async {
        !exists(&api, "plain").await
    })
    .await;

    let refused = status_of(
        api.create(&PostParams::default(), &cm("late", json!({})))
            .await
            .expect_err("terminating"),
    );
    assert_eq!((refused.code, refused.reason.as_str()), (403, "Forbidden"));
    assert!(
        refused.message.contains("because it is being terminated"),
        "{}",
        refused.message
    );

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    eventually("the namespace is gone", || async {
        namespaces.get_opt("scratch").await.expect("get").is_none()
    })
    .await;
}
