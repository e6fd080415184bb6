//! [`Kubelets`]: a handle on running simulated kubelets, for tests and fault plans — stop
//! and start a node's kubelet, crash a pod's containers, change how the next pods behave,
//! read a container's log.
//!
//! The handle and the two controllers [`SimulatedNodes::add`](super::SimulatedNodes::add)
//! starts share one [`Shared`] state (see `state`), and the handle reaches the running
//! controllers' contexts through a [`Wiring`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use konverge_runtime::ObjectKey;
use kube::ResourceExt;

use super::node::NodeCtx;
use super::pod::PodCtx;
use super::rules::{Crash, Entry, Rule, RuleId};
use super::state::Shared;
use super::{SimNode, node_name, whole};

/// The running controllers' contexts, set when they are added (weak: they belong to the
/// manager).
#[derive(Debug, Default)]
pub(super) struct Wiring(Mutex<Option<(Weak<NodeCtx>, Weak<PodCtx>)>>);

impl Wiring {
    pub(super) fn wire(&self, nodes: &Arc<NodeCtx>, pods: &Arc<PodCtx>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((Arc::downgrade(nodes), Arc::downgrade(pods)));
    }

    fn wired(&self) -> Option<(Arc<NodeCtx>, Arc<PodCtx>)> {
        let wiring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (nodes, pods) = wiring.as_ref()?;
        Some((nodes.upgrade()?, pods.upgrade()?))
    }
}

/// A handle on simulated nodes' kubelets ([`SimulatedNodes::kubelets`](super::SimulatedNodes::kubelets)),
/// sharing state with the controllers [`SimulatedNodes::add`](super::SimulatedNodes::add)
/// starts. Cheap to clone.
#[derive(Clone)]
pub struct Kubelets {
    nodes: Arc<BTreeMap<String, SimNode>>,
    shared: Arc<Shared>,
    wiring: Arc<Wiring>,
}

impl std::fmt::Debug for Kubelets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Kubelets")
            .field("nodes", &self.nodes.keys().collect::<Vec<_>>())
            .field("stopped", &state.stopped)
            .field("rules", &state.rules.len())
            .finish_non_exhaustive()
    }
}

impl Kubelets {
    pub(super) fn new(
        nodes: Arc<BTreeMap<String, SimNode>>,
        shared: Arc<Shared>,
        wiring: Arc<Wiring>,
    ) -> Kubelets {
        Kubelets {
            nodes,
            shared,
            wiring,
        }
    }

    /// The nodes' names, sorted.
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    /// The node's zone (`topology.kubernetes.io/zone`), if it has one.
    pub fn zone(&self, node: &str) -> Option<String> {
        self.nodes.get(node)?.zone.clone()
    }

    /// The node's kubelet dies: no lease renewals, no node status, no pod status or deletes
    /// (its pods are left as they are, as on a lost machine). false if the node is unknown.
    ///
    /// The node lifecycle controller then sees the node's heartbeats stop: after its grace
    /// period the node is `Unknown` and tainted `node.kubernetes.io/unreachable`, and taint
    /// eviction deletes its pods once their tolerations run out.
    pub fn stop(&self, node: &str) -> bool {
        if !self.nodes.contains_key(node) {
            return false;
        }
        let mut state = self.shared.lock();
        state.stopped.insert(node.to_string());
        state.resync.remove(node);
        true
    }

    /// The kubelet comes back: registers again if its Node was deleted, heartbeats, and
    /// resumes its pods (finishing deletions that were asked for meanwhile). false if the
    /// node is unknown.
    ///
    /// The node is registered and its Lease renewed at once; the Lease's renewal is what
    /// wakes the kubelet's look at each of its pods.
    pub fn start(&self, node: &str) -> bool {
        let Some(sim) = self.nodes.get(node) else {
            return false;
        };
        {
            let mut state = self.shared.lock();
            if state.stopped.remove(node) {
                state.resync.insert(node.to_string());
            }
        }
        if let Some((ctx, _)) = self.wiring.wired() {
            let sim = sim.clone();
            tokio::spawn(async move {
                if let Err(error) = super::node::sync(&ctx, &sim, true).await {
                    tracing::debug!(%error, node = sim.name, "kubelet restart: sync deferred");
                }
            });
        }
        true
    }

    /// Whether the node's kubelet runs (false for an unknown node).
    pub fn is_running(&self, node: &str) -> bool {
        self.nodes.contains_key(node) && self.shared.lock().is_running(node)
    }

