//! The hot-loop detector: catches an object reconciled again and again by the controller's
//! own writes.
//!
//! The classic case is a reconciler that writes a status which differs on every run (a
//! timestamp, a counter, a list in hash order): each write is a watch event, each event a new
//! reconcile, forever. The detector calls a change an *echo* when it arrives while the object
//! is being reconciled or within [`HotLoopConfig::echo_window`] after — that is when a
//! controller's own write comes back. After [`HotLoopConfig::threshold`] echoes in a row it
//! logs a warning with the object key and the fields that kept changing, counts it in
//! `konverge_hot_loop_detections_total`, and backs that key off (doubling, up to
//! [`HotLoopConfig::max_backoff`]) for as long as the echoes continue. A change that is not an
//! echo (someone else's edit, after a quiet spell) ends the episode. Other keys are untouched.
//!
//! A reconcile that had new input — a change of an object the controller watches for it (an
//! owned pod, a mapped ConfigMap) since the previous one started — is not part of a loop: the
//! write it leads to reflects that input (a ReplicaSet's status while its pods are created,
//! scheduled and started), so its echo is not counted. The streak counts the echoes of
//! reconciles that only their own previous write woke; a loop that rewrites a watched object
//! as well as the primary one is therefore caught once that object's changes stop feeding it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use tokio::time::Instant;

use crate::key::ObjectKey;

/// When a key counts as hot and how it is slowed down.
#[derive(Clone, Debug)]
pub struct HotLoopConfig {
    /// Whether to detect at all (on by default).
    pub enabled: bool,
    /// Echoes in a row that make a hot loop (8).
    pub threshold: u32,
    /// How soon after a reconcile a change still counts as its echo (2 s).
    pub echo_window: Duration,
    /// The first back-off of a hot key (1 s); it doubles while the loop goes on...
    pub initial_backoff: Duration,
    /// ...up to this (5 minutes).
    pub max_backoff: Duration,
}

impl Default for HotLoopConfig {
    fn default() -> Self {
        HotLoopConfig {
            enabled: true,
            threshold: 8,
            echo_window: Duration::from_secs(2),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
        }
    }
}

/// When a key was last reconciled, packed in 8 bytes because it is kept for every recently
/// reconciled key: milliseconds since the detector started, plus one (0: still running),
/// shifted left by two; bit 0 is set while a reconcile runs, bit 1 when that reconcile had
/// new input from a watched object. Keyed by a hash of the key (a collision could only
/// misattribute one echo).
#[derive(Clone, Copy)]
struct Recent(u64);

impl Recent {
    const RUNNING: u64 = 1;
    const FED: u64 = 2;

    fn running(fed: bool) -> Recent {
        Recent(Self::RUNNING | if fed { Self::FED } else { 0 })
    }

    fn ended(self, epoch: Instant, at: Instant) -> Recent {
        let ms = u64::try_from(at.duration_since(epoch).as_millis()).unwrap_or(u64::MAX >> 3);
        Recent(((ms + 1) << 2) | (self.0 & Self::FED))
    }

    fn reconciling(self) -> bool {
        self.0 & Self::RUNNING != 0
    }

    fn fed(self) -> bool {
        self.0 & Self::FED != 0
    }

    fn last_end(self, epoch: Instant) -> Option<Instant> {
        match self.0 >> 2 {
            0 => None,
            ms => Some(epoch + Duration::from_millis(ms - 1)),
        }
    }
}

/// A key in an echo streak (few keys at a time).
#[derive(Default)]
struct Streak {
    count: u32,
    fields: BTreeSet<String>,
    backoff: Option<Duration>,
    until: Option<Instant>,
}

struct Keys {
    epoch: Instant,
    recent: HashMap<u64, Recent>,
    /// Keys a watched object's change queued since their last reconcile started (hashed).
    fed: HashSet<u64>,
    streaks: HashMap<ObjectKey, Streak>,
    ops: u32,
}

/// Per-controller hot-loop bookkeeping (see the module docs).
pub(crate) struct HotLoopDetector {
    config: HotLoopConfig,
    controller: String,
    /// The cluster, in a [`Fleet`](crate::fleet::Fleet): named in warnings.
    cluster: Option<std::sync::Arc<str>>,
    keys: Mutex<Keys>,
    detections: Option<Counter>,
    backed_off: Option<Gauge>,
}

/// Most field paths reported per warning.
const MAX_FIELDS: usize = 16;

