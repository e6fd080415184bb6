//! kcm's taint eviction controller (`pkg/controller/tainteviction`): pods on a node with
//! `NoExecute` taints they do not tolerate are deleted at once; pods that tolerate every
//! such taint for a limited time (`tolerationSeconds`, 300 s in the tolerations the API
//! server's `DefaultTolerationSeconds` admission adds for `not-ready` and `unreachable`) are
//! deleted once the shortest of those times has passed since the taints were first seen on
//! the pod's node. Before deleting, the pod gets the `DisruptionTarget` condition with
//! reason `DeletionByTaintManager`; a `TaintManagerEviction` event marks it, and another
//! marks an eviction cancelled because the taints went away.
//!
//! kcm keeps the scheduled evictions in a timed queue; here each pod's reconcile asks to run
//! again when its eviction is due. As in kcm the schedule lives in memory: a restarted
//! controller counts the toleration time again from its first look. A pod whose node is gone
//! is left to the pod garbage collector (kcm would still fire an eviction it had scheduled).

use crate::pods::tolerates;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, PodCondition, Taint, Toleration};
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::json;

use crate::clock::Clock;
use crate::descriptor::{Descriptor, Setup};
use crate::error::Result;
use crate::events::Events;
use crate::informers;

/// kcm's taint eviction controller; like kcm it acts as the node controller's
/// ServiceAccount.
pub const TAINT_EVICTION: Descriptor = Descriptor {
    name: "taint-eviction-controller",
    aliases: &[],
    service_account: "node-controller",
    add,
};

struct Ctx {
    client: kube::Client,
    clock: Clock,
    events: Events,
    nodes: Store<Node>,
    /// When each pod's eviction was first scheduled, by `namespace/name`.
    scheduled: Mutex<HashMap<String, Timestamp>>,
}

fn add(manager: &mut Manager, setup: Setup) {
    let pods = informers::pods_by_node(manager);
    let ctx = Arc::new(Ctx {
        events: Events::new(setup.client.clone(), "taint-eviction-controller"),
        client: setup.client,
        clock: setup.clock,
        nodes: informers::cache::<Node>(manager),
        scheduled: Mutex::new(HashMap::new()),
    });
    let controller = informers::controller::<Pod>(manager)
        .named("taint-eviction")
        // kcm looks at a pod again only when its node or its tolerations change.
        .with_predicate(|old: Option<&Pod>, new: &Pod| {
            old.is_none_or(|old| {
                node_name(old) != node_name(new) || tolerations(old) != tolerations(new)
            })
        })
        .watches_cached(
            informers::api::<Node>(manager),
            informers::config(),
            move |change: &Change<Node>| {
                let taints = |n: &Option<Arc<Node>>| n.as_deref().map(no_execute_taints);
                if change.old.is_some()
                    && change.new.is_some()
                    && taints(&change.old) == taints(&change.new)
                {
                    return Vec::new();
                }
                informers::pods_on(&pods, &change.key.name)
                    .iter()
                    .filter_map(|p| ObjectKey::of(p.as_ref()))
                    .collect()
            },
        );
    manager.add(controller, reconcile, ctx);
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

/// The node's `NoExecute` taints.
pub fn no_execute_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .filter(|t| t.effect == "NoExecute")
        .cloned()
        .collect()
}

/// How long the pod may stay (kcm's `GetMatchingTolerations` and `getMinTolerationTime`):
/// `None` if some taint is not tolerated (evict now), `Some(None)` if every taint is
/// tolerated forever, `Some(Some(d))` for the shortest `tolerationSeconds` of the
/// tolerations used.
pub fn toleration_time(taints: &[Taint], tolerations: &[Toleration]) -> Option<Option<Duration>> {
    let mut used = Vec::new();
    for taint in taints {
        used.push(tolerations.iter().find(|t| tolerates(t, taint))?);
    }
    if used.is_empty() {
        return Some(Some(Duration::ZERO));
    }
    let mut shortest: Option<i64> = None;
    for seconds in used.iter().filter_map(|t| t.toleration_seconds) {
        if seconds <= 0 {
            return Some(Some(Duration::ZERO));
        }
        shortest = Some(shortest.map_or(seconds, |s| s.min(seconds)));
    }
    Some(shortest.map(|s| Duration::from_secs(s.unsigned_abs())))
}

