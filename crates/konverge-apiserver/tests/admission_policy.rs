//! ValidatingAdmissionPolicy through a `kube::Client` on the in-process server (and raw
//! requests through its router where headers matter): refusals with kube-apiserver's
//! messages, reasons and codes, warnings and audit annotations, params, selectors and
//! exclusions, match conditions, variables, the authorizer, deletes and dry runs, failure
//! policies, refused configurations, type checking in the status, and custom resources.

#[path = "common/eventually.rs"]
mod eventually;
#[path = "common/router.rs"]
mod router;

use std::sync::Arc;

use eventually::eventually_some;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konverge_apiserver::{ApiServer, AuthorizationMode};
use konverge_store::MemStore;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use router::send;
use serde_json::{Value, json};

async fn server(mode: AuthorizationMode) -> Arc<ApiServer> {
    ApiServer::builder(Arc::new(MemStore::new()))
        .authorization(mode)
        .record_admissions(256)
        .build()
        .await
        .expect("server")
}

async fn client() -> (Arc<ApiServer>, kube::Client) {
    let server = server(AuthorizationMode::AlwaysAllow).await;
    let client = kube::Client::new(server.router(), "default");
    (server, client)
}

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("an object")
}

/// Rules matching creates (and `operations`) of core configmaps.
fn configmap_rules(operations: &[&str]) -> Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": operations, "resources": ["configmaps"]}]})
}

async fn policy(client: &kube::Client, name: &str, spec: Value) -> anyhow::Result<()> {
    let api: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &object(json!({"metadata": {"name": name}, "spec": spec})),
    )
    .await?;
    Ok(())
}

async fn binding(client: &kube::Client, name: &str, spec: Value) -> anyhow::Result<()> {
    let api: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &object(json!({"metadata": {"name": name}, "spec": spec})),
    )
    .await?;
    Ok(())
}

fn configmap(name: &str, data: Value) -> ConfigMap {
    object(json!({"metadata": {"name": name}, "data": data}))
}

async fn create(client: &kube::Client, ns: &str, cm: ConfigMap) -> Result<ConfigMap, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &cm).await
}

/// A refusal's code, reason and message.
fn refusal(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn refusals_carry_kube_messages_reasons_and_codes() -> anyhow::Result<()> {
    let (server, client) = client().await;
    let only = |name: &str| {
        json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["configmaps"], "resourceNames": [name]}]})
    };
    policy(
        &client,
        "plain",
        json!({"matchConstraints": only("plain"),
        "validations": [{"expression": "object.data.x == 'ok'"}]}),
    )
    .await?;
    policy(&client, "worded", json!({"matchConstraints": only("worded"),
        "validations": [{"expression": "object.data.x == 'ok'", "message": "  x must be ok  ", "reason": "Forbidden"}]})).await?;
    policy(
        &client,
        "computed",
        json!({"matchConstraints": only("computed"),
        "validations": [{"expression": "object.data.x == 'ok'", "message": "fallback",
            "messageExpression": "'x is ' + object.data.x", "reason": "RequestEntityTooLarge"}]}),
    )
    .await?;
    policy(
        &client,
        "empty-message",
        json!({"matchConstraints": only("empty-message"),
        "validations": [{"expression": "object.data.x == 'ok'", "message": "fallback",
            "messageExpression": "' '"}]}),
    )
    .await?;
    for name in ["plain", "worded", "computed", "empty-message"] {
        binding(
            &client,
            name,
            json!({"policyName": name, "validationActions": ["Deny"]}),
        )
        .await?;
    }
    let bad = json!({"x": "no"});
    let e = create(&client, "default", configmap("plain", bad.clone()))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = e else {
        panic!("an API error")
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let expected = "ValidatingAdmissionPolicy 'plain' with binding 'plain' denied request: failed expression: object.data.x == 'ok'";
    assert_eq!(
        status.message,
        format!(r#"configmaps "plain" is forbidden: {expected}"#)
    );
    let details = status.details.expect("details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("plain", "configmaps")
    );
    assert_eq!(details.causes[0].message, expected);

    let e = create(&client, "default", configmap("worded", bad.clone()))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e),
        (403, "Forbidden".into(), r#"configmaps "worded" is forbidden: ValidatingAdmissionPolicy 'worded' with binding 'worded' denied request: x must be ok"#.into())
    );
    let e = create(&client, "default", configmap("computed", bad.clone()))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e),
        (413, "RequestEntityTooLarge".into(), r#"configmaps "computed" is forbidden: ValidatingAdmissionPolicy 'computed' with binding 'computed' denied request: x is no"#.into())
    );
    // A message expression that gives nothing usable falls back to the message.
    let e = create(&client, "default", configmap("empty-message", bad))
        .await
        .unwrap_err();
    assert!(refusal(e).2.ends_with("denied request: fallback"));
    create(&client, "default", configmap("plain", json!({"x": "ok"}))).await?;
    // Objects the policies do not match are not looked at.
    create(&client, "default", configmap("other", json!({"x": "no"}))).await?;
    // Writes of resources no binding could match skip the plugin.
    let catalog = server.registry().catalog();
    let chain = server.registry().admission();
    assert!(chain.handles(&catalog.get("", "v1", "configmaps").expect("served")));
    assert!(
        !chain.handles(
            &catalog
                .get("rbac.authorization.k8s.io", "v1", "clusterroles")
                .expect("served")
        )
    );
    Ok(())
}

