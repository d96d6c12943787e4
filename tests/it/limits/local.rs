//! Per-key limits end to end through the real gateway and an in-process upstream.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use support::*;
use tokio::sync::Notify;

/// Sends GET `path` with optional x-api-key; returns the answer head and body.
async fn call(
    gateway: &TestGateway,
    path: &str,
    api_key: Option<&str>,
) -> (Response<()>, bytes::Bytes) {
    let mut request = Request::get(gateway.url(path));
    if let Some(key) = api_key {
        request = request.header("x-api-key", key);
    }
    send(request.body(empty()).unwrap()).await
}

fn header(response: &Response<()>, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// A gateway with `limits` (TOML) and one catch-all route applying `route_limits`.
async fn gateway(upstream: &TestUpstream, sections: &str, route_extra: &str) -> TestGateway {
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\n[[routes]]\nname = \"default\"\nupstream = \"api\"\n{route_extra}\n\n{sections}",
        upstream.url()
    );
    TestGateway::start(&config).await
}

#[tokio::test]
async fn headers_on_200_and_429_and_retry_after_is_honest() {
    let upstream = TestUpstream::ok("ok").await;
    let limits = r#"
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
rates = [{ limit = 3, per = "3s" }, { limit = 1000, per = "1d" }]
"#;
    let clock = Arc::new(ratelimit_proxy::testing::ManualClock::new());
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\n[[routes]]\nname = \"default\"\nupstream = \"api\"\nlimits = [\"per-key\"]\n\n{limits}",
        upstream.url()
    );
    let gateway = TestGateway::start_with_clock(&config, clock.clone()).await;

    // One token a second; the clock stands still between the calls.
    for (expected_remaining, reset) in [("2", "1"), ("1", "2"), ("0", "3")] {
        let (response, _) = call(&gateway, "/", Some("k1")).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "x-ratelimit-limit"), "3");
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            expected_remaining
        );
        assert_eq!(header(&response, "x-ratelimit-reset"), reset);
        assert_eq!(
            header(&response, "ratelimit-policy"),
            "\"per-key-3s\";q=3;w=3, \"per-key-1d\";q=1000;w=86400"
        );
        assert_eq!(
            header(&response, "ratelimit"),
            format!("\"per-key-3s\";r={expected_remaining};t={reset}")
        );
    }
    let (denied, body) = call(&gateway, "/", Some("k1")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "1");
    assert_eq!(header(&denied, "x-ratelimit-remaining"), "0");
    let answer = problem(&denied, &body);
    assert!(
        answer["detail"].as_str().unwrap().contains("\"per-key\""),
        "{answer}"
    );
    assert_eq!(upstream.hits(), 3);

    // Another key is counted on its own.
    assert_eq!(
        call(&gateway, "/", Some("k2")).await.0.status(),
        StatusCode::OK
    );
    // Waiting exactly Retry-After is enough, and a moment less is not.
    clock.advance(Duration::from_millis(999));
    assert_eq!(
        call(&gateway, "/", Some("k1")).await.0.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        call(&gateway, "/", Some("k1")).await.0.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_denied_request_consumes_nothing_in_any_limit() {
    let upstream = TestUpstream::ok("ok").await;
    let limits = r#"
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
rates = [{ limit = 2, per = "1h" }]

[[limits]]
name = "everyone"
key = ["global"]
algorithm = "sliding_window"
rates = [{ limit = 3, per = "1h" }]
"#;
    let gateway = gateway(&upstream, limits, "limits = [\"per-key\", \"everyone\"]").await;
    for _ in 0..2 {
        assert_eq!(
            call(&gateway, "/", Some("greedy")).await.0.status(),
            StatusCode::OK
        );
    }
    for _ in 0..10 {
        assert_eq!(
            call(&gateway, "/", Some("greedy")).await.0.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    // The greedy key's refused attempts took nothing from the global limit: one is left.
    assert_eq!(
        call(&gateway, "/", Some("polite")).await.0.status(),
        StatusCode::OK
    );
    let (refused, _) = call(&gateway, "/", Some("polite")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        header(&refused, "ratelimit").starts_with("\"everyone\""),
        "{}",
        header(&refused, "ratelimit")
    );
    assert_eq!(upstream.hits(), 3);
}

#[tokio::test]
async fn cost_is_taken_per_request() {
    let upstream = TestUpstream::ok("ok").await;
    let limits =
        "[[limits]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrates = [{ limit = 10, per = \"1h\" }]\n";
    let gateway = gateway(&upstream, limits, "limits = [\"per-ip\"]\ncost = 3").await;
    let remaining: Vec<String> =
        futures_util::future::join_all((0..3).map(|_| call(&gateway, "/", None)))
            .await
            .iter()
            .map(|(r, _)| header(r, "x-ratelimit-remaining"))
            .collect();
    let mut sorted = remaining.clone();
    sorted.sort();
    assert_eq!(sorted, ["1", "4", "7"]);
    assert_eq!(
        call(&gateway, "/", None).await.0.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn tiers_from_a_plans_file_unlimited_and_default() {
    let upstream = TestUpstream::ok("ok").await;
    let text = format!(
        r#"[[upstreams]]
name = "api"
servers = ["{}"]
[[routes]]
name = "default"
upstream = "api"
limits = ["per-key"]
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
rates = [{{ limit = 2, per = "1h" }}]
tiers = {{ free = [{{ limit = 1, per = "1h" }}], pro = [{{ limit = 5, per = "1h" }}], internal = "unlimited" }}
[plans]
key = "header:x-api-key"
file = "plans.toml"
default = "free"
"#,
        upstream.url()
    );
    let plans = "\"key-pro\" = \"pro\"\n\"key-internal\" = \"internal\"\n";
    let (gateway, _) = TestGateway::start_in_dir("plans", &[("plans.toml", plans)], &text).await;
    let addr = gateway.addr;
    let allowed = |key: &'static str, tries: usize| async move {
        let mut allowed = 0;
        for _ in 0..tries {
            let request = Request::get(format!("http://{addr}/"))
                .header("x-api-key", key)
                .body(empty())
                .unwrap();
            if send(request).await.0.status() == StatusCode::OK {
                allowed += 1;
            }
        }
        allowed
    };
    assert_eq!(allowed("key-pro", 10).await, 5);
    assert_eq!(allowed("key-internal", 30).await, 30);
    assert_eq!(
        allowed("key-unknown", 10).await,
        1,
        "unknown identities get the default tier"
    );
}

#[tokio::test]
async fn exempt_lists_skip_the_limit() {
    let upstream = TestUpstream::ok("ok").await;
    let sections = r#"
[client_ip]
trusted_proxies = ["127.0.0.2"]
[ip_lists]
partners = ["198.51.100.0/24"]
[[limits]]
name = "per-ip"
key = ["ip"]
rates = [{ limit = 1, per = "1h" }]
exempt_lists = ["partners"]
"#;
    let config = format!(
        "{sections}\n[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n[[routes]]\nname = \"default\"\nupstream = \"api\"\nlimits = [\"per-ip\"]\n",
        upstream.url()
    );
    let gateway = TestGateway::start(&config).await;
    let via_balancer = client_from("127.0.0.2".parse().unwrap());
    let status = |xff: &'static str| {
        let request = Request::get(gateway.url("/"))
            .header("x-forwarded-for", xff)
            .body(empty())
            .unwrap();
        let response = via_balancer.request(request);
        async move { response.await.unwrap().status() }
    };
    for _ in 0..10 {
        assert_eq!(status("198.51.100.4").await, StatusCode::OK);
    }
    assert_eq!(status("203.0.113.4").await, StatusCode::OK);
    assert_eq!(status("203.0.113.4").await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn shadow_limits_never_deny() {
    let upstream = TestUpstream::ok("ok").await;
    let limits = "[[limits]]\nname = \"trial\"\nkey = [\"ip\"]\nshadow = true\nrates = [{ limit = 2, per = \"1h\" }]\n";
    let gateway = gateway(&upstream, limits, "limits = [\"trial\"]").await;
    for _ in 0..10 {
        let (response, _) = call(&gateway, "/", None).await;
        assert_eq!(response.status(), StatusCode::OK);
        // A shadow limit reports nothing to clients either.
        assert!(response.headers().get("x-ratelimit-limit").is_none());
    }
    assert_eq!(upstream.hits(), 10);
}

#[tokio::test]
async fn delay_holds_requests_until_their_slot_then_rejects_beyond_max_delay() {
    let upstream = TestUpstream::ok("ok").await;
    let limits = r#"
[[limits]]
name = "smooth"
key = ["ip"]
algorithm = "gcra"
rates = [{ limit = 1, per = "1s", burst = 1 }]
action = "delay"
max_delay = "2s"
"#;
    let gateway = gateway(&upstream, limits, "limits = [\"smooth\"]").await;
    let started = Instant::now();
    let calls = (0..8).map(|_| async {
        let (response, _) = call(&gateway, "/", None).await;
        (response.status(), started.elapsed())
    });
    let results = futures_util::future::join_all(calls).await;
    let passed: Vec<Duration> = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::OK)
        .map(|(_, t)| *t)
        .collect();
    let rejected = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    // Slots every second: 0, 1 and 2 s are within max_delay; the rest are rejected (this holds
    // as long as the eight requests arrive within the first second).
    assert_eq!((passed.len(), rejected), (3, 5), "{results:?}");
    let slowest = passed.iter().max().unwrap();
    assert!(
        *slowest >= Duration::from_millis(1950),
        "the last admitted request waited only {slowest:?}"
    );
}

#[tokio::test]
async fn max_in_flight_gives_503_and_recovers_when_requests_finish_or_clients_leave() {
    let release = Arc::new(Notify::new());
    let held = release.clone();
    let upstream = TestUpstream::start(move |request| {
        let release = held.clone();
        async move {
            if request.uri().path() == "/hold" {
                release.notified().await;
            }
            Response::new(full("done"))
        }
    })
    .await;
    let gateway = gateway(&upstream, "", "max_in_flight = 2").await;
    let first = tokio::spawn(get(gateway.url("/hold").leak()));
    let second = tokio::spawn(get(gateway.url("/hold").leak()));
    assert!(eventually(Duration::from_secs(5), || upstream.hits() == 2).await);

    let (busy, body) = call(&gateway, "/quick", None).await;
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&busy, "retry-after"), "1");
    problem(&busy, &body);

    release.notify_waiters();
    assert_eq!(first.await.unwrap().0.status(), StatusCode::OK);
    assert_eq!(second.await.unwrap().0.status(), StatusCode::OK);
    assert_eq!(
        call(&gateway, "/quick", None).await.0.status(),
        StatusCode::OK
    );

    // Clients that give up free their slots too.
    let hits = upstream.hits();
    let leavers: Vec<_> = (0..2)
        .map(|_| tokio::spawn(get(gateway.url("/hold").leak())))
        .collect();
    assert!(eventually(Duration::from_secs(5), || upstream.hits() == hits + 2).await);
    for leaver in leavers {
        leaver.abort();
    }
    let recovered = eventually_async(Duration::from_secs(2), async || {
        call(&gateway, "/quick", None).await.0.status() == StatusCode::OK
    })
    .await;
    assert!(
        recovered,
        "slots of disconnected clients were never released"
    );
    release.notify_waiters();
}

#[tokio::test]
async fn missing_key_parts_fall_back_skip_or_deny() {
    let upstream = TestUpstream::ok("ok").await;
    let limits = r#"
[[limits]]
name = "by-key-or-ip"
key = ["header:x-api-key"]
missing = "ip"
rates = [{ limit = 2, per = "1h" }]
[[limits]]
name = "needs-key"
key = ["header:x-api-key"]
missing = "deny"
rates = [{ limit = 100, per = "1h" }]
[[limits]]
name = "keyed-only"
key = ["header:x-api-key"]
missing = "skip"
rates = [{ limit = 1, per = "1h" }]
"#;
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n[[routes]]\nname = \"strict\"\npath_prefix = \"/strict\"\nupstream = \"api\"\nlimits = [\"needs-key\"]\n[[routes]]\nname = \"default\"\nupstream = \"api\"\nlimits = [\"by-key-or-ip\", \"keyed-only\"]\n{limits}",
        upstream.url()
    );
    let gateway = TestGateway::start(&config).await;
    let (response, body) = call(&gateway, "/strict", None).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().contains_key("www-authenticate"));
    let answer = problem(&response, &body);
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("header x-api-key"),
        "{answer}"
    );
    assert_eq!(
        call(&gateway, "/strict", Some("k")).await.0.status(),
        StatusCode::OK
    );

    // Without a key: counted by IP (2 allowed); keyed-only does not apply.
    assert_eq!(call(&gateway, "/", None).await.0.status(), StatusCode::OK);
    assert_eq!(call(&gateway, "/", None).await.0.status(), StatusCode::OK);
    assert_eq!(
        call(&gateway, "/", None).await.0.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // With a key: keyed-only applies (1 allowed).
    assert_eq!(
        call(&gateway, "/", Some("a")).await.0.status(),
        StatusCode::OK
    );
    assert_eq!(
        call(&gateway, "/", Some("a")).await.0.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}
