//! The PersistentVolume binder: binding, hostpath provisioning, WaitForFirstConsumer,
//! external provisioners, release and deletion.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use konverge_testkit::{FaultPlan, TestEnv};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const NS: &str = "default";
const WITHIN: Duration = Duration::from_secs(10);

async fn volume(client: &Client, name: &str, size: &str, extra: Value) {
    let mut spec = json!({
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": format!("/data/{name}")},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let pv: PersistentVolume = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"size": size}}, "spec": spec}),
    )
    .expect("a volume");
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .expect("the volume is created");
}

async fn claim(
    client: &Client,
    name: &str,
    size: &str,
    class: Option<&str>,
) -> Api<PersistentVolumeClaim> {
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}},
                 "storageClassName": class.unwrap_or("")},
    }))
    .expect("a claim");
    let api = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &pvc)
        .await
        .expect("the claim is created");
    api
}

async fn class(client: &Client, name: &str, provisioner: &str, mode: &str) {
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": name}, "provisioner": provisioner,
        "reclaimPolicy": "Delete", "volumeBindingMode": mode,
    }))
    .expect("a class");
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("the class is created");
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn volume_phase(v: &PersistentVolume) -> &str {
    v.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn ann<'a, K: kube::Resource>(obj: &'a K, key: &str) -> Option<&'a str> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

#[tokio::test(start_paused = true)]
async fn a_claim_binds_to_the_smallest_volume_that_fits() {
    let (env, _running) = support::cluster("persistentvolume-binder").await;
    let client = env.client();
    volume(&client, "small", "1Gi", json!({})).await;
    volume(&client, "medium", "5Gi", json!({})).await;
    volume(&client, "large", "10Gi", json!({})).await;
    volume(
        &client,
        "many",
        "5Gi",
        json!({"accessModes": ["ReadWriteMany"]}),
    )
    .await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    support::wait_for(&pvs, "large", WITHIN, |v| volume_phase(v) == "Available").await;

    let claims = claim(&client, "data", "3Gi", None).await;
    let bound = support::wait_for(&claims, "data", WITHIN, |c| claim_phase(c) == "Bound").await;
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("medium")
    );
    assert_eq!(ann(&bound, "pv.kubernetes.io/bind-completed"), Some("yes"));
    assert_eq!(
        ann(&bound, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    let status = bound.status.expect("a status");
    assert_eq!(
        status
            .capacity
            .and_then(|c| c.get("storage").cloned())
            .map(|q| q.0),
        Some("5Gi".into())
    );
    let pv = support::wait_for(&pvs, "medium", WITHIN, |v| volume_phase(v) == "Bound").await;
    let claim_ref = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.clone())
        .expect("a claimRef");
    assert_eq!(claim_ref.name.as_deref(), Some("data"));
    assert_eq!(claim_ref.uid, bound.metadata.uid);
    assert_eq!(
        ann(&pv, "pv.kubernetes.io/bound-by-controller"),
        Some("yes")
    );
    assert!(
        pv.status
            .and_then(|s| s.last_phase_transition_time)
            .is_some()
    );

    // A volume pre-bound to a claim goes to it, whatever its size.
    volume(
        &client,
        "reserved",
        "20Gi",
        json!({"claimRef": {"namespace": NS, "name": "mine"}}),
    )
    .await;
    claim(&client, "mine", "1Gi", None).await;
    let mine = support::wait_for(&claims, "mine", WITHIN, |c| claim_phase(c) == "Bound").await;
    assert_eq!(
        mine.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("reserved")
    );
    let reserved = pvs.get("reserved").await.expect("the volume");
    assert_eq!(ann(&reserved, "pv.kubernetes.io/bound-by-controller"), None);

    // Nothing fits and there is no class: Pending.
    claim(&client, "huge", "1Ti", None).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let huge = claims.get("huge").await.expect("the claim");
    assert_eq!(claim_phase(&huge), "Pending");
    assert!(
        huge.spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_none()
    );

    // The claim goes: its volume (Retain, as manual volumes are) is Released and stays.
    claims
        .delete("data", &DeleteParams::default())
        .await
        .expect("deleted");
    support::wait_for(&pvs, "medium", WITHIN, |v| volume_phase(v) == "Released").await;
}

