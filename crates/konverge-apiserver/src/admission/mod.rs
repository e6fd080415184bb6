//! Admission: the chain kube-apiserver runs between decoding a write and storing it —
//! mutating plugins first (they may change the object), then, after the object is validated,
//! validating plugins (they may only refuse it).
//!
//! The registry runs the [`Chain`] on every create, update and delete, the server's own
//! writes included, dry runs too, and on connect requests (`exec`, `attach`, `portforward`,
//! `proxy`) before they connect. The built-in plugins ([`Chain::builtin`]), each as kube-apiserver
//! enables it by default:
//!
//! - [`LimitRanger`]: the namespace's LimitRanges fill in a new pod's missing container
//!   limits and requests and refuse those out of their `min`/`max`;
//! - [`ServiceAccount`]: a new pod runs as an existing ServiceAccount (`default` unless it
//!   names one) with its API token, the cluster CA and its namespace mounted;
//! - [`PodSecurity`]: pods are held to the Pod Security Standards level their namespace's
//!   `pod-security.kubernetes.io/*` labels ask for (refused, warned about, or audited), and
//!   so, with warnings only, are the pod templates of workloads;
//! - [`Priority`]: a pod's `priorityClassName` becomes its `priority` and `preemptionPolicy`
//!   (the global default class, or priority 0, when it names none);
//! - [`DefaultTolerationSeconds`]: a new pod tolerates not-ready and unreachable nodes for
//!   five minutes;
//! - [`DefaultClass::storage`] (`DefaultStorageClass`): a PersistentVolumeClaim that names no
//!   class gets the default StorageClass;
//! - [`RuntimeClass`]: a new pod that names a RuntimeClass gets its overhead, node selector
//!   and tolerations (403 if the class does not exist or the pod contradicts it);
//! - [`DefaultClass::ingress`] (`DefaultIngressClass`): an Ingress that names no class gets
//!   the default IngressClass;
//! - [`ResourceQuota`]: a write that would exceed one of the namespace's ResourceQuotas is
//!   refused; the others are charged to the quotas' `status.used`.
//!
//! [`LimitRanger`] also holds each container and each pod's total to the LimitRanges'
//! `min`, `max` and `maxLimitRequestRatio`, and a PersistentVolumeClaim's storage to their
//! `min` and `max`.
//!
//! [`policy::ValidatingAdmissionPolicy`] (`ValidatingAdmissionPolicy`) and the admission
//! webhooks ([`MutatingAdmissionWebhook`], [`ValidatingAdmissionWebhook`]) need the server
//! (its authorization, its webhook client), so the server adds them to the chain when it is
//! built, before ResourceQuota, in kube-apiserver's order.

mod limits;
pub mod matching;
mod plugins;
mod pods;
mod podsecurity;
pub mod policy;
pub(crate) mod quota;
mod runtimeclass;
pub mod webhook;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::auth::user::UserInfo;
use crate::error::Result;
use crate::lister::Lister;
use crate::resources::ResourceType;

pub use limits::LimitRanger;
pub use plugins::{DefaultClass, Priority};
pub use pods::{DefaultTolerationSeconds, ServiceAccount};
pub use podsecurity::PodSecurity;
pub use quota::ResourceQuota;
pub use runtimeclass::RuntimeClass;
pub use webhook::{MutatingAdmissionWebhook, ValidatingAdmissionWebhook};

/// What a request does, as admission sees it (kube's `admission.Operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A create.
    Create,
    /// An update (a patch, an apply, a subresource write).
    Update,
    /// A delete (`object` is null; the object deleted is [`Attributes::old`]).
    Delete,
    /// A connect (`pods/exec`, `pods/portforward`, proxies).
    Connect,
}

