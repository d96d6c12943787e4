//! The leases this gateway holds for approximate limits, one per identity window it touched,
//! shared by every worker and kept across reloads (with the Redis store). Requests spend them
//! (`check`); the sync task (`sync.rs`) gives back, asks and takes grants every sync interval.
//! Bounded: at most `max_identities`; identities past the bound are decided exactly, and an
//! identity untouched for a whole window is dropped at the next sync, giving its lease back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::limit::lease::{Grant, Lease, LeaseCheck, SyncAsk};
use crate::limit::window::WindowRequest;
use crate::limit::{Algorithm, Rate};
use crate::rt::clock::Nanos;
use crate::store::cluster::SLOTS;
use crate::store::slot::identity_slot;

/// A sync call's times: Redis's clock in its answer, and when it was sent and received
/// (local clock).
pub(crate) type SyncTimes = (Nanos, Nanos, Nanos);

pub(crate) mod sync;

/// The most identity windows one gateway holds leases for; more are decided exactly.
pub(crate) const MAX_IDENTITIES: usize = 100_000;

const SHARDS: usize = 16;
/// A sync's margin at the end of a window beyond its measured round trip.
const MARGIN_NS: u64 = 1_000_000;

/// One identity window's lease and what a sync needs to name its key.
#[derive(Debug, Clone)]
pub struct Held {
    pub lease: Lease,
    pub limit: Arc<str>,
    pub limit_identity: u128,
    pub slot: usize,
    pub algorithm: Algorithm,
    pub rate: Rate,
    /// Local clock of the last request, and of the last sync that carried this entry.
    touched: Nanos,
    synced: Nanos,
}

/// An entry a sync carries: its identity window, its key's parts and its ask.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub identity: u128,
    pub held: Held,
    pub ask: SyncAsk,
}

pub struct Leases {
    shards: Box<[Mutex<HashMap<u128, Held>>]>,
    held: AtomicUsize,
    max_identities: usize,
    /// This process's id in the fleet's instances set: random, it names no identity.
    instance: String,
    /// Redis's clock minus this process's, measured by the last sync (ns).
    offset: AtomicI64,
    /// Leases stop this long before their window ends: the offset is known to within the
    /// last sync's round trip.
    margin: AtomicU64,
    /// Local clock of the last sync that succeeded (or of creation): one for a single node,
    /// one per cluster slot (a master's sync makes the identities of its slots fresh).
    last_ok: Box<[AtomicU64]>,
    /// The live instances the last sync that counted them read (shared by a cluster's
    /// masters that do not hold the instances' set); 0 until one did.
    instances: AtomicU64,
    /// When the sync task next runs (local clock), for a client told to wait for a lease.
    next_sync: AtomicU64,
}

impl Leases {
    /// `cluster`: staleness is kept per slot, each master's identities on their own.
    pub fn new(max_identities: usize, now: Nanos, cluster: bool) -> Leases {
        let clocks = if cluster { SLOTS } else { 1 };
        Leases {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            held: AtomicUsize::new(0),
            max_identities,
            instance: format!("{:032x}", fastrand::u128(..)),
            offset: AtomicI64::new(0),
            margin: AtomicU64::new(MARGIN_NS),
            last_ok: (0..clocks).map(|_| AtomicU64::new(now)).collect(),
            instances: AtomicU64::new(0),
            next_sync: AtomicU64::new(now),
        }
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// How many identity windows hold (or wait for) a lease.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether no sync has succeeded for `stale_after` for the identity `limit_identity`
    /// (on a cluster: on the master of its slot): the limits then follow `on_error`.
    pub fn is_stale(&self, now: Nanos, stale_after: Duration, limit_identity: u128) -> bool {
        let clock = if self.last_ok.len() == 1 {
            0
        } else {
            usize::from(identity_slot(limit_identity))
        };
        let since = now.saturating_sub(self.last_ok[clock].load(Ordering::Acquire));
        since > u64::try_from(stale_after.as_nanos()).unwrap_or(u64::MAX)
    }

    /// `now` on Redis's clock.
    pub fn redis_now(&self, now: Nanos) -> Nanos {
        now.saturating_add_signed(self.offset.load(Ordering::Relaxed))
    }

    /// Spends `request.cost` of its window's lease; `NoLease` registers the identity window
    /// (room permitting) so the next sync leases for it. Also gives the lease's window (for
    /// `release`).
    pub fn check(
        &self,
        request: &WindowRequest,
        limit: &Arc<str>,
        now: Nanos,
    ) -> (LeaseCheck, u64) {
        let redis_now = self.redis_now(now);
        let window = redis_now / request.rate.per_ns();
        let next_sync =
            Duration::from_nanos((self.next_sync.load(Ordering::Relaxed)).saturating_sub(now));
        let margin = self.margin.load(Ordering::Relaxed);
        let mut shard = self.shard(request.identity);
        if let Some(held) = shard.get_mut(&request.identity) {
            held.touched = now;
            let rate = &request.rate;
            let check = (held.lease).check(
                held.algorithm,
                rate,
                redis_now,
                request.cost,
                margin,
                next_sync,
            );
            return (check, window);
        }
        if self.held.load(Ordering::Relaxed) < self.max_identities {
            self.held.fetch_add(1, Ordering::Relaxed);
            shard.insert(
                request.identity,
                Held {
                    lease: Lease::default(),
                    limit: limit.clone(),
                    limit_identity: request.limit_identity,
                    slot: request.window,
                    algorithm: request.algorithm,
                    rate: request.rate,
                    touched: now,
                    synced: 0,
                },
            );
        }
        (LeaseCheck::NoLease, window)
    }

    /// Gives back `cost` a request spent from the lease of `identity` in `window`.
    pub fn release(&self, identity: u128, window: u64, cost: u64) {
        if let Some(held) = self.shard(identity).get_mut(&identity) {
            held.lease.release(window, cost);
        }
    }

    /// What the next sync carries at `now`: every identity window touched since the last
    /// sync (its give-back, keep and ask), and those untouched for a whole window, which give
    /// their lease back and are dropped here.
    pub fn outgoing(&self, now: Nanos, next_sync: Nanos) -> Vec<Outgoing> {
        self.next_sync.store(next_sync, Ordering::Relaxed);
        let redis_now = self.redis_now(now);
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            shard.retain(|&identity, held| {
                let idle = now.saturating_sub(held.touched) >= held.rate.per_ns();
                if held.touched < held.synced && !idle {
                    return true;
                }
                let ask = (held.lease).ask(held.algorithm, &held.rate, redis_now, !idle);
                held.synced = now;
                out.push(Outgoing {
                    identity,
                    held: held.clone(),
                    ask,
                });
                if idle {
                    self.held.fetch_sub(1, Ordering::Relaxed);
                }
                !idle
            });
        }
        out
    }

