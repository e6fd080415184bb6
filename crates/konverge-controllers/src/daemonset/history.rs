//! A DaemonSet's ControllerRevisions (kcm's `constructHistory`, `snapshot`,
//! `dedupCurHistories` and `cleanupHistory`): one revision per pod template, named
//! `<daemonset>-<hash>`, holding the template as kcm's strategic merge patch
//! (`{"spec":{"template":{..., "$patch":"replace"}}}`) — what `kubectl rollout undo` applies.
//!
//! The hash differs from kcm's: kcm hashes a Go deep print of the template with FNV-32a,
//! which cannot be reproduced outside Go. Here FNV-32a runs over the template's JSON with
//! sorted keys (stable across runs and versions), followed by the collision count, and is
//! encoded with kcm's alphabet, so names look like kcm's and stay the same for the same
//! template. Revisions are matched to templates by content, never by hash.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::context::Ctx;
use crate::controller_ref::{self, new_controller_ref};
use crate::error::Result;
use crate::pods;

pub use super::context::HASH_LABEL;

/// kcm's `revisionHistoryLimit` default (the API server defaults it too).
const DEFAULT_HISTORY_LIMIT: i32 = 10;

/// The current revision and the older ones, or `None` when the cache is behind the server
/// (a stale collision count): the caller tries again shortly.
pub(super) type Revisions = Option<(ControllerRevision, Vec<ControllerRevision>)>;

