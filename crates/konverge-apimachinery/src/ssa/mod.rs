//! Server-side apply: the field ownership engine of Kubernetes 1.33 (structured-merge-diff v4
//! and the apiserver's field manager), as pure functions over JSON objects.
//!
//! # Map
//!
//! - [`shape`]: [`Shape`], the type tree (struct fields, maps, list types, atomicity), from a
//!   CRD's OpenAPI schema or the built-in kinds' strategic-merge metadata.
//! - [`fieldpath`]: [`FieldSet`] and its `FieldsV1` encoding, [`PathElement`] and [`Path`].
//! - `typed`: field sets of objects, merge, compare and removal, driven by a [`Shape`].
//! - [`managed`]: `metadata.managedFields` ([`ManagedFields`], [`ManagedFieldsEntry`]).
//! - this module: [`apply`] (server-side apply with conflicts and `force`) and [`update`]
//!   (ownership tracking of ordinary writes), with kube-apiserver's messages ([`ApplyError`]).
//!
//! # Deviations
//!
//! Managers that set fields through another API version are compared in the current
//! version (no conversion); strategy reset fields are not ignored (see [`apply_ignoring`]);
//! the cap of ten Update managers (`ancient-changes`) is applied as Kubernetes does.

pub mod fieldpath;
pub mod managed;
pub mod shape;
mod typed;

#[cfg(test)]
mod equivalence_tests;

use std::sync::LazyLock;

use serde_json::{Map, Value};

pub use fieldpath::{FieldSet, Path, PathElement};
pub use managed::{ManagedFields, ManagedFieldsEntry, Operation};
pub use shape::{ListType, Shape};

/// Who writes, through what, and when.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The field manager (`fieldManager` query parameter; empty means `unknown`).
    pub manager: &'a str,
    /// The API version of the request (`apps/v1`).
    pub api_version: &'a str,
    /// The subresource written through (`status`), if any.
    pub subresource: Option<&'a str>,
    /// The current time, RFC 3339 in UTC with seconds (`2024-01-02T03:04:05Z`).
    pub now: &'a str,
    /// `force=true`: take conflicting fields from their managers.
    pub force: bool,
}

/// One field another manager owns that an apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// Its operation.
    pub operation: Operation,
    /// Its API version.
    pub api_version: String,
    /// Its subresource, if any.
    pub subresource: Option<String>,
    /// The field, as Kubernetes prints paths (`.spec.replicas`,
    /// `.spec.containers[name="nginx"].image`); the Status cause's `field`.
    pub field: String,
}

impl Conflict {
    fn entry(&self) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: self.manager.clone(),
            operation: self.operation,
            api_version: self.api_version.clone(),
            time: None,
            subresource: self.subresource.clone(),
            fields: FieldSet::new(),
        }
    }

    /// The Status cause message (`conflict with "m"`, `conflict with "m" using v1`); the
    /// cause reason is `FieldManagerConflict`.
    pub fn message(&self) -> String {
        format!("conflict with {}", self.entry().describe())
    }
}

/// Why an apply or update failed. `Display` is kube-apiserver's message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// The apply conflicts with other managers (409 Conflict, reason `Conflict`, one cause
    /// per conflict with [`Conflict::message`] and [`Conflict::field`]).
    #[error("{}", conflicts_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The request is invalid (400 Bad Request).
    #[error("{0}")]
    Invalid(String),
    /// Kubernetes answers 500 Internal Server Error (for example a typed conversion failure:
    /// `failed to create typed patch object (...): ...`).
    #[error("{0}")]
    Internal(String),
}

impl ApplyError {
    /// The HTTP status kube-apiserver answers with.
    pub fn status_code(&self) -> u16 {
        match self {
            ApplyError::Conflicts(_) => 409,
            ApplyError::Invalid(_) => 400,
            ApplyError::Internal(_) => 500,
        }
    }
}

