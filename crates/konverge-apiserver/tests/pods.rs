//! What kube-apiserver does for pods beyond storing them: graceful deletion (a scheduled pod
//! terminates for its grace period, and goes when its kubelet deletes it with none left),
//! and `pods/log` answered through the [`PodLogs`] hook.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::eventually::{eventually, eventually_some};
use common::{Backend, TestServer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use konverge_apiserver::{LogLine, PodLogs};
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, LogParams, Patch, PatchParams, PostParams,
    Preconditions, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

fn pod(name: &str, extra: Value) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
    });
    merge(&mut pod, extra);
    serde_json::from_value(pod).expect("a pod")
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (k, v) in from {
                merge(into.entry(k).or_insert(Value::Null), v);
            }
        }
        (into, from) => *into = from,
    }
}

fn time(text: &str) -> jiff::Timestamp {
    text.parse().expect("a time")
}

/// The seconds between two `metadata` times.
fn seconds_between(
    from: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    to: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> i64 {
    to.0.as_second() - from.0.as_second()
}

async fn running_on(pods: &Api<Pod>, name: &str, node: &str) -> Pod {
    pods.create(
        &PostParams::default(),
        &pod(name, json!({"spec": {"nodeName": node}})),
    )
    .await
    .expect("create");
    let mut status = pods.get_status(name).await.expect("status");
    status.status.get_or_insert_default().phase = Some("Running".into());
    pods.replace_status(name, &PostParams::default(), &status)
        .await
        .expect("running")
}

fn grace(seconds: u32) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(seconds),
        ..DeleteParams::default()
    }
}

async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Pod>>> + Unpin),
) -> (String, Pod) {
    let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on")
        .expect("an event");
    match event {
        WatchEvent::Added(p) => ("ADDED".into(), p),
        WatchEvent::Modified(p) => ("MODIFIED".into(), p),
        WatchEvent::Deleted(p) => ("DELETED".into(), p),
        other => panic!("unexpected {other:?}"),
    }
}

