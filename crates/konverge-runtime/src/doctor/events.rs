//! The last thing said about each object. The doctor watches Events (events.k8s.io/v1, or
//! core v1 where that is not served) and keeps, per regarded object, only the latest one: for
//! a `Normal` Event its time, for a `Warning` also its reason, note and reporting controller.
//! So memory follows how many objects have Events, not how many Events there are.
//!
//! An object deleted during the window whose latest Event is a Warning is reported as
//! [`DeletedAfterWarning`](super::DeletedAfterWarning): the last thing its controller said
//! about it was a failure, so the cleanup it owed (an external resource) likely never
//! happened.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use kube::api::DynamicObject;
use serde_json::Value;

use super::record::uid_key;

/// The longest note kept, in bytes: events.k8s.io/v1 allows 1 kB, core v1 messages have no
/// limit.
const MAX_NOTE_BYTES: usize = 1024;

/// The latest Event of each regarded object, by the hash of its uid.
pub(crate) struct LatestEvents {
    /// The Events resource watched, as kubectl names it.
    pub(crate) resource: String,
    by_uid: HashMap<u64, Said>,
    /// The last error the watch reported.
    pub(crate) problem: Option<String>,
    /// Whether a complete list ever arrived.
    pub(crate) listed_once: bool,
}

/// The latest Event about one object.
#[derive(Debug, PartialEq)]
pub(crate) enum Said {
    /// A `Normal` Event: only its time matters (a later Warning replaces it).
    Normal {
        /// When it was (last) observed.
        at: jiff::Timestamp,
    },
    /// A `Warning` Event.
    Warning(Box<Warning>),
}

impl Said {
    fn at(&self) -> jiff::Timestamp {
        match self {
            Said::Normal { at } => *at,
            Said::Warning(warning) => warning.at,
        }
    }
}

/// A Warning Event, as much of it as the report shows.
#[derive(Debug, PartialEq)]
pub(crate) struct Warning {
    /// When it was (last) observed.
    pub(crate) at: jiff::Timestamp,
    /// `reason`: `CleanupFailed`, `BackOff`.
    pub(crate) reason: Box<str>,
    /// `note` (core v1: `message`), cut to [`MAX_NOTE_BYTES`].
    pub(crate) note: Box<str>,
    /// `reportingController` (core v1: `reportingComponent`, or `source.component`).
    pub(crate) controller: Box<str>,
}

impl LatestEvents {
    pub(crate) fn new(resource: String) -> LatestEvents {
        LatestEvents {
            resource,
            by_uid: HashMap::new(),
            problem: None,
            listed_once: false,
        }
    }

    /// An Event was listed, created or updated: it replaces what was said about its object
    /// unless that is newer. At equal times the later arrival wins (a watch delivers in
    /// resourceVersion order).
    pub(crate) fn seen(&mut self, event: &DynamicObject) {
        let Some((uid, said)) = parse(event) else {
            return;
        };
        match self.by_uid.entry(uid) {
            Entry::Vacant(entry) => {
                entry.insert(said);
            }
            Entry::Occupied(mut entry) => {
                if said.at() >= entry.get().at() {
                    entry.insert(said);
                }
            }
        }
    }

    /// The latest Event about the object with this uid hash (see [`uid_key`]).
    pub(crate) fn latest(&self, uid: u64) -> Option<&Said> {
        self.by_uid.get(&uid)
    }
}

/// The regarded object's uid hash and what the Event says, from an events.k8s.io Event or a
/// core v1 one. `None` for an Event about no object with a uid, or with no time at all.
fn parse(event: &DynamicObject) -> Option<(u64, Said)> {
    let data = &event.data;
    let regarding = data
        .get("regarding")
        .or_else(|| data.get("involvedObject"))?;
    let uid = regarding.get("uid").and_then(Value::as_str)?;
    if uid.is_empty() {
        return None;
    }
    let at = time(data, event)?;
    let said = if data.get("type").and_then(Value::as_str) == Some("Warning") {
        Said::Warning(Box::new(Warning {
            at,
            reason: text(data, &["/reason"]).into(),
            note: truncate(text(data, &["/note", "/message"]), MAX_NOTE_BYTES).into(),
            controller: text(
                data,
                &[
                    "/reportingController",
                    "/reportingComponent",
                    "/deprecatedSource/component",
                    "/source/component",
                ],
            )
            .into(),
        }))
    } else {
        Said::Normal { at }
    };
    Some((uid_key(uid), said))
}

