//! Tiers read from the `[plans] redis_hash`, cached in process for `redis_ttl`, by hash and
//! field, at most 100 000 a hash. A field is a client's raw key (up to `max_header_bytes`), so
//! the cache holds a 128-bit keyed hash of it, never the key: 100 000 entries are ~5 MB however
//! long the keys clients send.

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use siphasher::sip128::{Hasher128, SipHasher13};

const TIER_CACHE_CAPACITY: usize = 100_000;

/// hash → hashed field → (tier, when it was read).
type TierEntries = HashMap<String, HashMap<u128, (Option<Arc<str>>, Instant)>>;

/// Tiers read from Redis, by hash and field, for a short while.
pub(super) struct TierCache {
    entries: Mutex<TierEntries>,
    /// Keys the field hash; random per process, as the cache never leaves it.
    key: [u8; 16],
}

impl Default for TierCache {
    fn default() -> TierCache {
        TierCache {
            entries: Mutex::default(),
            key: std::array::from_fn(|_| fastrand::u8(..)),
        }
    }
}

impl TierCache {
    fn field_hash(&self, field: &[u8]) -> u128 {
        let mut hasher = SipHasher13::new_with_key(&self.key);
        hasher.write(field);
        hasher.finish128().as_u128()
    }

    pub(super) fn get(
        &self,
        hash: &str,
        field: &[u8],
        now: Instant,
        ttl: Duration,
    ) -> Option<Option<Arc<str>>> {
        let field = self.field_hash(field);
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (tier, fetched) = entries.get(hash)?.get(&field)?;
        (now.saturating_duration_since(*fetched) < ttl).then(|| tier.clone())
    }

    pub(super) fn put(&self, hash: &str, field: &[u8], tier: Option<Arc<str>>, now: Instant) {
        let field = self.field_hash(field);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let fields = entries.entry(hash.to_string()).or_default();
        if fields.len() >= TIER_CACHE_CAPACITY {
            // Bounded: start over rather than grow; the next requests re-read their tiers.
            fields.clear();
        }
        fields.insert(field, (tier, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_are_cached_by_a_hash_of_the_field_for_the_ttl() {
        let cache = TierCache::default();
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        let long_key = vec![b'k'; 30_000];
        cache.put("tiers", &long_key, Some(Arc::from("pro")), now);
        assert_eq!(
            cache.get("tiers", &long_key, now, ttl),
            Some(Some(Arc::from("pro")))
        );
        assert_eq!(cache.get("tiers", b"other", now, ttl), None);
        assert_eq!(cache.get("others", &long_key, now, ttl), None);
        assert_eq!(cache.get("tiers", &long_key, now + ttl, ttl), None);
        let stored = cache.entries.lock().unwrap();
        assert_eq!(
            stored["tiers"].len(),
            1,
            "one fixed-size entry, not the 30 KB key"
        );
    }
}
