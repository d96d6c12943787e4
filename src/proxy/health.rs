//! Active health checks: every `interval`, GET `path` on each server of an upstream; a 2xx
//! within `timeout` passes. Verdicts change only after a streak (see `UpstreamPool::record_check`).

use std::str::FromStr;
use std::sync::Arc;

use http::header::USER_AGENT;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::{BodyExt, Either, Empty};
use tokio::time::{MissedTickBehavior, timeout};
use tokio_util::sync::CancellationToken;

use super::headers::SetFields;
use super::upstream::{UpstreamHead, UpstreamPool};
use crate::config::HealthCheck;
use crate::request_fields::RequestFields;

/// Starts one checker task per upstream that has a `health_check`; they end on `stop`.
pub fn spawn_checkers(pools: &[Arc<UpstreamPool>], stop: &CancellationToken) {
    for pool in pools {
        if let Some(check) = pool.health_check.clone() {
            tokio::spawn(run_checks(pool.clone(), check, stop.clone()));
        }
    }
}

async fn run_checks(pool: Arc<UpstreamPool>, check: HealthCheck, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(check.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let probes = (0..pool.servers.len()).map(|i| probe(&pool, i, &check));
        let results = futures_util::future::join_all(probes).await;
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
            .send(server, request, SetFields::default(), deadline)
            .await
            .ok()?;
        let passed = response.status().is_success();
        // Read the body so the connection can be reused for the next check.
        response.into_body().collect().await.ok()?;
        Some(passed)
    };
    matches!(timeout(check.timeout, exchange).await, Ok(Some(true)))
}
