//! Kubernetes' authorization library (`kubernetes.authz`): `authorizer.group(g).resource(r)
//! .namespace(n).name(x).check(verb).allowed()`, `authorizer.path(p).check(verb)`,
//! `authorizer.serviceAccount(ns, name)`, and `authorizer.requestResource`.
//!
//! The values are opaque: each carries the user the checks are made as and the
//! [`Oracle`] that answers them. Expressions are evaluated synchronously, while a server's
//! authorizer is asynchronous, so an oracle answers from what it already knows and says
//! when it does not know yet ([`Oracle::decide`] returns `None`): the check then fails with
//! [`PENDING`], the oracle remembers what was asked, and its owner asks the authorizer and
//! evaluates again (CEL has no side effects, so a second evaluation sees the same values).

use std::collections::BTreeMap;
use std::sync::Arc;

use cel::common::types::{STRING_TYPE, Type as CelType};
use cel::common::value::CowVal;
use cel::{Env, ExecutionError, Value};

use crate::names;

/// The message of a check the oracle could not answer yet.
pub const PENDING: &str = "authorization check pending";

/// The CEL type names of the library's values.
pub(crate) const AUTHORIZER: &str = "kubernetes.authorization.Authorizer";
pub(crate) const PATH_CHECK: &str = "kubernetes.authorization.PathCheck";
pub(crate) const GROUP_CHECK: &str = "kubernetes.authorization.GroupCheck";
pub(crate) const RESOURCE_CHECK: &str = "kubernetes.authorization.ResourceCheck";
pub(crate) const DECISION: &str = "kubernetes.authorization.Decision";

/// Who a check is made as.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The uid.
    pub uid: String,
    /// The groups.
    pub groups: Vec<String>,
    /// Extra values.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a check asks about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A non-resource path (`authorizer.path('/healthz')`).
    Path(String),
    /// A resource (`authorizer.group('apps').resource('deployments')...`); the API version
    /// asked is always `*`.
    Resource {
        /// The API group.
        group: String,
        /// The resource (plural).
        resource: String,
        /// The subresource.
        subresource: String,
        /// The namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// `fieldSelector(...)`, as written.
        field_selector: String,
        /// `labelSelector(...)`, as written.
        label_selector: String,
    },
}

/// One authorization check an expression makes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Check {
    /// Who asks.
    pub user: User,
    /// The verb (`get`, `create`, ...; an HTTP method in lower case for paths).
    pub verb: String,
    /// What it is asked about.
    pub target: Target,
}

/// What the authorizer answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Decision {
    /// Whether it allows.
    pub allowed: bool,
    /// The reason it gave.
    pub reason: String,
    /// The error it failed with, if it did (`decision.errored()`).
    pub error: Option<String>,
}

/// Answers the checks of an evaluation; see the module documentation.
pub trait Oracle: Send + Sync + std::fmt::Debug {
    /// The answer to `check`, or `None` when it is not known yet (the oracle should then
    /// remember the check, for its owner to ask).
    fn decide(&self, check: &Check) -> Option<Decision>;
}

/// An `authorizer` value: checks made as `user`, answered by `oracle`.
#[derive(Debug, Clone)]
pub(crate) struct Authorizer {
    pub(crate) user: User,
    pub(crate) oracle: Arc<dyn Oracle>,
}

impl PartialEq for Authorizer {
    fn eq(&self, other: &Self) -> bool {
        self.user == other.user && Arc::ptr_eq(&self.oracle, &other.oracle)
    }
}

impl Eq for Authorizer {}