/// A scheduled pod is marked for deletion for its grace period; later deletes may only
/// shorten it; a delete with no grace left (the kubelet's) removes it, and a watch sees each
/// mark, then the deletion.
#[tokio::test]
async fn a_scheduled_pod_terminates_for_its_grace_period() {
    let t = TestServer::start(Backend::Memory).await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    let created = running_on(&pods, "web-1", "node-1").await;
    let rv = created.metadata.resource_version.clone().expect("rv");
    let mut watch = pods
        .watch(&WatchParams::default().fields("metadata.name=web-1"), &rv)
        .await
        .expect("watch")
        .boxed();

    let before = jiff::Timestamp::now().as_second();
    let marked = pods
        .delete("web-1", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("a terminating pod answers with itself");
    let after = jiff::Timestamp::now().as_second();
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
    let at = marked
        .metadata
        .deletion_timestamp
        .clone()
        .expect("deletionTimestamp")
        .0
        .as_second();
    assert!(
        (before + 30..=after + 30).contains(&at),
        "{at} not 30s after {before}..{after}"
    );
    let stored = pods.get("web-1").await.expect("still there");
    assert_eq!(
        stored.metadata.deletion_timestamp,
        marked.metadata.deletion_timestamp
    );

    // The same or a longer grace changes nothing.
    for params in [DeleteParams::default(), grace(30), grace(45)] {
        let again = pods
            .delete("web-1", &params)
            .await
            .expect("delete")
            .left()
            .expect("pod");
        assert_eq!(
            again.metadata.resource_version,
            marked.metadata.resource_version
        );
        assert_eq!(again.metadata.deletion_grace_period_seconds, Some(30));
    }

    // A shorter one moves the deletion time as much earlier.
    let shortened = pods
        .delete("web-1", &grace(10))
        .await
        .expect("delete")
        .left()
        .expect("pod");
    assert_eq!(shortened.metadata.deletion_grace_period_seconds, Some(10));
    assert_eq!(
        seconds_between(
            shortened.metadata.deletion_timestamp.as_ref().expect("ts"),
            marked.metadata.deletion_timestamp.as_ref().expect("ts"),
        ),
        20
    );

    // Status updates while terminating do not delete it.
    let mut status = pods.get_status("web-1").await.expect("status");
    status.status.get_or_insert_default().message = Some("stopping".into());
    pods.replace_status("web-1", &PostParams::default(), &status)
        .await
        .expect("a status update");
    assert!(pods.get_opt("web-1").await.expect("get").is_some());

    // The kubelet's final delete: no grace left, with the pod's uid as precondition.
    let uid = created.metadata.uid.clone().expect("uid");
    let wrong = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let conflict = pods.delete("web-1", &wrong).await.expect_err("another uid");
    assert!(
        matches!(conflict, kube::Error::Api(ref s) if s.code == 409),
        "{conflict}"
    );
    let last = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let gone = pods
        .delete("web-1", &last)
        .await
        .expect("delete")
        .left()
        .expect("the deleted pod");
    assert_eq!(gone.metadata.deletion_grace_period_seconds, Some(0));
    assert!(pods.get_opt("web-1").await.expect("get").is_none());

    let mut seen = Vec::new();
    for _ in 0..5 {
        let (kind, pod) = next_event(&mut watch).await;
        seen.push((kind, pod.metadata.deletion_grace_period_seconds));
    }
    assert_eq!(
        seen,
        [
            ("MODIFIED".to_string(), Some(30)),
            ("MODIFIED".to_string(), Some(10)),
            ("MODIFIED".to_string(), Some(10)),
            ("MODIFIED".to_string(), Some(0)),
            ("DELETED".to_string(), Some(0)),
        ]
    );
}

/// Pods no node runs, and pods that have finished, have nothing to stop: they go at once
/// (a watch still sees the deletion mark first, as kube-apiserver stores it).
#[tokio::test]
async fn unscheduled_and_finished_pods_go_at_once() {
    let t = TestServer::start(Backend::Memory).await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("pending", json!({})))
        .await
        .expect("create");
    let mut watch = pods
        .watch(
            &WatchParams::default().fields("metadata.name=pending"),
            created.metadata.resource_version.as_deref().expect("rv"),
        )
        .await
        .expect("watch")
        .boxed();
    let gone = pods
        .delete("pending", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("the pod as it was");
    assert_eq!(gone.metadata.deletion_grace_period_seconds, Some(0));
    assert!(pods.get_opt("pending").await.expect("get").is_none());
    let (first, marked) = next_event(&mut watch).await;
    assert_eq!(
        (
            first.as_str(),
            marked.metadata.deletion_grace_period_seconds
        ),
        ("MODIFIED", Some(0))
    );
    let (second, _) = next_event(&mut watch).await;
    assert_eq!(second, "DELETED");

    for phase in ["Succeeded", "Failed"] {
        let name = phase.to_lowercase();
        running_on(&pods, &name, "node-1").await;
        let mut status = pods.get_status(&name).await.expect("status");
        status.status.get_or_insert_default().phase = Some(phase.into());
        pods.replace_status(&name, &PostParams::default(), &status)
            .await
            .expect("finished");
        pods.delete(&name, &grace(60)).await.expect("delete");
        assert!(pods.get_opt(&name).await.expect("get").is_none(), "{phase}");
    }
}

/// `gracePeriodSeconds` comes from the query or a DeleteOptions body; a negative one is a
/// second; one that is not a number is refused; a dry run stores nothing.
#[tokio::test]
async fn grace_periods_from_query_and_body_and_dry_runs() {
    let t = TestServer::start(Backend::Memory).await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    running_on(&pods, "query", "node-1").await;
    let (code, body) = t
        .call(
            "DELETE",
            "/api/v1/namespaces/default/pods/query?gracePeriodSeconds=-5",
            Value::Null,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["kind"].as_str(),
            &body["metadata"]["deletionGracePeriodSeconds"]
        ),
        (Some("Pod"), &json!(1))
    );

    running_on(&pods, "body", "node-1").await;
    let (code, body) = t
        .call(
            "DELETE",
            "/api/v1/namespaces/default/pods/body?gracePeriodSeconds=50",
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 7}),
        )
        .await;
    assert_eq!(
        (code, &body["metadata"]["deletionGracePeriodSeconds"]),
        (200, &json!(7))
    );

    let (code, status) = t
        .call(
            "DELETE",
            "/api/v1/namespaces/default/pods/body?gracePeriodSeconds=soon",
            Value::Null,
        )
        .await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(
        status["message"],
        r#"strconv.ParseInt: parsing "soon": invalid syntax"#
    );

    running_on(&pods, "dry", "node-1").await;
    for params in [grace(20), grace(0)] {
        let dry = DeleteParams {
            dry_run: true,
            ..params
        };
        let answered = pods
            .delete("dry", &dry)
            .await
            .expect("dry run")
            .left()
            .expect("pod");
        assert!(answered.metadata.deletion_timestamp.is_some());
        let stored = pods.get("dry").await.expect("still there");
        assert!(stored.metadata.deletion_timestamp.is_none());
        assert_eq!(
            stored.metadata.resource_version,
            answered.metadata.resource_version
        );
    }
}

