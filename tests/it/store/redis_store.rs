//! The Redis store against the Rust algorithms: the Lua scripts, called with an explicit `now`
//! on a real redis-server, must give the memory store's answers on the same inputs.

use crate::support;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use ratelimit_proxy::testing::MemoryStore;
use ratelimit_proxy::testing::{Algorithm, Rate, WindowCheck};
use ratelimit_proxy::testing::{RedisConfig, RedisStore};
use ratelimit_proxy::testing::{Small, WindowRequest};
use support::redis_server::RedisServer;

/// A realistic Unix time in µs, as Redis TIME gives it.
pub(super) const START_US: u64 = 1_764_000_000_000_000;

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::SlidingWindow,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
];

/// Limits that divide a second into whole microseconds, so both sides refill alike (the Redis
/// store counts in µs; see docs/design/redis.md, "Microseconds").
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

/// Each run's limit names: shrinking replays a case, so each run gets keys of its own.
fn limit_names(run: u64, case: &Case) -> Vec<String> {
    case.windows
        .iter()
        .map(|w| format!("run{run}-limit{}", w.group))
        .collect()
}

/// The Rust algorithms' answers (`expected`) against the Lua scripts', window by window.
pub(super) fn same_answers(
    expected: &[WindowCheck],
    actual: &[WindowCheck],
    requests: &[WindowRequest],
    context: &str,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(expected.len(), actual.len());
    for (i, (m, r)) in expected.iter().zip(actual).enumerate() {
        prop_assert!(
            same_answer(m, r),
            "{context}, window {i} {:?} {:?}: rust {m:?}, lua {r:?}",
            requests[i].algorithm,
            requests[i].rate
        );
    }
    Ok(())
}

/// A redis-server of its own, an event loop, a store on the server with keys under `prefix`,
/// and a runner of `cases` proptest cases.
fn store_and_runner(
    prefix: &str,
    cases: u32,
) -> (RedisServer, tokio::runtime::Runtime, RedisStore, TestRunner) {
    let server = RedisServer::start();
    let store = RedisStore::new(store_config(&server, prefix), 1);
    let runner = TestRunner::new(ProptestConfig {
        cases,
        ..ProptestConfig::default()
    });
    (server, support::event_loop(), store, runner)
}

#[test]
fn lua_scripts_answer_as_the_rust_algorithms_on_random_sequences() {
    let (_server, runtime, store, mut runner) = store_and_runner("diff:", 200);
    let runs = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&case_strategy(), |case| {
            let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let memory = MemoryStore::new(1 << 16);
            let names = limit_names(run, &case);
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
                let step = format!("step {step} (t+{advance}µs, cost {cost})");
                same_answers(&expected, &actual, &requests, &step)?;
            }
            Ok(())
        })
        .unwrap();
}

/// Requests made together on one worker go to Redis as one script call (see `script::Batch`),
/// checked in the order they were made, each seeing what the ones before it committed: each
/// answer is the one the Rust algorithms give when the same requests come one after another,
/// whether they share identities (a hot key, read and written once) or not.
#[test]
fn merged_calls_answer_as_the_same_calls_made_one_after_another() {
    let (server, runtime, store, mut runner) = store_and_runner("merged:", 40);
    let runs = std::sync::atomic::AtomicU64::new(0);
    // Each request: the case's windows for one of three identities, at a cost of 1 to 3.
    let requests_strategy = prop::collection::vec((0..3u128, 1..=3u64), 1..40);
    let rounds = prop::collection::vec((0..3_000_000u64, requests_strategy), 1..4);
    runner
        .run(&(case_strategy(), rounds), |(case, rounds)| {
            let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let memory = MemoryStore::new(1 << 16);
            let names = limit_names(run, &case);
            let limits: Vec<&str> = names.iter().map(String::as_str).collect();
            let evalsha_before = server.calls("evalsha");
            let mut now_us = START_US;
            let mut made = 0;
            let round_count = rounds.len();
            for (advance, made_together) in rounds {
                now_us += advance;
                let now_ns = now_us * 1000;
                let all: Vec<Vec<WindowRequest>> = made_together
                    .iter()
                    .map(|&(who, cost)| {
                        case.windows
                            .iter()
                            .map(|w| WindowRequest {
                                cost,
                                identity: w.identity ^ who << 100,
                                limit_identity: w.limit_identity ^ who << 100,
                                ..w.clone()
                            })
                            .collect()
                    })
                    .collect();
                let calls = all
                    .iter()
                    .map(|requests| store.check_all(requests, &limits, Some(now_ns)));
                let outcomes = runtime.block_on(futures_util::future::join_all(calls));
                made += all.len();
                for (n, (requests, outcome)) in all.iter().zip(outcomes).enumerate() {
                    prop_assert!(outcome.error.is_none(), "store error: {:?}", outcome.error);
                    let expected = memory.check_all(requests, now_ns);
                    let actual: Small<WindowCheck> = outcome.checks.into_iter().flatten().collect();
                    same_answers(&expected, &actual, requests, &format!("request {n}"))?;
                }
            }
            // Requests made together went out together: fewer calls than requests, unless
            // no round made more than one.
            let evalsha = server.calls("evalsha") - evalsha_before;
            prop_assert!(
                evalsha < made as u64 || made == round_count,
                "{evalsha} script calls for {made} requests in {round_count} rounds"
            );
            Ok(())
        })
        .unwrap();
}

