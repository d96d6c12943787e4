//! The settle script can be called by anything that reaches Redis: a malformed call is refused
//! with what was wrong and writes nothing, not even for its well-formed windows. Through the
//! store, a refusal or a reply that is not the script's is a `StoreError`, never a panic; a
//! Redis that lost the script is sent it.

use crate::support;

use std::time::Duration;

use ratelimit_proxy::testing::{Adjustment, ElapsedReservation, RedisConfig, RedisStore};
use ratelimit_proxy::testing::{Algorithm, ProtocolError, SETTLE_SCRIPT, StoreError};
use support::redis_server::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::settle::{RESERVE, store, windows};

fn doubles(numbers: &[f64]) -> Vec<u8> {
    numbers.iter().flat_map(|n| n.to_le_bytes()).collect()
}

/// Algorithm, group, shadow, limit, per, interval, burst, cost, max_delay, key, slot: a
/// fixed window of 10 a second.
fn window(algorithm: f64, per: f64, key: f64, slot: f64) -> Vec<u8> {
    doubles(&[
        algorithm, 0.0, 0.0, 10.0, per, 1e5, 10.0, 1.0, 0.0, key, slot,
    ])
}

/// Since sent, since the reply (µs), reset.
fn reservation(since_sent: f64, since_reply: f64) -> Vec<u8> {
    doubles(&[since_sent, since_reply, 1e6])
}

/// A call's arguments after its key: now, kind, units, wait, windows, reservations.
struct Call {
    kind: &'static str,
    units: &'static str,
    windows: Vec<u8>,
    reservations: Vec<u8>,
}

#[test]
fn malformed_settle_calls_are_refused_with_what_was_wrong_and_write_nothing() {
    let server = RedisServer::start();
    let mut connection = server.connection();
    let script = redis::Script::new(SETTLE_SCRIPT);
    // A well-formed debt first, which would write its key, then the window given.
    let good = window(4.0, 1e6, 1.0, 0.0);
    let after_good = |second: Vec<u8>| [good.clone(), second].concat();
    let two = |second: Vec<u8>| [reservation(10.0, 5.0), second].concat();
    let call = |windows: Vec<u8>, reservations: Vec<u8>| Call {
        kind: "debt",
        units: "3",
        windows,
        reservations,
    };
    let mut short = good.clone();
    short.pop();
    let cases = [
        (
            Call {
                kind: "credit",
                ..call(good.clone(), reservation(1.0, 0.0))
            },
            "adjustment credit, not debt or refund",
        ),
        (
            Call {
                units: "1.5",
                ..call(good.clone(), reservation(1.0, 0.0))
            },
            "whole numbers",
        ),
        (
            Call {
                units: "-1",
                ..call(good.clone(), reservation(1.0, 0.0))
            },
            "whole numbers",
        ),
        (
            call(short, reservation(1.0, 0.0)),
            "window parameters of 87 bytes, not a multiple of 88",
        ),
        (
            call(after_good(good.clone()), reservation(1.0, 0.0)),
            "reservations of 24 bytes for 2 windows",
        ),
        (
            call(
                after_good(window(9.0, 1e6, 1.0, 0.0)),
                two(reservation(1.0, 0.0)),
            ),
            "unknown algorithm 9 in window 2",
        ),
        (
            call(
                after_good(window(4.0, 1e6, 2.0, 0.0)),
                two(reservation(1.0, 0.0)),
            ),
            "window 2 names key 2 of 1",
        ),
        (
            call(
                after_good(window(4.0, 1e6, 1.0, 256.0)),
                two(reservation(1.0, 0.0)),
            ),
            "window 2 has slot 256",
        ),
        (
            call(
                after_good(window(4.0, 1e6, 1.0, 0.5)),
                two(reservation(1.0, 0.0)),
            ),
            "window 2 has slot 0.5",
        ),
        (
            call(
                after_good(window(4.0, 0.0, 1.0, 0.0)),
                two(reservation(1.0, 0.0)),
            ),
            "window 2 has a malformed rate",
        ),
        (
            call(after_good(good.clone()), two(reservation(-1.0, 0.0))),
            "window 2 has a malformed reservation",
        ),
        (
            call(after_good(good.clone()), two(reservation(f64::NAN, 0.0))),
            "window 2 has a malformed reservation",
        ),
        (
            call(after_good(good.clone()), two(reservation(1.0, 2.0))),
            "window 2: its reservation was answered before it was sent",
        ),
    ];
    for (call, expected) in cases {
        let refused = script
            .key("bad:{x}")
            .arg("")
            .arg(call.kind)
            .arg(call.units)
            .arg("1000000")
            .arg(call.windows)
            .arg(call.reservations)
            .invoke::<Vec<u8>>(&mut connection)
            .expect_err("a malformed call was answered")
            .to_string();
        assert!(refused.contains(expected), "{expected}: {refused}");
    }
    let written: bool = redis::cmd("EXISTS")
        .arg("bad:{x}")
        .query(&mut connection)
        .unwrap();
    assert!(!written, "a refused call wrote");
    // Well formed, it is answered (a flag a window) and writes.
    let answer: Vec<u8> = script
        .key("bad:{x}")
        .arg("")
        .arg("debt")
        .arg("3")
        .arg("1000000")
        .arg(good)
        .arg(reservation(1.0, 0.0))
        .invoke(&mut connection)
        .unwrap();
    assert_eq!(answer, 1f64.to_le_bytes());
    let written: bool = redis::cmd("EXISTS")
        .arg("bad:{x}")
        .query(&mut connection)
        .unwrap();
    assert!(written);
}

