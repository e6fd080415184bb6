//! A write as admission expressions see it: the `request` variable (kube's
//! `AdmissionRequest`), `object` and `oldObject` in the version the request matched, and an
//! `authorizer` answered by the server's authorization, cached for the request.
//!
//! Expressions are evaluated synchronously and the authorizer is not: `Request::run`
//! evaluates a set of expressions, asks the authorizer what the set's checks needed that
//! the cache did not know, and evaluates the set again, until it needed nothing new.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use konverge_apimachinery::cel::admission::{self as cel, AuthorizerInput, Check, Target};
use serde_json::{Map, Value, json};

use super::super::{Attributes, Operation};
use crate::auth::authz::{self, Authorization};
use crate::auth::user::UserInfo;
use crate::resources::ResourceType;

/// How many times a set of expressions is evaluated, at most, to learn the authorization
/// checks it makes (each pass asks every check it found new).
const MAX_PASSES: usize = 16;

/// One admission request, prepared for CEL: what every webhook's and policy's expressions
/// see of it.
pub struct Request<'a> {
    attributes: &'a Attributes<'a>,
    object: Value,
    old_object: Value,
    request: Value,
    authorization: &'a Authorization,
    user: UserInfo,
    decisions: Arc<Mutex<HashMap<Check, cel::Decision>>>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

impl<'a> Request<'a> {
    /// The request `attributes` describe, whose object is `object` (null on a delete), as
    /// it matched `matched`: the request's own resource, or an equivalent version of it (the
    /// objects are then converted to that version, and `request.kind`/`request.resource` name
    /// it while `requestKind`/`requestResource` name what was asked). Authorization checks are
    /// answered by `authorization`.
    pub fn new(
        attributes: &'a Attributes<'a>,
        object: &Value,
        matched: &ResourceType,
        authorization: &'a Authorization,
    ) -> Request<'a> {
        let own = attributes.rt;
        let convert = |v: &Value| {
            if v.is_null() || (matched.version == own.version && matched.group == own.group) {
                v.clone()
            } else {
                converted(v, own, matched)
            }
        };
        let user = attributes
            .user
            .cloned()
            .unwrap_or_else(crate::admission::server_user);
        Request {
            attributes,
            object: convert(object),
            old_object: attributes.old.map_or(Value::Null, convert),
            request: admission_request(attributes, matched, &user),
            authorization,
            user,
            decisions: Arc::default(),
        }
    }

    /// The attributes of the request.
    pub fn attributes(&self) -> &Attributes<'a> {
        self.attributes
    }

    /// `object`, in the matched version.
    pub fn object(&self) -> &Value {
        &self.object
    }

    /// `oldObject`, in the matched version (null but on updates and deletes).
    pub fn old_object(&self) -> &Value {
        &self.old_object
    }

    /// `request`: the `AdmissionRequest` as expressions read it.
    pub fn admission_request(&self) -> &Value {
        &self.request
    }

    /// The inputs of an activation: `params` and `namespaceObject` as given, the authorizer
    /// when `oracle` is given.
    pub(crate) fn input<'s>(
        &'s self,
        params: Option<&'s Value>,
        namespace: Option<&'s Value>,
        authorizer: Option<&'s AuthorizerInput>,
    ) -> cel::Input<'s> {
        cel::Input {
            object: &self.object,
            old_object: &self.old_object,
            params,
            request: &self.request,
            namespace,
            authorizer,
        }
    }

    /// Evaluates a set of expressions with `evaluate`, given the `authorizer` to evaluate
    /// them with; evaluates it again while it made authorization checks the request's cache
    /// could not answer, after asking the server's authorization.
    pub(crate) async fn run<T>(&self, evaluate: impl Fn(&AuthorizerInput) -> T) -> T {
        let mut passes = 0;
        loop {
            let oracle = Arc::new(Oracle {
                decisions: self.decisions.clone(),
                pending: Mutex::default(),
            });
            let authorizer = AuthorizerInput {
                user: cel_user(&self.user),
                oracle: oracle.clone(),
                request_resource: cel::RequestResource {
                    group: self.attributes.rt.group.clone(),
                    resource: self.attributes.rt.plural.clone(),
                    subresource: self.attributes.subresource.unwrap_or("").to_string(),
                    namespace: self.attributes.namespace.to_string(),
                    name: self.attributes.name.to_string(),
                },
            };
            let result = evaluate(&authorizer);
            let pending =
                std::mem::take(&mut *oracle.pending.lock().unwrap_or_else(|e| e.into_inner()));
            passes += 1;
            if pending.is_empty() || passes == MAX_PASSES {
                return result;
            }
            for check in pending {
                let decision = self.authorization.decide(&authz_attributes(&check)).await;
                let decision = cel::Decision {
                    allowed: decision.allowed(),
                    reason: decision.reason().to_string(),
                    error: None,
                };
                self.decisions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(check, decision);
            }
        }
    }
}

/// The oracle of one evaluation pass: answers from the request's cache, and remembers what
/// it could not answer.
#[derive(Debug)]
struct Oracle {
    decisions: Arc<Mutex<HashMap<Check, cel::Decision>>>,
    pending: Mutex<Vec<Check>>,
}

