//! Limits that settle by their answer (`charge`), end to end through the real gateway, the
//! memory store and scripted upstreams: a usage header's debt, statuses kept and given back,
//! refunds of answers no upstream gave, the overshoot bound of concurrent requests.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use support::*;
use tokio::sync::Barrier;

/// A gateway with an admin listener, one catch-all route to `upstream` applying `limit`
/// (the TOML of one `[[limits]]` entry named "charged").
pub(super) async fn charged_gateway(
    upstream: &str,
    limit: &str,
    clock: Arc<ratelimit_proxy::testing::ManualClock>,
) -> TestGateway {
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n[[upstreams]]\nname = \"api\"\nservers = [\"{upstream}\"]\n\n\
         [[routes]]\nname = \"default\"\nupstream = \"api\"\nlimits = [\"charged\"]\n\n\
         [[limits]]\nname = \"charged\"\nkey = [\"header:x-api-key\"]\n{limit}\n"
    );
    TestGateway::start_with_clock(&config, clock).await
}

pub(super) async fn call(gateway: &TestGateway, key: &str) -> (Response<()>, bytes::Bytes) {
    let request = Request::get(gateway.url("/")).header("x-api-key", key);
    send(request.body(empty()).unwrap()).await
}

pub(super) fn header(response: &Response<()>, name: &str) -> String {
    (response.headers().get(name))
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

pub(super) async fn units(gateway: &TestGateway, kind: &str) -> f64 {
    metric(
        gateway,
        &format!("rlp_limit_units_total{{limit=\"charged\",kind=\"{kind}\"}}"),
    )
    .await
}

pub(super) async fn settles(gateway: &TestGateway, outcome: &str) -> f64 {
    metric(
        gateway,
        &format!("rlp_limit_settles_total{{limit=\"charged\",outcome=\"{outcome}\"}}"),
    )
    .await
}

/// An upstream answering 200 with `x-usage: N`, N taken from the request's `x-report`.
async fn usage_header_upstream() -> TestUpstream {
    TestUpstream::start(|request: Request<hyper::body::Incoming>| async move {
        let report = request.headers().get("x-report").cloned();
        let mut response = Response::new(full("ok"));
        if let Some(report) = report {
            response.headers_mut().insert("x-usage", report);
        }
        response
    })
    .await
}

async fn call_reporting(gateway: &TestGateway, key: &str, report: &str) -> Response<()> {
    let request = (Request::get(gateway.url("/")))
        .header("x-api-key", key)
        .header("x-report", report);
    send(request.body(empty()).unwrap()).await.0
}

#[tokio::test]
async fn a_usage_headers_debt_refuses_the_next_request_for_exactly_as_long_as_it_takes_to_pay() {
    let upstream = usage_header_upstream().await;
    let clock = Arc::new(ratelimit_proxy::testing::ManualClock::new());
    // One token every 6 s, 10 at most.
    let limit = "algorithm = \"token_bucket\"\nrates = [{ limit = 10, per = \"1m\" }]\n\
                 charge = { reserve = 1, settle = \"header:x-usage\" }";
    let gateway = charged_gateway(&upstream.url(), limit, clock.clone()).await;

    // Reserved 1 of 10, settled at 15: the bucket is 5 below empty, and the next request
    // needs 6 tokens' refill (36 s) for its own one.
    let first = call_reporting(&gateway, "k", "15").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "x-ratelimit-remaining"), "9");
    let (denied, _) = call(&gateway, "k").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "36");
    // The admin endpoint shows the debt and when it is paid back: 5 tokens' refill, 30 s
    // (the next request then waits for its own token too).
    let admin = gateway.admin_addr.unwrap();
    let (_, state) = get(&format!("http://{admin}/limits/charged/state?key=k")).await;
    let state: serde_json::Value = serde_json::from_slice(&state).unwrap();
    assert_eq!(state["windows"][0]["remaining"], 0, "{state}");
    assert_eq!(state["windows"][0]["debt_until"], 30, "{state}");
    clock.advance(Duration::from_secs(35));
    assert_eq!(
        call(&gateway, "k").await.0.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_secs(1));
    // Settled at what it reported: 0 gives its reservation back.
    let paid = call_reporting(&gateway, "k", "0").await;
    assert_eq!(paid.status(), StatusCode::OK);
    assert_eq!(
        call_reporting(&gateway, "k", "1").await.status(),
        StatusCode::OK
    );
    assert_eq!(upstream.hits(), 3);
    let (_, state) = get(&format!("http://{admin}/limits/charged/state?key=k")).await;
    let state: serde_json::Value = serde_json::from_slice(&state).unwrap();
    assert_eq!(state["windows"][0]["debt_until"], serde_json::Value::Null);
    // Another key is not touched.
    assert_eq!(
        header(&call(&gateway, "other").await.0, "x-ratelimit-remaining"),
        "9"
    );

    assert_eq!(units(&gateway, "reserved").await, 4.0);
    assert_eq!(units(&gateway, "debt").await, 14.0);
    assert_eq!(units(&gateway, "refunded").await, 1.0);
    assert_eq!(settles(&gateway, "settled").await, 3.0);
    // The last call reported nothing: its reservation stands.
    assert_eq!(settles(&gateway, "missing").await, 1.0);
    assert_eq!(units(&gateway, "settled").await, 15.0 + 0.0 + 1.0 + 1.0);
}

