//! Controllers against the in-process API server: convergence, ownership, error policy,
//! determinism, hot loops, faults, metrics and shutdown.
//!
//! Every test runs in Tokio's paused time against an in-process `TestEnv` (no socket): the
//! clock moves only when every task is idle, so backoffs, deadlines and grace periods take
//! no real time and always the same virtual time, and "nothing more happens within N ms"
//! means that every task ran to idle first.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::hotloop::HotLoopConfig;
use konverge_runtime::queue::RateLimit;
use konverge_runtime::reconcile::{Outcome, ReconcileInfo, Stop};
use konverge_runtime::{Action, Controller, Manager, Middleware, TerminalError, watcher};
use konverge_testkit::TestEnv;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::json;

mod support;
use support::eventually;

fn source(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("role".to_string(), "source".to_string())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_string(), value.to_string())].into()),
        ..ConfigMap::default()
    }
}

fn sources_config() -> watcher::Config {
    watcher::Config::default().labels("role=source")
}

fn mirrors_config() -> watcher::Config {
    watcher::Config::default().labels("role=mirror")
}

#[derive(Default)]
struct Ctx {
    client: Option<Client>,
    /// Every reconcile, in order, by key.
    log: Mutex<Vec<String>>,
}

impl Ctx {
    fn new(client: Client) -> Arc<Ctx> {
        Arc::new(Ctx {
            client: Some(client),
            ..Ctx::default()
        })
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn count(&self, key: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|k| *k == key)
            .count()
    }
}

fn key_of(cm: &ConfigMap) -> String {
    format!(
        "{}/{}",
        cm.metadata.namespace.as_deref().unwrap_or(""),
        cm.metadata.name.as_deref().unwrap_or("")
    )
}

/// Mirrors a source ConfigMap's data into `<name>-mirror`, owned by the source, writing only
/// when the mirror differs.
async fn mirror(src: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    ctx.log.lock().unwrap().push(key_of(&src));
    let ns = src.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone().unwrap(), &ns);
    let name = format!(
        "{}-mirror",
        src.metadata.name.as_deref().unwrap_or_default()
    );
    let desired = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([("role".to_string(), "mirror".to_string())].into()),
            owner_references: Some(vec![src.controller_owner_ref(&()).unwrap()]),
            ..ObjectMeta::default()
        },
        data: src.data.clone(),
        ..ConfigMap::default()
    };
    match api.get_opt(&name).await? {
        None => {
            api.create(&PostParams::default(), &desired).await?;
        }
        Some(live) if live.data != desired.data => {
            let mut update = desired;
            update.metadata.resource_version = live.metadata.resource_version;
            api.replace(&name, &PostParams::default(), &update).await?;
        }
        Some(_) => {}
    }
    Ok(Action::await_change())
}

