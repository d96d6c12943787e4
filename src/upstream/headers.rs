//! Header rewriting between client and upstream: hop-by-hop headers (RFC 9110 §7.6.1) never
//! cross the proxy, and the upstream learns who asked through X-Forwarded-*.

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

use crate::http1::encode::SenderFields;
use crate::http1::fields::visible_text;
pub(crate) use crate::http1::fields::{Role, list_items, role};
use crate::http1::request_fields::RequestFields;
use crate::request::id::{RequestId, X_REQUEST_ID};

pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Who asked, for the upstream's eyes.
pub(crate) struct Forwarded<'a> {
    /// The connection's peer address as a header value (made once per connection).
    pub peer: &'a HeaderValue,
    /// A trusted proxy's X-Forwarded-For is extended; anyone else's is replaced, so upstreams
    /// never see addresses a client made up.
    pub peer_trusted: bool,
    pub proto: &'static str,
    pub request_id: &'a RequestId,
    /// The answer's body is read for the usage a limit settles by: it is asked for without a
    /// content coding, whatever the client accepts.
    pub plain_answer: bool,
}

/// The fields the gateway sets on a request going upstream. They are written after the
/// client's own fields, of which those with the same names are left out (`replaces`): adding
/// them to the request's map cost a hash and an insert each, and often a regrow of the map.
#[derive(Clone, Debug, Default)]
pub(crate) struct SetFields {
    /// The canonical host the request asked for, or (when it named none: HTTP/1.0, a health
    /// check) the server's authority, which the pool puts here. Written first of all fields.
    pub host: Option<Bytes>,
    /// X-Forwarded-Host repeats `host`: only when the client named it. Not derived from
    /// `host`: when the client named no host, the pool puts its server's authority there.
    pub forward_host: bool,
    pub forwarded_for: Option<HeaderValue>,
    pub forwarded_proto: Option<&'static str>,
    pub request_id: Option<RequestId>,
    /// The protocol of an upgrade the client asked for (with `Connection: upgrade`).
    pub upgrade: Option<HeaderValue>,
    /// The peer is a trusted proxy: its `Forwarded` and `X-Real-IP` say who the client is.
    pub peer_trusted: bool,
    /// `Accept-Encoding: identity` in place of the client's (`Forwarded::plain_answer`).
    pub plain_answer: bool,
}

impl SenderFields for SetFields {
    /// True for a client field that the gateway's own replace, or (from a peer that is not a
    /// trusted proxy) another claim of who the client is: whatever a client says about who
    /// forwarded it never reaches the upstream unchecked.
    fn leaves_out(&self, name: &[u8]) -> bool {
        let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
        match name.len() {
            12 => is(X_REQUEST_ID.as_str()),
            15 => is(X_FORWARDED_FOR.as_str()) || (self.plain_answer && is("accept-encoding")),
            16 => is(X_FORWARDED_HOST.as_str()),
            17 => is(X_FORWARDED_PROTO.as_str()),
            9 => !self.peer_trusted && (is("forwarded") || is("x-real-ip")),
            _ => false,
        }
    }

    /// Writes the Host line, which goes first (RFC 9110 §7.2 recommends it).
    fn encode_host(&self, buf: &mut Vec<u8>) {
        if let Some(host) = &self.host {
            buf.extend_from_slice(b"host: ");
            buf.extend_from_slice(host);
            buf.extend_from_slice(b"\r\n");
        }
    }

    /// Writes the other fields as head lines, in a fixed order, after the request's own.
    /// Each name is a constant with the line end before it and its `: ` after, written at
    /// once: a `HeaderName` apiece, its `: ` and the line end apart, cost a third more.
    fn encode(&self, buf: &mut Vec<u8>) {
        let client_host = self.host.as_ref().filter(|_| self.forward_host);
        let lines: [(&[u8], Option<&[u8]>); 7] = [
            (b"\r\nx-forwarded-host: ", client_host.map(|host| &host[..])),
            (b"\r\nx-forwarded-for: ", bytes(&self.forwarded_for)),
            (
                b"\r\nx-forwarded-proto: ",
                self.forwarded_proto.map(str::as_bytes),
            ),
            (
                b"\r\nx-request-id: ",
                self.request_id.as_ref().map(RequestId::as_bytes),
            ),
            (
                b"\r\nconnection: ",
                self.upgrade.as_ref().map(|_| &b"upgrade"[..]),
            ),
            (b"\r\nupgrade: ", bytes(&self.upgrade)),
            (
                b"\r\naccept-encoding: ",
                self.plain_answer.then_some(&b"identity"[..]),
            ),
        ];
        // The first line's end comes before the second's name, the last one's after it.
        let mut line_start = 2;
        for (name, value) in lines {
            if let Some(value) = value {
                buf.extend_from_slice(&name[line_start..]);
                buf.extend_from_slice(value);
                line_start = 0;
            }
        }
        if line_start == 0 {
            buf.extend_from_slice(b"\r\n");
        }
    }
}

