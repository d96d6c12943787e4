use super::*;

const SECOND: u64 = 1_000_000_000;
const START: u64 = 1_000 * 60 * SECOND;

fn request(identity: u128) -> WindowRequest {
    WindowRequest {
        identity,
        limit_identity: identity,
        algorithm: Algorithm::FixedWindow,
        rate: Rate {
            limit: 100,
            per: Duration::from_secs(60),
            burst: 100,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group: 0,
        window: 0,
        shadow: false,
    }
}

fn grant(granted: u64) -> Grant {
    Grant {
        granted,
        window: START / (60 * SECOND),
        prev: 0,
        curr: granted,
    }
}

#[test]
fn a_cold_identity_is_registered_leased_by_the_next_sync_then_decided_here() {
    let leases = Leases::new(10, START, false);
    let name: Arc<str> = Arc::from("l");
    assert_eq!(
        leases.check(&request(1), &name, START).0,
        LeaseCheck::NoLease
    );
    assert_eq!(leases.len(), 1);
    let out = leases.outgoing(START, START + SECOND / 10);
    assert_eq!(out.len(), 1);
    assert!(out[0].ask.want);
    leases.take(
        &out.iter().collect::<Vec<_>>(),
        &[grant(2)],
        1,
        (START, START, START),
    );
    for _ in 0..2 {
        assert!(matches!(
            leases.check(&request(1), &name, START).0,
            LeaseCheck::Allow { .. }
        ));
    }
    assert!(matches!(
        leases.check(&request(1), &name, START).0,
        LeaseCheck::Deny { .. }
    ));
}

#[test]
fn past_the_bound_identities_are_decided_exactly_and_not_held() {
    let leases = Leases::new(2, START, false);
    let name: Arc<str> = Arc::from("l");
    for identity in 1..=5 {
        assert_eq!(
            leases.check(&request(identity), &name, START).0,
            LeaseCheck::NoLease
        );
    }
    assert_eq!(leases.len(), 2);
}

#[test]
fn an_identity_untouched_for_a_window_gives_its_lease_back_and_is_dropped() {
    let leases = Leases::new(10, START, false);
    let name: Arc<str> = Arc::from("l");
    leases.check(&request(1), &name, START);
    let out = leases.outgoing(START, START);
    leases.take(
        &out.iter().collect::<Vec<_>>(),
        &[grant(50)],
        1,
        (START, START, START),
    );
    leases.check(&request(1), &name, START);
    // Touched since the last sync: carried, keeping its share.
    let out = leases.outgoing(START + SECOND, START + SECOND);
    assert_eq!(out.len(), 1);
    // Untouched since: not carried...
    assert!(leases.outgoing(START + 2 * SECOND, START).is_empty());
    // ...until a whole window has passed: then it gives back what it kept and goes.
    let later = START + 61 * SECOND;
    let out = leases.outgoing(later, later);
    assert_eq!(out.len(), 1);
    assert!(!out[0].ask.want);
    assert!(leases.is_empty());
}

#[test]
fn stale_once_no_sync_succeeded_for_the_stated_time() {
    let leases = Leases::new(10, START, false);
    let stale_after = Duration::from_millis(300);
    assert!(!leases.is_stale(START + 300_000_000, stale_after, 1));
    assert!(leases.is_stale(START + 300_000_001, stale_after, 1));
    leases.mark_ok(START + SECOND);
    assert!(!leases.is_stale(START + SECOND + 1, stale_after, 1));
}

#[test]
fn a_sync_measures_the_offset_to_redis_and_the_margin_from_its_round_trip() {
    let leases = Leases::new(10, START, false);
    // Redis read 5 ms ahead of the local midpoint of a 2 ms round trip.
    leases.take(&[], &[], 1, (START + 6_000_000, START, START + 2_000_000));
    assert_eq!(leases.redis_now(START), START + 5_000_000);
    assert_eq!(leases.margin.load(Ordering::Relaxed), 2_000_000 + MARGIN_NS);
}

#[test]
fn on_a_cluster_each_slot_goes_stale_on_its_own() {
    let leases = Leases::new(10, START, true);
    let stale_after = Duration::from_millis(300);
    let (a, b) = (
        1u128,
        (2u128..)
            .find(|&i| identity_slot(i) != identity_slot(1))
            .unwrap(),
    );
    leases.mark_ok_slots(&[identity_slot(a)], START + SECOND);
    assert!(!leases.is_stale(START + SECOND + 1, stale_after, a));
    assert!(leases.is_stale(START + SECOND + 1, stale_after, b));
}
