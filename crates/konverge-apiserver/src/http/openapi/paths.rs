//! `paths` of one group-version document: the operations of each served resource, with the
//! query parameters kube-apiserver declares for them.
//!
//! Clients read more than documentation here:
//!
//! - `kubectl apply`/`create`/`replace` (default `--validate=strict`) look for a `PATCH`
//!   operation whose `x-kubernetes-group-version-kind` is the object's kind and which declares
//!   the `fieldValidation` query parameter; if there is one, validation is left to the server
//!   (`fieldValidation=Strict`), otherwise kubectl validates against OpenAPI v2 itself
//!   (k8s.io/cli-runtime `pkg/resource/query_param_verifier_v3.go`).
//! - `kubectl apply` (client-side) builds strategic merge patches from the v3 schemas when
//!   that `PATCH` operation accepts `application/strategic-merge-patch+json`
//!   (k8s.io/kubectl `pkg/cmd/apply/patcher.go`, `gvkSupportsPatchOpenAPIV3`).
//! - `kubectl explain` finds a resource's kind from the `x-kubernetes-group-version-kind` of
//!   the operations on its collection or item path (`pkg/explain/v2/templates/plaintext.tmpl`).
//!
//! Every operation therefore carries `x-kubernetes-group-version-kind` (a single object) and
//! `x-kubernetes-action`, like kube-apiserver's.

use serde_json::{Map, Value, json};

use super::schemas::{CommonSchemas, ResourceSchemas, gvk, reference};

/// Whether the server accepts server-side apply patches (`application/apply-patch+yaml`);
/// the document declares them (and the `force` parameter) only if so.
const SERVER_SIDE_APPLY: bool = true;

const PRETTY: &str = "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).";
const DRY_RUN: &str = "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed";
const FIELD_MANAGER: &str = "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.";
const FIELD_MANAGER_PATCH: &str = "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint. This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch).";
const FIELD_VALIDATION: &str = "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.";
const FORCE: &str = "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.";
const ALLOW_WATCH_BOOKMARKS: &str = "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.";
const CONTINUE: &str = "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize. If the specified continue value is no longer valid whether due to expiration (generally five to fifteen minutes) or a configuration change on the server, the server will respond with a 410 ResourceExpired error together with a continue token. If the client needs a consistent list, it must restart their list without the continue field. Otherwise, the client may send another list request with the token received with the 410 error, the server will respond with a list starting from the next key, but from the latest snapshot, which is inconsistent from the previous list results - objects that are created, modified, or deleted after the first list request will be included in the response, as long as their keys are after the \"next key\".\n\nThis field is not supported when watch is true. Clients may start a watch from the last resourceVersion value returned by the server and not miss any modifications.";
const FIELD_SELECTOR: &str =
    "A selector to restrict the list of returned objects by their fields. Defaults to everything.";
const LABEL_SELECTOR: &str =
    "A selector to restrict the list of returned objects by their labels. Defaults to everything.";
