//! Seeded fault plans: a schedule of the faults a controller meets on a real cluster, drawn
//! from a seed, so a failing run replays exactly by its seed.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::faults::{Failure, Faults, Rule};
use crate::request_info::Verb;

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
/// Print it when a run fails: it says its seed, and [`FaultPlan::random`] with that seed
/// replays the run's faults.
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
        FaultPlan { seed, steps }
    }

    /// A plan of exactly these steps (their seed reads 0).
    pub fn from_steps(mut steps: Vec<Step>) -> FaultPlan {
        steps.sort_by_key(|s| s.at);
        FaultPlan { seed: 0, steps }
    }

    /// The seed the plan was made from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The faults, in time order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Carries the plan out: each fault at its time from now. Returns after the last.
    pub async fn run(&self, faults: &Faults) {
        let start = tokio::time::Instant::now();
        for step in &self.steps {
            tokio::time::sleep_until(start + step.at).await;
            apply(faults, &step.fault).await;
        }
    }

    /// Carries the plan out in the background.
    pub fn spawn(&self, faults: &Faults) -> tokio::task::JoinHandle<()> {
        let (plan, faults) = (self.clone(), faults.clone());
        tokio::spawn(async move { plan.run(&faults).await })
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
    }
}

impl fmt::Display for FaultPlan {
    /// `fault plan 7: at 120 ms drop watches; at 480 ms 3 conflicts on updates and patches`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
