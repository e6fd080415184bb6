//! The Pod Security Standards checks, each in every version it had, and how a level at a
//! version picks and orders them.
//!
//! A pod is checked as decoded JSON (the object has passed validation, so fields have their
//! types; an absent or null field counts as unset, as a nil pointer does in kube). Every
//! check reports kube-apiserver's forbidden reason and detail word for word, because clients
//! and people match on them.

use std::collections::BTreeSet;

use serde_json::Value;

use super::policy::{Level, LevelVersion, Version};

/// The newest policy version any check changed in: `latest`, and any newer `v1.N`, mean this.
const NEWEST_MINOR: u64 = 32;

/// What one check found wrong with a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Violation {
    /// Short, always shown (`host namespaces`).
    pub(super) reason: String,
    /// What exactly, shown when one object is checked (`hostNetwork=true`); may be empty.
    pub(super) detail: String,
}

/// The pod, or pod template, being checked: its metadata and its spec.
#[derive(Debug, Clone, Copy)]
pub(super) struct PodView<'a> {
    /// `metadata` (annotations are read from it).
    pub(super) metadata: &'a Value,
    /// `spec`.
    pub(super) spec: &'a Value,
}

type CheckFn = fn(&PodView<'_>) -> Option<Violation>;

/// One version of a check: from which policy version on it applies, and which baseline
/// checks it replaces at the restricted level.
struct Versioned {
    since: u64,
    check: CheckFn,
    overrides: &'static [&'static str],
}

/// A check, with every version it had.
struct Check {
    id: &'static str,
    level: Level,
    versions: &'static [Versioned],
}

const fn since(minor: u64, check: CheckFn) -> Versioned {
    Versioned {
        since: minor,
        check,
        overrides: &[],
    }
}

const fn replacing(minor: u64, check: CheckFn, overrides: &'static [&'static str]) -> Versioned {
    Versioned {
        since: minor,
        check,
        overrides,
    }
}

/// Every check: the baseline ones, then the restricted ones, each group sorted by id as
/// kube sorts them (byte order), which is the order their reasons are reported in.
static CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        versions: &[since(0, app_armor_profile)],
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        versions: &[since(0, capabilities_baseline)],
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        versions: &[since(0, host_namespaces)],
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        versions: &[since(0, host_path_volumes)],
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        versions: &[since(0, host_ports)],
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        versions: &[since(0, privileged)],
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        versions: &[since(0, proc_mount)],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        versions: &[
            since(0, se_linux_options_1_0),
            since(31, se_linux_options_1_31),
        ],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        versions: &[
            since(0, seccomp_baseline_1_0),
            since(19, seccomp_baseline_1_19),
        ],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        versions: &[
            since(0, sysctls_1_0),
            since(27, sysctls_1_27),
            since(29, sysctls_1_29),
            since(32, sysctls_1_32),
        ],
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        versions: &[since(0, windows_host_process)],
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        versions: &[
            since(8, allow_privilege_escalation_1_8),
            since(25, allow_privilege_escalation_1_25),
        ],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        versions: &[
            replacing(22, capabilities_restricted_1_22, &["capabilities_baseline"]),
            replacing(25, capabilities_restricted_1_25, &["capabilities_baseline"]),
        ],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        versions: &[replacing(0, restricted_volumes, &["hostPathVolumes"])],
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        versions: &[since(0, run_as_non_root)],
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        versions: &[since(23, run_as_user)],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        versions: &[
            replacing(19, seccomp_restricted_1_19, &["seccompProfile_baseline"]),
            replacing(25, seccomp_restricted_1_25, &["seccompProfile_baseline"]),
        ],
    },
];

impl Check {
    /// The version of this check that applies at policy version `minor`, if it existed then.
    fn at(&self, minor: u64) -> Option<&Versioned> {
        self.versions.iter().rev().find(|v| v.since <= minor)
    }
}

