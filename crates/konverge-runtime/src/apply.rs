//! Child objects applied in declared dependency order, written only when they differ.
//!
//! A controller that creates its children by iterating a hash map creates them in a different
//! order on every run: a Deployment before the ConfigMap it mounts, a Service before the Secret
//! it needs. And a controller that writes every child on every pass triggers itself forever
//! through the watch on its children. [`ChildSet`] designs both out:
//!
//! - children and their dependencies are declared up front; [`ChildSet::plan`] sorts them
//!   topologically with ties broken by id, so the order is the same on every run, and rejects a
//!   cycle with an error that names it (`dependency cycle: a -> b -> a`) before anything is
//!   written;
//! - [`ChildSet::apply`] walks that order and never blocks: a child whose dependency is not ready
//!   yet (by the dependency's [`ChildSet::ready_when`] predicate, default: it exists) ends the pass
//!   with [`ApplyOutcome::Waiting`], and the caller requeues;
//! - a child is created when absent, and otherwise written only when a field it declares differs
//!   from the live object, so a converged child set costs zero writes.
//!
//! Comparison is "desired is a subset of live": every field the desired object sets must have the
//! same value in the live object; fields the server adds (defaults, `status`, server-set metadata)
//! are ignored, and an empty map or list counts as absent (Go's `omitempty`). Declared `status` is
//! ignored: a child's status belongs to the child's own controller.
//!
//! Children are written one of two ways:
//!
//! - By default, a JSON merge patch of the desired object, conditional on the live object's
//!   resourceVersion, so a concurrent change surfaces as a conflict, not a lost update. A field
//!   removed from the desired object is *not* removed from the live one: say it explicitly as
//!   `null`.
//! - With [`ChildSet::server_side`], server-side apply as a field manager, forcing conflicts (a
//!   controller owns its children). The server then removes what the controller applied before
//!   and no longer declares (a dropped label, container or port) unless another manager owns it,
//!   so children never keep stale fields. The apply is skipped when the live object already
//!   has every desired field and the manager owns nothing the desired object lacks (read from
//!   the manager's `managedFields`), so a converged child set costs zero writes here too.
//!
//! Children are addressed by the namespace in their `metadata.namespace`; a child without one is
//! cluster-scoped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde_json::Value;

