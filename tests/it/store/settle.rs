//! Settling on a real redis-server against the memory store: a reservation made by the check
//! script, settled by the settle script at an explicit `now`, must leave the windows as
//! `MemoryStore::settle` leaves them (the same answers to the checks after it), for every
//! algorithm, for debts and refunds, where a refund still counts and where it does not. A
//! debt keeps the key as long as the window needs; a refund never makes a window fuller
//! than full.

use crate::support;

use std::time::Duration;

use ratelimit_proxy::testing::{Adjustment, ElapsedReservation, MemoryStore, Reserved};
use ratelimit_proxy::testing::{Algorithm, Rate, RedisConfig, RedisStore, WindowCheck};
use ratelimit_proxy::testing::{Small, WindowRequest};
use support::redis_server::RedisServer;

use super::redis_store::{START_US, same_answers, store_config};

pub(super) const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// What every reservation here reserves.
pub(super) const RESERVE: u64 = 3;
const SECOND_US: u64 = 1_000_000;

/// A limit of 10 per minute and 100 per hour (START_US is on an hour's edge).
pub(super) fn windows(identity: u128, algorithm: Algorithm, cost: u64) -> Vec<WindowRequest> {
    requests(identity, algorithm, &[(10, 60), (100, 3600)], cost)
}

/// One limit's windows of `(limit, per in seconds)` for `identity`, each a request of `cost`.
pub(super) fn requests(
    identity: u128,
    algorithm: Algorithm,
    rates: &[(u64, u64)],
    cost: u64,
) -> Vec<WindowRequest> {
    (rates.iter().enumerate())
        .map(|(window, &(limit, per_s))| WindowRequest {
            identity: identity ^ (window as u128 + 1) << 64,
            limit_identity: identity,
            algorithm,
            rate: Rate {
                limit,
                per: Duration::from_secs(per_s),
                burst: limit,
            },
            cost,
            max_delay: Duration::ZERO,
            group: 0,
            window,
            shadow: false,
        })
        .collect()
}

/// A store whose calls wait at most a second (`RedisConfig::longest_wait`): the widening of
/// a reservation's earliest time.
pub(super) fn store(server: &RedisServer, prefix: &str) -> RedisStore {
    let config = RedisConfig {
        timeout: Duration::from_millis(50),
        ..store_config(server, prefix)
    };
    RedisStore::new(config, 1)
}

/// Both stores, and how each is called at an explicit time.
pub(super) struct Pair {
    pub runtime: tokio::runtime::Runtime,
    pub redis: RedisStore,
    pub memory: MemoryStore,
}

impl Pair {
    /// Checks `requests` in both at `now_us`, requires the same answers, returns Redis'.
    pub fn check(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
        now_us: u64,
    ) -> Small<WindowCheck> {
        let expected = self.memory.check_all(requests, now_us * 1000);
        let outcome =
            (self.runtime).block_on(self.redis.check_all(requests, limits, Some(now_us * 1000)));
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        let actual: Small<WindowCheck> = outcome.checks.into_iter().flatten().collect();
        same_answers(&expected, &actual, requests, &format!("at {now_us}")).unwrap();
        actual
    }

    /// Settles in both at `now_us` a reservation whose check was sent `since_sent_us` and
    /// answered `since_reply_us` before, as the script places it (widened by the store's
    /// longest wait).
    pub fn settle(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
        resets: &[Duration],
        (since_sent_us, since_reply_us): (u64, u64),
        adjustment: Adjustment,
        now_us: u64,
    ) {
        let wait_us = self.redis.config().longest_wait().as_micros() as u64;
        let elapsed: Vec<ElapsedReservation> = (resets.iter())
            .map(|&reset| ElapsedReservation {
                since_sent: Duration::from_micros(since_sent_us),
                since_reply: Duration::from_micros(since_reply_us),
                reset,
            })
            .collect();
        let settled =
            self.redis
                .settle(requests, limits, &elapsed, adjustment, Some(now_us * 1000));
        self.runtime.block_on(settled).unwrap();
        let reserved: Vec<Reserved> = (resets.iter())
            .map(|&reset| Reserved {
                earliest: now_us.saturating_sub(since_sent_us + wait_us) * 1000,
                latest: now_us.saturating_sub(since_reply_us) * 1000,
                reset,
            })
            .collect();
        self.memory
            .settle(requests, &reserved, adjustment, now_us * 1000);
    }
}

