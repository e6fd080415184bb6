//! Waiting for what the server does asynchronously (control loops, caches, admission
//! configuration): one helper for every test file, on tokio's clock, so that it works under
//! paused time too.

use std::future::Future;
use std::time::Duration;

/// How long a wait may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// How often the condition is checked.
const STEP: Duration = Duration::from_millis(10);

/// Waits until `check` holds; fails the test, naming `what`, after ten seconds.
#[allow(dead_code)]
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_some(what, || {
        let checked = check();
        async move { checked.await.then_some(()) }
    })
    .await
}

/// Waits until `check` gives something, and returns it; fails the test, naming `what`, after
/// ten seconds.
#[allow(dead_code)]
pub(crate) async fn eventually_some<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(STEP).await;
    }
}
