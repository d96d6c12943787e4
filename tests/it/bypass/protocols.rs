//! No way around a limit through the protocol (issue 30): request trailers, protocol
//! switches, the HTTP/2 preface mid-connection and malformed bodies, against recording
//! upstreams.

use crate::support;

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use support::recording::*;
use support::*;

#[tokio::test]
async fn judged_fields_never_cross_as_request_trailers() {
    let (upstream, mut received) = recording_upstream().await;
    let config = format!(
        "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrates = [{{ limit = 100, per = \"1m\" }}]\n{}limits = [\"per-key\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    let trailers = "Host: evil.example\r\nX-API-Key: other\r\nContent-Length: 99\r\n\
        Transfer-Encoding: chunked\r\nX-Forwarded-For: 192.0.2.1\r\nX_Sum: 1\r\nCookie: a=b\r\n\
        X-Checksum: abc\r\n";
    let request = format!(
        "POST /t HTTP/1.1\r\nHost: api.test\r\nX-API-Key: k\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\nhello\r\n0\r\n{trailers}\r\n"
    );
    assert_eq!(raw_status(gateway.addr, request.as_bytes()).await, 200);

    let mut sender = h2c_sender(gateway.addr).await;
    let mut h2_trailers = http::HeaderMap::new();
    for (name, value) in [
        ("host", "evil.example"),
        ("x-api-key", "other"),
        ("x-forwarded-for", "192.0.2.1"),
        ("x-checksum", "abc"),
    ] {
        h2_trailers.insert(name, value.parse().unwrap());
    }
    let frames = vec![
        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"hello"))),
        Ok(Frame::trailers(h2_trailers)),
    ];
    let body = http_body_util::BodyExt::map_err(
        StreamBody::new(futures_util::stream::iter(frames)),
        |e| match e {},
    );
    let request = http::Request::post("http://api.test/t")
        .header("x-api-key", "k")
        .body(http_body_util::BodyExt::boxed(body))
        .unwrap();
    assert_eq!(sender.send_request(request).await.unwrap().status(), 200);

    let seen = drain(&mut received);
    assert_eq!(seen.len(), 2);
    for request in seen {
        assert_eq!(&request.body[..], b"hello");
        assert_eq!(
            request.trailers,
            [("x-checksum".to_string(), "abc".to_string())]
        );
        assert_eq!(request.all("host"), ["api.test"]);
        assert_eq!(request.all("x-api-key"), ["k"]);
    }
}

async fn upgrade_gateway(upstream: SocketAddr, upgrades: &str) -> TestGateway {
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"http://{upstream}\"]\n\
         [[routes]]\nname = \"default\"\nupstream = \"api\"\n{upgrades}\n"
    );
    TestGateway::start(&config).await
}

#[tokio::test]
async fn h2c_is_never_passed_as_an_upgrade_and_a_101_to_it_is_a_502() {
    let (upstream, heads) = switching_upstream("h2c").await;
    let gateway = upgrade_gateway(upstream, "upgrades = [\"websocket\"]").await;
    let asking = b"GET / HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, HTTP2-Settings\r\n\
        Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n";
    assert_eq!(raw_status(gateway.addr, asking).await, 502);
    let websocket =
        b"GET / HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    // Offered websocket, the upstream switched to h2c: not a tunnel the gateway will open.
    assert_eq!(raw_status(gateway.addr, websocket).await, 502);
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2);
    let first = heads[0].to_ascii_lowercase();
    assert!(
        !first.contains("upgrade") && !first.contains("http2-settings"),
        "{first}"
    );
    assert!(
        heads[1].to_ascii_lowercase().contains("upgrade: websocket"),
        "{}",
        heads[1]
    );
}

#[tokio::test]
async fn only_the_routes_upgrades_are_passed() {
    let (upstream, heads) = switching_upstream("websocket").await;
    let websocket =
        b"GET / HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let allowing = upgrade_gateway(upstream, "").await;
    let answer = raw_answer(allowing.addr, websocket).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let refusing = upgrade_gateway(upstream, "upgrades = []").await;
    assert_eq!(raw_status(refusing.addr, websocket).await, 502);
    let heads = heads.lock().unwrap().clone();
    assert!(heads[0].to_ascii_lowercase().contains("upgrade: websocket"));
    assert!(
        !heads[1].to_ascii_lowercase().contains("upgrade"),
        "{}",
        heads[1]
    );
}

