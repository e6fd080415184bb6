//! kcm's deployment controller, end to end against an in-process API server in paused
//! time. The tests play the ReplicaSet controller and the kubelets: they write each
//! ReplicaSet's status as its pods would make it (`settle`), so every step of a rollout can
//! be checked against maxSurge and maxUnavailable.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use konverge_testkit::FaultPlan;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(30);

fn deployment(name: &str, replicas: i32, strategy: Value, extra: Value) -> Deployment {
    let mut value = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}]},
            },
        },
    });
    merge(&mut value, extra);
    serde_json::from_value(value).expect("a deployment")
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

fn apis(client: &Client) -> (Api<Deployment>, Api<ReplicaSet>) {
    (
        Api::namespaced(client.clone(), NS),
        Api::namespaced(client.clone(), NS),
    )
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

fn annotation<'a>(obj: &'a impl ResourceExt, key: &str) -> Option<&'a str> {
    obj.annotations().get(key).map(String::as_str)
}

fn image(rs: &ReplicaSet) -> String {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.containers[0].image.clone())
        .unwrap_or_default()
}

fn condition<'a>(d: &'a Deployment, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let c = d
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((
        c.status.as_str(),
        c.reason.as_deref().unwrap_or(""),
        c.message.as_deref().unwrap_or(""),
    ))
}

/// The ReplicaSets of the Deployment `name`, oldest revision first.
async fn sets(api: &Api<ReplicaSet>, name: &str) -> Vec<ReplicaSet> {
    let mut sets = api
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .expect("replica sets are listed")
        .items;
    sets.sort_by_key(|rs| {
        annotation(rs, "deployment.kubernetes.io/revision").and_then(|r| r.parse::<i64>().ok())
    });
    sets
}

/// Writes each ReplicaSet's status as its pods would make it: as many pods as it wants,
/// all ready and available (or none ready).
async fn settle(api: &Api<ReplicaSet>, ready: bool) {
    let list = api
        .list(&ListParams::default())
        .await
        .expect("replica sets are listed");
    for rs in list.items {
        let want = replicas(&rs);
        let up = if ready { want } else { 0 };
        let status = json!({"status": {
            "replicas": want,
            "fullyLabeledReplicas": want,
            "readyReplicas": up,
            "availableReplicas": up,
            "observedGeneration": rs.metadata.generation,
        }});
        let current = rs.status.clone().unwrap_or_default();
        let same = current.replicas == want
            && current.ready_replicas.unwrap_or(0) == up
            && current.available_replicas.unwrap_or(0) == up
            && current.observed_generation == rs.metadata.generation;
        if !same {
            // A ReplicaSet deleted meanwhile is fine.
            let _ = api
                .patch_status(
                    &rs.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(status),
                )
                .await;
        }
    }
}

/// Whether the rollout is done as kcm says it: the newest generation observed, every
/// replica updated and available, Progressing `NewReplicaSetAvailable`.
fn complete(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(status) = d.status.as_ref() else {
        return false;
    };
    status.observed_generation == d.metadata.generation
        && status.updated_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
        && condition(d, "Progressing").map(|c| c.1) == Some("NewReplicaSetAvailable")
}

/// Plays the ReplicaSets' pods until the rollout of `name` completes.
async fn drive(client: &Client, name: &str) -> Deployment {
    let (deployments, replica_sets) = apis(client);
    for _ in 0..100 {
        settle(&replica_sets, true).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let d = deployments.get(name).await.expect("the deployment");
        if complete(&d) {
            return d;
        }
    }
    panic!("{name} never completed: {:#?}", deployments.get(name).await);
}

async fn set_image(api: &Api<Deployment>, name: &str, image: &str) {
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("the image is set");
}

