//! `metadata.managedFields`: what server-side apply knows of each type's shape, and the
//! recording of ordinary writes as `Update`s by their field manager (kube's fieldmanager,
//! which every write goes through). Applies themselves are in [`super::apply`].

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use konverge_apimachinery::patch::{PatchSchema, TypeSchema};
use konverge_apimachinery::ssa::{self, ApplyError, Shape};
use serde_json::Value;

use crate::error::{ApiError, Cause, Details, Reason, Result};
use crate::resources::ResourceType;

/// Built-in types' shapes by (group, kind), derived once from their descriptions.
type Shapes = Mutex<HashMap<(String, String), Arc<Shape>>>;

static BUILTIN_SHAPES: LazyLock<Shapes> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// What server-side apply knows of `rt`'s type.
pub(super) fn shape(rt: &ResourceType) -> Arc<Shape> {
    if let Some(custom) = &rt.custom {
        return custom.shape.clone();
    }
    let key = (rt.group.clone(), rt.kind.clone());
    let mut shapes = BUILTIN_SHAPES.lock().unwrap_or_else(|e| e.into_inner());
    shapes
        .entry(key)
        .or_insert_with(|| {
            // A kind without merge keys is still a struct: its keys are fields.
            Arc::new(match PatchSchema::builtin().lookup(&rt.group, &rt.kind) {
                Some(schema) => Shape::from_patch_schema(schema),
                None => Shape::from_patch_schema(&TypeSchema::kind(rt.kind.clone())),
            })
        })
        .clone()
}

/// The field manager of a request that names none: the User-Agent up to its first `/`, as
/// kube-apiserver derives it (`kubectl`, `kube-rs`, `python-requests`).
pub fn manager_from_user_agent(user_agent: Option<&str>) -> String {
    let agent = user_agent.unwrap_or("").split('/').next().unwrap_or("");
    agent.chars().take(128).collect()
}

pub(super) fn request<'a>(
    api_version: &'a str,
    manager: &'a str,
    subresource: Option<&'a str>,
    now: &'a str,
    force: bool,
) -> ssa::Request<'a> {
    ssa::Request {
        manager,
        api_version,
        subresource,
        now,
        force,
    }
}

/// Built-in kinds' empty objects as Go writes them, by `apiVersion/kind`.
static EMPTY_OBJECTS: LazyLock<Mutex<HashMap<String, Arc<Value>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// What a create is compared with: for a built-in kind, the empty object of its Go type as
/// kube's field manager sees it (`runtime.DefaultUnstructuredConverter` of the zero value:
/// struct fields and fields without `omitempty` present, at their zero), so a create owns
/// no `.` of `spec`, `template` or `strategy`, which exist before anything is set, and owns
/// a `.` of `data`, `labels` or `rollingUpdate`, which do not; for a custom resource, `{}`.
fn created_from(rt: &ResourceType) -> Arc<Value> {
    if rt.custom.is_some() {
        static NOTHING: LazyLock<Arc<Value>> =
            LazyLock::new(|| Arc::new(Value::Object(serde_json::Map::new())));
        return NOTHING.clone();
    }
    let kind = format!("{}/{}", rt.api_version(), rt.kind);
    let mut objects = EMPTY_OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    objects
        .entry(kind)
        .or_insert_with(|| {
            let mut empty = Value::Object(serde_json::Map::new());
            crate::resources::builtin::shape_as_go(rt, &mut empty);
            Arc::new(empty)
        })
        .clone()
}

/// Records an ordinary write (`old` is `None` for a create) as an `Update` by `manager`, the
/// request's field manager. Writes without one (the server's own bookkeeping, and applies,
/// which compute the managed fields themselves) leave the managed fields as they are.
pub(crate) fn record_update(
    rt: &ResourceType,
    old: Option<&Value>,
    new: Value,
    subresource: Option<&str>,
    manager: Option<&str>,
) -> Result<Value> {
    let Some(manager) = manager else {
        return Ok(new);
    };
    let api_version = rt.api_version();
    let now = crate::resources::meta::now();
    let req = request(&api_version, manager, subresource, &now, false);
    let empty;
    let old = match old {
        Some(old) => old,
        None => {
            empty = created_from(rt);
            &*empty
        }
    };
    ssa::update_owned(&shape(rt), Some(old), new, &req).map_err(apply_error)
}

/// An apply failure as the status kube-apiserver answers with.
pub(super) fn apply_error(err: ApplyError) -> ApiError {
    match &err {
        ApplyError::Conflicts(conflicts) => ApiError {
            code: http::StatusCode::CONFLICT,
            reason: Reason::Conflict,
            message: err.to_string(),
            details: Some(Box::new(Details {
                causes: conflicts
                    .iter()
                    .map(|c| Cause {
                        reason: "FieldManagerConflict".into(),
                        message: c.message(),
                        field: c.field.clone(),
                    })
                    .collect(),
                ..Details::default()
            })),
        },
        ApplyError::Internal(message) => ApiError::internal(message.clone()),
        ApplyError::Invalid(message) => ApiError::bad_request(message.clone()),
    }
}
