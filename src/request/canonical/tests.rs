use super::*;
use crate::http1::request_fields::tests::{lines_of, map_like};

fn policy(underscores: Underscores) -> Policy {
    Policy {
        escaped_slashes: EscapedSlashes::Keep,
        underscores,
        allow_trace: false,
        trailers: Arc::new(TrailerFilter::new(Vec::new(), underscores)),
    }
}

/// A request with `head`'s method, target and fields, as the own server and as hyper record
/// it (`version` overrides what the head says, for HTTP/2).
fn both(head: &str, version: Version) -> [ProxyRequest; 2] {
    let lines = lines_of(head.as_bytes());
    let map = map_like(&lines);
    let mut words = head.split(' ');
    let method = Method::from_bytes(words.next().unwrap().as_bytes()).unwrap();
    let uri: Uri = words.next().unwrap().parse().unwrap();
    [lines, RequestFields::Map(map)].map(|fields| ProxyRequest {
        method: method.clone(),
        uri: uri.clone(),
        version,
        fields,
        upgrade: None,
        body: crate::request::canonical::ArrivingBody::None,
    })
}

fn canonical(head: &str, version: Version) -> Vec<Result<Request, BadRequest>> {
    both(head, version)
        .into_iter()
        .map(|raw| canonicalize(raw, &policy(Underscores::Drop)))
        .collect()
}

fn refusal(head: &str, version: Version) -> BadRequest {
    let results = canonical(head, version);
    let errors: Vec<BadRequest> = results.into_iter().map(|r| r.err().expect(head)).collect();
    assert_eq!(errors[0], errors[1], "{head}");
    errors[0].clone()
}

#[test]
fn a_canonical_request_has_one_host_a_canonical_path_and_no_hop_by_hop_fields() {
    let head = "GET //v1/./Items/%7e?key=A%20b HTTP/1.1\r\nHost: API.Example.com.:80\r\n\
        Connection: keep-alive, X-Api-Key\r\nX-Api-Key: throwaway\r\nKeep-Alive: 5\r\nAccept: */*\r\n\r\n";
    for request in canonical(head, Version::HTTP_11) {
        let request = request.unwrap();
        let host = request.host.unwrap();
        assert_eq!(host.as_bytes(), b"api.example.com:80");
        assert_eq!(host.name(), b"api.example.com");
        assert_eq!(request.target.as_str(), "/v1/Items/~?key=A%20b");
        assert_eq!(request.fields.pairs(), [("accept".into(), "*/*".into())]);
    }
}

#[test]
fn methods_must_be_upper_case_tokens() {
    for method in ["post", "Get", "M1", "GET!"] {
        let head = format!("{method} / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(
            matches!(refusal(&head, Version::HTTP_11), BadRequest::Method(_)),
            "{method}"
        );
    }
    for method in ["PURGE", "VERSION-CONTROL", "X_Y"] {
        let head = format!("{method} / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(
            canonical(&head, Version::HTTP_11).iter().all(Result::is_ok),
            "{method}"
        );
    }
}

#[test]
fn http_1_1_needs_exactly_one_valid_host() {
    let cases = [
        ("GET / HTTP/1.1\r\n\r\n", BadRequest::MissingHost),
        (
            "GET / HTTP/1.1\r\nHost: partner.example\r\nHost: a\r\n\r\n",
            BadRequest::RepeatedHost,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a, b\r\n\r\n",
            BadRequest::Host(HostError::Invalid),
        ),
        (
            "GET / HTTP/1.1\r\nHost:\r\n\r\n",
            BadRequest::Host(HostError::Empty),
        ),
        (
            "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            BadRequest::Host(HostError::Invalid),
        ),
    ];
    for (head, expected) in cases {
        assert_eq!(refusal(head, Version::HTTP_11), expected, "{head}");
    }
}

#[test]
fn an_absolute_form_authority_wins_over_host() {
    let head = "GET http://Target.example:8080/a/../b HTTP/1.1\r\nHost: other.example\r\n\r\n";
    for request in canonical(head, Version::HTTP_11) {
        let request = request.unwrap();
        assert_eq!(request.host.unwrap().as_bytes(), b"target.example:8080");
        assert_eq!(request.target.as_str(), "/b");
    }
    let userinfo = "GET http://user@target.example/ HTTP/1.1\r\nHost: target.example\r\n\r\n";
    assert_eq!(
        refusal(userinfo, Version::HTTP_11),
        BadRequest::Host(HostError::UserInfo)
    );
    let no_path = "GET http://target.example HTTP/1.1\r\nHost: target.example\r\n\r\n";
    for request in canonical(no_path, Version::HTTP_11) {
        assert_eq!(request.unwrap().target.as_str(), "/");
    }
    // An empty path with a query asks for "/" too: the upstream never gets `GET ?key=1`.
    let no_path = "GET http://target.example?key=1 HTTP/1.1\r\nHost: target.example\r\n\r\n";
    for request in canonical(no_path, Version::HTTP_11) {
        assert_eq!(request.unwrap().target.as_str(), "/?key=1");
    }
}

