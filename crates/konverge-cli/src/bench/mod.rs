//! `konverge bench`: measurements reported as ratios against an anchor run on the same machine
//! in the same run.

mod api;
mod auth;
mod cluster;
mod compare;
mod controller;
mod creates;
mod doctor;
mod envtest;
mod lists;
mod load;
mod store;
mod up;
mod workloads;

use clap::Subcommand;

#[derive(Subcommand)]
pub(crate) enum Target {
    /// Durable commits/s and latency of DiskStore vs a real etcd, and watch fan-out.
    Store(store::StoreArgs),
    /// Readiness, idle memory, and verb throughput of the API server vs a real etcd.
    Api(api::ApiArgs),
    /// Time to converge and peak memory of a konverge-runtime controller vs kube-runtime's.
    Controller(controller::ControllerArgs),
    /// Create and get latency of a ServiceAccount's requests under RBAC vs AlwaysAllow.
    Auth(auth::AuthArgs),
    /// Peak memory and findings of `konverge doctor` on 10,000 objects, some in a hot loop,
    /// vs a cluster of bootstrap objects only.
    Doctor(doctor::DoctorArgs),
    /// API requests and writes per pod of the deployment and replicaset controllers, for a
    /// Deployment created, scaled, rolled and rolled back.
    Workloads(workloads::WorkloadsArgs),
    /// Time to every pod Ready, pods bound per second, requests and writes per pod, and peak
    /// memory of a whole cluster in one process (API server, kcm's controllers, the
    /// scheduler, 100 simulated nodes) for one Deployment of 10,000 replicas.
    Cluster(cluster::ClusterArgs),
    /// controller-runtime envtest's Start() (with CRDs) and Stop() on konverge's assets, vs
    /// a real etcd's part of it (and real kube-apiserver + etcd when given).
    Envtest(envtest::EnvtestArgs),
    /// Full lists of 50,000 ConfigMaps as JSON and protobuf: time, size, and the server's
    /// memory during and after, vs a real etcd holding the same objects.
    Lists(lists::ListsArgs),
    /// Closed-loop creates of ConfigMaps against a running server named by a kubeconfig
    /// (`konverge up`, another build, kube-apiserver): rate, latency and, given its process
    /// id, the server's CPU per create. For profiling a server under load.
    Creates(creates::CreatesArgs),
}

pub(crate) async fn run(target: Target) -> anyhow::Result<()> {
    match target {
        Target::Store(args) => store::run(args).await,
        Target::Api(args) => api::run(args).await,
        Target::Controller(args) => controller::run(args).await,
        Target::Doctor(args) => doctor::run(args).await,
        Target::Auth(args) => auth::run(args).await,
        Target::Workloads(args) => workloads::run(args).await,
        Target::Cluster(args) => cluster::run(args).await,
        Target::Envtest(args) => envtest::run(args).await,
        Target::Lists(args) => lists::run(args).await,
        Target::Creates(args) => creates::run(args).await,
    }
}