const LIMIT: &str = "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results. Setting a limit may return fewer than the requested amount of items (up to zero items) in the event all requested objects are filtered out and clients should only use the presence of the continue field to determine whether more results are available. Servers may choose not to support the limit argument and will return all of the available results. If limit is specified and the continue field is empty, clients may assume that no more results are available. This field is not supported if watch is true.\n\nThe server guarantees that the objects returned when using continue will be identical to issuing a single list call without a limit - that is, no objects created, modified, or deleted after the first request is issued will be included in any subsequent continued requests. This is sometimes referred to as a consistent snapshot, and ensures that a client that is using limit to receive smaller chunks of a very large result can ensure they see all possible objects. If objects are updated during a chunked list the version of the object that was present at the time the first list result was calculated is returned.";
const RESOURCE_VERSION: &str = "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset";
const RESOURCE_VERSION_MATCH: &str = "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset";
const SEND_INITIAL_EVENTS: &str = "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection. Once all such events have been sent, a synthetic \"Bookmark\" event  will be sent. The bookmark will report the ResourceVersion (RV) corresponding to the set of objects, and be marked with `\"k8s.io/initial-events-end\": \"true\"` annotation. Afterwards, the watch stream will proceed as usual, sending watch events corresponding to changes (subsequent to the RV) to objects watched.\n\nWhen `sendInitialEvents` option is set, we require `resourceVersionMatch` option to also be set. The semantic of the watch request is as following: - `resourceVersionMatch` = NotOlderThan\n  is interpreted as \"data at least as new as the provided `resourceVersion`\"\n  and the bookmark event is send when the state is synced\n  to a `resourceVersion` at least as fresh as the one provided by the ListOptions.\n  If `resourceVersion` is unset, this is interpreted as \"consistent read\" and the\n  bookmark event is send when the state is synced at least to the moment\n  when request started being processed.\n- `resourceVersionMatch` set to any other value or unset\n  Invalid error is returned.\n\nDefaults to true if `resourceVersion=\"\"` or `resourceVersion=\"0\"` (for backward compatibility reasons) and to false otherwise.";
const TIMEOUT_SECONDS: &str = "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.";
const WATCH: &str = "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.";
const GRACE_PERIOD_SECONDS: &str = "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.";
const ORPHAN_DEPENDENTS: &str = "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.";
const PROPAGATION_POLICY: &str = "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.";
const IGNORE_STORE_READ_ERROR: &str = "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow fails with a corrupt object error. A resource is considered corrupt if it can not be retrieved from the underlying storage successfully because of a) its data can not be transformed e.g. decryption failure, or b) it fails to decode into an object. NOTE: unsafe deletion ignores finalizer constraints, skips precondition checks, and removes the object from the storage. WARNING: This may potentially break the cluster if the workload associated with the resource being unsafe-deleted relies on normal deletion flow. Use only if you REALLY know what you are doing. The default value is false, and the user must opt in to enable it";
const NAMESPACE: &str = "object name and auth scope, such as for teams and projects";
const WATCH_SINGLE_DEPRECATION: &str = "deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter.";
const WATCH_LIST_DEPRECATION: &str =
    "deprecated: use the 'watch' parameter with a list operation instead.";

fn query(name: &str, description: &str, type_: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": { "type": type_, "uniqueItems": true },
    })
}

fn path_parameter(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": { "type": "string", "uniqueItems": true },
    })
}

fn list_parameters() -> Vec<Value> {
    vec![
        query("allowWatchBookmarks", ALLOW_WATCH_BOOKMARKS, "boolean"),
        query("continue", CONTINUE, "string"),
        query("fieldSelector", FIELD_SELECTOR, "string"),
        query("labelSelector", LABEL_SELECTOR, "string"),
        query("limit", LIMIT, "integer"),
        query("resourceVersion", RESOURCE_VERSION, "string"),
        query("resourceVersionMatch", RESOURCE_VERSION_MATCH, "string"),
        query("sendInitialEvents", SEND_INITIAL_EVENTS, "boolean"),
        query("timeoutSeconds", TIMEOUT_SECONDS, "integer"),
        query("watch", WATCH, "boolean"),
    ]
}

fn write_parameters() -> Vec<Value> {
    vec![
        query("dryRun", DRY_RUN, "string"),
        query("fieldManager", FIELD_MANAGER, "string"),
        query("fieldValidation", FIELD_VALIDATION, "string"),
    ]
}

fn patch_parameters() -> Vec<Value> {
    let mut parameters = vec![
        query("dryRun", DRY_RUN, "string"),
        query("fieldManager", FIELD_MANAGER_PATCH, "string"),
        query("fieldValidation", FIELD_VALIDATION, "string"),
    ];
    if SERVER_SIDE_APPLY {
        parameters.push(query("force", FORCE, "boolean"));
    }
    parameters
}