/// When the Event last happened: `series.lastObservedTime` for a repeating Event, else
/// `eventTime`, else the legacy `lastTimestamp` (events.k8s.io: `deprecatedLastTimestamp`),
/// else the object's creationTimestamp.
fn time(data: &Value, event: &DynamicObject) -> Option<jiff::Timestamp> {
    [
        "/series/lastObservedTime",
        "/eventTime",
        "/deprecatedLastTimestamp",
        "/lastTimestamp",
    ]
    .iter()
    .filter_map(|pointer| data.pointer(pointer).and_then(Value::as_str))
    .find_map(|text| text.parse::<jiff::Timestamp>().ok())
    .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The first non-empty string among `pointers`, or "".
fn text<'a>(data: &'a Value, pointers: &[&str]) -> &'a str {
    pointers
        .iter()
        .filter_map(|pointer| data.pointer(pointer).and_then(Value::as_str))
        .find(|text| !text.is_empty())
        .unwrap_or_default()
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    /// An events.k8s.io/v1 Event about the object with uid `uid`.
    fn v1(name: &str, uid: &str, type_: &str, reason: &str, event_time: &str) -> DynamicObject {
        event(json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "regarding": {"apiVersion": "example.konverge.dev/v1", "kind": "Bucket",
                          "namespace": "default", "name": "media", "uid": uid},
            "type": type_, "reason": reason, "note": format!("{reason} happened"),
            "reportingController": "bucket-operator", "reportingInstance": "bucket-operator",
            "action": "Reconcile", "eventTime": event_time,
        }))
    }

    #[test]
    fn the_latest_event_by_time_wins_not_the_last_to_arrive() {
        let mut latest = LatestEvents::new("events.events.k8s.io".into());
        latest.seen(&v1(
            "b",
            "u1",
            "Normal",
            "Deleted",
            "2026-01-01T00:00:02.000000Z",
        ));
        latest.seen(&v1(
            "a",
            "u1",
            "Warning",
            "CleanupFailed",
            "2026-01-01T00:00:01.000000Z",
        ));
        assert_eq!(
            latest.latest(uid_key("u1")),
            Some(&Said::Normal {
                at: "2026-01-01T00:00:02Z".parse().unwrap()
            })
        );
        assert_eq!(latest.latest(uid_key("u2")), None);
    }

    #[test]
    fn a_repeating_event_is_as_recent_as_its_series() {
        let mut latest = LatestEvents::new("events.events.k8s.io".into());
        latest.seen(&v1(
            "normal",
            "u1",
            "Normal",
            "Created",
            "2026-01-01T00:00:05.000000Z",
        ));
        let mut warning = v1(
            "warning",
            "u1",
            "Warning",
            "CleanupFailed",
            "2026-01-01T00:00:01.000000Z",
        );
        warning.data["series"] =
            json!({"count": 3, "lastObservedTime": "2026-01-01T00:00:09.000000Z"});
        latest.seen(&warning);
        let Some(Said::Warning(said)) = latest.latest(uid_key("u1")) else {
            panic!("{:?}", latest.latest(uid_key("u1")));
        };
        assert_eq!(said.at, "2026-01-01T00:00:09Z".parse().unwrap());
        assert_eq!(&*said.reason, "CleanupFailed");
        assert_eq!(&*said.note, "CleanupFailed happened");
        assert_eq!(&*said.controller, "bucket-operator");
    }

    #[test]
    fn core_events_are_read_by_their_own_names() {
        let mut latest = LatestEvents::new("events".into());
        latest.seen(&event(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "default",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "uid": "p1"},
            "type": "Warning", "reason": "FailedMount", "message": "volume not found",
            "source": {"component": "kubelet"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
            "count": 4,
        })));
        let Some(Said::Warning(said)) = latest.latest(uid_key("p1")) else {
            panic!("no warning");
        };
        assert_eq!(said.at, "2026-01-01T00:01:00Z".parse().unwrap());
        assert_eq!(&*said.note, "volume not found");
        assert_eq!(&*said.controller, "kubelet");
    }

    #[test]
    fn events_about_nothing_are_ignored_and_notes_are_bounded() {
        let mut latest = LatestEvents::new("events.events.k8s.io".into());
        let mut no_uid = v1(
            "x",
            "",
            "Warning",
            "Whatever",
            "2026-01-01T00:00:01.000000Z",
        );
        latest.seen(&no_uid);
        no_uid.data["regarding"] = Value::Null;
        latest.seen(&no_uid);
        assert!(latest.by_uid.is_empty());

        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        let mut long = v1("y", "u1", "Warning", "Big", "2026-01-01T00:00:01.000000Z");
        long.data["note"] = json!("x".repeat(5000));
        latest.seen(&long);
        let Some(Said::Warning(said)) = latest.latest(uid_key("u1")) else {
            panic!("no warning");
        };
        assert_eq!(said.note.len(), MAX_NOTE_BYTES);
    }
}
