//! Finalizers that are always removed, and never removed too early.
//!
//! A controller that owns something outside the object (a cloud resource, a row in a database,
//! a file) must clean it up before the object disappears. It puts a finalizer on the object; the
//! API server then only marks the object for deletion (`deletionTimestamp`) and waits until every
//! finalizer is gone. The classic failures are objects stuck in Terminating because the finalizer
//! is never removed, cleanup skipped because the finalizer was removed first, and lost updates:
//! a finalizer list written back whole drops the finalizer another controller added meanwhile.
//!
//! [`finalizer`] drives the whole life cycle from one call in the reconciler:
//!
//! | object | our finalizer | what happens |
//! |---|---|---|
//! | live | present | [`FinalizerEvent::Apply`] runs |
//! | live | missing | the finalizer is added, then [`FinalizerEvent::Apply`] runs on the object the server returned |
//! | being deleted | present | [`FinalizerEvent::Cleanup`] runs; only if it succeeds is exactly our finalizer removed |
//! | being deleted, or gone | missing | nothing runs ([`FinalizerOutcome::Skipped`]) |
//!
//! Apply runs right after the finalizer is added, rather than waiting for the event the add
//! causes: adding a finalizer does not change `metadata.generation`, so a controller that filters
//! events by generation (the default) would never see that event and the object would wait for
//! its next resync.
//!
//! Every write is a JSON patch that first `test`s the finalizer list the decision was made on, so
//! a concurrent writer's finalizers are never overwritten and ours is never added twice or
//! removed twice. When the test fails, the object is read again and the decision retaken (a few
//! times at most); a race that keeps being lost surfaces as an error for which
//! [`FinalizerError::is_conflict`] is true, so the caller requeues at once. Cleanup must be
//! idempotent: it runs again if removing the finalizer fails afterwards.
//!
//! [`owners`] reads from `managedFields` who put a finalizer on an object, for reports that
//! name who holds a deletion up (the doctor, the testkit's invariants).

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// How many times a finalizer patch is retried on a fresh read after losing a race.
const ATTEMPTS: usize = 3;

/// What the reconcile function passed to [`finalizer`] is asked to do.
#[derive(Debug)]
pub enum FinalizerEvent<K> {
    /// The object is live and carries our finalizer: reconcile it towards its desired state.
    Apply(Arc<K>),
    /// The object is being deleted and still carries our finalizer: release what it owns.
    /// Returning `Ok` lets the finalizer go; returning `Err` keeps the object until a retry
    /// succeeds.
    Cleanup(Arc<K>),
}

/// What [`finalizer`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum FinalizerOutcome<T> {
    /// [`FinalizerEvent::Apply`] ran and returned `value`.
    Applied {
        /// What the reconcile function returned.
        value: T,
        /// Whether this call added the finalizer before running Apply.
        finalizer_added: bool,
    },
    /// [`FinalizerEvent::Cleanup`] ran, returned `value`, and our finalizer is gone (the object
    /// may be gone too, when ours was the last finalizer).
    CleanedUp(T),
    /// Nothing ran: the object is being deleted (or is already gone) and does not carry our
    /// finalizer, so either its cleanup already happened or it never needed one.
    Skipped,
}