fn just_reserved() -> ElapsedReservation {
    ElapsedReservation {
        since_sent: Duration::from_millis(2),
        since_reply: Duration::from_millis(1),
        reset: Duration::from_secs(1),
    }
}

/// A window the script refuses (slot 300: no limit has that many windows) is its error line,
/// as a `StoreError`. A key of another type (someone else's) is left by a refund and replaced
/// by a debt, as a check's commit replaces it.
#[test]
fn through_the_store_a_refused_settle_is_a_store_error() {
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let store = store(&server, "refused:");
    let mut requests = windows(5, Algorithm::Gcra, RESERVE)[..1].to_vec();
    requests[0].window = 300;
    let reserved = [just_reserved()];
    let settled = store.settle(&requests, &["l"], &reserved, Adjustment::Debt(1), None);
    match runtime.block_on(settled) {
        Err(StoreError::Server(reply)) => assert!(reply.text().contains("has slot 300"), "{reply}"),
        other => panic!("{other:?}"),
    }
    let mut connection = server.connection();
    for (algorithm, kind) in [(Algorithm::SlidingLog, "zset"), (Algorithm::Gcra, "string")] {
        let name = format!("foreign-{}", algorithm.name());
        let one = windows(6, algorithm, RESERVE)[..1].to_vec();
        let limits = [name.as_str()];
        let settle = |adjustment| {
            let settled = store.settle(&one, &limits, &reserved, adjustment, None);
            runtime.block_on(settled)
        };
        settle(Adjustment::Debt(1)).unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("refused:{name}:*"))
            .query(&mut connection)
            .unwrap();
        let key = keys.first().expect("the debt wrote its key").clone();
        let type_of = |connection: &mut redis::Connection| -> String {
            redis::cmd("TYPE").arg(&key).query(connection).unwrap()
        };
        let _: () = redis::cmd("DEL").arg(&key).query(&mut connection).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg("f")
            .arg("v")
            .query(&mut connection)
            .unwrap();
        settle(Adjustment::Refund(1)).unwrap();
        assert_eq!(
            type_of(&mut connection),
            "hash",
            "{name}: a refund leaves it"
        );
        settle(Adjustment::Debt(2)).unwrap();
        assert_eq!(type_of(&mut connection), kind, "{name}: a debt replaces it");
    }
}

