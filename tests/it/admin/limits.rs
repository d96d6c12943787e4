//! `/limits/<name>/state` and `/limits/<name>/reset` on the admin listener, end to end: a key
//! driven to its limit reads remaining 0 with a reset to come, a reset lets its next request
//! through, with the memory store and with a real redis-server (whose state is read without
//! being written); and the 400, 404 and 405 answers.

use crate::support;

use http::{Method, Request, StatusCode};
use serde_json::Value;
use support::redis_server::RedisServer;
use support::*;

const LIMIT: u64 = 3;

fn config(upstream: &TestUpstream, store: &str) -> String {
    format!(
        r#"[admin]
listen = "127.0.0.1:0"
[store]
{store}
hash_secret = "test-secret"
[[upstreams]]
name = "api"
servers = ["{}"]
[[routes]]
name = "default"
upstream = "api"
limits = ["per-key", "per-key-route"]
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
missing = "ip"
rates = [{{ limit = {LIMIT}, per = "1h" }}, {{ limit = 100, per = "1d" }}]
[[limits]]
name = "per-key-route"
key = ["header:x-api-key", "route"]
missing = "skip"
rates = [{{ limit = 1000, per = "1h" }}]
"#,
        upstream.url()
    )
}

async fn proxied(gateway: &TestGateway, api_key: Option<&str>) -> StatusCode {
    let mut request = Request::get(gateway.url("/"));
    if let Some(key) = api_key {
        request = request.header("x-api-key", key);
    }
    send(request.body(empty()).unwrap()).await.0.status()
}

/// An admin call: its status, content type and body as JSON (Null when empty).
async fn admin(
    gateway: &TestGateway,
    method: Method,
    path_and_query: &str,
) -> (StatusCode, String, Value) {
    let url = format!("http://{}{path_and_query}", gateway.admin_addr.unwrap());
    let request = Request::builder()
        .method(method)
        .uri(url)
        .body(empty())
        .unwrap();
    let (response, body) = send(request).await;
    let content_type = (response.headers().get("content-type"))
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let json = match body.is_empty() {
        true => Value::Null,
        false => serde_json::from_slice(&body).unwrap(),
    };
    (response.status(), content_type, json)
}

