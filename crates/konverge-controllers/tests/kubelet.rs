//! Simulated kubelets: nodes register and heartbeat, bound pods go through a kubelet's
//! status sequence in virtual time, lifecycle annotations, deletion, no hot loop.

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod, PodCondition};
use konverge_controllers::Clock;
use konverge_controllers::kubelet::SimulatedNodes;
use konverge_runtime::{Manager, RunningManager};
use konverge_testkit::{FaultPlan, TestEnv, Verb};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "default";
const MINUTE: Duration = Duration::from_secs(60);

/// A cluster without kcm's controllers, and `nodes` running in a manager of their own.
async fn cluster(nodes: SimulatedNodes) -> (TestEnv, RunningManager, RunningManager) {
    let (env, kcm, running, _) = support::with_nodes("", nodes, false).await;
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

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn condition<'p>(pod: &'p Pod, type_: &str) -> Option<&'p PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn is(pod: &Pod, type_: &str, status: &str) -> bool {
    condition(pod, type_).is_some_and(|c| c.status == status)
}

fn app(pod: &Pod) -> &ContainerStatus {
    &pod.status
        .as_ref()
        .expect("a status")
        .container_statuses
        .as_ref()
        .expect("statuses")[0]
}

fn waiting_reason(status: &ContainerStatus) -> Option<&str> {
    status.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
}

