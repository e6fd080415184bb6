//! The shared caches every controller here reads: one watch per kind, as kcm's shared
//! informer factory gives its controllers.
//!
//! A controller's primary resource, the children it reads and the objects that trigger it
//! all come from [`cache`]: pass [`api`] and [`config`] to `Controller::new` and
//! `Controller::watches_cached` so the manager shares one informer per kind between them.

use std::time::Duration;

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
/// rollout for minutes.
pub fn controller<K>(manager: &Manager) -> Controller<K>
where
    K: CachedResource<DynamicType = ()>,
{
    Controller::new(api::<K>(manager), config()).hot_loop(HotLoopConfig {
        max_backoff: Duration::from_secs(1),
        ..HotLoopConfig::default()
    })
}

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