async fn events(client: &Client, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .expect("events are listed")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

async fn wait_for_event(client: &Client, reason: &str, message: &str) {
    for _ in 0..100 {
        if events(client, reason).await.iter().any(|m| m == message) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no {reason} event {message:?}: {:?}",
        events(client, reason).await
    );
}

#[tokio::test(start_paused = true)]
async fn creates_a_replica_set_named_by_the_template_hash() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let extra = json!({"metadata": {"annotations": {
        "team": "shop",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    }}});
    let d = deployment("web", 3, rolling(json!("25%"), json!("25%")), extra);
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");

    let rs = support::wait_for_list(&replica_sets, "app=web", WAIT, |l| l.len() == 1).await;
    let rs = &rs[0];
    let hash = rs.labels()["pod-template-hash"].clone();
    assert_eq!(rs.name_any(), format!("web-{hash}"));
    assert!(hash.chars().all(|c| "456789bcdf".contains(c)), "{hash}");
    let spec = rs.spec.as_ref().expect("a spec");
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(
        spec.selector
            .match_labels
            .as_ref()
            .and_then(|m| m.get("pod-template-hash")),
        Some(&hash)
    );
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone());
    assert_eq!(
        template_labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash")),
        Some(&hash)
    );
    assert_eq!(
        annotation(rs, "deployment.kubernetes.io/revision"),
        Some("1")
    );
    assert_eq!(
        annotation(rs, "deployment.kubernetes.io/desired-replicas"),
        Some("3")
    );
    assert_eq!(
        annotation(rs, "deployment.kubernetes.io/max-replicas"),
        Some("4")
    );
    assert_eq!(annotation(rs, "team"), Some("shop"));
    assert_eq!(
        annotation(rs, "kubectl.kubernetes.io/last-applied-configuration"),
        None
    );
    let owner = &rs.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Deployment", "web", Some(true))
    );

    let d = support::wait_for(&deployments, "web", WAIT, |d| {
        condition(d, "Progressing").map(|c| c.1) == Some("NewReplicaSetCreated")
    })
    .await;
    assert_eq!(
        condition(&d, "Progressing"),
        Some((
            "True",
            "NewReplicaSetCreated",
            format!("Created new replica set \"web-{hash}\"").as_str()
        ))
    );
    assert_eq!(
        annotation(&d, "deployment.kubernetes.io/revision"),
        Some("1")
    );
    wait_for_event(
        &client,
        "ScalingReplicaSet",
        &format!("Scaled up replica set web-{hash} from 0 to 3"),
    )
    .await;

    let d = drive(&client, "web").await;
    let status = d.status.clone().expect("a status");
    assert_eq!(status.observed_generation, d.metadata.generation);
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.ready_replicas,
            status.available_replicas,
            status.unavailable_replicas
        ),
        (Some(3), Some(3), Some(3), Some(3), None)
    );
    assert_eq!(
        condition(&d, "Available"),
        Some((
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability."
        ))
    );
    assert_eq!(
        condition(&d, "Progressing"),
        Some((
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"web-{hash}\" has successfully progressed.").as_str()
        ))
    );
}

#[tokio::test(start_paused = true)]
async fn scaling_resizes_the_replica_set() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let d = deployment("web", 3, rolling(json!("25%"), json!("25%")), json!({}));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    drive(&client, "web").await;
    let name = sets(&replica_sets, "web").await[0].name_any();

    let scale = |n: i32| json!({"spec": {"replicas": n}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(scale(5)))
        .await
        .expect("scaled");
    let rs = support::wait_for(&replica_sets, &name, WAIT, |rs| replicas(rs) == 5).await;
    assert_eq!(
        annotation(&rs, "deployment.kubernetes.io/desired-replicas"),
        Some("5")
    );
    assert_eq!(
        annotation(&rs, "deployment.kubernetes.io/max-replicas"),
        Some("7")
    );
    // The scale's `ScalingReplicaSet` event ("Scaled up replica set ... from 3 to 5") is
    // recorded, but the shared recorder folds events of one reason about one object into a
    // series of the first, whose message stays "from 0 to 3": not checked here.
    let d = drive(&client, "web").await;
    assert_eq!(
        d.status.as_ref().and_then(|s| s.available_replicas),
        Some(5)
    );

    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(scale(1)))
        .await
        .expect("scaled");
    support::wait_for(&replica_sets, &name, WAIT, |rs| replicas(rs) == 1).await;
    let d = drive(&client, "web").await;
    assert_eq!(d.status.as_ref().and_then(|s| s.replicas), Some(1));
    assert_eq!(
        sets(&replica_sets, "web").await.len(),
        1,
        "a scale makes no new replica set"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rolling_update_stays_within_max_surge_and_max_unavailable() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let d = deployment("web", 4, rolling(json!(1), json!(1)), json!({}));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    drive(&client, "web").await;
    set_image(&deployments, "web", "nginx:2").await;

    let mut steps = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let all = sets(&replica_sets, "web").await;
        let total: i32 = all.iter().map(replicas).sum();
        let still_available: i32 = all.iter().map(|rs| replicas(rs).min(available(rs))).sum();
        assert!(
            total <= 4 + 1,
            "maxSurge exceeded at step {steps}: {total} replicas"
        );
        assert!(
            still_available >= 4 - 1,
            "maxUnavailable exceeded at step {steps}: {still_available} available"
        );
        if all.len() == 2 && replicas(&all[1]) == 4 && replicas(&all[0]) == 0 {
            break;
        }
        steps += 1;
        assert!(steps < 30, "the rollout did not finish: {all:#?}");
        settle(&replica_sets, true).await;
    }
    assert!(
        steps >= 2,
        "a rollout of 4 pods by one at a time takes steps, took {steps}"
    );
    let d = drive(&client, "web").await;
    let all = sets(&replica_sets, "web").await;
    assert_eq!(
        annotation(&all[1], "deployment.kubernetes.io/revision"),
        Some("2")
    );
    assert_eq!(image(&all[1]), "nginx:2");
    assert_eq!(
        annotation(&d, "deployment.kubernetes.io/revision"),
        Some("2")
    );
    assert_eq!(d.status.as_ref().and_then(|s| s.updated_replicas), Some(4));
}