/// Finalizers and graceful deletion together: the pod goes only when both are done, and an
/// update that removes the last finalizer does not cut the grace short.
#[tokio::test]
async fn finalizers_and_grace_both_hold_a_pod() {
    let t = TestServer::start(Backend::Memory).await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("held", json!({"metadata": {"finalizers": ["example.com/hold"]}, "spec": {"nodeName": "node-1"}})),
    )
    .await
    .expect("create");
    let marked = pods
        .delete("held", &grace(15))
        .await
        .expect("delete")
        .left()
        .expect("pod");
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(15));
    let unheld = json!({"metadata": {"finalizers": null}});
    pods.patch("held", &PatchParams::default(), &Patch::Merge(&unheld))
        .await
        .expect("remove the finalizer");
    assert!(
        pods.get_opt("held").await.expect("get").is_some(),
        "the grace period still runs"
    );
    pods.delete("held", &grace(0)).await.expect("delete");
    assert!(pods.get_opt("held").await.expect("get").is_none());

    // The other order: no grace left, but a finalizer.
    pods.create(
        &PostParams::default(),
        &pod("held2", json!({"metadata": {"finalizers": ["example.com/hold"]}, "spec": {"nodeName": "node-1"}})),
    )
    .await
    .expect("create");
    let waiting = pods
        .delete("held2", &grace(0))
        .await
        .expect("delete")
        .left()
        .expect("pod");
    assert_eq!(waiting.metadata.deletion_grace_period_seconds, Some(0));
    assert!(pods.get_opt("held2").await.expect("get").is_some());
    pods.patch("held2", &PatchParams::default(), &Patch::Merge(&unheld))
        .await
        .expect("remove the finalizer");
    assert!(pods.get_opt("held2").await.expect("get").is_none());
}

/// Eviction and DeleteCollection delete pods as a DELETE does: gracefully, with the options
/// they carry. A terminating pod is not guarded by its budget any more.
#[tokio::test]
async fn evictions_and_collections_delete_gracefully() {
    let t = TestServer::start(Backend::Memory).await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    running_on(&pods, "evicted", "node-1").await;
    pods.evict("evicted", &EvictParams::default())
        .await
        .expect("evict");
    let evicted = pods.get("evicted").await.expect("terminating");
    assert_eq!(evicted.metadata.deletion_grace_period_seconds, Some(30));
    let (code, _) = t
        .call(
            "POST",
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "all"},
                   "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await;
    assert_eq!(code, 201);
    let labels = json!({"metadata": {"labels": {"app": "web"}}});
    pods.patch("evicted", &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .expect("label");
    // (kube-rs sends its EvictParams' delete options as `delete_options`, which
    // kube-apiserver ignores as an unknown field: the Eviction is sent by hand.)
    let (code, status) = t
        .call(
            "POST",
            "/api/v1/namespaces/default/pods/evicted/eviction",
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "evicted"},
                   "deleteOptions": {"gracePeriodSeconds": 0}}),
        )
        .await;
    assert_eq!(
        (code, status["status"].as_str()),
        (201, Some("Success")),
        "a terminating pod is evicted whatever its budget: {status}"
    );
    assert!(pods.get_opt("evicted").await.expect("get").is_none());

    running_on(&pods, "a", "node-1").await;
    running_on(&pods, "b", "node-2").await;
    pods.create(&PostParams::default(), &pod("c", json!({})))
        .await
        .expect("create");
    let deleted = pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("delete collection")
        .left()
        .expect("a list");
    assert_eq!(deleted.items.len(), 3);
    let mut left: Vec<(String, Option<i64>)> = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.metadata.deletion_grace_period_seconds,
            )
        })
        .collect();
    left.sort();
    assert_eq!(
        left,
        [("a".to_string(), Some(30)), ("b".to_string(), Some(30))]
    );
}

