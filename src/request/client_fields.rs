//! The fields that say who the client is, or what it first asked for, on a request's way
//! upstream. An upstream that reads any of them would see an identity the limiter did not
//! count, so a client's are left out: the configured list (`REMOVED_BY_DEFAULT` unless set),
//! the configured client-IP field unless a trusted proxy sent it, and the fields the gateway
//! writes itself, with the address it counted. Built once per config; looked up per field
//! without allocating.

use std::io::Write;
use std::net::IpAddr;

use http::HeaderName;

use crate::http1::NameSet;
use crate::http1::fields::same_name;
use crate::request::client_ip::ForwardHeader;

/// The fields removed when `[client_ip] remove_fields` is not set. Addresses first (what
/// CDNs, load balancers and frameworks name the client with), then the method and path a
/// proxy says the request had before it rewrote it. X-Forwarded-For is the gateway's own;
/// X-Original-URL, X-Rewrite-URL and the method overrides go whatever this list says
/// (`http1::fields::Role::Override`).
pub(crate) const REMOVED_BY_DEFAULT: &[&str] = &[
    "forwarded",
    "x-real-ip",
    "x-forwarded",
    "forwarded-for",
    "x-original-forwarded-for",
    "true-client-ip",
    "cf-connecting-ip",
    "cf-connecting-ipv6",
    "fastly-client-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-proxyuser-ip",
    "x-envoy-external-address",
    "x-azure-clientip",
    "x-azure-socketip",
    "x-appengine-user-ip",
    "x-original-method",
    "x-forwarded-path",
    "x-envoy-original-path",
    "x-original-uri",
    "x-forwarded-uri",
];

/// The client-address fields the gateway writes itself, besides X-Forwarded-For.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Writes {
    /// `X-Real-IP: <client>`.
    pub x_real_ip: bool,
    /// `Forwarded: for=<client>` (RFC 7239).
    pub forwarded: bool,
}

/// Which of a client's fields naming it go upstream, and which the gateway writes.
#[derive(Debug, Clone)]
pub struct ClientFields {
    /// Left out of every request, except `kept_from_trusted` from a trusted proxy.
    removed: NameSet,
    /// The configured client-IP field (Forwarded or X-Real-IP) when the gateway does not write
    /// it: the address was read from a trusted proxy's, so that one goes on as it came. None
    /// for X-Forwarded-For, which the gateway extends itself.
    kept_from_trusted: Option<HeaderName>,
    pub writes: Writes,
}

impl Default for ClientFields {
    fn default() -> Self {
        let listed = REMOVED_BY_DEFAULT.iter().copied();
        let listed = listed.map(HeaderName::from_static).collect();
        ClientFields::new(listed, ForwardHeader::XForwardedFor, Writes::default())
    }
}

impl ClientFields {
    /// `listed` removed; `source` is the field the client address is read from.
    pub fn new(listed: Vec<HeaderName>, source: ForwardHeader, writes: Writes) -> ClientFields {
        let gateway_writes = |field: ForwardHeader| match field {
            ForwardHeader::XForwardedFor => true,
            ForwardHeader::XRealIp => writes.x_real_ip,
            ForwardHeader::Forwarded => writes.forwarded,
        };
        let kept_from_trusted = (!gateway_writes(source)).then(|| source.name());
        let own = [ForwardHeader::XRealIp, ForwardHeader::Forwarded]
            .into_iter()
            .filter(|&field| gateway_writes(field) || field == source)
            .map(ForwardHeader::name);
        ClientFields {
            removed: NameSet::new(listed.into_iter().chain(own)),
            kept_from_trusted,
            writes,
        }
    }

    /// Whether a client's field called `name` (any case) is left out; `peer_trusted` when the
    /// connection is from a trusted proxy.
    pub(crate) fn leaves_out(&self, name: &[u8], peer_trusted: bool) -> bool {
        if !self.removed.contains(name) {
            return false;
        }
        let is_kept = |kept: &HeaderName| same_name(name, kept.as_str().as_bytes());
        !(peer_trusted && self.kept_from_trusted.as_ref().is_some_and(is_kept))
    }

    /// Every name a client's request may lose, for the trailers, which never carry one.
    pub(crate) fn removed(&self) -> impl Iterator<Item = &HeaderName> {
        self.removed.names()
    }

    /// The X-Real-IP value for `client`, written into `out`, when the gateway writes one.
    pub(crate) fn x_real_ip<'b>(&self, client: IpAddr, out: &'b mut [u8; 64]) -> Option<&'b [u8]> {
        let client = client.to_canonical();
        self.writes
            .x_real_ip
            .then(|| written(out, format_args!("{client}")))
    }

    /// The Forwarded value for `client`, written into `out`, when the gateway writes one:
    /// `for=192.0.2.1`, an IPv6 address bracketed and quoted (RFC 7239 §6).
    pub(crate) fn forwarded<'b>(&self, client: IpAddr, out: &'b mut [u8; 64]) -> Option<&'b [u8]> {
        self.writes.forwarded.then(|| match client.to_canonical() {
            IpAddr::V4(v4) => written(out, format_args!("for={v4}")),
            IpAddr::V6(v6) => written(out, format_args!("for=\"[{v6}]\"")),
        })
    }
}

/// `text` formatted into `out`, without a heap buffer per request.
fn written<'b>(out: &'b mut [u8; 64], text: std::fmt::Arguments<'_>) -> &'b [u8] {
    let mut rest: &mut [u8] = out;
    // Fails only when `out` is full, which no value fills: the longest, `for="[` and eight
    // groups of four hex digits and `]"`, is 47 bytes.
    let _ = rest.write_fmt(text);
    let left = rest.len();
    &out[..out.len() - left]
}

#[cfg(test)]
mod tests;