impl Operation {
    /// As AdmissionReview and admission rules spell it: `CREATE`, `UPDATE`, `DELETE`,
    /// `CONNECT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The user of the server's own writes (the loopback client's, as kube-apiserver names it).
pub(crate) fn server_user() -> UserInfo {
    UserInfo::new(
        "system:apiserver",
        &[crate::auth::user::SYSTEM_MASTERS, "system:authenticated"],
    )
}

/// Who makes a request, as admission requests carry it (`userInfo`): empty fields left out.
pub(crate) fn user_info(user: &UserInfo) -> Value {
    let mut info = serde_json::Map::new();
    if !user.name.is_empty() {
        info.insert("username".into(), Value::from(user.name.clone()));
    }
    if !user.uid.is_empty() {
        info.insert("uid".into(), Value::from(user.uid.clone()));
    }
    if !user.groups.is_empty() {
        info.insert("groups".into(), serde_json::json!(user.groups));
    }
    if !user.extra.is_empty() {
        info.insert("extra".into(), serde_json::json!(user.extra));
    }
    Value::Object(info)
}

/// kube-apiserver's warning when admission left `metadata.managedFields` undecodable
/// (`InvalidManagedFieldsAfterMutatingAdmissionWarningFormat`), before the reason.
const INVALID_MANAGED_FIELDS_AFTER_ADMISSION: &str = ".metadata.managedFields was in an invalid \
    state after admission; this could be caused by an outdated mutating admission controller; \
    please fix your requests: ";

/// Puts `before` back as `object`'s managed fields, warning the client why, when the mutating
/// plugins left them in a state that does not decode.
fn keep_managed_fields_decodable(trace: &Trace, object: &mut Value, before: Option<Value>) {
    let after = object.pointer("/metadata/managedFields");
    if after == before.as_ref() {
        return;
    }
    let Err(e) = konverge_apimachinery::ssa::ManagedFields::from_object(object) else {
        return;
    };
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        match before {
            Some(before) => metadata.insert("managedFields".into(), before),
            None => metadata.remove("managedFields"),
        };
    }
    trace.warn(format!("{INVALID_MANAGED_FIELDS_AFTER_ADMISSION}{e}"));
}

/// What happened to one request in admission: the warnings for the client, the audit
/// annotations, and which admissions ran and what each decided. The registry makes one per
/// write and reads the warnings back into its answer.
#[derive(Debug, Default)]
pub struct Trace {
    inner: std::sync::Mutex<TraceInner>,
}

#[derive(Debug, Default, Clone)]
struct TraceInner {
    warnings: Vec<String>,
    annotations: Vec<(String, String)>,
    ran: Vec<Ran>,
    recorder: Recorder,
}

/// The state of kube-apiserver's warning recorder ([`Trace::warn_as_recorded`]).
#[derive(Debug, Default, Clone)]
struct Recorder {
    /// Every text offered, in order, whole.
    recorded: Vec<String>,
    /// What of them went into `warnings` (truncated, once truncating).
    shown: Vec<String>,
    /// Runes written.
    written: usize,
    /// Whether the total went over the limit once.
    truncating: bool,
}

/// kube-apiserver's warning limits: 4096 runes in all; past that, each warning cut to 256.
const WARNING_TOTAL_RUNES: usize = 4 * 1024;
const WARNING_ITEM_RUNES: usize = 256;

/// One admission that acted on a request, and what it decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The plugin's name (`LimitRanger`), `ValidatingAdmissionPolicy/<policy>/<binding>`, or
    /// `ValidatingWebhook/<webhook>` / `MutatingWebhook/<webhook>`.
    pub name: Cow<'static, str>,
    /// What it decided.
    pub decision: Decision,
}

/// What one admission decided about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// It let the request through unchanged.
    Allowed,
    /// It changed the object.
    Mutated,
    /// It refused the request.
    Denied,
    /// It let the request through with a warning.
    Warned,
}

impl Trace {
    /// Adds a warning for the client (a `Warning: 299 - "…"` header).
    pub fn warn(&self, warning: impl Into<String>) {
        self.lock().warnings.push(warning.into());
    }

