//! The job controller (and the ttl-after-finished controller) against an in-process API
//! server, in paused time: pods from the template with kcm's labels and tracking
//! finalizer, counting through `uncountedTerminatedPods`, Indexed Jobs, the pod failure
//! backoff, pod failure policies, active deadlines, suspension, TTLs, adoption, bad
//! selectors, and convergence under seeded fault plans.

mod support;

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use konverge_controllers::Clock;
use konverge_controllers::controller_ref::controller_of;
use konverge_testkit::{FaultPlan, TestEnv, World};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(30);
const TRACKING: &str = "batch.kubernetes.io/job-tracking";

/// An in-process API server (with its garbage collector) and only `selection`'s
/// controllers: the testkit would otherwise run every kcm controller beside them.
async fn cluster(selection: &str) -> (TestEnv, konverge_runtime::RunningManager) {
    let env = TestEnv::builder().in_process().bare().start().await;
    let running = support::controllers(&env, selection).await;
    (env, running)
}

fn job(name: &str, spec: Value) -> Job {
    let mut spec = spec;
    spec["template"] = json!({
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        }
    });
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("a job")
}

fn apis(client: &kube::Client) -> (Api<Job>, Api<Pod>) {
    (
        Api::namespaced(client.clone(), "default"),
        Api::namespaced(client.clone(), "default"),
    )
}

fn condition<'j>(job: &'j Job, type_: &str) -> Option<&'j JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

fn selector(job: &str) -> String {
    format!("batch.kubernetes.io/job-name={job}")
}

fn unfinished(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
                && p.metadata.deletion_timestamp.is_none()
        })
        .map(|p| p.name_any())
        .collect()
}

