//! The app operator: an `App` custom resource (`apps.example.konverge.dev`) becomes a Secret,
//! a ConfigMap, a Deployment and a Service, applied in that order (each after what it
//! reads), and the App reports a `Ready` condition.
//!
//! This is the hot-loop story. A controller that writes its status on every pass — a
//! timestamp, or conditions in the order a hash map happens to iterate — and reacts to every
//! change of its object, wakes itself with each status write, forever. This one reacts to
//! spec changes only (the generation), writes its children only when they differ, and its
//! status only when it changed, with conditions in a fixed order. [`Mode::Flapping`] is the
//! broken twin, kept to show the failure and the checks that catch it.
//!
//! # Where to start
//!
//! [`App`] is the resource; [`controller`] declares what is watched; [`reconcile`] applies
//! the children and the status; `src/main.rs` runs it; `tests/invariants.rs` proves it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec, Secret,
    SecretEnvSource, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use konverge_runtime::apply::{ApplyError, ApplyOutcome, ChildSet, owner_reference};
use konverge_runtime::conditions::{ConditionStatus, set_condition};
use konverge_runtime::predicate;
use konverge_runtime::status::{StatusError, patch_status_if_changed};
use konverge_runtime::watcher::Config;
use konverge_runtime::{Action, Controller};
use kube::api::{Api, ObjectMeta};
use kube::{Client, CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The field manager the operator writes as.
pub const MANAGER: &str = "app-operator";

/// What an App asks for.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "example.konverge.dev",
    version = "v1",
    kind = "App",
    namespaced,
    status = "AppStatus",
    printcolumn = r#"{"name":"Image", "type":"string", "jsonPath":".spec.image"}"#
)]
pub struct AppSpec {
    /// The container image.
    pub image: String,
    /// How many pods.
    pub replicas: i32,
    /// Settings, given to the pods as environment variables.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// What the operator reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The generation this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, and (the twin only) others.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// When the twin last reconciled: the field that makes it loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconciled: Option<String>,
}

/// How the operator behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Reacts to spec changes; writes only what changed.
    Correct,
    /// The broken twin: reacts to every change of the App, and writes a timestamp and its
    /// conditions (in hash-map order) to the status on every pass.
    Flapping,
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
    /// Applying the children failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// Writing the status failed.
    #[error(transparent)]
    Status(#[from] StatusError),
}

/// The controller: Apps are the primary objects, their children trigger them.
pub fn controller(client: &Client, mode: Mode) -> Controller<App> {
    let controller = Controller::new(Api::<App>::all(client.clone()), Config::default())
        .named("app-operator")
        .owns(Api::<Secret>::all(client.clone()), Config::default())
        .owns(Api::<ConfigMap>::all(client.clone()), Config::default())
        .owns(Api::<Deployment>::all(client.clone()), Config::default())
        .owns(Api::<Service>::all(client.clone()), Config::default());
    match mode {
        // The default predicate: the generation, which status writes do not change.
        Mode::Correct => controller,
        Mode::Flapping => controller.with_predicate(predicate::resource_version_changed()),
    }
}

/// The children of `app`, in the order they depend on each other.
pub fn children(app: &App) -> Result<ChildSet, ApplyError> {
    let name = app.name_any();
    let namespace = app.namespace();
    let meta = |suffix: &str| -> Result<ObjectMeta, ApplyError> {
        Ok(ObjectMeta {
            name: Some(format!("{name}{suffix}")),
            namespace: namespace.clone(),
            labels: Some([("app".to_string(), name.clone())].into()),
            owner_references: Some(vec![owner_reference(app)?]),
            ..ObjectMeta::default()
        })
    };
    // `data`, not `stringData`: the server turns stringData into data and keeps none of
    // it, so an apply of stringData would never look converged.
    let token = ByteString(format!("token-for-{name}").into_bytes());
    let secret = Secret {
        metadata: meta("-credentials")?,
        data: Some([("token".to_string(), token)].into()),
        ..Secret::default()
    };
    let config = ConfigMap {
        metadata: meta("-config")?,
        data: Some(app.spec.config.clone()),
        ..ConfigMap::default()
    };
    let labels: BTreeMap<String, String> = [("app".to_string(), name.clone())].into();
    let deployment = Deployment {
        metadata: meta("")?,
        spec: Some(DeploymentSpec {
            replicas: Some(app.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some(app.spec.image.clone()),
                        env_from: Some(vec![
                            EnvFromSource {
                                config_map_ref: Some(ConfigMapEnvSource {
                                    name: format!("{name}-config"),
                                    ..ConfigMapEnvSource::default()
                                }),
                                ..EnvFromSource::default()
                            },
                            EnvFromSource {
                                secret_ref: Some(SecretEnvSource {
                                    name: format!("{name}-credentials"),
                                    ..SecretEnvSource::default()
                                }),
                                ..EnvFromSource::default()
                            },
                        ]),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };
    let service = Service {
        metadata: meta("")?,
        spec: Some(ServiceSpec {
            selector: Some(labels),
            ports: Some(vec![ServicePort {
                port: 80,
                // Said, not left to the default, so the live port matches what is applied.
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::Int(8080)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    Ok(ChildSet::new()
        .server_side(MANAGER)
        .typed_child("secret", &secret)
        .typed_child("config", &config)
        .typed_child("deployment", &deployment)
        .typed_child("service", &service)
        .depends_on("config", ["secret"])
        .depends_on("deployment", ["config", "secret"])
        .depends_on("service", ["deployment"]))
}

/// Applies the children, then the status.
pub async fn reconcile(app: Arc<App>, ctx: Arc<Context>) -> Result<Action, Error> {
    let outcome = children(&app)?.apply(&ctx.client).await?;
    let (ready, reason, message) = match &outcome {
        ApplyOutcome::Applied { .. } => {
            (ConditionStatus::True, "Applied", "every child is applied")
        }
        ApplyOutcome::Waiting { .. } => (
            ConditionStatus::False,
            "Waiting",
            "children are being applied",
        ),
    };
    let api: Api<App> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let mut status = app.status.clone().unwrap_or_default();
    match ctx.mode {
        Mode::Correct => {
            set_condition(
                &mut status.conditions,
                "Ready",
                ready,
                reason,
                message,
                app.metadata.generation,
                jiff::Timestamp::now(),
            );
        }
        Mode::Flapping => {
            // The classic mistakes: a timestamp every pass, and conditions rebuilt in the
            // order a HashMap iterates (a new random order for each map).
            let now = jiff::Timestamp::now();
            let conditions: HashMap<&str, &str> = [
                ("Ready", ready.as_str()),
                ("Available", "True"),
                ("Progressing", "False"),
            ]
            .into();
            status.conditions = conditions
                .into_iter()
                .map(|(type_, value)| Condition {
                    type_: type_.into(),
                    status: value.into(),
                    reason: reason.into(),
                    message: message.into(),
                    observed_generation: app.metadata.generation,
                    last_transition_time: Time(now),
                })
                .collect();
            status.last_reconciled = Some(now.to_string());
        }
    }
    patch_status_if_changed(&api, app.as_ref(), &status).await?;
    Ok(match outcome {
        ApplyOutcome::Applied { .. } => Action::await_change(),
        ApplyOutcome::Waiting { .. } => Action::requeue(std::time::Duration::from_millis(200)),
    })
}
