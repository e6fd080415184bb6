//! The resource quota controller, as kube-controller-manager runs it: a ResourceQuota's
//! `status.hard` follows its `spec.hard`, and its `status.used` is what the objects of its
//! namespace in its scopes use.
//!
//! Quota admission ([`crate::admission::ResourceQuota`]) charges every create as it happens,
//! so creates need nothing from here. The controller recomputes a quota when it is new or its
//! `spec.hard` changed, and recomputes a namespace's quotas when something there is deleted,
//! or a pod, service or claim changes what it uses (a pod ends, a service changes type, a
//! claim's storage grows) — kube's replenishment. Every quota is also recomputed every
//! [`FULL_RESYNC`], which repairs charges for writes that were admitted but then failed.
//! It follows the store with one watch, as the other control loops do.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{EventKind, KeyRange, RangeRequest, WatchRequest, WatchResponse};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::SETTLE;
use crate::admission::quota::{
    self as usage, Amount, Evaluator, Resources, add, equals, mask, resources, resources_json,
};
use crate::error::{ApiError, Reason};
use crate::registry::{ListOptions, Registry, WriteOptions};
use crate::resources::ResourceType;

/// How often every quota is recomputed from scratch.
pub const FULL_RESYNC: Duration = Duration::from_secs(30);
/// How long a quota whose update failed waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The resources whose usage the core evaluators compute for every quota.
const CORE: &[&str] = &[
    "pods",
    "services",
    "persistentvolumeclaims",
    "configmaps",
    "resourcequotas",
    "replicationcontrollers",
    "secrets",
];

