//! What the server keeps as it wants it, whatever clients did: objects created when missing
//! (a restarted server finds what it made) and fields brought back to what the server says
//! (the `kubernetes` Service, its endpoints). Used by the bootstrap ([`super::bootstrap`])
//! and the endpoint reconciler ([`super::endpoints`]).

use serde_json::Value;

use crate::error::{ApiError, Reason};
use crate::registry::{Registry, WriteOptions};
use crate::resources::ResourceType;

/// The field manager of what the server writes at start-up.
const MANAGER: &str = "kube-apiserver";

/// The name of the ServiceCIDR made from the service IP range, and of the Service, Endpoints
/// and EndpointSlice that point at the servers.
pub(crate) const KUBERNETES: &str = "kubernetes";

/// Creates `obj` as `resource` unless it exists (a restarted server finds what it made).
pub(crate) async fn ensure(
    registry: &Registry,
    group: &str,
    version: &str,
    plural: &str,
    namespace: Option<&str>,
    obj: Value,
) -> Result<(), ApiError> {
    let Some(rt) = registry.catalog().get(group, version, plural) else {
        return Ok(());
    };
    ensure_as(registry, &rt, namespace, obj, MANAGER).await
}

/// [`ensure`], for a resource looked up already, written as `manager`.
pub(crate) async fn ensure_as(
    registry: &Registry,
    rt: &ResourceType,
    namespace: Option<&str>,
    obj: Value,
    manager: &str,
) -> Result<(), ApiError> {
    // Looked up first, as kube-apiserver's bootstrap controllers do: creating a Service
    // that exists would first fail to allocate its (taken) cluster IP.
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match registry.get(rt, namespace, name, None).await {
        Ok(_) => return Ok(()),
        Err(e) if e.reason == Reason::NotFound => {}
        Err(e) => return Err(e),
    }
    match registry
        .create(rt, namespace, obj, &write_options_of(manager))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.reason == Reason::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// How the server writes what it bootstraps.
pub(crate) fn write_options() -> WriteOptions {
    write_options_of(MANAGER)
}

/// How the server writes what it bootstraps as `manager`.
pub(crate) fn write_options_of(manager: &str) -> WriteOptions {
    WriteOptions {
        field_manager: Some(manager.into()),
        ..WriteOptions::default()
    }
}

/// The field manager of most objects the server bootstraps.
pub(crate) const fn manager() -> &'static str {
    MANAGER
}

/// Creates `desired` as `resource` if it is missing, or brings the fields at `fields` (JSON
/// pointers) of the existing object back to `desired`'s, as kube-apiserver's endpoint
/// reconciler keeps the `kubernetes` Service pointing at the server.
pub(crate) async fn reconcile(
    registry: &Registry,
    group: &str,
    plural: &str,
    desired: Value,
    fields: &[&str],
) -> Result<(), ApiError> {
    let Some(rt) = registry.catalog().get(group, "v1", plural) else {
        return Ok(());
    };
    let current = match registry.get(&rt, Some("default"), KUBERNETES, None).await {
        Ok(current) => current,
        Err(e) if e.reason == Reason::NotFound => {
            return ensure(registry, group, "v1", plural, Some("default"), desired).await;
        }
        Err(e) => return Err(e),
    };
    let mut updated = current.clone();
    for field in fields {
        let want = desired.pointer(field).cloned();
        let (parent, name) = field.rsplit_once('/').unwrap_or(("", field));
        if let Some(parent) = updated.pointer_mut(parent).and_then(Value::as_object_mut) {
            match want {
                Some(want) => parent.insert(name.to_string(), want),
                None => parent.remove(name),
            };
        }
    }
    if updated == current {
        return Ok(());
    }
    registry
        .update(
            &rt,
            Some("default"),
            KUBERNETES,
            updated,
            None,
            &write_options(),
        )
        .await
        .map(|_| ())
}
