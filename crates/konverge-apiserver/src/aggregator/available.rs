//! Whether a remote APIService is available, by kube-aggregator's remote availability checks
//! (`apiservice-status-remote-available-controller`), with their reasons and messages; and
//! what its server's discovery says of its resources (`apiservice-discovery-controller`).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use http_body_util::Empty;
use serde_json::{Value, json};

use konverge_apimachinery::gofmt::quote;

use super::{Aggregator, Remote};
use crate::auth::user::UserInfo;
use crate::error::Reason;
use crate::webhook::{CallError, ServiceReference, client_tls, connect, exchange};

/// How long a check's request may take (kube's discovery client timeout).
const TIMEOUT: Duration = Duration::from_secs(5);

/// Aggregated discovery, as kube-aggregator asks a server for it.
const ACCEPT_AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// The `Available` condition a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// kube's reason (`Passed`, `ServiceNotFound`, `MissingEndpoints`, ...).
    pub reason: &'static str,
    /// kube's message.
    pub message: String,
}

impl Availability {
    fn no(reason: &'static str, message: String) -> Availability {
        Availability {
            status: "False",
            reason,
            message,
        }
    }

    /// `remote`'s Service or Endpoints could not be read.
    fn unknown(reason: &'static str, remote: &Remote, error: &str) -> Availability {
        Availability {
            status: "Unknown",
            reason,
            message: format!(
                "service/{} in {} cannot be checked due to: {error}",
                remote.service,
                quote(&remote.namespace)
            ),
        }
    }
}

/// A GET's answer: status, content type, body.
type Answer = (u16, Option<String>, Bytes);

