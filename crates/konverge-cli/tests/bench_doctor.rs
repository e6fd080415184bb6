//! `konverge bench doctor`, small: it starts `konverge up`, loads ConfigMaps, runs the built
//! `konverge doctor` three times and fails unless the doctor reports exactly the objects
//! written over and over, and nothing on the quiet runs.

use std::process::Command;

#[test]
fn bench_doctor_finds_exactly_the_hot_objects() {
    let output = Command::new(env!("CARGO_BIN_EXE_konverge"))
        .args([
            "bench",
            "doctor",
            "--objects",
            "300",
            "--hot",
            "6",
            "--window",
            "2",
        ])
        .output()
        .expect("run konverge bench doctor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| cluster"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    // Cells: (empty), label, objects, writes seen, hot loops, wall time, peak RSS, ratio.
    assert_eq!(rows[0][4], "0", "{stdout}");
    assert_eq!(rows[1][4], "0", "{stdout}");
    assert_eq!(rows[2][4], "6", "{stdout}");
    assert!(rows[1][2].parse::<u64>().unwrap() > 300, "{stdout}");
    assert!(rows[2][3].parse::<u64>().unwrap() > 6, "{stdout}");
}
