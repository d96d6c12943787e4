//! The deadlines on the client's side of a connection (issue 31, items 1 and 3): a client
//! that takes nothing sent to it is cut at `[server] send_timeout` and its slot freed, through
//! the own HTTP/1 server, hyper's HTTP/1 server and HTTP/2 alike; an upgraded tunnel is cut at
//! `tunnel_send_timeout` or `tunnel_idle_timeout`; and a slow upload is in flight until its
//! body is read, however long past `header_read_timeout` its answer has been streaming.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use support::recording::Via;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// 256 MiB, far more than the socket buffers between the gateway and a client can hold.
const HUGE_CHUNKS: usize = 4096;
const CHUNK: usize = 64 * 1024;

/// An upstream that answers every request with a 256 MiB body, made as it is read.
async fn huge_upstream() -> TestUpstream {
    TestUpstream::start(|_| async {
        let chunks = futures_util::stream::iter(0..HUGE_CHUNKS).map(|_| {
            let chunk = Bytes::from(vec![b'x'; CHUNK]);
            Ok::<_, std::io::Error>(http_body::Frame::data(chunk))
        });
        Response::new(StreamBody::new(chunks).map_err(|e| e.into()).boxed())
    })
    .await
}

async fn gateway_for(upstream: &str, server_keys: &str) -> TestGateway {
    let routes = one_route_config(&[upstream.to_string()], "");
    TestGateway::start(&format!(
        "{server_keys}\n[admin]\nlisten = \"127.0.0.1:0\"\n{routes}"
    ))
    .await
}

/// Polls the `kind` timeout counter until it reaches `at_least`, for at most `within`.
async fn timeouts_reach(gateway: &TestGateway, kind: &str, at_least: f64, within: Duration) {
    let series = format!("rlp_timeouts_total{{kind=\"{kind}\"}}");
    let mut seen = 0.0;
    let reached = eventually_async(within, async || {
        seen = metric(gateway, &series).await;
        seen >= at_least
    })
    .await;
    assert!(reached, "{series} is {seen}, not {at_least}");
}

/// Asks for the huge body `via` and reads nothing of it; returns what keeps the request
/// alive (the socket, or the HTTP/2 response and its connection's sender).
async fn ask_and_read_nothing(gateway: &TestGateway, via: Via) -> Box<dyn std::any::Any> {
    if via == Via::H2 {
        let mut sender = h2c_sender(gateway.addr).await;
        let request = Request::get(gateway.url("/huge")).body(empty()).unwrap();
        let response = sender.send_request(request).await.expect("a head");
        assert_eq!(response.status(), StatusCode::OK);
        return Box::new((sender, response));
    }
    Box::new(support::recording::sent_get(gateway.addr, via, "/huge").await)
}

#[tokio::test]
async fn a_client_that_reads_nothing_is_cut_at_send_timeout_and_its_slot_freed() {
    let upstream = huge_upstream().await;
    let server = "send_timeout = \"1s\"\nmax_connections = 1";
    let gateway = gateway_for(&upstream.url(), server).await;
    for (cut, via) in [Via::Own, Via::Hyper, Via::H2].into_iter().enumerate() {
        let started = Instant::now();
        let held = ask_and_read_nothing(&gateway, via).await;
        timeouts_reach(&gateway, "send", cut as f64 + 1.0, Duration::from_secs(15)).await;
        let after = started.elapsed();
        assert!(
            after >= Duration::from_secs(1),
            "{via:?}: cut after {after:?}"
        );
        if let Ok(mut stream) = held.downcast::<TcpStream>() {
            // What the socket buffers held, then the end: far less than the body.
            let (bytes, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
            assert!(closed, "{via:?}: the connection stayed open");
            assert!(
                bytes.len() < HUGE_CHUNKS * CHUNK / 4,
                "{via:?}: {}",
                bytes.len()
            );
        }
        // The one connection slot is free again: a polite client is answered.
        let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
        let polite = b"GET /small HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
        stream.write_all(polite).await.unwrap();
        let mut head = [0u8; 12];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut head));
        read.await.expect("answered within 10 s").unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "{via:?}");
    }
}

/// An upstream that switches every request to websocket, then floods the tunnel with bytes
/// (`flood`) or sends nothing.
async fn switching_upstream(flood: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let switch = "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";
                stream.write_all(switch.as_bytes()).await.unwrap();
                let chunk = vec![b'x'; CHUNK];
                while flood && stream.write_all(&chunk).await.is_ok() {}
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    url
}

const WEBSOCKET: &[u8] = b"GET /ws HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\n\
    Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// Opens a tunnel through the gateway and checks that it switched.
async fn open_tunnel(gateway: &TestGateway) -> TcpStream {
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    stream.write_all(WEBSOCKET).await.unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 101");
    stream
}

