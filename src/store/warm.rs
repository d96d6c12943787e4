//! Each serving worker opens its own connections to the store as soon as it starts, and again
//! whenever a reload brings a new store, so that no request pays for connecting (on a
//! cluster: reading the slots, connecting to every master, loading the script). Until it
//! succeeds it tries again, a little less often each time; each node's breaker sees the
//! outcome, so this doubles as the probe of a store nobody is calling.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::redis::{RedisStore, StoreError};

/// How often a worker looks whether a reload brought a new store.
const CHECK_EVERY: Duration = Duration::from_millis(100);
const FIRST_RETRY_AFTER: Duration = Duration::from_millis(100);
const LONGEST_RETRY_PAUSE: Duration = Duration::from_secs(2);

/// Warms up the store `current` returns on the calling worker, and each one that replaces
/// it, until `stop`.
pub(crate) async fn keep_warm(
    current: impl Fn() -> Option<Arc<RedisStore>>,
    stop: CancellationToken,
) {
    let mut warmed: Weak<RedisStore> = Weak::new();
    loop {
        if let Some(store) = current()
            && !std::ptr::eq(warmed.as_ptr(), Arc::as_ptr(&store))
        {
            let still_current = || current().is_some_and(|s| Arc::ptr_eq(&s, &store));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = warm_up(&store, still_current) => {}
            }
            warmed = Arc::downgrade(&store);
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

/// Tries until the store is warm on this worker, or no longer the current one.
async fn warm_up(store: &RedisStore, still_current: impl Fn() -> bool) {
    let mut pause = FIRST_RETRY_AFTER;
    loop {
        let wait = match store.warm_up().await {
            Ok(()) => return,
            // Another worker is probing the node: no attempt was made, and trying again as
            // soon as it may keeps this worker from lagging a whole pause behind it.
            Err(StoreError::BreakerOpen { retry_in }) => retry_in.min(FIRST_RETRY_AFTER),
            Err(error) => {
                tracing::debug!(%error, worker = crate::rt::worker::current(), "limit store not reached yet; trying again");
                let wait = pause;
                pause = (pause * 2).min(LONGEST_RETRY_PAUSE);
                wait
            }
        };
        tokio::time::sleep(wait).await;
        if !still_current() {
            return;
        }
    }
}
