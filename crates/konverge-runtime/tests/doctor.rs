//! The doctor against the in-process server, with deliberately broken controllers running
//! beside it: a flapping annotation, a ConfigMap that grows on every write, a finalizer nobody
//! removes, a namespace that cannot finish terminating, an object let go while the last Event
//! about it was a Warning — and a quiet cluster, which must come back clean.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ObjectReference};
use konverge_runtime::doctor::{self, Options, Progress, Report};
use konverge_testkit::{Rule, TestEnv, Verb};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::task::JoinHandle;

/// A short window: real watches need real time.
fn options() -> Options {
    Options {
        window: Duration::from_millis(1500),
        stuck_after: Duration::from_millis(100),
        ..Options::default()
    }
}

async fn create_config_map(client: &Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm).await?;
    Ok(())
}

/// Patches `name` every `every` with `patch(tick)` as `manager`, until aborted.
fn keep_patching(
    client: &Client,
    name: &str,
    manager: &str,
    every: Duration,
    patch: fn(u64) -> serde_json::Value,
) -> JoinHandle<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let name = name.to_string();
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        for tick in 0.. {
            ticks.tick().await;
            let _ = api.patch(&name, &params, &Patch::Merge(patch(tick))).await;
        }
    })
}

async fn diagnose(client: Client) -> anyhow::Result<Report> {
    Ok(doctor::run(client, &options(), |_| {}).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_annotation_is_a_hot_loop_named_with_its_manager_and_path() -> anyhow::Result<()>
{
    let env = TestEnv::start().await;
    let client = env.client();
    create_config_map(&client, "default", "flappy").await?;
    create_config_map(&client, "default", "calm").await?;
    let flapper = keep_patching(
        &client,
        "flappy",
        "flapper",
        Duration::from_millis(50),
        |tick| json!({"metadata": {"annotations": {"example.com/counter": tick.to_string()}}}),
    );

    let report = diagnose(client).await?;
    flapper.abort();

    assert_eq!(report.hot_loops.len(), 1, "{report:#?}");
    let hot = &report.hot_loops[0];
    assert_eq!(hot.object.name, "flappy");
    assert_eq!(hot.object.namespace.as_deref(), Some("default"));
    assert_eq!(hot.object.resource, "configmaps");
    assert!(hot.writes >= 3, "{hot:?}");
    assert!(hot.writes_per_minute > 10.0, "{hot:?}");
    assert_eq!(hot.managers, ["flapper"]);
    assert_eq!(
        hot.changing_paths,
        [r#".metadata.annotations["example.com/counter"]"#]
    );
    // An annotation counting up grows the object by a byte now and then: not growth.
    assert!(report.growth.is_empty(), "{report:#?}");
    assert!(report.has_findings());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_fighting_over_a_label_are_both_named() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    create_config_map(&client, "default", "contested").await?;
    let blue = keep_patching(
        &client,
        "contested",
        "blue-controller",
        Duration::from_millis(60),
        |_| json!({"metadata": {"labels": {"color": "blue"}}}),
    );
    let green = keep_patching(
        &client,
        "contested",
        "green-controller",
        Duration::from_millis(60),
        |_| json!({"metadata": {"labels": {"color": "green"}}}),
    );

    let report = diagnose(client).await?;
    blue.abort();
    green.abort();

    assert_eq!(report.hot_loops.len(), 1, "{report:#?}");
    let hot = &report.hot_loops[0];
    assert_eq!(hot.object.name, "contested");
    assert_eq!(hot.managers, ["blue-controller", "green-controller"]);
    assert_eq!(hot.changing_paths, [".metadata.labels.color"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_installed_during_the_window_is_watched_and_its_flapping_status_found()
-> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    use kube::runtime::wait::{await_condition, conditions};

    let env = TestEnv::start().await;
    let client = env.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.konverge.test"},
        "spec": {
            "group": "konverge.test",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    }))?;
    let resource = ApiResource {
        group: "konverge.test".into(),
        version: "v1".into(),
        api_version: "konverge.test/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let widget = DynamicObject::new("gizmo", &resource).data(json!({"spec": {"size": 1}}));

    // Once the doctor is watching: install the CRD, create a widget, and run the classic
    // status loop, a reconcile that stamps the time into status on every run.
    let (window_open, opened) = tokio::sync::oneshot::channel();
    let operator = tokio::spawn(async move {
        opened.await?;
        crds.create(&PostParams::default(), &crd).await?;
        let ready = await_condition(
            crds,
            "widgets.konverge.test",
            conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(5), ready).await??;
        widgets.create(&PostParams::default(), &widget).await?;
        let params = PatchParams {
            field_manager: Some("widget-operator".into()),
            ..PatchParams::default()
        };
        for tick in 0u64.. {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let status = json!({"status": {"observedAt": format!("tick {tick}")}});
            let _ = widgets
                .patch_status("gizmo", &params, &Patch::Merge(status))
                .await;
        }
        anyhow::Ok(())
    });

    let options = Options {
        window: Duration::from_millis(2500),
        rediscover_every: Duration::from_millis(200),
        ..options()
    };
    let mut window_open = Some(window_open);
    let report = doctor::run(client, &options, |progress| {
        if let Progress::Synced { .. } = progress
            && let Some(open) = window_open.take()
        {
            let _ = open.send(());
        }
    })
    .await?;
    operator.abort();

    assert_eq!(report.hot_loops.len(), 1, "{report:#?}");
    let hot = &report.hot_loops[0];
    assert_eq!(hot.object.resource, "widgets.konverge.test");
    assert_eq!(hot.object.kind, "Widget");
    assert_eq!(hot.object.name, "gizmo");
    assert_eq!(hot.managers, ["widget-operator"]);
    assert_eq!(hot.changing_paths, [".status.observedAt"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_listed_after_the_window_opened_is_baseline_not_writes() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    for name in ["a", "b", "c"] {
        create_config_map(&client, "default", name).await?;
    }
    // ConfigMaps answer their list late, after the window has opened without them.
    env.faults().delay(
        Rule::new().verb(Verb::List).resource("configmaps"),
        Duration::from_millis(600),
    );
    let options = Options {
        sync_timeout: Duration::from_millis(200),
        ..options()
    };

    let report = doctor::run(client, &options, |_| {}).await?;

    assert_eq!(report.writes, 0, "{report:#?}");
    assert!(!report.has_findings(), "{report:#?}");
    assert!(report.unwatched.is_empty(), "{report:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_map_gaining_a_key_each_tick_is_growth() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    create_config_map(&client, "default", "journal").await?;
    let appender = keep_patching(
        &client,
        "journal",
        "journaler",
        Duration::from_millis(100),
        |tick| json!({"data": {format!("entry-{tick}"): "something happened"}}),
    );

    let report = diagnose(client).await?;
    appender.abort();

    assert_eq!(report.growth.len(), 1, "{report:#?}");
    let growth = &report.growth[0];
    assert_eq!(growth.object.name, "journal");
    assert!(growth.last_bytes >= growth.first_bytes + 64, "{growth:?}");
    assert_eq!(growth.growing_writes, growth.writes, "{growth:?}");
    // Written ten times a second, it is a hot loop too; a new key per write reads as one path.
    assert_eq!(report.hot_loops.len(), 1, "{report:#?}");
    assert_eq!(report.hot_loops[0].managers, ["journaler"]);
    assert_eq!(report.hot_loops[0].changing_paths, [".data.*"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_held_by_a_finalizer_names_the_finalizer_and_its_manager() -> anyhow::Result<()>
{
    let env = TestEnv::start().await;
    let client = env.client();
    create_config_map(&client, "default", "held").await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    config_maps
        .patch(
            "held",
            &PatchParams {
                field_manager: Some("cleaner".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/cleanup"]}})),
        )
        .await?;
    config_maps.delete("held", &DeleteParams::default()).await?;

    let report = diagnose(client).await?;

    assert_eq!(report.stuck_deletions.len(), 1, "{report:#?}");
    let stuck = &report.stuck_deletions[0];
    assert_eq!(stuck.object.name, "held");
    assert_eq!(stuck.finalizers.len(), 1);
    assert_eq!(stuck.finalizers[0].finalizer, "example.com/cleanup");
    assert_eq!(stuck.finalizers[0].managers, ["cleaner"]);
    assert!(report.hot_loops.is_empty(), "{report:#?}");
    Ok(())
}

/// Says `reason` about `object` as `cleaner`, with kube's event recorder.
async fn say(
    client: &Client,
    object: &ObjectReference,
    type_: kube::runtime::events::EventType,
    reason: &str,
) -> anyhow::Result<()> {
    use kube::runtime::events::{Event, Recorder, Reporter};
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "cleaner".into(),
            instance: None,
        },
    );
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(format!(
            "{reason} for {}",
            object.name.as_deref().unwrap_or_default()
        )),
        action: "Cleanup".into(),
        secondary: None,
    };
    recorder.publish(&event, object).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_deleted_while_its_last_event_is_a_warning_is_reported() -> anyhow::Result<()> {
    use kube::Resource;
    use kube::runtime::events::EventType::{Normal, Warning};
    let env = TestEnv::start().await;
    let client = env.client();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut refs = Vec::new();
    for name in ["leaked", "cleaned", "failing"] {
        create_config_map(&client, "default", name).await?;
        refs.push(config_maps.get(name).await?.object_ref(&()));
    }
    let [leaked, cleaned, failing] = <[ObjectReference; 3]>::try_from(refs).expect("three");
    // Said before the window opens: the doctor's first list of Events is the baseline.
    say(&client, &cleaned, Warning, "CleanupFailed").await?;
    let (window_open, opened) = tokio::sync::oneshot::channel();
    let cleaner = tokio::spawn({
        let client = client.clone();
        async move {
            opened.await?;
            // Let go first, then the cleanup fails: the Warning comes after the deletion.
            config_maps
                .delete("leaked", &DeleteParams::default())
                .await?;
            say(&client, &leaked, Warning, "CleanupFailed").await?;
            // Failed once, then cleaned up, then let go.
            say(&client, &cleaned, Normal, "Deleted").await?;
            config_maps
                .delete("cleaned", &DeleteParams::default())
                .await?;
            // Failing, but still here.
            say(&client, &failing, Warning, "CleanupFailed").await?;
            anyhow::Ok(())
        }
    });

    let mut window_open = Some(window_open);
    let report = doctor::run(client, &options(), |progress| {
        if let Progress::Synced { .. } = progress
            && let Some(open) = window_open.take()
        {
            let _ = open.send(());
        }
    })
    .await?;
    cleaner.await??;

    assert!(report.has_findings());
    assert_eq!(report.deleted_after_warning.len(), 1, "{report:#?}");
    let found = &report.deleted_after_warning[0];
    assert_eq!(found.object.name, "leaked");
    assert_eq!(found.object.resource, "configmaps");
    assert_eq!(found.reason, "CleanupFailed");
    assert_eq!(found.note, "CleanupFailed for leaked");
    assert_eq!(found.reporting_controller, "cleaner");
    assert!(report.unwatched.is_empty(), "{report:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_stuck_terminating_says_what_is_left_in_it() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let team = Namespace {
        metadata: ObjectMeta {
            name: Some("team".into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces.create(&PostParams::default(), &team).await?;
    create_config_map(&client, "team", "held").await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    config_maps
        .patch(
            "held",
            &PatchParams {
                field_manager: Some("cleaner".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/cleanup"]}})),
        )
        .await?;
    namespaces.delete("team", &DeleteParams::default()).await?;

    let report = diagnose(client).await?;

    assert_eq!(report.terminating_namespaces.len(), 1, "{report:#?}");
    let team = &report.terminating_namespaces[0];
    assert_eq!(team.name, "team");
    assert_eq!(team.remaining.get("configmaps"), Some(&1), "{team:?}");
    assert!(
        report
            .stuck_deletions
            .iter()
            .any(|s| s.object.name == "held" && s.finalizers[0].managers == ["cleaner"]),
        "{report:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_cluster_has_a_clean_report() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    create_config_map(&client, "default", "calm").await?;

    let report = diagnose(client).await?;

    assert!(!report.has_findings(), "{report:#?}");
    assert!(report.unwatched.is_empty(), "{report:#?}");
    assert!(report.resources > 10, "{report:#?}");
    assert!(report.objects >= 1);
    assert_eq!(report.writes, 0, "{report:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relists_after_cut_watches_and_expired_history_count_each_write_once() -> anyhow::Result<()>
{
    let env = TestEnv::start().await;
    let client = env.client();
    create_config_map(&client, "default", "calm").await?;
    create_config_map(&client, "default", "doomed").await?;
    let faults = env.faults();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (window_open, opened) = tokio::sync::oneshot::channel();
    let chaos = tokio::spawn(async move {
        opened.await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Written and deleted while the watches are down (they come back 400 ms late) and
        // their history is gone: the relist must see one update and one deletion.
        faults.delay(Rule::new().verb(Verb::Watch), Duration::from_millis(400));
        faults.drop_watches();
        config_maps
            .patch(
                "calm",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"a": "1"}})),
            )
            .await?;
        config_maps
            .delete("doomed", &DeleteParams::default())
            .await?;
        faults.expire_history().await?;
        anyhow::Ok(())
    });

    let mut window_open = Some(window_open);
    let report = doctor::run(client, &options(), |progress| {
        if let Progress::Synced { .. } = progress
            && let Some(open) = window_open.take()
        {
            let _ = open.send(());
        }
    })
    .await?;
    chaos.await??;

    assert!(
        env.requests().count(Verb::List, "configmaps") >= 2,
        "the doctor relisted"
    );
    assert!(!report.has_findings(), "{report:#?}");
    assert_eq!(report.writes, 2, "{report:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_renewed_often_are_heartbeats_not_hot_loops() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = TestEnv::start().await;
    let client = env.client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("leader".into()),
            ..ObjectMeta::default()
        },
        ..Lease::default()
    };
    leases.create(&PostParams::default(), &lease).await?;
    let renewer = tokio::spawn(async move {
        for tick in 0u64.. {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let renew = json!({"spec": {"leaseDurationSeconds": 1 + tick % 100}});
            let _ = leases
                .patch("leader", &PatchParams::default(), &Patch::Merge(renew))
                .await;
        }
    });

    let report = diagnose(client).await?;
    renewer.abort();

    assert!(report.writes >= 5, "{report:#?}");
    assert!(report.hot_loops.is_empty(), "{report:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_over_the_size_warning_are_reported() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let big = ConfigMap {
        metadata: ObjectMeta {
            name: Some("big".into()),
            ..ObjectMeta::default()
        },
        data: Some([("blob".to_string(), "x".repeat(40 * 1024))].into()),
        ..ConfigMap::default()
    };
    config_maps.create(&PostParams::default(), &big).await?;

    // 2% of 1.5 MiB is 31,457 bytes.
    let options = Options {
        size_warn_percent: 2,
        ..options()
    };
    let report = doctor::run(client, &options, |_| {}).await?;

    assert_eq!(report.large_objects.len(), 1, "{report:#?}");
    let large = &report.large_objects[0];
    assert_eq!(large.object.name, "big");
    assert!(large.bytes > 40 * 1024, "{large:?}");
    assert!((2.6..2.8).contains(&large.percent_of_limit), "{large:?}");
    Ok(())
}

/// A writer that keeps updating with a stale resourceVersion makes a conflict storm, read
/// from the server's own request counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_storm_is_read_from_the_servers_metrics() -> anyhow::Result<()> {
    let env = TestEnv::start().await;
    let client = env.client();
    create_config_map(&client, "default", "contested").await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut stale = api.get("contested").await?;
    // Move it on, so the copy above is stale from now on.
    api.patch(
        "contested",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await?;
    stale.data = Some([("x".to_string(), "2".to_string())].into());
    let storm = tokio::spawn(async move {
        loop {
            let _ = api
                .replace("contested", &PostParams::default(), &stale)
                .await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let report = diagnose(client).await?;
    storm.abort();
    assert!(report.server_metrics);
    let trouble = report
        .request_trouble
        .iter()
        .find(|t| t.resource == "configmaps" && t.verb == "PUT")
        .unwrap_or_else(|| panic!("no conflict storm in {:#?}", report.request_trouble));
    assert!(trouble.conflicts >= 10, "{trouble:?}");
    assert_eq!(trouble.conflicts, trouble.requests, "{trouble:?}");
    assert!(report.has_findings());
    Ok(())
}
