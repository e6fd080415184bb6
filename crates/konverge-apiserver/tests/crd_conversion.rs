//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`) through a `kube::Client` on
//! the in-process server: a CronTab definition served as v1 (`spec.cronSpec`, the storage
//! version) and v2 (`spec.schedule`), converted by an in-process webhook and by a real HTTPS
//! webhook with its own CA; reads and writes in either version, lists, watches, selectors,
//! server-side apply, a storage version switched later, webhook failures with
//! kube-apiserver's messages, invalid conversion configurations, and conversion `None`
//! calling no webhook.

#[path = "common/eventually.rs"]
mod eventually;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventually::{eventually, eventually_some};

use base64::Engine as _;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use konverge_apiserver::ApiServer;
use konverge_apiserver::registry::WatchCacheConfig;
use konverge_apiserver::webhook::{Handler, Request, Response};
use konverge_store::MemStore;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

const GROUP: &str = "stable.example.com";
const CRD: &str = "crontabs.stable.example.com";
const DEADLINE: Duration = Duration::from_secs(5);

/// What the test webhook does with the next reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Converts (renames `spec.cronSpec` ⇄ `spec.schedule`).
    Convert,
    /// Answers `result.status: Failure` with a message.
    Refuse,
    /// Answers text that is not JSON.
    Garbage,
    /// Answers no objects.
    WrongCount,
    /// Converts, but changes the objects' names.
    Rename,
    /// Answers 500 with a text body.
    Crash,
}

/// A conversion webhook for CronTabs that records the reviews it gets.
struct Converter {
    mode: Mutex<Mode>,
    /// Per review: the path posted to, the version asked for, how many objects.
    reviews: Mutex<Vec<(String, String, usize)>>,
}

impl Converter {
    fn new() -> Arc<Converter> {
        Arc::new(Converter {
            mode: Mutex::new(Mode::Convert),
            reviews: Mutex::new(Vec::new()),
        })
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// The reviews since the last call: (version asked for, objects sent).
    fn take(&self) -> Vec<(String, usize)> {
        std::mem::take(&mut *self.reviews.lock().unwrap())
            .into_iter()
            .map(|(_, version, count)| (version, count))
            .collect()
    }

    fn paths(&self) -> Vec<String> {
        self.reviews
            .lock()
            .unwrap()
            .iter()
            .map(|(path, _, _)| path.clone())
            .collect()
    }

    /// Answers one review: the HTTP status and body.
    fn answer(&self, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let review: Value = serde_json::from_slice(body).expect("a review");
        let request = &review["request"];
        let desired = request["desiredAPIVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let objects = request["objects"].as_array().cloned().unwrap_or_default();
        self.reviews
            .lock()
            .unwrap()
            .push((path.to_string(), desired.clone(), objects.len()));
        let mode = *self.mode.lock().unwrap();
        let mut converted: Vec<Value> = objects.iter().map(|o| convert(o, &desired)).collect();
        let mut result = json!({"status": "Success"});
        match mode {
            Mode::Convert => {}
            Mode::Refuse => {
                converted.clear();
                result = json!({"status": "Failure", "message": "the converter refuses"});
            }
            Mode::Garbage => return (200, b"this is not json".to_vec()),
            Mode::Crash => return (500, b"converter crashed\n".to_vec()),
            Mode::WrongCount => converted.clear(),
            Mode::Rename => {
                for obj in &mut converted {
                    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
                    obj["metadata"]["name"] = json!(format!("{name}-renamed"));
                }
            }
        }
        let answer = json!({
            "apiVersion": review["apiVersion"],
            "kind": "ConversionReview",
            "response": {"uid": request["uid"], "result": result, "convertedObjects": converted},
        });
        (200, serde_json::to_vec(&answer).unwrap())
    }
}

/// A CronTab in another version: v1 has `spec.cronSpec`, v2 `spec.schedule`.
fn convert(obj: &Value, desired: &str) -> Value {
    let mut out = obj.clone();
    if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
        let (from, to) = if desired.ends_with("/v2") {
            ("cronSpec", "schedule")
        } else {
            ("schedule", "cronSpec")
        };
        if let Some(value) = spec.remove(from) {
            spec.insert(to.into(), value);
        }
    }
    out["apiVersion"] = json!(desired);
    out
}

fn handler(converter: Arc<Converter>) -> Handler {
    Arc::new(move |request: Request| {
        let converter = converter.clone();
        Box::pin(async move {
            let (status, body) = converter.answer(&request.path, &request.body);
            Response {
                status,
                body: Bytes::from(body),
            }
        })
    })
}

fn schema(field: &str) -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            field: {"type": "string"},
            "replicas": {"type": "integer"},
        }},
    }})
}

/// The CronTab definition, v1 and v2 served, `storage` stored, with `conversion`.
fn definition(conversion: Value, storage: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "listKind": "CronTabList"},
            "versions": [
                {
                    "name": "v1", "served": true, "storage": storage == "v1",
                    "schema": {"openAPIV3Schema": schema("cronSpec")},
                    "selectableFields": [{"jsonPath": ".spec.cronSpec"}],
                },
                {
                    "name": "v2", "served": true, "storage": storage == "v2",
                    "schema": {"openAPIV3Schema": schema("schedule")},
                    "selectableFields": [{"jsonPath": ".spec.schedule"}],
                },
            ],
            "conversion": conversion,
        },
    })
}

