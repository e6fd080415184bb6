//! The bucket webhook through the API server, two ways: as konverge-testkit's in-process
//! handlers behind a Service reference, and as the crate's own HTTPS server reached by URL
//! with its certificate as the `caBundle`. Both must behave alike: that is what lets a team
//! test its webhook in milliseconds and ship the same code as a server.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use konverge_example_bucket_operator::{Bucket, BucketSpec};
use konverge_example_bucket_webhook::{
    NAME, REGION_LABEL, Target, base_url, configurations, mutate, self_signed, serve, validate,
};
use konverge_testkit::{Decision, TestEnv};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};

fn bucket(name: &str, region: &str) -> Bucket {
    Bucket::new(
        name,
        BucketSpec {
            region: region.into(),
        },
    )
}

fn rejection(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("expected a Status, got {other:?}"),
    }
}

/// Installs the CRD and the webhook configurations for `target`, then checks what the
/// webhook does to Buckets.
async fn webhook_behaves(env: &TestEnv, target: Target) -> anyhow::Result<()> {
    let client = env.client();
    konverge_runtime::crd::install(&client, &Bucket::crd(), "test", Duration::from_secs(10))
        .await?;
    let (mutating, validating) = configurations(&target);
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mutating)
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating)
        .await?;
    let buckets: Api<Bucket> = Api::namespaced(client, "default");

    // Mutated: the region as the cloud spells it, and the label.
    let created = buckets
        .create(&PostParams::default(), &bucket("logs", " EU-1"))
        .await?;
    assert_eq!(created.spec.region, "eu-1");
    assert_eq!(
        created.labels().get(REGION_LABEL).map(String::as_str),
        Some("eu-1")
    );
    let record = env
        .admissions()
        .into_iter()
        .rev()
        .find(|r| r.resource == "buckets" && r.name == "logs")
        .expect("the create went through admission");
    assert_eq!(
        record.decision(&format!("MutatingWebhook/{NAME}")),
        Some(Decision::Mutated)
    );
    assert_eq!(
        record.decision(&format!("ValidatingWebhook/{NAME}")),
        Some(Decision::Warned),
        "no owner label: a warning"
    );

    // Refused: a region the cloud does not have.
    let e = buckets
        .create(&PostParams::default(), &bucket("lost", "mars-1"))
        .await
        .unwrap_err();
    assert_eq!(
        rejection(e),
        (
            400,
            format!(
                "admission webhook \"{NAME}\" denied the request: spec.region: region \"mars-1\" does not exist; the cloud has eu-1, us-1"
            )
        )
    );
    assert!(buckets.get_opt("lost").await?.is_none());

    // Refused: a move.
    let e = buckets
        .patch(
            "logs",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"region": "us-1"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        rejection(e),
        (
            400,
            format!(
                "admission webhook \"{NAME}\" denied the request: spec.region: a bucket cannot move: it is in eu-1, and stays there (delete it and create another in us-1)"
            )
        )
    );
    assert_eq!(buckets.get("logs").await?.spec.region, "eu-1");
    Ok(())
}

#[tokio::test]
async fn in_process_handlers() -> anyhow::Result<()> {
    let env = TestEnv::builder()
        .webhook(
            "bucket-system",
            "bucket-webhook",
            "/mutate",
            |request| async move { mutate(&request) },
        )
        .webhook(
            "bucket-system",
            "bucket-webhook",
            "/validate",
            |request| async move { validate(&request) },
        )
        .start()
        .await;
    webhook_behaves(
        &env,
        Target::Service {
            namespace: "bucket-system".into(),
            name: "bucket-webhook".into(),
            ca_bundle: None,
        },
    )
    .await
}

#[tokio::test]
async fn https_server() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (cert, key) = self_signed(&["127.0.0.1"])?;
    let server = serve(listener, &cert, &key)?;
    let result = webhook_behaves(
        &env,
        Target::Url {
            base: base_url(addr),
            ca_bundle: Some(cert),
        },
    )
    .await;
    server.abort();
    result
}

#[test]
fn regions_are_normalized_as_the_cloud_spells_them() {
    assert_eq!(
        konverge_example_bucket_webhook::normalize("  Us-1 "),
        "us-1"
    );
}
