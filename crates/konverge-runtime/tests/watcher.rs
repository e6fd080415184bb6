//! The watcher against the in-process server: paged and streaming lists, resume after a cut
//! watch (no relist), relist after 410, and one shared watch for many controllers. In
//! Tokio's paused time against an in-process `TestEnv`: a watch held back a second costs no
//! real time, and a timeout fires only once every task is idle.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::watcher::{self, Event};
use konverge_runtime::{Action, Controller, Manager};
use konverge_testkit::{TestEnv, Verb};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

fn describe(event: &Event<ConfigMap>) -> String {
    let name = |c: &ConfigMap| c.metadata.name.clone().unwrap_or_default();
    match event {
        Event::Init => "init".into(),
        Event::InitApply(c) => format!("init-apply {}", name(c)),
        Event::InitDone => "init-done".into(),
        Event::Apply(c) => format!("apply {}", name(c)),
        Event::Delete(c) => format!("delete {}", name(c)),
    }
}

async fn next_events(
    stream: &mut (impl futures::Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin),
    n: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event in time")
            .expect("the stream never ends");
        if let Ok(event) = item {
            out.push(describe(&event));
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn paged_list_then_watch() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    for name in ["c", "a", "b", "e", "d"] {
        api.create(&PostParams::default(), &cm(name)).await.unwrap();
    }
    let config = watcher::Config {
        page_size: Some(2),
        ..watcher::Config::default()
    };
    let mut stream = Box::pin(watcher::watcher(api.clone(), config));
    let events = next_events(&mut stream, 7).await;
    assert_eq!(
        events,
        [
            "init",
            "init-apply a",
            "init-apply b",
            "init-apply c",
            "init-apply d",
            "init-apply e",
            "init-done"
        ]
    );
    assert_eq!(
        env.requests().count(Verb::List, "configmaps"),
        3,
        "three pages"
    );
    api.create(&PostParams::default(), &cm("f")).await.unwrap();
    assert_eq!(next_events(&mut stream, 1).await, ["apply f"]);
}

#[tokio::test(start_paused = true)]
async fn streaming_list_delivers_the_initial_set_then_changes() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    for name in ["b", "a"] {
        api.create(&PostParams::default(), &cm(name)).await.unwrap();
    }
    let mut stream = Box::pin(watcher::watcher(
        api.clone(),
        watcher::Config::default().streaming_lists(),
    ));
    let mut events = next_events(&mut stream, 4).await;
    events[1..3].sort();
    assert_eq!(
        events,
        ["init", "init-apply a", "init-apply b", "init-done"]
    );
    assert_eq!(
        env.requests().count(Verb::List, "configmaps"),
        0,
        "no list request: the watch carried the initial set"
    );
    api.delete("a", &Default::default()).await.unwrap();
    assert_eq!(next_events(&mut stream, 1).await, ["delete a"]);
}

#[tokio::test(start_paused = true)]
async fn a_cut_watch_resumes_without_relisting_and_410_relists() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut stream = Box::pin(watcher::watcher(api.clone(), watcher::Config::default()));
    assert_eq!(
        next_events(&mut stream, 3).await,
        ["init", "init-apply a", "init-done"]
    );

    // Cut: the watcher resumes from its resourceVersion and sees what happened meanwhile,
    // exactly once, without listing again.
    let faults = env.faults();
    faults.drop_watches();
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    assert_eq!(next_events(&mut stream, 1).await, ["apply b"]);
    assert_eq!(env.requests().count(Verb::List, "configmaps"), 1);

    // Expired history: the resume point is gone, so it relists (a fresh Init frame that a
    // cache uses to notice deletions it missed).
    // (Watches reach the server a second late from here on, so the watcher is still away
    // while the changes land and the history goes.)
    faults.delay(
        konverge_testkit::Rule::new().verb(Verb::Watch),
        Duration::from_secs(1),
    );
    faults.drop_watches();
    api.delete("a", &Default::default()).await.unwrap();
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    faults.expire_history().await.unwrap();
    let events = next_events(&mut stream, 4).await;
    assert_eq!(
        events,
        ["init", "init-apply b", "init-apply c", "init-done"]
    );
    assert_eq!(env.requests().count(Verb::List, "configmaps"), 2);
}

#[tokio::test(start_paused = true)]
async fn controllers_reading_the_same_resource_share_one_watch() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut manager = Manager::new(env.client());
    let noop =
        |_: Arc<ConfigMap>, _: Arc<()>| async { Ok::<_, kube::Error>(Action::await_change()) };
    for name in ["one", "two", "three"] {
        manager.add(
            Controller::new(
                Api::<ConfigMap>::namespaced(env.client(), "default"),
                watcher::Config::default(),
            )
            .named(name),
            noop,
            Arc::new(()),
        );
    }
    let store = manager.store(
        Api::<ConfigMap>::namespaced(env.client(), "default"),
        watcher::Config::default(),
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(manager.run(async move {
        let _ = rx.await;
    }));
    tokio::time::timeout(Duration::from_secs(10), store.wait_until_ready())
        .await
        .unwrap();
    assert_eq!(store.len(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        env.requests().count(Verb::List, "configmaps"),
        1,
        "one list"
    );
    assert_eq!(
        env.requests().count(Verb::Watch, "configmaps"),
        1,
        "one watch"
    );
    let _ = tx.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn metadata_only_watch_for_cheap_triggers() {
    use kube::core::PartialObjectMeta;
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut big = cm("big");
    big.data = Some([("payload".to_string(), "x".repeat(10_000))].into());
    api.create(&PostParams::default(), &big).await.unwrap();
    let meta: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(env.client(), "default");
    let mut stream = Box::pin(watcher::watcher(meta, watcher::Config::default()));
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if matches!(event, Event::InitDone) {
            api.create(&PostParams::default(), &cm("after"))
                .await
                .unwrap();
        }
        seen.push(match event {
            Event::Init => "init".to_string(),
            Event::InitApply(m) => format!("init-apply {}", m.metadata.name.unwrap()),
            Event::InitDone => "init-done".to_string(),
            Event::Apply(m) => format!("apply {}", m.metadata.name.unwrap()),
            Event::Delete(m) => format!("delete {}", m.metadata.name.unwrap()),
        });
    }
    assert_eq!(seen, ["init", "init-apply big", "init-done", "apply after"]);
}

/// A watcher that lets its list be answered from any version may get an old list (a lagging
/// watch cache); its watch from that list's resourceVersion brings it up to date. One that
/// asks for the most recent state never sees the old list.
#[tokio::test(start_paused = true)]
async fn an_any_version_list_may_be_stale_and_the_watch_catches_up() {
    let env = TestEnv::builder().in_process().start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &cm("old"))
        .await
        .unwrap();
    env.faults()
        .stale_reads(konverge_testkit::Rule::new().verb(Verb::List), 2)
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("new"))
        .await
        .unwrap();

    let mut recent = Box::pin(watcher::watcher(api.clone(), watcher::Config::default()));
    assert_eq!(
        next_events(&mut recent, 4).await,
        ["init", "init-apply new", "init-apply old", "init-done"]
    );
    // kube-rs sends resourceVersion=0 only on an unpaginated list.
    let any = watcher::Config {
        page_size: None,
        ..watcher::Config::default().any_semantic()
    };
    let mut any = Box::pin(watcher::watcher(api.clone(), any));
    assert_eq!(
        next_events(&mut any, 4).await,
        ["init", "init-apply old", "init-done", "apply new"]
    );
    assert_eq!(env.faults().pending_failures(), 1, "one stale list given");
}
