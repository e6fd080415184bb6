//! The replicaset and replication controllers against an in-process API server, in paused
//! time: pods created and deleted to match `spec.replicas` with kcm's names, owner
//! references, events, status and deletion order; adoption and release; a ReplicaSet being
//! deleted left alone; and convergence under seeded fault plans.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::events::v1::Event;
use konverge_controllers::Clock;
use konverge_controllers::controller_ref::controller_of;
use konverge_testkit::{ChangeKind, Failure, FaultPlan, Rule, StatusCode, TestEnv, Verb, World};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::{Client, ResourceExt};
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(30);

fn replica_set(name: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "tier": "front"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }))
    .expect("a replicaset")
}

fn orphan(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
    }))
    .expect("a pod")
}

async fn scale<K>(api: &Api<K>, name: &str, replicas: i32)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .expect("scaled");
}

/// The pods `uid` controls that are not being deleted.
async fn controlled(pods: &Api<Pod>, uid: &str) -> Vec<Pod> {
    pods.list(&ListParams::default())
        .await
        .expect("pods are listed")
        .items
        .into_iter()
        .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits until `uid` controls `count` live pods, and returns them.
async fn wait_for_controlled(pods: &Api<Pod>, uid: &str, count: usize) -> Vec<Pod> {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let found = controlled(pods, uid).await;
        if found.len() == count {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{uid} controls {} pods, not {count}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `(reason, note)` of the events about `name`, once there is one of each of `reasons`.
/// (Repeats of a reason are folded into the first event's series, so only the first note
/// of each reason is kept.)
async fn events_about(client: &Client, name: &str, reasons: &[&str]) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let found: Vec<(String, String)> = events
            .list(&ListParams::default())
            .await
            .expect("events are listed")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect();
        if reasons
            .iter()
            .all(|r| found.iter().any(|(reason, _)| reason == r))
        {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events {reasons:?} about {name} expected; found {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a kubelet writes for a started pod, Ready (or not) since `since`.
async fn run_pod(pods: &Api<Pod>, name: &str, ready: bool, since: k8s_openapi::jiff::Timestamp) {
    let ready = if ready { "True" } else { "False" };
    let since = since.to_string();
    let status = json!({"status": {
        "phase": "Running",
        "conditions": [
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": since},
            {"type": "Ready", "status": ready, "lastTransitionTime": since},
        ],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the pod's status is written");
}

fn status_of(rs: &ReplicaSet) -> (i32, i32, i32, i32) {
    let s = rs.status.clone().unwrap_or_default();
    (
        s.replicas,
        s.fully_labeled_replicas.unwrap_or(0),
        s.ready_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0),
    )
}

fn observed(rs: &ReplicaSet) -> bool {
    rs.status.as_ref().and_then(|s| s.observed_generation) == rs.metadata.generation
}

#[tokio::test(start_paused = true)]
async fn scales_up_from_zero_with_owned_pods_events_and_status() {
    let (env, _running) = support::cluster("replicaset-controller").await;
    let sets: Api<ReplicaSet> = Api::namespaced(env.client(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    sets.create(&PostParams::default(), &replica_set("web", 0))
        .await
        .expect("created");
    let rs = support::wait_for(&sets, "web", WITHIN, observed).await;
    assert_eq!(status_of(&rs), (0, 0, 0, 0));
    assert_eq!(rs.status.as_ref().and_then(|s| s.conditions.clone()), None);

    scale(&sets, "web", 3).await;
    let rs = support::wait_for(&sets, "web", WITHIN, |rs| {
        observed(rs) && status_of(rs).0 == 3
    })
    .await;
    assert_eq!(status_of(&rs), (3, 3, 0, 0));
    let uid = rs.uid().expect("a uid");
    let created = wait_for_controlled(&pods, &uid, 3).await;
    let alphabet = "bcdfghjklmnpqrstvwxz2456789";
    for pod in &created {
        let name = pod.name_any();
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        assert!(name[4..].chars().all(|c| alphabet.contains(c)), "{name}");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
        let owner = controller_of(&pod.metadata).expect("a controller");
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str()
            ),
            ("apps/v1", "ReplicaSet", "web")
        );
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert_eq!(pod.labels().get("tier").map(String::as_str), Some("front"));
    }
    assert_eq!(env.requests().count(Verb::Create, "pods"), 3);

    let events = events_about(&env.client(), "web", &["SuccessfulCreate"]).await;
    let expected: Vec<String> = created
        .iter()
        .map(|p| format!("Created pod: {}", p.name_any()))
        .collect();
    for (reason, note) in &events {
        assert_eq!(reason, "SuccessfulCreate");
        assert!(expected.contains(note), "{note} names none of {expected:?}");
    }

    // kcm's role for the controller is all it needed.
    env.permissions("kube-system", "replicaset-controller")
        .await
        .assert_no_denials();

    // Converged: another look writes nothing.
    env.requests().reset();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(env.requests().writes(), 0, "{:?}", env.requests());
}

#[tokio::test(start_paused = true)]
async fn scaling_down_deletes_the_pods_kcm_picks() {
    let (env, _running) = support::cluster("replicaset-controller").await;
    let clock = Clock::tokio();
    let sets: Api<ReplicaSet> = Api::namespaced(env.client(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let rs = sets
        .create(&PostParams::default(), &replica_set("web", 4))
        .await
        .expect("created");
    let uid = rs.uid().expect("a uid");
    let mut started = wait_for_controlled(&pods, &uid, 4).await;
    started.sort_by_key(|p| p.name_any());
    let now = clock.now();
    let minute = k8s_openapi::jiff::SignedDuration::from_secs(60);
    let hour = k8s_openapi::jiff::SignedDuration::from_secs(3600);
    // One not ready, one ready a minute, two ready an hour.
    let not_ready = started[0].name_any();
    let recent = started[1].name_any();
    run_pod(&pods, &not_ready, false, now).await;
    run_pod(&pods, &recent, true, now - minute).await;
    run_pod(&pods, &started[2].name_any(), true, now - hour).await;
    run_pod(&pods, &started[3].name_any(), true, now - hour).await;
    support::wait_for(&sets, "web", WITHIN, |rs| status_of(rs).2 == 3).await;

    scale(&sets, "web", 3).await;
    let left = wait_for_controlled(&pods, &uid, 3).await;
    assert!(
        left.iter().all(|p| p.name_any() != not_ready),
        "the not ready pod goes first"
    );
    scale(&sets, "web", 2).await;
    let left = wait_for_controlled(&pods, &uid, 2).await;
    assert!(
        left.iter().all(|p| p.name_any() != recent),
        "then the one ready for less time"
    );

    let rs = support::wait_for(&sets, "web", WITHIN, |rs| {
        observed(rs) && status_of(rs).0 == 2
    })
    .await;
    assert_eq!(status_of(&rs), (2, 2, 2, 2));
    let events = events_about(&env.client(), "web", &["SuccessfulDelete"]).await;
    let first_delete = format!("Deleted pod: {not_ready}");
    assert!(
        events.contains(&("SuccessfulDelete".to_string(), first_delete)),
        "{events:?}"
    );
    assert_eq!(env.requests().count(Verb::Delete, "pods"), 2);
}

#[tokio::test(start_paused = true)]
async fn adopts_matching_orphans_and_releases_relabelled_pods() {
    let (env, _running) = support::cluster("replicaset-controller").await;
    let sets: Api<ReplicaSet> = Api::namespaced(env.client(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    // Orphans: one with the template's labels, one with only the selector's, one not matching.
    for (name, labels) in [
        ("full", json!({"app": "web", "tier": "front"})),
        ("partial", json!({"app": "web"})),
        ("stranger", json!({"app": "other"})),
    ] {
        pods.create(&PostParams::default(), &orphan(name, labels))
            .await
            .expect("created");
    }
    let rs = sets
        .create(&PostParams::default(), &replica_set("web", 3))
        .await
        .expect("created");
    let uid = rs.uid().expect("a uid");
    let owned = wait_for_controlled(&pods, &uid, 3).await;
    let names: BTreeSet<String> = owned.iter().map(|p| p.name_any()).collect();
    assert!(
        names.contains("full") && names.contains("partial"),
        "{names:?}"
    );
    assert_eq!(
        env.requests().count(Verb::Create, "pods"),
        4,
        "3 orphans and 1 new pod"
    );
    let stranger = pods.get("stranger").await.expect("there");
    assert!(controller_of(&stranger.metadata).is_none());
    let rs = support::wait_for(&sets, "web", WITHIN, |rs| status_of(rs).0 == 3).await;
    assert_eq!(
        status_of(&rs).1,
        2,
        "the partially labelled pod is not fully labelled"
    );

    // A pod relabelled out of the selector is released, and replaced.
    pods.patch(
        "full",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
    )
    .await
    .expect("relabelled");
    let owned = wait_for_controlled(&pods, &uid, 3).await;
    assert!(owned.iter().all(|p| p.name_any() != "full"));
    let released = support::wait_for(&pods, "full", WITHIN, |p| {
        controller_of(&p.metadata).is_none()
    })
    .await;
    assert!(released.owner_references().is_empty());
    assert_eq!(env.requests().count(Verb::Create, "pods"), 5);
}

#[tokio::test(start_paused = true)]
async fn status_follows_readiness_and_min_ready_seconds() {
    let (env, _running) = support::cluster("replicaset-controller").await;
    let clock = Clock::tokio();
    let sets: Api<ReplicaSet> = Api::namespaced(env.client(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let mut rs = replica_set("web", 2);
    rs.spec.as_mut().expect("spec").min_ready_seconds = Some(30);
    let rs = sets
        .create(&PostParams::default(), &rs)
        .await
        .expect("created");
    let uid = rs.uid().expect("a uid");
    let started = wait_for_controlled(&pods, &uid, 2).await;
    for pod in &started {
        run_pod(&pods, &pod.name_any(), false, clock.now()).await;
    }
    let rs = support::wait_for(&sets, "web", WITHIN, |rs| status_of(rs).0 == 2).await;
    assert_eq!(status_of(&rs), (2, 2, 0, 0));

    let ready_at = clock.now();
    for pod in &started {
        run_pod(&pods, &pod.name_any(), true, ready_at).await;
    }
    let rs = support::wait_for(&sets, "web", WITHIN, |rs| status_of(rs).2 == 2).await;
    assert_eq!(status_of(&rs), (2, 2, 2, 0), "ready, not yet available");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(status_of(&sets.get("web").await.expect("there")).3, 0);
    // Nothing changes in the cluster now: the controller looks again by itself.
    let rs = support::wait_for(&sets, "web", Duration::from_secs(20), |rs| {
        status_of(rs).3 == 2
    })
    .await;
    assert_eq!(status_of(&rs), (2, 2, 2, 2));
    let waited = clock.now().duration_since(ready_at).as_secs();
    assert!((30..=33).contains(&waited), "available after {waited} s");
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_is_replaced() {
    let (env, _running) = support::cluster("replicaset-controller").await;
    let sets: Api<ReplicaSet> = Api::namespaced(env.client(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let rs = sets
        .create(&PostParams::default(), &replica_set("web", 2))
        .await
        .expect("created");
    let uid = rs.uid().expect("a uid");
    let first = wait_for_controlled(&pods, &uid, 2).await;
    let victim = first[0].name_any();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .expect("deleted");
    let deadline = tokio::time::Instant::now() + WITHIN;
    let now = loop {
        let now = controlled(&pods, &uid).await;
        if now.len() == 2 && now.iter().all(|p| p.name_any() != victim) {
            break now;
        }
        assert!(tokio::time::Instant::now() < deadline, "no replacement");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(now.iter().any(|p| p.name_any() == first[1].name_any()));
    assert_eq!(env.requests().count(Verb::Create, "pods"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_status_written_by_someone_else_is_put_right() {
    let (env, _running) = support::cluster("replicaset-controller").await;
    let sets: Api<ReplicaSet> = Api::namespaced(env.client(), "default");
    sets.create(&PostParams::default(), &replica_set("web", 2))
        .await
        .expect("created");
    support::wait_for(&sets, "web", WITHIN, |rs| {
        observed(rs) && status_of(rs).0 == 2
    })
    .await;
    sets.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"replicas": 99, "readyReplicas": 7}})),
    )
    .await
    .expect("status written");
    let rs = support::wait_for(&sets, "web", WITHIN, |rs| status_of(rs).0 == 2).await;
    assert_eq!(status_of(&rs), (2, 2, 0, 0));
    assert_eq!(env.requests().count(Verb::Create, "pods"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_replication_controller_works_the_same() {
    let (env, _running) = support::cluster("replicationcontroller").await;
    let rcs: Api<ReplicationController> = Api::namespaced(env.client(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "legacy", "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"app": "legacy"},
            "template": {
                "metadata": {"labels": {"app": "legacy"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }))
    .expect("an rc");
    let rc = rcs
        .create(&PostParams::default(), &rc)
        .await
        .expect("created");
    let uid = rc.uid().expect("a uid");
    let created = wait_for_controlled(&pods, &uid, 3).await;
    for pod in &created {
        let owner = controller_of(&pod.metadata).expect("a controller");
        assert_eq!(
            (owner.api_version.as_str(), owner.kind.as_str()),
            ("v1", "ReplicationController")
        );
        assert!(pod.name_any().starts_with("legacy-"));
    }
    let rc = support::wait_for(&rcs, "legacy", WITHIN, |rc| {
        rc.status.as_ref().is_some_and(|s| s.replicas == 3)
    })
    .await;
    let status = rc.status.expect("a status");
    assert_eq!(status.fully_labeled_replicas, Some(3));
    assert_eq!(status.observed_generation, rc.metadata.generation);

    let recent = created[0].name_any();
    for pod in &created[1..] {
        support::set_pod_running(&pods, &pod.name_any(), true).await;
    }
    scale(&rcs, "legacy", 2).await;
    let left = wait_for_controlled(&pods, &uid, 2).await;
    assert!(
        left.iter().all(|p| p.name_any() != recent),
        "the pending pod goes first"
    );
    let events = events_about(
        &env.client(),
        "legacy",
        &["SuccessfulCreate", "SuccessfulDelete"],
    )
    .await;
    assert!(events.contains(&(
        "SuccessfulDelete".to_string(),
        format!("Deleted pod: {recent}")
    )));
}

#[tokio::test(start_paused = true)]
async fn failed_creates_set_replica_failure_until_they_succeed() {
    let (env, _running) = support::cluster("replicaset-controller").await;
    let sets: Api<ReplicaSet> = Api::namespaced(env.client(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let quota = "exceeded quota: compute, requested: pods=1, used: pods=10, limited: pods=10";
    env.faults().fail(
        Rule::new().verb(Verb::Create).resource("pods"),
        Failure::new(StatusCode::FORBIDDEN, "Forbidden").message(quota),
        2,
    );
    // Watched from before the create: the condition stays only until a sync succeeds, a
    // few milliseconds later, too short a time for polling to be sure to see it.
    let mut versions = kube::runtime::watcher(
        sets.clone(),
        kube::runtime::watcher::Config::default().fields("metadata.name=web"),
    )
    .applied_objects()
    .boxed();
    let rs = sets
        .create(&PostParams::default(), &replica_set("web", 4))
        .await
        .expect("created");
    let failed = tokio::time::timeout(WITHIN, async {
        loop {
            let rs = versions
                .try_next()
                .await
                .expect("watching")
                .expect("the watch goes on");
            let conditions = rs.status.as_ref().and_then(|s| s.conditions.as_ref());
            if conditions.is_some_and(|c| !c.is_empty()) {
                return rs;
            }
        }
    })
    .await
    .expect("a status with a condition");
    let condition = &failed
        .status
        .expect("a status")
        .conditions
        .expect("conditions")[0];
    assert_eq!(condition.type_, "ReplicaFailure");
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason.as_deref(), Some("FailedCreate"));
    assert_eq!(condition.message.as_deref(), Some(quota));

    // Once creating works again, every pod is made and the condition goes.
    let uid = rs.uid().expect("a uid");
    wait_for_controlled(&pods, &uid, 4).await;
    let rs = support::wait_for(&sets, "web", WITHIN, |rs| {
        status_of(rs).0 == 4 && rs.status.as_ref().is_some_and(|s| s.conditions.is_none())
    })
    .await;
    assert!(observed(&rs));
    // Slow start: each failed sync tried one pod, so 2 refused and 4 made.
    assert_eq!(env.requests().count(Verb::Create, "pods"), 6);
    let events = events_about(&env.client(), "web", &["FailedCreate", "SuccessfulCreate"]).await;
    let failed = (
        "FailedCreate".to_string(),
        format!("Error creating: {quota}"),
    );
    assert!(events.contains(&failed), "{events:?}");
}

#[tokio::test(start_paused = true)]
async fn the_pods_of_a_replica_set_being_deleted_are_left_alone() {
    let (env, _running) = support::cluster("replicaset-controller").await;
    let sets: Api<ReplicaSet> = Api::namespaced(env.client(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let mut rs = replica_set("web", 2);
    rs.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let rs = sets
        .create(&PostParams::default(), &rs)
        .await
        .expect("created");
    let uid = rs.uid().expect("a uid");
    let first = wait_for_controlled(&pods, &uid, 2).await;
    sets.delete("web", &DeleteParams::default())
        .await
        .expect("deleting");
    support::wait_for(&sets, "web", WITHIN, |rs| {
        rs.metadata.deletion_timestamp.is_some()
    })
    .await;
    pods.delete(&first[0].name_any(), &DeleteParams::default())
        .await
        .expect("deleted");
    pods.create(
        &PostParams::default(),
        &orphan("orphan", json!({"app": "web", "tier": "front"})),
    )
    .await
    .expect("created");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(controlled(&pods, &uid).await.len(), 1, "no replacement");
    let orphan = pods.get("orphan").await.expect("there");
    assert!(controller_of(&orphan.metadata).is_none(), "no adoption");
    assert_eq!(env.requests().count(Verb::Create, "pods"), 3);
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("released");
}

/// Every pod the ReplicaSet `web` of `world` controls is live, there are `count`, and its
/// status says so for its current generation.
fn converged(world: &World, count: usize) -> Result<(), String> {
    let rs: ReplicaSet = world.get_as("default", "web").ok_or("no replicaset")?;
    let uid = rs.uid().unwrap_or_default();
    let pods = world
        .list("pods")
        .filter_map(|(_, v)| serde_json::from_value::<Pod>(v.clone()).ok())
        .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count();
    if pods != count {
        return Err(format!("{pods} pods, want {count}"));
    }
    if !observed(&rs) || status_of(&rs).0 != i32::try_from(count).unwrap_or(0) {
        return Err(format!("status {:?}", rs.status));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_extra_pods() {
    for seed in 1..=10 {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env
            .invariants()
            .watch::<ReplicaSet>()
            .watch::<Pod>()
            .start()
            .await;
        let running = support::controllers(&env, "replicaset-controller").await;
        let faults = plan.spawn(&env.faults());
        let sets: Api<ReplicaSet> = Api::namespaced(env.direct_client(), "default");
        sets.create(&PostParams::default(), &replica_set("web", 3))
            .await
            .expect("created");
        tokio::time::sleep(Duration::from_millis(600)).await;
        scale(&sets, "web", 5).await;
        faults.await.expect("the plan ran");

        // The requests of the controller (and the test), watches left out, for a report.
        let log = || -> Vec<String> {
            env.requests()
                .records()
                .iter()
                .filter(|r| r.request.verb != Some(Verb::Watch))
                .map(|r| r.to_string())
                .collect()
        };
        check
            .converges(Duration::from_secs(60), |world| converged(world, 5))
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}\n{:#?}", log()));
        // Exactly the pods needed were ever made: no create was repeated.
        let made: BTreeSet<String> = check
            .history()
            .iter()
            .filter(|c| c.object.resource == "pods" && c.kind == ChangeKind::Added)
            .map(|c| c.object.name.clone())
            .collect();
        assert_eq!(made.len(), 5, "{plan}: {made:?}\n{:#?}", log());
        let answered = env
            .requests()
            .records()
            .iter()
            .filter(|r| r.request.verb == Some(Verb::Create) && r.status.is_success())
            .filter(|r| r.request.resource.as_deref() == Some("pods"))
            .count();
        assert!(answered <= 5, "{plan}: {answered} pod creates succeeded");
        check
            .no_hot_loop(12)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .idempotent(Duration::from_secs(30), async {
                running.stop().await.expect("stopped");
                support::controllers(&env, "replicaset-controller").await
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
