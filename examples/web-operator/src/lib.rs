//! The web operator: a `WebApp` custom resource (`webapps.examples.konverge.dev`) runs as a
//! Deployment and a Service, and reports in its status how many of its pods are ready and
//! available, and an `Available` condition.
//!
//! This is the "status that says more than it knows" story. A status is a claim about the
//! world; a client (a dashboard, a rollout pipeline, another operator waiting on this one)
//! acts on it. `Available` here is True only when the Deployment controller has seen the
//! Deployment's current generation, the Deployment's own `Available` condition is True, *and*
//! at least `spec.replicas` pods are available — and the operator watches its Deployments, so
//! the claim follows the pods when they stop being ready (a node lost, a container crashed, a
//! drain) and when they come back.
//!
//! Two classic mistakes are kept as broken twins ([`Mode`]), to show the checks that catch
//! them: [`Mode::AvailableTooEarly`] reports Available as soon as the Deployment exists, before
//! any pod is ready; [`Mode::StaleReadyCount`] keeps the ready count it first saw reach the
//! spec and reports it ever after, so it goes on claiming Available after a node is lost.
//!
//! # Where to start
//!
//! [`WebApp`] is the resource; [`controller`] declares what is watched; [`reconcile`] applies
//! the children and writes the status [`available_status`] computes; `src/main.rs` runs it;
//! `tests/invariants.rs` proves it under seeded cluster fault plans.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use konverge_runtime::apply::{ApplyError, ChildSet, owner_reference};
use konverge_runtime::conditions::{ConditionStatus, set_condition};
use konverge_runtime::status::{StatusError, patch_status_if_changed};
use konverge_runtime::watcher::Config;
use konverge_runtime::{Action, Controller};
use kube::api::{Api, ObjectMeta};
use kube::{Client, CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The field manager the operator writes as.
pub const MANAGER: &str = "web-operator";
/// The condition a WebApp reports.
pub const AVAILABLE: &str = "Available";
/// The label that ties the pods and the Service to their WebApp.
pub const APP_LABEL: &str = "app.kubernetes.io/instance";

/// What a WebApp asks for.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "examples.konverge.dev",
    version = "v1",
    kind = "WebApp",
    namespaced,
    status = "WebAppStatus",
    printcolumn = r#"{"name":"Ready", "type":"integer", "jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Available", "type":"string", "jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#
)]
pub struct WebAppSpec {
    /// The container image.
    pub image: String,
    /// How many pods.
    pub replicas: i32,
    /// The port the container listens on, and the Service serves.
    pub port: i32,
}

/// What the operator reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WebAppStatus {
    /// The generation this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods of the Deployment that are ready (its `status.readyReplicas`).
    #[serde(default)]
    pub ready_replicas: i32,
    /// Pods of the Deployment that are available (its `status.availableReplicas`).
    #[serde(default)]
    pub available_replicas: i32,
    /// `Available`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// How the operator behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Available only when the pods bear it out.
    Correct,
    /// The broken twin that reports Available as soon as its Deployment exists, before any
    /// pod is ready.
    AvailableTooEarly,
    /// The broken twin that caches the ready count it first saw reach `spec.replicas` and
    /// reports it (and Available) ever after, so it never notices pods that stop being
    /// ready — after a node is lost, say.
    StaleReadyCount,
}

/// A [`Mode`] name that is not one.
#[derive(Debug, thiserror::Error)]
#[error("unknown mode {0:?}: expected correct, available-too-early or stale-ready-count")]
pub struct UnknownMode(String);

impl FromStr for Mode {
    type Err = UnknownMode;

    /// `correct`, `available-too-early`, `stale-ready-count`.
    fn from_str(s: &str) -> Result<Mode, UnknownMode> {
        match s {
            "correct" => Ok(Mode::Correct),
            "available-too-early" => Ok(Mode::AvailableTooEarly),
            "stale-ready-count" => Ok(Mode::StaleReadyCount),
            other => Err(UnknownMode(other.to_string())),
        }
    }
}

/// What every reconcile gets.
pub struct Context {
    /// The cluster.
    pub client: Client,
    /// Correct, or a broken twin.
    pub mode: Mode,
    /// [`Mode::StaleReadyCount`]'s cache: the counts it first saw complete, by
    /// `namespace/name`.
    cached: Mutex<BTreeMap<String, (i32, i32)>>,
}

