//! Rate limit arithmetic shared by the edge layer and the per-key limits. Algorithms are pure:
//! each takes the stored state of one window, `now`, the rate and the cost, and returns a
//! decision and the new state. Stores own the state and the locking.

pub(crate) mod charge;
pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod heavy_hitters;
pub(crate) mod key;
pub(crate) mod lease;
pub(crate) mod rules;
pub(crate) mod settle;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod token_bucket;
pub(crate) mod window;

use std::sync::Arc;
use std::time::Duration;

use crate::rt::clock::Nanos;

/// `limit` requests per `per`, at most `burst` at once (token_bucket and gcra).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub limit: u64,
    pub per: Duration,
    pub burst: u64,
}

impl Rate {
    /// Time for one token to come back, in nanoseconds (at least 1).
    pub fn emission_interval_ns(&self) -> u64 {
        // u64 holds 584 years of nanoseconds, and its division is several times cheaper.
        (self.per_ns() / self.limit.max(1)).max(1)
    }

    pub fn per_ns(&self) -> u64 {
        u64::try_from(self.per.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// A window as clients are told of it: shared by every status of that window, so a status
/// holds one reference count, not one per string.
#[derive(Debug, PartialEq, Eq)]
pub struct Policy {
    /// Names the policy in headers and problem details (`edge`, or a limit's window).
    pub name: Box<str>,
    pub limit: u64,
    pub window: Duration,
    /// This policy as a `RateLimit-Policy` item, written once: it goes on every limited
    /// response.
    pub item: Box<str>,
}

impl Policy {
    pub fn new(name: &str, limit: u64, window: Duration) -> Policy {
        let mut item = String::new();
        push_policy_item(&mut item, name, limit, window);
        Policy {
            name: name.into(),
            limit,
            window,
            item: item.into(),
        }
    }

    /// The policy of `rate`'s limit and window.
    pub fn of(name: &str, rate: &Rate) -> Arc<Policy> {
        Arc::new(Policy::new(name, rate.limit, rate.per))
    }
}

/// What a client is told about one window: the policy and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateStatus {
    pub policy: Arc<Policy>,
    pub remaining: u64,
    /// Until the full quota is back.
    pub reset: Duration,
}

/// Appends `"policy";q=limit;w=window`, one item of `RateLimit-Policy` (the window in whole
/// seconds, at least 1).
fn push_policy_item(out: &mut String, policy: &str, limit: u64, window: Duration) {
    out.push('"');
    out.push_str(policy);
    out.push_str("\";q=");
    out.push_str(itoa::Buffer::new().format(limit));
    out.push_str(";w=");
    out.push_str(itoa::Buffer::new().format(whole_seconds(window).max(1)));
}

/// Rounded up: a client that waits this long is never early.
pub(crate) fn whole_seconds(duration: Duration) -> u64 {
    duration.as_nanos().div_ceil(1_000_000_000) as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    TokenBucket,
    Gcra,
    SlidingWindow,
    FixedWindow,
    SlidingLog,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
        }
    }

    /// Bucket algorithms have a burst and can delay instead of reject.
    pub fn is_bucket(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

/// The stored state of one window of one identity: two words, all zero when fresh.
pub(crate) type Cell = [u64; 2];

/// The outcome of checking one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowCheck {
    /// Store `cell`; `remaining` is left after this request, the window is whole again after
    /// `reset`, and the request must wait `delay` first (bucket algorithms with max_delay).
    Allow {
        cell: Cell,
        remaining: u64,
        reset: Duration,
        delay: Duration,
    },
    /// Nothing consumed; the same request passes after `retry_after`.
    Deny {
        retry_after: Duration,
        remaining: u64,
        reset: Duration,
    },
}

impl WindowCheck {
    pub fn is_allow(&self) -> bool {
        matches!(self, WindowCheck::Allow { .. })
    }
}

/// Checks one window of a cell-based algorithm. Sliding logs are checked by `sliding_log`.
pub(crate) fn check_cell(
    algorithm: Algorithm,
    cell: Cell,
    now: Nanos,
    rate: &Rate,
    cost: u64,
    max_delay: Duration,
) -> WindowCheck {
    let max_delay_ns = u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX);
    match algorithm {
        Algorithm::TokenBucket => token_bucket::check(cell, now, rate, cost, max_delay_ns),
        Algorithm::Gcra => gcra::check_cell(cell, now, rate, cost, max_delay_ns),
        Algorithm::SlidingWindow => sliding_window::check(cell, now, rate, cost),
        Algorithm::FixedWindow => fixed_window::check(cell, now, rate, cost),
        // Logs are not cells; the store routes them to `sliding_log`. Refuse rather than guess.
        Algorithm::SlidingLog => WindowCheck::Deny {
            retry_after: rate.per,
            remaining: 0,
            reset: rate.per,
        },
    }
}

fn nanos(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_item_tells_its_window_in_whole_seconds_rounded_up_and_at_least_one() {
        let item = |window| Policy::new("per-key", 7, window).item;
        assert_eq!(&*item(Duration::from_secs(60)), "\"per-key\";q=7;w=60");
        assert_eq!(&*item(Duration::from_millis(1500)), "\"per-key\";q=7;w=2");
        assert_eq!(&*item(Duration::from_millis(1)), "\"per-key\";q=7;w=1");
        assert_eq!(&*item(Duration::ZERO), "\"per-key\";q=7;w=1");
    }
}