    /// Takes a sync's answer: its grants, Redis's clock (`redis_now`, read between `sent`
    /// and `received` on the local clock) and the live instances. The identities' freshness
    /// is the caller's (`mark_ok`, `mark_ok_slots`).
    pub fn take(&self, sent: &[&Outgoing], grants: &[Grant], instances: u64, times: SyncTimes) {
        self.set_clock(&[times]);
        self.take_grants(sent, grants, instances);
    }

    /// The offset to Redis's clock and the margin, from the answers of one sync's calls
    /// (`(redis_now, sent, received)` each): the clock furthest ahead, so that a lease is
    /// never spent after any node has moved on to the next window, and the longest round trip.
    pub fn set_clock(&self, answers: &[SyncTimes]) {
        let offsets = answers.iter().map(|&(redis_now, sent_at, received)| {
            let midpoint = sent_at / 2 + received / 2;
            let offset = i128::from(redis_now) - i128::from(midpoint);
            offset.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
        });
        let Some(offset) = offsets.max() else { return };
        self.offset.store(offset, Ordering::Relaxed);
        let round_trip = (answers.iter())
            .map(|&(_, sent_at, received)| received.saturating_sub(sent_at))
            .max()
            .unwrap_or(0);
        self.margin.store(round_trip + MARGIN_NS, Ordering::Relaxed);
    }

    /// Takes the grants of `sent` (in order) and the instances a call shared among.
    pub fn take_grants(&self, sent: &[&Outgoing], grants: &[Grant], instances: u64) {
        for (outgoing, grant) in sent.iter().zip(grants) {
            if let Some(held) = self.shard(outgoing.identity).get_mut(&outgoing.identity) {
                held.lease.take(*grant, instances);
            }
        }
    }

    /// The live instances a sync counted (the master of the instances' set, on a cluster).
    pub fn set_instances(&self, instances: u64) {
        self.instances.store(instances.max(1), Ordering::Relaxed);
    }

    /// The live instances the last sync that counted them read; 0 until one did.
    pub fn instances(&self) -> u64 {
        self.instances.load(Ordering::Relaxed)
    }

    /// Records a successful sync at `now` for every identity.
    pub fn mark_ok(&self, now: Nanos) {
        for clock in self.last_ok.iter() {
            clock.fetch_max(now, Ordering::AcqRel);
        }
    }

    /// Records a successful sync at `now` for the identities of `slots` (a cluster's).
    pub fn mark_ok_slots(&self, slots: &[u16], now: Nanos) {
        for &slot in slots {
            if let Some(clock) = self.last_ok.get(usize::from(slot)) {
                clock.fetch_max(now, Ordering::AcqRel);
            }
        }
    }

    fn shard(&self, identity: u128) -> MutexGuard<'_, HashMap<u128, Held>> {
        lock(&self.shards[(identity as usize) % SHARDS])
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
