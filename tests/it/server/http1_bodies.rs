//! The own HTTP/1 server on raw sockets for what it used to leave to hyper: `Expect:
//! 100-continue`, `HEAD`, HTTP/1.0, an answer given before the upload was read, and the bytes a
//! client sends right behind an upgrade request.

use crate::support;

use std::time::Duration;

use http::Response;
use http_body_util::BodyExt;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads from `stream` until `buf` holds `needle`, or fails after 10 s.
async fn read_until(stream: &mut TcpStream, buf: &mut Vec<u8>, needle: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(buf).contains(needle) {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} in {:?}", String::from_utf8_lossy(buf)))
            .unwrap();
        assert!(
            n > 0,
            "closed before {needle:?}: {:?}",
            String::from_utf8_lossy(buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn a_client_that_expects_100_continue_gets_it_when_the_body_is_wanted() {
    let upstream = echo_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let head = "POST /up HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    read_until(&mut stream, &mut buf, "\r\n\r\n").await;
    assert_eq!(buf, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(b"hello").await.unwrap();
    read_until(&mut stream, &mut buf, "POST /up hello").await;
    assert!(String::from_utf8_lossy(&buf).contains("HTTP/1.1 200 OK"));
}

#[tokio::test]
async fn a_denied_upload_gets_its_429_without_a_100_and_the_connection_closes() {
    let upstream = echo_upstream().await;
    let config = format!(
        "[store]\nbackend = \"memory\"\n[[limits]]\nname = \"none\"\nkey = [\"header:x-api-key\"]\nrates = [{{ limit = 1, per = \"1h\" }}]\n{}limits = [\"none\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    let first = b"POST /up HTTP/1.1\r\nHost: t\r\nx-api-key: k\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok";
    let allowed = exchange_until_closed(gateway.addr, first).await;
    assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
    // A second upload over the limit, sent whole without waiting: 1 MiB nobody reads.
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let body = vec![b'x'; 1 << 20];
    let head = format!(
        "POST /up HTTP/1.1\r\nHost: t\r\nx-api-key: k\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (mut reader, mut writer) = stream.split();
    let sending = async {
        let _ = writer.write_all(head.as_bytes()).await;
        let _ = writer.write_all(&body).await;
    };
    let mut answer = Vec::new();
    let reading = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut answer));
    let (_, read) = tokio::join!(sending, reading);
    read.expect("closed within 10 s").unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 429"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    assert!(!text.contains("100 Continue"), "{text}");
}

#[tokio::test]
async fn head_is_answered_with_gets_fields_and_no_body_and_the_next_request_follows() {
    let upstream = TestUpstream::start(|_request| async move {
        Response::builder()
            .header("content-length", "11")
            .body(empty())
            .unwrap()
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let requests = "HEAD /h HTTP/1.1\r\nHost: t\r\n\r\nGET /next HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let text = exchange_until_closed(gateway.addr, requests.as_bytes()).await;
    let answers: Vec<&str> = text.split("HTTP/1.1 ").filter(|a| !a.is_empty()).collect();
    assert_eq!(answers.len(), 2, "{text}");
    assert!(
        answers[0].starts_with("200") && answers[0].contains("content-length: 11"),
        "{text}"
    );
    assert!(answers[0].ends_with("\r\n\r\n"), "HEAD has no body: {text}");
}

#[tokio::test]
async fn an_http_1_0_client_gets_a_body_of_unknown_length_until_the_close() {
    let upstream = TestUpstream::start(|_request| async move {
        let chunks = futures_util::stream::iter(["one ", "two"].map(|c| {
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(hyper::body::Frame::data(
                bytes::Bytes::from(c),
            ))
        }));
        Response::new(http_body_util::StreamBody::new(chunks).boxed())
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;
    let request = b"GET /s HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n";
    let text = exchange_until_closed(gateway.addr, request).await;
    assert!(text.starts_with("HTTP/1.0 200"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("transfer-encoding"),
        "{text}"
    );
    assert!(text.contains("connection: close"), "{text}");
    assert!(text.ends_with("\r\n\r\none two"), "{text}");
}

#[tokio::test]
async fn bytes_sent_right_behind_an_upgrade_request_reach_the_upstream() {
    // An upstream that switches, then echoes what it gets.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if stream.read(&mut byte).await.unwrap() == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let answer =
            "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";
        stream.write_all(answer.as_bytes()).await.unwrap();
        let (mut reader, mut writer) = stream.split();
        let _ = tokio::io::copy(&mut reader, &mut writer).await;
    });
    let gateway = TestGateway::start(&one_route_config(&[format!("http://{addr}")], "")).await;
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    let request = "GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nearly bytes";
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    read_until(&mut stream, &mut buf, "early bytes").await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    stream.write_all(b" and later").await.unwrap();
    read_until(&mut stream, &mut buf, "early bytes and later").await;
}

#[tokio::test]
async fn an_upgrade_is_not_offered_for_a_request_with_a_body_or_over_http_1_0() {
    let (upstream, heads) = switching_upstream("websocket").await;
    let gateway = TestGateway::start(&one_route_config(&[format!("http://{upstream}")], "")).await;
    for request in [
        "GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\nContent-Length: 5\r\n\r\nhello",
        "GET /ws HTTP/1.0\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    ] {
        let text = exchange_until_closed(gateway.addr, request.as_bytes()).await;
        // Sent as a plain request: a 101 to it is the upstream's error (502), never a switch
        // the client's connection cannot make.
        assert!(text.contains(" 502 "), "{request:?}: {text}");
        let head = heads
            .lock()
            .unwrap()
            .pop()
            .expect("the upstream got the request");
        assert!(!head.contains("upgrade"), "{request:?} offered: {head}");
    }
}

/// An upstream that answers every request on a connection with a chunked body and trailers.
async fn trailing_upstream() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                loop {
                    let mut chunk = [0u8; 1024];
                    match stream.read(&mut chunk).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&chunk[..n]),
                        _ => return,
                    }
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        head.clear();
                        let answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\ndata\r\n0\r\nx-sum: 7\r\n\r\n";
                        let _ = stream.write_all(answer.as_bytes()).await;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn trailers_reach_a_client_that_said_te_trailers_and_no_other() {
    let upstream = trailing_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[format!("http://{upstream}")], "")).await;
    let asking = "GET /t HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nConnection: TE, close\r\n\r\n";
    let text = exchange_until_closed(gateway.addr, asking.as_bytes()).await;
    assert!(
        text.ends_with("4\r\ndata\r\n0\r\nx-sum: 7\r\n\r\n"),
        "{text}"
    );
    let plain = "GET /t HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let text = exchange_until_closed(gateway.addr, plain.as_bytes()).await;
    assert!(text.ends_with("4\r\ndata\r\n0\r\n\r\n"), "{text}");
}