/// A server that answers every command with `answer` (after whatever a command sends).
async fn fake_redis(answer: &'static [u8]) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = vec![0; 1 << 16];
                while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {
                    // The rest of a command arrives at once on loopback.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// Whether an error is the one a reply should give.
type Expected = fn(&StoreError) -> bool;

/// Replies that are not the script's: each a `StoreError`, never a panic.
#[tokio::test]
async fn a_reply_that_is_not_the_scripts_is_a_store_error() {
    let requests = windows(8, Algorithm::TokenBucket, RESERVE);
    let reserved = [just_reserved(); 2];
    let cases: [(&[u8], Expected); 4] = [
        (b"$3\r\nabc\r\n", |e| {
            matches!(e, StoreError::Protocol(ProtocolError::Length { .. }))
        }),
        // Two doubles, 2 and 1: a flag is 0 or 1.
        (b"$16\r\n\0\0\0\0\0\0\0@\0\0\0\0\0\0\xf0?\r\n", |e| {
            matches!(e, StoreError::Protocol(ProtocolError::NotACount(_)))
        }),
        (b":1\r\n", |e| {
            matches!(e, StoreError::Protocol(ProtocolError::Unexpected { .. }))
        }),
        (b"-ERR something else\r\n", |e| {
            matches!(e, StoreError::Server(_))
        }),
    ];
    for (answer, is_expected) in cases {
        let port = fake_redis(answer).await;
        let store = RedisStore::new(
            RedisConfig {
                cluster: false,
                urls: vec![format!("redis://127.0.0.1:{port}")],
                timeout: Duration::from_secs(2),
                connect_timeout: Duration::from_secs(2),
                key_prefix: "fake:".into(),
                ca_file: None,
            },
            1,
        );
        let settled = store.settle(&requests, &["l"; 2], &reserved, Adjustment::Refund(1), None);
        let error = settled.await.expect_err("not the script's reply");
        assert!(
            is_expected(&error),
            "{:?}: {error:?}",
            String::from_utf8_lossy(answer)
        );
    }
}

/// A flushed (or restarted) Redis answers NOSCRIPT: the settle script is sent once and the
/// call asked again, which then settles.
#[test]
fn after_a_script_flush_a_settle_loads_its_script_and_settles() {
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let store = store(&server, "flushed:");
    let one = windows(9, Algorithm::FixedWindow, RESERVE)[..1].to_vec();
    let reserved = [just_reserved()];
    let settle =
        || runtime.block_on(store.settle(&one, &["l"], &reserved, Adjustment::Debt(1), None));
    settle().unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    let loads = server.calls("script|load");
    settle().unwrap();
    assert_eq!(server.calls("script|load") - loads, 1);
}

/// A key whose numbers no script wrote (an expiry a million years off, a state that is not a
/// number) is read as holding no state there: a debt writes a state and a lifetime of its own.
#[test]
fn a_key_of_foreign_numbers_is_read_as_no_state() {
    let server = RedisServer::start();
    let runtime = support::event_loop();
    let store = store(&server, "garbage:");
    let minute = windows(11, Algorithm::Gcra, RESERVE)[..2].to_vec();
    let reserved = [just_reserved(); 2];
    let settle =
        || runtime.block_on(store.settle(&minute, &["g"; 2], &reserved, Adjustment::Debt(1), None));
    settle().unwrap();
    let mut connection = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("garbage:g:*")
        .query(&mut connection)
        .unwrap();
    let foreign = doubles(&[1e300, 5.0, f64::NAN, f64::NAN]);
    let _: () = redis::cmd("SET")
        .arg(&keys[0])
        .arg(foreign)
        .query(&mut connection)
        .unwrap();
    settle().unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&keys[0])
        .query(&mut connection)
        .unwrap();
    // One unit of 100 an hour: 36 s.
    assert!(pttl > 30_000 && pttl <= 36_000, "{pttl} ms");
}
