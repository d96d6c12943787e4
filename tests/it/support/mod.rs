//! Shared test harness: the real gateway on 127.0.0.1:0, in-process upstreams with a
//! scripted handler, and a small HTTP client.
#![allow(dead_code)]

pub mod binary;
pub mod fleet;
pub mod recording;
pub mod redis_server;
pub mod scrape;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub type TestBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;
type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<TestBody>> + Send>>
        + Send
        + Sync,
>;

pub fn full(body: impl Into<Bytes>) -> TestBody {
    Full::new(body.into()).map_err(|e| match e {}).boxed()
}

/// An HTTP/2 connection with prior knowledge (h2c) to `addr`, driven by a task of its own.
pub async fn h2c_sender(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<TestBody> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

pub fn empty() -> TestBody {
    Empty::new().map_err(|e| match e {}).boxed()
}

/// A running gateway; shut it down with `stop`.
pub struct TestGateway {
    pub addr: SocketAddr,
    /// The first `[[server.tls]]` listener, if any.
    pub tls_addr: Option<SocketAddr>,
    pub admin_addr: Option<SocketAddr>,
    pub certificates: ratelimit_proxy::CertificateReloader,
    pub reloader: ratelimit_proxy::Reloader,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<ratelimit_proxy::Drain, ratelimit_proxy::ServeError>>,
}

impl TestGateway {
    /// Starts the gateway from config text; `listen` is forced to 127.0.0.1:0.
    pub async fn start(config_text: &str) -> TestGateway {
        let text = format!("[server]\nlisten = [\"127.0.0.1:0\"]\n{config_text}");
        let config = ratelimit_proxy::testing::parse_str(&text, "test.toml")
            .unwrap_or_else(|e| panic!("{e}"));
        TestGateway::serve(config, None).await
    }

    /// As `start`, with the clock the gateway's in-process limits, edge layer and leases read:
    /// a test advances it instead of waiting for a window to pass.
    pub async fn start_with_clock(
        config_text: &str,
        clock: Arc<dyn ratelimit_proxy::testing::Clock>,
    ) -> TestGateway {
        let text = format!("[server]\nlisten = [\"127.0.0.1:0\"]\n{config_text}");
        let config = ratelimit_proxy::testing::parse_str(&text, "test.toml")
            .unwrap_or_else(|e| panic!("{e}"));
        TestGateway::serve(config, Some(clock)).await
    }

    /// Writes `files` and `gw.toml` (config text, `listen` forced to 127.0.0.1:0) into a fresh
    /// directory and starts the gateway from that file, so relative paths (lists, plans) resolve.
    pub async fn start_in_dir(
        name: &str,
        files: &[(&str, &str)],
        config_text: &str,
    ) -> (TestGateway, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("rlp-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (file, contents) in files {
            std::fs::write(dir.join(file), contents).unwrap();
        }
        let path = dir.join("gw.toml");
        std::fs::write(
            &path,
            format!("[server]\nlisten = [\"127.0.0.1:0\"]\n{config_text}"),
        )
        .unwrap();
        let config = ratelimit_proxy::testing::load(&path).unwrap_or_else(|e| panic!("{e}"));
        (TestGateway::serve(config, None).await, path)
    }

    /// As `start`, listening on `listen` (`"[::]:0"`, say) instead; `None` when that cannot
    /// be bound (no IPv6 on the machine).
    pub async fn start_on(listen: &str, config_text: &str) -> Option<TestGateway> {
        let text = format!("[server]\nlisten = [\"{listen}\"]\n{config_text}");
        let config = ratelimit_proxy::testing::parse_str(&text, "test.toml")
            .unwrap_or_else(|e| panic!("{e}"));
        let gateway = ratelimit_proxy::Gateway::bind(config).await.ok()?;
        Some(TestGateway::serving(gateway))
    }

    async fn serve(
        config: ratelimit_proxy::Config,
        clock: Option<Arc<dyn ratelimit_proxy::testing::Clock>>,
    ) -> TestGateway {
        let gateway = match clock {
            Some(clock) => ratelimit_proxy::Gateway::bind_with_clock(config, clock).await,
            None => ratelimit_proxy::Gateway::bind(config).await,
        }
        .expect("bind");
        TestGateway::serving(gateway)
    }

    fn serving(gateway: ratelimit_proxy::Gateway) -> TestGateway {
        let addr = gateway.local_addrs()[0];
        let tls_addr = gateway.tls_addrs().first().copied();
        let admin_addr = gateway.admin_addr();
        let certificates = gateway.certificate_reloader();
        let reloader = gateway.reloader();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(gateway.serve(async move {
            let _ = rx.await;
        }));
        TestGateway {
            addr,
            tls_addr,
            admin_addr,
            certificates,
            reloader,
            shutdown: Some(tx),
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Drops the serving future without a shutdown signal, as when its runtime goes away.
    pub fn abort(self) {
        self.task.abort();
    }

    /// Signals shutdown and returns the serve task, to await when the test wants.
    pub fn stop(
        mut self,
    ) -> JoinHandle<Result<ratelimit_proxy::Drain, ratelimit_proxy::ServeError>> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task
    }
}

/// An in-process upstream that answers with `handler` and counts requests.
pub struct TestUpstream {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
    /// Connections closed so far (by either end, or by `kill`).
    pub closed: Arc<AtomicUsize>,
    task: JoinHandle<()>,
    /// Cancelling it closes every open connection, as a crashed server would.
    connections: tokio_util::sync::CancellationToken,
}

impl TestUpstream {
    pub async fn start<F, Fut>(handler: F) -> TestUpstream
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<TestBody>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |request| Box::pin(handler(request)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let accepted = Arc::new(AtomicUsize::new(0));
        let accepting = accepted.clone();
        let closed = Arc::new(AtomicUsize::new(0));
        let closing_count = closed.clone();
        let connections = tokio_util::sync::CancellationToken::new();
        let closing = connections.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                accepting.fetch_add(1, Ordering::SeqCst);
                let handler = handler.clone();
                let counted = counted.clone();
                let closing = closing.clone();
                let closing_count = closing_count.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let answer = handler(request);
                        async move { Ok::<_, Infallible>(answer.await) }
                    });
                    let builder = auto::Builder::new(TokioExecutor::new());
                    let connection =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = connection => {}
                        _ = closing.cancelled() => {}
                    }
                    // The connection (and its socket) is dropped by now.
                    closing_count.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        TestUpstream {
            addr,
            hits,
            accepted,
            closed,
            task,
            connections,
        }
    }

    /// An upstream that answers 200 with `body`.
    pub async fn ok(body: &'static str) -> TestUpstream {
        TestUpstream::start(move |_| async move { Response::new(full(body)) }).await
    }

    /// An upstream that answers 200 with `body` after `delay`.
    pub async fn slow(delay: Duration, body: &'static str) -> TestUpstream {
        TestUpstream::start(move |_| async move {
            tokio::time::sleep(delay).await;
            Response::new(full(body))
        })
        .await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Closes the listener and every open connection, so new connections are refused.
    pub fn kill(self) {
        self.connections.cancel();
        self.task.abort();
    }
}

