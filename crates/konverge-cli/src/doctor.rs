//! `konverge doctor`: watch a live cluster for a while and say what is wrong with how its
//! objects are written. The work is `konverge_runtime::doctor`; this is arguments in, report
//! out (plain text, or JSON with `-o json`).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use konverge_runtime::doctor::{self, FinalizerHold, ObjectRef, Options, Progress, Report};
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Args)]
pub(crate) struct DoctorArgs {
    /// Kubeconfig file (default as kubectl: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long)]
    context: Option<String>,
    /// How long to watch once everything is listed (Go duration: 90s, 5m).
    #[arg(long = "for", value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    window: Duration,
    /// Report objects written more than this many times a minute (extrapolated when --for is
    /// shorter than a minute; three writes at least).
    #[arg(long, value_name = "N", default_value_t = 10)]
    hot_writes: u32,
    /// Report objects larger than this share of the 1.5 MiB object limit (percent).
    #[arg(long, value_name = "PERCENT", default_value = "50%", value_parser = parse_percent)]
    size_warn: u32,
    /// Report deletions pending for longer than this (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    stuck_after: Duration,
    /// Report a resource and verb answered 409 Conflict more than this many times a minute
    /// (from the server's /metrics).
    #[arg(long, value_name = "N", default_value_t = 30)]
    conflicts: u32,
    /// Report format.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// Findings grouped by kind, for people.
    Text,
    /// The whole report as JSON, for tools.
    Json,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    konverge_apimachinery::duration::parse_duration(text).map_err(|e| e.to_string())
}

fn parse_percent(text: &str) -> Result<u32, String> {
    let number = text.strip_suffix('%').unwrap_or(text);
    match number.parse::<u32>() {
        Ok(percent) if (1..=100).contains(&percent) => Ok(percent),
        _ => Err(format!("{text:?} is not a percentage from 1 to 100")),
    }
}

