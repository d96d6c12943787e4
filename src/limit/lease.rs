//! An approximate limit's lease on one window of one identity: requests Redis has already
//! added to the window's count on this instance's behalf, spent here with no round trip.
//! Pure: `now` is Redis's time (the instance's clock plus the offset its last sync measured).
//!
//! Invariant: this instance admits from a lease at most what Redis counted for it in that
//! window (`used <= granted`), so the count in Redis includes every admission before it
//! happens. What a sync gives back is taken off `granted` before the sync is sent, so a sync
//! that fails (applied or not) can only leave this instance admitting less.

use std::time::Duration;

use super::{Algorithm, Cell, Rate, WindowCheck, check_cell};
use crate::rt::clock::Nanos;

/// The lease of one window, and the global state the last sync read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lease {
    /// The window index (`now / per`, Redis time) the lease was granted in.
    pub window: u64,
    /// Requests Redis counted for this instance in `window`.
    pub granted: u64,
    /// Of those, spent (admitted, or reserved by a request still deciding).
    pub used: u64,
    /// The window's global counts after the last sync, as of `window`: the previous and the
    /// current window's (fixed_window: the previous is 0).
    pub prev: u64,
    pub curr: u64,
    /// Gateway instances the last sync counted (at least 1).
    pub instances: u64,
}

/// What a lease says about one request's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseCheck {
    /// Within the lease; `cost` is now spent. The status is this instance's view.
    Allow { remaining: u64, reset: Duration },
    /// The lease is spent.
    Deny {
        retry_after: Duration,
        remaining: u64,
        reset: Duration,
    },
    /// No lease for the current window (never leased, or the window ended): the request is
    /// decided exactly, in Redis, and the next sync leases.
    NoLease,
}

/// One identity's part in a sync: what it gives back and keeps of its lease, and whether it
/// wants a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncAsk {
    /// The window the lease was granted in (what `give` is subtracted from).
    pub window: u64,
    pub give: u64,
    pub keep: u64,
    pub want: bool,
}

/// What a sync answered for one identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub granted: u64,
    /// The window (Redis's, at the sync) the grant is for.
    pub window: u64,
    pub prev: u64,
    pub curr: u64,
}

impl Lease {
    /// Spends `cost` from the lease when the window of `now` is the lease's and at least
    /// `margin` of it is left (the clocks' offset is known to within a round trip: a lease
    /// is never spent after Redis has moved on to the next window). `next_sync` is how long
    /// until this instance syncs again: a client told to wait for more lease waits that long.
    pub fn check(
        &mut self,
        algorithm: Algorithm,
        rate: &Rate,
        now: Nanos,
        cost: u64,
        margin: u64,
        next_sync: Duration,
    ) -> LeaseCheck {
        let per = rate.per_ns();
        // `instances` is 0 until a sync answered for this identity. A window granted nothing
        // (it is full) is still a lease: it denies here, as a full window should.
        if self.instances == 0 || now / per != self.window || (now + margin) / per != self.window {
            return LeaseCheck::NoLease;
        }
        let global = check_cell(
            algorithm,
            self.cell(algorithm),
            now,
            rate,
            0,
            Duration::ZERO,
        );
        let (global_left, reset) = match global {
            WindowCheck::Allow {
                remaining, reset, ..
            } => (remaining, reset),
            WindowCheck::Deny {
                remaining, reset, ..
            } => (remaining, reset),
        };
        let unused = self.granted - self.used;
        if cost <= unused {
            self.used += cost;
            return LeaseCheck::Allow {
                remaining: (global_left + unused - cost).min(rate.limit),
                reset,
            };
        }
        match check_cell(
            algorithm,
            self.cell(algorithm),
            now,
            rate,
            cost,
            Duration::ZERO,
        ) {
            WindowCheck::Deny {
                retry_after,
                remaining,
                reset,
            } => LeaseCheck::Deny {
                retry_after,
                remaining,
                reset,
            },
            // The fleet has room, but not this instance: more comes with the next sync.
            WindowCheck::Allow { .. } => LeaseCheck::Deny {
                retry_after: next_sync.max(Duration::from_millis(1)),
                remaining: global_left,
                reset,
            },
        }
    }

