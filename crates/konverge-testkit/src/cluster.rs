//! Cluster faults: what happens to the nodes and pods under a controller — a node lost, a
//! node drained, a zone down, a container crashing, an image that will not pull, a pod slow
//! to start or evicted — carried out on a [`TestEnv`]'s simulated nodes
//! ([`TestEnvBuilder::nodes`](crate::TestEnvBuilder::nodes)) through their [`Kubelets`]
//! handle and, as an admin would, through the API (cordon, the eviction API).
//!
//! Which node, zone or pod a fault acts on is a [`Pick`]: named, or drawn by the plan's seed
//! from the sorted list of candidates when the fault happens, so the same seed on the same
//! cluster picks the same ones.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use konverge_controllers::kubelet::{Behaviour, Kubelets, Rule as KubeletRule};
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use crate::env::TestEnv;

/// How long `kubectl drain` waits before it retries an eviction a PodDisruptionBudget
/// refused (429).
pub(crate) const DRAIN_RETRY: Duration = Duration::from_secs(5);

/// How often a drain looks whether the pods it evicted are gone.
const DRAIN_POLL: Duration = Duration::from_secs(1);

/// Which node, zone or pod a cluster fault acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// This one: a node or zone by name, a pod as `namespace/name`.
    Named(String),
    /// Drawn by the seed: the candidate at this number, modulo their count, in the sorted
    /// list of candidates when the fault happens (nodes whose kubelet runs, by name; zones
    /// with such a node, by name; running pods outside the `kube-` namespaces on nodes
    /// whose kubelet runs, by namespace and name).
    Seeded(u32),
}

impl Pick {
    /// The candidate picked from `sorted`, if there is one.
    pub fn choose<'c>(&self, sorted: &'c [String]) -> Option<&'c String> {
        match self {
            Pick::Named(name) => sorted.iter().find(|c| *c == name),
            Pick::Seeded(_) if sorted.is_empty() => None,
            Pick::Seeded(n) => sorted.get(*n as usize % sorted.len()),
        }
    }
}

impl fmt::Display for Pick {
    /// `node-2`, or `#4821` (drawn by the seed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pick::Named(name) => f.write_str(name),
            Pick::Seeded(n) => write!(f, "#{n}"),
        }
    }
}

/// What a fault of a plan did, as [`FaultPlan::run_on`](crate::FaultPlan::run_on) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Happened {
    /// When it began, from the start of the run.
    pub at: Duration,
    /// Which fault.
    pub fault: crate::Fault,
    /// What it acted on, in the order it picked them: node names, pods as
    /// `namespace/name`. Empty for API faults and for faults that found nothing to pick.
    pub picked: Vec<String>,
    /// What came of it, in words.
    pub outcome: String,
}

impl fmt::Display for Happened {
    /// `at 8210 ms node #4821 lost for 60 s: [node-2] kubelet stopped; kubelet started
    /// again` (the brackets: what it picked, left out when it picked nothing).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {} ms {}: ", self.at.as_millis(), self.fault)?;
        if !self.picked.is_empty() {
            write!(f, "[{}] ", self.picked.join(", "))?;
        }
        f.write_str(&self.outcome)
    }
}

/// What a cluster fault needs: the kubelets and an admin client past the API faults.
#[derive(Clone)]
pub(crate) struct Cluster {
    kubelets: Kubelets,
    client: Client,
    /// How many faults hold each node's kubelet stopped (a node lost and its zone down
    /// overlap): it starts again when the last lets go.
    held: Arc<Mutex<BTreeMap<String, usize>>>,
}

/// A cluster fault begun: what it picked, what happened at once, and what is left to do
/// over its duration (run in the background; its words are added to the outcome).
pub(crate) struct Begun {
    pub(crate) picked: Vec<String>,
    pub(crate) outcome: String,
    pub(crate) rest: Option<BoxFuture<'static, String>>,
}

impl Begun {
    fn now(picked: Vec<String>, outcome: impl Into<String>) -> Begun {
        Begun {
            picked,
            outcome: outcome.into(),
            rest: None,
        }
    }

    fn nothing(what: &str) -> Begun {
        Begun::now(Vec::new(), format!("no {what} to pick: nothing done"))
    }
}

