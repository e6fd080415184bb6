//! A Fleet runs the same controller over several in-process API servers: each cluster's
//! objects are reconciled with its own client, keys and metrics name the cluster, clusters
//! join and leave at run time, and one leaving (or dying) does not touch the others.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::fleet::{Cluster, Error};
use konverge_runtime::{Action, Controller, Fleet, reconcile, watcher};
use konverge_testkit::TestEnv;
use kube::api::{ObjectMeta, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};

mod support;
use support::{eventually, get, in_process};

/// One cluster's reconciler context: its client, and every key the fleet's reconciles saw.
struct Ctx {
    client: Client,
    seen: Arc<Mutex<Vec<String>>>,
}

fn source(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("role".to_string(), "source".to_string())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_string(), name.to_string())].into()),
        ..ConfigMap::default()
    }
}

/// Copies a source into `<name>-copy` in the same cluster, recording the key it was given.
async fn copy(src: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let scope = reconcile::current().expect("reconciles run in a scope");
    ctx.seen.lock().unwrap().push(scope.key.to_string());
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let name = format!("{}-copy", src.metadata.name.as_deref().unwrap_or_default());
    if api.get_opt(&name).await?.is_none() {
        let copy = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name),
                ..ObjectMeta::default()
            },
            data: src.data.clone(),
            ..ConfigMap::default()
        };
        api.create(&PostParams::default(), &copy).await?;
    }
    Ok(Action::await_change())
}

fn fleet_of(seen: &Arc<Mutex<Vec<String>>>) -> Fleet {
    with_copier(Fleet::new().shutdown_timeout(Duration::from_secs(5)), seen)
}

/// Adds the copier to every cluster of `fleet`.
fn with_copier(mut fleet: Fleet, seen: &Arc<Mutex<Vec<String>>>) -> Fleet {
    let seen = seen.clone();
    fleet.add(
        move |cluster: &Cluster| {
            let controller = Controller::new(
                Api::<ConfigMap>::namespaced(cluster.client(), "default"),
                watcher::Config::default().labels("role=source"),
            )
            .named("copier");
            let ctx = Arc::new(Ctx {
                client: cluster.client(),
                seen: seen.clone(),
            });
            (controller, ctx)
        },
        copy,
    );
    fleet
}

async fn exists(client: &Client, name: &str) -> bool {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.get_opt(name).await.ok().flatten().is_some()
}

async fn create(client: &Client, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &source(name))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn each_cluster_is_reconciled_with_its_own_client_and_named_in_keys_and_metrics() {
    let (east, west) = (in_process().await, in_process().await);
    create(&east.client(), "a").await;
    create(&west.client(), "b").await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fleet = fleet_of(&seen)
        .cluster("east", east.client())
        .cluster("west", west.client())
        .spawn()
        .await
        .unwrap();
    assert_eq!(fleet.clusters(), ["east", "west"]);

    eventually("each source copied in its own cluster", || async {
        exists(&east.client(), "a-copy").await && exists(&west.client(), "b-copy").await
    })
    .await;
    assert!(!exists(&west.client(), "a-copy").await);
    assert!(!exists(&east.client(), "b-copy").await);
    let keys: BTreeSet<String> = seen.lock().unwrap().iter().cloned().collect();
    assert_eq!(
        keys,
        BTreeSet::from(["east:default/a".to_string(), "west:default/b".to_string()])
    );

    eventually("both clusters' caches ready", || async { fleet.is_ready() }).await;
    let metrics = fleet.metrics().encode();
    for cluster in ["east", "west"] {
        let success = format!(
            r#"controller_runtime_reconcile_total{{controller="copier",cluster="{cluster}",result="success"}} 1"#
        );
        assert!(metrics.contains(&success), "{success} in:\n{metrics}");
        let queue = format!(
            r#"workqueue_adds_total{{controller="copier",name="copier",cluster="{cluster}"}}"#
        );
        assert!(metrics.contains(&queue), "{queue} in:\n{metrics}");
        let cache = format!(
            r#"konverge_cache_objects{{resource="/api/v1/namespaces/default/configmaps",cluster="{cluster}"}}"#
        );
        assert!(metrics.contains(&cache), "{cache} in:\n{metrics}");
    }
    fleet.stop().await;
}

