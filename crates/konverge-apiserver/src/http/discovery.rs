//! Discovery: what clients read to learn which resources exist, in both forms kube-apiserver
//! serves (the legacy per-group-version lists and the aggregated `apidiscovery.k8s.io` lists).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::{Catalog, ResourceType};

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

/// Kubernetes' version priority: GA before beta before alpha, higher numbers first, and
/// versions that do not look like Kubernetes versions last, alphabetically.
fn version_priority(version: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (level, minor) = if tail.is_empty() {
            (0, "0")
        } else if let Some(m) = tail.strip_prefix("beta") {
            (1, m)
        } else if let Some(m) = tail.strip_prefix("alpha") {
            (2, m)
        } else {
            return None;
        };
        let minor: u64 = if minor.is_empty() && level > 0 {
            0
        } else {
            minor.parse().ok()?
        };
        Some((level, major, minor))
    });
    match parsed {
        Some((level, major, minor)) => (
            level,
            std::cmp::Reverse(major),
            std::cmp::Reverse(minor),
            String::new(),
        ),
        None => (
            3,
            std::cmp::Reverse(0),
            std::cmp::Reverse(0),
            version.to_string(),
        ),
    }
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

/// `/apis`.
pub fn group_list(catalog: &Catalog) -> Value {
    let groups: Vec<Value> = groups(catalog)
        .iter()
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, versions)| group_json(name, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if the group is served.
pub fn group(catalog: &Catalog, name: &str) -> Option<Value> {
    let all = groups(catalog);
    let (_, versions) = all.iter().find(|(g, _)| g == name && !name.is_empty())?;
    let mut group = group_json(name, versions);
    group["kind"] = json!("APIGroup");
    group["apiVersion"] = json!("v1");
    Some(group)
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
pub fn aggregated(catalog: &Catalog, core: bool, api_version: &str) -> Value {
    let items: Vec<Value> = groups(catalog)
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
