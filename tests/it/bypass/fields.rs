//! No way around a limit by spelling a request's fields differently (issue 30): what the
//! limiter counts is what the upstream receives, checked with raw bytes against a recording
//! upstream, through the own HTTP/1.1 server, hyper's HTTP/1.1 server and HTTP/2.

use crate::support;

use support::recording::*;
use support::*;

/// A gateway whose catch-all route is limited per `X-API-Key` (`missing` as given), 3 a minute,
/// in front of `upstream`; `extra` is added to the config.
async fn keyed_gateway(upstream: &TestUpstream, missing: &str, extra: &str) -> TestGateway {
    let config = format!(
        "{extra}\n[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nmissing = \"{missing}\"\n\
         rates = [{{ limit = 3, per = \"1m\" }}]\n{}limits = [\"per-key\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    TestGateway::start(&config).await
}

#[tokio::test]
async fn a_key_named_in_connection_is_gone_before_it_is_counted() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = keyed_gateway(&upstream, "ip", "").await;
    let mut statuses = Vec::new();
    for i in 0..6 {
        let key = format!("throwaway-{i}");
        let fields = [
            ("Host", "api.test"),
            ("Connection", "x-api-key"),
            ("X-API-Key", key.as_str()),
        ];
        let raw = Raw {
            method: "GET",
            target: "/",
            fields: &fields,
        };
        statuses.push(status_via(gateway.addr, Via::Hyper, &raw).await);
    }
    // Counted by IP, the key being absent once the Connection-named field is gone.
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    let seen = drain(&mut received);
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter().all(|r| r.all("x-api-key").is_empty()),
        "{seen:?}"
    );

    let denying = keyed_gateway(&upstream, "deny", "").await;
    let fields = [
        ("Host", "api.test"),
        ("Connection", "X-Api-Key"),
        ("X-API-Key", "k"),
    ];
    assert_eq!(get_via(denying.addr, Via::Hyper, "/", &fields).await, 401);
    assert!(drain(&mut received).is_empty());
}

#[tokio::test]
async fn a_key_given_twice_is_refused_every_way_it_can_come() {
    let (upstream, mut received) = recording_upstream().await;
    let config = format!(
        "[[limits]]\nname = \"by-header\"\nkey = [\"header:x-api-key\"]\nrates = [{{ limit = 100, per = \"1m\" }}]\n\
         [[limits]]\nname = \"by-query\"\nkey = [\"query:key\"]\nmissing = \"skip\"\nrates = [{{ limit = 100, per = \"1m\" }}]\n\
         [[limits]]\nname = \"by-cookie\"\nkey = [\"cookie:session\"]\nmissing = \"skip\"\nrates = [{{ limit = 100, per = \"1m\" }}]\n\
         {}limits = [\"by-header\", \"by-query\", \"by-cookie\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    let cases: [(&str, &[(&str, &str)]); 4] = [
        ("/", &[("X-API-Key", "random-1"), ("x-api-key", "real")]),
        ("/?key=random&key=real", &[("X-API-Key", "k")]),
        ("/?key=random&k%65y=real", &[("X-API-Key", "k")]),
        (
            "/",
            &[
                ("X-API-Key", "k"),
                ("Cookie", "session=random"),
                ("Cookie", "a=1; session=real"),
            ],
        ),
    ];
    for via in EVERY_WAY {
        for (target, extra) in cases {
            let mut fields = vec![("Host", "api.test")];
            fields.extend_from_slice(extra);
            let raw = Raw {
                method: "GET",
                target,
                fields: &fields,
            };
            let status = status_via(gateway.addr, via, &raw).await;
            assert!(refused(via, status), "{via:?} {target} {extra:?}: {status}");
        }
    }
    assert!(drain(&mut received).is_empty());
    // Once each, the same request passes.
    for via in EVERY_WAY {
        let fields = [
            ("Host", "api.test"),
            ("X-API-Key", "k"),
            ("Cookie", "session=s"),
        ];
        assert_eq!(
            get_via(gateway.addr, via, "/?key=v", &fields).await,
            200,
            "{via:?}"
        );
    }
}