async fn mirrors_match(api: &Api<ConfigMap>, sources: &BTreeMap<String, String>) -> bool {
    let Ok(list) = api.list(&Default::default()).await else {
        return false;
    };
    let mirrors: BTreeMap<String, String> = list
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("role"))
                .map(String::as_str)
                == Some("mirror")
        })
        .map(|c| {
            (
                c.metadata
                    .name
                    .clone()
                    .unwrap()
                    .trim_end_matches("-mirror")
                    .to_string(),
                c.data
                    .as_ref()
                    .and_then(|d| d.get("value"))
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    &mirrors == sources
}

fn mirror_manager(env: &TestEnv, ctx: Arc<Ctx>) -> Manager {
    let client = env.client();
    let mut manager = Manager::new(client.clone());
    let controller = Controller::new(Api::<ConfigMap>::all(client.clone()), sources_config())
        .named("mirror")
        .owns(Api::<ConfigMap>::all(client), mirrors_config())
        .concurrency(4);
    manager.add(controller, mirror, ctx);
    manager
}

#[tokio::test(start_paused = true)]
async fn mirrors_converge_children_are_restored_and_a_converged_pass_writes_nothing() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut want = BTreeMap::new();
    for i in 0..20 {
        api.create(&PostParams::default(), &source(&format!("s{i:02}"), "v1"))
            .await
            .unwrap();
        want.insert(format!("s{i:02}"), "v1".to_string());
    }
    let ctx = Ctx::new(env.client());
    let running = mirror_manager(&env, ctx.clone()).spawn();
    eventually("mirrors", || mirrors_match(&api, &want)).await;

    // A spec change flows through; a deleted child is recreated via its owner.
    api.patch(
        "s03",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"value": "v2"}})),
    )
    .await
    .unwrap();
    want.insert("s03".into(), "v2".into());
    api.delete("s07-mirror", &DeleteParams::default())
        .await
        .unwrap();
    eventually("update and restore", || mirrors_match(&api, &want)).await;

    // Converged: a change that does not alter the desired state reconciles without writing.
    env.requests().reset();
    let before = ctx.count("default/s05");
    api.patch(
        "s05",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    eventually("reconcile of s05", || async {
        ctx.count("default/s05") > before
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        env.requests().writes(),
        1,
        "only the test's own patch: {:?}",
        env.requests().records()
    );
    running.stop().await.unwrap();
}

/// The order objects are first reconciled in, for objects created in `seed`-shuffled order.
async fn first_reconcile_order(seed: u64) -> Vec<String> {
    let env = TestEnv::builder().in_process().start().await;
    let client = env.client();
    let mut names: Vec<(String, String)> = Vec::new();
    for ns in ["zeta", "alpha", "mid"] {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .unwrap();
        for n in ["c", "a", "b", "d"] {
            names.push((ns.to_string(), n.to_string()));
        }
    }
    // A different creation order per process (a simple LCG keeps this dependency-free).
    let mut state = seed;
    for i in (1..names.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        names.swap(i, (state >> 33) as usize % (i + 1));
    }
    for (ns, n) in &names {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &source(n, "x"))
            .await
            .unwrap();
    }
    let ctx = Arc::new(Ctx::default());
    let mut manager = Manager::new(client.clone());
    let log_only = |cm: Arc<ConfigMap>, ctx: Arc<Ctx>| async move {
        ctx.log.lock().unwrap().push(key_of(&cm));
        Ok::<_, kube::Error>(Action::await_change())
    };
    manager.add(
        Controller::new(Api::<ConfigMap>::all(client), sources_config()),
        log_only,
        ctx.clone(),
    );
    let running = manager.spawn();
    eventually("all reconciled", || async { ctx.log().len() == 12 }).await;
    running.stop().await.unwrap();
    ctx.log()
}

#[tokio::test(start_paused = true)]
async fn reconcile_order_is_key_order_in_every_process() {
    if let Ok(seed) = std::env::var("KONVERGE_ORDER_SEED") {
        let order = first_reconcile_order(seed.parse().unwrap()).await;
        println!("ORDER {}", order.join(","));
        return;
    }
    // Two separate processes, each creating the objects in a different order.
    let exe = std::env::current_exe().unwrap();
    let mut orders = Vec::new();
    for seed in ["1", "987654321"] {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "reconcile_order_is_key_order_in_every_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("KONVERGE_ORDER_SEED", seed)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split("ORDER ").nth(1))
            .unwrap_or_else(|| panic!("no order in {stdout}"))
            .to_string();
        orders.push(line);
    }
    assert_eq!(orders[0], orders[1], "same order in both processes");
    let order: Vec<&str> = orders[0].split(',').collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "key order");
    assert_eq!(order.first(), Some(&"alpha/a"));
}

/// Stamps the ConfigMap named "flappy" on every reconcile (a hot loop); writes "calm" once.
async fn stamp(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    ctx.log.lock().unwrap().push(key_of(&cm));
    let name = cm.metadata.name.clone().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone().unwrap(), "default");
    let stamped = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("stamp"));
    let next = if name == "flappy" {
        Some(ctx.count(&key_of(&cm)).to_string())
    } else if stamped.is_none() {
        Some("once".to_string())
    } else {
        None
    };
    if let Some(value) = next {
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"stamp": value}}})),
        )
        .await?;
    }
    Ok(Action::await_change())
}

