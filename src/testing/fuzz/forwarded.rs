//! The client address walk over X-Forwarded-For, Forwarded and X-Real-IP lines, with a trusted
//! set made of addresses the lines hold: the client is the peer unless the peer is trusted,
//! and then the peer or an address the lines hold; what a client writes to the left of the
//! first untrusted hop changes nothing, and an untrusted hop on the right is never skipped.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue};
use ipnet::IpNet;

use crate::http1::request_fields::RequestFields;
use crate::request::client_ip::{ClientIp, ClientIpPolicy, ForwardHeader, parse_node};
use crate::request::ip_set::IpSet;

/// Addresses no fuzz input makes trusted unless they appear in it.
const OUTSIDERS: [&str; 3] = ["198.51.100.77", "2001:db8::77", "203.0.113.9"];

/// `bytes`: the header (byte 0, bit 2 also trusts the peer), which addresses found are trusted
/// (byte 1) and as a /24 or /64 block (byte 2), which is the peer (byte 3), then the lines.
pub fn forwarded(bytes: &[u8]) {
    let [kind, trusted, wide, peer, text @ ..] = bytes else {
        return;
    };
    let header = match kind % 3 {
        0 => ForwardHeader::XForwardedFor,
        1 => ForwardHeader::Forwarded,
        _ => ForwardHeader::XRealIp,
    };
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let found = addresses_in(&lines);
    let peer = found
        .get(usize::from(*peer) % (found.len() + 1))
        .copied()
        .unwrap_or(IpAddr::from([192, 0, 2, 1]));
    let mut blocks: Vec<IpNet> = (found.iter().enumerate())
        .filter(|(i, _)| *i < 8 && trusted >> i & 1 == 1)
        .map(|(i, &ip)| block(ip, wide >> i & 1 == 1))
        .collect();
    if kind & 4 != 0 {
        blocks.push(block(peer, false));
    }
    let policy = ClientIpPolicy {
        trusted_proxies: IpSet::new(blocks),
        header,
        ipv6_prefix: 64,
    };
    let resolved = resolve(&policy, peer, &lines);
    let trusted = |ip| policy.trusted_proxies.contains(ip);
    let peer = peer.to_canonical();
    assert_eq!(resolved.peer_trusted, trusted(peer));
    if !resolved.peer_trusted {
        assert_eq!(resolved.ip, peer);
        return;
    }
    assert!(
        resolved.ip == peer || found.contains(&resolved.ip),
        "{resolved:?}"
    );
    let Some(outsider) = OUTSIDERS
        .iter()
        .map(|o| o.parse().expect("an address"))
        .find(|&o| !trusted(o))
    else {
        return;
    };
    let entry = match header {
        ForwardHeader::Forwarded => format!("for=\"{outsider}\""),
        _ => outsider.to_string(),
    };
    // Nearest of all: the first address examined, untrusted, is the client.
    let appended = [&lines[..], &[entry.as_bytes()]].concat();
    assert_eq!(resolve(&policy, peer, &appended).ip, outsider);
    if resolved.ip == peer || trusted(resolved.ip) {
        return;
    }
    // The walk stopped at an untrusted hop: whatever is to its left is the client's to write.
    let before = [&[entry.as_bytes()], &lines[..]].concat();
    assert_eq!(resolve(&policy, peer, &before), resolved);
    if header != ForwardHeader::XRealIp {
        let first = [entry.as_bytes(), b", ", lines[0]].concat();
        let prefixed = [&[&first[..]], &lines[1..]].concat();
        assert_eq!(resolve(&policy, peer, &prefixed), resolved);
    }
}

fn resolve(policy: &ClientIpPolicy, peer: IpAddr, lines: &[&[u8]]) -> ClientIp {
    let name = match policy.header {
        ForwardHeader::XForwardedFor => "x-forwarded-for",
        ForwardHeader::Forwarded => "forwarded",
        ForwardHeader::XRealIp => "x-real-ip",
    };
    let mut map = HeaderMap::new();
    for line in lines {
        // A line no client could send is not sent.
        if let Ok(value) = HeaderValue::from_bytes(line) {
            map.append(HeaderName::from_static(name), value);
        }
    }
    policy.resolve(peer, &RequestFields::Map(map))
}

/// Every address written in `lines`, between separators, as `parse_node` reads it.
fn addresses_in(lines: &[&[u8]]) -> Vec<IpAddr> {
    let mut found = Vec::new();
    for line in lines {
        let text = String::from_utf8_lossy(line);
        for token in text.split([',', ';', '=', '"', ' ', '\t']) {
            if let Some(ip) = parse_node(token)
                && !found.contains(&ip)
            {
                found.push(ip);
            }
        }
    }
    found
}

fn block(ip: IpAddr, wide: bool) -> IpNet {
    let prefix = match (ip, wide) {
        (IpAddr::V4(_), true) => 24,
        (IpAddr::V6(_), true) => 64,
        (IpAddr::V4(_), false) => 32,
        (IpAddr::V6(_), false) => 128,
    };
    IpNet::new(ip, prefix).expect("a valid prefix").trunc()
}