fn delete_parameters() -> Vec<Value> {
    vec![
        query("dryRun", DRY_RUN, "string"),
        query("gracePeriodSeconds", GRACE_PERIOD_SECONDS, "integer"),
        query(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            IGNORE_STORE_READ_ERROR,
            "boolean",
        ),
        query("orphanDependents", ORPHAN_DEPENDENTS, "boolean"),
        query("propagationPolicy", PROPAGATION_POLICY, "string"),
    ]
}

fn delete_collection_parameters() -> Vec<Value> {
    vec![
        query("continue", CONTINUE, "string"),
        query("dryRun", DRY_RUN, "string"),
        query("fieldSelector", FIELD_SELECTOR, "string"),
        query("gracePeriodSeconds", GRACE_PERIOD_SECONDS, "integer"),
        query(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            IGNORE_STORE_READ_ERROR,
            "boolean",
        ),
        query("labelSelector", LABEL_SELECTOR, "string"),
        query("limit", LIMIT, "integer"),
        query("orphanDependents", ORPHAN_DEPENDENTS, "boolean"),
        query("propagationPolicy", PROPAGATION_POLICY, "string"),
        query("resourceVersion", RESOURCE_VERSION, "string"),
        query("resourceVersionMatch", RESOURCE_VERSION_MATCH, "string"),
        query("sendInitialEvents", SEND_INITIAL_EVENTS, "boolean"),
        query("timeoutSeconds", TIMEOUT_SECONDS, "integer"),
    ]
}

/// A response whose body has `schema`, in each of `content_types`.
fn response(description: &str, schema: &str, content_types: &[&str]) -> Value {
    let content: Map<String, Value> = content_types
        .iter()
        .map(|ct| (ct.to_string(), json!({ "schema": reference(schema) })))
        .collect();
    json!({ "description": description, "content": content })
}

const JSON: &[&str] = &["application/json"];
const STREAM: &[&str] = &["application/json", "application/json;stream=watch"];

fn responses(codes: &[(&str, &str)], schema: &str, content_types: &[&str]) -> Value {
    let mut out = Map::new();
    for (code, description) in codes {
        out.insert(
            code.to_string(),
            response(description, schema, content_types),
        );
    }
    out.insert("401".into(), json!({ "description": "Unauthorized" }));
    Value::Object(out)
}

fn body(schema: &str, content_types: &[&str]) -> Value {
    let content: Map<String, Value> = content_types
        .iter()
        .map(|ct| (ct.to_string(), json!({ "schema": reference(schema) })))
        .collect();
    json!({ "content": content, "required": true })
}

/// The fixed parts every operation of one resource shares.
struct Operations<'a> {
    tag: String,
    /// `AppsV1`, `CoreV1`, `RbacAuthorizationV1`: the middle of operation ids.
    id_infix: String,
    resource: &'a ResourceSchemas,
    common: &'a CommonSchemas,
    patch_types: Vec<&'static str>,
}

/// One operation, before it is written out.
struct Op {
    /// `x-kubernetes-action`.
    action: &'static str,
    id: String,
    description: String,
    parameters: Vec<Value>,
    request: Option<Value>,
    responses: Value,
    /// `x-kubernetes-group-version-kind`.
    gvk: Value,
}

