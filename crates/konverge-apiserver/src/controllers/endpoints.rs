//! kube-apiserver's lease endpoint reconciler (`--endpoint-reconciler-type=lease`, its
//! default): the `kubernetes` Service's Endpoints and EndpointSlice list every live server of
//! the cluster.
//!
//! Every server keeps a lease under `/registry/masterleases/<its advertised IP>` (an
//! Endpoints naming that IP, as kube-apiserver stores it), written again every 10 seconds, and
//! then writes the `kubernetes` endpoints from the leases it finds alive, in address order, at
//! its own port (the servers of a cluster serve on one port, as kube-apiserver's replicas
//! do). A server stopping gracefully deletes its lease and writes the endpoints without it
//! ([`withdraw`]).
//!
//! kube-apiserver's leases expire with etcd's own TTL (15 seconds). konverge's stores have
//! none, so a lease's age is judged as the leader election judges a Lease's: by when this
//! server last saw it change (its revision), on its own monotonic clock; clocks of different
//! machines are never compared. A lease unchanged for 15 seconds is expired: it is left out,
//! and deleted (if it did not change meanwhile).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use konverge_store::{KeyRange, RangeRequest, Revision};
use serde_json::json;
use tokio::time::Instant;

use super::fixed::{KUBERNETES, reconcile};
use crate::error::ApiError;
use crate::registry::Registry;

/// Where a server says it is: the `kubernetes` endpoints' address and port for it
/// (`--advertise-address`, `--secure-port`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertised {
    /// Its address.
    pub address: IpAddr,
    /// Its port.
    pub port: u16,
}

/// Where the leases are kept: kube-apiserver's key, under the store's `/registry/` prefix.
pub const LEASE_PREFIX: &str = "/registry/masterleases/";

/// How often a server renews its lease and writes the endpoints (kube-apiserver's
/// `DefaultEndpointReconcilerInterval`).
pub const INTERVAL: Duration = Duration::from_secs(10);

/// How long a lease lasts unrenewed (kube-apiserver's `DefaultEndpointReconcilerTTL`).
pub const TTL: Duration = Duration::from_secs(15);

/// The key of the lease of the server at `ip`.
fn lease_key(ip: IpAddr) -> Bytes {
    Bytes::from(format!("{LEASE_PREFIX}{ip}"))
}

/// The lease's value: an Endpoints naming the server's address, as kube-apiserver stores it.
fn lease_value(ip: IpAddr) -> Bytes {
    let ip = ip.to_string();
    Bytes::from(
        json!({
            "kind": "Endpoints",
            "apiVersion": "v1",
            "metadata": {"name": ip},
            "subsets": [{"addresses": [{"ip": ip}]}],
        })
        .to_string(),
    )
}

/// The IP a lease key names, if it names one.
fn leased_ip(key: &[u8]) -> Option<IpAddr> {
    std::str::from_utf8(key)
        .ok()?
        .strip_prefix(LEASE_PREFIX)?
        .parse()
        .ok()
}

fn leases() -> KeyRange {
    KeyRange::prefix(Bytes::from_static(LEASE_PREFIX.as_bytes()))
}

/// Every address with a lease in the store, alive or not: what a server starting counts
/// before it has watched any lease age.
pub(crate) async fn leased_addresses(
    registry: &Registry,
) -> konverge_store::Result<BTreeSet<IpAddr>> {
    let listed = registry
        .store()
        .range(RangeRequest::new(leases()).keys_only())
        .await?;
    Ok(listed
        .kvs
        .iter()
        .filter_map(|kv| leased_ip(&kv.key))
        .collect())
}

/// The leases of the other servers as this server saw them: each one's revision, and when it
/// last saw that revision change.
#[derive(Debug, Default)]
struct Ages {
    seen: HashMap<Bytes, (Revision, Instant)>,
}

impl Ages {
    /// Whether the lease at `key`, now at `revision`, is alive at `now`.
    fn alive(&mut self, key: &Bytes, revision: Revision, now: Instant) -> bool {
        let entry = self.seen.entry(key.clone()).or_insert((revision, now));
        if entry.0 != revision {
            *entry = (revision, now);
        }
        now.duration_since(entry.1) < TTL
    }

    /// Forgets leases no longer in the store.
    fn keep_only(&mut self, keys: &BTreeSet<Bytes>) {
        self.seen.retain(|key, _| keys.contains(key));
    }
}

/// This server's lease, created if it is not in the store (`leased`: the addresses that
/// have one): what the bootstrap does before the server is ready, so that it is listed from
/// the start.
pub(crate) async fn ensure_lease(
    registry: &Registry,
    config: &Advertised,
    leased: &BTreeSet<IpAddr>,
) -> konverge_store::Result<()> {
    if leased.contains(&config.address) {
        return Ok(());
    }
    match registry
        .store()
        .create(lease_key(config.address), lease_value(config.address))
        .await
    {
        Ok(_) | Err(konverge_store::Error::AlreadyExists { .. }) => Ok(()),
        Err(error) => Err(error),
    }
}