fn key_of(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn pod_reference(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name_any()),
        namespace: pod.namespace(),
        ..ObjectReference::default()
    }
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action> {
    let node = node_name(&pod);
    if node.is_empty() || pod.metadata.deletion_timestamp.is_some() {
        forget(&ctx, &pod);
        return Ok(Action::await_change());
    }
    let taints = ctx
        .nodes
        .get(&ObjectKey::cluster(node))
        .map(|n| no_execute_taints(&n))
        .unwrap_or_default();
    if taints.is_empty() {
        cancel(&ctx, &pod);
        return Ok(Action::await_change());
    }
    let now = ctx.clock.now();
    let due = match toleration_time(&taints, tolerations(&pod)) {
        None => now,
        Some(None) => {
            cancel(&ctx, &pod);
            return Ok(Action::await_change());
        }
        Some(Some(allowed)) => {
            let since = *ctx
                .scheduled
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key_of(&pod))
                .or_insert(now);
            since
                .saturating_add(SignedDuration::try_from(allowed).unwrap_or(SignedDuration::MAX))
                .unwrap_or(Timestamp::MAX)
        }
    };
    if due > now {
        let wait = Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO);
        return Ok(Action::requeue(wait + Duration::from_millis(1)));
    }
    evict(&ctx, &pod).await?;
    forget(&ctx, &pod);
    Ok(Action::await_change())
}

fn forget(ctx: &Ctx, pod: &Pod) {
    ctx.scheduled
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key_of(pod));
}

/// Drops a scheduled eviction, with kcm's event.
fn cancel(ctx: &Ctx, pod: &Pod) {
    let had = ctx
        .scheduled
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key_of(pod))
        .is_some();
    if had {
        ctx.events.record(
            pod_reference(pod),
            EventType::Normal,
            "TaintManagerEviction",
            format!("Cancelling deletion of Pod {}", key_of(pod)),
        );
    }
}

/// kcm's `addConditionAndDeletePod`, read fresh from the API server as kcm does.
async fn evict(ctx: &Ctx, pod: &Pod) -> Result<()> {
    ctx.events.record(
        pod_reference(pod),
        EventType::Normal,
        "TaintManagerEviction",
        format!("Marking for deletion Pod {}", key_of(pod)),
    );
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let Some(mut fresh) = api.get_opt(&pod.name_any()).await? else {
        return Ok(());
    };
    let condition = PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("DeletionByTaintManager".into()),
        message: Some("Taint manager: deleting due to NoExecute taint".into()),
        ..PodCondition::default()
    };
    if crate::podgc::update_pod_condition(&mut fresh, condition, &ctx.clock)
        && let Some(c) = crate::pods::condition(&fresh, "DisruptionTarget")
    {
        let patch = json!({"metadata": {"uid": fresh.uid()}, "status": {"conditions": [c]}});
        api.patch_status(
            &fresh.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await?;
    }
    match api
        .delete(&fresh.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toleration(key: &str, operator: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some(operator.into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            ..Toleration::default()
        }
    }

    #[test]
    fn the_shortest_toleration_of_the_taints_wins() {
        let unreachable = Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoExecute".into(),
            ..Taint::default()
        };
        let defaults = [
            toleration("node.kubernetes.io/not-ready", "Exists", Some(300)),
            toleration("node.kubernetes.io/unreachable", "Exists", Some(300)),
        ];
        assert_eq!(
            toleration_time(std::slice::from_ref(&unreachable), &defaults),
            Some(Some(Duration::from_secs(300)))
        );
        assert_eq!(
            toleration_time(std::slice::from_ref(&unreachable), &[]),
            None
        );
        let forever = [toleration("node.kubernetes.io/unreachable", "Exists", None)];
        assert_eq!(
            toleration_time(std::slice::from_ref(&unreachable), &forever),
            Some(None)
        );
        let everything = Toleration {
            operator: Some("Exists".into()),
            ..Toleration::default()
        };
        assert!(tolerates(&everything, &unreachable));
    }
}