#[tokio::test]
async fn the_http_2_preface_after_an_http_1_request_is_not_http_2() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    // A request, then the preface and an empty SETTINGS frame, then an HTTP/2 HEADERS frame's
    // worth of bytes: none of it may become a stream of its own.
    let mut bytes =
        b"GET /first HTTP/1.1\r\nHost: api.test\r\n\r\nPRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let answer = exchange_until_closed(gateway.addr, &bytes).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    let rest = &answer[answer.find("ok").unwrap() + 2..];
    assert!(
        rest.is_empty() || rest.starts_with("HTTP/1.1 4"),
        "{rest:?}"
    );
    let targets: Vec<String> = drain(&mut received).into_iter().map(|r| r.target).collect();
    assert_eq!(targets, ["/first"]);
}

#[tokio::test]
async fn a_malformed_chunked_body_is_a_400() {
    let (upstream, _received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    for body in [
        "zz\r\nhello\r\n0\r\n\r\n",
        "5\r\nhelloXX0\r\n\r\n",
        "-1\r\nx\r\n0\r\n\r\n",
    ] {
        let request = format!(
            "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n{body}"
        );
        assert_eq!(
            raw_status(gateway.addr, request.as_bytes()).await,
            400,
            "{body:?}"
        );
    }
}

#[tokio::test]
async fn connect_is_never_forwarded() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    for head in [
        "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n",
        "CONNECT / HTTP/1.1\r\nHost: api.test\r\n\r\n",
    ] {
        assert_eq!(
            raw_status(gateway.addr, head.as_bytes()).await,
            400,
            "{head}"
        );
    }
    assert!(drain(&mut received).is_empty());
}

#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_not_implemented() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let request = "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
        5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(raw_status(gateway.addr, request.as_bytes()).await, 501);
    assert!(drain(&mut received).is_empty());
}

/// RFC 9110 §9.3.8: TRACE echoes the request, the gateway's fields with it, to the client;
/// nginx answers it 405. Refused every way (405 with `Allow`, RFC 9110 §15.5.6) unless
/// `[server] allow_trace = true`, which forwards it.
#[tokio::test]
async fn trace_is_a_405_unless_allowed_then_forwarded() {
    let (upstream, mut received) = recording_upstream().await;
    let routes = one_route_config(&[upstream.url()], "");
    let refusing = TestGateway::start(&routes).await;
    let trace = Raw {
        method: "TRACE",
        target: "/echo",
        fields: &[("Host", "api.test")],
    };
    for via in EVERY_WAY {
        assert_eq!(status_via(refusing.addr, via, &trace).await, 405, "{via:?}");
    }
    let answer = raw_answer(refusing.addr, http1_head(Via::Own, &trace).as_bytes()).await;
    let allow = answer.lines().find_map(|l| l.strip_prefix("allow: "));
    assert_eq!(
        allow,
        Some("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"),
        "{answer}"
    );
    assert!(drain(&mut received).is_empty());
    let forwarding = TestGateway::start(&format!("allow_trace = true\n{routes}")).await;
    for via in EVERY_WAY {
        assert_eq!(
            status_via(forwarding.addr, via, &trace).await,
            200,
            "{via:?}"
        );
    }
    let methods: Vec<String> = drain(&mut received).into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["TRACE"; 3]);
}

#[tokio::test]
async fn an_http2_scheme_other_than_http_or_https_is_refused_and_nothing_forwarded() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let mut sender = h2c_sender(gateway.addr).await;
    for (target, status) in [
        ("ftp://api.test/t", 400),
        ("gopher://api.test/t", 400),
        ("HTTPS://api.test/t", 200),
        ("http://api.test/t", 200),
    ] {
        let request = http::Request::get(target).body(empty()).unwrap();
        let answer = sender.send_request(request).await.unwrap();
        assert_eq!(answer.status(), status, "{target}");
    }
    assert_eq!(drain(&mut received).len(), 2);
}

#[tokio::test]
async fn an_absolute_form_target_with_no_path_reaches_the_upstream_as_slash() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    for (target, expected) in [
        ("http://api.test?key=1", "/?key=1"),
        ("http://api.test", "/"),
        ("http://api.test/?key=1", "/?key=1"),
    ] {
        let raw = format!("GET {target} HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_eq!(
            raw_status(gateway.addr, raw.as_bytes()).await,
            200,
            "{target}"
        );
        let seen = drain(&mut received);
        assert_eq!(seen.len(), 1, "{target}");
        assert_eq!(seen[0].target, expected, "{target}");
    }
}