fn conflicts_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.entry().describe(),
            c.field
        );
    }
    let mut ids: Vec<(String, String)> = conflicts
        .iter()
        .map(|c| (c.entry().identifier(), c.entry().describe()))
        .collect();
    ids.sort();
    ids.dedup();
    let mut lines = Vec::new();
    for (id, described) in ids {
        lines.push(format!("conflicts with {described}:"));
        for c in conflicts.iter().filter(|c| c.entry().identifier() == id) {
            lines.push(format!("- {}", c.field));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// The fields Kubernetes never records as owned (its `stripmeta` set), built once.
fn strip_set() -> &'static FieldSet {
    static STRIP: LazyLock<FieldSet> = LazyLock::new(build_strip_set);
    &STRIP
}

fn build_strip_set() -> FieldSet {
    let mut s = FieldSet::new();
    let f = |n: &str| PathElement::Field(n.to_string());
    s.insert(&[f("apiVersion")]);
    s.insert(&[f("kind")]);
    s.insert(&[f("metadata")]);
    for name in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[f("metadata"), f(name)]);
    }
    s
}

fn group_version(api_version: &str) -> (String, String) {
    match api_version.matches('/').count() {
        0 => (String::new(), api_version.to_string()),
        1 => {
            let (g, v) = api_version.split_once('/').unwrap_or_default();
            (g.to_string(), v.to_string())
        }
        _ => (String::new(), String::new()),
    }
}

fn gvk_string(api_version: &str, kind: &str) -> String {
    let (g, v) = group_version(api_version);
    if g.is_empty() && v.is_empty() {
        return format!("/, Kind={kind}");
    }
    format!("{g}/{v}, Kind={kind}")
}

fn str_field<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn manager_name(req: &Request<'_>) -> String {
    if req.manager.is_empty() {
        "unknown".to_string()
    } else {
        req.manager.to_string()
    }
}

fn sorted_conflicts(mut conflicts: Vec<(String, Conflict)>) -> Vec<Conflict> {
    conflicts.sort_by(|a, b| a.0.cmp(&b.0));
    conflicts.into_iter().map(|(_, c)| c).collect()
}

/// Server-side apply of `config` (the apply body, a full object) onto `live` (`None`: the
/// object is created). Returns the new object with `metadata.managedFields` updated.
///
/// Follows structured-merge-diff's `Apply`: merge, ownership of exactly the fields in
/// `config`, removal of fields this manager applied before, no longer applies and nobody else
/// owns, conflicts with every other manager (Apply or Update) owning a field the apply changes
/// (unless `force`, which takes them over). The entry's time is set to `req.now` when the
/// object changes. `config`'s kind must match `live`'s (callers creating an object check the
/// kind against the resource themselves).
pub fn apply(
    shape: &Shape,
    live: Option<&Value>,
    config: &Value,
    req: &Request<'_>,
) -> Result<Value, ApplyError> {
    apply_ignoring(shape, live, config, req, &FieldSet::new())
}

/// [`apply`] with `ignored`: subtrees (a strategy's reset fields, such as `status` for the
/// main resource) that changes and ownership ignore.
///
/// An apply by the manager `kubectl` (what `kubectl apply --server-side` sends) also upgrades
/// objects managed by client-side apply, as kube-apiserver does: conflicts on fields whose
/// live values are still what the `kubectl.kubernetes.io/last-applied-configuration`
/// annotation says are not conflicts (the apply takes them over), and when the object has
/// that annotation it is rewritten to the applied configuration, so that a later client-side
/// apply starts from it.
pub fn apply_ignoring(
    shape: &Shape,
    live: Option<&Value>,
    config: &Value,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Result<Value, ApplyError> {
    if req.manager != KUBECTL {
        return apply_once(shape, live, config, req, ignored);
    }
    let mut out = match apply_once(shape, live, config, req, ignored) {
        Err(ApplyError::Conflicts(conflicts)) if !req.force => {
            let Some(allowed) = live.and_then(|l| fields_still_last_applied(shape, l, req)) else {
                return Err(ApplyError::Conflicts(conflicts));
            };
            let allowed: std::collections::BTreeSet<String> =
                allowed.paths().iter().map(ToString::to_string).collect();
            let remaining: Vec<Conflict> = conflicts
                .into_iter()
                .filter(|c| !allowed.contains(&c.field))
                .collect();
            if !remaining.is_empty() {
                return Err(ApplyError::Conflicts(remaining));
            }
            let forced = Request {
                force: true,
                ..*req
            };
            apply_once(shape, live, config, &forced, ignored)?
        }
        other => other?,
    };
    let annotations = out
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut);
    if let Some(annotations) = annotations
        && annotations
            .get(LAST_APPLIED)
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty())
    {
        annotations.insert(LAST_APPLIED.into(), last_applied(config).into());
    }
    Ok(out)
}

