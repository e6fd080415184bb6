//! Fault injection: what a controller meets on a real cluster — watches cut by a load
//! balancer, history compacted while it was away, conflicting writers, a server that fails or
//! is slow — made to happen on purpose, between the client and the API server.
//!
//! [`Faults`] is the handle tests use; [`FaultLayer`] is the `tower` layer in front of the
//! server's router that carries the faults out and records every request in a
//! [`RequestLog`].

use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use futures::{Stream, StreamExt};
use http::{Method, Request, Response, StatusCode};
use konverge_apiserver::ApiServer;
use konverge_apiserver::error::ApiError;
use konverge_apiserver::registry::Registry;
use konverge_store::Revision;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

use crate::request_info::{RequestInfo, Verb};
use crate::requests::{RequestLog, RequestRecord};
pub use crate::rule::{Failure, Rule};

/// What a fault does to a request it matches.
#[derive(Debug, Clone)]
enum Effect {
    Fail(Failure),
    Delay(Duration),
    /// The server handles the request; its answer is lost on the way back.
    LoseResponse,
    /// A read that allows it is answered as of this revision ([`crate::stale`]).
    StaleRead(Revision),
}

#[derive(Debug)]
struct Injected {
    rule: Rule,
    effect: Effect,
    /// How many more requests it applies to; `None`: until cleared.
    remaining: Option<usize>,
}

/// What the faults decided for one request.
struct Verdict {
    delay: Duration,
    failure: Option<Failure>,
    lose_response: bool,
    stale_at: Option<Revision>,
}

struct Shared {
    injected: Mutex<Vec<Injected>>,
    /// The registry of the server behind the layer (replaced when a [`TestEnv`] restarts it).
    ///
    /// [`TestEnv`]: crate::TestEnv
    registry: Mutex<Registry>,
    /// How to restart that server, when a [`TestEnv`](crate::TestEnv) runs it.
    restart: Mutex<Option<Weak<dyn Restart>>>,
    /// Cancelled by [`Faults::drop_watches`], which puts a fresh one in its place.
    watch_cut: Mutex<CancellationToken>,
    open_watches: AtomicUsize,
    log: RequestLog,
}

impl Shared {
    fn injected(&self) -> MutexGuard<'_, Vec<Injected>> {
        self.injected.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn watch_cut(&self) -> MutexGuard<'_, CancellationToken> {
        self.watch_cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn registry(&self) -> Registry {
        self.registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every matching delay adds up; the first matching failure with requests left answers;
    /// failing that, the first matching lost response takes the server's answer. A stale read
    /// applies only to reads that allow one (`stale_ok` of its revision).
    fn verdict(&self, request: &RequestInfo, stale_ok: impl Fn(Revision) -> bool) -> Verdict {
        let mut verdict = Verdict {
            delay: Duration::ZERO,
            failure: None,
            lose_response: false,
            stale_at: None,
        };
        let mut injected = self.injected();
        let mut lost = None;
        for (i, fault) in injected.iter_mut().enumerate() {
            if fault.remaining == Some(0) || !fault.rule.matches(request) {
                continue;
            }
            match &fault.effect {
                Effect::StaleRead(at) if verdict.stale_at.is_none() && stale_ok(*at) => {
                    verdict.stale_at = Some(*at)
                }
                Effect::StaleRead(_) => continue,
                Effect::Delay(delay) => verdict.delay += *delay,
                Effect::Fail(_) if verdict.failure.is_some() => continue,
                Effect::Fail(failure) => verdict.failure = Some(failure.clone()),
                // Only used if no failure answers first.
                Effect::LoseResponse => {
                    lost.get_or_insert(i);
                    continue;
                }
            }
            if let Some(remaining) = &mut fault.remaining {
                *remaining -= 1;
            }
        }
        if let (None, Some(i)) = (&verdict.failure, lost) {
            verdict.lose_response = true;
            if let Some(remaining) = &mut injected[i].remaining {
                *remaining -= 1;
            }
        }
        injected.retain(|f| f.remaining != Some(0));
        verdict
    }
}

/// The fault-injection handle of a [`TestEnv`](crate::TestEnv) (from
/// [`TestEnv::faults`](crate::TestEnv::faults)); cheap to clone, all clones share the same
/// faults and [`RequestLog`].
///
/// Faults act on requests that reach the [`FaultLayer`] — everything a `kube::Client` sends
/// to the server. The server's own control loops work on its registry directly and are not
/// affected.
#[derive(Clone)]
pub struct Faults {
    shared: Arc<Shared>,
}

/// Restarts the server behind a [`FaultLayer`]; [`TestEnv`](crate::TestEnv) implements it.
#[async_trait::async_trait]
pub(crate) trait Restart: Send + Sync {
    async fn restart(&self, down: Duration) -> Result<(), crate::Error>;
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("injected", &*self.shared.injected())
            .field("open_watches", &self.open_watches())
            .finish_non_exhaustive()
    }
}

