//! Discovery: what clients read to learn which resources exist, in both forms kube-apiserver
//! serves (the legacy per-group-version lists and the aggregated `apidiscovery.k8s.io` lists).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::{Catalog, ResourceType};

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const SUB_VERBS: [&str; 3] = ["get", "patch", "update"];

/// Groups and their versions, core group first, then by name (the order kubectl shows).
fn groups(catalog: &Catalog) -> BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceType>>>> {
    let mut groups: BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceType>>>> = BTreeMap::new();
    for rt in catalog.all() {
        groups
            .entry(rt.group.clone())
            .or_default()
            .entry(rt.version.clone())
            .or_default()
            .push(rt);
    }
    groups
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
    let versions = all.get(name).filter(|_| !name.is_empty())?;
    let mut group = group_json(name, versions);
    group["kind"] = json!("APIGroup");
    group["apiVersion"] = json!("v1");
    Some(group)
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resource_list(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let all = groups(catalog);
    let resources = all.get(group)?.get(version)?;
    let mut list = Vec::new();
    for rt in resources {
        let mut entry = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
        });
        if !rt.short_names.is_empty() {
            entry["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            entry["categories"] = json!(rt.categories);
        }
        list.push(entry);
        if rt.status {
            list.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": SUB_VERBS,
            }));
        }
        if rt.scale.is_some() {
            list.push(json!({
                "name": format!("{}/scale", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": SUB_VERBS,
            }));
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            list.push(json!({
                "name": "namespaces/finalize",
                "singularName": "",
                "namespaced": false,
                "kind": "Namespace",
                "verbs": ["update"],
            }));
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
    let mut subresources = Vec::new();
    if rt.status {
        subresources
            .push(json!({"subresource": "status", "responseKind": kind, "verbs": SUB_VERBS}));
    }
    if rt.scale.is_some() {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": SUB_VERBS,
        }));
    }
    let mut entry = json!({
        "resource": rt.plural,
        "responseKind": kind,
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": VERBS,
    });
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