/// A namespace being deleted waits for its terminating pods, and goes once they are gone.
#[tokio::test]
async fn a_namespace_waits_for_its_terminating_pods() {
    let t = TestServer::start(Backend::Memory).await;
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shop"}})).expect("ns"),
        )
        .await
        .expect("create namespace");
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "shop");
    // The namespace's default ServiceAccount comes first.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(t.client.clone(), "shop");
    eventually("the namespace's default ServiceAccount exists", || async {
        accounts.get_opt("default").await.expect("get").is_some()
    })
    .await;
    running_on(&pods, "web", "node-1").await;
    namespaces
        .delete("shop", &DeleteParams::default())
        .await
        .expect("delete namespace");
    let terminating = eventually_some("the namespace controller deletes the pod", || async {
        pods.get_opt("web")
            .await
            .expect("get")
            .filter(|pod| pod.metadata.deletion_timestamp.is_some())
    })
    .await;
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    // Real time for the namespace controller's passes (every 20 ms after a change) to have
    // finalized the namespace, were it not waiting for the pod: what is asserted is that
    // nothing happens.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        namespaces.get_opt("shop").await.expect("get").is_some(),
        "waits for the pod"
    );

    pods.delete("web", &grace(0))
        .await
        .expect("the kubelet's delete");
    eventually(
        "the namespace is finalized once its pods are gone",
        || async { namespaces.get_opt("shop").await.expect("get").is_none() },
    )
    .await;
}

/// A fake of the simulated kubelets: logs by (pod, container, previous), pods on nodes it
/// runs, and containers that are still waiting.
#[derive(Default)]
struct FakeKubelets {
    nodes: Vec<String>,
    logs: BTreeMap<(String, String, bool), Vec<LogLine>>,
    asked: Mutex<Vec<(String, String, bool)>>,
}

impl PodLogs for FakeKubelets {
    fn logs(
        &self,
        pod: &Value,
        container: &str,
        previous: bool,
    ) -> Result<Option<Vec<LogLine>>, String> {
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        if !self.nodes.iter().any(|n| n == node) {
            return Ok(None);
        }
        self.asked
            .lock()
            .expect("lock")
            .push((name.clone(), container.to_string(), previous));
        if container == "waiting" {
            return Err(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
            ));
        }
        Ok(Some(
            self.logs
                .get(&(name, container.to_string(), previous))
                .cloned()
                .unwrap_or_default(),
        ))
    }
}

fn lines(texts: &[(&str, &str)]) -> Vec<LogLine> {
    texts
        .iter()
        .map(|(at, text)| LogLine {
            time: time(at),
            text: text.to_string(),
        })
        .collect()
}

struct LogServer {
    t: TestServer,
    kubelets: Arc<FakeKubelets>,
    pods: Api<Pod>,
}

async fn log_server() -> LogServer {
    let t = TestServer::start(Backend::Memory).await;
    let mut kubelets = FakeKubelets {
        nodes: vec!["node-1".into()],
        ..FakeKubelets::default()
    };
    let now = jiff::Timestamp::now();
    let recent = |ago: i64| (now - jiff::SignedDuration::from_secs(ago)).to_string();
    kubelets.logs.insert(
        ("web-1".into(), "web".into(), false),
        lines(&[
            ("2026-11-27T10:00:00Z", "starting"),
            ("2026-11-27T10:00:01.5Z", "listening on :80"),
            (&recent(120), "GET / 200"),
            (&recent(5), "GET /health 200"),
        ]),
    );
    kubelets.logs.insert(
        ("web-1".into(), "web".into(), true),
        lines(&[("2026-11-27T09:00:00Z", "panic: out of memory")]),
    );
    kubelets.logs.insert(
        ("multi".into(), "sidecar".into(), false),
        lines(&[("2026-11-27T10:00:00Z", "proxy up")]),
    );
    let kubelets = Arc::new(kubelets);
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    LogServer { t, kubelets, pods }
}

