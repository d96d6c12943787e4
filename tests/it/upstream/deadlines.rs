//! The deadlines of an exchange once its head has come (issue 31, item 2): a response body the
//! upstream stops sending is aborted at `[[upstreams]] read_timeout` (HTTP/1: the client's
//! connection closed; HTTP/2: the stream reset) and its upstream connection dropped, whether
//! the upstream stalls or its process is frozen; a request body the client stops sending is
//! ended at `[server] body_read_timeout`, with a 408 when nothing was answered yet.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use support::recording::Via;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An upstream that answers every request head with `answer` and then sends nothing more,
/// holding the connection open until the gateway closes it (as a stalled or frozen server
/// does: no FIN, no reset).
struct StallingUpstream {
    url: String,
    /// Connections the gateway has closed.
    closed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl StallingUpstream {
    async fn start(answer: &'static str) -> StallingUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let closed = Arc::new(AtomicUsize::new(0));
        let counting = closed.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counting = counting.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    stream.write_all(answer.as_bytes()).await.unwrap();
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                    counting.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        StallingUpstream { url, closed, task }
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }
}

impl Drop for StallingUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const FIVE_OF_A_HUNDRED: &str = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello";

async fn gateway_for(upstream: &str, upstream_keys: &str, server_keys: &str) -> TestGateway {
    let routes = one_route_config(&[upstream.to_string()], upstream_keys);
    TestGateway::start(&format!(
        "{server_keys}\n[admin]\nlisten = \"127.0.0.1:0\"\n{routes}"
    ))
    .await
}

/// The response to a GET sent `via`, read until the gateway ends it: its bytes (HTTP/1) or
/// its data (HTTP/2), and how long after the first data it ended. Panics if it does not end
/// within 10 s.
async fn read_cut_response(gateway: &TestGateway, via: Via) -> (Vec<u8>, Duration) {
    if via == Via::H2 {
        let mut sender = h2c_sender(gateway.addr).await;
        let request = Request::get(gateway.url("/stall")).body(empty()).unwrap();
        let response = sender.send_request(request).await.expect("a head");
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().expect("the first bytes");
        let started = Instant::now();
        let next = tokio::time::timeout(Duration::from_secs(10), body.frame()).await;
        let reset = next.expect("the stream ends within 10 s");
        assert!(matches!(reset, Some(Err(_))), "not reset: {reset:?}");
        return (first.into_data().unwrap().to_vec(), started.elapsed());
    }
    let mut stream = support::recording::sent_get(gateway.addr, via, "/stall").await;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.ends_with(b"hello") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the first bytes: {seen:?}");
        seen.extend_from_slice(&buf[..n]);
    }
    let started = Instant::now();
    let (rest, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(closed, "the connection stayed open");
    seen.extend_from_slice(&rest);
    (seen, started.elapsed())
}

#[tokio::test]
async fn a_stalled_upstream_body_is_aborted_at_read_timeout_through_every_server() {
    let upstream = StallingUpstream::start(FIVE_OF_A_HUNDRED).await;
    let keys = "response_timeout = \"3s\"\nread_timeout = \"300ms\"";
    let gateway = gateway_for(&upstream.url, keys, "").await;
    for (round, via) in [Via::Own, Via::Hyper, Via::H2].into_iter().enumerate() {
        let (bytes, after) = read_cut_response(&gateway, via).await;
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.ends_with("hello"),
            "{via:?}: more than the 5 bytes: {text}"
        );
        assert!(
            after >= Duration::from_millis(250) && after < Duration::from_secs(3),
            "{via:?}: cut {after:?} after the last bytes"
        );
        // The upstream connection is dropped, not pooled.
        let dropped = eventually(Duration::from_secs(5), || upstream.closed() == round + 1);
        assert!(
            dropped.await,
            "{via:?}: the upstream connection stayed open"
        );
    }
    let series = r#"rlp_timeouts_total{kind="upstream_read"}"#;
    assert_eq!(metric(&gateway, series).await, 3.0);
}

