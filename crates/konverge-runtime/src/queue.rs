//! The work queue between event handlers and reconcilers.
//!
//! Handlers only [`add`](WorkQueue::add) keys and never block; workers [`get`](WorkQueue::get)
//! a key, reconcile it and call [`done`](WorkQueue::done). The queue guarantees, as client-go's
//! does:
//!
//! - **de-duplication**: a key added many times before a worker takes it is reconciled once;
//! - **one worker per key**: a key added while it is being processed waits until `done`, then
//!   runs again (so the reconciler sees the latest state, and never races itself);
//! - **delayed requeue** ([`add_after`](WorkQueue::add_after)), keeping the earliest due time;
//! - **per-key exponential backoff with jitter** plus an **overall token bucket**
//!   ([`add_rate_limited`](WorkQueue::add_rate_limited)), reset by [`forget`](WorkQueue::forget).
//!
//! Timing uses `tokio::time`, so tests drive it with paused time.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use rand::Rng;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::{Labels, Metrics, seconds};

/// How retries are spaced (controller-runtime's defaults).
#[derive(Clone, Debug)]
pub struct RateLimit {
    /// Delay after the first failure of a key (5 ms); it doubles with each further failure.
    pub base_delay: Duration,
    /// Longest per-key delay (1000 s).
    pub max_delay: Duration,
    /// Extra random delay, as a fraction of the computed one (0.1 adds up to 10%), so keys
    /// that failed together do not all retry in the same instant.
    pub jitter: f64,
    /// Overall retries per second across all keys (10)...
    pub qps: f64,
    /// ...after a burst of this many (100).
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            jitter: 0.1,
            qps: 10.0,
            burst: 100,
        }
    }
}

/// A de-duplicating, rate-limited queue of keys. Cloning gives another handle to the same queue.
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<T> std::fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue").finish_non_exhaustive()
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    notify: Notify,
    limit: RateLimit,
    metrics: Option<QueueMetrics>,
}

/// Keys are held as `Arc<T>`: a queued key is in `ready` and in `dirty` at once, a delayed
/// one in `due` and `timers`, and after a burst (a controller's initial list queues every
/// object) a second copy of every key would be a large share of the queue's memory.
struct State<T> {
    /// Keys ready for a worker, in the order they became ready.
    ready: VecDeque<Arc<T>>,
    /// Keys ready for a worker ahead of `ready`: the owner's backlog, fed a batch at a time
    /// ([`WorkQueue::add_first`]), keeps its place ahead of keys added meanwhile.
    first: VecDeque<Arc<T>>,
    /// Keys waiting to be processed (in `ready`, or re-added while processing), with when
    /// they last became ready (for the queue-duration metric).
    dirty: HashMap<Arc<T>, Instant>,
    /// Keys a worker holds, and since when.
    processing: HashMap<Arc<T>, Instant>,
    /// Delayed keys and their due time; `timers` may hold stale entries, `due` is the truth.
    due: HashMap<Arc<T>, Instant>,
    timers: BinaryHeap<Reverse<(Instant, u64, Arc<T>)>>,
    timer_seq: u64,
    failures: HashMap<T, u32>,
    /// Keys the owner will add but holds back for now (counted in the depth metric).
    backlog: usize,
    bucket: Bucket,
    shutting_down: bool,
}

struct Bucket {
    tokens: f64,
    last: Option<Instant>,
}

#[derive(Clone)]
struct QueueMetrics {
    depth: Gauge,
    adds: Counter,
    retries: Counter,
    metrics: Arc<Metrics>,
    labels: Labels,
}

