//! A request's outcome, recorded once when it is answered: the access log line, the request's
//! metrics, and what admission saw. Admission decides and fills an `AdmissionRecord` (the edge
//! verdict, what the limits decided, the store call) rather than counting as it goes;
//! `admission` counts it here, next to the access line.

mod denied;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::Method;

use super::ClientConnection;
use crate::admission::seen::{AdmissionRecord, LimitsSeen, StoreCall};
use crate::limit::rules::OnError;
use crate::metrics::{BackendKind, EdgeDecision, RouteMetrics, UpstreamMetrics};
use crate::request::id::RequestId;
use crate::runtime::Runtime;
use crate::settle::SettledAtHead;

/// What the access log and the metrics learn about a request along the pipeline.
pub(super) struct RequestLog<'r> {
    runtime: &'r Runtime,
    pub(super) route: Option<&'r str>,
    pub(super) route_metrics: Option<&'r RouteMetrics>,
    /// Method and path for the access log: the canonical path once there is one (never the
    /// query string: it may carry API keys).
    pub(super) line: Option<(Method, String)>,
    pub(super) client_ip: Option<IpAddr>,
    pub(super) upstream: Option<&'r str>,
    /// The upstream's metrics and when it was asked, once it answered.
    pub(super) upstream_call: Option<(&'r UpstreamMetrics, Instant)>,
    /// `edge` or the limit that refused the request.
    pub(super) refused_by: Option<Arc<str>>,
    /// What is left of the most restrictive window after an admitted request.
    pub(super) remaining: Option<u64>,
    /// What the limits with a charge reserved, and what the answer's head settled.
    pub(super) settled: Option<SettledAtHead>,
    /// When the upstream's answer came: the request's end too (a clock reading apiece has a
    /// cost of its own, docs/PERFORMANCE.md, "Measured behind the code").
    pub(super) answered: Option<Instant>,
    pub(super) admission: AdmissionRecord,
    /// Whether `record` ran; if not, dropping the log counts what admission saw.
    recorded: bool,
}

impl<'r> RequestLog<'r> {
    pub(super) fn new(runtime: &'r Runtime) -> RequestLog<'r> {
        RequestLog {
            runtime,
            route: None,
            route_metrics: None,
            line: None,
            client_ip: None,
            upstream: None,
            upstream_call: None,
            refused_by: None,
            remaining: None,
            settled: None,
            answered: None,
            admission: AdmissionRecord::default(),
            recorded: false,
        }
    }

    /// Records the answered request, once: its metrics and the upstream's, what admission
    /// saw, and its access log line.
    pub(super) fn record(
        &mut self,
        client: &ClientConnection,
        request_id: &RequestId,
        status: u16,
        started: Instant,
    ) {
        let runtime = self.runtime;
        let took = self.answered.unwrap_or_else(Instant::now) - started;
        let metrics = &runtime.metrics;
        metrics.observe_request(self.route_metrics, status, took);
        // The upstream's answer is the request's: nothing after it changes the status.
        if let (Some((upstream, asked)), Some(answered)) = (self.upstream_call, self.answered) {
            metrics.observe_upstream(upstream, status, answered - asked);
        }
        self.record_admission();
        self.recorded = true;
        let refused = self.refused_by.is_some();
        if let Some((method, path)) = self.line.take()
            && (!refused || denied::write_line(runtime.denied_lines))
        {
            tracing::info!(
                target: "access",
                request_id = request_id.as_str(),
                client_ip = %self.client_ip.unwrap_or(client.peer_ip()),
                %method,
                path,
                route = self.route.unwrap_or(""),
                status,
                upstream = self.upstream.unwrap_or(""),
                duration_ms = took.as_secs_f64() * 1000.0,
                refused_by = self.refused_by.as_deref().unwrap_or(""),
                remaining = self.remaining,
                reserved = self.settled.map(|s| s.reserved),
                settled = self.settled.and_then(|s| s.settled),
                "access"
            );
        }
    }

    fn record_admission(&self) {
        // Admission runs only for a request with a route, after its client address is known.
        if let (Some(route), Some(client_ip)) = (self.route, self.client_ip) {
            let refused_by = self.refused_by.as_ref();
            admission(self.runtime, &self.admission, refused_by, route, client_ip);
        }
    }
}

impl Drop for RequestLog<'_> {
    /// A request dropped before its answer (its client went away) has no status and no access
    /// line, but what admission saw still counts: its limits were charged all the same.
    fn drop(&mut self) {
        if !self.recorded {
            self.record_admission();
        }
    }
}

/// The name the edge layer's denials are recorded under in the most-denied list.
static EDGE: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from("edge"));

/// Counts what admission saw: `rlp_edge_decisions_total`, `rlp_limit_decisions_total`, the
/// most-denied list, `rlp_store_duration_seconds` and `rlp_store_errors_total`
/// (`rlp_store_breaker_open` is read when scraped); logs the edge's deny-list refusals and
/// what shadow limits would have denied.
fn admission(
    runtime: &Runtime,
    seen: &AdmissionRecord,
    refused_by: Option<&Arc<str>>,
    route: &str,
    client_ip: IpAddr,
) {
    let metrics = &runtime.metrics;
    if let Some(decision) = seen.edge {
        metrics.count_edge(decision);
        if matches!(decision, EdgeDecision::Denied) {
            let bucket = match runtime.client_ip.group(client_ip) {
                IpAddr::V4(ip) => ip.to_ipv6_mapped(),
                IpAddr::V6(ip) => ip,
            };
            metrics
                .edge_limited
                .record(&EDGE, u128::from(bucket), seen.now);
        }
    }
    if let Some(list) = &seen.deny_list {
        tracing::debug!(%client_ip, list, "refused: on a deny list");
    }
    if let Some(call) = &seen.store_call {
        store_call(runtime, call);
    }
    match &seen.limits {
        LimitsSeen::Uncounted => {}
        LimitsSeen::Allowed {
            applied,
            degraded,
            shadow_denied,
        } => {
            // A limit decided by the local fallback counts as `fallback`, not `allowed`.
            let by_store = applied
                .iter()
                .filter(|index| !degraded.iter().any(|(d, _)| d == *index));
            for &index in by_store {
                runtime.limit_counters[index].allowed.inc();
            }
            for &(index, on_error) in degraded {
                let decision = match on_error {
                    OnError::Local => "fallback",
                    OnError::Allow | OnError::Deny => "error_allowed",
                };
                metrics.count_limit(&runtime.limiter.rules[index].name, decision);
            }
            for limit in shadow_denied {
                metrics.count_limit(limit, "shadow_denied");
                tracing::info!(limit = &**limit, %client_ip, route = %route, "shadow limit would have denied");
            }
        }
        LimitsSeen::Denied { rule, identity } => {
            runtime.limit_counters[*rule].denied.inc();
            if let Some(limit) = refused_by {
                metrics.limited.record(limit, *identity, seen.now);
            }
        }
        LimitsSeen::Unavailable => {
            if let Some(limit) = refused_by {
                metrics.count_limit(limit, "error_denied");
            }
        }
    }
}

/// `rlp_store_duration_seconds` and, with a Redis store, `rlp_store_errors_total`.
fn store_call(runtime: &Runtime, call: &StoreCall) {
    runtime.store_latency.observe(call.took.as_secs_f64());
    let Some(redis) = runtime.limiter.stores().redis() else {
        return;
    };
    if let Some(error) = &call.error {
        let (backend, kind) = (redis.backend(), error.kind());
        runtime
            .metrics
            .store_errors
            .get_or_create(&BackendKind { backend, kind })
            .inc();
    }
}