/// `pods/log` through kube-rs: every option a kubelet applies, on the hook's lines.
#[tokio::test]
async fn logs_are_answered_by_the_hook_with_every_option() {
    let LogServer { t, kubelets, pods } = log_server().await;
    t.server.set_pod_logs(kubelets.clone());
    pods.create(
        &PostParams::default(),
        &pod("web-1", json!({"spec": {"nodeName": "node-1"}})),
    )
    .await
    .expect("create");

    let all = pods
        .logs("web-1", &LogParams::default())
        .await
        .expect("logs");
    assert_eq!(
        all,
        "starting\nlistening on :80\nGET / 200\nGET /health 200\n"
    );
    let tail = pods
        .logs(
            "web-1",
            &LogParams {
                tail_lines: Some(2),
                ..LogParams::default()
            },
        )
        .await
        .expect("tail");
    assert_eq!(tail, "GET / 200\nGET /health 200\n");
    let stamped = pods
        .logs(
            "web-1",
            &LogParams {
                timestamps: true,
                tail_lines: Some(3),
                ..LogParams::default()
            },
        )
        .await
        .expect("timestamps");
    assert!(
        stamped.starts_with("2026-11-27T10:00:01.5Z listening on :80\n"),
        "{stamped}"
    );
    let recent = pods
        .logs(
            "web-1",
            &LogParams {
                since_seconds: Some(60),
                ..LogParams::default()
            },
        )
        .await
        .expect("since seconds");
    assert_eq!(recent, "GET /health 200\n");
    let since = pods
        .logs(
            "web-1",
            &LogParams {
                since_time: Some(time("2026-11-27T10:00:01Z")),
                tail_lines: Some(3),
                ..LogParams::default()
            },
        )
        .await
        .expect("since time");
    assert_eq!(since, "listening on :80\nGET / 200\nGET /health 200\n");
    let limited = pods
        .logs(
            "web-1",
            &LogParams {
                limit_bytes: Some(12),
                ..LogParams::default()
            },
        )
        .await
        .expect("limit bytes");
    assert_eq!(limited, "starting\nlis");
    let previous = pods
        .logs(
            "web-1",
            &LogParams {
                previous: true,
                container: Some("web".into()),
                ..LogParams::default()
            },
        )
        .await
        .expect("previous");
    assert_eq!(previous, "panic: out of memory\n");
    let followed = pods
        .logs(
            "web-1",
            &LogParams {
                follow: true,
                tail_lines: Some(1),
                ..LogParams::default()
            },
        )
        .await
        .expect("follow answers what there is and ends");
    assert_eq!(followed, "GET /health 200\n");
    assert!(
        kubelets
            .asked
            .lock()
            .expect("lock")
            .contains(&("web-1".into(), "web".into(), true))
    );

    // The answer is plain text.
    let (code, _) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/web-1/log",
            Value::Null,
        )
        .await;
    assert_eq!(code, 200);
}

