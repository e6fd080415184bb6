//! kcm: which controllers run ([`Selection`], kcm's `--controllers`), as whom
//! ([`Credentials`]), in one konverge-runtime [`Manager`] ([`ControllerManager`]).

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use konverge_runtime::leader::LeaseConfig;
use konverge_runtime::{Manager, RunningManager};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
pub use crate::descriptor::{Descriptor, Setup};
use crate::error::{Error, Result};

/// Every controller of this crate, in the order kcm starts them.
pub const CONTROLLERS: &[Descriptor] = &[
    crate::daemonset::DAEMONSET,
    crate::deployment::DEPLOYMENT,
    crate::disruption::DISRUPTION,
    crate::podgc::PODGC,
    crate::statefulset::STATEFULSET,
    crate::endpoints::ENDPOINTS,
    crate::endpoints::ENDPOINTSLICE,
    crate::endpoints::ENDPOINTSLICE_MIRRORING,
    crate::nodelifecycle::NODE_LIFECYCLE,
    crate::nodelifecycle::TAINT_EVICTION,
    crate::job::JOB,
    crate::job::CRONJOB,
    crate::job::TTL_AFTER_FINISHED,
    crate::volume::PERSISTENTVOLUME_BINDER,
    crate::replicaset::REPLICATION_CONTROLLER,
    crate::replicaset::REPLICASET,
];

/// Which controllers run, in kcm's `--controllers` syntax: a comma-separated list where `*`
/// is every controller on by default, `name` turns one on and `-name` turns one off; the
/// first entry naming a controller decides for it (kcm's `IsControllerEnabled`). Names are
/// kcm's canonical names or their aliases. The default is `*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    entries: Vec<String>,
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            entries: vec!["*".into()],
        }
    }
}

impl Selection {
    /// Every controller (`*`).
    pub fn all() -> Selection {
        Selection::default()
    }

    /// No controller (an empty list).
    pub fn none() -> Selection {
        Selection {
            entries: Vec::new(),
        }
    }

    /// Whether `descriptor` runs.
    pub fn enables(&self, descriptor: &Descriptor) -> bool {
        let names = |name: &str| name == descriptor.name || descriptor.aliases.contains(&name);
        let mut star = false;
        for entry in &self.entries {
            if let Some(off) = entry.strip_prefix('-') {
                if names(off) {
                    return false;
                }
            } else if entry == "*" {
                star = true;
            } else if names(entry) {
                return true;
            }
        }
        star
    }

    /// The controllers that run, in start order.
    pub fn enabled(&self) -> impl Iterator<Item = &'static Descriptor> + '_ {
        CONTROLLERS.iter().filter(|d| self.enables(d))
    }
}

impl FromStr for Selection {
    type Err = Error;

    /// Parses `*,-cronjob-controller,...`; an unknown name fails as kcm's does
    /// (`"x" is not in the list of known controllers`).
    fn from_str(list: &str) -> Result<Selection> {
        let known: BTreeSet<&str> = CONTROLLERS
            .iter()
            .flat_map(|d| std::iter::once(d.name).chain(d.aliases.iter().copied()))
            .collect();
        let mut entries = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let name = entry.strip_prefix('-').unwrap_or(entry);
            if entry != "*" && !known.contains(name) {
                return Err(Error::UnknownController(name.to_string()));
            }
            entries.push(entry.to_string());
        }
        Ok(Selection { entries })
    }
}

/// Where each controller's client comes from.
pub trait Credentials: Send + Sync {
    /// A client acting as the ServiceAccount `kube-system/<service_account>`.
    fn client<'a>(&'a self, service_account: &'a str) -> BoxFuture<'a, Result<Client>>;
}

/// Every controller acts as this one client (for running against a cluster with one's own
/// kubeconfig).
impl Credentials for Client {
    fn client<'a>(&'a self, _service_account: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(async move { Ok(self.clone()) })
    }
}

/// A client per ServiceAccount name, made beforehand (a test's clients through its faults,
/// say); a controller whose ServiceAccount is missing fails to start.
impl Credentials for std::collections::BTreeMap<String, Client> {
    fn client<'a>(&'a self, service_account: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(async move {
            self.get(service_account)
                .cloned()
                .ok_or_else(|| Error::NoCredentials(service_account.to_string()))
        })
    }
}

/// kcm's `--use-service-account-credentials`: each controller's ServiceAccount is created in
/// `kube-system` if missing, and a token from the TokenRequest API makes its client (through
/// `connect`, which turns a bearer token into a client of the same server).
pub struct ServiceAccountTokens<F> {
    admin: Client,
    connect: F,
}

impl<F> std::fmt::Debug for ServiceAccountTokens<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .finish_non_exhaustive()
    }
}

impl<F: Fn(String) -> Client + Send + Sync> ServiceAccountTokens<F> {
    /// Tokens requested by `admin`, made into clients by `connect`.
    pub fn new(admin: Client, connect: F) -> Self {
        ServiceAccountTokens { admin, connect }
    }
}

