use super::*;

#[test]
fn identities_take_22_url_safe_characters_and_keep_all_128_bits() {
    let text = |identity: u128| {
        let mut key = Vec::new();
        push_identity(&mut key, identity);
        String::from_utf8(key).unwrap()
    };
    assert_eq!(text(0), "A".repeat(22));
    assert_eq!(text(u128::MAX), format!("{}w", "_".repeat(21)));
    let mut seen = std::collections::HashSet::new();
    for bit in 0..128 {
        let key = text(1 << bit);
        assert_eq!(key.len(), 22);
        assert!(!key.contains(['{', '}']));
        assert!(seen.insert(key), "bit {bit} is lost");
    }
}

#[test]
fn a_reply_gives_four_numbers_a_window_and_anything_else_is_a_protocol_error() {
    let reply =
        |numbers: &[f64]| -> Vec<u8> { numbers.iter().flat_map(|n| n.to_le_bytes()).collect() };
    let checks = parse_reply(&reply(&[1.0, 4.0, 2e6, 0.0, 0.0, 0.0, 5e5, 750000.9]), 2);
    let checks = checks.unwrap();
    assert!(matches!(
        checks[0],
        WindowCheck::Allow { remaining: 4, reset, .. } if reset == Duration::from_secs(2)
    ));
    assert!(matches!(
        checks[1],
        WindowCheck::Deny { retry_after, remaining: 0, .. }
            if retry_after == Duration::from_millis(750)
    ));
    assert!(parse_reply(b"", 0).unwrap().is_empty());
    for (reply, windows) in [
        (reply(&[1.0, 4.0, 2e6]), 1),
        (reply(&[1.0, 4.0, 2e6, 0.0]), 2),
        (reply(&[1.0, -4.0, 2e6, 0.0]), 1),
        (reply(&[1.0, 4.0, f64::NAN, 0.0]), 1),
        (reply(&[1.0, 4.0, 1e300, 0.0]), 1),
        (b"1 4 2000000 0".to_vec(), 1),
    ] {
        let error = parse_reply(&reply, windows).expect_err("malformed reply accepted");
        assert!(matches!(error, StoreError::Protocol(_)), "{error:?}");
    }
}

proptest::proptest! {
    #[test]
    fn a_count_is_the_number_truncated_when_that_is_in_range(
        number in proptest::num::f64::ANY,
        small in -3.0f64..3.0,
    ) {
        for number in [number, small, small * EXACT_LIMIT as f64] {
            let truncated = number.trunc();
            let expected = (0.0..EXACT_LIMIT as f64)
                .contains(&truncated)
                .then_some(truncated as u64);
            proptest::prop_assert_eq!(whole_count(number), expected, "{}", number);
        }
    }
}

#[test]
fn counts_at_the_edges_of_the_range() {
    assert_eq!(whole_count(-0.9), Some(0));
    assert_eq!(whole_count(-1.0), None);
    assert_eq!(whole_count(f64::NAN), None);
    assert_eq!(whole_count(EXACT_LIMIT as f64 - 1.0), Some(EXACT_LIMIT - 1));
    assert_eq!(whole_count(EXACT_LIMIT as f64), None);
    assert_eq!(whole_count(750000.9), Some(750000));
}

impl Arguments for Vec<Vec<u8>> {
    fn push(&mut self, argument: &[u8]) {
        Vec::push(self, argument.to_vec());
    }
}

/// A window of `limit_identity`'s limit (whose group is that identity too).
fn window(limit_identity: u128, algorithm: Algorithm, window: usize) -> WindowRequest {
    WindowRequest {
        identity: limit_identity << 8 | window as u128,
        limit_identity,
        algorithm,
        rate: crate::limit::Rate {
            limit: 10,
            per: Duration::from_secs(1),
            burst: 10,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group: limit_identity as usize,
        window,
        shadow: false,
    }
}

/// A request under three limits: "a" of two token bucket windows, "b" of two sliding log
/// windows (a key each), "c" of one.
fn first_request() -> ([WindowRequest; 5], [&'static str; 5]) {
    let (cell, log) = (Algorithm::TokenBucket, Algorithm::SlidingLog);
    let requests = [
        window(0, cell, 0),
        window(0, cell, 1),
        window(1, log, 0),
        window(1, log, 1),
        window(2, cell, 0),
    ];
    (requests, ["a", "a", "b", "b", "c"])
}

/// A second request of the same identity of "a" and a new one of "c".
fn second_request() -> ([WindowRequest; 3], [&'static str; 3]) {
    let cell = Algorithm::TokenBucket;
    let requests = [window(0, cell, 0), window(0, cell, 1), window(3, cell, 0)];
    (requests, ["a", "a", "c"])
}

fn call<'a>(
    sha: &'a str,
    requests: &'a [WindowRequest],
    limits: &'a [&'a str],
    now: Nanos,
) -> ScriptCall<'a> {
    ScriptCall {
        sha,
        key_prefix: "rl:",
        requests,
        limits,
        now: Some(now),
    }
}