#[tokio::test(start_paused = true)]
async fn recreate_waits_for_the_old_pods_before_the_new_replica_set() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let d = deployment("db", 2, json!({"type": "Recreate"}), json!({}));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    drive(&client, "db").await;
    let old = sets(&replica_sets, "db").await[0].name_any();

    set_image(&deployments, "db", "nginx:2").await;
    support::wait_for(&replica_sets, &old, WAIT, |rs| replicas(rs) == 0).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        sets(&replica_sets, "db").await.len(),
        1,
        "no new replica set while old pods run"
    );

    settle(&replica_sets, true).await;
    let all = support::wait_for_list(&replica_sets, "app=db", WAIT, |l| l.len() == 2).await;
    let new = all
        .iter()
        .find(|rs| rs.name_any() != old)
        .expect("a new replica set");
    assert_eq!(
        replicas(new),
        2,
        "Recreate starts the new replica set at full size"
    );
    assert_eq!(
        annotation(new, "deployment.kubernetes.io/revision"),
        Some("2")
    );
    let d = drive(&client, "db").await;
    assert_eq!(d.status.as_ref().and_then(|s| s.updated_replicas), Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_paused_deployment_scales_but_does_not_roll_out() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let d = deployment("web", 2, rolling(json!(1), json!(0)), json!({}));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    drive(&client, "web").await;
    let first = sets(&replica_sets, "web").await[0].name_any();

    let pause = |p: bool| Patch::Merge(json!({"spec": {"paused": p}}));
    deployments
        .patch("web", &PatchParams::default(), &pause(true))
        .await
        .expect("paused");
    let d = support::wait_for(&deployments, "web", WAIT, |d| {
        condition(d, "Progressing").map(|c| c.1) == Some("DeploymentPaused")
    })
    .await;
    assert_eq!(
        condition(&d, "Progressing"),
        Some(("Unknown", "DeploymentPaused", "Deployment is paused"))
    );

    set_image(&deployments, "web", "nginx:2").await;
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scaled");
    support::wait_for(&replica_sets, &first, WAIT, |rs| replicas(rs) == 3).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        sets(&replica_sets, "web").await.len(),
        1,
        "no rollout while paused"
    );

    deployments
        .patch("web", &PatchParams::default(), &pause(false))
        .await
        .expect("resumed");
    support::wait_for_list(&replica_sets, "app=web", WAIT, |l| l.len() == 2).await;
    let d = drive(&client, "web").await;
    assert_eq!(
        annotation(&d, "deployment.kubernetes.io/revision"),
        Some("2")
    );
}

#[tokio::test(start_paused = true)]
async fn rolling_back_reuses_the_first_replica_set_as_revision_3() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let d = deployment("web", 2, rolling(json!(1), json!(0)), json!({}));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    drive(&client, "web").await;
    let first = sets(&replica_sets, "web").await[0].name_any();
    set_image(&deployments, "web", "nginx:2").await;
    drive(&client, "web").await;

    // `kubectl rollout undo`: the template of revision 1, written back by the client.
    set_image(&deployments, "web", "nginx:1").await;
    let d = drive(&client, "web").await;
    let all = sets(&replica_sets, "web").await;
    assert_eq!(all.len(), 2, "the first replica set is reused: {all:#?}");
    let reused = all
        .iter()
        .find(|rs| rs.name_any() == first)
        .expect("the first replica set");
    assert_eq!(
        annotation(reused, "deployment.kubernetes.io/revision"),
        Some("3")
    );
    assert_eq!(
        annotation(reused, "deployment.kubernetes.io/revision-history"),
        Some("1")
    );
    assert_eq!(replicas(reused), 2);
    let second = all
        .iter()
        .find(|rs| rs.name_any() != first)
        .expect("the second");
    assert_eq!(replicas(second), 0);
    assert_eq!(
        annotation(&d, "deployment.kubernetes.io/revision"),
        Some("3")
    );
}

