//! Auditing, as kube-apiserver's log backend does it (`--audit-policy-file`,
//! `--audit-log-path`, `--audit-log-maxsize`, `--audit-log-maxbackup`, `--audit-log-maxage`):
//! every request the policy picks becomes `audit.k8s.io/v1` `Event`s, one JSON object a line.
//!
//! - [`Policy`]: the rules, read as kube-apiserver reads a `Policy` file: the first rule that
//!   matches a request (users, user groups, verbs, resources with their groups and names,
//!   namespaces, non-resource URLs) decides its level (`None`, `Metadata`, `Request`,
//!   `RequestResponse`); no rule, no event. Stages the policy or the rule omits are not
//!   written; `omitManagedFields` drops `metadata.managedFields` from the objects logged.
//! - [`Audit`]: the policy and the log: a file (rotated by size, old files pruned by count
//!   and age, as kube's lumberjack logger does) or standard output (`-`).
//!
//! The HTTP front writes `RequestReceived` when a request arrives (after authentication),
//! `ResponseStarted` when a watch starts streaming, and `ResponseComplete` when the answer is
//! out (a watch's when its stream ends), with the authorization decision as annotations.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::auth::authz::Attributes;

/// Why auditing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The policy file is not a valid `audit.k8s.io/v1` `Policy`.
    #[error("the audit policy: {0}")]
    Policy(String),
    /// The log could not be opened.
    #[error("opening the audit log {}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// How much of a request is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing.
    None,
    /// Who, what, when, the answer's status: no bodies.
    Metadata,
    /// Metadata and the request's object.
    Request,
    /// Metadata, the request's object and the response's.
    RequestResponse,
}

impl Level {
    fn parse(text: &str) -> Option<Level> {
        Some(match text {
            "None" => Level::None,
            "Metadata" => Level::Metadata,
            "Request" => Level::Request,
            "RequestResponse" => Level::RequestResponse,
            _ => return None,
        })
    }

    /// The level's name in policies and events.
    pub fn name(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// A point in a request's life an event is written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The request arrived.
    RequestReceived,
    /// A long-running request's answer started (its headers are out).
    ResponseStarted,
    /// The answer is complete.
    ResponseComplete,
    /// The handler panicked.
    Panic,
}

impl Stage {
    fn parse(text: &str) -> Option<Stage> {
        Some(match text {
            "RequestReceived" => Stage::RequestReceived,
            "ResponseStarted" => Stage::ResponseStarted,
            "ResponseComplete" => Stage::ResponseComplete,
            "Panic" => Stage::Panic,
            _ => return None,
        })
    }

    /// The stage's name in events.
    pub fn name(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

/// One `resources` entry of a rule.
#[derive(Debug, Clone, Default)]
struct GroupResources {
    group: String,
    resources: Vec<String>,
    resource_names: Vec<String>,
}

/// One rule of a policy.
#[derive(Debug, Clone)]
struct Rule {
    level: Level,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    non_resource_urls: Vec<String>,
    omit_stages: Vec<Stage>,
    omit_managed_fields: Option<bool>,
}

/// An audit policy (`audit.k8s.io/v1` `Policy`).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<Stage>,
    omit_managed_fields: bool,
}

/// What the policy says about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// How much to record.
    pub level: Level,
    /// Stages not to write.
    pub omit_stages: Vec<Stage>,
    /// Whether to drop `metadata.managedFields` from the objects recorded.
    pub omit_managed_fields: bool,
}

impl Decision {
    /// Whether the stage is written.
    pub fn writes(&self, stage: Stage) -> bool {
        self.level > Level::None && !self.omit_stages.contains(&stage)
    }
}

fn strings(value: &Value, field: &str, at: &str) -> Result<Vec<String>, AuditError> {
    match value.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str().map(String::from).ok_or_else(|| {
                    AuditError::Policy(format!("{at}.{field}: every entry must be a string"))
                })
            })
            .collect(),
        Some(_) => Err(AuditError::Policy(format!("{at}.{field} must be a list"))),
    }
}

fn stages(value: &Value, at: &str) -> Result<Vec<Stage>, AuditError> {
    strings(value, "omitStages", at)?
        .iter()
        .map(|name| {
            Stage::parse(name).ok_or_else(|| {
                AuditError::Policy(format!(
                    "{at}.omitStages: Unsupported value: {name:?}: supported values: \
                     \"Panic\", \"RequestReceived\", \"ResponseComplete\", \"ResponseStarted\""
                ))
            })
        })
        .collect()
}

