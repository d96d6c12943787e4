//! The gateway's HTTP/1.1 client side against hand-written upstreams: every way an upstream
//! may frame a response, the answers it must refuse, how request bodies are framed, and when
//! a request goes again after its pooled connection turned out closed.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the upstream received it.
#[derive(Clone, Debug)]
struct Received {
    /// Request line and fields, lowercased.
    head: String,
    body: Vec<u8>,
    /// Which request this is on its connection, from 0.
    on_connection: usize,
}

/// What the upstream does with a request.
enum Answer {
    /// These bytes, then the next request on the same connection.
    Send(Vec<u8>),
    /// These bytes, then close.
    SendAndClose(Vec<u8>),
    /// Close without a word.
    Close,
    /// Keep the connection open and never answer.
    Hang,
}

type Script = Arc<dyn Fn(&Received) -> Answer + Send + Sync>;

/// An upstream that reads whole requests (Content-Length or chunked bodies) and answers
/// each as `script` says, recording what it received.
struct ScriptedUpstream {
    url: String,
    accepted: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedUpstream {
    async fn start(script: impl Fn(&Received) -> Answer + Send + Sync + 'static) -> Self {
        let script: Script = Arc::new(script);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (counting, recording) = (accepted.clone(), received.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counting.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, script.clone(), recording.clone()));
            }
        });
        ScriptedUpstream {
            url,
            accepted,
            received,
            task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for ScriptedUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, script: Script, recording: Arc<Mutex<Vec<Received>>>) {
    let mut buffer = Vec::new();
    for on_connection in 0.. {
        let Some(request) = read_request(&mut stream, &mut buffer, on_connection).await else {
            return;
        };
        recording.lock().unwrap().push(request.clone());
        match script(&request) {
            Answer::Send(bytes) => {
                if stream.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Answer::SendAndClose(bytes) => {
                let _ = stream.write_all(&bytes).await;
                return;
            }
            Answer::Close => return,
            Answer::Hang => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                return;
            }
        }
    }
}

async fn read_request(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
    on_connection: usize,
) -> Option<Received> {
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        fill(stream, buffer).await?;
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    buffer.drain(..head_end);
    let field = |name: &str| {
        head.lines()
            .find_map(|line| line.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    let body = if field("transfer-encoding:").as_deref() == Some("chunked") {
        read_chunked(stream, buffer).await?
    } else {
        let length: usize = field("content-length:").map_or(0, |v| v.parse().unwrap());
        while buffer.len() < length {
            fill(stream, buffer).await?;
        }
        buffer.drain(..length).collect()
    };
    Some(Received {
        head,
        body,
        on_connection,
    })
}

/// A chunked body, decoded independently of the gateway's decoder.
async fn read_chunked(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(at) = buffer.windows(2).position(|w| w == b"\r\n") {
                break at;
            }
            fill(stream, buffer).await?;
        };
        let line = String::from_utf8_lossy(&buffer[..line_end]).to_string();
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        buffer.drain(..line_end + 2);
        if size == 0 {
            // No trailers from the gateway in these tests: the empty line ends the body.
            while buffer.len() < 2 {
                fill(stream, buffer).await?;
            }
            assert_eq!(&buffer[..2], b"\r\n");
            buffer.drain(..2);
            return Some(body);
        }
        while buffer.len() < size + 2 {
            fill(stream, buffer).await?;
        }
        body.extend(buffer.drain(..size));
        assert_eq!(&buffer[..2], b"\r\n");
        buffer.drain(..2);
    }
}

async fn fill(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}

/// One worker: idle connections are pooled per worker, and these tests count connections.
async fn gateway_for(upstream: &ScriptedUpstream) -> TestGateway {
    let routes = one_route_config(std::slice::from_ref(&upstream.url), "");
    TestGateway::start(&format!("workers = 1\n{routes}")).await
}

fn bytes(text: &str) -> Vec<u8> {
    text.as_bytes().to_vec()
}