/// Checks `pod` against `lv`: the violations, in kube's order (none for `privileged`).
pub(super) fn evaluate(lv: LevelVersion, pod: &PodView<'_>) -> Vec<Violation> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let minor = match lv.version {
        Version::Latest => NEWEST_MINOR,
        Version::Minor(minor) => minor.min(NEWEST_MINOR),
    };
    let overridden: Vec<&str> = if lv.level == Level::Restricted {
        CHECKS
            .iter()
            .filter(|c| c.level == Level::Restricted)
            .filter_map(|c| c.at(minor))
            .flat_map(|v| v.overrides.iter().copied())
            .collect()
    } else {
        Vec::new()
    };
    CHECKS
        .iter()
        .filter(|c| c.level == Level::Baseline || lv.level == Level::Restricted)
        .filter(|c| !overridden.contains(&c.id))
        .filter_map(|c| c.at(minor))
        .filter_map(|v| (v.check)(pod))
        .collect()
}

/// The reasons, comma-separated (as the warnings about existing pods show them).
pub(super) fn reasons(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| v.reason.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each reason with its detail in parentheses when it has one, comma-separated.
pub(super) fn details(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

// Reading the pod.

/// A field that is present and not null.
fn set<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.get(key).filter(|v| !v.is_null())
}

fn is_true(value: &Value, key: &str) -> bool {
    value.get(key).and_then(Value::as_bool) == Some(true)
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

fn name(container: &Value) -> &str {
    text(container, "name")
}

/// Every container in kube's order: init containers, containers, ephemeral containers.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .filter_map(|field| spec.get(field).and_then(Value::as_array))
        .flatten()
}

fn security_context(container: &Value) -> Option<&Value> {
    set(container, "securityContext")
}

fn pod_security_context<'a>(pod: &PodView<'a>) -> Option<&'a Value> {
    set(pod.spec, "securityContext")
}

fn annotations<'a>(pod: &PodView<'a>) -> impl Iterator<Item = (&'a str, &'a str)> {
    pod.metadata
        .get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
}

fn annotation<'a>(pod: &PodView<'a>, key: &str) -> Option<&'a str> {
    pod.metadata
        .get("annotations")
        .and_then(|a| a.get(key))
        .map(|v| v.as_str().unwrap_or(""))
}

fn windows(pod: &PodView<'_>) -> bool {
    pod.spec
        .get("os")
        .and_then(|os| os.get("name"))
        .and_then(Value::as_str)
        == Some("windows")
}

// Writing the messages.

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// `"a", "b"` (the items are not escaped, as kube does not escape them).
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let inner: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", inner.join("\", \""))
}

/// `container "a"` / `containers "a", "b"`.
fn containers_named(names: &[&str]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// A Go `%q` of a string as the rest of this crate writes it.
fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// The names of the containers for which `bad` holds.
fn bad_containers<'a>(pod: &PodView<'a>, bad: impl Fn(&Value) -> bool) -> Vec<&'a str> {
    containers(pod.spec).filter(|c| bad(c)).map(name).collect()
}

// Baseline.

fn app_armor_profile(pod: &PodView<'_>) -> Option<Violation> {
    const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
    let allowed_type =
        |profile: &Value| matches!(text(profile, "type"), "RuntimeDefault" | "Localhost");
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(profile) = pod_security_context(pod).and_then(|sc| set(sc, "appArmorProfile"))
        && !allowed_type(profile)
    {
        setters.push("pod".to_string());
        values.insert(text(profile, "type").to_string());
    }
    let mut bad = Vec::new();
    for container in containers(pod.spec) {
        if let Some(profile) = security_context(container).and_then(|sc| set(sc, "appArmorProfile"))
            && !allowed_type(profile)
        {
            bad.push(name(container));
            values.insert(text(profile, "type").to_string());
        }
    }
    if !bad.is_empty() {
        setters.push(containers_named(&bad));
    }
    let mut forbidden: Vec<String> = annotations(pod)
        .filter(|(key, value)| {
            key.starts_with(ANNOTATION_PREFIX)
                && !(value.is_empty()
                    || *value == "runtime/default"
                    || value.starts_with("localhost/"))
        })
        .map(|(key, value)| format!("{key}={}", go_quote(value)))
        .collect();
    let mut listed: Vec<String> = values.into_iter().collect();
    if !forbidden.is_empty() {
        forbidden.sort();
        setters.push(pluralize("annotation", "annotations", forbidden.len()).to_string());
        listed.extend(forbidden);
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            listed.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&listed)
        ),
    )
}

