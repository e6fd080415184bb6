//! The simulated kubelets' handle ([`Kubelets`]): stopping and starting a node's kubelet
//! (and the node lifecycle → taint eviction → replacement chain a lost node sets off),
//! crashing a pod's containers, lifecycle rules, and container logs.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use konverge_controllers::kubelet::{Behaviour, Kubelets, Rule, SimulatedNodes};
use konverge_runtime::RunningManager;
use konverge_testkit::{TestEnv, Verb};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "default";
const MINUTE: Duration = Duration::from_secs(60);

/// A cluster running `selection`'s controllers, and `nodes` (with the scheduler when
/// `schedule`) in a manager of their own; the nodes' kubelets' handle.
async fn cluster(
    selection: &str,
    nodes: SimulatedNodes,
    schedule: bool,
) -> (TestEnv, RunningManager, RunningManager, Kubelets) {
    support::with_nodes(selection, nodes, schedule).await
}

/// Creates a pod bound to `node`.
async fn create_pod(env: &TestEnv, name: &str, node: &str, meta: Value, spec: Value) -> Api<Pod> {
    support::create_bound_pod(env, name, node, meta, spec).await
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn ready(pod: &Pod) -> bool {
    konverge_controllers::pods::condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

fn app(pod: &Pod) -> ContainerStatus {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|s| s.first().cloned())
        .unwrap_or_default()
}

fn waiting_reason(pod: &Pod) -> Option<String> {
    app(pod).state?.waiting?.reason
}

fn node_ready(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn taints(node: &Node) -> Vec<String> {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

async fn lease_renewed(env: &TestEnv, node: &str) -> String {
    let lease = Api::<Lease>::namespaced(env.client(), "kube-node-lease")
        .get(node)
        .await
        .expect("the lease");
    format!("{:?}", lease.spec.and_then(|s| s.renew_time))
}

#[tokio::test(start_paused = true)]
async fn a_stopped_kubelet_writes_nothing_and_a_started_one_resumes() {
    let (env, _kcm, _nodes, kubelets) = cluster("", SimulatedNodes::new(2), false).await;
    assert_eq!(kubelets.nodes(), ["node-1", "node-2"]);
    assert_eq!(kubelets.zone("node-1"), None);
    let pods = create_pod(&env, "web", "node-1", json!({}), json!({})).await;
    support::wait_for(&pods, "web", MINUTE, ready).await;
    let leases = Api::<Lease>::namespaced(env.client(), "kube-node-lease");
    support::wait_for(&leases, "node-2", MINUTE, |_| true).await;

    assert!(kubelets.stop("node-1"));
    assert!(!kubelets.stop("node-9"));
    assert!(!kubelets.is_running("node-1"));
    assert!(kubelets.is_running("node-2"));
    assert!(!kubelets.is_running("node-9"));
    let renewed = lease_renewed(&env, "node-1").await;
    env.requests().reset();
    create_pod(&env, "late", "node-1", json!({}), json!({})).await;
    tokio::time::sleep(2 * MINUTE).await;
    // Nothing for node-1: no pod status, no lease, no node status; node-2 heartbeats on.
    let log = env.requests();
    assert_eq!(log.count(Verb::Update, "pods/status"), 0, "{log:?}");
    assert_eq!(lease_renewed(&env, "node-1").await, renewed);
    assert!(
        log.count(Verb::Update, "leases") >= 10,
        "node-2 renews: {log:?}"
    );
    let late = pods.get("late").await.expect("the pod");
    assert!(
        late.status.as_ref().is_none_or(|s| s.start_time.is_none()),
        "{late:?}"
    );
    assert!(
        !kubelets.crash(NS, "web", 1),
        "a dead kubelet's pods do not crash"
    );

    // The lost machine's Node is deleted meanwhile: the kubelet registers it again.
    let nodes = Api::<Node>::all(env.client());
    let old_uid = nodes.get("node-1").await.expect("the node").metadata.uid;
    nodes
        .delete("node-1", &DeleteParams::default())
        .await
        .expect("the node is deleted");

    assert!(kubelets.start("node-1"));
    assert!(!kubelets.start("node-9"));
    let node = support::wait_for(&nodes, "node-1", Duration::from_secs(15), |n| {
        node_ready(n).as_deref() == Some("True")
    })
    .await;
    assert_ne!(node.metadata.uid, old_uid);
    assert!(kubelets.is_running("node-1"));
    support::wait_for(&pods, "late", Duration::from_secs(5), |p| {
        phase(p) == "Running" && ready(p)
    })
    .await;
    assert_ne!(lease_renewed(&env, "node-1").await, renewed);
}

#[tokio::test(start_paused = true)]
async fn a_lost_node_is_tainted_its_pods_evicted_and_replaced_then_it_comes_back() {
    let controllers = "deployment-controller,replicaset-controller,\
                       node-lifecycle-controller,taint-eviction-controller";
    let (env, _kcm, _nodes, kubelets) = cluster(controllers, SimulatedNodes::new(2), true).await;
    let nodes = Api::<Node>::all(env.client());
    for node in ["node-1", "node-2"] {
        support::wait_for(&nodes, node, MINUTE, |n| {
            node_ready(n).as_deref() == Some("True")
        })
        .await;
    }
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
    }))
    .expect("a deployment");
    Api::<Deployment>::namespaced(env.client(), NS)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("the deployment is created");
    let pods = Api::<Pod>::namespaced(env.client(), NS);
    let running = support::wait_for_list(&pods, "app=web", 2 * MINUTE, |ps| {
        ps.len() == 4 && ps.iter().all(|p| phase(p) == "Running" && ready(p))
    })
    .await;
    let on = |ps: &[Pod], node: &str| -> Vec<String> {
        ps.iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .map(|p| p.name_any())
            .collect()
    };
    let (lost, kept) = if on(&running, "node-1").is_empty() {
        ("node-2", "node-1")
    } else {
        ("node-1", "node-2")
    };
    let stranded = on(&running, lost);
    assert!(!stranded.is_empty());

    let stopped = tokio::time::Instant::now();
    assert!(kubelets.stop(lost));
    let node = support::wait_for(&nodes, lost, 2 * MINUTE, |n| {
        taints(n).contains(&"node.kubernetes.io/unreachable:NoExecute".to_string())
    })
    .await;
    assert_eq!(node_ready(&node).as_deref(), Some("Unknown"));
    let tainted = tokio::time::Instant::now();
    assert!(
        tainted - stopped >= Duration::from_secs(40),
        "{:?}",
        tainted - stopped
    );

    // The pods tolerate the taint for 300 s, then are deleted: Terminating, as their
    // kubelet is not there to finish them.
    let evicted = support::wait_for_list(&pods, "app=web", 7 * MINUTE, |ps| {
        stranded.iter().all(|name| {
            ps.iter()
                .find(|p| &p.name_any() == name)
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        })
    })
    .await;
    assert!(
        tainted.elapsed() >= Duration::from_secs(295),
        "{:?}",
        tainted.elapsed()
    );
    for name in &stranded {
        let pod = evicted
            .iter()
            .find(|p| &p.name_any() == name)
            .expect("still there");
        assert_eq!(phase(pod), "Running", "its kubelet never saw it stop");
    }
    // Replacements run on the node that is left.
    support::wait_for_list(&pods, "app=web", 2 * MINUTE, |ps| {
        let live: Vec<&Pod> = ps
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.len() == 4
            && live.iter().all(|p| {
                phase(p) == "Running"
                    && ready(p)
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(kept)
            })
    })
    .await;

    assert!(kubelets.start(lost));
    support::wait_for(&nodes, lost, MINUTE, |n| {
        node_ready(n).as_deref() == Some("True") && taints(n).is_empty()
    })
    .await;
    let left = support::wait_for_list(&pods, "app=web", MINUTE, |ps| {
        ps.len() == 4 && ps.iter().all(|p| p.metadata.deletion_timestamp.is_none())
    })
    .await;
    for name in &stranded {
        assert!(left.iter().all(|p| &p.name_any() != name), "{name} is gone");
    }
}

