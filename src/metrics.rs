//! Metric names and registration (README "Admin endpoints"), in Prometheus text on the admin
//! listener.
//! One `Metrics` lives as long as the gateway, across reloads; gauges that describe the current
//! runtime (tracked IPs, upstream health) are refreshed when scraped.

use std::sync::{Arc, OnceLock};

mod timeouts;

pub use timeouts::{Deadline, TimeoutCounters};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::edge::EdgeVerdict;
use crate::limit::heavy_hitters::HeavyHitters;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A label value from the config (a route's, upstream's or limit's name, a server's address),
/// escaped as the text format requires: prometheus-client writes label values as they are, and
/// one quote, backslash or newline in a name would make the whole scrape unreadable.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct LabelText(String);

impl From<&str> for LabelText {
    fn from(text: &str) -> LabelText {
        LabelText(text.to_string())
    }
}

impl EncodeLabelValue for LabelText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteCode {
    pub route: LabelText,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitDecisionLabels {
    pub limit: LabelText,
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabel {
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamCode {
    pub upstream: LabelText,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabel {
    pub upstream: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabel {
    pub backend: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendKind {
    pub backend: &'static str,
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    /// A Redis node's `host:port`.
    pub node: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamServerLabels {
    pub upstream: LabelText,
    pub server: LabelText,
}

fn latency_histogram() -> Histogram {
    // 100 µs to ~13 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// `rlp_limit_decisions_total` handles of one limit for the decisions every request makes;
/// rarer ones (shadow, store errors) are looked up by label when they happen.
#[derive(Clone)]
pub struct LimitCounters {
    pub allowed: Counter,
    pub denied: Counter,
}

pub struct Metrics {
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
    /// `rlp_requests_total{route=""}`: requests no route matched.
    no_route: CountersByStatus,
    /// `rlp_timeouts_total{kind}`.
    pub timeouts: TimeoutCounters,
}

/// The counters of one series family member by status code, each fetched from its family
/// (a label hash and a lock) the first time its code is seen, then kept: a request counts
/// itself with one atomic add.
pub struct CountersByStatus {
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

    pub fn inc(&self, code: u16) {
        match self.counters.get(usize::from(code).wrapping_sub(100)) {
            Some(slot) => slot.get_or_init(|| (self.fetch)(code)).inc(),
            None => (self.fetch)(code).inc(),
        };
    }
}

/// Handles of one route's series, so a request's duration, in-flight count and answer need no
/// label lookups.
#[derive(Clone)]
pub struct RouteMetrics {
    requests: Arc<CountersByStatus>,
    duration: Histogram,
    in_flight: Gauge,
}

/// Handles of one upstream's series.
pub struct UpstreamMetrics {
    requests: CountersByStatus,
    latency: Histogram,
}

impl RouteMetrics {
    /// Counts a request in flight until the guard is dropped.
    pub fn enter(&self) -> InFlightGauge {
        self.in_flight.inc();
        InFlightGauge(self.in_flight.clone())
    }
}

/// Counts a request in `rlp_in_flight` until dropped (with the response body).
pub struct InFlightGauge(Gauge);

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
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<RouteCode, Counter>::default();
        let request_duration =
            Family::<RouteLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            );
        let limit_decisions = Family::<LimitDecisionLabels, Counter>::default();
        let edge_decisions = Family::<DecisionLabel, Counter>::default();
        let edge_tracked_ips = Gauge::default();
        let upstream_healthy = Family::<UpstreamServerLabels, Gauge>::default();
        let config_reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "rlp_requests",
            "Requests answered, by route and status",
            requests.clone(),
        );
        registry.register(
            "rlp_request_duration_seconds",
            "Time to the response head, by route",
            request_duration.clone(),
        );
        registry.register(
            "rlp_limit_decisions",
            "Limit decisions by limit and decision",
            limit_decisions.clone(),
        );
        registry.register(
            "rlp_edge_decisions",
            "Edge layer decisions",
            edge_decisions.clone(),
        );
        registry.register(
            "rlp_edge_tracked_ips",
            "Client IPs with a bucket in memory",
            edge_tracked_ips.clone(),
        );
        registry.register(
            "rlp_upstream_healthy",
            "1 when an upstream server may take traffic",
            upstream_healthy.clone(),
        );
        registry.register(
            "rlp_config_reloads",
            "Config reloads by result",
            config_reloads.clone(),
        );
        let upstream_requests = Family::<UpstreamCode, Counter>::default();
        let upstream_duration =
            Family::<UpstreamLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            );
        let in_flight = Family::<RouteLabel, Gauge>::default();
        let store_duration =
            Family::<BackendLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            );
        let store_errors = Family::<BackendKind, Counter>::default();
        let store_breaker_open = Family::<NodeLabel, Gauge>::default();
        registry.register(
            "rlp_upstream_requests",
            "Upstream answers by upstream and status",
            upstream_requests.clone(),
        );
        registry.register(
            "rlp_upstream_duration_seconds",
            "Time to the upstream response head",
            upstream_duration.clone(),
        );
        registry.register(
            "rlp_in_flight",
            "Requests being answered, by route",
            in_flight.clone(),
        );
        registry.register(
            "rlp_store_duration_seconds",
            "Time to decide a request's limits",
            store_duration.clone(),
        );
        registry.register(
            "rlp_store_errors",
            "Limit store failures by backend and kind",
            store_errors.clone(),
        );
        registry.register(
            "rlp_store_breaker_open",
            "Whether the circuit breaker of a Redis node is open (1) or closed (0)",
            store_breaker_open.clone(),
        );
        let timeouts = Family::<timeouts::KindLabel, Counter>::default();
        registry.register(
            "rlp_timeouts",
            "Deadlines that fired, by kind (the README's timeout table)",
            timeouts.clone(),
        );
        let no_route = requests_of(&requests, "");
        Metrics {
            timeouts: TimeoutCounters::of(&timeouts),
            no_route,
            registry,
            requests,
            request_duration,
            limit_decisions,
            edge_decisions,
            edge_counters: Default::default(),
            edge_tracked_ips,
            upstream_healthy,
            config_reloads,
            upstream_requests,
            upstream_duration,
            in_flight,
            store_duration,
            store_errors,
            store_breaker_open,
            limited: HeavyHitters::default(),
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }

    /// The handles of one route's series, fetched once per runtime.
    pub fn route(&self, route: &str) -> RouteMetrics {
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
    pub fn upstream(&self, upstream: &str) -> UpstreamMetrics {
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
    pub fn store_latency(&self, backend: &'static str) -> Histogram {
        self.store_duration
            .get_or_create(&BackendLabel { backend })
            .clone()
    }

    /// The counters of one limit's common decisions, fetched once per runtime.
    pub fn limit_counters(&self, limit: &str) -> LimitCounters {
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
    pub fn observe_request(
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
    pub fn observe_upstream(
        &self,
        upstream: &UpstreamMetrics,
        code: u16,
        took: std::time::Duration,
    ) {
        upstream.requests.inc(code);
        upstream.latency.observe(took.as_secs_f64());
    }

    pub fn count_edge(&self, decision: EdgeDecision) {
        self.edge_counters[decision as usize]
            .get_or_init(|| {
                let label = DecisionLabel {
                    decision: decision.label(),
                };
                self.edge_decisions.get_or_create(&label).clone()
            })
            .inc();
    }

    pub fn count_limit(&self, limit: &str, decision: &'static str) {
        self.limit_decisions
            .get_or_create(&LimitDecisionLabels {
                limit: LabelText::from(limit),
                decision,
            })
            .inc();
    }
}

/// The `decision` label of `rlp_edge_decisions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeDecision {
    Allowed,
    Exempt,
    Forbidden,
    Denied,
}

impl EdgeDecision {
    const COUNT: usize = 4;

    pub fn of(verdict: &EdgeVerdict) -> EdgeDecision {
        match verdict {
            EdgeVerdict::Allow => EdgeDecision::Allowed,
            EdgeVerdict::Exempt => EdgeDecision::Exempt,
            EdgeVerdict::Forbidden { .. } => EdgeDecision::Forbidden,
            EdgeVerdict::Limited { .. } => EdgeDecision::Denied,
        }
    }

    fn label(self) -> &'static str {
        match self {
            EdgeDecision::Allowed => "allowed",
            EdgeDecision::Exempt => "exempt",
            EdgeDecision::Forbidden => "forbidden",
            EdgeDecision::Denied => "denied",
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn answers_are_counted_by_route_and_code_in_the_family_series() {
        let metrics = Metrics::new();
        let api = metrics.route("api");
        let upstream = metrics.upstream("backend");
        for code in [200, 200, 429, 999] {
            metrics.observe_request(Some(&api), code, Duration::from_millis(1));
            metrics.observe_upstream(&upstream, code, Duration::from_millis(1));
        }
        metrics.observe_request(None, 404, Duration::from_millis(1));
        let text = metrics.encode();
        for line in [
            r#"rlp_requests_total{route="api",code="200"} 2"#,
            r#"rlp_requests_total{route="api",code="429"} 1"#,
            r#"rlp_requests_total{route="api",code="999"} 1"#,
            r#"rlp_requests_total{route="",code="404"} 1"#,
            r#"rlp_upstream_requests_total{upstream="backend",code="200"} 2"#,
            r#"rlp_upstream_requests_total{upstream="backend",code="999"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        // A second runtime's handles (after a reload) count into the same series.
        metrics.observe_request(Some(&metrics.route("api")), 200, Duration::ZERO);
        assert!(
            metrics
                .encode()
                .contains(r#"rlp_requests_total{route="api",code="200"} 3"#)
        );
    }

    #[test]
    fn edge_decisions_are_counted_by_label_and_appear_once_counted() {
        let metrics = Metrics::new();
        let allowed = || EdgeVerdict::Allow;
        let forbidden = || EdgeVerdict::Forbidden {
            list: "blocked".into(),
        };
        for verdict in [allowed(), allowed(), forbidden(), EdgeVerdict::Exempt] {
            metrics.count_edge(EdgeDecision::of(&verdict));
        }
        let text = metrics.encode();
        for line in [
            r#"rlp_edge_decisions_total{decision="allowed"} 2"#,
            r#"rlp_edge_decisions_total{decision="forbidden"} 1"#,
            r#"rlp_edge_decisions_total{decision="exempt"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"decision="denied""#), "{text}");
    }

    #[test]
    fn names_with_quotes_backslashes_or_newlines_are_escaped_in_label_values() {
        let metrics = Metrics::new();
        let route = metrics.route("say \"hi\"\\now\nplease");
        metrics.observe_request(Some(&route), 200, Duration::ZERO);
        metrics.limit_counters("per\"key").allowed.inc();
        let text = metrics.encode();
        assert!(
            text.contains(r#"rlp_requests_total{route="say \"hi\"\\now\nplease",code="200"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"rlp_limit_decisions_total{limit="per\"key",decision="allowed"} 1"#),
            "{text}"
        );
        // Every sample line stays one line with its label block closed.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.contains("} ") || !line.contains('{'), "{line}");
        }
    }
}
