//! The one background task per gateway that syncs every approximate limit's leases: every
//! sync interval, one call for all identity windows touched since the last (in chunks of
//! `MOST_PER_CALL`), the grants taken, the outcome counted. A failed call changes nothing
//! here beyond what `Leases::outgoing` already took off (the give-backs): the limits keep
//! spending what they kept, and fall back to `on_error` once no sync has succeeded for their
//! stale time (`stale_after`).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::{Leases, Outgoing};
use crate::rt::clock::Clock;
use crate::store::lease_sync::SyncEntry;
use crate::store::redis::{EXACT_LIMIT, RedisStore, StoreError};

/// Identity windows per call: a sync of more makes several calls, so that no call keeps
/// Redis busy for long.
pub(crate) const MOST_PER_CALL: usize = 2_000;

/// An instance counts as live in the fleet for this many sync intervals after its last sync.
pub(crate) const LIVE_FOR_INTERVALS: u32 = 3;

/// How long an approximate limit goes on from its leases without a successful sync before it
/// follows `on_error`: three sync intervals, or three store timeouts if longer (a sync that
/// is merely slow is not an outage).
pub(crate) fn stale_after(sync_interval: Duration, store_timeout: Duration) -> Duration {
    (sync_interval * 3).max(store_timeout * 3)
}

/// Handles of the sync metrics (`metrics/syncs.rs` registers them; clones share the series).
#[derive(Clone)]
pub(crate) struct SyncMetrics {
    pub ok: Counter,
    pub error: Counter,
    pub duration: Histogram,
    pub identities: Histogram,
}

/// What one sync task works with.
pub(crate) struct SyncTask {
    pub leases: Arc<Leases>,
    pub redis: Arc<RedisStore>,
    pub interval: Duration,
    pub clock: Arc<dyn Clock>,
    pub metrics: SyncMetrics,
}

impl SyncTask {
    /// Syncs every `interval` until `stop`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            if let Err(error) = self.sync_once().await {
                tracing::debug!(%error, "lease sync failed; approximate limits keep their leases");
            }
        }
    }

    /// One sync of everything outgoing; the first error, if any.
    pub(crate) async fn sync_once(&self) -> Result<(), StoreError> {
        let now = self.clock.now();
        let next = now + u64::try_from(self.interval.as_nanos()).unwrap_or(u64::MAX);
        let outgoing = self.leases.outgoing(now, next);
        if self.leases.is_empty() && outgoing.is_empty() {
            // No lease to keep fresh: nothing to call Redis for, and nothing is stale.
            self.leases.mark_ok(now);
            return Ok(());
        }
        self.metrics.identities.observe(outgoing.len() as f64);
        let mut result = Ok(());
        // Leases held but none touched since the last sync: an empty call keeps this
        // instance live in the fleet and its leases fresh.
        let chunks: Vec<&[Outgoing]> = if outgoing.is_empty() {
            vec![&[]]
        } else {
            outgoing.chunks(MOST_PER_CALL).collect()
        };
        for chunk in chunks {
            let started = std::time::Instant::now();
            let outcome = self.sync_chunk(chunk).await;
            self.metrics
                .duration
                .observe(started.elapsed().as_secs_f64());
            match outcome {
                Ok(()) => {
                    self.metrics.ok.inc();
                }
                Err(error) => {
                    self.metrics.error.inc();
                    result = result.and(Err(error));
                }
            }
        }
        result
    }

    async fn sync_chunk(&self, chunk: &[Outgoing]) -> Result<(), StoreError> {
        let entries: Vec<SyncEntry> = chunk.iter().map(entry).collect();
        let live_for = self.interval * LIVE_FOR_INTERVALS;
        if self.redis.cluster().is_some() {
            return self.sync_chunk_cluster(chunk, &entries, live_for).await;
        }
        let sent = self.clock.now();
        let reply = (self.redis)
            .sync_leases(self.leases.instance(), live_for, &entries, None)
            .await?;
        let received = self.clock.now();
        let chunk: Vec<&Outgoing> = chunk.iter().collect();
        let times = (reply.now, sent, received);
        self.leases
            .take(&chunk, &reply.grants, reply.instances, times);
        self.leases.set_instances(reply.instances);
        self.leases.mark_ok(received);
        Ok(())
    }

    /// One call per master: each that answers gives its grants and makes its slots' identities
    /// fresh; one that fails leaves its identities to go stale, the others' untouched.
    async fn sync_chunk_cluster(
        &self,
        chunk: &[Outgoing],
        entries: &[SyncEntry<'_>],
        live_for: Duration,
    ) -> Result<(), StoreError> {
        if self.leases.instances() == 0 {
            self.count_fleet(live_for).await;
        }
        let sent = self.clock.now();
        // Should the fleet still be uncounted (its master down), the other masters lease as
        // to a huge fleet (a request each): never all that is left to a newcomer.
        let shared_by = match self.leases.instances() {
            0 => EXACT_LIMIT - 1,
            counted => counted,
        };
        let nodes = (self.redis)
            .sync_leases_cluster(self.leases.instance(), live_for, entries, shared_by, None)
            .await?;
        let received = self.clock.now();
        let answered: Vec<_> = (nodes.iter())
            .filter_map(|node| node.result.as_ref().ok())
            .map(|reply| (reply.now, sent, received))
            .collect();
        self.leases.set_clock(&answered);
        let mut result = Ok(());
        for node in nodes {
            match node.result {
                Ok(reply) => {
                    let sent: Vec<&Outgoing> = node.entries.iter().map(|&i| &chunk[i]).collect();
                    (self.leases).take_grants(&sent, &reply.grants, reply.instances);
                    if node.holder {
                        self.leases.set_instances(reply.instances);
                    }
                    self.leases.mark_ok_slots(&node.slots, received);
                }
                Err(error) => result = result.and(Err(error)),
            }
        }
        result
    }

    /// A gateway's first sync on a cluster counts the fleet first (a call to every master
    /// with no identity), so that the masters which do not hold the instances' set share
    /// among the fleet from the start.
    async fn count_fleet(&self, live_for: Duration) {
        let counted = (self.redis)
            .sync_leases_cluster(self.leases.instance(), live_for, &[], EXACT_LIMIT - 1, None)
            .await;
        let holder = counted.into_iter().flatten().find(|node| node.holder);
        if let Some(Ok(reply)) = holder.map(|node| node.result) {
            self.leases.set_instances(reply.instances);
        }
    }
}

fn entry(outgoing: &Outgoing) -> SyncEntry<'_> {
    SyncEntry {
        limit: &outgoing.held.limit,
        limit_identity: outgoing.held.limit_identity,
        slot: outgoing.held.slot,
        algorithm: outgoing.held.algorithm,
        rate: outgoing.held.rate,
        ask: outgoing.ask,
    }
}
