//! The cronjob controller against an in-process API server, in paused time: Jobs named
//! for their scheduled minute at exactly that minute, concurrency policies, history
//! limits, time zones, Jobs made by `kubectl create job --from=cronjob/...` left alone,
//! and convergence under seeded fault plans.

mod support;

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use konverge_controllers::Clock;
use konverge_controllers::controller_ref::controller_of;
use konverge_testkit::{FaultPlan, TestEnv, World};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// An in-process API server (with its garbage collector) and only `selection`'s
/// controllers: the testkit would otherwise run every kcm controller beside them.
async fn cluster(selection: &str) -> (TestEnv, konverge_runtime::RunningManager) {
    let env = TestEnv::builder().in_process().bare().start().await;
    let running = support::controllers(&env, selection).await;
    (env, running)
}

fn cron_job(name: &str, schedule: &str, extra: Value) -> CronJob {
    let mut spec = json!({
        "schedule": schedule,
        "jobTemplate": {
            "metadata": {"labels": {"cron": name}, "annotations": {"team": "batch"}},
            "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}],
            }}},
        },
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("a cronjob")
}

fn apis(client: &kube::Client) -> (Api<CronJob>, Api<Job>) {
    (
        Api::namespaced(client.clone(), "default"),
        Api::namespaced(client.clone(), "default"),
    )
}

/// The first time after `after` on a multiple of `every` seconds.
fn next_multiple(after: Timestamp, every: i64) -> Timestamp {
    let second = (after.as_second().div_euclid(every) + 1) * every;
    Timestamp::from_second(second).expect("a time")
}

fn created_at(cronjob: &CronJob) -> Timestamp {
    cronjob
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("created")
        .0
}

fn job_name(cronjob: &str, at: Timestamp) -> String {
    format!("{cronjob}-{}", at.as_second() / 60)
}