/// The errors of `pods/log`, in kube-apiserver's words.
#[tokio::test]
async fn log_requests_are_refused_as_kube_apiserver_refuses_them() {
    let LogServer { t, kubelets, pods } = log_server().await;
    let path = |query: &str| format!("/api/v1/namespaces/default/pods/web-1/log?{query}");
    let refused = |code: u16, status: &Value| {
        (
            code,
            status["reason"].as_str().map(String::from),
            status["message"].as_str().map(String::from),
        )
    };

    // Without a hook, scheduled pods need a kubelet, as before.
    pods.create(
        &PostParams::default(),
        &pod("web-1", json!({"spec": {"nodeName": "node-1"}})),
    )
    .await
    .expect("create");
    let (code, status) = t.call("GET", &path(""), Value::Null).await;
    assert_eq!(
        refused(code, &status),
        (503, Some("ServiceUnavailable".into()), Some(r#"the log subresource needs the kubelet of node "node-1", and this server runs no nodes"#.into()))
    );
    t.server.set_pod_logs(kubelets.clone());

    for (query, message) in [
        (
            "tailLines=-1",
            r#"PodLogOptions "web-1" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"#,
        ),
        (
            "limitBytes=0",
            r#"PodLogOptions "web-1" is invalid: limitBytes: Invalid value: 0: must be greater than 0"#,
        ),
        (
            "sinceSeconds=0",
            r#"PodLogOptions "web-1" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0"#,
        ),
        (
            "sinceSeconds=5&sinceTime=2026-11-27T10:00:00Z",
            "PodLogOptions \"web-1\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
        (
            "stream=Stdout",
            r#"PodLogOptions "web-1" is invalid: stream: Forbidden: may not be specified"#,
        ),
        (
            "tailLines=-1&limitBytes=-2",
            r#"PodLogOptions "web-1" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, limitBytes: Invalid value: -2: must be greater than 0]"#,
        ),
    ] {
        let (code, status) = t.call("GET", &path(query), Value::Null).await;
        assert_eq!(
            refused(code, &status),
            (422, Some("Invalid".into()), Some(message.into())),
            "{query}"
        );
        assert_eq!(status["details"]["kind"], "PodLogOptions", "{query}");
    }
    let (code, status) = t.call("GET", &path("tailLines=-1"), Value::Null).await;
    assert_eq!(code, 422);
    assert_eq!(
        status["details"]["causes"][0],
        json!({"reason": "FieldValueInvalid", "message": "Invalid value: -1: must be greater than or equal to 0", "field": "tailLines"})
    );

    for (query, message) in [
        (
            "tailLines=ten",
            r#"strconv.ParseInt: parsing "ten": invalid syntax"#,
        ),
        (
            "limitBytes=",
            r#"strconv.ParseInt: parsing "": invalid syntax"#,
        ),
        (
            "container=nginx",
            "container nginx is not valid for pod web-1",
        ),
    ] {
        let (code, status) = t.call("GET", &path(query), Value::Null).await;
        assert_eq!(
            refused(code, &status),
            (400, Some("BadRequest".into()), Some(message.into())),
            "{query}"
        );
    }
    // Booleans are read as kube's parameter codec reads them: only `0` and `false` (in any
    // case) are false, so `follow=yes` and `timestamps=True` are taken, not refused.
    for query in ["follow=yes", "timestamps=True", "previous=0&follow=FALSE"] {
        let (code, _) = t.call("GET", &path(query), Value::Null).await;
        assert_eq!(code, 200, "{query}");
    }
    // A pod that is not there.
    let (code, status) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/nowhere/log",
            Value::Null,
        )
        .await;
    assert_eq!(
        refused(code, &status),
        (
            404,
            Some("NotFound".into()),
            Some(r#"pods "nowhere" not found"#.into())
        )
    );

    // Several containers: one must be named; init and ephemeral containers are listed too.
    pods.create(
        &PostParams::default(),
        &pod("multi", json!({"spec": {"nodeName": "node-1",
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [{"name": "web", "image": "nginx"}, {"name": "sidecar", "image": "envoy"}]}})),
    )
    .await
    .expect("create");
    let (code, status) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/multi/log",
            Value::Null,
        )
        .await;
    assert_eq!(
        refused(code, &status),
        (400, Some("BadRequest".into()), Some("a container name must be specified for pod multi, choose one of: [setup web sidecar]".into()))
    );
    let sidecar = pods
        .logs(
            "multi",
            &LogParams {
                container: Some("sidecar".into()),
                ..LogParams::default()
            },
        )
        .await
        .expect("named container");
    assert_eq!(sidecar, "proxy up\n");
    let setup = pods
        .logs(
            "multi",
            &LogParams {
                container: Some("setup".into()),
                ..LogParams::default()
            },
        )
        .await
        .expect("an init container");
    assert_eq!(setup, "");

    // The kubelet's refusal is a 400 with its words.
    pods.create(
        &PostParams::default(),
        &pod("slow", json!({"spec": {"nodeName": "node-1", "containers": [{"name": "waiting", "image": "nginx"}]}})),
    )
    .await
    .expect("create");
    let (code, status) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/slow/log",
            Value::Null,
        )
        .await;
    assert_eq!(
        refused(code, &status),
        (
            400,
            Some("BadRequest".into()),
            Some(
                r#"container "waiting" in pod "slow" is waiting to start: ContainerCreating"#
                    .into()
            )
        )
    );

    // A pod on a node the hook does not run: as without a hook.
    pods.create(
        &PostParams::default(),
        &pod("far", json!({"spec": {"nodeName": "node-9"}})),
    )
    .await
    .expect("create");
    let (code, status) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/far/log",
            Value::Null,
        )
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (503, Some("ServiceUnavailable"))
    );

    // A pod no node runs yet: nothing to stream.
    pods.create(&PostParams::default(), &pod("unscheduled", json!({})))
        .await
        .expect("create");
    let (code, body) = t
        .call(
            "GET",
            "/api/v1/namespaces/default/pods/unscheduled/log",
            Value::Null,
        )
        .await;
    assert_eq!((code, body), (204, Value::Null));
    let asked = kubelets.asked.lock().expect("lock").clone();
    assert!(
        !asked
            .iter()
            .any(|(pod, _, _)| pod == "unscheduled" || pod == "far"),
        "{asked:?}"
    );
}