impl Cluster {
    /// The cluster of `env`, if it runs simulated nodes.
    pub(crate) fn of(env: &TestEnv) -> Option<Cluster> {
        Some(Cluster {
            kubelets: env.kubelets()?,
            client: env.direct_client(),
            held: Arc::default(),
        })
    }

    /// Nodes whose kubelet runs, by name.
    fn running_nodes(&self) -> Vec<String> {
        let mut nodes: Vec<String> = self
            .kubelets
            .nodes()
            .into_iter()
            .filter(|n| self.kubelets.is_running(n))
            .collect();
        nodes.sort();
        nodes
    }

    /// Zones with a node whose kubelet runs, by name, and the nodes of each.
    fn zones(&self) -> BTreeMap<String, Vec<String>> {
        let mut zones: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for node in self.kubelets.nodes() {
            if let Some(zone) = self.kubelets.zone(&node) {
                zones.entry(zone).or_default().push(node);
            }
        }
        zones.retain(|_, nodes| nodes.iter().any(|n| self.kubelets.is_running(n)));
        for nodes in zones.values_mut() {
            nodes.sort();
        }
        zones
    }

    /// Running pods outside the `kube-` namespaces on nodes whose kubelet runs, as
    /// `namespace/name`, sorted.
    async fn running_pods(&self) -> Result<Vec<String>, kube::Error> {
        let pods = Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default())
            .await?;
        let mut running: Vec<String> = pods
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter(|p| !p.namespace().unwrap_or_default().starts_with("kube-"))
            .filter(|p| {
                let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                node.is_some_and(|n| self.kubelets.is_running(n))
            })
            .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
            .collect();
        running.sort();
        Ok(running)
    }

    /// Stops the kubelets of `nodes` (one more fault holds each).
    fn hold(&self, nodes: &[String]) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for node in nodes {
            *held.entry(node.clone()).or_default() += 1;
            self.kubelets.stop(node);
        }
    }

    /// Lets go of `nodes`: those no other fault holds start again. Returns those started.
    fn release(&self, nodes: &[String]) -> Vec<String> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mut started = Vec::new();
        for node in nodes {
            let count = held.entry(node.clone()).or_default();
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(node);
                if self.kubelets.start(node) {
                    started.push(node.clone());
                }
            }
        }
        started
    }

    /// A node's kubelet stops, for `down` or for good.
    pub(crate) fn node_lost(&self, pick: &Pick, down: Option<Duration>) -> Begun {
        let Some(node) = pick.choose(&self.running_nodes()).cloned() else {
            return Begun::nothing("running node");
        };
        self.hold(std::slice::from_ref(&node));
        let Some(down) = down else {
            return Begun::now(vec![node], "kubelet stopped for good");
        };
        let cluster = self.clone();
        let back = node.clone();
        Begun {
            picked: vec![node],
            outcome: "kubelet stopped".into(),
            rest: Some(Box::pin(async move {
                tokio::time::sleep(down).await;
                if cluster.release(std::slice::from_ref(&back)).is_empty() {
                    "kept stopped by another fault".to_string()
                } else {
                    "kubelet started again".to_string()
                }
            })),
        }
    }

    /// Every kubelet of a zone stops for `down`.
    pub(crate) fn zone_outage(&self, pick: &Pick, down: Duration) -> Begun {
        let zones = self.zones();
        let names: Vec<String> = zones.keys().cloned().collect();
        let Some(zone) = pick.choose(&names) else {
            return Begun::nothing("zone with a running node");
        };
        let nodes = zones[zone].clone();
        self.hold(&nodes);
        let cluster = self.clone();
        let held = nodes.clone();
        let outcome = format!("zone {zone}: kubelets stopped");
        Begun {
            picked: nodes,
            outcome,
            rest: Some(Box::pin(async move {
                tokio::time::sleep(down).await;
                let started = cluster.release(&held);
                format!("started again: {}", started.join(", "))
            })),
        }
    }

    /// The running containers of a running pod exit with `exit_code`.
    pub(crate) async fn container_crash(&self, pick: &Pick, exit_code: i32) -> Begun {
        let pods = match self.running_pods().await {
            Ok(pods) => pods,
            Err(e) => return Begun::now(Vec::new(), format!("listing pods failed: {e}")),
        };
        let Some(pod) = pick.choose(&pods).cloned() else {
            return Begun::nothing("running pod");
        };
        let (namespace, name) = pod.split_once('/').unwrap_or(("", &pod));
        let crashed = self.kubelets.crash(namespace, name, exit_code);
        let outcome = if crashed {
            format!("containers exited {exit_code}")
        } else {
            "its kubelet had no running container to crash".to_string()
        };
        Begun::now(vec![pod], outcome)
    }

    /// The next `pods` pods admitted behave as `behaviour`, for `lasting` at most (then the
    /// rule goes); with `heal`, pods it left waiting on their image are deleted then.
    pub(crate) fn next_pods(
        &self,
        behaviour: Behaviour,
        pods: usize,
        lasting: Duration,
        heal: bool,
    ) -> Begun {
        let id = self.kubelets.add_rule(KubeletRule {
            behaviour,
            limit: Some(pods),
            ..KubeletRule::default()
        });
        let cluster = self.clone();
        Begun {
            picked: Vec::new(),
            outcome: "kubelet rule added".into(),
            rest: Some(Box::pin(async move {
                tokio::time::sleep(lasting).await;
                cluster.kubelets.remove_rule(id);
                if !heal {
                    return "rule removed".to_string();
                }
                match cluster.replace_pull_failures().await {
                    Ok(deleted) if deleted.is_empty() => "rule removed".to_string(),
                    Ok(deleted) => format!(
                        "rule removed; pods still failing to pull deleted: {}",
                        deleted.join(", ")
                    ),
                    Err(e) => format!("rule removed; deleting stuck pods failed: {e}"),
                }
            })),
        }
    }

    /// Deletes the pods with a controller that wait on an image pull that failed
    /// (`ErrImagePull`, `ImagePullBackOff`), so their controllers replace them.
    async fn replace_pull_failures(&self) -> Result<Vec<String>, kube::Error> {
        let pods = Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default())
            .await?;
        let mut deleted = Vec::new();
        for pod in pods.items.iter().filter(|p| pulling_failed(p)) {
            let has_controller = pod
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true));
            if !has_controller || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let namespace = pod.namespace().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            match api.delete(&pod.name_any(), &DeleteParams::default()).await {
                Ok(_) => deleted.push(format!("{namespace}/{}", pod.name_any())),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    /// A running pod is evicted through the eviction API, once.
    pub(crate) async fn pod_evicted(&self, pick: &Pick) -> Begun {
        let pods = match self.running_pods().await {
            Ok(pods) => pods,
            Err(e) => return Begun::now(Vec::new(), format!("listing pods failed: {e}")),
        };
        let Some(pod) = pick.choose(&pods).cloned() else {
            return Begun::nothing("running pod");
        };
        let (namespace, name) = pod.split_once('/').unwrap_or(("", &pod));
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let outcome = match api.evict(name, &EvictParams::default()).await {
            Ok(_) => "evicted".to_string(),
            Err(kube::Error::Api(s)) if s.code == 429 => format!("eviction refused: {}", s.message),
            Err(e) => format!("eviction failed: {e}"),
        };
        Begun::now(vec![pod], outcome)
    }

    /// `kubectl drain --ignore-daemonsets --delete-emptydir-data --force`, then
    /// `kubectl uncordon` `uncordon_after` later.
    pub(crate) async fn node_drained(&self, pick: &Pick, uncordon_after: Duration) -> Begun {
        let mut nodes = self.kubelets.nodes();
        nodes.sort();
        let Some(node) = pick.choose(&nodes).cloned() else {
            return Begun::nothing("node");
        };
        let until = Instant::now() + uncordon_after;
        if let Err(e) = cordon(&self.client, &node, true).await {
            return Begun::now(vec![node], format!("cordon failed: {e}"));
        }
        let client = self.client.clone();
        let drained = node.clone();
        Begun {
            picked: vec![node],
            outcome: "cordoned".into(),
            rest: Some(Box::pin(async move {
                let report = drain(&client, &drained, until).await;
                tokio::time::sleep_until(until).await;
                match cordon(&client, &drained, false).await {
                    Ok(()) => format!("{report}; uncordoned"),
                    Err(e) => format!("{report}; uncordon failed: {e}"),
                }
            })),
        }
    }
}

