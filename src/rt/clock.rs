//! Injected time. Limiter algorithms take `now` as an argument; the stores and the edge layer
//! read it from a `Clock`, so tests drive time by hand instead of sleeping.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since an arbitrary, fixed epoch; only differences mean anything.
pub(crate) type Nanos = u64;

pub trait Clock: Send + Sync {
    fn now(&self) -> Nanos;
}

/// Wall-clock time since the Unix epoch, so fixed windows align to the calendar (a
/// per-minute window resets on the minute) exactly as Redis `TIME` does. The algorithms
/// saturate, so a clock stepped backwards costs a little refill, never a panic.
#[derive(Default)]
pub struct SystemClock;

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(any(test, fuzzing, feature = "testing"))]
pub use manual::ManualClock;

#[cfg(any(test, fuzzing, feature = "testing"))]
mod manual {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::{Clock, Nanos};

    /// A clock that moves only when told to; for tests.
    #[derive(Clone)]
    pub struct ManualClock {
        now: Arc<AtomicU64>,
    }

    impl ManualClock {
        pub fn new() -> ManualClock {
            ManualClock {
                now: Arc::new(AtomicU64::new(3_600_000_000_000)),
            }
        }

        pub fn advance(&self, by: Duration) {
            self.now.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
        }
    }

    impl Default for ManualClock {
        fn default() -> Self {
            ManualClock::new()
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Nanos {
            self.now.load(Ordering::SeqCst)
        }
    }
}