impl Aggregator {
    /// Checks `remote` as kube's remote availability controller does: its Service exists,
    /// (for a ClusterIP Service) listens on the port and has endpoints with addresses for
    /// it, and its server answers its discovery path (as `system:kube-aggregator` in
    /// `system:masters`, not verifying its certificate) with a 2xx within 5 seconds.
    pub async fn check(&self, remote: &Remote) -> Availability {
        let catalog = self.lister.catalog();
        let name = &remote.service;
        let namespace = &remote.namespace;
        let (Some(services), Some(endpoints)) = (
            catalog.get("", "v1", "services"),
            catalog.get("", "v1", "endpoints"),
        ) else {
            return Availability::no(
                "ServiceNotFound",
                format!("service/{name} in {} is not present", quote(namespace)),
            );
        };
        let service = match self.lister.get(&services, Some(namespace), name).await {
            Ok(service) => service,
            Err(e) if e.reason == Reason::NotFound => {
                return Availability::no(
                    "ServiceNotFound",
                    format!("service/{name} in {} is not present", quote(namespace)),
                );
            }
            Err(e) => return Availability::unknown("ServiceAccessError", remote, &e.message),
        };
        let cluster_ip = service
            .pointer("/spec/type")
            .and_then(Value::as_str)
            .is_none_or(|t| t == "ClusterIP");
        if cluster_ip {
            let port = service
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|p| p["port"].as_i64() == Some(i64::from(remote.port)));
            let Some(port) = port else {
                return Availability::no(
                    "ServicePortError",
                    format!(
                        "service/{name} in {} is not listening on port {}",
                        quote(namespace),
                        remote.port
                    ),
                );
            };
            let port_name = port["name"].as_str().unwrap_or_default();
            let endpoints = match self.lister.get(&endpoints, Some(namespace), name).await {
                Ok(endpoints) => endpoints,
                Err(e) if e.reason == Reason::NotFound => {
                    return Availability::no(
                        "EndpointsNotFound",
                        format!(
                            "cannot find endpoints for service/{name} in {}",
                            quote(namespace)
                        ),
                    );
                }
                Err(e) => {
                    return Availability::unknown("EndpointsAccessError", remote, &e.message);
                }
            };
            let active = endpoints
                .get("subsets")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|s| s["addresses"].as_array().is_some_and(|a| !a.is_empty()))
                .flat_map(|s| s["ports"].as_array().into_iter().flatten())
                .any(|p| p["name"].as_str().unwrap_or_default() == port_name);
            if !active {
                return Availability::no(
                    "MissingEndpoints",
                    format!(
                        "endpoints for service/{name} in {} have no addresses with port name {}",
                        quote(namespace),
                        quote(port_name)
                    ),
                );
            }
        }
        let checker = UserInfo::new("system:kube-aggregator", &["system:masters"]);
        let path = remote.discovery_path();
        let failed = match self.resolve(remote).await {
            Err(e) => Some(e.to_string()),
            Ok(addr) => {
                let url = format!("https://{addr}{path}");
                match self.get(remote, addr, true, &path, "", &checker).await {
                    Ok((status, _, _)) if (200..300).contains(&status) => None,
                    Ok((status, _, _)) => Some(format!(
                        "failing or missing response from {url}: bad status from {url}: {status}"
                    )),
                    Err(CallError::Timeout) => Some(format!("timed out waiting for {url}")),
                    Err(e) => Some(format!(
                        "failing or missing response from {url}: Get \"{url}\": {e}"
                    )),
                }
            }
        };
        match failed {
            Some(message) => Availability::no("FailedDiscoveryCheck", message),
            None => Availability {
                status: "True",
                reason: "Passed",
                message: "all checks passed".into(),
            },
        }
    }

    /// Reads what `remote`'s server says of its group-version, as kube's discovery
    /// controller does: its aggregated discovery when it serves one, its legacy list of
    /// resources otherwise; as an `APIVersionDiscovery` without freshness.
    pub async fn discover(&self, remote: &Remote) -> Result<Value, String> {
        let addr = self.resolve(remote).await.map_err(|e| e.to_string())?;
        let masters = UserInfo::new("system:kube-aggregator", &["system:masters"]);
        let (status, content_type, body) = self
            .get(
                remote,
                addr,
                remote.insecure,
                "/apis",
                ACCEPT_AGGREGATED,
                &masters,
            )
            .await
            .map_err(|e| e.to_string())?;
        let aggregated = content_type.as_deref().is_some_and(|ct| {
            ct.contains("g=apidiscovery.k8s.io")
                && (ct.contains("v=v2;") || ct.contains("v=v2beta1;") || ct.ends_with("v=v2"))
        });
        if status == 200 && aggregated {
            let list: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
            let found = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| {
                    g.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        == remote.group
                })
                .flat_map(|g| g["versions"].as_array().into_iter().flatten())
                .find(|v| v["version"] == remote.version.as_str())
                .cloned();
            return Ok(found.unwrap_or_else(|| json!({"version": remote.version})));
        }
        let path = remote.discovery_path();
        let plain = UserInfo::new("system:kube-aggregator", &[]);
        let (status, _, body) = self
            .get(
                remote,
                addr,
                remote.insecure,
                &path,
                "application/json",
                &plain,
            )
            .await
            .map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!(
                "failed to download legacy discovery for {path}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let list: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        Ok(json!({
            "version": remote.version,
            "resources": legacy_to_aggregated(&list, &remote.group, &remote.version),
        }))
    }

    async fn resolve(&self, remote: &Remote) -> Result<SocketAddr, CallError> {
        let service = ServiceReference {
            namespace: remote.namespace.clone(),
            name: remote.service.clone(),
            path: None,
            port: remote.port,
        };
        self.services.resolve(&service, self.lister.as_ref()).await
    }

    /// A GET of `path` from `remote`'s server at `addr`, as the front proxy acting for `user`.
    async fn get(
        &self,
        remote: &Remote,
        addr: SocketAddr,
        insecure: bool,
        path: &str,
        accept: &str,
        user: &UserInfo,
    ) -> Result<Answer, CallError> {
        let exchange = async {
            let tls = client_tls(
                remote.ca_bundle.as_deref(),
                insecure,
                Some(self.front_proxy.identity()),
            )?;
            let mut send = connect::<Empty<Bytes>>(addr, &remote.server_name(), tls).await?;
            let mut request = http::Request::get(path)
                .body(Empty::new())
                .map_err(|e| CallError::Http(e.to_string()))?;
            let headers = request.headers_mut();
            if let Ok(host) = HeaderValue::from_str(&addr.to_string()) {
                headers.insert(http::header::HOST, host);
            }
            if !accept.is_empty()
                && let Ok(accept) = HeaderValue::from_str(accept)
            {
                headers.insert(http::header::ACCEPT, accept);
            }
            super::proxy::set_user_headers(headers, user);
            exchange(&mut send, request).await
        };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .unwrap_or(Err(CallError::Timeout))
    }
}

