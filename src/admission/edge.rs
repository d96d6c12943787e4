//! The edge layer: one token bucket per client IP (IPv6 grouped by prefix), in process memory,
//! to shed floods before any per-key work. Deny lists answer 403; overrides exempt a list or
//! give it its own rate.
//!
//! Memory is bounded by `max_tracked`. A bucket is one GCRA timestamp; a full bucket carries
//! no state, so full buckets are the only ones ever forgotten, and an IP over its limit is never
//! forgotten and can never come back with a fresh bucket. When a shard is saturated with
//! buckets that are not full (more active IPs than `max_tracked`), newcomers are limited
//! through a fixed array of shared, hashed overflow cells: memory stays fixed, newcomers may be
//! limited early because they share a cell, and nobody gets a fresh bucket by flooding.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hashbrown::HashTable;

use crate::limit::gcra::{self, Gcra};
use crate::limit::{Policy, Rate, RateStatus};
use crate::request::ip_set::IpSet;
use crate::rt::clock::Nanos;

const SHARDS: usize = 64;
/// What the edge layer's rates are called in headers and problem details.
pub(crate) const POLICY_NAME: &str = "edge";
/// Shortest pause between two sweeps of a saturated shard, so a flood does not sweep per request.
const SWEEP_PAUSE_NS: u64 = 100_000_000;

/// How one list is treated by the edge layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgeOverride {
    Exempt {
        list: String,
        ips: Arc<IpSet>,
    },
    Rate {
        list: String,
        ips: Arc<IpSet>,
        rate: Rate,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgePolicy {
    pub rate: Rate,
    pub max_tracked: usize,
    pub deny: Vec<(String, Arc<IpSet>)>,
    pub overrides: Vec<EdgeOverride>,
}

/// The edge layer's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgeVerdict {
    Allow,
    /// On an exempt list: the edge layer does not apply.
    Exempt,
    /// On a deny list: answered 403.
    Forbidden {
        list: String,
    },
    Limited {
        status: RateStatus,
        retry_after: Duration,
    },
}

pub struct EdgeLayer {
    policy: EdgePolicy,
    buckets: Arc<EdgeBuckets>,
    /// The default rate as told in headers and problem details (`edge`).
    told: Arc<Policy>,
    /// Each override's rate as told, in the overrides' order (an exempt list's is the default's,
    /// never told).
    overrides_told: Box<[Arc<Policy>]>,
    /// `edge`, for the access log of each request it refuses (made once, not per refusal).
    name: Arc<str>,
}

impl EdgeLayer {
    pub fn new(policy: EdgePolicy) -> EdgeLayer {
        let buckets = Arc::new(EdgeBuckets::new(policy.max_tracked));
        EdgeLayer::with_buckets(policy, buckets)
    }

    /// A layer for `policy` that keeps the buckets of `previous` when its policy is the same
    /// (a reload that did not touch `[edge]` or the lists it uses).
    pub fn reusing(policy: EdgePolicy, previous: Option<&EdgeLayer>) -> EdgeLayer {
        match previous {
            Some(previous) if previous.policy == policy => {
                EdgeLayer::with_buckets(policy, previous.buckets.clone())
            }
            _ => EdgeLayer::new(policy),
        }
    }

    fn with_buckets(policy: EdgePolicy, buckets: Arc<EdgeBuckets>) -> EdgeLayer {
        let told = Policy::of(POLICY_NAME, &policy.rate);
        let overrides_told = (policy.overrides.iter())
            .map(|over| match over {
                EdgeOverride::Rate { rate, .. } => Policy::of(POLICY_NAME, rate),
                EdgeOverride::Exempt { .. } => told.clone(),
            })
            .collect();
        EdgeLayer {
            policy,
            buckets,
            told,
            overrides_told,
            name: Arc::from(POLICY_NAME),
        }
    }

    /// `edge`, as the access log names what refused a request.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Checks client `ip` at `now`, taking one token from the bucket of `bucket_ip` (the
    /// address grouped by IPv6 prefix) when allowed. Lists match the address itself.
    pub fn check(&self, ip: IpAddr, bucket_ip: IpAddr, now: Nanos) -> EdgeVerdict {
        if let Some((list, _)) = self.policy.deny.iter().find(|(_, ips)| ips.contains(ip)) {
            return EdgeVerdict::Forbidden { list: list.clone() };
        }
        let (mut rate, mut told) = (&self.policy.rate, &self.told);
        for (over, own_told) in self.policy.overrides.iter().zip(&self.overrides_told) {
            match over {
                EdgeOverride::Exempt { ips, .. } if ips.contains(ip) => return EdgeVerdict::Exempt,
                EdgeOverride::Rate { ips, rate: own, .. } if ips.contains(ip) => {
                    (rate, told) = (own, own_told);
                    break;
                }
                _ => {}
            }
        }
        match self.buckets.check(bucket_ip, now, rate) {
            Gcra::Allow { .. } => EdgeVerdict::Allow,
            Gcra::Deny { retry_after, reset } => EdgeVerdict::Limited {
                status: RateStatus {
                    policy: told.clone(),
                    remaining: 0,
                    reset,
                },
                retry_after,
            },
        }
    }

    /// How many IPs have a bucket in memory.
    pub fn tracked(&self) -> usize {
        self.buckets.tracked()
    }

