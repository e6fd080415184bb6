//! The watcher: one resource type's objects as a stream of events that survives anything the
//! connection or the server does.
//!
//! It lists (in pages, or as a streaming list where the server offers `sendInitialEvents`),
//! then watches from the list's resourceVersion, asking for bookmarks so a quiet resource still
//! advances its resume point. When a watch ends (server timeout, dropped connection) it resumes
//! from the last resourceVersion it saw; when the server says that version is gone (410
//! Expired, after compaction) it relists. Errors are retried with exponential backoff and
//! jitter, and reported on the stream as [`Error`] items — the stream itself never ends.
//!
//! Every (re)list is framed by [`Event::Init`] … [`Event::InitDone`], so a consumer can replace
//! its state wholesale and notice deletions it missed while disconnected.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::{ListParams, VersionMatch, WatchEvent, WatchParams};
use kube::{Api, Resource};
use prometheus_client::metrics::counter::Counter;
use rand::Rng;
use serde::de::DeserializeOwned;

/// A watcher failure. The watcher retries by itself; these are reported for visibility.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A list request failed.
    #[error("list failed: {0}")]
    List(#[source] kube::Error),
    /// Opening a watch failed.
    #[error("watch failed to start: {0}")]
    WatchStart(#[source] kube::Error),
    /// An open watch returned an error.
    #[error("watch stream failed: {0}")]
    WatchStream(#[source] kube::Error),
    /// The server sent an ERROR event other than 410 Expired.
    #[error("watch error from the server: {} ({})", .0.message, .0.code)]
    WatchError(Box<kube::core::Status>),
}

/// One change seen by the watcher.
#[derive(Debug, Clone)]
pub enum Event<K> {
    /// A (re)list starts: the objects that follow, up to [`Event::InitDone`], are the whole set.
    Init,
    /// An object of the initial set.
    InitApply(K),
    /// The initial set is complete.
    InitDone,
    /// An object was created or changed.
    Apply(K),
    /// An object was deleted (its last state).
    Delete(K),
}

/// How the initial state is fetched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitialList {
    /// Paginated list requests, then a watch.
    #[default]
    List,
    /// One watch with `sendInitialEvents=true` (Kubernetes' streaming lists): the server sends
    /// the current objects as events, then a bookmark marking the end. Falls back to
    /// [`InitialList::List`] if the server refuses it.
    Streaming,
}

/// Exponential backoff with jitter between retries.
#[derive(Clone, Debug)]
pub struct Backoff {
    /// First delay (800 ms, as client-go's reflector).
    pub initial: Duration,
    /// Longest delay (30 s).
    pub max: Duration,
    /// Growth per consecutive failure (2).
    pub factor: f64,
    /// Random extra delay as a fraction of the delay (1.0: up to double).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            factor: 2.0,
            jitter: 1.0,
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempt` (0-based), jitter included.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self.initial.as_secs_f64() * self.factor.powi(attempt.min(64) as i32);
        let base = base.min(self.max.as_secs_f64());
        let jitter = if self.jitter > 0.0 {
            rand::rng().random_range(0.0..self.jitter)
        } else {
            0.0
        };
        Duration::from_secs_f64(base * (1.0 + jitter))
    }
}

/// What to watch and how.
#[derive(Clone, Debug)]
pub struct Config {
    /// Only objects matching this label selector.
    pub label_selector: Option<String>,
    /// Only objects matching this field selector.
    pub field_selector: Option<String>,
    /// Objects per list page (500, as client-go).
    pub page_size: u32,
    /// Paginated or streaming initial list.
    pub initial_list: InitialList,
    /// Server-side timeout of each watch request, in seconds (290; the watch is resumed after).
    pub watch_timeout: u32,
    /// Retry spacing after errors.
    pub backoff: Backoff,
    /// Whether lists accept any resourceVersion ([`Config::any_version`]).
    pub any_version: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            label_selector: None,
            field_selector: None,
            page_size: 500,
            initial_list: InitialList::List,
            watch_timeout: 290,
            backoff: Backoff::default(),
            any_version: false,
        }
    }
}

impl Config {
    /// Only objects with these labels (label selector syntax).
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Lists (the first page of each) accept any resourceVersion (`resourceVersion=0`), so
    /// kube-apiserver may answer from its watch cache without reading etcd — cheaper on a big
    /// cluster, and possibly older than the latest write: the watch that follows starts at
    /// the list's resourceVersion and brings the cache up to date. By default lists ask for
    /// the most recent state. Such a list comes in one page, as kube-apiserver serves it
    /// from its cache whole ([`Config::page_size`] does not apply).
    pub fn any_version(mut self) -> Self {
        self.any_version = true;
        self
    }

    /// Only objects matching this field selector.
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// Use streaming lists (`sendInitialEvents`).
    pub fn streaming_lists(mut self) -> Self {
        self.initial_list = InitialList::Streaming;
        self
    }

    /// A stable text form of the selectors, to share one watch between identical configs.
    pub(crate) fn selector_key(&self) -> String {
        format!(
            "{}|{}",
            self.label_selector.as_deref().unwrap_or(""),
            self.field_selector.as_deref().unwrap_or("")
        )
    }

    fn list_params(&self, continue_token: Option<String>) -> ListParams {
        // kube-apiserver serves a resourceVersion=0 list whole from its cache (it ignores the
        // limit), and kube's client leaves resourceVersion=0 out when a limit is given.
        let any = self.any_version && continue_token.is_none();
        ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            limit: (!any).then_some(self.page_size),
            continue_token,
            resource_version: any.then(|| "0".to_string()),
            version_match: any.then_some(VersionMatch::NotOlderThan),
            ..ListParams::default()
        }
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            timeout: Some(self.watch_timeout),
            bookmarks: true,
            ..WatchParams::default()
        }
    }
}

/// Counters the watcher bumps (restarts and relists), labelled with the resource.
#[derive(Clone, Debug, Default)]
pub struct WatcherMetrics {
    restarts: Option<Counter>,
    relists: Option<Counter>,
}

impl WatcherMetrics {
    pub(crate) fn new(metrics: &crate::metrics::Metrics, resource: &str) -> WatcherMetrics {
        let labels = vec![("resource", resource.to_string())];
        WatcherMetrics {
            restarts: Some(metrics.watcher_restarts.get_or_create(&labels).clone()),
            relists: Some(metrics.watcher_relists.get_or_create(&labels).clone()),
        }
    }
}

enum Phase<K> {
    /// Start (or restart) the initial list.
    Start,
    /// Listing page by page.
    Listing { continue_token: String },
    /// Watching from `rv`; `stream` is open (or to be opened). `initial` is set while a
    /// streaming list is still delivering the initial objects.
    Watching {
        rv: String,
        stream: Option<BoxStream<'static, kube::Result<WatchEvent<K>>>>,
        initial: bool,
    },
}

struct State<K: Clone> {
    api: Api<K>,
    config: Config,
    metrics: WatcherMetrics,
    phase: Phase<K>,
    pending: VecDeque<Result<Event<K>, Error>>,
    failures: u32,
    streaming: bool,
    /// Set when the next step must wait (after an error).
    wait: Option<Duration>,
}

/// Watches `api` as configured. The stream never ends; errors are reported and retried.
pub fn watcher<K>(api: Api<K>, config: Config) -> impl Stream<Item = Result<Event<K>, Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watcher_with_metrics(api, config, WatcherMetrics::default())
}

pub(crate) fn watcher_with_metrics<K>(
    api: Api<K>,
    config: Config,
    metrics: WatcherMetrics,
) -> impl Stream<Item = Result<Event<K>, Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let streaming = config.initial_list == InitialList::Streaming;
    let state = State {
        api,
        config,
        metrics,
        phase: Phase::Start,
        pending: VecDeque::new(),
        failures: 0,
        streaming,
        wait: None,
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await;
        Some((item, state))
    })
}

fn is_expired(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

fn bump(counter: &Option<Counter>) {
    if let Some(c) = counter {
        c.inc();
    }
}

impl<K> State<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    async fn next(&mut self) -> Result<Event<K>, Error> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return item;
            }
            if let Some(delay) = self.wait.take() {
                tokio::time::sleep(delay).await;
            }
            self.step().await;
        }
    }

    fn fail(&mut self, error: Error) {
        let delay = self.config.backoff.delay(self.failures);
        self.failures = self.failures.saturating_add(1);
        tracing::warn!(%error, retry_in = ?delay, "watcher error");
        self.wait = Some(delay);
        self.pending.push_back(Err(error));
    }

    fn relist(&mut self) {
        bump(&self.metrics.relists);
        self.phase = Phase::Start;
    }

    async fn step(&mut self) {
        match std::mem::replace(&mut self.phase, Phase::Start) {
            Phase::Start if self.streaming => {
                let params = WatchParams {
                    send_initial_events: true,
                    ..self.config.watch_params()
                };
                // Streaming lists require resourceVersionMatch=NotOlderThan with an empty
                // resourceVersion ("consistent from now"); kube sets the match for us.
                match self.api.watch(&params, "").await {
                    Ok(stream) => {
                        self.pending.push_back(Ok(Event::Init));
                        self.phase = Phase::Watching {
                            rv: String::new(),
                            stream: Some(stream.boxed()),
                            initial: true,
                        };
                    }
                    Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => {
                        tracing::info!(reason = %s.message, "server refused a streaming list; listing instead");
                        self.streaming = false;
                    }
                    Err(e) => self.fail(Error::WatchStart(e)),
                }
            }
            Phase::Start => {
                self.list_page(None).await;
            }
            Phase::Listing { continue_token } => {
                self.list_page(Some(continue_token)).await;
            }
            Phase::Watching {
                rv,
                stream: None,
                initial,
            } => match self.api.watch(&self.config.watch_params(), &rv).await {
                Ok(stream) => {
                    self.phase = Phase::Watching {
                        rv,
                        stream: Some(stream.boxed()),
                        initial,
                    };
                }
                Err(e) if is_expired(&e) => self.relist(),
                Err(e) => {
                    self.phase = Phase::Watching {
                        rv,
                        stream: None,
                        initial,
                    };
                    self.fail(Error::WatchStart(e));
                }
            },
            Phase::Watching {
                mut rv,
                stream: Some(mut stream),
                mut initial,
            } => {
                match stream.next().await {
                    Some(Ok(event)) => {
                        self.failures = 0;
                        match event {
                            WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                                if let Some(v) = &obj.meta().resource_version {
                                    rv.clone_from(v);
                                }
                                self.pending.push_back(Ok(if initial {
                                    Event::InitApply(obj)
                                } else {
                                    Event::Apply(obj)
                                }));
                            }
                            WatchEvent::Deleted(obj) => {
                                if let Some(v) = &obj.meta().resource_version {
                                    rv.clone_from(v);
                                }
                                self.pending.push_back(Ok(Event::Delete(obj)));
                            }
                            WatchEvent::Bookmark(bookmark) => {
                                rv = bookmark.metadata.resource_version;
                                if initial
                                    && bookmark
                                        .metadata
                                        .annotations
                                        .get("k8s.io/initial-events-end")
                                        .is_some_and(|v| v == "true")
                                {
                                    initial = false;
                                    self.pending.push_back(Ok(Event::InitDone));
                                }
                            }
                            WatchEvent::Error(e) if e.code == 410 => {
                                self.relist();
                                return;
                            }
                            WatchEvent::Error(e) => {
                                self.phase = self.resume(rv, initial);
                                self.fail(Error::WatchError(e));
                                return;
                            }
                        }
                        self.phase = Phase::Watching {
                            rv,
                            stream: Some(stream),
                            initial,
                        };
                    }
                    Some(Err(e)) => {
                        self.phase = self.resume(rv, initial);
                        self.fail(Error::WatchStream(e));
                    }
                    None => {
                        // The server closed the watch (its timeout, or a dropped connection):
                        // resume where we were.
                        self.phase = self.resume(rv, initial);
                    }
                }
            }
        }
    }

    /// The phase after a watch ended at `rv`. A streaming list cut short must start over.
    fn resume(&self, rv: String, initial: bool) -> Phase<K> {
        bump(&self.metrics.restarts);
        if initial || rv.is_empty() {
            Phase::Start
        } else {
            Phase::Watching {
                rv,
                stream: None,
                initial: false,
            }
        }
    }

    async fn list_page(&mut self, continue_token: Option<String>) {
        let first = continue_token.is_none();
        match self
            .api
            .list(&self.config.list_params(continue_token))
            .await
        {
            Ok(list) => {
                self.failures = 0;
                if first {
                    self.pending.push_back(Ok(Event::Init));
                }
                self.pending
                    .extend(list.items.into_iter().map(|o| Ok(Event::InitApply(o))));
                match list.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => {
                        self.phase = Phase::Listing {
                            continue_token: token,
                        }
                    }
                    None => {
                        self.pending.push_back(Ok(Event::InitDone));
                        self.phase = Phase::Watching {
                            rv: list.metadata.resource_version.unwrap_or_default(),
                            stream: None,
                            initial: false,
                        };
                    }
                }
            }
            // An expired continue token: the list must start over, as one consistent snapshot.
            Err(e) if is_expired(&e) && !first => self.relist(),
            Err(e) => self.fail(Error::List(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_with_bounded_jitter() {
        let b = Backoff::default();
        for attempt in 0..10 {
            let d = b.delay(attempt);
            let base = (0.8 * 2f64.powi(attempt as i32)).min(30.0);
            assert!(
                d.as_secs_f64() >= base && d.as_secs_f64() < base * 2.0,
                "{attempt}: {d:?}"
            );
        }
    }
}
