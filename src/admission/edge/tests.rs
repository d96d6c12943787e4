use super::*;
use crate::rt::clock::{Clock, ManualClock};

fn rate(limit: u64, burst: u64) -> Rate {
    Rate {
        limit,
        per: Duration::from_secs(1),
        burst,
    }
}

fn set(blocks: &[&str]) -> Arc<IpSet> {
    Arc::new(IpSet::new(blocks.iter().map(|b| b.parse().unwrap())))
}

fn layer(max_tracked: usize) -> EdgeLayer {
    EdgeLayer::new(EdgePolicy {
        rate: rate(10, 5),
        max_tracked,
        deny: vec![("blocked".into(), set(&["192.0.2.66/32"]))],
        overrides: vec![
            EdgeOverride::Exempt {
                list: "partners".into(),
                ips: set(&["198.51.100.0/24"]),
            },
            EdgeOverride::Rate {
                list: "office".into(),
                ips: set(&["203.0.113.0/24"]),
                rate: rate(100, 50),
            },
        ],
    })
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn allowed_in_a_row(layer: &EdgeLayer, ip: IpAddr, now: Nanos, tries: usize) -> usize {
    (0..tries)
        .take_while(|_| layer.check(ip, ip, now) == EdgeVerdict::Allow)
        .count()
}

#[test]
fn burst_then_limited_then_refilled_by_the_clock() {
    let clock = ManualClock::new();
    let edge = layer(1000);
    let client = ip("1.2.3.4");
    assert_eq!(allowed_in_a_row(&edge, client, clock.now(), 100), 5);
    let EdgeVerdict::Limited {
        status,
        retry_after,
    } = edge.check(client, client, clock.now())
    else {
        panic!()
    };
    assert_eq!(retry_after, Duration::from_millis(100));
    assert_eq!(
        (&*status.policy.item, status.remaining),
        ("\"edge\";q=10;w=1", 0)
    );
    clock.advance(Duration::from_millis(99));
    assert!(matches!(
        edge.check(client, client, clock.now()),
        EdgeVerdict::Limited { .. }
    ));
    clock.advance(Duration::from_millis(1));
    assert_eq!(edge.check(client, client, clock.now()), EdgeVerdict::Allow);
    clock.advance(Duration::from_secs(10));
    assert_eq!(allowed_in_a_row(&edge, client, clock.now(), 100), 5);
}

#[test]
fn lists_deny_exempt_and_override() {
    let now = ManualClock::new().now();
    let edge = layer(1000);
    assert_eq!(
        edge.check(ip("192.0.2.66"), ip("192.0.2.66"), now),
        EdgeVerdict::Forbidden {
            list: "blocked".into()
        }
    );
    assert!((0..1000).all(|_| edge.check(ip("198.51.100.9"), ip("198.51.100.9"), now) == EdgeVerdict::Exempt));
    assert_eq!(allowed_in_a_row(&edge, ip("203.0.113.5"), now, 1000), 50);
    assert_eq!(allowed_in_a_row(&edge, ip("8.8.8.8"), now, 1000), 5);
    // Each is told the rate that limited it.
    let told = |client| match edge.check(ip(client), ip(client), now) {
        EdgeVerdict::Limited { status, .. } => status.policy.limit,
        other => panic!("{other:?}"),
    };
    assert_eq!((told("203.0.113.5"), told("8.8.8.8")), (100, 10));
}

#[test]
fn clients_are_independent() {
    let now = ManualClock::new().now();
    let edge = layer(1000);
    assert_eq!(allowed_in_a_row(&edge, ip("1.1.1.1"), now, 100), 5);
    assert_eq!(allowed_in_a_row(&edge, ip("1.1.1.2"), now, 100), 5);
    assert_eq!(allowed_in_a_row(&edge, ip("2001:db8::1"), now, 100), 5);
}

#[test]
fn memory_stays_bounded_and_an_over_limit_ip_stays_limited_through_a_flood() {
    let clock = ManualClock::new();
    let max_tracked = 20_000;
    let edge = layer(max_tracked);
    let abuser = ip("9.9.9.9");
    assert_eq!(allowed_in_a_row(&edge, abuser, clock.now(), 100), 5);

    // 2,000,000 distinct IPs, each using part of its burst, over one simulated second.
    for i in 0..2_000_000u32 {
        if i % 200_000 == 0 {
            // 50 ms refill one token at most every other checkpoint; a fresh bucket would give 5.
            clock.advance(Duration::from_millis(50));
            let allowed = allowed_in_a_row(&edge, abuser, clock.now(), 100);
            assert!(
                allowed <= 1,
                "abuser got {allowed} tokens back at {i}: a fresh bucket"
            );
        }
        let newcomer = IpAddr::from((0x0B00_0000 + i).to_be_bytes());
        edge.check(newcomer, newcomer, clock.now());
        edge.check(newcomer, newcomer, clock.now());
    }
    assert!(
        edge.tracked() <= max_tracked + SHARDS,
        "tracked {}",
        edge.tracked()
    );
    assert!(matches!(
        edge.check(abuser, abuser, clock.now()),
        EdgeVerdict::Limited { .. }
    ));
    assert!(
        edge.tracked() >= max_tracked / 2,
        "the table should have been in use"
    );
    let per_ip = edge.memory_bytes() / edge.tracked();
    assert!(per_ip <= 150, "{per_ip} bytes per tracked IP");
}

#[test]
fn full_buckets_are_forgotten_to_make_room_for_newcomers() {
    let clock = ManualClock::new();
    let edge = layer(SHARDS * 10);
    for i in 0..5_000u32 {
        let newcomer = IpAddr::from((0x0B00_0000 + i).to_be_bytes());
        edge.check(newcomer, newcomer, clock.now());
    }
    // Everyone's bucket refills; newcomers then get real buckets of their own, not overflow cells.
    clock.advance(Duration::from_secs(60));
    let newcomer = ip("1.2.3.4");
    assert_eq!(allowed_in_a_row(&edge, newcomer, clock.now(), 100), 5);
    assert!(edge.tracked() <= SHARDS * 10);
}

#[test]
fn lists_match_the_address_while_buckets_use_the_group() {
    let now = ManualClock::new().now();
    let edge = EdgeLayer::new(EdgePolicy {
        rate: rate(10, 2),
        max_tracked: 1000,
        deny: vec![("one host".into(), set(&["2001:db8::66/128"]))],
        overrides: Vec::new(),
    });
    let group = ip("2001:db8::");
    assert_eq!(
        edge.check(ip("2001:db8::66"), group, now),
        EdgeVerdict::Forbidden {
            list: "one host".into()
        }
    );
    assert_eq!(
        edge.check(ip("2001:db8::67"), group, now),
        EdgeVerdict::Allow
    );
    assert_eq!(
        edge.check(ip("2001:db8::68"), group, now),
        EdgeVerdict::Allow
    );
    assert!(matches!(
        edge.check(ip("2001:db8::69"), group, now),
        EdgeVerdict::Limited { .. }
    ));
}
