//! kubectl against `konverge up --kubelet-rules FILE`: a rule on an image makes its pods
//! crash into CrashLoopBackOff while other pods in the same server run and are Ready, a
//! rule on a label makes its pods' image pulls fail (ErrImagePull, then ImagePullBackOff),
//! and a bad rules file stops `konverge up` before it serves, naming the file, the rule and
//! what is wrong.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Up;
use common::poll::{kubectl, until};
use serde_json::Value;

const RULES: &str = "\
# What the simulated kubelets do with the pods they admit.
- match:
    image: crashy
  exitCode: 1
- match:
    labels:
      app: broken
  imagePull: Fail
";

/// The first container's status of `pod`.
fn container(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_crash_and_fail_pulls_of_the_pods_they_match_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rules = common::write(dir.path(), "rules.yaml", RULES);
    let up = Arc::new(Up::start_with(&[
        "--store",
        "memory",
        "--kubelet-rules",
        &rules,
    ]));

    kubectl(&up, &["run", "c", "--image=crashy"]).await;
    kubectl(&up, &["run", "web", "--image=nginx"]).await;
    kubectl(&up, &["run", "p", "--image=nginx", "--labels=app=broken"]).await;

    // The rule on the image: the container exits 1, and is restarted with a back-off.
    let crashed = until(&up, &["get", "pod", "c"], |pod| {
        let status = container(pod);
        status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            && status["lastState"]["terminated"]["exitCode"] == 1
    })
    .await;
    assert_eq!(
        container(&crashed)["lastState"]["terminated"]["reason"],
        "Error"
    );
    assert!(!is_ready(&crashed));
    let reason = kubectl(
        &up,
        &[
            "get",
            "pod",
            "c",
            "-o",
            "jsonpath={.status.containerStatuses[0].state.waiting.reason}",
        ],
    )
    .await;
    assert_eq!(reason, "CrashLoopBackOff");

    // nginx in the same server matches no rule: it runs and is Ready.
    let web = until(&up, &["get", "pod", "web"], |pod| {
        pod["status"]["phase"] == "Running" && is_ready(pod)
    })
    .await;
    assert_eq!(container(&web)["restartCount"], 0);
    assert!(container(&web)["state"]["running"].is_object());

    // The rule on the label: nginx, but its pull fails.
    let failing = until(&up, &["get", "pod", "p"], |pod| {
        let reason = &container(pod)["state"]["waiting"]["reason"];
        *reason == "ErrImagePull" || *reason == "ImagePullBackOff"
    })
    .await;
    assert_eq!(failing["status"]["phase"], "Pending");
    assert!(!is_ready(&failing));
    until(&up, &["get", "pod", "p"], |pod| {
        container(pod)["state"]["waiting"]["reason"] == "ImagePullBackOff"
    })
    .await;
}

/// Runs `konverge up` with `args`, expecting it to exit before serving; returns its stdout
/// and stderr.
fn fails_to_start(args: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args(["up", "--port", "0", "--store", "memory", "--data-dir"])
        .arg(dir.path())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start konverge up");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("konverge up status").is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("konverge up {args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("konverge up output");
    assert!(!output.status.success(), "konverge up {args:?} succeeded");
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_bad_rules_file_stops_konverge_up_before_it_serves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let typo = common::write(
        dir.path(),
        "rules.yaml",
        "- match: {image: crashy}\n  exitCode: 1\n- match: {image: slow}\n  startSecond: 5\n",
    );
    let (stdout, stderr) = fails_to_start(&["--kubelet-rules", &typo]);
    assert!(!stdout.contains("konverge is ready"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "--kubelet-rules {typo}: rules[1]: unknown field `startSecond`, expected one of \
             `match`, `exitCode`, `imagePull`, `startSeconds`, `neverReady`, `limit`"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let two = common::write(
        dir.path(),
        "two.json",
        r#"[{"match": {"image": "crashy"}, "exitCode": 1, "neverReady": true}]"#,
    );
    let (_, stderr) = fails_to_start(&["--kubelet-rules", &two]);
    assert!(
        stderr.contains(&format!(
            "--kubelet-rules {two}: rules[0]: one behaviour per rule, this one has exitCode, \
             neverReady"
        )),
        "{stderr}"
    );

    let (_, stderr) = fails_to_start(&["--kubelet-rules", &typo.replace("rules", "none")]);
    assert!(stderr.contains("cannot read it"), "{stderr}");

    let good = common::write(dir.path(), "good.yaml", RULES);
    let (_, stderr) = fails_to_start(&["--nodes", "0", "--kubelet-rules", &good]);
    assert!(
        stderr.contains("--kubelet-rules needs simulated nodes, and --nodes is 0"),
        "{stderr}"
    );
}
