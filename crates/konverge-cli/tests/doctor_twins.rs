//! Each reference operator's broken twin, run beside `konverge up`, is caught by the built
//! `konverge doctor` watching the cluster meanwhile: the aggregator that never prunes grows
//! its target, the app operator that writes its status on every pass loops, and the bucket
//! operator that lets a Bucket go before deleting its cloud bucket leaves a Bucket deleted
//! after a Warning. The correct operators, driven the same way and watched with the same
//! flags, come back clean (exit code 0).
//!
//! Each operator runs in this process, on its own `konverge up`; the twin and the correct one
//! are driven at the same time. A doctor run watches for [`WINDOW_SECS`], started before the
//! drive, which begins once the doctor says its window is open.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use konverge_example_aggregator as aggregator;
use konverge_example_app_operator as app_operator;
use konverge_example_bucket_operator as bucket_operator;
use konverge_runtime::{Manager, RunningManager};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long each doctor watches.
const WINDOW_SECS: u64 = 5;
/// More writes than this to one object during the window make a hot loop (`--hot-writes` is
/// set to this many per window: a window of seconds is extrapolated to a minute). The drives
/// cause up to six: a correct aggregator writes its target twice per round (the round's key
/// added, then pruned), for three rounds. The app operator's twin writes its App nine times
/// at least: konverge-runtime backs it off only after 8 echoes of its own writes.
const WRITES_NOT_A_LOOP: u64 = 7;
/// What the drive waits for at most, each time it waits for a controller.
const PATIENCE: Duration = Duration::from_secs(10);

/// The finding lists of a JSON report.
const FINDINGS: [&str; 7] = [
    "hot_loops",
    "growth",
    "large_objects",
    "stuck_deletions",
    "terminating_namespaces",
    "deleted_after_warning",
    "request_trouble",
];

/// `konverge up` and a client for it.
struct Cluster {
    up: common::Up,
    client: Client,
}

impl Cluster {
    async fn start() -> anyhow::Result<Cluster> {
        // An API server alone: the twins' own writes are what the doctor must find, not a
        // Deployment's status filling in as kube-controller-manager's controllers roll it out.
        let up = tokio::task::spawn_blocking(|| {
            common::Up::start_with(&["--controllers", "", "--nodes", "0"])
        })
        .await?;
        let kubeconfig = kube::config::Kubeconfig::read_from(up.kubeconfig())?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(Cluster {
            client: Client::try_from(config)?,
            up,
        })
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), "default")
    }
}

/// A `konverge doctor` whose window is open.
struct Doctor {
    child: tokio::process::Child,
    stderr: tokio::task::JoinHandle<String>,
}

/// What a doctor run printed, and its exit code.
struct Finished {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Doctor {
    /// Starts `konverge doctor` against `cluster` (with `extra` arguments) and returns once
    /// it says its window is open.
    async fn watching(cluster: &Cluster, extra: &[&str]) -> anyhow::Result<Doctor> {
        let hot_writes = WRITES_NOT_A_LOOP * 60 / WINDOW_SECS;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_konverge"))
            .arg("doctor")
            .arg("--kubeconfig")
            .arg(cluster.up.kubeconfig())
            .args(["--for", &format!("{WINDOW_SECS}s")])
            .args(["--hot-writes", &hot_writes.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("start konverge doctor")?;
        let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
        let mut said = String::new();
        let opened = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await? {
                said.push_str(&line);
                said.push('\n');
                if line.starts_with("konverge doctor: listed ") && line.ends_with("; watching") {
                    return Ok(true);
                }
            }
            Ok::<_, std::io::Error>(false)
        })
        .await;
        ensure!(
            matches!(opened, Ok(Ok(true))),
            "the doctor's window never opened ({opened:?}):\n{said}"
        );
        let stderr = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                said.push_str(&line);
                said.push('\n');
            }
            said
        });
        Ok(Doctor { child, stderr })
    }

    async fn finish(self) -> anyhow::Result<Finished> {
        let output = self.child.wait_with_output().await?;
        Ok(Finished {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: self.stderr.await?,
        })
    }
}

impl Finished {
    fn report(&self) -> anyhow::Result<Value> {
        serde_json::from_str(&self.stdout)
            .with_context(|| format!("not a JSON report:\n{}\n{}", self.stdout, self.stderr))
    }

