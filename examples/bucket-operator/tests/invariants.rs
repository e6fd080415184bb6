//! The bucket operator keeps every invariant under 20 seeded fault plans while its cloud
//! fails too: no bucket leaks, no Bucket stays Terminating. Invalid regions are terminal and
//! not retried. The broken twin, which lets a Bucket go before deleting its cloud bucket,
//! leaks the bucket the first time the delete fails.

use std::sync::Arc;
use std::time::Duration;

use konverge_example_bucket_operator::{
    Bucket, BucketSpec, Cloud, Context, FINALIZER, Mode, controller, reconcile,
};
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{FaultPlan, Invariants, TestEnv, Violation, World};
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, PostParams};

fn run(env: &TestEnv, cloud: &Cloud, mode: Mode) -> RunningManager {
    let client = env.client();
    let mut manager = Manager::new(client.clone());
    let ctx = Context {
        client: client.clone(),
        cloud: cloud.clone(),
        mode,
    };
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
