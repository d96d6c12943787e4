//! A circuit breaker for one Redis node: after `threshold` failures in a row that span at least
//! `min_span` it opens, and calls to the node fail at once instead of each waiting out a
//! timeout; after `open_for` one call is let through as a probe (half-open): success closes the
//! breaker, failure opens it again.
//!
//! A call holds a `Permit` for as long as it runs, and the permit settles the call's outcome
//! however the call ends: a probe whose request goes away (its future dropped at any await)
//! gives the half-open slot back, so the next call probes. No interleaving can leave the
//! breaker waiting for a probe that will never report.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How the breaker behaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BreakerSettings {
    /// Failures in a row that open it...
    pub threshold: u32,
    /// ...when they span at least this long: one failed round trip fails every call merged
    /// into it at the same instant, and a single hiccup must not cut a node off for `open_for`.
    pub min_span: Duration,
    /// How long it stays open before a probe.
    pub open_for: Duration,
    /// A probe that has neither reported nor been dropped after this long (it cannot happen
    /// while every call holds its permit; a safety net) gives its slot to the next caller.
    pub probe_lease: Duration,
}

pub(crate) struct Breaker {
    settings: BreakerSettings,
    epoch: Instant,
    failures: AtomicU32,
    /// Nanoseconds since `epoch` (+1, so 0 means none) of the first failure in a row.
    failing_since: AtomicU64,
    /// Nanoseconds since `epoch` until which calls are refused; 0 while closed.
    open_until: AtomicU64,
    /// Nanoseconds since `epoch` (+1) when the current probe started; 0 while none runs.
    probe_since: AtomicU64,
}

/// What a settled call changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    None,
    Opened,
    Closed,
}

/// Leave to make one call. Settle it with `succeeded` or `failed`; dropped unsettled (the
/// request went away), a probe gives its slot back and an ordinary call reports nothing.
#[must_use = "a permit settles the call's outcome"]
pub(crate) struct Permit<'a> {
    breaker: &'a Breaker,
    /// The `probe_since` this permit set, when it is the probe.
    probe: Option<u64>,
}

