//! Fixed (calendar) windows: a counter per window of `per`, aligned to the Unix epoch, so a
//! per-minute limit resets on the minute. A client may send `limit` at the end of one window
//! and `limit` at the start of the next: up to twice the limit within `per` across a boundary.
//! That is the price of one counter; use sliding_window or a bucket where it matters.
//! Cell: `[window index + 1, count]`.

use super::{Cell, Rate, WindowCheck, nanos};
use crate::rt::clock::Nanos;

pub(crate) fn check(cell: Cell, now: Nanos, rate: &Rate, cost: u64) -> WindowCheck {
    let per = rate.per_ns();
    let window = now / per;
    let count = if cell[0] == window + 1 { cell[1] } else { 0 };
    let reset = nanos((window + 1) * per - now);
    if count + cost > rate.limit {
        return WindowCheck::Deny {
            retry_after: reset,
            remaining: rate.limit.saturating_sub(count),
            reset,
        };
    }
    WindowCheck::Allow {
        cell: [window + 1, count + cost],
        remaining: rate.limit - count - cost,
        reset,
        delay: nanos(0),
    }
}
