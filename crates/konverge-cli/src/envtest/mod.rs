//! `konverge envtest`: konverge as the binaries controller-runtime's envtest starts.
//!
//! envtest runs `etcd` and `kube-apiserver` from the folder `KUBEBUILDER_ASSETS` names (or
//! the paths in `TEST_ASSET_ETCD`, `TEST_ASSET_KUBE_APISERVER`, `TEST_ASSET_KUBECTL`). `konverge
//! envtest assets` writes such a folder ([`assets`]): `kube-apiserver` and `etcd` are links to
//! this very binary, which, called by those names, is the stand-in the name says:
//!
//! - [`etcd`]: answers `GET /health` at `--listen-client-urls` and owns `--data-dir`, where the
//!   API server keeps its store; no etcd protocol, no real etcd needed.
//! - [`apiserver`]: konverge's API server with kube-apiserver's flags (the TLS certificate
//!   envtest wrote, its client CA, ServiceAccount keys, RBAC, admission plugins, the service
//!   range), serving the store the `etcd` stand-in points at — and, as kube-apiserver alone,
//!   none of kube-controller-manager's control loops.
//!
//! Both answer `--help` with the flags they take (envtest probes help texts for flags) and
//! refuse any other flag with the wording of the program they stand in for. `konverge envtest
//! etcd ...` and `konverge envtest kube-apiserver ...` run them under the `konverge` name.

mod apiserver;
mod assets;
mod etcd;
pub(crate) mod feature_gates;
mod flags;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

pub(crate) use assets::{AssetsArgs, write as write_assets};

/// `konverge envtest ...`.
#[derive(clap::Subcommand)]
pub(crate) enum EnvtestCommand {
    /// Write the folder envtest's KUBEBUILDER_ASSETS names (kube-apiserver, etcd and kubectl)
    /// and print its path: `export KUBEBUILDER_ASSETS=$(konverge envtest assets)`.
    Assets(AssetsArgs),
    /// Run as kube-apiserver does under envtest (what the assets' `kube-apiserver` runs; its
    /// flags: `konverge envtest kube-apiserver --help`).
    #[command(name = "kube-apiserver", disable_help_flag = true)]
    KubeApiserver {
        /// kube-apiserver's flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run as etcd does under envtest (what the assets' `etcd` runs; its flags: `konverge
    /// envtest etcd --help`).
    #[command(disable_help_flag = true)]
    Etcd {
        /// etcd's flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

/// A program konverge stands in for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StandIn {
    KubeApiserver,
    Etcd,
}

impl StandIn {
    /// The stand-in a program path names (`.../kube-apiserver`, `.../etcd`, or a name that
    /// starts so, such as `kube-apiserver-1.33` that `TEST_ASSET_KUBE_APISERVER` may name), if
    /// any: how the links in the assets folder reach this binary.
    pub(crate) fn named(program: &OsString) -> Option<StandIn> {
        let name = Path::new(program).file_name()?.to_str()?;
        if name.starts_with("kube-apiserver") {
            Some(StandIn::KubeApiserver)
        } else if name.starts_with("etcd") {
            Some(StandIn::Etcd)
        } else {
            None
        }
    }
}

/// Runs `konverge envtest ...`.
pub(crate) async fn run(command: EnvtestCommand) -> anyhow::Result<ExitCode> {
    match command {
        EnvtestCommand::Assets(args) => assets::run(args).map(|()| ExitCode::SUCCESS),
        EnvtestCommand::KubeApiserver { args } => {
            Ok(run_stand_in(StandIn::KubeApiserver, args).await)
        }
        EnvtestCommand::Etcd { args } => Ok(run_stand_in(StandIn::Etcd, args).await),
    }
}

/// Runs a stand-in with its flags `args` (the program name not included) until SIGTERM or
/// Ctrl-C; exit code 1 (with the reason on stderr) when it cannot start.
pub(crate) async fn run_stand_in(which: StandIn, args: Vec<OsString>) -> ExitCode {
    match which {
        StandIn::KubeApiserver => apiserver::main(args).await,
        StandIn::Etcd => etcd::main(args).await,
    }
}
