//! What the runtime keeps in memory, against an in-process API server: cached objects leave
//! out `metadata.managedFields` unless asked to keep them, and a controller's first list is
//! fed to its queue from the cache a batch at a time — in key order, each key once, with
//! changes to keys not fed yet folded into them — rather than queued whole.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use konverge_runtime::informer::Informer;
use konverge_runtime::{Action, Controller, Manager, Store, watcher};
use konverge_testkit::TestEnv;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::{Semaphore, oneshot};

fn cm(namespace: &str, name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some([("app".to_string(), "memory".to_string())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_string(), value.to_string())].into()),
        ..ConfigMap::default()
    }
}

/// The shared wait, for conditions that need no awaiting.
async fn eventually<F: Fn() -> bool>(what: &str, check: F) {
    support::eventually(what, || std::future::ready(check())).await
}

async fn namespace(env: &TestEnv, name: &str) {
    let api: Api<Namespace> = Api::all(env.client());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &ns).await.unwrap();
}

/// Runs `manager` until the returned sender is dropped or fired.
fn run(manager: Manager) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        manager
            .run(async {
                stopped.await.ok();
            })
            .await
            .unwrap();
    });
    (stop, task)
}

fn cached(store: &Store<ConfigMap>, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
    store.get(&konverge_runtime::ObjectKey::namespaced(namespace, name))
}

async fn noop(_: Arc<ConfigMap>, _: Arc<()>) -> Result<Action, kube::Error> {
    Ok(Action::await_change())
}

#[tokio::test]
async fn cached_objects_leave_out_managed_fields_unless_kept() {
    let env = TestEnv::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &cm("default", "listed", "1"))
        .await
        .unwrap();
    let from_server = api.get("listed").await.unwrap();
    assert!(
        from_server.metadata.managed_fields.is_some(),
        "the server records managedFields, so leaving them out is observable"
    );

    // By default: neither the listed object nor a later watch event keeps them.
    let manager = Manager::new(env.client());
    let store = manager.store(api.clone(), watcher::Config::default());
    let (stop, task) = run(manager);
    store.wait_until_ready().await;
    let listed = cached(&store, "default", "listed").expect("cached");
    assert_eq!(listed.metadata.managed_fields, None);
    assert_eq!(listed.data, from_server.data, "everything else is kept");
    assert_eq!(listed.metadata.uid, from_server.metadata.uid);
    api.create(&PostParams::default(), &cm("default", "watched", "2"))
        .await
        .unwrap();
    eventually("the watched object in the cache", || {
        cached(&store, "default", "watched").is_some()
    })
    .await;
    let watched = cached(&store, "default", "watched").unwrap();
    assert_eq!(watched.metadata.managed_fields, None);
    assert_eq!(watched.data.as_ref().unwrap()["value"], "2");
    stop.send(()).unwrap();
    task.await.unwrap();

    // A controller that asks keeps them, in the cache it shares with the manager's store.
    let mut manager = Manager::new(env.client());
    let store = manager.store(api.clone(), watcher::Config::default());
    let controller = Controller::new(api.clone(), watcher::Config::default()).keep_managed_fields();
    manager.add(controller, noop, Arc::new(()));
    let (stop, task) = run(manager);
    store.wait_until_ready().await;
    let kept = cached(&store, "default", "listed").unwrap();
    assert_eq!(
        kept.metadata.managed_fields, from_server.metadata.managed_fields,
        "kept as the server sent them"
    );
    api.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"value": "3"}})),
    )
    .await
    .unwrap();
    eventually("the patched object in the cache", || {
        cached(&store, "default", "watched")
            .is_some_and(|c| c.data.as_ref().is_some_and(|d| d["value"] == "3"))
    })
    .await;
    let patched = cached(&store, "default", "watched").unwrap();
    assert!(patched.metadata.managed_fields.is_some());
    stop.send(()).unwrap();
    task.await.unwrap();

    // The same through an informer used on its own.
    let informer = Informer::new(api.clone(), watcher::Config::default());
    informer.keep_managed_fields();
    let store = informer.store();
    let running = tokio::spawn(async move { informer.run(None).await });
    store.wait_until_ready().await;
    assert!(
        cached(&store, "default", "listed")
            .unwrap()
            .metadata
            .managed_fields
            .is_some()
    );
    running.abort();
}

#[tokio::test]
async fn a_namespaced_and_a_selected_watch_leave_them_out_too() {
    let env = TestEnv::start().await;
    namespace(&env, "other").await;
    for ns in ["default", "other"] {
        let api: Api<ConfigMap> = Api::namespaced(env.client(), ns);
        api.create(&PostParams::default(), &cm(ns, "a", "1"))
            .await
            .unwrap();
    }
    let informer = Informer::new(
        Api::<ConfigMap>::namespaced(env.client(), "other"),
        watcher::Config::default().labels("app=memory"),
    );
    let store = informer.store();
    let running = tokio::spawn(async move { informer.run(None).await });
    store.wait_until_ready().await;
    assert_eq!(store.len(), 1, "only the namespace the Api names");
    let only = cached(&store, "other", "a").expect("cached");
    assert_eq!(only.metadata.managed_fields, None);
    assert!(!store.contains(&konverge_runtime::ObjectKey::namespaced("default", "a")));
    running.abort();
}

