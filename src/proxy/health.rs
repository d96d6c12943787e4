//! What is known of each server's health, and the active checks that learn it: every
//! `interval`, GET `path` on each server of an upstream; a 2xx within `timeout` passes.
//! Verdicts change only after a streak (see `ServerHealth::record_check`). A server's record
//! outlives the runtime that made it: reloads hand it on while the server's definition holds.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::header::USER_AGENT;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::{BodyExt, Either, Empty};
use tokio::time::{MissedTickBehavior, timeout};
use tokio_util::sync::CancellationToken;

use super::headers::SetFields;
use super::upstream::{UpstreamHead, UpstreamPool};
use crate::config::HealthCheck;
use crate::http1::request_fields::RequestFields;

/// One server's health: the verdict of its active checks with the streak towards changing it,
/// and its ejection after a refused connection. Shared by the pools of successive runtimes
/// while the server's definition is unchanged (see `UpstreamPool::succeeding`), so a reload
/// neither puts a down server back in rotation nor restarts its streak. Its times count from
/// its own epoch, which stays with it from runtime to runtime.
#[derive(Debug)]
pub struct ServerHealth {
    passes_checks: AtomicBool,
    check_streak: AtomicU32,
    /// Milliseconds since `epoch` until which the server is left out; 0: it is not.
    ejected_until_ms: AtomicU64,
    /// When a check of it was last recorded, in milliseconds since `epoch` plus one; 0: never.
    checked_at_ms: AtomicU64,
    epoch: Instant,
}

impl Default for ServerHealth {
    /// A server nothing is known of yet: trusted until checks or a refusal say otherwise.
    fn default() -> ServerHealth {
        ServerHealth {
            passes_checks: AtomicBool::new(true),
            check_streak: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
            checked_at_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl ServerHealth {
    /// Leaves the server out for `time` from now.
    pub fn eject(&self, time: Duration) {
        let until = self.now_ms() + time.as_millis() as u64;
        self.ejected_until_ms.store(until, Ordering::Relaxed);
    }

    /// Feeds one active check result; returns the new verdict when it changed.
    pub fn record_check(&self, passed: bool, check: &HealthCheck) -> Option<bool> {
        self.checked_at_ms
            .store(self.now_ms() + 1, Ordering::Relaxed);
        let currently_up = self.passes_checks.load(Ordering::Relaxed);
        if passed == currently_up {
            self.check_streak.store(0, Ordering::Relaxed);
            return None;
        }
        let streak = self.check_streak.fetch_add(1, Ordering::Relaxed) + 1;
        let needed = if passed {
            check.healthy_threshold
        } else {
            check.unhealthy_threshold
        };
        if streak < needed {
            return None;
        }
        self.check_streak.store(0, Ordering::Relaxed);
        self.passes_checks.store(passed, Ordering::Relaxed);
        if passed {
            // A server that passes checks again is trusted again at once.
            self.ejected_until_ms.store(0, Ordering::Relaxed);
        }
        Some(passed)
    }

    /// True when the server may take traffic now (passes checks, not ejected). The clock is
    /// read only for a server that was ejected (0: never, or trusted again): a clock read on
    /// every pick would be one more on every proxied request.
    pub fn is_available_now(&self) -> bool {
        let ejected_until_ms = self.ejected_until_ms.load(Ordering::Relaxed);
        self.passes_checks.load(Ordering::Relaxed)
            && (ejected_until_ms == 0 || ejected_until_ms <= self.now_ms())
    }

    /// When a check of the server was last recorded, if ever.
    fn checked_at(&self) -> Option<Instant> {
        let stamp = self.checked_at_ms.load(Ordering::Relaxed);
        let since_epoch = Duration::from_millis(stamp.checked_sub(1)?);
        Some(self.epoch + since_epoch)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// Starts one checker task per upstream that has a `health_check`; they end on `stop`.
pub fn spawn_checkers(pools: &[Arc<UpstreamPool>], stop: &CancellationToken) {
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
