//! kcm's EndpointSlice mirroring controller (`pkg/controller/endpointslicemirroring`): the
//! Endpoints users write for a Service without a selector, mirrored into EndpointSlices
//! labelled `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by:
//! endpointslicemirroring-controller.k8s.io` and owned by the Endpoints.
//!
//! Each subset becomes (at most) one slice per address type, holding at most 1000 of its
//! addresses; ready addresses are ready endpoints. The slices carry the Endpoints' labels
//! and annotations (but the trigger time and `kubectl`'s last applied configuration).
//! Endpoints labelled `endpointslice.kubernetes.io/skip-mirror: "true"`, leader-election
//! records, and Endpoints whose Service is gone or has a selector get no mirrored slices
//! (existing ones are deleted). When the Endpoints themselves are deleted, their slices go
//! with them through the ownerReference (the garbage collector), where kcm also deletes them
//! itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store};
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use super::addresses::{parse_ip, selector};
use super::slices::{
    EndpointSet, delete_slice, equal_beyond_key, ports_key, seen, services_of_slices, slices_of,
};
use super::subsets::{namespace_terminating, repack_subsets};
use super::{
    ANNOTATION_LAST_CHANGE_TRIGGER_TIME, ANNOTATION_LEADER, LABEL_MANAGED_BY, LABEL_SERVICE_NAME,
    LABEL_SKIP_MIRROR,
};
use crate::descriptor::{Descriptor, Setup};
use crate::error::Result;
use crate::events::Events;
use crate::expectations::Expectations;
use crate::informers;

/// kcm's EndpointSlice mirroring controller.
pub const ENDPOINTSLICE_MIRRORING: Descriptor = Descriptor {
    name: "endpointslice-mirroring-controller",
    aliases: &["endpointslicemirroring"],
    service_account: "endpointslicemirroring-controller",
    add,
};

/// The `endpointslice.kubernetes.io/managed-by` value of mirrored slices.
pub const MANAGED_BY: &str = "endpointslicemirroring-controller.k8s.io";

/// kcm's `--mirroring-max-endpoints-per-subset` default.
pub const MAX_ENDPOINTS_PER_SUBSET: usize = 1000;

/// kcm's event source for this controller.
const COMPONENT: &str = "endpoint-slice-mirroring-controller";

/// kcm's `--mirroring-concurrent-service-endpoint-syncs` default.
const WORKERS: usize = 5;

/// `kubectl`'s annotation, never mirrored.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// How soon Endpoints are looked at again while the cache has not caught up with their
/// slices' creations and deletions.
const CACHE_WAIT: Duration = Duration::from_secs(1);

struct Ctx {
    client: kube::Client,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    events: Events,
    expectations: Expectations,
}

fn add(manager: &mut Manager, setup: Setup) {
    let ctx = Arc::new(Ctx {
        services: informers::cache::<Service>(manager),
        slices: informers::cache::<EndpointSlice>(manager),
        events: Events::new(setup.client.clone(), COMPONENT),
        expectations: Expectations::new(),
        client: setup.client,
    });
    let for_deletes = ctx.clone();
    let controller = informers::controller::<Endpoints>(manager)
        .named(ENDPOINTSLICE_MIRRORING.name)
        // kcm's onEndpointsAdd/Update: Endpoints that are, or were, to be mirrored.
        .with_predicate(|old: Option<&Endpoints>, new: &Endpoints| {
            let moved = old
                .is_none_or(|old| old.metadata.resource_version != new.metadata.resource_version);
            moved && (should_mirror(new) || old.is_some_and(should_mirror))
        })
        .concurrency(WORKERS)
        .watches_cached(
            informers::api::<Service>(manager),
            informers::config(),
            move |change: &Change<Service>| {
                if change.new.is_none() {
                    let key = &change.key;
                    let namespace = key.namespace.as_deref().unwrap_or_default();
                    for_deletes
                        .expectations
                        .forget(&format!("{namespace}/{}", key.name));
                }
                endpoints_for_service_change(change)
            },
        )
        .watches_cached(
            informers::api::<EndpointSlice>(manager),
            informers::config(),
            |change: &Change<EndpointSlice>| services_of_slices(change, MANAGED_BY),
        );
    manager.add(controller, sync_endpoints, ctx);
}

