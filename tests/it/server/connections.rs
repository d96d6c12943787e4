//! Connection-level behaviour: h2c, WebSocket upgrades, slow and oversized headers, idle and
//! connection limits, graceful shutdown.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;

use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

/// Reads until the peer closes; returns how long after `since` that was, or None if it stayed
/// open until `limit` after `since`.
async fn closed_within(
    stream: &mut TcpStream,
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    let started = since;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + limit).into(), stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

/// Sends one keep-alive HTTP/1.1 GET on `stream` and reads the answer head.
async fn raw_get(stream: &mut TcpStream, path: &str) -> String {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 8192];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .expect("answered")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A keep-alive connection to `addr` that has had one request answered 200.
async fn served_connection(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert!(raw_get(&mut stream, "/").await.starts_with("HTTP/1.1 200"));
    stream
}

#[tokio::test]
async fn h2c_prior_knowledge_is_served() {
    let upstream = TestUpstream::start(|request| async move {
        let proto = request.headers()["x-forwarded-proto"]
            .to_str()
            .unwrap()
            .to_string();
        let host = request.headers()["host"].to_str().unwrap().to_string();
        Response::new(full(format!("{proto} {host}")))
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;

    let mut sender = h2c_sender(gateway.addr).await;
    for _ in 0..3 {
        let request = Request::get("http://api.example.com/h2")
            .body(empty())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().contains_key("x-request-id"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "http api.example.com");
    }
}

#[tokio::test]
async fn websocket_upgrade_echoes_messages_both_ways() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
                socket
                    .send(Message::text("hello from upstream"))
                    .await
                    .unwrap();
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_text() || message.is_binary() {
                        socket.send(message).await.unwrap();
                    }
                }
            });
        }
    });
    let gateway =
        TestGateway::start(&one_route_config(&[format!("http://{upstream_addr}")], "")).await;

    let stream = TcpStream::connect(gateway.addr).await.unwrap();
    let (mut socket, response) =
        tokio_tungstenite::client_async(format!("ws://{}/ws", gateway.addr), stream)
            .await
            .unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert!(response.headers().contains_key("x-request-id"));
    let greeting = socket.next().await.unwrap().unwrap();
    assert_eq!(greeting, Message::text("hello from upstream"));
    for i in 0..5 {
        socket
            .send(Message::text(format!("ping {i}")))
            .await
            .unwrap();
        assert_eq!(
            socket.next().await.unwrap().unwrap(),
            Message::text(format!("ping {i}"))
        );
    }
    let blob = vec![42u8; 200_000];
    socket.send(Message::binary(blob.clone())).await.unwrap();
    assert_eq!(socket.next().await.unwrap().unwrap(), Message::binary(blob));
    socket.close(None).await.unwrap();
}

/// Server keys go first: the harness opens the `[server]` table.
async fn gateway_with(server_keys: &str, upstream: &TestUpstream) -> TestGateway {
    TestGateway::start(&format!(
        "{server_keys}\n{}",
        one_route_config(&[upstream.url()], "")
    ))
    .await
}

#[tokio::test]
async fn a_slow_header_sender_is_cut_at_header_read_timeout() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = gateway_with("header_read_timeout = \"300ms\"", &upstream).await;

    let connected = Instant::now();
    // Half a request head, then silence.
    let mut slow = TcpStream::connect(gateway.addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n")
        .await
        .unwrap();
    // Nothing at all.
    let mut silent = TcpStream::connect(gateway.addr).await.unwrap();
    // A well-behaved client on another connection is unaffected.
    let mut good = TcpStream::connect(gateway.addr).await.unwrap();
    assert!(raw_get(&mut good, "/").await.starts_with("HTTP/1.1 200"));

    let slow_closed = closed_within(&mut slow, connected, Duration::from_secs(10))
        .await
        .expect("slow sender was cut");
    let silent_closed = closed_within(&mut silent, connected, Duration::from_secs(10))
        .await
        .expect("silent client was cut");
    assert!(slow_closed >= Duration::from_millis(250), "{slow_closed:?}");
    assert!(
        silent_closed >= Duration::from_millis(250),
        "{silent_closed:?}"
    );
    assert_eq!(upstream.hits(), 1);
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = gateway_with("max_header_bytes = 16384", &upstream).await;

    let (response, _) = send(
        Request::get(gateway.url("/"))
            .header("x-small", "a".repeat(8000))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);

    let (response, body) = send(
        Request::get(gateway.url("/"))
            .header("x-big", "a".repeat(20_000))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        response.status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    let answer = problem(&response, &body);
    assert!(
        answer["detail"].as_str().unwrap().contains("16384"),
        "{answer}"
    );

    // Far beyond the limit, hyper refuses before parsing; still 431.
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let head = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nx-huge: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let mut answer = vec![0u8; 1024];
    let n = stream.read(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 431"));
    assert_eq!(upstream.hits(), 1);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_idle_timeout() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = gateway_with("idle_timeout = \"400ms\"", &upstream).await;
    let mut stream = served_connection(gateway.addr).await;
    let answered = Instant::now();
    let closed = closed_within(&mut stream, answered, Duration::from_secs(10))
        .await
        .expect("idle connection was closed");
    assert!(
        closed >= Duration::from_millis(350),
        "closed after only {closed:?}"
    );
}

#[tokio::test]
async fn connections_beyond_max_connections_wait_for_a_free_slot() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = gateway_with("max_connections = 2", &upstream).await;
    let mut first = TcpStream::connect(gateway.addr).await.unwrap();
    let mut second = TcpStream::connect(gateway.addr).await.unwrap();
    assert!(raw_get(&mut first, "/").await.starts_with("HTTP/1.1 200"));
    assert!(raw_get(&mut second, "/").await.starts_with("HTTP/1.1 200"));

    // The third connection completes in the kernel but is not served while both slots are held.
    let mut third = TcpStream::connect(gateway.addr).await.unwrap();
    third
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf)).await;
    assert!(early.is_err(), "served beyond max_connections");

    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(10), third.read(&mut buf))
        .await
        .expect("served once a slot freed")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
}

