//! `MutatingAdmissionWebhook`: the mutating webhooks, called one after the other, each seeing
//! the object as the ones before left it; their JSON patches applied; those with
//! `reinvocationPolicy: IfNeeded` called once more when a later webhook changed the object.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::call::{self, Failure, Invocation};
use super::config::{FailurePolicy, Hook, Kind, Source};
use super::gojson;
use super::review::{Answer, go_quote};
use crate::admission::{Attributes, Decision, Operation, Plugin};
use crate::auth::authz::Authorization;
use crate::error::{ApiError, Result};
use crate::lister::Lister;
use crate::resources::ResourceType;
use crate::webhook::Webhooks;

/// Audit annotation prefixes kube-apiserver records mutations under.
const PATCH_PREFIX: &str = "patch.webhook.admission.k8s.io/";
const MUTATION_PREFIX: &str = "mutation.webhook.admission.k8s.io/";
const FAILED_OPEN_PREFIX: &str = "failed-open.mutation.webhook.admission.k8s.io/";

/// Fields of a created object kube-apiserver sets only after mutating admission (when it
/// prepares the object for storage), so mutating webhooks never see them.
const SET_AFTER_MUTATION: [&str; 3] = ["uid", "creationTimestamp", "generation"];

/// The `MutatingAdmissionWebhook` admission plugin: calls the webhooks of every
/// MutatingWebhookConfiguration whose rules match a write, in order, and applies their
/// patches.
#[derive(Debug)]
pub struct MutatingAdmissionWebhook {
    source: Source,
}

impl MutatingAdmissionWebhook {
    /// The plugin, reading configurations through `registry` (re-read whenever admission
    /// configuration changes), calling webhooks through `webhooks`; `matchConditions` ask
    /// `authorization` what their `authorizer` checks.
    pub fn new(
        registry: Arc<dyn Lister>,
        webhooks: Webhooks,
        authorization: Authorization,
    ) -> MutatingAdmissionWebhook {
        MutatingAdmissionWebhook {
            source: Source::new(Kind::Mutating, registry, webhooks, authorization),
        }
    }
}

#[async_trait::async_trait]
impl Plugin for MutatingAdmissionWebhook {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    fn may_change_managed_fields(&self) -> bool {
        true
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        self.source.may_handle(rt)
    }

    fn handles_operation(&self, _operation: Operation) -> bool {
        true
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        registry: &dyn Lister,
    ) -> Result<bool> {
        if crate::admission::matching::exempt(attributes.rt) {
            return Ok(false);
        }
        let snapshot = self.source.hooks().await?;
        if snapshot.hooks.is_empty() {
            return Ok(false);
        }
        let mut mutation = Mutation::new(attributes, object);
        let outcome = mutation
            .run(
                &snapshot.hooks,
                registry,
                self.source.webhooks(),
                self.source.authorization(),
            )
            .await;
        let changed = mutation.finish(object);
        outcome.map(|()| changed)
    }
}

/// Which webhooks are called again, kube-apiserver's reinvocation context.
#[derive(Debug, Default)]
struct Reinvocation {
    /// `IfNeeded` webhooks called since the object last changed.
    invoked: HashSet<String>,
    /// Webhooks a later change requires calling again.
    again: HashSet<String>,
    /// Whether some webhook changed the object (then a second round runs).
    needed: bool,
}

impl Reinvocation {
    fn changed(&mut self) {
        self.again.extend(self.invoked.drain());
        self.needed = true;
    }
}

/// What a webhook that allowed the request did.
#[derive(Debug, Clone, Copy)]
struct Called {
    /// It changed the object.
    changed: bool,
    /// It sent warnings.
    warned: bool,
}

/// One request's passage through the mutating webhooks.
struct Mutation<'a> {
    attributes: &'a Attributes<'a>,
    /// The object as the last webhook left it, in the version of `version` (the request's
    /// own while `None`).
    current: Value,
    version: Option<Arc<ResourceType>>,
    /// Whether a patch was applied (the object is then replaced).
    dirty: bool,
    /// Whether a patch changed the object.
    changed: bool,
    /// What was taken out of a created object before the webhooks saw it.
    set_later: Vec<(&'static str, Value)>,
    /// The object before, per version it was converted to.
    old: Vec<(Arc<ResourceType>, Value)>,
}

