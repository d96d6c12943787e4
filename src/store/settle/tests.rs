use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::limit::{Algorithm, Rate};
use crate::store::error::ProtocolError;

fn window(identity: u128, algorithm: Algorithm, window: usize) -> WindowRequest {
    WindowRequest {
        identity: identity ^ (window as u128) << 64,
        limit_identity: identity,
        algorithm,
        rate: Rate {
            limit: 10,
            per: Duration::from_secs(60),
            burst: 10,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group: 0,
        window,
        shadow: false,
    }
}

fn doubles(numbers: &[f64]) -> Reply {
    Reply::Bulk(Bytes::from(
        numbers
            .iter()
            .flat_map(|n| n.to_le_bytes())
            .collect::<Vec<u8>>(),
    ))
}

#[test]
fn a_reservation_is_rounded_to_whole_microseconds_the_way_that_widens_it() {
    let reserved = ElapsedReservation {
        since_sent: Duration::from_nanos(1_500),
        since_reply: Duration::from_nanos(1_500),
        reset: Duration::from_nanos(2_999),
    };
    assert_eq!(reserved.numbers(Duration::ZERO), [2.0, 1.0, 2.0]);
    let late = reserved.numbers(Duration::from_micros(10));
    assert_eq!(late, [12.0, 11.0, 2.0], "both moved back by a later send");
    let huge = ElapsedReservation {
        since_sent: Duration::MAX,
        since_reply: Duration::MAX,
        reset: Duration::MAX,
    };
    let most = (script::EXACT_LIMIT - 1) as f64;
    assert_eq!(
        huge.numbers(Duration::MAX),
        [most; 3],
        "saturated, never a panic"
    );
}

#[test]
fn a_reply_before_its_send_is_read_as_at_the_send() {
    let sent = Instant::now();
    let (replied, now) = (
        sent + Duration::from_millis(3),
        sent + Duration::from_millis(10),
    );
    let reserved = ElapsedReservation::between(sent, replied, Duration::from_secs(1), now);
    assert_eq!(reserved.since_sent, Duration::from_millis(10));
    assert_eq!(reserved.since_reply, Duration::from_millis(7));
    let backwards = ElapsedReservation::between(replied, sent, Duration::ZERO, now);
    assert_eq!(backwards.since_reply, backwards.since_sent);
}

#[test]
fn the_call_names_each_key_once_and_carries_the_adjustment() {
    let requests = [
        window(7, Algorithm::TokenBucket, 0),
        window(7, Algorithm::TokenBucket, 1),
        window(7, Algorithm::SlidingLog, 2),
    ];
    let reserved = [ElapsedReservation {
        since_sent: Duration::from_millis(2),
        since_reply: Duration::from_millis(1),
        reset: Duration::from_secs(6),
    }; 3];
    let call = SettleCall {
        key_prefix: "rl:",
        requests: &requests,
        limits: &["tokens"; 3],
        reserved: &reserved,
        adjustment: Adjustment::Refund(5),
        wait: Duration::from_secs(1),
        asked: Instant::now(),
        now: Some(3_000_000),
    };
    let mut out = Vec::new();
    call.write(&mut out);
    let text = String::from_utf8_lossy(&out);
    // EVALSHA, sha, numkeys, two keys (the identity's, the log's), then six arguments.
    assert!(text.starts_with("*11\r\n$7\r\nEVALSHA\r\n"), "{text}");
    assert!(text.contains("\r\n$1\r\n2\r\n"), "two keys: {text}");
    assert!(text.contains("\r\n$4\r\n3000\r\n$6\r\nrefund\r\n$1\r\n5\r\n$7\r\n1000000\r\n"));
    assert_eq!(
        call.first_key(),
        script::keys_of(&ScriptCall {
            sha: "",
            key_prefix: "rl:",
            requests: &requests,
            limits: &["tokens"; 3],
            now: None,
        })[0]
    );
}

#[test]
fn only_a_flag_per_window_is_a_reply() {
    assert_eq!(parse_reply(doubles(&[1.0, 0.0]), 2), Ok(()));
    assert!(matches!(
        parse_reply(doubles(&[1.0]), 2),
        Err(StoreError::Protocol(ProtocolError::Length { bytes: 8, .. }))
    ));
    assert!(matches!(
        parse_reply(doubles(&[2.0]), 1),
        Err(StoreError::Protocol(ProtocolError::NotACount(_)))
    ));
    assert!(matches!(
        parse_reply(doubles(&[f64::NAN]), 1),
        Err(StoreError::Protocol(ProtocolError::NotACount(_)))
    ));
    assert!(matches!(
        parse_reply(Reply::Nil, 1),
        Err(StoreError::Protocol(ProtocolError::Unexpected { .. }))
    ));
}