pub(super) fn pair(redis: RedisStore) -> Pair {
    Pair {
        runtime: support::event_loop(),
        redis,
        memory: MemoryStore::new(1 << 16),
    }
}

/// What a window had left before a check of cost 1 (a check of cost 0 would commit a sliding
/// log's nothing, which its script does not do).
fn left_before(check: &WindowCheck) -> u64 {
    match check {
        WindowCheck::Allow { remaining, .. } => remaining + 1,
        WindowCheck::Deny { remaining, .. } => *remaining,
    }
}

fn reset(check: &WindowCheck) -> Duration {
    match check {
        WindowCheck::Allow { reset, .. } | WindowCheck::Deny { reset, .. } => *reset,
    }
}

/// One settle: when the reservation is made (µs after START_US), when it is settled (µs
/// after that), how long before the settle its check was sent, and the adjustment.
struct Scenario {
    name: &'static str,
    reserve_at: u64,
    settle_after: u64,
    since_sent: u64,
    adjustment: Adjustment,
    /// What the minute window has left right after, for every algorithm (None: they differ,
    /// the differential alone decides).
    minute_left: Option<u64>,
}

/// Reserves at `reserve_at`, settles, then spends the minute window one by one and checks again half a minute on, each answer the memory
/// store's. Returns what the minute window had left right after the settle.
fn run(pair: &Pair, identity: u128, algorithm: Algorithm, scenario: &Scenario) -> u64 {
    let name = format!("{}-{}", scenario.name, algorithm.name());
    let limits = [name.as_str(); 2];
    let t0 = START_US + scenario.reserve_at;
    let reserved = pair.check(&windows(identity, algorithm, RESERVE), &limits, t0);
    assert!(
        reserved.iter().all(WindowCheck::is_allow),
        "{name}: {reserved:?}"
    );
    let resets: Vec<Duration> = reserved.iter().map(reset).collect();
    let t2 = t0 + scenario.settle_after;
    // The reply came 2 ms after the check was sent.
    let since = (
        scenario.since_sent,
        scenario.since_sent.saturating_sub(2_000),
    );
    let requests = windows(identity, algorithm, RESERVE);
    pair.settle(&requests, &limits, &resets, since, scenario.adjustment, t2);
    let left = left_before(&pair.check(&windows(identity, algorithm, 1), &limits, t2)[0]);
    for n in 1..12 {
        pair.check(&windows(identity, algorithm, 1), &limits, t2 + n);
    }
    pair.check(
        &windows(identity, algorithm, 1),
        &limits,
        t2 + 30 * SECOND_US,
    );
    left
}

const SCENARIOS: [Scenario; 6] = [
    // Settled 1.5 s on; the store's wait (1 s) and 0.5 s before the settle was sent make the
    // reservation's earliest time exactly when it was made.
    Scenario {
        name: "refund",
        reserve_at: 10 * SECOND_US,
        settle_after: 1_500_000,
        since_sent: 500_000,
        adjustment: Adjustment::Refund(2),
        minute_left: Some(9),
    },
    Scenario {
        name: "debt",
        reserve_at: 10 * SECOND_US,
        settle_after: 1_500_000,
        since_sent: 500_000,
        adjustment: Adjustment::Debt(5),
        minute_left: Some(2),
    },
    // Far over the limit: the windows go over (a bucket below empty).
    Scenario {
        name: "over",
        reserve_at: 10 * SECOND_US,
        settle_after: 1_500_000,
        since_sent: 500_000,
        adjustment: Adjustment::Debt(20),
        minute_left: Some(0),
    },
    // More given back than was reserved: never fuller than full, never below zero.
    Scenario {
        name: "overrefund",
        reserve_at: 10 * SECOND_US,
        settle_after: 1_500_000,
        since_sent: 500_000,
        adjustment: Adjustment::Refund(100),
        minute_left: Some(10),
    },
    // 55 s on: the fixed minute has ended and the buckets have refilled (no refund); a
    // sliding window refunds its previous count, a log its entries; the hour still counts.
    Scenario {
        name: "late",
        reserve_at: 10 * SECOND_US,
        settle_after: 55 * SECOND_US,
        since_sent: 54 * SECOND_US,
        adjustment: Adjustment::Refund(2),
        minute_left: None,
    },
    // Made 0.2 s into a minute, settled 1.5 s on with the send 1.5 s before: the earliest it
    // can have been is in the previous minute, so a window cannot tell which one it went
    // into (no refund) while a bucket still holds it (refund).
    Scenario {
        name: "uncertain",
        reserve_at: 60 * SECOND_US + 200_000,
        settle_after: 1_500_000,
        since_sent: 1_500_000,
        adjustment: Adjustment::Refund(2),
        minute_left: None,
    },
];

