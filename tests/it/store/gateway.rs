//! The Redis store end to end: real gateways sharing real redis-server processes (each test
//! starts its own on free ports), exactness across instances, the one-call protocol, the key
//! layout, failures (kill, pause) and their fallbacks, a cluster, and the denied-key cache.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use support::redis_server::{RedisCluster, RedisServer};
use support::*;

/// A config with `store`, one upstream, `limits`, and a route per `(path, limit)`.
fn config(upstream: &TestUpstream, store: &str, routes: &[(&str, &str)], limits: &str) -> String {
    let routes: String = routes
        .iter()
        .map(|(path, limit)| {
            format!(
                "[[routes]]\nname = \"r{}\"\npath_prefix = \"{path}\"\nupstream = \"api\"\nlimits = [\"{limit}\"]\n\n",
                path.trim_start_matches('/')
            )
        })
        .collect();
    format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n[store]\n{store}\nhash_secret = \"test-secret\"\n\n[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\n{routes}{limits}",
        upstream.url()
    )
}

/// `[store]` keys for `server`, with `extra` lines (on_error, fallback_instances...).
fn redis_store(server: &RedisServer, prefix: &str, timeout: &str, extra: &str) -> String {
    format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\ntimeout = \"{timeout}\"\n{extra}",
        server.url()
    )
}

async fn call(gateway: &TestGateway, path: &str, api_key: &str) -> (Response<()>, bytes::Bytes) {
    let request = Request::get(gateway.url(path)).header("x-api-key", api_key);
    send(request.body(empty()).unwrap()).await
}

async fn status(gateway: &TestGateway, path: &str, api_key: &str) -> StatusCode {
    call(gateway, path, api_key).await.0.status()
}

/// `n` requests in a row to `/` with one key.
async fn in_a_row(gateway: &TestGateway, n: usize) -> Vec<StatusCode> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        statuses.push(status(gateway, "/", "k").await);
    }
    statuses
}

/// How many of `statuses` are `code`.
fn count(statuses: &[StatusCode], code: StatusCode) -> usize {
    statuses.iter().filter(|s| **s == code).count()
}

fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut server.connection())
        .unwrap()
}

/// Whether `/readyz` answers 200 within 10 s.
async fn ready(gateway: &TestGateway) -> bool {
    let url = format!("http://{}/readyz", gateway.admin_addr.unwrap());
    eventually_async(Duration::from_secs(10), async || {
        get(&url).await.0.status() == StatusCode::OK
    })
    .await
}