/// Conversion by the in-process webhook `default/converter`.
fn in_process() -> Value {
    json!({"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": "default", "name": "converter", "path": "/convert"}},
    }})
}

struct Env {
    server: Arc<ApiServer>,
    client: kube::Client,
    converter: Arc<Converter>,
}

impl Env {
    /// A server with the in-process converter registered and the definition established.
    async fn start(conversion: Value) -> anyhow::Result<Env> {
        Self::start_with(conversion, true).await
    }

    /// [`Env::start`], with the watch cache on or off (lists and watches from the store).
    async fn start_with(conversion: Value, watch_cache: bool) -> anyhow::Result<Env> {
        let server = ApiServer::builder(Arc::new(MemStore::new()))
            .watch_cache(WatchCacheConfig {
                enabled: watch_cache,
                ..WatchCacheConfig::default()
            })
            .build()
            .await?;
        let converter = Converter::new();
        server
            .registry()
            .webhooks()
            .register("default", "converter", handler(converter.clone()));
        let client = kube::Client::new(server.router(), "default");
        let env = Env {
            server,
            client,
            converter,
        };
        env.definitions()
            .create(
                &PostParams::default(),
                &object(definition(conversion, "v1")),
            )
            .await?;
        env.served().await?;
        Ok(env)
    }

    fn definitions(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
        Api::all_with(
            self.client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "customresourcedefinitions"),
        )
    }

    fn crontabs(&self, version: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(GROUP, version, "CronTab");
        Api::namespaced_with(
            self.client.clone(),
            "default",
            &ApiResource::from_gvk_with_plural(&gvk, "crontabs"),
        )
    }

    /// Waits until both versions are served.
    async fn served(&self) -> anyhow::Result<()> {
        for version in ["v1", "v2"] {
            eventually(&format!("{version} is served"), || async {
                self.crontabs(version)
                    .list(&ListParams::default())
                    .await
                    .is_ok()
            })
            .await;
        }
        Ok(())
    }

    /// The object as stored.
    async fn stored(&self, name: &str) -> anyhow::Result<Value> {
        let key = format!("/registry/{GROUP}/crontabs/default/{name}");
        let kv = self
            .server
            .registry()
            .store()
            .get(Bytes::from(key))
            .await?
            .ok_or_else(|| anyhow::anyhow!("{name} is not stored"))?;
        Ok(serde_json::from_slice(&kv.value)?)
    }
}

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("an object")
}

fn crontab(version: &str, name: &str, spec: Value) -> DynamicObject {
    object(json!({
        "apiVersion": format!("{GROUP}/{version}"),
        "kind": "CronTab",
        "metadata": {"name": name},
        "spec": spec,
    }))
}

fn api_version(obj: &DynamicObject) -> &str {
    obj.types.as_ref().map_or("", |t| t.api_version.as_str())
}