/// kcm's `shouldMirror`: not labelled to be skipped, not a leader-election record.
fn should_mirror(endpoints: &Endpoints) -> bool {
    endpoints
        .labels()
        .get(LABEL_SKIP_MIRROR)
        .map(String::as_str)
        != Some("true")
        && !endpoints.annotations().contains_key(ANNOTATION_LEADER)
}

/// The Endpoints a Service change concerns (kcm's `onService*`): those of a Service
/// without a selector appearing or going, or of one gaining or losing its selector.
fn endpoints_for_service_change(change: &Change<Service>) -> Vec<ObjectKey> {
    let selectorless = |s: &Arc<Service>| selector(s).is_none();
    let concerned = match (&change.old, &change.new) {
        (None, Some(new)) => selectorless(new),
        (Some(old), None) => selectorless(old),
        (Some(old), Some(new)) => selectorless(old) != selectorless(new),
        (None, None) => false,
    };
    if concerned {
        vec![change.key.clone()]
    } else {
        Vec::new()
    }
}

/// Mirrors one Endpoints object (kcm's `syncEndpoints`).
async fn sync_endpoints(endpoints: Arc<Endpoints>, ctx: Arc<Ctx>) -> Result<Action> {
    let namespace = endpoints.namespace().unwrap_or_default();
    let name = endpoints.name_any();
    let key = format!("{namespace}/{name}");
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &namespace);
    let cached = slices_of(&ctx.slices, &namespace, &name, MANAGED_BY);
    let service = ctx.services.get(&ObjectKey::namespaced(&namespace, &name));
    let mirrored =
        should_mirror(&endpoints) && service.as_deref().is_some_and(|s| selector(s).is_none());
    if !mirrored {
        ctx.expectations.forget(&key);
        for slice in cached
            .iter()
            .filter(|s| s.metadata.deletion_timestamp.is_none())
        {
            delete_slice(&api, slice).await?;
        }
        return Ok(Action::await_change());
    }
    if !ctx.expectations.satisfied(&key, |uid| seen(&cached, uid)) {
        return Ok(Action::requeue(CACHE_WAIT));
    }
    let existing: Vec<Arc<EndpointSlice>> = cached
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    let desired = desired_endpoints(&ctx, &endpoints);
    let mut existing_by_key: BTreeMap<(String, String), Vec<Arc<EndpointSlice>>> = BTreeMap::new();
    for slice in existing {
        let key = (
            slice.address_type.clone(),
            ports_key(slice.ports.as_deref().unwrap_or_default()),
        );
        existing_by_key.entry(key).or_default().push(slice);
    }
    let mut plan = Plan::default();
    for (group, (ports, set)) in desired {
        let existing = existing_by_key.remove(&group).unwrap_or_default();
        plan_group(&mut plan, &endpoints, existing, set, ports, &group.0);
    }
    for (_, slices) in existing_by_key {
        plan.delete.extend(slices);
    }
    finalize(&ctx, &api, &endpoints, &key, plan).await?;
    Ok(Action::await_change())
}

/// Desired endpoints by (address type, ports key): the ports and the endpoints.
type Desired = BTreeMap<(String, String), (Vec<EndpointPort>, EndpointSet)>;

