//! An API server on a loopback port, and a `kube::Client` for it.

pub(crate) mod eventually;

use std::sync::Arc;

use konverge_apiserver::ApiServer;
use konverge_store::{KvStore, MemStore};

/// Which store the server runs on.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
pub(crate) enum Backend {
    Memory,
    Disk,
}

pub(crate) struct TestServer {
    pub(crate) client: kube::Client,
    #[allow(dead_code)]
    pub(crate) store: Arc<dyn KvStore>,
    /// The server itself, for what is set on it after it is built.
    #[allow(dead_code)]
    pub(crate) server: Arc<ApiServer>,
    /// The server's router, to call in-process (no client retries in between).
    #[allow(dead_code)]
    pub(crate) router: axum::Router,
    _dir: Option<tempfile::TempDir>,
    _task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    pub(crate) async fn start(backend: Backend) -> TestServer {
        Self::start_with(backend, |b| b).await
    }

    /// A server whose builder `configure` adjusts.
    pub(crate) async fn start_with(
        backend: Backend,
        configure: impl FnOnce(
            konverge_apiserver::ApiServerBuilder,
        ) -> konverge_apiserver::ApiServerBuilder,
    ) -> TestServer {
        let (store, dir): (Arc<dyn KvStore>, _) = match backend {
            Backend::Memory => (Arc::new(MemStore::new()), None),
            Backend::Disk => {
                let dir = tempfile::tempdir().expect("temp dir");
                let store = konverge_store_disk::DiskStore::open(dir.path()).expect("open");
                (Arc::new(store), Some(dir))
            }
        };
        let server = configure(ApiServer::builder(store.clone()))
            .build()
            .await
            .expect("server");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        server.set_address(addr.to_string());
        let router = server.router();
        let in_process = router.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.expect("serve");
        });
        let url = format!("http://{addr}");
        let config = kube::Config::new(url.parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        TestServer {
            client,
            server,
            router: in_process,
            store,
            _dir: dir,
            _task: task,
        }
    }

    /// A request to the router in-process: what the server answers, with no client in
    /// between (kube::Client retries 429s). A `null` body is sent as no body.
    #[allow(dead_code)]
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        use tower::ServiceExt;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(if body.is_null() {
                Vec::new()
            } else {
                serde_json::to_vec(&body).expect("json")
            }))
            .expect("request");
        let response = self.router.clone().oneshot(req).await.expect("infallible");
        let code = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (
            code,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    }

    /// A GET to the router in-process, and the first chunk of what it streams back: a
    /// watch's first event, or a whole short answer.
    #[allow(dead_code)]
    pub(crate) async fn first_chunk(&self, path: &str) -> (u16, String) {
        use futures::StreamExt;
        use tower::ServiceExt;
        let req = http::Request::builder()
            .uri(path)
            .body(axum::body::Body::empty())
            .expect("request");
        let response = self.router.clone().oneshot(req).await.expect("infallible");
        let code = response.status().as_u16();
        let mut stream = response.into_body().into_data_stream();
        let chunk = stream
            .next()
            .await
            .map(|c| c.expect("chunk"))
            .unwrap_or_default();
        (code, String::from_utf8_lossy(&chunk).into_owned())
    }

    /// A raw HTTP request, for what kube::Client cannot send (wrong methods, bad bodies).
    #[allow(dead_code)]
    pub(crate) async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Vec<u8>>,
    ) -> (u16, serde_json::Value) {
        let mut builder = http::Request::builder().method(method).uri(path);
        if let Some(ct) = content_type {
            builder = builder.header("content-type", ct);
        }
        let req = builder.body(body.into()).expect("request");
        match self.client.request_text(req).await {
            Ok(text) => (
                200,
                serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
            ),
            Err(kube::Error::Api(status)) => {
                (status.code, serde_json::to_value(&*status).expect("status"))
            }
            Err(other) => panic!("{method} {path}: {other}"),
        }
    }
}
