//! Metric names and registration (docs/operations.md: `/metrics` under "Admin endpoints", and
//! "Metrics"), in Prometheus text on the admin listener. One `Metrics` lives as long as the
//! gateway, across reloads;
//! gauges that describe the current runtime (tracked IPs, upstream health) are refreshed when
//! scraped.

use std::sync::{Arc, OnceLock};

mod exposition;
mod labels;
mod plumbing;
mod process;
mod settles;
mod syncs;
#[cfg(test)]
mod tests;
mod timeouts;

pub(crate) use exposition::Exposition;
pub(crate) use labels::{
    BackendKind, BackendLabel, DecisionLabel, LabelText, LimitDecisionLabels, NodeLabel,
    ResultLabel, RouteCode, RouteLabel, UpstreamCode, UpstreamLabel, UpstreamServerLabels,
};
pub(crate) use settles::{SettleCounters, SettleFamilies, SettleOutcome};
pub(crate) use syncs::SyncMetrics;
pub(crate) use timeouts::{Deadline, TimeoutCounters};

use crate::limit::heavy_hitters::HeavyHitters;
pub(crate) use labels::EdgeDecision;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

fn latency_histogram() -> Histogram {
    // 100 µs to ~13 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// `rlp_limit_decisions_total` handles of one limit for the decisions every request makes;
/// rarer ones (shadow, store errors) are looked up by label when they happen.
#[derive(Clone)]
pub(crate) struct LimitCounters {
    pub allowed: Counter,
    pub denied: Counter,
}

pub(crate) struct Metrics {
    registry: Registry,
    pub requests: Family<RouteCode, Counter>,
    pub request_duration: Family<RouteLabel, Histogram, fn() -> Histogram>,
    pub limit_decisions: Family<LimitDecisionLabels, Counter>,
    pub edge_decisions: Family<DecisionLabel, Counter>,
    /// `edge_decisions` by `EdgeDecision`, each fetched on its first count (a series appears
    /// once it counts, as before): a label lookup hashed and locked on every request.
    edge_counters: [OnceLock<Counter>; EdgeDecision::COUNT],
    pub edge_tracked_ips: Gauge,
    pub upstream_healthy: Family<UpstreamServerLabels, Gauge>,
    pub config_reloads: Family<ResultLabel, Counter>,
    pub upstream_requests: Family<UpstreamCode, Counter>,
    pub upstream_duration: Family<UpstreamLabel, Histogram, fn() -> Histogram>,
    pub in_flight: Family<RouteLabel, Gauge>,
    pub store_duration: Family<BackendLabel, Histogram, fn() -> Histogram>,
    pub store_errors: Family<BackendKind, Counter>,
    /// By Redis node (a cluster's masters), refreshed when scraped.
    pub store_breaker_open: Family<NodeLabel, Gauge>,
    /// The most-denied identities, for /debug/limited.
    pub limited: HeavyHitters,
    /// The addresses (grouped by `ipv6_prefix`, as an IPv6 number) the edge layer denied most,
    /// for /debug/limited.
    pub edge_limited: HeavyHitters,
    /// `rlp_requests_total{route=""}`: requests no route matched.
    no_route: CountersByStatus,
    /// `rlp_timeouts_total{kind}`.
    pub timeouts: TimeoutCounters,
    /// The lease syncs of approximate limits.
    pub syncs: SyncMetrics,
    /// The limits that settle by their answer.
    pub settles: SettleFamilies,
}

/// The counters of one series family member by status code, each fetched from its family
/// (a label hash and a lock) the first time its code is seen, then kept: a request counts
/// itself with one atomic add.
pub(crate) struct CountersByStatus {
    /// Codes 100 to 599; others (which `http` allows up to 999) always go to the family.
    counters: Box<[OnceLock<Counter>]>,
    fetch: Box<dyn Fn(u16) -> Counter + Send + Sync>,
}

impl CountersByStatus {
    fn new(fetch: impl Fn(u16) -> Counter + Send + Sync + 'static) -> CountersByStatus {
        CountersByStatus {
            counters: (100..600).map(|_| OnceLock::new()).collect(),
            fetch: Box::new(fetch),
        }
    }

    pub(crate) fn inc(&self, code: u16) {
        match self.counters.get(usize::from(code).wrapping_sub(100)) {
            Some(slot) => slot.get_or_init(|| (self.fetch)(code)).inc(),
            None => (self.fetch)(code).inc(),
        };
    }
}

/// Handles of one route's series, so a request's duration, in-flight count and answer need no
/// label lookups.
#[derive(Clone)]
pub(crate) struct RouteMetrics {
    requests: Arc<CountersByStatus>,
    duration: Histogram,
    in_flight: Gauge,
}

/// Handles of one upstream's series.
pub(crate) struct UpstreamMetrics {
    requests: CountersByStatus,
    latency: Histogram,
}

impl RouteMetrics {
    /// Counts a request in flight until the guard is dropped.
    pub(crate) fn enter(&self) -> InFlightGauge {
        self.in_flight.inc();
        InFlightGauge(self.in_flight.clone())
    }
}

/// Counts a request in `rlp_in_flight` until dropped (with the response body).
pub(crate) struct InFlightGauge(Gauge);

impl Drop for InFlightGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn requests_of(family: &Family<RouteCode, Counter>, route: &str) -> CountersByStatus {
    let (family, route) = (family.clone(), LabelText::from(route));
    CountersByStatus::new(move |code| {
        let route = route.clone();
        family.get_or_create(&RouteCode { route, code }).clone()
    })
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let requests = Family::<RouteCode, Counter>::default();
        let timeouts = Family::<timeouts::KindLabel, Counter>::default();
        let mut registry = Registry::default();
        let syncs = syncs::register(&mut registry);
        let settles = SettleFamilies::default();
        settles.register(&mut registry);
        let mut metrics = Metrics {
            registry,
            syncs,
            settles,
            no_route: requests_of(&requests, ""),
            requests,
            request_duration: Family::new_with_constructor(latency_histogram),
            limit_decisions: Family::default(),
            edge_decisions: Family::default(),
            edge_counters: Default::default(),
            edge_tracked_ips: Gauge::default(),
            upstream_healthy: Family::default(),
            config_reloads: Family::default(),
            upstream_requests: Family::default(),
            upstream_duration: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
            store_duration: Family::new_with_constructor(latency_histogram),
            store_errors: Family::default(),
            store_breaker_open: Family::default(),
            limited: HeavyHitters::default(),
            edge_limited: HeavyHitters::default(),
            timeouts: TimeoutCounters::of(&timeouts),
        };
        // Series an alert watches start at 0: one that appears at its first count has no
        // `increase` for it.
        for result in ["success", "failure"] {
            let _ = metrics
                .config_reloads
                .get_or_create(&ResultLabel { result });
        }
        metrics.register_answers();
        metrics.register_upstreams_and_store();
        metrics.registry.register(
            "rlp_timeouts",
            "Deadlines that fired, by kind (the timeout table of docs/operations.md)",
            timeouts,
        );
        process::register(&mut metrics.registry);
        plumbing::register(&mut metrics.registry);
        metrics
    }

    /// The answers by route, the limit and edge decisions, upstream health and reloads.
    fn register_answers(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "rlp_requests",
            "Requests answered, by route and status",
            self.requests.clone(),
        );
        registry.register(
            "rlp_request_duration_seconds",
            "Time to the response head, by route",
            self.request_duration.clone(),
        );
        registry.register(
            "rlp_limit_decisions",
            "Limit decisions by limit and decision",
            self.limit_decisions.clone(),
        );
        registry.register(
            "rlp_edge_decisions",
            "Edge layer decisions",
            self.edge_decisions.clone(),
        );
        registry.register(
            "rlp_edge_tracked_ips",
            "Client IPs with a bucket in memory",
            self.edge_tracked_ips.clone(),
        );
        registry.register(
            "rlp_upstream_healthy",
            "1 when an upstream server may take traffic",
            self.upstream_healthy.clone(),
        );
        registry.register(
            "rlp_config_reloads",
            "Config reloads by result",
            self.config_reloads.clone(),
        );
    }

    /// The upstreams' answers, requests in flight, and the limit store.
    fn register_upstreams_and_store(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "rlp_upstream_requests",
            "Upstream answers by upstream and status",
            self.upstream_requests.clone(),
        );
        registry.register(
            "rlp_upstream_duration_seconds",
            "Time to the upstream response head",
            self.upstream_duration.clone(),
        );
        registry.register(
            "rlp_in_flight",
            "Requests being answered, by route",
            self.in_flight.clone(),
        );
        registry.register(
            "rlp_store_duration_seconds",
            "Time to decide a request's limits",
            self.store_duration.clone(),
        );
        registry.register(
            "rlp_store_errors",
            "Limit store failures by backend and kind",
            self.store_errors.clone(),
        );
        registry.register(
            "rlp_store_breaker_open",
            "Whether the circuit breaker of a Redis node is open (1) or closed (0)",
            self.store_breaker_open.clone(),
        );
    }

    /// The OpenMetrics text exposition.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }

    /// The exposition in `format` (see `Exposition::negotiate`).
    pub(crate) fn encode_as(&self, format: Exposition) -> String {
        match format {
            Exposition::OpenMetrics => self.encode(),
            Exposition::Classic => exposition::classic_from_openmetrics(&self.encode()),
        }
    }

    /// The handles of one route's series, fetched once per runtime.
    pub(crate) fn route(&self, route: &str) -> RouteMetrics {
        let label = RouteLabel {
            route: LabelText::from(route),
        };
        RouteMetrics {
            requests: Arc::new(requests_of(&self.requests, route)),
            duration: self.request_duration.get_or_create(&label).clone(),
            in_flight: self.in_flight.get_or_create(&label).clone(),
        }
    }

    /// The series of one upstream, fetched once per runtime.
    pub(crate) fn upstream(&self, upstream: &str) -> UpstreamMetrics {
        let label = UpstreamLabel {
            upstream: LabelText::from(upstream),
        };
        let (family, upstream) = (self.upstream_requests.clone(), label.upstream.clone());
        UpstreamMetrics {
            requests: CountersByStatus::new(move |code| {
                let upstream = upstream.clone();
                family
                    .get_or_create(&UpstreamCode { upstream, code })
                    .clone()
            }),
            latency: self.upstream_duration.get_or_create(&label).clone(),
        }
    }

    /// The `rlp_store_duration_seconds` histogram of one backend, fetched once per runtime.
    pub(crate) fn store_latency(&self, backend: &'static str) -> Histogram {
        self.store_duration
            .get_or_create(&BackendLabel { backend })
            .clone()
    }

    /// Makes the `rlp_store_errors_total` series of `backend`, at 0, one per `kinds`.
    pub(crate) fn zero_store_errors(&self, backend: &'static str, kinds: &[&'static str]) {
        for &kind in kinds {
            let _ = self
                .store_errors
                .get_or_create(&BackendKind { backend, kind });
        }
    }

    /// The counters of one limit's common decisions, fetched once per runtime.
    pub(crate) fn limit_counters(&self, limit: &str) -> LimitCounters {
        let counter = |decision| {
            let labels = LimitDecisionLabels {
                limit: LabelText::from(limit),
                decision,
            };
            self.limit_decisions.get_or_create(&labels).clone()
        };
        LimitCounters {
            allowed: counter("allowed"),
            denied: counter("denied"),
        }
    }

    /// Counts an answered request; `route` is None when no route matched.
    pub(crate) fn observe_request(
        &self,
        route: Option<&RouteMetrics>,
        code: u16,
        took: std::time::Duration,
    ) {
        match route {
            Some(route) => {
                route.requests.inc(code);
                route.duration.observe(took.as_secs_f64());
            }
            None => {
                self.no_route.inc(code);
                self.request_duration
                    .get_or_create(&RouteLabel {
                        route: LabelText::default(),
                    })
                    .observe(took.as_secs_f64());
            }
        }
    }

    /// Counts an upstream answer.
    pub(crate) fn observe_upstream(
        &self,
        upstream: &UpstreamMetrics,
        code: u16,
        took: std::time::Duration,
    ) {
        upstream.requests.inc(code);
        upstream.latency.observe(took.as_secs_f64());
    }

    pub(crate) fn count_edge(&self, decision: EdgeDecision) {
        self.edge_counters[decision as usize]
            .get_or_init(|| {
                let label = DecisionLabel {
                    decision: decision.label(),
                };
                self.edge_decisions.get_or_create(&label).clone()
            })
            .inc();
    }

    pub(crate) fn count_limit(&self, limit: &str, decision: &'static str) {
        self.limit_decisions
            .get_or_create(&LimitDecisionLabels {
                limit: LabelText::from(limit),
                decision,
            })
            .inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