impl<T: Clone + Eq + Hash + Ord + Send + 'static> WorkQueue<T> {
    /// A queue with the default rate limit and no metrics.
    pub fn new() -> WorkQueue<T> {
        WorkQueue::with_rate_limit(RateLimit::default())
    }

    /// A queue spacing retries by `limit`.
    pub fn with_rate_limit(limit: RateLimit) -> WorkQueue<T> {
        WorkQueue::build(limit, None)
    }

    pub(crate) fn build(limit: RateLimit, metrics: Option<(Arc<Metrics>, Labels)>) -> WorkQueue<T> {
        let metrics = metrics.map(|(metrics, labels)| {
            let depth = metrics.queue_depth.get_or_create(&labels).clone();
            let adds = metrics.queue_adds.get_or_create(&labels).clone();
            let retries = metrics.queue_retries.get_or_create(&labels).clone();
            QueueMetrics {
                depth,
                adds,
                retries,
                metrics,
                labels,
            }
        });
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    ready: VecDeque::new(),
                    first: VecDeque::new(),
                    dirty: HashMap::new(),
                    processing: HashMap::new(),
                    due: HashMap::new(),
                    timers: BinaryHeap::new(),
                    timer_seq: 0,
                    failures: HashMap::new(),
                    backlog: 0,
                    bucket: Bucket {
                        tokens: f64::from(limit.burst),
                        last: None,
                    },
                    shutting_down: false,
                }),
                notify: Notify::new(),
                limit,
                metrics,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        // A panic while holding the lock leaves consistent state (every update is one step).
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` now. A key already waiting is not queued twice; a key being processed runs
    /// again after its worker calls [`done`](Self::done). Ignored after shutdown.
    pub fn add(&self, key: T) {
        let mut state = self.lock();
        if state.shutting_down || state.dirty.contains_key(&key) {
            return;
        }
        if self.add_locked(&mut state, Arc::new(key), false) {
            drop(state);
            self.inner.notify.notify_one();
        }
    }

    /// [`add`](Self::add), ahead of every key added with `add`: for a backlog the owner
    /// holds back and feeds a batch at a time (a controller's first list), so that it is
    /// worked through in the order it would have been had it been queued whole.
    pub(crate) fn add_first(&self, key: T) {
        let mut state = self.lock();
        if state.shutting_down || state.dirty.contains_key(&key) {
            return;
        }
        if self.add_locked(&mut state, Arc::new(key), true) {
            drop(state);
            self.inner.notify.notify_one();
        }
    }

    /// Returns whether a worker should be woken.
    fn add_locked(&self, state: &mut State<T>, key: Arc<T>, first: bool) -> bool {
        if state.shutting_down || state.dirty.contains_key(&key) {
            return false;
        }
        if let Some(m) = &self.inner.metrics {
            m.adds.inc();
        }
        state.due.remove(&key);
        state.dirty.insert(key.clone(), Instant::now());
        if state.processing.contains_key(&key) {
            return false;
        }
        if first {
            state.first.push_back(key);
        } else {
            state.ready.push_back(key);
        }
        self.set_depth(state);
        true
    }

    fn set_depth(&self, state: &State<T>) {
        if let Some(m) = &self.inner.metrics {
            m.depth
                .set((state.first.len() + state.ready.len() + state.backlog) as i64);
        }
    }

    /// Counts `keys` that the queue's owner holds back to add later (a controller's initial
    /// list, fed a batch at a time) into the `workqueue_depth` metric, so the metric shows
    /// the whole backlog.
    pub(crate) fn set_backlog(&self, keys: usize) {
        let mut state = self.lock();
        state.backlog = keys;
        self.set_depth(&state);
    }

    /// Queues `key` once `delay` has passed. If it is already due sooner, the sooner time wins.
    pub fn add_after(&self, key: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + delay;
        let mut state = self.lock();
        if state.shutting_down || state.dirty.contains_key(&key) {
            return;
        }
        if state.due.get(&key).is_some_and(|&due| due <= at) {
            return;
        }
        let key = Arc::new(key);
        state.due.insert(key.clone(), at);
        state.timer_seq += 1;
        let seq = state.timer_seq;
        state.timers.push(Reverse((at, seq, key)));
        drop(state);
        // A worker asleep until a later timer must re-arm for this one.
        self.inner.notify.notify_one();
    }

    /// Queues `key` after its backoff: `base_delay * 2^failures` (plus jitter, capped at
    /// `max_delay`), and no sooner than the overall token bucket allows. Returns the delay.
    pub fn add_rate_limited(&self, key: T) -> Duration {
        let delay = {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            let exp = *failures;
            *failures = failures.saturating_add(1);
            let limit = &self.inner.limit;
            let base = limit.base_delay.as_secs_f64() * 2f64.powi(exp.min(64) as i32);
            let jitter = if limit.jitter > 0.0 {
                rand::rng().random_range(0.0..limit.jitter)
            } else {
                0.0
            };
            let per_key = (base * (1.0 + jitter)).min(limit.max_delay.as_secs_f64());
            let overall = state.bucket.reserve(limit);
            Duration::from_secs_f64(per_key.max(overall))
        };
        if let Some(m) = &self.inner.metrics {
            m.retries.inc();
        }
        self.add_after(key, delay);
        delay
    }

    /// Queues `key` at once if it has not failed since it was last [forgotten](Self::forget)
    /// (and counts this as its first failure); otherwise after its backoff, as
    /// [`add_rate_limited`](Self::add_rate_limited). For a failure that is expected to clear
    /// at once but would spin if it did not. Returns the delay.
    pub fn add_at_once_then_rate_limited(&self, key: T) -> Duration {
        {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            if *failures > 0 {
                drop(state);
                return self.add_rate_limited(key);
            }
            *failures = 1;
        }
        self.add(key);
        Duration::ZERO
    }

    /// Clears `key`'s failure count, so its next retry starts from the base delay.
    pub fn forget(&self, key: &T) {
        self.lock().failures.remove(key);
    }

    /// How many times `key` has been retried since it was last forgotten.
    pub fn num_requeues(&self, key: &T) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Waits for the next key, or `None` once the queue is shut down (keys still waiting are
    /// dropped: level-triggered controllers see them again after a restart).
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_timer = {
                let mut state = self.lock();
                if state.shutting_down {
                    return None;
                }
                let now = Instant::now();
                let mut woke = false;
                while let Some(Reverse((at, _, _))) = state.timers.peek() {
                    if *at > now {
                        break;
                    }
                    let Some(Reverse((at, _, key))) = state.timers.pop() else {
                        break;
                    };
                    if state.due.get(&key) == Some(&at) {
                        state.due.remove(&key);
                        woke |= self.add_locked(&mut state, key, false);
                    }
                }
                if let Some(key) = state.first.pop_front().or_else(|| state.ready.pop_front()) {
                    let queued = state.dirty.remove(&key);
                    let taken = T::clone(&key);
                    state.processing.insert(key, now);
                    state.shrink_if_sparse();
                    self.set_depth(&state);
                    if let (Some(m), Some(queued)) = (&self.inner.metrics, queued) {
                        m.metrics
                            .queue_duration
                            .get_or_create(&m.labels)
                            .observe(seconds(now - queued));
                    }
                    if woke && (!state.ready.is_empty() || !state.first.is_empty()) {
                        self.inner.notify.notify_one();
                    }
                    return Some(taken);
                }
                state.timers.peek().map(|Reverse((at, _, _))| *at)
            };
            match next_timer {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` finished. If it was added again meanwhile, it is queued now.
    pub fn done(&self, key: &T) {
        let mut state = self.lock();
        let started = state.processing.remove(key);
        if let (Some(m), Some(started)) = (&self.inner.metrics, started) {
            m.metrics
                .work_duration
                .get_or_create(&m.labels)
                .observe(seconds(started.elapsed()));
        }
        if !state.shutting_down
            && let Some((again, _)) = state.dirty.get_key_value(key)
        {
            let again = again.clone();
            if let Some(queued) = state.dirty.get_mut(key) {
                *queued = Instant::now();
            }
            state.ready.push_back(again);
            self.set_depth(&state);
            drop(state);
            self.inner.notify.notify_one();
        }
    }

    /// Stops handing out keys: every waiting and future [`get`](Self::get) returns `None`, and
    /// adds are ignored. Keys being processed can still be marked done.
    pub fn shut_down(&self) {
        self.lock().shutting_down = true;
        self.inner.notify.notify_waiters();
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Keys ready for a worker now (not counting delayed or in-progress keys).
    pub fn len(&self) -> usize {
        let state = self.lock();
        state.first.len() + state.ready.len()
    }

    /// Keys added with [`add_first`](Self::add_first) and not taken yet.
    pub(crate) fn len_first(&self) -> usize {
        self.lock().first.len()
    }

    /// Whether no key is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys being processed right now.
    pub fn processing(&self) -> usize {
        self.lock().processing.len()
    }

    /// Keys waiting for their delay.
    pub fn delayed(&self) -> usize {
        self.lock().due.len()
    }

    /// Refreshes the gauges that describe work in progress (called periodically).
    pub(crate) fn update_progress_metrics(&self) {
        let Some(m) = &self.inner.metrics else {
            return;
        };
        let state = self.lock();
        let now = Instant::now();
        let ages: BTreeMap<Duration, usize> =
            state
                .processing
                .values()
                .fold(BTreeMap::new(), |mut acc, started| {
                    *acc.entry(now - *started).or_default() += 1;
                    acc
                });
        let total: f64 = ages.iter().map(|(age, n)| seconds(*age) * *n as f64).sum();
        let longest = ages.keys().next_back().copied().unwrap_or_default();
        m.metrics
            .unfinished_work
            .get_or_create(&m.labels)
            .set(total);
        m.metrics
            .longest_running
            .get_or_create(&m.labels)
            .set(seconds(longest));
    }
}

