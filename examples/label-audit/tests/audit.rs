//! label-audit against the in-process API server: every labelled object of six kinds (a
//! custom resource among them) is stamped exactly once, nothing else is touched, a
//! converged world is never written again, later changes are picked up, faults do not stop
//! it, and kinds its identity may not watch are reported and left alone. Its broken twin,
//! which stamps the resourceVersion, is caught rewriting its own stamp.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konverge_example_label_audit::{AUDITED, LABEL, Mode, Plan, Refusal, add, discover, stamp};
use konverge_runtime::metrics::Metrics;
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{
    ChangeKind, FaultPlan, Invariants, Rule, StatusCode, TestEnv, Verb, Violation, World,
};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(20);

/// The kinds every test creates objects of, as kubectl names their resources.
const KINDS: [&str; 6] = [
    "configmaps",
    "secrets",
    "deployments.apps",
    "clusterroles.rbac.authorization.k8s.io",
    "namespaces",
    "widgets.example.konverge.dev",
];

fn resource(kind: &str) -> ApiResource {
    match kind {
        "configmaps" => ApiResource::erase::<ConfigMap>(&()),
        "secrets" => ApiResource::erase::<Secret>(&()),
        "deployments.apps" => ApiResource::erase::<Deployment>(&()),
        "clusterroles.rbac.authorization.k8s.io" => ApiResource::erase::<ClusterRole>(&()),
        "namespaces" => ApiResource::erase::<Namespace>(&()),
        _ => ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.konverge.dev", "v1", "Widget"),
            "widgets",
        ),
    }
}

/// The namespace objects of `kind` live in: "" for the cluster-scoped ones.
fn namespace_of(kind: &str) -> &'static str {
    match kind {
        "clusterroles.rbac.authorization.k8s.io" | "namespaces" => "",
        _ => "default",
    }
}

fn api(env: &TestEnv, kind: &str) -> Api<DynamicObject> {
    match namespace_of(kind) {
        "" => Api::all_with(env.direct_client(), &resource(kind)),
        ns => Api::namespaced_with(env.direct_client(), ns, &resource(kind)),
    }
}

/// A valid object of `kind` named `name`, carrying [`LABEL`] when `labelled`.
fn body(kind: &str, name: &str, labelled: bool) -> Value {
    let mut metadata = json!({ "name": name });
    if !namespace_of(kind).is_empty() {
        metadata["namespace"] = json!(namespace_of(kind));
    }
    if labelled {
        metadata["labels"] = json!({ LABEL: "yes" });
    }
    match kind {
        "configmaps" => {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"x": "1"}})
        }
        "secrets" => {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "stringData": {"token": "s3cret"}})
        }
        "deployments.apps" => json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        }),
        "clusterroles.rbac.authorization.k8s.io" => json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": metadata,
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        }),
        "namespaces" => json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}),
        _ => json!({
            "apiVersion": "example.konverge.dev/v1", "kind": "Widget", "metadata": metadata,
            "spec": {"size": 1},
        }),
    }
}

async fn create(env: &TestEnv, kind: &str, name: &str, labelled: bool) -> anyhow::Result<()> {
    let object: DynamicObject = serde_json::from_value(body(kind, name, labelled))?;
    api(env, kind)
        .create(&PostParams::default(), &object)
        .await?;
    Ok(())
}

async fn patch(env: &TestEnv, kind: &str, name: &str, patch: Value) -> anyhow::Result<()> {
    api(env, kind)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The custom resource definition of Widgets, installed before the auditor starts.
async fn install_widgets(env: &TestEnv) -> anyhow::Result<()> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.konverge.dev"},
        "spec": {
            "group": "example.konverge.dev",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    }))?;
    konverge_runtime::crd::install(&env.direct_client(), &crd, "test", WITHIN).await?;
    Ok(())
}

/// Every kind and both objects of each, labelled `audited` and unlabelled `plain`.
async fn setup(env: &TestEnv) -> anyhow::Result<Invariants> {
    install_widgets(env).await?;
    for kind in KINDS {
        create(env, kind, "audited", true).await?;
        create(env, kind, "plain", false).await?;
    }
    let mut check = env.invariants();
    for kind in KINDS {
        check = check.watch_resource(resource(kind));
    }
    Ok(check.start().await)
}

fn annotation(
    world: &World,
    kind: &str,
    name: &str,
) -> Result<(DynamicObject, Option<String>), String> {
    let value = world
        .get(kind, namespace_of(kind), name)
        .ok_or_else(|| format!("{kind} {name} not seen"))?;
    let object: DynamicObject = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let stamp = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(AUDITED))
        .cloned();
    Ok((object, stamp))
}

