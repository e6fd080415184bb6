//! The aggregator: merges every ConfigMap labelled `aggregator.konverge.dev/into=<target>`
//! into the ConfigMap `<target>` of the same namespace (which carries
//! `aggregator.konverge.dev/target=true`), each key as `<source>.<key>`.
//!
//! This is the unbounded-growth story. An aggregator that merges what it sees into the
//! target, and never removes what its inputs dropped, grows without bound: every key any
//! source ever had stays, until the object hits the 1.5 MiB limit. This one computes the
//! target's data from scratch on every reconcile and writes it with server-side apply, so
//! keys that are gone from the sources are pruned by the server. [`Mode::NeverPrunes`] is
//! the broken twin, kept to show the failure and the check that catches it.
//!
//! # Where to start
//!
//! [`controller`] declares what is watched; [`reconcile`] computes and applies the target;
//! `src/main.rs` runs it against a cluster; `tests/invariants.rs` proves it under faults.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::apply::{ApplyError, ChildSet};
use konverge_runtime::watcher::Config;
use konverge_runtime::{Action, Controller, ObjectKey};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// On a source: the name of the target it is merged into.
pub const INTO: &str = "aggregator.konverge.dev/into";
/// On a target: `true`.
pub const TARGET: &str = "aggregator.konverge.dev/target";
/// The field manager the aggregator writes as.
pub const MANAGER: &str = "aggregator";

/// How the aggregator writes the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The whole desired data, with server-side apply: what the sources dropped goes.
    Correct,
    /// The broken twin: merges the sources' keys in and never removes any.
    NeverPrunes,
}

/// What every reconcile gets.
pub struct Context {
    /// The cluster.
    pub client: Client,
    /// Correct, or the broken twin.
    pub mode: Mode,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing the sources or writing the target failed.
    #[error("talking to the API server: {0}")]
    Kube(#[from] kube::Error),
    /// Applying the target failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// Lists that accept any resourceVersion (`resourceVersion=0`), which kube-apiserver serves
/// whole from its watch cache: kube-rs sends it only on an unpaginated list.
fn any_version(config: Config) -> Config {
    Config {
        page_size: None,
        ..config.any_semantic()
    }
}

/// The controller: targets are the primary objects; a change to any source reconciles the
/// target it names.
///
/// ConfigMaps are many on a big cluster, so its lists accept any resourceVersion
/// ([`any_version`]): kube-apiserver answers them from its watch cache, possibly a little
/// behind, and the watches catch up. The tests prove the aggregate converges anyway, with
/// stale list answers among their faults.
pub fn controller(client: &Client) -> Controller<ConfigMap> {
    Controller::new(
        Api::<ConfigMap>::all(client.clone()),
        any_version(Config::default().labels(&format!("{TARGET}=true"))),
    )
    .named("aggregator")
    .watches(
        Api::<ConfigMap>::all(client.clone()),
        any_version(Config::default().labels(INTO)),
        |source: &ConfigMap| {
            let target = source.labels().get(INTO).cloned();
            let namespace = source.namespace().unwrap_or_default();
            target
                .map(|t| ObjectKey::namespaced(namespace, t))
                .into_iter()
                .collect()
        },
    )
}

/// The target's data: every source's keys, as `<source>.<key>`, in key order.
pub fn desired_data(sources: &[ConfigMap]) -> BTreeMap<String, String> {
    sources
        .iter()
        .flat_map(|source| {
            let name = source.name_any();
            source
                .data
                .iter()
                .flatten()
                .map(move |(k, v)| (format!("{name}.{k}"), v.clone()))
        })
        .collect()
}

/// Lists the target's sources and writes its data.
pub async fn reconcile(target: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = target.namespace().unwrap_or_default();
    let name = target.name_any();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let sources = api
        .list(&ListParams::default().labels(&format!("{INTO}={name}")))
        .await?
        .items;
    let data = desired_data(&sources);
    match ctx.mode {
        Mode::Correct => {
            // Only what this manager owns: the data. The labels stay the user's.
            let desired = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(namespace),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..ConfigMap::default()
            };
            ChildSet::new()
                .server_side(MANAGER)
                .typed_child("target", &desired)
                .apply(&ctx.client)
                .await?;
        }
        Mode::NeverPrunes => {
            let current = target.data.clone().unwrap_or_default();
            if data.iter().any(|(k, v)| current.get(k) != Some(v)) {
                let patch = json!({ "data": data });
                let params = PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..PatchParams::default()
                };
                api.patch(&name, &params, &Patch::Merge(&patch)).await?;
            }
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_prefixed_with_their_source_and_sorted() {
        let source = |name: &str, data: &[(&str, &str)]| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        };
        let data = desired_data(&[source("b", &[("x", "1")]), source("a", &[("y", "2")])]);
        assert_eq!(
            data.into_iter().collect::<Vec<_>>(),
            [("a.y".into(), "2".into()), ("b.x".into(), "1".into())]
        );
    }
}