async fn state(gateway: &TestGateway, query: &str) -> Value {
    let (status, _, body) = admin(
        gateway,
        Method::GET,
        &format!("/limits/per-key/state?{query}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The first window's remaining and reset (seconds), and the second's remaining.
fn first_window(state: &Value) -> (u64, u64, u64) {
    let windows = state["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 2, "{state}");
    assert_eq!(windows[0]["limit"], LIMIT, "{state}");
    assert_eq!(windows[0]["window"], 3600, "{state}");
    let number = |v: &Value| v.as_u64().unwrap();
    (
        number(&windows[0]["remaining"]),
        number(&windows[0]["reset"]),
        number(&windows[1]["remaining"]),
    )
}

async fn hit_the_limit_read_it_and_reset_it(gateway: &TestGateway) {
    let fresh = state(gateway, "header:x-api-key=k1").await;
    assert_eq!(first_window(&fresh), (LIMIT, 0, 100), "{fresh}");
    assert_eq!(fresh["limited"], true);
    assert_eq!(fresh["tier"], Value::Null);
    for _ in 0..LIMIT {
        assert_eq!(proxied(gateway, Some("k1")).await, StatusCode::OK);
    }
    assert_eq!(
        proxied(gateway, Some("k1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let limited = state(gateway, "header:x-api-key=k1").await;
    let (remaining, reset, daily) = first_window(&limited);
    assert_eq!((remaining, daily), (0, 100 - LIMIT), "{limited}");
    assert!(reset > 0 && reset <= 3600, "{limited}");
    // `key=` names the only part; reading twice consumes nothing.
    assert_eq!(state(gateway, "key=k1").await, limited);
    assert_eq!(first_window(&state(gateway, "key=k2").await).0, LIMIT);

    let (status, _, body) = admin(gateway, Method::POST, "/limits/per-key/reset?key=k1").await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    assert_eq!(
        first_window(&state(gateway, "key=k1").await),
        (LIMIT, 0, 100)
    );
    assert_eq!(proxied(gateway, Some("k1")).await, StatusCode::OK);
    assert_eq!(first_window(&state(gateway, "key=k1").await).0, LIMIT - 1);

    // A keyless client is counted by its address, and named so.
    for _ in 0..LIMIT {
        assert_eq!(proxied(gateway, None).await, StatusCode::OK);
    }
    assert_eq!(first_window(&state(gateway, "ip=127.0.0.1").await).0, 0);
    assert_eq!(proxied(gateway, None).await, StatusCode::TOO_MANY_REQUESTS);
    let (status, ..) = admin(
        gateway,
        Method::DELETE,
        "/limits/per-key/reset?ip=127.0.0.1",
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(proxied(gateway, None).await, StatusCode::OK);
}

#[tokio::test]
async fn state_and_reset_with_the_memory_store() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = TestGateway::start(&config(&upstream, "backend = \"memory\"")).await;
    hit_the_limit_read_it_and_reset_it(&gateway).await;
    gateway.stop().await.unwrap().unwrap();
}

#[tokio::test]
async fn state_and_reset_with_the_redis_store() {
    let server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"admin-limits:\"",
        server.url()
    );
    let gateway = TestGateway::start(&config(&upstream, &store)).await;
    let keys = |pattern: &str| -> Vec<String> {
        redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut server.connection())
            .unwrap()
    };
    state(&gateway, "key=never-seen").await;
    assert!(
        keys("admin-limits:*").is_empty(),
        "reading wrote: {:?}",
        keys("*")
    );
    hit_the_limit_read_it_and_reset_it(&gateway).await;
    gateway.stop().await.unwrap().unwrap();
}

#[tokio::test]
async fn unknown_limits_and_wrong_parameters_are_refused() {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = TestGateway::start(&config(&upstream, "backend = \"memory\"")).await;
    for (method, path, status, detail) in [
        (
            Method::GET,
            "/limits/nope/state?key=k",
            StatusCode::NOT_FOUND,
            "no limit named \"nope\"",
        ),
        (
            Method::POST,
            "/limits/nope/reset?key=k",
            StatusCode::NOT_FOUND,
            "no limit named",
        ),
        (
            Method::GET,
            "/limits/per-key/state?header:x-other=1",
            StatusCode::BAD_REQUEST,
            "unexpected parameter \"header:x-other\"",
        ),
        (
            Method::GET,
            "/limits/per-key/state?key=a&header:x-api-key=b",
            StatusCode::BAD_REQUEST,
            "given twice",
        ),
        (
            Method::GET,
            "/limits/per-key/state?ip=not-an-ip",
            StatusCode::BAD_REQUEST,
            "expected an IPv4 or IPv6",
        ),
        (
            Method::GET,
            "/limits/per-key/state",
            StatusCode::BAD_REQUEST,
            "no value for header x-api-key",
        ),
        (
            Method::POST,
            "/limits/per-key-route/reset?header:x-api-key=k",
            StatusCode::BAD_REQUEST,
            "no value for route",
        ),
        (
            Method::GET,
            "/limits/per-key-route/state?key=k",
            StatusCode::BAD_REQUEST,
            "has 2 parts",
        ),
        (
            Method::POST,
            "/limits/per-key/state?key=k",
            StatusCode::METHOD_NOT_ALLOWED,
            "use GET, HEAD",
        ),
    ] {
        let (got, content_type, body) = admin(&gateway, method, path).await;
        assert_eq!(got, status, "{path}: {body}");
        assert_eq!(content_type, "application/problem+json", "{path}");
        assert_eq!(body["status"], status.as_u16(), "{path}");
        let told = body["detail"].as_str().unwrap();
        assert!(told.contains(detail), "{path}: {told}");
    }
    // Both parts named: an answer, with the route's window.
    let (status, _, body) = admin(
        &gateway,
        Method::GET,
        "/limits/per-key-route/state?header:x-api-key=k&route=default",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["windows"][0]["remaining"], 1000);
    gateway.stop().await.unwrap().unwrap();
}

#[tokio::test]
async fn debug_limited_lists_the_addresses_the_edge_denied() {
    let upstream = TestUpstream::ok("ok").await;
    let text = format!(
        "[edge]\nrate = \"2/h\"\n{}",
        config(&upstream, "backend = \"memory\"")
    );
    let gateway = TestGateway::start(&text).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(proxied(&gateway, Some("k")).await);
    }
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 2);
    let (status, _, top) = admin(&gateway, Method::GET, "/debug/limited").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        top,
        serde_json::json!([{ "edge": true, "ip": "127.0.0.1", "denied": 3 }])
    );
    gateway.stop().await.unwrap().unwrap();
}
