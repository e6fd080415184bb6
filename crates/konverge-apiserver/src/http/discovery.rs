//! Discovery: what clients read to learn which resources exist, in both forms kube-apiserver
//! serves (the legacy per-group-version lists and the aggregated `apidiscovery.k8s.io` lists).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::aggregator::{Aggregator, Remote, Remotes};
use crate::resources::{Catalog, ResourceType, version_priority};

/// The order kube-apiserver lists its groups in (its APIService group priorities); custom
/// resource groups follow, by name.
const GROUP_ORDER: [&str; 20] = [
    "",
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "flowcontrol.apiserver.k8s.io",
];

type Groups = Vec<(String, BTreeMap<String, Vec<Arc<ResourceType>>>)>;

/// Groups and their versions: the core group, the built-in groups in kube-apiserver's order,
/// then the others by name (the order `kubectl api-resources` shows).
fn groups(catalog: &Catalog) -> Groups {
    let mut groups: BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceType>>>> = BTreeMap::new();
    for rt in catalog.all() {
        groups
            .entry(rt.group.clone())
            .or_default()
            .entry(rt.version.clone())
            .or_default()
            .push(rt);
    }
    let mut ordered: Groups = groups.into_iter().collect();
    ordered.sort_by_key(|(name, _)| {
        let rank = GROUP_ORDER
            .iter()
            .position(|g| g == name)
            .unwrap_or(GROUP_ORDER.len());
        (rank, name.clone())
    });
    ordered
}

/// A group's versions in priority order (the first is the preferred one).
fn by_priority(
    versions: &BTreeMap<String, Vec<Arc<ResourceType>>>,
) -> Vec<(&String, &Vec<Arc<ResourceType>>)> {
    let mut sorted: Vec<_> = versions.iter().collect();
    sorted.sort_by_key(|(v, _)| version_priority(v));
    sorted
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_json(name: &str, versions: &BTreeMap<String, Vec<Arc<ResourceType>>>) -> Value {
    let versions: Vec<Value> = by_priority(versions)
        .into_iter()
        .map(|(v, _)| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

/// A group served by aggregated API servers, as kube-aggregator lists it: its versions in
/// the APIServices' order, the first preferred.
fn remote_group_json(name: &str, versions: &[&Arc<Remote>]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|r| json!({"groupVersion": format!("{name}/{}", r.version), "version": r.version}))
        .collect();
    json!({
        "name": name,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

/// The groups only aggregated API servers serve, in the APIServices' order.
fn remote_groups<'a>(
    catalog: &Catalog,
    remotes: &'a Remotes,
) -> Vec<(&'a str, Vec<&'a Arc<Remote>>)> {
    let mut groups: Vec<(&str, Vec<&Arc<Remote>>)> = Vec::new();
    for remote in remotes.all() {
        if remote.group.is_empty() || catalog.serves_group_version(&remote.group, &remote.version) {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| *g == remote.group) {
            Some((_, versions)) => versions.push(remote),
            None => groups.push((&remote.group, vec![remote])),
        }
    }
    groups
}

/// `/apis`: the groups served here, then those of aggregated API servers.
pub fn group_list(catalog: &Catalog, remotes: &Remotes) -> Value {
    let mut groups: Vec<Value> = groups(catalog)
        .iter()
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, versions)| group_json(name, versions))
        .collect();
    groups.extend(
        remote_groups(catalog, remotes)
            .iter()
            .map(|(name, versions)| remote_group_json(name, versions)),
    );
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if the group is served, here or by aggregated API servers.
pub fn group(catalog: &Catalog, remotes: &Remotes, name: &str) -> Option<Value> {
    let all = groups(catalog);
    let mut group = match all.iter().find(|(g, _)| g == name && !name.is_empty()) {
        Some((_, versions)) => group_json(name, versions),
        None => {
            let remote = remote_groups(catalog, remotes);
            let (_, versions) = remote.iter().find(|(g, _)| *g == name)?;
            remote_group_json(name, versions)
        }
    };
    group["kind"] = json!("APIGroup");
    group["apiVersion"] = json!("v1");
    Some(group)
}

/// The aggregated discovery groups (`APIGroupDiscovery`) of aggregated API servers, with what
/// each server's discovery said of its resources.
pub fn remote_aggregated(
    catalog: &Catalog,
    remotes: &Remotes,
    aggregator: &Aggregator,
) -> Vec<Value> {
    remote_groups(catalog, remotes)
        .iter()
        .map(|(name, versions)| {
            let versions: Vec<Value> = versions.iter().map(|r| aggregator.discovered(r)).collect();
            json!({
                "metadata": {"name": name, "creationTimestamp": null},
                "versions": versions,
            })
        })
        .collect()
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resource_list(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let all = groups(catalog);
    let resources = all
        .iter()
        .find(|(g, _)| g == group)
        .and_then(|(_, versions)| versions.get(version))?;
    let mut list = Vec::new();
    for rt in resources {
        let mut entry = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": rt.verbs,
        });
        if !rt.short_names.is_empty() {
            entry["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            entry["categories"] = json!(rt.categories);
        }
        if let Some(hash) = &rt.storage_version_hash {
            entry["storageVersionHash"] = json!(hash);
        }
        list.push(entry);
        for sub in rt.all_subresources() {
            let mut entry = json!({
                "name": format!("{}/{}", rt.plural, sub.name),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": sub.verbs,
            });
            if let Some((group, version, kind)) = sub.kind {
                entry["kind"] = json!(kind);
                if group != rt.group || version != rt.version {
                    entry["group"] = json!(group);
                    entry["version"] = json!(version);
                }
            }
            list.push(entry);
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": list,
    }))
}

/// The aggregated discovery document for the core group (`core = true`, served at `/api`) or
/// every named group (`/apis`), as `apidiscovery.k8s.io/{api_version}`.
pub fn aggregated(catalog: &Catalog, core: bool, api_version: &str, remote: Vec<Value>) -> Value {
    let mut items: Vec<Value> = groups(catalog)
        .iter()
        .filter(|(name, _)| name.is_empty() == core)
        .map(|(name, versions)| {
            let versions: Vec<Value> = by_priority(versions)
                .into_iter()
                .map(|(version, resources)| {
                    let resources: Vec<Value> =
                        resources.iter().map(|rt| aggregated_resource(rt)).collect();
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !name.is_empty() {
                metadata["name"] = json!(name);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    if !core {
        items.extend(remote);
    }
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{api_version}"),
        "metadata": {},
        "items": items,
    })
}

fn aggregated_resource(rt: &ResourceType) -> Value {
    let kind = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let subresources: Vec<Value> = rt
        .all_subresources()
        .into_iter()
        .map(|sub| {
            let response = match sub.kind {
                Some((group, version, kind)) => {
                    json!({"group": group, "version": version, "kind": kind})
                }
                None => kind.clone(),
            };
            json!({"subresource": sub.name, "responseKind": response, "verbs": sub.verbs})
        })
        .collect();
    let mut entry = json!({
        "resource": rt.plural,
        "responseKind": kind,
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": rt.verbs,
    });
    if let Some(hash) = &rt.storage_version_hash {
        entry["storageVersionHash"] = json!(hash);
    }
    if !rt.short_names.is_empty() {
        entry["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        entry["categories"] = json!(rt.categories);
    }
    if !subresources.is_empty() {
        entry["subresources"] = json!(subresources);
    }
    entry
}