impl cel::Oracle for Oracle {
    fn decide(&self, check: &Check) -> Option<cel::Decision> {
        let known = self
            .decisions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(check)
            .cloned();
        if known.is_none() {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if !pending.contains(check) {
                pending.push(check.clone());
            }
        }
        known
    }
}

fn cel_user(user: &UserInfo) -> cel::User {
    cel::User {
        name: user.name.clone(),
        uid: user.uid.clone(),
        groups: user.groups.clone(),
        extra: user.extra.clone(),
    }
}

/// What the server's authorization is asked for a check.
fn authz_attributes(check: &Check) -> authz::Attributes {
    let user = UserInfo {
        name: check.user.name.clone(),
        uid: check.user.uid.clone(),
        groups: check.user.groups.clone(),
        extra: check.user.extra.clone(),
    };
    match &check.target {
        Target::Path(path) => authz::Attributes {
            user,
            verb: check.verb.clone(),
            resource_request: false,
            path: path.clone(),
            ..authz::Attributes::default()
        },
        Target::Resource {
            group,
            resource,
            subresource,
            namespace,
            name,
            ..
        } => authz::Attributes {
            user,
            verb: check.verb.clone(),
            resource_request: true,
            namespace: namespace.clone(),
            api_group: group.clone(),
            api_version: "*".to_string(),
            resource: resource.clone(),
            subresource: subresource.clone(),
            name: name.clone(),
            path: String::new(),
        },
    }
}

/// The kind a request for `rt` carries: the subresource's own kind when it has one
/// (`pods/eviction` takes an `Eviction`), the resource's otherwise.
fn kind_of(rt: &ResourceType, subresource: Option<&str>) -> Value {
    if let Some((group, version, kind)) = subresource
        .and_then(|s| rt.subresource(s))
        .and_then(|s| s.kind)
    {
        return json!({"group": group, "version": version, "kind": kind});
    }
    json!({"group": rt.group, "version": rt.version, "kind": rt.kind})
}

fn resource_of(rt: &ResourceType) -> Value {
    json!({"group": rt.group, "version": rt.version, "resource": rt.plural})
}

/// kube's `CreateAdmissionRequest`, as the unstructured value expressions read.
fn admission_request(
    attributes: &Attributes<'_>,
    matched: &ResourceType,
    user: &UserInfo,
) -> Value {
    let mut request = Map::new();
    request.insert("uid".into(), json!(""));
    request.insert("kind".into(), kind_of(matched, attributes.subresource));
    request.insert("resource".into(), resource_of(matched));
    if let Some(sub) = attributes.subresource {
        request.insert("subResource".into(), json!(sub));
    }
    request.insert(
        "requestKind".into(),
        kind_of(attributes.rt, attributes.subresource),
    );
    request.insert("requestResource".into(), resource_of(attributes.rt));
    if let Some(sub) = attributes.subresource {
        request.insert("requestSubResource".into(), json!(sub));
    }
    if !attributes.name.is_empty() {
        request.insert("name".into(), json!(attributes.name));
    }
    if !attributes.namespace.is_empty() {
        request.insert("namespace".into(), json!(attributes.namespace));
    }
    request.insert("operation".into(), json!(attributes.operation.as_str()));
    request.insert("userInfo".into(), crate::admission::user_info(user));
    request.insert("object".into(), Value::Null);
    request.insert("oldObject".into(), Value::Null);
    request.insert("dryRun".into(), json!(attributes.dry_run));
    let options = match attributes.operation {
        Operation::Create => Some("CreateOptions"),
        Operation::Update => Some("UpdateOptions"),
        Operation::Delete => Some("DeleteOptions"),
        Operation::Connect => None,
    };
    let options = match options {
        Some(kind) => {
            let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
            if attributes.dry_run {
                o["dryRun"] = json!(["All"]);
            }
            o
        }
        None => Value::Null,
    };
    request.insert("options".into(), options);
    Value::Object(request)
}

/// An object of `from`'s version as `to`'s version serves it (kube's conversion for
/// `matchPolicy: Equivalent`): through the stored form.
fn converted(obj: &Value, from: &ResourceType, to: &ResourceType) -> Value {
    let mut stored = obj.clone();
    if let Some(conversion) = from.conversion {
        (conversion.to_storage)(&mut stored);
    } else if let Some(custom) = &from.custom {
        stored["apiVersion"] = json!(format!("{}/{}", from.group, custom.storage_version));
    }
    if to.converts() || to.changes_on_read() {
        to.to_served(&mut stored);
    } else {
        stored["apiVersion"] = json!(to.api_version());
    }
    stored
}

/// The parts of a namespace expressions see as `namespaceObject` (kube's
/// `CreateNamespaceObject`).
pub(crate) fn namespace_object(namespace: &Value) -> Value {
    let mut metadata = Map::new();
    if let Some(md) = namespace.get("metadata").and_then(Value::as_object) {
        for field in [
            "name",
            "generateName",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "labels",
            "annotations",
            "finalizers",
        ] {
            if let Some(v) = md.get(field) {
                metadata.insert(field.to_string(), v.clone());
            }
        }
    }
    let mut out = json!({"metadata": metadata});
    for part in ["spec", "status"] {
        if let Some(v) = namespace.get(part) {
            out[part] = v.clone();
        }
    }
    out
}
