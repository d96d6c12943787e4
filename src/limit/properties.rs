//! Properties every algorithm must have, checked on random request sequences.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

const SECOND: u64 = 1_000_000_000;
const START: u64 = 1_000 * SECOND;

/// A window of one algorithm with its own state, whatever its kind.
struct Window {
    algorithm: Algorithm,
    rate: Rate,
    cell: Cell,
    log: sliding_log::Log,
}

impl Window {
    fn new(algorithm: Algorithm, rate: Rate) -> Window {
        Window {
            algorithm,
            rate,
            cell: [0, 0],
            log: Default::default(),
        }
    }

    fn check(&self, now: Nanos, cost: u64) -> WindowCheck {
        match self.algorithm {
            Algorithm::SlidingLog => sliding_log::check(&self.log, now, &self.rate, cost),
            _ => check_cell(
                self.algorithm,
                self.cell,
                now,
                &self.rate,
                cost,
                Duration::ZERO,
            ),
        }
    }

    fn commit(&mut self, check: &WindowCheck, now: Nanos, cost: u64) {
        if let WindowCheck::Allow { cell, .. } = check {
            match self.algorithm {
                Algorithm::SlidingLog => sliding_log::commit(&mut self.log, now, &self.rate, cost),
                _ => self.cell = *cell,
            }
        }
    }
}

const ALL: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::SlidingWindow,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
];

fn rate_strategy() -> impl Strategy<Value = Rate> {
    (
        1u64..20,
        prop_oneof![Just(1u64), Just(10), Just(60)],
        0u64..10,
    )
        .prop_map(|(limit, per, extra)| Rate {
            limit,
            per: Duration::from_secs(per),
            burst: limit + extra % 3,
        })
}

/// (gap before the request in ms, cost)
fn requests() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec(
        (prop_oneof![Just(0u64), 0u64..50, 0u64..3000], 1u64..4),
        1..120,
    )
}

