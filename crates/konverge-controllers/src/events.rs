//! Events, as kcm's controllers record them: `Normal`/`Warning`, a reason and a message,
//! from the controller's component name (`replicaset-controller`, ...).
//!
//! Recording never fails or slows a reconcile: each event is written by a task of its own
//! and a failure is logged, as kcm's event broadcaster does.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Records events for one controller.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Events from `component` (kcm's event source, such as `deployment-controller`).
    pub fn new(client: kube::Client, component: &str) -> Events {
        let reporter = Reporter {
            controller: component.to_string(),
            instance: None,
        };
        Events {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A `Normal` event about `object`.
    pub fn normal<K: Resource<DynamicType = ()>>(&self, object: &K, reason: &str, message: String) {
        self.record(object.object_ref(&()), EventType::Normal, reason, message);
    }

    /// A `Warning` event about `object`.
    pub fn warning<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        reason: &str,
        message: String,
    ) {
        self.record(object.object_ref(&()), EventType::Warning, reason, message);
    }

    /// An event about the object `reference` names.
    pub fn record(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        message: String,
    ) {
        let recorder = self.recorder.clone();
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(message),
            action: reason.to_string(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&event, &reference).await {
                tracing::debug!(%error, reason = event.reason, "event not recorded");
            }
        });
    }
}
