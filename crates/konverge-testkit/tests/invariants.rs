//! The invariant checks on real controllers (konverge-runtime's), each under seeded fault
//! plans: a correct mirror controller passes every check, and each deliberately broken twin
//! is caught by the check made for its failure, with a report that names the object, the
//! manager and the fields.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::apply::{ChildSet, owner_reference};
use konverge_runtime::{Action, Controller, Manager, RunningManager, watcher::Config};
use konverge_testkit::{FaultPlan, TestEnv, Violation, World};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

/// What the mirror controller does wrong, if anything.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Mirrors the source's data with server-side apply: removed keys go.
    Correct,
    /// Merges the source's keys into the mirror and never removes any.
    NeverPrunes,
    /// Stamps the mirror with a counter on every pass.
    StampsEveryPass,
}

struct Ctx {
    client: Client,
    mode: Mode,
    passes: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
enum MirrorError {
    #[error(transparent)]
    Apply(#[from] konverge_runtime::apply::ApplyError),
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

async fn reconcile(src: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, MirrorError> {
    let pass = ctx.passes.fetch_add(1, Ordering::SeqCst);
    let name = format!(
        "{}-mirror",
        src.metadata.name.as_deref().unwrap_or_default()
    );
    let namespace = src.metadata.namespace.as_deref().unwrap_or("default");
    let mut annotations = BTreeMap::new();
    if ctx.mode == Mode::StampsEveryPass {
        annotations.insert("mirror.example.com/pass".to_string(), pass.to_string());
    }
    let mirror = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some([("role".to_string(), "mirror".to_string())].into()),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_reference(src.as_ref())?]),
            ..ObjectMeta::default()
        },
        data: src.data.clone(),
        ..ConfigMap::default()
    };
    match ctx.mode {
        Mode::Correct | Mode::StampsEveryPass => {
            ChildSet::new()
                .server_side("mirror")
                .typed_child("mirror", &mirror)
                .apply(&ctx.client)
                .await?;
        }
        Mode::NeverPrunes => {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
            let patch = json!({"metadata": {"labels": {"role": "mirror"}}, "data": src.data});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    api.create(&PostParams::default(), &mirror).await?;
                }
                other => {
                    other?;
                }
            }
        }
    }
    Ok(Action::await_change())
}

fn start(env: &TestEnv, mode: Mode) -> RunningManager {
    let client = env.client();
    let controller = Controller::new(
        Api::<ConfigMap>::all(client.clone()),
        Config::default().labels("role=source"),
    )
    .owns(
        Api::<ConfigMap>::all(client.clone()),
        Config::default().labels("role=mirror"),
    );
    let mut manager = Manager::new(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        mode,
        passes: AtomicU64::new(0),
    });
    manager.add(controller, reconcile, ctx);
    manager.spawn()
}

