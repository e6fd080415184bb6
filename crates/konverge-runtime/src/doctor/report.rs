//! The doctor's findings, built from the records at the end of the window.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::events::{LatestEvents, Said};
use super::record::{ObjectRecord, ResourceRecords};
use super::{OBJECT_SIZE_LIMIT, Options};

/// Fewest writes in a window that can make a hot loop: with a short window one edit would
/// otherwise extrapolate to a hot rate.
const MIN_HOT_WRITES: u32 = 3;
/// Fewest writes that must have grown an object, and by how many bytes at least, for growth to
/// be reported: a counter going from 9 to 10 grows an object too.
const MIN_GROWING_WRITES: u32 = 3;
const MIN_GROWTH_BYTES: u32 = 64;
/// Changing paths shown per hot loop, the most frequent first.
const SHOWN_PATHS: usize = 5;
/// Keys under one parent, each changed once, that are shown as `parent.*`.
const MIN_COLLAPSED_KEYS: u32 = 3;

/// What the doctor found.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    /// How long the window was open, in seconds.
    pub window_seconds: f64,
    /// Resources watched (listed at least once).
    pub resources: usize,
    /// Objects present at the end of the window.
    pub objects: u64,
    /// Writes (creations, updates, deletions) seen during the window.
    pub writes: u64,
    /// The thresholds the findings were judged by.
    pub thresholds: Thresholds,
    /// Objects written too often.
    pub hot_loops: Vec<HotLoop>,
    /// Objects that kept growing.
    pub growth: Vec<Growth>,
    /// Objects close to the size limit.
    pub large_objects: Vec<LargeObject>,
    /// Deletions held up by finalizers.
    pub stuck_deletions: Vec<StuckDeletion>,
    /// Namespaces stuck Terminating.
    pub terminating_namespaces: Vec<TerminatingNamespace>,
    /// Objects deleted during the window whose latest Event was a Warning.
    pub deleted_after_warning: Vec<DeletedAfterWarning>,
    /// Resources and verbs with conflict storms or high error rates.
    pub request_trouble: Vec<super::RequestTrouble>,
    /// Whether the server's `/metrics` could be read (request trouble is only judged then).
    pub server_metrics: bool,
    /// Resources that could not be watched (not findings: the report is silent about them).
    pub unwatched: Vec<Unwatched>,
}

impl Report {
    /// Whether anything was found (the `konverge doctor` exit code is 1 then).
    pub fn has_findings(&self) -> bool {
        !(self.hot_loops.is_empty()
            && self.growth.is_empty()
            && self.large_objects.is_empty()
            && self.stuck_deletions.is_empty()
            && self.terminating_namespaces.is_empty()
            && self.deleted_after_warning.is_empty()
            && self.request_trouble.is_empty())
    }
}

/// The thresholds of a run (from [`Options`]).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Thresholds {
    /// Writes per minute above which an object is a hot loop.
    pub hot_writes_per_minute: u32,
    /// Bytes above which an object is large.
    pub large_object_bytes: u64,
    /// Seconds after which a pending deletion is stuck.
    pub stuck_after_seconds: u64,
    /// 409 Conflicts a minute above which a resource and verb has a conflict storm.
    pub conflicts_per_minute: u32,
}

/// An object, as kubectl would name it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectRef {
    /// Namespace, for namespaced objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// Resource: `configmaps`, `deployments.apps`.
    pub resource: String,
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
}

/// An object written more often than the threshold.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HotLoop {
    /// The object.
    pub object: ObjectRef,
    /// Writes during the window.
    pub writes: u32,
    /// Writes per minute: over the busiest minute, or extrapolated from a shorter window.
    pub writes_per_minute: f64,
    /// Field managers whose managedFields `time` moved during the window.
    pub managers: Vec<String>,
    /// The fields that changed most often, jq style (`.metadata.annotations.last-run`).
    pub changing_paths: Vec<String>,
}

