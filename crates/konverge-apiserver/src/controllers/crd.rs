//! The definition controller: serves what CustomResourceDefinitions define.
//!
//! For each definition it checks that its names are free in its group, installs one
//! [`ResourceType`] per served version into the catalog (discovery, OpenAPI and the routes
//! follow at once), and reports `NamesAccepted` and `Established` in the definition's status.
//! A definition being deleted is `Terminating`: its objects are deleted, then its cleanup
//! finalizer is removed, and once it is gone its resources stop being served.
//!
//! It follows the definitions with one store watch and acts on each change as it arrives, so
//! a new definition is established within milliseconds. It runs in every server, with or
//! without the other control loops: serving custom resources is part of the API.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{EventKind, KeyRange, RangeRequest, WatchRequest, WatchResponse};
use serde_json::{Value, json};

use crate::error::{ApiError, Reason};
use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions};
use crate::resources::ResourceType;
use crate::resources::crd::{self, CLEANUP_FINALIZER};

/// How often terminating definitions are looked at again (their objects' finalizers may
/// have been removed since).
const RESYNC: Duration = Duration::from_millis(500);

/// How often the custom groups' APIServices are looked at without a definition changing.
const API_SERVICE_RESYNC: Duration = Duration::from_secs(10);

/// The field manager of the controller's status writes.
const MANAGER: &str = "kube-apiserver";

/// How many times this process's definition controllers changed a catalog.
static CATALOG_CHANGES: AtomicU64 = AtomicU64::new(0);

/// A number that changes whenever a definition controller (of any server in this process)
/// adds or removes served resources, so what was derived from a catalog can be dropped. It
/// moves after the catalog changed, never before.
pub fn catalog_changes() -> u64 {
    CATALOG_CHANGES.load(Ordering::Acquire)
}

fn catalog_changed() {
    CATALOG_CHANGES.fetch_add(1, Ordering::AcqRel);
}

fn definitions(registry: &Registry) -> Option<Arc<ResourceType>> {
    registry
        .catalog()
        .get(crd::GROUP, "v1", "customresourcedefinitions")
}

fn prefix(registry: &Registry) -> Option<KeyRange> {
    definitions(registry).map(|rt| KeyRange::prefix(Bytes::from(rt.storage_prefix())))
}

/// Installs the resources of every stored definition (so a restarted server serves them
/// before it answers its first request).
pub async fn install_existing(registry: &Registry) -> Result<(), konverge_store::Error> {
    let Some(range) = prefix(registry) else {
        return Ok(());
    };
    let listed = registry.store().range(RangeRequest::new(range)).await?;
    for kv in &listed.kvs {
        if let Ok(obj) = serde_json::from_slice::<Value>(&kv.value) {
            install(registry, &obj);
        }
    }
    Ok(())
}

