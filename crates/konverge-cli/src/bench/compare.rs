//! Servers side by side: the same ConfigMap creates and gets against each, in turn, round
//! after round (in the opposite order every other round), so that whatever else the machine
//! does falls on all alike. Each figure is the median over the rounds; each server is
//! compared with the first (the anchor) round by round, and the ratio shown is the median
//! of those paired ratios, which slow drifts of the machine cancel out of.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use super::load::{Stats, ms, phase};

/// What is measured against each server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    /// Creates of 1 KiB ConfigMaps, named by round, client and count.
    Create,
    /// Gets of the ConfigMaps the first round created.
    Get,
}

impl Verb {
    fn name(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Get => "get",
        }
    }
}

/// A server to measure, and the ConfigMaps API clients use on it.
pub(super) struct Contender {
    /// How the table names it.
    pub(super) name: &'static str,
    /// The ConfigMaps of the namespace the clients work in.
    pub(super) api: Api<ConfigMap>,
}

/// One verb against one server, over the rounds.
pub(super) struct Series {
    verb: Verb,
    contender: &'static str,
    rates: Vec<f64>,
    p50s: Vec<f64>,
    p99s: Vec<f64>,
}

/// What the rounds measured, in the order measured.
pub(super) struct Results(Vec<Series>);

/// Runs `rounds` rounds of every verb against every contender in turn, `clients`
/// concurrent clients for `seconds` each.
pub(super) async fn alternate(
    contenders: &[Contender],
    verbs: &[Verb],
    rounds: usize,
    clients: usize,
    seconds: Duration,
) -> anyhow::Result<Results> {
    let mut results: Vec<Series> = Vec::new();
    for round in 0..rounds {
        for &verb in verbs {
            let order: Vec<&Contender> = if round % 2 == 0 {
                contenders.iter().collect()
            } else {
                contenders.iter().rev().collect()
            };
            for contender in order {
                let stats = match verb {
                    Verb::Create => creates(&contender.api, round, clients, seconds).await?,
                    Verb::Get => gets(&contender.api, clients, seconds).await?,
                };
                let index = match results
                    .iter()
                    .position(|r| r.verb == verb && r.contender == contender.name)
                {
                    Some(i) => i,
                    None => {
                        results.push(Series {
                            verb,
                            contender: contender.name,
                            rates: Vec::new(),
                            p50s: Vec::new(),
                            p99s: Vec::new(),
                        });
                        results.len() - 1
                    }
                };
                let entry = &mut results[index];
                entry.rates.push(stats.rate());
                entry.p50s.push(ms(stats.p50));
                entry.p99s.push(ms(stats.p99));
            }
        }
    }
    Ok(Results(results))
}

impl Results {
    fn series(&self, verb: Verb, contender: &str) -> Option<&Series> {
        self.0
            .iter()
            .find(|s| s.verb == verb && s.contender == contender)
    }

    /// The median p50 of `verb` against `contender`, in milliseconds.
    pub(super) fn p50(&self, verb: Verb, contender: &str) -> Option<f64> {
        self.series(verb, contender).map(|s| median(&s.p50s))
    }

    /// The median over the rounds of `contender`'s p50 and p99 of `verb` divided by
    /// `anchor`'s in the same round.
    pub(super) fn ratio(&self, verb: Verb, contender: &str, anchor: &str) -> Option<(f64, f64)> {
        let (this, base) = (self.series(verb, contender)?, self.series(verb, anchor)?);
        let paired = |a: &[f64], b: &[f64]| -> f64 {
            let ratios: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
            median(&ratios)
        };
        Some((
            paired(&this.p50s, &base.p50s),
            paired(&this.p99s, &base.p99s),
        ))
    }

    /// Prints the results as a Markdown table, with each server's latencies as ratios of the
    /// first server's for the same verb, under `title`.
    pub(super) fn print(&self, title: &str, column: &str, anchor: &str) {
        println!("{title}");
        println!(
            "| verb | {column} | ops/s | p50 ms | p99 ms | p50 vs {anchor} | p99 vs {anchor} |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|");
        for series in &self.0 {
            let (p50, p99) = (median(&series.p50s), median(&series.p99s));
            let (r50, r99) = self
                .ratio(series.verb, series.contender, anchor)
                .unwrap_or((1.0, 1.0));
            println!(
                "| {} | {} | {:.0} | {p50:.2} | {p99:.2} | {r50:.2} | {r99:.2} |",
                series.verb.name(),
                series.contender,
                median(&series.rates),
            );
        }
    }
}

fn median(values: &[f64]) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Creates ConfigMaps (named by `round`) from `clients` tasks for `seconds`.
async fn creates(
    api: &Api<ConfigMap>,
    round: usize,
    clients: usize,
    seconds: Duration,
) -> anyhow::Result<Stats> {
    let a = api.clone();
    phase(clients, seconds, move |c, n| {
        let a = a.clone();
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("cm-{round}-{c}-{n}"));
        cm.data = Some([("payload".to_string(), "x".repeat(1024))].into());
        async move {
            a.create(&PostParams::default(), &cm).await?;
            Ok(())
        }
    })
    .await
}

/// Gets the ConfigMaps the first round created from `clients` tasks for `seconds`.
async fn gets(api: &Api<ConfigMap>, clients: usize, seconds: Duration) -> anyhow::Result<Stats> {
    let a = api.clone();
    phase(clients, seconds, move |c, _| {
        let a = a.clone();
        async move {
            a.get(&format!("cm-0-{c}-0")).await?;
            Ok(())
        }
    })
    .await
}
