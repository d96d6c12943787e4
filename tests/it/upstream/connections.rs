//! The gateway's own pool of keep-alive connections to upstream servers: connections are
//! reused, and a connection that closed while idle, answered `Connection: close`, answered
//! before its request was sent whole, or lost its response halfway is never handed to another
//! request.

mod naive_upstream;

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use support::recording::read_head;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a hand-written upstream does after answering a request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Keeps the connection open for more requests.
    KeepAlive,
    /// Says nothing about the connection, then closes it after a moment (as a server with a
    /// short keep-alive timeout does while the connection sits idle in the gateway's pool).
    CloseWhenIdle,
    /// Answers `Connection: close` and closes.
    ConnectionClose,
}

/// A hand-written HTTP/1.1 upstream that answers every request head at once ("ok", or 413 to
/// a request with a body, before reading that body), reads the body, and then does `then`.
struct RawUpstream {
    url: String,
    accepted: Arc<AtomicUsize>,
    /// Connections that ended (the gateway closed them, or `then` did).
    ended: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl RawUpstream {
    async fn start(then: Behaviour) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let ended = Arc::new(AtomicUsize::new(0));
        let (counting, ending) = (accepted.clone(), ended.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counting.fetch_add(1, Ordering::SeqCst);
                let ending = ending.clone();
                tokio::spawn(async move {
                    serve_raw(stream, then).await;
                    ending.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        RawUpstream {
            url,
            accepted,
            ended,
            task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn ended(&self) -> usize {
        self.ended.load(Ordering::SeqCst)
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_raw(mut stream: TcpStream, then: Behaviour) {
    let mut buffer = Vec::new();
    loop {
        let Some(head_end) = read_head(&mut stream, &mut buffer).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        let close = matches!(then, Behaviour::ConnectionClose);
        let answer = match (length, close) {
            (0, false) => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            (0, true) => "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
            _ => "HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n",
        };
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        buffer.drain(..head_end);
        while buffer.len() < length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        buffer.drain(..length);
        match then {
            Behaviour::KeepAlive => {}
            Behaviour::ConnectionClose => return,
            Behaviour::CloseWhenIdle => {
                tokio::time::sleep(Duration::from_millis(30)).await;
                return;
            }
        }
    }
}

/// One worker: idle connections are pooled per worker, and these tests count connections.
async fn gateway_for(upstream: &str) -> TestGateway {
    let routes = one_route_config(&[upstream.to_string()], "");
    TestGateway::start(&format!("workers = 1\n{routes}")).await
}

#[tokio::test]
async fn sequential_requests_share_one_upstream_connection_also_after_bodiless_answers() {
    let upstream = TestUpstream::start(|request| async move {
        let mut response = Response::new(match request.uri().path() {
            "/no-content" => empty(),
            _ => full("twelve bytes"),
        });
        if request.uri().path() == "/no-content" {
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        response
    })
    .await;
    let gateway = gateway_for(&upstream.url()).await;
    for round in 0..10 {
        let (response, body) = get(&gateway.url("/doc")).await;
        assert_answer(&response, &body, StatusCode::OK, "twelve bytes", "");
        let head = Request::head(gateway.url("/doc")).body(empty()).unwrap();
        assert_eq!(send(head).await.0.status(), StatusCode::OK, "round {round}");
        let (response, _) = get(&gateway.url("/no-content")).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    // 30 requests, one at a time: each connection is pooled as its answer ends.
    assert_eq!(upstream.accepted(), 1);
}

/// Five requests to an upstream that ends each connection after one answer, each sent once the
/// upstream has closed the last one: each must succeed, on a connection of its own.
async fn each_succeeds_on_a_new_connection(ending: Behaviour) {
    let upstream = RawUpstream::start(ending).await;
    let gateway = gateway_for(&upstream.url).await;
    for round in 0..5 {
        let (response, body) = get(&gateway.url("/")).await;
        assert_answer(
            &response,
            &body,
            StatusCode::OK,
            "ok",
            &format!("round {round}"),
        );
        let closed = eventually(Duration::from_secs(5), || upstream.ended() == round + 1).await;
        assert!(closed, "round {round}: the upstream closed its connection");
    }
    assert_eq!(upstream.accepted(), 5);
}

#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_skipped_without_an_error() {
    // The upstream closes each pooled connection while it is idle, before the next request.
    each_succeeds_on_a_new_connection(Behaviour::CloseWhenIdle).await;
}

#[tokio::test]
async fn a_connection_close_answer_is_not_reused() {
    each_succeeds_on_a_new_connection(Behaviour::ConnectionClose).await;
}

#[tokio::test]
async fn a_connection_answered_before_its_request_was_sent_whole_is_closed_not_reused() {
    let upstream = RawUpstream::start(Behaviour::KeepAlive).await;
    let gateway = gateway_for(&upstream.url).await;
    let (chunks, receiver) = tokio::sync::mpsc::channel::<Result<_, std::io::Error>>(1);
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    });
    let upload = StreamBody::new(stream).map_err(|e| e.into()).boxed();
    let post = Request::post(gateway.url("/upload"))
        .header("content-length", "8")
        .body(upload)
        .unwrap();
    chunks
        .send(Ok(http_body::Frame::data(Bytes::from_static(b"half"))))
        .await
        .unwrap();
    // The upstream answers 413 after the head, while the body is still on its way.
    let (response, _) = send(post).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // That connection is closed as the answer ends, the upload unfinished: the upstream could
    // take the rest of the body for a request of its own.
    let closed = eventually(Duration::from_secs(5), || upstream.ended() == 1);
    assert!(closed.await, "the early-answered connection stayed open");
    let _ = chunks
        .send(Ok(http_body::Frame::data(Bytes::from_static(b"rest"))))
        .await;
    drop(chunks);

    // Other requests get a connection of their own, pooled and reused among them.
    for _ in 0..6 {
        let next = gateway.url("/next");
        let waiting = tokio::time::timeout(Duration::from_secs(10), get(&next));
        let (response, body) = waiting.await.expect("not queued behind the upload");
        assert_answer(&response, &body, StatusCode::OK, "ok", "");
    }
    assert_eq!(upstream.accepted(), 2);
}

/// An attacker's login is answered 401 before its body is read, by an upstream that then
/// takes that body for the next request: the body is a request of the attacker's, which would
/// take the next client's request as its own body and give that client its answer.
#[tokio::test]
async fn an_early_answer_cannot_make_the_next_clients_request_part_of_another() {
    let upstream = naive_upstream::NaiveUpstream::start().await;
    let gateway = gateway_for(&upstream.url).await;

    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: a\r\nContent-Length: 20\r\n\r\n";
    let mut attacker = TcpStream::connect(gateway.addr).await.unwrap();
    let login = format!(
        "POST /login HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        smuggled.len()
    );
    attacker.write_all(login.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = attacker.read(&mut buf).await.unwrap();
        assert!(n > 0, "no answer to the login");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 401"), "{answer:?}");
    // The body, once the answer has come (a write the gateway may refuse), and the end of
    // what the attacker sends, so that the gateway sees the body end.
    let _ = attacker.write_all(smuggled.as_bytes()).await;
    let _ = attacker.shutdown().await;
    let settled = eventually(Duration::from_secs(5), || {
        upstream.smuggled_seen() || upstream.ended() >= 1
    });
    assert!(
        settled.await,
        "the login's connection neither carried the body nor closed"
    );

    // Clients come one after another: none may get another's answer.
    for round in 0..10 {
        let victim = Request::get(gateway.url("/victim"))
            .header("cookie", "session=victim-secret")
            .body(empty())
            .unwrap();
        let (response, body) = send(victim).await;
        let expected = "GET /victim cookie=session=victim-secret body=";
        let case = format!("client {round}'s own answer");
        assert_answer(&response, &body, StatusCode::OK, expected, &case);
    }
    assert!(
        !upstream.smuggled_seen(),
        "the login's body reached the upstream"
    );
}

/// Sends `request` whole (head and a small body in one write) and returns the status line of
/// its answer.
async fn attack_with(gateway: &TestGateway, request: &str) -> String {
    let mut attacker = TcpStream::connect(gateway.addr).await.unwrap();
    attacker.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = attacker.read(&mut buf).await.unwrap();
        assert!(n > 0, "no answer to {request:?}");
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    answer.lines().next().unwrap_or_default().to_string()
}

/// Clients one after another, each on a connection of its own: each must get its own answer.
async fn each_victim_gets_its_own_answer(gateway: &TestGateway, rounds: usize) {
    for round in 0..rounds {
        let path = format!("/victim-{round}");
        let victim = Request::get(gateway.url(&path))
            .header("cookie", "session=victim-secret")
            .body(empty())
            .unwrap();
        let (response, body) = send(victim).await;
        let expected = format!("GET {path} cookie=session=victim-secret body=");
        let case = format!("client {round}'s own answer");
        assert_answer(&response, &body, StatusCode::OK, &expected, &case);
    }
}

/// A body small enough to go out with its head, answered before the upstream read it (a
/// "CL.0" path): the request it hides is answered on the connection after the early answer,
/// at once or (`/slow`) after the next client's request was sent. Neither reaches a client.
#[tokio::test]
async fn a_small_body_answered_unread_cannot_give_its_hidden_requests_answer_to_the_next_client() {
    let upstream = naive_upstream::NaiveUpstream::start().await;
    let gateway = gateway_for(&upstream.url).await;
    for hidden in ["/smuggled", "/slow"] {
        let inner = format!("GET {hidden} HTTP/1.1\r\nHost: a\r\n\r\n");
        let login = format!(
            "POST /login HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{inner}",
            inner.len()
        );
        let status = attack_with(&gateway, &login).await;
        assert!(status.starts_with("HTTP/1.1 401"), "{status}");
        each_victim_gets_its_own_answer(&gateway, 5).await;
    }
    // A 2xx to a body the upstream did not read: the hidden request's answer, sent at once,
    // is found on the idle connection, which is then not reused.
    let inner = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    for _ in 0..5 {
        let before = upstream.answers();
        let status = attack_with(&gateway, &static_post(inner)).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        // The next client comes once the hidden request's answer has been sent too.
        let sent = eventually(Duration::from_secs(5), || upstream.answers() >= before + 2).await;
        assert!(sent, "the upstream answered the hidden request");
        each_victim_gets_its_own_answer(&gateway, 3).await;
    }
}

/// An upstream that sends bytes nobody asked for after a bodiless exchange (a body after a
/// HEAD answer, in a write of its own): once they have arrived they are found on the idle
/// connection, which is then not reused. (Bytes still on their way when the connection is
/// reused cannot be told from its next answer; docs/operations.md, "Timeouts".)
#[tokio::test]
async fn bytes_sent_after_a_head_answer_never_reach_the_next_client() {
    let upstream = naive_upstream::NaiveUpstream::start().await;
    let gateway = gateway_for(&upstream.url).await;
    for _ in 0..20 {
        let head = Request::head(gateway.url("/headbody"))
            .body(empty())
            .unwrap();
        let before = upstream.answers();
        let (response, _) = send(head).await;
        assert_eq!(response.status(), StatusCode::OK);
        // The next client comes once the extra bytes have been sent: on loopback they are then
        // in the gateway's socket, and its event loop sees them before the next request.
        let sent = eventually(Duration::from_secs(5), || upstream.answers() > before).await;
        assert!(sent, "the upstream sent its extra bytes");
        each_victim_gets_its_own_answer(&gateway, 1).await;
    }
}

/// A POST to the path the upstream answers 200 without reading its body, whose body is `inner`.
fn static_post(inner: &str) -> String {
    format!(
        "POST /static HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{inner}",
        inner.len()
    )
}

/// A 2xx to a body the upstream did not read, whose hidden request is answered only after the
/// next client's request was sent: no check of the idle connection can see it coming, so an
/// upstream that may do this is given `reuse_after_body = false`.
#[tokio::test]
async fn with_reuse_after_body_off_a_slow_hidden_request_never_reaches_the_next_client() {
    let upstream = naive_upstream::NaiveUpstream::start().await;
    let routes = one_route_config(
        std::slice::from_ref(&upstream.url),
        "reuse_after_body = false",
    );
    let gateway = TestGateway::start(&routes).await;
    let inner = "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n";
    for _ in 0..3 {
        let status = attack_with(&gateway, &static_post(inner)).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        each_victim_gets_its_own_answer(&gateway, 3).await;
    }
    // Bodiless requests still share connections.
    let before = upstream.accepted();
    each_victim_gets_its_own_answer(&gateway, 5).await;
    assert!(
        upstream.accepted() <= before + 1,
        "{before} then {}",
        upstream.accepted()
    );
}

#[tokio::test]
async fn a_response_dropped_halfway_does_not_return_its_connection() {
    let upstream = TestUpstream::start(|request| async move {
        if request.uri().path() != "/endless" {
            return Response::new(full("short"));
        }
        // One chunk, then nothing: the body never ends.
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<_, std::io::Error>>(1);
        tokio::spawn(async move {
            let first = http_body::Frame::data(Bytes::from_static(b"first"));
            let _ = sender.send(Ok(first)).await;
            sender.closed().await;
        });
        let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        });
        Response::new(StreamBody::new(stream).map_err(|e| e.into()).boxed())
    })
    .await;
    let gateway = gateway_for(&upstream.url()).await;

    let response = client()
        .request(Request::get(gateway.url("/endless")).body(empty()).unwrap())
        .await
        .unwrap();
    let mut body = response.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first");
    drop(body);

    for _ in 0..5 {
        let (response, body) = get(&gateway.url("/short")).await;
        assert_answer(&response, &body, StatusCode::OK, "short", "");
    }
    // The half-read connection was closed, not pooled; the short answers share a second one.
    assert_eq!(upstream.accepted(), 2);
}

#[tokio::test]
async fn a_request_without_host_reaches_the_upstream_with_the_servers_authority() {
    let upstream = TestUpstream::start(|request| async move {
        let host = request.headers().get("host").cloned();
        Response::new(full(
            host.map_or_else(Bytes::new, |h| Bytes::copy_from_slice(h.as_bytes())),
        ))
    })
    .await;
    let gateway = gateway_for(&upstream.url()).await;
    let answer = exchange_until_closed(gateway.addr, b"GET /old HTTP/1.0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(answer.ends_with(&upstream.addr.to_string()), "{answer}");
}