    /// The running app containers of the pod exit now with `exit_code` (a crash); they restart
    /// per restartPolicy with the kubelet's back-off, as a crashing container does. false if
    /// the pod is not a running pod on one of these nodes (or its kubelet is stopped, or the
    /// kubelets' controllers are not running).
    pub fn crash(&self, namespace: &str, name: &str, exit_code: i32) -> bool {
        let Some((_, ctx)) = self.wiring.wired() else {
            return false;
        };
        let Some(pod) = ctx
            .pods
            .get(&ObjectKey::namespaced(namespace, name.to_string()))
        else {
            return false;
        };
        let Some(node) = node_name(&pod).and_then(|n| self.nodes.get(n)) else {
            return false;
        };
        if pod.metadata.deletion_timestamp.is_some() || !self.is_running(&node.name) {
            return false;
        }
        let now = ctx.clock.now();
        let computed = super::pod::computed(&ctx, &pod, node, now);
        let running: Vec<String> = computed
            .status
            .container_statuses
            .iter()
            .flatten()
            .filter(|s| s.state.as_ref().is_some_and(|st| st.running.is_some()))
            .map(|s| s.name.clone())
            .collect();
        if computed.status.phase.as_deref() != Some("Running") || running.is_empty() {
            return false;
        }
        {
            let mut state = self.shared.lock();
            let Some(admitted) = state.pods.get_mut(&computed.uid) else {
                return false;
            };
            for container in running {
                admitted.crashes.entry(container).or_default().push(Crash {
                    at: whole(now),
                    exit_code,
                });
            }
        }
        // The kubelet writes the crash now; the write wakes its own reconcile, which then
        // waits for the restart.
        tokio::spawn(async move {
            if let Err(error) = super::worker::sync(&ctx, &pod).await {
                tracing::debug!(%error, "crash not written at once");
            }
        });
        true
    }

    /// Adds a lifecycle rule: applied to each pod when its kubelet admits it (first sees it
    /// bound), so a rule changes pods admitted after it, never rewrites a running pod's past.
    /// When several rules match a pod, each applies in the order they were added (a later
    /// one wins where they disagree) and each counts the pod against its `limit`.
    pub fn add_rule(&self, rule: Rule) -> RuleId {
        let mut state = self.shared.lock();
        state.next_rule += 1;
        let id = RuleId(state.next_rule);
        state.rules.push(Entry {
            id: id.clone(),
            rule,
            applied: 0,
        });
        id
    }

    /// Removes a rule; false if there is none with this id. Pods it was applied to keep
    /// their lifecycle.
    pub fn remove_rule(&self, id: RuleId) -> bool {
        let mut state = self.shared.lock();
        let before = state.rules.len();
        state.rules.retain(|e| e.id != id);
        state.rules.len() != before
    }

    /// The simulated log of a container, as the kubelet serves `pods/log`: `Ok(None)` when
    /// the pod is not on one of these nodes (or their controllers do not run); `Err` with the
    /// kubelet's words when it has no log to give (the container waits to start, or there is
    /// no previous instance), or with the API server's dial error when the node's kubelet is
    /// stopped; else the instance's lines with their timestamps. A live pod is read as its
    /// kubelet sees it now (so `pod` may be a little stale), a finished or deleted one as its
    /// status says. See [`logs`](super::logs) for what the lines say.
    pub fn logs(
        &self,
        pod: &Pod,
        container: &str,
        previous: bool,
    ) -> Result<Option<Vec<(Timestamp, String)>>, String> {
        let Some(node) = node_name(pod).and_then(|n| self.nodes.get(n)) else {
            return Ok(None);
        };
        let Some((_, ctx)) = self.wiring.wired() else {
            return Ok(None);
        };
        if !self.is_running(&node.name) {
            // The API server cannot reach a dead kubelet.
            return Err(format!(
                "Get \"https://{ip}:10250/containerLogs/{}/{}/{container}\": dial tcp {ip}:10250: \
                 connect: no route to host",
                pod.namespace().unwrap_or_default(),
                pod.name_any(),
                ip = node.internal_ip,
            ));
        }
        // A live pod's status is the kubelet's own (what it would write now); a finished or
        // deleted one's is what it wrote last.
        let live = pod.metadata.deletion_timestamp.is_none()
            && !matches!(crate::pods::phase(pod), "Succeeded" | "Failed");
        let status = if live {
            super::pod::computed(&ctx, pod, node, ctx.clock.now()).status
        } else {
            pod.status.clone().unwrap_or_default()
        };
        super::logs::lines(pod, &status, container, previous).map(Some)
    }
}

/// The kubelets answer `pods/log` for the in-process API server, as kube-apiserver asks the
/// pod's kubelet for `containerLogs` (`ApiServer::set_pod_logs`).
#[cfg(feature = "apiserver")]
impl konverge_apiserver::PodLogs for Kubelets {
    fn logs(
        &self,
        pod: &serde_json::Value,
        container: &str,
        previous: bool,
    ) -> Result<Option<Vec<konverge_apiserver::LogLine>>, String> {
        let pod: Pod = serde_json::from_value(pod.clone())
            .map_err(|error| format!("the pod cannot be read: {error}"))?;
        let lines = Kubelets::logs(self, &pod, container, previous)?;
        Ok(lines.map(|lines| {
            lines
                .into_iter()
                .map(|(time, text)| konverge_apiserver::LogLine { time, text })
                .collect()
        }))
    }
}