/// Metadata the server sets and a desired object never decides.
const SERVER_SET_METADATA: &[&str] = &[
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// Errors from planning and applying a [`ChildSet`].
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The dependencies form a cycle; `cycle` lists it from its smallest id, each entry depending
    /// on the next, and repeats the first id at the end.
    #[error("dependency cycle: {}", cycle.join(" -> "))]
    Cycle {
        /// The ids on the cycle, first id repeated at the end.
        cycle: Vec<String>,
    },
    /// A child depends on an id that was never declared with [`ChildSet::child`].
    #[error("child {child} depends on {dependency}, which is not a declared child")]
    UnknownDependency {
        /// The child that declares the dependency.
        child: String,
        /// The undeclared id.
        dependency: String,
    },
    /// [`ChildSet::depends_on`] or [`ChildSet::ready_when`] named an id that is not a child.
    #[error("{method} names {id}, which is not a declared child")]
    UnknownChild {
        /// The undeclared id.
        id: String,
        /// The builder method that named it.
        method: &'static str,
    },
    /// Two children were declared with the same id.
    #[error("child {id} is declared twice")]
    DuplicateChild {
        /// The id declared twice.
        id: String,
    },
    /// A child's desired object has no `metadata.name`.
    #[error("child {child} has no metadata.name")]
    MissingName {
        /// The child's id.
        child: String,
    },
    /// A child's desired object could not be turned into JSON, or its JSON into an object.
    #[error("child {child} cannot be serialized: {source}")]
    Serialize {
        /// The child's id.
        child: String,
        /// The serializer's error (shared: the builder records it and every plan reports it).
        #[source]
        source: Arc<serde_json::Error>,
    },
    /// Reading a child from the API server failed.
    #[error("failed to get child {child}: {source}")]
    Get {
        /// The child's id.
        child: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Creating a child failed.
    #[error("failed to create child {child}: {source}")]
    Create {
        /// The child's id.
        child: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Patching a child that differs from its desired state failed.
    #[error("failed to patch child {child}: {source}")]
    Patch {
        /// The child's id.
        child: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An owner reference was asked for an object without a name or uid, i.e. one that was not
    /// read from the API server.
    #[error("owner {kind} {name:?} has no name or uid: it was not read from the API server")]
    OwnerNotPersisted {
        /// The owner's kind.
        kind: String,
        /// The owner's name, if it has one.
        name: Option<String>,
    },
}

impl ApplyError {
    /// Whether a write lost a race: 409 Conflict on a patch (the child changed since it was
    /// read) or AlreadyExists on a create (someone created it meanwhile). Requeue at once.
    pub fn is_conflict(&self) -> bool {
        match self {
            ApplyError::Create {
                source: kube::Error::Api(status),
                ..
            }
            | ApplyError::Patch {
                source: kube::Error::Api(status),
                ..
            } => status.is_conflict() || status.is_already_exists(),
            _ => false,
        }
    }
}

/// `Result` with this module's error.
pub type Result<T, E = ApplyError> = std::result::Result<T, E>;

/// What one [`ChildSet::apply`] pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// Every child was applied. Ids are in plan order.
    Applied {
        /// Children created or patched.
        written: Vec<String>,
        /// Children that already matched their desired state.
        unchanged: Vec<String>,
    },
    /// The pass stopped before `child`, because its dependency `on` is not ready. Requeue.
    Waiting {
        /// The child that was not applied.
        child: String,
        /// Its first (by id) dependency that is not ready.
        on: String,
        /// Children created or patched before the pass stopped, in plan order.
        written: Vec<String>,
    },
}

/// A readiness predicate on a child's live object.
type ReadyFn = Box<dyn Fn(&DynamicObject) -> bool + Send + Sync>;

struct Child {
    resource: ApiResource,
    /// The desired object as JSON, with server-set metadata and status removed.
    desired: Value,
}

/// A builder mistake, kept until [`ChildSet::plan`] reports it.
#[derive(Clone)]
enum Mistake {
    Duplicate(String),
    MissingName(String),
    Serialize(String, Arc<serde_json::Error>),
}

impl From<Mistake> for ApplyError {
    fn from(mistake: Mistake) -> Self {
        match mistake {
            Mistake::Duplicate(id) => ApplyError::DuplicateChild { id },
            Mistake::MissingName(child) => ApplyError::MissingName { child },
            Mistake::Serialize(child, source) => ApplyError::Serialize { child, source },
        }
    }
}

/// A set of child objects with declared dependencies, applied in a deterministic order.
///
/// ```no_run
/// # async fn example(client: kube::Client, owner: &k8s_openapi::api::core::v1::ConfigMap)
/// # -> Result<(), konverge_runtime::apply::ApplyError> {
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// use konverge_runtime::apply::{ApplyOutcome, ChildSet, owner_reference};
///
/// let owner = owner_reference(owner)?;
/// let mut secret = Secret::default();
/// secret.metadata.name = Some("db-credentials".into());
/// secret.metadata.namespace = Some("shop".into());
/// secret.metadata.owner_references = Some(vec![owner.clone()]);
/// let mut config = ConfigMap::default();
/// config.metadata.name = Some("app-config".into());
/// config.metadata.namespace = Some("shop".into());
/// config.metadata.owner_references = Some(vec![owner]);
///
/// let children = ChildSet::new()
///     .typed_child("secret", &secret)
///     .typed_child("config", &config)
///     .depends_on("config", ["secret"]);
/// match children.apply(&client).await? {
///     ApplyOutcome::Applied { .. } => {}
///     ApplyOutcome::Waiting { .. } => { /* requeue after a short delay */ }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct ChildSet {
    children: BTreeMap<String, Child>,
    dependencies: BTreeMap<String, BTreeSet<String>>,
    readiness: BTreeMap<String, ReadyFn>,
    mistakes: Vec<Mistake>,
    field_manager: Option<String>,
}

impl fmt::Debug for ChildSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildSet")
            .field("children", &self.children.keys().collect::<Vec<_>>())
            .field("dependencies", &self.dependencies)
            .field("ready_when", &self.readiness.keys().collect::<Vec<_>>())
            .field("field_manager", &self.field_manager)
            .finish()
    }
}