impl Faults {
    /// Faults for `server`, with none injected yet. [`TestEnv`](crate::TestEnv) makes one;
    /// to use faults with the server's router in-process, wrap it in [`Faults::layer`].
    pub fn new(server: &Arc<ApiServer>) -> Faults {
        Faults {
            shared: Arc::new(Shared {
                injected: Mutex::new(Vec::new()),
                registry: Mutex::new(server.registry().clone()),
                restart: Mutex::new(None),
                watch_cut: Mutex::new(CancellationToken::new()),
                open_watches: AtomicUsize::new(0),
                log: RequestLog::default(),
            }),
        }
    }

    /// Points the faults at the server that replaced theirs (after a restart).
    pub(crate) fn follow(&self, server: &Arc<ApiServer>) {
        *self
            .shared
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = server.registry().clone();
    }

    /// Says how to restart the server ([`Faults::restart_server`]).
    pub(crate) fn restart_with(&self, restart: Weak<dyn Restart>) {
        *self
            .shared
            .restart
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(restart);
    }

    /// The layer that carries out these faults, to wrap the server's router in.
    pub fn layer(&self) -> FaultLayer {
        FaultLayer {
            faults: self.clone(),
        }
    }

    /// The record of every request that reached the layer.
    pub fn requests(&self) -> RequestLog {
        self.shared.log.clone()
    }

    /// Ends every watch stream open now, as when a load balancer cuts long-lived
    /// connections: each client sees its stream end (cleanly, after the last complete
    /// event) and must watch again from the last resourceVersion it saw. Watches started
    /// afterwards are not affected.
    pub fn drop_watches(&self) {
        let cut = std::mem::replace(&mut *self.shared.watch_cut(), CancellationToken::new());
        cut.cancel();
    }

    /// How many watch streams are open now. A test can wait for a controller's watches to be
    /// established before it [drops](Self::drop_watches) them.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }

    /// Forces compaction, as a client sees it after a long disconnect: the store is compacted
    /// at its current revision `R` and the server's watch caches forget their history the
    /// same way ([`Registry::expire_history`]). From then on a watch from a resourceVersion
    /// before `R - 1` — a client that missed more than the last change — gets a 410 Expired
    /// `ERROR` event, and a list at a resourceVersion before `R` with
    /// `resourceVersionMatch=Exact`, or with a continue token from before, gets 410 Expired;
    /// a fresh list (and a watch from its resourceVersion) works. Open watches that were
    /// behind end with 410 as well. Returns `R`.
    ///
    /// To simulate the whole disconnect, call [`drop_watches`](Self::drop_watches) after
    /// this: clients then resume from resourceVersions that have expired.
    pub async fn expire_history(&self) -> Result<Revision, ApiError> {
        self.shared.registry().expire_history().await
    }

    /// Answers the next `times` reads that `rule` matches, of those the API lets a server
    /// answer from a cache that lags, as of the store's revision now — as a kube-apiserver
    /// whose watch cache fell behind does. Those are gets and lists with
    /// `resourceVersion=0`, or with a not-older-than resourceVersion (then answered at that
    /// resourceVersion); reads of the most recent state (no resourceVersion), exact reads
    /// and continued lists are always fresh, on a cluster and here. A stale list has the old
    /// revision as its resourceVersion, so a watch from it replays what came after; a stale
    /// get answers the object as it was, or 404 if it did not exist then. Returns the
    /// revision reads are pinned at.
    pub async fn stale_reads(&self, rule: Rule, times: usize) -> Result<Revision, ApiError> {
        let registry = self.shared.registry();
        let at = registry
            .store()
            .current_revision()
            .await
            .map_err(|e| ApiError::from_store(e, Default::default()))?;
        self.inject(rule, Effect::StaleRead(at), Some(times));
        Ok(at)
    }

    /// Restarts the API server of the [`TestEnv`](crate::TestEnv) these faults belong to,
    /// as [`TestEnv::restart`](crate::TestEnv::restart) does: down for `down`, then back on
    /// the same address with its store's data. Fails for faults made with [`Faults::new`]
    /// around a server of the test's own.
    pub async fn restart_server(&self, down: Duration) -> Result<(), crate::Error> {
        let restart = self
            .shared
            .restart
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(Weak::upgrade);
        match restart {
            Some(restart) => restart.restart(down).await,
            None => Err(crate::Error::NotRestartable),
        }
    }

