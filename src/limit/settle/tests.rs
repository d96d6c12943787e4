use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::limit::{WindowCheck, check_cell, sliding_log};

const SECOND: u64 = 1_000_000_000;
/// On a minute: a fixed or sliding window of a minute starts here.
const START: u64 = 1_000 * 60 * SECOND;

fn rate(limit: u64, per_secs: u64) -> Rate {
    Rate {
        limit,
        per: Duration::from_secs(per_secs),
        burst: limit,
    }
}

const CELLS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
];

/// One window, reserved and settled at one instant: its state as a count of units.
struct Window {
    algorithm: Algorithm,
    rate: Rate,
    cell: Cell,
    log: Log,
}

impl Window {
    fn new(algorithm: Algorithm, rate: Rate) -> Window {
        Window {
            algorithm,
            rate,
            cell: [0, 0],
            log: Log::new(),
        }
    }

    fn check(&self, now: Nanos, cost: u64) -> WindowCheck {
        match self.algorithm {
            Algorithm::SlidingLog => sliding_log::check(&self.log, now, &self.rate, cost),
            algorithm => check_cell(algorithm, self.cell, now, &self.rate, cost, Duration::ZERO),
        }
    }

    /// Reserves `cost` at `now` when the window allows it.
    fn reserve(&mut self, now: Nanos, cost: u64) -> Option<Reserved> {
        let check = self.check(now, cost);
        let WindowCheck::Allow { cell, reset, .. } = check else {
            return None;
        };
        match self.algorithm {
            Algorithm::SlidingLog => sliding_log::commit(&mut self.log, now, &self.rate, cost),
            _ => self.cell = cell,
        }
        Some(Reserved::at(now, reset))
    }

    fn settle(&mut self, now: Nanos, reserved: &Reserved, reserve: u64, actual: u64) {
        let Some(adjustment) = Adjustment::between(reserve, actual) else {
            return;
        };
        match self.algorithm {
            Algorithm::SlidingLog => {
                settle_log(&mut self.log, now, &self.rate, reserved, adjustment)
            }
            algorithm => {
                self.cell = settle_cell(algorithm, self.cell, now, &self.rate, reserved, adjustment)
            }
        }
    }

    /// The units the window counts at `now`, from its state.
    fn counted(&self, now: Nanos) -> u64 {
        let interval = self.rate.emission_interval_ns();
        match self.algorithm {
            Algorithm::SlidingLog => self.log.len() as u64,
            Algorithm::FixedWindow => self.cell[1],
            Algorithm::SlidingWindow => self.cell[1] >> 32,
            Algorithm::Gcra => self.cell[0].max(now).saturating_sub(now) / interval,
            Algorithm::TokenBucket if self.cell[1] == 0 => 0,
            Algorithm::TokenBucket => {
                let capacity = (interval * self.rate.burst) as i128;
                ((capacity - i128::from(self.cell[0] as i64)) / interval as i128) as u64
            }
        }
    }

    /// The retry a request of `cost` at `now` is told, None when it passes.
    fn retry_after(&self, now: Nanos, cost: u64) -> Option<Duration> {
        match self.check(now, cost) {
            WindowCheck::Deny { retry_after, .. } => Some(retry_after),
            WindowCheck::Allow { .. } => None,
        }
    }
}

fn all() -> impl Iterator<Item = Algorithm> {
    CELLS.into_iter().chain([Algorithm::SlidingLog])
}

#[test]
fn a_debt_refuses_the_identity_for_exactly_as_long_as_it_takes_to_pay_back() {
    // 10 a minute; a request reserved 1 and cost 15: 6 over, as if 16 had been sent.
    for algorithm in all() {
        let mut window = Window::new(algorithm, rate(10, 60));
        let reserved = window.reserve(START, 1).unwrap();
        window.settle(START, &reserved, 1, 15);
        let retry = window.retry_after(START, 1).expect("in debt");
        match algorithm {
            // The bucket holds -5: six refills of 6 s until it holds the request's one.
            Algorithm::TokenBucket | Algorithm::Gcra => {
                assert_eq!(retry, Duration::from_secs(36), "{algorithm:?}")
            }
            // The window ends first; the next window then starts clean (fixed) or carries
            // the weighted debt (sliding).
            Algorithm::FixedWindow => assert_eq!(retry, Duration::from_secs(60)),
            Algorithm::SlidingWindow => assert!(retry > Duration::from_secs(60)),
            // The log holds the debt up to twice its limit: 20 entries, 11 must expire.
            Algorithm::SlidingLog => assert_eq!(retry, Duration::from_secs(60)),
        }
        let later = START + retry.as_nanos() as u64;
        assert_eq!(
            window.retry_after(later, 1),
            None,
            "{algorithm:?} passes after its retry"
        );
        assert!(
            window.retry_after(later - 1, 1).is_some(),
            "{algorithm:?} not before"
        );
    }
}

