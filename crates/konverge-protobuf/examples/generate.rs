//! Regenerates `src/table.rs` (and, with `--go-src`, `generator/go-fields.txt`).
//!
//! ```text
//! cargo run -p konverge-protobuf --example generate [-- [--go-src DIR --go-release TAG] [--check]]
//! ```
//!
//! `--go-src DIR` re-extracts the Go facts from Kubernetes Go sources: DIR holds checkouts of
//! `k8s.io/api`, `k8s.io/apimachinery` and `k8s.io/apiextensions-apiserver` as `api/`,
//! `apimachinery/` and `apiextensions-apiserver/`, at the release matching the served API
//! version (k8s-openapi's feature), e.g. `git archive v0.33.13` of each; `--go-release`
//! names that release in the facts file.
//! `--check` compares instead of writing and fails if anything would change.

#[allow(dead_code)]
#[path = "../generator/mod.rs"]
mod generator;

use std::path::{Path, PathBuf};

fn main() -> Result<(), String> {
    let mut go_src = None;
    let mut go_release = None;
    let mut check = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--go-src" => {
                go_src = Some(PathBuf::from(
                    args.next().ok_or("--go-src needs a directory")?,
                ))
            }
            "--go-release" => go_release = Some(args.next().ok_or("--go-release needs a tag")?),
            "--check" => check = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inputs = generator::default_inputs(crate_dir, go_src, go_release)?;
    let output = generator::generate(&inputs)?;
    let mut stale = Vec::new();
    for (path, text) in [
        (generator::TABLE_PATH, &output.table),
        (generator::FACTS_PATH, &output.facts),
    ] {
        let path = crate_dir.join(path);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == *text {
            continue;
        }
        if check {
            stale.push(path.display().to_string());
        } else {
            std::fs::write(&path, text).map_err(|e| format!("{path:?}: {e}"))?;
            println!("wrote {}", path.display());
        }
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!("stale: {}", stale.join(", ")))
    }
}