impl cel::objects::Opaque for Authorizer {
    fn runtime_type_name(&self) -> &str {
        AUTHORIZER
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PathCheck {
    authorizer: Authorizer,
    path: String,
}

impl cel::objects::Opaque for PathCheck {
    fn runtime_type_name(&self) -> &str {
        PATH_CHECK
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupCheck {
    authorizer: Authorizer,
    group: String,
}

impl cel::objects::Opaque for GroupCheck {
    fn runtime_type_name(&self) -> &str {
        GROUP_CHECK
    }
}

/// A `ResourceCheck`: what `check(verb)` will ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceCheck {
    pub(crate) authorizer: Authorizer,
    pub(crate) group: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) field_selector: String,
    pub(crate) label_selector: String,
}

impl cel::objects::Opaque for ResourceCheck {
    fn runtime_type_name(&self) -> &str {
        RESOURCE_CHECK
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct DecisionValue(Decision);

impl cel::objects::Opaque for DecisionValue {
    fn runtime_type_name(&self) -> &str {
        DECISION
    }
}

/// `authorizer` for `user`.
pub(crate) fn authorizer_value(user: User, oracle: Arc<dyn Oracle>) -> Value {
    Value::Opaque(Arc::new(Authorizer { user, oracle }))
}

/// `authorizer.requestResource`: a check of the request's own resource, subresource,
/// namespace and name.
pub(crate) fn request_resource_value(check: ResourceCheck) -> Value {
    Value::Opaque(Arc::new(check))
}

/// Registers the library's functions on `env`.
pub(crate) fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    let authorizer = || CelType::new_opaque_type(AUTHORIZER);
    let resource = || CelType::new_opaque_type(RESOURCE_CHECK);
    let s = || vec![STRING_TYPE];
    env.add_member_overload(
        "path",
        "authorizer_path",
        authorizer(),
        s(),
        authorizer_path,
    )?;
    env.add_member_overload(
        "group",
        "authorizer_group",
        authorizer(),
        s(),
        authorizer_group,
    )?;
    env.add_member_overload(
        "serviceAccount",
        "authorizer_serviceaccount",
        authorizer(),
        vec![STRING_TYPE, STRING_TYPE],
        authorizer_service_account,
    )?;
    env.add_member_overload(
        "resource",
        "groupcheck_resource",
        CelType::new_opaque_type(GROUP_CHECK),
        s(),
        group_check_resource,
    )?;
    let parts: [(&str, &str, cel::common::functions::Function); 5] = [
        ("subresource", "resourcecheck_subresource", set_subresource),
        ("namespace", "resourcecheck_namespace", set_namespace),
        ("name", "resourcecheck_name", set_name),
        (
            "fieldSelector",
            "authorizer_fieldselector",
            set_field_selector,
        ),
        (
            "labelSelector",
            "authorizer_labelselector",
            set_label_selector,
        ),
    ];
    for (name, id, function) in parts {
        env.add_member_overload(name, id, resource(), s(), function)?;
    }
    env.add_member_overload(
        "check",
        "pathcheck_check",
        CelType::new_opaque_type(PATH_CHECK),
        s(),
        path_check_check,
    )?;
    env.add_member_overload(
        "check",
        "resourcecheck_check",
        resource(),
        s(),
        resource_check_check,
    )?;
    let fields: [(&str, &str, cel::common::functions::Function); 4] = [
        ("errored", "decision_errored", decision_errored),
        ("error", "decision_error", decision_error),
        ("allowed", "decision_allowed", decision_allowed),
        ("reason", "decision_reason", decision_reason),
    ];
    for (name, id, function) in fields {
        env.add_member_overload(
            name,
            id,
            CelType::new_opaque_type(DECISION),
            vec![],
            function,
        )?;
    }
    Ok(())
}

fn value(arg: Option<&CowVal<'_, '_>>) -> Result<Value, ExecutionError> {
    let arg = arg.ok_or_else(ExecutionError::missing_argument_or_target)?;
    Value::try_from(arg.as_ref())
}

fn opaque<T: Clone + 'static>(
    arg: Option<&CowVal<'_, '_>>,
    function: &str,
) -> Result<T, ExecutionError> {
    match value(arg)? {
        Value::Opaque(o) => o
            .downcast_ref::<T>()
            .cloned()
            .ok_or_else(|| no_such_overload(function, o.runtime_type_name())),
        other => Err(no_such_overload(function, &other.type_of().to_string())),
    }
}

fn no_such_overload(function: &str, found: &str) -> ExecutionError {
    ExecutionError::no_such_overload(function, vec![found.to_string()])
}

fn string(arg: Option<&CowVal<'_, '_>>, function: &str) -> Result<String, ExecutionError> {
    match value(arg)? {
        Value::String(s) => Ok(s.to_string()),
        other => Err(no_such_overload(function, &other.type_of().to_string())),
    }
}

fn owned<'b, 'v>(value: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let val: Box<dyn cel::common::value::Val> = value.try_into()?;
    Ok(CowVal::Owned(val))
}

fn opaque_value<'b, 'v, T: cel::objects::Opaque>(v: T) -> Result<CowVal<'b, 'v>, ExecutionError> {
    owned(Value::Opaque(Arc::new(v)))
}

fn authorizer_path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let authorizer: Authorizer = opaque(args.first(), "path")?;
    let path = string(args.get(1), "path")?;
    if path.trim().is_empty() {
        return Err(ExecutionError::function_error(
            "path",
            "path must not be empty",
        ));
    }
    opaque_value(PathCheck { authorizer, path })
}

fn authorizer_group<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let authorizer: Authorizer = opaque(args.first(), "group")?;
    let group = string(args.get(1), "group")?;
    opaque_value(GroupCheck { authorizer, group })
}

