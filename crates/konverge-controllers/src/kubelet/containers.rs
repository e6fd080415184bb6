//! One container's simulated timeline: its image pulled, created and started, probed,
//! exited or crashed, restarted with the kubelet's back-off — the status it has at a moment,
//! the events it went through, and when it will next change.
//!
//! Every instant here is a whole second (the start time plus whole-second durations, or a
//! crash's recorded second), as the API server serializes times: a status computed twice
//! compares equal to the one read back.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::after;
use super::events::{Planned, Type, field_path, go_duration};
use super::image::{fake_digest, image_size, normalize_image, pulls_always, with_default_tag};
use super::probes;
use super::rules::{Admitted, Crash};

/// The earliest moment after `now` at which something will change.
#[derive(Debug)]
pub(super) struct Next {
    now: Timestamp,
    pub(super) at: Option<Timestamp>,
}

impl Next {
    pub(super) fn new(now: Timestamp) -> Next {
        Next { now, at: None }
    }

    pub(super) fn at(&mut self, t: Timestamp) {
        if t > self.now && self.at.is_none_or(|a| t < a) {
            self.at = Some(t);
        }
    }
}

/// A container's state ended at `finished` with `code`.
pub(super) fn terminated(
    code: i32,
    started: Option<Timestamp>,
    finished: Timestamp,
    id: Option<String>,
) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: code,
        reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
        started_at: started.map(Time),
        finished_at: Some(Time(finished)),
        container_id: id,
        ..ContainerStateTerminated::default()
    }
}

/// The timelines of one pod's containers, as of `now`.
pub(super) struct Sim<'a> {
    pub(super) pod: &'a Pod,
    pub(super) uid: &'a str,
    pub(super) admitted: &'a Admitted,
    /// How long pulling an image takes.
    pub(super) pull: Duration,
    pub(super) now: Timestamp,
    pub(super) next: Next,
    /// The events whose moment has come.
    pub(super) events: Vec<Planned>,
}

