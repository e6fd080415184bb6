//! The committed `src/table.rs` and `generator/go-fields.txt` are what the generator makes
//! from the current k8s-pb and k8s-openapi sources (found through `cargo metadata`; they
//! are on disk after `cargo fetch`, no network needed). On failure, rerun
//! `cargo run -p konverge-protobuf --example generate` and review the diff.

#[allow(dead_code)]
#[path = "../generator/mod.rs"]
mod generator;

use std::path::Path;

#[test]
fn committed_table_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inputs =
        generator::default_inputs(crate_dir, None, None).expect("locate k8s-pb and k8s-openapi");
    let output = generator::generate(&inputs).expect("generate");
    let committed = std::fs::read_to_string(crate_dir.join(generator::TABLE_PATH)).unwrap();
    assert!(
        committed == output.table,
        "src/table.rs is stale: run `cargo run -p konverge-protobuf --example generate`"
    );
    let facts = std::fs::read_to_string(crate_dir.join(generator::FACTS_PATH)).unwrap();
    assert_eq!(facts, output.facts);
}
