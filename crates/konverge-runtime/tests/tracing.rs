//! Every reconcile runs in a tracing span naming the controller, the object and a reconcile
//! id, so each log line of a reconcile — the reconciler's own and the runtime's — says which
//! object and which attempt it belongs to. (In paused time, in-process: the retry after the
//! first attempt's failure takes no real time.)

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use konverge_runtime::{Action, Controller, Manager, reconcile, watcher};
use konverge_testkit::TestEnv;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::oneshot;

/// Log lines, captured.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the first attempt always fails")]
struct FirstAttempt;

async fn reconcile(
    cm: Arc<ConfigMap>,
    ids: Arc<Mutex<Vec<String>>>,
) -> Result<Action, FirstAttempt> {
    let scope = reconcile::current().expect("inside a reconcile");
    tracing::info!(data = ?cm.data, "reconciler speaking");
    let mut ids = ids.lock().unwrap();
    ids.push(scope.id);
    if ids.len() == 1 {
        return Err(FirstAttempt);
    }
    Ok(Action::await_change())
}

#[tokio::test(start_paused = true)]
async fn reconcile_logs_carry_controller_object_and_reconcile_id() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let env = TestEnv::builder().in_process().start().await;
    let client: Client = env.client();
    let ids = Arc::new(Mutex::new(Vec::new()));
    let mut manager = Manager::new(client.clone());
    let controller = Controller::new(
        Api::<ConfigMap>::namespaced(client.clone(), "default"),
        watcher::Config::default().labels("app=traced"),
    )
    .named("tracer");
    manager.add(controller, reconcile, ids.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async move {
        let _ = stopped.await;
    }));
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("traced".into()),
            labels: Some([("app".to_string(), "traced".to_string())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client, "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while ids.lock().unwrap().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "two reconciles");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(());
    running.await.unwrap().unwrap();

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let ids = ids.lock().unwrap().clone();
    assert_ne!(ids[0], ids[1], "each attempt has its own id");
    for id in &ids {
        let span =
            format!("reconcile{{controller=tracer object=default/traced reconcile_id={id}}}");
        assert!(
            text.lines()
                .any(|l| l.contains(&span) && l.contains("reconciler speaking")),
            "the reconciler's own line carries {span}:\n{text}"
        );
    }
    // The runtime's line about the failure is in the failed attempt's span.
    let failed = format!("reconcile_id={}}}", ids[0]);
    assert!(
        text.lines()
            .any(|l| l.contains(&failed) && l.contains("reconcile failed")),
        "{text}"
    );
}
