//! The lease sync of approximate limits: `rlp_limit_syncs_total{result}`,
//! `rlp_limit_sync_duration_seconds`, `rlp_limit_sync_identities`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{ResultLabel, latency_histogram};
pub(crate) use crate::admission::leases::sync::SyncMetrics;

/// Registers the series (both results start at 0) and returns their handles.
pub(super) fn register(registry: &mut Registry) -> SyncMetrics {
    let results = Family::<ResultLabel, Counter>::default();
    // One statement each: a family's guard held while asking for another series would
    // wait for itself.
    let ok = results.get_or_create(&ResultLabel { result: "ok" }).clone();
    let error = results
        .get_or_create(&ResultLabel { result: "error" })
        .clone();
    let syncs = SyncMetrics {
        ok,
        error,
        duration: latency_histogram(),
        // 1 to ~500k identity windows.
        identities: Histogram::new(exponential_buckets(1.0, 4.0, 10)),
    };
    registry.register(
        "rlp_limit_syncs",
        "Lease syncs of approximate limits, by result",
        results,
    );
    registry.register(
        "rlp_limit_sync_duration_seconds",
        "Time of one lease sync call",
        syncs.duration.clone(),
    );
    registry.register(
        "rlp_limit_sync_identities",
        "Identity windows carried by one lease sync",
        syncs.identities.clone(),
    );
    syncs
}