    /// Every finding of the report, as (kind, finding).
    fn findings(&self) -> anyhow::Result<Vec<(&'static str, Value)>> {
        let report = self.report()?;
        let mut found = Vec::new();
        for kind in FINDINGS {
            let list = report[kind]
                .as_array()
                .with_context(|| format!("no {kind} in {report:#}"))?;
            found.extend(list.iter().map(|finding| (kind, finding.clone())));
        }
        Ok(found)
    }

    /// The findings of `kind` about the object `namespace/name` of `resource`.
    fn about(&self, kind: &str, resource: &str, name: &str) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .findings()?
            .into_iter()
            .filter(|(k, finding)| {
                *k == kind
                    && finding["object"]["resource"] == resource
                    && finding["object"]["namespace"] == "default"
                    && finding["object"]["name"] == name
            })
            .map(|(_, finding)| finding)
            .collect())
    }

    /// Exit code 1, and at least one finding of `kind` about the object; returns the first.
    fn caught(&self, kind: &str, resource: &str, name: &str) -> anyhow::Result<Value> {
        let report = self.report()?;
        ensure!(
            self.code == Some(1),
            "exit code {:?}: {report:#}",
            self.code
        );
        let about = self.about(kind, resource, name)?;
        match about.into_iter().next() {
            Some(finding) => Ok(finding),
            None => bail!("no {kind} about {resource} default/{name} in {report:#}"),
        }
    }

    /// Exit code 0 and no finding at all, having seen the drive's writes.
    fn clean(&self) -> anyhow::Result<()> {
        let report = self.report()?;
        let findings = self.findings()?;
        ensure!(
            self.code == Some(0) && findings.is_empty(),
            "exit code {:?}, findings {findings:#?}\n{report:#}",
            self.code
        );
        ensure!(
            report["writes"].as_u64() > Some(0),
            "no writes seen: {report:#}"
        );
        ensure!(report["unwatched"] == json!([]), "{report:#}");
        Ok(())
    }
}

