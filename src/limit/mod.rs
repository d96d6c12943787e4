//! Rate limit arithmetic shared by the edge layer and the per-key limits. Algorithms are pure:
//! they take the stored state and `now`, and return a decision and the new state.

pub mod gcra;

use std::time::Duration;

/// `limit` requests per `per`, at most `burst` at once.
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
        let per = u64::try_from(self.per.as_nanos()).unwrap_or(u64::MAX);
        (per / self.limit.max(1)).max(1)
    }
}

/// What a client is told about one rate: the policy and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateStatus {
    /// Names the policy in headers and problem details (`edge`, or a limit name).
    pub policy: &'static str,
    pub limit: u64,
    pub window: Duration,
    pub remaining: u64,
    /// Until the full quota is back.
    pub reset: Duration,
}
