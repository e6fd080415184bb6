//! The disruption controller: PodDisruptionBudget status as kcm computes it.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konverge_testkit::{FaultPlan, TestEnv};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const NS: &str = "default";

async fn replica_set(client: &Client, name: &str, replicas: i32) -> ReplicaSet {
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }))
    .expect("a replica set");
    Api::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &rs)
        .await
        .expect("the replica set is created")
}

/// A pod of `owner` (or of no one), as its controller would have made it.
async fn pod(client: &Client, name: &str, app: &str, owner: Option<(&str, &str, &str)>) {
    let owners: Value = match owner {
        Some((kind, name, uid)) => json!([{
            "apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true,
        }]),
        None => json!([]),
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}, "ownerReferences": owners},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }))
    .expect("a pod");
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
}

async fn pdb(client: &Client, name: &str, app: &str, budget: Value) -> Api<PodDisruptionBudget> {
    let mut spec = json!({"selector": {"matchLabels": {"app": app}}});
    if let (Some(spec), Some(budget)) = (spec.as_object_mut(), budget.as_object()) {
        spec.extend(budget.clone());
    }
    let pdb: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("a pdb");
    let api = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &pdb)
        .await
        .expect("the pdb is created");
    api
}

/// `(expectedPods, desiredHealthy, currentHealthy, disruptionsAllowed)`.
fn numbers(pdb: &PodDisruptionBudget) -> (i32, i32, i32, i32) {
    let s = pdb.status.clone().unwrap_or_default();
    (
        s.expected_pods,
        s.desired_healthy,
        s.current_healthy,
        s.disruptions_allowed,
    )
}

/// The DisruptionAllowed condition's status and reason.
fn allowed(pdb: &PodDisruptionBudget) -> Option<(String, String, String)> {
    let c = pdb
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionAllowed")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

const WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(start_paused = true)]
async fn status_counts_the_ready_pods_of_a_replica_set() {
    let (env, _running) = support::cluster("disruption").await;
    let client = env.client();
    let rs = replica_set(&client, "web", 4).await;
    let uid = rs.uid().expect("a uid");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..4 {
        pod(
            &client,
            &format!("web-{i}"),
            "web",
            Some(("ReplicaSet", "web", &uid)),
        )
        .await;
        support::set_pod_running(&pods, &format!("web-{i}"), i < 3).await;
    }
    let pdbs = pdb(&client, "web", "web", json!({"maxUnavailable": 1})).await;
    let seen = support::wait_for(&pdbs, "web", WITHIN, |p| numbers(p) == (4, 3, 3, 0)).await;
    assert_eq!(
        allowed(&seen),
        Some(("False".into(), "InsufficientPods".into(), String::new()))
    );
    assert_eq!(
        seen.status.as_ref().and_then(|s| s.observed_generation),
        seen.metadata.generation
    );

    // The fourth pod becomes Ready: one disruption is allowed.
    support::set_pod_running(&pods, "web-3", true).await;
    let seen = support::wait_for(&pdbs, "web", WITHIN, |p| numbers(p) == (4, 3, 4, 1)).await;
    assert_eq!(
        allowed(&seen).map(|a| (a.0, a.1)),
        Some(("True".into(), "SufficientPods".into()))
    );

    // The ReplicaSet scales to 6: the budget follows its scale.
    Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 6}})),
        )
        .await
        .expect("scaled");
    support::wait_for(&pdbs, "web", WITHIN, |p| numbers(p) == (6, 5, 4, 0)).await;

    // A percentage minAvailable is taken of the scale, rounded up.
    pdb(&client, "half", "web", json!({"minAvailable": "50%"})).await;
    support::wait_for(&pdbs, "half", WITHIN, |p| numbers(p) == (6, 3, 4, 1)).await;

    // An integer minAvailable counts the pods themselves.
    pdb(&client, "two", "web", json!({"minAvailable": 2})).await;
    support::wait_for(&pdbs, "two", WITHIN, |p| numbers(p) == (4, 2, 4, 2)).await;

    // A pod being deleted is not healthy.
    pods.delete("web-0", &Default::default())
        .await
        .expect("deleted");
    support::wait_for(&pdbs, "two", WITHIN, |p| numbers(p).2 == 3).await;
}

