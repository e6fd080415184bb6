//! The reconcile helpers (finalizer, status, ordered apply) against an in-process konverge API
//! server.
//!
//! "Nothing was written" is checked with the server's global revision: every write to any object
//! bumps it, and a list's resourceVersion is the revision it was read at.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, PodTemplateSpec, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use konverge_runtime::apply::{ApplyError, ApplyOutcome, ChildSet, owner_reference};
use konverge_runtime::finalizer::{FinalizerError, FinalizerEvent, FinalizerOutcome, finalizer};
use konverge_runtime::status::{StatusWrite, patch_status_if_changed};
use konverge_testkit::TestEnv;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

const NAMESPACE: &str = "default";
const FINALIZER: &str = "helpers.konverge.dev/cleanup";
const OTHER: &str = "other.example.com/keep";

/// The server's global revision: bumped by every write to any object.
async fn revision(client: &Client) -> anyhow::Result<u64> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let list = namespaces.list(&ListParams::default().limit(1)).await?;
    let revision = list
        .metadata
        .resource_version
        .context("list has no resourceVersion")?;
    Ok(revision.parse()?)
}

fn resource_version<K: Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .expect("objects from the server have a resourceVersion")
        .parse()
        .expect("resourceVersions on this server are integers")
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NAMESPACE.into()),
        ..ObjectMeta::default()
    }
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: meta(name),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

fn deployment(name: &str) -> Deployment {
    let labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
    Deployment {
        metadata: meta(name),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some("nginx:1.27".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// A reconcile function for [`finalizer`] that records which events it saw, and whose cleanup
/// fails while `fail_cleanup` is set.
#[derive(Clone, Default)]
struct Recorder {
    applies: Arc<AtomicUsize>,
    cleanups: Arc<AtomicUsize>,
}

#[derive(Debug, thiserror::Error)]
#[error("cleanup of the external resource failed")]
struct CleanupFailed;

impl Recorder {
    async fn run(
        &self,
        api: &Api<ConfigMap>,
        obj: ConfigMap,
        fail_cleanup: bool,
    ) -> Result<FinalizerOutcome<Vec<String>>, FinalizerError<CleanupFailed>> {
        let this = self.clone();
        finalizer(api, FINALIZER, Arc::new(obj), move |event| async move {
            match event {
                FinalizerEvent::Apply(obj) => {
                    this.applies.fetch_add(1, Ordering::SeqCst);
                    // What Apply saw: the finalizer is already on the object it gets.
                    Ok(obj.finalizers().to_vec())
                }
                FinalizerEvent::Cleanup(obj) => {
                    this.cleanups.fetch_add(1, Ordering::SeqCst);
                    if fail_cleanup {
                        Err(CleanupFailed)
                    } else {
                        Ok(obj.finalizers().to_vec())
                    }
                }
            }
        })
        .await
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.applies.load(Ordering::SeqCst),
            self.cleanups.load(Ordering::SeqCst),
        )
    }
}

/// The finalizer is added before Apply runs, exactly once, even when the caller passes a stale
/// object that does not show it yet, and a converged object costs no write.
#[tokio::test]
async fn finalizer_is_added_once_and_apply_runs() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let created = api
        .create(&PostParams::default(), &config_map("added", &[]))
        .await?;
    let recorder = Recorder::default();

    let outcome = recorder.run(&api, created.clone(), false).await?;
    assert_eq!(
        outcome,
        FinalizerOutcome::Applied {
            value: vec![FINALIZER.to_owned()],
            finalizer_added: true
        }
    );
    let live = api.get("added").await?;
    assert_eq!(live.finalizers(), [FINALIZER]);

    // Converged: Apply runs, nothing is written.
    let before = revision(&client).await?;
    let outcome = recorder.run(&api, live.clone(), false).await?;
    assert!(matches!(
        outcome,
        FinalizerOutcome::Applied {
            finalizer_added: false,
            ..
        }
    ));
    assert_eq!(revision(&client).await?, before);

    // Stale object without the finalizer: the patch's test fails, the helper re-reads and finds
    // the finalizer already there instead of adding a second one.
    let outcome = recorder.run(&api, created, false).await?;
    assert!(matches!(
        outcome,
        FinalizerOutcome::Applied {
            finalizer_added: false,
            ..
        }
    ));
    assert_eq!(api.get("added").await?.finalizers(), [FINALIZER]);
    assert_eq!(revision(&client).await?, before);
    assert_eq!(recorder.counts(), (3, 0));
    Ok(())
}

/// Deletion waits for cleanup: a failing cleanup keeps the object and the finalizer; a
/// successful one removes the finalizer and the server then deletes the object.
#[tokio::test]
async fn object_disappears_only_after_cleanup_succeeds() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), NAMESPACE);
    let created = api
        .create(&PostParams::default(), &config_map("doomed", &[]))
        .await?;
    let recorder = Recorder::default();
    recorder.run(&api, created, false).await?;
    api.delete("doomed", &DeleteParams::default()).await?;

    let deleting = api.get("doomed").await?;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let error = recorder
        .run(&api, deleting.clone(), true)
        .await
        .expect_err("cleanup fails");
    assert!(matches!(error, FinalizerError::CleanupFailed(_)));
    assert!(!error.is_conflict());
    let still_there = api.get_opt("doomed").await?.context("object kept")?;
    assert_eq!(still_there.finalizers(), [FINALIZER]);

    let outcome = recorder.run(&api, still_there, false).await?;
    assert_eq!(
        outcome,
        FinalizerOutcome::CleanedUp(vec![FINALIZER.to_owned()])
    );
    assert!(api.get_opt("doomed").await?.is_none(), "object is gone");

    // A retry with the object as it was before cleanup: the object is gone (404), which
    // counts as done.
    let outcome = recorder.run(&api, deleting, false).await?;
    assert!(matches!(outcome, FinalizerOutcome::CleanedUp(_)));
    assert_eq!(recorder.counts(), (1, 3));
    Ok(())
}