async fn wait_long<K>(api: &Api<K>, name: &str, within: Duration, done: impl Fn(&K) -> bool) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Ok(Some(obj)) = api.get_opt(name).await
            && done(&obj)
        {
            return obj;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: not there within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn events_of(client: &kube::Client, name: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

fn active_names(cronjob: &CronJob) -> Vec<String> {
    cronjob
        .status
        .as_ref()
        .and_then(|s| s.active.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|r| r.name.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn jobs_start_at_their_scheduled_minute_with_its_name() {
    let (env, _running) = cluster("cronjob").await;
    let (cronjobs, jobs) = apis(&env.client());
    let clock = Clock::tokio();
    let created = cronjobs
        .create(
            &PostParams::default(),
            &cron_job("report", "*/5 * * * *", json!({})),
        )
        .await
        .expect("created");
    let scheduled = next_multiple(created_at(&created), 300);
    let name = job_name("report", scheduled);

    let job = wait_long(&jobs, &name, Duration::from_secs(6 * 60), |_| true).await;
    let lateness = clock.now().duration_since(scheduled);
    assert!(
        lateness >= jiff::SignedDuration::from_secs(-1),
        "created early: {lateness:?}"
    );
    assert!(
        lateness < jiff::SignedDuration::from_secs(2),
        "created late: {lateness:?}"
    );
    let annotations = job.annotations();
    assert_eq!(
        annotations
            .get("batch.kubernetes.io/cronjob-scheduled-timestamp")
            .map(String::as_str),
        Some(
            scheduled
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
                .as_str()
        )
    );
    assert_eq!(annotations.get("team").map(String::as_str), Some("batch"));
    assert_eq!(job.labels().get("cron").map(String::as_str), Some("report"));
    let owner = controller_of(&job.metadata).expect("a controller");
    assert_eq!(
        (owner.kind.as_str(), Some(owner.uid.clone())),
        ("CronJob", created.uid())
    );

    let status = support::wait_for(&cronjobs, "report", Duration::from_secs(5), |c| {
        !active_names(c).is_empty()
    })
    .await;
    assert_eq!(active_names(&status), std::slice::from_ref(&name));
    let last = status
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0);
    assert_eq!(last, Some(scheduled));
    let events = events_of(&env.client(), "report").await;
    assert!(
        events.contains(&("SuccessfulCreate".into(), format!("Created job {name}"))),
        "{events:?}"
    );
    // Nothing more until the next five minutes.
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert_eq!(
        jobs.list(&ListParams::default())
            .await
            .expect("jobs")
            .items
            .len(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn forbid_skips_while_a_job_runs_and_resumes_once_it_completed() {
    let (env, _running) = cluster("cronjob,job").await;
    let (cronjobs, jobs) = apis(&env.client());
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let created = cronjobs
        .create(
            &PostParams::default(),
            &cron_job(
                "single",
                "* * * * *",
                json!({"concurrencyPolicy": "Forbid"}),
            ),
        )
        .await
        .expect("created");
    let first_at = next_multiple(created_at(&created), 60);
    let first = job_name("single", first_at);
    wait_long(&jobs, &first, Duration::from_secs(2 * 60), |_| true).await;
    // A minute later the first still runs: no second Job.
    let second = job_name("single", next_multiple(first_at, 60));
    tokio::time::sleep(Duration::from_secs(65)).await;
    assert!(jobs.get_opt(&second).await.expect("read").is_none());
    let events = events_of(&env.client(), "single").await;
    assert!(
        events.iter().any(|e| e.0 == "JobAlreadyActive"),
        "{events:?}"
    );

    let pod = support::wait_for_list(
        &pods,
        &format!("batch.kubernetes.io/job-name={first}"),
        Duration::from_secs(10),
        |p| p.len() == 1,
    )
    .await;
    support::finish_pod(&pods, &pod[0].name_any(), "Succeeded", 0).await;
    let status = wait_long(&cronjobs, "single", Duration::from_secs(10), |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.last_successful_time.is_some())
    })
    .await;
    assert!(
        !active_names(&status).contains(&first),
        "{:?}",
        status.status
    );
    let events = events_of(&env.client(), "single").await;
    assert!(
        events.contains(&(
            "SawCompletedJob".into(),
            format!("Saw completed job: {first}, condition: Complete")
        )),
        "{events:?}"
    );
    // The minute skipped while the first ran is still unmet (no starting deadline): its Job
    // starts as soon as the first is done.
    let active = wait_long(&cronjobs, "single", Duration::from_secs(30), |c| {
        active_names(c) == [second.clone()]
    })
    .await;
    assert_eq!(active_names(&active), [second]);
}

#[tokio::test(start_paused = true)]
async fn replace_deletes_the_running_job_for_the_next() {
    let (env, _running) = cluster("cronjob").await;
    let (cronjobs, jobs) = apis(&env.client());
    let created = cronjobs
        .create(
            &PostParams::default(),
            &cron_job("swap", "* * * * *", json!({"concurrencyPolicy": "Replace"})),
        )
        .await
        .expect("created");
    let first_at = next_multiple(created_at(&created), 60);
    let (first, second) = (
        job_name("swap", first_at),
        job_name("swap", next_multiple(first_at, 60)),
    );
    wait_long(&jobs, &first, Duration::from_secs(2 * 60), |_| true).await;
    wait_long(&jobs, &second, Duration::from_secs(2 * 60), |_| true).await;
    let status = wait_long(&cronjobs, "swap", Duration::from_secs(10), |c| {
        active_names(c) == [second.clone()]
    })
    .await;
    assert_eq!(active_names(&status), [second]);
    let old = jobs.get_opt(&first).await.expect("read");
    assert!(
        old.is_none_or(|j| j.metadata.deletion_timestamp.is_some()),
        "the first Job is deleted"
    );
    let events = events_of(&env.client(), "swap").await;
    assert!(
        events.contains(&("SuccessfulDelete".into(), format!("Deleted job {first}"))),
        "{events:?}"
    );
}

/// Plays the kubelet: every pod not yet finished succeeds, until `stop`.
async fn kubelet(pods: Api<Pod>, stop: tokio_util::sync::CancellationToken) {
    while !stop.is_cancelled() {
        if let Ok(list) = pods.list(&ListParams::default()).await {
            for pod in list.items {
                let finished = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .is_some_and(|p| p == "Succeeded");
                if !finished && pod.metadata.deletion_timestamp.is_none() {
                    let status = json!({"status": {"phase": "Succeeded"}});
                    let _ = pods
                        .patch_status(
                            &pod.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(status),
                        )
                        .await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn history_limits_prune_the_oldest_finished_jobs() {
    let (env, _running) = cluster("cronjob,job").await;
    let (cronjobs, jobs) = apis(&env.client());
    let stop = tokio_util::sync::CancellationToken::new();
    let kubelet = tokio::spawn(kubelet(
        Api::namespaced(env.client(), "default"),
        stop.clone(),
    ));
    cronjobs
        .create(
            &PostParams::default(),
            &cron_job(
                "tidy",
                "* * * * *",
                json!({"successfulJobsHistoryLimit": 2}),
            ),
        )
        .await
        .expect("created");
    tokio::time::sleep(Duration::from_secs(5 * 60 + 30)).await;
    let status = cronjobs.get("tidy").await.expect("the cronjob");
    let mut left: Vec<Job> = jobs
        .list(&ListParams::default().labels("cron=tidy"))
        .await
        .expect("jobs")
        .items;
    left.retain(|j| j.metadata.deletion_timestamp.is_none());
    let names: Vec<String> = left.iter().map(|j| j.name_any()).collect();
    assert_eq!(left.len(), 2, "{names:?}");
    let last = status
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0)
        .expect("scheduled");
    assert!(
        names.contains(&job_name("tidy", last)),
        "the newest is kept: {names:?}"
    );
    assert!(
        status
            .status
            .as_ref()
            .and_then(|s| s.last_successful_time.as_ref())
            .is_some()
    );
    let events = events_of(&env.client(), "tidy").await;
    // Events of one reason are aggregated into a series, as on a cluster.
    assert!(
        events.iter().any(|e| e.0 == "SuccessfulDelete"),
        "{events:?}"
    );
    stop.cancel();
    let _ = kubelet.await;
}

#[tokio::test(start_paused = true)]
async fn schedules_are_read_in_their_time_zone() {
    let (env, _running) = cluster("cronjob").await;
    let (cronjobs, jobs) = apis(&env.client());
    let clock = Clock::tokio();
    // Three minutes from now, as a wall clock in Kolkata (UTC+05:30) reads it.
    let target = next_multiple(clock.now(), 60)
        .checked_add(jiff::SignedDuration::from_secs(180))
        .expect("a time");
    let zone = jiff::tz::TimeZone::get("Asia/Kolkata").expect("the tz database");
    let local = target.to_zoned(zone);
    let schedule = format!("{} {} * * *", local.minute(), local.hour());
    cronjobs
        .create(
            &PostParams::default(),
            &cron_job("local", &schedule, json!({"timeZone": "Asia/Kolkata"})),
        )
        .await
        .expect("created");
    let name = job_name("local", target);
    let job = wait_long(&jobs, &name, Duration::from_secs(5 * 60), |_| true).await;
    assert_eq!(
        job.annotations()
            .get("batch.kubernetes.io/cronjob-scheduled-timestamp")
            .map(String::as_str),
        Some(
            local
                .strftime("%Y-%m-%dT%H:%M:%S+05:30")
                .to_string()
                .as_str()
        )
    );
}

#[tokio::test(start_paused = true)]
async fn jobs_made_from_a_cronjob_by_hand_are_left_alone() {
    let (env, _running) = cluster("cronjob,job").await;
    let (cronjobs, jobs) = apis(&env.client());
    let cronjob = cronjobs
        .create(
            &PostParams::default(),
            &cron_job(
                "nightly",
                "0 3 * * *",
                json!({"successfulJobsHistoryLimit": 0}),
            ),
        )
        .await
        .expect("created");
    // What `kubectl create job manual --from=cronjob/nightly` sends.
    let template = cronjob
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .expect("a template");
    let manual: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "manual",
            "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
            "labels": template.metadata.as_ref().and_then(|m| m.labels.clone()),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": cronjob.uid()}],
        },
        "spec": template.spec,
    }))
    .expect("a job");
    jobs.create(&PostParams::default(), &manual)
        .await
        .expect("created");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let pod = support::wait_for_list(
        &pods,
        "batch.kubernetes.io/job-name=manual",
        Duration::from_secs(10),
        |p| p.len() == 1,
    )
    .await;
    support::finish_pod(&pods, &pod[0].name_any(), "Succeeded", 0).await;
    support::wait_for(&jobs, "manual", Duration::from_secs(10), |j| {
        j.status.as_ref().and_then(|s| s.succeeded) == Some(1)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Finished, and still there despite a history limit of 0; never in the active list.
    assert!(
        jobs.get("manual")
            .await
            .expect("kept")
            .metadata
            .deletion_timestamp
            .is_none()
    );
    let status = cronjobs.get("nightly").await.expect("the cronjob");
    assert!(active_names(&status).is_empty());
    let reasons: Vec<String> = events_of(&env.client(), "nightly")
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(
        !reasons
            .iter()
            .any(|r| r == "UnexpectedJob" || r == "SuccessfulDelete"),
        "{reasons:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn unparseable_schedules_are_reported_not_retried() {
    let (env, _running) = cluster("cronjob").await;
    let (cronjobs, _) = apis(&env.client());
    // The API refuses TZ= in new schedules; the controller still reads ones it accepted.
    cronjobs
        .create(
            &PostParams::default(),
            &cron_job("odd", "* * * * *", json!({"timeZone": "Europe/Paris"})),
        )
        .await
        .expect("created");
    let patch = Patch::Merge(json!({"spec": {"timeZone": null, "schedule": "0 0 30 2 *"}}));
    cronjobs
        .patch("odd", &PatchParams::default(), &patch)
        .await
        .expect("patched");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = events_of(&env.client(), "odd").await;
    assert!(
        events.iter().any(|e| e.0 == "InvalidSchedule"
            && e.1 == "invalid schedule: 0 0 30 2 * : time difference between two schedules is less than 1 second"),
        "{events:?}"
    );
}

fn consistent(world: &World) -> Result<(), String> {
    let cronjob: CronJob = world.get_as("default", "steady").ok_or("no cronjob")?;
    let status = cronjob.status.clone().unwrap_or_default();
    if status.last_schedule_time.is_none() {
        return Err("nothing scheduled yet".into());
    }
    let jobs: Vec<String> = world
        .list("jobs.batch")
        .filter(|(_, j)| j.pointer("/metadata/deletionTimestamp").is_none())
        .map(|(k, _)| k.name.clone())
        .collect();
    let mut active = active_names(&cronjob);
    active.sort();
    let mut sorted = jobs.clone();
    sorted.sort();
    if active != sorted {
        return Err(format!("active {active:?}, jobs {sorted:?}"));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_a_hot_loop() {
    for seed in 1..=4 {
        let plan = FaultPlan::random(seed);
        // Only the controller under test: kcm's others would run beside it by default.
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env
            .invariants()
            .watch::<CronJob>()
            .watch::<Job>()
            .start()
            .await;
        let _running = support::controllers(&env, "cronjob-controller").await;
        let faults = plan.spawn(&env.faults());
        let (cronjobs, _) = apis(&env.direct_client());
        cronjobs
            .create(
                &PostParams::default(),
                &cron_job("steady", "* * * * *", json!({})),
            )
            .await
            .expect("created");
        faults.await.expect("the plan ran");
        tokio::time::sleep(Duration::from_secs(150)).await;
        check
            .converges(Duration::from_secs(30), consistent)
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(10)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
