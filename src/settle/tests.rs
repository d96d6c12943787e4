use super::*;

#[test]
fn only_identity_codings_leave_a_body_readable() {
    for plain in [&b"identity"[..], b"IDENTITY", b" identity , identity", b""] {
        assert!(usage_readable_coding(plain), "{plain:?}");
    }
    for coded in [&b"gzip"[..], b"identity, br", b"x-gzip", b"identityx"] {
        assert!(!usage_readable_coding(coded), "{coded:?}");
    }
}

#[test]
fn a_rule_that_keeps_what_was_reserved_is_told_from_a_refund() {
    let reservation = |units| Reservation {
        rule: 0,
        units,
        windows: Small::new(),
        resets: Small::new(),
        place: Place::Memory { at: 0 },
    };
    assert_eq!(settled_by_rule(&reservation(5), 5), SettleOutcome::Kept);
    assert_eq!(
        settled_by_rule(&reservation(5), 0),
        SettleOutcome::GivenBack
    );
    assert_eq!(settled_by_rule(&reservation(5), 7), SettleOutcome::Settled);
}