#[tokio::test(start_paused = true)]
async fn a_self_triggering_object_is_caught_and_backed_off_while_its_neighbour_is_fine() {
    let env = TestEnv::builder().in_process().start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["calm", "flappy"] {
        api.create(&PostParams::default(), &source(name, "x"))
            .await
            .unwrap();
    }
    let ctx = Ctx::new(client.clone());
    let mut manager = Manager::new(client.clone());
    let metrics = manager.metrics();
    let controller = Controller::new(Api::<ConfigMap>::all(client), sources_config())
        .named("stamper")
        .concurrency(2)
        .hot_loop(HotLoopConfig {
            threshold: 6,
            initial_backoff: Duration::from_secs(30),
            ..HotLoopConfig::default()
        });
    manager.add(controller, stamp, ctx.clone());
    let running = manager.spawn();

    eventually("detection", || async {
        metrics
            .encode()
            .contains(r#"konverge_hot_loop_detections_total{controller="stamper"} 1"#)
    })
    .await;
    let at_detection = ctx.count("default/flappy");
    assert!(
        at_detection <= 8,
        "caught within a bounded number of reconciles: {at_detection}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        ctx.count("default/flappy") <= at_detection + 1,
        "backed off: {} reconciles after detection at {at_detection}",
        ctx.count("default/flappy")
    );
    assert_eq!(
        ctx.count("default/calm"),
        2,
        "calm: first pass, then its one write's echo"
    );
    assert!(
        metrics
            .encode()
            .contains(r#"konverge_hot_loop_backed_off_keys{controller="stamper"} 1"#)
    );

    // The neighbour still reacts at once.
    api.patch(
        "calm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"value": "y"}})),
    )
    .await
    .unwrap();
    eventually("calm reacts", || async { ctx.count("default/calm") == 3 }).await;
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn converges_through_dropped_watches_and_expired_history() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut want = BTreeMap::new();
    for i in 0..30 {
        api.create(&PostParams::default(), &source(&format!("s{i:02}"), "0"))
            .await
            .unwrap();
        want.insert(format!("s{i:02}"), "0".to_string());
    }
    let ctx = Ctx::new(env.client());
    let manager = mirror_manager(&env, ctx.clone());
    let metrics = manager.metrics();
    let running = manager.spawn();
    eventually("initial mirrors", || mirrors_match(&api, &want)).await;

    let faults = env.faults();
    for round in 1..=3 {
        faults.drop_watches();
        for i in (0..30).step_by(round + 1) {
            let name = format!("s{i:02}");
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"value": round.to_string()}})),
            )
            .await
            .unwrap();
            want.insert(name, round.to_string());
        }
    }
    // History the watchers would resume from is gone: they must relist (410) — and notice the
    // changes made meanwhile, including a deletion and a creation.
    // Watches reach the server a second late from here on, so the watchers are away while
    // these changes land and the history goes.
    faults.delay(
        konverge_testkit::Rule::new().verb(konverge_testkit::Verb::Watch),
        Duration::from_secs(1),
    );
    faults.drop_watches();
    api.delete("s29", &DeleteParams::default()).await.unwrap();
    want.remove("s29");
    api.create(&PostParams::default(), &source("s30", "new"))
        .await
        .unwrap();
    want.insert("s30".into(), "new".into());
    faults.expire_history().await.unwrap();
    eventually("convergence after faults", || mirrors_match(&api, &want)).await;
    let text = metrics.encode();
    assert!(text.contains("konverge_watcher_restarts_total"), "{text}");
    let relists: u64 = text
        .lines()
        .filter(|l| l.starts_with("konverge_watcher_relists_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(relists >= 1, "a relist after 410: {text}");
    running.stop().await.unwrap();
}

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("kube: {0}")]
    Kube(#[from] kube::Error),
    #[error("invalid object")]
    Invalid(#[source] TerminalError),
    #[error("transient trouble")]
    Transient,
}

/// Fails in a way chosen by the object's name; records the (paused-clock) time of each attempt.
struct Attempts {
    client: Client,
    times: Mutex<BTreeMap<String, Vec<tokio::time::Instant>>>,
}

async fn failing(cm: Arc<ConfigMap>, ctx: Arc<Attempts>) -> Result<Action, TestError> {
    let name = cm.metadata.name.clone().unwrap();
    let attempt = {
        let mut times = ctx.times.lock().unwrap();
        let list = times.entry(name.clone()).or_default();
        list.push(tokio::time::Instant::now());
        list.len()
    };
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    match name.as_str() {
        "transient" if attempt <= 6 => Err(TestError::Transient),
        "terminal" => Err(TestError::Invalid(TerminalError::new(
            "spec.value must be a number",
        ))),
        "conflict" if attempt == 1 => {
            // A write with a stale resourceVersion: a real 409 from the server.
            let mut stale = (*cm).clone();
            stale.metadata.resource_version = Some("1".into());
            api.replace(&name, &PostParams::default(), &stale).await?;
            Ok(Action::await_change())
        }
        "missing" => {
            api.get("no-such-object").await?;
            Ok(Action::await_change())
        }
        "panics" if attempt <= 2 => panic!("reconciler bug on attempt {attempt}"),
        "throttled" if attempt == 1 => Err(TestError::Kube(kube::Error::Api(Box::new(
            kube::core::Status {
                code: 429,
                reason: "TooManyRequests".into(),
                details: Some(
                    serde_json::from_value(serde_json::json!({"retryAfterSeconds": 3})).unwrap(),
                ),
                ..Default::default()
            },
        )))),
        _ => Ok(Action::await_change()),
    }
}

#[tokio::test(start_paused = true)]
async fn error_policy_by_class_with_exact_backoff_in_paused_time() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let ctx = Arc::new(Attempts {
        client: env.client(),
        times: Mutex::new(BTreeMap::new()),
    });
    let mut manager = Manager::new(env.client());
    let metrics = manager.metrics();
    let controller = Controller::new(Api::<ConfigMap>::all(env.client()), sources_config())
        .named("policy")
        .rate_limit(RateLimit {
            jitter: 0.0,
            ..RateLimit::default()
        });
    manager.add(controller, failing, ctx.clone());
    let running = manager.spawn();
    // Time only moves when every task is idle, straight to the next timer: the caches have
    // filled before this sleep ends.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for name in [
        "transient",
        "terminal",
        "conflict",
        "missing",
        "panics",
        "throttled",
    ] {
        api.create(&PostParams::default(), &source(name, "x"))
            .await
            .unwrap();
    }
    let attempts = |name: &str| {
        ctx.times
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    };
    eventually("transient retries", || async {
        attempts("transient").len() == 7
    })
    .await;
    eventually("panic retries", || async { attempts("panics").len() == 3 }).await;
    let gaps: Vec<Duration> = attempts("transient")
        .windows(2)
        .map(|w| w[1] - w[0])
        .collect();
    // Exact up to tokio's 1 ms timer resolution.
    for (gap, want) in gaps.iter().zip([5, 10, 20, 40, 80, 160]) {
        let want = Duration::from_millis(want);
        assert!(
            *gap >= want && *gap <= want + Duration::from_millis(1),
            "per-key exponential backoff: {gaps:?}"
        );
    }
    assert_eq!(gaps.len(), 6);
    let conflict = attempts("conflict");
    assert_eq!(conflict.len(), 2, "a conflict is retried once it resolves");
    assert_eq!(
        conflict[1] - conflict[0],
        Duration::ZERO,
        "at once, without backoff"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let throttled = attempts("throttled");
    assert_eq!(throttled.len(), 2, "{throttled:?}");
    assert!(
        (throttled[1] - throttled[0]).abs_diff(Duration::from_secs(3)) <= Duration::from_millis(1),
        "retried after the server's Retry-After, not our 5 ms backoff: {:?}",
        throttled[1] - throttled[0]
    );
    assert_eq!(
        attempts("terminal").len(),
        1,
        "terminal errors are not retried"
    );
    assert_eq!(attempts("missing").len(), 1, "NotFound is done");
    assert_eq!(attempts("transient").len(), 7, "success ends the retries");
    let text = metrics.encode();
    for expected in [
        r#"controller_runtime_reconcile_panics_total{controller="policy"} 2"#,
        r#"controller_runtime_terminal_reconcile_errors_total{controller="policy"} 1"#,
        r#"controller_runtime_reconcile_errors_total{controller="policy"} 12"#,
    ] {
        assert!(text.contains(expected), "{expected} in\n{text}");
    }
    running.stop().await.unwrap();
}

