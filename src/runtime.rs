//! The runtime: everything a request needs, built once from a validated config, what a
//! reload keeps of the previous one (limit state, edge buckets, upstream health and idle
//! connections, the clock), and the background tasks it starts.

mod stores;

use std::sync::Arc;

use http::HeaderName;
use prometheus_client::metrics::histogram::Histogram;
use tokio_util::sync::CancellationToken;

use crate::admission::admit::Gate;
use crate::admission::edge::EdgeLayer;
use crate::admission::limiter::Limiter;
use crate::config::{Config, DeniedLines, ResponseStyle};
use crate::limit::key::KeyPart;
use crate::metrics::{LimitCounters, Metrics, RouteMetrics, UpstreamMetrics};
use crate::request::canonical::{self, TrailerFilter};
use crate::request::client_fields::ClientFields;
use crate::request::client_ip::ClientIpPolicy;
use crate::request::route::Router;
use crate::rt::clock::Clock;
use crate::settle::Settler;
use crate::store::redis::StoreError;
use crate::upstream::background;
use crate::upstream::exchange::ClientDeadlines;
use crate::upstream::pool::UpstreamPool;

/// Everything a request needs, built once from a validated config.
pub(crate) struct Runtime {
    /// How requests are put in canonical form (`[server]` settings).
    pub canonical: canonical::Policy,
    pub router: Router,
    pub upstreams: Vec<Arc<UpstreamPool>>,
    pub max_header_bytes: usize,
    pub client_ip: ClientIpPolicy,
    /// Which of a client's fields naming it go upstream; shared by every request.
    pub client_fields: Arc<ClientFields>,
    pub edge: Option<EdgeLayer>,
    pub limiter: Limiter,
    /// Settles what the limits with a charge reserved, by the answers.
    pub settler: Arc<Settler>,
    pub response: ResponseStyle,
    /// `[log] access`: one line per request.
    pub access_log: bool,
    /// `[log] denied`: which of the refused requests' lines.
    pub denied_lines: DeniedLines,
    pub clock: Arc<dyn Clock>,
    /// Shared by every runtime of a gateway, across reloads.
    pub metrics: Arc<Metrics>,
    /// Metric handles made once per runtime, so requests allocate no labels: by route index,
    /// by upstream index, and the allowed/denied counters by limit index.
    pub route_metrics: Vec<RouteMetrics>,
    pub upstream_metrics: Vec<UpstreamMetrics>,
    pub limit_counters: Vec<LimitCounters>,
    pub store_latency: Histogram,
    /// The gateway's open tunnels, kept across reloads (see `ClientDeadlines::tunnels`).
    pub tunnels: tokio_util::task::TaskTracker,
}

impl Runtime {
    #[cfg(test)]
    pub(crate) fn new(config: &Config, metrics: Arc<Metrics>) -> Result<Runtime, rustls::Error> {
        Runtime::build(
            config,
            Arc::new(crate::rt::clock::SystemClock::new()),
            metrics,
            None,
        )
    }

    /// The runtime of a reloaded config: it keeps the limit state of `previous` (limits whose
    /// rates changed get fresh identities), its edge buckets when `[edge]` is unchanged, its
    /// clock, and what its pools know of servers whose definition is unchanged (health, idle
    /// connections; see `UpstreamPool::succeeding`).
    pub(crate) fn succeeding(
        config: &Config,
        previous: &Runtime,
    ) -> Result<Runtime, rustls::Error> {
        Runtime::build(
            config,
            previous.clock.clone(),
            previous.metrics.clone(),
            Some(previous),
        )
    }

    pub(crate) fn build(
        config: &Config,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        previous: Option<&Runtime>,
    ) -> Result<Runtime, rustls::Error> {
        let tunnels = previous.map(|p| p.tunnels.clone()).unwrap_or_default();
        let client_deadlines =
            ClientDeadlines::new(&config.server, metrics.timeouts.clone(), tunnels.clone());
        let upstreams: Result<Vec<_>, _> = config
            .upstreams
            .iter()
            .map(|u| {
                let before = previous.and_then(|p| p.upstreams.iter().find(|b| b.name == u.name));
                let deadlines = client_deadlines.clone();
                UpstreamPool::succeeding(u, deadlines, config.server.workers, before.map(|b| &**b))
                    .map(Arc::new)
            })
            .collect();
        let stores = stores::stores(config, previous.map(|p| p.limiter.stores()), &*clock);
        let limiter = Limiter::new(
            config.limits.clone(),
            config.plans.clone(),
            config.store.hash_secret.as_deref(),
            stores,
        );
        let settler = Settler::new(
            &limiter.rules,
            (
                limiter.stores().memory.clone(),
                limiter.stores().shared.clone(),
            ),
            clock.clone(),
            &metrics.settles,
            config.log.access,
        );
        let store_latency = metrics.store_latency(limiter.backend());
        if limiter.stores().redis().is_some() {
            metrics.zero_store_errors(limiter.backend(), &StoreError::KINDS);
        }
        let previous_edge = previous.and_then(|p| p.edge.as_ref());
        Ok(Runtime {
            canonical: canonical_policy(config),
            router: Router::new(&config.routes),
            upstreams: upstreams?,
            max_header_bytes: config.server.max_header_bytes,
            client_ip: config.client_ip.clone(),
            client_fields: config.client_fields.clone(),
            edge: config
                .edge
                .clone()
                .map(|policy| EdgeLayer::reusing(policy, previous_edge)),
            limiter,
            settler: Arc::new(settler),
            response: config.response.clone(),
            access_log: config.log.access,
            denied_lines: config.log.denied,
            clock,
            route_metrics: config
                .routes
                .iter()
                .map(|r| metrics.route(&r.name))
                .collect(),
            upstream_metrics: config
                .upstreams
                .iter()
                .map(|u| metrics.upstream(&u.name))
                .collect(),
            limit_counters: config
                .limits
                .iter()
                .map(|l| metrics.limit_counters(&l.name))
                .collect(),
            store_latency,
            metrics,
            tunnels,
        })
    }

    /// The layers admission passes a request through.
    pub(crate) fn gate(&self) -> Gate<'_> {
        Gate {
            edge: self.edge.as_ref(),
            limiter: &self.limiter,
        }
    }

    /// Starts the background work of this runtime (health checks, closing idle upstream
    /// connections) until `stop`.
    pub(crate) fn start_background(&self, stop: &CancellationToken) {
        background::spawn_checkers(&self.upstreams, stop);
        if let Some(sync) = self.lease_sync() {
            tokio::spawn(sync.run(stop.clone()));
        }
        let pools = self.upstreams.clone();
        tokio::spawn(background::close_expired_until(pools, stop.clone()));
    }
}

/// The canonical form settings of `config`. Trailers never carry a field its limits or plans
/// key on, nor one naming the client that a head would lose (`[client_ip] remove_fields`).
fn canonical_policy(config: &Config) -> canonical::Policy {
    let plans_key = config.plans.as_ref().map(|plans| &plans.key);
    let keys: Vec<HeaderName> = (config.limits.iter())
        .flat_map(|limit| &limit.key)
        .chain(plans_key)
        .filter_map(|part| match part {
            KeyPart::Header(name) => Some(name.clone()),
            _ => None,
        })
        .chain(config.client_fields.removed().cloned())
        .collect();
    let underscores = config.server.underscores;
    canonical::Policy {
        escaped_slashes: config.server.escaped_slashes,
        underscores,
        allow_trace: config.server.allow_trace,
        trailers: Arc::new(TrailerFilter::new(keys, underscores)),
    }
}