    /// Adds a warning as kube-apiserver's warning recorder does with warnings from
    /// admission webhooks and policies: empty and repeated texts are dropped, as are texts
    /// with control characters (no `Warning` header can carry them); once the warnings
    /// add up to more than 4096 characters, each (those already given too) is cut to 256,
    /// and none is added past 4096 more.
    pub fn warn_as_recorded(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let TraceInner {
            warnings, recorder, ..
        } = &mut *inner;
        if recorder.written >= WARNING_TOTAL_RUNES && recorder.truncating {
            return;
        }
        if recorder.recorded.iter().any(|r| r == text) {
            return;
        }
        recorder.recorded.push(text.to_string());
        let cut = |t: &str| -> String { t.chars().take(WARNING_ITEM_RUNES).collect() };
        let shown = if recorder.truncating {
            cut(text)
        } else {
            text.to_string()
        };
        if shown.chars().any(char::is_control) {
            return;
        }
        let runes = shown.chars().count();
        if recorder.written + runes <= WARNING_TOTAL_RUNES || recorder.truncating {
            recorder.written += runes;
            recorder.shown.push(shown.clone());
            warnings.push(shown);
            return;
        }
        recorder.truncating = true;
        recorder.written = 0;
        for earlier in recorder.shown.drain(..) {
            if let Some(at) = warnings.iter().position(|w| *w == earlier) {
                warnings.remove(at);
            }
        }
        for text in &recorder.recorded {
            let shown = cut(text);
            if shown.chars().any(char::is_control) {
                continue;
            }
            recorder.written += shown.chars().count();
            recorder.shown.push(shown.clone());
            warnings.push(shown);
        }
    }

    /// Adds an audit annotation.
    pub fn annotate(&self, key: impl Into<String>, value: impl Into<String>) {
        self.lock().annotations.push((key.into(), value.into()));
    }

    /// Records that an admission ran and what it decided.
    pub fn ran(&self, name: impl Into<Cow<'static, str>>, decision: Decision) {
        self.lock().ran.push(Ran {
            name: name.into(),
            decision,
        });
    }

    /// Whether the admission named `name` has recorded a decision.
    pub fn has(&self, name: &str) -> bool {
        self.lock().ran.iter().any(|r| r.name == name)
    }

    /// The warnings so far.
    pub fn warnings(&self) -> Vec<String> {
        self.lock().warnings.clone()
    }

    /// The audit annotations so far.
    pub fn annotations(&self) -> Vec<(String, String)> {
        self.lock().annotations.clone()
    }

    /// The admissions that ran so far, in order.
    pub fn admissions(&self) -> Vec<Ran> {
        self.lock().ran.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TraceInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the chain knows about a write.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// Create or update.
    pub operation: Operation,
    /// The resource.
    pub rt: &'a ResourceType,
    /// The namespace (empty for cluster-scoped resources).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The subresource written, if any.
    pub subresource: Option<&'a str>,
    /// The object before an update.
    pub old: Option<&'a Value>,
    /// Who writes (`None`: the server itself).
    pub user: Option<&'a UserInfo>,
    /// Whether nothing will be stored.
    pub dry_run: bool,
    /// Where admissions leave warnings, audit annotations and their decisions.
    pub trace: &'a Trace,
}

impl Attributes<'_> {
    /// Whether this is a create of `group/plural` (no subresource).
    pub fn creates(&self, group: &str, plural: &str) -> bool {
        self.operation == Operation::Create
            && self.subresource.is_none()
            && self.rt.group == group
            && self.rt.plural == plural
    }
}

/// One admission plugin.
#[async_trait::async_trait]
pub trait Plugin: Send + Sync + std::fmt::Debug {
    /// Its name, as `--enable-admission-plugins` spells it.
    fn name(&self) -> &'static str;

    /// Whether it may act on writes of `rt` at all (writes of other resources skip it).
    fn handles(&self, _rt: &ResourceType) -> bool {
        true
    }

    /// Whether it acts on `operation` at all (default: creates and updates).
    fn handles_operation(&self, operation: Operation) -> bool {
        matches!(operation, Operation::Create | Operation::Update)
    }

