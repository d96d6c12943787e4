//! The gateway's own HTTP/1 server (src/server/http1/), on raw sockets: pipelining with and
//! without bodies, response framing, the fields it adds, malformed heads and `Connection:
//! close`. tests/it/server/http1_bodies.rs has 100-continue, HEAD, HTTP/1.0 and upgrades.

use crate::support;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One response as read off the socket.
#[derive(Debug)]
struct Answer {
    status: u16,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn all(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn one(&self, name: &str) -> &str {
        match self.all(name)[..] {
            [value] => value,
            ref values => panic!("{name}: {values:?} in {self:?}"),
        }
    }
}

async fn fill(stream: &mut TcpStream, buf: &mut BytesMut) {
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read_buf(buf))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    assert!(
        n > 0,
        "closed mid-answer: {:?}",
        String::from_utf8_lossy(buf)
    );
}

/// Reads one response (to a request that was not HEAD) from `stream`, `buf` holding what was
/// read ahead.
async fn read_answer(stream: &mut TcpStream, buf: &mut BytesMut) -> Answer {
    let (status, fields, length) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut head = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(length) = head.parse(buf).unwrap() {
            let fields: Vec<(String, String)> = head
                .headers
                .iter()
                .map(|h| {
                    let value = String::from_utf8(h.value.to_vec()).unwrap();
                    (h.name.to_ascii_lowercase(), value)
                })
                .collect();
            break (head.code.unwrap(), fields, length);
        }
        fill(stream, buf).await;
    };
    let _ = buf.split_to(length);
    let mut answer = Answer {
        status,
        fields,
        body: Vec::new(),
    };
    if status == 204 || status == 304 {
        return answer;
    }
    if answer.all("transfer-encoding") == ["chunked"] {
        loop {
            let line_end = loop {
                if let Some(at) = buf.windows(2).position(|w| w == b"\r\n") {
                    break at;
                }
                fill(stream, buf).await;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap(), 16).unwrap();
            while buf.len() < line_end + 2 + size + 2 {
                fill(stream, buf).await;
            }
            let _ = buf.split_to(line_end + 2);
            answer.body.extend_from_slice(&buf.split_to(size));
            assert_eq!(&buf.split_to(2)[..], b"\r\n");
            if size == 0 {
                return answer;
            }
        }
    }
    let length: usize = answer.one("content-length").parse().unwrap();
    while buf.len() < length {
        fill(stream, buf).await;
    }
    answer.body = buf.split_to(length).to_vec();
    answer
}

