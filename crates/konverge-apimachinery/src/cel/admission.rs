//! CEL for admission: the environment of ValidatingAdmissionPolicy expressions and of
//! admission webhooks' `matchConditions`, as kube-apiserver's `admission/plugin/cel` builds
//! it — compiling ([`Compiler`]) and evaluating ([`Activation`]).
//!
//! Expressions see `object`, `oldObject`, `request` (the admission request),
//! `namespaceObject`, and, when declared, `params`, `authorizer` and
//! `authorizer.requestResource` ([`Options`]), and a policy's `variables` (when the
//! compiler composes them: [`Compiler::with_variables`]). Objects are untyped (`dyn`), as
//! kube-apiserver declares them, unless a schema types them for type checking
//! ([`Compiler::typed`]).
//!
//! Variables are lazy: one is evaluated the first time an expression of an activation reads
//! it, once, and its error (if it fails) becomes the error of the expressions that read it.
//!
//! The `cel` crate counts no cost while it evaluates: before an expression runs, what it will
//! cost is counted as cel-go's runtime tracking counts it (only what evaluates: a branch not
//! taken or a short-circuited operand costs nothing, over the sizes of the values it meets,
//! variables evaluated for that), and held to kube-apiserver's per-call limit; the costs of
//! the expressions and variables an activation evaluates are taken from a budget the caller
//! keeps ([`RUNTIME_BUDGET`], [`MATCH_CONDITIONS_BUDGET`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cel::common::traits::Indexer;
use cel::common::types::{CelString, Type as CelType};
use cel::common::value::{CowVal, Val};
use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

use super::checker::{self, Checked};
use super::cost::{self, Range, Sizes};
use super::types::{Decl, DeclKind, Type};
use super::{check, convert, library};

pub use super::authz::{Check, Decision, Oracle, PENDING, Target, User};

/// What all expressions of one admission may cost together (`RuntimeCELCostBudget`).
pub const RUNTIME_BUDGET: u64 = cost::OBJECT_BUDGET;
/// What the `matchConditions` of one webhook or policy may cost together
/// (`RuntimeCELCostBudgetMatchConditions`).
pub const MATCH_CONDITIONS_BUDGET: u64 = 2_500_000;
/// What one expression may cost (`PerCallLimit`).
pub const PER_CALL_LIMIT: u64 = cost::CALL_LIMIT;

/// The error of an expression that would cost more than [`PER_CALL_LIMIT`].
const COST_LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

/// Which of the optional variables an expression may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Options {
    /// `params` (the policy has a `paramKind`).
    pub params: bool,
    /// `authorizer` and `authorizer.requestResource`.
    pub authorizer: bool,
}

/// What an expression must evaluate to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    /// A `bool` (validations, match conditions).
    Bool,
    /// A `string` (message expressions).
    String,
    /// A `string` or `null` (audit annotation values).
    StringOrNull,
    /// Anything (variables).
    Any,
}

/// How an expression failed to compile, as kube-apiserver's `cel.Error` types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The expression is wrong (`field.Invalid`).
    Invalid,
    /// Something is missing (`field.Required`).
    Required,
    /// The server failed (`field.InternalError`).
    Internal,
}

/// Why an expression does not compile: `compilation failed: ERROR: <input>:1:1: ...`, or
/// `must evaluate to bool but got int`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct CompileError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// kube-apiserver's words.
    pub detail: String,
}

impl CompileError {
    fn invalid(detail: String) -> CompileError {
        CompileError {
            kind: ErrorKind::Invalid,
            detail,
        }
    }
}

/// A compiled expression.
pub struct Expression {
    source: String,
    program: Program,
    checked: Checked,
    output: Type,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression")
            .field("source", &self.source)
            .field("output", &self.output.to_string())
            .finish()
    }
}

impl Expression {
    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Its type, as cel-go prints it (`bool`, `list(string)`, `dyn`).
    pub fn output_type(&self) -> String {
        cel_go_name(&self.output)
    }
}

/// The schema type of `object`/`oldObject` or `params`, for type checking
/// ([`Compiler::typed`]).
#[derive(Debug, Clone)]
pub struct SchemaType(Arc<Decl>);

impl SchemaType {
    /// The type of objects of the structural schema `schema` (references inlined), named
    /// `name` in messages; `None` when CEL cannot type it.
    pub fn of(schema: &Value, name: &str) -> Option<SchemaType> {
        Decl::of_schema(schema, name, true).map(SchemaType)
    }
}