/// Whether a pod's containers wait on an image that failed to pull.
fn pulling_failed(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        .any(|reason| matches!(reason, "ErrImagePull" | "ImagePullBackOff"))
}

/// Sets the node's `spec.unschedulable`, as `kubectl cordon` / `uncordon` patch it.
async fn cordon(client: &Client, node: &str, unschedulable: bool) -> Result<(), kube::Error> {
    let value = if unschedulable {
        json!(true)
    } else {
        json!(null)
    };
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"unschedulable": value}})),
        )
        .await?;
    Ok(())
}

/// The pods a drain evicts: every pod bound to `node` but those of DaemonSets
/// (`--ignore-daemonsets`), mirror pods and pods already terminating; sorted.
fn to_evict(pods: &[Pod]) -> Vec<(String, String, Option<String>)> {
    let mut out: Vec<(String, String, Option<String>)> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            !p.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        })
        .filter(|p| !p.annotations().contains_key("kubernetes.io/config.mirror"))
        .map(|p| (p.namespace().unwrap_or_default(), p.name_any(), p.uid()))
        .collect();
    out.sort();
    out
}

/// How one pod's eviction ended.
enum Eviction {
    /// Evicted (or gone already), after this many refusals.
    Done { evicted: bool, refused: usize },
    /// Given up on, after this many refusals.
    GaveUp { refused: usize },
}

