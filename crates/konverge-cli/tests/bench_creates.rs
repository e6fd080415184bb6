//! `konverge bench creates` against a `konverge up` started by hand: it creates for the time
//! asked, reports the server's CPU per create from its process id, and every ConfigMap it
//! made carries the label its clean-up line names. A server that refuses the creates stops
//! it before the load, with the server's reason.

use std::process::Command;

mod common;

use common::Up;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args(["bench", "creates"])
        .args(args)
        .output()
        .expect("run konverge bench creates")
}

#[test]
fn bench_creates_loads_a_running_server_and_reads_its_cpu() {
    let up = Up::start_with(&["--controllers", "", "--nodes", "0"]);
    let kubeconfig = up.dir.path().join("kubeconfig");
    let pid = up.child.id().to_string();
    let output = bench(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--clients",
        "4",
        "--seconds",
        "0.5",
        "--pid",
        &pid,
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let reported: usize = stdout
        .split(" creates of 1400-byte ConfigMaps")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("a count of creates: {stdout}"));
    assert!(reported > 0, "{stdout}");
    assert!(
        stdout.contains(" from 4 clients at https://127.0.0.1:"),
        "{stdout}"
    );
    assert!(stdout.contains("server CPU per create: "), "{stdout}");
    assert!(
        stdout.contains(
            "clean up: kubectl delete configmaps -n default -l konverge.dev/bench=creates"
        ),
        "{stdout}"
    );
    // Every one made (the first, before the load, too) carries the label.
    let labelled = up.ok(&[
        "get",
        "configmaps",
        "-l",
        "konverge.dev/bench=creates",
        "-o",
        "name",
    ]);
    assert_eq!(labelled.lines().count(), reported + 1, "{stdout}");

    // A namespace that does not exist: the server's answer, before any load.
    let output = bench(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--namespace",
        "nowhere",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("namespaces \"nowhere\" not found"),
        "{stderr}"
    );
}
