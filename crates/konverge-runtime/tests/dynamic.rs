//! Controllers over kinds known only at run time (`DynamicObject` with an `ApiResource` from
//! discovery), and error policies on top of the error classes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::cache::Index;
use konverge_runtime::reconcile::{ErrorClass, OnError};
use konverge_runtime::{Action, Controller, Manager, ObjectKey, TerminalError, watcher};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

mod support;
use support::{eventually, in_process};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string}
"#;

/// The Widget kind, as discovery finds it.
async fn widgets(client: &Client) -> ApiResource {
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((resource, caps)) => {
                assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
                return resource;
            }
            Err(error) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "Widget never discovered: {error}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

async fn create_widget(client: &Client, ar: &ApiResource, name: &str, color: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", ar);
    let widget = json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "labels": {"team": "paint"}},
        "spec": {"color": color},
    });
    api.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&widget),
    )
    .await
    .unwrap();
}

struct Ctx {
    client: Client,
    resource: ApiResource,
}

/// Keeps a ConfigMap `<widget>-paint`, owned by the widget, holding the widget's color.
async fn paint(widget: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let color = widget.data["spec"]["color"].as_str().unwrap_or("none");
    let owner = widget
        .controller_owner_ref(&ctx.resource)
        .expect("widgets from the server have a uid");
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("{}-paint", widget.name_any()), "ownerReferences": [owner]},
        "data": {"color": color},
    });
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    api.patch(
        &format!("{}-paint", widget.name_any()),
        &PatchParams::apply("painter").force(),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(Action::await_change())
}

async fn color_of(client: &Client, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = api.get_opt(name).await.ok().flatten()?;
    cm.data?.get("color").cloned()
}

#[tokio::test(start_paused = true)]
async fn a_controller_over_a_kind_found_by_discovery() {
    let env = in_process().await;
    env.apply_manifests(CRD).await.unwrap();
    let client = env.client();
    let ar = widgets(&client).await;
    for (name, color) in [("b", "blue"), ("a", "red")] {
        create_widget(&client, &ar, name, color).await;
    }

    let mut manager = Manager::new(client.clone());
    let controller = Controller::new_with(
        Api::<DynamicObject>::all_with(client.clone(), &ar),
        watcher::Config::default(),
        &ar,
    )
    .index(Index::labels())
    .owns_with(
        Api::<DynamicObject>::all_with(client.clone(), &ApiResource::erase::<ConfigMap>(&())),
        watcher::Config::default(),
        &ApiResource::erase::<ConfigMap>(&()),
    );
    let store = manager.store_with_index(
        Api::<DynamicObject>::all_with(client.clone(), &ar),
        watcher::Config::default(),
        Index::labels(),
    );
    let store = store.unwrap();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        resource: ar.clone(),
    });
    manager.add(controller, paint, ctx);
    let running = manager.spawn();

    eventually("both widgets painted", || async {
        color_of(&client, "a-paint").await.as_deref() == Some("red")
            && color_of(&client, "b-paint").await.as_deref() == Some("blue")
    })
    .await;
    // The ordered cache and its indexes work for dynamic objects.
    let names: Vec<String> = store.list().iter().map(|w| w.name_any()).collect();
    assert_eq!(names, ["a", "b"]);
    let painted: Vec<String> = store
        .by_label("team", "paint")
        .unwrap()
        .iter()
        .map(|w| w.name_any())
        .collect();
    assert_eq!(painted, ["a", "b"]);
    assert_eq!(
        store
            .get(&ObjectKey::namespaced("default", "a"))
            .unwrap()
            .types
            .as_ref()
            .unwrap()
            .kind,
        "Widget"
    );
    // Cached objects leave out managedFields (the widgets were server-side applied).
    assert!(
        store
            .list()
            .iter()
            .all(|w| w.meta().managed_fields.is_none())
    );

    // A change to the widget, and a child changed behind the controller's back, both
    // reconcile again.
    create_widget(&client, &ar, "a", "green").await;
    eventually("the new color", || async {
        color_of(&client, "a-paint").await.as_deref() == Some("green")
    })
    .await;
    let children: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    children
        .patch(
            "b-paint",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "scribbled"}})),
        )
        .await
        .unwrap();
    eventually("the owned child restored", || async {
        color_of(&client, "b-paint").await.as_deref() == Some("blue")
    })
    .await;
    running.stop().await.unwrap();
}

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error("upstream unavailable")]
    Upstream,
    #[error("bad input")]
    Invalid(#[source] TerminalError),
}

