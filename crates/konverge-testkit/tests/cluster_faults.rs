//! Cluster faults of fault plans, on three (or four) simulated nodes in zones: each does what
//! it says, and a seed replays its steps and its picks.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use konverge_testkit::{Fault, FaultPlan, Happened, Pick, Step, TestEnv, World};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

async fn cluster(nodes: usize, zones: &[&str]) -> TestEnv {
    TestEnv::builder()
        .in_process()
        .nodes(nodes)
        .zones(zones.iter().copied())
        .start()
        .await
}

fn one(at: Duration, fault: Fault) -> FaultPlan {
    FaultPlan::from_steps(vec![Step { at, fault }])
}

async fn deployment(client: &Client, name: &str, replicas: i32) {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }))
    .expect("a Deployment");
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .expect("created");
}

/// A pod pinned to `node` (no scheduler involved), so its name and place are known.
async fn pinned_pod(client: &Client, name: &str, node: &str, app: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "nginx"}]},
    }))
    .expect("a Pod");
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .expect("created");
}

async fn pods(client: &Client, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("listed")
        .items
}

fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn ready(client: &Client, app: &str) -> Vec<Pod> {
    pods(client, app)
        .await
        .into_iter()
        .filter(is_ready)
        .collect()
}

/// Waits (in virtual time) until `done`, or panics after `within`.
async fn until<F, Fut>(within: Duration, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

async fn node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("the node")
}

