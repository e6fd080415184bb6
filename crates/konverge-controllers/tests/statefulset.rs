//! The statefulset controller against an in-process API server, in paused time: ordered and
//! parallel creation, claims and their retention, scaling down, rolling updates with a
//! partition, OnDelete, recreation, adoption, history, and seeded fault plans.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use konverge_controllers::controller_ref::controller_of;
use konverge_testkit::{ChangeKind, FaultPlan, TestEnv, World};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const CONTROLLER: &str = "statefulset-controller";
const WAIT: Duration = Duration::from_secs(30);

/// A StatefulSet `name` of `replicas` nginx pods labelled `app=<name>`, with `extra` merged
/// into its spec.
fn stateful_set(name: &str, replicas: i32, extra: serde_json::Value) -> StatefulSet {
    let mut spec = json!({
        "replicas": replicas,
        "serviceName": name,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
        },
    });
    if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("a StatefulSet")
}

fn apis(env: &TestEnv) -> (Api<StatefulSet>, Api<Pod>) {
    (
        Api::namespaced(env.client(), "default"),
        Api::namespaced(env.client(), "default"),
    )
}

async fn create(sets: &Api<StatefulSet>, set: &StatefulSet) -> StatefulSet {
    sets.create(&PostParams::default(), set)
        .await
        .expect("the set is created")
}

/// Waits for pod `name` and returns it.
async fn pod(pods: &Api<Pod>, name: &str) -> Pod {
    support::wait_for(pods, name, WAIT, |_| true).await
}

/// Waits for pod `name` and makes it Running and Ready.
async fn run(pods: &Api<Pod>, name: &str) -> Pod {
    let pod = pod(pods, name).await;
    support::set_pod_running(pods, name, true).await;
    pod
}

/// Lets the controller act (virtual time) and returns whether pod `name` exists.
async fn exists_after_a_while(pods: &Api<Pod>, name: &str) -> bool {
    tokio::time::sleep(Duration::from_secs(3)).await;
    pods.get_opt(name).await.expect("a get").is_some()
}

async fn patch_spec(sets: &Api<StatefulSet>, name: &str, spec: serde_json::Value) {
    sets.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
    .expect("the set is patched");
}

