//! The web operator on three simulated nodes in three zones: it converges (Available with
//! three ready pods), and under seeded cluster fault plans — nodes lost and drained, zones
//! down, crashes, image pulls failing, slow starts, evictions, with the API's faults — it
//! keeps every invariant, and never claims Available while fewer pods are ready than asked
//! for. Its two broken twins are caught by that last invariant.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use konverge_example_web_operator::{
    APP_LABEL, Context, Mode, WebApp, WebAppSpec, controller, reconcile,
};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{
    Fault, FaultPlan, Happened, Invariants, Pick, Step, TestEnv, Violation, World,
};
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The name of the property the tests keep.
const HONEST: &str = "Available only when enough pods are ready";

/// How long a WebApp's status may trail its pods: the pod's status, then its ReplicaSet's,
/// its Deployment's and the WebApp's are written one after another, and the operator's
/// writes meet the plans' API faults (latency, 429s with a second's Retry-After, a server
/// restart).
const GRACE: Duration = Duration::from_secs(5);

async fn cluster() -> TestEnv {
    TestEnv::builder()
        .in_process()
        .nodes(3)
        .zones(["zone-a", "zone-b", "zone-c"])
        .start()
        .await
}

fn run(env: &TestEnv, mode: Mode) -> RunningManager {
    let client = env.client();
    let mut manager = Manager::new(client.clone());
    manager.add(
        controller(&client),
        reconcile,
        Arc::new(Context::new(client, mode)),
    );
    manager.spawn()
}

/// Installs the CRD; a check over everything the operator reads and writes (and the pods),
/// keeping [`HONEST`]; and one over what the operator alone writes, for hot loops
/// (Deployments and pods are written by kcm's controllers and the kubelets as their pods
/// come and go).
async fn install(env: &TestEnv) -> (Invariants, Invariants) {
    let driver = env.direct_client();
    konverge_runtime::crd::install(&driver, &WebApp::crd(), "test", Duration::from_secs(10))
        .await
        .expect("the CRD is served");
    let check = env
        .invariants()
        .watch::<WebApp>()
        .watch::<Deployment>()
        .watch::<Service>()
        .watch::<Pod>()
        .start()
        .await;
    check.always(HONEST, GRACE, honest);
    let own = env
        .invariants()
        .watch::<WebApp>()
        .watch::<Service>()
        .start()
        .await;
    (check, own)
}

fn webapp(name: &str, replicas: i32) -> WebApp {
    WebApp::new(
        name,
        WebAppSpec {
            image: "nginx:1.27".into(),
            replicas,
            port: 8080,
        },
    )
}