#[tokio::test]
async fn warnings_audit_annotations_and_the_admission_record() -> anyhow::Result<()> {
    let (server, client) = client().await;
    policy(
        &client,
        "labels",
        json!({
            "matchConstraints": configmap_rules(&["CREATE"]),
            "validations": [
                {"expression": "true"},
                {"expression": "has(object.metadata.labels)", "message": "labels <required>"},
            ],
            "auditAnnotations": [
                {"key": "size", "valueExpression": "string(size(object.data))"},
                {"key": "nothing", "valueExpression": "null"},
            ],
        }),
    )
    .await?;
    binding(
        &client,
        "warn",
        json!({"policyName": "labels", "validationActions": ["Warn", "Audit"]}),
    )
    .await?;
    let (code, warnings, body) = send(
        &server,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        None,
        Some(json!({"metadata": {"name": "bare"}, "data": {"a": "1", "b": "2"}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        warnings,
        [
            r#"299 - "Validation failed for ValidatingAdmissionPolicy 'labels' with binding 'warn': labels <required>""#
        ]
    );
    let log = server
        .registry()
        .admission()
        .log()
        .expect("a log")
        .records();
    let record = log
        .iter()
        .rev()
        .find(|r| r.resource == "configmaps" && r.name == "bare")
        .expect("recorded");
    assert_eq!(
        record.decision("ValidatingAdmissionPolicy/labels/warn"),
        Some(konverge_apiserver::admission::Decision::Warned)
    );
    let annotation = |key: &str| {
        record
            .annotations
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        annotation("validation.policy.admission.k8s.io/validation_failure").as_deref(),
        Some(
            r#"[{"binding":"warn","expressionIndex":1,"message":"labels \u003crequired\u003e","policy":"labels","validationActions":["Warn","Audit"]}]"#
        )
    );
    assert_eq!(annotation("labels/size").as_deref(), Some("2"));
    assert_eq!(annotation("labels/nothing"), None);
    Ok(())
}

#[tokio::test]
async fn params_by_name_and_by_selector() -> anyhow::Result<()> {
    let (_server, client) = client().await;
    // Params are ConfigMaps too: only configmaps labelled `checked` are checked.
    let mut rules = configmap_rules(&["CREATE"]);
    rules["objectSelector"] = json!({"matchLabels": {"checked": "yes"}});
    policy(&client, "max-keys", json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": rules,
        "validations": [{"expression": "size(object.data) <= int(params.data.max)",
            "messageExpression": "'at most ' + params.data.max + ' keys (' + params.metadata.name + ')'"}],
    })).await?;
    binding(
        &client,
        "by-name",
        json!({"policyName": "max-keys", "validationActions": ["Deny"],
        "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}),
    )
    .await?;
    let checked = |name: &str, keys: usize| -> ConfigMap {
        let data: serde_json::Map<String, Value> =
            (0..keys).map(|i| (format!("k{i}"), json!("v"))).collect();
        object(json!({"metadata": {"name": name, "labels": {"checked": "yes"}}, "data": data}))
    };
    let e = create(&client, "default", checked("a", 1))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e),
        (422, "Invalid".into(), r#"configmaps "a" is forbidden: ValidatingAdmissionPolicy 'max-keys' with binding 'by-name' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"#.into())
    );
    create(&client, "default", configmap("limits", json!({"max": "2"}))).await?;
    create(&client, "default", checked("a", 2)).await?;
    let e = create(&client, "default", checked("b", 3))
        .await
        .unwrap_err();
    assert!(
        refusal(e)
            .2
            .ends_with("denied request: at most 2 keys (limits)")
    );
    // Params live in the request's namespace, unless the binding names one.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "other"}})),
        )
        .await?;
    let e = create(&client, "other", checked("c", 1)).await.unwrap_err();
    assert!(refusal(e).2.contains("no params found"));

    // By selector: every param selected is applied; none found with Allow lets it through.
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    bindings.delete("by-name", &DeleteParams::default()).await?;
    binding(
        &client,
        "by-selector",
        json!({"policyName": "max-keys", "validationActions": ["Deny"],
        "paramRef": {"selector": {"matchLabels": {"limit": "true"}}, "namespace": "default",
            "parameterNotFoundAction": "Allow"}}),
    )
    .await?;
    create(&client, "other", checked("d", 5)).await?;
    let limit = |name: &str, max: &str| -> ConfigMap {
        object(
            json!({"metadata": {"name": name, "labels": {"limit": "true"}}, "data": {"max": max}}),
        )
    };
    create(&client, "default", limit("loose", "4")).await?;
    create(&client, "default", limit("tight", "1")).await?;
    create(&client, "other", checked("e", 1)).await?;
    let e = create(&client, "other", checked("f", 3)).await.unwrap_err();
    assert!(
        refusal(e)
            .2
            .ends_with("denied request: at most 1 keys (tight)"),
        "only the tight limit fails"
    );
    Ok(())
}

#[tokio::test]
async fn namespace_and_object_selectors_and_exclusions() -> anyhow::Result<()> {
    let (_server, client) = client().await;
    let mut rules = configmap_rules(&["CREATE"]);
    rules["namespaceSelector"] = json!({"matchLabels": {"env": "prod"}});
    rules["excludeResourceRules"] = json!([{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["*"], "resources": ["configmaps"], "resourceNames": ["exempt"]}]);
    policy(
        &client,
        "prod-only",
        json!({"matchConstraints": rules,
        "validations": [{"expression": "false", "message": "no configmaps in prod"}]}),
    )
    .await?;
    binding(
        &client,
        "all",
        json!({"policyName": "prod-only", "validationActions": ["Deny"]}),
    )
    .await?;
    binding(
        &client,
        "labelled",
        json!({"policyName": "prod-only", "validationActions": ["Deny"],
        "matchResources": {"objectSelector": {"matchLabels": {"strict": "true"}}}}),
    )
    .await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "prod", "labels": {"env": "prod"}}})),
        )
        .await?;
    create(&client, "default", configmap("dev", json!({}))).await?;
    let e = create(&client, "prod", configmap("app", json!({})))
        .await
        .unwrap_err();
    assert!(refusal(e).2.ends_with("ValidatingAdmissionPolicy 'prod-only' with binding 'all' denied request: no configmaps in prod"));
    create(&client, "prod", configmap("exempt", json!({}))).await?;
    // The second binding only matches labelled objects: the first refusal is answered.
    let strict: ConfigMap =
        object(json!({"metadata": {"name": "strict", "labels": {"strict": "true"}}}));
    let e = create(&client, "prod", strict).await.unwrap_err();
    assert!(refusal(e).2.contains("with binding 'all'"));
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    bindings.delete("all", &DeleteParams::default()).await?;
    create(&client, "prod", configmap("loose", json!({}))).await?;
    let strict: ConfigMap =
        object(json!({"metadata": {"name": "strict", "labels": {"strict": "true"}}}));
    let e = create(&client, "prod", strict).await.unwrap_err();
    assert!(refusal(e).2.contains("with binding 'labelled'"));
    Ok(())
}

