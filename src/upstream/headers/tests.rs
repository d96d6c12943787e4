use super::*;
use crate::http1::encode::encode_request_head;
use crate::http1::fields::strip_hop_by_hop;
use crate::request::canonical::wants_upgrade;
use crate::request::client_fields::{REMOVED_BY_DEFAULT, Writes};
use crate::request::client_ip::ForwardHeader;
use http::HeaderMap;
use http::header::UPGRADE;
use std::sync::LazyLock;

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
    static DEFAULT_FIELDS: LazyLock<Arc<ClientFields>> = LazyLock::new(Arc::default);
    Forwarded {
        peer,
        peer_trusted: trusted,
        client_ip: IpAddr::from([192, 0, 2, 1]),
        client_fields: &DEFAULT_FIELDS,
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
fn an_answer_read_for_usage_is_asked_for_whole_without_a_content_coding() {
    let id = RequestId::Kept(HeaderValue::from_static("id"));
    let peer = HeaderValue::from_static("192.0.2.7");
    let client = [
        ("accept-encoding", "gzip, br"),
        ("Accept-Encoding", "zstd"),
        ("ACCEPT-ENCODING", "identity;q=0"),
        ("Range", "bytes=8-35"),
        ("if-RANGE", "\"v1\""),
    ];
    for fields in both(&client) {
        let plain = Forwarded {
            plain_answer: true,
            ..asked_by(&peer, &id, false)
        };
        let sent = as_sent(&fields, &to_upstream(&fields, &plain, None, None));
        let codings: Vec<_> = sent.get_all("accept-encoding").iter().collect();
        assert_eq!(codings, ["identity"]);
        assert!(!sent.contains_key("range") && !sent.contains_key("if-range"));
        // Otherwise the client's own go upstream as they are.
        let asked = asked_by(&peer, &id, false);
        let sent = as_sent(&fields, &to_upstream(&fields, &asked, None, None));
        assert_eq!(sent.get_all("accept-encoding").iter().count(), 3);
        assert_eq!(sent["range"], "bytes=8-35");
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

/// The default list with `source` configured and `writes` written by the gateway.
fn client_fields(source: ForwardHeader, writes: Writes) -> Arc<ClientFields> {
    let listed = REMOVED_BY_DEFAULT.iter().copied();
    let listed = listed.map(HeaderName::from_static).collect();
    Arc::new(ClientFields::new(listed, source, writes))
}

#[test]
fn claims_of_who_the_client_is_go_and_the_gateway_writes_those_configured() {
    let id = RequestId::Kept(HeaderValue::from_static("id"));
    let peer = HeaderValue::from_static("10.0.0.1");
    let claims = [
        ("tRuE-cLiEnT-iP", "6.6.6.6"),
        ("X-Real-IP", "6.6.6.6"),
        ("x-real-ip", "7.7.7.7"),
        ("Forwarded", "for=6.6.6.6"),
        ("X-Original-Method", "DELETE"),
        ("x-kept", "1"),
    ];
    let writes = Writes {
        x_real_ip: true,
        forwarded: true,
    };
    let written = client_fields(ForwardHeader::XForwardedFor, writes);
    let silent = client_fields(ForwardHeader::XForwardedFor, Writes::default());
    for fields in both(&claims) {
        let forwarded = Forwarded {
            client_ip: "2001:db8::7".parse().unwrap(),
            client_fields: &written,
            ..asked_by(&peer, &id, true)
        };
        let sent = as_sent(&fields, &to_upstream(&fields, &forwarded, None, None));
        assert!(!sent.contains_key("true-client-ip") && !sent.contains_key("x-original-method"));
        assert_eq!(
            sent.get_all("x-real-ip").iter().collect::<Vec<_>>(),
            ["2001:db8::7"]
        );
        assert_eq!(
            sent.get_all("forwarded").iter().collect::<Vec<_>>(),
            ["for=\"[2001:db8::7]\""]
        );
        assert_eq!(sent["x-kept"], "1");
        let forwarded = Forwarded {
            client_fields: &silent,
            ..forwarded
        };
        let sent = as_sent(&fields, &to_upstream(&fields, &forwarded, None, None));
        assert!(!sent.contains_key("x-real-ip") && !sent.contains_key("forwarded"));
        assert_eq!(sent["x-forwarded-for"], "10.0.0.1");
    }
}

#[test]
fn a_trusted_proxys_configured_field_goes_on_as_it_came() {
    let id = RequestId::Kept(HeaderValue::from_static("id"));
    let peer = HeaderValue::from_static("10.0.0.1");
    let fields = client_fields(ForwardHeader::Forwarded, Writes::default());
    for map in both(&[("Forwarded", "for=203.0.113.9"), ("X-Real-IP", "6.6.6.6")]) {
        for trusted in [true, false] {
            let forwarded = Forwarded {
                client_fields: &fields,
                ..asked_by(&peer, &id, trusted)
            };
            let sent = as_sent(&map, &to_upstream(&map, &forwarded, None, None));
            let expected: &[&str] = if trusted { &["for=203.0.113.9"] } else { &[] };
            assert_eq!(
                sent.get_all("forwarded").iter().collect::<Vec<_>>(),
                expected
            );
            assert!(!sent.contains_key("x-real-ip"), "{trusted}");
        }
    }
}
