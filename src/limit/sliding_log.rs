//! Sliding log: exact. Every admitted unit of cost is a timestamp; a request passes when the
//! timestamps within the last `per`, plus its cost, fit the limit. Memory grows with the limit,
//! so config refuses limits above `MAX_LOG_LIMIT`.

use std::collections::VecDeque;
use std::time::Duration;

use super::{Rate, WindowCheck, nanos};
use crate::rt::clock::Nanos;

/// The largest `limit` a sliding_log window may have: its log holds up to this many entries.
pub(crate) const MAX_LOG_LIMIT: u64 = 1000;

/// Timestamps of admitted units, oldest first.
pub(crate) type Log = VecDeque<Nanos>;

/// Checks without changing the log; `WindowCheck::Allow::cell` is unused (zero).
pub(crate) fn check(log: &Log, now: Nanos, rate: &Rate, cost: u64) -> WindowCheck {
    let per = rate.per_ns();
    let live = live_entries(log, now, per);
    let used = live.len() as u64;
    let newest = live.back().copied().unwrap_or(now).max(now);
    if used + cost > rate.limit {
        // The oldest (used + cost − limit) entries must expire first.
        let must_expire = (used + cost - rate.limit) as usize;
        let retry_after = match live.get(must_expire - 1) {
            Some(&ts) => nanos((ts + per).saturating_sub(now)),
            None => rate.per,
        };
        let reset = nanos((newest + per).saturating_sub(now));
        return WindowCheck::Deny {
            retry_after,
            remaining: rate.limit.saturating_sub(used),
            reset,
        };
    }
    WindowCheck::Allow {
        cell: [0, 0],
        remaining: rate.limit - used - cost,
        reset: nanos(newest + per - now),
        delay: Duration::ZERO,
    }
}

/// Records an admitted request: drops expired entries and appends `cost` timestamps.
pub(crate) fn commit(log: &mut Log, now: Nanos, rate: &Rate, cost: u64) {
    let per = rate.per_ns();
    while log.front().is_some_and(|&ts| ts + per <= now) {
        log.pop_front();
    }
    log.extend(std::iter::repeat_n(now, cost as usize));
}

fn live_entries(log: &Log, now: Nanos, per: u64) -> VecDeque<Nanos> {
    log.iter().copied().filter(|&ts| ts + per > now).collect()
}
