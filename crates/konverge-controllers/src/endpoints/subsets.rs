//! kcm's endpoints controller (`pkg/controller/endpoint`): for every Service with a
//! selector, an Endpoints object of the same name listing the addresses of the pods it
//! selects — ready ones under `addresses`, the others under `notReadyAddresses` (all under
//! `addresses` with `publishNotReadyAddresses`) — grouped in subsets by the ports they serve.
//!
//! The Endpoints carry the Service's labels (plus `service.kubernetes.io/headless` for a
//! headless Service), the `endpoints.kubernetes.io/last-change-trigger-time` annotation, and
//! above 1000 addresses are truncated and annotated `endpoints.kubernetes.io/over-capacity:
//! truncated`. Endpoints have no ownerReference: when a Service goes, a second worker keyed
//! by the Endpoints (`endpoints-controller-leftovers`) deletes them, as kcm's sync of a
//! missing Service does; it also removes Endpoints left without a Service, as kcm's startup
//! sweep (`checkLeftoverEndpoints`) does.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use konverge_runtime::cache::Change;
use konverge_runtime::{Action, Manager, ObjectKey, Store, predicate};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use super::addresses::{
    TriggerTimes, cluster_ip, find_port, format_trigger_time, hostname_for, ip_families,
    is_external_name, is_ipv6, is_service_ip_set, node_name, pod_ips, publish_not_ready, selector,
    selects, service_ports, services_for_pod_change, should_pod_be_in_endpoints, target_ref,
};
use super::{
    ANNOTATION_LAST_CHANGE_TRIGGER_TIME, ANNOTATION_LEADER, ANNOTATION_OVER_CAPACITY,
    LABEL_HEADLESS,
};
use crate::clock::Clock;
use crate::descriptor::{Descriptor, Setup};
use crate::error::Result;
use crate::events::Events;
use crate::{informers, pods};

/// kcm's endpoints controller.
pub const ENDPOINTS: Descriptor = Descriptor {
    name: "endpoints-controller",
    aliases: &["endpoint"],
    service_account: "endpoint-controller",
    add,
};

/// The most addresses an Endpoints object holds (kcm's `maxCapacity`).
pub const MAX_CAPACITY: usize = 1000;

/// The value of the over-capacity annotation.
const TRUNCATED: &str = "truncated";

/// kcm's event source for this controller.
const COMPONENT: &str = "endpoint-controller";

/// kcm's `--concurrent-endpoint-syncs` default.
const WORKERS: usize = 5;

/// How long Endpoints may exist without a Service before they are deleted as leftovers.
/// kcm deletes such Endpoints only when it starts; deleting them at any time, but only once
/// they have been without a Service this long, leaves time for a Service applied just
/// after its Endpoints to appear.
const LEFTOVER_GRACE: Duration = Duration::from_secs(30);

struct Ctx {
    client: kube::Client,
    services: Store<Service>,
    pods: Store<Pod>,
    endpoints: Store<Endpoints>,
    triggers: TriggerTimes,
    events: Events,
    clock: Clock,
    /// Services seen deleted whose Endpoints are still cached: deleted without delay.
    deleted: Mutex<HashSet<ObjectKey>>,
}

fn add(manager: &mut Manager, setup: Setup) {
    let ctx = Arc::new(Ctx {
        services: informers::cache::<Service>(manager),
        pods: informers::cache::<Pod>(manager),
        endpoints: informers::cache::<Endpoints>(manager),
        triggers: TriggerTimes::new(),
        events: Events::new(setup.client.clone(), COMPONENT),
        client: setup.client,
        clock: setup.clock,
        deleted: Mutex::new(HashSet::new()),
    });
    let services = ctx.services.clone();
    let controller = informers::controller::<Service>(manager)
        .named(ENDPOINTS.name)
        .with_predicate(predicate::resource_version_changed())
        .concurrency(WORKERS)
        .watches_cached(
            informers::api::<Pod>(manager),
            informers::config(),
            move |change: &Change<Pod>| services_for_pod_change(&services, change),
        )
        // kcm syncs a Service whose Endpoints were deleted, to write them again.
        .watches_cached(
            informers::api::<Endpoints>(manager),
            informers::config(),
            |change: &Change<Endpoints>| match change.new {
                None => vec![change.key.clone()],
                Some(_) => Vec::new(),
            },
        );
    manager.add(controller, sync_service, ctx.clone());

    let on_delete = ctx.clone();
    let leftovers = informers::controller::<Endpoints>(manager)
        .named("endpoints-controller-leftovers")
        .with_predicate(|old: Option<&Endpoints>, _: &Endpoints| old.is_none())
        .watches_cached(
            informers::api::<Service>(manager),
            informers::config(),
            move |change: &Change<Service>| service_deleted(&on_delete, change),
        );
    manager.add(leftovers, delete_leftover, ctx);
}