impl Drop for TestUpstream {
    fn drop(&mut self) {
        self.connections.cancel();
        self.task.abort();
    }
}

/// An address where nothing listens: connections are refused.
pub async fn refused_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// A config with one upstream `api` over `servers` and one catch-all route to it.
pub fn one_route_config(servers: &[String], upstream_extra: &str) -> String {
    let servers: Vec<String> = servers.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "[[upstreams]]\nname = \"api\"\nservers = [{}]\n{upstream_extra}\n\n[[routes]]\nname = \"default\"\nupstream = \"api\"\n",
        servers.join(", ")
    )
}

pub fn client() -> Client<HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A client whose connections come from `source` (e.g. 127.0.0.2, a trusted proxy in a test).
pub fn client_from(source: std::net::IpAddr) -> Client<HttpConnector, TestBody> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(source));
    Client::builder(TokioExecutor::new()).build(connector)
}

/// Sends a request and collects the whole answer.
pub async fn send(request: Request<TestBody>) -> (Response<()>, Bytes) {
    let response = tokio::time::timeout(Duration::from_secs(20), client().request(request))
        .await
        .expect("the gateway answered in time")
        .expect("request failed");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (Response::from_parts(parts, ()), bytes)
}

/// Sends `bytes` as they are on a new connection to `addr` and reads until the gateway
/// closes it (within 10 s): for requests no HTTP client would send, or answers read raw.
pub async fn exchange_until_closed(addr: SocketAddr, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer));
    read.await.expect("closed within 10 s").unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

