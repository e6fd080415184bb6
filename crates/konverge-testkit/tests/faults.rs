//! Faults, through a real `kube::Client`: cut watches, expired history, injected errors and
//! latency.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_apiserver::registry::WatchCacheConfig;
use konverge_testkit::{Failure, Faults, Rule, StatusCode, TestEnv, Verb};
use kube::api::{Api, ListParams, ObjectMeta, PostParams, VersionMatch, WatchEvent};
use tower::{Layer, ServiceExt};

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

fn config_maps(env: &TestEnv) -> Api<ConfigMap> {
    Api::namespaced(env.client(), "default")
}

async fn create(api: &Api<ConfigMap>, name: &str) -> anyhow::Result<ConfigMap> {
    Ok(api
        .create(&PostParams::default(), &config_map(name, "0"))
        .await?)
}

fn rv(cm: &ConfigMap) -> String {
    cm.metadata
        .resource_version
        .clone()
        .expect("resourceVersion")
}

/// Waits until `faults` counts `n` open watches.
async fn open_watches(faults: &Faults, n: usize) {
    for _ in 0..1000 {
        if faults.open_watches() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{} open watches, expected {n}", faults.open_watches());
}

#[tokio::test]
async fn drop_watches_ends_open_streams_and_later_watches_work() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let faults = env.faults();
    let api = config_maps(&env);
    let start = rv(&create(&api, "a").await?);
    let mut first = watch(&api, &start).await?;
    let mut second = watch(&api, &start).await?;
    open_watches(&faults, 2).await;
    create(&api, "b").await?;
    assert_eq!(added_name(next(&mut first).await), "b");
    assert_eq!(added_name(next(&mut second).await), "b");

    faults.drop_watches();
    assert!(next(&mut first).await.is_none(), "the stream ended");
    assert!(next(&mut second).await.is_none(), "the stream ended");
    open_watches(&faults, 0).await;

    // A watch started after the cut is not affected, and resuming loses nothing.
    let mut resumed = watch(&api, &start).await?;
    assert_eq!(added_name(next(&mut resumed).await), "b");
    create(&api, "c").await?;
    assert_eq!(added_name(next(&mut resumed).await), "c");
    assert_eq!(faults.open_watches(), 1);
    Ok(())
}

#[tokio::test]
async fn expire_history_answers_410_to_old_resource_versions_while_fresh_lists_work()
-> anyhow::Result<()> {
    expire_history_on(TestEnv::start().await).await
}

#[tokio::test]
async fn expire_history_works_on_the_disk_store() -> anyhow::Result<()> {
    expire_history_on(TestEnv::builder().disk().start().await).await
}

#[tokio::test]
async fn expire_history_works_without_the_watch_cache() -> anyhow::Result<()> {
    let config = WatchCacheConfig {
        enabled: false,
        ..WatchCacheConfig::default()
    };
    expire_history_on(TestEnv::builder().watch_cache(config).start().await).await
}

async fn expire_history_on(env: TestEnv) -> anyhow::Result<()> {
    let api = config_maps(&env);
    let old = rv(&create(&api, "a").await?);
    // Before: the server still serves history from `old` on.
    let mut before = watch(&api, &old).await?;
    create(&api, "b").await?;
    assert_eq!(added_name(next(&mut before).await), "b");
    drop(before);
    create(&api, "c").await?;

    let expired_at = env.faults().expire_history().await?;

    let mut late = watch(&api, &old).await?;
    match next(&mut late).await {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(
        next(&mut late).await.is_none(),
        "the stream ends after the error"
    );
    // History starts at `expired_at` (as etcd keeps the revision it compacted at): a client
    // that missed only the last change still gets it.
    let mut edge = watch(&api, &(expired_at - 1).to_string()).await?;
    assert_eq!(added_name(next(&mut edge).await), "c");

    let exact = ListParams::default().at(&old).matching(VersionMatch::Exact);
    match api.list(&exact).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected 410, got {other:?}"),
    }

    // What a client does next — a fresh list, then a watch from it — works.
    let fresh = api.list(&ListParams::default()).await?;
    let names: Vec<_> = fresh
        .iter()
        .filter_map(|cm| cm.metadata.name.clone())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    let listed_at = fresh.metadata.resource_version.clone().expect("list rv");
    assert!(listed_at.parse::<i64>()? >= expired_at);
    let mut again = watch(&api, &listed_at).await?;
    create(&api, "d").await?;
    assert_eq!(added_name(next(&mut again).await), "d");
    Ok(())
}