/// The field manager `kubectl apply --server-side` uses.
const KUBECTL: &str = "kubectl";

/// The annotation client-side `kubectl apply` keeps its last configuration in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields of `live`'s last-applied configuration whose values `live` still has: those
/// client-side apply may be taken to own. `None` when there is no usable annotation (absent,
/// undecodable, or of another API version).
fn fields_still_last_applied(shape: &Shape, live: &Value, req: &Request<'_>) -> Option<FieldSet> {
    let annotation = live
        .get("metadata")?
        .get("annotations")?
        .get(LAST_APPLIED)?
        .as_str()
        .filter(|a| !a.is_empty())?;
    let last: Value = serde_json::from_str(annotation).ok()?;
    if str_field(&last, "apiVersion") != req.api_version {
        return None;
    }
    let set = typed::to_field_set(shape, &last, false).ok()?;
    let cmp = typed::compare(shape, &last, &typed::without_managed_fields(live));
    Some(
        set.difference(&cmp.modified)
            .difference(&cmp.added)
            .difference(&cmp.removed),
    )
}

/// The last-applied annotation for `config`: its compact JSON, without the annotation
/// itself, with the newline Go's JSON encoder ends it with.
fn last_applied(config: &Value) -> String {
    let mut config = config.clone();
    if let Some(annotations) = config
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED);
    }
    format!("{config}\n")
}

fn apply_once(
    shape: &Shape,
    live: Option<&Value>,
    config: &Value,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Result<Value, ApplyError> {
    let empty = Value::Object(Map::new());
    let config = match config {
        Value::Object(_) => config,
        Value::Null => &empty,
        other => {
            return Err(ApplyError::Invalid(format!(
                "error decoding patch: json: cannot unmarshal {} into Go value of type \
                 map[string]interface {{}}",
                crate::gofmt::json_kind(other)
            )));
        }
    };
    let (api_version, kind) = (str_field(config, "apiVersion"), str_field(config, "kind"));
    let expected_kind = live.map(|l| str_field(l, "kind")).unwrap_or(kind);
    if group_version(api_version) != group_version(req.api_version)
        || kind.is_empty()
        || kind != expected_kind
    {
        return Err(ApplyError::Invalid(format!(
            "invalid object type: {}",
            gvk_string(api_version, kind)
        )));
    }
    if let Some(Value::Array(_)) = config.get("metadata").and_then(|m| m.get("managedFields")) {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".to_string(),
        ));
    }
    let mut managed = match live {
        Some(l) => ManagedFields::from_object(l)
            .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?,
        None => ManagedFields::default(),
    };
    let live_v = live.map_or_else(|| empty.clone(), typed::without_managed_fields);
    let config_set = typed::to_field_set(shape, config, false).map_err(|errs| {
        ApplyError::Internal(format!(
            "failed to create typed patch object ({}/{}; {}): {}",
            meta_str(config, "namespace"),
            meta_str(config, "name"),
            gvk_string(api_version, kind),
            errs.join("\n")
        ))
    })?;
    let me = ManagedFieldsEntry {
        manager: manager_name(req),
        operation: Operation::Apply,
        api_version: req.api_version.to_string(),
        time: None,
        subresource: req.subresource.map(str::to_string),
        fields: FieldSet::new(),
    };
    let merged = typed::merge(shape, Some(&live_v), Some(config)).unwrap_or(empty.clone());
    let position = managed.0.iter().position(|e| e.same_manager(&me));
    let (last_set, last_time) = match position {
        Some(i) => {
            let e = managed.0.remove(i);
            (e.fields, e.time)
        }
        None => (FieldSet::new(), None),
    };
    let new_set = config_set.recursive_difference(ignored);
    let new_obj = prune(shape, merged, &managed, &new_set, &last_set);

    take_changes(shape, &live_v, &new_obj, &mut managed, ignored, req.force)?;
    let fields = new_set.difference(strip_set());
    let changed = !fieldpath::values_equal(&live_v, &new_obj);
    if !fields.is_empty() {
        managed.0.push(ManagedFieldsEntry {
            fields,
            time: if changed {
                Some(req.now.to_string())
            } else {
                last_time
            },
            ..me
        });
    }
    let mut out = if changed { new_obj } else { live_v };
    managed.write_to(&mut out);
    Ok(out)
}