/// One variable of a composition, compiled (or not) in its place.
struct Variable {
    name: String,
    compiled: Result<Arc<Expression>, CompileError>,
}

/// A policy's variables, in order, as compiled.
#[derive(Default)]
pub struct Composition {
    variables: Vec<Variable>,
}

impl std::fmt::Debug for Composition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.variables.iter().map(|v| &v.name))
            .finish()
    }
}

impl Composition {
    /// The variable named `name` (the last one of that name, as kube-apiserver keeps it).
    fn get(&self, name: &str) -> Option<&Variable> {
        self.variables.iter().rev().find(|v| v.name == name)
    }

    /// The type `variables` has: an object with a field per variable, typed as kube's
    /// composition environment types it (scalars, lists and maps keep their types, anything
    /// else, a variable that did not compile included, is `dyn`).
    fn decl(&self) -> Arc<Decl> {
        let mut fields = BTreeMap::new();
        for variable in &self.variables {
            let t = match &variable.compiled {
                Ok(e) => variable_type(&e.output),
                Err(_) => Type::Dyn,
            };
            fields.insert(variable.name.clone(), scalar(t));
        }
        Arc::new(Decl {
            name: "kubernetes.variables".to_string(),
            kind: DeclKind::Object(fields),
            max_elements: 0,
            min_size: 2,
        })
    }
}

/// `convertCelTypeToDeclType`.
fn variable_type(t: &Type) -> Type {
    match t {
        Type::Bool
        | Type::Bytes
        | Type::Double
        | Type::Duration
        | Type::Int
        | Type::Null
        | Type::String
        | Type::Timestamp
        | Type::Uint => t.clone(),
        Type::List(e) => Type::list(variable_type(e)),
        Type::Map(k, v) => Type::map(variable_type(k), variable_type(v)),
        _ => Type::Dyn,
    }
}

/// Compiles admission expressions (kube-apiserver's `CompositedCompiler`, or its plain
/// `Compiler` when `variables` is not declared).
#[derive(Debug, Default)]
pub struct Compiler {
    composition: Option<Composition>,
    object: Option<SchemaType>,
    params: Option<SchemaType>,
}

impl Compiler {
    /// A compiler of expressions that may not read `variables` (webhooks' match
    /// conditions; a policy without variables).
    pub fn new() -> Compiler {
        Compiler::default()
    }

    /// A compiler of a policy's expressions, which may read the variables added with
    /// [`add_variable`](Self::add_variable) before them.
    pub fn with_variables() -> Compiler {
        Compiler {
            composition: Some(Composition::default()),
            ..Compiler::default()
        }
    }

    /// The same compiler with `object`/`oldObject` and `params` typed by schemas (when
    /// given), for type checking.
    pub fn typed(mut self, object: Option<SchemaType>, params: Option<SchemaType>) -> Compiler {
        self.object = object;
        self.params = params;
        self
    }

    /// Compiles a variable and adds it, even when it does not compile (expressions that
    /// read it then fail when it is read); says why it does not compile.
    pub fn add_variable(
        &mut self,
        name: &str,
        expression: &str,
        options: Options,
    ) -> Result<(), CompileError> {
        let compiled = self
            .compile(expression, Returns::Any, options)
            .map(Arc::new);
        let result = compiled.as_ref().map(|_| ()).map_err(Clone::clone);
        self.composition
            .get_or_insert_with(Composition::default)
            .variables
            .push(Variable {
                name: name.to_string(),
                compiled,
            });
        result
    }

    /// The variables added so far, for [`Activation::new`].
    pub fn composition(self) -> Option<Arc<Composition>> {
        self.composition.map(Arc::new)
    }

    fn declarations(&self, options: Options) -> Vec<(&'static str, Type)> {
        let object = self.object.as_ref().map_or(Type::Dyn, |s| s.0.cel_type());
        let mut vars = vec![
            ("object", object.clone()),
            ("oldObject", object),
            ("namespaceObject", Type::Object(namespace_decl())),
            ("request", Type::Object(request_decl())),
        ];
        if options.params {
            let params = self.params.as_ref().map_or(Type::Dyn, |s| s.0.cel_type());
            vars.push(("params", params));
        }
        if options.authorizer {
            vars.push(("authorizer", Type::Opaque(super::authz::AUTHORIZER)));
            vars.push((
                "authorizer.requestResource",
                Type::Opaque(super::authz::RESOURCE_CHECK),
            ));
        }
        if let Some(composition) = &self.composition {
            vars.push(("variables", Type::Object(composition.decl())));
        }
        vars
    }