#[tokio::test]
async fn an_injected_conflict_is_seen_once_then_the_update_succeeds() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let faults = env.faults();
    let api = config_maps(&env);
    create(&api, "x").await?;
    faults.inject_conflicts(
        Rule::new()
            .verb(Verb::Update)
            .resource("configmaps")
            .name("x"),
        1,
    );
    assert_eq!(faults.pending_failures(), 1);

    // Reads are not affected.
    let mut cm = api.get("x").await?;
    let read_rv = rv(&cm);
    cm.data = Some(BTreeMap::from([("v".into(), "1".into())]));
    match api.replace("x", &PostParams::default(), &cm).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
            assert_eq!(
                status.message,
                "Operation cannot be fulfilled on configmaps \"x\": the object has been modified; please apply your changes to the latest version and try again"
            );
            let details = status.details.as_ref().expect("details");
            assert_eq!(
                (details.name.as_str(), details.kind.as_str()),
                ("x", "configmaps")
            );
        }
        other => panic!("expected 409, got {other:?}"),
    }
    assert_eq!(faults.pending_failures(), 0);
    // The server never saw the update.
    assert_eq!(rv(&api.get("x").await?), read_rv);

    let updated = api.replace("x", &PostParams::default(), &cm).await?;
    assert_eq!(updated.data, cm.data);
    let statuses: Vec<_> = env
        .requests()
        .records()
        .into_iter()
        .filter(|r| r.request.verb == Some(Verb::Update))
        .map(|r| (r.status.as_u16(), r.injected))
        .collect();
    assert_eq!(statuses, [(409, true), (200, false)]);
    Ok(())
}

#[tokio::test]
async fn injected_errors_fail_matching_requests_the_given_number_of_times() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let faults = env.faults();
    let api = config_maps(&env);
    create(&api, "x").await?;
    faults.inject_errors(
        Rule::new().verb(Verb::Get).resource("configmaps"),
        StatusCode::INTERNAL_SERVER_ERROR,
        2,
    );
    // Another verb on the same resource is not affected.
    api.list(&ListParams::default()).await?;
    for _ in 0..2 {
        match api.get("x").await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(
                    (status.code, status.reason.as_str()),
                    (500, "InternalError")
                );
                assert!(status.message.starts_with("Internal error occurred: "));
            }
            other => panic!("expected 500, got {other:?}"),
        }
    }
    api.get("x").await?;

    // A failure on create names the object from the request body, and nothing is written.
    faults.fail(
        Rule::new().verb(Verb::Create),
        Failure::new(StatusCode::CONFLICT, "AlreadyExists"),
        1,
    );
    match create(&api, "y").await {
        Err(e) => match e.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => {
                assert_eq!(
                    (status.code, status.reason.as_str()),
                    (409, "AlreadyExists")
                );
                assert_eq!(status.message, "configmaps \"y\" already exists");
            }
            other => panic!("expected 409, got {other:?}"),
        },
        Ok(cm) => panic!("created {cm:?}"),
    }
    assert!(api.get_opt("y").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn kube_clients_retry_an_injected_429_on_their_own() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let api = config_maps(&env);
    env.faults().fail(
        Rule::new().verb(Verb::List).resource("configmaps"),
        Failure::too_many_requests(),
        1,
    );
    api.list(&ListParams::default()).await?;
    let lists: Vec<_> = env
        .requests()
        .records()
        .into_iter()
        .map(|r| (r.request.verb, r.status.as_u16(), r.injected))
        .collect();
    assert_eq!(
        lists,
        [
            (Some(Verb::List), 429, true),
            (Some(Verb::List), 200, false)
        ]
    );
    Ok(())
}

