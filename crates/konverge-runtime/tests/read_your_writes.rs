//! Read your own writes: a reconcile that wrote its object is not followed by one that
//! decides on a cached copy older than that write. The same reconciler runs under
//! kube-runtime's controller and konverge-runtime's while the controller's cache falls behind
//! (its watch is cut right as it writes, and reconnects a second later): kube-runtime's
//! reconciles decide on the stale copy, write again with its old resourceVersion and get a
//! storm of 409 Conflicts; konverge-runtime's wait for the cache to catch up and write nothing
//! more.
//!
//! In Tokio's paused time against an in-process `TestEnv`: the second the watch is away, the
//! 20 ms requeues and the wait for the cache are virtual, so both runs take the same course
//! every time and no real time.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::{Action, Controller, Manager, reconcile, watcher};
use konverge_testkit::{Faults, Rule, TestEnv, Verb};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

struct Ctx {
    client: Client,
    faults: Faults,
}

/// Copies `data.v` into the annotation `seen`, with an update that carries the cached
/// resourceVersion. Returns whether it wrote.
async fn mirror(cm: &ConfigMap, ctx: &Ctx) -> Result<bool, kube::Error> {
    let want = cm.data.as_ref().and_then(|d| d.get("v")).cloned();
    let have = cm.annotations().get("seen").cloned();
    if want == have {
        return Ok(false);
    }
    // The write below will not reach this controller's cache for a while.
    ctx.faults.drop_watches();
    let mut next = cm.clone();
    next.annotations_mut()
        .insert("seen".into(), want.unwrap_or_default());
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let written = api
        .replace(&cm.name_any(), &PostParams::default(), &next)
        .await?;
    reconcile::wrote(&written);
    Ok(true)
}

async fn konverge_reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    mirror(&cm, &ctx).await?;
    // Look again soon, as controllers that poll an outside system do.
    Ok(Action::requeue(Duration::from_millis(20)))
}

async fn kube_reconcile(
    cm: Arc<ConfigMap>,
    ctx: Arc<Ctx>,
) -> Result<kube::runtime::controller::Action, kube::Error> {
    mirror(&cm, &ctx).await?;
    Ok(kube::runtime::controller::Action::requeue(
        Duration::from_millis(20),
    ))
}

fn kube_error_policy(
    _: Arc<ConfigMap>,
    _: &kube::Error,
    _: Arc<Ctx>,
) -> kube::runtime::controller::Action {
    kube::runtime::controller::Action::requeue(Duration::from_millis(20))
}

enum Runtime {
    Kube,
    Konverge,
}

/// Runs the scenario under `runtime`; returns how many updates were answered 409.
async fn conflicts_under(runtime: Runtime) -> usize {
    let env = TestEnv::builder().in_process().start().await;
    let ctx = Arc::new(Ctx {
        client: env.client(),
        faults: env.faults(),
    });
    // The driver writes past the faults.
    let driver: Api<ConfigMap> = Api::namespaced(env.direct_client(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("x".into()),
            labels: Some([("app".to_string(), "ryow".to_string())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("v".to_string(), "1".to_string())].into()),
        ..ConfigMap::default()
    };
    driver.create(&PostParams::default(), &cm).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let config = watcher::Config::default().labels("app=ryow");
    let _running = match runtime {
        Runtime::Konverge => {
            let mut manager = Manager::new(env.client());
            manager.add(
                Controller::new(api, config),
                konverge_reconcile,
                ctx.clone(),
            );
            Some(manager.spawn())
        }
        Runtime::Kube => {
            let controller = kube::runtime::Controller::new(
                api,
                kube::runtime::watcher::Config::default().labels("app=ryow"),
            )
            .run(kube_reconcile, kube_error_policy, ctx.clone())
            .for_each(|_| async {});
            tokio::spawn(controller);
            None
        }
    };
    let seen = |value: &'static str| {
        let driver = driver.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let cm = driver.get("x").await.unwrap();
                if cm.annotations().get("seen").map(String::as_str) == Some(value) {
                    return;
                }
                assert!(tokio::time::Instant::now() < deadline, "never saw {value}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    seen("1").await;
    // From now on, a controller whose watch is cut waits a second for a new one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    env.faults()
        .delay(Rule::new().verb(Verb::Watch), Duration::from_secs(1));
    env.requests().reset();
    driver
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    seen("2").await;
    // Long enough for the cut watch to come back and the cache to catch up.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    env.requests()
        .records()
        .iter()
        .filter(|r| r.request.verb == Some(Verb::Update) && r.status.as_u16() == 409)
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_stale_cache_makes_kube_runtime_storm_and_konverge_wait() {
    let kube = conflicts_under(Runtime::Kube).await;
    let konverge = conflicts_under(Runtime::Konverge).await;
    println!(
        "409 Conflicts while the cache was a second behind: kube-runtime {kube}, konverge-runtime {konverge}"
    );
    assert!(
        kube >= 10,
        "kube-runtime decides on its stale cache: {kube} conflicts"
    );
    assert_eq!(konverge, 0, "konverge-runtime waits for its own write");
}
