//! Sliding window, the weighted two-counter estimate (as Cloudflare and nginx-plus use): the
//! count of the previous fixed window, weighted by how much of it the sliding window still
//! covers, plus the count of the current one. Cell: `[window index + 1, prev | curr << 32]`.

use std::time::Duration;

use super::{Cell, Rate, WindowCheck, nanos};
use crate::rt::clock::Nanos;

/// Counts of the previous and current window as seen at window `index`.
fn counts(cell: Cell, index: u64) -> (u64, u64) {
    let (prev, curr) = (cell[1] & 0xFFFF_FFFF, cell[1] >> 32);
    match cell[0] {
        stored if stored == index + 1 => (prev, curr),
        stored if stored == index => (curr, 0),
        _ => (0, 0),
    }
}

pub(crate) fn check(cell: Cell, now: Nanos, rate: &Rate, cost: u64) -> WindowCheck {
    let per_ns = rate.per_ns();
    let index = now / per_ns;
    let (per, elapsed) = (u128::from(per_ns), u128::from(now - index * per_ns));
    let (prev, curr) = counts(cell, index);
    let (limit, weight_left) = (u128::from(rate.limit), per - elapsed);
    // estimate = prev × (per − elapsed) / per + curr, compared without rounding.
    let used_scaled = u128::from(prev) * weight_left + u128::from(curr) * per;
    let reset = nanos((2 * per - elapsed) as u64);
    if used_scaled + u128::from(cost) * per > limit * per {
        let remaining = (limit * per).saturating_sub(used_scaled) / per;
        return WindowCheck::Deny {
            retry_after: retry_after(prev, curr, elapsed, per, rate.limit, cost),
            remaining: remaining as u64,
            reset,
        };
    }
    let curr = curr + cost;
    let remaining = (limit * per - u128::from(prev) * weight_left - u128::from(curr) * per) / per;
    WindowCheck::Allow {
        cell: [index + 1, (prev & 0xFFFF_FFFF) | (curr << 32)],
        remaining: remaining as u64,
        reset,
        delay: Duration::ZERO,
    }
}

/// The exact wait until `prev`/`curr` would admit `cost`: either later in this window, as the
/// previous window's weight fades, or in the next one, as this window becomes the previous.
fn retry_after(prev: u64, curr: u64, elapsed: u128, per: u128, limit: u64, cost: u64) -> Duration {
    let left_in_window = per - elapsed;
    if curr + cost <= limit && prev > 0 {
        // prev × (per − elapsed − d) ≤ (limit − curr − cost) × per
        let room = u128::from(limit - curr - cost) * per;
        let wait = left_in_window.saturating_sub(room / u128::from(prev));
        if wait < left_in_window {
            return nanos(wait as u64);
        }
    }
    // Next window: curr × (per − d') ≤ (limit − cost) × per.
    let room = u128::from(limit.saturating_sub(cost)) * per;
    let wait_next = if curr == 0 {
        0
    } else {
        per.saturating_sub(room / u128::from(curr))
    };
    nanos((left_in_window + wait_next) as u64)
}
