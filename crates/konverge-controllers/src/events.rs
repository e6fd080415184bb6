//! Events, as kcm's controllers record them: core/v1 Events with `Normal`/`Warning`, a reason
//! and a message, from the controller's component name (`replicaset-controller`, ...).
//!
//! Like client-go's event recorder, an event identical to one recorded before (same object,
//! type, reason, message and component) is not written again: the existing Event's `count`
//! goes up and its `lastTimestamp` moves (a patch). Events that differ in their message are
//! separate Events ("Created pod: web-x", "Created pod: web-y"). client-go's aggregation of
//! more than ten similar messages into one "(combined from similar events)" Event is not
//! done.
//!
//! Recording never fails or slows a reconcile: each event is written by a task of its own and
//! a failure is logged, as kcm's event broadcaster does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use serde_json::json;

/// How many distinct events are remembered for counting repeats (client-go's cache size).
const REMEMBERED: usize = 4096;

/// What makes two events the same one.
type Key = (String, String, String, String, &'static str, String, String);

/// Records events for one controller (cheap to clone).
#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    component: Arc<str>,
    /// Events written so far: their name and count, by what makes them the same.
    seen: Arc<Mutex<HashMap<Key, (String, i32)>>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("component", &self.component)
            .finish_non_exhaustive()
    }
}

impl Events {
    /// Events from `component` (kcm's event source, such as `deployment-controller`).
    pub fn new(client: kube::Client, component: &str) -> Events {
        Events {
            client,
            component: component.into(),
            seen: Arc::default(),
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
        let events = self.clone();
        let reason = reason.to_string();
        tokio::spawn(async move {
            if let Err(error) = events.write(reference, type_, &reason, message).await {
                tracing::debug!(%error, reason, "event not recorded");
            }
        });
    }

    async fn write(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        message: String,
    ) -> Result<(), kube::Error> {
        let type_ = match type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let key: Key = (
            reference.uid.clone().unwrap_or_default(),
            reference.kind.clone().unwrap_or_default(),
            namespace.clone(),
            reference.name.clone().unwrap_or_default(),
            type_,
            reason.to_string(),
            message.clone(),
        );
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Time(Timestamp::now());
        let repeat = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.get_mut(&key).map(|(name, count)| {
                *count += 1;
                (name.clone(), *count)
            })
        };
        if let Some((name, count)) = repeat {
            let patch = json!({"count": count, "lastTimestamp": now});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Gone (events expire): write it anew.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!(
            "{}.{:x}",
            reference.name.as_deref().unwrap_or(&self.component),
            now.0.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            involved_object: reference,
            reason: Some(reason.to_string()),
            message: Some(message),
            type_: Some(type_.to_string()),
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            source: Some(EventSource {
                component: Some(self.component.to_string()),
                host: None,
            }),
            reporting_component: Some(self.component.to_string()),
            reporting_instance: Some(String::new()),
            ..Event::default()
        };
        api.create(&PostParams::default(), &event).await?;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= REMEMBERED {
            seen.clear();
        }
        seen.insert(key, (name, 1));
        Ok(())
    }
}