fn capabilities_baseline(pod: &PodView<'_>) -> Option<Violation> {
    const DEFAULT_SET: &[&str] = &[
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ];
    let mut bad = Vec::new();
    let mut added = BTreeSet::new();
    for container in containers(pod.spec) {
        let Some(capabilities) = security_context(container).and_then(|sc| set(sc, "capabilities"))
        else {
            continue;
        };
        let mut valid = true;
        for capability in capabilities
            .get("add")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let capability = capability.as_str().unwrap_or("");
            if !DEFAULT_SET.contains(&capability) {
                valid = false;
                added.insert(capability);
            }
        }
        if !valid {
            bad.push(name(container));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let added: Vec<&str> = added.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&bad),
            join_quote(&added)
        ),
    )
}

fn host_namespaces(pod: &PodView<'_>) -> Option<Violation> {
    let shared: Vec<&str> = [
        ("hostNetwork", "hostNetwork=true"),
        ("hostPID", "hostPID=true"),
        ("hostIPC", "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(field, _)| is_true(pod.spec, field))
    .map(|(_, shown)| shown)
    .collect();
    if shared.is_empty() {
        return None;
    }
    violation("host namespaces", shared.join(", "))
}

fn volumes<'a>(pod: &PodView<'a>) -> impl Iterator<Item = &'a Value> {
    pod.spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn host_path_volumes(pod: &PodView<'_>) -> Option<Violation> {
    let host: Vec<&str> = volumes(pod)
        .filter(|v| set(v, "hostPath").is_some())
        .map(name)
        .collect();
    if host.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", host.len()),
            join_quote(&host)
        ),
    )
}

fn host_ports(pod: &PodView<'_>) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for container in containers(pod.spec) {
        let mut valid = true;
        for port in container
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let host_port = port.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if host_port != 0 {
                valid = false;
                ports.insert(host_port.to_string());
            }
        }
        if !valid {
            bad.push(name(container));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_named(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(pod: &PodView<'_>) -> Option<Violation> {
    let bad = bad_containers(pod, |c| {
        security_context(c).is_some_and(|sc| is_true(sc, "privileged"))
    });
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_named(&bad)
        ),
    )
}

fn proc_mount(pod: &PodView<'_>) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for container in containers(pod.spec) {
        let Some(mount) = security_context(container).and_then(|sc| set(sc, "procMount")) else {
            continue;
        };
        let mount = mount.as_str().unwrap_or("");
        if mount != "Default" {
            bad.push(name(container));
            types.insert(mount);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<&str> = types.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_named(&bad),
            join_quote(&types)
        ),
    )
}

fn se_linux_options_1_0(pod: &PodView<'_>) -> Option<Violation> {
    se_linux_options(
        pod,
        &["", "container_t", "container_init_t", "container_kvm_t"],
    )
}

fn se_linux_options_1_31(pod: &PodView<'_>) -> Option<Violation> {
    se_linux_options(
        pod,
        &[
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ],
    )
}