impl Operations<'_> {
    fn operation(&self, op: Op) -> Value {
        let mut out = json!({
            "tags": [self.tag],
            "description": op.description,
            "operationId": op.id,
            "responses": op.responses,
            "x-kubernetes-action": op.action,
            "x-kubernetes-group-version-kind": op.gvk,
        });
        if !op.parameters.is_empty() {
            out["parameters"] = Value::Array(op.parameters);
        }
        if let Some(request) = op.request {
            out["requestBody"] = request;
        }
        out
    }

    fn kind_gvk(&self) -> Value {
        let rt = &self.resource.rt;
        gvk(&rt.group, &rt.version, &rt.kind)
    }

    fn id(&self, verb: &str, namespaced: bool, suffix: &str) -> String {
        let scope = if namespaced { "Namespaced" } else { "" };
        format!(
            "{verb}{}{scope}{}{suffix}",
            self.id_infix, self.resource.rt.kind
        )
    }

    fn list(&self, namespaced: bool, all_namespaces: bool) -> Value {
        let kind = &self.resource.rt.kind;
        let id = if all_namespaces {
            self.id("list", false, "ForAllNamespaces")
        } else {
            self.id("list", namespaced, "")
        };
        self.operation(Op {
            action: "list",
            id,
            description: format!("list or watch objects of kind {kind}"),
            parameters: list_parameters(),
            request: None,
            responses: responses(&[("200", "OK")], &self.resource.list, STREAM),
            gvk: self.kind_gvk(),
        })
    }

    fn create(&self, namespaced: bool) -> Value {
        let kind = &self.resource.rt.kind;
        self.operation(Op {
            action: "post",
            id: self.id("create", namespaced, ""),
            description: format!("create a {kind}"),
            parameters: write_parameters(),
            request: Some(body(&self.resource.kind, &["*/*"])),
            responses: responses(
                &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
                &self.resource.kind,
                JSON,
            ),
            gvk: self.kind_gvk(),
        })
    }

    fn delete_collection(&self, namespaced: bool) -> Value {
        let kind = &self.resource.rt.kind;
        self.operation(Op {
            action: "deletecollection",
            id: format!(
                "delete{}Collection{}{kind}",
                self.id_infix,
                if namespaced { "Namespaced" } else { "" }
            ),
            description: format!("delete collection of {kind}"),
            parameters: delete_collection_parameters(),
            request: Some(body(&self.common.delete_options, &["*/*"])),
            responses: responses(&[("200", "OK")], &self.common.status, JSON),
            gvk: self.kind_gvk(),
        })
    }

    fn read(&self, namespaced: bool, sub: &Sub) -> Value {
        let kind = &self.resource.rt.kind;
        self.operation(Op {
            action: "get",
            id: self.id("read", namespaced, sub.suffix),
            description: format!("read {}the specified {kind}", sub.what),
            parameters: Vec::new(),
            request: None,
            responses: responses(&[("200", "OK")], &sub.schema, JSON),
            gvk: sub.gvk.clone(),
        })
    }

    fn replace(&self, namespaced: bool, sub: &Sub) -> Value {
        let kind = &self.resource.rt.kind;
        self.operation(Op {
            action: "put",
            id: self.id("replace", namespaced, sub.suffix),
            description: format!("replace {}the specified {kind}", sub.what),
            parameters: write_parameters(),
            request: Some(body(&sub.schema, &["*/*"])),
            responses: responses(&[("200", "OK"), ("201", "Created")], &sub.schema, JSON),
            gvk: sub.gvk.clone(),
        })
    }

    fn patch(&self, namespaced: bool, sub: &Sub) -> Value {
        let kind = &self.resource.rt.kind;
        self.operation(Op {
            action: "patch",
            id: self.id("patch", namespaced, sub.suffix),
            description: format!("partially update {}the specified {kind}", sub.what),
            parameters: patch_parameters(),
            request: Some(body(&self.common.patch, &self.patch_types)),
            responses: responses(&[("200", "OK"), ("201", "Created")], &sub.schema, JSON),
            gvk: sub.gvk.clone(),
        })
    }

    fn delete(&self, namespaced: bool) -> Value {
        let kind = &self.resource.rt.kind;
        self.operation(Op {
            action: "delete",
            id: self.id("delete", namespaced, ""),
            description: format!("delete a {kind}"),
            parameters: delete_parameters(),
            request: Some(body(&self.common.delete_options, &["*/*"])),
            responses: responses(
                &[("200", "OK"), ("202", "Accepted")],
                &self.common.status,
                JSON,
            ),
            gvk: self.kind_gvk(),
        })
    }

    fn watch(&self, namespaced: bool) -> Value {
        let kind = &self.resource.rt.kind;
        self.operation(Op {
            action: "watch",
            id: self.id("watch", namespaced, ""),
            description: format!(
                "watch changes to an object of kind {kind}. {WATCH_SINGLE_DEPRECATION}"
            ),
            parameters: Vec::new(),
            request: None,
            responses: responses(&[("200", "OK")], &self.common.watch_event, STREAM),
            gvk: self.kind_gvk(),
        })
    }

    fn watch_list(&self, namespaced: bool, all_namespaces: bool) -> Value {
        let kind = &self.resource.rt.kind;
        let id = if all_namespaces {
            self.id("watch", false, "ListForAllNamespaces")
        } else {
            self.id("watch", namespaced, "List")
        };
        self.operation(Op {
            action: "watchlist",
            id,
            description: format!(
                "watch individual changes to a list of {kind}. {WATCH_LIST_DEPRECATION}"
            ),
            parameters: Vec::new(),
            request: None,
            responses: responses(&[("200", "OK")], &self.common.watch_event, STREAM),
            gvk: self.kind_gvk(),
        })
    }
}

