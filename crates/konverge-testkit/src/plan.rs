//! Seeded fault plans: a schedule of the faults a controller meets on a real cluster, drawn
//! from a seed, so a failing run replays exactly by its seed.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use konverge_controllers::kubelet::Behaviour;
use tokio::task::JoinSet;

use crate::cluster::{Begun, Cluster, Happened, Pick};
use crate::env::TestEnv;
use crate::faults::{Failure, Faults, Rule};
use crate::request_info::Verb;

/// How long a [`Fault::SlowStart`] rule waits for the pods it slows.
const SLOW_START_WINDOW: Duration = Duration::from_secs(60);

/// One fault of a [`FaultPlan`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Every open watch ends ([`Faults::drop_watches`]).
    DropWatches,
    /// A long disconnect: history is compacted ([`Faults::expire_history`]) and watches
    /// end, so they resume from an expired resourceVersion and get 410.
    ExpireHistory,
    /// The next `times` updates and patches are answered 409 Conflict.
    Conflicts {
        /// How many.
        times: usize,
    },
    /// The next `times` requests of any kind are answered 429 with `Retry-After`.
    Throttle {
        /// How many.
        times: usize,
        /// The `Retry-After` the server asks for, in seconds.
        retry_after: u32,
    },
    /// The next `times` writes are answered 500.
    ServerErrors {
        /// How many.
        times: usize,
    },
    /// The next `requests` requests are each held for `delay`.
    Latency {
        /// How long each is held.
        delay: Duration,
        /// How many requests.
        requests: usize,
    },
    /// The next `times` writes are applied by the server, and their answers lost: the
    /// client sees 504 Timeout ([`Faults::lose_responses`]).
    LostResponses {
        /// How many.
        times: usize,
    },
    /// Caches go stale: every watch ends and the next watch requests are held for `behind`,
    /// so a controller reads an old copy of what it (and others) wrote meanwhile.
    StaleCaches {
        /// How long the caches stay behind.
        behind: Duration,
    },
    /// The next `times` reads that allow it (`resourceVersion=0` or not-older-than) are
    /// answered as of the store's revision when the fault happens
    /// ([`Faults::stale_reads`]).
    StaleReads {
        /// How many.
        times: usize,
    },
    /// The API server restarts: connections cut, refused for `down`, then a new server over
    /// the same store — reopened from disk on the disk store ([`Faults::restart_server`]).
    /// The plan's later steps wait for the server to be back.
    Restart {
        /// How long the server is down.
        down: Duration,
    },
    /// A node's kubelet stops — no heartbeats, no pod status — for `down`, or for good
    /// (`None`). After 50 s without a heartbeat the node lifecycle controller marks the node
    /// and its pods not ready and taints it unreachable; its pods are evicted once their
    /// 300 s tolerations run out, and their controllers recreate them elsewhere. Pods
    /// evicted from a node that stays lost stay Terminating, as on a cluster.
    NodeLost {
        /// Which node (of those whose kubelet runs).
        node: Pick,
        /// For how long; `None`: for good.
        down: Option<Duration>,
    },
    /// `kubectl drain --ignore-daemonsets --delete-emptydir-data --force`: the node is
    /// cordoned, every pod on it but DaemonSet and mirror pods is evicted through the
    /// eviction API, all at once — an eviction a PodDisruptionBudget refuses (429) is
    /// retried after 5 s — and the drain waits for them to go; `uncordon_after` after the drain began, it gives
    /// up on what is left and the node is uncordoned.
    NodeDrained {
        /// Which node.
        node: Pick,
        /// When the node is uncordoned, from the start of the drain.
        uncordon_after: Duration,
    },
    /// Every kubelet of a zone (`topology.kubernetes.io/zone`) stops for `down`, as
    /// [`Fault::NodeLost`] each.
    ZoneOutage {
        /// Which zone (of those with a running node).
        zone: Pick,
        /// For how long.
        down: Duration,
    },
    /// The running containers of a running pod exit with `exit_code`, and restart as its
    /// `restartPolicy` says.
    ContainerCrash {
        /// Which pod (running, outside the `kube-` namespaces, on a node whose kubelet
        /// runs).
        pod: Pick,
        /// The exit code.
        exit_code: i32,
    },
    /// A registry outage: the next `pods` pods admitted fail to pull their image
    /// (`ErrImagePull`, then `ImagePullBackOff`). When `lasting` has passed the outage ends:
    /// pods admitted from then on pull, and the pods it caught that have a controller are
    /// deleted so their controllers replace them (where a kubelet would pull again on its
    /// next back-off retry and start them in place).
    ImagePullFailure {
        /// How many pods at most.
        pods: usize,
        /// How long the outage lasts.
        lasting: Duration,
    },
    /// The next `pods` pods admitted take `start` before their sandbox is ready (the first
    /// `pods` admitted within a minute; the rule goes after that).
    SlowStart {
        /// How many pods at most.
        pods: usize,
        /// How long each takes to start.
        start: Duration,
    },
    /// A running pod is evicted through the eviction API, once (a PodDisruptionBudget may
    /// refuse it: then nothing happens).
    PodEvicted {
        /// Which pod (running, outside the `kube-` namespaces, on a node whose kubelet
        /// runs).
        pod: Pick,
    },
}

