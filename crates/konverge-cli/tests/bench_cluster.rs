//! `konverge bench cluster`, small: 3 simulated nodes and a Deployment of 30 replicas, in real
//! time. It must report every measured field with values that add up (every pod bound and
//! Ready, one Binding per pod, kube's minimum of writes per pod, a plausible peak RSS); how
//! fast is for the benchmark to measure, never asserted here.

use std::process::Command;

/// The value after `label` on the line that starts with it.
fn field<'o>(stdout: &'o str, label: &str) -> &'o str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{stdout}"))
        .trim()
}

/// The first number in `text`.
fn number(text: &str) -> f64 {
    let start = text
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or_else(|| panic!("no number in {text:?}"));
    let digits: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse().expect("a number")
}

/// The count of one verb and resource in the requests table of one component.
fn requests(stdout: &str, component: &str, verb: &str, resource: &str) -> u64 {
    stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.len() >= 4 && cells[..3] == [component, verb, resource])
        .map(|cells| cells[3].parse().expect("a count"))
        .unwrap_or(0)
}

#[test]
fn bench_cluster_reports_every_pod_bound_and_ready() {
    let output = Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args([
            "bench",
            "cluster",
            "--nodes",
            "3",
            "--replicas",
            "30",
            "--timeout",
            "120",
        ])
        .output()
        .expect("run konverge bench cluster");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");

    assert!(
        field(&stdout, "cluster:").starts_with("3 simulated nodes"),
        "{stdout}"
    );
    assert_eq!(
        field(&stdout, "pods ready:"),
        "30/30 (30 bound)",
        "{stdout}"
    );
    let all_ready = number(field(&stdout, "all ready:"));
    assert!(all_ready > 0.0, "{stdout}");

    let bound = field(&stdout, "pods bound:");
    assert!(bound.starts_with("30 in "), "{stdout}");
    assert!(bound.ends_with(" pods/s"), "{stdout}");
    let rate: f64 = bound.rsplit(':').next().map(number).expect("a rate");
    assert!(rate > 0.0, "{stdout}");

    // Every pod: created once by the ReplicaSet controller, bound once by the scheduler.
    assert_eq!(
        requests(&stdout, "controllers", "create", "pods"),
        30,
        "{stdout}"
    );
    assert_eq!(
        requests(&stdout, "nodes", "create", "pods/binding"),
        30,
        "{stdout}"
    );
    assert!(
        requests(&stdout, "nodes", "update", "pods/status") >= 30,
        "{stdout}"
    );

    // Per pod at least its create, its SuccessfulCreate event, its Binding, its Scheduled
    // event and a status write; a few more for the ReplicaSet's and Deployment's status.
    let writes = number(field(&stdout, "writes per pod:"));
    assert!((5.0..12.0).contains(&writes), "{stdout}");
    let total = field(&stdout, "requests:");
    assert!(number(total) >= 30.0 * 5.0, "{stdout}");

    let cpu = number(field(&stdout, "cpu:"));
    assert!(cpu >= 0.0, "{stdout}");
    let peak = field(&stdout, "peak RSS:");
    let mib = number(peak);
    assert!((8.0..4096.0).contains(&mib), "{stdout}");
    assert!(peak.contains("whole process"), "{stdout}");
    assert!(stdout.contains("timeline"), "{stdout}");
}
