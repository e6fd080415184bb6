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

/// What one (verb, resource) cost: how many requests, the time from sending each to its
/// response (summed over requests, so overlapping requests add up), and when the first and
/// the last response came.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Tally {
    pub(super) requests: u64,
    pub(super) busy: Duration,
    pub(super) first: Option<Instant>,
    pub(super) last: Option<Instant>,
}

/// Requests by (verb, resource), counted as a client sends them.
#[derive(Clone, Default)]
pub(super) struct Counts(Arc<Mutex<BTreeMap<(String, String), Tally>>>);

impl Counts {
    /// The counts so far, which start again from zero.
    pub(super) fn take(&self) -> BTreeMap<(String, String), Tally> {
        std::mem::take(&mut *self.lock())
    }

    /// The counts so far.
    pub(super) fn snapshot(&self) -> BTreeMap<(String, String), Tally> {
        self.lock().clone()
    }

    /// Requests of one verb and resource so far.
    pub(super) fn requests(&self, verb: &str, resource: &str) -> u64 {
        self.lock()
            .get(&(verb.to_string(), resource.to_string()))
            .map_or(0, |t| t.requests)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Tally>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, key: (String, String), sent: Instant) {
        let now = Instant::now();
        let mut counts = self.lock();
        let tally = counts.entry(key).or_default();
        tally.requests += 1;
        tally.busy += now.saturating_duration_since(sent);
        tally.first.get_or_insert(now);
        tally.last = Some(now);
    }
}

/// `(verb, resource)` of a request as kube-apiserver's metrics name them, with `get/list`
/// for GETs that are not watches and `resource/subresource` for subresources.
pub(super) fn verb_and_resource(
    method: &http::Method,
    path: &str,
    query: &str,
) -> (String, String) {
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
    (verb.to_string(), resource)
}

/// Whether requests of `verb` write.
pub(super) fn is_write(verb: &str) -> bool {
    !matches!(verb, "get/list" | "watch")
}

/// An in-process client of `server` as `identity` (as `ApiServer::client` makes), counting
/// what it sends into `counts`.
pub(super) fn counting_client(
    server: &Arc<ApiServer>,
    identity: Identity,
    counts: Counts,
) -> Client {
    let router = server.router();
    let (token, user) = match identity {
        Identity::Token(token) => (token, None),
        Identity::Impersonating { token, user } => (token, Some(user)),
    };
    let bearer = http::HeaderValue::from_str(&format!("Bearer {token}")).ok();
    let user = user.and_then(|u| http::HeaderValue::from_str(&u).ok());
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let router = router.clone();
        let counts = counts.clone();
        let key = verb_and_resource(
            request.method(),
            request.uri().path(),
            request.uri().query().unwrap_or(""),
        );
        let headers = request.headers_mut();
        if let Some(bearer) = &bearer {
            headers.insert(http::header::AUTHORIZATION, bearer.clone());
        }
        if let Some(user) = &user {
            headers.insert("impersonate-user", user.clone());
        }
        let sent = Instant::now();
        async move {
            let response = match router.oneshot(request.map(axum::body::Body::new)).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            counts.record(key, sent);
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    Client::new(service, "default")
}

/// The benchmarks' Deployment: `default/web`, `replicas` of one nginx container.
pub(super) fn web_deployment(replicas: i32) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }))?)
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
fn report(step: &str, took: Duration, counts: &BTreeMap<(String, String), Tally>) {
    let pod_writes = |verb: &str| {
        counts
            .get(&(verb.to_string(), "pods".to_string()))
            .map_or(0, |t| t.requests)
    };
    let (created, deleted) = (pod_writes("create"), pod_writes("delete"));
    let pods = created + deleted;
    let total: u64 = counts.values().map(|t| t.requests).sum();
    let writes: u64 = counts
        .iter()
        .filter(|((verb, _), _)| is_write(verb))
        .map(|(_, t)| t.requests)
        .sum();
    let per = |n: u64| n as f64 / pods.max(1) as f64;
    println!(
        "{step}: {created} pods created and {deleted} deleted, {total} requests ({:.2} per pod created or deleted), {writes} writes ({:.2}/pod), {:.1} s",
        per(total),
        per(writes),
        took.as_secs_f64()
    );
    for ((verb, resource), tally) in counts {
        println!("    {verb:>8} {resource:<28} {:>6}", tally.requests);
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
    let controllers = counting_client(&server, Identity::Token(token.clone()), counts.clone());
    let selection: Selection = "deployment,replicaset".parse()?;
    let running = ControllerManager::new(controllers)
        .selection(selection)
        .spawn()
        .await?;
    let kubelet = tokio::spawn(kubelet(Api::all(admin.clone())));
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "default");
    let replicas = args.replicas;
    let deployment = web_deployment(replicas)?;
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
