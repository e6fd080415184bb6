//! The one read-modify-write loop every write verb shares, as kube-apiserver's
//! `GuaranteedUpdate`: read the object, let the verb decide what to store, and store it only if
//! nothing changed in between; when something did, decide again on the new state.
//!
//! Verbs put their preconditions (a resourceVersion the client sent, a UID) in the decision:
//! an error from it ends the loop as it is, so only lost races are retried.

use bytes::Bytes;
use konverge_store::KeyValue;
use serde_json::{Value, json};

use super::{
    DeleteOptions, Propagation, Registry, WriteOptions, conversion, decode, decode_as, encode,
    held_by_spec_finalizers, set_rv, target,
};
use crate::admission::{Operation, Trace};
use crate::error::{ApiError, Result};
use crate::resources::ResourceType;
use crate::resources::meta;

/// How many times a write decides again after losing a race.
const MAX_ATTEMPTS: usize = 16;

/// What a verb decides to do with the current object.
#[derive(Debug)]
pub(crate) enum Change {
    /// Store this object in place of the current one.
    Store(Value),
    /// Delete the object; this is its final state.
    Delete(Value),
    /// Store this object (marked for deletion), then delete it: what a graceful delete
    /// whose grace is already over does, so watchers see the deletion mark before the
    /// object goes, as kube-apiserver stores it before deleting it.
    MarkThenDelete(Value),
    /// Write nothing; answer with this object (the current one).
    Unchanged(Value),
}

/// What [`Registry::guaranteed_update`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A new state was stored.
    Stored,
    /// The object was deleted.
    Deleted,
    /// Nothing was written.
    Unchanged,
}

/// What a write through [`Registry::guaranteed_update`] is: the operation admission sees,
/// the client's options, and where admission leaves its warnings.
#[derive(Clone, Copy)]
pub(crate) struct Write<'a> {
    pub(crate) operation: Operation,
    pub(crate) opts: &'a WriteOptions,
    pub(crate) trace: &'a Trace,
}

impl Registry {
    /// Reads the object, asks `decide` what to do with it, and does it if the object has not
    /// changed since it was read (compare-and-swap on its mod revision); retries with the new
    /// state when it has. Returns the object as stored (with its new resourceVersion), as
    /// deleted, or as it is.
    ///
    /// Fails with NotFound when the object does not exist, with whatever `decide` fails with,
    /// and with Conflict when the object kept changing for [`MAX_ATTEMPTS`] reads. A dry run
    /// decides and answers but writes nothing.
    pub(crate) async fn guaranteed_update(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        write: Write<'_>,
        mut decide: impl FnMut(&KeyValue, Value) -> Result<Change>,
    ) -> Result<(Value, Outcome)> {
        let Write {
            operation,
            opts,
            trace,
        } = write;
        let dry_run = opts.dry_run;
        let key = Bytes::from(rt.key(ns, name));
        // Admission and the write check see the object as it was.
        let admitted = self.admission.handles_operation(rt, operation);
        let checked = admitted
            || (opts.user.is_some() && self.write_check.as_ref().is_some_and(|c| c.applies(rt)));
        for _ in 0..MAX_ATTEMPTS {
            let Some(kv) = self.read(rt, ns, name).await? else {
                return Err(ApiError::not_found(target(rt, name)));
            };
            let hook = conversion::webhook(rt);
            let current = match hook {
                None => decode_as(rt, &kv)?,
                Some(hook) => self.served_one(rt, hook, decode(&kv)?).await?,
            };
            let before = checked.then(|| current.clone());
            // A Service's addresses are allocated and given back around a write of its spec
            // (a status write keeps the spec).
            let previous =
                (rt.allocates_addresses && operation == Operation::Update && subresource.is_none())
                    .then(|| current.clone());
            let decided = decide(&kv, current)?;
            let admitting = crate::admission::Attributes {
                operation,
                rt,
                namespace: ns.unwrap_or(""),
                name,
                subresource,
                old: before.as_ref(),
                user: opts.user.as_ref(),
                dry_run,
                trace,
            };
            if operation == Operation::Delete && admitted {
                // A delete is validated against the object it deletes, whatever the
                // delete then does to it (kube-apiserver's deleteValidation).
                let validated = self
                    .admission
                    .validate(&admitting, &Value::Null, self)
                    .await;
                self.admission.finish(&admitting);
                validated?;
            }
            let (mut object, outcome, mark_first) = match decided {
                Change::Unchanged(object) => return Ok((object, Outcome::Unchanged)),
                Change::Store(object) => (object, Outcome::Stored, false),
                Change::Delete(object) => (object, Outcome::Deleted, false),
                Change::MarkThenDelete(object) => (object, Outcome::Deleted, true),
            };
            let writes_object = outcome == Outcome::Stored || mark_first;
            if outcome == Outcome::Stored && operation == Operation::Update {
                if admitted {
                    let admission = self.admit_update(&admitting, &mut object).await;
                    self.admission.finish(&admitting);
                    admission?;
                }
                self.check_write(rt, before.as_ref(), &object, opts).await?;
            }
            let allocated = match &previous {
                Some(old) if outcome == Outcome::Stored => {
                    self.allocate_service_update(ns, old, &mut object, dry_run)
                        .await?
                }
                _ => super::allocate::Allocated::default(),
            };
            // A webhook-converted object is stored in the storage version, and answered as
            // stored, read back in the request's version (a dry run goes there and back too).
            let stored = match hook {
                Some(hook) if writes_object => {
                    Some((hook, self.to_storage(rt, hook, object.clone()).await?))
                }
                _ => None,
            };
            if dry_run {
                if let Some((hook, mut stored)) = stored {
                    encode(rt, &stored)?;
                    set_rv(&mut stored, kv.mod_revision);
                    object = self.served_one(rt, hook, stored).await?;
                }
                set_rv(&mut object, kv.mod_revision);
                return Ok((object, outcome));
            }
            // A deleted object keeps the resourceVersion it was deleted at.
            let written = match outcome {
                Outcome::Deleted if mark_first => {
                    let value = match &stored {
                        Some((_, stored)) => encode(rt, stored)?,
                        None => encode(rt, &object)?,
                    };
                    self.mark_then_delete(rt, &key, kv.mod_revision, value)
                        .await
                }
                Outcome::Deleted => self
                    .timed(
                        "delete",
                        rt,
                        self.store.delete_if(key.clone(), kv.mod_revision),
                    )
                    .await
                    .map(|_| kv.mod_revision),
                _ => {
                    let value = match &stored {
                        Some((_, stored)) => encode(rt, stored)?,
                        None => encode(rt, &object)?,
                    };
                    self.timed(
                        "update",
                        rt,
                        self.store.update(key.clone(), value, kv.mod_revision),
                    )
                    .await
                }
            };
            match written {
                Ok(revision) => {
                    if let Some(old) = &previous
                        && outcome == Outcome::Stored
                    {
                        self.release_replaced(old, &object).await;
                    }
                    if let Some((hook, mut stored)) = stored {
                        set_rv(&mut stored, revision);
                        object = self.served_one(rt, hook, stored).await?;
                    }
                    set_rv(&mut object, revision);
                    return Ok((object, outcome));
                }
                Err(konverge_store::Error::Conflict { .. }) => {
                    self.release_allocated(allocated).await;
                    continue;
                }
                Err(e) => {
                    self.release_allocated(allocated).await;
                    return Err(ApiError::from_store(e, target(rt, name)));
                }
            }
        }
        Err(ApiError::modified(target(rt, name)))
    }

