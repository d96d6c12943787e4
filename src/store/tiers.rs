//! Tiers read from the `[plans] redis_hash`, cached in process for `redis_ttl`, by hash and
//! field, at most 100 000 a hash.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TIER_CACHE_CAPACITY: usize = 100_000;

/// hash → field → (tier, when it was read). Nested so that a lookup borrows its keys.
type TierEntries = HashMap<String, HashMap<Vec<u8>, (Option<Arc<str>>, Instant)>>;

/// Tiers read from Redis, by hash and field, for a short while.
#[derive(Default)]
pub(super) struct TierCache {
    entries: Mutex<TierEntries>,
}

impl TierCache {
    pub(super) fn get(
        &self,
        hash: &str,
        field: &[u8],
        now: Instant,
        ttl: Duration,
    ) -> Option<Option<Arc<str>>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (tier, fetched) = entries.get(hash)?.get(field)?;
        (now.saturating_duration_since(*fetched) < ttl).then(|| tier.clone())
    }

    pub(super) fn put(&self, hash: &str, field: &[u8], tier: Option<Arc<str>>, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let fields = entries.entry(hash.to_string()).or_default();
        if fields.len() >= TIER_CACHE_CAPACITY {
            // Bounded: start over rather than grow; the next requests re-read their tiers.
            fields.clear();
        }
        fields.insert(field.to_vec(), (tier, now));
    }
}