/// The object itself or one of its subresources, as read/replace/patch operations see it.
struct Sub {
    /// `""`, `"Status"`, `"Scale"`: the end of operation ids.
    suffix: &'static str,
    /// `""`, `"status of "`, `"scale of "`: in descriptions.
    what: &'static str,
    /// The schema of the body.
    schema: String,
    /// The kind of the body.
    gvk: Value,
}

/// `apps` → `Apps`, `rbac.authorization.k8s.io` → `RbacAuthorization`, `` → `Core`;
/// `v1beta1` → `V1beta1`.
fn id_infix(group: &str, version: &str) -> String {
    let group = group.strip_suffix(".k8s.io").unwrap_or(group);
    let mut out = String::new();
    if group.is_empty() {
        out.push_str("Core");
    }
    for part in group.split(['.', '-']) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    let mut chars = version.chars();
    if let Some(first) = chars.next() {
        out.extend(first.to_uppercase());
        out.push_str(chars.as_str());
    }
    out
}

/// `apps_v1`, `core_v1`, `rbacAuthorization_v1`: the operations' tag.
fn tag(group: &str, version: &str) -> String {
    let infix = id_infix(group, "");
    let mut chars = infix.chars();
    let lower = match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect::<String>(),
        None => String::new(),
    };
    format!("{lower}_{version}")
}

fn add(
    paths: &mut Map<String, Value>,
    path: String,
    operations: Vec<(&str, Value)>,
    parameters: Vec<Value>,
) {
    let mut item = Map::new();
    for (method, op) in operations {
        item.insert(method.to_string(), op);
    }
    item.insert("parameters".into(), Value::Array(parameters));
    paths.insert(path, Value::Object(item));
}

