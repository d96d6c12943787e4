//! Settling on a real Redis Cluster: one settle call per limit identity, each on the master
//! of its slot, leaving the windows as the memory store's settle leaves them.

use std::time::Duration;

use ratelimit_proxy::testing::{Adjustment, Algorithm, RedisConfig, RedisStore, WindowCheck};
use support::redis_server::RedisCluster;

use super::redis_store::START_US;
use super::settle::{RESERVE, pair, windows};
use crate::support;

#[test]
fn a_cluster_settles_each_identity_on_its_master_as_the_memory_store_does() {
    let cluster = RedisCluster::start();
    // A call may wait 5 s (the reservation's earliest time is widened by that much).
    let store = RedisStore::new(
        RedisConfig {
            cluster: true,
            urls: cluster.urls(),
            timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(5),
            key_prefix: "settle:".into(),
            ca_file: None,
        },
        1,
    );
    let pair = pair(store);
    let evalsha = || -> Vec<u64> { (cluster.nodes.iter()).map(|n| n.calls("evalsha")).collect() };
    let t0 = START_US + 10_000_000;
    let t2 = t0 + 6_000_000;
    // Sent 1 s before the settle: its earliest time is t0 exactly, its latest in the minute.
    let since = (1_000_000, 998_000);
    for algorithm in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let name = format!("c-{}", algorithm.name());
        let limits = vec![name.as_str(); 12];
        // Six identities, two windows each: over the three masters.
        let all = |cost| -> Vec<_> {
            (0..6)
                .flat_map(|who| windows(who + 1, algorithm, cost))
                .collect()
        };
        // Reserved in one call (one per identity on the cluster): all allowed, so the same as
        // the memory store's one all-or-nothing check.
        let reserved = pair.check(&all(RESERVE), &limits, t0);
        assert!(reserved.iter().all(WindowCheck::is_allow), "{reserved:?}");
        let resets: Vec<Duration> = reserved
            .iter()
            .map(|check| match check {
                WindowCheck::Allow { reset, .. } | WindowCheck::Deny { reset, .. } => *reset,
            })
            .collect();
        let before = evalsha();
        for (adjustment, span) in [(Adjustment::Refund(2), 0..6), (Adjustment::Debt(5), 6..12)] {
            let requests = &all(RESERVE)[span.clone()];
            let (limits, resets) = (&limits[span.clone()], &resets[span]);
            pair.settle(requests, limits, resets, since, adjustment, t2);
        }
        let settled_on = (evalsha().iter().zip(&before))
            .filter(|(after, before)| after > before)
            .count();
        assert!(settled_on >= 2, "{name}: settled on {settled_on} masters");
        // Each identity checked on its own, as a request meets one identity of a limit.
        for n in 0..12 {
            for who in 0..6 {
                pair.check(&windows(who + 1, algorithm, 1), &limits[..2], t2 + n);
            }
        }
    }
}
