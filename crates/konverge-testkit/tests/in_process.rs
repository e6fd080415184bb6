//! The in-process client: CRUD, watches, faults, the request log and restarts without a
//! socket, in Tokio's paused time — and a controller's ten-minute requeue that takes no real
//! time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use konverge_testkit::{Error, Rule, StatusCode, TestEnv, Verb};
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use serde_json::json;
use tokio::time::Instant;

mod support;
use support::{added_name, next, watch};

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), value.to_string())])),
        ..ConfigMap::default()
    }
}

fn value(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get("v").map(String::as_str)
}

fn rv(cm: &ConfigMap) -> String {
    cm.metadata
        .resource_version
        .clone()
        .expect("resourceVersion")
}

async fn in_process() -> TestEnv {
    TestEnv::builder().in_process().start().await
}

/// What the request log holds: verb, status, injected.
fn log(env: &TestEnv) -> Vec<(Option<Verb>, u16, bool)> {
    env.requests()
        .records()
        .into_iter()
        .map(|r| (r.request.verb, r.status.as_u16(), r.injected))
        .collect()
}

/// The error a kube client reports when its service failed, not the server: the testkit's
/// own [`Error`] inside.
fn transport_error(error: &kube::Error) -> Option<&Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(found) = e.downcast_ref::<Error>() {
            return Some(found);
        }
        source = e.source();
    }
    None
}

#[tokio::test(start_paused = true)]
async fn crud_through_the_in_process_client() -> anyhow::Result<()> {
    let env = in_process().await;
    assert_eq!(env.socket_addr(), None, "no listener");
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");

    let created = api
        .create(&PostParams::default(), &config_map("a", "1"))
        .await?;
    let got = api.get("a").await?;
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(value(&got), Some("1"));

    let mut changed = got.clone();
    changed.data = Some(BTreeMap::from([("v".into(), "2".into())]));
    let replaced = api.replace("a", &PostParams::default(), &changed).await?;
    assert!(rv(&replaced).parse::<u64>()? > rv(&got).parse::<u64>()?);
    let patched = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "3"}})),
        )
        .await?;
    assert_eq!(value(&patched), Some("3"));
    let applied = api
        .patch(
            "b",
            &PatchParams::apply("in-process").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "b"}, "data": {"v": "applied"}
            })),
        )
        .await?;
    assert_eq!(value(&applied), Some("applied"));

    let names: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .collect();
    assert_eq!(names, ["a", "b"]);
    api.delete("a", &DeleteParams::default()).await?;
    assert!(api.get_opt("a").await?.is_none());
    let missing = api.get("a").await.expect_err("deleted");
    assert!(matches!(missing, kube::Error::Api(s) if s.code == 404));

    // Every request went through the faults into the log, none injected.
    assert_eq!(
        log(&env),
        [
            (Some(Verb::Create), 201, false),
            (Some(Verb::Get), 200, false),
            (Some(Verb::Update), 200, false),
            (Some(Verb::Patch), 200, false),
            (Some(Verb::Patch), 201, false),
            (Some(Verb::List), 200, false),
            (Some(Verb::Delete), 200, false),
            (Some(Verb::Get), 404, false),
            (Some(Verb::Get), 404, false),
        ]
    );
    assert_eq!(env.requests().writes(), 5);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_watch_streams_and_is_cut_by_drop_watches() -> anyhow::Result<()> {
    let env = in_process().await;
    let faults = env.faults();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let start = rv(&api
        .create(&PostParams::default(), &config_map("a", "0"))
        .await?);
    let mut events = watch(&api, &start).await?;
    assert_eq!(
        faults.open_watches(),
        1,
        "open as soon as its response started"
    );
    api.create(&PostParams::default(), &config_map("b", "0"))
        .await?;
    assert_eq!(added_name(next(&mut events).await), "b");
    api.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "1"}})),
    )
    .await?;
    match next(&mut events).await {
        Some(WatchEvent::Modified(cm)) => assert_eq!(value(&cm), Some("1")),
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    faults.drop_watches();
    assert!(next(&mut events).await.is_none(), "the stream ended");
    assert_eq!(faults.open_watches(), 0);
    // Resuming from before loses nothing.
    let mut resumed = watch(&api, &start).await?;
    assert_eq!(added_name(next(&mut resumed).await), "b");
    assert_eq!(env.requests().count(Verb::Watch, "configmaps"), 2);
    Ok(())
}

