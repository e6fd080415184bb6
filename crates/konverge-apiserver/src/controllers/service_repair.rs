//! kube-apiserver's service address repair (`start-service-ip-repair-controllers`): every
//! three minutes, in every server, the node port bitmap and the cluster IPs' `IPAddress`
//! objects are checked against the Services. An address a Service holds but that is not
//! recorded as taken is recorded; one recorded as taken that no Service has held for three
//! rounds (a server stopped between taking it and storing its Service) is given back. The
//! work itself is [`Registry::repair_service_addresses`].

use std::time::Duration;

use crate::registry::{Leaks, Registry};

/// kube-apiserver's `repairLoopInterval`.
pub(crate) const INTERVAL: Duration = Duration::from_secs(3 * 60);

/// Repairs the service addresses of `registry`'s store every [`INTERVAL`], for good.
pub(crate) async fn run(registry: Registry) {
    let mut leaks = Leaks::default();
    loop {
        tokio::time::sleep(INTERVAL).await;
        if let Err(e) = registry.repair_service_addresses(&mut leaks).await {
            tracing::warn!(error = %e, "repairing service addresses failed");
        }
    }
}