/// Errors from [`finalizer`]; `E` is the reconcile function's error.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E>
where
    E: std::error::Error + 'static,
{
    /// [`FinalizerEvent::Apply`] failed.
    #[error("apply failed: {0}")]
    ApplyFailed(#[source] E),
    /// [`FinalizerEvent::Cleanup`] failed; the finalizer stays, so the object stays.
    #[error("cleanup failed: {0}")]
    CleanupFailed(#[source] E),
    /// Adding the finalizer failed.
    #[error("failed to add finalizer {finalizer}: {source}")]
    AddFinalizer {
        /// The finalizer's name.
        finalizer: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Removing the finalizer after a successful cleanup failed; cleanup will run again.
    #[error("failed to remove finalizer {finalizer}: {source}")]
    RemoveFinalizer {
        /// The finalizer's name.
        finalizer: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Reading the object again after a lost race failed.
    #[error("failed to re-read the object: {0}")]
    Refresh(#[source] kube::Error),
    /// The object has no `metadata.name`.
    #[error("object has no metadata.name")]
    UnnamedObject,
    /// The finalizer name is empty.
    #[error("finalizer name is empty")]
    InvalidFinalizerName,
}

impl<E> FinalizerError<E>
where
    E: std::error::Error + 'static,
{
    /// Whether the finalizer write lost a race with another writer (its `test` failed, 422, or
    /// the server reported a conflict, 409). The caller should requeue at once.
    pub fn is_conflict(&self) -> bool {
        match self {
            FinalizerError::AddFinalizer { source, .. }
            | FinalizerError::RemoveFinalizer { source, .. } => lost_race(source),
            _ => false,
        }
    }
}

/// Runs `reconcile` with the [`FinalizerEvent`] that `obj`'s state calls for, adding and
/// removing `finalizer_name` around it (see the module docs for the table).
///
/// `obj` is the object as last read (e.g. from the cache). Calling this again with the same or a
/// newer object is safe: the finalizer is never added twice or removed twice, other finalizers are
/// left alone, and an object that is gone by the time our finalizer is removed counts as done.
pub async fn finalizer<K, F, Fut, T, E>(
    api: &Api<K>,
    finalizer_name: &str,
    obj: Arc<K>,
    reconcile: F,
) -> Result<FinalizerOutcome<T>, FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + Debug + 'static,
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::error::Error + 'static,
{
    if finalizer_name.is_empty() {
        return Err(FinalizerError::InvalidFinalizerName);
    }
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(FinalizerError::UnnamedObject)?;
    let mut current = obj;
    let mut lost_races = 0;
    loop {
        let deleting = current.meta().deletion_timestamp.is_some();
        let finalizers = current.meta().finalizers.clone();
        let ours = finalizers.iter().flatten().any(|f| f == finalizer_name);
        match (deleting, ours) {
            (false, true) => return apply(reconcile, current, false).await,
            (false, false) => {
                let patch = add_patch(finalizers.as_deref(), finalizer_name);
                match api.patch(&name, &PatchParams::default(), &patch).await {
                    Ok(updated) => {
                        crate::reconcile::wrote(&updated);
                        return apply(reconcile, Arc::new(updated), true).await;
                    }
                    Err(source) if lost_race(&source) && lost_races + 1 < ATTEMPTS => {
                        lost_races += 1;
                        match refresh(api, &name).await? {
                            Some(fresh) => current = fresh,
                            None => return Ok(FinalizerOutcome::Skipped),
                        }
                    }
                    Err(source) => {
                        return Err(FinalizerError::AddFinalizer {
                            finalizer: finalizer_name.to_owned(),
                            source,
                        });
                    }
                }
            }
            (true, true) => {
                let value = reconcile(FinalizerEvent::Cleanup(current.clone()))
                    .await
                    .map_err(FinalizerError::CleanupFailed)?;
                remove_finalizer(api, &name, finalizer_name, current).await?;
                return Ok(FinalizerOutcome::CleanedUp(value));
            }
            (true, false) => return Ok(FinalizerOutcome::Skipped),
        }
    }
}

async fn apply<K, F, Fut, T, E>(
    reconcile: F,
    obj: Arc<K>,
    finalizer_added: bool,
) -> Result<FinalizerOutcome<T>, FinalizerError<E>>
where
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::error::Error + 'static,
{
    reconcile(FinalizerEvent::Apply(obj))
        .await
        .map(|value| FinalizerOutcome::Applied {
            value,
            finalizer_added,
        })
        .map_err(FinalizerError::ApplyFailed)
}

/// Removes exactly our finalizer, re-reading the object when the list changed meanwhile.
async fn remove_finalizer<K, E>(
    api: &Api<K>,
    name: &str,
    finalizer_name: &str,
    obj: Arc<K>,
) -> Result<(), FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    E: std::error::Error + 'static,
{
    let mut current = obj;
    let mut lost_races = 0;
    loop {
        let finalizers = current.meta().finalizers.clone().unwrap_or_default();
        let Some(index) = finalizers.iter().position(|f| f == finalizer_name) else {
            return Ok(());
        };
        let patch = remove_patch(&finalizers, index);
        match api.patch(name, &PatchParams::default(), &patch).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(()),
            Err(source) if lost_race(&source) && lost_races + 1 < ATTEMPTS => {
                lost_races += 1;
                match refresh(api, name).await? {
                    Some(fresh) => current = fresh,
                    None => return Ok(()),
                }
            }
            Err(source) => {
                return Err(FinalizerError::RemoveFinalizer {
                    finalizer: finalizer_name.to_owned(),
                    source,
                });
            }
        }
    }
}

/// Reads the object again; `None` when it is gone.
async fn refresh<K, E>(api: &Api<K>, name: &str) -> Result<Option<Arc<K>>, FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    E: std::error::Error + 'static,
{
    api.get_opt(name)
        .await
        .map(|obj| obj.map(Arc::new))
        .map_err(FinalizerError::Refresh)
}

/// Whether a patch failed because the object changed under it: a failed `test` (422, as
/// kube-apiserver answers) or a conflict (409). Our patches are otherwise always valid, so a 422
/// can only be the test.
fn lost_race(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.is_conflict() || status.is_invalid())
}

fn finalizers_path() -> PointerBuf {
    PointerBuf::from_tokens(["metadata", "finalizers"])
}

/// `test` the list we saw (absent tests as null), then add our finalizer to it.
fn add_patch(finalizers: Option<&[String]>, finalizer_name: &str) -> Patch<()> {
    let (test_value, add) = match finalizers {
        None => (
            Value::Null,
            AddOperation {
                path: finalizers_path(),
                value: Value::from(vec![finalizer_name]),
            },
        ),
        Some(list) => (
            Value::from(list.to_vec()),
            AddOperation {
                path: PointerBuf::from_tokens(["metadata", "finalizers", "-"]),
                value: Value::from(finalizer_name),
            },
        ),
    };
    Patch::Json(json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: finalizers_path(),
            value: test_value,
        }),
        PatchOperation::Add(add),
    ]))
}