fn labelled(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("policy".to_string(), "test".to_string())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_policy_overrides_the_classes() {
    let env = in_process().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["poll", "give-up", "default-terminal"] {
        api.create(&Default::default(), &labelled(name))
            .await
            .unwrap();
    }
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let polled: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let policy_calls = Arc::new(AtomicUsize::new(0));
    let seen = policy_calls.clone();

    let mut manager = Manager::new(client.clone());
    let controller = Controller::new(
        Api::<ConfigMap>::all(client.clone()),
        watcher::Config::default().labels("policy=test"),
    )
    .named("policy")
    .error_policy(move |cm: &ConfigMap, error, class| {
        seen.fetch_add(1, Ordering::SeqCst);
        match (cm.name_any().as_str(), class) {
            // A dependency outside the cluster: poll it at a fixed pace.
            ("poll", ErrorClass::Retry) => OnError::Requeue(Duration::from_millis(20)),
            // A kube-runtime style policy: wait for the next change.
            ("give-up", ErrorClass::Retry) => {
                assert_eq!(error.to_string(), "upstream unavailable");
                Action::await_change().into()
            }
            (_, class) => class.into(),
        }
    });
    let (recorded, times) = (calls.clone(), polled.clone());
    manager.add(
        controller,
        move |cm: Arc<ConfigMap>, _: Arc<()>| {
            let (recorded, times) = (recorded.clone(), times.clone());
            async move {
                let name = cm.name_any();
                recorded.lock().unwrap().push(name.clone());
                if name == "poll" {
                    times.lock().unwrap().push(tokio::time::Instant::now());
                }
                match name.as_str() {
                    "default-terminal" => Err(AppError::Invalid(TerminalError::new("no"))),
                    _ => Err(AppError::Upstream),
                }
            }
        },
        Arc::new(()),
    );
    let metrics = manager.metrics();
    let running = manager.spawn();
    let count = |name: &str| calls.lock().unwrap().iter().filter(|c| *c == name).count();
    eventually("the polled object retried at the policy's pace", || async {
        count("poll") >= 5
    })
    .await;
    running.stop().await.unwrap();
    assert_eq!(count("give-up"), 1, "await_change: not retried");
    assert_eq!(count("default-terminal"), 1, "terminal: not retried");
    assert!(policy_calls.load(Ordering::SeqCst) >= 7);
    let text = metrics.encode();
    assert!(
        text.contains(
            r#"controller_runtime_terminal_reconcile_errors_total{controller="policy"} 1"#
        ),
        "{text}"
    );
    // The polled object was requeued after the policy's delay (virtual time: exact), never
    // through the growing per-object backoff.
    let times = polled.lock().unwrap().clone();
    for pair in times.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(20) && gap < Duration::from_millis(21),
            "{gap:?}"
        );
    }
    assert!(
        text.contains(r#"workqueue_retries_total{controller="policy",name="policy"} 0"#),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_controller_over_metadata_only() {
    let env = in_process().await;
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["y", "x"] {
        api.create(&Default::default(), &labelled(name))
            .await
            .unwrap();
    }
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut manager = Manager::new(client.clone());
    let controller = Controller::new(
        Api::<kube::core::PartialObjectMeta<ConfigMap>>::all(client.clone()),
        watcher::Config::default().labels("policy=test"),
    );
    let recorded = seen.clone();
    manager.add(
        controller,
        move |cm: Arc<kube::core::PartialObjectMeta<ConfigMap>>, _: Arc<()>| {
            let recorded = recorded.clone();
            async move {
                recorded.lock().unwrap().push(cm.name_any());
                Ok::<_, kube::Error>(Action::await_change())
            }
        },
        Arc::new(()),
    );
    let running = manager.spawn();
    eventually("both reconciled, in key order", || async {
        seen.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), ["x", "y"]);
    running.stop().await.unwrap();
}