impl Policy {
    /// Reads a policy file's text (YAML or JSON): `apiVersion: audit.k8s.io/v1`, `kind:
    /// Policy`, its `rules`, `omitStages` and `omitManagedFields`. Errors name the field.
    pub fn parse(text: &str) -> Result<Policy, AuditError> {
        let value: Value = serde_saphyr::from_str(text)
            .map_err(|e| AuditError::Policy(format!("not YAML or JSON: {e}")))?;
        if value.get("kind").and_then(Value::as_str) != Some("Policy") {
            return Err(AuditError::Policy("kind must be Policy".into()));
        }
        if value.get("apiVersion").and_then(Value::as_str) != Some("audit.k8s.io/v1") {
            return Err(AuditError::Policy(format!(
                "apiVersion {} is not audit.k8s.io/v1",
                value.get("apiVersion").unwrap_or(&Value::Null)
            )));
        }
        let mut rules = Vec::new();
        for (i, rule) in value
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            rules.push(Self::rule(rule, &format!("rules[{i}]"))?);
        }
        if rules.is_empty() {
            return Err(AuditError::Policy(
                "rules: Required value: at least one rule is required".into(),
            ));
        }
        Ok(Policy {
            rules,
            omit_stages: stages(&value, "")?,
            omit_managed_fields: value
                .get("omitManagedFields")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    fn rule(rule: &Value, at: &str) -> Result<Rule, AuditError> {
        let level = rule
            .get("level")
            .and_then(Value::as_str)
            .ok_or_else(|| AuditError::Policy(format!("{at}.level: Required value")))?;
        let level = Level::parse(level).ok_or_else(|| {
            AuditError::Policy(format!(
                "{at}.level: Unsupported value: {level:?}: supported values: \"None\", \
                 \"Metadata\", \"Request\", \"RequestResponse\""
            ))
        })?;
        let mut resources = Vec::new();
        for (j, entry) in rule
            .get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("{at}.resources[{j}]");
            resources.push(GroupResources {
                group: entry
                    .get("group")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                resources: strings(entry, "resources", &at)?,
                resource_names: strings(entry, "resourceNames", &at)?,
            });
        }
        let parsed = Rule {
            level,
            users: strings(rule, "users", at)?,
            user_groups: strings(rule, "userGroups", at)?,
            verbs: strings(rule, "verbs", at)?,
            resources,
            namespaces: strings(rule, "namespaces", at)?,
            non_resource_urls: strings(rule, "nonResourceURLs", at)?,
            omit_stages: stages(rule, at)?,
            omit_managed_fields: rule.get("omitManagedFields").and_then(Value::as_bool),
        };
        if !parsed.non_resource_urls.is_empty()
            && (!parsed.resources.is_empty() || !parsed.namespaces.is_empty())
        {
            return Err(AuditError::Policy(format!(
                "{at}.nonResourceURLs: Invalid value: rules cannot apply to both regular \
                 resources and non-resource URLs"
            )));
        }
        Ok(parsed)
    }

    /// What the first rule matching `request` says (level `None` when none matches).
    pub fn decide(&self, request: &Attributes) -> Decision {
        let rule = self.rules.iter().find(|rule| rule.matches(request));
        let mut omit_stages = self.omit_stages.clone();
        if let Some(rule) = rule {
            omit_stages.extend(rule.omit_stages.iter().copied());
        }
        Decision {
            level: rule.map_or(Level::None, |r| r.level),
            omit_stages,
            omit_managed_fields: rule
                .and_then(|r| r.omit_managed_fields)
                .unwrap_or(self.omit_managed_fields),
        }
    }
}

impl Rule {
    fn matches(&self, request: &Attributes) -> bool {
        if !self.users.is_empty() && !self.users.contains(&request.user.name) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !request
                .user
                .groups
                .iter()
                .any(|g| self.user_groups.contains(g))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&request.verb) {
            return false;
        }
        if request.resource_request {
            self.non_resource_urls.is_empty()
                && self.matches_namespace(request)
                && self.matches_resource(request)
        } else {
            self.resources.is_empty()
                && self.namespaces.is_empty()
                && (self.non_resource_urls.is_empty()
                    || self.non_resource_urls.iter().any(|url| {
                        url.strip_suffix('*')
                            .map_or(*url == request.path, |prefix| {
                                request.path.starts_with(prefix)
                            })
                    }))
        }
    }

