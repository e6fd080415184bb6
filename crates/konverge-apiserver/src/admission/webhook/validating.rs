//! `ValidatingAdmissionWebhook`: the validating webhooks whose rules match a write, all
//! called at once; the first refusal to arrive refuses the write.

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::Value;

use super::call::{self, Failure, Invocation};
use super::config::{FailurePolicy, Kind, Source};
use crate::admission::{Attributes, Decision, Operation, Plugin};
use crate::auth::authz::Authorization;
use crate::error::Result;
use std::sync::Arc;

use crate::lister::Lister;
use crate::resources::ResourceType;
use crate::webhook::Webhooks;

/// The audit annotation prefix kube-apiserver records a validating webhook that failed open
/// under.
const FAILED_OPEN_PREFIX: &str = "failed-open.validating.webhook.admission.k8s.io/";

/// The `ValidatingAdmissionWebhook` admission plugin: calls the webhooks of every
/// ValidatingWebhookConfiguration whose rules match a write, in parallel, after the object
/// passed validation.
#[derive(Debug)]
pub struct ValidatingAdmissionWebhook {
    source: Source,
}

impl ValidatingAdmissionWebhook {
    /// The plugin, calling webhooks through `webhooks`, reading configurations through
    /// `registry` (re-read whenever admission
    /// configuration changes); `matchConditions` ask `authorization` what their
    /// `authorizer` checks.
    pub fn new(
        registry: Arc<dyn Lister>,
        webhooks: Webhooks,
        authorization: Authorization,
    ) -> ValidatingAdmissionWebhook {
        ValidatingAdmissionWebhook {
            source: Source::new(Kind::Validating, registry, webhooks, authorization),
        }
    }
}

#[async_trait::async_trait]
impl Plugin for ValidatingAdmissionWebhook {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
    }

    fn handles(&self, rt: &ResourceType) -> bool {
        self.source.may_handle(rt)
    }

    fn handles_operation(&self, _operation: Operation) -> bool {
        true
    }

    async fn validate(
        &self,
        attributes: &Attributes<'_>,
        object: &Value,
        registry: &dyn Lister,
    ) -> Result<()> {
        if crate::admission::matching::exempt(attributes.rt) {
            return Ok(());
        }
        let snapshot = self.source.hooks().await?;
        let webhooks = self.source.webhooks();
        let mut relevant: Vec<Invocation> = Vec::new();
        for hook in &snapshot.hooks {
            if let Some(invocation) = call::should_call(
                hook,
                attributes,
                object,
                registry,
                self.source.authorization(),
            )
            .await?
            {
                relevant.push(invocation);
            }
        }
        if relevant.is_empty() {
            return Ok(());
        }
        // The object and the object before, once per version some webhook asked for.
        let mut versions: Vec<(&ResourceType, Value, Value)> = Vec::new();
        for invocation in &relevant {
            let rt: &ResourceType = &invocation.rt;
            if !versions
                .iter()
                .any(|(v, _, _)| v.group == rt.group && v.version == rt.version)
            {
                let old = attributes
                    .old
                    .map(|old| call::convert(old, attributes.rt, rt))
                    .unwrap_or(Value::Null);
                versions.push((rt, call::convert(object, attributes.rt, rt), old));
            }
        }
        let versions = &versions;
        let mut calls: FuturesUnordered<_> = relevant
            .iter()
            .enumerate()
            .map(|(index, invocation)| async move {
                let (_, object, old) = versions
                    .iter()
                    .find(|(v, _, _)| {
                        v.group == invocation.rt.group && v.version == invocation.rt.version
                    })
                    .map(|(v, o, p)| (*v, o, p))
                    .unwrap_or((attributes.rt, object, &Value::Null));
                let outcome = call::call(
                    invocation, attributes, object, old, registry, webhooks, false,
                )
                .await;
                (index, invocation, outcome)
            })
            .collect();
        let trace = attributes.trace;
        let mut refusal = None;
        while let Some((index, invocation, outcome)) = calls.next().await {
            let hook = &invocation.hook;
            let ran = format!("ValidatingWebhook/{}", hook.name);
            match outcome {
                Ok(answer) if !answer.warnings.is_empty() => trace.ran(ran, Decision::Warned),
                Ok(_) => trace.ran(ran, Decision::Allowed),
                Err(Failure::Calling(_)) if hook.failure_policy == FailurePolicy::Ignore => {
                    trace.ran(ran, Decision::Allowed);
                    trace.annotate(
                        format!("{FAILED_OPEN_PREFIX}round_0_index_{index}"),
                        hook.name.clone(),
                    );
                }
                Err(failure) => {
                    trace.ran(ran, Decision::Denied);
                    refusal.get_or_insert(failure.into_error(hook));
                }
            }
        }
        refusal.map_or(Ok(()), Err)
    }
}
