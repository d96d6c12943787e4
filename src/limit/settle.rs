//! Settling a reservation: once an answer says what a request really cost, its windows are
//! adjusted by `actual − reserve`. Pure, like the checks: each function takes a window's
//! state, `now` (the store's time) and where the reservation was made, and returns the new
//! state.
//!
//! - More than reserved is a **debt**: charged at `now`, into the current window, with no
//!   check (the request is already answered). The window goes over its limit (a bucket below
//!   empty) and the identity's next requests are refused until it is paid back; their
//!   `retry_after` is the checks' own, so it is exact.
//! - Less than reserved is a **refund**, given back only where the reservation still counts,
//!   so a refund never gives more than the reservation took:
//!   - `fixed_window`: while the window it was made in is the current one;
//!   - `sliding_window`: while that window is the current or the previous one (from the
//!     counter it went into);
//!   - `token_bucket`, `gcra`: while the bucket has not refilled what the reservation took
//!     (`now` before the reservation's reset). Afterwards the bucket has refilled those units
//!     on its own, and giving them back again would let it hold more than a full bucket;
//!   - `sliding_log`: the reservation's own entries, while they are in the log.
//!
//! A store whose clock is not the gateway's (Redis) knows the reservation's time only to
//! within a round trip: `Reserved` holds the earliest and latest it can have been, and a
//! refund is given only when both agree.

use std::time::Duration;

use super::sliding_log::Log;
use super::{Algorithm, Cell, Rate};
use crate::rt::clock::Nanos;

/// What settling changes: `actual − reserve`, as a debt (more) or a refund (less).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    Debt(u64),
    Refund(u64),
}

impl Adjustment {
    /// The adjustment of a reservation of `reserved` units that really cost `actual`; None
    /// when they are equal.
    pub fn between(reserved: u64, actual: u64) -> Option<Adjustment> {
        match actual.cmp(&reserved) {
            std::cmp::Ordering::Greater => Some(Adjustment::Debt(actual - reserved)),
            std::cmp::Ordering::Less => Some(Adjustment::Refund(reserved - actual)),
            std::cmp::Ordering::Equal => None,
        }
    }
}

/// Where one window's reservation was made, in the store's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    /// The earliest and the latest the reservation can have been made at (equal for a store
    /// on the gateway's clock).
    pub earliest: Nanos,
    pub latest: Nanos,
    /// The window's reset right after the reservation (buckets: until it was full again).
    pub reset: Duration,
}

impl Reserved {
    /// A reservation made at `at` exactly.
    pub fn at(at: Nanos, reset: Duration) -> Reserved {
        Reserved {
            earliest: at,
            latest: at,
            reset,
        }
    }

    /// The calendar window (`index` of `per`) the reservation was made in, if certain.
    fn window(&self, per: u64) -> Option<u64> {
        let index = self.earliest / per;
        (self.latest / per == index).then_some(index)
    }
}

/// The largest count a `sliding_window` cell holds per window: its counters share a word
/// (and Redis keeps them below 2^23, see `store/lua/sliding_window.lua`).
pub(crate) const SLIDING_COUNT_MAX: u64 = (1 << 23) - 1;
/// The largest count a `fixed_window` cell holds (Redis keeps it below 2^33).
pub(crate) const FIXED_COUNT_MAX: u64 = (1 << 33) - 1;

/// The cell after settling `adjustment` (token_bucket, gcra, fixed and sliding windows).
pub(crate) fn settle_cell(
    algorithm: Algorithm,
    cell: Cell,
    now: Nanos,
    rate: &Rate,
    reserved: &Reserved,
    adjustment: Adjustment,
) -> Cell {
    match algorithm {
        Algorithm::TokenBucket => token_bucket(cell, now, rate, reserved, adjustment),
        Algorithm::Gcra => gcra(cell, now, rate, reserved, adjustment),
        Algorithm::FixedWindow => fixed_window(cell, now, rate, reserved, adjustment),
        Algorithm::SlidingWindow => sliding_window(cell, now, rate, reserved, adjustment),
        // Logs are not cells (`settle_log`).
        Algorithm::SlidingLog => cell,
    }
}

/// Whether a bucket still holds the reservation: it has not refilled it yet.
fn bucket_holds(now: Nanos, reserved: &Reserved) -> bool {
    let refilled_at = reserved
        .earliest
        .saturating_add(u64::try_from(reserved.reset.as_nanos()).unwrap_or(u64::MAX));
    now < refilled_at
}

