//! Server-side apply of built-in kinds through kube::Client: lists keyed as Kubernetes keys
//! them (a DNS server's port 53 over TCP and UDP is two ports) and types owned whole (label
//! selectors), as `managedFields` and conflicts show.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use konverge_testkit::TestEnv;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

fn deployment(selector: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "dns"},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {"app": "dns"}},
                "spec": {"containers": [{
                    "name": "coredns", "image": "coredns:1.12",
                    "ports": [
                        {"name": "dns-tcp", "containerPort": 53},
                        {"name": "dns", "containerPort": 53, "protocol": "UDP"}
                    ]
                }]}
            }
        }
    })
}

/// The FieldsV1 `manager` owns in `obj`, as JSON text.
fn owned_by<K: Resource>(obj: &K, manager: &str) -> String {
    let entry = obj
        .managed_fields()
        .iter()
        .find(|e| e.manager.as_deref() == Some(manager))
        .unwrap_or_else(|| panic!("no managedFields entry for {manager}"));
    serde_json::to_string(&entry.fields_v1.as_ref().expect("fieldsV1").0).expect("json")
}

#[tokio::test]
async fn built_in_lists_are_keyed_and_selectors_owned_whole() -> anyhow::Result<()> {
    // An API server alone: the deployment controller would write the Deployment's status.
    let env = TestEnv::builder().bare().start().await;
    let deployments: Api<Deployment> = Api::namespaced(env.client(), "default");
    let alice = PatchParams::apply("alice");

    let applied = deployments
        .patch(
            "dns",
            &alice,
            &Patch::Apply(deployment(json!({"app": "dns"}))),
        )
        .await?;
    let ports = applied
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .ports
        .clone()
        .unwrap_or_default();
    assert_eq!(ports.len(), 2, "{ports:?}");
    let fields = owned_by(&applied, "alice");
    for owned in [
        r#""k:{\"containerPort\":53,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{}}"#,
        r#""k:{\"containerPort\":53,\"protocol\":\"UDP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}"#,
        r#""f:selector":{}"#,
    ] {
        assert!(fields.contains(owned), "{owned} not in {fields}");
    }

    // Applying the same again changes nothing.
    let again = deployments
        .patch(
            "dns",
            &alice,
            &Patch::Apply(deployment(json!({"app": "dns"}))),
        )
        .await?;
    assert_eq!(again.resource_version(), applied.resource_version());

    // A second manager widening the selector conflicts on the selector as a whole.
    let err = deployments
        .patch(
            "dns",
            &PatchParams::apply("bob"),
            &Patch::Apply(deployment(json!({"app": "dns", "tier": "infra"}))),
        )
        .await
        .expect_err("conflict");
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.selector"
    );

    // Services too: port 53 over TCP and UDP are two ports.
    let services: Api<Service> = Api::namespaced(env.client(), "default");
    let service = services
        .patch(
            "dns",
            &alice,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "dns"},
                "spec": {"selector": {"app": "dns"}, "ports": [
                    {"name": "dns-tcp", "port": 53},
                    {"name": "dns", "port": 53, "protocol": "UDP"}
                ]}
            })),
        )
        .await?;
    let fields = owned_by(&service, "alice");
    assert!(
        fields.contains(r#""k:{\"port\":53,\"protocol\":\"UDP\"}""#),
        "{fields}"
    );
    assert!(fields.contains(r#""f:selector":{}"#), "{fields}");
    Ok(())
}
