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
    Propagation, Registry, WriteOptions, conversion, decode, decode_as, encode, is_namespace,
    set_rv, target,
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
            let (mut object, outcome) = match decided {
                Change::Unchanged(object) => return Ok((object, Outcome::Unchanged)),
                Change::Store(object) => (object, Outcome::Stored),
                Change::Delete(object) => (object, Outcome::Deleted),
            };
            if outcome == Outcome::Stored && operation == Operation::Update {
                if admitted {
                    let admission = self.admit_update(&admitting, &mut object).await;
                    self.admission.finish(&admitting);
                    admission?;
                }
                self.check_write(rt, before.as_ref(), &object, opts).await?;
            }
            // A webhook-converted object is stored in the storage version, and answered as
            // stored, read back in the request's version (a dry run goes there and back too).
            let stored = match (hook, outcome) {
                (Some(hook), Outcome::Stored) => {
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
                    if let Some((hook, mut stored)) = stored {
                        set_rv(&mut stored, revision);
                        object = self.served_one(rt, hook, stored).await?;
                    }
                    set_rv(&mut object, revision);
                    return Ok((object, outcome));
                }
                Err(konverge_store::Error::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::from_store(e, target(rt, name))),
            }
        }
        Err(ApiError::modified(target(rt, name)))
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

/// What a delete does to `current`: removes it when nothing holds it, or marks it with a
/// `deletionTimestamp` (and the finalizer the propagation policy asks for) while finalizers
/// remain.
pub(crate) fn mark_deleted(
    rt: &ResourceType,
    current: Value,
    propagation: Option<Propagation>,
) -> Change {
    let mut finalizers = meta::finalizers(&current);
    let held_by_spec = !meta::pending_finalizers(&current, is_namespace(rt))
        .iter()
        .all(|f| finalizers.contains(f));
    let extra = match propagation {
        Some(Propagation::Foreground) => Some("foregroundDeletion"),
        Some(Propagation::Orphan) => Some("orphan"),
        _ => None,
    };
    if let Some(extra) = extra
        && !finalizers.iter().any(|f| f == extra)
    {
        finalizers.push(extra.to_string());
    }
    if finalizers.is_empty() && !held_by_spec {
        return Change::Delete(current);
    }
    let mut marked = current.clone();
    if is_namespace(rt) {
        marked["status"] = json!({"phase": "Terminating"});
    }
    let md = meta::metadata_mut(&mut marked);
    if !finalizers.is_empty() {
        md.insert("finalizers".into(), json!(finalizers));
    }
    if !md.contains_key("deletionTimestamp") {
        md.insert("deletionTimestamp".into(), json!(meta::now()));
        md.insert("deletionGracePeriodSeconds".into(), json!(0));
        // As kube-apiserver: the first mark for deletion changes what the object's
        // controllers must do, so it counts as a new generation (when it has one).
        if let Some(generation) = md.get("generation").and_then(Value::as_i64)
            && generation > 0
        {
            md.insert("generation".into(), json!(generation + 1));
        }
    }
    if marked == current {
        Change::Unchanged(current)
    } else {
        Change::Store(marked)
    }
}