/// Records hook calls, and vetoes objects labelled `veto=yes`.
struct Audit(Arc<Mutex<Vec<String>>>);

impl Middleware<ConfigMap> for Audit {
    fn before(&self, obj: &ConfigMap, info: &ReconcileInfo) -> Result<(), Stop> {
        self.0.lock().unwrap().push(format!("before {}", info.key));
        let vetoed = obj
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("veto"))
            .is_some();
        if vetoed { Err(Stop::Skip) } else { Ok(()) }
    }

    fn after(&self, _obj: &ConfigMap, info: &ReconcileInfo, outcome: &Outcome) {
        let what = match outcome {
            Outcome::Done(_) => "done",
            Outcome::Stopped => "stopped",
            _ => "other",
        };
        self.0
            .lock()
            .unwrap()
            .push(format!("after {} {what}", info.key));
    }
}

#[tokio::test(start_paused = true)]
async fn middleware_runs_around_reconciles_and_can_stop_them() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut vetoed = source("vetoed", "x");
    vetoed
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("veto".into(), "yes".into());
    api.create(&PostParams::default(), &vetoed).await.unwrap();
    api.create(&PostParams::default(), &source("welcome", "x"))
        .await
        .unwrap();
    let hooks = Arc::new(Mutex::new(Vec::new()));
    let ctx = Arc::new(Ctx::default());
    let mut manager = Manager::new(env.client());
    let log_only = |cm: Arc<ConfigMap>, ctx: Arc<Ctx>| async move {
        ctx.log.lock().unwrap().push(key_of(&cm));
        Ok::<_, kube::Error>(Action::await_change())
    };
    manager.add(
        Controller::new(Api::<ConfigMap>::all(env.client()), sources_config())
            .middleware(Audit(hooks.clone())),
        log_only,
        ctx.clone(),
    );
    let running = manager.spawn();
    eventually("both seen", || async { hooks.lock().unwrap().len() == 3 }).await;
    running.stop().await.unwrap();
    assert_eq!(
        ctx.log(),
        ["default/welcome"],
        "the vetoed object never reached the reconciler"
    );
    assert_eq!(
        *hooks.lock().unwrap(),
        [
            "before default/vetoed",
            "before default/welcome",
            "after default/welcome done",
        ],
        "key order; a stopped chain skips the reconciler"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_in_flight_reconciles_finish_and_cancels_them_after_the_grace_period() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &source("slow", "x"))
        .await
        .unwrap();
    let finished = Arc::new(Mutex::new(Vec::<String>::new()));
    let slow = |cm: Arc<ConfigMap>, done: Arc<Mutex<Vec<String>>>| async move {
        let scope = konverge_runtime::reconcile::current().expect("in a reconcile");
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(300)) => done.lock().unwrap().push(format!("finished {}", key_of(&cm))),
            _ = scope.cancellation.cancelled() => done.lock().unwrap().push("cancelled".into()),
        }
        Ok::<_, kube::Error>(Action::await_change())
    };
    let mut manager = Manager::new(env.client()).shutdown_timeout(Duration::from_secs(5));
    manager.add(
        Controller::new(Api::<ConfigMap>::all(env.client()), sources_config()),
        slow,
        finished.clone(),
    );
    let running = manager.spawn();
    tokio::time::sleep(Duration::from_millis(150)).await;
    running.stop().await.unwrap();
    assert_eq!(
        *finished.lock().unwrap(),
        ["finished default/slow"],
        "in-flight work finished"
    );

    // With a grace period shorter than the work, the reconcile is cancelled.
    finished.lock().unwrap().clear();
    api.create(&PostParams::default(), &source("slower", "x"))
        .await
        .unwrap();
    let mut manager = Manager::new(env.client()).shutdown_timeout(Duration::from_millis(50));
    let never_done = |_: Arc<ConfigMap>, done: Arc<Mutex<Vec<String>>>| async move {
        let scope = konverge_runtime::reconcile::current().unwrap();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        done.lock().unwrap().push(format!("finished {}", scope.key));
        Ok::<_, kube::Error>(Action::await_change())
    };
    manager.add(
        Controller::new(Api::<ConfigMap>::all(env.client()), sources_config()),
        never_done,
        finished.clone(),
    );
    let running = manager.spawn();
    tokio::time::sleep(Duration::from_millis(150)).await;
    tokio::time::timeout(Duration::from_secs(5), running.stop())
        .await
        .expect("shutdown is bounded by the grace period")
        .unwrap();
    assert!(finished.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_past_its_deadline_is_cancelled_and_retried() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &source("stuck", "x"))
        .await
        .unwrap();
    let ctx = Arc::new(Ctx::default());
    let stuck_once = |cm: Arc<ConfigMap>, ctx: Arc<Ctx>| async move {
        let first = {
            let mut log = ctx.log.lock().unwrap();
            log.push(key_of(&cm));
            log.len() == 1
        };
        if first {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Ok::<_, kube::Error>(Action::await_change())
    };
    let mut manager = Manager::new(env.client());
    let metrics = manager.metrics();
    manager.add(
        Controller::new(Api::<ConfigMap>::all(env.client()), sources_config())
            .named("deadline")
            .reconcile_timeout(Duration::from_millis(100)),
        stuck_once,
        ctx.clone(),
    );
    let running = manager.spawn();
    eventually("retried after the deadline", || async {
        ctx.log().len() == 2
    })
    .await;
    assert!(
        metrics
            .encode()
            .contains(r#"controller_runtime_reconcile_errors_total{controller="deadline"} 1"#)
    );
    running.stop().await.unwrap();
}

async fn with_cleanup(
    d: Arc<k8s_openapi::api::apps::v1::Deployment>,
    ctx: Arc<Ctx>,
) -> Result<Action, konverge_runtime::finalizer::FinalizerError<kube::Error>> {
    use konverge_runtime::finalizer::{FinalizerEvent, finalizer};
    let ns = d.metadata.namespace.clone().unwrap();
    let api = Api::namespaced(ctx.client.clone().unwrap(), &ns);
    let log = ctx.clone();
    finalizer(&api, "konverge.dev/cleanup", d, |event| async move {
        let entry = match event {
            FinalizerEvent::Apply(d) => format!("apply {}", d.metadata.name.clone().unwrap()),
            FinalizerEvent::Cleanup(d) => format!("cleanup {}", d.metadata.name.clone().unwrap()),
        };
        log.log.lock().unwrap().push(entry);
        Ok::<_, kube::Error>(())
    })
    .await?;
    Ok(Action::await_change())
}

#[tokio::test(start_paused = true)]
async fn finalizer_cleanup_runs_on_deletion_before_the_object_goes() {
    use k8s_openapi::api::apps::v1::Deployment;
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<Deployment> = Api::namespaced(env.client(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}
            }
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let ctx = Ctx::new(env.client());
    let mut manager = Manager::new(env.client());
    // The default predicate (generation) is in force: the finalizer add is not a new
    // generation, but the deletion is.
    manager.add(
        Controller::new(
            Api::<Deployment>::all(env.client()),
            watcher::Config::default(),
        ),
        with_cleanup,
        ctx.clone(),
    );
    let running = manager.spawn();
    eventually("finalizer added", || async {
        api.get("web").await.unwrap().metadata.finalizers
            == Some(vec!["konverge.dev/cleanup".into()])
    })
    .await;
    api.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("object gone", || async {
        api.get_opt("web").await.unwrap().is_none()
    })
    .await;
    running.stop().await.unwrap();
    assert_eq!(ctx.log(), ["apply web", "cleanup web"]);
}

#[tokio::test(start_paused = true)]
async fn a_watched_resource_reconciles_the_objects_its_mapping_names() {
    use k8s_openapi::api::core::v1::Secret;
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    for name in ["app", "other"] {
        api.create(&PostParams::default(), &source(name, "x"))
            .await
            .unwrap();
    }
    let ctx = Arc::new(Ctx::default());
    let log_only = |cm: Arc<ConfigMap>, ctx: Arc<Ctx>| async move {
        ctx.log.lock().unwrap().push(key_of(&cm));
        Ok::<_, kube::Error>(Action::await_change())
    };
    // A Secret names the ConfigMap it configures in an annotation.
    let controller = Controller::new(Api::<ConfigMap>::all(env.client()), sources_config())
        .watches(
            Api::<Secret>::all(env.client()),
            watcher::Config::default(),
            |s: &Secret| {
                let target = s.metadata.annotations.as_ref().and_then(|a| a.get("for"));
                target
                    .map(|t| {
                        konverge_runtime::ObjectKey::namespaced(
                            s.metadata.namespace.clone().unwrap_or_default(),
                            t.clone(),
                        )
                    })
                    .into_iter()
                    .collect()
            },
        );
    let mut manager = Manager::new(env.client());
    manager.add(controller, log_only, ctx.clone());
    let running = manager.spawn();
    eventually("initial pass", || async { ctx.log().len() == 2 }).await;
    let secrets: Api<Secret> = Api::namespaced(env.client(), "default");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds", "annotations": {"for": "app"}},
        "stringData": {"password": "s3cret"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    eventually("mapped reconcile", || async {
        ctx.count("default/app") == 2
    })
    .await;
    secrets
        .delete("creds", &DeleteParams::default())
        .await
        .unwrap();
    eventually("deletion reconciles too", || async {
        ctx.count("default/app") == 3
    })
    .await;
    assert_eq!(
        ctx.count("default/other"),
        1,
        "unmapped objects are left alone"
    );
    running.stop().await.unwrap();
}

/// A trigger fed from the manager's shared cache (`watches_cached`): when it fires, the
/// reconcile finds the change in that cache, for creates, updates and deletes alike — what a
/// controller reading its children from a cache needs, and what a trigger with a watch of its
/// own cannot promise.
#[tokio::test(start_paused = true)]
async fn a_cached_trigger_fires_once_its_cache_has_the_change() {
    let env = TestEnv::builder().in_process().bare().start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut manager = Manager::new(client.clone());
    let mirrors = manager.store(Api::<ConfigMap>::all(client.clone()), mirrors_config());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let controller = Controller::new(Api::<ConfigMap>::all(client.clone()), sources_config())
        .watches_cached(
            Api::<ConfigMap>::all(client.clone()),
            mirrors_config(),
            |change: &konverge_runtime::cache::Change<ConfigMap>| {
                let name = change.key.name.trim_end_matches("-mirror");
                vec![konverge_runtime::ObjectKey::namespaced(
                    change.key.namespace.clone().unwrap_or_default(),
                    name,
                )]
            },
        );
    let log = seen.clone();
    manager.add(
        controller,
        move |src: Arc<ConfigMap>, _ctx: Arc<()>| {
            let (mirrors, log) = (mirrors.clone(), log.clone());
            async move {
                let key = konverge_runtime::ObjectKey::namespaced(
                    "default",
                    format!("{}-mirror", src.metadata.name.as_deref().unwrap_or("")),
                );
                let value = mirrors.get(&key).map_or("absent".to_string(), |m| {
                    m.data
                        .as_ref()
                        .and_then(|d| d.get("value"))
                        .cloned()
                        .unwrap_or_default()
                });
                log.lock().unwrap().push(value);
                Ok::<_, kube::Error>(Action::await_change())
            }
        },
        Arc::new(()),
    );
    let running = manager.spawn();
    api.create(&PostParams::default(), &source("a", "x"))
        .await
        .unwrap();
    let mut mirror = source("a-mirror", "1");
    mirror.metadata.labels = Some([("role".to_string(), "mirror".to_string())].into());
    let last = |v: &str| {
        let (seen, v) = (seen.clone(), v.to_string());
        move || {
            let holds = seen.lock().unwrap().last() == Some(&v);
            async move { holds }
        }
    };
    eventually("the first reconcile", last("absent")).await;
    api.create(&PostParams::default(), &mirror).await.unwrap();
    eventually("the created mirror", last("1")).await;
    let patch = json!({"data": {"value": "2"}});
    api.patch("a-mirror", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("the updated mirror", last("2")).await;
    api.delete("a-mirror", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the deleted mirror", last("absent")).await;
    // Each change was reconciled once it was cached: never a stale value after a trigger.
    assert_eq!(*seen.lock().unwrap(), ["absent", "1", "2", "absent"]);
    running.stop().await.unwrap();
}
