//! The aggregator keeps every invariant under 20 seeded fault plans; its broken twin, which
//! never prunes, is caught growing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_example_aggregator::{Context, INTO, MANAGER, Mode, TARGET, controller, reconcile};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{FaultPlan, TestEnv, Violation, World};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

fn run(env: &TestEnv, mode: Mode) -> RunningManager {
    let client = env.client();
    let mut manager = Manager::new(client.clone());
    manager.add(
        controller(&client),
        reconcile,
        Arc::new(Context { client, mode }),
    );
    manager.spawn()
}

fn config_map(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some(map(labels)),
            ..ObjectMeta::default()
        },
        data: Some(map(data)),
        ..ConfigMap::default()
    }
}

/// The target holds exactly the sources' keys.
fn aggregated(world: &World) -> Result<(), String> {
    let target = world
        .get("configmaps", "default", "all")
        .ok_or("no target")?;
    let mut want = serde_json::Map::new();
    for (key, source) in world.list("configmaps") {
        if source["metadata"]["labels"][INTO] == "all" {
            for (k, v) in source["data"].as_object().into_iter().flatten() {
                want.insert(format!("{}.{k}", key.name), v.clone());
            }
        }
    }
    let have = target["data"].as_object().cloned().unwrap_or_default();
    if have == want {
        Ok(())
    } else {
        Err(format!("target holds {have:?}, want {want:?}"))
    }
}

async fn setup(env: &TestEnv) -> Api<ConfigMap> {
    // The test's own writes go past the faults: only the controller meets them.
    let api: Api<ConfigMap> = Api::namespaced(env.direct_client(), "default");
    api.create(
        &PostParams::default(),
        &config_map("all", &[(TARGET, "true")], &[]),
    )
    .await
    .unwrap();
    for (name, value) in [("a", "1"), ("b", "2")] {
        api.create(
            &PostParams::default(),
            &config_map(name, &[(INTO, "all")], &[("value", value)]),
        )
        .await
        .unwrap();
    }
    api
}

async fn set(api: &Api<ConfigMap>, name: &str, data: serde_json::Value) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "data": data })),
    )
    .await
    .unwrap();
}

/// Add a key to a source, let the aggregator see it, remove it again.
async fn churn(api: Api<ConfigMap>, round: usize) {
    let key = format!("temp-{round}");
    set(&api, "a", json!({ key.as_str(): "x" })).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    set(&api, "a", json!({ key.as_str(): null })).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aggregator_keeps_every_invariant_under_20_fault_plans() {
    // Five servers at a time, each with its own plan.
    for seeds in (0..20u64).collect::<Vec<_>>().chunks(5) {
        futures::future::join_all(seeds.iter().map(|seed| one_plan(*seed))).await;
    }
}

async fn one_plan(seed: u64) {
    let plan = FaultPlan::random(seed);
    let fail = |v: Violation| -> ! { panic!("{plan}\n{v}") };
    let env = TestEnv::builder().disk().start().await;
    let check = env.invariants().watch::<ConfigMap>().start().await;
    let running = run(&env, Mode::Correct);
    let api = setup(&env).await;
    let faults = plan.spawn(&env.faults());
    // Inputs change while the faults hit: a key added, a source removed and re-added.
    set(&api, "b", json!({"more": "3"})).await;
    api.delete("a", &DeleteParams::default()).await.unwrap();
    api.create(
        &PostParams::default(),
        &config_map("a", &[(INTO, "all")], &[("value", "1")]),
    )
    .await
    .unwrap();
    faults.await.unwrap();
    let within = Duration::from_secs(20);
    check
        .converges(within, aggregated)
        .await
        .unwrap_or_else(|v| fail(v));
    env.faults().clear();
    check.no_hot_loop(10).unwrap_or_else(|v| fail(v));
    let _running = check
        .idempotent(within, async {
            drop(running);
            run(&env, Mode::Correct)
        })
        .await
        .unwrap_or_else(|v| fail(v));
    check
        .bounded(3, within, |round| churn(api.clone(), round))
        .await
        .unwrap_or_else(|v| fail(v));
    check
        .converges(within, aggregated)
        .await
        .unwrap_or_else(|v| fail(v));
}

#[tokio::test]
async fn the_twin_that_never_prunes_is_caught_growing() {
    let env = TestEnv::start().await;
    let check = env.invariants().watch::<ConfigMap>().start().await;
    let _running = run(&env, Mode::NeverPrunes);
    let api = setup(&env).await;
    check
        .converges(Duration::from_secs(10), aggregated)
        .await
        .unwrap();
    let violation = check
        .bounded(3, Duration::from_secs(10), |round| {
            churn(api.clone(), round)
        })
        .await
        .expect_err("the twin keeps every key it ever saw");
    let Violation::Unbounded { object, kept, .. } = &violation else {
        panic!("{violation}");
    };
    assert_eq!(object.to_string(), "configmaps default/all");
    assert_eq!(kept, &[".data.a.temp-1", ".data.a.temp-2"], "{violation}");
    // The target was written by the aggregator's field manager.
    let history = check.history();
    assert!(
        history
            .iter()
            .any(|c| c.manager.as_deref() == Some(MANAGER))
    );
}

/// `konverge doctor`'s engine, watching while inputs churn, finds the twin's target growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_finds_the_twins_growing_target() {
    let env = TestEnv::start().await;
    let _running = run(&env, Mode::NeverPrunes);
    let api = setup(&env).await;
    let doctor = tokio::spawn({
        let client = env.client();
        async move {
            let options = konverge_runtime::doctor::Options {
                window: Duration::from_secs(3),
                ..Default::default()
            };
            konverge_runtime::doctor::run(client, &options, |_| {}).await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for round in 0..4 {
        churn(api.clone(), round).await;
    }
    let report = doctor.await.unwrap().unwrap();
    assert!(
        report
            .growth
            .iter()
            .any(|g| g.object.resource == "configmaps" && g.object.name == "all"),
        "no growth in {report:#?}"
    );
}
