//! Links `konverge` at a fixed address on Linux (`-no-pie`), as Go links its programs by
//! default there. As a position-independent executable it carried 111,000 relocations that
//! the loader applied at every start, writing 600 pages: about 2 ms of each `konverge up`
//! and 2 MiB of its memory (docs/benchmarks.md). Libraries, stack and heap are still placed
//! at random.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
