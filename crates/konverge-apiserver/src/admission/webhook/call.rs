//! What both kinds of webhook share: deciding whether a webhook is called for a request,
//! converting the object to the version it asked for, calling it, and recording what it
//! answered (warnings, audit annotations) on the request's trace.

use std::sync::Arc;

use serde_json::Value;

use super::config::{FailurePolicy, Hook};
use super::review::{self, Answer, Gvk, ReadError};
use crate::admission::matching::matching_resource;
use crate::admission::plugins::forbidden;
use crate::admission::{Attributes, Trace};
use crate::auth::authz::Authorization;
use crate::error::{ApiError, Result};
use crate::lister::Lister;
use crate::resources::ResourceType;
use crate::webhook::Webhooks;

/// A webhook that is to be called for a request, and how: the resource its rules matched
/// (the request's own, or an equivalent version of it) and that resource's kind.
#[derive(Debug)]
pub(crate) struct Invocation {
    /// The webhook.
    pub(crate) hook: Arc<Hook>,
    /// The resource the rules matched.
    pub(crate) rt: Arc<ResourceType>,
    /// Its kind.
    pub(crate) kind: Gvk,
}

/// Whether `hook` is called for the request — its rules, object selector, namespace
/// selector and match conditions, in kube-apiserver's order of precedence — and how.
/// Fails when the namespace selector cannot be answered (the namespace does not exist)
/// or the match conditions refuse the request.
pub(crate) async fn should_call(
    hook: &Arc<Hook>,
    attributes: &Attributes<'_>,
    object: &Value,
    registry: &dyn Lister,
    authorization: &Authorization,
) -> Result<Option<Invocation>> {
    let Some(rt) = matching_resource(&hook.rules, hook.match_policy, attributes, registry) else {
        return Ok(None);
    };
    let selectors = hook
        .selectors
        .as_ref()
        .map_err(|e| ApiError::internal(e.clone()))?;
    if !selectors.object_matches(attributes, object) {
        return Ok(None);
    }
    if !selectors
        .namespace_matches(attributes, object, registry)
        .await?
    {
        return Ok(None);
    }
    if !conditions_match(hook, attributes, object, &rt, authorization).await? {
        return Ok(None);
    }
    let kind = Gvk::of(&rt, attributes.subresource);
    Ok(Some(Invocation {
        hook: hook.clone(),
        rt,
        kind,
    }))
}

/// Whether a webhook's `matchConditions` all hold for the request, evaluated on the object
/// in the version the webhook matched (`rt`), with ValidatingAdmissionPolicy's CEL
/// environment: any false condition skips the webhook; conditions that cannot be evaluated
/// refuse the request under `failurePolicy: Fail` (403, with kube-apiserver's words for the
/// errors) and skip the webhook under `Ignore`.
pub(crate) async fn conditions_match(
    hook: &Hook,
    attributes: &Attributes<'_>,
    object: &Value,
    rt: &ResourceType,
    authorization: &Authorization,
) -> Result<bool> {
    if hook.conditions.is_empty() {
        return Ok(true);
    }
    let request = crate::admission::policy::Request::new(attributes, object, rt, authorization);
    let failure = match hook.failure_policy {
        FailurePolicy::Ignore => crate::admission::policy::FailurePolicy::Ignore,
        FailurePolicy::Fail => crate::admission::policy::FailurePolicy::Fail,
    };
    hook.conditions
        .evaluate(&request, None, failure)
        .await
        .map_err(|e| forbidden(attributes, e.to_string()))
}

/// `object`, served as `from`, converted to the version `to` serves.
pub(crate) fn convert(object: &Value, from: &ResourceType, to: &ResourceType) -> Value {
    if object.is_null() || (from.group == to.group && from.version == to.version) {
        return object.clone();
    }
    let mut converted = object.clone();
    if let Some(conversion) = from.conversion {
        (conversion.to_storage)(&mut converted);
    }
    if to.conversion.is_some() || to.custom.is_some() {
        to.to_served(&mut converted);
    } else if let Some(map) = converted.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(to.api_version()));
    }
    converted
}