impl Fault {
    /// Whether the fault acts on the simulated nodes and pods (not on the API's requests):
    /// it needs [`FaultPlan::run_on`].
    pub fn is_cluster_fault(&self) -> bool {
        matches!(
            self,
            Fault::NodeLost { .. }
                | Fault::NodeDrained { .. }
                | Fault::ZoneOutage { .. }
                | Fault::ContainerCrash { .. }
                | Fault::ImagePullFailure { .. }
                | Fault::SlowStart { .. }
                | Fault::PodEvicted { .. }
        )
    }
}

/// `12 s`, or `1500 ms`.
fn span(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::DropWatches => f.write_str("drop watches"),
            Fault::ExpireHistory => f.write_str("expire history (410) and drop watches"),
            Fault::Conflicts { times } => write!(f, "{times} conflicts on updates and patches"),
            Fault::Throttle { times, retry_after } => {
                write!(
                    f,
                    "{times} requests throttled (429, Retry-After {retry_after}s)"
                )
            }
            Fault::ServerErrors { times } => write!(f, "{times} writes answered 500"),
            Fault::Latency { delay, requests } => {
                write!(f, "{requests} requests held {} ms each", delay.as_millis())
            }
            Fault::LostResponses { times } => {
                write!(f, "{times} writes applied with their answers lost (504)")
            }
            Fault::StaleCaches { behind } => {
                write!(f, "caches {} ms behind", behind.as_millis())
            }
            Fault::StaleReads { times } => {
                write!(f, "{times} reads answered from an older resourceVersion")
            }
            Fault::Restart { down } => {
                write!(f, "server restart, down {} ms", down.as_millis())
            }
            Fault::NodeLost { node, down: None } => write!(f, "node {node} lost for good"),
            Fault::NodeLost {
                node,
                down: Some(down),
            } => write!(f, "node {node} lost for {}", span(*down)),
            Fault::NodeDrained {
                node,
                uncordon_after,
            } => write!(
                f,
                "node {node} drained, uncordoned after {}",
                span(*uncordon_after)
            ),
            Fault::ZoneOutage { zone, down } => {
                write!(f, "zone {zone} down for {}", span(*down))
            }
            Fault::ContainerCrash { pod, exit_code } => {
                write!(f, "pod {pod}'s containers crash (exit {exit_code})")
            }
            Fault::ImagePullFailure { pods, lasting } => write!(
                f,
                "image pulls fail for the next {pods} pods (registry down {})",
                span(*lasting)
            ),
            Fault::SlowStart { pods, start } => {
                write!(f, "the next {pods} pods take {} to start", span(*start))
            }
            Fault::PodEvicted { pod } => write!(f, "pod {pod} evicted"),
        }
    }
}

/// A fault and when, after the plan starts, it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// When, from the start of [`FaultPlan::run`].
    pub at: Duration,
    /// What.
    pub fault: Fault,
}

/// A schedule of faults, made from a seed: the same seed makes the same schedule.
///
/// Print it when a run fails: it says its seed, and [`FaultPlan::random`] (or, for a plan
/// that prints as a `cluster fault plan`, [`FaultPlan::cluster`]) with that seed replays the
/// run's faults. Print what [`run_on`](Self::run_on) returns too: which nodes and pods the
/// cluster faults picked.
///
/// ```
/// use konverge_testkit::FaultPlan;
///
/// let plan = FaultPlan::random(7);
/// assert_eq!(plan, FaultPlan::random(7));
/// assert!(plan.to_string().starts_with("fault plan 7:"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultPlan {
    seed: u64,
    steps: Vec<Step>,
    kind: Kind,
}