/// The upstream is a process of its own, the binary's echo server, frozen with SIGSTOP while
/// it streams an upload back.
#[tokio::test]
async fn a_frozen_upstream_process_is_cut_at_read_timeout() {
    let mut echo = std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit-proxy"))
        .args(["echo", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(echo.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let address = line.trim().rsplit("http://").next().unwrap().to_string();
    let keys = "read_timeout = \"400ms\"";
    let gateway = gateway_for(&format!("http://{address}"), keys, "").await;

    let stream = TcpStream::connect(gateway.addr).await.unwrap();
    let (mut reading, mut writing) = stream.into_split();
    let uploading = tokio::spawn(async move {
        let head = "POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 100000000\r\n\r\n";
        writing.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'x'; 16 * 1024];
        while writing.write_all(&chunk).await.is_ok() {}
    });
    // Echoed bytes come back: the upstream is streaming. Then it is frozen.
    let mut echoed = 0;
    let mut buf = vec![0u8; 64 * 1024];
    while echoed < 256 * 1024 {
        let n = reading.read(&mut buf).await.unwrap();
        assert!(n > 0);
        echoed += n;
    }
    let signal = |name: &str| {
        std::process::Command::new("kill")
            .args([name, &echo.id().to_string()])
            .status()
            .unwrap()
    };
    assert!(signal("-STOP").success());
    let frozen_at = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let closed = loop {
        match tokio::time::timeout_at(deadline, reading.read(&mut buf)).await {
            Err(_) => break false,
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(_)) => {}
        }
    };
    let after = frozen_at.elapsed();
    signal("-CONT");
    let _ = echo.kill();
    let _ = echo.wait();
    uploading.abort();
    assert!(closed, "the client's response was not cut within 10 s");
    assert!(after >= Duration::from_millis(350), "cut after {after:?}");
    let series = r#"rlp_timeouts_total{kind="upstream_read"}"#;
    assert_eq!(metric(&gateway, series).await, 1.0);
}

/// An upstream that reads the whole request body before it answers.
async fn reading_upstream() -> TestUpstream {
    TestUpstream::start(|request: Request<hyper::body::Incoming>| async move {
        let body = request.into_body().collect().await.map(|b| b.to_bytes());
        http::Response::new(full(body.unwrap_or_default()))
    })
    .await
}

/// Sends a POST head for 100 bytes and only 10 of them, then reads until the gateway closes
/// the connection: what came, whether it closed within 10 s, and after how long.
async fn send_a_tenth_of_a_body(gateway: &TestGateway) -> (String, bool, Duration) {
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let head = "POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n0123456789";
    stream.write_all(head.as_bytes()).await.unwrap();
    let sent_at = Instant::now();
    let (answer, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    (answer, closed, sent_at.elapsed())
}

#[tokio::test]
async fn a_client_that_stops_sending_its_body_gets_408_over_http1_and_http2() {
    let upstream = reading_upstream().await;
    let server = "body_read_timeout = \"300ms\"";
    let gateway = gateway_for(&upstream.url(), "", server).await;

    let (answer, closed, after) = send_a_tenth_of_a_body(&gateway).await;
    assert!(
        answer.starts_with("HTTP/1.1 408 Request Timeout"),
        "{answer}"
    );
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(closed, "the connection stayed open after the 408");
    assert!(after >= Duration::from_millis(250), "408 after {after:?}");

    let (chunks, receiver) = tokio::sync::mpsc::channel::<Result<_, std::io::Error>>(1);
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    });
    let upload = StreamBody::new(stream).map_err(|e| e.into()).boxed();
    chunks
        .send(Ok(http_body::Frame::data(Bytes::from_static(b"part"))))
        .await
        .unwrap();
    let mut sender = h2c_sender(gateway.addr).await;
    let request = Request::post(gateway.url("/upload")).body(upload).unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request));
    let response = answered.await.expect("an answer within 10 s").unwrap();
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    drop(chunks);
    let series = r#"rlp_timeouts_total{kind="body_read"}"#;
    assert_eq!(metric(&gateway, series).await, 2.0);
}

#[tokio::test]
async fn a_body_that_stops_while_its_answer_streams_ends_the_answer() {
    let echo = ratelimit_proxy::testing::echo::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let server = "body_read_timeout = \"300ms\"";
    let gateway = gateway_for(&format!("http://{echo}"), "", server).await;
    let (answer, closed, after) = send_a_tenth_of_a_body(&gateway).await;
    // The echo answered at once and streamed back what came; then the answer was cut.
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("0123456789"), "{answer}");
    assert!(closed, "the connection stayed open");
    assert!(after >= Duration::from_millis(250), "cut after {after:?}");
    let series = r#"rlp_timeouts_total{kind="body_read"}"#;
    assert_eq!(metric(&gateway, series).await, 1.0);
}