/// With nothing to send, a watch waits in virtual time until the server ends it at its
/// `timeoutSeconds`: five minutes pass, at once.
#[tokio::test(start_paused = true)]
async fn an_idle_watch_runs_to_its_timeout_in_virtual_time() -> anyhow::Result<()> {
    let env = in_process().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let start = rv(&api
        .create(&PostParams::default(), &config_map("a", "0"))
        .await?);
    let real = std::time::Instant::now();
    let began = Instant::now();
    let mut events = api
        .watch(&WatchParams::default().timeout(300), &start)
        .await?
        .boxed();
    // Nothing changes in the namespace; the server's own writes elsewhere (its identity
    // Lease, renewed every 10 seconds) move the revision on, which bookmarks carry, as on a
    // cluster.
    loop {
        match tokio::time::timeout(Duration::from_secs(400), events.next()).await? {
            None => break,
            Some(Ok(kube::api::WatchEvent::Bookmark(_))) => {}
            other => panic!("only bookmarks before the server ends the watch: {other:?}"),
        }
    }
    let waited = began.elapsed();
    assert!(
        waited >= Duration::from_secs(300) && waited < Duration::from_secs(301),
        "{waited:?}"
    );
    assert!(
        real.elapsed() < Duration::from_secs(5),
        "{:?}",
        real.elapsed()
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn injected_faults_answer_in_process_requests() -> anyhow::Result<()> {
    let env = in_process().await;
    let faults = env.faults();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let cm = api
        .create(&PostParams::default(), &config_map("a", "0"))
        .await?;

    // A conflict answers once, never reaching the server.
    faults.inject_conflicts(Rule::new().verb(Verb::Update).resource("configmaps"), 1);
    let error = api
        .replace("a", &PostParams::default(), &cm)
        .await
        .expect_err("injected conflict");
    assert!(matches!(&error, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"));
    api.replace("a", &PostParams::default(), &cm).await?;

    // A 429 with Retry-After: the client retries on its own, after the server's 7 seconds.
    faults.fail(
        Rule::new().verb(Verb::List),
        konverge_testkit::Failure::too_many_requests().retry_after(7),
        1,
    );
    let began = Instant::now();
    api.list(&ListParams::default()).await?;
    let waited = began.elapsed();
    assert!(
        waited >= Duration::from_secs(7) && waited < Duration::from_millis(7001),
        "{waited:?}"
    );

    // A delay holds exactly the matching requests, for exactly that long.
    faults.delay(Rule::new().verb(Verb::Get), Duration::from_secs(30));
    let began = Instant::now();
    let slow = tokio::spawn({
        let api = api.clone();
        async move { api.get("a").await }
    });
    api.list(&ListParams::default()).await?;
    assert_eq!(began.elapsed(), Duration::ZERO, "a list is not delayed");
    assert!(!slow.is_finished());
    slow.await??;
    assert_eq!(began.elapsed(), Duration::from_secs(30));
    faults.clear();

    // A lost response: the write happens, the client hears 504 and (retrying) 409.
    faults.lose_responses(Rule::new().verb(Verb::Create), 1);
    let error = api
        .create(&PostParams::default(), &config_map("lost", "0"))
        .await
        .expect_err("the answer was lost");
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 409),
        "{error}"
    );
    assert!(api.get_opt("lost").await?.is_some(), "the write happened");

    // An injected 500 is not retried.
    faults.inject_errors(
        Rule::new().resource("configmaps").name("a"),
        StatusCode::INTERNAL_SERVER_ERROR,
        1,
    );
    let error = api.get("a").await.expect_err("injected 500");
    assert!(matches!(&error, kube::Error::Api(s) if s.code == 500));
    assert_eq!(faults.pending_failures(), 0);

    assert_eq!(
        log(&env),
        [
            (Some(Verb::Create), 201, false),
            (Some(Verb::Update), 409, true),
            (Some(Verb::Update), 200, false),
            (Some(Verb::List), 429, true),
            (Some(Verb::List), 200, false),
            (Some(Verb::List), 200, false),
            (Some(Verb::Get), 200, false),
            (Some(Verb::Create), 504, true),
            (Some(Verb::Create), 409, false),
            (Some(Verb::Get), 200, false),
            (Some(Verb::Get), 500, true),
        ]
    );
    Ok(())
}

/// A restart in virtual time: the open watch and a request awaiting its answer are cut,
/// requests are refused while the server is down, the direct client waits for it, and the
/// new server has every write.
#[tokio::test(start_paused = true)]
async fn a_restart_cuts_refuses_and_comes_back() -> anyhow::Result<()> {
    let env = in_process().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let before = api
        .create(&PostParams::default(), &config_map("before", "0"))
        .await?;
    let mut events = watch(&api, &rv(&before)).await?;
    let old = env.server();
    // A list held back by a delay is still waiting for its answer when the server goes.
    env.faults()
        .delay_next(Rule::new().verb(Verb::List), Duration::from_secs(10), 1);
    let waiting = tokio::spawn({
        let api = api.clone();
        async move { api.list(&ListParams::default()).await }
    });
    tokio::task::yield_now().await;

    let began = Instant::now();
    let restart = tokio::spawn({
        let faults = env.faults();
        async move { faults.restart_server(Duration::from_secs(60)).await }
    });
    assert!(next(&mut events).await.is_none(), "the watch was cut");
    let cut = waiting.await?.expect_err("cut");
    assert!(
        matches!(transport_error(&cut), Some(Error::Cut)),
        "cut, not answered: {cut:?}"
    );
    assert_eq!(began.elapsed(), Duration::ZERO, "cut at once");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = api.get("before").await.expect_err("down");
    assert!(
        matches!(transport_error(&refused), Some(Error::Down)),
        "refused, not answered: {refused:?}"
    );
    // A client past the faults waits for the server instead.
    let direct: Api<ConfigMap> = Api::namespaced(env.direct_client(), "default");
    assert_eq!(
        direct.get("before").await?.metadata.uid,
        before.metadata.uid
    );
    assert!(
        began.elapsed() >= Duration::from_secs(60),
        "waited for the restart"
    );
    restart.await??;

    assert!(!Arc::ptr_eq(&old, &env.server()), "a new server");
    let kept = api.get("before").await?;
    assert_eq!(rv(&kept), rv(&before));
    let after = api
        .create(&PostParams::default(), &config_map("after", "0"))
        .await?;
    let mut events = watch(&api, &rv(&before)).await?;
    assert_eq!(added_name(next(&mut events).await), "after");
    assert!(rv(&after).parse::<u64>()? > rv(&before).parse::<u64>()?);
    // The refused request never reached the faults: not in the log.
    assert_eq!(env.requests().count(Verb::Get, "configmaps"), 1);
    Ok(())
}

/// A dropped environment cuts its in-process streams, and its clients fail from then on.
#[tokio::test(start_paused = true)]
async fn dropping_the_env_cuts_streams_and_fails_requests() -> anyhow::Result<()> {
    let env = in_process().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let start = rv(&api
        .create(&PostParams::default(), &config_map("a", "0"))
        .await?);
    let mut events = watch(&api, &start).await?;
    drop(env);
    assert!(next(&mut events).await.is_none(), "the watch ended");
    let error = api.get("a").await.expect_err("stopped");
    assert!(
        matches!(transport_error(&error), Some(Error::Stopped)),
        "{error:?}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn no_socket_means_no_url_and_no_kubeconfig() -> anyhow::Result<()> {
    let env = in_process().await;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("kubeconfig");
    let error = env
        .write_kubeconfig(&path)
        .expect_err("nothing to point at");
    assert_eq!(error.kind(), std::io::ErrorKind::Unsupported);
    assert!(
        matches!(
            error.get_ref().and_then(|e| e.downcast_ref::<Error>()),
            Some(Error::NoSocket)
        ),
        "{error}"
    );
    assert!(!path.exists(), "nothing written");
    assert_eq!(env.url(), "http://in-process.invalid");
    assert_eq!(env.addr().port(), 0);
    assert!(env.addr().ip().is_unspecified());
    assert_eq!(env.socket_addr(), None);
    assert!(format!("{env:?}").contains("in-process"));
    Ok(())
}

/// A ServiceAccount's client is in-process too, authorized by RBAC, and its denials reach
/// the permissions report.
#[tokio::test(start_paused = true)]
async fn a_service_account_client_is_in_process_and_authorized() -> anyhow::Result<()> {
    let env = in_process().await;
    let robot: Api<ConfigMap> =
        Api::namespaced(env.client_for("default", "robot").await?, "default");
    let error = robot
        .list(&ListParams::default())
        .await
        .expect_err("no role");
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 403),
        "{error}"
    );
    env.apply_manifests(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: default}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: robot-reads, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects: [{kind: ServiceAccount, name: robot, namespace: default}]
"#,
    )
    .await?;
    robot.list(&ListParams::default()).await?;
    let report = env.permissions("default", "robot").await;
    assert_eq!(report.denied.len(), 1, "{report}");
    assert_eq!(report.used.len(), 1, "{report}");
    assert_eq!(
        log(&env),
        [
            (Some(Verb::List), 403, false),
            (Some(Verb::List), 200, false)
        ],
        "the ServiceAccount's requests went through the faults"
    );
    Ok(())
}