/// Which constructor drew a plan: its display says so, to replay it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// [`FaultPlan::random`], or [`FaultPlan::from_steps`].
    Api,
    /// [`FaultPlan::cluster`].
    Cluster,
}

impl FaultPlan {
    /// Between 4 and 8 faults of every kind, spread over the first 1.5 s, with the
    /// parameters drawn from `seed` (kept small enough that a controller recovers in
    /// seconds: Retry-After of 1 s, latencies up to 100 ms, caches up to 500 ms behind, a
    /// restarted server down for up to 300 ms).
    pub fn random(seed: u64) -> FaultPlan {
        let mut rng = StdRng::seed_from_u64(seed);
        let count = rng.random_range(4..=8);
        let mut steps: Vec<Step> = (0..count)
            .map(|_| {
                let at = Duration::from_millis(rng.random_range(0..1500));
                let fault = match rng.random_range(0..10) {
                    0 => Fault::DropWatches,
                    1 => Fault::ExpireHistory,
                    2 => Fault::Conflicts {
                        times: rng.random_range(1..=5),
                    },
                    3 => Fault::Throttle {
                        times: rng.random_range(1..=3),
                        retry_after: 1,
                    },
                    4 => Fault::ServerErrors {
                        times: rng.random_range(1..=3),
                    },
                    5 => Fault::Latency {
                        delay: Duration::from_millis(rng.random_range(10..=100)),
                        requests: rng.random_range(1..=10),
                    },
                    6 => Fault::LostResponses {
                        times: rng.random_range(1..=2),
                    },
                    7 => Fault::StaleCaches {
                        behind: Duration::from_millis(rng.random_range(100..=500)),
                    },
                    8 => Fault::StaleReads {
                        times: rng.random_range(1..=5),
                    },
                    _ => Fault::Restart {
                        down: Duration::from_millis(rng.random_range(50..=300)),
                    },
                };
                Step { at, fault }
            })
            .collect();
        steps.sort_by_key(|s| s.at);
        FaultPlan {
            seed,
            steps,
            kind: Kind::Api,
        }
    }

    /// The faults of [`random`](Self::random)`(seed)`, and with them 2 to 4 faults of the
    /// cluster under the controller, in its first 30 s, drawn from the same seed: nodes lost
    /// for 20 s to 7 minutes (long enough, past 350 s, for their pods to be evicted) or — at
    /// most one per plan — for good, nodes drained and uncordoned 30 s to 2 minutes later,
    /// zones down for 20 s to 7 minutes, containers crashing, registry outages of 10 s to a
    /// minute for the next 1 to 3 pods, the next 1 to 5 pods starting 5 to 30 s late, pods
    /// evicted. Nodes, zones and pods are [picked by the seed](Pick::Seeded) when the fault
    /// happens. Run it with [`run_on`](Self::run_on) on an environment with simulated nodes
    /// ([`TestEnvBuilder::nodes`](crate::TestEnvBuilder::nodes), with
    /// [`zones`](crate::TestEnvBuilder::zones) for zone outages to act on), in paused time:
    /// its faults span minutes of virtual time.
    ///
    /// ```
    /// use konverge_testkit::FaultPlan;
    ///
    /// let plan = FaultPlan::cluster(7);
    /// assert_eq!(plan, FaultPlan::cluster(7));
    /// assert!(plan.to_string().starts_with("cluster fault plan 7:"));
    /// // The API faults are random(7)'s.
    /// let api: Vec<_> = plan.steps().iter().filter(|s| !s.fault.is_cluster_fault()).collect();
    /// assert_eq!(api.len(), FaultPlan::random(7).steps().len());
    /// ```
    pub fn cluster(seed: u64) -> FaultPlan {
        let mut steps = FaultPlan::random(seed).steps;
        // A stream of its own, so the API faults stay random(seed)'s.
        let mut rng = StdRng::seed_from_u64(seed ^ 0x636c_7573_7465_7273);
        let secs = |rng: &mut StdRng, low: u64, high: u64| {
            Duration::from_secs(rng.random_range(low..=high))
        };
        let mut lost_for_good = false;
        for _ in 0..rng.random_range(2..=4) {
            let at = Duration::from_millis(rng.random_range(0..30_000));
            let pick = Pick::Seeded(rng.random_range(0..10_000));
            let fault = match rng.random_range(0..7) {
                0 => {
                    let for_good = !lost_for_good && rng.random_range(0..4) == 0;
                    lost_for_good |= for_good;
                    Fault::NodeLost {
                        node: pick,
                        down: (!for_good).then(|| secs(&mut rng, 20, 420)),
                    }
                }
                1 => Fault::NodeDrained {
                    node: pick,
                    uncordon_after: secs(&mut rng, 30, 120),
                },
                2 => Fault::ZoneOutage {
                    zone: pick,
                    down: secs(&mut rng, 20, 420),
                },
                3 => Fault::ContainerCrash {
                    pod: pick,
                    exit_code: [1, 2, 137][rng.random_range(0..3)],
                },
                4 => Fault::ImagePullFailure {
                    pods: rng.random_range(1..=3),
                    lasting: secs(&mut rng, 10, 60),
                },
                5 => Fault::SlowStart {
                    pods: rng.random_range(1..=5),
                    start: secs(&mut rng, 5, 30),
                },
                _ => Fault::PodEvicted { pod: pick },
            };
            steps.push(Step { at, fault });
        }
        steps.sort_by_key(|s| s.at);
        FaultPlan {
            seed,
            steps,
            kind: Kind::Cluster,
        }
    }

