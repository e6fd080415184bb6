//! Startup and readiness probes in simulated time (the kubelet's `pkg/kubelet/prober`).
//!
//! A probe worker starts with its container and probes every `periodSeconds` (10 by
//! default), skipping the probes before `initialDelaySeconds`. Here every probe succeeds
//! (unless the pod is never ready), so:
//! - with a startup probe the container is `started` at its first probe, and until then
//!   its readiness probe does not run;
//! - with a readiness probe it is ready after `successThreshold` successes in a row, the
//!   first at the first readiness probe once started; without one, as soon as it is started;
//! - a pod that is never ready fails its readiness probe from the first probe on (the
//!   kubelet's `Unhealthy` event), with the output its kind of probe gives on a failure.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::after;

/// When a container instance running since a moment is started, ready, and failing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Probed {
    /// When `started` turns true.
    pub(super) started: Timestamp,
    /// When `ready` turns true, if ever.
    pub(super) ready: Option<Timestamp>,
    /// When the readiness probe first fails and what it says, for a never-ready container.
    pub(super) failing: Option<(Timestamp, String)>,
}

/// The probe timeline of `c` running since `since`.
pub(super) fn timeline(c: &Container, since: Timestamp, never_ready: bool, ip: &str) -> Probed {
    let started = match &c.startup_probe {
        Some(probe) => after(since, first_probe(probe, Duration::ZERO)),
        None => since,
    };
    let offset = Duration::try_from(started.duration_since(since)).unwrap_or(Duration::ZERO);
    let (ready, failing) = match (&c.readiness_probe, never_ready) {
        (None, false) => (Some(started), None),
        (None, true) => (None, None),
        (Some(probe), false) => {
            let first = first_probe(probe, offset);
            let more = u64::try_from(probe.success_threshold.unwrap_or(1).max(1) - 1)
                .unwrap_or(0)
                .saturating_mul(period(probe).as_secs());
            let at = after(since, first + Duration::from_secs(more));
            (Some(at), None)
        }
        (Some(probe), true) => {
            let at = after(since, first_probe(probe, offset));
            (None, Some((at, failure_output(c, probe, ip))))
        }
    };
    Probed {
        started,
        ready,
        failing,
    }
}

fn period(probe: &Probe) -> Duration {
    let secs = probe.period_seconds.filter(|p| *p > 0).unwrap_or(10);
    Duration::from_secs(u64::try_from(secs).unwrap_or(10))
}

/// The first probe the worker runs, from the container's start: the first tick of its
/// period at or after the initial delay and `not_before`.
fn first_probe(probe: &Probe, not_before: Duration) -> Duration {
    let delay =
        Duration::from_secs(u64::try_from(probe.initial_delay_seconds.unwrap_or(0)).unwrap_or(0));
    let wait = delay.max(not_before).as_secs();
    let period = period(probe).as_secs().max(1);
    Duration::from_secs(wait.div_ceil(period) * period)
}

/// What a failing probe of this kind reports (the prober's output).
fn failure_output(c: &Container, probe: &Probe, ip: &str) -> String {
    if probe.http_get.is_some() {
        "HTTP probe failed with statuscode: 503".into()
    } else if let Some(tcp) = &probe.tcp_socket {
        format!(
            "dial tcp {ip}{}: connect: connection refused",
            port_of(c, &tcp.port)
        )
    } else if probe.grpc.is_some() {
        "service unhealthy (responded with \"NOT_SERVING\")".into()
    } else {
        // An exec probe's output is its command's, which says nothing here.
        String::new()
    }
}

/// `:port`, a named port resolved against the container's ports.
fn port_of(c: &Container, port: &IntOrString) -> String {
    let number = match port {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port),
    };
    number.map_or_else(|| format!(":{port:?}"), |n| format!(":{n}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(value: serde_json::Value) -> Container {
        serde_json::from_value(value).expect("a container")
    }

    #[test]
    fn readiness_waits_for_the_delay_the_period_and_the_threshold() {
        let t0 = Timestamp::from_second(1_000).expect("a time");
        let c = container(json!({"name": "web", "readinessProbe": {
            "initialDelaySeconds": 5, "periodSeconds": 4, "successThreshold": 3,
            "httpGet": {"port": 80}}}));
        let probed = timeline(&c, t0, false, "10.244.1.2");
        assert_eq!(probed.started, t0);
        // First probe at 8 s (the first tick of 4 s past 5 s), then two more.
        assert_eq!(probed.ready, Some(after(t0, Duration::from_secs(16))));
    }

    #[test]
    fn a_startup_probe_holds_started_and_readiness() {
        let t0 = Timestamp::from_second(1_000).expect("a time");
        let c = container(json!({"name": "web",
            "startupProbe": {"initialDelaySeconds": 15, "exec": {"command": ["true"]}},
            "readinessProbe": {"periodSeconds": 5, "exec": {"command": ["true"]}}}));
        let probed = timeline(&c, t0, false, "10.244.1.2");
        assert_eq!(probed.started, after(t0, Duration::from_secs(20)));
        assert_eq!(probed.ready, Some(after(t0, Duration::from_secs(20))));
    }

    #[test]
    fn a_never_ready_container_fails_its_probe_with_the_probers_words() {
        let t0 = Timestamp::from_second(1_000).expect("a time");
        let c = container(
            json!({"name": "web", "ports": [{"name": "http", "containerPort": 8080}],
            "readinessProbe": {"tcpSocket": {"port": "http"}}}),
        );
        let probed = timeline(&c, t0, true, "10.244.1.2");
        assert_eq!(probed.ready, None);
        assert_eq!(
            probed.failing,
            Some((
                t0,
                "dial tcp 10.244.1.2:8080: connect: connection refused".to_string()
            ))
        );
    }
}
