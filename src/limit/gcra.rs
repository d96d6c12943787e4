//! GCRA (generic cell rate algorithm): a token bucket kept as one number, the theoretical
//! arrival time (TAT). A bucket whose TAT is not after `now` is full and carries no state.
//! With `max_delay`, a request may be admitted up to that far ahead of its slot and is told to
//! wait (leaky-bucket smoothing, like nginx `limit_req` without `nodelay`).

use std::time::Duration;

use super::{Cell, Rate, WindowCheck, nanos};
use crate::rt::clock::Nanos;

/// The outcome of one plain check (no delay), for the edge layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gcra {
    /// Allowed; store `tat`. `remaining` tokens are left, the bucket is full again after `reset`.
    Allow {
        tat: Nanos,
        remaining: u64,
        reset: Duration,
    },
    /// Denied; nothing is consumed. The same request passes after `retry_after`.
    Deny {
        retry_after: Duration,
        reset: Duration,
    },
}

/// Checks a request of `cost` tokens against a bucket whose stored TAT is `tat` (0 when new).
pub(crate) fn check(tat: Nanos, now: Nanos, rate: &Rate, cost: u64) -> Gcra {
    match check_cell([tat, 0], now, rate, cost, 0) {
        WindowCheck::Allow {
            cell,
            remaining,
            reset,
            ..
        } => Gcra::Allow {
            tat: cell[0],
            remaining,
            reset,
        },
        WindowCheck::Deny {
            retry_after, reset, ..
        } => Gcra::Deny { retry_after, reset },
    }
}

/// The cell form: `[tat, 0]`.
pub(crate) fn check_cell(
    cell: Cell,
    now: Nanos,
    rate: &Rate,
    cost: u64,
    max_delay_ns: u64,
) -> WindowCheck {
    let interval = rate.emission_interval_ns();
    let tolerance = interval.saturating_mul(rate.burst);
    let start = cell[0].max(now);
    let new_tat = start.saturating_add(interval.saturating_mul(cost));
    let ahead = new_tat - now;
    if ahead > tolerance.saturating_add(max_delay_ns) {
        let retry_after = ahead - tolerance.saturating_add(max_delay_ns);
        let current = tolerance.saturating_sub(start - now) / interval;
        return WindowCheck::Deny {
            retry_after: nanos(retry_after),
            remaining: current,
            reset: nanos(start - now),
        };
    }
    WindowCheck::Allow {
        cell: [new_tat, 0],
        remaining: tolerance.saturating_sub(ahead) / interval,
        reset: nanos(ahead),
        delay: nanos(ahead.saturating_sub(tolerance)),
    }
}

/// True when a bucket with this TAT is full at `now`, so forgetting it changes nothing.
pub(crate) fn is_full(tat: Nanos, now: Nanos) -> bool {
    tat <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn rate(limit: u64, per_secs: u64, burst: u64) -> Rate {
        Rate {
            limit,
            per: Duration::from_secs(per_secs),
            burst,
        }
    }

    #[test]
    fn the_classic_example_capacity_5_refill_1_per_second() {
        let rate = rate(1, 1, 5);
        let now = 100 * SECOND;
        let mut tat = 0;
        let mut outcomes = Vec::new();
        for _ in 0..7 {
            match check(tat, now, &rate, 1) {
                Gcra::Allow {
                    tat: next,
                    remaining,
                    ..
                } => {
                    tat = next;
                    outcomes.push(Some(remaining));
                }
                Gcra::Deny { retry_after, .. } => {
                    assert_eq!(retry_after, Duration::from_secs(1));
                    outcomes.push(None);
                }
            }
        }
        assert_eq!(
            outcomes,
            [Some(4), Some(3), Some(2), Some(1), Some(0), None, None]
        );
        // At t = 2 s two tokens are back: one request leaves one, the next leaves none.
        let Gcra::Allow { tat, remaining, .. } = check(tat, now + 2 * SECOND, &rate, 1) else {
            panic!()
        };
        assert_eq!(remaining, 1);
        let Gcra::Allow { remaining, .. } = check(tat, now + 2 * SECOND, &rate, 1) else {
            panic!()
        };
        assert_eq!(remaining, 0);
    }

    #[test]
    fn retry_after_is_exact_and_the_retry_passes() {
        let rate = rate(10, 1, 1); // one token every 100 ms
        let now = 50 * SECOND;
        let Gcra::Allow { tat, .. } = check(0, now, &rate, 1) else {
            panic!()
        };
        let Gcra::Deny { retry_after, .. } = check(tat, now + 30_000_000, &rate, 1) else {
            panic!()
        };
        assert_eq!(retry_after, Duration::from_millis(70));
        let later = now + 30_000_000 + retry_after.as_nanos() as u64;
        assert!(matches!(check(tat, later, &rate, 1), Gcra::Allow { .. }));
        assert!(matches!(check(tat, later - 1, &rate, 1), Gcra::Deny { .. }));
    }

    #[test]
    fn cost_takes_that_many_tokens_and_too_large_a_cost_is_denied_without_consuming() {
        let rate = rate(10, 1, 10);
        let now = 10 * SECOND;
        let Gcra::Allow { tat, remaining, .. } = check(0, now, &rate, 7) else {
            panic!()
        };
        assert_eq!(remaining, 3);
        assert!(matches!(check(tat, now, &rate, 4), Gcra::Deny { .. }));
        assert!(matches!(
            check(tat, now, &rate, 3),
            Gcra::Allow { remaining: 0, .. }
        ));
    }

    #[test]
    fn delay_admits_ahead_of_the_slot_up_to_max_delay() {
        let rate = rate(10, 1, 1); // one every 100 ms, no burst beyond one
        let now = 10 * SECOND;
        let WindowCheck::Allow { cell, delay, .. } = check_cell([0, 0], now, &rate, 1, 250_000_000)
        else {
            panic!()
        };
        assert_eq!(delay, Duration::ZERO);
        let WindowCheck::Allow { cell, delay, .. } = check_cell(cell, now, &rate, 1, 250_000_000)
        else {
            panic!()
        };
        assert_eq!(delay, Duration::from_millis(100));
        let WindowCheck::Allow { cell, delay, .. } = check_cell(cell, now, &rate, 1, 250_000_000)
        else {
            panic!()
        };
        assert_eq!(delay, Duration::from_millis(200));
        let WindowCheck::Deny { retry_after, .. } = check_cell(cell, now, &rate, 1, 250_000_000)
        else {
            panic!()
        };
        assert_eq!(retry_after, Duration::from_millis(50));
    }

    #[test]
    fn a_full_bucket_is_the_same_as_a_forgotten_one() {
        let rate = rate(5, 1, 5);
        let now = 10 * SECOND;
        let Gcra::Allow { tat, .. } = check(0, now, &rate, 3) else {
            panic!()
        };
        assert!(!is_full(tat, now));
        assert!(is_full(tat, tat));
        assert_eq!(check(tat, tat, &rate, 1), check(0, tat, &rate, 1));
    }
}
