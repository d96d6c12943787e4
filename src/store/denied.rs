//! Identities the shared store denied, remembered until their known retry time, so a flood
//! from one denied key is answered in process and costs no Redis round trips. A denial for a
//! cost stands for every request of that cost or more (a dearer request cannot pass sooner).
//! Bounded: when full, expired entries are swept; if none expired, new denials are not
//! remembered (correctness never depends on this cache, only traffic does).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::limit::RateStatus;
use crate::limit::window::Small;
use crate::rt::clock::Nanos;

const SHARDS: usize = 16;

#[derive(Debug, Clone)]
pub struct Denied {
    pub limit: Arc<str>,
    pub retry_after: Duration,
    pub statuses: Small<RateStatus>,
}

struct Entry {
    limit: Arc<str>,
    cost: u64,
    denied_at: Nanos,
    until: Nanos,
    statuses: Vec<RateStatus>,
}

pub struct DeniedCache {
    shards: Box<[Mutex<HashMap<u128, Entry>>]>,
    shard_capacity: usize,
}

impl DeniedCache {
    pub fn new(capacity: usize) -> DeniedCache {
        DeniedCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            shard_capacity: capacity.div_ceil(SHARDS).max(1),
        }
    }

    pub fn remember(&self, identity: u128, cost: u64, denial: &Denied, now: Nanos) {
        let until = now.saturating_add(denial.retry_after.as_nanos() as u64);
        let mut shard = self.shard(identity);
        if shard.len() >= self.shard_capacity && !shard.contains_key(&identity) {
            shard.retain(|_, e| e.until > now);
            if shard.len() >= self.shard_capacity {
                return;
            }
        }
        shard.insert(
            identity,
            Entry {
                limit: denial.limit.clone(),
                cost,
                denied_at: now,
                until,
                statuses: denial.statuses.to_vec(),
            },
        );
    }

    /// The standing denial of `identity` for a request of `cost`, with times as of `now`.
    pub fn lookup(&self, identity: u128, cost: u64, now: Nanos) -> Option<Denied> {
        let mut shard = self.shard(identity);
        let entry = shard.get(&identity)?;
        if entry.until <= now {
            shard.remove(&identity);
            return None;
        }
        if cost < entry.cost {
            return None;
        }
        let elapsed = Duration::from_nanos(now.saturating_sub(entry.denied_at));
        let statuses = entry
            .statuses
            .iter()
            .map(|s| RateStatus {
                reset: s.reset.saturating_sub(elapsed),
                ..s.clone()
            })
            .collect();
        Some(Denied {
            limit: entry.limit.clone(),
            retry_after: Duration::from_nanos(entry.until - now),
            statuses,
        })
    }

    /// Forgets the standing denial of `identity` (its state was cleared by an operator).
    pub fn forget(&self, identity: u128) {
        self.shard(identity).remove(&identity);
    }

    #[cfg(any(test, fuzzing, feature = "testing"))]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    #[cfg(any(test, fuzzing, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, identity: u128) -> std::sync::MutexGuard<'_, HashMap<u128, Entry>> {
        lock(&self.shards[(identity as usize) % SHARDS])
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Policy;

    const SECOND: u64 = 1_000_000_000;

    fn denial(retry_secs: u64) -> Denied {
        Denied {
            limit: Arc::from("per-key"),
            retry_after: Duration::from_secs(retry_secs),
            statuses: smallvec::smallvec![RateStatus {
                policy: Arc::new(Policy::new("per-key", 10, Duration::from_secs(60))),
                remaining: 0,
                reset: Duration::from_secs(30),
            }],
        }
    }

    #[test]
    fn a_denial_stands_until_its_retry_time_for_equal_or_dearer_requests() {
        let cache = DeniedCache::new(100);
        cache.remember(7, 2, &denial(5), 100 * SECOND);
        let hit = cache.lookup(7, 2, 102 * SECOND).expect("still denied");
        assert_eq!(hit.retry_after, Duration::from_secs(3));
        assert_eq!(hit.statuses[0].reset, Duration::from_secs(28));
        assert!(cache.lookup(7, 5, 102 * SECOND).is_some());
        assert!(
            cache.lookup(7, 1, 102 * SECOND).is_none(),
            "a cheaper request may pass"
        );
        assert!(cache.lookup(8, 2, 102 * SECOND).is_none());
        assert!(
            cache.lookup(7, 2, 105 * SECOND).is_none(),
            "gone at the retry time"
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn bounded_and_sweeps_expired_entries_when_full() {
        let cache = DeniedCache::new(SHARDS * 2);
        for identity in 0..1000u128 {
            cache.remember(identity, 1, &denial(1), 0);
        }
        assert_eq!(cache.len(), SHARDS * 2);
        cache.remember(5000, 1, &denial(1), 2 * SECOND);
        assert!(cache.lookup(5000, 1, 2 * SECOND).is_some());
        assert!(cache.len() <= SHARDS * 2);
    }
}