/// Evicts one pod, retried every [`DRAIN_RETRY`] while a PodDisruptionBudget refuses it
/// (429), until `until`.
async fn evict(client: &Client, namespace: &str, name: &str, until: Instant) -> Eviction {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut refused = 0;
    loop {
        match api.evict(name, &EvictParams::default()).await {
            Ok(_) => {
                return Eviction::Done {
                    evicted: true,
                    refused,
                };
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Eviction::Done {
                    evicted: false,
                    refused,
                };
            }
            Err(kube::Error::Api(s)) if s.code == 429 => {
                refused += 1;
                tracing::info!(
                    "error when evicting pods/{name:?} -n {namespace:?} (will retry after 5s): {}",
                    s.message
                );
                if Instant::now() + DRAIN_RETRY >= until {
                    return Eviction::GaveUp { refused };
                }
                tokio::time::sleep(DRAIN_RETRY).await;
            }
            Err(e) => {
                tracing::warn!("error when evicting pods/{name:?} -n {namespace:?}: {e}");
                return Eviction::GaveUp { refused };
            }
        }
    }
}

/// Evicts the node's pods, all at once as `kubectl drain` does, each retried while a
/// PodDisruptionBudget refuses it, then waits for them to be gone — until `until`. Says what
/// it did.
async fn drain(client: &Client, node: &str, until: Instant) -> String {
    let listed = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await;
    let pods = match listed {
        Ok(list) => to_evict(&list.items),
        Err(e) => return format!("listing the node's pods failed: {e}"),
    };
    let outcomes = futures::future::join_all(
        pods.iter()
            .map(|(namespace, name, _)| evict(client, namespace, name, until)),
    )
    .await;
    let (mut evicted, mut refused, mut given_up) = (Vec::new(), 0usize, Vec::new());
    for ((namespace, name, uid), outcome) in pods.into_iter().zip(outcomes) {
        match outcome {
            Eviction::Done {
                evicted: done,
                refused: r,
            } => {
                refused += r;
                if done {
                    evicted.push((namespace, name, uid));
                }
            }
            Eviction::GaveUp { refused: r } => {
                refused += r;
                given_up.push(format!("{namespace}/{name}"));
            }
        }
    }
    // Wait for the evicted pods to go (or be replaced by another of the same name).
    let mut remaining = evicted.clone();
    while !remaining.is_empty() && Instant::now() < until {
        let mut still = Vec::new();
        for (namespace, name, uid) in remaining {
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            if let Ok(Some(pod)) = api.get_opt(&name).await
                && pod.uid() == uid
            {
                still.push((namespace, name, uid));
            }
        }
        remaining = still;
        if !remaining.is_empty() {
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }
    let mut report = format!("evicted {} pod(s)", evicted.len());
    if refused > 0 {
        report.push_str(&format!(
            " ({refused} eviction(s) refused by a PodDisruptionBudget and retried)"
        ));
    }
    if !given_up.is_empty() {
        report.push_str(&format!("; gave up on {}", given_up.join(", ")));
    }
    if !remaining.is_empty() {
        report.push_str(&format!("; {} still terminating", remaining.len()));
    }
    report
}
