//! Container logs, as a kubelet serves `pods/log` ([`Kubelets::logs`](super::Kubelets::logs)).
//!
//! Which container instance a request reads, and the refusals when there is none, follow
//! the kubelet's `validateContainerLogStatus` word for word: with `previous`, the last
//! terminated instance (`previous terminated container "web" in pod "web-1" not found`
//! without one); otherwise the running instance, else the one that ended; a container that
//! never started is refused (`container "web" in pod "web-1" is waiting to start:
//! ContainerCreating`, `...: image can't be pulled`, `...: trying and failing to pull
//! image`).
//!
//! What an instance "printed":
//! - the pod's annotation [`LOG`] (`konverge.dev/log`), one line per `\n`-separated line
//!   (a final newline ends the last line, it does not add an empty one), every line stamped
//!   with the instance's start; the same text for every container of the pod;
//! - by default, a line saying the simulated container started, from which image, then its
//!   `command` and `args` if the spec gives them, stamped with its start; and for an
//!   instance that ended, a line with its exit code and reason, stamped with its end.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use kube::ResourceExt;

/// Annotation: the text each container of the pod logs.
pub const LOG: &str = "konverge.dev/log";

/// One run of a container, as its status shows it.
enum Instance {
    Running {
        started: Option<Timestamp>,
    },
    Ended {
        started: Option<Timestamp>,
        finished: Option<Timestamp>,
        code: i32,
        reason: Option<String>,
    },
}

/// The log lines of `container` in `pod` whose status is `status`, or the kubelet's refusal.
pub(super) fn lines(
    pod: &Pod,
    status: &PodStatus,
    container: &str,
    previous: bool,
) -> Result<Vec<(Timestamp, String)>, String> {
    let pod_name = pod.name_any();
    let found = [
        &status.container_statuses,
        &status.init_container_statuses,
        &status.ephemeral_container_statuses,
    ]
    .into_iter()
    .flat_map(|list| list.iter().flatten())
    .find(|s| s.name == container);
    let Some(found) = found else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let instance = instance(found, previous).map_err(|why| match why {
        Refusal::NoPrevious => {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        }
        Refusal::Terminated => {
            format!("container {container:?} in pod {pod_name:?} is terminated")
        }
        Refusal::Waiting(reason) => {
            let why = match reason.as_str() {
                "ErrImagePull" => "image can't be pulled".to_string(),
                "ImagePullBackOff" => "trying and failing to pull image".to_string(),
                _ => reason,
            };
            format!("container {container:?} in pod {pod_name:?} is waiting to start: {why}")
        }
        Refusal::NoState => {
            format!("container {container:?} in pod {pod_name:?} is waiting to start - no logs yet")
        }
    })?;
    let spec = pod.spec.as_ref().and_then(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .find(|c| c.name == container)
    });
    Ok(printed(pod, spec, container, &instance))
}

/// Why there is no instance to read.
enum Refusal {
    NoPrevious,
    Terminated,
    Waiting(String),
    NoState,
}

/// The instance a request reads, as `validateContainerLogStatus` picks it.
fn instance(status: &ContainerStatus, previous: bool) -> Result<Instance, Refusal> {
    let last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .filter(|t| t.container_id.as_deref().is_some_and(|id| !id.is_empty()));
    let state = status.state.clone().unwrap_or_default();
    let ended = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| Instance::Ended {
        started: t.started_at.as_ref().map(|t| t.0),
        finished: t.finished_at.as_ref().map(|t| t.0),
        code: t.exit_code,
        reason: t.reason.clone(),
    };
    if previous {
        return last.map(ended).ok_or(Refusal::NoPrevious);
    }
    if let Some(running) = &state.running {
        return Ok(Instance::Running {
            started: running.started_at.as_ref().map(|t| t.0),
        });
    }
    if let Some(terminated) = &state.terminated {
        let has_id = terminated
            .container_id
            .as_deref()
            .is_some_and(|id| !id.is_empty());
        return match (has_id, last) {
            (true, _) => Ok(ended(terminated)),
            (false, Some(last)) => Ok(ended(last)),
            (false, None) => Err(Refusal::Terminated),
        };
    }
    let had_last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some();
    if had_last {
        return last.map(ended).ok_or(Refusal::Terminated);
    }
    match state.waiting {
        Some(waiting) => Err(Refusal::Waiting(waiting.reason.unwrap_or_default())),
        None => Err(Refusal::NoState),
    }
}