/// Only our finalizer is removed; another controller's stays and keeps the object. Repeating
/// the call on the fresh object runs nothing; repeating it on a stale object (where ours sits at
/// the index that now holds the other finalizer) removes nothing.
#[tokio::test]
async fn cleanup_preserves_other_finalizers_and_is_idempotent() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let created = api
        .create(&PostParams::default(), &config_map("shared", &[]))
        .await?;
    let recorder = Recorder::default();
    recorder.run(&api, created, false).await?;
    let other = json!({"metadata": {"finalizers": [FINALIZER, OTHER]}});
    api.patch("shared", &PatchParams::default(), &Patch::Merge(&other))
        .await?;
    api.delete("shared", &DeleteParams::default()).await?;
    let stale = api.get("shared").await?;
    assert_eq!(stale.finalizers(), [FINALIZER, OTHER]);

    let outcome = recorder.run(&api, stale.clone(), false).await?;
    assert!(matches!(outcome, FinalizerOutcome::CleanedUp(_)));
    let live = api.get("shared").await?;
    assert_eq!(live.finalizers(), [OTHER]);
    assert!(live.metadata.deletion_timestamp.is_some());

    let before = revision(&client).await?;
    assert_eq!(
        recorder.run(&api, live, false).await?,
        FinalizerOutcome::Skipped
    );
    assert_eq!(recorder.counts(), (1, 1), "nothing ran on the fresh object");

    let outcome = recorder.run(&api, stale, false).await?;
    assert!(matches!(outcome, FinalizerOutcome::CleanedUp(_)));
    assert_eq!(api.get("shared").await?.finalizers(), [OTHER]);
    assert_eq!(revision(&client).await?, before, "nothing was written");
    Ok(())
}