fn hash(key: &ObjectKey) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl HotLoopDetector {
    pub(crate) fn new(
        config: HotLoopConfig,
        controller: &str,
        cluster: Option<&str>,
        metrics: Option<&crate::metrics::Metrics>,
    ) -> HotLoopDetector {
        let labels = crate::metrics::controller_labels(controller, cluster);
        HotLoopDetector {
            config,
            controller: controller.to_string(),
            cluster: cluster.map(std::sync::Arc::from),
            keys: Mutex::new(Keys {
                epoch: Instant::now(),
                recent: HashMap::new(),
                fed: HashSet::new(),
                streaks: HashMap::new(),
                ops: 0,
            }),
            detections: metrics.map(|m| m.hot_loops.get_or_create(&labels).clone()),
            backed_off: metrics.map(|m| m.hot_loop_keys.get_or_create(&labels).clone()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn end_streak(&self, streak: Option<Streak>) {
        if streak.is_some_and(|s| s.backoff.is_some())
            && let Some(g) = &self.backed_off
        {
            g.dec();
        }
    }

    /// A change to the primary object that will trigger a reconcile. `diff` gives the object's
    /// JSON before and after, computed lazily (only echoes need it).
    pub(crate) fn on_change(&self, key: &ObjectKey, diff: impl FnOnce() -> Option<(Value, Value)>) {
        if !self.config.enabled {
            return;
        }
        let now = Instant::now();
        let mut keys = self.lock();
        let Some(recent) = keys.recent.get(&hash(key)).copied() else {
            // Not reconciled lately: not an echo of anything.
            let ended = keys.streaks.remove(key);
            drop(keys);
            self.end_streak(ended);
            return;
        };
        let echo = recent.reconciling()
            || recent
                .last_end(keys.epoch)
                .is_some_and(|t| now.duration_since(t) <= self.config.echo_window);
        if !echo {
            let ended = keys.streaks.remove(key);
            drop(keys);
            self.end_streak(ended);
            return;
        }
        if recent.fed() {
            // The echo of a reconcile that had new input: not a loop, nor the end of one.
            return;
        }
        let st = keys.streaks.entry(key.clone()).or_default();
        st.count = st.count.saturating_add(1);
        if let Some((old, new)) = diff() {
            changed_paths(&old, &new, "", &mut st.fields);
        }
        match st.backoff {
            Some(backoff) => {
                let next = (backoff * 2).min(self.config.max_backoff);
                st.backoff = Some(next);
                st.until = Some(now + next);
            }
            None if st.count >= self.config.threshold => {
                let backoff = self.config.initial_backoff;
                st.backoff = Some(backoff);
                st.until = Some(now + backoff);
                let fields: Vec<&str> = st.fields.iter().map(String::as_str).collect();
                tracing::warn!(
                    controller = %self.controller,
                    object = %key.clone().in_cluster(self.cluster.clone()),
                    reconciles = st.count,
                    changing_fields = ?fields,
                    backoff = ?backoff,
                    "hot loop: the object keeps changing right after each reconcile (the \
                     controller's own writes?); backing it off"
                );
                if let Some(c) = &self.detections {
                    c.inc();
                }
                if let Some(g) = &self.backed_off {
                    g.inc();
                }
            }
            None => {}
        }
    }

    /// A change of an object the controller watches queued `key`: its next reconcile has new
    /// input, so the write it makes is no echo of the last one.
    pub(crate) fn on_input(&self, key: &ObjectKey) {
        if !self.config.enabled {
            return;
        }
        self.lock().fed.insert(hash(key));
    }

    /// Called before reconciling `key`: returns how long to wait if it is backed off, otherwise
    /// marks it as being reconciled.
    pub(crate) fn before(&self, key: &ObjectKey) -> Option<Duration> {
        if !self.config.enabled {
            return None;
        }
        let now = Instant::now();
        let mut keys = self.lock();
        if let Some(until) = keys.streaks.get(key).and_then(|s| s.until)
            && until > now
        {
            return Some(until - now);
        }
        let fed = keys.fed.remove(&hash(key));
        keys.recent.insert(hash(key), Recent::running(fed));
        None
    }

    /// Called when a reconcile of `key` finished.
    pub(crate) fn after(&self, key: &ObjectKey) {
        if !self.config.enabled {
            return;
        }
        let now = Instant::now();
        let mut keys = self.lock();
        let h = hash(key);
        let ended = keys
            .recent
            .get(&h)
            .copied()
            .unwrap_or(Recent::running(false))
            .ended(keys.epoch, now);
        keys.recent.insert(h, ended);
        // Now and then, forget keys whose echo window has passed, so memory follows the
        // recent reconcile rate rather than the number of objects ever seen.
        keys.ops = keys.ops.wrapping_add(1);
        if keys.ops.is_multiple_of(1024) {
            let (window, epoch) = (self.config.echo_window, keys.epoch);
            keys.recent.retain(|_, r| {
                r.reconciling()
                    || r.last_end(epoch)
                        .is_some_and(|t| now.duration_since(t) <= window)
            });
            keys.recent.shrink_to_fit();
            // A key queued for a primary that never reconciles would stay fed forever;
            // dropping its flag only lets one later echo count.
            let Keys { recent, fed, .. } = &mut *keys;
            fed.retain(|h| recent.contains_key(h));
            fed.shrink_to_fit();
        }
    }

    /// The object is gone: drop its state.
    pub(crate) fn forget(&self, key: &ObjectKey) {
        let mut keys = self.lock();
        keys.recent.remove(&hash(key));
        keys.fed.remove(&hash(key));
        let ended = keys.streaks.remove(key);
        drop(keys);
        self.end_streak(ended);
    }

    /// The fields seen changing in `key`'s current hot streak.
    #[cfg(test)]
    fn fields(&self, key: &ObjectKey) -> Vec<String> {
        self.lock()
            .streaks
            .get(key)
            .map(|s| s.fields.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Adds the dotted paths where `old` and `new` differ (ignoring bookkeeping the server changes
/// on every write).
fn changed_paths(old: &Value, new: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if out.len() >= MAX_FIELDS || old == new {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if matches!(
                    path.as_str(),
                    "metadata.resourceVersion" | "metadata.managedFields"
                ) {
                    continue;
                }
                let null = Value::Null;
                changed_paths(
                    a.get(k).unwrap_or(&null),
                    b.get(k).unwrap_or(&null),
                    &path,
                    out,
                );
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn detector() -> HotLoopDetector {
        HotLoopDetector::new(HotLoopConfig::default(), "test", None, None)
    }

    fn echo_json(i: u32) -> Option<(Value, Value)> {
        Some((
            json!({"metadata": {"resourceVersion": i.to_string()}, "status": {"seen": i}}),
            json!({"metadata": {"resourceVersion": (i + 1).to_string()}, "status": {"seen": i + 1}}),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn echoes_in_a_row_back_the_key_off_and_name_the_fields() {
        let d = detector();
        let key = ObjectKey::namespaced("ns", "flappy");
        let calm = ObjectKey::namespaced("ns", "calm");
        for i in 0..8 {
            assert_eq!(d.before(&key), None, "reconcile {i} runs");
            d.on_change(&key, || echo_json(i));
            d.after(&key);
        }
        let wait = d.before(&key).expect("backed off after 8 echoes");
        assert_eq!(wait, Duration::from_secs(1));
        assert_eq!(d.fields(&key), ["status.seen"]);
        assert_eq!(d.before(&calm), None, "other keys run normally");
        tokio::time::advance(wait).await;
        assert_eq!(d.before(&key), None);
        d.on_change(&key, || echo_json(9));
        d.after(&key);
        assert_eq!(
            d.before(&key),
            Some(Duration::from_secs(2)),
            "doubles while it goes on"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn changes_after_a_quiet_spell_are_not_echoes() {
        let d = detector();
        let key = ObjectKey::namespaced("ns", "edited");
        for i in 0..20 {
            assert_eq!(d.before(&key), None);
            d.after(&key);
            tokio::time::advance(Duration::from_secs(3)).await;
            d.on_change(&key, || echo_json(i));
        }
        assert_eq!(
            d.before(&key),
            None,
            "user edits every 3 s are not a hot loop"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_change_ends_the_episode() {
        let d = detector();
        let key = ObjectKey::namespaced("ns", "k");
        for i in 0..8 {
            d.before(&key);
            d.on_change(&key, || echo_json(i));
            d.after(&key);
        }
        let wait = d.before(&key).unwrap();
        tokio::time::advance(wait + Duration::from_secs(10)).await;
        d.on_change(&key, || None);
        assert_eq!(d.before(&key), None);
        d.on_change(&key, || echo_json(0));
        d.after(&key);
        assert_eq!(
            d.before(&key),
            None,
            "one echo after the episode is not a loop"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn echoes_of_reconciles_with_new_input_are_not_a_loop() {
        let d = detector();
        let key = ObjectKey::namespaced("ns", "scaling");
        // A status that follows the pods: every reconcile was woken by a pod's change too.
        for i in 0..50 {
            d.on_input(&key);
            assert_eq!(d.before(&key), None, "reconcile {i} runs");
            d.on_change(&key, || echo_json(i));
            d.after(&key);
        }
        assert_eq!(d.before(&key), None, "50 fed reconciles are progress");
        d.after(&key);
        // Once the pods are quiet, a status that still changes on every write is caught.
        for i in 0..8 {
            assert_eq!(d.before(&key), None, "unfed reconcile {i} runs");
            d.on_change(&key, || echo_json(i));
            d.after(&key);
        }
        assert_eq!(d.before(&key), Some(Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn input_between_echoes_does_not_hide_an_unfed_streak() {
        let d = detector();
        let key = ObjectKey::namespaced("ns", "flappy");
        // Every other reconcile is fed: the unfed ones still add up to a loop.
        for i in 0..16 {
            if i % 2 == 0 {
                d.on_input(&key);
            }
            assert_eq!(d.before(&key), None, "reconcile {i} runs");
            d.on_change(&key, || echo_json(i));
            d.after(&key);
        }
        assert!(d.before(&key).is_some(), "eight unfed echoes are a loop");
    }

    #[tokio::test(start_paused = true)]
    async fn input_for_keys_never_reconciled_is_not_kept() {
        let d = detector();
        for i in 0..100 {
            d.on_input(&ObjectKey::namespaced("ns", format!("gone-{i}")));
        }
        let key = ObjectKey::namespaced("ns", "live");
        for _ in 0..1024 {
            d.before(&key);
            d.after(&key);
        }
        assert!(d.lock().fed.is_empty(), "pruned with the recent keys");
    }
}