    /// Whether its mutating phase may change `metadata.managedFields` (a webhook's patch may
    /// change anything; the built-in plugins never do). The chain copies them before such a
    /// plugin runs, to put them back if they no longer decode.
    fn may_change_managed_fields(&self) -> bool {
        false
    }

    /// The mutating phase: may change `object` (then says so), or refuse the write.
    async fn admit(
        &self,
        _attributes: &Attributes<'_>,
        _object: &mut Value,
        _registry: &dyn Lister,
    ) -> Result<bool> {
        Ok(false)
    }

    /// The validating phase, after the object passed validation: may only refuse the write.
    /// On a delete `object` is null and the object deleted is [`Attributes::old`].
    async fn validate(
        &self,
        _attributes: &Attributes<'_>,
        _object: &Value,
        _registry: &dyn Lister,
    ) -> Result<()> {
        Ok(())
    }
}

/// The plugins, in the order they run.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    plugins: Vec<Arc<dyn Plugin>>,
    log: Option<Arc<Log>>,
}

impl Chain {
    /// No plugins.
    pub fn empty() -> Chain {
        Chain::default()
    }

    /// The built-in plugins kube-apiserver enables by default that konverge implements, in
    /// kube-apiserver's order.
    pub fn builtin() -> Chain {
        Chain {
            log: None,
            plugins: vec![
                Arc::new(LimitRanger),
                Arc::new(ServiceAccount),
                Arc::new(PodSecurity),
                Arc::new(Priority),
                Arc::new(DefaultTolerationSeconds),
                Arc::new(DefaultClass::storage()),
                Arc::new(RuntimeClass),
                Arc::new(DefaultClass::ingress()),
                Arc::new(ResourceQuota::default()),
            ],
        }
    }

    /// Whether there are no plugins.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// Whether any plugin may act on writes of `rt` (if none, the registry skips the chain,
    /// and does not keep the old object of an update for it).
    pub fn handles(&self, rt: &ResourceType) -> bool {
        self.plugins.iter().any(|p| p.handles(rt))
    }

    /// The names of the plugins, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// The chain without the plugins named.
    pub fn without(mut self, names: &[String]) -> Chain {
        self.plugins
            .retain(|p| !names.iter().any(|n| n == p.name()));
        self
    }

    /// The chain with `plugin` placed before the plugin named `before` (at the end if there
    /// is none): the dynamic admission plugins go before ResourceQuota, as in kube-apiserver,
    /// so that quota charges only what they let through.
    pub fn with_before(mut self, before: &str, plugin: Arc<dyn Plugin>) -> Chain {
        let at = self
            .plugins
            .iter()
            .position(|p| p.name() == before)
            .unwrap_or(self.plugins.len());
        self.plugins.insert(at, plugin);
        self
    }

    /// The chain with `plugin` added at its end.
    pub fn with(mut self, plugin: Arc<dyn Plugin>) -> Chain {
        self.plugins.push(plugin);
        self
    }

    /// Whether any plugin may act on `operation` of `rt`.
    pub fn handles_operation(&self, rt: &ResourceType, operation: Operation) -> bool {
        self.plugins
            .iter()
            .any(|p| p.handles(rt) && p.handles_operation(operation))
    }