/// Running, ready pods of `app=web` on node-1.
async fn ready_web_pod(pods: &Api<Pod>, name: &str) {
    pods.create(
        &PostParams::default(),
        &pod(
            name,
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"nodeName": "node-1"}}),
        ),
    )
    .await
    .expect("create");
    let mut status = pods.get_status(name).await.expect("status");
    status.status = Some(
        serde_json::from_value(json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }))
        .expect("a status"),
    );
    pods.replace_status(name, &PostParams::default(), &status)
        .await
        .expect("running");
}

async fn evict(t: &TestServer, name: &str, dry_run: bool) -> (u16, Value) {
    let query = if dry_run { "?dryRun=All" } else { "" };
    t.call(
        "POST",
        &format!("/api/v1/namespaces/default/pods/{name}/eviction{query}"),
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}),
    )
    .await
}

/// An eviction takes its disruption off the budget before the pod goes (kube's
/// `checkAndDecrement`), so evictions sent all at once — as `kubectl drain` sends them —
/// never take more than the budget allows.
#[tokio::test]
async fn evictions_take_their_disruption_off_the_budget() {
    let t = TestServer::start(Backend::Memory).await;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "default");
    for name in ["web-0", "web-1", "web-2"] {
        ready_web_pod(&pods, name).await;
    }
    let budgets = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
    let (code, _) = t
        .call(
            "POST",
            budgets,
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
                   "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await;
    assert_eq!(code, 201);

    // Not yet observed by the disruption controller: refused, to be retried.
    let (code, status) = evict(&t, "web-0", false).await;
    assert_eq!(code, 429, "{status}");
    assert_eq!(status["details"]["retryAfterSeconds"], 10);
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget web is still being processed by the server."
    );

    // The disruption controller's view: one disruption allowed.
    let (_, budget) = t.call("GET", &format!("{budgets}/web"), Value::Null).await;
    let mut observed = budget.clone();
    observed["status"] = json!({
        "observedGeneration": budget["metadata"]["generation"],
        "disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3,
        "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
    });
    let (code, _) = t
        .call("PUT", &format!("{budgets}/web/status"), observed)
        .await;
    assert_eq!(code, 200);

    // A dry run takes nothing.
    let (code, _) = evict(&t, "web-0", true).await;
    assert_eq!(code, 201);
    let (_, budget) = t.call("GET", &format!("{budgets}/web"), Value::Null).await;
    assert_eq!(budget["status"]["disruptionsAllowed"], 1);
    assert!(
        pods.get("web-0")
            .await
            .expect("web-0")
            .metadata
            .deletion_timestamp
            .is_none()
    );

    let (code, _) = evict(&t, "web-0", false).await;
    assert_eq!(code, 201);
    let (_, budget) = t.call("GET", &format!("{budgets}/web"), Value::Null).await;
    assert_eq!(budget["status"]["disruptionsAllowed"], 0);
    assert!(
        budget["status"]["disruptedPods"]["web-0"].is_string(),
        "{budget}"
    );
    let condition = &budget["status"]["conditions"][0];
    assert_eq!(
        (&condition["status"], &condition["reason"]),
        (&json!("False"), &json!("InsufficientPods"))
    );
    assert_ne!(condition["lastTransitionTime"], "2026-01-01T00:00:00Z");
    assert!(
        pods.get("web-0")
            .await
            .expect("web-0")
            .metadata
            .deletion_timestamp
            .is_some()
    );

    // The next eviction finds no disruption left.
    let (code, status) = evict(&t, "web-1", false).await;
    assert_eq!(code, 429, "{status}");
    assert_eq!(
        status["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(status["details"]["causes"][0]["reason"], "DisruptionBudget");
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget web needs 2 healthy pods and has 3 currently"
    );
    assert!(
        pods.get("web-1")
            .await
            .expect("web-1")
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // A negative allowance is refused outright.
    let (_, budget) = t.call("GET", &format!("{budgets}/web"), Value::Null).await;
    let mut negative = budget.clone();
    negative["status"]["disruptionsAllowed"] = json!(-1);
    t.call("PUT", &format!("{budgets}/web/status"), negative)
        .await;
    let (code, status) = evict(&t, "web-2", false).await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "poddisruptionbudget.policy \"web\" is forbidden: pdb disruptions allowed is negative"
    );
}