/// A gateway in front of `upstream` whose route has one memory-store limit per API key.
async fn limited_gateway(upstream: &TestUpstream, name: &str, rate: &str) -> TestGateway {
    let config = format!(
        "[store]\nbackend = \"memory\"\n[[limits]]\nname = \"{name}\"\nkey = [\"header:x-api-key\"]\nrates = [{rate}]\n{}limits = [\"{name}\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    TestGateway::start(&config).await
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let upstream = echo_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let requests: String = ["/a", "/b", "/c"]
        .iter()
        .map(|path| format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"))
        .collect();
    stream.write_all(requests.as_bytes()).await.unwrap();
    let mut buf = BytesMut::new();
    let mut ids = Vec::new();
    for path in ["/a", "/b", "/c"] {
        let answer = read_answer(&mut stream, &mut buf).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, format!("GET {path} ").as_bytes());
        assert_eq!(answer.one("content-length"), "7");
        assert!(answer.one("date").ends_with(" GMT"), "{answer:?}");
        ids.push(answer.one("x-request-id").to_string());
    }
    ids.dedup();
    assert_eq!(ids.len(), 3, "each request has an id of its own");
}

#[tokio::test]
async fn requests_with_bodies_are_answered_in_order_with_the_requests_behind_them() {
    let upstream = echo_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    // A plain GET, a body, a chunked upload, then a plain GET again, all in one write.
    let requests = concat!(
        "GET /first HTTP/1.1\r\nHost: t\r\n\r\n",
        "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
        "PUT /chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "GET /last HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    stream.write_all(requests.as_bytes()).await.unwrap();
    let mut buf = BytesMut::new();
    for expected in [
        &b"GET /first "[..],
        b"POST /upload hello",
        b"PUT /chunked abc",
        b"GET /last ",
    ] {
        let answer = read_answer(&mut stream, &mut buf).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.body, expected);
        answer.one("x-request-id");
    }
}

#[tokio::test]
async fn responses_keep_their_framing_and_a_bodiless_status_has_no_body() {
    let upstream = TestUpstream::start(|request| async move {
        match request.uri().path() {
            "/streamed" => {
                let frames = ["one,", "two,", "three"]
                    .map(|piece| Ok::<_, std::io::Error>(Frame::data(Bytes::from(piece))));
                let body = StreamBody::new(futures_util::stream::iter(frames));
                Response::new(body.map_err(|e| e.into()).boxed())
            }
            "/empty" => {
                let mut response = Response::new(empty());
                *response.status_mut() = StatusCode::NO_CONTENT;
                response
            }
            "/not-modified" => {
                let mut response = Response::new(empty());
                *response.status_mut() = StatusCode::NOT_MODIFIED;
                response
            }
            _ => Response::new(full(vec![b'x'; 100_000])),
        }
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let mut buf = BytesMut::new();
    for path in [
        "/streamed",
        "/empty",
        "/large",
        "/not-modified",
        "/streamed",
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream, &mut buf).await;
        match path {
            "/streamed" => {
                assert_eq!(answer.status, 200);
                assert_eq!(answer.one("transfer-encoding"), "chunked");
                assert!(answer.all("content-length").is_empty());
                assert_eq!(answer.body, b"one,two,three");
            }
            "/large" => {
                assert_eq!(answer.one("content-length"), "100000");
                assert_eq!(answer.body, vec![b'x'; 100_000]);
            }
            _ => {
                assert!(answer.status == 204 || answer.status == 304, "{answer:?}");
                assert!(answer.all("transfer-encoding").is_empty(), "{answer:?}");
                if answer.status == 204 {
                    assert!(answer.all("content-length").is_empty(), "{answer:?}");
                }
            }
        }
    }
    assert!(buf.is_empty(), "nothing after the last answer: {buf:?}");
}

#[tokio::test]
async fn the_gateways_fields_replace_the_upstreams_over_each_protocol() {
    let upstream = TestUpstream::start(|_| async move {
        Response::builder()
            .header("x-request-id", "from-upstream")
            .header("ratelimit", "\"upstream\";r=9;t=9")
            .header("x-ratelimit-limit", "999")
            .header("x-upstream", "kept")
            .body(full("ok"))
            .unwrap()
    })
    .await;
    let gateway = limited_gateway(&upstream, "per-key", "{ limit = 100, per = \"1m\" }").await;
    let check = |fields: &dyn Fn(&str) -> Vec<String>, case: &str| {
        assert_eq!(fields("x-request-id"), ["from-client"], "{case}");
        assert_eq!(fields("x-ratelimit-limit"), ["100"], "{case}");
        let ratelimit = fields("ratelimit");
        assert_eq!(ratelimit.len(), 1, "{case}: {ratelimit:?}");
        assert!(
            ratelimit[0].starts_with("\"per-key"),
            "{case}: {ratelimit:?}"
        );
        assert_eq!(fields("x-upstream"), ["kept"], "{case}");
    };

    // Served here, and again on the same connection after a request with a body.
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let head = "Host: t\r\nX-Request-Id: from-client\r\nX-Api-Key: k\r\n";
    let requests =
        format!("GET / HTTP/1.1\r\n{head}\r\nPOST / HTTP/1.1\r\n{head}Content-Length: 0\r\n\r\n");
    stream.write_all(requests.as_bytes()).await.unwrap();
    let mut buf = BytesMut::new();
    for case in ["http/1.1 here", "http/1.1 after a body"] {
        let answer = read_answer(&mut stream, &mut buf).await;
        assert_eq!(answer.status, 200, "{case}: {answer:?}");
        let fields = |name: &str| answer.all(name).iter().map(|v| v.to_string()).collect();
        check(&fields, case);
    }

    // HTTP/2 (h2c prior knowledge), hyper's.
    let mut sender = h2c_sender(gateway.addr).await;
    let request = Request::get("http://t/")
        .header("x-request-id", "from-client")
        .header("x-api-key", "k")
        .body(empty())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let fields = |name: &str| {
        response
            .headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    };
    check(&fields, "h2");
}

#[tokio::test]
async fn a_denial_carries_its_fields_once_and_the_connection_stays_open() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = limited_gateway(&upstream, "tight", "{ limit = 1, per = \"1h\" }").await;
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let request = "GET / HTTP/1.1\r\nHost: t\r\nX-Api-Key: k\r\n\r\n";
    stream
        .write_all(request.repeat(3).as_bytes())
        .await
        .unwrap();
    let mut buf = BytesMut::new();
    let statuses = [200, 429, 429];
    for expected in statuses {
        let answer = read_answer(&mut stream, &mut buf).await;
        assert_eq!(answer.status, expected, "{answer:?}");
        answer.one("x-request-id");
        answer.one("ratelimit-policy");
        if expected == 429 {
            assert_eq!(answer.one("content-type"), "application/problem+json");
            let wait: u64 = answer.one("retry-after").parse().unwrap();
            assert!((3500..=3600).contains(&wait), "{wait}");
            let problem: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
            assert_eq!(problem["status"], 429);
        }
    }

    // The same denial through hyper (HTTP/2): its content type is set from the body too.
    let mut sender = h2c_sender(gateway.addr).await;
    let request = Request::get("http://t/")
        .header("x-api-key", "k")
        .body(empty())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let types: Vec<_> = response.headers().get_all("content-type").iter().collect();
    assert_eq!(types, ["application/problem+json"]);
    assert_eq!(response.headers().get_all("retry-after").iter().count(), 1);
}

#[tokio::test]
async fn a_malformed_head_gets_a_400_and_connection_close_is_honoured() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;

    let malformed = b"GET / HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n";
    let text = exchange_until_closed(gateway.addr, malformed).await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");

    let closing = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let text = exchange_until_closed(gateway.addr, closing).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\r\n\r\nok"), "{text}");
}

