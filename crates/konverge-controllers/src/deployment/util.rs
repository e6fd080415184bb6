//! What kcm's deployment controller computes from Deployments and their ReplicaSets (kcm's
//! `deployment/util/deployment_util.go` and `controller.ComputeHash`): the pod-template hash,
//! revisions and the annotations that carry them, maxSurge / maxUnavailable, the orders
//! ReplicaSets are scaled in, and the Deployment's conditions.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetCondition,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

/// The label that tells a Deployment's ReplicaSets (and their pods) apart.
pub(super) const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The revision of a Deployment and of each of its ReplicaSets.
pub(super) const REVISION: &str = "deployment.kubernetes.io/revision";
/// The earlier revisions a ReplicaSet had, when a rollback made it new again.
pub(super) const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// `spec.replicas` of the Deployment when it last scaled the ReplicaSet.
pub(super) const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas + maxSurge` of the Deployment when it last scaled the ReplicaSet.
pub(super) const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The revision the deprecated rollback API asks for (`0`: the previous one).
pub(super) const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// What `kubectl apply` remembers; never copied to ReplicaSets.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// How long `deployment.kubernetes.io/revision-history` may grow (kcm's
/// `maxRevHistoryLengthInChars`).
const MAX_REVISION_HISTORY_CHARS: usize = 2000;

/// Annotations of a Deployment that are its own, not copied to its ReplicaSets.
const NOT_COPIED: [&str; 6] = [
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    ROLLBACK_TO,
    LAST_APPLIED,
];

/// The Deployment's condition types and reasons, as kcm writes them.
pub(super) mod reason {
    /// Condition type: the Deployment has its minimum of available pods.
    pub(in crate::deployment) const AVAILABLE: &str = "Available";
    /// Condition type: the rollout moves (or has finished, or is stuck).
    pub(in crate::deployment) const PROGRESSING: &str = "Progressing";
    /// Condition type: a ReplicaSet cannot make its pods.
    pub(in crate::deployment) const REPLICA_FAILURE: &str = "ReplicaFailure";
    pub(in crate::deployment) const REPLICA_SET_UPDATED: &str = "ReplicaSetUpdated";
    pub(in crate::deployment) const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
    pub(in crate::deployment) const NEW_REPLICA_SET: &str = "NewReplicaSetCreated";
    pub(in crate::deployment) const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
    pub(in crate::deployment) const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
    pub(in crate::deployment) const TIMED_OUT: &str = "ProgressDeadlineExceeded";
    pub(in crate::deployment) const PAUSED: &str = "DeploymentPaused";
    pub(in crate::deployment) const RESUMED: &str = "DeploymentResumed";
    pub(in crate::deployment) const MINIMUM_AVAILABLE: &str = "MinimumReplicasAvailable";
    pub(in crate::deployment) const MINIMUM_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
    pub(in crate::deployment) const ROLLBACK_REVISION_NOT_FOUND: &str =
        "DeploymentRollbackRevisionNotFound";
    pub(in crate::deployment) const ROLLBACK_TEMPLATE_UNCHANGED: &str =
        "DeploymentRollbackTemplateUnchanged";
    pub(in crate::deployment) const ROLLBACK_DONE: &str = "DeploymentRollback";
}

// ---------------------------------------------------------------------------------------------
// Replica counts.

/// `spec.replicas` of a Deployment (the API server defaults it to 1).
pub(super) fn desired(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `spec.replicas` of a ReplicaSet (the API server defaults it to 1).
pub(super) fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `status.replicas` of a ReplicaSet.
pub(super) fn actual(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

/// `status.readyReplicas` of a ReplicaSet.
pub(super) fn ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// `status.availableReplicas` of a ReplicaSet.
pub(super) fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// The sum of `count` over `sets`.
pub(super) fn total<'a>(
    sets: impl IntoIterator<Item = &'a ReplicaSet>,
    count: fn(&ReplicaSet) -> i32,
) -> i32 {
    sets.into_iter().map(count).fold(0, i32::saturating_add)
}

/// The ReplicaSets that want pods (kcm's `FilterActiveReplicaSets`).
pub(super) fn active<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> Vec<&'a ReplicaSet> {
    sets.into_iter().filter(|rs| replicas(rs) > 0).collect()
}

// ---------------------------------------------------------------------------------------------
// Strategy.

/// The strategy type (`RollingUpdate` unless said otherwise).
pub(super) fn strategy(d: &Deployment) -> &str {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
}

/// Whether the Deployment rolls pods over gradually.
pub(super) fn is_rolling(d: &Deployment) -> bool {
    strategy(d) == "RollingUpdate"
}

/// An int-or-percent scaled against `total` (kcm's `GetScaledValueFromIntOrPercent`):
/// percentages round up or down as asked.
pub(super) fn scaled(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let Some(number) = s.strip_suffix('%') else {
                return Err("invalid type: string is not a percentage".into());
            };
            let percent: i64 = number
                .parse()
                .map_err(|e| format!("invalid value {s:?}: {e}"))?;
            let exact = percent as f64 * f64::from(total) / 100.0;
            let rounded = if round_up {
                exact.ceil()
            } else {
                exact.floor()
            };
            Ok(rounded.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32)
        }
    }
}

/// maxSurge and maxUnavailable resolved against the Deployment's replicas (kcm's
/// `ResolveFenceposts`): surge rounds up, unavailability down, and when both come to zero
/// one pod may be unavailable, so a rollout can always move.
fn fenceposts(d: &Deployment) -> Result<(i32, i32), String> {
    let rolling = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let zero = IntOrString::Int(0);
    let surge_value = rolling.and_then(|r| r.max_surge.as_ref()).unwrap_or(&zero);
    let unavailable_value = rolling
        .and_then(|r| r.max_unavailable.as_ref())
        .unwrap_or(&zero);
    let surge = scaled(surge_value, desired(d), true)?;
    let mut unavailable = scaled(unavailable_value, desired(d), false)?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

/// How many pods above `spec.replicas` a rolling update may run (0 for Recreate).
pub(super) fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) {
        return 0;
    }
    fenceposts(d).map_or(0, |(surge, _)| surge)
}

/// How many of `spec.replicas` may be unavailable during a rolling update (0 for Recreate),
/// at most `spec.replicas`.
pub(super) fn max_unavailable(d: &Deployment) -> i32 {
    if !is_rolling(d) || desired(d) == 0 {
        return 0;
    }
    let unavailable = fenceposts(d).map_or(0, |(_, unavailable)| unavailable);
    unavailable.min(desired(d))
}

/// How many replicas the new ReplicaSet should have now (kcm's `NewRSNewReplicas`): for a
/// rolling update, as many more as maxSurge leaves room for, up to `spec.replicas`; for
/// Recreate, all of them.
pub(super) fn new_rs_new_replicas<'a>(
    d: &Deployment,
    all: impl IntoIterator<Item = &'a ReplicaSet>,
    new: &ReplicaSet,
) -> Result<i32, String> {
    match strategy(d) {
        "RollingUpdate" => {
            let surge = fenceposts(d).map(|(surge, _)| surge)?;
            let current = total(all, replicas);
            let max_total = desired(d).saturating_add(surge);
            if current >= max_total {
                return Ok(replicas(new));
            }
            let up = (max_total - current).min(desired(d) - replicas(new));
            Ok(replicas(new) + up)
        }
        "Recreate" => Ok(desired(d)),
        other => Err(format!("deployment type {other} isn't supported")),
    }
}

/// Whether the Deployment may keep at most `revisionHistoryLimit` old ReplicaSets.
pub(super) fn revision_history_limit(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .filter(|limit| *limit != i32::MAX)
}

/// `progressDeadlineSeconds`, unless unset or "never" (`MaxInt32`).
pub(super) fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

/// `spec.paused`.
pub(super) fn paused(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
}

/// `spec.minReadySeconds`.
pub(super) fn min_ready_seconds(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .filter(|s| *s != 0)
}

// ---------------------------------------------------------------------------------------------
// The pod-template hash.

/// The 32-bit FNV-1a hash.
struct Fnv32a(u32);

impl Fnv32a {
    fn new() -> Fnv32a {
        Fnv32a(0x811c_9dc5)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u32::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0193);
        }
    }
}

/// kcm's `rand.SafeEncodeString`: each byte as one of 27 letters and digits that cannot
/// spell words.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// The `pod-template-hash` of `template` (kcm's `controller.ComputeHash`): FNV-1a over the
/// template, then over the collision count (as 8 little-endian bytes, only the low 4 set, as
/// kcm writes it), its decimal digits encoded by [`safe_encode`]. kcm hashes Go's deep print
/// of the template; this hashes its JSON, so the value differs from a cluster's, but it is as
/// stable and changes when the template or the collision count does.
pub(super) fn pod_template_hash(
    template: &PodTemplateSpec,
    collision_count: Option<i32>,
) -> String {
    let mut hasher = Fnv32a::new();
    hasher.write(&serde_json::to_vec(template).unwrap_or_default());
    if let Some(count) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&(count as u32).to_le_bytes());
        hasher.write(&bytes);
    }
    safe_encode(&hasher.0.to_string())
}

/// The template as JSON with the hash label removed and empty values dropped, so that
/// templates kcm's semantic equality calls equal compare equal.
fn normalized(template: &PodTemplateSpec) -> Value {
    let mut value = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Some(labels) = value
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH);
    }
    prune(&mut value);
    value
}

/// Drops nulls, empty arrays and empty objects, recursively (Go's semantic equality treats
/// nil and empty maps and slices alike).
fn prune(value: &mut Value) {
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match value {
        Value::Object(map) => {
            for v in map.values_mut() {
                prune(v);
            }
            map.retain(|_, v| !empty(v));
        }
        Value::Array(items) => items.iter_mut().for_each(prune),
        _ => {}
    }
}

/// Whether two templates are the same but for the `pod-template-hash` label (kcm's
/// `EqualIgnoreHash`).
pub(super) fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    normalized(a) == normalized(b)
}

/// The ReplicaSet's template.
pub(super) fn template(rs: &ReplicaSet) -> PodTemplateSpec {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default()
}

/// The Deployment's template.
pub(super) fn deployment_template(d: &Deployment) -> PodTemplateSpec {
    d.spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Finding the new and old ReplicaSets.

/// `creationTimestamp`, then name (kcm's `ReplicaSetsByCreationTimestamp`).
pub(super) fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let created = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
    created(a)
        .cmp(&created(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Revision, then age (kcm's `ReplicaSetsByRevision`).
pub(super) fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    revision(a)
        .cmp(&revision(b))
        .then_with(|| by_creation(a, b))
}

/// Larger first; among equals the older first (kcm's `ReplicaSetsBySizeOlder`).
pub(super) fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    replicas(b)
        .cmp(&replicas(a))
        .then_with(|| by_creation(a, b))
}

/// Larger first; among equals the newer first (kcm's `ReplicaSetsBySizeNewer`).
pub(super) fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    replicas(b)
        .cmp(&replicas(a))
        .then_with(|| by_creation(b, a))
}

/// The oldest ReplicaSet whose template is the Deployment's (kcm's `FindNewReplicaSet`).
pub(super) fn find_new<'a>(d: &Deployment, sets: &'a [ReplicaSet]) -> Option<&'a ReplicaSet> {
    let wanted = deployment_template(d);
    let mut sorted: Vec<&ReplicaSet> = sets.iter().collect();
    sorted.sort_by(|a, b| by_creation(a, b));
    sorted
        .into_iter()
        .find(|rs| equal_ignore_hash(&template(rs), &wanted))
}

/// Every ReplicaSet but the new one (kcm's `FindOldReplicaSets`).
pub(super) fn find_old(d: &Deployment, sets: &[ReplicaSet]) -> Vec<ReplicaSet> {
    let new_uid = find_new(d, sets).and_then(|rs| rs.metadata.uid.clone());
    sets.iter()
        .filter(|rs| new_uid.is_none() || rs.metadata.uid != new_uid)
        .cloned()
        .collect()
}

/// The one active ReplicaSet, or the newest when none is active (kcm's
/// `FindActiveOrLatest`); `None` when several are active.
pub(super) fn active_or_latest<'a>(
    new: Option<&'a ReplicaSet>,
    old: &'a [ReplicaSet],
) -> Option<&'a ReplicaSet> {
    if new.is_none() && old.is_empty() {
        return None;
    }
    let mut newest_first: Vec<&ReplicaSet> = old.iter().collect();
    newest_first.sort_by(|a, b| by_creation(b, a));
    let all = active(newest_first.iter().copied().chain(new));
    match all.as_slice() {
        [] => new.or(newest_first.first().copied()),
        [only] => Some(only),
        _ => None,
    }
}

/// Whether the new ReplicaSet runs every replica, available, at the Deployment's size
/// (kcm's `IsSaturated`).
pub(super) fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else {
        return false;
    };
    let Some(desired_annotation) = int_annotation(rs, DESIRED_REPLICAS) else {
        return false;
    };
    let want = desired(d);
    replicas(rs) == want && desired_annotation == want && available(rs) == want
}

// ---------------------------------------------------------------------------------------------
// Revisions and annotations.

fn annotation<'a>(
    meta_annotations: Option<&'a BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    meta_annotations
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// An integer annotation of the ReplicaSet; `None` when missing or not a number.
fn int_annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    annotation(rs.metadata.annotations.as_ref(), key)?
        .parse()
        .ok()
}

/// `deployment.kubernetes.io/desired-replicas` of the ReplicaSet.
pub(super) fn desired_annotation(rs: &ReplicaSet) -> Option<i32> {
    int_annotation(rs, DESIRED_REPLICAS)
}

/// The ReplicaSet's revision (0 when it has none or it is not a number).
pub(super) fn revision(rs: &ReplicaSet) -> i64 {
    annotation(rs.metadata.annotations.as_ref(), REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The highest revision among `sets` (kcm's `MaxRevision`).
pub(super) fn max_revision<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    sets.into_iter().map(revision).max().unwrap_or(0).max(0)
}

/// The second highest revision among `sets`: the one before the current (kcm's
/// `LastRevision`).
pub(super) fn last_revision<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    let (mut max, mut second) = (0, 0);
    for v in sets.into_iter().map(revision) {
        if v >= max {
            second = max;
            max = v;
        } else if v > second {
            second = v;
        }
    }
    second
}

/// Whether `key` is one of the Deployment's own annotations.
pub(super) fn not_copied(key: &str) -> bool {
    NOT_COPIED.contains(&key)
}

/// Copies the Deployment's annotations (but its own) to the ReplicaSet; whether any changed.
fn copy_annotations(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let target = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (key, value) in d.metadata.annotations.iter().flatten() {
        if not_copied(key) || target.get(key) == Some(value) {
            continue;
        }
        target.insert(key.clone(), value.clone());
        changed = true;
    }
    changed
}

/// Sets `desired-replicas` and `max-replicas`; whether either changed (kcm's
/// `SetReplicasAnnotations`).
pub(super) fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (key, value) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let value = value.to_string();
        if annotations.get(key) != Some(&value) {
            annotations.insert(key.to_string(), value);
            changed = true;
        }
    }
    changed
}

/// Whether `desired-replicas` or `max-replicas` differ from these (kcm's
/// `ReplicasAnnotationsNeedUpdate`).
pub(super) fn replicas_annotations_differ(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.as_ref();
    annotation(annotations, DESIRED_REPLICAS) != Some(desired.to_string().as_str())
        || annotation(annotations, MAX_REPLICAS) != Some(max.to_string().as_str())
}

/// The annotations of the new ReplicaSet (kcm's `SetNewReplicaSetAnnotations`): the
/// Deployment's (but its own), the revision `new_revision` if higher than the one it has
/// — keeping the one it had in `revision-history` when a rollback makes an old ReplicaSet
/// new again — and, for a ReplicaSet about to be created, the replica annotations. Whether
/// anything changed.
pub(super) fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
) -> bool {
    let mut changed = copy_annotations(d, rs);
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let old_revision = annotations.get(REVISION).cloned();
    let old = match old_revision.as_deref() {
        None | Some("") => 0,
        Some(text) => match text.parse::<i64>() {
            Ok(n) => n,
            Err(_) => return false,
        },
    };
    if old < new_revision {
        annotations.insert(REVISION.to_string(), new_revision.to_string());
        changed = true;
        if let Some(old_text) = old_revision.filter(|r| !r.is_empty()) {
            record_history(annotations, &old_text);
        }
    }
    if !exists {
        let max = desired(d).saturating_add(max_surge(d));
        changed |= set_replicas_annotations(rs, desired(d), max);
    }
    changed
}

/// Appends `old` to `revision-history`, dropping the oldest entries to stay within
/// [`MAX_REVISION_HISTORY_CHARS`].
fn record_history(annotations: &mut BTreeMap<String, String>, old: &str) {
    let history = annotations
        .get(REVISION_HISTORY)
        .cloned()
        .unwrap_or_default();
    if history.is_empty() {
        annotations.insert(REVISION_HISTORY.to_string(), old.to_string());
        return;
    }
    let entries: Vec<&str> = history.split(',').collect();
    let mut length = history.len() + old.len() + 1;
    let mut start = 0;
    while length > MAX_REVISION_HISTORY_CHARS && start < entries.len() {
        length -= entries[start].len() + 1;
        start += 1;
    }
    if length <= MAX_REVISION_HISTORY_CHARS {
        let mut kept = entries[start..].to_vec();
        kept.push(old);
        annotations.insert(REVISION_HISTORY.to_string(), kept.join(","));
    } else {
        tracing::info!(
            limit = MAX_REVISION_HISTORY_CHARS,
            "not appending revision: the revision history is at its length limit"
        );
    }
}

/// Sets the Deployment's revision annotation; whether it changed.
pub(super) fn set_deployment_revision(d: &mut Deployment, revision: &str) -> bool {
    let annotations = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if annotations.get(REVISION).map(String::as_str) == Some(revision) {
        return false;
    }
    annotations.insert(REVISION.to_string(), revision.to_string());
    true
}

/// How much of a scale from `to_add` replicas the ReplicaSet takes, in proportion to its size
/// (kcm's `GetProportion`), given `added` already handed out.
pub(super) fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// The change of the ReplicaSet's size that keeps its share of the Deployment's new maximum
/// (kcm's `getReplicaSetFraction`), rounding half away from zero.
fn fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    if desired(d) == 0 {
        return -replicas(rs);
    }
    let max_now = desired(d).saturating_add(max_surge(d));
    let max_before = match int_annotation(rs, MAX_REPLICAS) {
        Some(max) if max != 0 => max,
        _ => {
            let replicas = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            if replicas == 0 {
                return 0;
            }
            replicas
        }
    };
    let size = f64::from(replicas(rs)) * f64::from(max_now) / f64::from(max_before);
    size.round() as i32 - replicas(rs)
}

// ---------------------------------------------------------------------------------------------
// Conditions.

/// A condition as of `now` (both times).
pub(super) fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: &Time,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// The status's condition of `type_`.
pub(super) fn get_condition<'a>(
    status: Option<&'a DeploymentStatus>,
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Sets a condition (kcm's `SetDeploymentCondition`): nothing changes if one of the same
/// status and reason is there; one of the same status keeps its transition time; the new
/// condition goes last.
pub(super) fn set_condition(status: &mut DeploymentStatus, mut new: DeploymentCondition) {
    if let Some(current) = get_condition(Some(status), &new.type_) {
        if current.status == new.status && current.reason == new.reason {
            return;
        }
        if current.status == new.status {
            new.last_transition_time = current.last_transition_time.clone();
        }
    }
    let mut conditions = status.conditions.take().unwrap_or_default();
    conditions.retain(|c| c.type_ != new.type_);
    conditions.push(new);
    status.conditions = Some(conditions);
}

/// Removes the condition of `type_`.
pub(super) fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// A ReplicaSet's condition as the Deployment's (kcm's `ReplicaSetToDeploymentCondition`).
pub(super) fn from_replica_set_condition(c: &ReplicaSetCondition) -> DeploymentCondition {
    DeploymentCondition {
        type_: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        last_update_time: c.last_transition_time.clone(),
        last_transition_time: c.last_transition_time.clone(),
    }
}

/// `status.observedGeneration` and `metadata.generation`.
fn generations(d: &Deployment, status: &DeploymentStatus) -> (i64, i64) {
    (
        status.observed_generation.unwrap_or(0),
        d.metadata.generation.unwrap_or(0),
    )
}

/// Every replica updated and available, none old, and the newest spec observed (kcm's
/// `DeploymentComplete`).
pub(super) fn complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let want = desired(d);
    let (observed, generation) = generations(d, status);
    status.updated_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
        && observed >= generation
}

/// Whether `new` shows progress over the Deployment's current status (kcm's
/// `DeploymentProgressing`): more updated, fewer old, more ready or more available replicas.
pub(super) fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// When the rollout times out: the Progressing condition's last update plus the deadline
/// (`None` without a deadline or a condition).
pub(super) fn deadline_of(d: &Deployment, status: &DeploymentStatus) -> Option<Timestamp> {
    let seconds = progress_deadline(d)?;
    let since = get_condition(Some(status), reason::PROGRESSING)?
        .last_update_time
        .as_ref()?;
    since
        .0
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .ok()
}

/// Whether the rollout has passed its progress deadline at `now` (kcm's
/// `DeploymentTimedOut`).
pub(super) fn timed_out(d: &Deployment, status: &DeploymentStatus, now: Timestamp) -> bool {
    if progress_deadline(d).is_none() {
        return false;
    }
    let Some(progressing) = get_condition(Some(status), reason::PROGRESSING) else {
        return false;
    };
    match progressing.reason.as_deref() {
        Some(reason::NEW_RS_AVAILABLE) => false,
        Some(reason::TIMED_OUT) => true,
        _ => deadline_of(d, status).is_some_and(|deadline| deadline < now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(value: Value) -> Deployment {
        serde_json::from_value(value).expect("a deployment")
    }

    fn rolling(replicas: i32, surge: Value, unavailable: Value) -> Deployment {
        deployment(json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            }
        }))
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailability_down() {
        let d = rolling(10, json!("25%"), json!("25%"));
        assert_eq!((max_surge(&d), max_unavailable(&d)), (3, 2));
        let d = rolling(3, json!("10%"), json!("10%"));
        assert_eq!((max_surge(&d), max_unavailable(&d)), (1, 0));
        let d = rolling(3, json!(0), json!("10%"));
        assert_eq!(
            (max_surge(&d), max_unavailable(&d)),
            (0, 1),
            "never both zero"
        );
        let d = rolling(2, json!(1), json!(5));
        assert_eq!(max_unavailable(&d), 2, "at most spec.replicas");
        let d = rolling(0, json!(1), json!(1));
        assert_eq!(max_unavailable(&d), 0);
    }

    #[test]
    fn hashes_are_stable_safe_and_change_with_the_collision_count() {
        let d = rolling(1, json!(1), json!(0));
        let template = deployment_template(&d);
        let hash = pod_template_hash(&template, None);
        assert_eq!(hash, pod_template_hash(&template, None));
        assert!(hash.chars().all(|c| "456789bcdf".contains(c)), "{hash}");
        assert_ne!(hash, pod_template_hash(&template, Some(1)));
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
    }

    #[test]
    fn templates_equal_but_for_the_hash_label() {
        let d = rolling(1, json!(1), json!(0));
        let mut template = deployment_template(&d);
        template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH.into(), "abc".into());
        assert!(equal_ignore_hash(&template, &deployment_template(&d)));
        template.spec.as_mut().expect("a spec").containers[0].image = Some("httpd".into());
        assert!(!equal_ignore_hash(&template, &deployment_template(&d)));
    }

    #[test]
    fn a_rollback_keeps_the_old_revision_in_the_history() {
        let d = rolling(1, json!(1), json!(0));
        let mut rs = ReplicaSet::default();
        assert!(set_new_rs_annotations(&d, &mut rs, 1, false));
        let annotations = rs.metadata.annotations.clone().expect("annotations");
        assert_eq!(annotations.get(REVISION).map(String::as_str), Some("1"));
        assert_eq!(
            annotations.get(DESIRED_REPLICAS).map(String::as_str),
            Some("1")
        );
        assert_eq!(annotations.get(MAX_REPLICAS).map(String::as_str), Some("2"));
        assert!(set_new_rs_annotations(&d, &mut rs, 3, true));
        assert!(set_new_rs_annotations(&d, &mut rs, 5, true));
        let annotations = rs.metadata.annotations.expect("annotations");
        assert_eq!(annotations.get(REVISION).map(String::as_str), Some("5"));
        assert_eq!(
            annotations.get(REVISION_HISTORY).map(String::as_str),
            Some("1,3")
        );
    }

    #[test]
    fn own_annotations_are_not_copied() {
        let mut d = rolling(1, json!(1), json!(0));
        d.metadata.annotations = Some(BTreeMap::from([
            (LAST_APPLIED.to_string(), "{}".to_string()),
            (REVISION.to_string(), "7".to_string()),
            ("team".to_string(), "shop".to_string()),
        ]));
        let mut rs = ReplicaSet::default();
        assert!(copy_annotations(&d, &mut rs));
        let annotations = rs.metadata.annotations.expect("annotations");
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations.get("team").map(String::as_str), Some("shop"));
    }

    #[test]
    fn last_revision_is_the_second_highest() {
        let rs = |r: &str| {
            let mut rs = ReplicaSet::default();
            rs.metadata.annotations = Some(BTreeMap::from([(REVISION.to_string(), r.to_string())]));
            rs
        };
        let sets = [rs("3"), rs("1"), rs("2")];
        assert_eq!(max_revision(&sets), 3);
        assert_eq!(last_revision(&sets), 2);
    }
}