/// A deleted Service's Endpoints are to be deleted (kcm's sync of a missing Service).
fn service_deleted(ctx: &Ctx, change: &Change<Service>) -> Vec<ObjectKey> {
    if change.new.is_some() {
        return Vec::new();
    }
    let key = &change.key;
    ctx.triggers
        .forget(key.namespace.as_deref().unwrap_or_default(), &key.name);
    if !ctx.endpoints.contains(key) {
        return Vec::new();
    }
    ctx.deleted
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key.clone());
    vec![key.clone()]
}

/// Brings a Service's Endpoints in line with its pods (kcm's `syncService`).
async fn sync_service(service: Arc<Service>, ctx: Arc<Ctx>) -> Result<Action> {
    if is_external_name(&service) {
        return Ok(Action::await_change());
    }
    let Some(selector) = selector(&service) else {
        // Its users write its Endpoints.
        return Ok(Action::await_change());
    };
    let namespace = service.namespace().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .list_namespace(&namespace)
        .into_iter()
        .filter(|pod| selects(selector, pods::labels(pod)))
        .collect();
    let trigger = ctx.triggers.compute(&service, &pods);
    let mut subsets = desired_subsets(&service, &pods);
    let truncated = truncate(&mut subsets);
    let key = ObjectKey::namespaced(&namespace, service.name_any());
    let current = ctx.endpoints.get(&key);
    if let Some(current) = &current
        && up_to_date(current, &subsets, truncated, &service)
    {
        return Ok(Action::await_change());
    }
    let mut desired = match &current {
        Some(current) => (**current).clone(),
        None => Endpoints {
            metadata: ObjectMeta {
                name: Some(service.name_any()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            subsets: None,
        },
    };
    desired.subsets = (!subsets.is_empty()).then_some(subsets);
    desired.metadata.labels = Some(endpoints_labels(&service));
    let annotations = desired
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    match trigger {
        Some(time) => annotations.insert(
            ANNOTATION_LAST_CHANGE_TRIGGER_TIME.into(),
            format_trigger_time(time),
        ),
        None => annotations.remove(ANNOTATION_LAST_CHANGE_TRIGGER_TIME),
    };
    if truncated {
        annotations.insert(ANNOTATION_OVER_CAPACITY.into(), TRUNCATED.into());
    } else {
        annotations.remove(ANNOTATION_OVER_CAPACITY);
    }
    write(&ctx, &service, desired, current.is_none()).await?;
    Ok(Action::await_change())
}

/// Creates or updates the Endpoints, recording kcm's event when that fails.
async fn write(ctx: &Ctx, service: &Service, desired: Endpoints, create: bool) -> Result<()> {
    let namespace = service.namespace().unwrap_or_default();
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = if create {
        api.create(&PostParams::default(), &desired).await
    } else {
        api.replace(&desired.name_any(), &PostParams::default(), &desired)
            .await
    };
    let Err(error) = result else {
        return Ok(());
    };
    if create && namespace_terminating(&error) {
        // Creates keep failing until the namespace is gone: drop the Service.
        return Ok(());
    }
    let name = service.name_any();
    if create {
        ctx.events.warning(
            &desired,
            "FailedToCreateEndpoint",
            format!("Failed to create endpoint for service {namespace}/{name}: {error}"),
        );
    } else {
        ctx.events.warning(
            &desired,
            "FailedToUpdateEndpoint",
            format!("Failed to update endpoint {namespace}/{name}: {error}"),
        );
    }
    Err(error.into())
}

/// The server refused because the namespace is being deleted.
pub(super) fn namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status)
    if status.code == 403
        && status.details.as_ref().is_some_and(|d| {
            d.causes.iter().any(|c| c.reason == "NamespaceTerminating")
        }))
}