fn source(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some([("role".to_string(), "source".to_string())].into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// Every source has a mirror with exactly its data.
fn mirrored(world: &World) -> Result<(), String> {
    for (key, src) in world.list("configmaps") {
        if src["metadata"]["labels"]["role"] != "source" {
            continue;
        }
        let mirror = world
            .get(
                "configmaps",
                &key.namespace,
                &format!("{}-mirror", key.name),
            )
            .ok_or_else(|| format!("{key} has no mirror"))?;
        if mirror["data"] != src["data"] {
            return Err(format!(
                "{key}-mirror holds {} instead of {}",
                mirror["data"], src["data"]
            ));
        }
    }
    Ok(())
}

async fn set_data(api: &Api<ConfigMap>, name: &str, data: serde_json::Value) {
    let patch = json!({"data": data});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("driver write");
}

/// The correct controller keeps every invariant while faults from a seeded plan hit it.
#[tokio::test]
async fn a_correct_controller_keeps_every_invariant_under_seeded_fault_plans() {
    for seed in [1, 2, 3, 4] {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::start().await;
        let check = env.invariants().watch::<ConfigMap>().start().await;
        let running = start(&env, Mode::Correct);
        // The driver does not go through the faults: only the controller meets them.
        let driver = env.direct_client();
        let api: Api<ConfigMap> = Api::namespaced(driver, "default");
        for name in ["a", "b", "c"] {
            api.create(&PostParams::default(), &source(name, &[("k", name)]))
                .await
                .unwrap();
        }
        let faults = plan.spawn(&env.faults());
        set_data(&api, "a", json!({"extra": "1"})).await;
        faults.await.unwrap();
        check
            .converges(Duration::from_secs(20), mirrored)
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        env.faults().clear();
        check
            .no_hot_loop(6)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        // A restart lists and reconciles everything again, and writes nothing.
        let _running = check
            .idempotent(Duration::from_secs(10), async {
                drop(running);
                start(&env, Mode::Correct)
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        // Adding and removing the same keys again and again leaves the mirror as it was.
        check
            .bounded(3, Duration::from_secs(10), |round| {
                let api = api.clone();
                async move {
                    let key = format!("round-{round}");
                    set_data(&api, "b", json!({ key.as_str(): "x" })).await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    set_data(&api, "b", json!({ key.as_str(): null })).await;
                }
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .converges(Duration::from_secs(10), mirrored)
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}

/// The twin that never prunes removed keys is caught by `bounded`, which names the keys.
#[tokio::test]
async fn a_controller_that_never_prunes_is_caught_growing() {
    let env = TestEnv::start().await;
    let check = env.invariants().watch::<ConfigMap>().start().await;
    let _running = start(&env, Mode::NeverPrunes);
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &source("agg", &[("base", "1")]))
        .await
        .unwrap();
    check
        .converges(Duration::from_secs(10), |w| {
            w.get("configmaps", "default", "agg-mirror")
                .map(|_| ())
                .ok_or_else(|| "no mirror".into())
        })
        .await
        .unwrap();
    let violation = check
        .bounded(3, Duration::from_secs(10), |round| {
            let api = api.clone();
            async move {
                let key = format!("input-{round}");
                set_data(&api, "agg", json!({ key.as_str(): "x" })).await;
                // Let the controller see the key before it goes again.
                tokio::time::sleep(Duration::from_millis(200)).await;
                set_data(&api, "agg", json!({ key.as_str(): null })).await;
            }
        })
        .await
        .expect_err("the mirror keeps every key it ever saw");
    let Violation::Unbounded {
        object,
        sizes,
        kept,
    } = &violation
    else {
        panic!("{violation}");
    };
    assert_eq!(object.to_string(), "configmaps default/agg-mirror");
    assert!(sizes.windows(2).all(|w| w[1] > w[0]), "{sizes:?}");
    assert_eq!(kept, &[".data.input-1", ".data.input-2"], "{violation}");
    assert!(
        violation.to_string().contains("grows under churn"),
        "{violation}"
    );
}

/// The twin that stamps its child on every pass re-triggers itself: `no_hot_loop` names the
/// object, the field manager and the annotation that keeps changing.
#[tokio::test]
async fn a_controller_that_writes_every_pass_is_caught_looping() {
    let env = TestEnv::start().await;
    let check = env.invariants().watch::<ConfigMap>().start().await;
    let _running = start(&env, Mode::StampsEveryPass);
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &source("s", &[("k", "v")]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let violation = check.no_hot_loop(3).expect_err("a hot loop");
    let Violation::HotLoop {
        object,
        managers,
        paths,
        ..
    } = &violation
    else {
        panic!("{violation}");
    };
    assert_eq!(object.to_string(), "configmaps default/s-mirror");
    assert_eq!(managers, &["mirror"]);
    assert_eq!(
        paths.first().map(String::as_str),
        Some(".metadata.annotations.mirror.example.com/pass")
    );
    // It is not idempotent either: a resync writes.
    let err = check
        .idempotent(Duration::from_millis(500), async {})
        .await
        .expect_err("writes on resync");
    assert!(
        err.to_string()
            .contains("patch configmaps default/s-mirror"),
        "{err}"
    );
}

/// An object kept by a finalizer nobody removes is reported with the finalizer and the
/// manager that set it; children created before their dependencies are reported too.
#[tokio::test]
async fn stuck_finalizers_and_out_of_order_children_are_reported() {
    let env = TestEnv::start().await;
    let check = env.invariants().watch::<ConfigMap>().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut held = source("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    let as_cleaner = PostParams {
        field_manager: Some("cleaner".into()),
        ..PostParams::default()
    };
    api.create(&as_cleaner, &held).await.unwrap();
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let err = check
        .finalizers_released(Duration::from_millis(300))
        .await
        .expect_err("held");
    assert!(
        err.to_string()
            .contains("configmaps default/held: held by example.com/cleanup (set by cleaner)"),
        "{err}"
    );
    // Released: the check passes.
    let release = json!({"metadata": {"finalizers": null}});
    api.patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    check
        .finalizers_released(Duration::from_secs(5))
        .await
        .unwrap();

    // Children of one owner: a ConfigMap that reads a Secret was created before it.
    let check = env
        .invariants()
        .watch::<ConfigMap>()
        .watch::<k8s_openapi::api::core::v1::Secret>()
        .start()
        .await;
    let owner = api
        .create(&PostParams::default(), &source("app", &[]))
        .await
        .unwrap();
    let owned = || ObjectMeta {
        namespace: Some("default".into()),
        owner_references: Some(vec![owner_reference(&owner).unwrap()]),
        ..ObjectMeta::default()
    };
    let config = ConfigMap {
        metadata: ObjectMeta {
            name: Some("app-config".into()),
            ..owned()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &config).await.unwrap();
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: ObjectMeta {
            name: Some("app-credentials".into()),
            ..owned()
        },
        ..Default::default()
    };
    Api::namespaced(env.client(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    check
        .converges(Duration::from_secs(5), |w| {
            w.get("secrets", "default", "app-credentials")
                .map(|_| ())
                .ok_or_else(|| "no secret yet".into())
        })
        .await
        .unwrap();
    let err = check
        .ordered(&["secrets", "configmaps"])
        .expect_err("out of order");
    assert!(
        err.to_string().starts_with(
            "out of order: configmaps default/app-config was created before any secrets (owner "
        ),
        "{err}"
    );
    assert!(check.ordered(&["configmaps", "secrets"]).is_ok());
}

/// A deletion no watch could show is still recorded: the observer's watch is cut by a
/// restart, and meanwhile the object is deleted in the store itself and the history
/// compacted past it, so the observer lists again (410 Expired) and that list leaves the
/// object out. The world must lose it, as a reflector's replace drops what a relist lacks;
/// otherwise every invariant over the world judges an object that no longer exists.
#[tokio::test]
async fn a_deletion_no_watch_showed_is_recorded_after_the_relist() {
    let env = TestEnv::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.direct_client(), "default");
    for name in ["kept", "gone"] {
        api.create(&PostParams::default(), &source(name, &[]))
            .await
            .unwrap();
    }
    let check = env.invariants().watch::<ConfigMap>().start().await;
    let both_seen = |w: &World| match (
        w.get("configmaps", "default", "kept"),
        w.get("configmaps", "default", "gone"),
    ) {
        (Some(_), Some(_)) => Ok(()),
        _ => Err("not both seen yet".to_string()),
    };
    check
        .converges(Duration::from_secs(5), both_seen)
        .await
        .unwrap();

    let store = env.store().clone();
    let behind_the_servers_back = async {
        // The restart cuts every connection as soon as it starts and stays down for 500 ms:
        // 100 ms in, no watch is open, and none will resume from before this.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let deleted = store
            .delete(bytes::Bytes::from_static(
                b"/registry/configmaps/default/gone",
            ))
            .await
            .unwrap();
        assert!(deleted.is_some(), "gone was stored");
        let revision = store.current_revision().await.unwrap();
        store.compact(revision).await.unwrap();
    };
    let (restarted, ()) = tokio::join!(
        env.restart(Duration::from_millis(500)),
        behind_the_servers_back
    );
    restarted.unwrap();

    check
        .converges(Duration::from_secs(10), |w| {
            match (
                w.get("configmaps", "default", "kept"),
                w.get("configmaps", "default", "gone"),
            ) {
                (Some(_), None) => Ok(()),
                (None, _) => Err("kept is missing from the world".into()),
                (_, Some(_)) => Err("gone, deleted, is still in the world".into()),
            }
        })
        .await
        .unwrap();
    let gone = check
        .history()
        .into_iter()
        .filter(|c| c.object.name == "gone")
        .map(|c| c.kind)
        .collect::<Vec<_>>();
    assert_eq!(
        gone,
        [
            konverge_testkit::ChangeKind::Added,
            konverge_testkit::ChangeKind::Deleted
        ]
    );
}
