//! The pod status the kubelet would report (its `generateAPIPodStatus` and `getPhase`): a
//! pure function of the pod, the lifecycle its kubelet admitted it with, and the clock.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::containers::{Next, Sim};
use super::events::Planned;
use super::rules::Admitted;
use super::{SimNode, Timing, after, whole};

/// Sets (or adds) a kubelet condition, keeping its transition time when its status holds.
pub(super) fn set_condition(
    conditions: &mut Vec<PodCondition>,
    pod: &Pod,
    type_: &str,
    true_: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) {
    let status = if true_ { "True" } else { "False" };
    let old = crate::pods::condition(pod, type_);
    let transition = match old {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(Time(whole(now))),
    };
    let condition = PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: transition,
        last_probe_time: None,
        ..PodCondition::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}

/// What the kubelet would report for a pod now: its status, when that will next change
/// (or an event come due), and the events of its timeline whose moment has come.
#[derive(Debug)]
pub(super) struct Computed {
    pub(super) uid: String,
    pub(super) status: PodStatus,
    pub(super) next: Option<Timestamp>,
    pub(super) events: Vec<Planned>,
}

/// The status the kubelet would report now for `pod`, admitted as `admitted`; `pod_ip`
/// hands out the pod's IP once its sandbox is ready.
pub(super) fn desired_status(
    pod: &Pod,
    node: &SimNode,
    admitted: &Admitted,
    timing: &Timing,
    now: Timestamp,
    pod_ip: impl FnOnce() -> String,
) -> Computed {
    let current = pod.status.clone().unwrap_or_default();
    let t0 = current
        .start_time
        .as_ref()
        .map_or_else(|| whole(now), |t| t.0);
    let lifecycle = &admitted.lifecycle;
    let spec = pod.spec.clone().unwrap_or_default();
    let sandbox_at = after(t0, lifecycle.start);
    // The first status is always Pending with the sandbox on its way, as the kubelet's
    // first sync writes it; the write itself wakes the next reconcile.
    let sandbox = current.start_time.is_some() && now >= sandbox_at;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut sim = Sim {
        pod,
        uid: &uid,
        admitted,
        pull: timing.pull,
        now,
        next: Next::new(now),
        events: Vec::new(),
    };
    sim.next.at(sandbox_at);

    // Init containers, one after another; the first may fail to pull.
    let inits = spec.init_containers.clone().unwrap_or_default();
    let mut init_statuses = Vec::new();
    let mut t = sandbox_at;
    let mut pending_init: Vec<String> = Vec::new();
    for (i, c) in inits.iter().enumerate() {
        let blocked = !pending_init.is_empty();
        let status = if !sandbox || blocked {
            sim.waiting(c, "PodInitializing", None, 0)
        } else if lifecycle.pull_fails && i == 0 {
            sim.pull_failure(c, true, sandbox_at)
        } else {
            let (status, ends) = sim.init(c, t);
            t = ends;
            status
        };
        if status.state.as_ref().is_none_or(|s| s.terminated.is_none()) {
            pending_init.push(c.name.clone());
        }
        init_statuses.push(status);
    }
    let initialized = sandbox && pending_init.is_empty();

    // App containers, started one after another as their images are pulled; the first may
    // fail to pull.
    let restart = spec.restart_policy.as_deref().unwrap_or("Always");
    let owned_by_job = pod
        .owner_references()
        .iter()
        .any(|o| o.kind == "Job" && o.controller == Some(true));
    let completes = owned_by_job || restart != "Always";
    let mut app_statuses = Vec::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let status = if !initialized {
            let reason = if inits.is_empty() {
                "ContainerCreating"
            } else {
                "PodInitializing"
            };
            sim.waiting(c, reason, None, 0)
        } else if lifecycle.pull_fails && inits.is_empty() && i == 0 {
            sim.pull_failure(c, false, sandbox_at)
        } else {
            let begin = t;
            t = sim.instance_start(c, 0, begin);
            sim.lifecycle(c, begin, completes, restart)
        };
        app_statuses.push(status);
    }
    let Sim { next, events, .. } = sim;

    // The phase, as the kubelet's getPhase.
    let never_ran = |s: &ContainerStatus| {
        s.state.as_ref().is_some_and(|st| st.waiting.is_some())
            && s.last_state.as_ref().is_none_or(|l| l.terminated.is_none())
    };
    let exit = |s: &ContainerStatus| {
        s.state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .map(|t| t.exit_code)
    };
    let phase = if !initialized || app_statuses.iter().any(never_ran) {
        "Pending"
    } else if app_statuses.iter().all(|s| exit(s).is_some()) {
        if app_statuses.iter().all(|s| exit(s) == Some(0)) {
            "Succeeded"
        } else {
            "Failed"
        }
    } else {
        "Running"
    };
    let terminal = matches!(phase, "Succeeded" | "Failed");

    let mut status = current.clone();
    status.phase = Some(phase.into());
    status.start_time = Some(Time(t0));
    status.host_ip = Some(node.internal_ip.clone());
    status.host_ips = Some(vec![HostIP {
        ip: node.internal_ip.clone(),
    }]);
    if sandbox && status.pod_ip.is_none() {
        let ip = if spec.host_network == Some(true) {
            node.internal_ip.clone()
        } else {
            pod_ip()
        };
        status.pod_ip = Some(ip.clone());
        status.pod_ips = Some(vec![PodIP { ip }]);
    }
    status.init_container_statuses = (!init_statuses.is_empty()).then_some(init_statuses);
    status.container_statuses = Some(app_statuses.clone());

    let mut conditions = current.conditions.clone().unwrap_or_default();
    let unready: Vec<&str> = app_statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let completed = terminal.then_some("PodCompleted");
    set_condition(
        &mut conditions,
        pod,
        "PodReadyToStartContainers",
        sandbox && !terminal,
        None,
        None,
        now,
    );
    if pending_init.is_empty() {
        set_condition(
            &mut conditions,
            pod,
            "Initialized",
            true,
            completed,
            None,
            now,
        );
    } else {
        let message = format!(
            "containers with incomplete status: [{}]",
            pending_init.join(" ")
        );
        set_condition(
            &mut conditions,
            pod,
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(message),
            now,
        );
    }
    for type_ in ["Ready", "ContainersReady"] {
        if terminal {
            set_condition(&mut conditions, pod, type_, false, completed, None, now);
        } else if unready.is_empty() {
            let gates = (type_ == "Ready")
                .then(|| unready_gates(&spec, &current))
                .flatten();
            match gates {
                Some(message) => set_condition(
                    &mut conditions,
                    pod,
                    type_,
                    false,
                    Some("ReadinessGatesNotReady"),
                    Some(message),
                    now,
                ),
                None => set_condition(&mut conditions, pod, type_, true, None, None, now),
            }
        } else {
            let message = format!("containers with unready status: [{}]", unready.join(" "));
            set_condition(
                &mut conditions,
                pod,
                type_,
                false,
                Some("ContainersNotReady"),
                Some(message),
                now,
            );
        }
    }
    if !conditions.iter().any(|c| c.type_ == "PodScheduled") {
        set_condition(&mut conditions, pod, "PodScheduled", true, None, None, now);
    }
    let order = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    conditions.sort_by_key(|c| {
        order
            .iter()
            .position(|o| *o == c.type_)
            .unwrap_or(order.len())
    });
    status.conditions = Some(conditions);
    Computed {
        uid,
        status,
        next: next.at,
        events,
    }
}

/// Why the pod's readiness gates keep it unready (the kubelet's messages), if they do.
pub(super) fn unready_gates(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    status: &PodStatus,
) -> Option<String> {
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let messages: Vec<String> = spec
        .readiness_gates
        .iter()
        .flatten()
        .filter_map(|gate| {
            let gate = &gate.condition_type;
            match conditions.iter().find(|c| &c.type_ == gate) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {gate:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {gate:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    (!messages.is_empty()).then(|| messages.join(", "))
}
