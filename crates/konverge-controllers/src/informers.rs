//! The shared caches every controller here reads: one watch per kind, as kcm's shared
//! informer factory gives its controllers.
//!
//! A controller's primary resource, the children it reads and the objects that trigger it
//! all come from [`cache`]: pass [`api`] and [`config`] to `Controller::new` and
//! `Controller::watches_cached` so the manager shares one informer per kind between them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use konverge_runtime::cache::Index;
use konverge_runtime::controller::CachedResource;
use konverge_runtime::hotloop::HotLoopConfig;
use konverge_runtime::{Controller, Store};
use konverge_runtime::{Manager, watcher};
use kube::Api;

/// Every `K` in the cluster, watched as the manager's identity (kcm's).
pub fn api<K>(manager: &Manager) -> Api<K>
where
    K: CachedResource<DynamicType = ()>,
{
    Api::all(manager.client())
}

/// A controller of every `K`, on the shared cache of `K`, with the hot-loop detector's
/// back-off capped at a second: kcm's objects are written by several controllers in quick
/// succession (the deployment controller scales a ReplicaSet while the replicaset controller
/// writes its status), which the detector cannot tell from echoes of one controller's own
/// writes. A loop is still reported and counted in the metrics; it only never stalls a
/// rollout for minutes. A failed sync is logged at debug level until it has failed
/// [`MAX_RETRIES`] times in a row, as kcm's controllers log one at verbosity 2 until then:
/// the races between them (a conflict, a status not yet caught up) settle on a retry.
pub fn controller<K>(manager: &Manager) -> Controller<K>
where
    K: CachedResource<DynamicType = ()>,
{
    Controller::new(api::<K>(manager), config())
        .hot_loop(HotLoopConfig {
            max_backoff: Duration::from_secs(1),
            ..HotLoopConfig::default()
        })
        .quiet_retries(MAX_RETRIES)
}

/// kcm's `maxRetries`: the failures in a row after which its controllers log a sync error
/// where it is seen (and drop the key; here it goes on being retried).
pub const MAX_RETRIES: u32 = 15;

/// How the shared caches watch: everything, no selectors.
pub fn config() -> watcher::Config {
    watcher::Config::default()
}

/// The manager's shared cache of every `K`, indexed by owner uid ([`Index::owners`]) and by
/// label ([`Index::labels`]).
pub fn cache<K>(manager: &Manager) -> Store<K>
where
    K: CachedResource<DynamicType = ()>,
{
    // Adding an index already there is a no-op; controllers are added before anything starts,
    // so adding one cannot fail (if it did, lookups by the index would say so).
    let _ = manager.store_with_index(api::<K>(manager), config(), Index::labels());
    manager
        .store_with_index(api::<K>(manager), config(), Index::owners())
        .unwrap_or_else(|_| manager.store(api::<K>(manager), config()))
}

/// The name of the shared pod cache's index by `spec.nodeName`.
const POD_NODE_INDEX: &str = "spec.nodeName";

/// The manager's shared cache of Pods ([`cache`]), also indexed by `spec.nodeName` (pods not
/// bound to a node are not filed), for the controllers that look at one node's pods.
pub fn pods_by_node(manager: &Manager) -> Store<Pod> {
    let pods = cache::<Pod>(manager);
    let index = Index::new(POD_NODE_INDEX, |pod: &Pod| {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
            .into_iter()
            .collect()
    });
    manager
        .store_with_index(api::<Pod>(manager), config(), index)
        .unwrap_or(pods)
}

/// The pods bound to `node`: through the index when [`pods_by_node`] built the store, by
/// scanning every pod otherwise.
pub fn pods_on(pods: &Store<Pod>, node: &str) -> Vec<Arc<Pod>> {
    pods.index(POD_NODE_INDEX, node).unwrap_or_else(|_| {
        let mut all = pods.list();
        all.retain(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
        all
    })
}
