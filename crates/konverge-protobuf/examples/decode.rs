//! Decodes a protobuf body from a file (or stdin) and prints its JSON.
//!
//! ```text
//! cargo run -p konverge-protobuf --example decode -- body.bin
//! ```

use std::io::Read as _;

fn main() -> Result<(), String> {
    let mut body = Vec::new();
    match std::env::args().nth(1) {
        Some(path) => body = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?,
        None => {
            std::io::stdin()
                .read_to_end(&mut body)
                .map_err(|e| e.to_string())?;
        }
    }
    let (_, object) = konverge_protobuf::decode(&body).map_err(|e| e.to_string())?;
    println!(
        "{}",
        serde_json::to_string_pretty(&object).map_err(|e| e.to_string())?
    );
    Ok(())
}