#[tokio::test]
async fn a_query_key_is_counted_as_the_upstream_decodes_it() {
    let (upstream, mut received) = recording_upstream().await;
    let config = format!(
        "[[limits]]\nname = \"by-query\"\nkey = [\"query:key\"]\nrates = [{{ limit = 2, per = \"1m\" }}]\n{}limits = [\"by-query\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    let mut statuses = Vec::new();
    for target in ["/?key=abc", "/?k%65y=abc", "/?key=%61bc", "/?key=a%62c&x=1"] {
        let fields = [("Host", "api.test")];
        let raw = Raw {
            method: "GET",
            target,
            fields: &fields,
        };
        statuses.push(status_via(gateway.addr, Via::Own, &raw).await);
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(drain(&mut received).len(), 2);
}

#[tokio::test]
async fn methods_must_be_upper_case_tokens() {
    let (upstream, mut received) = recording_upstream().await;
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\
         [[limits]]\nname = \"signin\"\nkey = [\"ip\"]\nrates = [{{ limit = 2, per = \"1m\" }}]\n\
         [[routes]]\nname = \"signin\"\npath_prefix = \"/signin\"\nmethods = [\"POST\"]\nupstream = \"api\"\nlimits = [\"signin\"]\n\
         [[routes]]\nname = \"default\"\nupstream = \"api\"\n",
        upstream.url()
    );
    let gateway = TestGateway::start(&config).await;
    let fields = [("Host", "api.test")];
    for via in EVERY_WAY {
        for method in ["post", "Post", "P0ST"] {
            let raw = Raw {
                method,
                target: "/signin",
                fields: &fields,
            };
            let status = status_via(gateway.addr, via, &raw).await;
            assert!(refused(via, status), "{via:?} {method}: {status}");
        }
    }
    assert!(drain(&mut received).is_empty());
    let raw = Raw {
        method: "POST",
        target: "/signin",
        fields: &fields,
    };
    let mut statuses = Vec::new();
    for via in EVERY_WAY {
        statuses.push(status_via(gateway.addr, via, &raw).await);
    }
    assert_eq!(statuses, [200, 200, 429]);
}

#[tokio::test]
async fn underscored_names_never_reach_the_upstream_unless_allowed() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let fields = [
        ("Host", "api.test"),
        ("Transfer_Encoding", "chunked"),
        ("Content_Length", "5"),
        ("X_Api_Key", "k"),
        ("X-Kept", "1"),
    ];
    let raw = Raw {
        method: "GET",
        target: "/",
        fields: &fields,
    };
    for via in EVERY_WAY {
        assert_eq!(status_via(gateway.addr, via, &raw).await, 200, "{via:?}");
        let seen = drain(&mut received);
        assert!(
            seen[0].fields.iter().all(|(n, _)| !n.contains('_')),
            "{via:?} {seen:?}"
        );
        assert_eq!(seen[0].all("x-kept"), ["1"], "{via:?}");
    }
    let rejecting = TestGateway::start(&format!(
        "underscores_in_headers = \"reject\"\n{}",
        one_route_config(&[upstream.url()], "")
    ))
    .await;
    for via in EVERY_WAY {
        let status = status_via(rejecting.addr, via, &raw).await;
        assert!(refused(via, status), "{via:?}: {status}");
    }
    let allowing = TestGateway::start(&format!(
        "underscores_in_headers = \"allow\"\n{}",
        one_route_config(&[upstream.url()], "")
    ))
    .await;
    assert_eq!(status_via(allowing.addr, Via::Own, &raw).await, 200);
    let seen = drain(&mut received);
    assert_eq!(seen.last().unwrap().all("x_api_key"), ["k"]);
}

/// A gateway with a lenient route for `partner.example` and a limited catch-all (1 a minute
/// per IP).
async fn host_gateway(upstream: &TestUpstream) -> TestGateway {
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\
         [[limits]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrates = [{{ limit = 1, per = \"1m\" }}]\n\
         [[routes]]\nname = \"partner\"\nhost = \"partner.example\"\nupstream = \"api\"\n\
         [[routes]]\nname = \"default\"\nupstream = \"api\"\nlimits = [\"per-ip\"]\n",
        upstream.url()
    );
    TestGateway::start(&config).await
}

#[tokio::test]
async fn exactly_one_valid_host_and_the_upstream_gets_the_one_routed() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = host_gateway(&upstream).await;
    let bad: [&[(&str, &str)]; 6] = [
        &[("Host", "partner.example"), ("Host", "a")],
        &[],
        &[("Host", "partner.example, a")],
        &[("Host", "")],
        &[("Host", "partner.example/x")],
        &[("Host", "partner..example")],
    ];
    for via in [Via::Own, Via::Hyper] {
        for fields in bad {
            let raw = Raw {
                method: "GET",
                target: "/",
                fields,
            };
            let status = status_via(gateway.addr, via, &raw).await;
            assert_eq!(status, 400, "{via:?} {fields:?}");
        }
    }
    assert!(drain(&mut received).is_empty());
    // Spellings of the partner's host route there, and it is what the upstream gets.
    for (via, host) in [
        (Via::Own, "PARTNER.example"),
        (Via::Hyper, "partner.example."),
        (Via::H2, "Partner.Example:443"),
    ] {
        let fields = [("Host", host)];
        assert_eq!(
            get_via(gateway.addr, via, "/", &fields).await,
            200,
            "{via:?}"
        );
        let seen = drain(&mut received);
        let expected = if via == Via::H2 {
            "partner.example:443"
        } else {
            "partner.example"
        };
        assert_eq!(seen[0].all("host"), [expected], "{via:?}");
        assert_eq!(seen[0].all("x-forwarded-host"), [expected], "{via:?}");
    }
}

#[tokio::test]
async fn an_absolute_form_target_routes_and_forwards_by_its_authority() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = host_gateway(&upstream).await;
    let head = b"GET http://partner.example/x HTTP/1.1\r\nHost: other.example\r\n\r\n";
    for _ in 0..2 {
        assert_eq!(raw_status(gateway.addr, head).await, 200);
    }
    let seen = drain(&mut received);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].all("host"), ["partner.example"]);
    assert_eq!(seen[0].target, "/x");
}