#[tokio::test]
async fn delays_hold_matching_requests_only() -> anyhow::Result<()> {
    const LATENCY: Duration = Duration::from_secs(1);
    let env = TestEnv::start().await;
    let api = config_maps(&env);
    create(&api, "x").await?;
    env.faults()
        .delay(Rule::new().verb(Verb::List).resource("configmaps"), LATENCY);
    let started = std::time::Instant::now();
    let slow = tokio::spawn({
        let api = api.clone();
        async move { api.list(&ListParams::default()).await }
    });
    // An unmatched request is answered while the delayed one still waits.
    api.get("x").await?;
    assert!(!slow.is_finished(), "the list waits for its delay");
    let listed = slow.await??;
    assert_eq!(listed.items.len(), 1);
    assert!(started.elapsed() >= LATENCY, "{:?}", started.elapsed());

    env.faults().clear();
    let started = std::time::Instant::now();
    api.list(&ListParams::default()).await?;
    // Generous: only that the delay is gone, not how fast the list is.
    assert!(started.elapsed() < LATENCY * 5, "{:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn the_fault_layer_wraps_the_router_in_process() -> anyhow::Result<()> {
    let server = konverge_apiserver::ApiServer::builder(std::sync::Arc::new(
        konverge_store::MemStore::new(),
    ))
    .control_loops(false)
    .build()
    .await?;
    let faults = Faults::new(&server);
    faults.inject_errors(
        Rule::new().resource("namespaces"),
        StatusCode::SERVICE_UNAVAILABLE,
        1,
    );
    let service = faults.layer().layer(server.router());
    let get = || {
        http::Request::get("/api/v1/namespaces/default")
            .body(axum::body::Body::empty())
            .expect("request")
    };
    let response = service.clone().oneshot(get()).await?;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
    let status: serde_json::Value = serde_json::from_slice(&body)?;
    assert_eq!(
        (
            status["kind"].as_str(),
            status["reason"].as_str(),
            status["code"].as_u64()
        ),
        (Some("Status"), Some("ServiceUnavailable"), Some(503))
    );
    assert_eq!(status["details"]["name"], "default");
    let response = service.oneshot(get()).await?;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(faults.requests().len(), 2);
    Ok(())
}

/// A lost response: the server applies the write and the client is told 504 Timeout. kube's
/// client retries a 504 on its own, so the caller of a create sees the retry's 409
/// AlreadyExists for an object it made itself, as on a cluster whose connection broke.
#[tokio::test]
async fn lost_responses_apply_the_write_and_answer_a_timeout() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let api = config_maps(&env);
    env.faults()
        .lose_responses(Rule::new().verb(Verb::Create).resource("configmaps"), 1);
    let err = create(&api, "lost").await.expect_err("answer lost");
    assert!(err.to_string().contains("already exists"), "{err}");
    assert!(
        api.get_opt("lost").await?.is_some(),
        "the write was applied"
    );
    let answers: Vec<(u16, bool)> = env
        .requests()
        .records()
        .iter()
        .filter(|r| r.request.verb == Some(Verb::Create))
        .map(|r| (r.status.as_u16(), r.injected))
        .collect();
    assert_eq!(answers, [(504, true), (409, false)]);
    assert_eq!(env.faults().pending_failures(), 0);
    Ok(())
}