/// What a kubelet writes for a container that exited at `at` (virtual time, so the
/// controller's failure backoff counts from it).
async fn exit_pod(pods: &Api<Pod>, name: &str, phase: &str, exit_code: i32, at: &str) {
    let status = json!({"status": {
        "phase": phase,
        "containerStatuses": [{
            "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": at, "finishedAt": at}},
        }],
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": at}],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the pod's status is written");
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

#[tokio::test(start_paused = true)]
async fn completions_run_in_parallel_until_complete() {
    let (env, _running) = cluster("job-controller").await;
    let (jobs, pods) = apis(&env.client());
    let created = jobs
        .create(
            &PostParams::default(),
            &job("pi", json!({"completions": 3, "parallelism": 2})),
        )
        .await
        .expect("created");
    let uid = created.uid().expect("a uid");

    let first = support::wait_for_list(&pods, &selector("pi"), WITHIN, |p| p.len() == 2).await;
    for pod in &first {
        let labels = pod.labels();
        assert_eq!(labels.get("batch.kubernetes.io/controller-uid"), Some(&uid));
        assert_eq!(labels.get("controller-uid"), Some(&uid));
        assert_eq!(labels.get("job-name").map(String::as_str), Some("pi"));
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("pi-"));
        assert_eq!(pod.finalizers(), [TRACKING.to_string()]);
        let owner = controller_of(&pod.metadata).expect("a controller");
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Job", uid.as_str())
        );
    }

    let mut finished = 0;
    while finished < 3 {
        let listed = support::wait_for_list(&pods, &selector("pi"), WITHIN, |p| {
            !unfinished(p).is_empty()
        })
        .await;
        let name = unfinished(&listed)[0].clone();
        let running = unfinished(&listed).len();
        assert!(running <= 2, "never more than parallelism: {running}");
        support::finish_pod(&pods, &name, "Succeeded", 0).await;
        finished += 1;
        support::wait_for(&jobs, "pi", WITHIN, |j| {
            j.status.as_ref().and_then(|s| s.succeeded) == Some(finished)
        })
        .await;
    }

    let done = support::wait_for(&jobs, "pi", WITHIN, |j| condition(j, "Complete").is_some()).await;
    let status = done.status.clone().expect("a status");
    assert_eq!(status.succeeded, Some(3));
    // `active`, `succeeded` and `failed` are `omitempty` counts: Go leaves out a zero.
    assert_eq!(status.active, None);
    assert_eq!(status.terminating, Some(0));
    assert!(status.completion_time.is_some() && status.start_time.is_some());
    for type_ in ["SuccessCriteriaMet", "Complete"] {
        let c = condition(&done, type_).expect("the condition");
        assert_eq!(c.reason.as_deref(), Some("CompletionsReached"));
        assert_eq!(
            c.message.as_deref(),
            Some("Reached expected number of succeeded pods")
        );
    }
    let all = support::wait_for_list(&pods, &selector("pi"), WITHIN, |p| {
        p.len() == 3 && p.iter().all(|p| p.finalizers().is_empty())
    })
    .await;
    assert_eq!(all.len(), 3);
    // Events of one reason are aggregated into a series: the latest note stands for all.
    let events = events_of(&env.client(), "pi").await;
    assert!(
        events
            .iter()
            .any(|(reason, note)| reason == "SuccessfulCreate"
                && note.starts_with("Created pod: pi-")),
        "{events:?}"
    );
    assert!(
        events.contains(&("Completed".into(), "Job completed".into())),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn failed_pods_are_replaced_after_a_backoff_until_the_limit() {
    let (env, _running) = cluster("job-controller").await;
    let (jobs, pods) = apis(&env.client());
    let clock = Clock::tokio();
    jobs.create(
        &PostParams::default(),
        &job("flaky", json!({"backoffLimit": 2})),
    )
    .await
    .expect("created");
    let mut waits = Vec::new();
    for failure in 1..=3 {
        let listed =
            support::wait_for_list(&pods, &selector("flaky"), Duration::from_secs(120), |p| {
                unfinished(p).len() == 1
            })
            .await;
        assert_eq!(listed.len(), failure, "one pod per attempt");
        let name = unfinished(&listed)[0].clone();
        exit_pod(&pods, &name, "Failed", 1, &clock.now_time().0.to_string()).await;
        let failed_at = tokio::time::Instant::now();
        if failure < 3 {
            support::wait_for_list(&pods, &selector("flaky"), Duration::from_secs(120), |p| {
                unfinished(p).len() == 1 && p.len() == failure + 1
            })
            .await;
            waits.push(failed_at.elapsed());
        }
    }
    // 10 s after the first failure, 20 s after the second.
    assert!(
        waits[0] >= Duration::from_secs(9) && waits[0] < Duration::from_secs(12),
        "{waits:?}"
    );
    assert!(
        waits[1] >= Duration::from_secs(19) && waits[1] < Duration::from_secs(22),
        "{waits:?}"
    );

    let failed =
        support::wait_for(&jobs, "flaky", WITHIN, |j| condition(j, "Failed").is_some()).await;
    for type_ in ["FailureTarget", "Failed"] {
        let c = condition(&failed, type_).expect("the condition");
        assert_eq!(c.reason.as_deref(), Some("BackoffLimitExceeded"));
        assert_eq!(
            c.message.as_deref(),
            Some("Job has reached the specified backoff limit")
        );
    }
    let status = failed.status.expect("a status");
    assert_eq!(
        (status.failed, status.succeeded, status.active),
        (Some(3), None, None),
        "zero counts are left out, as Go's omitempty writes them"
    );
    assert!(status.completion_time.is_none());
    let reasons: Vec<String> = events_of(&env.client(), "flaky")
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(
        reasons.contains(&"BackoffLimitExceeded".to_string()),
        "{reasons:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn indexed_jobs_give_each_pod_its_index() {
    let (env, _running) = cluster("job").await;
    let (jobs, pods) = apis(&env.client());
    let mut indexed = job(
        "shard",
        json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
    );
    if let Some(spec) = indexed.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.subdomain = Some("shards".into());
    }
    jobs.create(&PostParams::default(), &indexed)
        .await
        .expect("created");
    let listed = support::wait_for_list(&pods, &selector("shard"), WITHIN, |p| p.len() == 3).await;
    let mut seen = Vec::new();
    for pod in &listed {
        let index = pod.annotations()["batch.kubernetes.io/job-completion-index"].clone();
        assert_eq!(
            pod.labels().get("batch.kubernetes.io/job-completion-index"),
            Some(&index)
        );
        assert_eq!(
            pod.metadata.generate_name.as_deref(),
            Some(format!("shard-{index}-").as_str())
        );
        let spec = pod.spec.as_ref().expect("a spec");
        assert_eq!(
            spec.hostname.as_deref(),
            Some(format!("shard-{index}").as_str())
        );
        let env_var = spec.containers[0]
            .env
            .as_ref()
            .expect("env")
            .iter()
            .find(|e| e.name == "JOB_COMPLETION_INDEX")
            .expect("the index variable");
        let path = env_var
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        assert_eq!(
            path,
            Some("metadata.labels['batch.kubernetes.io/job-completion-index']")
        );
        seen.push(index);
    }
    seen.sort();
    assert_eq!(seen, ["0", "1", "2"]);

    // Index 1 first: the completed indexes read "1", then "0,1", then "0-2".
    let by_index = |i: &str| {
        listed
            .iter()
            .find(|p| p.annotations()["batch.kubernetes.io/job-completion-index"] == i)
            .expect("a pod")
            .name_any()
    };
    for (index, expected) in [("1", "1"), ("0", "0,1"), ("2", "0-2")] {
        support::finish_pod(&pods, &by_index(index), "Succeeded", 0).await;
        support::wait_for(&jobs, "shard", WITHIN, |j| {
            j.status
                .as_ref()
                .and_then(|s| s.completed_indexes.as_deref())
                == Some(expected)
        })
        .await;
    }
    let done = support::wait_for(&jobs, "shard", WITHIN, |j| {
        condition(j, "Complete").is_some()
    })
    .await;
    assert_eq!(done.status.and_then(|s| s.succeeded), Some(3));
}

#[tokio::test(start_paused = true)]
async fn a_fail_job_rule_fails_the_job_on_its_exit_code() {
    let (env, _running) = cluster("job-controller").await;
    let (jobs, pods) = apis(&env.client());
    let clock = Clock::tokio();
    let spec = json!({
        "completions": 2, "parallelism": 2,
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        ]},
    });
    jobs.create(&PostParams::default(), &job("strict", spec))
        .await
        .expect("created");
    let listed = support::wait_for_list(&pods, &selector("strict"), WITHIN, |p| p.len() == 2).await;
    // An ignored failure is replaced and not counted.
    let ignored = listed[0].name_any();
    exit_pod(
        &pods,
        &ignored,
        "Failed",
        3,
        &clock.now_time().0.to_string(),
    )
    .await;
    let listed = support::wait_for_list(&pods, &selector("strict"), WITHIN, |p| {
        unfinished(p).len() == 2 && p.len() == 3
    })
    .await;
    let status = jobs
        .get("strict")
        .await
        .expect("the job")
        .status
        .expect("a status");
    assert_eq!(status.failed, None, "no pod failed: the zero is left out");

    let fatal = unfinished(&listed)[0].clone();
    exit_pod(&pods, &fatal, "Failed", 42, &clock.now_time().0.to_string()).await;
    let failed = support::wait_for(&jobs, "strict", WITHIN, |j| {
        condition(j, "Failed").is_some()
    })
    .await;
    let message = format!(
        "Container main for pod default/{fatal} failed with exit code 42 matching FailJob rule at index 1"
    );
    for type_ in ["FailureTarget", "Failed"] {
        let c = condition(&failed, type_).expect("the condition");
        assert_eq!(c.reason.as_deref(), Some("PodFailurePolicy"));
        assert_eq!(c.message.as_deref(), Some(message.as_str()));
    }
    assert_eq!(
        failed.status.as_ref().and_then(|s| s.failed),
        Some(2),
        "the fatal pod and the deleted one"
    );
    // The running pod was deleted and released.
    support::wait_for_list(&pods, &selector("strict"), WITHIN, |p| {
        unfinished(p).is_empty() && p.iter().all(|p| p.finalizers().is_empty())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_active_deadline_fails_the_job_in_virtual_time() {
    let (env, _running) = cluster("job-controller").await;
    let (jobs, pods) = apis(&env.client());
    let started = tokio::time::Instant::now();
    jobs.create(
        &PostParams::default(),
        &job(
            "slow",
            json!({"activeDeadlineSeconds": 30, "parallelism": 2, "completions": 4}),
        ),
    )
    .await
    .expect("created");
    support::wait_for_list(&pods, &selector("slow"), WITHIN, |p| p.len() == 2).await;
    support::run_pods(&pods, &selector("slow"), true).await;
    let failed = support::wait_for(&jobs, "slow", Duration::from_secs(60), |j| {
        condition(j, "Failed").is_some()
    })
    .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(29) && took < Duration::from_secs(33),
        "{took:?}"
    );
    let c = condition(&failed, "Failed").expect("failed");
    assert_eq!(c.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        c.message.as_deref(),
        Some("Job was active longer than specified deadline")
    );
    let status = failed.status.expect("a status");
    assert_eq!(
        (status.active, status.ready, status.failed),
        (None, Some(0), Some(2)),
        "a zero `active` is left out; `ready` is a pointer and kept"
    );
    support::wait_for_list(&pods, &selector("slow"), WITHIN, |p| p.is_empty()).await;
}

#[tokio::test(start_paused = true)]
async fn suspended_jobs_delete_their_pods_and_resume_with_a_new_start() {
    let (env, _running) = cluster("job-controller").await;
    let (jobs, pods) = apis(&env.client());
    jobs.create(
        &PostParams::default(),
        &job(
            "later",
            json!({"suspend": true, "parallelism": 2, "completions": 2}),
        ),
    )
    .await
    .expect("created");
    let held = support::wait_for(&jobs, "later", WITHIN, |j| {
        condition(j, "Suspended").is_some()
    })
    .await;
    let c = condition(&held, "Suspended").expect("suspended");
    assert_eq!(
        (c.reason.as_deref(), c.message.as_deref()),
        (Some("JobSuspended"), Some("Job suspended"))
    );
    assert!(
        held.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_none()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .is_empty()
    );

    let suspend = |on: bool| Patch::Merge(json!({"spec": {"suspend": on}}));
    jobs.patch("later", &PatchParams::default(), &suspend(false))
        .await
        .expect("resumed");
    let resumed = support::wait_for(&jobs, "later", WITHIN, |j| {
        j.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Suspended" && c.status == "False")
            })
            && j.status.as_ref().and_then(|s| s.active) == Some(2)
    })
    .await;
    let c = resumed
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Suspended"))
        .expect("the condition");
    assert_eq!(
        (c.reason.as_deref(), c.message.as_deref()),
        (Some("JobResumed"), Some("Job resumed"))
    );
    assert!(
        resumed
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_some()
    );
    support::wait_for_list(&pods, &selector("later"), WITHIN, |p| {
        unfinished(p).len() == 2
    })
    .await;

    jobs.patch("later", &PatchParams::default(), &suspend(true))
        .await
        .expect("suspended");
    let again = support::wait_for(&jobs, "later", WITHIN, |j| {
        condition(j, "Suspended").is_some()
            && j.status.as_ref().and_then(|s| s.active).unwrap_or(0) == 0
    })
    .await;
    assert_eq!(again.status.as_ref().and_then(|s| s.failed), None);
    support::wait_for_list(&pods, &selector("later"), WITHIN, |p| p.is_empty()).await;
    let reasons: Vec<String> = events_of(&env.client(), "later")
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    for reason in ["Suspended", "Resumed", "SuccessfulDelete"] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn finished_jobs_are_deleted_after_their_ttl() {
    let (env, _running) = cluster("job-controller,ttl-after-finished").await;
    let (jobs, pods) = apis(&env.client());
    let clock = Clock::tokio();
    jobs.create(
        &PostParams::default(),
        &job("brief", json!({"ttlSecondsAfterFinished": 100})),
    )
    .await
    .expect("created");
    let listed = support::wait_for_list(&pods, &selector("brief"), WITHIN, |p| p.len() == 1).await;
    support::finish_pod(&pods, &listed[0].name_any(), "Succeeded", 0).await;
    let done = support::wait_for(&jobs, "brief", WITHIN, |j| {
        condition(j, "Complete").is_some()
    })
    .await;
    let finished = condition(&done, "Complete")
        .and_then(|c| c.last_transition_time.clone())
        .expect("a time")
        .0;
    let expires = finished
        .checked_add(jiff::SignedDuration::from_secs(100))
        .expect("a time");

    let until = |at: jiff::Timestamp| {
        Duration::try_from(at.duration_since(clock.now())).unwrap_or_default()
    };
    tokio::time::sleep(until(expires).saturating_sub(Duration::from_secs(2))).await;
    assert!(
        jobs.get_opt("brief").await.expect("read").is_some(),
        "deleted before its TTL"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let gone = jobs.get_opt("brief").await.expect("read");
    assert!(
        gone.is_none_or(|j| j.metadata.deletion_timestamp.is_some()),
        "still there after its TTL"
    );
    support::wait_for_list(&pods, &selector("brief"), WITHIN, |p| p.is_empty()).await;
}

#[tokio::test(start_paused = true)]
async fn orphans_are_adopted_and_bad_selectors_are_left_alone() {
    let (env, _running) = cluster("job-controller").await;
    let (jobs, pods) = apis(&env.client());
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stray", "labels": {"app": "manual"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &orphan)
        .await
        .expect("created");
    let mut manual = job(
        "manual",
        json!({"manualSelector": true, "selector": {"matchLabels": {"app": "manual"}}}),
    );
    if let Some(spec) = manual.spec.as_mut() {
        spec.template.metadata =
            Some(serde_json::from_value(json!({"labels": {"app": "manual"}})).expect("meta"));
    }
    let created = jobs
        .create(&PostParams::default(), &manual)
        .await
        .expect("created");
    let adopted = support::wait_for(&pods, "stray", WITHIN, |p| {
        controller_of(&p.metadata).is_some() && p.finalizers().contains(&TRACKING.to_string())
    })
    .await;
    assert_eq!(
        controller_of(&adopted.metadata).map(|o| o.uid.clone()),
        created.uid()
    );
    // The adopted pod counts: no second pod is made for the one completion.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pods.list(&ListParams::default().labels("app=manual"))
            .await
            .expect("pods")
            .items
            .len(),
        1
    );

    let mut bad = job(
        "bad",
        json!({"manualSelector": true, "selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}),
    );
    if let Some(spec) = bad.spec.as_mut() {
        spec.template.metadata =
            Some(serde_json::from_value(json!({"labels": {"a": "b"}})).expect("meta"));
    }
    // The API server may refuse it; if it takes it, the controller makes nothing of it.
    if jobs.create(&PostParams::default(), &bad).await.is_ok() {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            pods.list(&ListParams::default().labels("a=b"))
                .await
                .expect("pods")
                .items
                .is_empty()
        );
    }
    assert!(
        jobs.get("manual").await.is_ok(),
        "the controller still runs"
    );
}

fn converged(world: &World, name: &str, completions: i32) -> Result<(), String> {
    let job: Job = world.get_as("default", name).ok_or("no job")?;
    if condition(&job, "Complete").is_none() {
        return Err(format!("not complete: {:?}", job.status));
    }
    let succeeded = job.status.as_ref().and_then(|s| s.succeeded);
    if succeeded != Some(completions) {
        return Err(format!("succeeded {succeeded:?}"));
    }
    let tracked = world
        .list("pods")
        .filter(|(_, pod)| {
            pod.pointer("/metadata/finalizers")
                .is_some_and(|f| f.as_array().is_some_and(|f| !f.is_empty()))
        })
        .count();
    if tracked > 0 {
        return Err(format!("{tracked} pods keep finalizers"));
    }
    Ok(())
}

/// Plays the kubelet: every pod not yet finished succeeds, until `stop`.
async fn kubelet(pods: Api<Pod>, selector: String, stop: tokio_util::sync::CancellationToken) {
    while !stop.is_cancelled() {
        if let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await {
            for name in unfinished(&list.items) {
                let now = jiff::Timestamp::now().to_string();
                let _ = exit_ok(&pods, &name, &now).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn exit_ok(pods: &Api<Pod>, name: &str, at: &str) -> Result<(), kube::Error> {
    let status = json!({"status": {
        "phase": "Succeeded",
        "containerStatuses": [{
            "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}},
        }],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .map(|_| ())
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_a_hot_loop() {
    for seed in 1..=5 {
        let plan = FaultPlan::random(seed);
        // Only the controller under test: kcm's others would run beside it by default.
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env.invariants().watch::<Job>().watch::<Pod>().start().await;
        let running = support::controllers(&env, "job-controller").await;
        let faults = plan.spawn(&env.faults());
        let (jobs, pods) = apis(&env.direct_client());
        jobs.create(
            &PostParams::default(),
            &job("batch", json!({"completions": 4, "parallelism": 2})),
        )
        .await
        .expect("created");
        let stop = tokio_util::sync::CancellationToken::new();
        let kubelet = tokio::spawn(kubelet(pods, selector("batch"), stop.clone()));
        faults.await.expect("the plan ran");
        check
            .converges(Duration::from_secs(120), |world| {
                converged(world, "batch", 4)
            })
            .await
            .unwrap_or_else(|v| {
                let log: Vec<String> = env
                    .requests()
                    .records()
                    .iter()
                    .map(|r| r.to_string())
                    .filter(|r| !r.contains("events"))
                    .collect();
                let n = log.len();
                panic!(
                    "{plan}\n{v}\nREQUESTS:\n{}",
                    log[n.saturating_sub(70)..].join("\n")
                )
            });
        stop.cancel();
        let _ = kubelet.await;
        check
            .no_hot_loop(20)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .idempotent(Duration::from_secs(30), async {
                running.stop().await.expect("stopped");
                support::controllers(&env, "job-controller").await
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
