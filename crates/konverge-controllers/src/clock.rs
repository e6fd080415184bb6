//! The time a controller reads: `minReadySeconds`, progress deadlines, active deadlines,
//! schedules and TTLs are all measured against it.
//!
//! [`Clock::system`] is the wall clock. [`Clock::tokio`] is the wall clock as it stood when
//! the clock was made, advanced by Tokio's clock: under `#[tokio::test(start_paused = true)]`
//! it moves only as the test's virtual time does, so a five-minute deadline passes in no
//! real time and at exactly the same moment on every run.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

/// A source of the current time (cheap to clone).
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Clock").field(&self.now()).finish()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// The wall clock.
    pub fn system() -> Clock {
        Clock(Arc::new(Timestamp::now))
    }

    /// The wall clock at this moment, advanced by Tokio's clock from here on (virtual time
    /// in a paused-time test).
    pub fn tokio() -> Clock {
        let (wall, start) = (Timestamp::now(), tokio::time::Instant::now());
        Clock(Arc::new(move || {
            let elapsed = SignedDuration::try_from(start.elapsed()).unwrap_or(SignedDuration::MAX);
            wall.saturating_add(elapsed).unwrap_or(Timestamp::MAX)
        }))
    }

    /// A clock that reads what `now` says.
    pub fn from_fn(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(now))
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        (self.0)()
    }

    /// The current time as the API's `metav1.Time`, truncated to whole seconds as the API
    /// server serializes it.
    pub fn now_time(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        let now = self.now();
        let whole = Timestamp::from_second(now.as_second()).unwrap_or(now);
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_follows_virtual_time() {
        let clock = Clock::tokio();
        let before = clock.now();
        tokio::time::sleep(Duration::from_secs(300)).await;
        let waited = clock.now().duration_since(before);
        assert_eq!(waited.as_secs(), 300);
    }
}
