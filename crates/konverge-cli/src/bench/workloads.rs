//! `konverge bench workloads`: what the deployment and replicaset controllers ask of the API
//! server, per pod, for a Deployment created, scaled, rolled and rolled back — against what
//! kube-controller-manager asks for the same (from its source; see `docs/benchmarks.md`).
//!
//! The API server runs in-process on the memory store; the two controllers run in a
//! `ControllerManager` whose client counts every request it sends, by verb and resource. A
//! stand-in kubelet (not counted) marks each new pod Running and Ready, and finishes the
//! deletion of each terminating pod, so every step runs to completion.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use konverge_apiserver::serve::in_process::Identity;
use konverge_apiserver::{ApiServer, AuthorizationMode};
use konverge_controllers::{ControllerManager, Selection};
use konverge_store::MemStore;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tower::ServiceExt;

#[derive(clap::Args)]
pub(crate) struct WorkloadsArgs {
    /// Replicas of the Deployment.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
}

/// Requests by (verb, resource), counted as the controllers' client sends them.
#[derive(Clone, Default)]
struct Counts(Arc<Mutex<BTreeMap<(String, String), u64>>>);

impl Counts {
    fn take(&self) -> BTreeMap<(String, String), u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn record(&self, method: &http::Method, path: &str, query: &str) {
        let watch = query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        let verb = match (method.as_str(), watch) {
            ("GET", true) => "watch",
            ("GET", false) => "get/list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", _) => "delete",
            (other, _) => other,
        };
        // /api/v1/namespaces/ns/pods/name/status -> pods/status; .../events -> events
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let after = parts
            .iter()
            .position(|p| *p == "namespaces")
            .map_or(parts.len().saturating_sub(1), |i| i + 2);
        let resource = match parts.get(after..).unwrap_or_default() {
            [resource] | [resource, _] => resource.to_string(),
            [resource, _, sub, ..] => format!("{resource}/{sub}"),
            [] => parts.last().copied().unwrap_or_default().to_string(),
        };
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *counts.entry((verb.to_string(), resource)).or_default() += 1;
    }
}

/// An in-process client of `server` as the admin, counting what it sends into `counts`.
fn counting_client(server: &Arc<ApiServer>, token: &str, counts: Counts) -> Client {
    let router = server.router();
    let bearer = http::HeaderValue::from_str(&format!("Bearer {token}")).ok();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let router = router.clone();
        counts.record(
            request.method(),
            request.uri().path(),
            request.uri().query().unwrap_or(""),
        );
        if let Some(bearer) = &bearer {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, bearer.clone());
        }
        async move {
            match router.oneshot(request.map(axum::body::Body::new)).await {
                Ok(response) => Ok::<_, std::convert::Infallible>(response),
                Err(never) => match never {},
            }
        }
    });
    Client::new(service, "default")
}

/// Marks new pods Running and Ready, and deletes terminating ones for good.
async fn kubelet(pods: Api<Pod>) {
    loop {
        let list = pods.list(&ListParams::default()).await.map(|l| l.items);
        for pod in list.unwrap_or_default() {
            let ns: Api<Pod> = Api::namespaced(
                pods.clone().into_client(),
                &pod.namespace().unwrap_or_default(),
            );
            if pod.metadata.deletion_timestamp.is_some() {
                let _ = ns
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await;
                continue;
            }
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                continue;
            }
            let status = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
            ]}});
            let _ = ns
                .patch_status(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(status),
                )
                .await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the Deployment has rolled out `replicas` pods of its current template.
async fn rolled_out(api: &Api<Deployment>, replicas: i32) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        let d = api.get("web").await?;
        let (generation, status) = (d.metadata.generation, d.status.unwrap_or_default());
        if status.observed_generation == generation
            && status.updated_replicas == Some(replicas)
            && status.available_replicas == Some(replicas)
            && status.replicas == Some(replicas)
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the Deployment did not roll out in 5 minutes: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints a step's requests, per pod the controllers created or deleted in it.
fn report(step: &str, took: Duration, counts: &BTreeMap<(String, String), u64>) {
    let pod_writes = |verb: &str| {
        counts
            .get(&(verb.to_string(), "pods".to_string()))
            .copied()
            .unwrap_or(0)
    };
    let (created, deleted) = (pod_writes("create"), pod_writes("delete"));
    let pods = created + deleted;
    let total: u64 = counts.values().sum();
    let writes: u64 = counts
        .iter()
        .filter(|((verb, _), _)| !matches!(verb.as_str(), "get/list" | "watch"))
        .map(|(_, n)| n)
        .sum();
    let per = |n: u64| n as f64 / pods.max(1) as f64;
    println!(
        "{step}: {created} pods created and {deleted} deleted, {total} requests ({:.2} per pod created or deleted), {writes} writes ({:.2}/pod), {:.1} s",
        per(total),
        per(writes),
        took.as_secs_f64()
    );
    for ((verb, resource), n) in counts {
        println!("    {verb:>8} {resource:<28} {n:>6}");
    }
}

pub(crate) async fn run(args: WorkloadsArgs) -> anyhow::Result<()> {
    let token = konverge_apiserver::serve::credentials::generate_token();
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .bearer_token(token.clone())
        .authorization(AuthorizationMode::AlwaysAllow)
        .build()
        .await
        .context("starting the API server")?;
    let admin = server.client(Identity::Token(token.clone()));
    let counts = Counts::default();
    let controllers = counting_client(&server, &token, counts.clone());
    let selection: Selection = "deployment,replicaset".parse()?;
    let running = ControllerManager::new(controllers)
        .selection(selection)
        .spawn()
        .await?;
    let kubelet = tokio::spawn(kubelet(Api::all(admin.clone())));
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "default");
    let replicas = args.replicas;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }))?;
    println!("A Deployment of {replicas} replicas, deployment and replicaset controllers:");

    deployments
        .create(&PostParams::default(), &deployment)
        .await?;
    let took = rolled_out(&deployments, replicas).await?;
    report("create", took, &counts.take());

    let scaled = replicas * 2;
    let patch = json!({"spec": {"replicas": scaled}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let took = rolled_out(&deployments, scaled).await?;
    report("scale x2", took, &counts.take());
    let patch = json!({"spec": {"replicas": replicas}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let took = rolled_out(&deployments, replicas).await?;
    report("scale back", took, &counts.take());

    let image = |image: &str| json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}});
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(image("nginx:1.28")),
        )
        .await?;
    let took = rolled_out(&deployments, replicas).await?;
    report("roll", took, &counts.take());
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(image("nginx:1.27")),
        )
        .await?;
    let took = rolled_out(&deployments, replicas).await?;
    report("roll back", took, &counts.take());

    kubelet.abort();
    running.stop().await?;
    Ok(())
}
