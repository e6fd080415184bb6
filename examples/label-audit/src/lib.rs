//! label-audit: one controller per kind the cluster serves, all sharing one reconciler, that
//! stamps every object carrying a label with the version of it that was audited.
//!
//! At start, [`discover`] runs kube-rs's [`Discovery`] and keeps every resource whose objects
//! can be listed, watched and patched. It asks discovery whether the resource serves those
//! verbs at all, then asks the server whether this identity may use them cluster-wide (one
//! SelfSubjectAccessReview per verb). A kind that refuses is logged and left out, instead of
//! being watched by a watcher that fails forever. [`add`] gives each kept resource a
//! `Controller<DynamicObject>` ([`controller`]) in one [`Manager`]. The controllers share
//! [`reconcile`], which writes the annotation [`AUDITED`].
//!
//! # Written once per version, never again
//!
//! The stamp is the object's `metadata.generation` (`generation=3`) or, for a kind without
//! one (ConfigMaps, Secrets, Namespaces, RBAC roles), a SHA-256 digest of its content:
//! everything but `metadata` and `status`, the part a generation would count. It is not the
//! resourceVersion. Writing the stamp moves the resourceVersion, so a stamp recording it
//! would be out of date as soon as it was written, and every reconcile would write again.
//! A metadata write moves neither the generation nor the content, so a stamped object
//! stays stamped.
//!
//! What triggers a reconcile matters too. The runtime's default predicate (generation
//! changed) passes every change of a kind without a generation, so our own write of such an
//! object comes back as one more reconcile; that reconcile finds the stamp current and writes
//! nothing. For kinds with a generation, [`controller`] adds `annotations_changed`, so a
//! stamp someone edits or removes is put back. Status writes by other controllers change
//! neither and are filtered out.
//!
//! [`Mode::StampsResourceVersion`] is the broken twin that stamps the resourceVersion: every
//! stamp of a kind without a generation outdates itself, and the object is rewritten
//! forever. It is kept to show the failure and the checks that catch it.
//!
//! # Where to start
//!
//! [`run`] is all of it; `src/main.rs` runs it against the default kubeconfig;
//! `tests/audit.rs` proves it against the in-process API server.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use konverge_runtime::predicate::{PredicateExt, annotations_changed, generation_changed};
use konverge_runtime::{Action, Controller, Manager, watcher};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, verbs};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The label selector [`run`] audits by default: objects that carry this label, whatever
/// its value.
pub const LABEL: &str = "audit.konverge.dev/audit";
/// The annotation holding the stamp ([`stamp`]).
pub const AUDITED: &str = "audit.konverge.dev/audited";
/// The field manager the stamp is written as.
pub const MANAGER: &str = "label-audit";

/// What a controller needs in order to stamp its objects.
const VERBS: [&str; 3] = [verbs::LIST, verbs::WATCH, verbs::PATCH];

/// Resources that serve the same stored objects as another resource, in another shape.
/// Auditing both would stamp each object twice, from two different contents, forever.
const ALIASES: &[(&str, &str, &str)] = &[("events.k8s.io", "events", "events")];

/// How many access reviews are in flight at once during [`discover`].
const REVIEWS_IN_FLIGHT: usize = 8;

