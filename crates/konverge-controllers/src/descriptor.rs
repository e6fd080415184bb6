//! What a controller of this crate is: its [`Descriptor`] (kcm's name, aliases,
//! ServiceAccount and how to add it to a manager) and the [`Setup`] it is started with. The
//! controllers depend on this, and [`manager`](crate::manager) on the controllers.

use konverge_runtime::Manager;
use kube::Client;

use crate::clock::Clock;

/// What a controller is started with.
#[derive(Clone)]
pub struct Setup {
    /// The controller's own identity (its ServiceAccount): every write goes through it.
    /// Watches go through the manager's client ([`Manager::client`]), kcm's identity.
    pub client: Client,
    /// The time it reads.
    pub clock: Clock,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// One of kcm's controllers.
#[derive(Debug)]
pub struct Descriptor {
    /// kcm's canonical name (`deployment-controller`).
    pub name: &'static str,
    /// kcm's older names, still accepted by `--controllers` (`deployment`).
    pub aliases: &'static [&'static str],
    /// The ServiceAccount in `kube-system` it runs as, bound to `system:controller:<name>`.
    pub service_account: &'static str,
    /// Adds the controller to a manager.
    pub add: fn(&mut Manager, Setup),
}