/// An object being deleted that never carried our finalizer is left alone.
#[tokio::test]
async fn deleting_object_without_our_finalizer_is_skipped() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let mut object = config_map("foreign", &[]);
    object.metadata.finalizers = Some(vec![OTHER.to_owned()]);
    api.create(&PostParams::default(), &object).await?;
    api.delete("foreign", &DeleteParams::default()).await?;
    let deleting = api.get("foreign").await?;

    let before = revision(&client).await?;
    let recorder = Recorder::default();
    assert_eq!(
        recorder.run(&api, deleting, false).await?,
        FinalizerOutcome::Skipped
    );
    assert_eq!(recorder.counts(), (0, 0));
    assert_eq!(api.get("foreign").await?.finalizers(), [OTHER]);
    assert_eq!(revision(&client).await?, before);
    Ok(())
}

/// Status is written once with observedGeneration = generation; the same status again (in any
/// key order) writes nothing; a spec change moves observedGeneration; fields left out of the
/// desired status are removed; a status computed from a stale object is refused as a conflict.
#[tokio::test]
async fn status_is_written_only_when_it_changes() -> anyhow::Result<()> {
    // An API server alone: the deployment controller would write the Deployment's status.
    let env = TestEnv::builder().bare().start().await;
    let client = env.client();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let created = api
        .create(&PostParams::default(), &deployment("web"))
        .await?;
    let generation = created.metadata.generation.context("generation")?;

    let desired = DeploymentStatus {
        replicas: Some(1),
        available_replicas: Some(1),
        ..DeploymentStatus::default()
    };
    let StatusWrite::Written(written) = patch_status_if_changed(&api, &created, &desired).await?
    else {
        panic!("the first status write is sent");
    };
    let status = written.status.clone().context("status")?;
    assert_eq!(status.observed_generation, Some(generation));
    assert_eq!(status.replicas, Some(1));
    assert!(resource_version(&written) > resource_version(&created));

    // Same status, as a typed value and as JSON with another key order: no write.
    let before = revision(&client).await?;
    let write = patch_status_if_changed(&api, &written, &desired).await?;
    assert_eq!(write, StatusWrite::Unchanged);
    let reordered = json!({"availableReplicas": 1, "observedGeneration": 99, "replicas": 1});
    let write = patch_status_if_changed(&api, &written, &reordered).await?;
    assert_eq!(write, StatusWrite::Unchanged);
    assert_eq!(revision(&client).await?, before);
    assert_eq!(
        resource_version(&api.get("web").await?),
        resource_version(&written)
    );

    // A spec change bumps the generation; the same status is now stale and is written again.
    let scaled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await?;
    assert_eq!(scaled.metadata.generation, Some(generation + 1));
    let reduced = DeploymentStatus {
        replicas: Some(1),
        ..DeploymentStatus::default()
    };
    let write = patch_status_if_changed(&api, &scaled, &reduced).await?;
    let StatusWrite::Written(rewritten) = write else {
        panic!("a new generation is written")
    };
    let status = rewritten.status.clone().context("status")?;
    assert_eq!(status.observed_generation, Some(generation + 1));
    assert_eq!(status.available_replicas, None, "left-out field removed");
    assert_eq!(
        patch_status_if_changed(&api, &rewritten, &reduced).await?,
        StatusWrite::Unchanged
    );

    // A different status computed from an old copy of the object does not overwrite newer state.
    let error = patch_status_if_changed(&api, &written, &json!({"replicas": 5}))
        .await
        .expect_err("stale write refused");
    assert!(error.is_conflict(), "{error}");
    assert_eq!(api.get("web").await?.status, rewritten.status);
    Ok(())
}

