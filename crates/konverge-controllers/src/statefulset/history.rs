//! ControllerRevisions: the history of a StatefulSet's pod template (kcm's
//! `pkg/controller/history` and the revision helpers of `stateful_set_utils.go`).
//!
//! Each revision holds, as its `data`, the strategic merge patch that restores the template:
//! `{"spec":{"template":{..., "$patch":"replace"}}}`. Its name is `<set>-<hash>`, the hash
//! being kcm's: 32-bit FNV-1 over the patch's JSON bytes and the decimal collision count,
//! its decimal value spelled in kcm's safe alphabet. The bytes are written as Go's
//! `encoding/json` writes the map kcm builds (keys sorted, `<`, `>` and `&` escaped), with
//! the zero values Go's encoding of a pod template always carries
//! (`metadata.creationTimestamp: null`, each container's `resources: {}`), so a template
//! whose JSON this reproduces gets the name kcm would give it. A field Go emits that the
//! Rust types drop would change the hash; names stay stable either way, as they depend only
//! on the template.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use serde_json::{Value, json};

use super::spec::Spec;
use crate::controller_ref;
use crate::error::{Error, Result};

/// kcm's label with a revision's hash (`history.ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// kcm's alphabet for hashes (`rand.SafeEncodeString`): no vowels, no 0, 1 or 3, so no words.
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// How many name collisions a create tries past before giving up for this sync.
const MAX_COLLISIONS: usize = 64;

/// The revision data for `template` (kcm's `getPatch`): the template as Go encodes it.
pub(crate) fn patch_data(template: &PodTemplateSpec) -> Value {
    let mut template = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    konverge_apimachinery::go_encoding::shape_type("core/v1.PodTemplateSpec", &mut template);
    if let Value::Object(fields) = &mut template {
        fields.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// kcm's `HashControllerRevision` of `data` with the collision count `probe`.
pub(crate) fn hash(data: &Value, probe: i32) -> String {
    let mut bytes = Vec::new();
    go_json(data, &mut bytes);
    bytes.extend_from_slice(probe.to_string().as_bytes());
    let sum = fnv1_32(&bytes);
    sum.to_string()
        .bytes()
        .map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()]))
        .collect()
}

/// 32-bit FNV-1 (Go's `fnv.New32`).
fn fnv1_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        hash.wrapping_mul(0x0100_0193) ^ u32::from(*byte)
    })
}

/// `value` as Go's `json.Marshal` writes a decoded `map[string]interface{}`: compact, keys in
/// byte order, HTML characters and U+2028/U+2029 escaped.
fn go_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.extend_from_slice(go_number(n).as_bytes()),
        Value::String(s) => go_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                go_json(item, out);
            }
            out.push(b']');
        }
        Value::Object(fields) => {
            let sorted: BTreeMap<&String, &Value> = fields.iter().collect();
            out.push(b'{');
            for (i, (key, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                go_string(key, out);
                out.push(b':');
                go_json(item, out);
            }
            out.push(b'}');
        }
    }
}

/// A number as Go writes a `float64` it decoded: integral values without a fraction.
fn go_number(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 1e21 => {
            format!("{f:.0}")
        }
        _ => n.to_string(),
    }
}

/// A string as Go's `encoding/json` escapes it.
fn go_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8] = b"0123456789abcdef";
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&') => {
                let code = c as u32 as usize;
                out.extend_from_slice(b"\\u00");
                out.push(HEX[code >> 4]);
                out.push(HEX[code & 0xf]);
            }
            '\u{2028}' => out.extend_from_slice(b"\\u2028"),
            '\u{2029}' => out.extend_from_slice(b"\\u2029"),
            c => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// kcm's `ControllerRevisionName`: `<prefix>-<hash>`, the prefix cut to 223 bytes.
pub(crate) fn revision_name(prefix: &str, hash: &str) -> String {
    let mut end = prefix.len().min(223);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &prefix[..end])
}

/// A revision of `set`'s current template numbered `revision` (kcm's `newRevision`): in the
/// set's namespace, controlled by it, labelled with the template's labels and the hash,
/// annotated with the set's annotations, named for `collision_count`.
pub(crate) fn new_revision(
    set: &StatefulSet,
    spec: &Spec,
    revision: i64,
    collision_count: i32,
) -> ControllerRevision {
    let data = patch_data(&spec.template);
    let hash = hash(&data, collision_count);
    let mut labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.clone());
    let mut revision_object = ControllerRevision {
        data: Some(RawExtension(data)),
        revision,
        ..ControllerRevision::default()
    };
    let meta = &mut revision_object.metadata;
    meta.name = Some(revision_name(&spec.name, &hash));
    meta.namespace = Some(spec.namespace.clone());
    meta.labels = Some(labels);
    meta.annotations = set.metadata.annotations.clone().filter(|a| !a.is_empty());
    meta.owner_references = Some(vec![controller_ref::new_controller_ref(set)]);
    revision_object
}