fn bytes(field: &Option<HeaderValue>) -> Option<&[u8]> {
    field.as_ref().map(HeaderValue::as_bytes)
}

/// The fields the gateway sets on a canonical request's way upstream: `host` is the canonical
/// host it asked for, `upgrade` the protocols its route lets it switch to.
pub(crate) fn to_upstream(
    fields: &RequestFields,
    forwarded: &Forwarded<'_>,
    host: Option<Bytes>,
    upgrade: Option<HeaderValue>,
) -> SetFields {
    let forwarded_for = if forwarded.peer_trusted {
        forwarded_for_chain(fields, forwarded.peer)
    } else {
        forwarded.peer.clone()
    };
    SetFields {
        peer_trusted: forwarded.peer_trusted,
        forward_host: host.is_some(),
        host,
        forwarded_for: Some(forwarded_for),
        forwarded_proto: Some(forwarded.proto),
        request_id: Some(forwarded.request_id.clone()),
        upgrade,
        plain_answer: forwarded.plain_answer,
    }
}

/// Every existing X-Forwarded-For line joined into one, then `peer`.
fn forwarded_for_chain(fields: &RequestFields, peer: &HeaderValue) -> HeaderValue {
    let mut value = String::new();
    for line in fields.get_all(&X_FORWARDED_FOR) {
        if let Some(text) = visible_text(line) {
            value.push_str(text.trim());
            value.push_str(", ");
        }
    }
    if value.is_empty() {
        return peer.clone();
    }
    value.push_str(peer.to_str().unwrap_or("unknown"));
    HeaderValue::from_str(&value).unwrap_or_else(|_| peer.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::encode::encode_request_head;
    use crate::http1::fields::strip_hop_by_hop;
    use crate::request::canonical::wants_upgrade;
    use http::HeaderMap;
    use http::header::UPGRADE;

    use crate::http1::request_fields::tests::map_of as headers;

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
    fn a_role_of_its_own_is_the_role_of_that_name_alone() {
        let names = [
            "host",
            "connection",
            "upgrade",
            "content-length",
            "transfer-encoding",
            "te",
            "keep-alive",
            "proxy-authorization",
            "x-host",
            "accept",
        ];
        for name in names.map(HeaderName::from_static) {
            let own = Role::only_of(&name);
            let shared = names
                .iter()
                .filter(|other| role(other.as_bytes()) == role(name.as_ref()));
            match own {
                Some(own) => {
                    assert_eq!(own, role(name.as_ref()), "{name}");
                    assert_eq!(shared.count(), 1, "{name}");
                }
                None => assert!(
                    matches!(role(name.as_ref()), Role::EndToEnd | Role::HopByHop),
                    "{name}"
                ),
            }
        }
    }

    /// `pairs` as hyper's map and as the own server's lines.
    fn both(pairs: &[(&str, &str)]) -> [RequestFields; 2] {
        let map = headers(pairs);
        let lines = crate::http1::request_fields::tests::lines_like(&map);
        [RequestFields::Map(map), lines]
    }

    /// The fields as the upstream receives them, through the request head encoder.
    fn as_sent(fields: &RequestFields, set: &SetFields) -> HeaderMap {
        let get = crate::upstream::exchange::UpstreamHead::get("/");
        let mut head = Vec::new();
        encode_request_head(&mut head, &get.method, &get.target, fields, set, None);
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut fields);
        assert!(request.parse(&head).unwrap().is_complete());
        let mut sent = HeaderMap::new();
        for field in request.headers.iter() {
            sent.append(
                HeaderName::from_bytes(field.name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(field.value).unwrap(),
            );
        }
        sent
    }

    #[test]
    fn sets_forwarded_headers_and_appends_the_peer() {
        for map in both(&[
            ("x-forwarded-for", "203.0.113.1"),
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-proto", "ftp"),
            ("x-forwarded-host", "spoofed.example"),
            ("x-request-id", "client-id"),
        ]) {
            forwarded_fields_are_set(map);
        }
    }

    /// Who asked, over plain HTTP: `peer`'s request `id`, from a peer trusted or not.
    fn asked_by<'a>(peer: &'a HeaderValue, id: &'a RequestId, trusted: bool) -> Forwarded<'a> {
        Forwarded {
            peer,
            peer_trusted: trusted,
            proto: "http",
            request_id: id,
            plain_answer: false,
        }
    }

    fn forwarded_fields_are_set(mut map: RequestFields) {
        let id = RequestId::Kept(HeaderValue::from_static("id-1"));
        let peer = HeaderValue::from_static("127.0.0.1");
        let forwarded = asked_by(&peer, &id, true);
        let host = Some(Bytes::from_static(b"api.example.com"));
        let from_untrusted = map.clone();
        map.strip_hop_by_hop();
        let set = to_upstream(&map, &forwarded, host.clone(), None);
        let sent = as_sent(&map, &set);
        assert_eq!(sent["x-forwarded-for"], "203.0.113.1, 10.0.0.1, 127.0.0.1");
        let untrusted = Forwarded {
            peer_trusted: false,
            ..forwarded
        };
        let set = to_upstream(&from_untrusted, &untrusted, host, None);
        let sent_untrusted = as_sent(&from_untrusted, &set);
        assert_eq!(sent_untrusted["x-forwarded-for"], "127.0.0.1");
        for sent in [&sent, &sent_untrusted] {
            assert_eq!(sent.get_all("x-forwarded-for").iter().count(), 1);
            assert_eq!(sent.get_all("x-forwarded-proto").iter().count(), 1);
            assert_eq!(sent["x-forwarded-proto"], "http");
            assert_eq!(sent["x-forwarded-host"], "api.example.com");
            assert_eq!(sent["host"], "api.example.com");
            assert_eq!(sent["x-request-id"], "id-1");
        }
    }

    #[test]
    fn an_answer_read_for_usage_is_asked_for_without_a_content_coding() {
        let id = RequestId::Kept(HeaderValue::from_static("id"));
        let peer = HeaderValue::from_static("192.0.2.7");
        let client = [
            ("accept-encoding", "gzip, br"),
            ("Accept-Encoding", "zstd"),
            ("ACCEPT-ENCODING", "identity;q=0"),
        ];
        for fields in both(&client) {
            let plain = Forwarded {
                plain_answer: true,
                ..asked_by(&peer, &id, false)
            };
            let sent = as_sent(&fields, &to_upstream(&fields, &plain, None, None));
            let codings: Vec<_> = sent.get_all("accept-encoding").iter().collect();
            assert_eq!(codings, ["identity"]);
            // Otherwise the client's own go upstream as they are.
            let asked = asked_by(&peer, &id, false);
            let sent = as_sent(&fields, &to_upstream(&fields, &asked, None, None));
            assert_eq!(sent.get_all("accept-encoding").iter().count(), 3);
        }
    }

    #[test]
    fn the_host_asked_for_goes_first_and_is_repeated_in_x_forwarded_host() {
        let id = RequestId::Kept(HeaderValue::from_static("id"));
        let peer = HeaderValue::from_static("192.0.2.7");
        let forwarded = Forwarded {
            proto: "https",
            ..asked_by(&peer, &id, false)
        };
        for fields in both(&[("accept", "*/*")]) {
            let host = Bytes::from_static(b"api.example.com:8443");
            let set = to_upstream(&fields, &forwarded, Some(host), None);
            let get = crate::upstream::exchange::UpstreamHead::get("/");
            let mut head = Vec::new();
            encode_request_head(&mut head, &get.method, &get.target, &fields, &set, None);
            let text = String::from_utf8(head).unwrap();
            assert!(
                text.starts_with("GET / HTTP/1.1\r\nhost: api.example.com:8443\r\n"),
                "{text}"
            );
            let sent = as_sent(&fields, &set);
            assert_eq!(sent.get_all("host").iter().count(), 1);
            assert_eq!(sent["x-forwarded-host"], "api.example.com:8443");
            let unnamed = to_upstream(&fields, &forwarded, None, None);
            let sent = as_sent(&fields, &unnamed);
            assert!(!sent.contains_key("host") && !sent.contains_key("x-forwarded-host"));
        }
    }

    #[test]
    fn upgrade_is_detected_and_kept_when_asked() {
        let asking = both(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ]);
        for map in asking {
            upgrade_is_kept(map);
        }
        for fields in both(&[("upgrade", "websocket")]) {
            assert!(!wants_upgrade(&fields));
        }
    }

    fn upgrade_is_kept(mut map: RequestFields) {
        assert!(wants_upgrade(&map));
        let id = RequestId::Kept(HeaderValue::from_static("id"));
        let peer = HeaderValue::from_static("::1");
        let forwarded = asked_by(&peer, &id, false);
        let protocol = map.value(&UPGRADE);
        map.strip_hop_by_hop();
        let set = to_upstream(&map, &forwarded, None, protocol);
        let sent = as_sent(&map, &set);
        assert_eq!(sent["connection"], "upgrade");
        assert_eq!(sent["upgrade"], "websocket");
        assert_eq!(sent.get_all("connection").iter().count(), 1);
    }
}