/// Beside a loopback port, an in-process client shares the port's faults and request log.
#[tokio::test]
async fn an_in_process_client_beside_a_socket_shares_faults_and_log() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    assert!(env.socket_addr().is_some());
    let over_socket: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let in_process: Api<ConfigMap> = Api::namespaced(env.in_process_client(), "default");
    over_socket
        .create(&PostParams::default(), &config_map("a", "0"))
        .await?;
    env.faults()
        .inject_conflicts(Rule::new().verb(Verb::Patch), 1);
    let error = in_process
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "1"}})),
        )
        .await
        .expect_err("the conflict meant for any client");
    assert!(matches!(&error, kube::Error::Api(s) if s.code == 409));
    assert_eq!(value(&in_process.get("a").await?), Some("0"));
    assert_eq!(
        log(&env),
        [
            (Some(Verb::Create), 201, false),
            (Some(Verb::Patch), 409, true),
            (Some(Verb::Get), 200, false),
        ]
    );
    Ok(())
}

/// Reconciles, with the virtual time of each call; asks to be called again in ten minutes.
#[derive(Default)]
struct Calls(Mutex<Vec<Instant>>);

async fn every_ten_minutes(
    _: Arc<ConfigMap>,
    calls: Arc<Calls>,
) -> Result<konverge_runtime::Action, kube::Error> {
    calls.0.lock().expect("calls").push(Instant::now());
    Ok(konverge_runtime::Action::requeue(Duration::from_secs(600)))
}