/// Runs the doctor and prints its report on stdout. `Ok(true)` when something was found.
pub(crate) async fn run(args: DoctorArgs) -> anyhow::Result<bool> {
    let client = client(&args).await?;
    let options = Options {
        window: args.window,
        hot_writes_per_minute: args.hot_writes,
        size_warn_percent: args.size_warn,
        stuck_after: args.stuck_after,
        conflicts_per_minute: args.conflicts,
        ..Options::default()
    };
    let mut progress = ProgressLine::new();
    let report = doctor::run(client, &options, |p| progress.show(&p)).await?;
    progress.finish();
    let text = match args.output {
        Format::Text => render(&report),
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(report.has_findings())
}

/// A client for the chosen kubeconfig and context, found as kubectl finds them.
async fn client(args: &DoctorArgs) -> anyhow::Result<kube::Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Progress on stderr: one line rewritten in place on a terminal, a line every ten seconds
/// otherwise (logs should not fill with counters).
struct ProgressLine {
    terminal: bool,
    last_logged: Duration,
}

impl ProgressLine {
    fn new() -> ProgressLine {
        ProgressLine {
            terminal: std::io::stderr().is_terminal(),
            last_logged: Duration::ZERO,
        }
    }

    fn show(&mut self, progress: &Progress) {
        match progress {
            Progress::Discovered { resources } => {
                eprintln!("konverge doctor: listing {resources} resources");
            }
            Progress::Synced {
                listed,
                resources,
                objects,
            } => {
                eprintln!(
                    "konverge doctor: listed {listed} of {resources} resources ({objects} objects); watching"
                );
            }
            Progress::Watching {
                elapsed,
                window,
                objects,
                writes,
            } => {
                let line = format!(
                    "  {} of {}: {objects} objects, {writes} writes",
                    human_duration(elapsed.as_secs()),
                    human_duration(window.as_secs())
                );
                if self.terminal {
                    eprint!("\r{line}\x1b[K");
                } else if elapsed.saturating_sub(self.last_logged) >= Duration::from_secs(10) {
                    self.last_logged = *elapsed;
                    eprintln!("{line}");
                }
            }
            _ => {}
        }
    }

    fn finish(&self) {
        if self.terminal {
            eprintln!();
        }
    }
}

/// The report as text: a summary line, then each kind of finding, objects sorted by
/// namespace and name.
fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Watched {} resources, {} objects, {} writes in {:.1}s.",
        report.resources, report.objects, report.writes, report.window_seconds
    );
    let thresholds = &report.thresholds;

    if !report.hot_loops.is_empty() {
        let _ = writeln!(
            out,
            "\nHot loops (written more than {} times a minute):",
            thresholds.hot_writes_per_minute
        );
        for hot in &report.hot_loops {
            let _ = writeln!(
                out,
                "  {}: {:.0} writes/min ({} in the window)",
                object(&hot.object),
                hot.writes_per_minute,
                hot.writes
            );
            if !hot.managers.is_empty() {
                let _ = writeln!(out, "    written by: {}", hot.managers.join(", "));
            }
            if !hot.changing_paths.is_empty() {
                let _ = writeln!(out, "    changing:   {}", hot.changing_paths.join(", "));
            }
        }
    }
    if !report.growth.is_empty() {
        let _ = writeln!(out, "\nGrowing objects (larger on write after write):");
        for growth in &report.growth {
            let _ = writeln!(
                out,
                "  {}: {} -> {} over {} writes",
                object(&growth.object),
                bytes(u64::from(growth.first_bytes)),
                bytes(u64::from(growth.last_bytes)),
                growth.writes
            );
        }
    }
    if !report.large_objects.is_empty() {
        let _ = writeln!(
            out,
            "\nLarge objects (over {} of the 1.5 MiB object limit):",
            bytes(thresholds.large_object_bytes)
        );
        for large in &report.large_objects {
            let _ = writeln!(
                out,
                "  {}: {} ({:.1}% of the limit)",
                object(&large.object),
                bytes(u64::from(large.bytes)),
                large.percent_of_limit
            );
        }
    }
    if !report.stuck_deletions.is_empty() {
        let _ = writeln!(
            out,
            "\nStuck deletions (deleting for more than {}):",
            human_duration(thresholds.stuck_after_seconds)
        );
        for stuck in &report.stuck_deletions {
            let _ = writeln!(
                out,
                "  {}: deleting for {}",
                object(&stuck.object),
                human_duration(stuck.deleting_for_seconds)
            );
            finalizers(&mut out, &stuck.finalizers);
        }
    }
    if !report.terminating_namespaces.is_empty() {
        let _ = writeln!(out, "\nNamespaces stuck Terminating:");
        for namespace in &report.terminating_namespaces {
            let _ = writeln!(
                out,
                "  {}: terminating for {}",
                namespace.name,
                human_duration(namespace.terminating_for_seconds)
            );
            finalizers(&mut out, &namespace.finalizers);
            if !namespace.remaining.is_empty() {
                let left: Vec<String> = namespace
                    .remaining
                    .iter()
                    .map(|(resource, count)| format!("{resource} {count}"))
                    .collect();
                let _ = writeln!(out, "    left: {}", left.join(", "));
            }
        }
    }
    if !report.deleted_after_warning.is_empty() {
        let _ = writeln!(
            out,
            "\nDeleted after a warning (the last Event about them was a Warning: the cleanup they were owed may never have happened):"
        );
        for deleted in &report.deleted_after_warning {
            let from = if deleted.reporting_controller.is_empty() {
                String::new()
            } else {
                format!(" from {}", deleted.reporting_controller)
            };
            let _ = writeln!(
                out,
                "  {}: Warning {}{from} at {}",
                object(&deleted.object),
                deleted.reason,
                deleted.time
            );
            if !deleted.note.is_empty() {
                let _ = writeln!(out, "    {}", deleted.note);
            }
        }
    }
    if !report.request_trouble.is_empty() {
        let _ = writeln!(
            out,
            "\nRequests that keep failing (from the server's metrics; conflict storms over {}/min):",
            thresholds.conflicts_per_minute
        );
        for trouble in &report.request_trouble {
            let _ = writeln!(
                out,
                "  {} {}: {} of {} requests 409 Conflict ({:.0}/min), {} server errors or throttled",
                trouble.verb,
                trouble.resource,
                trouble.conflicts,
                trouble.requests,
                trouble.conflicts_per_minute,
                trouble.errors
            );
        }
    }
    if !report.server_metrics {
        let _ = writeln!(
            out,
            "\nThe server's /metrics could not be read: conflict storms and error rates were not checked."
        );
    }
    if !report.unwatched.is_empty() {
        let _ = writeln!(out, "\nNot watched (findings there would be missed):");
        for unwatched in &report.unwatched {
            let _ = writeln!(out, "  {}: {}", unwatched.resource, unwatched.reason);
        }
    }
    if !report.has_findings() {
        let _ = writeln!(out, "\nNothing found.");
    }
    out
}

