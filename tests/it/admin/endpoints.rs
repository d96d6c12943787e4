//! The admin listener end to end: health, readiness, metrics that count exactly what was sent,
//! the redacted config, and that none of it is reachable through the proxy listener.

use crate::support;

use http::StatusCode;
use std::time::Duration;
use support::*;

fn config(upstream: &TestUpstream) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"
[edge]
rate = "1000/s"
[store]
hash_secret = "do-not-show-me"
[[limits]]
name = "per-ip"
key = ["ip"]
rates = [{{ limit = 3, per = "1h" }}]
[[upstreams]]
name = "api"
servers = ["{}"]
[[routes]]
name = "default"
path_prefix = "/app"
upstream = "api"
limits = ["per-ip"]
"#,
        upstream.url()
    )
}

/// The value of the metric line that starts with `series` (name and labels), or 0.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .map(|value| value.trim().parse().unwrap())
        })
        .unwrap_or(0.0)
}

/// Names are free text in the config; the exposition must stay parseable whatever they hold.
#[tokio::test]
async fn names_with_quotes_and_backslashes_are_escaped_in_metrics() {
    let upstream = TestUpstream::ok("ok").await;
    let named = config(&upstream)
        .replace(r#"name = "api""#, r#"name = "the \"api\"""#)
        .replace(r#"upstream = "api""#, r#"upstream = "the \"api\"""#)
        .replace(r#"name = "default""#, r#"name = "C:\\default\nroute""#);
    let (gateway, _) = TestGateway::start_in_dir("admin-escaped", &[], &named).await;
    assert_eq!(get(&gateway.url("/app")).await.0.status(), StatusCode::OK);
    let admin = format!("http://{}", gateway.admin_addr.unwrap());
    let (_, body) = get(&format!("{admin}/metrics")).await;
    let text = String::from_utf8(body.to_vec()).unwrap();
    let requests = r#"rlp_requests_total{route="C:\\default\nroute",code="200"}"#;
    assert_eq!(metric(&text, requests), 1.0, "{text}");
    let answered = r#"rlp_upstream_requests_total{upstream="the \"api\"",code="200"}"#;
    assert_eq!(metric(&text, answered), 1.0, "{text}");
    for line in text.lines().filter(|line| line.contains('{')) {
        assert!(line.contains("} "), "a label block left open: {line}");
    }
}

#[tokio::test]
async fn metrics_count_exactly_the_requests_sent_per_decision() {
    let upstream = TestUpstream::ok("ok").await;
    let (gateway, _) = TestGateway::start_in_dir("admin-metrics", &[], &config(&upstream)).await;
    let admin = format!("http://{}", gateway.admin_addr.unwrap());
    let statuses: Vec<StatusCode> = {
        let mut statuses = Vec::new();
        for _ in 0..5 {
            statuses.push(get(&gateway.url("/app")).await.0.status());
        }
        statuses
    };
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 3);
    assert_eq!(
        get(&gateway.url("/elsewhere")).await.0.status(),
        StatusCode::NOT_FOUND
    );

    let (response, body) = get(&format!("{admin}/metrics")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(
        metric(&text, r#"rlp_requests_total{route="default",code="200"}"#),
        3.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"rlp_requests_total{route="default",code="429"}"#),
        2.0
    );
    assert_eq!(
        metric(&text, r#"rlp_requests_total{route="",code="404"}"#),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            r#"rlp_limit_decisions_total{limit="per-ip",decision="allowed"}"#
        ),
        3.0
    );
    assert_eq!(
        metric(
            &text,
            r#"rlp_limit_decisions_total{limit="per-ip",decision="denied"}"#
        ),
        2.0
    );
    assert_eq!(
        metric(&text, r#"rlp_edge_decisions_total{decision="allowed"}"#),
        5.0
    );
    assert_eq!(metric(&text, "rlp_edge_tracked_ips"), 1.0);
    let healthy = format!(
        r#"rlp_upstream_healthy{{upstream="api",server="{}"}}"#,
        upstream.url()
    );
    assert_eq!(metric(&text, &healthy), 1.0);
    assert_eq!(
        metric(
            &text,
            r#"rlp_request_duration_seconds_count{route="default"}"#
        ),
        5.0
    );
    assert_eq!(
        metric(
            &text,
            r#"rlp_upstream_requests_total{upstream="api",code="200"}"#
        ),
        3.0
    );
    assert_eq!(
        metric(
            &text,
            r#"rlp_upstream_duration_seconds_count{upstream="api"}"#
        ),
        3.0
    );
    assert_eq!(
        metric(&text, r#"rlp_in_flight{route="default"}"#),
        0.0,
        "in-flight must return to zero"
    );
    assert!(text.contains(r#"rlp_in_flight{route="default"}"#), "{text}");
    assert_eq!(
        metric(
            &text,
            r#"rlp_store_duration_seconds_count{backend="memory"}"#
        ),
        5.0
    );
    // One series per Redis node; the memory store has none.
    assert!(!text.contains("rlp_store_breaker_open{"), "{text}");
}

#[tokio::test]
async fn a_route_without_limits_adds_no_store_timings() {
    let upstream = TestUpstream::ok("ok").await;
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n{}",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    for _ in 0..3 {
        assert_eq!(get(&gateway.url("/open")).await.0.status(), StatusCode::OK);
    }
    let admin = format!("http://{}", gateway.admin_addr.unwrap());
    let text = String::from_utf8(get(&format!("{admin}/metrics")).await.1.to_vec()).unwrap();
    assert_eq!(
        metric(&text, r#"rlp_requests_total{route="default",code="200"}"#),
        3.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"rlp_store_duration_seconds_count{backend="memory"}"#
        ),
        0.0,
        "{text}"
    );
}

/// The upstream's latency is from sending to its answer, the request's from its arrival, and
/// both see a slow upstream's wait.
#[tokio::test]
async fn durations_cover_the_upstreams_wait() {
    let upstream = TestUpstream::slow(Duration::from_millis(200), "ok").await;
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n{}",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    assert_eq!(get(&gateway.url("/slow")).await.0.status(), StatusCode::OK);
    let admin = format!("http://{}", gateway.admin_addr.unwrap());
    let text = String::from_utf8(get(&format!("{admin}/metrics")).await.1.to_vec()).unwrap();
    let upstream_took = metric(
        &text,
        r#"rlp_upstream_duration_seconds_sum{upstream="api"}"#,
    );
    let request_took = metric(
        &text,
        r#"rlp_request_duration_seconds_sum{route="default"}"#,
    );
    assert!(
        (0.2..5.0).contains(&upstream_took),
        "{upstream_took}\n{text}"
    );
    assert!(
        (upstream_took..5.0).contains(&request_took),
        "{request_took}\n{text}"
    );
}

/// A client that gives up while the upstream is slow was still charged by its limits: what
/// admission saw counts even though the request has no answer to count or log.
#[tokio::test]
async fn a_request_abandoned_before_its_answer_still_counts_its_limit_decision() {
    use tokio::io::AsyncWriteExt;
    let upstream = TestUpstream::slow(Duration::from_secs(30), "ok").await;
    let (gateway, _) = TestGateway::start_in_dir("admin-abandoned", &[], &config(&upstream)).await;
    let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let head = b"GET /app HTTP/1.1\r\nHost: test\r\n\r\n";
    stream.write_all(head).await.unwrap();
    assert!(eventually(Duration::from_secs(5), || upstream.hits() == 1).await);
    drop(stream);
    let admin = format!("http://{}", gateway.admin_addr.unwrap());
    let allowed = r#"rlp_limit_decisions_total{limit="per-ip",decision="allowed"}"#;
    let mut text = String::new();
    eventually_async(Duration::from_secs(5), async || {
        text = String::from_utf8(get(&format!("{admin}/metrics")).await.1.to_vec()).unwrap();
        metric(&text, allowed) == 1.0
    })
    .await;
    assert_eq!(metric(&text, allowed), 1.0, "{text}");
    assert_eq!(
        metric(&text, r#"rlp_edge_decisions_total{decision="allowed"}"#),
        1.0
    );
    assert!(
        !text.contains(r#"rlp_requests_total{route="default""#),
        "{text}"
    );
}

#[tokio::test]
async fn health_readiness_config_and_reload_counts() {
    let upstream = TestUpstream::ok("ok").await;
    let (gateway, path) = TestGateway::start_in_dir("admin-config", &[], &config(&upstream)).await;
    let admin = format!("http://{}", gateway.admin_addr.unwrap());
    for probe in ["/healthz", "/readyz"] {
        let (response, body) = get(&format!("{admin}{probe}")).await;
        assert_answer(&response, &body, StatusCode::OK, "ok\n", "");
    }
    let (response, body) = get(&format!("{admin}/config")).await;
    assert_eq!(response.headers()["content-type"], "application/json");
    let document: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(document["config"]["store"]["hash_secret"], "<redacted>");
    assert!(!String::from_utf8_lossy(&body).contains("do-not-show-me"));
    assert_eq!(document["config"]["limits"][0]["name"], "per-ip");
    assert_eq!(document["version"].as_str().unwrap().len(), 16);
    assert!(document["loaded_at"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(
        get(&format!("{admin}/nope")).await.0.status(),
        StatusCode::NOT_FOUND
    );

    gateway.reloader.reload().unwrap();
    std::fs::write(&path, "not = [valid").unwrap();
    assert!(gateway.reloader.reload().is_err());
    let text = String::from_utf8(get(&format!("{admin}/metrics")).await.1.to_vec()).unwrap();
    assert_eq!(
        metric(&text, r#"rlp_config_reloads_total{result="success"}"#),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"rlp_config_reloads_total{result="failure"}"#),
        1.0
    );
}

#[tokio::test]
async fn admin_paths_are_not_served_on_the_proxy_listener() {
    let upstream = TestUpstream::ok("from upstream").await;
    let text = config(&upstream).replace("path_prefix = \"/app\"", "path_prefix = \"/\"");
    let (gateway, _) = TestGateway::start_in_dir("admin-separate", &[], &text).await;
    for path in ["/metrics", "/healthz", "/config"] {
        let (response, body) = get(&gateway.url(path)).await;
        assert_answer(&response, &body, StatusCode::OK, "from upstream", path);
    }
}

#[tokio::test]
async fn debug_limited_lists_the_abusive_identity_first_hashed() {
    let upstream = TestUpstream::ok("ok").await;
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n[store]\nhash_secret = \"s\"\n[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrates = [{{ limit = 1, per = \"1h\" }}]\n{}",
        one_route_config(&[upstream.url()], "").replace(
            "upstream = \"api\"\n",
            "upstream = \"api\"\nlimits = [\"per-key\"]\n"
        )
    );
    let (gateway, _) = TestGateway::start_in_dir("admin-limited", &[], &text).await;
    let call = |key: &'static str| {
        let request = http::Request::get(gateway.url("/"))
            .header("x-api-key", key)
            .body(empty())
            .unwrap();
        send(request)
    };
    for _ in 0..10 {
        call("abuser-secret-key").await;
    }
    for _ in 0..2 {
        call("meek-key").await;
    }
    let (response, body) = get(&format!(
        "http://{}/debug/limited",
        gateway.admin_addr.unwrap()
    ))
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        !text.contains("abuser-secret-key") && !text.contains("meek-key"),
        "{text}"
    );
    let top: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(top.len(), 2, "{text}");
    assert_eq!(
        (top[0]["limit"].as_str(), top[0]["denied"].as_u64()),
        (Some("per-key"), Some(9))
    );
    assert_eq!(top[1]["denied"], 1);
    let identity = top[0]["identity"].as_str().unwrap();
    assert!(
        identity.len() == 32 && identity.chars().all(|c| c.is_ascii_hexdigit()),
        "{identity}"
    );
}

/// An admin connection that never sends a request is closed at `header_read_timeout`, as a
/// proxy connection is: the admin listener has no slot limit, so none may stay for good.
#[tokio::test]
async fn a_silent_admin_connection_is_closed_at_header_read_timeout() {
    let upstream = TestUpstream::ok("ok").await;
    let text = format!("header_read_timeout = \"500ms\"\n{}", config(&upstream));
    let gateway = TestGateway::start(&text).await;
    let admin = gateway.admin_addr.expect("an admin listener");
    let mut silent = tokio::net::TcpStream::connect(admin).await.unwrap();
    let opened = std::time::Instant::now();
    let (_, closed) = read_until_closed(&mut silent, Duration::from_secs(5)).await;
    assert!(closed, "the silent admin connection stayed open");
    assert!(
        opened.elapsed() >= Duration::from_millis(400),
        "{:?}",
        opened.elapsed()
    );
}
