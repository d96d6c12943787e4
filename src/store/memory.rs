//! The in-process store: 64 shards of window cells keyed by identity, the windows of one limit's
//! identity in one shard. A request's windows are checked and committed under the locks of
//! every shard they touch, taken in ascending order, so many tasks on one key never admit
//! more than the limit, and all-or-nothing holds.
//!
//! Each entry records when it becomes equivalent to a fresh one (like a Redis PEXPIRE); such
//! entries are swept when a shard fills. Memory is bounded by `max_entries`: when a shard is
//! full of live entries, new identities are counted in a few shared overflow cells (stricter,
//! never looser), whose state they inherit once they get an entry of their own.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use hashbrown::HashTable;

use crate::limit::settle::{Adjustment, Reserved, settle_cell, settle_log};
use crate::limit::sliding_log::{self, Log};
use crate::limit::window::{Small, WindowRequest, groups_to_commit};
use crate::limit::{Algorithm, Cell, WindowCheck, check_cell};
use crate::rt::clock::Nanos;

const SHARDS: usize = 64;
const OVERFLOW_CELLS: u64 = 64;
const SWEEP_PAUSE_NS: u64 = 100_000_000;

/// One stored window: an identity's hash, its state and its expiry (its size:
/// docs/PERFORMANCE.md, "Measured behind the code").
struct Entry {
    key: [u64; 2],
    cell: Cell,
    expires_at: Nanos,
}

#[derive(Default)]
struct Shard {
    cells: HashTable<Entry>,
    /// Sliding logs with the time their newest entry leaves the window.
    logs: HashMap<[u64; 2], (Log, Nanos)>,
    sweep_not_before: Nanos,
}

pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    shard_capacity: usize,
    max_entries: usize,
}

impl MemoryStore {
    pub fn new(max_entries: usize) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_capacity: max_entries.div_ceil(SHARDS).max(1),
            max_entries,
        }
    }

    /// The bound it was made with.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Checks every window and commits them all-or-nothing (see `groups_to_commit`).
    pub fn check_all(&self, requests: &[WindowRequest], now: Nanos) -> Small<WindowCheck> {
        let mut locked = self.lock_shards(requests);
        let mut keys: Small<[u64; 2]> = Small::new();
        let mut checks: Small<WindowCheck> = Small::new();
        for request in requests {
            let shard = locked.shard(shard_of(request));
            let (key, cell) = shard.resolve(split(request.identity), now, self.shard_capacity);
            checks.push(shard.check(key, cell, request, now));
            keys.push(key);
        }
        let allowed: Small<bool> = checks.iter().map(WindowCheck::is_allow).collect();
        let commit = groups_to_commit(requests, &allowed);
        for (i, request) in requests.iter().enumerate() {
            if commit[i] {
                locked
                    .shard(shard_of(request))
                    .commit(keys[i], request, &checks[i], now);
            }
        }
        checks
    }

    /// Settles a reservation of the windows `requests` (made as `reserved` says) by
    /// `adjustment`, each window under its shard's lock. An identity with no entry of its own
    /// was counted in an overflow cell: a debt goes there too (stricter); a refund does not,
    /// as the reservation may have been counted elsewhere since.
    pub fn settle(
        &self,
        requests: &[WindowRequest],
        reserved: &[Reserved],
        adjustment: Adjustment,
        now: Nanos,
    ) {
        for (request, reserved) in requests.iter().zip(reserved) {
            let mut shard = lock(&self.shards[shard_of(request)]);
            let (key, cell) = shard.resolve(split(request.identity), now, self.shard_capacity);
            if key != split(request.identity) && matches!(adjustment, Adjustment::Refund(_)) {
                continue;
            }
            shard.settle(key, cell, request, reserved, adjustment, now);
        }
    }

    /// Where each window stands at `now`, changing nothing: the check a request of the
    /// windows' cost would meet (the admin endpoints ask with cost 0, for what is left).
    pub fn peek(&self, requests: &[WindowRequest], now: Nanos) -> Small<WindowCheck> {
        let peek = |request: &WindowRequest| {
            let shard = lock(&self.shards[shard_of(request)]);
            let key = split(request.identity);
            shard.check(key, shard.live_cell(key, now), request, now)
        };
        requests.iter().map(peek).collect()
    }

    /// Forgets the windows' state, as if their identity had never been seen. (What it had
    /// counted in a shared overflow cell stays there, shared.)
    pub fn forget(&self, requests: &[WindowRequest]) {
        for request in requests {
            let mut shard = lock(&self.shards[shard_of(request)]);
            let key = split(request.identity);
            if let Ok(entry) = shard.cells.find_entry(key[1], |e| e.key == key) {
                entry.remove();
            }
            shard.logs.remove(&key);
        }
    }

    #[cfg(any(test, fuzzing, feature = "testing"))]
    /// How many windows are held in memory.
    pub fn entries(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let shard = lock(s);
                shard.cells.len() + shard.logs.len()
            })
            .sum()
    }

    #[cfg(any(test, fuzzing, feature = "testing"))]
    /// Bytes held by the cell tables (sliding logs not included).
    pub fn memory_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock(s).cells.allocation_size())
            .sum::<usize>()
            + size_of::<Self>()
    }

    fn lock_shards(&self, requests: &[WindowRequest]) -> LockedShards<'_> {
        // One bit per shard: the set bits give the shards in ascending order, once each,
        // without sorting.
        let touched = requests
            .iter()
            .fold(0u64, |mask, r| mask | 1 << shard_of(r));
        let mut guards = Small::new();
        let mut slots = [0u8; SHARDS];
        let mut rest = touched;
        while rest != 0 {
            let shard = rest.trailing_zeros() as usize;
            slots[shard] = guards.len() as u8;
            guards.push(lock(&self.shards[shard]));
            rest &= rest - 1;
        }
        LockedShards {
            touched,
            guards,
            slots,
        }
    }
}

