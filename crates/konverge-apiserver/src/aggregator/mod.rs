//! kube-aggregator's part of the server: a group-version whose APIService names a Service is
//! served by the aggregated API server behind that Service.
//!
//! - [`Aggregator`] keeps which group-versions are remote ([`Remotes`], rebuilt when, and
//!   only when, APIServices change) and proxies every request under `/apis/{group}/{version}`
//!   of one to its server ([`proxy`]), after the request was authenticated, authorized and
//!   classified here, as kube-aggregator's proxy handler does: only while the APIService is
//!   `Available`, to an endpoint of its Service, verifying the server by the APIService's
//!   `caBundle` (or not, with `insecureSkipTLSVerify`), as the front proxy
//!   ([`FrontProxy`]: a client certificate its server trusts through the
//!   `extension-apiserver-authentication` ConfigMap), with the user in `X-Remote-User`,
//!   `X-Remote-Group` and `X-Remote-Extra-*` headers.
//! - [`available`]: whether a remote APIService is available (kube's
//!   `apiservice-status-remote-available-controller` checks, reasons and messages), and what
//!   its server's discovery says (kube's `apiservice-discovery-controller`), for
//!   `controllers::api_service_status` to write and for discovery to publish.
//! - Discovery lists remote groups in `/apis` and answers `/apis/{group}` from APIServices,
//!   as kube-aggregator does; the aggregated discovery documents carry what each server's
//!   own discovery said (`Stale` when it could not be read).

pub mod available;
mod front_proxy;
mod proxy;

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use base64::Engine as _;
use serde_json::Value;

pub use front_proxy::{CLIENT_NAME, FrontProxy, FrontProxyError};

use crate::lister::{Changes, Lister, View};
use crate::webhook::Webhooks;

/// The APIServices' group.
pub const GROUP: &str = "apiregistration.k8s.io";

/// A group-version served by an aggregated API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The APIService's name: `{version}.{group}`.
    pub name: String,
    /// The group.
    pub group: String,
    /// The version.
    pub version: String,
    /// `spec.groupPriorityMinimum`.
    pub group_priority: i64,
    /// `spec.versionPriority`.
    pub version_priority: i64,
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// The Service's port (default 443).
    pub port: i32,
    /// `spec.caBundle`, decoded.
    pub ca_bundle: Option<Vec<u8>>,
    /// `spec.insecureSkipTLSVerify`.
    pub insecure: bool,
    /// Whether its `Available` condition is `True`.
    pub available: bool,
}

impl Remote {
    /// The remote group-version of an APIService, if it names a Service.
    fn of(api_service: &Value) -> Option<Remote> {
        let spec = api_service.get("spec")?;
        let service = spec.get("service").filter(|s| s.is_object())?;
        fn text<'a>(v: &'a Value, key: &str) -> &'a str {
            v.get(key).and_then(Value::as_str).unwrap_or_default()
        }
        let ca_bundle = spec
            .get("caBundle")
            .and_then(Value::as_str)
            .filter(|b| !b.is_empty())
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        let available = api_service
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        Some(Remote {
            name: crate::resources::meta::meta_str(api_service, "name")
                .unwrap_or_default()
                .to_string(),
            group: text(spec, "group").to_string(),
            version: text(spec, "version").to_string(),
            group_priority: spec["groupPriorityMinimum"].as_i64().unwrap_or_default(),
            version_priority: spec["versionPriority"].as_i64().unwrap_or_default(),
            namespace: text(service, "namespace").to_string(),
            service: text(service, "name").to_string(),
            port: service["port"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(443),
            ca_bundle,
            insecure: spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false),
            available,
        })
    }

    /// The host name its server's certificate must name: `{service}.{namespace}.svc`.
    pub fn server_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }

    /// Its discovery path: `/apis/{group}/{version}` (`/api/{version}` for `v1.`).
    pub fn discovery_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

/// Every remote group-version, in kube-aggregator's order: groups by priority (highest
/// first), then name; versions by priority, then Kubernetes' version order.
#[derive(Debug, Default)]
pub struct Remotes {
    all: Vec<Arc<Remote>>,
}

impl Remotes {
    fn new(mut all: Vec<Remote>) -> Remotes {
        // A group's priority is its highest version's.
        let mut group_priority: BTreeMap<String, i64> = BTreeMap::new();
        for remote in &all {
            let p = group_priority
                .entry(remote.group.clone())
                .or_insert(i64::MIN);
            *p = (*p).max(remote.group_priority);
        }
        all.sort_by(|a, b| {
            let ga = group_priority[&a.group];
            let gb = group_priority[&b.group];
            gb.cmp(&ga)
                .then_with(|| a.group.cmp(&b.group))
                .then_with(|| b.version_priority.cmp(&a.version_priority))
                .then_with(|| {
                    crate::resources::version_priority(&a.version)
                        .cmp(&crate::resources::version_priority(&b.version))
                })
        });
        Remotes {
            all: all.into_iter().map(Arc::new).collect(),
        }
    }

