//! The Redis store against the Rust algorithms: the Lua scripts, called with an explicit `now`
//! on a real redis-server, must give the memory store's answers on the same inputs.

mod common;

use std::time::Duration;

use common::redis_server::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use ratelimit_proxy::limit::{Algorithm, Rate, WindowCheck};
use ratelimit_proxy::store::memory::MemoryStore;
use ratelimit_proxy::store::redis::{RedisConfig, RedisStore};
use ratelimit_proxy::store::{Small, WindowRequest};

/// A realistic Unix time in µs, as Redis TIME gives it.
const START_US: u64 = 1_764_000_000_000_000;

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::SlidingWindow,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
];

/// Limits that divide a second into whole microseconds, so both sides refill alike (the Redis
/// store counts in µs; see README).
const LIMITS: [u64; 9] = [1, 2, 4, 5, 8, 10, 16, 20, 25];
const PERIODS_S: [u64; 4] = [1, 2, 10, 60];

#[derive(Debug, Clone)]
struct Case {
    windows: Vec<WindowRequest>,
    /// (µs since the previous step, cost)
    steps: Vec<(u64, u64)>,
}

fn window_strategy() -> impl Strategy<Value = (usize, usize, usize, u64, bool)> {
    (
        0..5usize,
        0..LIMITS.len(),
        0..PERIODS_S.len(),
        0..3u64,
        any::<bool>(),
    )
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let windows = prop::collection::vec(window_strategy(), 1..=3);
    let steps = prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0..50_000u64, 0..3_000_000u64],
            1..=3u64,
        ),
        1..40,
    );
    (windows, steps, any::<u128>(), any::<bool>()).prop_map(|(windows, steps, seed, shadow)| {
        // The first two windows form one limit (same algorithm), a third is another limit.
        let first_algorithm = ALGORITHMS[windows[0].0];
        let windows = windows
            .iter()
            .enumerate()
            .map(|(i, &(algorithm, limit, per, burst_extra, delay))| {
                let group = usize::from(i == 2);
                let algorithm = if group == 0 {
                    first_algorithm
                } else {
                    ALGORITHMS[algorithm]
                };
                let limit = LIMITS[limit];
                let limit_identity = seed.wrapping_add(group as u128);
                WindowRequest {
                    identity: limit_identity ^ (i as u128 + 1) << 64,
                    limit_identity,
                    algorithm,
                    rate: Rate {
                        limit,
                        per: Duration::from_secs(PERIODS_S[per]),
                        burst: limit + burst_extra,
                    },
                    cost: 1,
                    max_delay: if delay && algorithm.is_bucket() {
                        Duration::from_millis(700)
                    } else {
                        Duration::ZERO
                    },
                    group,
                    window: i,
                    // The second limit may be a shadow one (charged only when all pass).
                    shadow: shadow && group == 1,
                }
            })
            .collect();
        Case { windows, steps }
    })
}

fn same_answer(memory: &WindowCheck, redis: &WindowCheck) -> bool {
    // Waits may differ below a microsecond (integer division in ns vs µs).
    let close = |a: Duration, b: Duration| a.abs_diff(b) < Duration::from_micros(1);
    match (memory, redis) {
        (
            WindowCheck::Allow {
                remaining: r1,
                reset: t1,
                delay: d1,
                ..
            },
            WindowCheck::Allow {
                remaining: r2,
                reset: t2,
                delay: d2,
                ..
            },
        ) => r1 == r2 && t1 == t2 && close(*d1, *d2),
        (
            WindowCheck::Deny {
                retry_after: w1,
                remaining: r1,
                reset: t1,
            },
            WindowCheck::Deny {
                retry_after: w2,
                remaining: r2,
                reset: t2,
            },
        ) => r1 == r2 && t1 == t2 && close(*w1, *w2),
        _ => false,
    }
}