#[test]
fn http_1_0_may_name_no_host() {
    for request in canonical("GET /x HTTP/1.0\r\n\r\n", Version::HTTP_10) {
        assert!(request.unwrap().host.is_none());
    }
}

#[test]
fn http_2_authority_and_host_must_agree() {
    let agreeing = "GET http://api.example/x HTTP/1.1\r\nhost: API.example\r\n\r\n";
    for request in canonical(agreeing, Version::HTTP_2) {
        assert_eq!(request.unwrap().host.unwrap().as_bytes(), b"api.example");
    }
    let other = "GET http://api.example/x HTTP/1.1\r\nhost: partner.example\r\n\r\n";
    assert_eq!(
        refusal(other, Version::HTTP_2),
        BadRequest::AuthorityMismatch
    );
    let twice =
        "GET http://api.example/x HTTP/1.1\r\nhost: api.example\r\nhost: api.example\r\n\r\n";
    assert_eq!(refusal(twice, Version::HTTP_2), BadRequest::RepeatedHost);
    assert_eq!(
        refusal("GET /x HTTP/1.1\r\n\r\n", Version::HTTP_2),
        BadRequest::MissingHost
    );
}

#[test]
fn underscored_names_are_dropped_kept_or_refused() {
    let head = "POST / HTTP/1.1\r\nHost: a\r\nTransfer_Encoding: chunked\r\nX-A: 1\r\n\r\n";
    for request in canonical(head, Version::HTTP_11) {
        assert_eq!(
            request.unwrap().fields.pairs(),
            [("x-a".into(), "1".into())]
        );
    }
    for raw in both(head, Version::HTTP_11) {
        let kept = canonicalize(raw, &policy(Underscores::Allow)).unwrap();
        assert_eq!(kept.fields.pairs().len(), 2);
    }
    for raw in both(head, Version::HTTP_11) {
        let refused = canonicalize(raw, &policy(Underscores::Reject))
            .err()
            .unwrap();
        assert!(
            matches!(refused, BadRequest::Underscore(name) if name.eq_ignore_ascii_case("transfer_encoding"))
        );
    }
}

#[test]
fn an_upgrade_is_read_before_the_hop_by_hop_fields_go() {
    let head = "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    for request in canonical(head, Version::HTTP_11) {
        let request = request.unwrap();
        assert_eq!(request.upgrade.unwrap().protocols, "websocket");
        assert!(request.fields.pairs().is_empty());
    }
    let unasked = "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n";
    for request in canonical(unasked, Version::HTTP_11) {
        assert!(request.unwrap().upgrade.is_none());
    }
}

#[test]
fn connect_is_refused_in_any_form() {
    for head in [
        "CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n",
        "CONNECT /x HTTP/1.1\r\nHost: api.example\r\n\r\n",
    ] {
        assert_eq!(
            refusal(head, Version::HTTP_11),
            BadRequest::Connect,
            "{head}"
        );
    }
}

#[test]
fn trace_is_refused_unless_allowed_over_either_protocol() {
    let head = "TRACE /x HTTP/1.1\r\nHost: api.example\r\n\r\n";
    for version in [Version::HTTP_11, Version::HTTP_2] {
        assert_eq!(refusal(head, version), BadRequest::Trace, "{version:?}");
        let allowing = Policy {
            allow_trace: true,
            ..policy(Underscores::Drop)
        };
        for raw in both(head, version) {
            let request = canonicalize(raw, &allowing).unwrap();
            assert_eq!(request.method, Method::TRACE);
        }
    }
    // Methods are case-sensitive (RFC 9110 §9.1): `trace` is refused as any lower-case one.
    let lower = "trace /x HTTP/1.1\r\nHost: api.example\r\n\r\n";
    assert!(matches!(
        refusal(lower, Version::HTTP_11),
        BadRequest::Method(_)
    ));
}

#[test]
fn malformed_targets_are_refused() {
    for target in ["/a%zz", "/a%00", "/a\\b", "/x/..;/login", "*"] {
        let head = format!("OPTIONS {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(
            matches!(refusal(&head, Version::HTTP_11), BadRequest::Path(_)),
            "{target}"
        );
    }
}