/// A failed request's status: code, reason, message.
fn failure(err: kube::Error) -> (u16, String, String) {
    match err {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A conversion failure as kube-apiserver answers it: 500, no reason.
fn conversion_failure(err: kube::Error) -> String {
    let (code, reason, message) = failure(err);
    assert_eq!((code, reason.as_str()), (500, ""), "{message}");
    message
}

async fn next_event<S>(stream: &mut S) -> anyhow::Result<WatchEvent<DynamicObject>>
where
    S: Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin,
{
    let event = tokio::time::timeout(DEADLINE, stream.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the watch ended"))??;
    Ok(event)
}

/// The type of an event, and its object's apiVersion, name and spec.
fn seen(event: &WatchEvent<DynamicObject>) -> (&'static str, String, String, Value) {
    let (kind, obj) = match event {
        WatchEvent::Added(o) => ("ADDED", o),
        WatchEvent::Modified(o) => ("MODIFIED", o),
        WatchEvent::Deleted(o) => ("DELETED", o),
        other => panic!("unexpected event {other:?}"),
    };
    (
        kind,
        api_version(obj).to_string(),
        obj.metadata.name.clone().unwrap_or_default(),
        obj.data["spec"].clone(),
    )
}

#[tokio::test]
async fn objects_are_stored_in_the_storage_version_and_read_in_any() -> anyhow::Result<()> {
    let env = Env::start(in_process()).await?;
    let (v1, v2) = (env.crontabs("v1"), env.crontabs("v2"));
    let v1_version = format!("{GROUP}/v1");
    let v2_version = format!("{GROUP}/v2");

    // Created in v2: converted to v1 to be stored, and the stored object back for the answer.
    let mut a = crontab("v2", "a", json!({"schedule": "hourly"}));
    a.metadata.labels = Some([("tier".to_string(), "one".to_string())].into());
    let created = v2.create(&PostParams::default(), &a).await?;
    assert_eq!(api_version(&created), v2_version);
    assert_eq!(created.data["spec"], json!({"schedule": "hourly"}));
    let stored = env.stored("a").await?;
    assert_eq!(stored["apiVersion"], v1_version);
    assert_eq!(stored["spec"], json!({"cronSpec": "hourly"}));
    assert_eq!(
        env.converter.take(),
        [(v1_version.clone(), 1), (v2_version.clone(), 1)]
    );

    // Read in v1: stored so, nothing to convert.
    let read = v1.get("a").await?;
    assert_eq!(api_version(&read), v1_version);
    assert_eq!(read.data["spec"], json!({"cronSpec": "hourly"}));
    assert_eq!(env.converter.take(), []);
    // Read in v2.
    let read = v2.get("a").await?;
    assert_eq!(api_version(&read), v2_version);
    assert_eq!(read.data["spec"], json!({"schedule": "hourly"}));
    assert_eq!(read.metadata.uid, created.metadata.uid);
    assert_eq!(
        read.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(env.converter.take(), [(v2_version.clone(), 1)]);

    // Created in v1: no webhook at all.
    v1.create(
        &PostParams::default(),
        &crontab("v1", "b", json!({"cronSpec": "daily"})),
    )
    .await?;
    assert_eq!(env.converter.take(), []);

    // A list in v2: the page's objects in one review; in v1, none.
    let listed = v2.list(&ListParams::default()).await?;
    let specs: Vec<(String, Value)> = listed
        .items
        .iter()
        .map(|o| (api_version(o).to_string(), o.data["spec"].clone()))
        .collect();
    assert_eq!(
        specs,
        [
            (v2_version.clone(), json!({"schedule": "hourly"})),
            (v2_version.clone(), json!({"schedule": "daily"})),
        ]
    );
    assert_eq!(env.converter.take(), [(v2_version.clone(), 2)]);
    assert_eq!(v1.list(&ListParams::default()).await?.items.len(), 2);
    assert_eq!(env.converter.take(), []);

    // Pages: one review per page.
    let first = v2.list(&ListParams::default().limit(1)).await?;
    assert_eq!(first.items.len(), 1);
    let token = first.metadata.continue_.clone().expect("a next page");
    let second = v2
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await?;
    assert_eq!(second.items[0].metadata.name.as_deref(), Some("b"));
    assert_eq!(second.items[0].data["spec"], json!({"schedule": "daily"}));
    assert_eq!(
        env.converter.take(),
        [(v2_version.clone(), 1), (v2_version.clone(), 1)]
    );

    // Field selectors on each version's own selectable field, and labels: selected once
    // converted.
    let daily = v2
        .list(&ListParams::default().fields("spec.schedule=daily"))
        .await?;
    assert_eq!(daily.items.len(), 1);
    assert_eq!(daily.items[0].metadata.name.as_deref(), Some("b"));
    let hourly = v1
        .list(&ListParams::default().fields("spec.cronSpec=hourly"))
        .await?;
    assert_eq!(hourly.items[0].metadata.name.as_deref(), Some("a"));
    let tier = v2.list(&ListParams::default().labels("tier=one")).await?;
    assert_eq!(tier.items.len(), 1);
    assert_eq!(tier.items[0].data["spec"], json!({"schedule": "hourly"}));
    // With a limit: the page is filled from converted objects, and goes on after the last.
    let paged = v2
        .list(&ListParams::default().labels("tier=one").limit(1))
        .await?;
    assert_eq!(paged.items.len(), 1);
    let rest = v2
        .list(
            &ListParams::default()
                .labels("tier=one")
                .limit(1)
                .continue_token(paged.metadata.continue_.as_deref().unwrap_or("")),
        )
        .await?;
    assert_eq!(rest.items.len(), 0);
    let refused = v2
        .list(&ListParams::default().fields("spec.cronSpec=hourly"))
        .await
        .unwrap_err();
    assert_eq!(
        failure(refused),
        (
            400,
            "BadRequest".into(),
            "field label not supported: spec.cronSpec".into()
        )
    );
    // A name needs no conversion to be selected: only the selected object is sent.
    env.converter.take();
    let named = v2
        .list(&ListParams::default().fields("metadata.name=b"))
        .await?;
    assert_eq!(named.items.len(), 1);
    assert_eq!(env.converter.take(), [(v2_version.clone(), 1)]);
    Ok(())
}

#[tokio::test]
async fn writes_through_the_other_version_are_stored_converted() -> anyhow::Result<()> {
    let env = Env::start(in_process()).await?;
    let (v1, v2) = (env.crontabs("v1"), env.crontabs("v2"));
    v1.create(
        &PostParams::default(),
        &crontab("v1", "a", json!({"cronSpec": "hourly"})),
    )
    .await?;

    // Update in v2.
    let mut current = v2.get("a").await?;
    current.data["spec"]["schedule"] = json!("daily");
    let updated = v2.replace("a", &PostParams::default(), &current).await?;
    assert_eq!(api_version(&updated), format!("{GROUP}/v2"));
    assert_eq!(updated.data["spec"], json!({"schedule": "daily"}));
    assert_eq!(updated.metadata.generation, Some(2));
    assert_eq!(env.stored("a").await?["spec"], json!({"cronSpec": "daily"}));

    // Merge patch in v2.
    let patched = v2
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    assert_eq!(
        patched.data["spec"],
        json!({"schedule": "daily", "replicas": 3})
    );
    assert_eq!(
        env.stored("a").await?["spec"],
        json!({"cronSpec": "daily", "replicas": 3})
    );

    // A dry run goes there and back, and stores nothing.
    let dry = v2
        .patch(
            "a",
            &PatchParams::default().dry_run(),
            &Patch::Merge(json!({"spec": {"replicas": 9}})),
        )
        .await?;
    assert_eq!(dry.data["spec"]["replicas"], 9);
    assert_eq!(env.stored("a").await?["spec"]["replicas"], 3);

    // Server-side apply in v2: who owns what is known in v2 (the update above took
    // spec.schedule), the applier's entry is recorded in v2 and stays so, whatever version
    // it is read in.
    let config = json!({
        "apiVersion": format!("{GROUP}/v2"),
        "kind": "CronTab",
        "metadata": {"name": "a"},
        "spec": {"schedule": "weekly"},
    });
    let conflict = v2
        .patch(
            "a",
            &PatchParams::apply("scheduler"),
            &Patch::Apply(&config),
        )
        .await
        .unwrap_err();
    assert_eq!(
        failure(conflict),
        (
            409,
            "Conflict".into(),
            "Apply failed with 1 conflict: conflict with \"unknown\" using stable.example.com/v2: .spec.schedule".into()
        )
    );
    let applied = v2
        .patch(
            "a",
            &PatchParams::apply("scheduler").force(),
            &Patch::Apply(json!({
                "apiVersion": format!("{GROUP}/v2"),
                "kind": "CronTab",
                "metadata": {"name": "a"},
                "spec": {"schedule": "weekly"},
            })),
        )
        .await?;
    assert_eq!(applied.data["spec"]["schedule"], "weekly");
    let read = v1.get("a").await?;
    assert_eq!(read.data["spec"]["cronSpec"], "weekly");
    let entry = read
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("scheduler"))
        .expect("the applier's entry");
    assert_eq!(entry.operation.as_deref(), Some("Apply"));
    assert_eq!(entry.api_version.as_deref(), Some("stable.example.com/v2"));
    assert_eq!(
        entry.fields_v1.map(|f| f.0),
        Some(json!({"f:spec": {"f:schedule": {}}}))
    );
    // Applied again, unchanged: no conflict with itself, nothing new stored.
    let again = v2
        .patch(
            "a",
            &PatchParams::apply("scheduler"),
            &Patch::Apply(json!({
                "apiVersion": format!("{GROUP}/v2"),
                "kind": "CronTab",
                "metadata": {"name": "a"},
                "spec": {"schedule": "weekly"},
            })),
        )
        .await?;
    assert_eq!(
        again.metadata.resource_version,
        applied.metadata.resource_version
    );

    // An apply that creates, in v2.
    let made = v2
        .patch(
            "c",
            &PatchParams::apply("scheduler"),
            &Patch::Apply(json!({
                "apiVersion": format!("{GROUP}/v2"),
                "kind": "CronTab",
                "metadata": {"name": "c"},
                "spec": {"schedule": "monthly"},
            })),
        )
        .await?;
    assert_eq!(made.data["spec"]["schedule"], "monthly");
    assert_eq!(
        env.stored("c").await?["spec"],
        json!({"cronSpec": "monthly"})
    );

    // Delete collection in v2 answers in v2.
    let deleted = v2
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let items = deleted.left().expect("the deleted objects").items;
    let shown: Vec<(String, Value)> = items
        .iter()
        .map(|o| (api_version(o).to_string(), o.data["spec"].clone()))
        .collect();
    assert_eq!(
        shown,
        [
            (
                format!("{GROUP}/v2"),
                json!({"schedule": "weekly", "replicas": 3})
            ),
            (format!("{GROUP}/v2"), json!({"schedule": "monthly"})),
        ]
    );
    assert!(v1.list(&ListParams::default()).await?.items.is_empty());
    Ok(())
}

#[tokio::test]
async fn watches_in_either_version_see_converted_objects() -> anyhow::Result<()> {
    watches(true).await
}

#[tokio::test]
async fn watches_from_the_store_see_converted_objects() -> anyhow::Result<()> {
    watches(false).await
}

/// Watches in v1 and v2, served from the watch cache or from the store.
async fn watches(watch_cache: bool) -> anyhow::Result<()> {
    let env = Env::start_with(in_process(), watch_cache).await?;
    let (v1, v2) = (env.crontabs("v1"), env.crontabs("v2"));
    let v2_version = format!("{GROUP}/v2");
    v1.create(
        &PostParams::default(),
        &crontab("v1", "a", json!({"cronSpec": "hourly"})),
    )
    .await?;

    let mut in_v2 = v2.watch(&WatchParams::default(), "0").await?.boxed();
    let mut in_v1 = v1.watch(&WatchParams::default(), "0").await?.boxed();
    let mut daily = v2
        .watch(&WatchParams::default().fields("spec.schedule=daily"), "0")
        .await?
        .boxed();
    // The initial events.
    assert_eq!(
        seen(&next_event(&mut in_v2).await?),
        (
            "ADDED",
            v2_version.clone(),
            "a".into(),
            json!({"schedule": "hourly"})
        )
    );
    assert_eq!(
        seen(&next_event(&mut in_v1).await?),
        (
            "ADDED",
            format!("{GROUP}/v1"),
            "a".into(),
            json!({"cronSpec": "hourly"})
        )
    );

    // Changes made in v1 are seen in v2.
    v1.create(
        &PostParams::default(),
        &crontab("v1", "b", json!({"cronSpec": "daily"})),
    )
    .await?;
    v1.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cronSpec": "weekly"}})),
    )
    .await?;
    v1.delete("b", &DeleteParams::default()).await?;
    let events = [
        ("ADDED", json!({"schedule": "daily"})),
        ("MODIFIED", json!({"schedule": "weekly"})),
        ("DELETED", json!({"schedule": "weekly"})),
    ];
    for (kind, spec) in events {
        assert_eq!(
            seen(&next_event(&mut in_v2).await?),
            (kind, v2_version.clone(), "b".into(), spec)
        );
    }
    assert_eq!(
        seen(&next_event(&mut in_v1).await?),
        (
            "ADDED",
            format!("{GROUP}/v1"),
            "b".into(),
            json!({"cronSpec": "daily"})
        )
    );
    // The selected watch saw b while it was daily: added, then gone when it became weekly.
    assert_eq!(
        seen(&next_event(&mut daily).await?),
        (
            "ADDED",
            v2_version.clone(),
            "b".into(),
            json!({"schedule": "daily"})
        )
    );
    let gone = seen(&next_event(&mut daily).await?);
    assert_eq!(
        (gone.0, gone.1, gone.2),
        ("DELETED", v2_version.clone(), "b".into())
    );

    // A change that cannot be converted ends the watch with an internal error.
    env.converter.set(Mode::Refuse);
    v1.create(
        &PostParams::default(),
        &crontab("v1", "c", json!({"cronSpec": "daily"})),
    )
    .await?;
    match next_event(&mut in_v2).await? {
        WatchEvent::Error(status) => assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (
                500,
                "InternalError",
                "Internal error occurred: conversion webhook for stable.example.com/v1, Kind=CronTab failed: the converter refuses"
            )
        ),
        other => panic!("expected an error, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(DEADLINE, in_v2.next())
            .await?
            .is_none()
    );
    // The watch in the version objects are stored in goes on.
    assert_eq!(seen(&next_event(&mut in_v1).await?).0, "MODIFIED");
    Ok(())
}

#[tokio::test]
async fn a_storage_version_switched_later_leaves_old_objects_where_they_are() -> anyhow::Result<()>
{
    let env = Env::start(in_process()).await?;
    let (v1, v2) = (env.crontabs("v1"), env.crontabs("v2"));
    v2.create(
        &PostParams::default(),
        &crontab("v2", "old", json!({"schedule": "hourly"})),
    )
    .await?;
    assert_eq!(
        env.stored("old").await?["apiVersion"],
        format!("{GROUP}/v1")
    );

    // v2 becomes the storage version.
    let mut crd = env.definitions().get(CRD).await?;
    crd.data["spec"]["versions"][0]["storage"] = json!(false);
    crd.data["spec"]["versions"][1]["storage"] = json!(true);
    env.definitions()
        .replace(CRD, &PostParams::default(), &crd)
        .await?;
    eventually("v2 is among the stored versions", || async {
        env.definitions()
            .get(CRD)
            .await
            .is_ok_and(|crd| crd.data["status"]["storedVersions"] == json!(["v1", "v2"]))
    })
    .await;
    env.converter.take();

    // New objects are stored in v2, without a webhook when written in v2.
    v2.create(
        &PostParams::default(),
        &crontab("v2", "new", json!({"schedule": "daily"})),
    )
    .await?;
    assert_eq!(env.converter.take(), []);
    let new = env.stored("new").await?;
    assert_eq!(new["apiVersion"], format!("{GROUP}/v2"));
    assert_eq!(new["spec"], json!({"schedule": "daily"}));
    assert_eq!(
        env.stored("old").await?["apiVersion"],
        format!("{GROUP}/v1")
    );

    // Each read sends what is not in its version yet.
    let listed = v2.list(&ListParams::default()).await?;
    assert!(listed.items.iter().all(
        |o| api_version(o) == format!("{GROUP}/v2") && o.data["spec"].get("schedule").is_some()
    ));
    assert_eq!(env.converter.take(), [(format!("{GROUP}/v2"), 1)]);
    let listed = v1.list(&ListParams::default()).await?;
    assert!(listed.items.iter().all(
        |o| api_version(o) == format!("{GROUP}/v1") && o.data["spec"].get("cronSpec").is_some()
    ));
    assert_eq!(env.converter.take(), [(format!("{GROUP}/v1"), 1)]);

    // Written again, the old object moves to the storage version.
    v1.patch(
        "old",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await?;
    let old = env.stored("old").await?;
    assert_eq!(old["apiVersion"], format!("{GROUP}/v2"));
    assert_eq!(old["spec"], json!({"schedule": "hourly", "replicas": 2}));
    Ok(())
}

#[tokio::test]
async fn webhook_failures_are_answered_as_kube_apiserver_answers_them() -> anyhow::Result<()> {
    let env = Env::start(in_process()).await?;
    let (v1, v2) = (env.crontabs("v1"), env.crontabs("v2"));
    for name in ["a", "b"] {
        v1.create(
            &PostParams::default(),
            &crontab("v1", name, json!({"cronSpec": "hourly"})),
        )
        .await?;
    }
    let from_v1 = "conversion webhook for stable.example.com/v1, Kind=CronTab";

    env.converter.set(Mode::Refuse);
    assert_eq!(
        conversion_failure(v2.get("a").await.unwrap_err()),
        format!("{from_v1} failed: the converter refuses")
    );
    assert_eq!(
        conversion_failure(v2.list(&ListParams::default()).await.unwrap_err()),
        format!("{from_v1} failed: the converter refuses")
    );
    // A write in v2 cannot be stored: it is not.
    let refused = v2
        .create(
            &PostParams::default(),
            &crontab("v2", "c", json!({"schedule": "daily"})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        conversion_failure(refused),
        "conversion webhook for stable.example.com/v2, Kind=CronTab failed: the converter refuses"
    );
    assert_eq!(failure(v1.get("c").await.unwrap_err()).0, 404);
    // Reads in the version objects are stored in need no webhook.
    assert_eq!(v1.list(&ListParams::default()).await?.items.len(), 2);

    env.converter.set(Mode::Garbage);
    assert_eq!(
        conversion_failure(v2.get("a").await.unwrap_err()),
        format!(
            "{from_v1} failed: couldn't get version/kind; json parse error: json: cannot unmarshal string into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}"
        )
    );
    env.converter.set(Mode::Crash);
    assert_eq!(
        conversion_failure(v2.get("a").await.unwrap_err()),
        format!(
            "{from_v1} failed: an error on the server (\"converter crashed\") has prevented the request from succeeding"
        )
    );
    env.converter.set(Mode::WrongCount);
    assert_eq!(
        conversion_failure(v2.get("a").await.unwrap_err()),
        format!("{from_v1} returned 0 objects, expected 1")
    );
    assert_eq!(
        conversion_failure(v2.list(&ListParams::default()).await.unwrap_err()),
        format!("{from_v1} returned 0 objects, expected 2")
    );
    env.converter.set(Mode::Rename);
    assert_eq!(
        conversion_failure(v2.get("a").await.unwrap_err()),
        format!("{from_v1} returned invalid object: must have the same name: a != a-renamed")
    );
    assert_eq!(
        conversion_failure(v2.list(&ListParams::default()).await.unwrap_err()),
        format!(
            "{from_v1} returned invalid converted object at index 0: must have the same name: a != a-renamed"
        )
    );
    let patch = v2
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        conversion_failure(patch),
        format!("{from_v1} returned invalid object: must have the same name: a != a-renamed")
    );

    // A watch whose initial objects cannot be converted ends with an internal error.
    env.converter.set(Mode::Refuse);
    let mut watch = v2.watch(&WatchParams::default(), "0").await?.boxed();
    match next_event(&mut watch).await? {
        WatchEvent::Error(status) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (500, "InternalError")
            );
            assert_eq!(
                status.message,
                format!("Internal error occurred: {from_v1} failed: the converter refuses")
            );
        }
        other => panic!("expected an error, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(DEADLINE, watch.next())
            .await?
            .is_none()
    );

    // So does a watch whose next event cannot be.
    env.converter.set(Mode::Convert);
    let mut watch = v2.watch(&WatchParams::default(), "0").await?.boxed();
    for _ in 0..2 {
        assert_eq!(seen(&next_event(&mut watch).await?).0, "ADDED");
    }
    env.converter.set(Mode::Refuse);
    v1.create(
        &PostParams::default(),
        &crontab("v1", "d", json!({"cronSpec": "daily"})),
    )
    .await?;
    match next_event(&mut watch).await? {
        WatchEvent::Error(status) => assert_eq!(
            status.message,
            format!("Internal error occurred: {from_v1} failed: the converter refuses")
        ),
        other => panic!("expected an error, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(DEADLINE, watch.next())
            .await?
            .is_none()
    );
    Ok(())
}

#[tokio::test]
async fn a_definition_converted_by_none_calls_no_webhook() -> anyhow::Result<()> {
    let env = Env::start(json!({"strategy": "None"})).await?;
    let (v1, v2) = (env.crontabs("v1"), env.crontabs("v2"));
    let mut watch = v1.watch(&WatchParams::default(), "0").await?.boxed();
    v2.create(
        &PostParams::default(),
        &crontab("v2", "a", json!({"schedule": "hourly"})),
    )
    .await?;
    assert_eq!(env.stored("a").await?["apiVersion"], format!("{GROUP}/v1"));
    assert_eq!(api_version(&v1.get("a").await?), format!("{GROUP}/v1"));
    assert_eq!(v2.list(&ListParams::default()).await?.items.len(), 1);
    v2.patch(
        "a",
        &PatchParams::apply("applier").force(),
        &Patch::Apply(json!({
            "apiVersion": format!("{GROUP}/v2"), "kind": "CronTab",
            "metadata": {"name": "a"}, "spec": {"schedule": "daily"},
        })),
    )
    .await?;
    assert_eq!(
        seen(&next_event(&mut watch).await?).1,
        format!("{GROUP}/v1")
    );
    assert!(env.converter.take().is_empty());
    Ok(())
}

/// An HTTPS webhook on a loopback port, with a certificate for 127.0.0.1 signed by its own
/// CA: the port, the CA's PEM, and the task serving it (aborting it closes the port).
async fn https_webhook(
    converter: Arc<Converter>,
) -> anyhow::Result<(u16, String, tokio::task::JoinHandle<()>)> {
    use http_body_util::BodyExt;
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "converter-ca");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate()?)?;
    let key = rcgen::KeyPair::generate()?;
    let cert =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.signed_by(&key, &ca)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, converter) = (acceptor.clone(), converter.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let converter = converter.clone();
                        async move {
                            let path = request.uri().path().to_string();
                            let body = request.into_body().collect().await?.to_bytes();
                            let (status, answer) = converter.answer(&path, &body);
                            let mut response = hyper::Response::new(http_body_util::Full::new(
                                Bytes::from(answer),
                            ));
                            *response.status_mut() =
                                hyper::StatusCode::from_u16(status).unwrap_or_default();
                            Ok::<_, hyper::Error>(response)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok((port, ca.pem(), task))
}

#[tokio::test]
async fn a_real_https_webhook_converts_and_its_failures_are_go_errors() -> anyhow::Result<()> {
    let converter = Converter::new();
    let (port, ca_pem, serving) = https_webhook(converter.clone()).await?;
    let url = format!("https://127.0.0.1:{port}/convert");
    let bundle = base64::engine::general_purpose::STANDARD.encode(&ca_pem);
    // v1beta1 first: the server speaks it, so it sends v1beta1 reviews.
    let conversion = |bundle: &str| {
        json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1beta1", "v1"],
            "clientConfig": {"url": url, "caBundle": bundle},
        }})
    };
    let env = Env::start(conversion(&bundle)).await?;
    let (v1, v2) = (env.crontabs("v1"), env.crontabs("v2"));
    let created = v2
        .create(
            &PostParams::default(),
            &crontab("v2", "a", json!({"schedule": "hourly"})),
        )
        .await?;
    assert_eq!(created.data["spec"], json!({"schedule": "hourly"}));
    assert_eq!(
        env.stored("a").await?["spec"],
        json!({"cronSpec": "hourly"})
    );
    assert_eq!(
        v1.get("a").await?.data["spec"],
        json!({"cronSpec": "hourly"})
    );
    assert_eq!(
        v2.list(&ListParams::default()).await?.items[0].data["spec"],
        json!({"schedule": "hourly"})
    );
    assert_eq!(
        converter.paths().first().map(String::as_str),
        Some("/convert")
    );
    assert_eq!(
        converter.take(),
        [
            (format!("{GROUP}/v1"), 1),
            (format!("{GROUP}/v2"), 1),
            (format!("{GROUP}/v2"), 1),
        ]
    );

    // Signed by a CA the definition does not trust.
    let other = rcgen::CertifiedIssuer::self_signed(
        {
            let mut p = rcgen::CertificateParams::default();
            p.distinguished_name
                .push(rcgen::DnType::CommonName, "another-ca");
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            p
        },
        rcgen::KeyPair::generate()?,
    )?;
    let mut crd = env.definitions().get(CRD).await?;
    crd.data["spec"]["conversion"] =
        conversion(&base64::engine::general_purpose::STANDARD.encode(other.pem()));
    env.definitions()
        .replace(CRD, &PostParams::default(), &crd)
        .await?;
    let untrusted = format!(
        "conversion webhook for stable.example.com/v1, Kind=CronTab failed: Post \"{url}\": tls: failed to verify certificate: x509: certificate signed by unknown authority"
    );
    let refused = eventually_some("the new CA is used", || async { v2.get("a").await.err() }).await;
    assert_eq!(conversion_failure(refused), untrusted);

    // The webhook is down.
    crd = env.definitions().get(CRD).await?;
    crd.data["spec"]["conversion"] = conversion(&bundle);
    env.definitions()
        .replace(CRD, &PostParams::default(), &crd)
        .await?;
    serving.abort();
    let _ = serving.await;
    let down = format!(
        "conversion webhook for stable.example.com/v1, Kind=CronTab failed: Post \"{url}\": dial tcp 127.0.0.1:{port}: connect: connection refused"
    );
    eventually("the webhook is called at its new address", || async {
        let message = conversion_failure(v2.get("a").await.unwrap_err());
        assert!(message == down || message == untrusted, "{message}");
        message == down
    })
    .await;
    let refused = v2
        .create(
            &PostParams::default(),
            &crontab("v2", "b", json!({"schedule": "daily"})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        conversion_failure(refused),
        format!(
            "conversion webhook for stable.example.com/v2, Kind=CronTab failed: Post \"{url}\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    Ok(())
}

/// The message of a refused definition.
fn invalid(causes: &[&str]) -> String {
    let list = if causes.len() == 1 {
        causes[0].to_string()
    } else {
        format!("[{}]", causes.join(", "))
    };
    format!("CustomResourceDefinition.apiextensions.k8s.io \"{CRD}\" is invalid: {list}")
}

#[tokio::test]
async fn invalid_conversion_configurations_are_refused_with_kube_apiserver_messages()
-> anyhow::Result<()> {
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .build()
        .await?;
    let env = Env {
        client: kube::Client::new(server.router(), "default"),
        server,
        converter: Converter::new(),
    };
    let service = |extra: Value| {
        let mut service = json!({"namespace": "default", "name": "converter"});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            service[k] = v;
        }
        json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": service},
        }})
    };
    let url = |url: &str| {
        json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": url},
        }})
    };
    const CLIENT: &str = "spec.conversion.webhookClientConfig";
    const VERSIONS: &str = "spec.conversion.conversionReviewVersions";
    let form = "; desired format: https://host[/path]";
    let cases: Vec<(Value, Option<bool>, Vec<String>)> = vec![
        (
            json!({"strategy": "Webhook"}),
            None,
            vec![
                format!("{CLIENT}: Required value: required when strategy is set to Webhook"),
                format!("{VERSIONS}: Required value"),
            ],
        ),
        (
            json!({"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://hook.example.com", "service": {"namespace": "default", "name": "converter"}},
            }}),
            None,
            vec![format!("{CLIENT}: Required value: exactly one of url or service is required")],
        ),
        (
            url("http://user:secret@hook.example.com/convert?debug=1#top"),
            None,
            vec![
                format!("{CLIENT}.url: Invalid value: \"http\": 'https' is the only allowed URL scheme{form}"),
                format!("{CLIENT}.url: Invalid value: \"user:secret\": user information is not permitted in the URL"),
                format!("{CLIENT}.url: Invalid value: \"top\": fragments are not permitted in the URL"),
                format!("{CLIENT}.url: Invalid value: \"debug=1\": query parameters are not permitted in the URL"),
            ],
        ),
        (
            url("https:///convert"),
            None,
            vec![format!("{CLIENT}.url: Invalid value: \"\": host must be specified{form}")],
        ),
        (
            url("://nothing"),
            None,
            vec![format!(
                "{CLIENT}.url: Required value: url must be a valid URL: parse \"://nothing\": missing protocol scheme{form}"
            )],
        ),
        (
            // kube-apiserver reports a missing namespace at `name` (it passes the two the
            // other way round).
            service(json!({"namespace": "", "port": 0, "path": "/Bad//x"})),
            None,
            vec![
                format!("{CLIENT}.service.name: Required value: service name is required"),
                format!("{CLIENT}.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive"),
                format!("{CLIENT}.service.path: Invalid value: \"/Bad//x\": segment[0]: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
                format!("{CLIENT}.service.path: Invalid value: \"/Bad//x\": segment[1] may not be empty"),
            ],
        ),
        (
            service(json!({"name": "", "path": "convert"})),
            None,
            vec![
                format!("{CLIENT}.service.namespace: Required value: service namespace is required"),
                format!("{CLIENT}.service.path: Invalid value: \"convert\": must start with a '/'"),
            ],
        ),
        (
            json!({"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v2", "v2"],
                "clientConfig": {"url": "https://hook.example.com"},
            }}),
            None,
            vec![
                format!("{VERSIONS}[1]: Invalid value: \"v2\": duplicate version"),
                format!("{VERSIONS}: Invalid value: []string{{\"v2\", \"v2\"}}: must include at least one of v1, v1beta1"),
            ],
        ),
        (
            json!({"strategy": "None", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://hook.example.com"},
            }}),
            None,
            vec![
                format!("{CLIENT}: Forbidden: should not be set when strategy is not set to Webhook"),
                format!("{VERSIONS}: Forbidden: should not be set when strategy is not set to Webhook"),
            ],
        ),
        (
            service(json!({})),
            Some(true),
            vec![
                "spec.conversion.strategy: Invalid value: \"Webhook\": must be None if spec.preserveUnknownFields is true".into(),
                "spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead".into(),
            ],
        ),
        (
            json!({"strategy": "Magic"}),
            None,
            vec!["spec.conversion.strategy: Unsupported value: \"Magic\": supported values: \"None\", \"Webhook\"".into()],
        ),
    ];
    for (conversion, preserve, causes) in cases {
        let mut crd = definition(conversion.clone(), "v1");
        if let Some(preserve) = preserve {
            crd["spec"]["preserveUnknownFields"] = json!(preserve);
        }
        let err = env
            .definitions()
            .create(&PostParams::default(), &object(crd))
            .await
            .unwrap_err();
        let causes: Vec<&str> = causes.iter().map(String::as_str).collect();
        assert_eq!(
            failure(err),
            (422, "Invalid".into(), invalid(&causes)),
            "{conversion}"
        );
    }

    // A valid Service reference gets the default port; an invalid caBundle is accepted on
    // create, but an established definition with a valid one cannot take an invalid one.
    let ca = rcgen::CertifiedIssuer::self_signed(
        {
            let mut p = rcgen::CertificateParams::default();
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            p
        },
        rcgen::KeyPair::generate()?,
    )?;
    let mut conversion = service(json!({}));
    conversion["webhook"]["clientConfig"]["caBundle"] =
        json!(base64::engine::general_purpose::STANDARD.encode(ca.pem()));
    env.definitions()
        .create(
            &PostParams::default(),
            &object(definition(conversion, "v1")),
        )
        .await?;
    env.served().await?;
    let mut crd = eventually_some("the definition is established", || async {
        let crd = env.definitions().get(CRD).await.ok()?;
        let established = crd.data["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        established.then_some(crd)
    })
    .await;
    assert_eq!(
        crd.data["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
        443
    );
    crd.data["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] =
        json!(base64::engine::general_purpose::STANDARD.encode("not a pem"));
    let err = env
        .definitions()
        .replace(CRD, &PostParams::default(), &crd)
        .await
        .unwrap_err();
    assert_eq!(
        failure(err),
        (
            422,
            "Invalid".into(),
            invalid(&[&format!(
                "{CLIENT}.caBundle: Invalid value: []byte{{0x6e, 0x6f, 0x74, 0x20, 0x61, 0x20, 0x70, 0x65, 0x6d}}: unable to load root certificates: unable to parse bytes as PEM block"
            )])
        )
    );
    let mut invalid_on_create = definition(service(json!({})), "v1");
    invalid_on_create["metadata"]["name"] = json!("other");
    invalid_on_create["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] =
        json!(base64::engine::general_purpose::STANDARD.encode("not a pem"));
    let err = env
        .definitions()
        .create(&PostParams::default(), &object(invalid_on_create))
        .await
        .unwrap_err();
    // Refused for its name only, not for its caBundle.
    assert!(!failure(err).2.contains("caBundle"));
    Ok(())
}