    fn parse_and_check(
        &self,
        expression: &str,
        options: Options,
    ) -> Result<(Program, Checked), String> {
        let env = library::env();
        let program = env
            .compile(expression)
            .map_err(|e| check::parse_errors(&e))?;
        let vars = self.declarations(options);
        let checked =
            checker::check(&program, &vars).map_err(|issues| check::issues(expression, &issues))?;
        Ok((program, checked))
    }

    /// Compiles `expression`, which must evaluate to what `returns` says.
    pub fn compile(
        &self,
        expression: &str,
        returns: Returns,
        options: Options,
    ) -> Result<Expression, CompileError> {
        let (program, checked) = self
            .parse_and_check(expression, options)
            .map_err(|issues| CompileError::invalid(format!("compilation failed: {issues}")))?;
        let output = checked.type_of(program.expression());
        let exact = |want: &Type| output.same(want) && !output.is_dyn_or_error();
        let fits = match returns {
            Returns::Bool => exact(&Type::Bool),
            Returns::String => exact(&Type::String),
            Returns::StringOrNull => exact(&Type::String) || exact(&Type::Null),
            Returns::Any => true,
        };
        if !fits {
            let want = match returns {
                Returns::Bool => "bool".to_string(),
                Returns::String => "string".to_string(),
                _ => "one of [string null_type]".to_string(),
            };
            return Err(CompileError::invalid(format!(
                "must evaluate to {want} but got {}",
                cel_go_name(&output)
            )));
        }
        Ok(Expression {
            source: expression.to_string(),
            program,
            checked,
            output,
        })
    }

    /// Type-checks `expression` (kube-apiserver's type checking of policies against the
    /// schemas of the types they match): the issues, as cel-go renders them, when there are.
    pub fn type_check(&self, expression: &str, options: Options) -> Result<(), String> {
        self.parse_and_check(expression, options).map(|_| ())
    }
}

/// A type's name as cel-go's `Type.String()` prints it.
fn cel_go_name(t: &Type) -> String {
    match t {
        Type::Null => "null_type".to_string(),
        other => other.to_string(),
    }
}

fn scalar(t: Type) -> Arc<Decl> {
    Arc::new(Decl {
        name: String::new(),
        kind: DeclKind::Scalar(t),
        max_elements: crate::cel::types::MAX_REQUEST_BYTES,
        min_size: 1,
    })
}

fn object_decl(name: &str, fields: Vec<(&str, Arc<Decl>)>) -> Arc<Decl> {
    Arc::new(Decl {
        name: name.to_string(),
        kind: DeclKind::Object(
            fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        ),
        max_elements: 0,
        min_size: 2,
    })
}

fn list_decl(elem: Arc<Decl>) -> Arc<Decl> {
    Arc::new(Decl {
        name: String::new(),
        kind: DeclKind::List(elem),
        max_elements: crate::cel::types::MAX_REQUEST_BYTES,
        min_size: 2,
    })
}

fn map_decl(value: Arc<Decl>) -> Arc<Decl> {
    Arc::new(Decl {
        name: String::new(),
        kind: DeclKind::Map(value),
        max_elements: crate::cel::types::MAX_REQUEST_BYTES,
        min_size: 2,
    })
}

/// `kubernetes.AdmissionRequest`.
fn request_decl() -> Arc<Decl> {
    static DECL: std::sync::OnceLock<Arc<Decl>> = std::sync::OnceLock::new();
    DECL.get_or_init(|| {
        let string = || scalar(Type::String);
        let gvk = || {
            object_decl(
                "kubernetes.GroupVersionKind",
                vec![
                    ("group", string()),
                    ("version", string()),
                    ("kind", string()),
                ],
            )
        };
        let gvr = || {
            object_decl(
                "kubernetes.GroupVersionResource",
                vec![
                    ("group", string()),
                    ("version", string()),
                    ("resource", string()),
                ],
            )
        };
        let user = object_decl(
            "kubernetes.UserInfo",
            vec![
                ("username", string()),
                ("uid", string()),
                ("groups", list_decl(string())),
                ("extra", map_decl(list_decl(string()))),
            ],
        );
        object_decl(
            "kubernetes.AdmissionRequest",
            vec![
                ("kind", gvk()),
                ("resource", gvr()),
                ("subResource", string()),
                ("requestKind", gvk()),
                ("requestResource", gvr()),
                ("requestSubResource", string()),
                ("name", string()),
                ("namespace", string()),
                ("operation", string()),
                ("userInfo", user),
                ("dryRun", scalar(Type::Bool)),
                ("options", scalar(Type::Dyn)),
            ],
        )
    })
    .clone()
}