#[test]
fn a_refund_gives_back_what_was_reserved_and_never_more_than_a_full_window() {
    for algorithm in all() {
        let mut window = Window::new(algorithm, rate(10, 60));
        let reserved = window.reserve(START, 10).unwrap();
        assert!(window.retry_after(START, 1).is_some());
        window.settle(START, &reserved, 10, 0);
        assert_eq!(window.counted(START), 0, "{algorithm:?}");
        for _ in 0..10 {
            assert!(window.reserve(START, 1).is_some(), "{algorithm:?}");
        }
        assert!(
            window.retry_after(START, 1).is_some(),
            "{algorithm:?}: a full window, no more"
        );
    }
}

#[test]
fn a_refund_after_its_window_ended_gives_nothing_back() {
    // The next minute (fixed), the minute after the entries left the log (sliding log).
    for (algorithm, next) in [
        (Algorithm::FixedWindow, START + 60 * SECOND + 1),
        (Algorithm::SlidingLog, START + 119 * SECOND),
    ] {
        let mut window = Window::new(algorithm, rate(10, 60));
        let reserved = window.reserve(START + 59 * SECOND, 10).unwrap();
        window.reserve(next, 4).unwrap();
        window.settle(next, &reserved, 10, 0);
        assert_eq!(window.counted(next), 4, "{algorithm:?}");
    }
    // A sliding window gives back from the previous window's counter, not the current one.
    let mut window = Window::new(Algorithm::SlidingWindow, rate(10, 60));
    let reserved = window.reserve(START + 59 * SECOND, 10).unwrap();
    let next = START + 60 * SECOND;
    window.reserve(next, 0);
    window.settle(next, &reserved, 10, 4);
    assert_eq!(window.cell[1] & 0xFFFF_FFFF, 4);
    assert_eq!(window.cell[1] >> 32, 0);
    // Two windows on, it counts nowhere.
    let later = START + 120 * SECOND;
    let cell = window.cell;
    window.settle(later, &reserved, 4, 0);
    assert_eq!(window.cell, cell);
}

#[test]
fn a_bucket_that_refilled_the_reservation_gets_nothing_back() {
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        // 1 a second, burst 10: a reservation of 5 is refilled within 5 s.
        let mut window = Window::new(algorithm, rate(10, 10));
        let reserved = window.reserve(START, 5).unwrap();
        assert_eq!(reserved.reset, Duration::from_secs(5));
        // 10 s later someone else spent 3; a refund now would make the bucket hold 12.
        let later = START + 10 * SECOND;
        window.reserve(later, 3).unwrap();
        window.settle(later, &reserved, 5, 0);
        assert_eq!(window.counted(later), 3, "{algorithm:?}");
        // Within the reset, it is given back.
        let mut window = Window::new(algorithm, rate(10, 10));
        let reserved = window.reserve(START, 5).unwrap();
        window.settle(START + 4 * SECOND, &reserved, 5, 0);
        assert_eq!(window.counted(START + 4 * SECOND), 0, "{algorithm:?}");
    }
}

#[test]
fn a_reservation_whose_window_is_uncertain_is_not_refunded() {
    let rate = rate(10, 60);
    let cell = [START / rate.per_ns() + 1, 10];
    // Made either just before the minute or just after it: the refund may belong to a window
    // that is over.
    let reserved = Reserved {
        earliest: START - 1,
        latest: START + 1,
        reset: Duration::from_secs(60),
    };
    let settled = settle_cell(
        Algorithm::FixedWindow,
        cell,
        START + 5,
        &rate,
        &reserved,
        Adjustment::Refund(10),
    );
    assert_eq!(settled, cell);
}