/// Why a call did not end in the webhook allowing the request.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The webhook could not be called, or its answer not used (kube-apiserver's
    /// `ErrCallingWebhook`): the failure policy decides. The text follows
    /// `failed calling webhook "<name>": `.
    Calling(String),
    /// The request is refused, whatever the failure policy says.
    Refused(ApiError),
}

impl Failure {
    /// The error the request fails with when the failure policy is `Fail`.
    pub(crate) fn into_error(self, hook: &Hook) -> ApiError {
        match self {
            Failure::Calling(why) => ApiError::internal(format!(
                "failed calling webhook {}: {why}",
                review::go_quote(&hook.name)
            )),
            Failure::Refused(e) => e,
        }
    }
}

/// Calls the webhook of `invocation` about the request, `object` and `old` already in its
/// version; records its warnings and audit annotations; answers what it said when it
/// allowed the request.
pub(crate) async fn call(
    invocation: &Invocation,
    attributes: &Attributes<'_>,
    object: &Value,
    old: &Value,
    registry: &dyn Lister,
    webhooks: &Webhooks,
    mutating: bool,
) -> std::result::Result<Answer, Failure> {
    let hook = &invocation.hook;
    if attributes.dry_run {
        match hook.side_effects.as_str() {
            "None" | "NoneOnDryRun" => {}
            "" => return Err(Failure::Calling("Webhook SideEffects is nil".into())),
            _ => {
                return Err(Failure::Refused(ApiError::bad_request(format!(
                    "admission webhook {} does not support dry run",
                    review::go_quote(&hook.name)
                ))));
            }
        }
    }
    let Some(version) = hook
        .review_versions
        .iter()
        .find(|v| review::VERSIONS.contains(&v.as_str()))
    else {
        return Err(Failure::Calling(
            "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)".into(),
        ));
    };
    let uid = uuid::Uuid::new_v4().to_string();
    let body = review::Request {
        uid: &uid,
        version,
        resource: &invocation.rt,
        kind: &invocation.kind,
        attributes,
        object,
        old,
    }
    .to_json();
    let body = serde_json::to_vec(&body)
        .map_err(|e| Failure::Calling(format!("could not create admission objects: {e}")))?;
    let query = format!("timeout={}s", hook.timeout.as_secs());
    let answered = webhooks
        .call_typed(
            &hook.client,
            Some(&query),
            body.into(),
            hook.timeout,
            registry,
        )
        .await;
    let (response, content_type) = answered.map_err(|e| {
        Failure::Calling(format!(
            "failed to call webhook: Post {}: {e}",
            review::go_quote(&hook.client.target(Some(&query)))
        ))
    })?;
    let answer = review::read(&response, content_type.as_deref(), &uid, version, mutating)
        .map_err(|e| match e {
            ReadError::Client(why) => Failure::Calling(format!("failed to call webhook: {why}")),
            ReadError::Invalid(why) => {
                Failure::Calling(format!("received invalid webhook response: {why}"))
            }
        })?;
    for (key, value) in &answer.audit_annotations {
        annotate(attributes.trace, &format!("{}/{key}", hook.name), value);
    }
    for warning in &answer.warnings {
        attributes.trace.warn_as_recorded(warning);
    }
    if !answer.allowed {
        return Err(Failure::Refused(review::denied(
            &hook.name,
            answer.status.as_ref(),
        )));
    }
    Ok(answer)
}

/// Adds an audit annotation as kube-apiserver's admission attributes do: the key must be a
/// qualified name with a prefix, and an annotation once set keeps its value.
pub(crate) fn annotate(trace: &Trace, key: &str, value: &str) {
    if key.split('/').count() != 2
        || !konverge_apimachinery::selector::label_key_errors(key).is_empty()
    {
        return;
    }
    if trace.annotations().iter().any(|(k, _)| k == key) {
        return;
    }
    trace.annotate(key, value);
}