/// `kubernetes.Namespace`: the parts of a namespace expressions see.
fn namespace_decl() -> Arc<Decl> {
    static DECL: std::sync::OnceLock<Arc<Decl>> = std::sync::OnceLock::new();
    DECL.get_or_init(|| {
        let string = || scalar(Type::String);
        let strings = || list_decl(string());
        let condition = object_decl(
            "kubernetes.NamespaceCondition",
            vec![
                ("status", string()),
                ("type", string()),
                ("lastTransitionTime", scalar(Type::Timestamp)),
                ("message", string()),
                ("reason", string()),
            ],
        );
        let metadata = object_decl(
            "kubernetes.NamespaceMetadata",
            vec![
                ("name", string()),
                ("generateName", string()),
                ("namespace", string()),
                ("labels", map_decl(string())),
                ("annotations", map_decl(string())),
                ("UID", string()),
                ("creationTimestamp", scalar(Type::Timestamp)),
                ("deletionGracePeriodSeconds", scalar(Type::Int)),
                ("deletionTimestamp", scalar(Type::Timestamp)),
                ("generation", scalar(Type::Int)),
                ("resourceVersion", string()),
                ("finalizers", strings()),
            ],
        );
        object_decl(
            "kubernetes.Namespace",
            vec![
                ("metadata", metadata),
                (
                    "spec",
                    object_decl("kubernetes.NamespaceSpec", vec![("finalizers", strings())]),
                ),
                (
                    "status",
                    object_decl(
                        "kubernetes.NamespaceStatus",
                        vec![("conditions", list_decl(condition)), ("phase", string())],
                    ),
                ),
            ],
        )
    })
    .clone()
}

/// What `authorizer.requestResource` checks: the request's resource.
#[derive(Debug, Clone, Default)]
pub struct RequestResource {
    /// The API group.
    pub group: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource.
    pub subresource: String,
    /// The namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

/// The `authorizer` of an evaluation.
#[derive(Debug, Clone)]
pub struct AuthorizerInput {
    /// Who makes the request (the checks are made as them).
    pub user: User,
    /// Answers the checks.
    pub oracle: Arc<dyn Oracle>,
    /// The request's resource, for `authorizer.requestResource`.
    pub request_resource: RequestResource,
}

/// What expressions are evaluated against, as JSON.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// `object` (null on a delete).
    pub object: &'a Value,
    /// `oldObject` (null on a create).
    pub old_object: &'a Value,
    /// `params` (null when there are none).
    pub params: Option<&'a Value>,
    /// `request`, as kube-apiserver's `AdmissionRequest` serializes.
    pub request: &'a Value,
    /// `namespaceObject` (null for cluster-scoped requests).
    pub namespace: Option<&'a Value>,
    /// `authorizer`, when expressions may use it.
    pub authorizer: Option<&'a AuthorizerInput>,
}

/// A value an expression evaluated to.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A `bool`.
    Bool(bool),
    /// A `string`.
    String(String),
    /// `null`.
    Null,
    /// Anything else, by its CEL type's name.
    Other(String),
}

/// What evaluating one expression gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluation {
    /// A value.
    Value(Output),
    /// An error, worded as kube-apiserver words it:
    /// `expression 'object.x' resulted in error: no such key: x`.
    Error(String),
}

/// The budget ran out: nothing more of the activation is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "validation failed due to running out of cost budget, no further validation rules will be run"
)]
pub struct OutOfBudget;

/// The values one set of expressions is evaluated against (kube-apiserver makes one per
/// `ForInput`): the variables and their lazily evaluated values.
#[derive(Debug, Clone)]
pub struct Activation {
    shared: Arc<Shared>,
}

struct Shared {
    env: Arc<Env>,
    roots: Vec<(&'static str, CelValue)>,
    composition: Option<Arc<Composition>>,
    memo: Mutex<HashMap<String, Result<CelValue, String>>>,
    /// What the variables evaluated since the last expression cost.
    variables_cost: AtomicU64,
    /// How large any value computed from the inputs can be, about: their characters and
    /// elements together.
    inputs_size: u64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activation")
            .field("composition", &self.composition)
            .finish_non_exhaustive()
    }
}