    fn matches_namespace(&self, request: &Attributes) -> bool {
        // A namespace object's own requests name it as their namespace; kube matches the
        // namespace of the request, which is empty for cluster-scoped resources.
        let namespace = if request.resource == "namespaces" && request.api_group.is_empty() {
            ""
        } else {
            request.namespace.as_str()
        };
        self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace)
    }

    fn matches_resource(&self, request: &Attributes) -> bool {
        if self.resources.is_empty() {
            return true;
        }
        let combined = if request.subresource.is_empty() {
            request.resource.clone()
        } else {
            format!("{}/{}", request.resource, request.subresource)
        };
        self.resources.iter().any(|gr| {
            gr.group == request.api_group
                && (gr.resources.is_empty()
                    || gr.resources.iter().any(|r| {
                        *r == combined
                            || (request.subresource.is_empty() && *r == request.resource)
                            || (!request.subresource.is_empty()
                                && (*r == format!("*/{}", request.subresource)
                                    || *r == format!("{}/*", request.resource)))
                    }))
                && (gr.resource_names.is_empty() || gr.resource_names.contains(&request.name))
        })
    }
}

/// Where and how the log is written (`--audit-log-*`).
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// The file, or `-` for standard output.
    pub path: PathBuf,
    /// Rotate when the file would grow past this many megabytes (0: never).
    pub max_size_mb: u64,
    /// Keep at most this many rotated files (0: all).
    pub max_backups: usize,
    /// Remove rotated files older than this many days (0: never).
    pub max_age_days: u64,
}

/// The policy and the log.
pub struct Audit {
    policy: Policy,
    log: Mutex<Log>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").finish_non_exhaustive()
    }
}

struct Log {
    options: LogOptions,
    file: Option<std::fs::File>,
    size: u64,
}

impl Audit {
    /// Audits with `policy` into the log `options` names (created, or appended to).
    pub fn new(policy: Policy, options: LogOptions) -> Result<Audit, AuditError> {
        let (file, size) = if options.path == Path::new("-") {
            (None, 0)
        } else {
            let file = open_append(&options.path)?;
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            (Some(file), size)
        };
        Ok(Audit {
            policy,
            log: Mutex::new(Log {
                options,
                file,
                size,
            }),
        })
    }

    /// What the policy says about `request`.
    pub fn decide(&self, request: &Attributes) -> Decision {
        self.policy.decide(request)
    }

    /// Writes `event` as one line. A write that fails is reported in the server's log and
    /// does not fail the request (kube-apiserver's default `blocking` mode drops events its
    /// backend cannot take, logging why).
    pub fn write(&self, event: &Value) {
        let mut line = event.to_string();
        line.push('\n');
        let Ok(mut log) = self.log.lock() else {
            return;
        };
        if let Err(error) = log.write(line.as_bytes()) {
            tracing::warn!(%error, "the audit event could not be written");
        }
    }
}

fn open_append(path: &Path) -> Result<std::fs::File, AuditError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| AuditError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| AuditError::Open {
            path: path.to_path_buf(),
            source,
        })
}

impl Log {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            let mut out = std::io::stdout().lock();
            out.write_all(line)?;
            return out.flush();
        };
        let limit = self.options.max_size_mb.saturating_mul(1024 * 1024);
        if limit > 0 && self.size > 0 && self.size + line.len() as u64 > limit {
            drop(self.file.take());
            self.rotate()?;
            self.file = Some(
                open_append(&self.options.path)
                    .map_err(|e| std::io::Error::other(e.to_string()))?,
            );
            self.size = 0;
        }
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no log file"))?;
        file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// Renames the log to `NAME-<UTC time>.EXT`, as lumberjack names backups, and prunes
    /// backups beyond the count and age limits.
    fn rotate(&self) -> std::io::Result<()> {
        let path = &self.options.path;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let stamp = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H-%M-%S%.3f")
            .to_string();
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::rename(path, dir.join(format!("{stem}-{stamp}{ext}")))?;
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let mut backups: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let is_backup = name.starts_with(&format!("{stem}-")) && name.ends_with(&ext);
                let modified = entry.metadata().ok()?.modified().ok()?;
                is_backup.then(|| (modified, entry.path()))
            })
            .collect();
        backups.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
        let max_age = Duration::from_secs(self.options.max_age_days * 24 * 3600);
        for (i, (modified, backup)) in backups.iter().enumerate() {
            let too_many = self.options.max_backups > 0 && i >= self.options.max_backups;
            let too_old =
                self.options.max_age_days > 0 && modified.elapsed().unwrap_or_default() > max_age;
            if too_many || too_old {
                let _ = std::fs::remove_file(backup);
            }
        }
        Ok(())
    }
}