/// The endpoints the Endpoints' subsets (repacked) ask for, at most
/// [`MAX_ENDPOINTS_PER_SUBSET`] per subset, recording kcm's events for addresses skipped.
fn desired_endpoints(ctx: &Ctx, endpoints: &Endpoints) -> Desired {
    let mut desired = Desired::new();
    let (mut invalid, mut skipped) = (0usize, 0usize);
    for subset in repack_subsets(endpoints.subsets.as_deref().unwrap_or_default()) {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone().unwrap_or_default()),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let key = ports_key(&ports);
        for address_type in ["IPv4", "IPv6"] {
            desired
                .entry((address_type.to_string(), key.clone()))
                .or_insert_with(|| (ports.clone(), EndpointSet::default()));
        }
        let addresses = subset.addresses.iter().flatten().map(|a| (a, true)).chain(
            subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| (a, false)),
        );
        let total = subset.addresses.as_ref().map_or(0, Vec::len)
            + subset.not_ready_addresses.as_ref().map_or(0, Vec::len);
        let mut added = 0;
        for (address, ready) in addresses {
            if added >= MAX_ENDPOINTS_PER_SUBSET {
                break;
            }
            let Some((endpoint, address_type)) = address_to_endpoint(address, ready) else {
                invalid += 1;
                continue;
            };
            if let Some((_, set)) = desired.get_mut(&(address_type.to_string(), key.clone())) {
                set.insert(endpoint);
            }
            added += 1;
        }
        skipped += total - added;
    }
    if invalid > 0 {
        ctx.events.warning(
            endpoints,
            "InvalidIPAddress",
            format!("Skipped {invalid} invalid IP addresses when mirroring to EndpointSlices"),
        );
    }
    if skipped > invalid {
        ctx.events.warning(
            endpoints,
            "TooManyAddressesToMirror",
            format!(
                "A max of {MAX_ENDPOINTS_PER_SUBSET} addresses can be mirrored to EndpointSlices per Endpoints subset. {skipped} addresses were skipped"
            ),
        );
    }
    desired
}

/// An Endpoints address as an endpoint, with its address type (kcm's `addressToEndpoint`);
/// `None` for an invalid IP.
fn address_to_endpoint(address: &EndpointAddress, ready: bool) -> Option<(Endpoint, &'static str)> {
    let ip = parse_ip(&address.ip)?;
    // An IPv4-mapped IPv6 address is IPv4, as Go's To4 says.
    let ip = match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        v4 => v4,
    };
    let address_type = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
    let endpoint = Endpoint {
        addresses: vec![ip.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..EndpointConditions::default()
        }),
        target_ref: address.target_ref.clone(),
        node_name: address.node_name.clone(),
        hostname: address.hostname.clone().filter(|h| !h.is_empty()),
        ..Endpoint::default()
    };
    Some((endpoint, address_type))
}

/// The slices to create, update and delete.
#[derive(Debug, Default)]
struct Plan {
    create: Vec<EndpointSlice>,
    update: Vec<EndpointSlice>,
    delete: Vec<Arc<EndpointSlice>>,
}

/// The slices of one (address type, ports) group (kcm's `reconcileByPortMapping`): none
/// when no endpoint is desired; else one, the first existing slice rewritten unless it
/// already holds the desired endpoints, labels and annotations; the others deleted.
fn plan_group(
    plan: &mut Plan,
    endpoints: &Endpoints,
    existing: Vec<Arc<EndpointSlice>>,
    mut desired: EndpointSet,
    ports: Vec<EndpointPort>,
    address_type: &str,
) {
    if desired.is_empty() {
        plan.delete.extend(existing);
        return;
    }
    let mut existing = existing.into_iter();
    let first = existing.next();
    plan.delete.extend(existing);
    if let Some(first) = &first
        && up_to_date(first, endpoints, &desired)
    {
        return;
    }
    let mut slice = new_slice(endpoints, ports, address_type);
    if let Some(first) = &first {
        slice.metadata.name = first.metadata.name.clone();
        slice.metadata.generate_name = None;
        slice.metadata.resource_version = first.metadata.resource_version.clone();
    }
    while slice.endpoints.len() < MAX_ENDPOINTS_PER_SUBSET {
        let Some(endpoint) = desired.pop() else {
            break;
        };
        slice.endpoints.push(endpoint);
    }
    if slice.metadata.name.is_some() {
        plan.update.push(slice);
    } else {
        plan.create.push(slice);
    }
}