/// Records each reconcile's object name and `value`; the first reconcile waits for a permit.
struct Gate {
    seen: Mutex<Vec<(String, String)>>,
    first: Semaphore,
}

async fn gated(cm: Arc<ConfigMap>, gate: Arc<Gate>) -> Result<Action, kube::Error> {
    let first = gate.seen.lock().unwrap().is_empty();
    gate.seen.lock().unwrap().push((
        cm.metadata.name.clone().unwrap_or_default(),
        cm.data
            .as_ref()
            .and_then(|d| d.get("value").cloned())
            .unwrap_or_default(),
    ));
    if first {
        gate.first.acquire().await.unwrap().forget();
    }
    Ok(Action::await_change())
}

#[tokio::test]
async fn the_first_list_is_fed_in_key_order_each_key_once_with_later_changes_folded_in() {
    let env = TestEnv::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let n = 700;
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &cm("default", &format!("c-{i:04}"), "0"),
                )
                .await
            }
        })
        .buffer_unordered(16)
        .try_for_each(|_| async { Ok(()) })
        .await
        .unwrap();

    let gate = Arc::new(Gate {
        seen: Mutex::new(Vec::new()),
        first: Semaphore::new(0),
    });
    let mut manager = Manager::new(env.client());
    let metrics = manager.metrics();
    let store = manager.store(api.clone(), watcher::Config::default());
    let controller = Controller::new(api.clone(), watcher::Config::default()).named("sweep");
    manager.add(controller, gated, gate.clone());
    let (stop, task) = run(manager);
    eventually("the first reconcile", || {
        !gate.seen.lock().unwrap().is_empty()
    })
    .await;

    // The queue holds a batch, not the whole list; its depth metric still counts the rest.
    let depth = metrics
        .encode()
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"workqueue_depth{controller="sweep",name="sweep"} "#)
                .map(|v| v.parse::<i64>().unwrap())
        })
        .expect("a depth series");
    assert_eq!(depth, n - 1, "every key but the one being reconciled");

    // While the first reconcile holds the only worker: change a key far ahead of what was
    // fed, delete another, create a third, and change one already queued.
    let patch = |value: &str| Patch::Merge(json!({"data": {"value": value}}));
    api.patch("c-0650", &PatchParams::default(), &patch("changed"))
        .await
        .unwrap();
    api.patch("c-0100", &PatchParams::default(), &patch("changed"))
        .await
        .unwrap();
    api.delete("c-0680", &DeleteParams::default())
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("default", "c-0690a", "new"))
        .await
        .unwrap();
    // The controller's own cache (shared with this store) sees all four before the worker
    // moves on.
    eventually("the four changes in the controller's cache", || {
        let value = |name: &str| {
            cached(&store, "default", name).and_then(|c| c.data.as_ref()?.get("value").cloned())
        };
        value("c-0650").as_deref() == Some("changed")
            && value("c-0100").as_deref() == Some("changed")
            && value("c-0690a").is_some()
            && cached(&store, "default", "c-0680").is_none()
    })
    .await;
    gate.first.add_permits(1);

    let expected = n as usize; // 700 - c-0680 + c-0690a
    eventually("every key reconciled", || {
        gate.seen.lock().unwrap().len() >= expected
    })
    .await;
    // Nothing more arrives: no key is reconciled twice.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = gate.seen.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(seen.len(), expected, "each key once: {names:?}");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "key order");
    assert!(!names.contains(&"c-0680"), "deleted before it was reached");
    let value = |name: &str| {
        seen.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap()
    };
    assert_eq!(value("c-0650"), "changed", "reconciled once, at its latest");
    assert_eq!(value("c-0100"), "changed");
    assert_eq!(value("c-0690a"), "new");
    let depth = metrics
        .encode()
        .lines()
        .any(|l| l == r#"workqueue_depth{controller="sweep",name="sweep"} 0"#);
    assert!(depth, "the backlog is drained");
    stop.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test]
async fn a_predicate_still_filters_the_first_list() {
    let env = TestEnv::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    for i in 0..600 {
        let value = if i % 3 == 0 { "wanted" } else { "ignored" };
        api.create(
            &PostParams::default(),
            &cm("default", &format!("p-{i:04}"), value),
        )
        .await
        .unwrap();
    }
    let gate = Arc::new(Gate {
        seen: Mutex::new(Vec::new()),
        first: Semaphore::new(1),
    });
    let mut manager = Manager::new(env.client());
    let wanted = |_: Option<&ConfigMap>, cm: &ConfigMap| {
        cm.data
            .as_ref()
            .is_some_and(|d| d.get("value").is_some_and(|v| v == "wanted"))
    };
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .with_predicate(wanted)
        .concurrency(4);
    manager.add(controller, gated, gate.clone());
    let (stop, task) = run(manager);
    eventually("the wanted keys", || gate.seen.lock().unwrap().len() >= 200).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = gate.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 200);
    assert!(seen.iter().all(|(_, v)| v == "wanted"));
    stop.send(()).unwrap();
    task.await.unwrap();
}
