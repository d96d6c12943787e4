//! Injected time. Limiter algorithms take `now` as an argument; the stores and the edge layer
//! read it from a `Clock`, so tests drive time by hand instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Nanoseconds since an arbitrary, fixed epoch; only differences mean anything.
pub type Nanos = u64;

pub trait Clock: Send + Sync {
    fn now(&self) -> Nanos;
}

/// Monotonic time since the clock was made.
pub struct SystemClock {
    epoch: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            epoch: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        // Starts at one hour so "now minus a window" never underflows in the algorithms.
        self.epoch.elapsed().as_nanos() as u64 + 3_600_000_000_000
    }
}

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