fn image(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn revision(pod: &Pod) -> String {
    pod.labels()
        .get("controller-revision-hash")
        .cloned()
        .unwrap_or_default()
}

/// Plays a kubelet: every pod of `app=<app>` not yet running is made Running and Ready.
fn kubelet(env: &TestEnv, app: &str) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::namespaced(env.direct_client(), "default");
    let selector = format!("app={app}");
    tokio::spawn(async move {
        loop {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            for pod in list {
                let running =
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if !running && pod.metadata.deletion_timestamp.is_none() {
                    let now = k8s_openapi::jiff::Timestamp::now().to_string();
                    let status = json!({"status": {"phase": "Running", "conditions": [
                        {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    ]}});
                    let _ = pods
                        .patch_status(
                            &pod.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(status),
                        )
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// The set's status once it reports `observedGeneration` for its generation and `done`.
async fn status_when(
    sets: &Api<StatefulSet>,
    name: &str,
    done: impl Fn(&k8s_openapi::api::apps::v1::StatefulSetStatus) -> bool,
) -> StatefulSet {
    support::wait_for(sets, name, WAIT, |set| {
        set.status
            .as_ref()
            .is_some_and(|s| s.observed_generation == set.metadata.generation && done(s))
    })
    .await
}

async fn event_messages(env: &TestEnv, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(env.client(), "default");
    events
        .list(&ListParams::default())
        .await
        .expect("events are listed")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn ordered_ready_creates_one_pod_at_a_time() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    let set = create(&sets, &stateful_set("web", 3, json!({}))).await;

    let web0 = pod(&pods, "web-0").await;
    assert_eq!(web0.metadata.generate_name.as_deref(), Some("web-"));
    let labels = web0.labels();
    assert_eq!(
        labels
            .get("statefulset.kubernetes.io/pod-name")
            .map(String::as_str),
        Some("web-0")
    );
    assert_eq!(
        labels
            .get("apps.kubernetes.io/pod-index")
            .map(String::as_str),
        Some("0")
    );
    assert!(revision(&web0).starts_with("web-"), "{labels:?}");
    let spec = web0.spec.as_ref().expect("a spec");
    assert_eq!(spec.hostname.as_deref(), Some("web-0"));
    assert_eq!(spec.subdomain.as_deref(), Some("web"));
    let owner = controller_of(&web0.metadata).expect("a controller");
    assert_eq!(
        (owner.kind.as_str(), owner.uid.clone()),
        ("StatefulSet", set.uid().unwrap_or_default())
    );

    assert!(
        !exists_after_a_while(&pods, "web-1").await,
        "web-1 before web-0 runs"
    );
    support::set_pod_running(&pods, "web-0", false).await;
    assert!(
        !exists_after_a_while(&pods, "web-1").await,
        "web-1 before web-0 is ready"
    );
    support::set_pod_running(&pods, "web-0", true).await;
    run(&pods, "web-1").await;
    assert!(!exists_after_a_while(&pods, "web-3").await);
    run(&pods, "web-2").await;

    let set = status_when(&sets, "web", |s| s.ready_replicas == Some(3)).await;
    let status = set.status.expect("a status");
    assert_eq!(status.replicas, 3);
    assert_eq!(status.available_replicas, Some(3));
    assert_eq!(status.current_replicas, Some(3));
    assert_eq!(status.updated_replicas, Some(3));
    assert_eq!(status.current_revision, Some(revision(&web0)));
    assert_eq!(status.update_revision, Some(revision(&web0)));
    assert_eq!(status.collision_count, Some(0));

    let revisions: Api<ControllerRevision> = Api::namespaced(env.client(), "default");
    let rev = revisions
        .get(&revision(&web0))
        .await
        .expect("the revision exists");
    assert_eq!(rev.revision, 1);
    assert!(rev.labels().contains_key("controller.kubernetes.io/hash"));
    assert_eq!(rev.labels().get("app").map(String::as_str), Some("web"));
    let data = &rev.data.as_ref().expect("data").0;
    assert_eq!(data["spec"]["template"]["$patch"], "replace");
    assert_eq!(
        data["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );

    // Events are written in the background, and those of one reason about one set may be
    // aggregated into a series that keeps the first message.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let created = event_messages(&env, "SuccessfulCreate").await;
    let expected: Vec<String> = (0..3)
        .map(|n| format!("create Pod web-{n} in StatefulSet web successful"))
        .collect();
    assert!(created.contains(&expected[0]), "{created:?}");
    assert!(created.iter().all(|m| expected.contains(m)), "{created:?}");
}

#[tokio::test(start_paused = true)]
async fn parallel_creates_every_pod_at_once_from_the_start_ordinal() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    let extra = json!({"podManagementPolicy": "Parallel", "ordinals": {"start": 5}});
    create(&sets, &stateful_set("db", 3, extra)).await;
    let listed = support::wait_for_list(&pods, "app=db", WAIT, |p| p.len() == 3).await;
    let mut names: Vec<String> = listed.iter().map(|p| p.name_any()).collect();
    names.sort();
    assert_eq!(names, ["db-5", "db-6", "db-7"]);
    let set = status_when(&sets, "db", |s| s.replicas == 3).await;
    assert_eq!(set.status.and_then(|s| s.ready_replicas), None);
}

#[tokio::test(start_paused = true)]
async fn claims_come_first_with_the_retention_policys_owners() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(env.client(), "default");
    let template = json!([{
        "metadata": {"name": "data", "labels": {"tier": "db"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }]);
    let extra = json!({
        "podManagementPolicy": "Parallel",
        "volumeClaimTemplates": template,
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
    });
    let set = create(&sets, &stateful_set("web", 2, extra)).await;
    let web1 = pod(&pods, "web-1").await;
    let volume = web1
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == "data"))
        .and_then(|v| v.persistent_volume_claim.clone())
        .expect("the claim is mounted");
    assert_eq!(volume.claim_name, "data-web-1");
    for n in 0..2 {
        let name = format!("data-web-{n}");
        let claim = support::wait_for(&claims, &name, WAIT, |c| {
            c.metadata
                .owner_references
                .as_ref()
                .is_some_and(|r| !r.is_empty())
        })
        .await;
        let labels = claim.labels();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("db"));
        let refs = claim.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(refs.len(), 1, "{refs:?}");
        assert_eq!(refs[0].kind, "StatefulSet");
        assert_eq!(Some(refs[0].uid.clone()), set.uid());
        assert_eq!(refs[0].controller, Some(true));
    }
    let created = event_messages(&env, "SuccessfulCreate").await;
    assert!(
        created
            .contains(&"create Claim data-web-0 Pod web-0 in StatefulSet web success".to_string()),
        "{created:?}"
    );

    // Scaled down, web-1's claim is handed to the pod, and goes with it.
    support::run_pods(&pods, "app=web", true).await;
    patch_spec(&sets, "web", json!({"replicas": 1})).await;
    support::wait_for_list(&claims, "app=web", WAIT, |c| c.len() == 1).await;
    assert!(pods.get_opt("web-1").await.expect("a get").is_none());
}

#[tokio::test(start_paused = true)]
async fn retained_claims_get_no_owner() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(env.client(), "default");
    let extra = json!({
        "volumeClaimTemplates": [{
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }],
    });
    create(&sets, &stateful_set("web", 1, extra)).await;
    run(&pods, "web-0").await;
    status_when(&sets, "web", |s| s.ready_replicas == Some(1)).await;
    let claim = claims.get("data-web-0").await.expect("the claim");
    assert_eq!(claim.metadata.owner_references, None);
    assert_eq!(claim.labels().get("app").map(String::as_str), Some("web"));
}

#[tokio::test(start_paused = true)]
async fn scaling_down_deletes_the_highest_ordinal_first() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    let check = env.invariants().watch::<Pod>().start().await;
    create(&sets, &stateful_set("web", 4, json!({}))).await;
    for n in 0..4 {
        run(&pods, &format!("web-{n}")).await;
    }
    status_when(&sets, "web", |s| s.ready_replicas == Some(4)).await;
    patch_spec(&sets, "web", json!({"replicas": 1})).await;
    support::wait_for_list(&pods, "app=web", WAIT, |p| p.len() == 1).await;
    let deleted: Vec<String> = check
        .history()
        .iter()
        .filter(|c| c.object.resource == "pods" && c.kind == ChangeKind::Deleted)
        .map(|c| c.object.name.clone())
        .collect();
    assert_eq!(deleted, ["web-3", "web-2", "web-1"]);
    let set = status_when(&sets, "web", |s| s.replicas == 1).await;
    assert_eq!(set.status.and_then(|s| s.ready_replicas), Some(1));
    let messages = event_messages(&env, "SuccessfulDelete").await;
    assert!(
        messages.contains(&"delete Pod web-3 in StatefulSet web successful".to_string()),
        "{messages:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn rolling_updates_stop_at_the_partition_highest_ordinal_first() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    let _kubelet = kubelet(&env, "web");
    create(&sets, &stateful_set("web", 3, json!({}))).await;
    let set = status_when(&sets, "web", |s| s.ready_replicas == Some(3)).await;
    let old_revision = set
        .status
        .and_then(|s| s.current_revision)
        .expect("a revision");
    let check = env.invariants().watch::<Pod>().start().await;

    patch_spec(
        &sets,
        "web",
        json!({
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
            "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.28"}]}},
        }),
    )
    .await;
    let set = status_when(&sets, "web", |s| {
        s.updated_replicas == Some(2) && s.ready_replicas == Some(3)
    })
    .await;
    let status = set.status.expect("a status");
    let new_revision = status.update_revision.clone().expect("an update revision");
    assert_ne!(new_revision, old_revision);
    assert_eq!(status.current_revision, Some(old_revision.clone()));
    assert_eq!(status.current_replicas, Some(1));
    for (name, want) in [
        ("web-0", "nginx:1.27"),
        ("web-1", "nginx:1.28"),
        ("web-2", "nginx:1.28"),
    ] {
        assert_eq!(
            image(&pods.get(name).await.expect("the pod")),
            want,
            "{name}"
        );
    }
    assert_eq!(
        revision(&pods.get("web-0").await.expect("web-0")),
        old_revision
    );
    let deleted: Vec<String> = check
        .history()
        .iter()
        .filter(|c| c.object.resource == "pods" && c.kind == ChangeKind::Deleted)
        .map(|c| c.object.name.clone())
        .collect();
    assert_eq!(deleted, ["web-2", "web-1"]);

    // The partition lowered to 0, the update completes and becomes current.
    patch_spec(
        &sets,
        "web",
        json!({"updateStrategy": {"rollingUpdate": {"partition": 0}}}),
    )
    .await;
    let set = status_when(&sets, "web", |s| {
        s.current_revision == s.update_revision && s.ready_replicas == Some(3)
    })
    .await;
    let status = set.status.expect("a status");
    assert_eq!(status.current_revision, Some(new_revision.clone()));
    assert_eq!(status.current_replicas, Some(3));
    assert_eq!(
        revision(&pods.get("web-0").await.expect("web-0")),
        new_revision
    );
    let revisions: Api<ControllerRevision> = Api::namespaced(env.client(), "default");
    assert_eq!(
        revisions
            .get(&new_revision)
            .await
            .expect("the revision")
            .revision,
        2
    );
}

#[tokio::test(start_paused = true)]
async fn on_delete_updates_only_the_pods_deleted() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    let _kubelet = kubelet(&env, "web");
    create(
        &sets,
        &stateful_set("web", 3, json!({"updateStrategy": {"type": "OnDelete"}})),
    )
    .await;
    status_when(&sets, "web", |s| s.ready_replicas == Some(3)).await;
    patch_spec(
        &sets,
        "web",
        json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.28"}]}}}),
    )
    .await;
    let set = status_when(&sets, "web", |s| s.update_revision != s.current_revision).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in 0..3 {
        assert_eq!(
            image(&pods.get(&format!("web-{n}")).await.expect("a pod")),
            "nginx:1.27"
        );
    }
    let old_uid = pods.get("web-1").await.expect("web-1").uid();
    pods.delete("web-1", &DeleteParams::default())
        .await
        .expect("deleted");
    let web1 = support::wait_for(&pods, "web-1", WAIT, |p| p.uid() != old_uid).await;
    assert_eq!(image(&web1), "nginx:1.28");
    assert_eq!(
        Some(revision(&web1)),
        set.status.and_then(|s| s.update_revision)
    );
    assert_eq!(
        image(&pods.get("web-0").await.expect("web-0")),
        "nginx:1.27"
    );
    assert_eq!(
        image(&pods.get("web-2").await.expect("web-2")),
        "nginx:1.27"
    );
    status_when(&sets, "web", |s| {
        s.updated_replicas == Some(1) && s.current_replicas == Some(2)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn deleted_and_failed_pods_are_recreated_with_the_same_name() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    create(
        &sets,
        &stateful_set("web", 2, json!({"podManagementPolicy": "Parallel"})),
    )
    .await;
    let first = run(&pods, "web-1").await;
    pods.delete("web-1", &DeleteParams::default())
        .await
        .expect("deleted");
    let second = support::wait_for(&pods, "web-1", WAIT, |p| p.uid() != first.uid()).await;
    support::set_pod_running(&pods, "web-1", true).await;
    support::finish_pod(&pods, "web-1", "Failed", 1).await;
    let third = support::wait_for(&pods, "web-1", WAIT, |p| p.uid() != second.uid()).await;
    assert_eq!(
        third
            .labels()
            .get("apps.kubernetes.io/pod-index")
            .map(String::as_str),
        Some("1")
    );
}

#[tokio::test(start_paused = true)]
async fn orphans_are_adopted_by_name_and_selector_and_released_when_relabelled() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, pods) = apis(&env);
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
    }))
    .expect("a pod");
    let orphan = pods
        .create(&PostParams::default(), &orphan)
        .await
        .expect("created");
    let stranger: Pod = serde_json::from_value(json!({
        "metadata": {"name": "other-0", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &stranger)
        .await
        .expect("created");
    support::set_pod_running(&pods, "web-0", true).await;
    // OnDelete: an adopted pod (which has no revision label) is not rolled.
    let set = create(
        &sets,
        &stateful_set("web", 1, json!({"updateStrategy": {"type": "OnDelete"}})),
    )
    .await;

    let adopted = support::wait_for(&pods, "web-0", WAIT, |p| {
        controller_of(&p.metadata).is_some_and(|r| Some(r.uid.clone()) == set.uid())
            && p.labels()
                .contains_key("statefulset.kubernetes.io/pod-name")
    })
    .await;
    assert_eq!(adopted.uid(), orphan.uid(), "adopted, not replaced");
    assert!(exists_after_a_while(&pods, "other-0").await);
    let other = pods.get("other-0").await.expect("other-0");
    assert!(
        controller_of(&other.metadata).is_none(),
        "another name is not a member"
    );

    pods.patch(
        "web-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
    )
    .await
    .expect("relabelled");
    support::wait_for(&pods, "web-0", WAIT, |p| {
        controller_of(&p.metadata).is_none()
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn history_is_limited_and_a_rollback_renumbers_its_revision() {
    let (env, _running) = support::cluster(CONTROLLER).await;
    let (sets, _pods) = apis(&env);
    let _kubelet = kubelet(&env, "web");
    let revisions: Api<ControllerRevision> = Api::namespaced(env.client(), "default");
    create(
        &sets,
        &stateful_set("web", 1, json!({"revisionHistoryLimit": 1})),
    )
    .await;
    let first = status_when(&sets, "web", |s| s.ready_replicas == Some(1)).await;
    let first = first
        .status
        .and_then(|s| s.current_revision)
        .expect("a revision");
    for image in ["nginx:1.28", "nginx:1.29"] {
        patch_spec(
            &sets,
            "web",
            json!({"template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}}),
        )
        .await;
        status_when(&sets, "web", |s| {
            s.current_revision == s.update_revision
                && s.ready_replicas == Some(1)
                && s.current_revision.as_deref() != Some(first.as_str())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed = revisions
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("listed")
        .items;
    let numbers: BTreeMap<String, i64> =
        listed.iter().map(|r| (r.name_any(), r.revision)).collect();
    assert_eq!(
        numbers.len(),
        2,
        "the live revision and one more: {numbers:?}"
    );
    assert!(
        !numbers.contains_key(&first),
        "the oldest went: {numbers:?}"
    );

    // Back to 1.28: its revision is renumbered 4 rather than a new one made.
    patch_spec(
        &sets,
        "web",
        json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.28"}]}}}),
    )
    .await;
    let set = status_when(&sets, "web", |s| {
        s.ready_replicas == Some(1) && s.current_revision == s.update_revision
    })
    .await;
    let current = set
        .status
        .and_then(|s| s.current_revision)
        .expect("a revision");
    assert_eq!(
        revisions
            .get(&current)
            .await
            .expect("the revision")
            .revision,
        4
    );
}

/// Three pods of `web`, all controlled, ready, at the update revision, and a status saying so.
fn converged(world: &World) -> Result<(), String> {
    let set: StatefulSet = world.get_as("default", "web").ok_or("no set")?;
    let status = set.status.clone().ok_or("no status")?;
    let uid = set.uid().unwrap_or_default();
    let pods: Vec<Pod> = world
        .list("pods")
        .filter_map(|(_, v)| serde_json::from_value::<Pod>(v.clone()).ok())
        .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
        .collect();
    let mut names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    names.sort();
    if names != ["web-0", "web-1", "web-2"] {
        return Err(format!("pods {names:?}"));
    }
    if pods
        .iter()
        .any(|p| Some(revision(p)) != status.update_revision || image(p) != "nginx:1.28")
    {
        return Err("pods not updated".into());
    }
    if status.observed_generation != set.metadata.generation
        || status.ready_replicas != Some(3)
        || status.current_revision != status.update_revision
    {
        return Err(format!("status {status:?}"));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_hot_loops() {
    for seed in 1..=6 {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::builder().in_process().start().await;
        let check = env
            .invariants()
            .watch::<StatefulSet>()
            .watch::<Pod>()
            .watch::<ControllerRevision>()
            .start()
            .await;
        let running = support::controllers(&env, CONTROLLER).await;
        let _kubelet = kubelet(&env, "web");
        let faults = plan.spawn(&env.faults());
        let sets: Api<StatefulSet> = Api::namespaced(env.direct_client(), "default");
        sets.create(&PostParams::default(), &stateful_set("web", 3, json!({})))
            .await
            .expect("created");
        tokio::time::sleep(Duration::from_millis(700)).await;
        sets.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.28"}]}}}})),
        )
        .await
        .expect("updated");
        faults.await.expect("the plan ran");

        check
            .converges(Duration::from_secs(90), converged)
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(25)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .idempotent(Duration::from_secs(30), async {
                running.stop().await.expect("stopped");
                support::controllers(&env, CONTROLLER).await
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