/// Renews this server's lease and writes the endpoints every [`INTERVAL`] (the first time
/// one interval after the bootstrap wrote them), until the store closes.
pub async fn run(registry: Registry, config: Advertised) {
    let mut ages = Ages::default();
    loop {
        tokio::time::sleep(INTERVAL).await;
        if let Err(error) = pass(&registry, &config, &mut ages).await {
            if matches!(error, Error::Store(konverge_store::Error::Closed)) {
                return;
            }
            tracing::warn!(%error, "reconciling the kubernetes Service's endpoints failed");
        }
    }
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
enum Error {
    /// Reading or writing the leases.
    #[error("the API server leases: {0}")]
    Store(#[from] konverge_store::Error),
    /// Writing the endpoints.
    #[error("the kubernetes endpoints: {0}")]
    Endpoints(#[from] crate::error::ApiError),
}

async fn pass(registry: &Registry, config: &Advertised, ages: &mut Ages) -> Result<(), Error> {
    let own = lease_key(config.address);
    let store = registry.store();
    store.put(own.clone(), lease_value(config.address)).await?;
    let listed = store.range(RangeRequest::new(leases()).keys_only()).await?;
    let now = Instant::now();
    let mut addresses = BTreeSet::new();
    let mut keys = BTreeSet::new();
    for kv in &listed.kvs {
        let key = Bytes::copy_from_slice(&kv.key);
        keys.insert(key.clone());
        let Some(ip) = leased_ip(&key) else { continue };
        if key == own || ages.alive(&key, kv.mod_revision, now) {
            addresses.insert(ip);
        } else {
            // Expired: gone unless it was renewed since it was read.
            match store.delete_if(key.clone(), kv.mod_revision).await {
                Ok(_) | Err(konverge_store::Error::Conflict { .. }) => {}
                Err(konverge_store::Error::NotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
    }
    ages.keep_only(&keys);
    write_endpoints(registry, config, &addresses).await
}

/// The `kubernetes` endpoints listing `addresses`, at this server's port.
async fn write_endpoints(
    registry: &Registry,
    config: &Advertised,
    addresses: &BTreeSet<IpAddr>,
) -> Result<(), Error> {
    kubernetes_endpoints(registry, config.address, config.port, addresses).await?;
    Ok(())
}

/// What a server stopping gracefully does (kube-apiserver's `RemoveEndpoints`): deletes its
/// lease and writes the endpoints without it, listing the servers whose leases remain.
pub async fn withdraw(registry: &Registry, config: &Advertised) {
    let result: Result<(), Error> = async {
        registry.store().delete(lease_key(config.address)).await?;
        let addresses = leased_addresses(registry).await?;
        write_endpoints(registry, config, &addresses).await
    }
    .await;
    if let Err(error) = result {
        tracing::warn!(%error, "removing this server from the kubernetes Service's endpoints failed");
    }
}

/// The `kubernetes` Endpoints and EndpointSlice, listing `addresses` of `own`'s family (in
/// order) at `port`; with no address, no endpoints (the last server of a cluster stopped).
pub(crate) async fn kubernetes_endpoints(
    registry: &Registry,
    own: IpAddr,
    port: u16,
    addresses: &std::collections::BTreeSet<IpAddr>,
) -> Result<(), ApiError> {
    let (address_type, same_family): (_, fn(&IpAddr) -> bool) = match own {
        IpAddr::V4(_) => ("IPv4", IpAddr::is_ipv4),
        IpAddr::V6(_) => ("IPv6", IpAddr::is_ipv6),
    };
    let listed: Vec<String> = addresses
        .iter()
        .filter(|ip| same_family(ip))
        .map(ToString::to_string)
        .collect();
    let ports = json!([{"name": "https", "port": port, "protocol": "TCP"}]);
    let mut endpoints = json!({
        "metadata": {"name": KUBERNETES, "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
    });
    if !listed.is_empty() {
        endpoints["subsets"] = json!([{
            "addresses": listed.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
            "ports": ports,
        }]);
    }
    reconcile(registry, "", "endpoints", endpoints, &["/subsets"]).await?;
    reconcile(
        registry,
        "discovery.k8s.io",
        "endpointslices",
        json!({
            "metadata": {"name": KUBERNETES, "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": address_type,
            "endpoints": listed.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}})).collect::<Vec<_>>(),
            "ports": ports,
        }),
        &["/addressType", "/endpoints", "/ports"],
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_keys_name_their_address() {
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        assert_eq!(lease_key(ip), "/registry/masterleases/10.0.0.7");
        assert_eq!(leased_ip(&lease_key(ip)), Some(ip));
        let v6: IpAddr = "fd00::7".parse().unwrap();
        assert_eq!(leased_ip(&lease_key(v6)), Some(v6));
        assert_eq!(leased_ip(b"/registry/masterleases/nonsense"), None);
        assert_eq!(leased_ip(b"/registry/configmaps/x"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_alive_until_it_stays_unchanged_for_the_ttl() {
        let mut ages = Ages::default();
        let key = Bytes::from_static(b"/registry/masterleases/10.0.0.2");
        let start = Instant::now();
        let at = |after: Duration| start + after;
        assert!(ages.alive(&key, 5, start), "alive when first seen");
        assert!(ages.alive(&key, 5, at(TTL - Duration::from_millis(1))));
        assert!(!ages.alive(&key, 5, at(TTL)), "unchanged for the TTL");
        // Renewed: alive for a TTL from when it was seen to change.
        assert!(ages.alive(&key, 9, at(TTL + Duration::from_secs(1))));
        assert!(ages.alive(&key, 9, at(TTL * 2)));
        assert!(!ages.alive(&key, 9, at(TTL * 2 + Duration::from_secs(1))));
        ages.keep_only(&BTreeSet::new());
        assert!(ages.seen.is_empty());
    }
}