fn se_linux_options(pod: &PodView<'_>, allowed_types: &[&str]) -> Option<Violation> {
    let mut types = BTreeSet::new();
    let (mut user, mut role) = (false, false);
    let mut valid = |options: &Value| {
        let mut ok = true;
        let kind = text(options, "type");
        if !allowed_types.contains(&kind) {
            ok = false;
            types.insert(kind.to_string());
        }
        if !text(options, "user").is_empty() {
            ok = false;
            user = true;
        }
        if !text(options, "role").is_empty() {
            ok = false;
            role = true;
        }
        ok
    };
    let mut setters = Vec::new();
    if let Some(options) = pod_security_context(pod).and_then(|sc| set(sc, "seLinuxOptions"))
        && !valid(options)
    {
        setters.push("pod".to_string());
    }
    let mut bad = Vec::new();
    for container in containers(pod.spec) {
        if let Some(options) = security_context(container).and_then(|sc| set(sc, "seLinuxOptions"))
            && !valid(options)
        {
            bad.push(name(container));
        }
    }
    if !bad.is_empty() {
        setters.push(containers_named(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    let mut what = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        what.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if user {
        what.push("user may not be set".to_string());
    }
    if role {
        what.push("role may not be set".to_string());
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            what.join("; ")
        ),
    )
}

fn valid_seccomp(profile: &Value) -> bool {
    matches!(text(profile, "type"), "Localhost" | "RuntimeDefault")
}

/// Up to v1.18 seccomp was set by annotations.
fn seccomp_baseline_1_0(pod: &PodView<'_>) -> Option<Violation> {
    const POD_KEY: &str = "seccomp.security.alpha.kubernetes.io/pod";
    const CONTAINER_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";
    let valid = |value: &str| {
        value == "runtime/default" || value == "docker/default" || value.starts_with("localhost/")
    };
    let mut forbidden = BTreeSet::new();
    if let Some(value) = annotation(pod, POD_KEY)
        && !valid(value)
    {
        forbidden.insert(format!("{POD_KEY}={}", go_quote(value)));
    }
    for container in containers(pod.spec) {
        let key = format!("{CONTAINER_PREFIX}{}", name(container));
        if let Some(value) = annotation(pod, &key)
            && !valid(value)
        {
            forbidden.insert(format!("{key}={}", go_quote(value)));
        }
    }
    if forbidden.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", forbidden.len()),
            forbidden.into_iter().collect::<Vec<_>>().join(", ")
        ),
    )
}

/// The setters of a seccomp profile that is not allowed (`pod`, `containers "a", "b"`), and
/// the profile types they set; whether the pod sets an allowed one; the containers that set
/// none.
struct SeccompSetters<'a> {
    setters: Vec<String>,
    values: BTreeSet<String>,
    unset: Vec<&'a str>,
}

fn seccomp_setters<'a>(pod: &PodView<'a>) -> SeccompSetters<'a> {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(profile) = pod_security_context(pod).and_then(|sc| set(sc, "seccompProfile")) {
        if valid_seccomp(profile) {
            pod_set = true;
        } else {
            setters.push("pod".to_string());
            values.insert(text(profile, "type").to_string());
        }
    }
    let mut bad = Vec::new();
    let mut unset = Vec::new();
    for container in containers(pod.spec) {
        match security_context(container).and_then(|sc| set(sc, "seccompProfile")) {
            Some(profile) if !valid_seccomp(profile) => {
                bad.push(name(container));
                values.insert(text(profile, "type").to_string());
            }
            Some(_) => {}
            None if !pod_set => unset.push(name(container)),
            None => {}
        }
    }
    if !bad.is_empty() {
        setters.push(containers_named(&bad));
    }
    SeccompSetters {
        setters,
        values,
        unset,
    }
}

fn seccomp_forbidden_types(found: SeccompSetters<'_>) -> Option<Violation> {
    if found.setters.is_empty() {
        return None;
    }
    let values: Vec<String> = found.values.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            found.setters.join(" and "),
            join_quote(&values)
        ),
    )
}

fn seccomp_baseline_1_19(pod: &PodView<'_>) -> Option<Violation> {
    seccomp_forbidden_types(seccomp_setters(pod))
}

fn sysctls_1_0(pod: &PodView<'_>) -> Option<Violation> {
    sysctls(pod, &[])
}

fn sysctls_1_27(pod: &PodView<'_>) -> Option<Violation> {
    sysctls(pod, &["net.ipv4.ip_local_reserved_ports"])
}

fn sysctls_1_29(pod: &PodView<'_>) -> Option<Violation> {
    sysctls(
        pod,
        &[
            "net.ipv4.ip_local_reserved_ports",
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
        ],
    )
}

fn sysctls_1_32(pod: &PodView<'_>) -> Option<Violation> {
    sysctls(
        pod,
        &[
            "net.ipv4.ip_local_reserved_ports",
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
            "net.ipv4.tcp_rmem",
            "net.ipv4.tcp_wmem",
        ],
    )
}