/// Removes what the applier no longer applies and nobody else owns (structured-merge-diff's
/// `prune`, `addBackOwnedItems` and `addBackDanglingItems`).
fn prune(
    shape: &Shape,
    merged: Value,
    others: &ManagedFields,
    new_set: &FieldSet,
    last_set: &FieldSet,
) -> Value {
    if last_set.is_empty() {
        return merged;
    }
    let ensure = |s: &FieldSet| typed::ensure_named_fields_are_members(s, shape);
    let set_of =
        |v: &Value| typed::to_field_set(shape, v, true).unwrap_or_else(|_| FieldSet::new());
    let remove = |v: &Value, s: &FieldSet| {
        typed::remove_items(shape, v, s).unwrap_or_else(|| Value::Object(Map::new()))
    };
    let pruned = remove(&merged, &ensure(last_set));
    let owned = others
        .0
        .iter()
        .fold(new_set.clone(), |acc, e| acc.union(&e.fields));
    let merged_set = ensure(&set_of(&merged));
    let pruned = remove(
        &merged,
        &merged_set.difference(&ensure(&set_of(&pruned)).union(&ensure(&owned))),
    );
    let dangling = merged_set
        .difference(&ensure(&set_of(&pruned)))
        .intersection(&ensure(last_set));
    remove(&merged, &dangling)
}

