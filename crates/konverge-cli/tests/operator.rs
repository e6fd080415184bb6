//! An operator written for a real cluster, run unchanged against `konverge up`: kube-rs's own
//! runtime (`kube::runtime::Controller`), a `#[derive(CustomResource)]` type installed as a
//! CustomResourceDefinition, a finalizer (`kube::runtime::finalizer`) and status written with
//! server-side apply. Nothing in it knows it is not talking to kube-apiserver.

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "demo.konverge.dev",
    version = "v1",
    kind = "Greeting",
    namespaced,
    status = "GreetingStatus"
)]
struct GreetingSpec {
    message: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
struct GreetingStatus {
    published: bool,
    observed_generation: Option<i64>,
}

const FINALIZER: &str = "greetings.demo.konverge.dev/cleanup";
const MANAGER: &str = "greeting-operator";

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(String),
}

/// The operator's reconcile: publish the greeting as a ConfigMap owned by it, report that in
/// status (server-side apply), and delete the ConfigMap when the greeting goes away.
async fn reconcile(greeting: Arc<Greeting>, client: Arc<Client>) -> Result<Action, Error> {
    let ns = greeting.namespace().unwrap_or_default();
    let greetings: Api<Greeting> = Api::namespaced((*client).clone(), &ns);
    finalizer(&greetings, FINALIZER, greeting, |event| async {
        let config_maps: Api<ConfigMap> = Api::namespaced((*client).clone(), &ns);
        match event {
            Event::Apply(g) => {
                let owner = g.controller_owner_ref(&()).expect("an owner reference");
                let cm = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": g.name_any(), "ownerReferences": [owner]},
                    "data": {"message": g.spec.message},
                });
                config_maps
                    .patch(
                        &g.name_any(),
                        &PatchParams::apply(MANAGER),
                        &Patch::Apply(cm),
                    )
                    .await?;
                let status = json!({
                    "apiVersion": Greeting::api_version(&()),
                    "kind": Greeting::kind(&()),
                    "status": {"published": true, "observed_generation": g.metadata.generation},
                });
                greetings
                    .patch_status(
                        &g.name_any(),
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(status),
                    )
                    .await?;
                Ok(Action::await_change())
            }
            Event::Cleanup(g) => {
                config_maps
                    .delete(&g.name_any(), &DeleteParams::default())
                    .await
                    .map(|_| ())
                    .or_else(|e| match e {
                        kube::Error::Api(s) if s.code == 404 => Ok(()),
                        e => Err(e),
                    })?;
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e: kube::runtime::finalizer::Error<kube::Error>| Error::Finalizer(e.to_string()))
}

fn error_policy(_: Arc<Greeting>, _: &Error, _: Arc<Client>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rs_operator_runs_unchanged_against_konverge_up() -> anyhow::Result<()> {
    let up = common::Up::start();
    let kubeconfig = kube::config::Kubeconfig::read_from(up.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;

    // Install the definition and wait for it, as an operator's installer does.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "greetings.demo.konverge.dev",
        &PatchParams::apply(MANAGER),
        &Patch::Apply(Greeting::crd()),
    )
    .await?;
    let established = await_condition(
        crds.clone(),
        "greetings.demo.konverge.dev",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(5), established).await??;

    // Run the operator.
    let greetings: Api<Greeting> = Api::namespaced(client.clone(), "default");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let controller = Controller::new(greetings.clone(), watcher::Config::default())
        .owns(config_maps.clone(), watcher::Config::default())
        .run(reconcile, error_policy, Arc::new(client.clone()))
        .for_each(|_| async {});
    let running = tokio::spawn(controller);

    greetings
        .create(
            &PostParams::default(),
            &Greeting::new(
                "hello",
                GreetingSpec {
                    message: "hello, world".into(),
                },
            ),
        )
        .await?;

    // The operator publishes, adds its finalizer and reports status.
    let published = await_condition(greetings.clone(), "hello", |g: Option<&Greeting>| {
        g.and_then(|g| g.status.as_ref())
            .is_some_and(|s| s.published)
    });
    tokio::time::timeout(Duration::from_secs(10), published).await??;
    let greeting = greetings.get("hello").await?;
    assert!(greeting.finalizers().iter().any(|f| f == FINALIZER));
    assert_eq!(
        greeting.status.as_ref().and_then(|s| s.observed_generation),
        greeting.metadata.generation
    );
    let cm = config_maps.get("hello").await?;
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .get("message")
            .map(String::as_str),
        Some("hello, world")
    );
    assert!(
        greeting
            .managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some(MANAGER)
                && m.subresource.as_deref() == Some("status")),
        "the status was applied by the operator"
    );

    // Deleting runs the cleanup, then the finalizer comes off and the greeting is gone.
    let uid = greeting.uid().expect("a uid");
    greetings.delete("hello", &DeleteParams::default()).await?;
    let gone = await_condition(greetings.clone(), "hello", conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(10), gone).await??;
    assert!(config_maps.get_opt("hello").await?.is_none());

    running.abort();
    Ok(())
}