impl<T: Eq + Hash> State<T> {
    /// Gives back the memory of a burst once it has drained (a map or deque never shrinks
    /// on its own), keeping room for twice what is left so a steady flow does not churn.
    fn shrink_if_sparse(&mut self) {
        const FLOOR: usize = 1024;
        for lane in [&mut self.ready, &mut self.first] {
            if lane.capacity() > FLOOR && lane.len() * 8 < lane.capacity() {
                lane.shrink_to(lane.len() * 2);
            }
        }
        if self.dirty.capacity() > FLOOR && self.dirty.len() * 8 < self.dirty.capacity() {
            self.dirty.shrink_to(self.dirty.len() * 2);
        }
    }
}

impl<T: Clone + Eq + Hash + Ord + Send + 'static> Default for WorkQueue<T> {
    fn default() -> Self {
        WorkQueue::new()
    }
}

impl Bucket {
    /// Takes a token; returns how long the caller must wait for it (in seconds).
    fn reserve(&mut self, limit: &RateLimit) -> f64 {
        let now = Instant::now();
        if let Some(last) = self.last {
            let refill = seconds(now - last) * limit.qps;
            self.tokens = (self.tokens + refill).min(f64::from(limit.burst));
        }
        self.last = Some(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 || limit.qps <= 0.0 {
            0.0
        } else {
            -self.tokens / limit.qps
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> RateLimit {
        RateLimit {
            jitter: 0.0,
            ..RateLimit::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn adds_are_deduplicated_and_fifo() {
        let q = WorkQueue::new();
        for k in ["b", "a", "b", "c", "a"] {
            q.add(k);
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("c"));
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn at_once_the_first_time_then_backed_off_until_forgotten() {
        let q = WorkQueue::with_rate_limit(no_jitter());
        assert_eq!(q.add_at_once_then_rate_limited("k"), Duration::ZERO);
        assert_eq!(q.get().await, Some("k"));
        q.done(&"k");
        assert_eq!(
            q.add_at_once_then_rate_limited("k"),
            Duration::from_millis(10),
            "a repeat backs off (the first failure counted as one)"
        );
        q.forget(&"k");
        assert_eq!(q.add_at_once_then_rate_limited("k"), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_being_processed_is_not_handed_out_again_until_done() {
        let q = WorkQueue::new();
        q.add("k");
        let k = q.get().await.unwrap();
        q.add("k");
        q.add("k");
        assert!(q.is_empty(), "held back while processing");
        let second = tokio::time::timeout(Duration::from_secs(1), q.get()).await;
        assert!(second.is_err(), "no second worker gets the key");
        q.done(&k);
        assert_eq!(q.get().await, Some("k"), "re-added once, after done");
        q.done(&"k");
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_wait_and_the_earliest_due_time_wins() {
        let q = WorkQueue::new();
        let start = Instant::now();
        q.add_after("late", Duration::from_secs(10));
        q.add_after("k", Duration::from_secs(5));
        q.add_after("k", Duration::from_secs(2));
        q.add_after("k", Duration::from_secs(8));
        assert_eq!(q.get().await, Some("k"));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(q.get().await, Some("late"));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sleeping_worker_wakes_for_an_earlier_timer() {
        let q = WorkQueue::new();
        let start = Instant::now();
        q.add_after("late", Duration::from_secs(60));
        let worker = {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        q.add_after("soon", Duration::from_secs(1));
        assert_eq!(worker.await.unwrap(), Some("soon"));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn per_key_backoff_doubles_and_forget_resets_it() {
        let q = WorkQueue::with_rate_limit(no_jitter());
        let delays: Vec<Duration> = (0..4).map(|_| q.add_rate_limited("k")).collect();
        assert_eq!(
            delays,
            [5, 10, 20, 40].map(Duration::from_millis).to_vec(),
            "5 ms doubling"
        );
        assert_eq!(q.num_requeues(&"k"), 4);
        // Another key is not slowed down by k's failures.
        assert_eq!(q.add_rate_limited("other"), Duration::from_millis(5));
        q.forget(&"k");
        assert_eq!(q.add_rate_limited("k"), Duration::from_millis(5));
        let capped = WorkQueue::with_rate_limit(RateLimit {
            max_delay: Duration::from_millis(30),
            ..no_jitter()
        });
        for _ in 0..10 {
            capped.add_rate_limited("k");
        }
        assert_eq!(capped.add_rate_limited("k"), Duration::from_millis(30));
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_jitter_stays_within_its_fraction() {
        let q = WorkQueue::with_rate_limit(RateLimit {
            burst: 1000,
            ..RateLimit::default()
        });
        for i in 0..200 {
            let key = format!("k{i}");
            q.add_rate_limited(key.clone());
            let d = q.add_rate_limited(key);
            assert!(
                d >= Duration::from_millis(10) && d < Duration::from_millis(11),
                "{d:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_token_bucket_limits_retries_across_keys() {
        let q = WorkQueue::with_rate_limit(RateLimit {
            qps: 10.0,
            burst: 2,
            ..no_jitter()
        });
        assert_eq!(q.add_rate_limited("a"), Duration::from_millis(5));
        assert_eq!(q.add_rate_limited("b"), Duration::from_millis(5));
        // The burst is spent: the third retry waits for a token (1/10 s).
        assert_eq!(q.add_rate_limited("c"), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_releases_waiting_workers_and_ignores_adds() {
        let q: WorkQueue<&str> = WorkQueue::new();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        };
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
        q.add("k");
        assert!(q.is_empty());
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_follow_depth_adds_and_retries() {
        let metrics = Arc::new(Metrics::new());
        let q = WorkQueue::build(
            no_jitter(),
            Some((metrics.clone(), crate::metrics::queue_labels("c", None))),
        );
        q.add("a");
        q.add("a");
        q.add("b");
        q.add_rate_limited("c");
        let text = metrics.encode();
        assert!(
            text.contains(r#"workqueue_depth{controller="c",name="c"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"workqueue_adds_total{controller="c",name="c"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"workqueue_retries_total{controller="c",name="c"} 1"#),
            "{text}"
        );
        let k = q.get().await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        q.update_progress_metrics();
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"workqueue_longest_running_processor_seconds{controller="c",name="c"} 3.0"#
            ),
            "{text}"
        );
        q.done(&k);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drained_burst_gives_its_memory_back() {
        let q = WorkQueue::new();
        for i in 0..10_000 {
            q.add(format!("k{i}"));
        }
        for _ in 0..9_990 {
            let k = q.get().await.unwrap();
            q.done(&k);
        }
        let state = q.lock();
        assert!(state.dirty.capacity() < 1024, "{}", state.dirty.capacity());
        assert!(state.ready.capacity() < 1024, "{}", state.ready.capacity());
        assert_eq!(state.ready.len(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn the_depth_metric_counts_keys_held_back() {
        let metrics = Arc::new(Metrics::new());
        let q = WorkQueue::build(
            no_jitter(),
            Some((metrics.clone(), crate::metrics::queue_labels("c", None))),
        );
        q.set_backlog(5);
        q.add("a");
        assert!(
            metrics
                .encode()
                .contains(r#"workqueue_depth{controller="c",name="c"} 6"#)
        );
        q.set_backlog(0);
        assert_eq!(q.get().await, Some("a"));
        assert!(
            metrics
                .encode()
                .contains(r#"workqueue_depth{controller="c",name="c"} 0"#)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_added_first_go_ahead_of_the_rest_and_are_still_deduplicated() {
        let q = WorkQueue::new();
        q.add("event");
        q.add_first("b");
        q.add_first("c");
        q.add("later");
        q.add("b");
        q.add_first("event");
        assert_eq!(q.len(), 4);
        assert_eq!(q.len_first(), 2);
        let order = [q.get().await, q.get().await, q.get().await, q.get().await];
        assert_eq!(order.map(Option::unwrap), ["b", "c", "event", "later"]);
    }
}
