//! The lease sync script (`src/store/lua/lease_sync.lua`) on a real redis-server, with an
//! explicit `now`: leases are ceil(remaining / instances) and never more than is left,
//! give-backs come off the window they were leased in (and only that one), and the exact
//! script sees every lease in its count.

use crate::support;

use std::time::Duration;

use ratelimit_proxy::testing::WindowRequest;
use ratelimit_proxy::testing::{Algorithm, Rate, WindowCheck};
use ratelimit_proxy::testing::{Grant, SyncAsk};
use ratelimit_proxy::testing::{RedisConfig, RedisStore, StoreError};
use ratelimit_proxy::testing::{SyncEntry, SyncReply};
use support::redis_server::RedisServer;

/// A realistic Unix time at the start of a minute, in ns.
const START: u64 = 1_764_000_000 / 60 * 60 * 1_000_000_000;
const MINUTE: u64 = 60_000_000_000;
const LIVE_FOR: Duration = Duration::from_secs(1);
const IDENTITY: u128 = 0x1234_5678_9abc_def0_1234_5678_9abc_def0;

fn store(server: &RedisServer, prefix: &str) -> RedisStore {
    let config = RedisConfig {
        cluster: false,
        urls: vec![server.url()],
        timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        key_prefix: prefix.to_string(),
        ca_file: None,
    };
    RedisStore::new(config, 1)
}

fn rate(limit: u64) -> Rate {
    Rate {
        limit,
        per: Duration::from_secs(60),
        burst: limit,
    }
}

fn entry(algorithm: Algorithm, limit: u64, ask: SyncAsk) -> SyncEntry<'static> {
    SyncEntry {
        limit: "hot",
        limit_identity: IDENTITY,
        slot: 0,
        algorithm,
        rate: rate(limit),
        ask,
    }
}

fn want(window: u64, give: u64, keep: u64) -> SyncAsk {
    SyncAsk {
        window,
        give,
        keep,
        want: true,
    }
}

