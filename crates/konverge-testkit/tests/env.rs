//! TestEnv: the server starts, serves a kube::Client, and stops when dropped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_testkit::TestEnv;
use kube::api::{Api, ObjectMeta, PostParams};

fn config_map(name: &str, key: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..ConfigMap::default()
    }
}

async fn create_and_get(env: &TestEnv) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let created = api
        .create(
            &PostParams::default(),
            &config_map("settings", "mode", "fast"),
        )
        .await?;
    assert!(created.metadata.resource_version.is_some());
    let got = api.get("settings").await?;
    assert_eq!(
        got.data,
        Some(BTreeMap::from([("mode".into(), "fast".into())]))
    );
    assert_eq!(got.metadata.uid, created.metadata.uid);
    Ok(())
}

#[tokio::test]
async fn memory_env_creates_and_gets_a_config_map() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    create_and_get(&env).await?;
    // The store under the server holds what the client wrote.
    let stored = env
        .store()
        .get("/registry/configmaps/default/settings".into())
        .await?;
    assert!(stored.is_some(), "the config map is in the store");
    Ok(())
}

#[tokio::test]
async fn disk_env_without_control_loops_serves_the_same_api() -> anyhow::Result<()> {
    let env = TestEnv::builder().disk().control_loops(false).start().await;
    create_and_get(&env).await
}

#[tokio::test]
async fn dropping_the_env_stops_the_server() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.list(&Default::default()).await?;
    let addr = env.addr();
    drop(env);
    // The listener is closed once the accept task has been aborted.
    let mut refused = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(refused, "{addr} still accepts connections after drop");
    Ok(())
}

#[tokio::test]
async fn kubeconfig_points_at_the_server() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("kubeconfig");
    env.write_kubeconfig(&path)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    assert_eq!(
        config.cluster_url.to_string().trim_end_matches('/'),
        env.url()
    );
    assert_eq!(config.default_namespace, "default");
    // A client built from the file reaches the same server.
    let api: Api<ConfigMap> = Api::default_namespaced(kube::Client::try_from(config)?);
    api.create(&PostParams::default(), &config_map("via-file", "a", "b"))
        .await?;
    let direct: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    assert!(direct.get_opt("via-file").await?.is_some());
    Ok(())
}