#[tokio::test]
async fn usage_headers_that_are_not_one_plain_integer_leave_the_reservation_standing() {
    let upstream = TestUpstream::start(|request: Request<hyper::body::Incoming>| async move {
        let mut response = Response::new(full("ok"));
        let headers = response.headers_mut();
        for value in request.headers().get_all("x-report") {
            headers.append("x-usage", value.clone());
        }
        response
    })
    .await;
    let clock = Arc::new(ratelimit_proxy::testing::ManualClock::new());
    let limit = "algorithm = \"fixed_window\"\nrates = [{ limit = 100, per = \"1m\" }]\n\
                 charge = { reserve = 10, settle = \"header:x-usage\" }";
    let gateway = charged_gateway(&upstream.url(), limit, clock).await;
    let garbage = [
        "-1",
        "1.5",
        "1e3",
        "0x10",
        "18446744073709551616",
        "12 tokens",
        "",
    ];
    for value in garbage {
        let response = call_reporting(&gateway, "k", value).await;
        assert_eq!(response.status(), StatusCode::OK, "{value:?}");
    }
    // Twice: which one the upstream meant cannot be known.
    let request = (Request::get(gateway.url("/")))
        .header("x-api-key", "k")
        .header("x-report", "1")
        .header("x-report", "2");
    assert_eq!(
        send(request.body(empty()).unwrap()).await.0.status(),
        StatusCode::OK
    );
    // Eight reservations of 10 stood: 80 of 100 used, and the next one reserves 10 more.
    let next = call_reporting(&gateway, "k", " 5 ").await;
    assert_eq!(header(&next, "x-ratelimit-remaining"), "10");
    assert_eq!(settles(&gateway, "invalid").await, 8.0);
    assert_eq!(settles(&gateway, "settled").await, 1.0);
    assert_eq!(units(&gateway, "refunded").await, 5.0);
    assert_eq!(
        header(
            &call_reporting(&gateway, "k", "0").await,
            "x-ratelimit-remaining"
        ),
        "5"
    );
}