async fn sync(
    store: &RedisStore,
    instance: &str,
    entries: &[SyncEntry<'_>],
    now: u64,
) -> SyncReply {
    store
        .sync_leases(instance, LIVE_FOR, entries, Some(now))
        .await
        .expect("the sync script answers")
}

fn window_of(now: u64) -> u64 {
    now / MINUTE
}

#[tokio::test]
async fn a_lease_is_the_remaining_count_divided_by_the_live_instances_rounded_up() {
    let server = RedisServer::start();
    let store = store(&server, "share:");
    let now = START + 1_000_000_000;
    let w = window_of(now);
    let fixed = |ask| [entry(Algorithm::FixedWindow, 300, ask)];
    // Alone: the whole limit (300 / 1).
    let first = sync(&store, "a", &fixed(want(0, 0, 0)), now).await;
    assert_eq!(first.instances, 1);
    assert_eq!(
        first.grants,
        vec![Grant {
            granted: 300,
            window: w,
            prev: 0,
            curr: 300
        }]
    );
    assert_eq!(first.now, now / 1000 * 1000);
    // "b" joins while "a" holds everything: nothing is left to lease.
    let b = sync(&store, "b", &fixed(want(0, 0, 0)), now).await;
    assert_eq!((b.instances, b.grants[0].granted), (2, 0));
    // "a" gives back 200 and keeps 100: its share is ceil((200 + 100) / 2) = 150, 50 more.
    let a = sync(&store, "a", &fixed(want(w, 200, 100)), now).await;
    assert_eq!((a.grants[0].granted, a.grants[0].curr), (50, 150));
    // "b": ceil(150 / 2) = 75.
    let b = sync(&store, "b", &fixed(want(0, 0, 0)), now).await;
    assert_eq!((b.grants[0].granted, b.grants[0].curr), (75, 225));
    // "c" joins: ceil(75 / 3) = 25.
    let c = sync(&store, "c", &fixed(want(0, 0, 0)), now).await;
    assert_eq!(c.instances, 3);
    assert_eq!((c.grants[0].granted, c.grants[0].curr), (25, 250));
    // An instance not seen for longer than LIVE_FOR no longer counts.
    let later = now + 2 * LIVE_FOR.as_nanos() as u64;
    let alone = sync(&store, "c", &fixed(want(w, 0, 25)), later).await;
    assert_eq!(alone.instances, 1);
    // (50 left + 25 kept) / 1 - 25 kept = 50: everything left, never more.
    assert_eq!((alone.grants[0].granted, alone.grants[0].curr), (50, 300));
    let none = sync(&store, "c", &fixed(want(w, 0, 100)), later).await;
    assert_eq!(none.grants[0].granted, 0);
}

#[tokio::test]
async fn a_lease_never_exceeds_what_is_left_and_the_exact_script_counts_it() {
    let server = RedisServer::start();
    let store = store(&server, "cap:");
    let now = START + 5_000_000_000;
    let entries = [entry(Algorithm::FixedWindow, 10, want(0, 0, 0))];
    assert_eq!(sync(&store, "a", &entries, now).await.grants[0].granted, 10);
    assert_eq!(sync(&store, "b", &entries, now).await.grants[0].granted, 0);
    // The exact script, on the same key, finds the window full.
    let request = WindowRequest {
        identity: IDENTITY,
        limit_identity: IDENTITY,
        algorithm: Algorithm::FixedWindow,
        rate: rate(10),
        cost: 1,
        max_delay: Duration::ZERO,
        group: 0,
        window: 0,
        shadow: false,
    };
    let outcome = store
        .check_all(std::slice::from_ref(&request), &["hot"], Some(now))
        .await;
    assert!(matches!(
        outcome.checks[0],
        Some(WindowCheck::Deny { remaining: 0, .. })
    ));
    // Given back, the exact script may spend it.
    let w = window_of(now);
    let given = [entry(
        Algorithm::FixedWindow,
        10,
        SyncAsk {
            want: false,
            ..want(w, 4, 0)
        },
    )];
    assert_eq!(sync(&store, "a", &given, now).await.grants[0].curr, 6);
    let outcome = store
        .check_all(std::slice::from_ref(&request), &["hot"], Some(now))
        .await;
    assert!(matches!(
        outcome.checks[0],
        Some(WindowCheck::Allow { remaining: 3, .. })
    ));
}

#[tokio::test]
async fn a_give_back_for_an_ended_window_changes_nothing_in_the_new_one() {
    let server = RedisServer::start();
    let store = store(&server, "ended:");
    let now = START + 59_000_000_000;
    let w = window_of(now);
    let fixed = |ask| [entry(Algorithm::FixedWindow, 100, ask)];
    assert_eq!(
        sync(&store, "a", &fixed(want(0, 0, 0)), now).await.grants[0].granted,
        100
    );
    // Next window: 100 leased in the last one gives nothing back here; a fresh lease.
    let next = now + 2_000_000_000;
    let reply = sync(&store, "a", &fixed(want(w, 100, 0)), next).await;
    assert_eq!(
        reply.grants[0],
        Grant {
            granted: 100,
            window: w + 1,
            prev: 0,
            curr: 100
        }
    );
}

#[tokio::test]
async fn a_sliding_windows_lease_is_what_the_weighted_estimate_leaves() {
    let server = RedisServer::start();
    let store = store(&server, "sliding:");
    let start = START + 30_000_000_000;
    let w = window_of(start);
    let sliding = |ask| [entry(Algorithm::SlidingWindow, 100, ask)];
    assert_eq!(
        sync(&store, "a", &sliding(want(0, 0, 0)), start)
            .await
            .grants[0]
            .granted,
        100
    );
    // Half way into the next window the previous 100 weigh 50: 50 are left.
    let next = start + MINUTE;
    let reply = sync(&store, "a", &sliding(want(w, 0, 0)), next).await;
    assert_eq!(
        reply.grants[0],
        Grant {
            granted: 50,
            window: w + 1,
            prev: 100,
            curr: 50
        }
    );
    // Giving back 40 of the previous window's lease lowers its weight: 20 more.
    let reply = sync(&store, "a", &sliding(want(w, 40, 0)), next).await;
    assert_eq!((reply.grants[0].granted, reply.grants[0].prev), (20, 60));
}

/// A Redis restarted after an outage long enough to open the node's breaker has lost the
/// script: the breaker's probe is a sync that meets `NOSCRIPT`, and the script must be loaded
/// within that probe, or the breaker opens again at every probe and the approximate limits
/// stay on `on_error` for good.
#[tokio::test]
async fn syncs_resume_after_a_restart_that_lost_the_script_while_the_breaker_was_open() {
    let mut server = RedisServer::start();
    let config = RedisConfig {
        cluster: false,
        urls: vec![server.url()],
        timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(200),
        key_prefix: "restart:".to_string(),
        ca_file: None,
    };
    let store = RedisStore::new(config, 1);
    let entries = [entry(
        Algorithm::FixedWindow,
        100,
        want(window_of(START), 0, 0),
    )];
    sync(&store, "a", &entries, START).await;

    server.kill();
    let breaker_opened = support::eventually_async(Duration::from_secs(10), async || {
        let failed = store
            .sync_leases("a", LIVE_FOR, &entries, Some(START))
            .await;
        matches!(failed, Err(StoreError::BreakerOpen { .. }))
    })
    .await;
    assert!(breaker_opened, "the breaker opens while redis is gone");

    server.restart();
    let resumed = support::eventually_async(Duration::from_secs(10), async || {
        let synced = store.sync_leases("a", LIVE_FOR, &entries, Some(START));
        synced.await.is_ok()
    })
    .await;
    assert!(
        resumed,
        "syncs resume once redis is back, loading the script it lost"
    );
}