#[tokio::test(start_paused = true)]
async fn a_pod_without_a_known_controller_fails_safe() {
    let (env, _running) = support::cluster("disruption-controller").await;
    let client = env.client();
    // Owned by a DaemonSet, which has no scale: kcm's last finder (any owner's `scale`)
    // fails, in the words a cluster shows for it.
    let daemon_set: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "stray"},
        "spec": {
            "selector": {"matchLabels": {"ds": "stray"}},
            "template": {
                "metadata": {"labels": {"ds": "stray"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }))
    .expect("a DaemonSet");
    let daemon_set = Api::<DaemonSet>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &daemon_set)
        .await
        .expect("the DaemonSet is created");
    let uid = daemon_set.uid().expect("a uid");
    pod(
        &client,
        "stray",
        "stray",
        Some(("DaemonSet", "stray", &uid)),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    support::set_pod_running(&pods, "stray", true).await;
    let pdbs = pdb(&client, "stray", "stray", json!({"maxUnavailable": "10%"})).await;
    let seen = support::wait_for(&pdbs, "stray", WITHIN, |p| allowed(p).is_some()).await;
    assert_eq!(
        allowed(&seen),
        Some((
            "False".into(),
            "SyncFailed".into(),
            "daemonsets.apps does not implement the scale subresource".into()
        ))
    );
    assert_eq!(numbers(&seen).3, 0);

    // Unmanaged pods with an integer minAvailable are fine.
    pod(&client, "lone", "lone", None).await;
    support::set_pod_running(&pods, "lone", true).await;
    pdb(&client, "lone", "lone", json!({"minAvailable": 0})).await;
    let seen = support::wait_for(&pdbs, "lone", WITHIN, |p| numbers(p) == (1, 0, 1, 1)).await;
    assert_eq!(allowed(&seen).map(|a| a.1), Some("SufficientPods".into()));
}

#[tokio::test(start_paused = true)]
async fn disrupted_pods_expire_after_two_minutes() {
    let (env, _running) = support::cluster("disruption").await;
    let client = env.client();
    let rs = replica_set(&client, "db", 2).await;
    let uid = rs.uid().expect("a uid");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..2 {
        pod(
            &client,
            &format!("db-{i}"),
            "db",
            Some(("ReplicaSet", "db", &uid)),
        )
        .await;
        support::set_pod_running(&pods, &format!("db-{i}"), true).await;
    }
    let pdbs = pdb(&client, "db", "db", json!({"minAvailable": 1})).await;
    let seen = support::wait_for(&pdbs, "db", WITHIN, |p| numbers(p) == (2, 1, 2, 1)).await;

    // What the eviction API writes when it lets db-0 go.
    let mut evicted = seen.clone();
    let now = k8s_openapi::jiff::Timestamp::now();
    let status = evicted.status.as_mut().expect("a status");
    status.disruptions_allowed = 0;
    status.disrupted_pods = Some(
        [(
            "db-0".to_string(),
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        )]
        .into(),
    );
    pdbs.replace_status("db", &PostParams::default(), &evicted)
        .await
        .expect("written");
    let seen = support::wait_for(&pdbs, "db", WITHIN, |p| numbers(p) == (2, 1, 1, 0)).await;
    assert!(
        seen.status
            .as_ref()
            .and_then(|s| s.disrupted_pods.as_ref())
            .is_some_and(|d| d.contains_key("db-0"))
    );

    // db-0 was never deleted: two minutes on, the entry is gone and db-0 counts again.
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_eq!(numbers(&pdbs.get("db").await.expect("the pdb")).2, 1);
    let seen = support::wait_for(&pdbs, "db", Duration::from_secs(60), |p| {
        numbers(p) == (2, 1, 2, 1)
    })
    .await;
    assert!(
        seen.status
            .as_ref()
            .and_then(|s| s.disrupted_pods.as_ref())
            .is_none_or(|d| d.is_empty())
    );
}