    fn acting<'p>(
        &'p self,
        attributes: &Attributes<'_>,
    ) -> impl Iterator<Item = &'p Arc<dyn Plugin>> {
        let (rt, operation) = (attributes.rt, attributes.operation);
        self.plugins
            .iter()
            .filter(move |p| p.handles(rt) && p.handles_operation(operation))
    }

    /// Runs every plugin's mutating phase; says whether any changed the object.
    ///
    /// As kube-apiserver wraps its chain (`NewManagedFieldsValidatingAdmissionController`),
    /// `metadata.managedFields` left in a state that does not decode (by a mutating webhook
    /// or policy written before server-side apply) are put back as they were before
    /// admission, and the client is warned.
    pub async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        let mut acting = self.acting(attributes).peekable();
        if acting.peek().is_none() {
            return Ok(false);
        }
        let managed_before = self
            .acting(attributes)
            .any(|p| p.may_change_managed_fields())
            .then(|| object.pointer("/metadata/managedFields").cloned());
        let mut changed = false;
        for plugin in acting {
            match plugin.admit(attributes, object, registry).await {
                Ok(mutated) => {
                    let decision = if mutated {
                        Decision::Mutated
                    } else {
                        Decision::Allowed
                    };
                    attributes.trace.ran(plugin.name(), decision);
                    changed |= mutated;
                }
                Err(e) => {
                    attributes.trace.ran(plugin.name(), Decision::Denied);
                    return Err(e);
                }
            }
        }
        if changed && let Some(before) = managed_before {
            keep_managed_fields_decodable(attributes.trace, object, before);
        }
        Ok(changed)
    }

    /// Runs every plugin's validating phase.
    pub async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<()> {
        for plugin in self.acting(attributes) {
            if let Err(e) = plugin.validate(attributes, object, registry).await {
                attributes.trace.ran(plugin.name(), Decision::Denied);
                return Err(e);
            }
            if !attributes.trace.has(plugin.name()) {
                attributes.trace.ran(plugin.name(), Decision::Allowed);
            }
        }
        Ok(())
    }

    /// The chain, keeping a record of the last `capacity` requests that went through it
    /// (see [`Chain::log`]).
    pub fn logged(mut self, capacity: usize) -> Chain {
        self.log = Some(Arc::new(Log {
            capacity,
            records: Mutex::new(VecDeque::new()),
        }));
        self
    }

    /// The record of recent requests, if the chain keeps one ([`Chain::logged`]).
    pub fn log(&self) -> Option<&Arc<Log>> {
        self.log.as_ref()
    }

    /// Ends a request's admission: records what ran, if the chain keeps a log.
    pub fn finish(&self, attributes: &Attributes<'_>) {
        let Some(log) = &self.log else {
            return;
        };
        log.push(Record {
            operation: attributes.operation,
            group: attributes.rt.group.clone(),
            resource: attributes.rt.plural.clone(),
            subresource: attributes.subresource.map(String::from),
            namespace: attributes.namespace.to_string(),
            name: attributes.name.to_string(),
            user: attributes.user.map(|u| u.name.clone()),
            dry_run: attributes.dry_run,
            admissions: attributes.trace.admissions(),
            warnings: attributes.trace.warnings(),
            annotations: attributes.trace.annotations(),
        });
    }
}

/// One request's passage through admission.
#[derive(Debug, Clone)]
pub struct Record {
    /// What it did.
    pub operation: Operation,
    /// The resource's group.
    pub group: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, if any.
    pub subresource: Option<String>,
    /// The namespace (empty for cluster-scoped resources).
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// Who asked (`None`: the server itself).
    pub user: Option<String>,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// Which admissions ran, in order, and what each decided.
    pub admissions: Vec<Ran>,
    /// The warnings sent back.
    pub warnings: Vec<String>,
    /// The audit annotations admission added.
    pub annotations: Vec<(String, String)>,
}

impl Record {
    /// Whether the admission named `name` ran on this request.
    pub fn ran(&self, name: &str) -> bool {
        self.admissions.iter().any(|r| r.name == name)
    }

    /// What the admission named `name` decided, if it ran.
    pub fn decision(&self, name: &str) -> Option<Decision> {
        self.admissions
            .iter()
            .rev()
            .find(|r| r.name == name)
            .map(|r| r.decision)
    }
}

/// The last requests that went through a chain, oldest first.
#[derive(Debug)]
pub struct Log {
    capacity: usize,
    records: Mutex<VecDeque<Record>>,
}

impl Log {
    fn push(&self, record: Record) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() == self.capacity {
            records.pop_front();
        }
        records.push_back(record);
    }

    /// The records kept, oldest first.
    pub fn records(&self) -> Vec<Record> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.iter().cloned().collect()
    }

    /// Forgets every record.
    pub fn clear(&self) {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