    #[cfg(any(test, fuzzing, feature = "testing"))]
    /// Bytes held by the bucket tables and overflow cells.
    pub fn memory_bytes(&self) -> usize {
        self.buckets.memory_bytes()
    }
}

/// One tracked IP: an address's hash and one timestamp, nothing more (its size:
/// docs/PERFORMANCE.md, "Measured behind the code").
struct Bucket {
    key: [u64; 2],
    tat: Nanos,
}

#[repr(align(64))]
struct Shard {
    table: Mutex<ShardTable>,
}

struct ShardTable {
    buckets: HashTable<Bucket>,
    sweep_not_before: Nanos,
}

struct EdgeBuckets {
    shards: Box<[Shard]>,
    shard_capacity: usize,
    overflow: Box<[AtomicU64]>,
    hasher: foldhash::fast::RandomState,
}

impl EdgeBuckets {
    fn new(max_tracked: usize) -> EdgeBuckets {
        let shards = (0..SHARDS)
            .map(|_| Shard {
                table: Mutex::new(ShardTable {
                    buckets: HashTable::new(),
                    sweep_not_before: 0,
                }),
            })
            .collect();
        let overflow_cells = (max_tracked / 16).clamp(1024, 1 << 20);
        EdgeBuckets {
            shards,
            shard_capacity: max_tracked.div_ceil(SHARDS).max(1),
            overflow: (0..overflow_cells).map(|_| AtomicU64::new(0)).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    fn check(&self, ip: IpAddr, now: Nanos, rate: &Rate) -> Gcra {
        let key = bucket_key(ip);
        let hash = std::hash::BuildHasher::hash_one(&self.hasher, key);
        let shard = &self.shards[(hash >> 58) as usize % SHARDS];
        let mut table = shard
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(bucket) = table.buckets.find_mut(hash, |b| b.key == key) {
            let outcome = gcra::check(bucket.tat, now, rate, 1);
            if let Gcra::Allow { tat, .. } = outcome {
                bucket.tat = tat;
            }
            return outcome;
        }
        // A newcomer starts from its overflow cell, which is full unless the table overflowed.
        let cell = &self.overflow[(hash as usize) % self.overflow.len()];
        if table.buckets.len() < self.shard_capacity || table.make_room(now, self.shard_capacity) {
            let outcome = gcra::check(cell.load(Ordering::Relaxed), now, rate, 1);
            if let Gcra::Allow { tat, .. } = outcome {
                table.buckets.insert_unique(hash, Bucket { key, tat }, |b| {
                    std::hash::BuildHasher::hash_one(&self.hasher, b.key)
                });
            }
            return outcome;
        }
        drop(table);
        check_overflow_cell(cell, now, rate)
    }

    fn tracked(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.table.lock().map_or(0, |t| t.buckets.len()))
            .sum()
    }

    #[cfg(any(test, fuzzing, feature = "testing"))]
    fn memory_bytes(&self) -> usize {
        let tables: usize = self
            .shards
            .iter()
            .map(|s| s.table.lock().map_or(0, |t| t.buckets.allocation_size()))
            .sum();
        tables
            + self.overflow.len() * size_of::<AtomicU64>()
            + self.shards.len() * size_of::<Shard>()
    }
}

impl ShardTable {
    /// Forgets full buckets; true when that made room. A saturated shard is not swept again
    /// for a moment.
    fn make_room(&mut self, now: Nanos, capacity: usize) -> bool {
        if now < self.sweep_not_before {
            return false;
        }
        self.buckets.retain(|b| !gcra::is_full(b.tat, now));
        if self.buckets.len() < capacity {
            return true;
        }
        self.sweep_not_before = now + SWEEP_PAUSE_NS;
        false
    }
}

/// GCRA on a shared cell, lock-free.
fn check_overflow_cell(cell: &AtomicU64, now: Nanos, rate: &Rate) -> Gcra {
    let mut tat = cell.load(Ordering::Relaxed);
    loop {
        let outcome = gcra::check(tat, now, rate, 1);
        let Gcra::Allow { tat: next, .. } = outcome else {
            return outcome;
        };
        match cell.compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return outcome,
            Err(current) => tat = current,
        }
    }
}

/// IPv4 as its IPv4-mapped IPv6 form, so both families share one key space.
fn bucket_key(ip: IpAddr) -> [u64; 2] {
    let bits = match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    };
    [(bits >> 64) as u64, bits as u64]
}

/// The `decision` label of `rlp_edge_decisions_total`.
#[derive(Clone, Copy)]
pub(crate) enum EdgeDecision {
    Allowed,
    Exempt,
    Forbidden,
    Denied,
}

impl EdgeDecision {
    pub(crate) const COUNT: usize = 4;

    pub(crate) fn of(verdict: &EdgeVerdict) -> EdgeDecision {
        match verdict {
            EdgeVerdict::Allow => EdgeDecision::Allowed,
            EdgeVerdict::Exempt => EdgeDecision::Exempt,
            EdgeVerdict::Forbidden { .. } => EdgeDecision::Forbidden,
            EdgeVerdict::Limited { .. } => EdgeDecision::Denied,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            EdgeDecision::Allowed => "allowed",
            EdgeDecision::Exempt => "exempt",
            EdgeDecision::Forbidden => "forbidden",
            EdgeDecision::Denied => "denied",
        }
    }
}

#[cfg(test)]
mod tests;