#[test]
fn settling_in_redis_leaves_the_windows_as_the_memory_store_does() {
    let server = RedisServer::start();
    let pair = pair(store(&server, "settle:"));
    for (s, scenario) in SCENARIOS.iter().enumerate() {
        for (a, &algorithm) in ALGORITHMS.iter().enumerate() {
            let identity = 1000 + (s * ALGORITHMS.len() + a) as u128;
            let left = run(&pair, identity, algorithm, scenario);
            if let Some(expected) = scenario.minute_left {
                let context = format!("{} {}", scenario.name, algorithm.name());
                assert_eq!(left, expected, "{context}");
            }
        }
    }
}

/// The key's time to live (ms) of `limit`'s one identity.
fn pttl_of(server: &RedisServer, pattern: &str) -> i64 {
    let mut connection = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut connection)
        .unwrap();
    assert_eq!(keys.len(), 1, "{pattern}: {keys:?}");
    redis::cmd("PTTL")
        .arg(&keys[0])
        .query(&mut connection)
        .unwrap()
}

/// A debt can make a window need its state longer than any check would (a bucket 136.5 s
/// from full, where a full minute's bucket refills in 60 s): the key lives that long. A
/// window counter keeps its window's own time.
#[test]
fn a_debt_keeps_the_key_as_long_as_its_window_needs() {
    let server = RedisServer::start();
    let pair = pair(store(&server, "ttl:"));
    // Reserved 3 of 10 a minute at 10 s, 20 more charged at 11.5 s (0.5 s before the send).
    let expected_ms = [
        (Algorithm::TokenBucket, 136_500),
        (Algorithm::Gcra, 136_500),
        (Algorithm::FixedWindow, 48_500),
        (Algorithm::SlidingWindow, 108_500),
        (Algorithm::SlidingLog, 60_000),
    ];
    for (n, (algorithm, expected)) in expected_ms.into_iter().enumerate() {
        let name = format!("debt-{}", algorithm.name());
        let limits = [name.as_str()];
        let minute = |cost| windows(n as u128 + 1, algorithm, cost)[..1].to_vec();
        let t0 = START_US + 10 * SECOND_US;
        let resets: Vec<Duration> = pair
            .check(&minute(RESERVE), &limits, t0)
            .iter()
            .map(reset)
            .collect();
        let t2 = t0 + 1_500_000;
        let debt = Adjustment::Debt(20);
        pair.settle(
            &minute(RESERVE),
            &limits,
            &resets,
            (500_000, 498_000),
            debt,
            t2,
        );
        let pttl = pttl_of(&server, &format!("ttl:{name}:*"));
        assert!(
            pttl > expected - 2_000 && pttl <= expected,
            "{name}: {pttl} ms, expected {expected}"
        );
        let next = pair.check(&minute(1), &limits, t2 + 1_000);
        assert!(!next[0].is_allow(), "{name}: in debt, refused: {next:?}");
    }
}

/// A settle that changes one window of a key (the hour's, refunded, where the minute's has
/// ended) keeps the key as long as its longest window: never shorter than the check set it.
#[test]
fn a_key_lives_as_long_as_its_longest_window_after_a_settle() {
    let server = RedisServer::start();
    let pair = pair(store(&server, "longest:"));
    let limits = ["pair"; 2];
    let t0 = START_US + 10 * SECOND_US;
    let requests = windows(7, Algorithm::FixedWindow, RESERVE);
    let resets: Vec<Duration> = pair
        .check(&requests, &limits, t0)
        .iter()
        .map(reset)
        .collect();
    let t2 = t0 + 55 * SECOND_US;
    let since = (54 * SECOND_US, 54 * SECOND_US - 2_000);
    pair.settle(
        &requests,
        &limits,
        &resets,
        since,
        Adjustment::Refund(2),
        t2,
    );
    let pttl = pttl_of(&server, "longest:pair:*");
    // The hour ends 3535 s after the settle.
    assert!(pttl > 3_533_000 && pttl <= 3_535_000, "{pttl} ms");
    let after = pair.check(&windows(7, Algorithm::FixedWindow, 1), &limits, t2 + 1);
    assert_eq!(left_before(&after[1]), 99, "the hour refunded: {after:?}");
    assert_eq!(left_before(&after[0]), 10, "a new minute: {after:?}");
}