impl ChildSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a child: `desired` is the object it should be, `resource` says where it lives.
    ///
    /// Mistakes (a duplicate id, a missing name) are reported by [`ChildSet::plan`] and
    /// [`ChildSet::apply`], so the builder chains without `?`.
    pub fn child(
        self,
        id: impl Into<String>,
        resource: ApiResource,
        desired: DynamicObject,
    ) -> Self {
        let id = id.into();
        let value = serde_json::to_value(&desired);
        self.insert(id, resource, value)
    }

    /// Declares a child from a typed object (`ConfigMap`, `Deployment`, a derived custom
    /// resource, ...); the resource is taken from its type.
    pub fn typed_child<K>(self, id: impl Into<String>, desired: &K) -> Self
    where
        K: Resource + Serialize,
        K::DynamicType: Default,
    {
        let resource = ApiResource::erase::<K>(&K::DynamicType::default());
        self.insert(id.into(), resource, serde_json::to_value(desired))
    }

    /// Writes the children with server-side apply as `field_manager` (see the module docs): the
    /// server prunes fields this manager applied before and no longer declares.
    pub fn server_side(mut self, field_manager: impl Into<String>) -> Self {
        self.field_manager = Some(field_manager.into());
        self
    }

    /// Declares that `id` is applied only after each of `dependencies` exists and is ready.
    /// May be called several times; dependencies add up.
    pub fn depends_on<I, S>(mut self, id: impl Into<String>, dependencies: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.dependencies
            .entry(id.into())
            .or_default()
            .extend(dependencies.into_iter().map(Into::into));
        self
    }

    /// Declares when the live child `id` is ready for its dependents (default: once it exists).
    /// The predicate sees the object exactly as the server returned it, status included.
    pub fn ready_when(
        mut self,
        id: impl Into<String>,
        ready: impl Fn(&DynamicObject) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.readiness.insert(id.into(), Box::new(ready));
        self
    }

    /// The order [`ChildSet::apply`] uses: every child after its dependencies, ties broken by
    /// id, so the same declarations give the same order on every run.
    ///
    /// Errors: a builder mistake, an unknown id in `depends_on`/`ready_when`, an unknown
    /// dependency, or a cycle (named in the error), in that order of precedence.
    pub fn plan(&self) -> Result<Vec<String>> {
        if let Some(mistake) = self.mistakes.first() {
            return Err(mistake.clone().into());
        }
        for (id, method) in self
            .dependencies
            .keys()
            .map(|id| (id, "depends_on"))
            .chain(self.readiness.keys().map(|id| (id, "ready_when")))
        {
            if !self.children.contains_key(id) {
                return Err(ApplyError::UnknownChild {
                    id: id.clone(),
                    method,
                });
            }
        }
        for (child, dependencies) in &self.dependencies {
            if let Some(dependency) = dependencies
                .iter()
                .find(|d| !self.children.contains_key(*d))
            {
                return Err(ApplyError::UnknownDependency {
                    child: child.clone(),
                    dependency: dependency.clone(),
                });
            }
        }
        topological_order(self.children.keys(), &self.dependencies)
    }

    /// Applies the children in [`ChildSet::plan`] order (see the module docs). Nothing is
    /// written when planning fails. Never waits: a dependency that is not ready ends the pass
    /// with [`ApplyOutcome::Waiting`].
    pub async fn apply(&self, client: &Client) -> Result<ApplyOutcome> {
        let order = self.plan()?;
        let mut live: BTreeMap<&str, DynamicObject> = BTreeMap::new();
        let mut written = Vec::new();
        let mut unchanged = Vec::new();
        for id in &order {
            for dependency in self.dependencies.get(id).into_iter().flatten() {
                // Plan order puts every dependency before its dependents, so it is in `live`.
                let ready = match (
                    live.get(dependency.as_str()),
                    self.readiness.get(dependency),
                ) {
                    (Some(object), Some(ready)) => ready(object),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if !ready {
                    return Ok(ApplyOutcome::Waiting {
                        child: id.clone(),
                        on: dependency.clone(),
                        written,
                    });
                }
            }
            let child = &self.children[id];
            let (object, wrote) = match &self.field_manager {
                Some(manager) => apply_child_server_side(client, id, child, manager).await?,
                None => apply_child(client, id, child).await?,
            };
            if wrote {
                written.push(id.clone());
            } else {
                unchanged.push(id.clone());
            }
            live.insert(id, object);
        }
        Ok(ApplyOutcome::Applied { written, unchanged })
    }

    fn insert(
        mut self,
        id: String,
        resource: ApiResource,
        desired: serde_json::Result<Value>,
    ) -> Self {
        if self.children.contains_key(&id) {
            self.mistakes.push(Mistake::Duplicate(id));
            return self;
        }
        let mut desired = match desired {
            Ok(desired) => desired,
            Err(error) => {
                self.mistakes.push(Mistake::Serialize(id, Arc::new(error)));
                return self;
            }
        };
        let Value::Object(fields) = &mut desired else {
            self.mistakes.push(Mistake::MissingName(id));
            return self;
        };
        fields.remove("status");
        fields
            .entry("apiVersion")
            .or_insert_with(|| resource.api_version.clone().into());
        fields
            .entry("kind")
            .or_insert_with(|| resource.kind.clone().into());
        if let Some(Value::Object(metadata)) = fields.get_mut("metadata") {
            metadata.retain(|key, _| !SERVER_SET_METADATA.contains(&key.as_str()));
        }
        if desired
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_none()
        {
            self.mistakes.push(Mistake::MissingName(id));
            return self;
        }
        self.children.insert(id, Child { resource, desired });
        self
    }
}