    /// Stores the object marked for deletion (if it is still at `expected`), then deletes
    /// it, whatever was written to it in between, unless it went or was replaced by another
    /// object of the same name (kube-apiserver tolerates losing that race). Returns the
    /// revision of the mark: the object's last resourceVersion.
    async fn mark_then_delete(
        &self,
        rt: &ResourceType,
        key: &Bytes,
        expected: i64,
        value: Bytes,
    ) -> konverge_store::Result<i64> {
        let uid = serde_json::from_slice::<Value>(&value)
            .ok()
            .and_then(|v| meta::meta_str(&v, "uid").map(String::from));
        let marked = self
            .timed(
                "update",
                rt,
                self.store.update(key.clone(), value, expected),
            )
            .await?;
        let mut revision = marked;
        for _ in 0..MAX_ATTEMPTS {
            match self
                .timed("delete", rt, self.store.delete_if(key.clone(), revision))
                .await
            {
                Ok(_) | Err(konverge_store::Error::NotFound { .. }) => return Ok(marked),
                Err(konverge_store::Error::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
            let Some(now) = self.timed("get", rt, self.store.get(key.clone())).await? else {
                return Ok(marked);
            };
            let now_uid = serde_json::from_slice::<Value>(&now.value)
                .ok()
                .and_then(|v| meta::meta_str(&v, "uid").map(String::from));
            if now_uid != uid {
                return Ok(marked);
            }
            revision = now.mod_revision;
        }
        Err(konverge_store::Error::Conflict {
            key: key.clone(),
            expected: revision,
            actual: revision,
        })
    }

    /// An update's admission: mutation (and validation again if it changed the object),
    /// then validating admission.
    async fn admit_update(
        &self,
        admitting: &crate::admission::Attributes<'_>,
        object: &mut Value,
    ) -> Result<()> {
        if self.admission.admit(admitting, object, self).await? {
            self.validate(admitting.rt, object, admitting.old)?;
        }
        self.admission.validate(admitting, object, self).await
    }
}

/// How a delete treats an object that supports graceful deletion (kube-apiserver's
/// `BeforeDelete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grace {
    /// Not graceful: the object goes now, or waits for its finalizers.
    None,
    /// A graceful deletion is already under way and this delete does not shorten it.
    Pending,
    /// Graceful, with this many seconds to go (the object is marked accordingly).
    Seconds(i64),
}

/// The grace a pod gets when it is first deleted: the delete's own, else the pod's
/// `terminationGracePeriodSeconds`; none for a pod no node runs, or one that has finished;
/// at least a second when negative (kube-apiserver's pod strategy).
fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let mut period = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(0);
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() || matches!(phase, "Succeeded" | "Failed") {
        period = 0;
    }
    if period < 0 { 1 } else { period }
}