    /// A plan of exactly these steps (their seed reads 0).
    pub fn from_steps(mut steps: Vec<Step>) -> FaultPlan {
        steps.sort_by_key(|s| s.at);
        FaultPlan {
            seed: 0,
            steps,
            kind: Kind::Api,
        }
    }

    /// The seed the plan was made from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The faults, in time order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Carries the plan's API faults out: each at its time from now. Returns after the
    /// last. Cluster faults ([`Fault::is_cluster_fault`]) need the environment's nodes:
    /// they are left out here (with a warning); see [`run_on`](Self::run_on).
    pub async fn run(&self, faults: &Faults) {
        self.carry_out(faults, None).await;
    }

    /// Carries the plan out in the background; see [`run`](Self::run).
    pub fn spawn(&self, faults: &Faults) -> tokio::task::JoinHandle<()> {
        let (plan, faults) = (self.clone(), faults.clone());
        tokio::spawn(async move {
            plan.run(&faults).await;
        })
    }

    /// Carries the whole plan out on `env`: API faults through its [`Faults`], cluster
    /// faults on its simulated nodes ([`TestEnv::kubelets`]) and through the API as its
    /// admin, past the faults and outside the [`RequestLog`](crate::RequestLog) (a drain's
    /// cordon and evictions are not the controller's requests). Each fault begins at its
    /// time from now; those that last (a node lost for a while, a drain, an outage) go on
    /// in the background while the next begin. Returns once every fault has run its course,
    /// with what each did, in the order they began. On an environment without simulated
    /// nodes, cluster faults do nothing (their outcome says so).
    pub async fn run_on(&self, env: &TestEnv) -> Vec<Happened> {
        let cluster = Cluster::of(env);
        self.carry_out(&env.faults(), cluster.as_ref()).await
    }

    /// Carries the plan out on `env` in the background; see [`run_on`](Self::run_on).
    pub fn spawn_on(&self, env: &TestEnv) -> tokio::task::JoinHandle<Vec<Happened>> {
        let (plan, faults, cluster) = (self.clone(), env.faults(), Cluster::of(env));
        tokio::spawn(async move { plan.carry_out(&faults, cluster.as_ref()).await })
    }

    async fn carry_out(&self, faults: &Faults, cluster: Option<&Cluster>) -> Vec<Happened> {
        let start = tokio::time::Instant::now();
        let mut happened = Vec::new();
        let mut lasting: JoinSet<(usize, String)> = JoinSet::new();
        for step in &self.steps {
            tokio::time::sleep_until(start + step.at).await;
            let at = start.elapsed();
            let begun = if !step.fault.is_cluster_fault() {
                apply(faults, &step.fault).await;
                Begun {
                    picked: Vec::new(),
                    outcome: "done".into(),
                    rest: None,
                }
            } else if let Some(cluster) = cluster {
                begin(cluster, &step.fault).await
            } else {
                tracing::warn!(fault = %step.fault, "fault plan: no simulated nodes: left out");
                Begun {
                    picked: Vec::new(),
                    outcome: "left out: no simulated nodes".into(),
                    rest: None,
                }
            };
            if let Some(rest) = begun.rest {
                let index = happened.len();
                lasting.spawn(async move { (index, rest.await) });
            }
            happened.push(Happened {
                at,
                fault: step.fault.clone(),
                picked: begun.picked,
                outcome: begun.outcome,
            });
        }
        while let Some(done) = lasting.join_next().await {
            match done {
                Ok((index, words)) => {
                    let outcome = &mut happened[index].outcome;
                    outcome.push_str("; ");
                    outcome.push_str(&words);
                }
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => {}
            }
        }
        happened
    }
}

