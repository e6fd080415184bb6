//! The generic registry: one implementation of every verb for every resource, over any
//! [`KvStore`].
//!
//! Per-resource behaviour comes from the [`ResourceType`] (its codec, defaults, validation,
//! subresources). What is the same for all resources lives here: metadata rules, generation,
//! optimistic concurrency, finalizers and deletion, dry runs, and the resourceVersion rules of
//! reads. Objects are stored as JSON without `metadata.resourceVersion`; the store's
//! `mod_revision` becomes the resourceVersion on the way out.
//!
//! Writes and gets go to the store. Lists and watches are served from memory by a watch cache
//! per resource (`cache.rs`: one store watch per resource, objects decoded once, a bounded ring
//! of events shared by every watcher), as kube-apiserver's cacher serves them.

mod allocate;
pub mod apply;
mod cache;
mod conversion;
mod list;
mod managed;
mod prepared;
pub mod subresources;
mod update;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use konverge_store::{KeyRange, KeyValue, KvStore, RangeRequest};
use serde_json::{Value, json};

pub use allocate::ServiceIpRange;
pub(crate) use allocate::{Leaks, ip_address_for};
pub use cache::WatchCacheConfig;
pub(crate) use list::Item;
pub use list::{ListOptions, ListResult, ResourceVersionMatch};
pub use managed::manager_from_user_agent;
pub(crate) use prepared::Prepared;
use update::{Change, Outcome, decide_delete};
pub(crate) use watch::Sent;
pub use watch::{WatchEvent, WatchOptions};

use crate::admission::Operation;
use crate::error::{ApiError, Cause, Reason, Result, Target};
use crate::lister::{Changes, Lister, WriteCheck};
use crate::resources::meta;
use crate::resources::{Catalog, ResourceType};

/// How many names a create with `generateName` tries (kube-apiserver's
/// `maxNameGenerationCreateAttempts`).
const NAME_GENERATION_ATTEMPTS: usize = 8;

/// Largest object the server stores (etcd's own request limit).
pub const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024 / 2;

/// What `fieldValidation` asks the server to do with fields the type does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and say so in `Warning` headers.
    #[default]
    Warn,
    /// Refuse the request.
    Strict,
}

/// Options of create, update and patch.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, write nothing.
    pub dry_run: bool,
    /// `fieldValidation`.
    pub field_validation: FieldValidation,
    /// `fieldManager`: who the write is recorded for in `metadata.managedFields` (writes
    /// without one, the server's own, leave the managed fields alone).
    pub field_manager: Option<String>,
    /// Set by server-side apply, which computes the managed fields itself.
    pub(crate) applied: bool,
    /// What reading the request body's text found that strict field validation refuses
    /// (duplicate fields), in kube-apiserver's words (`duplicate field "spec.replicas"`).
    pub body_strict_errors: Vec<String>,
    /// Where each field came in a JSON body, so that a built-in kind's unknown and duplicate
    /// fields are reported in the order kube's typed decoder meets them.
    pub body_field_order: Option<konverge_apimachinery::decoding::FieldOrder>,
    /// Set by the server's own writes that are not a client's update of the object (a pod's
    /// binding): the new object is validated, the kind's update rules are not applied (its
    /// status is written with the rest, no new generation).
    pub(crate) not_an_update: bool,
    /// Who writes: a client's writes are checked by the registry's [`WriteCheck`]; the
    /// server's own writes (`None`) are not.
    pub user: Option<crate::auth::user::UserInfo>,
}

impl WriteOptions {
    /// Who an ordinary write is recorded for in `metadata.managedFields`: its field manager,
    /// unless it is an apply (which records itself) or names none.
    pub(crate) fn update_manager(&self) -> Option<&str> {
        self.field_manager.as_deref().filter(|_| !self.applied)
    }
}

/// What a write answers.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as stored.
    pub object: Value,
    /// Whether the write created it (201 rather than 200).
    pub created: bool,
    /// `Warning` headers for the response.
    pub warnings: Vec<String>,
}

/// How a delete propagates to dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete the owner now; the garbage collector deletes dependents afterwards.
    #[default]
    Background,
    /// Delete dependents first; the owner waits with the `foregroundDeletion` finalizer.
    Foreground,
    /// Keep dependents and remove their owner references.
    Orphan,
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `propagationPolicy`.
    pub propagation: Option<Propagation>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_resource_version: Option<String>,
    /// `gracePeriodSeconds`: how long a pod may take to stop (its
    /// `terminationGracePeriodSeconds` when unset; negative means one second). Objects
    /// without graceful deletion ignore it.
    pub grace_period_seconds: Option<i64>,
    /// Who deletes (`None`: the server itself), as admission sees it.
    pub user: Option<crate::auth::user::UserInfo>,
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone; this is how it was.
    Gone(Value),
    /// The object waits for finalizers or for its grace period (a pod that is terminating);
    /// this is how it is now (with `deletionTimestamp`).
    Pending(Value),
}

/// The generic registry.
///
/// Writes and gets go to the store; lists and watches are served by a watch cache per
/// resource (see [`WatchCacheConfig`]) unless it is turned off.
#[derive(Clone)]
pub struct Registry {
    store: Arc<dyn KvStore>,
    catalog: Arc<Catalog>,
    caches: Arc<cache::Caches>,
    generate_name: fn(&str) -> String,
    metrics: Arc<crate::metrics::Metrics>,
    /// Counts changes of each kind of [`Changes`], in its order: moved by this registry's
    /// own writes before they are answered, and by the watch caches of those kinds for every
    /// change they see in the store, whichever server made it.
    changes: Arc<[AtomicU64; Changes::COUNT]>,
    /// Checks clients' writes before they are stored.
    write_check: Option<Arc<dyn WriteCheck>>,
    /// The admission plugins every create and update goes through.
    admission: Arc<crate::admission::Chain>,
    /// How admission and conversion webhooks are reached.
    webhooks: crate::webhook::Webhooks,
    /// Whether a namespaced create needs its namespace to exist and not be terminating
    /// (kube-apiserver's NamespaceLifecycle admission plugin).
    namespace_lifecycle: bool,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

fn target<'a>(rt: &'a ResourceType, name: &'a str) -> Target<'a> {
    Target {
        group: &rt.group,
        resource: &rt.plural,
        name,
    }
}

/// A stored object, decoded, with its resourceVersion set.
pub(crate) fn decode(kv: &KeyValue) -> Result<Value> {
    let mut obj: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::internal(format!("stored object is not JSON: {e}")))?;
    meta::metadata_mut(&mut obj).insert(
        "resourceVersion".into(),
        Value::String(kv.mod_revision.to_string()),
    );
    Ok(obj)
}