/// Runs the controller until the store closes.
pub async fn run(registry: Registry) {
    loop {
        match run_once(&registry).await {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(error = %err, "resource quota controller restarting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// What the controller remembers between events.
#[derive(Debug, Default)]
struct State {
    /// The quotas of each namespace.
    quotas: BTreeMap<String, BTreeSet<String>>,
    /// What each pod, service and claim of a namespace with quotas used when last seen, by
    /// namespace and key. Namespaces without quotas have nothing to replenish, so their
    /// writes are not even decoded.
    seen: HashMap<String, HashMap<String, String>>,
    /// The quotas to recompute (namespace, name).
    dirty: BTreeSet<(String, String)>,
    /// The quotas whose last update failed.
    failed: BTreeSet<(String, String)>,
    /// Resolves the keys of the writes.
    resolver: super::Resolver,
}

/// One stored object as the controller is told of it.
struct Written<'a> {
    key: &'a str,
    value: &'a [u8],
    /// The key's version: 1 when this write created it.
    version: i64,
}

fn is_quotas(rt: &ResourceType) -> bool {
    rt.is(crate::resources::RESOURCE_QUOTAS)
}

/// Whether a quota's status no longer says what its spec asks: `status.hard` differs from
/// `spec.hard`, or a limited resource has no usage yet.
fn needs_sync(quota: &Value) -> bool {
    let hard = resources(quota.pointer("/status/hard"));
    let used = resources(quota.pointer("/status/used"));
    !equals(&resources(quota.pointer("/spec/hard")), &hard)
        || hard.keys().any(|k| !used.contains_key(k))
}

/// What an object uses, and what decides its scopes, so a change of either is noticed.
fn fingerprint(evaluator: &Evaluator, object: &Value) -> String {
    format!(
        "{:?}{:?}",
        evaluator.usage(object),
        object.pointer("/spec/activeDeadlineSeconds")
    )
}

impl State {
    /// Every quota of `namespace` is recomputed.
    fn replenish(&mut self, namespace: &str) {
        if let Some(names) = self.quotas.get(namespace) {
            for name in names {
                self.dirty.insert((namespace.to_string(), name.clone()));
            }
        }
    }

    fn everything(&mut self) {
        for (namespace, names) in &self.quotas {
            for name in names {
                self.dirty.insert((namespace.clone(), name.clone()));
            }
        }
    }

    /// A stored object, as found on start (`initial`) or written since. On start the quotas
    /// go first (`quotas_only`), so that what the others use is remembered only where
    /// some quota counts it.
    fn put(
        &mut self,
        registry: &Registry,
        written: &Written<'_>,
        initial: bool,
        quotas_only: bool,
    ) {
        let Some((rt, Some(namespace), name)) =
            self.resolver.resolve(registry.catalog(), written.key)
        else {
            return;
        };
        if is_quotas(&rt) {
            self.quotas
                .entry(namespace.clone())
                .or_default()
                .insert(name.clone());
            let stale = serde_json::from_slice::<Value>(written.value)
                .map(|quota| needs_sync(&quota))
                .unwrap_or(false);
            if initial || stale {
                self.dirty.insert((namespace, name));
            }
            return;
        }
        if quotas_only
            || !rt.group.is_empty()
            || !matches!(
                rt.plural.as_str(),
                "pods" | "services" | "persistentvolumeclaims"
            )
            || !self.quotas.contains_key(&namespace)
        {
            return;
        }
        let Ok(object) = serde_json::from_slice::<Value>(written.value) else {
            return;
        };
        let now = fingerprint(&Evaluator::for_resource("", &rt.plural), &object);
        let seen = self.seen.entry(namespace.clone()).or_default();
        // A new object was charged when it was admitted; only a change of what an existing
        // one uses calls for recomputing. An existing object not seen before was written
        // while its namespace had no quota: what it used then is unknown, so its change
        // counts.
        let changed = match seen.insert(written.key.to_string(), now.clone()) {
            Some(before) => before != now,
            None => !initial && written.version > 1,
        };
        if changed {
            self.replenish(&namespace);
        }
    }

    /// A deleted object: what it used is released.
    fn delete(&mut self, registry: &Registry, key: &str) {
        let Some((rt, Some(namespace), name)) = self.resolver.resolve(registry.catalog(), key)
        else {
            return;
        };
        if let Some(seen) = self.seen.get_mut(&namespace) {
            seen.remove(key);
        }
        if is_quotas(&rt)
            && let Some(names) = self.quotas.get_mut(&namespace)
        {
            names.remove(&name);
            self.dirty.remove(&(namespace.clone(), name));
            if names.is_empty() {
                self.quotas.remove(&namespace);
                // Nothing counts this namespace's objects any more.
                self.seen.remove(&namespace);
            }
        }
        self.replenish(&namespace);
    }
}

async fn run_once(registry: &Registry) -> Result<(), konverge_store::Error> {
    let range = KeyRange::prefix(Bytes::from_static(b"/registry/"));
    let listed = registry
        .store()
        .range(RangeRequest::new(range.clone()))
        .await?;
    let mut state = State::default();
    for quotas_only in [true, false] {
        for kv in &listed.kvs {
            let key = String::from_utf8_lossy(&kv.key);
            let written = Written {
                key: &key,
                value: &kv.value,
                version: kv.version,
            };
            state.put(registry, &written, true, quotas_only);
        }
    }
    let mut watch = registry
        .store()
        .watch(WatchRequest::new(range).from_revision(listed.revision + 1))
        .await?;
    let mut full = tokio::time::interval(FULL_RESYNC);
    // The first tick is now, and the start already marked every quota.
    full.tick().await;
    let mut retry = tokio::time::interval(RETRY);
    let mut due: Option<Instant> = None;
    loop {
        if due.is_none() && !state.dirty.is_empty() {
            due = Some(Instant::now() + SETTLE);
        }
        tokio::select! {
            message = watch.recv() => match message {
                Some(Ok(WatchResponse::Events(events))) => {
                    for event in events {
                        let key = String::from_utf8_lossy(&event.kv.key);
                        match event.kind {
                            EventKind::Put => {
                                let written = Written {
                                    key: &key,
                                    value: &event.kv.value,
                                    version: event.kv.version,
                                };
                                state.put(registry, &written, false, false);
                            }
                            EventKind::Delete => state.delete(registry, &key),
                        }
                    }
                }
                Some(Ok(WatchResponse::Progress(_))) => {}
                Some(Err(konverge_store::Error::Closed)) | None => return Ok(()),
                Some(Err(err)) => return Err(err),
            },
            _ = full.tick() => state.everything(),
            _ = retry.tick(), if !state.failed.is_empty() => {
                let failed = std::mem::take(&mut state.failed);
                state.dirty.extend(failed);
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                due = None;
                for (namespace, name) in std::mem::take(&mut state.dirty) {
                    if let Err(e) = sync(registry, &namespace, &name).await {
                        if e.reason != Reason::Conflict {
                            tracing::warn!(error = %e, namespace, quota = name, "recomputing a quota failed");
                        }
                        state.failed.insert((namespace, name));
                    }
                }
            }
        }
    }
}

/// The served, namespaced resource `group/plural`.
fn served(registry: &Registry, group: &str, plural: &str) -> Option<Arc<ResourceType>> {
    registry
        .catalog()
        .stored()
        .into_iter()
        .find(|rt| rt.namespaced && rt.group == group && rt.plural == plural)
}

/// kube's `CalculateUsage`: for every limited resource some evaluator charges, what the
/// objects of the namespace in the quota's scopes use.
async fn calculate(
    registry: &Registry,
    namespace: &str,
    quota: &Value,
    hard: &Resources,
) -> Result<Resources, ApiError> {
    let mut evaluators: Vec<(Evaluator, Arc<ResourceType>)> = CORE
        .iter()
        .filter_map(|plural| {
            Some((
                Evaluator::for_resource("", plural),
                served(registry, "", plural)?,
            ))
        })
        .collect();
    for name in hard.keys() {
        let Some(counted) = name.strip_prefix("count/") else {
            continue;
        };
        if evaluators
            .iter()
            .any(|(e, _)| !e.matching([name]).is_empty())
        {
            continue;
        }
        let (plural, group) = counted.split_once('.').unwrap_or((counted, ""));
        if let Some(rt) = served(registry, group, plural) {
            evaluators.push((Evaluator::for_resource(group, plural), rt));
        }
    }
    let matched: BTreeSet<String> = hard
        .keys()
        .filter(|name| {
            evaluators
                .iter()
                .any(|(e, _)| !e.matching([*name]).is_empty())
        })
        .cloned()
        .collect();
    let selectors = usage::selectors(quota);
    let mut total = Resources::new();
    for (evaluator, rt) in &evaluators {
        let wanted = evaluator.matching(&matched);
        if wanted.is_empty() {
            continue;
        }
        let mut used: Resources = wanted.into_iter().map(|n| (n, Amount::zero())).collect();
        let items = registry
            .list(rt, Some(namespace), &ListOptions::default())
            .await?
            .items;
        for item in items {
            if selectors.iter().all(|s| evaluator.in_scope(s, &item)) {
                used = add(&used, &evaluator.usage(&item));
            }
        }
        total = add(&total, &used);
    }
    Ok(mask(&total, &matched))
}

/// Recomputes one quota and writes its status if it changed (only over the quota as it was
/// read before counting, so usage admission charged meanwhile is not overwritten).
async fn sync(registry: &Registry, namespace: &str, name: &str) -> Result<(), ApiError> {
    let Some(rt) = registry.catalog().get("", "v1", "resourcequotas") else {
        return Ok(());
    };
    let quota = match registry.get(&rt, Some(namespace), name, None).await {
        Ok(quota) => quota,
        Err(e) if e.reason == Reason::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let hard = resources(quota.pointer("/spec/hard"));
    let status_hard = quota.pointer("/status/hard");
    let status_used = quota.pointer("/status/used");
    let had_used = resources(status_used);
    let mut used = had_used.clone();
    used.extend(calculate(registry, namespace, &quota, &hard).await?);
    let used = mask(&used, hard.keys());
    let current = status_hard.is_some_and(Value::is_object)
        && status_used.is_some_and(Value::is_object)
        && equals(&hard, &resources(status_hard))
        && equals(&used, &had_used);
    if current {
        return Ok(());
    }
    let mut body = quota.clone();
    body["status"] = json!({"hard": resources_json(&hard), "used": resources_json(&used)});
    registry
        .update(
            &rt,
            Some(namespace),
            name,
            body,
            Some("status"),
            &WriteOptions::default(),
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    async fn registry() -> (Arc<crate::ApiServer>, Registry) {
        crate::controllers::tests::server_without_loops().await
    }

    fn pod(cpu: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        }))
        .expect("json")
    }

    fn quota() -> Vec<u8> {
        serde_json::to_vec(&json!({
            "metadata": {"name": "q", "namespace": "ns", "uid": "uq"},
            "spec": {"hard": {"requests.cpu": "4"}},
        }))
        .expect("json")
    }

    const POD: &str = "/registry/pods/ns/p";
    const QUOTA: &str = "/registry/resourcequotas/ns/q";

    fn write<'a>(key: &'a str, value: &'a [u8], version: i64) -> Written<'a> {
        Written {
            key,
            value,
            version,
        }
    }

    fn q() -> (String, String) {
        ("ns".to_string(), "q".to_string())
    }

    #[tokio::test]
    async fn writes_where_no_quota_counts_are_not_remembered() {
        let (_server, registry) = registry().await;
        let mut state = State::default();
        state.put(&registry, &write(POD, &pod("1"), 1), false, false);
        state.put(&registry, &write(POD, &pod("2"), 2), false, false);
        assert!(state.seen.is_empty());
        assert!(state.dirty.is_empty());
    }

    #[tokio::test]
    async fn a_change_of_an_object_older_than_the_quota_recomputes_it() {
        let (_server, registry) = registry().await;
        let mut state = State::default();
        state.put(&registry, &write(POD, &pod("1"), 1), false, false);
        state.put(&registry, &write(QUOTA, &quota(), 1), false, false);
        assert_eq!(state.dirty, BTreeSet::from([q()]));
        state.dirty.clear();

        // The pod was written before the quota: what it used then is unknown.
        state.put(&registry, &write(POD, &pod("1"), 2), false, false);
        assert_eq!(state.dirty, BTreeSet::from([q()]));
        state.dirty.clear();
        // Now it is known: the same usage again is no change, another one is.
        state.put(&registry, &write(POD, &pod("1"), 3), false, false);
        assert!(state.dirty.is_empty());
        state.put(&registry, &write(POD, &pod("2"), 4), false, false);
        assert_eq!(state.dirty, BTreeSet::from([q()]));
        state.dirty.clear();

        // A new object was charged by admission.
        let other = "/registry/pods/ns/other";
        state.put(&registry, &write(other, &pod("1"), 1), false, false);
        assert!(state.dirty.is_empty());

        // Without its quota, the namespace is forgotten.
        state.delete(&registry, QUOTA);
        assert!(state.seen.is_empty());
    }

    #[tokio::test]
    async fn on_start_objects_are_remembered_where_a_quota_counts_them() {
        let (_server, registry) = registry().await;
        let mut state = State::default();
        let (pod_bytes, quota_bytes) = (pod("1"), quota());
        // Keys come in order: the pod before the quota.
        let listed = [write(POD, &pod_bytes, 1), write(QUOTA, &quota_bytes, 1)];
        for quotas_only in [true, false] {
            for written in &listed {
                state.put(&registry, written, true, quotas_only);
            }
        }
        assert_eq!(state.dirty, BTreeSet::from([q()]));
        assert_eq!(
            state.seen.get("ns").map(|seen| seen.contains_key(POD)),
            Some(true)
        );
        state.dirty.clear();
        state.put(&registry, &write(POD, &pod("1"), 2), false, false);
        assert!(state.dirty.is_empty());
    }
}