impl<'a> Mutation<'a> {
    fn new(attributes: &'a Attributes<'a>, object: &Value) -> Mutation<'a> {
        let mut current = object.clone();
        let mut set_later = Vec::new();
        if attributes.operation == Operation::Create
            && let Some(meta) = current.get_mut("metadata").and_then(Value::as_object_mut)
        {
            for field in SET_AFTER_MUTATION {
                if let Some(value) = meta.remove(field) {
                    set_later.push((field, value));
                }
            }
        }
        Mutation {
            attributes,
            current,
            version: None,
            dirty: false,
            changed: false,
            set_later,
            old: Vec::new(),
        }
    }

    fn own_version(&self) -> &ResourceType {
        self.version.as_deref().unwrap_or(self.attributes.rt)
    }

    /// Hands the object back (in the request's version, with what kube-apiserver sets after
    /// admission put back); says whether a webhook changed it.
    fn finish(mut self, object: &mut Value) -> bool {
        if !self.dirty {
            return false;
        }
        let mut result = match &self.version {
            Some(rt) => call::convert(&self.current, rt, self.attributes.rt),
            None => std::mem::take(&mut self.current),
        };
        if let Some(meta) = result.get_mut("metadata").and_then(Value::as_object_mut) {
            for (field, value) in self.set_later {
                meta.insert(field.into(), value);
            }
        }
        *object = result;
        self.changed
    }

    /// The object before, in `rt`'s version.
    fn old_as(&mut self, rt: &Arc<ResourceType>) -> Value {
        let Some(old) = self.attributes.old else {
            return Value::Null;
        };
        if let Some((_, converted)) = self
            .old
            .iter()
            .find(|(v, _)| v.group == rt.group && v.version == rt.version)
        {
            return converted.clone();
        }
        let converted = call::convert(old, self.attributes.rt, rt);
        self.old.push((rt.clone(), converted.clone()));
        converted
    }

    /// The object in `rt`'s version, from now on.
    fn switch_to(&mut self, rt: &Arc<ResourceType>) {
        if self.own_version().version == rt.version && self.own_version().group == rt.group {
            return;
        }
        self.current = call::convert(&self.current, self.own_version(), rt);
        self.version = Some(rt.clone());
    }

    async fn run(
        &mut self,
        hooks: &[Arc<Hook>],
        registry: &dyn Lister,
        webhooks: &Webhooks,
        authorization: &Authorization,
    ) -> Result<()> {
        let mut reinvocation = Reinvocation::default();
        for round in 0..2 {
            if round == 1 && !reinvocation.needed {
                break;
            }
            for (index, hook) in hooks.iter().enumerate() {
                let Some(invocation) = call::should_call(
                    hook,
                    self.attributes,
                    &self.current,
                    registry,
                    authorization,
                )
                .await?
                else {
                    continue;
                };
                // A webhook skipped in the first round is not called in the second, even if
                // the object now matches it.
                if round == 1 && !reinvocation.again.contains(&hook.uid) {
                    continue;
                }
                let outcome = self
                    .call(&invocation, registry, webhooks, round, index)
                    .await;
                if matches!(outcome, Ok(Called { changed: true, .. })) {
                    reinvocation.changed();
                }
                if hook.reinvoke_if_needed {
                    reinvocation.invoked.insert(hook.uid.clone());
                }
                let trace = self.attributes.trace;
                let ran = format!("MutatingWebhook/{}", hook.name);
                match outcome {
                    Ok(Called { changed: true, .. }) => trace.ran(ran, Decision::Mutated),
                    Ok(Called { warned: true, .. }) => trace.ran(ran, Decision::Warned),
                    Ok(Called { .. }) => trace.ran(ran, Decision::Allowed),
                    Err(Failure::Calling(_)) if hook.failure_policy == FailurePolicy::Ignore => {
                        trace.ran(ran, Decision::Allowed);
                        trace.annotate(
                            format!("{FAILED_OPEN_PREFIX}round_{round}_index_{index}"),
                            hook.name.clone(),
                        );
                    }
                    Err(failure) => {
                        trace.ran(ran, Decision::Denied);
                        return Err(failure.into_error(hook));
                    }
                }
            }
        }
        Ok(())
    }

    /// Calls one webhook and applies its patch.
    async fn call(
        &mut self,
        invocation: &Invocation,
        registry: &dyn Lister,
        webhooks: &Webhooks,
        round: usize,
        index: usize,
    ) -> std::result::Result<Called, Failure> {
        let hook = &invocation.hook;
        self.switch_to(&invocation.rt);
        let old = self.old_as(&invocation.rt);
        let answered = call::call(
            invocation,
            self.attributes,
            &self.current,
            &old,
            registry,
            webhooks,
            true,
        )
        .await;
        let applied = match answered {
            Ok(answer) => self
                .apply(hook, &invocation.rt, &answer, round, index)
                .map(|changed| Called {
                    changed,
                    warned: !answer.warnings.is_empty(),
                }),
            Err(failure) => Err(failure),
        };
        let mutated = matches!(applied, Ok(Called { changed: true, .. }));
        self.attributes.trace.annotate(
            format!("{MUTATION_PREFIX}round_{round}_index_{index}"),
            format!(
                r#"{{"configuration":{},"webhook":{},"mutated":{mutated}}}"#,
                Value::from(hook.configuration.as_str()),
                Value::from(hook.name.as_str()),
            ),
        );
        applied
    }

    /// Applies a webhook's patch to the object; an object the patch breaks is refused whole,
    /// leaving the object as it was.
    fn apply(
        &mut self,
        hook: &Hook,
        rt: &ResourceType,
        answer: &Answer,
        round: usize,
        index: usize,
    ) -> std::result::Result<bool, Failure> {
        if answer.patch.is_empty() {
            return Ok(false);
        }
        let internal = |message: String| Failure::Refused(ApiError::internal(message));
        if let Some(e) = gojson::syntax_error(&answer.patch) {
            return Err(internal(e));
        }
        let patch: Value =
            serde_json::from_slice(&answer.patch).map_err(|e| internal(e.to_string()))?;
        let operations = match &patch {
            Value::Null => return Ok(false),
            Value::Array(ops) => ops,
            other => return Err(internal(gojson::value_type_error(other, "jsonpatch.Patch"))),
        };
        if let Some(bad) = operations
            .iter()
            .find(|op| !op.is_object() && !op.is_null())
        {
            return Err(internal(gojson::value_type_error(
                bad,
                "jsonpatch.Operation",
            )));
        }
        if operations.is_empty() {
            return Ok(false);
        }
        if self.current.is_null() {
            return Err(internal(format!(
                "admission webhook {} attempted to modify the object, which is not supported for this operation",
                go_quote(&hook.name)
            )));
        }
        if answer.patch_type != "JSONPatch" {
            return Err(Failure::Calling(format!(
                "unsupported patch type {}",
                go_quote(&answer.patch_type)
            )));
        }
        let patched = konverge_apimachinery::patch::apply_json_patch(&self.current, &patch)
            .map_err(|e| internal(e.to_string()))?;
        let decoded = decode(rt, patched).map_err(internal)?;
        let changed = decoded != self.current;
        self.attributes.trace.annotate(
            format!("{PATCH_PREFIX}round_{round}_index_{index}"),
            format!(
                r#"{{"configuration":{},"webhook":{},"patch":{},"patchType":"JSONPatch"}}"#,
                Value::from(hook.configuration.as_str()),
                Value::from(hook.name.as_str()),
                patch,
            ),
        );
        self.current = decoded;
        self.dirty = true;
        self.changed |= changed;
        Ok(changed)
    }
}

/// A patched object decoded as `rt`'s type, as kube-apiserver decodes it: fields the type
/// does not have dropped (for custom resources, pruned by the schema), values of the wrong
/// type refused, then the version's defaults applied.
fn decode(rt: &ResourceType, patched: Value) -> std::result::Result<Value, String> {
    let mut decoded = match rt.codec {
        Some(codec) => codec(patched)?.0,
        None => patched,
    };
    if let Some(structural) = rt.custom.as_ref().and_then(|c| c.structural.as_ref()) {
        structural.prune(&mut decoded);
        structural.default(&mut decoded);
    }
    if let Some(default) = rt.default {
        default(&mut decoded);
    }
    Ok(decoded)
}