/// RFC 9110 §15.6.6: 505 only for a well-formed version of another major version; a
/// malformed request line is a 400 (RFC 9112 §3), and HTTP/1.2 is served as HTTP/1.1
/// (RFC 9110 §2.5).
#[tokio::test]
async fn a_request_line_gets_505_only_for_another_major_version_and_http_1_2_is_served() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let lines = [
        ("GET / HTTP/2.0", 505),
        ("GET / HTTP/3.0", 505),
        ("GET / HTTP/1.x", 400),
        ("GET / HTTP/1", 400),
        ("GET / http/1.1", 400),
        ("GET / HTTP/1.10", 400),
        ("GET / HTTP/2", 400),
        ("GET / ", 400),
        ("GET /", 400),
    ];
    for (line, status) in lines {
        let head = format!("{line}\r\nHost: t\r\n\r\n");
        let text = exchange_until_closed(gateway.addr, head.as_bytes()).await;
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status} ")),
            "{line:?}: {text}"
        );
    }
    assert_eq!(upstream.hits(), 0);
    let higher = b"GET / HTTP/1.2\r\nHost: t\r\nConnection: close\r\n\r\n";
    let text = exchange_until_closed(gateway.addr, higher).await;
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.ends_with("\r\n\r\nok"), "{text}");
    assert_eq!(upstream.hits(), 1);
}

/// The fields of each request an upstream got, as hyper read them there.
async fn recording_upstream() -> (
    TestUpstream,
    tokio::sync::mpsc::UnboundedReceiver<http::HeaderMap>,
) {
    let (seen, received) = tokio::sync::mpsc::unbounded_channel();
    let upstream = TestUpstream::start(move |request| {
        let _ = seen.send(request.headers().clone());
        async { Response::new(full("ok")) }
    })
    .await;
    (upstream, received)
}

#[tokio::test]
async fn the_clients_fields_reach_the_upstream_alike_whatever_connection_names() {
    let (upstream, mut seen) = recording_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    // Mixed case, hop-by-hop fields, a spoofed X-Forwarded-For, two Cookie lines, a line
    // ended by a bare LF; the same request with `Connection` naming a field of its own, too.
    let fields = "Host: api.example.com\r\nKeep-Alive: timeout=5\r\nX-End-To-End: kept\r\n\
                  PROXY-Authorization: Basic abc\r\nTrailer: x-sum\r\nCookie: a=1\r\n\
                  X-Forwarded-For: 203.0.113.9\r\nx-request-id: trace-own\r\nX-Bare: lf\n\
                  cookie: b=2\r\nX-Forwarded-Proto: gopher\r\nX-Last: 1\r\n";
    let mut received = Vec::new();
    for connection in ["keep-alive", "keep-alive, x-hop"] {
        let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
        let request = format!("GET /f HTTP/1.1\r\nConnection: {connection}\r\n{fields}\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream, &mut BytesMut::new()).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.one("x-request-id"), "trace-own");
        received.push(seen.recv().await.expect("the upstream saw the request"));
    }
    let [own, naming] = &received[..] else {
        panic!("{received:?}")
    };
    assert_eq!(own, naming);
    for gone in [
        "connection",
        "keep-alive",
        "proxy-authorization",
        "trailer",
        "x-hop",
    ] {
        assert!(
            own.get(gone).is_none(),
            "{gone} reached the upstream: {own:?}"
        );
    }
    let values = |name: &str| {
        own.get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(values("cookie"), ["a=1", "b=2"]);
    assert_eq!(values("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(values("x-forwarded-proto"), ["http"]);
    // Written from the request's own Host line.
    assert_eq!(values("x-forwarded-host"), ["api.example.com"]);
    assert_eq!(values("x-request-id"), ["trace-own"]);
    assert_eq!(values("x-bare"), ["lf"]);
    assert_eq!(values("x-last"), ["1"]);
    assert_eq!(values("host"), ["api.example.com"]);
}
