//! What the simulated kubelets' controllers and every [`Kubelets`](super::Kubelets) handle
//! share: which kubelets are stopped, the lifecycle rules, and what each kubelet remembers
//! of its pods (the lifecycle it admitted them with, the crashes it was told of, the events
//! it recorded). That memory is what keeps a pod's status a pure function of the pod, its
//! admitted lifecycle and the clock: nothing polls.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Pod;

use super::rules::{Admitted, Behaviour, Entry};

/// What the kubelets and their handles share.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Nodes whose kubelet is stopped.
    pub(super) stopped: BTreeSet<String>,
    /// Nodes whose kubelet started again and whose pods were not looked at since.
    pub(super) resync: BTreeSet<String>,
    pub(super) rules: Vec<Entry>,
    pub(super) next_rule: u64,
    /// What each kubelet remembers of the pods it admitted, by pod uid.
    pub(super) pods: HashMap<String, Admitted>,
    /// How many pods remembered make it time to forget the gone ones (twice as many as
    /// were left the last time: amortized, a forgetting costs nothing per admission).
    pub(super) forget_at: usize,
}

impl State {
    pub(super) fn is_running(&self, node: &str) -> bool {
        !self.stopped.contains(node)
    }

    /// The behaviours of the rules `pod` matches, in the order they were added; each
    /// counts the pod against its limit.
    pub(super) fn apply_rules(&mut self, pod: &Pod) -> Vec<Behaviour> {
        let mut behaviours = Vec::new();
        for entry in &mut self.rules {
            let spent = entry.rule.limit.is_some_and(|l| entry.applied >= l);
            if !spent && entry.rule.matches(pod) {
                entry.applied += 1;
                behaviours.push(entry.rule.behaviour.clone());
            }
        }
        behaviours
    }

    /// Whether `node`'s pods are due a look since its kubelet started again (once).
    pub(super) fn take_resync(&mut self, node: &str) -> bool {
        self.resync.remove(node)
    }

    /// Whether enough pods were admitted since the last forgetting to forget again.
    pub(super) fn due_to_forget(&self) -> bool {
        self.pods.len() >= self.forget_at.max(64)
    }

    /// Forgets the pods whose uid `keep` does not hold.
    pub(super) fn forget_pods_but(&mut self, keep: &HashSet<&str>) {
        self.pods.retain(|uid, _| keep.contains(uid.as_str()));
        self.forget_at = 2 * self.pods.len();
    }
}

/// The state shared by the kubelets' controllers and every [`Kubelets`](super::Kubelets) handle.
#[derive(Debug, Default)]
pub(super) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
