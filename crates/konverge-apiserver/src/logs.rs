//! `GET .../pods/{name}/log`: a container's log, as kube-apiserver answers it.
//!
//! kube-apiserver checks the request (its `PodLogOptions`, the pod, the container) and then
//! streams what the pod's kubelet answers. This server runs no kubelets; whoever runs
//! simulated ones (konverge-controllers) answers for them through [`PodLogs`], set with
//! [`ApiServer::set_pod_logs`](crate::ApiServer::set_pod_logs). The server keeps the
//! kubelet's part that is about text: `sinceSeconds`/`sinceTime`, `tailLines`, `limitBytes`
//! and `timestamps` are applied here to the lines the hook gives.
//!
//! `follow=true` answers the log as it is and ends the response (a real kubelet keeps the
//! stream open for lines still to come; a simulated container writes none later).

use konverge_apimachinery::query::parse_bool;
use serde_json::{Value, json};

use crate::error::{ApiError, Cause, Result, Target};

/// One line of a container's log, as the kubelet keeps it (CRI log format: time + text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// When the container wrote the line.
    pub time: jiff::Timestamp,
    /// The line, without its line break.
    pub text: String,
}

/// What answers `pods/log` for pods on nodes it runs: the simulated kubelets.
pub trait PodLogs: Send + Sync + 'static {
    /// The log of `container` in `pod` (the stored Pod as JSON), or of its previous instance
    /// when `previous`. `Err(message)` is the kubelet's refusal, answered 400 BadRequest with
    /// that message (e.g. `container "web" in pod "web-1" is waiting to start: ContainerCreating`).
    /// `Ok(None)` when the pod's node is not one it runs.
    fn logs(
        &self,
        pod: &Value,
        container: &str,
        previous: bool,
    ) -> std::result::Result<Option<Vec<LogLine>>, String>;
}

/// The query of a log request (`PodLogOptions`), as decoded from the URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogOptions {
    pub(crate) container: Option<String>,
    pub(crate) follow: bool,
    pub(crate) previous: bool,
    pub(crate) since_seconds: Option<i64>,
    pub(crate) since_time: Option<jiff::Timestamp>,
    pub(crate) timestamps: bool,
    pub(crate) tail_lines: Option<i64>,
    pub(crate) limit_bytes: Option<i64>,
    pub(crate) insecure_skip_tls_verify_backend: bool,
    pub(crate) stream: Option<String>,
}

/// Go's `strconv.ParseInt`, with its error as the parameter decoder reports it.
fn parse_int(value: &str) -> Result<i64> {
    konverge_apimachinery::query::strconv_parse_int(value).map_err(ApiError::bad_request)
}

/// An RFC 3339 time (`metav1.Time` in a query), likewise.
fn parse_time(value: &str) -> Result<jiff::Timestamp> {
    value.parse::<jiff::Timestamp>().map_err(|_| {
        ApiError::bad_request(format!(
            "parsing time {value:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse {value:?} as \"2006\""
        ))
    })
}