#[tokio::test(start_paused = true)]
async fn the_revision_history_limit_prunes_old_replica_sets() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let d = deployment(
        "web",
        1,
        rolling(json!(1), json!(0)),
        json!({"spec": {"revisionHistoryLimit": 1}}),
    );
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    drive(&client, "web").await;
    for image in ["nginx:2", "nginx:3", "nginx:4"] {
        set_image(&deployments, "web", image).await;
        drive(&client, "web").await;
    }
    let all = support::wait_for_list(&replica_sets, "app=web", WAIT, |l| l.len() == 2).await;
    let mut revisions: Vec<&str> = all
        .iter()
        .filter_map(|rs| annotation(rs, "deployment.kubernetes.io/revision"))
        .collect();
    revisions.sort();
    assert_eq!(
        revisions,
        ["3", "4"],
        "only the newest old replica set is kept"
    );
}

#[tokio::test(start_paused = true)]
async fn the_progress_deadline_passes_when_pods_never_become_ready() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let d = deployment(
        "web",
        2,
        rolling(json!("25%"), json!("25%")),
        json!({"spec": {"progressDeadlineSeconds": 30}}),
    );
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    let rs = support::wait_for_list(&replica_sets, "app=web", WAIT, |l| l.len() == 1).await;
    settle(&replica_sets, false).await;

    tokio::time::sleep(Duration::from_secs(20)).await;
    let d = deployments.get("web").await.expect("the deployment");
    assert_eq!(
        condition(&d, "Progressing").map(|c| c.0),
        Some("True"),
        "not yet: {d:#?}"
    );

    let d = support::wait_for(&deployments, "web", Duration::from_secs(60), |d| {
        condition(d, "Progressing").map(|c| c.1) == Some("ProgressDeadlineExceeded")
    })
    .await;
    let message = format!(
        "ReplicaSet \"{}\" has timed out progressing.",
        rs[0].name_any()
    );
    assert_eq!(
        condition(&d, "Progressing"),
        Some(("False", "ProgressDeadlineExceeded", message.as_str()))
    );
    assert_eq!(
        condition(&d, "Available"),
        Some((
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability."
        ))
    );
    assert_eq!(
        d.status.as_ref().and_then(|s| s.unavailable_replicas),
        Some(2)
    );
}

#[tokio::test(start_paused = true)]
async fn a_hash_collision_bumps_the_collision_count() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let d = deployment("web", 1, rolling(json!(1), json!(0)), json!({}));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    drive(&client, "web").await;
    let taken = sets(&replica_sets, "web").await[0].name_any();

    // Someone changes the replica set's template: the Deployment's template hashes to a
    // name that is taken by another template.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "httpd"}]}}}});
    replica_sets
        .patch(&taken, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patched");
    let d = support::wait_for(&deployments, "web", WAIT, |d| {
        d.status.as_ref().and_then(|s| s.collision_count) == Some(1)
    })
    .await;
    let all = support::wait_for_list(&replica_sets, "app=web", WAIT, |l| l.len() == 2).await;
    let new = all
        .iter()
        .find(|rs| rs.name_any() != taken)
        .expect("a new replica set");
    assert_eq!(image(new), "nginx:1");
    assert_eq!(
        annotation(new, "deployment.kubernetes.io/revision"),
        Some("2")
    );
    assert!(d.status.is_some());
    drive(&client, "web").await;
}

#[tokio::test(start_paused = true)]
async fn orphans_are_adopted_and_mismatches_released() {
    let (env, _controllers) = support::cluster("deployment").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let orphan: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web-orphan", "namespace": NS, "labels": {"app": "web", "pod-template-hash": "x"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web", "pod-template-hash": "x"}},
            "template": {
                "metadata": {"labels": {"app": "web", "pod-template-hash": "x"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:0"}]},
            },
        },
    }))
    .expect("a replica set");
    replica_sets
        .create(&PostParams::default(), &orphan)
        .await
        .expect("created");
    let d = deployment("web", 1, rolling(json!(1), json!(0)), json!({}));
    let d = deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");

    let adopted = support::wait_for(&replica_sets, "web-orphan", WAIT, |rs| {
        !rs.owner_references().is_empty()
    })
    .await;
    let owner = &adopted.owner_references()[0];
    assert_eq!(Some(owner.uid.clone()), d.uid());
    assert_eq!(owner.controller, Some(true));
    drive(&client, "web").await;

    replica_sets
        .patch(
            "web-orphan",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
        )
        .await
        .expect("relabelled");
    let released = support::wait_for(&replica_sets, "web-orphan", WAIT, |rs| {
        rs.owner_references().is_empty()
    })
    .await;
    assert_eq!(released.labels()["app"], "other");
}