impl Context {
    /// A context for `mode`, writing as `client`.
    pub fn new(client: Client, mode: Mode) -> Context {
        Context {
            client,
            mode,
            cached: Mutex::new(BTreeMap::new()),
        }
    }
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Applying the children failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// Reading the Deployment back failed.
    #[error("reading Deployment {name}: {source}")]
    Read {
        /// The Deployment's name.
        name: String,
        /// What the server said.
        #[source]
        source: kube::Error,
    },
    /// Writing the status failed.
    #[error(transparent)]
    Status(#[from] StatusError),
}

/// The controller: WebApps are the primary objects; their Deployments and Services trigger
/// them, so the status follows the Deployment's as its pods become (un)ready.
pub fn controller(client: &Client) -> Controller<WebApp> {
    Controller::new(Api::<WebApp>::all(client.clone()), Config::default())
        .named("web-operator")
        .owns(Api::<Deployment>::all(client.clone()), Config::default())
        .owns(Api::<Service>::all(client.clone()), Config::default())
}

fn labels(app: &WebApp) -> BTreeMap<String, String> {
    [(APP_LABEL.to_string(), app.name_any())].into()
}

/// The Deployment and the Service of `app`.
pub fn children(app: &WebApp) -> Result<ChildSet, ApplyError> {
    let meta = ObjectMeta {
        name: Some(app.name_any()),
        namespace: app.namespace(),
        labels: Some(labels(app)),
        owner_references: Some(vec![owner_reference(app)?]),
        ..ObjectMeta::default()
    };
    let deployment = Deployment {
        metadata: meta.clone(),
        spec: Some(DeploymentSpec {
            replicas: Some(app.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(labels(app)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(app)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "web".into(),
                        image: Some(app.spec.image.clone()),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: app.spec.port,
                            // Said, not left to the default, so the live port matches.
                            protocol: Some("TCP".into()),
                            ..ContainerPort::default()
                        }]),
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
        metadata: meta,
        spec: Some(ServiceSpec {
            selector: Some(labels(app)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: app.spec.port,
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::String("http".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    Ok(ChildSet::new()
        .server_side(MANAGER)
        .typed_child("deployment", &deployment)
        .typed_child("service", &service))
}

/// Whether, and why, a WebApp is available, from its Deployment as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// The condition's status.
    pub status: ConditionStatus,
    /// Its reason, one CamelCase word.
    pub reason: String,
    /// Its message, for people.
    pub message: String,
}

impl Availability {
    fn new(status: ConditionStatus, reason: &str, message: String) -> Availability {
        Availability {
            status,
            reason: reason.to_string(),
            message,
        }
    }
}

/// The Deployment's ready and available counts (0 when it reports none).
pub fn counts(deployment: &Deployment) -> (i32, i32) {
    let status = deployment.status.as_ref();
    (
        status.and_then(|s| s.ready_replicas).unwrap_or(0),
        status.and_then(|s| s.available_replicas).unwrap_or(0),
    )
}

/// `Available` as the correct operator judges it: True only when the Deployment controller
/// has observed the Deployment's generation, the Deployment's `Available` condition is True,
/// and at least `spec.replicas` pods are available; otherwise False, saying which of these
/// does not hold.
pub fn availability(app: &WebApp, deployment: Option<&Deployment>) -> Availability {
    let name = app.name_any();
    let Some(deployment) = deployment else {
        return Availability::new(
            ConditionStatus::False,
            "DeploymentMissing",
            format!("Deployment {name} does not exist yet"),
        );
    };
    let status = deployment.status.clone().unwrap_or_default();
    let generation = deployment.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return Availability::new(
            ConditionStatus::False,
            "DeploymentNotObserved",
            format!(
                "the Deployment controller has not yet observed generation {generation} of Deployment {name}"
            ),
        );
    }
    let condition = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Available");
    match condition {
        Some(c) if c.status == "True" => {}
        Some(c) => {
            return Availability::new(
                ConditionStatus::False,
                "DeploymentUnavailable",
                format!(
                    "Deployment {name} is not available: {}",
                    c.message.as_deref().unwrap_or("no message")
                ),
            );
        }
        None => {
            return Availability::new(
                ConditionStatus::False,
                "DeploymentUnavailable",
                format!("Deployment {name} reports no Available condition yet"),
            );
        }
    }
    let (_, available) = counts(deployment);
    let wanted = app.spec.replicas;
    let message = format!("{available} of {wanted} replicas are available");
    if available < wanted {
        Availability::new(ConditionStatus::False, "InsufficientReplicas", message)
    } else {
        Availability::new(ConditionStatus::True, "ReplicasAvailable", message)
    }
}

/// The status to write: counts and `Available` as `mode` judges them, the condition's
/// transition time kept unless its status flips.
pub fn desired_status(
    app: &WebApp,
    deployment: Option<&Deployment>,
    ctx: &Context,
    now: jiff::Timestamp,
) -> WebAppStatus {
    let (mut ready, mut available) = deployment.map(counts).unwrap_or((0, 0));
    let judged = match ctx.mode {
        Mode::Correct => availability(app, deployment),
        Mode::AvailableTooEarly => match deployment {
            // The mistake: "the Deployment is there, so the app is up".
            Some(_) => Availability::new(
                ConditionStatus::True,
                "DeploymentCreated",
                format!("Deployment {} exists", app.name_any()),
            ),
            None => availability(app, None),
        },
        Mode::StaleReadyCount => {
            let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
            let mut cached = ctx.cached.lock().unwrap_or_else(PoisonError::into_inner);
            // The mistake: once complete, the count is remembered, never read again.
            if let Some(&(r, a)) = cached.get(&key) {
                (ready, available) = (r, a);
            } else if ready >= app.spec.replicas {
                cached.insert(key, (ready, available));
            }
            let message = format!(
                "{available} of {} replicas are available",
                app.spec.replicas
            );
            if available >= app.spec.replicas {
                Availability::new(ConditionStatus::True, "ReplicasAvailable", message)
            } else {
                Availability::new(ConditionStatus::False, "InsufficientReplicas", message)
            }
        }
    };
    let mut status = app.status.clone().unwrap_or_default();
    status.observed_generation = app.metadata.generation;
    status.ready_replicas = ready;
    status.available_replicas = available;
    set_condition(
        &mut status.conditions,
        AVAILABLE,
        judged.status,
        &judged.reason,
        &judged.message,
        app.metadata.generation,
        now,
    );
    status
}

/// Applies the Deployment and the Service, reads the Deployment back and writes the status
/// when it changed. Waits for the next change: a status change of the Deployment triggers
/// the next pass.
pub async fn reconcile(app: Arc<WebApp>, ctx: Arc<Context>) -> Result<Action, Error> {
    children(&app)?.apply(&ctx.client).await?;
    let namespace = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let deployment = deployments
        .get_opt(&name)
        .await
        .map_err(|source| Error::Read {
            name: name.clone(),
            source,
        })?;
    let status = desired_status(&app, deployment.as_ref(), &ctx, jiff::Timestamp::now());
    let api: Api<WebApp> = Api::namespaced(ctx.client.clone(), &namespace);
    patch_status_if_changed(&api, app.as_ref(), &status).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(replicas: i32) -> WebApp {
        let mut app = WebApp::new(
            "web",
            WebAppSpec {
                image: "nginx:1.27".into(),
                replicas,
                port: 8080,
            },
        );
        app.metadata.namespace = Some("default".into());
        app.metadata.generation = Some(1);
        app
    }

    fn deployment(generation: i64, observed: i64, available: &str, ready: i32) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": generation},
            "status": {
                "observedGeneration": observed,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "conditions": [{"type": "Available", "status": available,
                                "message": "Deployment does not have minimum availability."}],
            },
        }))
        .expect("a Deployment")
    }

    #[test]
    fn available_only_when_the_pods_bear_it_out() {
        let app = app(3);
        let reason = |d: Option<&Deployment>| availability(&app, d).reason;
        assert_eq!(reason(None), "DeploymentMissing");
        assert_eq!(
            reason(Some(&deployment(2, 1, "True", 3))),
            "DeploymentNotObserved"
        );
        let unavailable = availability(&app, Some(&deployment(1, 1, "False", 3)));
        assert_eq!(
            (unavailable.status, unavailable.message.as_str()),
            (
                ConditionStatus::False,
                "Deployment web is not available: Deployment does not have minimum availability."
            )
        );
        let short = availability(&app, Some(&deployment(1, 1, "True", 2)));
        assert_eq!(
            (short.status, short.reason.as_str(), short.message.as_str()),
            (
                ConditionStatus::False,
                "InsufficientReplicas",
                "2 of 3 replicas are available"
            )
        );
        let up = availability(&app, Some(&deployment(1, 1, "True", 3)));
        assert_eq!(
            (up.status, up.reason.as_str()),
            (ConditionStatus::True, "ReplicasAvailable")
        );
    }

    #[test]
    fn modes_parse_by_name() {
        assert_eq!("correct".parse::<Mode>().ok(), Some(Mode::Correct));
        assert_eq!(
            "stale-ready-count".parse::<Mode>().ok(),
            Some(Mode::StaleReadyCount)
        );
        let err = "flaky".parse::<Mode>().expect_err("not a mode");
        assert_eq!(
            err.to_string(),
            "unknown mode \"flaky\": expected correct, available-too-early or stale-ready-count"
        );
    }
}