#[tokio::test(start_paused = true)]
async fn nodes_register_with_kubelet_labels_status_and_renewed_leases() {
    let (env, _kcm, _nodes) = cluster(
        SimulatedNodes::new(2)
            .zones(["zone-a", "zone-b"])
            .instance_type("sim.large"),
    )
    .await;
    let nodes = Api::<Node>::all(env.client());
    let ready = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let node = support::wait_for(&nodes, "node-2", MINUTE, ready).await;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["kubernetes.io/hostname"], "node-2");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-b");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "sim.large");
    let spec = node.spec.clone().expect("a spec");
    assert_eq!(spec.pod_cidr.as_deref(), Some("10.244.2.0/24"));
    let status = node.status.clone().expect("a status");
    let capacity = status.capacity.clone().expect("capacity");
    assert_eq!(capacity["cpu"].0, "8");
    assert_eq!(capacity["memory"].0, "32Gi");
    assert_eq!(capacity["pods"].0, "110");
    assert_eq!(capacity["ephemeral-storage"].0, "100Gi");
    assert_eq!(status.allocatable, Some(capacity));
    let addresses: Vec<(String, String)> = status
        .addresses
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(
        addresses,
        [
            ("InternalIP".into(), "10.0.0.2".into()),
            ("Hostname".into(), "node-2".into())
        ]
    );
    let info = status.node_info.clone().expect("nodeInfo");
    assert_eq!(info.kubelet_version, "v1.33.0");
    assert_eq!(info.operating_system, "linux");
    assert_eq!(info.architecture, "amd64");
    assert!(info.container_runtime_version.starts_with("containerd://"));
    let conditions: Vec<(String, String, String, String)> = status
        .conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            (
                c.type_,
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        })
        .collect();
    let expected = [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        (
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
    ]
    .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()));
    assert_eq!(conditions, expected);

    let leases = Api::<Lease>::namespaced(env.client(), "kube-node-lease");
    let lease = support::wait_for(&leases, "node-1", MINUTE, |_| true).await;
    let spec = lease.spec.clone().expect("a lease spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("node-1"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let first = spec.renew_time.expect("renewed").0;
    env.requests().reset();
    tokio::time::sleep(Duration::from_secs(11)).await;
    let renewed = leases.get("node-1").await.expect("the lease");
    let second = renewed.spec.and_then(|s| s.renew_time).expect("renewed").0;
    assert!(
        second.duration_since(first).as_secs() >= 9,
        "{first} -> {second}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_bound_pod_runs_ready_with_ips_from_its_node_and_then_writes_nothing() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(2)).await;
    let pods = create_pod(&env, "web", json!({}), json!({})).await;
    create_pod(&env, "web-2", json!({}), json!({})).await;
    let done = |p: &Pod| phase(p) == "Running" && is(p, "Ready", "True");
    let pod = support::wait_for(&pods, "web", MINUTE, done).await;
    let other = support::wait_for(&pods, "web-2", MINUTE, done).await;
    let status = pod.status.clone().expect("a status");
    assert_eq!(status.host_ip.as_deref(), Some("10.0.0.1"));
    assert_eq!(
        status.host_ips.as_ref().map(|h| h[0].ip.as_str()),
        Some("10.0.0.1")
    );
    let ip = status.pod_ip.clone().expect("a pod IP");
    assert!(ip.starts_with("10.244.1."), "{ip}");
    assert_eq!(
        status.pod_ips.as_ref().map(|p| p[0].ip.clone()),
        Some(ip.clone())
    );
    assert_ne!(other.status.and_then(|s| s.pod_ip), Some(ip));
    assert!(status.start_time.is_some());
    for type_ in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ] {
        assert!(is(&pod, type_, "True"), "{type_}: {:#?}", status.conditions);
    }
    let container = app(&pod);
    assert_eq!(container.name, "app");
    assert_eq!(container.image, "docker.io/library/nginx:latest");
    assert!(
        container
            .image_id
            .starts_with("docker.io/library/nginx@sha256:"),
        "{}",
        container.image_id
    );
    assert_eq!(
        container.image_id.len(),
        "docker.io/library/nginx@sha256:".len() + 64
    );
    assert!(
        container
            .container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("containerd://"))
    );
    assert_eq!(container.started, Some(true));
    assert!(container.ready);
    assert_eq!(container.restart_count, 0);
    assert!(
        container
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some()
    );

    // Pending with ContainerCreating came first, then Running: two writes, then none.
    env.requests().reset();
    tokio::time::sleep(2 * MINUTE).await;
    assert_eq!(
        env.requests().count(Verb::Update, "pods/status"),
        0,
        "{:?}",
        env.requests()
    );
    assert_eq!(env.requests().count(Verb::Patch, "pods/status"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_slow_start_shows_pending_container_creating_first() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(1)).await;
    let pods = create_pod(
        &env,
        "slow",
        json!({"konverge.dev/start-seconds": "10"}),
        json!({}),
    )
    .await;
    let pod = support::wait_for(&pods, "slow", MINUTE, |p| phase(p) == "Pending").await;
    assert_eq!(waiting_reason(app(&pod)), Some("ContainerCreating"));
    assert_eq!(app(&pod).image, "nginx");
    assert_eq!(app(&pod).image_id, "");
    assert_eq!(app(&pod).started, Some(false));
    assert!(is(&pod, "PodScheduled", "True"));
    assert!(is(&pod, "Initialized", "True"));
    assert!(is(&pod, "PodReadyToStartContainers", "False"));
    let ready = condition(&pod, "Ready").expect("Ready");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [app]")
    );
    assert!(
        pod.status
            .as_ref()
            .and_then(|s| s.pod_ip.as_ref())
            .is_none()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(phase(&pods.get("slow").await.expect("the pod")), "Pending");
    support::wait_for(&pods, "slow", Duration::from_secs(10), |p| {
        phase(p) == "Running"
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn init_containers_run_first_in_order() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(1)).await;
    let spec = json!({"initContainers": [
        {"name": "init-a", "image": "busybox"},
        {"name": "init-b", "image": "busybox"},
    ]});
    let pods = create_pod(&env, "init", json!({"konverge.dev/run-seconds": "5"}), spec).await;
    let init_running = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .is_some_and(|i| i[0].state.as_ref().is_some_and(|s| s.running.is_some()))
    };
    let pod = support::wait_for(&pods, "init", MINUTE, init_running).await;
    assert_eq!(phase(&pod), "Pending");
    let inits = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.clone())
        .expect("inits");
    assert_eq!(waiting_reason(&inits[1]), Some("PodInitializing"));
    assert_eq!(waiting_reason(app(&pod)), Some("PodInitializing"));
    let initialized = condition(&pod, "Initialized").expect("Initialized");
    assert_eq!(initialized.status, "False");
    assert_eq!(
        initialized.reason.as_deref(),
        Some("ContainersNotInitialized")
    );
    assert_eq!(
        initialized.message.as_deref(),
        Some("containers with incomplete status: [init-a init-b]")
    );

    let pod = support::wait_for(&pods, "init", MINUTE, |p| phase(p) == "Running").await;
    let inits = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.clone())
        .expect("inits");
    let ended = |s: &ContainerStatus| {
        s.state
            .clone()
            .and_then(|s| s.terminated)
            .expect("terminated")
    };
    let (a, b) = (ended(&inits[0]), ended(&inits[1]));
    assert_eq!((a.exit_code, a.reason.as_deref()), (0, Some("Completed")));
    assert_eq!((b.exit_code, b.reason.as_deref()), (0, Some("Completed")));
    assert!(b.started_at.expect("started").0 >= a.finished_at.expect("finished").0);
    assert!(is(&pod, "Initialized", "True"));
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_never_restarts_succeeds() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(1)).await;
    let pods = create_pod(&env, "task", json!({}), json!({"restartPolicy": "Never"})).await;
    let pod = support::wait_for(&pods, "task", MINUTE, |p| phase(p) == "Succeeded").await;
    let ended = app(&pod)
        .state
        .clone()
        .and_then(|s| s.terminated)
        .expect("terminated");
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (0, Some("Completed"))
    );
    let ready = condition(&pod, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodCompleted"))
    );

    let pods = create_pod(
        &env,
        "fails",
        json!({"konverge.dev/exit-code": "3"}),
        json!({"restartPolicy": "Never"}),
    )
    .await;
    let pod = support::wait_for(&pods, "fails", MINUTE, |p| phase(p) == "Failed").await;
    let ended = app(&pod)
        .state
        .clone()
        .and_then(|s| s.terminated)
        .expect("terminated");
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (3, Some("Error"))
    );
}