    /// Answers the next `times` requests that `rule` matches with `failure`, without
    /// passing them to the server. Failures injected earlier answer first.
    pub fn fail(&self, rule: Rule, failure: Failure, times: usize) {
        self.inject(rule, Effect::Fail(failure), Some(times));
    }

    /// Answers the next `times` requests that `rule` matches with 409 Conflict, as the server
    /// does when another writer changed the object since the client read it.
    pub fn inject_conflicts(&self, rule: Rule, times: usize) {
        self.fail(rule, Failure::conflict(), times);
    }

    /// Answers the next `times` requests that `rule` matches with an error of status `code`
    /// and the reason kube-apiserver gives it (see [`Failure::from_code`]).
    pub fn inject_errors(&self, rule: Rule, code: StatusCode, times: usize) {
        self.fail(rule, Failure::from_code(code), times);
    }

    /// Holds every request that `rule` matches for `latency` before it is handled, until
    /// [`clear`](Self::clear). Delays of several matching rules add up. The delay is a
    /// `tokio` sleep, so it follows paused test time.
    pub fn delay(&self, rule: Rule, latency: Duration) {
        self.inject(rule, Effect::Delay(latency), None);
    }

    /// Lets the next `times` requests that `rule` matches reach the server, which handles
    /// them (a write is applied), and answers the client 504 Timeout instead of the server's
    /// answer, as when a connection breaks after the request was sent: the client cannot
    /// tell whether its write happened, and must find out by reading.
    pub fn lose_responses(&self, rule: Rule, times: usize) {
        self.inject(rule, Effect::LoseResponse, Some(times));
    }

    /// Holds each of the next `times` requests that `rule` matches for `latency`.
    pub fn delay_next(&self, rule: Rule, latency: Duration, times: usize) {
        self.inject(rule, Effect::Delay(latency), Some(times));
    }

    /// How many injected failures, lost responses and stale reads have not been used yet.
    pub fn pending_failures(&self) -> usize {
        self.shared
            .injected()
            .iter()
            .filter(|f| {
                matches!(
                    f.effect,
                    Effect::Fail(_) | Effect::LoseResponse | Effect::StaleRead(_)
                )
            })
            .map(|f| f.remaining.unwrap_or(0))
            .sum()
    }

    /// Removes every injected failure and delay (the request log is kept).
    pub fn clear(&self) {
        self.shared.injected().clear();
    }

    fn inject(&self, rule: Rule, effect: Effect, remaining: Option<usize>) {
        if remaining == Some(0) {
            return;
        }
        self.shared.injected().push(Injected {
            rule,
            effect,
            remaining,
        });
    }

    /// Runs one request through the faults, then (unless a failure answers it) `inner`.
    async fn handle<S>(self, mut inner: S, request: Request<Body>) -> Response<Body>
    where
        S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
    {
        let info = RequestInfo::new(request.method(), request.uri());
        // Taken before the request is served: a watch that started before `drop_watches` was
        // called is cut by it.
        let watch_cut = self.shared.watch_cut().clone();
        let verdict = self
            .shared
            .verdict(&info, |at| crate::stale::allows(&request, &info, at));
        if !verdict.delay.is_zero() {
            tokio::time::sleep(verdict.delay).await;
        }
        if let Some(failure) = verdict.failure {
            let name = match &info.name {
                Some(name) => name.clone(),
                None => created_name(&info, request.into_body()).await,
            };
            let response = failure.response(&info, &name);
            self.record(info, response.status(), true);
            return response;
        }
        if let Some(at) = verdict.stale_at {
            let (parts, _) = request.into_parts();
            let response = crate::stale::serve(inner, parts, &info, at).await;
            self.record(info, response.status(), true);
            return response;
        }
        let name = info.name.clone().unwrap_or_default();
        let response = match inner.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        if verdict.lose_response {
            // The server's answer (and any stream it started) is dropped unread.
            drop(response);
            let lost = Failure::from_code(StatusCode::GATEWAY_TIMEOUT).response(&info, &name);
            self.record(info, lost.status(), true);
            return lost;
        }
        let status = response.status();
        let is_watch = info.verb == Some(Verb::Watch) && status.is_success();
        self.record(info, status, false);
        if !is_watch {
            return response;
        }
        let open = OpenWatch::new(self.shared.clone());
        response.map(|body| {
            let stream = body
                .into_data_stream()
                .take_until(watch_cut.cancelled_owned());
            Body::from_stream(drop_at_end(stream, open))
        })
    }

    fn record(&self, request: RequestInfo, status: StatusCode, injected: bool) {
        self.shared.log.push(RequestRecord {
            request,
            status,
            injected,
        });
    }
}