/// Whether a mirrored slice holds exactly the desired endpoints and the Endpoints' labels
/// and annotations (kcm's `totalChanges` and label and annotation comparison).
fn up_to_date(slice: &EndpointSlice, endpoints: &Endpoints, desired: &EndpointSet) -> bool {
    let mut matches = 0;
    for endpoint in &slice.endpoints {
        match desired.get(endpoint) {
            Some(want) if equal_beyond_key(want, endpoint) => matches += 1,
            _ => return false,
        }
    }
    let mut labels = slice.labels().clone();
    labels.remove(LABEL_MANAGED_BY);
    labels.remove(LABEL_SERVICE_NAME);
    matches == desired.len()
        && &labels == endpoints.labels()
        && &mirrored_annotations(endpoints) == slice.annotations()
}

/// The Endpoints' annotations a mirrored slice carries.
fn mirrored_annotations(endpoints: &Endpoints) -> BTreeMap<String, String> {
    endpoints
        .annotations()
        .iter()
        .filter(|(k, _)| *k != ANNOTATION_LAST_CHANGE_TRIGGER_TIME && *k != LAST_APPLIED)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A new mirrored slice (kcm's `newEndpointSlice`).
fn new_slice(endpoints: &Endpoints, ports: Vec<EndpointPort>, address_type: &str) -> EndpointSlice {
    let mut labels = endpoints.labels().clone();
    labels.insert(LABEL_SERVICE_NAME.into(), endpoints.name_any());
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Endpoints".into(),
        name: endpoints.name_any(),
        uid: endpoints.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(crate::pods::generate_name(&endpoints.name_any())),
            namespace: endpoints.namespace(),
            labels: Some(labels),
            annotations: Some(mirrored_annotations(endpoints)),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        address_type: address_type.into(),
        endpoints: Vec::new(),
        ports: Some(ports),
    }
}

/// Writes a plan (kcm's `finalize`): slices about to be deleted are reused, by address
/// type, for slices about to be created (kcm's `recycleSlices`).
async fn finalize(
    ctx: &Ctx,
    api: &Api<EndpointSlice>,
    endpoints: &Endpoints,
    key: &str,
    mut plan: Plan,
) -> Result<()> {
    let mut creates = Vec::new();
    for mut slice in std::mem::take(&mut plan.create) {
        match plan
            .delete
            .iter()
            .position(|d| d.address_type == slice.address_type)
        {
            Some(at) => {
                let old = plan.delete.remove(at);
                slice.metadata.name = old.metadata.name.clone();
                slice.metadata.generate_name = None;
                slice.metadata.resource_version = old.metadata.resource_version.clone();
                plan.update.push(slice);
            }
            None => creates.push(slice),
        }
    }
    if endpoints.metadata.deletion_timestamp.is_none() {
        for slice in creates {
            match api.create(&PostParams::default(), &slice).await {
                Ok(created) => ctx
                    .expectations
                    .created(key, created.uid().unwrap_or_default()),
                Err(error) if namespace_terminating(&error) => return Ok(()),
                Err(error) => return Err(error.into()),
            }
        }
    }
    for slice in plan.update {
        api.replace(&slice.name_any(), &PostParams::default(), &slice)
            .await?;
    }
    for slice in plan.delete {
        delete_slice(api, &slice).await?;
        ctx.expectations
            .deleted(key, slice.uid().unwrap_or_default());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_endpoints_of_their_family() {
        let address = |ip: &str| EndpointAddress {
            ip: ip.into(),
            ..EndpointAddress::default()
        };
        let (v4, t) = address_to_endpoint(&address("10.0.0.01"), false).expect("valid");
        assert_eq!((v4.addresses[0].as_str(), t), ("10.0.0.1", "IPv4"));
        assert_eq!(v4.conditions.and_then(|c| c.ready), Some(false));
        let (_, t) = address_to_endpoint(&address("fd00::5"), true).expect("valid");
        assert_eq!(t, "IPv6");
        let (mapped, t) = address_to_endpoint(&address("::ffff:10.1.2.3"), true).expect("valid");
        assert_eq!((mapped.addresses[0].as_str(), t), ("10.1.2.3", "IPv4"));
        assert!(address_to_endpoint(&address("nope"), true).is_none());
    }
}