fn authorizer_service_account<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let authorizer: Authorizer = opaque(args.first(), "serviceAccount")?;
    let namespace = string(args.get(1), "serviceAccount")?;
    let name = string(args.get(2), "serviceAccount")?;
    if !names::dns1123_subdomain_errors(&name).is_empty() {
        return Err(ExecutionError::function_error(
            "serviceAccount",
            "Invalid service account name",
        ));
    }
    if !names::dns1123_label_errors(&namespace).is_empty() {
        return Err(ExecutionError::function_error(
            "serviceAccount",
            "Invalid service account namespace",
        ));
    }
    // A ServiceAccount's user as its token authenticates it, without the uid it cannot know.
    let user = User {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{namespace}"),
        ],
        extra: BTreeMap::new(),
    };
    opaque_value(Authorizer {
        user,
        oracle: authorizer.oracle,
    })
}

fn group_check_resource<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let group: GroupCheck = opaque(args.first(), "resource")?;
    let resource = string(args.get(1), "resource")?;
    if resource.trim().is_empty() {
        return Err(ExecutionError::function_error(
            "resource",
            "resource must not be empty",
        ));
    }
    opaque_value(ResourceCheck {
        authorizer: group.authorizer,
        group: group.group,
        resource,
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        field_selector: String::new(),
        label_selector: String::new(),
    })
}

/// `subresource`, `namespace`, `name`, `fieldSelector` and `labelSelector`: the same check
/// with one part set (the interpreter does not say which function it calls, so each part
/// has its own).
macro_rules! setter {
    ($function:ident, $name:literal, $field:ident) => {
        fn $function<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
            let mut check: ResourceCheck = opaque(args.first(), $name)?;
            check.$field = string(args.get(1), $name)?;
            opaque_value(check)
        }
    };
}

setter!(set_subresource, "subresource", subresource);
setter!(set_namespace, "namespace", namespace);
setter!(set_name, "name", name);
setter!(set_field_selector, "fieldSelector", field_selector);
setter!(set_label_selector, "labelSelector", label_selector);

fn path_check_check<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let check: PathCheck = opaque(args.first(), "check")?;
    let verb = string(args.get(1), "check")?;
    decide(
        &check.authorizer,
        Check {
            user: check.authorizer.user.clone(),
            verb,
            target: Target::Path(check.path),
        },
    )
}

fn resource_check_check<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let check: ResourceCheck = opaque(args.first(), "check")?;
    let verb = string(args.get(1), "check")?;
    decide(
        &check.authorizer,
        Check {
            user: check.authorizer.user.clone(),
            verb,
            target: Target::Resource {
                group: check.group,
                resource: check.resource,
                subresource: check.subresource,
                namespace: check.namespace,
                name: check.name,
                field_selector: check.field_selector,
                label_selector: check.label_selector,
            },
        },
    )
}

fn decide<'b, 'v>(authorizer: &Authorizer, check: Check) -> Result<CowVal<'b, 'v>, ExecutionError> {
    match authorizer.oracle.decide(&check) {
        Some(decision) => opaque_value(DecisionValue(decision)),
        None => Err(ExecutionError::function_error("check", PENDING)),
    }
}

fn decision(args: &[CowVal<'_, '_>], function: &str) -> Result<Decision, ExecutionError> {
    opaque::<DecisionValue>(args.first(), function).map(|d| d.0)
}

fn decision_errored<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    owned(Value::Bool(decision(&args, "errored")?.error.is_some()))
}

fn decision_error<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let error = decision(&args, "error")?.error.unwrap_or_default();
    owned(Value::String(Arc::new(error)))
}

fn decision_allowed<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    owned(Value::Bool(decision(&args, "allowed")?.allowed))
}

fn decision_reason<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    owned(Value::String(Arc::new(decision(&args, "reason")?.reason)))
}