#[test]
fn a_sliding_log_keeps_at_most_twice_its_limit() {
    let mut window = Window::new(Algorithm::SlidingLog, rate(10, 60));
    let reserved = window.reserve(START, 1).unwrap();
    window.settle(START, &reserved, 1, 1_000_000);
    assert_eq!(window.log.len() as u64, 10 * LOG_DEBT_LIMITS);
}

#[test]
fn a_debt_saturates_instead_of_overflowing() {
    for algorithm in all() {
        let mut window = Window::new(algorithm, rate(10, 60));
        let reserved = window.reserve(START, 1).unwrap();
        window.settle(START, &reserved, 1, u64::MAX);
        window.settle(START, &reserved, 1, u64::MAX);
        assert!(window.retry_after(START, 1).is_some(), "{algorithm:?}");
    }
}

/// One step of a sequence: a request reserving `reserve`, settled at once, later, or never.
#[derive(Debug, Clone)]
enum Step {
    Reserve(u64),
    /// Settles the n-th outstanding reservation (modulo their number) at `actual`.
    Settle(usize, u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        (1u64..6).prop_map(Step::Reserve),
        (0usize..8, 0u64..12).prop_map(|(n, actual)| Step::Settle(n, actual)),
    ];
    proptest::collection::vec(step, 0..40)
}

proptest! {
    /// Within one window (one instant), what a window counts is the sum of what its requests
    /// settled at, and what the unsettled ones reserved: nothing lost, nothing made up.
    #[test]
    fn the_window_counts_the_sum_of_settled_amounts(steps in steps(), which in 0usize..5) {
        let algorithm = all().nth(which).unwrap();
        let mut window = Window::new(algorithm, rate(20, 60));
        let now = START + 7 * SECOND;
        let mut outstanding: Vec<(Reserved, u64)> = Vec::new();
        // The model: the units counted, a log's debt held up to twice its limit.
        let cap = if algorithm == Algorithm::SlidingLog { 20 * LOG_DEBT_LIMITS } else { u64::MAX };
        let mut expected = 0u64;
        for step in steps {
            match step {
                Step::Reserve(cost) => {
                    if let Some(reserved) = window.reserve(now, cost) {
                        outstanding.push((reserved, cost));
                        expected += cost;
                    }
                }
                Step::Settle(n, actual) if !outstanding.is_empty() => {
                    let (reserved, reserve) = outstanding.remove(n % outstanding.len());
                    window.settle(now, &reserved, reserve, actual);
                    expected = if actual >= reserve {
                        (expected + actual - reserve).min(expected.max(cap))
                    } else {
                        expected - (reserve - actual)
                    };
                }
                Step::Settle(..) => {}
            }
        }
        prop_assert_eq!(window.counted(now), expected);
    }

    /// However settles interleave with time, a refund never leaves a window admitting more
    /// than one that was never charged: after the sequence, a fresh window given only the
    /// settled amounts at their reservation times admits at least as much.
    #[test]
    fn a_refund_never_admits_more_than_never_charging(
        steps in proptest::collection::vec((0u64..6, 0u64..8, 0u64..30), 1..30),
        which in 0usize..5,
    ) {
        let algorithm = all().nth(which).unwrap();
        let rate = rate(12, 30);
        let mut charged = Window::new(algorithm, rate);
        let mut ideal = Window::new(algorithm, rate);
        let mut now = START;
        for (reserve, actual, advance) in steps {
            now += advance * SECOND / 3;
            let reserve = reserve.max(1);
            let actual = actual.min(reserve);
            // The ideal window is charged `actual` when it has room for `reserve` (the
            // request would have been admitted the same).
            if let Some(reserved) = charged.reserve(now, reserve) {
                if actual > 0 {
                    ideal.reserve(now, actual);
                }
                // Settled half a second later; a store's time never goes back.
                now += SECOND / 2;
                charged.settle(now, &reserved, reserve, actual);
            }
        }
        let later = now + SECOND;
        let admits = |window: &Window| (0..40).take_while(|n| window.check(later, n + 1).is_allow()).count();
        prop_assert!(admits(&charged) <= admits(&ideal),
            "{algorithm:?}: {} against {}", admits(&charged), admits(&ideal));
    }
}