    /// Every remote group-version, in order.
    pub fn all(&self) -> &[Arc<Remote>] {
        &self.all
    }

    /// The remote `group`/`version`, if it is one.
    pub fn get(&self, group: &str, version: &str) -> Option<&Arc<Remote>> {
        self.all
            .iter()
            .find(|r| r.group == group && r.version == version)
    }

    /// The remote versions of `group`, in order.
    pub fn group(&self, group: &str) -> Vec<&Arc<Remote>> {
        self.all.iter().filter(|r| r.group == group).collect()
    }
}

/// The aggregator: which group-versions are remote, what their servers' discovery said,
/// and the proxy to them.
pub struct Aggregator {
    lister: Arc<dyn Lister>,
    services: Webhooks,
    front_proxy: Arc<FrontProxy>,
    remotes: View<Remotes>,
    /// What each remote group-version's server said of its resources (an
    /// `APIVersionDiscovery`), and whether that is current.
    discovered: RwLock<BTreeMap<(String, String), (Value, bool)>>,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

impl Aggregator {
    /// An aggregator reading APIServices through `lister`, reaching Services' endpoints as
    /// `services` resolves them, as `front_proxy`.
    pub fn new(
        lister: Arc<dyn Lister>,
        services: Webhooks,
        front_proxy: Arc<FrontProxy>,
    ) -> Aggregator {
        Aggregator {
            lister,
            services,
            front_proxy,
            remotes: View::new(Changes::ApiServices),
            discovered: RwLock::default(),
        }
    }

    /// The front proxy's identity.
    pub fn front_proxy(&self) -> &Arc<FrontProxy> {
        &self.front_proxy
    }

    /// The remote group-versions as of the APIServices' latest change (none if they cannot
    /// be read).
    pub async fn remotes(&self) -> Arc<Remotes> {
        if let Some(fresh) = self.remotes.fresh(self.lister.as_ref()) {
            return fresh;
        }
        let built = self
            .remotes
            .get(self.lister.as_ref(), |_| async {
                let Some(rt) = self.lister.catalog().get(GROUP, "v1", "apiservices") else {
                    return Ok(Remotes::default());
                };
                let listed = self.lister.list(&rt, None, None).await?;
                Ok(Remotes::new(
                    listed.iter().filter_map(|s| Remote::of(s)).collect(),
                ))
            })
            .await;
        match built {
            Ok(remotes) => remotes,
            Err(e) => {
                tracing::warn!(error = %e, "reading APIServices failed");
                Arc::default()
            }
        }
    }

    /// The remote group-version a request path is under (`/apis/{group}/{version}...`).
    pub async fn remote_of_path(&self, path: &str) -> Option<Arc<Remote>> {
        let mut parts = path.split('/').filter(|s| !s.is_empty());
        let (Some("apis"), Some(group), Some(version)) = (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let remote = self.remotes().await.get(group, version).cloned()?;
        // Groups served here are never proxied, whatever an APIService says.
        (!self.lister.catalog().serves_group_version(group, version)).then_some(remote)
    }

    /// Records what `remote`'s server said of its resources, or that it could not be read
    /// (what was read before then stays, marked stale).
    pub fn set_discovered(&self, remote: &Remote, discovered: Option<Value>) {
        let key = (remote.group.clone(), remote.version.clone());
        let mut all = self
            .discovered
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match discovered {
            Some(version) => {
                all.insert(key, (version, true));
            }
            None => {
                let empty = serde_json::json!({"version": remote.version});
                all.entry(key).or_insert((empty, false)).1 = false;
            }
        }
    }

    /// Forgets what was read of group-versions no longer remote.
    pub fn retain_discovered(&self, remotes: &Remotes) {
        self.discovered
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(group, version), _| remotes.get(group, version).is_some());
    }

    /// The aggregated discovery entry (`APIVersionDiscovery`) of `remote`: what its server
    /// said, `Current`; or, not read (yet), no resources and `Stale`.
    pub fn discovered(&self, remote: &Remote) -> Value {
        let known = self
            .discovered
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(remote.group.clone(), remote.version.clone()))
            .cloned();
        let (mut version, current) =
            known.unwrap_or_else(|| (serde_json::json!({"version": remote.version}), false));
        version["freshness"] = Value::from(if current { "Current" } else { "Stale" });
        version
    }
}