#[test]
fn a_batch_takes_calls_of_one_script_and_one_now_up_to_max_windows() {
    let (requests, limits) = first_request();
    let (second, second_limits) = second_request();
    let mut batch = Batch::default();
    let sha = "0".repeat(40);
    let most = vec![window(9, Algorithm::TokenBucket, 0); MAX_WINDOWS];
    let most_limits = vec!["d"; MAX_WINDOWS];
    assert!(
        batch.fits(&call(&sha, &most, &most_limits, 5_000)),
        "an empty batch takes any request"
    );
    batch.add(&call(&sha, &requests, &limits, 5_000));
    assert!(batch.fits(&call(&sha, &second, &second_limits, 5_000)));
    assert!(
        !batch.fits(&call(&sha, &second, &second_limits, 6_000)),
        "one now for the call"
    );
    let other_sha = "1".repeat(40);
    assert!(
        !batch.fits(&call(&other_sha, &second, &second_limits, 5_000)),
        "one script for the call"
    );
    let too_many = &most[..MAX_WINDOWS - 4];
    assert!(
        !batch.fits(&call(
            &sha,
            too_many,
            &most_limits[..MAX_WINDOWS - 4],
            5_000
        )),
        "at most MAX_WINDOWS"
    );
}

#[test]
fn an_identitys_windows_share_a_key_and_requests_merged_share_their_keys() {
    let (requests, limits) = first_request();
    let (second, second_limits) = second_request();
    let mut batch = Batch::default();
    let sha = "0".repeat(40);
    batch.add(&call(&sha, &requests, &limits, 5_000));
    // A key already in the call is named by its index, not sent again.
    batch.add(&call(&sha, &second, &second_limits, 5_000));
    let mut arguments: Vec<Vec<u8>> = Vec::new();
    let expected_arguments = batch.arguments();
    batch.write(&mut arguments);
    assert_eq!(arguments.len(), expected_arguments);
    assert!(batch.is_empty(), "written, the batch starts again");
    let text = |argument: &[u8]| String::from_utf8(argument.to_vec()).unwrap();
    let keys: Vec<String> = arguments[3..8].iter().map(|k| text(k)).collect();
    let identity = |n: u128| {
        let mut text = Vec::new();
        push_identity(&mut text, n);
        String::from_utf8(text).unwrap()
    };
    assert_eq!(text(&arguments[0]), "EVALSHA");
    assert_eq!(text(&arguments[2]), "5");
    assert_eq!(
        keys,
        [
            format!("rl:a:{{{}}}", identity(0)),
            format!("rl:b:{{{}}}:0", identity(1)),
            format!("rl:b:{{{}}}:1", identity(1)),
            format!("rl:c:{{{}}}", identity(2)),
            format!("rl:c:{{{}}}", identity(3)),
        ]
    );
    assert_eq!(text(&arguments[8]), "5", "now in µs");
    // Each window's last two numbers: its key (from 1) and its slot.
    let places: Vec<(f64, f64)> = doubles(&arguments[9])
        .chunks_exact(11)
        .map(|w| (w[9], w[10]))
        .collect();
    assert_eq!(
        places,
        [
            (1.0, 0.0),
            (1.0, 1.0),
            (2.0, 0.0),
            (3.0, 1.0),
            (4.0, 0.0),
            (1.0, 0.0),
            (1.0, 1.0),
            (5.0, 0.0)
        ]
    );
    assert_eq!(
        doubles(&arguments[10]),
        [5.0, 3.0],
        "each request's windows"
    );
}

fn doubles(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|bytes| f64::from_le_bytes(bytes.try_into().unwrap()))
        .collect()
}

#[test]
fn a_window_is_eleven_little_endian_doubles() {
    let request = WindowRequest {
        identity: 1,
        limit_identity: 1,
        algorithm: Algorithm::Gcra,
        rate: crate::limit::Rate {
            limit: 10,
            per: Duration::from_secs(1),
            burst: 20,
        },
        cost: 3,
        max_delay: Duration::from_millis(250),
        group: 7,
        window: 4,
        shadow: true,
    };
    let mut parameters = vec![1];
    push_window_parameters(&mut parameters, &request, 2);
    let numbers: Vec<f64> = parameters[1..]
        .chunks_exact(8)
        .map(|bytes| f64::from_le_bytes(bytes.try_into().unwrap()))
        .collect();
    assert_eq!(parameters[0], 1, "appends to what is there");
    assert_eq!(
        numbers,
        [
            2.0, 7.0, 1.0, 10.0, 1e6, 1e5, 20.0, 3.0, 250_000.0, 2.0, 4.0
        ]
    );
}