/// Polls `check` until it says yes, for [`PATIENCE`] at most.
async fn until<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if check().await? {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("gave up waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn labelled(name: &str, label: (&str, &str), data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(label.0.to_string(), label.1.to_string())].into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// The aggregator's target's data.
async fn target_data(config_maps: &Api<ConfigMap>) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(config_maps.get("all").await?.data.unwrap_or_default())
}

/// The aggregator, merging sources into `all`, while three sources come and go: each round a
/// source is made, the target is waited for, and the source is deleted. Returns the doctor's
/// run and the target's data at the end.
async fn aggregator(
    mode: aggregator::Mode,
) -> anyhow::Result<(Finished, BTreeMap<String, String>)> {
    let cluster = Cluster::start().await?;
    let config_maps = cluster.config_maps();
    let post = PostParams::default();
    config_maps
        .create(&post, &labelled("all", (aggregator::TARGET, "true"), &[]))
        .await?;
    config_maps
        .create(
            &post,
            &labelled("base", (aggregator::INTO, "all"), &[("value", "1")]),
        )
        .await?;
    let mut manager = Manager::new(cluster.client.clone());
    let client = cluster.client.clone();
    manager.add(
        aggregator::controller(&client),
        aggregator::reconcile,
        Arc::new(aggregator::Context { client, mode }),
    );
    let _running = manager.spawn();
    until("the target holds base.value", || async {
        Ok(target_data(&config_maps).await?.contains_key("base.value"))
    })
    .await?;

    let doctor = Doctor::watching(&cluster, &["-o", "json"]).await?;
    for round in 0..3 {
        let source = format!("source-{round}");
        let key = format!("{source}.value");
        config_maps
            .create(
                &post,
                &labelled(
                    &source,
                    (aggregator::INTO, "all"),
                    &[("value", "0123456789abcdef")],
                ),
            )
            .await?;
        until(&format!("the target holds {key}"), || async {
            Ok(target_data(&config_maps).await?.contains_key(&key))
        })
        .await?;
        config_maps
            .delete(&source, &DeleteParams::default())
            .await?;
        // A correct aggregator prunes the key now; the twin never will.
        if mode == aggregator::Mode::Correct {
            until(&format!("the target no longer holds {key}"), || async {
                Ok(!target_data(&config_maps).await?.contains_key(&key))
            })
            .await?;
        }
    }
    let finished = doctor.finish().await?;
    Ok((finished, target_data(&config_maps).await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aggregator_that_never_prunes_is_caught_growing() -> anyhow::Result<()> {
    let ((twin, twin_target), (correct, correct_target)) = tokio::try_join!(
        aggregator(aggregator::Mode::NeverPrunes),
        aggregator(aggregator::Mode::Correct),
    )?;

    let growth = twin.caught("growth", "configmaps", "all")?;
    assert_eq!(growth["growing_writes"], 3, "{growth:#}");
    assert!(
        growth["last_bytes"].as_u64() > growth["first_bytes"].as_u64(),
        "{growth:#}"
    );
    // The growth is real: every key any source ever had is still there.
    let keys: Vec<&str> = twin_target.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "base.value",
            "source-0.value",
            "source-1.value",
            "source-2.value"
        ]
    );

    correct.clean()?;
    let keys: Vec<&str> = correct_target.keys().map(String::as_str).collect();
    assert_eq!(keys, ["base.value"]);
    Ok(())
}

/// The App `web`'s Ready condition status, if any.
fn ready(app: &app_operator::App) -> Option<String> {
    app.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// The app operator, with an App created once the doctor's window is open. Returns the
/// doctor's run and the App at the end.
async fn app(mode: app_operator::Mode) -> anyhow::Result<(Finished, app_operator::App)> {
    let cluster = Cluster::start().await?;
    konverge_runtime::crd::install(&cluster.client, &app_operator::App::crd(), "test", PATIENCE)
        .await?;
    let mut manager = Manager::new(cluster.client.clone());
    let client = cluster.client.clone();
    manager.add(
        app_operator::controller(&client, mode),
        app_operator::reconcile,
        Arc::new(app_operator::Context { client, mode }),
    );
    let _running = manager.spawn();
    let apps: Api<app_operator::App> = Api::namespaced(cluster.client.clone(), "default");

    let doctor = Doctor::watching(&cluster, &["-o", "json"]).await?;
    let web = app_operator::App::new(
        "web",
        app_operator::AppSpec {
            image: "nginx:1.27".into(),
            replicas: 1,
            config: BTreeMap::from([("MODE".to_string(), "fast".to_string())]),
        },
    );
    apps.create(&PostParams::default(), &web).await?;
    until("web is Ready", || async {
        Ok(ready(&apps.get("web").await?).as_deref() == Some("True"))
    })
    .await?;
    let finished = doctor.finish().await?;
    Ok((finished, apps.get("web").await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_operator_that_writes_its_status_every_pass_is_caught_looping() -> anyhow::Result<()>
{
    let ((twin, twin_app), (correct, correct_app)) = tokio::try_join!(
        app(app_operator::Mode::Flapping),
        app(app_operator::Mode::Correct),
    )?;

    let hot = twin.caught("hot_loops", "apps.example.konverge.dev", "web")?;
    assert!(hot["writes"].as_u64() > Some(WRITES_NOT_A_LOOP), "{hot:#}");
    assert!(
        hot["changing_paths"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p == ".status.lastReconciled"),
        "{hot:#}"
    );
    assert!(
        twin_app
            .status
            .as_ref()
            .is_some_and(|s| s.last_reconciled.is_some())
    );

    correct.clean()?;
    assert_eq!(ready(&correct_app).as_deref(), Some("True"));
    Ok(())
}

/// The Events about the Bucket `name`, oldest first, as (type, reason, reporting controller).
async fn bucket_story(client: &Client, name: &str) -> anyhow::Result<Vec<[String; 3]>> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let mut about: Vec<Event> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    about.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(about
        .into_iter()
        .map(|e| {
            [
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.reporting_controller.unwrap_or_default(),
            ]
        })
        .collect())
}

/// What a bucket-operator run ends with.
struct BucketRun {
    /// The doctor's runs: JSON, then text.
    doctors: Vec<Finished>,
    /// The cloud's buckets at the end.
    cloud: Vec<String>,
    /// The Events about the Bucket.
    story: Vec<[String; 3]>,
}

/// The bucket operator with the Bucket `media` ready; once the doctor's window is open the
/// cloud is made to fail once and `media` is deleted. `formats` are the doctors to run
/// (`json`, `text`), all watching the same window.
async fn bucket(mode: bucket_operator::Mode, formats: &[&str]) -> anyhow::Result<BucketRun> {
    let cluster = Cluster::start().await?;
    konverge_runtime::crd::install(
        &cluster.client,
        &bucket_operator::Bucket::crd(),
        "test",
        PATIENCE,
    )
    .await?;
    let cloud = bucket_operator::Cloud::default();
    let mut manager = Manager::new(cluster.client.clone());
    let client = cluster.client.clone();
    manager.add(
        bucket_operator::controller(&client),
        bucket_operator::reconcile,
        Arc::new(bucket_operator::Context::new(client, cloud.clone(), mode)),
    );
    let _running: RunningManager = manager.spawn();
    let buckets: Api<bucket_operator::Bucket> = Api::namespaced(cluster.client.clone(), "default");
    let media = bucket_operator::Bucket::new(
        "media",
        bucket_operator::BucketSpec {
            region: "eu-1".into(),
        },
    );
    buckets.create(&PostParams::default(), &media).await?;
    until("media is ready", || async {
        let media = buckets.get("media").await?;
        Ok(media.status.is_some_and(|s| s.ready))
    })
    .await?;

    let mut doctors = Vec::new();
    for format in formats {
        doctors.push(Doctor::watching(&cluster, &["-o", format]).await?);
    }
    cloud.fail_next(1);
    buckets.delete("media", &DeleteParams::default()).await?;
    until("media is gone", || async {
        Ok(buckets.get_opt("media").await?.is_none())
    })
    .await?;
    // The cloud's failure is told in both modes (the correct operator then retries).
    until("the cleanup's failure is told", || async {
        let story = bucket_story(&cluster.client, "media").await?;
        Ok(story.iter().any(|[_, reason, _]| reason == "CleanupFailed"))
    })
    .await?;
    let mut finished = Vec::new();
    for doctor in doctors {
        finished.push(doctor.finish().await?);
    }
    Ok(BucketRun {
        doctors: finished,
        cloud: cloud.buckets().into_keys().collect(),
        story: bucket_story(&cluster.client, "media").await?,
    })
}

fn story(said: &[(&str, &str)]) -> Vec<[String; 3]> {
    said.iter()
        .map(|(type_, reason)| {
            [
                type_.to_string(),
                reason.to_string(),
                bucket_operator::REPORTER.to_string(),
            ]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_operator_that_releases_early_is_caught_deleting_after_a_warning()
-> anyhow::Result<()> {
    let (twin, correct) = tokio::try_join!(
        bucket(bucket_operator::Mode::ReleasesEarly, &["json", "text"]),
        bucket(bucket_operator::Mode::Correct, &["json"]),
    )?;

    let [as_json, as_text] = &twin.doctors[..] else {
        bail!("two doctors ran");
    };
    let found = as_json.caught(
        "deleted_after_warning",
        "buckets.example.konverge.dev",
        "media",
    )?;
    assert_eq!(found["object"]["kind"], "Bucket", "{found:#}");
    assert_eq!(found["reason"], "CleanupFailed", "{found:#}");
    assert_eq!(
        found["note"], "deleting cloud bucket media: the cloud is unavailable, try again",
        "{found:#}"
    );
    assert_eq!(found["reporting_controller"], bucket_operator::REPORTER);
    assert!(
        found["time"]
            .as_str()
            .is_some_and(|t| t.parse::<k8s_openapi::jiff::Timestamp>().is_ok()),
        "{found:#}"
    );
    assert_eq!(
        as_text.code,
        Some(1),
        "{}\n{}",
        as_text.stdout,
        as_text.stderr
    );
    let heading = "\nDeleted after a warning (the last Event about them was a Warning: \
                   the cleanup they were owed may never have happened):\n";
    let line = "  default/media (buckets.example.konverge.dev): Warning CleanupFailed \
                from bucket-operator at ";
    let note = "    deleting cloud bucket media: the cloud is unavailable, try again\n";
    for expected in [heading, line, note] {
        assert!(as_text.stdout.contains(expected), "{}", as_text.stdout);
    }
    // What the doctor says happened did: the cloud bucket leaked.
    assert_eq!(twin.cloud, ["media"]);
    assert_eq!(
        twin.story,
        story(&[("Normal", "Created"), ("Warning", "CleanupFailed")])
    );

    let [as_json] = &correct.doctors[..] else {
        bail!("one doctor ran");
    };
    as_json.clean()?;
    // The correct operator failed once too, retried, and its last word was Deleted.
    assert!(correct.cloud.is_empty(), "{:?}", correct.cloud);
    assert_eq!(
        correct.story,
        story(&[
            ("Normal", "Created"),
            ("Warning", "CleanupFailed"),
            ("Normal", "Deleted")
        ])
    );
    Ok(())
}