#[tokio::test(start_paused = true)]
async fn a_stale_disruption_target_condition_is_reset() {
    let (env, _running) = support::cluster("disruption").await;
    let client = env.client();
    pod(&client, "victim", "victim", None).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    support::set_pod_running(&pods, "victim", true).await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting", "lastTransitionTime": now,
    }]}});
    pods.patch_status(
        "victim",
        &PatchParams::default(),
        &Patch::Strategic(condition),
    )
    .await
    .expect("patched");
    let target = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
            .map(|c| c.status.clone())
    };
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert_eq!(
        target(&pods.get("victim").await.expect("the pod")).as_deref(),
        Some("True")
    );
    support::wait_for(&pods, "victim", Duration::from_secs(60), |p| {
        target(p).as_deref() == Some("False")
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_a_hot_loop() {
    for seed in 1..=3 {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env
            .invariants()
            .watch::<PodDisruptionBudget>()
            .start()
            .await;
        let _running = support::controllers(&env, "disruption").await;
        let direct = env.direct_client();
        let pods: Api<Pod> = Api::namespaced(direct.clone(), NS);
        for i in 0..3 {
            pod(&direct, &format!("api-{i}"), "api", None).await;
            support::set_pod_running(&pods, &format!("api-{i}"), true).await;
        }
        let faults = plan.spawn(&env.faults());
        pdb(&direct, "api", "api", json!({"minAvailable": 1})).await;
        faults.await.expect("the plan ran");
        check
            .converges(Duration::from_secs(60), |world| {
                let pdb: PodDisruptionBudget = world
                    .get_as(NS, "api")
                    .ok_or_else(|| "no pdb".to_string())?;
                if numbers(&pdb) == (3, 1, 3, 2) {
                    Ok(())
                } else {
                    Err(format!("status {:?}", pdb.status))
                }
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(8)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}

#[tokio::test(start_paused = true)]
async fn any_owner_with_a_scale_subresource_is_counted() {
    let (env, _running) = support::cluster("disruption-controller").await;
    let client = env.client();
    // A custom resource with `scale`: kcm's last finder reads its replicas there.
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "pools.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Pool", "plural": "pools", "singular": "pool", "listKind": "PoolList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                }},
            }],
        },
    }))
    .expect("a CRD");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("the CRD is created");
    let resource = kube::discovery::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Pool".into(),
        plural: "pools".into(),
    };
    let pools: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
    let pool: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Pool",
        "metadata": {"name": "pool"},
        "spec": {"replicas": 4},
    }))
    .expect("a pool");
    // Served once the definition is established.
    let mut attempts = 0;
    let pool = loop {
        match pools.create(&PostParams::default(), &pool).await {
            Ok(created) => break created,
            Err(kube::Error::Api(status)) if status.code == 404 && attempts < 100 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the pool is not created: {e}"),
        }
    };
    let uid = pool.uid().expect("a uid");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for name in ["pool-a", "pool-b"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "pool"}, "ownerReferences": [{
                "apiVersion": "example.com/v1", "kind": "Pool", "name": "pool", "uid": uid,
                "controller": true,
            }]},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }))
        .expect("a pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("the pod is created");
        support::set_pod_running(&pods, name, true).await;
    }
    let pdbs = pdb(&client, "pool", "pool", json!({"maxUnavailable": 1})).await;
    let seen = support::wait_for(&pdbs, "pool", WITHIN, |p| numbers(p) == (4, 3, 2, 0)).await;
    assert_eq!(allowed(&seen).map(|a| a.1), Some("InsufficientPods".into()));
}
