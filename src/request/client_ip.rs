//! The real client address. The peer is the client unless it is a trusted proxy; then the
//! forwarding header is walked from the right (the end nearest us), skipping trusted hops, and
//! the first untrusted address is the client. The leftmost entries are whatever the client
//! wrote, so they are only used when every hop is trusted.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::HeaderName;

use crate::http1::fields::visible_text;
use crate::http1::request_fields::RequestFields;
use crate::request::ip_set::IpSet;

/// At most this many header entries are examined, whatever the client sends.
pub(crate) const MAX_HOPS: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardHeader {
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=...`.
    Forwarded,
    XRealIp,
}

impl ForwardHeader {
    pub(crate) fn name(self) -> HeaderName {
        match self {
            ForwardHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardHeader::Forwarded => HeaderName::from_static("forwarded"),
            ForwardHeader::XRealIp => HeaderName::from_static("x-real-ip"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ClientIpPolicy {
    pub trusted_proxies: IpSet,
    pub header: ForwardHeader,
    /// IPv6 clients are grouped per prefix of this length for every IP-based key.
    pub ipv6_prefix: u8,
}

impl Default for ClientIpPolicy {
    fn default() -> Self {
        ClientIpPolicy {
            trusted_proxies: IpSet::default(),
            header: ForwardHeader::XForwardedFor,
            ipv6_prefix: 64,
        }
    }
}

/// Who the client is, and whether the peer that told us is a trusted proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp {
    pub ip: IpAddr,
    pub peer_trusted: bool,
}

impl ClientIpPolicy {
    pub fn resolve(&self, peer: IpAddr, fields: &RequestFields) -> ClientIp {
        let peer = peer.to_canonical();
        if !self.trusted_proxies.contains(peer) {
            return ClientIp {
                ip: peer,
                peer_trusted: false,
            };
        }
        let mut walk = Walk {
            client: peer,
            examined: 0,
            trusted: &self.trusted_proxies,
        };
        // Lines from the last (nearest proxy) to the first; entries within a line likewise.
        let name = self.header.name();
        for line in fields.get_all(&name).rev() {
            let Some(text) = visible_text(line) else {
                break;
            };
            let go_on = match self.header {
                ForwardHeader::XForwardedFor => {
                    text.rsplit(',').all(|entry| walk.visit(entry, parse_node))
                }
                // Only the nearest proxy's X-Real-IP counts.
                ForwardHeader::XRealIp => {
                    walk.visit(text, parse_node);
                    false
                }
                ForwardHeader::Forwarded => {
                    let elements: Vec<&str> = split_outside_quotes(text).collect();
                    elements
                        .into_iter()
                        .rev()
                        .all(|element| walk.visit(element, forwarded_for))
                }
            };
            if !go_on {
                break;
            }
        }
        ClientIp {
            ip: walk.client,
            peer_trusted: true,
        }
    }

    /// The address that IP-based keys use: IPv6 masked to `ipv6_prefix`.
    pub fn group(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.ipv6_prefix))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        }
    }
}

/// The right-to-left walk over forwarding entries.
struct Walk<'a> {
    client: IpAddr,
    examined: usize,
    trusted: &'a IpSet,
}

impl Walk<'_> {
    /// Takes the next entry to the left; false when the walk is over (an untrusted address was
    /// found, the entry is not an address, or MAX_HOPS entries were examined).
    fn visit(&mut self, entry: &str, parse: fn(&str) -> Option<IpAddr>) -> bool {
        if entry.trim().is_empty() {
            return true;
        }
        self.examined += 1;
        if self.examined > MAX_HOPS {
            return false;
        }
        let Some(ip) = parse(entry) else { return false };
        self.client = ip;
        self.trusted.contains(ip)
    }
}

/// The `for=` address of one RFC 7239 element; `None` when absent, obfuscated or unknown.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let value = element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })?;
    let unquoted = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    parse_node(unquoted)
}

/// Splits on commas that are not inside a quoted string; skips empty elements.
fn split_outside_quotes(text: &str) -> impl Iterator<Item = &str> {
    let mut in_quotes = false;
    let mut escaped = false;
    text.split(move |c: char| {
        let split = c == ',' && !in_quotes;
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            in_quotes = !in_quotes;
        }
        split
    })
    .filter(|e| !e.trim().is_empty())
}

/// An address as proxies write it: bare, with a port, or IPv6 in brackets with or without one.
pub(crate) fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    let ip = text
        .parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            text.strip_prefix('[')?
                .strip_suffix(']')?
                .parse::<IpAddr>()
                .ok()
        })?;
    // IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is the IPv4 address, in one form everywhere.
    Some(ip.to_canonical())
}

#[cfg(test)]
mod tests;