/// A stored object, decoded as `rt` serves it (custom resources are stored in their storage
/// version, and get their schema's defaults on read; see [`ResourceType::to_served`]).
pub(crate) fn decode_as(rt: &ResourceType, kv: &KeyValue) -> Result<Value> {
    let mut obj = decode(kv)?;
    if rt.changes_on_read() {
        rt.to_served(&mut obj);
    }
    Ok(obj)
}

fn encode(rt: &ResourceType, obj: &Value) -> Result<Bytes> {
    let mut stored = obj.clone();
    if let Some(m) = stored.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    if let Some(conversion) = rt.conversion {
        (conversion.to_storage)(&mut stored);
    } else if let Some(custom) = &rt.custom
        && custom.storage_version != rt.version
    {
        stored["apiVersion"] = json!(format!("{}/{}", rt.group, custom.storage_version));
    }
    let bytes = serde_json::to_vec(&stored).map_err(|e| ApiError::internal(e.to_string()))?;
    if bytes.len() > MAX_OBJECT_BYTES {
        return Err(ApiError::too_large(format!(
            "Request entity too large: limit is {MAX_OBJECT_BYTES}"
        )));
    }
    Ok(bytes.into())
}

/// Parses a resourceVersion the client sent.
pub(crate) fn parse_rv(rv: &str) -> Result<i64> {
    rv.parse::<i64>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {rv:?}")))
}

/// Whether `new` is `current` but perhaps for `metadata.resourceVersion` (which a write
/// that changes nothing keeps from `current`), compared in place rather than on a copy.
fn same_but_resource_version(new: &Value, current: &Value) -> bool {
    let (Some(new), Some(current)) = (new.as_object(), current.as_object()) else {
        return new == current;
    };
    new.len() == current.len()
        && new.iter().all(|(key, value)| match current.get(key) {
            Some(theirs) if key == "metadata" => same_metadata(value, theirs),
            Some(theirs) => value == theirs,
            None => false,
        })
}

/// [`same_but_resource_version`] for `metadata`: with a resourceVersion in `current`,
/// `new`'s is ignored (it would be replaced); without one, `new` must have none either.
fn same_metadata(new: &Value, current: &Value) -> bool {
    const RV: &str = "resourceVersion";
    let (Some(new), Some(current)) = (new.as_object(), current.as_object()) else {
        return new == current;
    };
    if !current.contains_key(RV) {
        return new == current;
    }
    let mut others = new.iter().filter(|(key, _)| key.as_str() != RV);
    let count = others.clone().count();
    count == current.len() - 1 && others.all(|(key, value)| current.get(key) == Some(value))
}

/// Which kind of counted configuration objects of `rt` are, if any.
pub(crate) fn changes_of(rt: &ResourceType) -> Option<Changes> {
    match (rt.group.as_str(), rt.plural.as_str()) {
        (crate::auth::rbac::GROUP, _) => Some(Changes::Policy),
        ("admissionregistration.k8s.io", _) => Some(Changes::Admission),
        _ if rt.is(crate::resources::RESOURCE_QUOTAS) => Some(Changes::Quota),
        (crate::flowcontrol::GROUP, _) => Some(Changes::FlowControl),
        (crate::aggregator::GROUP, _) => Some(Changes::ApiServices),
        _ => None,
    }
}