/// The Endpoints' labels: the Service's, with the headless label for a headless Service.
fn endpoints_labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = service.labels().clone();
    if is_service_ip_set(service) {
        labels.remove(LABEL_HEADLESS);
    } else {
        labels.insert(LABEL_HEADLESS.into(), String::new());
    }
    labels
}

/// Whether the Endpoints already say what they should: the same subsets (pods'
/// resourceVersions aside), the Service's labels (the headless label aside), and the
/// over-capacity annotation exactly when truncated. The trigger time is not compared: as in
/// kcm, it is written only with another change.
fn up_to_date(
    current: &Endpoints,
    subsets: &[EndpointSubset],
    truncated: bool,
    service: &Service,
) -> bool {
    let mut labels = current.labels().clone();
    labels.remove(LABEL_HEADLESS);
    let annotated = current.annotations().contains_key(ANNOTATION_OVER_CAPACITY);
    canonical(current.subsets.as_deref().unwrap_or_default()) == canonical(subsets)
        && &labels == service.labels()
        && annotated == truncated
}

/// Subsets as compared: empty lists and unset ones alike, targets' resourceVersions and
/// empty node names dropped.
fn canonical(subsets: &[EndpointSubset]) -> Vec<EndpointSubset> {
    let addresses = |list: &Option<Vec<EndpointAddress>>| {
        let list: Vec<EndpointAddress> = list
            .iter()
            .flatten()
            .map(|a| {
                let mut a = a.clone();
                if let Some(target) = &mut a.target_ref {
                    target.resource_version = None;
                }
                a.node_name = a.node_name.filter(|n| !n.is_empty());
                a.hostname = a.hostname.filter(|h| !h.is_empty());
                a
            })
            .collect();
        (!list.is_empty()).then_some(list)
    };
    subsets
        .iter()
        .map(|s| EndpointSubset {
            addresses: addresses(&s.addresses),
            not_ready_addresses: addresses(&s.not_ready_addresses),
            ports: s.ports.clone().filter(|p| !p.is_empty()),
        })
        .collect()
}