async fn metrics(gateway: &TestGateway) -> String {
    let url = format!("http://{}/metrics", gateway.admin_addr.unwrap());
    let (_, body) = get(&url).await;
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_sharing_one_redis_admit_exactly_the_limit_in_total() {
    let server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let limits = "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"token_bucket\"\nrates = [{ limit = 50, per = \"1h\" }]\n\n\
        [[limits]]\nname = \"two-windows\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"token_bucket\"\nrates = [{ limit = 100, per = \"1h\" }, { limit = 5, per = \"1h\" }]\n";
    let text = config(
        &upstream,
        &redis_store(&server, "fleet:", "2s", ""),
        &[("/one", "per-key"), ("/two", "two-windows")],
        limits,
    );
    let gateways = [
        TestGateway::start(&text).await,
        TestGateway::start(&text).await,
        TestGateway::start(&text).await,
    ];
    let gateways = std::sync::Arc::new(gateways);

    for (path, attempts, expected) in [("/one", 8, 50), ("/two", 2, 5)] {
        let clients = (0..30).map(|client| {
            let gateways = gateways.clone();
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for i in 0..attempts {
                    let gateway = &gateways[(client + i) % 3];
                    statuses.push(status(gateway, path, "shared-key").await);
                }
                statuses
            })
        });
        let mut statuses = Vec::new();
        for client in clients {
            statuses.extend(client.await.unwrap());
        }
        assert_eq!(
            count(&statuses, StatusCode::OK),
            expected,
            "{path}: exactly the limit in total across three gateways"
        );
        assert_eq!(
            count(&statuses, StatusCode::TOO_MANY_REQUESTS),
            statuses.len() - expected
        );
    }

    // All-or-nothing: the 55 requests the 5/h window refused took nothing from the 100/h one.
    let stored = keys(&server, "fleet:two-windows:*");
    assert_eq!(stored.len(), 1, "both windows in one key: {stored:?}");
    // Two doubles per window, (expiry, state); a token bucket's state is the time (µs) it is
    // full again. Slot 0 is the 100/h window.
    let value: Vec<u8> = redis::cmd("GET")
        .arg(&stored[0])
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(value.len(), 32, "two windows of two doubles");
    let full_at = f64::from_le_bytes(value[8..16].try_into().unwrap()) as u64;
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.connection()).unwrap();
    let interval_us = 36_000_000;
    let consumed = (full_at - (seconds * 1_000_000 + micros)).div_ceil(interval_us);
    assert_eq!(consumed, 5, "full at {full_at}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_one_evalsha_whatever_its_limits() {
    let server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let limits = "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"gcra\"\nrates = [{ limit = 100, per = \"1m\" }, { limit = 1000, per = \"1h\" }]\n\n\
        [[limits]]\nname = \"per-ip\"\nkey = [\"ip\"]\nalgorithm = \"sliding_window\"\nrates = [{ limit = 1000, per = \"1m\" }]\n";
    let store = redis_store(&server, "one:", "2s", "ready_requires_redis = true");
    let text = config(&upstream, &store, &[], limits)
        + "[[routes]]\nname = \"both\"\nupstream = \"api\"\nlimits = [\"per-key\", \"per-ip\"]\n";
    let gateway = TestGateway::start(&text).await;
    // Every worker has connected and loaded the script: nothing but requests from here on.
    assert!(ready(&gateway).await);
    assert_eq!(status(&gateway, "/", "warm-up").await, StatusCode::OK);

    let before = server.all_calls();
    for i in 0..20 {
        assert_eq!(
            status(&gateway, "/", &format!("key-{i}")).await,
            StatusCode::OK
        );
    }
    let after = server.all_calls();
    let mut difference: HashMap<String, u64> = after
        .iter()
        .map(|(command, calls)| (command.clone(), calls - before.get(command).unwrap_or(&0)))
        .filter(|(command, calls)| *calls > 0 && !command.starts_with("info"))
        .collect();
    // The test's own connections introduce themselves.
    difference.retain(|command, _| !command.starts_with("client") && command != "select");
    // INFO commandstats also counts what runs inside a script: per request one TIME, one MGET
    // of the two limit identities' keys, and a SET (with PX) for each: the two windows of
    // per-key share one. The only command sent is EVALSHA.
    let expected = [("evalsha", 20), ("time", 20), ("mget", 20), ("set", 40)];
    let expected: HashMap<String, u64> =
        expected.iter().map(|(c, n)| (c.to_string(), *n)).collect();
    assert_eq!(difference, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_expires_and_none_holds_an_api_key_in_clear() {
    let server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let algorithms = [
        "token_bucket",
        "gcra",
        "sliding_window",
        "fixed_window",
        "sliding_log",
    ];
    let limits: String = algorithms
        .iter()
        .map(|a| format!("[[limits]]\nname = \"{a}\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"{a}\"\nrates = [{{ limit = 10, per = \"1m\" }}, {{ limit = 100, per = \"1h\" }}]\n\n"))
        .collect();
    let routes: Vec<(String, &str)> = algorithms.iter().map(|a| (format!("/{a}"), *a)).collect();
    let routes: Vec<(&str, &str)> = routes.iter().map(|(p, a)| (p.as_str(), *a)).collect();
    let text = config(
        &upstream,
        &redis_store(&server, "rl:", "2s", ""),
        &routes,
        &limits,
    );
    let gateway = TestGateway::start(&text).await;
    for (path, _) in &routes {
        for _ in 0..3 {
            assert_eq!(
                status(&gateway, path, "clear-api-key-42").await,
                StatusCode::OK
            );
        }
    }
    let all = keys(&server, "*");
    assert_eq!(
        all.len(),
        6,
        "one key for each of four limits' two windows, two for the sliding log's: {all:?}"
    );
    for key in &all {
        assert!(!key.contains("clear-api-key-42"), "{key}");
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query(&mut server.connection())
            .unwrap();
        assert!(ttl > 0, "{key} has no expiry ({ttl})");
        let (limit, rest) = key.strip_prefix("rl:").unwrap().split_once(":{").unwrap();
        assert!(algorithms.contains(&limit), "{key}");
        let (identity, window) = rest.split_once('}').unwrap();
        let base64url = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        assert!(
            identity.len() == 22 && identity.chars().all(base64url),
            "{key}"
        );
        let usage: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query(&mut server.connection())
            .unwrap();
        if limit == "sliding_log" {
            assert!(window == ":0" || window == ":1", "{key}");
        } else {
            assert_eq!(window, "", "{key}");
            assert!(usage < 150, "{key}: {usage} bytes for two windows");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_load_each_limit_follows_its_on_error_and_recovers_without_restart() {
    let mut server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let timeout = Duration::from_millis(400);
    let limits = "[[limits]]\nname = \"open\"\nkey = [\"header:x-api-key\"]\nrates = [{ limit = 100000, per = \"1h\" }]\non_error = \"allow\"\n\n\
        [[limits]]\nname = \"closed\"\nkey = [\"header:x-api-key\"]\nrates = [{ limit = 100000, per = \"1h\" }]\non_error = \"deny\"\n\n\
        [[limits]]\nname = \"local\"\nkey = [\"header:x-api-key\"]\nrates = [{ limit = 10, per = \"1h\" }]\non_error = \"local\"\n";
    let store = redis_store(&server, "kill:", "400ms", "fallback_instances = 2");
    let text = config(
        &upstream,
        &store,
        &[
            ("/open", "open"),
            ("/closed", "closed"),
            ("/local", "local"),
        ],
        limits,
    );
    let gateway = std::sync::Arc::new(TestGateway::start(&text).await);
    assert_eq!(status(&gateway, "/local", "before").await, StatusCode::OK);

    // Load on the open route throughout.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let load = {
        let (gateway, stop, answered) = (gateway.clone(), stop.clone(), answered.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                statuses.push(status(&gateway, "/open", "load").await);
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            statuses
        })
    };
    let answered = || answered.load(std::sync::atomic::Ordering::SeqCst);
    assert!(eventually(Duration::from_secs(10), || answered() >= 10).await);
    server.kill();
    // Until the load's failures have opened the breaker (failures in a row over 100 ms).
    let open = format!(
        "rlp_store_breaker_open{{node=\"127.0.0.1:{}\"}} 1",
        server.port
    );
    let opened = eventually_async(Duration::from_secs(10), async || {
        metrics(&gateway).await.contains(&open)
    })
    .await;
    assert!(opened, "the load's failures opened the breaker");

    let (response, body) = call(&gateway, "/closed", "k").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    assert!(
        problem(&response, &body)["detail"]
            .as_str()
            .unwrap()
            .contains("closed")
    );

    // The local fallback enforces 10 / 2 instances.
    let mut local = Vec::new();
    for _ in 0..8 {
        local.push(status(&gateway, "/local", "fresh-key").await);
    }
    assert_eq!(count(&local, StatusCode::OK), 5, "{local:?}");
    assert_eq!(count(&local, StatusCode::TOO_MANY_REQUESTS), 3);
    // And says so: the local share is the policy the client is told.
    let (response, _) = call(&gateway, "/local", "fresh-key").await;
    assert_eq!(
        response.headers()["ratelimit-policy"],
        "\"local\";q=5;w=3600"
    );

    // The breaker is open by now: no request waits for the store.
    for path in ["/open", "/closed", "/local"] {
        let started = Instant::now();
        status(&gateway, path, "k").await;
        assert!(
            started.elapsed() < timeout,
            "{path} took {:?}",
            started.elapsed()
        );
    }
    let text = metrics(&gateway).await;
    assert!(text.contains(&open), "{text}");
    assert!(text.contains("decision=\"error_allowed\""));
    assert!(text.contains("decision=\"error_denied\""));
    // The local route: one request decided by Redis before the kill, then five allowed by the
    // local fallback during it and one more once the breaker was open.
    assert!(
        text.contains("rlp_limit_decisions_total{limit=\"local\",decision=\"allowed\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("rlp_limit_decisions_total{limit=\"local\",decision=\"fallback\"} 6"),
        "{text}"
    );

    server.restart();
    // The breaker probes within a second; then Redis decides again, exactly (10, not 5).
    let recovered = eventually_async(Duration::from_secs(5), async || {
        status(&gateway, "/closed", "probe").await == StatusCode::OK
    })
    .await;
    assert!(recovered, "the gateway went back to Redis by itself");
    let mut exact = Vec::new();
    for _ in 0..12 {
        exact.push(status(&gateway, "/local", "after-recovery").await);
    }
    assert_eq!(count(&exact, StatusCode::OK), 10, "{exact:?}");
    assert!(!keys(&server, "kill:local:*").is_empty());

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = load.await.unwrap();
    assert!(statuses.len() > 10);
    assert_eq!(
        count(&statuses, StatusCode::OK),
        statuses.len(),
        "allow never fails"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_costs_at_most_the_timeout_and_nothing_hangs() {
    let server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let limits = "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrates = [{ limit = 100, per = \"1m\" }]\n";
    let store = redis_store(&server, "pause:", "250ms", "ready_requires_redis = true");
    let text = config(&upstream, &store, &[("/", "per-key")], limits);
    let gateway = TestGateway::start(&text).await;
    assert!(
        ready(&gateway).await,
        "every worker connected before the pause"
    );
    assert_eq!(status(&gateway, "/", "k").await, StatusCode::OK);

    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5000)
        .arg("ALL")
        .query(&mut server.connection())
        .unwrap();
    let started = Instant::now();
    let mut durations = Vec::new();
    for _ in 0..8 {
        let one = Instant::now();
        assert_eq!(
            status(&gateway, "/", "k").await,
            StatusCode::OK,
            "on_error = allow"
        );
        durations.push(one.elapsed());
    }
    assert!(
        durations[0] >= Duration::from_millis(250),
        "the first call waited for the store: {durations:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "eight requests during a 5 s pause took {:?}: {durations:?}",
        started.elapsed()
    );
    let text = metrics(&gateway).await;
    assert!(
        text.contains("rlp_store_errors_total{backend=\"redis\",kind=\"timeout\"} 5"),
        "five timeouts, then the breaker: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_key_flood_costs_about_one_redis_call_per_retry_period() {
    let server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let limits = "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"gcra\"\nrates = [{ limit = 3, per = \"30s\" }]\n";
    let text = config(
        &upstream,
        &redis_store(&server, "flood:", "2s", ""),
        &[("/", "per-key")],
        limits,
    );
    let gateway = TestGateway::start(&text).await;
    for _ in 0..3 {
        assert_eq!(status(&gateway, "/", "abuser").await, StatusCode::OK);
    }
    let before = server.calls("evalsha");
    for _ in 0..300 {
        let (response, _) = call(&gateway, "/", "abuser").await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=10).contains(&retry), "retry-after {retry}");
    }
    let calls = server.calls("evalsha") - before;
    assert!(calls <= 2, "300 denied requests cost {calls} Redis calls");
    // Another key is unaffected.
    assert_eq!(status(&gateway, "/", "someone-else").await, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_from_a_redis_hash_apply_without_a_reload() {
    let server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let _: () = redis::cmd("HSET")
        .arg("tiers")
        .arg("key-pro")
        .arg("pro")
        .query(&mut server.connection())
        .unwrap();
    let limits = "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrates = [{ limit = 2, per = \"1h\" }]\ntiers = { pro = [{ limit = 5, per = \"1h\" }] }\n\n\
        [plans]\nkey = \"header:x-api-key\"\nredis_hash = \"tiers\"\nredis_ttl = \"200ms\"\n";
    let text = config(
        &upstream,
        &redis_store(&server, "tier:", "2s", ""),
        &[("/", "per-key")],
        limits,
    );
    let gateway = TestGateway::start(&text).await;
    let mut allowed = HashMap::new();
    for key in ["key-pro", "key-free"] {
        for _ in 0..7 {
            if status(&gateway, "/", key).await == StatusCode::OK {
                *allowed.entry(key).or_insert(0) += 1;
            }
        }
    }
    assert_eq!(allowed, HashMap::from([("key-pro", 5), ("key-free", 2)]));

    let _: () = redis::cmd("HSET")
        .arg("tiers")
        .arg("key-free")
        .arg("pro")
        .query(&mut server.connection())
        .unwrap();
    // The cached tier lives 200 ms; a denied request does not count.
    let upgraded = eventually_async(Duration::from_secs(5), async || {
        status(&gateway, "/", "key-free").await == StatusCode::OK
    })
    .await;
    assert!(upgraded, "upgraded without a reload");
    let (response, _) = call(&gateway, "/", "key-free").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-ratelimit-limit"], "5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_three_masters_keeps_limits_exact_for_identities_on_every_master() {
    let cluster = RedisCluster::start();
    let upstream = TestUpstream::ok("ok").await;
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let store = format!(
        "backend = \"redis-cluster\"\nurls = [{}]\nkey_prefix = \"c:\"\ntimeout = \"2s\"",
        urls.join(", ")
    );
    let limits = "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"token_bucket\"\nrates = [{ limit = 5, per = \"1h\" }, { limit = 50, per = \"1d\" }]\n";
    let text = config(&upstream, &store, &[("/", "per-key")], limits);
    let gateways = std::sync::Arc::new([
        TestGateway::start(&text).await,
        TestGateway::start(&text).await,
    ]);
    let tasks = (0..30).map(|k| {
        let gateways = gateways.clone();
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for i in 0..8 {
                statuses.push(status(&gateways[i % 2], "/", &format!("tenant-{k}")).await);
            }
            (k, statuses)
        })
    });
    for task in tasks {
        let (k, statuses) = task.await.unwrap();
        assert_eq!(
            count(&statuses, StatusCode::OK),
            5,
            "tenant-{k}: {statuses:?}"
        );
    }
    for node in &cluster.nodes {
        let size: u64 = redis::cmd("DBSIZE").query(&mut node.connection()).unwrap();
        assert!(size > 0, "identities spread over every master");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_and_password_in_the_url_work_and_stay_secret() {
    let server = RedisServer::start_with_user("gateway", "s3cret-pw");
    let upstream = TestUpstream::ok("ok").await;
    let store = format!(
        "backend = \"redis\"\nurl = \"redis://gateway:s3cret-pw@127.0.0.1:{}/0\"\nkey_prefix = \"acl:\"\ntimeout = \"2s\"\non_error = \"deny\"",
        server.port
    );
    let limits = "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrates = [{ limit = 2, per = \"1h\" }]\n";
    let text = config(&upstream, &store, &[("/", "per-key")], limits);
    let gateway = TestGateway::start(&text).await;
    assert_eq!(
        in_a_row(&gateway, 3).await,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ],
        "authenticated, and Redis decides (on_error = deny would answer 503)"
    );
    let url = format!("http://{}/config", gateway.admin_addr.unwrap());
    let (_, body) = get(&url).await;
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(!text.contains("s3cret-pw"), "{text}");
    assert!(text.contains("127.0.0.1"), "{text}");
}

/// `rediss://` is verified against `ca_file` (or the system roots, which do not know this
/// server's CA: Redis is unreachable and `on_error = "deny"` answers 503), unless the URL says
/// `#insecure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_is_verified_against_the_ca_file_or_skipped_only_when_the_url_says_insecure() {
    let (server, ca_pem) = RedisServer::start_tls_with_private_ca();
    let upstream = TestUpstream::ok("ok").await;
    let limits = "[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrates = [{ limit = 2, per = \"1h\" }]\n";
    let decided = [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
    ];
    for (case, (fragment, ca_file, expected)) in [
        ("", "ca_file = \"ca.pem\"\n", decided),
        ("#insecure", "", decided),
        ("", "", [StatusCode::SERVICE_UNAVAILABLE; 3]),
    ]
    .into_iter()
    .enumerate()
    {
        let store = format!(
            "backend = \"redis\"\nurl = \"rediss://127.0.0.1:{}/0{fragment}\"\n{ca_file}key_prefix = \"tls{case}:\"\ntimeout = \"2s\"\non_error = \"deny\"",
            server.port
        );
        let text = config(&upstream, &store, &[("/", "per-key")], limits);
        let (gateway, _dir) =
            TestGateway::start_in_dir("rediss", &[("ca.pem", &ca_pem)], &text).await;
        assert_eq!(in_a_row(&gateway, 3).await, expected, "case {case}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_a_foreign_type_are_replaced_not_fatal() {
    let server = RedisServer::start();
    let upstream = TestUpstream::ok("ok").await;
    let limits = "[[limits]]\nname = \"log\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"sliding_log\"\nrates = [{ limit = 3, per = \"1h\" }]\n\n\
        [[limits]]\nname = \"cell\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"gcra\"\nrates = [{ limit = 3, per = \"1h\" }]\n";
    let store = redis_store(&server, "odd:", "2s", "on_error = \"deny\"");
    let text = config(&upstream, &store, &[], limits)
        + "[[routes]]\nname = \"both\"\nupstream = \"api\"\nlimits = [\"log\", \"cell\"]\n";
    let gateway = TestGateway::start(&text).await;
    assert_eq!(status(&gateway, "/", "k").await, StatusCode::OK);
    let log_key = keys(&server, "odd:log:*").pop().unwrap();
    let cell_key = keys(&server, "odd:cell:*").pop().unwrap();
    let mut connection = server.connection();
    let _: () = redis::cmd("SET")
        .arg(&log_key)
        .arg("garbage")
        .query(&mut connection)
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&cell_key)
        .query(&mut connection)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(&cell_key)
        .arg(1)
        .arg("x")
        .query(&mut connection)
        .unwrap();

    // Both read as fresh and are replaced: three more pass (on_error = deny would answer 503).
    assert_eq!(
        in_a_row(&gateway, 4).await,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let kind: String = redis::cmd("TYPE")
        .arg(&log_key)
        .query(&mut connection)
        .unwrap();
    assert_eq!(kind, "zset");

    // A cell key's string that is too short, or whose expiry or state is not a number, reads
    // as no state too (a NaN read as a state would make the answer NaN: a 503 here). An API
    // key for each, the first being denied in the gateway until its retry time.
    let far_future = 1e300f64.to_le_bytes();
    let not_a_number = f64::NAN.to_le_bytes();
    for (i, value) in [
        b"garbage".to_vec(),
        [not_a_number, not_a_number].concat(),
        [far_future, not_a_number].concat(),
    ]
    .into_iter()
    .enumerate()
    {
        let api_key = format!("key-{i}");
        let before = keys(&server, "odd:cell:*");
        assert_eq!(status(&gateway, "/", &api_key).await, StatusCode::OK);
        let new_cell = keys(&server, "odd:cell:*")
            .into_iter()
            .find(|key| !before.contains(key))
            .expect("the API key's cell key");
        let _: () = redis::cmd("SET")
            .arg(&new_cell)
            .arg(&value)
            .query(&mut connection)
            .unwrap();
        assert_eq!(
            status(&gateway, "/", &api_key).await,
            StatusCode::OK,
            "{value:?}"
        );
    }
}
