//! Upstream pools end to end: failure statuses, balancing, ejection with retry, health checks.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use support::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::Notify;

#[tokio::test]
async fn refused_is_502_then_503_while_the_only_server_is_ejected() {
    let dead = refused_addr().await;
    let gateway = TestGateway::start(&one_route_config(&[format!("http://{dead}")], "")).await;

    let (response, body) = send(
        Request::post(gateway.url("/x"))
            .body(full("payload"))
            .unwrap(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let answer = problem(&response, &body);
    assert!(
        !answer["detail"]
            .as_str()
            .unwrap()
            .contains(&dead.to_string()),
        "upstream address leaked: {answer}"
    );

    let (response, body) = get(&gateway.url("/x")).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    problem(&response, &body);
}

#[tokio::test]
async fn a_reset_connection_is_502() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf).await; // read the request, then hang up unanswered
            drop(stream);
        }
    });
    let gateway = TestGateway::start(&one_route_config(&[format!("http://{addr}")], "")).await;
    let (response, body) = get(&gateway.url("/x")).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    problem(&response, &body);
}

#[tokio::test]
async fn a_slow_upstream_is_504_at_response_timeout() {
    let upstream = TestUpstream::slow(Duration::from_secs(30), "late").await;
    let gateway = TestGateway::start(&one_route_config(
        &[upstream.url()],
        "response_timeout = \"300ms\"",
    ))
    .await;
    let started = std::time::Instant::now();
    let (response, body) = get(&gateway.url("/slow")).await;
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(10));
    problem(&response, &body);
}

#[tokio::test]
async fn round_robin_spreads_evenly() {
    let servers = [
        TestUpstream::ok("a").await,
        TestUpstream::ok("b").await,
        TestUpstream::ok("c").await,
    ];
    let urls: Vec<String> = servers.iter().map(TestUpstream::url).collect();
    let gateway = TestGateway::start(&one_route_config(&urls, "balance = \"round_robin\"")).await;
    for _ in 0..30 {
        let (response, _) = get(&gateway.url("/")).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    let hits: Vec<usize> = servers.iter().map(TestUpstream::hits).collect();
    assert_eq!(hits, [10, 10, 10]);
}

#[tokio::test]
async fn a_dead_server_is_ejected_and_traffic_continues_without_errors() {
    let live = TestUpstream::ok("live").await;
    let doomed = TestUpstream::ok("doomed").await;
    let doomed_url = doomed.url();
    let gateway = TestGateway::start(&one_route_config(
        &[live.url(), doomed_url],
        "ejection_time = \"1h\"",
    ))
    .await;
    for _ in 0..4 {
        assert_eq!(get(&gateway.url("/")).await.0.status(), StatusCode::OK);
    }
    assert_eq!((live.hits(), doomed.hits()), (2, 2));

    let (closed, accepted) = (doomed.closed.clone(), doomed.accepted());
    doomed.kill();
    // Once its keep-alive connections are closed, as they would be in life: on loopback the
    // gateway's socket holds the close, and its pool sees it before the next request.
    let gone = eventually(Duration::from_secs(5), || {
        closed.load(Ordering::SeqCst) == accepted
    })
    .await;
    assert!(gone, "the dead server closed its connections");
    // GETs that hit the dead server are retried on the live one; none fails.
    for _ in 0..20 {
        let (response, body) = get(&gateway.url("/")).await;
        assert_answer(&response, &body, StatusCode::OK, "live", "");
    }
    // Once it is out, even requests that cannot be retried go through.
    for _ in 0..6 {
        let (response, _) = send(Request::post(gateway.url("/")).body(full("x")).unwrap()).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(live.hits(), 2 + 20 + 6);
}

#[tokio::test]
async fn least_requests_avoids_the_busy_server() {
    let release = Arc::new(Notify::new());
    let held = release.clone();
    let busy = TestUpstream::start(move |_| {
        let release = held.clone();
        async move {
            release.notified().await;
            Response::new(full("busy"))
        }
    })
    .await;
    let idle = TestUpstream::ok("idle").await;
    let gateway = TestGateway::start(&one_route_config(
        &[busy.url(), idle.url()],
        "balance = \"least_requests\"",
    ))
    .await;

    // The first pick starts at the first server; that request stays in flight there.
    let stuck = tokio::spawn(get(gateway.url("/stuck").leak()));
    assert!(eventually(Duration::from_secs(5), || busy.hits() == 1).await);
    for _ in 0..10 {
        let (response, body) = get(&gateway.url("/")).await;
        assert_answer(&response, &body, StatusCode::OK, "idle", "");
    }
    release.notify_one();
    assert_eq!(stuck.await.unwrap().0.status(), StatusCode::OK);
    assert_eq!(busy.hits(), 1);
}

#[tokio::test]
async fn health_checks_take_a_failing_server_out_and_bring_it_back() {
    let healthy = Arc::new(AtomicBool::new(true));
    let flag = healthy.clone();
    let flaky = TestUpstream::start(move |request| {
        let healthy = flag.load(Ordering::SeqCst);
        async move {
            let mut response = Response::new(full("flaky"));
            if request.uri().path() == "/healthz" && !healthy {
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            }
            response
        }
    })
    .await;
    let steady = TestUpstream::ok("steady").await;
    let checks = "health_check = { path = \"/healthz\", interval = \"50ms\", healthy_threshold = 2, unhealthy_threshold = 2 }";
    let gateway = TestGateway::start(&one_route_config(&[flaky.url(), steady.url()], checks)).await;

    healthy.store(false, Ordering::SeqCst);
    let hits_when_failing = flaky.hits();
    // Once three more checks (two failures and one spare) have reached it, it must be out.
    assert!(
        eventually(Duration::from_secs(10), || flaky.hits()
            >= hits_when_failing + 3)
        .await
    );
    for _ in 0..10 {
        let (_, body) = get(&gateway.url("/work")).await;
        assert_eq!(&body[..], b"steady");
    }

    healthy.store(true, Ordering::SeqCst);
    let came_back = eventually_async(Duration::from_secs(4), async || {
        &get(&gateway.url("/work")).await.1[..] == b"flaky"
    })
    .await;
    assert!(came_back, "the server never returned after passing checks");
}

#[tokio::test]
async fn a_server_that_never_accepts_is_504_at_connect_timeout() {
    // A listener with a full accept queue: further connections stall in SYN until they time out.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let _queued = std::net::TcpStream::connect(addr).unwrap();
    let gateway = TestGateway::start(&one_route_config(
        &[format!("http://{addr}")],
        "connect_timeout = \"300ms\"",
    ))
    .await;

    let started = std::time::Instant::now();
    let (response, body) = get(&gateway.url("/x")).await;
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    let answer = problem(&response, &body);
    assert!(
        answer["detail"].as_str().unwrap().contains("in time"),
        "{answer}"
    );
    drop(listener);
}
