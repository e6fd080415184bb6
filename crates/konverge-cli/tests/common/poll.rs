//! kubectl from async tests, and polling it with a deadline (on the real clock: the server
//! is another process).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Up;

/// Runs kubectl on a blocking thread; returns stdout, panics with stderr on failure.
pub(crate) async fn kubectl(up: &Arc<Up>, args: &[&str]) -> String {
    let (up, args): (Arc<Up>, Vec<String>) =
        (up.clone(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        up.ok(&args)
    })
    .await
    .expect("kubectl ran")
}

/// Runs kubectl on a blocking thread with `stdin`; returns the exit code, stdout and stderr.
pub(crate) async fn kubectl_run(
    up: &Arc<Up>,
    args: &[&str],
    stdin: Option<&str>,
) -> (Option<i32>, String, String) {
    let (up, args, stdin): (Arc<Up>, Vec<String>, Option<String>) = (
        up.clone(),
        args.iter().map(|a| a.to_string()).collect(),
        stdin.map(str::to_string),
    );
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        up.run(&args, stdin.as_deref())
    })
    .await
    .expect("kubectl ran")
}

/// `kubectl apply -f -` of `manifest`; returns stdout.
pub(crate) async fn apply(up: &Arc<Up>, manifest: &str) -> String {
    let (code, out, err) = kubectl_run(up, &["apply", "-f", "-"], Some(manifest)).await;
    assert_eq!(code, Some(0), "kubectl apply failed:\n{err}\n{out}");
    out
}

/// `args` with `-o json`, parsed.
pub(crate) async fn json(up: &Arc<Up>, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    serde_json::from_str(&kubectl(up, &full).await).expect("kubectl -o json")
}

/// Polls `args` (as JSON) until `done` holds, for at most 40 seconds (a busy machine runs
/// kubectl slowly).
pub(crate) async fn until(up: &Arc<Up>, args: &[&str], done: impl Fn(&Value) -> bool) -> Value {
    until_within(up, Duration::from_secs(40), args, done).await
}

/// Polls `args` (as JSON) every 100 ms until `done` holds; panics with the last answer
/// after `deadline`.
pub(crate) async fn until_within(
    up: &Arc<Up>,
    deadline: Duration,
    args: &[&str],
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let value = json(up, args).await;
        if done(&value) {
            return value;
        }
        if start.elapsed() > deadline {
            panic!("kubectl {args:?}: not there within {deadline:?}; last:\n{value:#}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