/// `kind`'s object `name` carries the stamp of what it is now.
fn stamped(world: &World, kind: &str, name: &str) -> Result<(), String> {
    let (object, have) = annotation(world, kind, name)?;
    let want = stamp(&object);
    match have {
        Some(have) if have == want => Ok(()),
        have => Err(format!("{kind} {name}: stamp {have:?}, want {want}")),
    }
}

/// `kind`'s object `name` carries no stamp.
fn unstamped(world: &World, kind: &str, name: &str) -> Result<(), String> {
    match annotation(world, kind, name)? {
        (_, None) => Ok(()),
        (_, Some(stamp)) => Err(format!("{kind} {name} was stamped {stamp}")),
    }
}

/// Every `audited` object stamped, every `plain` one untouched.
fn audited(world: &World) -> Result<(), String> {
    for kind in KINDS {
        stamped(world, kind, "audited")?;
        unstamped(world, kind, "plain")?;
    }
    Ok(())
}

fn start(client: kube::Client, plan: &Plan) -> (RunningManager, Arc<Metrics>) {
    start_in(Mode::Correct, client, plan)
}

fn start_in(mode: Mode, client: kube::Client, plan: &Plan) -> (RunningManager, Arc<Metrics>) {
    let mut manager = Manager::new(client);
    add(&mut manager, plan, LABEL, mode);
    let metrics = manager.metrics();
    (manager.spawn(), metrics)
}

/// The sum of every series of `metric` whose labels contain `labels`.
fn sum(metrics: &Metrics, metric: &str, labels: &str) -> f64 {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Successful reconciles over every controller so far.
fn successes(metrics: &Metrics) -> f64 {
    sum(
        metrics,
        "controller_runtime_reconcile_total",
        "result=\"success\"",
    )
}

async fn wait_for_successes(metrics: &Metrics, n: f64) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    while successes(metrics) < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} successful reconciles, want {n}",
            successes(metrics)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An API server alone: the audit stamps every labelled object of every kind, and these tests
