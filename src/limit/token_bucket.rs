//! Token bucket with lazy refill: the cell holds the credit (tokens as nanoseconds of refill
//! time, so refills need no division) and when it was last updated. A fresh cell is full.
//! Credit may go negative by up to `max_delay` for requests admitted with a delay.

use super::{Cell, Rate, WindowCheck, nanos};
use crate::rt::clock::Nanos;

/// Credit at `now`: refilled one nanosecond per nanosecond elapsed, capped at capacity.
fn credit_at(cell: Cell, now: Nanos, capacity: i128) -> i128 {
    let [credit, updated] = cell;
    if updated == 0 {
        return capacity;
    }
    let elapsed = now.saturating_sub(updated);
    (i128::from(credit as i64) + i128::from(elapsed)).min(capacity)
}

pub(crate) fn check(
    cell: Cell,
    now: Nanos,
    rate: &Rate,
    cost: u64,
    max_delay_ns: u64,
) -> WindowCheck {
    let interval = i128::from(rate.emission_interval_ns());
    let capacity = interval * i128::from(rate.burst);
    let credit = credit_at(cell, now, capacity);
    let need = interval * i128::from(cost);
    let after = credit - need;
    let floor = -i128::from(max_delay_ns);
    if after < floor {
        return WindowCheck::Deny {
            retry_after: nanos((floor - after) as u64),
            remaining: (credit.max(0) / interval) as u64,
            reset: nanos((capacity - credit) as u64),
        };
    }
    let stored = i64::try_from(after).unwrap_or(i64::MIN) as u64;
    WindowCheck::Allow {
        // `now` of 0 would read as "fresh"; real clocks are never there.
        cell: [stored, now.max(1)],
        remaining: (after.max(0) / interval) as u64,
        reset: nanos((capacity - after) as u64),
        delay: nanos((-after).max(0) as u64),
    }
}
