//! PATCH bodies: which kind of patch a request carries, and applying it.

use bytes::Bytes;
use serde_json::Value;

use crate::error::{ApiError, Result};
use crate::resources::ResourceType;
use konverge_apimachinery::patch as machinery;

/// A decoded PATCH body.
#[derive(Debug, Clone)]
pub enum Patch {
    /// `application/json-patch+json` (RFC 6902).
    Json(Value),
    /// `application/merge-patch+json` (RFC 7386).
    Merge(Value),
    /// `application/strategic-merge-patch+json`, for the built-in type of this kind.
    Strategic {
        /// The patch.
        patch: Value,
        /// The group of the patched type.
        group: String,
        /// The kind of the patched type.
        kind: String,
    },
    /// `application/apply-patch+yaml`: server-side apply of this configuration, and the
    /// duplicate keys its text had (goyaml's strict errors).
    Apply(Value, Vec<String>),
}

/// `application/json-patch+json`.
pub const JSON_PATCH: &str = "application/json-patch+json";
/// `application/merge-patch+json`.
pub const MERGE: &str = "application/merge-patch+json";
/// `application/strategic-merge-patch+json`.
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
/// `application/apply-patch+yaml`.
pub const APPLY: &str = "application/apply-patch+yaml";

const ACCEPTED: &str = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json";
const ACCEPTED_CUSTOM: &str =
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

impl Patch {
    /// Reads a PATCH body of the patch type `media` (as [`Patch::media`] names it) for
    /// resource `rt`.
    pub fn parse(media: &str, body: &Bytes, rt: &ResourceType) -> Result<Patch> {
        let parse_json = || -> Result<Value> {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!(
                    "the body of the request could not be decoded as JSON: {e}"
                ))
            })
        };
        match media {
            JSON_PATCH => {
                let patch = parse_json()?;
                if !patch.is_array() {
                    return Err(ApiError::bad_request(
                        "json patch must be a list of operations",
                    ));
                }
                Ok(Patch::Json(patch))
            }
            MERGE => Ok(Patch::Merge(object(parse_json()?)?)),
            STRATEGIC => Ok(Patch::Strategic {
                patch: object(parse_json()?)?,
                group: rt.group.clone(),
                kind: rt.kind.clone(),
            }),
            APPLY => {
                let decoded = crate::registry::apply::parse_config(body)?;
                Ok(Patch::Apply(decoded.value, decoded.strict_errors))
            }
            _ => Err(unsupported(media, ACCEPTED)),
        }
    }

    /// The patch type `content_type` names (its parameters dropped), if `rt` takes it:
    /// kube-apiserver answers 415 before reading anything else (custom resources take no
    /// strategic merge patches).
    pub fn media(content_type: &str, rt: &ResourceType) -> Result<&'static str> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            JSON_PATCH => Ok(JSON_PATCH),
            MERGE => Ok(MERGE),
            STRATEGIC if rt.codec.is_none() => Err(unsupported(media, ACCEPTED_CUSTOM)),
            STRATEGIC => Ok(STRATEGIC),
            APPLY => Ok(APPLY),
            _ => Err(unsupported(media, ACCEPTED)),
        }
    }

    /// The object after the patch.
    pub fn apply(&self, current: &Value) -> Result<Value> {
        let result = match self {
            Patch::Json(patch) => machinery::apply_json_patch(current, patch),
            Patch::Merge(patch) => machinery::apply_merge_patch(current, patch),
            Patch::Strategic { patch, group, kind } => {
                machinery::apply_strategic_merge_patch(current, patch, group, kind)
            }
            Patch::Apply(config, _) => return Ok(config.clone()),
        };
        result.map_err(patch_error)
    }

    /// The `Scale` after the patch.
    pub fn apply_to_scale(&self, scale: &Value) -> Result<Value> {
        let result = match self {
            Patch::Json(patch) => machinery::apply_json_patch(scale, patch),
            Patch::Merge(patch) => machinery::apply_merge_patch(scale, patch),
            Patch::Strategic { patch, .. } => {
                machinery::apply_strategic_merge_patch(scale, patch, "autoscaling", "Scale")
            }
            // Applying a Scale sets what it says over the current Scale.
            Patch::Apply(config, _) => machinery::apply_merge_patch(scale, config),
        };
        result.map_err(patch_error)
    }
}

/// A patch that cannot be applied, with the status kube-apiserver answers with (400 for a
/// malformed patch, 413 for too many operations, 422 for one that does not apply, 500 for the
/// strategic-merge failures Kubernetes itself reports as internal).
fn patch_error(err: machinery::PatchError) -> ApiError {
    let message = match err.path() {
        Some(path) if !path.is_empty() => format!("{err} (at {path})"),
        _ => err.to_string(),
    };
    match err.kubernetes_status_code() {
        400 => ApiError::bad_request(message),
        413 => ApiError::too_large(message),
        415 => unsupported("application/strategic-merge-patch+json", ACCEPTED_CUSTOM),
        500 => ApiError::internal(message),
        _ => ApiError::invalid_patch(message),
    }
}

fn object(value: Value) -> Result<Value> {
    if value.is_object() {
        Ok(value)
    } else {
        Err(ApiError::bad_request("a merge patch must be a JSON object"))
    }
}

fn unsupported(media: &str, accepted: &str) -> ApiError {
    ApiError {
        code: http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        reason: crate::error::Reason::UnsupportedMediaType,
        message: format!(
            "the body of the request was in an unknown format - accepted media types include: {accepted} (got {media:?})"
        ),
        details: None,
    }
}

impl ApiError {
    /// A patch that cannot be applied: 422, as kube-apiserver answers.
    pub fn invalid_patch(message: String) -> Self {
        ApiError {
            code: http::StatusCode::UNPROCESSABLE_ENTITY,
            reason: crate::error::Reason::Invalid,
            message,
            details: None,
        }
    }
}