#[tokio::test(start_paused = true)]
async fn a_crash_restarts_as_the_restart_policy_says_with_back_off() {
    let (env, _kcm, _nodes, kubelets) = cluster("", SimulatedNodes::new(1), false).await;
    let pods = create_pod(&env, "web", "node-1", json!({}), json!({})).await;
    support::wait_for(&pods, "web", MINUTE, ready).await;

    assert!(kubelets.crash(NS, "web", 137));
    let pod = support::wait_for(&pods, "web", Duration::from_secs(5), |p| {
        app(p).restart_count == 1
    })
    .await;
    // The first restart comes at once.
    let container = app(&pod);
    let last = container
        .last_state
        .and_then(|s| s.terminated)
        .expect("the crashed run");
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (137, Some("Error"))
    );
    assert!(container.state.and_then(|s| s.running).is_some());
    assert_eq!(phase(&pod), "Running");
    support::wait_for(&pods, "web", Duration::from_secs(5), ready).await;

    // The second waits 10 s in CrashLoopBackOff.
    assert!(kubelets.crash(NS, "web", 2));
    let pod = support::wait_for(&pods, "web", Duration::from_secs(5), |p| {
        waiting_reason(p).as_deref() == Some("CrashLoopBackOff")
    })
    .await;
    let crashed_at = tokio::time::Instant::now();
    assert_eq!(app(&pod).restart_count, 1);
    assert!(!ready(&pod));
    assert!(!kubelets.crash(NS, "web", 1), "nothing runs to crash");
    support::wait_for(&pods, "web", Duration::from_secs(15), |p| {
        app(p).restart_count == 2 && ready(p)
    })
    .await;
    assert!(
        crashed_at.elapsed() >= Duration::from_secs(8),
        "{:?}",
        crashed_at.elapsed()
    );

    // restartPolicy Never: the pod fails.
    let long = json!({"annotations": {"konverge.dev/run-seconds": "600"}});
    let pods = create_pod(
        &env,
        "task",
        "node-1",
        long,
        json!({"restartPolicy": "Never"}),
    )
    .await;
    support::wait_for(&pods, "task", MINUTE, |p| phase(p) == "Running").await;
    assert!(kubelets.crash(NS, "task", 3));
    let pod = support::wait_for(&pods, "task", MINUTE, |p| {
        matches!(phase(p), "Failed" | "Succeeded")
    })
    .await;
    assert_eq!(phase(&pod), "Failed");
    let ended = app(&pod).state.and_then(|s| s.terminated).expect("ended");
    assert_eq!(ended.exit_code, 3);

    assert!(!kubelets.crash(NS, "nothing", 1));
    assert!(
        !kubelets.crash(NS, "task", 1),
        "a finished pod does not crash"
    );
}