fn node_ready(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn taints(node: &Node) -> Vec<String> {
    let mut taints: Vec<String> = node
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    taints.sort();
    taints
}

#[tokio::test(start_paused = true)]
async fn a_lost_nodes_pods_are_evicted_after_their_toleration_and_recreated_elsewhere() {
    let env = cluster(3, &["zone-a", "zone-b", "zone-c"]).await;
    let client = env.direct_client();
    deployment(&client, "web", 3).await;
    until(Duration::from_secs(60), "3 ready pods", || async {
        ready(&client, "web").await.len() == 3
    })
    .await;
    let victim = ready(&client, "web").await.remove(0);
    let lost = node_of(&victim);
    let plan = one(
        Duration::ZERO,
        Fault::NodeLost {
            node: Pick::Named(lost.clone()),
            down: None,
        },
    );
    let happened = plan.run_on(&env).await;
    assert_eq!(happened.len(), 1);
    assert_eq!(happened[0].picked, std::slice::from_ref(&lost));
    assert_eq!(happened[0].outcome, "kubelet stopped for good");
    let kubelets = env.kubelets().expect("simulated nodes");
    assert!(!kubelets.is_running(&lost));
    let started = Instant::now();
    // After the 50 s grace: unreachable, tainted, and its pod not ready.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let node_now = node(&client, &lost).await;
    assert_eq!(node_ready(&node_now), "Unknown");
    assert_eq!(
        taints(&node_now),
        [
            "node.kubernetes.io/unreachable:NoExecute",
            "node.kubernetes.io/unreachable:NoSchedule"
        ]
    );
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let name = victim.metadata.name.clone().expect("named");
    let now = pods_api.get(&name).await.expect("still there");
    assert!(!is_ready(&now));
    assert!(now.metadata.deletion_timestamp.is_none());
    // Its 300 s toleration of the taint has not run out yet at 340 s ...
    tokio::time::sleep_until(started + Duration::from_secs(340)).await;
    let now = pods_api.get(&name).await.expect("still there");
    assert!(
        now.metadata.deletion_timestamp.is_none(),
        "evicted too early"
    );
    // ... and has by 370 s: evicted (it stays Terminating: its kubelet is gone), and
    // replaced on another node.
    tokio::time::sleep_until(started + Duration::from_secs(370)).await;
    let now = pods_api.get(&name).await.expect("Terminating");
    assert!(now.metadata.deletion_timestamp.is_some(), "not evicted");
    until(Duration::from_secs(60), "a replacement", || async {
        ready(&client, "web").await.len() == 3
    })
    .await;
    for pod in ready(&client, "web").await {
        assert_ne!(node_of(&pod), lost);
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_lost_for_a_while_comes_back() {
    let env = cluster(3, &[]).await;
    let client = env.direct_client();
    until(Duration::from_secs(30), "nodes ready", || async {
        Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.len() == 3 && l.items.iter().all(|n| node_ready(n) == "True"))
    })
    .await;
    let plan = one(
        Duration::from_secs(1),
        Fault::NodeLost {
            node: Pick::Named("node-2".into()),
            down: Some(Duration::from_secs(90)),
        },
    );
    let started = Instant::now();
    let happened = plan.run_on(&env).await;
    assert!(started.elapsed() >= Duration::from_secs(91));
    assert_eq!(happened[0].at, Duration::from_secs(1));
    assert_eq!(
        happened[0].to_string(),
        "at 1000 ms node node-2 lost for 90 s: [node-2] kubelet stopped; kubelet started again"
    );
    assert_eq!(
        plan.to_string(),
        "fault plan 0: at 1000 ms node node-2 lost for 90 s"
    );
    assert!(env.kubelets().expect("nodes").is_running("node-2"));
    until(Duration::from_secs(30), "node-2 ready again", || async {
        let n = node(&client, "node-2").await;
        node_ready(&n) == "True" && taints(&n).is_empty()
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_drain_respects_a_pod_disruption_budget_and_uncordons() {
    let env = cluster(3, &["zone-a", "zone-b", "zone-c"]).await;
    let client = env.direct_client();
    deployment(&client, "web", 3).await;
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .expect("a PDB");
    Api::<PodDisruptionBudget>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &budget)
        .await
        .expect("created");
    until(Duration::from_secs(60), "3 ready pods", || async {
        ready(&client, "web").await.len() == 3
    })
    .await;
    let check = env.invariants().watch::<Pod>().start().await;
    check.always("the budget holds", Duration::ZERO, |world: &World| {
        let ready = world
            .list("pods")
            .filter(|(_, p)| {
                p["metadata"]["labels"]["app"] == "web"
                    && p["metadata"]["deletionTimestamp"].is_null()
                    && p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count();
        if ready >= 3 {
            Ok(())
        } else {
            Err(format!("{ready} ready pods"))
        }
    });
    let drained = node_of(&ready(&client, "web").await[0]);
    let plan = one(
        Duration::ZERO,
        Fault::NodeDrained {
            node: Pick::Named(drained.clone()),
            uncordon_after: Duration::from_secs(60),
        },
    );
    let running = plan.spawn_on(&env);
    tokio::time::sleep(Duration::from_secs(12)).await;
    // Cordoned, and the budget (no disruption allowed) keeps the pod where it is.
    let cordoned = node(&client, &drained).await;
    assert_eq!(
        cordoned.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true)
    );
    assert!(
        ready(&client, "web")
            .await
            .iter()
            .any(|p| node_of(p) == drained),
        "evicted despite the budget"
    );
    // A fourth replica lands elsewhere (the node is cordoned); the budget then allows one
    // disruption, and the drain's next retry evicts the pod.
    Api::<Deployment>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scaled");
    let happened: Vec<Happened> = running.await.expect("the plan ran");
    let outcome = &happened[0].outcome;
    assert!(
        outcome.starts_with("cordoned; evicted 1 pod(s) ("),
        "{outcome}"
    );
    assert!(
        outcome.contains("eviction(s) refused by a PodDisruptionBudget and retried)"),
        "{outcome}"
    );
    assert!(outcome.ends_with("; uncordoned"), "{outcome}");
    let uncordoned = node(&client, &drained).await;
    assert_eq!(uncordoned.spec.as_ref().and_then(|s| s.unschedulable), None);
    until(Duration::from_secs(30), "4 ready pods", || async {
        ready(&client, "web").await.len() == 4
    })
    .await;
    for pod in ready(&client, "web").await {
        assert_ne!(node_of(&pod), drained, "{:?}", pod.metadata.name);
    }
    check.always_held().unwrap_or_else(|v| panic!("{v}"));
}

/// Two pods on the drained node, a budget that allows one disruption: the drain evicts both
/// at once, as `kubectl drain` does, and the server lets only one through.
#[tokio::test(start_paused = true)]
async fn a_drain_evicts_at_once_and_the_budget_lets_one_pod_go() {
    let env = cluster(3, &[]).await;
    let client = env.direct_client();
    for (name, node) in [("db-0", "node-1"), ("db-1", "node-1"), ("db-2", "node-2")] {
        pinned_pod(&client, name, node, "db").await;
    }
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}},
    }))
    .expect("a PDB");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .expect("created");
    until(
        Duration::from_secs(60),
        "one disruption allowed",
        || async {
            ready(&client, "db").await.len() == 3
                && budgets
                    .get("db")
                    .await
                    .is_ok_and(|b| b.status.is_some_and(|s| s.disruptions_allowed == 1))
        },
    )
    .await;
    let check = env.invariants().watch::<Pod>().start().await;
    check.always("two db pods ready", Duration::ZERO, |world: &World| {
        let ready = world
            .list("pods")
            .filter(|(_, p)| {
                p["metadata"]["labels"]["app"] == "db"
                    && p["metadata"]["deletionTimestamp"].is_null()
                    && p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count();
        if ready >= 2 {
            Ok(())
        } else {
            Err(format!("{ready} ready db pods"))
        }
    });
    let plan = one(
        Duration::ZERO,
        Fault::NodeDrained {
            node: Pick::Named("node-1".into()),
            uncordon_after: Duration::from_secs(30),
        },
    );
    let happened = plan.run_on(&env).await;
    let outcome = &happened[0].outcome;
    assert!(
        outcome.starts_with("cordoned; evicted 1 pod(s) ("),
        "{outcome}"
    );
    assert!(outcome.contains("; gave up on default/db-"), "{outcome}");
    assert!(outcome.ends_with("; uncordoned"), "{outcome}");
    let left: Vec<String> = pods(&client, "db")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&"db-2".to_string()));
    check.always_held().unwrap_or_else(|v| panic!("{v}"));
}