/// A secret, a config map needing the secret, and a Deployment needing both, declared so that
/// id order (app < config < secret) is the reverse of dependency order.
fn web_children(owner: &ConfigMap) -> anyhow::Result<ChildSet> {
    let owner = owner_reference(owner)?;
    let mut secret = Secret {
        metadata: meta("web-secret"),
        ..Secret::default()
    };
    secret.metadata.owner_references = Some(vec![owner.clone()]);
    secret.metadata.labels = Some(BTreeMap::from([("tier".into(), "web".into())]));
    let mut config = config_map("web-config", &[("greeting", "hello")]);
    config.metadata.owner_references = Some(vec![owner.clone()]);
    let mut app = deployment("web-app");
    app.metadata.owner_references = Some(vec![owner]);
    Ok(ChildSet::new()
        .typed_child("app", &app)
        .typed_child("config", &config)
        .typed_child("secret", &secret)
        .depends_on("app", ["config", "secret"])
        .depends_on("config", ["secret"]))
}

/// Children are created in dependency order; a second apply writes nothing (a status written
/// on the Deployment by someone else does not count as drift); drift in one child is repaired
/// with exactly one write.
#[tokio::test]
async fn children_are_created_in_dependency_order_and_converge() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let owners: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let owner = owners
        .create(&PostParams::default(), &config_map("web", &[]))
        .await?;
    let children = web_children(&owner)?;
    assert_eq!(children.plan()?, ["secret", "config", "app"]);

    let outcome = children.apply(&client).await?;
    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            written: vec!["secret".into(), "config".into(), "app".into()],
            unchanged: vec![],
        }
    );
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get("web-secret")
        .await?;
    let config = owners.get("web-config").await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let app = deployments.get("web-app").await?;
    assert!(resource_version(&secret) < resource_version(&config));
    assert!(resource_version(&config) < resource_version(&app));
    let reference = &app.owner_references()[0];
    assert_eq!(reference.uid, owner.uid().context("uid")?);
    assert_eq!(reference.controller, Some(true));
    assert_eq!(reference.block_owner_deletion, Some(true));

    // Someone (a deployment controller) writes the child's status: still converged.
    deployments
        .patch_status(
            "web-app",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1}})),
        )
        .await?;
    let before = revision(&client).await?;
    let outcome = web_children(&owner)?.apply(&client).await?;
    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            written: vec![],
            unchanged: vec!["secret".into(), "config".into(), "app".into()],
        }
    );
    assert_eq!(revision(&client).await?, before, "converged: zero writes");

    // Drift in one child: exactly that child is written back.
    let tampered = owners
        .patch(
            "web-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"greeting": "tampered"}})),
        )
        .await?;
    let before = revision(&client).await?;
    assert_eq!(before, resource_version(&tampered));
    let outcome = web_children(&owner)?.apply(&client).await?;
    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            written: vec!["config".into()],
            unchanged: vec!["secret".into(), "app".into()],
        }
    );
    let repaired = owners.get("web-config").await?;
    assert_eq!(revision(&client).await?, before + 1, "one write");
    assert_eq!(resource_version(&repaired), before + 1);
    assert_eq!(
        repaired
            .data
            .context("data")?
            .get("greeting")
            .map(String::as_str),
        Some("hello")
    );
    Ok(())
}

/// A dependency that exists but is not ready stops the pass with `Waiting` (nothing blocks,
/// the dependent is not created); once it is ready, the next pass creates the dependent.
#[tokio::test]
async fn dependent_waits_until_its_dependency_is_ready() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let children = || {
        ChildSet::new()
            .typed_child("db", &config_map("db", &[("role", "database")]))
            .typed_child("app", &config_map("app", &[("role", "frontend")]))
            .depends_on("app", ["db"])
            .ready_when("db", |db| {
                db.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("example.com/ready"))
                    .is_some_and(|ready| ready == "true")
            })
    };

    let outcome = children().apply(&client).await?;
    assert_eq!(
        outcome,
        ApplyOutcome::Waiting {
            child: "app".into(),
            on: "db".into(),
            written: vec!["db".into()],
        }
    );
    assert!(api.get_opt("db").await?.is_some());
    assert!(api.get_opt("app").await?.is_none());

    // Still not ready: waits again, without writing anything.
    let before = revision(&client).await?;
    let outcome = children().apply(&client).await?;
    assert!(matches!(outcome, ApplyOutcome::Waiting { ref written, .. } if written.is_empty()));
    assert_eq!(revision(&client).await?, before);

    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"example.com/ready": "true"}}})),
    )
    .await?;
    let outcome = children().apply(&client).await?;
    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            written: vec!["app".into()],
            unchanged: vec!["db".into()],
        }
    );
    assert!(api.get_opt("app").await?.is_some());
    Ok(())
}

