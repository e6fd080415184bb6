//! Watch helpers several of the testkit's test files share.
#![allow(dead_code)]

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, WatchEvent, WatchParams};

/// An open watch of ConfigMaps.
pub(crate) type Events =
    std::pin::Pin<Box<dyn Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Send>>;

/// Watches `api` from resourceVersion `from`.
pub(crate) async fn watch(api: &Api<ConfigMap>, from: &str) -> anyhow::Result<Events> {
    Ok(api.watch(&WatchParams::default(), from).await?.boxed())
}

/// The next item of a watch stream (`None`: the stream ended), failing after a generous
/// time. In paused time the timeout only fires once every task is idle: nothing more can
/// arrive.
pub(crate) async fn next(events: &mut Events) -> Option<WatchEvent<ConfigMap>> {
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("a watch event or the end of the stream in time")
        .map(|item| item.expect("a watch event, not a client error"))
}

/// The name of an ADDED event's object; fails on anything else.
pub(crate) fn added_name(event: Option<WatchEvent<ConfigMap>>) -> String {
    match event {
        Some(WatchEvent::Added(cm)) => cm.metadata.name.unwrap_or_default(),
        other => panic!("expected ADDED, got {other:?}"),
    }
}
