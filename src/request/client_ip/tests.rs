use super::*;
use crate::http1::request_fields::tests::lines_like;
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

/// `p`'s answer for `peer` and `map`, the same whether hyper's map or the own server's
/// lines carry the fields.
fn resolve(p: &ClientIpPolicy, peer: IpAddr, map: &HeaderMap) -> ClientIp {
    let from_map = p.resolve(peer, &RequestFields::Map(map.clone()));
    assert_eq!(p.resolve(peer, &lines_like(map)), from_map, "{map:?}");
    from_map
}

fn policy(trusted: &[&str], header: ForwardHeader) -> ClientIpPolicy {
    ClientIpPolicy {
        trusted_proxies: IpSet::new(trusted.iter().map(|t| t.parse().unwrap())),
        header,
        ipv6_prefix: 64,
    }
}

fn headers(name: &str, lines: &[&str]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in lines {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(line).unwrap(),
        );
    }
    map
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn an_untrusted_peer_is_the_client_whatever_it_claims() {
    let p = policy(&["10.0.0.0/8"], ForwardHeader::XForwardedFor);
    let resolved = resolve(
        &p,
        ip("203.0.113.7"),
        &headers("x-forwarded-for", &["1.1.1.1"]),
    );
    assert_eq!(
        resolved,
        ClientIp {
            ip: ip("203.0.113.7"),
            peer_trusted: false
        }
    );
}

#[test]
fn the_rightmost_untrusted_hop_is_the_client() {
    let p = policy(&["10.0.0.0/8"], ForwardHeader::XForwardedFor);
    // The client wrote 6.6.6.6 itself; 198.51.100.4 connected to our trusted 10.0.0.2.
    let h = headers("x-forwarded-for", &["6.6.6.6, 198.51.100.4", "10.0.0.2"]);
    assert_eq!(resolve(&p, ip("10.0.0.1"), &h).ip, ip("198.51.100.4"));
}

#[test]
fn every_hop_trusted_gives_the_leftmost_and_no_header_gives_the_peer() {
    let p = policy(&["10.0.0.0/8"], ForwardHeader::XForwardedFor);
    assert_eq!(
        resolve(
            &p,
            ip("10.0.0.1"),
            &headers("x-forwarded-for", &["10.0.0.9, 10.0.0.8"])
        )
        .ip,
        ip("10.0.0.9")
    );
    assert_eq!(
        resolve(&p, ip("10.0.0.1"), &HeaderMap::new()).ip,
        ip("10.0.0.1")
    );
}

#[test]
fn garbage_stops_the_walk_at_the_last_good_hop() {
    let p = policy(&["10.0.0.0/8"], ForwardHeader::XForwardedFor);
    let h = headers("x-forwarded-for", &["198.51.100.4, not-an-ip, 10.0.0.3"]);
    assert_eq!(resolve(&p, ip("10.0.0.1"), &h).ip, ip("10.0.0.3"));
    let h = headers("x-forwarded-for", &["198.51.100.4, unknown"]);
    assert_eq!(resolve(&p, ip("10.0.0.1"), &h).ip, ip("10.0.0.1"));
}

#[test]
fn ports_brackets_mapped_addresses_and_spaces_are_normalised() {
    let p = policy(
        &["10.0.0.0/8", "2001:db8::/32"],
        ForwardHeader::XForwardedFor,
    );
    let cases = [
        ("198.51.100.4:5555", "198.51.100.4"),
        ("  198.51.100.4  ", "198.51.100.4"),
        ("[2001:db9::1]:443", "2001:db9::1"),
        ("[2001:db9::1]", "2001:db9::1"),
        ("2001:db9::1", "2001:db9::1"),
        ("::ffff:198.51.100.4", "198.51.100.4"),
    ];
    for (entry, expected) in cases {
        let h = headers("x-forwarded-for", &[&format!("{entry}, 10.0.0.5")]);
        assert_eq!(
            resolve(&p, ip("::ffff:10.0.0.1"), &h).ip,
            ip(expected),
            "{entry}"
        );
    }
}

