//! kube-aggregator's `apiservice-status-remote-available-controller` and
//! `apiservice-discovery-controller`, which run in every server: each APIService that names a
//! Service is checked ([`Aggregator::check`]) when it, its Service or its Endpoints change,
//! and every 30 seconds; its `Available` condition is written when it changed (the time of
//! the last transition kept while the status stays), and what its server's discovery says
//! is kept for discovery to publish.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{KeyRange, WatchRequest, WatchResponse};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::aggregator::available::Availability;
use crate::aggregator::{Aggregator, GROUP, Remote};
use crate::registry::{Registry, WriteOptions};
use crate::resources::ResourceType;

/// How often every remote APIService is checked again (kube's requeue of available ones).
const RESYNC: Duration = Duration::from_secs(30);

/// How long after a change a pass waits, so a burst is one pass.
const SETTLE: Duration = Duration::from_millis(20);

/// Who writes the conditions (kube-apiserver's loopback client).
const MANAGER: &str = "kube-apiserver";

/// Runs the checks until the store closes.
pub(crate) async fn run(registry: Registry, aggregator: Arc<Aggregator>) {
    let catalog = registry.catalog().clone();
    let (Some(api_services), Some(services), Some(endpoints)) = (
        catalog.get(GROUP, "v1", "apiservices"),
        catalog.get("", "v1", "services"),
        catalog.get("", "v1", "endpoints"),
    ) else {
        return;
    };
    loop {
        match run_once(&registry, &aggregator, &api_services, &services, &endpoints).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "APIService availability checks restarting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn run_once(
    registry: &Registry,
    aggregator: &Arc<Aggregator>,
    api_services: &Arc<ResourceType>,
    services: &Arc<ResourceType>,
    endpoints: &Arc<ResourceType>,
) -> Result<(), konverge_store::Error> {
    let store = registry.store();
    let from = store.current_revision().await? + 1;
    let watch = |rt: &ResourceType| {
        WatchRequest::new(KeyRange::prefix(Bytes::from(rt.storage_prefix()))).from_revision(from)
    };
    let mut api_service_events = store.watch(watch(api_services)).await?;
    let mut service_events = store.watch(watch(services)).await?;
    let mut endpoints_events = store.watch(watch(endpoints)).await?;
    let mut due = Some(Instant::now());
    let mut resync = tokio::time::interval_at(Instant::now() + RESYNC, RESYNC);
    loop {
        let wake = due.unwrap_or_else(|| Instant::now() + RESYNC);
        let (changed, of_services) = tokio::select! {
            message = api_service_events.recv() => (message, false),
            message = service_events.recv() => (message, true),
            message = endpoints_events.recv() => (message, true),
            _ = resync.tick() => {
                due = Some(Instant::now());
                continue;
            }
            _ = tokio::time::sleep_until(wake), if due.is_some() => {
                due = None;
                pass(registry, aggregator, api_services).await;
                continue;
            }
        };
        match changed {
            Some(Ok(WatchResponse::Events(events))) if !events.is_empty() => {
                // A Service or Endpoints change matters only to the APIServices naming it.
                let relevant = !of_services || {
                    let remotes = aggregator.remotes().await;
                    let keys: HashSet<String> = remotes
                        .all()
                        .iter()
                        .flat_map(|r| {
                            [
                                services.key(Some(&r.namespace), &r.service),
                                endpoints.key(Some(&r.namespace), &r.service),
                            ]
                        })
                        .collect();
                    events
                        .iter()
                        .any(|e| keys.contains(String::from_utf8_lossy(&e.kv.key).as_ref()))
                };
                if relevant {
                    let soon = Instant::now() + SETTLE;
                    due = Some(due.map_or(soon, |due| due.min(soon)));
                }
            }
            Some(Ok(_)) => {}
            Some(Err(konverge_store::Error::Closed)) | None => return Ok(()),
            Some(Err(e)) => return Err(e),
        }
    }
}

/// Checks every remote APIService, together.
async fn pass(registry: &Registry, aggregator: &Aggregator, api_services: &ResourceType) {
    let remotes = aggregator.remotes().await;
    aggregator.retain_discovered(&remotes);
    let checks = remotes.all().iter().map(|remote| async move {
        let availability = aggregator.check(remote).await;
        let discovered = if availability.status == "True" {
            match aggregator.discover(remote).await {
                Ok(discovered) => Some(discovered),
                Err(e) => {
                    tracing::debug!(error = %e, api_service = %remote.name, "reading an aggregated server's discovery failed");
                    None
                }
            }
        } else {
            None
        };
        aggregator.set_discovered(remote, discovered);
        write_condition(registry, api_services, remote, &availability).await;
    });
    futures::future::join_all(checks).await;
}

/// Writes `availability` as `remote`'s `Available` condition, if it changed.
async fn write_condition(
    registry: &Registry,
    api_services: &ResourceType,
    remote: &Remote,
    availability: &Availability,
) {
    let current = match registry.get(api_services, None, &remote.name, None).await {
        Ok(current) => current,
        Err(e) => {
            tracing::debug!(error = %e, api_service = %remote.name, "reading an APIService failed");
            return;
        }
    };
    let Some(updated) = with_condition(&current, availability) else {
        return;
    };
    let opts = WriteOptions {
        field_manager: Some(MANAGER.into()),
        ..WriteOptions::default()
    };
    if let Err(e) = registry
        .update(
            api_services,
            None,
            &remote.name,
            updated,
            Some("status"),
            &opts,
        )
        .await
    {
        // Changed or deleted meanwhile: its change brings another pass.
        tracing::debug!(error = %e, api_service = %remote.name, "writing an APIService's condition failed");
    }
}

/// `api_service` with its `Available` condition set as kube's `SetAPIServiceCondition` sets
/// it (a new transition time only when the status changes), or `None` when that changes
/// nothing.
fn with_condition(api_service: &Value, availability: &Availability) -> Option<Value> {
    let mut updated = api_service.clone();
    let status = updated
        .as_object_mut()?
        .entry("status")
        .or_insert_with(|| json!({}));
    crate::resources::meta::set_condition(
        status,
        json!({
            "type": "Available",
            "status": availability.status,
            "lastTransitionTime": crate::resources::meta::now(),
            "reason": availability.reason,
            "message": availability.message,
        }),
    );
    (updated != *api_service).then_some(updated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_stays() {
        let failing = Availability {
            status: "False",
            reason: "MissingEndpoints",
            message:
                "endpoints for service/api in \"wardle\" have no addresses with port name \"\""
                    .into(),
        };
        let first = with_condition(
            &json!({"metadata": {"name": "v1alpha1.wardle.example.com"}}),
            &failing,
        )
        .expect("a new condition");
        let condition = first["status"]["conditions"][0].clone();
        assert_eq!(condition["reason"], "MissingEndpoints");
        assert!(
            with_condition(&first, &failing).is_none(),
            "nothing changed"
        );
        let mut older = first.clone();
        older["status"]["conditions"][0]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
        let still_failing = Availability {
            reason: "ServiceNotFound",
            message: "service/api in \"wardle\" is not present".into(),
            ..failing.clone()
        };
        let next = with_condition(&older, &still_failing).expect("a new reason");
        assert_eq!(
            next["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        let passed = Availability {
            status: "True",
            reason: "Passed",
            message: "all checks passed".into(),
        };
        let available = with_condition(&older, &passed).expect("a transition");
        assert_ne!(
            available["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
    }
}