#[tokio::test]
async fn chunked_answers_with_extensions_and_trailers_arrive_whole_on_one_connection() {
    let upstream = ScriptedUpstream::start(|_| {
        Answer::Send(bytes(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
             5;name=value\r\nhello\r\n7\r\n, world\r\n0\r\nx-checksum: 12\r\n\r\n",
        ))
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    for round in 0..3 {
        let (response, body) = get(&gateway.url("/")).await;
        assert_eq!(response.status(), StatusCode::OK, "round {round}");
        assert_eq!(&body[..], b"hello, world", "round {round}");
    }
    assert_eq!(upstream.accepted(), 1);
}

#[tokio::test]
async fn a_body_ended_by_closing_arrives_whole_and_its_connection_is_not_reused() {
    let upstream = ScriptedUpstream::start(|_| {
        Answer::SendAndClose(bytes("HTTP/1.1 200 OK\r\n\r\nuntil the end"))
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    for _ in 0..2 {
        let (response, body) = get(&gateway.url("/")).await;
        assert_answer(&response, &body, StatusCode::OK, "until the end", "");
    }
    assert_eq!(upstream.accepted(), 2);
}

/// RFC 9112 §6.3 item 4: a final coding other than chunked means the body ends with the
/// connection; `identity` changes nothing, so the body is streamed as it came (not a 502).
#[tokio::test]
async fn an_identity_coded_answer_is_read_until_the_close_and_streamed_in_the_gateways_framing() {
    let upstream = ScriptedUpstream::start(|_| {
        Answer::SendAndClose(bytes(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\n5\r\nuntil the end",
        ))
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    for _ in 0..2 {
        let (response, body) = get(&gateway.url("/")).await;
        assert_answer(&response, &body, StatusCode::OK, "5\r\nuntil the end", "");
        // The gateway's own framing of a body of unknown length, not the upstream's coding.
        let codings: Vec<_> = response
            .headers()
            .get_all("transfer-encoding")
            .iter()
            .collect();
        assert_eq!(codings, ["chunked"]);
    }
    assert_eq!(upstream.accepted(), 2);
}

#[tokio::test]
async fn interim_answers_are_skipped_and_the_final_one_forwarded() {
    let upstream = ScriptedUpstream::start(|_| {
        Answer::Send(bytes(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n\
             HTTP/1.1 201 Created\r\ncontent-length: 4\r\n\r\ndone",
        ))
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    let (response, body) = get(&gateway.url("/")).await;
    assert_answer(&response, &body, StatusCode::CREATED, "done", "");
}

/// 100 interim answers are the most one request may get: at 101 the exchange ends in a 502
/// at once, whatever the response timeout, and is not sent again.
#[tokio::test]
async fn a_flood_of_interim_answers_is_a_502_at_the_cap_not_at_the_timeout() {
    let hints = |count: usize| "HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n".repeat(count);
    let final_answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let at_cap = ScriptedUpstream::start(move |_| {
        Answer::Send(bytes(&format!("{}{final_answer}", hints(100))))
    })
    .await;
    let gateway = gateway_for(&at_cap).await;
    let (response, body) = get(&gateway.url("/")).await;
    assert_answer(
        &response,
        &body,
        StatusCode::OK,
        "ok",
        "100 interim answers",
    );

    let flood = ScriptedUpstream::start(move |_| {
        let mut answer = hints(100_000);
        answer.push_str(final_answer);
        Answer::Send(bytes(&answer))
    })
    .await;
    let routes = one_route_config(
        std::slice::from_ref(&flood.url),
        "response_timeout = \"5s\"",
    );
    let gateway = TestGateway::start(&format!("workers = 1\n{routes}")).await;
    let started = std::time::Instant::now();
    let (response, _) = get(&gateway.url("/")).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(flood.received().len(), 1, "sent again");
}

#[tokio::test]
async fn transfer_encoding_wins_over_content_length_which_the_client_does_not_see() {
    let upstream = ScriptedUpstream::start(|_| {
        Answer::Send(bytes(
            "HTTP/1.1 200 OK\r\ncontent-length: 100\r\ntransfer-encoding: chunked\r\n\r\n\
             2\r\nok\r\n0\r\n\r\n",
        ))
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    let (response, body) = get(&gateway.url("/")).await;
    assert_answer(&response, &body, StatusCode::OK, "ok", "");
    assert_ne!(
        response
            .headers()
            .get("content-length")
            .map(|v| v.as_bytes()),
        Some(&b"100"[..])
    );
}

#[tokio::test]
async fn malformed_answers_are_502_and_the_next_request_is_served() {
    let huge_field = format!("x-big: {}\r\n", "a".repeat(70 * 1024));
    let upstream = ScriptedUpstream::start(move |request| {
        let path = request.head.split(' ').nth(1).unwrap_or("/").to_string();
        let answer = match path.as_str() {
            "/garbage" => bytes("garbage\r\n\r\n"),
            "/conflicting-length" => {
                bytes("HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok")
            }
            "/negative-length" => bytes("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n"),
            "/overflowing-length" => {
                bytes("HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n")
            }
            "/huge-head" => bytes(&format!("HTTP/1.1 200 OK\r\n{huge_field}\r\n")),
            "/status-1000" => bytes("HTTP/1.1 1000 Big\r\ncontent-length: 0\r\n\r\n"),
            "/unasked-upgrade" => bytes("HTTP/1.1 101 Switching Protocols\r\n\r\n"),
            "/silence" => return Answer::Close,
            _ => bytes("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
        };
        Answer::SendAndClose(answer)
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    for path in [
        "/garbage",
        "/conflicting-length",
        "/negative-length",
        "/overflowing-length",
        "/huge-head",
        "/status-1000",
        "/unasked-upgrade",
        "/silence",
    ] {
        let (response, body) = get(&gateway.url(path)).await;
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "{path}");
        problem(&response, &body);
        let (response, body) = get(&gateway.url("/fine")).await;
        assert_answer(
            &response,
            &body,
            StatusCode::OK,
            "ok",
            &format!("after {path}"),
        );
    }
}

#[tokio::test]
async fn a_body_broken_after_the_head_aborts_the_clients_response() {
    let upstream = ScriptedUpstream::start(|request| {
        let answer = if request.head.starts_with("get /short ") {
            "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"
        } else if request.head.starts_with("get /bad-chunk ") {
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n"
        } else {
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcXX"
        };
        Answer::SendAndClose(bytes(answer))
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    for path in ["/short", "/bad-chunk", "/chunk-without-crlf"] {
        let request = Request::get(gateway.url(path)).body(empty()).unwrap();
        let whole = async {
            let response = client().request(request).await.ok()?;
            response.into_body().collect().await.ok()
        };
        // The 200 head may or may not have left before the body broke; either way the
        // client sees the response fail rather than a short body taken as whole.
        let whole = tokio::time::timeout(Duration::from_secs(10), whole)
            .await
            .expect("the broken body ends the response at once");
        assert!(
            whole.is_none(),
            "{path}: the client must not take it as whole"
        );
    }
}

#[tokio::test]
async fn a_pooled_connection_closed_after_the_request_is_retried_only_when_replayable() {
    // Every connection answers its first request and closes at the second without a word,
    // as an upstream does when its keep-alive timeout strikes just as a request arrives.
    let upstream = ScriptedUpstream::start(|request| match request.on_connection {
        0 => Answer::Send(bytes("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")),
        _ => Answer::Close,
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    let (response, _) = get(&gateway.url("/first")).await;
    assert_eq!(response.status(), StatusCode::OK);
    // A GET on the pooled connection meets the close and goes again on a new one.
    let (response, body) = get(&gateway.url("/again")).await;
    assert_answer(&response, &body, StatusCode::OK, "ok", "");
    assert_eq!(upstream.accepted(), 2);
    // A POST may have been acted on: not sent twice.
    let post = Request::post(gateway.url("/order"))
        .body(full("one"))
        .unwrap();
    let (response, _) = send(post).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(upstream.accepted(), 2);
    let orders = upstream
        .received()
        .iter()
        .filter(|r| r.head.starts_with("post "))
        .count();
    assert_eq!(orders, 1);
}

#[tokio::test]
async fn uploads_of_unknown_length_go_chunked_and_known_lengths_keep_content_length() {
    let upstream =
        ScriptedUpstream::start(|_| Answer::Send(bytes("HTTP/1.1 204 No Content\r\n\r\n"))).await;
    let gateway = gateway_for(&upstream).await;

    let frames = ["first ", "second ", "third"]
        .map(|text| Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from(text))));
    let streamed = StreamBody::new(futures_util::stream::iter(frames))
        .map_err(|e| e.into())
        .boxed();
    let post = Request::post(gateway.url("/streamed"))
        .body(streamed)
        .unwrap();
    assert_eq!(send(post).await.0.status(), StatusCode::NO_CONTENT);
    let post = Request::post(gateway.url("/known"))
        .body(full("abc"))
        .unwrap();
    assert_eq!(send(post).await.0.status(), StatusCode::NO_CONTENT);

    let received = upstream.received();
    let streamed = &received[0];
    assert!(
        streamed.head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{}",
        streamed.head
    );
    assert!(
        !streamed.head.contains("content-length"),
        "{}",
        streamed.head
    );
    assert_eq!(streamed.body, b"first second third");
    let known = &received[1];
    assert!(
        known.head.contains("\r\ncontent-length: 3\r\n"),
        "{}",
        known.head
    );
    assert!(!known.head.contains("transfer-encoding"), "{}", known.head);
    assert_eq!(known.body, b"abc");
    // Both on one connection: each request was framed so the upstream found its end.
    assert_eq!(upstream.accepted(), 1);
}

#[tokio::test]
async fn the_response_timeout_holds_on_a_reused_connection_and_a_fresh_one() {
    let upstream = ScriptedUpstream::start(|request| {
        if request.head.starts_with("get /hang ") {
            Answer::Hang
        } else {
            Answer::Send(bytes("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"))
        }
    })
    .await;
    let routes = one_route_config(
        std::slice::from_ref(&upstream.url),
        "response_timeout = \"300ms\"",
    );
    let gateway = TestGateway::start(&format!("workers = 1\n{routes}")).await;
    // Fast answers on one connection, each moving its deadline later, then one that hangs
    // on that connection, then (after a fast one) one that hangs on a new connection.
    for _ in 0..3 {
        assert_eq!(get(&gateway.url("/fast")).await.0.status(), StatusCode::OK);
    }
    // The connection's timer is still armed for the first fast answer's deadline, which now
    // falls halfway through the hanging request's 300 ms: it must not cut that one short.
    // Fixed: time passing is what puts that deadline there.
    tokio::time::sleep(Duration::from_millis(150)).await;
    for round in 0..2 {
        let started = std::time::Instant::now();
        let (response, body) = get(&gateway.url("/hang")).await;
        assert_eq!(
            response.status(),
            StatusCode::GATEWAY_TIMEOUT,
            "round {round}"
        );
        problem(&response, &body);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert!(waited < Duration::from_secs(10), "{waited:?}");
        // The timed-out connection is closed, not pooled: a new one serves this.
        assert_eq!(get(&gateway.url("/fast")).await.0.status(), StatusCode::OK);
    }
    assert_eq!(upstream.accepted(), 3);
}

#[tokio::test]
async fn a_pooled_connection_closed_halfway_through_an_answer_is_not_retried() {
    // The upstream began answering, so it saw the request: even a GET is not sent again.
    let upstream = ScriptedUpstream::start(|request| match request.on_connection {
        0 => Answer::Send(bytes("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")),
        _ => Answer::SendAndClose(bytes("HTTP/1.1 200 OK\r\ncontent-le")),
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    assert_eq!(get(&gateway.url("/first")).await.0.status(), StatusCode::OK);
    let (response, body) = get(&gateway.url("/again")).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    problem(&response, &body);
    assert_eq!(upstream.accepted(), 1);
    assert_eq!(upstream.received().len(), 2);
}

/// The end-to-end fields of `answer` (lowercased), in order, less the gateway's own.
fn end_to_end_fields(answer: &str) -> Vec<String> {
    answer
        .lines()
        .skip(1)
        .take_while(|line| !line.is_empty())
        .map(str::to_ascii_lowercase)
        .filter(|line| !line.starts_with("x-request-id:"))
        .collect()
}

#[tokio::test]
async fn an_answers_end_to_end_fields_reach_the_client_through_either_server_and_h2() {
    let upstream = ScriptedUpstream::start(|_| {
        Answer::Send(bytes(
            "HTTP/1.1 200 OK\r\nConnection: X-Hop, keep-alive\r\nX-Hop: 1\r\n\
             Keep-Alive: timeout=5\r\nProxy-Foo: a\r\nDate: Mon, 30 Nov 2026 10:00:00 GMT\r\n\
             X-Request-Id: upstream\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Empty:\r\n\
             Content-Length: 2\r\n\r\nok",
        ))
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    // The first request is the gateway's own server's; the second, asking to close, is
    // handed to hyper with the connection.
    let raw = exchange_until_closed(
        gateway.addr,
        b"GET /own HTTP/1.1\r\nhost: a\r\nx-request-id: client-1\r\n\r\n\
          GET /hyper HTTP/1.1\r\nhost: a\r\nx-request-id: client-2\r\nconnection: close\r\n\r\n",
    )
    .await;
    let (own, by_hyper) = raw.split_at(raw.rfind("HTTP/1.1 200").expect("two answers"));
    // The own server passes names on as the upstream spelled them.
    assert!(
        own.contains("\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"),
        "{own}"
    );
    assert!(own.contains("\r\nx-request-id: client-1\r\n"), "{own}");
    assert!(
        by_hyper.contains("\r\nx-request-id: client-2\r\n"),
        "{by_hyper}"
    );
    let expected = [
        "date: mon, 30 nov 2026 10:00:00 gmt",
        "set-cookie: a=1",
        "set-cookie: b=2",
        "x-empty: ",
        "content-length: 2",
    ];
    let mut own_fields = end_to_end_fields(own);
    own_fields.sort();
    let mut hyper_fields = end_to_end_fields(by_hyper);
    hyper_fields.retain(|line| line != "connection: close");
    hyper_fields.sort();
    let mut expected = expected.map(String::from).to_vec();
    expected.sort();
    assert_eq!(own_fields, expected, "{own}");
    assert_eq!(hyper_fields, expected, "{by_hyper}");
    assert!(
        own.ends_with("\r\n\r\nok") && by_hyper.ends_with("\r\n\r\nok"),
        "{raw}"
    );

    let mut h2 = h2c_sender(gateway.addr).await;
    let response = h2
        .send_request(Request::get(gateway.url("/h2")).body(empty()).unwrap())
        .await
        .unwrap();
    let headers = response.headers();
    let cookies: Vec<_> = headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    assert_eq!(headers["date"], "Mon, 30 Nov 2026 10:00:00 GMT");
    assert_ne!(headers["x-request-id"], "upstream");
    for gone in ["x-hop", "keep-alive", "proxy-foo", "connection"] {
        assert!(!headers.contains_key(gone), "{gone} reached the h2 client");
    }
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"ok");
}

/// RFC 9112 §7.1: `chunk-size = 1*HEXDIG`. Sizes of 16 digits or more, leading zeros and
/// all, are read in both directions (the one decoder): a client's request body through the
/// own server, an upstream's answer; a size past u64 is refused (the decoder's tests refuse
/// it from an upstream too).
#[tokio::test]
async fn chunk_sizes_of_sixteen_digits_are_read_from_clients_and_upstreams() {
    let upstream = ScriptedUpstream::start(|_| {
        Answer::SendAndClose(bytes(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0000000000000004\r\nbody\r\n\
             00000000000000000000a\r\n0123456789\r\n0000000000000000\r\n\r\n",
        ))
    })
    .await;
    let gateway = gateway_for(&upstream).await;
    let request = b"POST /up HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
                    Transfer-Encoding: chunked\r\n\r\n0000000000000005\r\nhello\r\n\
                    0000000000000000001\r\n!\r\n0000000000000000\r\n\r\n";
    let text = exchange_until_closed(gateway.addr, request).await;
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert_eq!(upstream.received()[0].body, b"hello!");
    let (response, body) = get(&gateway.url("/down")).await;
    assert_answer(&response, &body, StatusCode::OK, "body0123456789", "");
    let overflow = b"POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
                     10000000000000000\r\nx\r\n";
    let text = exchange_until_closed(gateway.addr, overflow).await;
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
}