#[tokio::test]
async fn match_conditions_variables_and_message_expressions() -> anyhow::Result<()> {
    let (_server, client) = client().await;
    policy(&client, "small", json!({
        "matchConstraints": configmap_rules(&["CREATE", "UPDATE"]),
        "matchConditions": [{"name": "not-system", "expression": "!object.metadata.name.startsWith('system-')"}],
        "variables": [
            {"name": "keys", "expression": "object.data.size()"},
            {"name": "limit", "expression": "request.operation == 'CREATE' ? 1 : 2"},
            {"name": "broken", "expression": "object.data.missing"},
        ],
        "validations": [
            {"expression": "variables.keys <= variables.limit",
             "messageExpression": "'too many keys: ' + string(variables.keys) + ' > ' + string(variables.limit)"},
        ],
    })).await?;
    binding(
        &client,
        "small",
        json!({"policyName": "small", "validationActions": ["Deny"]}),
    )
    .await?;
    let two = json!({"a": "1", "b": "2"});
    let e = create(&client, "default", configmap("app", two.clone()))
        .await
        .unwrap_err();
    assert!(
        refusal(e)
            .2
            .ends_with("denied request: too many keys: 2 > 1")
    );
    create(&client, "default", configmap("system-app", two.clone())).await?;
    create(&client, "default", configmap("app", json!({"a": "1"}))).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut cm = api.get("app").await?;
    cm.data = Some(object(two));
    api.replace("app", &PostParams::default(), &cm).await?;

    // A variable that fails fails only what reads it, with kube's words.
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let mut p = policies.get("small").await?;
    let spec = p.spec.as_mut().expect("spec");
    spec.validations = Some(object(json!([{"expression": "variables.broken == 'x'"}])));
    policies
        .replace("small", &PostParams::default(), &p)
        .await?;
    let e = create(&client, "default", configmap("other", json!({"z": "1"})))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e).2,
        r#"configmaps "other" is forbidden: ValidatingAdmissionPolicy 'small' with binding 'small' denied request: expression 'variables.broken == 'x'' resulted in error: composited variable "broken" fails to evaluate: no such key: missing"#
    );
    Ok(())
}

