//! The shared store as the limiter sees it: one call that checks every window of a request
//! (all-or-nothing), one that settles a reservation once its answer is known, the denials it
//! gave that still stand, tiers from a hash, and the admin endpoints' look and reset. Redis in service; in the limiter's unit tests a scripted store
//! (`scripted.rs`), so the paths a failing store takes (`on_error`, an open breaker, a
//! cluster node down) are tested without a Redis.

use std::sync::Arc;
use std::time::Duration;

use crate::limit::WindowCheck;
use crate::limit::settle::Adjustment;
use crate::limit::window::{Small, WindowRequest};
use crate::store::denied::DeniedCache;
use crate::store::error::StoreError;
use crate::store::redis::{Outcome, RedisStore};
use crate::store::settle::ElapsedReservation;

#[cfg(test)]
pub(crate) mod scripted;
#[cfg(test)]
mod tests;

/// Where limits shared by a fleet are counted. One variant in service: matching it costs
/// nothing.
#[derive(Clone)]
pub enum SharedStore {
    Redis(Arc<RedisStore>),
    #[cfg(test)]
    Scripted(Arc<scripted::ScriptedStore>),
}

impl SharedStore {
    /// The Redis store, for what only Redis has (breakers, the lease sync, readiness).
    pub fn redis(&self) -> Option<&Arc<RedisStore>> {
        match self {
            SharedStore::Redis(redis) => Some(redis),
            #[cfg(test)]
            SharedStore::Scripted(_) => None,
        }
    }

    /// The `backend` label of store metrics.
    pub fn backend(&self) -> &'static str {
        match self {
            SharedStore::Redis(redis) => redis.backend(),
            #[cfg(test)]
            SharedStore::Scripted(_) => "scripted",
        }
    }

    /// `[store] timeout`.
    pub fn timeout(&self) -> Duration {
        match self {
            SharedStore::Redis(redis) => redis.config().timeout,
            #[cfg(test)]
            SharedStore::Scripted(scripted) => scripted.timeout,
        }
    }

    /// The denials the store gave whose retry time has not passed.
    pub fn denied(&self) -> &DeniedCache {
        match self {
            SharedStore::Redis(redis) => &redis.denied,
            #[cfg(test)]
            SharedStore::Scripted(scripted) => &scripted.denied,
        }
    }

    /// Checks every window (`limits[i]` names the limit of `requests[i]`) in one call.
    pub async fn check_all(&self, requests: &[WindowRequest], limits: &[&str]) -> Outcome {
        match self {
            SharedStore::Redis(redis) => redis.check_all(requests, limits, None).await,
            #[cfg(test)]
            SharedStore::Scripted(scripted) => scripted.check_all(requests),
        }
    }

    /// Settles a reservation of `requests` (`limits[i]` names the limit of `requests[i]`,
    /// `reserved[i]` says when its reservation was made) by `adjustment`, at the store's time.
    /// A refund forgets the identities' standing denials: what it gave back may let their next
    /// request pass, which only the store can say.
    pub async fn settle(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
        reserved: &[ElapsedReservation],
        adjustment: Adjustment,
    ) -> Result<(), StoreError> {
        match self {
            SharedStore::Redis(redis) => {
                (redis.settle(requests, limits, reserved, adjustment, None)).await?
            }
            #[cfg(test)]
            SharedStore::Scripted(scripted) => scripted.settle(requests, reserved, adjustment)?,
        }
        if matches!(adjustment, Adjustment::Refund(_)) {
            for request in requests {
                self.denied().forget(request.limit_identity);
            }
        }
        Ok(())
    }

    /// The tier stored for `field` in `hash`, cached for `ttl`; None when the store cannot say.
    pub async fn tier(&self, hash: &str, ttl: Duration, field: &[u8]) -> Option<Option<Arc<str>>> {
        match self {
            SharedStore::Redis(redis) => redis.tier(hash, ttl, field).await,
            #[cfg(test)]
            SharedStore::Scripted(scripted) => scripted.tier(field),
        }
    }

    /// What every window would answer, changing nothing (the admin endpoints).
    pub async fn peek(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
    ) -> Result<Small<WindowCheck>, StoreError> {
        match self {
            SharedStore::Redis(redis) => redis.peek(requests, limits).await,
            #[cfg(test)]
            SharedStore::Scripted(scripted) => scripted.peek(requests),
        }
    }

    /// Deletes the windows' state: their identity starts afresh.
    pub async fn forget(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
    ) -> Result<(), StoreError> {
        match self {
            SharedStore::Redis(redis) => redis.forget(requests, limits).await,
            #[cfg(test)]
            SharedStore::Scripted(scripted) => scripted.forget(requests),
        }
    }
}
