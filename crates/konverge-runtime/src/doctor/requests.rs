//! Conflict storms and error rates, from the API server's own metrics: the
//! `apiserver_request_total{verb,group,resource,subresource,code}` counters kube-apiserver
//! (and `konverge up`) serve at `/metrics`, read when the window opens and when it closes.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Client;
use serde::Serialize;

/// One counter of `apiserver_request_total`, by what was asked and how it was answered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct RequestKey {
    /// `configmaps`, `deployments.apps`, `deployments.apps/status`.
    resource: String,
    /// kube's reported verb: `PATCH`, `APPLY`, `LIST`, ...
    verb: String,
    /// The HTTP status code.
    code: u16,
}

/// The counters at one moment.
pub(super) type Counts = BTreeMap<RequestKey, u64>;

/// A resource and verb whose requests kept failing during the window.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RequestTrouble {
    /// `configmaps`, `deployments.apps/status`.
    pub resource: String,
    /// kube's reported verb (`PUT`, `PATCH`, `APPLY`, `POST`, ...).
    pub verb: String,
    /// Requests answered during the window.
    pub requests: u64,
    /// Of them, answered 409 Conflict.
    pub conflicts: u64,
    /// Of them, answered with a server error (5xx) or 429.
    pub errors: u64,
    /// Conflicts a minute over the window.
    pub conflicts_per_minute: f64,
}

/// Reads the server's request counters; `None` when `/metrics` cannot be read (a server
/// that does not serve it, or credentials that may not read it).
pub(super) async fn scrape(client: &Client) -> Option<Counts> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(request).await.ok()?;
    Some(parse(&text))
}

/// The `apiserver_request_total` samples of a Prometheus text exposition.
fn parse(text: &str) -> Counts {
    let mut counts = Counts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = labels_of(labels);
        let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
        let Ok(code) = label("code").parse::<u16>() else {
            continue;
        };
        let (group, resource, subresource) =
            (label("group"), label("resource"), label("subresource"));
        if resource.is_empty() {
            continue;
        }
        let mut qualified = resource;
        if !group.is_empty() {
            qualified = format!("{qualified}.{group}");
        }
        if !subresource.is_empty() {
            qualified = format!("{qualified}/{subresource}");
        }
        let key = RequestKey {
            resource: qualified,
            verb: label("verb"),
            code,
        };
        *counts.entry(key).or_default() += value as u64;
    }
    counts
}

/// `a="x",b="y\"z"` as a map, with Prometheus' escapes read.
fn labels_of(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() || chars.next() != Some('"') {
            return labels;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').trim().to_string(), value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

/// The resources and verbs whose requests during the window (`after` minus `before`) had
/// more than `conflicts_per_minute` conflicts a minute, or at least 5 errors making a tenth
/// of their requests or more; the worst first.
pub(super) fn trouble(
    before: &Counts,
    after: &Counts,
    window: Duration,
    conflicts_per_minute: u32,
) -> Vec<RequestTrouble> {
    let mut by_request: BTreeMap<(&str, &str), RequestTrouble> = BTreeMap::new();
    for (key, count) in after {
        // A counter that went down means the server restarted: count from zero.
        let earlier = before.get(key).copied().filter(|b| b <= count).unwrap_or(0);
        let delta = count - earlier;
        if delta == 0 {
            continue;
        }
        let entry = by_request
            .entry((&key.resource, &key.verb))
            .or_insert_with(|| RequestTrouble {
                resource: key.resource.clone(),
                verb: key.verb.clone(),
                requests: 0,
                conflicts: 0,
                errors: 0,
                conflicts_per_minute: 0.0,
            });
        entry.requests += delta;
        match key.code {
            409 => entry.conflicts += delta,
            429 | 500..=599 => entry.errors += delta,
            _ => {}
        }
    }
    let minutes = window.as_secs_f64().max(1.0) / 60.0;
    let mut found: Vec<RequestTrouble> = by_request
        .into_values()
        .map(|mut t| {
            t.conflicts_per_minute = (t.conflicts as f64 / minutes * 10.0).round() / 10.0;
            t
        })
        .filter(|t| {
            t.conflicts_per_minute > f64::from(conflicts_per_minute)
                || (t.errors >= 5 && t.errors * 10 >= t.requests)
        })
        .collect();
    found.sort_by(|a, b| {
        (b.conflicts + b.errors)
            .cmp(&(a.conflicts + a.errors))
            .then_with(|| (&a.resource, &a.verb).cmp(&(&b.resource, &b.verb)))
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="PUT",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="PUT",version="v1"} 2
"#;

    #[test]
    fn conflict_storms_and_error_rates_are_read_from_the_counters() {
        let before = parse(BEFORE);
        let after = parse(&format!(
            "{}{}\n{}\n",
            BEFORE.replace("} 2\n", "} 62\n"),
            r#"apiserver_request_total{code="500",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="PATCH",version="v1"} 6"#,
            r#"apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1000"#,
        ));
        // 62 conflicts in all, 60 of them during the window.
        let found = trouble(&before, &after, Duration::from_secs(60), 30);
        assert_eq!(
            found,
            [
                RequestTrouble {
                    resource: "configmaps".into(),
                    verb: "PUT".into(),
                    requests: 60,
                    conflicts: 60,
                    errors: 0,
                    conflicts_per_minute: 60.0,
                },
                RequestTrouble {
                    resource: "deployments.apps/status".into(),
                    verb: "PATCH".into(),
                    requests: 6,
                    conflicts: 0,
                    errors: 6,
                    conflicts_per_minute: 0.0,
                },
            ]
        );
        assert!(trouble(&after, &after, Duration::from_secs(60), 30).is_empty());
    }

    #[test]
    fn escaped_label_values_are_read() {
        let labels = labels_of(r#"a="x\"y",b="",c="d\\e""#);
        assert_eq!(labels["a"], "x\"y");
        assert_eq!(labels["b"], "");
        assert_eq!(labels["c"], "d\\e");
    }
}