#[tokio::test(start_paused = true)]
async fn rules_shape_pods_admitted_after_them_up_to_their_limit() {
    let (env, _kcm, _nodes, kubelets) =
        cluster("", SimulatedNodes::new(2).zones(["a", "b"]), false).await;
    assert_eq!(kubelets.zone("node-2").as_deref(), Some("b"));
    assert_eq!(kubelets.zone("node-9"), None);
    let never = json!({"restartPolicy": "Never"});
    // Running before the rule: untouched.
    let pods = create_pod(
        &env,
        "before",
        "node-1",
        json!({"labels": {"app": "x"}}),
        json!({}),
    )
    .await;
    support::wait_for(&pods, "before", MINUTE, ready).await;

    let exits = kubelets.add_rule(Rule {
        labels: BTreeMap::from([("app".to_string(), "x".to_string())]),
        behaviour: Behaviour::Exit(3),
        limit: Some(1),
        ..Rule::default()
    });
    let pulls = kubelets.add_rule(Rule {
        image: Some("broken".into()),
        node: Some("node-2".into()),
        behaviour: Behaviour::ImagePullFails,
        ..Rule::default()
    });
    let slow = kubelets.add_rule(Rule {
        namespace: Some(NS.into()),
        labels: BTreeMap::from([("speed".to_string(), "slow".to_string())]),
        behaviour: Behaviour::StartSeconds(30),
        ..Rule::default()
    });
    let unready = kubelets.add_rule(Rule {
        labels: BTreeMap::from([("app".to_string(), "gated".to_string())]),
        behaviour: Behaviour::NeverReady,
        ..Rule::default()
    });
    assert_ne!(exits, pulls);

    create_pod(
        &env,
        "first",
        "node-1",
        json!({"labels": {"app": "x"}}),
        never.clone(),
    )
    .await;
    // Admitted in turn: the rule's one pod is the first.
    support::wait_for(&pods, "first", MINUTE, |p| {
        p.status.as_ref().is_some_and(|s| s.start_time.is_some())
    })
    .await;
    create_pod(
        &env,
        "second",
        "node-1",
        json!({"labels": {"app": "x"}}),
        never.clone(),
    )
    .await;
    create_pod(
        &env,
        "image",
        "node-2",
        json!({}),
        json!({"containers": [{"name": "app", "image": "example.com/broken:1"}]}),
    )
    .await;
    create_pod(
        &env,
        "image-1",
        "node-1",
        json!({}),
        json!({"containers": [{"name": "app", "image": "example.com/broken:1"}]}),
    )
    .await;
    create_pod(
        &env,
        "slow",
        "node-1",
        json!({"labels": {"speed": "slow"}}),
        json!({}),
    )
    .await;
    create_pod(
        &env,
        "gated",
        "node-1",
        json!({"labels": {"app": "gated"}}),
        json!({}),
    )
    .await;
    // An annotation wins over a rule.
    create_pod(
        &env,
        "annotated",
        "node-1",
        json!({"labels": {"app": "gated"}, "annotations": {"konverge.dev/ready": "true"}}),
        json!({}),
    )
    .await;

    let first = support::wait_for(&pods, "first", MINUTE, |p| phase(p) == "Failed").await;
    assert_eq!(
        app(&first)
            .state
            .and_then(|s| s.terminated)
            .map(|t| t.exit_code),
        Some(3)
    );
    support::wait_for(&pods, "second", MINUTE, |p| phase(p) == "Succeeded").await;
    let image = support::wait_for(&pods, "image", MINUTE, |p| {
        waiting_reason(p).as_deref() == Some("ImagePullBackOff")
    })
    .await;
    assert_eq!(phase(&image), "Pending");
    support::wait_for(&pods, "image-1", MINUTE, ready).await;
    support::wait_for(&pods, "annotated", MINUTE, ready).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(phase(&pods.get("slow").await.expect("pod")), "Pending");
    assert!(!ready(&pods.get("gated").await.expect("pod")));
    assert_eq!(phase(&pods.get("gated").await.expect("pod")), "Running");
    support::wait_for(&pods, "slow", Duration::from_secs(15), ready).await;
    let before = pods.get("before").await.expect("pod");
    assert!(ready(&before) && app(&before).restart_count == 0);

    assert!(kubelets.remove_rule(slow.clone()));
    assert!(!kubelets.remove_rule(slow));
    assert!(kubelets.remove_rule(unready));
    create_pod(
        &env,
        "fast",
        "node-1",
        json!({"labels": {"speed": "slow"}}),
        json!({}),
    )
    .await;
    support::wait_for(&pods, "fast", Duration::from_secs(10), ready).await;
    // The slow pod keeps the lifecycle it was admitted with.
    assert!(ready(&pods.get("slow").await.expect("pod")));
    assert!(!ready(&pods.get("gated").await.expect("pod")));
}