/// An object that grew on several writes and never shrank.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Growth {
    /// The object.
    pub object: ObjectRef,
    /// Serialized size when the window opened (or at creation), in bytes.
    pub first_bytes: u32,
    /// Serialized size at the end, in bytes.
    pub last_bytes: u32,
    /// Writes during the window.
    pub writes: u32,
    /// Writes that made it larger.
    pub growing_writes: u32,
}

/// An object above the size warning.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LargeObject {
    /// The object.
    pub object: ObjectRef,
    /// Serialized size, in bytes.
    pub bytes: u32,
    /// Share of the 1.5 MiB object limit, in percent.
    pub percent_of_limit: f64,
}

/// A deletion pending for longer than the threshold.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StuckDeletion {
    /// The object.
    pub object: ObjectRef,
    /// Its deletionTimestamp.
    pub deletion_timestamp: String,
    /// Seconds since then.
    pub deleting_for_seconds: u64,
    /// The finalizers holding it.
    pub finalizers: Vec<FinalizerHold>,
}

/// A finalizer and who set it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FinalizerHold {
    /// The finalizer.
    pub finalizer: String,
    /// Managers whose managedFields own it (none for a namespace's `spec.finalizers`).
    pub managers: Vec<String>,
}

/// A namespace stuck Terminating.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TerminatingNamespace {
    /// The namespace.
    pub name: String,
    /// Its deletionTimestamp.
    pub deletion_timestamp: String,
    /// Seconds since then.
    pub terminating_for_seconds: u64,
    /// Its finalizers (metadata's and spec's).
    pub finalizers: Vec<FinalizerHold>,
    /// What is left in it: resource → objects.
    pub remaining: BTreeMap<String, u64>,
}

/// An object deleted during the window whose latest Event (matched by the uid in its
/// `regarding`, or a core Event's `involvedObject`) was a `Warning`: the last thing its
/// controller said about it was a failure, so the cleanup it owed likely never happened (an
/// external resource leaked).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeletedAfterWarning {
    /// The object.
    pub object: ObjectRef,
    /// The Event's `reason`: `CleanupFailed`.
    pub reason: String,
    /// The Event's `note` (core v1: `message`), at most 1 KiB.
    pub note: String,
    /// The Event's `reportingController` (core v1: `reportingComponent` or
    /// `source.component`); empty when it names none.
    pub reporting_controller: String,
    /// When the Event last happened (`series.lastObservedTime`, `eventTime`, the legacy
    /// `lastTimestamp`, or its creationTimestamp), RFC 3339.
    pub time: String,
}

/// A resource the doctor could not list.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Unwatched {
    /// The resource.
    pub resource: String,
    /// The last error, or why it was given up.
    pub reason: String,
}

