//! The APIServices of custom resource groups, as kube-apiserver's crdregistration and
//! autoregister controllers keep them: every group-version a CustomResourceDefinition serves
//! (and no built-in group-version) has `<version>.<group>`, labelled
//! `kube-aggregator.kubernetes.io/automanaged: "true"`, with priorities 1000 and 100; its
//! spec is put back when changed, it is recreated when deleted, and it is deleted when no
//! definition serves it any more. APIServices without the label, or registered at start for
//! built-in groups (`onstart`), are left alone.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions};
use crate::resources::crd;

/// The label that says who manages an APIService.
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// The spec kube's crdregistration controller wants for a custom group-version.
fn desired_spec(group: &str, version: &str) -> Value {
    json!({
        "group": group,
        "version": version,
        "groupPriorityMinimum": 1000,
        "versionPriority": 100,
    })
}

/// Whether `spec` is `desired`, fields Go leaves out when empty aside.
fn same_spec(spec: &Value, desired: &Value) -> bool {
    let mut kept = spec.as_object().cloned().unwrap_or_default();
    kept.retain(|_, v| !(v.is_null() || *v == json!(false) || *v == json!("")));
    Value::Object(kept) == *desired
}

/// Whether the APIService is kept in sync here (labelled `"true"`, not `onstart`).
fn managed(service: &Value) -> bool {
    service["metadata"]["labels"][AUTOMANAGED] == "true"
}

/// One pass: every custom group-version's APIService made what it should be.
pub async fn sync(registry: &Registry) {
    let catalog = registry.catalog();
    let (Some(definitions), Some(services)) = (
        catalog.get(crd::GROUP, "v1", "customresourcedefinitions"),
        catalog.get("apiregistration.k8s.io", "v1", "apiservices"),
    ) else {
        return;
    };
    let all = ListOptions::default();
    let (defined, current) = match (
        registry.list(&definitions, None, &all).await,
        registry.list(&services, None, &all).await,
    ) {
        (Ok(defined), Ok(current)) => (defined, current),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %e, "listing definitions and APIServices failed");
            return;
        }
    };
    let mut wanted: BTreeMap<String, Value> = BTreeMap::new();
    for definition in &defined.items {
        let group = definition["spec"]["group"].as_str().unwrap_or_default();
        for version in definition["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = version["name"].as_str().unwrap_or_default();
            if version["served"] != json!(true)
                || name.is_empty()
                || super::bootstrap::is_builtin_group_version(group, name)
            {
                continue;
            }
            wanted.insert(format!("{name}.{group}"), desired_spec(group, name));
        }
    }
    let current: BTreeMap<&str, &Value> = current
        .items
        .iter()
        .filter_map(|s| Some((s.pointer("/metadata/name")?.as_str()?, &**s)))
        .collect();
    let opts = WriteOptions::default();
    for (name, spec) in &wanted {
        let result = match current.get(name.as_str()) {
            None => registry
                .create(
                    &services,
                    None,
                    json!({
                        "metadata": {"name": name, "labels": {AUTOMANAGED: "true"}},
                        "spec": spec,
                    }),
                    &opts,
                )
                .await
                .map(|_| ()),
            // Not ours (no label, or a built-in one registered at start): left alone.
            Some(service) if !managed(service) => Ok(()),
            Some(service) if same_spec(&service["spec"], spec) => Ok(()),
            Some(service) => {
                let mut updated = (*service).clone();
                updated["spec"] = spec.clone();
                registry
                    .update(&services, None, name, updated, None, &opts)
                    .await
                    .map(|_| ())
            }
        };
        super::report_write(result, &format!("APIService {name}"));
    }
    for (name, service) in &current {
        if managed(service) && !wanted.contains_key(*name) {
            let deleted = registry
                .delete(&services, None, name, &DeleteOptions::default())
                .await
                .map(|_| ());
            super::report_write(deleted, &format!("APIService {name}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_compare_as_go_writes_them() {
        let desired = desired_spec("example.com", "v1");
        assert!(same_spec(&desired, &desired));
        let mut written = desired.clone();
        written["insecureSkipTLSVerify"] = json!(false);
        written["service"] = Value::Null;
        assert!(same_spec(&written, &desired));
        written["versionPriority"] = json!(15);
        assert!(!same_spec(&written, &desired));
        let mut pointed = desired.clone();
        pointed["service"] = json!({"namespace": "x", "name": "y"});
        assert!(!same_spec(&pointed, &desired));
    }
}