#[tokio::test(start_paused = true)]
async fn an_exiting_container_crash_loops_with_growing_back_off() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(1)).await;
    let pods = create_pod(
        &env,
        "crash",
        json!({"konverge.dev/exit-code": "1"}),
        json!({}),
    )
    .await;
    let backing_off = |p: &Pod| waiting_reason(app(p)) == Some("CrashLoopBackOff");
    let started = tokio::time::Instant::now();
    let pod = support::wait_for(&pods, "crash", MINUTE, |p| {
        p.status.is_some() && backing_off(p)
    })
    .await;
    assert_eq!(phase(&pod), "Running");
    assert!(is(&pod, "Ready", "False"));
    let container = app(&pod);
    assert_eq!(container.restart_count, 1);
    let last = container
        .last_state
        .clone()
        .and_then(|s| s.terminated)
        .expect("lastState");
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    let message = container
        .state
        .clone()
        .and_then(|s| s.waiting)
        .and_then(|w| w.message)
        .unwrap_or_default();
    assert!(
        message.starts_with("back-off 10s restarting failed container=app pod=crash_default("),
        "{message}"
    );

    let pod = support::wait_for(&pods, "crash", 5 * MINUTE, |p| {
        p.status.is_some() && app(p).restart_count >= 3 && backing_off(p)
    })
    .await;
    let message = app(&pod)
        .state
        .clone()
        .and_then(|s| s.waiting)
        .and_then(|w| w.message)
        .unwrap_or_default();
    assert!(message.starts_with("back-off 40s"), "{message}");
    // 1 s runs, restarts at once, then after 10 s and 20 s: at least 33 s in.
    assert!(
        started.elapsed() >= Duration::from_secs(33),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn an_image_that_cannot_be_pulled_never_runs() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(1)).await;
    let pods = create_pod(
        &env,
        "pull",
        json!({"konverge.dev/image-pull": "fail"}),
        json!({}),
    )
    .await;
    let pod = support::wait_for(&pods, "pull", MINUTE, |p| {
        p.status.is_some() && waiting_reason(app(p)) == Some("ImagePullBackOff")
    })
    .await;
    assert_eq!(phase(&pod), "Pending");
    let message = app(&pod)
        .state
        .clone()
        .and_then(|s| s.waiting)
        .and_then(|w| w.message);
    assert_eq!(
        message.as_deref(),
        Some("Back-off pulling image \"nginx:latest\"")
    );
    tokio::time::sleep(2 * MINUTE).await;
    let pod = pods.get("pull").await.expect("the pod");
    assert_eq!(phase(&pod), "Pending");
    assert_eq!(waiting_reason(app(&pod)), Some("ImagePullBackOff"));
}