pub(super) fn build(
    watched: &[ResourceRecords],
    events: Option<&LatestEvents>,
    options: &Options,
    window: Duration,
    writes: u64,
    now: jiff::Timestamp,
) -> Report {
    let large_object_bytes = OBJECT_SIZE_LIMIT * u64::from(options.size_warn_percent) / 100;
    let mut report = Report {
        window_seconds: (window.as_secs_f64() * 1000.0).round() / 1000.0,
        resources: watched.iter().filter(|r| r.listed_once).count()
            + usize::from(events.is_some_and(|e| e.listed_once)),
        objects: 0,
        writes,
        thresholds: Thresholds {
            hot_writes_per_minute: options.hot_writes_per_minute,
            large_object_bytes,
            stuck_after_seconds: options.stuck_after.as_secs(),
            conflicts_per_minute: options.conflicts_per_minute,
        },
        hot_loops: Vec::new(),
        growth: Vec::new(),
        large_objects: Vec::new(),
        stuck_deletions: Vec::new(),
        terminating_namespaces: Vec::new(),
        deleted_after_warning: Vec::new(),
        request_trouble: Vec::new(),
        server_metrics: false,
        unwatched: Vec::new(),
    };
    if let Some(events) = events.filter(|e| !e.listed_once) {
        report.unwatched.push(Unwatched {
            resource: events.resource.clone(),
            reason: events
                .problem
                .clone()
                .unwrap_or_else(|| "not listed before the window opened".to_string()),
        });
    }
    let stuck_after = options.stuck_after.as_secs_f64();
    let mut remaining: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();

    for records in watched {
        let resource = &records.resource;
        let resource_name = resource.display_name();
        if !records.listed_once {
            report.unwatched.push(Unwatched {
                resource: resource_name.clone(),
                reason: records
                    .problem
                    .clone()
                    .unwrap_or_else(|| "not listed before the window opened".to_string()),
            });
        }
        for ((namespace, name), uid) in &records.deleted {
            let Some(Said::Warning(warning)) = events.and_then(|e| e.latest(*uid)) else {
                continue;
            };
            report.deleted_after_warning.push(DeletedAfterWarning {
                object: ObjectRef {
                    namespace: namespace.as_deref().map(str::to_string),
                    name: name.to_string(),
                    resource: resource_name.clone(),
                    api_version: resource.api.api_version.clone(),
                    kind: resource.api.kind.clone(),
                },
                reason: warning.reason.to_string(),
                note: warning.note.to_string(),
                reporting_controller: warning.controller.to_string(),
                time: warning.at.to_string(),
            });
        }
        for ((namespace, name), record) in &records.objects {
            let object = || ObjectRef {
                namespace: namespace.as_deref().map(str::to_string),
                name: name.to_string(),
                resource: resource_name.clone(),
                api_version: resource.api.api_version.clone(),
                kind: resource.api.kind.clone(),
            };
            if !record.gone {
                report.objects += 1;
                if let Some(namespace) = namespace {
                    *remaining
                        .entry(namespace)
                        .or_default()
                        .entry(resource_name.clone())
                        .or_default() += 1;
                }
            }
            if let Some(churn) = &record.churn {
                let per_minute = writes_per_minute(record, window);
                if !resource.heartbeat
                    && churn.writes >= MIN_HOT_WRITES
                    && per_minute > f64::from(options.hot_writes_per_minute)
                {
                    let mut paths: Vec<(String, u32)> = collapse_new_keys(&churn.paths);
                    paths.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                    report.hot_loops.push(HotLoop {
                        object: object(),
                        writes: churn.writes,
                        writes_per_minute: (per_minute * 10.0).round() / 10.0,
                        managers: churn.managers.iter().cloned().collect(),
                        changing_paths: paths
                            .into_iter()
                            .take(SHOWN_PATHS)
                            .map(|(path, _)| path)
                            .collect(),
                    });
                }
                if !record.gone
                    && !churn.shrank
                    && churn.grew >= MIN_GROWING_WRITES
                    && record.last_bytes >= record.first_bytes.saturating_add(MIN_GROWTH_BYTES)
                {
                    report.growth.push(Growth {
                        object: object(),
                        first_bytes: record.first_bytes,
                        last_bytes: record.last_bytes,
                        writes: churn.writes,
                        growing_writes: churn.grew,
                    });
                }
            }
            if !record.gone && u64::from(record.last_bytes) > large_object_bytes {
                report.large_objects.push(LargeObject {
                    object: object(),
                    bytes: record.last_bytes,
                    percent_of_limit: (f64::from(record.last_bytes) * 1000.0
                        / OBJECT_SIZE_LIMIT as f64)
                        .round()
                        / 10.0,
                });
            }
            if let Some(deleting) = record.deleting.as_deref().filter(|_| !record.gone) {
                let age = now.duration_since(deleting.since).as_secs_f64();
                if age < stuck_after {
                    continue;
                }
                let finalizers = deleting
                    .finalizers
                    .iter()
                    .map(|(finalizer, managers)| FinalizerHold {
                        finalizer: finalizer.clone(),
                        managers: managers.clone(),
                    })
                    .collect();
                let deletion_timestamp = deleting.since.to_string();
                let seconds = age.max(0.0) as u64;
                if resource.is_namespaces() {
                    report.terminating_namespaces.push(TerminatingNamespace {
                        name: name.to_string(),
                        deletion_timestamp,
                        terminating_for_seconds: seconds,
                        finalizers,
                        remaining: BTreeMap::new(),
                    });
                } else {
                    report.stuck_deletions.push(StuckDeletion {
                        object: object(),
                        deletion_timestamp,
                        deleting_for_seconds: seconds,
                        finalizers,
                    });
                }
            }
        }
    }
    for namespace in &mut report.terminating_namespaces {
        if let Some(left) = remaining.remove(namespace.name.as_str()) {
            namespace.remaining = left;
        }
    }

    report.hot_loops.sort_by(|a, b| a.object.cmp(&b.object));
    report.growth.sort_by(|a, b| a.object.cmp(&b.object));
    report.large_objects.sort_by(|a, b| a.object.cmp(&b.object));
    report
        .stuck_deletions
        .sort_by(|a, b| a.object.cmp(&b.object));
    report
        .terminating_namespaces
        .sort_by(|a, b| a.name.cmp(&b.name));
    report
        .deleted_after_warning
        .sort_by(|a, b| a.object.cmp(&b.object).then_with(|| a.time.cmp(&b.time)));
    report.unwatched.sort_by(|a, b| a.resource.cmp(&b.resource));
    report
}