/// The one window of a limit of `limit` per `per_s` seconds for `identity`, at a cost of 1.
fn one_window(identity: u128, algorithm: Algorithm, limit: u64, per_s: u64) -> WindowRequest {
    WindowRequest {
        identity,
        limit_identity: identity,
        algorithm,
        rate: Rate {
            limit,
            per: Duration::from_secs(per_s),
            burst: limit,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group: 0,
        window: 0,
        shadow: false,
    }
}

/// A flushed (or restarted) Redis answers a merged call with NOSCRIPT: the script is sent once
/// and each of its requests retries once behind it, the retries merged and still exact.
#[test]
fn after_a_script_flush_merged_requests_load_the_script_and_stay_exact() {
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let store = RedisStore::new(store_config(&server, "flush:"), 1);
    let requests = [one_window(7, Algorithm::TokenBucket, 5, 3600)];
    let limits = ["flush"];
    let allowed = |outcome: &ratelimit_proxy::testing::Outcome| {
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        outcome
            .checks
            .iter()
            .all(|check| matches!(check, Some(WindowCheck::Allow { .. })))
    };
    assert!(allowed(
        &runtime.block_on(store.check_all(&requests, &limits, None))
    ));
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    let (evalsha_before, loads_before) = (server.calls("evalsha"), server.calls("script|load"));
    let calls = (0..8).map(|_| store.check_all(&requests, &limits, None));
    let outcomes = runtime.block_on(futures_util::future::join_all(calls));
    let admitted = outcomes.iter().filter(|outcome| allowed(outcome)).count();
    assert_eq!(admitted, 4, "5 a limit, one taken before the flush");
    assert_eq!(
        server.calls("evalsha") - evalsha_before,
        2,
        "the merged call refused, then its retries merged again"
    );
    assert_eq!(
        server.calls("script|load") - loads_before,
        1,
        "the script sent once"
    );
}

/// A call without windows is answered at once and sends nothing: merged with another request
/// it would make the script refuse the whole call.
#[test]
fn a_call_without_windows_is_answered_at_once_beside_a_real_one() {
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let store = RedisStore::new(store_config(&server, "empty:"), 1);
    let requests = [one_window(9, Algorithm::Gcra, 5, 1)];
    let (empty, real) = runtime.block_on(async {
        tokio::join!(
            store.check_all(&[], &[], None),
            store.check_all(&requests, &["empty"], None)
        )
    });
    assert!(
        empty.error.is_none() && empty.checks.is_empty(),
        "{:?}",
        empty.error
    );
    assert!(real.error.is_none(), "{:?}", real.error);
    assert!(matches!(real.checks[..], [Some(WindowCheck::Allow { .. })]));
}

/// The windows of one limit identity share a key that lives as long as its longest window,
/// so each window's state carries its own expiry: a sliding window's counts, kept 128 windows
/// later (when its window number mod 2^7 comes round again), would be read as current.
#[test]
fn a_window_state_expires_inside_a_key_kept_for_a_longer_window() {
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let store = RedisStore::new(store_config(&server, "expiry:"), 1);
    let window = |window: usize, limit: u64, per_s: u64| WindowRequest {
        identity: 40 + window as u128,
        window,
        ..one_window(40, Algorithm::SlidingWindow, limit, per_s)
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

/// The script can be called by anything that reaches Redis: parameters of the wrong size, an
/// algorithm it does not know, window counts that do not add up are refused with a message
/// that says which, and write nothing, not even for the well-formed requests of the call.
#[test]
fn malformed_script_calls_are_refused_with_what_was_wrong() {
    let server = RedisServer::start();
    let mut connection = server.connection();
    let script = redis::Script::new(ratelimit_proxy::testing::SCRIPT);
    let doubles =
        |numbers: &[f64]| -> Vec<u8> { numbers.iter().flat_map(|n| n.to_le_bytes()).collect() };
    // Algorithm, group, shadow, limit, per, interval, burst, cost, max_delay, key, slot.
    let window = |algorithm: f64, key: f64, slot: f64| -> Vec<u8> {
        doubles(&[
            algorithm, 0.0, 0.0, 10.0, 1e6, 1e5, 10.0, 1.0, 0.0, key, slot,
        ])
    };
    let well_formed = window(1.0, 1.0, 0.0);
    let mut short = well_formed.clone();
    short.pop();
    // A first request well formed, then the one given.
    let after_a_good_one = |second: Vec<u8>| [well_formed.clone(), second].concat();
    let two = doubles(&[1.0, 1.0]);
    let mut refusal = |parameters: &[u8], counts: &[u8]| -> String {
        let error = script
            .key("bad:{x}")
            .arg("")
            .arg(parameters)
            .arg(counts)
            .invoke::<Vec<u8>>(&mut connection)
            .expect_err("a malformed call was answered");
        error.to_string()
    };
    for (parameters, counts, expected) in [
        (
            short,
            doubles(&[1.0]),
            "window parameters of 87 bytes, not a multiple of 88",
        ),
        (
            after_a_good_one(window(9.0, 1.0, 0.0)),
            two.clone(),
            "unknown algorithm 9 in window 2",
        ),
        (
            after_a_good_one(window(1.0, 2.0, 0.0)),
            two.clone(),
            "window 2 names key 2 of 1",
        ),
        (
            window(1.0, 0.0, 0.0),
            doubles(&[1.0]),
            "window 1 names key 0 of 1",
        ),
        (
            after_a_good_one(window(1.0, 1.0, -1.0)),
            two.clone(),
            "window 2 has slot -1",
        ),
        (
            window(1.0, 1.0, 256.0),
            doubles(&[1.0]),
            "window 1 has slot 256",
        ),
        (
            window(1.0, 1.0, 0.5),
            doubles(&[1.0]),
            "window 1 has slot 0.5",
        ),
        (
            well_formed.clone(),
            vec![1],
            "window counts of 1 bytes, not a multiple of 8",
        ),
        (
            well_formed.clone(),
            Vec::new(),
            "the requests have 0 windows, the parameters 1",
        ),
        (
            after_a_good_one(well_formed.clone()),
            doubles(&[1.0, 0.0, 1.0]),
            "request 2 has 0 windows",
        ),
        (
            after_a_good_one(well_formed.clone()),
            doubles(&[1.5, 0.5]),
            "request 1 has 1.5 windows",
        ),
        (
            after_a_good_one(well_formed.clone()),
            doubles(&[1.0, 2.0]),
            "the requests have 3 windows, the parameters 2",
        ),
    ] {
        let refused = refusal(&parameters, &counts);
        assert!(refused.contains(expected), "{refused}");
    }
    let written: bool = redis::cmd("EXISTS")
        .arg("bad:{x}")
        .query(&mut server.connection())
        .unwrap();
    assert!(!written);
    // The same calls well formed are answered: 4 doubles a window.
    let answer: Vec<u8> = script
        .key("bad:{x}")
        .arg("")
        .arg(after_a_good_one(well_formed.clone()))
        .arg(two)
        .invoke(&mut server.connection())
        .unwrap();
    assert_eq!(answer.len(), 64);
}

pub(super) fn store_config(server: &RedisServer, key_prefix: &str) -> RedisConfig {
    RedisConfig {
        cluster: false,
        urls: vec![server.url()],
        timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
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
                ratelimit_proxy::testing::worker::set(index);
                let runtime = support::event_loop();
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

    let gone = support::eventually_blocking(Duration::from_secs(5), || clients() == 0);
    assert!(gone, "the workers' connections closed");
    let store = RedisStore::new(store_config(&server, "w:"), 1);
    let runtime = support::event_loop();
    for index in [0, 1] {
        ratelimit_proxy::testing::worker::set(index);
        let errors = runtime.block_on(three_calls(&store));
        assert!(errors.is_empty(), "{errors:?}");
    }
    ratelimit_proxy::testing::worker::set(0);
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

/// A request may go away at any await point of its store call. Whichever poll the breaker's
/// probe is dropped after (Redis stopped, so it is still waiting), the next call may probe:
/// once Redis answers again, the first call is decided by Redis, not refused by a breaker
/// waiting for a probe that will never report.
#[test]
fn a_probe_dropped_after_any_poll_leaves_the_breaker_to_the_next_call() {
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let store = RedisStore::new(
        RedisConfig {
            timeout: Duration::from_millis(200),
            ..store_config(&server, "dropped:")
        },
        1,
    );
    let request = [one_window(1, Algorithm::Gcra, 1000, 60)];
    let check = || store.check_all(&request, &["limit"], None);
    runtime.block_on(async {
        assert!(check().await.error.is_none());
        server.stop();
        // Timeouts spanning more than 100 ms open the breaker.
        for _ in 0..3 {
            let waves = futures_util::future::join_all((0..2).map(|_| check())).await;
            assert!(waves.iter().all(|outcome| outcome.error.is_some()));
        }
        assert!(store.breakers()[0].1, "open");
        // A second later the breaker lets a probe through: until then a call fails at once;
        // the first still waiting after a poll is a probe, dropped after that poll.
        let probing = support::eventually_async(Duration::from_secs(5), async || {
            let mut probe = Box::pin(check());
            match futures_util::poll!(probe.as_mut()) {
                std::task::Poll::Ready(outcome) => {
                    assert!(outcome.error.is_some(), "refused by the open breaker");
                    false
                }
                std::task::Poll::Pending => true,
            }
        })
        .await;
        assert!(probing, "the breaker let a probe through");
        for polls in 1..=4 {
            let mut probe = Box::pin(check());
            for _ in 0..polls {
                let polled = futures_util::poll!(probe.as_mut());
                assert!(polled.is_pending(), "still waiting after {polls} polls");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            drop(probe);
        }
        server.resume();
        let outcome = check().await;
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        assert!(!store.breakers()[0].1, "closed");
    });
}