/// Kahn's algorithm with a sorted ready set: the smallest id whose dependencies are all placed
/// goes next.
fn topological_order<'a>(
    ids: impl Iterator<Item = &'a String>,
    dependencies: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Vec<String>> {
    let mut waiting_on: BTreeMap<&str, usize> = BTreeMap::new();
    let mut dependents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for id in ids {
        let deps = dependencies.get(id);
        waiting_on.insert(id, deps.map_or(0, BTreeSet::len));
        for dependency in deps.into_iter().flatten() {
            dependents.entry(dependency).or_default().push(id);
        }
    }
    let mut ready: BTreeSet<&str> = waiting_on
        .iter()
        .filter(|(_, count)| **count == 0)
        .map(|(id, _)| *id)
        .collect();
    let mut order = Vec::with_capacity(waiting_on.len());
    while let Some(id) = ready.pop_first() {
        order.push(id.to_owned());
        for dependent in dependents.get(id).into_iter().flatten() {
            if let Some(count) = waiting_on.get_mut(dependent) {
                *count -= 1;
                if *count == 0 {
                    ready.insert(dependent);
                }
            }
        }
    }
    if order.len() == waiting_on.len() {
        return Ok(order);
    }
    let stuck: BTreeSet<&str> = waiting_on
        .iter()
        .filter(|(_, count)| **count > 0)
        .map(|(id, _)| *id)
        .collect();
    Err(ApplyError::Cycle {
        cycle: find_cycle(&stuck, dependencies),
    })
}

/// A cycle among `stuck`, the children Kahn's algorithm could not place. Each of them waits on
/// at least one other stuck child, so following the smallest such dependency from the smallest
/// stuck child must come back to a child already seen. The cycle is rotated to start at its
/// smallest id, so the report is the same on every run.
fn find_cycle(
    stuck: &BTreeSet<&str>,
    dependencies: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut path: Vec<&str> = Vec::new();
    let mut seen_at: BTreeMap<&str, usize> = BTreeMap::new();
    let mut current = stuck.first().copied();
    while let Some(id) = current {
        if let Some(&start) = seen_at.get(id) {
            let cycle = &path[start..];
            let smallest = (0..cycle.len())
                .min_by_key(|&i| cycle[i])
                .unwrap_or_default();
            let mut named: Vec<String> = cycle[smallest..]
                .iter()
                .chain(&cycle[..smallest])
                .map(|id| (*id).to_owned())
                .collect();
            named.push(named[0].clone());
            return named;
        }
        seen_at.insert(id, path.len());
        path.push(id);
        current = dependencies
            .get(id)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .find(|dependency| stuck.contains(dependency));
    }
    // Unreachable for a set produced by Kahn's algorithm; report what is stuck rather than panic.
    stuck.iter().map(|id| (*id).to_owned()).collect()
}

