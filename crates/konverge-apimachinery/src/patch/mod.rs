//! The three patch formats of `PATCH` requests, applied to JSON objects the way
//! kube-apiserver applies them.
//!
//! - [`apply_json_patch`]: JSON patch (RFC 6902, `application/json-patch+json`).
//! - [`apply_merge_patch`]: JSON merge patch (RFC 7386, `application/merge-patch+json`).
//! - [`apply_strategic_merge_patch`] / [`apply_strategic_merge_patch_with_schema`]: strategic
//!   merge patch (`application/strategic-merge-patch+json`), driven by a [`TypeSchema`] that
//!   says which lists merge by which key; [`PatchSchema::builtin`] describes the built-in
//!   kinds.
//!
//! Each returns the patched document or a [`PatchError`] whose message is kube-apiserver's
//! and whose [`PatchError::kubernetes_status_code`] is the status it answers with.

mod error;
mod json;
mod merge;
mod schema;
mod strategic;

pub use error::PatchError;
pub use json::{MAX_JSON_PATCH_OPERATIONS, apply_json_patch};
pub use merge::apply_merge_patch;
pub use schema::{
    FieldSchema, PatchSchema, PatchStrategy, TypeSchema, object_meta_schema, pod_spec_schema,
    pod_template_spec_schema,
};
pub use strategic::{apply_strategic_merge_patch, apply_strategic_merge_patch_with_schema};
