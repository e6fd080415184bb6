//! What several of the runtime's test files share. Each test binary uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use konverge_testkit::TestEnv;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server reached in-process (no socket), so the test can run in paused time.
pub(crate) async fn in_process() -> TestEnv {
    TestEnv::builder().in_process().start().await
}

/// Polls `check` until it holds; fails the test after 20 seconds (virtual ones under paused
/// time).
pub(crate) async fn eventually<F: Fn() -> Fut, Fut: Future<Output = bool>>(what: &str, check: F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// GET over a plain socket: (status code, body).
pub(crate) async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let code = raw[9..12].parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (code, body.unwrap_or_default())
}