impl LogOptions {
    /// Decodes the query of a log request; a value that is not of its field's type is a
    /// 400, as kube-apiserver's parameter decoding answers. Empty values count as unset.
    pub(crate) fn parse(query: Option<&str>) -> Result<Self> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))?;
        let mut opts = LogOptions::default();
        let mut seen = std::collections::BTreeSet::new();
        for (key, value) in pairs {
            // The first value of a parameter counts, as kube's parameter codec reads it. An
            // empty integer does not parse, an empty boolean is true; an empty string or
            // time is as good as none.
            if !seen.insert(key.clone()) {
                continue;
            }
            if value.is_empty() && matches!(key.as_str(), "container" | "sinceTime" | "stream") {
                continue;
            }
            match key.as_str() {
                "container" => opts.container = Some(value),
                "follow" => opts.follow = parse_bool(&value),
                "previous" => opts.previous = parse_bool(&value),
                "timestamps" => opts.timestamps = parse_bool(&value),
                "insecureSkipTLSVerifyBackend" => {
                    opts.insecure_skip_tls_verify_backend = parse_bool(&value)
                }
                "sinceSeconds" => opts.since_seconds = Some(parse_int(&value)?),
                "tailLines" => opts.tail_lines = Some(parse_int(&value)?),
                "limitBytes" => opts.limit_bytes = Some(parse_int(&value)?),
                "sinceTime" => opts.since_time = Some(parse_time(&value)?),
                "stream" => opts.stream = Some(value),
                _ => {}
            }
        }
        Ok(opts)
    }

    /// kube-apiserver's `ValidatePodLogOptions`, with `PodLogsQuerySplitStreams` off (its
    /// 1.33 default): 422 Invalid, naming every field at fault.
    pub(crate) fn validate(&self, pod_name: &str) -> Result<()> {
        let mut causes: Vec<Cause> = Vec::new();
        if let Some(tail) = self.tail_lines.filter(|t| *t < 0) {
            causes.push(Cause::invalid(
                "tailLines",
                &json!(tail),
                "must be greater than or equal to 0",
            ));
        }
        if let Some(limit) = self.limit_bytes.filter(|l| *l < 1) {
            causes.push(Cause::invalid(
                "limitBytes",
                &json!(limit),
                "must be greater than 0",
            ));
        }
        match (self.since_seconds, self.since_time) {
            (Some(_), Some(_)) => causes.push(Cause::forbidden(
                "",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            )),
            (Some(since), None) if since < 1 => causes.push(Cause::invalid(
                "sinceSeconds",
                &json!(since),
                "must be greater than 0",
            )),
            _ => {}
        }
        if self.stream.is_some() {
            causes.push(Cause::forbidden("stream", "may not be specified"));
        }
        if causes.is_empty() {
            return Ok(());
        }
        // kube prints every cause as "field: message", the empty field too.
        let rendered: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let list = match rendered.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let message = format!("PodLogOptions {pod_name:?} is invalid: {list}");
        Err(ApiError::invalid("PodLogOptions", "", pod_name, causes).with_message(message))
    }
}

/// Every container of the pod in kube's order: init containers, containers, ephemeral
/// containers.
fn container_names(pod: &Value) -> Vec<String> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|list| {
            pod.pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(String::from))
        .collect()
}

/// The container a log request reads (kube-apiserver's `validateContainer`): the one named,
/// which must be one of the pod's; else the pod's only container.
pub(crate) fn choose_container(pod: &Value, asked: Option<&str>) -> Result<String> {
    let name = crate::resources::meta::meta_str(pod, "name").unwrap_or("");
    let all = container_names(pod);
    if let Some(asked) = asked {
        if all.iter().any(|c| c == asked) {
            return Ok(asked.to_string());
        }
        return Err(ApiError::bad_request(format!(
            "container {asked} is not valid for pod {name}"
        )));
    }
    let main: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect();
    match main.as_slice() {
        [only] => Ok((*only).to_string()),
        [] => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}"
        ))),
        _ => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            all.join(" ")
        ))),
    }
}

/// A time as the kubelet prints it before a line with `timestamps=true`: Go's
/// `RFC3339Nano` (fraction without trailing zeros, none when whole), in UTC.
pub fn rfc3339_nano(time: jiff::Timestamp) -> String {
    let seconds = time.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = time.subsec_nanosecond();
    if nanos == 0 {
        return format!("{seconds}Z");
    }
    let fraction = format!("{nanos:09}");
    format!("{seconds}.{}Z", fraction.trim_end_matches('0'))
}

