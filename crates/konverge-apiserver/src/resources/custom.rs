//! What the server keeps of one served version of a CustomResourceDefinition: its schema,
//! rules, apply shape and conversion webhook, and what reading and validating its objects
//! does with them. Built from a definition by [`super::crd`]; held by the
//! [`ResourceType`](super::ResourceType) of each version.

use std::collections::BTreeMap;
use std::sync::Arc;

use konverge_apimachinery::cel::Rules;
use konverge_apimachinery::field::{ErrorType, FieldError};
use konverge_apimachinery::schema::Structural;
use konverge_apimachinery::ssa::Shape;
use serde_json::{Value, json};

use crate::error::Cause;
use crate::webhook::client_config::ClientConfig;

/// What one served version of a definition says about its objects.
pub struct CustomResource {
    /// The definition's name (`crontabs.stable.example.com`).
    pub crd_name: String,
    /// The version objects are stored in.
    pub storage_version: String,
    /// This version's `openAPIV3Schema`, as written.
    pub schema: Option<Value>,
    /// The same, parsed: pruning, defaulting and validation.
    pub structural: Option<Structural>,
    /// Whether the schema has defaults, which objects read from storage get too (as
    /// kube-apiserver defaults what it decodes from etcd: a default added to the schema
    /// later shows on objects stored before).
    pub defaults_on_read: bool,
    /// Its `x-kubernetes-validations` rules.
    pub rules: Option<Rules>,
    /// What server-side apply needs to know of the type.
    pub shape: Arc<Shape>,
    /// Changes whenever the definition does (for caches of derived documents).
    pub fingerprint: String,
    /// The definition's conversion webhook (`spec.conversion.strategy: Webhook`), shared by
    /// all its versions; `None` for conversion `None`.
    pub webhook: Option<Arc<ConversionWebhook>>,
}

/// What a definition with `spec.conversion.strategy: Webhook` says about converting its
/// objects between versions (the registry's conversion calls the webhook).
pub struct ConversionWebhook {
    /// The definition's name.
    pub crd_name: String,
    /// The API group.
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The version objects are stored in.
    pub storage_version: String,
    /// Where the webhook is (`spec.conversion.webhook.clientConfig`).
    pub client: ClientConfig,
    /// `spec.conversion.webhook.conversionReviewVersions`, in order: the first one the
    /// server speaks (`v1`, `v1beta1`) is the one it sends.
    pub review_versions: Vec<String>,
    /// Every version's schema, by version name: an object read from storage is defaulted by
    /// the schema of the version it is stored in, a converted object is pruned by the schema
    /// of the version it was converted to.
    pub schemas: BTreeMap<String, Structural>,
}

impl std::fmt::Debug for ConversionWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversionWebhook")
            .field("crd_name", &self.crd_name)
            .field("client", &self.client)
            .field("review_versions", &self.review_versions)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CustomResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomResource")
            .field("crd_name", &self.crd_name)
            .field("storage_version", &self.storage_version)
            .finish_non_exhaustive()
    }
}

impl CustomResource {
    /// Checks a custom object against the schema and the rules (`old` on update).
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut errors = Vec::new();
        if let Some(structural) = &self.structural {
            errors.extend(structural.validate(obj));
        }
        if let Some(rules) = &self.rules {
            // As kube-apiserver: the rules run unless the schema found values they cannot
            // read (wrong types, missing or unsupported values), and then it says so.
            let unreadable = errors.iter().any(|e| {
                matches!(
                    e.kind,
                    ErrorType::NotSupported
                        | ErrorType::Required
                        | ErrorType::TooLong
                        | ErrorType::TooMany
                        | ErrorType::TypeInvalid
                )
            });
            if unreadable {
                errors.push(FieldError::invalid(
                    "<nil>",
                    json!("null"),
                    "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                ));
            } else {
                errors.extend(rules.validate(obj, old));
            }
        }
        errors.iter().map(cause).collect()
    }
    /// Presents a stored object as the version whose `apiVersion` is `api_version`:
    /// conversion `None` changes only `apiVersion`; then the version's schema defaults apply,
    /// as they do to everything kube-apiserver reads from storage.
    pub fn present(&self, api_version: &str, obj: &mut Value) {
        if obj.get("apiVersion").and_then(Value::as_str) != Some(api_version)
            && let Some(map) = obj.as_object_mut()
        {
            map.insert("apiVersion".into(), json!(api_version));
        }
        if self.defaults_on_read
            && let Some(structural) = &self.structural
        {
            structural.default(obj);
        }
    }
}

/// A field error as a `Status` cause.
pub fn cause(error: &FieldError) -> Cause {
    Cause {
        reason: error.reason().into(),
        message: error.message(),
        field: error.field.clone(),
    }
}