/// Why something failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Discovery of the cluster's resources failed.
    #[error("discovering the cluster's resources: {0}")]
    Discovery(#[source] kube::Error),
    /// The server did not answer whether a verb is allowed.
    #[error("asking whether {verb} {resource} is allowed: {source}")]
    Access {
        /// The resource, as kubectl names it (`deployments.apps`).
        resource: String,
        /// The verb.
        verb: &'static str,
        /// The server's answer.
        #[source]
        source: kube::Error,
    },
    /// Writing the stamp failed.
    #[error("stamping {object}: {source}")]
    Stamp {
        /// The object, as `resource namespace/name`.
        object: String,
        /// The server's answer.
        #[source]
        source: kube::Error,
    },
    /// The manager failed.
    #[error(transparent)]
    Manager(#[from] konverge_runtime::manager::Error),
}

/// Why a resource is not audited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The resource does not serve these verbs at all (TokenReviews are create-only, for
    /// example).
    NotServed(Vec<&'static str>),
    /// This identity may not use these verbs on it cluster-wide.
    Forbidden(Vec<&'static str>),
    /// Its objects are the objects of this other resource, which is audited instead.
    AliasOf(&'static str),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotServed(verbs) => write!(f, "does not serve {}", verbs.join(", ")),
            Refusal::Forbidden(verbs) => write!(f, "forbidden to {}", verbs.join(", ")),
            Refusal::AliasOf(other) => write!(f, "serves the objects of {other}"),
        }
    }
}

/// A resource left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The resource, as kubectl names it (`deployments.apps`).
    pub resource: String,
    /// Why.
    pub reason: Refusal,
}

/// What [`discover`] found: the resources to audit and the ones left out, each sorted by
/// name.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// One controller each.
    pub audited: Vec<ApiResource>,
    /// Left out.
    pub skipped: Vec<Skipped>,
}

impl Plan {
    /// Whether `resource` (as kubectl names it: `configmaps`, `deployments.apps`) is audited.
    pub fn audits(&self, resource: &str) -> bool {
        self.audited.iter().any(|r| qualified(r) == resource)
    }

    /// Why `resource` is not audited, if it is not.
    pub fn refusal(&self, resource: &str) -> Option<&Refusal> {
        self.skipped
            .iter()
            .find(|s| s.resource == resource)
            .map(|s| &s.reason)
    }
}

/// A resource's name as kubectl prints it: `configmaps`, `deployments.apps`.
pub fn qualified(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// Finds every resource to audit (see the crate docs), logging each one it leaves out.
pub async fn discover(client: &Client) -> Result<Plan, Error> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(Error::Discovery)?;
    let mut plan = Plan::default();
    let mut candidates = Vec::new();
    for group in discovery.groups() {
        // Each kind at its most stable version. Subresources (`deployments/status`) are not
        // listed here: discovery files them under their resource's capabilities.
        for (resource, capabilities) in group.resources_by_stability() {
            let name = qualified(&resource);
            if let Some((_, _, canonical)) = ALIASES
                .iter()
                .find(|(g, p, _)| *g == resource.group && *p == resource.plural)
            {
                plan.skipped.push(Skipped {
                    resource: name,
                    reason: Refusal::AliasOf(canonical),
                });
                continue;
            }
            let missing: Vec<&'static str> = VERBS
                .into_iter()
                .filter(|verb| !capabilities.supports_operation(verb))
                .collect();
            if missing.is_empty() {
                candidates.push(resource);
            } else {
                plan.skipped.push(Skipped {
                    resource: name,
                    reason: Refusal::NotServed(missing),
                });
            }
        }
    }
    let reviewed: Vec<(ApiResource, Vec<&'static str>)> = futures::stream::iter(candidates)
        .map(|resource| async move {
            let denied = denied_verbs(client, &resource).await?;
            Ok::<_, Error>((resource, denied))
        })
        .buffered(REVIEWS_IN_FLIGHT)
        .try_collect()
        .await?;
    for (resource, denied) in reviewed {
        if denied.is_empty() {
            plan.audited.push(resource);
        } else {
            plan.skipped.push(Skipped {
                resource: qualified(&resource),
                reason: Refusal::Forbidden(denied),
            });
        }
    }
    plan.audited.sort_by_key(qualified);
    plan.skipped.sort_by(|a, b| a.resource.cmp(&b.resource));
    for skipped in &plan.skipped {
        match skipped.reason {
            Refusal::Forbidden(_) => {
                tracing::warn!(resource = %skipped.resource, reason = %skipped.reason, "not audited")
            }
            _ => {
                tracing::info!(resource = %skipped.resource, reason = %skipped.reason, "not audited")
            }
        }
    }
    tracing::info!(
        kinds = plan.audited.len(),
        skipped = plan.skipped.len(),
        "auditing"
    );
    Ok(plan)
}

/// The verbs of [`VERBS`] this identity may not use on `resource` in every namespace.
async fn denied_verbs(client: &Client, resource: &ApiResource) -> Result<Vec<&'static str>, Error> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut denied = Vec::new();
    for verb in VERBS {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(resource.group.clone()),
                    resource: Some(resource.plural.clone()),
                    verb: Some(verb.to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| Error::Access {
                resource: qualified(resource),
                verb,
                source,
            })?;
        if !answer.status.is_some_and(|status| status.allowed) {
            denied.push(verb);
        }
    }
    Ok(denied)
}

