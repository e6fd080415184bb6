//! Closed-loop load: clients that each repeat an operation for a phase, and what their
//! latencies say (`konverge bench api` and the contenders it compares).

use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct Stats {
    pub(super) ops: usize,
    /// The fewest operations any one client completed.
    pub(super) min_per_client: usize,
    pub(super) elapsed: Duration,
    pub(super) p50: Duration,
    pub(super) p99: Duration,
}

impl Stats {
    fn from(mut latencies: Vec<Duration>, elapsed: Duration, min_per_client: usize) -> Stats {
        latencies.sort_unstable();
        let at = |q: f64| {
            latencies
                .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        Stats {
            ops: latencies.len(),
            min_per_client,
            elapsed,
            p50: at(0.5),
            p99: at(0.99),
        }
    }

    pub(super) fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `op` from `clients` tasks for `phase`, each with its own counter.
pub(super) async fn phase<F, Fut>(clients: usize, phase: Duration, op: F) -> anyhow::Result<Stats>
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let deadline = start + phase;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0;
            while Instant::now() < deadline {
                let t = Instant::now();
                op(client, n).await?;
                latencies.push(t.elapsed());
                n += 1;
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut all = Vec::new();
    let mut min_per_client = usize::MAX;
    for task in tasks {
        let latencies = task.await??;
        min_per_client = min_per_client.min(latencies.len());
        all.extend(latencies);
    }
    Ok(Stats::from(all, start.elapsed(), min_per_client))
}