const _: () = assert!(
    SHARDS <= u64::BITS as usize,
    "lock_shards keeps one bit per shard"
);

struct LockedShards<'a> {
    /// A bit per locked shard.
    touched: u64,
    /// Their guards, in ascending shard order.
    guards: Small<MutexGuard<'a, Shard>>,
    /// Each locked shard's place in `guards`. (Counting the touched bits below a shard was a
    /// software popcount on this target's baseline, twice a window.)
    slots: [u8; SHARDS],
}

impl LockedShards<'_> {
    fn shard(&mut self, index: usize) -> &mut Shard {
        debug_assert!(
            self.touched & 1 << index != 0,
            "shard {index} is not locked"
        );
        &mut self.guards[usize::from(self.slots[index])]
    }
}

impl Shard {
    /// The key a window is stored under: its own, or an overflow cell when the shard is full;
    /// and its own entry's cell while live, found by the same probe (a second probe in
    /// `check` searched the table again for every window).
    // Inlined into `check_all` as it was before settling called it too: out of line it cost
    // every checked window a call (benches/callgrind.sh (c): +88 instructions a request).
    #[inline(always)]
    fn resolve(&mut self, key: [u64; 2], now: Nanos, capacity: usize) -> ([u64; 2], Option<Cell>) {
        let hash = key[1];
        let (known, cell) = match self.cells.find(hash, |e| e.key == key) {
            Some(entry) => (true, (entry.expires_at > now).then_some(entry.cell)),
            None => (self.logs.contains_key(&key), None),
        };
        if known || self.cells.len() + self.logs.len() < capacity || self.make_room(now, capacity) {
            return (key, cell);
        }
        (overflow_key(key), None)
    }

    /// `cell` is what `resolve` found live under `key`; without one, the overflow cell's
    /// state counts (what an identity counted there inherits).
    fn check(
        &self,
        key: [u64; 2],
        cell: Option<Cell>,
        request: &WindowRequest,
        now: Nanos,
    ) -> WindowCheck {
        if request.algorithm == Algorithm::SlidingLog {
            let empty = Log::new();
            let log = self.logs.get(&key).map_or(&empty, |(log, _)| log);
            return sliding_log::check(log, now, &request.rate, request.cost);
        }
        let cell = cell
            .or_else(|| self.live_cell(overflow_key(key), now))
            .unwrap_or([0, 0]);
        check_cell(
            request.algorithm,
            cell,
            now,
            &request.rate,
            request.cost,
            request.max_delay,
        )
    }