#[tokio::test(start_paused = true)]
async fn logs_follow_the_container_instance_and_refuse_as_the_kubelet_does() {
    let (env, _kcm, _nodes, kubelets) = cluster("", SimulatedNodes::new(1), false).await;
    let pods = create_pod(&env, "web-1", "node-1",
        json!({"annotations": {"konverge.dev/start-seconds": "10"}}),
        json!({"containers": [{"name": "web", "image": "nginx", "command": ["nginx"], "args": ["-g", "daemon off;"]}]}))
    .await;
    let pod = support::wait_for(&pods, "web-1", MINUTE, |p| p.status.is_some()).await;
    assert_eq!(
        kubelets.logs(&pod, "web", false),
        Err("container \"web\" in pod \"web-1\" is waiting to start: ContainerCreating".into())
    );
    assert_eq!(
        kubelets.logs(&pod, "web", true),
        Err("previous terminated container \"web\" in pod \"web-1\" not found".into())
    );
    assert_eq!(
        kubelets.logs(&pod, "nope", false),
        Err("container \"nope\" in pod \"web-1\" is not available".into())
    );

    let pod = support::wait_for(&pods, "web-1", MINUTE, ready).await;
    let started = app(&pod)
        .state
        .and_then(|s| s.running)
        .and_then(|r| r.started_at)
        .expect("started")
        .0;
    let lines = kubelets
        .logs(&pod, "web", false)
        .expect("logs")
        .expect("on a node");
    assert_eq!(
        lines,
        [
            (
                started,
                "simulated container \"web\" started from image \"nginx\"".to_string()
            ),
            (started, "command: [\"nginx\"]".to_string()),
            (started, "args: [\"-g\", \"daemon off;\"]".to_string()),
        ]
    );

    assert!(kubelets.crash(NS, "web-1", 137));
    let pod = support::wait_for(&pods, "web-1", Duration::from_secs(5), |p| {
        app(p).restart_count == 1
    })
    .await;
    let last = app(&pod)
        .last_state
        .and_then(|s| s.terminated)
        .expect("the crashed run");
    let previous = kubelets
        .logs(&pod, "web", true)
        .expect("logs")
        .expect("on a node");
    assert_eq!(previous.len(), 4);
    assert_eq!(previous[0].0, started);
    assert_eq!(
        previous[3],
        (
            last.finished_at.clone().expect("finished").0,
            "simulated container \"web\" exited with code 137 (Error)".to_string()
        )
    );
    let current = kubelets
        .logs(&pod, "web", false)
        .expect("logs")
        .expect("on a node");
    assert_eq!(current.len(), 3);
    assert!(current[0].0 >= last.finished_at.expect("finished").0);

    // The annotation's text; a pod elsewhere; a dead kubelet.
    let pods = create_pod(
        &env,
        "talk",
        "node-1",
        json!({"annotations": {"konverge.dev/log": "hello\nworld\n"}}),
        json!({}),
    )
    .await;
    let pod = support::wait_for(&pods, "talk", MINUTE, ready).await;
    let text: Vec<String> = kubelets
        .logs(&pod, "app", false)
        .expect("logs")
        .expect("on a node")
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    assert_eq!(text, ["hello", "world"]);
    let mut elsewhere = pod.clone();
    elsewhere.spec.as_mut().expect("a spec").node_name = Some("node-9".into());
    assert_eq!(kubelets.logs(&elsewhere, "app", false), Ok(None));
    kubelets.stop("node-1");
    let refused = kubelets.logs(&pod, "app", false).expect_err("unreachable");
    assert!(
        refused.starts_with(
            "Get \"https://10.0.0.1:10250/containerLogs/default/talk/app\": dial tcp 10.0.0.1:10250"
        ),
        "{refused}"
    );
    let listed = pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .len();
    assert_eq!(listed, 2);
}
