//! ValidatingAdmissionPolicy through a `kube::Client` on the in-process server.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_apiserver::ApiServer;
use konverge_store::MemStore;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

async fn server() -> Arc<ApiServer> {
    ApiServer::builder(Arc::new(MemStore::new()))
        .admission_log(64)
        .build()
        .await
        .expect("server")
}

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("an object")
}

fn policies(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "ValidatingAdmissionPolicy".into(),
        plural: "validatingadmissionpolicies".into(),
    };
    Api::all_with(client.clone(), &ar)
}

fn bindings(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "ValidatingAdmissionPolicyBinding".into(),
        plural: "validatingadmissionpolicybindings".into(),
    };
    Api::all_with(client.clone(), &ar)
}

#[tokio::test]
async fn smoke() -> anyhow::Result<()> {
    let server = server().await;
    let client = kube::Client::new(server.router(), "default");
    policies(&client)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": "p"},
                "spec": {
                    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
                    "validations": [{"expression": "object.data.x == 'ok'"}]
                }
            })),
        )
        .await?;
    bindings(&client)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": "b"},
                "spec": {"policyName": "p", "validationActions": ["Deny"]}
            })),
        )
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let e = cms
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "c"}, "data": {"x": "no"}})),
        )
        .await
        .unwrap_err();
    println!("{e:?}");
    cms.create(
        &PostParams::default(),
        &object(json!({"metadata": {"name": "d"}, "data": {"x": "ok"}})),
    )
    .await?;
    Ok(())
}
