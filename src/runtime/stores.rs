//! The limit stores of a runtime, kept across reloads where their settings did not change, and
//! the lease sync task of its approximate limits.

use std::sync::Arc;

use super::Runtime;
use crate::admission::leases::sync::SyncTask;
use crate::admission::leases::{Leases, MAX_IDENTITIES};
use crate::admission::limiter::Stores;
use crate::admission::shared::SharedStore;
use crate::config::Config;
use crate::limit::rules::Consistency;
use crate::rt::clock::Clock;
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisStore;

impl Runtime {
    /// The sync task of the approximate limits' leases, at the shortest `sync_interval`.
    pub(super) fn lease_sync(&self) -> Option<SyncTask> {
        let stores = self.limiter.stores();
        let (leases, redis) = (stores.leases.clone()?, stores.redis()?.clone());
        let interval = (self.limiter.rules.iter())
            .filter_map(|rule| match rule.consistency {
                Consistency::Approximate { sync_interval } => Some(sync_interval),
                Consistency::Exact => None,
            })
            .min()?;
        Some(SyncTask {
            leases,
            redis,
            interval,
            clock: self.clock.clone(),
            metrics: self.metrics.syncs.clone(),
        })
    }
}

/// The stores of a new runtime: the previous ones where their settings did not change, so limit
/// state, the Redis connection, its breaker and its denied keys survive a reload.
pub(super) fn stores(config: &Config, previous: Option<&Stores>, clock: &dyn Clock) -> Stores {
    let memory = match previous.map(|p| &p.memory) {
        Some(memory) if memory.max_entries() == config.store.max_entries => memory.clone(),
        _ => Arc::new(MemoryStore::new(config.store.max_entries)),
    };
    let redis =
        config
            .store
            .redis
            .as_ref()
            .map(|settings| match previous.and_then(Stores::redis) {
                Some(redis) if redis.config() == settings => redis.clone(),
                Some(redis) => Arc::new(RedisStore::succeeding(
                    settings.clone(),
                    config.server.workers,
                    redis,
                )),
                None => Arc::new(RedisStore::new(settings.clone(), config.server.workers)),
            });
    let approximate =
        (config.limits.iter()).any(|l| matches!(l.consistency, Consistency::Approximate { .. }));
    let leases = match (&redis, previous) {
        (None, _) => None,
        (Some(_), _) if !approximate => None,
        // The same store: the same leases (they name its keys).
        (Some(redis), Some(previous))
            if previous.redis().is_some_and(|p| Arc::ptr_eq(p, redis)) =>
        {
            (previous.leases.clone()).or_else(|| Some(new_leases(clock, redis.config().cluster)))
        }
        (Some(redis), _) => Some(new_leases(clock, redis.config().cluster)),
    };
    Stores {
        memory,
        shared: redis.map(SharedStore::Redis),
        fallback_instances: config.store.fallback_instances,
        leases,
    }
}

/// The lease table of a gateway's approximate limits.
fn new_leases(clock: &dyn Clock, cluster: bool) -> Arc<Leases> {
    Arc::new(Leases::new(MAX_IDENTITIES, clock.now(), cluster))
}