/// `stream`, dropped together with `keep` as soon as it ends — not only when its reader drops
/// it: a client in-process may hold a finished body for a while, and the server's side of a
/// watch (and [`OpenWatch`]) must end with the stream, as with a socket.
pub(crate) fn drop_at_end<S, K>(stream: S, keep: K) -> impl Stream<Item = S::Item> + Send + 'static
where
    S: Stream + Send + 'static,
    K: Send + 'static,
{
    futures::stream::unfold((Box::pin(stream), keep), |(mut stream, keep)| async move {
        let item = stream.next().await?;
        Some((item, (stream, keep)))
    })
    .fuse()
}

/// Counts a watch stream as open while it lives.
struct OpenWatch(Arc<Shared>);

impl OpenWatch {
    fn new(shared: Arc<Shared>) -> Self {
        shared.open_watches.fetch_add(1, Ordering::SeqCst);
        OpenWatch(shared)
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The largest create body read to find the new object's name (the server's own limit).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// The name of the object a create would have made (`metadata.name` of a JSON body), for
/// the message of a failure that answers it; empty when there is none.
async fn created_name(info: &RequestInfo, body: Body) -> String {
    if info.method != Method::POST {
        return String::new();
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return String::new();
    };
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v.pointer("/metadata/name")?.as_str().map(String::from))
        .unwrap_or_default()
}

/// A `tower` layer that puts [`Faults`] in front of a service (the API server's router):
/// it delays and fails requests as injected, cuts watch streams on
/// [`Faults::drop_watches`], and records every request.
#[derive(Debug, Clone)]
pub struct FaultLayer {
    faults: Faults,
}

impl<S> Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> FaultService<S> {
        FaultService {
            inner,
            faults: self.faults.clone(),
        }
    }
}

/// The service [`FaultLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct FaultService<S> {
    inner: S,
    faults: Faults,
}

impl<S> Service<Request<Body>> for FaultService<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The clone is ready only if polled; keep the one that was, as tower asks.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let faults = self.faults.clone();
        Box::pin(async move { Ok(faults.handle(inner, request).await) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;
    use serde_json::json;

    fn request(method: Method, uri: &str) -> RequestInfo {
        RequestInfo::new(&method, &uri.parse().expect("uri"))
    }

    #[test]
    fn rules_match_like_rbac() {
        let update = request(Method::PUT, "/api/v1/namespaces/d/configmaps/x");
        let status = request(
            Method::PUT,
            "/apis/apps/v1/namespaces/d/deployments/x/status",
        );
        let discovery = request(Method::GET, "/api/v1");
        assert!(Rule::new().matches(&update));
        assert!(!Rule::new().matches(&discovery));
        assert!(Rule::new().verb(Verb::Update).matches(&update));
        assert!(
            Rule::new()
                .verb(Verb::Get)
                .verb(Verb::Update)
                .matches(&update)
        );
        assert!(!Rule::new().verb(Verb::Patch).matches(&update));
        assert!(Rule::new().resource("configmaps").matches(&update));
        assert!(!Rule::new().resource("deployments").matches(&status));
        assert!(Rule::new().resource("deployments/status").matches(&status));
        assert!(Rule::new().group("apps").matches(&status));
        assert!(!Rule::new().group("").matches(&status));
        assert!(Rule::new().namespace("d").name("x").matches(&update));
        assert!(!Rule::new().namespace("e").matches(&update));
        assert!(!Rule::new().name("y").matches(&update));
    }

    #[test]
    fn failures_read_like_kube_apiserver() {
        let update = request(Method::PUT, "/apis/apps/v1/namespaces/d/deployments/web");
        let status = Failure::conflict().status(&update, "web");
        assert_eq!(
            status,
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "Operation cannot be fulfilled on deployments.apps \"web\": the object has been modified; please apply your changes to the latest version and try again",
                "reason": "Conflict",
                "code": 409,
                "details": {"name": "web", "group": "apps", "kind": "deployments"},
            })
        );
        let throttled = Failure::too_many_requests().retry_after(2);
        let response = throttled.response(&update, "web");
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        assert_eq!(
            throttled.status(&update, "web")["details"]["retryAfterSeconds"],
            2
        );
        let internal = Failure::internal_error().status(&update, "web");
        assert_eq!(internal["reason"], "InternalError");
        assert_eq!(
            internal["details"]["causes"][0]["message"],
            internal["message"]
        );
        assert_eq!(Failure::from_code(StatusCode::IM_A_TEAPOT).reason, "");
        assert_eq!(
            Failure::new(StatusCode::CONFLICT, "AlreadyExists").status(&update, "web")["message"],
            "deployments.apps \"web\" already exists"
        );
    }
}