#[test]
fn lua_scripts_answer_as_the_rust_algorithms_on_random_sequences() {
    let server = RedisServer::start();
    let runtime = common::event_loop();
    let store = RedisStore::new(store_config(&server, "diff:"), 1);
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    });
    // Shrinking replays a case: each run gets keys of its own.
    let runs = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&case_strategy(), |case| {
            let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let memory = MemoryStore::new(1 << 16);
            let names: Vec<String> = case
                .windows
                .iter()
                .map(|w| format!("run{run}-limit{}", w.group))
                .collect();
            let limits: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut now_us = START_US;
            for (step, &(advance, cost)) in case.steps.iter().enumerate() {
                now_us += advance;
                let now_ns = now_us * 1000;
                let requests: Vec<WindowRequest> = case
                    .windows
                    .iter()
                    .map(|w| WindowRequest { cost, ..w.clone() })
                    .collect();
                let expected = memory.check_all(&requests, now_ns);
                let outcome = runtime.block_on(store.check_all(&requests, &limits, Some(now_ns)));
                prop_assert!(outcome.error.is_none(), "store error: {:?}", outcome.error);
                let actual: Small<WindowCheck> = outcome.checks.into_iter().flatten().collect();
                for (i, (m, r)) in expected.iter().zip(&actual).enumerate() {
                    prop_assert!(
                        same_answer(m, r),
                        "step {step} (t+{advance}µs, cost {cost}), window {i} {:?} {:?}: rust {m:?}, lua {r:?}",
                        requests[i].algorithm,
                        requests[i].rate
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

/// The windows of one limit identity share a key that lives as long as its longest window,
/// so each window's state carries its own expiry: a sliding window's counts, kept 128 windows
/// later (when its window number mod 2^7 comes round again), would be read as current.
#[test]
fn a_window_state_expires_inside_a_key_kept_for_a_longer_window() {
    let server = RedisServer::start();
    let runtime = common::event_loop();
    let store = RedisStore::new(store_config(&server, "expiry:"), 1);
    let window = |window: usize, limit: u64, per_s: u64| WindowRequest {
        identity: 40 + window as u128,
        limit_identity: 40,
        algorithm: Algorithm::SlidingWindow,
        rate: Rate {
            limit,
            per: Duration::from_secs(per_s),
            burst: limit,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group: 0,
        window,
        shadow: false,
    };
    let requests = [window(0, 2, 1), window(1, 1000, 3600)];
    let limits = ["pair", "pair"];
    let allowed = |now_us: u64| -> bool {
        let outcome = runtime.block_on(store.check_all(&requests, &limits, Some(now_us * 1000)));
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        outcome
            .checks
            .iter()
            .all(|check| matches!(check, Some(WindowCheck::Allow { .. })))
    };
    // Aligned to a second, so 128 seconds on is the same place in its window.
    let start = START_US - START_US % 1_000_000;
    assert!(allowed(start) && allowed(start + 1));
    assert!(!allowed(start + 2), "the one-second window is full");
    assert!(
        allowed(start + 128_000_000),
        "a one-second window's counts from 128 s ago were read as current"
    );
}

/// The script can be called by anything that reaches Redis: parameters of the wrong size or an
/// algorithm it does not know are refused with a message that says which, and write nothing.
#[test]
fn malformed_script_calls_are_refused_with_what_was_wrong() {
    let server = RedisServer::start();
    let mut connection = server.connection();
    let script = redis::Script::new(ratelimit_proxy::store::script::SCRIPT);
    // Algorithm, group, shadow, limit, per, interval, burst, cost, max_delay, key, slot.
    let window = |algorithm: f64, key: f64, slot: f64| -> Vec<u8> {
        [
            algorithm, 0.0, 0.0, 10.0, 1e6, 1e5, 10.0, 1.0, 0.0, key, slot,
        ]
        .iter()
        .flat_map(|n| n.to_le_bytes())
        .collect()
    };
    let mut short = window(1.0, 1.0, 0.0);
    short.pop();
    let mut refusal = |parameters: &[u8]| -> String {
        let error = script
            .key("bad:{x}")
            .arg("")
            .arg(parameters)
            .invoke::<Vec<u8>>(&mut connection)
            .expect_err("a malformed call was answered");
        error.to_string()
    };
    for (parameters, expected) in [
        (short, "window parameters of 87 bytes, not a multiple of 88"),
        (window(9.0, 1.0, 0.0), "unknown algorithm 9 in window 1"),
        (window(1.0, 2.0, 0.0), "window 1 names key 2 of 1"),
        (window(1.0, 0.0, 0.0), "window 1 names key 0 of 1"),
        (window(1.0, 1.0, -1.0), "window 1 has slot -1"),
        (window(1.0, 1.0, 256.0), "window 1 has slot 256"),
        (window(1.0, 1.0, 0.5), "window 1 has slot 0.5"),
    ] {
        let refused = refusal(&parameters);
        assert!(refused.contains(expected), "{refused}");
    }
    let written: bool = redis::cmd("EXISTS")
        .arg("bad:{x}")
        .query(&mut server.connection())
        .unwrap();
    assert!(!written);
    // The same call well formed is answered: 4 doubles.
    let answer: Vec<u8> = script
        .key("bad:{x}")
        .arg("")
        .arg(window(1.0, 1.0, 0.0))
        .invoke(&mut server.connection())
        .unwrap();
    assert_eq!(answer.len(), 32);
}

fn store_config(server: &RedisServer, key_prefix: &str) -> RedisConfig {
    RedisConfig {
        cluster: false,
        urls: vec![server.url()],
        timeout: Duration::from_secs(5),
        key_prefix: key_prefix.to_string(),
        ca_file: None,
    }
}

/// Each serving worker calls Redis on a connection of its own, driven by its own event loop:
/// two workers, two connections. With one worker, whatever index a thread has, one.
#[test]
fn each_worker_calls_redis_on_its_own_connection() {
    let server = RedisServer::start();
    let clients = || -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut server.connection())
            .unwrap();
        list.lines().count() - 1 // the connection asking
    };
    let store = std::sync::Arc::new(RedisStore::new(store_config(&server, "w:"), 2));
    // Both worker threads keep their event loops (a connection's driver lives on the loop
    // that opened it) until the connections are counted.
    let called = std::sync::Arc::new(std::sync::Barrier::new(3));
    let threads: Vec<_> = (0..2)
        .map(|index| {
            let (store, called) = (store.clone(), called.clone());
            std::thread::spawn(move || {
                ratelimit_proxy::worker::set(index);
                let runtime = common::event_loop();
                // Reported after the barriers: a panic before them would leave the others
                // waiting.
                let errors = runtime.block_on(three_calls(&store));
                called.wait(); // both have called
                called.wait(); // counted
                errors
            })
        })
        .collect();
    called.wait();
    let connected = clients();
    called.wait();
    for thread in threads {
        let errors = thread.join().unwrap();
        assert!(errors.is_empty(), "{errors:?}");
    }
    assert_eq!(connected, 2, "two workers");

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while clients() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let store = RedisStore::new(store_config(&server, "w:"), 1);
    let runtime = common::event_loop();
    for index in [0, 1] {
        ratelimit_proxy::worker::set(index);
        let errors = runtime.block_on(three_calls(&store));
        assert!(errors.is_empty(), "{errors:?}");
    }
    ratelimit_proxy::worker::set(0);
    assert_eq!(clients(), 1, "one worker");
}

/// Three checks of one window; the errors they met.
async fn three_calls(store: &RedisStore) -> Vec<String> {
    let request = WindowRequest {
        identity: 7,
        limit_identity: 7,
        algorithm: Algorithm::Gcra,
        rate: Rate {
            limit: 1000,
            per: Duration::from_secs(1),
            burst: 1000,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group: 0,
        window: 0,
        shadow: false,
    };
    let mut errors = Vec::new();
    for _ in 0..3 {
        let outcome = store
            .check_all(std::slice::from_ref(&request), &["l"], None)
            .await;
        errors.extend(outcome.error.map(|error| error.to_string()));
    }
    errors
}