/// A fault plan carries out each of its steps: here a conflict and a lost response, as the
/// request log shows.
#[tokio::test]
async fn fault_plans_carry_out_their_steps() -> anyhow::Result<()> {
    use konverge_testkit::{Fault, FaultPlan, Step};
    let env = TestEnv::start().await;
    let api = config_maps(&env);
    let cm = create(&api, "x").await?;
    let plan = FaultPlan::from_steps(vec![
        Step {
            at: Duration::ZERO,
            fault: Fault::Conflicts { times: 1 },
        },
        Step {
            at: Duration::from_millis(10),
            fault: Fault::LostResponses { times: 1 },
        },
    ]);
    plan.run(&env.faults()).await;
    let conflict = api
        .replace("x", &PostParams::default(), &config_map("x", "1"))
        .await
        .expect_err("409");
    assert!(
        conflict
            .to_string()
            .contains("the object has been modified"),
        "{conflict}"
    );
    // The lost update is applied; kube's retry of it then conflicts with itself.
    let mut changed = cm.clone();
    changed.data = Some(BTreeMap::from([("v".to_string(), "2".to_string())]));
    let lost = api
        .replace("x", &PostParams::default(), &changed)
        .await
        .expect_err("lost, then a conflict");
    assert!(
        lost.to_string().contains("the object has been modified"),
        "{lost}"
    );
    assert_eq!(
        api.get("x").await?.data,
        changed.data,
        "the lost write was applied"
    );
    let injected: Vec<u16> = env
        .requests()
        .records()
        .iter()
        .filter(|r| r.injected)
        .map(|r| r.status.as_u16())
        .collect();
    assert_eq!(injected, [409, 504]);
    assert!(
        plan.to_string()
            .starts_with("fault plan 0: at 0 ms 1 conflicts")
    );
    Ok(())
}

fn value(cm: &ConfigMap) -> &str {
    cm.data
        .as_ref()
        .and_then(|d| d.get("v"))
        .map_or("", String::as_str)
}

/// Reads that let the server answer from a lagging cache (`resourceVersion=0`) get the
/// world as it was when the fault was injected; reads of the most recent state stay fresh.
#[tokio::test]
async fn stale_reads_answer_only_reads_that_allow_them_from_the_past() -> anyhow::Result<()> {
    use kube::api::GetParams;
    let env = TestEnv::start().await;
    let api = config_maps(&env);
    create(&api, "old").await?;
    let at = env
        .faults()
        .stale_reads(Rule::new().resource("configmaps"), 3)
        .await?;
    api.replace("old", &PostParams::default(), &{
        let mut cm = api.get("old").await?;
        cm.data = Some(BTreeMap::from([("v".to_string(), "1".to_string())]));
        cm
    })
    .await?;
    create(&api, "new").await?;

    // Most recent state: fresh, and not counted against the fault.
    assert_eq!(value(&api.get("old").await?), "1");
    let fresh = api.list(&ListParams::default()).await?;
    assert_eq!(fresh.items.len(), 2);
    assert_eq!(env.faults().pending_failures(), 3);

    // Any version: the object as it was, and the object created since does not exist.
    let stale = api.get_with("old", &GetParams::any()).await?;
    assert_eq!(value(&stale), "0");
    assert_eq!(stale.metadata.name.as_deref(), Some("old"));
    let missing = api
        .get_with("new", &GetParams::any())
        .await
        .expect_err("not there yet at the stale revision");
    assert!(
        matches!(&missing, kube::Error::Api(s) if s.code == 404 && s.message == r#"configmaps "new" not found"#),
        "{missing}"
    );
    // A stale list says where it stands, so a watch from it replays what came after.
    let list = api.list(&ListParams::default().match_any()).await?;
    assert_eq!(list.metadata.resource_version, Some(at.to_string()));
    assert_eq!(list.items.len(), 1);
    let mut events = watch(&api, &at.to_string()).await?;
    assert!(matches!(next(&mut events).await, Some(WatchEvent::Modified(cm)) if value(&cm) == "1"));
    assert_eq!(added_name(next(&mut events).await), "new");
    // Not older than a version after the pin: answered at that version.
    let newer = rv(&api.get("old").await?);
    let at_least = api
        .list(
            &ListParams::default()
                .at(&newer)
                .matching(VersionMatch::NotOlderThan),
        )
        .await?;
    assert_eq!(at_least.items.len(), 2, "nothing older than asked for");

    // Three stale answers were given; reads are fresh again.
    assert_eq!(env.faults().pending_failures(), 0);
    assert_eq!(value(&api.get_with("old", &GetParams::any()).await?), "1");
    let stale_answers = env
        .requests()
        .records()
        .iter()
        .filter(|r| r.injected)
        .count();
    assert_eq!(
        stale_answers, 3,
        "the not-older-than list was newer than the pin: not stale"
    );
    Ok(())
}

/// A restarted server cuts every connection, refuses them while it is down, and comes back
/// on the same address with every write and the same revisions; clients reconnect and
/// resume their watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_comes_back_with_its_data() -> anyhow::Result<()> {
    restart_on(TestEnv::start().await).await
}

