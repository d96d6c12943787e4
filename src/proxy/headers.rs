//! Header rewriting between client and upstream: hop-by-hop headers (RFC 9110 §7.6.1) never
//! cross the proxy, and the upstream learns who asked through X-Forwarded-*.

use http::header::{CONNECTION, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::request_id::X_REQUEST_ID;

pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

const HOP_BY_HOP: [HeaderName; 6] = [
    CONNECTION,
    KEEP_ALIVE,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// Removes Connection and every header it names, the fixed hop-by-hop set, and `Proxy-*`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names instead of a removal per name.
    let any = headers
        .keys()
        .any(|name| HOP_BY_HOP.contains(name) || name.as_str().starts_with("proxy-"));
    if !any {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    let has_proxy_headers = headers
        .keys()
        .any(|name| name.as_str().starts_with("proxy-"));
    if has_proxy_headers {
        let proxy_headers: Vec<HeaderName> = headers
            .keys()
            .filter(|name| name.as_str().starts_with("proxy-"))
            .cloned()
            .collect();
        for name in proxy_headers {
            headers.remove(name);
        }
    }
}

/// True when the request asks to switch protocols (`Connection: upgrade` plus `Upgrade`).
pub fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(UPGRADE)
        && headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|list| list.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Who asked, for the upstream's eyes.
pub struct Forwarded<'a> {
    /// The connection's peer address as a header value (made once per connection).
    pub peer: &'a HeaderValue,
    /// A trusted proxy's X-Forwarded-For is extended; anyone else's is replaced, so upstreams
    /// never see addresses a client made up.
    pub peer_trusted: bool,
    pub proto: &'static str,
    /// The host the client asked for (Host header or HTTP/2 `:authority`).
    pub host: Option<&'a HeaderValue>,
    pub request_id: &'a HeaderValue,
}

/// Rewrites client request headers into upstream request headers, in place.
pub fn to_upstream(
    headers: &mut HeaderMap,
    forwarded: &Forwarded<'_>,
    upgrade: Option<HeaderValue>,
) {
    strip_hop_by_hop(headers);
    if let Some(host) = forwarded.host {
        if !headers.contains_key(HOST) {
            headers.insert(HOST, host.clone());
        }
        headers.insert(X_FORWARDED_HOST, host.clone());
    }
    if forwarded.peer_trusted {
        append_forwarded_for(headers, forwarded.peer);
    } else {
        headers.insert(X_FORWARDED_FOR, forwarded.peer.clone());
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(forwarded.proto));
    headers.insert(X_REQUEST_ID, forwarded.request_id.clone());
    if let Some(protocol) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol);
    }
}

/// Joins every existing X-Forwarded-For line into one and appends `peer`.
fn append_forwarded_for(headers: &mut HeaderMap, peer: &HeaderValue) {
    let mut value = String::new();
    for line in headers.get_all(X_FORWARDED_FOR) {
        if let Ok(text) = line.to_str() {
            value.push_str(text.trim());
            value.push_str(", ");
        }
    }
    value.push_str(peer.to_str().unwrap_or("unknown"));
    if let Ok(joined) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_FOR, joined);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn strips_the_fixed_set_the_connection_list_and_proxy_headers() {
        let mut map = headers(&[
            ("connection", "keep-alive, X-Secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic x"),
            ("proxy-connection", "keep-alive"),
            ("accept", "*/*"),
        ]);
        strip_hop_by_hop(&mut map);
        assert_eq!(map.len(), 1, "{map:?}");
        assert_eq!(map["accept"], "*/*");
    }

    #[test]
    fn sets_forwarded_headers_and_appends_the_peer() {
        let mut map = headers(&[
            ("x-forwarded-for", "203.0.113.1"),
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-proto", "ftp"),
        ]);
        let host = HeaderValue::from_static("api.example.com");
        let id = HeaderValue::from_static("id-1");
        let peer = HeaderValue::from_static("127.0.0.1");
        let forwarded = Forwarded {
            peer: &peer,
            peer_trusted: true,
            proto: "http",
            host: Some(&host),
            request_id: &id,
        };
        let mut from_untrusted = map.clone();
        to_upstream(&mut map, &forwarded, None);
        assert_eq!(map["x-forwarded-for"], "203.0.113.1, 10.0.0.1, 127.0.0.1");
        let untrusted = Forwarded {
            peer_trusted: false,
            ..forwarded
        };
        to_upstream(&mut from_untrusted, &untrusted, None);
        assert_eq!(from_untrusted["x-forwarded-for"], "127.0.0.1");
        assert_eq!(map.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(map["x-forwarded-proto"], "http");
        assert_eq!(map["x-forwarded-host"], "api.example.com");
        assert_eq!(map["host"], "api.example.com");
        assert_eq!(map["x-request-id"], "id-1");
    }

    #[test]
    fn upgrade_is_detected_and_kept_when_asked() {
        let mut map = headers(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ]);
        assert!(wants_upgrade(&map));
        let id = HeaderValue::from_static("id");
        let peer = HeaderValue::from_static("::1");
        let forwarded = Forwarded {
            peer: &peer,
            peer_trusted: false,
            proto: "http",
            host: None,
            request_id: &id,
        };
        let protocol = map.get(UPGRADE).cloned();
        to_upstream(&mut map, &forwarded, protocol);
        assert_eq!(map["connection"], "upgrade");
        assert_eq!(map["upgrade"], "websocket");
        assert!(!wants_upgrade(&headers(&[("upgrade", "websocket")])));
    }
}
