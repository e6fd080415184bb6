//! The app operator keeps every invariant under 20 seeded fault plans, children created in
//! dependency order; its broken twin, which writes its status on every pass, is caught in a
//! hot loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use konverge_example_app_operator::{App, AppSpec, Context, Mode, controller, reconcile};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{FaultPlan, Invariants, TestEnv, Violation, World};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::json;

fn run(env: &TestEnv, mode: Mode) -> RunningManager {
    let client = env.client();
    let mut manager = Manager::new(client.clone());
    manager.add(
        controller(&client, mode),
        reconcile,
        Arc::new(Context { client, mode }),
    );
    manager.spawn()
}

/// A client past the faults, for the test's own writes.
fn driver(env: &TestEnv) -> Client {
    env.direct_client()
}

async fn install(env: &TestEnv) -> Invariants {
    // The operator's own start-up step: apply the definition, wait until it is served.
    let driver = env.direct_client();
    konverge_runtime::crd::install(&driver, &App::crd(), "test", Duration::from_secs(10))
        .await
        .unwrap();
    env.invariants()
        .watch::<App>()
        .watch::<Secret>()
        .watch::<ConfigMap>()
        .watch::<Deployment>()
        .watch::<Service>()
        .start()
        .await
}

fn app(name: &str, replicas: i32) -> App {
    App::new(
        name,
        AppSpec {
            image: "nginx:1.27".into(),
            replicas,
            config: BTreeMap::from([("MODE".to_string(), "fast".to_string())]),
        },
    )
}

/// Every App has its four children as its spec says, and a Ready status for its generation.
fn applied(world: &World) -> Result<(), String> {
    for (key, app) in world.list("apps.example.konverge.dev") {
        let ns = &key.namespace;
        let name = &key.name;
        for (resource, child) in [
            ("secrets", format!("{name}-credentials")),
            ("configmaps", format!("{name}-config")),
            ("deployments.apps", name.clone()),
            ("services", name.clone()),
        ] {
            world
                .get(resource, ns, &child)
                .ok_or_else(|| format!("{key} has no {resource} {child}"))?;
        }
        let deployment = world
            .get("deployments.apps", ns, name)
            .unwrap_or(&json!(null));
        if deployment["spec"]["replicas"] != app["spec"]["replicas"] {
            return Err(format!(
                "{key}: deployment has {} replicas",
                deployment["spec"]["replicas"]
            ));
        }
        let config = world.get("configmaps", ns, &format!("{name}-config"));
        if config.map(|c| &c["data"]) != Some(&app["spec"]["config"]) {
            return Err(format!("{key}: config map does not hold the spec's config"));
        }
        let ready = app["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready");
        match ready {
            Some(c)
                if c["status"] == "True"
                    && c["observedGeneration"] == app["metadata"]["generation"] => {}
            other => return Err(format!("{key}: Ready is {other:?}")),
        }
    }
    Ok(())
}

const ORDER: [&str; 4] = ["secrets", "configmaps", "deployments.apps", "services"];

async fn one_plan(seed: u64) {
    let plan = FaultPlan::random(seed);
    let fail = |v: Violation| -> ! { panic!("{plan}\n{v}") };
    // An API server alone: the ordering check reads creation order from its watch history,
    // which the pods and events of kube-controller-manager's controllers would push out of
    // the watch cache's window under these plans' expired-history faults.
    let env = TestEnv::builder().disk().bare().start().await;
    let check = install(&env).await;
    let running = run(&env, Mode::Correct);
    let apps: Api<App> = Api::namespaced(driver(&env), "default");
    let faults = plan.spawn(&env.faults());
    for name in ["web", "api"] {
        apps.create(&PostParams::default(), &app(name, 2))
            .await
            .unwrap();
    }
    // The spec changes while faults hit.
    let scale = json!({"spec": {"replicas": 3, "config": {"MODE": "safe"}}});
    apps.patch("web", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    faults.await.unwrap();
    let within = Duration::from_secs(20);
    check
        .converges(within, applied)
        .await
        .unwrap_or_else(|v| fail(v));
    env.faults().clear();
    check.ordered(&ORDER).unwrap_or_else(|v| fail(v));
    check.no_hot_loop(12).unwrap_or_else(|v| fail(v));
    let _running = check
        .idempotent(within, async {
            drop(running);
            run(&env, Mode::Correct)
        })
        .await
        .unwrap_or_else(|v| fail(v));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_operator_keeps_every_invariant_under_20_fault_plans() {
    for seeds in (0..20u64).collect::<Vec<_>>().chunks(5) {
        futures::future::join_all(seeds.iter().map(|seed| one_plan(*seed))).await;
    }
}

#[tokio::test]
async fn the_twin_that_writes_status_every_pass_is_caught_looping() {
    let env = TestEnv::start().await;
    let check = install(&env).await;
    let _running = run(&env, Mode::Flapping);
    let apps: Api<App> = Api::namespaced(driver(&env), "default");
    apps.create(&PostParams::default(), &app("web", 1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // konverge-runtime's own hot-loop detector backs the App off after 8 echoes of its own
    // writes; the invariant, meant for tests, allows far fewer than that.
    let violation = check.no_hot_loop(4).expect_err("a hot loop");
    let Violation::HotLoop {
        object,
        managers,
        paths,
        ..
    } = &violation
    else {
        panic!("{violation}");
    };
    assert_eq!(object.to_string(), "apps.example.konverge.dev default/web");
    assert_eq!(managers.len(), 1, "{violation}");
    assert!(
        paths.iter().any(|p| p == ".status.lastReconciled"),
        "{violation}"
    );
}

/// `konverge doctor`'s engine, watching the cluster while the twin runs, finds the same hot
/// loop, with the field that keeps changing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_finds_the_twins_hot_loop() {
    let env = TestEnv::start().await;
    let _check = install(&env).await;
    let apps: Api<App> = Api::namespaced(driver(&env), "default");
    let doctor = tokio::spawn({
        let client = env.client();
        async move {
            let options = konverge_runtime::doctor::Options {
                window: Duration::from_secs(2),
                ..Default::default()
            };
            konverge_runtime::doctor::run(client, &options, |_| {}).await
        }
    });
    // The doctor lists everything first; the twin starts looping inside its window.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _running = run(&env, Mode::Flapping);
    apps.create(&PostParams::default(), &app("web", 1))
        .await
        .unwrap();
    let report = doctor.await.unwrap().unwrap();
    let hot = report
        .hot_loops
        .iter()
        .find(|h| h.object.resource == "apps.example.konverge.dev" && h.object.name == "web")
        .unwrap_or_else(|| panic!("no hot loop in {report:#?}"));
    assert!(
        hot.changing_paths.iter().any(|p| p.starts_with(".status")),
        "{hot:?}"
    );
}