/// What the instance printed (see the module docs).
fn printed(
    pod: &Pod,
    spec: Option<&Container>,
    name: &str,
    instance: &Instance,
) -> Vec<(Timestamp, String)> {
    let (started, end) = match instance {
        Instance::Running { started } => (*started, None),
        Instance::Ended {
            started,
            finished,
            code,
            reason,
        } => (*started, Some((*finished, *code, reason.clone()))),
    };
    let started = started.unwrap_or(Timestamp::UNIX_EPOCH);
    if let Some(text) = pod.annotations().get(LOG) {
        return text.lines().map(|l| (started, l.to_string())).collect();
    }
    let image = spec.and_then(|c| c.image.clone()).unwrap_or_default();
    let mut lines = vec![(
        started,
        format!("simulated container {name:?} started from image {image:?}"),
    )];
    for (what, words) in [
        ("command", spec.and_then(|c| c.command.as_ref())),
        ("args", spec.and_then(|c| c.args.as_ref())),
    ] {
        if let Some(words) = words {
            lines.push((started, format!("{what}: {words:?}")));
        }
    }
    if let Some((finished, code, reason)) = end {
        let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
        lines.push((
            finished.unwrap_or(started),
            format!("simulated container {name:?} exited with code {code}{reason}"),
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value, statuses: serde_json::Value) -> (Pod, PodStatus) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "annotations": annotations},
            "spec": {"containers": [{"name": "web", "image": "nginx", "args": ["-g", "daemon off;"]}]},
            "status": {"containerStatuses": statuses},
        }))
        .expect("a pod");
        let status = pod.status.clone().expect("a status");
        (pod, status)
    }

    fn status(state: serde_json::Value, last: serde_json::Value) -> serde_json::Value {
        json!([{"name": "web", "image": "nginx", "imageID": "", "ready": false,
            "restartCount": 1, "state": state, "lastState": last}])
    }

    #[test]
    fn waiting_containers_are_refused_in_the_kubelets_words() {
        for (reason, words) in [
            ("ContainerCreating", "ContainerCreating"),
            ("ErrImagePull", "image can't be pulled"),
            ("ImagePullBackOff", "trying and failing to pull image"),
        ] {
            let (pod, st) = pod(
                json!({}),
                status(json!({"waiting": {"reason": reason}}), json!({})),
            );
            assert_eq!(
                lines(&pod, &st, "web", false),
                Err(format!(
                    "container \"web\" in pod \"web-1\" is waiting to start: {words}"
                ))
            );
            assert_eq!(
                lines(&pod, &st, "web", true),
                Err("previous terminated container \"web\" in pod \"web-1\" not found".into())
            );
        }
        let (pod, st) = pod(json!({}), status(json!({}), json!({})));
        assert_eq!(
            lines(&pod, &st, "sidecar", false),
            Err("container \"sidecar\" in pod \"web-1\" is not available".into())
        );
    }

    #[test]
    fn a_crash_looping_container_shows_its_last_run() {
        let last = json!({"terminated": {"exitCode": 3, "reason": "Error", "containerID": "containerd://a",
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:05Z"}});
        let (pod, st) = pod(
            json!({}),
            status(json!({"waiting": {"reason": "CrashLoopBackOff"}}), last),
        );
        let got = lines(&pod, &st, "web", false).expect("lines");
        let text: Vec<&str> = got.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            text,
            [
                "simulated container \"web\" started from image \"nginx\"",
                "args: [\"-g\", \"daemon off;\"]",
                "simulated container \"web\" exited with code 3 (Error)",
            ]
        );
        assert_eq!(got[0].0.to_string(), "2026-01-01T00:00:00Z");
        assert_eq!(got[2].0.to_string(), "2026-01-01T00:00:05Z");
        assert_eq!(lines(&pod, &st, "web", true), Ok(got));
    }

    #[test]
    fn the_log_annotation_is_what_a_container_prints() {
        let (pod, st) = pod(
            json!({LOG: "listening on :80\nready\n"}),
            status(
                json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
                json!({}),
            ),
        );
        let got = lines(&pod, &st, "web", false).expect("lines");
        let text: Vec<&str> = got.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(text, ["listening on :80", "ready"]);
    }
}