/// Takes the fields that changed between `old` and `new` away from every manager in
/// `managed` (removed fields always; added or modified ones only with `force`, else they are
/// conflicts). Drops managers left with nothing. Returns the comparison.
fn take_changes(
    shape: &Shape,
    old: &Value,
    new: &Value,
    managed: &mut ManagedFields,
    ignored: &FieldSet,
    force: bool,
) -> Result<typed::Comparison, ApplyError> {
    let mut cmp = typed::compare(shape, old, new);
    if !ignored.is_empty() {
        cmp.added = cmp.added.recursive_difference(ignored);
        cmp.modified = cmp.modified.recursive_difference(ignored);
        cmp.removed = cmp.removed.recursive_difference(ignored);
    }
    let changed = cmp.modified.union(&cmp.added);
    let mut conflicts = Vec::new();
    for e in managed.0.iter().filter(|_| !force) {
        let c = e.fields.intersection(&changed);
        let id = e.identifier();
        for p in c.paths() {
            conflicts.push((
                id.clone(),
                Conflict {
                    manager: e.manager.clone(),
                    operation: e.operation,
                    api_version: e.api_version.clone(),
                    subresource: e.subresource.clone(),
                    field: p.to_string(),
                },
            ));
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(ApplyError::Conflicts(sorted_conflicts(conflicts)));
    }
    disown(managed, &changed, &cmp.removed);
    Ok(cmp)
}

/// Takes `changed` and `removed` away from every manager and drops managers left with
/// nothing.
fn disown(managed: &mut ManagedFields, changed: &FieldSet, removed: &FieldSet) {
    for e in &mut managed.0 {
        e.fields.subtract(changed);
        e.fields.subtract(removed);
    }
    managed.0.retain(|e| !e.fields.is_empty());
}

/// Records an ordinary create, update or patch (`old` `None` for a create) by `req.manager`
/// as an Update operation: returns `new` with `metadata.managedFields` updated. Fields that
/// changed move to this manager (merged into its earlier Update entry for the same API
/// version and subresource, whose time becomes `req.now`); removed fields leave every
/// manager; managers left with nothing are dropped. Without a subresource, `managedFields`
/// the client sent that differ from `old`'s are taken as the base as Kubernetes does (an empty
/// list or `[{}]` resets them; undecodable ones fall back to `old`'s).
pub fn update(
    shape: &Shape,
    old: Option<&Value>,
    new: &Value,
    req: &Request<'_>,
) -> Result<Value, ApplyError> {
    update_owned(shape, old, new.clone(), req)
}

/// [`update`] taking `new` by value: the result is `new` itself with its managed fields
/// replaced, so a write does not copy the object it stores.
pub fn update_owned(
    shape: &Shape,
    old: Option<&Value>,
    mut new: Value,
    req: &Request<'_>,
) -> Result<Value, ApplyError> {
    if !new.is_object() {
        return Err(ApplyError::Invalid(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            crate::gofmt::json_kind(&new)
        )));
    }
    let sent = match new.get_mut("metadata") {
        Some(Value::Object(meta)) => meta.remove("managedFields"),
        _ => None,
    };
    let old_managed = || {
        old.map(|o| ManagedFields::from_object(o).unwrap_or_default())
            .unwrap_or_default()
    };
    let mut managed = if req.subresource.is_some() {
        old_managed()
    } else if ManagedFields::is_reset_list(sent.as_ref()) {
        ManagedFields::default()
    } else {
        match ManagedFields::from_list(sent.as_ref()) {
            Ok(m) if !m.0.is_empty() => m,
            _ => old_managed(),
        }
    };
    let cmp = match old {
        Some(old) => typed::compare_without_managed_fields(shape, old, &new),
        None => typed::compare(shape, &Value::Object(Map::new()), &new),
    };
    let mut changed = cmp.modified;
    changed.union_with(cmp.added);
    disown(&mut managed, &changed, &cmp.removed);
    let mut mine = changed;
    mine.subtract(strip_set());
    if !mine.is_empty() {
        let me = ManagedFieldsEntry {
            manager: manager_name(req),
            operation: Operation::Update,
            api_version: req.api_version.to_string(),
            time: Some(req.now.to_string()),
            subresource: req.subresource.map(str::to_string),
            fields: FieldSet::new(),
        };
        match managed.0.iter_mut().find(|e| e.same_manager(&me)) {
            Some(e) => {
                // `mine` first: where two elements are equal, its spelling is kept.
                mine.union_with(std::mem::take(&mut e.fields));
                e.fields = mine;
                e.time = me.time;
            }
            None => managed.0.push(ManagedFieldsEntry { fields: mine, ..me }),
        }
    }
    cap_update_managers(&mut managed);
    managed.write_to(&mut new);
    Ok(new)
}

/// Kubernetes keeps at most ten Update managers: the oldest are merged, per API version, into
/// an `ancient-changes` entry.
fn cap_update_managers(managed: &mut ManagedFields) {
    const MAX: usize = 10;
    let mut updaters: Vec<usize> = (0..managed.0.len())
        .filter(|&i| managed.0[i].operation == Operation::Update)
        .collect();
    if updaters.len() <= MAX {
        return;
    }
    let sorted = managed.sorted();
    let order = |i: usize| sorted.iter().position(|e| std::ptr::eq(*e, &managed.0[i]));
    updaters.sort_by_key(|&i| order(i));
    let mut length = updaters.len();
    let mut first_by_version: Vec<(String, usize)> = Vec::new();
    let mut drop = Vec::new();
    for &i in &updaters {
        if length <= MAX {
            break;
        }
        let version = managed.0[i].api_version.clone();
        match first_by_version.iter().find(|(v, _)| *v == version) {
            Some(&(_, first)) => {
                let (fields, time) = (managed.0[i].fields.clone(), managed.0[i].time.clone());
                let bucket = &mut managed.0[first];
                bucket.manager = "ancient-changes".to_string();
                bucket.subresource = None;
                bucket.fields = bucket.fields.union(&fields);
                bucket.time = time;
                drop.push(i);
                length -= 1;
            }
            None => first_by_version.push((version, i)),
        }
    }
    let mut i = 0;
    managed.0.retain(|_| {
        i += 1;
        !drop.contains(&(i - 1))
    });
}