#[tokio::test(start_paused = true)]
async fn clusters_join_and_leave_at_run_time_without_touching_the_others() {
    let (east, west, north) = (in_process().await, in_process().await, in_process().await);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fleet = fleet_of(&seen)
        .cluster("east", east.client())
        .cluster("west", west.client())
        .spawn()
        .await
        .unwrap();

    // A third cluster joins: its existing objects are reconciled.
    create(&north.client(), "n").await;
    fleet.add_cluster("north", north.client()).unwrap();
    eventually("north's source copied", || async {
        exists(&north.client(), "n-copy").await
    })
    .await;
    assert!(matches!(
        fleet.add_cluster("north", north.client()),
        Err(Error::Duplicate(name)) if name == "north"
    ));

    // East leaves: its controller stops; west and north go on.
    assert!(fleet.remove_cluster("east").await);
    assert!(!fleet.remove_cluster("east").await, "already gone");
    assert_eq!(fleet.clusters(), ["north", "west"]);
    create(&east.client(), "e").await;
    create(&west.client(), "w").await;
    create(&north.client(), "n2").await;
    eventually("the remaining clusters still converge", || async {
        exists(&west.client(), "w-copy").await && exists(&north.client(), "n2-copy").await
    })
    .await;
    assert!(
        !exists(&east.client(), "e-copy").await,
        "a cluster that left is not reconciled"
    );
    assert!(!seen.lock().unwrap().iter().any(|k| k == "east:default/e"));

    // West's API server goes away altogether: north is not affected.
    drop(west);
    create(&north.client(), "n3").await;
    eventually("north converges with west gone", || async {
        exists(&north.client(), "n3-copy").await
    })
    .await;
    fleet.stop().await;
}

/// On the real clock: kubeconfigs and the health endpoint need sockets.
#[tokio::test]
async fn a_fleet_from_kubeconfig_contexts_with_one_health_endpoint() {
    let (east, west) = (TestEnv::start().await, TestEnv::start().await);
    let dir = tempfile::tempdir().unwrap();
    // One kubeconfig with a context per server, as a user's ~/.kube/config would have.
    let mut merged = Kubeconfig::default();
    for (name, env) in [("east", &east), ("west", &west)] {
        let path = dir.path().join(name);
        env.write_kubeconfig(&path).unwrap();
        let mut one = Kubeconfig::read_from(&path).unwrap();
        for c in &mut one.clusters {
            c.name = name.into();
        }
        for u in &mut one.auth_infos {
            u.name = name.into();
        }
        for c in &mut one.contexts {
            c.name = name.into();
            if let Some(ctx) = &mut c.context {
                ctx.cluster = name.into();
                ctx.user = Some(name.into());
            }
        }
        merged.clusters.extend(one.clusters);
        merged.auth_infos.extend(one.auth_infos);
        merged.contexts.extend(one.contexts);
    }
    create(&east.client(), "a").await;
    create(&west.client(), "b").await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fleet = Fleet::from_kubeconfig_file(Some(merged.clone()), &["east", "west"])
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fleet = with_copier(fleet.health_listener(listener), &seen)
        .spawn()
        .await
        .unwrap();
    assert_eq!(fleet.clusters(), ["east", "west"]);
    eventually("both contexts' sources copied", || async {
        exists(&east.client(), "a-copy").await && exists(&west.client(), "b-copy").await
    })
    .await;
    // One endpoint for the whole fleet: ready once every cluster's caches are, and every
    // cluster's series.
    eventually("/readyz", || async { get(addr, "/readyz").await.0 == 200 }).await;
    let (code, metrics) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    for cluster in ["east", "west"] {
        assert!(
            metrics.contains(&format!(
                r#"controller_runtime_active_workers{{controller="copier",cluster="{cluster}"}} 0"#
            )),
            "{metrics}"
        );
    }
    fleet.stop().await;

    let missing = Fleet::from_kubeconfig_file(Some(merged), &["south"])
        .await
        .unwrap_err();
    assert!(
        matches!(&missing, Error::Kubeconfig { context, .. } if context == "south"),
        "{missing}"
    );
}