/// count writes per object, which kube-controller-manager's controllers (a Deployment's status,
/// its ReplicaSets and pods) would add to.
async fn audit_env() -> TestEnv {
    TestEnv::builder().bare().start().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_labelled_kind_is_stamped_once_and_a_converged_world_is_never_written_again()
-> anyhow::Result<()> {
    let env = audit_env().await;
    let check = setup(&env).await?;
    let plan = discover(&env.client()).await?;
    for kind in KINDS {
        assert!(plan.audits(kind), "{kind} is not audited: {plan:?}");
    }
    // Discovery and its access reviews are behind us: from here on, only the controllers.
    env.requests().reset();
    let (running, _) = start(env.client(), &plan);
    check.converges(WITHIN, audited).await?;
    // One merge patch per labelled object, and nothing else written.
    let writes: Vec<String> = env
        .requests()
        .records()
        .iter()
        .filter(|r| r.request.verb.is_some_and(Verb::is_write))
        .map(|r| r.to_string())
        .collect();
    assert_eq!(writes.len(), KINDS.len(), "{writes:#?}");
    assert!(
        writes.iter().all(|w| w.starts_with("patch ")),
        "{writes:#?}"
    );
    check.no_hot_loop(1)?;
    // A restart lists and reconciles every labelled object again, and writes nothing.
    let (_running, metrics) = check
        .idempotent(WITHIN, async {
            running.stop().await.expect("the manager stops cleanly");
            let (running, metrics) = start(env.client(), &plan);
            wait_for_successes(&metrics, KINDS.len() as f64).await;
            (running, metrics)
        })
        .await?;
    assert!(successes(&metrics) >= KINDS.len() as f64);
    check.converges(WITHIN, audited).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_added_later_and_a_new_version_are_picked_up() -> anyhow::Result<()> {
    let env = audit_env().await;
    let check = setup(&env).await?;
    let plan = discover(&env.client()).await?;
    let _running = start(env.client(), &plan);
    check.converges(WITHIN, audited).await?;

    // Labelled afterwards: it enters the controllers' watches and is stamped.
    for kind in [
        "configmaps",
        "deployments.apps",
        "clusterroles.rbac.authorization.k8s.io",
    ] {
        patch(
            &env,
            kind,
            "plain",
            json!({"metadata": {"labels": {LABEL: "late"}}}),
        )
        .await?;
    }
    check
        .converges(WITHIN, |world| {
            stamped(world, "configmaps", "plain")?;
            stamped(world, "deployments.apps", "plain")?;
            stamped(world, "clusterroles.rbac.authorization.k8s.io", "plain")
        })
        .await?;

    // A new generation, new content, and a stamp removed by hand are stamped again.
    patch(
        &env,
        "deployments.apps",
        "audited",
        json!({"spec": {"replicas": 3}}),
    )
    .await?;
    patch(&env, "configmaps", "audited", json!({"data": {"x": "2"}})).await?;
    patch(
        &env,
        "widgets.example.konverge.dev",
        "audited",
        json!({"metadata": {"annotations": {AUDITED: null}}}),
    )
    .await?;
    check
        .converges(WITHIN, |world| {
            let (deployment, stamp) = annotation(world, "deployments.apps", "audited")?;
            if deployment.metadata.generation != Some(2) {
                return Err(format!("generation {:?}", deployment.metadata.generation));
            }
            if stamp.as_deref() != Some("generation=2") {
                return Err(format!("deployment stamped {stamp:?}"));
            }
            for kind in KINDS {
                stamped(world, kind, "audited")?;
            }
            stamped(world, "configmaps", "plain")
        })
        .await?;
    check.no_hot_loop(3)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_races_server_errors_and_dropped_watches_do_not_stop_it() -> anyhow::Result<()> {
    let env = audit_env().await;
    let check = setup(&env).await?;
    let plan = discover(&env.client()).await?;
    // Stamps refused as if the object had changed meanwhile, and by a failing server.
    env.faults()
        .inject_conflicts(Rule::new().verb(Verb::Patch).resource("configmaps"), 2);
    env.faults().inject_errors(
        Rule::new().verb(Verb::Patch).resource("deployments"),
        StatusCode::INTERNAL_SERVER_ERROR,
        2,
    );
    env.faults().inject_errors(
        Rule::new().verb(Verb::Patch).resource("widgets"),
        StatusCode::SERVICE_UNAVAILABLE,
        1,
    );
    let _running = start(env.client(), &plan);
    // Labelled while its watch is cut.
    env.faults().drop_watches();
    patch(
        &env,
        "secrets",
        "plain",
        json!({"metadata": {"labels": {LABEL: "late"}}}),
    )
    .await?;
    check
        .converges(WITHIN, |world| {
            audited_except_plain_secret(world)?;
            stamped(world, "secrets", "plain")
        })
        .await?;
    assert_eq!(
        env.faults().pending_failures(),
        0,
        "every injected failure was met"
    );
    // The late Secret was written twice: labelled by the test, stamped by the auditor.
    check.no_hot_loop(2)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_converges_and_stays_converged_under_10_seeded_fault_plans() {
    // Five servers at a time, each with its own plan.
    for seeds in (0..10u64).collect::<Vec<_>>().chunks(5) {
        futures::future::join_all(seeds.iter().map(|seed| one_plan(*seed))).await;
    }
}

async fn one_plan(seed: u64) {
    let plan = FaultPlan::random(seed);
    let fail = |e: &dyn std::fmt::Display| -> ! { panic!("{plan}\n{e}") };
    let env = audit_env().await;
    let check = setup(&env).await.unwrap_or_else(|e| fail(&e));
    let audit = discover(&env.client()).await.unwrap_or_else(|e| fail(&e));
    let (running, _) = start(env.client(), &audit);
    let faults = plan.spawn(&env.faults());
    // Changes while the faults hit: a label added, a new generation.
    patch(
        &env,
        "configmaps",
        "plain",
        json!({"metadata": {"labels": {LABEL: "late"}}}),
    )
    .await
    .unwrap_or_else(|e| fail(&e));
    patch(
        &env,
        "deployments.apps",
        "audited",
        json!({"spec": {"replicas": 2}}),
    )
    .await
    .unwrap_or_else(|e| fail(&e));
    faults.await.unwrap_or_else(|e| fail(&e));
    let desired = |world: &World| {
        for kind in KINDS {
            stamped(world, kind, "audited")?;
            if kind != "configmaps" {
                unstamped(world, kind, "plain")?;
            }
        }
        stamped(world, "configmaps", "plain")
    };
    check
        .converges(WITHIN, desired)
        .await
        .unwrap_or_else(|v| fail(&v));
    env.faults().clear();
    // At most: the Deployment stamped, changed by the test, stamped again.
    check.no_hot_loop(3).unwrap_or_else(|v| fail(&v));
    let _running = check
        .idempotent(WITHIN, async {
            running.stop().await.unwrap_or_else(|e| fail(&e));
            let (running, metrics) = start(env.client(), &audit);
            wait_for_successes(&metrics, KINDS.len() as f64 + 1.0).await;
            running
        })
        .await
        .unwrap_or_else(|v| fail(&v));
}

fn audited_except_plain_secret(world: &World) -> Result<(), String> {
    for kind in KINDS {
        stamped(world, kind, "audited")?;
        if kind != "secrets" {
            unstamped(world, kind, "plain")?;
        }
    }
    Ok(())
}

/// A ServiceAccount that may list, watch and patch ConfigMaps, and only list Secrets.
const RBAC: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: ops
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: label-audit
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, watch, patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: label-audit
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: label-audit
subjects:
- kind: ServiceAccount
  name: auditor
  namespace: ops
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_it_may_not_watch_are_reported_and_left_alone() -> anyhow::Result<()> {
    let env = audit_env().await;
    let check = setup(&env).await?;
    env.apply_manifests(RBAC).await?;
    let client = env.client_for("ops", "auditor").await?;
    let plan = discover(&client).await?;
    let audited: Vec<String> = plan
        .audited
        .iter()
        .map(konverge_example_label_audit::qualified)
        .collect();
    assert_eq!(audited, ["configmaps"]);
    assert_eq!(
        plan.refusal("secrets"),
        Some(&Refusal::Forbidden(vec!["watch", "patch"]))
    );
    assert_eq!(
        plan.refusal("deployments.apps"),
        Some(&Refusal::Forbidden(vec!["list", "watch", "patch"]))
    );
    assert_eq!(
        plan.refusal("tokenreviews.authentication.k8s.io"),
        Some(&Refusal::NotServed(vec!["list", "watch", "patch"]))
    );
    assert_eq!(
        plan.refusal("events.events.k8s.io"),
        Some(&Refusal::AliasOf("events"))
    );
    let _running = start(client, &plan);
    check
        .converges(WITHIN, |world| {
            stamped(world, "configmaps", "audited")?;
            for kind in KINDS {
                unstamped(world, kind, "plain")?;
                if kind != "configmaps" {
                    unstamped(world, kind, "audited")?;
                }
            }
            Ok(())
        })
        .await?;
    // It never tried what it may not do: no failing watches, no refused writes.
    env.permissions("ops", "auditor").await.assert_no_denials();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_twin_that_stamps_the_resource_version_is_caught_rewriting_its_stamp()
-> anyhow::Result<()> {
    let env = audit_env().await;
    let check = setup(&env).await?;
    let plan = discover(&env.client()).await?;
    let (_running, metrics) = start_in(Mode::StampsResourceVersion, env.client(), &plan);
    // The runtime's own detector sees the echoes and backs the keys off.
    let deadline = tokio::time::Instant::now() + WITHIN;
    while sum(&metrics, "konverge_hot_loop_detections_total", "") < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no hot loop detected"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let violation = check
        .no_hot_loop(5)
        .expect_err("every stamp of a kind without a generation outdates itself");
    let Violation::HotLoop { object, paths, .. } = &violation else {
        panic!("{violation}");
    };
    assert!(
        [
            "configmaps",
            "secrets",
            "namespaces",
            "clusterroles.rbac.authorization.k8s.io"
        ]
        .contains(&object.resource.as_str()),
        "{violation}"
    );
    // The stamp is what keeps changing. (Who wrote it is read from managedFields' times,
    // which have seconds only: within the object's first second it reads as its creator.)
    assert_eq!(
        paths.first(),
        Some(&format!(".metadata.annotations.{AUDITED}")),
        "{violation}"
    );
    let plural = object.resource.split('.').next().unwrap_or_default();
    let patches = env.requests().count(Verb::Patch, plural);
    assert!(patches > 5, "{patches} patches of {}", object.resource);
    // Kinds with a generation are stamped with it, once, by the twin too.
    for (resource, name) in [
        ("deployments.apps", "default/audited"),
        ("widgets.example.konverge.dev", "default/audited"),
    ] {
        let writes = check
            .history()
            .iter()
            .filter(|c| {
                c.kind == ChangeKind::Modified
                    && c.object.resource == resource
                    && format!("{}/{}", c.object.namespace, c.object.name) == name
            })
            .count();
        assert_eq!(writes, 1, "{resource} {name}");
    }
    Ok(())
}