async fn create(env: &TestEnv, app: &WebApp) {
    Api::<WebApp>::namespaced(env.direct_client(), "default")
        .create(&PostParams::default(), app)
        .await
        .expect("the WebApp is created");
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The pods of `app` that are Ready and not terminating.
fn ready_pods(world: &World, namespace: &str, app: &str) -> usize {
    world
        .list("pods")
        .filter(|(key, pod)| {
            key.namespace == namespace
                && pod["metadata"]["labels"][APP_LABEL] == app
                && pod["metadata"]["deletionTimestamp"].is_null()
                && condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .count()
}

/// The safety property: a WebApp that says Available has at least `spec.replicas` ready pods.
fn honest(world: &World) -> Result<(), String> {
    for (key, app) in world.list("webapps.examples.konverge.dev") {
        let available = condition(app, "Available").is_some_and(|c| c["status"] == "True");
        let wanted = app["spec"]["replicas"].as_u64().unwrap_or(0) as usize;
        let ready = ready_pods(world, &key.namespace, &key.name);
        if available && ready < wanted {
            return Err(format!(
                "{key} is Available with {ready} of its {wanted} pods ready"
            ));
        }
    }
    Ok(())
}

/// Every WebApp is Available for its generation, with its ready pods, Deployment and Service.
fn converged(world: &World) -> Result<(), String> {
    for (key, app) in world.list("webapps.examples.konverge.dev") {
        let (ns, name) = (&key.namespace, &key.name);
        let deployment = world
            .get("deployments.apps", ns, name)
            .ok_or_else(|| format!("{key} has no Deployment"))?;
        if deployment["spec"]["replicas"] != app["spec"]["replicas"] {
            return Err(format!(
                "{key}: the Deployment asks for {}",
                deployment["spec"]["replicas"]
            ));
        }
        let service = world
            .get("services", ns, name)
            .ok_or_else(|| format!("{key} has no Service"))?;
        if service["spec"]["ports"][0]["port"] != app["spec"]["port"] {
            return Err(format!(
                "{key}: the Service serves {}",
                service["spec"]["ports"]
            ));
        }
        let wanted = app["spec"]["replicas"].as_u64().unwrap_or(0) as usize;
        let ready = ready_pods(world, ns, name);
        if ready < wanted {
            return Err(format!("{key}: {ready} of {wanted} pods ready"));
        }
        let available = condition(app, "Available");
        match available {
            Some(c)
                if c["status"] == "True"
                    && c["observedGeneration"] == app["metadata"]["generation"]
                    && app["status"]["readyReplicas"].as_u64() == Some(wanted as u64) => {}
            other => {
                return Err(format!(
                    "{key}: Available is {other:?}, readyReplicas {}",
                    app["status"]["readyReplicas"]
                ));
            }
        }
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_webapp_becomes_available_with_three_ready_pods() {
    let env = cluster().await;
    let (check, own) = install(&env).await;
    let running = run(&env, Mode::Correct);
    create(&env, &webapp("web", 3)).await;
    check
        .converges(Duration::from_secs(60), converged)
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    let world = check.world();
    let app = world
        .get("webapps.examples.konverge.dev", "default", "web")
        .expect("the WebApp");
    let available = condition(app, "Available").expect("an Available condition");
    assert_eq!(available["reason"], "ReplicasAvailable");
    assert_eq!(available["message"], "3 of 3 replicas are available");
    assert_eq!(app["status"]["availableReplicas"], 3);
    assert_eq!(app["status"]["observedGeneration"], 1);
    // The pods run on the three nodes, one per zone.
    let mut nodes: Vec<&str> = world
        .list("pods")
        .filter_map(|(_, p)| p["spec"]["nodeName"].as_str())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["node-1", "node-2", "node-3"]);
    check.always_held().unwrap_or_else(|v| panic!("{v}"));
    own.no_hot_loop(4).unwrap_or_else(|v| panic!("{v}"));
    // A restarted operator lists and reconciles everything again, and writes nothing.
    let _running = check
        .idempotent(Duration::from_secs(30), async {
            drop(running);
            run(&env, Mode::Correct)
        })
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    // WebApps come and go; nothing left behind grows.
    let apps: Api<WebApp> = Api::namespaced(env.direct_client(), "default");
    check
        .bounded(3, Duration::from_secs(60), |round| {
            let apps = apps.clone();
            async move {
                let name = format!("temp-{round}");
                apps.create(&PostParams::default(), &webapp(&name, 1))
                    .await
                    .expect("created");
                tokio::time::sleep(Duration::from_secs(5)).await;
                apps.delete(&name, &DeleteParams::default())
                    .await
                    .expect("deleted");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    check.always_held().unwrap_or_else(|v| panic!("{v}"));
}

/// The node `web`'s pods run on first, by name.
fn a_node_with_a_pod(world: &World) -> String {
    let mut nodes: Vec<String> = world
        .list("pods")
        .filter_map(|(_, p)| p["spec"]["nodeName"].as_str().map(String::from))
        .collect();
    nodes.sort();
    nodes.first().cloned().expect("a pod on a node")
}

#[tokio::test(start_paused = true)]
async fn a_lost_node_makes_the_webapp_unavailable_until_its_pod_is_replaced() {
    let env = cluster().await;
    let (check, _own) = install(&env).await;
    let _running = run(&env, Mode::Correct);
    create(&env, &webapp("web", 3)).await;
    check
        .converges(Duration::from_secs(60), converged)
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    let node = a_node_with_a_pod(&check.world());
    let plan = FaultPlan::from_steps(vec![Step {
        at: Duration::ZERO,
        fault: Fault::NodeLost {
            node: Pick::Named(node.clone()),
            down: None,
        },
    }]);
    let happened = plan.run_on(&env).await;
    assert_eq!(happened[0].picked, std::slice::from_ref(&node));
    // 50 s without heartbeats: the node is unreachable and its pod not ready.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let world = check.world();
    let app = world
        .get("webapps.examples.konverge.dev", "default", "web")
        .expect("the WebApp");
    let available = condition(app, "Available").expect("an Available condition");
    assert_eq!(available["status"], "False", "{app}");
    assert_eq!(available["reason"], "DeploymentUnavailable");
    assert_eq!(
        available["message"],
        "Deployment web is not available: Deployment does not have minimum availability."
    );
    assert_eq!(app["status"]["readyReplicas"], 2);
    // After the 300 s toleration the pod is evicted and replaced on another node.
    tokio::time::sleep(Duration::from_secs(320)).await;
    check
        .converges(Duration::from_secs(60), converged)
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    let world = check.world();
    let placed: Vec<&str> = world
        .list("pods")
        .filter(|(_, p)| p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|(_, p)| p["spec"]["nodeName"].as_str())
        .collect();
    assert_eq!(placed.len(), 3);
    assert!(!placed.contains(&node.as_str()), "{placed:?}");
    check.always_held().unwrap_or_else(|v| panic!("{v}"));
}

/// When, after a plan that began at `started`, to check convergence: a node lost for good
/// sets off its pods' eviction 50 s + 300 s after it went (plus the node lifecycle
/// controller's 5 s period), which outlasts the plan; everything else is over when the plan
/// is, and settles within seconds.
fn settled(started: Instant, happened: &[Happened]) -> Instant {
    let evictions = happened
        .iter()
        .filter(|h| matches!(h.fault, Fault::NodeLost { down: None, .. }) && !h.picked.is_empty())
        .map(|h| started + h.at + Duration::from_secs(370));
    evictions
        .max()
        .unwrap_or(started)
        .max(Instant::now() + Duration::from_secs(10))
}

async fn one_plan(seed: u64) {
    let plan = FaultPlan::cluster(seed);
    let env = cluster().await;
    let (check, own) = install(&env).await;
    let running = run(&env, Mode::Correct);
    let started = Instant::now();
    let faults = plan.spawn_on(&env);
    for (name, replicas) in [("web", 3), ("api", 2)] {
        create(&env, &webapp(name, replicas)).await;
    }
    // The spec changes while faults hit.
    Api::<WebApp>::namespaced(env.direct_client(), "default")
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scaled");
    let happened = faults.await.expect("the plan ran");
    let log: Vec<String> = happened.iter().map(ToString::to_string).collect();
    let fail = |v: Violation| -> ! { panic!("{plan}\n{}\n{v}", log.join("\n")) };
    tokio::time::sleep_until(settled(started, &happened)).await;
    check
        .converges(Duration::from_secs(600), converged)
        .await
        .unwrap_or_else(|v| fail(v));
    env.faults().clear();
    check.always_held().unwrap_or_else(|v| fail(v));
    // Each status write follows a change of the Deployment's counts (a plan makes a few
    // dozen at most, the operator writes under ten); a loop would write hundreds.
    own.no_hot_loop(20).unwrap_or_else(|v| fail(v));
    let _running = check
        .idempotent(Duration::from_secs(60), async {
            drop(running);
            run(&env, Mode::Correct)
        })
        .await
        .unwrap_or_else(|v| fail(v));
}

// Two seeds a test, so that the test harness runs them side by side.

#[tokio::test(start_paused = true)]
async fn the_operator_keeps_every_invariant_under_cluster_fault_plans_0_and_1() {
    for seed in [0, 1] {
        one_plan(seed).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_operator_keeps_every_invariant_under_cluster_fault_plans_2_and_3() {
    for seed in [2, 3] {
        one_plan(seed).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_operator_keeps_every_invariant_under_cluster_fault_plans_4_and_5() {
    for seed in [4, 5] {
        one_plan(seed).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_operator_keeps_every_invariant_under_cluster_fault_plans_6_and_7() {
    for seed in [6, 7] {
        one_plan(seed).await;
    }
}

/// The twin that says Available as soon as its Deployment exists is caught while its pods
/// are slow to start.
#[tokio::test(start_paused = true)]
async fn the_twin_available_too_early_is_caught() {
    let env = cluster().await;
    let (check, _own) = install(&env).await;
    let _running = run(&env, Mode::AvailableTooEarly);
    let plan = FaultPlan::from_steps(vec![Step {
        at: Duration::ZERO,
        fault: Fault::SlowStart {
            pods: 3,
            start: Duration::from_secs(30),
        },
    }]);
    let faults = plan.spawn_on(&env);
    tokio::time::sleep(Duration::from_millis(10)).await;
    create(&env, &webapp("web", 3)).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let violation = check.always_held().expect_err("caught");
    let Violation::Broken {
        invariant, reason, ..
    } = &violation
    else {
        panic!("{violation}");
    };
    assert_eq!(invariant, HONEST);
    assert_eq!(
        reason,
        "webapps.examples.konverge.dev default/web is Available with 0 of its 3 pods ready"
    );
    assert!(
        violation
            .to_string()
            .starts_with("invariant \"Available only when enough pods are ready\" broken for"),
        "{violation}"
    );
    faults.abort();
}

/// The twin that keeps the first complete ready count is caught after a node is lost.
#[tokio::test(start_paused = true)]
async fn the_twin_with_a_stale_ready_count_is_caught_after_a_node_is_lost() {
    let env = cluster().await;
    let (check, _own) = install(&env).await;
    let _running = run(&env, Mode::StaleReadyCount);
    create(&env, &webapp("web", 3)).await;
    check
        .converges(Duration::from_secs(60), converged)
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    check.always_held().expect("honest so far");
    let node = a_node_with_a_pod(&check.world());
    let plan = FaultPlan::from_steps(vec![Step {
        at: Duration::ZERO,
        fault: Fault::NodeLost {
            node: Pick::Named(node),
            down: Some(Duration::from_secs(120)),
        },
    }]);
    plan.run_on(&env).await;
    let violation = check.always_held().expect_err("caught");
    let Violation::Broken {
        invariant, reason, ..
    } = &violation
    else {
        panic!("{violation}");
    };
    assert_eq!(invariant, HONEST);
    assert_eq!(
        reason,
        "webapps.examples.konverge.dev default/web is Available with 2 of its 3 pods ready"
    );
    let app = check
        .world()
        .get("webapps.examples.konverge.dev", "default", "web")
        .cloned()
        .expect("the WebApp");
    assert_eq!(app["status"]["readyReplicas"], 3, "the stale count");
}