/// The changed paths with their counts, where keys that each changed once under one parent
/// (a map gaining a key per write) become one `parent.*`, counted for all of them: the parent
/// is what keeps changing.
fn collapse_new_keys(paths: &BTreeMap<String, u32>) -> Vec<(String, u32)> {
    let mut once_by_parent: BTreeMap<&str, u32> = BTreeMap::new();
    for (path, &count) in paths {
        if count == 1 {
            *once_by_parent.entry(parent(path)).or_default() += 1;
        }
    }
    let mut collapsed: BTreeMap<String, u32> = BTreeMap::new();
    for (path, &count) in paths {
        let parent = parent(path);
        if count == 1
            && once_by_parent
                .get(parent)
                .is_some_and(|&n| n >= MIN_COLLAPSED_KEYS)
        {
            *collapsed.entry(format!("{parent}.*")).or_default() += 1;
        } else {
            collapsed.insert(path.clone(), count);
        }
    }
    collapsed.into_iter().collect()
}

/// `.data` for `.data.key` and `.metadata.annotations` for `.metadata.annotations["a.b/c"]`.
fn parent(path: &str) -> &str {
    let cut = if path.ends_with("\"]") {
        path.rfind("[\"")
    } else {
        path.rfind('.')
    };
    &path[..cut.unwrap_or(0)]
}