/// Credit as `token_bucket.rs` keeps it: nanoseconds of refill, capped at the capacity.
fn token_bucket(
    cell: Cell,
    now: Nanos,
    rate: &Rate,
    reserved: &Reserved,
    adjustment: Adjustment,
) -> Cell {
    let interval = i128::from(rate.emission_interval_ns());
    let capacity = interval * i128::from(rate.burst);
    let credit = if cell[1] == 0 {
        capacity
    } else {
        let elapsed = i128::from(now.saturating_sub(cell[1]));
        (i128::from(cell[0] as i64) + elapsed).min(capacity)
    };
    let credit = match adjustment {
        Adjustment::Debt(units) => credit - interval * i128::from(units),
        Adjustment::Refund(units) if bucket_holds(now, reserved) => {
            (credit + interval * i128::from(units)).min(capacity)
        }
        Adjustment::Refund(_) => return cell,
    };
    let stored = i64::try_from(credit).unwrap_or(if credit < 0 { i64::MIN } else { i64::MAX });
    [stored as u64, now.max(1)]
}

/// The theoretical arrival time moves by the units: later for a debt, earlier for a refund
/// (never before `now`: a bucket is never fuller than full).
fn gcra(cell: Cell, now: Nanos, rate: &Rate, reserved: &Reserved, adjustment: Adjustment) -> Cell {
    let interval = rate.emission_interval_ns();
    let tat = cell[0].max(now);
    match adjustment {
        Adjustment::Debt(units) => [tat.saturating_add(interval.saturating_mul(units)), 0],
        Adjustment::Refund(units) if bucket_holds(now, reserved) => [
            tat.saturating_sub(interval.saturating_mul(units)).max(now),
            0,
        ],
        Adjustment::Refund(_) => cell,
    }
}

/// Cell `[window index + 1, count]` (`fixed_window.rs`).
fn fixed_window(
    cell: Cell,
    now: Nanos,
    rate: &Rate,
    reserved: &Reserved,
    adjustment: Adjustment,
) -> Cell {
    let per = rate.per_ns();
    let index = now / per;
    let count = if cell[0] == index + 1 { cell[1] } else { 0 };
    match adjustment {
        Adjustment::Debt(units) => [index + 1, count.saturating_add(units).min(FIXED_COUNT_MAX)],
        Adjustment::Refund(units)
            if reserved.window(per) == Some(index) && cell[0] == index + 1 =>
        {
            [index + 1, count.saturating_sub(units)]
        }
        Adjustment::Refund(_) => cell,
    }
}

/// Cell `[window index + 1, prev | curr << 32]` (`sliding_window.rs`): a debt goes into the
/// current window's counter, a refund into the counter the reservation went into.
fn sliding_window(
    cell: Cell,
    now: Nanos,
    rate: &Rate,
    reserved: &Reserved,
    adjustment: Adjustment,
) -> Cell {
    let per = rate.per_ns();
    let index = now / per;
    let (prev, curr) = match cell[0] {
        stored if stored == index + 1 => (cell[1] & 0xFFFF_FFFF, cell[1] >> 32),
        stored if stored == index => (cell[1] >> 32, 0),
        _ => (0, 0),
    };
    let (prev, curr) = match adjustment {
        Adjustment::Debt(units) => (prev, curr.saturating_add(units).min(SLIDING_COUNT_MAX)),
        Adjustment::Refund(units) => match reserved.window(per) {
            Some(at) if at == index => (prev, curr.saturating_sub(units)),
            Some(at) if at + 1 == index => (prev.saturating_sub(units), curr),
            _ => return cell,
        },
    };
    [index + 1, prev | curr << 32]
}

/// A sliding log holds at most this many times its limit: a debt beyond that is forgotten
/// (the identity is then refused for at most a window), so its memory stays bounded.
pub(crate) const LOG_DEBT_LIMITS: u64 = 2;

/// Settles a sliding log: a debt adds entries at `now` (up to `LOG_DEBT_LIMITS` × limit in
/// all), a refund removes up to that many of the reservation's own entries still in the log.
pub(crate) fn settle_log(
    log: &mut Log,
    now: Nanos,
    rate: &Rate,
    reserved: &Reserved,
    adjustment: Adjustment,
) {
    let per = rate.per_ns();
    while log.front().is_some_and(|&ts| ts + per <= now) {
        log.pop_front();
    }
    match adjustment {
        Adjustment::Debt(units) => {
            let room =
                (rate.limit.saturating_mul(LOG_DEBT_LIMITS)).saturating_sub(log.len() as u64);
            log.extend(std::iter::repeat_n(now, units.min(room) as usize));
        }
        Adjustment::Refund(units) => {
            let mut left = units;
            // Newest first: the reservation's entries are at its time, among the newest.
            let mut i = log.len();
            while left > 0 && i > 0 {
                i -= 1;
                if (reserved.earliest..=reserved.latest).contains(&log[i]) {
                    log.remove(i);
                    left -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