/// `test` the list we saw, then remove the entry at `index` (ours) and nothing else.
fn remove_patch(finalizers: &[String], index: usize) -> Patch<()> {
    Patch::Json(json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: finalizers_path(),
            value: Value::from(finalizers.to_vec()),
        }),
        PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens([
                "metadata".to_owned(),
                "finalizers".to_owned(),
                index.to_string(),
            ]),
        }),
    ]))
}

/// Who put `finalizer` on an object: the managers whose `managedFields` claim
/// `f:metadata` → `f:finalizers` → `v:"<finalizer>"`, sorted, each once.
pub fn owners(managed: &[ManagedFieldsEntry], finalizer: &str) -> Vec<String> {
    let key = format!("v:{}", Value::String(finalizer.to_string()));
    let mut owners: Vec<String> = managed
        .iter()
        .filter(|entry| {
            entry.fields_v1.as_ref().is_some_and(|fields| {
                fields
                    .0
                    .get("f:metadata")
                    .and_then(|m| m.get("f:finalizers"))
                    .and_then(|f| f.get(&key))
                    .is_some()
            })
        })
        .filter_map(|entry| entry.manager.clone())
        .collect();
    owners.sort();
    owners.dedup();
    owners
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_of(patch: &Patch<()>) -> Value {
        let Patch::Json(patch) = patch else {
            panic!("not a JSON patch")
        };
        serde_json::to_value(patch).unwrap()
    }

    #[test]
    fn owners_come_from_fields_v1() {
        let entries: Vec<ManagedFieldsEntry> = serde_json::from_value(json!([
            {"manager": "cleaner", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, "v:\"example.com/cleanup\"": {}}}}},
            {"manager": "other", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:a": {}}}},
        ]))
        .unwrap();
        assert_eq!(owners(&entries, "example.com/cleanup"), ["cleaner"]);
        assert!(owners(&entries, "example.com/other").is_empty());
    }

    #[test]
    fn add_to_absent_list_tests_for_null() {
        assert_eq!(
            json_of(&add_patch(None, "example.com/cleanup")),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/cleanup"]},
            ])
        );
    }

    #[test]
    fn add_to_existing_list_tests_the_whole_list_and_appends() {
        let list = ["other/a".to_owned()];
        assert_eq!(
            json_of(&add_patch(Some(&list), "mine")),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other/a"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "mine"},
            ])
        );
    }

    #[test]
    fn remove_tests_the_list_and_removes_only_our_index() {
        let list = ["a".to_owned(), "mine".to_owned(), "b".to_owned()];
        assert_eq!(
            json_of(&remove_patch(&list, 1)),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["a", "mine", "b"]},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
    }
}
