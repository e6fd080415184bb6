//! The simulated kubelets' Events (kube 1.33's reasons and messages, each recorded once per
//! transition), startup and readiness probes, and preStop `sleep` hooks, in virtual time.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use konverge_controllers::Clock;
use konverge_controllers::kubelet::SimulatedNodes;
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{FaultPlan, TestEnv, Verb};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "default";
const MINUTE: Duration = Duration::from_secs(60);

async fn cluster() -> (TestEnv, RunningManager, RunningManager) {
    let (env, kcm, running, _) = support::with_nodes("", SimulatedNodes::new(1), false).await;
    (env, kcm, running)
}

async fn create_pod(env: &TestEnv, name: &str, annotations: Value, spec: Value) -> Api<Pod> {
    support::create_bound_pod(
        env,
        name,
        "node-1",
        json!({"annotations": annotations}),
        spec,
    )
    .await
}

/// The kubelet's events about `pod`: (type, reason, message, fieldPath, count), oldest
/// first.
async fn events(env: &TestEnv, pod: &str) -> Vec<(String, String, String, String, i32)> {
    let mut items = Api::<Event>::namespaced(env.client(), NS)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items;
    items.sort_by_key(|e| e.metadata.name.clone());
    items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .filter(|e| e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("kubelet"))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.involved_object.field_path.unwrap_or_default(),
                e.count.unwrap_or_default(),
            )
        })
        .collect()
}