#[tokio::test]
async fn the_authorizer_answers_as_the_server_authorizes() -> anyhow::Result<()> {
    let server = server(AuthorizationMode::Rbac).await;
    let client = kube::Client::new(server.router(), "default");
    // alice may create configmaps, and read secrets only in `open`.
    for (path, body) in [
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
            json!({"metadata": {"name": "cm"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            json!({"metadata": {"name": "cm"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm"},
            "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}),
        ),
    ] {
        let (code, _, body) = send(&server, "POST", path, None, Some(body)).await;
        assert_eq!(code, 201, "{body}");
    }
    policy(&client, "readers", json!({
        "matchConstraints": configmap_rules(&["CREATE"]),
        "validations": [
            {"expression": "authorizer.requestResource.check('create').allowed()"},
            {"expression": "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()",
             "messageExpression": "'only those who may list secrets: ' + object.metadata.name"},
        ],
    })).await?;
    binding(
        &client,
        "readers",
        json!({"policyName": "readers", "validationActions": ["Deny"]}),
    )
    .await?;
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, _, body) = send(
        &server,
        "POST",
        path,
        Some("alice"),
        Some(json!({"metadata": {"name": "mine"}})),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        r#"configmaps "mine" is forbidden: ValidatingAdmissionPolicy 'readers' with binding 'readers' denied request: only those who may list secrets: mine"#
    );
    // The admin (system:masters) may do anything.
    let (code, _, body) = send(
        &server,
        "POST",
        path,
        None,
        Some(json!({"metadata": {"name": "admins"}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, _, _) = send(
        &server,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
        None,
        Some(json!({"metadata": {"name": "secrets"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]})),
    )
    .await;
    assert_eq!(code, 201);
    let (code, _, _) = send(
        &server,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        None,
        Some(json!({"metadata": {"name": "secrets"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets"},
            "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]})),
    )
    .await;
    assert_eq!(code, 201);
    let (code, _, body) = send(
        &server,
        "POST",
        path,
        Some("alice"),
        Some(json!({"metadata": {"name": "mine"}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    Ok(())
}

#[tokio::test]
async fn deletes_see_the_old_object_and_dry_runs_are_validated() -> anyhow::Result<()> {
    let (server, client) = client().await;
    policy(&client, "protect", json!({
        "matchConstraints": configmap_rules(&["DELETE"]),
        "validations": [{"expression": "object == null && oldObject.metadata.?labels.?protected.orValue('') != 'true'",
            "messageExpression": "'protected: ' + oldObject.metadata.name + ' (' + request.operation + ')'"}],
    })).await?;
    policy(
        &client,
        "no-dry-runs",
        json!({
            "matchConstraints": configmap_rules(&["CREATE"]),
            "validations": [{"expression": "!request.dryRun", "message": "no dry runs"}],
        }),
    )
    .await?;
    binding(
        &client,
        "protect",
        json!({"policyName": "protect", "validationActions": ["Deny"]}),
    )
    .await?;
    binding(
        &client,
        "no-dry-runs",
        json!({"policyName": "no-dry-runs", "validationActions": ["Deny"]}),
    )
    .await?;
    let keep: ConfigMap =
        object(json!({"metadata": {"name": "keep", "labels": {"protected": "true"}}}));
    create(&client, "default", keep).await?;
    create(&client, "default", configmap("scratch", json!({}))).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let e = api
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e),
        (422, "Invalid".into(), r#"configmaps "keep" is forbidden: ValidatingAdmissionPolicy 'protect' with binding 'protect' denied request: protected: keep (DELETE)"#.into())
    );
    api.delete("scratch", &DeleteParams::default()).await?;
    let (code, _, body) = send(
        &server,
        "POST",
        "/api/v1/namespaces/default/configmaps?dryRun=All",
        None,
        Some(json!({"metadata": {"name": "dry"}})),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("denied request: no dry runs")
    );
    Ok(())
}

#[tokio::test]
async fn failure_policies_decide_about_errors() -> anyhow::Result<()> {
    let (_server, client) = client().await;
    for (name, failure) in [("strict", "Fail"), ("lenient", "Ignore")] {
        policy(&client, name, json!({
            "failurePolicy": failure,
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"], "resourceNames": [name]}]},
            "validations": [{"expression": "object.data.missing == 'x'"}],
        })).await?;
        binding(
            &client,
            name,
            json!({"policyName": name, "validationActions": ["Deny"]}),
        )
        .await?;
    }
    let e = create(&client, "default", configmap("strict", json!({"a": "1"})))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e),
        (422, "Invalid".into(), r#"configmaps "strict" is forbidden: ValidatingAdmissionPolicy 'strict' with binding 'strict' denied request: expression 'object.data.missing == 'x'' resulted in error: no such key: missing"#.into())
    );
    // An empty `data` is no `data` at all, as Go's `omitempty` writes the object.
    let e = create(&client, "default", configmap("strict", json!({})))
        .await
        .unwrap_err();
    assert!(
        refusal(e)
            .2
            .ends_with("resulted in error: no such key: data"),
        "the empty map is dropped"
    );
    create(&client, "default", configmap("lenient", json!({}))).await?;
    // An expression that would cost more than one call may is stopped.
    let costly = "object.data.all(a, object.data.all(b, a != '' && b != ''))";
    policy(&client, "costly", json!({
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["configmaps"], "resourceNames": ["costly"]}]},
        "validations": [{"expression": costly}],
    })).await?;
    binding(
        &client,
        "costly",
        json!({"policyName": "costly", "validationActions": ["Deny"]}),
    )
    .await?;
    let many: serde_json::Map<String, Value> =
        (0..2000).map(|i| (format!("k{i}"), json!("v"))).collect();
    let e = create(&client, "default", configmap("costly", Value::Object(many)))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e).2,
        format!(
            "configmaps \"costly\" is forbidden: ValidatingAdmissionPolicy 'costly' with binding 'costly' denied request: expression '{costly}' resulted in error: operation cancelled: actual cost limit exceeded"
        )
    );
    create(&client, "default", configmap("costly", json!({"a": "1"}))).await?;
    // A paramKind nothing serves is a configuration error, under the same rule.
    policy(
        &client,
        "unknown-params",
        json!({
            "paramKind": {"apiVersion": "example.com/v1", "kind": "Nothing"},
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"], "resourceNames": ["p"]}]},
            "validations": [{"expression": "true"}],
        }),
    )
    .await?;
    binding(
        &client,
        "unknown-params",
        json!({"policyName": "unknown-params", "validationActions": ["Deny"],
        "paramRef": {"name": "x", "parameterNotFoundAction": "Allow"}}),
    )
    .await?;
    let e = create(&client, "default", configmap("p", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e).2,
        r#"configmaps "p" is forbidden: ValidatingAdmissionPolicy 'unknown-params' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Nothing'"#
    );
    Ok(())
}

#[tokio::test]
async fn invalid_configurations_are_refused() -> anyhow::Result<()> {
    let (_server, client) = client().await;
    let api: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let e = api
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "bad"}, "spec": {
                "matchConstraints": configmap_rules(&["CREATE"]),
                "validations": [{"expression": "foo == 1"}, {"expression": "object.data"}],
            }})),
        )
        .await
        .unwrap_err();
    let (code, reason, message) = refusal(e);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "ValidatingAdmissionPolicy.admissionregistration.k8s.io \"bad\" is invalid: [spec.validations[0].expression: Invalid value: \"foo == 1\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')\n | foo == 1\n | ^, spec.validations[1].expression: Invalid value: \"object.data\": must evaluate to bool but got dyn]"
    );
    let e = api
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "empty"}, "spec": {"matchConstraints": {}}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e).2,
        "ValidatingAdmissionPolicy.admissionregistration.k8s.io \"empty\" is invalid: [spec.matchConstraints.resourceRules: Required value, spec.validations: Required value: validations or auditAnnotations must contain at least one item, spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item]"
    );
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let e = bindings
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "both"}, "spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e).2,
        "ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io \"both\" is invalid: spec.validationActions: Invalid value: []admissionregistration.ValidationAction{\"Deny\", \"Warn\"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"
    );
    let e = bindings
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "none"}, "spec": {"policyName": "p"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e).2,
        "ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io \"none\" is invalid: spec.validationActions: Required value: at least one validation action is required"
    );
    // Defaults fill what is left out.
    policy(
        &client,
        "good",
        json!({"matchConstraints": configmap_rules(&["CREATE"]),
        "validations": [{"expression": "true"}]}),
    )
    .await?;
    let good = api.get("good").await?;
    let spec = serde_json::to_value(good.spec.expect("spec"))?;
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(spec["matchConstraints"]["matchPolicy"], "Equivalent");
    assert_eq!(spec["matchConstraints"]["namespaceSelector"], json!({}));
    assert_eq!(spec["matchConstraints"]["resourceRules"][0]["scope"], "*");
    Ok(())
}

