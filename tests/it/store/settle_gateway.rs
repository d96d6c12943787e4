//! Limits with a charge on a real redis-server through real gateways: two gateways settling
//! one key stay exact (a debt made through one refuses the other's next request, a refund made
//! through one is the other's to use), failed logins across a fleet, and a Redis that is away
//! when the answer comes (the reservation stands, counted `store_failed`).

use crate::support;

use std::time::Duration;

use http::{Request, Response, StatusCode};
use support::fleet::{self, status};
use support::redis_server::RedisServer;
use support::*;

/// An upstream answering 200 with `x-usage` copied from the request's `x-report`, or with
/// the status the request's `x-status` names.
async fn reporting_upstream() -> TestUpstream {
    TestUpstream::start(|request: Request<hyper::body::Incoming>| async move {
        let mut response = Response::new(full("ok"));
        if let Some(report) = request.headers().get("x-report") {
            response.headers_mut().insert("x-usage", report.clone());
        }
        if let Some(code) = request.headers().get("x-status") {
            *response.status_mut() = StatusCode::from_bytes(code.as_bytes()).unwrap();
        }
        response
    })
    .await
}

async fn reporting(gateway: &TestGateway, key: &str, report: &str) -> Response<()> {
    let request = (Request::get(gateway.url("/")))
        .header("x-api-key", key)
        .header("x-report", report);
    send(request.body(empty()).unwrap()).await.0
}

async fn settled(gateway: &TestGateway, outcome: &str) -> f64 {
    let series = format!("rlp_limit_settles_total{{limit=\"tokens\",outcome=\"{outcome}\"}}");
    metric(gateway, &series).await
}

/// Polls until `gateway` has counted `n` reservations ended as `outcome`: a settle in Redis
/// runs after the answer, in a task of its own.
async fn until_settled(gateway: &TestGateway, outcome: &str, n: f64) {
    let counted = eventually_async(Duration::from_secs(10), async || {
        settled(gateway, outcome).await == n
    })
    .await;
    assert!(counted, "{outcome}: {}", settled(gateway, outcome).await);
}

fn store(server: &RedisServer, extra: &str) -> String {
    format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"settle:\"\n{extra}",
        server.url()
    )
}

#[tokio::test]
async fn two_gateways_settling_one_key_stay_exact() {
    let server = RedisServer::start();
    let upstream = reporting_upstream().await;
    let limits = fleet::limit(
        "tokens",
        "fixed_window",
        "[{ limit = 100, per = \"1h\" }]",
        "charge = { reserve = 10, settle = \"header:x-usage\" }",
    );
    let config = fleet::config(&upstream, &store(&server, ""), &[("/", "tokens")], &limits);
    let a = TestGateway::start(&config).await;
    let b = TestGateway::start(&config).await;

    // Through a: reserved 10, settled at 95: the window holds 95 of 100.
    assert_eq!(reporting(&a, "k", "95").await.status(), StatusCode::OK);
    until_settled(&a, "settled", 1.0).await;
    // b's next reservation of 10 does not fit.
    assert_eq!(status(&b, "/", "k").await, StatusCode::TOO_MANY_REQUESTS);
    // A fresh key through b: reserved 10, settled at 0: all of it is back, for a to use.
    assert_eq!(reporting(&b, "fresh", "0").await.status(), StatusCode::OK);
    until_settled(&b, "settled", 1.0).await;
    let next = reporting(&a, "fresh", "100").await;
    assert_eq!(next.status(), StatusCode::OK);
    assert_eq!(next.headers()["x-ratelimit-remaining"], "90");
    until_settled(&a, "settled", 2.0).await;
    assert_eq!(
        status(&b, "/", "fresh").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let _ = a.stop().await;
    let _ = b.stop().await;
}

#[tokio::test]
async fn parallel_wrong_passwords_across_a_fleet_reach_the_upstream_at_most_limit_times() {
    let server = RedisServer::start();
    let upstream = reporting_upstream().await;
    let limits = fleet::limit(
        "tokens",
        "token_bucket",
        "[{ limit = 5, per = \"15m\" }]",
        "charge = { statuses = [401] }",
    );
    let config = fleet::config(&upstream, &store(&server, ""), &[("/", "tokens")], &limits);
    let gateways = [
        TestGateway::start(&config).await,
        TestGateway::start(&config).await,
    ];
    // Successful logins give their reservations back.
    for i in 0..20 {
        assert_eq!(status(&gateways[i % 2], "/", "user").await, StatusCode::OK);
    }
    for gateway in &gateways {
        until_settled(gateway, "given_back", 10.0).await;
    }
    let attempts = (0..20).map(|i| {
        let request = (Request::get(gateways[i % 2].url("/")))
            .header("x-api-key", "user")
            .header("x-status", "401");
        send(request.body(empty()).unwrap())
    });
    let statuses: Vec<StatusCode> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .map(|(response, _)| response.status())
        .collect();
    let failed = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!(failed, 5, "{statuses:?}");
    assert_eq!(upstream.hits(), 20 + 5);
    for gateway in gateways {
        let _ = gateway.stop().await;
    }
}

#[tokio::test]
async fn a_settle_that_cannot_reach_redis_leaves_the_reservation_standing_and_is_counted() {
    let mut server = RedisServer::start();
    // The upstream answers once the test says Redis is gone, not after a set time.
    let redis_gone = std::sync::Arc::new(tokio::sync::Notify::new());
    let answer_when = redis_gone.clone();
    let upstream = TestUpstream::start(move |_| {
        let answer_when = answer_when.clone();
        async move {
            answer_when.notified().await;
            let mut response = Response::new(full("ok"));
            response
                .headers_mut()
                .insert("x-usage", "0".parse().unwrap());
            response
        }
    })
    .await;
    let limits = fleet::limit(
        "tokens",
        "fixed_window",
        "[{ limit = 100, per = \"1h\" }]",
        "charge = { reserve = 10, settle = \"header:x-usage\" }",
    );
    let config = fleet::config(
        &upstream,
        &store(&server, "timeout = \"50ms\""),
        &[("/", "tokens")],
        &limits,
    );
    let gateway = TestGateway::start(&config).await;
    // Reserved while Redis is up; Redis is gone before the answer comes.
    let answered = tokio::spawn({
        let url = gateway.url("/");
        async move {
            let request = Request::get(url).header("x-api-key", "k");
            send(request.body(empty()).unwrap()).await.0.status()
        }
    });
    assert!(eventually(Duration::from_secs(5), || upstream.hits() == 1).await);
    server.kill();
    redis_gone.notify_one();
    assert_eq!(answered.await.unwrap(), StatusCode::OK);
    until_settled(&gateway, "store_failed", 1.0).await;
    let units = "rlp_limit_units_total{limit=\"tokens\",kind=\"refunded\"}";
    assert_eq!(metric(&gateway, units).await, 0.0);
    let _ = gateway.stop().await;
}