/// An RFC 3339 time with microseconds, as audit events carry them.
pub fn micro_time(at: jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Drops `metadata.managedFields` from an object, or from each item of a list.
pub fn without_managed_fields(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(metadata) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("managedFields");
            }
        }
    }
    object
}

/// The `objectRef` of a resource request.
pub fn object_ref(request: &Attributes) -> Option<Value> {
    if !request.resource_request {
        return None;
    }
    let mut reference = json!({"resource": request.resource, "apiVersion": request.api_version});
    let mut set = |key: &str, value: &str| {
        if !value.is_empty() {
            reference[key] = json!(value);
        }
    };
    set("namespace", &request.namespace);
    set("name", &request.name);
    set("apiGroup", &request.api_group);
    set("subresource", &request.subresource);
    Some(reference)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::user::UserInfo;

    fn request(user: &str, groups: &[&str], verb: &str, group: &str, resource: &str) -> Attributes {
        Attributes::resource(
            &UserInfo::new(user, groups),
            verb,
            group,
            resource,
            "default",
            "web",
        )
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["pods", "pods/log"]
- level: Request
  verbs: ["create"]
  resources:
  - group: apps
    resources: ["deployments"]
    resourceNames: ["web"]
  omitManagedFields: true
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: Metadata
  omitStages: [ResponseStarted]
"#;

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(POLICY).expect("a policy");
        let decide = |a: &Attributes| policy.decide(a).level;
        assert_eq!(
            decide(&request("system:kube-proxy", &[], "get", "", "pods")),
            Level::None
        );
        assert_eq!(
            decide(&request("alice", &[], "get", "", "pods")),
            Level::RequestResponse
        );
        assert_eq!(
            decide(&request("alice", &[], "create", "apps", "deployments")),
            Level::Request
        );
        assert_eq!(
            decide(&request("alice", &[], "update", "apps", "deployments")),
            Level::Metadata
        );
        let decision = policy.decide(&request("alice", &[], "create", "apps", "deployments"));
        assert!(decision.omit_managed_fields);
        assert!(!decision.writes(Stage::RequestReceived));
        assert!(decision.writes(Stage::ResponseComplete));
        let mut health = request("alice", &[], "get", "", "");
        health.resource_request = false;
        health.path = "/healthz/etcd".into();
        assert_eq!(decide(&health), Level::None);
        health.path = "/metrics".into();
        let decision = policy.decide(&health);
        assert_eq!(decision.level, Level::Metadata);
        assert!(!decision.writes(Stage::ResponseStarted));
    }

    #[test]
    fn bad_policies_say_what_is_wrong() {
        let error = |text: &str| Policy::parse(text).expect_err("refused").to_string();
        assert_eq!(
            error("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n"),
            "the audit policy: rules[0].level: Unsupported value: \"Everything\": supported \
             values: \"None\", \"Metadata\", \"Request\", \"RequestResponse\""
        );
        assert_eq!(
            error("apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: []\n"),
            "the audit policy: apiVersion \"audit.k8s.io/v1beta1\" is not audit.k8s.io/v1"
        );
        assert_eq!(
            error("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n"),
            "the audit policy: rules: Required value: at least one rule is required"
        );
        assert!(
            error(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  \
                 namespaces: [a]\n  nonResourceURLs: [/x]\n"
            )
            .contains("rules cannot apply to both regular resources and non-resource URLs")
        );
    }

    #[test]
    fn the_log_rotates_by_size_and_keeps_the_newest_backups() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("audit.log");
        let audit = Audit::new(
            Policy::parse(POLICY).expect("a policy"),
            LogOptions {
                path: path.clone(),
                max_size_mb: 1,
                max_backups: 1,
                max_age_days: 0,
            },
        )
        .expect("an audit log");
        let big = json!({"padding": "x".repeat(400 * 1024)});
        for _ in 0..7 {
            audit.write(&big);
            // Backups are named to the millisecond.
            std::thread::sleep(Duration::from_millis(2));
        }
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "the log and one backup: {names:?}");
        assert!(names.iter().any(|n| n == "audit.log"));
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("audit-") && n.ends_with(".log"))
        );
        let size = std::fs::metadata(&path).expect("the log").len();
        assert!(size <= 1024 * 1024, "{size}");
    }
}