impl Activation {
    /// The activation of `input`, with the variables of `composition` (when expressions may
    /// read them).
    pub fn new(composition: Option<&Arc<Composition>>, input: &Input<'_>) -> Activation {
        let untyped = |v: &Value| convert::to_cel(v, &Value::Null, false);
        let mut roots = vec![
            ("object", untyped(input.object)),
            ("oldObject", untyped(input.old_object)),
            ("params", input.params.map_or(CelValue::Null, untyped)),
            ("request", untyped(input.request)),
            (
                "namespaceObject",
                input.namespace.map_or(CelValue::Null, untyped),
            ),
        ];
        if let Some(authorizer) = input.authorizer {
            roots.push((
                "authorizer",
                super::authz::authorizer_value(authorizer.user.clone(), authorizer.oracle.clone()),
            ));
            let r = &authorizer.request_resource;
            roots.push((
                "authorizer.requestResource",
                super::authz::request_resource_value(super::authz::ResourceCheck {
                    authorizer: super::authz::Authorizer {
                        user: authorizer.user.clone(),
                        oracle: authorizer.oracle.clone(),
                    },
                    group: r.group.clone(),
                    resource: r.resource.clone(),
                    subresource: r.subresource.clone(),
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    field_selector: String::new(),
                    label_selector: String::new(),
                }),
            ));
        }
        let inputs_size = [
            Some(input.object),
            Some(input.old_object),
            input.params,
            Some(input.request),
            input.namespace,
        ]
        .into_iter()
        .flatten()
        .map(json_size)
        .sum();
        Activation {
            shared: Arc::new(Shared {
                env: library::env(),
                roots,
                composition: composition.cloned(),
                memo: Mutex::new(HashMap::new()),
                variables_cost: AtomicU64::new(0),
                inputs_size,
            }),
        }
    }

    /// Evaluates `expression`, taking its cost (and that of the variables it made
    /// evaluate) from `budget`.
    pub fn evaluate(
        &self,
        expression: &Expression,
        budget: &mut u64,
    ) -> Result<Evaluation, OutOfBudget> {
        let (charged, result) = self.shared.run(expression);
        let variables = self.shared.variables_cost.swap(0, Ordering::AcqRel);
        if variables > *budget {
            return Err(OutOfBudget);
        }
        *budget -= variables;
        if charged > *budget {
            return Err(OutOfBudget);
        }
        *budget -= charged;
        Ok(match result {
            Ok(value) => Evaluation::Value(output(&value)),
            Err(message) => Evaluation::Error(format!(
                "expression '{}' resulted in error: {message}",
                expression.source
            )),
        })
    }
}

impl Shared {
    /// Runs an expression: what it cost, and its value or its error's message.
    fn run(self: &Arc<Self>, expression: &Expression) -> (u64, Result<CelValue, String>) {
        let sizes = RuntimeSizes { shared: self };
        let context = self.context();
        // Charged as it runs: only what evaluates, over the values' own sizes.
        let cost = cost::actual(
            &expression.program,
            &expression.checked,
            &sizes,
            &context,
            PER_CALL_LIMIT,
        )
        .max;
        if cost > PER_CALL_LIMIT {
            return (PER_CALL_LIMIT, Err(COST_LIMIT_EXCEEDED.to_string()));
        }
        let result = expression
            .program
            .execute(&context)
            .map_err(|e| super::execution_error(&e));
        (cost, result)
    }

    fn context(self: &Arc<Self>) -> Context<'static, 'static> {
        let mut context = Context::with_env(self.env.clone());
        for (name, value) in &self.roots {
            context.add_variable_from_value(*name, value.clone());
        }
        if self.composition.is_some() {
            context.add_variable_as_val("variables", Box::new(Variables(self.clone())));
        }
        context
    }

    fn root(&self, name: &str) -> Option<&CelValue> {
        self.roots.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The value of the variable `name`, evaluated on first use.
    fn variable(self: &Arc<Self>, name: &str) -> Option<Result<CelValue, String>> {
        if let Some(known) = self
            .memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Some(known.clone());
        }
        let variable = self.composition.as_ref()?.get(name)?;
        let result = match &variable.compiled {
            Err(e) => Err(format!(
                "composited variable \"{name}\" fails to compile: {}",
                e.detail
            )),
            Ok(expression) => {
                let (cost, result) = self.run(expression);
                self.variables_cost.fetch_add(cost, Ordering::AcqRel);
                result.map_err(|message| {
                    format!("composited variable \"{name}\" fails to evaluate: {message}")
                })
            }
        };
        self.memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), result.clone());
        Some(result)
    }
}