impl<F: Fn(String) -> Client + Send + Sync> Credentials for ServiceAccountTokens<F> {
    fn client<'a>(&'a self, service_account: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(async move {
            let fail = |source| Error::Credentials {
                account: service_account.to_string(),
                source,
            };
            let accounts: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), "kube-system");
            let mut account = ServiceAccount::default();
            account.metadata.name = Some(service_account.to_string());
            match accounts.create(&PostParams::default(), &account).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(e) => return Err(fail(e)),
            }
            let request = TokenRequest {
                spec: TokenRequestSpec {
                    audiences: Vec::new(),
                    // kcm's controllers renew theirs; this one lasts a year.
                    expiration_seconds: Some(365 * 24 * 3600),
                    ..TokenRequestSpec::default()
                },
                ..TokenRequest::default()
            };
            let token = accounts
                .create_token_request(service_account, &PostParams::default(), &request)
                .await
                .map_err(fail)?
                .status
                .map(|s| s.token)
                .unwrap_or_default();
            Ok((self.connect)(token))
        })
    }
}

/// kube-controller-manager: the selected controllers, each as its own identity, in one
/// [`Manager`] whose informers watch as the manager's client.
pub struct ControllerManager {
    client: Client,
    selection: Selection,
    credentials: Arc<dyn Credentials>,
    clock: Clock,
    lease: Option<LeaseConfig>,
    nodes: Option<(crate::kubelet::SimulatedNodes, Client)>,
    tasks: Vec<(String, Task)>,
}

/// A task run beside the controllers, under the same Lease ([`ControllerManager::task`]).
type Task = Box<dyn FnOnce(CancellationToken) -> BoxFuture<'static, ()> + Send>;

impl std::fmt::Debug for ControllerManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerManager")
            .field("selection", &self.selection)
            .finish_non_exhaustive()
    }
}

impl ControllerManager {
    /// Every controller, all acting as `client`, on the wall clock, without leader election.
    pub fn new(client: Client) -> ControllerManager {
        ControllerManager {
            credentials: Arc::new(client.clone()),
            client,
            selection: Selection::all(),
            clock: Clock::system(),
            lease: None,
            nodes: None,
            tasks: Vec::new(),
        }
    }

    /// Runs simulated nodes beside the controllers: `nodes`' kubelets and kube-scheduler's
    /// rules ([`scheduler`](crate::scheduler)), both acting through `client`, so that pods
    /// get scheduled, run and become ready. Without it (and with no nodes of its own) a
    /// cluster's pods stay Pending, as under envtest.
    pub fn simulated_nodes(
        mut self,
        nodes: crate::kubelet::SimulatedNodes,
        client: Client,
    ) -> Self {
        self.nodes = Some((nodes, client));
        self
    }

    /// Which controllers run.
    pub fn selection(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    /// Where each controller's identity comes from.
    pub fn credentials(mut self, credentials: impl Credentials + 'static) -> Self {
        self.credentials = Arc::new(credentials);
        self
    }

    /// The time controllers read ([`Clock::tokio`] in paused-time tests).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Runs the controllers only while holding `lease` (kcm's is
    /// `kube-system/kube-controller-manager`).
    pub fn leader_election(mut self, lease: LeaseConfig) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Runs `task` beside the controllers, only while they run (under the Lease, when there
    /// is one), until the token it is given is cancelled: a loop of kube-controller-manager's
    /// that is not written as a controller here (the API server's garbage collector, say).
    pub fn task<F>(mut self, name: impl Into<String>, task: F) -> Self
    where
        F: FnOnce(CancellationToken) -> BoxFuture<'static, ()> + Send + 'static,
    {
        self.tasks.push((name.into(), Box::new(task)));
        self
    }

    /// The manager with every selected controller added, not started.
    pub async fn build(self) -> Result<Manager> {
        let mut manager = Manager::new(self.client);
        if let Some(lease) = self.lease {
            manager = manager.leader_election(lease);
        }
        for descriptor in self.selection.enabled() {
            let client = self.credentials.client(descriptor.service_account).await?;
            let setup = Setup {
                client,
                clock: self.clock.clone(),
            };
            (descriptor.add)(&mut manager, setup);
        }
        if let Some((nodes, client)) = self.nodes {
            crate::scheduler::add(&mut manager, client.clone(), self.clock.clone());
            nodes.add(&mut manager, client, self.clock.clone());
        }
        for (name, task) in self.tasks {
            manager.add_task(name, task);
        }
        Ok(manager)
    }

    /// Builds and runs the manager in the background.
    pub async fn spawn(self) -> Result<RunningManager> {
        Ok(self.build().await?.spawn())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(name: &'static str, aliases: &'static [&'static str]) -> Descriptor {
        Descriptor {
            name,
            aliases,
            service_account: name,
            add: |_, _| {},
        }
    }

    #[test]
    fn the_first_entry_naming_a_controller_decides() {
        let deployment = descriptor("deployment-controller", &["deployment"]);
        let selection = |entries: &[&str]| Selection {
            entries: entries.iter().map(|e| e.to_string()).collect(),
        };
        assert!(selection(&["*"]).enables(&deployment));
        assert!(!selection(&["*", "-deployment"]).enables(&deployment));
        assert!(!selection(&["-deployment-controller", "*"]).enables(&deployment));
        assert!(selection(&["deployment", "-deployment"]).enables(&deployment));
        assert!(!selection(&["replicaset"]).enables(&deployment));
        assert!(!Selection::none().enables(&deployment));
    }

    #[test]
    fn unknown_names_are_refused_with_kcms_words() {
        let error = "*,-deploymnet".parse::<Selection>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "\"deploymnet\" is not in the list of known controllers"
        );
        let selection: Selection = "*,-cronjob".parse().expect("an alias");
        assert_eq!(selection.enabled().count(), CONTROLLERS.len() - 1);
        assert_eq!("".parse::<Selection>().expect("empty").enabled().count(), 0);
    }
}