pub async fn get(url: &str) -> (Response<()>, Bytes) {
    send(Request::get(url).body(empty()).unwrap()).await
}

/// Asserts an answer's status and body together (both show in a failure); `case` names the
/// loop round or path when there is one.
#[track_caller]
pub fn assert_answer(
    response: &Response<()>,
    body: &[u8],
    status: http::StatusCode,
    expected: &str,
    case: &str,
) {
    assert_eq!(
        (response.status(), body),
        (status, expected.as_bytes()),
        "{case}"
    );
}

/// Parses a generated problem+json answer, checking its content type and request id.
pub fn problem(response: &Response<()>, body: &[u8]) -> serde_json::Value {
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let json: serde_json::Value = serde_json::from_slice(body).expect("problem+json body");
    assert_eq!(json["status"], response.status().as_u16());
    assert_eq!(
        json["request_id"],
        response.headers()["x-request-id"].to_str().unwrap()
    );
    json
}

/// A single-threaded event loop of the test's own, as each serving worker runs.
pub fn event_loop() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Polls `condition` every 20 ms until it holds or `within` passes.
pub async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

/// As `eventually`, for a condition that must await (a request, a scrape).
pub async fn eventually_async(within: Duration, mut condition: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if condition().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition().await
}

/// As `eventually`, on a thread of its own (no event loop): for harness code and `#[test]`s
/// that block.
pub fn eventually_blocking(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    condition()
}

/// `ratelimit-proxy check --config PATH` run as the real binary: whether it passed, and what it
/// printed (stdout then stderr). cargo names the binary to integration tests only; read at run
/// time, so that other targets (examples/paired_latency's tests) can share this harness.
pub fn check_config(path: &std::path::Path) -> (bool, String) {
    let Some(binary) = option_env!("CARGO_BIN_EXE_ratelimit-proxy") else {
        panic!("check_config runs in integration tests, which cargo gives the binary's path");
    };
    let output = std::process::Command::new(binary)
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("run ratelimit-proxy check");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// The value of the line of the gateway's `/metrics` (its admin listener's) that starts with
/// `series` (name and labels), or 0 when there is none.
pub async fn metric(gateway: &TestGateway, series: &str) -> f64 {
    let admin = gateway
        .admin_addr
        .expect("the gateway has an [admin] listener");
    let (_, body) = get(&format!("http://{admin}/metrics")).await;
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|line| line.strip_prefix(series).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0.0)
}

/// Reads from `stream` until the peer closes it (or fails it), at most `within`: every byte
/// read, and whether it was closed by then.
pub async fn read_until_closed(
    stream: &mut tokio::net::TcpStream,
    within: Duration,
) -> (Vec<u8>, bool) {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + within;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (bytes, false),
            Ok(Ok(0)) | Ok(Err(_)) => return (bytes, true),
            Ok(Ok(n)) => bytes.extend_from_slice(&buf[..n]),
        }
    }
}

/// An upstream that answers every request with a 101 switching to `protocol`, whatever was
/// asked, then echoes what follows; it keeps each request head it read.
pub async fn switching_upstream(
    protocol: &'static str,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut chunk = [0u8; 1024];
                    match tokio::io::AsyncReadExt::read(&mut stream, &mut chunk).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&chunk[..n]),
                        _ => return,
                    }
                }
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let answer = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: {protocol}\r\n\r\n"
                );
                let _ = tokio::io::AsyncWriteExt::write_all(&mut stream, answer.as_bytes()).await;
                let (mut reader, mut writer) = stream.split();
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
            });
        }
    });
    (addr, heads)
}

/// An upstream answering with the request's method and path, and the body it got.
pub async fn echo_upstream() -> TestUpstream {
    TestUpstream::start(|request| async move {
        let line = format!("{} {} ", request.method(), request.uri().path());
        let body = request.into_body().collect().await.unwrap().to_bytes();
        Response::new(full([line.as_bytes(), &body].concat()))
    })
    .await
}