/// How many units a window's definition permits within any span of `per` (and the bound used).
fn permitted_per_window(algorithm: Algorithm, rate: &Rate) -> u64 {
    match algorithm {
        // A full bucket plus what refills during the window.
        Algorithm::TokenBucket | Algorithm::Gcra => rate.burst + rate.limit,
        // The documented boundary burst.
        Algorithm::FixedWindow => 2 * rate.limit,
        // The estimate may admit up to the limit in the current window after a quiet previous
        // one: at most twice in the worst alignment, never more.
        Algorithm::SlidingWindow => 2 * rate.limit,
        Algorithm::SlidingLog => rate.limit,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn token_bucket_and_gcra_agree_on_every_sequence(rate in rate_strategy(), requests in requests()) {
        let mut bucket = Window::new(Algorithm::TokenBucket, rate);
        let mut gcra = Window::new(Algorithm::Gcra, rate);
        let mut now = START;
        for (gap_ms, cost) in requests {
            now += gap_ms * 1_000_000;
            let (a, b) = (bucket.check(now, cost), gcra.check(now, cost));
            let strip = |c: WindowCheck| match c {
                WindowCheck::Allow { remaining, reset, delay, .. } => (true, remaining, reset, delay),
                WindowCheck::Deny { retry_after, remaining, reset } => (false, remaining, reset, retry_after),
            };
            prop_assert_eq!(strip(a), strip(b), "at {} ns", now - START);
            bucket.commit(&a, now, cost);
            gcra.commit(&b, now, cost);
        }
    }

    #[test]
    fn retry_after_is_exact_for_every_algorithm(rate in rate_strategy(), requests in requests()) {
        for algorithm in ALL {
            let mut window = Window::new(algorithm, rate);
            let mut now = START;
            for &(gap_ms, cost) in &requests {
                now += gap_ms * 1_000_000;
                let cost = cost.min(rate.limit).min(rate.burst);
                let check = window.check(now, cost);
                if let WindowCheck::Deny { retry_after, .. } = check {
                    let at = now + retry_after.as_nanos() as u64;
                    prop_assert!(window.check(at, cost).is_allow(), "{:?} still denies after retry_after {:?}", algorithm, retry_after);
                    if retry_after > Duration::ZERO {
                        prop_assert!(!window.check(at - 1, cost).is_allow(), "{:?} would pass before retry_after", algorithm);
                    }
                }
                window.commit(&check, now, cost);
            }
        }
    }

    #[test]
    fn no_algorithm_admits_more_than_its_definition_in_any_window(rate in rate_strategy(), requests in requests()) {
        for algorithm in ALL {
            let mut window = Window::new(algorithm, rate);
            let mut admitted: Vec<(Nanos, u64)> = Vec::new();
            let mut now = START;
            for &(gap_ms, cost) in &requests {
                now += gap_ms * 1_000_000;
                let check = window.check(now, cost);
                if check.is_allow() {
                    admitted.push((now, cost));
                }
                window.commit(&check, now, cost);
            }
            let per = rate.per_ns();
            let bound = permitted_per_window(algorithm, &rate);
            for &(start, _) in &admitted {
                let in_window: u64 = admitted.iter().filter(|(t, _)| *t >= start && *t < start + per).map(|(_, c)| c).sum();
                prop_assert!(in_window <= bound, "{:?} admitted {} > {} within {:?}", algorithm, in_window, bound, rate.per);
            }
        }
    }

    #[test]
    fn cost_is_honoured_remaining_drops_by_cost(rate in rate_strategy(), cost in 1u64..5) {
        for algorithm in ALL {
            let window = Window::new(algorithm, rate);
            let cost = cost.min(rate.limit).min(rate.burst);
            let full = match window.check(START, 1) { WindowCheck::Allow { remaining, .. } => remaining + 1, _ => unreachable!() };
            match window.check(START, cost) {
                WindowCheck::Allow { remaining, .. } => prop_assert_eq!(remaining, full - cost, "{:?}", algorithm),
                WindowCheck::Deny { .. } => prop_assert!(false, "{:?} denied a first request within its limit", algorithm),
            }
        }
    }
}

#[test]
fn fixed_window_lets_twice_the_limit_through_across_a_boundary_and_the_others_do_not() {
    let rate = Rate {
        limit: 10,
        per: Duration::from_secs(60),
        burst: 10,
    };
    let boundary = 100 * 60 * SECOND;
    let admitted = |algorithm: Algorithm| {
        let mut window = Window::new(algorithm, rate);
        let mut count = 0;
        // 20 requests one second before the boundary, 20 right at it.
        for now in [boundary - SECOND, boundary] {
            for _ in 0..20 {
                let check = window.check(now, 1);
                count += u64::from(check.is_allow());
                window.commit(&check, now, 1);
            }
        }
        count
    };
    assert_eq!(admitted(Algorithm::FixedWindow), 20);
    assert_eq!(admitted(Algorithm::SlidingLog), 10);
    assert_eq!(admitted(Algorithm::SlidingWindow), 10);
    // A bucket refills 10 × 1 s / 60 s: nothing within one second.
    assert_eq!(admitted(Algorithm::TokenBucket), 10);
    assert_eq!(admitted(Algorithm::Gcra), 10);
}

#[test]
fn the_classic_example_holds_for_the_token_bucket() {
    let rate = Rate {
        limit: 1,
        per: Duration::from_secs(1),
        burst: 5,
    };
    let mut window = Window::new(Algorithm::TokenBucket, rate);
    let mut results = Vec::new();
    for _ in 0..7 {
        let check = window.check(START, 1);
        results.push(check.is_allow());
        window.commit(&check, START, 1);
    }
    assert_eq!(results, [true, true, true, true, true, false, false]);
    let check = window.check(START + 2 * SECOND, 1);
    assert!(
        matches!(check, WindowCheck::Allow { remaining: 1, .. }),
        "{check:?}"
    );
    window.commit(&check, START + 2 * SECOND, 1);
    let check = window.check(START + 2 * SECOND, 1);
    assert!(
        matches!(check, WindowCheck::Allow { remaining: 0, .. }),
        "{check:?}"
    );
}

#[test]
fn sliding_window_weighs_the_previous_window() {
    let rate = Rate {
        limit: 10,
        per: Duration::from_secs(60),
        burst: 10,
    };
    let start = 100 * 60 * SECOND;
    let mut window = Window::new(Algorithm::SlidingWindow, rate);
    for _ in 0..10 {
        let check = window.check(start, 1);
        window.commit(&check, start, 1);
    }
    // A quarter into the next window, 3/4 of the previous 10 still count: 2 more fit (7.5 + 2 ≤ 10).
    let later = start + 60 * SECOND + 15 * SECOND;
    let mut admitted = 0;
    for _ in 0..10 {
        let check = window.check(later, 1);
        admitted += u64::from(check.is_allow());
        window.commit(&check, later, 1);
    }
    assert_eq!(admitted, 2);
}