/// The subsets the Service's pods make, packed as kcm's `RepackSubsets` packs them.
fn desired_subsets(service: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSubset> {
    let tolerate_unready = publish_not_ready(service);
    let mut entries = Vec::new();
    for pod in pods {
        if !should_pod_be_in_endpoints(pod, tolerate_unready) {
            continue;
        }
        let Some(mut address) = address_for(service, pod) else {
            continue;
        };
        address.hostname = hostname_for(pod, service);
        let ready = tolerate_unready || pods::is_ready(pod);
        let ports = service_ports(service);
        if ports.is_empty() {
            // A headless Service may have no ports.
            if cluster_ip(service) == "None" {
                entries.push((address, None, ready));
            }
            continue;
        }
        for service_port in ports {
            let Some(number) = find_port(pod, service_port) else {
                continue;
            };
            let port = EndpointPort {
                name: service_port.name.clone().filter(|n| !n.is_empty()),
                port: number,
                protocol: service_port.protocol.clone(),
                app_protocol: service_port.app_protocol.clone(),
            };
            entries.push((address.clone(), Some(port), ready));
        }
    }
    repack(entries)
}

/// The pod's address of the Service's IP family (kcm's `podToEndpointAddressForService`):
/// the first of `ipFamilies`, else that of the cluster IP, else (headless) that of the pod.
fn address_for(service: &Service, pod: &Pod) -> Option<EndpointAddress> {
    let want_v6 = match ip_families(service).first() {
        Some(family) => family == "IPv6",
        None if is_service_ip_set(service) => is_ipv6(cluster_ip(service)),
        None => pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .is_some_and(is_ipv6),
    };
    let ip = pod_ips(pod).into_iter().find(|ip| is_ipv6(ip) == want_v6)?;
    Some(EndpointAddress {
        ip: ip.to_string(),
        node_name: node_name(pod).map(str::to_string),
        target_ref: Some(target_ref(pod)),
        hostname: None,
    })
}

/// A port as subsets are grouped by it.
type PortKey = (Option<String>, i32, Option<String>, Option<String>);

/// An address as kcm de-duplicates them: its IP and its target's uid.
type AddressKey = (String, Option<String>);

/// Packs (address, port, ready) entries into canonical subsets (kcm's `RepackSubsets`):
/// each address once (by IP and pod uid), not-ready winning over ready for a port, ports
/// offered by the same addresses in one subset. Portless entries (a headless Service
/// without ports) make a subset without ports. Addresses are sorted by IP then uid, ports
/// and subsets in a fixed order (kcm orders the last two by hash).
fn repack(entries: Vec<(EndpointAddress, Option<EndpointPort>, bool)>) -> Vec<EndpointSubset> {
    let mut addresses: BTreeMap<AddressKey, EndpointAddress> = BTreeMap::new();
    let mut ports: BTreeMap<PortKey, EndpointPort> = BTreeMap::new();
    let mut by_port: BTreeMap<Option<PortKey>, BTreeMap<AddressKey, bool>> = BTreeMap::new();
    for (address, port, ready) in entries {
        let key = (
            address.ip.clone(),
            address.target_ref.as_ref().and_then(|t| t.uid.clone()),
        );
        addresses.entry(key.clone()).or_insert(address);
        let port_key = port.map(|p| {
            let key = (
                p.name.clone(),
                p.port,
                p.protocol.clone(),
                p.app_protocol.clone(),
            );
            ports.insert(key.clone(), p);
            key
        });
        let set = by_port.entry(port_key).or_default();
        if set.get(&key).is_none_or(|was_ready| *was_ready) {
            set.insert(key, ready);
        }
    }
    let mut groups: BTreeMap<Vec<(AddressKey, bool)>, Vec<PortKey>> = BTreeMap::new();
    for (port, set) in by_port {
        let group = groups.entry(set.into_iter().collect()).or_default();
        group.extend(port);
    }
    groups
        .into_iter()
        .map(|(set, port_keys)| {
            let pick = |want: bool| {
                let list: Vec<EndpointAddress> = set
                    .iter()
                    .filter(|(_, ready)| *ready == want)
                    .filter_map(|(key, _)| addresses.get(key).cloned())
                    .collect();
                (!list.is_empty()).then_some(list)
            };
            let ports: Vec<EndpointPort> = port_keys
                .iter()
                .filter_map(|k| ports.get(k).cloned())
                .collect();
            EndpointSubset {
                addresses: pick(true),
                not_ready_addresses: pick(false),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect()
}

/// Subsets as written by anyone, in kcm's canonical form (`RepackSubsets`, which the
/// mirroring controller applies to the Endpoints it mirrors).
pub(super) fn repack_subsets(subsets: &[EndpointSubset]) -> Vec<EndpointSubset> {
    let mut entries = Vec::new();
    for subset in subsets {
        let ports: Vec<Option<EndpointPort>> = match subset.ports.as_deref() {
            None | Some([]) => vec![None],
            Some(ports) => ports.iter().cloned().map(Some).collect(),
        };
        let addresses = [
            (&subset.addresses, true),
            (&subset.not_ready_addresses, false),
        ];
        for (list, ready) in addresses {
            for address in list.iter().flatten() {
                for port in &ports {
                    entries.push((address.clone(), port.clone(), ready));
                }
            }
        }
    }
    repack(entries)
}

/// Truncates subsets above [`MAX_CAPACITY`] addresses (kcm's `truncateEndpoints`): ready
/// addresses are kept first, each subset keeping its share (rounded up) of what fits.
/// Returns whether anything was cut.
fn truncate(subsets: &mut [EndpointSubset]) -> bool {
    let len = |list: &Option<Vec<EndpointAddress>>| list.as_ref().map_or(0, Vec::len);
    let ready: usize = subsets.iter().map(|s| len(&s.addresses)).sum();
    let not_ready: usize = subsets.iter().map(|s| len(&s.not_ready_addresses)).sum();
    if ready + not_ready <= MAX_CAPACITY {
        return false;
    }
    let truncate_ready = ready > MAX_CAPACITY;
    let (room, total) = if truncate_ready {
        (MAX_CAPACITY, ready)
    } else {
        (MAX_CAPACITY - ready, not_ready)
    };
    let mut left = room;
    for subset in subsets.iter_mut() {
        let list = if truncate_ready {
            subset.not_ready_addresses = None;
            &mut subset.addresses
        } else {
            &mut subset.not_ready_addresses
        };
        let here = len(list);
        // The share, rounded up as kcm's math.Ceil does.
        let share = (here * room).div_ceil(total.max(1)).min(left);
        if let Some(addresses) = list.as_mut() {
            addresses.truncate(share);
        }
        if list.as_ref().is_some_and(Vec::is_empty) {
            *list = None;
        }
        left -= len(list);
    }
    true
}

/// Deletes Endpoints whose Service is gone (see the module docs).
async fn delete_leftover(endpoints: Arc<Endpoints>, ctx: Arc<Ctx>) -> Result<Action> {
    let namespace = endpoints.namespace().unwrap_or_default();
    let key = ObjectKey::namespaced(&namespace, endpoints.name_any());
    let just_deleted = ctx
        .deleted
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&key);
    if endpoints.annotations().contains_key(ANNOTATION_LEADER) || ctx.services.contains(&key) {
        return Ok(Action::await_change());
    }
    if !just_deleted {
        let created = endpoints.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let age = created
            .map(|t| ctx.clock.now().duration_since(t))
            .and_then(|d| Duration::try_from(d).ok())
            .unwrap_or(LEFTOVER_GRACE);
        if age < LEFTOVER_GRACE {
            return Ok(Action::requeue(LEFTOVER_GRACE - age));
        }
    }
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: endpoints.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&endpoints.name_any(), &params).await {
        Ok(_) => {}
        // Gone already, or replaced by a namesake (the uid precondition failed).
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
        Err(error) => return Err(error.into()),
    }
    ctx.triggers.forget(&namespace, &endpoints.name_any());
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;

    fn address(ip: &str, uid: &str) -> EndpointAddress {
        EndpointAddress {
            ip: ip.into(),
            target_ref: Some(ObjectReference {
                uid: Some(uid.into()),
                ..ObjectReference::default()
            }),
            ..EndpointAddress::default()
        }
    }

    fn port(name: &str, number: i32) -> Option<EndpointPort> {
        Some(EndpointPort {
            name: Some(name.into()),
            port: number,
            protocol: Some("TCP".into()),
            app_protocol: None,
        })
    }

    #[test]
    fn repacking_groups_ports_by_their_addresses_and_not_ready_wins() {
        let subsets = repack(vec![
            (address("10.0.0.2", "b"), port("http", 80), true),
            (address("10.0.0.1", "a"), port("http", 80), true),
            (address("10.0.0.1", "a"), port("metrics", 9090), true),
            (address("10.0.0.2", "b"), port("metrics", 9090), true),
            (address("10.0.0.3", "c"), port("http", 80), false),
            (address("10.0.0.3", "c"), port("metrics", 9090), false),
            (address("10.0.0.1", "a"), port("http", 80), false),
        ]);
        assert_eq!(subsets.len(), 2, "{subsets:#?}");
        let http = subsets
            .iter()
            .find(|s| s.ports.as_ref().is_some_and(|p| p.len() == 1))
            .expect("the http subset");
        let ips = |list: &Option<Vec<EndpointAddress>>| {
            list.iter()
                .flatten()
                .map(|a| a.ip.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ips(&http.addresses), ["10.0.0.2"]);
        assert_eq!(ips(&http.not_ready_addresses), ["10.0.0.1", "10.0.0.3"]);
    }

    #[test]
    fn truncation_keeps_ready_addresses_first() {
        let many = |n: usize, prefix: &str| {
            (0..n)
                .map(|i| {
                    address(
                        &format!("{prefix}.{}.{}", i / 250, i % 250),
                        &format!("{prefix}{i}"),
                    )
                })
                .collect::<Vec<_>>()
        };
        let mut subsets = vec![EndpointSubset {
            addresses: Some(many(900, "10.0")),
            not_ready_addresses: Some(many(300, "10.1")),
            ports: None,
        }];
        assert!(truncate(&mut subsets));
        assert_eq!(subsets[0].addresses.as_ref().map(Vec::len), Some(900));
        assert_eq!(
            subsets[0].not_ready_addresses.as_ref().map(Vec::len),
            Some(100)
        );
        let mut small = vec![EndpointSubset {
            addresses: Some(many(10, "10.0")),
            ..EndpointSubset::default()
        }];
        assert!(!truncate(&mut small));
    }
}