fn set_rv(obj: &mut Value, rv: i64) {
    meta::metadata_mut(obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
}

impl Registry {
    /// A registry serving `catalog` from `store`.
    pub fn new(store: Arc<dyn KvStore>, catalog: Arc<Catalog>) -> Self {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let changes: Arc<[AtomicU64; Changes::COUNT]> = Arc::default();
        let caches = Arc::new(cache::Caches::new(
            store.clone(),
            WatchCacheConfig::default(),
            metrics.clone(),
            changes.clone(),
        ));
        Registry {
            store,
            catalog,
            caches,
            generate_name: meta::generate_name,
            metrics,
            changes,
            write_check: None,
            admission: Arc::new(crate::admission::Chain::builtin()),
            webhooks: crate::webhook::Webhooks::default(),
            namespace_lifecycle: true,
        }
    }

    /// The same registry without NamespaceLifecycle's rule: namespaced objects may be created
    /// in namespaces that do not exist or are terminating, as with kube-apiserver's
    /// `--disable-admission-plugins=NamespaceLifecycle`.
    pub fn without_namespace_lifecycle(mut self) -> Self {
        self.namespace_lifecycle = false;
        self
    }

    /// The same registry running `chain` as its admission plugins (default:
    /// [`Chain::builtin`](crate::admission::Chain::builtin)).
    pub fn with_admission(mut self, chain: crate::admission::Chain) -> Self {
        self.admission = Arc::new(chain);
        self
    }

    /// The admission plugins writes go through.
    pub fn admission(&self) -> &Arc<crate::admission::Chain> {
        &self.admission
    }

    /// The same registry reaching webhooks through `webhooks`.
    pub fn with_webhooks(mut self, webhooks: crate::webhook::Webhooks) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// How admission and conversion webhooks are reached.
    pub fn webhooks(&self) -> &crate::webhook::Webhooks {
        &self.webhooks
    }

    /// The same registry checking clients' writes with `check` before storing them.
    pub fn with_write_check(mut self, check: Arc<dyn WriteCheck>) -> Self {
        self.write_check = Some(check);
        self
    }

    /// Runs the write check, if there is one for `rt` and the write is a client's.
    pub(crate) async fn check_write(
        &self,
        rt: &ResourceType,
        old: Option<&Value>,
        new: &Value,
        opts: &WriteOptions,
    ) -> Result<()> {
        match (&self.write_check, &opts.user) {
            (Some(check), Some(user)) if check.applies(rt) => check.check(rt, old, new, user).await,
            _ => Ok(()),
        }
    }

    /// The same registry recording its store calls and object counts into `metrics` (the
    /// server's, so `/metrics` shows them).
    /// Call it before the registry serves anything (the watch caches start over with it).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.caches = Arc::new(cache::Caches::new(
            self.store.clone(),
            self.caches.config().clone(),
            metrics.clone(),
            self.changes.clone(),
        ));
        self.metrics = metrics;
        self
    }

    /// Runs one store call, recorded as kube's etcd3 store records each etcd request
    /// (`etcd_request_duration_seconds{operation,type}`).
    pub(crate) async fn timed<T>(
        &self,
        operation: &'static str,
        rt: &ResourceType,
        call: impl std::future::Future<Output = konverge_store::Result<T>>,
    ) -> konverge_store::Result<T> {
        let started = std::time::Instant::now();
        let result = call.await;
        self.count_store_call(operation, rt, started.elapsed(), &result);
        result
    }

    /// Records a store call of `operation` on `rt` that took `elapsed`: its metrics, and the
    /// change it made when it wrote.
    fn count_store_call<T>(
        &self,
        operation: &'static str,
        rt: &ResourceType,
        elapsed: std::time::Duration,
        result: &konverge_store::Result<T>,
    ) {
        if matches!(operation, "create" | "update" | "delete")
            && result.is_ok()
            && let Some(changes) = changes_of(rt)
        {
            self.changes[changes as usize].fetch_add(1, Ordering::AcqRel);
        }
        self.metrics.record_store_call(
            operation,
            &crate::metrics::group_resource(rt),
            elapsed,
            result.as_ref().err(),
        );
    }

    /// Brings `apiserver_storage_objects` up to date: from the watch cache where one runs (it
    /// holds every object already), otherwise by counting in the store at most once a
    /// minute, as kube-apiserver polls.
    pub async fn update_object_counts(&self) {
        for rt in self.catalog.stored() {
            if let Some(count) = self.caches.object_count(&rt.storage_prefix()) {
                self.metrics.set_object_count(&rt, count as i64);
            } else if self.metrics.count_due(&rt) {
                let count = self.count(&rt).await.map_or(-1, |c| c as i64);
                self.metrics.set_object_count(&rt, count);
            }
        }
    }

    /// The same registry with another watch cache configuration. Call it before the registry
    /// serves anything: caches already started by clones keep their configuration.
    pub fn with_watch_cache(mut self, config: WatchCacheConfig) -> Self {
        self.caches = Arc::new(cache::Caches::new(
            self.store.clone(),
            config,
            self.metrics.clone(),
            self.changes.clone(),
        ));
        self
    }

    /// Drops all history before the store's current revision `R`, as a long disconnect looks
    /// to a client: the store is compacted at `R` and every watch cache forgets the events
    /// before it, the same way. Afterwards a watch from a resourceVersion before `R - 1` (a
    /// client that missed more than the last change), a list at a resourceVersion before `R`
    /// with `resourceVersionMatch=Exact`, and a continue token from before `R` answer 410
    /// Expired. Open watches that were behind end with 410 as well (their clients relist).
    /// Returns `R`.
    ///
    /// For fault injection in tests (konverge-testkit); a running server compacts
    /// periodically instead ([`crate::controllers::compaction`]).
    pub async fn expire_history(&self) -> Result<konverge_store::Revision> {
        let whole_store = Target::default();
        let revision = self
            .store
            .current_revision()
            .await
            .map_err(|e| ApiError::from_store(e, whole_store))?;
        match self.store.compact(revision).await {
            Ok(()) => {}
            // Already compacted there (nothing was written since the last time).
            Err(konverge_store::Error::Compacted { compact_revision })
                if compact_revision >= revision => {}
            Err(e) => return Err(ApiError::from_store(e, whole_store)),
        }
        let timeout = self.caches.config().wait_timeout;
        for cache in self.caches.running() {
            // A cache applies the store's changes asynchronously: let it catch up first, so
            // that the events before `revision` are in its ring to be dropped. A cache that
            // cannot (closed, or too slow) forgets all it has.
            let _ = cache.wait_until(Some(revision), timeout).await;
            cache.forget_history_before(revision);
        }
        Ok(revision)
    }

    /// Stops every watch cache of this registry and its clones: their feeders end, and
    /// requests that need a cache fail from then on. Part of [`crate::ApiServer::stop`].
    pub fn stop_watch_caches(&self) {
        self.caches.stop();
    }

    /// How many resources have a running watch cache.
    pub fn watch_caches(&self) -> usize {
        self.caches.len()
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn KvStore> {
        &self.store
    }

    /// The served resources.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    async fn read(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<KeyValue>> {
        self.timed("get", rt, self.store.get(Bytes::from(rt.key(ns, name))))
            .await
            .map_err(|e| ApiError::from_store(e, target(rt, name)))
    }

    /// Reads one object. `resource_version`: unset or "0" reads the latest state; "N" reads a
    /// state at least as new as N (kube-apiserver's NotOlderThan).
    pub async fn get(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<Value> {
        let kv = self
            .read(rt, ns, name)
            .await?
            .ok_or_else(|| ApiError::not_found(target(rt, name)))?;
        if let Some(rv) = resource_version.filter(|rv| !rv.is_empty() && *rv != "0") {
            let wanted = parse_rv(rv)?;
            let current = self
                .store
                .current_revision()
                .await
                .map_err(|e| ApiError::from_store(e, target(rt, name)))?;
            if wanted > current {
                return Err(ApiError::from_store(
                    konverge_store::Error::FutureRevision {
                        requested: wanted,
                        current,
                    },
                    target(rt, name),
                ));
            }
        }
        match conversion::webhook(rt) {
            None => decode_as(rt, &kv),
            Some(hook) => self.served_one(rt, hook, decode(&kv)?).await,
        }
    }

    /// Decodes a request body as this resource's type: rejects wrong types (400), drops fields
    /// the type does not have as `fieldValidation` says, and applies defaults.
    fn decode_body(
        &self,
        rt: &ResourceType,
        mut body: Value,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
        from_body: bool,
    ) -> Result<Value> {
        // A create or update decodes the request body, and says so when that fails (a patch
        // decodes the patched object, and does not).
        let prefix = if from_body {
            format!(
                "{} in version {:?} cannot be handled as a {}: ",
                rt.kind, rt.version, rt.kind
            )
        } else {
            String::new()
        };
        if !body.is_object() {
            return Err(ApiError::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: the request body must be a JSON object",
                rt.kind, rt.version, rt.kind
            )));
        }
        rt.check_type_meta(&body)?;
        body["apiVersion"] = json!(rt.api_version());
        body["kind"] = json!(rt.kind);
        // Strict decoding errors in kube-apiserver's order: a built-in kind's JSON body as
        // its typed decoder meets them; otherwise those of the body's text (duplicates),
        // then the fields the type or schema does not have.
        let mut strict = if from_body {
            opts.body_strict_errors.clone()
        } else {
            Vec::new()
        };
        let unknown =
            |fields: Vec<String>| fields.into_iter().map(|f| format!("unknown field {f:?}"));
        if let Some(codec) = rt.codec {
            let (decoded, unknown_fields) = codec(body).map_err(|e| {
                ApiError::bad_request(format!(
                    "{} in version {:?} cannot be handled as a {}: {e}",
                    rt.kind, rt.version, rt.kind
                ))
            })?;
            match (from_body, &opts.body_field_order) {
                (true, Some(order)) => strict = order.typed_errors(&unknown_fields),
                _ => strict.extend(unknown(unknown_fields)),
            }
            body = decoded;
            crate::resources::builtin::omit_empty(rt, &mut body);
            check_quantities(rt, &body)?;
        }
        if let Some(custom) = &rt.custom {
            // Read as kube reads custom resources: unstructured, so `2.0` is the integer 2.
            konverge_apimachinery::decoding::numbers_as_unstructured(&mut body);
            if let Some(structural) = &custom.structural {
                strict.extend(unknown(structural.prune(&mut body)));
                strict.extend(unknown(coerce_metadata(structural, &mut body)));
            }
        }
        strict_decoding(strict, opts.field_validation, &prefix, warnings)?;
        if let Some(structural) = rt.custom.as_ref().and_then(|c| c.structural.as_ref()) {
            structural.default(&mut body);
        }
        if let Some(default) = rt.default {
            default(&mut body);
        }
        // Defaulted, the object is what Go's struct holds: every field the struct always
        // writes is there, so updates compare like with like.
        crate::resources::builtin::shape_as_go(rt, &mut body);
        Ok(body)
    }

    /// Decodes a request body that is answered rather than stored (a review): wrong types are
    /// refused, unknown and duplicate fields handled as `fieldValidation` says.
    pub fn decode_request(
        &self,
        rt: &ResourceType,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        let mut warnings = Vec::new();
        self.decode_body(rt, body, opts, &mut warnings, true)
    }

    fn validate(&self, rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Result<()> {
        let name = meta::meta_str(obj, "name").unwrap_or("");
        let mut causes = Vec::new();
        causes.extend(rt.check_name(name, "metadata.name"));
        causes.extend(check_labels(obj));
        if let Some(validate) = rt.validate {
            causes.extend(validate(obj, old));
        }
        if let Some(custom) = &rt.custom {
            causes.extend(custom.validate(obj, old));
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&rt.kind, &rt.group, name, causes))
        }
    }

    /// Checks that the namespace of a namespaced create exists and is not terminating.
    async fn check_namespace(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<()> {
        let Some(namespaces) = self.catalog.get("", "v1", "namespaces") else {
            return Ok(());
        };
        let Some(kv) = self.read(&namespaces, None, ns).await? else {
            return Err(ApiError::not_found(Target {
                group: "",
                resource: "namespaces",
                name: ns,
            }));
        };
        let namespace = decode(&kv)?;
        if namespace.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::forbidden(
                target(rt, name),
                format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            ));
        }
        Ok(())
    }

    /// Creates an object. A name made from `generateName` that is taken already is made again,
    /// a few times, before the create fails (kube-apiserver's RetryGenerateName).
    pub async fn create(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let generated = meta::meta_str(&body, "name").is_none_or(str::is_empty)
            && meta::meta_str(&body, "generateName").is_some_and(|g| !g.is_empty());
        if !generated {
            return self.create_once(rt, ns, body, opts).await;
        }
        let mut attempts = NAME_GENERATION_ATTEMPTS;
        loop {
            attempts -= 1;
            match self.create_once(rt, ns, body.clone(), opts).await {
                Err(e) if e.reason == Reason::AlreadyExists && attempts > 0 => continue,
                other => return other,
            }
        }
    }

    async fn create_once(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let mut warnings = Vec::new();
        let mut obj = self.decode_body(rt, body, opts, &mut warnings, !opts.applied)?;
        let md = meta::metadata_mut(&mut obj);
        match (rt.namespaced, ns) {
            (true, Some(ns)) => match md.get("namespace").and_then(Value::as_str) {
                Some(given) if !given.is_empty() && given != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    md.insert("namespace".into(), json!(ns));
                }
            },
            (true, None) => {
                return Err(ApiError::bad_request(format!(
                    "{} must be created in a namespace",
                    rt.plural
                )));
            }
            (false, _) => {
                md.remove("namespace");
            }
        }
        let generate = md
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|g| !g.is_empty())
            .map(String::from);
        let has_name = md
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !has_name {
            match &generate {
                Some(prefix) => {
                    md.insert("name".into(), json!((self.generate_name)(prefix)));
                }
                None => {
                    return Err(ApiError::invalid(
                        &rt.kind,
                        &rt.group,
                        "",
                        vec![Cause {
                            reason: "FieldValueRequired".into(),
                            message: "Required value: name or generateName is required".into(),
                            field: "metadata.name".into(),
                        }],
                    ));
                }
            }
        }
        md.insert("uid".into(), json!(meta::new_uid()));
        md.insert("creationTimestamp".into(), json!(meta::now()));
        for field in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            md.remove(field);
        }
        if rt.generation {
            md.insert("generation".into(), json!(1));
        } else {
            md.remove("generation");
        }
        if rt.status
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        // Field ownership is recorded from the object as the client sent it (decoded and
        // defaulted), as kube-apiserver's create handler records it before admission and
        // the strategy: what admission plugins and webhooks add (a pod's service account
        // volume, tolerations, priority) and what the strategy sets (a pod's QoS class) is
        // owned by nobody.
        let mut obj = managed::record_update(rt, None, obj, None, opts.update_manager())?;
        if let Some(prepare) = rt.prepare_create {
            prepare(&mut obj);
        }
        let name = meta::meta_str(&obj, "name").unwrap_or("").to_string();
        let trace = crate::admission::Trace::default();
        let admitting = crate::admission::Attributes {
            operation: crate::admission::Operation::Create,
            rt,
            namespace: ns.unwrap_or(""),
            name: &name,
            subresource: None,
            old: None,
            user: opts.user.as_ref(),
            dry_run: opts.dry_run,
            trace: &trace,
        };
        let admitted = self.admit_create(&admitting, obj, opts).await;
        self.admission.finish(&admitting);
        let mut obj = admitted?;
        crate::resources::builtin::shape_as_go(rt, &mut obj);
        warnings.extend(trace.warnings());
        if opts.dry_run {
            if rt.allocates_addresses {
                self.allocate_service(ns, &mut obj, true).await?;
            }
            // A webhook-converted object goes to the storage version and back, as a dry run
            // in kube-apiserver encodes and decodes what it would store.
            let stored = match conversion::webhook(rt) {
                None => {
                    encode(rt, &obj)?;
                    None
                }
                Some(hook) => {
                    let stored = self.to_storage(rt, hook, obj.clone()).await?;
                    encode(rt, &stored)?;
                    Some((hook, stored))
                }
            };
            if self.read(rt, ns, &name).await?.is_some() {
                return Err(ApiError::already_exists(target(rt, &name)));
            }
            if let Some((hook, stored)) = stored {
                obj = self.served_one(rt, hook, stored).await?;
            }
            return Ok(Written {
                object: obj,
                created: true,
                warnings,
            });
        }
        let allocated = if rt.allocates_addresses {
            self.allocate_service(ns, &mut obj, false).await?
        } else {
            allocate::Allocated::default()
        };
        let hook = conversion::webhook(rt);
        let encoded = match hook {
            None => encode(rt, &obj).map(|value| (value, None)),
            Some(hook) => match self.to_storage(rt, hook, obj.clone()).await {
                Ok(stored) => encode(rt, &stored).map(|value| (value, Some(stored))),
                Err(e) => Err(e),
            },
        };
        let created = match encoded {
            Ok((value, stored)) => self
                .timed(
                    "create",
                    rt,
                    self.store.create(Bytes::from(rt.key(ns, &name)), value),
                )
                .await
                .map(|rev| (rev, stored))
                .map_err(|e| ApiError::from_store(e, target(rt, &name))),
            Err(e) => Err(e),
        };
        let (rev, stored) = match created {
            Ok(created) => created,
            Err(e) => {
                self.release_allocated(allocated).await;
                return Err(e);
            }
        };
        match (hook, stored) {
            // The answer is what was stored, read back in the request's version.
            (Some(hook), Some(mut stored)) => {
                set_rv(&mut stored, rev);
                obj = self.served_one(rt, hook, stored).await?;
            }
            _ => set_rv(&mut obj, rev),
        }
        Ok(Written {
            object: obj,
            created: true,
            warnings,
        })
    }

    /// A create's admission and validation: mutating admission, the kind's checks, the
    /// namespace, validating admission and the write check, in kube-apiserver's order.
    async fn admit_create(
        &self,
        admitting: &crate::admission::Attributes<'_>,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        let rt = admitting.rt;
        // NamespaceLifecycle comes first in kube-apiserver's chain: nothing else looks at an
        // object whose namespace is missing or going away.
        if self.namespace_lifecycle && rt.namespaced && !admitting.namespace.is_empty() {
            self.check_namespace(rt, admitting.namespace, admitting.name)
                .await?;
        }
        self.admission.admit(admitting, &mut obj, self).await?;
        self.validate(rt, &obj, None)?;
        self.admission.validate(admitting, &obj, self).await?;
        self.check_write(rt, None, &obj, opts).await?;
        Ok(obj)
    }

    /// Replaces an object (`PUT`), or its status (`subresource = Some("status")`).
    pub async fn update(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let mut warnings = Vec::new();
        let new = self.decode_body(rt, body, opts, &mut warnings, true)?;
        if let Some(body_name) = meta::meta_str(&new, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let (true, Some(ns), Some(body_ns)) =
            (rt.namespaced, ns, meta::meta_str(&new, "namespace"))
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let expected = match meta::meta_str(&new, "resourceVersion").filter(|rv| !rv.is_empty()) {
            Some(rv) => Some(parse_rv(rv)?),
            None => None,
        };
        let trace = crate::admission::Trace::default();
        let outcome = self
            .guaranteed_update(
                rt,
                ns,
                name,
                subresource,
                update::Write {
                    operation: Operation::Update,
                    opts,
                    trace: &trace,
                },
                |current_kv, current| {
                    if let Some(expected) = expected
                        && expected != current_kv.mod_revision
                    {
                        return Err(ApiError::modified(target(rt, name)));
                    }
                    let merged = self.merge_update(rt, &current, new.clone(), subresource, opts)?;
                    self.prepare_update(rt, &current, merged, subresource, opts)
                },
            )
            .await;
        match outcome {
            Err(e)
                if e.reason == Reason::NotFound
                    && rt.create_on_update
                    && subresource.is_none()
                    && expected.is_none() =>
            {
                let mut created = new;
                meta::metadata_mut(&mut created).insert("name".into(), json!(name));
                let mut written = self.create(rt, ns, created, opts).await?;
                written.warnings.extend(warnings);
                Ok(written)
            }
            Err(e) => Err(e),
            Ok((object, _)) => Ok(Written {
                object,
                created: false,
                warnings: warnings.into_iter().chain(trace.warnings()).collect(),
            }),
        }
    }

    /// Applies `patch` to the current object (retrying when the object changes underneath)
    /// and stores the result as an update.
    pub async fn patch(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        opts: &WriteOptions,
        apply: &(dyn Fn(&Value) -> Result<Value> + Send + Sync),
    ) -> Result<Written> {
        let mut warnings = Vec::new();
        let trace = crate::admission::Trace::default();
        let (object, _) = self
            .guaranteed_update(
                rt,
                ns,
                name,
                subresource,
                update::Write {
                    operation: Operation::Update,
                    opts,
                    trace: &trace,
                },
                |current_kv, current| {
                    let patched = apply(&current)?;
                    // A resourceVersion in the patch is a precondition; otherwise the patch
                    // applies to whatever is current.
                    if let Some(rv) =
                        meta::meta_str(&patched, "resourceVersion").filter(|rv| !rv.is_empty())
                        && parse_rv(rv)? != current_kv.mod_revision
                    {
                        return Err(ApiError::modified(target(rt, name)));
                    }
                    warnings.clear();
                    let new = self.decode_body(rt, patched, opts, &mut warnings, false)?;
                    if meta::meta_str(&new, "name").is_some_and(|n| n != name) {
                        return Err(ApiError::invalid(
                            &rt.kind,
                            &rt.group,
                            name,
                            vec![Cause::invalid(
                                "metadata.name",
                                &json!(meta::meta_str(&new, "name")),
                                "field is immutable",
                            )],
                        ));
                    }
                    let merged = self.merge_update(rt, &current, new, subresource, opts)?;
                    self.prepare_update(rt, &current, merged, subresource, opts)
                },
            )
            .await?;
        warnings.extend(trace.warnings());
        Ok(Written {
            object,
            created: false,
            warnings,
        })
    }

    /// The object an update stores: `new` with what the client may not change taken from
    /// `current`.
    fn merge_update(
        &self,
        rt: &ResourceType,
        current: &Value,
        new: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
    ) -> Result<Value> {
        let name = meta::meta_str(current, "name").unwrap_or("");
        let mut merged = match subresource {
            Some(sub) => match rt.subresource(sub).map(|s| s.storage) {
                // The subresource's strategy says which part of the object it writes.
                Some(crate::resources::Storage::Part(part)) => {
                    (part.merge)(rt, current, new).map_err(ApiError::bad_request)?
                }
                _ => {
                    return Err(ApiError::no_route().with_message(format!(
                        "the server does not support the {sub} subresource of {}",
                        rt.plural
                    )));
                }
            },
            None => {
                let mut merged = new;
                if rt.allocates_addresses {
                    allocate::carry_service_addresses(&mut merged, current);
                    allocate::drop_type_dependent_fields(&mut merged, current);
                }
                if held_by_spec_finalizers(rt) {
                    // Only `/finalize` changes a namespace's finalizers.
                    merged["spec"]["finalizers"] = current
                        .pointer("/spec/finalizers")
                        .cloned()
                        .unwrap_or_else(|| json!([]));
                }
                // The server's own write outside the kind's strategy (a binding) stores
                // the status it made, as kube's storage does.
                if rt.status && !opts.not_an_update {
                    match current.get("status") {
                        Some(status) => merged["status"] = status.clone(),
                        None => {
                            if let Some(o) = merged.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                merged
            }
        };
        let new_uid = meta::meta_str(&merged, "uid").map(String::from);
        let old_md = current
            .get("metadata")
            .cloned()
            .unwrap_or_else(|| json!({}));
        if let Some(uid) = new_uid.filter(|u| !u.is_empty())
            && Some(uid.as_str()) != old_md["uid"].as_str()
        {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                name,
                vec![Cause::invalid(
                    "metadata.uid",
                    &json!(uid),
                    "field is immutable",
                )],
            ));
        }
        let old_finalizers = meta::finalizers(current);
        let md = meta::metadata_mut(&mut merged);
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_md.get(field) {
                Some(v) => md.insert(field.into(), v.clone()),
                None => md.remove(field),
            };
        }
        md.remove("resourceVersion");
        if rt.generation && generation_part(rt, &merged) != generation_part(rt, current) {
            let generation = old_md["generation"].as_i64().unwrap_or(0) + 1;
            meta::metadata_mut(&mut merged).insert("generation".into(), json!(generation));
        }
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            let added: Vec<String> = meta::finalizers(&merged)
                .into_iter()
                .filter(|f| !old_finalizers.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    name,
                    vec![Cause::forbidden(
                        "metadata.finalizers",
                        format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        Ok(merged)
    }

    /// What an update of `current` to `merged` stores: nothing when nothing changed (a no-op
    /// update writes nothing and keeps the resourceVersion, so controllers that write back
    /// what they read do not wake themselves up), a deletion when the update removes the last
    /// finalizer a deletion was waiting for, or the validated object.
    fn prepare_update(
        &self,
        rt: &ResourceType,
        current: &Value,
        merged: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
    ) -> Result<Change> {
        let mut merged = managed::record_update(
            rt,
            Some(current),
            merged,
            subresource,
            opts.update_manager(),
        )?;
        if opts.not_an_update {
            // A binding is stored as kube-apiserver's storage stores it, outside the kind's
            // update strategy: no new generation.
            match current.pointer("/metadata/generation") {
                Some(generation) => {
                    meta::metadata_mut(&mut merged).insert("generation".into(), generation.clone());
                }
                None => {
                    meta::metadata_mut(&mut merged).remove("generation");
                }
            }
        }
        // Binding, resizing a pod and adding ephemeral containers change what the kind's
        // update rules keep; kube-apiserver checks those writes with their own rules, so
        // the object is checked against itself here.
        let own_rules = opts.not_an_update
            || subresource
                .and_then(|s| rt.subresource(s))
                .is_some_and(|s| s.storage.own_rules());
        self.validate(rt, &merged, Some(if own_rules { &merged } else { current }))?;
        crate::resources::builtin::shape_as_go(rt, &mut merged);
        if same_but_resource_version(&merged, current) {
            let mut unchanged = merged;
            if let Some(rv) = current.pointer("/metadata/resourceVersion") {
                meta::metadata_mut(&mut unchanged).insert("resourceVersion".into(), rv.clone());
            }
            return Ok(Change::Unchanged(unchanged));
        }
        // An update that removes the last finalizer deletes the object, unless a graceful
        // deletion is still counting down (a terminating pod goes when its kubelet deletes
        // it), as kube-apiserver's `shouldDeleteDuringUpdate`.
        let grace_left = current
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if current.pointer("/metadata/deletionTimestamp").is_some()
            && grace_left == 0
            && meta::pending_finalizers(&merged, held_by_spec_finalizers(rt)).is_empty()
        {
            return Ok(Change::Delete(merged));
        }
        Ok(Change::Store(merged))
    }

    /// Deletes an object, or marks it for deletion while finalizers remain.
    pub async fn delete(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted> {
        self.delete_warned(rt, ns, name, opts)
            .await
            .map(|(deleted, _)| deleted)
    }

    /// [`Registry::delete`], with the warnings admission sent for the client.
    pub async fn delete_warned(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<(Deleted, Vec<String>)> {
        // A delete stores the object only to mark it deleting: the write check has nothing
        // to check, and admission sees a DELETE, not the update that marks it.
        let write = WriteOptions {
            dry_run: opts.dry_run,
            user: opts.user.clone(),
            ..WriteOptions::default()
        };
        let trace = crate::admission::Trace::default();
        if self.admission.handles_operation(rt, Operation::Delete) {
            // The mutating phase of a delete has no object to change (kube-apiserver's
            // delete handler admits it before reading the object).
            let admitting = crate::admission::Attributes {
                operation: Operation::Delete,
                rt,
                namespace: ns.unwrap_or(""),
                name,
                subresource: None,
                old: None,
                user: opts.user.as_ref(),
                dry_run: opts.dry_run,
                trace: &trace,
            };
            let admitted = self
                .admission
                .admit(&admitting, &mut Value::Null, self)
                .await;
            if admitted.is_err() {
                self.admission.finish(&admitting);
            }
            admitted?;
        }
        let (object, outcome) = self
            .guaranteed_update(rt, ns, name, None, update::Write { operation: Operation::Delete, opts: &write, trace: &trace }, |kv, current| {
                if let Some(uid) = &opts.precondition_uid {
                    let actual = meta::meta_str(&current, "uid").unwrap_or("");
                    if actual != uid {
                        return Err(ApiError::conflict(
                            target(rt, name),
                            format!(
                                "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                            ),
                        ));
                    }
                }
                if let Some(rv) = &opts.precondition_resource_version
                    && parse_rv(rv)? != kv.mod_revision
                {
                    return Err(ApiError::conflict(
                        target(rt, name),
                        format!(
                            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                            kv.mod_revision
                        ),
                    ));
                }
                Ok(decide_delete(rt, current, opts, jiff::Timestamp::now()))
            })
            .await?;
        if outcome == Outcome::Deleted && rt.allocates_addresses && !opts.dry_run {
            self.release_service(&object).await;
        }
        let deleted = match outcome {
            Outcome::Deleted => Deleted::Gone(object),
            Outcome::Stored | Outcome::Unchanged => Deleted::Pending(object),
        };
        Ok((deleted, trace.warnings()))
    }

    /// Deletes every object a list with `list` options returns.
    pub async fn delete_collection(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<Vec<Value>> {
        let listed = self
            .list(
                rt,
                ns,
                &ListOptions {
                    limit: None,
                    continue_token: None,
                    ..list.clone()
                },
            )
            .await?;
        let mut deleted = Vec::new();
        for obj in listed.items {
            let name = meta::meta_str(&obj, "name").unwrap_or("").to_string();
            let obj_ns = meta::meta_str(&obj, "namespace").map(String::from);
            match self.delete(rt, obj_ns.as_deref(), &name, opts).await {
                Ok(Deleted::Gone(o) | Deleted::Pending(o)) => deleted.push(o),
                Err(e) if e.reason == Reason::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    /// Counts the objects of a resource (all namespaces).
    pub async fn count(&self, rt: &ResourceType) -> Result<u64> {
        let resp = self
            .store
            .range(
                RangeRequest::new(KeyRange::prefix(Bytes::from(rt.storage_prefix()))).count_only(),
            )
            .await
            .map_err(|e| ApiError::from_store(e, target(rt, "")))?;
        Ok(resp.count)
    }
}

/// Refuses a body holding a resource quantity that is not one (`cpu: "1 core"`), as
/// kube-apiserver's decoder does, with `resource.ParseQuantity`'s words.
fn check_quantities(rt: &ResourceType, body: &Value) -> Result<()> {
    for (_, value) in konverge_protobuf::quantities(body) {
        let text = match value {
            Value::String(s) => s.trim().to_string(),
            Value::Number(n) => n.to_string(),
            _ => continue,
        };
        if let Err(e) = konverge_apimachinery::quantity::parse(&text) {
            return Err(ApiError::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: {e}",
                rt.kind, rt.version, rt.kind
            )));
        }
    }
    Ok(())
}

/// Strict decoding errors (duplicate fields, fields the type does not have): refused,
/// warned about or ignored, as `fieldValidation` says.
fn strict_decoding(
    errors: Vec<String>,
    validation: FieldValidation,
    prefix: &str,
    warnings: &mut Vec<String>,
) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    match validation {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "{prefix}strict decoding error: {}",
            errors.join(", ")
        ))),
        FieldValidation::Warn => {
            warnings.extend(yaml_warnings(errors));
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

/// The unknown fields of a custom resource's ObjectMetas, removed: those of the resources
/// embedded in it first, in document order, then those of its own `metadata`, as
/// apiextensions-apiserver coerces them.
fn coerce_metadata(
    structural: &konverge_apimachinery::schema::Structural,
    body: &mut Value,
) -> Vec<String> {
    let mut embedded = Vec::new();
    let mut own = Vec::new();
    structural.visit_resources(body, &mut |path, resource| {
        let Some(metadata) = resource.get_mut("metadata").filter(|m| m.is_object()) else {
            return;
        };
        if path.is_empty() {
            own = crate::resources::builtin::coerce_object_meta(metadata, "metadata");
        } else {
            let prefix = format!("{path}.metadata");
            embedded.extend(crate::resources::builtin::coerce_object_meta(
                metadata, &prefix,
            ));
        }
    });
    embedded.extend(own);
    embedded
}

/// Strict decoding errors as warnings: goyaml's `yaml: unmarshal errors:` text is one
/// warning per line (`line 5: key "name" already set in map`), as kube-apiserver splits it.
pub(crate) fn yaml_warnings(errors: Vec<String>) -> Vec<String> {
    const PREFIX: &str = "yaml: unmarshal errors:\n";
    let mut warnings = Vec::with_capacity(errors.len());
    for error in errors {
        match error.strip_prefix(PREFIX) {
            Some(lines) => warnings.extend(
                lines
                    .split('\n')
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from),
            ),
            None => warnings.push(error),
        }
    }
    warnings
}

/// What `metadata.generation` counts changes of: everything but metadata, and but status
/// when the status has its own subresource (custom resources without one count status too).
fn generation_part(rt: &ResourceType, obj: &Value) -> Value {
    let mut part = meta::spec_part(obj);
    if rt.custom.is_some()
        && !rt.status
        && let (Some(status), Some(map)) = (obj.get("status"), part.as_object_mut())
    {
        map.insert("status".into(), status.clone());
    }
    part
}

/// Whether `spec.finalizers` hold the resource's objects too (namespaces).
fn held_by_spec_finalizers(rt: &ResourceType) -> bool {
    rt.deletion == crate::resources::Deletion::SpecFinalizers
}

/// Label keys and values must be valid, as kube-apiserver checks them on every object.
fn check_labels(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) else {
        return causes;
    };
    for (key, value) in labels {
        let field = "metadata.labels";
        for message in konverge_apimachinery::selector::label_key_errors(key) {
            causes.push(Cause::invalid(field, &json!(key), message));
        }
        match value.as_str() {
            Some(v) => {
                for message in konverge_apimachinery::selector::label_value_errors(v) {
                    causes.push(Cause::invalid(field, value, message));
                }
            }
            None => causes.push(Cause::invalid(field, value, "must be a string")),
        }
    }
    causes
}

impl ApiError {
    /// The same error with another message.
    pub fn with_message(mut self, message: String) -> Self {
        self.message = message;
        self
    }
}

#[async_trait::async_trait]
impl Lister for Registry {
    fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    async fn get(&self, rt: &ResourceType, namespace: Option<&str>, name: &str) -> Result<Value> {
        Registry::get(self, rt, namespace, name, None).await
    }

    async fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: Option<&konverge_apimachinery::selector::LabelSelector>,
    ) -> Result<Vec<Arc<Value>>> {
        let options = ListOptions {
            label_selector: labels.cloned(),
            ..ListOptions::default()
        };
        Ok(Registry::list(self, rt, namespace, &options).await?.items)
    }

    fn changes(&self, of: Changes) -> u64 {
        self.changes[of as usize].load(Ordering::Acquire)
    }

    async fn write_status(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        object: Value,
    ) -> Result<()> {
        self.update(
            rt,
            namespace,
            name,
            object,
            Some("status"),
            &WriteOptions::default(),
        )
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_that_changes_nothing_but_the_resource_version_is_no_change() {
        let current = json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "7"},
                             "spec": {"nodeName": "a"}});
        let cases = [
            (
                json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "3"},
                    "spec": {"nodeName": "a"}}),
                true,
            ),
            (
                json!({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "a"}}),
                true,
            ),
            (
                json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "7"},
                    "spec": {"nodeName": "b"}}),
                false,
            ),
            (
                json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "7",
                    "labels": {"a": "b"}}, "spec": {"nodeName": "a"}}),
                false,
            ),
            (
                json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "7"}}),
                false,
            ),
        ];
        for (new, same) in cases {
            assert_eq!(same_but_resource_version(&new, &current), same, "{new}");
        }
        // Without a resourceVersion stored, one in the write is a change.
        let stored = json!({"metadata": {"name": "p"}});
        assert!(same_but_resource_version(
            &json!({"metadata": {"name": "p"}}),
            &stored
        ));
        assert!(!same_but_resource_version(
            &json!({"metadata": {"name": "p", "resourceVersion": "1"}}),
            &stored
        ));
    }

    /// A name generator that hands out `-aaaaa` first and `-bbbbb` after.
    fn colliding(prefix: &str) -> String {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        format!("{prefix}{}", if n == 0 { "aaaaa" } else { "bbbbb" })
    }

    #[tokio::test]
    async fn generated_names_that_are_taken_are_generated_again() {
        let store: Arc<dyn KvStore> = Arc::new(konverge_store::MemStore::new());
        let mut registry = Registry::new(store, Arc::new(Catalog::builtin()));
        registry.generate_name = colliding;
        let config_maps = registry.catalog().get("", "v1", "configmaps").unwrap();
        let namespaces = registry.catalog().get("", "v1", "namespaces").unwrap();
        let opts = WriteOptions::default();
        registry
            .create(&namespaces, None, json!({"metadata": {"name": "d"}}), &opts)
            .await
            .unwrap();
        registry
            .create(
                &config_maps,
                Some("d"),
                json!({"metadata": {"name": "web-aaaaa"}}),
                &opts,
            )
            .await
            .unwrap();
        let made = registry
            .create(
                &config_maps,
                Some("d"),
                json!({"metadata": {"generateName": "web-"}}),
                &opts,
            )
            .await
            .expect("a second name is generated");
        assert_eq!(made.object["metadata"]["name"], "web-bbbbb");
        // A name given by the client is never replaced.
        let taken = registry
            .create(
                &config_maps,
                Some("d"),
                json!({"metadata": {"name": "web-aaaaa"}}),
                &opts,
            )
            .await
            .unwrap_err();
        assert_eq!(taken.reason, Reason::AlreadyExists);
    }
}
