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

#[test]
fn a_cluster_call_declares_no_key_and_only_the_holder_records_the_gateway() {
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
    let entries = [SyncEntry {
        limit: "l",
        limit_identity: 7,
        slot: 0,
        algorithm: Algorithm::FixedWindow,
        rate,
        ask,
    }];
    let arguments = |mode| {
        let call = SyncCall {
            key_prefix: "p:",
            instance: "i",
            live_for: Duration::from_secs(1),
            entries: &entries,
            now: None,
            mode,
        };
        let mut out = Vec::new();
        call.write(&mut out);
        let crate::store::resp::Value::Array(items) = crate::store::resp::tree(&out).unwrap()
        else {
            panic!("not an array");
        };
        (items.into_iter())
            .map(|item| match item {
                crate::store::resp::Value::Bulk(bytes) => bytes,
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>()
    };
    let holder = arguments(Mode::Cluster(None));
    assert_eq!(holder[1], CLUSTER_SCRIPT.get_hash().as_bytes());
    assert_eq!(holder[2], b"0", "no declared key: they span slots");
    assert_eq!(holder[4], b"i");
    assert_eq!(holder[8], b"p:instances");
    assert!(holder[9].starts_with(b"p:l:{"));
    let other = arguments(Mode::Cluster(Some(3)));
    assert_eq!(other[4], b"", "another master records the gateway");
    assert_eq!(other[7], b"3");
    assert_eq!(other.len(), 9, "its identity key only");
    assert!(CLUSTER_TEXT.starts_with("#!lua flags=allow-cross-slot-keys\n"));
}