/// The body of the answer: the lines the options keep, as the kubelet writes them. The
/// kubelet takes the last `tailLines` lines first, then drops those before the `since`
/// time, then stops after `limitBytes` bytes (mid-line if need be).
pub(crate) fn render(lines: &[LogLine], opts: &LogOptions, now: jiff::Timestamp) -> Vec<u8> {
    let tail = match opts.tail_lines {
        Some(n) => {
            let n = usize::try_from(n).unwrap_or(0);
            &lines[lines.len().saturating_sub(n)..]
        }
        None => lines,
    };
    let since = match (opts.since_time, opts.since_seconds) {
        (Some(at), _) => Some(at),
        (None, Some(seconds)) => now
            .checked_sub(jiff::SignedDuration::from_secs(seconds))
            .ok(),
        (None, None) => None,
    };
    let mut body = Vec::new();
    for line in tail {
        if since.is_some_and(|since| line.time < since) {
            continue;
        }
        if opts.timestamps {
            body.extend_from_slice(rfc3339_nano(line.time).as_bytes());
            body.push(b' ');
        }
        body.extend_from_slice(line.text.as_bytes());
        if !line.text.ends_with('\n') {
            body.push(b'\n');
        }
    }
    if let Some(limit) = opts.limit_bytes {
        body.truncate(usize::try_from(limit).unwrap_or(0));
    }
    body
}

/// What a log request is answered with, short of the kubelet's part.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The log, `text/plain`.
    Log(Vec<u8>),
    /// 204 No Content: the pod has no node yet, so there is nothing to stream (kube-apiserver
    /// answers a log request for an unscheduled pod so).
    NoNode,
    /// Nothing answers for the pod's node: the server says so as it did before logs were
    /// answered.
    NoKubelet,
}

/// Answers `GET pods/{name}/log` for `pod` (already read) with `opts` (already validated).
pub(crate) fn answer(
    hook: Option<&dyn PodLogs>,
    pod: &Value,
    opts: &LogOptions,
    now: jiff::Timestamp,
) -> Result<Answer> {
    let container = choose_container(pod, opts.container.as_deref())?;
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        return Ok(Answer::NoNode);
    }
    let Some(hook) = hook else {
        return Ok(Answer::NoKubelet);
    };
    match hook.logs(pod, &container, opts.previous) {
        Ok(Some(lines)) => Ok(Answer::Log(render(&lines, opts, now))),
        Ok(None) => Ok(Answer::NoKubelet),
        Err(message) => Err(ApiError::bad_request(message)),
    }
}

/// The pod a log request names, or NotFound.
pub(crate) async fn read_pod(
    registry: &crate::registry::Registry,
    ns: Option<&str>,
    name: &str,
) -> Result<Value> {
    let pods = registry
        .catalog()
        .get("", "v1", "pods")
        .ok_or_else(ApiError::no_route)?;
    registry.get(&pods, ns, name, None).await.map_err(|e| {
        if e.reason == crate::error::Reason::NotFound {
            ApiError::not_found(Target {
                group: "",
                resource: "pods",
                name,
            })
        } else {
            e
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("a time")
    }

    #[test]
    fn timestamps_are_printed_as_go_prints_rfc3339_nano() {
        assert_eq!(
            rfc3339_nano(at("2026-11-27T14:00:00Z")),
            "2026-11-27T14:00:00Z"
        );
        assert_eq!(
            rfc3339_nano(at("2026-11-27T14:00:00.120Z")),
            "2026-11-27T14:00:00.12Z"
        );
        assert_eq!(
            rfc3339_nano(at("2026-11-27T14:00:00.000000001Z")),
            "2026-11-27T14:00:00.000000001Z"
        );
    }

    #[test]
    fn tail_applies_before_since_and_limit_cuts_mid_line() {
        let lines: Vec<LogLine> = (0..5)
            .map(|i| LogLine {
                time: at(&format!("2026-11-27T14:00:0{i}Z")),
                text: format!("line {i}"),
            })
            .collect();
        let opts = LogOptions {
            tail_lines: Some(3),
            since_time: Some(at("2026-11-27T14:00:03Z")),
            ..LogOptions::default()
        };
        let now = at("2026-11-27T15:00:00Z");
        assert_eq!(render(&lines, &opts, now), b"line 3\nline 4\n");
        let opts = LogOptions {
            limit_bytes: Some(9),
            ..LogOptions::default()
        };
        assert_eq!(render(&lines, &opts, now), b"line 0\nli");
        let opts = LogOptions {
            tail_lines: Some(0),
            ..LogOptions::default()
        };
        assert!(render(&lines, &opts, now).is_empty());
    }
}