#[tokio::test]
async fn an_http_2_host_must_name_the_authority() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = host_gateway(&upstream).await;
    let mut sender = h2c_sender(gateway.addr).await;
    let request = http::Request::get("http://api.test/")
        .header("host", "partner.example")
        .body(empty())
        .unwrap();
    let status = match sender.send_request(request).await {
        Ok(response) => response.status().as_u16(),
        Err(_) => RESET,
    };
    assert!(refused(Via::H2, status), "{status}");
    assert!(drain(&mut received).is_empty());
}

#[tokio::test]
async fn a_key_padded_with_blanks_over_http_2_is_refused() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = keyed_gateway(&upstream, "deny", "").await;
    for value in [" victim", "victim ", "\tvictim", " ", "victim\t"] {
        let fields = [("Host", "api.test"), ("x-api-key", value)];
        let status = get_via(gateway.addr, Via::H2, "/", &fields).await;
        assert!(refused(Via::H2, status), "{value:?}: {status}");
    }
    assert!(drain(&mut received).is_empty());
}

#[tokio::test]
async fn every_spelling_of_a_spent_cookie_is_that_cookie() {
    let (upstream, mut received) = recording_upstream().await;
    let config = format!(
        "[[limits]]\nname = \"per-session\"\nkey = [\"cookie:session\"]\nmissing = \"skip\"\n\
         rates = [{{ limit = 1, per = \"1m\" }}]\n{}limits = [\"per-session\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    let spent = "GET / HTTP/1.1\r\nHost: api.test\r\nCookie: session=S1\r\n\r\n";
    assert_eq!(raw_status(gateway.addr, spent.as_bytes()).await, 200);
    let spellings: [&[u8]; 6] = [
        b"Cookie: session=S1; t=\xe9",
        b"Cookie: a=1, session=S1",
        b"Cookie: session=%531",
        b"Cookie: session=\"\\1231\"",
        b"Cookie: s%65ssion=S1",
        b"Cookie: a=1\r\nCookie: session=\"S1\"",
    ];
    for spelling in spellings {
        let mut head = b"GET / HTTP/1.1\r\nHost: api.test\r\n".to_vec();
        head.extend_from_slice(spelling);
        head.extend_from_slice(b"\r\n\r\n");
        let text = String::from_utf8_lossy(spelling);
        assert_eq!(raw_status(gateway.addr, &head).await, 429, "{text}");
    }
    assert_eq!(drain(&mut received).len(), 1);
}

#[tokio::test]
async fn http_2_cookie_crumbs_reach_the_upstream_as_one_field() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let fields = [
        ("Host", "api.test"),
        ("cookie", "a=1"),
        ("cookie", "session=s"),
    ];
    assert_eq!(get_via(gateway.addr, Via::H2, "/", &fields).await, 200);
    assert_eq!(drain(&mut received)[0].all("cookie"), ["a=1; session=s"]);
}

#[tokio::test]
async fn overrides_of_method_path_and_client_never_reach_the_upstream() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let fields = [
        ("Host", "api.test"),
        ("X-HTTP-Method-Override", "DELETE"),
        ("X-HTTP-Method", "DELETE"),
        ("X-Method-Override", "DELETE"),
        ("X-Original-URL", "/admin"),
        ("X-Rewrite-URL", "/admin"),
        ("Forwarded", "for=192.0.2.1"),
        ("X-Real-IP", "192.0.2.1"),
        ("X-Kept", "1"),
    ];
    let raw = Raw {
        method: "GET",
        target: "/",
        fields: &fields,
    };
    for via in EVERY_WAY {
        assert_eq!(status_via(gateway.addr, via, &raw).await, 200, "{via:?}");
        let seen = drain(&mut received);
        let names: Vec<&str> = seen[0].fields.iter().map(|(n, _)| n.as_str()).collect();
        for gone in [
            "x-http-method-override",
            "x-http-method",
            "x-method-override",
            "x-original-url",
            "x-rewrite-url",
            "forwarded",
            "x-real-ip",
        ] {
            assert!(!names.contains(&gone), "{via:?}: {gone} in {names:?}");
        }
        assert_eq!(seen[0].all("x-kept"), ["1"], "{via:?}");
    }
}

#[tokio::test]
async fn a_host_with_two_trailing_dots_or_an_authority_form_target_is_refused() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = host_gateway(&upstream).await;
    for head in [
        "GET / HTTP/1.1\r\nHost: partner.example..\r\n\r\n",
        "GET partner.example HTTP/1.1\r\nHost: partner.example\r\n\r\n",
    ] {
        assert_eq!(
            raw_status(gateway.addr, head.as_bytes()).await,
            400,
            "{head}"
        );
    }
    assert!(drain(&mut received).is_empty());
}