    fn live_cell(&self, key: [u64; 2], now: Nanos) -> Option<Cell> {
        let entry = self.cells.find(key[1], |e| e.key == key)?;
        (entry.expires_at > now).then_some(entry.cell)
    }

    fn commit(&mut self, key: [u64; 2], request: &WindowRequest, check: &WindowCheck, now: Nanos) {
        let WindowCheck::Allow { cell, reset, .. } = *check else {
            return;
        };
        if request.algorithm == Algorithm::SlidingLog {
            let (log, expires_at) = self.logs.entry(key).or_default();
            sliding_log::commit(log, now, &request.rate, request.cost);
            *expires_at = now.saturating_add(request.rate.per_ns());
            return;
        }
        let expires_at = now.saturating_add(reset.as_nanos() as u64);
        match self.cells.find_mut(key[1], |e| e.key == key) {
            Some(entry) => {
                entry.cell = cell;
                entry.expires_at = expires_at;
            }
            None => {
                self.cells.insert_unique(
                    key[1],
                    Entry {
                        key,
                        cell,
                        expires_at,
                    },
                    |e| e.key[1],
                );
            }
        }
    }

    fn settle(
        &mut self,
        key: [u64; 2],
        cell: Option<Cell>,
        request: &WindowRequest,
        reserved: &Reserved,
        adjustment: Adjustment,
        now: Nanos,
    ) {
        let rate = &request.rate;
        if request.algorithm == Algorithm::SlidingLog {
            let (log, expires_at) = self.logs.entry(key).or_default();
            settle_log(log, now, rate, reserved, adjustment);
            let newest = log.back().copied().unwrap_or(now).max(now);
            *expires_at = (*expires_at).max(newest.saturating_add(rate.per_ns()));
            return;
        }
        let cell = cell.or_else(|| self.live_cell(key, now)).unwrap_or([0, 0]);
        let settled = settle_cell(request.algorithm, cell, now, rate, reserved, adjustment);
        if settled == cell {
            return;
        }
        // Live until the settled state is whole again, as a commit is.
        let reset = match check_cell(request.algorithm, settled, now, rate, 0, request.max_delay) {
            WindowCheck::Allow { reset, .. } | WindowCheck::Deny { reset, .. } => reset,
        };
        let expires_at = now.saturating_add(u64::try_from(reset.as_nanos()).unwrap_or(u64::MAX));
        match self.cells.find_mut(key[1], |e| e.key == key) {
            Some(entry) => {
                entry.cell = settled;
                entry.expires_at = expires_at;
            }
            None => {
                let entry = Entry {
                    key,
                    cell: settled,
                    expires_at,
                };
                self.cells.insert_unique(key[1], entry, |e| e.key[1]);
            }
        }
    }

    /// Forgets expired entries; true when that made room. A saturated shard is not swept again
    /// for a moment.
    fn make_room(&mut self, now: Nanos, capacity: usize) -> bool {
        if now < self.sweep_not_before {
            return false;
        }
        self.cells.retain(|e| e.expires_at > now);
        self.logs.retain(|_, (_, expires_at)| *expires_at > now);
        if self.cells.len() + self.logs.len() < capacity {
            return true;
        }
        self.sweep_not_before = now + SWEEP_PAUSE_NS;
        false
    }
}

/// The windows of one limit's identity share a shard: a request under two limits of two
/// windows locks two shards, not four (every shard locked adds a lock and an unlock to the
/// request).
fn shard_of(request: &WindowRequest) -> usize {
    (request.limit_identity >> 122) as usize % SHARDS
}

fn split(identity: u128) -> [u64; 2] {
    [(identity >> 64) as u64, identity as u64]
}

/// Overflow cells share the shard (top bits) and are few; the all-ones first word marks them.
fn overflow_key(key: [u64; 2]) -> [u64; 2] {
    [u64::MAX, key[1] % OVERFLOW_CELLS]
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
