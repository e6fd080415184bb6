//! A pod's simulated life, fixed when its kubelet admits it: what its `konverge.dev/...`
//! annotations and the matching [`Rule`]s ask for, and what happened to it since (crashes,
//! events recorded).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::{EXIT_CODE, IMAGE_PULL, READY, RUN_SECONDS, START_SECONDS, Timing, node_name};

/// Identifies a rule added with [`Kubelets::add_rule`](super::Kubelets::add_rule).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId(pub(super) u64);

/// What the pods a [`Rule`] matches do when their kubelet admits them: what the
/// `konverge.dev/...` annotations ask (an annotation on the pod wins over a rule).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Behaviour {
    /// Run as the pod's spec and annotations say.
    #[default]
    Run,
    /// The app containers exit with this code after the run time (`konverge.dev/exit-code`).
    Exit(i32),
    /// The first container's image is never pulled (`konverge.dev/image-pull: fail`).
    ImagePullFails,
    /// The sandbox takes this many seconds (`konverge.dev/start-seconds`).
    StartSeconds(u64),
    /// The containers run but are never ready (`konverge.dev/ready: "false"`).
    NeverReady,
}

/// A lifecycle rule: how the pods it matches behave, decided when their kubelet admits them
/// (first sees them bound to its node). Every field set must match.
#[derive(Clone, Debug, Default)]
pub struct Rule {
    /// The pod's namespace.
    pub namespace: Option<String>,
    /// Labels the pod must all have, with these values.
    pub labels: BTreeMap<String, String>,
    /// A substring of some container's (or init container's) image.
    pub image: Option<String>,
    /// The pod's node.
    pub node: Option<String>,
    /// What the matched pods do.
    pub behaviour: Behaviour,
    /// The rule applies to at most this many pods, then matches no more.
    pub limit: Option<usize>,
}

impl Rule {
    pub(super) fn matches(&self, pod: &Pod) -> bool {
        let spec = pod.spec.as_ref();
        let images = spec
            .into_iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .filter_map(|c| c.image.as_deref());
        self.namespace
            .as_ref()
            .is_none_or(|ns| pod.namespace().as_ref() == Some(ns))
            && self
                .labels
                .iter()
                .all(|(k, v)| pod.labels().get(k) == Some(v))
            && self
                .node
                .as_deref()
                .is_none_or(|n| node_name(pod) == Some(n))
            && self
                .image
                .as_deref()
                .is_none_or(|wanted| images.into_iter().any(|i| i.contains(wanted)))
    }
}

/// A rule and how many pods it has been applied to.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) id: RuleId,
    pub(super) rule: Rule,
    pub(super) applied: usize,
}

/// How a pod's containers behave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Lifecycle {
    /// How long the sandbox takes.
    pub(super) start: Duration,
    /// How long an init, completing or exiting container runs.
    pub(super) run: Duration,
    /// The app containers' exit code after `run`, if they exit.
    pub(super) exit_code: Option<i32>,
    /// The first container's image is never pulled.
    pub(super) pull_fails: bool,
    /// The containers never become ready.
    pub(super) never_ready: bool,
}

impl Lifecycle {
    /// The lifecycle `behaviours` (the matching rules', in order) give, overridden field by
    /// field by the pod's annotations.
    pub(super) fn of(pod: &Pod, timing: &Timing, behaviours: &[Behaviour]) -> Lifecycle {
        let mut lifecycle = Lifecycle {
            start: Duration::ZERO,
            run: timing.run,
            exit_code: None,
            pull_fails: false,
            never_ready: false,
        };
        for behaviour in behaviours {
            match behaviour {
                Behaviour::Run => {}
                Behaviour::Exit(code) => lifecycle.exit_code = Some(*code),
                Behaviour::ImagePullFails => lifecycle.pull_fails = true,
                Behaviour::StartSeconds(s) => lifecycle.start = Duration::from_secs(*s),
                Behaviour::NeverReady => lifecycle.never_ready = true,
            }
        }
        let annotation = |key: &str| pod.annotations().get(key).map(|v| v.trim().to_string());
        let seconds = |key: &str| {
            annotation(key)
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_secs)
        };
        if let Some(start) = seconds(START_SECONDS) {
            lifecycle.start = start;
        }
        if let Some(run) = seconds(RUN_SECONDS) {
            lifecycle.run = run;
        }
        if let Some(code) = annotation(EXIT_CODE).and_then(|v| v.parse().ok()) {
            lifecycle.exit_code = Some(code);
        }
        if let Some(pull) = annotation(IMAGE_PULL) {
            lifecycle.pull_fails = pull == "fail";
        }
        if let Some(ready) = annotation(READY) {
            lifecycle.never_ready = ready == "false";
        }
        lifecycle
    }
}

/// A crash asked for with [`Kubelets::crash`](super::Kubelets::crash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Crash {
    /// When (whole seconds, as statuses carry times).
    pub(super) at: Timestamp,
    pub(super) exit_code: i32,
}

/// What a kubelet remembers of a pod it admitted.
#[derive(Clone, Debug)]
pub(super) struct Admitted {
    pub(super) lifecycle: Lifecycle,
    /// Crashes, by container name, in time order.
    pub(super) crashes: BTreeMap<String, Vec<Crash>>,
    /// The events recorded for the pod, by what makes each one a transition.
    pub(super) recorded: BTreeSet<String>,
    /// Admitted already running (an earlier kubelet ran it): the events come due at the
    /// first look are its past, marked recorded without recording them.
    pub(super) replayed: bool,
    /// When the kubelet first saw the pod deleted.
    pub(super) deleting_since: Option<Timestamp>,
    /// The final delete (grace 0) was sent.
    pub(super) deleted: bool,
}

impl Admitted {
    pub(super) fn new(lifecycle: Lifecycle) -> Admitted {
        Admitted {
            lifecycle,
            crashes: BTreeMap::new(),
            recorded: BTreeSet::new(),
            replayed: false,
            deleting_since: None,
            deleted: false,
        }
    }
}
