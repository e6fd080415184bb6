//! The bucket operator keeps every invariant under 20 seeded fault plans while its cloud
//! fails too: no bucket leaks, no Bucket stays Terminating. Invalid regions are terminal and
//! not retried. Its Events tell each Bucket's story, ending in `Deleted`. The broken twin,
//! which lets a Bucket go before deleting its cloud bucket, leaks the bucket the first time
//! the delete fails — its last word about the Bucket is the Warning `CleanupFailed`, which is
//! how `konverge doctor` finds it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use konverge_example_bucket_operator::{
    Bucket, BucketSpec, Cloud, Context, FINALIZER, Mode, REPORTER, controller, reconcile,
};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{FaultPlan, Invariants, TestEnv, Violation, World};
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

fn run(env: &TestEnv, cloud: &Cloud, mode: Mode) -> RunningManager {
    let client = env.client();
    let mut manager = Manager::new(client.clone());
    let ctx = Context::new(client.clone(), cloud.clone(), mode);
    manager.add(controller(&client), reconcile, Arc::new(ctx));
    manager.spawn()
}

/// A client past the faults, for the test's own writes.
fn driver(env: &TestEnv) -> Api<Bucket> {
    Api::namespaced(env.direct_client(), "default")
}

async fn install(env: &TestEnv) -> Invariants {
    // The operator's own start-up step: apply the definition, wait until it is served.
    let driver = env.direct_client();
    konverge_runtime::crd::install(&driver, &Bucket::crd(), "test", Duration::from_secs(10))
        .await
        .unwrap();
    env.invariants().watch::<Bucket>().start().await
}

fn bucket(name: &str, region: &str) -> Bucket {
    Bucket::new(
        name,
        BucketSpec {
            region: region.into(),
        },
    )
}

/// The cloud holds exactly the live Buckets, and each reports itself ready.
fn in_sync(cloud: &Cloud) -> impl Fn(&World) -> Result<(), String> + '_ {
    move |world| {
        let live: Vec<String> = world
            .list("buckets.example.konverge.dev")
            .filter(|(_, b)| b["metadata"]["deletionTimestamp"].is_null())
            .map(|(k, _)| k.name.clone())
            .collect();
        let buckets: Vec<String> = cloud.buckets().into_keys().collect();
        if buckets != live {
            return Err(format!("the cloud holds {buckets:?}, the cluster {live:?}"));
        }
        for (key, b) in world.list("buckets.example.konverge.dev") {
            if b["status"]["ready"] != true {
                return Err(format!("{key} is not ready: {}", b["status"]));
            }
        }
        Ok(())
    }
}