/// True once nothing accepts connections on `addr` (polled for up to 5 s).
async fn stops_listening(addr: SocketAddr) -> bool {
    eventually(Duration::from_secs(5), || {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await
}

/// A request to the slow upstream, in flight across shutdown, got its whole answer.
async fn assert_finished(request: JoinHandle<(Response<()>, Bytes)>) {
    let (response, body) = request.await.unwrap();
    assert_answer(&response, &body, StatusCode::OK, "finished", "");
}

/// After `stop`, serving (every worker) ends, without an error, within 10 s.
async fn assert_serve_returns(
    serving: JoinHandle<Result<ratelimit_proxy::Drain, ratelimit_proxy::ServeError>>,
) {
    let result = tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("serve returned")
        .unwrap();
    assert!(result.is_ok());
}

#[tokio::test]
async fn shutdown_finishes_in_flight_requests_and_refuses_new_connections() {
    let upstream = TestUpstream::slow(Duration::from_millis(700), "finished").await;
    let gateway = gateway_with("shutdown_grace = \"10s\"", &upstream).await;
    let addr = gateway.addr;
    let in_flight = tokio::spawn(get(gateway.url("/slow").leak()));
    assert!(eventually(Duration::from_secs(5), || upstream.hits() == 1).await);

    let serving = gateway.stop();
    assert!(
        stops_listening(addr).await,
        "new connections were still accepted after shutdown"
    );
    assert_finished(in_flight).await;
    assert_serve_returns(serving).await;
}

#[tokio::test]
async fn shutdown_drains_the_requests_of_every_worker_then_stops_them() {
    let upstream = TestUpstream::slow(Duration::from_millis(500), "finished").await;
    let gateway = gateway_with("workers = 4\nshutdown_grace = \"10s\"", &upstream).await;
    let addr = gateway.addr;
    // Sixteen connections at once: the four workers race to accept them.
    let url: &'static str = gateway.url("/slow").leak();
    let in_flight: Vec<_> = (0..16).map(|_| tokio::spawn(get(url))).collect();
    assert!(eventually(Duration::from_secs(5), || upstream.hits() == 16).await);

    let serving = gateway.stop();
    for request in in_flight {
        assert_finished(request).await;
    }
    assert_serve_returns(serving).await;
    // No worker kept a copy of the listener open.
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[tokio::test]
async fn shutdown_closes_idle_keep_alive_connections_without_waiting_for_the_grace() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = gateway_with(
        "shutdown_grace = \"10s\"\nidle_timeout = \"60s\"",
        &upstream,
    )
    .await;
    let mut stream = served_connection(gateway.addr).await;

    let stopped = Instant::now();
    let serving = gateway.stop();
    let closed = closed_within(&mut stream, stopped, Duration::from_secs(5)).await;
    assert!(
        closed.is_some(),
        "an idle connection stayed open after shutdown"
    );
    assert_serve_returns(serving).await;
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "serving ended only after {:?}, near the grace",
        stopped.elapsed()
    );
}

#[tokio::test]
async fn dropping_the_gateway_stops_every_worker() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = gateway_with("workers = 3", &upstream).await;
    let addr = gateway.addr;
    for _ in 0..6 {
        assert_eq!(get(&gateway.url("/")).await.0.status(), StatusCode::OK);
    }
    gateway.abort();
    assert!(
        stops_listening(addr).await,
        "a worker still listens after the gateway was dropped"
    );
}

#[tokio::test]
async fn keep_alive_waits_follow_idle_timeout_and_a_slow_second_head_is_still_cut() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = gateway_with(
        "header_read_timeout = \"300ms\"\nidle_timeout = \"5s\"",
        &upstream,
    )
    .await;
    let mut stream = served_connection(gateway.addr).await;

    // Waiting between requests is governed by idle_timeout, not header_read_timeout.
    let waited = Instant::now();
    assert_eq!(
        closed_within(&mut stream, waited, Duration::from_millis(900)).await,
        None
    );
    assert!(raw_get(&mut stream, "/").await.starts_with("HTTP/1.1 200"));

    // A second request head that stalls is cut at header_read_timeout.
    let started = Instant::now();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n")
        .await
        .unwrap();
    let cut = closed_within(&mut stream, started, Duration::from_secs(5))
        .await
        .expect("stalled head was cut");
    assert!(cut >= Duration::from_millis(250), "{cut:?}");
}
