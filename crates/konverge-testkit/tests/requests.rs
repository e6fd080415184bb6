//! Request accounting, through a real `kube::Client`.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use konverge_testkit::{RequestLog, Rule, TestEnv, Verb};
use kube::api::WatchParams;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), value.to_string())])),
        ..ConfigMap::default()
    }
}

type Summary = (
    Option<Verb>,
    Option<String>,
    Option<String>,
    Option<String>,
    u16,
);

fn summaries(log: &RequestLog) -> Vec<Summary> {
    log.records()
        .into_iter()
        .map(|r| {
            (
                r.request.verb,
                r.request.resource,
                r.request.namespace,
                r.request.name,
                r.status.as_u16(),
            )
        })
        .collect()
}

fn s(verb: Verb, resource: &str, ns: Option<&str>, name: Option<&str>, code: u16) -> Summary {
    (
        Some(verb),
        Some(resource.into()),
        ns.map(String::from),
        name.map(String::from),
        code,
    )
}

#[tokio::test]
async fn every_request_is_recorded_with_verb_resource_and_status() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let log = env.requests();
    assert!(log.is_empty(), "{log:?}");
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &config_map("x", "0"))
        .await?;
    let mut cm = api.get("x").await?;
    api.list(&ListParams::default()).await?;
    cm.data = Some(BTreeMap::from([("v".into(), "1".into())]));
    api.replace("x", &PostParams::default(), &cm).await?;
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"v": "2"}})),
    )
    .await?;
    assert!(api.get_opt("missing").await?.is_none());
    let mut events = api
        .watch(&WatchParams::default().fields("metadata.name=x"), "0")
        .await?
        .boxed();
    assert!(events.next().await.is_some());
    drop(events);
    api.delete("x", &DeleteParams::default()).await?;
    let namespaces: Api<Namespace> = Api::all(env.client());
    let ns = namespaces.get("default").await?;
    namespaces
        .replace_status("default", &PostParams::default(), &ns)
        .await?;

    let d = Some("default");
    assert_eq!(
        summaries(&log),
        [
            s(Verb::Create, "configmaps", d, None, 201),
            s(Verb::Get, "configmaps", d, Some("x"), 200),
            s(Verb::List, "configmaps", d, None, 200),
            s(Verb::Update, "configmaps", d, Some("x"), 200),
            s(Verb::Patch, "configmaps", d, Some("x"), 200),
            s(Verb::Get, "configmaps", d, Some("missing"), 404),
            s(Verb::Watch, "configmaps", d, Some("x"), 200),
            s(Verb::Delete, "configmaps", d, Some("x"), 200),
            s(Verb::Get, "namespaces", None, Some("default"), 200),
            s(Verb::Update, "namespaces", None, Some("default"), 200),
        ]
    );
    let records = log.records();
    assert_eq!(records[9].request.subresource.as_deref(), Some("status"));
    assert!(records.iter().all(|r| !r.injected));
    assert_eq!(records[3].to_string(), "update configmaps default/x -> 200");

    assert_eq!(log.count(Verb::Get, "configmaps"), 2);
    assert_eq!(log.count(Verb::Update, "configmaps"), 1);
    assert_eq!(log.count(Verb::Update, "namespaces"), 0);
    assert_eq!(log.count(Verb::Update, "namespaces/status"), 1);
    assert_eq!(log.count(Verb::Watch, "configmaps"), 1);
    // get, update, patch, watch (by field selector) and delete name `x`; a create's path
    // names no object.
    assert_eq!(
        log.count_matching(&Rule::new().resource("configmaps").name("x")),
        5
    );
    assert_eq!(log.writes(), 5);

    log.reset();
    assert_eq!((log.len(), log.writes()), (0, 0));
    api.list(&ListParams::default()).await?;
    assert_eq!(env.requests().len(), 1, "handles share one log");
    Ok(())
}

/// A reconcile of the kind controllers do: make the ConfigMap hold `value`, writing only
/// when it does not.
async fn reconcile(api: &Api<ConfigMap>, name: &str, value: &str) -> anyhow::Result<()> {
    let desired = config_map(name, value);
    match api.get_opt(name).await? {
        None => {
            api.create(&PostParams::default(), &desired).await?;
        }
        Some(mut current) if current.data != desired.data => {
            current.data = desired.data;
            api.replace(name, &PostParams::default(), &current).await?;
        }
        Some(_) => {}
    }
    Ok(())
}

#[tokio::test]
async fn a_second_reconcile_of_a_converged_object_writes_nothing() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let log = env.requests();

    reconcile(&api, "settings", "fast").await?;
    assert_eq!(log.writes(), 1, "{log:?}");
    assert_eq!(log.count(Verb::Create, "configmaps"), 1);

    log.reset();
    reconcile(&api, "settings", "fast").await?;
    assert_eq!(log.writes(), 0, "{log:?}");
    assert_eq!(log.count(Verb::Get, "configmaps"), 1);

    log.reset();
    reconcile(&api, "settings", "slow").await?;
    assert_eq!(log.count(Verb::Update, "configmaps"), 1, "{log:?}");
    Ok(())
}