fn parse_time(text: &str) -> Option<jiff::Timestamp> {
    text.parse::<jiff::Timestamp>().ok()
}

fn format_time(time: jiff::Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Marks a pod for graceful deletion, or says the delete changes nothing or is not
/// graceful: the first delete sets `deletionTimestamp` to now plus the grace (and counts a
/// new generation); a later one may only shorten the grace, moving the timestamp as much;
/// once the grace is zero, deletes are not graceful any more.
fn before_pod_delete(marked: &mut Value, requested: Option<i64>, now: jiff::Timestamp) -> Grace {
    let requested = requested.map(|g| if g < 0 { 1 } else { g });
    let md = meta::metadata_mut(marked);
    if let Some(pending) = md.get("deletionGracePeriodSeconds").and_then(Value::as_i64)
        && pending < 0
    {
        md.insert("deletionGracePeriodSeconds".into(), json!(1));
    }
    if let Some(since) = md.get("deletionTimestamp").and_then(Value::as_str) {
        let pending = md
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if pending == 0 {
            return Grace::None;
        }
        let Some(period) = requested.filter(|p| *p < pending) else {
            return Grace::Pending;
        };
        if let Some(at) = parse_time(since) {
            let moved = at
                .checked_add(jiff::SignedDuration::from_secs(period - pending))
                .unwrap_or(at);
            md.insert("deletionTimestamp".into(), json!(format_time(moved)));
        }
        md.insert("deletionGracePeriodSeconds".into(), json!(period));
        return Grace::Seconds(period);
    }
    let period = pod_grace(marked, requested);
    let md = meta::metadata_mut(marked);
    let at = now
        .checked_add(jiff::SignedDuration::from_secs(period))
        .unwrap_or(jiff::Timestamp::MAX);
    md.insert("deletionTimestamp".into(), json!(format_time(at)));
    md.insert("deletionGracePeriodSeconds".into(), json!(period));
    bump_generation(md);
    Grace::Seconds(period)
}

/// The first mark for deletion changes what the object's controllers must do, so it counts
/// as a new generation (when the object has one), as kube-apiserver counts it.
fn bump_generation(md: &mut serde_json::Map<String, Value>) {
    if let Some(generation) = md.get("generation").and_then(Value::as_i64)
        && generation > 0
    {
        md.insert("generation".into(), json!(generation + 1));
    }
}

/// Marks an object that waits for its finalizers (kube-apiserver's `markAsDeleting`): no
/// grace left, and a `deletionTimestamp` no later than now.
fn mark_as_deleting(marked: &mut Value, now: jiff::Timestamp) {
    let md = meta::metadata_mut(marked);
    let since = md
        .get("deletionTimestamp")
        .and_then(Value::as_str)
        .map(parse_time);
    match since {
        None => {
            bump_generation(md);
            md.insert("deletionTimestamp".into(), json!(format_time(now)));
        }
        Some(Some(at)) if at > now => {
            md.insert("deletionTimestamp".into(), json!(format_time(now)));
        }
        Some(_) => {}
    }
    md.insert("deletionGracePeriodSeconds".into(), json!(0));
}

/// Whether the resource's objects are deleted gracefully (pods).
fn deleted_gracefully(rt: &ResourceType) -> bool {
    rt.deletion == crate::resources::Deletion::Graceful
}

/// What a delete does to `current`, as kube-apiserver's store decides it: a pod is deleted
/// gracefully (marked, and kept until its grace is over: the kubelet deletes it again with
/// none left); any object waits with a `deletionTimestamp` (and the finalizer the
/// propagation policy asks for) while finalizers remain; otherwise it goes now.
pub(crate) fn decide_delete(
    rt: &ResourceType,
    current: Value,
    opts: &DeleteOptions,
    now: jiff::Timestamp,
) -> Change {
    let mut marked = current.clone();
    let grace = if deleted_gracefully(rt) {
        before_pod_delete(&mut marked, opts.grace_period_seconds, now)
    } else {
        Grace::None
    };
    // A graceful deletion under way is not changed by a delete that does not shorten it,
    // finalizers included.
    if grace == Grace::Pending {
        return Change::Unchanged(current);
    }
    let mut finalizers = meta::finalizers(&marked);
    let held_by_spec = !meta::pending_finalizers(&marked, held_by_spec_finalizers(rt))
        .iter()
        .all(|f| finalizers.contains(f));
    let extra = match opts.propagation {
        Some(Propagation::Foreground) => Some("foregroundDeletion"),
        Some(Propagation::Orphan) => Some("orphan"),
        _ => None,
    };
    if let Some(extra) = extra
        && !finalizers.iter().any(|f| f == extra)
    {
        finalizers.push(extra.to_string());
    }
    let waits = !finalizers.is_empty() || held_by_spec;
    if !finalizers.is_empty() {
        meta::metadata_mut(&mut marked).insert("finalizers".into(), json!(finalizers));
    }
    match grace {
        Grace::None | Grace::Pending => {
            if !waits {
                return Change::Delete(current);
            }
            if held_by_spec_finalizers(rt) {
                marked["status"] = json!({"phase": "Terminating"});
            }
            mark_as_deleting(&mut marked, now);
        }
        Grace::Seconds(0) if !waits => return Change::MarkThenDelete(marked),
        Grace::Seconds(_) => {}
    }
    if marked == current {
        Change::Unchanged(current)
    } else {
        Change::Store(marked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("a time")
    }

    fn decide(plural: &str, current: Value, opts: &DeleteOptions) -> Change {
        let catalog = Catalog::builtin();
        let rt = catalog.get("", "v1", plural).expect("a built-in resource");
        decide_delete(&rt, current, opts, at("2026-11-27T14:00:00Z"))
    }

    fn grace(seconds: i64) -> DeleteOptions {
        DeleteOptions {
            grace_period_seconds: Some(seconds),
            ..DeleteOptions::default()
        }
    }

    fn scheduled() -> Value {
        json!({"metadata": {"name": "web-1", "uid": "u"},
               "spec": {"nodeName": "node-1", "terminationGracePeriodSeconds": 30},
               "status": {"phase": "Running"}})
    }

    #[test]
    fn a_first_delete_marks_a_pod_for_its_grace() {
        let Change::Store(marked) = decide("pods", scheduled(), &DeleteOptions::default()) else {
            panic!("a scheduled pod is marked, not deleted");
        };
        assert_eq!(
            marked["metadata"]["deletionTimestamp"],
            "2026-11-27T14:00:30Z"
        );
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
        let Change::Store(marked) = decide("pods", scheduled(), &grace(-7)) else {
            panic!("marked");
        };
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 1);
        // A grace too long for any clock does not panic.
        assert!(matches!(
            decide("pods", scheduled(), &grace(i64::MAX)),
            Change::Store(_)
        ));
    }

    #[test]
    fn a_pending_grace_may_only_be_shortened() {
        let mut terminating = scheduled();
        terminating["metadata"]["deletionTimestamp"] = json!("2026-11-27T14:00:30Z");
        terminating["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        assert!(matches!(
            decide("pods", terminating.clone(), &grace(30)),
            Change::Unchanged(_)
        ));
        assert!(matches!(
            decide("pods", terminating.clone(), &DeleteOptions::default()),
            Change::Unchanged(_)
        ));
        let Change::Store(shorter) = decide("pods", terminating.clone(), &grace(5)) else {
            panic!("shortened");
        };
        assert_eq!(
            shorter["metadata"]["deletionTimestamp"],
            "2026-11-27T14:00:05Z"
        );
        assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 5);
        let Change::MarkThenDelete(last) = decide("pods", terminating.clone(), &grace(0)) else {
            panic!("no grace left: marked, then deleted");
        };
        assert_eq!(
            last["metadata"]["deletionTimestamp"],
            "2026-11-27T14:00:00Z"
        );
        // Already at zero: deleted at once, without another mark.
        terminating["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        assert!(matches!(
            decide("pods", terminating, &DeleteOptions::default()),
            Change::Delete(_)
        ));
    }

    #[test]
    fn other_kinds_ignore_grace_and_wait_only_for_finalizers() {
        let config_map = json!({"metadata": {"name": "c", "uid": "u"}});
        assert!(matches!(
            decide("configmaps", config_map.clone(), &grace(30)),
            Change::Delete(_)
        ));
        let orphan = DeleteOptions {
            propagation: Some(Propagation::Orphan),
            ..DeleteOptions::default()
        };
        let Change::Store(waiting) = decide("configmaps", config_map, &orphan) else {
            panic!("waits for the orphan finalizer");
        };
        assert_eq!(waiting["metadata"]["finalizers"], json!(["orphan"]));
        assert_eq!(waiting["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(
            waiting["metadata"]["deletionTimestamp"],
            "2026-11-27T14:00:00Z"
        );
    }
}