/// The API of `child`'s resource in its namespace (or cluster-wide), and its name.
fn child_api<'c>(client: &Client, child: &'c Child) -> (Api<DynamicObject>, &'c str) {
    let api = match child
        .desired
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &child.resource),
        None => Api::all_with(client.clone(), &child.resource),
    };
    let name = child
        .desired
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    (api, name)
}

/// Creates the child when absent, patches it when it differs; returns the live object and
/// whether anything was written.
async fn apply_child(client: &Client, id: &str, child: &Child) -> Result<(DynamicObject, bool)> {
    let (api, name) = child_api(client, child);
    let existing = api.get_opt(name).await.map_err(|source| ApplyError::Get {
        child: id.to_owned(),
        source,
    })?;
    let Some(existing) = existing else {
        let desired: DynamicObject =
            serde_json::from_value(child.desired.clone()).map_err(|error| {
                ApplyError::Serialize {
                    child: id.to_owned(),
                    source: Arc::new(error),
                }
            })?;
        let created = api
            .create(&PostParams::default(), &desired)
            .await
            .map_err(|source| ApplyError::Create {
                child: id.to_owned(),
                source,
            })?;
        return Ok((created, true));
    };
    let live = serde_json::to_value(&existing).map_err(|error| ApplyError::Serialize {
        child: id.to_owned(),
        source: Arc::new(error),
    })?;
    if is_subset(&child.desired, &live) {
        return Ok((existing, false));
    }
    let mut patch = child.desired.clone();
    if let (Some(Value::Object(metadata)), Some(resource_version)) = (
        patch.get_mut("metadata"),
        &existing.metadata.resource_version,
    ) {
        metadata.insert("resourceVersion".into(), resource_version.clone().into());
    }
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|source| ApplyError::Patch {
            child: id.to_owned(),
            source,
        })?;
    Ok((patched, true))
}

/// Applies the child server-side as `manager` unless it has converged (see the module docs);
/// returns the live object and whether anything was written.
async fn apply_child_server_side(
    client: &Client,
    id: &str,
    child: &Child,
    manager: &str,
) -> Result<(DynamicObject, bool)> {
    let (api, name) = child_api(client, child);
    let existing = api.get_opt(name).await.map_err(|source| ApplyError::Get {
        child: id.to_owned(),
        source,
    })?;
    if let Some(existing) = existing.as_ref() {
        let live = serde_json::to_value(existing).map_err(|error| ApplyError::Serialize {
            child: id.to_owned(),
            source: Arc::new(error),
        })?;
        if is_subset(&child.desired, &live) && owns_only_desired(&live, manager, &child.desired) {
            return Ok((existing.clone(), false));
        }
    }
    // Apply configurations say what a manager wants set; `null` would not remove anything.
    let mut desired = child.desired.clone();
    crate::status::strip_nulls(&mut desired);
    let applied = api
        .patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(desired),
        )
        .await
        .map_err(|source| ApplyError::Patch {
            child: id.to_owned(),
            source,
        })?;
    // An apply that changes nothing is not written (the resourceVersion stays).
    let before = existing.and_then(|e| e.metadata.resource_version);
    let wrote = before.is_none() || before != applied.metadata.resource_version;
    Ok((applied, wrote))
}

/// Whether `manager` has applied `live` (an `Apply` entry for the main resource in its
/// `managedFields`) and owns no field that `desired` does not set: then applying `desired`
/// again would remove nothing. Reads the manager's FieldsV1, whose path elements carry what
/// they select (`f:name`, `k:{"name":"web"}`, `v:"x"`, `i:0`); an element it cannot match
/// (a list item whose key the desired item leaves to a default) counts as not set, so the
/// answer errs towards applying.
fn owns_only_desired(live: &Value, manager: &str, desired: &Value) -> bool {
    let Some(entries) = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return false;
    };
    entries
        .iter()
        .find(|entry| {
            entry.get("manager").and_then(Value::as_str) == Some(manager)
                && entry.get("operation").and_then(Value::as_str) == Some("Apply")
                && entry
                    .get("subresource")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
        })
        .and_then(|entry| entry.get("fieldsV1"))
        .and_then(Value::as_object)
        .is_some_and(|fields| owned_fields_are_set(fields, desired))
}