#[tokio::test]
async fn failed_logins_count_only_the_failures_and_parallel_ones_reach_the_upstream_at_most_limit_times()
 {
    let failing = Arc::new(AtomicU64::new(1));
    let answers = failing.clone();
    let barrier = Arc::new(Barrier::new(5));
    let waiting = barrier.clone();
    let upstream = TestUpstream::start(move |_| {
        let (answers, waiting) = (answers.clone(), waiting.clone());
        async move {
            if answers.load(Ordering::SeqCst) == 0 {
                return Response::new(full("welcome"));
            }
            // The five admitted failures are all in flight together.
            waiting.wait().await;
            let mut response = Response::new(full("wrong password"));
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            response
        }
    })
    .await;
    let clock = Arc::new(ratelimit_proxy::testing::ManualClock::new());
    let limit = "rates = [{ limit = 5, per = \"15m\" }]\ncharge = { statuses = [401, 403] }";
    let gateway = charged_gateway(&upstream.url(), limit, clock).await;

    // Successful logins are never counted.
    failing.store(0, Ordering::SeqCst);
    for _ in 0..20 {
        assert_eq!(call(&gateway, "user").await.0.status(), StatusCode::OK);
    }
    assert_eq!(settles(&gateway, "given_back").await, 20.0);
    failing.store(1, Ordering::SeqCst);
    let attempts = (0..20).map(|_| call(&gateway, "user"));
    let statuses: Vec<StatusCode> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .map(|(response, _)| response.status())
        .collect();
    let count = |status| statuses.iter().filter(|s| **s == status).count();
    assert_eq!(count(StatusCode::UNAUTHORIZED), 5, "{statuses:?}");
    assert_eq!(count(StatusCode::TOO_MANY_REQUESTS), 15, "{statuses:?}");
    assert_eq!(upstream.hits(), 20 + 5);
    assert_eq!(settles(&gateway, "kept").await, 5.0);
    // The five failures stay counted.
    assert_eq!(
        call(&gateway, "user").await.0.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn refunds_give_back_what_no_upstream_answered_and_what_answered_5xx() {
    let down = refused_addr().await;
    let clock = Arc::new(ratelimit_proxy::testing::ManualClock::new());
    let limit = "rates = [{ limit = 2, per = \"1m\" }]\ncharge = { refund = [\"upstream_error\", \"5xx\"] }";
    let gateway = charged_gateway(&format!("http://{down}"), limit, clock.clone()).await;
    for _ in 0..10 {
        // 502 while the server is tried, 503 once it is ejected: both made here.
        let status = call(&gateway, "k").await.0.status().as_u16();
        assert!(matches!(status, 502 | 503), "{status}");
    }
    assert_eq!(settles(&gateway, "given_back").await, 10.0);
    assert_eq!(units(&gateway, "refunded").await, 10.0);

    let unavailable = TestUpstream::start(|_| async {
        let mut response = Response::new(full("busy"));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
    })
    .await;
    let gateway = charged_gateway(&unavailable.url(), limit, clock).await;
    for _ in 0..10 {
        let (response, _) = call(&gateway, "k").await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(header(&response, "x-ratelimit-remaining"), "1");
    }
    assert_eq!(unavailable.hits(), 10);
}

#[tokio::test]
async fn concurrent_requests_overshoot_by_at_most_in_flight_times_actual_less_reserve() {
    // Three reservations of 10 fill the limit of 30; all three are in flight together, and
    // each really costs 30.
    let barrier = Arc::new(Barrier::new(3));
    let waiting = barrier.clone();
    let upstream = TestUpstream::start(move |_| {
        let waiting = waiting.clone();
        async move {
            waiting.wait().await;
            let mut response = Response::new(full("ok"));
            response
                .headers_mut()
                .insert("x-usage", "30".parse().unwrap());
            response
        }
    })
    .await;
    let clock = Arc::new(ratelimit_proxy::testing::ManualClock::new());
    let limit = "algorithm = \"fixed_window\"\nrates = [{ limit = 30, per = \"1m\" }]\n\
                 charge = { reserve = 10, settle = \"header:x-usage\" }";
    let gateway = charged_gateway(&upstream.url(), limit, clock).await;
    let statuses: Vec<StatusCode> =
        futures_util::future::join_all((0..6).map(|_| call(&gateway, "k")))
            .await
            .into_iter()
            .map(|(response, _)| response.status())
            .collect();
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 3);
    assert_eq!(upstream.hits(), 3);
    // Counted: 3 × 30 = 90 against 30, an overshoot of 60 = 3 in flight × (30 − 10).
    assert_eq!(units(&gateway, "settled").await, 90.0);
    assert_eq!(units(&gateway, "debt").await, 60.0);
    assert_eq!(
        call(&gateway, "k").await.0.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_bodys_length_can_be_its_usage() {
    let upstream = TestUpstream::ok("0123456789").await;
    let clock = Arc::new(ratelimit_proxy::testing::ManualClock::new());
    let limit = "algorithm = \"fixed_window\"\nrates = [{ limit = 100, per = \"1m\" }]\n\
                 charge = { reserve = 30, settle = \"header:content-length\" }";
    let gateway = charged_gateway(&upstream.url(), limit, clock).await;
    assert_eq!(
        header(&call(&gateway, "k").await.0, "x-ratelimit-remaining"),
        "70"
    );
    // The first counts 10 now: 10 + 30 reserved.
    assert_eq!(
        header(&call(&gateway, "k").await.0, "x-ratelimit-remaining"),
        "60"
    );
    assert_eq!(units(&gateway, "refunded").await, 40.0);
}

#[tokio::test]
async fn a_failed_login_whose_body_breaks_after_its_head_went_upstream_stays_counted() {
    // The upstream judges the head at once; the client's body then breaks. Whether the client
    // gets the upstream's 401 or the gateway's 400, the attempt may have been judged: kept.
    let upstream = TestUpstream::start(|_| async {
        let mut response = Response::new(full("wrong password"));
        *response.status_mut() = StatusCode::UNAUTHORIZED;
        response
    })
    .await;
    let clock = Arc::new(ratelimit_proxy::testing::ManualClock::new());
    let limit = "rates = [{ limit = 5, per = \"15m\" }]\ncharge = { statuses = [401] }";
    let gateway = charged_gateway(&upstream.url(), limit, clock).await;
    let raw = "POST / HTTP/1.1\r\nhost: api\r\nx-api-key: user\r\ntransfer-encoding: chunked\r\n\
               connection: close\r\n\r\n5\r\nhello\r\nzz\r\n";
    for _ in 0..5 {
        let status = support::recording::raw_status(gateway.addr, raw.as_bytes()).await;
        assert!(matches!(status, 400 | 401), "{status}");
    }
    assert_eq!(
        support::recording::raw_status(gateway.addr, raw.as_bytes()).await,
        429
    );
    assert_eq!(settles(&gateway, "given_back").await, 0.0);
}