impl Sim<'_> {
    /// Lists an event if its moment has come, else wakes the pod then.
    fn event(
        &mut self,
        c: &Container,
        init: bool,
        key: String,
        at: Timestamp,
        (type_, reason): (Type, &'static str),
        message: String,
    ) {
        if at > self.now {
            self.next.at(at);
            return;
        }
        self.events.push(Planned {
            key: format!("{}/{key}", c.name),
            at,
            type_,
            reason,
            message,
            field_path: Some(field_path(init, &c.name)),
        });
    }

    /// The events of instance `k` being pulled from `begin`, created and started at `since`.
    fn started_events(&mut self, c: &Container, init: bool, k: i32, begin: Timestamp) {
        let image = c.image.clone().unwrap_or_default();
        let since = self.instance_start(c, k, begin);
        if pulls_always(c) {
            self.event(
                c,
                init,
                format!("{k}/Pulling"),
                begin,
                (Type::Normal, "Pulling"),
                format!("Pulling image {image:?}"),
            );
            let took = go_duration(since.duration_since(begin).as_secs().unsigned_abs());
            let message = format!(
                "Successfully pulled image {image:?} in {took} ({took} including waiting). \
                 Image size: {} bytes.",
                image_size(&normalize_image(&image))
            );
            self.event(
                c,
                init,
                format!("{k}/Pulled"),
                since,
                (Type::Normal, "Pulled"),
                message,
            );
        } else {
            self.event(
                c,
                init,
                format!("{k}/Pulled"),
                since,
                (Type::Normal, "Pulled"),
                format!("Container image {image:?} already present on machine"),
            );
        }
        self.event(
            c,
            init,
            format!("{k}/Created"),
            since,
            (Type::Normal, "Created"),
            format!("Created container: {}", c.name),
        );
        self.event(
            c,
            init,
            format!("{k}/Started"),
            since,
            (Type::Normal, "Started"),
            format!("Started container {}", c.name),
        );
    }

    /// When instance `k`, whose image pull begins at `begin`, starts: the first pull of an
    /// image pulled every time takes the pull time; later ones find it present.
    pub(super) fn instance_start(&self, c: &Container, k: i32, begin: Timestamp) -> Timestamp {
        if k == 0 && pulls_always(c) {
            after(begin, self.pull)
        } else {
            begin
        }
    }

    pub(super) fn base(&self, c: &Container, restarts: i32) -> ContainerStatus {
        let image = normalize_image(c.image.as_deref().unwrap_or_default());
        let repository = image
            .rsplit_once(':')
            .filter(|(_, tag)| !tag.contains('/'))
            .map_or(image.as_str(), |(r, _)| r);
        let repository = repository.split('@').next().unwrap_or(repository);
        ContainerStatus {
            name: c.name.clone(),
            image_id: format!("{repository}@sha256:{}", fake_digest(&image)),
            image,
            container_id: Some(format!(
                "containerd://{}",
                fake_digest(&format!("{}/{}/{restarts}", self.uid, c.name))
            )),
            restart_count: restarts,
            started: Some(false),
            ready: false,
            ..ContainerStatus::default()
        }
    }

    pub(super) fn waiting(
        &self,
        c: &Container,
        reason: &str,
        message: Option<String>,
        restarts: i32,
    ) -> ContainerStatus {
        let mut s = self.base(c, restarts);
        // Not created yet: the kubelet reports the image as the spec names it.
        s.container_id = None;
        s.image_id = String::new();
        s.image = c.image.clone().unwrap_or_default();
        s.state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message,
            }),
            ..ContainerState::default()
        });
        s
    }

    /// A container whose image is never pulled: `ErrImagePull` for a second from `since`,
    /// then `ImagePullBackOff` for good.
    pub(super) fn pull_failure(
        &mut self,
        c: &Container,
        init: bool,
        since: Timestamp,
    ) -> ContainerStatus {
        let image = c.image.clone().unwrap_or_default();
        let normalized = normalize_image(&image);
        let error = format!(
            "rpc error: code = NotFound desc = failed to pull and unpack image \
             {normalized:?}: failed to resolve reference {normalized:?}: {normalized}: not found"
        );
        let backoff_at = after(since, Duration::from_secs(1));
        let failed = (Type::Warning, "Failed");
        self.event(
            c,
            init,
            "0/Pulling".into(),
            since,
            (Type::Normal, "Pulling"),
            format!("Pulling image {image:?}"),
        );
        self.event(
            c,
            init,
            "0/PullFailed".into(),
            since,
            failed,
            format!("Failed to pull image {image:?}: {error}"),
        );
        self.event(
            c,
            init,
            "0/ErrImagePull".into(),
            since,
            failed,
            "Error: ErrImagePull".into(),
        );
        // The kubelet names the image with its default tag applied.
        let backoff = format!("Back-off pulling image {:?}", with_default_tag(&image));
        self.event(
            c,
            init,
            "0/PullBackOff".into(),
            backoff_at,
            (Type::Normal, "BackOff"),
            backoff.clone(),
        );
        self.event(
            c,
            init,
            "0/ImagePullBackOff".into(),
            backoff_at,
            failed,
            "Error: ImagePullBackOff".into(),
        );
        if self.now < backoff_at {
            self.next.at(backoff_at);
            self.waiting(c, "ErrImagePull", Some(error), 0)
        } else {
            self.waiting(c, "ImagePullBackOff", Some(backoff), 0)
        }
    }

    /// An init container pulled from `begin`, run for the run time, terminated `Completed`;
    /// and when it ends.
    pub(super) fn init(&mut self, c: &Container, begin: Timestamp) -> (ContainerStatus, Timestamp) {
        self.started_events(c, true, 0, begin);
        let since = self.instance_start(c, 0, begin);
        let ends = after(since, self.admitted.lifecycle.run);
        if self.now < since {
            self.next.at(since);
            return (self.waiting(c, "PodInitializing", None, 0), ends);
        }
        if self.now < ends {
            self.next.at(ends);
            let mut s = self.base(c, 0);
            s.started = Some(true);
            s.state = Some(running(since));
            return (s, ends);
        }
        let mut s = self.base(c, 0);
        s.ready = true;
        s.state = Some(ContainerState {
            terminated: Some(terminated(0, Some(since), ends, s.container_id.clone())),
            ..ContainerState::default()
        });
        (s, ends)
    }

    /// Instance `k` of an app container, running since `since`: started and ready as its
    /// probes say.
    fn running(
        &mut self,
        c: &Container,
        since: Timestamp,
        k: i32,
        last: Option<ContainerStateTerminated>,
    ) -> ContainerStatus {
        let mut s = self.base(c, k);
        let never_ready = self.admitted.lifecycle.never_ready;
        let ip = self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .unwrap_or_default();
        let probed = probes::timeline(c, since, never_ready, ip);
        self.next.at(probed.started);
        s.started = Some(self.now >= probed.started);
        if let Some(ready) = probed.ready {
            self.next.at(ready);
            s.ready = self.now >= ready;
        }
        if let Some((at, output)) = probed.failing {
            self.event(
                c,
                false,
                format!("{k}/Unhealthy"),
                at,
                (Type::Warning, "Unhealthy"),
                format!("Readiness probe failed: {output}"),
            );
        }
        s.state = Some(running(since));
        s.last_state = last.map(|t| ContainerState {
            terminated: Some(t),
            ..ContainerState::default()
        });
        s
    }

    /// An app container whose first image pull begins at `begin`: runs for good, or exits
    /// (after the run time, or when crashed) and maybe restarts.
    pub(super) fn lifecycle(
        &mut self,
        c: &Container,
        begin: Timestamp,
        completes: bool,
        restart: &str,
    ) -> ContainerStatus {
        let natural_code = match (self.admitted.lifecycle.exit_code, completes) {
            (Some(code), _) => Some(code),
            (None, true) => Some(0),
            (None, false) => None,
        };
        let crashes: Vec<Crash> = self
            .admitted
            .crashes
            .get(&c.name)
            .cloned()
            .unwrap_or_default();
        let run = self.admitted.lifecycle.run;
        let mut begin = begin;
        let mut last: Option<ContainerStateTerminated> = None;
        let mut used = 0;
        for k in 0..100_000_i32 {
            self.started_events(c, false, k, begin);
            let since = self.instance_start(c, k, begin);
            if self.now < since {
                self.next.at(since);
                return self.waiting(c, "ContainerCreating", None, k);
            }
            let natural = natural_code.map(|code| (after(since, run), code));
            // Each crash ends the one instance that ran when it came.
            let crash = crashes
                .iter()
                .enumerate()
                .skip(used)
                .find(|(_, x)| x.at >= since && natural.is_none_or(|(t, _)| x.at < t));
            if let Some((i, _)) = crash {
                used = i + 1;
            }
            let crash = crash.map(|(_, x)| (x.at, x.exit_code));
            let Some((exits, code)) = crash.or(natural) else {
                return self.running(c, since, k, last);
            };
            if self.now < exits {
                self.next.at(exits);
                return self.running(c, since, k, last);
            }
            let id = self.base(c, k).container_id;
            let ended = terminated(code, Some(since), exits, id);
            let restarts = restart == "Always" || (restart == "OnFailure" && code != 0);
            if !restarts {
                let mut s = self.base(c, k);
                s.state = Some(ContainerState {
                    terminated: Some(ended),
                    ..ContainerState::default()
                });
                s.last_state = last.map(|t| ContainerState {
                    terminated: Some(t),
                    ..ContainerState::default()
                });
                return s;
            }
            let backoff = if k == 0 {
                Duration::ZERO
            } else {
                Duration::from_secs(10u64.saturating_mul(1 << (k - 1).min(10)).min(300))
            };
            let restarts_at = after(exits, backoff);
            if !backoff.is_zero() {
                let message = format!(
                    "Back-off restarting failed container {} in pod {}_{}({})",
                    c.name,
                    self.pod.name_any(),
                    self.pod.namespace().unwrap_or_default(),
                    self.uid
                );
                self.event(
                    c,
                    false,
                    format!("{k}/BackOff"),
                    exits,
                    (Type::Warning, "BackOff"),
                    message,
                );
            }
            if self.now < restarts_at {
                self.next.at(restarts_at);
                let message = format!(
                    "back-off {} restarting failed container={} pod={}_{}({})",
                    go_duration(backoff.as_secs()),
                    c.name,
                    self.pod.name_any(),
                    self.pod.namespace().unwrap_or_default(),
                    self.uid
                );
                let ran = self.base(c, k);
                let mut s = self.waiting(c, "CrashLoopBackOff", Some(message), k);
                (s.image, s.image_id) = (ran.image, ran.image_id);
                s.last_state = Some(ContainerState {
                    terminated: Some(ended),
                    ..ContainerState::default()
                });
                return s;
            }
            begin = restarts_at;
            last = Some(ended);
        }
        self.running(c, begin, 100_000, last)
    }
}

fn running(since: Timestamp) -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(Time(since)),
        }),
        ..ContainerState::default()
    }
}