/// The `paths` of the group-version `group`/`version` (`prefix` is `/api/v1` or
/// `/apis/<group>/<version>`).
pub(crate) fn build(
    prefix: &str,
    group: &str,
    version: &str,
    resources: &[ResourceSchemas],
    common: &CommonSchemas,
) -> Map<String, Value> {
    let mut paths = Map::new();
    let tag = tag(group, version);
    let infix = id_infix(group, version);

    paths.insert(
        format!("{prefix}/"),
        json!({
            "get": {
                "tags": [tag],
                "description": "get available resources",
                "operationId": format!("get{infix}APIResources"),
                "responses": responses(&[("200", "OK")], &common.api_resource_list, JSON),
            }
        }),
    );

    for resource in resources {
        let rt = &resource.rt;
        let mut patch_types = vec![
            "application/json-patch+json",
            "application/merge-patch+json",
        ];
        if rt.codec.is_some() {
            patch_types.push("application/strategic-merge-patch+json");
        }
        if SERVER_SIDE_APPLY {
            patch_types.insert(0, "application/apply-patch+yaml");
        }
        let ops = Operations {
            tag: tag.clone(),
            id_infix: infix.clone(),
            resource,
            common,
            patch_types,
        };
        let ns = rt.namespaced;
        let plural = &rt.plural;
        let pretty = || query("pretty", PRETTY, "string");
        let namespace = || path_parameter("namespace", NAMESPACE);
        let name = || path_parameter("name", &format!("name of the {}", rt.kind));
        let scope = if ns {
            format!("{prefix}/namespaces/{{namespace}}")
        } else {
            prefix.to_string()
        };
        let scope_parameters = || {
            if ns {
                vec![namespace(), pretty()]
            } else {
                vec![pretty()]
            }
        };
        let item_parameters = || {
            if ns {
                vec![name(), namespace(), pretty()]
            } else {
                vec![name(), pretty()]
            }
        };
        let object = Sub {
            suffix: "",
            what: "",
            schema: resource.kind.clone(),
            gvk: ops.kind_gvk(),
        };

        add(
            &mut paths,
            format!("{scope}/{plural}"),
            vec![
                ("get", ops.list(ns, false)),
                ("post", ops.create(ns)),
                ("delete", ops.delete_collection(ns)),
            ],
            scope_parameters(),
        );
        add(
            &mut paths,
            format!("{scope}/{plural}/{{name}}"),
            vec![
                ("get", ops.read(ns, &object)),
                ("put", ops.replace(ns, &object)),
                ("patch", ops.patch(ns, &object)),
                ("delete", ops.delete(ns)),
            ],
            item_parameters(),
        );
        let mut subresources = Vec::new();
        if rt.status {
            subresources.push((
                "status",
                Sub {
                    suffix: "Status",
                    what: "status of ",
                    schema: resource.kind.clone(),
                    gvk: ops.kind_gvk(),
                },
            ));
        }
        if rt.scale.is_some()
            && let Some(scale) = &common.scale
        {
            subresources.push((
                "scale",
                Sub {
                    suffix: "Scale",
                    what: "scale of ",
                    schema: scale.clone(),
                    gvk: gvk("autoscaling", "v1", "Scale"),
                },
            ));
        }
        for (sub_path, sub) in &subresources {
            add(
                &mut paths,
                format!("{scope}/{plural}/{{name}}/{sub_path}"),
                vec![
                    ("get", ops.read(ns, sub)),
                    ("put", ops.replace(ns, sub)),
                    ("patch", ops.patch(ns, sub)),
                ],
                item_parameters(),
            );
        }
        if rt.subresource("finalize").is_some() {
            let finalize = Sub {
                suffix: "Finalize",
                what: "finalize of ",
                schema: resource.kind.clone(),
                gvk: ops.kind_gvk(),
            };
            add(
                &mut paths,
                format!("{scope}/{plural}/{{name}}/finalize"),
                vec![("put", ops.replace(false, &finalize))],
                item_parameters(),
            );
        }

        // Watches on the deprecated /watch/ paths.
        let watch_scope = if ns {
            format!("{prefix}/watch/namespaces/{{namespace}}")
        } else {
            format!("{prefix}/watch")
        };
        add(
            &mut paths,
            format!("{watch_scope}/{plural}"),
            vec![("get", ops.watch_list(ns, false))],
            list_parameters()
                .into_iter()
                .chain(scope_parameters())
                .collect(),
        );
        add(
            &mut paths,
            format!("{watch_scope}/{plural}/{{name}}"),
            vec![("get", ops.watch(ns))],
            list_parameters()
                .into_iter()
                .chain(item_parameters())
                .collect(),
        );
        if ns {
            add(
                &mut paths,
                format!("{prefix}/{plural}"),
                vec![("get", ops.list(ns, true))],
                vec![pretty()],
            );
            add(
                &mut paths,
                format!("{prefix}/watch/{plural}"),
                vec![("get", ops.watch_list(ns, true))],
                list_parameters().into_iter().chain([pretty()]).collect(),
            );
        }
    }
    paths
}