/// The CEL name of a value's type, as cel-go prints it.
fn type_name(value: &CelValue) -> String {
    match value {
        CelValue::Int(_) => "int".into(),
        CelValue::UInt(_) => "uint".into(),
        CelValue::Float(_) => "double".into(),
        CelValue::Bytes(_) => "bytes".into(),
        CelValue::List(_) => "list".into(),
        CelValue::Map(_) => "map".into(),
        CelValue::Timestamp(_) => "google.protobuf.Timestamp".into(),
        CelValue::Duration(_) => "google.protobuf.Duration".into(),
        CelValue::Bool(_) => "bool".into(),
        CelValue::String(_) => "string".into(),
        CelValue::Null => "null_type".into(),
        CelValue::Opaque(o) => o.runtime_type_name().to_string(),
        other => other.type_of().to_string(),
    }
}

fn output(value: &CelValue) -> Output {
    match value {
        CelValue::Bool(b) => Output::Bool(*b),
        CelValue::String(s) => Output::String(s.to_string()),
        CelValue::Null => Output::Null,
        other => Output::Other(type_name(other)),
    }
}

/// `variables`: its fields are evaluated when read.
struct Variables(Arc<Shared>);

impl std::fmt::Debug for Variables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("variables")
    }
}

static VARIABLES_TYPE: CelType = CelType::new_unspecified_type("kubernetes.variables");

impl Val for Variables {
    fn get_type(&self) -> &CelType {
        &VARIABLES_TYPE
    }

    fn cel_type() -> &'static CelType {
        &VARIABLES_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(Variables(self.0.clone()))
    }
}

impl Indexer for Variables {
    fn get<'b, 'v>(&'b self, field: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let name = field
            .downcast_ref::<CelString>()
            .map(CelString::inner)
            .ok_or_else(|| ExecutionError::no_such_key("?"))?;
        match self.0.variable(name) {
            None => Err(ExecutionError::no_such_key(name)),
            Some(Err(message)) => Err(ExecutionError::function_error("variables", message)),
            Some(Ok(value)) => {
                let val: Box<dyn Val> = value.try_into()?;
                Ok(CowVal::Owned(val))
            }
        }
    }

    fn steal<'v>(self: Box<Self>, field: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(field).map(CowVal::into_owned)
    }
}

/// Sizes of the values an activation holds: the largest value at each path, a variable's
/// being measured once it is evaluated (one that fails counts as empty: reading it fails).
struct RuntimeSizes<'a> {
    shared: &'a Arc<Shared>,
}

/// The characters and elements of a JSON value, all together.
fn json_size(value: &Value) -> u64 {
    match value {
        Value::String(s) => s.chars().count() as u64,
        Value::Array(items) => items.iter().map(json_size).sum::<u64>() + items.len() as u64,
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| k.chars().count() as u64 + json_size(v))
            .sum::<u64>()
            .saturating_add(map.len() as u64),
        // Numbers print in at most 24 characters.
        Value::Number(_) => 24,
        _ => 5,
    }
}

impl Sizes for RuntimeSizes<'_> {
    fn unknown(&self) -> Range {
        Range {
            min: 0,
            max: self.shared.inputs_size,
        }
    }

    fn size(&self, path: &[String]) -> Option<Range> {
        let (root, rest) = match path.first().map(String::as_str)? {
            "variables" => {
                let name = path.get(1)?;
                match self.shared.variable(name)? {
                    Ok(value) => (value, &path[2..]),
                    Err(_) => return Some(Range::exactly(0)),
                }
            }
            name => (self.shared.root(name)?.clone(), &path[1..]),
        };
        let mut values = vec![root];
        for segment in rest {
            values = values.into_iter().flat_map(|v| step(&v, segment)).collect();
        }
        let max = values.iter().map(measure_or_zero).max().unwrap_or(0);
        Some(Range { min: 0, max })
    }
}