/// Polls until the kubelet recorded an event `reason` about `pod`.
async fn wait_for_event(env: &TestEnv, pod: &str, reason: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let seen = events(env, pod).await;
        if seen.iter().any(|e| e.1 == reason) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {reason} for {pod}: {seen:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn app(pod: &Pod) -> ContainerStatus {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|s| s.first().cloned())
        .unwrap_or_default()
}

fn ready(pod: &Pod) -> bool {
    konverge_controllers::pods::condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

fn normal(reason: &str, message: &str, count: i32) -> (String, String, String, String, i32) {
    (
        "Normal".into(),
        reason.into(),
        message.into(),
        "spec.containers{app}".into(),
        count,
    )
}

#[tokio::test(start_paused = true)]
async fn a_started_pod_records_pulling_pulled_created_and_started_once() {
    let (env, _kcm, _nodes) = cluster().await;
    let pods = create_pod(&env, "web", json!({}), json!({})).await;
    let pod = support::wait_for(&pods, "web", MINUTE, ready).await;
    // Pulled (policy Always, the default for an untagged image) in the pull's second.
    let started = app(&pod)
        .state
        .and_then(|s| s.running)
        .and_then(|r| r.started_at)
        .expect("started")
        .0;
    let scheduled = pod.status.and_then(|s| s.start_time).expect("a start").0;
    assert_eq!(started.duration_since(scheduled).as_secs(), 1);
    wait_for_event(&env, "web", "Started", Duration::from_secs(5)).await;
    tokio::time::sleep(2 * MINUTE).await;
    let seen = events(&env, "web").await;
    assert_eq!(seen.len(), 4, "{seen:#?}");
    assert_eq!(seen[0], normal("Pulling", "Pulling image \"nginx\"", 1));
    let pulled = &seen[1];
    assert_eq!((pulled.1.as_str(), pulled.4), ("Pulled", 1));
    assert!(
        pulled.2.starts_with(
            "Successfully pulled image \"nginx\" in 1s (1s including waiting). Image size: "
        ) && pulled.2.ends_with(" bytes."),
        "{}",
        pulled.2
    );
    assert_eq!(seen[2], normal("Created", "Created container: app", 1));
    assert_eq!(seen[3], normal("Started", "Started container app", 1));

    // A tagged image (IfNotPresent) is already there, and starts at once.
    let spec = json!({"containers": [{"name": "app", "image": "nginx:1.27"}]});
    let pods = create_pod(&env, "tagged", json!({}), spec).await;
    support::wait_for(&pods, "tagged", MINUTE, ready).await;
    wait_for_event(&env, "tagged", "Started", Duration::from_secs(5)).await;
    let seen = events(&env, "tagged").await;
    assert_eq!(
        seen,
        [
            normal(
                "Pulled",
                "Container image \"nginx:1.27\" already present on machine",
                1
            ),
            normal("Created", "Created container: app", 1),
            normal("Started", "Started container app", 1),
        ]
    );

    // Init containers' events name their list.
    let spec = json!({"initContainers": [{"name": "setup", "image": "busybox:1.36"}]});
    let pods = create_pod(&env, "init", json!({}), spec).await;
    support::wait_for(&pods, "init", MINUTE, ready).await;
    wait_for_event(&env, "init", "Started", Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = events(&env, "init").await;
    assert_eq!(seen[0].3, "spec.initContainers{setup}");
    assert_eq!(seen[1].2, "Created container: setup");
    assert_eq!(seen.len(), 7, "{seen:#?}");
}

#[tokio::test(start_paused = true)]
async fn crash_loops_and_failed_pulls_record_back_off_events() {
    let (env, _kcm, _nodes) = cluster().await;
    let pods = create_pod(
        &env,
        "crash",
        json!({"konverge.dev/exit-code": "1"}),
        json!({}),
    )
    .await;
    let pod = support::wait_for(&pods, "crash", MINUTE, |p| app(p).restart_count >= 3).await;
    let uid = pod.metadata.uid.clone().expect("a uid");
    wait_for_event(&env, "crash", "BackOff", Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = events(&env, "crash").await;
    let backoff: Vec<_> = seen.iter().filter(|e| e.1 == "BackOff").collect();
    assert_eq!(backoff.len(), 1, "one Event, counted: {seen:#?}");
    assert_eq!(backoff[0].0, "Warning");
    assert_eq!(
        backoff[0].2,
        format!("Back-off restarting failed container app in pod crash_default({uid})")
    );
    // Back-offs after the 2nd and 3rd run (the 1st restart is at once).
    assert_eq!(backoff[0].4, 2, "{seen:#?}");
    let started = seen.iter().find(|e| e.1 == "Started").expect("Started");
    assert_eq!(started.4, 4, "four runs: {seen:#?}");

    let pods = create_pod(
        &env,
        "pull",
        json!({"konverge.dev/image-pull": "fail"}),
        json!({}),
    )
    .await;
    support::wait_for(&pods, "pull", MINUTE, |p| {
        app(p).state.and_then(|s| s.waiting).and_then(|w| w.reason)
            == Some("ImagePullBackOff".into())
    })
    .await;
    wait_for_event(&env, "pull", "BackOff", Duration::from_secs(5)).await;
    tokio::time::sleep(MINUTE).await;
    let seen: Vec<(String, String, String)> = events(&env, "pull")
        .await
        .into_iter()
        .map(|(t, r, m, _, _)| (t, r, m))
        .collect();
    let expected = [
        ("Normal", "Pulling", "Pulling image \"nginx\"".to_string()),
        (
            "Warning",
            "Failed",
            "Failed to pull image \"nginx\": rpc error: code = NotFound desc = failed to pull \
             and unpack image \"docker.io/library/nginx:latest\": failed to resolve reference \
             \"docker.io/library/nginx:latest\": docker.io/library/nginx:latest: not found"
                .to_string(),
        ),
        ("Warning", "Failed", "Error: ErrImagePull".to_string()),
        (
            "Normal",
            "BackOff",
            "Back-off pulling image \"nginx:latest\"".to_string(),
        ),
        ("Warning", "Failed", "Error: ImagePullBackOff".to_string()),
    ]
    .map(|(t, r, m)| (t.to_string(), r.to_string(), m));
    let mut sorted = seen.clone();
    sorted.sort();
    let mut want = expected.to_vec();
    want.sort();
    assert_eq!(sorted, want);
}

#[tokio::test(start_paused = true)]
async fn startup_and_readiness_probes_run_in_virtual_time() {
    let (env, _kcm, _nodes) = cluster().await;
    let spec = json!({"containers": [{"name": "app", "image": "nginx:1.27",
        "startupProbe": {"initialDelaySeconds": 15, "httpGet": {"path": "/", "port": 80}},
        "readinessProbe": {"periodSeconds": 5, "successThreshold": 2,
                           "httpGet": {"path": "/", "port": 80}}}]});
    let pods = create_pod(&env, "probed", json!({}), spec).await;
    let pod = support::wait_for(&pods, "probed", MINUTE, |p| {
        app(p).state.and_then(|s| s.running).is_some()
    })
    .await;
    let running = tokio::time::Instant::now();
    assert_eq!(app(&pod).started, Some(false));
    assert!(!ready(&pod));
    // Started at the first startup probe past 15 s (20 s: the default period is 10).
    let pod = support::wait_for(&pods, "probed", MINUTE, |p| app(p).started == Some(true)).await;
    let at = running.elapsed().as_secs();
    assert!((19..=21).contains(&at), "started after {at} s");
    assert!(!ready(&pod));
    // Ready after two readiness successes, 5 s apart: the first at 20 s.
    support::wait_for(&pods, "probed", MINUTE, ready).await;
    let at = running.elapsed().as_secs();
    assert!((24..=26).contains(&at), "ready after {at} s");

    let spec = json!({"containers": [{"name": "app", "image": "nginx:1.27",
        "readinessProbe": {"initialDelaySeconds": 5, "httpGet": {"path": "/", "port": 80}}}]});
    let pods = create_pod(&env, "sick", json!({"konverge.dev/ready": "false"}), spec).await;
    support::wait_for(&pods, "sick", MINUTE, |p| app(p).started == Some(true)).await;
    wait_for_event(&env, "sick", "Unhealthy", Duration::from_secs(15)).await;
    tokio::time::sleep(MINUTE).await;
    let unhealthy: Vec<_> = events(&env, "sick")
        .await
        .into_iter()
        .filter(|e| e.1 == "Unhealthy")
        .collect();
    assert_eq!(
        unhealthy,
        [(
            "Warning".to_string(),
            "Unhealthy".to_string(),
            "Readiness probe failed: HTTP probe failed with statuscode: 503".to_string(),
            "spec.containers{app}".to_string(),
            1
        )]
    );
    assert!(!ready(&pods.get("sick").await.expect("the pod")));
}

#[tokio::test(start_paused = true)]
async fn a_pre_stop_sleep_delays_the_stop_within_the_grace_period() {
    let (env, _kcm, _nodes) = cluster().await;
    let hook = |seconds: i64, grace: i64| {
        json!({"terminationGracePeriodSeconds": grace, "containers": [{"name": "app",
            "image": "nginx:1.27", "lifecycle": {"preStop": {"sleep": {"seconds": seconds}}}}]})
    };
    let pods = create_pod(&env, "slow", json!({}), hook(20, 30)).await;
    create_pod(&env, "capped", json!({}), hook(20, 30)).await;
    // `capped` is deleted with a grace period of 5 s (`kubectl delete --grace-period=5`).
    for (name, grace) in [("slow", None), ("capped", Some(5))] {
        support::wait_for(&pods, name, MINUTE, ready).await;
        let params = DeleteParams {
            grace_period_seconds: grace,
            ..DeleteParams::default()
        };
        pods.delete(name, &params)
            .await
            .expect("the pod is deleted");
    }
    let deleted = tokio::time::Instant::now();
    wait_for_event(&env, "slow", "Killing", Duration::from_secs(5)).await;
    let killing: Vec<_> = events(&env, "slow")
        .await
        .into_iter()
        .filter(|e| e.1 == "Killing")
        .collect();
    assert_eq!(killing, [normal("Killing", "Stopping container app", 1)]);

    // The capped hook ends with its 5 s grace period; the other runs its 20 s.
    let gone = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let deadline = tokio::time::Instant::now() + MINUTE;
            while pods.get_opt(name).await.expect("a read").is_some() {
                assert!(tokio::time::Instant::now() < deadline, "{name} hangs");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            deleted.elapsed().as_secs()
        }
    };
    let capped = gone("capped").await;
    assert!((4..=6).contains(&capped), "capped gone after {capped} s");
    let slow = pods.get("slow").await.expect("still stopping");
    assert!(app(&slow).state.and_then(|s| s.running).is_some());
    let slow = gone("slow").await;
    assert!((19..=21).contains(&slow), "slow gone after {slow} s");
}

#[tokio::test(start_paused = true)]
async fn under_fault_plans_each_event_is_recorded_once_and_a_restarted_kubelet_replays_none() {
    for seed in 1..=3 {
        let plan = FaultPlan::random(seed);
        let (env, _kcm) = support::cluster("").await;
        let check = env.invariants().watch::<Pod>().start().await;
        // One clock for both kubelets (see the kubelet tests' restart).
        let clock = Clock::tokio();
        let mut manager = Manager::new(env.client());
        SimulatedNodes::new(1).add(&mut manager, env.client(), clock.clone());
        let nodes = manager.spawn();
        let pods = Api::<Pod>::namespaced(env.direct_client(), NS);
        let probe = json!({"httpGet": {"path": "/", "port": 80}});
        for (name, annotations, spec) in [
            ("web", json!({}), json!({})),
            (
                "sick",
                json!({"konverge.dev/ready": "false"}),
                json!({"containers": [{"name": "app", "image": "nginx", "readinessProbe": probe}]}),
            ),
            (
                "pull",
                json!({"konverge.dev/image-pull": "fail"}),
                json!({}),
            ),
            (
                "task",
                json!({"konverge.dev/exit-code": "3"}),
                json!({"restartPolicy": "Never"}),
            ),
        ] {
            let mut spec = spec;
            spec["nodeName"] = json!("node-1");
            if spec.get("containers").is_none() {
                spec["containers"] = json!([{"name": "app", "image": "nginx"}]);
            }
            let pod: Pod = serde_json::from_value(
                json!({"metadata": {"name": name, "annotations": annotations}, "spec": spec}),
            )
            .expect("a pod");
            pods.create(&PostParams::default(), &pod)
                .await
                .expect("the pod is created");
        }
        plan.spawn(&env.faults()).await.expect("the plan ran");
        check
            .converges(2 * MINUTE, |world| {
                let get = |name| {
                    world
                        .get_as::<Pod>(NS, name)
                        .ok_or(format!("{name} is gone"))
                };
                let (web, sick, pull, task) =
                    (get("web")?, get("sick")?, get("pull")?, get("task")?);
                let waiting = app(&pull)
                    .state
                    .and_then(|s| s.waiting)
                    .and_then(|w| w.reason);
                let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
                let settled = ready(&web)
                    && phase(&sick).as_deref() == Some("Running")
                    && waiting.as_deref() == Some("ImagePullBackOff")
                    && phase(&task).as_deref() == Some("Failed");
                if settled {
                    Ok(())
                } else {
                    Err(format!(
                        "web {:?}, sick {:?}, pull {waiting:?}, task {:?}",
                        phase(&web),
                        phase(&sick),
                        phase(&task)
                    ))
                }
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(6)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        // Past the sick pod's first probe.
        tokio::time::sleep(Duration::from_secs(15)).await;

        // No event twice (a write the faults failed is lost, as client-go's would be).
        let mut seen = Vec::new();
        for name in ["web", "sick", "pull", "task"] {
            for (_, reason, message, path, count) in events(&env, name).await {
                assert_eq!(count, 1, "{plan}\n{name} {reason} {message}");
                seen.push((name, reason, message, path));
            }
        }
        // 18 planned (web 4, sick 5, pull 5, task 4); those whose write met a server that
        // was down are lost (the crate's event recorder does not retry).
        assert!(!seen.is_empty(), "{plan}");
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), seen.len(), "{plan}\n{seen:#?}");

        // A kubelet started again finds every status as it would write it, and records
        // none of the pods' past.
        nodes.stop().await.expect("the kubelets stop");
        env.requests().reset();
        let mut manager = Manager::new(env.client());
        SimulatedNodes::new(1).add(&mut manager, env.client(), clock);
        let _nodes = manager.spawn();
        tokio::time::sleep(MINUTE).await;
        let log = env.requests();
        assert_eq!(log.count(Verb::Update, "pods/status"), 0, "{plan}\n{log:?}");
        assert_eq!(log.count(Verb::Create, "events"), 0, "{plan}\n{log:?}");
        assert_eq!(log.count(Verb::Patch, "events"), 0, "{plan}\n{log:?}");
    }
}