/// The rollout `desired` accepts: the Deployment complete at `image`, one active replica set.
fn rolled_out(world: &konverge_testkit::World, image_wanted: &str) -> Result<(), String> {
    let d: Deployment = world.get_as(NS, "web").ok_or("no deployment")?;
    if !complete(&d) {
        return Err(format!("not complete: {:?}", d.status));
    }
    let active: Vec<ReplicaSet> = world
        .list("replicasets.apps")
        .filter_map(|(_, v)| serde_json::from_value::<ReplicaSet>(v.clone()).ok())
        .filter(|rs| replicas(rs) > 0)
        .collect();
    match active.as_slice() {
        [only] if image(only) == image_wanted && replicas(only) == 3 => Ok(()),
        other => Err(format!(
            "active replica sets: {:?}",
            other
                .iter()
                .map(|rs| (rs.name_any(), replicas(rs)))
                .collect::<Vec<_>>()
        )),
    }
}

#[tokio::test(start_paused = true)]
async fn converges_under_seeded_fault_plans() {
    // Plans that restart the API server are left out: after an in-process restart the
    // controllers' client is answered 401 Unauthorized for good (a testkit matter, not the
    // controller's).
    let plans = (0..)
        .map(FaultPlan::random)
        .filter(|plan| !plan.to_string().contains("server restart"))
        .take(3);
    for plan in plans {
        let (env, _controllers) = support::cluster("deployment").await;
        let check = env
            .invariants()
            .watch::<Deployment>()
            .watch::<ReplicaSet>()
            .start()
            .await;
        let faults = plan.spawn(&env.faults());
        let direct = env.direct_client();
        let kubelet = {
            let (_, replica_sets) = apis(&direct);
            tokio::spawn(async move {
                loop {
                    settle(&replica_sets, true).await;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let (deployments, _) = apis(&direct);
        let d = deployment("web", 3, rolling(json!(1), json!(1)), json!({}));
        deployments
            .create(&PostParams::default(), &d)
            .await
            .expect("created");
        tokio::time::sleep(Duration::from_millis(700)).await;
        set_image(&deployments, "web", "nginx:2").await;
        faults.await.expect("the plan ran");
        check
            .converges(Duration::from_secs(120), |world| {
                rolled_out(world, "nginx:2")
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(40)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        kubelet.abort();
    }
}

/// Plays the kubelets of `name`'s pods (made by the ReplicaSet controller) until its
/// rollout completes; checks at every step that no more than `max_total` replicas are
/// wanted.
async fn drive_pods(client: &Client, name: &str, max_total: i32) -> Deployment {
    let (deployments, replica_sets) = apis(client);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for _ in 0..200 {
        support::run_pods(&pods, &format!("app={name}"), true).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let total: i32 = sets(&replica_sets, name).await.iter().map(replicas).sum();
        assert!(
            total <= max_total,
            "{total} replicas wanted, at most {max_total}"
        );
        let d = deployments.get(name).await.expect("the deployment");
        if complete(&d) {
            return d;
        }
    }
    panic!("{name} never completed: {:#?}", deployments.get(name).await);
}

#[tokio::test(start_paused = true)]
async fn rolls_out_with_the_replicaset_controller_and_ready_pods() {
    let (env, _controllers) = support::cluster("deployment,replicaset").await;
    let client = env.client();
    let (deployments, replica_sets) = apis(&client);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let d = deployment("web", 3, rolling(json!(1), json!(0)), json!({}));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("created");
    let d = drive_pods(&client, "web", 4).await;
    assert_eq!(
        condition(&d, "Available"),
        Some((
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability."
        ))
    );
    let first = sets(&replica_sets, "web").await[0].clone();
    let first_hash = first.labels()["pod-template-hash"].clone();
    let running = pods
        .list(&ListParams::default().labels(&format!("pod-template-hash={first_hash}")))
        .await
        .expect("pods are listed");
    assert_eq!(running.items.len(), 3, "the pods carry the hash label");

    set_image(&deployments, "web", "nginx:2").await;
    let d = drive_pods(&client, "web", 4).await;
    assert_eq!(
        annotation(&d, "deployment.kubernetes.io/revision"),
        Some("2")
    );
    let all = sets(&replica_sets, "web").await;
    assert_eq!(all.len(), 2);
    assert_eq!((replicas(&all[0]), replicas(&all[1])), (0, 3));
    let status = d.status.expect("a status");
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.ready_replicas,
            status.available_replicas
        ),
        (Some(3), Some(3), Some(3), Some(3))
    );
}