impl Breaker {
    pub(crate) fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            settings: BreakerSettings {
                threshold: settings.threshold.max(1),
                ..settings
            },
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            failing_since: AtomicU64::new(0),
            open_until: AtomicU64::new(0),
            probe_since: AtomicU64::new(0),
        }
    }

    /// May a call go out now? Err carries how long until the next probe may.
    pub(crate) fn permit(&self, now: Instant) -> Result<Permit<'_>, Duration> {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Ok(Permit {
                breaker: self,
                probe: None,
            });
        }
        let now = self.since_epoch(now);
        if now < open_until {
            return Err(Duration::from_nanos(open_until - now));
        }
        // Half-open: exactly one caller probes; the others keep failing fast meanwhile. A
        // probe past its lease is taken over.
        let current = self.probe_since.load(Ordering::Acquire);
        let lease = self.settings.probe_lease.as_nanos() as u64;
        let free = current == 0 || now.saturating_sub(current - 1) >= lease;
        let mine = now + 1;
        if free
            && self
                .probe_since
                .compare_exchange(current, mine, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(Permit {
                breaker: self,
                probe: Some(mine),
            });
        }
        Err(self.settings.open_for)
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }

    fn succeeded(&self) -> Transition {
        self.failures.store(0, Ordering::Release);
        self.failing_since.store(0, Ordering::Release);
        if self.open_until.swap(0, Ordering::AcqRel) != 0 {
            self.probe_since.store(0, Ordering::Release);
            return Transition::Closed;
        }
        Transition::None
    }

    fn failed(&self, now: Instant, probe: bool) -> Transition {
        let now = self.since_epoch(now);
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures == 1 {
            self.failing_since.store(now + 1, Ordering::Release);
        }
        let since = self.failing_since.load(Ordering::Acquire);
        let span = now.saturating_sub(since.saturating_sub(1));
        let persistent = failures >= self.settings.threshold
            && since != 0
            && span >= self.settings.min_span.as_nanos() as u64;
        if !probe && !persistent {
            return Transition::None;
        }
        let until = (now + self.settings.open_for.as_nanos() as u64).max(1);
        let was = self.open_until.swap(until, Ordering::AcqRel);
        if probe {
            self.probe_since.store(0, Ordering::Release);
        }
        // A failed probe (or a failure while already open) reopens it quietly.
        if was == 0 {
            Transition::Opened
        } else {
            Transition::None
        }
    }

    /// A probe ended without an outcome: the next caller probes.
    fn abandoned(&self, probe_since: u64) {
        let _ =
            self.probe_since
                .compare_exchange(probe_since, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    fn since_epoch(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

impl Permit<'_> {
    /// Redis answered.
    pub(crate) fn succeeded(mut self) -> Transition {
        self.probe = None;
        self.breaker.succeeded()
    }

    /// The call failed at `now`.
    pub(crate) fn failed(mut self, now: Instant) -> Transition {
        let probe = self.probe.take().is_some();
        self.breaker.failed(now, probe)
    }

    #[cfg(test)]
    pub(crate) fn is_probe(&self) -> bool {
        self.probe.is_some()
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some(since) = self.probe {
            self.breaker.abandoned(since);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAUSE: Duration = Duration::from_millis(30);

    fn breaker(threshold: u32, min_span: Duration) -> Breaker {
        Breaker::new(BreakerSettings {
            threshold,
            min_span,
            open_for: PAUSE,
            probe_lease: Duration::from_secs(10),
        })
    }

    fn fail(breaker: &Breaker, now: Instant) -> Transition {
        match breaker.permit(now) {
            Ok(permit) => permit.failed(now),
            Err(_) => panic!("refused"),
        }
    }

    #[test]
    fn opens_after_the_threshold_and_probes_once_after_the_pause() {
        let breaker = breaker(3, Duration::ZERO);
        let start = Instant::now();
        for _ in 0..2 {
            assert_eq!(fail(&breaker, start), Transition::None);
            assert!(breaker.permit(start).is_ok(), "closed below the threshold");
        }
        assert_eq!(fail(&breaker, start), Transition::Opened);
        assert!(breaker.is_open());
        assert_eq!(breaker.permit(start).err(), Some(PAUSE), "open refuses");
        let later = start + PAUSE;
        let probe = breaker.permit(later).expect("the first caller probes");
        assert!(probe.is_probe());
        assert!(breaker.permit(later).is_err(), "others wait for the probe");
        assert_eq!(probe.failed(later), Transition::None, "reopened quietly");
        assert!(breaker.permit(later + PAUSE / 2).is_err());
        let after_second_pause = later + PAUSE;
        let probe = breaker.permit(after_second_pause).expect("probe again");
        assert_eq!(probe.succeeded(), Transition::Closed);
        assert!(!breaker.is_open());
        for _ in 0..2 {
            let permit = breaker.permit(after_second_pause).expect("closed");
            assert!(!permit.is_probe());
            assert_eq!(permit.succeeded(), Transition::None);
        }
    }

    #[test]
    fn a_success_resets_the_count() {
        let breaker = breaker(2, Duration::ZERO);
        let now = Instant::now();
        fail(&breaker, now);
        let _ = breaker.permit(now).unwrap().succeeded();
        fail(&breaker, now);
        assert!(!breaker.is_open());
    }

    /// One failed round trip fails every call merged into it at once: that alone is a
    /// hiccup, not an outage, until the failures have gone on for `min_span`.
    #[test]
    fn failures_of_one_instant_do_not_open_it_until_they_span_min_span() {
        let breaker = breaker(5, Duration::from_millis(100));
        let start = Instant::now();
        for _ in 0..50 {
            assert_eq!(fail(&breaker, start), Transition::None);
        }
        assert_eq!(
            fail(&breaker, start + Duration::from_millis(99)),
            Transition::None
        );
        assert_eq!(
            fail(&breaker, start + Duration::from_millis(100)),
            Transition::Opened
        );
    }

    /// The probe's request goes away (its future dropped) before Redis answers: the next
    /// caller probes, and a success then closes the breaker.
    #[test]
    fn a_probe_dropped_unsettled_lets_the_next_caller_probe() {
        let breaker = breaker(1, Duration::ZERO);
        let start = Instant::now();
        fail(&breaker, start);
        let later = start + PAUSE;
        let probe = breaker.permit(later).expect("probe");
        assert!(breaker.permit(later).is_err());
        drop(probe);
        let next = breaker.permit(later).expect("the slot was given back");
        assert!(next.is_probe());
        assert_eq!(next.succeeded(), Transition::Closed);
    }

    /// An ordinary call dropped unsettled reports nothing, and neither does a permit of a
    /// probe that an earlier success already made moot.
    #[test]
    fn unsettled_ordinary_calls_change_nothing() {
        let breaker = breaker(1, Duration::ZERO);
        let now = Instant::now();
        drop(breaker.permit(now).unwrap());
        assert!(!breaker.is_open());
        fail(&breaker, now);
        let probe = breaker.permit(now + PAUSE).unwrap();
        let straggler_success = breaker.succeeded();
        assert_eq!(straggler_success, Transition::Closed);
        drop(probe);
        assert!(breaker.permit(now + PAUSE).is_ok());
    }

    /// A probe that never reports (leaked, which the permit prevents) is taken over once its
    /// lease runs out.
    #[test]
    fn a_probe_past_its_lease_is_taken_over() {
        let breaker = Breaker::new(BreakerSettings {
            threshold: 1,
            min_span: Duration::ZERO,
            open_for: PAUSE,
            probe_lease: Duration::from_secs(1),
        });
        let start = Instant::now();
        fail(&breaker, start);
        let later = start + PAUSE;
        std::mem::forget(breaker.permit(later).expect("probe"));
        assert!(breaker.permit(later + Duration::from_millis(999)).is_err());
        let taken_over = breaker.permit(later + Duration::from_secs(1));
        assert!(taken_over.is_ok_and(|p| p.is_probe()));
    }
}
