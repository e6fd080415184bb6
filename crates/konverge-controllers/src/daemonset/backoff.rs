//! The back-off between deletions of a node's failed daemon pods (kcm's
//! `flowcontrol.Backoff`, started at one second and capped at fifteen minutes): a kubelet
//! that rejects every daemon pod would otherwise see one created and deleted in a hot loop.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// kcm's initial delay.
pub const INITIAL: Duration = Duration::from_secs(1);
/// kcm's cap.
pub const MAX: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: Instant,
}

/// Per-key exponential back-off; entries untouched for twice the cap are forgotten.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(INITIAL, MAX)
    }
}

impl Backoff {
    /// A back-off starting at `initial`, doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn expired(&self, entry: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(entry.last_update) > self.max * 2
    }

    /// The current delay of `id` if less than that delay has passed since its last step
    /// (kcm's `IsInBackOffSinceUpdate` and `Get`).
    pub fn waiting(&self, id: &str, now: Instant) -> Option<Duration> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get(id)?;
        if self.expired(entry, now) {
            return None;
        }
        (now.saturating_duration_since(entry.last_update) < entry.delay).then_some(entry.delay)
    }

    /// Steps `id`'s back-off: the initial delay, or twice the last up to the cap (kcm's
    /// `Next`). Forgets expired entries on the way (kcm's periodic `GC`).
    pub fn step(&self, id: &str, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, e| !self.expired(e, now));
        let delay = match entries.get(id) {
            Some(entry) => (entry.delay * 2).min(self.max),
            None => self.initial,
        };
        entries.insert(
            id.to_string(),
            Entry {
                delay,
                last_update: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_then_forgets() {
        let backoff = Backoff::default();
        let start = Instant::now();
        assert_eq!(backoff.waiting("k", start), None);
        backoff.step("k", start);
        assert_eq!(backoff.waiting("k", start), Some(INITIAL));
        assert_eq!(backoff.waiting("k", start + INITIAL), None);
        backoff.step("k", start + INITIAL);
        assert_eq!(backoff.waiting("k", start + INITIAL), Some(INITIAL * 2));
        let later = start + MAX * 3;
        assert_eq!(backoff.waiting("k", later), None);
        backoff.step("k", later);
        assert_eq!(backoff.waiting("k", later), Some(INITIAL));
    }
}