/// The template a revision restores (kcm's `ApplyRevision`, for the one field the patch
/// replaces).
pub(crate) fn template_of(revision: &ControllerRevision) -> Result<PodTemplateSpec> {
    let invalid = |why: &str| {
        Error::invalid(format!(
            "ControllerRevision {} does not hold a StatefulSet template: {why}",
            revision.name_any()
        ))
    };
    let mut template = revision
        .data
        .as_ref()
        .and_then(|d| d.0.get("spec")?.get("template").cloned())
        .ok_or_else(|| invalid("no spec.template"))?;
    if let Value::Object(fields) = &mut template {
        fields.remove("$patch");
    }
    serde_json::from_value(template).map_err(|e| invalid(&e.to_string()))
}

/// Whether two revisions hold the same template (kcm's `EqualRevision`, comparing the data
/// as JSON values rather than as bytes).
pub(crate) fn equal(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    a.data.as_ref().map(|d| &d.0) == b.data.as_ref().map(|d| &d.0)
}

/// Sorts revisions by number, then age, then name (kcm's `SortControllerRevisions`).
pub(crate) fn sort(revisions: &mut [Arc<ControllerRevision>]) {
    revisions.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| {
                let at =
                    |r: &ControllerRevision| r.metadata.creation_timestamp.clone().map(|t| t.0);
                at(a).cmp(&at(b))
            })
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
}

/// The number after the newest of sorted `revisions` (kcm's `nextRevision`).
pub(crate) fn next_revision(revisions: &[Arc<ControllerRevision>]) -> i64 {
    revisions.last().map_or(1, |r| r.revision.saturating_add(1))
}

/// Creates `revision`, renaming it past name collisions (kcm's `CreateControllerRevision`):
/// a revision of that name with the same data is the one wanted (an earlier create whose
/// answer was lost, or a cache behind); one with other data bumps `collision_count`.
pub(crate) async fn create(
    api: &Api<ControllerRevision>,
    spec: &Spec,
    mut revision: ControllerRevision,
    collision_count: &mut i32,
) -> Result<ControllerRevision> {
    let data = revision
        .data
        .as_ref()
        .map(|d| d.0.clone())
        .unwrap_or_default();
    for _ in 0..MAX_COLLISIONS {
        let name = revision_name(&spec.name, &hash(&data, *collision_count));
        revision.metadata.name = Some(name.clone());
        match api.create(&PostParams::default(), &revision).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => {
                let existing = api.get(&name).await?;
                if equal(&existing, &revision) {
                    return Ok(existing);
                }
                *collision_count = collision_count.saturating_add(1);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::invalid(format!(
        "StatefulSet {}: {MAX_COLLISIONS} ControllerRevision names collided",
        spec.name
    )))
}

/// Renumbers `revision` as `number` (kcm's `UpdateControllerRevision`, a rollback to an
/// earlier template).
pub(crate) async fn renumber(
    api: &Api<ControllerRevision>,
    revision: &ControllerRevision,
    number: i64,
) -> Result<ControllerRevision> {
    if revision.revision == number {
        return Ok(revision.clone());
    }
    let mut updated = revision.clone();
    updated.revision = number;
    Ok(api
        .replace(&revision.name_any(), &PostParams::default(), &updated)
        .await?)
}

/// Deletes `revision` (kcm's `DeleteControllerRevision`); one already gone, or replaced by a
/// namesake, needs nothing.
pub(crate) async fn delete(
    api: &Api<ControllerRevision>,
    revision: &ControllerRevision,
) -> Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: revision.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&revision.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1_matches_gos_test_vectors() {
        assert_eq!(fnv1_32(b""), 0x811c9dc5);
        assert_eq!(fnv1_32(b"a"), 0x050c5d7e);
    }

    #[test]
    fn go_json_sorts_keys_and_escapes_html() {
        let mut out = Vec::new();
        go_json(
            &json!({"b": [1, "x<y&z"], "a": null, "c": {"z": true, "$p": 2.0}}),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            r#"{"a":null,"b":[1,"x\u003cy\u0026z"],"c":{"$p":2,"z":true}}"#
        );
    }

    #[test]
    fn hashes_use_the_safe_alphabet_and_the_collision_count() {
        let data = json!({"spec": {"template": {"$patch": "replace"}}});
        let (a, b) = (hash(&data, 0), hash(&data, 1));
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| SAFE_ALPHABET.contains(&c)), "{a}");
        assert_eq!(a, hash(&data, 0));
    }

    #[test]
    fn names_are_cut_to_fit() {
        assert_eq!(revision_name("web", "abc"), "web-abc");
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
    }

    #[test]
    fn patch_data_carries_gos_zero_values() {
        let template: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}
        }))
        .expect("a template");
        let data = patch_data(&template);
        let template_json = &data["spec"]["template"];
        assert_eq!(template_json["$patch"], "replace");
        assert_eq!(template_json["metadata"]["creationTimestamp"], Value::Null);
        assert_eq!(
            template_json["spec"]["containers"][0]["resources"],
            json!({})
        );
        let revision = ControllerRevision {
            data: Some(RawExtension(data)),
            ..ControllerRevision::default()
        };
        let restored = template_of(&revision).expect("the template");
        assert_eq!(restored.metadata, template.metadata);
        let image = |t: &PodTemplateSpec| t.spec.as_ref().map(|s| s.containers[0].image.clone());
        assert_eq!(image(&restored), image(&template));
    }
}