async fn one_plan(seed: u64) {
    let plan = FaultPlan::random(seed);
    let fail = |v: Violation| -> ! { panic!("{plan}\n{v}") };
    let env = TestEnv::builder().disk().start().await;
    let check = install(&env).await;
    let cloud = Cloud::default();
    let running = run(&env, &cloud, Mode::Correct);
    let api = driver(&env);
    let faults = plan.spawn(&env.faults());
    for name in ["logs", "media", "backups"] {
        api.create(&PostParams::default(), &bucket(name, "eu-1"))
            .await
            .unwrap();
    }
    // The cloud fails too, while a Bucket is deleted.
    cloud.fail_next(2);
    api.delete("media", &DeleteParams::default()).await.unwrap();
    faults.await.unwrap();
    let within = Duration::from_secs(20);
    check
        .converges(within, in_sync(&cloud))
        .await
        .unwrap_or_else(|v| fail(v));
    check
        .finalizers_released(within)
        .await
        .unwrap_or_else(|v| fail(v));
    env.faults().clear();
    check.no_hot_loop(10).unwrap_or_else(|v| fail(v));
    let _running = check
        .idempotent(within, async {
            drop(running);
            run(&env, &cloud, Mode::Correct)
        })
        .await
        .unwrap_or_else(|v| fail(v));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_operator_keeps_every_invariant_under_20_fault_plans() {
    for seeds in (0..20u64).collect::<Vec<_>>().chunks(5) {
        futures::future::join_all(seeds.iter().map(|seed| one_plan(*seed))).await;
    }
}

#[tokio::test]
async fn an_invalid_region_is_reported_and_not_retried() {
    let env = TestEnv::start().await;
    let check = install(&env).await;
    let cloud = Cloud::default();
    let _running = run(&env, &cloud, Mode::Correct);
    driver(&env)
        .create(&PostParams::default(), &bucket("lost", "atlantis"))
        .await
        .unwrap();
    check
        .converges(Duration::from_secs(10), |w| {
            let b = w
                .get("buckets.example.konverge.dev", "default", "lost")
                .ok_or("no bucket")?;
            match b["status"]["error"].as_str() {
                Some(r#"region "atlantis" does not exist"#) => Ok(()),
                _ => Err(format!("status: {}", b["status"])),
            }
        })
        .await
        .unwrap();
    let calls = cloud.calls();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cloud.calls(), calls, "a terminal error is not retried");
    // Deleting it still runs the cleanup and lets it go.
    driver(&env)
        .delete("lost", &DeleteParams::default())
        .await
        .unwrap();
    check
        .finalizers_released(Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_twin_that_releases_early_leaks_the_bucket() {
    let env = TestEnv::start().await;
    let check = install(&env).await;
    let cloud = Cloud::default();
    let _running = run(&env, &cloud, Mode::ReleasesEarly);
    let api = driver(&env);
    api.create(&PostParams::default(), &bucket("media", "eu-1"))
        .await
        .unwrap();
    let synced = in_sync(&cloud);
    check
        .converges(Duration::from_secs(10), |w| {
            synced(w)?;
            match w.get("buckets.example.konverge.dev", "default", "media") {
                Some(_) => Ok(()),
                None => Err("no Bucket yet".into()),
            }
        })
        .await
        .unwrap();
    assert!(
        check
            .world()
            .get("buckets.example.konverge.dev", "default", "media")
            .unwrap()["metadata"]["finalizers"][0]
            == FINALIZER
    );
    cloud.fail_next(1);
    api.delete("media", &DeleteParams::default()).await.unwrap();
    let violation = check
        .converges(Duration::from_secs(2), in_sync(&cloud))
        .await
        .expect_err("the cloud bucket leaked");
    assert!(
        violation
            .to_string()
            .contains(r#"the cloud holds ["media"], the cluster []"#),
        "{violation}"
    );
}

/// The Events about the Bucket `name`, oldest first, as `(type, reason)`, and each one's
/// reporting controller.
async fn story(env: &TestEnv, name: &str) -> Vec<(String, String, String)> {
    let events: Api<Event> = Api::namespaced(env.direct_client(), "default");
    let mut about: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    about.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    about
        .into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.reporting_controller.unwrap_or_default(),
            )
        })
        .collect()
}

fn said(events: &[(&str, &str)]) -> Vec<(String, String, String)> {
    events
        .iter()
        .map(|(t, r)| (t.to_string(), r.to_string(), REPORTER.to_string()))
        .collect()
}

/// The Bucket `media` made and in sync under `mode`, then deleted while the cloud fails once.
async fn deleted_while_the_cloud_fails(mode: Mode) -> (TestEnv, Invariants, Cloud, RunningManager) {
    let env = TestEnv::start().await;
    let check = install(&env).await;
    let cloud = Cloud::default();
    let running = run(&env, &cloud, mode);
    let api = driver(&env);
    api.create(&PostParams::default(), &bucket("media", "eu-1"))
        .await
        .unwrap();
    check
        .converges(Duration::from_secs(10), in_sync(&cloud))
        .await
        .unwrap();
    cloud.fail_next(1);
    api.delete("media", &DeleteParams::default()).await.unwrap();
    (env, check, cloud, running)
}

#[tokio::test]
async fn the_events_tell_each_buckets_story_ending_in_deleted() {
    let (env, check, cloud, _running) = deleted_while_the_cloud_fails(Mode::Correct).await;
    let synced = in_sync(&cloud);
    check
        .converges(Duration::from_secs(10), |w| {
            synced(w)?;
            match w.get("buckets.example.konverge.dev", "default", "media") {
                Some(_) => Err("the Bucket is still there".into()),
                None => Ok(()),
            }
        })
        .await
        .unwrap();
    assert!(cloud.buckets().is_empty());
    assert_eq!(
        story(&env, "media").await,
        said(&[
            ("Normal", "Created"),
            ("Warning", "CleanupFailed"),
            ("Normal", "Deleted")
        ])
    );
}

#[tokio::test]
async fn the_twins_last_word_about_its_leaked_bucket_is_a_warning() {
    let (env, _check, cloud, _running) = deleted_while_the_cloud_fails(Mode::ReleasesEarly).await;
    let api = driver(&env);
    // The Bucket goes at once; its cloud bucket stays, and the Event says why.
    let mut last = Vec::new();
    for _ in 0..50 {
        last = story(&env, "media").await;
        if last.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(api.get_opt("media").await.unwrap().is_none());
    assert_eq!(
        last,
        said(&[("Normal", "Created"), ("Warning", "CleanupFailed")])
    );
    assert_eq!(cloud.buckets().into_keys().collect::<Vec<_>>(), ["media"]);
}

/// `konverge doctor`'s engine, watching while the twin lets a Bucket go and then fails to
/// delete its cloud bucket, reports the Bucket as deleted after a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_finds_the_twins_leaked_bucket() {
    let env = TestEnv::start().await;
    let check = install(&env).await;
    let cloud = Cloud::default();
    let _running = run(&env, &cloud, Mode::ReleasesEarly);
    let api = driver(&env);
    api.create(&PostParams::default(), &bucket("media", "eu-1"))
        .await
        .unwrap();
    check
        .converges(Duration::from_secs(10), in_sync(&cloud))
        .await
        .unwrap();
    let (opened, window_open) = tokio::sync::oneshot::channel();
    let doctor = tokio::spawn({
        let client = env.client();
        async move {
            let options = konverge_runtime::doctor::Options {
                window: Duration::from_secs(2),
                ..Default::default()
            };
            let mut opened = Some(opened);
            konverge_runtime::doctor::run(client, &options, |progress| {
                if let konverge_runtime::doctor::Progress::Synced { .. } = progress
                    && let Some(opened) = opened.take()
                {
                    let _ = opened.send(());
                }
            })
            .await
        }
    });
    window_open.await.unwrap();
    cloud.fail_next(1);
    api.delete("media", &DeleteParams::default()).await.unwrap();
    let report = doctor.await.unwrap().unwrap();
    let found = report
        .deleted_after_warning
        .iter()
        .find(|d| d.object.resource == "buckets.example.konverge.dev" && d.object.name == "media")
        .unwrap_or_else(|| panic!("not found in {report:#?}"));
    assert_eq!(found.reason, "CleanupFailed");
    assert_eq!(found.reporting_controller, REPORTER);
    assert!(found.note.contains("the cloud is unavailable"), "{found:?}");
}