/// Runs the controller until the store closes.
pub async fn run(registry: Registry) {
    loop {
        match run_once(&registry).await {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(error = %err, "definition controller restarting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn run_once(registry: &Registry) -> Result<(), konverge_store::Error> {
    let Some(range) = prefix(registry) else {
        return Ok(());
    };
    let store = registry.store().clone();
    let listed = store.range(RangeRequest::new(range.clone())).await?;
    let mut terminating = BTreeSet::new();
    for kv in &listed.kvs {
        if let Ok(obj) = serde_json::from_slice::<Value>(&kv.value) {
            reconcile(registry, &obj, &mut terminating).await;
        }
    }
    let mut watch = store
        .watch(WatchRequest::new(range).from_revision(listed.revision + 1))
        .await?;
    super::api_services::sync(registry).await;
    let mut resync = tokio::time::interval(RESYNC);
    // The first tick is now: the pass above was the first.
    let mut api_services = tokio::time::interval(API_SERVICE_RESYNC);
    api_services.tick().await;
    loop {
        tokio::select! {
            message = watch.recv() => match message {
                Some(Ok(WatchResponse::Events(events))) => {
                    // The definitions' groups' APIServices follow each batch of changes.
                    let changed = !events.is_empty();
                    for event in events {
                        match event.kind {
                            EventKind::Put => {
                                if let Ok(obj) = serde_json::from_slice::<Value>(&event.kv.value) {
                                    reconcile(registry, &obj, &mut terminating).await;
                                }
                            }
                            EventKind::Delete => {
                                let key = String::from_utf8_lossy(&event.kv.key);
                                let name = key.rsplit('/').next().unwrap_or("").to_string();
                                terminating.remove(&name);
                                uninstall(registry, &name);
                            }
                        }
                    }
                    if changed {
                        super::api_services::sync(registry).await;
                    }
                }
                Some(Ok(WatchResponse::Progress(_))) => {}
                Some(Err(konverge_store::Error::Closed)) | None => return Ok(()),
                Some(Err(err)) => return Err(err),
            },
            // APIServices changed or deleted by someone else are put back.
            _ = api_services.tick() => super::api_services::sync(registry).await,
            _ = resync.tick(), if !terminating.is_empty() => {
                let Some(rt) = definitions(registry) else { continue };
                for name in terminating.clone() {
                    match registry.get(&rt, None, &name, None).await {
                        Ok(obj) => reconcile(registry, &obj, &mut terminating).await,
                        Err(_) => {
                            terminating.remove(&name);
                        }
                    }
                }
            }
        }
    }
}

async fn reconcile(registry: &Registry, crd: &Value, terminating: &mut BTreeSet<String>) {
    let name = crate::resources::meta::meta_str(crd, "name")
        .unwrap_or("")
        .to_string();
    let result = if crd.pointer("/metadata/deletionTimestamp").is_some() {
        terminating.insert(name.clone());
        clean_up(registry, crd).await
    } else {
        let accepted = install(registry, crd);
        write_status(registry, &name, accepted).await
    };
    if let Err(err) = result {
        tracing::debug!(crd = %name, error = %err.message, "definition not reconciled yet");
    }
}

/// Why a definition's names are not accepted: the names another resource of its group
/// already uses.
fn conflict(registry: &Registry, crd: &Value) -> Option<(&'static str, String)> {
    let group = crd["spec"]["group"].as_str().unwrap_or("");
    let names = &crd["spec"]["names"];
    let own = crate::resources::meta::meta_str(crd, "name").unwrap_or("");
    let others: Vec<Arc<ResourceType>> = registry
        .catalog()
        .all()
        .into_iter()
        .filter(|rt| rt.group == group)
        .filter(|rt| rt.custom.as_ref().is_none_or(|c| c.crd_name != own))
        .collect();
    let plural = names["plural"].as_str().unwrap_or("");
    let kind = names["kind"].as_str().unwrap_or("");
    if others
        .iter()
        .any(|rt| rt.plural == plural || rt.singular == plural)
    {
        return Some(("PluralConflict", format!("{plural:?} is already in use")));
    }
    if others.iter().any(|rt| rt.kind == kind) {
        return Some(("KindConflict", format!("{kind:?} is already in use")));
    }
    for short in names["shortNames"].as_array().into_iter().flatten() {
        let short = short.as_str().unwrap_or("");
        if others
            .iter()
            .any(|rt| rt.short_names.iter().any(|s| s == short))
        {
            return Some(("ShortNamesConflict", format!("{short:?} is already in use")));
        }
    }
    None
}

/// Serves a definition's versions (replacing what it served before). Returns the names
/// conflict that keeps it from being served, if any.
fn install(registry: &Registry, crd: &Value) -> Option<(&'static str, String)> {
    if let Some(problem) = conflict(registry, crd) {
        return Some(problem);
    }
    let name = crate::resources::meta::meta_str(crd, "name").unwrap_or("");
    let types = crd::served_types(crd);
    let catalog = registry.catalog();
    let keep: BTreeSet<(String, String, String)> = types
        .iter()
        .map(|rt| (rt.group.clone(), rt.version.clone(), rt.plural.clone()))
        .collect();
    for old in catalog.all() {
        if old.custom.as_ref().is_some_and(|c| c.crd_name == name)
            && !keep.contains(&(old.group.clone(), old.version.clone(), old.plural.clone()))
        {
            catalog.remove(&old.group, &old.version, &old.plural);
            catalog_changed();
        }
    }
    for rt in types {
        let unchanged = catalog
            .get(&rt.group, &rt.version, &rt.plural)
            .and_then(|old| old.custom.as_ref().map(|c| c.fingerprint.clone()))
            .zip(rt.custom.as_ref().map(|c| c.fingerprint.clone()))
            .is_some_and(|(a, b)| a == b);
        if !unchanged {
            catalog.insert(rt);
            catalog_changed();
        }
    }
    None
}

/// Stops serving a definition's resources.
fn uninstall(registry: &Registry, name: &str) {
    let catalog = registry.catalog();
    for rt in catalog.all() {
        if rt.custom.as_ref().is_some_and(|c| c.crd_name == name) {
            catalog.remove(&rt.group, &rt.version, &rt.plural);
            catalog_changed();
        }
    }
}

fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "lastTransitionTime": crate::resources::meta::now(),
        "reason": reason,
        "message": message,
    })
}

/// Sets conditions ([`crate::resources::meta::set_condition`]), in the definition's order.
fn set_conditions(status: &mut Value, wanted: Vec<Value>) {
    for condition in wanted {
        crate::resources::meta::set_condition(status, condition);
    }
    if let Some(conditions) = status["conditions"].as_array_mut() {
        conditions.sort_by_key(|c| order(c["type"].as_str().unwrap_or("")));
    }
}