#[tokio::test]
async fn a_tunnel_whose_client_reads_nothing_is_cut_at_tunnel_send_timeout() {
    let upstream = switching_upstream(true).await;
    let server = "tunnel_send_timeout = \"1s\"\nsend_timeout = \"1h\"";
    let gateway = gateway_for(&upstream, server).await;
    let started = Instant::now();
    let mut stream = open_tunnel(&gateway).await;
    timeouts_reach(&gateway, "tunnel_send", 1.0, Duration::from_secs(15)).await;
    assert!(started.elapsed() >= Duration::from_secs(1));
    let (bytes, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(closed, "the tunnel stayed open");
    assert!(bytes.len() < 64 * 1024 * 1024, "{}", bytes.len());
    assert_eq!(
        metric(&gateway, r#"rlp_timeouts_total{kind="tunnel_idle"}"#).await,
        0.0
    );
}

#[tokio::test]
async fn a_tunnel_with_no_bytes_either_way_is_cut_at_tunnel_idle_timeout() {
    let upstream = switching_upstream(false).await;
    let server = "tunnel_idle_timeout = \"600ms\"";
    let gateway = gateway_for(&upstream, server).await;
    let mut stream = open_tunnel(&gateway).await;
    // Bytes the client sends keep it open.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stream.write_all(b"ping").await.unwrap();
    }
    assert_eq!(
        metric(&gateway, r#"rlp_timeouts_total{kind="tunnel_idle"}"#).await,
        0.0
    );
    let quiet_from = Instant::now();
    let (_, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    let after = quiet_from.elapsed();
    assert!(closed, "the tunnel stayed open");
    assert!(after >= Duration::from_millis(550), "cut after {after:?}");
    assert!(after <= Duration::from_secs(3), "cut after {after:?}");
    timeouts_reach(&gateway, "tunnel_idle", 1.0, Duration::from_secs(5)).await;
}

/// Uploads `total` bytes in 1 KiB pieces every 50 ms on `stream` after `head`, reading the
/// echoed answer meanwhile; returns the answer's bytes once `total` of its body came back.
async fn slow_upload(stream: TcpStream, head: &str, total: usize) -> Vec<u8> {
    let (mut reader, mut writer) = stream.into_split();
    let head = head.to_string();
    let uploading = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await.unwrap();
        for _ in 0..total / 1024 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.write_all(&[b'~'; 1024]).await.unwrap();
        }
        writer
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let deadline = Instant::now() + Duration::from_secs(30);
    while answer.iter().filter(|&&b| b == b'~').count() < total {
        let left = deadline.saturating_duration_since(Instant::now());
        let read = tokio::time::timeout(left, reader.read(&mut buf)).await;
        let n = read.expect("the whole echo within 30 s").unwrap();
        let so_far = String::from_utf8_lossy(&answer[..answer.len().min(200)]).into_owned();
        assert!(n > 0, "cut after {} bytes: {so_far}", answer.len());
        answer.extend_from_slice(&buf[..n]);
    }
    let _writer = uploading.await.unwrap();
    answer
}

#[tokio::test]
async fn a_slow_upload_outlasts_header_read_timeout_while_its_answer_streams() {
    let echo = ratelimit_proxy::testing::echo::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let server = "header_read_timeout = \"500ms\"\nidle_timeout = \"500ms\"";
    let gateway = gateway_for(&format!("http://{echo}"), server).await;
    let total = 32 * 1024; // 1.6 s of upload, three header_read_timeouts.
    let head = format!("POST /up HTTP/1.1\r\nHost: test\r\nContent-Length: {total}\r\n\r\n");

    // The connection's first request: the own server hands it to hyper at once.
    let stream = TcpStream::connect(gateway.addr).await.unwrap();
    let answer = slow_upload(stream, &head, total).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"));

    // After a bodiless request the own server answered: hyper's HTTP/1 server takes over.
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    stream
        .write_all(b"GET /first HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let answer = slow_upload(stream, &head, total).await;
    assert!(String::from_utf8_lossy(&answer).contains("HTTP/1.1 200"));
    assert_eq!(
        metric(&gateway, r#"rlp_timeouts_total{kind="header_read"}"#).await,
        0.0
    );
}

/// A tunnel outlives the connection task that opened it: the drain waits for it within
/// `shutdown_grace`, and when it is cut, the exit counts it.
#[tokio::test]
async fn a_tunnel_open_at_shutdown_is_waited_for_and_counted_when_cut() {
    let upstream = switching_upstream(false).await;
    let gateway = gateway_for(&upstream, "shutdown_grace = \"300ms\"").await;
    let _stream = open_tunnel(&gateway).await;
    let started = Instant::now();
    let drain = gateway.stop().await.unwrap().unwrap();
    assert_eq!(drain.cut, 1, "{drain:?}");
    assert_eq!(drain.ended(), "shutdown_grace over");
    assert!(started.elapsed() >= Duration::from_millis(300));

    // Closed by its client before the grace is over, it is not cut.
    let upstream = switching_upstream(false).await;
    let gateway = gateway_for(&upstream, "shutdown_grace = \"10s\"").await;
    let stream = open_tunnel(&gateway).await;
    let stopping = gateway.stop();
    drop(stream);
    let drain = stopping.await.unwrap().unwrap();
    assert_eq!(drain.cut, 0, "{drain:?}");
}