/// A legacy `APIResourceList`'s resources as aggregated discovery lists them (kube's
/// `ConvertGroupVersionIntoToDiscovery`): each resource with its subresources (`name/sub`).
pub fn legacy_to_aggregated(list: &Value, group: &str, version: &str) -> Vec<Value> {
    let resources: Vec<&Value> = list["resources"].as_array().into_iter().flatten().collect();
    let kind_of = |r: &Value| {
        json!({
            "group": r["group"].as_str().unwrap_or(group),
            "version": r["version"].as_str().unwrap_or(version),
            "kind": r["kind"],
        })
    };
    let mut out = Vec::new();
    for r in &resources {
        let Some(name) = r["name"].as_str().filter(|n| !n.contains('/')) else {
            continue;
        };
        let mut entry = json!({
            "resource": name,
            "responseKind": kind_of(r),
            "scope": if r["namespaced"].as_bool().unwrap_or(false) { "Namespaced" } else { "Cluster" },
            "singularResource": r["singularName"],
            "verbs": r["verbs"],
        });
        for key in ["shortNames", "categories"] {
            if r[key].as_array().is_some_and(|a| !a.is_empty()) {
                entry[key] = r[key].clone();
            }
        }
        let subresources: Vec<Value> = resources
            .iter()
            .filter_map(|s| {
                let sub = s["name"].as_str()?.strip_prefix(name)?.strip_prefix('/')?;
                Some(json!({"subresource": sub, "responseKind": kind_of(s), "verbs": s["verbs"]}))
            })
            .collect();
        if !subresources.is_empty() {
            entry["subresources"] = Value::from(subresources);
        }
        out.push(entry);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_lists_become_aggregated_resources() {
        let list = json!({
            "kind": "APIResourceList",
            "groupVersion": "wardle.example.com/v1alpha1",
            "resources": [
                {"name": "flunders", "singularName": "flunder", "namespaced": true,
                 "kind": "Flunder", "verbs": ["get", "list"], "shortNames": ["fl"]},
                {"name": "flunders/status", "singularName": "", "namespaced": true,
                 "kind": "Flunder", "verbs": ["get", "patch"]},
                {"name": "fischers", "singularName": "fischer", "namespaced": false,
                 "kind": "Fischer", "verbs": ["get"]},
            ],
        });
        let resources = legacy_to_aggregated(&list, "wardle.example.com", "v1alpha1");
        assert_eq!(
            resources[0],
            json!({
                "resource": "flunders",
                "responseKind": {"group": "wardle.example.com", "version": "v1alpha1", "kind": "Flunder"},
                "scope": "Namespaced",
                "singularResource": "flunder",
                "verbs": ["get", "list"],
                "shortNames": ["fl"],
                "subresources": [{
                    "subresource": "status",
                    "responseKind": {"group": "wardle.example.com", "version": "v1alpha1", "kind": "Flunder"},
                    "verbs": ["get", "patch"],
                }],
            })
        );
        assert_eq!(resources[1]["scope"], "Cluster");
        assert_eq!(resources.len(), 2);
    }
}