/// Begins a cluster fault.
async fn begin(cluster: &Cluster, fault: &Fault) -> Begun {
    match fault {
        Fault::NodeLost { node, down } => cluster.node_lost(node, *down),
        Fault::NodeDrained {
            node,
            uncordon_after,
        } => cluster.node_drained(node, *uncordon_after).await,
        Fault::ZoneOutage { zone, down } => cluster.zone_outage(zone, *down),
        Fault::ContainerCrash { pod, exit_code } => cluster.container_crash(pod, *exit_code).await,
        Fault::ImagePullFailure { pods, lasting } => {
            cluster.next_pods(Behaviour::ImagePullFails, *pods, *lasting, true)
        }
        Fault::SlowStart { pods, start } => cluster.next_pods(
            Behaviour::StartSeconds(start.as_secs().max(1)),
            *pods,
            SLOW_START_WINDOW,
            false,
        ),
        Fault::PodEvicted { pod } => cluster.pod_evicted(pod).await,
        _ => Begun {
            picked: Vec::new(),
            outcome: "not a cluster fault".into(),
            rest: None,
        },
    }
}

fn writes() -> Rule {
    Rule::new()
        .verb(Verb::Create)
        .verb(Verb::Update)
        .verb(Verb::Patch)
        .verb(Verb::Delete)
}

async fn apply(faults: &Faults, fault: &Fault) {
    match fault {
        Fault::DropWatches => faults.drop_watches(),
        Fault::ExpireHistory => {
            if let Err(e) = faults.expire_history().await {
                tracing::warn!(error = %e, "fault plan: could not expire history");
            }
            faults.drop_watches();
        }
        Fault::Conflicts { times } => {
            faults.inject_conflicts(Rule::new().verb(Verb::Update).verb(Verb::Patch), *times)
        }
        Fault::Throttle { times, retry_after } => faults.fail(
            Rule::new(),
            Failure::too_many_requests().retry_after(*retry_after),
            *times,
        ),
        Fault::ServerErrors { times } => faults.fail(writes(), Failure::internal_error(), *times),
        Fault::Latency { delay, requests } => faults.delay_next(Rule::new(), *delay, *requests),
        Fault::LostResponses { times } => faults.lose_responses(writes(), *times),
        Fault::StaleCaches { behind } => {
            // Enough held watches for every informer of a few controllers.
            faults.delay_next(Rule::new().verb(Verb::Watch), *behind, 16);
            faults.drop_watches();
        }
        Fault::StaleReads { times } => {
            if let Err(e) = faults.stale_reads(Rule::new(), *times).await {
                tracing::warn!(error = %e, "fault plan: could not pin stale reads");
            }
        }
        Fault::Restart { down } => {
            // A server that stays down fails every check after it, for a reason that is not
            // the controller's: say so here instead.
            if let Err(e) = faults.restart_server(*down).await {
                panic!("fault plan: the server did not come back after a restart: {e}");
            }
        }
        // Cluster faults are begun by `begin`.
        _ => {}
    }
}

impl fmt::Display for FaultPlan {
    /// `fault plan 7: at 120 ms drop watches; at 480 ms 3 conflicts on updates and patches`
    /// (`cluster fault plan 7: ...` for [`FaultPlan::cluster`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == Kind::Cluster {
            f.write_str("cluster ")?;
        }
        write!(f, "fault plan {}:", self.seed)?;
        for (i, step) in self.steps.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            write!(f, "{sep}at {} ms {}", step.at.as_millis(), step.fault)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_plan_and_seeds_differ() {
        assert_eq!(FaultPlan::random(1), FaultPlan::random(1));
        let plans: Vec<FaultPlan> = (0..20).map(FaultPlan::random).collect();
        assert!(plans.windows(2).all(|w| w[0] != w[1]));
        for plan in &plans {
            assert!((4..=8).contains(&plan.steps().len()));
            assert!(plan.steps().windows(2).all(|w| w[0].at <= w[1].at));
        }
        // Every kind of fault turns up across 20 seeds.
        let shown: String = plans.iter().map(|p| p.to_string()).collect();
        for kind in [
            "drop watches",
            "expire history",
            "conflicts",
            "throttled",
            "answered 500",
            "held",
            "answers lost",
            "behind",
            "older resourceVersion",
            "server restart",
        ] {
            assert!(shown.contains(kind), "{kind}");
        }
    }
}