#[tokio::test(start_paused = true)]
async fn a_zone_outage_stops_every_kubelet_of_the_zone() {
    let env = cluster(4, &["zone-a", "zone-b"]).await;
    let client = env.direct_client();
    until(Duration::from_secs(30), "nodes registered", || async {
        Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.len() == 4)
    })
    .await;
    let zone_of = |n: &Node| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("topology.kubernetes.io/zone").cloned())
            .unwrap_or_default()
    };
    assert_eq!(zone_of(&node(&client, "node-3").await), "zone-a");
    let plan = one(
        Duration::ZERO,
        Fault::ZoneOutage {
            zone: Pick::Named("zone-a".into()),
            down: Duration::from_secs(120),
        },
    );
    let running = plan.spawn_on(&env);
    tokio::time::sleep(Duration::from_secs(70)).await;
    let kubelets = env.kubelets().expect("nodes");
    for (name, down) in [
        ("node-1", true),
        ("node-2", false),
        ("node-3", true),
        ("node-4", false),
    ] {
        assert_eq!(kubelets.is_running(name), !down, "{name}");
        let want = if down { "Unknown" } else { "True" };
        assert_eq!(node_ready(&node(&client, name).await), want, "{name}");
    }
    let happened = running.await.expect("ran");
    assert_eq!(happened[0].picked, ["node-1", "node-3"]);
    assert_eq!(
        happened[0].outcome,
        "zone zone-a: kubelets stopped; started again: node-1, node-3"
    );
    until(Duration::from_secs(30), "zone-a back", || async {
        node_ready(&node(&client, "node-1").await) == "True"
            && node_ready(&node(&client, "node-3").await) == "True"
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_crashed_container_restarts_and_an_evicted_pod_is_replaced() {
    let env = cluster(3, &[]).await;
    let client = env.direct_client();
    pinned_pod(&client, "solo", "node-1", "solo").await;
    deployment(&client, "web", 2).await;
    until(Duration::from_secs(60), "pods ready", || async {
        ready(&client, "solo").await.len() == 1 && ready(&client, "web").await.len() == 2
    })
    .await;
    let plan = one(
        Duration::ZERO,
        Fault::ContainerCrash {
            pod: Pick::Named("default/solo".into()),
            exit_code: 137,
        },
    );
    let happened = plan.run_on(&env).await;
    assert_eq!(happened[0].picked, ["default/solo"]);
    assert_eq!(happened[0].outcome, "containers exited 137");
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    until(Duration::from_secs(30), "a restart", || async {
        api.get("solo").await.is_ok_and(|p| {
            p.status
                .and_then(|s| s.container_statuses)
                .and_then(|cs| cs.into_iter().next())
                .is_some_and(|c| {
                    c.restart_count == 1
                        && c.last_state
                            .and_then(|l| l.terminated)
                            .is_some_and(|t| t.exit_code == 137)
                })
        })
    })
    .await;
    // An eviction of a pod the Deployment owns: gone, and replaced.
    let before: BTreeSet<String> = pods(&client, "web")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let victim = before.iter().next().cloned().expect("a pod");
    let plan = one(
        Duration::ZERO,
        Fault::PodEvicted {
            pod: Pick::Named(format!("default/{victim}")),
        },
    );
    let happened = plan.run_on(&env).await;
    assert_eq!(happened[0].outcome, "evicted");
    until(Duration::from_secs(30), "a replacement", || async {
        let now = ready(&client, "web").await;
        now.len() == 2
            && now
                .iter()
                .all(|p| p.metadata.name.as_ref() != Some(&victim))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn image_pull_failures_catch_the_next_pods_and_slow_starts_delay_them() {
    let env = cluster(3, &[]).await;
    let client = env.direct_client();
    let plan = FaultPlan::from_steps(vec![Step {
        at: Duration::ZERO,
        fault: Fault::ImagePullFailure {
            pods: 1,
            lasting: Duration::from_secs(30),
        },
    }]);
    let running = plan.spawn_on(&env);
    tokio::time::sleep(Duration::from_millis(10)).await;
    deployment(&client, "web", 2).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let waiting: Vec<String> = pods(&client, "web")
        .await
        .iter()
        .filter_map(|p| {
            let c = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
            c.state.as_ref()?.waiting.as_ref()?.reason.clone()
        })
        .collect();
    assert_eq!(waiting, ["ImagePullBackOff"]);
    assert_eq!(ready(&client, "web").await.len(), 1);
    // The registry is back: the stuck pod is replaced, and both run.
    let happened = running.await.expect("ran");
    assert!(
        happened[0].outcome.starts_with(
            "kubelet rule added; rule removed; pods still failing to pull deleted: default/web-"
        ),
        "{}",
        happened[0].outcome
    );
    until(Duration::from_secs(30), "2 ready pods", || async {
        ready(&client, "web").await.len() == 2
    })
    .await;

    // The next pod admitted takes 20 s to start.
    let plan = one(
        Duration::ZERO,
        Fault::SlowStart {
            pods: 1,
            start: Duration::from_secs(20),
        },
    );
    let running = plan.spawn_on(&env);
    tokio::time::sleep(Duration::from_millis(10)).await;
    pinned_pod(&client, "slow", "node-2", "slow").await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(ready(&client, "slow").await.is_empty(), "started early");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(ready(&client, "slow").await.len(), 1, "not started");
    running.abort();
}

#[test]
fn a_cluster_plan_is_drawn_from_its_seed_and_keeps_the_random_plans_api_faults() {
    assert_eq!(FaultPlan::cluster(3), FaultPlan::cluster(3));
    let plans: Vec<FaultPlan> = (0..30).map(FaultPlan::cluster).collect();
    assert!(plans.windows(2).all(|w| w[0] != w[1]));
    for (seed, plan) in plans.iter().enumerate() {
        let api: Vec<&Step> = plan
            .steps()
            .iter()
            .filter(|s| !s.fault.is_cluster_fault())
            .collect();
        let random = FaultPlan::random(seed as u64);
        assert_eq!(
            api,
            random.steps().iter().collect::<Vec<_>>(),
            "seed {seed}"
        );
        let cluster = plan.steps().len() - api.len();
        assert!((2..=4).contains(&cluster), "seed {seed}: {plan}");
        assert!(plan.steps().windows(2).all(|w| w[0].at <= w[1].at));
        let for_good = plan
            .steps()
            .iter()
            .filter(|s| matches!(s.fault, Fault::NodeLost { down: None, .. }))
            .count();
        assert!(for_good <= 1, "{plan}");
        assert!(
            plan.to_string()
                .starts_with(&format!("cluster fault plan {seed}: at "))
        );
    }
    let shown: String = plans.iter().map(|p| p.to_string()).collect();
    for kind in [
        "lost for good",
        "lost for ",
        "drained, uncordoned after",
        "down for",
        "containers crash (exit",
        "image pulls fail for the next",
        "to start",
        "evicted",
    ] {
        assert!(shown.contains(kind), "{kind}");
    }
    // `random` draws what it drew before cluster faults existed.
    assert!(
        FaultPlan::random(3)
            .to_string()
            .starts_with("fault plan 3: at ")
    );
}

/// Six pods pinned to known nodes, the same in every environment.
async fn known_pods(env: &TestEnv) {
    let client = env.direct_client();
    for (i, node) in ["node-1", "node-2", "node-3", "node-1", "node-2", "node-3"]
        .iter()
        .enumerate()
    {
        pinned_pod(&client, &format!("pod-{i}"), node, "known").await;
    }
    until(Duration::from_secs(60), "6 ready pods", || async {
        ready(&client, "known").await.len() == 6
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_picks_the_same_nodes_and_pods() {
    // A seed whose plan picks pods and nodes.
    let seed = (0..100)
        .find(|s| {
            let plan = FaultPlan::cluster(*s);
            let kinds: BTreeSet<&str> = plan
                .steps()
                .iter()
                .filter_map(|s| match s.fault {
                    Fault::ContainerCrash { .. } | Fault::PodEvicted { .. } => Some("pod"),
                    Fault::NodeLost { .. } | Fault::NodeDrained { .. } => Some("node"),
                    _ => None,
                })
                .collect();
            kinds.len() == 2
        })
        .expect("such a seed");
    // Its cluster faults alone: the API faults pick nothing.
    let steps: Vec<Step> = FaultPlan::cluster(seed)
        .steps()
        .iter()
        .filter(|s| s.fault.is_cluster_fault())
        .cloned()
        .collect();
    let plan = FaultPlan::from_steps(steps);
    let mut picks = Vec::new();
    for _ in 0..2 {
        let env = cluster(3, &["zone-a", "zone-b", "zone-c"]).await;
        known_pods(&env).await;
        let happened = plan.run_on(&env).await;
        picks.push(
            happened
                .iter()
                .map(|h| (h.fault.clone(), h.picked.clone()))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(picks[0], picks[1], "{plan}");
    assert!(
        picks[0]
            .iter()
            .any(|(_, p)| p.iter().any(|p| p.starts_with("default/pod-"))),
        "{picks:?}"
    );
    assert!(
        picks[0]
            .iter()
            .any(|(_, p)| p.iter().any(|p| p.starts_with("node-"))),
        "{picks:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn cluster_faults_are_left_out_without_simulated_nodes() {
    let env = TestEnv::builder().in_process().bare().start().await;
    assert!(env.kubelets().is_none());
    let plan = one(
        Duration::ZERO,
        Fault::NodeLost {
            node: Pick::Seeded(1),
            down: None,
        },
    );
    let happened = plan.run_on(&env).await;
    assert_eq!(happened[0].outcome, "left out: no simulated nodes");
    assert!(happened[0].picked.is_empty());
}

/// `pods/log` is answered by the simulated kubelets in a test environment as under
/// `konverge up`, and still after the server restarts.
#[tokio::test(start_paused = true)]
async fn the_kubelets_answer_pod_logs_across_a_server_restart() {
    let env = cluster(1, &[]).await;
    let client = env.direct_client();
    pinned_pod(&client, "talker", "node-1", "talker").await;
    until(Duration::from_secs(30), "talker ready", || async {
        ready(&client, "talker").await.len() == 1
    })
    .await;
    let logs = |client: Client| async move {
        Api::<Pod>::namespaced(client, "default")
            .logs("talker", &kube::api::LogParams::default())
            .await
    };
    let before = logs(client.clone()).await.expect("the kubelet's log");
    assert!(
        !before.trim().is_empty(),
        "a running container printed something"
    );
    env.restart(Duration::from_secs(1))
        .await
        .expect("restarted");
    let client = env.direct_client();
    let after = logs(client)
        .await
        .expect("the kubelet's log after the restart");
    assert!(after.starts_with(&before), "{before:?} then {after:?}");
    // A container the pod does not have is the kubelet's 400, not an empty log.
    let missing = Api::<Pod>::namespaced(env.direct_client(), "default")
        .logs(
            "talker",
            &kube::api::LogParams {
                container: Some("nope".into()),
                ..Default::default()
            },
        )
        .await
        .expect_err("no such container");
    assert!(
        matches!(missing, kube::Error::Api(ref s) if s.code == 400),
        "{missing:?}"
    );
}