#[tokio::test]
async fn type_checking_warnings_are_reported_in_the_status() -> anyhow::Result<()> {
    let (_server, client) = client().await;
    policy(&client, "replicas", json!({
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["deployments"]}]},
        "validations": [
            {"expression": "object.spec.replicas <= 5"},
            {"expression": "object.spec.replica <= 5", "messageExpression": "'too many: ' + object.spec.replicas"},
        ],
    })).await?;
    let api: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let status = eventually_some("the policy to take effect", || {
        let api = api.clone();
        async move {
            let status = api.get("replicas").await.ok()?.status?;
            (status.observed_generation == Some(1)).then_some(status)
        }
    })
    .await;
    let warnings = status
        .type_checking
        .and_then(|t| t.expression_warnings)
        .unwrap_or_default();
    let got: Vec<(String, String)> = warnings
        .into_iter()
        .map(|w| (w.field_ref, w.warning))
        .collect();
    assert_eq!(
        got,
        [
            (
                "spec.validations[1].expression".to_string(),
                "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica <= 5\n | ...........^\n".to_string()
            ),
            (
                "spec.validations[1].messageExpression".to_string(),
                "apps/v1, Kind=Deployment: ERROR: <input>:1:14: found no matching overload for '_+_' applied to '(string, int)'\n | 'too many: ' + object.spec.replicas\n | .............^\n".to_string()
            ),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn custom_resources_as_params_and_as_targets() -> anyhow::Result<()> {
    let (server, client) = client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd =
        |plural: &str, kind: &str, scope: &str, properties: Value| -> CustomResourceDefinition {
            object(json!({
                "metadata": {"name": format!("{plural}.example.com")},
                "spec": {"group": "example.com", "scope": scope,
                    "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "properties": properties}}}}}]}
            }))
        };
    crds.create(
        &PostParams::default(),
        &crd(
            "widgets",
            "Widget",
            "Namespaced",
            json!({"size": {"type": "integer"}}),
        ),
    )
    .await?;
    crds.create(
        &PostParams::default(),
        &crd(
            "limits",
            "Limit",
            "Cluster",
            json!({"max": {"type": "integer"}}),
        ),
    )
    .await?;
    for plural in ["widgets", "limits"] {
        eventually_some("the policy to take effect", || async {
            server
                .registry()
                .catalog()
                .get("example.com", "v1", plural)
                .map(|_| ())
        })
        .await;
    }
    let resource = |plural: &str, kind: &str| ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let limits: Api<DynamicObject> = Api::all_with(client.clone(), &resource("limits", "Limit"));
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resource("widgets", "Widget"));
    limits
        .create(
            &PostParams::default(),
            &object(json!({"apiVersion": "example.com/v1", "kind": "Limit",
            "metadata": {"name": "default"}, "spec": {"max": 5}})),
        )
        .await?;
    policy(&client, "widget-size", json!({
        "paramKind": {"apiVersion": "example.com/v1", "kind": "Limit"},
        "matchConstraints": {"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["widgets"]}]},
        "validations": [{"expression": "object.spec.size <= params.spec.max",
            "messageExpression": "'size ' + string(object.spec.size) + ' is over ' + string(params.spec.max)"}],
    })).await?;
    binding(
        &client,
        "widget-size",
        json!({"policyName": "widget-size", "validationActions": ["Deny"],
        "paramRef": {"name": "default", "parameterNotFoundAction": "Deny"}}),
    )
    .await?;
    let widget = |name: &str, size: i64| -> DynamicObject {
        object(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"size": size}}))
    };
    widgets
        .create(&PostParams::default(), &widget("small", 3))
        .await?;
    let e = widgets
        .create(&PostParams::default(), &widget("big", 7))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(e),
        (422, "Invalid".into(), r#"widgets.example.com "big" is forbidden: ValidatingAdmissionPolicy 'widget-size' with binding 'widget-size' denied request: size 7 is over 5"#.into())
    );
    // Both are typed by their schemas: the policy type checks clean.
    let api: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let status = eventually_some("the policy to take effect", || {
        let api = api.clone();
        async move {
            let status = api.get("widget-size").await.ok()?.status?;
            (status.observed_generation == Some(1)).then_some(status)
        }
    })
    .await;
    assert_eq!(
        status.type_checking.and_then(|t| t.expression_warnings),
        None
    );
    Ok(())
}

