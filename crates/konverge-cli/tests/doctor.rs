//! The built `konverge doctor` against `konverge up` (HTTPS, generated kubeconfig) while a
//! broken controller flaps an annotation: exit code 1, the hot loop in the text report, and a
//! JSON report tools can parse.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn doctor(up: &common::Up, extra: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_konverge"))
        .arg("doctor")
        .arg("--kubeconfig")
        .arg(up.kubeconfig())
        .args(["--for", "2s"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start konverge doctor")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_a_flapping_annotation_and_exits_1() -> anyhow::Result<()> {
    let up = common::Up::start();
    let kubeconfig = kube::config::Kubeconfig::read_from(up.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config)?, "default");
    let flappy = ConfigMap {
        metadata: ObjectMeta {
            name: Some("flappy".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    config_maps.create(&PostParams::default(), &flappy).await?;
    let flapper = tokio::spawn(async move {
        let params = PatchParams {
            field_manager: Some("flapper".into()),
            ..PatchParams::default()
        };
        let mut ticks = tokio::time::interval(Duration::from_millis(50));
        for tick in 0u64.. {
            ticks.tick().await;
            let patch = json!({"metadata": {"annotations": {"last-run": tick.to_string()}}});
            let _ = config_maps
                .patch("flappy", &params, &Patch::Merge(patch))
                .await;
        }
    });

    // Both formats watch the same two seconds.
    let as_text = doctor(&up, &[]);
    let as_json = doctor(&up, &["-o", "json"]);
    let (as_text, as_json) = tokio::task::spawn_blocking(move || {
        (
            as_text.wait_with_output().expect("doctor output"),
            as_json.wait_with_output().expect("doctor output"),
        )
    })
    .await?;
    flapper.abort();

    let (stdout, stderr) = text(&as_text);
    assert_eq!(as_text.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Hot loops (written more than 10 times a minute):"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  default/flappy (configmaps): "),
        "{stdout}"
    );
    assert!(stdout.contains("    written by: flapper\n"), "{stdout}");
    assert!(
        stdout.contains("    changing:   .metadata.annotations.last-run\n"),
        "{stdout}"
    );
    assert!(stderr.contains("konverge doctor: listed "), "{stderr}");

    let (stdout, stderr) = text(&as_json);
    assert_eq!(as_json.status.code(), Some(1), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout)?;
    let hot = &report["hot_loops"][0];
    assert_eq!(hot["object"]["name"], "flappy", "{report:#}");
    assert_eq!(hot["managers"], json!(["flapper"]), "{report:#}");
    assert_eq!(report["stuck_deletions"], json!([]), "{report:#}");
    Ok(())
}

#[test]
fn doctor_exits_2_when_it_cannot_look() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("no-such-kubeconfig");
    let output = Command::new(env!("CARGO_BIN_EXE_konverge"))
        .arg("doctor")
        .arg("--kubeconfig")
        .arg(&missing)
        .output()
        .expect("run konverge doctor");
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("no-such-kubeconfig"), "{stderr}");
}