fn step(value: &CelValue, segment: &str) -> Vec<CelValue> {
    match (segment, value) {
        ("@items" | "@values", CelValue::List(items)) => items.iter().cloned().collect(),
        ("@items" | "@values", CelValue::Map(map)) => map.map.values().cloned().collect(),
        ("@keys", CelValue::Map(map)) => map
            .map
            .keys()
            .map(|k| match k {
                cel::objects::Key::String(s) => CelValue::String(s.clone()),
                cel::objects::Key::Int(i) => CelValue::Int(*i),
                cel::objects::Key::Uint(u) => CelValue::UInt(*u),
                cel::objects::Key::Bool(b) => CelValue::Bool(*b),
            })
            .collect(),
        (name, CelValue::Map(map)) => map
            .map
            .get(&cel::objects::Key::String(Arc::new(name.to_string())))
            .cloned()
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

/// A value's size, nothing for a value without one (what the largest of several is over).
fn measure_or_zero(value: &CelValue) -> u64 {
    cost::measure(value).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Default)]
    struct Answers {
        allowed: Vec<String>,
        asked: Mutex<Vec<Check>>,
    }

    impl Oracle for Answers {
        fn decide(&self, check: &Check) -> Option<Decision> {
            self.asked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(check.clone());
            Some(Decision {
                allowed: self.allowed.contains(&check.verb),
                reason: "because".into(),
                error: None,
            })
        }
    }

    fn eval(compiler: Compiler, source: &str, input: &Input<'_>) -> Evaluation {
        let options = Options {
            params: true,
            authorizer: true,
        };
        let expression = compiler
            .compile(source, Returns::Any, options)
            .expect("compiles");
        let composition = compiler.composition();
        let activation = Activation::new(composition.as_ref(), input);
        let mut budget = RUNTIME_BUDGET;
        activation
            .evaluate(&expression, &mut budget)
            .expect("in budget")
    }

    fn input<'a>(object: &'a Value, request: &'a Value) -> Input<'a> {
        Input {
            object,
            old_object: &Value::Null,
            params: None,
            request,
            namespace: None,
            authorizer: None,
        }
    }

    #[test]
    fn expressions_read_the_request_and_the_object() {
        let object =
            json!({"metadata": {"name": "x", "labels": {"app": "web"}}, "spec": {"replicas": 3}});
        let request = json!({"operation": "CREATE", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"}});
        let i = input(&object, &request);
        assert_eq!(
            eval(
                Compiler::new(),
                "object.spec.replicas > 2 && request.kind.kind == 'Deployment' && object.metadata.labels['app'] == 'web'",
                &i
            ),
            Evaluation::Value(Output::Bool(true))
        );
        // A computed string is as large as the inputs at most: concatenating it is cheap.
        assert_eq!(
            eval(
                Compiler::new(),
                "'replicas: ' + string(object.spec.replicas)",
                &i
            ),
            Evaluation::Value(Output::String("replicas: 3".into()))
        );
        assert_eq!(
            eval(Compiler::new(), "object.spec.missing == 1", &i),
            Evaluation::Error(
                "expression 'object.spec.missing == 1' resulted in error: no such key: missing"
                    .into()
            )
        );
    }

    #[test]
    fn compile_errors_are_worded_as_kube_words_them() {
        let options = Options::default();
        let e = Compiler::new()
            .compile("object.x + ", Returns::Bool, options)
            .unwrap_err();
        assert!(
            e.detail
                .starts_with("compilation failed: ERROR: <input>:1:12: Syntax error"),
            "{e}"
        );
        let e = Compiler::new()
            .compile("1 + 2", Returns::Bool, options)
            .unwrap_err();
        assert_eq!(e.detail, "must evaluate to bool but got int");
        let e = Compiler::new()
            .compile("params.x", Returns::Any, options)
            .unwrap_err();
        assert_eq!(
            e.detail,
            "compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')\n | params.x\n | ^"
        );
        let e = Compiler::new()
            .compile("request.kind.foo == 'x'", Returns::Bool, options)
            .unwrap_err();
        assert!(e.detail.contains("undefined field 'foo'"), "{e}");
        let e = Compiler::new()
            .compile("1", Returns::StringOrNull, options)
            .unwrap_err();
        assert_eq!(
            e.detail,
            "must evaluate to one of [string null_type] but got int"
        );
        let e = Compiler::new()
            .compile("variables.x", Returns::Any, options)
            .unwrap_err();
        assert!(
            e.detail.contains("undeclared reference to 'variables'"),
            "{e}"
        );
    }

    #[test]
    fn variables_are_lazy_and_composed() {
        let options = Options::default();
        let mut compiler = Compiler::with_variables();
        compiler
            .add_variable("name", "object.metadata.name", options)
            .expect("compiles");
        compiler
            .add_variable("broken", "object.nope", options)
            .expect("compiles");
        compiler
            .add_variable("shout", "variables.name.upperAscii()", options)
            .expect("compiles");
        let e = compiler
            .compile("variables.later == 1", Returns::Bool, options)
            .unwrap_err();
        assert!(e.detail.contains("undefined field 'later'"), "{e}");
        let object = json!({"metadata": {"name": "web"}});
        let request = json!({});
        let i = input(&object, &request);
        let shout = compiler
            .compile("variables.shout == 'WEB'", Returns::Bool, options)
            .expect("compiles");
        let broken = compiler
            .compile("variables.broken == 1", Returns::Bool, options)
            .expect("compiles");
        let composition = compiler.composition();
        let activation = Activation::new(composition.as_ref(), &i);
        let mut budget = RUNTIME_BUDGET;
        assert_eq!(
            activation.evaluate(&shout, &mut budget),
            Ok(Evaluation::Value(Output::Bool(true)))
        );
        assert_eq!(
            activation.evaluate(&broken, &mut budget),
            Ok(Evaluation::Error(
                "expression 'variables.broken == 1' resulted in error: composited variable \"broken\" fails to evaluate: no such key: nope".into()
            ))
        );
    }

    #[test]
    fn the_authorizer_checks_through_the_oracle() {
        let oracle = Arc::new(Answers {
            allowed: vec!["get".into()],
            ..Answers::default()
        });
        let authorizer = AuthorizerInput {
            user: User {
                name: "alice".into(),
                ..User::default()
            },
            oracle: oracle.clone(),
            request_resource: RequestResource {
                group: "apps".into(),
                resource: "deployments".into(),
                namespace: "default".into(),
                name: "web".into(),
                ..RequestResource::default()
            },
        };
        let object = json!({});
        let request = json!({});
        let mut i = input(&object, &request);
        i.authorizer = Some(&authorizer);
        assert_eq!(
            eval(
                Compiler::new(),
                "authorizer.group('').resource('pods').namespace('default').name('p').check('get').allowed() && !authorizer.requestResource.check('delete').allowed()",
                &i
            ),
            Evaluation::Value(Output::Bool(true))
        );
        assert_eq!(
            eval(
                Compiler::new(),
                "authorizer.serviceAccount('default', 'robot').path('/healthz').check('get').reason()",
                &i
            ),
            Evaluation::Value(Output::String("because".into()))
        );
        let asked = oracle
            .asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        assert_eq!(asked.len(), 3);
        assert_eq!(
            asked[1].target,
            Target::Resource {
                group: "apps".into(),
                resource: "deployments".into(),
                subresource: String::new(),
                namespace: "default".into(),
                name: "web".into(),
                field_selector: String::new(),
                label_selector: String::new(),
            }
        );
        assert_eq!(asked[2].user.name, "system:serviceaccount:default:robot");
        assert_eq!(asked[2].target, Target::Path("/healthz".into()));
    }

    #[test]
    fn costs_are_limited_per_call_and_budgeted() {
        let items: Vec<Value> = (0..2000).map(|i| json!(format!("item-{i}"))).collect();
        let object = json!({"items": items});
        let request = json!({});
        let i = input(&object, &request);
        let expensive = "object.items.all(a, object.items.all(b, a.size() + b.size() > 0))";
        assert_eq!(
            eval(Compiler::new(), expensive, &i),
            Evaluation::Error(format!(
                "expression '{expensive}' resulted in error: operation cancelled: actual cost limit exceeded"
            ))
        );
        // Charged as it runs: behind a condition that does not take it, it costs nothing.
        let guarded = format!("!has(object.spec) ? true : {expensive}");
        assert_eq!(
            eval(Compiler::new(), &guarded, &i),
            Evaluation::Value(Output::Bool(true))
        );
        let expression = Compiler::new()
            .compile(
                "object.items.all(a, a.size() > 0)",
                Returns::Bool,
                Options::default(),
            )
            .expect("compiles");
        let activation = Activation::new(None, &i);
        let mut budget = 10;
        assert_eq!(
            activation.evaluate(&expression, &mut budget),
            Err(OutOfBudget)
        );
    }

    #[test]
    fn schemas_type_objects_for_type_checking() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}});
        let typed = Compiler::new().typed(SchemaType::of(&schema, "Deployment"), None);
        assert_eq!(
            typed.type_check("object.spec.replicas > 1", Options::default()),
            Ok(())
        );
        assert_eq!(
            typed.type_check("object.spec.replica > 1", Options::default()),
            Err("ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica > 1\n | ...........^".to_string())
        );
    }
}
