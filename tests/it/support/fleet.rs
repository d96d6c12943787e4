//! Gateways in front of a real Redis or Redis Cluster, as the Redis tests configure them: the
//! config text, requests with an API key, readiness, and metrics summed over a fleet.

use std::time::Duration;

use http::{Request, Response, StatusCode};

use super::{TestGateway, TestUpstream, empty, get, send};

/// A config with an admin listener, `store`, one upstream, `limits`, and a route per
/// `(path, limit)`.
pub fn config(
    upstream: &TestUpstream,
    store: &str,
    routes: &[(&str, &str)],
    limits: &str,
) -> String {
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

/// `[store]` keys of a cluster on `urls`, with `extra` lines.
pub fn cluster_store(urls: &[String], prefix: &str, extra: &str) -> String {
    let urls: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    format!(
        "backend = \"redis-cluster\"\nurls = [{}]\nkey_prefix = \"{prefix}\"\n{extra}",
        urls.join(", ")
    )
}

/// A limit `name` keyed by `x-api-key`.
pub fn limit(name: &str, algorithm: &str, rates: &str, extra: &str) -> String {
    format!(
        "[[limits]]\nname = \"{name}\"\nkey = [\"header:x-api-key\"]\nalgorithm = \"{algorithm}\"\nrates = {rates}\n{extra}\n"
    )
}

pub async fn call(
    gateway: &TestGateway,
    path: &str,
    api_key: &str,
) -> (Response<()>, bytes::Bytes) {
    let request = Request::get(gateway.url(path)).header("x-api-key", api_key);
    send(request.body(empty()).unwrap()).await
}

pub async fn status(gateway: &TestGateway, path: &str, api_key: &str) -> StatusCode {
    call(gateway, path, api_key).await.0.status()
}

/// Whether `/readyz` answers 200 within `within`.
pub async fn ready_within(gateway: &TestGateway, within: Duration) -> bool {
    let url = format!("http://{}/readyz", gateway.admin_addr.unwrap());
    super::eventually_async(within, async || {
        get(&url).await.0.status() == StatusCode::OK
    })
    .await
}

pub async fn metrics(gateway: &TestGateway) -> String {
    let url = format!("http://{}/metrics", gateway.admin_addr.unwrap());
    let (_, body) = get(&url).await;
    String::from_utf8(body.to_vec()).unwrap()
}

/// The sum over `gateways` of every sample whose series starts with `series` (name and
/// labels, e.g. `rlp_store_errors_total{` for all of them).
pub async fn metric_sum(gateways: &[TestGateway], series: &str) -> u64 {
    let mut sum = 0;
    for gateway in gateways {
        let text = metrics(gateway).await;
        sum += text
            .lines()
            .filter(|line| line.starts_with(series))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
    }
    sum
}

/// Over `gateways`: the limit decisions the store did not make (`error_allowed`,
/// `error_denied`, `fallback`), and the store errors.
pub async fn fallbacks_and_errors(gateways: &[TestGateway]) -> (u64, u64) {
    let (mut fallbacks, mut errors) = (0, 0);
    let value = |line: &str| line.rsplit(' ').next()?.parse::<u64>().ok();
    for gateway in gateways {
        let text = metrics(gateway).await;
        for line in text.lines() {
            let not_decided = ["error_allowed", "error_denied", "fallback"]
                .iter()
                .any(|d| line.contains(&format!("decision=\"{d}\"")));
            if line.starts_with("rlp_limit_decisions_total{") && not_decided {
                fallbacks += value(line).unwrap_or(0);
            }
            if line.starts_with("rlp_store_errors_total{") {
                errors += value(line).unwrap_or(0);
            }
        }
    }
    (fallbacks, errors)
}

/// `n` requests to `path`, `in_flight` at a time, spread over `gateways` and `keys` in turn,
/// each in-flight lane on keep-alive connections of its own; each request's key (its index
/// in `keys`) and status.
pub async fn burst(
    gateways: &std::sync::Arc<Vec<TestGateway>>,
    path: &str,
    keys: std::sync::Arc<Vec<String>>,
    n: usize,
    in_flight: usize,
) -> Vec<(usize, StatusCode)> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let lanes = (0..in_flight).map(|_| {
        let (gateways, keys, next) = (gateways.clone(), keys.clone(), next.clone());
        let path = path.to_string();
        tokio::spawn(async move {
            let client = super::client();
            let mut statuses = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return statuses;
                }
                let gateway = &gateways[i % gateways.len()];
                let key = &keys[i % keys.len()];
                let request = Request::get(gateway.url(&path))
                    .header("x-api-key", key.as_str())
                    .body(empty())
                    .unwrap();
                let answer = tokio::time::timeout(Duration::from_secs(20), client.request(request))
                    .await
                    .expect("answered in time")
                    .expect("request failed");
                statuses.push((i % keys.len(), answer.status()));
            }
        })
    });
    let mut statuses = Vec::new();
    for lane in lanes {
        statuses.extend(lane.await.unwrap());
    }
    statuses
}

/// A window length (`"1h"`, `"2h"`, …) whose current calendar window (epoch-aligned, as
/// `fixed_window` and `sliding_window` count, on Redis's clock: this machine's) has at least
/// `at_least` left, so that a run of that long stays in one window without waiting for the
/// next. Hours of co-prime lengths end together only once in years.
pub fn window_clear_of_its_end(at_least: std::time::Duration) -> &'static str {
    const HOURS: [(u64, &str); 7] = [
        (1, "1h"),
        (2, "2h"),
        (3, "3h"),
        (5, "5h"),
        (7, "7h"),
        (11, "11h"),
        (13, "13h"),
    ];
    let now = (std::time::SystemTime::now())
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let clear = |&&(hours, _): &&(u64, &str)| {
        let per = hours * 3600;
        per - now % per >= at_least.as_secs()
    };
    HOURS.iter().find(clear).map_or("13h", |(_, per)| per)
}