fn order(type_: &str) -> usize {
    ["NamesAccepted", "Established", "Terminating"]
        .iter()
        .position(|t| *t == type_)
        .unwrap_or(usize::MAX)
}

async fn write_status(
    registry: &Registry,
    name: &str,
    conflict: Option<(&'static str, String)>,
) -> Result<(), ApiError> {
    let Some(rt) = definitions(registry) else {
        return Ok(());
    };
    let opts = WriteOptions {
        field_manager: Some(MANAGER.into()),
        ..WriteOptions::default()
    };
    let apply = |current: &Value| -> crate::error::Result<Value> {
        let mut new = current.clone();
        let mut status = current.get("status").cloned().unwrap_or_else(|| json!({}));
        if !status.is_object() {
            status = json!({});
        }
        match &conflict {
            None => {
                let names = &current["spec"]["names"];
                let mut accepted = json!({
                    "plural": names["plural"],
                    "singular": names["singular"],
                    "kind": names["kind"],
                    "listKind": names["listKind"],
                });
                for list in ["shortNames", "categories"] {
                    if let Some(values) = names[list].as_array().filter(|v| !v.is_empty()) {
                        accepted[list] = Value::Array(values.clone());
                    }
                }
                status["acceptedNames"] = accepted;
                set_conditions(
                    &mut status,
                    vec![
                        condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
                        condition(
                            "Established",
                            true,
                            "InitialNamesAccepted",
                            "the initial names have been accepted",
                        ),
                    ],
                );
            }
            Some((reason, message)) => {
                set_conditions(
                    &mut status,
                    vec![
                        condition("NamesAccepted", false, reason, message),
                        condition(
                            "Established",
                            false,
                            "NotAccepted",
                            "not all names are accepted",
                        ),
                    ],
                );
            }
        }
        let mut stored: Vec<Value> = status["storedVersions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(storage) = crd::storage_version(current)
            && !stored.iter().any(|v| v == &json!(storage))
        {
            stored.push(json!(storage));
        }
        status["storedVersions"] = Value::Array(stored);
        new["status"] = status;
        Ok(new)
    };
    registry
        .patch(&rt, None, name, Some("status"), &opts, &apply)
        .await
        .map(|_| ())
}

/// Deletes a terminating definition's objects; removes its finalizer once they are gone.
async fn clean_up(registry: &Registry, crd: &Value) -> Result<(), ApiError> {
    let name = crate::resources::meta::meta_str(crd, "name")
        .unwrap_or("")
        .to_string();
    let Some(rt) = definitions(registry) else {
        return Ok(());
    };
    if !crate::resources::meta::finalizers(crd)
        .iter()
        .any(|f| f == CLEANUP_FINALIZER)
    {
        return Ok(());
    }
    let opts = WriteOptions {
        field_manager: Some(MANAGER.into()),
        ..WriteOptions::default()
    };
    let terminating = |current: &Value| -> crate::error::Result<Value> {
        let mut new = current.clone();
        let mut status = current.get("status").cloned().unwrap_or_else(|| json!({}));
        set_conditions(
            &mut status,
            vec![condition(
                "Terminating",
                true,
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress",
            )],
        );
        new["status"] = status;
        Ok(new)
    };
    registry
        .patch(&rt, None, &name, Some("status"), &opts, &terminating)
        .await?;
    let served = registry
        .catalog()
        .all()
        .into_iter()
        .find(|r| r.custom.as_ref().is_some_and(|c| c.crd_name == name));
    if let Some(served) = served {
        let listed = registry
            .list(&served, None, &ListOptions::default())
            .await?;
        let remaining = listed.items.len();
        for obj in listed.items.iter() {
            let ns = crate::resources::meta::meta_str(obj, "namespace").map(String::from);
            let obj_name = crate::resources::meta::meta_str(obj, "name")
                .unwrap_or("")
                .to_string();
            match registry
                .delete(&served, ns.as_deref(), &obj_name, &DeleteOptions::default())
                .await
            {
                Ok(_) => {}
                Err(e) if e.reason == Reason::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if remaining > 0 && registry.count(&served).await? > 0 {
            return Ok(());
        }
    }
    let release = |current: &Value| -> crate::error::Result<Value> {
        let mut new = current.clone();
        let kept: Vec<String> = crate::resources::meta::finalizers(current)
            .into_iter()
            .filter(|f| f != CLEANUP_FINALIZER)
            .collect();
        crate::resources::meta::metadata_mut(&mut new).insert("finalizers".into(), json!(kept));
        Ok(new)
    };
    registry
        .patch(&rt, None, &name, None, &opts, &release)
        .await
        .map(|_| ())
}