/// The controller of one resource: every object of it that `selector` (a label selector)
/// matches, in every namespace.
pub fn controller(
    client: &Client,
    resource: &ApiResource,
    selector: &str,
) -> Controller<DynamicObject> {
    Controller::new_with(
        Api::all_with(client.clone(), resource),
        watcher::Config::default().labels(selector),
        resource,
    )
    .named(format!("{MANAGER}/{}", qualified(resource)))
    .with_predicate(generation_changed().or(annotations_changed()))
}

/// What the stamp records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The generation, or the content's digest ([`stamp`]).
    Correct,
    /// The broken twin: the generation, or the resourceVersion, which the stamp's own write
    /// moves.
    StampsResourceVersion,
}

/// What a reconcile needs: the client, the resource its controller watches, the mode.
pub struct Context {
    /// The cluster.
    pub client: Client,
    /// The resource of the objects this context's controller reconciles.
    pub resource: ApiResource,
    /// Correct, or the broken twin.
    pub mode: Mode,
}

/// Adds a controller for each resource of `plan` to `manager`, all reconciled by
/// [`reconcile`] with the manager's client.
pub fn add(manager: &mut Manager, plan: &Plan, selector: &str, mode: Mode) {
    let client = manager.client();
    for resource in &plan.audited {
        let context = Arc::new(Context {
            client: client.clone(),
            resource: resource.clone(),
            mode,
        });
        manager.add(controller(&client, resource, selector), reconcile, context);
    }
}

/// Discovers the resources ([`discover`]) and audits every object `selector` matches until
/// `shutdown` completes.
pub async fn run(
    client: Client,
    selector: &str,
    mode: Mode,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let plan = discover(&client).await?;
    let mut manager = Manager::new(client);
    add(&mut manager, &plan, selector, mode);
    manager.run(shutdown).await?;
    Ok(())
}

/// The stamp `obj` should carry in `mode`.
pub fn stamp_in(mode: Mode, obj: &DynamicObject) -> String {
    match (mode, obj.metadata.generation) {
        (Mode::StampsResourceVersion, None) => format!(
            "resourceVersion={}",
            obj.metadata.resource_version.as_deref().unwrap_or_default()
        ),
        _ => stamp(obj),
    }
}

/// The stamp `obj` should carry: `generation=<n>`, or `sha256:<hex>` of its content for a
/// kind without a generation (see the crate docs).
pub fn stamp(obj: &DynamicObject) -> String {
    match obj.metadata.generation {
        Some(generation) => format!("generation={generation}"),
        None => {
            let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
            if let Value::Object(fields) = &obj.data {
                for (key, value) in sorted(fields) {
                    // What describes the object rather than its content, or is not its desired
                    // state. (List items come without apiVersion and kind, watch events with.)
                    if matches!(key, "apiVersion" | "kind" | "metadata" | "status") {
                        continue;
                    }
                    canonical(&Value::from(key), &mut digest);
                    canonical(value, &mut digest);
                }
            }
            let hex: String = digest
                .finish()
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("sha256:{hex}")
        }
    }
}