/// A controller that requeues every ten minutes is called again after exactly ten virtual
/// minutes, while the watches it holds time out and reconnect in between — in well under a
/// second of real time.
#[tokio::test(start_paused = true)]
async fn a_ten_minute_requeue_passes_at_once_in_paused_time() -> anyhow::Result<()> {
    use konverge_runtime::{Controller, Manager, watcher};
    let real = std::time::Instant::now();
    let env = in_process().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &config_map("polled", "0"))
        .await?;
    let calls = Arc::new(Calls::default());
    let mut manager = Manager::new(env.client());
    manager.add(
        Controller::new(
            Api::<ConfigMap>::namespaced(env.client(), "default"),
            watcher::Config::default(),
        )
        .named("poller"),
        every_ten_minutes,
        calls.clone(),
    );
    let running = manager.spawn();
    let began = Instant::now();
    tokio::time::sleep(Duration::from_secs(20 * 60 + 30)).await;
    running.stop().await?;

    let calls = calls.0.lock().expect("calls").clone();
    assert_eq!(calls.len(), 3, "at 0, 10 and 20 minutes: {calls:?}");
    assert!(
        calls[0] - began < Duration::from_secs(1),
        "first pass at once"
    );
    for gap in calls.windows(2).map(|w| w[1] - w[0]) {
        assert!(
            gap >= Duration::from_secs(600) && gap < Duration::from_secs(601),
            "requeued after ten minutes: {gap:?}"
        );
    }
    // The watch ended at its timeout and was opened again, more than once.
    assert!(env.requests().count(Verb::Watch, "configmaps") >= 3);
    let real = real.elapsed();
    eprintln!("twenty virtual minutes of a controller took {real:?}");
    assert!(real < Duration::from_secs(10), "{real:?}");
    Ok(())
}