#[tokio::test(start_paused = true)]
async fn the_hostpath_class_provisions_and_deletes() {
    let (env, _running) = support::cluster("persistentvolume-binder").await;
    let client = env.client();
    class(&client, "local", "konverge.dev/hostpath", "Immediate").await;
    let claims = claim(&client, "cache", "2Gi", Some("local")).await;
    let bound = support::wait_for(&claims, "cache", WITHIN, |c| claim_phase(c) == "Bound").await;
    let pv_name = format!("pvc-{}", bound.uid().expect("a uid"));
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.volume_name.clone()),
        Some(pv_name.clone())
    );
    assert_eq!(
        ann(&bound, "volume.kubernetes.io/storage-provisioner"),
        Some("konverge.dev/hostpath")
    );
    assert_eq!(
        ann(&bound, "volume.beta.kubernetes.io/storage-provisioner"),
        Some("konverge.dev/hostpath")
    );
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = support::wait_for(&pvs, &pv_name, WITHIN, |v| volume_phase(v) == "Bound").await;
    assert_eq!(
        ann(&pv, "pv.kubernetes.io/provisioned-by"),
        Some("konverge.dev/hostpath")
    );
    let spec = pv.spec.clone().expect("a spec");
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some("local"));
    assert_eq!(
        spec.capacity
            .and_then(|c| c.get("storage").cloned())
            .map(|q| q.0),
        Some("2Gi".into())
    );

    claims
        .delete("cache", &DeleteParams::default())
        .await
        .expect("deleted");
    support::wait_for_list(&pvs, "", WITHIN, |items| {
        items.iter().all(|v| v.name_any() != pv_name)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn wait_for_first_consumer_waits_for_the_selected_node() {
    let (env, _running) = support::cluster("persistentvolume-binder").await;
    let client = env.client();
    class(
        &client,
        "late",
        "konverge.dev/hostpath",
        "WaitForFirstConsumer",
    )
    .await;
    class(&client, "cloud", "ebs.csi.aws.com", "Immediate").await;
    let claims = claim(&client, "later", "1Gi", Some("late")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let waiting = claims.get("later").await.expect("the claim");
    assert_eq!(claim_phase(&waiting), "Pending");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    assert!(
        pvs.list(&Default::default())
            .await
            .expect("listed")
            .items
            .is_empty()
    );

    // The scheduler picks a node.
    claims
        .patch(
            "later",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-1"}}})),
        )
        .await
        .expect("annotated");
    let bound = support::wait_for(&claims, "later", WITHIN, |c| claim_phase(c) == "Bound").await;
    let pv = pvs
        .get(
            bound
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .expect("a volume"),
        )
        .await
        .expect("the volume");
    let affinity = serde_json::to_value(pv.spec.and_then(|s| s.node_affinity)).expect("json");
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0],
        "node-1"
    );

    // Another provisioner's claims are annotated and left to it.
    claim(&client, "ext", "1Gi", Some("cloud")).await;
    let ext = support::wait_for(&claims, "ext", WITHIN, |c| {
        ann(c, "volume.kubernetes.io/storage-provisioner") == Some("ebs.csi.aws.com")
    })
    .await;
    assert_eq!(
        ann(&ext, "volume.beta.kubernetes.io/storage-provisioner"),
        Some("ebs.csi.aws.com")
    );
    assert_eq!(claim_phase(&ext), "Pending");
}

#[tokio::test(start_paused = true)]
async fn converges_under_fault_plans_without_a_hot_loop() {
    for seed in 1..=3 {
        let plan = FaultPlan::random(seed);
        let env = TestEnv::builder().in_process().bare().start().await;
        let check = env
            .invariants()
            .watch::<PersistentVolume>()
            .watch::<PersistentVolumeClaim>()
            .start()
            .await;
        let direct = env.direct_client();
        let _running = support::controllers(&env, "persistentvolume-binder").await;
        class(&direct, "local", "konverge.dev/hostpath", "Immediate").await;
        volume(&direct, "static", "1Gi", json!({})).await;
        let faults = plan.spawn(&env.faults());
        claim(&direct, "a", "1Gi", None).await;
        claim(&direct, "b", "1Gi", Some("local")).await;
        faults.await.expect("the plan ran");
        check
            .converges(Duration::from_secs(60), |world| {
                for name in ["a", "b"] {
                    let c: PersistentVolumeClaim = world.get_as(NS, name).ok_or("no claim")?;
                    if claim_phase(&c) != "Bound" {
                        return Err(format!("{name} is {:?}", c.status));
                    }
                }
                Ok(())
            })
            .await
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
        check
            .no_hot_loop(8)
            .unwrap_or_else(|v| panic!("{plan}\n{v}"));
    }
}
