//! A circuit breaker for the Redis store: after `threshold` failures in a row it opens, and
//! calls fail at once instead of each waiting out a timeout; after `open_for` one call is let
//! through as a probe (half-open): success closes the breaker, failure opens it again.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Breaker {
    threshold: u32,
    open_for: Duration,
    epoch: Instant,
    failures: AtomicU32,
    /// Nanoseconds since `epoch` until which calls are refused; 0 while closed.
    open_until: AtomicU64,
    probing: AtomicBool,
}

impl Breaker {
    pub fn new(threshold: u32, open_for: Duration) -> Breaker {
        Breaker {
            threshold: threshold.max(1),
            open_for,
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// May a call go out now? Err carries how long until the next probe.
    pub fn permit(&self, now: Instant) -> Result<(), Duration> {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Ok(());
        }
        let now = self.since_epoch(now);
        if now < open_until {
            return Err(Duration::from_nanos(open_until - now));
        }
        // Half-open: exactly one caller probes; the others keep failing fast meanwhile.
        match self
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(_) => Err(self.open_for),
        }
    }

    /// True when this success closed an open breaker.
    pub fn succeeded(&self) -> bool {
        if self.failures.load(Ordering::Relaxed) == 0 && !self.is_open() {
            return false;
        }
        self.failures.store(0, Ordering::Relaxed);
        self.probing.store(false, Ordering::Release);
        self.open_until.swap(0, Ordering::AcqRel) != 0
    }

    /// True when this failure opened a closed breaker (a failed probe reopens it quietly).
    pub fn failed(&self, now: Instant) -> bool {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        let probe_failed = self.probing.swap(false, Ordering::AcqRel);
        if !probe_failed && failures < self.threshold {
            return false;
        }
        let until = self.since_epoch(now) + self.open_for.as_nanos() as u64;
        self.open_until.swap(until.max(1), Ordering::AcqRel) == 0
    }

    pub fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }

    fn since_epoch(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAUSE: Duration = Duration::from_millis(30);

    #[test]
    fn opens_after_the_threshold_and_probes_once_after_the_pause() {
        let breaker = Breaker::new(3, PAUSE);
        let start = Instant::now();
        for _ in 0..2 {
            breaker.failed(start);
            assert!(
                breaker.permit(start).is_ok(),
                "still closed below the threshold"
            );
        }
        assert!(breaker.failed(start), "the threshold opens it");
        assert!(breaker.is_open());
        assert_eq!(breaker.permit(start), Err(PAUSE), "open refuses at once");
        let later = start + PAUSE;
        assert!(breaker.permit(later).is_ok(), "the first caller probes");
        assert!(breaker.permit(later).is_err(), "others wait for the probe");
        breaker.failed(later);
        assert!(
            breaker.permit(later + PAUSE / 2).is_err(),
            "a failed probe opens it again"
        );
        let after_second_pause = later + PAUSE;
        assert!(breaker.permit(after_second_pause).is_ok());
        assert!(breaker.succeeded(), "a good probe closes it");
        assert!(!breaker.is_open());
        assert!(!breaker.succeeded());
        assert!(breaker.permit(after_second_pause).is_ok());
        assert!(breaker.permit(after_second_pause).is_ok());
    }

    #[test]
    fn a_success_resets_the_count() {
        let breaker = Breaker::new(2, Duration::from_secs(60));
        let now = Instant::now();
        breaker.failed(now);
        breaker.succeeded();
        breaker.failed(now);
        assert!(!breaker.is_open());
    }
}
