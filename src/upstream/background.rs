//! The tasks a runtime starts for its pools, until it is replaced or stops: active health
//! checks (every `interval`, GET `path` on each server; a 2xx within `timeout` passes) and the
//! closing of idle connections that outlived `IDLE_TIMEOUT` when no request comes to find them.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::USER_AGENT;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::{BodyExt, Either, Empty};
use tokio::time::{MissedTickBehavior, timeout};
use tokio_util::sync::CancellationToken;

use super::connections::IDLE_TIMEOUT;
use super::exchange::UpstreamHead;
use super::headers::SetFields;
use super::pool::UpstreamPool;
use crate::config::HealthCheck;
use crate::http1::request_fields::RequestFields;

/// Starts one checker task per upstream that has a `health_check`; they end on `stop`.
pub(crate) fn spawn_checkers(pools: &[Arc<UpstreamPool>], stop: &CancellationToken) {
    for pool in pools {
        if let Some(check) = pool.health_check.clone() {
            tokio::spawn(run_checks(pool.clone(), check, stop.clone()));
        }
    }
}

async fn run_checks(pool: Arc<UpstreamPool>, check: HealthCheck, stop: CancellationToken) {
    let first = first_round_at(&pool, check.interval);
    let mut ticks = tokio::time::interval_at(first, check.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let probes = (0..pool.servers.len()).map(|i| probe(&pool, i, &check));
        // A checker stopped by a reload records nothing more: its successor checks the same
        // servers into the same records, and one probe must count once.
        let results = tokio::select! {
            _ = stop.cancelled() => return,
            results = futures_util::future::join_all(probes) => results,
        };
        for (server, passed) in results.into_iter().enumerate() {
            if let Some(up) = pool.record_check(server, passed, &check) {
                let label = &pool.servers[server].label;
                if up {
                    tracing::info!(upstream = %pool.name, server = %label, "server passes health checks again");
                } else {
                    tracing::warn!(upstream = %pool.name, server = %label, "server failed health checks; taken out");
                }
            }
        }
    }
}

/// When a new checker's first round is due: an interval after the last check its servers had
/// (under the runtime before a reload), so reloads neither add rounds nor, coming more often
/// than the interval, starve the checks; at once when a server was never checked.
fn first_round_at(pool: &UpstreamPool, interval: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let checked = pool.servers.iter().map(|s| s.health.checked_at());
    match checked.collect::<Option<Vec<Instant>>>() {
        Some(checked) => {
            let oldest = checked.into_iter().min().unwrap_or_else(Instant::now);
            now + (oldest + interval).saturating_duration_since(Instant::now())
        }
        None => now,
    }
}

async fn probe(pool: &UpstreamPool, server: usize, check: &HealthCheck) -> bool {
    let Ok(target) = PathAndQuery::from_str(&check.path) else {
        return false;
    };
    let mut fields = HeaderMap::new();
    fields.insert(
        USER_AGENT,
        HeaderValue::from_static("ratelimit-proxy-health-check"),
    );
    let head = UpstreamHead {
        method: Method::GET,
        target,
        fields: RequestFields::Map(fields),
    };
    let request = (head, Either::Right(Empty::new()));
    let deadline = tokio::time::Instant::now() + check.timeout;
    let exchange = async {
        let response = pool
            .send(server, request, SetFields::default(), deadline, true)
            .await
            .ok()?;
        let passed = response.status().is_success();
        // Read the body so the connection can be reused for the next check.
        response.into_body().collect().await.ok()?;
        Some(passed)
    };
    matches!(timeout(check.timeout, exchange).await, Ok(Some(true)))
}

/// Closes the expired idle connections of every pool a few times per `IDLE_TIMEOUT`, so
/// connections left from a burst close even when no request comes to find them; until `stop`.
pub(crate) async fn close_expired_until(pools: Vec<Arc<UpstreamPool>>, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(IDLE_TIMEOUT / 4);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        // tokio's clock (the wall clock in service), so a test can move it.
        let now = tokio::time::Instant::now().into_std();
        for pool in &pools {
            pool.connections.close_expired(now);
        }
    }
}