    /// Gives back `cost` spent by a request another limit then refused, if its lease
    /// (`window`) is still this one.
    pub fn release(&mut self, window: u64, cost: u64) {
        if self.window == window {
            self.used = self.used.saturating_sub(cost);
        }
    }

    /// What this lease sends in a sync at `now`, and takes off `granted` at once what it
    /// gives back. A lease of an ended window gives back all it did not spend; a current one
    /// keeps what it would get as its share of what is left (the last sync's view), and
    /// gives back the rest. `want`: whether to ask for a lease (the identity is still used).
    pub fn ask(&mut self, algorithm: Algorithm, rate: &Rate, now: Nanos, want: bool) -> SyncAsk {
        let unused = self.granted - self.used;
        let current = now / rate.per_ns() == self.window;
        let keep = if current && want {
            let global = check_cell(
                algorithm,
                self.cell(algorithm),
                now,
                rate,
                0,
                Duration::ZERO,
            );
            let left = match global {
                WindowCheck::Allow { remaining, .. } | WindowCheck::Deny { remaining, .. } => {
                    remaining
                }
            };
            unused.min((left + unused).div_ceil(self.instances.max(1)))
        } else {
            0
        };
        self.granted -= unused - keep;
        SyncAsk {
            window: self.window,
            give: unused - keep,
            keep,
            want,
        }
    }

    /// Takes a sync's answer: more lease in the same window, or a lease of a new one.
    pub fn take(&mut self, grant: Grant, instances: u64) {
        if grant.window == self.window {
            self.granted += grant.granted;
        } else {
            self.window = grant.window;
            self.granted = grant.granted;
            self.used = 0;
        }
        self.prev = grant.prev;
        self.curr = grant.curr;
        self.instances = instances.max(1);
    }