#[tokio::test(start_paused = true)]
async fn readiness_waits_for_the_probes_initial_delay_in_virtual_time() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(1)).await;
    let spec = json!({"containers": [{"name": "app", "image": "nginx",
        "readinessProbe": {"initialDelaySeconds": 30, "httpGet": {"path": "/", "port": 80}}}]});
    let pods = create_pod(&env, "probe", json!({}), spec).await;
    let pod = support::wait_for(&pods, "probe", MINUTE, |p| phase(p) == "Running").await;
    assert!(!app(&pod).ready);
    assert_eq!(app(&pod).started, Some(true));
    assert!(is(&pod, "ContainersReady", "False"));
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(is(
        &pods.get("probe").await.expect("the pod"),
        "Ready",
        "False"
    ));
    let pod = support::wait_for(&pods, "probe", Duration::from_secs(10), |p| {
        is(p, "Ready", "True")
    })
    .await;
    assert!(app(&pod).ready);

    let pods = create_pod(
        &env,
        "never",
        json!({"konverge.dev/ready": "false"}),
        json!({}),
    )
    .await;
    support::wait_for(&pods, "never", MINUTE, |p| phase(p) == "Running").await;
    tokio::time::sleep(MINUTE).await;
    assert!(is(
        &pods.get("never").await.expect("the pod"),
        "Ready",
        "False"
    ));
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_is_stopped_and_removed_for_good() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(1)).await;
    let pods = create_pod(&env, "gone", json!({}), json!({})).await;
    support::wait_for(&pods, "gone", MINUTE, |p| is(p, "Ready", "True")).await;
    pods.delete("gone", &DeleteParams::default())
        .await
        .expect("the pod is deleted");
    // Terminating (its grace period) until the kubelet stopped it and deleted it for good.
    let terminating = pods.get_opt("gone").await.expect("a read");
    assert!(terminating.is_some_and(|p| p.metadata.deletion_timestamp.is_some()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while pods.get_opt("gone").await.expect("a read").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gone hangs Terminating"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A finalizer keeps a deleted pod Terminating: its containers are stopped meanwhile.
    let pods = create_pod(&env, "held", json!({}), json!({})).await;
    let held = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    pods.patch("held", &PatchParams::default(), &Patch::Merge(&held))
        .await
        .expect("the finalizer is added");
    support::wait_for(&pods, "held", MINUTE, |p| is(p, "Ready", "True")).await;
    env.requests().reset();
    pods.delete("held", &DeleteParams::default())
        .await
        .expect("the pod is deleted");
    let pod = support::wait_for(&pods, "held", MINUTE, |p| phase(p) == "Failed").await;
    let ended = app(&pod)
        .state
        .clone()
        .and_then(|s| s.terminated)
        .expect("terminated");
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (143, Some("Error"))
    );
    let ready = condition(&pod, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodCompleted"))
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The deletion gave the pod its grace period: the kubelet stopped its containers
    // (the stopped status written once) and then deleted it with grace 0, once; the
    // finalizer holds it meanwhile.
    assert_eq!(env.requests().count(Verb::Update, "pods/status"), 1);
    assert_eq!(
        env.requests().count(Verb::Delete, "pods"),
        2,
        "{:?}",
        env.requests()
    );
    let pod = pods.get("held").await.expect("the pod");
    assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(0));
    let release = json!({"metadata": {"finalizers": null}});
    pods.patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("the finalizer is removed");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while pods.get_opt("held").await.expect("a read").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pod hangs Terminating"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_and_a_restarted_kubelet_writes_nothing() {
    for seed in 1..=3 {
        let plan = FaultPlan::random(seed);
        let (env, _kcm) = support::cluster("").await;
        let check = env.invariants().watch::<Pod>().start().await;
        // One clock for both kubelets: a second `Clock::tokio()` would start from the wall
        // clock again, behind the virtual time the first one has run through.
        let clock = Clock::tokio();
        let mut manager = Manager::new(env.client());
        SimulatedNodes::new(1).add(&mut manager, env.client(), clock.clone());
        let nodes = manager.spawn();
        let direct = env.direct_client();
        let pods = Api::<Pod>::namespaced(direct, NS);
        for (name, spec) in [
            ("web", json!({})),
            ("task", json!({"restartPolicy": "Never"})),
            (
                "init",
                json!({"initContainers": [{"name": "setup", "image": "busybox"}]}),
            ),
        ] {
            let mut spec = spec;
            spec["nodeName"] = json!("node-1");
            spec["containers"] = json!([{"name": "app", "image": "nginx"}]);
            let pod: Pod =
                serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))
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
                let (web, task, init) = (get("web")?, get("task")?, get("init")?);
                let running = |p: &Pod| phase(p) == "Running" && is(p, "Ready", "True");
                if !running(&web) || !running(&init) || phase(&task) != "Succeeded" {
                    return Err(format!(
                        "web {}, init {}, task {}",
                        phase(&web),
                        phase(&init),
                        phase(&task)
                    ));
                }
                Ok(())
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(6)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));

        // A kubelet started again finds every status as it would write it.
        nodes.stop().await.expect("the kubelets stop");
        env.requests().reset();
        let mut manager = Manager::new(env.client());
        SimulatedNodes::new(1).add(&mut manager, env.client(), clock);
        let _nodes = manager.spawn();
        tokio::time::sleep(MINUTE).await;
        assert_eq!(
            env.requests().count(Verb::Update, "pods/status"),
            0,
            "{plan}\n{:?}",
            env.requests()
        );
        let ips: Vec<Option<String>> = ["web", "init"]
            .iter()
            .map(|name| {
                check
                    .world()
                    .get_as::<Pod>(NS, name)
                    .and_then(|p| p.status?.pod_ip)
            })
            .collect();
        assert_ne!(ips[0], ips[1]);
        assert!(
            ips.iter()
                .all(|ip| ip.as_deref().is_some_and(|ip| ip.starts_with("10.244.1.")))
        );
    }
}

#[tokio::test(start_paused = true)]
async fn readiness_gates_hold_ready_until_their_condition_is_true() {
    let (env, _kcm, _nodes) = cluster(SimulatedNodes::new(1)).await;
    let spec = json!({"readinessGates": [{"conditionType": "example.com/lb"}]});
    let pods = create_pod(&env, "gated", json!({}), spec).await;
    let pod = support::wait_for(&pods, "gated", MINUTE, |p| is(p, "ContainersReady", "True")).await;
    let ready = condition(&pod, "Ready").expect("Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("corresponding condition of pod readiness gate \"example.com/lb\" does not exist.")
    );
    let mut conditions = pod
        .status
        .clone()
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    conditions.push(
        serde_json::from_value(json!({"type": "example.com/lb", "status": "True"}))
            .expect("a condition"),
    );
    let patch = json!({"status": {"conditions": conditions}});
    pods.patch_status("gated", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the gate opens");
    let pod = support::wait_for(&pods, "gated", MINUTE, |p| is(p, "Ready", "True")).await;
    assert!(is(&pod, "example.com/lb", "True"));
}
