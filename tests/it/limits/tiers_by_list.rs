//! `[plans] lists`: a client's tier chosen by the `[ip_lists]` list its address is in, end to
//! end, with the memory store and with a real redis-server: the office behind a NAT gets five
//! times the exact per-IP limit, everyone else the limit.

use crate::support;

use http::{Request, StatusCode};
use support::redis_server::RedisServer;
use support::*;

const LIMIT: usize = 3;

/// A keyless client is counted by its address (`missing = "ip"`); the office's addresses are
/// on tier "nat". The test's own address (127.0.0.1) is a trusted proxy, so each request's
/// `X-Forwarded-For` says who the client is.
fn config(upstream: &TestUpstream, store: &str) -> String {
    format!(
        r#"[client_ip]
trusted_proxies = ["127.0.0.1"]
[ip_lists]
office_nat = ["203.0.113.0/24"]
partners = ["198.51.100.0/24"]
[store]
{store}
hash_secret = "test-secret"
[[upstreams]]
name = "api"
servers = ["{}"]
[[routes]]
name = "default"
upstream = "api"
limits = ["per-key"]
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
missing = "ip"
rates = [{{ limit = {LIMIT}, per = "1h" }}]
tiers = {{ nat = [{{ limit = {}, per = "1h" }}], partner = "unlimited" }}
[plans]
key = "header:x-api-key"
lists = [{{ list = "office_nat", tier = "nat" }}, {{ list = "partners", tier = "partner" }}]
"#,
        upstream.url(),
        5 * LIMIT
    )
}

/// How many of `tries` requests from `client` pass; every one after the first refusal must be
/// refused too (429).
async fn allowed_before_429(gateway: &TestGateway, client: &str, tries: usize) -> usize {
    let mut statuses = Vec::new();
    for _ in 0..tries {
        let request = Request::get(gateway.url("/"))
            .header("x-forwarded-for", client)
            .body(empty())
            .unwrap();
        statuses.push(send(request).await.0.status());
    }
    let allowed = statuses
        .iter()
        .take_while(|s| **s == StatusCode::OK)
        .count();
    assert!(
        statuses[allowed..]
            .iter()
            .all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
        "{client}: {statuses:?}"
    );
    allowed
}

async fn office_gets_five_times_the_limit(store: &str) {
    let upstream = TestUpstream::ok("ok").await;
    let gateway = TestGateway::start(&config(&upstream, store)).await;
    let tries = 5 * LIMIT + 2;
    assert_eq!(
        allowed_before_429(&gateway, "203.0.113.7", tries).await,
        5 * LIMIT
    );
    // Another office address is another identity, on the same tier.
    assert_eq!(
        allowed_before_429(&gateway, "203.0.113.8", tries).await,
        5 * LIMIT
    );
    assert_eq!(
        allowed_before_429(&gateway, "192.0.2.10", tries).await,
        LIMIT
    );
    assert_eq!(
        allowed_before_429(&gateway, "198.51.100.4", tries).await,
        tries,
        "the partners' tier is unlimited"
    );
    gateway.stop().await.unwrap().unwrap();
}

#[tokio::test]
async fn a_nat_list_gives_its_tier_with_the_memory_store() {
    office_gets_five_times_the_limit("backend = \"memory\"").await;
}

#[tokio::test]
async fn a_nat_list_gives_its_tier_with_the_redis_store() {
    let server = RedisServer::start();
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"tiers-by-list:\"",
        server.url()
    );
    office_gets_five_times_the_limit(&store).await;
}

#[tokio::test]
async fn a_named_identity_keeps_its_tier_wherever_it_comes_from() {
    let upstream = TestUpstream::ok("ok").await;
    let text = config(&upstream, "backend = \"memory\"")
        .replace("lists = [", "file = \"plans.toml\"\nlists = [")
        .replace(
            "partner = \"unlimited\"",
            "partner = \"unlimited\", solo = [{ limit = 1, per = \"1h\" }]",
        );
    let (gateway, _) = TestGateway::start_in_dir(
        "tiers-by-list",
        &[("plans.toml", "\"k1\" = \"solo\"\n")],
        &text,
    )
    .await;
    let statuses = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let request = Request::get(gateway.url("/"))
                .header("x-forwarded-for", "203.0.113.7")
                .header("x-api-key", "k1")
                .body(empty())
                .unwrap();
            statuses.push(send(request).await.0.status());
        }
        statuses
    };
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ],
        "the plans file names k1's tier, which wins over the office list's"
    );
    gateway.stop().await.unwrap().unwrap();
}