/// Whether every path of the FieldsV1 set `fields` selects something in `desired`.
fn owned_fields_are_set(fields: &serde_json::Map<String, Value>, desired: &Value) -> bool {
    fields.iter().all(|(element, children)| {
        if element == "." {
            return true;
        }
        let selected = select(element, desired);
        match (selected, children.as_object()) {
            (Some(value), Some(children)) if !value.is_null() => {
                owned_fields_are_set(children, value)
            }
            (Some(value), None) => !value.is_null(),
            _ => false,
        }
    })
}

/// The part of `value` one FieldsV1 path element selects.
fn select<'v>(element: &str, value: &'v Value) -> Option<&'v Value> {
    if let Some(field) = element.strip_prefix("f:") {
        return value.as_object()?.get(field);
    }
    let items = value.as_array()?;
    if let Some(key) = element.strip_prefix("k:") {
        let Ok(Value::Object(key)) = serde_json::from_str::<Value>(key) else {
            return None;
        };
        return items
            .iter()
            .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)));
    }
    if let Some(set_value) = element.strip_prefix("v:") {
        let set_value: Value = serde_json::from_str(set_value).ok()?;
        return items.iter().find(|item| **item == set_value);
    }
    let index: usize = element.strip_prefix("i:")?.parse().ok()?;
    items.get(index)
}

/// Whether every field `desired` sets has the same value in `live`. Lists must have the same
/// length, element by element a subset (a merge patch replaces lists whole, and the server fills
/// defaults into their elements). A `null` in `desired` requires the field to be absent; an empty
/// map or list matches an absent field.
fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(desired), Value::Object(live)) => {
            desired.iter().all(|(key, value)| match live.get(key) {
                Some(live) if !live.is_null() => is_subset(value, live),
                _ => is_absent(value),
            })
        }
        (Value::Object(desired), Value::Null) => desired.is_empty(),
        (Value::Array(desired), Value::Array(live)) => {
            desired.len() == live.len() && desired.iter().zip(live).all(|(d, l)| is_subset(d, l))
        }
        (Value::Array(desired), Value::Null) => desired.is_empty(),
        (Value::Number(desired), Value::Number(live)) => {
            desired == live || desired.as_f64().is_some_and(|d| Some(d) == live.as_f64())
        }
        _ => desired == live,
    }
}