/// What a pod's fields are owned by, as on a cluster: the creator owns what it sent (with the
/// defaults decoding adds), not what admission adds (the service account's volume,
/// tolerations, priority) nor what the server sets (the QoS class); a binding is written
/// outside any field manager and the pod's update rules, so it adds no managed fields entry
/// and no generation. The body is what `kubectl run p --image=nginx` sends; the fields owned
/// are what a cluster records for it.
#[tokio::test]
async fn a_pods_fields_are_owned_as_on_a_cluster() {
    let t = TestServer::start(Backend::Memory).await;
    let (code, created) = t
        .call(
            "POST",
            "/api/v1/namespaces/default/pods?fieldManager=kubectl-run",
            json!({"kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": "p", "creationTimestamp": null, "labels": {"run": "p"}},
                "spec": {"containers": [{"name": "p", "image": "nginx", "resources": {}}],
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"},
                "status": {}}),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    // Admission did add its fields; nobody owns them.
    assert!(created["spec"]["volumes"].is_array(), "{created}");
    assert!(created["spec"]["tolerations"].is_array(), "{created}");
    assert_eq!(created["status"]["qosClass"], "BestEffort");
    let entries = created["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["manager"], "kubectl-run");
    assert_eq!(
        entries[0]["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:run": {}}},
            "f:spec": {
                "f:containers": {"k:{\"name\":\"p\"}": {
                    ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                    "f:resources": {}, "f:terminationMessagePath": {},
                    "f:terminationMessagePolicy": {},
                }},
                "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                "f:schedulerName": {}, "f:securityContext": {},
                "f:terminationGracePeriodSeconds": {},
            },
        })
    );

    let (code, bound) = t
        .call(
            "POST",
            "/api/v1/namespaces/default/pods/p/binding?fieldManager=kube-scheduler",
            json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}),
        )
        .await;
    assert_eq!(code, 201, "{bound}");
    let (_, pod) = t
        .call("GET", "/api/v1/namespaces/default/pods/p", Value::Null)
        .await;
    assert_eq!(pod["spec"]["nodeName"], "node-1");
    assert_eq!(pod["metadata"]["generation"], 1);
    assert_eq!(
        pod["metadata"]["managedFields"],
        created["metadata"]["managedFields"]
    );
    // Scheduled in the same write, as kube's binding storage marks it (owned by nobody).
    let conditions = pod["status"]["conditions"].as_array().expect("conditions");
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    assert_eq!(conditions[0]["type"], "PodScheduled");
    assert_eq!(conditions[0]["status"], "True");
    assert_eq!(conditions[0]["lastProbeTime"], Value::Null);
    assert!(conditions[0]["lastTransitionTime"].is_string());
    assert!(conditions[0].get("reason").is_none());
}