/// The hash of `template` with `collision_count` (see the module docs): at most ten
/// characters of kcm's safe alphabet.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut text = String::new();
    canonical_json(
        &serde_json::to_value(template).unwrap_or_default(),
        &mut text,
    );
    let mut bytes = text.into_bytes();
    if let Some(count) = collision_count {
        bytes.extend_from_slice(&count.to_le_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// JSON with object keys sorted, whatever map type serde_json was built with.
fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_json(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// kcm's `rand.SafeEncodeString`: each character mapped into an alphabet without vowels
/// (no words) and without look-alike characters.
fn safe_encode(text: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    text.bytes()
        .map(|b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
        .collect()
}

/// The patch a revision of `ds` holds (kcm's `getPatch`).
pub fn patch(ds: &DaemonSet) -> Value {
    let template = ds.spec.as_ref().map(|s| &s.template);
    let mut template = serde_json::to_value(template).unwrap_or_default();
    if let Some(object) = template.as_object_mut() {
        object.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// Whether `revision` holds `ds`'s current template (kcm's `Match`, comparing the JSON
/// rather than its bytes).
pub fn matches(ds: &DaemonSet, revision: &ControllerRevision) -> bool {
    revision.data.as_ref().is_some_and(|d| d.0 == patch(ds))
}

fn revisions_api(ctx: &Ctx, namespace: &str) -> Api<ControllerRevision> {
    Api::namespaced(ctx.client.clone(), namespace)
}

/// The revisions `ds` controls, adopting orphans its selector matches and releasing those
/// it no longer matches.
async fn controlled(ctx: &Ctx, ds: &DaemonSet) -> Result<Vec<Arc<ControllerRevision>>> {
    let namespace = ds.namespace().unwrap_or_default();
    let selector = controller_ref::selector(ds.spec.as_ref().map(|s| &s.selector))?;
    let owner = new_controller_ref(ds);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let recheck_owner = owner.clone();
    controller_ref::claim(
        |ns| revisions_api(ctx, ns),
        &owner,
        ds.metadata.deletion_timestamp.is_some(),
        ctx.revisions.list_namespace(&namespace),
        |r: &ControllerRevision| selector.matches(r.labels()),
        || async move { controller_ref::recheck_owner(&daemon_sets, &recheck_owner).await },
    )
    .await
}

/// Finds `ds`'s current revision, creating it when the template is new, and its older
/// revisions (kcm's `constructHistory`). Revisions without the hash label get their name as
/// one; duplicates of the current revision are merged into the newest (its pods relabelled);
/// the current revision is renumbered above every older one.
pub(super) async fn construct(
    ctx: &Ctx,
    ds: &DaemonSet,
    daemon_pods: &[Arc<Pod>],
) -> Result<Revisions> {
    let namespace = ds.namespace().unwrap_or_default();
    let api = revisions_api(ctx, &namespace);
    let mut current = Vec::new();
    let mut old = Vec::new();
    for revision in controlled(ctx, ds).await? {
        let revision = if revision.labels().contains_key(HASH_LABEL) {
            (*revision).clone()
        } else {
            let name = revision.name_any();
            let labels = json!({"metadata": {"labels": {HASH_LABEL: name}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&labels))
                .await?
        };
        if matches(ds, &revision) {
            current.push(revision);
        } else {
            old.push(revision);
        }
    }
    let next = old.iter().map(|r| r.revision).max().unwrap_or(0) + 1;
    if current.is_empty() {
        return Ok(snapshot(ctx, ds, next).await?.map(|cur| (cur, old)));
    }
    let mut cur = dedup(ctx, ds, current, daemon_pods).await?;
    if cur.revision < next {
        let renumber = json!({"revision": next});
        cur = api
            .patch(
                &cur.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&renumber),
            )
            .await?;
    }
    Ok(Some((cur, old)))
}

/// Keeps the newest of several revisions holding the current template: every daemon pod
/// not labelled with its hash is relabelled, then the others are deleted (kcm's
/// `dedupCurHistories`).
async fn dedup(
    ctx: &Ctx,
    ds: &DaemonSet,
    mut current: Vec<ControllerRevision>,
    daemon_pods: &[Arc<Pod>],
) -> Result<ControllerRevision> {
    // The last of the highest revision, as kcm's `>=` scan picks.
    let keep_at = current
        .iter()
        .enumerate()
        .max_by_key(|(i, r)| (r.revision, *i))
        .map_or(0, |(i, _)| i);
    let keep = current.swap_remove(keep_at);
    if current.is_empty() {
        return Ok(keep);
    }
    let namespace = ds.namespace().unwrap_or_default();
    let hash = keep.labels().get(HASH_LABEL).cloned().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    for pod in daemon_pods {
        if pods::labels(pod).get(HASH_LABEL) != Some(&hash) {
            let relabel = json!({"metadata": {"labels": {HASH_LABEL: hash}}});
            pods_api
                .patch(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&relabel),
                )
                .await?;
        }
    }
    let api = revisions_api(ctx, &namespace);
    for duplicate in current {
        delete_revision(&api, &duplicate.name_any()).await?;
    }
    Ok(keep)
}

/// Creates the revision of `ds`'s template (kcm's `snapshot`). A revision of that name
/// holding another template is a hash collision: `status.collisionCount` is raised (from a
/// fresh read) and the create's AlreadyExists is returned, so the next attempt hashes
/// differently.
async fn snapshot(ctx: &Ctx, ds: &DaemonSet, revision: i64) -> Result<Option<ControllerRevision>> {
    let namespace = ds.namespace().unwrap_or_default();
    let Some(spec) = ds.spec.as_ref() else {
        return Ok(None);
    };
    let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
    let hash = compute_hash(&spec.template, collision_count);
    let name = format!("{}-{hash}", ds.name_any());
    let mut labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(HASH_LABEL.to_string(), hash);
    let wanted = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            annotations: ds.metadata.annotations.clone(),
            owner_references: Some(vec![new_controller_ref(ds)]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(patch(ds))),
        revision,
    };
    let api = revisions_api(ctx, &namespace);
    let exists = match api.create(&PostParams::default(), &wanted).await {
        Ok(created) => return Ok(Some(created)),
        Err(kube::Error::Api(status)) if status.is_already_exists() => status,
        Err(error) => return Err(error.into()),
    };
    let existing = api.get(&name).await?;
    if matches(ds, &existing) {
        return Ok(Some(existing));
    }
    let daemon_sets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut fresh = daemon_sets.get(&ds.name_any()).await?;
    let fresh_count = fresh.status.as_ref().and_then(|s| s.collision_count);
    if fresh_count != collision_count {
        tracing::debug!(
            daemonset = %ds.name_any(),
            "found a stale collision count; will retry until it is updated"
        );
        return Ok(None);
    }
    let status = fresh.status.get_or_insert_with(Default::default);
    status.collision_count = Some(collision_count.unwrap_or(0).saturating_add(1));
    let updated = daemon_sets
        .replace_status(&ds.name_any(), &PostParams::default(), &fresh)
        .await?;
    konverge_runtime::reconcile::wrote(&updated);
    tracing::info!(
        daemonset = %ds.name_any(),
        collision_count = ?updated.status.as_ref().and_then(|s| s.collision_count),
        "found a hash collision for DaemonSet - bumping collisionCount to resolve it"
    );
    Err(kube::Error::Api(exists).into())
}

/// Deletes the oldest revisions beyond `revisionHistoryLimit`, sparing any a daemon pod
/// still runs (kcm's `cleanupHistory`).
pub(super) async fn cleanup(
    ctx: &Ctx,
    ds: &DaemonSet,
    mut old: Vec<ControllerRevision>,
    daemon_pods: &[Arc<Pod>],
) -> Result<()> {
    let limit = ds
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(DEFAULT_HISTORY_LIMIT);
    let limit = usize::try_from(limit).unwrap_or(0);
    let mut to_kill = old.len().saturating_sub(limit);
    if to_kill == 0 {
        return Ok(());
    }
    let live: BTreeSet<&String> = daemon_pods
        .iter()
        .filter_map(|p| pods::labels(p).get(HASH_LABEL))
        .filter(|h| !h.is_empty())
        .collect();
    old.sort_by_key(|r| r.revision);
    let api = revisions_api(ctx, &ds.namespace().unwrap_or_default());
    for revision in old {
        if to_kill == 0 {
            break;
        }
        if revision
            .labels()
            .get(HASH_LABEL)
            .is_some_and(|h| live.contains(h))
        {
            continue;
        }
        delete_revision(&api, &revision.name_any()).await?;
        to_kill -= 1;
    }
    Ok(())
}

/// Deletes a revision; one already gone is deleted.
async fn delete_revision(api: &Api<ControllerRevision>, name: &str) -> Result<()> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": image}]}
        }))
        .expect("a template")
    }

    #[test]
    fn hashes_are_stable_and_move_with_template_and_collisions() {
        let a = compute_hash(&template("nginx:1"), None);
        assert_eq!(a, compute_hash(&template("nginx:1"), None));
        assert_ne!(a, compute_hash(&template("nginx:2"), None));
        assert_ne!(a, compute_hash(&template("nginx:1"), Some(1)));
        assert!(a.len() <= 10 && a.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    #[test]
    fn the_patch_replaces_the_template() {
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "ds"},
            "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": template("nginx:1")}
        }))
        .expect("a daemon set");
        let patch = patch(&ds);
        assert_eq!(patch["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            patch["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1"
        );
        let revision = ControllerRevision {
            data: Some(RawExtension(patch)),
            ..ControllerRevision::default()
        };
        assert!(matches(&ds, &revision));
    }
}
