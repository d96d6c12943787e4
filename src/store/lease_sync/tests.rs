use super::*;

fn doubles(numbers: &[f64]) -> Reply {
    Reply::Bulk(
        numbers
            .iter()
            .flat_map(|n| n.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
    )
}

#[test]
fn a_reply_is_the_clock_the_instances_and_four_numbers_an_entry() {
    let reply = parse_reply(doubles(&[1.5e15, 3.0, 34.0, 7.0, 0.0, 234.0]), 1).unwrap();
    assert_eq!(reply.now, 1_500_000_000_000_000_000);
    assert_eq!(reply.instances, 3);
    assert_eq!(
        reply.grants,
        vec![Grant {
            granted: 34,
            window: 7,
            prev: 0,
            curr: 234
        }]
    );
    for (reply, entries) in [
        (doubles(&[1.0, 1.0, 1.0]), 0),
        (doubles(&[1.0, 1.0]), 1),
        (doubles(&[1.0, 1.0, -1.0, 0.0, 0.0, 0.0]), 1),
        (doubles(&[1.0, f64::NAN]), 0),
        (Reply::Integer(1), 0),
    ] {
        let error = parse_reply(reply, entries).expect_err("malformed reply accepted");
        assert!(matches!(error, StoreError::Protocol(_)), "{error:?}");
    }
}

#[test]
fn entries_of_one_identity_share_its_key_after_the_instances_set() {
    let ask = SyncAsk {
        window: 0,
        give: 0,
        keep: 0,
        want: true,
    };
    let rate = Rate {
        limit: 1,
        per: Duration::from_secs(1),
        burst: 1,
    };
    let entry = |identity, slot| SyncEntry {
        limit: "l",
        limit_identity: identity,
        slot,
        algorithm: Algorithm::FixedWindow,
        rate,
        ask,
    };
    let entries = [entry(1, 0), entry(1, 1), entry(2, 0)];
    let call = SyncCall {
        key_prefix: "p:",
        instance: "i",
        live_for: Duration::from_secs(1),
        entries: &entries,
        now: None,
        mode: Mode::Node,
    };
    let (keys, indices) = call.keys();
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[0], b"p:instances");
    assert_eq!(indices, vec![2, 2, 3]);
}