/// On the disk store the store itself is closed and opened again from its files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_disk_store_reopens_it() -> anyhow::Result<()> {
    restart_on(TestEnv::builder().disk().start().await).await
}

async fn restart_on(env: TestEnv) -> anyhow::Result<()> {
    let api = config_maps(&env);
    let before = create(&api, "before").await?;
    let mut events = watch(&api, &rv(&before)).await?;
    open_watches(&env.faults(), 1).await;
    let old = env.server();

    let restart = tokio::spawn({
        let faults = env.faults();
        async move { faults.restart_server(Duration::from_millis(300)).await }
    });
    // The open watch ends with the connection. A bookmark may come first, and on the disk
    // store the store's closing can reach the watch before the connection is cut (an ERROR
    // event, as kube-apiserver's watch ends when its storage goes): no object event comes.
    let ended = loop {
        match next(&mut events).await {
            Some(WatchEvent::Bookmark(_) | WatchEvent::Error(_)) => continue,
            other => break other,
        }
    };
    assert!(ended.is_none(), "the watch was cut, not {ended:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = api.get("before").await.expect_err("down");
    assert!(
        !matches!(refused, kube::Error::Api(_)),
        "no server to answer: {refused}"
    );
    // A client past the faults waits for the server instead.
    let direct: Api<ConfigMap> = Api::namespaced(env.direct_client(), "default");
    assert_eq!(
        direct.get("before").await?.metadata.uid,
        before.metadata.uid
    );
    restart.await??;

    assert!(!std::sync::Arc::ptr_eq(&old, &env.server()), "a new server");
    let kept = api.get("before").await?;
    assert_eq!(kept.metadata.uid, before.metadata.uid);
    assert_eq!(rv(&kept), rv(&before));
    let after = create(&api, "after").await?;
    assert!(rv(&after).parse::<u64>()? > rv(&before).parse::<u64>()?);
    // A watch from before the restart resumes on the new server.
    let mut events = watch(&api, &rv(&before)).await?;
    assert_eq!(added_name(next(&mut events).await), "after");
    // The faults follow the new server.
    env.faults().expire_history().await?;
    Ok(())
}

/// A plan's restart step restarts the server; the invariants' observer follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_restarts_the_server() -> anyhow::Result<()> {
    use konverge_testkit::{Fault, FaultPlan, Step};
    let env = TestEnv::builder().disk().start().await;
    let check = env.invariants().watch::<ConfigMap>().start().await;
    let api = config_maps(&env);
    create(&api, "a").await?;
    FaultPlan::from_steps(vec![Step {
        at: Duration::ZERO,
        fault: Fault::Restart {
            down: Duration::from_millis(50),
        },
    }])
    .run(&env.faults())
    .await;
    create(&api, "b").await?;
    check
        .converges(Duration::from_secs(10), |world| {
            match world.get("configmaps", "default", "b") {
                Some(_) => Ok(()),
                None => Err("b not seen".into()),
            }
        })
        .await
        .map_err(|v| anyhow::anyhow!("{v}"))?;
    Ok(())
}
