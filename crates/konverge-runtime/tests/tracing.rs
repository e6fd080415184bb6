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

async fn fails_three_times(
    _cm: Arc<ConfigMap>,
    attempts: Arc<Mutex<Vec<String>>>,
) -> Result<Action, FirstAttempt> {
    let mut attempts = attempts.lock().unwrap();
    attempts.push(reconcile::current().expect("inside a reconcile").id);
    if attempts.len() <= 3 {
        return Err(FirstAttempt);
    }
    Ok(Action::await_change())
}

/// Runs a controller of the ConfigMaps labelled `app=<name>` (named `name`, its failures
/// quiet for `quiet` retries) until `reconcile` has run `attempts` times on one such
/// ConfigMap, and returns the log lines at `level` and above, and each attempt's reconcile id
/// (in paused time, in-process: the retries after failures take no real time).
async fn run_logged<F, Fut>(
    name: &str,
    level: tracing::Level,
    quiet: u32,
    reconcile: F,
    attempts: usize,
) -> (String, Vec<String>)
where
    F: Fn(Arc<ConfigMap>, Arc<Mutex<Vec<String>>>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Action, FirstAttempt>> + Send + 'static,
{
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(level)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let env = TestEnv::builder().in_process().start().await;
    let client: Client = env.client();
    let ids = Arc::new(Mutex::new(Vec::new()));
    let mut manager = Manager::new(client.clone());
    let controller = Controller::new(
        Api::<ConfigMap>::namespaced(client.clone(), "default"),
        watcher::Config::default().labels(&format!("app={name}")),
    )
    .named(name)
    .quiet_retries(quiet);
    manager.add(controller, reconcile, ids.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async move {
        let _ = stopped.await;
    }));
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), name.to_string())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client, "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while ids.lock().unwrap().len() < attempts {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{attempts} reconciles"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(());
    running.await.unwrap().unwrap();
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let ids = ids.lock().unwrap().clone();
    (text, ids)
}

#[tokio::test(start_paused = true)]
async fn reconcile_logs_carry_controller_object_and_reconcile_id() {
    let (text, ids) = run_logged("traced", tracing::Level::INFO, 0, reconcile, 2).await;
    assert_ne!(ids[0], ids[1], "each attempt has its own id");
    for id in &ids {
        let span =
            format!("reconcile{{controller=traced object=default/traced reconcile_id={id}}}");
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

/// With `quiet_retries(2)`, the first two failures of an object in a row are logged at debug
/// level and the third at warn, as kube-controller-manager's controllers log a failed sync
/// at verbosity 2 until their `maxRetries`.
#[tokio::test(start_paused = true)]
async fn quiet_retries_log_routine_failures_at_debug_until_they_persist() {
    let (text, attempts) =
        run_logged("quiet", tracing::Level::DEBUG, 2, fails_three_times, 4).await;
    let level_of_failure = |id: &str| {
        let span = format!("reconcile_id={id}}}");
        let line = text
            .lines()
            .find(|l| l.contains(&span) && l.contains("reconcile failed"))
            .unwrap_or_else(|| panic!("a failure line in {span}:\n{text}"));
        ["DEBUG", "WARN"]
            .into_iter()
            .find(|level| line.contains(level))
            .unwrap_or_else(|| panic!("a level in {line}"))
    };
    let levels: Vec<&str> = attempts[..3]
        .iter()
        .map(|id| level_of_failure(id))
        .collect();
    assert_eq!(levels, ["DEBUG", "DEBUG", "WARN"], "{text}");
    let succeeded = format!("reconcile_id={}}}", attempts[3]);
    assert!(
        !text
            .lines()
            .any(|l| l.contains(&succeeded) && l.contains("reconcile failed")),
        "{text}"
    );
}