/// The busiest minute's writes for a window of a minute or more; for a shorter window, its
/// writes scaled to a minute.
fn writes_per_minute(record: &ObjectRecord, window: Duration) -> f64 {
    let Some(churn) = &record.churn else {
        return 0.0;
    };
    let seconds = window.as_secs_f64();
    if seconds >= 60.0 {
        f64::from(churn.busiest_minute)
    } else {
        f64::from(churn.writes) * 60.0 / seconds.max(0.001)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    use serde_json::json;
    use tokio::time::Instant;

    use super::*;
    use crate::doctor::{Shared, WatchedResource};

    fn bucket(name: &str, uid: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.konverge.dev/v1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "default", "uid": uid,
                         "resourceVersion": "1"},
            "spec": {"region": "eu-1"},
        }))
        .unwrap()
    }

    fn event(uid: &str, type_: &str, reason: &str, second: u32) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": format!("{uid}.{second}"), "namespace": "default"},
            "regarding": {"apiVersion": "example.konverge.dev/v1", "kind": "Bucket",
                          "namespace": "default", "name": "whatever", "uid": uid},
            "type": type_, "reason": reason, "note": format!("{reason}: the cloud said no"),
            "reportingController": "bucket-operator",
            "eventTime": format!("2026-01-01T00:00:{second:02}.000000Z"),
        }))
        .unwrap()
    }

    /// Buckets `kept`, `cleaned`, `leaked` and `quiet` listed, the window opened, then all
    /// but `kept` deleted, with these Events about them.
    fn deleted_after_warning(events: &[DynamicObject]) -> Vec<DeletedAfterWarning> {
        let shared = Arc::new(Shared::default());
        let resource = WatchedResource {
            api: ApiResource {
                group: "example.konverge.dev".into(),
                version: "v1".into(),
                api_version: "example.konverge.dev/v1".into(),
                kind: "Bucket".into(),
                plural: "buckets".into(),
            },
            heartbeat: false,
        };
        let mut records = ResourceRecords::new(resource, shared.clone());
        let names = ["kept", "cleaned", "leaked", "quiet"];
        records.relist_started();
        for name in names {
            records.listed(bucket(name, &format!("uid-{name}")));
        }
        records.relist_done();
        let _ = shared.window_start.set(Instant::now());
        for name in &names[1..] {
            records.deleted(bucket(name, &format!("uid-{name}")));
        }
        let mut latest = LatestEvents::new("events.events.k8s.io".into());
        latest.listed_once = true;
        for event in events {
            latest.seen(event);
        }
        build(
            &[records],
            Some(&latest),
            &Options::default(),
            Duration::from_secs(5),
            4,
            jiff::Timestamp::now(),
        )
        .deleted_after_warning
    }

    #[test]
    fn an_object_deleted_while_its_latest_event_is_a_warning_is_reported() {
        let found = deleted_after_warning(&[
            // Failed, then cleaned up: the last word is Normal.
            event("uid-cleaned", "Warning", "CleanupFailed", 1),
            event("uid-cleaned", "Normal", "Deleted", 2),
            // Created fine, then the cleanup failed: the last word is a Warning.
            event("uid-leaked", "Normal", "Created", 1),
            event("uid-leaked", "Warning", "CleanupFailed", 3),
            // Not deleted: a Warning about a live object is not this finding.
            event("uid-kept", "Warning", "CleanupFailed", 4),
        ]);
        assert_eq!(
            found,
            [DeletedAfterWarning {
                object: ObjectRef {
                    namespace: Some("default".into()),
                    name: "leaked".into(),
                    resource: "buckets.example.konverge.dev".into(),
                    api_version: "example.konverge.dev/v1".into(),
                    kind: "Bucket".into(),
                },
                reason: "CleanupFailed".into(),
                note: "CleanupFailed: the cloud said no".into(),
                reporting_controller: "bucket-operator".into(),
                time: "2026-01-01T00:00:03Z".into(),
            }]
        );
    }

    #[test]
    fn a_normal_event_after_a_warning_clears_it_whatever_order_they_arrive_in() {
        let found = deleted_after_warning(&[
            event("uid-leaked", "Normal", "Deleted", 5),
            event("uid-leaked", "Warning", "CleanupFailed", 3),
        ]);
        assert_eq!(found, []);
    }

    #[test]
    fn a_long_window_is_judged_by_its_busiest_minute_a_short_one_by_extrapolation() {
        // 12 writes within one minute, then one every minute for the rest of five minutes.
        let mut times: Vec<u32> = (0..12).map(|i| 100_000 + i * 1_000).collect();
        times.extend([180_000, 240_000, 299_000]);
        let record = ObjectRecord::written_at(&times);
        assert_eq!(writes_per_minute(&record, Duration::from_secs(300)), 12.0);

        // 3 writes in 2 seconds: 90 a minute.
        let record = ObjectRecord::written_at(&[0, 700, 1_400]);
        assert_eq!(writes_per_minute(&record, Duration::from_secs(2)), 90.0);
    }

    #[test]
    fn keys_added_one_per_write_collapse_into_their_parent() {
        let paths: BTreeMap<String, u32> = [
            (".data.entry-1", 1),
            (".data.entry-2", 1),
            (".data.entry-3", 1),
            (".metadata.annotations.last-run", 3),
            (r#".metadata.annotations["example.com/a"]"#, 1),
        ]
        .into_iter()
        .map(|(p, n)| (p.to_string(), n))
        .collect();
        assert_eq!(
            collapse_new_keys(&paths),
            [
                (".data.*".to_string(), 3),
                (".metadata.annotations.last-run".to_string(), 3),
                (r#".metadata.annotations["example.com/a"]"#.to_string(), 1),
            ]
        );
        assert_eq!(
            parent(r#".metadata.annotations["example.com/a"]"#),
            ".metadata.annotations"
        );
        assert_eq!(parent(".data"), "");
    }
}