/// Whether a desired value is satisfied by an absent field.
fn is_absent(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(fields) => fields.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// A controller owner reference to `owner` (`controller: true`, `blockOwnerDeletion: true`), to
/// put in a child's `metadata.ownerReferences`: the garbage collector deletes the child with its
/// owner, and controllers map the child's events back to the owner.
///
/// Builds on kube's [`Resource::controller_owner_ref`], which leaves `blockOwnerDeletion` unset.
/// `owner` must have been read from the API server: a reference needs its name and uid.
pub fn owner_reference<K>(owner: &K) -> Result<OwnerReference>
where
    K: Resource,
    K::DynamicType: Default,
{
    let dynamic_type = K::DynamicType::default();
    let reference =
        owner
            .controller_owner_ref(&dynamic_type)
            .ok_or_else(|| ApplyError::OwnerNotPersisted {
                kind: K::kind(&dynamic_type).into_owned(),
                name: owner.meta().name.clone(),
            })?;
    Ok(OwnerReference {
        block_owner_deletion: Some(true),
        ..reference
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn config_map(name: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object.metadata.namespace = Some("default".into());
        object
    }

    fn set(ids: &[&str]) -> ChildSet {
        ids.iter().fold(ChildSet::new(), |set, id| {
            set.typed_child(*id, &config_map(id))
        })
    }

    #[test]
    fn independent_children_are_ordered_by_id() {
        let order = set(&["zeta", "alpha", "mid", "beta"]).plan().unwrap();
        assert_eq!(order, ["alpha", "beta", "mid", "zeta"]);
    }

    #[test]
    fn dependencies_come_first_and_ties_break_by_id() {
        // app needs db and config; db needs secret; cache is free: among the ready ones the
        // smallest id always goes next.
        let children = set(&["app", "db", "config", "secret", "cache"])
            .depends_on("app", ["db", "config"])
            .depends_on("db", ["secret"]);
        assert_eq!(
            children.plan().unwrap(),
            ["cache", "config", "secret", "db", "app"]
        );
        // Declaration order does not matter.
        let reversed = set(&["cache", "secret", "config", "db", "app"])
            .depends_on("db", ["secret"])
            .depends_on("app", ["config"])
            .depends_on("app", ["db"]);
        assert_eq!(reversed.plan().unwrap(), children.plan().unwrap());
    }

    #[test]
    fn plan_is_the_same_on_every_run() {
        let build = || {
            set(&["e", "d", "c", "b", "a"])
                .depends_on("a", ["e"])
                .depends_on("b", ["d", "e"])
        };
        let first = build().plan().unwrap();
        assert_eq!(first, ["c", "d", "e", "a", "b"]);
        for _ in 0..20 {
            assert_eq!(build().plan().unwrap(), first);
        }
    }

    #[test]
    fn cycle_is_named_from_its_smallest_id() {
        let children = set(&["a", "b", "c", "free"])
            .depends_on("b", ["c"])
            .depends_on("c", ["a"])
            .depends_on("a", ["b"]);
        let error = children.plan().unwrap_err();
        assert!(matches!(&error, ApplyError::Cycle { cycle } if cycle == &["a", "b", "c", "a"]));
        assert_eq!(error.to_string(), "dependency cycle: a -> b -> c -> a");
    }

    #[test]
    fn cycle_behind_an_acyclic_prefix_is_found() {
        // "a" is stuck only because it waits on the cycle x <-> y.
        let children = set(&["a", "x", "y"])
            .depends_on("a", ["x"])
            .depends_on("x", ["y"])
            .depends_on("y", ["x"]);
        assert_eq!(
            children.plan().unwrap_err().to_string(),
            "dependency cycle: x -> y -> x"
        );
    }

    #[test]
    fn self_dependency_is_a_cycle() {
        let error = set(&["a"]).depends_on("a", ["a"]).plan().unwrap_err();
        assert_eq!(error.to_string(), "dependency cycle: a -> a");
    }

    #[test]
    fn unknown_dependency_is_an_error() {
        let error = set(&["app"]).depends_on("app", ["db"]).plan().unwrap_err();
        assert!(
            matches!(&error, ApplyError::UnknownDependency { child, dependency } if child == "app" && dependency == "db")
        );
        assert_eq!(
            error.to_string(),
            "child app depends on db, which is not a declared child"
        );
    }

    #[test]
    fn unknown_child_in_builder_methods_is_an_error() {
        let error = set(&["a"]).depends_on("b", ["a"]).plan().unwrap_err();
        assert_eq!(
            error.to_string(),
            "depends_on names b, which is not a declared child"
        );
        let error = set(&["a"]).ready_when("b", |_| true).plan().unwrap_err();
        assert_eq!(
            error.to_string(),
            "ready_when names b, which is not a declared child"
        );
    }

    #[test]
    fn duplicate_and_nameless_children_are_errors() {
        let error = set(&["a", "a"]).plan().unwrap_err();
        assert_eq!(error.to_string(), "child a is declared twice");
        let error = ChildSet::new()
            .typed_child("nameless", &ConfigMap::default())
            .plan()
            .unwrap_err();
        assert_eq!(error.to_string(), "child nameless has no metadata.name");
    }

    #[test]
    fn desired_objects_drop_status_and_server_set_metadata() {
        let mut object = config_map("c");
        object.metadata.resource_version = Some("7".into());
        object.metadata.uid = Some("u".into());
        let children = ChildSet::new().typed_child("c", &object).child(
            "d",
            ApiResource::erase::<ConfigMap>(&()),
            DynamicObject {
                types: None,
                metadata: config_map("d").metadata,
                data: json!({"status": {"x": 1}, "data": {"k": "v"}}),
            },
        );
        assert_eq!(
            children.children["c"].desired,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}})
        );
        assert_eq!(
            children.children["d"].desired,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
                   "metadata": {"name": "d", "namespace": "default"}})
        );
    }

    #[test]
    fn subset_ignores_server_added_fields_and_defaults_in_list_elements() {
        let desired = json!({"spec": {"containers": [{"name": "app", "image": "nginx"}]}, "metadata": {"name": "x"}});
        let live = json!({
            "metadata": {"name": "x", "uid": "u", "resourceVersion": "3"},
            "spec": {"containers": [{"name": "app", "image": "nginx", "imagePullPolicy": "Always"}], "restartPolicy": "Always"},
            "status": {"phase": "Running"},
        });
        assert!(is_subset(&desired, &live));
    }

    #[test]
    fn subset_detects_changed_missing_and_extra_values() {
        let live = json!({"data": {"a": "1", "b": "2"}, "list": [1, 2]});
        assert!(!is_subset(&json!({"data": {"a": "2"}}), &live));
        assert!(!is_subset(&json!({"data": {"c": "3"}}), &live));
        assert!(!is_subset(&json!({"list": [1]}), &live));
        assert!(!is_subset(&json!({"list": [1, 2, 3]}), &live));
        assert!(!is_subset(&json!({"data": {"a": null}}), &live));
        assert!(is_subset(&json!({"data": {"z": null}}), &live));
        assert!(is_subset(&json!({"labels": {}, "finalizers": []}), &live));
        assert!(is_subset(
            &json!({"replicas": 1}),
            &json!({"replicas": 1.0})
        ));
        assert!(!is_subset(&json!({"replicas": 2}), &json!({"replicas": 1})));
    }

    #[test]
    fn owned_fields_are_matched_by_their_path_elements() {
        let desired = json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "finalizers": ["a"],
                "args": ["x", "y"],
                "containers": [{"name": "web", "image": "nginx",
                                "ports": [{"containerPort": 80, "protocol": "TCP"}]}]
            }
        });
        let live = |fields: Value| {
            json!({"metadata": {"managedFields": [
                {"manager": "other", "operation": "Apply", "fieldsV1": {}},
                {"manager": "ctl", "operation": "Apply", "subresource": "status",
                 "fieldsV1": {"f:status": {}}},
                {"manager": "ctl", "operation": "Apply", "fieldsV1": fields}
            ]}})
        };
        let all = json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:finalizers": {"v:\"a\"": {}},
                "f:args": {"i:1": {}},
                "f:containers": {"k:{\"name\":\"web\"}": {
                    ".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}}}
                }}
            }
        });
        assert!(owns_only_desired(&live(all), "ctl", &desired));
        for stale in [
            json!({"f:metadata": {"f:labels": {"f:old": {}}}}),
            json!({"f:spec": {"f:finalizers": {"v:\"b\"": {}}}}),
            json!({"f:spec": {"f:args": {"i:2": {}}}}),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"sidecar\"}": {}}}}),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:command": {}}}}}),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"UDP\"}": {}}}}}}),
            json!({"f:spec": {"f:containers": {"x:bad": {}}}}),
        ] {
            assert!(
                !owns_only_desired(&live(stale.clone()), "ctl", &desired),
                "{stale}"
            );
        }
        // No Apply entry of the manager for the main resource: it must apply.
        assert!(!owns_only_desired(&live(json!({})), "nobody", &desired));
        assert!(!owns_only_desired(
            &json!({"metadata": {}}),
            "ctl",
            &desired
        ));
    }

    #[test]
    fn owner_reference_is_a_blocking_controller_reference() {
        let mut owner = config_map("owner");
        let error = owner_reference(&owner).unwrap_err();
        assert!(matches!(error, ApplyError::OwnerNotPersisted { .. }));
        owner.metadata.uid = Some("1234".into());
        let reference = owner_reference(&owner).unwrap();
        assert_eq!(
            reference,
            OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: "1234".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }
        );
    }
}