#[test]
fn forwarded_header_with_quoted_ipv6_ports_and_other_parameters() {
    let p = policy(&["10.0.0.0/8"], ForwardHeader::Forwarded);
    let h = headers(
        "forwarded",
        &[
            r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711";proto=https"#,
            "for=10.0.0.2",
        ],
    );
    assert_eq!(resolve(&p, ip("10.0.0.1"), &h).ip, ip("2001:db8:cafe::17"));
    let h = headers("forwarded", &[r#"for="_hidden", for=10.0.0.2"#]);
    assert_eq!(resolve(&p, ip("10.0.0.1"), &h).ip, ip("10.0.0.2"));
    let h = headers(
        "forwarded",
        &[r#"for=198.51.100.1;host="a,b", for=10.0.0.2"#],
    );
    assert_eq!(resolve(&p, ip("10.0.0.1"), &h).ip, ip("198.51.100.1"));
}

#[test]
fn x_real_ip_takes_the_nearest_line_only() {
    let p = policy(&["10.0.0.0/8"], ForwardHeader::XRealIp);
    let h = headers("x-real-ip", &["6.6.6.6", "198.51.100.4"]);
    assert_eq!(resolve(&p, ip("10.0.0.1"), &h).ip, ip("198.51.100.4"));
}

#[test]
fn the_walk_is_bounded() {
    let p = policy(&["10.0.0.0/8"], ForwardHeader::XForwardedFor);
    let chain: Vec<String> = std::iter::once("198.51.100.4".to_string())
        .chain((0..100).map(|i| format!("10.0.{i}.1")))
        .collect();
    let h = headers("x-forwarded-for", &[&chain.join(", ")]);
    let resolved = resolve(&p, ip("10.0.0.1"), &h).ip;
    assert!(
        p.trusted_proxies.contains(resolved),
        "walked past {MAX_HOPS} hops"
    );
}

#[test]
fn ipv6_is_grouped_by_prefix() {
    let mut p = policy(&[], ForwardHeader::XForwardedFor);
    assert_eq!(p.group(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
    assert_eq!(p.group(ip("198.51.100.4")), ip("198.51.100.4"));
    p.ipv6_prefix = 128;
    assert_eq!(p.group(ip("2001:db8::1")), ip("2001:db8::1"));
    p.ipv6_prefix = 48;
    assert_eq!(p.group(ip("2001:db8:1:2::1")), ip("2001:db8:1::"));
}

#[derive(Debug, Clone)]
enum Hop {
    Trusted(u8),
    Untrusted(u32),
    Garbage(String),
}

impl Hop {
    fn address(&self) -> Option<IpAddr> {
        match self {
            Hop::Trusted(n) => Some(IpAddr::from([10, 0, 0, *n])),
            Hop::Untrusted(n) => Some(IpAddr::from((0xC600_0000u32 | (n & 0xFFFF)).to_be_bytes())),
            Hop::Garbage(_) => None,
        }
    }

    fn written(&self, style: u8) -> String {
        match (self, self.address()) {
            (Hop::Garbage(text), _) => text.clone(),
            (_, Some(address)) => match style % 3 {
                0 => address.to_string(),
                1 => format!("{address}:{}", 1000 + style as u16),
                _ => format!(" ::ffff:{address} "),
            },
            _ => unreachable!(),
        }
    }
}

fn hop() -> impl Strategy<Value = Hop> {
    prop_oneof![
        4 => any::<u8>().prop_map(Hop::Trusted),
        4 => any::<u32>().prop_map(Hop::Untrusted),
        1 => "[a-z_\\-:\\[\\]]{1,8}".prop_map(Hop::Garbage),
    ]
}

/// What the walk must return, computed the obvious way.
fn model(peer: IpAddr, hops: &[Hop]) -> IpAddr {
    let mut client = peer;
    for hop in hops.iter().rev().take(MAX_HOPS) {
        match hop {
            Hop::Garbage(_) => break,
            Hop::Trusted(_) => client = hop.address().unwrap(),
            Hop::Untrusted(_) => return hop.address().unwrap(),
        }
    }
    client
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300), which in 0u8..3) {
        let header = [ForwardHeader::XForwardedFor, ForwardHeader::Forwarded, ForwardHeader::XRealIp][which as usize];
        let p = policy(&["10.0.0.0/8", "::1/128"], header);
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            let mut h = HeaderMap::new();
            h.insert(header.name(), value);
            let _ = resolve(&p, ip("10.0.0.1"), &h);
        }
    }

    #[test]
    fn the_walk_matches_the_model_and_never_picks_a_trusted_hop_over_an_untrusted_one(
        hops in prop::collection::vec((hop(), any::<u8>()), 0..40),
        split in any::<prop::sample::Index>(),
    ) {
        let p = policy(&["10.0.0.0/8"], ForwardHeader::XForwardedFor);
        let written: Vec<String> = hops.iter().map(|(h, style)| h.written(*style)).collect();
        // Spread the entries over two header lines, as several proxies would.
        let cut = if written.is_empty() { 0 } else { split.index(written.len() + 1) };
        let lines: Vec<String> = [&written[..cut], &written[cut..]].iter().filter(|l| !l.is_empty()).map(|l| l.join(",")).collect();
        let mut h = HeaderMap::new();
        for line in &lines {
            match HeaderValue::from_str(line) {
                Ok(value) => { h.append("x-forwarded-for", value); }
                Err(_) => return Ok(()),
            }
        }
        let peer = ip("10.0.0.1");
        let plain: Vec<Hop> = hops.into_iter().map(|(h, _)| h).collect();
        // Garbage that happens to contain a comma-free valid address would differ from the model.
        prop_assume!(plain.iter().all(|h| !matches!(h, Hop::Garbage(g) if parse_node(g).is_some() || g.trim().is_empty())));
        let resolved = resolve(&p, peer, &h).ip;
        prop_assert_eq!(resolved, model(peer, &plain));
        let untrusted_before_garbage = plain.iter().rev().take(MAX_HOPS).take_while(|h| !matches!(h, Hop::Garbage(_))).any(|h| matches!(h, Hop::Untrusted(_)));
        if untrusted_before_garbage {
            prop_assert!(!p.trusted_proxies.contains(resolved));
        }
    }
}