/// A cycle is reported, naming it, before any child (not even an independent one) is written.
#[tokio::test]
async fn cycle_is_reported_before_anything_is_written() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let children = ChildSet::new()
        .typed_child("a", &config_map("a", &[]))
        .typed_child("b", &config_map("b", &[]))
        .typed_child("c", &config_map("c", &[]))
        .typed_child("free", &config_map("free", &[]))
        .depends_on("a", ["c"])
        .depends_on("c", ["b"])
        .depends_on("b", ["a"]);

    let before = revision(&client).await?;
    let error = children.apply(&client).await.expect_err("cycle");
    assert!(matches!(error, ApplyError::Cycle { .. }));
    assert_eq!(error.to_string(), "dependency cycle: a -> c -> b -> a");
    assert_eq!(revision(&client).await?, before);
    for name in ["a", "b", "c", "free"] {
        assert!(api.get_opt(name).await?.is_none(), "{name} was not created");
    }
    Ok(())
}

/// With server-side apply, a field the controller stops declaring is removed from the child,
/// while fields other clients added stay; a converged set costs zero writes, and a field
/// another client changed is taken back.
#[tokio::test]
async fn server_side_children_prune_what_they_stop_declaring() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let children = |data: &[(&str, &str)]| {
        let mut config = config_map("web-config", data);
        config.metadata.labels = Some(BTreeMap::from([("tier".into(), "web".into())]));
        ChildSet::new()
            .server_side("web-controller")
            .typed_child("config", &config)
            .typed_child("app", &deployment("web-app"))
            .depends_on("app", ["config"])
    };

    let outcome = children(&[("a", "1"), ("b", "2")]).apply(&client).await?;
    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            written: vec!["config".into(), "app".into()],
            unchanged: vec![],
        }
    );
    let config = api.get("web-config").await?;
    let manager = config
        .managed_fields()
        .iter()
        .find(|entry| entry.manager.as_deref() == Some("web-controller"))
        .context("web-controller manages the child")?;
    assert_eq!(manager.operation.as_deref(), Some("Apply"));

    // Someone else adds a key; the set is still converged.
    api.patch(
        "web-config",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"extra": "kept"}})),
    )
    .await?;
    let before = revision(&client).await?;
    let outcome = children(&[("a", "1"), ("b", "2")]).apply(&client).await?;
    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            written: vec![],
            unchanged: vec!["config".into(), "app".into()],
        }
    );
    assert_eq!(revision(&client).await?, before, "converged: zero writes");

    // The controller stops declaring `b`: it is removed, the other client's key stays.
    let outcome = children(&[("a", "1")]).apply(&client).await?;
    assert!(matches!(&outcome, ApplyOutcome::Applied { written, .. } if written == &["config"]));
    let data = api.get("web-config").await?.data.context("data")?;
    assert_eq!(
        data,
        BTreeMap::from([
            ("a".to_owned(), "1".to_owned()),
            ("extra".to_owned(), "kept".to_owned())
        ])
    );

    // Another client changes a declared value: the next pass takes it back.
    api.patch(
        "web-config",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "tampered"}})),
    )
    .await?;
    let outcome = children(&[("a", "1")]).apply(&client).await?;
    assert!(matches!(&outcome, ApplyOutcome::Applied { written, .. } if written == &["config"]));
    let data = api.get("web-config").await?.data.context("data")?;
    assert_eq!(data.get("a").map(String::as_str), Some("1"));

    let before = revision(&client).await?;
    children(&[("a", "1")]).apply(&client).await?;
    assert_eq!(revision(&client).await?, before, "converged again");
    Ok(())
}