    /// The global state as the algorithm's cell, so its own arithmetic gives the statuses.
    fn cell(&self, algorithm: Algorithm) -> Cell {
        match algorithm {
            Algorithm::SlidingWindow => [
                self.window + 1,
                (self.prev & 0xFFFF_FFFF) | (self.curr.min(0xFFFF_FFFF) << 32),
            ],
            _ => [self.window + 1, self.curr],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn per_minute(limit: u64) -> Rate {
        Rate {
            limit,
            per: Duration::from_secs(60),
            burst: limit,
        }
    }

    fn leased(window: u64, granted: u64, curr: u64) -> Lease {
        Lease {
            window,
            granted,
            curr,
            instances: 3,
            ..Lease::default()
        }
    }

    const NEXT: Duration = Duration::from_millis(100);

    #[test]
    fn a_lease_admits_exactly_what_it_was_granted_then_denies_until_the_next_sync() {
        let rate = per_minute(300);
        let now = 10 * 60 * SECOND + SECOND;
        let mut lease = leased(10, 100, 200);
        let allowed = (0..150)
            .filter(|_| {
                let check = lease.check(Algorithm::FixedWindow, &rate, now, 1, 0, NEXT);
                matches!(check, LeaseCheck::Allow { .. })
            })
            .count();
        assert_eq!(allowed, 100);
        // The fleet still had 100 unleased: wait for the next sync, not the window's end.
        let denied = lease.check(Algorithm::FixedWindow, &rate, now, 1, 0, NEXT);
        assert_eq!(
            denied,
            LeaseCheck::Deny {
                retry_after: NEXT,
                remaining: 100,
                reset: Duration::from_secs(59),
            }
        );
    }

    #[test]
    fn a_spent_lease_of_a_full_window_says_when_the_window_ends() {
        let rate = per_minute(300);
        let now = 10 * 60 * SECOND + 20 * SECOND;
        let mut lease = leased(10, 2, 300);
        assert!(matches!(
            lease.check(Algorithm::FixedWindow, &rate, now, 2, 0, NEXT),
            LeaseCheck::Allow { remaining: 0, .. }
        ));
        let LeaseCheck::Deny { retry_after, .. } =
            lease.check(Algorithm::FixedWindow, &rate, now, 1, 0, NEXT)
        else {
            panic!("a spent lease must deny");
        };
        assert_eq!(retry_after, Duration::from_secs(40));
    }

    #[test]
    fn the_cost_counts_and_a_released_reservation_is_spendable_again() {
        let rate = per_minute(300);
        let now = 10 * 60 * SECOND;
        let mut lease = leased(10, 10, 100);
        assert!(matches!(
            lease.check(Algorithm::FixedWindow, &rate, now, 7, 0, NEXT),
            LeaseCheck::Allow { .. }
        ));
        assert!(matches!(
            lease.check(Algorithm::FixedWindow, &rate, now, 4, 0, NEXT),
            LeaseCheck::Deny { .. }
        ));
        lease.release(10, 7);
        // A release for another window's lease changes nothing.
        lease.release(9, 3);
        assert_eq!(lease.used, 0);
        assert!(matches!(
            lease.check(Algorithm::FixedWindow, &rate, now, 10, 0, NEXT),
            LeaseCheck::Allow { .. }
        ));
    }

    #[test]
    fn no_lease_in_another_window_or_within_the_margin_of_its_end() {
        let rate = per_minute(300);
        let mut lease = leased(10, 100, 100);
        let next_window = 11 * 60 * SECOND;
        assert_eq!(
            lease.check(Algorithm::FixedWindow, &rate, next_window, 1, 0, NEXT),
            LeaseCheck::NoLease
        );
        let near_end = next_window - SECOND / 1000;
        let margin = 2 * SECOND / 1000;
        assert_eq!(
            lease.check(Algorithm::FixedWindow, &rate, near_end, 1, margin, NEXT),
            LeaseCheck::NoLease
        );
        assert_eq!(
            Lease::default().check(Algorithm::FixedWindow, &rate, near_end, 1, 0, NEXT),
            LeaseCheck::NoLease
        );
        assert_eq!(lease.used, 0);
        // A sync that granted nothing (the window is full) denies here, without Redis.
        let mut full = leased(10, 0, 300);
        assert!(matches!(
            full.check(Algorithm::FixedWindow, &rate, 10 * 60 * SECOND, 1, 0, NEXT),
            LeaseCheck::Deny { .. }
        ));
    }

    #[test]
    fn a_sync_keeps_the_share_gives_back_the_rest_and_takes_it_off_at_once() {
        let rate = per_minute(300);
        let now = 10 * 60 * SECOND;
        // 100 granted, 10 used; the fleet had 30 unleased; 3 instances: share (30+90)/3 = 40.
        let mut lease = Lease {
            used: 10,
            ..leased(10, 100, 270)
        };
        let ask = lease.ask(Algorithm::FixedWindow, &rate, now, true);
        assert_eq!(
            ask,
            SyncAsk {
                window: 10,
                give: 50,
                keep: 40,
                want: true
            }
        );
        assert_eq!(lease.granted, 50);
        // A lease of an ended window gives back everything it did not spend.
        let mut old = Lease {
            used: 10,
            ..leased(9, 100, 270)
        };
        let ask = old.ask(Algorithm::FixedWindow, &rate, now, true);
        assert_eq!((ask.give, ask.keep), (90, 0));
        assert_eq!(old.granted, old.used);
    }

    #[test]
    fn a_grant_adds_to_the_same_window_and_replaces_an_ended_one() {
        let mut lease = Lease {
            used: 5,
            ..leased(10, 20, 100)
        };
        let grant = |window, granted| Grant {
            granted,
            window,
            prev: 0,
            curr: 150,
        };
        lease.take(grant(10, 30), 2);
        assert_eq!((lease.granted, lease.used, lease.curr), (50, 5, 150));
        lease.take(grant(11, 40), 2);
        assert_eq!((lease.window, lease.granted, lease.used), (11, 40, 0));
        assert_eq!(lease.instances, 2);
    }

    #[test]
    fn a_sliding_windows_lease_denies_by_the_weighted_estimate() {
        let rate = per_minute(100);
        // Half way through window 11: previous (window 10) held 100, current 50: 50 + 50 = 100.
        let now = 11 * 60 * SECOND + 30 * SECOND;
        let mut lease = Lease {
            window: 11,
            granted: 1,
            used: 1,
            prev: 100,
            curr: 50,
            instances: 1,
        };
        let LeaseCheck::Deny {
            retry_after,
            remaining,
            ..
        } = lease.check(Algorithm::SlidingWindow, &rate, now, 1, 0, NEXT)
        else {
            panic!("a spent lease must deny");
        };
        assert_eq!(remaining, 0);
        assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(30));
    }
}