fn sorted(fields: &serde_json::Map<String, Value>) -> Vec<(&str, &Value)> {
    let mut fields: Vec<(&str, &Value)> = fields.iter().map(|(k, v)| (k.as_str(), v)).collect();
    fields.sort_by_key(|(k, _)| *k);
    fields
}

/// Feeds `value` to `digest` as JSON with every object's keys sorted, so the digest does not
/// depend on the order the server sent the fields in.
fn canonical(value: &Value, digest: &mut ring::digest::Context) {
    match value {
        Value::Object(fields) => {
            digest.update(b"{");
            for (i, (key, value)) in sorted(fields).into_iter().enumerate() {
                if i > 0 {
                    digest.update(b",");
                }
                canonical(&Value::from(key), digest);
                digest.update(b":");
                canonical(value, digest);
            }
            digest.update(b"}");
        }
        Value::Array(items) => {
            digest.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    digest.update(b",");
                }
                canonical(item, digest);
            }
            digest.update(b"]");
        }
        scalar => digest.update(scalar.to_string().as_bytes()),
    }
}

/// Stamps `obj` unless its stamp is current. The patch carries the resourceVersion the
/// stamp was computed from, so a stamp of a version that has since changed is refused (409)
/// and computed again.
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let want = stamp_in(ctx.mode, &obj);
    if obj.annotations().get(AUDITED) == Some(&want) {
        return Ok(Action::await_change());
    }
    let name = obj.name_any();
    let namespace = obj.namespace();
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ctx.resource),
        None => Api::all_with(ctx.client.clone(), &ctx.resource),
    };
    let patch = json!({
        "metadata": {
            "resourceVersion": obj.resource_version(),
            "annotations": { AUDITED: want },
        }
    });
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    let written = api
        .patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Stamp {
            object: format!(
                "{} {}{name}",
                qualified(&ctx.resource),
                namespace.map(|ns| format!("{ns}/")).unwrap_or_default()
            ),
            source,
        })?;
    // The next reconcile of this object waits for the cache to hold this write, so it never
    // decides on the unstamped version again.
    konverge_runtime::reconcile::wrote(&written);
    tracing::info!(stamp = %want, "audited");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).expect("a valid object")
    }

    #[test]
    fn a_kind_with_a_generation_is_stamped_with_it() {
        let deployment = object(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "generation": 4, "resourceVersion": "17"},
            "spec": {"replicas": 2},
        }));
        assert_eq!(stamp(&deployment), "generation=4");
    }

    #[test]
    fn a_kind_without_one_is_stamped_with_its_content() {
        let a = object(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "5"},
            "data": {"x": "1", "y": "2"},
        }));
        // Metadata (our own stamp, labels, resourceVersion), status, apiVersion and kind,
        // and the order of fields do not count; the content does.
        let same = object(json!({
            "metadata": {"name": "a", "resourceVersion": "6", "annotations": {AUDITED: "x"}},
            "data": {"y": "2", "x": "1"},
            "status": {"phase": "whatever"},
        }));
        let changed = object(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "7"},
            "data": {"x": "1", "y": "3"},
        }));
        assert!(stamp(&a).starts_with("sha256:"), "{}", stamp(&a));
        assert_eq!(stamp(&a).len(), "sha256:".len() + 64);
        assert_eq!(stamp(&a), stamp(&same));
        assert_ne!(stamp(&a), stamp(&changed));
    }

    #[test]
    fn refusals_read_as_sentences() {
        assert_eq!(
            Refusal::Forbidden(vec!["list", "watch"]).to_string(),
            "forbidden to list, watch"
        );
        assert_eq!(
            Refusal::NotServed(vec!["list", "watch", "patch"]).to_string(),
            "does not serve list, watch, patch"
        );
        assert_eq!(
            Refusal::AliasOf("events").to_string(),
            "serves the objects of events"
        );
    }
}
