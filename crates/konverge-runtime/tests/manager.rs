//! The manager's operational surface: the metrics/health endpoint and leader election between
//! two managers.
//!
//! The endpoint is HTTP on a real socket, so its test runs on the real clock (in paused time
//! the clock would jump ahead while a response is in the kernel). Leader election runs in
//! paused time against an in-process `TestEnv`: lease timings are virtual and exact.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::leader::LeaseConfig;
use konverge_runtime::{Action, Controller, Manager, watcher};
use konverge_testkit::TestEnv;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

mod support;
use support::{eventually, get};

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

type Seen = Arc<Mutex<Vec<String>>>;

async fn record(cm: Arc<ConfigMap>, seen: Arc<(String, Seen)>) -> Result<Action, kube::Error> {
    seen.1.lock().unwrap().push(format!(
        "{} {}",
        seen.0,
        cm.metadata.name.clone().unwrap_or_default()
    ));
    Ok(Action::await_change())
}

#[tokio::test]
async fn metrics_healthz_and_readyz_on_one_port() {
    let env = TestEnv::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &cm("one"))
        .await
        .unwrap();
    // Slow lists: the cache cannot be ready for a while.
    let faults = env.faults();
    faults.delay(
        konverge_testkit::Rule::new()
            .verb(konverge_testkit::Verb::List)
            .resource("configmaps"),
        Duration::from_millis(400),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let mut manager = Manager::new(env.client()).health_listener(listener);
    manager.add(
        Controller::new(
            Api::<ConfigMap>::namespaced(env.client(), "default"),
            watcher::Config::default(),
        )
        .named("recorder"),
        record,
        Arc::new(("m".to_string(), seen.clone())),
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(manager.run(async move {
        let _ = stopped.await;
    }));
    eventually("healthz", || async {
        TcpStream::connect(addr).await.is_ok() && get(addr, "/healthz").await.0 == 200
    })
    .await;
    assert_eq!(get(addr, "/readyz").await.0, 503, "caches still filling");
    eventually("ready", || async { get(addr, "/readyz").await.0 == 200 }).await;
    eventually("reconciled", || async { seen.lock().unwrap().len() == 1 }).await;
    let (code, body) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    for expected in [
        r#"controller_runtime_reconcile_total{controller="recorder",result="success"} 1"#,
        r#"controller_runtime_max_concurrent_reconciles{controller="recorder"} 1"#,
        r#"controller_runtime_active_workers{controller="recorder"} 0"#,
        r#"controller_runtime_reconcile_time_seconds_count{controller="recorder"} 1"#,
        r#"workqueue_adds_total{controller="recorder",name="recorder"} 1"#,
        r#"workqueue_depth{controller="recorder",name="recorder"} 0"#,
        r#"workqueue_queue_duration_seconds_count{controller="recorder",name="recorder"} 1"#,
        r#"workqueue_work_duration_seconds_count{controller="recorder",name="recorder"} 1"#,
        r#"konverge_cache_objects{resource="/api/v1/namespaces/default/configmaps"} 1"#,
        r#"controller_runtime_reconcile_errors_total{controller="recorder"} 0"#,
        r#"controller_runtime_reconcile_panics_total{controller="recorder"} 0"#,
        r#"controller_runtime_reconcile_total{controller="recorder",result="error"} 0"#,
        r#"workqueue_retries_total{controller="recorder",name="recorder"} 0"#,
        r#"konverge_hot_loop_detections_total{controller="recorder"} 0"#,
        "# EOF",
    ] {
        assert!(body.contains(expected), "{expected} missing from\n{body}");
    }
    assert_eq!(get(addr, "/nope").await.0, 404);
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

fn elected_manager(env: &TestEnv, identity: &str, seen: &Seen) -> Manager {
    let lease = LeaseConfig::new("default", "recorder-leader")
        .with_identity(identity)
        .with_lease_duration(Duration::from_secs(2))
        .with_renew_deadline(Duration::from_secs(1))
        .with_retry_period(Duration::from_millis(100));
    let mut manager = Manager::new(env.client()).leader_election(lease);
    manager.add(
        Controller::new(
            Api::<ConfigMap>::all(env.client()),
            watcher::Config::default(),
        ),
        record,
        Arc::new((identity.to_string(), seen.clone())),
    );
    manager
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_reconciles_and_a_standby_takes_over_when_it_stops() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &cm("first"))
        .await
        .unwrap();
    let seen: Seen = Arc::default();

    let (stop_a, stopped_a) = oneshot::channel::<()>();
    let a = elected_manager(&env, "a", &seen);
    let metrics_a = a.metrics();
    let task_a = tokio::spawn(a.run(async move {
        let _ = stopped_a.await;
    }));
    eventually("a leads and reconciles", || async {
        seen.lock().unwrap().contains(&"a first".to_string())
    })
    .await;
    assert!(
        metrics_a
            .encode()
            .contains(r#"leader_election_master_status{name="recorder-leader"} 1"#)
    );

    let (stop_b, stopped_b) = oneshot::channel::<()>();
    let b = elected_manager(&env, "b", &seen);
    let metrics_b = b.metrics();
    let task_b = tokio::spawn(b.run(async move {
        let _ = stopped_b.await;
    }));
    api.create(&PostParams::default(), &cm("second"))
        .await
        .unwrap();
    eventually("a reconciles the second object", || async {
        seen.lock().unwrap().contains(&"a second".to_string())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        seen.lock().unwrap().iter().all(|s| s.starts_with("a ")),
        "the standby never reconciles: {:?}",
        seen.lock().unwrap()
    );
    assert!(
        metrics_b
            .encode()
            .contains(r#"leader_election_master_status{name="recorder-leader"} 0"#)
    );

    // A stops gracefully and releases the Lease: B takes over without waiting for expiry, and
    // (level-triggered) reconciles everything.
    let _ = stop_a.send(());
    task_a.await.unwrap().unwrap();
    eventually("b takes over", || async {
        let seen = seen.lock().unwrap();
        seen.contains(&"b first".to_string()) && seen.contains(&"b second".to_string())
    })
    .await;
    api.create(&PostParams::default(), &cm("third"))
        .await
        .unwrap();
    eventually("b reconciles new work", || async {
        seen.lock().unwrap().contains(&"b third".to_string())
    })
    .await;
    assert!(!seen.lock().unwrap().contains(&"a third".to_string()));
    let _ = stop_b.send(());
    task_b.await.unwrap().unwrap();
}

/// A task added to an elected manager runs only while its manager leads, and is told to stop
/// when it no longer may act.
#[tokio::test(start_paused = true)]
async fn tasks_run_only_while_their_manager_leads() {
    let env = TestEnv::builder().in_process().start().await;
    let running: Arc<Mutex<Vec<String>>> = Arc::default();
    let manager = |identity: &'static str| {
        let mut manager = Manager::new(env.client())
            .leader_election(LeaseConfig::new("default", "task-leader").with_identity(identity));
        let running = running.clone();
        manager.add_task("whole-store-loop", move |stop| {
            Box::pin(async move {
                running.lock().unwrap().push(format!("{identity} started"));
                stop.cancelled().await;
                running.lock().unwrap().push(format!("{identity} stopped"));
            })
        });
        manager
    };
    let (stop_a, stopped_a) = oneshot::channel::<()>();
    let task_a = tokio::spawn(manager("a").run(async move {
        let _ = stopped_a.await;
    }));
    eventually("a's task runs", || async {
        running.lock().unwrap().contains(&"a started".to_string())
    })
    .await;
    let (stop_b, stopped_b) = oneshot::channel::<()>();
    let task_b = tokio::spawn(manager("b").run(async move {
        let _ = stopped_b.await;
    }));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        *running.lock().unwrap(),
        ["a started"],
        "the standby's task waits"
    );

    let _ = stop_a.send(());
    task_a.await.unwrap().unwrap();
    eventually("b's task runs once a stopped", || async {
        running.lock().unwrap().contains(&"b started".to_string())
    })
    .await;
    assert_eq!(
        *running.lock().unwrap(),
        ["a started", "a stopped", "b started"]
    );
    let _ = stop_b.send(());
    task_b.await.unwrap().unwrap();
    assert_eq!(running.lock().unwrap().last().unwrap(), "b stopped");
}