fn finalizers(out: &mut String, holds: &[FinalizerHold]) {
    for hold in holds {
        if hold.managers.is_empty() {
            let _ = writeln!(out, "    finalizer {}", hold.finalizer);
        } else {
            let _ = writeln!(
                out,
                "    finalizer {} (set by {})",
                hold.finalizer,
                hold.managers.join(", ")
            );
        }
    }
}

/// `default/flappy (configmaps)`, or `web (clusterroles.rbac.authorization.k8s.io)`.
fn object(object: &ObjectRef) -> String {
    match &object.namespace {
        Some(namespace) => format!("{namespace}/{} ({})", object.name, object.resource),
        None => format!("{} ({})", object.name, object.resource),
    }
}

fn bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.2} MiB", n as f64 / (1024.0 * 1024.0))
    }
}

/// `45s`, `7m12s`, `2h3m`.
fn human_duration(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => match s % 60 {
            0 => format!("{}m", s / 60),
            r => format!("{}m{r}s", s / 60),
        },
        s => match (s % 3600) / 60 {
            0 => format!("{}h", s / 3600),
            m => format!("{}h{m}m", s / 3600),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map(namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            namespace: Some(namespace.into()),
            name: name.into(),
            resource: "configmaps".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        }
    }

    #[test]
    fn the_text_report_groups_findings_by_kind() {
        let report = Report {
            window_seconds: 60.0,
            resources: 50,
            objects: 58,
            writes: 368,
            thresholds: doctor::Thresholds {
                hot_writes_per_minute: 10,
                large_object_bytes: 786_432,
                stuck_after_seconds: 300,
                conflicts_per_minute: 30,
            },
            hot_loops: vec![doctor::HotLoop {
                object: config_map("default", "flappy"),
                writes: 360,
                writes_per_minute: 360.0,
                managers: vec!["flapper".into()],
                changing_paths: vec![".metadata.annotations.last-run".into()],
            }],
            growth: vec![doctor::Growth {
                object: config_map("default", "journal"),
                first_bytes: 202,
                last_bytes: 860,
                writes: 8,
                growing_writes: 8,
            }],
            large_objects: vec![doctor::LargeObject {
                object: config_map("default", "big"),
                bytes: 1_200_000,
                percent_of_limit: 76.3,
            }],
            stuck_deletions: vec![doctor::StuckDeletion {
                object: config_map("team", "held"),
                deletion_timestamp: "2026-11-24T19:00:00Z".into(),
                deleting_for_seconds: 723,
                finalizers: vec![FinalizerHold {
                    finalizer: "example.com/cleanup".into(),
                    managers: vec!["cleaner".into()],
                }],
            }],
            terminating_namespaces: vec![doctor::TerminatingNamespace {
                name: "team".into(),
                deletion_timestamp: "2026-11-24T19:00:00Z".into(),
                terminating_for_seconds: 725,
                finalizers: vec![FinalizerHold {
                    finalizer: "kubernetes".into(),
                    managers: vec![],
                }],
                remaining: [("configmaps".to_string(), 1)].into(),
            }],
            deleted_after_warning: vec![doctor::DeletedAfterWarning {
                object: ObjectRef {
                    namespace: Some("default".into()),
                    name: "media".into(),
                    resource: "buckets.example.konverge.dev".into(),
                    api_version: "example.konverge.dev/v1".into(),
                    kind: "Bucket".into(),
                },
                reason: "CleanupFailed".into(),
                note: "deleting cloud bucket media: the cloud is unavailable".into(),
                reporting_controller: "bucket-operator".into(),
                time: "2026-11-24T19:00:41.5Z".into(),
            }],
            request_trouble: vec![doctor::RequestTrouble {
                resource: "configmaps".into(),
                verb: "PUT".into(),
                requests: 62,
                conflicts: 60,
                errors: 0,
                conflicts_per_minute: 60.0,
            }],
            server_metrics: true,
            unwatched: vec![doctor::Unwatched {
                resource: "secrets".into(),
                reason: "list failed: forbidden".into(),
            }],
        };
        assert_eq!(
            render(&report),
            "\
Watched 50 resources, 58 objects, 368 writes in 60.0s.

Hot loops (written more than 10 times a minute):
  default/flappy (configmaps): 360 writes/min (360 in the window)
    written by: flapper
    changing:   .metadata.annotations.last-run

Growing objects (larger on write after write):
  default/journal (configmaps): 202 B -> 860 B over 8 writes

Large objects (over 768.0 KiB of the 1.5 MiB object limit):
  default/big (configmaps): 1.14 MiB (76.3% of the limit)

Stuck deletions (deleting for more than 5m):
  team/held (configmaps): deleting for 12m3s
    finalizer example.com/cleanup (set by cleaner)

Namespaces stuck Terminating:
  team: terminating for 12m5s
    finalizer kubernetes
    left: configmaps 1

Deleted after a warning (the last Event about them was a Warning: the cleanup they were owed may never have happened):
  default/media (buckets.example.konverge.dev): Warning CleanupFailed from bucket-operator at 2026-11-24T19:00:41.5Z
    deleting cloud bucket media: the cloud is unavailable

Requests that keep failing (from the server's metrics; conflict storms over 30/min):
  PUT configmaps: 60 of 62 requests 409 Conflict (60/min), 0 server errors or throttled

Not watched (findings there would be missed):
  secrets: list failed: forbidden
"
        );
    }

    #[test]
    fn a_clean_report_says_so() {
        let report = Report {
            window_seconds: 1.0,
            resources: 50,
            objects: 55,
            writes: 0,
            thresholds: doctor::Thresholds {
                hot_writes_per_minute: 10,
                large_object_bytes: 786_432,
                stuck_after_seconds: 300,
                conflicts_per_minute: 30,
            },
            hot_loops: vec![],
            growth: vec![],
            large_objects: vec![],
            stuck_deletions: vec![],
            terminating_namespaces: vec![],
            deleted_after_warning: vec![],
            request_trouble: vec![],
            server_metrics: true,
            unwatched: vec![],
        };
        assert_eq!(
            render(&report),
            "Watched 50 resources, 55 objects, 0 writes in 1.0s.\n\nNothing found.\n"
        );
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_duration(45), "45s");
        assert_eq!(human_duration(300), "5m");
        assert_eq!(human_duration(432), "7m12s");
        assert_eq!(human_duration(7380), "2h3m");
    }

    #[test]
    fn size_warn_takes_a_percentage() {
        assert_eq!(parse_percent("50%"), Ok(50));
        assert_eq!(parse_percent("80"), Ok(80));
        assert!(parse_percent("0").is_err());
        assert!(parse_percent("150%").is_err());
    }
}