/// `--runtime-config admissionregistration.k8s.io/v1beta1=true`: the v1beta1 policies and
/// bindings are served (v1 preferred), are the same objects as v1's, and take effect.
#[tokio::test]
async fn v1beta1_policies_are_served_when_runtime_config_turns_them_on() -> anyhow::Result<()> {
    use konverge_apiserver::resources::runtime_config::RuntimeConfig;
    let config = RuntimeConfig::parse(&["admissionregistration.k8s.io/v1beta1=true".into()])
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let beta_server = ApiServer::builder(Arc::new(MemStore::new()))
        .runtime_config(config)
        .build()
        .await?;
    let client = kube::Client::new(beta_server.router(), "default");
    let group: Value = client
        .request(
            http::Request::get("/apis/admissionregistration.k8s.io")
                .body(Vec::new())
                .unwrap(),
        )
        .await?;
    assert_eq!(group["preferredVersion"]["version"], "v1");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["v1", "v1beta1"]);

    let beta = |kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1beta1", kind),
            plural,
        )
    };
    let policies: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &beta("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    );
    policies
        .create(
            &PostParams::default(),
            &object(json!({"apiVersion": "admissionregistration.k8s.io/v1beta1",
                "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "beta"},
                "spec": {"matchConstraints": configmap_rules(&["CREATE"]),
                    "validations": [{"expression": "object.metadata.name != 'refused'"}]}})),
        )
        .await?;
    let bindings: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &beta(
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
    );
    bindings
        .create(
            &PostParams::default(),
            &object(json!({"apiVersion": "admissionregistration.k8s.io/v1beta1",
                "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "beta"},
                "spec": {"policyName": "beta", "validationActions": ["Deny"]}})),
        )
        .await?;
    // One object, read in either version.
    let v1: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let as_v1 = v1.get("beta").await?;
    let as_beta = policies.get("beta").await?;
    assert_eq!(as_v1.metadata.uid, as_beta.metadata.uid);
    assert_eq!(
        as_beta.types.unwrap().api_version,
        "admissionregistration.k8s.io/v1beta1"
    );

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let refused = maps
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "refused"}})),
        )
        .await
        .expect_err("the v1beta1 policy denies it");
    assert!(
        refused
            .to_string()
            .contains("ValidatingAdmissionPolicy 'beta' with binding 'beta' denied request"),
        "{refused}"
    );
    maps.create(
        &PostParams::default(),
        &object(json!({"metadata": {"name": "taken"}})),
    )
    .await?;

    // Without the runtime config, v1beta1 is not served.
    let plain_server = server(AuthorizationMode::AlwaysAllow).await;
    let plain = kube::Client::new(plain_server.router(), "default");
    let missing: Api<DynamicObject> = Api::all_with(
        plain,
        &beta("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    );
    let err = missing
        .list(&Default::default())
        .await
        .expect_err("not served");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err}"
    );
    Ok(())
}