/// Only the safe sysctls (those of v1.0, and `added` since) may be set.
fn sysctls(pod: &PodView<'_>, added: &[&str]) -> Option<Violation> {
    const SAFE_1_0: &[&str] = &[
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ];
    let forbidden: Vec<&str> = pod_security_context(pod)
        .and_then(|sc| sc.get("sysctls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(name)
        .filter(|n| !SAFE_1_0.contains(n) && !added.contains(n))
        .collect();
    if forbidden.is_empty() {
        return None;
    }
    violation("forbidden sysctls", forbidden.join(", "))
}

fn windows_host_process(pod: &PodView<'_>) -> Option<Violation> {
    let host_process = |sc: &Value| {
        set(sc, "windowsOptions").is_some_and(|options| is_true(options, "hostProcess"))
    };
    let bad = bad_containers(pod, |c| security_context(c).is_some_and(host_process));
    let mut setters = Vec::new();
    if pod_security_context(pod).is_some_and(host_process) {
        setters.push("pod".to_string());
    }
    if !bad.is_empty() {
        setters.push(containers_named(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

// Restricted.

fn allow_privilege_escalation_1_8(pod: &PodView<'_>) -> Option<Violation> {
    let bad = bad_containers(pod, |c| {
        security_context(c)
            .and_then(|sc| sc.get("allowPrivilegeEscalation"))
            .and_then(Value::as_bool)
            != Some(false)
    });
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_named(&bad)
        ),
    )
}

/// From v1.25 on, Windows pods are exempt (the field means nothing on Windows).
fn allow_privilege_escalation_1_25(pod: &PodView<'_>) -> Option<Violation> {
    if windows(pod) {
        return None;
    }
    allow_privilege_escalation_1_8(pod)
}

fn capabilities_restricted_1_22(pod: &PodView<'_>) -> Option<Violation> {
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut forbidden = BTreeSet::new();
    for container in containers(pod.spec) {
        let Some(capabilities) = security_context(container).and_then(|sc| set(sc, "capabilities"))
        else {
            missing_drop.push(name(container));
            continue;
        };
        let list = |field: &str| {
            capabilities
                .get(field)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| c.as_str().unwrap_or(""))
        };
        if !list("drop").any(|c| c == "ALL") {
            missing_drop.push(name(container));
        }
        let mut added_forbidden = false;
        for capability in list("add") {
            if capability != "NET_BIND_SERVICE" {
                added_forbidden = true;
                forbidden.insert(capability);
            }
        }
        if added_forbidden {
            adding.push(name(container));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            r#"{} must set securityContext.capabilities.drop=["ALL"]"#,
            containers_named(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let forbidden: Vec<&str> = forbidden.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adding),
            join_quote(&forbidden)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

fn capabilities_restricted_1_25(pod: &PodView<'_>) -> Option<Violation> {
    if windows(pod) {
        return None;
    }
    capabilities_restricted_1_22(pod)
}

fn restricted_volumes(pod: &PodView<'_>) -> Option<Violation> {
    const ALLOWED: &[&str] = &[
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    // In the order kube looks for the source of a volume that is not allowed.
    const RESTRICTED: &[&str] = &[
        "hostPath",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "nfs",
        "iscsi",
        "glusterfs",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "fc",
        "azureFile",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "portworxVolume",
        "scaleIO",
        "storageos",
    ];
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for volume in volumes(pod) {
        if ALLOWED.iter().any(|source| set(volume, source).is_some()) {
            continue;
        }
        bad.push(name(volume));
        let kind = RESTRICTED
            .iter()
            .find(|source| set(volume, source).is_some())
            .copied()
            .unwrap_or("unknown");
        types.insert(kind);
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<&str> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(pod: &PodView<'_>) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut pod_non_root = false;
    match pod_security_context(pod)
        .and_then(|sc| sc.get("runAsNonRoot"))
        .and_then(Value::as_bool)
    {
        Some(false) => setters.push("pod".to_string()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for container in containers(pod.spec) {
        match security_context(container)
            .and_then(|sc| sc.get("runAsNonRoot"))
            .and_then(Value::as_bool)
        {
            Some(false) => explicit.push(name(container)),
            Some(true) => {}
            None if !pod_non_root => implicit.push(name(container)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_named(&explicit));
    }
    if !setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_named(&implicit)
            ),
        );
    }
    None
}

fn run_as_user(pod: &PodView<'_>) -> Option<Violation> {
    let root = |sc: &Value| sc.get("runAsUser").and_then(Value::as_i64) == Some(0);
    let mut setters = Vec::new();
    if pod_security_context(pod).is_some_and(root) {
        setters.push("pod".to_string());
    }
    let bad = bad_containers(pod, |c| security_context(c).is_some_and(root));
    if !bad.is_empty() {
        setters.push(containers_named(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

fn seccomp_restricted_1_19(pod: &PodView<'_>) -> Option<Violation> {
    let found = seccomp_setters(pod);
    let unset = found.unset.clone();
    if let Some(v) = seccomp_forbidden_types(found) {
        return Some(v);
    }
    if unset.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            r#"pod or {} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
            containers_named(&unset)
        ),
    )
}

fn seccomp_restricted_1_25(pod: &PodView<'_>) -> Option<Violation> {
    if windows(pod) {
        return None;
    }
    seccomp_restricted_1_19(pod)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(level: Level, version: Version, pod: Value) -> String {
        let view = PodView {
            metadata: &pod["metadata"],
            spec: &pod["spec"],
        };
        details(&evaluate(LevelVersion { level, version }, &view))
    }

    fn baseline(pod: Value) -> String {
        check(Level::Baseline, Version::Latest, pod)
    }

    fn restricted(pod: Value) -> String {
        check(Level::Restricted, Version::Latest, pod)
    }

    fn spec(spec: Value) -> Value {
        json!({"metadata": {}, "spec": spec})
    }

    fn container(name: &str, security_context: Value) -> Value {
        json!({"name": name, "image": "nginx", "securityContext": security_context})
    }

    /// A container that passes every restricted check.
    fn hardened(name: &str) -> Value {
        container(
            name,
            json!({
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]},
                "runAsNonRoot": true,
                "seccompProfile": {"type": "RuntimeDefault"},
            }),
        )
    }

    #[test]
    fn checks_are_listed_in_kubes_order() {
        for level in [Level::Baseline, Level::Restricted] {
            let ids: Vec<&str> = CHECKS
                .iter()
                .filter(|c| c.level == level)
                .map(|c| c.id)
                .collect();
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            assert_eq!(ids, sorted);
        }
        let first_restricted = CHECKS
            .iter()
            .position(|c| c.level == Level::Restricted)
            .unwrap_or(0);
        assert!(
            CHECKS[first_restricted..]
                .iter()
                .all(|c| c.level == Level::Restricted)
        );
        let newest = CHECKS
            .iter()
            .flat_map(|c| c.versions.iter().map(|v| v.since))
            .max();
        assert_eq!(newest, Some(NEWEST_MINOR));
    }

    #[test]
    fn privileged_checks_nothing() {
        let pod = spec(
            json!({"hostNetwork": true, "containers": [container("c", json!({"privileged": true}))]}),
        );
        assert_eq!(check(Level::Privileged, Version::Latest, pod), "");
    }

    #[test]
    fn a_plain_pod_passes_baseline_and_fails_restricted_in_order() {
        let pod = spec(json!({"containers": [{"name": "c", "image": "nginx"}]}));
        assert_eq!(baseline(pod.clone()), "");
        assert_eq!(
            restricted(pod),
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        );
    }

    #[test]
    fn a_hardened_pod_passes_restricted() {
        let pod = spec(json!({
            "containers": [hardened("a")],
            "initContainers": [hardened("init")],
            "volumes": [{"name": "cm", "configMap": {"name": "x"}}, {"name": "tmp", "emptyDir": {}}],
        }));
        assert_eq!(restricted(pod), "");
    }

    #[test]
    fn baseline_violations_each_with_kubes_words() {
        let pod = spec(json!({
            "hostNetwork": true,
            "hostPID": true,
            "hostIPC": true,
            "securityContext": {
                "sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_syncookies", "value": "1"}, {"name": "vm.swappiness", "value": "1"}],
                "seLinuxOptions": {"user": "root"},
                "seccompProfile": {"type": "Unconfined"},
                "appArmorProfile": {"type": "Unconfined"},
                "windowsOptions": {"hostProcess": true},
            },
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "initContainers": [container("init", json!({"privileged": true, "procMount": "Unmasked"}))],
            "containers": [
                {"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 443, "hostPort": 443}],
                 "securityContext": {"capabilities": {"add": ["NET_ADMIN", "CHOWN", "SYS_ADMIN"]}, "seLinuxOptions": {"type": "spc_t", "role": "r"}}},
                {"name": "b", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80}],
                 "securityContext": {"privileged": true, "seccompProfile": {"type": "Unconfined"}, "windowsOptions": {"hostProcess": true}}},
            ],
        }));
        let mut pod = pod;
        pod["metadata"]["annotations"] = json!({
            "container.apparmor.security.beta.kubernetes.io/a": "unconfined",
            "container.apparmor.security.beta.kubernetes.io/b": "localhost/mine",
        });
        assert_eq!(
            baseline(pod),
            [
                r#"forbidden AppArmor profiles (pod and annotation must not set AppArmor profile type to "Unconfined", "container.apparmor.security.beta.kubernetes.io/a="unconfined"")"#,
                r#"non-default capabilities (container "a" must not include "NET_ADMIN", "SYS_ADMIN" in securityContext.capabilities.add)"#,
                r#"host namespaces (hostNetwork=true, hostPID=true, hostIPC=true)"#,
                r#"hostPath volumes (volume "root")"#,
                r#"hostPort (containers "a", "b" use hostPorts 443, 80, 8080)"#,
                r#"privileged (containers "init", "b" must not set securityContext.privileged=true)"#,
                r#"procMount (container "init" must not set securityContext.procMount to "Unmasked")"#,
                r#"seLinuxOptions (pod and container "a" set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set; role may not be set)"#,
                r#"seccompProfile (pod and container "b" must not set securityContext.seccompProfile.type to "Unconfined")"#,
                r#"forbidden sysctls (kernel.msgmax, vm.swappiness)"#,
                r#"hostProcess (pod and container "b" must not set securityContext.windowsOptions.hostProcess=true)"#,
            ]
            .join(", ")
        );
    }

    #[test]
    fn restricted_replaces_the_baseline_checks_it_overrides() {
        let mut hostile = hardened("c");
        hostile["securityContext"]["capabilities"]["add"] =
            json!(["SYS_ADMIN", "NET_BIND_SERVICE"]);
        hostile["securityContext"]["runAsUser"] = json!(0);
        hostile["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        let pod = spec(json!({
            "securityContext": {"runAsNonRoot": false, "runAsUser": 0},
            "containers": [hostile, container("d", json!({"capabilities": {"add": ["NET_BIND_SERVICE"]}}))],
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "n", "nfs": {"server": "s", "path": "/"}}, {"name": "s", "secret": {"secretName": "x"}}],
        }));
        assert_eq!(
            restricted(pod),
            [
                r#"allowPrivilegeEscalation != false (containers "c", "d" must set securityContext.allowPrivilegeEscalation=false)"#,
                r#"unrestricted capabilities (container "d" must set securityContext.capabilities.drop=["ALL"]; container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add)"#,
                r#"restricted volume types (volumes "h", "n" use restricted volume types "hostPath", "nfs")"#,
                r#"runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)"#,
                r#"runAsUser=0 (pod and container "c" must not set runAsUser=0)"#,
                r#"seccompProfile (pod or container "d" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#,
            ]
            .join(", ")
        );
    }

    #[test]
    fn pod_level_settings_satisfy_restricted_for_every_container() {
        let c = container(
            "c",
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}),
        );
        let pod = spec(json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
            "containers": [c],
        }));
        assert_eq!(restricted(pod), "");
    }

    #[test]
    fn pinned_versions_use_the_checks_of_their_time() {
        let mut c = container(
            "c",
            json!({"allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}}),
        );
        c["securityContext"]["seccompProfile"] = json!({"type": "RuntimeDefault"});
        let pod = spec(json!({"containers": [c]}));
        // v1.21: no restricted capabilities check yet (the baseline one applies), and no
        // runAsUser check.
        assert_eq!(
            check(Level::Restricted, Version::Minor(21), pod.clone()),
            r#"non-default capabilities (container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add)"#
        );
        assert_eq!(
            check(Level::Restricted, Version::Minor(23), pod),
            r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]; container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add), runAsUser=0 (container "c" must not set runAsUser=0)"#
        );

        // Before v1.19, seccomp is read from annotations.
        let annotated = json!({
            "metadata": {"annotations": {
                "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
                "container.seccomp.security.alpha.kubernetes.io/c": "localhost/p",
            }},
            "spec": {"containers": [{"name": "c", "image": "x", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]},
        });
        assert_eq!(
            check(Level::Baseline, Version::Minor(18), annotated.clone()),
            r#"seccompProfile (forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined")"#
        );
        assert_eq!(
            check(Level::Baseline, Version::Minor(19), annotated),
            r#"seccompProfile (container "c" must not set securityContext.seccompProfile.type to "Unconfined")"#
        );

        // Sysctls allowed later are refused by older versions.
        let tuned = spec(json!({
            "securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"}, {"name": "net.ipv4.ip_local_reserved_ports", "value": "1"}]},
            "containers": [{"name": "c", "image": "x"}],
        }));
        assert_eq!(
            check(Level::Baseline, Version::Minor(26), tuned.clone()),
            "forbidden sysctls (net.ipv4.tcp_rmem, net.ipv4.ip_local_reserved_ports)"
        );
        assert_eq!(
            check(Level::Baseline, Version::Minor(31), tuned.clone()),
            "forbidden sysctls (net.ipv4.tcp_rmem)"
        );
        assert_eq!(
            check(Level::Baseline, Version::Minor(32), tuned.clone()),
            ""
        );
        // Versions past the newest check use the newest checks.
        assert_eq!(check(Level::Baseline, Version::Minor(99), tuned), "");

        let engine = spec(
            json!({"containers": [container("c", json!({"seLinuxOptions": {"type": "container_engine_t"}}))]}),
        );
        assert_eq!(
            check(Level::Baseline, Version::Minor(30), engine.clone()),
            r#"seLinuxOptions (container "c" set forbidden securityContext.seLinuxOptions: type "container_engine_t")"#
        );
        assert_eq!(check(Level::Baseline, Version::Latest, engine), "");
    }

    #[test]
    fn windows_pods_are_spared_the_linux_only_checks_from_v1_25() {
        let pod = spec(json!({
            "os": {"name": "windows"},
            "securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "c", "image": "x"}],
        }));
        assert_eq!(restricted(pod.clone()), "");
        assert_eq!(
            check(Level::Restricted, Version::Minor(24), pod),
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        );
    }

    #[test]
    fn ephemeral_containers_are_checked_too() {
        let pod = spec(json!({
            "containers": [hardened("c")],
            "ephemeralContainers": [{"name": "debug", "image": "busybox", "securityContext": {"privileged": true}}],
        }));
        assert_eq!(
            baseline(pod),
            r#"privileged (container "debug" must not set securityContext.privileged=true)"#
        );
    }

    #[test]
    fn reasons_alone_are_comma_separated() {
        let pod = spec(
            json!({"hostPID": true, "containers": [container("c", json!({"privileged": true}))]}),
        );
        let view = PodView {
            metadata: &pod["metadata"],
            spec: &pod["spec"],
        };
        let found = evaluate(
            LevelVersion {
                level: Level::Baseline,
                version: Version::Latest,
            },
            &view,
        );
        assert_eq!(reasons(&found), "host namespaces, privileged");
    }
}
